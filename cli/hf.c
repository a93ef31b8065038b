/* hf.c: `--init DIR`, a Hugging Face model folder (remat.h's rm_hf_*):
 * its config.json gives the model flags, its weights the parameters. */
#include "hf.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cli_is_dir(const char *path) {
    struct stat sb;
    return path && stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* A file a Hugging Face folder names itself (its shards as save_pretrained names them). */
static int hf_file_name(const char *base) {
    const size_t n = strlen(base);
    return !strcmp(base, "config.json") || !strcmp(base, "model.safetensors") ||
           !strcmp(base, "model.safetensors.index.json") ||
           (!strncmp(base, "model-", 6) && n > 18 && !strcmp(base + n - 12, ".safetensors"));
}

int cli_hf_folder_of(const char *path, char *dir, size_t cap) {
    char cfg[4200];
    struct stat sb;
    if (!path || !*path || cap == 0) return 0;
    const int is_dir = cli_is_dir(path);
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    if (!is_dir && !hf_file_name(base)) return 0;
    if (is_dir) snprintf(dir, cap, "%s", path);
    else if (!slash) snprintf(dir, cap, ".");
    else snprintf(dir, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    return stat(cfg, &sb) == 0 && S_ISREG(sb.st_mode);
}

const char *cli_hf_hint(const char *path, char *buf, size_t cap) {
    char dir[4096];
    if (!buf || cap == 0) return "";
    buf[0] = 0;
    if (!cli_hf_folder_of(path, dir, sizeof dir)) return buf;
    snprintf(buf, cap, "; '%s' is a Hugging Face model folder%s: remat reads one with --init %s (train, eval, bench)",
             dir, cli_is_dir(path) ? "" : " (give the folder, not its file)", dir);
    return buf;
}

typedef struct flag_ctx {
    cli_args *a;
    const char *dir;
    int rc;
} flag_ctx;

/* A model flag: config.json's value; a given flag that differs is a usage error. */
static void take_int(flag_ctx *c, const char *flag, const char *key, int *field, int value) {
    if (c->rc) return;
    if (cli_given(c->a, flag) && *field != value)
        c->rc = cli_fail(2, "'%s/config.json' has %s %d but the command line says %s %d; --init DIR takes the model "
                         "from config.json (drop %s)", c->dir, key, value, flag, *field, flag);
    else *field = value;
}

static void take_float(flag_ctx *c, const char *flag, const char *key, float *field, float value) {
    if (c->rc) return;
    if (cli_given(c->a, flag) && *field != value)
        c->rc = cli_fail(2, "'%s/config.json' has %s %g but the command line says %s %g; --init DIR takes the model "
                         "from config.json (drop %s)", c->dir, key, (double)value, flag, (double)*field, flag);
    else *field = value;
}

int cli_hf_open(cli_args *a, rm_hf **out) {
    char err[1024];
    *out = NULL;
    if (cli_given(a, "--model") && strcmp(a->model, "llama") != 0)
        return cli_fail(2, "--init '%s' is a Hugging Face folder, which holds a llama (drop --model %s)", a->init,
                        a->model);
    if (rm_hf_open(a->init, out, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    rm_run_info r;
    rm_run_info_default(&r);
    rm_hf_run_info(*out, &r);
    flag_ctx c = {a, a->init, 0};
    a->model = "llama";
    take_int(&c, "--layers", "num_hidden_layers", &a->layers, r.layers);
    take_int(&c, "--dim", "hidden_size", &a->dim, r.dim);
    take_int(&c, "--heads", "num_attention_heads", &a->heads, r.heads);
    take_int(&c, "--kv-heads", "num_key_value_heads", &a->kv_heads, r.kv_heads);
    take_int(&c, "--ffn-dim", "intermediate_size", &a->ffn_dim, r.ffn_dim);
    take_int(&c, "--vocab", "vocab_size", &a->vocab, r.vocab);
    take_float(&c, "--rope-theta", "rope_theta", &a->rope_theta, r.rope_theta);
    take_float(&c, "--norm-eps", "rms_norm_eps", &a->norm_eps, r.norm_eps);
    if (!c.rc && cli_given(a, "--tie-embeddings") && !r.tie_embeddings)
        c.rc = cli_fail(2, "'%s/config.json' has tie_word_embeddings false (drop --tie-embeddings)", a->init);
    a->tie_embeddings = r.tie_embeddings;
    if (c.rc) {
        rm_hf_close(*out);
        *out = NULL;
        return c.rc;
    }
    if (!a->quiet && *rm_hf_notes(*out)) cli_notice("note", "%s", rm_hf_notes(*out));
    if (!a->quiet && rm_hf_max_positions(*out) && a->context > rm_hf_max_positions(*out))
        cli_notice("note", "--context %d is beyond the model's max_position_embeddings %d: positions it "
                   "never saw in training", a->context, rm_hf_max_positions(*out));
    return 0;
}

int cli_hf_load(rm_hf *m, rm_session *s, const cli_args *a) {
    char err[1024];
    int n = 0;
    if (rm_hf_load(m, s, &n, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    if (!a->quiet) printf("loaded %d tensors from '%s'\n", n, a->init);
    return 0;
}

/* auto for a remat file: each frozen weight in its tensor's dtype there */
static int store_as_file(rm_graph *g, const rm_file *f) {
    rm_status st = RM_OK;
    for (int i = 0; i < rm_file_tensor_count(f) && st == RM_OK; i++) {
        rm_tensor_info t;
        rm_file_tensor(f, i, &t);
        const rm_val v = rm_param_by_name(g, t.name);
        const rm_dtype dt = !strcmp(t.dtype, "BF16") ? RM_DTYPE_BF16 : !strcmp(t.dtype, "F16") ? RM_DTYPE_F16
                                                                                                : RM_DTYPE_F32;
        if (v >= 0 && dt != RM_DTYPE_F32 && rm_param_frozen(g, v)) st = rm_param_store(g, v, dt);
    }
    return st == RM_OK ? 0 : cli_fail(1, "%s", rm_graph_errmsg(g));
}

int cli_frozen_store(const cli_args *a, rm_graph *g, const rm_hf *hf, const rm_file *file) {
    const char *d = a->frozen_dtype ? a->frozen_dtype : "auto";
    rm_status st = RM_OK;
    if (!strcmp(d, "bf16") || !strcmp(d, "f16"))
        st = rm_store_frozen(g, !strcmp(d, "bf16") ? RM_DTYPE_BF16 : RM_DTYPE_F16, NULL);
    else if (!strcmp(d, "auto") && hf) st = rm_hf_store_frozen(hf, g, NULL);
    else if (!strcmp(d, "auto") && file) return store_as_file(g, file);
    return st == RM_OK ? 0 : cli_fail(1, "--frozen-dtype %s: %s", d, rm_graph_errmsg(g));
}

void cli_frozen_summary(const rm_graph *g, char *out, size_t cap) {
    long long n[3] = {0, 0, 0};
    double bytes[3] = {0, 0, 0}; /* fp32, bf16, f16 */
    for (int i = 0; i < rm_param_count(g); i++) {
        const rm_val v = rm_param_at(g, i);
        if (!rm_param_frozen(g, v)) continue;
        const rm_dtype dt = rm_param_store_dtype(g, v);
        const int k = dt == RM_DTYPE_BF16 ? 1 : dt == RM_DTYPE_F16 ? 2 : 0;
        n[k] += rm_numel(g, v);
        bytes[k] += (double)rm_numel(g, v) * (k ? 2 : 4);
    }
    snprintf(out, cap, "frozen: %lld parameters kept in bf16 (%.1f MiB), %lld in f16 (%.1f MiB), %lld in fp32 "
             "(%.1f MiB)", n[1], bytes[1] / 1048576.0, n[2], bytes[2] / 1048576.0, n[0], bytes[0] / 1048576.0);
}
