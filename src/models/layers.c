/* layers.c: the parameter and layer helpers the model builders share
 * (models.h): named parameters, dropout, LayerNorm, Linear, position ids and
 * GPT-2's transformer block. */
#include "models/models.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rm_val rm_model_param2(rm_graph *g, const char *name, int64_t a, int64_t b, rm_init init, float std) {
    int64_t shape[2] = {a, b};
    return rm_param(g, name, 2, shape, init, std, 1); /* 2-D weights get weight decay */
}

rm_val rm_model_param1(rm_graph *g, const char *name, int64_t a, rm_init init) {
    int64_t shape[1] = {a};
    return rm_param(g, name, 1, shape, init, 0.0f, 0);
}

rm_val rm_model_dropout(rm_graph *g, rm_val x, float p) { return p > 0.0f ? rm_dropout(g, x, p) : x; }

rm_val rm_model_layernorm(rm_graph *g, rm_val x, const char *prefix, int64_t C) {
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    rm_val wv = rm_model_param1(g, w, C, RM_INIT_ONES);
    rm_val bv = rm_model_param1(g, b, C, RM_INIT_ZEROS);
    return rm_layernorm(g, x, wv, bv);
}

rm_val rm_model_linear(rm_graph *g, rm_val x, const char *prefix, int64_t out, int64_t in, float std, int bias) {
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    rm_val wv = rm_model_param2(g, w, out, in, RM_INIT_NORMAL, std);
    return rm_linear(g, x, wv, bias ? rm_model_param1(g, b, out, RM_INIT_ZEROS) : -1);
}

/* Whether `module` is in the comma-separated list (all modules when it is ""). */
static int listed(const char *list, const char *module) {
    if (!*list) return 1;
    const size_t n = strlen(module);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t k = end ? (size_t)(end - p) : strlen(p);
        if (k == n && strncmp(p, module, n) == 0) return 1;
        p = end ? end + 1 : p + k;
    }
    return 0;
}

rm_val rm_model_proj(rm_graph *g, rm_val x, const char *prefix, int64_t out, int64_t in, float std, int bias,
                     const rm_lora_config *lora) {
    const char *dot = strrchr(prefix, '.');
    const char *module = dot ? dot + 1 : prefix;
    if (!lora || lora->rank <= 0 || !listed(lora->targets, module))
        return rm_model_linear(g, x, prefix, out, in, std, bias);
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    rm_val wv = rm_model_param2(g, w, out, in, RM_INIT_NORMAL, std);
    rm_val bv = bias ? rm_model_param1(g, b, out, RM_INIT_ZEROS) : -1;
    const float alpha = lora->alpha != 0.0f ? lora->alpha : 8.0f; /* PEFT's default lora_alpha */
    return rm_lora_linear(g, x, wv, bv, lora->rank, alpha, lora->dropout);
}

rm_val rm_model_gpt_block(rm_graph *g, rm_val x, const char *prefix, int64_t C, int heads, float dropout,
                          float std, float proj_std, const rm_lora_config *lora) {
    char p[160];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, prefix), p)
    // attention branch: ln_1 -> qkv (B,T,3C) -> attention (B,T,C) -> c_proj
    rm_val h = rm_model_layernorm(g, x, P("ln_1"), C);
    h = rm_model_proj(g, h, P("attn.c_attn"), 3 * C, C, std, 1, lora);
    h = rm_attention(g, h, heads);
    h = rm_model_proj(g, h, P("attn.c_proj"), C, C, proj_std, 1, lora);
    x = rm_add(g, x, rm_model_dropout(g, h, dropout));
    // MLP branch: ln_2 -> c_fc (B,T,4C) -> GELU -> c_proj (B,T,C)
    h = rm_model_layernorm(g, x, P("ln_2"), C);
    h = rm_model_proj(g, h, P("mlp.c_fc"), 4 * C, C, std, 1, lora);
    h = rm_gelu(g, h);
    h = rm_model_proj(g, h, P("mlp.c_proj"), C, 4 * C, proj_std, 1, lora);
#undef P
    return rm_add(g, x, rm_model_dropout(g, h, dropout));
}

rm_val rm_model_gpt_embed(rm_graph *g, const rm_gpt_config *c, const char *model, rm_model_io *io, rm_val *wte) {
    const int64_t L = c->layers, C = c->dim, H = c->heads, T = c->context, V = c->vocab, B = c->batch;
    if (L < 1 || C < 1 || H < 1 || T < 1 || V < 2 || B < 1) {
        rm_graph_fail(g, RM_ERR_ARG, "%s: layers, dim, heads, context, batch must be >= 1 and vocab >= 2", model);
        return -1;
    }
    if (C % H != 0) {
        rm_graph_fail(g, RM_ERR_ARG, "%s: dim %lld is not divisible by heads %lld: make dim a multiple of heads "
                      "(e.g. %lld)", model, (long long)C, (long long)H, (long long)(C / H + 1) * H);
        return -1;
    }
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f)) {
        rm_graph_fail(g, RM_ERR_ARG, "%s: dropout must be in [0, 1), got %g", model, (double)c->dropout);
        return -1;
    }
    io->features = -1;
    io->source = io->source_mask = -1;
    int64_t bt[2] = {B, T};
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);
    rm_val positions = rm_positions(g, "positions", B, T);
    rm_stage_begin(g, "embed");
    *wte = rm_model_param2(g, "transformer.wte.weight", V, C, RM_INIT_NORMAL, 0.02f);
    rm_val wpe = rm_model_param2(g, "transformer.wpe.weight", T, C, RM_INIT_NORMAL, 0.02f);
    // x is (B,T,C): token embedding plus position embedding
    rm_val x = rm_add(g, rm_embedding(g, io->tokens, *wte), rm_embedding(g, positions, wpe));
    return rm_model_dropout(g, x, c->dropout);
}

rm_status rm_model_gpt_head(rm_graph *g, const rm_gpt_config *c, rm_model_io *io, rm_val x, rm_val wte) {
    rm_stage_begin(g, "head");
    x = rm_model_layernorm(g, x, "transformer.ln_f", c->dim);
    io->logits = rm_linear(g, x, wte, -1); // (B,T,V): the head is tied to wte
    io->loss = rm_softmax_ce(g, io->logits, io->targets);
    if (c->keep_logits) rm_mark_output(g, io->logits);
    rm_set_loss(g, io->loss);
    static const char *const modules[] = {"c_attn", "c_proj", "c_fc"};
    return rm_model_lora_finish(g, &c->lora, "gpt", modules, 3);
}
