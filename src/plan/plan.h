/* plan/plan.h: what the plan/ folder offers: schedules (what to run in
 * which order), the chain of stages, the strategies, the instruction list
 * with its buffers, and the memory layout of the arena. */
#ifndef REMAT_PLAN_H
#define REMAT_PLAN_H

#include "graph/graph.h"
#include "ops/ops.h"

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

#endif
