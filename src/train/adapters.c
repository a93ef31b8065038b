/* adapters.c: LoRA adapters in the files the Hugging Face ecosystem uses.
 *
 * rm_save_adapters writes a PEFT adapter folder: adapter_model.safetensors
 * with every adapter as "base_model.model.<name>" (PEFT's key for the
 * module <m>'s "<m>.lora_A.weight" after it drops the adapter's name), F32,
 * and adapter_config.json, which peft.PeftModel.from_pretrained reads:
 * peft_type LORA, task_type CAUSAL_LM, r, lora_alpha, lora_dropout,
 * target_modules (the last part of each adapted module's name), bias
 * "none". rm_save_merged writes the model with every adapted weight
 * replaced by W + (alpha/r) B A, the adapters dropped: a plain model
 * (for llama, LlamaForCausalLM's names and layouts). */
#include "exec/exec.h"
#include "train/safetensors.h"
#include "util/half.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PEFT_PREFIX "base_model.model."

static rm_status fail(rm_session *s, rm_status st, char *err, size_t errlen, const char *what, const char *why) {
    rm_st_seterr(err, errlen, "%s: %s", what, why);
    if (s) rm_session_fail(s, st, "%s: %s", what, why);
    return st;
}

/* The LoRA nodes' common rank, alpha and dropout; RM_ERR_ARG if none or
 * if they differ (one adapter_config.json describes them all). */
static rm_status lora_config(const rm_graph *g, int *rank, float *alpha, float *dropout, char *why, size_t cap) {
    int n = 0;
    for (int k = 0; k < g->n_nodes; k++) {
        const rm_node *nd = &g->nodes[k];
        if (nd->op != RM_OP_LORA) continue;
        const int r = nd->iarg[0];
        const float a = nd->farg[0], p = nd->farg[1];
        if (n++ == 0) *rank = r, *alpha = a, *dropout = p;
        else if (r != *rank || a != *alpha || p != *dropout) {
            snprintf(why, cap, "the adapters differ in rank, alpha or dropout (%d, %g, %g and %d, %g, %g): one "
                     "adapter_config.json cannot describe them", *rank, (double)*alpha, (double)*dropout, r,
                     (double)a, (double)p);
            return RM_ERR_ARG;
        }
    }
    if (n == 0) {
        snprintf(why, cap, "the model has no LoRA adapters (rm_lora_linear)");
        return RM_ERR_ARG;
    }
    return RM_OK;
}

/* x as the shortest decimal that reads back as the same float ("0.05"). */
static cJSON *float_json(float x) {
    char b[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)x);
        if (strtof(b, NULL) == x) break;
    }
    return cJSON_CreateRaw(b);
}

/* adapter_config.json's text (free() it), or NULL when out of memory. */
static char *config_json(const rm_graph *g, int rank, float alpha, float dropout, const char *base_model,
                         int fan_in_fan_out) {
    cJSON *c = cJSON_CreateObject(), *targets = cJSON_CreateArray();
    if (!c || !targets) {
        cJSON_Delete(c);
        cJSON_Delete(targets);
        return NULL;
    }
    for (int k = 0; k < g->n_nodes; k++) { /* the module names, each once, in model order */
        const rm_node *nd = &g->nodes[k];
        if (nd->op != RM_OP_LORA) continue;
        char module[RM_NAME_LEN];
        snprintf(module, sizeof module, "%s", g->vals[nd->in[1]].name);
        char *dot = strrchr(module, '.');
        if (dot && strcmp(dot, ".weight") == 0) *dot = '\0';
        const char *last = strrchr(module, '.') ? strrchr(module, '.') + 1 : module;
        int seen = 0;
        for (int i = 0; i < cJSON_GetArraySize(targets); i++)
            seen |= strcmp(cJSON_GetArrayItem(targets, i)->valuestring, last) == 0;
        if (!seen) cJSON_AddItemToArray(targets, cJSON_CreateString(last));
    }
    if (base_model) cJSON_AddStringToObject(c, "base_model_name_or_path", base_model);
    else cJSON_AddNullToObject(c, "base_model_name_or_path");
    cJSON_AddStringToObject(c, "bias", "none");
    cJSON_AddBoolToObject(c, "fan_in_fan_out", fan_in_fan_out);
    cJSON_AddBoolToObject(c, "inference_mode", 1);
    cJSON_AddBoolToObject(c, "init_lora_weights", 1);
    cJSON_AddNullToObject(c, "layers_pattern");
    cJSON_AddNullToObject(c, "layers_to_transform");
    cJSON_AddItemToObject(c, "lora_alpha", float_json(alpha));
    cJSON_AddItemToObject(c, "lora_dropout", float_json(dropout));
    cJSON_AddNullToObject(c, "modules_to_save");
    cJSON_AddStringToObject(c, "peft_type", "LORA");
    cJSON_AddNumberToObject(c, "r", rank);
    cJSON_AddNullToObject(c, "revision");
    cJSON_AddItemToObject(c, "target_modules", targets);
    cJSON_AddStringToObject(c, "task_type", "CAUSAL_LM");
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* text and a newline to path through rm_out (a regular file or none, a
 * temporary file renamed over it when complete); RM_OK or RM_ERR_IO with
 * the reason in why. */
static rm_status write_text(const char *path, const char *text, char *why, size_t cap) {
    rm_out *o;
    rm_status rc = rm_out_open(path, &o, why, cap);
    if (rc != RM_OK) return rc;
    fputs(text, rm_out_file(o));
    fputc('\n', rm_out_file(o));
    return rm_out_close(o, 1, why, cap);
}

/* The index into g->params of parameter value v. */
static int param_index(const rm_graph *g, int v) {
    for (int i = 0; i < g->n_params; i++)
        if (g->params[i] == v) return i;
    return -1;
}

rm_status rm_save_adapters(rm_session *s, const char *dir, const char *base_model, int fan_in_fan_out, char *err,
                           size_t errlen) {
    if (!s || !dir || !*dir || strlen(dir) > 4000) return fail(s, RM_ERR_ARG, err, errlen, "rm_save_adapters", "bad arguments");
    if (!s->params) return fail(s, RM_ERR_STATE, err, errlen, "rm_save_adapters", "the session holds no parameters");
    const rm_graph *g = s->g;
    int rank = 0;
    float alpha = 0, dropout = 0;
    char why[300], path[4200];
    if (lora_config(g, &rank, &alpha, &dropout, why, sizeof why) != RM_OK)
        return fail(s, RM_ERR_ARG, err, errlen, "rm_save_adapters", why);
    struct stat st;
    if (mkdir(dir, 0777) != 0 && (errno != EEXIST || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        snprintf(why, sizeof why, "cannot make the folder '%.200s': %s", dir, errno == EEXIST ? "a file has that name"
                                                                                               : strerror(errno));
        return fail(s, RM_ERR_IO, err, errlen, "rm_save_adapters", why);
    }
    rm_st_tensor *t = calloc((size_t)g->n_params + 1, sizeof *t);
    rm_paged_src *src = calloc((size_t)g->n_params + 1, sizeof *src);
    char *names = malloc((size_t)(g->n_params ? g->n_params : 1) * (RM_NAME_LEN + 32));
    char *json = config_json(g, rank, alpha, dropout, base_model, fan_in_fan_out);
    rm_status rc = t && src && names && json ? RM_OK : RM_ERR_NOMEM;
    int n = 0;
    for (int i = 0; rc == RM_OK && i < g->n_params; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        if (!p->adapter) continue;
        char *nm = names + (size_t)n * (RM_NAME_LEN + 32);
        snprintf(nm, RM_NAME_LEN + 32, PEFT_PREFIX "%s", p->name);
        t[n] = (rm_st_tensor){nm, "F32", p->ndim, p->shape, s->params + p->param_off, (uint64_t)p->numel * 4,
                              NULL, NULL};
        rm_st_tensor_paged(s, i, 0, &t[n], &src[n]); /* in the scratch file (issue 20): read from there */
        n++;
    }
    const char *k[1] = {"format"}, *v[1] = {"pt"};
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    if (rc == RM_OK) rc = rm_st_write(path, n, t, 1, k, v, why, sizeof why);
    if (rc == RM_OK) {
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        rc = write_text(path, json, why, sizeof why);
    }
    if (rc == RM_ERR_NOMEM) snprintf(why, sizeof why, "out of memory");
    free(t);
    free(src);
    free(names);
    free(json);
    return rc == RM_OK ? RM_OK : fail(s, rc, err, errlen, "rm_save_adapters", why);
}

/* W + s B A for the LoRA node nd, into out (OUT,IN); W, A and B copied
 * first (any of them may be in the scratch file, issue 20; a W kept in 2
 * bytes, rm_param_store, is widened exactly). */
static rm_status merge(rm_session *s, const rm_node *nd, float *out) {
    const rm_graph *g = s->g;
    const rm_value *w = &g->vals[nd->in[1]], *a = &g->vals[nd->in[3]], *b = &g->vals[nd->in[4]];
    const int OUT = (int)w->shape[0], IN = (int)w->shape[1], r = nd->iarg[0];
    float *ba = malloc((size_t)(a->numel + b->numel) * sizeof *ba); /* B (OUT,r), then A (r,IN) */
    if (!ba) return RM_ERR_NOMEM;
    rm_status rc = rm_session_param_copy(s, param_index(g, nd->in[1]), out); /* a 2-byte W widened */
    if (rc == RM_OK) rc = rm_session_param_copy(s, param_index(g, nd->in[4]), ba);
    if (rc == RM_OK) rc = rm_session_param_copy(s, param_index(g, nd->in[3]), ba + b->numel);
    if (rc == RM_OK) rm_sgemm(0, 0, OUT, IN, r, rm_lora_scale(nd), ba, r, ba + b->numel, IN, 1.0f, out, IN);
    free(ba);
    return rc;
}

rm_status rm_save_merged(rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen) {
    if (!s || !path || n_meta < 0 || (n_meta && (!keys || !values)))
        return fail(s, RM_ERR_ARG, err, errlen, "rm_save_merged", "bad arguments");
    if (!s->params) return fail(s, RM_ERR_STATE, err, errlen, "rm_save_merged", "the session holds no parameters");
    const rm_graph *g = s->g;
    /* per parameter, the LoRA node whose base weight it is (-1: none) */
    int *node_of = malloc((size_t)(g->n_vals ? g->n_vals : 1) * sizeof *node_of);
    rm_st_tensor *t = calloc((size_t)g->n_params + 1, sizeof *t);
    rm_paged_src *src = calloc((size_t)g->n_params + 1, sizeof *src);
    float **merged = calloc((size_t)g->n_params + 1, sizeof *merged);
    rm_status rc = node_of && t && src && merged ? RM_OK : RM_ERR_NOMEM;
    char why[600] = "out of memory";
    for (int v = 0; rc == RM_OK && v < g->n_vals; v++) node_of[v] = -1;
    for (int k = 0; rc == RM_OK && k < g->n_nodes; k++)
        if (g->nodes[k].op == RM_OP_LORA) node_of[g->nodes[k].in[1]] = k;
    int n = 0;
    for (int i = 0; rc == RM_OK && i < g->n_params; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        if (p->adapter) continue;
        const float *data = s->params + p->param_off;
        const int nd = node_of[g->params[i]];
        if (nd >= 0) { /* a copy: the session's weights stay as they were */
            if (!(merged[i] = malloc((size_t)p->numel * sizeof(float)))) {
                rc = RM_ERR_NOMEM;
                break;
            }
            if ((rc = merge(s, &g->nodes[nd], merged[i])) != RM_OK) {
                if (rc == RM_ERR_IO) snprintf(why, sizeof why, "%s", s->errmsg);
                break;
            }
            data = merged[i];
        }
        /* merged: F32; the rest as kept (a frozen embedding in BF16 stays BF16) */
        const rm_dtype dt = nd >= 0 ? RM_DTYPE_F32 : p->store;
        t[n] = (rm_st_tensor){p->name, rm_st_dtype_name(dt), p->ndim, p->shape, data,
                              (uint64_t)p->numel * rm_dtype_size(dt), NULL, NULL};
        if (nd < 0) rm_st_tensor_paged(s, i, 0, &t[n], &src[n]); /* in the scratch file (issue 20) */
        n++;
    }
    if (rc == RM_OK) rc = rm_st_write_ex(path, n, t, n_meta, keys, values, 1, why, sizeof why);
    for (int i = 0; merged && i < g->n_params; i++) free(merged[i]);
    free(merged);
    free(t);
    free(src);
    free(node_of);
    return rc == RM_OK ? RM_OK : fail(s, rc, err, errlen, "rm_save_merged", why);
}
