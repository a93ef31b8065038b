/* eval.c: `remat eval`: the mean loss and perplexity of a model on held-out
 * tokens. The model is a Hugging Face folder (--init DIR) or a file remat
 * train saved (--load FILE, rebuilt from its metadata); the data a token
 * file read whole (--data FILE, --token-bytes), scored in sequential
 * batches of --batch rows of --context tokens, every target once
 * (rm_evaluate_part). Forward only: no gradients, no optimizer state. */
#include "args.h"
#include "ckptfile.h"
#include "guard.h"
#include "hf.h"
#include "paths.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct evaluator {
    cli_args *a;
    rm_run_info run;    /* the model: the file's (--load), or the flags' and config.json's (--init) */
    rm_hf *hf;
    rm_graph *g;
    rm_session *s;
    rm_model_io io;
    rm_dataset data;
} evaluator;

/* --load FILE: the model its metadata describes; --context and --batch stay
 * the flags' when given (llama only for --context: GPT's position table
 * has the file's length). */
static int model_from_file(cli_args *a, rm_run_info *out) {
    char err[1024];
    rm_file *f = NULL;
    rm_run_info r;
    char hint[600];
    rm_status st = rm_file_open(a->load, &f, err, sizeof err);
    if (st == RM_OK) st = rm_file_run_info(f, &r, err, sizeof err);
    rm_file_close(f);
    if (st != RM_OK)
        return cli_fail(1, "%s (remat eval --load reads the files remat train --save writes)%s", err,
                        cli_hf_hint(a->load, hint, sizeof hint));
    if (strcmp(r.model, "gpt") && strcmp(r.model, "llama") && strcmp(r.model, "uvit"))
        return cli_fail(1, "'%s' holds a %s model; remat eval scores language models (gpt, llama, uvit)", a->load,
                        r.model);
    if (cli_given(a, "--context") && a->context != r.context && strcmp(r.model, "llama") != 0)
        return cli_fail(2, "'%s' holds a %s of --context %d (its position table); drop --context", a->load, r.model,
                        r.context);
    static const char *const model_flags[] = {"--model", "--layers", "--dim", "--heads", "--kv-heads", "--ffn-dim",
                                              "--vocab", "--rope-theta", "--norm-eps", "--tie-embeddings"};
    for (size_t i = 0; i < sizeof model_flags / sizeof *model_flags; i++)
        if (cli_given(a, model_flags[i]))
            return cli_fail(2, "%s: --load FILE takes the model from the file (drop it)", model_flags[i]);
    static char model[32]; /* a->model points here: one model per process */
    snprintf(model, sizeof model, "%s", r.model);
    a->model = model;
    a->vocab = r.vocab;
    if (cli_given(a, "--context")) r.context = a->context;
    else a->context = r.context;
    if (cli_given(a, "--batch")) r.batch = a->batch;
    else a->batch = r.batch;
    r.dropout = 0.0f;
    *out = r; /* with its LoRA adapters, if it has them */
    return 0;
}

static int check_eval_flags(const cli_args *a) {
    if (!a->data) return cli_fail(2, "eval needs --data FILE (held-out tokens: an llm.c token file, raw ids with "
                                  "--token-bytes, or text)");
    if (!!a->init == !!a->load)
        return cli_fail(2, "eval needs one model: --init DIR (a Hugging Face folder) or --load FILE (saved by remat "
                        "train)");
    if (a->init && !cli_is_dir(a->init))
        return cli_fail(2, "--init '%s' is not a folder: eval reads a Hugging Face folder with --init, a file of "
                        "remat train with --load", a->init);
    /* the flags of training are refused at parsing (cli/args.c, flag_uses) */
    const cli_file files[] = {{"--data", a->data, CLI_IN, NULL, 0}, {"--init", a->init, CLI_IN_ANY, NULL, 0},
                              {"--load", a->load, CLI_IN, NULL, 0}, {"--report", a->report, CLI_OUT, NULL, 0}};
    return cli_check_files(files, (int)(sizeof files / sizeof *files), a->new_in_model_folder);
}

/* The data, whole: every token is held out. */
static int load_data(evaluator *e) {
    const cli_args *a = e->a;
    char err[1024];
    rm_status st = rm_data_load_tokens(&e->data, a->data, a->token_bytes, err, sizeof err);
    if (st == RM_OK && a->init && cli_check_bytes_vocab(a, &e->data)) return 2; /* --load: after build() */
    if (st == RM_OK) st = rm_data_check_vocab(&e->data, a->vocab, err, sizeof err);
    if (st != RM_OK) return cli_fail(1, "%s", err);
    if (rm_data_num_batches(&e->data, RM_DATA_TRAIN, a->batch, a->context) == 0)
        return cli_fail(1, "'%s' has %zu tokens; one batch of --batch %d x --context %d needs %lld", a->data,
                        e->data.n, a->batch, a->context, (long long)a->batch * a->context + 1);
    return 0;
}

static int build(evaluator *e) {
    cli_args *a = e->a;
    char err[1024];
    e->g = rm_graph_new();
    if (!e->g) return cli_fail(1, "out of memory");
    if (rm_run_build(&e->run, e->g, &e->io, 0) != RM_OK) /* the model is the folder's or the file's: say so */
        return cli_fail(1, "'%s': %s", e->hf ? a->init : a->load, rm_graph_errmsg(e->g));
    /* nothing trains: every weight is frozen, and kept as --frozen-dtype says */
    for (int i = 0; i < rm_param_count(e->g); i++)
        if (rm_param_trainable(e->g, rm_param_at(e->g, i))) rm_param_freeze(e->g, rm_param_at(e->g, i));
    int rc = cli_frozen_store(a, e->g, e->hf, NULL);
    if (rc) return rc;
    if (e->hf && rm_hf_mark_loaded(e->hf, e->g, NULL) != RM_OK) return cli_fail(1, "%s", rm_graph_errmsg(e->g));
    if (!e->hf && (rc = cli_check_weights(NULL, a->load, e->g)) != 0) return rc;
    rm_options o;
    rm_options_default(&o);
    o.threads = a->threads;
    o.forward_only = 1;
    o.precision_name = a->precision;
    if (rm_compile(e->g, &o, &e->s) != RM_OK) return cli_fail(1, "%s", rm_graph_errmsg(e->g));
    if (!a->quiet) cli_precision_note(a);
    if (e->hf) {
        rc = cli_hf_load(e->hf, e->s, a);
        rm_hf_close(e->hf); /* closes its files */
        e->hf = NULL;
        return rc;
    }
    if (rm_load_params(e->s, a->load, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    return 0;
}

static int report(const evaluator *e, const rm_eval_result *res) {
    const cli_args *a = e->a;
    /* the mean loss is finite (rm_evaluate_part refuses a batch whose loss is not); its exp may not be */
    char ppl[64] = "beyond 1.8e308 (exp of the mean loss overflows a double)", ppl_json[32] = "null";
    if (isfinite(res->perplexity))
        snprintf(ppl, sizeof ppl, "%.4f", res->perplexity), snprintf(ppl_json, sizeof ppl_json, "%.9g", res->perplexity);
    printf("eval: %s on '%s': %llu tokens in %llu batches of %d x %d (%zu tokens after the last batch unscored): "
           "mean loss %.6f, perplexity %s\n", a->init ? a->init : a->load, a->data, (unsigned long long)res->tokens,
           (unsigned long long)res->batches, a->batch, a->context,
           e->data.n - 1 - (size_t)(res->tokens < e->data.n ? res->tokens : e->data.n - 1), res->mean_loss, ppl);
    if (!a->report) return 0;
    char err[600];
    rm_out *o;
    if (rm_out_open(a->report, &o, err, sizeof err) != RM_OK) return cli_fail(1, "--report: %s", err);
    FILE *f = rm_out_file(o);
    fprintf(f, "{\n  \"model\": \"%s\",\n  \"mean_loss\": %.9g,\n  \"perplexity\": %s,\n  \"batches\": %llu,\n"
            "  \"tokens\": %llu,\n  \"batch\": %d,\n  \"context\": %d\n}\n", a->model, res->mean_loss, ppl_json,
            (unsigned long long)res->batches, (unsigned long long)res->tokens, a->batch, a->context);
    if (rm_out_close(o, 1, err, sizeof err) != RM_OK) return cli_fail(1, "--report: %s", err);
    return 0;
}

int cli_eval(const cli_args *a0) {
    cli_args args = *a0;
    evaluator e;
    memset(&e, 0, sizeof e);
    e.a = &args;
    int rc = check_eval_flags(&args);
    if (!rc && args.init) {
        rc = cli_hf_open(&args, &e.hf);
        args.dropout = 0.0f;
        cli_run_info(&args, "", 0, 0, 0, &e.run);
    } else if (!rc) rc = model_from_file(&args, &e.run);
    if (!rc) rc = load_data(&e);
    if (!rc) rc = build(&e);
    if (!rc && !args.init && cli_check_bytes_vocab(&args, &e.data)) rc = 2; /* the file's vocab, once it is checked */
    if (!rc) {
        rm_eval_result res;
        if (rm_evaluate_part(e.s, &e.io, &e.data, RM_DATA_TRAIN, (uint64_t)args.max_batches, &res) != RM_OK)
            rc = cli_fail(1, "%s", rm_session_errmsg(e.s));
        else rc = report(&e, &res);
    }
    rm_hf_close(e.hf);
    rm_session_free(e.s);
    rm_graph_free(e.g);
    rm_data_free(&e.data);
    return rc;
}
