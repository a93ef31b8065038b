/* remat.h: the one public header of libremat.
 *
 * remat trains neural networks under a memory budget by activation
 * recomputation ("remat", gradient checkpointing): the forward pass keeps
 * only some activations and the backward pass recomputes the rest.
 *
 * A training step goes through these phases, each in its own folder of src/:
 *   graph/  build a static graph (ops only record nodes) and derive the
 *           backward graph by reverse-mode autodiff;
 *   plan/   cut it into a chain of stages, choose which values to keep or
 *           recompute, emit an instruction list and lay out the activation
 *           arena from the liveness of that list;
 *   exec/   run the instruction list, with no allocation per step.
 *
 * Errors: every call that can fail returns an rm_status; the handle it was
 * given keeps a one-line message (rm_graph_errmsg, rm_session_errmsg), as
 * SQLite does. Graph builders return a value id, or -1 after an error; the
 * first error sticks and later builder calls do nothing, so a model can be
 * built without checking every call and checked once at rm_compile.
 */
#ifndef REMAT_H
#define REMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RM_VERSION "0.1.0"

typedef enum rm_status {
    RM_OK = 0,
    RM_ERR_ARG,      /* a bad argument: shape mismatch, unknown name, bad flag */
    RM_ERR_NOMEM,    /* an allocation failed */
    RM_ERR_IO,       /* a file could not be read or written */
    RM_ERR_FORMAT,   /* a file is malformed */
    RM_ERR_STATE,    /* a call made at the wrong time (e.g. step before compile) */
    RM_ERR_BUDGET,   /* a memory budget cannot be met */
    RM_ERR_VERIFY    /* a recomputed value differs from its first computation */
} rm_status;

const char *rm_status_name(rm_status s);

typedef enum rm_dtype { RM_DTYPE_F32 = 0, RM_DTYPE_I32 = 1 } rm_dtype;

typedef struct rm_graph rm_graph;     /* a static graph being built */
typedef struct rm_session rm_session; /* a compiled graph: plan + arena + params */
typedef int rm_val;                   /* a value (tensor) of a graph; -1 = none */

#define RM_MAX_DIMS 4

/* ---- building a graph --------------------------------------------------- */

rm_graph *rm_graph_new(void);
void rm_graph_free(rm_graph *g);
const char *rm_graph_errmsg(const rm_graph *g);
rm_status rm_graph_status(const rm_graph *g);

/* Inputs are fed by the caller before each step (tokens, targets, features). */
rm_val rm_input(rm_graph *g, const char *name, rm_dtype dt, int ndim, const int64_t *shape);

/* A constant int32 input whose contents the graph copies now (e.g. the
 * position ids 0..T-1 of a GPT); the session fills it at compile time. */
rm_val rm_constant_i32(rm_graph *g, const char *name, int ndim, const int64_t *shape, const int32_t *data);

/* Parameter initialisation kinds. */
typedef enum rm_init { RM_INIT_ZEROS = 0, RM_INIT_ONES, RM_INIT_NORMAL } rm_init;
/* A trainable fp32 parameter; `decay` says whether weight decay applies. */
rm_val rm_param(rm_graph *g, const char *name, int ndim, const int64_t *shape,
                rm_init init, float std, int decay);

/* Non-trainable state saved with the parameters (e.g. running statistics). */
rm_val rm_state(rm_graph *g, const char *name, int ndim, const int64_t *shape, rm_init init);

/* Ops. Shapes: N is any number of rows (the product of leading dims). */
rm_val rm_embedding(rm_graph *g, rm_val ids, rm_val table);     /* ids (..) i32, table (V,C) -> (..,C) */
rm_val rm_linear(rm_graph *g, rm_val x, rm_val w, rm_val b);     /* x (..,IN), w (OUT,IN), b (OUT) or -1 */
rm_val rm_add(rm_graph *g, rm_val a, rm_val b);                  /* same shapes */
rm_val rm_layernorm(rm_graph *g, rm_val x, rm_val w, rm_val b);  /* over the last dim, eps 1e-5 */
rm_val rm_gelu(rm_graph *g, rm_val x);                           /* tanh approximation */
rm_val rm_relu(rm_graph *g, rm_val x);
rm_val rm_dropout(rm_graph *g, rm_val x, float p);               /* inverted dropout, Philox masks */
rm_val rm_attention(rm_graph *g, rm_val qkv, int heads);         /* qkv (B,T,3C) -> (B,T,C), causal */
rm_val rm_softmax_ce(rm_graph *g, rm_val logits, rm_val targets);/* logits (..,V), targets (..) i32 -> scalar mean */

/* Batch normalisation over the rows of x (N,C), as PyTorch's BatchNorm1d in
 * training mode (eps 1e-5, momentum 0.1, unbiased running variance).
 * running_mean/var are rm_state values; they are updated once per step, never
 * again by a recomputation. rm_forward normalises with them. */
rm_val rm_batchnorm(rm_graph *g, rm_val x, rm_val w, rm_val b, rm_val running_mean, rm_val running_var);

/* A user-defined elementwise op: y = forward(x); backward adds dL/dx into dx.
 * Both must be deterministic: a recomputation must reproduce y exactly
 * (rm_options.verify_recompute checks it). */
typedef void (*rm_custom_forward)(const float *x, float *y, int64_t n, void *user);
typedef void (*rm_custom_backward)(const float *x, const float *dy, float *dx, int64_t n, void *user);
rm_val rm_custom(rm_graph *g, const char *name, rm_val x, rm_custom_forward forward, rm_custom_backward backward,
                 void *user);

/* Stages: every node recorded after rm_stage_begin belongs to that stage.
 * A model is a chain of stages; the recompute planner works per stage. */
rm_status rm_stage_begin(rm_graph *g, const char *name);

/* Manual recompute regions: nodes recorded between begin and end are not
 * kept after the forward pass; they are recomputed right before the backward
 * of their stage. Regions may nest. User marks override the strategy. */
rm_status rm_recompute_begin(rm_graph *g);
rm_status rm_recompute_end(rm_graph *g);
/* Per-value policy: always keep it, or always recompute it. */
typedef enum rm_policy { RM_POLICY_DEFAULT = 0, RM_POLICY_SAVE, RM_POLICY_RECOMPUTE } rm_policy;
rm_status rm_set_policy(rm_graph *g, rm_val v, rm_policy p);

/* The scalar to minimise. Without a loss the graph is forward-only. */
rm_status rm_set_loss(rm_graph *g, rm_val loss);
/* Keep a value readable after a step (it is never freed early). */
rm_status rm_mark_output(rm_graph *g, rm_val v);

/* ---- compiling and running ---------------------------------------------- */

typedef struct rm_options {
    int threads;            /* OpenMP and BLAS threads; 0 = all cores */
    uint64_t seed;          /* parameter init and dropout masks */
    const char *checkpoint; /* recompute strategy; NULL or "none" stores all */
    int forward_only;       /* plan no backward pass (inference, sampling) */
    int verify_recompute;   /* hash values when computed and recomputed; differ -> RM_ERR_VERIFY */
    const char *memory_budget; /* "64MiB", "1.5GiB", "500MB" or "50%": plan to fit (strategy auto) */
    int dry_run;            /* plan only: allocate no arena, run no profiling step */
} rm_options;

void rm_options_default(rm_options *o);

/* Compile takes ownership of nothing: the graph must outlive the session. */
rm_status rm_compile(rm_graph *g, const rm_options *o, rm_session **out);
void rm_session_free(rm_session *s);
const char *rm_session_errmsg(const rm_session *s);

/* Storage of an input or parameter (or of a marked output after a step). */
void *rm_value_data(rm_session *s, rm_val v);
/* Gradient of a parameter after rm_step. */
float *rm_grad(rm_session *s, rm_val v);
int64_t rm_numel(const rm_graph *g, rm_val v);
int rm_shape(const rm_graph *g, rm_val v, int64_t shape[RM_MAX_DIMS]);
const char *rm_name(const rm_graph *g, rm_val v);

/* One forward + backward: parameter gradients are overwritten, loss returned.
 * `step` keys the dropout masks, so a step is reproducible. */
rm_status rm_step(rm_session *s, uint64_t step, float *loss);
/* Forward only (dropout off); loss is NULL-able when the graph has none. */
rm_status rm_forward(rm_session *s, float *loss);

/* Threads used when rm_options.threads is 0 (all cores), and whether this
 * build multiplies matrices with OpenBLAS (1) or the portable GEMM (0). */
int rm_default_threads(void);
int rm_gemm_has_blas(void);

/* Memory facts of a compiled session. */
typedef struct rm_memory_info {
    size_t activation_bytes_planned;  /* peak of live activation bytes, from the plan */
    size_t activation_bytes_measured; /* peak observed while running */
    size_t activation_arena_bytes;    /* size of the arena (>= planned) */
    size_t param_bytes, grad_bytes;
    int n_instructions;
} rm_memory_info;
void rm_memory(const rm_session *s, rm_memory_info *m);

/* The cost of the plan: FLOPs per training step of the first forward, the
 * recomputations and the backward; the predicted overhead against storing
 * everything (recompute / (forward + backward) FLOPs); and the measured
 * milliseconds of each kind of instruction in the last rm_step. */
typedef struct rm_plan_info {
    const char *strategy;
    int n_stages;
    double flops_forward, flops_recompute, flops_backward;
    double predicted_overhead;
    double ms_forward, ms_recompute, ms_backward;
    double measured_overhead; /* ms_recompute / (ms_forward + ms_backward) */
    /* with memory_budget: the budget, store-all's arena, the least feasible budget */
    size_t budget_bytes, store_all_bytes, min_budget_bytes;
} rm_plan_info;
void rm_plan(const rm_session *s, rm_plan_info *p);
/* The measured overhead of the last rm_step alone (ms_recompute over
 * ms_forward + ms_backward): cheap enough to call after every step. */
double rm_step_overhead(const rm_session *s);
/* Notes about user marks that overrode the strategy ("" if none). */
const char *rm_plan_notes(const rm_session *s);
/* Lists, per stage, the values kept for the backward pass and the values
 * recomputed, with their bytes (like JAX's print_saved_residuals). */
void rm_print_plan(const rm_session *s, FILE *f);

/* Planning for a chain profiled elsewhere (any framework). chain_json is
 * {"stages": [{"uf":..,"ub":..,"a":..,"ab":..,"ft":..,"bt":..}, ...]} with the
 * loss last; *result_json (free() it) is {"feasible", "time", "peak_bytes",
 * "min_budget_bytes", "sequence": ["Fck 0", "Fn 1", ..., "L 6", "B 5", ...]}.
 * An infeasible budget returns RM_ERR_BUDGET with the JSON still filled. */
rm_status rm_plan_chain(const char *chain_json, int64_t budget, char **result_json, char *err, size_t errlen);
/* The trade-off table (budget -> time, overhead, peak) as CSV, `points`
 * budgets from the minimum feasible to store-all. */
rm_status rm_plan_chain_sweep(const char *chain_json, int points, FILE *csv, char *err, size_t errlen);

/* Parameters, in the order they were created. */
int rm_param_count(const rm_graph *g);
rm_val rm_param_at(const rm_graph *g, int i);
int rm_param_decay(const rm_graph *g, rm_val v);
/* 1 for trainable parameters, 0 for state (rm_state). */
int rm_param_trainable(const rm_graph *g, rm_val v);

/* ---- models ------------------------------------------------------------- */

/* The values a model exposes to its caller. Absent ones are -1. */
typedef struct rm_model_io {
    rm_val tokens;   /* (B,T) i32: GPT input ids */
    rm_val features; /* (B,T) f32: MLP input window, ids scaled to [0,1] */
    rm_val targets;  /* (B,T) i32 for the GPT, (B) i32 for the MLP */
    rm_val logits;   /* (B,T,V) or (B,V) */
    rm_val loss;     /* scalar */
} rm_model_io;

/* GPT-2-style decoder (nanoGPT names and layouts, tied head). */
typedef struct rm_gpt_config {
    int layers, dim, heads, context, vocab, batch;
    float dropout;   /* on embeddings and on both residual branches */
    int keep_logits; /* mark logits as an output (sampling) */
} rm_gpt_config;
rm_status rm_gpt_build(rm_graph *g, const rm_gpt_config *c, rm_model_io *io);

/* A chain of Linear(+ReLU) layers: context -> widths[0] -> ... -> vocab. */
#define RM_MLP_MAX_LAYERS 256
typedef struct rm_mlp_config {
    int context, vocab, batch;
    int n_widths;
    int widths[RM_MLP_MAX_LAYERS]; /* hidden widths */
    float dropout;                 /* after every hidden ReLU */
    int batchnorm;                 /* BatchNorm between each hidden Linear and its ReLU */
    int keep_logits;
} rm_mlp_config;
rm_status rm_mlp_build(rm_graph *g, const rm_mlp_config *c, rm_model_io *io);

/* ---- optimizer ---------------------------------------------------------- */

typedef enum rm_optim_kind { RM_OPTIM_ADAMW = 0, RM_OPTIM_SGD } rm_optim_kind;
typedef struct rm_optim rm_optim;
typedef struct rm_optim_config {
    rm_optim_kind kind;
    float beta1, beta2, eps, weight_decay; /* AdamW: 0.9, 0.95, 1e-8, 0.1 */
    float grad_clip;                        /* global-norm clip; 0 disables */
} rm_optim_config;
void rm_optim_config_default(rm_optim_config *c);
rm_status rm_optim_new(rm_session *s, const rm_optim_config *c, rm_optim **out);
void rm_optim_free(rm_optim *o);
/* Applies one update with learning rate lr; returns the pre-clip grad norm. */
rm_status rm_optim_step(rm_optim *o, float lr, float *grad_norm);

/* ---- files -------------------------------------------------------------- */

/* Writes every parameter to a .safetensors file with the given metadata
 * (n pairs of key/value strings). The write is atomic (temp + rename). */
rm_status rm_save_params(rm_session *s, const char *path, int n_meta,
                         const char *const *keys, const char *const *values,
                         char *err, size_t errlen);
/* Loads parameters by name; every parameter of the graph must be present
 * with the same shape and dtype F32. */
rm_status rm_load_params(rm_session *s, const char *path, char *err, size_t errlen);

/* Checkpoint files: the whole training state, to resume exactly
 * (docs/CHECKPOINT_FILES.md). rm_save_params also writes the checksum
 * (metadata "remat_checksum", a SHA-256 of tensors and metadata), and
 * rm_load_params refuses a file whose checksum does not hold. */
/* The optimizer's state: the AdamW moments (its own buffers, laid out as the
 * parameters; NULL for SGD) and the number of updates applied (AdamW's bias
 * correction). Write into m and v, and set t, to restore a saved state. */
rm_status rm_optim_state(rm_optim *o, float **m, float **v, uint64_t *t);
rm_status rm_optim_set_updates(rm_optim *o, uint64_t t);
/* Writes the parameters and, with o, the AdamW moments of the trainable ones
 * as "optimizer.m.<name>" and "optimizer.v.<name>" and the update count as
 * the metadata "optimizer_updates", then the caller's metadata and the
 * checksum. Atomic, as rm_save_params. */
rm_status rm_save_state(rm_session *s, rm_optim *o, const char *path, int n_meta,
                        const char *const *keys, const char *const *values,
                        char *err, size_t errlen);
/* Loads what rm_save_state wrote into s and o (NULL: parameters only). The
 * checksum must be present and hold. On any error nothing is changed. */
rm_status rm_load_state(rm_session *s, rm_optim *o, const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
