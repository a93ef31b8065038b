/* graphsched.c: the model of graphplan.h, the schedule of a plan and its
 * liveness (the default evaluator): what both searches (graphplan.c for
 * small graphs, graphfast.c for large ones) price plans with. */
#include "plan/graphplan/graphplan.h"
#include <stdlib.h>
#include <string.h>

rm_status rm_gmodel_alloc(rm_gmodel *m, int n) {
    memset(m, 0, sizeof *m);
    size_t k = (size_t)(n > 0 ? n : 1);
    m->n = n;
    m->fwd = calloc(k, sizeof *m->fwd), m->bwd = calloc(k, sizeof *m->bwd);
    m->bytes = calloc(k, sizeof *m->bytes), m->grad = calloc(k, sizeof *m->grad);
    m->ws_f = calloc(k, sizeof *m->ws_f), m->ws_b = calloc(k, sizeof *m->ws_b);
    m->has_bwd = calloc(k, 1), m->reads_out = calloc(k, 1);
    m->off = calloc(k + 1, sizeof *m->off);
    if (!m->fwd || !m->bwd || !m->bytes || !m->grad || !m->ws_f || !m->ws_b || !m->has_bwd || !m->reads_out ||
        !m->off) {
        rm_gmodel_free(m);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

int rm_gmodel_top(const rm_gmodel *m, int v) {
    const int top = m->eager ? RM_GEACH : RM_GFEACH;
    return v >= 0 && m->most && m->most[v] < top ? m->most[v] : top;
}

void rm_gmodel_clamp(const rm_gmodel *m, char *mode) {
    for (int v = 0; v < m->n; v++) {
        int top = rm_gmodel_top(m, v);
        if (mode[v] > top) mode[v] = (char)top;
    }
}

rm_status rm_gmodel_edge(rm_gmodel *m, int src, int reads_in) { return rm_gmodel_edge_grad(m, src, reads_in, 1); }

rm_status rm_gmodel_edge_grad(rm_gmodel *m, int src, int reads_in, int makes_grad) {
    if (m->n_edges == m->cap_edges) {
        int nc = m->cap_edges ? m->cap_edges * 2 : 64;
        int *s = realloc(m->src, (size_t)nc * sizeof *s);
        if (!s) return RM_ERR_NOMEM;
        m->src = s;
        char *r = realloc(m->reads_in, (size_t)nc);
        if (!r) return RM_ERR_NOMEM;
        m->reads_in = r;
        char *g = realloc(m->no_grad, (size_t)nc);
        if (!g) return RM_ERR_NOMEM;
        m->no_grad = g;
        m->cap_edges = nc;
    }
    m->src[m->n_edges] = src;
    m->no_grad[m->n_edges] = (char)!makes_grad;
    m->reads_in[m->n_edges++] = (char)(reads_in != 0);
    return RM_OK;
}

void rm_gmodel_close_node(rm_gmodel *m, int i) { m->off[i + 1] = m->n_edges; }

void rm_gmodel_free(rm_gmodel *m) {
    free(m->fwd), free(m->bwd), free(m->bytes), free(m->grad), free(m->ws_f), free(m->ws_b);
    free(m->has_bwd), free(m->reads_out), free(m->off), free(m->src), free(m->reads_in), free(m->no_grad), free(m->most), free(m->hint);
    if (m->names)
        for (int i = 0; i < m->n; i++) free(m->names[i]);
    free(m->names);
    memset(m, 0, sizeof *m);
}

void rm_gplan_free(rm_gplan *p) {
    free(p->mode), free(p->block);
    memset(p, 0, sizeof *p);
}

/* ---- schedule ------------------------------------------------------------ */

/* The state of schedule generation: value v's current copy may be read
 * when ok[v] is ALWAYS or the current epoch (one forward node, or one
 * block of the backward); rec marks what is to be recomputed, listed in
 * marked[0 .. n_marked). */
enum { ALWAYS = -2, GONE = -1 };
typedef struct gen {
    const rm_gmodel *m;
    const char *mode;
    rm_gwork *w;
    int epoch, n_marked;
    rm_schedule *out;
} gen;

rm_status rm_gwork_alloc(rm_gwork *w, int n) {
    memset(w, 0, sizeof *w);
    size_t k = (size_t)n + 1;
    w->ok = malloc(k * sizeof *w->ok), w->marked = malloc(k * sizeof *w->marked);
    w->stack = malloc(k * sizeof *w->stack), w->rec = calloc(k, 1);
    if (!w->ok || !w->marked || !w->stack || !w->rec) {
        rm_gwork_free(w);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

void rm_gwork_free(rm_gwork *w) {
    free(w->ok), free(w->marked), free(w->stack), free(w->rec);
    memset(w, 0, sizeof *w);
}

static int usable(const gen *G, int v) { return G->w->ok[v] == ALWAYS || G->w->ok[v] == G->epoch; }

/* Marks v and, transitively, the inputs it needs rebuilt. */
static void need(gen *G, int v) {
    rm_gwork *w = G->w;
    int top = 0;
    if (usable(G, v) || w->rec[v]) return;
    w->rec[v] = 1, w->stack[top++] = v, w->marked[G->n_marked++] = v;
    while (top > 0) {
        int u = w->stack[--top];
        for (int e = G->m->off[u]; e < G->m->off[u + 1]; e++) {
            int p = G->m->src[e];
            if (!usable(G, p) && !w->rec[p]) w->rec[p] = 1, w->stack[top++] = p, w->marked[G->n_marked++] = p;
        }
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* RECOMPUTE items for the marked nodes, in topological order. ONCE copies
 * then serve every later reader, EACH and FEACH ones this epoch only. */
static rm_status emit_recomputes(gen *G) {
    rm_gwork *w = G->w;
    int *mk = w->marked, n = G->n_marked, lo = n ? mk[0] : 0, hi = lo;
    for (int k = 1; k < n; k++) lo = mk[k] < lo ? mk[k] : lo, hi = mk[k] > hi ? mk[k] : hi;
    if (n > 16 && hi - lo < 8 * n) /* dense: read them off the marks in order */
        for (int v = lo, k = 0; v <= hi; v++) mk[k] = v, k += w->rec[v];
    else if (n > 16) qsort(mk, (size_t)n, sizeof *mk, cmp_int);
    else /* a few: insertion sort */
        for (int i = 1; i < n; i++)
            for (int j = i, v = mk[i]; j > 0 && mk[j - 1] > v; j--) mk[j] = mk[j - 1], mk[j - 1] = v;
    if (w->max_items > 0 && G->out->n + n > w->max_items) { /* too long: leave the marks clean */
        for (int k = 0; k < n; k++) w->rec[mk[k]] = 0;
        G->n_marked = 0;
        return RM_ERR_BUDGET;
    }
    for (int k = 0; k < n; k++) {
        int v = mk[k];
        if (rm_schedule_push(G->out, RM_INSTR_RECOMPUTE, v) != RM_OK) return RM_ERR_NOMEM;
        w->rec[v] = 0;
        w->ok[v] = G->mode[v] >= RM_GEACH ? G->epoch : ALWAYS;
    }
    G->n_marked = 0;
    return RM_OK;
}

rm_status rm_gplan_schedule_with(const rm_gmodel *m, const char *mode, const int *block, rm_gwork *w,
                                 rm_schedule *out) {
    int n = m->n;
    gen G = {m, mode, w, 0, 0, out};
    int *ok = w->ok;
    rm_status rc = RM_OK;
    out->n = 0;
    /* the forward pass: a FEACH value is rebuilt before each reader after its first */
    for (int v = 0; v < n && rc == RM_OK; v++) {
        G.epoch = v;
        for (int e = m->off[v]; e < m->off[v + 1]; e++) need(&G, m->src[e]);
        rc = emit_recomputes(&G);
        if (rc == RM_OK) rc = rm_schedule_push(out, RM_INSTR_FORWARD, v);
        ok[v] = ALWAYS;
        for (int e = m->off[v]; e < m->off[v + 1]; e++)
            if (mode[m->src[e]] == RM_GFEACH) ok[m->src[e]] = GONE;
    }
    for (int v = 0; v < n; v++) ok[v] = mode[v] == RM_GKEEP ? ALWAYS : GONE;
    for (int hi = n - 1; hi >= 0 && rc == RM_OK;) {
        int lo = hi;
        while (lo > 0 && block[lo - 1] == block[hi]) lo--;
        G.epoch = n + hi; /* EACH: no copy carries over from another block */
        for (int i = lo; i <= hi; i++) {
            if (!m->has_bwd[i]) continue;
            for (int e = m->off[i]; e < m->off[i + 1]; e++)
                if (m->reads_in[e]) need(&G, m->src[e]);
            if (m->reads_out[i]) need(&G, i);
        }
        rc = emit_recomputes(&G);
        for (int i = hi; i >= lo && rc == RM_OK; i--)
            if (m->has_bwd[i]) rc = rm_schedule_push(out, RM_INSTR_BACKWARD, i);
        hi = lo - 1;
    }
    for (int k = 0; k < G.n_marked; k++) w->rec[w->marked[k]] = 0; /* left clean after an error */
    return rc;
}

rm_status rm_gplan_schedule(const rm_gmodel *m, const char *mode, const int *block, rm_schedule *out) {
    rm_gwork w;
    memset(out, 0, sizeof *out);
    rm_status rc = rm_gwork_alloc(&w, m->n);
    if (rc == RM_OK) rc = rm_gplan_schedule_with(m, mode, block, &w, out);
    rm_gwork_free(&w);
    if (rc != RM_OK) rm_schedule_free(out);
    return rc;
}

/* ---- the default evaluator: program/program.c's liveness ---------------------- */

void rm_gsim_free(rm_gsim *w) {
    free(w->born), free(w->last), free(w->gborn), free(w->glast), free(w->delta), free(w->dies), free(w->live);
    free(w->copy_last);
    memset(w, 0, sizeof *w);
}

/* Room for n nodes and T items. */
static rm_status gsim_reserve(rm_gsim *w, int n, int T) {
    if (n > w->cap_n) {
        size_t k = (size_t)n + 1;
        int *a = realloc(w->born, k * sizeof *a), *b = a ? realloc(w->last, k * sizeof *b) : NULL;
        if (a) w->born = a;
        if (b) w->last = b;
        int *c = b ? realloc(w->gborn, k * sizeof *c) : NULL, *d = c ? realloc(w->glast, k * sizeof *d) : NULL;
        if (c) w->gborn = c;
        if (d) w->glast = d;
        if (!d) return RM_ERR_NOMEM;
        w->cap_n = n;
    }
    if (T > w->cap_t) {
        size_t k = (size_t)T + T / 2 + 1;
        int64_t *a = realloc(w->delta, k * sizeof *a), *b = a ? realloc(w->dies, k * sizeof *b) : NULL;
        if (a) w->delta = a;
        if (b) w->dies = b;
        int64_t *c = b ? realloc(w->live, k * sizeof *c) : NULL;
        if (c) w->live = c;
        int *d = c ? realloc(w->copy_last, k * sizeof *d) : NULL;
        if (d) w->copy_last = d;
        if (!d) return RM_ERR_NOMEM;
        w->cap_t = (int)k - 1;
    }
    return RM_OK;
}

/* One lifetime [first, last] of `bytes`. */
static void span(rm_gsim *w, int first, int last, int64_t bytes) {
    w->delta[first] += bytes;
    w->dies[last] += bytes;
}

rm_status rm_gsim_run(const rm_gmodel *m, const rm_schedule *s, int64_t budget, rm_gsim *w,
                      rm_geval_result *r) {
    int n = m->n, T = s->n;
    memset(r, 0, sizeof *r);
    if (gsim_reserve(w, n, T) != RM_OK) return RM_ERR_NOMEM;
    int *born = w->born, *last = w->last, *gborn = w->gborn, *glast = w->glast;
    memset(w->delta, 0, sizeof *w->delta * ((size_t)T + 1)), memset(w->dies, 0, sizeof *w->dies * ((size_t)T + 1));
    for (int v = 0; v < n; v++) born[v] = gborn[v] = -1;
    for (int t = 0; t < T; t++) {
        int v = s->items[t].node;
        if (s->items[t].kind == RM_INSTR_PAGE_OUT) { /* the copy ends here: on disk until paged in */
            if (born[v] >= 0) {
                last[v] = t;
                span(w, born[v], t, m->bytes[v]);
                w->copy_last[born[v]] = t;
            }
            born[v] = -1;
            continue;
        }
        if (s->items[t].kind == RM_INSTR_PAGE_IN) { /* a new copy, read from the disk */
            born[v] = last[v] = t;
            continue;
        }
        if (s->items[t].kind != RM_INSTR_BACKWARD) {
            for (int e = m->off[v]; e < m->off[v + 1]; e++) last[m->src[e]] = t;
            if (born[v] >= 0) { /* the previous copy ends */
                span(w, born[v], last[v], m->bytes[v]);
                w->copy_last[born[v]] = last[v];
            }
            born[v] = last[v] = t;
            if (m->ws_f[v]) span(w, t, t, m->ws_f[v]);
            if (s->items[t].kind == RM_INSTR_RECOMPUTE) r->cost += m->fwd[v];
            continue;
        }
        for (int e = m->off[v]; e < m->off[v + 1]; e++) {
            int p = m->src[e];
            if (m->reads_in[e]) last[p] = t;
            if (m->grad[p] <= 0 || m->no_grad[e]) continue;
            if (gborn[p] < 0) gborn[p] = t; /* first writer creates the gradient */
            glast[p] = t;
        }
        if (m->reads_out[v]) last[v] = t;
        if (gborn[v] >= 0) glast[v] = t;
        if (m->ws_b[v]) span(w, t, t, m->ws_b[v]);
    }
    if (n > 0 && born[n - 1] >= 0) last[n - 1] = T - 1; /* the loss stays readable */
    for (int v = 0; v < n; v++) {
        if (born[v] >= 0) span(w, born[v], last[v], m->bytes[v]), w->copy_last[born[v]] = last[v];
        if (gborn[v] >= 0) span(w, gborn[v], glast[v], m->grad[v]);
    }
    int64_t live = 0;
    for (int t = 0; t < T; t++) {
        live += w->delta[t];
        w->live[t] = live;
        if (live > r->peak) r->peak = live;
        if (live > budget) r->excess += live - budget;
        live -= w->dies[t];
    }
    if (m->bw > 0) r->cost += rm_gmodel_waits(m, s);
    return RM_OK;
}

double rm_gmodel_waits(const rm_gmodel *m, const rm_schedule *s) {
    double c = 0, free_at = 0, waited = 0;
    double *ready = malloc((size_t)(m->n ? m->n : 1) * sizeof *ready); /* per node: when its read is done */
    if (!ready) return 0;
    for (int v = 0; v < m->n; v++) ready[v] = 0;
    for (int t = 0; t < s->n; t++) {
        const rm_sched_item *it = &s->items[t];
        const int v = it->node;
        if (it->kind == RM_INSTR_PAGE_OUT || it->kind == RM_INSTR_PAGE_IN) {
            double start = c > free_at ? c : free_at;
            free_at = start + m->io_latency + (double)m->bytes[v] / m->bw;
            if (it->kind == RM_INSTR_PAGE_IN) ready[v] = free_at;
            continue;
        }
        /* the item waits for the reads of what it reads */
        double at = c;
        for (int e = m->off[v]; e < m->off[v + 1]; e++)
            if ((it->kind != RM_INSTR_BACKWARD || m->reads_in[e]) && ready[m->src[e]] > at) at = ready[m->src[e]];
        if (it->kind == RM_INSTR_BACKWARD && m->reads_out[v] && ready[v] > at) at = ready[v];
        waited += at - c;
        c = at + (it->kind == RM_INSTR_BACKWARD ? m->bwd[v] : m->fwd[v]);
    }
    free(ready);
    return waited;
}

rm_status rm_gmodel_simulate(void *ctx, const rm_gmodel *m, const rm_schedule *s, int64_t budget,
                             rm_geval_result *r) {
    (void)ctx;
    rm_gsim w;
    memset(&w, 0, sizeof w);
    rm_status rc = rm_gsim_run(m, s, budget, &w, r);
    rm_gsim_free(&w);
    return rc;
}
