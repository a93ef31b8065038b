/* page.c: the session's side of the scratch tier (issue 20).
 *
 * rm_compile opens the scratch file in rm_options.scratch_dir and measures
 * its bandwidth (a short write and read, unless scratch_bandwidth is
 * given) before anything is planned, so the plan can price paging. Each
 * schedule the session turns into a program first gets its paging items
 * (plan/paging/paging.c): forced by rm_options.page, or as the plan chose. Once
 * the programs are built, the file's space is allocated (a full disk is
 * found here, before training) and the I/O thread started with one request
 * slot per transfer of the train program. The executor hands every paging
 * instruction to rm_session_io: a page-out or page-in is submitted to the
 * I/O thread, a wait blocks until its transfer is done (an error or a
 * changed block stops the step, naming the directory), an update runs the
 * fused optimizer on staged moments. */
#include "exec/exec.h"
#include <math.h>
#include <stdio.h>
#include <sys/vfs.h>
#include <stdlib.h>
#include <string.h>

/* The probe: rounds of 16 MiB written and read back in 2 MiB transfers. */
#define PROBE_BYTES ((size_t)16 << 20)
#define PROBE_BUF ((size_t)4 << 20)
/* The most bytes of moments (m and v) one unit stages. */
#define MOMENT_CHUNK_BYTES ((size_t)8 << 20)

/* One product of the session's precision: fp32, or bf16 inputs (--precision bf16). */
static void product(int bf16, int n, const float *a, const float *b, float *c, const rm_mm_scratch *mm) {
    if (bf16) rm_gemm_bf16(0, 0, n, n, n, 1.0f, a, RM_DTYPE_F32, n, b, RM_DTYPE_F32, n, 0.0f, c, RM_DTYPE_F32, n, mm);
    else rm_sgemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

/* The compute rate the plan's first item times assume (a profile replaces
 * them): a 512 x 512 x 512 product of the session's precision timed, at 0.7
 * of its rate (the rest of a step is slower than its products). */
static double measure_flops_per_ms(int threads, int bf16) {
    const int n = 512;
    float *a = malloc((size_t)n * n * 3 * sizeof(float) + (bf16 ? rm_gemm_bf16_scratch(threads, n) : 0));
    if (!a) return 5e7;
    for (size_t i = 0; i < (size_t)n * n * 3; i++) a[i] = (float)(i % 7) * 0.125f;
    const rm_mm_scratch mm = {a + (size_t)n * n * 3, threads, n, 0};
    rm_set_threads(threads);
    product(bf16, n, a, a + n * n, a + 2 * n * n, &mm); /* warm up (loads OpenBLAS) */
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        double t0 = rm_now_ms();
        product(bf16, n, a, a + n * n, a + 2 * n * n, &mm);
        double dt = rm_now_ms() - t0;
        if (dt < best) best = dt;
    }
    free(a);
    return best > 0 ? 0.7 * 2.0 * n * n * (double)n / best : 5e7;
}

/* A fused AdamW update's time per float, ms: the same memory traffic and
 * arithmetic (w, g, m, v read; w, m, v written; a square root and a
 * division) over n floats on the session's threads, the best of 3 passes.
 * n: 1M floats (16 MiB, beyond the caches), less under a small limit (an
 * eighth of it: the buffers are freed before anything else is allocated). */
static double measure_update_ms_per_float(int threads, int64_t limit) {
    size_t n = (size_t)1 << 20;
    if (limit > 0 && (size_t)limit / 8 / 16 < n) n = (size_t)limit / 8 / 16;
    if (n < 4096) n = 4096;
    float *buf = malloc(4 * n * sizeof *buf);
    if (!buf) return 0;
    float *w = buf, *g = buf + n, *m = buf + 2 * n, *v = buf + 3 * n;
    for (size_t i = 0; i < 4 * n; i++) buf[i] = (float)(i % 13) * 0.01f;
    rm_set_threads(threads);
    double best = 1e30;
    for (int k = 0; k < 3; k++) {
        double t0 = rm_now_ms();
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            m[i] = 0.9f * m[i] + 0.1f * g[i];
            v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
            w[i] = w[i] * 0.9999f - 1e-3f * m[i] / (sqrtf(v[i]) + 1e-8f);
        }
        double dt = rm_now_ms() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    return best > 0 ? best / (double)n : 0;
}

/* The probe's rounds: the median of PROBE_ROUNDS (odd) rounds of
 * PROBE_BYTES written and read back, after a first write that allocates
 * the file's blocks (slower, not counted). A single 32 MiB pass, as it
 * was, read 0.9 to 3.5 GB/s from run to run on one disk: a spike of the
 * shared disk, or its first allocation, set the plan (what is paged, the
 * predicted step). Fewer rounds past PROBE_MS (a slow disk), never fewer
 * than 3 (docs/RECOMPUTE.md, "How stable is the bandwidth"). */
#define PROBE_ROUNDS 9
#define PROBE_MS 1000.0

/* One pass of `bytes` written (write) or read through the queue, two
 * halves of the buffer in flight; its bandwidth in *bps, or an errno. */
static int probe_pass(rm_ioq *q, unsigned char *buf, size_t bytes, int write, double *bps) {
    const size_t half = PROBE_BUF / 2;
    int e = 0;
    double t0 = rm_now_ms();
    for (size_t off = 0, k = 0; off < bytes && !e; off += half, k++) {
        const int slot = (int)(k % 2);
        if (k >= 2) e = rm_ioq_wait(q, slot); /* the slot's last transfer, before it is reused */
        q->req[slot] = (rm_io_req){.buf = buf + (size_t)slot * half, .bytes = half, .off = off, .write = write,
                                   .region = -1};
        if (!e) rm_ioq_submit(q, slot);
    }
    for (int slot = 0; slot < 2 && !e; slot++) e = rm_ioq_wait(q, slot);
    double dt = rm_now_ms() - t0;
    *bps = (double)bytes / ((dt > 1e-3 ? dt : 1e-3) * 1e-3);
    return e;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n figures (sorted in place); the slowest and fastest in range. */
static double median_of(double *x, int n, double range[2]) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    range[0] = x[0], range[1] = x[n - 1];
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* The file's bandwidth as the steps will see it (the queue, io_uring or
 * the I/O thread), the median of the rounds; after a synchronous 4 KiB
 * transfer that tells a disk too full or a file system that fails (its
 * message names the bytes). */
static rm_status probe(rm_session *s, unsigned char *buf, char *err, size_t errlen) {
    rm_scratch *sc = &s->page.file;
    size_t bytes = PROBE_BYTES, half = PROBE_BUF / 2;
    double bps[2] = {0, 0}, w[PROBE_ROUNDS], r[PROBE_ROUNDS];
    int save_w = sc->n_writes, save_r = sc->n_reads;
    rm_status rc = rm_scratch_probe(sc, buf, RM_PAGE_ALIGN, RM_PAGE_ALIGN, &bps[0], &bps[1], err, errlen);
    if (rc != RM_OK) return rc;
    struct statfs fs; /* on a nearly full disk, a smaller probe (an eighth of what is free) */
    if (fstatfs(sc->fd, &fs) == 0 && (uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize / 8 < bytes)
        bytes = (size_t)((uint64_t)fs.f_bavail * (uint64_t)fs.f_bsize / 8) / half * half;
    rm_ioq q;
    if (bytes < 2 * half || rm_ioq_start(&q, sc, 2, 0, 0) != RM_OK) {
        s->page.probe_rounds = 1;
        rc = rm_scratch_probe(sc, buf, PROBE_BUF, bytes, &s->page.write_bps, &s->page.read_bps, err, errlen);
        s->page.probe_write[0] = s->page.probe_write[1] = s->page.write_bps;
        s->page.probe_read[0] = s->page.probe_read[1] = s->page.read_bps;
        return rc;
    }
    memset(buf, 0x5a, PROBE_BUF);
    double t0 = rm_now_ms(), first;
    int e = probe_pass(&q, buf, bytes, 1, &first), n = 0; /* allocates the blocks: not counted */
    while (!e && n < PROBE_ROUNDS && (n < 3 || rm_now_ms() - t0 < PROBE_MS)) {
        e = probe_pass(&q, buf, bytes, 1, &w[n]);
        if (!e) e = probe_pass(&q, buf, bytes, 0, &r[n]);
        n += !e;
    }
    rm_ioq_stop(&q);
    sc->n_writes = save_w, sc->n_reads = save_r; /* the probe does not count for injected faults */
    if (e) {
        snprintf(err, errlen, "scratch directory '%s': measuring its bandwidth (writing and reading %.1f MiB, %zu "
                 "bytes): %s", sc->dir, (double)bytes / 1048576.0, bytes, strerror(e));
        return RM_ERR_IO;
    }
    if (n % 2 == 0 && n > 1) n--; /* an odd count: the median is a measured round */
    s->page.write_bps = median_of(w, n, s->page.probe_write);
    s->page.read_bps = median_of(r, n, s->page.probe_read);
    s->page.probe_rounds = n;
    return RM_OK;
}

rm_status rm_session_scratch_open(rm_session *s) {
    s->page.flops_per_ms = 5e7;
    if (!s->opt.scratch_dir) return RM_OK;
    s->page.flops_per_ms = measure_flops_per_ms(s->threads, s->opt.precision == RM_PRECISION_BF16);
    s->page.update_ms_per_float = measure_update_ms_per_float(s->threads, s->opt.limit_bytes);
    char err[700];
    rm_status rc = rm_scratch_open(&s->page.file, s->page.dir, err, sizeof err);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    s->page.open = 1;
    if (s->opt.scratch_bandwidth > 0) { /* given (or a resumed run's): no probe */
        s->page.write_bps = s->opt.scratch_bandwidth;
        s->page.read_bps = s->opt.scratch_read_bandwidth > 0 ? s->opt.scratch_read_bandwidth : s->opt.scratch_bandwidth;
        return RM_OK;
    }
    void *buf = NULL;
    if (posix_memalign(&buf, RM_PAGE_ALIGN, PROBE_BUF) != 0)
        return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory measuring the scratch file's bandwidth");
    rc = probe(s, buf, err, sizeof err);
    free(buf);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    return RM_OK;
}

/* Whether parameter v may live in the scratch file: trainable ones, and
 * frozen ones kept in floats. A frozen parameter kept in 2 bytes
 * (rm_param_store) stays in memory: the transfers, staging buffers and
 * checksums of paged state are floats. */
int rm_param_pageable(const rm_value *v) { return v->trainable || (v->frozen && v->store == RM_DTYPE_F32); }

/* The state to page: fixed at the first plan of the session (the file's
 * layout of it must not change once it holds the state). */
static rm_status state_marks(rm_session *s) {
    const rm_graph *g = s->g;
    if (s->page.moments || !(s->opt.page & (RM_PAGE_MOMENTS | RM_PAGE_PARAMS))) return RM_OK;
    const size_t n = (size_t)(g->n_params ? g->n_params : 1);
    s->page.moments = calloc(n, 1);
    s->page.params = calloc(n, 1);
    if (!s->page.moments || !s->page.params) return RM_ERR_NOMEM;
    for (int pi = 0; pi < g->n_params; pi++) {
        const rm_value *v = &g->vals[g->params[pi]];
        if (v->trainable) s->page.moments[pi] = 1;
        if (rm_param_pageable(v)) s->page.params[pi] = (s->opt.page & RM_PAGE_PARAMS) != 0;
    }
    return RM_OK;
}

void rm_session_paged_bytes(const rm_session *s, size_t *params, size_t *moments) {
    *params = *moments = 0;
    for (int pi = 0; pi < s->g->n_params; pi++) {
        size_t b = (size_t)s->g->vals[s->g->params[pi]].numel * sizeof(float);
        if (s->page.params && s->page.params[pi]) *params += b;
        if (s->page.moments && s->page.moments[pi]) *moments += b;
    }
}

rm_status rm_session_page_schedule(rm_session *s, rm_schedule *sch, const rm_profile *prof, int backward) {
    const rm_graph *g = s->g;
    if (!s->page.open && !s->page.planning) return RM_OK;
    if (state_marks(s) != RM_OK) return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory planning the paging");
    char *values = NULL;
    if (backward && (s->opt.page & RM_PAGE_ACTIVATIONS)) {
        values = malloc((size_t)(g->n_vals ? g->n_vals : 1));
        if (!values) return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory planning the paging");
        for (int v = 0; v < g->n_vals; v++) values[v] = g->vals[v].kind == RM_VALUE_ACT;
    } else if (backward && s->page.values) {
        values = malloc((size_t)(g->n_vals ? g->n_vals : 1));
        if (!values) return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory planning the paging");
        memcpy(values, s->page.values, (size_t)g->n_vals);
    }
    if (!values && !s->page.params && !(backward && s->page.moments)) return RM_OK;
    double *ms = malloc(((size_t)sch->n + 1) * sizeof *ms);
    if (!ms) {
        free(values);
        return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory planning the paging");
    }
    rm_schedule_item_ms(g, sch, prof, s->page.flops_per_ms, s->page.update_ms_per_float,
                        backward ? s->page.moments : NULL, ms);
    rm_page_opts o = {values, s->page.moments, s->page.params, ms, s->page.write_bps,
                      s->page.read_bps, s->page.chunk_bytes ? s->page.chunk_bytes : MOMENT_CHUNK_BYTES, !backward,
                      s->page.update_ms_per_float, s->page.max_staged};
    rm_schedule paged;
    char err[256];
    double stall = 0, step = 0;
    rm_status rc = rm_schedule_page(g, sch, &o, &paged, &stall, &step, err, sizeof err);
    free(values), free(ms);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    rm_schedule_free(sch);
    *sch = paged;
    if (backward) s->page.predicted_wait_ms = stall, s->page.predicted_step_ms = step;
    return RM_OK;
}

rm_status rm_session_scratch_start(rm_session *s) {
    if (!s->page.open) return RM_OK;
    const rm_program *p = &s->train;
    uint64_t bytes = p->scratch_bytes > s->infer.scratch_bytes ? p->scratch_bytes : s->infer.scratch_bytes;
    char err[700];
    rm_status rc = rm_scratch_reserve(&s->page.file, bytes ? bytes : RM_PAGE_ALIGN, err, sizeof err);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    int n_io = p->n_io > s->infer.n_io ? p->n_io : s->infer.n_io;
    int n_regions = p->n_regions > s->infer.n_regions ? p->n_regions : s->infer.n_regions;
    rm_ioq *q = &s->page.q;
    if (n_io == 0 || (q->running && n_io <= q->n_req && n_regions <= q->n_regions))
        return RM_OK; /* nothing to move (no I/O thread), or the queue has room for every transfer */
    /* a new program (the profiled re-plan) with more transfers: the queue
     * again, larger, between steps (nothing in flight); the checksums of
     * the regions written so far (the state's) carried over */
    const int old_regions = q->running ? q->n_regions : 0;
    uint64_t *hash = old_regions ? malloc((size_t)old_regions * sizeof *hash) : NULL;
    char *hashed = old_regions ? malloc((size_t)old_regions) : NULL;
    if (old_regions && (!hash || !hashed)) {
        free(hash), free(hashed);
        return rm_graph_fail(s->g, RM_ERR_NOMEM, "cannot start the scratch file's I/O thread");
    }
    if (old_regions) {
        memcpy(hash, q->hash, (size_t)old_regions * sizeof *hash);
        memcpy(hashed, q->hashed, (size_t)old_regions);
    }
    rm_ioq_stop(q);
    rc = rm_ioq_start(q, &s->page.file, n_io, n_regions, s->opt.verify_recompute);
    if (rc == RM_OK && old_regions) {
        const int n = old_regions < n_regions ? old_regions : n_regions;
        memcpy(q->hash, hash, (size_t)n * sizeof *hash), memcpy(q->hashed, hashed, (size_t)n);
    }
    free(hash), free(hashed);
    if (rc != RM_OK) return rm_graph_fail(s->g, RM_ERR_NOMEM, "cannot start the scratch file's I/O thread");
    return RM_OK;
}

/* A wait that found an error: every transfer in flight finished first (the
 * buffers are the arena's), then the step fails naming the directory. */
static rm_status io_failed(rm_session *s, const rm_program *p, int slot, int e) {
    rm_ioq_drain(&s->page.q);
    const rm_io_slot *io = &p->io[slot];
    char what[RM_NAME_LEN + 96];
    rm_session_unit_name(s, &p->units[io->unit], what, sizeof what);
    if (e == RM_IO_CHANGED)
        return rm_session_fail(s, RM_ERR_IO, "scratch file in '%s' changed underneath: %s (%zu bytes at offset %llu) "
                               "read back different from what was written; not training on it", s->page.dir, what,
                               io->bytes, (unsigned long long)io->off);
    return rm_session_fail(s, RM_ERR_IO, "scratch directory '%s': %s %s (%zu bytes at offset %llu): %s; paging "
                           "needs %.1f MiB there (%llu bytes)", s->page.dir, io->write ? "writing" : "reading", what,
                           io->bytes, (unsigned long long)io->off, strerror(e), (double)p->scratch_bytes / 1048576.0,
                           (unsigned long long)p->scratch_bytes);
}

rm_status rm_session_io(rm_session *s, const rm_program *p, const rm_instr *ins, int train) {
    rm_ioq *q = &s->page.q;
    if (ins->kind == RM_INSTR_UPDATE) {
        const rm_page_unit *u = &p->units[ins->node];
        if (!train || !p->fused || !s->fused.o) return RM_OK; /* the profiling step: no optimizer yet */
        const rm_value *v = &s->g->vals[u->value];
        float *w = ins->in_buf[0] >= 0 ? (float *)(s->arena + p->bufs[ins->in_buf[0]].offset) : s->params + v->param_off;
        float *g = ins->din_buf[0] >= 0 ? (float *)(s->arena + p->bufs[ins->din_buf[0]].offset) : NULL;
        float *m = (float *)(s->arena + p->bufs[ins->out_buf[0]].offset);
        float *mv = m + rm_page_round((size_t)(u->hi - u->lo) * sizeof(float)) / sizeof(float);
        s->fused.update_chunk(s->fused.o, u->param, u->lo, u->hi, g, w, m, mv);
        return RM_OK;
    }
    if (!q->running || ins->io < 0 || ins->io >= q->n_req) /* the queue is sized for every program it runs */
        return rm_session_fail(s, RM_ERR_STATE, "internal error: transfer %d of the step program has no slot in the "
                               "scratch file's queue (%d slots)", ins->io, q->running ? q->n_req : 0);
    if (ins->kind == RM_INSTR_WAIT) {
        double t0 = rm_now_ms();
        int e = rm_ioq_wait(q, ins->io);
        s->page.wait_ms += rm_now_ms() - t0;
        return e ? io_failed(s, p, ins->io, e) : RM_OK;
    }
    const rm_io_slot *io = &p->io[ins->io];
    rm_io_req *r = &q->req[ins->io];
    r->buf = s->arena + p->bufs[io->buf].offset;
    r->bytes = io->bytes;
    r->off = io->off;
    r->write = io->write;
    r->region = io->region;
    rm_ioq_submit(q, ins->io);
    return RM_OK;
}

void rm_session_scratch_close(rm_session *s) {
    rm_ioq_stop(&s->page.q);
    if (s->page.open) rm_scratch_close(&s->page.file);
    s->page.open = 0;
    free(s->page.moments);
    free(s->page.params);
    free(s->page.values);
    s->page.moments = s->page.params = s->page.values = NULL;
}

void rm_paging(const rm_session *s, rm_paging_info *pi) {
    if (!pi) return;
    memset(pi, 0, sizeof *pi);
    if (!s || !s->page.open) return;
    const rm_program *p = &s->train;
    pi->enabled = 1;
    pi->direct = s->page.file.direct;
    pi->write_bps = s->page.write_bps, pi->read_bps = s->page.read_bps;
    pi->probe_rounds = s->page.probe_rounds;
    pi->write_bps_min = s->page.probe_write[0], pi->write_bps_max = s->page.probe_write[1];
    pi->read_bps_min = s->page.probe_read[0], pi->read_bps_max = s->page.probe_read[1];
    pi->scratch_bytes = s->page.file.reserved;
    pi->state_bytes = p->state_scratch_bytes;
    for (int u = 0; u < p->n_units; u++) {
        pi->values_paged += p->units[u].kind == RM_UNIT_VALUE;
        pi->params_paged += p->units[u].kind == RM_UNIT_PARAM;
        pi->moments_paged += p->units[u].kind == RM_UNIT_MOMENTS && p->units[u].lo == 0;
    }
    pi->out_bytes = p->page_out_bytes, pi->in_bytes = p->page_in_bytes;
    pi->out_bytes_measured = s->page.q.bytes_out, pi->in_bytes_measured = s->page.q.bytes_in;
    pi->io_ms = s->page.q.busy_ms, pi->wait_ms = s->page.wait_ms;
    pi->overlap = pi->io_ms > 0 ? 1.0 - pi->wait_ms / pi->io_ms : 0;
    if (pi->overlap < 0) pi->overlap = 0;
    pi->predicted_wait_ms = s->page.predicted_wait_ms;
    pi->predicted_step_ms = s->page.predicted_step_ms;
    pi->predicted_recompute_ms = s->prof.node_fwd ? rm_recompute_cost(s->g, p, &s->prof) : 0;
}

