/* ioq.c: the I/O queue of the scratch tier. The transfers a step submits
 * run while the step's own threads compute: a page-out starts after a
 * value's last forward reader and a page-in some instructions ahead of its
 * first backward reader, and the step waits on a transfer only where the
 * program says (its wait instruction).
 *
 * Two ways to run them. With io_uring (liburing; REMAT_HAVE_URING, and the
 * kernel must allow it: a container's seccomp may not) the step's thread
 * hands each transfer to the kernel and returns; the disk works on several
 * at once (an NVMe disk reaches its bandwidth only so: measured here, 8 MiB
 * O_DIRECT reads at 0.87 GB/s one at a time, 1.7 GB/s two at a time), and
 * no thread of ours has to be scheduled for the bytes to move, which on a
 * busy machine is what slowed the other way. Completions are reaped when a
 * wait needs them or between instructions (rm_ioq_poll). Otherwise one
 * thread runs them in order, blocked in pread/pwrite (O_DIRECT: the disk
 * moves the bytes).
 *
 * Requests are slots of a table made once, at compile time: submitting one
 * puts its index on a ring, so a step allocates nothing. With `check` every
 * region written is hashed (rm_hash_bytes) and every read compared with the
 * hash: a scratch file changed underneath is caught before its bytes are
 * used (RM_IO_CHANGED). */
#include "util/scratch.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef REMAT_HAVE_URING
#include <liburing.h>
#endif

/* One transfer, and its checksum: a write records the region's hash, a
 * read must find the same bytes. */
static int run_request(rm_ioq *q, rm_io_req *r) {
    int e = r->write ? rm_scratch_write(q->sc, r->buf, r->bytes, r->off) : rm_scratch_read(q->sc, r->buf, r->bytes, r->off);
    if (e || !q->check || r->region < 0 || r->region >= q->n_regions) return e;
    uint64_t h = rm_hash_bytes(r->buf, r->bytes);
    if (r->write) {
        q->hash[r->region] = h;
        q->hashed[r->region] = 1;
    } else if (q->hashed[r->region] && q->hash[r->region] != h) {
        return RM_IO_CHANGED;
    }
    return 0;
}

static void *io_thread(void *arg) {
    rm_ioq *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (q->head == q->tail && !q->stop) pthread_cond_wait(&q->work, &q->mu);
        if (q->head == q->tail && q->stop) break;
        int i = q->ring[q->head];
        pthread_mutex_unlock(&q->mu);
        rm_io_req *r = &q->req[i];
        double t0 = rm_now_ms();
        int e = run_request(q, r);
        double t1 = rm_now_ms();
        pthread_mutex_lock(&q->mu);
        r->t0 = t0, r->t1 = t1, r->err = e, r->done = 1;
        q->busy_ms += t1 - t0;
        if (!e) *(r->write ? &q->bytes_out : &q->bytes_in) += r->bytes;
        q->head = (q->head + 1) % (q->n_req + 1);
        pthread_cond_broadcast(&q->done);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* ---- io_uring ------------------------------------------------------------------ */
#ifdef REMAT_HAVE_URING
enum { RING_ENTRIES = 128 };

static void ring_busy(rm_ioq *q, int delta) {
    if (q->inflight == 0 && delta > 0) q->busy_t0 = rm_now_ms();
    q->inflight += delta;
    if (q->inflight == 0 && delta < 0) q->busy_ms += rm_now_ms() - q->busy_t0;
}

/* The pieces of a transfer: up to 4 of at least 1 MiB, 4 KiB aligned. */
static size_t piece_size(const rm_io_req *r) {
    return ((r->bytes + (size_t)r->pieces - 1) / (size_t)r->pieces + RM_PAGE_ALIGN - 1) / RM_PAGE_ALIGN * RM_PAGE_ALIGN;
}

static void piece_span(const rm_io_req *r, int k, size_t *at, size_t *len) {
    size_t ps = piece_size(r);
    *at = (size_t)k * ps;
    *len = *at >= r->bytes ? 0 : r->bytes - *at < ps ? r->bytes - *at : ps;
}

/* Hands (the rest of) piece k of slot i to the kernel. */
static int ring_push(rm_ioq *q, int i, int k) {
    struct io_uring *ring = q->uring;
    rm_io_req *r = &q->req[i];
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) { /* full: hand over what is queued, then there is room */
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    if (!sqe) return EAGAIN;
    size_t at, len;
    piece_span(r, k, &at, &len);
    at += r->moved[k], len -= r->moved[k];
    if (len > ((size_t)1 << 30)) len = (size_t)1 << 30; /* a transfer's length is 32-bit */
    if (r->write) io_uring_prep_write(sqe, q->sc->fd, r->buf + at, (unsigned)len, r->off + at);
    else io_uring_prep_read(sqe, q->sc->fd, r->buf + at, (unsigned)len, r->off + at);
    io_uring_sqe_set_data64(sqe, (uint64_t)i << 3 | (uint64_t)k);
    return 0;
}

static void ring_done(rm_ioq *q, rm_io_req *r, int err) {
    r->t1 = rm_now_ms(), r->err = err, r->done = 1;
    ring_busy(q, -1);
    if (err) return;
    *(r->write ? &q->bytes_out : &q->bytes_in) += r->bytes;
    if (r->write && r->corrupt) rm_scratch_corrupt(q->sc, r->off);
    if (!q->check || r->region < 0 || r->region >= q->n_regions) return;
    if (r->write) {
        q->hash[r->region] = r->hash, q->hashed[r->region] = 1;
    } else if (q->hashed[r->region] && q->hash[r->region] != rm_hash_bytes(r->buf, r->bytes)) {
        r->err = RM_IO_CHANGED;
    }
}

/* A piece over (or failed): the transfer is done once all its pieces are. */
static void piece_over(rm_ioq *q, rm_io_req *r, int err) {
    if (err && !r->first_err) r->first_err = err;
    if (--r->pieces_left == 0) ring_done(q, r, r->first_err);
}

/* One completion: a piece done, failed, or short (its rest resubmitted). */
static void ring_reap(rm_ioq *q, struct io_uring_cqe *cqe) {
    const uint64_t data = io_uring_cqe_get_data64(cqe);
    const int i = (int)(data >> 3), k = (int)(data & 7), res = cqe->res;
    io_uring_cqe_seen(q->uring, cqe);
    if (i < 0 || i >= q->n_req || k >= q->req[i].pieces) return;
    rm_io_req *r = &q->req[i];
    size_t at, len;
    piece_span(r, k, &at, &len);
    if (res < 0 && res != -EINTR && res != -EAGAIN) return piece_over(q, r, -res);
    if (res == 0) return piece_over(q, r, r->write ? ENOSPC : EIO); /* the disk is full, or the file short */
    if (res > 0) r->moved[k] += (size_t)res;
    if (r->moved[k] >= len) return piece_over(q, r, 0);
    int e = ring_push(q, i, k); /* short, or interrupted: the rest */
    if (!e && io_uring_submit(q->uring) < 0) e = EIO;
    if (e) piece_over(q, r, e);
}

static void ring_submit(rm_ioq *q, int i) {
    rm_io_req *r = &q->req[i];
    r->done = 0, r->err = 0, r->first_err = 0, r->t0 = rm_now_ms(), r->t1 = 0;
    r->pieces = r->bytes >= ((size_t)2 << 20) ? (int)(r->bytes >> 20) : 1;
    if (r->pieces > 4) r->pieces = 4;
    memset(r->moved, 0, sizeof r->moved);
    ring_busy(q, 1);
    int e = rm_scratch_fault(q->sc, r->write, &r->corrupt);
    if (!e && r->write && q->check) r->hash = rm_hash_bytes(r->buf, r->bytes);
    if (e) {
        ring_done(q, r, e);
        return;
    }
    int pushed = 0;
    while (pushed < r->pieces && !(e = ring_push(q, i, pushed))) pushed++;
    if (pushed && io_uring_submit(q->uring) < 0) pushed = 0, e = e ? e : EIO; /* none of them went */
    r->pieces_left = pushed; /* the pieces in flight: each completes, then the transfer is over */
    if (e) r->first_err = e;
    if (pushed == 0) ring_done(q, r, e);
}

static int ring_wait(rm_ioq *q, int i) {
    while (!q->req[i].done) {
        struct io_uring_cqe *cqe = NULL;
        int e = io_uring_wait_cqe(q->uring, &cqe);
        if (e == -EINTR) continue;
        if (e < 0 || !cqe) { /* the ring itself failed: nothing more will complete */
            ring_done(q, &q->req[i], -e);
            break;
        }
        ring_reap(q, cqe);
    }
    return q->req[i].err;
}

static int ring_start(rm_ioq *q) {
    struct io_uring *ring = calloc(1, sizeof *ring);
    if (!ring || io_uring_queue_init(RING_ENTRIES, ring, 0) < 0) {
        free(ring);
        return 0;
    }
    q->uring = ring;
    return 1;
}
#endif

void rm_ioq_poll(rm_ioq *q) {
#ifdef REMAT_HAVE_URING
    struct io_uring_cqe *cqe;
    while (q->uring && q->inflight > 0 && io_uring_peek_cqe(q->uring, &cqe) == 0 && cqe) ring_reap(q, cqe);
#else
    (void)q;
#endif
}

rm_status rm_ioq_start(rm_ioq *q, rm_scratch *sc, int n_req, int n_regions, int check) {
    memset(q, 0, sizeof *q);
    q->sc = sc;
    q->n_req = n_req;
    q->n_regions = n_regions;
    q->check = check;
    q->req = calloc((size_t)(n_req > 0 ? n_req : 1), sizeof *q->req);
    q->ring = calloc((size_t)n_req + 1, sizeof *q->ring);
    q->hash = calloc((size_t)(n_regions > 0 ? n_regions : 1), sizeof *q->hash);
    q->hashed = calloc((size_t)(n_regions > 0 ? n_regions : 1), 1);
    if (!q->req || !q->ring || !q->hash || !q->hashed) {
        rm_ioq_stop(q);
        return RM_ERR_NOMEM;
    }
    for (int i = 0; i < n_req; i++) q->req[i].done = 1; /* nothing in flight */
#ifdef REMAT_HAVE_URING
    if (!getenv("REMAT_NO_URING") && ring_start(q)) { /* REMAT_NO_URING: the thread (tests, comparisons) */
        q->running = 1;
        return RM_OK;
    }
#endif
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->work, NULL);
    pthread_cond_init(&q->done, NULL);
    if (pthread_create(&q->thread, NULL, io_thread, q) != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->done);
        rm_ioq_stop(q);
        return RM_ERR_NOMEM;
    }
    q->running = 1;
    return RM_OK;
}

void rm_ioq_submit(rm_ioq *q, int i) {
#ifdef REMAT_HAVE_URING
    if (q->uring) return ring_submit(q, i);
#endif
    pthread_mutex_lock(&q->mu);
    q->req[i].done = 0;
    q->req[i].err = 0;
    q->ring[q->tail] = i;
    q->tail = (q->tail + 1) % (q->n_req + 1);
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
}

int rm_ioq_wait(rm_ioq *q, int i) {
#ifdef REMAT_HAVE_URING
    if (q->uring) return ring_wait(q, i);
#endif
    pthread_mutex_lock(&q->mu);
    while (!q->req[i].done) pthread_cond_wait(&q->done, &q->mu);
    int e = q->req[i].err;
    pthread_mutex_unlock(&q->mu);
    return e;
}

void rm_ioq_drain(rm_ioq *q) {
    if (!q->running) return;
#ifdef REMAT_HAVE_URING
    if (q->uring) {
        for (int i = 0; i < q->n_req; i++)
            if (!q->req[i].done) ring_wait(q, i);
        return;
    }
#endif
    pthread_mutex_lock(&q->mu);
    while (q->head != q->tail) pthread_cond_wait(&q->done, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void rm_ioq_clear_stats(rm_ioq *q) {
    if (q->uring) {
        q->busy_ms = 0, q->bytes_out = q->bytes_in = 0;
        q->busy_t0 = rm_now_ms();
        return;
    }
    pthread_mutex_lock(&q->mu);
    q->busy_ms = 0;
    q->bytes_out = q->bytes_in = 0;
    pthread_mutex_unlock(&q->mu);
}

void rm_ioq_stop(rm_ioq *q) {
#ifdef REMAT_HAVE_URING
    if (q->uring) {
        rm_ioq_drain(q);
        io_uring_queue_exit(q->uring);
        free(q->uring);
        q->uring = NULL, q->running = 0;
    }
#endif
    if (q->running) {
        pthread_mutex_lock(&q->mu);
        q->stop = 1;
        pthread_cond_signal(&q->work);
        pthread_mutex_unlock(&q->mu);
        pthread_join(q->thread, NULL);
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->done);
    }
    free(q->req);
    free(q->ring);
    free(q->hash);
    free(q->hashed);
    memset(q, 0, sizeof *q);
}
