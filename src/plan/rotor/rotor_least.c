/* rotor_least.c: the least budget of a chain in Rotor's model, one answer
 * whatever budget was asked (rotor.h, rm_rotor_least).
 *
 * The time program of rotor_dp.c works in slots of budget/slots bytes, so
 * the least budget it can see depends on the budget it was filled at (sizes
 * are rounded up to a slot): asked at different budgets, the planner named
 * different minima, up to 0.71% above the true one. Here the least memory
 * is computed on its own, without slots, by the same recurrence with
 * "least memory" in place of "least time":
 *   M(s,s) = min over the ways o to keep stage s of a[s+1] + ab_o + max(ft, bt_o)
 *   M(s,t) = min( min_{s<j<=t} max(lb, a[j] + M(j,t), M(s,j-1)),      (checkpoint x_j)
 *                 min_o max(lb, ab_o, a[t+1] + ab_o + ft, a[s+1] + ab_o + bt_o,
 *                           ab_o + M(s+1,t)) )                         (keep stage s)
 *   lb = a[t+1] + max(a[s+1] + ft[s], max_{s<j<t} a[j] + a[j+1] + ft[j])
 * (rotor_dp.c's feasibility conditions, in bytes), and the least budget is
 * a[0] + M(0, n-1): exact in the model, O(n^3) on integers. A plan in slots
 * never needs less (its sizes are rounded up), so no budget below it plans,
 * and the schedule that attains it (rebuilt from the choices, its peak
 * replayed by the simulator) is the plan of every budget at or above it
 * where the slotted program finds none.
 *
 * Chains longer than rm_rotor_groups' exact limit are planned over groups
 * of stages, whose ways to keep a group depend on the slot size; there the
 * least is the grouped program's own: filled again at the least it found
 * (the plan's replayed peak) until that no longer drops, then lowered while
 * a plan exists one byte below. */
#include "rotor.h"
#include <stdlib.h>
#include <string.h>

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

#define NONE INT64_MAX

/* The cell of (s, t), s <= t. */
static size_t cell(int s, int t) { return (size_t)t * (size_t)(t + 1) / 2 + (size_t)s; }

/* The way o (0: keep all, 1: the selective policy's values) of stage s. */
static int64_t ab_of(const rm_chain_model *c, int s, int o) { return o ? c->ab2[s] : c->ab[s]; }
static int64_t bt_of(const rm_chain_model *c, int s, int o) { return o ? c->bt2[s] : c->bt[s]; }

/* M(s, t) and its choice (-1-o: keep stage s by way o; j > s: checkpoint x_j). */
static void least_cell(const rm_chain_model *c, int64_t *M, int *ch, int s, int t) {
    const int64_t *a = c->a, *ft = c->ft;
    const int ways = c->ab2 ? 2 : 1;
    int64_t best = NONE;
    int choice = -1;
    if (s == t) {
        for (int o = 0; o < (s == c->n - 1 ? 1 : ways); o++) { /* the loss: kept whole (L) */
            int64_t bt = bt_of(c, s, o), v = a[s + 1] + ab_of(c, s, o) + (ft[s] > bt ? ft[s] : bt);
            if (v < best) best = v, choice = -1 - o;
        }
    } else {
        int64_t need = a[s + 1] + ft[s];
        for (int j = s + 1; j < t; j++) need = max64(need, a[j] + a[j + 1] + ft[j]);
        const int64_t lb = a[t + 1] + need;
        for (int j = s + 1; j <= t && (!c->ck_last || j - 1 <= c->ck_last[s]); j++) { /* the first best one */
            int64_t right = M[cell(j, t)], left = M[cell(s, j - 1)];
            if (right == NONE || left == NONE) continue;
            int64_t v = max64(lb, max64(a[j] + right, left));
            if (v < best) best = v, choice = j;
        }
        for (int o = 0; o < ways && M[cell(s + 1, t)] != NONE; o++) { /* keeping wins ties */
            int64_t ab = ab_of(c, s, o);
            int64_t v = max64(max64(lb, ab), max64(a[t + 1] + ab + ft[s], a[s + 1] + ab + bt_of(c, s, o)));
            v = max64(v, ab + M[cell(s + 1, t)]);
            if (v <= best) best = v, choice = -1 - o;
        }
    }
    M[cell(s, t)] = best, ch[cell(s, t)] = choice;
}

/* The operations of M(s, t)'s choices. */
static int rebuild(const rm_chain_model *c, const int *ch, rm_rotor_seq *q, int s, int t) {
    if (s == t && s == c->n - 1) return rm_rotor_seq_push(q, RM_ROTOR_L, s);
    int j = ch[cell(s, t)];
    if (j < 0) {
        rm_rotor_op_kind keep = j == -1 ? RM_ROTOR_FALL : RM_ROTOR_FSEL;
        return rm_rotor_seq_push(q, keep, s) && (s == t || rebuild(c, ch, q, s + 1, t)) &&
               rm_rotor_seq_push(q, RM_ROTOR_B, s);
    }
    for (int i = s; i < j; i++)
        if (!rm_rotor_seq_push(q, i == s ? RM_ROTOR_FCK : RM_ROTOR_FN, i)) return 0;
    return rebuild(c, ch, q, j, t) && rebuild(c, ch, q, s, j - 1);
}

/* The exact least and its plan (replayed); -1 when out of memory. */
static int64_t least_exact(const rm_chain_model *c, rm_rotor_plan *at) {
    const int n = c->n;
    int64_t *M = malloc(sizeof *M * cell(0, n));
    int *ch = malloc(sizeof *ch * cell(0, n));
    int64_t least = -1;
    rm_rotor_seq q = {0};
    if (M && ch) {
        for (int len = 0; len < n; len++)
            for (int s = 0; s + len < n; s++) least_cell(c, M, ch, s, s + len);
        if (M[cell(0, n - 1)] != NONE && rebuild(c, ch, &q, 0, n - 1) &&
            rm_rotor_simulate(c, q.ops, q.n, &at->time, &at->peak_bytes)) {
            at->feasible = 1, at->ops = q.ops, at->n_ops = q.n, q.ops = NULL;
            /* the replayed peak, which the model bounds from above */
            least = at->peak_bytes < c->a[0] + M[cell(0, n - 1)] ? at->peak_bytes : c->a[0] + M[cell(0, n - 1)];
            at->min_budget = least;
        }
    }
    free(q.ops), free(M), free(ch);
    return least;
}

/* Keeps p as *at (its replayed peak the least so far), freeing the old one. */
static int64_t take(rm_rotor_plan *at, rm_rotor_plan *p) {
    rm_rotor_plan_free(at);
    *at = *p;
    memset(p, 0, sizeof *p);
    at->min_budget = at->peak_bytes;
    return at->peak_bytes;
}

/* The grouped program's least and its plan; -1 when it has none. */
static int64_t least_grouped(const rm_chain_model *c, int slots, int groups, rm_rotor_plan *at) {
    double total = (double)c->a[0]; /* in double: no overflow */
    for (int i = 0; i < c->n; i++) total += (double)c->ab[i] + (double)c->a[i + 1] + (double)c->ft[i] + (double)c->bt[i];
    int64_t budget = total * 2 + 1 < (double)RM_ROTOR_MAX_BYTES ? (int64_t)(total * 2 + 1) : RM_ROTOR_MAX_BYTES;
    int64_t best = -1;
    for (int round = 0; round < 16; round++) { /* filled again at the least found, while it drops */
        rm_rotor_plan p;
        if (rm_rotor_solve_groups(c, budget, slots, groups, &p) != RM_OK || !p.feasible) {
            rm_rotor_plan_free(&p);
            break;
        }
        int64_t b = p.min_budget; /* the table's least: plan there */
        rm_rotor_plan_free(&p);
        if (b <= 0 || rm_rotor_solve_groups(c, b, slots, groups, &p) != RM_OK || !p.feasible ||
            (best >= 0 && p.peak_bytes >= best)) {
            rm_rotor_plan_free(&p);
            break;
        }
        budget = best = take(at, &p);
    }
    for (int step = 0; best > 0 && step < 16; step++) { /* then no plan one byte below */
        rm_rotor_plan p;
        if (rm_rotor_solve_groups(c, best - 1, slots, groups, &p) != RM_OK || !p.feasible) {
            rm_rotor_plan_free(&p);
            break;
        }
        best = take(at, &p);
    }
    return best;
}

int64_t rm_rotor_least(const rm_chain_model *c, int slots, rm_rotor_plan *at) {
    memset(at, 0, sizeof *at);
    int groups = rm_rotor_groups(c->n, slots);
    if (groups == 0) return -1;
    return groups >= c->n ? least_exact(c, at) : least_grouped(c, slots, groups, at);
}
