/* test_paging.c: paging to the scratch file (issue 20). With paging forced
 * on (rm_options.page), the weights and the optimizer's state after a few
 * steps equal a run that pages nothing, bit for bit, dropout on: for
 * activations and for the training state (AdamW moments, parameters), on
 * a chain (GPT) and on models that are not chains (U-ViT's long skips, the
 * encoder-decoder), with and without recomputation; with frozen
 * parameters (paged too, only read) and LoRA adapters, whose PEFT folder
 * and merged weights are the same bytes as well; the figures of what
 * was paged add up; a block changed in the file is caught under
 * verify_recompute; nothing is left in the directory. */
#include "check.h"
#include "scratch_dir.h"
#include "remat.h"
#include "plan/plan.h"
#include "exec/exec.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[200];
static rm_dataset data;

typedef struct cfg {
    const char *model;      /* gpt | uvit | encdec | llama */
    const char *checkpoint; /* NULL: none */
    int page;               /* RM_PAGE_* */
    int fused;
    double budget;          /* budget_fraction (0: none) */
    const char *freeze;     /* frozen by name (NULL: none) */
    int lora;               /* LoRA rank (0: none): every base weight frozen */
} cfg;

typedef struct run {
    rm_graph *g;
    rm_session *s;
    rm_optim *o;
    rm_model_io io;
    int encdec, fused;
} run;

static rm_graph *model_of(const cfg *c, rm_model_io *io) {
    rm_run_info r;
    rm_run_info_default(&r);
    snprintf(r.model, sizeof r.model, "%s", c->model);
    r.layers = 4, r.dim = 32, r.heads = 2, r.context = 16, r.batch = 4, r.dropout = 0.1f;
    r.enc_layers = 1, r.dec_layers = 2;
    r.vocab = strcmp(c->model, "encdec") == 0 ? RM_ENCDEC_VOCAB : 256;
    if (c->freeze) snprintf(r.freeze, sizeof r.freeze, "%s", c->freeze);
    r.lora.rank = c->lora, r.lora.dropout = 0.1f;
    rm_graph *g = rm_graph_new();
    if (g && rm_run_build(&r, g, io, 0) != RM_OK) {
        fprintf(stderr, "build: %s\n", rm_graph_errmsg(g));
        rm_graph_free(g);
        return NULL;
    }
    return g;
}

static int open_run(const cfg *c, int paged, int verify, run *r) {
    memset(r, 0, sizeof *r);
    rm_options o;
    rm_options_default(&o);
    o.threads = 1; /* tiny models: fastest on one thread, and the same bits either way */
    o.seed = 7;
    o.checkpoint = c->checkpoint;
    o.budget_fraction = c->budget;
    o.optim.grad_clip = 0.0f;
    o.fuse_optimizer = c->fused;
    o.verify_recompute = verify;
    if (paged) {
        o.scratch_dir = dir;
        o.page = c->page;
        o.scratch_bandwidth = 1e9; /* no probe: fast tests */
    }
    r->encdec = strcmp(c->model, "encdec") == 0;
    r->fused = c->fused;
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

static float lr_of(uint64_t step) { return 2e-2f / (float)(1 + step); }

static rm_status train(run *r, uint64_t from, uint64_t to) {
    for (uint64_t k = from; k < to; k++) {
        rm_status st = r->encdec ? rm_seq2seq_fill(r->s, &r->io, NULL, 3, k)
                                 : rm_data_fill(r->s, &r->io, &data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 3, k);
        float loss;
        if (st == RM_OK && r->fused) st = rm_optim_set_lr(r->o, lr_of(k));
        if (st == RM_OK) st = rm_step(r->s, k, &loss);
        if (st == RM_OK && !r->fused) st = rm_optim_step(r->o, lr_of(k), NULL);
        if (st != RM_OK) return st;
    }
    return RM_OK;
}

/* Whether files pa and pb hold the same bytes; both removed. */
static int same_files(const char *pa, const char *pb) {
    char *a = NULL, *b = NULL, err[256];
    size_t na = 0, nb = 0;
    int same = rm_read_file(pa, (size_t)1 << 30, &a, &na, err, sizeof err) == RM_OK &&
               rm_read_file(pb, (size_t)1 << 30, &b, &nb, err, sizeof err) == RM_OK && na == nb && memcmp(a, b, na) == 0;
    free(a), free(b);
    remove(pa), remove(pb);
    return same;
}

/* Parameters, moments and update count of r and q, as checkpoint files
 * see them (rm_save_state reads paged state back from the scratch file). */
static int same_state(run *r, run *q, const char *tag) {
    char pa[300], pb[300], err[256];
    snprintf(pa, sizeof pa, "%s/a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/b.safetensors", dir);
    if (rm_save_state(r->s, r->o, pa, 0, NULL, NULL, err, sizeof err) != RM_OK ||
        rm_save_state(q->s, q->o, pb, 0, NULL, NULL, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s: save: %s\n", tag, err);
        return 0;
    }
    return same_files(pa, pb);
}

/* A LoRA model's adapters (a PEFT folder) and merged weights of r and q,
 * the same bytes (paged adapters and base weights read from the file). */
static int same_lora_files(run *r, run *q, const char *tag) {
    char da[300], db[300], pa[400], pb[400], err[256];
    snprintf(da, sizeof da, "%s/adapters_a", dir);
    snprintf(db, sizeof db, "%s/adapters_b", dir);
    if (rm_save_adapters(r->s, da, NULL, 0, err, sizeof err) != RM_OK ||
        rm_save_adapters(q->s, db, NULL, 0, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s: save adapters: %s\n", tag, err);
        return 0;
    }
    snprintf(pa, sizeof pa, "%s/adapter_model.safetensors", da);
    snprintf(pb, sizeof pb, "%s/adapter_model.safetensors", db);
    int same = same_files(pa, pb);
    snprintf(pa, sizeof pa, "%s/adapter_config.json", da), remove(pa);
    snprintf(pb, sizeof pb, "%s/adapter_config.json", db), remove(pb);
    rmdir(da), rmdir(db);
    snprintf(pa, sizeof pa, "%s/merged_a.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/merged_b.safetensors", dir);
    if (rm_save_merged(r->s, pa, 0, NULL, NULL, err, sizeof err) != RM_OK ||
        rm_save_merged(q->s, pb, 0, NULL, NULL, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s: save merged: %s\n", tag, err);
        return 0;
    }
    return same_files(pa, pb) && same;
}

static void test_equal(const cfg *c) {
    char tag[160];
    snprintf(tag, sizeof tag, "%s %s page %d%s%s%s%s", c->model, c->checkpoint ? c->checkpoint : c->budget > 0 ?
             "budget" : "none", c->page, c->fused ? " fused" : "", c->freeze ? " freeze " : "", c->freeze ? c->freeze :
             "", c->lora ? " lora" : "");
    run a, b;
    int ok = open_run(c, 0, 0, &a) && open_run(c, 1, 0, &b);
    CHECK(ok, "%s: open", tag);
    if (ok) {
        rm_status sa = train(&a, 0, 3), sb = train(&b, 0, 3);
        CHECK(sa == RM_OK && sb == RM_OK, "%s: train: %s", tag, rm_session_errmsg(sb != RM_OK ? b.s : a.s));
        CHECK(sa == RM_OK && sb == RM_OK && same_state(&a, &b, tag), "%s: the paged run's state differs", tag);
        CHECK(!c->lora || (sa == RM_OK && sb == RM_OK && same_lora_files(&a, &b, tag)),
              "%s: the paged run's adapters or merged weights differ", tag);
        rm_paging_info pi;
        rm_paging(b.s, &pi);
        CHECK(pi.enabled && pi.out_bytes > 0 && pi.out_bytes_measured == pi.out_bytes &&
                  pi.in_bytes_measured == pi.in_bytes && pi.io_ms > 0 && pi.scratch_bytes >= pi.state_bytes,
              "%s: paged %llu/%llu out, %llu/%llu in, io %.2f ms", tag, (unsigned long long)pi.out_bytes_measured,
              (unsigned long long)pi.out_bytes, (unsigned long long)pi.in_bytes_measured,
              (unsigned long long)pi.in_bytes, pi.io_ms);
        CHECK(!(c->page & RM_PAGE_ACTIVATIONS) || pi.values_paged > 0, "%s: %d values paged", tag, pi.values_paged);
        CHECK(!(c->page & RM_PAGE_MOMENTS) || pi.moments_paged > 0, "%s: %d moments paged", tag, pi.moments_paged);
        CHECK(!(c->page & RM_PAGE_PARAMS) || pi.params_paged > 0, "%s: %d parameters paged", tag, pi.params_paged);
        CHECK(!(c->page & RM_PAGE_PARAMS) || rm_value_data(b.s, rm_param_at(b.g, 0)) == NULL,
              "%s: a paged parameter has no storage in memory (rm_value_data)", tag);
        rm_memory_info mi;
        rm_memory(b.s, &mi);
        CHECK(mi.activation_bytes_measured <= mi.activation_bytes_planned, "%s: measured %zu planned %zu", tag,
              mi.activation_bytes_measured, mi.activation_bytes_planned);
        printf("%s: %d values, %d moments, %d params paged; %.2f MiB out, %.2f MiB in a step; io %.2f ms, waited "
               "%.2f ms\n", tag, pi.values_paged, pi.moments_paged, pi.params_paged, pi.out_bytes / 1048576.0,
               pi.in_bytes / 1048576.0, pi.io_ms, pi.wait_ms);
    }
    close_run(&a);
    close_run(&b);
}

/* A checkpoint file of a paged run resumes exactly in a run that pages and
 * in one that does not, and a file of a run that does not page resumes in
 * one that does: 2 steps, save, load into a new session, 2 more steps,
 * against 4 uninterrupted steps. */
static void test_resume(void) {
    const cfg c = {"gpt", NULL, RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 0};
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/resume.safetensors", dir);
    for (int k = 0; k < 3; k++) {
        const int first_paged = k != 2, second_paged = k != 1;
        run ref, a, b;
        int ok = open_run(&c, 0, 0, &ref) && open_run(&c, first_paged, 0, &a) && open_run(&c, second_paged, 0, &b);
        ok = ok && train(&ref, 0, 4) == RM_OK && train(&a, 0, 2) == RM_OK;
        ok = ok && rm_save_state(a.s, a.o, path, 0, NULL, NULL, err, sizeof err) == RM_OK;
        ok = ok && rm_load_state(b.s, b.o, path, err, sizeof err) == RM_OK && train(&b, 2, 4) == RM_OK;
        CHECK(ok, "resume %d: %s / %s", k, err, rm_session_errmsg(b.s));
        CHECK(ok && same_state(&ref, &b, "resume"), "resume from a run that %s into one that %s: not exact",
              first_paged ? "pages" : "does not page", second_paged ? "pages" : "does not page");
        close_run(&ref), close_run(&a), close_run(&b);
        remove(path);
    }
}

/* REMAT_SCRATCH_FAULT: a full disk or an I/O error fails the step with
 * RM_ERR_IO naming the directory and the bytes; a block changed in the
 * file is caught under verify_recompute. */
static void test_faults(void) {
    const cfg c = {"gpt", NULL, RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS, 1, 0, NULL, 0};
    const char *faults[3] = {"enospc:300", "eio:300", "corrupt:300"};
    const char *want[3] = {"No space left on device", "Input/output error", "changed underneath"};
    for (int k = 0; k < 3; k++) {
        setenv("REMAT_SCRATCH_FAULT", faults[k], 1);
        run r;
        int ok = open_run(&c, 1, k == 2, &r);
        unsetenv("REMAT_SCRATCH_FAULT");
        rm_status st = ok ? train(&r, 0, 3) : RM_ERR_STATE;
        const char *msg = ok ? rm_session_errmsg(r.s) : "";
        CHECK(st == RM_ERR_IO && strstr(msg, want[k]) && strstr(msg, dir), "%s: %d %s", faults[k], st, msg);
        CHECK(k == 2 || strstr(msg, "paging needs"), "%s names the bytes: %s", faults[k], msg);
        printf("%s: %s\n", faults[k], msg);
        close_run(&r);
    }
}

/* The chain's dynamic program with its third way to keep a stage, on
 * disk: with a fast disk it keeps stages on disk where memory is short, its
 * lowering pages those stages' values and lays out within the budget plus
 * the staging; with a slow one it pages nothing. */
static void test_chain_dp(void) {
    const cfg c = {"gpt", NULL, 0, 1, 0, NULL, 0};
    rm_model_io io;
    rm_graph *g = model_of(&c, &io);
    rm_options o;
    rm_options_default(&o);
    o.dry_run = 1, o.fuse_optimizer = 1, o.optim.grad_clip = 0;
    rm_session *sess = NULL;
    if (!g || rm_compile(g, &o, &sess) != RM_OK) { /* (autodiff, as a session does) */
        CHECK(0, "compile");
        return;
    }
    rm_memory_info mi;
    rm_memory(sess, &mi);
    const int64_t budget = (int64_t)mi.activation_bytes_planned / 2;
    int nv = 0;
    for (int k = 0; k < 2; k++) {
        char *values = calloc(4096, 1), err[256];
        rm_schedule sch;
        /* a fast disk (1 ms moves a TB), then a slow one (1 byte a ms) */
        rm_status rc = rm_schedule_chain_paged(g, budget, 1, NULL, k ? 1.0 : 1e-12, 0, 1e9, &sch, values, err, sizeof err);
        int paged = 0;
        for (int v = 0; v < 4096; v++) paged += values[v];
        CHECK(rc == RM_OK, "chain DP with paging: %s", err);
        if (k == 0) nv = paged;
        CHECK(k == 0 ? paged > 0 : paged == 0, "chain DP, %s disk: %d values on disk", k ? "slow" : "fast", paged);
        rm_schedule_free(&sch);
        free(values);
    }
    printf("chain DP at half of store-all's %zu bytes: %d values kept on disk with a fast disk\n",
           mi.activation_bytes_planned, nv);
    rm_session_free(sess);
    rm_graph_free(g);
}

/* A session's programs can change after its scratch file's queue started
 * (the profiled re-plan under a budget or limit may page more than the
 * first plan): rm_session_scratch_start then grows the queue, between
 * steps, carrying the checksums of the regions written so far, and the
 * session trains on bit for bit. (End to end, at the least budget:
 * tests/test_paging.sh.) */
static void test_queue_grows(void) {
    const cfg c = {"gpt", NULL, RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS, 1, 0, NULL, 0};
    run a, b;
    int ok = open_run(&c, 0, 1, &a) && open_run(&c, 1, 1, &b) && train(&a, 0, 1) == RM_OK && train(&b, 0, 1) == RM_OK;
    CHECK(ok, "queue: open and train: %s", b.s ? rm_session_errmsg(b.s) : "");
    if (ok) {
        rm_ioq *q = &b.s->page.q;
        const int n_io = b.s->train.n_io, n_regions = b.s->train.n_regions;
        CHECK(q->running && q->n_req >= n_io && q->n_regions >= n_regions && q->hashed[0],
              "queue: %d slots, %d regions for %d transfers, %d regions", q->n_req, q->n_regions, n_io, n_regions);
        const uint64_t h0 = q->hash[0];
        b.s->train.n_io = n_io + 7, b.s->train.n_regions = n_regions + 5; /* a program that moves more */
        rm_status rc = rm_session_scratch_start(b.s);
        b.s->train.n_io = n_io, b.s->train.n_regions = n_regions;
        CHECK(rc == RM_OK && q->running && q->n_req == n_io + 7 && q->n_regions == n_regions + 5,
              "queue: grown to %d slots, %d regions (want %d, %d)", q->n_req, q->n_regions, n_io + 7, n_regions + 5);
        CHECK(q->hashed[0] && q->hash[0] == h0, "queue: the checksums written before it grew are lost");
        CHECK(rm_session_scratch_start(b.s) == RM_OK && q->n_req == n_io + 7, "queue: started again without need");
        rc = train(&a, 1, 3);
        CHECK(rc == RM_OK && train(&b, 1, 3) == RM_OK && same_state(&a, &b, "queue"),
              "queue: after it grew, the paged run differs: %s", rm_session_errmsg(b.s));
    }
    close_run(&a), close_run(&b);
}

int main(void) {
    char err[256];
    if (scratch_tmpdir(dir, sizeof dir, "paging") != 0) return 1;
    if (rm_data_load_corpus(&data, err, sizeof err) != RM_OK || rm_data_split(&data, 0.1, 4, 16, err, sizeof err) != RM_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    const cfg cases[] = {
        {"gpt", NULL, RM_PAGE_ACTIVATIONS, 0, 0, NULL, 0},
        {"gpt", "blocks", RM_PAGE_ACTIVATIONS, 0, 0, NULL, 0},
        {"uvit", NULL, RM_PAGE_ACTIVATIONS, 0, 0, NULL, 0},
        {"encdec", "segments:2", RM_PAGE_ACTIVATIONS, 0, 0, NULL, 0},
        {"gpt", NULL, RM_PAGE_MOMENTS, 1, 0, NULL, 0},
        {"gpt", "sqrt", RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 0},
        {"uvit", "blocks", RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 0},
        {"encdec", NULL, RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 0},
        /* frozen parameters: never written, paged all the same (only read) */
        {"gpt", NULL, RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, "transformer.h.0,transformer.wte", 0},
        {"llama", "sqrt", RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 4},
        {"uvit", NULL, RM_PAGE_MOMENTS | RM_PAGE_PARAMS, 1, 0, NULL, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) test_equal(&cases[i]);
    test_resume();
    test_queue_grows();
    test_faults();
    test_chain_dp();
    CHECK(scratch_dir_entries(dir) == 0, "nothing left in %s", dir);
    rm_data_free(&data);
    check_rmdir(dir);
    return check_done("test_paging");
}
