/* train.c: a complete training program on libremat, in the style of llm.c's
 * train_gpt2.c: a model built from remat's op builders, data, a learning-rate
 * schedule, a memory budget, and a training state saved and resumed.
 *
 *   train STATE.safetensors STEPS [STOP]
 *
 * trains a small residual MLP language model on the library's built-in
 * corpus (its own docs and sources, one token per byte) up to step STEPS,
 * and writes the whole training state to STATE at the end, or after step
 * STOP when given (as if interrupted). If STATE exists, training resumes
 * from it: a run stopped and resumed ends with the same bits as one that
 * never stopped. Only remat.h is used. */
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The model: next-byte prediction from one byte, through L residual blocks
 *   x = wte[token]                                  (B,T,C)
 *   x = x + W2 gelu(W1 layernorm(x))                L times, W1 (4C,C), W2 (C,4C)
 *   loss = softmax_ce(Wout layernorm(x), target)    Wout (V,C)
 * Each block is a stage: the unit the recompute planner keeps or rebuilds. */
typedef struct config {
    int layers, dim, vocab, batch, context;
} config;

static rm_status build(rm_graph *g, const config *c, rm_model_io *io) {
    const int64_t C = c->dim, V = c->vocab, H = 4 * C;
    const int64_t bt[2] = {c->batch, c->context}, wte_shape[2] = {V, C};
    const int64_t vec[1] = {C}, up[2] = {H, C}, down[2] = {C, H}, hb[1] = {H}, out[2] = {V, C};
    char name[64];
    memset(io, -1, sizeof *io);
    rm_stage_begin(g, "embed");
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);
    rm_val x = rm_embedding(g, io->tokens, rm_param(g, "wte", 2, wte_shape, RM_INIT_NORMAL, 0.02f, 1));
    for (int l = 0; l < c->layers; l++) {
        snprintf(name, sizeof name, "block.%d", l);
        rm_stage_begin(g, name);
#define P(suffix, nd, shape, init, std, decay) \
    (snprintf(name, sizeof name, "block.%d." suffix, l), rm_param(g, name, nd, shape, init, std, decay))
        rm_val h = rm_layernorm(g, x, P("ln.w", 1, vec, RM_INIT_ONES, 0, 0), P("ln.b", 1, vec, RM_INIT_ZEROS, 0, 0));
        h = rm_gelu(g, rm_linear(g, h, P("up.w", 2, up, RM_INIT_NORMAL, 0.02f, 1), P("up.b", 1, hb, RM_INIT_ZEROS, 0, 0)));
        h = rm_linear(g, h, P("down.w", 2, down, RM_INIT_NORMAL, 0.02f, 1), P("down.b", 1, vec, RM_INIT_ZEROS, 0, 0));
#undef P
        x = rm_add(g, x, h); /* the residual stream */
    }
    rm_stage_begin(g, "head");
    rm_val h = rm_layernorm(g, x, rm_param(g, "ln_f.w", 1, vec, RM_INIT_ONES, 0, 0),
                            rm_param(g, "ln_f.b", 1, vec, RM_INIT_ZEROS, 0, 0));
    io->logits = rm_linear(g, h, rm_param(g, "head.w", 2, out, RM_INIT_NORMAL, 0.02f, 1), -1);
    io->loss = rm_softmax_ce(g, io->logits, io->targets);
    return rm_set_loss(g, io->loss); /* the first builder error, if any, sticks: checked here */
}

/* What the run is: a fresh one, or the one saved in `state` (then *resume
 * stays open until its state is loaded into the session). */
static int open_run(const char *state, int steps, config *c, rm_run_info *run, rm_file **resume) {
    char err[512];
    rm_run_info_default(run);
    *resume = NULL;
    if (access(state, F_OK) != 0) {
        snprintf(run->model, sizeof run->model, "example-mlp");
        run->vocab = c->vocab, run->batch = c->batch, run->context = c->context;
        run->seed = 42;
        run->lr = (rm_lr_schedule){RM_LR_COSINE, 3e-3f, 5, steps}; /* warmup 5, then cosine to lr/10 */
        return 0;
    }
    int present = 0;
    if (rm_file_open(state, resume, err, sizeof err) != RM_OK ||
        rm_file_verify(*resume, &present, NULL, err, sizeof err) != RM_OK ||
        rm_file_run_info(*resume, run, err, sizeof err) != RM_OK) {
        fprintf(stderr, "train: %s\n", err);
        return 1;
    }
    const char *L = rm_file_meta(*resume, "example_layers"), *D = rm_file_meta(*resume, "example_dim");
    if (!present || !L || !D) {
        fprintf(stderr, "train: '%s' was not written by this program\n", state);
        return 1;
    }
    c->layers = atoi(L), c->dim = atoi(D), c->batch = run->batch, c->context = run->context;
    printf("resuming '%s' at step %llu\n", state, (unsigned long long)run->step);
    return 0;
}

/* The model, compiled to fit 60% of the activation memory that keeping
 * everything would take: the session plans what to recompute. */
/* resume (NULL-able): the file the session is then loaded from. Its
 * parameters are checked against the model before it is allocated, and
 * not drawn (rm_file_mark_loaded): the load writes them. */
static int compile(const config *c, const rm_run_info *run, rm_file *resume, rm_graph **g, rm_model_io *io,
                   rm_session **s) {
    rm_options o;
    rm_options_default(&o);
    o.seed = run->seed;
    o.budget_fraction = 0.6;
    o.optim = run->optim; /* the session knows its optimizer */
    *g = rm_graph_new();
    *s = NULL;
    char err[512];
    if (!*g || build(*g, c, io) != RM_OK) {
        fprintf(stderr, "train: %s\n", rm_graph_errmsg(*g));
        return 1;
    }
    if (resume && rm_file_check(resume, *g, err, sizeof err) != RM_OK) {
        fprintf(stderr, "train: %s\n", err);
        return 1;
    }
    if (resume) rm_file_mark_loaded(resume, *g, NULL); /* f and g are valid: it cannot fail */
    if (rm_compile(*g, &o, s) != RM_OK) {
        fprintf(stderr, "train: %s\n", rm_graph_errmsg(*g));
        return 1;
    }
    rm_memory_info m;
    rm_plan_info p;
    rm_memory(*s, &m);
    rm_plan(*s, &p);
    printf("activations: %.1f KiB planned, %.1f KiB to keep everything; %.0f%% more FLOPs recomputed\n",
           m.activation_bytes_planned / 1024.0, p.store_all_bytes / 1024.0, 100 * p.predicted_overhead);
    return 0;
}

/* The loop, from run->step to `stop`. Batch k is a pure function of
 * (seed, k): nothing about the data needs saving but the position. */
static rm_status train(rm_session *s, rm_optim *opt, const rm_model_io *io, const rm_dataset *data,
                       rm_run_info *run, uint64_t stop) {
    rm_status st = RM_OK;
    for (uint64_t step = run->step; step < stop && st == RM_OK; step++) {
        float loss;
        st = rm_data_fill(s, io, data, RM_DATA_TRAIN, run->sampler, run->seed, run->data_position);
        if (st == RM_OK) st = rm_step(s, step, &loss);
        if (st == RM_OK) st = rm_optim_step(opt, rm_lr_at(&run->lr, step), NULL);
        if (st != RM_OK) break;
        run->step = step + 1, run->data_position++;
        if (run->step % 5 == 0) printf("step %llu: loss %.4f\n", (unsigned long long)run->step, loss);
    }
    float val;
    if (st == RM_OK) st = rm_evaluate(s, io, data, 8, &val);
    if (st == RM_OK) printf("step %llu: validation loss %.4f\n", (unsigned long long)run->step, val);
    return st;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s STATE.safetensors STEPS [STOP]\n", argv[0]);
        return 2;
    }
    const char *state = argv[1];
    int steps = atoi(argv[2]), stop = argc > 3 ? atoi(argv[3]) : steps;
    config c = {.layers = 3, .dim = 32, .vocab = 256, .batch = 4, .context = 16};
    rm_run_info run;
    rm_file *resume;
    rm_dataset data = {0};
    rm_graph *g = NULL;
    rm_model_io io;
    rm_session *s = NULL;
    rm_optim *opt = NULL;
    char err[512] = "";
    int rc = open_run(state, steps, &c, &run, &resume);
    run.lr.steps = steps;
    /* Data: the corpus, its last val_fraction (10%) held out for evaluation. */
    if (!rc && (rm_data_load_corpus(&data, err, sizeof err) != RM_OK ||
                rm_data_split(&data, run.val_fraction, c.batch, c.context, err, sizeof err) != RM_OK))
        rc = 1;
    snprintf(run.data, sizeof run.data, "%s", data.name);
    run.data_tokens = data.n;
    if (!rc) rc = compile(&c, &run, resume, &g, &io, &s);
    /* A resumed run loads parameters, AdamW moments and the update count. */
    if (!rc && rm_optim_new(s, NULL, &opt) != RM_OK) rc = 1;
    if (!rc && resume && rm_file_restore(resume, s, opt, err, sizeof err) != RM_OK) rc = 1;
    rm_file_close(resume);
    if (!rc && train(s, opt, &io, &data, &run, (uint64_t)(stop < steps ? stop : steps)) != RM_OK) rc = 1;
    if (rc && !*err && s) snprintf(err, sizeof err, "%s", rm_session_errmsg(s));
    /* The training state, with our model's shape as metadata of our own. */
    char vals[2][16];
    const char *keys[2] = {"example_layers", "example_dim"}, *values[2] = {vals[0], vals[1]};
    snprintf(vals[0], sizeof vals[0], "%d", c.layers), snprintf(vals[1], sizeof vals[1], "%d", c.dim);
    if (!rc && rm_save_run(s, opt, state, &run, 2, keys, values, err, sizeof err) != RM_OK) rc = 1;
    if (!rc) printf("saved '%s' at step %llu\n", state, (unsigned long long)run.step);
    else if (*err) fprintf(stderr, "train: %s\n", err); /* open_run and compile say their own */
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
    rm_data_free(&data);
    return rc;
}
