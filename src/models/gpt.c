/* gpt.c: a GPT-2-style decoder, recorded as a chain of stages:
 *   "embed"      token + position embeddings (+ dropout)
 *   "h.0".."h.L-1" one pre-norm transformer block each
 *   "head"       final layernorm, logits tied to wte, cross-entropy
 * Parameter names and layouts are nanoGPT's, so files interoperate. */
#include "models/models.h"
#include <math.h>
#include <stdio.h>

rm_status rm_gpt_build(rm_graph *g, const rm_gpt_config *c, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!c || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_gpt_build: the %s is NULL", !c ? "config" : "io");
    rm_val wte;
    rm_val x = rm_model_gpt_embed(g, c, "rm_gpt_build", io, &wte);
    if (x < 0) return rm_graph_status(g);
    /* init as GPT-2: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)) */
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)c->layers);
    for (int l = 0; l < c->layers; l++) {
        char name[64], prefix[96];
        snprintf(name, sizeof name, "h.%d", l);
        snprintf(prefix, sizeof prefix, "transformer.h.%d", l);
        rm_stage_begin(g, name);
        x = rm_model_gpt_block(g, x, prefix, c->dim, c->heads, c->dropout, std, proj_std, &c->lora);
    }
    return rm_model_gpt_head(g, c, io, x, wte);
}
