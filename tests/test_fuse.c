/* test_fuse.c: rm_options.fuse_optimizer, the optimizer inside the backward
 * pass. The weights, moments and update count after a few fused steps equal
 * the unfused run's bit for bit (AdamW with weight decay and SGD, dropout
 * on; GPT, U-ViT and the encoder-decoder; no recomputation, a strategy and
 * a memory budget); the planned arena holds the parameter gradients, and
 * fusion saves about their bytes minus what stays live (the tied
 * embedding's); a memory limit sees that saving; a fused run saved and
 * resumed continues exactly; each combination fusion cannot do is refused
 * with a message; a traced fused step shows its updates. */
#include "check.h"
#include "remat.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cfg {
    const char *model;      /* gpt | uvit | encdec */
    const char *checkpoint; /* NULL: none */
    double budget;          /* budget_fraction, 0: none */
    rm_optim_kind kind;
} cfg;

typedef struct run {
    rm_graph *g;
    rm_session *s;
    rm_optim *o;
    rm_model_io io;
    int encdec;
} run;

static rm_dataset data; /* bytes for gpt and uvit */

static void config(const cfg *c, rm_run_info *r) {
    rm_run_info_default(r);
    snprintf(r->model, sizeof r->model, "%s", c->model);
    r->layers = 4, r->dim = 32, r->heads = 2, r->context = 16, r->batch = 4, r->dropout = 0.1f;
    r->enc_layers = 1, r->dec_layers = 2;
    r->vocab = strcmp(c->model, "encdec") == 0 ? RM_ENCDEC_VOCAB : 256;
}

static void options(const cfg *c, int fused, rm_options *o) {
    rm_options_default(o);
    o->threads = 2;
    o->seed = 7;
    o->checkpoint = c->checkpoint;
    o->budget_fraction = c->budget;
    o->optim.kind = c->kind;
    o->optim.grad_clip = 0.0f; /* fusion cannot clip by the global norm */
    o->fuse_optimizer = fused;
}

/* The model of c (ri: its description, may be changed first). */
static rm_graph *graph_of(const rm_run_info *ri, rm_model_io *io) {
    rm_graph *g = rm_graph_new();
    if (g && rm_run_build(ri, g, io, 0) != RM_OK) {
        fprintf(stderr, "build: %s\n", rm_graph_errmsg(g));
        rm_graph_free(g);
        return NULL;
    }
    return g;
}

static rm_graph *model_of(const cfg *c, rm_model_io *io) {
    rm_run_info ri;
    config(c, &ri);
    return graph_of(&ri, io);
}

static int open_run(const cfg *c, int fused, run *r) {
    memset(r, 0, sizeof *r);
    rm_options o;
    options(c, fused, &o);
    r->encdec = strcmp(c->model, "encdec") == 0;
    if (!(r->g = model_of(c, &r->io))) return 0;
    if (rm_compile(r->g, &o, &r->s) != RM_OK) {
        fprintf(stderr, "compile %s: %s\n", c->model, rm_graph_errmsg(r->g));
        return 0;
    }
    return rm_optim_new(r->s, NULL, &r->o) == RM_OK;
}

static void close_run(run *r) {
    rm_optim_free(r->o);
    rm_session_free(r->s);
    rm_graph_free(r->g);
    memset(r, 0, sizeof *r);
}

static float lr_of(uint64_t step) { return 2e-2f / (float)(1 + step); } /* changes every step */

/* Steps [from, to): fused, the learning rate goes first; else after. */
static int train(run *r, int fused, uint64_t from, uint64_t to) {
    for (uint64_t k = from; k < to; k++) {
        rm_status st = r->encdec ? rm_seq2seq_fill(r->s, &r->io, NULL, 3, k)
                                 : rm_data_fill(r->s, &r->io, &data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 3, k);
        float loss;
        if (st == RM_OK && fused) st = rm_optim_set_lr(r->o, lr_of(k));
        if (st == RM_OK) st = rm_step(r->s, k, &loss);
        if (st == RM_OK && !fused) st = rm_optim_step(r->o, lr_of(k), NULL);
        if (st != RM_OK) {
            fprintf(stderr, "step %llu: %s\n", (unsigned long long)k, rm_session_errmsg(r->s));
            return 0;
        }
    }
    return 1;
}

/* Every parameter and moment of r, and the update count, against q's. */
static int same_state(run *r, run *q) {
    int same = 1;
    for (int i = 0; i < rm_param_count(r->g); i++) {
        rm_val v = rm_param_at(r->g, i), w = rm_param_at(q->g, i);
        same &= memcmp(rm_value_data(r->s, v), rm_value_data(q->s, w), (size_t)rm_numel(r->g, v) * 4) == 0;
    }
    float *m1, *v1, *m2, *v2;
    uint64_t t1, t2;
    rm_optim_state(r->o, &m1, &v1, &t1);
    rm_optim_state(q->o, &m2, &v2, &t2);
    rm_memory_info mi;
    rm_memory(r->s, &mi);
    same &= t1 == t2 && !m1 == !m2 && (!m1 || (memcmp(m1, m2, mi.trainable_bytes) == 0 && memcmp(v1, v2, mi.trainable_bytes) == 0));
    return same;
}

static void test_equal(const cfg *c) {
    run a, b;
    int ok = open_run(c, 0, &a) && open_run(c, 1, &b);
    CHECK(ok, "%s: open", c->model);
    if (ok) {
        ok = train(&a, 0, 0, 3) && train(&b, 1, 0, 3);
        CHECK(ok, "%s: train", c->model);
        const char *how = c->checkpoint ? c->checkpoint : c->budget > 0 ? "budget" : "none";
        const char *kind = c->kind == RM_OPTIM_SGD ? "sgd" : "adamw";
        CHECK(ok && same_state(&a, &b), "%s %s %s: the fused weights and moments differ from the unfused ones",
              c->model, how, kind);
        CHECK(ok && rm_grad(b.s, rm_param_at(b.g, 0)) == NULL && rm_grad(a.s, rm_param_at(a.g, 0)) != NULL,
              "%s: no flat gradient buffer under fusion", c->model);
        rm_memory_info ma, mb;
        rm_memory(a.s, &ma);
        rm_memory(b.s, &mb);
        CHECK(mb.activation_bytes_measured <= mb.activation_bytes_planned && mb.grad_bytes == 0 &&
                  mb.grad_arena_bytes < mb.param_bytes && ma.grad_arena_bytes == 0 && ma.grad_bytes == ma.param_bytes,
              "%s %s: measured %zu planned %zu grads %zu in the arena %zu", c->model, how,
              mb.activation_bytes_measured, mb.activation_bytes_planned, mb.grad_bytes, mb.grad_arena_bytes);
    }
    close_run(&a);
    close_run(&b);
}

/* The planned arena holds the gradients at their peak; fusion saves the
 * flat buffer minus them. A vocabulary-heavy GPT: the tied embedding's
 * gradient is most of what stays live. */
static void test_bytes(void) {
    const cfg c = {"gpt", NULL, 0, RM_OPTIM_ADAMW};
    rm_run_info ri;
    config(&c, &ri);
    ri.vocab = 256, ri.layers = 6, ri.dim = 64, ri.batch = 2;
    rm_memory_info m[2];
    for (int fused = 0; fused < 2; fused++) {
        rm_model_io io;
        rm_graph *g = graph_of(&ri, &io);
        rm_options o;
        options(&c, fused, &o);
        o.dry_run = 1;
        rm_session *s = NULL;
        CHECK(g && rm_compile(g, &o, &s) == RM_OK, "compile");
        rm_memory(s, &m[fused]);
        rm_session_free(s);
        rm_graph_free(g);
    }
    size_t wte = (size_t)ri.vocab * ri.dim * 4, saved = m[0].activation_bytes_planned + m[0].grad_bytes -
                                                      m[1].activation_bytes_planned;
    printf("planned: unfused %zu + flat gradients %zu, fused %zu (gradients at the peak %zu, tied embedding %zu): "
           "saved %zu\n", m[0].activation_bytes_planned, m[0].grad_bytes, m[1].activation_bytes_planned,
           m[1].grad_arena_bytes, wte, saved);
    CHECK(m[1].activation_bytes_planned > m[0].activation_bytes_planned, "the gradients are in the fused arena");
    CHECK(m[1].activation_bytes_planned <= m[0].activation_bytes_planned + m[1].grad_arena_bytes,
          "fused peak %zu <= unfused activations %zu + gradients live at it %zu", m[1].activation_bytes_planned,
          m[0].activation_bytes_planned, m[1].grad_arena_bytes);
    CHECK(saved >= m[0].grad_bytes - m[1].grad_arena_bytes && saved > m[0].grad_bytes / 2,
          "saved %zu of the %zu flat gradient bytes", saved, m[0].grad_bytes);
    CHECK(m[1].grad_arena_bytes >= wte && m[1].grad_arena_bytes < m[0].grad_bytes / 2,
          "gradients live at the peak %zu: the tied embedding's %zu and little more", m[1].grad_arena_bytes, wte);
}

/* A limit on the library's bytes: the least limit of a fused session is
 * below the unfused one by about the gradients it does not hold. */
static double least_limit(int fused) {
    const cfg c = {"gpt", NULL, 0, RM_OPTIM_ADAMW};
    rm_model_io io;
    rm_graph *g = model_of(&c, &io);
    rm_options o;
    options(&c, fused, &o);
    o.limit_bytes = 1 << 20; /* far too small: refused with the least limit */
    rm_session *s = NULL;
    double least = 0;
    if (g && rm_compile(g, &o, &s) == RM_ERR_BUDGET) {
        const char *msg = rm_graph_errmsg(g), *at = strstr(msg, "the least limit that works is ");
        if (at) least = atof(at + strlen("the least limit that works is "));
        if (fused) CHECK(strstr(msg, "gradients 0.00 (fused: in the arena)") != NULL, "%s", msg);
        /* that least limit works, and the breakdown counts no flat gradients */
        o.limit_bytes = (int64_t)(least * 1048576.0);
        CHECK(rm_compile(g, &o, &s) == RM_OK, "least limit %.2f MiB: %s", least, rm_graph_errmsg(g));
        rm_limit_info l;
        rm_limit(s, &l);
        CHECK(l.grad_bytes == (fused ? 0 : l.param_bytes) && l.arena_bytes <= l.activation_bytes,
              "limit breakdown: gradients %zu, arena %zu of %zu", l.grad_bytes, l.arena_bytes, l.activation_bytes);
    }
    rm_session_free(s);
    rm_graph_free(g);
    return least * 1048576.0;
}

static void test_limit(void) {
    double unfused = least_limit(0), fused = least_limit(1);
    printf("least limit: unfused %.0f, fused %.0f bytes\n", unfused, fused);
    CHECK(unfused > 0 && fused > 0 && fused < unfused, "fusion lowers the least limit: %.0f vs %.0f", fused, unfused);
    /* GPT-2 124M's breakdown, four-digit MiB figures and all, is whole (it
     * is refused before anything is allocated) */
    const cfg c = {"gpt", NULL, 0, RM_OPTIM_ADAMW};
    rm_run_info ri;
    config(&c, &ri);
    ri.layers = 12, ri.dim = 768, ri.heads = 12, ri.context = 64, ri.vocab = 50257;
    rm_model_io io;
    rm_graph *g = graph_of(&ri, &io);
    rm_options o;
    options(&c, 1, &o);
    o.limit_bytes = (int64_t)1 << 30;
    rm_session *s = NULL;
    CHECK(g && rm_compile(g, &o, &s) == RM_ERR_BUDGET, "1 GiB for GPT-2 124M refused");
    const char *msg = g ? rm_graph_errmsg(g) : "", *at = strstr(msg, "the least limit that works is ");
    size_t len = strlen(msg);
    printf("breakdown (%zu chars): %s\n", len, msg);
    CHECK(at && atof(at + strlen("the least limit that works is ")) > 1500 && len > 4 &&
              strcmp(msg + len - 4, " MiB") == 0, "the message is cut: %s", msg);
    rm_session_free(s);
    rm_graph_free(g);
}

/* Fused steps saved after 2 and resumed give the 4-step run's state; an
 * unfused file resumed fused continues as if unfused. */
static void test_resume(void) {
    const cfg c = {"gpt", "blocks", 0, RM_OPTIM_ADAMW};
    char path[256], err[512];
    snprintf(path, sizeof path, "/tmp/test_fuse.%d.safetensors", (int)getpid());
    for (int saver_fused = 0; saver_fused < 2; saver_fused++) {
        run whole, half, rest;
        int ok = open_run(&c, 1, &whole) && open_run(&c, saver_fused, &half) && open_run(&c, 1, &rest);
        ok = ok && train(&whole, 1, 0, 4) && train(&half, saver_fused, 0, 2);
        ok = ok && rm_save_state(half.s, half.o, path, 0, NULL, NULL, err, sizeof err) == RM_OK;
        ok = ok && rm_load_state(rest.s, rest.o, path, err, sizeof err) == RM_OK && train(&rest, 1, 2, 4);
        CHECK(ok, "resume: %s", err);
        CHECK(ok && same_state(&whole, &rest), "a %s run saved at step 2 and resumed fused differs from 4 fused steps",
              saver_fused ? "fused" : "unfused");
        close_run(&whole), close_run(&half), close_run(&rest);
    }
    unlink(path);
}

static void test_refusals(void) {
    const cfg c = {"gpt", NULL, 0, RM_OPTIM_ADAMW};
    rm_model_io io;
    rm_graph *g = model_of(&c, &io);
    rm_options o;
    options(&c, 1, &o);
    o.optim.grad_clip = 1.0f;
    rm_session *s = NULL;
    CHECK(g != NULL, "build");
    if (!g) return;
    CHECK(rm_compile(g, &o, &s) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "grad_clip to 0"), "clipping: %s",
          rm_graph_errmsg(g));
    o.optim.grad_clip = 0.0f;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "compile: %s", rm_graph_errmsg(g));
    float loss;
    rm_data_fill(s, &io, &data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 3, 0);
    CHECK(rm_step(s, 0, &loss) == RM_ERR_STATE && strstr(rm_session_errmsg(s), "rm_optim_new"), "no optimizer: %s",
          rm_session_errmsg(s));
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    rm_optim *opt = NULL, *second = NULL;
    CHECK(rm_optim_new(s, &oc, &opt) == RM_ERR_ARG && !opt && strstr(rm_session_errmsg(s), "grad_clip"),
          "clipping optimizer: %s", rm_session_errmsg(s));
    CHECK(rm_optim_new(s, NULL, &opt) == RM_OK, "optimizer: %s", rm_session_errmsg(s));
    CHECK(rm_optim_new(s, NULL, &second) == RM_ERR_STATE && !second, "second optimizer: %s", rm_session_errmsg(s));
    CHECK(rm_step(s, 0, &loss) == RM_ERR_STATE && strstr(rm_session_errmsg(s), "rm_optim_set_lr"), "no lr: %s",
          rm_session_errmsg(s));
    CHECK(rm_optim_set_lr(opt, NAN) == RM_ERR_ARG, "NaN lr");
    CHECK(rm_optim_set_lr(opt, 1e-3f) == RM_OK && rm_step(s, 0, &loss) == RM_OK, "step: %s", rm_session_errmsg(s));
    CHECK(rm_optim_step(opt, 1e-3f, NULL) == RM_ERR_STATE && strstr(rm_session_errmsg(s), "rm_optim_set_lr"),
          "rm_optim_step fused: %s", rm_session_errmsg(s));
    rm_micro m = {0, 0.5f, 1};
    CHECK(rm_step_micro(s, 1, &m, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), "accumulate"),
          "accumulation: %s", rm_session_errmsg(s));
    m.accumulate = 0; /* one micro-batch that does not accumulate is a step */
    CHECK(rm_step_micro(s, 1, &m, &loss) == RM_OK, "micro-batch: %s", rm_session_errmsg(s));
    /* a divergent step fails after its update: a NaN learning rate cannot be given, an inf weight can */
    float *w = rm_value_data(s, rm_param_at(g, 0));
    w[0] = INFINITY;
    CHECK(rm_step(s, 2, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), "diverged"), "divergence: %s",
          rm_session_errmsg(s));
    /* freeing the optimizer detaches it */
    rm_optim_free(opt);
    CHECK(rm_step(s, 3, &loss) == RM_ERR_STATE, "detached: %s", rm_session_errmsg(s));
    rm_session_free(s);
    /* an unfused optimizer takes no rm_optim_set_lr */
    options(&c, 0, &o);
    CHECK(rm_compile(g, &o, &s) == RM_OK && rm_optim_new(s, NULL, &opt) == RM_OK, "unfused");
    CHECK(rm_optim_set_lr(opt, 1e-3f) == RM_ERR_STATE, "set_lr unfused: %s", rm_session_errmsg(s));
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
}

/* A traced fused step: "optimizer" events inside the step. */
static void test_trace(void) {
    const cfg c = {"gpt", "sqrt", 0, RM_OPTIM_SGD};
    run r;
    char path[256], err[256];
    snprintf(path, sizeof path, "/tmp/test_fuse.%d.json", (int)getpid());
    int ok = open_run(&c, 1, &r) && rm_trace_enable(r.s, 1) == RM_OK && train(&r, 1, 0, 2) &&
             rm_trace_write(r.s, path, 0, NULL, NULL, err, sizeof err) == RM_OK;
    CHECK(ok, "trace: %s", err);
    char *text = NULL;
    size_t len = 0;
    int n = 0;
    if (ok && rm_read_file(path, 1 << 26, &text, &len, err, sizeof err) == RM_OK)
        for (const char *p = text; (p = strstr(p, "\"cat\":\"optimizer\"")); p++) n++;
    CHECK(n >= 2 * 4, "optimizer events in the traced step: %d", n); /* at least the layers' updates */
    free(text);
    unlink(path);
    close_run(&r);
}

int main(void) {
    char err[256];
    unsigned char text[6000];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)("the quick brown fox "[i % 20] + (i / 97) % 3);
    if (rm_data_from_bytes(&data, "text", text, sizeof text, err, sizeof err) != RM_OK ||
        rm_data_split(&data, 0.0, 4, 16, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    static const cfg cases[] = {
        {"gpt", NULL, 0, RM_OPTIM_ADAMW},        {"gpt", NULL, 0, RM_OPTIM_SGD},
        {"gpt", "blocks", 0, RM_OPTIM_ADAMW},    {"gpt", "revolve:2", 0, RM_OPTIM_SGD},
        {"gpt", NULL, 0.5, RM_OPTIM_ADAMW},      {"uvit", NULL, 0, RM_OPTIM_ADAMW},
        {"uvit", "blocks", 0, RM_OPTIM_SGD},     {"uvit", NULL, 0.6, RM_OPTIM_ADAMW},
        {"encdec", NULL, 0, RM_OPTIM_ADAMW},     {"encdec", "segments:2", 0, RM_OPTIM_ADAMW},
        {"encdec", NULL, 0.6, RM_OPTIM_SGD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_equal(&cases[i]);
    test_bytes();
    test_limit();
    test_resume();
    test_refusals();
    test_trace();
    rm_data_free(&data);
    return check_done("test_fuse");
}
