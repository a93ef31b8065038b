/* exec.c: running a step program. Every pointer is arena base + a planned
 * offset, parameter storage, or input storage: nothing is allocated here.
 * The executor also keeps the books: the bytes of live buffers, whose
 * high-water mark is reported as activation_bytes_measured. Under a fused
 * optimizer it also updates each parameter right after the instruction
 * that makes it final, before that instruction's buffers are freed. */
#include "exec/exec.h"
#include "exec/trace.h"
#include <math.h>
#include <string.h>

/* verify_recompute: remember first computations, compare recomputations. */
static rm_status verify(rm_session *s, const rm_instr *ins, const rm_kernel_ctx *c) {
    const rm_graph *g = s->g;
    const rm_node *nd = &g->nodes[ins->node];
    for (int j = 0; j < nd->n_out; j++) {
        if (!c->out[j]) continue;
        const rm_value *v = &g->vals[nd->out[j]];
        uint64_t h = rm_hash_bytes(c->out[j], (size_t)v->numel * rm_dtype_size(v->dtype));
        if (ins->kind == RM_INSTR_FORWARD) s->hashes[nd->out[j]] = h;
        else if (s->hashes[nd->out[j]] != h)
            return rm_session_fail(s, RM_ERR_VERIFY,
                                   "recomputing node %d (%s) in stage '%s' gave different values for '%s' than its "
                                   "first computation: the op is not deterministic",
                                   ins->node, rm_op_get(nd->op)->name, g->stages[nd->stage].name, v->name);
    }
    return RM_OK;
}

/* Fused: the updates of the parameters final after instruction ins. */
static void run_updates(rm_session *s, const rm_program *p, const rm_instr *ins) {
    for (int f = 0; f < ins->n_final; f++) {
        const int pi = p->finals[ins->final_at + f], b = p->param_buf[pi];
        if (s->page.moments && s->page.moments[pi]) continue; /* paged state: its UPDATE instructions */
        s->fused.update(s->fused.o, pi, b >= 0 ? (float *)(s->arena + p->bufs[b].offset) : NULL);
    }
}

static void *value_ptr(rm_session *s, const rm_program *p, int v, int buf) {
    const rm_value *val = &s->g->vals[v];
    switch (val->kind) {
    case RM_VALUE_INPUT: return s->inputs + val->input_off;
    case RM_VALUE_PARAM: return buf >= 0 ? (void *)(s->arena + p->bufs[buf].offset) : (void *)(s->params + val->param_off); /* paged: staged */
    default: return buf >= 0 ? s->arena + p->bufs[buf].offset : NULL;
    }
}

/* The kernel context of instruction ins: its node, the step's keys, and a
 * pointer for every operand (arena offset, parameter or input storage). */
static void bind(rm_session *s, const rm_program *p, const rm_instr *ins, uint64_t step, int train, rm_kernel_ctx *c) {
    const rm_graph *g = s->g;
    const rm_node *nd = &g->nodes[ins->node];
    memset(c, 0, sizeof *c);
    c->node = nd;
    c->node_id = ins->node;
    c->threads = s->threads;
    c->seed = s->opt.seed;
    c->step = step;
    c->row0 = s->row0;
    c->train = train;
    c->recompute = ins->kind == RM_INSTR_RECOMPUTE;
    const int backward = ins->kind == RM_INSTR_BACKWARD;
    for (int k = 0; k < nd->n_in; k++) {
        int v = nd->in[k];
        if (v < 0) continue;
        c->vin[k] = &g->vals[v];
        c->in[k] = value_ptr(s, p, v, ins->in_buf[k]);
        if (backward) {
            c->acc[k] = ins->acc[k];
            if (g->vals[v].kind == RM_VALUE_PARAM && !p->fused) {
                if (g->vals[v].trainable) c->din[k] = s->grads + g->vals[v].param_off; /* frozen: NULL */
            } else if (ins->din_buf[k] >= 0) {
                c->din[k] = (float *)(s->arena + p->bufs[ins->din_buf[k]].offset);
            }
        }
    }
    for (int j = 0; j < nd->n_out; j++) {
        c->vout[j] = &g->vals[nd->out[j]];
        c->out[j] = ins->out_buf[j] >= 0 ? s->arena + p->bufs[ins->out_buf[j]].offset : NULL;
        if (ins->dout_buf[j] == -2) c->dout[j] = &s->loss_seed;
        else if (ins->dout_buf[j] >= 0) c->dout[j] = (float *)(s->arena + p->bufs[ins->dout_buf[j]].offset);
    }
    if (ins->work_buf >= 0) c->work = s->arena + p->bufs[ins->work_buf].offset;
    if (ins->work_buf >= 0 && nd->bf16) { /* the products' scratch first, then the op's workspace */
        c->mm = (rm_mm_scratch){c->work, s->threads, rm_node_mm_dim(nd, g->vals), 0};
        c->work = (char *)c->work + rm_gemm_bf16_scratch(s->threads, c->mm.dim);
    }
}

/* A training step starts: gradients zeroed (unless accumulating or fused:
 * then the first writer overwrites) and the step's timings cleared. */
static void begin_step(rm_session *s, const rm_program *p) {
    const rm_graph *g = s->g;
    if (!s->accumulate && !p->fused) memset(s->grads, 0, g->train_floats * sizeof(float));
    if (s->page.q.running) rm_ioq_clear_stats(&s->page.q);
    s->page.wait_ms = 0;
    s->ms_forward = s->ms_recompute = s->ms_backward = s->ms_optimizer = 0;
    for (int st = 0; st < g->n_stages; st++) s->timing.stage_fwd[st] = s->timing.stage_bwd[st] = 0;
    for (int n = 0; n < g->n_nodes; n++) s->timing.node_fwd[n] = s->timing.node_rec[n] = 0;
}

/* The training step's books: ms per kind of instruction, stage and node. */
static void account(rm_session *s, const rm_instr *ins, double dt) {
    const int stage = s->g->nodes[ins->node].stage;
    if (ins->kind == RM_INSTR_FORWARD) {
        s->ms_forward += dt, s->timing.stage_fwd[stage] += dt;
        s->timing.node_fwd[ins->node] += dt;
    } else if (ins->kind == RM_INSTR_RECOMPUTE) {
        s->ms_recompute += dt, s->timing.node_rec[ins->node] = dt;
    } else {
        s->ms_backward += dt, s->timing.stage_bwd[stage] += dt;
    }
}

/* The books of a step's end, or of a step stopped by an error: no
 * transfer is left in flight over the arena. */
static void end_io(rm_session *s) {
    if (s->page.q.running) rm_ioq_drain(&s->page.q);
}

rm_status rm_execute(rm_session *s, const rm_program *p, uint64_t step, int train) {
    const rm_graph *g = s->g;
    size_t live = 0, peak = 0;
    int next_buf = 0; /* buffers are numbered in order of definition */
    struct rm_trace *tr = train ? rm_trace_for(s, p, step) : NULL; /* NULL unless this step is traced */
    const int fused = train && p->fused && s->fused.o; /* update parameters as they become final */
    rm_status verified = RM_OK;
    s->page.staged = 0; /* the arena's start is this step's */
    if (train) begin_step(s, p);
    rm_set_threads(s->threads);
    for (int i = 0; i < p->n_instrs; i++) {
        const rm_instr *ins = &p->instrs[i];
        const int runs = rm_instr_runs_node(ins->kind), backward = ins->kind == RM_INSTR_BACKWARD;
        rm_kernel_ctx c;
        if (runs) bind(s, p, ins, step, train, &c);
        while (next_buf < p->n_bufs && p->bufs[next_buf].first == i) live += p->bufs[next_buf++].bytes;
        if (live > peak) peak = live;

        double t0 = rm_now_ms();
        if (!runs) {
            rm_status rc = rm_session_io(s, p, ins, train);
            if (rc != RM_OK) {
                end_io(s);
                return rc;
            }
        } else if (backward) {
            rm_op_get(g->nodes[ins->node].op)->backward(&c);
        } else {
            rm_op_get(g->nodes[ins->node].op)->forward(&c);
        }
        double t1 = rm_now_ms();
        if (tr) tr->ev[tr->n] = (rm_trace_event){.t0 = t0, .t1 = t1, .u0 = 0, .u1 = 0, .live_in = live,
                                                 .live_out = live, .node = ins->node, .kind = ins->kind};
        if (train && runs) account(s, ins, t1 - t0);
        if (train && s->after_instr) s->after_instr(s, i);
        if (train && ins->kind == RM_INSTR_UPDATE) s->ms_optimizer += t1 - t0;
        if (fused && ins->n_final) {
            double u0 = rm_now_ms();
            run_updates(s, p, ins);
            double u1 = rm_now_ms();
            s->ms_optimizer += u1 - u0;
            if (tr) tr->ev[tr->n].u0 = u0, tr->ev[tr->n].u1 = u1;
        }
        if (s->hashes && runs && !backward && verified == RM_OK) {
            /* fused: the step goes on, so every update (and on several
             * ranks every gradient's sum) happens; the mismatch after */
            verified = verify(s, ins, &c);
            if (verified != RM_OK && !fused) {
                end_io(s);
                return verified;
            }
        }

        for (int f = 0; f < ins->n_free; f++) {
            const rm_buffer *b = &p->bufs[p->frees[ins->free_at + f]];
            live -= b->bytes;
            if (s->poison && !(b->value >= 0 && g->vals[b->value].is_output)) {
                float *x = (float *)(s->arena + b->offset);
                for (size_t e = 0; e < b->bytes / sizeof(float); e++) x[e] = NAN;
            }
        }
        if (tr) tr->ev[tr->n++].live_out = live;
        if (s->page.q.inflight) rm_ioq_poll(&s->page.q); /* io_uring: note what finished, when */
    }
    end_io(s);
    if (tr) rm_trace_io(s, p);
    /* parameters nothing reads: updated with a zero gradient, as unfused */
    for (int pi = 0; fused && pi < p->n_params; pi++)
        if (p->param_final[pi] < 0) s->fused.update(s->fused.o, pi, NULL);
    /* the figure reported is the training step's; forward-only runs are smaller */
    if ((train || !s->train.n_instrs) && peak > s->measured_peak) s->measured_peak = peak;
    s->last = p;
    return verified;
}
