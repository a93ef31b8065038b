/* test_api.c: the training-loop API of remat.h, used as a client would
 * (this file includes remat.h only): version, learning-rate schedules, data
 * from memory, batches written into a session, evaluation, and training-state
 * files that resume a run bit for bit. */
#include "remat.h"
#include "check.h"

#include <math.h>
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

int main(void) {
    char dir[] = "/tmp/remat_api_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_version();
    test_lr();
    test_tokens();
    test_state_roundtrip(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    return check_done("test_api");
}
