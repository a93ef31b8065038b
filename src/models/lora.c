/* lora.c: LoRA on the built-in models (rm_lora_config): the base frozen
 * around the adapters. A model builder records each of its linear layers
 * with rm_model_proj (layers.c), which makes it an rm_lora_linear when the
 * module's name (the last part of its prefix, "q_proj") is a target, and
 * finishes with rm_model_lora_finish, which checks every target names one
 * of the model's modules and freezes every parameter that is not an
 * adapter (PEFT's default: only the adapters train). */
#include "models/models.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

rm_status rm_model_lora_finish(rm_graph *g, const rm_lora_config *lora, const char *model,
                               const char *const *modules, int n_modules) {
    if (!lora || lora->rank == 0 || rm_graph_status(g) != RM_OK) return rm_graph_status(g);
    if (lora->rank < 0 || !(lora->dropout >= 0.0f && lora->dropout < 1.0f) || !isfinite(lora->alpha))
        return rm_graph_fail(g, RM_ERR_ARG, "%s: LoRA rank %d must be positive, dropout %g in [0, 1), alpha finite",
                             model, lora->rank, (double)lora->dropout);
    char known[256] = "";
    for (int i = 0; i < n_modules; i++)
        snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? "," : "", modules[i]);
    char why[128];
    if (*lora->targets && rm_list_problem(lora->targets, sizeof lora->targets, 1, why, sizeof why))
        return rm_graph_fail(g, RM_ERR_ARG, "%s: LoRA targets '%s' have %s (comma-separated module names, no comma "
                             "first, last or twice, none twice, e.g. q_proj,v_proj)", model, lora->targets, why);
    for (const char *p = lora->targets; *p;) {
        const char *end = strchr(p, ',');
        int k = end ? (int)(end - p) : (int)strlen(p), found = 0;
        for (int i = 0; i < n_modules; i++)
            found |= (int)strlen(modules[i]) == k && strncmp(p, modules[i], (size_t)k) == 0;
        if (!found)
            return rm_graph_fail(g, RM_ERR_ARG, "%s: LoRA target '%.*s' is not one of its linear layers (%s)", model,
                                 k, p, known);
        p = end ? end + 1 : p + k;
    }
    for (int i = 0; i < rm_param_count(g); i++) {
        rm_val v = rm_param_at(g, i);
        if (rm_param_trainable(g, v) && !rm_param_adapter(g, v) && rm_param_freeze(g, v) != RM_OK) break;
    }
    return rm_graph_status(g);
}
