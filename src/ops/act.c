/* act.c: activations kept in bf16 under --precision bf16, for the kernels
 * of ops/: reading and writing runs of them as floats, and the products of
 * an op (fp32, or bf16 inputs with fp32 sums). */
#include "ops/ops.h"
#include "util/half.h"

const float *rm_act_read(const void *p, rm_dtype t, int64_t off, int64_t n, float *buf) {
    if (t != RM_DTYPE_BF16) return (const float *)p + off;
    const uint16_t *h = (const uint16_t *)p + off;
    for (int64_t i = 0; i < n; i++) buf[i] = rm_bf16_to_f32(h[i]);
    return buf;
}

void rm_act_write(void *p, rm_dtype t, int64_t off, int64_t n, const float *buf) {
    if (t != RM_DTYPE_BF16) return; /* the kernel wrote p itself (rm_act_dst) */
    rm_f32_to_bf16_run(buf, 1.0f, NULL, (uint16_t *)p + off, n);
}

void rm_op_gemm(const rm_kernel_ctx *c, int transA, int transB, int M, int N, int K, float alpha, const void *A,
                rm_dtype at, int lda, const void *B, rm_dtype bt, int ldb, float beta, void *C, rm_dtype ct, int ldc) {
    if (c->node->bf16) rm_gemm_bf16(transA, transB, M, N, K, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, &c->mm);
    else rm_sgemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void rm_op_gemm_w(const rm_kernel_ctx *c, int transW, int M, int N, int K, float alpha, const void *A, rm_dtype at,
                  int lda, const void *W, rm_dtype wt, int ldw, float beta, void *C, rm_dtype ct, int ldc,
                  float *scratch) {
    if (c->node->bf16) rm_gemm_bf16(0, transW, M, N, K, alpha, A, at, lda, W, wt, ldw, beta, C, ct, ldc, &c->mm);
    else rm_gemm_w(transW, M, N, K, alpha, A, lda, W, wt, ldw, beta, C, ldc, scratch);
}
