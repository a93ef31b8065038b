/* attention_op.c: an attention op timed alone, forward and backward, at one
 * shape: the minimum and median over REPS runs of each. Built against a
 * tree's internal headers and library, so two trees (before and after a
 * change to src/ops/xattention.c, attention.c or attn_head.c) can be
 * compared, alternating (bench/attention_ab.sh does this):
 *   cc -O2 -march=native -fopenmp -Iinclude -Isrc bench/attention_op.c build/libremat.a \
 *      $(pkg-config --libs libcjson nettle) -lm -ldl -o /tmp/attn && /tmp/attn B T H HD THREADS REPS [OP]
 * OP: "general" (the default: rm_attention_general, llama's causal
 * attention, as many key/value heads as heads), "fused" (GPT's
 * rm_attention over one (B,T,3C) qkv tensor), or a number K: grouped-query
 * attention with K key/value heads (rm_attention_gqa; built only with
 * -DRM_BENCH_GQA, in a tree that has it). REMAT_BENCH_BF16=1 (fused only): as
 * --precision bf16 runs it (qkv, out and P in bf16, the products on
 * rm_gemm_bf16's path with its planned scratch). Not a test. */
#include "ops/ops.h"
#include "util/half.h"
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* CPU time of the process (all threads): on a loaded machine, with one
 * thread, the work done, whatever the waits for a core */
static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: attention_op B T H HD THREADS REPS [general|fused|K]\n");
        return 2;
    }
    const int B = atoi(argv[1]), T = atoi(argv[2]), H = atoi(argv[3]), HD = atoi(argv[4]), C = H * HD;
    const int threads = atoi(argv[5]), reps = atoi(argv[6]);
    const char *which = argc == 8 ? argv[7] : "general";
    const int fused = !strcmp(which, "fused"), K = fused || !strcmp(which, "general") ? H : atoi(which);
    const int Ckv = K * HD;
    rm_set_threads(threads);
    rm_graph *g = rm_graph_new();
    /* x[i]: q (B,T,C), k and v (B,T,Ckv); fused: x[0] is qkv (B,T,3C) */
    const size_t nq = (size_t)B * T * C, nkv = (size_t)B * T * Ckv, np = (size_t)B * H * T * T;
    const size_t nx[3] = {fused ? 3 * nq : nq, nkv, nkv};
    int ok;
    if (fused) {
        ok = rm_attention(g, rm_input(g, "qkv", RM_DTYPE_F32, 3, (int64_t[]){B, T, 3 * C}), H) >= 0;
    } else {
        rm_val q = rm_input(g, "q", RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
        rm_val k = rm_input(g, "k", RM_DTYPE_F32, 3, (int64_t[]){B, T, Ckv});
        rm_val v = rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){B, T, Ckv});
#ifdef RM_BENCH_GQA
        ok = rm_attention_gqa(g, q, k, v, -1, H, K, 1) >= 0;
#else
        ok = K == H && rm_attention_general(g, q, k, v, -1, H, 1) >= 0;
#endif
    }
    if (!ok) return fprintf(stderr, "attention_op %s: %s\n", which, rm_graph_errmsg(g)), 1;
    const int bf16 = fused && getenv("REMAT_BENCH_BF16") && !strcmp(getenv("REMAT_BENCH_BF16"), "1");
    if (bf16) { /* as exec/precision.c marks it: bf16 products, qkv, out and P kept in bf16 */
        g->nodes[0].bf16 = 1;
        g->vals[g->nodes[0].in[0]].dtype = g->vals[g->nodes[0].out[0]].dtype = RM_DTYPE_BF16;
        g->vals[g->nodes[0].out[1]].dtype = RM_DTYPE_BF16;
    }
    const rm_node *n = &g->nodes[0];
    const rm_op_def *op = rm_op_get(fused ? RM_OP_ATTENTION : RM_OP_XATTENTION);
    float *x[3], *dx[3], *out = malloc(nq * 4), *p = malloc(np * 4), *dout = malloc(nq * 4);
    for (int i = 0; i < 3; i++) {
        x[i] = malloc(nx[i] * 4), dx[i] = malloc(nx[i] * 4);
        for (size_t e = 0; e < nx[i]; e++) x[i][e] = (float)((e * 2654435761u + i) % 1000) / 1000.0f - 0.5f;
        if (bf16) /* the same values rounded, in the first half of the buffer */
            for (size_t e = 0; e < nx[i]; e++) ((uint16_t *)x[i])[e] = rm_f32_to_bf16(x[i][e]);
    }
    for (size_t e = 0; e < nq; e++) dout[e] = (float)(e % 17) / 17.0f - 0.5f;
    const size_t fw = rm_node_workspace(n, g->vals, 0, threads), bw = rm_node_workspace(n, g->vals, 1, threads);
    char *work = malloc(fw > bw ? fw : bw);
    rm_kernel_ctx c;
    memset(&c, 0, sizeof c);
    c.node = n, c.threads = threads, c.work = work;
    if (bf16) { /* the products' scratch first, then the op's workspace (exec.c) */
        c.mm = (rm_mm_scratch){work, threads, rm_node_mm_dim(n, g->vals), 0};
        c.work = work + rm_gemm_bf16_scratch(threads, c.mm.dim);
    }
    for (int i = 0; i < (fused ? 1 : 3); i++) c.vin[i] = &g->vals[n->in[i]], c.in[i] = x[i], c.din[i] = dx[i];
    for (int j = 0; j < n->n_out; j++) c.vout[j] = &g->vals[n->out[j]];
    c.out[0] = out, c.out[1] = p, c.dout[0] = dout;
    double *f = malloc(reps * sizeof *f), *b = malloc(reps * sizeof *b);
    double *fc = malloc(reps * sizeof *fc), *bc = malloc(reps * sizeof *bc);
    for (int r = 0; r < reps; r++) {
        double t0 = now_ms(), c0 = cpu_ms();
        op->forward(&c);
        double t1 = now_ms(), c1 = cpu_ms();
        op->backward(&c);
        f[r] = t1 - t0, b[r] = now_ms() - t1;
        fc[r] = c1 - c0, bc[r] = cpu_ms() - c1;
    }
    qsort(f, reps, sizeof *f, cmp);
    qsort(b, reps, sizeof *b, cmp);
    qsort(fc, reps, sizeof *fc, cmp);
    qsort(bc, reps, sizeof *bc, cmp);
    printf("attention %s%s B=%d T=%d H=%d K=%d hd=%d threads=%d: forward min %.2f median %.2f ms, backward min "
           "%.2f median %.2f ms; cpu forward median %.2f ms, backward median %.2f ms\n", fused ? "fused" : "general", bf16 ? " bf16" : "",
           B, T, H, K, HD, threads, f[0], f[reps / 2], b[0], b[reps / 2], fc[reps / 2], bc[reps / 2]);
    return 0;
}
