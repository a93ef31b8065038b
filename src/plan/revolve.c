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
 * Snapshots are not managed here: a stored x_j is simply a value that a
 * later recompute reads, so the step program's liveness keeps it exactly as
 * long as revolve needs it. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>

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
} revolve;

static int dp(revolve *r, int n, int s) {
    r->n = n, r->s = s;
    r->cost = malloc(sizeof *r->cost * (size_t)(n + 1) * (size_t)(s + 1));
    r->split = malloc(sizeof *r->split * (size_t)(n + 1) * (size_t)(s + 1));
    if (!r->cost || !r->split) return 0;
#define COST(l, k) r->cost[(size_t)(l) * (size_t)(s + 1) + (size_t)(k)]
#define SPLIT(l, k) r->split[(size_t)(l) * (size_t)(s + 1) + (size_t)(k)]
    for (int l = 1; l <= n; l++)
        for (int k = 1; k <= s; k++) {
            SPLIT(l, k) = 0;
            if (l == 1) COST(l, k) = 0;
            else if (k == 1) COST(l, k) = (long)l * (l - 1) / 2;
            else {
                long best = -1;
                for (int m = 1; m < l; m++) {
                    long c = m + COST(l - m, k - 1) + COST(m, k);
                    if (best < 0 || c < best) best = c, SPLIT(l, k) = m;
                }
                COST(l, k) = best;
            }
        }
    return 1;
}

long rm_revolve_cost(int l, int s) {
    if (l < 1 || s < 1) return -1;
    revolve r = {0};
    long c = dp(&r, l, s) ? r.cost[(size_t)l * (size_t)(s + 1) + (size_t)s] : -1;
    free(r.cost);
    free(r.split);
    return c;
}

typedef struct emitter {
    const rm_graph *g;
    const rm_chain *c;
    revolve *r;
    char *forwarded; /* stage has run its first forward */
    char *all;       /* want-mask with every node set */
    rm_schedule *out;
} emitter;

static rm_status forward_stage(emitter *e, int st) {
    for (int n = e->c->first[st]; n <= e->c->last[st]; n++)
        if (rm_schedule_push(e->out, RM_INSTR_FORWARD, n) != RM_OK) return RM_ERR_NOMEM;
    e->forwarded[st] = 1;
    return RM_OK;
}

/* Advance through stages [from, to): rebuild each stage's output. */
static rm_status advance(emitter *e, int from, int to) {
    for (int st = from; st < to; st++) {
        rm_status rc = e->forwarded[st] ? rm_schedule_recompute(e->g, e->c->first[st], e->c->last[st], e->all,
                                                                e->c->input[st + 1], 0, e->out)
                                        : forward_stage(e, st);
        if (rc != RM_OK) return rc;
    }
    return RM_OK;
}

/* Run stage st with its insides kept, then its backward. */
static rm_status tape(emitter *e, int st) {
    rm_status rc = e->forwarded[st]
                       ? rm_schedule_recompute(e->g, e->c->first[st], e->c->last[st], e->all, -1, 1, e->out)
                       : forward_stage(e, st);
    if (rc != RM_OK) return rc;
    return rm_schedule_backward(e->g, e->c->first[st], e->c->last[st], e->out);
}

static rm_status reverse(emitter *e, int lo, int l, int s) {
    rm_status rc = RM_OK;
    if (l == 1) return tape(e, lo);
    if (s == 1) {
        for (int i = lo + l - 1; i >= lo && rc == RM_OK; i--) {
            rc = advance(e, lo, i);
            if (rc == RM_OK) rc = tape(e, i);
        }
        return rc;
    }
    int m = e->r->split[(size_t)l * (size_t)(e->r->s + 1) + (size_t)s];
    rc = advance(e, lo, lo + m);
    if (rc == RM_OK) rc = reverse(e, lo + m, l - m, s - 1);
    if (rc == RM_OK) rc = reverse(e, lo, m, s);
    return rc;
}

rm_status rm_schedule_revolve(const rm_graph *g, const rm_chain *c, int slots, rm_schedule *out, char *err,
                              size_t errlen) {
    revolve r = {0};
    emitter e = {g, c, &r, calloc((size_t)c->n, 1), malloc((size_t)g->n_nodes), out};
    rm_status rc = RM_OK;
    if (slots > c->n) slots = c->n; /* more slots than stages buys nothing */
    if (!e.forwarded || !e.all || !dp(&r, c->n, slots)) {
        snprintf(err, errlen, "out of memory planning revolve");
        rc = RM_ERR_NOMEM;
    } else {
        for (int n = 0; n < g->n_nodes; n++) e.all[n] = 1;
        rc = reverse(&e, 0, c->n, slots);
    }
    free(e.forwarded);
    free(e.all);
    free(r.cost);
    free(r.split);
    return rc;
}
