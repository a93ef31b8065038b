/* model.c: the run and the model the flags describe (args.h), apart from
 * the parser so that the parser links without the library (fuzz/fuzz_args.c). */
#include "args.h"
#include <stdio.h>
#include <string.h>

void cli_run_info(const cli_args *a, const char *data_name, size_t data_tokens, uint64_t step,
                  uint64_t batch, rm_run_info *r) {
    rm_run_info_default(r);
    snprintf(r->model, sizeof r->model, "%s", a->model);
    r->layers = a->layers, r->dim = a->dim, r->heads = a->heads;
    r->ffn_dim = a->ffn_dim, r->enc_layers = a->enc_layers, r->dec_layers = a->dec_layers;
    r->kv_heads = a->kv_heads, r->rope_theta = a->rope_theta, r->norm_eps = a->norm_eps;
    r->tie_embeddings = a->tie_embeddings;
    r->n_widths = a->n_widths;
    memcpy(r->widths, a->widths, sizeof r->widths);
    r->batchnorm = a->batchnorm;
    r->context = a->context, r->vocab = a->vocab, r->batch = a->batch;
    r->dropout = a->dropout;
    snprintf(r->data, sizeof r->data, "%s", data_name);
    r->token_bytes = a->token_bytes;
    r->data_tokens = data_tokens;
    r->val_fraction = a->val_fraction;
    r->sampler = strcmp(a->sampler, "sequential") == 0 ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
    r->seed = a->seed;
    r->step = step;
    r->data_position = batch;
    r->optim.kind = strcmp(a->optimizer, "sgd") == 0 ? RM_OPTIM_SGD : RM_OPTIM_ADAMW;
    r->optim.weight_decay = a->weight_decay;
    r->optim.beta1 = a->beta1, r->optim.beta2 = a->beta2, r->optim.eps = a->adam_eps;
    r->optim.grad_clip = a->grad_clip;
    r->lr.kind = strcmp(a->lr_schedule, "cosine") == 0 ? RM_LR_COSINE : RM_LR_CONSTANT;
    r->lr.lr = a->lr;
    r->lr.warmup = a->warmup;
    r->lr.steps = a->steps;
    snprintf(r->freeze, sizeof r->freeze, "%s", a->freeze ? a->freeze : "");
    snprintf(r->train_only, sizeof r->train_only, "%s", a->train_only ? a->train_only : "");
    r->lora.rank = a->lora_rank;
    r->lora.alpha = a->lora_alpha;
    r->lora.dropout = a->lora_dropout;
    snprintf(r->lora.targets, sizeof r->lora.targets, "%s", a->lora_targets ? a->lora_targets : "");
    rm_parse_precision(a->precision, &r->precision, NULL, 0); /* checked as the flag was read */
}

void cli_precision_note(const cli_args *a) {
    if (!strcmp(a->precision, "bf16") && *rm_bf16_note()) cli_notice("note", "%s", rm_bf16_note());
}

int cli_options(const cli_args *a, const char *budget, rm_options *o) {
    char err[256];
    rm_options_default(o);
    o->threads = a->threads;
    o->seed = a->seed;
    o->verify_recompute = a->verify_recompute;
    o->precision_name = a->precision; /* checked as the flag was read */
    if (rm_parse_strategy(a->checkpoint, &o->strategy, &o->strategy_param, err, sizeof err) != RM_OK)
        return cli_fail(2, "--checkpoint: %s", err);
    if (budget && rm_parse_size(budget, &o->budget_bytes, &o->budget_fraction, err, sizeof err) != RM_OK)
        return cli_fail(2, "--memory-budget: %s", err);
    return cli_paging_options(a, o);
}

/* --page activations,moments,params (or all): what to page whatever the
 * plan would choose; 0 for none given. -1: not a list of those; -2: refused
 * by the rule of every list (cli_parse_set, which said why). */
static int parse_page(const char *v) {
    int flags = 0;
    cli_list l;
    if (!cli_parse_set("--page", v, 4, "activations,moments", &l)) return -2; /* said why */
    for (int i = 0; i < l.n; i++) {
        const char *w = l.item[i];
        if (!strcmp(w, "activations")) flags |= RM_PAGE_ACTIVATIONS;
        else if (!strcmp(w, "moments")) flags |= RM_PAGE_MOMENTS;
        else if (!strcmp(w, "params")) flags |= RM_PAGE_PARAMS | RM_PAGE_MOMENTS;
        else if (!strcmp(w, "all")) flags |= RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS;
        else return -1;
    }
    return flags ? flags : -1;
}

int cli_check_scratch(const char *dir) {
    if (dir && !*dir) return cli_fail(2, "--scratch needs a folder name (a directory on a disk to page to), got ''");
    if (dir && strlen(dir) > RM_SCRATCH_DIR_MAX)
        return cli_fail(2, "--scratch: the folder's name is %zu bytes long; the limit is %d (give a shorter path to "
                        "it, or a link)", strlen(dir), RM_SCRATCH_DIR_MAX);
    return 0;
}

int cli_parse_bandwidth(const char *s, double *bps) {
    char bw[64], err[256];
    int64_t bytes = 0;
    double frac = 0;
    *bps = 0;
    if (!strcmp(s, "measure")) return 0; /* the probe, even on --resume */
    snprintf(bw, sizeof bw, "%s", s);
    size_t n = strlen(bw);
    if (n > 2 && !strcmp(bw + n - 2, "/s")) bw[n - 2] = 0;
    if (strlen(s) >= sizeof bw || rm_parse_size(bw, &bytes, &frac, err, sizeof err) != RM_OK || frac > 0 || bytes <= 0)
        return cli_fail(2, "--scratch-bandwidth '%s': give bytes per second, e.g. 2GB/s or 500MB, or 'measure'", s);
    *bps = (double)bytes;
    return 0;
}

int cli_paging_options(const cli_args *a, rm_options *o) {
    if (!a->scratch && (a->scratch_bandwidth || a->page))
        return cli_fail(2, "%s needs --scratch DIR (a directory on a disk to page to)",
                        a->page ? "--page" : "--scratch-bandwidth");
    if (cli_check_scratch(a->scratch)) return 2;
    if (a->scratch && !a->memory_limit && !a->memory_budget && !a->page && !a->quiet && cli_dist_rank() == 0 &&
        a->command && !strcmp(a->command, "train")) /* (plan --sweep plans budgets) */
        cli_notice("note", "--scratch pages what a --memory-limit or --memory-budget needs paged (or what "
                   "--page names); with neither, nothing is paged");
    o->scratch_dir = a->scratch;
    if (a->scratch_bandwidth && cli_parse_bandwidth(a->scratch_bandwidth, &o->scratch_bandwidth)) return 2;
    if (a->page && (o->page = parse_page(a->page)) == -2) return 2;
    if (a->page && o->page < 0)
        return cli_fail(2, "--page '%s': a comma-separated list of activations, moments, params (or all)", a->page);
    if ((o->page & (RM_PAGE_MOMENTS | RM_PAGE_PARAMS)) && !a->fuse_optimizer)
        return cli_fail(2, "--page %s: the training state is paged through the fused optimizer: add --fuse-optimizer "
                        "--grad-clip 0", a->page);
    return 0;
}

rm_status cli_build_model(const cli_args *a, rm_graph *g, rm_model_io *io, int keep_logits) {
    rm_run_info r;
    cli_run_info(a, "", 0, 0, 0, &r);
    return rm_run_build(&r, g, io, keep_logits);
}
