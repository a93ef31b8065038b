/* bf16_pair.c: --precision bf16 against fp32 in one process, step by step.
 *
 *   bf16_pair THREADS SHAPE [PAIRS]      SHAPE: A or B (bench/bf16.sh's), PAIRS default 12
 *
 * Two sessions of the same GPT (one fp32, one bf16; store-all, no dropout,
 * the same random token ids) built through remat.h alone; after a step of
 * each, PAIRS pairs of rm_step (forward and backward: the optimizer's
 * update is fp32 in both and left out), the order turned each pair. A pair
 * runs within a few seconds, so a slow spell of a shared machine falls on
 * both sides of it: the median of the pairs' bf16 / fp32 is steadier than
 * medians of separate runs (docs/PERFORMANCE.md, "Seventh pass"). Unset
 * OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for a user's configuration. */
#define _POSIX_C_SOURCE 200809L
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *s = malloc(sizeof(double) * (size_t)n);
    if (!s) return 0.0;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, by_value);
    const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

typedef struct side {
    rm_graph *g;
    rm_session *s;
    rm_model_io io;
} side;

/* The GPT of c compiled at precision p, its tokens and targets filled from the same seed. */
static int open_side(side *d, const rm_gpt_config *c, rm_precision p, int threads) {
    rm_options o;
    rm_options_default(&o);
    o.threads = threads, o.precision = p, o.seed = 1;
    d->g = rm_graph_new();
    if (!d->g || rm_gpt_build(d->g, c, &d->io) != RM_OK || rm_compile(d->g, &o, &d->s) != RM_OK) {
        fprintf(stderr, "bf16_pair: %s\n", d->g ? rm_graph_errmsg(d->g) : "out of memory");
        return 0;
    }
    int32_t *tok = rm_value_data(d->s, d->io.tokens), *tgt = rm_value_data(d->s, d->io.targets);
    unsigned x = 7u;
    for (int64_t i = 0; i < rm_numel(d->g, d->io.tokens); i++) {
        x = x * 1664525u + 1013904223u, tok[i] = (int32_t)((x >> 8) % (unsigned)c->vocab);
        x = x * 1664525u + 1013904223u, tgt[i] = (int32_t)((x >> 8) % (unsigned)c->vocab);
    }
    return 1;
}

static double step_ms(side *d, uint64_t step) {
    float loss = 0.0f;
    const double t0 = bench_now_ms();
    if (rm_step(d->s, step, &loss) != RM_OK) {
        fprintf(stderr, "bf16_pair: %s\n", rm_session_errmsg(d->s));
        exit(1);
    }
    return bench_now_ms() - t0;
}

int main(int argc, char **argv) {
    const int threads = argc > 2 ? atoi(argv[1]) : 0, pairs = argc > 3 ? atoi(argv[3]) : 12;
    rm_gpt_config c;
    memset(&c, 0, sizeof c);
    if (argc > 2 && !strcmp(argv[2], "A")) c = (rm_gpt_config){12, 384, 6, 256, 256, 8, 0.0f, 0, {0}};
    else if (argc > 2 && !strcmp(argv[2], "B")) c = (rm_gpt_config){12, 768, 12, 64, 50257, 4, 0.0f, 0, {0}};
    if (threads < 1 || c.layers == 0 || pairs < 1 || pairs > 1000) {
        fprintf(stderr, "usage: %s THREADS A|B [PAIRS]\n", argv[0]);
        return 2;
    }
    side f32, b16;
    if (!open_side(&f32, &c, RM_PRECISION_FP32, threads) || !open_side(&b16, &c, RM_PRECISION_BF16, threads)) return 1;
    step_ms(&f32, 0), step_ms(&b16, 0);
    double *t32 = malloc(sizeof(double) * (size_t)pairs), *t16 = malloc(sizeof(double) * (size_t)pairs);
    double *ratio = malloc(sizeof(double) * (size_t)pairs);
    if (!t32 || !t16 || !ratio) return 1;
    printf("shape %s, %d threads, bf16 path %s; pairs fp32/bf16 ms (forward + backward):", argv[2], threads,
           rm_bf16_kernel());
    for (int i = 0; i < pairs; i++) {
        if (i % 2) t16[i] = step_ms(&b16, (uint64_t)i + 1), t32[i] = step_ms(&f32, (uint64_t)i + 1);
        else t32[i] = step_ms(&f32, (uint64_t)i + 1), t16[i] = step_ms(&b16, (uint64_t)i + 1);
        ratio[i] = t16[i] / t32[i];
        printf(" %.0f/%.0f", t32[i], t16[i]);
    }
    const double m32 = median(t32, pairs), m16 = median(t16, pairs);
    printf("\nmedian fp32 %.1f ms, bf16 %.1f ms: ratio of medians %.3f, median of pairs %.3f\n", m32, m16, m16 / m32,
           median(ratio, pairs));
    free(t32), free(t16), free(ratio);
    rm_session_free(f32.s), rm_session_free(b16.s), rm_graph_free(f32.g), rm_graph_free(b16.g);
    return 0;
}
