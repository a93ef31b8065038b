/* gemm_peak.c: this machine's cblas_sgemm speed on matrix shapes like the
 * benchmark models', with a given thread count, as JSON on stdout.
 *
 *   gemm_peak THREADS [bf16 | bf16-PATH] [MxNxK[:TT] ...]
 *
 * bf16: libremat's rm_gemm_bf16 instead (the product of --precision bf16:
 * bf16 A and B, fp32 sums and C), on the path it picks here (oneDNN's
 * brgemm where the processor has bf16, else OpenBLAS's sgemm on widened
 * operands, else remat's own kernel); bf16-onednn, bf16-sgemm,
 * bf16-avx512_bf16, bf16-portable force one (refused where it is not
 * available). The FLOP count is the same 2*M*N*K.
 *
 * Row-major C (MxN) = op(A) (MxK) * op(B) (KxN); TT is two letters, N or T,
 * for op(A) and op(B) (default NT: a linear layer's forward, x @ W^T).
 * Without shapes it measures those of bench/run.sh's two models:
 *   (A) 12 x 384, T 256, B 8: 2048 rows;  (B) GPT-2 124M, T 64, B 4: 256 rows.
 * Each shape: one untimed call, then calls until 0.5 s have passed (at least
 * 3); the best call counts (a peak, not an average). FLOPs = 2*M*N*K.
 * "peak_gflops" is the largest over the shapes measured.
 *
 * Built by bench/run.sh with the OpenBLAS flags of the Makefile (the OpenMP
 * build of OpenBLAS when installed), so it measures the library remat uses. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include "util/half.h"
#include "util/util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_clock.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct shape {
    int m, n, k, ta, tb;
    const char *what;
} shape;

static const shape defaults[] = {
    {2048, 1152, 384, 0, 1, "A: attn.c_attn forward"},
    {2048, 1536, 384, 0, 1, "A: mlp.c_fc forward"},
    {2048, 384, 1536, 0, 1, "A: mlp.c_proj forward"},
    {2048, 1536, 384, 0, 0, "A: mlp.c_proj backward dx"},
    {1536, 384, 2048, 1, 0, "A: mlp.c_fc backward dW"},
    {2048, 256, 384, 0, 1, "A: head forward (vocab 256)"},
    {256, 2304, 768, 0, 1, "B: attn.c_attn forward"},
    {256, 3072, 768, 0, 1, "B: mlp.c_fc forward"},
    {256, 768, 3072, 0, 1, "B: mlp.c_proj forward"},
    {3072, 768, 256, 1, 0, "B: mlp.c_fc backward dW"},
    {256, 50257, 768, 0, 1, "B: head forward (vocab 50257)"},
    {256, 768, 50257, 0, 0, "B: head backward dx"},
    {50257, 768, 256, 1, 0, "B: head backward dW"},
};

static double now_s(void) { return bench_now_ms() * 1e-3; }

static int parse_shape(const char *s, shape *out) {
    char tt[3] = "NT";
    int used = 0;
    memset(out, 0, sizeof *out);
    if (sscanf(s, "%dx%dx%d%n", &out->m, &out->n, &out->k, &used) != 3) return 0;
    if (s[used] == ':') {
        if (strlen(s + used + 1) != 2) return 0;
        memcpy(tt, s + used + 1, 2);
    } else if (s[used]) {
        return 0;
    }
    for (int i = 0; i < 2; i++)
        if (tt[i] != 'N' && tt[i] != 'T') return 0;
    out->ta = tt[0] == 'T';
    out->tb = tt[1] == 'T';
    out->what = "given";
    return out->m > 0 && out->n > 0 && out->k > 0;
}

static float *filled(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static rm_mm_scratch mm; /* rm_gemm_bf16's scratch, as a session plans it */

/* One call of the product measured: sgemm, or rm_gemm_bf16 on bf16 copies. */
static void product(int bf16, const shape *s, const float *A, const float *B, const uint16_t *Ah, const uint16_t *Bh,
                    float *C) {
    int lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (bf16) {
        rm_gemm_bf16(s->ta, s->tb, s->m, s->n, s->k, 1.0f, Ah, RM_DTYPE_BF16, lda, Bh, RM_DTYPE_BF16, ldb, 0.0f, C,
                     RM_DTYPE_F32, s->n, &mm);
        return;
    }
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans, s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k,
                1.0f, A, lda, B, ldb, 0.0f, C, s->n);
}

static uint16_t *narrowed(const float *x, size_t n) {
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; h && i < n; i++) h[i] = rm_f32_to_bf16(x[i]);
    return h;
}

int main(int argc, char **argv) {
    if (argc < 2 || atoi(argv[1]) < 1) {
        fprintf(stderr, "usage: %s THREADS [bf16 | bf16-PATH] [MxNxK[:NT] ...]\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[1]), bf16 = 0;
    if (argc > 2 && !strncmp(argv[2], "bf16", 4)) {
        bf16 = 1;
        if (argv[2][4] && (argv[2][4] != '-' || !rm_gemm_bf16_force(argv[2] + 5))) {
            fprintf(stderr, "gemm_peak: %s: no such bf16 path here (bf16 runs %s)\n", argv[2], rm_bf16_kernel());
            return 2;
        }
        argv[2] = argv[1], argv++, argc--; /* the shapes follow */
        mm = (rm_mm_scratch){malloc(rm_gemm_bf16_scratch(threads, 1 << 30)), threads, 1 << 30, 0};
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    openblas_set_num_threads(threads);

    int n_shapes = argc > 2 ? argc - 2 : (int)(sizeof defaults / sizeof defaults[0]);
    shape *sh = calloc((size_t)n_shapes, sizeof *sh);
    if (!sh) return 1;
    for (int i = 0; i < n_shapes; i++) {
        if (argc > 2) {
            if (!parse_shape(argv[i + 2], &sh[i])) {
                fprintf(stderr, "gemm_peak: bad shape '%s' (expected MxNxK or MxNxK:NT)\n", argv[i + 2]);
                return 2;
            }
        } else {
            sh[i] = defaults[i];
        }
    }

    const char *ct = getenv("OPENBLAS_CORETYPE"), *l2 = getenv("OPENBLAS_L2_SIZE");
    printf("{\n  \"threads\": %d,\n  \"openblas_threads\": %d,\n  \"openblas_config\": \"%s\",\n", threads,
           openblas_get_num_threads(), openblas_get_config());
    printf("  \"precision\": \"%s\",\n  \"kernel\": \"%s\",\n", bf16 ? "bf16" : "fp32",
           bf16 ? rm_bf16_kernel() : "cblas_sgemm");
    printf("  \"OPENBLAS_CORETYPE\": %s%s%s,\n  \"OPENBLAS_L2_SIZE\": %s%s%s,\n", ct ? "\"" : "",
           ct ? ct : "null", ct ? "\"" : "", l2 ? "\"" : "", l2 ? l2 : "null", l2 ? "\"" : "");
    printf("  \"shapes\": [\n");
    double peak = 0.0;
    for (int i = 0; i < n_shapes; i++) {
        const shape *s = &sh[i];
        size_t na = (size_t)s->m * s->k, nb = (size_t)s->k * s->n, nc = (size_t)s->m * s->n;
        float *A = filled(na, 1u + (unsigned)i), *Bm = filled(nb, 7u + (unsigned)i), *Cm = calloc(nc, sizeof(float));
        if (!A || !Bm || !Cm) {
            fprintf(stderr, "gemm_peak: out of memory for %dx%dx%d\n", s->m, s->n, s->k);
            return 1;
        }
        uint16_t *Ah = bf16 ? narrowed(A, na) : NULL, *Bh = bf16 ? narrowed(Bm, nb) : NULL;
        if (bf16 && (!Ah || !Bh)) {
            fprintf(stderr, "gemm_peak: out of memory for %dx%dx%d\n", s->m, s->n, s->k);
            return 1;
        }
        product(bf16, s, A, Bm, Ah, Bh, Cm);
        double best = 1e30, start = now_s();
        int calls = 0;
        while (calls < 3 || now_s() - start < 0.5) {
            double t0 = now_s();
            product(bf16, s, A, Bm, Ah, Bh, Cm);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            calls++;
        }
        free(Ah);
        free(Bh);
        double gflops = 2.0 * s->m * s->n * (double)s->k / best / 1e9;
        if (gflops > peak) peak = gflops;
        printf("    {\"m\": %d, \"n\": %d, \"k\": %d, \"op\": \"%c%c\", \"what\": \"%s\", \"best_ms\": %.3f, "
               "\"calls\": %d, \"gflops\": %.2f}%s\n",
               s->m, s->n, s->k, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', s->what, best * 1e3, calls, gflops,
               i + 1 < n_shapes ? "," : "");
        free(A);
        free(Bm);
        free(Cm);
    }
    printf("  ],\n  \"peak_gflops\": %.2f\n}\n", peak);
    free(sh);
    free(mm.p);
    return 0;
}
