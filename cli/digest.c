/* digest.c: the configuration every rank of `mpirun -np P remat train`
 * must share, as (flag, value) text for cli_dist_check_config (dist.c).
 * Ranks that run different command lines (MPMD, a typo in a script) used
 * to spin forever (another --steps, --shard-optimizer or --fuse-optimizer:
 * one rank waits in a collective the others never reach) or train silently
 * apart (another --lr, --seed, --data or --save). The effective values are
 * compared, after --resume filled flags from its file: paths by their
 * canonical names (data.txt and ./data.txt are one file), and what the
 * files hold by their contents, since one name may hold other bytes on
 * another node: the data by a digest of its tokens, a --resume or --init
 * file by its checksum (remat_checksum) and step, else its size and a
 * digest of sampled bytes. Left out: --threads (each node its own cores),
 * --quiet and --print-plan (what rank 0 prints). */
#include "args.h"
#include "paths.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct items {
    cli_config_item *it;
    int n, cap;
} items;

static void put_s(items *l, const char *name, const char *v) {
    if (l->n >= l->cap) return;
    l->it[l->n].name = name;
    snprintf(l->it[l->n++].value, sizeof l->it[0].value, "%s", v ? v : "(none)");
}

/* A path by its canonical name (as given when it has none). */
static void put_path(items *l, const char *name, const char *path) {
    char canon[PATH_MAX];
    put_s(l, name, path && cli_canonical(path, canon, sizeof canon) ? canon : path);
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

/* FNV-1a over 64-bit words in four lanes (memory speed), then the tail
 * bytes: equal bytes, equal digests. */
static uint64_t digest_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h[4] = {1469598103934665603ull, 0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * k, 8);
            h[k] = (h[k] ^ w) * 1099511628211ull;
        }
    uint64_t d = h[0] ^ (h[1] * 3) ^ (h[2] * 5) ^ (h[3] * 7);
    for (; i < n; i++) d = (d ^ b[i]) * 1099511628211ull;
    return d ^ n;
}

void cli_data_identity(const rm_dataset *d, const rm_pairs *p, char *out, size_t cap) {
    if (p && p->n) { /* the file up to the end of its last target */
        size_t end = p->off[4 * (p->n - 1) + 2] + p->off[4 * (p->n - 1) + 3];
        snprintf(out, cap, "%zu pairs, digest %016llx", p->n, (unsigned long long)digest_bytes(p->buf, end));
    }
    else if (d && d->tokens)
        snprintf(out, cap, "%zu tokens, digest %016llx", d->n,
                 (unsigned long long)digest_bytes(d->tokens, d->n * sizeof *d->tokens));
    else snprintf(out, cap, "(none)");
}

void cli_file_identity(const char *path, const rm_file *f, char *out, size_t cap) {
    if (!path) {
        snprintf(out, cap, "(none)");
        return;
    }
    const char *sum = f ? rm_file_meta(f, "remat_checksum") : NULL, *step = f ? rm_file_meta(f, "step") : NULL;
    if (sum) {
        snprintf(out, cap, "%s, step %s", sum, step ? step : "?");
        return;
    }
    /* no checksum (a file of another program): its size and 64 samples of 4 KiB */
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    uint64_t h = 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        unsigned char buf[4096];
        for (int k = 0; k < 64; k++) {
            off_t at = (off_t)((double)st.st_size * k / 64);
            ssize_t got = pread(fd, buf, sizeof buf, at);
            h = h * 1099511628211ull ^ digest_bytes(buf, got > 0 ? (size_t)got : 0);
        }
        snprintf(out, cap, "%lld bytes, sampled digest %016llx", (long long)st.st_size, (unsigned long long)h);
    } else snprintf(out, cap, "(cannot be read)");
    if (fd >= 0) close(fd);
}

int cli_config_items(const cli_args *a, const cli_run_identity *id, cli_config_item *it, int cap) {
    items l = {it, 0, cap};
    char betas[64];
    snprintf(betas, sizeof betas, "%.9g,%.9g", (double)a->beta1, (double)a->beta2); /* exact: only compared */
    put_model(&l, a);
    put_path(&l, "--data", a->data ? a->data : "(the built-in data)");
    put_s(&l, "the data (its contents)", id->data);
    put_i(&l, "--token-bytes", a->token_bytes);
    put_f(&l, "--val-fraction", a->val_fraction), put_s(&l, "--sampler", a->sampler);
    put_i(&l, "--steps", a->steps), put_i(&l, "--eval-every", a->eval_every), put_i(&l, "--warmup", a->warmup);
    put_i(&l, "--seed", (long long)a->seed), put_s(&l, "--optimizer", a->optimizer), put_f(&l, "--lr", a->lr);
    put_f(&l, "--weight-decay", a->weight_decay), put_s(&l, "--adam-betas", betas);
    put_f(&l, "--adam-eps", a->adam_eps), put_f(&l, "--grad-clip", a->grad_clip);
    put_s(&l, "--lr-schedule", a->lr_schedule), put_s(&l, "--checkpoint", a->checkpoint);
    put_s(&l, "--precision", a->precision);
    put_s(&l, "--memory-budget", a->memory_budget), put_s(&l, "--memory-limit", a->memory_limit);
    put_path(&l, "--init", a->init), put_s(&l, "the --init file (its contents)", id->init);
    put_path(&l, "--resume", a->resume), put_s(&l, "the --resume file (its contents)", id->resume);
    put_path(&l, "--save", a->save);
    put_i(&l, "--save-every", a->save_every), put_i(&l, "--keep", a->keep), put_path(&l, "--report", a->report);
    put_path(&l, "--trace", a->trace), put_i(&l, "--trace-step", a->trace_step);
    put_i(&l, "--micro-batches", a->micro_batches), put_i(&l, "--verify-recompute", a->verify_recompute);
    put_i(&l, "--shard-optimizer", a->shard_optimizer), put_i(&l, "--no-overlap", a->no_overlap);
    put_i(&l, "--fuse-optimizer", a->fuse_optimizer);
    put_s(&l, "--freeze", a->freeze), put_s(&l, "--train-only", a->train_only), put_i(&l, "--lora", a->lora_rank);
    put_f(&l, "--lora-alpha", a->lora_alpha), put_f(&l, "--lora-dropout", a->lora_dropout);
    put_s(&l, "--lora-targets", a->lora_targets), put_path(&l, "--save-adapters", a->save_adapters);
    put_i(&l, "--allow-output-in-model-folder", a->new_in_model_folder);
    /* paging changes what the ranks broadcast at the start (a paged parameter stays in its file): each rank
     * may page to its own DIR, but all or none page, and forced paging is the same */
    put_i(&l, "--scratch (given)", a->scratch != NULL), put_s(&l, "--page", a->page);
    put_s(&l, "--scratch-bandwidth", a->scratch_bandwidth);
    return l.n;
}
