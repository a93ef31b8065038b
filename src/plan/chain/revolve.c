/* revolve.c: binomial checkpointing (Griewank & Walther, "Algorithm 799:
 * revolve", ACM TOMS 26(1), 2000) on the chain of stages.
 *
 * To reverse l stages starting from a stored stage input x_lo with s slots
 * (the slot of x_lo included), either s == 1 and every stage is reached by
 * re-advancing from x_lo, or we advance m stages, store x_{lo+m} in a slot,
 * reverse the upper l-m stages with s-1 slots, then the lower m with s:
 *   F(1, s) = 0,  F(l, 1) = l(l-1)/2,
 *   F(l, s) = min_{0<m<l} m + F(l-m, s-1) + F(m, s).
 * F counts stage advances; each stage is also run once more, with its
 * insides kept, right before its backward ("taped"), except the last one,
 * whose first forward serves. So the extra stage forwards over a plain
 * forward pass are exactly F(l, s), which equals the closed form
 *   p(l, s) = t l - C(s+t, s+1),  t such that C(s+t-1, s) < l <= C(s+t, s).
 * The published example: l = 10, s = 3 gives 15.
 *
 * The result is a sequence of stage operations (Fck/Fn to advance, Fall + B
 * to tape and reverse, L for the last stage), lowered like a Rotor plan. A
 * graph that is not a chain is reversed the same way over its units, as a
 * chain of units (rm_schedule_revolve_graph). */
#include "plan/chain/chain.h"
#include "plan/graphplan/graphplan.h"
#include "plan/rotor/rotor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double binom(int n, int k) {
    double r = 1;
    for (int i = 1; i <= k; i++) r = r * (n - k + i) / i;
    return r;
}

long rm_revolve_closed_form(int l, int s) {
    if (l <= 1) return 0;
    int t = 0;
    while (binom(s + t, s) < l) t++;
    return (long)(t * (double)l - binom(s + t, s + 1));
}

typedef struct revolve {
    int n, s;
    long *cost; /* (n+1) x (s+1) */
    int *split;
    rm_rotor_seq seq; /* the operations emitted */
} revolve;

#define IDX(r, l, k) ((size_t)(l) * (size_t)((r)->s + 1) + (size_t)(k))

static int dp(revolve *r, int n, int s) {
    r->n = n, r->s = s;
    r->cost = malloc(sizeof *r->cost * (size_t)(n + 1) * (size_t)(s + 1));
    r->split = malloc(sizeof *r->split * (size_t)(n + 1) * (size_t)(s + 1));
    if (!r->cost || !r->split) return 0;
    for (int l = 1; l <= n; l++)
        for (int k = 1; k <= s; k++) {
            r->split[IDX(r, l, k)] = 0;
            if (l == 1) r->cost[IDX(r, l, k)] = 0;
            else if (k == 1) r->cost[IDX(r, l, k)] = (long)l * (l - 1) / 2;
            else {
                long best = -1;
                for (int m = 1; m < l; m++) {
                    long c = m + r->cost[IDX(r, l - m, k - 1)] + r->cost[IDX(r, m, k)];
                    if (best < 0 || c < best) best = c, r->split[IDX(r, l, k)] = m;
                }
                r->cost[IDX(r, l, k)] = best;
            }
        }
    return 1;
}

long rm_revolve_cost(int l, int s) {
    if (l < 1 || s < 1) return -1;
    revolve r = {0};
    long c = dp(&r, l, s) ? r.cost[IDX(&r, l, s)] : -1;
    free(r.cost);
    free(r.split);
    return c;
}

/* advance through stages [from, to), keeping x_from */
static int advance(revolve *r, int from, int to) {
    for (int st = from; st < to; st++)
        if (!rm_rotor_seq_push(&r->seq, st == from ? RM_ROTOR_FCK : RM_ROTOR_FN, st)) return 0;
    return 1;
}

static int tape(revolve *r, int st) {
    if (st == r->n - 1) return rm_rotor_seq_push(&r->seq, RM_ROTOR_L, st);
    return rm_rotor_seq_push(&r->seq, RM_ROTOR_FALL, st) && rm_rotor_seq_push(&r->seq, RM_ROTOR_B, st);
}

static int reverse(revolve *r, int lo, int l, int s) {
    if (l == 1) return tape(r, lo);
    if (s == 1) {
        for (int i = lo + l - 1; i >= lo; i--)
            if (!advance(r, lo, i) || !tape(r, i)) return 0;
        return 1;
    }
    int m = r->split[IDX(r, l, s)];
    return advance(r, lo, lo + m) && reverse(r, lo + m, l - m, s - 1) && reverse(r, lo, m, s);
}

rm_status rm_schedule_revolve(const rm_graph *g, const rm_chain *c, int slots, rm_schedule *out, char *err,
                              size_t errlen) {
    revolve r = {0};
    if (slots > c->n) slots = c->n; /* more slots than stages buys nothing */
    rm_status rc = RM_OK;
    if (!dp(&r, c->n, slots) || !reverse(&r, 0, c->n, slots)) {
        snprintf(err, errlen, "out of memory planning revolve");
        rc = RM_ERR_NOMEM;
    } else {
        rc = rm_schedule_lower(g, c, r.seq.ops, r.seq.n, 0, out, err, errlen);
    }
    free(r.cost);
    free(r.split);
    free(r.seq.ops);
    return rc;
}

rm_status rm_schedule_revolve_graph(const rm_graph *g, int slots, rm_schedule *out, char *err, size_t errlen) {
    rm_gmodel m;
    memset(out, 0, sizeof *out);
    if (rm_gmodel_from_graph(g, NULL, 1, &m) != RM_OK) return RM_ERR_NOMEM;
    int *unit = malloc(((size_t)m.n + 1) * sizeof *unit);
    rm_chain c = {0};
    rm_status rc = unit ? RM_OK : RM_ERR_NOMEM;
    if (rc == RM_OK) rm_graph_units(g, &m, unit);
    if (rc == RM_OK) rc = rm_chain_units(g, unit, &c);
    if (rc == RM_OK) rc = rm_schedule_revolve(g, &c, slots, out, err, errlen);
    rm_chain_free(&c);
    free(unit);
    rm_gmodel_free(&m);
    return rc;
}
