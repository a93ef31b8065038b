/* runs.h: a built-in model trained through the public API, for the tests
 * of fine-tuning (test_freeze.c, test_lora.c): built from an rm_run_info,
 * compiled with the given options, AdamW at lr 1e-2 (fused or not) on
 * random batches of the test's `runs_data`, and compared bit for bit. */
#ifndef REMAT_TEST_RUNS_H
#define REMAT_TEST_RUNS_H
#include "remat.h"
#include <stdio.h>
#include <string.h>

static rm_dataset runs_data; /* the test's text, split before any run */

typedef struct run {
    rm_graph *g;
    rm_session *s;
    rm_optim *o; /* NULL for a forward-only session */
    rm_model_io io;
} run;

static int open_run(run *r, const rm_run_info *ri, const rm_options *o, int keep_logits) {
    memset(r, 0, sizeof *r);
    if (!(r->g = rm_graph_new()) || rm_run_build(ri, r->g, &r->io, keep_logits) != RM_OK) {
        fprintf(stderr, "build %s: %s\n", ri->model, rm_graph_errmsg(r->g));
        return 0;
    }
    if (rm_compile(r->g, o, &r->s) != RM_OK) {
        fprintf(stderr, "compile %s: %s\n", ri->model, rm_graph_errmsg(r->g));
        return 0;
    }
    return o->forward_only || rm_optim_new(r->s, NULL, &r->o) == RM_OK;
}

static void close_run(run *r) {
    rm_optim_free(r->o);
    rm_session_free(r->s);
    rm_graph_free(r->g);
    memset(r, 0, sizeof *r);
}

/* Batch k of the training part, keyed by seed 5. */
static rm_status fill(run *r, uint64_t k) {
    return rm_data_fill(r->s, &r->io, &runs_data, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 5, k);
}

/* Steps [from, to), fused (the learning rate first) or not. */
static int train(run *r, uint64_t from, uint64_t to) {
    const int fused = r->s->opt.fuse_optimizer;
    for (uint64_t k = from; k < to; k++) {
        float loss;
        rm_status st = fill(r, k);
        if (st == RM_OK && fused) st = rm_optim_set_lr(r->o, 1e-2f);
        if (st == RM_OK) st = rm_step(r->s, k, &loss);
        if (st == RM_OK && !fused) st = rm_optim_step(r->o, 1e-2f, NULL);
        if (st != RM_OK) {
            fprintf(stderr, "step %llu: %s\n", (unsigned long long)k, rm_session_errmsg(r->s));
            return 0;
        }
    }
    return 1;
}

/* Every parameter of a and b, bit for bit. */
static int same_params(const run *a, const run *b) {
    int same = rm_param_count(a->g) == rm_param_count(b->g);
    for (int i = 0; same && i < rm_param_count(a->g); i++) {
        rm_val v = rm_param_at(a->g, i);
        same = memcmp(rm_value_data(a->s, v), rm_value_data(b->s, rm_param_at(b->g, i)),
                      (size_t)rm_numel(a->g, v) * sizeof(float)) == 0;
    }
    return same;
}
#endif
