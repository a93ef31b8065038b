/* paging.c: the third choice beside keep and recompute (issue 20): page a
 * value out to the scratch file after its last reader before a long idle
 * gap (in practice: after the forward pass is done with it) and read it
 * back ahead of its first reader after the gap (its first backward use);
 * and page the training state (AdamW's moments, parameters) through the
 * fused optimizer's updates in the order the backward finishes them.
 *
 * The pass takes any schedule (a strategy's, a budget plan's, a graph
 * plan's) and what to page, and inserts paging items: PAGE_OUT, PAGE_IN,
 * WAIT and UPDATE. It only decides where they go; the program gives the
 * buffers their lifetimes (a page-out's buffer lives until its wait, a
 * page-in defines a new buffer), the memory layout places them in the
 * arena, and the executor moves the bytes on the I/O thread.
 *
 * Where they go comes from a timeline of the step: the compute items one
 * after another (item_ms), the transfers one after another on the I/O
 * thread, first in first out, at the scratch file's bandwidth. A write is
 * waited for where the timeline says it is done (its buffer lives until
 * then); a read is issued early enough to be done when its reader comes,
 * moved earlier while the timeline says its reader would wait, but never
 * before the value's own write is waited for. Earlier reads hide more I/O
 * and hold their buffers longer: the planner (paging is priced by
 * rm_page_predict) weighs that against recomputation. */
#include "plan/paging/paging.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Positions: an inserted item goes before item `pos` (phases WAIT_W,
 * READ, WAIT_R) or after it (phases AFTER: updates and page-outs), in
 * this order; pos == n is the end of the step. */
enum { PH_WAIT_W = 0, PH_READ, PH_WAIT_R, PH_AFTER };

typedef struct op {
    int pos, phase, seq;
    rm_instr_kind kind;
    int unit;
    /* transfers: bytes and direction; a read's reader (`need`, the item it
     * must be done before) and earliest place; a write's wait (an index
     * into the op array) */
    size_t bytes;
    int write, need, lower, wait;
    int need_after; /* the read is needed after item `need` (a state unit's update), not before it */
} op;

typedef struct pager {
    const rm_graph *g;
    const rm_schedule *in;
    const rm_page_opts *o;
    op *ops;
    int n_ops, cap_ops;
    rm_page_unit *units;
    int n_units, cap_units;
    double *t; /* t[k]: when item k starts; t[n]: the step's end */
    uint64_t *param_off, *moment_off; /* the state's layout in the file, per parameter */
    int64_t *staged; /* per position: bytes read ahead or not yet waited for (max_staged) */
} pager;

static int push_op(pager *P, op x) {
    if (P->n_ops == P->cap_ops) {
        int nc = P->cap_ops ? 2 * P->cap_ops : 256;
        void *q = realloc(P->ops, (size_t)nc * sizeof *P->ops);
        if (!q) return -1;
        P->ops = q, P->cap_ops = nc;
    }
    x.seq = P->n_ops;
    P->ops[P->n_ops] = x;
    return P->n_ops++;
}

static int push_unit(pager *P, rm_page_unit u) {
    if (P->n_units == P->cap_units) {
        int nc = P->cap_units ? 2 * P->cap_units : 64;
        void *q = realloc(P->units, (size_t)nc * sizeof *P->units);
        if (!q) return -1;
        P->units = q, P->cap_units = nc;
    }
    P->units[P->n_units] = u;
    return P->n_units++;
}

/* One computation of an activation: where it was defined, its last use so
 * far and the longest gap between two of its uses. */
typedef struct copy { int value, last, gap_a, gap_b; } copy;

/* Whether item it reads value v (as the program's liveness has it). */
static void for_each_read(const rm_graph *g, const rm_sched_item *it, void (*f)(void *, int), void *ctx) {
    if (!rm_instr_runs_node(it->kind)) return; /* an update of paged state */
    const rm_node *nd = &g->nodes[it->node];
    const int backward = it->kind == RM_INSTR_BACKWARD;
    const unsigned reads = backward ? rm_node_bwd_reads(nd, g->vals) : 0;
    for (int i = 0; i < nd->n_in; i++) {
        int v = nd->in[i];
        if (v < 0 || g->vals[v].kind != RM_VALUE_ACT || (backward && !(reads & RM_READS_IN(i)))) continue;
        f(ctx, v);
    }
    for (int j = 0; backward && j < nd->n_out; j++)
        if (reads & RM_READS_OUT(j)) f(ctx, nd->out[j]);
}

typedef struct scan { copy *c; int *cur; int at; } scan;

static void note_use(void *ctx, int v) {
    scan *S = ctx;
    if (S->cur[v] < 0) return;
    copy *c = &S->c[S->cur[v]];
    if (S->at - c->last > c->gap_b - c->gap_a) c->gap_a = c->last, c->gap_b = S->at;
    c->last = S->at;
}

/* The activations' units: each computation of a wanted value with an idle
 * gap of at least one item is paged out after the gap's first use and in
 * before its last. */
static rm_status value_units(pager *P) {
    const rm_graph *g = P->g;
    const rm_schedule *s = P->in;
    int n_copies = 0;
    for (int k = 0; k < s->n; k++)
        if (s->items[k].kind == RM_INSTR_FORWARD || s->items[k].kind == RM_INSTR_RECOMPUTE)
            n_copies += g->nodes[s->items[k].node].n_out;
    copy *c = malloc((size_t)(n_copies ? n_copies : 1) * sizeof *c);
    int *cur = malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof *cur);
    if (!c || !cur) {
        free(c), free(cur);
        return RM_ERR_NOMEM;
    }
    for (int v = 0; v < g->n_vals; v++) cur[v] = -1;
    scan S = {c, cur, 0};
    int nc = 0;
    for (int k = 0; k < s->n; k++) {
        S.at = k;
        for_each_read(g, &s->items[k], note_use, &S);
        if (s->items[k].kind != RM_INSTR_FORWARD && s->items[k].kind != RM_INSTR_RECOMPUTE) continue;
        const rm_node *nd = &g->nodes[s->items[k].node];
        for (int j = 0; j < nd->n_out; j++) {
            c[nc] = (copy){nd->out[j], k, k, k};
            cur[nd->out[j]] = nc++;
        }
    }
    rm_status rc = RM_OK;
    for (int i = 0; i < nc && rc == RM_OK; i++) {
        const rm_value *v = &g->vals[c[i].value];
        if (!P->o->values[c[i].value] || v->is_output || c[i].gap_b - c[i].gap_a < 2) continue;
        size_t bytes = rm_page_round((size_t)v->numel * rm_dtype_size(v->dtype));
        int u = push_unit(P, (rm_page_unit){RM_UNIT_VALUE, c[i].value, -1, 0, 0, bytes, 0});
        int w = u < 0 ? -1 : push_op(P, (op){c[i].gap_a, PH_AFTER, 0, RM_INSTR_PAGE_OUT, u, bytes, 1, -1, -1, -1, 0});
        int ww = w < 0 ? -1 : push_op(P, (op){c[i].gap_a + 1, PH_WAIT_W, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0});
        int r = ww < 0 ? -1 : push_op(P, (op){c[i].gap_b, PH_READ, 0, RM_INSTR_PAGE_IN, u, bytes, 0, c[i].gap_b,
                                              c[i].gap_a + 1, -1, 0});
        if (r < 0 || push_op(P, (op){c[i].gap_b, PH_WAIT_R, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0}) < 0) {
            rc = RM_ERR_NOMEM;
            break;
        }
        P->ops[w].wait = ww;
    }
    free(c), free(cur);
    return rc;
}

/* The items that read parameter value v, in order (count in *n). */
static int *param_readers(const rm_graph *g, const rm_schedule *s, int v, int *n) {
    *n = 0;
    int *r = malloc((size_t)(s->n ? s->n : 1) * sizeof *r);
    for (int k = 0; r && k < s->n; k++) {
        if (!rm_instr_runs_node(s->items[k].kind)) continue;
        const rm_node *nd = &g->nodes[s->items[k].node];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] == v) {
                r[(*n)++] = k;
                break;
            }
    }
    return r;
}

/* A parameter staged whole: read before its first reader, and again before
 * the first reader after its longest idle gap (the first staged copy dies
 * at the last reader before it: the file still holds those bytes). */
static rm_status param_unit_ops(pager *P, int u, const int *rd, int nr) {
    const size_t bytes = P->units[u].bytes;
    int ga = 0;
    for (int i = 1; i < nr; i++)
        if (rd[i] - rd[i - 1] > rd[ga + 1] - rd[ga]) ga = i - 1;
    const int two = nr > 1 && rd[ga + 1] - rd[ga] >= 2;
    for (int k = 0; k < 1 + two; k++) {
        int need = k ? rd[ga + 1] : rd[0], lower = k ? rd[ga] + 1 : 0;
        if (push_op(P, (op){need, PH_READ, 0, RM_INSTR_PAGE_IN, u, bytes, 0, need, lower, -1, 0}) < 0 ||
            push_op(P, (op){need, PH_WAIT_R, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0}) < 0)
            return RM_ERR_NOMEM;
    }
    return RM_OK;
}

/* Floats of a moments unit: whole 4096-float blocks (the optimizer's norm
 * blocks), m and v together at most chunk_bytes. */
static int64_t chunk_floats(const rm_page_opts *o) {
    int64_t per = (int64_t)(o->chunk_bytes / 8 / 4096 * 4096);
    return per < 4096 ? 4096 : per;
}

/* AdamW's update time per float, ms, when none is measured: ~3 ns (w, g,
 * m and v at a few GB/s); exec/page.c measures it (0.5-0.7 ns here). */
#define UPDATE_MS_PER_FLOAT 3e-6

static double update_ms(double measured) { return measured > 0 ? measured : UPDATE_MS_PER_FLOAT; }
/* What one transfer costs beyond its bytes, ms: the I/O thread waking, the
 * system call, the disk's latency (~0.15 ms measured with O_DIRECT here). */
#define TRANSFER_MS 0.15

/* Parameter pi's paged state, first part: its units (the parameter when it
 * is paged; its moments in chunks), each chunk's update placed right after
 * the parameter's last reader in the original schedule (fin[u], by unit).
 * Returns RM_OK with no unit when nothing reads it (its zero-gradient
 * update at the end of the step keeps its state resident). */
static rm_status state_units(pager *P, int pi, int *fin) {
    const rm_graph *g = P->g;
    const int v = g->params[pi];
    const rm_value *val = &g->vals[v];
    int nr = 0;
    int *rd = param_readers(g, P->in, v, &nr);
    if (!rd) return RM_ERR_NOMEM;
    rm_status rc = RM_OK;
    const int last = nr ? rd[nr - 1] : -1;
    free(rd);
    if (nr == 0) return RM_OK;
    if (P->o->params && P->o->params[pi]) {
        size_t bytes = rm_page_round((size_t)val->numel * sizeof(float));
        int u = push_unit(P, (rm_page_unit){RM_UNIT_PARAM, v, pi, 0, val->numel, bytes, P->param_off[pi]});
        if (u < 0) return RM_ERR_NOMEM;
        fin[u] = last;
    }
    if (P->o->forward_only || !val->trainable) return RM_OK; /* frozen: no moments */
    const int64_t per = chunk_floats(P->o);
    uint64_t moff = 0;
    for (int64_t lo = 0; lo < val->numel && rc == RM_OK; lo += per) {
        int64_t hi = lo + per < val->numel ? lo + per : val->numel;
        size_t bytes = 2 * rm_page_round((size_t)(hi - lo) * sizeof(float));
        int u = push_unit(P, (rm_page_unit){RM_UNIT_MOMENTS, v, pi, lo, hi, bytes, P->moment_off[pi] + moff});
        if (u < 0) return RM_ERR_NOMEM;
        fin[u] = last;
        moff += bytes;
    }
    return rc;
}

/* The schedule the transfers are placed on: the original items with an
 * UPDATE item for each chunk of moments right after its parameter's last
 * reader (chunks in order), and their times: the timeline then sees the
 * updates take time, and a parameter's chunks stream one after another
 * (read ahead, updated, written) instead of being staged all at once. */
static rm_status extend(pager *P, const int *fin, rm_schedule *ext, double *t, int *at) {
    const rm_schedule *in = P->in;
    memset(ext, 0, sizeof *ext);
    int u = 0;
    t[0] = 0;
    for (int k = 0; k < in->n; k++) {
        if (rm_schedule_push(ext, in->items[k].kind, in->items[k].node) != RM_OK) return RM_ERR_NOMEM;
        t[ext->n] = t[ext->n - 1] + (P->o->item_ms ? P->o->item_ms[k] : 1.0);
        for (u = 0; u < P->n_units; u++) {
            const rm_page_unit *un = &P->units[u];
            if (un->kind != RM_UNIT_MOMENTS || fin[u] != k) continue;
            at[u] = ext->n;
            if (rm_schedule_push(ext, RM_INSTR_UPDATE, u) != RM_OK) return RM_ERR_NOMEM;
            t[ext->n] = t[ext->n - 1] + (double)(un->hi - un->lo) * update_ms(P->o->update_ms_per_float);
        }
    }
    return RM_OK;
}

/* The transfers of the state units, on the extended schedule: a chunk of
 * moments read ahead of its update, written after it; a paged parameter
 * read before its first reader and again before the first reader after its
 * longest idle gap, written after its last chunk's update (a frozen one is
 * never written: the file keeps its bytes). */
static rm_status state_ops(pager *P, const int *at) {
    const rm_graph *g = P->g;
    int last_update = -1, w;
    for (int u = 0; u < P->n_units; u++) {
        const rm_page_unit *un = &P->units[u];
        if (un->kind == RM_UNIT_MOMENTS) {
            const int p = at[u];
            last_update = p;
            if (push_op(P, (op){p, PH_READ, 0, RM_INSTR_PAGE_IN, u, un->bytes, 0, p, 0, -1, 0}) < 0 ||
                push_op(P, (op){p, PH_WAIT_R, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0}) < 0 ||
                (w = push_op(P, (op){p, PH_AFTER, 0, RM_INSTR_PAGE_OUT, u, un->bytes, 1, -1, -1, -1, 0})) < 0 ||
                (P->ops[w].wait = push_op(P, (op){p + 1, PH_WAIT_W, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0})) < 0)
                return RM_ERR_NOMEM;
        }
        /* a paged parameter: its ops once its chunks are known (they follow it) */
        int next = u + 1;
        while (next < P->n_units && P->units[next].kind == RM_UNIT_MOMENTS && P->units[next].param == un->param) next++;
        if (un->kind != RM_UNIT_PARAM) continue;
        int nr = 0;
        int *rd = param_readers(g, P->in, un->value, &nr);
        rm_status rc = rd && nr ? param_unit_ops(P, u, rd, nr) : rd ? RM_OK : RM_ERR_NOMEM;
        int after = nr ? rd[nr - 1] : 0;
        free(rd);
        if (rc != RM_OK) return rc;
        if (next > u + 1) after = at[next - 1]; /* after its last chunk's update */
        if (P->o->forward_only || g->vals[un->value].frozen) continue; /* frozen: the file keeps its bytes */
        if ((w = push_op(P, (op){after, PH_AFTER, 0, RM_INSTR_PAGE_OUT, u, un->bytes, 1, -1, -1, -1, 0})) < 0 ||
            (P->ops[w].wait = push_op(P, (op){after + 1, PH_WAIT_W, 0, RM_INSTR_WAIT, u, 0, 0, -1, -1, -1, 0})) < 0)
            return RM_ERR_NOMEM;
    }
    (void)last_update;
    return RM_OK;
}

/* The state's layout in the file: per parameter in order, the parameter
 * (when paged), then its moments' chunks (when they are paged, as they are
 * with the parameter), whether or not this program moves them, so every
 * program of a session finds the state in the same places. */
static uint64_t state_layout(pager *P) {
    const rm_graph *g = P->g;
    const rm_page_opts *o = P->o;
    uint64_t off = 0;
    int64_t per = chunk_floats(o);
    for (int pi = 0; pi < g->n_params; pi++) {
        const rm_value *v = &g->vals[g->params[pi]];
        const int pp = o->params && o->params[pi] && (v->trainable || v->frozen);
        const int pm = v->trainable && (pp || (o->moments && o->moments[pi]));
        P->param_off[pi] = off;
        if (pp) off += rm_page_round((size_t)v->numel * sizeof(float));
        P->moment_off[pi] = off;
        for (int64_t lo = 0; pm && lo < v->numel; lo += per) {
            int64_t hi = lo + per < v->numel ? lo + per : v->numel;
            off += 2 * rm_page_round((size_t)(hi - lo) * sizeof(float));
        }
    }
    return off;
}

static int by_place(const void *a, const void *b) {
    const op *x = a, *y = b;
    if (x->pos != y->pos) return x->pos - y->pos;
    if (x->phase != y->phase) return x->phase - y->phase;
    return x->seq - y->seq;
}

/* The last position at or after `lower` and at or before `need` whose
 * start is at or before time `at`. */
static int position_before(const pager *P, int lower, int need, double at) {
    int k = need;
    while (k > lower && P->t[k] > at) k--;
    return k;
}

/* The positions a transfer's buffer is staged over: a read from its issue
 * to its reader, a write from its issue to its wait. */
static void staged_span(const pager *P, const op *x, int *a, int *b) {
    if (x->kind == RM_INSTR_PAGE_IN) *a = x->pos, *b = x->need + (x->need_after || P->units[x->unit].kind == RM_UNIT_MOMENTS);
    else *a = x->pos + 1, *b = x->wait >= 0 ? P->ops[x->wait].pos : x->pos + 1;
}

static void stage(pager *P, const op *x, int sign) {
    if (!P->staged || (x->kind != RM_INSTR_PAGE_IN && x->kind != RM_INSTR_PAGE_OUT)) return;
    int a, b;
    staged_span(P, x, &a, &b);
    for (int k = a; k < b && k <= P->in->n; k++) P->staged[k] += sign * (int64_t)x->bytes;
}

/* How far from `from` towards `to` (step -1: earlier, +1: later) a span
 * of `bytes` may grow within the cap: the last position reached. */
static int within_cap(const pager *P, int from, int to, int step, size_t bytes) {
    if (!P->staged) return to;
    int k = from;
    while (k != to) {
        int next = k + step, at = step < 0 ? next : k;
        if (at < 0 || at > P->in->n || P->staged[at] + (int64_t)bytes > (int64_t)P->o->max_staged) break;
        k = next;
    }
    return k;
}

/* The step as it would run: the items in order on the compute clock, each
 * transfer starting when it is issued and the channel (one FIFO, the I/O
 * thread) is free, each wait holding the compute clock until its transfer
 * is done. Fills done[op] (when each transfer ends), late[op] (how long the
 * compute waited at each read's wait) and A[k] (when position k starts);
 * returns the total wait. idx: the ops in program order. */
static double simulate(pager *P, const int *idx, double *done, double *late, double *A, int *inflight) {
    const rm_page_opts *o = P->o;
    const int n = P->in->n;
    double c = 0, free_at = 0, waited = 0;
    int j = 0;
    for (int u = 0; u < P->n_units; u++) inflight[u] = -1;
    for (int k = 0; k <= n; k++) {
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1) { /* the item itself */
                if (k == n) break;
                A[k] = c;
                c += P->t[k + 1] - P->t[k];
            } else if (k == n) {
                A[n] = c;
            }
            for (; j < P->n_ops; j++) {
                const int i = idx[j];
                op *x = &P->ops[i];
                if (x->pos != k || (pass == 0) != (x->phase < PH_AFTER)) break;
                if (x->kind == RM_INSTR_PAGE_IN || x->kind == RM_INSTR_PAGE_OUT) {
                    double start = c > free_at ? c : free_at;
                    free_at = start + TRANSFER_MS + (double)x->bytes / (x->write ? o->write_bps : o->read_bps) * 1e3;
                    done[i] = free_at, late[i] = 0;
                    inflight[x->unit] = i;
                } else if (x->kind == RM_INSTR_WAIT && inflight[x->unit] >= 0) {
                    const int t = inflight[x->unit];
                    if (done[t] > c) {
                        if (!P->ops[t].write) late[t] = done[t] - c;
                        waited += done[t] - c;
                        c = done[t];
                    }
                    inflight[x->unit] = -1;
                }
            }
        }
    }
    return waited;
}

/* The first position at or after `from` that starts at or after time `at`
 * on the simulated clock A (n: the end). */
static int position_at_actual(const pager *P, const double *A, int from, double at) {
    for (int k = from; k < P->in->n; k++)
        if (A[k] >= at) return k;
    return P->in->n;
}

/* Placement: reads start just early enough on an idle channel; then, while
 * the simulated step waits for a read, that read moves earlier by the wait
 * (within the staging cap and never before its lower bound), and each write
 * is waited for where the simulation has it done. Returns the predicted
 * wait of the step; *end gets the predicted step (compute and waits). */
static double place(pager *P, double *end) {
    const rm_page_opts *o = P->o;
    double stall = 0;
    const size_t no = (size_t)(P->n_ops ? P->n_ops : 1);
    int *idx = malloc(no * sizeof *idx), *inflight = malloc((size_t)(P->n_units ? P->n_units : 1) * sizeof *inflight);
    double *done = malloc(no * sizeof *done), *late = malloc(no * sizeof *late);
    double *A = malloc(((size_t)P->in->n + 1) * sizeof *A);
    *end = P->t[P->in->n];
    if (!idx || !done || !late || !A || !inflight) {
        free(idx), free(done), free(late), free(A), free(inflight);
        return 0;
    }
    for (int i = 0; i < P->n_ops; i++) {
        op *x = &P->ops[i];
        if (x->kind != RM_INSTR_PAGE_IN) continue;
        double need_t = x->need_after ? P->t[x->need + 1] : P->t[x->need];
        x->pos = position_before(P, x->lower, x->need, need_t - (double)x->bytes / o->read_bps * 1e3);
    }
    for (int i = 0; i < P->n_ops; i++) stage(P, &P->ops[i], 1);
    for (int i = 0; i < P->n_ops; i++) idx[i] = i;
    for (int iter = 0; iter < 16; iter++) {
        for (int i = 1; i < P->n_ops; i++) { /* program order (insertion sort: nearly sorted) */
            int j = i, x = idx[i];
            while (j > 0 && by_place(&P->ops[idx[j - 1]], &P->ops[x]) > 0) idx[j] = idx[j - 1], j--;
            idx[j] = x;
        }
        stall = simulate(P, idx, done, late, A, inflight);
        int moved = 0;
        for (int i = 0; i < P->n_ops; i++) {
            op *x = &P->ops[i];
            if (x->kind == RM_INSTR_PAGE_IN && late[i] > 1e-9) {
                int k = x->pos;
                while (k > x->lower && A[k] > A[x->pos] - late[i]) k--;
                k = within_cap(P, x->pos, k, -1, x->bytes);
                if (k < x->pos) {
                    stage(P, x, -1);
                    x->pos = k, moved = 1;
                    stage(P, x, 1);
                }
            } else if (x->kind == RM_INSTR_PAGE_OUT && x->wait >= 0) {
                op *w = &P->ops[x->wait];
                int want = position_at_actual(P, A, x->pos + 1, done[i]);
                stage(P, x, -1);
                int pos = want <= w->pos ? want : within_cap(P, w->pos, want, 1, x->bytes);
                if (pos != w->pos) w->pos = pos, moved = 1;
                stage(P, x, 1);
            }
        }
        if (!moved) break;
    }
    /* a value's write is waited for by the time its read is issued */
    for (int i = 0; i < P->n_ops; i++) {
        op *x = &P->ops[i];
        if (x->kind != RM_INSTR_PAGE_OUT || x->wait < 0 || P->units[x->unit].kind != RM_UNIT_VALUE) continue;
        for (int j = 0; j < P->n_ops; j++)
            if (P->ops[j].kind == RM_INSTR_PAGE_IN && P->ops[j].unit == x->unit && P->ops[x->wait].pos > P->ops[j].pos)
                P->ops[x->wait].pos = P->ops[j].pos;
    }
    /* the prediction of the placement as emitted */
    for (int i = 1; i < P->n_ops; i++) {
        int j = i, x = idx[i];
        while (j > 0 && by_place(&P->ops[idx[j - 1]], &P->ops[x]) > 0) idx[j] = idx[j - 1], j--;
        idx[j] = x;
    }
    stall = simulate(P, idx, done, late, A, inflight);
    *end = A[P->in->n];
    free(idx), free(done), free(late), free(A), free(inflight);
    return stall;
}

/* The schedule with the paging ops merged in. */
static rm_status emit(pager *P, rm_schedule *out) {
    if (P->n_ops) qsort(P->ops, (size_t)P->n_ops, sizeof *P->ops, by_place);
    const rm_schedule *s = P->in;
    int j = 0;
    for (int k = 0; k <= s->n; k++) {
        for (; j < P->n_ops && P->ops[j].pos == k && P->ops[j].phase < PH_AFTER; j++)
            if (rm_schedule_push(out, P->ops[j].kind, P->ops[j].unit) != RM_OK) return RM_ERR_NOMEM;
        if (k == s->n) break;
        if (rm_schedule_push(out, s->items[k].kind, s->items[k].node) != RM_OK) return RM_ERR_NOMEM;
        for (; j < P->n_ops && P->ops[j].pos == k && P->ops[j].phase == PH_AFTER; j++)
            if (rm_schedule_push(out, P->ops[j].kind, P->ops[j].unit) != RM_OK) return RM_ERR_NOMEM;
    }
    return RM_OK;
}

rm_status rm_schedule_page(const rm_graph *g, const rm_schedule *in, const rm_page_opts *o, rm_schedule *out,
                           double *stall_ms, double *step_ms, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (stall_ms) *stall_ms = 0;
    if (step_ms) *step_ms = 0;
    const size_t np = (size_t)(g->n_params ? g->n_params : 1);
    pager P = {g, in, o, NULL, 0, 0, NULL, 0, 0, NULL, malloc(np * sizeof(uint64_t)), malloc(np * sizeof(uint64_t)),
               NULL};
    rm_schedule ext = {0};
    int *fin = NULL, *at = NULL;
    rm_status rc = P.param_off && P.moment_off ? RM_OK : RM_ERR_NOMEM;
    uint64_t state = rc == RM_OK ? state_layout(&P) : 0;
    /* the state's units, then the schedule with their updates, then every transfer on it */
    for (int pi = 0; rc == RM_OK && pi < g->n_params; pi++) {
        const rm_value *pv = &g->vals[g->params[pi]];
        const int pp = o->params && o->params[pi];
        /* a frozen parameter is only read: paged with any optimizer; a
         * trainable one's state through the fused updates */
        if (pv->frozen ? !pp
                       : !pv->trainable || !(g->fuse_grads || o->forward_only) ||
                             !((!o->forward_only && o->moments && o->moments[pi]) || pp))
            continue;
        size_t more = (size_t)(g->vals[g->params[pi]].numel / chunk_floats(o)) + 2;
        int *f = realloc(fin, ((size_t)P.n_units + more) * sizeof *fin);
        if (!f) rc = RM_ERR_NOMEM;
        else fin = f, rc = state_units(&P, pi, fin);
    }
    int n_updates = 0;
    for (int u = 0; u < P.n_units; u++) n_updates += P.units[u].kind == RM_UNIT_MOMENTS;
    P.t = malloc(((size_t)in->n + (size_t)n_updates + 1) * sizeof(double));
    at = malloc((size_t)(P.n_units ? P.n_units : 1) * sizeof *at);
    if (rc == RM_OK && (!P.t || !at)) rc = RM_ERR_NOMEM;
    if (rc == RM_OK) rc = extend(&P, fin, &ext, P.t, at);
    if (rc == RM_OK) {
        P.in = &ext;
        if (o->max_staged && !(P.staged = calloc((size_t)ext.n + 1, sizeof(int64_t)))) rc = RM_ERR_NOMEM;
    }
    if (rc == RM_OK && o->values) rc = value_units(&P);
    if (rc == RM_OK) rc = state_ops(&P, at);
    if (rc == RM_OK) {
        double end = 0, stall = place(&P, &end);
        if (stall_ms) *stall_ms = stall;
        if (step_ms) *step_ms = end;
        rc = emit(&P, out);
    }
    if (rc == RM_OK) {
        out->units = P.units, out->n_units = P.n_units, out->state_bytes = state;
        P.units = NULL;
    } else {
        rm_schedule_free(out);
        snprintf(err, errlen, "out of memory planning the paging");
    }
    rm_schedule_free(&ext);
    free(fin), free(at);
    free(P.ops), free(P.units), free(P.t), free(P.staged), free(P.param_off), free(P.moment_off);
    return rc;
}

void rm_schedule_item_ms(const rm_graph *g, const rm_schedule *s, const rm_profile *prof, double flops_per_ms,
                         double update_ms_per_float, const char *paged, double *out) {
    double *stage_flops = calloc((size_t)(g->n_stages ? g->n_stages : 1), sizeof *stage_flops);
    for (int n = 0; stage_flops && n < g->n_nodes; n++) {
        const rm_op_def *op = rm_op_get(g->nodes[n].op);
        if (g->nodes[n].needs_grad && op->flops) stage_flops[g->nodes[n].stage] += op->flops(&g->nodes[n], g->vals, 1);
    }
    for (int k = 0; k < s->n; k++) {
        const rm_sched_item *it = &s->items[k];
        out[k] = 0;
        if (!rm_instr_runs_node(it->kind)) continue;
        const rm_node *nd = &g->nodes[it->node];
        const rm_op_def *op = rm_op_get(nd->op);
        const int bwd = it->kind == RM_INSTR_BACKWARD;
        double f = op->flops ? op->flops(nd, g->vals, bwd) : 0;
        if (prof && !bwd && prof->node_fwd[it->node] > 0)
            out[k] = it->kind == RM_INSTR_RECOMPUTE ? rm_profile_recompute_ms(prof, it->node) : prof->node_fwd[it->node];
        else if (prof && bwd && stage_flops && stage_flops[nd->stage] > 0 && prof->stage_bwd[nd->stage] > 0)
            out[k] = prof->stage_bwd[nd->stage] * f / stage_flops[nd->stage];
        else
            out[k] = f / (flops_per_ms > 0 ? flops_per_ms : 1e7);
    }
    free(stage_flops);
    /* fused: the updates of the parameters an item makes final run right
     * after it (paged ones are UPDATE items of their own) */
    int *last = g->fuse_grads ? malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof *last) : NULL;
    if (!last) return;
    for (int v = 0; v < g->n_vals; v++) last[v] = -1;
    for (int k = 0; k < s->n; k++) {
        if (!rm_instr_runs_node(s->items[k].kind)) continue;
        const rm_node *nd = &g->nodes[s->items[k].node];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && g->vals[nd->in[i]].kind == RM_VALUE_PARAM) last[nd->in[i]] = k;
    }
    for (int pi = 0; pi < g->n_params; pi++) {
        const int v = g->params[pi];
        if (last[v] >= 0 && g->vals[v].trainable && !(paged && paged[pi]))
            out[last[v]] += (double)g->vals[v].numel * update_ms(update_ms_per_float);
    }
    free(last);
}
