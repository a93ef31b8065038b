/* encdec.c: a transformer encoder-decoder (Vaswani et al. 2017), pre-norm,
 * over bytes. Vocabulary: the 256 byte values, then BOS (256), EOS (257) and
 * PAD (258): RM_ENCDEC_VOCAB = 259.
 *
 *   source (B,T) ids, source_mask (B,T): 1 for a real token, 0 for PAD
 *   tokens (B,T):  BOS target[0] .. target[n-1] PAD..   (decoder input)
 *   targets (B,T): target[0] .. target[n-1] EOS PAD..    (PAD: no loss)
 *
 * Stages:
 *   "enc.embed"  token + learned position embeddings of the source
 *   "enc.N"      h = LN(x); x += Attn(h, h; source_mask); x += MLP(LN(x))
 *   "dec.embed"  token + position embeddings of the decoder input
 *   "dec.N"      x += CausalAttn(LN(x)); x += Attn(LN(x), enc_out; source_mask);
 *                x += MLP(LN(x))
 *   "head"       LN, lm_head (untied), cross-entropy ignoring PAD targets
 * where enc_out is the encoder's final LayerNorm (computed in the last
 * encoder stage). Every decoder stage reads enc_out, so the stages are not a
 * chain: strategies that cut a chain refuse this model, naming enc_out;
 * storing everything, `selective` and the user's marks apply.
 *
 * Names (docs/MODELS.md): {encoder,decoder}.embed_tokens.weight,
 * {encoder,decoder}.embed_positions.weight, encoder.layers.N.{ln_1, attn.{q,k,v,o}_proj,
 * ln_2, mlp.fc, mlp.proj}, decoder.layers.N.{ln_1, self_attn.*, ln_2,
 * cross_attn.*, ln_3, mlp.*}, encoder.ln_f, decoder.ln_f, lm_head.weight;
 * Linear and LayerNorm layers have biases. */
#include "models/models.h"
#include <math.h>
#include <stdio.h>

/* Multi-head attention with q from x, k and v from kv (x itself for self-attention). */
static rm_val attention(rm_graph *g, rm_val x, rm_val kv, rm_val mask, const char *prefix, int64_t C, int heads,
                        int causal, float std, float proj_std) {
    char p[192];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, prefix), p)
    rm_val q = rm_model_linear(g, x, P("q_proj"), C, C, std, 1);
    rm_val k = rm_model_linear(g, kv, P("k_proj"), C, C, std, 1);
    rm_val v = rm_model_linear(g, kv, P("v_proj"), C, C, std, 1);
    rm_val a = rm_attention_general(g, q, k, v, mask, heads, causal);
    return rm_model_linear(g, a, P("o_proj"), C, C, proj_std, 1);
#undef P
}

static rm_val mlp(rm_graph *g, rm_val x, const char *prefix, int64_t C, float std, float proj_std) {
    char p[192];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, prefix), p)
    rm_val h = rm_model_linear(g, x, P("mlp.fc"), 4 * C, C, std, 1);
    return rm_model_linear(g, rm_gelu(g, h), P("mlp.proj"), C, 4 * C, proj_std, 1);
#undef P
}

/* x + dropout(branch) */
static rm_val residual(rm_graph *g, rm_val x, rm_val branch, float p) {
    return rm_add(g, x, rm_model_dropout(g, branch, p));
}

/* token + position embeddings of ids (B,T) under "<side>.embed_*" */
static rm_val embed(rm_graph *g, rm_val ids, rm_val positions, const char *side, const rm_encdec_config *c) {
    char n[96];
    snprintf(n, sizeof n, "%s.embed_tokens.weight", side);
    rm_val wte = rm_model_param2(g, n, c->vocab, c->dim, RM_INIT_NORMAL, 0.02f);
    snprintf(n, sizeof n, "%s.embed_positions.weight", side);
    rm_val wpe = rm_model_param2(g, n, c->context, c->dim, RM_INIT_NORMAL, 0.02f);
    return rm_model_dropout(g, rm_add(g, rm_embedding(g, ids, wte), rm_embedding(g, positions, wpe)), c->dropout);
}

rm_status rm_encdec_build(rm_graph *g, const rm_encdec_config *c, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!c || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_encdec_build: the %s is NULL", !c ? "config" : "io");
    const int64_t C = c->dim, H = c->heads, T = c->context, V = c->vocab, B = c->batch;
    if (c->enc_layers < 1 || c->dec_layers < 1 || C < 1 || H < 1 || T < 1 || B < 1 || V < RM_ENCDEC_VOCAB)
        return rm_graph_fail(g, RM_ERR_ARG, "encdec: enc/dec layers, dim, heads, context, batch must be >= 1 and "
                             "vocab >= %d (bytes, BOS, EOS, PAD)", RM_ENCDEC_VOCAB);
    if (C % H != 0)
        return rm_graph_fail(g, RM_ERR_ARG, "encdec: --dim %lld is not divisible by --heads %lld", (long long)C,
                             (long long)H);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return rm_graph_fail(g, RM_ERR_ARG, "encdec: --dropout must be in [0, 1), got %g", (double)c->dropout);
    int64_t bt[2] = {B, T};
    io->features = -1;
    io->source = rm_input(g, "source", RM_DTYPE_I32, 2, bt);
    io->source_mask = rm_input(g, "source_mask", RM_DTYPE_I32, 2, bt);
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);
    rm_val positions = rm_positions(g, "positions", B, T);
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)(c->enc_layers + c->dec_layers));
    char name[64], pre[96], p[160];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, pre), p)

    rm_stage_begin(g, "enc.embed");
    rm_val x = embed(g, io->source, positions, "encoder", c); // (B,T,C)
    for (int l = 0; l < c->enc_layers; l++) {
        snprintf(name, sizeof name, "enc.%d", l);
        snprintf(pre, sizeof pre, "encoder.layers.%d", l);
        rm_stage_begin(g, name);
        rm_val h = rm_model_layernorm(g, x, P("ln_1"), C);
        x = residual(g, x, attention(g, h, h, io->source_mask, P("attn"), C, (int)H, 0, std, proj_std), c->dropout);
        x = residual(g, x, mlp(g, rm_model_layernorm(g, x, P("ln_2"), C), pre, C, std, proj_std), c->dropout);
    }
    rm_val enc = rm_model_layernorm(g, x, "encoder.ln_f", C); // (B,T,C): what every decoder block reads

    rm_stage_begin(g, "dec.embed");
    x = embed(g, io->tokens, positions, "decoder", c);
    for (int l = 0; l < c->dec_layers; l++) {
        snprintf(name, sizeof name, "dec.%d", l);
        snprintf(pre, sizeof pre, "decoder.layers.%d", l);
        rm_stage_begin(g, name);
        rm_val h = rm_model_layernorm(g, x, P("ln_1"), C);
        x = residual(g, x, attention(g, h, h, -1, P("self_attn"), C, (int)H, 1, std, proj_std), c->dropout);
        h = rm_model_layernorm(g, x, P("ln_2"), C);
        x = residual(g, x, attention(g, h, enc, io->source_mask, P("cross_attn"), C, (int)H, 0, std, proj_std),
                     c->dropout);
        x = residual(g, x, mlp(g, rm_model_layernorm(g, x, P("ln_3"), C), pre, C, std, proj_std), c->dropout);
    }
#undef P

    rm_stage_begin(g, "head");
    x = rm_model_layernorm(g, x, "decoder.ln_f", C);
    io->logits = rm_model_linear(g, x, "lm_head", V, C, std, 0); // (B,T,V)
    io->loss = rm_softmax_ce_ignore(g, io->logits, io->targets, RM_ENCDEC_PAD);
    if (c->keep_logits) rm_mark_output(g, io->logits);
    rm_set_loss(g, io->loss);
    return rm_graph_status(g);
}
