/* ckptfile.c: the run that `remat train`'s flags describe (the metadata of
 * its training-state files, rm_run_info), resuming from one, and the names
 * of the periodic step files. */
#include "ckptfile.h"
#include "hf.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- resuming ------------------------------------------------------------- */

typedef struct ctx {
    cli_args *a;
    const char *path;
    int rc; /* the first error's exit status */
} ctx;

static void note_override(ctx *c, const char *flag, const char *file_value) {
    cli_notice("note", "%s overrides the value in '%s' (%s): the resumed run differs "
               "from one that never stopped", flag, c->path, file_value);
}

/* A model flag: the file's value; an explicit flag that contradicts it is a
 * usage error. */
static void model_int(ctx *c, const char *flag, int *field, int file) {
    if (c->rc) return;
    if (cli_given(c->a, flag) && *field != file)
        c->rc = cli_fail(2, "'%s' holds a model with %s %d but the command line says %s %d; "
                         "a resumed run takes the model from the file (drop %s)", c->path, flag, file,
                         flag, *field, flag);
    else *field = file;
}

/* model_int for a float. */
static void model_float(ctx *c, const char *flag, float *field, float file) {
    if (c->rc) return;
    if (cli_given(c->a, flag) && *field != file)
        c->rc = cli_fail(2, "'%s' holds a model with %s %g but the command line says %s %g; a resumed run takes "
                         "the model from the file (drop %s)", c->path, flag, (double)file, flag, (double)*field, flag);
    else *field = file;
}

/* A string that shapes the trained model (what is frozen): the file's
 * (NULL for ""); an explicit flag that differs is a usage error. */
static void model_str(ctx *c, const char *flag, const char **field, const char *file) {
    if (c->rc) return;
    if (cli_given(c->a, flag) && strcmp(*field, file) != 0)
        c->rc = cli_fail(2, "'%s' was trained with %s '%s' but the command line says %s '%s'; a resumed run "
                         "takes it from the file (drop %s)", c->path, flag, file, flag, *field, flag);
    else *field = *file ? file : NULL;
}

/* A training flag: the file's value unless the flag was given (a different
 * value gets a note; --steps is expected to be given). */
static void train_int(ctx *c, const char *flag, int *field, int file) {
    char b[32];
    if (c->rc) return;
    if (!cli_given(c->a, flag)) *field = file;
    else if (*field != file && strcmp(flag, "--steps") != 0)
        snprintf(b, sizeof b, "%d", file), note_override(c, flag, b);
}

static void train_float(ctx *c, const char *flag, float *field, float file) {
    char b[32];
    if (c->rc) return;
    if (!cli_given(c->a, flag)) *field = file;
    else if (*field != file) snprintf(b, sizeof b, "%g", (double)file), note_override(c, flag, b);
}

/* --adam-betas: both from the file unless given. */
static void train_betas(ctx *c, const rm_run_info *r) {
    char b[48];
    if (c->rc) return;
    if (!cli_given(c->a, "--adam-betas")) c->a->beta1 = r->optim.beta1, c->a->beta2 = r->optim.beta2;
    else if (c->a->beta1 != r->optim.beta1 || c->a->beta2 != r->optim.beta2)
        snprintf(b, sizeof b, "%g,%g", (double)r->optim.beta1, (double)r->optim.beta2),
            note_override(c, "--adam-betas", b);
}

/* A named choice; *field points at a literal. must_match: an explicit flag
 * that differs is a usage error, else a note. */
static void choice(ctx *c, const char *flag, const char **field, const char *file, int must_match) {
    if (c->rc) return;
    if (!cli_given(c->a, flag)) *field = file;
    else if (strcmp(*field, file) != 0) {
        if (must_match)
            c->rc = cli_fail(2, "'%s' was saved with %s %s but the command line says %s %s; "
                             "a resumed run takes it from the file (drop %s)", c->path, flag, file,
                             flag, *field, flag);
        else note_override(c, flag, file);
    }
}

/* llama's shape beyond layers, dim and heads (the file spells out defaults) */
static void llama_flags(ctx *c, const rm_run_info *r) {
    cli_args *a = c->a;
    model_int(c, "--ffn-dim", &a->ffn_dim, r->ffn_dim);
    model_int(c, "--kv-heads", &a->kv_heads, r->kv_heads ? r->kv_heads : r->heads);
    model_float(c, "--rope-theta", &a->rope_theta, r->rope_theta != 0.0f ? r->rope_theta : 10000.0f);
    model_float(c, "--norm-eps", &a->norm_eps, r->norm_eps != 0.0f ? r->norm_eps : 1e-6f);
    if (!c->rc && cli_given(a, "--tie-embeddings") && !r->tie_embeddings)
        c->rc = cli_fail(2, "'%s' holds a llama with an untied head; a resumed run takes the model from the "
                         "file (drop --tie-embeddings)", c->path);
    a->tie_embeddings = r->tie_embeddings;
}

static void model_flags(ctx *c, const rm_run_info *r) {
    cli_args *a = c->a;
    static const char *const models[] = {"gpt", "mlp", "llama", "uvit", "encdec"};
    const char *model = models[0];
    for (size_t i = 0; i < sizeof models / sizeof *models; i++)
        if (strcmp(r->model, models[i]) == 0) model = models[i];
    choice(c, "--model", &a->model, model, 1);
    if (c->rc) return;
    if (strcmp(a->model, "mlp") == 0) {
        int same = r->n_widths == a->n_widths;
        for (int i = 0; same && i < r->n_widths; i++) same = r->widths[i] == a->widths[i];
        if (cli_given(a, "--widths") && !same) {
            c->rc = cli_fail(2, "'%s' holds an mlp with other --widths; a resumed run takes the model "
                             "from the file (drop --widths)", c->path);
            return;
        }
        a->n_widths = r->n_widths;
        memcpy(a->widths, r->widths, sizeof a->widths);
        if (cli_given(a, "--batchnorm") && !r->batchnorm) {
            c->rc = cli_fail(2, "'%s' holds an mlp without --batchnorm; a resumed run takes "
                             "the model from the file (drop --batchnorm)", c->path);
            return;
        }
        a->batchnorm = r->batchnorm;
    } else if (strcmp(a->model, "encdec") == 0) {
        if (cli_given(a, "--layers")) { /* an encdec's depth is two flags: --layers would be ignored */
            c->rc = cli_fail(2, "'%s' holds an encdec (--enc-layers %d, --dec-layers %d): --layers does not apply; a "
                             "resumed run takes the model from the file (drop --layers)", c->path, r->enc_layers,
                             r->dec_layers);
            return;
        }
        model_int(c, "--enc-layers", &a->enc_layers, r->enc_layers);
        model_int(c, "--dec-layers", &a->dec_layers, r->dec_layers);
        model_int(c, "--dim", &a->dim, r->dim);
        model_int(c, "--heads", &a->heads, r->heads);
    } else {
        const char *other = cli_given(a, "--enc-layers") ? "--enc-layers" : cli_given(a, "--dec-layers") ? "--dec-layers"
                            : cli_given(a, "--ffn-dim") && strcmp(a->model, "llama") ? "--ffn-dim" : NULL;
        if (other) {
            c->rc = cli_fail(2, "'%s' holds a %s: %s does not apply; a resumed run takes the model from the file (drop "
                             "%s)", c->path, a->model, other, other);
            return;
        }
        model_int(c, "--layers", &a->layers, r->layers);
        model_int(c, "--dim", &a->dim, r->dim);
        model_int(c, "--heads", &a->heads, r->heads);
        if (strcmp(a->model, "llama") == 0) llama_flags(c, r);
    }
    static const char *const llama_only[] = {"--ffn-dim", "--kv-heads", "--rope-theta", "--norm-eps",
                                             "--tie-embeddings"};
    for (size_t i = 0; !c->rc && strcmp(a->model, "llama") != 0 && i < sizeof llama_only / sizeof *llama_only; i++)
        if (cli_given(a, llama_only[i]))
            c->rc = cli_fail(2, "'%s' holds a %s model: %s is for llama (drop it)", c->path, a->model, llama_only[i]);
    model_int(c, "--context", &a->context, r->context);
    model_int(c, "--vocab", &a->vocab, r->vocab);
    model_str(c, "--freeze", &a->freeze, r->freeze);
    model_str(c, "--train-only", &a->train_only, r->train_only);
    model_int(c, "--lora", &a->lora_rank, r->lora.rank);
    if (r->lora.rank > 0) { /* the adapters' shape and scale come from the file */
        model_float(c, "--lora-alpha", &a->lora_alpha, r->lora.alpha);
        model_float(c, "--lora-dropout", &a->lora_dropout, r->lora.dropout);
        model_str(c, "--lora-targets", &a->lora_targets, r->lora.targets);
        return;
    }
    static const char *const lora[] = {"--lora-alpha", "--lora-dropout", "--lora-targets"};
    for (size_t i = 0; !c->rc && i < sizeof lora / sizeof *lora; i++) /* else they would be ignored */
        if (cli_given(a, lora[i]))
            c->rc = cli_fail(2, "'%s' holds no LoRA adapters (it was not trained with --lora): %s does not apply; a "
                             "resumed run takes the model from the file (drop %s)", c->path, lora[i], lora[i]);
}

int cli_model_args(cli_args *a, const rm_run_info *r, const char *path) {
    ctx c = {a, path, 0};
    model_flags(&c, r);
    return c.rc;
}

int cli_resume_args(cli_args *a, const rm_run_info *r, const char *path) {
    ctx c = {a, path, 0};
    if (strcmp(r->model, "gpt") && strcmp(r->model, "mlp") && strcmp(r->model, "llama") && strcmp(r->model, "uvit") &&
        strcmp(r->model, "encdec"))
        return cli_fail(1, "'%s' holds a model '%s' that remat train cannot build (gpt, mlp, llama, uvit or encdec)",
                        path, r->model);
    model_flags(&c, r);
    train_int(&c, "--batch", &a->batch, r->batch);
    choice(&c, "--precision", &a->precision, rm_precision_name(r->precision), 1);
    train_float(&c, "--dropout", &a->dropout, r->dropout);
    train_float(&c, "--val-fraction", &a->val_fraction, r->val_fraction);
    choice(&c, "--sampler", &a->sampler, r->sampler == RM_SAMPLE_SEQUENTIAL ? "sequential" : "random", 0);
    choice(&c, "--optimizer", &a->optimizer, r->optim.kind == RM_OPTIM_SGD ? "sgd" : "adamw", 1);
    choice(&c, "--lr-schedule", &a->lr_schedule, r->lr.kind == RM_LR_COSINE ? "cosine" : "constant", 0);
    train_float(&c, "--lr", &a->lr, r->lr.lr);
    train_int(&c, "--warmup", &a->warmup, r->lr.warmup);
    train_float(&c, "--weight-decay", &a->weight_decay, r->optim.weight_decay);
    train_float(&c, "--adam-eps", &a->adam_eps, r->optim.eps);
    train_betas(&c, r);
    train_float(&c, "--grad-clip", &a->grad_clip, r->optim.grad_clip);
    train_int(&c, "--steps", &a->steps, r->lr.steps);
    if (c.rc) return c.rc;
    char b[32];
    if (!cli_given(a, "--seed")) a->seed = r->seed;
    else if (a->seed != r->seed)
        snprintf(b, sizeof b, "%llu", (unsigned long long)r->seed), note_override(&c, "--seed", b);
    if (!cli_given(a, "--data"))
        a->data = strcmp(r->data, "<corpus>") && strcmp(r->data, "<reverse>") ? r->data : NULL;
    if (!cli_given(a, "--token-bytes") && !cli_given(a, "--data")) a->token_bytes = r->token_bytes;
    return 0;
}

/* ---- step files ------------------------------------------------------------ */

/* Where the step goes: before the last '.' of the file name, if it has one
 * that is not its first character. */
static size_t ext_at(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return (size_t)((dot && dot != base ? dot : base + strlen(base)) - path);
}

int cli_step_path(const char *path, uint64_t step, char *out, size_t cap) {
    size_t e = ext_at(path);
    int n = snprintf(out, cap, "%.*s.step%06llu%s", (int)e, path, (unsigned long long)step,
                     path + e);
    return n > 0 && (size_t)n < cap;
}

int cli_step_of(const char *base, const char *name, uint64_t *step) {
    /* <stem>.step<digits><ext>, exactly */
    size_t e = ext_at(base);
    const char *p = name + e + 5;
    if (strncmp(name, base, e) != 0 || strncmp(name + e, ".step", 5) != 0) return 0;
    size_t nd = strspn(p, "0123456789");
    char num[32], again[4096];
    if (nd < 6 || nd > 20 || strcmp(p + nd, base + e) != 0) return 0;
    snprintf(num, sizeof num, "%.*s", (int)nd, p);
    /* only names this program writes: no extra leading zeros */
    errno = 0;
    *step = strtoull(num, NULL, 10); /* num is all digits */
    return !errno && cli_step_path(base, *step, again, sizeof again) && strcmp(again, name) == 0;
}

static int cmp_u64_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

/* The folder of path ("" for the working one) and its file name. */
static const char *split_path(const char *path, char *dir, size_t cap) {
    const char *slash = strrchr(path, '/');
    snprintf(dir, cap, "%.*s", slash ? (int)(slash - path) + 1 : 0, path);
    return slash ? slash + 1 : path;
}

int cli_step_file_after(const char *path, uint64_t step, char *out, size_t cap) {
    char dir[4096];
    const char *base = split_path(path, dir, sizeof dir);
    DIR *d = opendir(*dir ? dir : ".");
    if (!d) return 0;
    struct dirent *de;
    uint64_t s, first = UINT64_MAX;
    while ((de = readdir(d)) != NULL)
        if (cli_step_of(base, de->d_name, &s) && s > step && s < first) first = s;
    closedir(d);
    return first != UINT64_MAX && cli_step_path(path, first, out, cap);
}

void cli_prune_step_files(const char *path, int keep, uint64_t upto) {
    if (keep <= 0) return;
    char dir[4096];
    const char *base = split_path(path, dir, sizeof dir);
    DIR *d = opendir(*dir ? dir : ".");
    if (!d) return;
    uint64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t s;
        if (!cli_step_of(base, de->d_name, &s) || s > upto) continue; /* (later: not this run's) */
        if (n == cap) {
            uint64_t *q = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *q);
            if (!q) break;
            steps = q;
        }
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, n, sizeof *steps, cmp_u64_desc);
    for (size_t i = (size_t)keep; i < n; i++) {
        char old[4096];
        if (cli_step_path(path, steps[i], old, sizeof old) && unlink(old) != 0 && errno != ENOENT)
            cli_notice("warning", "cannot remove old checkpoint file '%s': %s", old,
                          strerror(errno));
    }
    free(steps);
}

/* ---- the weights of --resume, --init FILE, --load -------------------------- */

int cli_check_weights(rm_file *open, const char *path, rm_graph *g) {
    char err[512], hint[600];
    rm_file *f = open;
    rm_status st = f ? RM_OK : rm_file_open(path, &f, err, sizeof err);
    if (st == RM_OK) st = rm_file_check(f, g, err, sizeof err);
    if (st == RM_OK && rm_file_mark_loaded(f, g, NULL) != RM_OK) /* not drawn: the load writes them */
        snprintf(err, sizeof err, "%s", rm_graph_errmsg(g)), st = RM_ERR_ARG;
    if (f != open) rm_file_close(f);
    return st == RM_OK ? 0 : cli_fail(1, "%s%s", err, cli_hf_hint(path, hint, sizeof hint));
}
