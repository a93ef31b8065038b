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
 * of live bytes (program.c) and is usually within a few percent of it. */
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

/* A placed buffer, in the list kept sorted by offset. */
typedef struct slot { size_t offset, end; int first, last; } slot;

/* The lowest offset where `b` fits beside the placed buffers whose
 * lifetimes overlap its own: scanning them by offset, the first gap wide
 * enough. Once a placed buffer starts above the candidate's end, every
 * later one does too, so the scan stops there. */
static size_t lowest_fit(const slot *placed, int n_placed, const rm_buffer *b) {
    size_t off = 0;
    for (int j = 0; j < n_placed; j++) {
        const slot *o = &placed[j];
        if (o->offset >= off + b->bytes) break; /* fits in the gap before o (and all after it) */
        if (o->first <= b->last && b->first <= o->last && o->end > off) off = o->end;
    }
    return off;
}

void rm_memplan(rm_program *p) {
    int n = p->n_bufs;
    p->arena_bytes = 0;
    if (n == 0) return;
    key *order = malloc((size_t)n * sizeof *order);
    slot *placed = malloc((size_t)n * sizeof *placed);
    if (!order || !placed) {
        /* fall back to no reuse at all: correct, just larger */
        size_t off = 0;
        for (int b = 0; b < n; b++) {
            p->bufs[b].offset = off;
            off += p->bufs[b].bytes;
        }
        p->arena_bytes = off;
        free(order);
        free(placed);
        return;
    }
    for (int b = 0; b < n; b++)
        order[b] = (key){p->bufs[b].bytes, p->bufs[b].first, b};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        rm_buffer *b = &p->bufs[order[k].id];
        size_t off = lowest_fit(placed, n_placed, b);
        b->offset = off;
        if (off + b->bytes > p->arena_bytes) p->arena_bytes = off + b->bytes;
        int at = 0, hi = n_placed; /* keep `placed` sorted by offset */
        while (at < hi) {
            int mid = (at + hi) / 2;
            if (placed[mid].offset <= off) at = mid + 1;
            else hi = mid;
        }
        memmove(placed + at + 1, placed + at, (size_t)(n_placed - at) * sizeof *placed);
        placed[at] = (slot){off, off + b->bytes, b->first, b->last};
        n_placed++;
    }
    free(order);
    free(placed);
}
