/* test_lora.c: rm_lora_linear, the linear layer with a LoRA adapter.
 *  - the forward against a double-precision reference of
 *    x W^T + b + (alpha/r) (x A^T) B^T;
 *  - central finite differences for every input (x, W, b, A, B), without
 *    and with dropout (the Philox mask is a fixed function of the step);
 *  - with the adapter frozen too, dx alone reads neither x nor h (the
 *    harness poisons what rm_node_bwd_reads leaves out);
 *  - the builder: PEFT's names, the base frozen, the adapter trainable, A
 *    Kaiming-uniform and B zero in a compiled session (so the layer starts
 *    as its base), errors named;
 *  - the backward's FLOPs count what is computed;
 *  - LoRA on llama and gpt (rm_lora_config): every recompute strategy, a
 *    budget, a limit and the fused optimizer give bit-identical weights
 *    with dropout on (the model's and the adapters'), the base stays
 *    bit-unchanged, a base file loads under the adapters, a training-state
 *    file resumes bit for bit, the merged model (rm_save_merged) gives the
 *    LoRA model's logits, the PEFT folder (rm_save_adapters) holds PEFT's
 *    names, and a file with adapters is refused by a model without them;
 *  - the pruned step of a frozen base with LoRA r 16 on all seven
 *    projections of the SmolLM2-135M shape costs <= 0.75x the FLOPs of
 *    full fine-tuning (issue 21's target; docs/PERFORMANCE.md). */
#include "opcheck.h"
#include "runs.h"
#include <unistd.h>

static char tmpdir[128];

/* x (2,3,IN), W (OUT,IN), b, rank r: the one-node fixture. */
static rm_val lora_fixture(fx *f, int IN, int OUT, int r, float alpha, float p, int bias, rm_val *w, rm_val *x) {
    fx_begin(f);
    *x = fx_input(f, RM_DTYPE_F32, 3, (int64_t[]){2, 3, IN});
    *w = fx_param(f, "m.weight", 2, (int64_t[]){OUT, IN});
    rm_val b = bias ? fx_param(f, "m.bias", 1, (int64_t[]){OUT}) : -1;
    return rm_lora_linear(f->g, *x, *w, b, r, alpha, p);
}

static void test_forward(void) {
    fx f;
    rm_val w, x;
    rm_val y = lora_fixture(&f, 7, 5, 3, 6.0f, 0.0f, 1, &w, &x);
    if (!fx_finish(&f, y, "lora forward")) { fx_end(&f); return; }
    fx_forward(&f);
    const rm_node *n = fx_node(&f);
    const float *X = fx_f(&f, x), *W = fx_f(&f, w), *b = fx_f(&f, n->in[2]), *A = fx_f(&f, n->in[3]),
                *B = fx_f(&f, n->in[4]), *Y = fx_f(&f, y);
    int bad = 0;
    for (int i = 0; i < 6; i++)
        for (int o = 0; o < 5; o++) {
            double ref = b[o];
            for (int k = 0; k < 7; k++) ref += (double)X[i * 7 + k] * W[o * 7 + k];
            for (int j = 0; j < 3; j++) {
                double h = 0;
                for (int k = 0; k < 7; k++) h += (double)X[i * 7 + k] * A[j * 7 + k];
                ref += 2.0 * h * B[o * 3 + j]; /* alpha / r = 6 / 3 */
            }
            if (!(fabs(Y[i * 5 + o] - ref) <= 1e-5 * (1 + fabs(ref)))) bad++;
        }
    CHECK(bad == 0, "lora: forward differs from a double reference in %d elements", bad);
    fx_end(&f);
}

static void test_gradients(void) {
    for (int drop = 0; drop < 2; drop++) {
        fx f;
        rm_val w, x;
        rm_val y = lora_fixture(&f, 6, 4, 2, 3.0f, drop ? 0.3f : 0.0f, 1, &w, &x);
        if (fx_finish(&f, y, "lora")) gradcheck(&f, drop ? "lora_linear dropout 0.3" : "lora_linear", 0);
        fx_end(&f);
    }
    /* the adapter frozen too: only dx, reading W, A and B (x and h poisoned) */
    fx f;
    rm_val w, x;
    rm_val y = lora_fixture(&f, 6, 4, 2, 3.0f, 0.2f, 0, &w, &x);
    const rm_node *n = y >= 0 ? &f.g->nodes[0] : NULL;
    if (n) {
        rm_param_freeze(f.g, n->in[3]);
        rm_param_freeze(f.g, n->in[4]);
    }
    if (fx_finish(&f, y, "lora dx only")) {
        const unsigned reads = rm_node_bwd_reads(n, f.g->vals);
        CHECK(!(reads & RM_READS_IN(0)) && !(reads & RM_READS_OUT(1)), "lora: dx alone reads x or h (%x)", reads);
        gradcheck(&f, "lora_linear dx only", (1u << 1) | (1u << 3) | (1u << 4));
    }
    fx_end(&f);
}

static void test_builder(void) {
    rm_graph *g = rm_graph_new();
    rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, (int64_t[]){4, 16});
    rm_val w = rm_param(g, "model.layers.0.self_attn.q_proj.weight", 2, (int64_t[]){8, 16}, RM_INIT_NORMAL, 0.5f, 1);
    rm_val y = rm_lora_linear(g, x, w, -1, 4, 8.0f, 0.0f);
    rm_val a = rm_param_by_name(g, "model.layers.0.self_attn.q_proj.lora_A.weight");
    rm_val b = rm_param_by_name(g, "model.layers.0.self_attn.q_proj.lora_B.weight");
    int64_t sa[RM_MAX_DIMS], sb[RM_MAX_DIMS];
    CHECK(y >= 0 && a >= 0 && b >= 0 && rm_shape(g, a, sa) == 2 && sa[0] == 4 && sa[1] == 16 &&
              rm_shape(g, b, sb) == 2 && sb[0] == 8 && sb[1] == 4,
          "lora: adapter names or shapes (%s)", rm_graph_errmsg(g));
    CHECK(rm_param_frozen(g, w) && rm_param_trainable(g, a) && rm_param_trainable(g, b) && rm_param_adapter(g, a) &&
              rm_param_adapter(g, b) && !rm_param_adapter(g, w) && rm_param_decay(g, a),
          "lora: base frozen, adapter trainable");
    /* a second adapter on the same weight would share its names */
    CHECK(rm_lora_linear(g, x, w, -1, 4, 8.0f, 0.0f) < 0 && strstr(rm_graph_errmsg(g), "lora_A"),
          "lora: a second adapter on one weight: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    /* compiled: A within Kaiming-uniform's bound and spread over it, B zero,
     * so the layer's output is its base's */
    g = rm_graph_new();
    x = rm_input(g, "x", RM_DTYPE_F32, 2, (int64_t[]){4, 64});
    w = rm_param(g, "m.weight", 2, (int64_t[]){8, 64}, RM_INIT_NORMAL, 0.5f, 1);
    rm_val base = rm_linear(g, x, w, -1);
    y = rm_lora_linear(g, x, w, -1, 16, 32.0f, 0.0f);
    rm_mark_output(g, base);
    rm_mark_output(g, y);
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    o.forward_only = 1;
    rm_session *s = NULL;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "lora compile: %s", rm_graph_errmsg(g));
    if (s) {
        const float *A = rm_value_data(s, rm_param_by_name(g, "m.lora_A.weight")),
                    *B = rm_value_data(s, rm_param_by_name(g, "m.lora_B.weight"));
        float lo = 1, hi = -1;
        int zero = 1;
        for (int i = 0; i < 16 * 64; i++) lo = A[i] < lo ? A[i] : lo, hi = A[i] > hi ? A[i] : hi;
        for (int i = 0; i < 8 * 16; i++) zero &= B[i] == 0.0f;
        CHECK(lo >= -0.125f && hi < 0.125f && lo < -0.1f && hi > 0.1f && zero, "lora init: A in [%g, %g] (bound "
              "1/8), B zero %d", (double)lo, (double)hi, zero);
        float *X = rm_value_data(s, x);
        for (int i = 0; i < 4 * 64; i++) X[i] = (float)((i * 37) % 11) - 5.0f;
        CHECK(rm_forward(s, NULL) == RM_OK && memcmp(rm_value_data(s, base), rm_value_data(s, y), 32 * 4) == 0,
              "lora at init: output differs from the base layer's");
    }
    rm_session_free(s);
    rm_graph_free(g);
    for (int which = 0; which < 6; which++) {
        g = rm_graph_new();
        x = rm_input(g, "x", RM_DTYPE_F32, 2, (int64_t[]){4, 16});
        w = rm_param(g, "w.weight", 2, (int64_t[]){8, 16}, RM_INIT_NORMAL, 0.5f, 1);
        rm_val x2 = rm_input(g, "x2", RM_DTYPE_F32, 2, (int64_t[]){4, 15});
        rm_val bias = rm_param(g, "w.bias", 1, (int64_t[]){7}, RM_INIT_ZEROS, 0, 0);
        rm_val got = 0;
        switch (which) {
        case 0: got = rm_lora_linear(g, x, w, -1, 0, 8.0f, 0.0f); break;    /* rank 0 */
        case 1: got = rm_lora_linear(g, x2, w, -1, 2, 8.0f, 0.0f); break;   /* features */
        case 2: got = rm_lora_linear(g, x, x, -1, 2, 8.0f, 0.0f); break;    /* base not a parameter */
        case 3: got = rm_lora_linear(g, x, w, bias, 2, 8.0f, 0.0f); break;  /* bias shape */
        case 4: got = rm_lora_linear(g, x, w, -1, 2, NAN, 0.0f); break;     /* alpha */
        case 5: got = rm_lora_linear(g, x, w, -1, 2, 8.0f, 1.0f); break;    /* dropout */
        }
        CHECK(got == -1 && rm_graph_status(g) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "lora_linear"),
              "lora builder case %d: expected RM_ERR_ARG naming lora_linear, got %d (%s)", which, got,
              rm_graph_errmsg(g));
        rm_graph_free(g);
    }
}

/* A trainable adapter on a frozen base: the backward costs dB, dh, dA and
 * dx (the base's dy W and the adapter's dh A); no dW. */
static void test_flops(void) {
    fx f;
    rm_val w, x;
    rm_val y = lora_fixture(&f, 64, 32, 4, 8.0f, 0.0f, 0, &w, &x);
    if (y < 0) { fx_end(&f); return; }
    const rm_node *n = &f.g->nodes[0];
    const rm_op_def *op = rm_op_get(n->op);
    const double N = 6, IN = 64, OUT = 32, r = 4;
    /* x is an input without a gradient here: dB, dh, dA */
    double want = 2 * N * r * OUT * 2 + 2 * N * r * IN;
    CHECK(op->flops(n, f.g->vals, 1) == want, "lora backward FLOPs %.0f, expected %.0f", op->flops(n, f.g->vals, 1),
          want);
    CHECK(op->flops(n, f.g->vals, 0) == 2 * N * IN * OUT + 2 * N * IN * r + 2 * N * r * OUT, "lora forward FLOPs");
    fx_end(&f);
}

/* ---- LoRA on the models ------------------------------------------------------ */

static void llama_lora(rm_run_info *r, int rank) {
    rm_run_info_default(r);
    snprintf(r->model, sizeof r->model, "llama");
    r->layers = 3, r->dim = 32, r->heads = 2, r->context = 16, r->batch = 4, r->dropout = 0.1f;
    r->lora.rank = rank, r->lora.alpha = 8.0f, r->lora.dropout = 0.1f;
}

static void opts(rm_options *o) {
    rm_options_default(o);
    o->threads = 2;
    o->seed = 3;
    o->optim.grad_clip = 0.0f;
}

/* Every strategy, a budget, a limit, fused: the same weights, dropout on
 * in the model and in the adapters; the base as it started. */
static void test_model_strategies(const char *model, const char *targets) {
    rm_run_info ri;
    llama_lora(&ri, 4);
    snprintf(ri.model, sizeof ri.model, "%s", model);
    snprintf(ri.lora.targets, sizeof ri.lora.targets, "%s", targets);
    rm_options o;
    opts(&o);
    run ref;
    if (!open_run(&ref, &ri, &o, 0)) return;
    float *before = malloc(ref.g->param_floats * 4);
    memcpy(before, ref.s->params, ref.g->param_floats * 4);
    int adapters = 0;
    if (!train(&ref, 0, 3)) return;
    int base_same = 1, moved = 1;
    for (int i = 0; i < rm_param_count(ref.g); i++) {
        rm_val v = rm_param_at(ref.g, i);
        const size_t off = ref.g->vals[v].param_off, bytes = (size_t)rm_numel(ref.g, v) * 4;
        adapters += rm_param_adapter(ref.g, v);
        if (rm_param_adapter(ref.g, v)) moved &= memcmp(before + off, ref.s->params + off, bytes) != 0;
        else base_same &= memcmp(before + off, ref.s->params + off, bytes) == 0 && rm_param_frozen(ref.g, v);
    }
    const int want = strcmp(model, "llama") == 0 ? (*targets ? 4 : 14) * 3 : 8 * 3; /* gpt: 4 linears a block */
    CHECK(adapters == want && base_same && moved, "%s LoRA: %d adapters (%d expected), base unchanged %d, adapters "
          "trained %d", model, adapters, want, base_same, moved);
    free(before);
    const char *strategies[] = {"blocks", "sqrt", "selective", "segments:2", "revolve:2"};
    for (int i = 0; i < 7; i++) {
        opts(&o);
        if (i < 5) o.checkpoint = strategies[i];
        else if (i == 5) o.budget_fraction = 0.75;
        else o.fuse_optimizer = 1, o.checkpoint = "sqrt";
        run r;
        CHECK(open_run(&r, &ri, &o, 0) && train(&r, 0, 3) && same_params(&r, &ref), "%s LoRA: %s differs from none",
              model, i < 5 ? strategies[i] : i == 5 ? "a 75% budget" : "fused sqrt");
        close_run(&r);
    }
    close_run(&ref);
}

static void path_in(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", tmpdir, name); }

/* Loss and logits of r's forward pass on validation batch 0. */
static float forward_loss(run *r) {
    float loss = NAN;
    rm_data_fill(r->s, &r->io, &runs_data, RM_DATA_VAL, RM_SAMPLE_SEQUENTIAL, 0, 0);
    if (rm_forward(r->s, &loss) != RM_OK) fprintf(stderr, "forward: %s\n", rm_session_errmsg(r->s));
    return loss;
}

static void test_files(void) {
    char base_path[256], ckpt[256], merged[256], dir[256], err[512];
    path_in(base_path, sizeof base_path, "base.safetensors");
    path_in(ckpt, sizeof ckpt, "lora.safetensors");
    path_in(merged, sizeof merged, "merged.safetensors");
    path_in(dir, sizeof dir, "adapters");
    rm_run_info plain, ri;
    llama_lora(&plain, 0);
    llama_lora(&ri, 4);
    rm_options o;
    opts(&o);
    run b, a, c, full;
    if (!open_run(&b, &plain, &o, 0) || !train(&b, 0, 2)) return;
    CHECK(rm_save_params(b.s, base_path, 0, NULL, NULL, err, sizeof err) == RM_OK, "save base: %s", err);
    CHECK(rm_save_adapters(b.s, dir, NULL, 0, err, sizeof err) == RM_ERR_ARG && strstr(err, "no LoRA"),
          "adapters of a model without them: %s", err);
    /* the base under adapters: its weights, the adapters as initialised */
    if (!open_run(&a, &ri, &o, 0) || !open_run(&full, &ri, &o, 0)) return;
    CHECK(rm_load_params(a.s, base_path, err, sizeof err) == RM_OK &&
              rm_load_params(full.s, base_path, err, sizeof err) == RM_OK,
          "a base file under LoRA: %s", err);
    int same = 1;
    for (int i = 0; i < rm_param_count(a.g); i++) {
        rm_val v = rm_param_at(a.g, i), w = rm_param_by_name(b.g, rm_name(a.g, v));
        if (!rm_param_adapter(a.g, v))
            same &= w >= 0 && memcmp(rm_value_data(a.s, v), rm_value_data(b.s, w), (size_t)rm_numel(a.g, v) * 4) == 0;
    }
    const float *B0 = rm_value_data(a.s, rm_param_by_name(a.g, "model.layers.0.self_attn.q_proj.lora_B.weight"));
    CHECK(same && B0 && B0[0] == 0.0f, "base weights loaded under the adapters, B zero");
    /* 2 steps, saved, rebuilt from the file, 2 more == 4 steps */
    CHECK(train(&a, 0, 2) && train(&full, 0, 4) &&
              rm_save_run(a.s, a.o, ckpt, &ri, 0, NULL, NULL, err, sizeof err) == RM_OK,
          "save the LoRA run: %s", err);
    rm_file *f = NULL;
    rm_run_info back;
    CHECK(rm_file_open(ckpt, &f, err, sizeof err) == RM_OK && rm_file_run_info(f, &back, err, sizeof err) == RM_OK &&
              back.lora.rank == 4 && back.lora.alpha == 8.0f && back.lora.dropout == 0.1f && !back.lora.targets[0],
          "the LoRA run back from its file: %s", err);
    if (open_run(&c, &back, &o, 0)) {
        CHECK(rm_file_restore(f, c.s, c.o, err, sizeof err) == RM_OK, "restore: %s", err);
        CHECK(train(&c, 2, 4) && same_params(&c, &full), "a resumed LoRA run differs from the uninterrupted one");
    }
    rm_file_close(f);
    /* the adapters are refused by a model without them */
    CHECK(rm_load_params(b.s, ckpt, err, sizeof err) == RM_ERR_FORMAT && strstr(err, "holds the LoRA adapter"),
          "a LoRA file into a plain model: %s", err);
    /* merged: a plain model with the LoRA model's outputs */
    CHECK(rm_save_merged(full.s, merged, 0, NULL, NULL, err, sizeof err) == RM_OK, "merge: %s", err);
    opts(&o);
    o.forward_only = 1;
    run pm, lm;
    if (open_run(&pm, &plain, &o, 1) && open_run(&lm, &ri, &o, 1)) {
        CHECK(rm_load_params(pm.s, merged, err, sizeof err) == RM_OK, "load merged: %s", err);
        for (int i = 0; i < rm_param_count(lm.g); i++) { /* the trained LoRA model, forward only */
            rm_val v = rm_param_at(lm.g, i);
            memcpy(rm_value_data(lm.s, v), rm_value_data(full.s, rm_param_by_name(full.g, rm_name(lm.g, v))),
                   (size_t)rm_numel(lm.g, v) * 4);
        }
        float lp = forward_loss(&pm), ll = forward_loss(&lm);
        const float *xp = rm_value_data(pm.s, pm.io.logits), *xl = rm_value_data(lm.s, lm.io.logits);
        double worst = 0;
        for (int64_t i = 0; xp && xl && i < rm_numel(pm.g, pm.io.logits); i++)
            worst = fmax(worst, fabs((double)xp[i] - xl[i]) / (1.0 + fabs((double)xl[i])));
        CHECK(xp && xl && worst < 1e-5 && fabsf(lp - ll) < 1e-5f, "merged vs LoRA: logits off by %.2g, loss %g vs %g",
              worst, (double)lp, (double)ll);
    }
    close_run(&pm);
    close_run(&lm);
    /* the PEFT folder */
    CHECK(rm_save_adapters(full.s, dir, "base", 0, err, sizeof err) == RM_OK, "adapters: %s", err);
    char p[300];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    int n = 0, named = 1;
    if (rm_file_open(p, &f, err, sizeof err) == RM_OK) {
        n = rm_file_tensor_count(f);
        for (int i = 0; i < n; i++) {
            rm_tensor_info t;
            rm_file_tensor(f, i, &t);
            named &= strncmp(t.name, "base_model.model.model.layers.", 30) == 0 && strstr(t.name, ".lora_") != NULL;
        }
        rm_file_close(f);
    }
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    char *json = NULL;
    size_t len = 0;
    int config_ok = rm_read_file(p, 1 << 20, &json, &len, err, sizeof err) == RM_OK && strstr(json, "\"peft_type\":\t\"LORA\"") &&
                    strstr(json, "\"r\":\t4") && strstr(json, "\"lora_alpha\":\t8") && strstr(json, "\"down_proj\"");
    CHECK(n == 3 * 14 && named && config_ok, "PEFT folder: %d tensors (42 expected), names %d, config %s", n, named,
          json ? json : err);
    free(json);
    close_run(&a);
    close_run(&b);
    close_run(&c);
    close_run(&full);
}

/* rm_plan's FLOPs of one step of the SmolLM2-135M shape (3 kv heads, tied
 * head), context 512, batch 4: full fine-tuning against LoRA
 * r 16 on all seven projections with the base frozen. Dry runs: planned, not run. */
static void test_flop_target(void) {
    double total[2];
    for (int lora = 0; lora < 2; lora++) {
        rm_run_info ri;
        rm_run_info_default(&ri);
        snprintf(ri.model, sizeof ri.model, "llama");
        ri.layers = 30, ri.dim = 576, ri.heads = 9, ri.kv_heads = 3, ri.ffn_dim = 1536, ri.vocab = 49152,
        ri.tie_embeddings = 1, ri.context = 512, ri.batch = 4;
        ri.lora.rank = lora ? 16 : 0, ri.lora.alpha = 32.0f;
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_options o;
        rm_options_default(&o);
        o.dry_run = 1;
        rm_session *s = NULL;
        rm_plan_info p;
        CHECK(rm_run_build(&ri, g, &io, 0) == RM_OK && rm_compile(g, &o, &s) == RM_OK, "SmolLM2 shape: %s",
              rm_graph_errmsg(g));
        rm_plan(s, &p);
        total[lora] = p.flops_forward + p.flops_backward + p.flops_recompute;
        printf("  SmolLM2-135M shape, %s: forward %.1f + backward %.1f GFLOP per step\n",
               lora ? "LoRA r 16, base frozen" : "full fine-tune", p.flops_forward / 1e9, p.flops_backward / 1e9);
        rm_session_free(s);
        rm_graph_free(g);
    }
    printf("  LoRA / full = %.3f (target <= 0.75)\n", total[1] / total[0]);
    CHECK(total[0] > 0 && total[1] / total[0] <= 0.75, "LoRA step costs %.3f of full fine-tuning's FLOPs",
          total[1] / total[0]);
}

static void test_model_errors(void) {
    rm_run_info ri;
    llama_lora(&ri, 4);
    snprintf(ri.lora.targets, sizeof ri.lora.targets, "q_proj,x_proj");
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    CHECK(rm_run_build(&ri, g, &io, 0) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "'x_proj'") &&
              strstr(rm_graph_errmsg(g), "gate_proj"),
          "an unknown target: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    g = rm_graph_new();
    snprintf(ri.model, sizeof ri.model, "mlp");
    ri.lora.targets[0] = '\0';
    CHECK(rm_run_build(&ri, g, &io, 0) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "LoRA"), "LoRA on an mlp: %s",
          rm_graph_errmsg(g));
    rm_graph_free(g);
}

int main(void) {
    char err[256];
    if (check_tmpdir(tmpdir, sizeof tmpdir, "lora")) return 1;
    static unsigned char text[6000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)("low-rank adapters on a frozen base. "[i % 36]);
    if (rm_data_from_bytes(&runs_data, "text", text, sizeof text, err, sizeof err) != RM_OK ||
        rm_data_split(&runs_data, 0.1, 4, 16, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("gradient checks (h = %g, |a-n| <= %g*scale + %g*|n|):\n", (double)FD_H, FD_ATOL, FD_RTOL);
    test_forward();
    test_gradients();
    test_builder();
    test_flops();
    test_model_errors();
    test_model_strategies("llama", "");
    test_model_strategies("llama", "q_proj,v_proj");
    test_model_strategies("gpt", "");
    test_files();
    test_flop_target();
    rm_data_free(&runs_data);
    check_rmdir(tmpdir);
    return check_done("test_lora");
}
