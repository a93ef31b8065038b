/* rotor.c: the dynamic program of Rotor (see rotor.h) over (memory, s, t).
 *
 * C(m, s, t) is the least time to backpropagate stages s..t when x_s is
 * resident (outside m) and the gradient d_{t+1} is held (inside m):
 *   C(m,s,s) = uf[s] + ub[s]              if m >= a[s+1] + ab[s] + max(ft[s], bt[s])
 *   s < t: infinite                        if m < a[t+1] + max(a[s+1] + ft[s],
 *                                                max_{s<j<t} a[j] + a[j+1] + ft[j])
 *   C_ck  = min_{s<j<=t, m>=a[j]} sum_{k=s}^{j-1} uf[k] + C(m - a[j], j, t) + C(m, s, j-1)
 *           (run forward to x_j keeping x_s, store x_j, solve the right part,
 *            then the left part)
 *   C_all = uf[s] + ub[s] + C(m - ab[s], s+1, t)
 *           if m >= a[t+1] + ab[s] + ft[s] and m >= a[s+1] + ab[s] + bt[s]
 *           (run stage s keeping all it needs, solve the rest, backward s; the
 *            paper writes C(m,s,s) for the first term, whose max(ft, bt) check
 *            assumes d_{s+1} is held during the forward too, which it is not:
 *            brute force found cheaper schedules it missed, so we check the
 *            forward and the backward each against what is held at the time)
 *   C = min(C_ck, C_all).
 * Sizes are discretised: divided by their greatest common divisor, and when
 * the budget is then above `slots`, rounded up to slots of budget/slots, so a
 * plan in slots never exceeds the budget in bytes. */
#include "rotor.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

rm_status rm_chain_model_alloc(rm_chain_model *c, int n) {
    memset(c, 0, sizeof *c);
    c->n = n;
    c->uf = calloc((size_t)n + 1, sizeof *c->uf);
    c->ub = calloc((size_t)n + 1, sizeof *c->ub);
    c->a = calloc((size_t)n + 2, sizeof *c->a);
    c->ab = calloc((size_t)n + 1, sizeof *c->ab);
    c->ft = calloc((size_t)n + 1, sizeof *c->ft);
    c->bt = calloc((size_t)n + 1, sizeof *c->bt);
    if (!c->uf || !c->ub || !c->a || !c->ab || !c->ft || !c->bt) {
        rm_chain_model_free(c);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

rm_status rm_chain_model_alloc_selective(rm_chain_model *c) {
    c->ub2 = calloc((size_t)c->n + 1, sizeof *c->ub2);
    c->ab2 = calloc((size_t)c->n + 1, sizeof *c->ab2);
    c->bt2 = calloc((size_t)c->n + 1, sizeof *c->bt2);
    return c->ub2 && c->ab2 && c->bt2 ? RM_OK : RM_ERR_NOMEM;
}

void rm_chain_model_free(rm_chain_model *c) {
    free(c->uf), free(c->ub), free(c->a), free(c->ab), free(c->ft), free(c->bt);
    free(c->ub2), free(c->ab2), free(c->bt2);
    memset(c, 0, sizeof *c);
}

const char *rm_rotor_op_name(rm_rotor_op_kind k) {
    static const char *names[] = {"Fn", "Fck", "Fall", "B", "L", "Fsel"};
    return (unsigned)k < 6 ? names[k] : "?";
}

void rm_rotor_plan_free(rm_rotor_plan *p) {
    free(p->ops);
    memset(p, 0, sizeof *p);
}

static int64_t gcd64(int64_t x, int64_t y) {
    while (y) {
        int64_t r = x % y;
        x = y, y = r;
    }
    return x;
}

typedef struct dp {
    int n, M;       /* stages, memory slots 0..M */
    int *a, *ab, *ft, *bt, *ab2, *bt2; /* ab2/bt2 NULL: one option per stage */
    const double *uf, *ub, *ub2;
    double *cost;   /* (M+1) x n x n, INFINITY = infeasible */
    int *choice;    /* -1: Fall first, -2: Fsel first; j > s: checkpoint at x_j */
} dp;

#define AT(d, m, s, t) ((size_t)(m) * (size_t)(d)->n * (size_t)(d)->n + (size_t)(s) * (size_t)(d)->n + (size_t)(t))

/* The two ways to keep stage s (o = 0 full, 1 selective), when present. */
static int n_options(const dp *d) { return d->ab2 ? 2 : 1; }
static int opt_ab(const dp *d, int o, int s) { return o ? d->ab2[s] : d->ab[s]; }
static int opt_bt(const dp *d, int o, int s) { return o ? d->bt2[s] : d->bt[s]; }
static double opt_ub(const dp *d, int o, int s) { return o ? d->ub2[s] : d->ub[s]; }

static void fill(dp *d) {
    int n = d->n;
    for (int m = 0; m <= d->M; m++)
        for (int len = 0; len < n; len++)
            for (int s = 0; s + len < n; s++) {
                int t = s + len;
                size_t at = AT(d, m, s, t);
                d->cost[at] = INFINITY;
                d->choice[at] = -1;
                if (s == t) {
                    for (int o = 0; o < (s == n - 1 ? 1 : n_options(d)); o++) {
                        int bt = opt_bt(d, o, s), ws = d->ft[s] > bt ? d->ft[s] : bt;
                        double c = d->uf[s] + opt_ub(d, o, s);
                        if (m >= d->a[s + 1] + opt_ab(d, o, s) + ws && c < d->cost[at])
                            d->cost[at] = c, d->choice[at] = -1 - o;
                    }
                    continue;
                }
                int need = d->a[s + 1] + d->ft[s];
                for (int j = s + 1; j < t; j++)
                    if (d->a[j] + d->a[j + 1] + d->ft[j] > need) need = d->a[j] + d->a[j + 1] + d->ft[j];
                if (m < d->a[t + 1] + need) continue;
                double best = INFINITY;
                int arg = -1;
                double fsum = 0;
                for (int j = s + 1; j <= t; j++) {
                    fsum += d->uf[j - 1];
                    if (m < d->a[j]) continue;
                    double c = fsum + d->cost[AT(d, m - d->a[j], j, t)] + d->cost[AT(d, m, s, j - 1)];
                    if (c < best) best = c, arg = j;
                }
                /* Fall s runs while d_{t+1} is held, B s while d_{s+1} is: checking each
                 * at its own time is exact where C(m,s,s)'s max(ft,bt) is not */
                for (int o = 0; o < n_options(d); o++) {
                    int ab = opt_ab(d, o, s);
                    if (m >= ab && m >= d->a[t + 1] + ab + d->ft[s] && m >= d->a[s + 1] + ab + opt_bt(d, o, s)) {
                        double c = d->uf[s] + opt_ub(d, o, s) + d->cost[AT(d, m - ab, s + 1, t)];
                        if (c <= best) best = c, arg = -1 - o; /* ties: keeping all recomputes nothing */
                    }
                }
                d->cost[at] = best;
                d->choice[at] = arg;
            }
}

int rm_rotor_seq_push(rm_rotor_seq *q, rm_rotor_op_kind k, int stage) {
    if (q->n == q->cap) {
        int nc = q->cap ? q->cap * 2 : 64;
        void *p = realloc(q->ops, sizeof *q->ops * (size_t)nc);
        if (!p) return 0;
        q->ops = p, q->cap = nc;
    }
    q->ops[q->n].kind = k, q->ops[q->n].stage = stage;
    q->n++;
    return 1;
}

static int rebuild(const dp *d, rm_rotor_seq *q, int m, int s, int t) {
    int j = d->choice[AT(d, m, s, t)];
    rm_rotor_op_kind keep = j == -2 ? RM_ROTOR_FSEL : RM_ROTOR_FALL;
    if (s == t) {
        if (s == d->n - 1) return rm_rotor_seq_push(q, RM_ROTOR_L, s);
        return rm_rotor_seq_push(q, keep, s) && rm_rotor_seq_push(q, RM_ROTOR_B, s);
    }
    if (j < 0)
        return rm_rotor_seq_push(q, keep, s) && rebuild(d, q, m - opt_ab(d, -1 - j, s), s + 1, t) && rm_rotor_seq_push(q, RM_ROTOR_B, s);
    if (!rm_rotor_seq_push(q, RM_ROTOR_FCK, s)) return 0;
    for (int k = s + 1; k < j; k++)
        if (!rm_rotor_seq_push(q, RM_ROTOR_FN, k)) return 0;
    return rebuild(d, q, m - d->a[j], j, t) && rebuild(d, q, m, s, j - 1);
}

/* Sizes in slots: exact after dividing by the gcd when that fits, else
 * rounded up to units of budget/slots (never below the truth). */
static int discretise(const rm_chain_model *c, int64_t budget, int slots, dp *d, int64_t *unit_out) {
    int n = c->n;
    int64_t g = budget;
    for (int i = 0; i <= n; i++) g = gcd64(g, c->a[i]);
    for (int i = 0; i < n; i++) g = gcd64(gcd64(gcd64(g, c->ab[i]), c->ft[i]), c->bt[i]);
    for (int i = 0; c->ab2 && i < n; i++) g = gcd64(gcd64(g, c->ab2[i]), c->bt2[i]);
    if (g <= 0) g = 1;
    int64_t unit = g;
    if (budget / g > slots) unit = (budget + slots - 1) / slots;
    *unit_out = unit;
    d->n = n;
    d->M = (int)(budget / unit);
    d->a = malloc(sizeof(int) * (size_t)(n + 2));
    d->ab = malloc(sizeof(int) * (size_t)n);
    d->ft = malloc(sizeof(int) * (size_t)n);
    d->bt = malloc(sizeof(int) * (size_t)n);
    if (c->ab2) {
        d->ab2 = malloc(sizeof(int) * (size_t)n);
        d->bt2 = malloc(sizeof(int) * (size_t)n);
        if (!d->ab2 || !d->bt2) return 0;
    }
    if (!d->a || !d->ab || !d->ft || !d->bt) return 0;
#define UP(x) ((int)(((x) + unit - 1) / unit > d->M + 1 ? d->M + 1 : ((x) + unit - 1) / unit))
    for (int i = 0; i <= n; i++) d->a[i] = UP(c->a[i]);
    d->a[n + 1] = 0;
    for (int i = 0; i < n; i++) d->ab[i] = UP(c->ab[i]), d->ft[i] = UP(c->ft[i]), d->bt[i] = UP(c->bt[i]);
    for (int i = 0; c->ab2 && i < n; i++) d->ab2[i] = UP(c->ab2[i]), d->bt2[i] = UP(c->bt2[i]);
#undef UP
    d->uf = c->uf, d->ub = c->ub, d->ub2 = c->ub2;
    return 1;
}

static void dp_free(dp *d) {
    free(d->a), free(d->ab), free(d->ft), free(d->bt), free(d->ab2), free(d->bt2), free(d->cost), free(d->choice);
}

int rm_rotor_slots(int n, int slots) {
    double nn = (double)n * n, by_time = 1.2e10 / (nn * n), by_cells = (double)(1 << 27) / nn - 1;
    double most = by_time < by_cells ? by_time : by_cells;
    if (most < RM_ROTOR_MIN_SLOTS) return 0;
    return slots < most ? slots : (int)most;
}

rm_status rm_rotor_solve(const rm_chain_model *c, int64_t budget, int slots, rm_rotor_plan *plan) {
    memset(plan, 0, sizeof *plan);
    if (c->n < 1 || budget < 0 || slots < 1) return RM_ERR_ARG;
    if ((slots = rm_rotor_slots(c->n, slots)) == 0) return RM_ERR_ARG; /* too long to plan in bounded time */
    if (budget > RM_ROTOR_MAX_BYTES) budget = RM_ROTOR_MAX_BYTES; /* (budget + slots - 1) cannot overflow */
    dp d;
    memset(&d, 0, sizeof d);
    rm_status rc = RM_OK;
    int64_t unit;
    if (!discretise(c, budget, slots, &d, &unit)) rc = RM_ERR_NOMEM;
    int m0 = d.M - d.a[0]; /* the chain input is resident and counts */
    if (rc == RM_OK && m0 >= 0) {
        size_t cells = (size_t)(d.M + 1) * (size_t)d.n * (size_t)d.n;
        d.cost = malloc(sizeof *d.cost * cells);
        d.choice = malloc(sizeof *d.choice * cells);
        if (!d.cost || !d.choice) rc = RM_ERR_NOMEM;
        else {
            fill(&d);
            double t = d.cost[AT(&d, m0, 0, d.n - 1)];
            /* the same table answers for every smaller budget: the least that fits */
            for (int m = 0; m <= m0; m++)
                if (isfinite(d.cost[AT(&d, m, 0, d.n - 1)])) {
                    plan->min_budget = (int64_t)(m + d.a[0]) * unit;
                    break;
                }
            if (isfinite(t)) {
                rm_rotor_seq q = {0};
                if (!rebuild(&d, &q, m0, 0, d.n - 1)) {
                    free(q.ops);
                    rc = RM_ERR_NOMEM;
                } else {
                    plan->feasible = 1;
                    plan->ops = q.ops, plan->n_ops = q.n;
                    rm_rotor_simulate(c, q.ops, q.n, &plan->time, &plan->peak_bytes);
                }
            }
        }
    }
    dp_free(&d);
    return rc;
}

/* Memory in the persistent model: x_i (1: transient, 2: a checkpoint kept by
 * Fck, freed only by its backward), the x̄_i kept by Fall, gradients d_i; a
 * gradient takes the place of its activation. */
int rm_rotor_sim_init(const rm_chain_model *c, rm_rotor_sim *st) {
    int n = c->n;
    memset(st, 0, sizeof *st);
    st->x = calloc((size_t)n + 2, 1), st->xbar = calloc((size_t)n + 1, 1), st->dgrad = calloc((size_t)n + 2, 1);
    if (!st->x || !st->xbar || !st->dgrad) {
        rm_rotor_sim_free(st);
        return 0;
    }
    st->x[0] = 2, st->dgrad[n] = 1; /* the chain input, and the loss output's gradient (a[n] bytes) */
    st->mem = st->peak = c->a[0] + c->a[n];
    return 1;
}

void rm_rotor_sim_free(rm_rotor_sim *st) {
    free(st->x), free(st->xbar), free(st->dgrad);
    memset(st, 0, sizeof *st);
}

static void high(rm_rotor_sim *st, int64_t m) {
    if (m > st->peak) st->peak = m;
}

int rm_rotor_apply(const rm_chain_model *c, rm_rotor_sim *st, rm_rotor_op op) {
    int n = c->n, s = op.stage;
    if (s < 0 || s >= n) return 0;
    int have_in = st->x[s] || (s > 0 && st->xbar[s - 1]);
    int64_t ws = c->ft[s] > c->bt[s] ? c->ft[s] : c->bt[s];
    switch (op.kind) {
    case RM_ROTOR_FN:
    case RM_ROTOR_FCK:
        if (!have_in || s == n - 1) return 0;
        high(st, st->mem + c->a[s + 1] + c->ft[s]);
        if (!st->x[s + 1]) st->x[s + 1] = 1, st->mem += c->a[s + 1];
        /* persistent model: a checkpoint (x kept by Fck) lives until its backward */
        if (op.kind == RM_ROTOR_FCK && st->x[s]) st->x[s] = 2; /* an x inside x̄_{s-1} is held there */
        if (op.kind == RM_ROTOR_FN && st->x[s] == 1 && s > 0) st->x[s] = 0, st->mem -= c->a[s];
        st->time += c->uf[s];
        return 1;
    case RM_ROTOR_FALL:
    case RM_ROTOR_FSEL: {
        int sel = op.kind == RM_ROTOR_FSEL;
        if (!have_in || st->xbar[s] || s == n - 1 || (sel && !c->ab2)) return 0;
        int64_t ab = sel ? c->ab2[s] : c->ab[s];
        high(st, st->mem + ab + c->ft[s]);
        st->xbar[s] = (char)(1 + sel), st->mem += ab;
        /* persistent model: B s reads x_s, so x_s now stays until then */
        if (st->x[s]) st->x[s] = 2;
        st->time += c->uf[s];
        return 1;
    }
    case RM_ROTOR_B: {
        /* the backward reads its stage's input too (ab counts only what the
         * forward made), so x_s must still be there, alone or inside x̄_{s-1} */
        if (!st->xbar[s] || !st->dgrad[s + 1] || !have_in) return 0;
        int sel = st->xbar[s] == 2;
        high(st, st->mem + (sel ? c->bt2[s] : c->bt[s]));
        st->mem -= sel ? c->ab2[s] : c->ab[s];
        st->xbar[s] = 0;
        st->dgrad[s + 1] = 0, st->mem -= c->a[s + 1];
        if (st->x[s]) st->x[s] = 0, st->mem -= c->a[s]; /* d_s takes x_s's place */
        st->dgrad[s] = 1, st->mem += c->a[s];
        st->time += sel ? c->ub2[s] : c->ub[s];
        return 1;
    }
    case RM_ROTOR_L:
        if (s != n - 1 || !have_in || !st->dgrad[s + 1]) return 0;
        high(st, st->mem + c->ab[s] + ws);
        st->dgrad[s + 1] = 0, st->mem -= c->a[s + 1];
        if (st->x[s]) st->x[s] = 0, st->mem -= c->a[s];
        st->dgrad[s] = 1, st->mem += c->a[s];
        st->time += c->uf[s] + c->ub[s];
        return 1;
    }
    return 0;
}

int rm_rotor_simulate(const rm_chain_model *c, const rm_rotor_op *ops, int n_ops, double *time, int64_t *peak) {
    rm_rotor_sim st;
    if (!rm_rotor_sim_init(c, &st)) return 0;
    int ok = 1;
    for (int k = 0; k < n_ops && ok; k++) ok = rm_rotor_apply(c, &st, ops[k]);
    ok = ok && st.dgrad[0];
    if (time) *time = st.time;
    if (peak) *peak = st.peak;
    rm_rotor_sim_free(&st);
    return ok;
}

/* The smallest budget: one DP fill at a budget B gives, for every m <= B
 * (in slots), whether a plan exists; the least feasible m is an upper
 * bound on the minimum, exact up to one slot. Filling again at that bound
 * makes the slots finer; three rounds are within a fraction of a percent. */
int64_t rm_rotor_min_budget(const rm_chain_model *c, int slots) {
    if ((slots = rm_rotor_slots(c->n, slots)) == 0) return -1;
    /* in double: a chain of huge sizes must not overflow int64_t here */
    double total = (double)c->a[0];
    for (int i = 0; i < c->n; i++) total += (double)c->ab[i] + (double)c->a[i + 1] + (double)c->ft[i] + (double)c->bt[i];
    int64_t budget = total * 2 + 1 < (double)RM_ROTOR_MAX_BYTES ? (int64_t)(total * 2 + 1) : RM_ROTOR_MAX_BYTES;
    int64_t best = -1;
    for (int round = 0; round < 3; round++) {
        dp d;
        memset(&d, 0, sizeof d);
        int64_t unit = 1;
        if (!discretise(c, budget, slots, &d, &unit) || d.M < d.a[0]) {
            dp_free(&d);
            break;
        }
        size_t cells = (size_t)(d.M + 1) * (size_t)d.n * (size_t)d.n;
        d.cost = malloc(sizeof *d.cost * cells);
        d.choice = malloc(sizeof *d.choice * cells);
        if (!d.cost || !d.choice) {
            dp_free(&d);
            break;
        }
        fill(&d);
        int found = -1, a0 = d.a[0];
        for (int m = 0; m + a0 <= d.M; m++)
            if (isfinite(d.cost[AT(&d, m, 0, d.n - 1)])) {
                found = m;
                break;
            }
        dp_free(&d);
        if (found < 0) break;
        int64_t bytes = (int64_t)(found + a0) * unit;
        if (best >= 0 && bytes >= best) break;
        best = budget = bytes;
    }
    return best;
}
