/* internal.h: the data structures shared by graph/, plan/, exec/ and ops/.
 * Not installed; users see only include/remat.h. */
#ifndef REMAT_INTERNAL_H
#define REMAT_INTERNAL_H

#include "remat.h"
#include <stdarg.h>
#include <stdbool.h>

#define RM_MAX_IN 6   /* inputs of one node */
#define RM_MAX_OUT 3  /* outputs of one node: [0] main, others auxiliary */
#define RM_NAME_LEN 96
#define RM_ALIGN 64   /* arena offsets are multiples of this */

/* ---- values ------------------------------------------------------------- */

typedef enum rm_value_kind {
    RM_VALUE_ACT = 0,  /* produced by a node; lives in the activation arena */
    RM_VALUE_INPUT,    /* fed by the caller; fixed storage */
    RM_VALUE_PARAM,    /* trainable; fixed storage, gradient in the grad buffer */
    RM_VALUE_GRAD      /* gradient of an activation; lives in the arena */
} rm_value_kind;

typedef struct rm_value {
    rm_value_kind kind;
    rm_dtype dtype;
    int ndim;
    int64_t shape[RM_MAX_DIMS];
    int64_t numel;
    char name[RM_NAME_LEN];
    int node;     /* producing node (ACT), or the forward value (GRAD: of) */
    int grad;     /* value id of this value's gradient, -1 if none */
    int stage;    /* stage of the producing node, -1 for inputs/params */
    int is_output;
    rm_policy policy;  /* the user's keep/recompute tag (rm_set_policy) */
    /* PARAM: init and offset into the flat parameter buffer (in floats) */
    rm_init init;
    float init_std;
    int decay;
    int trainable;     /* PARAM: 0 for state such as running statistics */
    size_t param_off;
    size_t input_off; /* INPUT: byte offset into the input buffer */
    int32_t *const_data; /* INPUT made by rm_constant_i32: its contents */
} rm_value;

/* ---- nodes -------------------------------------------------------------- */

typedef enum rm_op_kind {
    RM_OP_EMBEDDING = 0,
    RM_OP_LINEAR,
    RM_OP_ADD,
    RM_OP_LAYERNORM,
    RM_OP_GELU,
    RM_OP_RELU,
    RM_OP_DROPOUT,
    RM_OP_ATTENTION,
    RM_OP_SOFTMAX_CE,
    RM_OP_BATCHNORM,
    RM_OP_CUSTOM,
    RM_OP_COUNT
} rm_op_kind;

typedef struct rm_node {
    rm_op_kind op;
    int n_in, n_out;
    int in[RM_MAX_IN];    /* value ids; -1 for an absent optional input */
    int out[RM_MAX_OUT];
    int stage;
    int iarg[2];          /* op-specific integer arguments (e.g. heads) */
    float farg[2];        /* op-specific float arguments (e.g. dropout p) */
    rm_custom_forward custom_forward; /* RM_OP_CUSTOM callbacks */
    rm_custom_backward custom_backward;
    void *custom_user;
    int needs_grad;       /* some input needs a gradient */
    int user_recompute;   /* recorded inside rm_recompute_begin/end */
} rm_node;

/* ---- ops: each op file defines one rm_op_def ------------------------------ */

/* Everything a kernel sees. Pointers are NULL where a tensor is absent:
 * e.g. din[i] is NULL when input i needs no gradient. */
typedef struct rm_kernel_ctx {
    const rm_node *node;
    const rm_value *vin[RM_MAX_IN];   /* shapes of the inputs */
    const rm_value *vout[RM_MAX_OUT]; /* shapes of the outputs */
    void *in[RM_MAX_IN];
    void *out[RM_MAX_OUT];
    float *dout[RM_MAX_OUT];          /* gradients of the outputs (backward) */
    float *din[RM_MAX_IN];            /* gradients of the inputs (backward) */
    int acc[RM_MAX_IN];               /* 1: add into din[i]; 0: overwrite it */
    void *work;                       /* workspace of workspace() bytes */
    int threads;
    uint64_t seed, step;              /* dropout keys */
    int node_id;
    int train;                        /* 0 in rm_forward: dropout is identity */
    int recompute;                    /* 1 when rebuilding values: skip side effects */
} rm_kernel_ctx;

typedef struct rm_op_def {
    const char *name;
    /* Which forward tensors the backward reads: bit i = input i,
     * bit (RM_MAX_IN + j) = output j. Everything else may be freed. */
    unsigned bwd_reads;
    void (*forward)(const rm_kernel_ctx *c);
    void (*backward)(const rm_kernel_ctx *c);
    /* Floating-point operations of forward and backward (for cost models). */
    double (*flops)(const rm_node *n, const rm_value *vals, int backward);
    /* Scratch bytes needed during forward (0) or backward (1); may be NULL. */
    size_t (*workspace)(const rm_node *n, const rm_value *vals, int backward, int threads);
    /* The forward has a side effect (e.g. running statistics) that it skips
     * when c->recompute is set, so recomputation never repeats it. */
    int side_effect;
} rm_op_def;

#define RM_READS_IN(i) (1u << (i))
#define RM_READS_OUT(j) (1u << (RM_MAX_IN + (j)))

const rm_op_def *rm_op_get(rm_op_kind k);

/* ---- the graph ------------------------------------------------------------ */

typedef struct rm_stage_info {
    char name[RM_NAME_LEN];
} rm_stage_info;

struct rm_graph {
    rm_value *vals;
    int n_vals, cap_vals;
    rm_node *nodes;
    int n_nodes, cap_nodes;
    rm_stage_info *stages;
    int n_stages, cap_stages;
    int *params; /* value ids of parameters, in creation order */
    int n_params, cap_params;
    int loss;    /* value id or -1 */
    int diffed;  /* rm_autodiff has run */
    int region_depth; /* open rm_recompute_begin regions */
    size_t param_floats; /* total size of the flat parameter buffer */
    size_t input_bytes;  /* total size of the input buffer */
    rm_status status;
    char errmsg[256];
};

/* Sets the graph's sticky error and returns the status. */
rm_status rm_graph_fail(rm_graph *g, rm_status s, const char *fmt, ...);
/* For op builders (the files of ops/): is v a valid value id of g (and no error yet)? */
int rm_val_ok(rm_graph *g, rm_val v, const char *op);
/* Records a node of the current stage; returns its id or -1 (error set). */
int rm_node_new(rm_graph *g, rm_op_kind op, const int *in, int n_in);
/* Adds an output value to node `node` (named after the op and node id);
 * returns the value id or -1. */
rm_val rm_node_output(rm_graph *g, int node, rm_dtype dt, int ndim, const int64_t *shape);
/* Rows of a value seen as (N, last dim): the product of leading dims. */
static inline int64_t rm_rows(const rm_value *v) { return v->numel / v->shape[v->ndim - 1]; }
static inline int64_t rm_cols(const rm_value *v) { return v->shape[v->ndim - 1]; }

/* graph/autodiff.c: marks the nodes whose backward must run and creates a
 * GRAD value for every activation the loss depends on through a parameter. */
rm_status rm_autodiff(rm_graph *g);

/* ---- the step program ------------------------------------------------------ */

typedef enum rm_instr_kind {
    RM_INSTR_FORWARD = 0, /* run node's forward (first time) */
    RM_INSTR_RECOMPUTE,   /* run node's forward again, to rebuild freed values */
    RM_INSTR_BACKWARD     /* run node's backward */
} rm_instr_kind;

/* One instruction of a step. Buffer ids index rm_program.bufs. */
typedef struct rm_instr {
    rm_instr_kind kind;
    int node;
    int in_buf[RM_MAX_IN];   /* buffer holding each input (-1: external/absent) */
    int out_buf[RM_MAX_OUT]; /* forward: buffers defined; backward: buffers of fwd outputs read */
    int dout_buf[RM_MAX_OUT];
    int din_buf[RM_MAX_IN];
    int acc[RM_MAX_IN];
    int work_buf;            /* workspace buffer or -1 */
    int n_free;              /* buffers whose life ends after this instruction */
    int free_at;             /* index into rm_program.frees */
} rm_instr;

/* A buffer is one lifetime of one value in the arena: a value recomputed
 * has one buffer per computation. */
typedef struct rm_buffer {
    int value;       /* value id, or -1 for a workspace */
    size_t bytes;    /* rounded up to RM_ALIGN */
    int first, last; /* instruction indices of definition and last use */
    size_t offset;   /* in the arena, from the memory planner */
} rm_buffer;

typedef struct rm_program {
    rm_instr *instrs;
    int n_instrs, cap_instrs;
    rm_buffer *bufs;
    int n_bufs, cap_bufs;
    int *frees;
    int n_frees, cap_frees;
    int *final_buf;         /* value -> its buffer at the end of the step, or -1 */
    size_t peak_live_bytes; /* max over instructions of the sum of live buffers */
    size_t arena_bytes;     /* max over buffers of offset + bytes */
} rm_program;

void rm_program_free(rm_program *p);

/* An ordered list of (node, forward/recompute/backward): what a strategy
 * decides. Liveness and buffers follow from the order alone. */
typedef struct rm_sched_item {
    rm_instr_kind kind;
    int node;
} rm_sched_item;

typedef struct rm_schedule {
    rm_sched_item *items;
    int n, cap;
} rm_schedule;

rm_status rm_schedule_push(rm_schedule *s, rm_instr_kind k, int node);
void rm_schedule_free(rm_schedule *s);

/* plan/chain.c: the graph as a chain of stages. Empty stages are skipped;
 * chain stage i covers nodes [first[i], last[i]] and receives exactly one
 * activation, input[i] (-1 for the first), from chain stage i-1. */
typedef struct rm_chain {
    int n;
    int *first, *last, *input, *graph_stage;
} rm_chain;
rm_status rm_chain_build(const rm_graph *g, rm_chain *c, char *err, size_t errlen);
void rm_chain_free(rm_chain *c);

/* plan/schedule.c: the schedule of a strategy. Notes about user marks that
 * overrode the strategy are appended to `notes`. */
rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward,
                            rm_schedule *out, char *notes, size_t notes_len, char *err, size_t errlen);
/* Appends RECOMPUTE items for the nodes among [lo, hi] that `want` marks and
 * that are needed to rebuild `also` (if >= 0) and, with for_backward, what
 * the backwards of [lo, hi] read. */
rm_status rm_schedule_recompute(const rm_graph *g, int lo, int hi, const char *want, rm_val also,
                                int for_backward, rm_schedule *out);
rm_status rm_schedule_backward(const rm_graph *g, int lo, int hi, rm_schedule *out);
/* The nodes the selective policy recomputes: layernorm, GELU, dropout, attention. */
void rm_selective_mask(const rm_graph *g, char *want);

/* plan/revolve.c: Griewank-Walther binomial checkpointing. */
/* Fewest stage re-advances to reverse l stages with s slots (x0 counts as one). */
long rm_revolve_cost(int l, int s);
/* The closed form p(l,s) = t l - C(s+t, s+1), for tests. */
long rm_revolve_closed_form(int l, int s);
rm_status rm_schedule_revolve(const rm_graph *g, const rm_chain *c, int slots, rm_schedule *out,
                              char *err, size_t errlen);

/* A measured training step, in ms: per graph stage (forward, backward) and
 * per node (its first forward, and its last recomputation if it had one), so
 * recomputations can be priced. */
typedef struct rm_profile {
    double *stage_fwd, *stage_bwd, *node_fwd, *node_rec;
    double cold; /* recomputations over first forwards, where both were measured (0: none) */
} rm_profile;
/* What recomputing a node costs: as measured when the profiled plan
 * recomputed it (inputs are colder in the backward pass than in the
 * forward), else its first forward scaled by the profile's `cold` ratio. */
static inline double rm_profile_recompute_ms(const rm_profile *p, int node) {
    return p->node_rec[node] > 0 ? p->node_rec[node] : p->node_fwd[node] * (p->cold > 0 ? p->cold : 1.0);
}
/* exec/session.c: zeroed arrays for g (0: out of memory, nothing held); a copy. */
int rm_profile_alloc(rm_profile *p, const rm_graph *g);
int rm_profile_copy(rm_profile *dst, const rm_profile *src, const rm_graph *g);
void rm_profile_free(rm_profile *p);

/* plan/report.c: what a program's recomputations cost: ms from the
 * profile (rm_profile_recompute_ms), or FLOPs when prof is NULL. */
double rm_recompute_cost(const rm_graph *g, const rm_program *p, const rm_profile *prof);

/* plan/planner.c: the fastest schedule that fits `budget` arena bytes.
 * prof: a measured step, or NULL for FLOP estimates. */
struct rm_chain_model;
struct rm_rotor_op;
typedef struct rm_auto_info {
    int64_t min_budget;        /* smallest budget a plan fits in (-1: none) */
    char chosen[32];           /* "rotor", or the uniform strategy that beat it */
} rm_auto_info;
rm_status rm_schedule_auto(const rm_graph *g, int64_t budget, int slots, int threads, const rm_profile *prof,
                           const rm_program *none, rm_schedule *out, rm_auto_info *info, char *err, size_t errlen);
rm_status rm_chain_model_from_graph(const rm_graph *g, const rm_chain *c, const rm_profile *prof, int threads,
                                    const rm_program *store_all, struct rm_chain_model *m);
int64_t rm_planner_min_budget(const rm_graph *g, const rm_chain *c, const struct rm_chain_model *m, int slots,
                              int threads, int64_t store_all);
/* "64MiB", "1.5GiB", "500MB", "123456" -> bytes; "50%" -> 50 with *percent = 1. */
rm_status rm_parse_bytes(const char *s, double *bytes, int *percent);

/* plan/lower.c: schedule items from stage operations (plan/rotor.h). */
struct rm_rotor_op;
rm_status rm_schedule_lower(const rm_graph *g, const rm_chain *c, const struct rm_rotor_op *ops, int n_ops,
                            rm_schedule *out, char *err, size_t errlen);
/* plan/program.c: instructions + buffers from a schedule (liveness). */
rm_status rm_program_build(const rm_graph *g, const rm_schedule *s, int threads,
                           rm_program *p, char *err, size_t errlen);
/* plan/memplan.c: offsets of the buffers in one arena. */
void rm_memplan(rm_program *p);

/* ---- the session ----------------------------------------------------------- */

struct rm_session {
    rm_graph *g;
    rm_options opt;
    int threads;
    rm_program train;   /* forward + backward */
    rm_program infer;   /* forward only */
    unsigned char *arena;
    size_t arena_bytes;
    float *params;      /* one allocation for all parameters */
    float *grads;       /* and one for their gradients */
    unsigned char *inputs;
    const rm_program *last; /* the program run last (for rm_data of outputs) */
    float loss_seed;    /* d(loss)/d(loss) = 1 */
    int poison;         /* fill freed buffers with NaN (tests: catches use after free) */
    size_t measured_peak;
    char notes[512];    /* user marks that overrode the strategy */
    uint64_t *hashes;   /* verify_recompute: per value, hash of its first computation */
    /* memory_budget (strategy auto): the figures of the plan */
    int64_t budget_bytes, store_all_bytes;
    rm_auto_info autoplan;
    rm_profile prof;    /* the profiling step's timing (NULL arrays: none) */
    /* timing of the last training step, by instruction kind, in ms */
    double ms_forward, ms_recompute, ms_backward;
    rm_profile timing;  /* and per stage and node */
    char errmsg[256];
};

rm_status rm_session_fail(rm_session *s, rm_status st, const char *fmt, ...);
/* exec/session.c: schedule + program + memory layout of a strategy. */
rm_status rm_session_program(rm_session *s, const char *strategy, int backward, rm_program *p);
/* plan/budget.c: strategy auto for a session (memory_budget set). */
rm_status rm_budget_program(rm_session *s, const rm_profile *prof, rm_program *out);
rm_status rm_budget_profile(rm_session *s);
rm_status rm_execute(rm_session *s, const rm_program *p, uint64_t step, int train);

/* ---- utilities --------------------------------------------------------------- */

/* Row-major single-precision GEMM: C = alpha*op(A)*op(B) + beta*C. Uses
 * cblas_sgemm when built with BLAS, else a portable blocked kernel. */
void rm_sgemm(int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta,
              float *C, int ldc);
void rm_gemm_fallback(int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc);
void rm_set_threads(int n);  /* sets OpenMP and BLAS threads */

/* Counter-based random numbers (Philox4x32-10): the same key and counter
 * always give the same four 32-bit words, so masks recompute exactly. */
void rm_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);
/* Uniform float in [0,1) for element `i` of the stream keyed by (seed, a, b). */
float rm_philox_uniform(uint64_t seed, uint32_t a, uint32_t b, uint64_t i);
/* Standard normal for element i of the stream (Box-Muller on Philox). */
float rm_philox_normal(uint64_t seed, uint32_t a, uint32_t b, uint64_t i);

size_t rm_dtype_size(rm_dtype d);
void rm_strlcpy(char *dst, const char *src, size_t n);

#endif
