/* graphfast.c: the general-graph search for large graphs (graphplan.h),
 * with the default evaluator. Pricing a plan costs O(items); the search of
 * graphplan.c prices every candidate move, which on thousands of nodes is
 * millions of pricings. Here one pricing's profile (the bytes live during
 * every item, the copies of every value and who reads them) scores every
 * move at once:
 *
 *   descent  a move (one node one mode step towards recomputing) frees its
 *            bytes where its copy is no longer held (keep -> once: between
 *            its last forward reader and its first backward one; once ->
 *            each: between the blocks that read it; each -> forward each:
 *            between its forward readers); it removes at most the bytes
 *            above the budget there, and costs its recomputations (and its
 *            inputs', when they are not held). The best moves by bytes
 *            removed per time added are applied in batches removing about
 *            half the excess, then priced exactly; a batch that does not
 *            help is cut to its best move, then abandoned.
 *   pruning  undoing a move holds the value over exactly the gaps between
 *            its copies, and removes recomputations (which only frees
 *            memory). So on an upper bound of the live bytes (a segment
 *            tree: add over a range, max over a range), every undo whose
 *            gaps stay within the budget is safe, the most time saved
 *            first, all without pricing; one exact pricing per pass.
 * Every plan returned is priced exactly by the default evaluator. */
#include "plan/graphplan/graphplan.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct move {
    int node;
    double gain, cost; /* bytes above the budget removed (an estimate) and time added, or time saved */
    double key;        /* the order: gain per cost */
} move;

typedef struct fast {
    const rm_gmodel *m;
    int64_t budget;
    const int *block;
    rm_gwork work;
    rm_gsim sim;
    rm_schedule sch;
    rm_geval_result r;
    int T, fwd_end;          /* items; the last FORWARD item */
    int *copy_off, *copies;  /* n+1 / T: per node, the items computing its copies, in time order */
    int *read_off, *reads;   /* n+1 / reads: per node, the items reading it, in time order */
    int *item_block;         /* T: the block of a backward-phase item, -1 in the forward pass */
    int *fill;               /* n: CSR fill cursors */
    int64_t *over_n, *over_s; /* T+1 prefix sums: items above the budget, bytes above it */
    int64_t *tree_max, *tree_add; /* segment tree over items */
    int cap_t, cap_reads, tree_n;
    move *cands;
    int *stamp, *stk, *dep, epoch; /* n each: the walk of rebuild_cost */
    int max_items;                 /* the longest schedule the descent makes */
    int too_long;                  /* the last schedule priced passed max_items (not indexed) */
} fast;

static void fast_free(fast *F) {
    rm_gwork_free(&F->work), rm_gsim_free(&F->sim), rm_schedule_free(&F->sch);
    free(F->copy_off), free(F->copies), free(F->read_off), free(F->reads), free(F->item_block), free(F->fill);
    free(F->over_n), free(F->over_s), free(F->tree_max), free(F->tree_add), free(F->cands);
    free(F->stamp), free(F->stk), free(F->dep);
}


static rm_status profile(fast *F);

/* Prices `mode`; with `indexed`, also indexes (profile) its schedule. A
 * schedule longer than F->max_items is not generated (F->too_long): it
 * counts as fitting nothing. */
static rm_status price(fast *F, const char *mode, int indexed) {
    rm_status rc = rm_gplan_schedule_with(F->m, mode, F->block, &F->work, &F->sch);
    F->too_long = rc == RM_ERR_BUDGET;
    if (F->too_long) {
        F->r = (rm_geval_result){INFINITY, INT64_MAX / 4, INT64_MAX / 4};
        F->sch.n = F->max_items + 1;
        return RM_OK;
    }
    if (rc == RM_OK) rc = rm_gsim_run(F->m, &F->sch, F->budget, &F->sim, &F->r);
    return rc == RM_OK && indexed ? profile(F) : rc;
}

/* Indexes the schedule last priced: the copies and reads of every node and
 * the bytes above the budget. */
static rm_status profile(fast *F) {
    const rm_gmodel *m = F->m;
    int n = m->n, T = F->T = F->sch.n;
    const rm_sched_item *it = F->sch.items;
    if (T + 1 > F->cap_t) { /* every per-item array at once */
        int cap = T + 1 + (T + 1) / 2 + 16;
        int *c = realloc(F->copies, sizeof *c * (size_t)cap);
        if (c) F->copies = c;
        int *b = c ? realloc(F->item_block, sizeof *b * (size_t)cap) : NULL;
        if (b) F->item_block = b;
        int64_t *on = b ? realloc(F->over_n, sizeof *on * (size_t)cap) : NULL;
        if (on) F->over_n = on;
        int64_t *os = on ? realloc(F->over_s, sizeof *os * (size_t)cap) : NULL;
        if (os) F->over_s = os;
        if (!os) return RM_ERR_NOMEM;
        F->cap_t = cap;
    }
    /* reads: inputs of forward and recompute items, what backward items read */
    memset(F->copy_off, 0, sizeof *F->copy_off * ((size_t)n + 1));
    memset(F->read_off, 0, sizeof *F->read_off * ((size_t)n + 1));
    F->fwd_end = -1;
    for (int t = 0; t < T; t++) {
        int v = it[t].node;
        if (it[t].kind == RM_INSTR_FORWARD) F->fwd_end = t;
        if (it[t].kind != RM_INSTR_BACKWARD) {
            F->copy_off[v + 1]++;
            for (int e = m->off[v]; e < m->off[v + 1]; e++) F->read_off[m->src[e] + 1]++;
        } else {
            for (int e = m->off[v]; e < m->off[v + 1]; e++) F->read_off[m->src[e] + 1] += m->reads_in[e];
            F->read_off[v + 1] += m->reads_out[v];
        }
    }
    for (int v = 0; v < n; v++) F->copy_off[v + 1] += F->copy_off[v], F->read_off[v + 1] += F->read_off[v];
    if (F->read_off[n] > F->cap_reads) {
        int cap = F->read_off[n] + F->read_off[n] / 2 + 16, *r = realloc(F->reads, sizeof *r * (size_t)cap);
        if (!r) return RM_ERR_NOMEM;
        F->reads = r, F->cap_reads = cap;
    }
    int *cf = F->fill, *rf = F->fill + n;
    memcpy(cf, F->copy_off, sizeof *cf * (size_t)n), memcpy(rf, F->read_off, sizeof *rf * (size_t)n);
    for (int t = 0; t < T; t++) {
        int v = it[t].node;
        if (it[t].kind != RM_INSTR_BACKWARD) {
            F->copies[cf[v]++] = t;
            for (int e = m->off[v]; e < m->off[v + 1]; e++) F->reads[rf[m->src[e]]++] = t;
        } else {
            for (int e = m->off[v]; e < m->off[v + 1]; e++)
                if (m->reads_in[e]) F->reads[rf[m->src[e]]++] = t;
            if (m->reads_out[v]) F->reads[rf[v]++] = t;
        }
    }
    /* the block of each backward-phase item: a recomputation belongs to the backward after it */
    for (int t = T - 1, b = -1; t >= 0; t--) {
        if (it[t].kind == RM_INSTR_BACKWARD) b = F->block[it[t].node];
        F->item_block[t] = t > F->fwd_end ? b : -1;
    }
    F->over_n[0] = F->over_s[0] = 0;
    for (int t = 0; t < T; t++) {
        int64_t o = F->sim.live[t] - F->budget;
        F->over_n[t + 1] = F->over_n[t] + (o > 0), F->over_s[t + 1] = F->over_s[t] + (o > 0 ? o : 0);
    }
    return RM_OK;
}

/* Bytes above the budget that holding `bytes` less over items (a, b) would
 * remove, at most (both ends excluded). */
static double relief(const fast *F, int a, int b, int64_t bytes) {
    if (b - a < 2) return 0;
    double cnt = (double)(F->over_n[b] - F->over_n[a + 1]), sum = (double)(F->over_s[b] - F->over_s[a + 1]);
    return cnt * (double)bytes < sum ? cnt * (double)bytes : sum;
}

/* Whether node p has a copy alive at item t (or is kept). */
static int held(const fast *F, const char *mode, int p, int t) {
    if (mode[p] == RM_GKEEP) return 1;
    for (int k = F->copy_off[p]; k < F->copy_off[p + 1]; k++)
        if (F->copies[k] <= t && F->sim.copy_last[F->copies[k]] >= t) return 1;
    return 0;
}

/* The last item reading p. */
static int last_read(const fast *F, int p) {
    int a = F->read_off[p], b = F->read_off[p + 1];
    return b > a ? F->reads[b - 1] : F->copies[F->copy_off[p]];
}

/* The time of recomputing v at item t: v, and transitively (to a depth of
 * 8, and at most REBUILD_WALK nodes: an estimate, and on a graph where
 * every node reads many earlier ones a deeper walk made each score O(n)
 * and the descent O(n^2)) its inputs not held there; *back gets the bytes
 * above the budget the copies of those inputs add (a copy rebuilt once is
 * held to its last reader). */
enum { REBUILD_WALK = 64 };
static double rebuild_cost(fast *F, const char *mode, int v, int t, double *back) {
    const rm_gmodel *m = F->m;
    double c = m->fwd[v];
    int top = 0, walked = 0;
    F->epoch++;
    F->stamp[v] = F->epoch, F->stk[top] = v, F->dep[top++] = 0;
    while (top > 0) {
        int u = F->stk[--top], d = F->dep[top];
        for (int e = m->off[u]; e < m->off[u + 1]; e++) {
            int p = m->src[e];
            if (F->stamp[p] == F->epoch || held(F, mode, p, t)) continue;
            F->stamp[p] = F->epoch, c += m->fwd[p];
            if (mode[p] == RM_GONCE) *back += relief(F, t, last_read(F, p), m->bytes[p]);
            if (d < 8 && ++walked < REBUILD_WALK) F->stk[top] = p, F->dep[top++] = d + 1;
        }
    }
    return c;
}

/* The estimated effect of moving v one step towards recomputing. */
static move score_down(fast *F, const char *mode, int v) {
    move mv = {v, 0, 0, 0};
    const int *rd = F->reads + F->read_off[v];
    int nr = F->read_off[v + 1] - F->read_off[v], fe = F->fwd_end;
    int first_b = -1, last_f = F->copies[F->copy_off[v]];
    for (int k = 0; k < nr; k++) {
        if (rd[k] <= fe) last_f = rd[k];
        else if (first_b < 0) first_b = rd[k];
    }
    int64_t bytes = F->m->bytes[v];
    if (mode[v] == RM_GKEEP) {
        if (first_b < 0) return mv;
        double back = 0;
        mv.cost = rebuild_cost(F, mode, v, first_b, &back);
        mv.gain = relief(F, last_f, first_b, bytes) - back;
    } else if (mode[v] == RM_GONCE) { /* freed between the blocks that read it */
        int blocks = 0;
        for (int k = 0; k < nr; k++) {
            if (rd[k] <= fe) continue;
            if (k > 0 && rd[k - 1] > fe && F->item_block[rd[k]] != F->item_block[rd[k - 1]])
                mv.gain += relief(F, rd[k - 1], rd[k], bytes);
            blocks += k == 0 || rd[k - 1] <= fe || F->item_block[rd[k]] != F->item_block[rd[k - 1]];
        }
        double back = 0;
        if (blocks > 1) mv.cost = (blocks - 1) * rebuild_cost(F, mode, v, first_b, &back);
    } else { /* EACH -> FEACH: freed between its forward readers */
        int readers = 0;
        for (int k = 0; k < nr && rd[k] <= fe; k++) {
            if (k > 0) mv.gain += relief(F, rd[k - 1], rd[k], bytes);
            readers++;
        }
        double back = 0;
        if (readers > 1) mv.cost = (readers - 1) * rebuild_cost(F, mode, v, last_f, &back);
    }
    return mv;
}

static int by_ratio(const void *a, const void *b) {
    const move *x = a, *y = b;
    return x->key > y->key ? -1 : x->key < y->key ? 1 : x->node - y->node;
}

/* Sorts the first n candidates, best first. */
static void rank(move *c, int n) {
    for (int k = 0; k < n; k++) c[k].key = c[k].gain / (c[k].cost + 1e-12);
    qsort(c, (size_t)n, sizeof *c, by_ratio);
}

/* Descent until the plan fits (F->r.excess == 0) or no move helps. */
static rm_status descend(fast *F, char *mode) {
    const rm_gmodel *m = F->m;
    int n = m->n;
    rm_status rc = price(F, mode, 1);
    if (F->too_long) return rc; /* a start too long to price: it fits nothing */
    int batch = n / 16 > 1 ? n / 16 : 1;
    int64_t before = F->r.excess; /* 8 rounds ago: a descent that no longer gains 1% in 8 is stuck */
    for (int round = 0; rc == RM_OK && F->r.excess > 0 && round < 4 * n + 16; round++) {
        if (round % 8 == 0) {
            if (round > 0 && F->r.excess > before - before / 100) break;
            before = F->r.excess;
        }
        int nc = 0;
        for (int v = 0; v < n - 1; v++) {
            if (mode[v] >= rm_gmodel_top(m, v)) continue;
            move mv = score_down(F, mode, v);
            if (mv.gain > 0) F->cands[nc++] = mv;
        }
        if (nc == 0) break;
        rank(F->cands, nc);
        int64_t excess = F->r.excess;
        int take = 0; /* as many as the last batch that helped (doubled), while their gains add to < 2x the excess */
        for (double sum = 0; take < nc && take < batch && (take == 0 || sum < 2.0 * (double)excess); take++)
            sum += F->cands[take].gain;
        int ok = 0;
        for (int tries = 0; !ok && tries < 4 && take > 0; tries++) {
            for (int k = 0; k < take; k++) mode[F->cands[k].node]++;
            if ((rc = price(F, mode, 0)) != RM_OK) return rc;
            if (F->r.excess < excess && F->sch.n <= F->max_items && (rc = profile(F)) == RM_OK) ok = 1;
            else {
                for (int k = 0; k < take; k++) mode[F->cands[k].node]--;
                if (take > 1) take /= 2; /* the better half */
                else { /* the next best alone */
                    memmove(F->cands, F->cands + 1, sizeof *F->cands * (size_t)(--nc));
                    take = nc > 0;
                }
            }
        }
        batch = ok ? 2 * take : 1;
        if (!ok) {
            rc = price(F, mode, 1); /* the plan as it was */
            break;
        }
    }
    return rc;
}

/* ---- pruning on an upper bound of the live bytes -------------------------- */

static void tree_build(fast *F, int x, int lo, int hi) {
    F->tree_add[x] = 0;
    if (lo == hi) {
        F->tree_max[x] = F->sim.live[lo];
        return;
    }
    int mid = (lo + hi) / 2;
    tree_build(F, 2 * x, lo, mid), tree_build(F, 2 * x + 1, mid + 1, hi);
    F->tree_max[x] = F->tree_max[2 * x] > F->tree_max[2 * x + 1] ? F->tree_max[2 * x] : F->tree_max[2 * x + 1];
}

/* Adds `d` over items [a, b] (d = 0: only reads), returns the max there. */
static int64_t tree_op(fast *F, int x, int lo, int hi, int a, int b, int64_t d) {
    if (b < lo || hi < a) return INT64_MIN;
    if (a <= lo && hi <= b) {
        F->tree_max[x] += d, F->tree_add[x] += d;
        return F->tree_max[x];
    }
    int mid = (lo + hi) / 2;
    int64_t l = tree_op(F, 2 * x, lo, mid, a, b, d), r = tree_op(F, 2 * x + 1, mid + 1, hi, a, b, d);
    F->tree_max[x] = (F->tree_max[2 * x] > F->tree_max[2 * x + 1] ? F->tree_max[2 * x] : F->tree_max[2 * x + 1]) +
                     F->tree_add[x];
    return (l > r ? l : r) + F->tree_add[x];
}

/* The copies of v whose gaps undoing its last move fills: [first, last) of its copy list. */
static void undo_copies(const fast *F, const char *mode, int v, int *first, int *last) {
    int a = F->copy_off[v], b = F->copy_off[v + 1], fwd = a;
    while (fwd < b && F->copies[fwd] <= F->fwd_end) fwd++; /* copies a..fwd-1 are the forward pass's */
    if (mode[v] == RM_GONCE) *first = a, *last = b;          /* the forward copy and the one rebuilt */
    else if (mode[v] == RM_GEACH) *first = fwd, *last = b;   /* the backward blocks' copies */
    else *first = a, *last = fwd;                            /* the forward readers' copies */
}

/* The time undoing v's last move saves (its recomputations it removes). */
static double undo_saves(const fast *F, const char *mode, int v) {
    int first, last;
    undo_copies(F, mode, v, &first, &last);
    return last - first > 1 ? (last - first - 1) * F->m->fwd[v] : 0;
}

/* One pass: every safe undo, most time saved first; returns how many. */
static int prune_pass(fast *F, char *mode) {
    int n = F->m->n, nc = 0, done = 0;
    for (int v = 0; v < n; v++) {
        if (mode[v] == RM_GKEEP) continue;
        move mv = {v, undo_saves(F, mode, v), 1, 0};
        if (mv.gain > 0) F->cands[nc++] = mv;
    }
    rank(F->cands, nc);
    tree_build(F, 1, 0, F->T - 1);
    for (int k = 0; k < nc; k++) {
        int v = F->cands[k].node, first, last, safe = 1;
        int64_t bytes = F->m->bytes[v];
        undo_copies(F, mode, v, &first, &last);
        for (int c = first; c + 1 < last && safe; c++) {
            int a = F->sim.copy_last[F->copies[c]] + 1, b = F->copies[c + 1] - 1;
            if (a <= b && tree_op(F, 1, 0, F->T - 1, a, b, 0) + bytes > F->budget) safe = 0;
        }
        if (!safe) continue;
        for (int c = first; c + 1 < last; c++) {
            int a = F->sim.copy_last[F->copies[c]] + 1, b = F->copies[c + 1] - 1;
            if (a <= b) tree_op(F, 1, 0, F->T - 1, a, b, bytes);
        }
        mode[v]--, done++;
    }
    return done;
}

/* The undos the bound refused, priced exactly, the most time saved first:
 * at most `tries` pricings; with `passes` > 1, passes again over the plan
 * they leave while a pass undid anything (the final polish of a search:
 * a plan made for a tighter budget, or one the bound held back, can hold
 * much more at the budget itself). */
static rm_status polish(fast *F, char *mode, int tries, int passes) {
    int n = F->m->n;
    rm_status rc = RM_OK;
    for (int pass = 0, undone = 1; pass < passes && undone && tries > 0 && rc == RM_OK; pass++) {
        int nc = 0;
        undone = 0;
        if (pass > 0 && (rc = price(F, mode, 1)) != RM_OK) break; /* the copies of the plan as it is now */
        for (int v = 0; v < n; v++) {
            if (mode[v] == RM_GKEEP) continue;
            move mv = {v, undo_saves(F, mode, v), 1, 0};
            if (mv.gain > 0) F->cands[nc++] = mv;
        }
        rank(F->cands, nc);
        for (int k = 0; k < nc && tries > 0 && rc == RM_OK; k++, tries--) {
            int v = F->cands[k].node;
            mode[v]--;
            rc = price(F, mode, 0);
            if (rc == RM_OK && F->r.excess > 0) mode[v]++;
            else undone++;
        }
    }
    return rc == RM_OK ? price(F, mode, 1) : rc;
}

/* A thorough polish prices at most this many undos per node. */
enum { POLISH_PRICINGS = 8 };

/* Pruning passes until none undoes anything, then a polish (thorough: until
 * a pass undoes nothing); the plan fits
 * on entry and on exit (checked exactly: a pass that would not fit is
 * rolled back). */
static rm_status prune(fast *F, char *mode, char *saved, int thorough) {
    int n = F->m->n;
    rm_status rc = price(F, mode, 1);
    for (int pass = 0; rc == RM_OK && F->r.excess == 0 && pass < 8; pass++) {
        memcpy(saved, mode, (size_t)n);
        if (prune_pass(F, mode) == 0) break;
        rc = price(F, mode, 1);
        if (rc == RM_OK && F->r.excess > 0) { /* the bound held nothing back: keep what fitted */
            memcpy(mode, saved, (size_t)n);
            rc = price(F, mode, 1);
            break;
        }
    }
    int tries = thorough ? POLISH_PRICINGS * n : (int)sqrt((double)n) * 2;
    return rc == RM_OK && F->r.excess == 0 ? polish(F, mode, tries, thorough ? n : 1) : rc;
}

static int fast_alloc(fast *F, const rm_gmodel *m, int64_t budget, const int *block) {
    memset(F, 0, sizeof *F);
    F->m = m, F->budget = budget, F->block = block;
    F->max_items = RM_GFAST_MAX_RECOMPUTE * 2 * m->n; /* store-all has about 2n items */
    size_t k = (size_t)m->n + 1;
    F->copy_off = calloc(k, sizeof *F->copy_off), F->read_off = calloc(k, sizeof *F->read_off);
    F->fill = malloc(2 * k * sizeof *F->fill), F->cands = malloc(k * sizeof *F->cands);
    F->stamp = calloc(k, sizeof *F->stamp), F->stk = malloc(k * sizeof *F->stk), F->dep = malloc(k * sizeof *F->dep);
    int ok = F->copy_off && F->read_off && F->fill && F->cands && F->stamp && F->stk && F->dep &&
             rm_gwork_alloc(&F->work, m->n) == RM_OK;
    F->work.max_items = F->max_items; /* no longer schedule is even generated */
    return ok;
}

/* The tree for T items, grown once a plan's schedule is longer. */
static int fast_tree(fast *F) {
    if (F->T <= F->tree_n) return 1;
    free(F->tree_max), free(F->tree_add);
    F->tree_n = F->T + F->T / 2 + 16;
    F->tree_max = malloc(sizeof *F->tree_max * 4 * (size_t)F->tree_n);
    F->tree_add = malloc(sizeof *F->tree_add * 4 * (size_t)F->tree_n);
    return F->tree_max && F->tree_add;
}

rm_status rm_gplan_fast(const rm_gmodel *m, int64_t budget, const int *block, int prune_too, char *mode,
                        rm_geval_result *r) {
    fast F;
    char *saved = malloc((size_t)m->n + 1);
    rm_status rc = saved && fast_alloc(&F, m, budget, block) ? RM_OK : RM_ERR_NOMEM;
    if (rc == RM_OK) rc = descend(&F, mode);
    if (rc == RM_OK && F.r.excess == 0 && prune_too) {
        rc = price(&F, mode, 1);
        if (rc == RM_OK && !fast_tree(&F)) rc = RM_ERR_NOMEM;
        /* the tree is sized for the longest schedule a pass sees: the descent's */
        if (rc == RM_OK) rc = prune(&F, mode, saved, prune_too > 1);
    }
    if (rc == RM_OK) *r = F.r;
    fast_free(&F);
    free(saved);
    return rc;
}
