/* util/gemm_bf16_own.h: remat's own bf16 kernel (gemm_bf16_own.c) and
 * what gemm_bf16.c's other paths share with it: operands seen as bf16
 * pairs, their packing, and writing a tile of fp32 sums into C. */
#ifndef REMAT_GEMM_BF16_OWN_H
#define REMAT_GEMM_BF16_OWN_H

#include "util/util.h"

/* op(X) seen as (rows, cols): element (i, k) at p[i*ld + k], or p[k*ld + i]
 * when trans; t is F32, BF16 or F16. */
typedef struct rm_bf16_operand {
    const void *p;
    rm_dtype t;
    int ld, trans, rows, cols;
} rm_bf16_operand;

/* Rows [i0, i0 + blk) of op(X), k's [k0, k0 + 2 kp), as bf16 (an F32 or
 * F16 element rounded to nearest even) in groups of R rows: per group g,
 * per pair p, the R rows' pairs (k, k+1) as one 32-bit word, low half k:
 * out[(g * pitch + p) * R + r]. Zero outside op(X) and for the k that pads
 * an odd count. R = 1 is a row-major block (row stride 2 pitch bf16); R =
 * 16, 32, 64 is oneDNN's BA16a{R}b2a for op(B)^T's rows. blk <= 512,
 * 2 kp <= 512. */
void rm_bf16_pack(const rm_bf16_operand *x, int i0, int blk, int R, int k0, int kp, int pitch, uint32_t *out);

/* C rows [i0, i0 + mc), columns [j0, j0 + nc) = alpha * acc + beta * C
 * (acc row stride lda; beta 0 ignores C, NaN included); C F32 or BF16
 * (rounded once). */
void rm_bf16_write_tile(const float *acc, int lda, int mc, int nc, float alpha, float beta, void *C, rm_dtype ct,
                        int ldc, int i0, int j0);

/* The own kernel's product (gemm_bf16.c's contract), its packed panels on
 * the stack: the AVX512-BF16 micro-kernel where the processor has it and it
 * passed its start-up check, else (or with portable) the portable one. */
void rm_bf16_own_gemm(int portable, const rm_bf16_operand *a, const rm_bf16_operand *bt, float alpha, float beta,
                      void *C, rm_dtype ct, int ldc);
/* 1 when the AVX512-BF16 micro-kernel runs here (detected, self-checked). */
int rm_bf16_own_avx512(void);
/* The start-up check again: 1 when the micro-kernel in use (portable: the
 * portable one) agrees with the portable one on a fixed micro-tile. */
int rm_bf16_own_selfcheck(int portable);

#endif
