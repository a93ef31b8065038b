/* program.c: from a schedule (an ordered list of forward, recompute and
 * backward items) to the step program: instructions whose operands are
 * buffers, and the lifetime of every buffer.
 *
 * A buffer is one lifetime of one value. Reads refer to the value's most
 * recent buffer; a recompute defines a new buffer, so a value computed
 * twice has two lifetimes and the first ends at its last read before the
 * recompute. A buffer lives from the instruction that defines it to its
 * last reader, and is freed right after that. This is all the liveness
 * analysis there is: the strategy only chooses the order of items. */
#include "plan/plan.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_program_free(rm_program *p) {
    free(p->instrs);
    free(p->bufs);
    free(p->frees);
    free(p->final_buf);
    memset(p, 0, sizeof *p);
}

static size_t align_up(size_t n) { return (n + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN; }

static int new_buf(rm_program *p, int value, size_t bytes, int at) {
    if (p->n_bufs == p->cap_bufs) {
        int nc = p->cap_bufs ? p->cap_bufs * 2 : 256;
        void *q = realloc(p->bufs, (size_t)nc * sizeof *p->bufs);
        if (!q) return -1;
        p->bufs = q;
        p->cap_bufs = nc;
    }
    rm_buffer *b = &p->bufs[p->n_bufs];
    b->value = value;
    b->bytes = align_up(bytes);
    b->first = b->last = at;
    b->offset = 0;
    return p->n_bufs++;
}

#define FAIL(st, ...) do { snprintf(err, errlen, __VA_ARGS__); rc = (st); goto done; } while (0)

rm_status rm_program_build(const rm_graph *g, const rm_schedule *s, int threads, rm_program *p,
                           char *err, size_t errlen) {
    rm_status rc = RM_OK;
    memset(p, 0, sizeof *p);
    int *cur = malloc((size_t)g->n_vals * sizeof *cur); /* value -> current buffer */
    p->instrs = calloc((size_t)(s->n ? s->n : 1), sizeof *p->instrs);
    if (!cur || !p->instrs) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
    p->cap_instrs = s->n;
    for (int v = 0; v < g->n_vals; v++) cur[v] = -1;

    for (int k = 0; k < s->n; k++) {
        const rm_sched_item *it = &s->items[k];
        const rm_node *nd = &g->nodes[it->node];
        const rm_op_def *op = rm_op_get(nd->op);
        rm_instr *ins = &p->instrs[p->n_instrs];
        ins->kind = it->kind;
        ins->node = it->node;
        ins->work_buf = -1;
        for (int i = 0; i < RM_MAX_IN; i++) ins->in_buf[i] = ins->din_buf[i] = -1;
        for (int j = 0; j < RM_MAX_OUT; j++) ins->out_buf[j] = ins->dout_buf[j] = -1;
        int backward = it->kind == RM_INSTR_BACKWARD;

        /* reads of forward tensors: all inputs in forward, the declared ones in backward */
        for (int i = 0; i < nd->n_in; i++) {
            int v = nd->in[i];
            if (v < 0 || g->vals[v].kind != RM_VALUE_ACT) continue;
            if (backward && !(op->bwd_reads & RM_READS_IN(i))) continue;
            if (cur[v] < 0)
                FAIL(RM_ERR_STATE, "schedule error: %s of node %d reads '%s', which is not available there",
                     backward ? "backward" : "forward", it->node, g->vals[v].name);
            ins->in_buf[i] = cur[v];
            p->bufs[cur[v]].last = p->n_instrs;
        }
        if (backward) {
            for (int j = 0; j < nd->n_out; j++) {
                int v = nd->out[j];
                if (op->bwd_reads & RM_READS_OUT(j)) {
                    if (cur[v] < 0)
                        FAIL(RM_ERR_STATE, "schedule error: backward of node %d reads '%s', which is not available there",
                             it->node, g->vals[v].name);
                    ins->out_buf[j] = cur[v];
                    p->bufs[cur[v]].last = p->n_instrs;
                }
                int d = g->vals[v].grad;
                if (v == g->loss) {
                    ins->dout_buf[j] = -2; /* d(loss)/d(loss) = 1, held by the session */
                } else if (d >= 0) {
                    if (cur[d] < 0)
                        FAIL(RM_ERR_STATE, "schedule error: backward of node %d runs before the gradient of '%s' exists",
                             it->node, g->vals[v].name);
                    ins->dout_buf[j] = cur[d];
                    p->bufs[cur[d]].last = p->n_instrs;
                }
            }
            for (int i = 0; i < nd->n_in; i++) {
                int v = nd->in[i];
                if (v < 0) continue;
                if (g->vals[v].kind == RM_VALUE_PARAM) {
                    ins->acc[i] = 1; /* into the flat gradient buffer, zeroed per step */
                    continue;
                }
                int d = g->vals[v].grad;
                if (d < 0) continue;
                if (cur[d] >= 0) {
                    ins->din_buf[i] = cur[d];
                    ins->acc[i] = 1;
                    p->bufs[cur[d]].last = p->n_instrs;
                } else {
                    int b = new_buf(p, d, (size_t)g->vals[d].numel * 4, p->n_instrs);
                    if (b < 0) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
                    cur[d] = b;
                    ins->din_buf[i] = b;
                    ins->acc[i] = 0;
                }
            }
        } else {
            for (int j = 0; j < nd->n_out; j++) {
                int v = nd->out[j];
                int b = new_buf(p, v, (size_t)g->vals[v].numel * rm_dtype_size(g->vals[v].dtype), p->n_instrs);
                if (b < 0) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
                cur[v] = b;
                ins->out_buf[j] = b;
            }
        }
        size_t ws = op->workspace ? op->workspace(nd, g->vals, backward, threads) : 0;
        if (ws) {
            ins->work_buf = new_buf(p, -1, ws, p->n_instrs);
            if (ins->work_buf < 0) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
        }
        p->n_instrs++;
    }
    /* outputs (the loss among them) stay readable after the step */
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].is_output && cur[v] >= 0) p->bufs[cur[v]].last = p->n_instrs - 1;

    /* frees: each buffer after its last use; and the planned peak */
    p->frees = malloc((size_t)(p->n_bufs ? p->n_bufs : 1) * sizeof *p->frees);
    if (!p->frees) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
    int *count = calloc((size_t)p->n_instrs + 1, sizeof *count);
    if (!count) FAIL(RM_ERR_NOMEM, "out of memory building the step program");
    for (int b = 0; b < p->n_bufs; b++) count[p->bufs[b].last]++;
    int at = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        p->instrs[i].free_at = at;
        p->instrs[i].n_free = 0;
        at += count[i];
    }
    free(count);
    for (int b = 0; b < p->n_bufs; b++) {
        rm_instr *ins = &p->instrs[p->bufs[b].last];
        p->frees[ins->free_at + ins->n_free++] = b;
    }
    p->n_frees = p->n_bufs;
    size_t live = 0, peak = 0;
    int bi = 0; /* buffers are created in order of `first` */
    for (int i = 0; i < p->n_instrs; i++) {
        while (bi < p->n_bufs && p->bufs[bi].first == i) live += p->bufs[bi++].bytes;
        if (live > peak) peak = live;
        const rm_instr *ins = &p->instrs[i];
        for (int f = 0; f < ins->n_free; f++) live -= p->bufs[p->frees[ins->free_at + f]].bytes;
    }
    p->peak_live_bytes = peak;
done:
    if (rc == RM_OK) {
        p->final_buf = cur;
        cur = NULL;
    }
    free(cur);
    if (rc != RM_OK) rm_program_free(p);
    return rc;
}

double rm_recompute_cost(const rm_graph *g, const rm_program *p, const rm_profile *prof) {
    double cost = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        if (p->instrs[i].kind != RM_INSTR_RECOMPUTE) continue;
        const rm_node *nd = &g->nodes[p->instrs[i].node];
        const rm_op_def *op = rm_op_get(nd->op);
        cost += prof ? rm_profile_recompute_ms(prof, p->instrs[i].node) : op->flops ? op->flops(nd, g->vals, 0) : 0;
    }
    return cost;
}
