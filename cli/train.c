/* train.c: `remat train`. Loads data, builds and compiles the model (or
 * resumes a checkpoint file), runs the steps (no allocation inside the
 * loop), evaluates, reports, saves checkpoint files. SIGINT and SIGTERM
 * finish the current step, save and exit 128+signal. */
#include "args.h"
#include "bench.h"
#include "ckptfile.h"
#include "guard.h"
#include "hf.h"
#include "limit.h"
#include "paths.h"
#include "stop.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Parameter elements: all of them, or (trainable) those that train. */
static long long count_params(const rm_graph *g, int trainable) {
    long long n = 0;
    for (int i = 0; i < rm_param_count(g); i++)
        if (!trainable || rm_param_trainable(g, rm_param_at(g, i))) n += rm_numel(g, rm_param_at(g, i));
    return n;
}

typedef struct trainer {
    cli_args *a;
    rm_graph *g;
    rm_session *s;
    rm_model_io io;
    rm_dataset data;
    int encdec;             /* --model encdec: batches of (source, target) pairs */
    rm_pairs pairs;         /* its --data (n = 0: the built-in reverse task) */
    rm_sampler sampler;
    rm_optim *opt;
    rm_lr_schedule lr;
    rm_file *resume;        /* the file of --resume, open until its state is loaded */
    rm_hf *hf;              /* --init DIR (a Hugging Face folder), open until its weights are loaded */
    rm_run_info resumed;    /* and the run it describes */
    uint64_t start;         /* the first step this process runs */
    int64_t batch_offset;   /* next batch index - next step (0 unless a file says otherwise) */
    double *times, *overheads; /* per step run (the last STEP_SAMPLES): ms and measured recompute overhead */
    double overhead_median; /* measured recompute overhead, median over steps */
    double step_ms_min, step_ms_max; /* the spread of the step times the median is taken over */
    double step_ms_first, step_ms_steady; /* the run's first step (it faults the arena's pages in), the median
                                           * of the others (all of them when the first is not kept) */
    int tty;                /* progress on one rewritten line */
    cli_divergence div;     /* the recent losses (guard.h) */
    int threads;            /* per rank */
    double comm_ms;         /* the steps' wait for gradient communication after the backward, summed */
    double lib_ms;          /* the last step's time inside rm_step (rm_step_accumulate) */
    void *gx;               /* --micro-batches: the global batch's inputs (tokens or features) */
    int32_t *gy;            /* and targets */
    cli_limit limit;        /* --memory-limit (limit.h) */
    cli_paging paging_ms;   /* --scratch: what the steps paged (args.h) */
    int bw_resumed;         /* --scratch: the bandwidth of the --resume file, not measured */
} trainer;

/* encdec evaluates on 20 batches drawn with another seed than training's
 * (from the same pairs with --data: a pairs file has no held-out part). */
#define ENCDEC_EVAL_SEED 0x6576616cu
/* Step times kept for the report's median, min and max: the last 65536 */
#define STEP_SAMPLES 65536

static const rm_pairs *pairs_of(const trainer *t) { return t->pairs.n ? &t->pairs : NULL; }

/* Mean loss over up to 20 validation batches, forward only (no dropout). */
static int evaluate(trainer *t, float *out) {
    if (t->encdec) {
        double sum = 0;
        for (uint64_t k = 0; k < 20; k++) {
            float l;
            if (rm_seq2seq_fill(t->s, &t->io, pairs_of(t), t->a->seed ^ ENCDEC_EVAL_SEED, k) != RM_OK ||
                rm_forward(t->s, &l) != RM_OK)
                return 0;
            sum += l;
        }
        *out = (float)(sum / 20);
        return 1;
    }
    if (rm_data_num_batches(&t->data, RM_DATA_VAL, t->a->batch, t->a->context) == 0) return 0;
    if (rm_evaluate(t->s, &t->io, &t->data, 20, out) == RM_OK) return 1;
    /* no mean loss (a batch's loss is not finite): said, not printed as nan */
    if (!t->a->quiet) cli_notice("warning", "no validation loss: %s", rm_session_errmsg(t->s));
    return 0;
}

static void print_progress(int tty, int step, int steps, float loss, double ms, double tok_s, double act_mib) {
    double eta = (steps - step) * ms / 1000.0;
    if (tty)
        fprintf(stderr, "\rstep %d/%d | loss %.4f | %.1f ms/step | %.0f tok/s | act %.1f MiB | ETA %.0fs   ", step,
                steps, loss, ms, tok_s, act_mib, eta);
    else
        printf("step %d/%d loss %.4f %.1f ms/step %.0f tok/s act %.1f MiB\n", step, steps, loss, ms, tok_s, act_mib);
}

static int write_report(const trainer *t, float final_loss, float val_loss, int have_val, double median_ms,
                        double tok_s) {
    const cli_args *a = t->a;
    rm_memory_info m;
    rm_memory(t->s, &m);
    rm_plan_info p;
    rm_plan(t->s, &p);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    char err[600];
    rm_out *o;
    if (rm_out_open(a->report, &o, err, sizeof err) != RM_OK) return cli_fail(1, "--report: %s", err);
    FILE *f = rm_out_file(o);
    char val[32], fin[32], frozen[256]; /* JSON has no NaN: no value is null (e.g. --steps 0) */
    cli_frozen_summary(t->g, frozen, sizeof frozen);
    if (have_val) snprintf(val, sizeof val, "%.6f", (double)val_loss);
    else snprintf(val, sizeof val, "null");
    if (isfinite(final_loss)) snprintf(fin, sizeof fin, "%.6f", (double)final_loss);
    else snprintf(fin, sizeof fin, "null");
    fprintf(f,
            "{\n  \"model\": \"%s\",\n  \"checkpoint\": \"%s\",\n  \"steps\": %d,\n  \"final_loss\": %s,\n"
            "  \"val_loss\": %s,\n  \"step_ms_median\": %.3f,\n  \"tokens_per_s\": %.1f,\n"
            "  \"activation_bytes_planned\": %zu,\n  \"activation_bytes_measured\": %zu,\n"
            "  \"activation_arena_bytes\": %zu,\n  \"param_bytes\": %zu,\n  \"grad_bytes\": %zu,\n"
            "  \"optimizer_bytes\": %zu,\n  \"max_rss_bytes\": %ld,\n  \"threads\": %d,\n  \"blas\": %s,\n"
            "  \"recompute_flops\": %.0f,\n  \"forward_flops\": %.0f,\n  \"backward_flops\": %.0f,\n"
            "  \"predicted_overhead\": %.4f,\n  \"measured_overhead\": %.4f,\n"
            "  \"ms_forward\": %.3f,\n  \"ms_recompute\": %.3f,\n  \"ms_backward\": %.3f,\n"
            "  \"memory_budget_bytes\": %zu,\n  \"store_all_bytes\": %zu,\n  \"min_budget_bytes\": %zu,\n"
            "  \"step_ms_min\": %.3f,\n  \"step_ms_max\": %.3f,\n  \"ranks\": %d,\n  \"shard_optimizer\": %s,\n"
            "  \"comm_wait_ms\": %.3f,\n  \"fuse_optimizer\": %s,\n  \"grad_arena_bytes\": %zu,\n"
            "  \"params\": %lld,\n  \"trainable_params\": %lld,\n  \"frozen\": \"%s\",\n"
            "  \"step_ms_first\": %.3f,\n  \"step_ms_steady\": %.3f,\n  \"precision\": \"%s\",\n"
            "  \"bf16_kernel\": \"%s\"",
            a->model, p.strategy, a->steps, fin, val, median_ms, tok_s, m.activation_bytes_planned, m.activation_bytes_measured,
            m.activation_arena_bytes, m.param_bytes, m.grad_bytes,
            rm_optim_bytes(t->opt), ru.ru_maxrss * 1024L, t->threads, rm_gemm_has_blas() ? "true" : "false",
            p.flops_recompute, p.flops_forward, p.flops_backward, p.predicted_overhead, t->overhead_median,
            p.ms_forward, p.ms_recompute, p.ms_backward, p.budget_bytes, p.store_all_bytes, p.min_budget_bytes,
            t->step_ms_min, t->step_ms_max, cli_dist_size(), a->shard_optimizer && cli_dist_size() > 1 ? "true" : "false",
            a->steps > (int)t->start ? t->comm_ms / (a->steps - (int)t->start) : 0.0,
            a->fuse_optimizer ? "true" : "false", m.grad_arena_bytes, count_params(t->g, 0), count_params(t->g, 1),
            frozen, t->step_ms_first, t->step_ms_steady, a->precision, rm_bf16_kernel());
    cli_paging_report(t->s, &t->paging_ms, median_ms, a->micro_batches > 1 ? a->micro_batches : 1, t->bw_resumed, f);
    fputs("\n}\n", f);
    if (rm_out_close(o, 1, err, sizeof err) != RM_OK) /* at the end: say what was kept */
        return cli_fail(1, "--report: %s%s%s%s", err, a->save ? "; the state is saved in '" : "", a->save ? a->save : "",
                        a->save ? "'" : a->quiet ? "" : "; the figures are in the summary above");
    return 0;
}

/* The stop request (cli/stop.c), read by the loop: the only thing the handler sets. */
#define stop_signal cli_stop_signal
#define stop_by_parent cli_stop_by_parent

/* The first parameter that is not finite, as a message; 0 if none. */
static int nonfinite_param(const trainer *t, const char *path, uint64_t step) {
    for (int i = 0; i < rm_param_count(t->g); i++) {
        rm_val v = rm_param_at(t->g, i);
        if (rm_param_frozen(t->g, v)) continue; /* never written (and maybe kept in 2 bytes) */
        const float *w = rm_value_data(t->s, v);
        for (int64_t e = 0, n = rm_numel(t->g, v); w && e < n; e++)
            if (!isfinite(w[e]))
                return cli_fail(1, "training diverged: parameter '%s' is %g after step %llu; '%s' was not written",
                                rm_name(t->g, v), (double)w[e], (unsigned long long)step, path);
    }
    return 0;
}

/* Writes the training state after `step` steps to path; never parameters
 * that are not finite (the file keeps its last good state). Under mpirun it
 * is collective: every rank gathers the sharded moments, rank 0 checks and
 * writes, and every rank returns rank 0's outcome (agreed: no rank ends the
 * job while rank 0 writes, and none says "saved" for a file not written). */
static int save_state(const trainer *t, const char *path, uint64_t step) {
    rm_run_info r;
    char err[512];
    const char *data = t->a->data ? t->a->data : t->encdec ? "<reverse>" : "<corpus>";
    cli_run_info(t->a, data, t->data.n, step, (uint64_t)((int64_t)step + t->batch_offset), &r);
    int rc = cli_dist_rank() == 0 ? nonfinite_param(t, path, step) : 0;
    if (rm_optim_unshard(t->opt) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(t->s));
    const char *keys[5], *values[5]; /* the divergence rule's state: a resumed run is judged as one */
    char window[DIV_WINDOW * 16], run[16], reference[32], wbps[CLI_BPS_META], rbps[CLI_BPS_META];
    cli_divergence_meta(&t->div, keys, window, run, reference, values);
    int n_meta = 3;
    if (t->a->scratch) cli_paging_meta(t->s, wbps, rbps); /* and the scratch bandwidth the plan assumed */
    if (t->a->scratch && *wbps)
        keys[3] = "scratch_write_bps", values[3] = wbps, keys[4] = "scratch_read_bps", values[4] = rbps, n_meta = 5;
    if (!rc && cli_dist_rank() == 0 && rm_save_run(t->s, t->opt, path, &r, n_meta, keys, values, err, sizeof err) != RM_OK)
        rc = cli_fail(1, "%s", err);
    rm_optim_reshard(t->opt);
    rc = cli_dist_from_rank0(rc);
    if (rc) cli_dist_agreed();
    return rc;
}

/* Usage errors found from the flags alone. */
static int check_flags(const cli_args *a) {
    if ((a->save_every || cli_given(a, "--keep")) && !a->save)
        return cli_fail(2, "--save-every and --keep need --save PATH (the step files are named after it)");
    if (cli_given(a, "--keep") && !a->save_every)
        return cli_fail(2, "--keep counts the step files of --save-every; give --save-every N too");
    if (a->resume && a->init)
        return cli_fail(2, "--resume and --init cannot be combined (--resume loads the weights too)");
    if (cli_given(a, "--trace-step") && !a->trace)
        return cli_fail(2, "--trace-step chooses the step of --trace FILE.json: add --trace");
    if (cli_dist_size() == 1)
        for (int i = 0; i < 2; i++)
            if (cli_given(a, i ? "--no-overlap" : "--shard-optimizer"))
                cli_notice("warning", "%s is for several ranks (mpirun -np P remat train ...); one process "
                              "has nothing to %s", i ? "--no-overlap" : "--shard-optimizer", i ? "overlap" : "shard");
    return 0;
}

/* A step file of --save numbered after the step this run starts from is
 * another run's (or, resuming, of the run from later than where this one
 * resumes): this run's step files would replace it, or --keep delete it. */
static int check_step_files(const trainer *t) {
    char found[4096];
    const cli_args *a = t->a;
    if (!a->save || !a->save_every || !cli_step_file_after(a->save, t->start, found, sizeof found)) return 0;
    return cli_fail(2, "--save '%s': the step file '%s' of another run is there (after step %llu, where this run "
                    "starts): this run's step files (--save-every) would replace it%s; give another --save, move "
                    "that run's step files away, or --resume the newest of them to continue it", a->save, found,
                    (unsigned long long)t->start, a->keep ? " and --keep delete that run's" : "");
}

/* Opens the file of --resume and takes the model and training flags from
 * it; the state itself is loaded once the session exists. */
static int open_resume(trainer *t) {
    cli_args *a = t->a;
    char err[512], hint[600];
    int present = 0, rc;
    cli_hf_hint(a->resume, hint, sizeof hint);
    if (rm_file_open(a->resume, &t->resume, err, sizeof err) != RM_OK ||
        rm_file_verify(t->resume, &present, NULL, err, sizeof err) != RM_OK)
        return cli_fail(1, "--resume: %s%s", err, hint);
    if (!present)
        return cli_fail(1, "'%s': no checksum (metadata 'remat_checksum'): not a checkpoint file of remat train "
                        "(--init loads the weights of any file)%s", a->resume, hint);
    if (rm_file_run_info(t->resume, &t->resumed, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    if ((rc = cli_resume_args(a, &t->resumed, a->resume)) != 0) return rc;
    t->start = t->resumed.step;
    t->batch_offset = (int64_t)(t->resumed.data_position - t->resumed.step);
    if (cli_divergence_load(&t->div, rm_file_meta(t->resume, "divergence_window"),
                            rm_file_meta(t->resume, "divergence_run"), rm_file_meta(t->resume, "divergence_reference")))
        cli_notice("note", "'%s': its divergence_* metadata is malformed; the divergence rule starts "
                   "from this run's first loss", a->resume);
    if (t->start > (uint64_t)a->steps)
        return cli_fail(2, "'%s' is at step %llu, past --steps %d (--steps is the step count to reach, "
                        "counted from the start of training)", a->resume, (unsigned long long)t->start, a->steps);
    return 0;
}

static int load_data(trainer *t) {
    const cli_args *a = t->a;
    t->encdec = strcmp(a->model, "encdec") == 0; /* after --resume took the model from its file */
    int rc = cli_load_data(a, &t->data, &t->pairs);
    if (rc) return rc;
    if (t->encdec) t->data.n = t->pairs.n; /* for the run's metadata: the number of pairs */
    else if (t->resume && t->resumed.data_tokens != t->data.n)
        cli_notice("note", "'%s' was trained on %llu tokens of '%s'; this run has %zu tokens of '%s'",
                   a->resume, (unsigned long long)t->resumed.data_tokens, t->resumed.data, t->data.n, t->data.name);
    return 0;
}

/* Graph, session, optimizer; then the weights of --init or the state of --resume. */
static int build_session(trainer *t) {
    const cli_args *a = t->a;
    char err[512];
    rm_status st;
    rm_run_info r;
    t->g = rm_graph_new();
    if (!t->g) return cli_fail(1, "out of memory");
    cli_args local = *a; /* under mpirun each rank's model holds batch/ranks rows */
    local.batch = a->batch / cli_dist_size() / a->micro_batches;
    if ((st = cli_build_model(&local, t->g, &t->io, 0)) != RM_OK) /* a resumed model is the file's: exit 1 */
        return a->resume ? cli_fail(1, "'%s': %s", a->resume, rm_graph_errmsg(t->g))
                                            : cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(t->g));
    if (count_params(t->g, 1) == 0 && a->resume) /* the file's metadata chose what is frozen, not a flag */
        return cli_fail(1, "'%s': its %s metadata leaves no parameter to train: a file remat train wrote never "
                        "says so (edited?); resume from another file", a->resume, a->train_only ? "train_only" : "freeze");
    if (count_params(t->g, 1) == 0)
        return cli_fail(2, "%s leaves no parameter to train: freeze fewer", a->train_only ? "--train-only" : "--freeze");
    int rc = cli_frozen_store(a, t->g, t->hf, t->resume);
    if (rc) return rc;
    if (t->hf && rm_hf_mark_loaded(t->hf, t->g, NULL) != RM_OK) return cli_fail(1, "%s", rm_graph_errmsg(t->g));
    /* a remat file (--resume, --init FILE) against the model; a Hugging Face folder was checked at open */
    if (a->resume || (a->init && !t->hf)) rc = cli_check_weights(t->resume, a->resume ? a->resume : a->init, t->g);
    if (rc) return rc;
    rm_options o;
    if ((rc = cli_options(a, a->memory_budget, &o)) != 0) return rc;
    t->bw_resumed = cli_paging_resumed(a, t->resume, &o); /* plans the paging as the run did before */
    if (!a->threads && cli_dist_size() > 1) o.threads = cli_dist_threads();
    t->threads = o.threads ? o.threads : rm_default_threads();
    cli_run_info(a, "", 0, 0, 0, &r);
    o.optim = r.optim; /* the session knows its optimizer */
    o.fuse_optimizer = a->fuse_optimizer;
    o.accumulate = a->micro_batches > 1;
    if ((rc = cli_limit_options(a, &o, &t->limit)) != 0) return rc; /* last: it measures the RSS */
    if ((st = rm_compile(t->g, &o, &t->s)) != RM_OK)
        return st == RM_ERR_BUDGET && t->limit.limit ? cli_limit_refused(&t->limit, rm_graph_errmsg(t->g))
                                                     : cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(t->g));
    if (!a->quiet) cli_limit_print(&t->limit, t->s, stdout);
    if (*rm_plan_notes(t->s)) fputs(rm_plan_notes(t->s), stderr);
    if (!a->quiet) cli_precision_note(a);
    if (a->print_plan && cli_dist_rank() == 0) rm_print_plan(t->s, stdout);
    int flags = (a->shard_optimizer ? RM_DIST_SHARD : 0) | (a->no_overlap ? RM_DIST_BLOCKING : 0);
    if (cli_dist_attach(t->s, flags) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(t->s));
    if (t->hf) {
        if ((rc = cli_hf_load(t->hf, t->s, a)) != 0) return rc;
        rm_hf_close(t->hf); /* closes its files */
        t->hf = NULL;
    } else if (a->init && rm_load_params(t->s, a->init, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    if (rm_optim_new(t->s, NULL, &t->opt) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(t->s));
    t->lr = r.lr;
    if (t->resume) {
        if (rm_optim_unshard(t->opt) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(t->s));
        st = rm_file_restore(t->resume, t->s, t->opt, err, sizeof err);
        rm_optim_reshard(t->opt);
        if (st != RM_OK) return cli_fail(1, "%s", err);
        rm_file_close(t->resume); /* it holds the file open */
        t->resume = NULL;
    }
    if (a->micro_batches > 1) { /* the whole batch, read once per step; micro-batch j copies its rows */
        int mlp = strcmp(a->model, "mlp") == 0;
        t->gx = malloc((size_t)a->batch * a->context * 4);
        t->gy = malloc((size_t)a->batch * (mlp ? 1 : a->context) * 4);
        if (!t->gx || !t->gy) return cli_fail(1, "out of memory");
    }
    int n_run = a->steps - (int)t->start;
    if (n_run > STEP_SAMPLES) n_run = STEP_SAMPLES; /* --steps 2^30 would ask for 16 GiB of timings */
    t->times = malloc(sizeof *t->times * (size_t)(n_run > 0 ? n_run : 1));
    t->overheads = malloc(sizeof *t->overheads * (size_t)(n_run > 0 ? n_run : 1));
    if (!t->times || !t->overheads) return cli_fail(1, "out of memory");
    return cli_trace_arm(a, t->s, (int)t->start);
}

/* For messages: a budget plans the strategy itself. */
static void strategy_name(const cli_args *a, char *out, size_t cap) {
    if (a->memory_budget) snprintf(out, cap, "auto (--memory-budget %s)", a->memory_budget);
    else if (a->memory_limit && strcmp(a->checkpoint, "none") == 0)
        snprintf(out, cap, "auto (--memory-limit %s)", a->memory_limit);
    else snprintf(out, cap, "%s", a->checkpoint);
}

static void print_header(const trainer *t) {
    const cli_args *a = t->a;
    rm_memory_info m;
    char strategy[128];
    rm_memory(t->s, &m);
    strategy_name(a, strategy, sizeof strategy);
    char trainable[64] = "";
    if (count_params(t->g, 1) < count_params(t->g, 0))
        snprintf(trainable, sizeof trainable, ", %lld trainable", count_params(t->g, 1));
    printf("remat: %s, %lld params%s (%.1f MiB), activations %.1f MiB planned (arena %.1f MiB), "
           "checkpoint=%s, %d threads%s, %s\n",
           a->model, count_params(t->g, 0), trainable, m.param_bytes / 1048576.0, m.activation_bytes_planned / 1048576.0,
           m.activation_arena_bytes / 1048576.0, strategy, t->threads, cli_dist_size() > 1 ? " per rank" : "",
           rm_gemm_has_blas() ? "OpenBLAS" : "portable GEMM");
    if (cli_dist_size() > 1)
        printf("data parallel: %d ranks x %d rows (global batch %d)%s\n", cli_dist_size(), a->batch / cli_dist_size(),
               a->batch, a->shard_optimizer ? ", optimizer state sharded (ZeRO-1)" : "");
    if (a->resume) printf("resumed %s at step %llu of %d\n", a->resume, (unsigned long long)t->start, a->steps);
}

/* The periodic step file after `done` steps, and the pruning of old ones. */
static int save_step_file(const trainer *t, uint64_t done) {
    const cli_args *a = t->a;
    char path[4096];
    int rc;
    if (!cli_step_path(a->save, done, path, sizeof path)) /* checked before step 0: not expected */
        return cli_fail(1, "cannot save step %llu: the path '%s' is too long", (unsigned long long)done, a->save);
    if ((rc = save_state(t, path, done)) != 0) return rc;
    if (cli_dist_rank() == 0) cli_prune_step_files(a->save, a->keep, done);
    if (!a->quiet) printf("%ssaved %s\n", t->tty ? "\n" : "", path);
    return 0;
}

/* Micro-batch j's rows, copied from the global batch the trainer read. */
static rm_status fill_rows(void *user, rm_session *s, int j, int64_t row) {
    const trainer *t = user;
    const cli_args *a = t->a;
    const int mlp = strcmp(a->model, "mlp") == 0, b = a->batch / cli_dist_size() / a->micro_batches;
    const size_t xrow = (size_t)a->context * 4, yrow = (size_t)(mlp ? 1 : a->context) * 4;
    (void)j;
    memcpy(rm_value_data(s, mlp ? t->io.features : t->io.tokens), (char *)t->gx + row * xrow, b * xrow);
    memcpy(rm_value_data(s, t->io.targets), (char *)t->gy + row * yrow, b * yrow);
    return RM_OK;
}

/* One step as --micro-batches K micro-batches of b rows on each of P
 * ranks: rank r's micro-batch j is rows [(r K + j) b, ...) of batch k, its
 * loss gradient scaled by 1/(P K); the gradients add up, then over the
 * ranks (rm_step_accumulate; docs/SCALING.md). */
static int micro_step(trainer *t, int s, uint64_t batch, float *loss) {
    const cli_args *a = t->a;
    const int mlp = strcmp(a->model, "mlp") == 0;
    char err[512];
    rm_status st = mlp ? rm_data_batch_mlp(&t->data, RM_DATA_TRAIN, t->sampler, a->seed, batch, a->batch, a->context,
                                           a->vocab, t->gx, t->gy, err, sizeof err)
                       : rm_data_batch(&t->data, RM_DATA_TRAIN, t->sampler, a->seed, batch, a->batch, a->context, t->gx,
                                       t->gy, err, sizeof err);
    if (st != RM_OK) return cli_fail(1, "%s", err);
    double t0 = now_ms();
    if (rm_step_accumulate(t->s, (uint64_t)s, a->micro_batches, fill_rows, t, loss) != RM_OK)
        return cli_fail(1, "step %d: %s", s, rm_session_errmsg(t->s));
    t->lib_ms = now_ms() - t0;
    return 0;
}

/* Step s on batch `batch` in one piece; fused, the update runs inside
 * rm_step, at this step's learning rate. */
static int whole_step(trainer *t, int s, uint64_t batch, float *loss) {
    const cli_args *a = t->a;
    rm_status st = t->encdec ? rm_seq2seq_fill(t->s, &t->io, pairs_of(t), a->seed, batch)
                             : rm_data_fill(t->s, &t->io, &t->data, RM_DATA_TRAIN, t->sampler, a->seed, batch);
    if (st != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(t->s));
    if (a->fuse_optimizer && rm_optim_set_lr(t->opt, rm_lr_at(&t->lr, (uint64_t)s)) != RM_OK)
        return cli_fail(1, "step %d: %s", s, rm_session_errmsg(t->s));
    double t0 = now_ms();
    if (rm_step(t->s, (uint64_t)s, loss) != RM_OK) return cli_fail(1, "step %d: %s", s, rm_session_errmsg(t->s));
    t->lib_ms = now_ms() - t0;
    return 0;
}

/* Runs steps until --steps or a signal; *step is where the run stands. */
static int run_steps(trainer *t, int *step, float *loss, float *val_loss, int *have_val) {
    const cli_args *a = t->a;
    int rc;
    double tokens_per_step = (double)a->batch * (strcmp(a->model, "mlp") == 0 ? 1 : a->context);
    double t_start = now_ms();
    for (*step = (int)t->start; *step < a->steps; ++*step) {
        /* a signal to any rank stops every rank after the same step */
        int sig = cli_dist_any(stop_signal);
        if (sig) {
            stop_signal = sig;
            break;
        }
        int s = *step, i = s - (int)t->start;
        double t0 = now_ms();
        uint64_t batch = (uint64_t)((int64_t)s + t->batch_offset);
        char why[256];
        if ((rc = a->micro_batches > 1 ? micro_step(t, s, batch, loss) : whole_step(t, s, batch, loss)) != 0)
            return rc;
        /* before the update (fused: after it, but the state is not saved either way) */
        if (cli_diverged(&t->div, s, *loss, why, sizeof why))
            return cli_fail(1, "%s; %s (try a lower --lr)", why,
                            a->save ? "the --save file was not written" : "nothing was saved");
        if (!a->fuse_optimizer && rm_optim_step(t->opt, rm_lr_at(&t->lr, (uint64_t)s), NULL) != RM_OK)
            return cli_fail(1, "step %d: %s", s, rm_session_errmsg(t->s));
        t->times[i % STEP_SAMPLES] = now_ms() - t0;
        t->overheads[i % STEP_SAMPLES] = rm_step_overhead(t->s);
        t->comm_ms += rm_step_comm_ms(t->s);
        cli_paging_step(&t->paging_ms, t->s, i, t->times[i % STEP_SAMPLES] - t->lib_ms);
        if (!a->quiet && (t->tty || s % 10 == 0 || s == a->steps - 1)) {
            rm_memory_info m;
            double avg = (now_ms() - t_start) / (i + 1);
            rm_memory(t->s, &m);
            print_progress(t->tty, s + 1, a->steps, *loss, t->times[i % STEP_SAMPLES], tokens_per_step * 1000.0 / avg,
                           m.activation_bytes_measured / 1048576.0);
        }
        if (a->eval_every > 0 && (s + 1) % a->eval_every == 0 && evaluate(t, val_loss)) {
            *have_val = 1;
            if (!a->quiet) printf("%sstep %d val loss %.4f\n", t->tty ? "\n" : "", s + 1, *val_loss);
        }
        if (a->save_every > 0 && (s + 1) % a->save_every == 0 && (rc = save_step_file(t, (uint64_t)s + 1)) != 0)
            return rc;
    }
    if (t->tty) fputc('\n', stderr);
    return 0;
}

static void print_summary(const trainer *t, int n_done, float loss, float val_loss, int have_val, double median,
                          double tok_s) {
    const cli_args *a = t->a;
    rm_memory_info m;
    rm_plan_info p;
    char strategy[128];
    rm_memory(t->s, &m);
    rm_plan(t->s, &p);
    strategy_name(a, strategy, sizeof strategy);
    printf("done: %d steps", a->steps);
    if (a->resume) printf(" (%d after resuming)", n_done);
    if (isfinite(loss)) printf(", final loss %.4f", loss);
    else printf(", none run now: no final loss or step time"); /* --steps 0, or --resume at --steps already */
    if (have_val) printf(", val loss %.4f", val_loss);
    if (isfinite(loss)) printf(", %.1f ms/step median, %.0f tok/s", median, tok_s);
    printf("\n");
    char grads[96];
    if (a->fuse_optimizer) snprintf(grads, sizeof grads, "grads fused (%.2f MiB of the planned peak)",
                                    m.grad_arena_bytes / 1048576.0);
    else snprintf(grads, sizeof grads, "grads %.2f MiB", m.grad_bytes / 1048576.0);
    printf("memory%s: activations %.2f MiB planned, %.2f MiB measured, arena %.2f MiB; params %.2f MiB, "
           "%s, optimizer %.2f MiB\n", cli_dist_size() > 1 ? " per rank" : "",
           m.activation_bytes_planned / 1048576.0, m.activation_bytes_measured / 1048576.0,
           m.activation_arena_bytes / 1048576.0, m.param_bytes / 1048576.0, grads,
           rm_optim_bytes(t->opt) / 1048576.0);
    char frozen[256];
    cli_frozen_summary(t->g, frozen, sizeof frozen);
    if (count_params(t->g, 0) > count_params(t->g, 1)) printf("%s\n", frozen);
    printf("recompute: strategy %s, %.2f GFLOP recomputed per step, overhead predicted %.1f%%, measured %.1f%%\n",
           strategy, p.flops_recompute / 1e9, 100.0 * p.predicted_overhead, 100.0 * t->overhead_median);
    if (p.budget_bytes)
        printf("memory budget %.2f MiB: activations %.2f MiB measured against %.2f MiB to store all, "
               "%.2f MiB (%.0f%%) saved for %.1f%% more time per step (measured)\n",
               p.budget_bytes / 1048576.0, m.activation_bytes_measured / 1048576.0, p.store_all_bytes / 1048576.0,
               ((double)p.store_all_bytes - (double)m.activation_bytes_measured) / 1048576.0,
               100.0 * (1.0 - (double)m.activation_bytes_measured / (double)p.store_all_bytes),
               100.0 * t->overhead_median);
    cli_paging_summary(t->s, &t->paging_ms, stdout);
}

/* The run stopped by a signal after `step` (every rank agrees: run_steps):
 * the state saved, or said not to be; exit 128+signal (1 if the save failed). */
static int stopped(trainer *t, int step) {
    const cli_args *a = t->a;
    const int sig = stop_signal, rank0 = cli_dist_rank() == 0;
    const char *path = a->save ? a->save : CLI_INTERRUPT_PATH, *name = cli_stop_name(sig);
    cli_dist_agreed();
    if (step == (int)t->start) { /* nothing new: an older file there stays as it was */
        if (rank0)
            fprintf(stderr, "remat: %s: stopped before step %d of %d; nothing was saved%s%s%s\n", name, step + 1, a->steps,
                    a->save ? " ('" : "", a->save ? a->save : "", a->save ? "' is as it was)" : "");
        return 128 + sig;
    }
    if (rank0 && cli_dist_size() > 1) /* mpirun may kill the ranks before the write ends: say so first */
        fprintf(stderr, "remat: %s: stopped after step %d of %d; saving %s ...%s\n", name, step, a->steps, path,
                stop_by_parent && sig == SIGTERM
                    ? " (from mpirun, itself stopped: it kills the ranks about 1 s later (--mca "
                      "odls_base_sigkill_timeout) and exits 1 whatever they return; to stop a job cleanly send SIGUSR1 "
                      "to mpirun: it forwards it, the ranks save and the job exits 138)" : "");
    int rc = save_state(t, path, (uint64_t)step);
    if (rc) {
        if (rank0) fprintf(stderr, "remat: %s: the state after step %d was NOT saved\n", name, step);
        return rc;
    }
    if (rank0)
        fprintf(stderr, "remat: %s: stopped after step %d of %d; saved %s (continue with: remat train --resume %s "
                "--save %s)\n", name, step, a->steps, path, path, path);
    return 128 + sig;
}

/* After the loop: on a signal, save where the run stands; else evaluate,
 * summarise, report and save. Returns the exit status. */
static int finish(trainer *t, int step, float loss, float val_loss, int have_val) {
    const cli_args *a = t->a;
    int rc, n_done = step - (int)t->start;
    if (stop_signal && step < a->steps) return stopped(t, step);
    if (evaluate(t, &val_loss)) have_val = 1;
    double median = 0;
    const int n_timed = n_done < STEP_SAMPLES ? n_done : STEP_SAMPLES; /* the last STEP_SAMPLES steps */
    if (n_timed > 0) {
        const int first_kept = n_done <= STEP_SAMPLES && n_timed > 1; /* times[0] is this run's first step */
        t->step_ms_first = n_done <= STEP_SAMPLES ? t->times[0] : 0.0;
        qsort(t->times + first_kept, (size_t)(n_timed - first_kept), sizeof *t->times, cmp_double);
        t->step_ms_steady = t->times[first_kept + (n_timed - first_kept) / 2];
        qsort(t->times, (size_t)n_timed, sizeof *t->times, cmp_double);
        qsort(t->overheads, (size_t)n_timed, sizeof *t->overheads, cmp_double);
        median = t->times[n_timed / 2];
        t->step_ms_min = t->times[0], t->step_ms_max = t->times[n_timed - 1];
        t->overhead_median = t->overheads[n_timed / 2];
    }
    double tokens_per_step = (double)a->batch * (strcmp(a->model, "mlp") == 0 ? 1 : a->context);
    double tok_s = median > 0 ? tokens_per_step * 1000.0 / median : 0;
    if (!a->quiet) print_summary(t, n_done, loss, val_loss, have_val, median, tok_s);
    /* a signal after the last step: every rank saves (and exits 128+signal) alike */
    const int late = cli_dist_any(stop_signal);
    const char *path = a->save ? a->save : CLI_INTERRUPT_PATH;
    /* the state first: a report that cannot be written loses no training */
    if (a->save || late) {
        if ((rc = save_state(t, path, (uint64_t)step)) != 0) return rc;
        if (!a->quiet) printf("saved %s\n", path);
    }
    if (a->save_adapters) { /* rank 0 writes; every rank returns its outcome (agreed) */
        char err[512];
        int arc = 0;
        if (cli_dist_rank() == 0 &&
            rm_save_adapters(t->s, a->save_adapters, a->init, strcmp(a->model, "gpt") == 0, err, sizeof err) != RM_OK)
            arc = cli_fail(1, "--save-adapters: %s", err);
        if ((arc = cli_dist_from_rank0(arc)) != 0) return cli_dist_agreed(), arc;
        if (!a->quiet) printf("saved the adapters in %s (PEFT's layout)\n", a->save_adapters);
    }
    if (late) cli_dist_agreed();
    if (cli_dist_rank() != 0) return late ? 128 + late : 0; /* rank 0 writes the report and the trace */
    if (a->report && (rc = write_report(t, loss, val_loss, have_val, median, tok_s)) != 0) return rc;
    if ((rc = cli_trace_write(a, t->s)) != 0) return rc;
    return late ? 128 + late : 0;
}

/* Before the first collective: every rank's configuration against the
 * others' (cli_dist_check_config), then whether a signal reached any rank
 * during the start-up (agreed: then nothing is saved, nothing changed). */
static int check_ranks(const trainer *t) {
    enum { MAX_ITEMS = 96 };
    int rc = 0;
    if (cli_dist_size() > 1) {
        cli_config_item *items = malloc(MAX_ITEMS * sizeof *items);
        cli_run_identity id;
        if (!items) return cli_fail(1, "out of memory");
        cli_data_identity(&t->data, &t->pairs, id.data, sizeof id.data);
        cli_file_identity(t->a->resume, t->resume, id.resume, sizeof id.resume);
        rm_file *init = NULL;
        char err[512];
        if (t->a->init) rm_file_open(t->a->init, &init, err, sizeof err); /* a failure says so later */
        cli_file_identity(t->a->init, init, id.init, sizeof id.init);
        rm_file_close(init);
        rc = cli_dist_check_config(items, cli_config_items(t->a, &id, items, MAX_ITEMS));
        free(items);
    }
    int sig = rc ? 0 : cli_dist_any(stop_signal);
    if (!sig) return rc;
    stop_signal = sig;
    cli_dist_agreed();
    if (cli_dist_rank() == 0)
        fprintf(stderr, "remat: %s: stopped before step %llu; nothing was saved\n", cli_stop_name(sig),
                (unsigned long long)t->start + 1);
    return 128 + sig;
}

int cli_train(const cli_args *a0) {
    cli_args args = *a0; /* a resume fills in flags from the file */
    trainer t;
    memset(&t, 0, sizeof t);
    t.a = &args;
    /* From the start an interrupt stops the run at the next point the ranks
     * agree on (after the start-up, after a step) and saves the state if a
     * step ran. Asked again a second later, it dies at once: the last file
     * written stays whole (rm_save_run writes a temporary file, renamed). */
    cli_stop_catch(1);
    if (cli_dist_rank() != 0) args.quiet = 1; /* rank 0 logs */
    int rc = check_flags(&args);
    if (!rc && args.resume) rc = open_resume(&t);
    if (!rc && args.init && cli_is_dir(args.init)) rc = cli_hf_open(&args, &t.hf);
    if (!rc && args.save_adapters && !args.lora_rank) /* after --resume took the model from its file */
        rc = cli_fail(2, "--save-adapters needs a LoRA run (--lora R, or --resume a file of one)");
    if (!rc) rc = cli_check_flag_use(&args);
    if (!rc) rc = cli_check_outputs(&args); /* before step 0, not after the last */
    if (!rc) rc = check_step_files(&t);
    if (!rc) {
        rm_run_info r;
        cli_run_info(&args, "", 0, 0, 0, &r);
        rc = cli_check_fits(&r, 1, cli_train_state_copies(&args, cli_dist_size()), args.resume);
    }
    if (!rc) rc = load_data(&t);
    /* the ranks' start-up so far, agreed: a rank that failed ends the job, none waits */
    int worst = cli_dist_any(rc);
    if (worst) cli_dist_agreed(), rc = rc ? rc : worst;
    if (!rc) rc = check_ranks(&t);
    if (!rc) rc = build_session(&t);
    /* (a resumed file's vocab, once the file is checked: a file that claims another model says so first) */
    if (!rc && args.resume && cli_check_bytes_vocab(&args, &t.data)) rc = 2;
    if (!rc) {
        int64_t lsh[RM_MAX_DIMS];
        int lnd = rm_shape(t.g, t.io.logits, lsh);
        if (!args.resume && !args.init && lnd > 0 && lsh[lnd - 1] > 1) /* a fresh model's loss is ln(vocab) */
            t.div.reference = logf((float)lsh[lnd - 1]), t.div.fresh = 1;
        t.sampler = strcmp(args.sampler, "sequential") == 0 ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
        t.tty = isatty(2) && !args.quiet;
        if (!args.quiet) print_header(&t);
        float loss = NAN, val_loss = NAN;
        int step = (int)t.start, have_val = 0;
        rc = run_steps(&t, &step, &loss, &val_loss, &have_val);
        if (!rc) rc = finish(&t, step, loss, val_loss, have_val);
    }
    cli_stop_release();
    rm_file_close(t.resume);
    rm_hf_close(t.hf);
    free(t.gx);
    free(t.gy);
    free(t.times);
    free(t.overheads);
    rm_optim_free(t.opt);
    rm_session_free(t.s);
    rm_graph_free(t.g);
    if (!t.encdec) rm_data_free(&t.data);
    rm_pairs_free(&t.pairs);
    return rc;
}
