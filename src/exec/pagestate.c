/* pagestate.c: the training state that lives in the scratch file, between
 * steps (issue 20). Checkpoint files, the optimizer's zeroing and the
 * parameters' first values reach it here, one paging unit at a time,
 * staged at the start of the arena; reads check and writes record the
 * region's checksum as the I/O queue does. (Apart from exec/page.c so that
 * what reads and writes checkpoint files needs only the file, not the
 * paging of steps.) */
#include "exec/exec.h"
#include "util/half.h"
#include <stdio.h>
#include <string.h>

/* What a unit holds, for messages. */
void rm_session_unit_name(const rm_session *s, const rm_page_unit *u, char *out, size_t cap) {
    const char *v = s->g->vals[u->value].name;
    if (u->kind == RM_UNIT_VALUE) snprintf(out, cap, "the activation '%s'", v);
    else if (u->kind == RM_UNIT_PARAM) snprintf(out, cap, "the parameter '%s'", v);
    else snprintf(out, cap, "the AdamW moments of '%s' [%lld, %lld)", v, (long long)u->lo, (long long)u->hi);
}

/* The arena holds every unit's buffer during a step, so it is large enough
 * to stage any unit; between steps it is free. */

/* The unit of the train program that holds float `at` of parameter pi's
 * state `what` (0: the parameter, 1: m, 2: v), or -1 when it is resident. */
static int unit_of(const rm_session *s, int pi, int what, int64_t at) {
    const rm_program *p = &s->train;
    for (int u = 0; u < p->n_units; u++) {
        const rm_page_unit *un = &p->units[u];
        if (un->param != pi || un->kind == RM_UNIT_VALUE || (what == 0) != (un->kind == RM_UNIT_PARAM)) continue;
        if (at >= un->lo && at < un->hi) return u;
    }
    return -1;
}

int rm_session_state_paged(const rm_session *s, int pi, int what) {
    return s && s->page.open && unit_of(s, pi, what, 0) >= 0;
}

static rm_status unit_read(rm_session *s, int u) {
    const rm_program *p = &s->train;
    const rm_page_unit *un = &p->units[u];
    if (s->page.staged == u + 1) return RM_OK;
    int e = rm_scratch_read(&s->page.file, s->arena, un->bytes, p->unit_off[u]);
    rm_ioq *q = &s->page.q;
    if (!e && q->check && q->hashed[u] && q->hash[u] != rm_hash_bytes(s->arena, un->bytes)) e = RM_IO_CHANGED;
    s->page.staged = e ? 0 : u + 1;
    if (!e) return RM_OK;
    char what[RM_NAME_LEN + 96];
    rm_session_unit_name(s, un, what, sizeof what);
    return rm_session_fail(s, RM_ERR_IO, "scratch file in '%s': reading %s: %s", s->page.dir, what,
                           e == RM_IO_CHANGED ? "it changed underneath (checksum)" : strerror(e));
}

static rm_status unit_write(rm_session *s, int u) {
    const rm_program *p = &s->train;
    const rm_page_unit *un = &p->units[u];
    int e = rm_scratch_write(&s->page.file, s->arena, un->bytes, p->unit_off[u]);
    rm_ioq *q = &s->page.q;
    if (!e && q->check) q->hash[u] = rm_hash_bytes(s->arena, un->bytes), q->hashed[u] = 1;
    s->page.staged = e ? 0 : u + 1;
    if (!e) return RM_OK;
    char what[RM_NAME_LEN + 96];
    rm_session_unit_name(s, un, what, sizeof what);
    return rm_session_fail(s, RM_ERR_IO, "scratch directory '%s': writing %s: %s; paging needs %.1f MiB there "
                           "(%llu bytes)", s->page.dir, what, strerror(e), (double)p->scratch_bytes / 1048576.0,
                           (unsigned long long)p->scratch_bytes);
}

/* Where float `at` of state `what` lies in its staged unit u. */
static float *staged_at(rm_session *s, int u, int what, int64_t at) {
    const rm_page_unit *un = &s->train.units[u];
    size_t part = what == 2 ? rm_page_round((size_t)(un->hi - un->lo) * sizeof(float)) : 0;
    return (float *)(s->arena + part) + (at - un->lo);
}

const void *rm_session_state_view(rm_session *s, int pi, int what, uint64_t off, uint64_t *len) {
    const int64_t at = (int64_t)(off / sizeof(float));
    int u = unit_of(s, pi, what, at);
    if (u < 0 || off % sizeof(float) || unit_read(s, u) != RM_OK) return NULL;
    *len = (uint64_t)(s->train.units[u].hi - at) * sizeof(float);
    return staged_at(s, u, what, at);
}

rm_status rm_session_state_store(rm_session *s, int pi, int what, const float *src) {
    const rm_program *p = &s->train;
    if (!s->arena) return rm_session_fail(s, RM_ERR_STATE, "the session has no arena to stage its paged state in");
    for (int u = 0; u < p->n_units; u++) {
        const rm_page_unit *un = &p->units[u];
        if (un->param != pi || un->kind == RM_UNIT_VALUE || (what == 0) != (un->kind == RM_UNIT_PARAM)) continue;
        rm_status rc = un->kind == RM_UNIT_MOMENTS ? unit_read(s, u) : RM_OK; /* m and v share a unit */
        if (rc != RM_OK) return rc;
        float *dst = staged_at(s, u, what, un->lo);
        size_t n = (size_t)(un->hi - un->lo) * sizeof(float);
        if (src) memmove(dst, src + un->lo, n); /* src may be the arena itself (init_params) */
        else memset(dst, 0, n);
        if ((rc = unit_write(s, u)) != RM_OK) return rc;
    }
    return RM_OK;
}

rm_status rm_session_state_write(rm_session *s, int pi, int what, uint64_t off, const void *src, size_t n) {
    const rm_program *p = &s->train;
    if (!s->arena) return rm_session_fail(s, RM_ERR_STATE, "the session has no arena to stage its paged state in");
    const int64_t lo = (int64_t)(off / sizeof(float)), hi = lo + (int64_t)(n / sizeof(float));
    for (int u = 0; u < p->n_units; u++) {
        const rm_page_unit *un = &p->units[u];
        if (un->param != pi || un->kind == RM_UNIT_VALUE || (what == 0) != (un->kind == RM_UNIT_PARAM)) continue;
        const int64_t a = lo > un->lo ? lo : un->lo, b = hi < un->hi ? hi : un->hi;
        if (a >= b) continue;
        rm_status rc = unit_read(s, u); /* the rest of the unit stays as it is */
        if (rc != RM_OK) return rc;
        memmove(staged_at(s, u, what, a), (const float *)src + (a - lo), (size_t)(b - a) * sizeof(float));
        if ((rc = unit_write(s, u)) != RM_OK) return rc;
    }
    return RM_OK;
}

rm_status rm_session_param_copy(rm_session *s, int pi, float *dst) {
    const rm_value *v = &s->g->vals[s->g->params[pi]];
    const uint64_t bytes = (uint64_t)v->numel * sizeof(float);
    if (v->store != RM_DTYPE_F32) { /* kept in 2 bytes (never paged): widened, exactly */
        const uint16_t *h = (const uint16_t *)(s->params + v->param_off);
        for (int64_t i = 0; i < v->numel; i++) dst[i] = v->store == RM_DTYPE_BF16 ? rm_bf16_to_f32(h[i]) : rm_f16_to_f32(h[i]);
        return RM_OK;
    }
    if (!rm_session_state_paged(s, pi, 0)) {
        memcpy(dst, s->params + v->param_off, (size_t)bytes);
        return RM_OK;
    }
    for (uint64_t off = 0, len = 0; off < bytes; off += len) {
        const void *p = rm_session_state_view(s, pi, 0, off, &len);
        if (!p) return RM_ERR_IO; /* unit_read named it on the session */
        if (len > bytes - off) len = bytes - off;
        memcpy((char *)dst + off, p, (size_t)len);
    }
    return RM_OK;
}
