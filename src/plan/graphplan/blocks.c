/* blocks.c: automatic blocks for graphs that declare no stages, or whose
 * stages are not a chain. A block is a contiguous range of the topological
 * order; the cut after node c is crossed by every value produced at or
 * before c and read (forward or backward) after it. Cutting where few bytes
 * cross keeps the values held between blocks small, which is what declared
 * stages give a chain (one activation between stages). */
#include "plan/graphplan/graphplan.h"
#include <stdlib.h>

/* cross[c] for every cut c in 0..n-2 (n-1 entries are written). */
static int64_t *crossing(const rm_gmodel *m) {
    int n = m->n;
    int64_t *cross = calloc((size_t)n + 1, sizeof *cross);
    int *lastuse = malloc(((size_t)n + 1) * sizeof *lastuse);
    if (!cross || !lastuse) {
        free(cross), free(lastuse);
        return NULL;
    }
    for (int v = 0; v < n; v++) lastuse[v] = v;
    for (int j = 0; j < n; j++)
        for (int e = m->off[j]; e < m->off[j + 1]; e++)
            if (lastuse[m->src[e]] < j) lastuse[m->src[e]] = j;
    /* difference array: value v crosses cuts v .. lastuse[v]-1 */
    for (int v = 0; v < n; v++) {
        if (lastuse[v] == v) continue;
        cross[v] += m->bytes[v];
        cross[lastuse[v]] -= m->bytes[v];
    }
    for (int c = 1; c < n; c++) cross[c] += cross[c - 1];
    free(lastuse);
    return cross;
}

int64_t rm_cut_bytes(const rm_gmodel *m, int c) {
    if (c < 0 || c >= m->n - 1) return 0;
    int64_t *cross = crossing(m);
    int64_t b = cross ? cross[c] : -1;
    free(cross);
    return b;
}

int rm_auto_blocks(const rm_gmodel *m, int k, int *block) {
    int n = m->n;
    if (n <= 0) return 0;
    int64_t *cross = k < n ? crossing(m) : NULL;
    if (!cross) { /* one node per block (also the fallback when out of memory) */
        for (int i = 0; i < n; i++) block[i] = i;
        return n;
    }
    if (k < 1) k = 1;
    double len = (double)n / k;
    int nb = 0, start = 0;
    while (start < n) {
        int ideal = start + (int)(len + 0.5) - 1;
        if (ideal >= n - 1 || n - start < 1.5 * len) { /* the rest is one block */
            for (int i = start; i < n; i++) block[i] = nb;
            nb++;
            break;
        }
        int lo = start + (int)(len / 2), hi = start + (int)(1.5 * len);
        if (lo < start) lo = start;
        if (hi > n - 2) hi = n - 2;
        int cut = ideal < lo ? lo : ideal > hi ? hi : ideal;
        for (int c = lo; c <= hi; c++) /* fewest crossing bytes, nearest the ideal cut on ties */
            if (cross[c] < cross[cut] || (cross[c] == cross[cut] && abs(c - ideal) < abs(cut - ideal))) cut = c;
        for (int i = start; i <= cut; i++) block[i] = nb;
        nb++;
        start = cut + 1;
    }
    free(cross);
    return nb;
}
