/* guard.c: the checks a run passes before its first step, so that no work
 * is lost at its end (docs/RELIABILITY.md), and divergence detection. */
#include "guard.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* What --fuse-optimizer cannot do: each update runs as soon as that
 * parameter's gradient is final, and the gradient is freed with it. */
static int check_fuse(const cli_args *a) {
    if (!a->fuse_optimizer) return 0;
    if (a->grad_clip > 0)
        return cli_fail(2, "--fuse-optimizer cannot clip by the global gradient norm (it needs every gradient "
                        "before the first update): add --grad-clip 0");
    if (a->micro_batches > 1)
        return cli_fail(2, "--fuse-optimizer and --micro-batches cannot be combined: accumulating keeps every "
                        "gradient until the last micro-batch, fusion frees each at its update (drop one)");
    if (a->shard_optimizer)
        return cli_fail(2, "--fuse-optimizer and --shard-optimizer cannot be combined: a fused update runs on every "
                        "rank for every parameter, so no rank keeps a shard (drop one)");
    return 0;
}

/* Every row trains: the global batch splits into ranks x micro-batches
 * equal parts (after --resume filled --batch from its file). */
static int check_batch(const cli_args *a) {
    const int ranks = cli_dist_size(), k = a->micro_batches, parts = ranks * k;
    if (a->batch % parts == 0) return 0;
    char e[64];
    int lo = a->batch / parts * parts, hi = lo + parts;
    if (lo) snprintf(e, sizeof e, "--batch %d or %d", lo, hi);
    else snprintf(e, sizeof e, "--batch %d", hi);
    if (ranks > 1 && k > 1)
        return cli_fail(2, "--batch %d is the global batch: it does not split evenly over %d ranks x %d "
                        "micro-batches (%d rows would be left out); give a multiple of %d, e.g. %s", a->batch,
                        ranks, k, a->batch % parts, parts, e);
    if (ranks > 1)
        return cli_fail(2, "--batch %d is the global batch: it must be a multiple of the %d ranks (each takes "
                        "batch/ranks rows); give e.g. %s", a->batch, ranks, e);
    return cli_fail(2, "--batch %d must be a multiple of --micro-batches %d; give e.g. %s", a->batch, k, e);
}

int cli_check_flag_use(const cli_args *a) {
    int mlp = strcmp(a->model, "mlp") == 0;
    if (cli_given(a, "--checkpoint") && a->memory_budget)
        return cli_fail(2, "--checkpoint and --memory-budget cannot be combined: a budget chooses the recompute "
                        "strategy itself (drop one)");
    static const char *const gpt_only[] = {"--layers", "--dim", "--heads"};
    for (size_t i = 0; mlp && i < sizeof gpt_only / sizeof *gpt_only; i++)
        if (cli_given(a, gpt_only[i]))
            return cli_fail(2, "%s applies to --model gpt; an mlp's layers are --widths", gpt_only[i]);
    if (!mlp && cli_given(a, "--widths"))
        return cli_fail(2, "--widths applies to --model mlp; a gpt's size is --layers, --dim and --heads");
    if (!mlp && a->batchnorm) return cli_fail(2, "--batchnorm applies to --model mlp only");
    if (!strcmp(a->model, "encdec") && a->micro_batches > 1)
        return cli_fail(2, "--micro-batches is not available for --model encdec (its batches are (source, target) "
                        "pairs drawn whole each step): drop it, or use a smaller --batch");
    for (int i = 0; !strcmp(a->optimizer, "sgd") && i < 2; i++) /* SGD keeps no moments */
        if (cli_given(a, i ? "--adam-eps" : "--adam-betas"))
            return cli_fail(2, "%s applies to --optimizer adamw; %s uses plain SGD, which has no moments: drop it, or "
                            "use --optimizer adamw", i ? "--adam-eps" : "--adam-betas",
                            a->resume ? "the resumed run" : "--optimizer sgd");
    /* every N steps, N past the run's last step: nothing would happen (as --trace-step past --steps) */
    for (int i = 0; i < 2; i++) {
        const int every = i ? a->eval_every : a->save_every;
        if (every > a->steps)
            return cli_fail(2, "%s %d is past --steps %d: %s; give at most %d, or drop it", i ? "--eval-every" :
                            "--save-every", every, a->steps, i ? "no evaluation would run" :
                            "no step file would be written", a->steps);
    }
    if (a->eval_every > 0 && a->val_fraction <= 0.0f)
        return cli_fail(2, "--eval-every %d evaluates on the validation rows, and --val-fraction 0 leaves none: give "
                        "--val-fraction F > 0 (default 0.1), or drop --eval-every", a->eval_every);
    int rc = check_batch(a);
    return rc ? rc : check_fuse(a);
}

/* Parameters of the model r describes (nanoGPT's GPT-2 with a tied head, the
 * models of docs/MODELS.md, or the MLP of src/models/mlp.c), in double: no
 * overflow whatever the sizes. */
static double param_count(const rm_run_info *r) {
    double C = r->dim, V = r->vocab, T = r->context;
    if (strcmp(r->model, "llama") == 0) {
        double F = r->ffn_dim > 0 ? r->ffn_dim : 8.0 * C / 3; /* <= rm_llama_ffn_dim: a lower bound */
        double Ckv = r->kv_heads > 0 && r->heads > 0 ? C / r->heads * r->kv_heads : C; /* k and v, GQA */
        return (r->tie_embeddings ? 1 : 2) * V * C + r->layers * (2 * C * C + 2 * C * Ckv + 3 * C * F + 2 * C) + C;
    }
    if (strcmp(r->model, "encdec") == 0)
        return 3 * V * C + 2 * T * C + r->enc_layers * (12 * C * C + 13 * C) + r->dec_layers * (16 * C * C + 19 * C);
    if (strcmp(r->model, "uvit") == 0)
        return V * C + T * C + r->layers * (12 * C * C + 13 * C) + 2 * C + (r->layers / 2) * (2 * C * C + C);
    if (strcmp(r->model, "mlp") != 0) return V * C + T * C + r->layers * (12 * C * C + 13 * C) + 2 * C;
    double n = 0, in = T;
    for (int i = 0; i < r->n_widths; i++) {
        n += in * r->widths[i] + r->widths[i] + (r->batchnorm ? 4.0 * r->widths[i] : 0);
        in = r->widths[i];
    }
    return n + in * V + V;
}

/* A lower bound on activation bytes: logits (and their gradient when
 * training; none for a training llama) plus a few (B,T,C) tensors per layer. */
static double activation_bytes(const rm_run_info *r, int training) {
    double BT = (double)r->batch * r->context;
    if (strcmp(r->model, "mlp") == 0) {
        double w = r->vocab;
        for (int i = 0; i < r->n_widths; i++) w += r->widths[i];
        return 4.0 * r->batch * w * (training ? 2 : 1);
    }
    double layers = strcmp(r->model, "encdec") == 0 ? (double)r->enc_layers + r->dec_layers : r->layers;
    /* llama trains with its head fused into the loss (rm_linear_ce): no (B,T,V) logits */
    double V = strcmp(r->model, "llama") == 0 && training ? 0.0 : (double)r->vocab;
    return 4.0 * BT * (V + (training ? 8.0 * layers * r->dim : 2.0 * r->dim)) * (training ? 2 : 1);
}

/* This machine's memory, or the address-space limit when that is lower. */
double cli_machine_bytes(void) {
    double ram = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && (double)rl.rlim_cur < ram)
        ram = (double)rl.rlim_cur;
    return ram > 0 ? ram : 1e300;
}

double cli_train_state_copies(const cli_args *a, int ranks) {
    double moments = strcmp(a->optimizer, "adamw") == 0 ? 2.0 : 0.0;
    if (a->shard_optimizer && ranks > 1) moments /= ranks;
    double grads = a->fuse_optimizer ? 0.0 : a->micro_batches > 1 ? 2.0 : 1.0; /* accumulating: a second buffer */
    return grads + moments;
}

int cli_check_fits(const rm_run_info *r, int training, double state, const char *file) {
    double need = 4.0 * param_count(r) * (1.0 + (training ? state : 0)) + activation_bytes(r, training);
    double have = cli_machine_bytes();
    if (need <= have) return 0;
    char where[1100] = "";
    if (file) snprintf(where, sizeof where, "'%s': ", file);
    return cli_fail(1, "%sthe model needs at least %.1f GiB (%.3g parameters%s), more than this machine's %.1f GiB%s",
                    where, need / 1073741824.0, param_count(r), training ? ", with the training's gradients and optimizer state" : "",
                    have / 1073741824.0, file ? "" : ": use a smaller model (remat plan plans any size)");
}

static int cmp_float(const void *x, const void *y) {
    float a = *(const float *)x, b = *(const float *)y;
    return a < b ? -1 : a > b;
}

/* The median of the window (infinite while it is empty). */
static float window_median(cli_divergence *d) {
    if (d->n == 0) return INFINITY;
    memcpy(d->sorted, d->window, sizeof *d->sorted * (size_t)d->n);
    qsort(d->sorted, (size_t)d->n, sizeof *d->sorted, cmp_float);
    return d->n % 2 ? d->sorted[d->n / 2] : 0.5f * (d->sorted[d->n / 2 - 1] + d->sorted[d->n / 2]);
}

int cli_diverged(cli_divergence *d, int step, float loss, char *msg, size_t cap) {
    if (!isfinite(loss)) {
        snprintf(msg, cap, "training diverged at step %d: the loss is %g", step, (double)loss);
        return 1;
    }
    if (!(d->reference > 0) && loss > 0) d->reference = loss; /* the model as the run got it */
    /* while the window fills, its median may already sit on exploding
     * losses: the reference (the loss before training) caps the base */
    float median = window_median(d), ref = d->reference > 0 ? d->reference : INFINITY;
    int by_ref = d->n < DIV_WINDOW && ref < median;
    float base = by_ref ? ref : median;
    if (base < DIV_FLOOR) base = DIV_FLOOR;
    if (isfinite(base)) {
        d->run = loss > DIV_FACTOR * base ? d->run + 1 : 0;
        if (d->run >= DIV_RUN) {
            char what[96];
            if (!by_ref) snprintf(what, sizeof what, "its median over the last %d step%s", d->n, d->n > 1 ? "s" : "");
            else snprintf(what, sizeof what, "%s", d->fresh ? "ln(vocab), a fresh model's loss"
                                                             : "the loss the run started from");
            snprintf(msg, cap, "training diverged at step %d: the loss (%g) has been above %g times %s (%g) for %d "
                     "steps in a row", step, (double)loss, (double)DIV_FACTOR, what, (double)base, DIV_RUN);
            return 1;
        }
        if (d->run) return 0; /* a diverging loss does not enter the window it is judged by */
    }
    d->window[d->next] = loss;
    d->next = (d->next + 1) % DIV_WINDOW;
    if (d->n < DIV_WINDOW) d->n++;
    return 0;
}

void cli_divergence_meta(const cli_divergence *d, const char *keys[3], char window[DIV_WINDOW * 16], char run[16],
                         char reference[32], const char *values[3]) {
    size_t at = 0;
    window[0] = 0;
    for (int k = 0; k < d->n; k++) { /* oldest first */
        int i = (d->next - d->n + k + DIV_WINDOW) % DIV_WINDOW;
        at += (size_t)snprintf(window + at, DIV_WINDOW * 16 - at, "%s%.9g", k ? "," : "", (double)d->window[i]);
    }
    snprintf(run, 16, "%d", d->run);
    snprintf(reference, 32, "%.9g", (double)d->reference);
    keys[0] = "divergence_window", keys[1] = "divergence_run", keys[2] = "divergence_reference";
    values[0] = window, values[1] = run, values[2] = reference;
}

int cli_divergence_load(cli_divergence *d, const char *window, const char *run, const char *reference) {
    if (!window && !run && !reference) return 0; /* a file written before the window was saved */
    cli_divergence in = *d;
    in.n = in.next = 0;
    char *end = NULL;
    const char *p = window ? window : "";
    while (*p && in.n < DIV_WINDOW) {
        float v = strtof(p, &end);
        if (end == p || !isfinite(v) || (*end && *end != ',')) return 1;
        in.window[in.n++] = v;
        p = *end ? end + 1 : end;
    }
    in.next = in.n % DIV_WINDOW;
    long r = run ? strtol(run, &end, 10) : -1;
    if (*p || !run || *end || r < 0 || r >= DIV_RUN) return 1;
    in.run = (int)r;
    in.reference = reference ? strtof(reference, &end) : -1;
    if (!reference || *end || !(in.reference >= 0) || !isfinite(in.reference)) return 1;
    in.fresh = 0;
    *d = in;
    return 0;
}
