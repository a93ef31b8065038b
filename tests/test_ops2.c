/* test_ops2.c: the ops of the LLaMA-style, encoder-decoder and U-shaped
 * models (issue 11) against central finite differences (opcheck.h) and
 * against double-precision references of their definitions: RMSNorm,
 * elementwise multiply, SiLU, SwiGLU, RoPE in Hugging Face's rotate_half convention,
 * general (cross, masked, causal) attention, concatenation and the
 * cross-entropy that ignores a PAD target. PyTorch checks the same ops
 * inside whole models (tests/torch_models.py). */
#include "opcheck.h"

static void test_rmsnorm(void) {
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 8});
    rm_val w = fx_param(&f, "w", 1, (int64_t[]){8});
    rm_val out = rm_rmsnorm(f.g, x, w, 1e-6f);
    if (!fx_finish(&f, out, "rmsnorm")) { fx_end(&f); return; }
    CHECK(fx_node(&f)->n_out == 2 && fx_numel(&f, fx_node(&f)->out[1]) == 6, "rmsnorm: rstd output");
    for (int i = 0; i < 8; i++) fx_f(&f, w)[i] = rndu(0.5f, 1.5f);
    for (int i = 0; i < 8; i++) fx_f(&f, x)[8 + i] = 100.0f + rndu(-1, 1); /* a row far from zero */
    fx_forward(&f);
    const float *y = fx_f(&f, out), *xv = fx_f(&f, x);
    int bad = 0;
    for (int r = 0; r < 6; r++) {
        double ss = 0;
        for (int i = 0; i < 8; i++) ss += (double)xv[r * 8 + i] * xv[r * 8 + i];
        for (int i = 0; i < 8; i++) {
            double ref = xv[r * 8 + i] / sqrt(ss / 8 + 1e-6) * fx_f(&f, w)[i];
            if (!(fabs(y[r * 8 + i] - ref) <= 1e-5 * (1 + fabs(ref)))) bad++;
        }
    }
    CHECK(bad == 0, "rmsnorm: forward differs from a double reference in %d elements", bad);
    gradcheck(&f, "rmsnorm", 0);
    fx_end(&f);
}

/* rmsnorm's dw is a column sum: bitwise the same for 1 and several threads */
static void test_rmsnorm_threads(void) {
    if (max_threads() < 2) set_threads(2);
    const int T = max_threads() < 3 ? 3 : max_threads();
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){300, 100});
    rm_val w = fx_param(&f, "w", 1, (int64_t[]){100});
    if (fx_finish(&f, rm_rmsnorm(f.g, x, w, 1e-6f), "rmsnorm threads")) {
        float *dout = malloc(30000 * sizeof *dout), *r[2][RM_MAX_IN] = {{0}};
        for (int i = 0; i < 30000; i++) dout[i] = rndu(-1, 1);
        for (int t = 0; t < 2; t++) {
            set_threads(t ? T : 1);
            for (int k = 0; k < 2; k++) r[t][k] = calloc(k ? 100 : 30000, sizeof(float));
            int acc[RM_MAX_IN] = {0};
            fx_forward(&f);
            fx_backward(&f, dout, r[t], acc);
        }
        CHECK(memcmp(r[0][0], r[1][0], 30000 * 4) == 0 && memcmp(r[0][1], r[1][1], 400) == 0,
              "rmsnorm: gradients differ between 1 and %d threads", T);
        for (int t = 0; t < 2; t++)
            for (int k = 0; k < 2; k++) free(r[t][k]);
        free(dout);
    }
    fx_end(&f);
    set_threads(max_threads());
}

static void test_mul_silu_concat(void) {
    fx f;
    fx_begin(&f);
    rm_val a = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    rm_val b = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    rm_val out = rm_mul(f.g, a, b);
    if (fx_finish(&f, out, "mul")) {
        fx_forward(&f);
        int bad = 0;
        for (int i = 0; i < 24; i++) bad += fx_f(&f, out)[i] != fx_f(&f, a)[i] * fx_f(&f, b)[i];
        CHECK(bad == 0, "mul: forward is not a*b in %d elements", bad);
        gradcheck(&f, "mul", 0);
    }
    fx_end(&f);

    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){4, 6});
    out = rm_silu(f.g, x);
    if (fx_finish(&f, out, "silu")) {
        for (int i = 0; i < 24; i++) fx_f(&f, x)[i] = rndu(-6, 6);
        fx_f(&f, x)[0] = -100.0f; /* exp(100) overflows float: silu must still be 0, not NaN */
        fx_forward(&f);
        int bad = 0;
        for (int i = 0; i < 24; i++) {
            double v = fx_f(&f, x)[i], ref = v / (1 + exp(-v));
            if (!(fabs(fx_f(&f, out)[i] - ref) <= 1e-6 * (1 + fabs(ref)))) bad++;
        }
        CHECK(bad == 0, "silu: forward differs from x*sigmoid(x) in %d elements", bad);
        fx_f(&f, x)[0] = rndu(-3, 3);
        gradcheck(&f, "silu", 0);
    }
    fx_end(&f);

    fx_begin(&f); /* swiglu = silu(gate) * up, against doubles; 40 elements: the vector loop and its tail */
    a = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){5, 8});
    b = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){5, 8});
    out = rm_swiglu(f.g, a, b);
    if (fx_finish(&f, out, "swiglu")) {
        for (int i = 0; i < 40; i++) fx_f(&f, a)[i] = rndu(-6, 6);
        fx_f(&f, a)[0] = -100.0f, fx_f(&f, a)[1] = 100.0f; /* saturated: 0 and up, no NaN */
        fx_forward(&f);
        int bad = 0;
        for (int i = 0; i < 40; i++) {
            double v = fx_f(&f, a)[i], ref = v / (1 + exp(-v)) * fx_f(&f, b)[i];
            if (!(fabs(fx_f(&f, out)[i] - ref) <= 1e-6 * (1 + fabs(ref)))) bad++;
        }
        CHECK(bad == 0, "swiglu: forward differs from silu(gate)*up in %d elements", bad);
        fx_f(&f, a)[0] = rndu(-3, 3), fx_f(&f, a)[1] = rndu(-3, 3);
        gradcheck(&f, "swiglu", 0);
    }
    fx_end(&f);

    fx_begin(&f);
    a = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 4});
    b = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, 5});
    out = rm_concat(f.g, a, b);
    if (fx_finish(&f, out, "concat")) {
        int64_t sh[RM_MAX_DIMS];
        CHECK(rm_shape(f.g, out, sh) == 3 && sh[2] == 9, "concat: output shape");
        fx_forward(&f);
        CHECK(memcmp(fx_f(&f, out) + 9 * 4, fx_f(&f, a) + 4 * 4, 4 * sizeof(float)) == 0 &&
                  memcmp(fx_f(&f, out) + 9 * 4 + 4, fx_f(&f, b) + 4 * 5, 5 * sizeof(float)) == 0,
              "concat: row 4 is (a[4], b[4])");
        gradcheck(&f, "concat", 0);
    }
    fx_end(&f);
}

/* RoPE against Hugging Face's formula, written out in double:
 *   inv_freq_i = theta^(-2i/hd), emb = cat(t*inv_freq, t*inv_freq)
 *   out = x * cos(emb) + rotate_half(x) * sin(emb), rotate_half(x) = cat(-x2, x1) */
static void test_rope(void) {
    enum { B = 2, T = 5, H = 2, HD = 6, C = H * HD };
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
    rm_val out = rm_rope(f.g, x, H, 10000.0f);
    if (!fx_finish(&f, out, "rope")) { fx_end(&f); return; }
    fx_forward(&f);
    const float *xv = fx_f(&f, x), *y = fx_f(&f, out);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int d = 0; d < HD; d++) {
                    const float *xr = xv + ((b * T + t) * C + h * HD);
                    int i = d % (HD / 2);
                    double ang = t * pow(10000.0, -2.0 * i / HD);
                    double rot = d < HD / 2 ? -xr[d + HD / 2] : xr[d - HD / 2];
                    double ref = xr[d] * cos(ang) + rot * sin(ang);
                    double err = fabs(ref - y[(b * T + t) * C + h * HD + d]);
                    worst = err > worst ? err : worst;
                }
    CHECK(worst < 1e-5, "rope: off Hugging Face's rotate_half formula by %g", worst);
    CHECK(memcmp(xv, y, C * sizeof(float)) == 0, "rope: position 0 is not the identity");
    gradcheck(&f, "rope", 0);
    fx_end(&f);
}

/* Attention against a double reference that builds the whole score matrix
 * and masks it; keys padded by `mask`, the last batch row fully padded when
 * `all_padded` (its output must be zero, not NaN). H query heads and K
 * key/value heads: query head h reads key/value head h / (H/K) (HF's
 * repeat_kv). */
static void attention_gqa_case(int Tq, int Tk, int causal, int masked, int H, int K, const char *what) {
    enum { B = 2, HD = 3 };
    const int C = H * HD, CK = K * HD, G = H / K;
    fx f;
    fx_begin(&f);
    rm_val q = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, Tq, C});
    rm_val k = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, Tk, CK});
    rm_val v = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, Tk, CK});
    rm_val m = masked ? fx_input(&f, RM_DTYPE_I32, 2, (int64_t[]){B, Tk}) : -1;
    rm_val out = K == H ? rm_attention_general(f.g, q, k, v, m, H, causal) : rm_attention_gqa(f.g, q, k, v, m, H, K, causal);
    if (!fx_finish(&f, out, what)) { fx_end(&f); return; }
    for (int64_t i = 0; i < fx_numel(&f, q); i++) fx_f(&f, q)[i] = rndu(-1.5f, 1.5f);
    int32_t *mk = masked ? fx_i(&f, m) : NULL;
    for (int i = 0; masked && i < B * Tk; i++) mk[i] = (i % 3) != 1; /* every third key is padding */
    fx_forward(&f);
    const float *Q = fx_f(&f, q), *Kx = fx_f(&f, k), *V = fx_f(&f, v), *o = fx_f(&f, out);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < Tq; i++) {
                const int kh = h / G; /* the key/value head of query head h */
                double s[160], mx = -INFINITY, sum = 0;
                for (int j = 0; j < Tk; j++) {
                    s[j] = 0;
                    for (int d = 0; d < HD; d++)
                        s[j] += (double)Q[(b * Tq + i) * C + h * HD + d] * Kx[(b * Tk + j) * CK + kh * HD + d];
                    int vis = (!causal || j <= i) && (!mk || mk[b * Tk + j]);
                    s[j] = vis ? s[j] / sqrt(HD) : -INFINITY;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < Tk; j++) s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx), sum += s[j];
                for (int d = 0; d < HD; d++) {
                    double ref = 0;
                    for (int j = 0; j < Tk && sum > 0; j++) ref += s[j] / sum * V[(b * Tk + j) * CK + kh * HD + d];
                    double err = fabs(ref - o[(b * Tq + i) * C + h * HD + d]);
                    if (!(err <= worst)) worst = err; /* NaN sticks */
                }
            }
    CHECK(worst < 1e-5, "%s: off the double reference by %g", what, worst);
    gradcheck(&f, what, 0);
    if (masked) { /* batch row 1 all padding: zeros out, zero gradients, no NaN */
        for (int j = 0; j < Tk; j++) mk[Tk + j] = 0;
        fx_forward(&f);
        int bad = 0;
        for (int i = Tq * C; i < 2 * Tq * C; i++) bad += o[i] != 0.0f;
        CHECK(bad == 0, "%s: a query with no visible key has %d nonzero outputs", what, bad);
        gradcheck(&f, what, 0);
    }
    fx_end(&f);
}

static void attention_case(int Tq, int Tk, int causal, int masked, const char *what) {
    attention_gqa_case(Tq, Tk, causal, masked, 2, 2, what);
}

/* GQA's dK and dV sum over a group of query heads, each group on one
 * thread: the gradients are bitwise the same for 1 and several threads. */
static void test_gqa_threads(void) {
    enum { B = 3, T = 70, H = 4, K = 2, HD = 4, C = H * HD, CK = K * HD };
    const int nt = max_threads() < 3 ? 3 : max_threads();
    set_threads(nt); /* before fx_begin: the backward's scratch is one slice per thread */
    fx f;
    fx_begin(&f);
    rm_val q = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
    rm_val k = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, T, CK});
    rm_val v = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){B, T, CK});
    if (fx_finish(&f, rm_attention_gqa(f.g, q, k, v, -1, H, K, 1), "gqa threads")) {
        const int64_t nq = B * T * C, nk = B * T * CK;
        float *dout = malloc(nq * sizeof *dout), *r[2][RM_MAX_IN] = {{0}};
        for (int64_t i = 0; i < nq; i++) dout[i] = rndu(-1, 1);
        for (int t = 0; t < 2; t++) {
            set_threads(t ? nt : 1);
            for (int j = 0; j < 3; j++) r[t][j] = calloc(j ? nk : nq, sizeof(float));
            int acc[RM_MAX_IN] = {0};
            fx_forward(&f);
            fx_backward(&f, dout, r[t], acc);
        }
        CHECK(memcmp(r[0][0], r[1][0], nq * 4) == 0 && memcmp(r[0][1], r[1][1], nk * 4) == 0 &&
                  memcmp(r[0][2], r[1][2], nk * 4) == 0,
              "gqa: gradients differ between 1 and %d threads", nt);
        for (int t = 0; t < 2; t++)
            for (int j = 0; j < 3; j++) free(r[t][j]);
        free(dout);
    }
    fx_end(&f);
    set_threads(max_threads());
}

/* Causal, Tq = Tk, one set of weights: the general op and the fused
 * rm_attention(qkv) agree (one is GPT's fast path of the other), over
 * more than one causal block. */
static void test_attention_matches_fused(void) {
    enum { B = 2, T = 70, H = 2, C = 8 };
    rm_graph *g = rm_graph_new();
    rm_val qkv = rm_input(g, "qkv", RM_DTYPE_F32, 3, (int64_t[]){B, T, 3 * C});
    rm_val fused = rm_attention(g, qkv, H);
    rm_val q = rm_input(g, "q", RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
    rm_val k = rm_input(g, "k", RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
    rm_val v = rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){B, T, C});
    rm_val gen = rm_attention_general(g, q, k, v, -1, H, 1);
    CHECK(fused >= 0 && gen >= 0, "attention builders: %s", rm_graph_errmsg(g));
    if (fused < 0 || gen < 0) { rm_graph_free(g); return; }
    static float X[B * T * 3 * C], Qv[B * T * C], Kv[B * T * C], Vv[B * T * C], P1[B * H * T * T], P2[B * H * T * T];
    static float O1[B * T * C], O2[B * T * C];
    for (int i = 0; i < B * T * 3 * C; i++) X[i] = rndu(-1, 1);
    for (int r = 0; r < B * T; r++)
        for (int d = 0; d < C; d++) {
            Qv[r * C + d] = X[r * 3 * C + d];
            Kv[r * C + d] = X[r * 3 * C + C + d];
            Vv[r * C + d] = X[r * 3 * C + 2 * C + d];
        }
    rm_kernel_ctx c1 = {0}, c2 = {0};
    c1.node = &g->nodes[0], c1.vin[0] = &g->vals[qkv], c1.in[0] = X, c1.out[0] = O1, c1.out[1] = P1;
    c2.node = &g->nodes[1];
    c2.vin[0] = &g->vals[q], c2.vin[1] = &g->vals[k], c2.vin[2] = &g->vals[v];
    c2.in[0] = Qv, c2.in[1] = Kv, c2.in[2] = Vv, c2.out[0] = O2, c2.out[1] = P2;
    for (int j = 0; j < 2; j++) /* the outputs' shapes and dtypes, as the executor binds them */
        c1.vout[j] = &g->vals[g->nodes[0].out[j]], c2.vout[j] = &g->vals[g->nodes[1].out[j]];
    rm_op_get(RM_OP_ATTENTION)->forward(&c1);
    rm_op_get(RM_OP_XATTENTION)->forward(&c2);
    double worst = 0;
    for (int i = 0; i < B * T * C; i++) worst = fabs(O1[i] - O2[i]) > worst ? fabs(O1[i] - O2[i]) : worst;
    CHECK(worst < 1e-6, "attention: the general causal op differs from the fused one by %g", worst);
    rm_graph_free(g);
}

static void test_softmax_ce_ignore(void) {
    enum { N = 6, V = 7, PAD = 5 };
    fx f;
    fx_begin(&f);
    rm_val logits = fx_input(&f, RM_DTYPE_F32, 2, (int64_t[]){N, V});
    rm_val tg = fx_input(&f, RM_DTYPE_I32, 1, (int64_t[]){N});
    rm_val loss = rm_softmax_ce_ignore(f.g, logits, tg, PAD);
    if (!fx_finish(&f, loss, "softmax_ce_ignore")) { fx_end(&f); return; }
    const int32_t t[N] = {1, PAD, 3, PAD, 0, 6};
    memcpy(fx_i(&f, tg), t, sizeof t);
    fx_forward(&f);
    const float *z = fx_f(&f, logits);
    double ref = 0;
    for (int n = 0; n < N; n++) {
        if (t[n] == PAD) continue;
        double s = 0;
        for (int v = 0; v < V; v++) s += exp((double)z[n * V + v]);
        ref += log(s) - z[n * V + t[n]];
    }
    ref /= 4; /* four rows are not padding */
    const float got = fx_f(&f, loss)[0];
    CHECK(fabs(got - ref) < 1e-5, "softmax_ce_ignore: loss %.8g, reference (mean over 4 rows) %.8g", got, ref);
    gradcheck(&f, "softmax_ce_ignore", 0);
    float R = 1.0f, d[N * V];
    float *din[RM_MAX_IN] = {d};
    int acc[RM_MAX_IN] = {0};
    fx_backward(&f, &R, din, acc);
    int nz = 0;
    for (int v = 0; v < V; v++) nz += d[1 * V + v] != 0.0f || d[3 * V + v] != 0.0f;
    CHECK(nz == 0, "softmax_ce_ignore: PAD rows get %d nonzero gradients", nz);
    for (int n = 0; n < N; n++) fx_i(&f, tg)[n] = PAD; /* nothing left: loss 0, not NaN */
    fx_forward(&f);
    CHECK(fx_f(&f, loss)[0] == 0.0f, "softmax_ce_ignore: all rows PAD gives %g, not 0", fx_f(&f, loss)[0]);
    fx_end(&f);
}

/* linear_ce against softmax_ce of linear (the unfused head), in more rows
 * than one chunk, and finite differences in x and W. */
static void test_linear_ce(void) {
    enum { N = 6, C = 5, V = 7 };
    fx f;
    fx_begin(&f);
    rm_val x = fx_input(&f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, C});
    rm_val w = fx_param(&f, "w", 2, (int64_t[]){V, C});
    rm_val tg = fx_input(&f, RM_DTYPE_I32, 2, (int64_t[]){2, 3});
    rm_val loss = rm_linear_ce(f.g, x, w, tg);
    if (fx_finish(&f, loss, "linear_ce")) {
        const int32_t t[N] = {1, 6, 3, 0, 0, 5};
        memcpy(fx_i(&f, tg), t, sizeof t);
        for (int i = 0; i < V * C; i++) fx_f(&f, w)[i] = rndu(-2, 2);
        fx_forward(&f);
        const float *xv = fx_f(&f, x), *wv = fx_f(&f, w);
        double ref = 0;
        for (int n = 0; n < N; n++) {
            double z[V], mx = -INFINITY, s = 0;
            for (int v = 0; v < V; v++) {
                z[v] = 0;
                for (int k = 0; k < C; k++) z[v] += (double)xv[n * C + k] * wv[v * C + k];
                mx = z[v] > mx ? z[v] : mx;
            }
            for (int v = 0; v < V; v++) s += exp(z[v] - mx);
            ref += mx + log(s) - z[t[n]];
        }
        ref /= N;
        CHECK(fabs(fx_f(&f, loss)[0] - ref) < 1e-5, "linear_ce: loss %.8g, double reference %.8g", fx_f(&f, loss)[0],
              ref);
        gradcheck(&f, "linear_ce", 0);
        fx_i(&f, tg)[2] = V; /* out of range: the check refuses it */
        rm_kernel_ctx c = fx_ctx(&f);
        char err[256] = "";
        CHECK(rm_op_get(RM_OP_LINEAR_CE)->check(&c, err, sizeof err) == RM_ERR_ARG && strstr(err, "position 2"),
              "linear_ce: target %d refused: '%s'", V, err);
    }
    fx_end(&f);
}

/* Many rows (several chunks of a large vocabulary): the same loss and
 * gradients as rm_softmax_ce(rm_linear(x, W)), two sessions with the same
 * initial x and W. */
static void test_linear_ce_chunks(void) {
    enum { N = 300, C = 8, V = 20000 };
    rm_graph *g[2];
    rm_session *s[2] = {NULL, NULL};
    rm_val x = -1, w = -1, t = -1;
    float loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        g[k] = rm_graph_new();
        x = rm_param(g[k], "x", 2, (int64_t[]){N, C}, RM_INIT_NORMAL, 1.0f, 0);
        w = rm_param(g[k], "w", 2, (int64_t[]){V, C}, RM_INIT_NORMAL, 0.5f, 0);
        t = rm_input(g[k], "t", RM_DTYPE_I32, 1, (int64_t[]){N});
        rm_set_loss(g[k], k ? rm_softmax_ce(g[k], rm_linear(g[k], x, w, -1), t) : rm_linear_ce(g[k], x, w, t));
        rm_options o;
        rm_options_default(&o);
        CHECK(rm_compile(g[k], &o, &s[k]) == RM_OK, "linear_ce chunks: %s", rm_graph_errmsg(g[k]));
        if (!s[k]) continue;
        int32_t *tv = rm_value_data(s[k], t);
        for (int n = 0; n < N; n++) tv[n] = (n * 7919) % V;
        CHECK(rm_step(s[k], 0, &loss[k]) == RM_OK, "linear_ce chunks step: %s", rm_session_errmsg(s[k]));
    }
    if (s[0] && s[1]) {
        CHECK(fabsf(loss[0] - loss[1]) <= 1e-5f * fabsf(loss[1]), "linear_ce over chunks: loss %.8g, unfused %.8g",
              loss[0], loss[1]);
        double worst[2] = {0, 0}, big[2] = {0, 0};
        for (int p = 0; p < 2; p++) {
            const rm_val v = p ? w : x;
            const float *a = rm_grad(s[0], v), *b = rm_grad(s[1], v);
            for (int64_t i = 0; i < rm_numel(g[0], v); i++) {
                worst[p] = fmax(worst[p], fabs(a[i] - b[i]));
                big[p] = fmax(big[p], fabs(b[i]));
            }
        }
        CHECK(worst[0] <= 1e-5 * big[0] && worst[1] <= 1e-5 * big[1],
              "linear_ce over chunks: dx off by %.3g (of %.3g), dW by %.3g (of %.3g)", worst[0], big[0], worst[1],
              big[1]);
    }
    for (int k = 0; k < 2; k++) {
        rm_session_free(s[k]);
        rm_graph_free(g[k]);
    }
}

static void test_builders2(void) {
    for (int which = 0; which < 14; which++) {
        rm_graph *g = rm_graph_new();
        rm_val x = rm_input(g, "x", RM_DTYPE_F32, 3, (int64_t[]){2, 4, 6});
        rm_val y = rm_input(g, "y", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6});
        rm_val z = rm_input(g, "z", RM_DTYPE_F32, 3, (int64_t[]){2, 4, 5});
        rm_val m = rm_input(g, "m", RM_DTYPE_I32, 2, (int64_t[]){2, 4});
        rm_val w = rm_param(g, "w", 1, (int64_t[]){5}, RM_INIT_ONES, 0, 0);
        rm_val got = 0;
        switch (which) {
        case 0: got = rm_rmsnorm(g, x, w, 1e-6f); break;              /* w is (5), x's last dim 6 */
        case 1: got = rm_rmsnorm(g, z, w, 0.0f); break;               /* eps 0 */
        case 2: got = rm_mul(g, x, y); break;                         /* shapes */
        case 3: got = rm_rope(g, x, 4, 10000.0f); break;              /* 6 not divisible by 4 */
        case 4: got = rm_rope(g, x, 2, 10000.0f); break;              /* head dim 3 is odd */
        case 5: got = rm_attention_general(g, x, y, z, -1, 2, 0); break; /* v's C differs */
        case 6: got = rm_attention_general(g, x, y, y, -1, 2, 0); break; /* k == v */
        case 7: got = rm_attention_general(g, x, y, rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6}), m, 2, 0);
            break;                                                     /* mask (2,4), Tk 5 */
        case 8: got = rm_concat(g, x, y); break;                      /* leading dims differ */
        case 9: got = rm_swiglu(g, x, z); break;                      /* shapes */
        case 10: got = rm_attention_gqa(g, x, y, rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6}), -1, 2, 2, 0);
            break; /* heads 2, kv_heads 2: k must have 6 columns, has 6: fine; see 11 */
        case 11: got = rm_attention_gqa(g, x, y, rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6}), -1, 2, 1, 0);
            break; /* kv_heads 1 needs k and v of 3 columns */
        case 12: got = rm_attention_gqa(g, x, y, rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6}), -1, 3, 2, 0);
            break; /* kv_heads 2 does not divide heads 3 */
        case 13: got = rm_attention_gqa(g, x, y, rm_input(g, "v", RM_DTYPE_F32, 3, (int64_t[]){2, 5, 6}), -1, 2, 0, 0);
            break; /* kv_heads 0 */
        }
        if (which == 10) {
            CHECK(got >= 0, "rm_attention_gqa with kv_heads = heads: %s", rm_graph_errmsg(g));
            rm_graph_free(g);
            continue;
        }
        CHECK(got == -1 && rm_graph_status(g) == RM_ERR_ARG && strlen(rm_graph_errmsg(g)) > 0,
              "builder case %d: expected RM_ERR_ARG with a message, got %d (%s)", which, got, rm_graph_errmsg(g));
        rm_graph_free(g);
    }
}

/* GELU and SiLU with x (and out) kept in bf16 (--precision bf16), against
 * the fp32 kernels on the widened x: the forward must give the fp32
 * output rounded once, the backward (which widens a bf16 x in its own
 * loop) the same dx bits, overwriting and accumulating; N past one chunk
 * and not a multiple of a vector. */
static void test_pointwise_bf16(void) {
    const int64_t N = 3 * RM_ACT_CHUNK + 13;
    for (int op = 0; op < 2; op++) {
        rm_graph *g = rm_graph_new();
        const rm_val x = rm_input(g, "x", RM_DTYPE_F32, 1, (int64_t[]){N});
        const rm_val y = op ? rm_silu(g, x) : rm_gelu(g, x);
        const char *name = op ? "silu" : "gelu";
        CHECK(y >= 0, "%s: builder failed", name);
        if (y < 0) continue;
        const rm_node *n = &g->nodes[0];
        const rm_op_def *d = rm_op_get(n->op);
        uint16_t *xh = malloc(N * 2), *yh = malloc(N * 2);
        float *xf = malloc(N * 4), *yf = malloc(N * 4), *dout = malloc(N * 4), *dx[2] = {malloc(N * 4), malloc(N * 4)};
        for (int64_t i = 0; i < N; i++) {
            xh[i] = rm_f32_to_bf16(rndu(-6, 6));
            xf[i] = rm_bf16_to_f32(xh[i]);
            dout[i] = rndu(-1, 1);
        }
        int same_y = 1, same_dx = 1;
        for (int acc = 0; acc < 2; acc++) {
            for (int h = 0; h < 2; h++) { /* h: x and out in bf16 */
                g->vals[x].dtype = g->vals[y].dtype = h ? RM_DTYPE_BF16 : RM_DTYPE_F32;
                rm_kernel_ctx c;
                memset(&c, 0, sizeof c);
                c.node = n, c.threads = max_threads(), c.train = 1;
                c.vin[0] = &g->vals[x], c.in[0] = h ? (void *)xh : (void *)xf;
                c.vout[0] = &g->vals[y], c.out[0] = h ? (void *)yh : (void *)yf;
                c.dout[0] = dout, c.din[0] = dx[h], c.acc[0] = acc;
                for (int64_t i = 0; i < N; i++) dx[h][i] = acc ? (float)i * 0.25f : NAN;
                d->forward(&c);
                d->backward(&c);
            }
            for (int64_t i = 0; i < N; i++) {
                same_y &= yh[i] == rm_f32_to_bf16(yf[i]);
                same_dx &= memcmp(&dx[0][i], &dx[1][i], 4) == 0;
            }
        }
        CHECK(same_y, "%s: bf16 forward is not the fp32 forward rounded", name);
        CHECK(same_dx, "%s: backward over a bf16 x differs from the fp32 kernel on the widened x", name);
        free(xh), free(yh), free(xf), free(yf), free(dout), free(dx[0]), free(dx[1]);
        rm_graph_free(g);
    }
}

int main(void) {
    test_builders2();
    printf("gradient checks (h = %g, |a-n| <= %g*scale + %g*|n|):\n", (double)FD_H, FD_ATOL, FD_RTOL);
    test_rmsnorm();
    test_mul_silu_concat();
    test_rope();
    attention_case(5, 5, 1, 0, "attention_general causal");
    attention_case(4, 6, 0, 0, "attention_general cross Tq=4 Tk=6");
    attention_case(4, 6, 0, 1, "attention_general cross masked");
    attention_case(5, 5, 1, 1, "attention_general causal masked");
    /* more queries than one causal block (RM_ATT_BLOCK = 64): blocks of 64 and 6 or 26 */
    attention_case(70, 70, 1, 0, "attention_general causal T=70, in blocks");
    attention_case(70, 70, 1, 1, "attention_general causal masked T=70");
    attention_case(70, 90, 1, 0, "attention_general causal Tq=70 Tk=90");
    attention_case(90, 70, 1, 1, "attention_general causal masked Tq=90 Tk=70");
    attention_case(70, 90, 0, 1, "attention_general cross masked Tq=70 Tk=90");
    /* grouped-query attention: 4 query heads over 2 and 1 key/value heads */
    attention_gqa_case(5, 5, 1, 0, 4, 2, "attention_gqa causal H=4 K=2");
    attention_gqa_case(70, 70, 1, 1, 4, 2, "attention_gqa causal masked T=70 H=4 K=2");
    attention_gqa_case(4, 6, 0, 1, 4, 1, "attention_gqa cross masked H=4 K=1");
    test_gqa_threads();
    test_attention_matches_fused();
    test_softmax_ce_ignore();
    test_linear_ce();
    test_linear_ce_chunks();
    test_rmsnorm_threads();
    test_pointwise_bf16();
    printf("  worst err/tol over all ops: %.3f\n", worst_ratio_all);
    return check_done("test_ops2");
}
