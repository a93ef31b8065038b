/* freeze.c: frozen parameters and the layout of the flat parameter buffer.
 *
 * A frozen parameter is read like any other but never trained: autodiff
 * starts no gradient from it (graph/autodiff.c follows `trainable`), so
 * the backward computes no gradient for it and, where nothing upstream is
 * trainable either, no input gradient at all (PockEngine's pruning: Zhu
 * et al., MICRO'23); ops whose backward reads a tensor only for a weight's
 * gradient (linear reads x only for dW) ask for it only when that gradient
 * exists (rm_op_def.bwd_reads_of), so nothing is kept or recomputed for a
 * gradient nobody wants. The flat buffers follow: gradients and optimizer
 * moments cover the trainable parameters only, which rm_graph_layout puts
 * first in the parameter buffer, so a trainable parameter's gradient and
 * moments sit at its own offset in buffers of train_floats floats. */
#include "graph/graph.h"
#include <ctype.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

void rm_graph_layout(rm_graph *g) {
    /* three passes, each in creation order: trainable, state, frozen */
    size_t off = 0;
    for (int pass = 0; pass < 3; pass++) {
        for (int i = 0; i < g->n_params; i++) {
            rm_value *p = &g->vals[g->params[i]];
            int cls = p->trainable ? 0 : p->frozen ? 2 : 1;
            if (cls != pass) continue;
            p->param_off = off;
            /* a parameter kept in 2 bytes (exec/store.c) takes half the floats */
            const size_t floats = p->store == RM_DTYPE_F32 ? (size_t)p->numel : ((size_t)p->numel + 1) / 2;
            off += (floats + 15) / 16 * 16; /* 64-byte aligned */
        }
        if (pass == 0) g->train_floats = off;
        if (pass == 1) g->state_end = off;
    }
    g->param_floats = off;
    g->laid_out = 1;
}

rm_status rm_param_freeze(rm_graph *g, rm_val v) {
    if (!rm_val_ok(g, v, "rm_param_freeze")) return g ? g->status : RM_ERR_ARG;
    rm_value *p = &g->vals[v];
    if (p->kind != RM_VALUE_PARAM || (!p->trainable && !p->frozen))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_param_freeze: '%s' is not a trainable parameter (%s)", p->name,
                             p->kind == RM_VALUE_PARAM ? "it is state, never trained"
                                                       : "only parameters can be frozen");
    if (g->laid_out)
        return rm_graph_fail(g, RM_ERR_STATE, "rm_param_freeze: '%s': the graph was compiled already; freeze "
                             "parameters before the first rm_compile", p->name);
    p->trainable = 0;
    p->frozen = 1;
    return RM_OK;
}

int rm_param_frozen(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals && g->vals[v].kind == RM_VALUE_PARAM) ? g->vals[v].frozen : 0;
}

int rm_param_adapter(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals && g->vals[v].kind == RM_VALUE_PARAM) ? g->vals[v].adapter : 0;
}

rm_val rm_param_by_name(const rm_graph *g, const char *name) {
    if (!g || !name) return -1;
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->vals[g->params[i]].name, name) == 0) return g->params[i];
    return -1;
}

/* Does glob `pat` match `name`, or a module of it (the part before one of
 * its dots: "lm_head" matches "lm_head.weight")? */
static int glob_match(const char *pat, const char *name) {
    if (fnmatch(pat, name, 0) == 0) return 1;
    char buf[RM_NAME_LEN];
    for (size_t k = 0; name[k] && k < sizeof buf; k++) {
        if (name[k] != '.') continue;
        memcpy(buf, name, k);
        buf[k] = '\0';
        if (fnmatch(pat, buf, 0) == 0) return 1;
    }
    return 0;
}

/* Marks in hit[] the parameters one of the comma-separated patterns of
 * `list` matches; RM_ERR_ARG naming a pattern that matches none. The list
 * is checked whole first (rm_list_problem: no empty pattern, none too
 * long, none with white space, none twice), as the command line checks it. */
static rm_status match_list(rm_graph *g, const char *list, const char *what, char *hit) {
    char why[128];
    if (rm_list_problem(list, RM_NAME_LEN, 1, why, sizeof why))
        return rm_graph_fail(g, RM_ERR_ARG, "%s: '%s' has %s (comma-separated globs on parameter names, no comma "
                             "first, last or twice, no white space, none twice, e.g. 'model.embed_tokens,lm_head')",
                             what, list, why);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        char pat[RM_NAME_LEN];
        memcpy(pat, p, n);
        pat[n] = '\0';
        int any = 0;
        for (int i = 0; i < g->n_params; i++)
            if (glob_match(pat, g->vals[g->params[i]].name)) hit[i] = 1, any = 1;
        if (!any)
            return rm_graph_fail(g, RM_ERR_ARG, "%s: the pattern '%s' matches no parameter (names as in the model's "
                                 "files, e.g. model.layers.0.mlp.up_proj.weight)", what, pat);
        p += n + (p[n] == ',');
    }
    return RM_OK;
}

rm_status rm_freeze_params(rm_graph *g, const char *freeze, const char *train_only, int *n_frozen) {
    if (!g) return RM_ERR_ARG;
    if (g->status != RM_OK) return g->status;
    char *hit_f = calloc((size_t)g->n_params + 1, 1), *hit_t = calloc((size_t)g->n_params + 1, 1);
    rm_status rc = hit_f && hit_t ? RM_OK : rm_graph_fail(g, RM_ERR_NOMEM, "rm_freeze_params: out of memory");
    if (rc == RM_OK && freeze && *freeze) rc = match_list(g, freeze, "freeze", hit_f);
    if (rc == RM_OK && train_only && *train_only) rc = match_list(g, train_only, "train-only", hit_t);
    for (int i = 0; rc == RM_OK && i < g->n_params; i++) {
        rm_value *p = &g->vals[g->params[i]];
        int freeze_it = hit_f[i] || (train_only && *train_only && !hit_t[i]);
        if (freeze_it && p->trainable) rc = rm_param_freeze(g, g->params[i]);
    }
    if (n_frozen) {
        *n_frozen = 0;
        for (int i = 0; i < g->n_params; i++) *n_frozen += g->vals[g->params[i]].frozen;
    }
    free(hit_f);
    free(hit_t);
    return rc;
}
