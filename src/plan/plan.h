/* plan/plan.h: what the plan/ folder offers: schedules (what to run in
 * which order), the chain of stages, the strategies, the instruction list
 * with its buffers, and the memory layout of the arena. */
#ifndef REMAT_PLAN_H
#define REMAT_PLAN_H

#include "graph/graph.h"
#include "ops/ops.h"

/* Profiles made elsewhere (rm_plan_chain, rm_plan_graph): their times, in
 * the caller's units, add up to at most RM_PLAN_MAX_TIME, so the planners'
 * sums of them (each forward recomputed up to once per later stage) stay
 * finite doubles; their bytes add up to at most RM_MAX_BUDGET_BYTES (2^60),
 * so no 64-bit sum of them overflows. */
#define RM_PLAN_MAX_TIME 1e30

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
    int n_final;             /* parameters final after this instruction (rm_program.param_final) */
    int final_at;            /* index into rm_program.finals */
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
    /* Per parameter (index into g->params): the instruction after which
     * nothing reads it or writes its gradient any more (-1: none does), and
     * the parameters grouped by that instruction (rm_instr.final_at). The
     * MPI overlap starts a gradient's allreduce there; a fused optimizer
     * updates the parameter there. */
    int *param_final, *finals;
    int n_params;
    /* fused (g->fuse_grads at build): each trainable parameter's gradient
     * is an arena buffer, param_buf[i] (-1: never written), from its first
     * backward writer to param_final[i]; else they are the session's flat
     * gradient buffer and param_buf is all -1 */
    int fused;
    int *param_buf;
    size_t peak_grad_bytes; /* fused: the parameter-gradient bytes among peak_live_bytes */
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

/* plan/schedule.c: the primitives strategies build schedules from (the
 * leaf of plan/). */
rm_status rm_schedule_push(rm_schedule *s, rm_instr_kind k, int node);
void rm_schedule_free(rm_schedule *s);
/* FORWARD items for nodes lo..hi. */
rm_status rm_schedule_forward(int lo, int hi, rm_schedule *out);
/* BACKWARD items for the nodes of [lo, hi] that need one, last first. */
rm_status rm_schedule_backward(const rm_graph *g, int lo, int hi, rm_schedule *out);
/* Appends RECOMPUTE items for the nodes among [lo, hi] that `want` marks and
 * that are needed to rebuild `also` (if >= 0) and, with for_backward, what
 * the backwards of [lo, hi] read. */
rm_status rm_schedule_recompute(const rm_graph *g, int lo, int hi, const char *want, rm_val also,
                                int for_backward, rm_schedule *out);
/* The same with several values to rebuild (also[0 .. n_also)). */
rm_status rm_schedule_recompute_set(const rm_graph *g, int lo, int hi, const char *want, const rm_val *also,
                                    int n_also, int for_backward, rm_schedule *out);
/* Forward everything, then for each group of nodes from the last: recompute
 * what the group's backward needs among the wanted nodes, run its backward. */
rm_status rm_schedule_grouped(const rm_graph *g, const int *group_first, const int *group_last, int n_groups,
                              const char *want, rm_schedule *out);
/* want[n] = 1 for the nodes whose op is cheap to recompute (rm_op_def.cheap):
 * what the selective policy recomputes. */
void rm_cheap_mask(const rm_graph *g, char *want);

/* plan/chain.c: the graph as a chain of stages. Empty stages are skipped;
 * chain stage i covers nodes [first[i], last[i]] and receives exactly one
 * activation, input[i] (-1 for the first), from chain stage i-1.
 * A chain of units (rm_chain_units: any graph cut into contiguous node
 * ranges) hands several values from unit i to unit i+1 instead, outs[
 * out_off[i] .. out_off[i+1]), and may recompute only the nodes `want`
 * marks (out_off, outs, want are NULL for a chain of stages). */
typedef struct rm_chain {
    int n;
    int *first, *last, *input, *graph_stage;
    int *out_off, *outs;
    char *want;
} rm_chain;
rm_status rm_chain_build(const rm_graph *g, rm_chain *c, char *err, size_t errlen);
/* Units unit[node] (nondecreasing from 0) as a chain: a value produced in
 * unit i and read in unit i+1 is handed over; a node with an output read
 * two or more units later is never recomputed (kept over its whole range). */
rm_status rm_chain_units(const rm_graph *g, const int *unit, rm_chain *c);
void rm_chain_free(rm_chain *c);

/* What the user's marks (rm_recompute_begin/end, rm_set_policy) changed in
 * a schedule. The plan only counts; the session words the notes. */
typedef struct rm_marks {
    int forced;  /* nodes recomputed for a mark, that the strategy would keep */
    int kept;    /* nodes kept for a must-save mark, that the strategy would recompute */
    int ignored; /* the graph has marks, and the strategy schedules whole stages */
} rm_marks;

/* plan/strategy.c: the schedule of a named strategy ("none", "blocks",
 * "segments:K", "sqrt", "selective", "revolve:S"). With `marks` set the
 * user's marks are applied on top and what they changed is counted there;
 * with NULL they are not applied. */
rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward, rm_marks *marks,
                            rm_schedule *out, char *err, size_t errlen);

/* plan/revolve.c: Griewank-Walther binomial checkpointing. */
/* Fewest stage re-advances to reverse l stages with s slots (x0 counts as one). */
long rm_revolve_cost(int l, int s);
/* The closed form p(l,s) = t l - C(s+t, s+1), for tests. */
long rm_revolve_closed_form(int l, int s);
rm_status rm_schedule_revolve(const rm_graph *g, const rm_chain *c, int slots, rm_schedule *out,
                              char *err, size_t errlen);

/* plan/lower.c: schedule items from stage operations (plan/rotor.h). */
struct rm_rotor_op;
/* `outputs`: a recomputed Fall whose output the next stage reads before
 * the stage's backward rebuilds that output (as Rotor's model has it),
 * instead of reading the copy made before (held all along, which the
 * model does not count: cheaper, and larger). */
rm_status rm_schedule_lower(const rm_graph *g, const rm_chain *c, const struct rm_rotor_op *ops, int n_ops,
                            int outputs, rm_schedule *out, char *err, size_t errlen);

/* plan/program.c: instructions + buffers from a schedule (liveness). */
rm_status rm_program_build(const rm_graph *g, const rm_schedule *s, int threads,
                           rm_program *p, char *err, size_t errlen);
/* plan/memplan.c: offsets of the buffers in one arena. */
void rm_memplan(rm_program *p);

/* A measured training step, in ms: per graph stage (forward, backward) and
 * per node (its first forward, and its last recomputation if it had one), so
 * recomputations can be priced. The session measures it (exec/); the
 * planner only reads it. */
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

/* plan/program.c: what a program's recomputations cost: ms from the
 * profile (rm_profile_recompute_ms), or FLOPs when prof is NULL. */
double rm_recompute_cost(const rm_graph *g, const rm_program *p, const rm_profile *prof);

/* plan/planner.c: the memory-budget planner, a pure function of (graph,
 * budget, profile) -> schedule. User marks are not applied to any of its
 * candidates (its guarantee is the budget; a must-save mark could break it). */
struct rm_chain_model;
typedef struct rm_auto_info {
    int64_t budget;            /* the budget in bytes ("50%" resolved) */
    int64_t store_all;         /* arena bytes of store-all (strategy none) */
    int64_t min_budget;        /* smallest budget a plan fits in (-1: none) */
    int min_exact;             /* chains: min_budget plans, one byte less does not, whatever the budget */
    char chosen[32];           /* "rotor", or the uniform strategy that beat it */
    char blocks[256];          /* graphs that are not chains: the blocks planned (--print-plan) */
} rm_auto_info;
/* The fastest schedule whose arena fits `budget` ("64MiB", "1.5GiB", "50%"
 * of store-all, ...). prof: a measured step, or NULL for FLOP estimates. */
rm_status rm_schedule_budget(const rm_graph *g, const char *budget, int threads, const rm_profile *prof,
                             rm_schedule *out, rm_auto_info *info, char *err, size_t errlen);
/* The same in bytes, `slots` the dynamic program's discretisation and
 * `groups` the groups of stages it runs over (0: rm_rotor_groups' choice;
 * the number of stages or more: exact); `none` is store-all's program. */
rm_status rm_schedule_auto(const rm_graph *g, int64_t budget, int slots, int groups, int threads,
                           const rm_profile *prof, const rm_program *none, rm_schedule *out, rm_auto_info *info,
                           char *err, size_t errlen);
rm_status rm_chain_model_from_graph(const rm_graph *g, const rm_chain *c, const rm_profile *prof, int threads,
                                    const rm_program *store_all, struct rm_chain_model *m);
/* The same with the second way to keep each stage (the selective policy),
 * as the budget planner uses it. */
rm_status rm_chain_model_build(const rm_graph *g, const rm_chain *c, const rm_profile *prof, int threads,
                               const rm_program *store_all, struct rm_chain_model *m);
/* plan/planfit.c: Rotor's plans checked on the engine's arena. */
typedef struct rm_fit_ctx {
    const rm_graph *g;
    const rm_chain *c;
    const struct rm_chain_model *m;
    int slots, groups, threads;
    int64_t store_all;         /* store-all's arena */
    const rm_profile *prof;    /* prices the candidates (NULL: FLOPs) */
} rm_fit_ctx;
/* The cheapest plan found whose arena is at most `budget` (RM_ERR_BUDGET:
 * none). */
rm_status rm_chain_fit(const rm_fit_ctx *x, int64_t budget, rm_schedule *out, char *err, size_t errlen);
/* The least budget rm_chain_fit plans, to the byte: at it a plan is found
 * (*at, rm_schedule_free it), one byte below none; the same whatever budget
 * was asked (-1: none). */
int64_t rm_chain_min_budget(const rm_fit_ctx *x, rm_schedule *at);

#endif
