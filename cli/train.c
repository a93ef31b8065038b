/* train.c: `remat train`. Loads data, builds and compiles the model (or
 * resumes a checkpoint file), runs the steps (no allocation inside the
 * loop), evaluates, reports, saves checkpoint files. SIGINT and SIGTERM
 * finish the current step, save and exit 128+signal. */
#include "args.h"
#include "ckptfile.h"
#include "train/data.h"
#include <math.h>
#include <signal.h>
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
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

/* Linear warmup to lr, then constant or cosine decay to lr/10 (nanoGPT's min_lr). */
static float lr_at(const cli_args *a, int step) {
    if (step < a->warmup) return a->lr * (float)(step + 1) / (float)a->warmup;
    if (strcmp(a->lr_schedule, "cosine") == 0 && a->steps > a->warmup) {
        double r = (double)(step - a->warmup) / (double)(a->steps - a->warmup);
        double coeff = 0.5 * (1.0 + cos(M_PI * r));
        return (float)(a->lr * (0.1 + 0.9 * coeff));
    }
    return a->lr;
}

static long long count_params(const rm_graph *g) {
    long long n = 0;
    for (int i = 0; i < rm_param_count(g); i++) n += rm_numel(g, rm_param_at(g, i));
    return n;
}

typedef struct trainer {
    const cli_args *a;
    rm_graph *g;
    rm_session *s;
    rm_model_io io;
    rm_dataset data;
    rm_sampler sampler;
    rm_optim *opt;
    int is_mlp;
    int64_t batch_offset;   /* next batch index - next step (0 unless a file says otherwise) */
    double overhead_median; /* measured recompute overhead, median over steps */
} trainer;

static rm_status fill_batch(trainer *t, rm_data_part part, rm_sampler mode, uint64_t k, char *err, size_t n) {
    const cli_args *a = t->a;
    if (t->is_mlp)
        return rm_data_batch_mlp(&t->data, part, mode, a->seed, k, a->batch, a->context, a->vocab,
                                 rm_value_data(t->s, t->io.features), rm_value_data(t->s, t->io.targets), err, n);
    return rm_data_batch(&t->data, part, mode, a->seed, k, a->batch, a->context, rm_value_data(t->s, t->io.tokens),
                         rm_value_data(t->s, t->io.targets), err, n);
}

/* Mean loss over up to 20 validation batches, forward only (no dropout). */
static int evaluate(trainer *t, float *out) {
    uint64_t nb = rm_data_num_batches(&t->data, RM_DATA_VAL, t->a->batch, t->a->context);
    if (nb == 0) return 0;
    if (nb > 20) nb = 20;
    double sum = 0;
    char err[256];
    for (uint64_t k = 0; k < nb; k++) {
        float l;
        if (fill_batch(t, RM_DATA_VAL, RM_SAMPLE_SEQUENTIAL, k, err, sizeof err) != RM_OK) return 0;
        if (rm_forward(t->s, &l) != RM_OK) return 0;
        sum += l;
    }
    *out = (float)(sum / (double)nb);
    return 1;
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
    FILE *f = fopen(a->report, "w");
    if (!f) return cli_fail(1, "cannot write report '%s'", a->report);
    char val[32], fin[32]; /* JSON has no NaN: no value is null (e.g. --steps 0) */
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
            "  \"memory_budget_bytes\": %zu,\n  \"store_all_bytes\": %zu,\n  \"min_budget_bytes\": %zu\n}\n",
            a->model, p.strategy, a->steps, fin, val, median_ms, tok_s, m.activation_bytes_planned, m.activation_bytes_measured,
            m.activation_arena_bytes, m.param_bytes, m.grad_bytes,
            strcmp(a->optimizer, "adamw") == 0 ? 2 * m.param_bytes : (size_t)0, ru.ru_maxrss * 1024L,
            a->threads > 0 ? a->threads : rm_default_threads(), rm_gemm_has_blas() ? "true" : "false",
            p.flops_recompute, p.flops_forward, p.flops_backward, p.predicted_overhead, t->overhead_median,
            p.ms_forward, p.ms_recompute, p.ms_backward, p.budget_bytes, p.store_all_bytes, p.min_budget_bytes);
    if (fclose(f) != 0) return cli_fail(1, "cannot write report '%s'", a->report);
    return 0;
}

/* Set by the handler, read by the loop: the only thing the handler does. */
static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

/* Writes the training state after `step` steps to path. */
static int save_state(const trainer *t, const char *path, uint64_t step) {
    cli_position p = {t->a->data ? t->a->data : "<corpus>", t->data.n, step,
                      (uint64_t)((int64_t)step + t->batch_offset)};
    cli_meta m;
    char err[512];
    cli_meta_build(t->a, &p, &m);
    if (rm_save_state(t->s, t->opt, path, m.n, m.k, m.v, err, sizeof err) != RM_OK)
        return cli_fail(1, "%s", err);
    return 0;
}

/* Opens the file of --resume and takes the model and training flags from
 * it; the state itself is loaded once the session exists. */
static int open_resume(cli_args *a, rm_st_file **f, cli_resumed *r) {
    char err[512];
    int present = 0;
    if (a->init) return cli_fail(2, "--resume and --init cannot be combined (--resume loads the weights too)");
    if (rm_st_open(a->resume, f, err, sizeof err) != RM_OK ||
        rm_st_verify(*f, a->resume, &present, NULL, err, sizeof err) != RM_OK)
        return cli_fail(1, "%s", err);
    if (!present)
        return cli_fail(1, "'%s': no checksum (metadata '%s'): not a checkpoint file of remat train "
                        "(--init loads the weights of any file)", a->resume, RM_ST_CHECKSUM_KEY);
    return cli_resume_args(a, *f, a->resume, r);
}

int cli_train(const cli_args *a0) {
    cli_args args = *a0, *a = &args; /* a resume fills in flags from the file */
    trainer t;
    memset(&t, 0, sizeof t);
    t.a = a;
    char err[512];
    int rc = 1;
    double *times = NULL, *overheads = NULL;
    rm_st_file *rf = NULL;
    cli_resumed res;
    memset(&res, 0, sizeof res);
    struct sigaction old_int, old_term;
    int handlers = 0;

    if ((a->save_every || cli_given(a, "--keep")) && !a->save) {
        rc = cli_fail(2, "--save-every and --keep need --save PATH (the step files are named after it)");
        goto done;
    }
    if (cli_given(a, "--keep") && !a->save_every) {
        rc = cli_fail(2, "--keep counts the step files of --save-every; give --save-every N too");
        goto done;
    }
    if (a->resume && (rc = open_resume(a, &rf, &res)) != 0) goto done;
    rc = 1;
    t.is_mlp = strcmp(a->model, "mlp") == 0;
    t.sampler = strcmp(a->sampler, "sequential") == 0 ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
    uint64_t start = res.pos.step;
    t.batch_offset = (int64_t)(res.pos.batch - res.pos.step);
    if (rf && start > (uint64_t)a->steps) {
        rc = cli_fail(2, "'%s' is at step %llu, past --steps %d (--steps is the step count to reach, "
                      "counted from the start of training)", a->resume, (unsigned long long)start, a->steps);
        goto done;
    }

    rm_status st = a->data ? rm_data_load_file(&t.data, a->data, err, sizeof err)
                           : rm_data_load_corpus(&t.data, err, sizeof err);
    if (st == RM_OK) st = rm_data_check_vocab(&t.data, a->vocab, err, sizeof err);
    if (st == RM_OK) st = rm_data_split(&t.data, a->val_fraction, a->batch, a->context, err, sizeof err);
    if (st != RM_OK) {
        rc = cli_fail(1, "%s", err);
        goto done;
    }
    if (rf && res.data_tokens != t.data.n)
        fprintf(stderr, "remat: note: '%s' was trained on %zu tokens of '%s'; this run has %zu tokens of '%s'\n",
                a->resume, res.data_tokens, res.data, t.data.n, t.data.name);
    t.g = rm_graph_new();
    if (!t.g || (st = cli_build_model(a, t.g, &t.io, 0)) != RM_OK) {
        rc = cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(t.g));
        goto done;
    }
    rm_options o;
    rm_options_default(&o);
    o.threads = a->threads;
    o.seed = a->seed;
    o.checkpoint = a->checkpoint;
    o.memory_budget = a->memory_budget;
    o.verify_recompute = a->verify_recompute;
    if ((st = rm_compile(t.g, &o, &t.s)) != RM_OK) {
        rc = cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(t.g));
        goto done;
    }
    if (*rm_plan_notes(t.s)) fputs(rm_plan_notes(t.s), stderr);
    if (a->print_plan) rm_print_plan(t.s, stdout);
    if (a->init && rm_load_params(t.s, a->init, err, sizeof err) != RM_OK) {
        rc = cli_fail(1, "%s", err);
        goto done;
    }
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    oc.kind = strcmp(a->optimizer, "sgd") == 0 ? RM_OPTIM_SGD : RM_OPTIM_ADAMW;
    oc.weight_decay = a->weight_decay;
    oc.grad_clip = a->grad_clip;
    if (rm_optim_new(t.s, &oc, &t.opt) != RM_OK) {
        rc = cli_fail(1, "%s", rm_session_errmsg(t.s));
        goto done;
    }
    if (rf) {
        if (rm_load_from(t.s, t.opt, rf, a->resume, RM_LOAD_STATE | RM_LOAD_VERIFIED, err, sizeof err) != RM_OK) {
            rc = cli_fail(1, "%s", err);
            goto done;
        }
        rm_st_close(rf); /* it holds the whole file in memory */
        rf = NULL;
    }
    int n_run = a->steps - (int)start;
    times = malloc(sizeof *times * (size_t)(n_run > 0 ? n_run : 1));
    overheads = malloc(sizeof *overheads * (size_t)(n_run > 0 ? n_run : 1));
    if (!times || !overheads) {
        rc = cli_fail(1, "out of memory");
        goto done;
    }
    rm_memory_info m;
    rm_memory(t.s, &m);
    int tty = isatty(2) && !a->quiet;
    char strategy[128]; /* for messages: a budget plans the strategy itself */
    if (a->memory_budget) snprintf(strategy, sizeof strategy, "auto (--memory-budget %s)", a->memory_budget);
    else snprintf(strategy, sizeof strategy, "%s", a->checkpoint);
    if (!a->quiet) {
        printf("remat: %s, %lld params (%.1f MiB), activations %.1f MiB planned (arena %.1f MiB), "
               "checkpoint=%s, %d threads, %s\n",
               a->model, count_params(t.g), m.param_bytes / 1048576.0, m.activation_bytes_planned / 1048576.0,
               m.activation_arena_bytes / 1048576.0, strategy, a->threads > 0 ? a->threads : rm_default_threads(),
               rm_gemm_has_blas() ? "OpenBLAS" : "portable GEMM");
        if (a->resume) printf("resumed %s at step %llu of %d\n", a->resume, (unsigned long long)start, a->steps);
    }
    /* From here an interrupt saves the state instead of killing the run. A
     * second one kills it (SA_RESETHAND): the last file written stays whole. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    handlers = 1;

    float loss = NAN, val_loss = NAN;
    int have_val = 0;
    double tokens_per_step = (double)a->batch * (t.is_mlp ? 1 : a->context);
    double t_start = now_ms();
    int step = (int)start;
    for (; step < a->steps && !stop_signal; step++) {
        double t0 = now_ms();
        int i = step - (int)start;
        uint64_t batch = (uint64_t)((int64_t)step + t.batch_offset);
        if (fill_batch(&t, RM_DATA_TRAIN, t.sampler, batch, err, sizeof err) != RM_OK) {
            rc = cli_fail(1, "%s", err);
            goto done;
        }
        if (rm_step(t.s, (uint64_t)step, &loss) != RM_OK || rm_optim_step(t.opt, lr_at(a, step), NULL) != RM_OK) {
            rc = cli_fail(1, "step %d: %s", step, rm_session_errmsg(t.s));
            goto done;
        }
        times[i] = now_ms() - t0;
        overheads[i] = rm_step_overhead(t.s);
        if (!a->quiet && (tty || step % 10 == 0 || step == a->steps - 1)) {
            double avg = (now_ms() - t_start) / (i + 1);
            rm_memory(t.s, &m);
            print_progress(tty, step + 1, a->steps, loss, times[i], tokens_per_step * 1000.0 / avg,
                           m.activation_bytes_measured / 1048576.0);
        }
        if (a->eval_every > 0 && (step + 1) % a->eval_every == 0 && evaluate(&t, &val_loss)) {
            have_val = 1;
            if (!a->quiet) printf("%sstep %d val loss %.4f\n", tty ? "\n" : "", step + 1, val_loss);
        }
        if (a->save_every > 0 && (step + 1) % a->save_every == 0) {
            char path[4096];
            if (!cli_step_path(a->save, (uint64_t)step + 1, path, sizeof path)) {
                rc = cli_fail(1, "cannot save: the path '%s' is too long", a->save);
                goto done;
            }
            if ((rc = save_state(&t, path, (uint64_t)step + 1)) != 0) goto done;
            cli_prune_step_files(a->save, a->keep);
            if (!a->quiet) printf("%ssaved %s\n", tty ? "\n" : "", path);
        }
    }
    if (tty) fputc('\n', stderr);
    int n_done = step - (int)start;
    if (stop_signal && step < a->steps) {
        /* Interrupted: save where the run stands, skip evaluation and report. */
        int sig = stop_signal;
        const char *path = a->save ? a->save : CLI_INTERRUPT_PATH;
        if ((rc = save_state(&t, path, (uint64_t)step)) != 0) goto done;
        fprintf(stderr, "remat: %s: stopped after step %d of %d; saved %s (continue with: remat train "
                "--resume %s --save %s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM", step, a->steps, path, path,
                path);
        rc = 128 + sig;
        goto done;
    }
    if (evaluate(&t, &val_loss)) have_val = 1;
    double median = 0;
    if (n_done > 0) {
        qsort(times, (size_t)n_done, sizeof *times, cmp_double);
        qsort(overheads, (size_t)n_done, sizeof *overheads, cmp_double);
        median = times[n_done / 2];
        t.overhead_median = overheads[n_done / 2];
    }
    double tok_s = median > 0 ? tokens_per_step * 1000.0 / median : 0;
    rm_memory(t.s, &m);
    if (!a->quiet) {
        printf("done: %d steps", a->steps);
        if (a->resume) printf(" (%d after resuming)", n_done);
        printf(", final loss %.4f", loss);
        if (have_val) printf(", val loss %.4f", val_loss);
        printf(", %.1f ms/step median, %.0f tok/s\n", median, tok_s);
        printf("memory: activations %.2f MiB planned, %.2f MiB measured, arena %.2f MiB; params %.2f MiB, "
               "grads %.2f MiB, optimizer %.2f MiB\n",
               m.activation_bytes_planned / 1048576.0, m.activation_bytes_measured / 1048576.0,
               m.activation_arena_bytes / 1048576.0, m.param_bytes / 1048576.0, m.grad_bytes / 1048576.0,
               (oc.kind == RM_OPTIM_ADAMW ? 2.0 : 0.0) * m.param_bytes / 1048576.0);
        rm_plan_info p;
        rm_plan(t.s, &p);
        printf("recompute: strategy %s, %.2f GFLOP recomputed per step, overhead predicted %.1f%%, measured %.1f%%\n",
               strategy, p.flops_recompute / 1e9, 100.0 * p.predicted_overhead, 100.0 * t.overhead_median);
        if (p.budget_bytes)
            printf("memory budget %.2f MiB: activations %.2f MiB measured against %.2f MiB to store all, "
                   "%.2f MiB (%.0f%%) saved for %.1f%% more time per step (measured)\n",
                   p.budget_bytes / 1048576.0, m.activation_bytes_measured / 1048576.0, p.store_all_bytes / 1048576.0,
                   ((double)p.store_all_bytes - (double)m.activation_bytes_measured) / 1048576.0,
                   100.0 * (1.0 - (double)m.activation_bytes_measured / (double)p.store_all_bytes),
                   100.0 * t.overhead_median);
    }
    if (a->report && (rc = write_report(&t, loss, val_loss, have_val, median, tok_s)) != 0) goto done;
    if (a->save || stop_signal) {
        const char *path = a->save ? a->save : CLI_INTERRUPT_PATH;
        if ((rc = save_state(&t, path, (uint64_t)step)) != 0) goto done;
        if (!a->quiet) printf("saved %s\n", path);
    }
    rc = stop_signal ? 128 + stop_signal : 0;
done:
    if (handlers) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    rm_st_close(rf);
    free(times);
    free(overheads);
    rm_optim_free(t.opt);
    rm_session_free(t.s);
    rm_graph_free(t.g);
    rm_data_free(&t.data);
    return rc;
}
