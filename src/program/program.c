/* program.c: from a schedule (an ordered list of forward, recompute and
 * backward items) to the step program: instructions whose operands are
 * buffers, and the lifetime of every buffer.
 *
 * A buffer is one lifetime of one value. Reads refer to the value's most
 * recent buffer; a recompute defines a new buffer, so a value computed
 * twice has two lifetimes and the first ends at its last read before the
 * recompute. A buffer lives from the instruction that defines it to its
 * last reader, and is freed right after that. This is all the liveness
 * analysis there is: the strategy only chooses the order of items.
 *
 * Parameters: the instruction after which each is final (nothing reads it
 * or writes its gradient any more) is known here too. Under a fused
 * optimizer (g->fuse_grads) a trainable parameter's gradient is a buffer
 * like any other: defined by its first backward writer (which overwrites;
 * later ones add) and live until that final instruction, after which the
 * session updates the parameter and the buffer is freed. */
#include "program/program.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_program_free(rm_program *p) {
    free(p->instrs);
    free(p->bufs);
    free(p->frees);
    free(p->final_buf);
    free(p->param_final);
    free(p->finals);
    free(p->param_buf);
    free(p->units);
    free(p->io);
    free(p->unit_off);
    free(p->param_unit);
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
    b->paged = 0;
    return p->n_bufs++;
}

/* The state of one build: the program so far and, per value, the buffer
 * that holds its latest computation (-1: none yet). */
typedef struct builder {
    const rm_graph *g;
    rm_program *p;
    int *cur;
    int *param_of; /* value -> its index in g->params, -1 for other values */
    char *err;
    size_t errlen;
    /* paging (issue 20): per value, 1 once a unit pages it out (its buffers
     * are page-aligned) and 1 while a page-in of it is not waited for; per
     * unit, the transfer in flight, the buffer a page-out holds until its
     * wait, the staged buffer of a state unit, and the place its last
     * page-out wrote; the next free place in the file */
    char *paged_value, *loading;
    int *inflight, *out_buf, *staged, *written_io;
    uint64_t file_next;
} builder;

static rm_status fail(builder *b, rm_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
    return st;
}

/* Instruction `at` reads buffer `buf`: its life extends to here. */
static int use(builder *b, int buf, int at) {
    b->p->bufs[buf].last = at;
    return buf;
}

/* Reads of forward tensors: all activation inputs in a forward, the ones
 * the node's backward reads (rm_node_bwd_reads) in a backward. */
static rm_status read_inputs(builder *b, const rm_node *nd, rm_instr *ins, int backward) {
    const rm_graph *g = b->g;
    const unsigned reads = backward ? rm_node_bwd_reads(nd, g->vals) : 0;
    for (int i = 0; i < nd->n_in; i++) {
        int v = nd->in[i];
        /* a paged parameter is read from its staged buffer, by every kernel
         * that has it as an input (bwd_reads names activations only) */
        const int paged_param = v >= 0 && b->param_of[v] >= 0 && b->p->param_unit[b->param_of[v]] >= 0;
        if (v < 0 || (g->vals[v].kind != RM_VALUE_ACT && !paged_param)) continue;
        if (backward && !paged_param && !(reads & RM_READS_IN(i))) continue;
        if (b->cur[v] < 0 || b->loading[v])
            return fail(b, RM_ERR_STATE, "schedule error: %s of node %d reads '%s', which is not %s there",
                        backward ? "backward" : "forward", ins->node, g->vals[v].name,
                        b->cur[v] < 0 ? "available" : "paged in yet");
        ins->in_buf[i] = use(b, b->cur[v], b->p->n_instrs);
    }
    return RM_OK;
}

/* A backward reads the outputs rm_node_bwd_reads names and their gradients. */
static rm_status read_outputs_and_grads(builder *b, const rm_node *nd, rm_instr *ins) {
    const rm_graph *g = b->g;
    int at = b->p->n_instrs;
    const unsigned reads = rm_node_bwd_reads(nd, g->vals);
    for (int j = 0; j < nd->n_out; j++) {
        int v = nd->out[j];
        if (reads & RM_READS_OUT(j)) {
            if (b->cur[v] < 0 || b->loading[v])
                return fail(b, RM_ERR_STATE, "schedule error: backward of node %d reads '%s', which is not "
                            "available there", ins->node, g->vals[v].name);
            ins->out_buf[j] = use(b, b->cur[v], at);
        }
        int d = g->vals[v].grad;
        if (v == g->loss) {
            ins->dout_buf[j] = -2; /* d(loss)/d(loss) = 1, held by the session */
        } else if (d >= 0) {
            if (b->cur[d] < 0)
                return fail(b, RM_ERR_STATE, "schedule error: backward of node %d runs before the gradient of "
                            "'%s' exists", ins->node, g->vals[v].name);
            ins->dout_buf[j] = use(b, b->cur[d], at);
        }
    }
    return RM_OK;
}

/* The gradient of parameter v, input i of a backward: the session's flat
 * buffer (zeroed per step, so every writer adds), or, fused, its own
 * buffer, which the first writer defines and overwrites and which lives
 * until the parameter is final. State (running statistics) and frozen
 * parameters get none. */
static rm_status write_param_grad(builder *b, int v, rm_instr *ins, int i) {
    rm_program *p = b->p;
    ins->acc[i] = 0;
    if (!b->g->vals[v].trainable) return RM_OK; /* state, frozen: no gradient at all */
    if (!p->fused) {
        ins->acc[i] = 1;
        return RM_OK;
    }
    int pi = b->param_of[v];
    if (p->param_buf[pi] >= 0) {
        ins->din_buf[i] = p->param_buf[pi];
        ins->acc[i] = 1;
        return RM_OK;
    }
    int nb = new_buf(p, v, (size_t)b->g->vals[v].numel * sizeof(float), p->n_instrs);
    if (nb < 0) return RM_ERR_NOMEM;
    p->bufs[nb].last = p->param_final[pi]; /* >= this instruction: the pre-pass saw it */
    p->param_buf[pi] = ins->din_buf[i] = nb;
    return RM_OK;
}

/* A backward writes the gradients of its inputs: the first writer of a
 * gradient defines its buffer and overwrites it, later writers add. */
static rm_status write_input_grads(builder *b, const rm_node *nd, rm_instr *ins) {
    const rm_graph *g = b->g;
    int at = b->p->n_instrs;
    for (int i = 0; i < nd->n_in; i++) {
        int v = nd->in[i];
        if (v < 0) continue;
        if (g->vals[v].kind == RM_VALUE_PARAM) {
            if (write_param_grad(b, v, ins, i) != RM_OK) return fail(b, RM_ERR_NOMEM, "out of memory building the step program");
            continue;
        }
        int d = g->vals[v].grad;
        if (d < 0) continue;
        if (b->cur[d] >= 0) {
            ins->din_buf[i] = use(b, b->cur[d], at);
            ins->acc[i] = 1;
        } else {
            int nb = new_buf(b->p, d, (size_t)g->vals[d].numel * 4, at);
            if (nb < 0) return fail(b, RM_ERR_NOMEM, "out of memory building the step program");
            b->cur[d] = nb;
            ins->din_buf[i] = nb;
            ins->acc[i] = 0;
        }
    }
    return RM_OK;
}

/* A forward or recompute defines a new buffer for each output. */
static rm_status define_outputs(builder *b, const rm_node *nd, rm_instr *ins) {
    const rm_graph *g = b->g;
    for (int j = 0; j < nd->n_out; j++) {
        int v = nd->out[j];
        size_t bytes = (size_t)g->vals[v].numel * rm_dtype_size(g->vals[v].dtype);
        int nb = new_buf(b->p, v, b->paged_value[v] ? rm_page_round(bytes) : bytes, b->p->n_instrs);
        if (nb < 0) return fail(b, RM_ERR_NOMEM, "out of memory building the step program");
        b->p->bufs[nb].paged = b->paged_value[v];
        b->cur[v] = nb;
        ins->out_buf[j] = nb;
    }
    return RM_OK;
}

/* A new transfer of buffer `buf` for unit u at the current instruction. */
static int new_io(builder *b, int u, int buf, int write, int region, uint64_t off) {
    rm_program *p = b->p;
    rm_io_slot *io = &p->io[p->n_io];
    *io = (rm_io_slot){buf, u, write, region, off, p->bufs[buf].bytes};
    *(write ? &p->page_out_bytes : &p->page_in_bytes) += p->bufs[buf].bytes;
    b->inflight[u] = p->n_io;
    return p->n_io++;
}

/* The value or staged buffer a unit's page-out writes, taken from where
 * readers find it (a value is not available until it is paged in again). */
static rm_status page_out(builder *b, int u, rm_instr *ins) {
    rm_program *p = b->p;
    const rm_page_unit *un = &p->units[u];
    const int value_unit = un->kind == RM_UNIT_VALUE;
    int buf = value_unit || un->kind == RM_UNIT_PARAM ? b->cur[un->value] : b->staged[u];
    if (buf < 0 || b->inflight[u] >= 0)
        return fail(b, RM_ERR_STATE, "schedule error: page-out of '%s' with %s", b->g->vals[un->value].name,
                    buf < 0 ? "nothing to write" : "a transfer in flight");
    use(b, buf, p->n_instrs);
    if (value_unit) { /* its buffers are page-aligned (paged_value) */
        b->written_io[u] = ins->io = new_io(b, u, buf, 1, p->n_regions++, b->file_next);
        b->file_next += un->bytes;
        b->cur[un->value] = -1; /* on disk until paged in */
    } else {
        ins->io = new_io(b, u, buf, 1, u, p->unit_off[u]);
        if (un->kind == RM_UNIT_MOMENTS) b->staged[u] = -1;
        else b->cur[un->value] = -1;
    }
    b->out_buf[u] = buf;
    return RM_OK;
}

/* A new buffer for the unit, and its read from the file. */
static rm_status page_in(builder *b, int u, rm_instr *ins) {
    rm_program *p = b->p;
    const rm_page_unit *un = &p->units[u];
    if (b->inflight[u] >= 0 || (un->kind == RM_UNIT_VALUE && b->written_io[u] < 0))
        return fail(b, RM_ERR_STATE, "schedule error: page-in of '%s' %s", b->g->vals[un->value].name,
                    b->inflight[u] >= 0 ? "with a transfer in flight" : "before its page-out");
    int nb = new_buf(p, un->kind == RM_UNIT_MOMENTS ? -1 : un->value, un->bytes, p->n_instrs);
    if (nb < 0) return fail(b, RM_ERR_NOMEM, "out of memory building the step program");
    p->bufs[nb].paged = 1;
    if (un->kind == RM_UNIT_VALUE) {
        const rm_io_slot *w = &p->io[b->written_io[u]];
        ins->io = new_io(b, u, nb, 0, w->region, w->off);
    } else {
        ins->io = new_io(b, u, nb, 0, u, p->unit_off[u]);
    }
    if (un->kind == RM_UNIT_MOMENTS) b->staged[u] = nb;
    else b->cur[un->value] = nb, b->loading[un->value] = 1;
    b->out_buf[u] = -1;
    return RM_OK;
}

/* A wait: a page-in's buffer may be read from here on, a page-out's buffer
 * lives until here. */
static rm_status page_wait(builder *b, int u, rm_instr *ins) {
    rm_program *p = b->p;
    if (b->inflight[u] < 0)
        return fail(b, RM_ERR_STATE, "schedule error: a wait on '%s' with no transfer in flight",
                    b->g->vals[p->units[u].value].name);
    ins->io = b->inflight[u];
    b->inflight[u] = -1;
    if (b->out_buf[u] >= 0) use(b, b->out_buf[u], p->n_instrs), b->out_buf[u] = -1;
    else if (p->units[u].kind != RM_UNIT_MOMENTS) b->loading[p->units[u].value] = 0;
    return RM_OK;
}

/* A fused update of a state unit: its staged moments, the parameter's
 * gradient and the parameter (staged too when it is paged). */
static rm_status page_update(builder *b, int u, rm_instr *ins) {
    rm_program *p = b->p;
    const rm_page_unit *un = &p->units[u];
    const int pi = un->param, g = p->param_buf[pi];
    if (un->kind != RM_UNIT_MOMENTS || b->staged[u] < 0 || b->inflight[u] >= 0)
        return fail(b, RM_ERR_STATE, "schedule error: update of '%s' without its moments paged in",
                    b->g->vals[un->value].name);
    ins->out_buf[0] = use(b, b->staged[u], p->n_instrs);
    if (g >= 0) ins->din_buf[0] = use(b, g, p->n_instrs);
    if (p->param_unit[pi] >= 0) {
        if (b->cur[un->value] < 0 || b->loading[un->value])
            return fail(b, RM_ERR_STATE, "schedule error: update of '%s' before the parameter is paged in",
                        b->g->vals[un->value].name);
        ins->in_buf[0] = use(b, b->cur[un->value], p->n_instrs);
    }
    return RM_OK;
}

static rm_status add_page_instr(builder *b, const rm_sched_item *it, rm_instr *ins) {
    if (it->node < 0 || it->node >= b->p->n_units) return fail(b, RM_ERR_STATE, "schedule error: no paging unit %d", it->node);
    rm_status rc;
    switch (it->kind) {
    case RM_INSTR_PAGE_OUT: rc = page_out(b, it->node, ins); break;
    case RM_INSTR_PAGE_IN: rc = page_in(b, it->node, ins); break;
    case RM_INSTR_WAIT: rc = page_wait(b, it->node, ins); break;
    default: rc = page_update(b, it->node, ins); break;
    }
    if (rc == RM_OK) b->p->n_instrs++;
    return rc;
}

/* One schedule item -> one instruction with its operand buffers. */
static rm_status add_instr(builder *b, const rm_sched_item *it, int threads) {
    rm_instr *ins = &b->p->instrs[b->p->n_instrs];
    ins->kind = it->kind;
    ins->node = it->node;
    ins->work_buf = -1;
    ins->io = -1;
    for (int i = 0; i < RM_MAX_IN; i++) ins->in_buf[i] = ins->din_buf[i] = -1;
    for (int j = 0; j < RM_MAX_OUT; j++) ins->out_buf[j] = ins->dout_buf[j] = -1;
    if (!rm_instr_runs_node(it->kind)) return add_page_instr(b, it, ins);
    const rm_node *nd = &b->g->nodes[it->node];
    int backward = it->kind == RM_INSTR_BACKWARD;
    rm_status rc = read_inputs(b, nd, ins, backward);
    if (rc == RM_OK && backward) rc = read_outputs_and_grads(b, nd, ins);
    if (rc == RM_OK) rc = backward ? write_input_grads(b, nd, ins) : define_outputs(b, nd, ins);
    if (rc != RM_OK) return rc;
    size_t ws = rm_node_workspace(nd, b->g->vals, backward, threads);
    if (ws) {
        ins->work_buf = new_buf(b->p, -1, ws, b->p->n_instrs);
        if (ins->work_buf < 0) return fail(b, RM_ERR_NOMEM, "out of memory building the step program");
    }
    b->p->n_instrs++;
    return RM_OK;
}

/* A fused parameter gradient's buffer (its value is the parameter). */
static int is_param_grad(const rm_graph *g, const rm_buffer *b) {
    return b->value >= 0 && g->vals[b->value].kind == RM_VALUE_PARAM && !b->paged; /* (not a staged parameter) */
}

/* Frees: each buffer right after its last use, grouped per instruction;
 * and the planned peak of live bytes. */
static rm_status place_frees(const rm_graph *g, rm_program *p) {
    p->frees = malloc((size_t)(p->n_bufs ? p->n_bufs : 1) * sizeof *p->frees);
    int *count = calloc((size_t)p->n_instrs + 1, sizeof *count);
    if (!p->frees || !count) {
        free(count);
        return RM_ERR_NOMEM;
    }
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
    size_t live = 0, peak = 0, grads = 0;
    int bi = 0; /* buffers are created in order of `first` */
    for (int i = 0; i < p->n_instrs; i++) {
        for (; bi < p->n_bufs && p->bufs[bi].first == i; bi++) {
            live += p->bufs[bi].bytes;
            if (is_param_grad(g, &p->bufs[bi])) grads += p->bufs[bi].bytes;
        }
        if (live > peak) peak = live, p->peak_grad_bytes = grads;
        const rm_instr *ins = &p->instrs[i];
        for (int f = 0; f < ins->n_free; f++) {
            const rm_buffer *fb = &p->bufs[p->frees[ins->free_at + f]];
            live -= fb->bytes;
            if (is_param_grad(g, fb)) grads -= fb->bytes;
        }
    }
    p->peak_live_bytes = peak;
    return RM_OK;
}

/* Per parameter, the last instruction that reads it or writes its gradient
 * (one instruction per schedule item, so item k is instruction k). */
static rm_status find_param_finals(builder *b, const rm_schedule *s) {
    const rm_graph *g = b->g;
    rm_program *p = b->p;
    const size_t np = (size_t)(g->n_params ? g->n_params : 1);
    p->n_params = g->n_params;
    p->param_final = malloc(np * sizeof *p->param_final);
    p->param_buf = malloc(np * sizeof *p->param_buf);
    p->finals = malloc(np * sizeof *p->finals);
    b->param_of = malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof *b->param_of);
    if (!p->param_final || !p->param_buf || !p->finals || !b->param_of) return RM_ERR_NOMEM;
    for (int v = 0; v < g->n_vals; v++) b->param_of[v] = -1;
    for (int i = 0; i < g->n_params; i++) b->param_of[g->params[i]] = i, p->param_final[i] = p->param_buf[i] = -1;
    for (int k = 0; k < s->n; k++) {
        if (!rm_instr_runs_node(s->items[k].kind)) continue;
        const rm_node *nd = &g->nodes[s->items[k].node];
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && b->param_of[nd->in[i]] >= 0) p->param_final[b->param_of[nd->in[i]]] = k;
    }
    return RM_OK;
}

/* The parameters grouped by the instruction after which they are final
 * (those final nowhere, param_final -1, are in no group). */
static void place_finals(rm_program *p) {
    for (int i = 0; i < p->n_instrs; i++) p->instrs[i].n_final = 0;
    for (int pi = 0; pi < p->n_params; pi++)
        if (p->param_final[pi] >= 0) p->instrs[p->param_final[pi]].n_final++;
    int at = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        p->instrs[i].final_at = at;
        at += p->instrs[i].n_final;
        p->instrs[i].n_final = 0;
    }
    for (int pi = 0; pi < p->n_params; pi++) {
        if (p->param_final[pi] < 0) continue;
        rm_instr *ins = &p->instrs[p->param_final[pi]];
        p->finals[ins->final_at + ins->n_final++] = pi;
    }
}

/* The paging tables of a schedule with units: the units copied, per unit
 * and value the builder's state, the state units' places in the file
 * (first, for good), the parameters a unit pages, the values paged out
 * (their buffers page-aligned), and one transfer slot per page item. */
static rm_status paging_setup(builder *b, const rm_schedule *s) {
    rm_program *p = b->p;
    const rm_graph *g = b->g;
    const int nu = s->n_units, nv = g->n_vals ? g->n_vals : 1;
    p->param_unit = malloc((size_t)(g->n_params ? g->n_params : 1) * sizeof *p->param_unit);
    b->paged_value = calloc((size_t)nv, 1);
    b->loading = calloc((size_t)nv, 1);
    if (!p->param_unit || !b->paged_value || !b->loading) return RM_ERR_NOMEM;
    for (int i = 0; i < g->n_params; i++) p->param_unit[i] = -1;
    if (nu == 0) return RM_OK;
    p->units = malloc((size_t)nu * sizeof *p->units);
    p->unit_off = calloc((size_t)nu, sizeof *p->unit_off);
    b->inflight = malloc((size_t)nu * 4 * sizeof *b->inflight);
    int n_io = 0;
    for (int k = 0; k < s->n; k++) n_io += s->items[k].kind == RM_INSTR_PAGE_OUT || s->items[k].kind == RM_INSTR_PAGE_IN;
    p->io = malloc((size_t)(n_io ? n_io : 1) * sizeof *p->io);
    if (!p->units || !p->unit_off || !b->inflight || !p->io) return RM_ERR_NOMEM;
    b->out_buf = b->inflight + nu, b->staged = b->inflight + 2 * nu, b->written_io = b->inflight + 3 * nu;
    memcpy(p->units, s->units, (size_t)nu * sizeof *p->units);
    p->n_units = nu;
    p->n_regions = nu; /* regions 0..nu-1: the state units'; value page-outs take the next ones */
    for (int u = 0; u < nu; u++) {
        const rm_page_unit *un = &p->units[u];
        b->inflight[u] = b->out_buf[u] = b->staged[u] = b->written_io[u] = -1;
        if (un->kind == RM_UNIT_VALUE) {
            b->paged_value[un->value] = 1;
            continue;
        }
        p->unit_off[u] = un->file_off;
        if (un->kind == RM_UNIT_PARAM) p->param_unit[un->param] = u;
    }
    b->file_next = p->state_scratch_bytes = s->state_bytes; /* value pages after the state */
    return RM_OK;
}

rm_status rm_program_build(const rm_graph *g, const rm_schedule *s, int threads, rm_program *p,
                           char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    builder b = {g, p, malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof(int)), NULL, err, errlen,
                 NULL, NULL, NULL, NULL, NULL, NULL, 0};
    p->instrs = calloc((size_t)(s->n ? s->n : 1), sizeof *p->instrs);
    p->fused = g->fuse_grads;
    rm_status rc = b.cur && p->instrs && find_param_finals(&b, s) == RM_OK && paging_setup(&b, s) == RM_OK
                       ? RM_OK : fail(&b, RM_ERR_NOMEM, "out of memory building the step program");
    p->cap_instrs = s->n;
    for (int v = 0; v < g->n_vals && b.cur; v++) b.cur[v] = -1;
    for (int k = 0; k < s->n && rc == RM_OK; k++) rc = add_instr(&b, &s->items[k], threads);
    for (int u = 0; u < p->n_units && rc == RM_OK; u++)
        if (b.inflight[u] >= 0)
            rc = fail(&b, RM_ERR_STATE, "schedule error: the transfer of '%s' is not waited for by the end of the step",
                      g->vals[p->units[u].value].name);
    p->scratch_bytes = b.file_next;
    if (rc == RM_OK) {
        /* outputs (the loss among them) stay readable after the step */
        for (int v = 0; v < g->n_vals; v++)
            if (g->vals[v].is_output && b.cur[v] >= 0) p->bufs[b.cur[v]].last = p->n_instrs - 1;
        if (place_frees(g, p) != RM_OK) rc = fail(&b, RM_ERR_NOMEM, "out of memory building the step program");
        else place_finals(p);
    }
    if (rc == RM_OK) {
        p->final_buf = b.cur;
        b.cur = NULL;
    }
    free(b.cur);
    free(b.param_of);
    free(b.paged_value);
    free(b.loading);
    free(b.inflight);
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
