/* store.c: frozen parameters kept in a 2-byte float format (bfloat16 or
 * IEEE half). A frozen pretrained base in bf16 then costs 2 bytes a
 * parameter instead of 4; the ops that read such a weight (linear,
 * lora_linear, linear_ce, embedding: their rm_op_def.half_ins) widen it to
 * fp32 panel by panel inside their products (util/gemm_half.c), so every
 * sum stays fp32. The flat parameter buffer gives such a parameter half
 * the floats (graph/freeze.c, rm_graph_layout); its values are rounded to
 * the format once, when initialised (here) or loaded (params.c, hf.c). */
#include "exec/exec.h"
#include "util/half.h"
#include <string.h>

rm_status rm_param_store(rm_graph *g, rm_val v, rm_dtype dtype) {
    if (!rm_val_ok(g, v, "rm_param_store")) return g ? g->status : RM_ERR_ARG;
    rm_value *p = &g->vals[v];
    if (dtype != RM_DTYPE_F32 && dtype != RM_DTYPE_BF16 && dtype != RM_DTYPE_F16)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_param_store: '%s': dtype %d is not F32, BF16 or F16", p->name,
                             (int)dtype);
    if (p->kind != RM_VALUE_PARAM || (dtype != RM_DTYPE_F32 && !p->frozen))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_param_store: '%s' is not a frozen parameter: only those may be kept "
                             "in 2 bytes (a trained one needs fp32 for its updates)", p->name);
    if (g->laid_out)
        return rm_graph_fail(g, RM_ERR_STATE, "rm_param_store: '%s': the graph was compiled already; choose the "
                             "storage before the first rm_compile", p->name);
    p->store = dtype;
    return RM_OK;
}

rm_dtype rm_param_store_dtype(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals && g->vals[v].kind == RM_VALUE_PARAM) ? g->vals[v].store : RM_DTYPE_F32;
}

/* Whether every node that reads parameter v takes it in 2 bytes. */
static int readers_take_half(const rm_graph *g, rm_val v, const char **op) {
    int any = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const rm_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_in; k++) {
            if (n->in[k] != v) continue;
            any = 1;
            const rm_op_def *d = rm_op_get(n->op);
            if (!d || !(d->half_ins & RM_READS_IN(k))) {
                if (op) *op = n->opname;
                return 0;
            }
        }
    }
    return any;
}

int rm_store_eligible(const rm_graph *g, rm_val v) {
    return g && v >= 0 && v < g->n_vals && g->vals[v].kind == RM_VALUE_PARAM && g->vals[v].frozen &&
           readers_take_half(g, v, NULL);
}

rm_status rm_store_frozen(rm_graph *g, rm_dtype dtype, int *n) {
    if (n) *n = 0;
    if (!g) return RM_ERR_ARG;
    if (g->status != RM_OK) return g->status;
    for (int i = 0; i < g->n_params; i++) {
        const rm_val v = g->params[i];
        if (!rm_store_eligible(g, v)) continue;
        rm_status st = rm_param_store(g, v, dtype);
        if (st != RM_OK) return st;
        if (n) *n += dtype != RM_DTYPE_F32;
    }
    return RM_OK;
}

rm_status rm_store_check(rm_graph *g) {
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        const char *op = "?";
        if (p->store != RM_DTYPE_F32 && !readers_take_half(g, g->params[i], &op))
            return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: '%s' is kept in 2 bytes (rm_param_store) but %s reads it, "
                                 "which takes fp32 only (2-byte weights: linear, lora_linear, linear_ce, embedding)",
                                 p->name, op);
    }
    return RM_OK;
}

void rm_store_round(float *w, void *dst, int64_t n, rm_dtype dtype) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = dtype == RM_DTYPE_BF16 ? rm_f32_to_bf16(w[i]) : rm_f32_to_f16(w[i]);
}

float rm_store_value(const uint16_t *h, rm_dtype dtype) {
    return dtype == RM_DTYPE_BF16 ? rm_bf16_to_f32(*h) : rm_f16_to_f32(*h);
}
