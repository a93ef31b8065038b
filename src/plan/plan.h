/* plan/plan.h: what every planner of plan/ writes: a schedule (what to run
 * in which order), built with the primitives of schedule.c, and what they
 * read: a measured step (rm_profile). The planners, each in its own folder
 * with one header that says what it offers:
 *   plan/rotor/      Rotor's dynamic program on a chain model, its least budget
 *   plan/chain/      the chain of stages, the classic strategies, the budget planner
 *   plan/graphplan/  the same on any graph (and its fast variant), graph files
 *   plan/paging/     transfers to a scratch file placed into any schedule
 * A schedule becomes an instruction list and a memory layout in program/. */
#ifndef REMAT_PLAN_H
#define REMAT_PLAN_H

#include "graph/graph.h"
#include "ops/ops.h"
#include "util/scratch.h"

/* Profiles made elsewhere (rm_plan_chain, rm_plan_graph): their times, in
 * the caller's units, add up to at most RM_PLAN_MAX_TIME, so the planners'
 * sums of them (each forward recomputed up to once per later stage) stay
 * finite doubles; their bytes add up to at most RM_MAX_BUDGET_BYTES (2^60),
 * so no 64-bit sum of them overflows. */
#define RM_PLAN_MAX_TIME 1e30

/* ---- what a schedule is made of ---------------------------------------------- */

typedef enum rm_instr_kind {
    RM_INSTR_FORWARD = 0, /* run node's forward (first time) */
    RM_INSTR_RECOMPUTE,   /* run node's forward again, to rebuild freed values */
    RM_INSTR_BACKWARD,    /* run node's backward */
    /* Paging to the scratch file (issue 20). For these `node` is the index
     * of a paging unit (rm_page_unit) of the schedule or program. */
    RM_INSTR_PAGE_OUT,    /* start writing the unit's buffer to the scratch file */
    RM_INSTR_PAGE_IN,     /* define the unit's buffer and start reading it from the file */
    RM_INSTR_WAIT,        /* wait for the unit's transfer in flight (a page-out's buffer dies here) */
    RM_INSTR_UPDATE       /* fused optimizer: update a paged unit of state (its staged moments) */
} rm_instr_kind;
/* Forward, recompute, backward: the instructions that run a node. */
static inline int rm_instr_runs_node(rm_instr_kind k) { return k <= RM_INSTR_BACKWARD; }

/* What the scratch tier moves (plan/paging/paging.c decides, the program places
 * the buffers, the executor moves them). A value's unit is one computation
 * of an activation, paged out after its last reader before its longest idle
 * gap and read back before its first reader after it. A state unit lives in
 * the scratch file for good: MOMENTS holds AdamW's m and v of floats
 * [lo, hi) of a parameter (m's part, then v's, each rounded up to
 * RM_PAGE_ALIGN), PARAM a whole parameter, read in before its readers. */
typedef enum rm_unit_kind { RM_UNIT_VALUE = 0, RM_UNIT_MOMENTS, RM_UNIT_PARAM } rm_unit_kind;
typedef struct rm_page_unit {
    rm_unit_kind kind;
    int value;          /* the activation, or the parameter's value */
    int param;          /* MOMENTS, PARAM: index into g->params (-1 for VALUE) */
    int64_t lo, hi;     /* MOMENTS: floats [lo, hi) of the parameter */
    size_t bytes;       /* its buffer (and its place in the file), a multiple of RM_PAGE_ALIGN */
    uint64_t file_off;  /* MOMENTS, PARAM: its place in the scratch file, the same in every program of a
                         * session (the state's layout follows from the marks alone) */
} rm_page_unit;

/* An ordered list of (node, forward/recompute/backward): what a strategy
 * decides. Liveness and buffers follow from the order alone. */
typedef struct rm_sched_item {
    rm_instr_kind kind;
    int node;
} rm_sched_item;

typedef struct rm_schedule {
    rm_sched_item *items;
    int n, cap;
    rm_page_unit *units; /* what its paging items move (plan/paging/paging.c); NULL: none */
    int n_units;
    uint64_t state_bytes; /* the file's first bytes, the state's (value pages follow) */
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

/* What a budget planner found (plan/chain/planner.c for chains,
 * plan/graphplan/graphbudget.c for other graphs). */
typedef struct rm_auto_info {
    int64_t budget;            /* the budget in bytes ("50%" resolved) */
    int64_t store_all;         /* arena bytes of store-all (strategy none) */
    int64_t min_budget;        /* smallest budget a plan fits in (-1: none) */
    int min_exact;             /* chains: min_budget plans, one byte less does not, whatever the budget */
    char chosen[32];           /* "rotor", or the uniform strategy that beat it */
    char blocks[256];          /* graphs that are not chains: the blocks planned (--print-plan) */
} rm_auto_info;

#endif
