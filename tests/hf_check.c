/* hf_check.c: the C side of tests/hf_torch.py, a client of remat.h alone
 * (as a program using the library would be): opens a Hugging Face folder,
 * builds the llama its config.json describes, loads the weights and writes
 * what PyTorch compares.
 *
 *   hf_check logits DIR TOKENS B T OUT
 *     TOKENS: B*T int32 ids; OUT: the (B,T,V) float32 logits of one forward pass
 *   hf_check logits-run FILE TOKENS B T OUT
 *     the same for the model a file of remat train describes (its LoRA
 *     adapters included), rebuilt from its metadata (rm_file_run_info)
 *
 * Exit 0 on success; 1 with the library's message on stderr. */
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, const char *msg) {
    fprintf(stderr, "hf_check: %s: %s\n", what, msg);
    return 1;
}

static int read_exact(const char *path, void *buf, size_t n) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(buf, 1, n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    return got == n && !extra;
}

/* run: a file of remat train (NULL: the folder dir) */
static int logits(const char *dir, const char *run, const char *tokens, int B, int T, const char *out) {
    char err[1024];
    rm_hf *m = NULL;
    rm_file *f = NULL;
    rm_run_info r;
    rm_llama_config c;
    memset(&c, 0, sizeof c);
    if (run) {
        if (rm_file_open(run, &f, err, sizeof err) != RM_OK || rm_file_run_info(f, &r, err, sizeof err) != RM_OK) {
            rm_file_close(f);
            return fail(run, err);
        }
        rm_file_close(f);
        r.context = T, r.batch = B, r.dropout = 0.0f;
    } else {
        if (rm_hf_open(dir, &m, err, sizeof err) != RM_OK) return fail("rm_hf_open", err);
        rm_hf_llama_config(m, &c);
        c.context = T, c.batch = B, c.keep_logits = 1;
    }
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    rm_options o;
    rm_options_default(&o);
    o.forward_only = 1;
    int rc = 1;
    if ((run ? rm_run_build(&r, g, &io, 1) : rm_llama_build(g, &c, &io)) != RM_OK || rm_compile(g, &o, &s) != RM_OK) {
        rc = fail("build", rm_graph_errmsg(g));
        goto done;
    }
    if (run ? rm_load_params(s, run, err, sizeof err) != RM_OK : rm_hf_load(m, s, NULL, err, sizeof err) != RM_OK) {
        rc = fail("load", err);
        goto done;
    }
    if (!read_exact(tokens, rm_value_data(s, io.tokens), (size_t)B * T * 4)) {
        rc = fail(tokens, "not B*T int32 ids");
        goto done;
    }
    memset(rm_value_data(s, io.targets), 0, (size_t)B * T * 4);
    if (rm_forward(s, NULL) != RM_OK) {
        rc = fail("rm_forward", rm_session_errmsg(s));
        goto done;
    }
    const size_t n = (size_t)B * T * (run ? r.vocab : c.vocab);
    FILE *o_f = fopen(out, "wb");
    rc = !o_f || fwrite(rm_value_data(s, io.logits), 4, n, o_f) != n;
    if (o_f && fclose(o_f) != 0) rc = 1;
    if (rc) fail(out, "cannot write");
done:
    rm_session_free(s);
    rm_graph_free(g);
    rm_hf_close(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "logits"))
        return logits(argv[2], NULL, argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (argc == 7 && !strcmp(argv[1], "logits-run"))
        return logits(NULL, argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    fprintf(stderr, "usage: hf_check logits DIR TOKENS B T OUT | logits-run FILE TOKENS B T OUT\n");
    return 2;
}
