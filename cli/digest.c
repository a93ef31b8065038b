/* digest.c: the configuration every rank of `mpirun -np P remat train`
 * must share, as (flag, value) text for cli_dist_check_config (dist.c).
 * Ranks that run different command lines (MPMD, a typo in a script) used
 * to spin forever (another --steps, --shard-optimizer or --fuse-optimizer:
 * one rank waits in a collective the others never reach) or train silently
 * apart (another --lr, --seed, --data or --save). The effective values are
 * compared, after --resume filled flags from its file. Left out: --threads
 * (each node its own cores), --quiet and --print-plan (what rank 0 prints). */
#include "args.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct items {
    cli_config_item *it;
    int n, cap;
} items;

static void put_s(items *l, const char *name, const char *v) {
    if (l->n >= l->cap) return;
    l->it[l->n].name = name;
    snprintf(l->it[l->n++].value, sizeof l->it[0].value, "%s", v ? v : "(none)");
}

static void put_i(items *l, const char *name, long long v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    put_s(l, name, b);
}

/* A float flag as its shortest text that reads back the same float. */
static void put_f(items *l, const char *name, float v) {
    char b[48];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(b, sizeof b, "%.*g", digits, (double)v);
        if (strtof(b, NULL) == v) break;
    }
    put_s(l, name, b);
}

static void put_model(items *l, const cli_args *a) {
    char w[1400] = "";
    size_t k = 0;
    for (int i = 0; i < a->n_widths && k < sizeof w; i++) k += (size_t)snprintf(w + k, sizeof w - k, "%s%d", i ? "," : "", a->widths[i]);
    put_s(l, "--model", a->model);
    put_i(l, "--layers", a->layers), put_i(l, "--dim", a->dim), put_i(l, "--heads", a->heads);
    put_i(l, "--context", a->context), put_i(l, "--vocab", a->vocab), put_i(l, "--batch", a->batch);
    put_i(l, "--ffn-dim", a->ffn_dim), put_i(l, "--enc-layers", a->enc_layers), put_i(l, "--dec-layers", a->dec_layers);
    put_s(l, "--widths", w), put_i(l, "--batchnorm", a->batchnorm), put_f(l, "--dropout", a->dropout);
    put_i(l, "--kv-heads", a->kv_heads), put_f(l, "--rope-theta", a->rope_theta), put_f(l, "--norm-eps", a->norm_eps);
    put_i(l, "--tie-embeddings", a->tie_embeddings), put_s(l, "--frozen-dtype", a->frozen_dtype);
}

int cli_config_items(const cli_args *a, size_t data_tokens, cli_config_item *it, int cap) {
    items l = {it, 0, cap};
    char betas[64];
    snprintf(betas, sizeof betas, "%.9g,%.9g", (double)a->beta1, (double)a->beta2); /* exact: only compared */
    put_model(&l, a);
    put_s(&l, "--data", a->data ? a->data : "(the built-in data)");
    put_i(&l, "the data's size (tokens or pairs)", (long long)data_tokens);
    put_i(&l, "--token-bytes", a->token_bytes);
    put_f(&l, "--val-fraction", a->val_fraction), put_s(&l, "--sampler", a->sampler);
    put_i(&l, "--steps", a->steps), put_i(&l, "--eval-every", a->eval_every), put_i(&l, "--warmup", a->warmup);
    put_i(&l, "--seed", (long long)a->seed), put_s(&l, "--optimizer", a->optimizer), put_f(&l, "--lr", a->lr);
    put_f(&l, "--weight-decay", a->weight_decay), put_s(&l, "--adam-betas", betas);
    put_f(&l, "--adam-eps", a->adam_eps), put_f(&l, "--grad-clip", a->grad_clip);
    put_s(&l, "--lr-schedule", a->lr_schedule), put_s(&l, "--checkpoint", a->checkpoint);
    put_s(&l, "--memory-budget", a->memory_budget), put_s(&l, "--memory-limit", a->memory_limit);
    put_s(&l, "--init", a->init), put_s(&l, "--resume", a->resume), put_s(&l, "--save", a->save);
    put_i(&l, "--save-every", a->save_every), put_i(&l, "--keep", a->keep), put_s(&l, "--report", a->report);
    put_s(&l, "--trace", a->trace), put_i(&l, "--trace-step", a->trace_step);
    put_i(&l, "--micro-batches", a->micro_batches), put_i(&l, "--verify-recompute", a->verify_recompute);
    put_i(&l, "--shard-optimizer", a->shard_optimizer), put_i(&l, "--no-overlap", a->no_overlap);
    put_i(&l, "--fuse-optimizer", a->fuse_optimizer);
    put_s(&l, "--freeze", a->freeze), put_s(&l, "--train-only", a->train_only), put_i(&l, "--lora", a->lora_rank);
    put_f(&l, "--lora-alpha", a->lora_alpha), put_f(&l, "--lora-dropout", a->lora_dropout);
    put_s(&l, "--lora-targets", a->lora_targets), put_s(&l, "--save-adapters", a->save_adapters);
    return l.n;
}
