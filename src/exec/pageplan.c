/* pageplan.c: one plan over keep, recompute and page under a memory limit
 * (issue 20).
 *
 * With a scratch file, what the limit leaves after the training state is
 * no longer fixed: each parameter's AdamW moments, and then the parameter
 * itself, can live in the file instead (fused optimizer), streamed through
 * its update; and each activation can be paged out over its idle gap
 * instead of kept or recomputed. The plan minimises the predicted step
 * time, compute (forward, backward, recomputation) plus the time the step
 * waits for transfers, over:
 *
 *   - how much state to page: levels k = 0 .. 2P + F over the P trainable
 *     and F frozen parameters, each ordered by when the backward finishes
 *     them (the first ones get the most compute to hide their transfers
 *     behind; a tied embedding, finished by the step's last instruction,
 *     comes last): levels up to P page the first k parameters' moments,
 *     levels above also the first k - P frozen parameters, then the first
 *     k - P - F trainable ones (without a fused optimizer: frozen
 *     parameters only, levels 0 .. F). Each level frees its bytes for the
 *     arena: the recompute plan (Rotor's program on chains, the graph
 *     planner on other graphs) gets a larger budget;
 *   - which activations to page instead of recomputing: from a recompute
 *     plan at a larger budget, the largest values held across the forward
 *     and backward passes are paged until the arena fits;
 *   - the staging room (a cap on bytes read ahead or not yet written),
 *     which is arena too.
 *
 * Every candidate is lowered to the engine's program and laid out: only an
 * arena that fits counts, so the limit holds whatever the predictions. The
 * predictions come from the paging timeline (plan/paging/paging.c: the compute
 * items one after another, the transfers on one FIFO channel at the
 * scratch file's bandwidth) with compute priced from FLOPs at the rate
 * measured at start (and, after the profiling step, from measured times:
 * the re-plan keeps the state chosen here and re-plans the rest). */
#include "exec/exec.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The staging room of a plan in an arena room of `room` bytes: enough to
 * stream at the file's bandwidth with ~60 ms of lead, at most a third of
 * the room, at least two chunks of moments. */
static size_t staging_cap(const rm_session *s, int64_t room) {
    double bw = s->page.read_bps > s->page.write_bps ? s->page.read_bps : s->page.write_bps;
    double cap = bw * 0.06;
    if (cap > room / 3.0) cap = room / 3.0;
    if (cap < 2.0 * (double)s->page.chunk_bytes) cap = 2.0 * (double)s->page.chunk_bytes;
    return (size_t)cap;
}

/* The moments' chunk: 8 MiB, smaller under a small limit (a 32nd of it),
 * at least 64 KiB (two 4096-float blocks of m and v). */
static size_t chunk_for(int64_t limit) {
    int64_t c = limit / 32;
    if (c > ((int64_t)8 << 20)) c = (int64_t)8 << 20;
    if (c < ((int64_t)64 << 10)) c = (int64_t)64 << 10;
    return (size_t)c;
}

/* The state the plan may page, in the order it pages it: the P trainable
 * parameters (their moments, then themselves, through the fused updates)
 * and the F frozen ones (only read: with any optimizer), each list in the
 * order the backward finishes them. Level k pages, under a fused
 * optimizer, the moments of the first min(k, P) trainable parameters, the
 * first k - P frozen parameters and the first k - P - F trainable ones
 * (up to 2P + F: all of it); without one, the first k frozen parameters
 * (up to F). Moments and frozen parameters come first: each byte they free
 * costs two bytes of transfers a step (moments read and written, a frozen
 * parameter read for the forward and again for the backward), a trainable
 * parameter's three. */
typedef struct levels {
    int *order, n;  /* trainable */
    int *frozen, f; /* frozen */
    int fused;
} levels;

static int level_top(const levels *L) { return L->fused ? 2 * L->n + L->f : L->f; }

/* Parameters read in the step, trainable into L->order and frozen into
 * L->frozen, in the order the backward finishes them (their last reader in
 * store-all's schedule). Returns -1 when out of memory. */
static int state_order(rm_session *s, levels *L) {
    const rm_graph *g = s->g;
    rm_schedule sch;
    char err[256];
    if (rm_schedule_build(g, "none", 1, NULL, &sch, err, sizeof err) != RM_OK) return -1;
    int *last = malloc((size_t)(g->n_params ? g->n_params : 1) * sizeof *last);
    if (!last) {
        rm_schedule_free(&sch);
        return -1;
    }
    for (int pi = 0; pi < g->n_params; pi++) last[pi] = -1;
    for (int k = 0; k < sch.n; k++) {
        const rm_node *nd = &g->nodes[sch.items[k].node];
        for (int i = 0; i < nd->n_in; i++)
            for (int pi = 0; nd->in[i] >= 0 && pi < g->n_params; pi++)
                if (g->params[pi] == nd->in[i]) last[pi] = k;
    }
    L->n = L->f = 0;
    L->fused = s->opt.fuse_optimizer;
    for (int pi = 0; pi < g->n_params; pi++) {
        const rm_value *v = &g->vals[g->params[pi]];
        if (last[pi] < 0) continue;
        if (v->trainable) L->order[L->n++] = pi;
        else if (v->frozen && rm_param_pageable(v)) L->frozen[L->f++] = pi;
    }
    for (int w = 0; w < 2; w++) { /* insertion sort by last reader */
        int *o = w ? L->frozen : L->order, n = w ? L->f : L->n;
        for (int i = 1; i < n; i++) {
            int x = o[i], j = i;
            while (j > 0 && last[o[j - 1]] > last[x]) o[j] = o[j - 1], j--;
            o[j] = x;
        }
    }
    free(last);
    rm_schedule_free(&sch);
    return 0;
}

static int levels_alloc(const rm_session *s, levels *L) {
    const size_t np = (size_t)(s->g->n_params ? s->g->n_params : 1);
    memset(L, 0, sizeof *L);
    L->order = malloc(np * sizeof *L->order);
    L->frozen = malloc(np * sizeof *L->frozen);
    return L->order && L->frozen ? 0 : -1;
}

static void levels_free(levels *L) {
    free(L->order);
    free(L->frozen);
    memset(L, 0, sizeof *L);
}

/* Store-all's arena (no paging). */
static int64_t store_all_arena(rm_session *s) {
    rm_schedule sch;
    rm_program p;
    char err[256];
    if (rm_schedule_build(s->g, "none", 1, NULL, &sch, err, sizeof err) != RM_OK) return -1;
    rm_status rc = rm_program_build(s->g, &sch, s->threads, &p, err, sizeof err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return -1;
    rm_memplan(&p);
    int64_t a = (int64_t)p.arena_bytes;
    rm_program_free(&p);
    return a;
}

static void set_level(rm_session *s, const levels *L, int level) {
    memset(s->page.moments, 0, (size_t)(s->g->n_params ? s->g->n_params : 1));
    memset(s->page.params, 0, (size_t)(s->g->n_params ? s->g->n_params : 1));
    const int n = L->fused ? L->n : 0; /* trainable state: through the fused updates */
    for (int i = 0; i < n && i < level; i++) s->page.moments[L->order[i]] = 1;
    for (int i = 0; i < L->f && i < level - n; i++) s->page.params[L->frozen[i]] = 1;
    for (int i = 0; i < n && i < level - n - L->f; i++) s->page.params[L->order[i]] = 1;
}

/* A plan being weighed: its program, predicted time and what it pages. */
typedef struct cand {
    rm_program prog;
    int level, n_values;
    int64_t budget;     /* the recompute plan's budget */
    size_t cap;         /* the staging room */
    double ms;          /* predicted: recomputation + waits (+ a twentieth of the transfers) */
    double wait;        /* of it, the predicted waits */
    double step;        /* the predicted step (the paging timeline's) */
    int dp;             /* found by the chain's program with its paged option */
    char *values;       /* the activations it pages (NULL: none) */
} cand;

static void cand_free(cand *c) {
    rm_program_free(&c->prog);
    free(c->values);
    memset(c, 0, sizeof *c);
}

/* The recompute plan at `budget` (no paging yet): its schedule. */
static rm_status recompute_plan(rm_session *s, int64_t budget, rm_schedule *sch) {
    char name[48], err[512];
    snprintf(name, sizeof name, "%lld", (long long)budget);
    rm_status rc = rm_schedule_budget(s->g, name, s->threads, NULL, sch, &s->autoplan, err, sizeof err);
    if (rc != RM_OK && rc != RM_ERR_BUDGET) rm_graph_fail(s->g, rc, "%s", err);
    return rc;
}

static rm_status copy_schedule(const rm_schedule *a, rm_schedule *b) {
    memset(b, 0, sizeof *b);
    for (int k = 0; k < a->n; k++)
        if (rm_schedule_push(b, a->items[k].kind, a->items[k].node) != RM_OK) return RM_ERR_NOMEM;
    return RM_OK;
}

/* The schedule with the session's paging marks applied, as a laid-out
 * program; *ms the predicted recomputation and waits. */
static rm_status lay_out(rm_session *s, const rm_schedule *base, rm_program *p, double *ms) {
    rm_schedule sch;
    char err[256];
    rm_status rc = copy_schedule(base, &sch);
    if (rc == RM_OK) rc = rm_session_page_schedule(s, &sch, NULL, 1);
    if (rc == RM_OK && (rc = rm_program_build(s->g, &sch, s->threads, p, err, sizeof err)) != RM_OK)
        rm_graph_fail(s->g, rc, "%s", err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return rc;
    rm_memplan(p);
    /* recomputation and waits; and a twentieth of the transfers' time, so
     * that of two plans predicted alike the one that moves less wins (the
     * timeline's overlap is a prediction) */
    double io_ms = ((double)p->page_out_bytes / s->page.write_bps + (double)p->page_in_bytes / s->page.read_bps) * 1e3;
    *ms = rm_recompute_cost(s->g, p, NULL) / s->page.flops_per_ms + s->page.predicted_wait_ms + 0.05 * io_ms;
    return RM_OK;
}

/* Values held from the forward into the backward pass (the first buffer of
 * a forward that a backward reads), largest first: what activation paging
 * frees. Returns how many. */
static int held_values(const rm_session *s, const rm_program *p, int *out) {
    const rm_graph *g = s->g;
    int first_bwd = p->n_instrs, n = 0;
    for (int i = 0; i < p->n_instrs; i++)
        if (p->instrs[i].kind == RM_INSTR_BACKWARD) {
            first_bwd = i;
            break;
        }
    for (int b = 0; b < p->n_bufs; b++) {
        const rm_buffer *bf = &p->bufs[b];
        if (bf->value < 0 || g->vals[bf->value].kind != RM_VALUE_ACT || g->vals[bf->value].is_output) continue;
        if (p->instrs[bf->first].kind != RM_INSTR_FORWARD || bf->last < first_bwd || bf->first >= first_bwd) continue;
        if (bf->bytes < ((size_t)64 << 10)) continue; /* small values: not worth a transfer */
        out[n++] = bf->value;
    }
    for (int i = 1; i < n; i++) { /* largest first */
        int x = out[i], j = i;
        size_t bx = (size_t)g->vals[x].numel;
        while (j > 0 && (size_t)g->vals[out[j - 1]].numel < bx) out[j] = out[j - 1], j--;
        out[j] = x;
    }
    return n;
}

/* Candidate c at state level c->level with the recompute plan at c->budget:
 * as is, and, when `acts`, with activations paged until the arena fits.
 * c->prog is the cheapest that fits `room` (prog.n_instrs 0: none). */
static rm_status weigh(rm_session *s, cand *c, int64_t room, int acts) {
    rm_graph *g = s->g;
    rm_schedule base;
    rm_status rc = recompute_plan(s, c->budget, &base);
    if (rc == RM_ERR_BUDGET) return RM_OK;
    if (rc != RM_OK) return rc;
    s->page.max_staged = c->cap;
    free(s->page.values);
    s->page.values = NULL;
    rm_program p;
    double ms;
    if ((rc = lay_out(s, &base, &p, &ms)) != RM_OK) goto done;
    if (getenv("REMAT_PAGEPLAN_DEBUG"))
        fprintf(stderr, "pageplan:   recompute plan at %.2f MiB (%s): paged arena %.2f MiB, live %.2f, room %.2f\n",
                c->budget / 1048576.0, s->autoplan.chosen, p.arena_bytes / 1048576.0, p.peak_live_bytes / 1048576.0,
                room / 1048576.0);
    if ((int64_t)p.arena_bytes <= room) {
        c->prog = p, c->ms = ms, c->wait = s->page.predicted_wait_ms, c->step = s->page.predicted_step_ms;
        goto done;
    }
    if (!acts) {
        rm_program_free(&p);
        goto done;
    }
    /* page the largest held values until the arena fits */
    int *held = malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof *held);
    s->page.values = calloc((size_t)(g->n_vals ? g->n_vals : 1), 1);
    if (!held || !s->page.values) {
        free(held);
        rm_program_free(&p);
        rc = rm_graph_fail(g, RM_ERR_NOMEM, "out of memory planning the paging");
        goto done;
    }
    int n = held_values(s, &p, held), next = 0;
    for (int round = 0; round < 24 && next < n && (int64_t)p.arena_bytes > room; round++) {
        int64_t excess = (int64_t)p.arena_bytes - room, freed = 0;
        while (next < n && freed < excess + excess / 4) {
            s->page.values[held[next]] = 1;
            freed += (int64_t)(g->vals[held[next]].numel * rm_dtype_size(g->vals[held[next]].dtype)), next++;
        }
        rm_program_free(&p);
        if ((rc = lay_out(s, &base, &p, &ms)) != RM_OK) break;
    }
    free(held);
    if (rc == RM_OK && (int64_t)p.arena_bytes <= room) {
        c->prog = p, c->ms = ms, c->n_values = next;
        c->wait = s->page.predicted_wait_ms, c->step = s->page.predicted_step_ms;
        c->values = s->page.values;
        s->page.values = NULL;
    } else {
        if (rc == RM_OK) rm_program_free(&p);
        free(s->page.values);
        s->page.values = NULL;
    }
done:
    rm_schedule_free(&base);
    return rc;
}

/* The chain's own program with a third way to keep a stage, on disk
 * (rm_schedule_chain_paged: Rotor's dynamic program over keep whole, keep
 * selectively, keep on disk, or recompute), at c->budget, lowered, paged
 * and laid out; tightened by the excess while the arena exceeds the room.
 * Nothing (c->prog empty) on graphs that are not exact chains. */
static rm_status weigh_dp(rm_session *s, cand *c, int64_t room) {
    rm_graph *g = s->g;
    const size_t nv = (size_t)(g->n_vals ? g->n_vals : 1);
    const double bps = 0.5 * (s->page.read_bps + s->page.write_bps);
    rm_status rc = RM_OK;
    for (int tries = 0; tries < 4 && rc == RM_OK && c->budget > 0; tries++) {
        char *values = calloc(nv, 1), err[256];
        rm_schedule base;
        if (!values) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory planning the paging");
        rc = rm_schedule_chain_paged(g, c->budget, s->threads, NULL, 1e3 / bps, 0.15, s->page.flops_per_ms, &base,
                                     values, err, sizeof err);
        if (rc == RM_ERR_ARG || rc == RM_ERR_BUDGET) {
            free(values);
            return RM_OK;
        }
        if (rc != RM_OK) {
            free(values);
            return rm_graph_fail(g, rc, "%s", err);
        }
        free(s->page.values);
        s->page.values = values;
        s->page.max_staged = c->cap;
        rm_program p;
        double ms;
        rc = lay_out(s, &base, &p, &ms);
        rm_schedule_free(&base);
        if (rc != RM_OK) break;
        if ((int64_t)p.arena_bytes <= room) {
            int n = 0;
            for (size_t v = 0; v < nv; v++) n += values[v];
            c->prog = p, c->ms = ms, c->n_values = n;
            c->wait = s->page.predicted_wait_ms, c->step = s->page.predicted_step_ms;
            c->values = values, s->page.values = NULL;
            return RM_OK;
        }
        c->budget -= (int64_t)p.arena_bytes - room;
        rm_program_free(&p);
    }
    free(s->page.values);
    s->page.values = NULL;
    return rc;
}

/* The budgets worth weighing at a level whose arena room is `room`: the
 * room itself, less the staging; and, for activation paging, recompute
 * plans at larger budgets (less recomputation, more to page). */
static rm_status try_level(rm_session *s, int level, int64_t room, int64_t store_all, cand *best) {
    const int pages_state = level > 0;
    const size_t cap = staging_cap(s, room);
    const double more[4] = {1.0, 1.3, 1.7, 2.5};
    for (int k = 0; k < 4; k++) {
        cand c = {0};
        c.level = level;
        c.cap = pages_state || k > 0 ? cap : 0;
        c.budget = (int64_t)((double)(room - (int64_t)c.cap) * more[k]);
        if (c.budget <= 0) continue;
        if (k > 0 && c.budget / more[k] * more[k - 1] >= store_all) break; /* the previous already stored all */
        if (c.budget > store_all) c.budget = store_all;
        rm_status rc = weigh(s, &c, room, k > 0);
        if (rc != RM_OK) {
            cand_free(&c);
            return rc;
        }
        if (getenv("REMAT_PAGEPLAN_DEBUG"))
            fprintf(stderr, "pageplan: level %d budget %.2f MiB cap %.1f MiB: %s arena %.2f MiB (room %.2f), %.1f ms, "
                    "%d values\n", level, c.budget / 1048576.0, c.cap / 1048576.0, c.prog.n_instrs ? "fits" : "no",
                    c.prog.arena_bytes / 1048576.0, room / 1048576.0, c.ms, c.n_values);
        if (c.prog.n_instrs && (!best->prog.n_instrs || c.ms < best->ms * (1 - 1e-9))) {
            cand_free(best);
            *best = c;
        } else {
            cand_free(&c);
        }
    }
    /* and the chain's dynamic program with keeping on disk as a third way */
    cand c = {0};
    c.level = level, c.cap = cap, c.budget = room - (int64_t)cap;
    rm_status rc = c.budget > 0 ? weigh_dp(s, &c, room) : RM_OK;
    if (getenv("REMAT_PAGEPLAN_DEBUG") && c.prog.n_instrs)
        fprintf(stderr, "pageplan: level %d chain DP with paging at %.2f MiB: arena %.2f MiB, %.1f ms, %d values\n",
                level, c.budget / 1048576.0, c.prog.arena_bytes / 1048576.0, c.ms, c.n_values);
    if (rc == RM_OK && c.prog.n_instrs && (!best->prog.n_instrs || c.ms < best->ms * (1 - 1e-9))) {
        cand_free(best);
        *best = c;
        c.dp = 1;
        best->dp = 1;
    } else {
        cand_free(&c);
    }
    return rc;
}

/* The least level whose arena room is at least `want` (-1: none). */
static int least_level(rm_session *s, size_t (*fixed)(rm_session *), const levels *L, int64_t want) {
    const int top = level_top(L);
    set_level(s, L, top);
    if (s->opt.limit_bytes - (int64_t)fixed(s) < want) return -1;
    int lo = -1, hi = top;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        set_level(s, L, mid);
        if (s->opt.limit_bytes - (int64_t)fixed(s) >= want) hi = mid;
        else lo = mid;
    }
    return hi;
}

/* The state levels to weigh (at most 9): none; the moments alone; the
 * moments and the frozen parameters; the least levels whose room holds the
 * least recompute plan and some of what store-all holds beyond it (all of
 * it, 60%, 30%, 10%, none), with the staging; and all of the state. */
static int levels_to_weigh(rm_session *s, size_t (*fixed)(rm_session *), const levels *L, int64_t store_all,
                           int64_t least, int *levels) {
    int count = 0;
    const int top = level_top(L);
    const double share[5] = {1.0, 0.6, 0.3, 0.1, 0.0};
    levels[count++] = 0;
    if (L->fused && L->n > 0 && L->n < top) levels[count++] = L->n;
    if (L->fused && L->f > 0 && L->n + L->f < top) levels[count++] = L->n + L->f;
    for (int j = 0; j < 5 && top > 0; j++) {
        int64_t want = least + (int64_t)((double)(store_all - least) * share[j]);
        want += (int64_t)staging_cap(s, want);
        int l = least_level(s, fixed, L, want);
        int seen = l < 0;
        for (int i = 0; i < count; i++) seen |= levels[i] == l;
        if (!seen) levels[count++] = l;
    }
    int seen = 0;
    for (int i = 0; i < count; i++) seen |= levels[i] == top;
    if (top > 0 && !seen) levels[count++] = top;
    return count;
}

static rm_status alloc_marks(rm_session *s) {
    const size_t np = (size_t)(s->g->n_params ? s->g->n_params : 1);
    if (!s->page.moments) s->page.moments = calloc(np, 1);
    if (!s->page.params) s->page.params = calloc(np, 1);
    return s->page.moments && s->page.params ? RM_OK : RM_ERR_NOMEM;
}

rm_status rm_session_limit_paging(rm_session *s, size_t (*fixed)(rm_session *s)) {
    rm_graph *g = s->g;
    levels L;
    int lv[10];
    if (levels_alloc(s, &L) != 0 || alloc_marks(s) != RM_OK || state_order(s, &L) != 0) {
        levels_free(&L);
        return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory planning the paging");
    }
    s->page.chunk_bytes = chunk_for(s->opt.limit_bytes);
    const int64_t store_all = store_all_arena(s);
    if (store_all < 0) {
        levels_free(&L);
        return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory planning the paging");
    }
    rm_status rc = RM_OK;
    /* the least recompute plan's arena (the planner names it when a budget is below it) */
    rm_schedule probe;
    int64_t least = store_all;
    rc = recompute_plan(s, 1, &probe);
    if (rc == RM_OK) rm_schedule_free(&probe);
    if (rc == RM_ERR_BUDGET && s->autoplan.min_budget > 0) least = s->autoplan.min_budget;
    g->status = RM_OK;
    rc = RM_OK;
    int nl = levels_to_weigh(s, fixed, &L, store_all, least, lv);
    cand best = {0};
    for (int i = 0; i < nl && rc == RM_OK; i++) {
        set_level(s, &L, lv[i]);
        int64_t room = s->opt.limit_bytes - (int64_t)fixed(s);
        if (room > 0) rc = try_level(s, lv[i], room, store_all, &best);
    }
    if (rc == RM_OK && !best.prog.n_instrs) {
        set_level(s, &L, 0);
        levels_free(&L);
        s->page.max_staged = 0;
        return RM_ERR_BUDGET; /* the caller words the refusal */
    }
    if (rc == RM_OK) {
        set_level(s, &L, best.level);
        s->page.predicted_wait_ms = best.wait, s->page.predicted_step_ms = best.step;
        s->page.values = best.values, best.values = NULL;
        s->page.max_staged = best.cap;
        s->train = best.prog, memset(&best.prog, 0, sizeof best.prog);
        s->page.arena_cap = s->opt.limit_bytes - (int64_t)fixed(s);
        snprintf(s->budget_name, sizeof s->budget_name, "%lld", (long long)best.budget);
        s->opt.memory_budget = s->budget_name;
        s->opt.checkpoint = "auto";
        s->budget_bytes = best.budget;
        s->store_all_bytes = store_all;
        s->limit.activation_bytes = (size_t)s->page.arena_cap;
        s->limit.arena_bytes = s->train.arena_bytes;
        size_t len = strlen(s->autoplan.chosen);
        if (best.dp) snprintf(s->autoplan.chosen, sizeof s->autoplan.chosen, "rotor with keep-on-disk");
        else snprintf(s->autoplan.chosen + len, sizeof s->autoplan.chosen - len, "+paging");
    }
    cand_free(&best);
    levels_free(&L);
    return rc;
}

size_t rm_session_least_paged(rm_session *s, size_t (*fixed)(rm_session *s)) {
    levels L;
    size_t least = 0;
    if (levels_alloc(s, &L) != 0 || state_order(s, &L) != 0 || level_top(&L) == 0) {
        levels_free(&L); /* nothing to page: unfused, no frozen parameter */
        return 0;
    }
    const int planning = s->page.planning;
    s->page.planning = 1; /* a scratch file or not: pricing only */
    if (s->page.read_bps <= 0) s->page.read_bps = s->page.write_bps = 1e9;
    if (alloc_marks(s) == RM_OK) {
        if (!s->page.chunk_bytes) s->page.chunk_bytes = chunk_for(s->opt.limit_bytes);
        set_level(s, &L, level_top(&L));
        /* the least recompute plan, with every parameter paged through it */
        rm_schedule base;
        rm_auto_info saved = s->autoplan;
        int64_t min_budget = s->autoplan.min_budget;
        if (min_budget <= 0 && recompute_plan(s, 1, &base) == RM_ERR_BUDGET) min_budget = s->autoplan.min_budget;
        else if (min_budget <= 0) rm_schedule_free(&base);
        s->g->status = RM_OK;
        s->page.max_staged = 2 * s->page.chunk_bytes;
        rm_program p;
        double ms;
        if (min_budget > 0 && recompute_plan(s, min_budget, &base) == RM_OK) {
            if (lay_out(s, &base, &p, &ms) == RM_OK) {
                least = fixed(s) + p.arena_bytes;
                rm_program_free(&p);
            }
            rm_schedule_free(&base);
        }
        s->g->status = RM_OK;
        s->autoplan = saved;
        set_level(s, &L, 0);
        s->page.max_staged = 0;
    }
    levels_free(&L);
    s->page.planning = planning;
    fixed(s); /* the breakdown as it was */
    return least;
}

size_t rm_session_least_paged_fused(rm_session *s, size_t (*fixed)(rm_session *s)) {
    if (s->opt.fuse_optimizer || s->opt.accumulate || s->g->train_floats == 0) return 0;
    /* the same session planned as a fused one: gradients as arena buffers
     * (g->fuse_grads, as rm_compile sets it), the trainable state pageable;
     * then as it was */
    const int fuse = s->g->fuse_grads;
    const rm_auto_info saved = s->autoplan;
    s->opt.fuse_optimizer = 1, s->g->fuse_grads = 1;
    s->autoplan.min_budget = 0; /* the unfused least plan is not the fused one's */
    size_t least = rm_session_least_paged(s, fixed);
    s->opt.fuse_optimizer = 0, s->g->fuse_grads = fuse;
    s->autoplan = saved;
    fixed(s);
    return least;
}

rm_status rm_session_budget_paging(rm_session *s, int64_t budget, rm_program *out) {
    /* activations only: the budget covers the arena, not the state */
    cand best = {0};
    const size_t cap = staging_cap(s, budget);
    s->page.chunk_bytes = s->page.chunk_bytes ? s->page.chunk_bytes : chunk_for(budget * 4);
    const int64_t store_all = store_all_arena(s);
    if (store_all < 0) return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory planning the paging");
    rm_status rc = RM_OK;
    const double more[4] = {1.0, 1.3, 1.7, 2.5};
    for (int k = 0; k < 4 && rc == RM_OK; k++) {
        cand c = {0};
        c.cap = k ? cap : 0;
        c.budget = (int64_t)((double)budget * more[k]);
        if (k > 0 && (double)c.budget / more[k] * more[k - 1] >= (double)store_all) break;
        if (c.budget > store_all) c.budget = store_all;
        rc = weigh(s, &c, budget, k > 0);
        if (rc == RM_OK && c.prog.n_instrs && (!best.prog.n_instrs || c.ms < best.ms * (1 - 1e-9))) {
            cand_free(&best);
            best = c;
        } else {
            cand_free(&c);
        }
    }
    if (rc != RM_OK) {
        cand_free(&best);
        return rc;
    }
    if (!best.prog.n_instrs) return RM_ERR_BUDGET;
    free(s->page.values);
    s->page.values = best.values, best.values = NULL;
    s->page.max_staged = best.cap;
    s->page.predicted_wait_ms = best.wait, s->page.predicted_step_ms = best.step;
    *out = best.prog, memset(&best.prog, 0, sizeof best.prog);
    s->page.arena_cap = budget; /* the profiled re-plan: the chosen recompute budget, tightened to this */
    snprintf(s->budget_name, sizeof s->budget_name, "%lld", (long long)best.budget);
    s->opt.memory_budget = s->budget_name;
    if (best.n_values) {
        size_t len = strlen(s->autoplan.chosen);
        snprintf(s->autoplan.chosen + len, sizeof s->autoplan.chosen - len, "+paging");
    }
    cand_free(&best);
    return RM_OK;
}
