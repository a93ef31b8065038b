/* ckptfile.c: the metadata of checkpoint files written by `remat train`,
 * resuming from one, and the names of the periodic step files. */
#include "ckptfile.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The version of the metadata layout below; a resume refuses others. */
#define STATE_VERSION "1"

/* The shortest decimal that reads back as exactly x ("0.1", not
 * "0.100000001"): a resumed run must see the same float. */
static void fmt_float(char *out, size_t cap, float x) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, cap, "%.*g", prec, (double)x);
        if (strtof(out, NULL) == x) return;
    }
}

void cli_meta_build(const cli_args *a, const cli_position *p, cli_meta *m) {
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    m->n = 0;
#define STR(key, val) (m->k[m->n] = (key), m->v[m->n] = (val), m->n++)
#define FMT(key, ...) (snprintf(m->buf[m->n], sizeof m->buf[0], __VA_ARGS__), STR(key, m->buf[m->n]))
#define FLT(key, x) (fmt_float(m->buf[m->n], sizeof m->buf[0], (x)), STR(key, m->buf[m->n]))
    STR("format", "pt");
    STR("remat_version", RM_VERSION);
    STR("remat_state", STATE_VERSION);
    STR("model", a->model);
    if (strcmp(a->model, "mlp") == 0) {
        size_t j = 0;
        m->widths[0] = 0;
        for (int i = 0; i < a->n_widths && j < sizeof m->widths; i++)
            j += (size_t)snprintf(m->widths + j, sizeof m->widths - j, "%s%d", i ? "," : "",
                                  a->widths[i]);
        STR("widths", m->widths);
        FMT("batchnorm", "%d", a->batchnorm ? 1 : 0);
    } else {
        FMT("layers", "%d", a->layers);
        FMT("dim", "%d", a->dim);
        FMT("heads", "%d", a->heads);
    }
    FMT("context", "%d", a->context);
    FMT("vocab", "%d", a->vocab);
    FMT("batch", "%d", a->batch);
    FLT("dropout", a->dropout);
    STR("data", p->data_name);
    FMT("data_tokens", "%zu", p->data_tokens);
    FLT("val_fraction", a->val_fraction);
    STR("sampler", a->sampler);
    FMT("seed", "%llu", (unsigned long long)a->seed);
    FMT("step", "%llu", (unsigned long long)p->step);
    FMT("data_position", "%llu", (unsigned long long)p->batch);
    FMT("steps", "%d", a->steps);
    STR("optimizer", a->optimizer);
    FLT("lr", a->lr);
    STR("lr_schedule", a->lr_schedule);
    FMT("warmup", "%d", a->warmup);
    FLT("weight_decay", a->weight_decay);
    FLT("grad_clip", a->grad_clip);
    FLT("beta1", oc.beta1);
    FLT("beta2", oc.beta2);
    FLT("eps", oc.eps);
#undef FMT
#undef FLT
#undef STR
}

/* ---- resuming ------------------------------------------------------------- */

typedef struct ctx {
    cli_args *a;
    const rm_st_file *f;
    const char *path;
    int rc; /* the first error's exit status */
} ctx;

/* A metadata value made fit for a one-line message. */
static const char *shown(const char *v, char *out, size_t cap) {
    snprintf(out, cap, "%.40s%s", v, strlen(v) > 40 ? "..." : "");
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return out;
}

static const char *need(ctx *c, const char *key) {
    const char *v = rm_st_meta(c->f, key);
    if (!v && !c->rc)
        c->rc = cli_fail(1, "'%s': metadata '%s' is missing: not a checkpoint file of remat "
                         "train (--init loads the weights of any file)", c->path, key);
    return v;
}

static void garbled(ctx *c, const char *key, const char *v) {
    char b[64];
    if (!c->rc)
        c->rc = cli_fail(1, "'%s': metadata '%s' has the invalid value '%s'", c->path, key,
                         shown(v, b, sizeof b));
}

static int parse_u64(const char *s, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s < '0' || *s > '9') return 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno || x > hi) return 0;
    *out = x;
    return 1;
}

static void get_u64(ctx *c, const char *key, uint64_t hi, uint64_t *out) {
    const char *v = need(c, key);
    if (v && !parse_u64(v, hi, out)) garbled(c, key, v);
}

static void note_override(ctx *c, const char *flag, const char *file_value) {
    fprintf(stderr, "remat: note: %s overrides the value in '%s' (%s): the resumed run differs "
            "from one that never stopped\n", flag, c->path, file_value);
}

/* An integer flag from the file. MODEL: the file's value, and an explicit
 * flag that contradicts it is a usage error. TRAIN: the file's value unless
 * the flag was given (a different value gets a note; --steps is expected
 * to be given). */
enum { MODEL, TRAIN };
static void int_flag(ctx *c, int kind, const char *key, const char *flag, int *field, int lo,
                     int hi) {
    const char *v = need(c, key);
    uint64_t x;
    if (!v || c->rc) return;
    if (!parse_u64(v, (uint64_t)hi, &x) || x < (uint64_t)lo) {
        garbled(c, key, v);
        return;
    }
    int given = cli_given(c->a, flag), same = (uint64_t)*field == x;
    if (kind == MODEL && given && !same)
        c->rc = cli_fail(2, "'%s' holds a model with %s %llu but the command line says %s %d; "
                         "a resumed run takes the model from the file (drop %s)", c->path, flag,
                         (unsigned long long)x, flag, *field, flag);
    else if (!given) *field = (int)x;
    else if (!same && strcmp(flag, "--steps") != 0) note_override(c, flag, v);
}

static void train_float(ctx *c, const char *key, const char *flag, float *field, float lo,
                        float hi) {
    const char *v = need(c, key);
    if (!v || c->rc) return;
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (end == v || *end || errno || !(x >= lo && x <= hi)) {
        garbled(c, key, v);
        return;
    }
    if (!cli_given(c->a, flag)) *field = x;
    else if (*field != x) note_override(c, flag, v);
}

/* One of `choices`; *field points at the literal, not into the file. An
 * explicit flag that differs is a note, or an error when `must_match`. */
static void choice(ctx *c, const char *key, const char *flag, const char **field,
                   const char *const *choices, int must_match) {
    const char *v = need(c, key);
    if (!v || c->rc) return;
    const char *lit = NULL;
    for (int i = 0; choices[i]; i++)
        if (strcmp(v, choices[i]) == 0) lit = choices[i];
    if (!lit) {
        garbled(c, key, v);
        return;
    }
    if (!cli_given(c->a, flag)) *field = lit;
    else if (strcmp(*field, lit) != 0) {
        if (must_match)
            c->rc = cli_fail(2, "'%s' was saved with %s %s but the command line says %s %s; "
                             "a resumed run takes it from the file (drop %s)", c->path, flag, lit,
                             flag, *field, flag);
        else note_override(c, flag, v);
    }
}

static void model_widths(ctx *c) {
    const char *v = need(c, "widths");
    if (!v || c->rc) return;
    int w[RM_MLP_MAX_LAYERS], n = 0;
    const char *p = v;
    while (*p && n < RM_MLP_MAX_LAYERS - 1) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 1 || x > (1 << 20) || (*end && *end != ',')) break;
        w[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*p || n == 0) {
        garbled(c, "widths", v);
        return;
    }
    int same = n == c->a->n_widths;
    for (int i = 0; same && i < n; i++) same = w[i] == c->a->widths[i];
    if (cli_given(c->a, "--widths") && !same) {
        c->rc = cli_fail(2, "'%s' holds an mlp with --widths %s; a resumed run takes the model "
                         "from the file (drop --widths)", c->path, v);
        return;
    }
    c->a->n_widths = n;
    memcpy(c->a->widths, w, (size_t)n * sizeof *w);
}

int cli_resume_args(cli_args *a, const rm_st_file *f, const char *path, cli_resumed *r) {
    ctx c = {a, f, path, 0};
    static const char *const models[] = {"gpt", "mlp", NULL};
    static const char *const samplers[] = {"random", "sequential", NULL};
    static const char *const optims[] = {"adamw", "sgd", NULL};
    static const char *const schedules[] = {"constant", "cosine", NULL};
    const char *ver = need(&c, "remat_state");
    if (ver && strcmp(ver, STATE_VERSION) != 0) {
        char b[64];
        return cli_fail(1, "'%s': checkpoint file layout '%s' is not supported (this remat "
                        "reads %s)", path, shown(ver, b, sizeof b), STATE_VERSION);
    }
    choice(&c, "model", "--model", &a->model, models, 1);
    if (!c.rc && strcmp(a->model, "mlp") == 0) {
        model_widths(&c);
        const char *bn = need(&c, "batchnorm");
        if (bn && !c.rc) {
            if (strcmp(bn, "0") && strcmp(bn, "1")) garbled(&c, "batchnorm", bn);
            else if (cli_given(a, "--batchnorm") && bn[0] == '0')
                c.rc = cli_fail(2, "'%s' holds an mlp without --batchnorm; a resumed run takes "
                                "the model from the file (drop --batchnorm)", path);
            else a->batchnorm = bn[0] == '1';
        }
    } else {
        int_flag(&c, MODEL, "layers", "--layers", &a->layers, 1, 4096);
        int_flag(&c, MODEL, "dim", "--dim", &a->dim, 1, 1 << 16);
        int_flag(&c, MODEL, "heads", "--heads", &a->heads, 1, 1 << 12);
    }
    int_flag(&c, MODEL, "context", "--context", &a->context, 1, 1 << 16);
    int_flag(&c, MODEL, "vocab", "--vocab", &a->vocab, 2, 1 << 24);
    int_flag(&c, TRAIN, "batch", "--batch", &a->batch, 1, 1 << 16);
    train_float(&c, "dropout", "--dropout", &a->dropout, 0.0f, 0.95f);
    train_float(&c, "val_fraction", "--val-fraction", &a->val_fraction, 0.0f, 0.9f);
    choice(&c, "sampler", "--sampler", &a->sampler, samplers, 0);
    choice(&c, "optimizer", "--optimizer", &a->optimizer, optims, 1);
    choice(&c, "lr_schedule", "--lr-schedule", &a->lr_schedule, schedules, 0);
    train_float(&c, "lr", "--lr", &a->lr, 0.0f, 100.0f);
    int_flag(&c, TRAIN, "warmup", "--warmup", &a->warmup, 0, 1 << 30);
    train_float(&c, "weight_decay", "--weight-decay", &a->weight_decay, 0.0f, 10.0f);
    train_float(&c, "grad_clip", "--grad-clip", &a->grad_clip, 0.0f, 1e9f);
    int_flag(&c, TRAIN, "steps", "--steps", &a->steps, 0, 1 << 30);
    uint64_t seed = 0;
    get_u64(&c, "seed", 2147483647u, &seed);
    if (!c.rc && !cli_given(a, "--seed")) a->seed = seed;
    else if (!c.rc && a->seed != seed) note_override(&c, "--seed", rm_st_meta(f, "seed"));
    get_u64(&c, "step", 1u << 30, &r->pos.step);
    get_u64(&c, "data_position", UINT64_MAX, &r->pos.batch);
    uint64_t tokens = 0;
    get_u64(&c, "data_tokens", UINT64_MAX, &tokens);
    r->data_tokens = (size_t)tokens;
    const char *data = need(&c, "data");
    if (c.rc) return c.rc;
    snprintf(r->data, sizeof r->data, "%s", data);
    if (!cli_given(a, "--data")) a->data = strcmp(r->data, "<corpus>") ? r->data : NULL;
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

static int cmp_u64_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

void cli_prune_step_files(const char *path, int keep) {
    if (keep <= 0) return;
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) + 1 : 0, path);
    const char *base = slash ? slash + 1 : path;
    size_t e = ext_at(path) - (size_t)(base - path);
    const char *ext = base + e;
    DIR *d = opendir(*dir ? dir : ".");
    if (!d) return;
    uint64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        /* <stem>.step<digits><ext>, exactly */
        const char *nm = de->d_name, *p = nm + e + 5;
        if (strncmp(nm, base, e) != 0 || strncmp(nm + e, ".step", 5) != 0) continue;
        size_t nd = strspn(p, "0123456789");
        uint64_t s;
        char num[32], again[4096];
        if (nd < 6 || nd > 20 || strcmp(p + nd, ext) != 0) continue;
        snprintf(num, sizeof num, "%.*s", (int)nd, p);
        /* only names this program writes: no extra leading zeros */
        if (!parse_u64(num, UINT64_MAX, &s) || !cli_step_path(base, s, again, sizeof again) ||
            strcmp(again, nm) != 0)
            continue;
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
            fprintf(stderr, "remat: warning: cannot remove old checkpoint file '%s': %s\n", old,
                    strerror(errno));
    }
    free(steps);
}
