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
    if (!a->quiet && *rm_hf_notes(*out)) fprintf(stderr, "remat: note: %s\n", rm_hf_notes(*out));
    if (!a->quiet && rm_hf_max_positions(*out) && a->context > rm_hf_max_positions(*out))
        fprintf(stderr, "remat: note: --context %d is beyond the model's max_position_embeddings %d: positions it "
                "never saw in training\n", a->context, rm_hf_max_positions(*out));
    return 0;
}

int cli_hf_load(rm_hf *m, rm_session *s, const cli_args *a) {
    char err[1024];
    int n = 0;
    if (rm_hf_load(m, s, &n, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    if (!a->quiet) printf("loaded %d tensors from '%s'\n", n, a->init);
    return 0;
}
