/* test_freeze.c: frozen parameters (rm_param_freeze, rm_freeze_params).
 *  - the API: what can be frozen, when, globs and module names, messages;
 *  - a frozen run's gradients of the trainable parameters equal the full
 *    run's bit for bit (llama, GPT with its tied embedding frozen, an MLP
 *    with BatchNorm state), frozen ones have none, and after AdamW steps
 *    with weight decay the frozen weights are bit-unchanged;
 *  - the state shrinks: gradient and moment bytes are the trainable ones,
 *    and a memory limit counts that;
 *  - the backward is pruned: no backward below the last frozen-only stage,
 *    no weight-gradient product for a frozen linear and its input not kept
 *    for one, fewer backward FLOPs and activation bytes;
 *  - every recompute strategy, a budget, a limit, the fused optimizer and
 *    accumulated micro-batches give bit-identical weights (dropout on);
 *  - a training-state file records what is frozen, holds no moments for
 *    it, and a run rebuilt from it continues bit for bit. */
#include "check.h"
#include "exec/exec.h"
#include "runs.h"
#include <math.h>
#include <string.h>

static char tmpdir[128];

static void config(rm_run_info *r, const char *model, const char *freeze, const char *train_only) {
    rm_run_info_default(r);
    snprintf(r->model, sizeof r->model, "%s", model);
    r->layers = 3, r->dim = 32, r->heads = 2, r->context = 16, r->batch = 4, r->dropout = 0.1f;
    r->n_widths = 2, r->widths[0] = 24, r->widths[1] = 32, r->batchnorm = 1;
    if (strcmp(model, "mlp") == 0) r->context = 8, r->batch = 8;
    snprintf(r->freeze, sizeof r->freeze, "%s", freeze ? freeze : "");
    snprintf(r->train_only, sizeof r->train_only, "%s", train_only ? train_only : "");
}

static void options(rm_options *o) {
    rm_options_default(o);
    o->threads = 2;
    o->seed = 11;
    o->optim.grad_clip = 0.0f; /* the fused runs compare with these */
}

static void test_api(void) {
    rm_run_info ri;
    config(&ri, "mlp", NULL, NULL);
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    CHECK(rm_run_build(&ri, g, &io, 0) == RM_OK, "build: %s", rm_graph_errmsg(g));
    rm_val w0 = rm_param_by_name(g, "layers.0.weight"), rm = rm_param_by_name(g, "layers.0.bn.running_mean");
    CHECK(w0 >= 0 && rm >= 0 && rm_param_by_name(g, "nope") < 0, "rm_param_by_name");
    CHECK(rm_param_freeze(g, rm) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "state"),
          "freezing state: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    g = rm_graph_new();
    rm_run_build(&ri, g, &io, 0);
    CHECK(rm_param_freeze(g, io.logits) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "only parameters"),
          "freezing an activation: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    g = rm_graph_new();
    rm_run_build(&ri, g, &io, 0);
    int n = -1;
    CHECK(rm_freeze_params(g, "layers.9*", NULL, &n) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "'layers.9*'"),
          "a pattern matching nothing: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    g = rm_graph_new();
    rm_run_build(&ri, g, &io, 0);
    /* "layers.1" names a module: its weight, bias and BatchNorm gain and shift (not its state) */
    CHECK(rm_freeze_params(g, "layers.1", NULL, &n) == RM_OK && n == 4, "module glob froze %d", n);
    w0 = rm_param_by_name(g, "layers.1.weight");
    CHECK(rm_param_frozen(g, w0) && !rm_param_trainable(g, w0) &&
              !rm_param_frozen(g, rm_param_by_name(g, "layers.1.bn.running_var")),
          "frozen flags");
    CHECK(rm_freeze_params(g, NULL, "layers.2.*", &n) == RM_OK && n == 8, "train-only froze %d", n);
    CHECK(rm_param_freeze(g, w0) == RM_OK, "freezing twice");
    rm_options o;
    options(&o);
    rm_session *s = NULL;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "compile: %s", rm_graph_errmsg(g));
    CHECK(rm_param_freeze(g, rm_param_by_name(g, "layers.2.weight")) == RM_ERR_STATE, "freezing after compile");
    CHECK(s && rm_grad(s, w0) == NULL && rm_grad(s, rm_param_by_name(g, "layers.2.weight")) != NULL,
          "rm_grad of frozen and trainable");
    rm_session_free(s);
    rm_graph_free(g);
}

/* Step 0's gradients of every trainable parameter of the frozen run equal
 * the full run's; frozen ones have none; 4 more AdamW steps leave them as
 * they were. */
static void test_gradients(const char *model, const char *freeze) {
    rm_run_info full_ri, frozen_ri;
    config(&full_ri, model, NULL, NULL);
    config(&frozen_ri, model, freeze, NULL);
    rm_options o;
    options(&o);
    run a, b;
    if (!open_run(&a, &full_ri, &o, 0) || !open_run(&b, &frozen_ri, &o, 0)) return;
    float la, lb;
    CHECK(fill(&a, 0) == RM_OK && fill(&b, 0) == RM_OK && rm_step(a.s, 0, &la) == RM_OK &&
              rm_step(b.s, 0, &lb) == RM_OK && la == lb,
          "%s: step 0", model);
    int same = 1, nfrozen = 0;
    for (int i = 0; i < rm_param_count(b.g); i++) {
        rm_val v = rm_param_at(b.g, i);
        const float *gb = rm_grad(b.s, v), *ga = rm_grad(a.s, rm_param_at(a.g, i));
        if (rm_param_frozen(b.g, v)) {
            nfrozen++;
            same &= gb == NULL;
        } else if (rm_param_trainable(b.g, v)) {
            same &= gb && ga && memcmp(ga, gb, (size_t)rm_numel(b.g, v) * sizeof(float)) == 0;
        }
    }
    CHECK(nfrozen > 0 && same, "%s --freeze %s: trainable gradients differ from the full run's (%d frozen)", model,
          freeze, nfrozen);
    float *before = malloc(b.s->g->param_floats * sizeof(float));
    memcpy(before, b.s->params, b.s->g->param_floats * sizeof(float));
    CHECK(rm_optim_step(b.o, 1e-2f, NULL) == RM_OK && train(&b, 1, 5), "%s: training", model);
    int unchanged = 1, moved = 1;
    for (int i = 0; i < rm_param_count(b.g); i++) {
        rm_val v = rm_param_at(b.g, i);
        const size_t off = b.g->vals[v].param_off, bytes = (size_t)rm_numel(b.g, v) * sizeof(float);
        if (rm_param_frozen(b.g, v)) unchanged &= memcmp(before + off, b.s->params + off, bytes) == 0;
        else if (rm_param_trainable(b.g, v)) moved &= memcmp(before + off, b.s->params + off, bytes) != 0;
    }
    CHECK(unchanged && moved, "%s: frozen weights changed (%d) or trainable ones did not (%d)", model, !unchanged,
          !moved);
    /* the state: gradients and moments of the trainable parameters only */
    rm_memory_info m;
    rm_memory(b.s, &m);
    size_t train_bytes = 0;
    for (int i = 0; i < rm_param_count(b.g); i++) {
        rm_val v = rm_param_at(b.g, i);
        if (rm_param_trainable(b.g, v)) train_bytes += ((size_t)rm_numel(b.g, v) + 15) / 16 * 64;
    }
    CHECK(m.grad_bytes == train_bytes && m.trainable_bytes == train_bytes && m.param_bytes > train_bytes &&
              rm_optim_bytes(b.o) == 2 * train_bytes,
          "%s: grads %zu, moments %zu, trainable %zu of %zu bytes", model, m.grad_bytes, rm_optim_bytes(b.o),
          train_bytes, m.param_bytes);
    free(before);
    close_run(&a);
    close_run(&b);
}

/* The backward instructions in r's train program. */
static int backward_count(const run *r) {
    int n = 0;
    for (int i = 0; i < r->s->train.n_instrs; i++) n += r->s->train.instrs[i].kind == RM_INSTR_BACKWARD;
    return n;
}

static void test_pruned(void) {
    rm_run_info ri;
    rm_options o;
    options(&o);
    run full, head, base;
    config(&ri, "llama", NULL, NULL);
    ri.dropout = 0.0f;
    if (!open_run(&full, &ri, &o, 0)) return;
    /* only the head trains: its fused head-and-loss (rm_linear_ce) is all the backward there is */
    snprintf(ri.train_only, sizeof ri.train_only, "lm_head");
    if (!open_run(&head, &ri, &o, 0)) return;
    CHECK(backward_count(&head) == 1, "train-only lm_head: %d backward instructions (1 expected)",
          backward_count(&head));
    int grads = 0;
    for (int v = 0; v < head.g->n_vals; v++) grads += head.g->vals[v].kind == RM_VALUE_GRAD;
    CHECK(grads == 1, "train-only lm_head: %d activation gradients (the loss's expected)", grads);
    /* a frozen lm_head: dx still flows, no dW (the fused head reads its input
     * for dx too: it computes x W^T again) */
    ri.train_only[0] = '\0';
    snprintf(ri.freeze, sizeof ri.freeze, "lm_head,model.embed_tokens");
    if (!open_run(&base, &ri, &o, 0)) return;
    const rm_program *p = &base.s->train;
    int checked = 0;
    for (int i = 0; i < p->n_instrs; i++) {
        const rm_node *nd = &base.g->nodes[p->instrs[i].node];
        if (p->instrs[i].kind != RM_INSTR_BACKWARD || nd->op != RM_OP_LINEAR_CE ||
            strcmp(base.g->vals[nd->in[1]].name, "lm_head.weight") != 0)
            continue;
        checked = 1;
        CHECK(p->instrs[i].din_buf[0] >= 0 && p->instrs[i].din_buf[1] < 0,
              "frozen lm_head's backward computes no dx (%d) or a dW (%d)", p->instrs[i].din_buf[0],
              p->instrs[i].din_buf[1]);
    }
    CHECK(checked, "no backward of lm_head found");
    rm_plan_info pf, pb;
    rm_memory_info mf, mb;
    rm_plan(full.s, &pf);
    rm_plan(base.s, &pb);
    rm_memory(full.s, &mf);
    rm_memory(base.s, &mb);
    /* the head's dW (2 N C V of the backward's FLOPs) and the embedding's backward are gone */
    const double NCV2 = 2.0 * ri.batch * ri.context * ri.dim * ri.vocab;
    CHECK(pb.flops_forward == pf.flops_forward && pf.flops_backward - pb.flops_backward >= NCV2,
          "backward FLOPs %.0f frozen vs %.0f full (at least %.0f less expected)", pb.flops_backward,
          pf.flops_backward, NCV2);
    CHECK(mb.activation_bytes_planned <= mf.activation_bytes_planned, "activations %zu frozen vs %zu full",
          mb.activation_bytes_planned, mf.activation_bytes_planned);
    close_run(&full);
    close_run(&head);
    close_run(&base);
}

/* One frozen llama (dropout on) under every strategy, a budget, a limit,
 * fused, and with accumulated micro-batches: the same weights. */
static void test_strategies(void) {
    const char *freeze = "model.embed_tokens,model.layers.0,model.layers.1.mlp,lm_head";
    rm_run_info ri;
    config(&ri, "llama", freeze, NULL);
    rm_options o;
    options(&o);
    run ref;
    if (!open_run(&ref, &ri, &o, 0) || !train(&ref, 0, 3)) return;
    const char *strategies[] = {"blocks", "sqrt", "selective", "segments:2", "revolve:2"};
    for (int i = 0; i < 6; i++) {
        options(&o);
        if (i < 5) o.checkpoint = strategies[i];
        else o.budget_fraction = 0.75;
        run r;
        CHECK(open_run(&r, &ri, &o, 0) && train(&r, 0, 3) && same_params(&r, &ref), "frozen llama: %s differs from none",
              i < 5 ? strategies[i] : "a 75% budget");
        close_run(&r);
    }
    /* a limit: the least one that works, from the message of one too small */
    options(&o);
    o.limit_bytes = 1 << 16;
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    rm_run_build(&ri, g, &io, 0);
    CHECK(rm_compile(g, &o, &s) == RM_ERR_BUDGET, "64 KiB limit accepted");
    const char *least = strstr(rm_graph_errmsg(g), "least limit that works is ");
    double mib = least ? atof(least + strlen("least limit that works is ")) : 0;
    rm_graph_free(g);
    rm_limit_info l;
    o.limit_bytes = (int64_t)(mib * 1048576.0) + 1;
    run r;
    CHECK(mib > 0 && open_run(&r, &ri, &o, 0) && train(&r, 0, 3) && same_params(&r, &ref),
          "frozen llama at its least limit (%.2f MiB) differs", mib);
    rm_limit(r.s, &l);
    CHECK(l.grad_bytes == r.g->train_floats * 4 && l.optimizer_bytes == 2 * l.grad_bytes, "limit counts grads %zu, "
          "moments %zu for %zu trainable floats", l.grad_bytes, l.optimizer_bytes, r.g->train_floats);
    close_run(&r);
    options(&o);
    o.fuse_optimizer = 1;
    o.checkpoint = "sqrt";
    CHECK(open_run(&r, &ri, &o, 0) && train(&r, 0, 3) && same_params(&r, &ref), "frozen llama: fused differs");
    close_run(&r);
    /* 2 micro-batches of 2 rows: the gradients of the trainable parameters
     * as the unfrozen model's, bit for bit */
    rm_run_info half = ri, half_full;
    half.batch = 2;
    config(&half_full, "llama", NULL, NULL);
    half_full.batch = 2;
    options(&o);
    o.accumulate = 1;
    run fa, fb;
    if (open_run(&fa, &half, &o, 0) && open_run(&fb, &half_full, &o, 0)) {
        float l1, l2;
        int same = 1;
        for (int j = 0; j < 2; j++) {
            rm_micro m = {2 * j, 0.5f, j};
            same &= rm_data_fill_rows(fa.s, &fa.io, &runs_data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 5, 0, 4, 2 * j) == RM_OK &&
                    rm_data_fill_rows(fb.s, &fb.io, &runs_data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 5, 0, 4, 2 * j) == RM_OK &&
                    rm_step_micro(fa.s, 0, &m, &l1) == RM_OK && rm_step_micro(fb.s, 0, &m, &l2) == RM_OK;
        }
        for (int i = 0; same && i < rm_param_count(fa.g); i++) {
            rm_val v = rm_param_at(fa.g, i);
            if (rm_param_trainable(fa.g, v))
                same = memcmp(rm_grad(fa.s, v), rm_grad(fb.s, rm_param_at(fb.g, i)),
                              (size_t)rm_numel(fa.g, v) * 4) == 0;
        }
        CHECK(same, "accumulated micro-batches: frozen gradients differ from the full model's");
    }
    close_run(&fa);
    close_run(&fb);
    close_run(&ref);
}

/* Saved after 2 steps, rebuilt from the file's run and restored, 2 more
 * steps: the uninterrupted run's parameters and moments. */
static void test_state_file(void) {
    rm_run_info ri;
    config(&ri, "gpt", "transformer.wte,transformer.h.0", NULL);
    rm_options o;
    options(&o);
    run a, b, c;
    if (!open_run(&a, &ri, &o, 0) || !open_run(&b, &ri, &o, 0) || !train(&a, 0, 4) || !train(&b, 0, 2)) return;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/frozen.safetensors", tmpdir);
    CHECK(rm_save_run(b.s, b.o, path, &ri, 0, NULL, NULL, err, sizeof err) == RM_OK, "save: %s", err);
    rm_file *f = NULL;
    rm_run_info back;
    CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK && rm_file_run_info(f, &back, err, sizeof err) == RM_OK &&
              strcmp(back.freeze, ri.freeze) == 0 && back.train_only[0] == '\0',
          "run info: '%s'", err);
    int moments = 0, frozen_moments = 0;
    for (int i = 0; f && i < rm_file_tensor_count(f); i++) {
        rm_tensor_info t;
        rm_file_tensor(f, i, &t);
        if (strncmp(t.name, "optimizer.", 10) != 0) continue;
        moments++;
        frozen_moments += strstr(t.name, "transformer.wte") || strstr(t.name, "transformer.h.0.");
    }
    CHECK(moments > 0 && frozen_moments == 0, "%d moments, %d of frozen parameters", moments, frozen_moments);
    back.step = 2;
    if (open_run(&c, &back, &o, 0)) {
        CHECK(rm_file_restore(f, c.s, c.o, err, sizeof err) == RM_OK, "restore: %s", err);
        CHECK(train(&c, 2, 4) && same_params(&a, &c), "resumed frozen run differs");
        float *ma, *mc;
        rm_optim_state(a.o, &ma, NULL, NULL);
        rm_optim_state(c.o, &mc, NULL, NULL);
        CHECK(memcmp(ma, mc, a.g->train_floats * 4) == 0, "resumed moments differ");
    }
    rm_file_close(f);
    close_run(&a);
    close_run(&b);
    close_run(&c);
}

int main(void) {
    char err[256];
    if (check_tmpdir(tmpdir, sizeof tmpdir, "freeze")) return 1;
    static unsigned char text[6000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)("frozen weights, trained adapters. "[i % 34]);
    if (rm_data_from_bytes(&runs_data, "text", text, sizeof text, err, sizeof err) != RM_OK ||
        rm_data_split(&runs_data, 0.1, 8, 16, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    test_api();
    test_gradients("llama", "model.embed_tokens,model.layers.0,lm_head");
    test_gradients("gpt", "transformer.wte");
    test_gradients("mlp", "layers.1");
    test_pruned();
    test_strategies();
    test_state_file();
    rm_data_free(&runs_data);
    check_rmdir(tmpdir);
    return check_done("test_freeze");
}
