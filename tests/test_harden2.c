/* test_harden2.c: the library's classes of the second hardening round
 * (issue 22); the NULL arguments and dry-run sessions of every public
 * function are in the generated test_null_api (tests/null_api.awk). Each
 * case that used to crash runs in a child process, so a crash is one named
 * failure and the rest still run. */
#include "check.h"
#include "remat.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs `body` (1 when its checks hold) in a child: a signal or 0 fails `what`. */
#define SURVIVES(what, body)                                                                            \
    do {                                                                                                \
        fflush(NULL);                                                                                   \
        pid_t pid_ = fork();                                                                            \
        if (pid_ == 0) _exit(((body) ? 0 : 1));                                                         \
        int st_ = 0;                                                                                    \
        waitpid(pid_, &st_, 0);                                                                         \
        CHECK(WIFEXITED(st_) && WEXITSTATUS(st_) == 0, "%s: %s", what,                                  \
              WIFSIGNALED(st_) ? "crashed" : "returned the wrong result");                              \
    } while (0)

static rm_session *gpt_session(rm_graph **g, rm_model_io *io, int dry) {
    *g = rm_graph_new();
    rm_gpt_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    if (rm_gpt_build(*g, &c, io) != RM_OK) abort();
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    o.dry_run = dry;
    rm_session *s;
    if (rm_compile(*g, &o, &s) != RM_OK) abort();
    return s;
}

/* Class 8: a dry-run session (a plan only) refuses what needs a runnable
 * one with RM_ERR_STATE, instead of handing out pointers into nothing. */
static void dry_run_sessions(void) {
    rm_graph *g;
    rm_model_io io;
    rm_session *s = gpt_session(&g, &io, 1);
    CHECK(rm_value_data(s, io.tokens) == NULL && strstr(rm_session_errmsg(s), "dry_run"),
          "rm_value_data of a dry-run session's input: '%s'", rm_session_errmsg(s));
    rm_optim *o = NULL;
    CHECK(rm_optim_new(s, NULL, &o) == RM_ERR_STATE && o == NULL, "rm_optim_new on a dry-run session");
    float loss;
    CHECK(rm_step(s, 0, &loss) == RM_ERR_STATE, "rm_step on a dry-run session");
    rm_plan_info p;
    rm_plan(s, &p);
    rm_memory_info m;
    rm_memory(s, &m);
    CHECK(m.activation_bytes_planned > 0, "a dry-run session still answers rm_memory");
    rm_session_free(s);
    rm_graph_free(g);
}

/* The data fillers write only into inputs of the size they need: an io
 * whose ids name other values (a parameter, a smaller input) is refused. */
static void io_of_another_shape(void) {
    rm_graph *g;
    rm_model_io io;
    rm_session *s = gpt_session(&g, &io, 0);
    rm_dataset d;
    char err[256];
    if (rm_data_load_corpus(&d, err, sizeof err) || rm_data_split(&d, 0.1, 2, 8, err, sizeof err)) abort();
    rm_model_io bad = io;
    bad.targets = rm_param_at(g, 0); /* the token embedding: f32, not an input */
    SURVIVES("rm_data_fill with targets a parameter",
             rm_data_fill(s, &bad, &d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0) == RM_ERR_ARG &&
                 strstr(rm_session_errmsg(s), "targets"));
    bad = io;
    bad.targets = bad.tokens, bad.tokens = -1, bad.features = io.tokens; /* features must be f32 */
    SURVIVES("rm_data_fill with int32 features",
             rm_data_fill(s, &bad, &d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0) == RM_ERR_ARG);
    SURVIVES("rm_seq2seq_fill on a GPT", rm_seq2seq_fill(s, &io, NULL, 1, 0) == RM_ERR_ARG &&
                                             rm_session_errmsg(s)[0]);
    /* a dataset or pairs struct that claims contents it does not hold */
    rm_dataset empty;
    memset(&empty, 0, sizeof empty);
    empty.n = empty.n_train = 100;
    int32_t tok[64], tgt[64];
    SURVIVES("rm_data_batch of a dataset with no tokens",
             rm_data_batch(&empty, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0, 2, 4, tok, tgt, err, sizeof err) ==
                 RM_ERR_ARG);
    rm_pairs lie = {NULL, NULL, 3};
    int32_t a[64], b[64], c[64], e[64];
    SURVIVES("rm_seq2seq_batch of pairs with no buffer", rm_seq2seq_batch(&lie, 1, 0, 2, 4, a, b, c, e) == RM_ERR_ARG);
    SURVIVES("rm_seq2seq_reverse_pair with T = 0",
             (rm_seq2seq_reverse_pair(1, 0, 0, 0, (unsigned char *)a, (unsigned char *)b, (size_t *)c), 1));
    rm_data_free(&d);
    rm_session_free(s);
    rm_graph_free(g);
}

/* Class 16: an optimizer freed after its session (fused or not), or used
 * after it: no use after free, RM_ERR_STATE. */
static void free_order(void) {
    for (int fused = 0; fused < 2; fused++) {
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_gpt_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
        rm_gpt_build(g, &c, &io);
        rm_options o;
        rm_options_default(&o);
        o.threads = 1, o.fuse_optimizer = fused, o.optim.grad_clip = 0;
        rm_session *s;
        rm_optim *a = NULL, *b = NULL;
        if (rm_compile(g, &o, &s) != RM_OK || rm_optim_new(s, NULL, &a) != RM_OK) abort();
        if (!fused && rm_optim_new(s, NULL, &b) != RM_OK) abort(); /* two on one session */
        rm_session_free(s);
        float *m;
        uint64_t t;
        CHECK(rm_optim_step(a, 1e-3f, NULL) == RM_ERR_STATE, "rm_optim_step after rm_session_free (fused %d)", fused);
        CHECK(rm_optim_set_lr(a, 1e-3f) == RM_ERR_STATE, "rm_optim_set_lr after rm_session_free (fused %d)", fused);
        CHECK(rm_optim_state(a, &m, NULL, &t) == RM_ERR_STATE, "rm_optim_state after rm_session_free");
        CHECK(rm_optim_unshard(a) == RM_ERR_STATE && rm_optim_reshard(a) == RM_ERR_STATE, "unshard after free");
        rm_optim_free(a); /* ASan: no use after free */
        rm_optim_free(b);
        rm_graph_free(g);
    }
}

/* Classes 6 and 15: the planners' sums of a profile's bytes and times
 * stay in range (refused above 2^60 bytes or 1e30 time units, with the
 * total), and integer helpers do not overflow. */
static void planner_sums(void) {
    char err[256] = "", *res = NULL;
    const char *g = "{\"nodes\":[{\"forward_time\":1,\"backward_time\":1,\"output_bytes\":9e18},"
                    "{\"forward_time\":1,\"backward_time\":1,\"output_bytes\":9e18},"
                    "{\"forward_time\":1,\"backward_time\":1,\"output_bytes\":4}]}";
    rm_status st = rm_plan_graph(g, -1, &res, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && !res && strstr(err, "2^60"), "a graph of 9e18-byte nodes: %d '%s'", st, err);
    free(res);
    const char *c = "{\"stages\":[{\"uf\":1e308,\"ub\":1e308,\"a\":10,\"ab\":20},{\"uf\":0,\"ub\":0,\"a\":10,\"ab\":10}]}";
    res = NULL;
    st = rm_plan_chain(c, 100, &res, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "times"), "a chain of 1e308 times: %d '%s'", st, err);
    free(res);
    const char *ok = "{\"stages\":[{\"uf\":1,\"ub\":2,\"a\":10,\"ab\":20},{\"uf\":0,\"ub\":0,\"a\":10,\"ab\":10}]}";
    FILE *devnull = fopen("/dev/null", "w");
    st = rm_plan_chain_sweep(ok, RM_SWEEP_MAX_POINTS + 1, devnull, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "at most"), "a sweep of more points than it allows: %d '%s'", st, err);
    CHECK(rm_plan_chain_sweep(ok, 3, devnull, err, sizeof err) == RM_OK, "a sweep of 3 points: %s", err);
    fclose(devnull);
    CHECK(rm_llama_ffn_dim(384) == 1024 && rm_llama_ffn_dim(INT_MAX) == 0 && rm_llama_ffn_dim(INT_MIN) == 0 &&
              rm_llama_ffn_dim(805306368) == 0 && rm_llama_ffn_dim(805306300) > 0,
          "rm_llama_ffn_dim at the ends of int: %d %d", rm_llama_ffn_dim(INT_MAX), rm_llama_ffn_dim(805306300));
}

int main(void) {
    planner_sums();
    free_order();
    dry_run_sessions();
    io_of_another_shape();
    return check_done("test_harden2");
}
