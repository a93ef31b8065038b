/* plan/graphplan/graphplan.h: recomputation plans for any graph, not only chains of
 * stages (docs/RECOMPUTE.md, "General graphs").
 *
 * The planner works on an abstract model of a training step: forward nodes
 * in topological order (the last one is the loss), each with its forward
 * and backward time, the bytes of its output and of that output's gradient,
 * its workspaces, its inputs (edges from producer nodes), and which of its
 * inputs and whether its output its backward reads. The engine's graph, a
 * graph profiled elsewhere (JSON) and the tests' random graphs all become
 * such a model.
 *
 * A plan gives every node a mode and every node a block (a contiguous range
 * of the topological order; blocks are reversed one at a time, last first):
 *   KEEP   the output stays from its forward to its last backward reader
 *   ONCE   the output is freed after its last forward reader and recomputed
 *          the first time a backward needs it; that copy then serves every
 *          later reader (a value read by many blocks is held over that range)
 *   EACH   like ONCE, but every block that reads it recomputes its own copy
 *   FEACH  like EACH, and in the forward pass too: freed after each forward
 *          reader, recomputed before the next (a long skip held as its
 *          small ancestors instead)
 * Its schedule is: every forward (with FEACH recomputations), then for each block from the last one,
 * the recomputations its backwards need (transitively, from any earlier
 * block), then its backwards. Liveness follows from the order as in
 * program/program.c, so the model's peak is the engine's peak up to alignment
 * and the grouping of outputs per node. */
#ifndef REMAT_GRAPHPLAN_H
#define REMAT_GRAPHPLAN_H
#include "plan/plan.h"

typedef struct rm_gmodel {
    int n;                 /* forward nodes, topological order; n-1 is the loss */
    double *fwd, *bwd;     /* forward and backward time of each node */
    int64_t *bytes;        /* bytes of its output */
    int64_t *grad;         /* bytes of its output's gradient (0: none) */
    int64_t *ws_f, *ws_b;  /* forward and backward workspace */
    char *has_bwd;         /* its backward runs */
    char *reads_out;       /* its backward reads its output */
    int *off;              /* n+1 entries: the inputs of node i are edges off[i] .. off[i+1]-1 */
    int *src;              /* edge -> producer node (< consumer) */
    char *reads_in;        /* edge -> the consumer's backward reads this input */
    char *no_grad;         /* edge -> the consumer's backward makes none of the producer's gradient (an
                            * edge for what a rebuild reads, or for bytes held): it neither creates
                            * nor holds that gradient */
    int n_edges, cap_edges;
    char **names;          /* optional node names (JSON graphs), or NULL */
    /* paging to a scratch file (issue 20): its bandwidth in bytes per unit of
     * time (0: no paging) and the time one transfer takes beyond its bytes */
    double bw, io_latency;
    /* an eager framework runs the plan (issue 34: rematplan's op-level
     * recomputation): a value is recomputed at the backward that reads it,
     * never in the forward pass, so blocks are one node each and no node is
     * FEACH (rm_gmodel_top_mode) */
    int eager;
    char *most;            /* optional (NULL: none): per node, the last mode it may take (RM_GKEEP: it
                            * must be kept; RM_GONCE: never recomputed for each reader) */
    int *hint;             /* optional (NULL: none): per node, a block of the model's own (its layers),
                            * one of the groupings the search starts from */
} rm_gmodel;

/* The last mode node v may take: its own (most) where it has one, RM_GEACH
 * in an eager model, else RM_GFEACH. */
int rm_gmodel_top(const rm_gmodel *m, int v);
/* Every node's mode lowered to the last it may take. */
void rm_gmodel_clamp(const rm_gmodel *m, char *mode);

/* Allocates a model of n nodes with no edges; edges are added in consumer
 * order with rm_gmodel_edge, then rm_gmodel_close_node(m, i) for each i. */
rm_status rm_gmodel_alloc(rm_gmodel *m, int n);
rm_status rm_gmodel_edge(rm_gmodel *m, int src, int reads_in);
/* The same, saying whether the consumer's backward makes (part of) the producer's gradient. */
rm_status rm_gmodel_edge_grad(rm_gmodel *m, int src, int reads_in, int makes_grad);
void rm_gmodel_close_node(rm_gmodel *m, int i);
void rm_gmodel_free(rm_gmodel *m);

enum { RM_GKEEP = 0, RM_GONCE = 1, RM_GEACH = 2, RM_GFEACH = 3 };

typedef struct rm_gplan {
    char *mode;    /* per node: RM_GKEEP, RM_GONCE, RM_GEACH or RM_GFEACH */
    int *block;    /* per node: block id, nondecreasing from 0 */
    int n_blocks;
    double cost;   /* recomputation time */
    int64_t peak;  /* peak bytes (the evaluator's) */
    int feasible;
} rm_gplan;
void rm_gplan_free(rm_gplan *p);

/* The schedule of a plan (node ids of the model; for the engine's graph
 * they are its node ids). */
rm_status rm_gplan_schedule(const rm_gmodel *m, const char *mode, const int *block, rm_schedule *out);
/* The same with a kept workspace of m->n nodes, into `out` (emptied, its
 * room kept): no allocation once `out` is large enough. With max_items > 0
 * a schedule that would hold more items is not generated: RM_ERR_BUDGET as
 * soon as it passes them (a plan recomputing most of a large graph for each
 * block would take memory and time quadratic in its nodes). */
typedef struct rm_gwork {
    int *ok, *marked, *stack;
    char *rec;
    int max_items; /* 0: no cap (rm_gwork_alloc sets 0) */
} rm_gwork;
rm_status rm_gwork_alloc(rm_gwork *w, int n);
void rm_gwork_free(rm_gwork *w);
rm_status rm_gplan_schedule_with(const rm_gmodel *m, const char *mode, const int *block, rm_gwork *w,
                                 rm_schedule *out);

/* What a schedule costs: its recomputation time, peak bytes, and the bytes
 * above `budget` summed over its instructions (0: it fits). */
typedef struct rm_geval_result {
    double cost;
    int64_t peak, excess;
} rm_geval_result;
typedef rm_status (*rm_geval_fn)(void *ctx, const rm_gmodel *m, const rm_schedule *s, int64_t budget,
                                 rm_geval_result *r);
/* The default evaluator: program/program.c's liveness on the model. */
rm_status rm_gmodel_simulate(void *ctx, const rm_gmodel *m, const rm_schedule *s, int64_t budget,
                             rm_geval_result *r);
/* The same with a kept workspace (grown as needed; zero it first), which it
 * leaves holding the profile: live[t] the bytes live during item t, and for
 * each item t that computes a copy (forward or recompute), copy_last[t] the
 * last item that reads that copy. */
typedef struct rm_gsim {
    int cap_n, cap_t;
    int *born, *last, *gborn, *glast;
    int64_t *delta, *dies, *live;
    int *copy_last;
} rm_gsim;
rm_status rm_gsim_run(const rm_gmodel *m, const rm_schedule *s, int64_t budget, rm_gsim *w, rm_geval_result *r);
void rm_gsim_free(rm_gsim *w);

/* The cheapest plan found whose peak (by `eval`, NULL: rm_gmodel_simulate)
 * is at most budget. hint: optional block ids (declared stages) tried as
 * one of the groupings. plan->feasible = 0 when none fits. */
rm_status rm_gplan_solve(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                         rm_gplan *plan);
/* plan/graphplan/graphfast.c: the search of large graphs (default evaluator): from
 * `mode`, a batched descent scored from one pricing's profile until the
 * plan fits, then (prune_too) undoes that an upper bound of the live bytes
 * shows safe, and a few more priced exactly (prune_too > 1: every undo,
 * priced, pass after pass while one fits). mode is left as the plan
 * found; r->excess > 0 when it does not fit. */
rm_status rm_gplan_fast(const rm_gmodel *m, int64_t budget, const int *block, int prune_too, char *mode,
                        rm_geval_result *r);
/* Its descent makes no schedule longer than this many times store-all's
 * (about 2n items): no plan that recomputes each node more than about
 * five times on average (near the least budget such plans run 40 times the
 * forward pass, and pricing them would outlast the search). */
#define RM_GFAST_MAX_RECOMPUTE 6
/* rm_gplan_solve with one more starting point, `seed` (a plan, or NULL):
 * a budget the seed fits always gets a plan. */
rm_status rm_gplan_solve_from(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                              const rm_gplan *seed, rm_gplan *plan);
/* The least budget at which rm_gplan_solve finds a plan: a bisection (on
 * graphs of up to 64 nodes, or another evaluator), else the descent of
 * graphfast.c followed down from store-all by budgets 20% lower, then
 * closer, each from the last plan that fitted. `at` (optional) gets a plan
 * that fits it, to seed rm_gplan_solve_from. */
int64_t rm_gplan_least(const rm_gmodel *m, const int *hint, rm_geval_fn eval, void *ctx, rm_gplan *at);
int64_t rm_gplan_min_budget(const rm_gmodel *m, const int *hint, rm_geval_fn eval, void *ctx);

/* ---- paging on the model (plan/graphplan/graphpage.c, issue 20) --------------------
 * A third choice per node beside keeping and recomputing its output: page
 * it, written to the scratch file after its last reader in the forward pass
 * (a PAGE_OUT item whose node is the model node) and read back (PAGE_IN)
 * `lead` items ahead of its first backward reader. The default evaluator
 * (rm_gsim_run) frees the copy from the page-out to the page-in and adds to
 * the cost the time the compute waits for reads: transfers run one after
 * another on one channel at m->bw, each taking m->io_latency more, and an
 * item that reads a value waits until its read is done. */
/* The schedule s with the paging items of paged (per node: 0, or the lead
 * of its read, >= 1) merged in. */
rm_status rm_gplan_page_schedule(const rm_gmodel *m, const rm_schedule *s, const int *paged, rm_schedule *out);
/* plan/graphplan/graphsched.c: the compute's total wait for the reads of schedule s. */
double rm_gmodel_waits(const rm_gmodel *m, const rm_schedule *s);
/* The cheapest plan found at `budget` over keep, recompute and page: the
 * recompute plans of rm_gplan_solve at the budget and at larger budgets
 * (1.1 .. 2.5 times, store-all), each with the outputs held from the
 * forward into the backward pass paged, largest first, until it fits, then
 * improved by unpaging or re-leading one read at a time; everything priced
 * by eval (which counts the waits). paged gets, per node, the lead of its read (0: not
 * paged); plan as rm_gplan_solve (its cost: recomputation and waits). */
rm_status rm_gplan_solve_paged(const rm_gmodel *m, int64_t budget, const int *hint, rm_geval_fn eval, void *ctx,
                               rm_gplan *plan, int *paged);

/* plan/graphplan/blocks.c: automatic blocks. Cuts the topological order into about
 * k blocks at points where few bytes cross (values produced before the cut
 * and read after it); block[i] is node i's block. Returns the number. */
int rm_auto_blocks(const rm_gmodel *m, int k, int *block);
/* The bytes crossing the cut after node c (for messages and tests). */
int64_t rm_cut_bytes(const rm_gmodel *m, int c);



/* ---- the engine's graph (plan/graphplan/graphbudget.c) ---------------------------- */
/* The model of g: one model node per graph node (same ids); times from the
 * profile (recomputation ms) or FLOPs; bytes as the arena aligns them. */
rm_status rm_gmodel_from_graph(const rm_graph *g, const rm_profile *prof, int threads, rm_gmodel *m);
/* The units uniform strategies group: the declared stages when there are
 * several, else automatic blocks of about sqrt(nodes) each. Returns the count. */
int rm_graph_units(const rm_graph *g, const rm_gmodel *m, int *unit);
/* blocks / segments:K / sqrt on any graph: k groups of units (k <= 0: one
 * per unit); values read across groups are kept over their whole range,
 * the rest of every group but the last is recomputed before its backward. */
rm_status rm_schedule_uniform_graph(const rm_graph *g, int k, int sqrt_k, rm_schedule *out, char *err,
                                    size_t errlen);
/* The budget planner for graphs that are not chains: rm_gplan_solve on the
 * graph's model, lowered and checked against the engine's arena (tightened
 * and planned again while the arena exceeds the budget). Sets info->chosen
 * and info->min_budget. */
rm_status rm_schedule_graph_auto(const rm_graph *g, int64_t budget, int threads, const rm_profile *prof,
                                 rm_schedule *out, rm_auto_info *info, char *err, size_t errlen);
#endif
