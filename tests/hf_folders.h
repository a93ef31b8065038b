/* hf_folders.h: Hugging Face model folders written by the tests (config.json
 * text, weights through the safetensors writer, in F32, F16 or BF16), under
 * a scratch folder of the test's (tmpdir, made by check_tmpdir in main).
 * Included by test_hf.c and test_hf_store.c. */
#ifndef REMAT_TESTS_HF_FOLDERS_H
#define REMAT_TESTS_HF_FOLDERS_H
#include "check.h"
#include "train/hf.h"
#include "util/half.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char tmpdir[256];

typedef struct shape_cfg {
    int layers, dim, heads, kv_heads, ffn, vocab, tie;
} shape_cfg;

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void config_text(const shape_cfg *c, const char *extra, char *out, size_t cap) {
    snprintf(out, cap,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"intermediate_size\": %d, \"vocab_size\": %d, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
             "\"tie_word_embeddings\": %s, \"hidden_act\": \"silu\", \"bos_token_id\": 1%s}",
             c->dim, c->layers, c->heads, c->kv_heads, c->ffn, c->vocab, c->tie ? "true" : "false", extra);
}

/* The model's tensors: names, shapes; data filled by value(i, k). */
typedef struct tensors {
    int n;
    char names[128][96];
    int64_t shapes[128][2];
    int ndim[128];
    void *data[128];
    rm_st_tensor t[128];
} tensors;

static void add(tensors *ts, const char *name, int64_t a, int64_t b) {
    if (ts->n >= 128) abort();
    snprintf(ts->names[ts->n], 96, "%s", name);
    ts->shapes[ts->n][0] = a, ts->shapes[ts->n][1] = b;
    ts->ndim[ts->n++] = b ? 2 : 1;
}

static void model_tensors(const shape_cfg *c, tensors *ts) {
    const int64_t C = c->dim, Ckv = c->dim / c->heads * c->kv_heads, F = c->ffn, V = c->vocab;
    char p[96];
    ts->n = 0;
    add(ts, "model.embed_tokens.weight", V, C);
    for (int l = 0; l < c->layers; l++) {
        const char *parts[9] = {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                                "mlp.down_proj"};
        const int64_t rows[9] = {C, C, Ckv, Ckv, C, C, F, F, C}, cols[9] = {0, C, C, C, C, 0, C, C, F};
        for (int k = 0; k < 9; k++) {
            snprintf(p, sizeof p, "model.layers.%d.%s.weight", l, parts[k]);
            add(ts, p, rows[k], cols[k]);
        }
    }
    add(ts, "model.norm.weight", C, 0);
    if (!c->tie) add(ts, "lm_head.weight", V, C);
}

/* Tensor i's element k: a pattern exact in every dtype (multiples of 1/64). */
static float value_of(int i, int64_t k) { return (float)((int)((k * 7 + i * 13) % 41) - 20) / 64.0f; }

/* Writes tensors [first, last) of ts as `dtype` into path; 0 on success. */
static int write_st(const char *path, tensors *ts, int first, int last, const char *dtype) {
    const size_t es = strcmp(dtype, "F32") ? 2 : 4; /* I16 (a refused dtype) is written as F16 bits */
    for (int i = first; i < last; i++) {
        const int64_t n = ts->shapes[i][0] * (ts->ndim[i] == 2 ? ts->shapes[i][1] : 1);
        unsigned char *b = malloc((size_t)n * es);
        if (!b) return -1;
        for (int64_t k = 0; k < n; k++) {
            const float v = value_of(i, k);
            if (es == 4) memcpy(b + 4 * k, &v, 4);
            else {
                uint16_t h = !strcmp(dtype, "BF16") ? rm_f32_to_bf16(v)
                                                     : (uint16_t)(v == 0.0f ? 0 : 0); /* F16 below */
                if (!strcmp(dtype, "F16")) { /* v = m/64, |m| <= 20: exact in half */
                    const float a = fabsf(v);
                    int e = 0;
                    float m = a;
                    while (m >= 2.0f) m /= 2, e++;
                    while (m < 1.0f && m > 0.0f) m *= 2, e--;
                    h = a == 0.0f ? 0 : (uint16_t)(((e + 15) << 10) | (int)((m - 1.0f) * 1024.0f));
                    if (v < 0) h |= 0x8000;
                }
                b[2 * k] = (unsigned char)(h & 0xff), b[2 * k + 1] = (unsigned char)(h >> 8);
            }
        }
        ts->data[i] = b;
        ts->t[i] = (rm_st_tensor){ts->names[i], dtype, ts->ndim[i], ts->shapes[i], b, (uint64_t)n * es, NULL, NULL};
    }
    char err[512];
    rm_status st = rm_st_write(path, last - first, ts->t + first, 0, NULL, NULL, err, sizeof err);
    for (int i = first; i < last; i++) free(ts->data[i]);
    if (st != RM_OK) fprintf(stderr, "write_st: %s\n", err);
    return st == RM_OK ? 0 : -1;
}

/* A folder `name` with config.json (+ extra keys) and one weight file. */
static void make_folder(const char *name, const shape_cfg *c, const char *extra, const char *dtype, char *dir,
                        size_t cap) {
    char path[600], cfg[2048];
    snprintf(dir, cap, "%s/%s", tmpdir, name);
    snprintf(path, sizeof path, "mkdir -p '%s'", dir);
    if (system(path) != 0) return;
    config_text(c, extra, cfg, sizeof cfg);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, cfg);
    tensors ts;
    model_tensors(c, &ts);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    write_st(path, &ts, 0, ts.n, dtype);
}

/* make_folder(name, c, no extra keys, dtype), opened: its handle, or NULL after a failed check. */
static rm_hf *open_made(const char *name, const shape_cfg *c, const char *dtype, char *dir, size_t cap) {
    char err[1024];
    rm_hf *m = NULL;
    make_folder(name, c, "", dtype, dir, cap);
    CHECK(rm_hf_open(dir, &m, err, sizeof err) == RM_OK, "%s (%s): %s", name, dtype, err);
    return m;
}

#endif
