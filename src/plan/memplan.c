/* memplan.c: the memory layout of a step program. Every buffer gets an
 * offset in one activation arena such that buffers alive at the same time
 * never overlap. The arena is allocated once, before the first step.
 *
 * Method: greedy by size (largest buffers first, each at the lowest offset
 * that does not collide with an already placed buffer whose lifetime
 * overlaps). Lifetimes are intervals of instruction indices, so "alive at
 * the same time" is interval overlap. The result is never below the peak
 * of live bytes (program.c) and is usually within a few percent of it. */
#include "plan/plan.h"
#include <stdlib.h>

/* Sort keys carry what the comparison needs, so qsort needs no context. */
typedef struct key { size_t bytes, offset; int first, id; } key;

static int by_size_desc(const void *a, const void *b) {
    const key *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return x->id - y->id;
}

static int by_offset(const void *a, const void *b) {
    const key *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void rm_memplan(rm_program *p) {
    int n = p->n_bufs;
    p->arena_bytes = 0;
    if (n == 0) return;
    key *order = malloc((size_t)n * sizeof *order);
    int *placed = malloc((size_t)n * sizeof *placed);
    key *clash = malloc((size_t)n * sizeof *clash);
    if (!order || !placed || !clash) {
        /* fall back to no reuse at all: correct, just larger */
        size_t off = 0;
        for (int b = 0; b < n; b++) {
            p->bufs[b].offset = off;
            off += p->bufs[b].bytes;
        }
        p->arena_bytes = off;
        free(order);
        free(placed);
        free(clash);
        return;
    }
    for (int b = 0; b < n; b++)
        order[b] = (key){p->bufs[b].bytes, 0, p->bufs[b].first, b};
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        rm_buffer *b = &p->bufs[order[k].id];
        int nc = 0;
        for (int j = 0; j < n_placed; j++) {
            const rm_buffer *o = &p->bufs[placed[j]];
            if (o->first <= b->last && b->first <= o->last)
                clash[nc++] = (key){o->bytes, o->offset, o->first, placed[j]};
        }
        qsort(clash, (size_t)nc, sizeof *clash, by_offset);
        size_t off = 0;
        for (int j = 0; j < nc; j++) {
            const key *o = &clash[j];
            if (off + b->bytes <= o->offset) break; /* fits in the gap before o */
            if (o->offset + o->bytes > off) off = o->offset + o->bytes;
        }
        b->offset = off;
        if (off + b->bytes > p->arena_bytes) p->arena_bytes = off + b->bytes;
        placed[n_placed++] = order[k].id;
    }
    free(order);
    free(placed);
    free(clash);
}
