/* test_engine.c: the engine end to end on small models: a step program is
 * built, the arena is planned, training lowers the loss, gradients of whole
 * models match finite differences, and no freed buffer is read. */
#include "check.h"
#include "exec/exec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill_tokens(rm_session *s, const rm_model_io *io, int B, int T, int V, int salt) {
    int32_t *tok = rm_value_data(s, io->tokens), *tgt = rm_value_data(s, io->targets);
    /* a learnable pattern: the next token is (token * 3 + 1) mod V */
    for (int b = 0; b < B; b++) {
        int t0 = (b * 7 + salt) % V;
        for (int t = 0; t < T; t++) {
            tok[b * T + t] = t0;
            t0 = (t0 * 3 + 1) % V;
            tgt[b * T + t] = t0;
        }
    }
}

static rm_session *gpt_session(rm_graph **g, rm_model_io *io, float dropout, const char *ck) {
    *g = rm_graph_new();
    rm_gpt_config c = {.layers = 2, .dim = 32, .heads = 4, .context = 16, .vocab = 32, .batch = 4, .dropout = dropout};
    CHECK(rm_gpt_build(*g, &c, io) == RM_OK, "gpt build: %s", rm_graph_errmsg(*g));
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.checkpoint = ck;
    rm_session *s = NULL;
    CHECK(rm_compile(*g, &o, &s) == RM_OK, "compile: %s", rm_graph_errmsg(*g));
    return s;
}

static void test_gpt_trains(void) {
    rm_graph *g;
    rm_model_io io;
    rm_session *s = gpt_session(&g, &io, 0.0f, "none");
    if (!s) return;
    s->poison = 1; /* a read of a freed buffer would turn the loss into NaN */
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    rm_optim *opt;
    CHECK(rm_optim_new(s, &oc, &opt) == RM_OK, "optim");
    float first = 0, loss = 0;
    for (int step = 0; step < 60; step++) {
        fill_tokens(s, &io, 4, 16, 32, step);
        CHECK(rm_step(s, (uint64_t)step, &loss) == RM_OK, "step");
        if (step == 0) first = loss;
        rm_optim_step(opt, 3e-3f, NULL);
    }
    CHECK(isfinite(first) && fabsf(first - logf(32.0f)) < 0.3f, "initial loss %g should be near ln(32)", first);
    CHECK(loss < 0.5f, "gpt loss after 60 steps is %g, expected < 0.5", loss);
    rm_memory_info m;
    rm_memory(s, &m);
    CHECK(m.activation_bytes_measured == m.activation_bytes_planned, "measured %zu != planned %zu",
          m.activation_bytes_measured, m.activation_bytes_planned);
    CHECK(m.activation_arena_bytes >= m.activation_bytes_planned, "arena smaller than peak");
    CHECK(m.activation_arena_bytes <= m.activation_bytes_planned * 13 / 10, "arena %zu far above peak %zu",
          m.activation_arena_bytes, m.activation_bytes_planned);
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
}

/* Whole-model gradient check: central differences of the loss against the
 * analytic parameter gradients, on a few coordinates of every parameter.
 * The loss is evaluated in fp32, so with h = 1e-2 the difference quotient
 * carries ~1e-7/1e-2 = 1e-5 absolute rounding error and O(h^2) truncation. */
static void test_gpt_gradcheck(void) {
    rm_graph *g;
    rm_model_io io;
    rm_session *s = gpt_session(&g, &io, 0.0f, "none");
    if (!s) return;
    fill_tokens(s, &io, 4, 16, 32, 5);
    float loss;
    rm_step(s, 0, &loss);
    float *grads = malloc(g->train_floats * sizeof(float));
    memcpy(grads, s->grads, g->train_floats * sizeof(float));
    int bad = 0, checked = 0;
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *v = &g->vals[g->params[i]];
        for (int t = 0; t < 3; t++) {
            size_t e = v->param_off + (size_t)((t * 7919) % v->numel);
            float *w = s->params + e, keep = *w, h = 1e-2f, lp, lm;
            *w = keep + h;
            rm_forward(s, &lp);
            *w = keep - h;
            rm_forward(s, &lm);
            *w = keep;
            double num = ((double)lp - lm) / (2.0 * h), ana = grads[e];
            double err = fabs(num - ana) / (fabs(num) + fabs(ana) + 1e-3);
            if (err > 2e-2) {
                bad++;
                fprintf(stderr, "  %s[%zu]: numeric %g analytic %g\n", v->name, e - v->param_off, num, ana);
            }
            checked++;
        }
    }
    CHECK(bad == 0, "%d of %d whole-GPT gradient coordinates disagree with finite differences", bad, checked);
    free(grads);
    rm_session_free(s);
    rm_graph_free(g);
}

static void test_mlp_trains(void) {
    rm_graph *g = rm_graph_new();
    rm_mlp_config c;
    memset(&c, 0, sizeof c);
    c.context = 8;
    c.vocab = 16;
    c.batch = 16;
    c.n_widths = 3;
    c.widths[0] = 64, c.widths[1] = 128, c.widths[2] = 32;
    rm_model_io io;
    CHECK(rm_mlp_build(g, &c, &io) == RM_OK, "mlp build: %s", rm_graph_errmsg(g));
    rm_session *s;
    rm_options o;
    rm_options_default(&o);
    CHECK(rm_compile(g, &o, &s) == RM_OK, "compile: %s", rm_graph_errmsg(g));
    s->poison = 1;
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    rm_optim *opt;
    rm_optim_new(s, &oc, &opt);
    float loss = 0;
    for (int step = 0; step < 150; step++) {
        float *x = rm_value_data(s, io.features);
        int32_t *y = rm_value_data(s, io.targets);
        for (int b = 0; b < 16; b++) {
            int t0 = (b + step * 5) % 16, sum = 0;
            for (int t = 0; t < 8; t++) {
                int tok = (t0 + t * 3) % 16;
                x[b * 8 + t] = (float)tok / 15.0f;
                sum += tok;
            }
            y[b] = (t0 + 8 * 3) % 16; /* the next token of the pattern */
            (void)sum;
        }
        rm_step(s, (uint64_t)step, &loss);
        rm_optim_step(opt, 3e-3f, NULL);
    }
    CHECK(loss < 0.5f, "mlp loss after 150 steps is %g, expected < 0.5", loss);
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
}

static void test_bad_graphs(void) {
    rm_graph *g = rm_graph_new();
    int64_t s2[2] = {4, 8}, w[2] = {3, 5};
    rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, s2);
    rm_val wt = rm_param(g, "w", 2, w, RM_INIT_NORMAL, 0.1f, 1);
    CHECK(rm_linear(g, x, wt, -1) == -1, "mismatched linear must fail");
    CHECK(rm_graph_status(g) == RM_ERR_ARG, "status is RM_ERR_ARG");
    CHECK(strstr(rm_graph_errmsg(g), "linear") != NULL, "message names the op: %s", rm_graph_errmsg(g));
    rm_session *s;
    CHECK(rm_compile(g, NULL, &s) == RM_ERR_ARG && s == NULL, "compile refuses a failed graph");
    rm_graph_free(g);

    g = rm_graph_new();
    rm_gpt_config c = {.layers = 2, .dim = 30, .heads = 4, .context = 16, .vocab = 32, .batch = 4, .dropout = 0.0f}; /* 30 not divisible by 4 */
    rm_model_io io;
    CHECK(rm_gpt_build(g, &c, &io) == RM_ERR_ARG, "dim %% heads must be checked");
    rm_graph_free(g);

    g = rm_graph_new();
    rm_options o;
    rm_options_default(&o);
    o.checkpoint = "bogus";
    rm_gpt_config c2 = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 16, .batch = 2, .dropout = 0.0f};
    rm_gpt_build(g, &c2, &io);
    CHECK(rm_compile(g, &o, &s) == RM_ERR_ARG, "unknown strategy must fail");
    CHECK(strstr(rm_graph_errmsg(g), "bogus") != NULL, "message names the strategy: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
}

int main(void) {
    test_bad_graphs();
    test_gpt_gradcheck();
    test_gpt_trains();
    test_mlp_trains();
    return check_done("test_engine");
}
