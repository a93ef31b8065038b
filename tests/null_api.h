/* null_api.h: the fixture of the generated NULL-argument test.
 *
 * tests/null_api.awk reads every prototype of include/remat.h and writes
 * build/tests/test_null_api.c, which includes this file: one call per
 * pointer argument of every public function, that argument NULL and the
 * others valid (the values below). Each call runs in its own child process
 * (null_survives), so a crash is one named failure and the rest still run.
 * Everything here goes through the public header only. */
#ifndef REMAT_NULL_API_H
#define REMAT_NULL_API_H
#include "remat.h"
#include "check.h"

#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Valid arguments of every type the header uses, built once in the parent
 * (no step runs there, so the children fork before OpenMP starts a pool). */
static struct null_fixture {
    rm_graph *g;        /* a compiled small GPT's graph */
    rm_model_io io;
    rm_session *s;      /* its session */
    rm_session *dry;    /* a session of the same graph compiled with dry_run */
    rm_optim *opt;      /* AdamW on it */
    rm_file *file;      /* a training-state file of it, opened */
    rm_dataset d;       /* the built-in corpus, split for (2, 8) batches */
    rm_pairs pairs;     /* one source<TAB>target pair */
    char dir[64], ckpt[128], out[128], pairs_path[128], hf_dir[128];
    const char *chain, *graph_json;
    rm_options opts;
    rm_optim_config oc;
    rm_gpt_config gc;
    rm_mlp_config mc;
    rm_llama_config lc;
    rm_encdec_config ec;
    rm_run_info ri;
    rm_lr_schedule lr;
    rm_micro micro;
    rm_chart chart;
    rm_chart_series series;
    rm_chart_point point;
    FILE *devnull;
    const char *keys[1], *values[1];
    int64_t shape[RM_MAX_DIMS];
    char err[256], buf[256], digest[RM_CHECKSUM_LEN];
    char *res;
    /* scratch outputs, large enough for any batch of the fixture */
    int32_t i32[4096];
    float f32[4096];
    unsigned char u8[4096];
    double dbl;
    int64_t i64;
    uint64_t u64;
    size_t sz;
    int i;
    float *fp;
    rm_session *s_out;
    rm_optim *opt_out;
    rm_file *file_out;
    rm_out *out_w, *out_out; /* a file being written (rm_out_open of F.out), an out-handle */
    rm_hf *hf, *hf_out;      /* a Hugging Face folder (hf_dir: the fixture's llama), opened; an out-handle */
    rm_strategy strat;
    /* zeroed memory for the out-structs (rm_memory_info, rm_tensor_info, ...) */
    _Alignas(16) unsigned char scratch[1 << 16];
} F;

static void null_fwd(const float *x, float *y, int64_t n, void *user) {
    (void)user;
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
}
static void null_bwd(const float *x, const float *dy, float *dx, int64_t n, void *user) {
    (void)x, (void)user;
    for (int64_t i = 0; i < n; i++) dx[i] += dy[i];
}
static rm_status null_fill(void *user, rm_session *s, int j, int64_t row_offset) {
    (void)user, (void)s, (void)j, (void)row_offset;
    return RM_OK;
}

/* A graph for the builders: one f32 input (2, 3), value 0. */
static rm_graph *null_fresh_graph(void) {
    rm_graph *g = rm_graph_new();
    rm_input(g, "x", RM_DTYPE_F32, 2, (const int64_t[]){2, 3});
    return g;
}

/* The small GPT built and not compiled (for rm_compile). */
static rm_graph *null_built_graph(void) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_gpt_build(g, &F.gc, &io);
    return g;
}

/* hf_dir: a Hugging Face folder of F.lc's llama (its weights saved by
 * rm_save_params under the names LlamaForCausalLM uses), opened as F.hf. */
static int null_hf_folder(char *err, size_t errlen) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    char path[192];
    snprintf(F.hf_dir, sizeof F.hf_dir, "%s/hf", F.dir);
    snprintf(path, sizeof path, "%s/model.safetensors", F.hf_dir);
    int ok = g && rm_llama_build(g, &F.lc, &io) == RM_OK && rm_compile(g, &F.opts, &s) == RM_OK &&
             mkdir(F.hf_dir, 0755) == 0 && rm_save_params(s, path, 0, NULL, NULL, err, errlen) == RM_OK;
    rm_session_free(s);
    rm_graph_free(g);
    snprintf(path, sizeof path, "%s/config.json", F.hf_dir);
    FILE *c = ok ? fopen(path, "w") : NULL;
    ok = c && fprintf(c, "{\"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 16, "
                      "\"num_hidden_layers\": 1, \"num_attention_heads\": 2, \"num_key_value_heads\": 2, "
                      "\"intermediate_size\": 64, \"vocab_size\": 32, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "
                      "\"tie_word_embeddings\": false}\n") > 0;
    if (c && fclose(c) != 0) ok = 0;
    return ok && rm_hf_open(F.hf_dir, &F.hf, err, errlen) == RM_OK;
}

static void null_setup(void) {
    /* one OpenMP thread: a child forked after a parallel region of several
     * would wait forever for the parent's pool */
    omp_set_num_threads(1);
    if (check_tmpdir(F.dir, sizeof F.dir, "null_api")) exit(1);
    snprintf(F.ckpt, sizeof F.ckpt, "%s/run.safetensors", F.dir);
    snprintf(F.out, sizeof F.out, "%s/out", F.dir);
    snprintf(F.pairs_path, sizeof F.pairs_path, "%s/pairs.tsv", F.dir);
    F.gc = (rm_gpt_config){.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    F.mc = (rm_mlp_config){.context = 8, .vocab = 32, .batch = 2, .n_widths = 1, .widths = {16}};
    F.lc = (rm_llama_config){.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    F.ec = (rm_encdec_config){.enc_layers = 1, .dec_layers = 1, .dim = 16, .heads = 2, .context = 8,
                              .vocab = RM_ENCDEC_VOCAB, .batch = 2};
    rm_options_default(&F.opts);
    F.opts.threads = 1;
    rm_optim_config_default(&F.oc);
    rm_run_info_default(&F.ri);
    F.lr = (rm_lr_schedule){RM_LR_CONSTANT, 1e-3f, 0, 10};
    F.micro = (rm_micro){0, 1.0f, 0};
    F.keys[0] = "k", F.values[0] = "v";
    F.shape[0] = 2, F.shape[1] = 3, F.shape[2] = F.shape[3] = 1;
    F.chain = "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":10,\"ab\":20},{\"uf\":1,\"ub\":2,\"a\":10,\"ab\":20},"
              "{\"uf\":0,\"ub\":0,\"a\":10,\"ab\":10}]}";
    F.graph_json = "{\"nodes\":[{\"name\":\"a\",\"forward_time\":1,\"backward_time\":2,\"output_bytes\":100},"
                   "{\"name\":\"loss\",\"forward_time\":1,\"backward_time\":1,\"output_bytes\":4}],"
                   "\"edges\":[{\"producer\":0,\"consumer\":1}]}";
    F.series = (rm_chart_series){"s", 1, RM_MARK_CIRCLE};
    F.point = (rm_chart_point){1, 2, "p", 0};
    F.chart = (rm_chart){"t", "sub", "x", "y", "note", &F.series, 1, &F.point, 1, 0};
    F.devnull = fopen("/dev/null", "w");
    F.g = rm_graph_new();
    char err[256];
    if (rm_gpt_build(F.g, &F.gc, &F.io) != RM_OK || rm_compile(F.g, &F.opts, &F.s) != RM_OK ||
        rm_optim_new(F.s, NULL, &F.opt) != RM_OK) {
        fprintf(stderr, "null_api: fixture: %s\n", rm_graph_errmsg(F.g));
        exit(1);
    }
    rm_options dry = F.opts;
    dry.dry_run = 1;
    if (rm_compile(F.g, &dry, &F.dry) != RM_OK) {
        fprintf(stderr, "null_api: fixture: %s\n", rm_graph_errmsg(F.g));
        exit(1);
    }
    F.ri.layers = F.gc.layers, F.ri.dim = F.gc.dim, F.ri.heads = F.gc.heads;
    F.ri.context = F.gc.context, F.ri.vocab = F.gc.vocab, F.ri.batch = F.gc.batch;
    FILE *p = fopen(F.pairs_path, "w");
    if (!p || fputs("abc\tcba\n", p) < 0 || fclose(p) != 0 ||
        rm_save_run(F.s, F.opt, F.ckpt, &F.ri, 0, NULL, NULL, err, sizeof err) != RM_OK ||
        rm_file_open(F.ckpt, &F.file, err, sizeof err) != RM_OK ||
        rm_data_load_corpus(&F.d, err, sizeof err) != RM_OK || rm_data_split(&F.d, 0.1, 2, 8, err, sizeof err) ||
        rm_pairs_load(&F.pairs, F.pairs_path, err, sizeof err) != RM_OK ||
        rm_out_open(F.out, &F.out_w, err, sizeof err) != RM_OK || !null_hf_folder(err, sizeof err)) {
        fprintf(stderr, "null_api: fixture: %s\n", err);
        exit(1);
    }
}

/* Runs one call in a child: it must neither crash nor hang (10 s), and
 * `call` returns 1 when its result is the expected one. */
static void null_survives(const char *what, int (*call)(void)) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        F.err[0] = 0;
        _exit(call() ? 0 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s", what,
          WIFSIGNALED(st) ? "crashed (or hung)" : "a sanitizer report, or the wrong result (no error, or no message)");
}

static void null_teardown(void) {
    rm_file_close(F.file);
    rm_hf_close(F.hf);
    rm_optim_free(F.opt);
    rm_session_free(F.s);
    rm_session_free(F.dry);
    rm_graph_free(F.g);
    rm_data_free(&F.d);
    rm_pairs_free(&F.pairs);
    fclose(F.devnull);
    check_rmdir(F.dir);
}
#endif
