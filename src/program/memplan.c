/* memplan.c: the memory layout of a step program. Every buffer gets an
 * offset in one activation arena such that buffers alive at the same time
 * never overlap. The arena is allocated once, before the first step.
 *
 * Method: greedy by size (largest buffers first, each at the lowest offset
 * that does not collide with an already placed buffer whose lifetime
 * overlaps; the placed buffers are kept sorted by offset, so finding that
 * offset is one scan that stops at the first wide-enough gap, skips chunks
 * and groups of chunks that cannot collide, and bisects runs of buffers at
 * one offset: tests/test_memplan.c holds the layout to the plain rule's,
 * offset for offset: a 1024-layer GPT's program has a million buffers,
 * and its planning spent most of its time scanning them). Lifetimes
 * are intervals of instruction indices, so "alive at the same time" is
 * interval overlap. The result is never below the peak
 * of live bytes (program.c) and is usually within a few percent of it.
 * Buffers moved to or from the scratch file (`paged`) start at multiples
 * of RM_PAGE_ALIGN, as O_DIRECT transfers need (the arena is allocated so
 * aligned). */
#include "program/program.h"
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
enum { CHUNK = 256, GROUP = 64 };
typedef struct chunk {
    int n, first, last;
    slot e[CHUNK];
} chunk;
/* Chunks k*GROUP .. k*GROUP+GROUP-1 form group k, with the span of their
 * lifetimes too (gfirst, glast: a superset), so that a scan skips 64 chunks
 * at once: a program of a million buffers has thousands of chunks, and most
 * of them (many buffers over time at one offset) do not overlap the buffer
 * being placed. The placements are the same as without groups. */
typedef struct head { size_t offset; int first, last; } head; /* chunk k's first offset and span, in one array */
typedef struct placed {
    chunk **c, *pool;
    int n, used;
    int *gfirst, *glast;
    head *h; /* h[k] mirrors c[k]: a scan reads these, not every chunk */
} placed;

static int overlaps(int first, int last, const rm_buffer *b) { return first <= b->last && b->first <= last; }

/* The run of slots of chunk c at the offset of slot j (their index j up
 * to the one returned): *off raised past those whose lifetimes overlap b's.
 * Buffers of one offset never live at the same time (b is not empty, so
 * neither is any buffer placed before it: placed largest first), so the
 * run, sorted by first, is sorted by last too, and the ones overlapping b
 * are contiguous: found by bisection, not by a scan of the run (at low
 * offsets a run holds thousands of short-lived buffers, one after the
 * other, and b overlaps one or two of them). */
static int run_overlap(const chunk *c, int j, const rm_buffer *b, size_t *off) {
    int r = j + 1, hi = c->n, lo = j;
    if (c->e[hi - 1].offset == c->e[j].offset) r = hi; /* the whole rest of the chunk (often) */
    while (r < hi) { /* the run's end: the first slot above its offset */
        int mid = r + (hi - r) / 2;
        if (c->e[mid].offset == c->e[j].offset) r = mid + 1;
        else hi = mid;
    }
    for (hi = r; lo < hi;) { /* the first of the run that ends at or after b's first */
        int mid = lo + (hi - lo) / 2;
        if (c->e[mid].last < b->first) lo = mid + 1;
        else hi = mid;
    }
    for (int i = lo; i < r && c->e[i].first <= b->last; i++)
        if (c->e[i].end > *off) *off = c->e[i].end;
    if (b->paged) *off = rm_page_round(*off); /* aligned already unless raised here */
    return r;
}

/* The lowest offset where `b` fits beside the placed buffers whose
 * lifetimes overlap its own: scanning them by offset, the first gap wide
 * enough. Only those buffers decide it; and once a placed buffer starts
 * above the candidate's end, every later one does too, so the scan stops. */
static size_t lowest_fit(const placed *pl, const rm_buffer *b) {
    size_t off = 0;
    for (int lo = 0; lo < pl->n; lo += GROUP) {
        if (pl->h[lo].offset >= off + b->bytes) break;
        if (!overlaps(pl->gfirst[lo / GROUP], pl->glast[lo / GROUP], b)) continue;
        for (int k = lo; k < pl->n && k < lo + GROUP; k++) {
            if (pl->h[k].offset >= off + b->bytes) return off;
            if (!overlaps(pl->h[k].first, pl->h[k].last, b)) continue;
            const chunk *c = pl->c[k];
            for (int j = 0; j < c->n;) {
                const slot *o = &c->e[j];
                if (o->offset >= off + b->bytes) return off; /* fits in the gap before o (and all after it) */
                if (j + 1 < c->n && c->e[j + 1].offset == o->offset) {
                    j = run_overlap(c, j, b, &off);
                    continue;
                }
                if (o->end > off && overlaps(o->first, o->last, b)) off = b->paged ? rm_page_round(o->end) : o->end;
                j++;
            }
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

/* The spans of the groups from the one holding chunk k on (their chunks
 * moved up by one after a split). */
static void group_bounds(placed *pl, int k) {
    for (int lo = k / GROUP * GROUP; lo < pl->n; lo += GROUP) {
        int *f = &pl->gfirst[lo / GROUP], *l = &pl->glast[lo / GROUP];
        *f = pl->c[lo]->first, *l = pl->c[lo]->last;
        for (int j = lo + 1; j < pl->n && j < lo + GROUP; j++) {
            if (pl->c[j]->first < *f) *f = pl->c[j]->first;
            if (pl->c[j]->last > *l) *l = pl->c[j]->last;
        }
    }
}

/* (offset, first) order: by offset, and by time within one offset, so a
 * chunk of buffers at one offset spans a short time (buffers at one offset
 * never overlap in time) and scans skip it. */
static int before(const slot *a, const slot *b) {
    return a->offset < b->offset || (a->offset == b->offset && a->first <= b->first);
}

static void sync(placed *pl, int k) { pl->h[k] = (head){pl->c[k]->e[0].offset, pl->c[k]->first, pl->c[k]->last}; }

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
        memmove(pl->h + k + 2, pl->h + k + 1, sizeof *pl->h * (size_t)(pl->n - k - 1));
        pl->c[k + 1] = d, pl->n++;
        sync(pl, k), sync(pl, k + 1);
        group_bounds(pl, k);
        if (before(&d->e[0], &s)) c = d, k++;
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
    sync(pl, k);
    int *f = &pl->gfirst[k / GROUP], *l = &pl->glast[k / GROUP];
    if (c->n == 1 && pl->n == 1) *f = s.first, *l = s.last; /* the first slot */
    if (s.first < *f) *f = s.first;
    if (s.last > *l) *l = s.last;
}

void rm_memplan(rm_program *p) {
    int n = p->n_bufs;
    p->arena_bytes = 0;
    if (n == 0) return;
    int max_chunks = 2 * (n / CHUNK) + 2; /* every split leaves two chunks at least half full */
    key *order = malloc((size_t)n * sizeof *order);
    const size_t max_groups = (size_t)max_chunks / GROUP + 1;
    placed pl = {malloc(sizeof *pl.c * (size_t)max_chunks), malloc(sizeof *pl.pool * (size_t)max_chunks), 0, 0,
                 malloc(sizeof *pl.gfirst * max_groups), malloc(sizeof *pl.glast * max_groups),
                 malloc(sizeof *pl.h * (size_t)max_chunks)};
    if (!order || !pl.c || !pl.pool || !pl.gfirst || !pl.glast || !pl.h) {
        /* fall back to no reuse at all: correct, just larger */
        size_t off = 0;
        for (int b = 0; b < n; b++) {
            if (p->bufs[b].paged) off = rm_page_round(off);
            p->bufs[b].offset = off;
            off += p->bufs[b].bytes;
        }
        p->arena_bytes = off;
        free(order), free(pl.c), free(pl.pool), free(pl.gfirst), free(pl.glast), free(pl.h);
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
    free(order), free(pl.c), free(pl.pool), free(pl.gfirst), free(pl.glast), free(pl.h);
}
