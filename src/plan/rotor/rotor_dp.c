/* rotor_dp.c: the dynamic program of Rotor (see rotor.h) over (memory, s, t).
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
 *   C = min(C_ck, C_all), C_all taken over each way to keep stage s (all it
 *   needs, or the selective policy's values).
 * Sizes are discretised: divided by their greatest common divisor, and when
 * the budget is then above `slots`, rounded up to slots of budget/slots, so a
 * plan in slots never exceeds the budget in bytes.
 *
 * The table has (slots + 1) n (n + 1) / 2 cells and its fill ~slots n^3 / 6
 * steps, each (s, t) computed for every memory at once (the loop over m is
 * vectorised). Long chains are coarsened (Rockmate's scheme, in Rotor's
 * model): consecutive stages form groups, the program runs over groups, and
 *   - a group is kept (C_all) in one of a few ways, each stage of it kept
 *     whole (F), selectively (S) or by its input alone (I: rebuilt right
 *     before its backward), the Pareto front of (bytes kept, backward time)
 *     thinned to RM_ROTOR_GROUP_OPTIONS; its bytes and transients are the
 *     simulator's, on the stages themselves;
 *   - a group reversed on its own (C(m, g, g)) is solved exactly: the same
 *     program on its stages;
 *   - checkpoints (C_ck) fall on group boundaries only.
 * Every schedule is a sequence of stage operations; its time and peak are
 * replayed on the stages (rm_rotor_simulate). */
#include "rotor.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A chain as the program sees it (stages, or groups of stages), sizes in slots. */
typedef struct dpc {
    int n, M;           /* stages, memory slots 0..M */
    int *a;             /* n+1: a[s] the input of stage s, a[n] the loss output */
    int *pf, *pr;       /* advancing stage s: peak above its input while its first
                           (pf) and its later (pr) underlying stages run */
    double *uf;         /* forward time */
    int *ob;            /* n+1: stage s is kept by options ob[s] .. ob[s+1]-1 */
    int *ab, *ft, *bt;  /* per option: bytes kept, forward and backward transients */
    double *ub;         /* per option: backward time (and what it rebuilds) */
    char *how;          /* per option and underlying stage: F, S or I */
    int *how_at;        /* per option: its first letter in how */
    int *first;         /* n+1: the underlying stages of s are first[s] .. first[s+1]-1 */
    int *lim;           /* n+1: a checkpointed range from s may reach stage lim[s] (ck_last) */
    int loss_last;      /* the last stage is the loss (kept by L only) */
    double *base;       /* n x (M+1): C(m, s, s) from each group's own program, or NULL */
    double *cost;       /* n (n+1) / 2 rows of M+1 cells, INFINITY = infeasible */
    int *choice;        /* -1-o: kept by option o first; j > s: checkpoint at x_j */
    double *best, *arg; /* M+1 each: one row being computed */
} dpc;

static size_t row(const dpc *d, int s, int t) { return ((size_t)t * (size_t)(t + 1) / 2 + (size_t)s) * (size_t)(d->M + 1); }

static void dpc_free(dpc *d) {
    free(d->a), free(d->pf), free(d->pr), free(d->uf), free(d->ob), free(d->ab), free(d->ft), free(d->bt);
    free(d->ub), free(d->how), free(d->how_at), free(d->first), free(d->base), free(d->cost), free(d->choice);
    free(d->lim);
    free(d->best), free(d->arg);
    memset(d, 0, sizeof *d);
}

/* The arrays of n stages with up to n_opt options (and `letters` letters). */
static int dpc_alloc(dpc *d, int n, int M, int n_opt, int letters) {
    memset(d, 0, sizeof *d);
    d->n = n, d->M = M;
    size_t k = (size_t)n + 2, o = (size_t)n_opt + 1;
    d->a = calloc(k, sizeof *d->a), d->pf = calloc(k, sizeof *d->pf), d->pr = calloc(k, sizeof *d->pr);
    d->uf = calloc(k, sizeof *d->uf), d->ob = calloc(k, sizeof *d->ob), d->first = calloc(k, sizeof *d->first);
    d->lim = calloc(k, sizeof *d->lim);
    d->ab = calloc(o, sizeof *d->ab), d->ft = calloc(o, sizeof *d->ft), d->bt = calloc(o, sizeof *d->bt);
    d->ub = calloc(o, sizeof *d->ub), d->how_at = calloc(o, sizeof *d->how_at);
    d->how = calloc((size_t)letters + 1, 1);
    d->best = malloc(sizeof *d->best * ((size_t)M + 1)), d->arg = malloc(sizeof *d->arg * ((size_t)M + 1));
    return d->a && d->pf && d->pr && d->uf && d->ob && d->first && d->lim && d->ab && d->ft && d->bt && d->ub &&
           d->how_at && d->how && d->best && d->arg;
}

static int64_t gcd64(int64_t x, int64_t y) {
    while (y) {
        int64_t r = x % y;
        x = y, y = r;
    }
    return x;
}

/* The slot size: exact after dividing by the gcd when that fits, else
 * budget/slots rounded up (sizes are then rounded up, never below the truth). */
static int64_t unit_of(const rm_chain_model *c, int64_t budget, int slots) {
    int64_t g = budget;
    for (int i = 0; i <= c->n; i++) g = gcd64(g, c->a[i]);
    for (int i = 0; i < c->n; i++) g = gcd64(gcd64(gcd64(g, c->ab[i]), c->ft[i]), c->bt[i]);
    for (int i = 0; c->ab2 && i < c->n; i++) g = gcd64(gcd64(g, c->ab2[i]), c->bt2[i]);
    if (g <= 0) g = 1;
    return budget / g > slots ? (budget + slots - 1) / slots : g;
}

static int up(int64_t x, int64_t unit, int M) {
    int64_t s = (x + unit - 1) / unit;
    return s > M + 1 ? M + 1 : (int)s;
}

/* lim[s]: the last program stage a range checkpointed from s may reach, the
 * underlying stages of the range within c->ck_last of its first. */
static void set_limits(const rm_chain_model *c, dpc *d) {
    for (int s = 0; s < d->n; s++) {
        int last = c->ck_last ? c->ck_last[d->first[s]] : c->n - 1, e = s - 1;
        while (e + 1 < d->n && d->first[e + 2] - 1 <= last) e++;
        d->lim[s] = e;
    }
}

/* Stages lo..hi of c, one dpc stage each, kept whole (F), selectively (S)
 * or on disk (P: only the output x_{s+1} stays; the backward needs ab again
 * on top of what it holds, and takes ubp). */
static int dpc_stages(const rm_chain_model *c, int lo, int hi, int64_t unit, int M, dpc *d) {
    int n = hi - lo + 1, per = c->ab2 ? 2 : 1;
    per += c->ubp != NULL;
    if (!dpc_alloc(d, n, M, n * per, n * per)) return 0;
    for (int s = 0; s <= n; s++) d->a[s] = up(c->a[lo + s], unit, M), d->first[s] = lo + s;
    d->a[n + 1] = 0;
    set_limits(c, d);
    int o = 0;
    for (int s = 0; s < n; s++) {
        int i = lo + s;
        d->uf[s] = c->uf[i];
        d->pf[s] = d->a[s + 1] + up(c->ft[i], unit, M);
        d->ob[s] = o;
        for (int k = 0; k < per; k++, o++) {
            const char how = k == 0 ? 'F' : k == 1 && c->ab2 ? 'S' : 'P';
            if (how == 'P') { /* held: the output; in the forward and the backward: all of ab */
                int64_t rest = c->ab[i] > c->a[i + 1] ? c->ab[i] - c->a[i + 1] : 0;
                d->ab[o] = up(c->a[i + 1], unit, M), d->ft[o] = up(c->ft[i] + rest, unit, M);
                d->bt[o] = up(c->bt[i] + rest, unit, M), d->ub[o] = c->ubp[i];
            } else {
                d->ab[o] = up(how == 'S' ? c->ab2[i] : c->ab[i], unit, M), d->ft[o] = up(c->ft[i], unit, M);
                d->bt[o] = up(how == 'S' ? c->bt2[i] : c->bt[i], unit, M), d->ub[o] = how == 'S' ? c->ub2[i] : c->ub[i];
            }
            d->how_at[o] = o, d->how[o] = how;
        }
    }
    d->ob[n] = o;
    d->loss_last = hi == c->n - 1;
    return 1;
}

/* One row (s, t) for every m, from the rows of shorter intervals. Scanning
 * checkpoints j upwards with a strict comparison, then the options with a
 * non-strict one, keeps the first best checkpoint and prefers keeping
 * (which recomputes nothing) on ties, as one m at a time would. */
static void fill_row(dpc *d, int s, int t) {
    int M = d->M;
    double *c = d->cost + row(d, s, t), *best = d->best, *arg = d->arg;
    int *ch = d->choice + row(d, s, t);
    for (int m = 0; m <= M; m++) c[m] = INFINITY, ch[m] = -1;
    if (s == t) {
        if (d->base) {
            memcpy(c, d->base + (size_t)s * (size_t)(M + 1), sizeof *c * (size_t)(M + 1));
            return;
        }
        int hi = d->loss_last && s == d->n - 1 ? d->ob[s] + 1 : d->ob[s + 1];
        for (int o = d->ob[s]; o < hi; o++) {
            int ws = d->ft[o] > d->bt[o] ? d->ft[o] : d->bt[o];
            double v = d->uf[s] + d->ub[o];
            for (int m = d->a[s + 1] + d->ab[o] + ws; m <= M; m++)
                if (v < c[m]) c[m] = v, ch[m] = -1 - (o - d->ob[s]);
        }
        return;
    }
    int need = d->pf[s] > d->pr[s] ? d->pf[s] : d->pr[s];
    for (int j = s + 1; j < t; j++) {
        int nj = d->a[j] + d->pf[j] > d->pr[j] ? d->a[j] + d->pf[j] : d->pr[j];
        if (nj > need) need = nj;
    }
    int lb = d->a[t + 1] + need;
    if (lb > M) return;
    for (int m = lb; m <= M; m++) best[m] = INFINITY, arg[m] = -1;
    double fsum = 0;
    for (int j = s + 1; j <= t && j - 1 <= d->lim[s]; j++) {
        fsum += d->uf[j - 1];
        const double *right = d->cost + row(d, j, t) - d->a[j], *left = d->cost + row(d, s, j - 1);
        double jd = j;
        for (int m = lb > d->a[j] ? lb : d->a[j]; m <= M; m++) {
            double v = fsum + right[m] + left[m];
            int lt = v < best[m];
            best[m] = lt ? v : best[m];
            arg[m] = lt ? jd : arg[m];
        }
    }
    /* Fall s runs while d_{t+1} is held, B s while d_{s+1} is: checking each
     * at its own time is exact where C(m,s,s)'s max(ft,bt) is not */
    for (int o = d->ob[s]; o < d->ob[s + 1]; o++) {
        int ab = d->ab[o], lo = lb;
        if (ab > lo) lo = ab;
        if (d->a[t + 1] + ab + d->ft[o] > lo) lo = d->a[t + 1] + ab + d->ft[o];
        if (d->a[s + 1] + ab + d->bt[o] > lo) lo = d->a[s + 1] + ab + d->bt[o];
        const double *rest = d->cost + row(d, s + 1, t) - ab;
        double head = d->uf[s] + d->ub[o], od = -1 - (o - d->ob[s]);
        for (int m = lo; m <= M; m++) {
            double v = head + rest[m];
            int le = v <= best[m];
            best[m] = le ? v : best[m];
            arg[m] = le ? od : arg[m];
        }
    }
    for (int m = lb; m <= M; m++) c[m] = best[m], ch[m] = (int)arg[m];
}

static int fill(dpc *d) {
    size_t cells = (size_t)d->n * ((size_t)d->n + 1) / 2 * ((size_t)d->M + 1);
    d->cost = malloc(sizeof *d->cost * cells);
    d->choice = malloc(sizeof *d->choice * cells);
    if (!d->cost || !d->choice) return 0;
    for (int len = 0; len < d->n; len++)
        for (int s = 0; s + len < d->n; s++) fill_row(d, s, s + len);
    return 1;
}

/* ---- coarse groups ----------------------------------------------------------- */

/* The stage operations of keeping stages [p, q] by the letters `how`:
 * forward (F: Fall, S: Fsel, I: Fck), or backward (F, S: B; I: Fall then B). */
static int push_keep(rm_rotor_seq *q, const char *how, int p, int last, int backward) {
    static const rm_rotor_op_kind fwd[4] = {RM_ROTOR_FALL, RM_ROTOR_FSEL, RM_ROTOR_FCK, RM_ROTOR_FPAGE};
    for (int k = 0; k <= last - p; k++) {
        int i = backward ? last - k : p + k;
        int h = how[i - p] == 'F' ? 0 : how[i - p] == 'S' ? 1 : how[i - p] == 'P' ? 3 : 2;
        if (!backward && !rm_rotor_seq_push(q, fwd[h], i)) return 0;
        if (backward && h == 2 && !rm_rotor_seq_push(q, RM_ROTOR_FALL, i)) return 0;
        if (backward && !rm_rotor_seq_push(q, RM_ROTOR_B, i)) return 0;
    }
    return 1;
}

/* A way to keep group [p, q] measured on the stages: its bytes kept, its
 * forward transient above them, its backward's transient above them and
 * d_{q+1}, and the backward's time (the rebuilds of I stages included). */
typedef struct keep_way {
    int64_t ab, ft, bt;
    double ub;
} keep_way;

static int measure_way(const rm_chain_model *c, rm_rotor_sim *st, const char *how, int p, int q, keep_way *w) {
    rm_rotor_seq seq = {0};
    int ok = push_keep(&seq, how, p, q, 0);
    memset(st->x, 0, (size_t)c->n + 2), memset(st->xbar, 0, (size_t)c->n + 1), memset(st->dgrad, 0, (size_t)c->n + 2);
    st->x[p] = 2, st->mem = st->peak = 0, st->time = 0;
    for (int k = 0; ok && k < seq.n; k++) ok = rm_rotor_apply(c, st, seq.ops[k]);
    w->ab = st->mem, w->ft = st->peak - st->mem;
    seq.n = 0;
    ok = ok && push_keep(&seq, how, p, q, 1);
    st->dgrad[q + 1] = 1, st->mem += c->a[q + 1], st->peak = st->mem, st->time = 0;
    for (int k = 0; ok && k < seq.n; k++) ok = rm_rotor_apply(c, st, seq.ops[k]);
    w->bt = st->peak - (w->ab + c->a[q + 1]), w->ub = st->time;
    free(seq.ops);
    return ok;
}

/* The cheapest letters for each number of slots kept, over stages [p, q]
 * (a knapsack: F keeps ab, S ab2, I the stage's output; the time is the
 * backward's, plus the forward of I stages). Writes the Pareto front into
 * fw (slots) and fh (k letters each); returns its length (0: no way fits
 * the slots, -1: out of memory). */
static int front(const rm_chain_model *c, int p, int q, int64_t unit, int M, int *fw, char *fh) {
    int k = q - p + 1, W = M + 1;
    double *t = malloc(sizeof *t * (size_t)(W + 1) * (size_t)(k + 1));
    char *pick = malloc((size_t)(W + 1) * (size_t)k);
    if (!t || !pick) {
        free(t), free(pick);
        return -1;
    }
    for (int w = 0; w <= W; w++) t[w] = w == 0 ? 0 : INFINITY;
    for (int i = 0; i < k; i++) {
        int s = p + i, wt[3] = {up(c->ab[s], unit, M), c->ab2 ? up(c->ab2[s], unit, M) : W + 1, up(c->a[s + 1], unit, M)};
        if (c->ck_last && c->ck_last[s] < s) wt[2] = W + 1; /* I checkpoints the stage alone */
        double tt[3] = {c->ub[s], c->ab2 ? c->ub2[s] : INFINITY, c->uf[s] + c->ub[s]};
        const double *prev = t + (size_t)i * (W + 1);
        double *cur = t + (size_t)(i + 1) * (W + 1);
        for (int w = 0; w <= W; w++) {
            cur[w] = INFINITY, pick[(size_t)w * k + i] = 0;
            for (int h = 0; h < 3; h++)
                if (wt[h] <= w && prev[w - wt[h]] + tt[h] < cur[w]) cur[w] = prev[w - wt[h]] + tt[h], pick[(size_t)w * k + i] = "FSI"[h];
        }
    }
    int n = 0;
    double best = INFINITY;
    const double *last = t + (size_t)k * (W + 1);
    for (int w = 0; w <= W; w++) {
        if (!(last[w] < best)) continue;
        best = last[w], fw[n] = w;
        for (int i = k - 1, x = w; i >= 0; i--) { /* the letters, from the back pointers */
            char h = pick[(size_t)x * k + i];
            fh[(size_t)n * k + i] = h;
            x -= h == 'F' ? up(c->ab[p + i], unit, M) : h == 'S' ? up(c->ab2[p + i], unit, M) : up(c->a[p + i + 1], unit, M);
        }
        n++;
    }
    free(t), free(pick);
    return n;
}

/* Coarse stage g = group [p, q]: sizes, advance peaks and its ways to be kept. */
static int coarse_group(const rm_chain_model *c, rm_rotor_sim *st, dpc *d, int g, int *o, int64_t unit) {
    int p = d->first[g], q = d->first[g + 1] - 1, k = q - p + 1, M = d->M;
    int64_t pr = 0;
    d->uf[g] = 0;
    for (int i = p; i <= q; i++) {
        d->uf[g] += c->uf[i];
        if (i > p && c->a[i] + c->a[i + 1] + c->ft[i] > pr) pr = c->a[i] + c->a[i + 1] + c->ft[i];
    }
    d->pf[g] = up(c->a[p + 1] + c->ft[p], unit, M), d->pr[g] = up(pr, unit, M);
    d->ob[g] = *o;
    if (g == d->n - 1) return 1; /* the loss's group: reversed on its own only */
    int *fw = malloc(sizeof *fw * (size_t)(M + 2));
    char *fh = malloc((size_t)(M + 2) * (size_t)k);
    /* no way to keep the group within the budget's slots: it is only checkpointed */
    int n = fw && fh ? front(c, p, q, unit, M, fw, fh) : -1, ok = n >= 0;
    /* thinned to evenly spaced sizes, both ends kept */
    for (int r = 0, prev = -1; ok && n > 0 && r < RM_ROTOR_GROUP_OPTIONS; r++) {
        int target = fw[0] + (int)((double)(fw[n - 1] - fw[0]) * r / (RM_ROTOR_GROUP_OPTIONS - 1) + 0.5), pick = 0;
        while (pick + 1 < n && fw[pick + 1] <= target) pick++;
        if (pick == prev) continue;
        prev = pick;
        keep_way w;
        const char *how = fh + (size_t)pick * k;
        if (!measure_way(c, st, how, p, q, &w)) continue;
        d->ab[*o] = up(w.ab, unit, M), d->ft[*o] = up(w.ft, unit, M), d->bt[*o] = up(w.bt, unit, M);
        d->ub[*o] = w.ub; /* its letters follow the previous option's (how_at[0] = 0) */
        memcpy(d->how + d->how_at[*o], how, (size_t)k);
        d->how_at[*o + 1] = d->how_at[*o] + k;
        (*o)++;
    }
    free(fw), free(fh);
    return ok;
}

/* C(m, 0, k-1) for every m of group [p, q], the stages' own program. */
static int group_base(const rm_chain_model *c, int p, int q, int64_t unit, int M, double *out) {
    dpc in;
    int ok = dpc_stages(c, p, q, unit, M, &in) && fill(&in);
    if (ok) memcpy(out, in.cost + row(&in, 0, in.n - 1), sizeof *out * ((size_t)M + 1));
    dpc_free(&in);
    return ok;
}

/* The groups of c: `groups` runs of consecutive stages, as even as can be. */
static int dpc_groups(const rm_chain_model *c, int groups, int64_t unit, int M, dpc *d) {
    int n = c->n, G = groups, k_max = (n + G - 1) / G;
    if (!dpc_alloc(d, G, M, G * RM_ROTOR_GROUP_OPTIONS, G * RM_ROTOR_GROUP_OPTIONS * k_max)) return 0;
    d->base = malloc(sizeof *d->base * (size_t)G * ((size_t)M + 1));
    rm_rotor_sim st;
    if (!d->base || !rm_rotor_sim_init(c, &st)) return 0;
    for (int g = 0; g <= G; g++) d->first[g] = (int)((long)n * g / G);
    for (int g = 0; g <= G; g++) d->a[g] = up(c->a[d->first[g]], unit, M);
    d->a[G + 1] = 0;
    set_limits(c, d);
    int o = 0, ok = 1;
    for (int g = 0; g < G && ok; g++)
        ok = coarse_group(c, &st, d, g, &o, unit) &&
             group_base(c, d->first[g], d->first[g + 1] - 1, unit, M, d->base + (size_t)g * ((size_t)M + 1));
    d->ob[G] = o;
    d->loss_last = 1;
    rm_rotor_sim_free(&st);
    return ok;
}

/* ---- the sequence ---------------------------------------------------------- */

typedef struct rebuilder {
    const rm_chain_model *c;
    int64_t unit;
    rm_rotor_seq q;
} rebuilder;

static int rebuild(rebuilder *r, const dpc *d, int m, int s, int t);

/* C(m, g, g) of a coarse group: its own program, filled again. */
static int rebuild_group(rebuilder *r, const dpc *d, int m, int g) {
    dpc in;
    int ok = dpc_stages(r->c, d->first[g], d->first[g + 1] - 1, r->unit, d->M, &in) && fill(&in) &&
             rebuild(r, &in, m, 0, in.n - 1);
    dpc_free(&in);
    return ok;
}

static int rebuild(rebuilder *r, const dpc *d, int m, int s, int t) {
    int j = d->choice[row(d, s, t) + (size_t)m];
    int p = d->first[s], q = d->first[s + 1] - 1;
    if (s == t && d->base) return rebuild_group(r, d, m, s);
    if (s == t && d->loss_last && s == d->n - 1) return rm_rotor_seq_push(&r->q, RM_ROTOR_L, p);
    if (j < 0) {
        int o = d->ob[s] - 1 - j;
        const char *how = d->how + d->how_at[o];
        if (!push_keep(&r->q, how, p, q, 0)) return 0;
        if (s < t && !rebuild(r, d, m - d->ab[o], s + 1, t)) return 0;
        return push_keep(&r->q, how, p, q, 1);
    }
    /* checkpoint: keep x_s, advance to the first stage of j */
    for (int i = p; i < d->first[j]; i++)
        if (!rm_rotor_seq_push(&r->q, i == p ? RM_ROTOR_FCK : RM_ROTOR_FN, i)) return 0;
    return rebuild(r, d, m - d->a[j], j, t) && rebuild(r, d, m, s, j - 1);
}

/* ---- the solver -------------------------------------------------------------- */

int rm_rotor_groups(int n, int slots) {
    if (n <= 0 || n > RM_ROTOR_MAX_STAGES) return 0;
    double per = (double)(slots + 1) / 2;
    int exact = (int)sqrt((double)RM_ROTOR_MAX_CELLS / per); /* n (n+1)/2 (slots+1) cells */
    return n <= exact ? n : exact < RM_ROTOR_COARSE_GROUPS ? exact : RM_ROTOR_COARSE_GROUPS;
}

int rm_rotor_slots(int n, int slots) { return rm_rotor_groups(n, slots) ? slots : 0; }

size_t rm_rotor_table_bytes(int n, int slots) {
    int G = rm_rotor_groups(n, slots);
    return (size_t)G * ((size_t)G + 1) / 2 * ((size_t)slots + 1) * (sizeof(double) + sizeof(int));
}

/* The program of c at `budget` over `groups` groups (>= c->n: exact), filled. */
static rm_status dp_fill(const rm_chain_model *c, int64_t budget, int slots, int groups, dpc *d, int64_t *unit) {
    memset(d, 0, sizeof *d);
    if (c->n < 1 || budget < 0 || slots < 1 || c->n > RM_ROTOR_MAX_STAGES) return RM_ERR_ARG;
    if (budget > RM_ROTOR_MAX_BYTES) budget = RM_ROTOR_MAX_BYTES; /* (budget + slots - 1) cannot overflow */
    *unit = unit_of(c, budget, slots);
    int M = (int)(budget / *unit);
    if (groups > c->n || groups < 1) groups = c->n;
    int ok = groups == c->n ? dpc_stages(c, 0, c->n - 1, *unit, M, d) : dpc_groups(c, groups, *unit, M, d);
    if (!ok || !fill(d)) {
        dpc_free(d);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

/* The least budget (bytes) the filled table answers with a plan, or -1. */
static int64_t dp_least(const dpc *d, int64_t unit) {
    const double *top = d->cost + row(d, 0, d->n - 1);
    for (int m = 0; m + d->a[0] <= d->M; m++)
        if (isfinite(top[m])) return (int64_t)(m + d->a[0]) * unit;
    return -1;
}

/* A filled table, kept to plan several budgets up to the one it was filled at. */
struct rm_rotor_table {
    const rm_chain_model *c;
    dpc d;
    int64_t unit, budget;
};

rm_status rm_rotor_table_fill(const rm_chain_model *c, int64_t budget, int slots, int groups, rm_rotor_table **out) {
    *out = NULL;
    rm_rotor_table *t = calloc(1, sizeof *t);
    if (!t) return RM_ERR_NOMEM;
    rm_status rc = dp_fill(c, budget, slots, groups, &t->d, &t->unit);
    if (rc != RM_OK) {
        free(t);
        return rc;
    }
    t->c = c, t->budget = budget > RM_ROTOR_MAX_BYTES ? RM_ROTOR_MAX_BYTES : budget;
    *out = t;
    return RM_OK;
}

void rm_rotor_table_free(rm_rotor_table *t) {
    if (!t) return;
    dpc_free(&t->d);
    free(t);
}

int64_t rm_rotor_table_least(const rm_rotor_table *t) { return dp_least(&t->d, t->unit); }

int64_t rm_rotor_table_budget(const rm_rotor_table *t) { return t->budget; }

rm_status rm_rotor_table_plan(const rm_rotor_table *t, int64_t budget, rm_rotor_plan *plan) {
    memset(plan, 0, sizeof *plan);
    const dpc *d = &t->d;
    plan->min_budget = dp_least(d, t->unit);
    if (plan->min_budget < 0) plan->min_budget = 0;
    int64_t slots = (budget < t->budget ? budget : t->budget) / t->unit;
    int m0 = (int)slots - d->a[0]; /* the chain input is resident and counts */
    if (m0 < 0 || !isfinite(d->cost[row(d, 0, d->n - 1) + (size_t)m0])) return RM_OK;
    rebuilder r = {t->c, t->unit, {0}};
    if (!rebuild(&r, d, m0, 0, d->n - 1)) {
        free(r.q.ops);
        return RM_ERR_NOMEM;
    }
    plan->feasible = 1;
    plan->ops = r.q.ops, plan->n_ops = r.q.n;
    rm_rotor_simulate(t->c, r.q.ops, r.q.n, &plan->time, &plan->peak_bytes);
    return RM_OK;
}

rm_status rm_rotor_solve_groups(const rm_chain_model *c, int64_t budget, int slots, int groups, rm_rotor_plan *plan) {
    memset(plan, 0, sizeof *plan);
    rm_rotor_table *t;
    rm_status rc = rm_rotor_table_fill(c, budget, slots, groups, &t);
    if (rc == RM_OK) rc = rm_rotor_table_plan(t, budget, plan);
    rm_rotor_table_free(t);
    return rc;
}

rm_status rm_rotor_solve(const rm_chain_model *c, int64_t budget, int slots, rm_rotor_plan *plan) {
    memset(plan, 0, sizeof *plan);
    int groups = rm_rotor_groups(c->n, slots);
    if (groups == 0) return RM_ERR_ARG;
    return rm_rotor_solve_groups(c, budget, slots, groups, plan);
}

/* The smallest budget: one fill at a budget B gives, for every m <= B (in
 * slots), whether a plan exists; the least feasible m is an upper bound on
 * the minimum, exact up to one slot. Filling again at that bound makes the
 * slots finer; three rounds are within a fraction of a percent. */
int64_t rm_rotor_min_budget_groups(const rm_chain_model *c, int slots, int groups, int64_t from, int rounds) {
    /* in double: a chain of huge sizes must not overflow int64_t here */
    double total = (double)c->a[0];
    for (int i = 0; i < c->n; i++) total += (double)c->ab[i] + (double)c->a[i + 1] + (double)c->ft[i] + (double)c->bt[i];
    int64_t budget = total * 2 + 1 < (double)RM_ROTOR_MAX_BYTES ? (int64_t)(total * 2 + 1) : RM_ROTOR_MAX_BYTES;
    if (from > 0 && from < budget) budget = from;
    int64_t best = -1;
    for (int round = 0; round < rounds; round++) {
        dpc d;
        int64_t unit;
        if (dp_fill(c, budget, slots, groups, &d, &unit) != RM_OK) break;
        int64_t bytes = dp_least(&d, unit);
        dpc_free(&d);
        if (bytes < 0 || (best >= 0 && bytes >= best)) break;
        best = budget = bytes;
    }
    return best;
}

int64_t rm_rotor_min_budget(const rm_chain_model *c, int slots) {
    int groups = rm_rotor_groups(c->n, slots);
    return groups ? rm_rotor_min_budget_groups(c, slots, groups, 0, 3) : -1;
}
