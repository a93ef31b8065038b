/* fuzz_load.c: a libFuzzer target for the checkpoint-file loader: the
 * safetensors parser (rm_st_parse), the checksum (rm_st_verify) and the
 * loading of parameters, AdamW moments and the update count into a session
 * (rm_load_from), as `remat train --init/--resume` and `remat sample` do.
 *
 * The session is made by hand, as tests/test_io.c does, with the parameters
 * of `remat train --model mlp --widths 3 --context 2 --vocab 4 --batchnorm`
 * (the BatchNorm running statistics are non-trainable state). The files of
 * fuzz/corpus/ were saved by remat for that model, so the fuzzer starts from
 * files whose names and shapes fit. The loader also runs with the checksum
 * taken as verified, so mutations that break the checksum still reach the
 * checks behind it. Only src/train/ is linked: the fuzzer builds in seconds.
 * Built and run by tests/test_fuzz.sh; by hand:
 *   build/fuzz/fuzz_load -dict=fuzz/safetensors.dict fuzz/corpus */
#include "exec/exec.h"
#include "train/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const struct { const char *name; int ndim; int64_t d0, d1; int trainable; } PARAMS[] = {
    {"layers.0.weight", 2, 3, 2, 1},         {"layers.0.bias", 1, 3, 0, 1},
    {"layers.0.bn.weight", 1, 3, 0, 1},      {"layers.0.bn.bias", 1, 3, 0, 1},
    {"layers.0.bn.running_mean", 1, 3, 0, 0}, {"layers.0.bn.running_var", 1, 3, 0, 0},
    {"layers.1.weight", 2, 4, 3, 1},         {"layers.1.bias", 1, 4, 0, 1},
};
enum { NP = sizeof PARAMS / sizeof PARAMS[0] };
static rm_value vals[NP];
static int ids[NP];
static rm_graph g;
static rm_session s;
static rm_optim *o;

/* Parameter i laid out at *off. */
static void place(int i, size_t *off) {
    rm_value *v = &vals[i];
    v->kind = RM_VALUE_PARAM;
    v->ndim = PARAMS[i].ndim;
    v->shape[0] = PARAMS[i].d0;
    v->shape[1] = PARAMS[i].d1;
    v->numel = PARAMS[i].d0 * (v->ndim == 2 ? PARAMS[i].d1 : 1);
    v->trainable = PARAMS[i].trainable;
    v->decay = v->ndim == 2;
    snprintf(v->name, sizeof v->name, "%s", PARAMS[i].name);
    v->param_off = *off;
    *off += (size_t)v->numel + 3; /* gaps, as the aligned layout has */
    ids[i] = i;
}

static void setup(void) {
    size_t off = 0;
    /* laid out as rm_graph_layout does: trainable parameters first (their
     * gradients and moments are the first train_floats floats), then state */
    for (int i = 0; i < NP; i++)
        if (PARAMS[i].trainable) place(i, &off);
    g.train_floats = off;
    for (int i = 0; i < NP; i++)
        if (!PARAMS[i].trainable) place(i, &off);
    g.state_end = off;
    g.vals = vals;
    g.n_vals = g.n_params = NP;
    g.params = ids;
    g.param_floats = off;
    g.loss = -1;
    s.g = &g;
    s.params = calloc(off, sizeof(float));
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    if (!s.params || rm_optim_new(&s, &oc, &o) != RM_OK) abort(); /* the harness is broken */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!o) setup();
    char err[512];
    rm_st_file *f = NULL;
    if (rm_st_parse(data, size, "fuzz", &f, err, sizeof err) != RM_OK) {
        if (f || !memchr(err, 0, sizeof err)) abort(); /* an error leaves nothing open */
        return 0;
    }
    /* every view the reader hands out must be consistent */
    for (int i = 0; i < rm_st_count(f); i++) {
        const rm_st_tensor *t = rm_st_at(f, i);
        if (rm_st_find(f, t->name) != t || t->bytes != rm_st_numel(t) * rm_st_dtype_size(t->dtype))
            abort();
        volatile unsigned char sink = 0;
        if (t->bytes) sink ^= ((const unsigned char *)t->data)[t->bytes - 1];
        (void)sink;
    }
    for (int i = 0; i < rm_st_meta_count(f); i++)
        if (rm_st_meta(f, rm_st_meta_key(f, i)) != rm_st_meta_value(f, i)) abort();
    int present;
    char sum[RM_ST_CHECKSUM_LEN];
    (void)rm_st_verify(f, "fuzz", &present, sum, err, sizeof err);
    (void)rm_load_from(&s, NULL, f, "fuzz", 0, err, sizeof err);
    (void)rm_load_from(&s, o, f, "fuzz", RM_LOAD_STATE | RM_LOAD_VERIFIED, err, sizeof err);
    rm_st_close(f);
    return 0;
}
