/* gpt.c: a GPT-2-style decoder, recorded as a chain of stages:
 *   "embed"      token + position embeddings (+ dropout)
 *   "h.0".."h.L-1" one pre-norm transformer block each
 *   "head"       final layernorm, logits tied to wte, cross-entropy
 * Parameter names and layouts are nanoGPT's, so files interoperate. */
#include "graph/graph.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static rm_val param2(rm_graph *g, const char *name, int64_t a, int64_t b, rm_init init, float std) {
    int64_t shape[2] = {a, b};
    return rm_param(g, name, 2, shape, init, std, 1); /* 2-D weights get weight decay */
}

static rm_val param1(rm_graph *g, const char *name, int64_t a, rm_init init) {
    int64_t shape[1] = {a};
    return rm_param(g, name, 1, shape, init, 0.0f, 0);
}

static rm_val maybe_dropout(rm_graph *g, rm_val x, float p) {
    return p > 0.0f ? rm_dropout(g, x, p) : x;
}

static rm_val layernorm(rm_graph *g, rm_val x, const char *prefix, int64_t C) {
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    /* one statement each: argument evaluation order is unspecified in C, and
     * the order of creation is the order of parameters in files */
    rm_val wv = param1(g, w, C, RM_INIT_ONES);
    rm_val bv = param1(g, b, C, RM_INIT_ZEROS);
    return rm_layernorm(g, x, wv, bv);
}

static rm_val linear(rm_graph *g, rm_val x, const char *prefix, int64_t out, int64_t in, float std) {
    char w[128], b[128];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    rm_val wv = param2(g, w, out, in, RM_INIT_NORMAL, std);
    return rm_linear(g, x, wv, param1(g, b, out, RM_INIT_ZEROS));
}

rm_status rm_gpt_build(rm_graph *g, const rm_gpt_config *c, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!c || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_gpt_build: the %s is NULL", !c ? "config" : "io");
    int64_t L = c->layers, C = c->dim, H = c->heads, T = c->context, V = c->vocab, B = c->batch;
    if (L < 1 || C < 1 || H < 1 || T < 1 || V < 2 || B < 1)
        return rm_graph_fail(g, RM_ERR_ARG, "gpt: layers, dim, heads, context, batch must be >= 1 and vocab >= 2");
    if (C % H != 0)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_gpt_build: dim %lld is not divisible by heads %lld", (long long)C, (long long)H);
    if (c->dropout < 0.0f || c->dropout >= 1.0f)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_gpt_build: dropout must be in [0, 1), got %g", (double)c->dropout);
    io->features = -1;
    int64_t bt[2] = {B, T};
    io->tokens = rm_input(g, "tokens", RM_DTYPE_I32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 2, bt);
    int32_t *pos = malloc((size_t)(B * T) * sizeof *pos);
    if (!pos) return rm_graph_fail(g, RM_ERR_NOMEM, "gpt: out of memory");
    for (int64_t i = 0; i < B * T; i++) pos[i] = (int32_t)(i % T);
    rm_val positions = rm_constant_i32(g, "positions", 2, bt, pos);
    free(pos);

    /* init as GPT-2: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)) */
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    rm_stage_begin(g, "embed");
    rm_val wte = param2(g, "transformer.wte.weight", V, C, RM_INIT_NORMAL, std);
    rm_val wpe = param2(g, "transformer.wpe.weight", T, C, RM_INIT_NORMAL, std);
    // x is (B,T,C): token embedding plus position embedding
    rm_val x = rm_add(g, rm_embedding(g, io->tokens, wte), rm_embedding(g, positions, wpe));
    x = maybe_dropout(g, x, c->dropout);

    for (int64_t l = 0; l < L; l++) {
        char name[64], p[96];
        snprintf(name, sizeof name, "h.%lld", (long long)l);
        rm_stage_begin(g, name);
        #define P(suffix) (snprintf(p, sizeof p, "transformer.h.%lld." suffix, (long long)l), p)
        // attention branch: ln_1 -> qkv (B,T,3C) -> attention (B,T,C) -> c_proj
        rm_val h = layernorm(g, x, P("ln_1"), C);
        h = linear(g, h, P("attn.c_attn"), 3 * C, C, std);
        h = rm_attention(g, h, (int)H);
        h = linear(g, h, P("attn.c_proj"), C, C, proj_std);
        x = rm_add(g, x, maybe_dropout(g, h, c->dropout));
        // MLP branch: ln_2 -> c_fc (B,T,4C) -> GELU -> c_proj (B,T,C)
        h = layernorm(g, x, P("ln_2"), C);
        h = linear(g, h, P("mlp.c_fc"), 4 * C, C, std);
        h = rm_gelu(g, h);
        h = linear(g, h, P("mlp.c_proj"), C, 4 * C, proj_std);
        x = rm_add(g, x, maybe_dropout(g, h, c->dropout));
        #undef P
    }

    rm_stage_begin(g, "head");
    x = layernorm(g, x, "transformer.ln_f", C);
    io->logits = rm_linear(g, x, wte, -1); // (B,T,V): the head is tied to wte
    io->loss = rm_softmax_ce(g, io->logits, io->targets);
    if (c->keep_logits) rm_mark_output(g, io->logits);
    rm_set_loss(g, io->loss);
    return rm_graph_status(g);
}
