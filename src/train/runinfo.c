/* runinfo.c: reading a run back from a training-state file's metadata
 * (the inverse of state.c's writer). Every value is checked: a missing or
 * garbled key is RM_ERR_FORMAT naming the file, the key and the value. */
#include "util/util.h"
#include "train/safetensors.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_VERSION "1"

typedef struct rd {
    const rm_file *f;
    rm_status st; /* the first error */
    char *err;
    size_t errlen;
    int model_only; /* rm_file_model_info: batch and dropout may be absent */
} rd;

/* A metadata value made fit for a one-line message. */
static const char *shown(const char *v, char *out, size_t cap) {
    snprintf(out, cap, "%.40s%s", v, strlen(v) > 40 ? "..." : "");
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return out;
}

static const char *need(rd *c, const char *key) {
    const char *v = rm_st_meta(c->f->st, key);
    if (!v && c->st == RM_OK) {
        rm_st_seterr(c->err, c->errlen, "'%s': metadata '%s' is missing: not a %s (rm_save_run writes them)",
                     c->f->path, key, c->model_only ? "remat model's file" : "training-state file");
        c->st = RM_ERR_FORMAT;
    }
    return c->st == RM_OK ? v : NULL;
}

static void garbled(rd *c, const char *key, const char *v) {
    char b[64];
    if (c->st != RM_OK) return;
    rm_st_seterr(c->err, c->errlen, "'%s': metadata '%s' has the invalid value '%s'", c->f->path, key,
                 shown(v, b, sizeof b));
    c->st = RM_ERR_FORMAT;
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

static void get_u64(rd *c, const char *key, uint64_t hi, uint64_t *out) {
    const char *v = need(c, key);
    if (v && !parse_u64(v, hi, out)) garbled(c, key, v);
}

static void get_int(rd *c, const char *key, int lo, int hi, int *out) {
    const char *v = need(c, key);
    uint64_t x;
    if (!v) return;
    if (!parse_u64(v, (uint64_t)hi, &x) || x < (uint64_t)lo) garbled(c, key, v);
    else *out = (int)x;
}

static void get_float(rd *c, const char *key, float lo, float hi, float *out) {
    const char *v = need(c, key);
    if (!v) return;
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (end == v || *end || errno || !(x >= lo && x <= hi)) garbled(c, key, v);
    else *out = x;
}

/* A float the model or the optimizer takes (ok: util.h's rule of the op that uses it). */
static void get_valid(rd *c, const char *key, int (*ok)(double), float *out) {
    float x = NAN;
    get_float(c, key, -1e30f, 1e30f, &x);
    if (c->st == RM_OK && !ok(x)) garbled(c, key, need(c, key));
    else if (c->st == RM_OK) *out = x;
}

/* The index of v among choices (a NULL-terminated list), or -1 (garbled). */
static int get_choice(rd *c, const char *key, const char *const *choices) {
    const char *v = need(c, key);
    if (!v) return -1;
    for (int i = 0; choices[i]; i++)
        if (strcmp(v, choices[i]) == 0) return i;
    garbled(c, key, v);
    return -1;
}

static void get_widths(rd *c, rm_run_info *r) {
    const char *v = need(c, "widths");
    if (!v) return;
    int n = 0;
    const char *p = v;
    while (*p && n < RM_MLP_MAX_LAYERS - 1) {
        char *end;
        long x = isdigit((unsigned char)*p) ? strtol(p, &end, 10) : 0; /* "16,8": no sign, no space */
        if (x < 1 || x > (1 << 20) || (*end && (*end != ',' || !end[1]))) break; /* nor a comma last */
        r->widths[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (*p || n == 0) garbled(c, "widths", v);
    else r->n_widths = n;
}

/* llama's shape beyond layers, dim and heads; files written before
 * kv_heads, rope_theta, norm_eps and tie_embeddings existed had the defaults. */
static void read_llama(rd *c, rm_run_info *r) {
    get_int(c, "ffn_dim", 1, 1 << 20, &r->ffn_dim);
    if (rm_st_meta(c->f->st, "kv_heads")) get_int(c, "kv_heads", 1, 1 << 12, &r->kv_heads);
    if (rm_st_meta(c->f->st, "rope_theta")) get_valid(c, "rope_theta", rm_rope_theta_ok, &r->rope_theta);
    if (rm_st_meta(c->f->st, "norm_eps")) get_valid(c, "norm_eps", rm_norm_eps_ok, &r->norm_eps);
    const char *tie = rm_st_meta(c->f->st, "tie_embeddings");
    if (tie && strcmp(tie, "0") && strcmp(tie, "1")) garbled(c, "tie_embeddings", tie);
    else if (tie) r->tie_embeddings = tie[0] == '1';
}

static void read_model(rd *c, rm_run_info *r) {
    const char *model = need(c, "model");
    if (!model) return;
    if (!*model || strlen(model) >= sizeof r->model) garbled(c, "model", model);
    else rm_strlcpy(r->model, model, sizeof r->model);
    if (strcmp(r->model, "mlp") == 0) {
        get_widths(c, r);
        const char *bn = need(c, "batchnorm");
        if (bn && strcmp(bn, "0") && strcmp(bn, "1")) garbled(c, "batchnorm", bn);
        else if (bn) r->batchnorm = bn[0] == '1';
    } else if (strcmp(r->model, "encdec") == 0) {
        get_int(c, "enc_layers", 1, 4096, &r->enc_layers);
        get_int(c, "dec_layers", 1, 4096, &r->dec_layers);
        get_int(c, "dim", 1, 1 << 16, &r->dim);
        get_int(c, "heads", 1, 1 << 12, &r->heads);
    } else if (strcmp(r->model, "gpt") == 0 || strcmp(r->model, "llama") == 0 || strcmp(r->model, "uvit") == 0) {
        get_int(c, "layers", 1, 4096, &r->layers);
        get_int(c, "dim", 1, 1 << 16, &r->dim);
        get_int(c, "heads", 1, 1 << 12, &r->heads);
        if (strcmp(r->model, "llama") == 0) read_llama(c, r);
    }
    get_int(c, "context", 1, 1 << 16, &r->context);
    get_int(c, "vocab", 2, 1 << 24, &r->vocab);
    if (!c->model_only || rm_st_meta(c->f->st, "batch")) get_int(c, "batch", 1, 1 << 16, &r->batch);
    if (!c->model_only || rm_st_meta(c->f->st, "dropout")) get_float(c, "dropout", 0.0f, 0.95f, &r->dropout);
}

static void read_training(rd *c, rm_run_info *r) {
    static const char *const samplers[] = {"random", "sequential", NULL};
    static const char *const optims[] = {"adamw", "sgd", NULL};
    static const char *const schedules[] = {"constant", "cosine", NULL};
    get_float(c, "val_fraction", 0.0f, 0.9f, &r->val_fraction);
    int i = get_choice(c, "sampler", samplers);
    r->sampler = i == 1 ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
    i = get_choice(c, "optimizer", optims);
    r->optim.kind = i == 1 ? RM_OPTIM_SGD : RM_OPTIM_ADAMW;
    i = get_choice(c, "lr_schedule", schedules);
    r->lr.kind = i == 1 ? RM_LR_COSINE : RM_LR_CONSTANT;
    get_float(c, "lr", 0.0f, 100.0f, &r->lr.lr);
    get_int(c, "warmup", 0, 1 << 30, &r->lr.warmup);
    get_float(c, "weight_decay", 0.0f, 10.0f, &r->optim.weight_decay);
    get_float(c, "grad_clip", 0.0f, 1e9f, &r->optim.grad_clip);
    get_int(c, "steps", 0, 1 << 30, &r->lr.steps);
    get_u64(c, "seed", 2147483647u, &r->seed);
    get_u64(c, "step", 1u << 30, &r->step);
    /* the next batch's index (the step's, unless a file says otherwise): far from it, step + (data_position
     * - step) overflowed a signed 64-bit sum in remat train's loop (UBSan) */
    get_u64(c, "data_position", (uint64_t)1 << 62, &r->data_position);
    get_u64(c, "data_tokens", UINT64_MAX, &r->data_tokens);
    const char *data = need(c, "data");
    if (data) rm_strlcpy(r->data, data, sizeof r->data);
    const char *tb = rm_st_meta(c->f->st, "token_bytes"); /* absent before 4-byte ids existed: 0 */
    if (tb && strcmp(tb, "0") && strcmp(tb, "2") && strcmp(tb, "4")) garbled(c, "token_bytes", tb);
    else if (tb) r->token_bytes = tb[0] - '0';
    /* Files written before these keys existed used the defaults. */
    const char *const keys[] = {"beta1", "beta2", "eps"};
    float *fields[] = {&r->optim.beta1, &r->optim.beta2, &r->optim.eps};
    for (int k = 0; k < 3; k++)
        if (rm_st_meta(c->f->st, keys[k])) get_valid(c, keys[k], k < 2 ? rm_adam_beta_ok : rm_adam_eps_ok, fields[k]);
}

/* Fine-tuning keys (what is frozen, LoRA) and the precision, present only
 * when used. */
static void read_finetune(rd *c, rm_run_info *r) {
    const char *const keys[] = {"freeze", "train_only"};
    char *fields[] = {r->freeze, r->train_only};
    for (int k = 0; k < 2; k++) {
        const char *v = rm_st_meta(c->f->st, keys[k]);
        if (!v) continue;
        if (!*v || strlen(v) >= sizeof r->freeze) garbled(c, keys[k], v);
        else rm_strlcpy(fields[k], v, sizeof r->freeze);
    }
    const char *p = rm_st_meta(c->f->st, "precision"); /* absent: fp32 */
    if (p && rm_parse_precision(p, &r->precision, NULL, 0) != RM_OK) garbled(c, "precision", p);
    if (!rm_st_meta(c->f->st, "lora_rank")) return;
    get_int(c, "lora_rank", 1, 1 << 16, &r->lora.rank);
    get_float(c, "lora_alpha", -1e6f, 1e6f, &r->lora.alpha);
    get_float(c, "lora_dropout", 0.0f, 0.95f, &r->lora.dropout);
    const char *t = need(c, "lora_targets");
    if (t && (!*t || strlen(t) >= sizeof r->lora.targets)) garbled(c, "lora_targets", t);
    else if (t) rm_strlcpy(r->lora.targets, strcmp(t, "all") == 0 ? "" : t, sizeof r->lora.targets);
}

/* rm_file_run_info (model_only 0) and rm_file_model_info (1): one reader, one set of ranges. */
static rm_status read_run(const rm_file *f, rm_run_info *r, int model_only, char *err, size_t errlen) {
    if (!f || !r) {
        rm_st_seterr(err, errlen, "%s: f and r must not be NULL", model_only ? "rm_file_model_info" : "rm_file_run_info");
        return RM_ERR_ARG;
    }
    rm_run_info out;
    rm_run_info_default(&out);
    rd c = {f, RM_OK, err, errlen, model_only};
    const char *ver = model_only ? rm_st_meta(f->st, "remat_state") : need(&c, "remat_state");
    if (ver && strcmp(ver, STATE_VERSION) != 0) {
        char b[64];
        rm_st_seterr(err, errlen, "'%s': training-state layout '%s' is not supported (this library "
                     "reads %s)", f->path, shown(ver, b, sizeof b), STATE_VERSION);
        return RM_ERR_FORMAT;
    }
    read_model(&c, &out);
    if (!model_only) read_training(&c, &out);
    read_finetune(&c, &out);
    if (c.st == RM_OK) *r = out;
    return c.st;
}

rm_status rm_file_run_info(const rm_file *f, rm_run_info *r, char *err, size_t errlen) {
    return read_run(f, r, 0, err, errlen);
}

rm_status rm_file_model_info(const rm_file *f, rm_run_info *r, char *err, size_t errlen) {
    return read_run(f, r, 1, err, errlen);
}
