/* ioq.c: the I/O queue of the scratch tier. One thread runs the transfers
 * a step submits, in order, while the step's own threads compute: a
 * page-out starts after a value's last forward reader and a page-in some
 * instructions ahead of its first backward reader, and the step waits on a
 * transfer only where the program says (its wait instruction). The thread
 * spends its time blocked in pread/pwrite (O_DIRECT: the disk moves the
 * bytes), so it does not compete with the compute threads for the cores.
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

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

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
        double t0 = now_ms();
        int e = run_request(q, r);
        double t1 = now_ms();
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
    pthread_mutex_lock(&q->mu);
    q->req[i].done = 0;
    q->req[i].err = 0;
    q->ring[q->tail] = i;
    q->tail = (q->tail + 1) % (q->n_req + 1);
    pthread_cond_signal(&q->work);
    pthread_mutex_unlock(&q->mu);
}

int rm_ioq_wait(rm_ioq *q, int i) {
    pthread_mutex_lock(&q->mu);
    while (!q->req[i].done) pthread_cond_wait(&q->done, &q->mu);
    int e = q->req[i].err;
    pthread_mutex_unlock(&q->mu);
    return e;
}

void rm_ioq_drain(rm_ioq *q) {
    if (!q->running) return;
    pthread_mutex_lock(&q->mu);
    while (q->head != q->tail) pthread_cond_wait(&q->done, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void rm_ioq_clear_stats(rm_ioq *q) {
    pthread_mutex_lock(&q->mu);
    q->busy_ms = 0;
    q->bytes_out = q->bytes_in = 0;
    pthread_mutex_unlock(&q->mu);
}

void rm_ioq_stop(rm_ioq *q) {
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
