/* train.c: `remat train`. Loads data, builds and compiles the model, runs
 * the steps (no allocation inside the loop), evaluates, reports, saves. */
#include "args.h"
#include "train/data.h"
#include <math.h>
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
    int is_mlp;
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

/* Model config as safetensors metadata, so `remat sample` can rebuild it. */
static int model_meta(const cli_args *a, const char **k, const char **v, char buf[8][64]) {
    int n = 0;
    k[n] = "format", v[n++] = "pt";
    k[n] = "remat_version", v[n++] = RM_VERSION;
    k[n] = "model", v[n++] = a->model;
#define META(key, val) (snprintf(buf[n], 64, "%d", val), k[n] = key, v[n] = buf[n], n++)
    META("layers", a->layers);
    META("dim", a->dim);
    META("heads", a->heads);
    META("context", a->context);
    META("vocab", a->vocab);
#undef META
    return n;
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
    char val[32];
    if (have_val) snprintf(val, sizeof val, "%.6f", (double)val_loss);
    else snprintf(val, sizeof val, "null");
    fprintf(f,
            "{\n  \"model\": \"%s\",\n  \"checkpoint\": \"%s\",\n  \"steps\": %d,\n  \"final_loss\": %.6f,\n"
            "  \"val_loss\": %s,\n  \"step_ms_median\": %.3f,\n  \"tokens_per_s\": %.1f,\n"
            "  \"activation_bytes_planned\": %zu,\n  \"activation_bytes_measured\": %zu,\n"
            "  \"activation_arena_bytes\": %zu,\n  \"param_bytes\": %zu,\n  \"grad_bytes\": %zu,\n"
            "  \"optimizer_bytes\": %zu,\n  \"max_rss_bytes\": %ld,\n  \"threads\": %d,\n  \"blas\": %s,\n"
            "  \"recompute_flops\": %.0f,\n  \"forward_flops\": %.0f,\n  \"backward_flops\": %.0f,\n"
            "  \"predicted_overhead\": %.4f,\n  \"measured_overhead\": %.4f,\n"
            "  \"ms_forward\": %.3f,\n  \"ms_recompute\": %.3f,\n  \"ms_backward\": %.3f\n}\n",
            a->model, a->checkpoint, a->steps, (double)final_loss, val, median_ms, tok_s, m.activation_bytes_planned, m.activation_bytes_measured,
            m.activation_arena_bytes, m.param_bytes, m.grad_bytes,
            strcmp(a->optimizer, "adamw") == 0 ? 2 * m.param_bytes : (size_t)0, ru.ru_maxrss * 1024L,
            a->threads > 0 ? a->threads : rm_default_threads(), rm_gemm_has_blas() ? "true" : "false",
            p.flops_recompute, p.flops_forward, p.flops_backward, p.predicted_overhead, t->overhead_median,
            p.ms_forward, p.ms_recompute, p.ms_backward);
    if (fclose(f) != 0) return cli_fail(1, "cannot write report '%s'", a->report);
    return 0;
}

int cli_train(const cli_args *a) {
    trainer t;
    memset(&t, 0, sizeof t);
    t.a = a;
    t.is_mlp = strcmp(a->model, "mlp") == 0;
    t.sampler = strcmp(a->sampler, "sequential") == 0 ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
    char err[512];
    int rc = 1;
    double *times = NULL, *overheads = NULL;
    rm_optim *opt = NULL;

    rm_status st = a->data ? rm_data_load_file(&t.data, a->data, err, sizeof err)
                           : rm_data_load_corpus(&t.data, err, sizeof err);
    if (st == RM_OK) st = rm_data_check_vocab(&t.data, a->vocab, err, sizeof err);
    if (st == RM_OK) st = rm_data_split(&t.data, a->val_fraction, a->batch, a->context, err, sizeof err);
    if (st != RM_OK) {
        rc = cli_fail(1, "%s", err);
        goto done;
    }
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
    if (rm_optim_new(t.s, &oc, &opt) != RM_OK) {
        rc = cli_fail(1, "%s", rm_session_errmsg(t.s));
        goto done;
    }
    times = malloc(sizeof *times * (size_t)(a->steps > 0 ? a->steps : 1));
    overheads = malloc(sizeof *overheads * (size_t)(a->steps > 0 ? a->steps : 1));
    if (!times || !overheads) {
        rc = cli_fail(1, "out of memory");
        goto done;
    }
    rm_memory_info m;
    rm_memory(t.s, &m);
    int tty = isatty(2) && !a->quiet;
    if (!a->quiet)
        printf("remat: %s, %lld params (%.1f MiB), activations %.1f MiB planned (arena %.1f MiB), "
               "checkpoint=%s, %d threads, %s\n",
               a->model, count_params(t.g), m.param_bytes / 1048576.0, m.activation_bytes_planned / 1048576.0,
               m.activation_arena_bytes / 1048576.0, a->checkpoint, a->threads > 0 ? a->threads : rm_default_threads(),
               rm_gemm_has_blas() ? "OpenBLAS" : "portable GEMM");
    float loss = NAN, val_loss = NAN;
    int have_val = 0;
    double tokens_per_step = (double)a->batch * (t.is_mlp ? 1 : a->context);
    double t_start = now_ms();
    for (int step = 0; step < a->steps; step++) {
        double t0 = now_ms();
        if (fill_batch(&t, RM_DATA_TRAIN, t.sampler, (uint64_t)step, err, sizeof err) != RM_OK) {
            rc = cli_fail(1, "%s", err);
            goto done;
        }
        if (rm_step(t.s, (uint64_t)step, &loss) != RM_OK || rm_optim_step(opt, lr_at(a, step), NULL) != RM_OK) {
            rc = cli_fail(1, "step %d: %s", step, rm_session_errmsg(t.s));
            goto done;
        }
        times[step] = now_ms() - t0;
        rm_plan_info pi;
        rm_plan(t.s, &pi);
        overheads[step] = pi.measured_overhead;
        if (!a->quiet && (tty || step % 10 == 0 || step == a->steps - 1)) {
            double avg = (now_ms() - t_start) / (step + 1);
            rm_memory(t.s, &m);
            print_progress(tty, step + 1, a->steps, loss, times[step], tokens_per_step * 1000.0 / avg,
                           m.activation_bytes_measured / 1048576.0);
        }
        if (a->eval_every > 0 && (step + 1) % a->eval_every == 0 && evaluate(&t, &val_loss)) {
            have_val = 1;
            if (!a->quiet) printf("%sstep %d val loss %.4f\n", tty ? "\n" : "", step + 1, val_loss);
        }
    }
    if (tty) fputc('\n', stderr);
    if (evaluate(&t, &val_loss)) have_val = 1;
    double median = 0;
    if (a->steps > 0) {
        qsort(times, (size_t)a->steps, sizeof *times, cmp_double);
        qsort(overheads, (size_t)a->steps, sizeof *overheads, cmp_double);
        median = times[a->steps / 2];
        t.overhead_median = overheads[a->steps / 2];
    }
    double tok_s = median > 0 ? tokens_per_step * 1000.0 / median : 0;
    rm_memory(t.s, &m);
    if (!a->quiet) {
        printf("done: %d steps, final loss %.4f", a->steps, loss);
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
               a->checkpoint, p.flops_recompute / 1e9, 100.0 * p.predicted_overhead, 100.0 * t.overhead_median);
    }
    if (a->report && (rc = write_report(&t, loss, val_loss, have_val, median, tok_s)) != 0) goto done;
    if (a->save) {
        const char *k[8], *v[8];
        char buf[8][64];
        int n = model_meta(a, k, v, buf);
        if (rm_save_params(t.s, a->save, n, k, v, err, sizeof err) != RM_OK) {
            rc = cli_fail(1, "%s", err);
            goto done;
        }
        if (!a->quiet) printf("saved %s\n", a->save);
    }
    rc = 0;
done:
    free(times);
    free(overheads);
    rm_optim_free(opt);
    rm_session_free(t.s);
    rm_graph_free(t.g);
    rm_data_free(&t.data);
    return rc;
}
