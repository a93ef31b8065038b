/* hf.c: Hugging Face model folders (remat.h, rm_hf_*): config.json
 * (hfconfig.c), the weights in one model.safetensors or in the shards that
 * model.safetensors.index.json maps tensor names to, checked against the
 * LlamaForCausalLM the config describes, and loaded into a session.
 *
 * The weight files are opened (rm_st_open: the header read and checked,
 * the file kept open) and a tensor is read a block at a time as it is
 * converted into its parameter (rm_st_convert, pread), so the resident
 * memory of a load is the session's own plus a block. They are read, not
 * mapped: a file that another process truncates after it was opened gives
 * a short read, an error naming the file, where a mapping would raise
 * SIGBUS and kill the process. */
#include "exec/exec.h"
#include "train/hf.h"
#include "util/half.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_MAX_SHARDS 4096
#define HF_MAX_INDEX_BYTES ((size_t)64 << 20)

static int join(char *out, size_t cap, const char *dir, const char *name) {
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return n > 0 && (size_t)n < cap;
}

/* Whether the name is in the folder in any form (a link to nothing, a
 * FIFO, a folder): it is then the file to read, and reading it says what
 * is wrong with it, rather than that it is not there. */
static int present(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* RM_OK when path can be opened as far as its name goes; else RM_ERR_IO
 * saying why: not there (named by `by`, or the folder's own file), or a
 * symbolic link to nothing (a Hugging Face cache whose blob is gone). */
static rm_status reachable(const rm_hf *m, const char *path, const char *by, char *err, size_t errlen) {
    struct stat sb;
    char to[512];
    if (stat(path, &sb) == 0) return RM_OK;
    const int e = errno;
    const ssize_t n = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode) ? readlink(path, to, sizeof to - 1) : -1;
    if (n >= 0) {
        char shown[80];
        to[n] = 0;
        rm_st_printable(to, shown, sizeof shown);
        rm_st_seterr(err, errlen, "'%s' is a symbolic link to '%s', which cannot be opened (%s): %s", path, shown,
                     strerror(e), e == ENOENT ? "a Hugging Face cache missing that file (a download that did not "
                     "finish, a blob removed); download the model again" : "fix the link or put the file there");
    } else if (e != ENOENT)
        rm_st_seterr(err, errlen, "cannot open '%s': %s", path, strerror(e));
    else if (by)
        rm_st_seterr(err, errlen, "'%s', which %s names, does not exist: a download that did not finish? (every "
                     "shard the index names must be in the folder)", path, by);
    else {
        char snap[4352];
        join(snap, sizeof snap, m->dir, "snapshots");
        const int cache = stat(snap, &sb) == 0 && S_ISDIR(sb.st_mode);
        rm_st_seterr(err, errlen, "'%s' has no %s: not a Hugging Face model folder (save_pretrained writes "
                     "config.json and model.safetensors)%s", m->dir, strrchr(path, '/') + 1,
                     cache ? "; in a Hugging Face cache give the folder snapshots/<revision>/ inside it" : "");
    }
    return RM_ERR_IO;
}

void rm_hf_close(rm_hf *m) {
    if (!m) return;
    for (int i = 0; i < m->n_files; i++) {
        rm_st_close(m->files[i]);
        free(m->file_paths[i]);
    }
    free(m->files);
    free(m->file_paths);
    free(m->config_path);
    free(m->index_path);
    free(m->tensors);
    free(m);
}

/* Opens one weight file (its header read, the file kept open) as file number m->n_files. */
static rm_status add_file(rm_hf *m, const char *path, char *err, size_t errlen) {
    rm_st_file **f = realloc(m->files, (size_t)(m->n_files + 1) * sizeof *f);
    if (f) m->files = f;
    char **p = realloc(m->file_paths, (size_t)(m->n_files + 1) * sizeof *p);
    if (p) m->file_paths = p;
    char *copy = f && p ? strdup(path) : NULL;
    if (!copy) {
        rm_st_seterr(err, errlen, "'%s': out of memory", path);
        return RM_ERR_NOMEM;
    }
    rm_st_file *st = NULL;
    errno = 0;
    rm_status s = rm_st_open(path, &st, err, errlen);
    if (s != RM_OK) {
        struct rlimit lim;
        const size_t n = err ? strlen(err) : 0;
        if (errno == EMFILE && n < errlen && getrlimit(RLIMIT_NOFILE, &lim) == 0) /* each shard stays open */
            snprintf(err + n, errlen - n, " (%d shards open: remat keeps each shard open until the load is done; "
                     "raise the limit of open files, ulimit -n, now %llu)", m->n_files,
                     (unsigned long long)lim.rlim_cur);
        free(copy);
        return s;
    }
    m->files[m->n_files] = st;
    m->file_paths[m->n_files++] = copy;
    return RM_OK;
}

/* A shard's name from the index: a plain file name in the folder. */
static int plain_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 255 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x20 || s[i] == 0x7f) return 0;
    return 1;
}

/* One weight_map entry: a tensor's name, its shard's name, the shard's file number. */
typedef struct hf_mapped {
    const char *name, *shard;
    int file;
} hf_mapped;

static int by_shard(const void *a, const void *b) {
    return strcmp(((const hf_mapped *)a)->shard, ((const hf_mapped *)b)->shard);
}
static int by_name(const void *a, const void *b) {
    return strcmp(((const hf_mapped *)a)->name, ((const hf_mapped *)b)->name);
}

/* e[0..n): the entries of weight_map, checked to name a file in the folder. */
static rm_status read_map(const cJSON *map, const char *ipath, hf_mapped *e, char *err, size_t errlen) {
    if (!map->child) { /* else the model's first tensor is "missing", which blames the shards */
        rm_st_seterr(err, errlen, "'%s': its weight_map maps no tensor to a shard (a copy cut short?): download the "
                     "index again", ipath);
        return RM_ERR_FORMAT;
    }
    int i = 0;
    for (const cJSON *it = map->child; it; it = it->next, i++) {
        char nm[80];
        rm_st_printable(it->string, nm, sizeof nm);
        if (!cJSON_IsString(it) || !plain_name(it->valuestring)) {
            rm_st_seterr(err, errlen, "'%s': weight_map entry '%s' must name a file in the folder", ipath, nm);
            return RM_ERR_FORMAT;
        }
        e[i] = (hf_mapped){it->string, it->valuestring, -1};
    }
    return RM_OK;
}

/* Each shard e names opened once (e sorted by shard: one name after
 * another, so a map of any size is read in n log n, not n times the shards). */
static rm_status open_shards(rm_hf *m, const char *ipath, hf_mapped *e, int n, char *err, size_t errlen) {
    char path[4352];
    qsort(e, (size_t)n, sizeof *e, by_shard);
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(e[i].shard, e[i - 1].shard) == 0) {
            e[i].file = e[i - 1].file;
            continue;
        }
        join(path, sizeof path, m->dir, e[i].shard);
        rm_status st = reachable(m, path, "model.safetensors.index.json", err, errlen);
        if (st != RM_OK) return st;
        if (m->n_files >= HF_MAX_SHARDS) {
            rm_st_seterr(err, errlen, "'%s': more than %d shards", ipath, HF_MAX_SHARDS);
            return RM_ERR_FORMAT;
        }
        if ((st = add_file(m, path, err, errlen)) != RM_OK) return st;
        e[i].file = m->n_files - 1;
    }
    return RM_OK;
}

/* Every name the map gives a shard lies in it, and every tensor of a shard
 * is mapped to it (e sorted by name here, for a lookup in log n). */
static rm_status check_map(const rm_hf *m, const char *ipath, hf_mapped *e, int n, char *err, size_t errlen) {
    char nm[80];
    for (int i = 0; i < n; i++)
        if (!rm_st_find(m->files[e[i].file], e[i].name)) {
            rm_st_seterr(err, errlen, "'%s' maps tensor '%s' to '%s', which does not hold it", ipath,
                         rm_st_printable(e[i].name, nm, sizeof nm), m->file_paths[e[i].file]);
            return RM_ERR_FORMAT;
        }
    qsort(e, (size_t)n, sizeof *e, by_name);
    for (int i = 0; i < m->n_files; i++)
        for (int j = 0; j < rm_st_count(m->files[i]); j++) {
            const hf_mapped key = {rm_st_at(m->files[i], j)->name, NULL, -1};
            const hf_mapped *to = bsearch(&key, e, (size_t)n, sizeof *e, by_name);
            if (!to || to->file != i) { /* a shard holds a tensor the index does not map to it */
                rm_st_seterr(err, errlen, "'%s' holds tensor '%s', which '%s' does not map to it",
                             m->file_paths[i], rm_st_printable(key.name, nm, sizeof nm), ipath);
                return RM_ERR_FORMAT;
            }
        }
    return RM_OK;
}

/* The shards model.safetensors.index.json's weight_map names, each opened
 * once; every name it maps must lie in its shard, and every tensor of a
 * shard must be mapped to that shard. */
static rm_status open_index(rm_hf *m, const char *ipath, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    rm_status st = rm_read_file(ipath, HF_MAX_INDEX_BYTES, &text, &len, err, errlen);
    if (st != RM_OK) return st;
    char why[300];
    cJSON *root = rm_json_parse_len(text, len, why, sizeof why); /* as config.json: no NUL, no key twice */
    free(text);
    const cJSON *map = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const int n = cJSON_GetArraySize(map);
    hf_mapped *e = cJSON_IsObject(map) ? calloc((size_t)n + 1, sizeof *e) : NULL;
    if (!root) rm_st_seterr(err, errlen, "'%s': %s", ipath, why);
    else if (!cJSON_IsObject(map))
        rm_st_seterr(err, errlen, "'%s': not a JSON object with a \"weight_map\" object", ipath);
    else if (!e) rm_st_seterr(err, errlen, "'%s': out of memory", ipath);
    st = !root || !cJSON_IsObject(map) ? RM_ERR_FORMAT : !e ? RM_ERR_NOMEM : read_map(map, ipath, e, err, errlen);
    if (st == RM_OK) st = open_shards(m, ipath, e, n, err, errlen);
    if (st == RM_OK) st = check_map(m, ipath, e, n, err, errlen);
    free(e);
    cJSON_Delete(root);
    return st;
}

static int cmp_tensor(const void *a, const void *b) {
    return strcmp(((const rm_hf_entry *)a)->t->name, ((const rm_hf_entry *)b)->t->name);
}

/* Every tensor of every file, sorted by name; a name twice is an error. */
static rm_status index_tensors(rm_hf *m, char *err, size_t errlen) {
    int n = 0;
    for (int i = 0; i < m->n_files; i++) n += rm_st_count(m->files[i]);
    m->tensors = calloc((size_t)n + 1, sizeof *m->tensors);
    if (!m->tensors) {
        rm_st_seterr(err, errlen, "'%s': out of memory", m->dir);
        return RM_ERR_NOMEM;
    }
    for (int i = 0; i < m->n_files; i++)
        for (int j = 0; j < rm_st_count(m->files[i]); j++)
            m->tensors[m->n_tensors++] = (rm_hf_entry){rm_st_at(m->files[i], j), i};
    qsort(m->tensors, (size_t)n, sizeof *m->tensors, cmp_tensor);
    for (int i = 1; i < n; i++)
        if (strcmp(m->tensors[i].t->name, m->tensors[i - 1].t->name) == 0) {
            char nm[80];
            rm_st_printable(m->tensors[i].t->name, nm, sizeof nm);
            rm_st_seterr(err, errlen, "'%s': tensor '%s' is in two files", m->dir, nm);
            return RM_ERR_FORMAT;
        }
    return RM_OK;
}

/* 4: F32, 2: BF16, 1: F16 (the dtypes check_one lets in) */
static int dtype_kind(const rm_st_tensor *t) { return !strcmp(t->dtype, "F32") ? 4 : !strcmp(t->dtype, "BF16") ? 2 : 1; }

static const rm_hf_entry *find(const rm_hf *m, const char *name) {
    int lo = 0, hi = m->n_tensors - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(name, m->tensors[mid].t->name);
        if (c == 0) return &m->tensors[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* model.layers.N.self_attn.rotary_emb.inv_freq: a buffer older
 * checkpoints saved; rope_theta determines it, so it is skipped. */
static int is_inv_freq(const char *name) {
    const char *suffix = ".self_attn.rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    return strncmp(name, "model.layers.", 13) == 0 && n > k && strcmp(name + n - k, suffix) == 0;
}

/* "model.layers.<l>.<part>" spelled as the model names it (no sign, no leading zero) */
static int canonical(const char *name, int l, const char *part) {
    char again[160];
    snprintf(again, sizeof again, "model.layers.%d.%s", l, part);
    return strcmp(again, name) == 0;
}

/* Whether tensor t is one of the model's (or skipped), with its shape;
 * else the error, with a hint for a bias. */
static rm_status check_one(const rm_hf *m, const rm_st_tensor *t, char *err, size_t errlen) {
    const rm_hf_config *h = &m->cfg;
    char nm[80], have[160], want[160];
    rm_st_printable(t->name, nm, sizeof nm);
    if (is_inv_freq(t->name)) return RM_OK;
    int64_t C = h->dim, Ckv = (int64_t)h->dim / h->heads * h->kv_heads, F = h->ffn_dim, V = h->vocab;
    int64_t shape[2] = {C, 0};
    int ndim = 1, l = -1, used = 0;
    char part[96] = "";
    if (!strcmp(t->name, "model.embed_tokens.weight") || !strcmp(t->name, "lm_head.weight"))
        shape[0] = V, shape[1] = C, ndim = 2;
    else if (!strcmp(t->name, "model.norm.weight"))
        ;
    else if (sscanf(t->name, "model.layers.%d.%95s%n", &l, part, &used) == 2 && l >= 0 && l < h->layers &&
             used == (int)strlen(t->name) && canonical(t->name, l, part)) {
        static const char *const norms[] = {"input_layernorm.weight", "post_attention_layernorm.weight"};
        static const char *const mats[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                           "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                           "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                           "mlp.down_proj.weight"};
        const int64_t rows[] = {C, Ckv, Ckv, C, F, F, C}, cols[] = {C, C, C, C, C, C, F};
        int k = -1;
        for (int i = 0; i < 7; i++)
            if (!strcmp(part, mats[i])) k = i;
        if (k >= 0) shape[0] = rows[k], shape[1] = cols[k], ndim = 2;
        else if (strcmp(part, norms[0]) && strcmp(part, norms[1])) l = -2;
    } else l = -2;
    if (l == -2) {
        size_t n = strlen(t->name);
        rm_st_seterr(err, errlen, "'%s': tensor '%s' is not part of LlamaForCausalLM as config.json describes it%s",
                     m->dir, nm, n > 5 && !strcmp(t->name + n - 5, ".bias") ? " (remat's llama has no biases)" : "");
        return RM_ERR_FORMAT;
    }
    if (strcmp(t->dtype, "F32") && strcmp(t->dtype, "F16") && strcmp(t->dtype, "BF16")) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has dtype %s; remat reads F32, F16 and BF16", m->dir, nm,
                     t->dtype);
        return RM_ERR_FORMAT;
    }
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        rm_format_shape(t->ndim, t->shape, have, sizeof have);
        rm_format_shape(ndim, shape, want, sizeof want);
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has shape %s but config.json makes it %s", m->dir, nm, have,
                     want);
        return RM_ERR_FORMAT;
    }
    return RM_OK;
}

/* The folder holds exactly the model's tensors: each one known and of its
 * shape (check_one), and none missing. */
static rm_status check_tensors(const rm_hf *m, char *err, size_t errlen) {
    for (int i = 0; i < m->n_tensors; i++) {
        rm_status st = check_one(m, m->tensors[i].t, err, errlen);
        if (st != RM_OK) return st;
    }
    static const char *const per_layer[] = {
        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight"};
    char name[160];
    for (int l = -1; l < m->cfg.layers; l++)
        for (int k = 0; k < (l < 0 ? 3 : 9); k++) {
            if (l < 0) snprintf(name, sizeof name, "%s", k == 0 ? "model.embed_tokens.weight"
                                                        : k == 1 ? "model.norm.weight" : "lm_head.weight");
            else snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k]);
            if (l < 0 && k == 2 && m->cfg.tie_embeddings) continue; /* tied: the embedding is the head */
            if (!find(m, name)) {
                rm_st_seterr(err, errlen, "'%s': tensor '%s' is missing%s", m->dir, name,
                             l < 0 && k == 2 ? " (or set tie_word_embeddings: true in config.json if the head "
                                               "is the embedding)" : "");
                return RM_ERR_FORMAT;
            }
        }
    return RM_OK;
}

/* config.json, then model.safetensors or the index and its shards. */
static rm_status open_folder(rm_hf *m, char *err, size_t errlen) {
    char path[4352], *text = NULL;
    size_t len = 0;
    struct stat sb;
    if (stat(m->dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        rm_st_seterr(err, errlen, "'%s' is not a folder (a Hugging Face model: config.json and model.safetensors)",
                     m->dir);
        return RM_ERR_IO;
    }
    join(path, sizeof path, m->dir, "config.json");
    if (!(m->config_path = strdup(path))) {
        rm_st_seterr(err, errlen, "'%s': out of memory", m->dir);
        return RM_ERR_NOMEM;
    }
    rm_status st = reachable(m, path, NULL, err, errlen);
    if (st == RM_OK) st = rm_read_file(path, (size_t)1 << 20, &text, &len, err, errlen);
    if (st == RM_OK) st = rm_hf_parse_config(text, len, path, &m->cfg, m->notes, sizeof m->notes, err, errlen);
    free(text);
    if (st != RM_OK) return st;
    char ipath[4352];
    join(path, sizeof path, m->dir, "model.safetensors");
    join(ipath, sizeof ipath, m->dir, "model.safetensors.index.json");
    /* model.safetensors when it is a file, or there in another form and no index is (transformers, too,
     * takes the index when model.safetensors is not a file) */
    if ((stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) || (present(path) && !present(ipath))) {
        if ((st = reachable(m, path, NULL, err, errlen)) == RM_OK) st = add_file(m, path, err, errlen);
    } else {
        snprintf(path, sizeof path, "%s", ipath);
        if (!present(path)) {
            rm_st_seterr(err, errlen, "'%s' has no model.safetensors or model.safetensors.index.json (remat reads "
                         "safetensors weights only)", m->dir);
            return RM_ERR_IO;
        }
        if (!(m->index_path = strdup(path))) {
            rm_st_seterr(err, errlen, "'%s': out of memory", m->dir);
            return RM_ERR_NOMEM;
        }
        st = reachable(m, path, NULL, err, errlen);
        if (st == RM_OK) st = open_index(m, path, err, errlen);
    }
    if (st == RM_OK) st = index_tensors(m, err, errlen);
    if (st == RM_OK) st = check_tensors(m, err, errlen);
    return st;
}

rm_status rm_hf_open(const char *dir, rm_hf **out, char *err, size_t errlen) {
    if (!dir || !out) {
        rm_st_seterr(err, errlen, "rm_hf_open: dir and out must not be NULL");
        return RM_ERR_ARG;
    }
    *out = NULL;
    if (strlen(dir) >= 4000) {
        rm_st_seterr(err, errlen, "rm_hf_open: the path is too long");
        return RM_ERR_ARG;
    }
    rm_hf *m = calloc(1, sizeof *m);
    if (!m) {
        rm_st_seterr(err, errlen, "'%s': out of memory", dir);
        return RM_ERR_NOMEM;
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    size_t n = strlen(m->dir);
    while (n > 1 && m->dir[n - 1] == '/') m->dir[--n] = 0; /* "dir/" names the same folder */
    rm_status st = open_folder(m, err, errlen);
    if (st != RM_OK) {
        rm_hf_close(m);
        return st;
    }
    *out = m;
    return RM_OK;
}

void rm_hf_run_info(const rm_hf *m, rm_run_info *r) {
    if (!m || !r) return;
    snprintf(r->model, sizeof r->model, "llama");
    r->layers = m->cfg.layers, r->dim = m->cfg.dim, r->heads = m->cfg.heads, r->kv_heads = m->cfg.kv_heads;
    r->ffn_dim = m->cfg.ffn_dim, r->vocab = m->cfg.vocab;
    r->rope_theta = m->cfg.rope_theta, r->norm_eps = m->cfg.norm_eps, r->tie_embeddings = m->cfg.tie_embeddings;
}

void rm_hf_llama_config(const rm_hf *m, rm_llama_config *c) {
    if (!m || !c) return;
    c->layers = m->cfg.layers, c->dim = m->cfg.dim, c->heads = m->cfg.heads, c->kv_heads = m->cfg.kv_heads;
    c->ffn_dim = m->cfg.ffn_dim, c->vocab = m->cfg.vocab;
    c->rope_theta = m->cfg.rope_theta, c->norm_eps = m->cfg.norm_eps, c->tie_embeddings = m->cfg.tie_embeddings;
}

rm_status rm_hf_store_frozen(const rm_hf *m, rm_graph *g, int *n) {
    if (n) *n = 0;
    if (!m || !g) return g ? rm_graph_fail(g, RM_ERR_ARG, "rm_hf_store_frozen: m must not be NULL") : RM_ERR_ARG;
    for (int i = 0; i < rm_param_count(g); i++) {
        const rm_val v = rm_param_at(g, i);
        const rm_hf_entry *t = find(m, g->vals[v].name);
        if (!t || !rm_store_eligible(g, v)) continue;
        const int kind = dtype_kind(t->t);
        if (kind == 4) continue; /* F32: 4 bytes, as read */
        rm_status st = rm_param_store(g, v, kind == 2 ? RM_DTYPE_BF16 : RM_DTYPE_F16);
        if (st != RM_OK) return st;
        if (n) (*n)++;
    }
    return RM_OK;
}

rm_status rm_hf_mark_loaded(const rm_hf *m, rm_graph *g, int *n) {
    if (n) *n = 0;
    if (!m || !g) return g ? rm_graph_fail(g, RM_ERR_ARG, "rm_hf_mark_loaded: m must not be NULL") : RM_ERR_ARG;
    for (int i = 0; i < rm_param_count(g); i++) {
        rm_value *v = &g->vals[rm_param_at(g, i)];
        if (!find(m, v->name)) continue;
        v->init = RM_INIT_ZEROS; /* rm_hf_load writes every value: no draw for it at rm_compile */
        if (n) (*n)++;
    }
    return RM_OK;
}

int rm_hf_max_positions(const rm_hf *m) { return m ? m->cfg.max_positions : 0; }
const char *rm_hf_notes(const rm_hf *m) { return m ? m->notes : ""; }
int rm_hf_tensor_count(const rm_hf *m) { return m ? m->n_tensors : 0; }
int rm_hf_file_count(const rm_hf *m) { return m ? 1 + !!m->index_path + m->n_files : 0; }

const char *rm_hf_file(const rm_hf *m, int i) {
    if (!m || i < 0 || i >= rm_hf_file_count(m)) return NULL;
    if (i == 0) return m->config_path;
    if (m->index_path && i == 1) return m->index_path;
    return m->file_paths[i - 1 - !!m->index_path];
}

rm_status rm_hf_tensor(const rm_hf *m, int i, rm_tensor_info *out) {
    if (!m || !out || i < 0 || i >= m->n_tensors) return RM_ERR_ARG;
    const rm_st_tensor *t = m->tensors[i].t;
    *out = (rm_tensor_info){t->name, t->dtype, t->ndim, t->shape, t->bytes};
    return RM_OK;
}

/* ---- loading -------------------------------------------------------------- */

/* The message for a tensor whose file can no longer be read. */
static void read_failed(const rm_hf *m, const rm_hf_entry *t, char *err, size_t errlen) {
    char nm[80];
    rm_st_printable(t->t->name, nm, sizeof nm);
    rm_st_seterr(err, errlen, "cannot read tensor '%s' from '%s': the file is shorter than when it was opened "
                 "(another program truncated or is rewriting it); load the model again once the file is complete",
                 nm, m->file_paths[t->file]);
}

/* Elements [i0, i0 + k) of tensor t (k <= HF_BLOCK) read into raw (HF_BLOCK
 * * 4 bytes, the caller's: nothing is allocated per block) and converted
 * into dst kept as store: RM_ERR_IO when the file can no longer be read
 * (it shrank since it was opened); *bad: the first value that is not
 * finite, from i0, unless set already. */
#define HF_BLOCK ((uint64_t)1 << 16)
static rm_status read_block(const rm_hf *m, const rm_hf_entry *t, uint64_t i0, uint64_t k, unsigned char *raw,
                            void *dst, rm_dtype store, int64_t *bad) {
    const size_t esize = rm_st_dtype_size(t->t->dtype);
    rm_status st = rm_st_read(m->files[t->file], t->t, i0 * esize, raw, (size_t)k * esize);
    rm_st_tensor part = *t->t; /* the block, in memory */
    part.data = raw, part.bytes = k * esize;
    int64_t b = -1;
    if (st == RM_OK) st = rm_st_convert(m->files[t->file], &part, dst, k, store, &b);
    if (b >= 0 && *bad < 0) *bad = (int64_t)i0 + b;
    return st;
}

/* Tensor t into dst, kept as v is, a block at a time through raw. */
static rm_status load_tensor(const rm_hf *m, const rm_hf_entry *t, const rm_value *v, void *dst, unsigned char *raw,
                             int64_t *bad) {
    const uint64_t n = (uint64_t)v->numel;
    const size_t out = v->store == RM_DTYPE_F32 ? 4 : 2;
    rm_status st = RM_OK;
    *bad = -1;
    for (uint64_t i0 = 0; i0 < n && st == RM_OK; i0 += HF_BLOCK)
        st = read_block(m, t, i0, n - i0 < HF_BLOCK ? n - i0 : HF_BLOCK, raw, (unsigned char *)dst + i0 * out,
                        v->store, bad);
    return st;
}

/* A tied lm_head.weight saved beside the embedding must be the same
 * matrix: both read a block at a time and compared bit for bit. */
static rm_status check_tied(const rm_hf *m, unsigned char *raw, char *err, size_t errlen) {
    const rm_hf_entry *head = find(m, "lm_head.weight"), *emb = find(m, "model.embed_tokens.weight");
    if (!head || !m->cfg.tie_embeddings) return RM_OK;
    float *a = malloc(HF_BLOCK * sizeof *a), *b = malloc(HF_BLOCK * sizeof *b);
    rm_status st = a && b ? RM_OK : RM_ERR_NOMEM;
    if (st != RM_OK) rm_st_seterr(err, errlen, "'%s': out of memory", m->dir);
    const uint64_t n = rm_st_numel(emb->t);
    for (uint64_t i0 = 0; i0 < n && st == RM_OK; i0 += HF_BLOCK) {
        const uint64_t k = n - i0 < HF_BLOCK ? n - i0 : HF_BLOCK;
        int64_t bad = -1;
        const rm_hf_entry *failed = head;
        if ((st = read_block(m, head, i0, k, raw, a, RM_DTYPE_F32, &bad)) != RM_OK ||
            (failed = emb, st = read_block(m, emb, i0, k, raw, b, RM_DTYPE_F32, &bad)) != RM_OK) {
            read_failed(m, failed, err, errlen);
            break;
        }
        for (uint64_t i = 0; i < k; i++)
            if (rm_f32_bits(a[i]) != rm_f32_bits(b[i])) {
                rm_st_seterr(err, errlen, "'%s': tie_word_embeddings is true but lm_head.weight differs from "
                             "model.embed_tokens.weight (element %llu)", m->dir, (unsigned long long)(i0 + i));
                st = RM_ERR_FORMAT;
                break;
            }
    }
    free(a);
    free(b);
    return st;
}

/* Whether tensor t has a parameter in s, and which (-1: skipped). */
static rm_status match(const rm_hf *m, const rm_session *s, const rm_st_tensor *t, int *param, char *err,
                       size_t errlen) {
    const rm_graph *g = s->g;
    *param = -1;
    if (is_inv_freq(t->name) || (m->cfg.tie_embeddings && !strcmp(t->name, "lm_head.weight"))) return RM_OK;
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *v = &g->vals[g->params[i]];
        if (strcmp(v->name, t->name) != 0) continue;
        int same = v->ndim == t->ndim && v->dtype == RM_DTYPE_F32;
        for (int d = 0; same && d < v->ndim; d++) same = v->shape[d] == t->shape[d];
        const size_t floats = v->store == RM_DTYPE_F32 ? (size_t)v->numel : ((size_t)v->numel + 1) / 2;
        if (!same || v->param_off + floats > g->param_floats) {
            char have[160], want[160];
            rm_format_shape(t->ndim, t->shape, have, sizeof have);
            rm_format_shape(v->ndim, v->shape, want, sizeof want);
            rm_st_seterr(err, errlen, "'%s': tensor '%s' has shape %s but the session's parameter is %s (a model "
                         "built from another config?)", m->dir, v->name, have, want);
            return RM_ERR_ARG;
        }
        *param = i;
        return RM_OK;
    }
    char nm[80];
    rm_st_printable(t->name, nm, sizeof nm);
    rm_st_seterr(err, errlen, "'%s': the session has no parameter '%s' (build the model rm_hf_run_info describes)",
                 m->dir, nm);
    return RM_ERR_ARG;
}

rm_status rm_hf_load(rm_hf *m, rm_session *s, int *n_loaded, char *err, size_t errlen) {
    char e[512];
    if (n_loaded) *n_loaded = 0;
    if (!m || !s || !s->g) {
        rm_st_seterr(err, errlen, "rm_hf_load: m and s must not be NULL");
        return s ? rm_session_fail(s, RM_ERR_ARG, "rm_hf_load: m must not be NULL") : RM_ERR_ARG;
    }
    if (s->g->n_params > 0 && !s->params) {
        rm_st_seterr(err, errlen, "rm_hf_load: the session has no parameters (dry run)");
        return rm_session_fail(s, RM_ERR_STATE, "rm_hf_load: the session has no parameters (dry run)");
    }
    int *param = malloc(((size_t)m->n_tensors + 1) * sizeof *param);
    unsigned char *raw = malloc(HF_BLOCK * 4); /* a block of the file, as read */
    rm_status st = param && raw ? RM_OK : RM_ERR_NOMEM;
    if (st != RM_OK) snprintf(e, sizeof e, "'%.300s': out of memory", m->dir);
    for (int i = 0; i < m->n_tensors && st == RM_OK; i++) st = match(m, s, m->tensors[i].t, &param[i], e, sizeof e);
    for (int i = 0; i < m->n_tensors && st == RM_OK; i++) { /* the narrowing rule, before a value is written */
        const rm_value *v = param[i] >= 0 ? &s->g->vals[s->g->params[param[i]]] : NULL;
        int64_t at = -1;
        float x = 0;
        if (v && (st = rm_st_first_unfit(m->files[m->tensors[i].file], m->tensors[i].t, v->store, &at, &x)) != RM_OK) {
            if (st == RM_ERR_IO) read_failed(m, &m->tensors[i], e, sizeof e);
            else snprintf(e, sizeof e, "'%.300s': out of memory", m->dir);
        }
        if (at >= 0) {
            rm_st_unfit_error(e, sizeof e, m->dir, v->name, at, x, v->store);
            st = RM_ERR_FORMAT;
        }
    }
    if (st == RM_OK) st = check_tied(m, raw, e, sizeof e);
    int loaded = 0;
    for (int i = 0; i < m->n_tensors && st == RM_OK; i++) {
        if (param[i] < 0) continue;
        const rm_value *v = &s->g->vals[s->g->params[param[i]]];
        int64_t bad = -1;
        const int paged = rm_session_state_paged(s, param[i], 0);
        s->errmsg[0] = 0; /* set by a failed write to the scratch file, not by a failed read */
        if (!paged) st = load_tensor(m, &m->tensors[i], v, s->params + v->param_off, raw, &bad);
        else st = rm_st_load_paged(s, m->files[m->tensors[i].file], m->tensors[i].t, param[i], 0, &bad);
        if (st == RM_ERR_IO && !s->errmsg[0]) read_failed(m, &m->tensors[i], e, sizeof e);
        else if (st != RM_OK)
            snprintf(e, sizeof e, "'%.200s': cannot load '%.120s'%s: %.150s", m->dir, v->name,
                     paged ? " into the scratch file" : "", st == RM_ERR_NOMEM ? "out of memory" : s->errmsg);
        if (st == RM_OK && bad >= 0) {
            snprintf(e, sizeof e, "'%.300s': tensor '%s' has a value that is not finite (element %lld)", m->dir, v->name,
                     (long long)bad);
            st = RM_ERR_FORMAT;
        }
        loaded++;
    }
    free(param);
    free(raw);
    if (st != RM_OK) {
        rm_st_seterr(err, errlen, "%s", e);
        return rm_session_fail(s, st, "%s", e);
    }
    if (n_loaded) *n_loaded = loaded;
    return RM_OK;
}
