/* exec/exec.h: what the exec/ folder offers: the session (parameters,
 * arena, programs) and the interpreter that runs a program. */
#ifndef REMAT_EXEC_H
#define REMAT_EXEC_H

#include "graph/graph.h"
#include "ops/ops.h"
#include "plan/plan.h"
#include "program/program.h"
#include "plan/chain/chain.h"
#include "plan/paging/paging.h"

/* ---- the session ----------------------------------------------------------- */

/* What holds a pointer to a session (an optimizer) holds it through a ref
 * the session lists: rm_session_free sets each ref's s to NULL, so its
 * holder can still be freed afterwards, and refuses to work (RM_ERR_STATE)
 * instead of reading freed memory. Either order of freeing is fine. */
typedef struct rm_session_ref {
    rm_session *s;
    struct rm_session_ref *prev, *next;
} rm_session_ref;
/* exec/ref.c: lists r on s (r->s = s); unlisting it (r->s NULL after) is safe twice. */
void rm_session_ref_attach(rm_session *s, rm_session_ref *r);
void rm_session_ref_detach(rm_session_ref *r);

struct rm_session {
    rm_graph *g;
    rm_options opt;
    int threads;
    rm_program train;   /* forward + backward */
    rm_program infer;   /* forward only */
    unsigned char *arena;
    size_t arena_bytes;
    float *params;      /* one allocation for all parameters */
    float *grads;       /* and one for their gradients (NULL under fuse_optimizer: they are in the arena) */
    float *grads_micro; /* an accumulating micro-batch's own gradients (rm_step_micro) */
    struct rm_dist *dist; /* data parallel: rank, ranks, communicator (dist/dist.h); NULL: alone */
    /* called after each instruction of a training step (dist/dist.c starts
     * the gradients' allreduce there); NULL: none */
    void (*after_instr)(rm_session *s, int instr);
    /* fuse_optimizer: the optimizer rm_optim_new attached (train/optim.c;
     * function pointers, so exec/ does not depend on train/). The executor
     * calls update for each parameter once it is final in the train
     * program (grad NULL: never written, zero); rm_step_micro calls begin
     * before the step and end after it. o NULL: none attached. */
    struct rm_fused {
        rm_optim *o;
        rm_status (*begin)(rm_optim *o);
        void (*update)(rm_optim *o, int param, float *grad); /* grad: the ranks sum it in place */
        rm_status (*end)(rm_optim *o);
        /* paged state (exec/page.c): floats [lo, hi) of parameter `param`,
         * from its whole gradient grad (NULL: zero), into its whole storage
         * w, with the staged moments m and v of those floats */
        void (*update_chunk)(rm_optim *o, int param, int64_t lo, int64_t hi, float *grad, float *w, float *m,
                             float *v);
    } fused;
    rm_session_ref *refs; /* the holders of a pointer to this session (optimizers) */
    unsigned char *inputs;
    const rm_program *last; /* the program run last (for rm_data of outputs) */
    float loss_seed;    /* d(loss)/d(loss): 1, or the micro-batch's loss_scale */
    int accumulate;     /* this step adds into the gradients (rm_step_micro) */
    int grads_ready;    /* the last training step ran to its end: the gradients are its (rm_optim_step needs them) */
    int64_t row0;       /* the global batch row of the inputs' first row */
    int poison;         /* fill freed buffers with NaN (tests: catches use after free) */
    size_t measured_peak;
    struct rm_trace *trace; /* rm_trace_enable: the step to record (exec/trace.h), NULL: off */
    char notes[512];    /* what the user's marks changed, worded by the session */
    uint64_t *hashes;   /* verify_recompute: per value, hash of its first computation */
    /* memory_budget (strategy auto): the figures of the plan */
    int64_t budget_bytes, store_all_bytes;
    rm_auto_info autoplan;
    rm_limit_info limit; /* limit_bytes: what it was spent on (exec/limit.c) */
    rm_profile prof;    /* the profiling step's timing (NULL arrays: none) */
    /* timing of the last training step, by instruction kind, in ms */
    double ms_forward, ms_recompute, ms_backward;
    double ms_optimizer;  /* fused: the updates inside the step */
    rm_profile timing;  /* and per stage and node */
    /* paging to disk (issue 20, exec/page.c): the scratch file and its I/O
     * queue, the bandwidth the plan assumes, the training state that lives
     * in the file (per parameter, fixed at the first plan), and the last
     * step's figures */
    struct rm_page_state {
        char dir[512];          /* opt.scratch_dir points here */
        rm_scratch file;
        rm_ioq q;
        int open;
        double write_bps, read_bps;
        int probe_rounds;       /* the probe's rounds (0: the bandwidth was given) */
        double probe_write[2], probe_read[2]; /* its slowest and fastest round */
        char *moments, *params; /* per parameter: paged (NULL: none) */
        char *values;           /* per value: the plan pages it (NULL: none) */
        int staged;             /* between steps: the unit staged at the arena's start, + 1 (0: none) */
        int planning;           /* pricing paging without a scratch file (the least limit with one) */
        size_t max_staged;      /* the plan's cap on bytes staged ahead (0: none) */
        size_t chunk_bytes;     /* the most bytes of moments one unit stages (fixed with the state's layout) */
        int64_t arena_cap;      /* under a limit: the arena the plan must fit (re-plans tighten to it) */
        double flops_per_ms;    /* the compute rate item times are estimated with before a profile */
        double update_ms_per_float; /* a fused AdamW update's time per float (measured; 0: a default) */
        double wait_ms, predicted_wait_ms;
        double predicted_step_ms; /* the paging timeline's whole step (plan/paging/paging.c) */
    } page;
    int precision_user;     /* counted in g->precision_users (exec/precision.c) */
    char strategy_name[32]; /* opt.checkpoint and opt.memory_budget point here */
    char budget_name[48];
    char errmsg[256];
};

rm_status rm_session_fail(rm_session *s, rm_status st, const char *fmt, ...);
/* exec/precision.c: applies a session's precision to g (rm_compile):
 * under RM_PRECISION_BF16 every matrix-product node gets bf16 = 1, and an
 * activation between a product and the op next to it is stored as BF16
 * where both ops take it so (rm_op_def.bf16_ins, bf16_outs); under FP32
 * everything is as the builders recorded it. RM_ERR_ARG when another live
 * session of g has the other precision. rm_graph_release: a session of g
 * is freed. */
rm_status rm_graph_precision(rm_graph *g, rm_precision p);
void rm_graph_release(rm_graph *g);
/* exec/store.c: every parameter kept in 2 bytes is read only by ops that
 * take it (rm_op_def.half_ins), else RM_ERR_ARG naming both; and n fp32
 * values w rounded into dst in dtype (BF16 or F16). */
rm_status rm_store_check(rm_graph *g);
/* Whether v is a frozen parameter that only ops taking 2-byte weights read. */
int rm_store_eligible(const rm_graph *g, rm_val v);
void rm_store_round(float *w, void *dst, int64_t n, rm_dtype dtype);
/* A 2-byte value of dtype (BF16 or F16) widened, exactly. */
float rm_store_value(const uint16_t *h, rm_dtype dtype);
/* exec/errors.c: RM_OK when s can run steps; RM_ERR_STATE, with a message
 * naming fn, for a session compiled with dry_run (a plan only: no
 * parameters, inputs or arena). Every call that needs them asks first. */
rm_status rm_session_runnable(rm_session *s, const char *fn);
/* The storage of v when it is a (non-constant) input of dtype dt and numel
 * elements; else NULL with RM_ERR_ARG's message naming fn and what (the
 * data fillers write there: nothing outside an input of the right size). */
void *rm_session_input(rm_session *s, rm_val v, rm_dtype dt, int64_t numel, const char *fn, const char *what);
/* exec/session.c: the inputs an op checks (token ids, targets) in range;
 * fn names the caller in the message. */
rm_status rm_session_check_inputs(rm_session *s, const char *fn);
/* exec/options.c: s->opt from the caller's options (parsed, validated, its
 * strings replaced by the session's own). */
rm_status rm_session_options(rm_session *s, const rm_options *o);
/* exec/session.c: schedule + program + memory layout of a named strategy;
 * with backward, the notes about the user's marks are worded here. */
rm_status rm_session_program(rm_session *s, const char *strategy, int backward, rm_program *p);
/* exec/profile.c: a profile's zeroed arrays for g (0: out of memory,
 * nothing held); a copy (with its `cold` ratio); freeing one. */
int rm_profile_alloc(rm_profile *p, const rm_graph *g);
int rm_profile_copy(rm_profile *dst, const rm_profile *src, const rm_graph *g);
void rm_profile_free(rm_profile *p);
/* exec/budget.c: memory_budget set: the planner's schedule as the train
 * program (prof: NULL for FLOP estimates), and the profiling step that
 * plans again from measured times and grows the arena to fit. */
rm_status rm_session_budget_program(rm_session *s, const rm_profile *prof, rm_program *out);
rm_status rm_session_profile(rm_session *s);
/* exec/limit.c: limit_bytes set and strategy NONE: the train program whose
 * arena fits what the training state leaves. */
rm_status rm_session_limit_program(rm_session *s);
/* And, once s->arena_bytes is known (train and forward-only programs): the
 * arena fits the limit, else RM_ERR_BUDGET with the breakdown. */
rm_status rm_session_limit_check(rm_session *s);
/* exec/page.c: the scratch tier of a session (issue 20). Opening the file
 * and measuring its bandwidth (before planning); the paging a schedule
 * gets (forced by opt.page, or chosen by the plan); the file's space and
 * the I/O thread once the programs are built; one paging instruction of a
 * step; closing. */
rm_status rm_session_scratch_open(rm_session *s);
rm_status rm_session_page_schedule(rm_session *s, rm_schedule *sch, const rm_profile *prof, int backward);
rm_status rm_session_scratch_start(rm_session *s);
rm_status rm_session_io(rm_session *s, const rm_program *p, const rm_instr *ins, int train);
void rm_session_scratch_close(rm_session *s);
/* exec/pagestate.c: between steps, the training state that lives in the scratch file
 * (what: 0 the parameter, 1 AdamW's m, 2 its v of parameter pi): whether it
 * is paged; a view of its bytes from `off` on (*len of them; NULL after an
 * error, the message on the session), staged in the arena; and the whole
 * of it written from src (NULL: zeros). */
int rm_session_state_paged(const rm_session *s, int pi, int what);
int rm_param_pageable(const rm_value *v); /* page.c: trainable, or frozen in floats */
/* What a paging unit holds, for messages ("the activation 'x'"). */
void rm_session_unit_name(const rm_session *s, const rm_page_unit *u, char *out, size_t cap);
/* The bytes of parameters and of parameters whose moments the marks page. */
void rm_session_paged_bytes(const rm_session *s, size_t *params, size_t *moments);
/* exec/pageplan.c: under a limit with a scratch file, one plan over keep,
 * recompute and page, and over which training state to page (the fastest
 * predicted step whose arena fits what the resident state leaves);
 * `fixed` gives the limit's fixed part under the current marks. */
rm_status rm_session_limit_paging(rm_session *s, size_t (*fixed)(rm_session *s));
/* Under a memory budget with a scratch file: the fastest predicted of the
 * recompute plan at the budget and recompute plans at larger budgets with
 * activations paged until the arena fits it (RM_ERR_BUDGET: none fits). */
rm_status rm_session_budget_paging(rm_session *s, int64_t budget, rm_program *out);
/* The least limit that works when the whole training state is paged (0:
 * none found), for the refusal's message. */
size_t rm_session_least_paged(rm_session *s, size_t (*fixed)(rm_session *s));
/* The same for an unfused session as if it were fused (0: fused already,
 * accumulating, or none found): what the refusal names as the way to
 * page the trainable state (docs/RECOMPUTE.md, "Beyond RAM"). */
size_t rm_session_least_paged_fused(rm_session *s, size_t (*fixed)(rm_session *s));
const void *rm_session_state_view(rm_session *s, int pi, int what, uint64_t off, uint64_t *len);
rm_status rm_session_state_store(rm_session *s, int pi, int what, const float *src);
/* n bytes of it from byte `off` on, from src (a piece of a checkpoint file). */
rm_status rm_session_state_write(rm_session *s, int pi, int what, uint64_t off, const void *src, size_t n);
/* Parameter pi's values into dst (numel floats), from the flat buffer or,
 * paged, from the scratch file (a message on the session after an error). */
rm_status rm_session_param_copy(rm_session *s, int pi, float *dst);
/* exec/exec.c: runs one program (train: a training step). */
rm_status rm_execute(rm_session *s, const rm_program *p, uint64_t step, int train);
void rm_trace_free(rm_session *s); /* exec/trace.c */

#endif
