/* limit.c: --memory-limit SIZE bounds the peak RSS of the whole process.
 *
 *   limit = start-up RSS + margin + libremat's own bytes
 *
 * The start-up RSS is measured (VmRSS) right before the session is compiled:
 * the program, its libraries, the embedded corpus, the data and the graph
 * are resident by then. The margin is stated, not measured: the buffers
 * OpenBLAS and OpenMP allocate on their first call, thread stacks, stdio,
 * the per-step time arrays. The rest goes to the library
 * (rm_options.limit_bytes), which subtracts the training state and plans
 * recomputation so the activation arena fits what is left. */
#include "limit.h"
#include <stdio.h>
#include <string.h>

/* 8 MiB, and 1 MiB per thread beyond the first (OpenBLAS packs per thread):
 * measured 5.2 MiB over the start-up and the library at 2 threads; with
 * several ranks, MPI's scratch for the gradients' sums too */
static int64_t margin_bytes(int threads, int ranks) {
    return ((int64_t)8 << 20) + ((int64_t)(threads - 1) << 20) + (ranks > 1 ? RM_DIST_SCRATCH_BYTES : 0);
}

static double mib(int64_t b) { return (double)b / 1048576.0; }

int64_t cli_rss_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    size_t n = strlen(field);
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%lld", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

int cli_limit_options(const cli_args *a, rm_options *o, cli_limit *l) {
    memset(l, 0, sizeof *l);
    if (!a->memory_limit) return 0;
    char err[256] = "";
    double frac = 0;
    /* the size parser's own message may suggest a percentage, which a limit is not */
    rm_status st = rm_parse_size(a->memory_limit, &l->limit, &frac, err, sizeof err);
    if (st != RM_OK && strstr(err, "too large")) return cli_fail(2, "--memory-limit: %s", err);
    if (st != RM_OK || frac > 0 || l->limit <= 0)
        return cli_fail(2, "--memory-limit: '%s' is not a size in bytes: give the process's peak RSS like 2GiB or "
                        "500MB (a limit is not a percentage)", a->memory_limit);
    l->startup = cli_rss_bytes("VmRSS");
    if (l->startup < 0)
        return cli_fail(1, "--memory-limit needs /proc/self/status (Linux) to measure the process's memory");
    l->margin = margin_bytes(a->threads > 0 ? a->threads : rm_default_threads(), cli_dist_size());
    char lim[RM_MIB_TEXT], held[RM_MIB_TEXT]; /* the two compared: bytes where rounding hides it */
    rm_mib_pair(l->limit, l->startup + l->margin, lim, held, sizeof lim);
    if (l->startup + l->margin >= l->limit)
        return cli_fail(1, "--memory-limit %s: the process holds %.2f MiB before training (libraries, data, "
                        "the graph) and %.2f MiB of margin is kept for BLAS/OpenMP (and MPI) buffers, leaving nothing for "
                        "the model; raise the limit above %s", lim, mib(l->startup), mib(l->margin), held);
    o->limit_bytes = l->limit - l->startup - l->margin;
    l->scratch = a->scratch != NULL;
    return 0;
}

void cli_limit_print(const cli_limit *l, const rm_session *s, FILE *f) {
    if (!l->limit) return;
    rm_limit_info li;
    rm_limit(s, &li);
    rm_memory_info m;
    rm_memory(s, &m);
    char grads[96];
    if (!li.grad_bytes && li.param_bytes) /* fused: the gradients are arena buffers */
        snprintf(grads, sizeof grads, "gradients 0 (fused: %.2f MiB of the arena at its peak)",
                 mib((int64_t)m.grad_arena_bytes));
    else snprintf(grads, sizeof grads, "gradients %.2f", mib((int64_t)li.grad_bytes));
    fprintf(f, "memory limit %.2f MiB: start-up %.2f + margin %.2f + parameters %.2f + %s + optimizer "
            "%.2f + inputs %.2f + library margin %.2f MiB; activations %.2f MiB of arena in the %.2f MiB left\n",
            mib(l->limit), mib(l->startup), mib(l->margin), mib((int64_t)li.param_bytes), grads,
            mib((int64_t)li.optimizer_bytes), mib((int64_t)li.input_bytes), mib((int64_t)li.margin_bytes),
            mib((int64_t)li.arena_bytes), mib((int64_t)li.activation_bytes));
}

/* The start-up RSS of the next run differs from this one's by tens to
 * hundreds of KiB (lazy binding, the allocator's first arenas; a busy machine
 * pages in more; once 0.54 MiB in CI): the least limit named for a rerun
 * allows 2% of it, at least 1 MiB, so that it works. */
static double startup_jitter_mib(const cli_limit *l) {
    double j = 0.02 * mib(l->startup);
    return j > 1.0 ? j : 1.0;
}

int cli_limit_refused(const cli_limit *l, const char *msg) {
    /* the library words its least limit in its own bytes; the process's
     * least limit adds the start-up RSS and the margin */
    const char *key = "the least limit that works is ";
    const char *at = strstr(msg, key);
    double least;
    if (!at || sscanf(at + strlen(key), "%lf", &least) != 1)
        return cli_fail(1, "--memory-limit %.2f MiB (start-up %.2f + margin %.2f MiB): %s", mib(l->limit),
                        mib(l->startup), mib(l->margin), msg);
    /* and with a scratch directory (issue 20), when the library names it */
    const char *pkey = "paging the training state) it is ", *fkey = "with the fused optimizer and a scratch "
                                                                         "directory it is ";
    const char *pat = strstr(msg, pkey), *fat = strstr(msg, fkey);
    double paged = 0, fused = 0;
    char with[400] = "";
    size_t k = 0;
    if (pat && sscanf(pat + strlen(pkey), "%lf", &paged) == 1 && paged > 0)
        k = (size_t)snprintf(with, sizeof with, "; with --scratch DIR (paging the training state to a disk) it is "
                             "%.2fMiB", mib(l->startup + l->margin) + paged + startup_jitter_mib(l));
    /* unfused: the trainable state pages only with --fuse-optimizer --grad-clip 0 (issue 28) */
    if (fat && sscanf(fat + strlen(fkey), "%lf", &fused) == 1 && fused > 0)
        snprintf(with + k, sizeof with - k, "; %s--scratch DIR pages the trainable state only with --fuse-optimizer "
                 "--grad-clip 0, and with them it is %.2fMiB", l->scratch ? "the --scratch given pages activations "
                 "and frozen weights only: " : "", mib(l->startup + l->margin) + fused + startup_jitter_mib(l));
    return cli_fail(1, "--memory-limit %.2f MiB: start-up %.2f + margin %.2f MiB, then remat's own %s; "
                    "the least --memory-limit that works is %.2fMiB%s", mib(l->limit), mib(l->startup),
                    mib(l->margin), msg, mib(l->startup + l->margin) + least + startup_jitter_mib(l), with);
}
