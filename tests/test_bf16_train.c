/* test_bf16_train.c: the guarantees of --precision bf16 (issue 29), through
 * the public API:
 *  - every recompute strategy and a memory budget train the same weights bit
 *    for bit (dropout on), verify_recompute on and freed buffers poisoned
 *    (the budget 85% of store-all: the products' scratch, planned with each
 *    bf16 node's workspace, puts a tiny model's least budget near 75%);
 *  - the same for LLaMA with LoRA on a bf16 frozen base, which stays 2 bytes;
 *  - one step's gradients are within a relative 2e-2 of fp32's;
 *  - a checkpoint file records the precision and a resumed run continues bit
 *    for bit; a memory limit and paging to a scratch file change nothing;
 *  - store-all activation bytes of shape A <= 0.6x fp32's, and at half of
 *    fp32's store-all the plan recomputes <= 0.3x the FLOPs fp32's does;
 *  - the sessions of one graph share one precision. */
#include "check.h"
#include "exec/exec.h"
#include "runs.h"
#include "scratch_dir.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static rm_run_info gpt_info(void) {
    rm_run_info ri;
    rm_run_info_default(&ri);
    ri.layers = 3, ri.dim = 32, ri.heads = 4, ri.context = 16, ri.vocab = 256, ri.batch = 4, ri.dropout = 0.1f;
    ri.precision = RM_PRECISION_BF16;
    return ri;
}

static rm_options bf16_options(const char *checkpoint, double budget) {
    rm_options o;
    rm_options_default(&o);
    o.threads = 2, o.seed = 11, o.verify_recompute = 1, o.precision = RM_PRECISION_BF16;
    o.checkpoint = checkpoint, o.budget_fraction = budget;
    return o;
}

/* Trains ri's model 3 steps under each strategy; all must equal the first. */
static void test_strategies(const rm_run_info *ri, const char *what) {
    static const char *const strategies[] = {"none", "blocks", "sqrt", "selective", "segments:2", "revolve:2", NULL};
    run ref, r;
    rm_options o = bf16_options("none", 0);
    if (!open_run(&ref, ri, &o, 0) || !train(&ref, 0, 3)) {
        CHECK(0, "%s: the bf16 run failed", what);
        close_run(&ref);
        return;
    }
    for (int i = 1; strategies[i - 1]; i++) {
        const char *st = strategies[i] ? strategies[i] : "an 85% budget";
        o = strategies[i] ? bf16_options(strategies[i], 0) : bf16_options(NULL, 0.85);
        int ok = open_run(&r, ri, &o, 0);
        if (ok) r.s->poison = 1; /* freed buffers filled with NaN: a stale read shows */
        ok = ok && train(&r, 0, 3);
        rm_plan_info pi = {0};
        if (ok) rm_plan(r.s, &pi);
        CHECK(ok && same_params(&ref, &r) && (strategies[i] || pi.flops_recompute > 0),
              "%s, bf16: %s trains other weights than keeping everything (or recomputes nothing)", what, st);
        close_run(&r);
        if (!strategies[i]) break;
    }
    close_run(&ref);
}

/* One step's gradients in bf16 against fp32's, parameter by parameter:
 * |g_bf16 - g_fp32| / |g_fp32| (2-norms). */
static void test_gradients(void) {
    rm_run_info ri = gpt_info();
    ri.dropout = 0.0f;
    run a, b;
    rm_options o16 = bf16_options("none", 0), o32 = o16;
    o32.precision = RM_PRECISION_FP32;
    double worst = 0;
    if (open_run(&a, &ri, &o16, 0) && open_run(&b, &ri, &o32, 0) && fill(&a, 0) == RM_OK && fill(&b, 0) == RM_OK &&
        rm_step(a.s, 0, NULL) == RM_OK && rm_step(b.s, 0, NULL) == RM_OK) {
        for (int i = 0; i < rm_param_count(a.g); i++) {
            const rm_val v = rm_param_at(a.g, i);
            const float *ga = rm_grad(a.s, v), *gb = rm_grad(b.s, v);
            double d = 0, n = 0;
            for (int64_t e = 0; e < rm_numel(a.g, v); e++) d += pow(ga[e] - gb[e], 2), n += pow(gb[e], 2);
            if (n > 0 && sqrt(d / n) > worst) worst = sqrt(d / n);
        }
        CHECK(worst <= 2e-2, "bf16 gradients differ from fp32's by %g (relative)", worst);
        printf("bf16 gradients against fp32's: worst relative difference %.2e\n", worst);
    } else {
        CHECK(0, "bf16 and fp32 steps");
    }
    close_run(&a), close_run(&b);
}

/* Saved after 2 steps and resumed for 2 more: the 4-step run, bit for bit. */
static void test_resume(const char *dir) {
    rm_run_info ri = gpt_info();
    char path[400], err[256];
    snprintf(path, sizeof path, "%s/bf16.safetensors", dir);
    run whole, first, second;
    rm_options o = bf16_options("sqrt", 0);
    int ok = open_run(&whole, &ri, &o, 0) && train(&whole, 0, 4) && open_run(&first, &ri, &o, 0) && train(&first, 0, 2);
    ri.step = ri.data_position = 2;
    ok = ok && rm_save_run(first.s, first.o, path, &ri, 0, NULL, NULL, err, sizeof err) == RM_OK;
    rm_file *f = NULL;
    rm_run_info back;
    ok = ok && rm_file_open(path, &f, err, sizeof err) == RM_OK && rm_file_run_info(f, &back, err, sizeof err) == RM_OK;
    CHECK(ok && back.precision == RM_PRECISION_BF16 && !strcmp(rm_file_meta(f, "precision"), "bf16"),
          "the file records precision bf16 (%s)", err);
    ok = ok && open_run(&second, &back, &o, 0) && rm_file_restore(f, second.s, second.o, err, sizeof err) == RM_OK &&
         train(&second, 2, 4);
    CHECK(ok && same_params(&whole, &second), "bf16: a resumed run continues bit for bit (%s)", err);
    rm_file_close(f);
    close_run(&whole), close_run(&first), close_run(&second);
}

/* Under a memory limit, and paging activations to a scratch file: the
 * weights of the plain bf16 run. */
static void test_limit_and_paging(const char *dir) {
    rm_run_info ri = gpt_info();
    run ref, lim, pg;
    rm_options o = bf16_options("none", 0), ol = o, op = o;
    rm_memory_info m;
    int ok = open_run(&ref, &ri, &o, 0) && train(&ref, 0, 3);
    rm_memory(ref.s, &m);
    ol.limit_bytes = (int64_t)(4 * m.param_bytes + m.activation_arena_bytes * 0.85 + (1 << 20)); /* + moments, margin */
    op.scratch_dir = dir, op.page = RM_PAGE_ACTIVATIONS, op.scratch_bandwidth = 1e9;
    rm_limit_info l;
    ok = ok && open_run(&lim, &ri, &ol, 0) && train(&lim, 0, 3);
    rm_limit(lim.s, &l);
    CHECK(ok && l.arena_bytes <= l.activation_bytes && same_params(&ref, &lim),
          "bf16 under a memory limit: the arena fits (%zu <= %zu) and the weights are the same", l.arena_bytes,
          l.activation_bytes);
    rm_paging_info p;
    ok = open_run(&pg, &ri, &op, 0) && train(&pg, 0, 3);
    rm_paging(pg.s, &p);
    CHECK(ok && p.values_paged > 0 && same_params(&ref, &pg), "bf16 paged (%d values): the same weights",
          p.values_paged);
    close_run(&ref), close_run(&lim), close_run(&pg);
}

/* LLaMA with LoRA on a bf16 frozen base: the base stays 2 bytes. */
static void test_lora_base(void) {
    rm_run_info ri = gpt_info();
    snprintf(ri.model, sizeof ri.model, "llama");
    ri.kv_heads = 2, ri.lora.rank = 4, ri.lora.dropout = 0.1f;
    test_strategies(&ri, "llama + LoRA");
    run r;
    rm_options o = bf16_options("none", 0);
    int n = 0;
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    CHECK(rm_run_build(&ri, g, &io, 0) == RM_OK && rm_store_frozen(g, RM_DTYPE_BF16, &n) == RM_OK && n > 0,
          "a bf16 base");
    rm_session *s = NULL;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "bf16 on a bf16 base: %s", rm_graph_errmsg(g));
    rm_val wq = rm_param_by_name(g, "model.layers.0.self_attn.q_proj.weight");
    CHECK(rm_param_store_dtype(g, wq) == RM_DTYPE_BF16, "the base stays bf16");
    rm_session_free(s);
    rm_graph_free(g);
    (void)r;
}

/* Store-all bytes and, at half of fp32's store-all, recomputed FLOPs: shape A. */
static void test_bytes_and_flops(void) {
    rm_plan_info p[4];
    rm_gpt_config c = {.layers = 12, .dim = 384, .heads = 6, .context = 256, .vocab = 256, .batch = 8};
    int64_t half = 0;
    for (int i = 0; i < 4; i++) {
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_options o;
        rm_options_default(&o);
        o.dry_run = 1, o.threads = 2, o.precision = i % 2 ? RM_PRECISION_BF16 : RM_PRECISION_FP32;
        if (i < 2) o.budget_fraction = 1.0;
        else o.budget_bytes = half;
        rm_session *s = NULL;
        rm_gpt_build(g, &c, &io);
        CHECK(rm_compile(g, &o, &s) == RM_OK, "shape A, plan %d: %s", i, rm_graph_errmsg(g));
        if (s) rm_plan(s, &p[i]);
        if (i == 0) half = (int64_t)p[0].store_all_bytes / 2;
        rm_session_free(s);
        rm_graph_free(g);
    }
    const double bytes = (double)p[1].store_all_bytes / (double)p[0].store_all_bytes;
    const double flops = p[3].flops_recompute / p[2].flops_recompute;
    printf("shape A: store-all %zu bytes in bf16, %zu in fp32 (%.3fx); at %lld bytes bf16 recomputes %.4g GFLOP, fp32 "
           "%.4g (%.3fx)\n", p[1].store_all_bytes, p[0].store_all_bytes, bytes, (long long)half,
           p[3].flops_recompute / 1e9, p[2].flops_recompute / 1e9, flops);
    CHECK(bytes <= 0.6, "store-all bytes: bf16 %.3fx fp32's", bytes);
    CHECK(flops <= 0.3, "recomputed FLOPs at half of fp32's store-all: bf16 %.3fx fp32's", flops);
}

static void test_one_precision(void) {
    rm_run_info ri = gpt_info();
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *a = NULL, *b = NULL;
    rm_options o = bf16_options("none", 0), o32 = o;
    o32.precision = RM_PRECISION_FP32;
    rm_run_build(&ri, g, &io, 0);
    CHECK(rm_compile(g, &o32, &a) == RM_OK, "fp32: %s", rm_graph_errmsg(g));
    CHECK(rm_compile(g, &o, &b) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "live session in fp32"),
          "a bf16 session beside an fp32 one of the same graph is refused: %s", rm_graph_errmsg(g));
    rm_session_free(a);
    CHECK(rm_compile(g, &o, &b) == RM_OK, "bf16 once the fp32 session is freed: %s", rm_graph_errmsg(g));
    rm_session_free(b);
    o.precision_name = "fp16";
    CHECK(rm_compile(g, &o, &b) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "unknown precision 'fp16'"),
          "an unknown precision: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
}

int main(void) {
    static unsigned char text[6000];
    char err[256], dir[240];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)("the quick brown fox jumps. "[i % 27]);
    if (rm_data_from_bytes(&runs_data, "text", text, sizeof text, err, sizeof err) != RM_OK ||
        rm_data_split(&runs_data, 0.1, 4, 16, err, sizeof err) != RM_OK || scratch_tmpdir(dir, sizeof dir, "bf16")) {
        fprintf(stderr, "setup: %s\n", err);
        return 1;
    }
    /* the guarantees on the path this host takes, and on the sgemm path
     * (an AVX2 host's) where it is another */
    rm_run_info ri = gpt_info();
    if (strcmp(rm_bf16_kernel(), "sgemm") && rm_gemm_bf16_force("sgemm")) {
        printf("guarantees on the sgemm path\n");
        test_strategies(&ri, "gpt");
        rm_gemm_bf16_force(NULL);
    }
    printf("guarantees on the %s path\n", rm_bf16_kernel());
    test_strategies(&ri, "gpt");
    test_lora_base();
    test_limit_and_paging(dir);
    test_gradients();
    test_resume(dir);
    test_bytes_and_flops();
    test_one_precision();
    CHECK(rm_gemm_bf16_short() == 0, "%ld bf16 products found no scratch for the %s path", rm_gemm_bf16_short(),
          rm_bf16_kernel());
    printf("bf16 products on the %s path\n", rm_bf16_kernel());
    check_rmdir(dir);
    rm_data_free(&runs_data);
    return check_done("test_bf16_train");
}
