/* args.c: flag parsing shared by the subcommands. Every flag takes a value
 * (--flag VALUE or --flag=VALUE); an unknown or malformed flag is a usage
 * error (exit 2) with one line saying what to do. */
#include "args.h"
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void cli_args_default(cli_args *a) {
    memset(a, 0, sizeof *a);
    a->model = "gpt";
    a->layers = 4;
    a->dim = 128;
    a->heads = 4;
    a->context = 64;
    a->vocab = 256;
    a->batch = 8;
    a->enc_layers = 2;
    a->dec_layers = 2;
    static const int default_widths[] = {256, 1024, 256, 1024, 256};
    a->n_widths = 5;
    memcpy(a->widths, default_widths, sizeof default_widths);
    a->val_fraction = 0.1f;
    a->sampler = "random";
    a->steps = 100;
    a->threads = 0;
    a->micro_batches = 1;
    a->eval_every = 0;
    a->warmup = 0;
    a->seed = 1337;
    a->optimizer = "adamw";
    a->lr = 1e-3f;
    a->weight_decay = 0.1f;
    a->beta1 = 0.9f;
    a->beta2 = 0.95f;
    a->adam_eps = 1e-8f;
    a->grad_clip = 1.0f;
    a->lr_schedule = "constant";
    a->checkpoint = "none";
    a->precision = "fp32";
    a->prompt = "";
    a->tokens = 200;
    a->top_k = 0;
    a->temperature = 1.0f;
    a->command = "";
    a->frozen_dtype = "auto";
}

int cli_fail_rank = -1;

/* The error is one line: a control character in it (a newline or a
 * terminal escape in a path the user gave, in a file's name or contents
 * the library quotes) is shown as '?'. */
static void one_line(char *msg) {
    for (unsigned char *c = (unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f) *c = '?';
}

int cli_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2048], rank[32] = ""; /* a memory limit's breakdown with its least limits (cli/limit.c) */
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(msg);
    if (cli_fail_rank >= 0) snprintf(rank, sizeof rank, "rank %d: ", cli_fail_rank);
    fprintf(stderr, "remat: error: %s%s\n", rank, msg); /* one write: ranks' lines do not interleave */
    return status;
}

void cli_notice(const char *kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(msg);
    fprintf(stderr, "remat: %s: %s\n", kind, msg);
}

int cli_given(const cli_args *a, const char *flag) {
    for (int i = 0; i < a->n_given; i++)
        if (strcmp(a->given[i], flag) == 0) return 1;
    return 0;
}

void cli_once(const char *flag, const char **seen, const char *value) {
    if (*seen && value && strcmp(*seen, value) != 0)
        cli_notice("warning", "%s is given twice, '%.200s' then '%.200s': the last is used (give it once)",
                      flag, *seen, value);
    *seen = value;
}

/* Marks flag given (with the text of its value, NULL for a boolean); a
 * second value is warned about (cli_once). */
static void mark_given(cli_args *a, const char *flag, const char *value) {
    for (int i = 0; i < a->n_given; i++)
        if (strcmp(a->given[i], flag) == 0) {
            cli_once(flag, &a->given_value[i], value);
            return;
        }
    if (a->n_given < (int)(sizeof a->given / sizeof a->given[0])) {
        a->given_value[a->n_given] = value;
        snprintf(a->given[a->n_given++], sizeof a->given[0], "%s", flag);
    }
}

/* One rule for every number, size and list item the command line gives:
 * its characters are the value, no white space around or inside it (' 4',
 * '4 ' and '4 ,4' are refused alike), and a number is written in decimal
 * (no hexadecimal, inf or nan). NULL when s is such a number, else why not. */
static const char *not_decimal(const char *s, int whole) {
    if (!*s) return "it is empty";
    for (const char *c = s; *c; c++)
        if (isspace((unsigned char)*c)) return "no white space, please: remove it";
    return strspn(s, whole ? "+-0123456789" : "+-.0123456789eE") == strlen(s) ? NULL : "not a decimal number";
}

int cli_parse_int(const char *flag, const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    const char *why = not_decimal(s, 1);
    long v = why ? 0 : strtol(s, &end, 10);
    if (why || errno || *end || end == s || v < lo || v > hi) {
        cli_fail(2, "%s expects a whole number from %d to %d, got '%.200s'%s%s", flag, lo, hi, s, why ? ": " : "",
                 why ? why : "");
        return 0;
    }
    *out = (int)v;
    return 1;
}

/* s as a decimal number into *v: NULL, or why it is not one. */
static const char *number_of(const char *s, double *v) {
    const char *why = not_decimal(s, 0);
    if (why) return why;
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (errno == ERANGE && fabs(*v) < 1) errno = 0; /* 1e-45: below the smallest double, read as 0 or tiny */
    return errno || *end || end == s ? "not a decimal number" : NULL;
}

int cli_parse_double(const char *flag, const char *s, double lo, double hi, double *out) {
    double v = NAN;
    const char *why = number_of(s, &v);
    if (why || !(v >= lo && v <= hi)) {
        cli_fail(2, "%s expects a number from %g to %g, got '%.200s'%s%s", flag, lo, hi, s, why ? ": " : "",
                 why ? why : "");
        return 0;
    }
    *out = v;
    return 1;
}

/* A float flag: its range is checked on the float the value becomes, so
 * that '0.95' is within 0.95f (as a double it is above it). */
/* A number in [lo, hi], or with an open end (open_lo: above lo; open_hi:
 * below hi): the ops' own ranges, whose ends some refuse (rope's theta of
 * 1, an eps of 0 or 1). */
static int parse_float_in(const char *flag, const char *s, float lo, int open_lo, float hi, int open_hi, float *out) {
    double v = NAN;
    const char *why = number_of(s, &v);
    const float f = !why && fabs(v) <= FLT_MAX ? (float)v : NAN; /* below FLT_MIN: a denormal or 0, as the number is */
    if (why || !((open_lo ? f > lo : f >= lo) && (open_hi ? f < hi : f <= hi))) {
        if (open_lo || open_hi)
            cli_fail(2, "%s expects a number %s %g and %s %g, got '%.200s'%s%s", flag, open_lo ? "above" : "from",
                     (double)lo, open_hi ? "below" : "at most", (double)hi, s, why ? ": " : "", why ? why : "");
        else
            cli_fail(2, "%s expects a number from %g to %g, got '%.200s'%s%s", flag, (double)lo, (double)hi, s,
                     why ? ": " : "", why ? why : "");
        return 0;
    }
    *out = f;
    return 1;
}

static int parse_float(const char *flag, const char *s, float lo, float hi, float *out) {
    return parse_float_in(flag, s, lo, 0, hi, 0, out);
}

int cli_parse_list(const char *flag, const char *s, int max, const char *example, cli_list *l) {
    int n = 0;
    if (l && max > CLI_LIST_MAX) max = CLI_LIST_MAX;
    const char *p = s;
    for (;;) {
        size_t len = strcspn(p, ","), blank = 0;
        for (size_t i = 0; i < len; i++) blank |= isspace((unsigned char)p[i]) != 0;
        const char *why = len == 0                    ? "an empty item"
                          : blank                     ? "white space in an item"
                          : l && len >= CLI_ITEM_MAX ? "an item too long"
                                                      : NULL;
        if (!why && n >= max) why = "too many items";
        if (why) {
            char most[48] = "";
            if (max > 1 && l) snprintf(most, sizeof most, ", at most %d", max);
            cli_fail(2, "%s expects a comma-separated list like %s (no empty items, no white space%s); '%.200s' has %s",
                     flag, example, most, s, why);
            return 0;
        }
        if (l) {
            memcpy(l->item[n], p, len);
            l->item[n][len] = 0;
            l->n = n + 1;
        }
        n++;
        if (!p[len]) return 1;
        p += len + 1;
    }
}

int cli_parse_set(const char *flag, const char *s, int max, const char *example, cli_list *l) {
    if (!cli_parse_list(flag, s, max, example, l)) return 0;
    for (const char *p = s;; p++) { /* each item against those before it */
        const size_t n = strcspn(p, ",");
        for (const char *q = s; q < p; q += strcspn(q, ",") + 1)
            if (strcspn(q, ",") == n && !strncmp(q, p, n))
                return cli_fail(2, "%s lists '%.*s' twice: give each once", flag, (int)n, p), 0;
        p += n;
        if (!*p) return 1;
    }
}

/* "0.9,0.999": AdamW's beta1 and beta2, each in [0, 1) */
static int parse_betas(const char *s, float *b1, float *b2) {
    cli_list l;
    const char *what = "--adam-betas expects two numbers in [0, 1) like 0.9,0.95; got '%s'";
    if (!cli_parse_list("--adam-betas", s, 2, "0.9,0.95", &l)) return 0;
    float v[2];
    for (int i = 0; i < 2; i++) {
        char *end;
        errno = 0;
        v[i] = i < l.n && !not_decimal(l.item[i], 0) ? strtof(l.item[i], &end) : NAN;
        if (i >= l.n || isnan(v[i]) || errno || *end || end == l.item[i] || !(v[i] >= 0.0f && v[i] < 1.0f))
            return cli_fail(2, what, s), 0;
    }
    *b1 = v[0], *b2 = v[1];
    return 1;
}

/* "256,1024,256": the hidden widths of the mlp */
static int parse_widths(cli_args *a, const char *s) {
    cli_list l;
    if (!cli_parse_list("--widths", s, RM_MLP_MAX_LAYERS - 1, "256,1024,256", &l)) return 0;
    for (int i = 0; i < l.n; i++) {
        char *end;
        errno = 0;
        long w = not_decimal(l.item[i], 1) ? 0 : strtol(l.item[i], &end, 10);
        if (w == 0 || errno || *end || end == l.item[i] || w < 1 || w > (1 << 20))
            return cli_fail(2, "--widths expects comma-separated widths from 1 to 1048576 like 256,1024,256; "
                            "'%s' in '%.200s' is not one", l.item[i], s), 0;
        a->widths[i] = (int)w;
    }
    a->n_widths = l.n;
    return 1;
}

/* Sets the flag that takes a value; 0 (message printed) if v is bad. */
static int set_value(cli_args *a, const char *flag, const char *v) {
    int ok = 1;
#define IS(name) (strcmp(flag, name) == 0)
    if (IS("--model")) {
        if (strcmp(v, "gpt") && strcmp(v, "mlp") && strcmp(v, "llama") && strcmp(v, "uvit") && strcmp(v, "encdec"))
            ok = (cli_fail(2, "--model is gpt, mlp, llama, uvit or encdec, got '%s'", v), 0);
        a->model = v;
    } else if (IS("--layers")) ok = cli_parse_int(flag, v, 1, 4096, &a->layers);
    else if (IS("--ffn-dim")) ok = cli_parse_int(flag, v, 1, 1 << 20, &a->ffn_dim);
    else if (IS("--kv-heads")) ok = cli_parse_int(flag, v, 1, 1 << 12, &a->kv_heads);
    else if (IS("--rope-theta")) ok = parse_float_in(flag, v, 1.0f, 1, 1e30f, 0, &a->rope_theta); /* rm_rope's rule */
    else if (IS("--norm-eps")) ok = parse_float_in(flag, v, 0.0f, 1, 1.0f, 1, &a->norm_eps); /* rm_rmsnorm's */
    else if (IS("--enc-layers")) ok = cli_parse_int(flag, v, 1, 4096, &a->enc_layers);
    else if (IS("--dec-layers")) ok = cli_parse_int(flag, v, 1, 4096, &a->dec_layers);
    else if (IS("--source")) a->source = v;
    else if (IS("--freeze") || IS("--train-only")) {
        if (!*v || strlen(v) >= sizeof ((rm_run_info *)0)->freeze)
            ok = (cli_fail(2, "%s expects comma-separated globs on parameter names (e.g. 'model.embed_tokens,"
                           "model.layers.0'), at most 255 characters; got '%.40s'", flag, v), 0);
        else ok = cli_parse_set(flag, v, INT_MAX, "'model.embed_tokens,lm_head'", NULL);
        if (IS("--freeze")) a->freeze = v;
        else a->train_only = v;
    } else if (IS("--lora")) ok = cli_parse_int(flag, v, 1, 1 << 16, &a->lora_rank);
    else if (IS("--lora-alpha")) ok = parse_float(flag, v, -1e6f, 1e6f, &a->lora_alpha);
    else if (IS("--lora-dropout")) ok = parse_float(flag, v, 0.0f, 0.95f, &a->lora_dropout);
    else if (IS("--lora-targets")) {
        if (!*v || strlen(v) >= sizeof ((rm_lora_config *)0)->targets)
            ok = (cli_fail(2, "--lora-targets expects comma-separated module names such as q_proj,v_proj, at most "
                           "159 characters; got '%.40s'", v), 0);
        else ok = cli_parse_set(flag, v, INT_MAX, "q_proj,v_proj", NULL);
        a->lora_targets = v;
    } else if (IS("--save-adapters")) a->save_adapters = v;
    else if (IS("--out")) a->out = v;
    else if (IS("--adapters")) a->adapters = v;
    else if (IS("--base-model")) a->base_model = v;
    else if (IS("--dim")) ok = cli_parse_int(flag, v, 1, 1 << 16, &a->dim);
    else if (IS("--heads")) ok = cli_parse_int(flag, v, 1, 1 << 12, &a->heads);
    else if (IS("--context")) ok = cli_parse_int(flag, v, 1, 1 << 16, &a->context);
    else if (IS("--vocab")) ok = cli_parse_int(flag, v, 2, 1 << 24, &a->vocab), a->vocab_set = 1;
    else if (IS("--batch")) ok = cli_parse_int(flag, v, 1, 1 << 16, &a->batch);
    else if (IS("--widths")) ok = parse_widths(a, v);
    else if (IS("--dropout")) ok = parse_float(flag, v, 0.0f, 0.95f, &a->dropout);
    else if (IS("--data")) a->data = v;
    else if (IS("--frozen-dtype")) {
        if (strcmp(v, "auto") && strcmp(v, "f32") && strcmp(v, "bf16") && strcmp(v, "f16"))
            ok = (cli_fail(2, "--frozen-dtype is auto, f32, bf16 or f16, got '%s'", v), 0);
        a->frozen_dtype = v;
    } else if (IS("--token-bytes")) {
        ok = cli_parse_int(flag, v, 2, 4, &a->token_bytes);
        if (ok && a->token_bytes == 3) ok = (cli_fail(2, "--token-bytes is 2 or 4, got '%s'", v), 0);
    } else if (IS("--max-batches")) ok = cli_parse_int(flag, v, 0, 1 << 30, &a->max_batches);
    else if (IS("--val-fraction")) ok = parse_float(flag, v, 0.0f, 0.9f, &a->val_fraction);
    else if (IS("--sampler")) {
        if (strcmp(v, "random") && strcmp(v, "sequential"))
            ok = (cli_fail(2, "--sampler is random or sequential, got '%s'", v), 0);
        a->sampler = v;
    } else if (IS("--steps")) ok = cli_parse_int(flag, v, 0, 1 << 30, &a->steps);
    else if (IS("--micro-batches")) ok = cli_parse_int(flag, v, 1, 1 << 16, &a->micro_batches);
    else if (IS("--threads")) ok = cli_parse_int(flag, v, 1, 1024, &a->threads);
    else if (IS("--eval-every")) ok = cli_parse_int(flag, v, 0, 1 << 30, &a->eval_every);
    else if (IS("--warmup")) ok = cli_parse_int(flag, v, 0, 1 << 30, &a->warmup);
    else if (IS("--seed")) {
        int s;
        ok = cli_parse_int(flag, v, 0, 2147483647, &s);
        a->seed = (uint64_t)s;
    } else if (IS("--optimizer")) {
        if (strcmp(v, "adamw") && strcmp(v, "sgd")) ok = (cli_fail(2, "--optimizer is adamw or sgd, got '%s'", v), 0);
        a->optimizer = v;
    } else if (IS("--lr")) ok = parse_float(flag, v, 0.0f, 100.0f, &a->lr);
    else if (IS("--weight-decay")) ok = parse_float(flag, v, 0.0f, 10.0f, &a->weight_decay);
    else if (IS("--adam-betas")) ok = parse_betas(v, &a->beta1, &a->beta2);
    else if (IS("--adam-eps")) ok = parse_float(flag, v, 1e-30f, 1.0f, &a->adam_eps);
    else if (IS("--grad-clip")) ok = parse_float(flag, v, 0.0f, 1e9f, &a->grad_clip);
    else if (IS("--lr-schedule")) {
        if (strcmp(v, "constant") && strcmp(v, "cosine"))
            ok = (cli_fail(2, "--lr-schedule is constant or cosine, got '%s'", v), 0);
        a->lr_schedule = v;
    } else if (IS("--checkpoint")) a->checkpoint = v;
    else if (IS("--precision")) { /* rm_parse_precision's words, without the library (fuzz/fuzz_args.c) */
        if (strcmp(v, "fp32") && strcmp(v, "bf16"))
            ok = (cli_fail(2, "--precision: unknown precision '%.40s' (try fp32 or bf16)", v), 0);
        a->precision = v;
    }
    else if (IS("--memory-budget")) a->memory_budget = v;
    else if (IS("--memory-limit")) a->memory_limit = v;
    else if (IS("--scratch")) a->scratch = v;
    else if (IS("--scratch-bandwidth")) a->scratch_bandwidth = v;
    else if (IS("--page")) a->page = v;
    else if (IS("--init")) a->init = v;
    else if (IS("--save")) a->save = v;
    else if (IS("--resume")) a->resume = v;
    else if (IS("--save-every")) ok = cli_parse_int(flag, v, 1, 1 << 30, &a->save_every);
    else if (IS("--keep")) ok = cli_parse_int(flag, v, 0, 1 << 20, &a->keep);
    else if (IS("--report")) a->report = v;
    else if (IS("--trace")) a->trace = v;
    else if (IS("--trace-step")) ok = cli_parse_int(flag, v, 1, 1 << 30, &a->trace_step);
    else if (IS("--load")) a->load = v;
    else if (IS("--prompt")) a->prompt = v;
    else if (IS("--tokens")) ok = cli_parse_int(flag, v, 0, 1 << 20, &a->tokens);
    else if (IS("--top-k")) ok = cli_parse_int(flag, v, 0, 1 << 24, &a->top_k);
    else if (IS("--temperature")) ok = parse_float(flag, v, 0.0f, 100.0f, &a->temperature);
    else ok = (cli_fail(2, "unknown flag '%s' (see remat %s --help)", flag, a->command), 0);
#undef IS
    return ok;
}

/* The flags that name a file or folder: an empty name is refused at once,
 * the same for every one (cli/paths.c says it for those it checks; sample
 * --load '' was "cannot open ''", exit 1). */
static int is_path_flag(const char *f) {
    static const char *const paths[] = {"--data", "--init", "--save", "--resume", "--report", "--trace", "--load",
                                        "--out", "--adapters", "--save-adapters", NULL};
    for (int i = 0; paths[i]; i++)
        if (!strcmp(f, paths[i])) return 1;
    return 0;
}

/* The flags that take no value; NULL for any other. */
static int *boolean_flag(cli_args *a, const char *f) {
    return !strcmp(f, "--quiet")              ? &a->quiet
           : !strcmp(f, "--verify-recompute") ? &a->verify_recompute
           : !strcmp(f, "--shard-optimizer")  ? &a->shard_optimizer
           : !strcmp(f, "--no-overlap")       ? &a->no_overlap
           : !strcmp(f, "--fuse-optimizer")   ? &a->fuse_optimizer
           : !strcmp(f, "--print-plan")       ? &a->print_plan
           : !strcmp(f, "--batchnorm")        ? &a->batchnorm
           : !strcmp(f, "--tie-embeddings")   ? &a->tie_embeddings
           : !strcmp(f, "--merge-lora")       ? &a->merge_lora
           : !strcmp(f, "--allow-output-in-model-folder") ? &a->new_in_model_folder
                                              : NULL;
}

/* Which subcommands use each flag (bench passes its flags to its children,
 * `remat train`, less those it sets itself: cli/bench.c). A flag that a
 * command does not use is never silently ignored: it is refused (exit 2)
 * when it asks for something the command would not do (a file, a model
 * other than the one it reads, generation, training), and plan warns about
 * the training settings that have no bearing on a plan (a model's plan is
 * the same whatever --lr or --steps), so that a training command line can
 * be planned as it is. */
enum { U_TRAIN = 1, U_PLAN = 2, U_SAMPLE = 4, U_BENCH = 8, U_EXPORT = 16, U_EVAL = 32, U_ALL = 63 };
enum { N_COMMANDS = 6 };
enum { MODEL = 1, SETTING = 2 }; /* MODEL: sample takes it from its file; SETTING: plan warns */
static const struct flag_use {
    const char *name;
    int users, kind;
} flag_uses[] = {
    /* eval: --context and --batch are its batches; with --init DIR the shape flags must agree with
     * config.json, with --load FILE they are refused (cli/eval.c) */
    {"--model", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--layers", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--dim", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--heads", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--context", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--vocab", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--batch", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--widths", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--dropout", U_TRAIN | U_PLAN | U_BENCH, MODEL}, {"--ffn-dim", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--kv-heads", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--rope-theta", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--norm-eps", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL}, {"--tie-embeddings", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--enc-layers", U_TRAIN | U_PLAN | U_BENCH, MODEL}, {"--dec-layers", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--batchnorm", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--data", U_TRAIN | U_BENCH | U_EVAL, SETTING}, {"--token-bytes", U_TRAIN | U_BENCH | U_EVAL, SETTING},
    {"--max-batches", U_EVAL, 0}, {"--val-fraction", U_TRAIN | U_BENCH, SETTING},
    {"--sampler", U_TRAIN | U_BENCH, SETTING}, {"--steps", U_TRAIN | U_BENCH, SETTING},
    {"--threads", U_ALL, 0}, {"--eval-every", U_TRAIN, SETTING}, {"--warmup", U_TRAIN | U_BENCH, SETTING},
    {"--seed", U_TRAIN | U_SAMPLE | U_BENCH, SETTING}, {"--optimizer", U_TRAIN | U_BENCH, SETTING},
    {"--lr", U_TRAIN | U_BENCH, SETTING}, {"--weight-decay", U_TRAIN | U_BENCH, SETTING},
    {"--adam-betas", U_TRAIN | U_BENCH, SETTING}, {"--adam-eps", U_TRAIN | U_BENCH, SETTING},
    {"--grad-clip", U_TRAIN | U_BENCH, SETTING}, {"--lr-schedule", U_TRAIN | U_BENCH, SETTING},
    {"--checkpoint", U_TRAIN | U_PLAN, 0}, {"--memory-budget", U_TRAIN | U_PLAN, 0},
    {"--precision", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, 0},
    {"--memory-limit", U_TRAIN | U_BENCH, 0}, {"--init", U_TRAIN | U_BENCH | U_EVAL, 0}, {"--save", U_TRAIN, 0},
    {"--resume", U_TRAIN, 0}, {"--save-every", U_TRAIN, 0}, {"--keep", U_TRAIN, 0}, {"--report", U_TRAIN | U_EVAL, 0},
    {"--micro-batches", U_TRAIN | U_BENCH, 0}, {"--trace", U_TRAIN, 0}, {"--trace-step", U_TRAIN, 0},
    {"--load", U_SAMPLE | U_EXPORT | U_EVAL, 0}, {"--prompt", U_SAMPLE, 0}, {"--tokens", U_SAMPLE, 0}, {"--top-k", U_SAMPLE, 0},
    {"--temperature", U_SAMPLE, 0}, {"--source", U_SAMPLE, 0},
    {"--quiet", U_TRAIN | U_BENCH | U_EVAL, SETTING}, {"--verify-recompute", U_TRAIN | U_BENCH, SETTING},
    {"--shard-optimizer", U_TRAIN | U_BENCH, SETTING}, {"--no-overlap", U_TRAIN | U_BENCH, SETTING},
    {"--fuse-optimizer", U_TRAIN | U_BENCH, 0}, {"--print-plan", U_TRAIN | U_PLAN, SETTING},
    /* fine-tuning: which parameters train is the model's (plan counts it; sample reads it from its file) */
    {"--freeze", U_TRAIN | U_PLAN | U_BENCH, MODEL}, {"--train-only", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--lora", U_TRAIN | U_PLAN | U_BENCH, MODEL}, {"--lora-alpha", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--lora-dropout", U_TRAIN | U_PLAN | U_BENCH, MODEL}, {"--lora-targets", U_TRAIN | U_PLAN | U_BENCH, MODEL},
    {"--save-adapters", U_TRAIN, 0},
    /* how frozen weights are kept (plan: the planned memory of a bf16 base) */
    {"--frozen-dtype", U_TRAIN | U_PLAN | U_BENCH | U_EVAL, MODEL},
    {"--out", U_EXPORT, 0}, {"--adapters", U_EXPORT, 0}, {"--base-model", U_EXPORT, 0}, {"--merge-lora", U_EXPORT, 0},
    /* the commands that read a model folder (--init DIR; export's --base-model DIR) and write files */
    {"--allow-output-in-model-folder", U_TRAIN | U_BENCH | U_EVAL | U_EXPORT, 0},
    /* paging (issue 20): bench takes --scratch DIR as its own flag (the paged sweep) */
    {"--scratch", U_TRAIN | U_PLAN, 0}, {"--scratch-bandwidth", U_TRAIN | U_PLAN, 0}, {"--page", U_TRAIN | U_PLAN, 0},
};

/* The command's bit in flag_uses. */
static int command_bit(const char *command) {
    return !strcmp(command, "plan") ? U_PLAN : !strcmp(command, "sample") ? U_SAMPLE : !strcmp(command, "bench") ? U_BENCH
           : !strcmp(command, "export") ? U_EXPORT : !strcmp(command, "eval") ? U_EVAL : U_TRAIN;
}

static const struct flag_use *flag_use(const char *flag) {
    for (size_t i = 0; i < sizeof flag_uses / sizeof *flag_uses; i++)
        if (!strcmp(flag_uses[i].name, flag)) return &flag_uses[i];
    return NULL;
}

int cli_flag_applies(const char *flag, const char *command) {
    const struct flag_use *u = flag_use(flag);
    return u && (u->users & command_bit(command));
}

/* The flags that take a value: the table's, less the boolean ones. */
static int known_flag(const char *flag) {
    cli_args scratch;
    return flag_use(flag) && !boolean_flag(&scratch, flag);
}

/* The LoRA flags need --lora (which command uses each: flag_uses). */
static int check_finetune_flags(const cli_args *a) {
    static const char *const lora[] = {"--lora-alpha", "--lora-dropout", "--lora-targets", "--save-adapters"};
    for (size_t i = 0; i < sizeof lora / sizeof *lora; i++)
        if (cli_given(a, lora[i]) && !a->lora_rank && !cli_given(a, "--resume")) {
            cli_fail(2, "%s needs --lora R (the adapters' rank)", lora[i]);
            return 0;
        }
    return 1;
}

/* Every given flag against the command's use of it (flag_uses). */
static int check_command_flags(const cli_args *a) {
    const int me = command_bit(a->command);
    static const char *const names[N_COMMANDS] = {"train", "plan", "sample", "bench", "export", "eval"};
    for (int i = 0; i < a->n_given; i++) {
        const struct flag_use *u = flag_use(a->given[i]);
        if (!u || (u->users & me)) continue;
        const char *f = u->name;
        if ((me == U_PLAN && u->kind == SETTING) || (me == U_SAMPLE && !strcmp(f, "--quiet")) ||
            (me == U_BENCH && !strcmp(f, "--print-plan"))) {
            cli_notice("warning", "%s does not apply to remat %s; ignored", f, a->command);
            continue;
        }
        char users[80] = "";
        int n = 0, k = 0, total = 0;
        for (int c = 0; c < N_COMMANDS; c++) total += (u->users >> c) & 1;
        for (int c = 0; c < N_COMMANDS; c++)
            if ((u->users >> c) & 1) {
                const char *sep = n == 0 ? "" : n == total - 1 ? " and " : ", ";
                k += snprintf(users + k, sizeof users - (size_t)k, "%s%s", sep, names[c]);
                n++;
            }
        const char *why = me == U_SAMPLE && u->kind == MODEL ? ": the model comes from the --load file"
                          : me == U_PLAN && !strcmp(f, "--memory-limit") ? ": plan a budget with --memory-budget" : "";
        return cli_fail(2, "%s applies to remat %s, not remat %s%s (drop it; see remat %s --help)", f, users,
                        a->command, why, a->command), 0;
    }
    return 1;
}

/* Flags that belong to one model are usage errors with another. */
static int check_model_flags(cli_args *a) {
    const int encdec = strcmp(a->model, "encdec") == 0;
    if (encdec && cli_given(a, "--layers"))
        return cli_fail(2, "--model encdec takes --enc-layers N and --dec-layers N, not --layers"), 0;
    if (!encdec && (cli_given(a, "--enc-layers") || cli_given(a, "--dec-layers")))
        return cli_fail(2, "--enc-layers and --dec-layers are for --model encdec (use --layers)"), 0;
    /* with --resume the model is the file's, with --init DIR config.json's
     * (cli_resume_args, cli_hf_open check these against it) */
    struct stat sb;
    const int hf_dir = a->init && stat(a->init, &sb) == 0 && S_ISDIR(sb.st_mode);
    const int other = strcmp(a->model, "llama") != 0 && !a->resume && !hf_dir;
    if (cli_given(a, "--ffn-dim") && other)
        return cli_fail(2, "--ffn-dim is for --model llama (gpt and uvit use 4 x --dim)"), 0;
    static const char *const llama_only[] = {"--kv-heads", "--rope-theta", "--norm-eps", "--tie-embeddings"};
    for (size_t i = 0; i < sizeof llama_only / sizeof *llama_only; i++)
        if (cli_given(a, llama_only[i]) && other)
            return cli_fail(2, "%s is for --model llama", llama_only[i]), 0;
    for (int i = 0; encdec && i < 2; i++) /* the builders' bounds, said with the flag */
        if ((i ? a->dec_layers : a->enc_layers) > RM_ENCDEC_MAX_LAYERS)
            return cli_fail(2, "%s is at most %d for --model encdec (its plan is a graph's, whose planning time grows "
                            "with the square of the layers)", i ? "--dec-layers" : "--enc-layers",
                            RM_ENCDEC_MAX_LAYERS), 0;
    if (strcmp(a->model, "mlp") && strcmp(a->model, "llama") && a->dim % a->heads) { /* llama: its own rule (RoPE) */
        int lo = a->dim / a->heads * a->heads;
        char e[48];
        if (lo) snprintf(e, sizeof e, "--dim %d or %d", lo, lo + a->heads);
        else snprintf(e, sizeof e, "--dim %d", a->heads);
        return cli_fail(2, "--dim %d is not a multiple of --heads %d (each head takes dim/heads): give e.g. %s",
                        a->dim, a->heads, e), 0;
    }
    if (!strcmp(a->model, "mlp") && cli_given(a, "--lora"))
        return cli_fail(2, "--lora applies to --model gpt, llama and uvit (their projections take adapters), not "
                        "mlp: drop --lora, or fine-tune the mlp whole (--freeze/--train-only choose its layers)"), 0;
    if (!strcmp(a->model, "uvit") && a->layers > 1024)
        return cli_fail(2, "--layers is at most 1024 for --model uvit (the bound of rm_uvit_build)"), 0;
    if (encdec && !cli_given(a, "--vocab")) a->vocab = RM_ENCDEC_VOCAB;
    return check_command_flags(a) && check_finetune_flags(a);
}

int cli_own_flag(int argc, char **argv, int *i, const char *const *with_value, const char *const *alone,
                 const char *command, const char **name, const char **value) {
    const char *f = argv[*i];
    size_t len = strcspn(f, "=");
    for (int k = 0; alone[k]; k++)
        if (strlen(alone[k]) == len && !strncmp(f, alone[k], len)) {
            if (f[len]) return cli_fail(2, "%s takes no value: write %s alone, not '%s'", alone[k], alone[k], f), -1;
            *name = alone[k], *value = NULL;
            return 1;
        }
    for (int k = 0; with_value[k]; k++)
        if (strlen(with_value[k]) == len && !strncmp(f, with_value[k], len)) {
            *name = with_value[k];
            if (f[len]) {
                *value = f + len + 1;
                return 1;
            }
            if (*i + 1 >= argc)
                return cli_fail(2, "%s needs a value (see remat %s --help)", *name, command), -1;
            *value = argv[++*i];
            return 1;
        }
    return 0;
}

int cli_args_parse(cli_args *a, int argc, char **argv, int first) {
    for (int i = first; i < argc; i++) {
        const char *f = argv[i], *v = NULL;
        char flag[64];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            a->help = 1;
            return 1;
        }
        if (strncmp(f, "--", 2) != 0) {
            cli_fail(2, "unexpected argument '%s' (flags start with --; see remat %s --help)", f, a->command);
            return 0;
        }
        int *boolean = boolean_flag(a, f);
        if (boolean) {
            *boolean = 1;
            mark_given(a, f, NULL);
            continue;
        }
        const char *eq = strchr(f, '=');
        if (eq) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - f), f);
            v = eq + 1;
        } else {
            snprintf(flag, sizeof flag, "%s", f);
        }
        if (eq && boolean_flag(a, flag)) {
            cli_fail(2, "%s takes no value: write %s alone, not '%s'", flag, flag, f);
            return 0;
        }
        if (!known_flag(flag)) {
            cli_fail(2, "unknown flag '%s' (see remat %s --help)", flag, a->command);
            return 0;
        }
        if (!eq) {
            if (i + 1 >= argc) {
                cli_fail(2, "%s needs a value (see remat %s --help)", flag, a->command);
                return 0;
            }
            v = argv[++i];
            /* "--save --report r.json": the value is missing, not named --report */
            char next[64];
            snprintf(next, sizeof next, "%.*s", (int)strcspn(v, "="), v);
            if (!strncmp(v, "--", 2) && (flag_use(next) || !strcmp(next, "--help"))) {
                cli_fail(2, "%s needs a value, but the next argument is the flag %s (write %s=%s if that is "
                         "really the value)", flag, v, flag, v);
                return 0;
            }
        }
        if (!*v && is_path_flag(flag))
            return cli_fail(2, "%s needs a %s name, got ''", flag, strstr(flag, "adapters") ? "folder" : "file"), 0;
        if (!set_value(a, flag, v)) return 0;
        mark_given(a, flag, v);
    }
    return check_model_flags(a);
}
