/* attn_head.c: the attention of one (batch row, head), shared by the fused
 * causal rm_attention(qkv) (attention.c) and the general op (xattention.c).
 *
 * Q is (Tq,hd), K and V are (Tk,hd), each with its own row stride:
 *   S = Q K^T * scale                  (Tq,Tk) scores
 *   P = softmax over the visible keys  (Tq,Tk) kept for the backward
 *   O = P V                            (Tq,hd)
 * Key j is visible to query i unless causal and j > i, or mask[j] == 0. A
 * query that sees no key gets P = 0 and O = 0. Invisible entries of P are
 * exactly zero.
 *
 * Causal: the products run in row blocks of RM_ATT_BLOCK queries; block
 * [r0,r1) only meets keys [0,r1), so the upper triangle is skipped (about
 * 40% of the work at T = 256) rather than computed and thrown away. Every
 * GEMM runs on the calling thread: callers run (b,h) pairs in parallel.
 * Under --precision bf16 the products take bf16 inputs and q, k, v, P and
 * O may be kept in bf16 (rm_attn_head.bf16 and the dtypes). */
#include "ops/ops.h"
#include "util/fastmath.h"
#include "util/half.h"
#include <math.h>
#include <string.h>

static int min_int(int a, int b) { return a < b ? a : b; }

/* The keys [0, cols) that rows [r0, r1) can see. */
static int block_cols(const rm_attn_head *a, int r1) { return a->causal ? min_int(r1, a->Tk) : a->Tk; }


/* Row i of S, its first `end` keys in range, into row i of P. */
RM_WIDE_VECTORS static void softmax_row(float *row, int end, int Tk, const int32_t *mask) {
    if (mask) {
        int seen = 0;
        for (int j = 0; j < end; j++) {
            seen += mask[j] != 0;
            row[j] = mask[j] ? row[j] : -INFINITY;
        }
        if (!seen) end = 0; /* no visible key: a zero row */
    }
    if (end > 0) {
        const float mx = rm_maxf(row, end);
        if (mask)
            for (int j = 0; j < end; j++) row[j] = mask[j] ? rm_fast_expf(row[j] - mx) : 0.0f;
        else
            for (int j = 0; j < end; j++) row[j] = rm_fast_expf(row[j] - mx);
        const float inv = 1.0f / rm_sumf(row, end);
        for (int j = 0; j < end; j++) row[j] *= inv;
    }
    /* the future (and all of a row with no visible key): zero, so P is fully
     * defined (recompute checks hash it) */
    for (int j = end; j < Tk; j++) row[j] = 0.0f;
}

/* P's row i = row, rounded to bf16 when P is kept in bf16; row then holds
 * what P holds (exactly: a bf16 is an fp32), for O = P V to read in place */
static void store_p_row(const rm_attn_head *a, int i, float *row) {
    if (a->pt == RM_DTYPE_F32) {
        memcpy((float *)a->p + (size_t)i * a->Tk, row, (size_t)a->Tk * sizeof *row);
        return;
    }
    uint16_t *h = (uint16_t *)a->p + (size_t)i * a->Tk;
    rm_f32_to_bf16_run(row, 1.0f, NULL, h, a->Tk);
    for (int j = 0; j < a->Tk; j++) row[j] = rm_bf16_to_f32(h[j]);
}

/* A head's products always run on the calling thread (callers run (b,h)
 * pairs in parallel): cut for one thread (rm_mm_scratch.serial). */
static rm_mm_scratch serial_mm(const rm_attn_head *a) {
    rm_mm_scratch mm = a->mm;
    mm.serial = 1;
    return mm;
}

/* A bf16 K or V (Tk rows of hd, stride *ld) widened to fp32 into dst
 * (stride hd) where the products would widen it for each row block
 * anyway (rm_gemm_bf16_widens): the same values, so the same bits. *t and
 * *ld then say F32 and hd. */
static const void *widen_once(const void *x, rm_dtype *t, int *ld, const rm_attn_head *a, float *dst) {
    if (*t != RM_DTYPE_BF16 || !rm_gemm_bf16_widens()) return x;
    for (int i = 0; i < a->Tk; i++) {
        const uint16_t *h = (const uint16_t *)x + (size_t)i * *ld;
        float *d = dst + (size_t)i * a->hd;
        for (int j = 0; j < a->hd; j++) d[j] = rm_bf16_to_f32(h[j]);
    }
    *t = RM_DTYPE_F32, *ld = a->hd;
    return dst;
}

/* --precision bf16: the same steps with every product on rm_gemm_bf16: a
 * row block's scores in the fp32 scratch a->s, the softmax in fp32, P
 * rounded once as it is stored (when kept in bf16), O = P V from the
 * scratch's copy of P (the same values: nothing to widen); K and V
 * widened once for all row blocks (widen_once). */
static void forward_bf16(const rm_attn_head *a) {
    const rm_mm_scratch mm = serial_mm(a);
    float *kw = a->s + (size_t)RM_ATT_BLOCK * a->Tk, *vw = kw + (size_t)a->Tk * a->hd;
    rm_dtype kt = a->kt, vt = a->vt;
    int ldk = a->ldk, ldv = a->ldv;
    const void *k = widen_once(a->k, &kt, &ldk, a, kw), *v = widen_once(a->v, &vt, &ldv, a, vw);
    for (int r0 = 0; r0 < a->Tq; r0 += RM_ATT_BLOCK) {
        const int r1 = min_int(r0 + RM_ATT_BLOCK, a->Tq), cols = block_cols(a, r1);
        rm_gemm_bf16(0, 1, r1 - r0, cols, a->hd, a->scale, rm_act_at(a->q, a->qt, (int64_t)r0 * a->ldq), a->qt, a->ldq,
                     k, kt, ldk, 0.0f, a->s, RM_DTYPE_F32, a->Tk, &mm);
        for (int i = r0; i < r1; i++) {
            const int end = a->causal ? min_int(i + 1, a->Tk) : a->Tk;
            float *row = a->s + (size_t)(i - r0) * a->Tk;
            softmax_row(row, end, a->Tk, a->mask);
            store_p_row(a, i, row);
        }
        rm_gemm_bf16(0, 0, r1 - r0, a->hd, cols, 1.0f, a->s, RM_DTYPE_F32, a->Tk, v, vt, ldv, 0.0f,
                     rm_act_at(a->o, a->ot, (int64_t)r0 * a->ldo), a->ot, a->ldo, &mm);
    }
}

RM_WIDE_VECTORS void rm_attn_head_forward(const rm_attn_head *a) {
    if (a->bf16) {
        forward_bf16(a);
        return;
    }
    const float *Q = a->q, *K = a->k, *V = a->v;
    float *P = a->p, *O = a->o;
    const int step = a->causal ? RM_ATT_BLOCK : a->Tq;
    for (int r0 = 0; r0 < a->Tq; r0 += step) {
        const int r1 = min_int(r0 + step, a->Tq), cols = block_cols(a, r1);
        float *p = P + (size_t)r0 * a->Tk; /* P[r0:r1, :] */
        /* S[r0:r1, 0:cols] = Q[r0:r1] K[0:cols]^T * scale (cols >= 1: Tq, Tk >= 1) */
        rm_sgemm(0, 1, r1 - r0, cols, a->hd, a->scale, Q + (size_t)r0 * a->ldq, a->ldq, K, a->ldk, 0.0f, p, a->Tk);
        for (int i = r0; i < r1; i++) {
            const int end = a->causal ? min_int(i + 1, a->Tk) : a->Tk;
            softmax_row(p + (size_t)(i - r0) * a->Tk, end, a->Tk, a->mask);
        }
        /* O[r0:r1] = P[r0:r1, 0:cols] V[0:cols] */
        rm_sgemm(0, 0, r1 - r0, a->hd, cols, 1.0f, p, a->Tk, V, a->ldv, 0.0f, O + (size_t)r0 * a->ldo, a->ldo);
    }
}

/* C[0:m, 0:hd] = alpha * A^T B + beta * C over k >= 0 rows (causal keys
 * past the last query: k = 0, which BLAS need not handle) */
static void gemm_tn_rows(int m, int hd, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                         float beta, float *C, int ldc) {
    if (k > 0) {
        rm_sgemm(1, 0, m, hd, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    for (int i = 0; i < m; i++)
        for (int d = 0; d < hd; d++) C[(size_t)i * ldc + d] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + d];
}

/* dS[r0:r1] = P * (dP - rowsum(dP * P)) in place of dP (the softmax
 * Jacobian), zero from the first invisible key to zc (dK's sums read
 * dS[i, 0:zc)). */
RM_WIDE_VECTORS static void softmax_grad(const rm_attn_head *a, float *ds, int r0, int r1, int zc) {
    for (int i = r0; i < r1; i++) {
        const float *pr = (const float *)a->p + (size_t)i * a->Tk;
        float *dr = ds + (size_t)i * a->Tk;
        const int end = a->causal ? min_int(i + 1, a->Tk) : a->Tk;
        const float dot = rm_dotf(pr, dr, end);
        for (int j = 0; j < end; j++) dr[j] = pr[j] * (dr[j] - dot);
        for (int j = end; j < zc; j++) dr[j] = 0.0f;
    }
}

/* rm_dotf(p, d, n) with p in bf16, widened as it is read: the same lanes
 * and order, so the same sum as on the widened row (vectorized) */
static inline float dot_bf16(const uint16_t *p, const float *d, int n) {
    float acc[RM_LANES] = {0};
    int i = 0;
    for (; i + RM_LANES <= n; i += RM_LANES)
        for (int l = 0; l < RM_LANES; l++) acc[l] += rm_bf16_to_f32(p[i + l]) * d[i + l];
    for (int l = 0; i + l < n; l++) acc[l] += rm_bf16_to_f32(p[i + l]) * d[i + l];
    return rm_lanes_combine(acc);
}

/* The same with P kept in bf16
 * (widened as it is read); zero from the first invisible key to zc. */
RM_WIDE_VECTORS static void softmax_grad_bf16(const rm_attn_head *a, float *ds, int r0, int r1, int zc) {
    for (int i = r0; i < r1; i++) {
        const uint16_t *pr = (const uint16_t *)a->p + (size_t)i * a->Tk;
        float *dr = ds + (size_t)i * a->Tk;
        const int end = a->causal ? min_int(i + 1, a->Tk) : a->Tk;
        const float dot = dot_bf16(pr, dr, end);
        for (int j = 0; j < end; j++) dr[j] = rm_bf16_to_f32(pr[j]) * (dr[j] - dot);
        for (int j = end; j < zc; j++) dr[j] = 0.0f;
    }
}

/* The backward below with every product on rm_gemm_bf16 (dO and dS are
 * fp32 and rounded as they are packed; q, k, v, P as their dtypes). */
static void backward_bf16(const rm_attn_head *a, const float *dO, int lddo, float *ds, float *dq, float *dk, float *dv,
                          int lddq, int lddkv, float bq, float bk, float bv) {
    const int Tq = a->Tq, Tk = a->Tk, hd = a->hd;
    const int rstep = a->causal ? RM_ATT_BLOCK : Tq, cstep = a->causal ? RM_ATT_BLOCK : Tk;
    const rm_mm_scratch mm = serial_mm(a);
    for (int r0 = 0; (dq || dk) && r0 < Tq; r0 += rstep) {
        const int r1 = min_int(r0 + rstep, Tq), cols = block_cols(a, r1);
        const int zc = a->causal ? min_int(r0 + rstep, Tk) : Tk;
        float *d = ds + (size_t)r0 * Tk;
        rm_gemm_bf16(0, 1, r1 - r0, cols, hd, 1.0f, dO + (size_t)r0 * lddo, RM_DTYPE_F32, lddo, a->v, a->vt, a->ldv,
                     0.0f, d, RM_DTYPE_F32, Tk, &mm);
        if (a->pt == RM_DTYPE_BF16) softmax_grad_bf16(a, ds, r0, r1, zc);
        else softmax_grad(a, ds, r0, r1, zc);
        if (dq)
            rm_gemm_bf16(0, 0, r1 - r0, hd, cols, a->scale, d, RM_DTYPE_F32, Tk, a->k, a->kt, a->ldk, bq,
                         dq + (size_t)r0 * lddq, RM_DTYPE_F32, lddq, &mm);
    }
    for (int c0 = 0; c0 < Tk; c0 += cstep) {
        const int c1 = min_int(c0 + cstep, Tk), rs = a->causal ? min_int(c0, Tq) : 0;
        const int64_t at = (int64_t)rs * Tk + c0;
        if (dv)
            rm_gemm_bf16(1, 0, c1 - c0, hd, Tq - rs, 1.0f, rm_act_at(a->p, a->pt, at), a->pt, Tk,
                         dO + (size_t)rs * lddo, RM_DTYPE_F32, lddo, bv, dv + (size_t)c0 * lddkv, RM_DTYPE_F32, lddkv,
                         &mm);
        if (dk)
            rm_gemm_bf16(1, 0, c1 - c0, hd, Tq - rs, a->scale, ds + at, RM_DTYPE_F32, Tk,
                         rm_act_at(a->q, a->qt, (int64_t)rs * a->ldq), a->qt, a->ldq, bk, dk + (size_t)c0 * lddkv,
                         RM_DTYPE_F32, lddkv, &mm);
    }
}

/* Backward, with dO (Tq,hd) and a (Tq,Tk) scratch ds:
 *   dP = dO V^T,   dS = P * (dP - rowsum(dP * P))   (the softmax Jacobian)
 *   dQ = dS K * scale,   dK = dS^T Q * scale,   dV = P^T dO
 * P and dS are zero wherever a key is invisible. Causal: row blocks
 * [r0,r1) of dP, dS and dQ stop at key r1, and key blocks [c0,c1) of dK
 * and dV (products with P^T, dS^T) start their sums at query c0. A NULL
 * dq, dk or dv is not computed; beta 1 adds into it. */
RM_WIDE_VECTORS void rm_attn_head_backward(const rm_attn_head *a, const float *dO, int lddo, float *ds, float *dq,
                                           float *dk, float *dv, int lddq, int lddkv, float bq, float bk,
                                           float bv) {
    if (a->bf16) {
        backward_bf16(a, dO, lddo, ds, dq, dk, dv, lddq, lddkv, bq, bk, bv);
        return;
    }
    const float *P = a->p, *Q = a->q, *K = a->k, *V = a->v;
    const int Tq = a->Tq, Tk = a->Tk, hd = a->hd;
    const int rstep = a->causal ? RM_ATT_BLOCK : Tq, cstep = a->causal ? RM_ATT_BLOCK : Tk;
    for (int r0 = 0; (dq || dk) && r0 < Tq; r0 += rstep) {
        const int r1 = min_int(r0 + rstep, Tq), cols = block_cols(a, r1);
        const int zc = a->causal ? min_int(r0 + rstep, Tk) : Tk; /* dK's sums read dS[i, 0:zc) */
        float *d = ds + (size_t)r0 * Tk;
        /* dP[r0:r1, 0:cols], then dS row by row, zero from the first invisible key to zc */
        rm_sgemm(0, 1, r1 - r0, cols, hd, 1.0f, dO + (size_t)r0 * lddo, lddo, V, a->ldv, 0.0f, d, Tk);
        softmax_grad(a, ds, r0, r1, zc);
        /* dQ[r0:r1] = dS[r0:r1, 0:cols] K[0:cols] * scale */
        if (dq)
            rm_sgemm(0, 0, r1 - r0, hd, cols, a->scale, d, Tk, K, a->ldk, bq, dq + (size_t)r0 * lddq, lddq);
    }
    for (int c0 = 0; c0 < Tk; c0 += cstep) {
        const int c1 = min_int(c0 + cstep, Tk), rs = a->causal ? min_int(c0, Tq) : 0;
        const size_t at = (size_t)rs * Tk + (size_t)c0; /* P[rs:Tq, c0:c1], dS[rs:Tq, c0:c1] */
        /* dV[c0:c1] = P[rs:Tq, c0:c1]^T dO[rs:Tq];  dK[c0:c1] = dS[rs:Tq, c0:c1]^T Q[rs:Tq] * scale */
        if (dv)
            gemm_tn_rows(c1 - c0, hd, Tq - rs, 1.0f, P + at, Tk, dO + (size_t)rs * lddo, lddo, bv,
                         dv + (size_t)c0 * lddkv, lddkv);
        if (dk)
            gemm_tn_rows(c1 - c0, hd, Tq - rs, a->scale, ds + at, Tk, Q + (size_t)rs * a->ldq, a->ldq, bk,
                         dk + (size_t)c0 * lddkv, lddkv);
    }
}
