/* trace.c: one training step as a Chrome Trace Event file (the JSON that
 * Perfetto and chrome://tracing open).
 *
 * rm_trace_enable preallocates one event per instruction of the training
 * program; the executor fills them during the chosen step (two clock reads
 * and two byte counts per instruction, no allocation) and rm_optim_step adds
 * the optimizer update. rm_trace_write then prints:
 *   - a duration event ("ph":"X") per executed instruction, category
 *     forward | recompute | backward | optimizer, named "<stage> <op> #<node>";
 *   - a counter track ("ph":"C") "live activation bytes": its value when an
 *     instruction starts (its outputs defined) and when it ends (dead buffers
 *     freed), so its maximum is the step's activation high-water mark,
 *     rm_memory_info.activation_bytes_measured;
 *   - "otherData": strategy, budget, the plan's figures and the caller's pairs.
 * Under a fused optimizer the updates run inside the step: one "optimizer"
 * event after each instruction that made parameters final. */
#include "exec/trace.h"
#include <stdlib.h>
#include <string.h>

rm_status rm_trace_enable(rm_session *s, uint64_t step) {
    if (!s) return RM_ERR_ARG;
    rm_status rc = rm_session_runnable(s, "rm_trace_enable");
    if (rc != RM_OK) return rc;
    if (!s->train.n_instrs)
        return rm_session_fail(s, RM_ERR_STATE, "rm_trace_enable: the session runs no training step (forward-only)");
    struct rm_trace *t = s->trace;
    if (!t) {
        t = calloc(1, sizeof *t);
        if (t) t->ev = malloc(sizeof *t->ev * (size_t)s->train.n_instrs);
        if (!t || !t->ev) {
            free(t);
            return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for a trace of %d instructions",
                                   s->train.n_instrs);
        }
        t->cap = s->train.n_instrs;
        s->trace = t;
    }
    if (!t->io && s->train.n_io && !(t->io = calloc((size_t)s->train.n_io, sizeof *t->io)))
        return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for a trace of %d transfers", s->train.n_io);
    t->state = RM_TRACE_ARMED;
    t->step = step;
    t->n = 0;
    t->opt_t0 = t->opt_t1 = 0;
    return RM_OK;
}

int rm_trace_ready(const rm_session *s) { return s && s->trace && s->trace->state >= RM_TRACE_STEPPED; }

void rm_trace_free(rm_session *s) {
    if (!s || !s->trace) return;
    free(s->trace->ev);
    free(s->trace->io);
    free(s->trace);
    s->trace = NULL;
}

struct rm_trace *rm_trace_for(rm_session *s, const rm_program *p, uint64_t step) {
    struct rm_trace *t = s->trace;
    if (!t || t->state != RM_TRACE_ARMED || t->step != step || p != &s->train || t->cap < p->n_instrs) return NULL;
    t->n = 0;
    t->state = RM_TRACE_STEPPED;
    return t;
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void put_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static const char *kind_name(rm_instr_kind k) {
    return k == RM_INSTR_FORWARD ? "forward" : k == RM_INSTR_RECOMPUTE ? "recompute" : "backward";
}

void rm_trace_io(rm_session *s, const rm_program *p) {
    struct rm_trace *t = s->trace;
    if (!t || t->state != RM_TRACE_STEPPED || !t->io || p != &s->train || !s->page.q.running) return;
    t->n_io = p->n_io;
    memcpy(t->io, s->page.q.req, (size_t)p->n_io * sizeof *t->io);
}

/* What a paging unit holds, for event names. */
static void unit_label(const rm_graph *g, const rm_page_unit *u, char *out, size_t cap) {
    const char *v = g->vals[u->value].name;
    if (u->kind == RM_UNIT_VALUE) snprintf(out, cap, "%s", v);
    else if (u->kind == RM_UNIT_PARAM) snprintf(out, cap, "param %s", v);
    else snprintf(out, cap, "moments %s [%lld, %lld)", v, (long long)u->lo, (long long)u->hi);
}

/* The I/O thread's track: one event per transfer ("page-out", "page-in"),
 * and on the step's track each wait that held the step ("io wait") and
 * each update of paged state ("optimizer"). */
static void put_io(FILE *f, const rm_session *s, const struct rm_trace *t, double origin) {
    const rm_program *p = &s->train;
    char label[RM_NAME_LEN + 80];
    fputs(",\n{\"ph\":\"M\",\"pid\":1,\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"scratch I/O\"}}", f);
    for (int i = 0; i < t->n_io && i < p->n_io; i++) {
        const rm_io_req *r = &t->io[i];
        if (r->t1 <= 0) continue;
        unit_label(s->g, &p->units[p->io[i].unit], label, sizeof label);
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":2,\"name\":");
        put_str(f, label);
        fprintf(f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"bytes\":%zu,\"offset\":%llu}}",
                r->write ? "page-out" : "page-in", (r->t0 - origin) * 1e3, (r->t1 - r->t0) * 1e3, r->bytes,
                (unsigned long long)r->off);
    }
    for (int i = 0; i < t->n; i++) {
        const rm_trace_event *e = &t->ev[i];
        if ((e->kind != RM_INSTR_WAIT && e->kind != RM_INSTR_UPDATE) || e->t1 - e->t0 < 0.01) continue;
        unit_label(s->g, &p->units[e->node], label, sizeof label);
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":");
        put_str(f, label);
        fprintf(f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{}}",
                e->kind == RM_INSTR_WAIT ? "io wait" : "optimizer", (e->t0 - origin) * 1e3, (e->t1 - e->t0) * 1e3);
    }
}

/* One duration event; ts and dur in microseconds from the step's start. */
static void put_span(FILE *f, const rm_graph *g, const rm_trace_event *e, double origin) {
    if (!rm_instr_runs_node(e->kind)) return; /* paging instructions: the I/O track */
    const rm_node *nd = &g->nodes[e->node];
    const char *stage = g->stages[nd->stage].name, *op = rm_op_get(nd->op)->name;
    char name[RM_NAME_LEN + 64];
    snprintf(name, sizeof name, "%s %s #%d", stage, op, e->node);
    fputs(",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":", f);
    put_str(f, name);
    fprintf(f, ",\"cat\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"node\":%d,\"op\":\"%s\",\"stage\":", kind_name(e->kind),
            (e->t0 - origin) * 1e3, (e->t1 - e->t0) * 1e3, e->node, op);
    put_str(f, stage);
    fprintf(f, ",\"live_bytes\":%zu}}", e->live_in);
}

static void put_counter(FILE *f, double ts_us, size_t bytes) {
    fprintf(f, ",\n{\"ph\":\"C\",\"pid\":1,\"name\":\"live activation bytes\",\"ts\":%.3f,\"args\":{\"bytes\":%zu}}",
            ts_us, bytes);
}

static void put_meta(FILE *f, const rm_session *s, const struct rm_trace *t, int n_meta, const char *const *keys,
                     const char *const *values) {
    rm_plan_info p;
    rm_memory_info m;
    rm_plan(s, &p);
    rm_memory(s, &m);
    const char *strategy = p.budget_bytes && s->autoplan.chosen[0] ? s->autoplan.chosen : p.strategy;
    fputs("\"otherData\":{\"strategy\":", f);
    put_str(f, strategy ? strategy : "none");
    fprintf(f, ",\"budget_bytes\":%zu,\"step\":%llu,\"threads\":%d,\"activation_bytes_planned\":%zu,"
            "\"activation_bytes_measured\":%zu,\"predicted_overhead\":%.4f",
            p.budget_bytes, (unsigned long long)t->step, s->threads, m.activation_bytes_planned,
            m.activation_bytes_measured, p.predicted_overhead);
    for (int i = 0; i < n_meta; i++) {
        if (!keys || !values || !keys[i] || !values[i]) continue;
        fputc(',', f);
        put_str(f, keys[i]);
        fputc(':', f);
        put_str(f, values[i]);
    }
    fputs("}", f);
}

rm_status rm_trace_write(const rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen) {
    const struct rm_trace *t = s ? s->trace : NULL;
    if (!err) errlen = 0; /* err may be NULL: snprintf(NULL, 0, ..) writes nothing */
    if (!path || n_meta < 0)
        return snprintf(err, errlen, "rm_trace_write: %s", path ? "n_meta is negative (the number of key/value pairs)"
                                                                 : "path is NULL"), RM_ERR_ARG;
    if (!rm_trace_ready(s)) {
        snprintf(err, errlen, "no traced step to write: rm_trace_enable(s, N) and then rm_step(s, N, ...) first");
        return RM_ERR_STATE;
    }
    rm_out *out;
    rm_status st = rm_out_open(path, &out, err, errlen);
    if (st != RM_OK) return st;
    FILE *f = rm_out_file(out);
    const rm_graph *g = s->g;
    double origin = t->n ? t->ev[0].t0 : 0;
    fputs("{", f);
    put_meta(f, s, t, n_meta, keys, values);
    fprintf(f, ",\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n"
            "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"remat step %llu\"}}",
            (unsigned long long)t->step);
    fputs(",\n{\"ph\":\"M\",\"pid\":1,\"tid\":1,\"name\":\"thread_name\",\"args\":{\"name\":\"step program\"}}", f);
    for (int i = 0; i < t->n; i++) {
        const rm_trace_event *e = &t->ev[i];
        put_span(f, g, e, origin);
        if (e->u0 > 0)
            fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"optimizer update after #%d\",\"cat\":"
                    "\"optimizer\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{}}", e->node, (e->u0 - origin) * 1e3,
                    (e->u1 - e->u0) * 1e3);
        put_counter(f, (e->t0 - origin) * 1e3, e->live_in);
        put_counter(f, (e->t1 - origin) * 1e3, e->live_out);
    }
    if (t->n_io) put_io(f, s, t, origin);
    if (t->state == RM_TRACE_DONE)
        fprintf(f, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"name\":\"optimizer update\",\"cat\":\"optimizer\","
                "\"ts\":%.3f,\"dur\":%.3f,\"args\":{}}", (t->opt_t0 - origin) * 1e3, (t->opt_t1 - t->opt_t0) * 1e3);
    fputs("\n]}\n", f);
    return rm_out_close(out, 1, err, errlen);
}
