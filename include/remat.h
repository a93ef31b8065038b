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
 *
 * Threads. Per session: rm_options.threads (0: all cores) is the number of
 * OpenMP threads its kernels use; every rm_step/rm_forward (and the
 * profiling step of rm_compile with a budget) first sets the thread count
 * of OpenMP and of OpenBLAS to it. Those two counts are process-wide, so
 * they belong to the last session that ran. A handle (graph, session,
 * optimizer, rm_file, dataset) must be used by one thread at a time;
 * running two sessions at once from two threads is not supported (each
 * would reset the other's thread counts and oversubscribe the cores). The
 * library has no other global mutable state: parsers, data samplers,
 * schedules and files are reentrant. Results are bit-for-bit reproducible
 * for a given thread count (OpenBLAS may round differently at another).
 * Idle OpenMP threads spin before they sleep, as long as the environment
 * said when the OpenMP runtime loaded (libgomp: GOMP_SPINCOUNT, 300000 by
 * default); on a machine shared with other work, GOMP_SPINCOUNT=10000 or
 * OMP_WAIT_POLICY=passive makes steps much faster. The remat command sets
 * GOMP_SPINCOUNT=10000 itself unless either is set (docs/PERFORMANCE.md).
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
/* The version of the library linked at run time (RM_VERSION is the header's). */
const char *rm_version(void);

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

/* "RM_OK", "RM_ERR_ARG", ...: the name of a status, for messages. */
const char *rm_status_name(rm_status s);

/* BF16 and F16 (bfloat16, IEEE half) are only ever the storage of a frozen
 * parameter (rm_param_store): values, inputs and gradients are F32 or I32. */
typedef enum rm_dtype { RM_DTYPE_F32 = 0, RM_DTYPE_I32 = 1, RM_DTYPE_BF16 = 2, RM_DTYPE_F16 = 3 } rm_dtype;

typedef struct rm_graph rm_graph;     /* a static graph being built */
typedef struct rm_session rm_session; /* a compiled graph: plan + arena + params */
typedef int rm_val;                   /* a value (tensor) of a graph; -1 = none */

#define RM_MAX_DIMS 4

/* ---- building a graph --------------------------------------------------- */

/* A new, empty graph (NULL when out of memory); rm_graph_free(NULL) does nothing. */
rm_graph *rm_graph_new(void);
void rm_graph_free(rm_graph *g);
/* The graph's first error: its message ("" if none) and its status (RM_OK if none).
 * rm_compile failures are reported here too. */
const char *rm_graph_errmsg(const rm_graph *g);
rm_status rm_graph_status(const rm_graph *g);

/* Inputs are fed by the caller before each step (tokens, targets, features). */
rm_val rm_input(rm_graph *g, const char *name, rm_dtype dt, int ndim, const int64_t *shape);

/* A constant int32 input whose contents the graph copies now (e.g. the
 * position ids 0..T-1 of a GPT); the session fills it at compile time. */
rm_val rm_constant_i32(rm_graph *g, const char *name, int ndim, const int64_t *shape, const int32_t *data);

/* Parameter initialisation kinds. RM_INIT_UNIFORM: uniform in [-std, std)
 * (std is the bound; LoRA's A: Kaiming-uniform, bound 1/sqrt(fan_in)). */
typedef enum rm_init { RM_INIT_ZEROS = 0, RM_INIT_ONES, RM_INIT_NORMAL, RM_INIT_UNIFORM } rm_init;
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
/* Records a custom op on x (y has x's shape); user is passed to both. */
rm_val rm_custom(rm_graph *g, const char *name, rm_val x, rm_custom_forward forward, rm_custom_backward backward,
                 void *user);

/* ---- ops of LLaMA-style, encoder-decoder and U-shaped models (issue 11) ---- */
/* RMS normalisation over the last dim: x / sqrt(mean(x^2) + eps) * w; w (C). LLaMA: eps 1e-6. */
rm_val rm_rmsnorm(rm_graph *g, rm_val x, rm_val w, float eps);
rm_val rm_mul(rm_graph *g, rm_val a, rm_val b);                  /* elementwise a * b, same shapes */
rm_val rm_silu(rm_graph *g, rm_val x);                           /* x * sigmoid(x) */
/* SwiGLU's gate in one op: silu(gate) * up, same shapes (faster than rm_mul of rm_silu) */
rm_val rm_swiglu(rm_graph *g, rm_val gate, rm_val up);
/* Rotary position embedding of x (B,T,C) as `heads` heads, Hugging Face LLaMA's
 * convention (rotate_half pairs each head's first and second halves); the
 * position of a row is its index along T; theta: 10000 in LLaMA. */
rm_val rm_rope(rm_graph *g, rm_val x, int heads, float theta);
/* Multi-head attention with queries q (B,Tq,C) and keys/values k, v (B,Tk,C)
 * -> (B,Tq,C). causal: query i sees keys j <= i. key_mask: (B,Tk) i32, 0 marks
 * a padding key no query sees, or -1 for none. A query with no visible key
 * gets zeros. */
rm_val rm_attention_general(rm_graph *g, rm_val q, rm_val k, rm_val v, rm_val key_mask, int heads, int causal);
/* The same with grouped-query attention: q (B,Tq,heads*hd), k and v
 * (B,Tk,kv_heads*hd), kv_heads dividing heads; query head h reads key/value
 * head h / (heads/kv_heads), as Hugging Face's repeat_kv. kv_heads = heads
 * is rm_attention_general. */
rm_val rm_attention_gqa(rm_graph *g, rm_val q, rm_val k, rm_val v, rm_val key_mask, int heads, int kv_heads,
                        int causal);
rm_val rm_concat(rm_graph *g, rm_val a, rm_val b);               /* (..,Ca), (..,Cb) -> (..,Ca+Cb) */
/* rm_softmax_ce where rows whose target is ignore_id (e.g. PAD) count for
 * nothing: the mean is over the other rows (0 if none), as PyTorch's ignore_index. */
rm_val rm_softmax_ce_ignore(rm_graph *g, rm_val logits, rm_val targets, int32_t ignore_id);
/* A language model's head and loss in one op: the mean cross-entropy of
 * the logits x W^T (x (..,C), W (V,C), targets (..) i32) computed in chunks
 * of rows, so the (N,V) logits, probabilities and their gradient are never
 * stored (N floats are kept; the backward computes x W^T again). rm_softmax_ce
 * of rm_linear(x, W, -1) up to rounding. llama uses it unless keep_logits. */
rm_val rm_linear_ce(rm_graph *g, rm_val x, rm_val w, rm_val targets);

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
/* Sets v's policy (RM_ERR_ARG for a value that is not an activation). */
rm_status rm_set_policy(rm_graph *g, rm_val v, rm_policy p);

/* The scalar to minimise. Without a loss the graph is forward-only. */
rm_status rm_set_loss(rm_graph *g, rm_val loss);
/* Keep a value readable after a step (it is never freed early). */
rm_status rm_mark_output(rm_graph *g, rm_val v);

/* ---- compiling and running ---------------------------------------------- */

/* Recompute strategies (docs/RECOMPUTE.md): which activations the forward
 * pass keeps; the rest are recomputed before the backward of their stage. */
typedef enum rm_strategy {
    RM_STRATEGY_NONE = 0,  /* keep everything */
    RM_STRATEGY_BLOCKS,    /* keep each stage's input */
    RM_STRATEGY_SEGMENTS,  /* strategy_param K: keep the input of K near-equal segments */
    RM_STRATEGY_SQRT,      /* segments of sqrt(stages) */
    RM_STRATEGY_SELECTIVE, /* recompute only the cheap ops (layernorm, GELU, dropout, attention) */
    RM_STRATEGY_REVOLVE    /* strategy_param S: Griewank-Walther binomial checkpointing, S slots */
} rm_strategy;

/* The optimizer (rm_optim_new); known to the session from rm_compile on. */
typedef enum rm_optim_kind { RM_OPTIM_ADAMW = 0, RM_OPTIM_SGD } rm_optim_kind;
typedef struct rm_optim rm_optim;
typedef struct rm_optim_config {
    rm_optim_kind kind;
    float beta1, beta2, eps, weight_decay; /* AdamW: 0.9, 0.95, 1e-8, 0.1 */
    float grad_clip;                        /* global-norm clip; 0 disables */
} rm_optim_config;
/* The defaults above (AdamW, grad_clip 1.0). */
void rm_optim_config_default(rm_optim_config *c);

/* Numeric precision of a session (rm_options.precision). */
typedef enum rm_precision { RM_PRECISION_FP32 = 0, RM_PRECISION_BF16 } rm_precision;
/* "fp32" / "bf16" -> *out (RM_ERR_ARG with a message otherwise). */
rm_status rm_parse_precision(const char *s, rm_precision *out, char *err, size_t errlen);
/* "fp32", "bf16" ("?" for another value). */
const char *rm_precision_name(rm_precision p);
/* The one-line note for bf16 here: "" where products run on oneDNN's bf16
 * brgemm, else why not and what runs them instead. */
const char *rm_bf16_note(void);
/* The path of bf16 products here (chosen once, from the processor and the
 * libraries found: docs/PERFORMANCE.md): "onednn", "sgemm" (bf16 operands
 * widened, OpenBLAS), "avx512_bf16" or "portable" (remat's own kernel). */
const char *rm_bf16_kernel(void);

typedef struct rm_options {
    int threads;            /* OpenMP and BLAS threads; 0 = all cores */
    uint64_t seed;          /* parameter init and dropout masks */
    rm_strategy strategy;   /* what to recompute (default RM_STRATEGY_NONE) */
    int strategy_param;     /* K of segments, S of revolve */
    /* A memory budget for the activations, in bytes or as a fraction of
     * what storing all of them takes: the session plans the strategy that
     * fits it (strategy must be NONE). 0: no budget. Not both. */
    int64_t budget_bytes;
    double budget_fraction; /* in (0, 1] */
    rm_optim_config optim;  /* the optimizer rm_optim_new(s, NULL, ..) builds */
    int forward_only;       /* plan no backward pass (inference, sampling) */
    int verify_recompute;   /* hash values when computed and recomputed; differ -> RM_ERR_VERIFY */
    int dry_run;            /* plan only: allocate no arena, run no profiling step */
    /* The same as strings, as a command line gives them: when not NULL they
     * are parsed at rm_compile (rm_parse_strategy, rm_parse_size) and replace
     * strategy/strategy_param and budget_bytes/budget_fraction. */
    const char *checkpoint;    /* "none", "blocks", "segments:4", "sqrt", "selective", "revolve:3" */
    const char *memory_budget; /* "64MiB", "1.5GiB", "500MB", "123456" or "50%" */
    /* A limit on libremat's own bytes for this session (rm_limit_info):
     * parameters, gradients, optimizer moments (of `optim`), inputs, the
     * activation arena and a margin. With strategy NONE the session plans
     * recomputation so the arena fits what the rest leaves; with a budget,
     * the smaller of the two applies; a fixed strategy whose arena does not
     * fit is refused. RM_ERR_BUDGET, with the breakdown and the least limit
     * that works, when nothing fits. 0: no limit. */
    int64_t limit_bytes;
    const char *memory_limit;  /* the same as a string ("2GiB"); replaces limit_bytes */
    /* Runs the optimizer inside the backward pass (docs/PERFORMANCE.md,
     * "Fused optimizer"): rm_step updates each parameter right after the
     * last instruction that reads it or writes its gradient, and frees that
     * gradient. Parameter gradients are then arena buffers like activations
     * (in activation_bytes_planned, the budget and limit_bytes), there is no
     * flat gradient buffer (rm_grad returns NULL), and a tied embedding's
     * gradient simply lives longest. The optimizer is the one rm_optim_new
     * attaches to the session (see rm_optim_set_lr); its state and the
     * weights equal an unfused run's bit for bit. Needs optim.grad_clip 0
     * (a global norm needs every gradient before the first update, else
     * RM_ERR_ARG); gradient accumulation (rm_micro.accumulate, accumulate
     * below) is refused with RM_ERR_ARG. On several ranks
     * (rm_session_set_comm_f, not with RM_DIST_SHARD) each gradient is
     * summed over the ranks (a blocking allreduce) right before its
     * update, and rm_step first agrees on the inputs' validity: every rank
     * must set the same learning rate. A step that fails inside the
     * backward (RM_ERR_VERIFY) still runs to its end, so no rank waits. */
    int fuse_optimizer;
    /* 1: steps will accumulate micro-batches (rm_step_accumulate with k > 1,
     * or rm_step_micro with accumulate). rm_compile then allocates the
     * second gradient buffer they sum into and counts it under limit_bytes.
     * Without it, the first accumulating micro-batch allocates the buffer;
     * under a limit it is refused (RM_ERR_STATE), since the limit did not
     * count it. Not with fuse_optimizer (RM_ERR_ARG). */
    int accumulate;
    /* ---- paging to disk (issue 20; docs/RECOMPUTE.md, "Beyond RAM") ----
     * A directory on a disk for the scratch file (NULL: nothing is paged,
     * exactly as without). remat pages to one anonymous file there
     * (O_TMPFILE, or unlinked at once: nothing is left behind, even after a
     * kill -9), with O_DIRECT where the file system takes it; a directory on
     * tmpfs or ramfs is refused (RM_ERR_ARG: its pages are memory). Under a
     * limit or budget the plan then chooses per value keep, recompute or
     * page (written after its last forward use, read back ahead of its first
     * backward use, on an I/O thread while the step computes), and which of
     * the training state to page (AdamW moments, parameters; frozen
     * parameters with any optimizer, the rest through fuse_optimizer),
     * minimising the predicted step time. The file's space is allocated at rm_compile
     * (RM_ERR_IO naming the directory and the bytes when the disk is full);
     * an I/O error while paging fails the step with RM_ERR_IO, a block that
     * reads back different from what was written (verify_recompute: each
     * paged block is checksummed) with RM_ERR_IO too. Weights are bit for bit
     * those of a run that pages nothing. At most RM_SCRATCH_DIR_MAX bytes. */
    const char *scratch_dir;
    /* The scratch file's bandwidth in bytes/s the plan assumes for both
     * directions (0: measured at rm_compile: the median of several rounds
     * of 32 MiB written and read back, about a second; rm_paging says what
     * was measured). Give the figures a first run measured (rm_paging's
     * write_bps and read_bps) to plan a resumed run as that run did. */
    double scratch_bandwidth;
    /* For reads only, when it differs (0: scratch_bandwidth). */
    double scratch_read_bandwidth;
    /* RM_PAGE_* or'ed: page these whatever the plan would choose (tests,
     * and forcing a choice); 0: the plan chooses. Needs scratch_dir; the
     * training state (moments, parameters) needs fuse_optimizer. */
    int page;
    /* ---- mixed precision (issue 29; docs/RECOMPUTE.md, "bf16") ----
     * RM_PRECISION_BF16 runs as PyTorch's CPU autocast does: every matrix
     * product (linear layers, LoRA, the head and loss, attention's two
     * products, in the forward and both backward products) takes bf16
     * inputs and sums in fp32; normalisations, softmax, the loss and the
     * optimizer stay fp32, and so do the parameters (master weights), their
     * gradients and AdamW's moments. An activation stored between a product
     * and the pointwise or normalising op next to it (a normalisation's
     * output, a projection's output that GELU, SwiGLU, RoPE or attention
     * reads, attention's probabilities and output) is kept in bf16: half the
     * bytes, so a budget keeps twice as many of them. The planner, memory
     * limit and paging count those bytes. Recomputation, the bit-identical
     * weights across strategies and budgets, checkpoint files and MPI hold
     * as in fp32. RM_PRECISION_FP32 (0, the default): as before, bit for bit.
     * Every session of one graph has the same precision (RM_ERR_ARG). */
    rm_precision precision;
    const char *precision_name; /* "fp32" or "bf16"; replaces precision when not NULL */
} rm_options;

/* The longest rm_options.scratch_dir, in bytes. */
#define RM_SCRATCH_DIR_MAX 511
/* Whether dir can take the scratch file rm_compile makes there: a directory
 * (RM_ERR_ARG when it is not there or is not one), on a file system whose
 * pages are not memory (tmpfs, ramfs: RM_ERR_ARG), in which a file can be
 * made (RM_ERR_IO with the system's reason); the message in err. Nothing is
 * left in dir. A program that runs several sessions on one dir (remat bench)
 * checks it once, before the first. */
rm_status rm_scratch_check(const char *dir, char *err, size_t errlen);

/* rm_options.page: every activation whose buffer idles between two uses;
 * every trainable parameter's AdamW moments; every trainable parameter (and
 * its moments) and every frozen one (rm_param_freeze, a LoRA model's base:
 * only read from the file, never written). */
#define RM_PAGE_ACTIVATIONS 1
#define RM_PAGE_MOMENTS 2
#define RM_PAGE_PARAMS 4

/* Fills o with the defaults: all cores, seed 1337, keep everything, no
 * budget, rm_optim_config_default. */
void rm_options_default(rm_options *o);

/* The parsers behind the string options, for programs that take the same
 * strings as remat's command line. On error: RM_ERR_ARG and a one-line
 * message in err (may be NULL). */
/* "segments:4" -> RM_STRATEGY_SEGMENTS, 4 (param 0 for strategies without one). */
rm_status rm_parse_strategy(const char *s, rm_strategy *out, int *param, char *err, size_t errlen);
/* The name rm_parse_strategy reads ("segments:4"); 0 if s is not a strategy or cap too small. */
int rm_strategy_name(rm_strategy s, int param, char *out, size_t cap);
/* "64MiB", "1.5GiB", "500MB", "123456" -> *bytes (*fraction 0); "50%" -> *fraction 0.5 (*bytes 0).
 * Units B, KiB..EiB, KB..EB, K, M, G (a space before the unit allowed); decimal,
 * nothing around it (" 5MiB" and "5MiB " are refused); at least 1 byte, at
 * most 2^60 (1EiB); a count without a unit is whole ("1.5" is refused). */
rm_status rm_parse_size(const char *s, int64_t *bytes, double *fraction, char *err, size_t errlen);
#define RM_MIB_TEXT 64 /* bytes that always hold a text of rm_mib_pair */
/* Two byte counts for a message that compares them, each as "%.2f MiB", followed by " (N bytes)"
 * when the two print alike but differ: "0.22 MiB (230000 bytes) is below 0.22 MiB (230686 bytes)",
 * never "0.22 MiB is below 0.22 MiB". Writes at most cap bytes into a_out and b_out (either may
 * be NULL); RM_MIB_TEXT bytes always suffice. */
void rm_mib_pair(int64_t a, int64_t b, char *a_out, char *b_out, size_t cap);

/* Compiles g into a session: autodiff, the plan, the step program, and one
 * allocation each for the arena, parameters (initialised from o->seed),
 * gradients and inputs. The session reads the graph: rm_graph_free before
 * rm_session_free only marks the graph, which is freed with its last session
 * (free them in any order; building on a freed graph is still a use after
 * free). The session copies the options (it keeps no pointer of o;
 * NULL: rm_options_default's). On failure the message is rm_graph_errmsg(g), and the graph stays usable:
 * compile it again with other options (e.g. a larger budget). From the first
 * rm_compile on, the graph is sealed: a call that would change it (an op,
 * rm_input, rm_param, rm_set_loss, rm_mark_output, ...) is RM_ERR_STATE. */
rm_status rm_compile(rm_graph *g, const rm_options *o, rm_session **out);
void rm_session_free(rm_session *s);
const char *rm_session_errmsg(const rm_session *s);

/* Storage of an input or parameter (or of a marked output after a step).
 * NULL for a parameter the session pages to its scratch file (rm_options.
 * page or its plan): its values are in the file; checkpoint files
 * (rm_save_params, rm_save_state) read them from there. */
void *rm_value_data(rm_session *s, rm_val v);
/* Gradient of a parameter after rm_step. */
float *rm_grad(rm_session *s, rm_val v);
int64_t rm_numel(const rm_graph *g, rm_val v);
int rm_shape(const rm_graph *g, rm_val v, int64_t shape[RM_MAX_DIMS]);
const char *rm_name(const rm_graph *g, rm_val v);

/* One forward + backward: parameter gradients are overwritten, loss returned.
 * `step` keys the dropout masks, so a step is reproducible. Before running,
 * the inputs are checked: a token id (rm_embedding) or target
 * (rm_softmax_ce) outside [0, V) returns RM_ERR_ARG naming its position and
 * value, and nothing runs. */
rm_status rm_step(rm_session *s, uint64_t step, float *loss);

/* Gradient accumulation over micro-batches. A global batch of R rows is fed
 * as micro-batches of the session's batch size b (the first dimension of
 * its inputs); micro-batch j holds global rows [row_offset, row_offset + b)
 * (rm_data_fill_rows fills them from a dataset).
 * Dropout masks are keyed by the global row (and step), so splitting a batch
 * changes no mask. With loss_scale 1/k for k equal micro-batches of a loss
 * that is a mean over rows (rm_softmax_ce), the accumulated gradients are
 * those of the global batch's mean loss, up to the order of summation
 * (float rounding; BatchNorm's statistics are per micro-batch). */
typedef struct rm_micro {
    int64_t row_offset; /* the global batch row of this micro-batch's row 0 (>= 0) */
    float loss_scale;   /* multiplies the gradient of the loss (1: rm_step) */
    int accumulate;     /* 0: gradients are overwritten (first micro-batch); 1: added */
} rm_micro;
/* rm_step for one micro-batch; m NULL is rm_step. The loss returned is the
 * micro-batch's, unscaled. An accumulating micro-batch's gradients are
 * computed from zero in a second buffer (allocated at the first one, then
 * counted in rm_memory's grad_bytes) and then added: k micro-batches sum
 * ((g_0 + g_1) + g_2) + ..., for 2 bit for bit what 2 data-parallel ranks
 * sum (docs/SCALING.md). */
rm_status rm_step_micro(rm_session *s, uint64_t step, const rm_micro *m, float *loss);

/* Writes the inputs of micro-batch j, whose row 0 is global batch row
 * row_offset: rm_value_data, or rm_data_fill_rows(.., row_offset). A status
 * other than RM_OK fails the step with it. */
typedef rm_status (*rm_fill_fn)(void *user, rm_session *s, int j, int64_t row_offset);
/* One step of k >= 1 micro-batches of the session's b rows on every rank
 * (P = 1 without a communicator), a global batch of P*k*b rows. Rank r's
 * micro-batch j is global rows [(r k + j) b, (r k + j) b + b), filled by
 * fill(user, s, j, row_offset) right before it runs, its loss gradient
 * scaled by 1/(P k), the gradients accumulated (rm_step_micro). After the
 * last one the ranks agree on the outcome and sum the gradients, as
 * rm_step does, but after the backward (not overlapped with it). *loss is
 * the mean over all P k micro-batches. A fill or micro-batch that fails
 * ends this rank's micro-batches; every rank then returns the error, with
 * "rank R of P: ...". The same step as P k ranks of one micro-batch each,
 * or as one process with k P micro-batches, up to the order of summation.
 * The global batch is P k b rows by construction: every rank must pass the
 * same k (the ranks agree on it first; another k on any rank is RM_ERR_ARG
 * on every rank, since rows would overlap or be left out), and a caller
 * whose batch of B rows does not split into P k equal parts must refuse it
 * (remat train does) rather than drop rows.
 * Compile with rm_options.accumulate for k > 1. fill may be NULL for k = 1
 * (the inputs as they are). */
rm_status rm_step_accumulate(rm_session *s, uint64_t step, int k, rm_fill_fn fill, void *user, float *loss);
/* ---- data parallel (MPI; docs/SCALING.md) ------------------------------------ */

/* 1 if this libremat was built with MPI (make MPI=1, or mpicc found). */
int rm_has_mpi(void);
/* Makes s one of the P ranks of an MPI communicator; collective: every rank
 * calls it with the same model, after rm_compile and before rm_optim_new.
 * Pass the communicator with remat_mpi.h's rm_session_set_comm(s, comm,
 * flags), or as its Fortran handle (MPI_Comm_c2f) here, so this header
 * needs no mpi.h. Every rank then takes rank 0's parameters, and:
 *  - rm_step is a step on a global batch of P*b rows (b: the session's
 *    batch): this rank's inputs are global rows [rank*b, rank*b + b) (the
 *    dropout masks of those rows), its loss gradient is scaled by 1/P, the
 *    gradients are summed over the ranks and *loss is the mean over ranks.
 *    The ranks agree on the outcome: a step that fails or gives a
 *    non-finite loss on any rank fails on all, with "rank R of P: ..."
 *  - rm_data_fill fills this rank's rows of global batch k (of P*b rows);
 *    rm_evaluate returns the mean over the ranks' rows;
 *  - with RM_DIST_SHARD (ZeRO stage 1) the optimizer keeps the AdamW
 *    moments of this rank's 1/P of the flat parameters only; rm_step then
 *    reduce-scatters the gradients (rm_grad is summed on this rank's shard
 *    only) and rm_optim_step updates the shard and all-gathers parameters.
 * rm_step_micro does not communicate. BatchNorm statistics stay per rank.
 * The communicator must stay valid while s uses it. Without MPI: RM_ERR_STATE. */
rm_status rm_session_set_comm_f(rm_session *s, int comm_f, int flags);
/* flags of rm_session_set_comm_f, or'ed: */
#define RM_DIST_SHARD 1    /* shard the optimizer state (ZeRO-1) */
/* What MPI may hold per rank for the gradients' sums: every collective of
 * the library moves at most 4 MiB and at most 2 travel at once, and Open
 * MPI's reductions take scratch memory of about their size. A process
 * limit under MPI leaves this much beside rm_options.limit_bytes (the
 * remat command's --memory-limit does). */
#define RM_DIST_SCRATCH_BYTES ((int64_t)12 << 20)
#define RM_DIST_BLOCKING 2 /* reduce the gradients after the backward in one blocking
                            * MPI_Allreduce; by default buckets of them start
                            * (MPI_Iallreduce) as soon as they are final during the
                            * backward, overlapping the rest of it (same results) */
/* Milliseconds the last rm_step waited for the gradients' reduction after
 * its backward (what the overlap did not hide); 0 alone. */
double rm_step_comm_ms(const rm_session *s);
/* This rank (0 alone) and, in *size (NULL-able), the number of ranks (1 alone). */
int rm_session_rank(const rm_session *s, int *size);

/* Forward only (dropout off); loss is NULL-able when the graph has none.
 * Inputs are checked as for rm_step. */
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
    size_t param_bytes, grad_bytes;   /* grad_bytes: flat gradient buffers, of the trainable parameters
                                       * only (0 under fuse_optimizer) */
    int n_instructions;
    /* fuse_optimizer: the parameter-gradient bytes among activation_bytes_planned
     * at its peak (they are arena buffers; the peak is of both together) */
    size_t grad_arena_bytes;
    /* the trainable parameters' bytes (param_bytes less frozen parameters and state) */
    size_t trainable_bytes;
} rm_memory_info;
/* Fills m for session s. */
void rm_memory(const rm_session *s, rm_memory_info *m);

/* What rm_options.limit_bytes was spent on (all 0 without a limit). The
 * optimizer's bytes are those rm_optim_new will allocate (AdamW: two
 * moments of the trainable parameters; SGD: none, but a budget's profiling
 * step holds a copy of the state, counted instead when larger); gradients:
 * of the trainable parameters; margin: the session's own small tables. */
typedef struct rm_limit_info {
    size_t limit_bytes;
    size_t param_bytes, grad_bytes, optimizer_bytes, input_bytes, margin_bytes;
    size_t activation_bytes; /* what the limit leaves for the activation arena */
    size_t arena_bytes;      /* the arena planned (<= activation_bytes) */
    /* rm_options.scratch_dir: the training state the plan keeps in the
     * scratch file instead (parameters and moments; not counted above) */
    size_t paged_bytes;
} rm_limit_info;
/* Fills l for session s (zeroed for a NULL s; nothing for a NULL l). */
void rm_limit(const rm_session *s, rm_limit_info *l);

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
    /* fuse_optimizer: ms of the last rm_step in the updates (not in ms_backward) */
    double ms_optimizer;
} rm_plan_info;
/* Fills p for session s. */
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
 * loss last (optional "ab_sel", "ub_sel", "bt_sel": a stage kept selectively,
 * "Fsel s" in the answer); *result_json (free() it) is {"feasible", "time", "peak_bytes",
 * "min_budget_bytes", "sequence": ["Fck 0", "Fn 1", ..., "L 6", "B 5", ...]}.
 * An infeasible budget returns RM_ERR_BUDGET with the JSON still filled. */
rm_status rm_plan_chain(const char *chain_json, int64_t budget, char **result_json, char *err, size_t errlen);
#define RM_SWEEP_MAX_POINTS 1000 /* rm_plan_chain_sweep's points: each is a plan */
/* The trade-off table (budget -> time, overhead, peak) as CSV, `points`
 * budgets from the minimum feasible to store-all (at most
 * RM_SWEEP_MAX_POINTS, else RM_ERR_ARG). */
rm_status rm_plan_chain_sweep(const char *chain_json, int points, FILE *csv, char *err, size_t errlen);

/* ---- paging to disk: what it moved (issue 20) ------------------------------- */

/* The scratch tier of a session compiled with rm_options.scratch_dir: where,
 * how fast, and what the training step pages. The per-step figures are the
 * last training step's; io_ms is the time transfers were under way (with
 * io_uring, several at once count once), wait_ms the time the step waited
 * for them (the rest overlapped compute). */
typedef struct rm_paging_info {
    int enabled;                  /* a scratch file is open */
    int direct;                   /* O_DIRECT (else through the page cache) */
    double write_bps, read_bps;   /* the bandwidth the plan assumed (measured, or scratch_bandwidth) */
    int probe_rounds;             /* measured: the rounds whose median it is (0: given) */
    double write_bps_min, write_bps_max, read_bps_min, read_bps_max; /* the slowest and fastest round */
    uint64_t scratch_bytes;       /* the file's size (allocated at rm_compile) */
    uint64_t state_bytes;         /* of it, the training state that lives there */
    int values_paged;             /* activations paged out per step */
    int moments_paged, params_paged; /* parameters whose moments / whose values live in the file */
    uint64_t out_bytes, in_bytes; /* planned per step */
    uint64_t out_bytes_measured, in_bytes_measured; /* moved in the last step */
    double io_ms, wait_ms;        /* last step */
    double overlap;               /* 1 - wait_ms / io_ms (1: all hidden; 0 when nothing moved) */
    double predicted_wait_ms;     /* the plan's */
    double predicted_recompute_ms; /* the plan's recomputation, priced from the profiling step (0: none) */
    /* the plan's step (rm_step): every instruction at its time from the
     * profiling step (before it: FLOPs at a measured rate), fused updates,
     * and the waits, as the paging timeline simulates it (0: nothing paged) */
    double predicted_step_ms;
} rm_paging_info;
/* Fills p for session s (all 0 without scratch_dir). */
void rm_paging(const rm_session *s, rm_paging_info *p);

/* ---- tracing one step -------------------------------------------------- */

/* Records the training step numbered `step` (the number passed to rm_step)
 * and the rm_optim_step after it: when each instruction ran and the live
 * activation bytes. The events are allocated now; the step allocates
 * nothing, and with no trace enabled the executor does no extra work. */
rm_status rm_trace_enable(rm_session *s, uint64_t step);
/* 1 once the enabled step has run. */
int rm_trace_ready(const rm_session *s);
/* Writes the recorded step in the Chrome Trace Event Format (open it in
 * Perfetto or chrome://tracing): one duration event per instruction, category
 * "forward", "recompute", "backward" or "optimizer", named "<stage> <op>
 * #<node>"; a counter "live activation bytes" whose maximum is
 * activation_bytes_measured; "otherData" with the strategy, the budget and
 * n_meta caller pairs (e.g. "model"). RM_ERR_STATE before the step ran. */
rm_status rm_trace_write(const rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen);

/* ---- charts ------------------------------------------------------------- */

/* A scatter chart with optional lines, written as one self-contained SVG
 * (remat bench: step time against activation memory; remat plan --sweep). */
typedef enum rm_mark { RM_MARK_CIRCLE = 0, RM_MARK_SQUARE, RM_MARK_TRIANGLE, RM_MARK_DIAMOND } rm_mark;
typedef struct rm_chart_series {
    const char *name; /* in the legend */
    int line;         /* 1: its points are also joined, in order of x */
    rm_mark mark;
} rm_chart_series;
typedef struct rm_chart_point {
    double x, y;       /* non-finite points are left out; a finite value beyond 1e300 in size (or, on a
                        * log x axis, in (0, 1e-300)) is RM_ERR_ARG */
    const char *label; /* printed next to the mark */
    int series;        /* index into rm_chart.series */
} rm_chart_point;
typedef struct rm_chart {
    const char *title, *subtitle, *x_label, *y_label, *note; /* note: a line under the plot */
    const rm_chart_series *series;
    int n_series;
    const rm_chart_point *points;
    int n_points;
    int log_x; /* 1: a logarithmic x axis (points with x <= 0 are left out) */
} rm_chart;
/* Writes c to path; every point is one <g class="point"> with its mark and label. */
rm_status rm_chart_svg(const rm_chart *c, const char *path, char *err, size_t errlen);

/* Planning for any graph profiled elsewhere (docs/RECOMPUTE.md, "Graphs
 * from another framework"): graph_json is {"nodes": [{"forward_time",
 * "backward_time", "output_bytes", ...}, ...], "edges": [{"producer",
 * "consumer", "backward_reads"}, ...]}, nodes in topological order, the loss
 * last. budget < 0 plans at store-all. *result_json (free() it) is
 * {"feasible", "budget_bytes", "store_all_bytes", "min_budget_bytes",
 * "peak_bytes", "recompute_time", "total_time", "keep": [names],
 * "recompute": [{"node", "mode"}], "blocks": [[first, last], ...],
 * "schedule": ["F 0", ..., "R 3", "B 5", ...], "least_plan": {"least_bytes",
 * "modes", "blocks"}}. An infeasible budget returns RM_ERR_BUDGET with the
 * JSON still filled. A later call on the same graph may give "least_plan"
 * back as the graph's top-level "start": the same answer, without searching
 * the least budget again (most of a call's time). With a top-level
 * "scratch_bandwidth" (bytes per unit of time; and "io_latency") the plan
 * may page outputs to a scratch file too: "page": [{"node", "lead",
 * "every_gap"}], schedule items "PO i" / "PI i", recompute_time including
 * the time waited for reads (docs/RECOMPUTE.md). */
rm_status rm_plan_graph(const char *graph_json, int64_t budget, char **result_json, char *err, size_t errlen);
/* The price of one given plan on such a graph (what a framework that can
 * only run some plans, e.g. PyTorch's checkpoint regions, actually runs):
 * plan_json is {"modes": ["keep" | "once" | "each" | "forward", ...],
 * "blocks": [block id, ...]}, one entry per node (blocks nondecreasing from
 * 0 by steps of 0 or 1; absent: one block per node). *result_json (free()
 * it) is rm_plan_graph's answer for that plan: "peak_bytes",
 * "recompute_time", "total_time", "schedule", ... ("budget_bytes" is the
 * peak; "store_all_bytes" and "min_budget_bytes" are -1: not searched). */
rm_status rm_price_graph(const char *graph_json, const char *plan_json, char **result_json, char *err,
                         size_t errlen);

/* Parameters, in the order they were created. */
int rm_param_count(const rm_graph *g);
rm_val rm_param_at(const rm_graph *g, int i);
int rm_param_decay(const rm_graph *g, rm_val v);
/* 1 for trainable parameters, 0 for state (rm_state) and frozen parameters. */
int rm_param_trainable(const rm_graph *g, rm_val v);

/* ---- frozen parameters (fine-tuning; docs/MODELS.md, "Fine-tuning") ---------- */

/* Freezes parameter v: it keeps the values it is initialised or loaded
 * with, and it gets no gradient (rm_grad returns NULL) and no optimizer
 * state (AdamW moments, the flat gradient buffer, a fused gradient). The
 * backward is pruned accordingly: no weight-gradient product for it, no
 * input gradient where nothing upstream is trainable, and nothing kept or
 * recomputed only for such a gradient; the plan, the budget, limit_bytes
 * and rm_memory count the smaller state, and checkpoint files hold no
 * moments for it. Call it before the first rm_compile of g (RM_ERR_STATE
 * after); RM_ERR_ARG for a value that is not a parameter or is state.
 * Freezing twice is harmless. */
rm_status rm_param_freeze(rm_graph *g, rm_val v);
/* 1 for a frozen parameter, else 0. */
int rm_param_frozen(const rm_graph *g, rm_val v);
/* The parameter named `name`, or -1. */
rm_val rm_param_by_name(const rm_graph *g, const char *name);
/* Freezes by name: `freeze` and `train_only` are comma-separated globs
 * (fnmatch) on parameter names, and a pattern also matches every tensor of
 * a module ("lm_head" matches "lm_head.weight"; "model.layers.0" the whole
 * layer); no empty pattern (no comma first, last or twice) and no white space
 * in one. Every parameter one of `freeze`'s patterns matches is frozen, and
 * with `train_only`, every parameter none of its patterns matches. NULL or
 * "" for either: not used. A pattern that matches no parameter is
 * RM_ERR_ARG naming it (a typo would silently train everything). *n_frozen
 * (NULL-able): how many parameters are frozen now. */
rm_status rm_freeze_params(rm_graph *g, const char *freeze, const char *train_only, int *n_frozen);

/* ---- LoRA (Hu et al. 2021), as Hugging Face PEFT computes and names it ------- */

/* A linear layer with a low-rank adapter:
 *   y = x W^T + b + (alpha / rank) * (dropout(x) A^T) B^T
 * x (..,IN); w_frozen (OUT,IN) and b (OUT) or -1: the base layer, which
 * rm_lora_linear freezes (rm_param_freeze). It creates the adapter, two
 * parameters named as PEFT names them when w is "<m>.weight":
 * "<m>.lora_A.weight" (rank, IN), Kaiming-uniform as PEFT initialises it
 * (U(-1/sqrt(IN), 1/sqrt(IN))), and "<m>.lora_B.weight" (OUT, rank), zero,
 * so training starts from the base model; both get weight decay. dropout
 * in [0, 1) drops the adapter's input only (Philox masks as rm_dropout's:
 * a recomputation sees the same mask). The backward computes dA, dB and dx
 * (no dW, no db) and keeps x and the (.., rank) product dropout(x) A^T.
 * rm_load_params and --init accept a file without the adapters (they keep
 * their initial values); rm_save_adapters writes them alone. */
rm_val rm_lora_linear(rm_graph *g, rm_val x, rm_val w_frozen, rm_val b, int rank, float alpha, float dropout);
/* 1 for a parameter rm_lora_linear created (an adapter's A or B), else 0. */
int rm_param_adapter(const rm_graph *g, rm_val v);

/* LoRA on a built-in model (rm_llama_config.lora, rm_gpt_config.lora,
 * rm_run_info.lora): every linear layer named in `targets` becomes an
 * rm_lora_linear, and every other parameter is frozen. */
typedef struct rm_lora_config {
    int rank;          /* r; 0: no LoRA */
    float alpha;       /* PEFT's lora_alpha: the adapter's output is scaled by alpha / rank; 0: 8 (PEFT's default) */
    float dropout;     /* PEFT's lora_dropout, on each adapter's input, in [0, 1) */
    /* comma-separated module names; "": all of the model's: llama q_proj,
     * k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj; gpt and uvit c_attn,
     * c_proj,c_fc. A name the model lacks, or an empty one (a comma first,
     * last or twice), is RM_ERR_ARG. */
    char targets[160];
} rm_lora_config;

/* Writes s's LoRA adapters alone, as a PEFT adapter folder `dir` (made if
 * missing): adapter_model.safetensors with each adapter as
 * "base_model.model.<name>" (F32) and adapter_config.json (peft_type LORA,
 * task_type CAUSAL_LM, r, lora_alpha, lora_dropout, target_modules, bias
 * "none", base_model_name_or_path: base_model or null, fan_in_fan_out: 1
 * for a base whose weights are stored (IN, OUT), as Hugging Face's GPT-2
 * Conv1D). peft.PeftModel.from_pretrained(model, dir) loads it. RM_ERR_ARG
 * when the model has no adapters or they differ in rank, alpha or dropout;
 * RM_ERR_IO naming the file. Atomic per file. */
rm_status rm_save_adapters(rm_session *s, const char *dir, const char *base_model, int fan_in_fan_out, char *err,
                           size_t errlen);
/* Writes every parameter of s but the adapters, each weight that carries
 * an adapter merged: W + (alpha / rank) B A (the session's weights are not
 * changed), with the caller's metadata and the checksum: the fine-tuned
 * model as a plain one (llama: LlamaForCausalLM's names). Atomic. */
rm_status rm_save_merged(rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen);

/* ---- models ------------------------------------------------------------- */

/* The values a model exposes to its caller. Absent ones are -1. */
typedef struct rm_model_io {
    rm_val tokens;   /* (B,T) i32: GPT input ids */
    rm_val features; /* (B,T) f32: MLP input window, ids scaled to [0,1] */
    rm_val targets;  /* (B,T) i32 for the GPT, (B) i32 for the MLP */
    rm_val logits;   /* (B,T,V) or (B,V) */
    rm_val loss;     /* scalar */
    rm_val source;      /* (B,T) i32: encoder input ids (encdec) */
    rm_val source_mask; /* (B,T) i32: 1 for a real source token, 0 for padding (encdec) */
} rm_model_io;

/* GPT-2-style decoder (nanoGPT names and layouts, tied head). */
typedef struct rm_gpt_config {
    int layers, dim, heads, context, vocab, batch;
    float dropout;   /* on embeddings and on both residual branches */
    int keep_logits; /* mark logits as an output (sampling) */
    rm_lora_config lora; /* adapters on c_attn, c_proj, c_fc (rank 0: none) */
} rm_gpt_config;
/* Records the GPT into g (stages embed, h.0 .. h.L-1, head) and fills io. */
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
/* Records the MLP into g (one stage per layer) and fills io. */
rm_status rm_mlp_build(rm_graph *g, const rm_mlp_config *c, rm_model_io *io);

/* LLaMA-style decoder (Hugging Face LlamaForCausalLM names): RMSNorm, RoPE,
 * SwiGLU MLP, no biases. Zero fields take the defaults: ffn_dim
 * rm_llama_ffn_dim(dim), rope_theta 10000, norm_eps 1e-6 (HF LlamaConfig's
 * rms_norm_eps), kv_heads = heads (no grouping), an untied head.
 * docs/MODELS.md. */
typedef struct rm_llama_config {
    int layers, dim, heads, context, vocab, batch;
    int ffn_dim;        /* SwiGLU hidden size; 0: 8/3 x dim rounded up to a multiple of 64 */
    float dropout;      /* where GPT has it: on embeddings and both residual branches */
    float rope_theta, norm_eps;
    int keep_logits;
    /* Grouped-query attention (HF num_key_value_heads): k_proj and v_proj
     * are (kv_heads * dim/heads, dim) and each group of heads/kv_heads query
     * heads shares one key/value head (rm_attention_gqa). 0: heads. */
    int kv_heads;
    /* 1: the head multiplies by model.embed_tokens.weight (HF
     * tie_word_embeddings); there is no lm_head.weight. */
    int tie_embeddings;
    rm_lora_config lora; /* adapters on the seven projections (rank 0: none) */
} rm_llama_config;
/* The default SwiGLU hidden size: 8/3 x dim rounded up to a multiple of 64
 * (384 -> 1024; 0 when dim < 1 or the size exceeds an int, which the
 * builder refuses); and the builder (stages embed, layers.N, head). */
int rm_llama_ffn_dim(int dim);
rm_status rm_llama_build(rm_graph *g, const rm_llama_config *c, rm_model_io *io);

/* GPT-2 blocks with U-ViT's long skips: for i < floor(layers/2) the input of
 * block layers-1-i is Linear(2C->C)(concat(x, output of block i)). Not a
 * chain of stages: chain strategies refuse it; none, selective and user
 * marks apply. GPT's names plus transformer.h.N.skip_linear.{weight,bias}. */
rm_status rm_uvit_build(rm_graph *g, const rm_gpt_config *c, rm_model_io *io);

/* Transformer encoder-decoder over bytes (pre-norm): an encoder over
 * `source` and a decoder with causal self-attention and cross-attention to
 * the encoder output. Ids: bytes 0..255, then BOS, EOS, PAD; padding is
 * masked out of attention (source_mask) and of the loss (PAD targets). Both
 * sequences are `context` long. Not a chain of stages. docs/MODELS.md. */
#define RM_ENCDEC_BOS 256
#define RM_ENCDEC_EOS 257
#define RM_ENCDEC_PAD 258
#define RM_ENCDEC_VOCAB 259
/* An encdec's plan is a graph's (its decoder reads the encoder at every
 * layer), planned in time growing with the square of its layers: 512 + 512
 * take about 13 s, so each side is bounded. */
#define RM_ENCDEC_MAX_LAYERS 1024
typedef struct rm_encdec_config {
    int enc_layers, dec_layers, dim, heads, context, vocab, batch; /* vocab >= RM_ENCDEC_VOCAB; layers <= RM_ENCDEC_MAX_LAYERS */
    float dropout;
    int keep_logits;
} rm_encdec_config;
/* Records the model (stages enc.embed, enc.N, dec.embed, dec.N, head); io gets
 * source, source_mask, tokens (decoder input) and targets. */
rm_status rm_encdec_build(rm_graph *g, const rm_encdec_config *c, rm_model_io *io);

/* encdec data. One pair (source, target bytes) as one row of each (B,T)
 * input: source (PAD after its bytes), source_mask, tokens (BOS, then the
 * target) and targets (the target, EOS, PAD after); both truncated to T. */
void rm_seq2seq_row(const unsigned char *src, size_t ns, const unsigned char *tgt, size_t nt, int T,
                    int32_t *source, int32_t *mask, int32_t *tokens, int32_t *targets);
/* The built-in task, row r of batch k: a random string of 1..T-1 lowercase
 * letters into src and its reverse into tgt (each >= T bytes), length in *n. */
void rm_seq2seq_reverse_pair(uint64_t seed, uint64_t k, int r, int T, unsigned char *src, unsigned char *tgt,
                             size_t *n);
/* Pairs from a file of "source<TAB>target" lines (bytes; blank lines skipped). */
typedef struct rm_pairs {
    unsigned char *buf; /* the file */
    size_t *off;        /* per pair: source offset, length, target offset, length */
    size_t n;
    size_t len;         /* bytes in buf: a pair reaching past them is RM_ERR_ARG */
} rm_pairs;
/* Loads a pairs file (RM_ERR_IO; RM_ERR_FORMAT naming a line without a tab,
 * or a file with no pair); rm_pairs_free frees it (safe on a zeroed p). */
rm_status rm_pairs_load(rm_pairs *p, const char *path, char *err, size_t errlen);
void rm_pairs_free(rm_pairs *p);
/* Batch k (B rows of T, T >= 2): pairs drawn uniformly from p keyed by
 * (seed, k, row), or the built-in reverse task when p is NULL. */
rm_status rm_seq2seq_batch(const rm_pairs *p, uint64_t seed, uint64_t k, int B, int T, int32_t *source,
                           int32_t *mask, int32_t *tokens, int32_t *targets);
/* rm_seq2seq_batch written straight into an encdec session's inputs (B, T
 * from the shape of io->source). Errors are the session's. */
rm_status rm_seq2seq_fill(rm_session *s, const rm_model_io *io, const rm_pairs *p, uint64_t seed, uint64_t k);

/* ---- optimizer ---------------------------------------------------------- */

/* An optimizer of s's parameters with config c (NULL: the session's
 * rm_options.optim), its moments allocated now and zeroed; rm_optim_free
 * (NULL does nothing) releases it. RM_ERR_ARG for a config out of range:
 * beta1 and beta2 in [0, 1), eps in (0, 1], weight_decay in [0, 10],
 * grad_clip in [0, 1e9]. The optimizer and its session may be freed in
 * either order: once the session is freed, the optimizer's calls return
 * RM_ERR_STATE and rm_optim_free still frees it. */
rm_status rm_optim_new(rm_session *s, const rm_optim_config *c, rm_optim **out);
void rm_optim_free(rm_optim *o);
/* Applies one update with learning rate lr (finite, else RM_ERR_ARG);
 * returns the pre-clip grad norm. RM_ERR_STATE unless the last rm_step
 * (rm_step_micro, rm_step_accumulate) ran to its end: no gradients. */
rm_status rm_optim_step(rm_optim *o, float lr, float *grad_norm);
/* A session compiled with rm_options.fuse_optimizer runs its optimizer
 * inside rm_step. rm_optim_new attaches the optimizer to the session (one
 * per session, RM_ERR_STATE for a second; c->grad_clip must be 0, else
 * RM_ERR_ARG), and rm_optim_set_lr
 * gives the learning rate of the following steps (a finite lr, RM_ERR_ARG
 * otherwise): rm_step without one is RM_ERR_STATE. Each rm_step is then one
 * update, counted as rm_optim_step counts them (the checkpoint files hold
 * the same state), and rm_optim_step is RM_ERR_STATE. A step whose gradient
 * norm is not finite returns RM_ERR_ARG after its update was applied; so
 * may a step failing half way (some parameters updated). A training loop:
 *   rm_optim_set_lr(opt, rm_lr_at(&lr, step));
 *   rm_step(s, step, &loss);
 * RM_ERR_STATE for an optimizer that is not fused. */
rm_status rm_optim_set_lr(rm_optim *o, float lr);

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
 * correction). Write into m and v, and set t, to restore a saved state.
 * Each of m, v, t may be NULL (not wanted). */
rm_status rm_optim_state(rm_optim *o, float **m, float **v, uint64_t *t);
rm_status rm_optim_set_updates(rm_optim *o, uint64_t t);
/* A sharded optimizer (rm_session_set_comm_f with RM_DIST_SHARD) holds
 * this rank's shard of the moments only. rm_optim_unshard (collective)
 * gathers every rank's shard into full-size moments on all ranks, which
 * rm_optim_state then returns and checkpoint files save or load (the same
 * files as one process writes: resume with any number of ranks);
 * rm_optim_reshard keeps this rank's shard of them and frees the rest.
 * Both do nothing for an optimizer that is not sharded. */
rm_status rm_optim_unshard(rm_optim *o);
rm_status rm_optim_reshard(rm_optim *o);
/* The bytes of optimizer state this rank holds (the AdamW moments). */
size_t rm_optim_bytes(const rm_optim *o);
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

/* ---- training data -------------------------------------------------------- */

/* A token sequence, its train/validation split and batch samplers. Sources:
 * a file in llm.c's token format (a header of 256 int32: magic 20240520,
 * version 1, token count; then uint16 tokens; or llm.c's llama-3 files:
 * magic 20240801, version 7, uint32 tokens), a headerless array of uint16
 * or uint32 ids (rm_data_load_tokens), any other file read as bytes
 * (one token per byte, vocab 256), the corpus embedded in the library (a
 * fixed text, data/corpus.txt.gz: the project's docs and sources as of one
 * commit, as bytes), or tokens in the caller's memory (copied).
 * Every batch is a pure function of (seed, batch index): a run resumed at
 * batch k sees the same data as one that never stopped. */
typedef enum rm_data_format { RM_DATA_BYTES = 0, RM_DATA_LLMC, RM_DATA_TOKENS } rm_data_format;
typedef enum rm_data_part { RM_DATA_TRAIN = 0, RM_DATA_VAL } rm_data_part;
/* RANDOM: each row starts at a uniform offset keyed by (seed, batch, row).
 * SEQUENTIAL: llm.c's loader: batch k is the k-th run of B*T+1 tokens,
 * advancing by B*T and wrapping around. */
typedef enum rm_sampler { RM_SAMPLE_RANDOM = 0, RM_SAMPLE_SEQUENTIAL } rm_sampler;

typedef struct rm_dataset {
    int32_t *tokens;       /* all tokens (owned by the dataset) */
    size_t n;
    size_t n_train, n_val; /* train = tokens[0, n_train), val = tokens[n_train, n) */
    int32_t max_id;        /* the largest token id */
    rm_data_format format;
    char name[256];        /* the file (for messages), "<corpus>" or the caller's name */
} rm_dataset;

/* Loaders fill *d (n_train = n, n_val = 0 until rm_data_split). On error *d
 * is left empty (safe to rm_data_free). Errors: RM_ERR_IO (cannot read),
 * RM_ERR_FORMAT (bad llm.c header, fewer than 2 tokens), RM_ERR_NOMEM. */
rm_status rm_data_load_file(rm_dataset *d, const char *path, char *err, size_t errlen);
/* rm_data_load_file with the width of a token id: 0 reads as
 * rm_data_load_file does; 2 or 4: little-endian unsigned ids of that many
 * bytes, after an llm.c header when the file has one (its width must
 * agree, else RM_ERR_FORMAT), else from the first byte (a raw array, as
 * numpy's tofile writes; its size must be a multiple of the width). Ids
 * above 2^31 - 1 are RM_ERR_FORMAT. Vocabularies above 65,535 (Llama 3's
 * 128,256) need 4-byte ids. */
rm_status rm_data_load_tokens(rm_dataset *d, const char *path, int token_bytes, char *err, size_t errlen);
rm_status rm_data_load_corpus(rm_dataset *d, char *err, size_t errlen);
/* Bytes in memory, one token each (vocab 256); copied. */
rm_status rm_data_from_bytes(rm_dataset *d, const char *name, const unsigned char *bytes,
                             size_t n, char *err, size_t errlen);
/* Token ids in memory, copied; a negative id is RM_ERR_ARG naming its position. */
rm_status rm_data_from_tokens(rm_dataset *d, const char *name, const int32_t *tokens, size_t n,
                              char *err, size_t errlen);
void rm_data_free(rm_dataset *d);

/* RM_ERR_ARG naming the first token id >= vocab and its position. */
rm_status rm_data_check_vocab(const rm_dataset *d, int vocab, char *err, size_t errlen);
/* The last val_fraction (in [0, 1); 0 = no validation) of the tokens become
 * the validation part. Each non-empty part must hold one (B, T) batch, i.e.
 * B*T+1 tokens, else RM_ERR_ARG saying how many are needed. */
rm_status rm_data_split(rm_dataset *d, double val_fraction, int B, int T, char *err,
                        size_t errlen);
/* Tokens in a part, and batches per pass over it: floor((n - 1) / (B*T)). */
size_t rm_data_part_len(const rm_dataset *d, rm_data_part part);
uint64_t rm_data_num_batches(const rm_dataset *d, rm_data_part part, int B, int T);
/* Offset, within the part, of row r of batch k: the row covers tokens
 * [start, start + T + 1). Needs a part that passed rm_data_split's check. */
size_t rm_data_row_start(const rm_dataset *d, rm_data_part part, rm_sampler mode,
                         uint64_t seed, uint64_t k, int B, int T, int r);
/* Batch k for a language model: tokens (B,T) and targets (B,T) int32, the
 * targets shifted by one. RM_ERR_ARG if the part is too small. */
rm_status rm_data_batch(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed,
                        uint64_t k, int B, int T, int32_t *tokens, int32_t *targets,
                        char *err, size_t errlen);
/* Batch k for a window model (the MLP): x (B,T) float, the row's first T
 * tokens as id / (vocab - 1); y (B) int32, the token after the window. Same
 * rows as rm_data_batch. RM_ERR_ARG if the part is too small or vocab < 2. */
rm_status rm_data_batch_mlp(const rm_dataset *d, rm_data_part part, rm_sampler mode,
                            uint64_t seed, uint64_t k, int B, int T, int vocab, float *x,
                            int32_t *y, char *err, size_t errlen);
/* Batch k written straight into a session's inputs: io->tokens and
 * io->targets (a language model, B and T from the shape of tokens), or
 * io->features and io->targets (a window model; vocab from io->logits).
 * Errors are the session's (rm_session_errmsg). */
rm_status rm_data_fill(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                       rm_sampler mode, uint64_t seed, uint64_t k);
/* rm_data_fill for a micro-batch (rm_step_micro): the session's b rows are
 * rows [row_offset, row_offset + b) of batch k of global_batch rows (0: b),
 * the same tokens the global batch would hold there. */
rm_status rm_data_fill_rows(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                            rm_sampler mode, uint64_t seed, uint64_t k, int global_batch, int64_t row_offset);

/* Evaluation: the mean loss of rm_forward (no dropout) over the first
 * max_batches (0: all) sequential batches of the validation part, filled
 * as rm_data_fill does. RM_ERR_ARG if that part holds no batch. A batch
 * whose loss is not finite (NaN, inf) stops it with RM_ERR_STATE naming
 * the first such batch (on any rank): there is no mean to give. */
rm_status rm_evaluate(rm_session *s, const rm_model_io *io, const rm_dataset *d,
                      uint64_t max_batches, float *mean_loss);
/* The same over either part, with the perplexity: held-out text loaded as
 * a dataset of its own (no rm_data_split) is all RM_DATA_TRAIN. Batches are
 * the sequential sampler's (B*T+1 tokens each, advancing by B*T: every
 * target once); the tokens after the last whole batch are not scored. */
typedef struct rm_eval_result {
    double mean_loss;   /* the mean cross-entropy over the scored targets (nats) */
    double perplexity;  /* exp(mean_loss) */
    uint64_t batches;   /* batches run */
    uint64_t tokens;    /* targets scored: batches * B * T */
} rm_eval_result;
/* RM_ERR_ARG when the part holds no batch (or part is neither of the two);
 * RM_ERR_STATE at the first batch whose loss is not finite, as rm_evaluate. */
rm_status rm_evaluate_part(rm_session *s, const rm_model_io *io, const rm_dataset *d, rm_data_part part,
                           uint64_t max_batches, rm_eval_result *out);

/* ---- learning-rate schedules ------------------------------------------------ */

/* Linear warmup over the first `warmup` steps (step i gets lr*(i+1)/warmup),
 * then CONSTANT lr, or COSINE decay from lr at step `warmup` to lr/10 at
 * step `steps` (nanoGPT's min_lr). */
typedef enum rm_lr_kind { RM_LR_CONSTANT = 0, RM_LR_COSINE } rm_lr_kind;
typedef struct rm_lr_schedule {
    rm_lr_kind kind;
    float lr;    /* peak learning rate */
    int warmup;  /* steps of linear warmup (0: none) */
    int steps;   /* the run's total steps (the end of the cosine) */
} rm_lr_schedule;
/* The learning rate of step `step` (0 for a NULL schedule). */
float rm_lr_at(const rm_lr_schedule *s, uint64_t step);

/* ---- training-state files ------------------------------------------------------ */

/* What a training run is and where it stands: saved as the metadata of a
 * training-state file (docs/CHECKPOINT_FILES.md) next to the parameters and
 * the optimizer state, so that a run resumed from it continues bit for bit. */
typedef struct rm_run_info {
    char model[32];        /* "gpt", "mlp", "llama", "uvit", "encdec", or the caller's own model */
    int layers, dim, heads;                 /* models "gpt", "llama", "uvit" (encdec: dim, heads) */
    int ffn_dim;                            /* model "llama" (0: its default) */
    int enc_layers, dec_layers;             /* model "encdec" */
    int n_widths, widths[RM_MLP_MAX_LAYERS]; /* model "mlp": hidden widths */
    int batchnorm;                          /* model "mlp" */
    int context, vocab, batch;
    float dropout;
    char data[1024];       /* where the data came from (a path, "<corpus>") */
    uint64_t data_tokens;  /* and how many tokens it had */
    float val_fraction;
    rm_sampler sampler;
    uint64_t seed;         /* parameter init, dropout, the sampler */
    uint64_t step;         /* steps done: the next step's index */
    uint64_t data_position; /* the next training batch's index */
    rm_optim_config optim;
    rm_lr_schedule lr;     /* lr.steps: the step count the run goes to */
    /* model "llama" (rm_llama_config; 0: its defaults) */
    int kv_heads;
    float rope_theta, norm_eps;
    int tie_embeddings;
    int token_bytes;       /* how `data` is read: rm_data_load_tokens's token_bytes (0, 2, 4) */
    /* fine-tuning: rm_run_build freezes these by name (rm_freeze_params); "" for none */
    char freeze[256], train_only[256];
    rm_lora_config lora;   /* models "llama", "gpt", "uvit" (rank 0: none) */
    /* the precision the run trains in (rm_options.precision): a run resumes
     * in the precision it was saved in (files without the key: fp32) */
    rm_precision precision;
} rm_run_info;
/* Defaults: model "gpt", the CLI's default GPT, AdamW, constant lr 1e-3, seed 1337. */
void rm_run_info_default(rm_run_info *r);
/* Builds the model a run describes (gpt, mlp, llama, uvit, encdec), with
 * its frozen parameters; RM_ERR_ARG for another model name (the caller
 * builds its own). */
rm_status rm_run_build(const rm_run_info *r, rm_graph *g, rm_model_io *io, int keep_logits);

/* Writes the whole training state of s and o (NULL: parameters only) with r
 * as metadata, plus n_extra key/value strings of the caller (keys must not
 * clash with r's), and the checksum. Atomic (temp + rename). */
rm_status rm_save_run(rm_session *s, rm_optim *o, const char *path, const rm_run_info *r,
                      int n_extra, const char *const *keys, const char *const *values,
                      char *err, size_t errlen);

/* A .safetensors file opened for reading: its metadata and tensor list are
 * available without a session (to rebuild the model it holds), and
 * rm_file_restore then loads it into one. Its header is read and its layout
 * validated against the file's size at open, and the file stays open until
 * rm_file_close: tensors are read from it when loaded (rm_file_restore) or
 * hashed a chunk at a time (rm_file_verify), so a file of any size is
 * opened, verified and loaded without holding it in memory. */
typedef struct rm_file rm_file;
#define RM_CHECKSUM_LEN 72 /* "sha256:" + 64 hex digits + NUL */
/* Opens path (RM_ERR_IO, RM_ERR_FORMAT naming the problem, RM_ERR_NOMEM);
 * rm_file_close frees it (NULL: nothing). */
rm_status rm_file_open(const char *path, rm_file **out, char *err, size_t errlen);
void rm_file_close(rm_file *f);
/* Checks the checksum: RM_OK when it holds (*present = 1) or the file has
 * none (*present = 0); RM_ERR_FORMAT when it does not hold. digest (may be
 * NULL) receives the digest of the contents. */
rm_status rm_file_verify(rm_file *f, int *present, char digest[RM_CHECKSUM_LEN], char *err, size_t errlen);
/* Metadata: the value of key (NULL if absent), and iteration in file order. */
const char *rm_file_meta(const rm_file *f, const char *key);
int rm_file_meta_count(const rm_file *f);
const char *rm_file_meta_key(const rm_file *f, int i);
const char *rm_file_meta_value(const rm_file *f, int i);
/* Tensors in file order; views valid until rm_file_close. */
typedef struct rm_tensor_info {
    const char *name, *dtype; /* dtype: "F32", "I32", "BF16", ... */
    int ndim;
    const int64_t *shape;
    uint64_t bytes;
} rm_tensor_info;
/* The number of tensors, and the i-th one (RM_ERR_ARG for a bad i). */
int rm_file_tensor_count(const rm_file *f);
/* Writes a shape as "[2, 3]" ("[]" for a scalar), for messages; always terminated. */
void rm_format_shape(int ndim, const int64_t *shape, char *out, size_t cap);
rm_status rm_file_tensor(const rm_file *f, int i, rm_tensor_info *out);
/* The run a training-state file describes (its metadata, validated):
 * RM_ERR_FORMAT naming the key when one is missing or garbled. */
rm_status rm_file_run_info(const rm_file *f, rm_run_info *r, char *err, size_t errlen);
/* The model alone (to run it: sample, evaluate, export): the model's keys
 * and the fine-tuning ones (frozen, LoRA, precision) with the ranges
 * rm_file_run_info holds them to; batch and dropout when present; the
 * training keys not read (rm_run_info_default's values). For any file
 * with the model's keys: one of rm_save_run, or of rm_save_params given
 * them as metadata. */
rm_status rm_file_model_info(const rm_file *f, rm_run_info *r, char *err, size_t errlen);
/* RM_OK when f holds every parameter of the (built, not yet compiled)
 * graph g as an F32 tensor of its shape; else RM_ERR_FORMAT naming the
 * first that is missing or differs. It reads the file's index only: call it
 * before rm_compile, which allocates what the graph describes, so a file
 * whose metadata claims a larger model than its tensors hold is refused
 * before anything of that size is allocated. */
rm_status rm_file_check(const rm_file *f, const rm_graph *g, char *err, size_t errlen);
/* Marks each parameter of g that f holds (by name, dtype and shape, as
 * rm_file_check wants it) as one a load from f will fill: rm_compile then
 * leaves it zero instead of drawing its first values (a resumed or --init
 * run's draws, overwritten at once). Before rm_compile; a session whose
 * load then fails or is not made holds zeros there. Parameters f lacks
 * (LoRA adapters a base model's file has not) are drawn as before, with
 * the same values. *n (NULL-able) counts the marked ones. */
rm_status rm_file_mark_loaded(const rm_file *f, rm_graph *g, int *n);
/* Loads the file into s and o as rm_load_state does (the checksum must be
 * present and hold; the AdamW moments and update count with an AdamW o).
 * On any error nothing is changed. */
rm_status rm_file_restore(rm_file *f, rm_session *s, rm_optim *o, char *err, size_t errlen);

/* ---- random numbers ----------------------------------------------------------- */

/* Counter-based (Philox4x32-10): a uniform float in [0,1) for element i of
 * the stream keyed by (seed, a, b); the same arguments, the same number. */
float rm_philox_uniform(uint64_t seed, uint32_t a, uint32_t b, uint64_t i);

/* Reads a whole regular file of at most max_bytes into a malloc'ed buffer
 * with a NUL after the last byte (free() it); *len (NULL-able) is its size.
 * Anything else (a FIFO, a device, a directory) is refused at once, without
 * blocking. The library's readers (data, checkpoint and chain files) share it. */
rm_status rm_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen);

/* ---- pretrained models: Hugging Face folders (issue 21) ------------------------ */

/* A Hugging Face model folder opened for reading: config.json and the
 * weights, model.safetensors or the shards model.safetensors.index.json
 * names. Only LlamaForCausalLM (model_type "llama") is read. Every config
 * field that changes what the model computes is honoured (the shape,
 * num_key_value_heads, rms_norm_eps, rope_theta at the top level or in
 * transformers 5's rope_parameters, tie_word_embeddings) or refused with
 * RM_ERR_FORMAT naming it (rope_scaling, a scaled rope_type, attention_bias,
 * mlp_bias, hidden_act other than silu, attention_dropout, head_dim other
 * than hidden_size/heads, quantization_config, ...; docs/MODELS.md). The
 * tensors must be exactly the model's (names, shapes; F32, F16 or BF16):
 * a bias or any tensor the model has no place for is refused too. The
 * weight files' headers are read at open and the files kept open; rm_hf_load
 * reads each tensor a block at a time as it converts it, so loading never
 * holds a second copy of the file, and a file another program truncates
 * meanwhile is an error (RM_ERR_IO naming it), never a crash. The
 * folder's files are validated at open, never trusted (sizes, offsets,
 * names). */
typedef struct rm_hf rm_hf;
/* Opens dir (RM_ERR_IO: not a folder, no weights; RM_ERR_FORMAT naming
 * the field, file or tensor; RM_ERR_NOMEM); rm_hf_close closes and frees
 * it (NULL: nothing). */
rm_status rm_hf_open(const char *dir, rm_hf **out, char *err, size_t errlen);
void rm_hf_close(rm_hf *m);
/* The model config.json describes: model "llama" and its shape (layers,
 * dim, heads, kv_heads, ffn_dim, vocab, rope_theta, norm_eps,
 * tie_embeddings) into r or c; their other fields (context, batch,
 * dropout, training) are left as they were. */
void rm_hf_run_info(const rm_hf *m, rm_run_info *r);
void rm_hf_llama_config(const rm_hf *m, rm_llama_config *c);
/* config.json's max_position_embeddings (0 when absent). */
int rm_hf_max_positions(const rm_hf *m);
/* The config's keys this reader does not know (it reads those that change
 * the model, and skips those that do not, such as token ids), as one line,
 * "" if none: for the caller to show. */
const char *rm_hf_notes(const rm_hf *m);
/* The folder's tensors (all shards), in name order; views valid until rm_hf_close. */
int rm_hf_tensor_count(const rm_hf *m);
rm_status rm_hf_tensor(const rm_hf *m, int i, rm_tensor_info *out);
/* The files rm_hf_open read, as it named them (dir/NAME): config.json,
 * then model.safetensors, or model.safetensors.index.json and each shard
 * it names, once. rm_hf_file answers NULL for i out of range; the names
 * are valid until rm_hf_close. A program that writes files compares them
 * with these by device and inode (stat follows links): a Hugging Face
 * cache's files are links to blobs, and an output written over a blob by
 * its own name would replace the model (docs/RELIABILITY.md). */
int rm_hf_file_count(const rm_hf *m);
const char *rm_hf_file(const rm_hf *m, int i);
/* Loads the folder's weights into s, each tensor into the parameter of the
 * same name and shape, converted from its dtype (BF16, F16: exactly).
 * Every tensor must find its parameter (a tied lm_head.weight must equal
 * model.embed_tokens.weight; a rotary_emb.inv_freq buffer, which rope_theta
 * determines, is skipped); parameters the folder lacks (LoRA adapters)
 * keep their values, and *n_loaded (NULL-able) counts the loaded ones. A
 * tensor that is not finite is refused naming it; names and shapes are
 * checked before anything is written, a non-finite value after some
 * parameters were (the caller's session is then not to be used). */
rm_status rm_hf_load(rm_hf *m, rm_session *s, int *n_loaded, char *err, size_t errlen);
/* Marks each parameter of g that the folder holds (by name) as one
 * rm_hf_load will fill: rm_compile then leaves it zero instead of drawing
 * its first values (a 7B model's draws took over 100 s before its load
 * began). Before rm_compile; a session whose load then fails or is not
 * made holds zeros there. Parameters the folder lacks (LoRA adapters)
 * are drawn as before, with the same values. *n (NULL-able) counts them. */
rm_status rm_hf_mark_loaded(const rm_hf *m, rm_graph *g, int *n);

/* ---- frozen parameters kept in 2 bytes (issue 21) ------------------------------ */

/* Keeps frozen parameter v (rm_param_freeze, rm_lora_linear's base) in a
 * 2-byte format in memory: RM_DTYPE_BF16 or RM_DTYPE_F16 (RM_DTYPE_F32,
 * the default: 4 bytes). Its values are rounded to it once, when
 * initialised or loaded (a BF16 file into BF16: exactly), and the ops that
 * read it (rm_linear, rm_lora_linear, rm_linear_ce, rm_embedding) widen it
 * to fp32 a panel at a time inside their products: every sum stays fp32,
 * and a frozen bf16 base costs 2 bytes a parameter. Before the first
 * rm_compile (RM_ERR_STATE after); RM_ERR_ARG for a parameter that is not
 * frozen, and at rm_compile for one another op reads (a norm's weight).
 * rm_value_data then gives its 2-byte values; files save it in its dtype. */
rm_status rm_param_store(rm_graph *g, rm_val v, rm_dtype dtype);
/* How parameter v is kept (RM_DTYPE_F32 for anything else). */
rm_dtype rm_param_store_dtype(const rm_graph *g, rm_val v);
/* rm_param_store(dtype) for every frozen parameter that only those ops
 * read; *n (NULL-able) counts them (0 for RM_DTYPE_F32). */
rm_status rm_store_frozen(rm_graph *g, rm_dtype dtype, int *n);
/* The same, each parameter in its tensor's dtype in the folder when that
 * is BF16 or F16 (F32 tensors stay 4 bytes): storage without rounding. */
rm_status rm_hf_store_frozen(const rm_hf *m, rm_graph *g, int *n);

/* ---- writing files (issue 22) ------------------------------------------------ */

/* Every file remat writes other than a checkpoint file (rm_chart_svg,
 * rm_trace_write, the command line's reports and CSV tables) goes through
 * rm_out, as every reader goes through rm_read_file. The target must be a
 * regular file or not exist: a FIFO, a device (/dev/full) or a directory is
 * refused at once (RM_ERR_IO), never opened, so nothing blocks. The bytes go
 * to a temporary file ".<name>.tmp.<pid>" in the target's folder (the name a
 * checkpoint file's save uses), renamed over the target by rm_out_close once
 * every byte is written and synced: the target holds its old contents or the
 * new ones, never a part. */
typedef struct rm_out rm_out;
/* Opens the temporary file for path (RM_ERR_IO with the reason when path
 * cannot be written; nothing is created then). */
rm_status rm_out_open(const char *path, rm_out **out, char *err, size_t errlen);
/* The stream to write to (NULL for a NULL o). */
FILE *rm_out_file(rm_out *o);
/* commit 1: flush, sync and rename over the target (RM_ERR_IO, the target
 * as it was, if any write failed); 0: remove the temporary file. Frees o
 * (RM_ERR_ARG for a NULL o). */
rm_status rm_out_close(rm_out *o, int commit, char *err, size_t errlen);
/* The checks of rm_out_open, and its temporary file created and removed,
 * without writing: for a program to refuse an output before its work (a
 * missing or read-only folder, a name too long, a FIFO, a device). */
rm_status rm_out_check(const char *path, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
