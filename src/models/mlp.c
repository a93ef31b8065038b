/* mlp.c: a deep chain of Linear(+ReLU) layers of possibly different widths,
 * one stage per layer: a heterogeneous chain for the recompute planner.
 * Input: a window of T tokens as floats in [0,1]; output: V logits for the
 * token that follows the window. Names: layers.{i}.{weight,bias}. */
#include "graph/graph.h"
#include <math.h>
#include <stdio.h>

rm_status rm_mlp_build(rm_graph *g, const rm_mlp_config *c, rm_model_io *io) {
    if (!g) return RM_ERR_ARG;
    if (!c || !io) return rm_graph_fail(g, RM_ERR_ARG, "rm_mlp_build: the %s is NULL", !c ? "config" : "io");
    if (c->context < 1 || c->vocab < 2 || c->batch < 1 || c->n_widths < 0 || c->n_widths >= RM_MLP_MAX_LAYERS)
        return rm_graph_fail(g, RM_ERR_ARG, "mlp: context and batch must be >= 1, vocab >= 2, at most %d widths",
                             RM_MLP_MAX_LAYERS - 1);
    if (c->dropout < 0.0f || c->dropout >= 1.0f)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_mlp_build: dropout must be in [0, 1), got %g", (double)c->dropout);
    int64_t B = c->batch, in_w = c->context;
    int64_t bt[2] = {B, c->context}, b1[1] = {B};
    io->tokens = -1;
    io->source = io->source_mask = -1;
    io->features = rm_input(g, "features", RM_DTYPE_F32, 2, bt);
    io->targets = rm_input(g, "targets", RM_DTYPE_I32, 1, b1);
    rm_val x = io->features; // (B,T)
    for (int i = 0; i <= c->n_widths; i++) {
        int last = i == c->n_widths;
        int64_t out_w = last ? c->vocab : c->widths[i];
        if (out_w < 1) return rm_graph_fail(g, RM_ERR_ARG, "mlp: width %d is %lld", i, (long long)out_w);
        char name[64], w[96], b[96];
        snprintf(name, sizeof name, "layers.%d", i);
        snprintf(w, sizeof w, "layers.%d.weight", i);
        snprintf(b, sizeof b, "layers.%d.bias", i);
        rm_stage_begin(g, name);
        /* He-style init for ReLU layers keeps activations from vanishing with depth */
        int64_t ws[2] = {out_w, in_w}, bs[1] = {out_w};
        rm_val wv = rm_param(g, w, 2, ws, RM_INIT_NORMAL, sqrtf(2.0f / (float)in_w), 1);
        rm_val bv = rm_param(g, b, 1, bs, RM_INIT_ZEROS, 0.0f, 0);
        x = rm_linear(g, x, wv, bv); // (B,out_w)
        if (!last && c->batchnorm) {
            char bw[96], bb[96], rmn[96], rv[96];
            snprintf(bw, sizeof bw, "layers.%d.bn.weight", i);
            snprintf(bb, sizeof bb, "layers.%d.bn.bias", i);
            snprintf(rmn, sizeof rmn, "layers.%d.bn.running_mean", i);
            snprintf(rv, sizeof rv, "layers.%d.bn.running_var", i);
            /* one statement each: C leaves argument evaluation order unspecified */
            rm_val gamma = rm_param(g, bw, 1, bs, RM_INIT_ONES, 0.0f, 0);
            rm_val beta = rm_param(g, bb, 1, bs, RM_INIT_ZEROS, 0.0f, 0);
            rm_val mean = rm_state(g, rmn, 1, bs, RM_INIT_ZEROS);
            rm_val var = rm_state(g, rv, 1, bs, RM_INIT_ONES);
            x = rm_batchnorm(g, x, gamma, beta, mean, var);
        }
        if (!last) {
            x = rm_relu(g, x);
            if (c->dropout > 0.0f) x = rm_dropout(g, x, c->dropout);
        }
        in_w = out_w;
    }
    io->logits = x;
    io->loss = rm_softmax_ce(g, x, io->targets);
    if (c->keep_logits) rm_mark_output(g, io->logits);
    rm_set_loss(g, io->loss);
    return rm_graph_status(g);
}
