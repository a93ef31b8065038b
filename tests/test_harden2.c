/* test_harden2.c: the library's classes of the second hardening round
 * (issue 22); the NULL arguments and dry-run sessions of every public
 * function are in the generated test_null_api (tests/null_api.awk). Each
 * case that used to crash runs in a child process, so a crash is one named
 * failure and the rest still run. */
#define _DEFAULT_SOURCE /* wait4 */
#include "check.h"
#include "remat.h"
#include "survives.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>


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
    rm_pairs lie = {NULL, NULL, 3, 0};
    int32_t a[64], b[64], c[64], e[64];
    SURVIVES("rm_seq2seq_batch of pairs with no buffer", rm_seq2seq_batch(&lie, 1, 0, 2, 4, a, b, c, e) == RM_ERR_ARG);
    /* a pair filled by hand reaching past its buffer (read past it before len) */
    unsigned char text[] = "ab\tcd\n";
    size_t off[4] = {0, 2, 3, 200000};
    rm_pairs past = {text, off, 1, sizeof text - 1};
    SURVIVES("rm_seq2seq_batch of a pair past its buffer", rm_seq2seq_batch(&past, 1, 0, 2, 4, a, b, c, e) == RM_ERR_ARG);
    off[3] = 2;
    SURVIVES("rm_seq2seq_batch of a pair within it", rm_seq2seq_batch(&past, 1, 0, 2, 4, a, b, c, e) == RM_OK &&
                                                         c[1] == 'c' && c[2] == 'd');
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
    /* a graph freed before its sessions: they still step, and the last one
     * freed frees it (ASan: no use after free, LeakSanitizer: no leak) */
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_gpt_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    rm_gpt_build(g, &c, &io);
    rm_session *s1, *s2;
    if (rm_compile(g, NULL, &s1) != RM_OK || rm_compile(g, NULL, &s2) != RM_OK) abort();
    rm_graph_free(g);
    int32_t *tok = rm_value_data(s2, io.tokens), *tgt = rm_value_data(s2, io.targets);
    for (int i = 0; i < 16; i++) tok[i] = i % 32, tgt[i] = (i + 1) % 32;
    rm_session_free(s1);
    float loss = NAN;
    CHECK(rm_step(s2, 0, &loss) == RM_OK && isfinite(loss), "a step after rm_graph_free: %s", rm_session_errmsg(s2));
    rm_memory_info m;
    rm_memory(s2, &m);
    CHECK(m.activation_arena_bytes > 0, "rm_memory after rm_graph_free");
    rm_session_free(s2);
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

/* The commands whose peak RSS is measured run from a spawner forked first
 * thing, while this process is small: a child forked later starts with this
 * process's pages (large under ASan), and its peak RSS counts them before
 * it execs. The spawner reads a command, runs it with sh -c and answers its
 * exit status and peak RSS in KiB (wait4: that child and what it waited for). */
static int spawn_cmd = -1, spawn_ans = -1;

/* ASan keeps freed memory in quarantine (256 MiB by default) and shadows
 * what is allocated: its peak RSS says little, so the limits below leave
 * room for that; the plain build is the one that measures. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_SLACK_KIB (320L * 1024)
#else
#define RSS_SLACK_KIB 0L
#endif

static void spawner_start(void) {
    int cmd[2], ans[2];
    if (pipe(cmd) != 0 || pipe(ans) != 0) return;
    fflush(NULL);
    if (fork() == 0) {
        close(cmd[1]), close(ans[0]);
        char line[1024];
        for (size_t n; read(cmd[0], &n, sizeof n) == sizeof n && n < sizeof line;) {
            if (read(cmd[0], line, n) != (ssize_t)n) break;
            line[n] = 0;
            long out[2] = {-1, -1};
            pid_t pid = fork();
            if (pid == 0) {
                execl("/bin/sh", "sh", "-c", line, (char *)NULL);
                _exit(127);
            }
            int st;
            struct rusage ru;
            if (pid > 0 && wait4(pid, &st, 0, &ru) == pid) out[0] = WIFEXITED(st) ? WEXITSTATUS(st) : -1, out[1] = ru.ru_maxrss;
            if (write(ans[1], out, sizeof out) != sizeof out) break;
        }
        _exit(0);
    }
    close(cmd[0]), close(ans[1]);
    spawn_cmd = cmd[1], spawn_ans = ans[0];
}

/* Runs `cmd` through the spawner: its exit status in *status, its peak RSS (KiB). */
static long peak_of(const char *cmd, int *status) {
    size_t n = strlen(cmd);
    long got[2] = {-1, -1};
    if (spawn_cmd < 0 || write(spawn_cmd, &n, sizeof n) != sizeof n || write(spawn_cmd, cmd, n) != (ssize_t)n ||
        read(spawn_ans, got, sizeof got) != sizeof got)
        got[0] = got[1] = -1;
    *status = (int)got[0];
    return got[1];
}

/* Class 12: a file whose metadata claims a model larger than its tensors
 * (vocab 2^24 over tensors of vocab 32, with a checksum that holds) is
 * refused from its header, before the claimed model is allocated: by
 * rm_file_check, and by the CLI (peak RSS of the child well under the 1.5
 * GiB the claimed model would take). */
static void file_claims_more(void) {
    char dir[64], path[128], cmd[512];
    if (check_tmpdir(dir, sizeof dir, "harden2")) return;
    snprintf(path, sizeof path, "%s/claims.safetensors", dir);
    rm_graph *g;
    rm_model_io io;
    rm_session *s = gpt_session(&g, &io, 0);
    rm_run_info r;
    rm_run_info_default(&r);
    r.layers = 1, r.dim = 16, r.heads = 2, r.context = 8, r.batch = 2, r.vocab = 1 << 24;
    char err[256] = "";
    CHECK(rm_save_run(s, NULL, path, &r, 0, NULL, NULL, err, sizeof err) == RM_OK, "save: %s", err);
    rm_session_free(s);
    rm_graph_free(g);
    rm_file *f = NULL;
    rm_run_info back;
    rm_graph *claimed = rm_graph_new();
    CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK && rm_file_run_info(f, &back, err, sizeof err) == RM_OK &&
              rm_run_build(&back, claimed, &io, 0) == RM_OK,
          "the claimed model builds (a graph allocates nothing): %s", err);
    rm_status st = rm_file_check(f, claimed, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "16777216"), "rm_file_check of a file claiming vocab 2^24: %d '%s'", st,
          err);
    rm_file_close(f);
    rm_graph_free(claimed);
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    const char *runs[] = {"sample --load %s --prompt a --tokens 1", "train --resume %s --steps 2 --threads 1"};
    for (int i = 0; i < 2; i++) {
        char args[300];
        snprintf(args, sizeof args, runs[i], path);
        snprintf(cmd, sizeof cmd, "%s/remat %s > /dev/null 2> %s/err", build, args, dir);
        int rc;
        long peak = peak_of(cmd, &rc);
        CHECK(rc == 1 && peak >= 0 && peak < 400 * 1024 + RSS_SLACK_KIB,
              "remat %s: exit %d, peak RSS %ld KiB (the claimed model is refused before it is allocated)", args, rc,
              peak);
    }
    /* inspect of a 256 MiB file (sparse: no disk) reads its header, and its
     * tensors a chunk at a time for the checksum: it never holds the file */
    snprintf(path, sizeof path, "%s/big.safetensors", dir);
    char hdr[160];
    const long long big = 256LL << 20;
    int h = snprintf(hdr, sizeof hdr, "{\"t\":{\"dtype\":\"U8\",\"shape\":[%lld],\"data_offsets\":[0,%lld]}}    ", big,
                     big);
    FILE *fp = fopen(path, "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h >> (8 * i));
    int wrote = fp && fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr, 1, (size_t)h, fp) == (size_t)h;
    if (fp) fclose(fp);
    CHECK(wrote && truncate(path, 8 + h + big) == 0, "writing the sparse file");
    snprintf(cmd, sizeof cmd, "%s/remat inspect %s > %s/out 2> %s/err", build, path, dir, dir);
    int rc;
    long peak = peak_of(cmd, &rc);
    CHECK(rc == 0 && peak >= 0 && peak < 128 * 1024 + RSS_SLACK_KIB, "remat inspect of a 256 MiB file: exit %d, peak RSS %ld KiB",
          rc, peak);
    /* plan --graph of a U-shaped graph (node i read by node n-2-i): its
     * candidate plans that recompute most of it for each block are not
     * generated (at 8000 nodes they took 255 MB; 4 GB at 32000) */
    snprintf(path, sizeof path, "%s/unet.json", dir);
    fp = fopen(path, "w");
    const int n = 8000;
    if (fp) {
        fputs("{\"nodes\":[", fp);
        for (int i = 0; i < n; i++)
            fprintf(fp, "%s{\"forward_time\":%d,\"backward_time\":%d,\"output_bytes\":%d}", i ? "," : "", 1 + i % 3,
                    2 + i % 5, 100 + (i * 7919) % 9900);
        fputs("],\"edges\":[", fp);
        for (int i = 0; i + 1 < n; i++) fprintf(fp, "%s{\"producer\":%d,\"consumer\":%d}", i ? "," : "", i, i + 1);
        for (int i = 0; i < n / 2 - 1; i++) fprintf(fp, ",{\"producer\":%d,\"consumer\":%d}", i, n - 2 - i);
        fputs("]}", fp);
        fclose(fp);
    }
    snprintf(cmd, sizeof cmd, "%s/remat plan --graph %s > %s/out 2> %s/err", build, path, dir, dir);
    peak = peak_of(cmd, &rc);
    CHECK(rc == 0 && peak >= 0 && peak < 100 * 1024 + RSS_SLACK_KIB, "plan --graph of a U-shaped graph of %d nodes: exit %d, peak "
          "RSS %ld KiB", n, rc, peak);
    check_rmdir(dir);
}

/* The least budget (rm_plan_chain's min_budget_bytes) is one answer
 * whatever budget is asked, and truly the least: a plan at it, none one
 * byte below; at any budget from it up a plan. n stages of sizes that do
 * not share a large divisor: 60 (the exact program), 140 (over groups);
 * sel: every third stage may also be kept selectively (ab_sel, ...). */
static void chain_least(int n, int sel) {
    char *c = malloc((size_t)n * 160 + 100), err[256], *res;
    size_t at = (size_t)sprintf(c, "{\"stages\":[");
    for (int i = 0; i < n; i++) {
        at += (size_t)sprintf(c + at, "%s{\"uf\":%d,\"ub\":%d,\"a\":%d,\"ab\":%d", i ? "," : "", 1 + i % 3, 2 + i % 5,
                              1000 + (i * 7919) % 9000, 5000 + (i * 104729) % 20000);
        if (sel && i % 3 == 0)
            at += (size_t)sprintf(c + at, ",\"ab_sel\":%d,\"ub_sel\":%d,\"bt_sel\":%d", 3000 + (i * 7919) % 9000,
                                  4 + i % 5, 500 + i % 300);
        c[at++] = '}';
    }
    sprintf(c + at, ",{\"uf\":0,\"ub\":0,\"a\":100,\"ab\":100}]}");
    const int64_t budgets[] = {1000, 100000000, 200000};
    double least = -1;
    for (int k = 0; k < (n > 100 ? 2 : 3); k++) {
        res = NULL;
        rm_status st = rm_plan_chain(c, budgets[k], &res, err, sizeof err);
        const char *m = res ? strstr(res, "\"min_budget_bytes\":") : NULL;
        double v = m ? atof(m + 19) : -1;
        if (k == 0) least = v;
        CHECK(v > 0 && v == least && (st == RM_OK) == (budgets[k] >= v), "%d stages%s at budget %lld: status %d, least "
              "%.0f (at the first budget %.0f)", n, sel ? " (selective)" : "", (long long)budgets[k], st, v, least);
        free(res);
    }
    for (int64_t b = (int64_t)least - 1; b <= (int64_t)least; b++) {
        res = NULL;
        rm_status st = rm_plan_chain(c, b, &res, err, sizeof err);
        const char *pk = res ? strstr(res, "\"peak_bytes\":") : NULL;
        CHECK(b < (int64_t)least ? st == RM_ERR_BUDGET : st == RM_OK && pk && atof(pk + 13) <= (double)b,
              "%d stages at %lld, the least %s: status %d, %s", n, (long long)b, b < (int64_t)least ? "less one" : "itself",
              st, res ? res : err);
        free(res);
    }
    free(c);
}

/* The same for a session: rm_plan_info.min_budget_bytes the same at every
 * budget, compiling at it plans, one byte less does not. */
static rm_status compile_budget(int mlp, const char *budget, size_t *least) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    if (mlp) {
        rm_mlp_config c = {.context = 8, .vocab = 16, .batch = 4, .n_widths = 16};
        for (int i = 0; i < 16; i++) c.widths[i] = 8 + (i * 7) % 24;
        rm_mlp_build(g, &c, &io);
    } else {
        rm_gpt_config c = {.layers = 6, .dim = 32, .heads = 2, .context = 16, .vocab = 64, .batch = 2};
        rm_gpt_build(g, &c, &io);
    }
    rm_options o;
    rm_options_default(&o);
    o.threads = 1, o.dry_run = 1, o.memory_budget = budget;
    rm_session *s = NULL;
    rm_status st = rm_compile(g, &o, &s);
    rm_plan_info p = {0};
    if (st == RM_OK) rm_plan(s, &p);
    /* an infeasible budget names the least in its message: "(N bytes)" */
    const char *m = st == RM_ERR_BUDGET ? strrchr(rm_graph_errmsg(g), '(') : NULL;
    *least = st == RM_OK ? p.min_budget_bytes : m ? strtoull(m + 1, NULL, 10) : 0;
    rm_session_free(s);
    rm_graph_free(g);
    return st;
}

static void session_least(int mlp) {
    const char *budgets[] = {"100%", "30%", "60%", "1000"};
    size_t least = 0, v;
    for (int k = 0; k < 4; k++) {
        rm_status st = compile_budget(mlp, budgets[k], &v);
        if (k == 0) least = v;
        CHECK(v > 0 && v == least && (st == RM_OK || (k > 0 && st == RM_ERR_BUDGET)),
              "%s at budget %s: status %d, least %zu (at 100%%: %zu)",
              mlp ? "MLP" : "GPT", budgets[k], st, v, least);
    }
    char b[32];
    snprintf(b, sizeof b, "%zu", least);
    CHECK(compile_budget(mlp, b, &v) == RM_OK, "%s at its least budget %zu", mlp ? "MLP" : "GPT", least);
    snprintf(b, sizeof b, "%zu", least - 1);
    CHECK(compile_budget(mlp, b, &v) == RM_ERR_BUDGET, "%s one byte below its least budget %zu", mlp ? "MLP" : "GPT",
          least);
}

int main(void) {
    spawner_start();
    chain_least(60, 0);
    chain_least(30, 1);
#ifndef __SANITIZE_ADDRESS__ /* 30 s under ASan; the grouped program runs there in test_planner */
    chain_least(140, 0);
#endif
    session_least(0);
    session_least(1);
    file_claims_more();
    planner_sums();
    free_order();
    dry_run_sessions();
    io_of_another_shape();
    return check_done("test_harden2");
}
