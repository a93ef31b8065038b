/* state.c: training-state files. The metadata that describes a run (model,
 * data, optimizer, schedule, position) written next to the parameters and
 * optimizer state, read back and validated; and rm_file, a .safetensors
 * file opened for reading without a session. Layout and keys:
 * docs/CHECKPOINT_FILES.md. */
#include "exec/exec.h"
#include "train/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The version of the metadata layout below; a resume refuses others. */
#define STATE_VERSION "1"
#define META_MAX 64

void rm_run_info_default(rm_run_info *r) {
    if (!r) return;
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "gpt");
    r->layers = 4, r->dim = 128, r->heads = 4;
    r->context = 64, r->vocab = 256, r->batch = 8;
    static const int widths[] = {256, 1024, 256, 1024, 256};
    r->n_widths = 5;
    memcpy(r->widths, widths, sizeof widths);
    snprintf(r->data, sizeof r->data, "<corpus>");
    r->val_fraction = 0.1f;
    r->seed = 1337;
    rm_optim_config_default(&r->optim);
    r->lr = (rm_lr_schedule){RM_LR_CONSTANT, 1e-3f, 0, 100};
}

/* The model alone (rm_run_build adds what is frozen). */
static rm_status build_model(const rm_run_info *r, rm_graph *g, rm_model_io *io, int keep_logits) {
    if (!r || !g || !io) return g ? rm_graph_fail(g, RM_ERR_ARG, "rm_run_build: r and io must not be NULL") : RM_ERR_ARG;
    if (r->lora.rank != 0 && (strcmp(r->model, "mlp") == 0 || strcmp(r->model, "encdec") == 0))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_run_build: LoRA applies to the llama, gpt and uvit models, not %s",
                             r->model);
    if (strcmp(r->model, "mlp") == 0) {
        rm_mlp_config c;
        memset(&c, 0, sizeof c);
        c.context = r->context, c.vocab = r->vocab, c.batch = r->batch;
        c.dropout = r->dropout, c.batchnorm = r->batchnorm, c.keep_logits = keep_logits;
        if (r->n_widths < 0 || r->n_widths > RM_MLP_MAX_LAYERS)
            return rm_graph_fail(g, RM_ERR_ARG, "rm_run_build: n_widths %d is out of range", r->n_widths);
        c.n_widths = r->n_widths;
        memcpy(c.widths, r->widths, sizeof c.widths);
        return rm_mlp_build(g, &c, io);
    }
    if (strcmp(r->model, "llama") == 0) {
        rm_llama_config c = {.layers = r->layers, .dim = r->dim, .heads = r->heads, .context = r->context,
                             .vocab = r->vocab, .batch = r->batch, .ffn_dim = r->ffn_dim, .dropout = r->dropout,
                             .keep_logits = keep_logits, .kv_heads = r->kv_heads, .rope_theta = r->rope_theta,
                             .norm_eps = r->norm_eps, .tie_embeddings = r->tie_embeddings, .lora = r->lora};
        return rm_llama_build(g, &c, io);
    }
    if (strcmp(r->model, "encdec") == 0) {
        rm_encdec_config c = {.enc_layers = r->enc_layers, .dec_layers = r->dec_layers, .dim = r->dim,
                              .heads = r->heads, .context = r->context, .vocab = r->vocab, .batch = r->batch,
                              .dropout = r->dropout, .keep_logits = keep_logits};
        return rm_encdec_build(g, &c, io);
    }
    const int uvit = strcmp(r->model, "uvit") == 0;
    if (strcmp(r->model, "gpt") != 0 && !uvit)
        return rm_graph_fail(g, RM_ERR_ARG,
                             "rm_run_build: model '%.31s' is not gpt, mlp, llama, uvit or encdec; build it yourself",
                             r->model);
    rm_gpt_config c = {.layers = r->layers, .dim = r->dim, .heads = r->heads, .context = r->context, .vocab = r->vocab,
                       .batch = r->batch, .dropout = r->dropout, .keep_logits = keep_logits, .lora = r->lora};
    return uvit ? rm_uvit_build(g, &c, io) : rm_gpt_build(g, &c, io);
}

rm_status rm_run_build(const rm_run_info *r, rm_graph *g, rm_model_io *io, int keep_logits) {
    rm_status st = build_model(r, g, io, keep_logits);
    if (st == RM_OK && (r->freeze[0] || r->train_only[0])) st = rm_freeze_params(g, r->freeze, r->train_only, NULL);
    return st;
}

/* ---- writing ------------------------------------------------------------------ */

typedef struct meta {
    int n;
    const char *k[META_MAX], *v[META_MAX];
    char buf[META_MAX][48];
    char widths[RM_MLP_MAX_LAYERS * 8];
} meta;

/* The shortest decimal that reads back as exactly x ("0.1", not
 * "0.100000001"): a resumed run must see the same float. */
static void fmt_float(char *out, size_t cap, float x) {
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(out, cap, "%.*g", prec, (double)x);
        if (strtof(out, NULL) == x) return;
    }
}

static const char *sampler_name(rm_sampler s) { return s == RM_SAMPLE_SEQUENTIAL ? "sequential" : "random"; }

#define STR(key, val) (m->k[m->n] = (key), m->v[m->n] = (val), m->n++)
#define FMT(key, ...) (snprintf(m->buf[m->n], sizeof m->buf[0], __VA_ARGS__), STR(key, m->buf[m->n]))
#define FLT(key, x) (fmt_float(m->buf[m->n], sizeof m->buf[0], (x)), STR(key, m->buf[m->n]))

/* llama's shape beyond layers, dim and heads, its defaults spelled out */
static void meta_llama(const rm_run_info *r, meta *m) {
    FMT("ffn_dim", "%d", r->ffn_dim ? r->ffn_dim : rm_llama_ffn_dim(r->dim));
    FMT("kv_heads", "%d", r->kv_heads ? r->kv_heads : r->heads);
    FLT("rope_theta", r->rope_theta != 0.0f ? r->rope_theta : 10000.0f);
    FLT("norm_eps", r->norm_eps != 0.0f ? r->norm_eps : 1e-6f);
    FMT("tie_embeddings", "%d", r->tie_embeddings ? 1 : 0);
}

static void meta_model(const rm_run_info *r, meta *m) {
    STR("model", r->model);
    if (strcmp(r->model, "mlp") == 0) {
        size_t j = 0;
        m->widths[0] = 0;
        for (int i = 0; i < r->n_widths && i < RM_MLP_MAX_LAYERS && j < sizeof m->widths; i++)
            j += (size_t)snprintf(m->widths + j, sizeof m->widths - j, "%s%d", i ? "," : "", r->widths[i]);
        STR("widths", m->widths);
        FMT("batchnorm", "%d", r->batchnorm ? 1 : 0);
    } else if (strcmp(r->model, "encdec") == 0) {
        FMT("enc_layers", "%d", r->enc_layers);
        FMT("dec_layers", "%d", r->dec_layers);
        FMT("dim", "%d", r->dim);
        FMT("heads", "%d", r->heads);
    } else if (strcmp(r->model, "gpt") == 0 || strcmp(r->model, "llama") == 0 || strcmp(r->model, "uvit") == 0) {
        FMT("layers", "%d", r->layers);
        FMT("dim", "%d", r->dim);
        FMT("heads", "%d", r->heads);
        if (strcmp(r->model, "llama") == 0) meta_llama(r, m);
    }
    FMT("context", "%d", r->context);
    FMT("vocab", "%d", r->vocab);
    FMT("batch", "%d", r->batch);
    FLT("dropout", r->dropout);
}

static void meta_build(const rm_run_info *r, meta *m) {
    m->n = 0;
    STR("format", "pt");
    STR("remat_version", RM_VERSION);
    STR("remat_state", STATE_VERSION);
    meta_model(r, m);
    STR("data", r->data);
    FMT("data_tokens", "%llu", (unsigned long long)r->data_tokens);
    FMT("token_bytes", "%d", r->token_bytes);
    FLT("val_fraction", r->val_fraction);
    STR("sampler", sampler_name(r->sampler));
    FMT("seed", "%llu", (unsigned long long)r->seed);
    FMT("step", "%llu", (unsigned long long)r->step);
    FMT("data_position", "%llu", (unsigned long long)r->data_position);
    FMT("steps", "%d", r->lr.steps);
    STR("optimizer", r->optim.kind == RM_OPTIM_SGD ? "sgd" : "adamw");
    FLT("lr", r->lr.lr);
    STR("lr_schedule", r->lr.kind == RM_LR_COSINE ? "cosine" : "constant");
    FMT("warmup", "%d", r->lr.warmup);
    FLT("weight_decay", r->optim.weight_decay);
    FLT("grad_clip", r->optim.grad_clip);
    FLT("beta1", r->optim.beta1);
    FLT("beta2", r->optim.beta2);
    FLT("eps", r->optim.eps);
    /* fine-tuning: only when used (files without them froze nothing) */
    if (r->freeze[0]) STR("freeze", r->freeze);
    if (r->train_only[0]) STR("train_only", r->train_only);
    if (r->precision != RM_PRECISION_FP32) STR("precision", rm_precision_name(r->precision)); /* fp32: absent */
    if (r->lora.rank > 0) {
        FMT("lora_rank", "%d", r->lora.rank);
        FLT("lora_alpha", r->lora.alpha != 0.0f ? r->lora.alpha : 8.0f); /* rm_lora_config's default */
        FLT("lora_dropout", r->lora.dropout);
        STR("lora_targets", r->lora.targets[0] ? r->lora.targets : "all");
    }
#undef FMT
#undef FLT
#undef STR
}

rm_status rm_save_run(rm_session *s, rm_optim *o, const char *path, const rm_run_info *r, int n_extra,
                      const char *const *keys, const char *const *values, char *err, size_t errlen) {
    if (!r || n_extra < 0 || n_extra > META_MAX || (n_extra && (!keys || !values))) {
        rm_st_seterr(err, errlen, "rm_save_run: bad arguments (r NULL, or n_extra not in [0, %d])", META_MAX);
        if (s) rm_session_fail(s, RM_ERR_ARG, "rm_save_run: bad arguments (r NULL, or n_extra not in [0, %d])", META_MAX);
        return RM_ERR_ARG;
    }
    meta m;
    meta_build(r, &m);
    const char *k[2 * META_MAX], *v[2 * META_MAX];
    memcpy(k, m.k, (size_t)m.n * sizeof *k);
    memcpy(v, m.v, (size_t)m.n * sizeof *v);
    for (int i = 0; i < n_extra; i++) {
        for (int j = 0; j < m.n; j++)
            if (keys[i] && strcmp(keys[i], m.k[j]) == 0) {
                rm_st_seterr(err, errlen, "rm_save_run: extra key '%.64s' is one of rm_run_info's", keys[i]);
                if (s) rm_session_fail(s, RM_ERR_ARG, "rm_save_run: extra key '%.64s' is one of rm_run_info's", keys[i]);
                return RM_ERR_ARG;
            }
        k[m.n + i] = keys[i], v[m.n + i] = values[i];
    }
    return rm_save_state(s, o, path, m.n + n_extra, k, v, err, errlen);
}

/* ---- rm_file -------------------------------------------------------------------- */

rm_status rm_file_open(const char *path, rm_file **out, char *err, size_t errlen) {
    if (!out || !path) {
        rm_st_seterr(err, errlen, "rm_file_open: path and out must not be NULL");
        return RM_ERR_ARG;
    }
    *out = NULL;
    rm_file *f = calloc(1, sizeof *f);
    if (!f) {
        rm_st_seterr(err, errlen, "cannot open '%s': out of memory", path);
        return RM_ERR_NOMEM;
    }
    rm_strlcpy(f->path, path, sizeof f->path);
    rm_status st = rm_st_open(path, &f->st, err, errlen);
    if (st != RM_OK) {
        free(f);
        return st;
    }
    *out = f;
    return RM_OK;
}

void rm_file_close(rm_file *f) {
    if (!f) return;
    rm_st_close(f->st);
    free(f);
}

rm_status rm_file_verify(rm_file *f, int *present, char digest[RM_CHECKSUM_LEN], char *err, size_t errlen) {
    int p = 0;
    if (!f) {
        rm_st_seterr(err, errlen, "rm_file_verify: f must not be NULL");
        return RM_ERR_ARG;
    }
    rm_status st = rm_st_verify(f->st, f->path, &p, digest, err, errlen);
    f->verified = st == RM_OK && p;
    if (present) *present = p;
    return st;
}

const char *rm_file_meta(const rm_file *f, const char *key) { return f && key ? rm_st_meta(f->st, key) : NULL; }
int rm_file_meta_count(const rm_file *f) { return f ? rm_st_meta_count(f->st) : 0; }
const char *rm_file_meta_key(const rm_file *f, int i) { return f ? rm_st_meta_key(f->st, i) : NULL; }
const char *rm_file_meta_value(const rm_file *f, int i) { return f ? rm_st_meta_value(f->st, i) : NULL; }
int rm_file_tensor_count(const rm_file *f) { return f ? rm_st_count(f->st) : 0; }

rm_status rm_file_tensor(const rm_file *f, int i, rm_tensor_info *out) {
    if (!f || !out || i < 0 || i >= rm_st_count(f->st)) return RM_ERR_ARG;
    const rm_st_tensor *t = rm_st_at(f->st, i);
    *out = (rm_tensor_info){t->name, t->dtype, t->ndim, t->shape, t->bytes};
    return RM_OK;
}

rm_status rm_file_check(const rm_file *f, const rm_graph *g, char *err, size_t errlen) {
    if (!f || !g) {
        rm_st_seterr(err, errlen, "rm_file_check: f and g must not be NULL");
        return RM_ERR_ARG;
    }
    if (g->status != RM_OK) {
        rm_st_seterr(err, errlen, "rm_file_check: the graph failed to build: %s", g->errmsg);
        return RM_ERR_ARG;
    }
    return rm_params_match(g, f->st, f->path, err, errlen);
}

rm_status rm_file_mark_loaded(const rm_file *f, rm_graph *g, int *n) {
    if (n) *n = 0;
    if (!f || !g) return g ? rm_graph_fail(g, RM_ERR_ARG, "rm_file_mark_loaded: f must not be NULL") : RM_ERR_ARG;
    if (g->status != RM_OK) return g->status;
    return rm_params_mark_loaded(g, f->st, f->path, n);
}

rm_status rm_file_restore(rm_file *f, rm_session *s, rm_optim *o, char *err, size_t errlen) {
    if (!f) {
        rm_st_seterr(err, errlen, "rm_file_restore: f must not be NULL");
        if (s) rm_session_fail(s, RM_ERR_ARG, "rm_file_restore: f must not be NULL");
        return RM_ERR_ARG;
    }
    return rm_load_from(s, o, f->st, f->path, RM_LOAD_STATE | (f->verified ? RM_LOAD_VERIFIED : 0), err,
                        errlen);
}
