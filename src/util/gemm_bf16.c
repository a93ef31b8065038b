/* gemm_bf16.c: the matrix product of --precision bf16 (rm_options.precision):
 *
 *   C = alpha * op(A) op(B) + beta * C,   bf16 inputs, fp32 sums
 *
 * as PyTorch's CPU autocast runs a matmul. A and B are F32, BF16 or F16; C
 * is F32, or BF16 (rounded once, after the whole sum). One of these paths,
 * chosen once per process from what is there, never from a timing (two
 * runs of one program on one machine take the same path, so the same bits):
 *  - "onednn": oneDNN's brgemm matmul (onednn.c), where its bf16 matmul is
 *    one (avx512_core_bf16, AMX). Operands are rounded to bf16 as they are
 *    packed into the blocks it reads (no bf16 copy of a weight is kept).
 *  - "sgemm": where it is not (AVX2; AVX-512 without bf16, where oneDNN 2.x
 *    emulates bf16 slower than fp32) and OpenBLAS is loaded: a BF16 or F16
 *    operand is widened to fp32 (exactly) a panel at a time and OpenBLAS's
 *    sgemm multiplies; an F32 operand (a weight, a gradient) is read in
 *    place, unrounded: about fp32's speed (plus the widening), bf16's
 *    activation bytes.
 *  - "avx512_bf16", "portable": remat's own kernel (gemm_bf16_own.c), with
 *    neither library: AVX512-BF16 where the processor has it.
 * REMAT_BF16_KERNEL=<one of those> picks a path where it is available
 * (benchmarks); rm_gemm_bf16_force does the same for tests.
 *
 * Every path computes C in tiles (the sgemm path: panels, cut_of and
 * direct_cut), each on
 * one thread, its sum over k in blocks in order, each block on that thread
 * alone (a oneDNN primitive made for one thread; OpenBLAS inside remat's
 * parallel region, or with one thread: OpenBLAS's own threads give other
 * bits at another thread count, measured). Tiles and blocks follow from
 * the shapes alone, so the bits are the same at any thread count, in a
 * recompute and under any strategy.
 *
 * Scratch: a thread uses one slot of the caller's scratch (rm_mm_scratch,
 * planned in the arena with the node's workspace). oneDNN's path: its
 * tile's fp32 sums, a block of one operand, the other's blocks for the
 * tile's row or column (kept while the next tile shares them), oneDNN's
 * scratchpad; the sgemm path: a panel's sums and widened blocks. Without
 * scratch the own kernel runs, its panels on the stack. */
#include "util/gemm_bf16_own.h"
#include "util/half.h"
#include "util/onednn.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef rm_bf16_operand operand;

enum { DT = 128, DK = 256 }; /* oneDNN's largest block: m, n <= 128, k <= 256 */
#define B_MOST ((size_t)1 << 20) /* the most op(B) a slot keeps */

/* A slot for products of sides <= dim (M, N, K). oneDNN: its tile's sums
 * (t x t fp32), a block of op(A) (t x kt bf16), the blocks of op(B) for a
 * tile column (at least one block), its scratchpad. The sgemm path uses
 * the same bytes as one buffer (acc, a and b in a row; at least w x w fp32
 * each, w = 256 from dim 512 on): a panel's sums (BF16 C only) and the
 * operands' widened blocks (cut_of). Each part a multiple of 64 bytes. */
typedef struct layout { size_t acc, a, b, bytes; } layout;

static size_t pow2_at_least(int64_t x, size_t lo, size_t hi) {
    size_t p = lo;
    while (p < hi && (int64_t)p < x) p *= 2;
    return p;
}

static size_t most(size_t x, size_t y) { return x > y ? x : y; }

static layout layout_of(int64_t dim) {
    const size_t t = pow2_at_least(dim, 16, DT), kt = pow2_at_least(dim, 32, DK), d = (size_t)(dim > 0 ? dim : 1);
    const size_t w = dim >= 512 ? 256 : t, b = ((d + DK - 1) / DK) * DK * t * 2; /* oneDNN's whole column */
    layout l = {most(t * t, w * w) * 4, most(t * kt * 2, w * w * 4), most(b < B_MOST ? b : B_MOST, w * w * 4), 0};
    l.b = most(l.b, kt * t * 2);
    l.bytes = l.acc + l.a + l.b + RM_DNNL_SCRATCHPAD;
    return l;
}

size_t rm_gemm_bf16_scratch(int threads, int64_t dim) {
    return (size_t)(threads > 0 ? threads : 1) * layout_of(dim).bytes + 64;
}

typedef struct slot {
    float *acc;
    void *a, *b, *pad;
    size_t b_bytes;
} slot;

static slot slot_at(const rm_mm_scratch *mm, int i) {
    const layout l = layout_of(mm->dim);
    char *base = (char *)(((uintptr_t)mm->p + 63) & ~(uintptr_t)63) + (size_t)i * l.bytes;
    return (slot){(float *)base, base + l.acc, base + l.acc + l.a, base + l.acc + l.a + l.b, l.b};
}

/* ---- choosing the path --------------------------------------------------------- */

enum { P_ONEDNN, P_SGEMM, P_AVX512, P_PORTABLE, P_COUNT };
static const char *const path_names[P_COUNT] = {"onednn", "sgemm", "avx512_bf16", "portable"};
static int path = P_PORTABLE, chosen = P_PORTABLE;
static char note[320];
static pthread_once_t path_once = PTHREAD_ONCE_INIT;

static int available(int p) {
    if (p == P_ONEDNN) return rm_dnnl_ready();
    if (p == P_SGEMM) return rm_gemm_has_blas();
    return p == P_AVX512 ? rm_bf16_own_avx512() : 1;
}

/* The note: why path p runs (oneDNN's status, OpenBLAS, or the variable
 * that asked for it) and what it means; "" for oneDNN as chosen. */
static void word_note(int p, const char *want) {
    static const char *const what[P_COUNT] = {
        "bf16 products run on oneDNN's brgemm",
        "bf16 products widen bf16 operands to fp32 for OpenBLAS's sgemm (about fp32's speed, bf16's activation bytes)",
        "bf16 products run on remat's AVX512-BF16 kernel",
        "bf16 products run on remat's portable kernel (correct, slower than fp32)"};
    char why[240];
    if (want && strcmp(want, path_names[p]))
        snprintf(why, sizeof why, "REMAT_BF16_KERNEL=%.40s is not a path here (onednn, sgemm, avx512_bf16, portable "
                 "where available)%s%s", want, p == P_ONEDNN ? "" : "; ", p == P_ONEDNN ? "" : rm_dnnl_status());
    else if (want)
        snprintf(why, sizeof why, "REMAT_BF16_KERNEL=%s", want);
    else
        snprintf(why, sizeof why, "%s%s", rm_dnnl_status(), p > P_SGEMM ? ", and OpenBLAS is not loaded" : "");
    if (p == P_ONEDNN && !want) note[0] = 0;
    else snprintf(note, sizeof note, "bf16: %s; %s", why, what[p]);
}

static void choose(void) {
    int p = 0;
    while (!available(p)) p++; /* the portable kernel always is */
    const char *want = getenv("REMAT_BF16_KERNEL");
    for (int q = 0; want && q < P_COUNT; q++)
        if (!strcmp(want, path_names[q]) && available(q)) p = q;
    path = chosen = p;
    word_note(p, want);
}

const char *rm_bf16_kernel(void) {
    pthread_once(&path_once, choose);
    return path_names[path];
}

const char *rm_bf16_note(void) {
    pthread_once(&path_once, choose);
    return note;
}

void rm_gemm_bf16_prepare(void) { pthread_once(&path_once, choose); }

int rm_gemm_bf16_widens(void) {
    pthread_once(&path_once, choose);
    return path == P_SGEMM;
}

int rm_gemm_bf16_force(const char *kernel) {
    pthread_once(&path_once, choose);
    for (int q = 0; q < P_COUNT; q++)
        if (kernel && !strcmp(kernel, path_names[q])) {
            if (!available(q)) return 0;
            path = q;
            return 1;
        }
    path = chosen;
    return kernel == NULL;
}

/* ---- the oneDNN path ------------------------------------------------------------ */

/* The index of the smallest block side >= x: 16 << i for m and n, 32 << i for k. */
static int side(int x) { return x <= 16 ? 0 : x <= 32 ? 1 : x <= 64 ? 2 : 3; }
static int kside(int x) { return x <= 32 ? 0 : x <= 64 ? 1 : x <= 128 ? 2 : 3; }

/* acc (m x n) += a b by hand, should oneDNN fail a call: a row-major (row
 * stride k), b in BA16a{R}b2a; the sum in k's order. */
static void block_by_hand(int m, int n, int k, const uint16_t *a, const uint16_t *b, float *acc) {
    const int R = n < 64 ? n : 64;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0.0f;
            for (int q = 0; q < k; q++)
                s += rm_bf16_to_f32(a[(size_t)i * k + q]) *
                     rm_bf16_to_f32(b[((size_t)(j / R) * k + (size_t)(q & ~1)) * R + (size_t)(j % R) * 2 + (q & 1)]);
            acc[(size_t)i * n + j] += s;
        }
}

typedef struct job {
    const operand *a, *bt;
    float alpha, beta;
    void *C;
    rm_dtype ct;
    int ldc, mt, nt;   /* oneDNN's tiles down and across */
    const float *bias; /* the sgemm path, a BF16 C: + round(bias[j]) as it rounds (rm_gemm_bf16_bias) */
} job;

/* k block kb of op(A)'s rows [i0, i0 + tm) (row-major), or of op(B)'s
 * columns [j0, j0 + tn) (BA16a{R}b2a), into dst: as oneDNN reads them */
static const uint16_t *pack_a(const operand *a, int i0, int tm, int kb, uint16_t *dst) {
    const int k0 = kb * DK, tk = 32 << kside(a->cols - k0 < DK ? a->cols - k0 : DK);
    rm_bf16_pack(a, i0, tm, 1, k0, tk / 2, tk / 2, (uint32_t *)dst);
    return dst;
}

static const uint16_t *pack_b(const operand *bt, int j0, int tn, int kb, uint16_t *dst) {
    const int k0 = kb * DK, tk = 32 << kside(bt->cols - k0 < DK ? bt->cols - k0 : DK);
    rm_bf16_pack(bt, j0, tn, tn < 64 ? tn : 64, k0, tk / 2, tk / 2, (uint32_t *)dst);
    return dst;
}

/* Tiles [t0, t1) on one thread. The operand dearer to pack (op(A) when
 * transposed, else op(B)) has its blocks for a tile's rows (columns) kept
 * in s->b while the next tile shares them: tiles go row by row (column by
 * column). The other operand's block is packed for each tile into s->a. */
static void dnnl_tiles(const job *jb, const slot *s, int t0, int t1) {
    const operand *a = jb->a, *bt = jb->bt;
    const int M = a->rows, N = bt->rows, K = a->cols, nkb = (K + DK - 1) / DK, by_rows = a->trans;
    uint16_t *keep_at = s->b, *each_at = s->a;
    int cached = -1; /* the row (column) of tiles whose blocks are in s->b */
    for (int t = t0; t < t1; t++) {
        const int it = by_rows ? t / jb->nt : t % jb->mt, jt = by_rows ? t % jb->nt : t / jb->mt;
        const int i0 = it * DT, j0 = jt * DT, mc = M - i0 < DT ? M - i0 : DT, nc = N - j0 < DT ? N - j0 : DT;
        const int mi = side(mc), ni = side(nc), tm = 16 << mi, tn = 16 << ni, key = by_rows ? it : jt;
        const size_t blk = (size_t)DK * (by_rows ? tm : tn); /* halfwords of a kept block */
        const int keep = (size_t)nkb * blk * 2 <= s->b_bytes;
        for (int kb = 0; keep && cached != key && kb < nkb; kb++)
            by_rows ? pack_a(a, i0, tm, kb, keep_at + kb * blk) : pack_b(bt, j0, tn, kb, keep_at + kb * blk);
        cached = keep ? key : -1;
        memset(s->acc, 0, (size_t)tm * tn * sizeof(float));
        for (int kb = 0; kb < nkb; kb++) {
            const int ki = kside(K - kb * DK < DK ? K - kb * DK : DK);
            const uint16_t *kept = keep ? keep_at + kb * blk
                                        : by_rows ? pack_a(a, i0, tm, kb, keep_at) : pack_b(bt, j0, tn, kb, keep_at);
            const uint16_t *ab = by_rows ? kept : pack_a(a, i0, tm, kb, each_at);
            const uint16_t *bb = by_rows ? pack_b(bt, j0, tn, kb, each_at) : kept;
            if (!rm_dnnl_block(mi, ni, ki, ab, bb, s->acc, s->pad))
                block_by_hand(tm, tn, 32 << ki, ab, bb, s->acc);
        }
        rm_bf16_write_tile(s->acc, tn, mc, nc, jb->alpha, jb->beta, jb->C, jb->ct, jb->ldc, i0, j0);
    }
}

/* ---- the sgemm path --------------------------------------------------------------- */

/* Rows [r0, r0 + nr), k's [k0, k0 + nk) of op(X) as fp32 for sgemm: in
 * place when F32, else widened into dst in X's own orientation. *ld gets
 * the leading dimension. */
static const float *fp32_block(const operand *x, int r0, int nr, int k0, int nk, float *dst, int *ld) {
    const size_t at = x->trans ? (size_t)k0 * x->ld + r0 : (size_t)r0 * x->ld + k0;
    if (x->t == RM_DTYPE_F32) {
        *ld = x->ld;
        return (const float *)x->p + at;
    }
    const uint16_t *src = (const uint16_t *)x->p + at;
    const int rows = x->trans ? nk : nr, cols = x->trans ? nr : nk;
    for (int i = 0; i < rows; i++) {
        const uint16_t *h = src + (size_t)i * x->ld;
        float *d = dst + (size_t)i * cols;
        if (x->t == RM_DTYPE_BF16) /* a shift: vectorized */
            for (int j = 0; j < cols; j++) d[j] = rm_bf16_to_f32(h[j]);
        else
            for (int j = 0; j < cols; j++) d[j] = rm_f16_to_f32(h[j]);
    }
    *ld = cols;
    return dst;
}

/* C's tile = beta C's tile, for K = 0 (beta 0 does not keep a NaN) */
static void scale_tile(float *c, int ldc, int mc, int nc, float beta) {
    for (int i = 0; i < mc; i++)
        for (int j = 0; j < nc; j++) c[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[(size_t)i * ldc + j];
}

/* The sgemm path's cut of a product with a BF16 C or F32 operands only
 * (an F32 C with a widened operand: direct_cut): C in panels of r rows and
 * c columns (at most PANEL each, so that a product has panels for every thread), k
 * in blocks of kc, so that what is widened (a BF16/F16 op(A)'s r x kc
 * block, op(B)'s kc x c block) and a BF16 C's fp32 sums (r x c) fit in one
 * slot (cap bytes). From the shapes and cap alone, never the thread count.
 * Each halving takes the side that saves most (rows and columns before k:
 * one sgemm per panel then sums all of k). A BF16 C starts from grid_of's
 * panels (at least MIN_PANELS where the sides allow, unless serial), F32
 * operands into an F32 C from the fewest (the backward's dX in bf16: 256 x
 * 768 in 8 panels of 96 instead of 2 of 384 was 5-10% slower, each sgemm
 * packing its panel's op(A) again). */
enum { PANEL = 512, MIN_PANELS = 8, SIDE_LEAST = 32 };
typedef struct cut { int r, c, kc, rows, cols; } cut; /* rows, cols: panels down and across */

static size_t cut_bytes(const job *jb, int r, int c, int kc) {
    return sizeof(float) * ((jb->ct != RM_DTYPE_F32 ? (size_t)r * c : 0) +
                            (jb->a->t != RM_DTYPE_F32 ? (size_t)r * kc : 0) +
                            (jb->bt->t != RM_DTYPE_F32 ? (size_t)kc * c : 0));
}

static double moved(const job *jb, int rows, int cols) {
    const double M = jb->a->rows, N = jb->bt->rows, K = jb->a->cols;
    const int wa = jb->a->t != RM_DTYPE_F32, wb = jb->bt->t != RM_DTYPE_F32;
    return K * (M * cols + N * rows) + (wa ? M * K : 0) + (wb ? N * K * (wa ? rows : 1) : 0);
}

/* The panels of C (r x c each, at most PANEL a side, at least SIDE_LEAST)
 * that number at least `fewest` where the sides allow and move least. With
 * fewest 1: ceil(M / PANEL) x ceil(N / PANEL) equal panels. The GPT-2
 * shape's qkv forward (256 x 2304, BF16 C) was 5 panels of 461 columns, 3
 * and 2 on two threads, 1.20x fp32's sgemm; from here 8 of 288, 1.03x. */
static void grid_of(const job *jb, int fewest, cut *out) {
    const int M = jb->a->rows, N = jb->bt->rows;
    const int pr0 = (M + PANEL - 1) / PANEL, pc0 = (N + PANEL - 1) / PANEL;
    const int prn = (M + SIDE_LEAST - 1) / SIDE_LEAST, pcn = (N + SIDE_LEAST - 1) / SIDE_LEAST;
    const int want = (int64_t)prn * pcn < fewest ? prn * pcn : fewest;
    int enough = -1;
    double least = 0;
    *out = (cut){M, N, 0, 1, 1};
    for (int pr = pr0; pr <= prn && pr <= pr0 + MIN_PANELS; pr++) { /* for each pr, the fewest columns */
        int pc = (want + pr - 1) / pr;
        pc = pc < pc0 ? pc0 : pc > pcn ? pcn : pc;
        const int r = (M + pr - 1) / pr, c = (N + pc - 1) / pc, rows = (M + r - 1) / r, cols = (N + c - 1) / c;
        const int ok = rows * cols >= want;
        const double m = moved(jb, rows, cols);
        if (ok < enough || (ok == enough && m >= least)) continue;
        enough = ok, least = m;
        *out = (cut){r, c, 0, rows, cols};
    }
}

static int cut_of(const job *jb, size_t cap, int serial, cut *out) {
    cut g;
    grid_of(jb, serial || jb->ct == RM_DTYPE_F32 ? 1 : MIN_PANELS, &g);
    int r = g.r, c = g.c, kc = jb->a->cols;
    for (;;) {
        const size_t now = cut_bytes(jb, r, c, kc);
        if (now <= cap) break;
        const size_t by_r = r > 32 ? cut_bytes(jb, (r + 1) / 2, c, kc) : now;
        const size_t by_c = c > 32 ? cut_bytes(jb, r, (c + 1) / 2, kc) : now;
        const size_t by_k = kc > 64 ? cut_bytes(jb, r, c, (kc + 1) / 2) : now;
        if (by_r <= by_c && by_r < now && (by_r <= by_k || by_k == now)) r = (r + 1) / 2;
        else if (by_c < now && (by_c <= by_k || by_k == now)) c = (c + 1) / 2;
        else if (by_k < now) kc = (kc + 1) / 2;
        else return 0; /* no smaller cut: the slot is too small (not for dim's shapes) */
    }
    r = r > 0 ? r : 1, c = c > 0 ? c : 1;
    *out = (cut){r, c, kc > 0 ? kc : 1, (jb->a->rows + r - 1) / r, (jb->bt->rows + c - 1) / c};
    return 1;
}

/* The cut of a product with an F32 C and a BF16/F16 operand (a weight
 * gradient, a linear layer into the residual stream: sgemm sums into C in
 * place, no fp32 sums in the slot), the one that moves least: rows x cols panels
 * pack op(A) cols times and op(B) rows times (one sgemm per panel packs
 * both), and a widened operand is widened once per panel row (op(A)) or
 * column (op(B)), or per panel (op(B) when op(A) is widened too). At least
 * MIN_PANELS panels where the sides allow, for the threads of a small
 * machine (from the shapes, never the thread count; one when the caller's
 * products always run on its own thread: rm_mm_scratch.serial); k in the fewest equal
 * blocks whose widened blocks fit the slot (cap bytes: direct_panels then
 * widens a block once for all of a thread's panels that share it). */
static int direct_cut(const job *jb, size_t cap, int serial, cut *out) {
    const int K = jb->a->cols;
    grid_of(jb, serial ? 1 : MIN_PANELS, out);
    const size_t per_k = cut_bytes(jb, out->r, out->c, 1), kmost = per_k ? cap / per_k : (size_t)K;
    if (kmost < 1) return 0; /* the slot is too small (not for dim's shapes) */
    const int64_t parts = K > 0 ? ((int64_t)K + (int64_t)kmost - 1) / (int64_t)kmost : 1;
    out->kc = K > 0 ? (int)((K + parts - 1) / parts) : 1;
    return 1;
}

/* Op(X)'s rows [r0, r0 + nr), k's [k0, k0 + nk) as fp32 (fp32_block),
 * unless they are the block already in dst (*at: its key). */
static const float *widened(const operand *x, int r0, int nr, int k0, int nk, float *dst, long *at, int *ld) {
    const long key = (long)r0 * x->cols + k0;
    if (x->t != RM_DTYPE_F32 && *at == key) {
        *ld = x->trans ? nr : nk;
        return dst;
    }
    *at = x->t != RM_DTYPE_F32 ? key : -1;
    return fp32_block(x, r0, nr, k0, nk, dst, ld);
}

/* C's panel = round(alpha acc + round(bias)): rm_bf16_write_tile's bits
 * with C holding the rounded bias and beta 1, without reading C */
static void write_tile_bias(const float *acc, int mc, int nc, float alpha, const float *bias, uint16_t *C, int ldc) {
    float rb[PANEL];
    for (int j = 0; j < nc; j++) rb[j] = rm_bf16_to_f32(rm_f32_to_bf16(bias[j]));
    for (int i = 0; i < mc; i++) rm_f32_to_bf16_run(acc + (size_t)i * nc, alpha, rb, C + (size_t)i * ldc, nc);
}

/* Panels [p0, p1) (row by row when op(A) is widened, else column by
 * column: the next panel shares the widened block) on one thread and its
 * slot, each by single-threaded sgemms over its k blocks in order: op(A)'s
 * and op(B)'s blocks widened to fp32 (an F32 operand read in place; a
 * widened block kept while the next panel shares it), summed into an F32 C
 * in place (the first block scales it by beta) or into the panel's fp32
 * sums, rounded once into a BF16 C. */
static void sgemm_panels(const job *jb, const slot *s, const cut *cu, int p0, int p1, long *a_at, long *b_at) {
    const operand *a = jb->a, *bt = jb->bt;
    const int M = a->rows, N = bt->rows, K = a->cols, direct = jb->ct == RM_DTYPE_F32;
    float *acc = s->acc, *wa = acc + (direct ? 0 : (size_t)cu->r * cu->c);
    float *wb = wa + (a->t != RM_DTYPE_F32 ? (size_t)cu->r * cu->kc : 0);
    for (int p = p0; p < p1; p++) {
        const int by_rows = a->t != RM_DTYPE_F32; /* then the next panel shares op(A)'s widened block */
        const int i0 = (by_rows ? p / cu->cols : p % cu->rows) * cu->r;
        const int j0 = (by_rows ? p % cu->cols : p / cu->rows) * cu->c;
        const int mc = M - i0 < cu->r ? M - i0 : cu->r, nc = N - j0 < cu->c ? N - j0 : cu->c;
        const int ldc = direct ? jb->ldc : nc;
        float *c = direct ? (float *)jb->C + (size_t)i0 * jb->ldc + j0 : acc;
        if (K == 0) scale_tile(c, ldc, mc, nc, direct ? jb->beta : 0.0f);
        for (int k0 = 0; k0 < K; k0 += cu->kc) {
            const int kc = K - k0 < cu->kc ? K - k0 : cu->kc;
            int lda = 0, ldb = 0;
            const float *pa = widened(a, i0, mc, k0, kc, wa, a_at, &lda);
            const float *pb = widened(bt, j0, nc, k0, kc, wb, b_at, &ldb);
            rm_sgemm(a->trans, !bt->trans, mc, nc, kc, direct ? jb->alpha : 1.0f, pa, lda, pb, ldb,
                     k0 ? 1.0f : direct ? jb->beta : 0.0f, c, ldc);
        }
        if (jb->bias) /* a BF16 C (rm_gemm_bf16_bias) */
            write_tile_bias(acc, mc, nc, jb->alpha, jb->bias + j0, (uint16_t *)jb->C + (size_t)i0 * jb->ldc + j0,
                            jb->ldc);
        else if (!direct)
            rm_bf16_write_tile(acc, nc, mc, nc, jb->alpha, jb->beta, jb->C, jb->ct, jb->ldc, i0, j0);
    }
}

/* Panels [p0, p1) of a product with an F32 C on one thread: the k blocks
 * outside, the panels inside, so that a widened block is kept for all the
 * panels that share it (they follow one another: row by row when op(A) is
 * widened, else column by column). A panel's sum is its sgemms over the k
 * blocks in order, as in sgemm_panels: the same bits whichever thread runs
 * it. */
static void direct_panels(const job *jb, const slot *s, const cut *cu, int p0, int p1) {
    const operand *a = jb->a, *bt = jb->bt;
    const int M = a->rows, N = bt->rows, K = a->cols, by_rows = a->t != RM_DTYPE_F32;
    float *wa = s->acc, *wb = wa + (by_rows ? (size_t)cu->r * cu->kc : 0);
    long a_at = -1, b_at = -1;
    for (int k0 = 0; k0 < K || (K == 0 && k0 == 0); k0 += cu->kc)
        for (int p = p0; p < p1; p++) {
            const int i0 = (by_rows ? p / cu->cols : p % cu->rows) * cu->r;
            const int j0 = (by_rows ? p % cu->cols : p / cu->rows) * cu->c;
            const int mc = M - i0 < cu->r ? M - i0 : cu->r, nc = N - j0 < cu->c ? N - j0 : cu->c;
            const int kc = K - k0 < cu->kc ? K - k0 : cu->kc;
            float *c = (float *)jb->C + (size_t)i0 * jb->ldc + j0;
            int lda = 0, ldb = 0;
            if (K == 0) {
                scale_tile(c, jb->ldc, mc, nc, jb->beta);
                continue;
            }
            const float *pa = widened(a, i0, mc, k0, kc, wa, &a_at, &lda);
            const float *pb = widened(bt, j0, nc, k0, kc, wb, &b_at, &ldb);
            rm_sgemm(a->trans, !bt->trans, mc, nc, kc, jb->alpha, pa, lda, pb, ldb, k0 ? 1.0f : jb->beta, c,
                     jb->ldc);
        }
}

/* Panels [p0, p1) on one thread: direct_panels (an F32 C with a widened
 * operand) or sgemm_panels (*a_at, *b_at: the widened blocks it keeps). */
static void run_panels(const job *jb, const slot *s, const cut *cu, int p0, int p1, long *a_at, long *b_at,
                       int direct) {
    if (direct) direct_panels(jb, s, cu, p0, p1);
    else sgemm_panels(jb, s, cu, p0, p1, a_at, b_at);
}

/* The sgemm path: panels handed out to a team of threads in runs of
 * consecutive panels (guided: large runs first, then smaller ones as the
 * threads finish), so that a thread's next panel mostly shares the block it
 * has widened; an F32 C with a widened operand in one run a thread
 * (direct_panels: its k loop outside the run's panels); which thread runs a
 * panel does not change its bits. Each
 * thread on its own slot; inside a parallel region (attention's heads) all
 * on the calling thread. 0 when there is no slot or the cut does not fit. */
static int run_sgemm(const job *jb, const rm_mm_scratch *mm) {
    const layout l = layout_of(mm->dim);
    const size_t cap = l.acc + l.a + l.b;
    cut cu;
    const int direct = jb->ct == RM_DTYPE_F32 && (jb->a->t != RM_DTYPE_F32 || jb->bt->t != RM_DTYPE_F32);
    if (!(direct ? direct_cut(jb, cap, mm->serial, &cu) : cut_of(jb, cap, mm->serial, &cu))) return 0;
    const int panels = cu.rows * cu.cols;
    long a_at = -1, b_at = -1;
#ifdef _OPENMP
    if (omp_in_parallel()) {
        const int tid = omp_get_thread_num();
        if (tid >= mm->slots) return 0;
        const slot s = slot_at(mm, tid);
        run_panels(jb, &s, &cu, 0, panels, &a_at, &b_at, direct);
        return 1;
    }
    const int max = omp_get_max_threads();
    int team = max < mm->slots ? max : mm->slots;
    if (team > panels) team = panels;
    if (team > 1) {
#pragma omp parallel num_threads(team) firstprivate(a_at, b_at)
        {
            const int t = omp_get_thread_num(), n = omp_get_num_threads();
            const slot s = slot_at(mm, t);
            if (direct) /* a run of consecutive panels each: one k loop over them */
                direct_panels(jb, &s, &cu, (int)((int64_t)panels * t / n), (int)((int64_t)panels * (t + 1) / n));
            else {
#pragma omp for schedule(guided) nowait
                for (int p = 0; p < panels; p++) sgemm_panels(jb, &s, &cu, p, p + 1, &a_at, &b_at);
            }
        }
        return 1;
    }
    if (max > 1) omp_set_num_threads(1); /* OpenBLAS with one thread, as in a team */
#endif
    const slot s = slot_at(mm, 0);
    run_panels(jb, &s, &cu, 0, panels, &a_at, &b_at, direct);
#ifdef _OPENMP
    if (max > 1) omp_set_num_threads(max);
#endif
    return 1;
}

/* ---- the product ------------------------------------------------------------------- */

typedef void (*tiles_fn)(const job *jb, const slot *s, int t0, int t1);

/* The tiles split between the threads of one team, one slot each. Inside a
 * parallel region (attention's heads) all run on the calling thread. With
 * one thread, oneDNN and OpenBLAS are told so while it runs. */
static int run_tiles(tiles_fn fn, const job *jb, const rm_mm_scratch *mm) {
    const int tiles = jb->mt * jb->nt;
#ifdef _OPENMP
    if (omp_in_parallel()) {
        const int tid = omp_get_thread_num();
        if (tid >= mm->slots) return 0;
        const slot s = slot_at(mm, tid);
        fn(jb, &s, 0, tiles);
        return 1;
    }
    const int max = omp_get_max_threads();
    int team = max < mm->slots ? max : mm->slots;
    if (team > tiles) team = tiles;
    if (team > 1) {
#pragma omp parallel num_threads(team)
        {
            const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
            const slot s = slot_at(mm, tid);
            fn(jb, &s, (int)((int64_t)tiles * tid / nth), (int)((int64_t)tiles * (tid + 1) / nth));
        }
        return 1;
    }
    if (max > 1) omp_set_num_threads(1);
    const slot s = slot_at(mm, 0);
    fn(jb, &s, 0, tiles);
    if (max > 1) omp_set_num_threads(max);
#else
    const slot s = slot_at(mm, 0);
    fn(jb, &s, 0, tiles);
#endif
    return 1;
}

static long short_of_scratch; /* products that fell back to the own kernel for want of scratch */

long rm_gemm_bf16_short(void) { return __atomic_load_n(&short_of_scratch, __ATOMIC_RELAXED); }

void rm_gemm_bf16(int transA, int transB, int M, int N, int K, float alpha, const void *A, rm_dtype at, int lda,
                  const void *B, rm_dtype bt, int ldb, float beta, void *C, rm_dtype ct, int ldc,
                  const rm_mm_scratch *mm) {
    if (M <= 0 || N <= 0) return;
    pthread_once(&path_once, choose);
    /* op(B)^T is (N, K): its element (j, k) is op(B)(k, j) */
    const operand a = {A, at, lda, transA, M, K}, b = {B, bt, ldb, !transB, N, K};
    const int p = path, fits = mm && mm->p && mm->slots > 0 && M <= mm->dim && N <= mm->dim && K <= mm->dim;
    const job jb = {&a, &b, alpha, beta, C, ct, ldc, (M + DT - 1) / DT, (N + DT - 1) / DT, NULL};
    if (p == P_ONEDNN && fits && run_tiles(dnnl_tiles, &jb, mm)) return;
    if (p == P_SGEMM && fits && run_sgemm(&jb, mm)) return;
    if (p == P_ONEDNN || p == P_SGEMM) __atomic_fetch_add(&short_of_scratch, 1, __ATOMIC_RELAXED);
    rm_bf16_own_gemm(p == P_PORTABLE, &a, &b, alpha, beta, C, ct, ldc);
}

void rm_gemm_bf16_bias(int M, int N, int K, const void *A, rm_dtype at, int lda, const void *W, rm_dtype wt,
                       int ldw, const float *bias, uint16_t *C, int ldc, const rm_mm_scratch *mm) {
    if (M <= 0 || N <= 0) return;
    pthread_once(&path_once, choose);
    const operand a = {A, at, lda, 0, M, K}, b = {W, wt, ldw, 0, N, K};
    const int fits = mm && mm->p && mm->slots > 0 && M <= mm->dim && N <= mm->dim && K <= mm->dim;
    const job jb = {&a, &b, 1.0f, 0.0f, C, RM_DTYPE_BF16, ldc, 0, 0, bias};
    if (path == P_SGEMM && fits && run_sgemm(&jb, mm)) return;
    /* elsewhere: C = the rounded bias, then the product with beta 1 */
    #pragma omp parallel for schedule(static) if (!omp_in_parallel())
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = rm_f32_to_bf16(bias[j]);
    rm_gemm_bf16(0, 1, M, N, K, 1.0f, A, at, lda, W, wt, ldw, 1.0f, C, RM_DTYPE_BF16, ldc, mm);
}
