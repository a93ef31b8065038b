/* plan/chain/chain.h: what the chain planner offers: the graph as a chain
 * of stages, the classic strategies (none, blocks, segments, sqrt,
 * selective, revolve), Rotor's operations lowered onto the graph, and the
 * memory-budget planner (Rotor's plans checked on the arena; graphs that
 * are not chains go to the graph planner, plan/graphplan/). */
#ifndef REMAT_PLAN_CHAIN_H
#define REMAT_PLAN_CHAIN_H

#include "plan/plan.h"
#include "program/program.h"

/* plan/chain/chain.c: the graph as a chain of stages. Empty stages are skipped;
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

/* plan/chain/strategy.c: the schedule of a named strategy ("none", "blocks",
 * "segments:K", "sqrt", "selective", "revolve:S"). With `marks` set the
 * user's marks are applied on top and what they changed is counted there;
 * with NULL they are not applied. */
rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward, rm_marks *marks,
                            rm_schedule *out, char *err, size_t errlen);

/* plan/chain/revolve.c: Griewank-Walther binomial checkpointing. */
/* Fewest stage re-advances to reverse l stages with s slots (x0 counts as one). */
long rm_revolve_cost(int l, int s);
/* The closed form p(l,s) = t l - C(s+t, s+1), for tests. */
long rm_revolve_closed_form(int l, int s);
rm_status rm_schedule_revolve(const rm_graph *g, const rm_chain *c, int slots, rm_schedule *out,
                              char *err, size_t errlen);
/* revolve:S on any graph: Griewank and Walther's schedule over the units
 * (declared stages or automatic blocks) as a chain of units
 * (rm_chain_units): what one unit hands the next is checkpointed or
 * recomputed, what is read two or more units later is kept. */
rm_status rm_schedule_revolve_graph(const rm_graph *g, int slots, rm_schedule *out, char *err, size_t errlen);

/* plan/chain/lower.c: schedule items from stage operations (plan/rotor/rotor.h). */
struct rm_rotor_op;
/* `outputs`: a recomputed Fall whose output the next stage reads before
 * the stage's backward rebuilds that output (as Rotor's model has it),
 * instead of reading the copy made before (held all along, which the
 * model does not count: cheaper, and larger). */
rm_status rm_schedule_lower(const rm_graph *g, const rm_chain *c, const struct rm_rotor_op *ops, int n_ops,
                            int outputs, rm_schedule *out, char *err, size_t errlen);
/* The values of the stages a plan keeps on disk (Fpage: everything but the
 * stage's output), marked 1 in values (per value of g), for plan/paging/paging.c. */
void rm_rotor_paged_values(const rm_graph *g, const rm_chain *c, const struct rm_rotor_op *ops, int n_ops,
                           char *values);

/* plan/chain/planner.c: the memory-budget planner, a pure function of (graph,
 * budget, profile) -> schedule. User marks are not applied to any of its
 * candidates (its guarantee is the budget; a must-save mark could break it). */
struct rm_chain_model;
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
/* The chain's plan at `budget` over Rotor's ways to keep a stage and a third
 * (issue 20): kept on disk, all but its output written to a scratch file
 * after its forward and read back for its backward, at ms_per_byte and
 * latency_ms a transfer (times in the model's units: units_per_ms, 1 with a
 * profile). Exact chains only (RM_ERR_ARG otherwise); RM_ERR_BUDGET when
 * nothing fits. values (per value, zeroed by the caller) gets the values
 * the plan pages; the schedule is the lowering, to be paged with them
 * (plan/paging/paging.c), laid out and checked by the caller. */
rm_status rm_schedule_chain_paged(const rm_graph *g, int64_t budget, int threads, const rm_profile *prof,
                                  double ms_per_byte, double latency_ms, double units_per_ms, rm_schedule *out,
                                  char *values, char *err, size_t errlen);

/* plan/chain/planfit.c: Rotor's plans checked on the engine's arena. */
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
