/* graph/graph.h: what the graph/ folder offers: values, nodes, the graph
 * being recorded, and autodiff. Op builders (ops/) record nodes through
 * rm_node_new and rm_node_output. */
#ifndef REMAT_GRAPH_H
#define REMAT_GRAPH_H

#include "remat.h"
#include "util/util.h"
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
    int trainable;     /* PARAM: 0 for state such as running statistics, and for frozen parameters */
    int frozen;        /* PARAM: frozen (rm_param_freeze): no gradient, no optimizer state, never written */
    int adapter;       /* PARAM: a LoRA adapter (rm_lora_linear): a weights file may lack it */
    rm_dtype store;    /* PARAM: how its values are kept: F32, or BF16/F16 for a frozen one (rm_param_store) */
    size_t param_off;
    size_t input_off; /* INPUT: byte offset into the input buffer */
    int32_t *const_data; /* INPUT made by rm_constant_i32: its contents */
    int64_t const_period; /* INPUT made by rm_positions: element i is i % const_period (no data kept) */
} rm_value;

/* A constant input: the session writes it once, the caller never does. */
static inline int rm_value_constant(const rm_value *v) { return v->const_data || v->const_period; }

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
    RM_OP_RMSNORM,
    RM_OP_MUL,
    RM_OP_SILU,
    RM_OP_ROPE,
    RM_OP_XATTENTION,
    RM_OP_CONCAT,
    RM_OP_SWIGLU,
    RM_OP_LINEAR_CE,
    RM_OP_LORA,
    RM_OP_COUNT
} rm_op_kind;

typedef struct rm_node {
    rm_op_kind op;
    const char *opname;   /* the op's name (rm_op_def.name), for messages and value names */
    int n_in, n_out;
    int in[RM_MAX_IN];    /* value ids; -1 for an absent optional input */
    int out[RM_MAX_OUT];
    int stage;
    int iarg[3];          /* op-specific integer arguments (e.g. heads) */
    float farg[2];        /* op-specific float arguments (e.g. dropout p) */
    rm_custom_forward custom_forward; /* RM_OP_CUSTOM callbacks */
    rm_custom_backward custom_backward;
    void *custom_user;
    int needs_grad;       /* some input needs a gradient */
    int user_recompute;   /* recorded inside rm_recompute_begin/end */
    int bf16;             /* exec/precision.c: its products take bf16 inputs (--precision bf16) */
} rm_node;

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
    int *param_names; /* open-addressed set of params[] indices by name (-1: empty), name_slots a power of 2 */
    int name_slots;
    int loss;    /* value id or -1 */
    int diffed;  /* rm_autodiff has run */
    int region_depth; /* open rm_recompute_begin regions */
    size_t param_floats; /* total size of the flat parameter buffer */
    /* The flat parameter buffer's layout, fixed at the first rm_compile
     * (rm_graph_layout): trainable parameters in [0, train_floats), so the
     * gradients and the optimizer's moments are [0, train_floats) with the
     * same offsets; then state (running statistics) in [train_floats,
     * state_end); then frozen parameters up to param_floats. */
    size_t train_floats, state_end;
    int laid_out;        /* rm_graph_layout ran: parameters can no longer be frozen */
    size_t input_bytes;  /* total size of the input buffer */
    /* set by rm_compile while it plans a session with fuse_optimizer: the
     * step programs built from the graph (the planner's candidates too) give
     * parameter gradients arena buffers (program/program.c) */
    int fuse_grads;
    /* exec/precision.c: the precision the values' dtypes encode, and how
     * many live sessions use it */
    rm_precision precision;
    int precision_users;
    /* sessions compiled from it and not yet freed; rm_graph_free while some
     * live only marks it (freed): the last rm_session_free frees it */
    int sessions, freed;
    rm_status status;
    char errmsg[1024]; /* room for a memory limit's whole breakdown (exec/limit.c) */
};

/* A session of g is freed: frees g too when rm_graph_free came first. */
void rm_graph_session_done(rm_graph *g);

/* Sets the graph's sticky error and returns the status. */
rm_status rm_graph_fail(rm_graph *g, rm_status s, const char *fmt, ...);
/* For op builders (the files of ops/): is v a valid value id of g (and no error yet)? */
int rm_val_ok(rm_graph *g, rm_val v, const char *op);
/* Records a node of the current stage; returns its id or -1 (error set).
 * Op builders call it through rm_op_node (ops/ops.h). */
int rm_node_new(rm_graph *g, rm_op_kind op, const char *opname, const int *in, int n_in);
/* Adds an output value to node `node` (named after the op and node id);
 * returns the value id or -1. */
rm_val rm_node_output(rm_graph *g, int node, rm_dtype dt, int ndim, const int64_t *shape);
/* rm_input on a graph compiled already: autodiff's gradient values (they
 * take no input storage; rm_input itself refuses a compiled graph). */
rm_val rm_input_value(rm_graph *g, const char *name, rm_dtype dt, int ndim, const int64_t *shape);
/* (B,T) position ids 0..T-1 of every row, a constant input the session
 * writes at compile time (the graph keeps no B*T array: a plan of any size
 * allocates nothing of that size). */
rm_val rm_positions(rm_graph *g, const char *name, int64_t B, int64_t T);
/* Rows of a value seen as (N, last dim): the product of leading dims. */
static inline int64_t rm_rows(const rm_value *v) { return v->numel / v->shape[v->ndim - 1]; }
static inline int64_t rm_cols(const rm_value *v) { return v->shape[v->ndim - 1]; }

/* Lays out the flat parameter buffer (trainable | state | frozen; see
 * rm_graph.train_floats); from then on no parameter can be frozen. */
void rm_graph_layout(rm_graph *g);

/* graph/autodiff.c: marks the nodes whose backward must run and creates a
 * GRAD value for every activation the loss depends on through a parameter. */
rm_status rm_autodiff(rm_graph *g);
/* Does any node or value carry a user mark (rm_recompute_begin/end, rm_set_policy)? */
int rm_graph_has_marks(const rm_graph *g);

#endif
