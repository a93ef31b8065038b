/* rotor.h: optimal recompute schedules for heterogeneous chains under a
 * memory budget (Beaumont, Eyraud-Dubois, Herrmann, Joly, Shilova: "Optimal
 * checkpointing for heterogeneous chains: how to train deep neural networks
 * with limited memory", 2019), in its persistent-memory model. */
#ifndef REMAT_ROTOR_H
#define REMAT_ROTOR_H
#include "remat.h"

/* A chain of n stages; the last one is the loss. a has n+1 entries:
 * a[i] is the size of stage i's input x_i (a[n]: the loss output).
 * ab[i] (and ab2[i]) include the stage's output x_{i+1}, so ab[i] >= a[i+1]
 * for every stage but the loss; B i reads x_i as well as x̄_i. */
typedef struct rm_chain_model {
    int n;
    double *uf, *ub;            /* forward and backward time */
    int64_t *a, *ab, *ft, *bt;  /* bytes: input, kept-by-Fall, fwd/bwd workspace */
    /* optional second way to keep a stage (Rockmate-style): the selective
     * policy keeps ab2 bytes and its backward takes ub2 (cheap values are
     * rebuilt inside it) with workspace bt2; NULL when absent */
    double *ub2;
    int64_t *ab2, *bt2;
    /* optional third way (issue 20; exact chains only): kept on disk. The
     * stage keeps all its backward needs (as Fall) but only its output
     * x_{i+1} stays in memory; the rest is written to a scratch file and read
     * back for its backward, whose time is then ubp[i] (ub[i] and what the
     * transfers are predicted to add); NULL when absent */
    double *ubp;
    /* optional: how far a checkpointed range may reach (a framework that can
     * checkpoint only some ranges, e.g. rematplan's module calls): a range
     * Fck i, Fn i+1 .. Fn k may start at stage i only if k <= ck_last[i]
     * (ck_last[i] < i: none starts there); NULL when absent: any range */
    int *ck_last;
} rm_chain_model;

/* The largest total of a chain's bytes (the sum of every a, ab, ft, bt) the
 * planner takes: 2^60 bytes (1 EiB). Its 64-bit sums, doublings and rounding
 * then cannot overflow; larger budgets are planned as this one. */
#define RM_ROTOR_MAX_BYTES ((int64_t)1 << 60)

/* The dynamic program's table has (slots+1) n (n+1) / 2 cells (a double
 * and an int each) and its fill takes ~slots n^3 / 6 steps. A chain whose
 * table would exceed RM_ROTOR_MAX_CELLS (about 130 stages at 500 slots) is
 * coarsened into RM_ROTOR_COARSE_GROUPS groups of consecutive stages
 * (rotor_dp.c says how); chains of more than RM_ROTOR_MAX_STAGES stages are
 * refused rather than planned for minutes. */
#define RM_ROTOR_MAX_CELLS 4200000
#define RM_ROTOR_COARSE_GROUPS 128
#define RM_ROTOR_GROUP_OPTIONS 16
#define RM_ROTOR_MAX_STAGES 10000
/* The groups the program runs over for n stages (n: exact), 0 when refused. */
int rm_rotor_groups(int n, int slots);
/* `slots` when a chain of n stages is planned, 0 when it is refused. */
int rm_rotor_slots(int n, int slots);
/* The bytes of the table while planning n stages. */
size_t rm_rotor_table_bytes(int n, int slots);

rm_status rm_chain_model_alloc(rm_chain_model *c, int n);
/* Adds the arrays of the second (selective) option. */
rm_status rm_chain_model_alloc_selective(rm_chain_model *c);
/* Adds ck_last, every range allowed (ck_last[i] = n - 1). */
rm_status rm_chain_model_alloc_ranges(rm_chain_model *c);
/* Adds the third (paged) option: ubp[i] = ub[i] + the time its transfers
 * (writing and reading ab[i] - a[i+1] bytes at bw bytes per unit of time,
 * lat each) outlast the next stage's forward and backward, which they
 * overlap. */
rm_status rm_chain_model_add_paging(rm_chain_model *c, double bw, double lat);
void rm_chain_model_free(rm_chain_model *c);

/* The operations of a schedule. */
typedef enum rm_rotor_op_kind {
    RM_ROTOR_FN = 0, /* forward, input not kept (unless stored elsewhere) */
    RM_ROTOR_FCK,    /* forward, input kept as a checkpoint */
    RM_ROTOR_FALL,   /* forward keeping everything the backward needs */
    RM_ROTOR_B,      /* backward */
    RM_ROTOR_L,      /* the loss stage: forward and backward */
    RM_ROTOR_FSEL,   /* forward keeping what the selective policy keeps */
    RM_ROTOR_FPAGE   /* forward keeping everything, all but the output paged to disk */
} rm_rotor_op_kind;
typedef struct rm_rotor_op {
    rm_rotor_op_kind kind;
    int stage;
} rm_rotor_op;

/* A growing list of operations (the DP's and revolve's output). */
typedef struct rm_rotor_seq {
    rm_rotor_op *ops;
    int n, cap;
} rm_rotor_seq;
/* Appends one operation; 0 when out of memory. */
int rm_rotor_seq_push(rm_rotor_seq *q, rm_rotor_op_kind k, int stage);

typedef struct rm_rotor_plan {
    int feasible;
    double time;           /* predicted time of the whole sequence */
    int64_t peak_bytes;    /* predicted peak, from the simulator */
    int64_t min_budget;    /* least feasible budget at this resolution (feasible plans only) */
    rm_rotor_op *ops;
    int n_ops;
} rm_rotor_plan;

const char *rm_rotor_op_name(rm_rotor_op_kind k);

/* The fastest sequence whose memory (the chain input a[0] included) fits in
 * `budget` bytes; `slots` is the discretisation (e.g. 500). Infeasible
 * budgets give plan->feasible = 0 and RM_OK. Exact (per Rotor's model) up
 * to rm_rotor_groups' limit, over groups of stages beyond. */
rm_status rm_rotor_solve(const rm_chain_model *c, int64_t budget, int slots, rm_rotor_plan *plan);
/* The same over `groups` groups (>= c->n: exact, whatever the table costs). */
rm_status rm_rotor_solve_groups(const rm_chain_model *c, int64_t budget, int slots, int groups, rm_rotor_plan *plan);
/* The program's table filled once at `budget` (slots of budget/slots) and
 * kept: it plans any budget up to that one without filling again (at the
 * filled budget's resolution), and knows the least budget it plans. The
 * chain model must outlive it. */
typedef struct rm_rotor_table rm_rotor_table;
rm_status rm_rotor_table_fill(const rm_chain_model *c, int64_t budget, int slots, int groups, rm_rotor_table **t);
rm_status rm_rotor_table_plan(const rm_rotor_table *t, int64_t budget, rm_rotor_plan *plan);
int64_t rm_rotor_table_least(const rm_rotor_table *t); /* -1: none */
int64_t rm_rotor_table_budget(const rm_rotor_table *t); /* the budget it was filled at */
void rm_rotor_table_free(rm_rotor_table *t);
void rm_rotor_plan_free(rm_rotor_plan *p);

/* The simulator's state: which x_i, x̄_i and d_i are held, memory, time. */
typedef struct rm_rotor_sim {
    char *x, *xbar, *dgrad;
    int64_t mem, peak;
    double time;
} rm_rotor_sim;
int rm_rotor_sim_init(const rm_chain_model *c, rm_rotor_sim *st);
void rm_rotor_sim_free(rm_rotor_sim *st);
/* Applies one operation; 0 if it is not valid in this state. */
int rm_rotor_apply(const rm_chain_model *c, rm_rotor_sim *st, rm_rotor_op op);

/* Replays a sequence: its time and peak memory, and whether every operation
 * found what it needs. Returns 0 for an invalid sequence. */
int rm_rotor_simulate(const rm_chain_model *c, const rm_rotor_op *ops, int n_ops, double *time, int64_t *peak);

/* rotor_least.c: the least budget (bytes) the planner plans, the same
 * whatever budget is asked, and in *at (rm_rotor_plan_free it) a plan that
 * fits it: on chains the exact program plans, the least memory of Rotor's
 * model computed without slots (no slotted plan needs less, so one byte
 * less plans nothing); on longer ones the grouped program's own least
 * (refilled at what it found until that stops dropping, then lowered while
 * a plan exists one byte below). A budget at or above it always plans: the
 * caller falls back on *at where the slotted program finds nothing. -1:
 * too many stages, or out of memory. */
int64_t rm_rotor_least(const rm_chain_model *c, int slots, rm_rotor_plan *at);
/* The smallest budget (bytes) for which a schedule exists, to a fraction
 * of a percent (three fills, each at the least the one before found). */
int64_t rm_rotor_min_budget(const rm_chain_model *c, int slots);
/* The same over `groups` groups in at most `rounds` fills, the first at
 * `from` bytes (> 0: a budget known to be feasible; 0: twice everything). */
int64_t rm_rotor_min_budget_groups(const rm_chain_model *c, int slots, int groups, int64_t from, int rounds);
#endif
