/* bf16_linear.c: a linear layer's forward as --precision bf16 runs it (bf16
 * x, the fp32 weight, a BF16 output with the bias added as it is rounded:
 * rm_gemm_bf16_bias) against fp32's (cblas_sgemm into C filled with the
 * bias), on the models' shapes, alternating, the best call of each round.
 *
 *   bf16_linear THREADS [ROUNDS [CALLS]]        (defaults 2, 5, 15)
 *
 * Prints a line per shape: each round's fp32 / bf16 ms, the best of each
 * and bf16 / fp32. It measures the kernels alone, without a step's noise
 * (docs/PERFORMANCE.md, "Seventh pass"). Unset OPENBLAS_CORETYPE and
 * OPENBLAS_L2_SIZE for a user's configuration. */
#define _POSIX_C_SOURCE 200809L
#include "util/half.h"
#include "util/util.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"

static const struct {
    int m, n, k;
    const char *what;
} shapes[] = {
    {256, 2304, 768, "GPT-2 shape: qkv"},     {256, 3072, 768, "GPT-2 shape: fc"},
    {256, 50257, 768, "GPT-2 shape: head"},   {2048, 1152, 384, "shape A: qkv"},
    {2048, 1536, 384, "shape A: fc"},         {2048, 256, 384, "shape A: head"},
};

/* x (m, k), w (n, k), bias (n): fp32, and x's bf16 copy */
typedef struct operands {
    float *x, *w, *bias, *c;
    uint16_t *xh, *ch;
} operands;

static int fill(operands *o, int m, int n, int k) {
    o->x = malloc(sizeof(float) * m * k), o->w = malloc(sizeof(float) * n * k), o->bias = malloc(sizeof(float) * n);
    o->c = malloc(sizeof(float) * m * n), o->xh = malloc(2 * (size_t)m * k), o->ch = malloc(2 * (size_t)m * n);
    if (!o->x || !o->w || !o->bias || !o->c || !o->xh || !o->ch) return 0;
    unsigned s = 12345u;
    for (long i = 0; i < (long)m * k; i++, s = s * 1664525u + 1013904223u) {
        o->x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
        o->xh[i] = rm_f32_to_bf16(o->x[i]);
    }
    for (long i = 0; i < (long)n * k; i++, s = s * 1664525u + 1013904223u) o->w[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    for (int j = 0; j < n; j++) o->bias[j] = 0.01f * (float)(j % 100);
    return 1;
}

static double best_of(int bf16, int calls, int m, int n, int k, operands *o, const rm_mm_scratch *mm) {
    double best = 1e30;
    for (int i = 0; i < calls; i++) {
        const double t0 = bench_now_ms();
        if (bf16) {
            rm_gemm_bf16_bias(m, n, k, o->xh, RM_DTYPE_BF16, k, o->w, RM_DTYPE_F32, k, o->bias, o->ch, n, mm);
        } else {
            for (int r = 0; r < m; r++) memcpy(o->c + (size_t)r * n, o->bias, sizeof(float) * n);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, o->x, k, o->w, k, 1.0f, o->c, n);
        }
        const double t = bench_now_ms() - t0;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 2, rounds = argc > 2 ? atoi(argv[2]) : 5;
    const int calls = argc > 3 ? atoi(argv[3]) : 15;
    if (threads < 1 || rounds < 1 || rounds > 100 || calls < 1) {
        fprintf(stderr, "usage: %s THREADS [ROUNDS [CALLS]]\n", argv[0]);
        return 2;
    }
    rm_set_threads(threads);
    rm_gemm_bf16_prepare();
    const int64_t dim = 50257;
    rm_mm_scratch mm = {malloc(rm_gemm_bf16_scratch(threads, dim)), threads, dim, 0};
    printf("bf16 path: %s, %d threads; per round fp32 / bf16 ms (best of %d calls)\n", rm_bf16_kernel(), threads, calls);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int m = shapes[s].m, n = shapes[s].n, k = shapes[s].k;
        operands o;
        if (!mm.p || !fill(&o, m, n, k)) {
            fprintf(stderr, "bf16_linear: out of memory\n");
            return 1;
        }
        double b32 = 1e30, b16 = 1e30;
        printf("%-20s %5d x %5d x %4d:", shapes[s].what, m, n, k);
        for (int r = 0; r < rounds; r++) { /* the order alternates from round to round */
            const double first = best_of(r % 2, calls, m, n, k, &o, &mm);
            const double second = best_of(!(r % 2), calls, m, n, k, &o, &mm);
            const double t32 = r % 2 ? second : first, t16 = r % 2 ? first : second;
            printf(" %.2f/%.2f", t32, t16);
            b32 = t32 < b32 ? t32 : b32, b16 = t16 < b16 ? t16 : b16;
        }
        printf("  best %.2f / %.2f: bf16/fp32 %.3f\n", b32, b16, b16 / b32);
        free(o.x), free(o.w), free(o.bias), free(o.c), free(o.xh), free(o.ch);
    }
    free(mm.p);
    return 0;
}
