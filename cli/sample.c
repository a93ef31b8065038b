/* sample.c: `remat sample --load FILE`: rebuild the model from the file's
 * metadata, load its weights and generate tokens one at a time. */
#include "args.h"
#include "ckptfile.h"
#include "guard.h"
#include "hf.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Samples from softmax(logits / temperature) restricted to the top k, with
 * a uniform draw u in [0,1). Temperature 0 means greedy. */
static int pick(const float *logits, int V, float temperature, int top_k, float u, float *probs) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0.0f) return best;
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        /* the k-th largest logit, by repeated selection (k is small) */
        for (int i = 0; i < V; i++) probs[i] = logits[i];
        for (int r = 0; r < top_k; r++) {
            int m = -1;
            for (int i = 0; i < V; i++)
                if (probs[i] != -INFINITY && (m < 0 || probs[i] > probs[m])) m = i;
            cut = probs[m];
            probs[m] = -INFINITY;
        }
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        probs[i] = logits[i] >= cut ? expf((logits[i] - logits[best]) / temperature) : 0.0f;
        sum += probs[i];
    }
    double acc = 0, target = u * sum;
    for (int i = 0; i < V; i++) {
        acc += probs[i];
        if (acc > target) return i;
    }
    return best;
}

/* The finite-result rule (docs/RELIABILITY.md): logits that are not all
 * finite (weights whose sums overflow) give no token; exit 1 naming the
 * position instead of printing what argmax makes of NaN. */
static int finite_logits(const float *logits, int V, int k) {
    for (int i = 0; i < V; i++)
        if (!isfinite(logits[i])) {
            putchar('\n');
            return cli_fail(1, "the model's output for generated token %d is not finite (logit %d is %g): no token can "
                            "be drawn from it; the model's weights make its sums overflow (check the file)", k, i,
                            (double)logits[i]);
        }
    return 0;
}

/* encdec: greedy (or, with --temperature, sampled) decoding of a target for
 * a->source, one token per forward pass, until EOS or the context is full. */
static int decode(const cli_args *a, rm_session *s, const rm_model_io *io, float *probs) {
    const int T = a->context, V = a->vocab;
    int32_t *src = rm_value_data(s, io->source), *mask = rm_value_data(s, io->source_mask);
    int32_t *tok = rm_value_data(s, io->tokens), *tgt = rm_value_data(s, io->targets);
    size_t ns = strlen(a->source);
    if (ns > (size_t)T) cli_notice("note", "--source is %zu bytes; the model reads the first %d", ns, T);
    rm_seq2seq_row((const unsigned char *)a->source, ns, NULL, 0, T, src, mask, tok, tgt);
    const float temp = cli_given(a, "--temperature") ? a->temperature : 0.0f; /* greedy by default */
    for (int t = 0; t < T; t++) {
        if (rm_forward(s, NULL) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(s));
        const float *logits = (const float *)rm_value_data(s, io->logits) + (size_t)t * (size_t)V;
        if (finite_logits(logits, V, t)) return 1;
        float u = rm_philox_uniform(a->seed, 0x73616d70u, 1, (uint64_t)t);
        int next = pick(logits, V, temp, a->top_k, u, probs);
        if (next == RM_ENCDEC_EOS || next == RM_ENCDEC_PAD) break;
        if (next < 256) putchar(next);
        else printf("<%d>", next);
        if (t + 1 < T) tok[t + 1] = next;
    }
    putchar('\n');
    return 0;
}

int cli_sample(const cli_args *a0) {
    if (!a0->load) return cli_fail(2, "sample needs --load FILE (a .safetensors file saved by remat train --save)");
    cli_args a = *a0;
    char err[512], hint[600];
    rm_file *f = NULL;
    if (rm_file_open(a.load, &f, err, sizeof err) != RM_OK)
        return cli_fail(1, "--load: %s%s", err, cli_hf_hint(a.load, hint, sizeof hint));
    /* the model as --resume reads it (rm_file_model_info: the same keys and ranges), training keys aside */
    rm_run_info fr;
    rm_status st = rm_file_model_info(f, &fr, err, sizeof err);
    rm_file_close(f);
    if (st != RM_OK) return cli_fail(1, "%s%s", err, cli_hf_hint(a.load, hint, sizeof hint));
    if (strcmp(fr.model, "gpt") && strcmp(fr.model, "llama") && strcmp(fr.model, "uvit") && strcmp(fr.model, "encdec"))
        return cli_fail(1, "'%s' holds a model '%s': sample generates from gpt, llama, uvit and encdec models", a.load,
                        fr.model);
    int rc = cli_model_args(&a, &fr, a.load);
    if (rc) return rc;
    const int encdec = strcmp(a.model, "encdec") == 0;
    if (encdec && cli_given(&a, "--prompt"))
        return cli_fail(2, "'%s' holds an encdec: it decodes --source TEXT; --prompt is for language models (drop it)",
                        a.load);
    if (encdec != (a.source != NULL))
        return cli_fail(2, encdec ? "'%s' holds an encdec: give --source TEXT to decode a target for"
                                  : "--source is for encdec models; '%s' holds a language model (use --prompt)",
                        a.load);
    /* greedy decoding (temperature 0; an encdec's default) draws nothing: --top-k and --seed would be ignored */
    const float temp = encdec && !cli_given(&a, "--temperature") ? 0.0f : a.temperature;
    static const char *const draw[] = {"--top-k", "--seed"};
    for (size_t i = 0; temp <= 0.0f && i < sizeof draw / sizeof *draw; i++)
        if (cli_given(&a, draw[i]))
            return cli_fail(2, "%s applies to sampling; --temperature 0%s decodes greedily (the likeliest token "
                            "each time): give --temperature T > 0, or drop %s", draw[i],
                            cli_given(&a, "--temperature") ? "" : " (an encdec's default)", draw[i]);
    a.batch = 1;
    a.dropout = 0.0f;
    rm_run_info r;
    cli_run_info(&a, "", 0, 0, 0, &r);
    int fits = cli_check_fits(&r, 0, 0, a.load); /* before building: the same limits as train */
    if (fits) return fits;
    int T = a.context, V = a.vocab;
    rc = 1;
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_session *s = NULL;
    int32_t *seq = NULL;
    float *probs = NULL;
    if (!g || cli_build_model(&a, g, &io, 1) != RM_OK) { /* the model is the file's: say so */
        rc = cli_fail(1, "'%s': %s", a.load, rm_graph_errmsg(g));
        goto done;
    }
    if ((rc = cli_check_weights(NULL, a.load, g)) != 0) goto done;
    rm_options o;
    rm_options_default(&o);
    o.threads = a.threads;
    o.forward_only = 1;
    if (rm_compile(g, &o, &s) != RM_OK) {
        rc = cli_fail(1, "%s", rm_graph_errmsg(g));
        goto done;
    }
    if (rm_load_params(s, a.load, err, sizeof err) != RM_OK) {
        rc = cli_fail(1, "%s", err);
        goto done;
    }
    if (encdec) {
        probs = malloc((size_t)V * sizeof *probs);
        rc = probs ? decode(&a, s, &io, probs) : cli_fail(1, "out of memory");
        goto done;
    }
    size_t plen = strlen(a.prompt);
    if (plen && V > 256) { /* its ids are a tokenizer's, which remat does not have: bytes would be other tokens */
        rc = cli_fail(2, "the model's vocab is %d (token ids, not bytes): --prompt's text would be read as byte ids; "
                      "leave --prompt out (sampling starts from a newline's id)", V);
        goto done;
    }
    seq = calloc(plen + (size_t)a.tokens + 1, sizeof *seq);
    probs = malloc((size_t)V * sizeof *probs);
    if (!seq || !probs) {
        rc = cli_fail(1, "out of memory");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < plen; i++) {
        int id = (unsigned char)a.prompt[i];
        if (id >= V) {
            rc = cli_fail(2, "the prompt has byte %d but the model's vocab is %d: use bytes below %d (e.g. ASCII text)",
                          id, V, V);
            goto done;
        }
        seq[n++] = id;
    }
    if (n == 0) seq[n++] = '\n' < V ? '\n' : 0; /* start from a newline */
    fwrite(a.prompt, 1, plen, stdout);
    int32_t *tok = rm_value_data(s, io.tokens);
    for (int k = 0; k < a.tokens; k++) {
        /* causal: the last T tokens, left-aligned; read logits at the last one */
        size_t start = n > (size_t)T ? n - (size_t)T : 0, len = n - start;
        for (int t = 0; t < T; t++) tok[t] = (size_t)t < len ? seq[start + (size_t)t] : 0;
        if (rm_forward(s, NULL) != RM_OK) {
            rc = cli_fail(1, "%s", rm_session_errmsg(s));
            goto done;
        }
        const float *logits = (const float *)rm_value_data(s, io.logits) + (len - 1) * (size_t)V;
        if ((rc = finite_logits(logits, V, k)) != 0) goto done;
        float u = rm_philox_uniform(a.seed, 0x73616d70u, 0, (uint64_t)k);
        int next = pick(logits, V, a.temperature, a.top_k, u, probs);
        seq[n++] = next;
        if (V <= 256) putchar(next);
        else printf(" %d", next);
    }
    putchar('\n');
    rc = 0;
done:
    free(seq);
    free(probs);
    rm_session_free(s);
    rm_graph_free(g);
    return rc;
}
