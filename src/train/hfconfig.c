/* hfconfig.c: a Hugging Face config.json read as transformers'
 * LlamaConfig reads it, for LlamaForCausalLM (model_type "llama").
 *
 * Every field that changes what the model computes is either honoured
 * (the shape, rms_norm_eps, rope_theta where transformers 4.x or 5 writes
 * it, tie_word_embeddings, grouped-query attention) or refused with a message naming it (rope_scaling, biases,
 * another activation, attention dropout, another head size, quantization,
 * custom code, sliding windows, another model_type). Fields that do not
 * change the computation (token ids, use_cache, torch_dtype, ...) are not
 * needed; keys this reader does not know are listed in the notes, so a
 * caller can show them. Absent optional fields take LlamaConfig's
 * defaults: num_key_value_heads = num_attention_heads, rms_norm_eps 1e-6,
 * rope_theta 10000, tie_word_embeddings false; JSON null is such a default
 * where LlamaConfig takes None for one, and refused where it does not. The shape fields are
 * required (LlamaConfig's defaults are LLaMA-7B's; a config without them
 * is not one to guess). Nothing in the text is trusted: numbers must be
 * exact integers in range, strings and booleans of the right type. */
#include "train/hf.h"
#include "util/util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct cfg_ctx {
    const cJSON *root;
    const char *name;
    char *err;
    size_t errlen;
    rm_status st;
} cfg_ctx;

static int fail(cfg_ctx *c, const char *fmt, const char *field, const char *detail) {
    if (c->st == RM_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, fmt, field, detail ? detail : "");
        rm_st_seterr(c->err, c->errlen, "'%s': %s", c->name, msg);
        c->st = RM_ERR_FORMAT;
    }
    return 0;
}

/* The field, or NULL when absent or JSON null (LlamaConfig's None: the default). */
static const cJSON *field(cfg_ctx *c, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c->root, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer field in [lo, hi]; required, or *out kept when absent. */
static int get_int(cfg_ctx *c, const char *key, int lo, int hi, int required, int *out) {
    const cJSON *it = field(c, key);
    if (!it) return required ? fail(c, "%s is missing: remat reads the model's shape from it", key, NULL) : 1;
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!(d >= lo && d <= hi) || floor(d) != d) {
        char range[64];
        snprintf(range, sizeof range, " (a whole number from %d to %d)", lo, hi);
        return fail(c, "%s is not a supported value%s", key, range);
    }
    *out = (int)d;
    return 1;
}

/* A number the model takes (ok: util.h's rule of the op that uses it),
 * it (named shown); *out kept when it is NULL. */
static int number_of(cfg_ctx *c, const cJSON *it, const char *shown, int (*ok)(double), float *out) {
    if (!it) return 1;
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!ok(d))
        return fail(c, "%s must be a number %s", shown, ok == rm_norm_eps_ok ? "above 0 and below 1"
                    : "above 1 and at most 1e30 (remat's RoPE; Llama models use 10000 to 1e6)");
    *out = (float)d;
    return 1;
}

/* A field LlamaConfig needs a value for: JSON null is no default there
 * (hidden_act None, rms_norm_eps None: the model does not build). */
static const cJSON *not_null(cfg_ctx *c, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(c->root, key);
    if (it && cJSON_IsNull(it))
        fail(c, "%s is null: transformers' LlamaConfig takes no default for it (give its value, or leave the key "
             "out for the default)%s", key, NULL);
    return field(c, key);
}

/* RoPE's base. transformers 5 writes it into rope_parameters ({"rope_type":
 * "default", "rope_theta": ...}) and reads that before a top-level
 * rope_theta (4.x's place), then 10000. A rope_type other than "default"
 * scales the frequencies, and a partial_rotary_factor rotates part of each
 * head: neither is remat's RoPE. */
static void read_rope(cfg_ctx *c, rm_hf_config *h) {
    const cJSON *rp = field(c, "rope_parameters"), *top = not_null(c, "rope_theta");
    char shown[96];
    number_of(c, top, "rope_theta", rm_rope_theta_ok, &h->rope_theta);
    if (rp && !cJSON_IsObject(rp)) {
        fail(c, "%s must be an object ({\"rope_type\": \"default\", \"rope_theta\": ...})%s", "rope_parameters",
             NULL);
        return;
    }
    const cJSON *type = rp ? cJSON_GetObjectItemCaseSensitive(rp, "rope_type") : NULL;
    if (rp && !type) type = cJSON_GetObjectItemCaseSensitive(rp, "type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "default") != 0)) {
        rm_st_printable(cJSON_IsString(type) ? type->valuestring : "(not a string)", shown, sizeof shown);
        fail(c, "%s' rope_type \"%s\" is not supported: remat's RoPE has no scaling (linear, dynamic, yarn, "
             "llama3); the model would compute other attention than it was trained with", "rope_parameters", shown);
        return;
    }
    const cJSON *partial[2] = {field(c, "partial_rotary_factor"),
                               rp ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL};
    for (int i = 0; i < 2; i++)
        if (partial[i] && !cJSON_IsNull(partial[i]) && !(cJSON_IsNumber(partial[i]) && partial[i]->valuedouble == 1.0))
            fail(c, "%s is not 1: remat's RoPE rotates the whole of each head%s",
                 i ? "rope_parameters' partial_rotary_factor" : "partial_rotary_factor", NULL);
    const cJSON *inner = rp ? cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") : NULL;
    if (!inner || cJSON_IsNull(inner)) return;
    float theta = h->rope_theta;
    if (number_of(c, inner, "rope_parameters' rope_theta", rm_rope_theta_ok, &theta) && top && theta != h->rope_theta)
        fail(c, "%s and rope_parameters' rope_theta differ: transformers 5 reads the second, 4.x the first "
             "(keep one)%s", "rope_theta", NULL);
    h->rope_theta = theta;
}

/* A boolean; *out kept when absent. */
static int get_bool(cfg_ctx *c, const char *key, int *out) {
    const cJSON *it = field(c, key);
    if (!it) return 1;
    if (!cJSON_IsBool(it)) return fail(c, "%s must be true or false%s", key, NULL);
    *out = cJSON_IsTrue(it);
    return 1;
}

/* model_type "llama", and architectures (if given) LlamaForCausalLM only. */
static void check_kind(cfg_ctx *c) {
    const cJSON *mt = field(c, "model_type");
    char shown[80];
    if (!mt || !cJSON_IsString(mt)) {
        fail(c, "%s is missing or not a string: remat reads LlamaForCausalLM configs (model_type \"llama\")%s",
             "model_type", NULL);
        return;
    }
    if (strcmp(mt->valuestring, "llama") != 0) {
        rm_st_printable(mt->valuestring, shown, sizeof shown);
        fail(c, "%s \"%s\" is not supported: remat builds LlamaForCausalLM (model_type \"llama\"); Mistral, Qwen2 "
             "and other families differ in ways it does not model", "model_type", shown);
        return;
    }
    const cJSON *arch = field(c, "architectures");
    if (!arch) return;
    if (!cJSON_IsArray(arch)) {
        fail(c, "%s must be a list of class names%s", "architectures", NULL);
        return;
    }
    for (const cJSON *a = arch->child; a; a = a->next)
        if (!cJSON_IsString(a) || strcmp(a->valuestring, "LlamaForCausalLM") != 0) {
            rm_st_printable(cJSON_IsString(a) ? a->valuestring : "(not a string)", shown, sizeof shown);
            fail(c, "%s names %s: remat reads LlamaForCausalLM (a causal language model with lm_head) only",
                 "architectures", shown);
            return;
        }
}

/* The fields that would change the computation in ways remat does not model. */
static void check_refused(cfg_ctx *c, const rm_hf_config *h) {
    const cJSON *it;
    char shown[96];
    if ((it = field(c, "rope_scaling")) != NULL) {
        const cJSON *t = cJSON_IsObject(it) ? cJSON_GetObjectItemCaseSensitive(it, "rope_type") : NULL;
        if (!t && cJSON_IsObject(it)) t = cJSON_GetObjectItemCaseSensitive(it, "type");
        rm_st_printable(t && cJSON_IsString(t) ? t->valuestring : "given", shown, sizeof shown);
        fail(c, "%s (%s) is not supported: remat's RoPE has no scaling (linear, dynamic, yarn, llama3); "
             "the model would compute other attention than it was trained with", "rope_scaling", shown);
    }
    int flag = 0;
    if (get_bool(c, "attention_bias", &flag) && flag)
        fail(c, "%s is true: remat's llama has no biases in q/k/v/o_proj%s", "attention_bias", NULL);
    flag = 0;
    if (get_bool(c, "mlp_bias", &flag) && flag)
        fail(c, "%s is true: remat's llama has no biases in gate/up/down_proj%s", "mlp_bias", NULL);
    flag = 0;
    if (get_bool(c, "rope_interleaved", &flag) && flag)
        fail(c, "%s is true: remat's RoPE rotates the two halves of a head (transformers' rotate_half), not "
             "interleaved pairs%s", "rope_interleaved", NULL);
    if ((it = not_null(c, "hidden_act")) != NULL && (!cJSON_IsString(it) || strcmp(it->valuestring, "silu") != 0)) {
        rm_st_printable(cJSON_IsString(it) ? it->valuestring : "(not a string)", shown, sizeof shown);
        fail(c, "%s \"%s\" is not supported: remat's llama MLP is SwiGLU (silu)", "hidden_act", shown);
    }
    if ((it = field(c, "attention_dropout")) != NULL && !(cJSON_IsNumber(it) && it->valuedouble == 0.0))
        fail(c, "%s is not 0: remat has no dropout on attention probabilities (set it to 0.0; --dropout puts "
             "dropout on the residual branches)%s", "attention_dropout", NULL);
    int hd = 0;
    if (get_int(c, "head_dim", 1, 1 << 16, 0, &hd) && hd && hd * h->heads != h->dim)
        fail(c, "%s differs from hidden_size / num_attention_heads: remat's heads are hidden_size / "
             "num_attention_heads wide%s", "head_dim", NULL);
    if (field(c, "quantization_config"))
        fail(c, "%s is present: remat trains fp32 (and bf16/f16 weights widened to fp32), not quantized models%s",
             "quantization_config", NULL);
    if (field(c, "auto_map"))
        fail(c, "%s is present: the model comes with its own code, which remat cannot follow%s", "auto_map", NULL);
    if (field(c, "sliding_window"))
        fail(c, "%s is set: remat's attention sees every earlier position%s", "sliding_window", NULL);
    int tp = 1;
    get_int(c, "pretraining_tp", 1, 1 << 16, 0, &tp); /* slices of the same products: the same model */
}

/* Keys read above, and keys that do not change what the model computes. */
static int known_key(const char *k) {
    static const char *const keys[] = {
        "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "rope_scaling",
        "tie_word_embeddings", "hidden_act", "attention_bias", "mlp_bias", "attention_dropout", "head_dim",
        "quantization_config", "auto_map", "sliding_window", "pretraining_tp", "max_position_embeddings",
        "rope_interleaved", "rope_parameters", "partial_rotary_factor",
        /* not part of the computation */
        "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "torch_dtype", "dtype",
        "transformers_version",
        "use_cache", "_name_or_path", "tokenizer_class", "output_attentions", "output_hidden_states",
        "return_dict", "is_llama_config", NULL};
    for (int i = 0; keys[i]; i++)
        if (strcmp(k, keys[i]) == 0) return 1;
    return 0;
}

static void list_unknown(const cJSON *root, char *notes, size_t cap) {
    size_t j = 0;
    notes[0] = 0;
    for (const cJSON *it = root->child; it && j + 80 < cap; it = it->next)
        if (it->string && !known_key(it->string)) {
            char k[80];
            rm_st_printable(it->string, k, sizeof k);
            j += (size_t)snprintf(notes + j, cap - j, "%s%s", j ? ", " : "config.json keys remat does not read: ",
                                  k);
        }
}

rm_status rm_hf_parse_config(const char *json, size_t len, const char *name, rm_hf_config *out, char *notes,
                             size_t notes_cap, char *err, size_t errlen) {
    if (notes && notes_cap) notes[0] = 0;
    if (!json || !out || !name) {
        rm_st_seterr(err, errlen, "rm_hf_parse_config: bad arguments");
        return RM_ERR_ARG;
    }
    char why[300];
    /* one object, nothing after it, no key twice, no NUL character: what Python's json reads too */
    cJSON *root = rm_json_parse_len(json, len, why, sizeof why);
    if (!root || !cJSON_IsObject(root)) {
        rm_st_seterr(err, errlen, "'%s': %s", name, root ? "not a JSON object" : why);
        cJSON_Delete(root);
        return RM_ERR_FORMAT;
    }
    cfg_ctx c = {root, name, err, errlen, RM_OK};
    rm_hf_config h = {.rope_theta = 10000.0f, .norm_eps = 1e-6f};
    if (c.st == RM_OK) check_kind(&c);
    get_int(&c, "hidden_size", 2, 1 << 16, 1, &h.dim);
    get_int(&c, "num_hidden_layers", 1, 4096, 1, &h.layers);
    get_int(&c, "num_attention_heads", 1, 4096, 1, &h.heads);
    get_int(&c, "intermediate_size", 1, 1 << 20, 1, &h.ffn_dim);
    get_int(&c, "vocab_size", 2, 1 << 24, 1, &h.vocab);
    h.kv_heads = h.heads;
    get_int(&c, "num_key_value_heads", 1, 4096, 0, &h.kv_heads);
    get_int(&c, "max_position_embeddings", 1, 1 << 30, 0, &h.max_positions);
    number_of(&c, not_null(&c, "rms_norm_eps"), "rms_norm_eps", rm_norm_eps_ok, &h.norm_eps);
    read_rope(&c, &h);
    get_bool(&c, "tie_word_embeddings", &h.tie_embeddings);
    if (c.st == RM_OK && (h.dim % h.heads != 0 || (h.dim / h.heads) % 2 != 0))
        fail(&c, "%s must be num_attention_heads times an even head size (RoPE rotates pairs)%s", "hidden_size",
             NULL);
    if (c.st == RM_OK && h.heads % h.kv_heads != 0)
        fail(&c, "%s must divide num_attention_heads (each key/value head serves a group of query heads)%s",
             "num_key_value_heads", NULL);
    if (c.st == RM_OK) check_refused(&c, &h);
    if (c.st == RM_OK && notes && notes_cap) list_unknown(root, notes, notes_cap);
    cJSON_Delete(root);
    if (c.st == RM_OK) *out = h;
    return c.st;
}
