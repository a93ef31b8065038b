/* uvit.c: GPT-2 blocks with U-ViT's long skip connections (Bao et al. 2023),
 * on GPT's language-modelling task. With L blocks and h_i the output of
 * block i, for i < floor(L/2) the input of block L-1-i is
 *   Linear(2C -> C)(concat(x, h_i))       x: the residual stream arriving there
 * and every other block is GPT's. Early blocks thus feed late ones directly:
 * the stages are no longer a chain (stage h.{L-1-i} reads h.i's output), so
 * strategies that cut a chain refuse this model, naming the values that
 * cross; storing everything, `selective` and the user's marks still apply.
 * Names: GPT's (nanoGPT), plus transformer.h.{L-1-i}.skip_linear.{weight,bias}. */
#include "models/models.h"
#include <math.h>
#include <stdio.h>

#define UVIT_MAX_LAYERS 1024

rm_status rm_uvit_build(rm_graph *g, const rm_gpt_config *c, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!c || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_uvit_build: the %s is NULL", !c ? "config" : "io");
    const int L = c->layers;
    const int64_t C = c->dim;
    if (L > UVIT_MAX_LAYERS) return rm_graph_fail(g, RM_ERR_ARG, "rm_uvit_build: at most %d layers", UVIT_MAX_LAYERS);
    rm_val wte;
    rm_val x = rm_model_gpt_embed(g, c, "rm_uvit_build", io, &wte); // (B,T,C)
    if (x < 0) return rm_graph_status(g);
    const float std = 0.02f, proj_std = 0.02f / sqrtf(2.0f * (float)L);
    rm_val h[UVIT_MAX_LAYERS / 2]; /* h[i]: block i's output, for the first floor(L/2) blocks */
    for (int l = 0; l < L; l++) {
        char name[64], prefix[96], skip[128];
        snprintf(name, sizeof name, "h.%d", l);
        snprintf(prefix, sizeof prefix, "transformer.h.%d", l);
        rm_stage_begin(g, name);
        const int i = L - 1 - l; /* the early block whose output joins here */
        if (i < L / 2) {
            snprintf(skip, sizeof skip, "%s.skip_linear", prefix);
            x = rm_model_linear(g, rm_concat(g, x, h[i]), skip, C, 2 * C, std, 1); // (B,T,2C) -> (B,T,C)
        }
        x = rm_model_gpt_block(g, x, prefix, C, c->heads, c->dropout, std, proj_std, &c->lora);
        if (l < L / 2) h[l] = x;
    }
    return rm_model_gpt_head(g, c, io, x, wte); // tied to wte, as GPT
}
