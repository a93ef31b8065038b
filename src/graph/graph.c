/* graph.c: recording a static graph. Nothing is computed here: builders only
 * append values and nodes (as in ggml); rm_compile later plans and runs them. */
#include "graph/graph.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rm_status_name(rm_status s) {
    switch (s) {
    case RM_OK: return "ok";
    case RM_ERR_ARG: return "bad argument";
    case RM_ERR_NOMEM: return "out of memory";
    case RM_ERR_IO: return "i/o error";
    case RM_ERR_FORMAT: return "bad file format";
    case RM_ERR_STATE: return "bad state";
    case RM_ERR_BUDGET: return "memory budget cannot be met";
    case RM_ERR_VERIFY: return "recompute verification failed";
    }
    return "unknown status";
}

rm_graph *rm_graph_new(void) {
    rm_graph *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->loss = -1;
    return g;
}

void rm_graph_free(rm_graph *g) {
    if (!g) return;
    if (g->sessions > 0) { /* its sessions read it: freed with the last of them */
        g->freed = 1;
        return;
    }
    for (int v = 0; v < g->n_vals; v++) free(g->vals[v].const_data);
    free(g->vals);
    free(g->nodes);
    free(g->stages);
    free(g->params);
    free(g->param_names);
    free(g);
}

void rm_graph_session_done(rm_graph *g) {
    if (g && g->sessions > 0 && --g->sessions == 0 && g->freed) rm_graph_free(g);
}

const char *rm_graph_errmsg(const rm_graph *g) {
    if (!g) return "no graph (allocation failed?)";
    /* a failed rm_compile leaves its message with the status back at RM_OK */
    return g->status == RM_OK && !g->errmsg[0] ? "ok" : g->errmsg;
}

rm_status rm_graph_status(const rm_graph *g) { return g ? g->status : RM_ERR_NOMEM; }

rm_status rm_graph_fail(rm_graph *g, rm_status s, const char *fmt, ...) {
    if (g->status != RM_OK) return g->status; /* the first error sticks */
    g->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g->errmsg, sizeof g->errmsg, fmt, ap);
    va_end(ap);
    return s;
}

/* Grows *arr (of *cap elements of size sz) to hold n; 0 on failure. */
static int grow(void **arr, int *cap, int n, size_t sz) {
    if (n <= *cap) return 1;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < n) nc *= 2;
    void *p = realloc(*arr, (size_t)nc * sz);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

/* Element n of the array *arr (*cap elements of sz bytes), grown to hold
 * it and zeroed; NULL when it cannot grow, the graph failed with the
 * message fmt (one %s: name). */
static void *append(rm_graph *g, void **arr, int *cap, int n, size_t sz, const char *fmt, const char *name) {
    if (!grow(arr, cap, n + 1, sz)) {
        rm_graph_fail(g, RM_ERR_NOMEM, fmt, name);
        return NULL;
    }
    void *e = (char *)*arr + (size_t)n * sz;
    memset(e, 0, sz);
    return e;
}

/* A graph compiled once is sealed: its sessions' tables are sized to its
 * values and nodes, and its autodiff ran, so a call that would change it
 * fails (1) with RM_ERR_STATE; before, a value or node added after
 * rm_compile made the next step write past those tables. */
static int sealed(rm_graph *g, const char *fn) {
    if (!g->laid_out) return 0;
    rm_graph_fail(g, RM_ERR_STATE, "%s: the graph was compiled already (rm_compile), and its sessions are built on it "
                  "as it was; change a graph before its first rm_compile, or build the new model in a new graph", fn);
    return 1;
}

int rm_val_ok(rm_graph *g, rm_val v, const char *op) {
    if (!g || g->status != RM_OK) return 0;
    if (v < 0 || v >= g->n_vals) {
        rm_graph_fail(g, RM_ERR_ARG, "%s: value id %d is not a value of this graph", op, v);
        return 0;
    }
    return 1;
}

/* Appends a value; returns its id or -1. */
static rm_val new_value(rm_graph *g, rm_value_kind kind, const char *name, rm_dtype dt,
                        int ndim, const int64_t *shape) {
    if (!shape) {
        rm_graph_fail(g, RM_ERR_ARG, "'%s': the shape is NULL", name);
        return -1;
    }
    if (ndim < 1 || ndim > RM_MAX_DIMS) {
        rm_graph_fail(g, RM_ERR_ARG, "'%s': %d dimensions (1 to %d allowed)", name, ndim, RM_MAX_DIMS);
        return -1;
    }
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0 || shape[i] > ((int64_t)1 << 40) / numel) {
            double all = 1; /* in double: the product may overflow int64 */
            for (int k = 0; k < ndim; k++) all *= (double)shape[k];
            rm_graph_fail(g, RM_ERR_ARG, shape[i] <= 0 ? "'%s': dimension %d is %lld (must be positive)"
                                                       : "'%s': dimension %d is %lld: the tensor would hold %.3g "
                                                         "elements, more than 2^40",
                          name, i, (long long)shape[i], all);
            return -1;
        }
        numel *= shape[i];
    }
    rm_value *v = append(g, (void **)&g->vals, &g->cap_vals, g->n_vals, sizeof *g->vals,
                         "out of memory recording value '%s'", name);
    if (!v) return -1;
    v->kind = kind;
    v->dtype = dt;
    v->ndim = ndim;
    memcpy(v->shape, shape, (size_t)ndim * sizeof *shape);
    v->numel = numel;
    rm_strlcpy(v->name, name, sizeof v->name);
    v->node = -1;
    v->grad = -1;
    v->stage = -1;
    return g->n_vals++;
}

rm_val rm_input(rm_graph *g, const char *name, rm_dtype dt, int ndim, const int64_t *shape) {
    if (!g || g->status != RM_OK || sealed(g, "rm_input")) return -1;
    return rm_input_value(g, name, dt, ndim, shape);
}

rm_val rm_input_value(rm_graph *g, const char *name, rm_dtype dt, int ndim, const int64_t *shape) {
    if (!name) name = "input";
    rm_val v = new_value(g, RM_VALUE_INPUT, name, dt, ndim, shape);
    if (v < 0) return -1;
    g->vals[v].input_off = g->input_bytes;
    size_t bytes = (size_t)g->vals[v].numel * rm_dtype_size(dt);
    g->input_bytes += (bytes + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN;
    return v;
}

rm_val rm_constant_i32(rm_graph *g, const char *name, int ndim, const int64_t *shape, const int32_t *data) {
    if (g && !data) {
        rm_graph_fail(g, RM_ERR_ARG, "rm_constant_i32: '%s' has NULL data", name ? name : "constant");
        return -1;
    }
    rm_val v = rm_input(g, name, RM_DTYPE_I32, ndim, shape);
    if (v < 0) return -1;
    size_t bytes = (size_t)g->vals[v].numel * sizeof(int32_t);
    g->vals[v].const_data = malloc(bytes);
    if (!g->vals[v].const_data) {
        rm_graph_fail(g, RM_ERR_NOMEM, "out of memory recording constant '%s'", name);
        return -1;
    }
    memcpy(g->vals[v].const_data, data, bytes);
    return v;
}

rm_val rm_positions(rm_graph *g, const char *name, int64_t B, int64_t T) {
    rm_val v = rm_input(g, name, RM_DTYPE_I32, 2, (const int64_t[]){B, T});
    if (v >= 0) g->vals[v].const_period = T; /* (B, T) of 0..T-1: no B*T array kept in the graph */
    return v;
}

static unsigned name_hash(const char *s) {
    unsigned h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The slot of `name` in the set of parameter names: where it is, or the
 * empty slot where it would go. */
static int name_slot(const rm_graph *g, const char *name) {
    int k = (int)(name_hash(name) & (unsigned)(g->name_slots - 1));
    while (g->param_names[k] >= 0 && strcmp(g->vals[g->params[g->param_names[k]]].name, name) != 0)
        k = (k + 1) & (g->name_slots - 1);
    return k;
}

/* Room in the set for one more name (at most half full); 0 when out of memory. */
static int names_room(rm_graph *g) {
    if (2 * (g->n_params + 1) <= g->name_slots) return 1;
    int slots = g->name_slots ? 2 * g->name_slots : 64, *old = g->param_names;
    if (!(g->param_names = malloc(sizeof *g->param_names * (size_t)slots))) return g->param_names = old, 0;
    free(old);
    g->name_slots = slots;
    for (int k = 0; k < slots; k++) g->param_names[k] = -1;
    for (int i = 0; i < g->n_params; i++) g->param_names[name_slot(g, g->vals[g->params[i]].name)] = i;
    return 1;
}

/* A parameter's name is looked up in a hash set, not compared with every
 * other one: a model of 8192 layers has 10^5 parameters, and the pairwise
 * check took minutes. */
rm_val rm_param(rm_graph *g, const char *name, int ndim, const int64_t *shape, rm_init init,
                float std, int decay) {
    if (!g || g->status != RM_OK || sealed(g, "rm_param")) return -1;
    if (!name || !*name) {
        rm_graph_fail(g, RM_ERR_ARG, "rm_param: a parameter needs a name");
        return -1;
    }
    if (!names_room(g)) {
        rm_graph_fail(g, RM_ERR_NOMEM, "out of memory recording parameter '%s'", name);
        return -1;
    }
    if (g->param_names[name_slot(g, name)] >= 0) {
        rm_graph_fail(g, RM_ERR_ARG, "rm_param: two parameters are named '%s'", name);
        return -1;
    }
    rm_val v = new_value(g, RM_VALUE_PARAM, name, RM_DTYPE_F32, ndim, shape);
    if (v < 0) return -1;
    if (!append(g, (void **)&g->params, &g->cap_params, g->n_params, sizeof *g->params,
                "out of memory recording parameter '%s'", name))
        return -1;
    rm_value *p = &g->vals[v];
    p->init = init;
    p->init_std = std;
    p->decay = decay;
    p->trainable = 1;
    /* keep every parameter 64-byte aligned inside the one flat buffer */
    p->param_off = g->param_floats;
    g->param_floats += ((size_t)p->numel + 15) / 16 * 16;
    g->params[g->n_params] = v;
    g->param_names[name_slot(g, g->vals[v].name)] = g->n_params++;
    return v;
}

rm_status rm_stage_begin(rm_graph *g, const char *name) {
    if (!g) return RM_ERR_ARG;
    if (g->status != RM_OK || sealed(g, "rm_stage_begin")) return g->status;
    if (!append(g, (void **)&g->stages, &g->cap_stages, g->n_stages, sizeof *g->stages,
                "out of memory recording stage '%s'", name ? name : "stage"))
        return g->status;
    rm_strlcpy(g->stages[g->n_stages].name, name ? name : "stage", RM_NAME_LEN);
    g->n_stages++;
    return RM_OK;
}

int rm_node_new(rm_graph *g, rm_op_kind op, const char *opname, const int *in, int n_in) {
    if (!g || g->status != RM_OK || sealed(g, opname)) return -1;
    if (n_in > RM_MAX_IN) {
        rm_graph_fail(g, RM_ERR_ARG, "%s: too many inputs", opname);
        return -1;
    }
    if (g->n_stages == 0 && rm_stage_begin(g, "main") != RM_OK) return -1;
    rm_node *n = append(g, (void **)&g->nodes, &g->cap_nodes, g->n_nodes, sizeof *g->nodes,
                        "out of memory recording a %s node", opname);
    if (!n) return -1;
    n->op = op;
    n->opname = opname;
    n->n_in = n_in;
    for (int i = 0; i < RM_MAX_IN; i++) n->in[i] = i < n_in ? in[i] : -1;
    for (int j = 0; j < RM_MAX_OUT; j++) n->out[j] = -1;
    n->stage = g->n_stages - 1;
    n->user_recompute = g->region_depth > 0;
    return g->n_nodes++;
}

rm_val rm_node_output(rm_graph *g, int node, rm_dtype dt, int ndim, const int64_t *shape) {
    if (!g || g->status != RM_OK || node < 0) return -1;
    rm_node *n = &g->nodes[node];
    if (n->n_out >= RM_MAX_OUT) {
        rm_graph_fail(g, RM_ERR_ARG, "internal: too many outputs on node %d", node);
        return -1;
    }
    char name[RM_NAME_LEN * 2]; /* new_value truncates to RM_NAME_LEN */
    snprintf(name, sizeof name, "%s.%s.%d%s", g->stages[n->stage].name, n->opname, node,
             n->n_out == 0 ? "" : n->n_out == 1 ? ".aux1" : ".aux2");
    rm_val v = new_value(g, RM_VALUE_ACT, name, dt, ndim, shape);
    if (v < 0) return -1;
    g->vals[v].node = node;
    g->vals[v].stage = n->stage;
    n->out[n->n_out++] = v;
    return v;
}

rm_status rm_set_loss(rm_graph *g, rm_val loss) {
    if (!rm_val_ok(g, loss, "rm_set_loss") || sealed(g, "rm_set_loss")) return g ? g->status : RM_ERR_ARG;
    if (g->vals[loss].numel != 1 || g->vals[loss].dtype != RM_DTYPE_F32)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_set_loss: the loss must be one f32 scalar, '%s' is not",
                             g->vals[loss].name);
    g->loss = loss;
    g->vals[loss].is_output = 1;
    return RM_OK;
}

rm_status rm_mark_output(rm_graph *g, rm_val v) {
    if (!rm_val_ok(g, v, "rm_mark_output") || sealed(g, "rm_mark_output")) return g ? g->status : RM_ERR_ARG;
    g->vals[v].is_output = 1;
    return RM_OK;
}

int64_t rm_numel(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals) ? g->vals[v].numel : 0;
}

int rm_shape(const rm_graph *g, rm_val v, int64_t shape[RM_MAX_DIMS]) {
    if (!g || !shape || v < 0 || v >= g->n_vals) return 0;
    memcpy(shape, g->vals[v].shape, sizeof g->vals[v].shape);
    return g->vals[v].ndim;
}

const char *rm_name(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals) ? g->vals[v].name : "";
}

rm_val rm_state(rm_graph *g, const char *name, int ndim, const int64_t *shape, rm_init init) {
    rm_val v = rm_param(g, name, ndim, shape, init, 0.0f, 0);
    if (v >= 0) g->vals[v].trainable = 0;
    return v;
}

int rm_param_count(const rm_graph *g) { return g ? g->n_params : 0; }
rm_val rm_param_at(const rm_graph *g, int i) {
    return (g && i >= 0 && i < g->n_params) ? g->params[i] : -1;
}
int rm_param_decay(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals) ? g->vals[v].decay : 0;
}

rm_status rm_recompute_begin(rm_graph *g) {
    if (!g) return RM_ERR_ARG;
    if (g->status != RM_OK || sealed(g, "rm_recompute_begin")) return g->status;
    g->region_depth++;
    return RM_OK;
}

rm_status rm_recompute_end(rm_graph *g) {
    if (!g) return RM_ERR_ARG;
    if (g->status != RM_OK || sealed(g, "rm_recompute_end")) return g->status;
    if (g->region_depth == 0)
        return rm_graph_fail(g, RM_ERR_STATE, "rm_recompute_end without a matching rm_recompute_begin");
    g->region_depth--;
    return RM_OK;
}

rm_status rm_set_policy(rm_graph *g, rm_val v, rm_policy p) {
    if (!rm_val_ok(g, v, "rm_set_policy") || sealed(g, "rm_set_policy")) return g ? g->status : RM_ERR_ARG;
    if (g->vals[v].kind != RM_VALUE_ACT)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_set_policy: '%s' is not computed by a node; only activations can be "
                             "kept or recomputed", g->vals[v].name);
    if (p < RM_POLICY_DEFAULT || p > RM_POLICY_RECOMPUTE)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_set_policy: unknown policy %d", (int)p);
    g->vals[v].policy = p;
    return RM_OK;
}

int rm_param_trainable(const rm_graph *g, rm_val v) {
    return (g && v >= 0 && v < g->n_vals && g->vals[v].kind == RM_VALUE_PARAM) ? g->vals[v].trainable : 0;
}

int rm_graph_has_marks(const rm_graph *g) {
    for (int n = 0; n < g->n_nodes; n++)
        if (g->nodes[n].user_recompute) return 1;
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].policy != RM_POLICY_DEFAULT) return 1;
    return 0;
}
