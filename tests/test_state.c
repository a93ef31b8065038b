/* test_state.c: checkpoint files in the library: the checksum against a
 * value computed with Python's hashlib, the optimizer state API, a save and
 * load that resumes a GPT (dropout on) and an MLP with BatchNorm bit for bit,
 * all-or-nothing loads, parameters a file will fill left undrawn
 * (rm_file_mark_loaded), and the writer's removal of a dead writer's temp. */
#include "check.h"
#include "batch.h"
#include "exec/exec.h"
#include "train/safetensors.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

/* The recipe of src/train/checksum.c, computed independently in Python:
 *   hashlib.sha256(b"remat-checksum-1\0" + b"4\0" + per tensor by name ...) */
static void test_digest(void) {
    float b[2] = {1.0f, 2.0f};
    unsigned char a[3] = {1, 2, 3};
    int64_t s = -5, sh_b[1] = {2}, sh_a[1] = {3}, sh_e[2] = {0, 4};
    rm_st_tensor t[4] = {{"b", "F32", 1, sh_b, b, 8, NULL, NULL}, {"a", "U8", 1, sh_a, a, 3, NULL, NULL},
                         {"s", "I64", 0, NULL, &s, 8, NULL, NULL}, {"e", "F32", 2, sh_e, NULL, 0, NULL, NULL}};
    const rm_st_tensor *tp[4] = {&t[0], &t[1], &t[2], &t[3]};
    const char *k[3] = {"z", "k", RM_ST_CHECKSUM_KEY}, *v[3] = {"1", "v", "ignored"};
    char out[RM_ST_CHECKSUM_LEN];
    CHECK(rm_st_digest(4, tp, 3, k, v, out) == RM_OK, "digest");
    CHECK(strcmp(out, "sha256:b1e1ecb53625fe4a11e434d16986cf82302c26b8eb10060e70e44760dc511737") == 0,
          "digest of the known example: %s", out);
    const rm_st_tensor *rev[4] = {&t[3], &t[2], &t[1], &t[0]};
    const char *k2[2] = {"k", "z"}, *v2[2] = {"v", "1"};
    char out2[RM_ST_CHECKSUM_LEN];
    CHECK(rm_st_digest(4, rev, 2, k2, v2, out2) == RM_OK && strcmp(out, out2) == 0,
          "the digest depends on the order: %s", out2);
    CHECK(rm_st_digest(0, NULL, 0, NULL, NULL, out) == RM_OK &&
              strcmp(out, "sha256:7bf81b12663ada3d195662ebe755e8499534f16611442bb584d4664198c704ed") == 0,
          "empty digest %s", out);

    /* written with the checksum, it verifies; one flipped data bit does not */
    char path[512], err[512];
    path_in(path, sizeof path, "digest.safetensors");
    CHECK(rm_st_write_ex(path, 4, t, 2, k, v, 1, err, sizeof err) == RM_OK, "write: %s", err);
    rm_st_file *f = NULL;
    int present = 0;
    CHECK(rm_st_open(path, &f, err, sizeof err) == RM_OK, "open: %s", err);
    CHECK(f && rm_st_verify(f, path, &present, out2, err, sizeof err) == RM_OK && present,
          "verify: %s", err);
    CHECK(f && strcmp(rm_st_meta(f, RM_ST_CHECKSUM_KEY), out2) == 0, "stored checksum");
    rm_st_close(f);
    CHECK(rm_st_write_ex(path, 4, t, 3, k, v, 1, err, sizeof err) == RM_ERR_ARG &&
              strstr(err, "reserved"), "a caller's remat_checksum key: '%s'", err);
    FILE *fp = fopen(path, "r+b");
    CHECK(fp && fseek(fp, -9, SEEK_END) == 0 && fputc(0x40, fp) != EOF && fclose(fp) == 0, "flip");
    CHECK(rm_st_open(path, &f, err, sizeof err) == RM_OK, "open the flipped file: %s", err);
    rm_status st = f ? rm_st_verify(f, path, &present, NULL, err, sizeof err) : RM_ERR_IO;
    CHECK(st == RM_ERR_FORMAT && strstr(err, "checksum mismatch") && strstr(err, path),
          "flipped: %d '%s'", st, err);
    rm_st_close(f);
}

typedef struct run {
    rm_graph *g;
    rm_session *s;
    rm_optim *o;
    rm_model_io io;
} run;

/* mark (NULL-able): a file whose parameters rm_file_mark_loaded marks
 * before rm_compile (*marked counts them); extra: one more parameter, which
 * no file holds. */
static int make_run_marked(run *r, int mlp, rm_optim_kind kind, const char *strategy, const char *mark, int extra,
                           int *marked) {
    memset(r, 0, sizeof *r);
    r->g = rm_graph_new();
    if (mlp) {
        rm_mlp_config c;
        memset(&c, 0, sizeof c);
        c.context = 8, c.vocab = 16, c.batch = 6, c.n_widths = 2, c.widths[0] = 24;
        c.widths[1] = 20, c.dropout = 0.1f, c.batchnorm = 1;
        rm_mlp_build(r->g, &c, &r->io);
    } else {
        rm_gpt_config c = {.layers = 2, .dim = 16, .heads = 2, .context = 8, .vocab = 16, .batch = 3, .dropout = 0.1f};
        rm_gpt_build(r->g, &c, &r->io);
    }
    if (extra) rm_param(r->g, "extra.weight", 1, (int64_t[]){7}, RM_INIT_NORMAL, 0.02f, 0);
    if (mark) {
        char err[512];
        rm_file *f = NULL;
        CHECK(rm_file_open(mark, &f, err, sizeof err) == RM_OK, "open %s: %s", mark, err);
        CHECK(f && rm_file_mark_loaded(f, r->g, marked) == RM_OK, "mark: %s", rm_graph_errmsg(r->g));
        rm_file_close(f);
    }
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.seed = 11;
    o.checkpoint = strategy;
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    oc.kind = kind;
    int ok = rm_compile(r->g, &o, &r->s) == RM_OK && rm_optim_new(r->s, &oc, &r->o) == RM_OK;
    CHECK(ok, "compile: %s", rm_graph_errmsg(r->g));
    return ok;
}

static int make_run(run *r, int mlp, rm_optim_kind kind, const char *strategy) {
    return make_run_marked(r, mlp, kind, strategy, NULL, 0, NULL);
}

static void free_run(run *r) {
    rm_optim_free(r->o);
    rm_session_free(r->s);
    rm_graph_free(r->g);
}

static void train(run *r, int mlp, int from, int to) {
    for (int step = from; step < to; step++) {
        float loss;
        fill(r->s, &r->io, mlp ? 6 : 3, 8, 16, step);
        CHECK(rm_step(r->s, (uint64_t)step, &loss) == RM_OK, "step %d", step);
        CHECK(rm_optim_step(r->o, 1e-2f, NULL) == RM_OK, "update %d", step);
    }
}

/* 6 steps in one go == 3 steps, save, load into a fresh session, 3 more. */
static void test_resume(int mlp, rm_optim_kind kind) {
    const char *what = mlp ? "mlp+batchnorm" : "gpt";
    run a, b, c;
    if (!make_run(&a, mlp, kind, "none") || !make_run(&b, mlp, kind, "blocks") ||
        !make_run(&c, mlp, kind, "revolve:2"))
        return;
    train(&a, mlp, 0, 6);
    train(&b, mlp, 0, 3);
    char path[512], err[512];
    path_in(path, sizeof path, "state.safetensors");
    const char *k[1] = {"note"}, *v[1] = {"test"};
    CHECK(rm_save_state(b.s, b.o, path, 1, k, v, err, sizeof err) == RM_OK, "save: %s", err);
    CHECK(rm_load_state(c.s, c.o, path, err, sizeof err) == RM_OK, "%s load: %s", what, err);
    uint64_t t = 0;
    float *m = NULL, *vv = NULL;
    CHECK(rm_optim_state(c.o, &m, &vv, &t) == RM_OK && t == 3, "%s: %llu updates", what,
          (unsigned long long)t);
    CHECK(kind == RM_OPTIM_ADAMW ? (m && vv) : (!m && !vv), "moments of %s", what);
    train(&c, mlp, 3, 6);
    size_t n = a.g->param_floats;
    CHECK(memcmp(a.s->params, c.s->params, n * sizeof(float)) == 0,
          "%s (%s): resumed parameters differ from the uninterrupted run", what,
          kind == RM_OPTIM_SGD ? "sgd" : "adamw");
    if (kind == RM_OPTIM_ADAMW) {
        float *ma, *va;
        rm_optim_state(a.o, &ma, &va, NULL);
        rm_optim_state(c.o, &m, &vv, NULL);
        const size_t nt = a.g->train_floats; /* moments: trainable parameters only */
        CHECK(memcmp(ma, m, nt * 4) == 0 && memcmp(va, vv, nt * 4) == 0, "%s moments differ", what);
    }
    free_run(&a);
    free_run(&b);
    free_run(&c);
}

/* A load that fails changes nothing: params, moments and count stay. */
static void test_all_or_nothing(void) {
    run a, b;
    if (!make_run(&a, 0, RM_OPTIM_ADAMW, "none") || !make_run(&b, 0, RM_OPTIM_ADAMW, "none"))
        return;
    train(&a, 0, 0, 2);
    train(&b, 0, 0, 1);
    char path[512], err[512];
    path_in(path, sizeof path, "params_only.safetensors");
    CHECK(rm_save_params(a.s, path, 0, NULL, NULL, err, sizeof err) == RM_OK, "save: %s", err);
    size_t n = b.g->param_floats;
    float *before = malloc(n * sizeof *before), *m;
    memcpy(before, b.s->params, n * sizeof *before);
    uint64_t t;
    /* a parameters-only file has a checksum but no moments */
    rm_status st = rm_load_state(b.s, b.o, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "'optimizer_updates' is missing"), "%d '%s'", st,
          err);
    const char *k[1] = {"optimizer_updates"}, *v[1] = {"2"};
    CHECK(rm_save_params(a.s, path, 1, k, v, err, sizeof err) == RM_OK, "save: %s", err);
    st = rm_load_state(b.s, b.o, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "missing tensor 'optimizer.m.transformer.wte.weight'"),
          "%d '%s'", st, err);
    rm_optim_state(b.o, &m, NULL, &t);
    CHECK(memcmp(before, b.s->params, n * sizeof *before) == 0 && t == 1, "a failed load changed "
          "the state");
    /* rm_load_params takes the weights of either kind of file */
    CHECK(rm_load_params(b.s, path, err, sizeof err) == RM_OK, "load params: %s", err);
    CHECK(memcmp(a.s->params, b.s->params, n * sizeof *before) == 0, "weights");
    /* an optimizer of another session is refused */
    CHECK(rm_load_state(b.s, a.o, path, err, sizeof err) == RM_ERR_ARG && strstr(err, "another session's"),
          "foreign optimizer: %s", err);
    CHECK(rm_optim_set_updates(b.o, 7) == RM_OK && rm_optim_state(b.o, NULL, NULL, &t) == RM_OK &&
              t == 7, "set updates");
    free(before);
    free_run(&a);
    free_run(&b);
}

/* rm_file_mark_loaded: the file's parameters are zero after rm_compile,
 * not drawn; the restored run goes on bit for bit as the uninterrupted one;
 * a parameter the file lacks is drawn as without the mark. */
static void test_mark_loaded(int mlp) {
    run a, b, c, d;
    char path[512], err[512];
    path_in(path, sizeof path, "marked.safetensors");
    int n = -1;
    if (!make_run(&a, mlp, RM_OPTIM_ADAMW, "none") || !make_run(&b, mlp, RM_OPTIM_ADAMW, "none")) return;
    train(&a, mlp, 0, 5);
    train(&b, mlp, 0, 2);
    CHECK(rm_save_state(b.s, b.o, path, 0, NULL, NULL, err, sizeof err) == RM_OK, "save: %s", err);
    if (make_run_marked(&c, mlp, RM_OPTIM_ADAMW, "blocks", path, 0, &n)) {
        CHECK(n == rm_param_count(c.g), "mark: %d of %d marked", n, rm_param_count(c.g));
        int zero = 1;
        for (size_t i = 0; i < c.g->param_floats; i++) zero &= c.s->params[i] == 0.0f;
        CHECK(zero, "mark (%s): a marked parameter was drawn", mlp ? "mlp" : "gpt");
        CHECK(rm_load_state(c.s, c.o, path, err, sizeof err) == RM_OK, "load: %s", err);
        train(&c, mlp, 2, 5);
        CHECK(memcmp(a.s->params, c.s->params, a.g->param_floats * sizeof(float)) == 0,
              "mark (%s): the resumed run differs from the uninterrupted one", mlp ? "mlp" : "gpt");
        free_run(&c);
    }
    run e;
    if (make_run_marked(&d, mlp, RM_OPTIM_ADAMW, "none", path, 1, &n) &&
        make_run_marked(&e, mlp, RM_OPTIM_ADAMW, "none", NULL, 1, NULL)) {
        const rm_val x = rm_param_by_name(d.g, "extra.weight"), y = rm_param_by_name(e.g, "extra.weight");
        CHECK(n == rm_param_count(d.g) - 1 && x >= 0 && y >= 0 &&
                  memcmp(rm_value_data(d.s, x), rm_value_data(e.s, y), 7 * sizeof(float)) == 0,
              "mark: a parameter the file lacks was not drawn as without the mark (%d marked)", n);
        free_run(&e);
    }
    rm_file *f = NULL;
    CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK && rm_file_mark_loaded(NULL, d.g, NULL) == RM_ERR_ARG &&
              rm_file_mark_loaded(f, NULL, &n) == RM_ERR_ARG && n == 0, "mark: NULL arguments");
    rm_file_close(f);
    free_run(&d);
    free_run(&a);
    free_run(&b);
}

static int count_entries(const char *needle) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, needle)) n++;
    if (d) closedir(d);
    return n;
}

/* Temp files of dead writers go (for this target or any .safetensors); one
 * of a live process stays, and so does one of another kind of file. */
static void test_stale_temps(void) {
    pid_t child = fork();
    if (child == 0) _exit(0);
    int status;
    waitpid(child, &status, 0); /* its pid is now free: a dead writer */
    char dead[512], live[512], other[512], step[512], path[512], err[512], name[128];
    snprintf(name, sizeof name, ".w.safetensors.tmp.%ld", (long)child);
    path_in(dead, sizeof dead, name);
    snprintf(name, sizeof name, ".w.safetensors.tmp.%ld", (long)getppid());
    path_in(live, sizeof live, name);
    snprintf(name, sizeof name, ".v.bin.tmp.%ld", (long)child);
    path_in(other, sizeof other, name);
    snprintf(name, sizeof name, ".w.step000004.safetensors.tmp.%ld", (long)child);
    path_in(step, sizeof step, name);
    const char *files[4] = {dead, live, other, step};
    for (int i = 0; i < 4; i++) {
        FILE *f = fopen(files[i], "wb");
        if (f) fclose(f);
    }
    float w[2] = {1, 2};
    int64_t sh[1] = {2};
    rm_st_tensor t = {"w", "F32", 1, sh, w, 8, NULL, NULL};
    path_in(path, sizeof path, "w.safetensors");
    CHECK(rm_st_write(path, 1, &t, 0, NULL, NULL, err, sizeof err) == RM_OK, "write: %s", err);
    CHECK(access(dead, F_OK) != 0, "the dead writer's temp file is still there");
    CHECK(access(live, F_OK) == 0, "a live process's temp file was removed");
    CHECK(access(step, F_OK) != 0, "a dead writer's temp file of a step file is still there");
    CHECK(access(other, F_OK) == 0, "a temp file of a non-safetensors file was removed");
    unlink(live);
    unlink(other);
    CHECK(count_entries(".tmp.") == 0, "temp files left");
}

int main(void) {
    if (check_tmpdir(tmpdir, sizeof tmpdir, "test_state")) return 1;
    test_digest();
    test_resume(0, RM_OPTIM_ADAMW);
    test_resume(0, RM_OPTIM_SGD);
    test_resume(1, RM_OPTIM_ADAMW);
    test_all_or_nothing();
    test_mark_loaded(0);
    test_mark_loaded(1);
    test_stale_temps();
    check_rmdir(tmpdir);
    return check_done("test_state");
}
