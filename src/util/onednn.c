/* onednn.c: bf16 block products on oneDNN's matmul primitive (--precision
 * bf16, gemm_bf16.c), where its bf16 matmul is a brgemm kernel
 * (avx512_core_bf16, AMX): twice the work of an fp32 FMA per instruction.
 *
 * Like OpenBLAS (gemm.c), oneDNN is optional: loaded with dlopen by its
 * full path (REMAT_DNNL_SO, found by the Makefile) the first time a bf16
 * session compiles, and not at all under an address-space limit too small
 * for it. Missing, refused or too big, the products take another path and
 * the library goes on.
 *
 * The primitives are created once, when loaded: one per block shape, m and
 * n in {16, 32, 64, 128}, k in {32, 64, 128, 256} (64 shapes), so nothing
 * is created during a step and a step's products never depend on which
 * shapes came first. Each computes acc (m x n fp32) += a (m x k bf16,
 * row-major) b (k x n bf16 in oneDNN's blocked BA16a{16,32,64}b2a, the
 * layout its kernel reads directly: no copy of B inside oneDNN), with a
 * user-managed scratchpad (the caller's, planned in the arena).
 *
 * Determinism. oneDNN promises run-to-run identical results only for a
 * fixed environment (processor, library, thread count): its matmul may
 * split the sum over k between threads (nthr_k), so a product's bits may
 * change with the thread count. Here every primitive is created for one
 * thread (omp_set_num_threads(1) around the creation) and runs on one
 * thread (inside remat's parallel region, or with one thread), on a block
 * of fixed shape: the order of every sum is the kernel's for that shape,
 * the same at any thread count (tests/test_bf16.c checks 1, 2 and 3).
 *
 * oneDNN 2.6's execute allocates a few small objects per call (its argument
 * map: 7 allocations, 272 bytes, measured) and each call creates its own
 * memory objects and stream (no state shared between threads or sessions);
 * nothing of a tensor's size is allocated. */
#include "util/onednn.h"
#include "util/util.h"
#include <stdio.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef REMAT_HAVE_DNNL
#include <dlfcn.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

#ifdef __SANITIZE_ADDRESS__
/* GCC 12's LeakSanitizer crashes at exit reading the dynamic TLS oneDNN's
 * code gives OpenMP's worker threads ("Tracer caught signal 11"): ASan's
 * __tls_get_addr interceptor records those blocks for the scan. Sanitized
 * builds turn the interceptor off (ASAN_OPTIONS still overrides this): the
 * scan keeps static TLS, where libgomp holds its thread pool (use_tls=0
 * reported that pool as a leak in every test with a parallel region), and
 * loses only dlopen'd libraries' TLS, where remat keeps no heap pointer. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "intercept_tls_get_addr=0"; }
#endif

#define DNNL_FUNCS(X)                                                                                                  \
    X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_stream_destroy) X(dnnl_memory_desc_init_by_tag)               \
    X(dnnl_matmul_desc_init) X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                             \
    X(dnnl_primitive_attr_set_scratchpad_mode) X(dnnl_primitive_attr_set_post_ops) X(dnnl_post_ops_create)            \
    X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_sum) X(dnnl_primitive_desc_create)                                \
    X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) X(dnnl_primitive_desc_query_md)                       \
    X(dnnl_memory_desc_get_size) X(dnnl_primitive_create) X(dnnl_primitive_execute) X(dnnl_memory_create)             \
    X(dnnl_memory_destroy)
#define DECLARE(f) static __typeof__(&f) p_##f;
DNNL_FUNCS(DECLARE)

typedef struct block {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t a, b, c, s; /* src, weights, dst, scratchpad */
} block;

static block blocks[RM_DNNL_SHAPES];
static dnnl_engine_t engine;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;
static size_t scratch_need;
static char status[200] = "oneDNN not loaded";

/* oneDNN maps ~45 MB of code (and libOpenCL, libstdc++); its primitives
 * hold their JIT kernels. This much free address space is asked for. */
#define DNNL_ADDRESS_SPACE ((unsigned long long)256 << 20)

static int dim_of(int i) { return 16 << i; }      /* m, n: 16 .. 128 */
static int kdim_of(int i) { return 32 << i; }     /* k: 32 .. 256 */

/* The blocked layout of B whose groups of n columns are `n` wide (64 at most). */
static dnnl_format_tag_t b_tag(int n) {
    return n == 16 ? dnnl_BA16a16b2a : n == 32 ? dnnl_BA16a32b2a : dnnl_BA16a64b2a;
}

/* One block's primitive for one thread, with the sum post-op and the
 * user's scratchpad; 0 with the reason in status when refused. */
static int create_block(block *bl, int m, int n, int k) {
    dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    const char *impl = "?";
    dnnl_status_t st = p_dnnl_memory_desc_init_by_tag(&bl->a, 2, da, dnnl_bf16, dnnl_ab);
    if (!st) st = p_dnnl_memory_desc_init_by_tag(&bl->b, 2, db, dnnl_bf16, b_tag(n));
    if (!st) st = p_dnnl_memory_desc_init_by_tag(&bl->c, 2, dc, dnnl_f32, dnnl_ab);
    if (!st) st = p_dnnl_matmul_desc_init(&md, &bl->a, &bl->b, NULL, &bl->c);
    if (!st) st = p_dnnl_primitive_attr_create(&attr);
    if (!st) st = p_dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (!st) st = p_dnnl_post_ops_create(&po);
    if (!st) st = p_dnnl_post_ops_append_sum(po, 1.0f);
    if (!st) st = p_dnnl_primitive_attr_set_post_ops(attr, po);
    if (!st) st = p_dnnl_primitive_desc_create(&pd, &md, attr, engine, NULL);
    if (!st) st = p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    int ok = !st && !strncmp(impl, "brg:", 4);
    if (ok) snprintf(status, sizeof status, "oneDNN %s", impl);
    if (ok) {
        const dnnl_memory_desc_t *s = p_dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
        size_t need = s ? p_dnnl_memory_desc_get_size(s) : 0;
        if (s) bl->s = *s;
        if (need > scratch_need) scratch_need = need;
        ok = need <= RM_DNNL_SCRATCHPAD && p_dnnl_primitive_create(&bl->prim, pd) == dnnl_success;
    }
    if (!ok && st)
        snprintf(status, sizeof status, "oneDNN refuses a bf16 matmul here (status %d: bf16 needs avx512_core_bf16 "
                 "or AMX in oneDNN 2.x)", (int)st);
    else if (!ok)
        snprintf(status, sizeof status, "oneDNN's bf16 matmul here is '%s', not a brgemm kernel (emulated bf16, "
                 "slower than fp32)", impl);
    if (pd) p_dnnl_primitive_desc_destroy(pd);
    if (po) p_dnnl_post_ops_destroy(po);
    if (attr) p_dnnl_primitive_attr_destroy(attr);
    return ok;
}

static int load_symbols(void *h) {
#define LOOKUP(f) *(void **)&p_##f = dlsym(h, #f); if (!p_##f) return 0;
    DNNL_FUNCS(LOOKUP)
    return 1;
}

static void load(void) {
    if (!rm_address_space_room(DNNL_ADDRESS_SPACE)) {
        snprintf(status, sizeof status, "oneDNN not loaded: the address-space limit (ulimit -v) leaves too little room");
        return;
    }
    void *h = dlopen(REMAT_DNNL_SO, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(status, sizeof status, "oneDNN not found (%s)", REMAT_DNNL_SO);
        return;
    }
    if (!load_symbols(h) || p_dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) {
        snprintf(status, sizeof status, "oneDNN at %s lacks the C API of version 2", REMAT_DNNL_SO);
        return;
    }
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1); /* each primitive is planned for the one thread it runs on */
#endif
    int ok = 1;
    for (int i = 0; ok && i < RM_DNNL_SHAPES; i++)
        ok = create_block(&blocks[i], dim_of(i / 16), dim_of(i / 4 % 4), kdim_of(i % 4));
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    ready = ok;
}

int rm_dnnl_ready(void) {
    pthread_once(&once, load);
    return ready;
}

const char *rm_dnnl_status(void) {
    pthread_once(&once, load);
    return status;
}

int rm_dnnl_block(int mi, int ni, int ki, const uint16_t *a, const uint16_t *b, float *acc, void *scratchpad) {
    if (!ready) return 0;
    const block *bl = &blocks[(mi * 4 + ni) * 4 + ki];
    dnnl_memory_t m[4] = {NULL, NULL, NULL, NULL};
    dnnl_stream_t stream = NULL;
    int ok = p_dnnl_memory_create(&m[0], &bl->a, engine, (void *)a) == dnnl_success &&
             p_dnnl_memory_create(&m[1], &bl->b, engine, (void *)b) == dnnl_success &&
             p_dnnl_memory_create(&m[2], &bl->c, engine, acc) == dnnl_success &&
             p_dnnl_memory_create(&m[3], &bl->s, engine, scratchpad) == dnnl_success &&
             p_dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) == dnnl_success;
    if (ok) {
        const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]},
                                         {DNNL_ARG_SCRATCHPAD, m[3]}};
        ok = p_dnnl_primitive_execute(bl->prim, stream, 4, args) == dnnl_success;
    }
    if (stream) p_dnnl_stream_destroy(stream);
    for (int i = 0; i < 4; i++)
        if (m[i]) p_dnnl_memory_destroy(m[i]);
    return ok;
}

size_t rm_dnnl_scratchpad_need(void) { return rm_dnnl_ready() ? scratch_need : 0; }

#else /* built without oneDNN's header */

int rm_dnnl_ready(void) { return 0; }
const char *rm_dnnl_status(void) { return "remat was built without oneDNN (libdnnl-dev)"; }
int rm_dnnl_block(int mi, int ni, int ki, const uint16_t *a, const uint16_t *b, float *acc, void *scratchpad) {
    (void)mi, (void)ni, (void)ki, (void)a, (void)b, (void)acc, (void)scratchpad;
    return 0;
}
size_t rm_dnnl_scratchpad_need(void) { return 0; }

#endif
