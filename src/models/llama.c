/* llama.c: a LLaMA-style decoder (Touvron et al. 2023), recorded as a chain
 * of stages:
 *   "embed"        token embeddings (+ dropout); no position embeddings
 *   "layers.0".."layers.L-1"  one pre-norm block each:
 *       h = RMSNorm(x);  q, k, v = h Wq^T, h Wk^T, h Wv^T   (no biases)
 *       q, k = RoPE(q), RoPE(k)                            (positions by rotation)
 *       x = x + dropout(causal_attention(q, k, v) Wo^T)
 *       h = RMSNorm(x)
 *       x = x + dropout((silu(h Wgate^T) * (h Wup^T)) Wdown^T)   (SwiGLU MLP)
 *   "head"         final RMSNorm, lm_head (or embed_tokens, tied), cross-entropy
 * q has H heads of hd = C/H dims; k and v have K <= H (grouped-query
 * attention: each group of H/K query heads shares one key/value head, as
 * HF's repeat_kv). Dropout sits where GPT has it.
 * Parameter names are Hugging Face LlamaForCausalLM's, so a file moves
 * between remat and a PyTorch LLaMA with these names (tests/torch_models.py).
 * Init as HF's initializer_range: every weight N(0, 0.02), norms ones.
 * With c->lora (rank > 0) the projections it names carry LoRA adapters
 * (rm_model_proj) and everything else is frozen (models/lora.c). */
#include "models/models.h"
#include <stdio.h>
#include <limits.h>

int rm_llama_ffn_dim(int dim) {
    if (dim < 1) return 0;
    const int64_t f = (8 * (int64_t)dim + 2) / 3; /* ceil(8/3 dim), in 64 bits: 8 dim overflows an int */
    const int64_t r = (f + 63) / 64 * 64;
    return r <= INT_MAX ? (int)r : 0;
}

static rm_val rmsnorm(rm_graph *g, rm_val x, const char *name, int64_t C, float eps) {
    rm_val w = rm_model_param1(g, name, C, RM_INIT_ONES);
    return rm_rmsnorm(g, x, w, eps);
}

/* Self-attention of block l on h (B,T,C): q/k/v projections (k and v of
 * kv_heads heads), RoPE, causal grouped-query attention. */
static rm_val llama_attention(rm_graph *g, rm_val h, const char *prefix, const rm_llama_config *c, float std) {
    const int64_t C = c->dim, Ckv = (int64_t)c->dim / c->heads * c->kv_heads;
    char p[160];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, prefix), p)
    rm_val q = rm_model_proj(g, h, P("self_attn.q_proj"), C, C, std, 0, &c->lora);   // (B,T,C)
    rm_val k = rm_model_proj(g, h, P("self_attn.k_proj"), Ckv, C, std, 0, &c->lora); // (B,T,Ckv)
    rm_val v = rm_model_proj(g, h, P("self_attn.v_proj"), Ckv, C, std, 0, &c->lora); // (B,T,Ckv)
    q = rm_rope(g, q, c->heads, c->rope_theta);
    k = rm_rope(g, k, c->kv_heads, c->rope_theta);
    rm_val a = rm_attention_gqa(g, q, k, v, -1, c->heads, c->kv_heads, 1); // (B,T,C)
    return rm_model_proj(g, a, P("self_attn.o_proj"), C, C, std, 0, &c->lora);
#undef P
}

/* SwiGLU MLP on h (B,T,C): down(silu(gate(h)) * up(h)), hidden F. */
static rm_val llama_mlp(rm_graph *g, rm_val h, const char *prefix, int64_t C, int64_t F, float std,
                        const rm_lora_config *lora) {
    char p[160];
#define P(suffix) (snprintf(p, sizeof p, "%s." suffix, prefix), p)
    rm_val gate = rm_model_proj(g, h, P("mlp.gate_proj"), F, C, std, 0, lora); // (B,T,F)
    rm_val up = rm_model_proj(g, h, P("mlp.up_proj"), F, C, std, 0, lora);     // (B,T,F)
    rm_val m = rm_swiglu(g, gate, up); // silu(gate) * up
    return rm_model_proj(g, m, P("mlp.down_proj"), C, F, std, 0, lora);
#undef P
}

/* The head on x (B,T,C): lm_head, or embed_tokens when tied. With
 * keep_logits the logits (B,T,V) are a value (sampling reads them) and
 * softmax_ce the loss; without, head and loss are one rm_linear_ce, which
 * never stores the (B,T,V) logits, and io->logits is -1. */
static void llama_head(rm_graph *g, rm_val x, rm_val wte, const rm_llama_config *c, rm_model_io *io, float std) {
    rm_val w = c->tie_embeddings ? wte : rm_model_param2(g, "lm_head.weight", c->vocab, c->dim, RM_INIT_NORMAL, std);
    if (!c->keep_logits) {
        io->logits = -1;
        io->loss = rm_linear_ce(g, x, w, io->targets);
        return;
    }
    io->logits = rm_linear(g, x, w, -1); // (B,T,V)
    io->loss = rm_softmax_ce(g, io->logits, io->targets);
    rm_mark_output(g, io->logits);
}

rm_status rm_llama_build(rm_graph *g, const rm_llama_config *cfg, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!cfg || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_llama_build: the %s is NULL", !cfg ? "config" : "io");
    rm_llama_config c = *cfg;
    if (c.ffn_dim == 0) c.ffn_dim = rm_llama_ffn_dim(c.dim);
    if (c.rope_theta == 0.0f) c.rope_theta = 10000.0f;
    if (c.norm_eps == 0.0f) c.norm_eps = 1e-6f;
    if (c.kv_heads == 0) c.kv_heads = c.heads;
    const int64_t L = c.layers, C = c.dim, H = c.heads, T = c.context, V = c.vocab, B = c.batch, F = c.ffn_dim;
    if (L < 1 || C < 1 || H < 1 || T < 1 || V < 2 || B < 1 || F < 1)
        return rm_graph_fail(g, RM_ERR_ARG,
                             "llama: layers, dim, heads, ffn dim, context, batch must be >= 1 and vocab >= 2");
    if (C % H != 0 || (C / H) % 2 != 0)
        return rm_graph_fail(g, RM_ERR_ARG, "llama: --dim %lld must be --heads %lld times an even head size (RoPE)",
                             (long long)C, (long long)H);
    if (c.kv_heads < 1 || H % c.kv_heads != 0)
        return rm_graph_fail(g, RM_ERR_ARG, "llama: --kv-heads %d must divide --heads %lld (each key/value head "
                             "serves heads/kv-heads query heads)", c.kv_heads, (long long)H);
    if (!rm_rope_theta_ok(c.rope_theta) || !rm_norm_eps_ok(c.norm_eps))
        return rm_graph_fail(g, RM_ERR_ARG, "llama: rope_theta %g must be above 1 and at most 1e30, norm_eps %g in (0, 1)",
                             (double)c.rope_theta, (double)c.norm_eps);
    if (!(c.dropout >= 0.0f && c.dropout < 1.0f))
        return rm_graph_fail(g, RM_ERR_ARG, "llama: --dropout must be in [0, 1), got %g", (double)c.dropout);
    io->features = -1;
    io->source = io->source_mask = -1;
    int64_t bt[2] = {B, T};
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);

    const float std = 0.02f;
    rm_stage_begin(g, "embed");
    rm_val wte = rm_model_param2(g, "model.embed_tokens.weight", V, C, RM_INIT_NORMAL, std);
    rm_val x = rm_model_dropout(g, rm_embedding(g, io->tokens, wte), c.dropout); // (B,T,C)

    for (int64_t l = 0; l < L; l++) {
        char name[64], prefix[96], norm[160];
        snprintf(name, sizeof name, "layers.%lld", (long long)l);
        snprintf(prefix, sizeof prefix, "model.layers.%lld", (long long)l);
        rm_stage_begin(g, name);
        snprintf(norm, sizeof norm, "%s.input_layernorm.weight", prefix);
        rm_val h = rmsnorm(g, x, norm, C, c.norm_eps);
        x = rm_add(g, x, rm_model_dropout(g, llama_attention(g, h, prefix, &c, std), c.dropout));
        snprintf(norm, sizeof norm, "%s.post_attention_layernorm.weight", prefix);
        h = rmsnorm(g, x, norm, C, c.norm_eps);
        x = rm_add(g, x, rm_model_dropout(g, llama_mlp(g, h, prefix, C, F, std, &c.lora), c.dropout));
    }

    rm_stage_begin(g, "head");
    x = rmsnorm(g, x, "model.norm.weight", C, c.norm_eps);
    llama_head(g, x, wte, &c, io, std);
    rm_set_loss(g, io->loss);
    static const char *const modules[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    return rm_model_lora_finish(g, &c.lora, "llama", modules, 7);
}
