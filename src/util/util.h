/* util/util.h: what the util/ folder offers every layer above it: GEMM,
 * counter-based random numbers, and small helpers. Depends on nothing but
 * the public header. */
#ifndef REMAT_UTIL_H
#define REMAT_UTIL_H

#include "remat.h"
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Row-major single-precision GEMM: C = alpha*op(A)*op(B) + beta*C. Uses
 * cblas_sgemm when built with BLAS, else a portable blocked kernel. */
void rm_sgemm(int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta,
              float *C, int ldc);
void rm_gemm_fallback(int transA, int transB, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta,
                      float *C, int ldc);
/* gemm_half.c: C = alpha * A op(W) + beta * C for a weight W stored as
 * wt (F32: rm_sgemm; BF16, F16: widened a panel of rows at a time into
 * scratch, rm_gemm_w_scratch(transW, N, K) floats). transW: op(W) = W^T,
 * W (N,K); else W (K,N). A (M,K) and C (M,N) fp32, never transposed. */
void rm_gemm_w(int transW, int M, int N, int K, float alpha, const float *A, int lda, const void *W, rm_dtype wt,
               int ldw, float beta, float *C, int ldc, float *scratch);
size_t rm_gemm_w_scratch(int transW, int N, int K);
/* gemm_bf16.c: C = alpha * op(A) op(B) + beta * C, the product of
 * --precision bf16: bf16 inputs (oneDNN's brgemm, or remat's own kernel;
 * on the sgemm path bf16 operands widened, F32 ones as they are), fp32 sums
 * in an order fixed by the shapes (the same at any thread count). A and B
 * F32, F16 or BF16; C F32 or BF16 (rounded once). mm: the scratch, one
 * slot per thread (NULL: the own kernel on the stack). */
typedef struct rm_mm_scratch {
    void *p;     /* rm_gemm_bf16_scratch(slots, dim) bytes */
    int slots;   /* threads that may run tiles at once */
    int64_t dim; /* no product's M, N or K exceeds it */
    /* 1: the caller runs each product on its own thread, always (inside a
     * parallel loop over attention's heads): the sgemm path then cuts an
     * F32-output product for one thread (one panel where the slot holds
     * it) rather than in panels for others. A property of the call site,
     * never of the thread count: the bits stay the same at any. */
    int serial;
} rm_mm_scratch;
size_t rm_gemm_bf16_scratch(int threads, int64_t dim);
void rm_gemm_bf16(int transA, int transB, int M, int N, int K, float alpha, const void *A, rm_dtype at, int lda,
                  const void *B, rm_dtype bt, int ldb, float beta, void *C, rm_dtype ct, int ldc,
                  const rm_mm_scratch *mm);
/* C = round(A W^T + round(bias)) for a BF16 C (M x N, ldc; A (M x K, lda)
 * and W (N x K, ldw) as rm_gemm_bf16's operands): a linear layer's forward with
 * its bias, the same bits as filling C with the rounded bias and
 * rm_gemm_bf16 with beta 1. The sgemm path adds the bias as it rounds each
 * panel (C is not written twice nor read). */
void rm_gemm_bf16_bias(int M, int N, int K, const void *A, rm_dtype at, int lda, const void *W, rm_dtype wt,
                       int ldw, const float *bias, uint16_t *C, int ldc, const rm_mm_scratch *mm);
/* Chooses the path (loading oneDNN and OpenBLAS), once: rm_compile calls
 * it, so no step does. */
void rm_gemm_bf16_prepare(void);
/* 1 where bf16 products widen bf16 operands to fp32 (the sgemm path): a
 * caller that multiplies one bf16 operand many times may widen it once
 * (exactly) and pass it as F32, for the same bits. */
int rm_gemm_bf16_widens(void);
/* Tests: how many products ran the own kernel instead of the chosen path
 * for want of scratch (none should: rm_node_mm_dim bounds every side). */
long rm_gemm_bf16_short(void);
/* Tests: run the path named ("onednn", "sgemm", "avx512_bf16",
 * "portable"); 0 if it is not available here. NULL: the chosen one again. */
int rm_gemm_bf16_force(const char *kernel);
/* 1 when `need` more bytes of address space fit under RLIMIT_AS (ulimit -v)
 * beside what the process maps: OpenBLAS and oneDNN load only then. */
int rm_address_space_room(unsigned long long need);
void rm_set_threads(int n);  /* sets OpenMP and BLAS threads */
int rm_thread_id(void);      /* this thread's index in the parallel region (0 outside one) */

/* Counter-based random numbers (Philox4x32-10): the same key and counter
 * always give the same four 32-bit words, so masks recompute exactly. */
void rm_philox4x32(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4]);
/* rm_philox_uniform (remat.h): a uniform float in [0,1) from the same stream. */
/* Standard normal for element i of the stream (Box-Muller on Philox). */
float rm_philox_normal(uint64_t seed, uint32_t a, uint32_t b, uint64_t i);

size_t rm_dtype_size(rm_dtype d);
/* The values the ops and the optimizer take (rope.c, rmsnorm.c, llama.c,
 * optim.c). Every reader of a file applies the same rule (config.json:
 * hfconfig.c; a checkpoint file's metadata: runinfo.c), so a value out of
 * range is refused naming its file and key; it passed the readers' looser
 * ranges and failed at the op, whose message named neither. Tested on the
 * float the model keeps (1.00000001 is 1.0f); NaN fails each. */
static inline int rm_rope_theta_ok(double t) { return t > 1.0 && t <= (double)1e30f && (float)t > 1.0f; }
static inline int rm_norm_eps_ok(double e) { return e > 0.0 && e < 1.0 && (float)e > 0.0f && (float)e < 1.0f; }
static inline int rm_adam_beta_ok(double b) { return b >= 0.0 && b < 1.0 && (float)b < 1.0f; }
static inline int rm_adam_eps_ok(double e) { return e > 0.0 && e <= 1.0 && (float)e > 0.0f; }
/* "64MiB", "1.5GiB", "500MB", "123456" -> bytes; "50%" -> 50 with *percent = 1.
 * Only positive finite sizes; budgets above RM_MAX_BUDGET_BYTES (2^60 bytes,
 * 1 EiB) are refused by the planner, so its int64_t arithmetic cannot overflow. */
rm_status rm_parse_bytes(const char *s, double *bytes, int *percent);
#define RM_MAX_BUDGET_BYTES ((int64_t)1 << 60)
/* Opens `path` for reading if it is a regular file of at most max_bytes,
 * never blocking (a FIFO or device is refused at once); returns the fd and
 * its size, or -1 with *st and err set. rm_read_file (remat.h) and the
 * safetensors reader use it. */
int rm_open_regular(const char *path, size_t max_bytes, size_t *size, rm_status *st, char *err, size_t errlen);
void rm_strlcpy(char *dst, const char *src, size_t n);
/* A 64-bit hash of n bytes (multiply-xorshift over words): equal bytes give
 * equal hashes, and bytes that differ in any bit differ with overwhelming
 * probability (verify_recompute, the scratch file's block checksums). */
uint64_t rm_hash_bytes(const void *p, size_t n);
/* Milliseconds on CLOCK_MONOTONIC: the one clock the executor, the paging
 * and the I/O queue time their work with, so a trace lines them up. */
static inline double rm_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}
/* The message for JSON text that cJSON_ParseWithOpts(text, &end, 1)
 * refused: a syntax error near `end`, or bytes after the object (jsonerr.c). */
void rm_json_error(const char *text, const char *end, char *err, size_t errlen);
/* The JSON object of a file remat reads (a chain, a graph, a plan): one
 * value and nothing after it but white space, no key twice in any object
 * (cJSON would read the first and ignore the second). NULL with the
 * message in err otherwise. cJSON_Delete the result. */
struct cJSON;
struct cJSON *rm_json_parse(const char *text, char *err, size_t errlen);
/* A key that appears twice in one object of `root` (at any depth), or NULL. */
const char *rm_json_dup_key(const struct cJSON *root);
/* 1, with the message in err ("WHERE: the key \"edge\" is not one remat
 * reads: did you mean \"edges\"? ..."), where a key of object o is not one
 * of `known` (NULL-terminated) but is so near one (one edit for a name of 3
 * to 6 bytes, two from 7 on: a letter added, dropped, changed or two
 * swapped; case ignored) that it is surely that one misspelt; else 0. A key
 * far from every known one is someone's note and is left alone (rematplan's
 * graphs carry "random", "inplace", "holds", "part_of"). */
int rm_json_check_keys(const struct cJSON *o, const char *const *known, const char *where, char *err, size_t errlen);
/* The one rule of comma lists (rm_freeze_params' globs, a LoRA config's
 * targets; the command line's lists follow it too): no empty item (no
 * comma first, last or twice), no white space in an item, none max_item
 * bytes or longer, and in a list of names (unique) none twice. 0 when the
 * list holds to it, else 1 and what is wrong in why ("an empty item", "the
 * item 'q_proj' twice", ...). */
int rm_list_problem(const char *list, size_t max_item, int unique, char *why, size_t cap);
/* rm_json_parse for a text of len bytes read from a file (config.json, an
 * index), which may hold NUL bytes: those are refused too. */
struct cJSON *rm_json_parse_len(const char *text, size_t len, char *err, size_t errlen);
/* Where text holds a NUL character, a NUL byte or a \u0000 escape inside a
 * string (cJSON's strings end there, Python's do not), or -1. */
long long rm_json_nul_at(const char *text, size_t len);

#endif
