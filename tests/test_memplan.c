/* test_memplan.c: the memory layout (src/program/memplan.c), issue 22 class 12.
 * rm_memplan skips groups of placed buffers that do not overlap the one
 * being placed, and bisects runs of buffers at one offset (planning a
 * 1024-layer GPT spent most of its time scanning them). Those shortcuts
 * must not change a single offset: here every layout is compared with the
 * plain greedy rule written out (largest first, each at the lowest offset
 * that collides with no placed buffer alive at the same time), on random
 * programs shaped like real ones (many short-lived buffers one after the
 * other, a few long-lived ones) large enough to fill many chunks and
 * groups, and on the programs of GPTs; and no two buffers alive at the
 * same time share a byte. */
#include "check.h"
#include "exec/exec.h"
#include "program/program.h"
#include <stdlib.h>
#include <string.h>

static int cmp_size(const void *x, const void *y, void *bufs_) {
    const rm_buffer *bufs = bufs_;
    const rm_buffer *a = &bufs[*(const int *)x], *b = &bufs[*(const int *)y];
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    if (a->first != b->first) return a->first < b->first ? -1 : 1;
    return *(const int *)x - *(const int *)y;
}

static const size_t *sort_off; /* the offsets sort_by_offset compares */
static int sort_by_offset(const void *x, const void *y) {
    size_t a = sort_off[*(const int *)x], b = sort_off[*(const int *)y];
    return (a > b) - (a < b);
}

/* The greedy rule written out, offsets into off[]: buffers by size
 * (largest first, then by first use, then by id), each at the lowest
 * offset clear of the placed buffers alive with it (those collected, sorted
 * by offset, swept once). Quadratic, and simple. */
static size_t reference(const rm_buffer *bufs, int n, size_t *off) {
    int *order = malloc(sizeof *order * (size_t)n), *placed = malloc(sizeof *placed * (size_t)n),
        *live = malloc(sizeof *live * (size_t)n);
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort: the same keys as memplan.c's qsort */
        for (int j = i; j > 0 && cmp_size(&order[j - 1], &order[j], (void *)bufs) > 0; j--) {
            int t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    size_t arena = 0;
    sort_off = off;
    for (int k = 0; k < n; k++) {
        const rm_buffer *b = &bufs[order[k]];
        int m = 0;
        for (int j = 0; j < k; j++)
            if (bufs[placed[j]].first <= b->last && b->first <= bufs[placed[j]].last) live[m++] = placed[j];
        qsort(live, (size_t)m, sizeof *live, sort_by_offset);
        size_t o = 0;
        for (int j = 0; j < m && off[live[j]] < o + b->bytes; j++)
            if (off[live[j]] + bufs[live[j]].bytes > o) o = off[live[j]] + bufs[live[j]].bytes;
        off[order[k]] = o;
        placed[k] = order[k];
        if (o + b->bytes > arena) arena = o + b->bytes;
    }
    free(order), free(placed), free(live);
    return arena;
}

/* No two buffers alive together share a byte; each lies in the arena. */
static int disjoint(const rm_program *p) {
    int bad = 0;
    for (int i = 0; i < p->n_bufs && !bad; i++) {
        const rm_buffer *a = &p->bufs[i];
        bad |= a->offset + a->bytes > p->arena_bytes;
        for (int j = i + 1; j < p->n_bufs && !bad; j++) {
            const rm_buffer *b = &p->bufs[j];
            bad |= a->first <= b->last && b->first <= a->last && a->offset < b->offset + b->bytes &&
                   b->offset < a->offset + a->bytes;
        }
    }
    return !bad;
}

static unsigned rng = 12345;
static int next(int n) {
    rng = rng * 1103515245u + 12345u;
    return (int)((rng >> 8) % (unsigned)n);
}

static void test_random(void) {
    for (int trial = 0; trial < 13; trial++) {
        /* up to ~24 chunks of 256; the last, ~100 chunks: two groups of 64 */
        const int n = trial < 4 ? 200 + 100 * trial : trial < 12 ? 3000 + 500 * (trial % 4) : 20000;
        rm_program p;
        memset(&p, 0, sizeof p);
        p.bufs = calloc((size_t)n, sizeof *p.bufs);
        p.n_bufs = n;
        const int span = n * 2, sizes = trial % 2 ? 3 : 40; /* few sizes: long runs at one offset */
        for (int i = 0; i < n; i++) {
            rm_buffer *b = &p.bufs[i];
            b->value = i;
            b->bytes = (size_t)(1 + next(sizes)) * RM_ALIGN;
            b->first = next(span);
            b->last = b->first + (next(10) ? next(6) : next(span / 2)); /* mostly short, some long */
        }
        size_t *off = malloc(sizeof *off * (size_t)n);
        size_t arena = reference(p.bufs, n, off);
        rm_memplan(&p);
        int same = p.arena_bytes == arena;
        for (int i = 0; i < n && same; i++) same = p.bufs[i].offset == off[i];
        CHECK(same, "random program %d (%d buffers): rm_memplan's layout differs from the greedy rule's (arena %zu, "
              "rule %zu)", trial, n, p.arena_bytes, arena);
        CHECK(disjoint(&p), "random program %d: buffers alive together overlap", trial);
        free(off);
        free(p.bufs);
    }
}

/* The programs of GPTs of 4 to 48 layers, store-all and recomputed: the
 * greedy rule's layout exactly. */
static void test_gpt(void) {
    for (int layers = 4; layers <= 48; layers *= 2 + (layers > 8)) {
        for (int strategy = 0; strategy < 2; strategy++) {
            rm_graph *g = rm_graph_new();
            rm_model_io io;
            rm_gpt_config gc = {.layers = layers, .dim = 8, .heads = 2, .context = 8, .vocab = 64, .batch = 2};
            char err[256] = "";
            rm_schedule s;
            rm_program p;
            int built = rm_gpt_build(g, &gc, &io) == RM_OK && rm_autodiff(g) == RM_OK &&
                        rm_schedule_build(g, strategy ? "sqrt" : "none", 1, NULL, &s, err, sizeof err) == RM_OK;
            int ok = built && rm_program_build(g, &s, 1, &p, err, sizeof err) == RM_OK;
            CHECK(ok, "gpt %d: %s", layers, err);
            if (ok) {
                size_t *off = malloc(sizeof *off * (size_t)p.n_bufs);
                size_t arena = reference(p.bufs, p.n_bufs, off);
                rm_memplan(&p);
                int same = p.arena_bytes == arena;
                for (int i = 0; i < p.n_bufs && same; i++) same = p.bufs[i].offset == off[i];
                CHECK(same, "gpt %d %s (%d buffers): layout differs from the greedy rule's", layers,
                      strategy ? "sqrt" : "none", p.n_bufs);
                CHECK(disjoint(&p), "gpt %d: buffers alive together overlap", layers);
                free(off);
                rm_program_free(&p);
            }
            if (built) rm_schedule_free(&s);
            rm_graph_free(g);
        }
    }
}

int main(void) {
    test_random();
    test_gpt();
    return check_done("test_memplan");
}
