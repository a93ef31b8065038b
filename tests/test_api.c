/* test_api.c: the training-loop API of remat.h, used as a client would
 * (this file includes remat.h only): version, learning-rate schedules, data
 * from memory, batches written into a session, evaluation, and training-state
 * files that resume a run bit for bit. */
#include "remat.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_version(void) {
    CHECK(strcmp(rm_version(), RM_VERSION) == 0, "rm_version %s", rm_version());
}

static void test_lr(void) {
    rm_lr_schedule c = {RM_LR_CONSTANT, 0.5f, 0, 10};
    CHECK(rm_lr_at(&c, 0) == 0.5f && rm_lr_at(&c, 9) == 0.5f, "constant");
    rm_lr_schedule w = {RM_LR_CONSTANT, 1.0f, 4, 10};
    CHECK(rm_lr_at(&w, 0) == 0.25f && rm_lr_at(&w, 3) == 1.0f && rm_lr_at(&w, 7) == 1.0f, "warmup");
    rm_lr_schedule k = {RM_LR_COSINE, 1.0f, 2, 12};
    CHECK(rm_lr_at(&k, 2) == 1.0f, "cosine starts at lr: %g", (double)rm_lr_at(&k, 2));
    CHECK(fabsf(rm_lr_at(&k, 7) - 0.55f) < 1e-6f, "cosine midpoint: %g", (double)rm_lr_at(&k, 7));
    CHECK(fabsf(rm_lr_at(&k, 12) - 0.1f) < 1e-6f, "cosine ends at lr/10: %g", (double)rm_lr_at(&k, 12));
    CHECK(rm_lr_at(NULL, 3) == 0.0f, "NULL schedule");
}

static void test_tokens(void) {
    rm_dataset d;
    char err[256];
    int32_t bad[] = {1, 2, -3, 4};
    CHECK(rm_data_from_tokens(&d, "mem", bad, 4, err, sizeof err) == RM_ERR_ARG &&
              strstr(err, "token -3 at position 2"), "negative token: %s", err);
    rm_data_free(&d);
    int32_t ok[] = {5, 1, 7, 3};
    CHECK(rm_data_from_tokens(&d, "mem", ok, 4, err, sizeof err) == RM_OK && d.n == 4 && d.max_id == 7 &&
              d.tokens != ok && d.tokens[2] == 7 && d.format == RM_DATA_TOKENS, "tokens copied: %s", err);
    CHECK(rm_data_check_vocab(&d, 7, err, sizeof err) == RM_ERR_ARG && strstr(err, "vocab of 8"), "%s", err);
    rm_data_free(&d);
}

typedef struct run {
    rm_graph *g;
    rm_session *s;
    rm_optim *o;
    rm_model_io io;
} run;

static rm_status run_open(run *r, const rm_run_info *info) {
    memset(r, 0, sizeof *r);
    r->g = rm_graph_new();
    rm_status st = rm_run_build(info, r->g, &r->io, 0);
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.seed = info->seed;
    o.checkpoint = "blocks";
    if (st == RM_OK) st = rm_compile(r->g, &o, &r->s);
    if (st == RM_OK) st = rm_optim_new(r->s, &info->optim, &r->o);
    return st;
}

static void run_close(run *r) {
    rm_optim_free(r->o);
    rm_session_free(r->s);
    rm_graph_free(r->g);
}

/* Steps [from, to) of the run info describes. */
static rm_status run_steps(run *r, const rm_run_info *info, const rm_dataset *d, uint64_t from, uint64_t to) {
    rm_status st = RM_OK;
    for (uint64_t k = from; k < to && st == RM_OK; k++) {
        float loss;
        st = rm_data_fill(r->s, &r->io, d, RM_DATA_TRAIN, info->sampler, info->seed, k);
        if (st == RM_OK) st = rm_step(r->s, k, &loss);
        if (st == RM_OK) st = rm_optim_step(r->o, rm_lr_at(&info->lr, k), NULL);
    }
    return st;
}

static size_t param_bytes(const run *r) {
    rm_memory_info m;
    rm_memory(r->s, &m);
    return m.param_bytes;
}

static void test_state_roundtrip(const char *dir) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/state.safetensors", dir);
    rm_run_info info;
    rm_run_info_default(&info);
    info.layers = 2, info.dim = 16, info.heads = 2, info.context = 8, info.batch = 2, info.dropout = 0.1f;
    info.lr = (rm_lr_schedule){RM_LR_COSINE, 3e-3f, 2, 8};
    unsigned char text[600];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)("abcdefgh remat "[i % 15] + (i % 7 == 0));
    rm_dataset d;
    CHECK(rm_data_from_bytes(&d, "text", text, sizeof text, err, sizeof err) == RM_OK, "%s", err);
    CHECK(rm_data_split(&d, 0.2, info.batch, info.context, err, sizeof err) == RM_OK, "%s", err);

    /* uninterrupted: 8 steps */
    run a;
    CHECK(run_open(&a, &info) == RM_OK, "open: %s", rm_graph_errmsg(a.g));
    CHECK(run_steps(&a, &info, &d, 0, 8) == RM_OK, "steps: %s", rm_session_errmsg(a.s));
    float eval = NAN, again = NAN;
    CHECK(rm_evaluate(a.s, &a.io, &d, 0, &eval) == RM_OK && isfinite(eval), "eval: %s", rm_session_errmsg(a.s));
    CHECK(rm_evaluate(a.s, &a.io, &d, 0, &again) == RM_OK && again == eval, "evaluation is reproducible");

    /* interrupted after 3 steps: save, reopen in a new session, resume */
    run b;
    CHECK(run_open(&b, &info) == RM_OK, "open b");
    CHECK(run_steps(&b, &info, &d, 0, 3) == RM_OK, "steps b");
    info.step = 3, info.data_position = 3, info.data_tokens = d.n;
    const char *keys[] = {"my_note"}, *vals[] = {"hello"}, *clash[] = {"lr"};
    CHECK(rm_save_run(b.s, b.o, path, &info, 1, clash, vals, err, sizeof err) == RM_ERR_ARG, "key clash");
    CHECK(rm_save_run(b.s, b.o, path, &info, 1, keys, vals, err, sizeof err) == RM_OK, "save: %s", err);
    run_close(&b);

    rm_file *f = NULL;
    int present = 0;
    rm_run_info back;
    CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK, "file open: %s", err);
    CHECK(rm_file_verify(f, &present, NULL, err, sizeof err) == RM_OK && present, "verify: %s", err);
    CHECK(rm_file_run_info(f, &back, err, sizeof err) == RM_OK, "run info: %s", err);
    CHECK(strcmp(back.model, "gpt") == 0 && back.layers == 2 && back.dim == 16 && back.heads == 2 &&
              back.context == 8 && back.batch == 2 && back.dropout == 0.1f && back.step == 3 &&
              back.data_position == 3 && back.data_tokens == d.n && back.lr.kind == RM_LR_COSINE &&
              back.lr.lr == 3e-3f && back.lr.warmup == 2 && back.lr.steps == 8 && back.seed == info.seed &&
              back.optim.kind == RM_OPTIM_ADAMW && back.optim.beta2 == info.optim.beta2,
          "run info read back differs");
    CHECK(rm_file_meta(f, "my_note") && strcmp(rm_file_meta(f, "my_note"), "hello") == 0, "extra metadata");
    rm_tensor_info ti;
    CHECK(rm_file_tensor_count(f) > 0 && rm_file_tensor(f, 0, &ti) == RM_OK && ti.name && ti.bytes > 0, "tensors");
    CHECK(rm_file_tensor(f, -1, &ti) == RM_ERR_ARG, "tensor index checked");
    run c;
    CHECK(run_open(&c, &back) == RM_OK, "open c");
    CHECK(rm_file_restore(f, c.s, c.o, err, sizeof err) == RM_OK, "restore: %s", err);
    rm_file_close(f);
    CHECK(run_steps(&c, &back, &d, back.step, 8) == RM_OK, "steps c");
    CHECK(param_bytes(&a) == param_bytes(&c) &&
              memcmp(rm_value_data(a.s, rm_param_at(a.g, 0)), rm_value_data(c.s, rm_param_at(c.g, 0)),
                     param_bytes(&a)) == 0,
          "resumed weights differ from the uninterrupted run");
    run_close(&c);
    run_close(&a);

    /* a parameters-only file is not a training-state file */
    snprintf(path, sizeof path, "%s/params.safetensors", dir);
    run p;
    CHECK(run_open(&p, &info) == RM_OK, "open p");
    CHECK(rm_save_params(p.s, path, 0, NULL, NULL, err, sizeof err) == RM_OK, "save params: %s", err);
    CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK, "open params: %s", err);
    CHECK(rm_file_run_info(f, &back, err, sizeof err) == RM_ERR_FORMAT && strstr(err, "'remat_state' is missing"),
          "params-only: %s", err);
    rm_file_close(f);
    run_close(&p);
    rm_data_free(&d);
}

/* A small GPT session (vocab 256, batch B, T 8), dropout on. */
static rm_status small_gpt(int B, float dropout, const rm_options *o, rm_graph **g, rm_model_io *io,
                           rm_session **s) {
    rm_gpt_config c = {.layers = 2, .dim = 16, .heads = 2, .context = 8, .vocab = 256, .batch = B,
                       .dropout = dropout};
    *g = rm_graph_new();
    *s = NULL;
    rm_status st = rm_gpt_build(*g, &c, io);
    return st == RM_OK ? rm_compile(*g, o, s) : st;
}

/* Ids outside [0, vocab) written into the inputs: an error naming the
 * position and the value, never a read or write out of bounds (ASan). */
static void test_bad_ids(void) {
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    rm_graph *g;
    rm_model_io io;
    rm_session *s;
    CHECK(small_gpt(2, 0.0f, &o, &g, &io, &s) == RM_OK, "compile: %s", rm_graph_errmsg(g));
    int32_t *tok = rm_value_data(s, io.tokens), *tgt = rm_value_data(s, io.targets);
    for (int i = 0; i < 16; i++) tok[i] = i, tgt[i] = i + 1;
    float loss;
    CHECK(rm_step(s, 0, &loss) == RM_OK, "good ids: %s", rm_session_errmsg(s));
    const int32_t bad[] = {-3, 256, 2000, 2000000000};
    for (int k = 0; k < 4; k++) {
        char want[96];
        tok[5] = bad[k];
        snprintf(want, sizeof want, "token id %d at position 5 of input", (int)bad[k]);
        CHECK(rm_step(s, 1, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), want) &&
                  strstr(rm_session_errmsg(s), "[0, 256)"), "id %d: %s", (int)bad[k], rm_session_errmsg(s));
        CHECK(rm_forward(s, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), want), "forward, id %d",
              (int)bad[k]);
        tok[5] = 5;
    }
    tgt[11] = 2000000000;
    CHECK(rm_step(s, 1, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), "target 2000000000 at position 11"),
          "target: %s", rm_session_errmsg(s));
    tgt[11] = -1;
    CHECK(rm_step(s, 1, &loss) == RM_ERR_ARG && strstr(rm_session_errmsg(s), "target -1 at position 11"),
          "target -1: %s", rm_session_errmsg(s));
    tgt[11] = 12;
    CHECK(rm_step(s, 1, &loss) == RM_OK && isfinite(loss), "ids fixed: %s", rm_session_errmsg(s));
    rm_session_free(s);
    rm_graph_free(g);
}

/* A session of batch 4 (a) and one of batch 2 (b), the same model and seed. */
typedef struct pair {
    rm_graph *ga, *gb;
    rm_model_io ia, ib;
    rm_session *a, *b;
} pair;

static void pair_open(pair *p, float dropout) {
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.seed = 7;
    CHECK(small_gpt(4, dropout, &o, &p->ga, &p->ia, &p->a) == RM_OK, "compile a");
    CHECK(small_gpt(2, dropout, &o, &p->gb, &p->ib, &p->b) == RM_OK, "compile b");
}

static void pair_close(pair *p) {
    rm_session_free(p->a), rm_session_free(p->b);
    rm_graph_free(p->ga), rm_graph_free(p->gb);
}

/* Two micro-batches of 2 rows accumulate the gradient of one batch of 4:
 * dropout masks keyed by the global row make the forward passes the same;
 * the sums differ only in order (tolerance below). */
static void test_accumulation(void) {
    pair p;
    pair_open(&p, 0.2f);
    rm_graph *ga = p.ga, *gb = p.gb;
    rm_model_io ia = p.ia, ib = p.ib;
    rm_session *a = p.a, *b = p.b;
    int32_t *ta = rm_value_data(a, ia.tokens), *ya = rm_value_data(a, ia.targets);
    int32_t *tb = rm_value_data(b, ib.tokens), *yb = rm_value_data(b, ib.targets);
    for (int i = 0; i < 32; i++) ta[i] = (i * 37 + 11) % 256, ya[i] = (i * 53 + 5) % 256;
    float la, l0, l1;
    CHECK(rm_step(a, 3, &la) == RM_OK, "step a");
    for (int j = 0; j < 2; j++) {
        memcpy(tb, ta + 16 * j, 16 * sizeof *tb);
        memcpy(yb, ya + 16 * j, 16 * sizeof *yb);
        rm_micro m = {.row_offset = 2 * j, .loss_scale = 0.5f, .accumulate = j};
        CHECK(rm_step_micro(b, 3, &m, j ? &l1 : &l0) == RM_OK, "micro %d: %s", j, rm_session_errmsg(b));
    }
    CHECK(fabsf((l0 + l1) / 2 - la) <= 1e-5f * fabsf(la), "losses: %g + %g vs %g", (double)l0, (double)l1,
          (double)la);
    double worst = 0, big = 0;
    for (int i = 0; i < rm_param_count(ga); i++) {
        const float *da = rm_grad(a, rm_param_at(ga, i)), *db = rm_grad(b, rm_param_at(gb, i));
        for (int64_t e = 0; e < rm_numel(ga, rm_param_at(ga, i)); e++) {
            double d = fabs((double)da[e] - (double)db[e]);
            if (d > worst) worst = d;
            if (fabs(da[e]) > big) big = fabs(da[e]);
        }
    }
    CHECK(big > 0 && worst <= 1e-5 * big, "accumulated gradients differ by %g (largest %g)", worst, big);
    /* without the row offset the second micro-batch would reuse the first's masks */
    memcpy(tb, ta + 16, 16 * sizeof *tb);
    memcpy(yb, ya + 16, 16 * sizeof *yb);
    float lz;
    rm_micro z = {.row_offset = 0, .loss_scale = 1.0f, .accumulate = 0};
    CHECK(rm_step_micro(b, 3, &z, &lz) == RM_OK && lz != l1, "masks depend on the row offset");
    rm_micro neg = {.row_offset = -1, .loss_scale = 1.0f};
    CHECK(rm_step_micro(b, 3, &neg, &lz) == RM_ERR_ARG, "negative row offset");
    pair_close(&p);
}

/* rm_step_accumulate's fill: rows of a global batch of 4 rows of T 8. */
typedef struct rows { const int32_t *tok, *tgt; rm_model_io io; int fail_at, calls; } rows;
static rm_status fill_from(void *user, rm_session *s, int j, int64_t row) {
    rows *r = user;
    r->calls++;
    if (j == r->fail_at) return RM_ERR_IO;
    memcpy(rm_value_data(s, r->io.tokens), r->tok + 8 * row, 16 * sizeof(int32_t));
    memcpy(rm_value_data(s, r->io.targets), r->tgt + 8 * row, 16 * sizeof(int32_t));
    return RM_OK;
}

/* rm_step_accumulate is the rm_step_micro loop, bit for bit, and refuses
 * what it cannot do. */
static void test_step_accumulate(void) {
    rm_options o;
    rm_options_default(&o);
    o.threads = 2, o.seed = 7, o.accumulate = 1;
    rm_graph *g, *g2;
    rm_model_io io, io2;
    rm_session *s, *s2;
    CHECK(small_gpt(2, 0.2f, &o, &g, &io, &s) == RM_OK, "compile with accumulate: %s", rm_graph_errmsg(g));
    CHECK(small_gpt(2, 0.2f, &o, &g2, &io2, &s2) == RM_OK, "compile a twin");
    int32_t tok[32], tgt[32];
    for (int i = 0; i < 32; i++) tok[i] = (i * 37 + 11) % 256, tgt[i] = (i * 53 + 5) % 256;
    rows r = {tok, tgt, io, -1, 0};
    float loss, l0, l1;
    CHECK(rm_step_accumulate(s, 3, 2, fill_from, &r, &loss) == RM_OK && r.calls == 2, "2 micro-batches: %s",
          rm_session_errmsg(s));
    rows r2 = {tok, tgt, io2, -1, 0};
    for (int j = 0; j < 2; j++) {
        fill_from(&r2, s2, j, 2 * j);
        rm_micro m = {.row_offset = 2 * j, .loss_scale = 0.5f, .accumulate = j};
        CHECK(rm_step_micro(s2, 3, &m, j ? &l1 : &l0) == RM_OK, "micro %d", j);
    }
    CHECK(loss == (float)(((double)l0 + (double)l1) / 2), "mean loss %g vs %g, %g", (double)loss, (double)l0,
          (double)l1);
    int same = 1;
    for (int i = 0; i < rm_param_count(g); i++)
        same &= memcmp(rm_grad(s, rm_param_at(g, i)), rm_grad(s2, rm_param_at(g2, i)),
                       (size_t)rm_numel(g, rm_param_at(g, i)) * sizeof(float)) == 0;
    CHECK(same, "rm_step_accumulate's gradients are the rm_step_micro loop's");
    r.fail_at = 1, r.calls = 0;
    CHECK(rm_step_accumulate(s, 4, 2, fill_from, &r, &loss) == RM_ERR_IO && r.calls == 2 &&
              strstr(rm_session_errmsg(s), "micro-batch 1 (row 2)"), "a failing fill: %s", rm_session_errmsg(s));
    CHECK(rm_step_accumulate(s, 4, 0, fill_from, &r, &loss) == RM_ERR_ARG, "k = 0");
    CHECK(rm_step_accumulate(s, 4, 2, NULL, NULL, &loss) == RM_ERR_ARG, "k = 2 without a fill");
    CHECK(rm_step_accumulate(NULL, 4, 1, NULL, NULL, &loss) == RM_ERR_ARG, "NULL session");
    rm_session_free(s2), rm_graph_free(g2);
    rm_session_free(s), rm_graph_free(g);
    /* not declared: refused for k > 1; under a limit rm_step_micro refuses the uncounted buffer */
    o.accumulate = 0;
    CHECK(small_gpt(2, 0.2f, &o, &g, &io, &s) == RM_OK, "compile without accumulate");
    r.io = io, r.fail_at = -1;
    CHECK(rm_step_accumulate(s, 3, 2, fill_from, &r, &loss) == RM_ERR_STATE &&
              strstr(rm_session_errmsg(s), "rm_options.accumulate"), "undeclared: %s", rm_session_errmsg(s));
    CHECK(rm_step_accumulate(s, 3, 1, NULL, NULL, &loss) == RM_OK, "k = 1 without a fill is rm_step");
    rm_session_free(s), rm_graph_free(g);
    o.limit_bytes = (int64_t)1 << 30;
    CHECK(small_gpt(2, 0.2f, &o, &g, &io, &s) == RM_OK, "compile under a limit: %s", rm_graph_errmsg(g));
    rm_micro acc = {.row_offset = 2, .loss_scale = 0.5f, .accumulate = 1};
    CHECK(rm_step(s, 3, &loss) == RM_OK, "the first micro-batch under a limit: %s", rm_session_errmsg(s));
    CHECK(rm_step_micro(s, 3, &acc, &loss) == RM_ERR_STATE && strstr(rm_session_errmsg(s), "memory limit"),
          "accumulating under a limit, undeclared: %s", rm_session_errmsg(s));
    rm_session_free(s), rm_graph_free(g);
    o.limit_bytes = 0, o.accumulate = 1, o.fuse_optimizer = 1, o.optim.grad_clip = 0;
    CHECK(small_gpt(2, 0.2f, &o, &g, &io, &s) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "accumulate"),
          "accumulate with fuse_optimizer: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
}

/* A micro-batch filled from the data holds the rows of the global batch. */
static void test_fill_rows(void) {
    pair p;
    pair_open(&p, 0.0f);
    rm_model_io ia = p.ia, ib = p.ib;
    rm_session *a = p.a, *b = p.b;
    unsigned char text[500];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)(i * 7 % 251);
    rm_dataset d;
    char err[256];
    CHECK(rm_data_from_bytes(&d, "t", text, sizeof text, err, sizeof err) == RM_OK, "%s", err);
    for (int mode = 0; mode < 2; mode++) {
        rm_sampler sm = mode ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
        CHECK(rm_data_fill(a, &ia, &d, RM_DATA_TRAIN, sm, 9, 3) == RM_OK, "fill a: %s", rm_session_errmsg(a));
        CHECK(rm_data_fill_rows(b, &ib, &d, RM_DATA_TRAIN, sm, 9, 3, 4, 2) == RM_OK, "fill b: %s",
              rm_session_errmsg(b));
        const int32_t *ta = rm_value_data(a, ia.tokens), *tb = rm_value_data(b, ib.tokens);
        const int32_t *ya = rm_value_data(a, ia.targets), *yb = rm_value_data(b, ib.targets);
        CHECK(memcmp(ta + 16, tb, 16 * sizeof *tb) == 0 && memcmp(ya + 16, yb, 16 * sizeof *yb) == 0,
              "sampler %d: rows 2-3 of the global batch", mode);
    }
    CHECK(rm_data_fill_rows(b, &ib, &d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 9, 3, 4, 3) == RM_ERR_ARG &&
              strstr(rm_session_errmsg(b), "rows [3, 5)"), "rows past the batch: %s", rm_session_errmsg(b));
    rm_data_free(&d);
    pair_close(&p);
}

/* Typed options, their string forms, the parsers, and the copy the session keeps. */
static void test_options(void) {
    rm_strategy st;
    int param;
    int64_t bytes;
    double frac;
    char name[32], err[200];
    CHECK(rm_parse_strategy("segments:4", &st, &param, err, sizeof err) == RM_OK && st == RM_STRATEGY_SEGMENTS &&
              param == 4, "segments:4");
    CHECK(rm_parse_strategy("selective", &st, &param, err, sizeof err) == RM_OK && st == RM_STRATEGY_SELECTIVE &&
              param == 0, "selective");
    CHECK(rm_parse_strategy("segments", &st, &param, err, sizeof err) == RM_ERR_ARG, "segments without K");
    CHECK(rm_parse_strategy("blocks:2", &st, &param, err, sizeof err) == RM_ERR_ARG, "blocks:2");
    CHECK(rm_parse_strategy("bogus", &st, &param, err, sizeof err) == RM_ERR_ARG &&
              strstr(err, "unknown recompute strategy 'bogus'"), "%s", err);
    CHECK(rm_strategy_name(RM_STRATEGY_REVOLVE, 3, name, sizeof name) && strcmp(name, "revolve:3") == 0, "%s", name);
    CHECK(rm_parse_size("1.5GiB", &bytes, &frac, err, sizeof err) == RM_OK && bytes == 1610612736 && frac == 0,
          "1.5GiB");
    CHECK(rm_parse_size("50%", &bytes, &frac, err, sizeof err) == RM_OK && bytes == 0 && frac == 0.5, "50%%");
    CHECK(rm_parse_size("1e30", &bytes, &frac, err, sizeof err) == RM_ERR_ARG, "1e30 is refused");
    CHECK(rm_parse_size("12 apples", &bytes, &frac, err, sizeof err) == RM_ERR_ARG && strstr(err, "not a size"),
          "%s", err);

    rm_graph *g;
    rm_model_io io;
    rm_session *s;
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.dry_run = 1;
    char text[16] = "blocks";
    o.checkpoint = text;
    CHECK(small_gpt(2, 0.0f, &o, &g, &io, &s) == RM_OK, "string strategy: %s", rm_graph_errmsg(g));
    memcpy(text, "bogus", 6); /* the session kept its own copy */
    rm_plan_info p;
    rm_plan(s, &p);
    CHECK(p.strategy && strcmp(p.strategy, "blocks") == 0, "strategy kept: %s", p.strategy ? p.strategy : "NULL");
    rm_memory_info m1, m2;
    rm_memory(s, &m1);
    rm_session_free(s);
    o.checkpoint = NULL;
    o.strategy = RM_STRATEGY_BLOCKS;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "typed strategy");
    rm_memory(s, &m2);
    CHECK(m1.activation_bytes_planned == m2.activation_bytes_planned, "typed and string strategies plan alike");
    rm_session_free(s);

    /* a budget and a strategy exclude each other; a failed compile can be retried */
    o.budget_fraction = 0.5;
    CHECK(rm_compile(g, &o, &s) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "rm_options.strategy"), "%s",
          rm_graph_errmsg(g));
    o.strategy = RM_STRATEGY_NONE;
    o.budget_fraction = 0;
    o.budget_bytes = 1;
    CHECK(rm_compile(g, &o, &s) == RM_ERR_BUDGET && !s, "1-byte budget: %s", rm_graph_errmsg(g));
    CHECK(strstr(rm_graph_errmsg(g), "--") == NULL, "library messages name no CLI flag: %s", rm_graph_errmsg(g));
    CHECK(rm_graph_status(g) == RM_OK, "a failed compile does not stick");
    o.budget_bytes = 0;
    o.budget_fraction = 0.9;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "retry with 90%%: %s", rm_graph_errmsg(g));
    rm_session_free(s);
    o.budget_fraction = 0;
    o.dry_run = 0;
    o.optim.kind = RM_OPTIM_SGD;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "compile with SGD");
    rm_optim *opt = NULL;
    float *mom = (float *)1;
    CHECK(rm_optim_new(s, NULL, &opt) == RM_OK && rm_optim_state(opt, &mom, NULL, NULL) == RM_OK && mom == NULL,
          "rm_optim_new(s, NULL) builds the session's optimizer (SGD: no moments)");
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
}

int main(void) {
    char dir[256];
    if (check_tmpdir(dir, sizeof dir, "api")) return 1;
    test_version();
    test_lr();
    test_tokens();
    test_bad_ids();
    test_accumulation();
    test_step_accumulate();
    test_fill_rows();
    test_options();
    test_state_roundtrip(dir);
    check_rmdir(dir);
    return check_done("test_api");
}
