/* planfit.c: the budget planner's guarantee on chains. Rotor's program
 * (rotor_dp.c) plans in its model of the chain; here its plans are lowered
 * to the engine's program and laid out, and only an arena at or under the
 * budget is accepted.
 *
 * Two lowerings of one plan are measured (lower.c): the one that reads a
 * stage's output from the copy made before (cheaper; that copy is held all
 * along, which the model does not count, so near the least budget its
 * arena can be half as large again as the model says) and the one that
 * rebuilds it where the model does (its arena is the model's). The cheaper
 * that fits wins.
 *
 * When the plan at the budget does not fit, the budget given to the
 * program is tightened by the excess and it is filled again (the planner's
 * first behaviour, kept as it was); when that finds nothing, the plans of a
 * table filled at the budget, then of one filled at store-all (coarser
 * slots land where finer ones miss), are searched without filling again. */
#include "plan/chain/chain.h"
#include "plan/rotor/rotor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How much of a lowered plan is measured: its arena; its arena only when
 * its live bytes fit (the arena is never below them); its live bytes alone
 * (the layout is the costly part on long chains). */
enum { ARENA = 0, ARENA_IF_LIVE_FITS = 1, LIVE_ONLY = 2 };

typedef struct lowered {
    rm_schedule sch;
    int64_t bytes; /* the arena, or the live bytes when not laid out; -1: none */
    double cost;   /* recomputation, priced like every candidate */
} lowered;

static void lowered_free(lowered *l) {
    rm_schedule_free(&l->sch);
    l->bytes = -1;
}

static rm_status lower(const rm_fit_ctx *x, const rm_rotor_plan *p, int outputs, int how, int64_t budget,
                       lowered *l, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    l->bytes = -1;
    rm_status rc = rm_schedule_lower(x->g, x->c, p->ops, p->n_ops, outputs, &l->sch, err, errlen);
    rm_program prog;
    if (rc == RM_OK) rc = rm_program_build(x->g, &l->sch, x->threads, &prog, err, errlen);
    if (rc != RM_OK) {
        rm_schedule_free(&l->sch);
        return rc;
    }
    l->bytes = (int64_t)prog.peak_live_bytes;
    if (how == ARENA || (how == ARENA_IF_LIVE_FITS && l->bytes <= budget)) {
        rm_memplan(&prog);
        l->bytes = (int64_t)prog.arena_bytes;
    }
    l->cost = rm_recompute_cost(x->g, &prog, x->prof);
    rm_program_free(&prog);
    return RM_OK;
}

/* A plan of table `t` whose arena (LIVE_ONLY: live bytes) fits `budget`,
 * lowered as the model counts: the plan at `budget`, then at smaller
 * budgets while it is too large (the excess off, then bisecting between a
 * budget the table cannot plan and one too large). No fill. */
static rm_status from_table(const rm_fit_ctx *x, const rm_rotor_table *t, int64_t budget, int how, lowered *out,
                            char *err, size_t errlen) {
    int64_t target = budget, lo = -1, hi = budget; /* lo: no plan; hi: a plan too large */
    for (int attempt = 0; attempt < 32 && target > lo && hi - lo > RM_ALIGN; attempt++) {
        rm_rotor_plan p;
        if (rm_rotor_table_plan(t, target, &p) != RM_OK) return RM_ERR_NOMEM;
        lowered l = {{0}, -1, 0};
        rm_status rc = p.feasible ? lower(x, &p, 1, how, budget, &l, err, errlen) : RM_OK;
        rm_rotor_plan_free(&p);
        if (rc != RM_OK) return rc;
        if (l.bytes >= 0 && l.bytes <= budget) {
            *out = l;
            return RM_OK;
        }
        if (l.bytes >= 0) hi = target;
        else lo = target;
        int64_t excess = l.bytes - budget, step = excess > target / 100 ? excess : target / 100 + 1;
        lowered_free(&l);
        target = lo < 0 ? target - step : lo + (hi - lo) / 2;
    }
    return RM_ERR_BUDGET;
}

/* The program's plan at `target`: RM_OK with p->feasible 0 when it has none. */
static rm_status solve(const rm_fit_ctx *x, int64_t target, rm_rotor_plan *p, char *err, size_t errlen) {
    rm_status rc = rm_rotor_solve_groups(x->m, target, x->slots, x->groups, p);
    if (rc == RM_ERR_ARG)
        snprintf(err, errlen, "the model is a chain of %d stages, too many for the budget planner (%d at most): "
                 "plan fewer layers, or use a fixed --checkpoint strategy", x->m->n, RM_ROTOR_MAX_STAGES);
    else if (rc != RM_OK)
        snprintf(err, errlen, "out of memory planning");
    return rc;
}

/* The tightening loop: the plan at the budget, and while its arena (read
 * from the copies made before) exceeds it, the plan at the budget less the
 * excess. `rebuilt` gets the first plan lowered as the model counts, when
 * that one fits. */
static rm_status tighten(const rm_fit_ctx *x, int64_t budget, lowered *kept, lowered *rebuilt, char *err,
                         size_t errlen) {
    int64_t target = budget;
    for (int attempt = 0; attempt < 16 && target > 0; attempt++) {
        rm_rotor_plan p;
        rm_status rc = solve(x, target, &p, err, errlen);
        if (rc != RM_OK) return rc;
        if (!p.feasible) {
            rm_rotor_plan_free(&p);
            break;
        }
        if (attempt == 0 && (rc = lower(x, &p, 1, ARENA_IF_LIVE_FITS, budget, rebuilt, err, errlen)) == RM_OK &&
            rebuilt->bytes > budget)
            lowered_free(rebuilt);
        if (rc == RM_OK) rc = lower(x, &p, 0, ARENA, budget, kept, err, errlen);
        rm_rotor_plan_free(&p);
        if (rc != RM_OK) return rc;
        if (kept->bytes <= budget) return RM_OK;
        int64_t excess = kept->bytes - budget;
        lowered_free(kept);
        target -= excess > target / 100 ? excess : target / 100 + 1;
    }
    return RM_OK;
}

/* rm_chain_fit; `searches`: when the tightening finds nothing, also search
 * the tables filled at the budget and at store-all. */
static rm_status chain_fit(const rm_fit_ctx *x, int64_t budget, int searches, rm_schedule *out, char *err,
                           size_t errlen) {
    lowered kept = {{0}, -1, 0}, rebuilt = {{0}, -1, 0};
    rm_status rc = tighten(x, budget, &kept, &rebuilt, err, errlen);
    if (rc != RM_OK) {
        lowered_free(&kept), lowered_free(&rebuilt);
        return rc;
    }
    if (rebuilt.bytes >= 0 && (kept.bytes < 0 || rebuilt.cost < kept.cost * (1 - 1e-9))) {
        lowered_free(&kept);
        *out = rebuilt.sch;
        return RM_OK;
    }
    lowered_free(&rebuilt);
    if (kept.bytes >= 0) {
        *out = kept.sch;
        return RM_OK;
    }
    rc = RM_ERR_BUDGET;
    for (int k = 0; searches && k < 2 && rc == RM_ERR_BUDGET && budget < x->store_all; k++) {
        rm_rotor_table *t;
        if (rm_rotor_table_fill(x->m, k ? x->store_all : budget, x->slots, x->groups, &t) != RM_OK) return RM_ERR_NOMEM;
        rc = from_table(x, t, budget, ARENA_IF_LIVE_FITS, &kept, err, errlen);
        rm_rotor_table_free(t);
    }
    if (rc == RM_OK) *out = kept.sch;
    return rc;
}

rm_status rm_chain_fit(const rm_fit_ctx *x, int64_t budget, rm_schedule *out, char *err, size_t errlen) {
    return chain_fit(x, budget, 1, out, err, errlen);
}

/* The least budget whose live bytes a plan of a table filled at `from`
 * fits, by bisection down to 1/precision of it (-1: none fits `from`). */
static int64_t least_live(const rm_fit_ctx *x, int64_t from, int precision) {
    char err[256];
    lowered l;
    rm_rotor_table *t;
    if (rm_rotor_table_fill(x->m, from, x->slots, x->groups, &t) != RM_OK) return -1;
    int64_t lo = rm_rotor_table_least(t) - 1, hi = from;
    if (lo < 0 || from_table(x, t, hi, LIVE_ONLY, &l, err, sizeof err) != RM_OK) hi = -1;
    else lowered_free(&l);
    while (hi > 0 && hi - lo > hi / precision + RM_ALIGN) {
        int64_t mid = lo + (hi - lo) / 2;
        if (from_table(x, t, mid, LIVE_ONLY, &l, err, sizeof err) == RM_OK) lowered_free(&l), hi = mid;
        else lo = mid;
    }
    rm_rotor_table_free(t);
    return hi;
}

/* Whether one table's plans, lowered, fit `budget` (no fill): its
 * schedule into *at when they do. */
static int table_fits(const rm_fit_ctx *x, const rm_rotor_table *t, int64_t budget, rm_schedule *at) {
    char err[256];
    lowered l;
    if (budget <= 0 || from_table(x, t, budget, ARENA_IF_LIVE_FITS, &l, err, sizeof err) != RM_OK) return 0;
    rm_schedule_free(at);
    *at = l.sch;
    return 1;
}

/* The least budget, to the byte, that the plans of a table filled at hi
 * reach (*at: the schedule there): probed down from
 * hi (half a percent, then twice as far) to a budget they miss, then
 * bisected; no fill per probe. -1 when they do not reach hi itself, or out
 * of memory. */
static int64_t table_least(const rm_fit_ctx *x, int64_t hi, rm_schedule *at) {
    rm_rotor_table *t;
    if (rm_rotor_table_fill(x->m, hi, x->slots, x->groups, &t) != RM_OK) return -1;
    if (!table_fits(x, t, hi, at)) {
        rm_rotor_table_free(t);
        return -1;
    }
    int64_t lo = -1;
    for (int64_t step = hi / 200 + RM_ALIGN; lo < 0; step *= 2) {
        int64_t probe = hi - step;
        if (table_fits(x, t, probe, at)) hi = probe;
        else lo = probe > 0 ? probe : 0;
    }
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (table_fits(x, t, mid, at)) hi = mid;
        else lo = mid;
    }
    rm_rotor_table_free(t);
    return hi;
}

/* The search is on the engine's program: the least budget the program's
 * table filled at store-all plans (its model's, rounded up to store-all's
 * slots), then the plans of a table filled there, each lowered but no
 * table filled again, bisected on their live bytes to half a percent (when
 * that table plans nothing that fits: the same from store-all's table, to
 * 5%, then from one filled at what it found); then rm_chain_fit itself, the answer raised by a percent until
 * it plans (else bisected on rm_chain_fit up to store-all), and on exact
 * chains lowered by a few bisection steps on the tightening loop; then
 * made exact to one RM_ALIGN (exact_least), the same whatever budget the
 * session asked for, with its schedule in *at. */
static int64_t search_least(const rm_fit_ctx *x, int64_t *failed) {
    char err[256];
    rm_schedule sch;
    /* where the program's own model says (plans lowered as it counts are
     * its size), searched in a table filled there; else from store-all */
    int64_t model = rm_rotor_min_budget_groups(x->m, x->slots, x->groups, x->store_all, 1);
    int64_t b = model > 0 ? least_live(x, model, 200) : -1;
    if (b < 0) {
        b = least_live(x, x->store_all, 20);
        int64_t finer = b > 0 ? least_live(x, b, 200) : -1;
        if (finer > 0 && finer < b) b = finer;
    }
    for (int tries = 0; b > 0 && b < x->store_all && tries < 8; tries++, b += b / 100 > RM_ALIGN ? b / 100 : RM_ALIGN) {
        rm_status rc = rm_chain_fit(x, b, &sch, err, sizeof err);
        if (rc == RM_OK) rm_schedule_free(&sch);
        if (rc != RM_OK && rc != RM_ERR_BUDGET) return -1;
        if (rc == RM_ERR_BUDGET) {
            *failed = b;
            continue;
        }
        /* exact chains (cheap tables): a plan read from kept copies may fit a
         * little lower still; a few bisection steps on the tightening find it */
        for (int64_t lo = b - b / 32, step = 0; x->groups >= x->m->n && step < 4 && b - lo > RM_ALIGN; step++) {
            int64_t mid = lo + (b - lo) / 2;
            rc = chain_fit(x, mid, 0, &sch, err, sizeof err);
            if (rc == RM_OK) rm_schedule_free(&sch), b = mid;
            else if (rc == RM_ERR_BUDGET) lo = mid;
            else return -1;
        }
        return b;
    }
    int64_t lo = b > 0 && b < x->store_all ? b : 0, hi = x->store_all;
    if (rm_chain_fit(x, hi, &sch, err, sizeof err) != RM_OK) return -1;
    rm_schedule_free(&sch);
    while (hi - lo > hi / 200 + RM_ALIGN) {
        int64_t mid = lo + (hi - lo) / 2;
        if (rm_chain_fit(x, mid, &sch, err, sizeof err) == RM_OK) rm_schedule_free(&sch), hi = mid;
        else lo = mid, *failed = mid;
    }
    return hi;
}

int64_t rm_chain_min_budget(const rm_fit_ctx *x, rm_schedule *at) {
    char err[256];
    rm_schedule sch;
    int64_t failed = -1, b = search_least(x, &failed);
    memset(at, 0, sizeof *at);
    if (b <= 0) return b;
    /* The search's answer is within a share of the least, so where it
     * stopped depended on where it began. To the byte: the least the plans
     * of a table filled there reach (*at: a schedule at it, the session's
     * plan for any budget from it up where the fit finds none), then one
     * byte below it the fit itself must find nothing; when it does, the
     * same from that plan. */
    for (int round = 0; round < 8 && b > 1; round++) {
        int64_t t = table_least(x, b, at);
        if (t >= 0) b = t;
        else if (round == 0 && rm_chain_fit(x, b, at, err, sizeof err) != RM_OK) return -1;
        /* (a table filled at b that plans nothing there: *at is the fit's plan at b) */
        rm_status rc = rm_chain_fit(x, b - 1, &sch, err, sizeof err);
        if (rc == RM_ERR_BUDGET) return b;
        if (rc != RM_OK) return -1;
        rm_schedule_free(at);
        *at = sch, b -= 1;
    }
    return b;
}
