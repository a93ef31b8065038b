/* gemm.c: the one matrix multiply of remat, and thread control.
 *
 * rm_sgemm is row-major C = alpha*op(A)*op(B) + beta*C with op(X) = X or X^T
 * (op(A) is MxK, op(B) is KxN). With OpenBLAS it calls cblas_sgemm; without
 * it, a portable blocked kernel that needs nothing but a C compiler.
 *
 * OpenBLAS is loaded with dlopen on the first multiply, not linked: when it
 * loads, it reserves a 128 MiB buffer per thread, and under an address-space
 * limit (`ulimit -v`) too small for them its start-up retries the failed
 * allocation forever. Loading late keeps `remat --version`, `plan` and the
 * like free of it, and under such a limit remat uses the portable GEMM. */
#include "util/util.h"
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <sys/resource.h>
#include <unistd.h>
#ifdef REMAT_HAVE_BLAS
#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>

static __typeof__(&cblas_sgemm) blas_sgemm;
static __typeof__(&openblas_set_num_threads) blas_set_threads;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

/* Whether OpenBLAS's start-up buffers (128 MiB for each thread and one more)
 * fit under RLIMIT_AS beside what the process maps already. */
static int blas_fits_address_space(void) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads() > omp_get_num_procs() ? omp_get_max_threads() : omp_get_num_procs();
#endif
    return rm_address_space_room((unsigned long long)(threads + 1) * (128ull << 20));
}

static void blas_load(void) {
    if (!blas_fits_address_space()) return;
    void *h = dlopen(REMAT_BLAS_SO, RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
    /* POSIX's way to take a function pointer from dlsym */
    *(void **)&blas_sgemm = dlsym(h, "cblas_sgemm");
    *(void **)&blas_set_threads = dlsym(h, "openblas_set_num_threads");
    if (!blas_sgemm || !blas_set_threads) blas_sgemm = NULL, blas_set_threads = NULL;
}

static int blas_ready(void) {
    pthread_once(&blas_once, blas_load);
    return blas_sgemm != NULL;
}
#endif

int rm_address_space_room(unsigned long long need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 1;
    unsigned long long mapped = 0, pages;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%llu", &pages) == 1) mapped = pages * (unsigned long long)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    return mapped + need <= (unsigned long long)rl.rlim_cur;
}

int rm_gemm_has_blas(void) {
#ifdef REMAT_HAVE_BLAS
    return blas_ready();
#else
    return 0;
#endif
}

int rm_default_threads(void) {
#ifdef _OPENMP
    return omp_get_num_procs();
#else
    return 1;
#endif
}

/* One knob for both pools. OpenBLAS's OpenMP build shares the OpenMP team,
 * and inside our own parallel regions it runs single-threaded, so the two
 * never oversubscribe the cores. */
void rm_set_threads(int n) {
    if (n < 1) n = 1;
#ifdef _OPENMP
    if (omp_get_max_threads() != n) omp_set_num_threads(n);
#endif
#ifdef REMAT_HAVE_BLAS
    if (blas_ready()) blas_set_threads(n);
#endif
}

/* The calling thread's index in the current parallel region (0 outside):
 * kernels index per-thread workspace slices with it. */
int rm_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* Block sizes: a kc x nc panel of B (64 KiB) stays in L2 while rows of A stream. */
enum { GEMM_MC = 64, GEMM_KC = 256, GEMM_NC = 64 };

void rm_gemm_fallback(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc) {
    /* C = beta*C first; beta == 0 must not propagate NaN from old C */
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof *c);
        else if (beta != 1.0f)
            for (int j = 0; j < N; j++) c[j] *= beta;
    }
    if (M == 0 || N == 0 || K == 0 || alpha == 0.0f) return;
    #pragma omp parallel
    {
        /* packed panels on the stack: no allocation per call (128 KiB per thread) */
        float ap[GEMM_MC * GEMM_KC], bp[GEMM_KC * GEMM_NC];
        /* every thread owns whole row blocks of C: no two threads write the same element */
        #pragma omp for schedule(static)
        for (int i0 = 0; i0 < M; i0 += GEMM_MC) {
            int mc = M - i0 < GEMM_MC ? M - i0 : GEMM_MC;
            for (int j0 = 0; j0 < N; j0 += GEMM_NC) {
                int nc = N - j0 < GEMM_NC ? N - j0 : GEMM_NC;
                for (int k0 = 0; k0 < K; k0 += GEMM_KC) {
                    int kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
                    /* pack op(B)[k0:k0+kc, j0:j0+nc] row-major, and alpha*op(A) block */
                    for (int k = 0; k < kc; k++)
                        for (int j = 0; j < nc; j++)
                            bp[k * nc + j] = transB ? B[(size_t)(j0 + j) * ldb + k0 + k]
                                                    : B[(size_t)(k0 + k) * ldb + j0 + j];
                    for (int i = 0; i < mc; i++)
                        for (int k = 0; k < kc; k++)
                            ap[i * kc + k] = alpha * (transA ? A[(size_t)(k0 + k) * lda + i0 + i]
                                                             : A[(size_t)(i0 + i) * lda + k0 + k]);
                    for (int i = 0; i < mc; i++) {
                        float acc[GEMM_NC];
                        float *c = C + (size_t)(i0 + i) * ldc + j0;
                        for (int j = 0; j < nc; j++) acc[j] = 0.0f;
                        for (int k = 0; k < kc; k++) {
                            float a = ap[i * kc + k];
                            const float *b = bp + k * nc;
                            for (int j = 0; j < nc; j++) acc[j] += a * b[j];
                        }
                        for (int j = 0; j < nc; j++) c[j] += acc[j];
                    }
                }
            }
        }
    }
}

/* OpenBLAS packs a panel of op(A) that spans all M rows of a row-major
 * multiply (up to ~512 of its K columns) into a buffer it keeps: ~2 KiB per
 * row, 50 MB for a GPT-2 head's weight gradient (M = 50257), memory that no
 * plan sees. Multiplies of more rows run as slices of at most this many
 * rows (C's rows and op(A)'s rows are sliced alike; each element's sum over
 * K is the same), so the buffer stays under ~4 MiB. */
enum { BLAS_MAX_ROWS = 2048 };

void rm_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
#ifdef REMAT_HAVE_BLAS
    if (blas_ready()) {
        for (int m0 = 0; m0 < M || m0 == 0; m0 += BLAS_MAX_ROWS) {
            int mc = M - m0 < BLAS_MAX_ROWS ? M - m0 : BLAS_MAX_ROWS;
            const float *a = transA ? A + m0 : A + (size_t)m0 * lda; /* op(A)'s rows m0.. */
            blas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, mc,
                       N, K, alpha, a, lda, B, ldb, beta, C + (size_t)m0 * ldc, ldc);
        }
        return;
    }
#endif
    rm_gemm_fallback(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
