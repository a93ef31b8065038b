/* memplan.c: the memory layout of a step program. Every buffer gets an
 * offset in one activation arena such that buffers alive at the same time
 * never overlap. The arena is allocated once, before the first step.
 *
 * Method: greedy by size (largest buffers first, each at the lowest offset
 * that does not collide with an already placed buffer whose lifetime
 * overlaps; the placed buffers are kept sorted by offset, so finding that
 * offset is one scan that stops at the first wide-enough gap). Lifetimes
 * are intervals of instruction indices, so "alive at the same time" is
 * interval overlap. The result is never below the peak
 * of live bytes (program.c) and is usually within a few percent of it.
 * Buffers moved to or from the scratch file (`paged`) start at multiples
 * of RM_PAGE_ALIGN, as O_DIRECT transfers need (the arena is allocated so
 * aligned). */
#include "plan/plan.h"
#include <stdlib.h>
#include <string.h>

/* Sort keys carry what the comparison needs, so qsort needs no context. */
typedef struct key { size_t bytes; int first, id; } key;

static int by_size_desc(const void *a, const void *b) {
    const key *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->id - y->id;
}

/* A placed buffer. The placed buffers are kept sorted by offset, in chunks
 * of at most CHUNK (so an insertion moves at most a chunk), each chunk with
 * the span of its buffers' lifetimes (so a scan skips the chunks that do
 * not overlap the buffer being placed). */
typedef struct slot { size_t offset, end; int first, last; } slot;
enum { CHUNK = 256 };
typedef struct chunk {
    int n, first, last;
    slot e[CHUNK];
} chunk;
typedef struct placed {
    chunk **c, *pool;
    int n, used;
} placed;

static int overlaps(int first, int last, const rm_buffer *b) { return first <= b->last && b->first <= last; }

/* The lowest offset where `b` fits beside the placed buffers whose
 * lifetimes overlap its own: scanning them by offset, the first gap wide
 * enough. Only those buffers decide it; and once a placed buffer starts
 * above the candidate's end, every later one does too, so the scan stops. */
static size_t lowest_fit(const placed *pl, const rm_buffer *b) {
    size_t off = 0;
    for (int k = 0; k < pl->n; k++) {
        const chunk *c = pl->c[k];
        if (c->e[0].offset >= off + b->bytes) break;
        if (!overlaps(c->first, c->last, b)) continue;
        for (int j = 0; j < c->n; j++) {
            const slot *o = &c->e[j];
            if (o->offset >= off + b->bytes) return off; /* fits in the gap before o (and all after it) */
            if (o->end > off && overlaps(o->first, o->last, b)) off = b->paged ? rm_page_round(o->end) : o->end;
        }
    }
    return off;
}

static void bounds(chunk *c) {
    c->first = c->e[0].first, c->last = c->e[0].last;
    for (int j = 1; j < c->n; j++) {
        if (c->e[j].first < c->first) c->first = c->e[j].first;
        if (c->e[j].last > c->last) c->last = c->e[j].last;
    }
}

/* (offset, first) order: by offset, and by time within one offset, so a
 * chunk of buffers at one offset spans a short time (buffers at one offset
 * never overlap in time) and scans skip it. */
static int before(const slot *a, const slot *b) {
    return a->offset < b->offset || (a->offset == b->offset && a->first <= b->first);
}

/* Inserts s in (offset, first) order. */
static void insert(placed *pl, slot s) {
    if (pl->n == 0) {
        pl->c[pl->n++] = &pl->pool[pl->used++];
        pl->c[0]->n = 0;
    }
    int k = 0, hi = pl->n; /* the last chunk starting at or below s, else the first */
    while (hi - k > 1) {
        int mid = (k + hi) / 2;
        if (before(&pl->c[mid]->e[0], &s)) k = mid;
        else hi = mid;
    }
    chunk *c = pl->c[k];
    if (c->n == CHUNK) { /* split it in two halves */
        chunk *d = &pl->pool[pl->used++];
        d->n = CHUNK / 2, c->n = CHUNK - CHUNK / 2;
        memcpy(d->e, c->e + c->n, sizeof *d->e * (size_t)d->n);
        bounds(c), bounds(d);
        memmove(pl->c + k + 2, pl->c + k + 1, sizeof *pl->c * (size_t)(pl->n - k - 1));
        pl->c[k + 1] = d, pl->n++;
        if (before(&d->e[0], &s)) c = d;
    }
    int at = 0, top = c->n;
    while (at < top) {
        int mid = (at + top) / 2;
        if (before(&c->e[mid], &s)) at = mid + 1;
        else top = mid;
    }
    memmove(c->e + at + 1, c->e + at, sizeof *c->e * (size_t)(c->n - at));
    c->e[at] = s;
    if (c->n++ == 0 || s.first < c->first) c->first = s.first;
    if (c->n == 1 || s.last > c->last) c->last = s.last;
}

void rm_memplan(rm_program *p) {
    int n = p->n_bufs;
    p->arena_bytes = 0;
    if (n == 0) return;
    int max_chunks = 2 * (n / CHUNK) + 2; /* every split leaves two chunks at least half full */
    key *order = malloc((size_t)n * sizeof *order);
    placed pl = {malloc(sizeof *pl.c * (size_t)max_chunks), malloc(sizeof *pl.pool * (size_t)max_chunks), 0, 0};
    if (!order || !pl.c || !pl.pool) {
        /* fall back to no reuse at all: correct, just larger */
        size_t off = 0;
        for (int b = 0; b < n; b++) {
            if (p->bufs[b].paged) off = rm_page_round(off);
            p->bufs[b].offset = off;
            off += p->bufs[b].bytes;
        }
        p->arena_bytes = off;
        free(order), free(pl.c), free(pl.pool);
        return;
    }
    for (int b = 0; b < n; b++)
        order[b] = (key){p->bufs[b].bytes, p->bufs[b].first, b};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    for (int k = 0; k < n; k++) {
        rm_buffer *b = &p->bufs[order[k].id];
        size_t off = lowest_fit(&pl, b);
        b->offset = off;
        if (off + b->bytes > p->arena_bytes) p->arena_bytes = off + b->bytes;
        insert(&pl, (slot){off, off + b->bytes, b->first, b->last});
    }
    free(order), free(pl.c), free(pl.pool);
}
