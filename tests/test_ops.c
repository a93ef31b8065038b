/* test_ops.c: every op's kernels against central finite differences, plus
 * the properties the planner relies on (bwd_reads is enough, acc adds or
 * overwrites, dropout masks recompute exactly, results do not depend on the
 * thread count) and Philox against its published known answers.
 *
 * Each op is built with its public builder on a tiny rm_graph (so shapes and
 * node arguments are what a real model gets); the test then owns one buffer
 * per value and calls the kernels through rm_op_get directly.
 */
#include "opcheck.h"

/* ---- per-op checks ---------------------------------------------------------- */

static void test_embedding(void) {
    fx f;
    fx_begin(&f);
    const int V = 5;
    rm_val ids = fx_input(&f, RM_DTYPE_I32, 2, (int64_t[]){2, 4});
    rm_val tab = fx_param(&f, "table", 2, (int64_t[]){V, 3});
    rm_val out = rm_embedding(f.g, ids, tab);
    if (!fx_finish(&f, out, "embedding")) { fx_end(&f); return; }
    int64_t sh[RM_MAX_DIMS];
    CHECK(rm_shape(f.g, out, sh) == 3 && sh[0] == 2 && sh[1] == 4 && sh[2] == 3, "embedding: output shape");
    /* 8 ids over 5 rows: some rows repeat (their gradients sum), id 4 unused */
    const int32_t idv[8] = {0, 3, 1, 3, 0, 2, 3, 1};
    memcpy(fx_i(&f, ids), idv, sizeof idv);
    fx_forward(&f);
    CHECK(memcmp(fx_f(&f, out) + 3 * 3, fx_f(&f, tab) + 3 * 3, 3 * sizeof(float)) == 0,
          "embedding: row 3 of out is table row 3");
    gradcheck(&f, "embedding", 0);
    fx_end(&f);
}

static void test_add(void) {
    fx f;
    fx_begin(&f);
    rm_val a = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    rm_val b = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    if (!fx_finish(&f, rm_add(f.g, a, b), "add")) { fx_end(&f); return; }
    gradcheck(&f, "add", 0);
    fx_end(&f);
}

static void test_layernorm(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 8});
    rm_val w = fx_param(&f, "w", 1, (int64_t[]){8});
    rm_val b = fx_param(&f, "b", 1, (int64_t[]){8});
    rm_val out = rm_layernorm(f.g, x, w, b);
    if (!fx_finish(&f, out, "layernorm")) { fx_end(&f); return; }
    CHECK(fx_node(&f)->n_out == 3 && fx_numel(&f, fx_node(&f)->out[1]) == 6, "layernorm: mean/rstd outputs");
    for (int i = 0; i < 8; i++) fx_f(&f, w)[i] = rndu(0.5f, 1.5f);
    /* one row far from zero: the two-pass variance must still be right */
    for (int i = 0; i < 8; i++) fx_f(&f, x)[8 + i] = 100.0f + rndu(-1, 1);
    fx_forward(&f);
    const float *y = fx_f(&f, out), *xv = fx_f(&f, x);
    int bad = 0;
    for (int r = 0; r < 6; r++) { /* against a double reference */
        double m = 0, v = 0;
        for (int i = 0; i < 8; i++) m += xv[r * 8 + i];
        m /= 8;
        for (int i = 0; i < 8; i++) v += (xv[r * 8 + i] - m) * (xv[r * 8 + i] - m);
        v /= 8;
        for (int i = 0; i < 8; i++) {
            double ref = (xv[r * 8 + i] - m) / sqrt(v + 1e-5) * fx_f(&f, w)[i] + fx_f(&f, b)[i];
            if (!(fabs(y[r * 8 + i] - ref) <= 1e-4 * (1 + fabs(ref)))) bad++;
        }
    }
    CHECK(bad == 0, "layernorm: forward differs from a double reference in %d elements", bad);
    gradcheck(&f, "layernorm", 0);
    fx_end(&f);
}

static void test_gelu(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){4, 6});
    rm_val out = rm_gelu(f.g, x);
    if (!fx_finish(&f, out, "gelu")) { fx_end(&f); return; }
    for (int i = 0; i < 24; i++) fx_f(&f, x)[i] = rndu(-3, 3);
    fx_forward(&f);
    int bad = 0;
    for (int i = 0; i < 24; i++) {
        double v = fx_f(&f, x)[i];
        double ref = 0.5 * v * (1 + tanh(sqrt(2.0 / 3.14159265358979323846) * (v + 0.044715 * v * v * v)));
        if (!(fabs(fx_f(&f, out)[i] - ref) <= 1e-6 * (1 + fabs(ref)))) bad++;
    }
    CHECK(bad == 0, "gelu: forward differs from the formula in %d elements", bad);
    gradcheck(&f, "gelu", 0);
    fx_end(&f);
}

static void test_relu(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){4, 6});
    if (!fx_finish(&f, rm_relu(f.g, x), "relu")) { fx_end(&f); return; }
    /* |x| >= 0.1 > h: x +- h never crosses the kink at 0 */
    for (int i = 0; i < 24; i++) fx_f(&f, x)[i] = (i % 2 ? 1.0f : -1.0f) * rndu(0.1f, 1.0f);
    gradcheck(&f, "relu", 0);
    fx_end(&f);
}

static void test_linear(int bias) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 5});
    rm_val w = fx_param(&f, "w", 2, (int64_t[]){4, 5});
    rm_val b = bias ? fx_param(&f, "b", 1, (int64_t[]){4}) : -1;
    rm_val out = rm_linear(f.g, x, w, b);
    if (!fx_finish(&f, out, "linear")) { fx_end(&f); return; }
    int64_t sh[RM_MAX_DIMS];
    CHECK(rm_shape(f.g, out, sh) == 3 && sh[2] == 4, "linear: output shape");
    gradcheck(&f, bias ? "linear" : "linear (no bias)", 0);
    fx_end(&f);
}

static void test_attention(void) {
    fx f;
    fx_begin(&f);
    /* B=2, T=5, C=8 with 2 heads of 4 */
    rm_val qkv = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 5, 24});
    rm_val out = rm_attention(f.g, qkv, 2);
    if (!fx_finish(&f, out, "attention")) { fx_end(&f); return; }
    for (int64_t i = 0; i < fx_numel(&f, qkv); i++) fx_f(&f, qkv)[i] = rndu(-1.5f, 1.5f);
    gradcheck(&f, "attention", 0);
    /* causality: changing position 4 leaves positions 0..3 unchanged */
    fx_forward(&f);
    float before[2 * 5 * 8];
    memcpy(before, fx_f(&f, out), sizeof before);
    for (int i = 0; i < 24; i++) fx_f(&f, qkv)[4 * 24 + i] += 0.5f;
    fx_forward(&f);
    CHECK(memcmp(before, fx_f(&f, out), 4 * 8 * sizeof(float)) == 0, "attention: the future leaks into the past");
    fx_end(&f);
}

/* T = 150: causal blocks of 64, 64 and 22 rows. The forward against a
 * plain double-precision attention that computes the whole square and
 * masks it; the gradient by finite differences. */
static void test_attention_blocks(void) {
    enum { T = 150, C = 8, H = 2, HD = C / H };
    fx f;
    fx_begin(&f);
    rm_val qkv = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){1, T, 3 * C});
    rm_val out = rm_attention(f.g, qkv, H);
    if (!fx_finish(&f, out, "attention")) { fx_end(&f); return; }
    float *x = fx_f(&f, qkv);
    for (int64_t i = 0; i < fx_numel(&f, qkv); i++) x[i] = rndu(-1.5f, 1.5f);
    fx_forward(&f);
    const float *o = fx_f(&f, out), *p = fx_f(&f, fx_node(&f)->out[1]);
    double worst = 0, masked = 0;
    for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
            double s[T], mx = -INFINITY, sum = 0;
            for (int j = 0; j < T; j++) {
                s[j] = 0;
                for (int d = 0; d < HD; d++) s[j] += (double)x[i * 3 * C + h * HD + d] * x[j * 3 * C + C + h * HD + d];
                s[j] = j <= i ? s[j] / sqrt(HD) : -INFINITY;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < T; j++) s[j] = exp(s[j] - mx), sum += s[j];
            for (int j = i + 1; j < T; j++) masked += fabs(p[((size_t)h * T + i) * T + j]);
            for (int d = 0; d < HD; d++) {
                double ref = 0;
                for (int j = 0; j < T; j++) ref += s[j] / sum * x[j * 3 * C + 2 * C + h * HD + d];
                double err = fabs(ref - o[i * C + h * HD + d]);
                worst = err > worst ? err : worst;
            }
        }
    CHECK(worst < 1e-5, "attention, T=%d in blocks: off the double reference by %g", T, worst);
    CHECK(masked == 0, "attention: the masked part of P is not zero");
    gradcheck(&f, "attention (T=150, in blocks)", 0);
    fx_end(&f);
}

static void test_batchnorm(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){6, 5});
    rm_val w = fx_param(&f, "w", 1, (int64_t[]){5}), b = fx_param(&f, "b", 1, (int64_t[]){5});
    rm_val rm = fx_param(&f, "rm", 1, (int64_t[]){5}), rv = fx_param(&f, "rv", 1, (int64_t[]){5});
    if (!fx_finish(&f, rm_batchnorm(f.g, x, w, b, rm, rv), "batchnorm")) { fx_end(&f); return; }
    for (int i = 0; i < 5; i++) fx_f(&f, rv)[i] = 1.0f;
    /* running statistics get no gradient: inputs 3 and 4 are skipped */
    gradcheck(&f, "batchnorm", (1u << 3) | (1u << 4));
    fx_end(&f);
}

static void cube_fwd(const float *x, float *y, int64_t n, void *u) {
    (void)u;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * x[i] * x[i];
}
static void cube_bwd(const float *x, const float *dy, float *dx, int64_t n, void *u) {
    (void)u;
    for (int64_t i = 0; i < n; i++) dx[i] += 3.0f * x[i] * x[i] * dy[i];
}

static void test_custom(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){3, 4});
    if (!fx_finish(&f, rm_custom(f.g, "cube", x, cube_fwd, cube_bwd, NULL), "custom")) { fx_end(&f); return; }
    gradcheck(&f, "custom", 0);
    fx_end(&f);
}

static void test_dropout(void) {
    const float p = 0.3f;
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){4, 8});
    rm_val out = rm_dropout(f.g, x, p);
    if (!fx_finish(&f, out, "dropout")) { fx_end(&f); return; }
    CHECK(fx_node(&f)->farg[0] == p, "dropout: farg[0] holds p");
    /* dropout is linear in x (the mask does not depend on it): no kinks */
    gradcheck(&f, "dropout", 0);
    fx_end(&f);

    /* mask properties on a big tensor */
    const int64_t E = 200000;
    fx_begin(&f);
    x = fx_input(&f, RM_DTYPE_F32, 1, (int64_t[]){E});
    out = rm_dropout(f.g, x, p);
    if (!fx_finish(&f, out, "dropout")) { fx_end(&f); return; }
    float *xv = fx_f(&f, x), *y = fx_f(&f, out);
    for (int64_t i = 0; i < E; i++) xv[i] = rndu(0.5f, 1.5f); /* nonzero: zero out <=> dropped */
    float *first = malloc((size_t)E * sizeof *first);
    fx_forward(&f);
    memcpy(first, y, (size_t)E * sizeof *first);
    int64_t kept = 0, badscale = 0;
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < E; i++) {
        if (y[i] != 0.0f) {
            kept++;
            if (y[i] != xv[i] * scale) badscale++;
        }
    }
    /* std of the kept fraction is sqrt(p(1-p)/E) ~ 1e-3: 0.01 is 10 sigma */
    const double frac = (double)kept / (double)E;
    CHECK(fabs(frac - (1.0 - p)) < 0.01, "dropout: kept fraction %.4f, expected %.2f", frac, 1.0 - p);
    CHECK(badscale == 0, "dropout: %lld kept elements not scaled by 1/(1-p)", (long long)badscale);
    fx_forward(&f); /* a recompute: the same step must give the same mask */
    CHECK(memcmp(first, y, (size_t)E * sizeof *y) == 0, "dropout: recomputed forward differs");
    set_threads(1);
    fx_forward(&f);
    set_threads(f.threads);
    CHECK(memcmp(first, y, (size_t)E * sizeof *y) == 0, "dropout: the mask depends on the thread count");
    /* the backward regenerates the same mask: dx = dout where kept, 0 where dropped */
    float *ones = malloc((size_t)E * sizeof *ones), *dx = malloc((size_t)E * sizeof *dx);
    for (int64_t i = 0; i < E; i++) ones[i] = 1.0f;
    float *din[RM_MAX_IN] = {dx};
    int acc[RM_MAX_IN] = {0};
    fx_backward(&f, ones, din, acc);
    int64_t mism = 0;
    for (int64_t i = 0; i < E; i++) mism += (dx[i] != 0.0f) != (first[i] != 0.0f);
    CHECK(mism == 0, "dropout: backward mask differs from forward in %lld elements", (long long)mism);
    /* another step, another node: different masks */
    f.step++;
    fx_forward(&f);
    int64_t diff = 0;
    for (int64_t i = 0; i < E; i++) diff += (y[i] != 0.0f) != (first[i] != 0.0f);
    CHECK(diff > E / 4, "dropout: step s+1 mask differs in only %lld elements", (long long)diff);
    f.step--;
    rm_kernel_ctx c = fx_ctx(&f);
    c.node_id = 1;
    f.op->forward(&c);
    diff = 0;
    for (int64_t i = 0; i < E; i++) diff += (y[i] != 0.0f) != (first[i] != 0.0f);
    CHECK(diff > E / 4, "dropout: another node's mask differs in only %lld elements", (long long)diff);
    /* train = 0: identity, forward and backward */
    f.train = 0;
    fx_forward(&f);
    CHECK(memcmp(xv, y, (size_t)E * sizeof *y) == 0, "dropout: train=0 is not the identity");
    fx_backward(&f, xv, din, acc);
    CHECK(memcmp(xv, dx, (size_t)E * sizeof *dx) == 0, "dropout: train=0 backward is not the identity");
    free(first);
    free(ones);
    free(dx);
    fx_end(&f);

    /* p = 0 in training: identity too */
    fx_begin(&f);
    x = fx_input(&f, RM_DTYPE_F32, 1, (int64_t[]){64});
    out = rm_dropout(f.g, x, 0.0f);
    if (!fx_finish(&f, out, "dropout p=0")) { fx_end(&f); return; }
    fx_forward(&f);
    CHECK(memcmp(fx_f(&f, x), fx_f(&f, out), 64 * sizeof(float)) == 0, "dropout: p=0 is not the identity");
    fx_end(&f);
}

/* Loss and probs against a double computation; scale shifts the logits to
 * test the max subtraction (exp(1000) overflows fp32 and fp64 alike). */
static void ce_reference(fx *f, rm_val logits, rm_val tg, int N, int V, float shift, const char *what) {
    float *z = fx_f(f, logits);
    for (int i = 0; i < N * V; i++) z[i] = rndu(-3, 3) + shift;
    for (int n = 0; n < N; n++) fx_i(f, tg)[n] = (n * 5 + 3) % V;
    fx_forward(f);
    const float *probs = fx_f(f, fx_node(f)->out[1]);
    double ref = 0.0, worst_sum = 0.0;
    for (int n = 0; n < N; n++) {
        double mx = z[n * V], s = 0.0, ps = 0.0;
        for (int v = 1; v < V; v++) mx = z[n * V + v] > mx ? z[n * V + v] : mx;
        for (int v = 0; v < V; v++) s += exp((double)z[n * V + v] - mx);
        ref += log(s) - ((double)z[n * V + fx_i(f, tg)[n]] - mx);
        for (int v = 0; v < V; v++) ps += probs[n * V + v];
        worst_sum = fabs(ps - 1.0) > worst_sum ? fabs(ps - 1.0) : worst_sum;
    }
    ref /= N;
    const float loss = fx_f(f, fx_node(f)->out[0])[0];
    CHECK(isfinite(loss) && fabs(loss - ref) <= 1e-5 * fabs(ref) + 1e-6, "softmax_ce (%s): loss %.9g, reference %.9g",
          what, loss, ref);
    CHECK(worst_sum < 1e-5, "softmax_ce (%s): a probs row sums to 1 +- %g", what, worst_sum);
}

static void test_softmax_ce(void) {
    fx f;
    fx_begin(&f);
    const int N = 6, V = 7;
    rm_val logits = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, V});
    rm_val tg = fx_input(&f, RM_DTYPE_I32, 2, (int64_t[]){2, 3});
    rm_val loss = rm_softmax_ce(f.g, logits, tg);
    if (!fx_finish(&f, loss, "softmax_ce")) { fx_end(&f); return; }
    CHECK(fx_numel(&f, loss) == 1 && fx_numel(&f, fx_node(&f)->out[1]) == N * V, "softmax_ce: output sizes");
    ce_reference(&f, logits, tg, N, V, 0.0f, "plain");
    ce_reference(&f, logits, tg, N, V, 1000.0f, "logits near 1000");
    for (int i = 0; i < N * V; i++) fx_f(&f, logits)[i] = rndu(-2, 2);
    gradcheck(&f, "softmax_ce", 0);
    fx_end(&f);
}

/* Results bitwise independent of the thread count, for the kernels whose
 * reductions could depend on it (column sums, the mean loss). */
static void test_threads(void) {
    if (max_threads() < 2) set_threads(2);
    const int T = max_threads() < 3 ? 3 : max_threads();
    fx f;
    /* layernorm backward: dw, db over 300 rows; 100 columns = 4 blocks */
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){300, 100});
    rm_val w = fx_param(&f, "w", 1, (int64_t[]){100});
    rm_val b = fx_param(&f, "b", 1, (int64_t[]){100});
    if (fx_finish(&f, rm_layernorm(f.g, x, w, b), "layernorm threads")) {
        float *dout = malloc(30000 * sizeof *dout), *r[2][RM_MAX_IN] = {{0}};
        for (int i = 0; i < 30000; i++) dout[i] = rndu(-1, 1);
        for (int t = 0; t < 2; t++) {
            set_threads(t ? T : 1);
            f.threads = t ? T : 1;
            for (int k = 0; k < 3; k++) r[t][k] = calloc(k ? 100 : 30000, sizeof(float));
            int acc[RM_MAX_IN] = {0};
            fx_forward(&f);
            fx_backward(&f, dout, r[t], acc);
        }
        CHECK(memcmp(r[0][0], r[1][0], 30000 * 4) == 0 && memcmp(r[0][1], r[1][1], 400) == 0 &&
                  memcmp(r[0][2], r[1][2], 400) == 0,
              "layernorm: gradients differ between 1 and %d threads", T);
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 3; k++) free(r[t][k]);
        free(dout);
    }
    fx_end(&f);

    /* embedding backward: 500 ids into 7 rows, 70 columns */
    fx_begin(&f);
    rm_val ids = fx_input(&f, RM_DTYPE_I32, 1, (int64_t[]){500});
    rm_val tab = fx_param(&f, "table", 2, (int64_t[]){7, 70});
    if (fx_finish(&f, rm_embedding(f.g, ids, tab), "embedding threads")) {
        for (int i = 0; i < 500; i++) fx_i(&f, ids)[i] = (int32_t)(rnd() * 7);
        float *dout = malloc(500 * 70 * sizeof *dout), *r[2];
        for (int i = 0; i < 500 * 70; i++) dout[i] = rndu(-1, 1);
        for (int t = 0; t < 2; t++) {
            set_threads(t ? T : 1);
            r[t] = calloc(7 * 70, sizeof(float));
            float *din[RM_MAX_IN] = {NULL, r[t]};
            int acc[RM_MAX_IN] = {0};
            fx_backward(&f, dout, din, acc);
        }
        CHECK(memcmp(r[0], r[1], 7 * 70 * 4) == 0, "embedding: gradients differ between 1 and %d threads", T);
        free(r[0]);
        free(r[1]);
        free(dout);
    }
    fx_end(&f);

    /* softmax_ce loss over 1000 rows (16 per chunk) */
    fx_begin(&f);
    rm_val logits = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){1000, 9});
    rm_val tg = fx_input(&f, RM_DTYPE_I32, 1, (int64_t[]){1000});
    rm_val loss = rm_softmax_ce(f.g, logits, tg);
    if (fx_finish(&f, loss, "softmax_ce threads")) {
        for (int i = 0; i < 1000; i++) fx_i(&f, tg)[i] = i % 9;
        float l[2];
        for (int t = 0; t < 2; t++) {
            set_threads(t ? T : 1);
            fx_forward(&f);
            l[t] = fx_f(&f, loss)[0];
        }
        CHECK(memcmp(&l[0], &l[1], sizeof l[0]) == 0, "softmax_ce: loss differs between 1 and %d threads", T);
    }
    fx_end(&f);
    set_threads(max_threads());
}

/* Builders reject bad shapes with RM_ERR_ARG and a message, never abort. */
static void expect_fail(rm_graph *g, rm_val got, const char *what) {
    CHECK(got == -1 && rm_graph_status(g) == RM_ERR_ARG, "%s: expected RM_ERR_ARG, got value %d status %d", what,
          got, (int)rm_graph_status(g));
    CHECK(strlen(rm_graph_errmsg(g)) > 0, "%s: no error message", what);
}

static void test_builders(void) {
    struct {
        const char *what;
        int which;
    } cases[] = {{"embedding f32 ids", 0}, {"layernorm w shape", 1}, {"add shapes", 2},   {"dropout p=1", 3},
                 {"dropout p<0", 4},       {"softmax_ce shape", 5},  {"softmax_ce dtype", 6}, {"bad id", 7}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rm_graph *g = rm_graph_new();
        rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, (int64_t[]){4, 6});
        rm_val y = rm_input(g, "y", RM_DTYPE_F32, 2, (int64_t[]){4, 5});
        rm_val t = rm_input(g, "t", RM_DTYPE_I32, 1, (int64_t[]){3});
        rm_val w = rm_param(g, "w", 1, (int64_t[]){5}, RM_INIT_ONES, 0, 0);
        rm_val tab = rm_param(g, "tab", 2, (int64_t[]){10, 6}, RM_INIT_NORMAL, 0.02f, 0);
        rm_val got = 0;
        switch (cases[i].which) {
        case 0: got = rm_embedding(g, x, tab); break;
        case 1: got = rm_layernorm(g, x, w, w); break;
        case 2: got = rm_add(g, x, y); break;
        case 3: got = rm_dropout(g, x, 1.0f); break;
        case 4: got = rm_dropout(g, x, -0.1f); break;
        case 5: got = rm_softmax_ce(g, x, t); break;
        case 6: got = rm_softmax_ce(g, x, x); break;
        case 7: got = rm_gelu(g, 1000); break;
        }
        expect_fail(g, got, cases[i].what);
        /* the first error sticks: later builders do nothing */
        CHECK(rm_relu(g, x) == -1 && g->n_nodes == 0, "%s: a builder ran after an error", cases[i].what);
        rm_graph_free(g);
    }
}

static void test_registry(void) {
    const char *names[RM_OP_COUNT] = {"embedding", "linear",    "add",       "layernorm", "gelu",
                                      "relu",      "dropout",   "attention", "softmax_ce",
                                      "batchnorm", "custom",    "rmsnorm",   "mul",
                                      "silu",      "rope",      "attention_general", "concat",
                                      "swiglu",    "linear_ce", "lora_linear"};
    for (int k = 0; k < RM_OP_COUNT; k++) {
        const rm_op_def *d = rm_op_get((rm_op_kind)k);
        CHECK(d && d->forward && d->backward && d->flops && strcmp(d->name, names[k]) == 0,
              "registry: op %d should be '%s'", k, names[k]);
        /* builders record nodes by d->kind: a definition without it would
         * record its nodes as op 0 */
        CHECK(d && d->kind == (rm_op_kind)k, "registry: op '%s' has .kind %d, not its index %d", names[k],
              d ? (int)d->kind : -1, k);
        int cheap = k == RM_OP_LAYERNORM || k == RM_OP_GELU || k == RM_OP_DROPOUT || k == RM_OP_ATTENTION ||
                    k == RM_OP_RMSNORM || k == RM_OP_MUL || k == RM_OP_SILU || k == RM_OP_ROPE ||
                    k == RM_OP_XATTENTION || k == RM_OP_SWIGLU; /* issue 11's ops: the same kinds (norms, pointwise, attention) */
        CHECK(d && d->cheap == cheap, "registry: op '%s' cheap = %d, the selective policy expects %d", names[k],
              d ? d->cheap : -1, cheap);
    }
    CHECK(rm_op_get(RM_OP_COUNT) == NULL, "registry: RM_OP_COUNT must map to NULL");
}

static void test_philox(void) {
    /* Random123 kat_vectors for philox4x32-10: counter, key -> output */
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e,
         0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb,
         0x5001e420, 0x24126ea1},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t o[4];
        rm_philox4x32(kat[t] + 4, kat[t], o);
        CHECK(memcmp(o, kat[t] + 6, sizeof o) == 0, "philox KAT %d: got %08x %08x %08x %08x", t, o[0], o[1], o[2],
              o[3]);
    }
    /* the documented packing: key = seed lo/hi, counter = {i lo, i hi, a, b} */
    const uint64_t seed = 0x0123456789abcdefull, i = 0x00000005deadbeefull;
    const uint32_t key[2] = {0x89abcdef, 0x01234567}, ctr[4] = {0xdeadbeef, 5, 11, 22};
    uint32_t o[4];
    rm_philox4x32(key, ctr, o);
    CHECK(rm_philox_uniform(seed, 11, 22, i) == (float)(o[0] >> 8) / 16777216.0f, "philox_uniform packing");

    double s = 0, s2 = 0, n1 = 0, n2 = 0;
    float umin = 1, umax = 0;
    const int K = 100000;
    for (int k = 0; k < K; k++) {
        float u = rm_philox_uniform(42, 1, 2, (uint64_t)k), z = rm_philox_normal(42, 1, 2, (uint64_t)k);
        umin = u < umin ? u : umin;
        umax = u > umax ? u : umax;
        s += u;
        s2 += (double)u * u;
        n1 += z;
        n2 += (double)z * z;
    }
    CHECK(umin >= 0.0f && umax < 1.0f, "philox_uniform outside [0,1): %g..%g", umin, umax);
    /* std errors: mean 1/sqrt(12K) ~ 9e-4, normal mean 3e-3, variance 4.5e-3 */
    CHECK(fabs(s / K - 0.5) < 0.005 && fabs(s2 / K - 1.0 / 3) < 0.005, "philox_uniform moments %g %g", s / K, s2 / K);
    CHECK(fabs(n1 / K) < 0.02 && fabs(n2 / K - 1.0) < 0.03, "philox_normal moments %g %g", n1 / K, n2 / K);
    CHECK(rm_philox_uniform(42, 1, 2, 9) == rm_philox_uniform(42, 1, 2, 9) &&
              rm_philox_uniform(42, 1, 2, 9) != rm_philox_uniform(43, 1, 2, 9),
          "philox_uniform is a function of (seed, a, b, i)");
}

static void test_util(void) {
    CHECK(rm_dtype_size(RM_DTYPE_F32) == 4 && rm_dtype_size(RM_DTYPE_I32) == 4, "rm_dtype_size");
    char buf[6];
    rm_strlcpy(buf, "abcdefgh", sizeof buf);
    CHECK(strcmp(buf, "abcde") == 0, "rm_strlcpy truncates: '%s'", buf);
    rm_strlcpy(buf, "ab", sizeof buf);
    CHECK(strcmp(buf, "ab") == 0, "rm_strlcpy copies: '%s'", buf);
}

int main(void) {
    test_philox();
    test_util();
    test_registry();
    test_builders();
    printf("gradient checks (h = %g, |a-n| <= %g*scale + %g*|n|):\n", (double)FD_H, FD_ATOL, FD_RTOL);
    test_embedding();
    test_add();
    test_layernorm();
    test_gelu();
    test_relu();
    test_dropout();
    test_softmax_ce();
    test_linear(1);
    test_linear(0);
    test_attention();
    test_attention_blocks();
    test_batchnorm();
    test_custom();
    printf("  worst err/tol over all ops: %.3f\n", worst_ratio_all);
    test_threads();
    return check_done("test_ops");
}
