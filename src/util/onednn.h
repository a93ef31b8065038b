/* util/onednn.h: oneDNN's bf16 matmul on blocks of fixed shapes (onednn.c),
 * for gemm_bf16.c. A block's shape is three indices: m = 16 << mi and
 * n = 16 << ni (mi, ni in 0..3: 16 .. 128), k = 32 << ki (ki in 0..3: 32 ..
 * 256). */
#ifndef REMAT_ONEDNN_H
#define REMAT_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

enum { RM_DNNL_SHAPES = 64 };
/* The scratchpad a caller gives a block (oneDNN's need is checked against it). */
#define RM_DNNL_SCRATCHPAD ((size_t)16 << 10)

/* Loads oneDNN and creates the blocks' primitives, once: 1 where bf16
 * blocks run on a brgemm kernel. */
int rm_dnnl_ready(void);
/* "oneDNN brg:avx512_core_bf16", or why it is not used. */
const char *rm_dnnl_status(void);
/* acc (m x n fp32, row-major) += a (m x k bf16, row-major) b (k x n bf16,
 * oneDNN's BA16a{n, at most 64}b2a: pairs of k per column, columns in
 * groups of min(n, 64)), on the calling thread, with scratchpad
 * (RM_DNNL_SCRATCHPAD bytes, 64-byte aligned). 0 on failure (acc as it was). */
int rm_dnnl_block(int mi, int ni, int ki, const uint16_t *a, const uint16_t *b, float *acc, void *scratchpad);
/* The largest scratchpad a block asked for (0 when oneDNN is not used). */
size_t rm_dnnl_scratchpad_need(void);

#endif
