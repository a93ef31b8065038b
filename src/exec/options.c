/* options.c: the options a session keeps. The string forms a command line
 * gives ("segments:4", "1.5GiB", "50%") are parsed into the typed fields of
 * rm_options; then the session writes the canonical strings the planner
 * reads into its own buffers, so it never keeps a pointer of the caller. */
#include "exec/exec.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const strategy_names[] = {"none", "blocks", "segments", "sqrt", "selective", "revolve"};
#define N_STRATEGIES ((int)(sizeof strategy_names / sizeof *strategy_names))

static int takes_param(rm_strategy s) { return s == RM_STRATEGY_SEGMENTS || s == RM_STRATEGY_REVOLVE; }

/* The optimizer's defaults are options' too (rm_options.optim), so they
 * live here, below train/optim.c, which reads them. */
void rm_optim_config_default(rm_optim_config *c) {
    if (!c) return;
    c->kind = RM_OPTIM_ADAMW;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
}

void rm_options_default(rm_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->threads = 0;
    o->seed = 1337;
    o->strategy = RM_STRATEGY_NONE;
    rm_optim_config_default(&o->optim);
}

rm_status rm_parse_strategy(const char *s, rm_strategy *out, int *param, char *err, size_t errlen) {
    if (!s || !out || !param) {
        if (err && errlen) snprintf(err, errlen, "rm_parse_strategy: s, out and param must not be NULL");
        return RM_ERR_ARG;
    }
    for (int i = 0; i < N_STRATEGIES; i++) {
        size_t n = strlen(strategy_names[i]);
        if (strncmp(s, strategy_names[i], n) != 0) continue;
        if (!takes_param((rm_strategy)i) && s[n] == '\0') {
            *out = (rm_strategy)i, *param = 0;
            return RM_OK;
        }
        if (takes_param((rm_strategy)i) && s[n] == ':') {
            char *end;
            errno = 0;
            long v = isdigit((unsigned char)s[n + 1]) ? strtol(s + n + 1, &end, 10) : 0; /* no sign, no space */
            if (v && end != s + n + 1 && !*end && !errno && v >= 1 && v <= 1000000) {
                *out = (rm_strategy)i, *param = (int)v;
                return RM_OK;
            }
            if (err && errlen) snprintf(err, errlen, "recompute strategy '%.40s': %s needs a whole number from 1 "
                                        "to 1000000 after the colon", s, strategy_names[i]);
            return RM_ERR_ARG;
        }
    }
    for (int i = 0; i < N_STRATEGIES; i++)
        if (takes_param((rm_strategy)i) && !strcmp(s, strategy_names[i])) {
            if (err && errlen) snprintf(err, errlen, "recompute strategy '%s' needs a count after a colon: %s:%s "
                                        "(e.g. %s:4)", s, s, i == RM_STRATEGY_SEGMENTS ? "K" : "S", s);
            return RM_ERR_ARG;
        }
    if (err && errlen)
        snprintf(err, errlen, "unknown recompute strategy '%.40s' (try none, blocks, segments:K, sqrt, selective, "
                 "revolve:S)", s);
    return RM_ERR_ARG;
}

int rm_strategy_name(rm_strategy s, int param, char *out, size_t cap) {
    if (!out || cap == 0 || (int)s < 0 || (int)s >= N_STRATEGIES) return 0;
    int n = takes_param(s) ? snprintf(out, cap, "%s:%d", strategy_names[s], param)
                           : snprintf(out, cap, "%s", strategy_names[s]);
    return n > 0 && (size_t)n < cap;
}

rm_status rm_parse_precision(const char *s, rm_precision *out, char *err, size_t errlen) {
    if (s && out && (!strcmp(s, "fp32") || !strcmp(s, "bf16"))) {
        *out = s[0] == 'b' ? RM_PRECISION_BF16 : RM_PRECISION_FP32;
        return RM_OK;
    }
    if (err && errlen) snprintf(err, errlen, "unknown precision '%.40s' (try fp32 or bf16)", s ? s : "(null)");
    return RM_ERR_ARG;
}

const char *rm_precision_name(rm_precision p) {
    return p == RM_PRECISION_FP32 ? "fp32" : p == RM_PRECISION_BF16 ? "bf16" : "?";
}

rm_status rm_parse_size(const char *s, int64_t *bytes, double *fraction, char *err, size_t errlen) {
    double v;
    int percent;
    if (!s || !bytes || !fraction || rm_parse_bytes(s, &v, &percent) != RM_OK) {
        char *pe;
        double pv = s ? strtod(s, &pe) : 0;
        if (s && pe != s && pv > 100 && !strcmp(pe, "%")) {
            if (err && errlen) snprintf(err, errlen, "'%.40s' is more than all of store-all: a share is at most 100%%", s);
            return RM_ERR_ARG;
        }
        const int blank = s && *s && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[strlen(s) - 1]));
        if (err && errlen)
            snprintf(err, errlen, "'%.40s' is not a size%s: use e.g. 64MiB, 1.5GiB, 500MB, 123456 (bytes) or 50%% "
                     "(of store-all)", s ? s : "(null)", blank ? " (white space around it: remove it)" : "");
        return RM_ERR_ARG;
    }
    if (!percent && !(v <= (double)RM_MAX_BUDGET_BYTES)) {
        if (err && errlen) snprintf(err, errlen, "size '%.40s' is too large: at most 2^60 bytes (1EiB, 1073741824GiB)", s);
        return RM_ERR_ARG;
    }
    /* "0.5" is ambiguous (half of store-all, or half a byte?), and anything
     * under one byte would be no size at all: refused, with what works */
    char *end;
    double bare = strtod(s, &end);
    while (*end == ' ') end++;
    if (!percent && v < 1.0) {
        if (err && errlen) {
            if (!*end && bare < 1.0)
                snprintf(err, errlen, "'%.40s' is less than one byte: for a share of store-all write %g%%, for bytes a "
                         "whole number or a unit (e.g. 64MiB)", s, 100.0 * bare);
            else snprintf(err, errlen, "'%.40s' is less than one byte: give at least 1 (e.g. 64MiB, 500MB)", s);
        }
        return RM_ERR_ARG;
    }
    if (!percent && bare != floor(bare) && (!*end || !strcmp(end, "B"))) { /* 1.5 bytes: 1 or 2? */
        if (err && errlen) snprintf(err, errlen, "'%.40s' is not a whole number of bytes: give %.0f or %.0f, or a "
                                    "unit (e.g. %gKiB)", s, floor(bare), ceil(bare), bare);
        return RM_ERR_ARG;
    }
    *bytes = percent ? 0 : (int64_t)v; /* with a unit: whole bytes, rounded down */
    *fraction = percent ? v / 100.0 : 0.0;
    return RM_OK;
}

/* Fills s->opt from o (NULL: defaults): RM_ERR_ARG on the graph, naming the
 * field, when a field is out of range or a string does not parse. */
rm_status rm_session_options(rm_session *s, const rm_options *o) {
    rm_graph *g = s->g;
    char err[200];
    if (o) s->opt = *o;
    else rm_options_default(&s->opt);
    rm_options *p = &s->opt;
    if (p->checkpoint && rm_parse_strategy(p->checkpoint, &p->strategy, &p->strategy_param, err, sizeof err) != RM_OK)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.checkpoint: %s", err);
    if (p->precision_name && rm_parse_precision(p->precision_name, &p->precision, err, sizeof err) != RM_OK)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.precision_name: %s", err);
    if (p->precision != RM_PRECISION_FP32 && p->precision != RM_PRECISION_BF16)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.precision %d is not a precision (RM_PRECISION_FP32 "
                             "or RM_PRECISION_BF16)", (int)p->precision);
    p->precision_name = rm_precision_name(p->precision); /* a string of the library's own */
    if (p->memory_budget && rm_parse_size(p->memory_budget, &p->budget_bytes, &p->budget_fraction, err, sizeof err))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.memory_budget: %s", err);
    double frac = 0;
    if (p->memory_limit && (rm_parse_size(p->memory_limit, &p->limit_bytes, &frac, err, sizeof err) != RM_OK || frac > 0))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.memory_limit '%.40s' is not a size in bytes: give "
                             "one like 2GiB or 500MB (a limit is not a percentage)", p->memory_limit);
    if (p->limit_bytes < 0)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.limit_bytes %lld is negative (0: no limit)",
                             (long long)p->limit_bytes);
    if (!rm_strategy_name(p->strategy, p->strategy_param, s->strategy_name, sizeof s->strategy_name) ||
        (takes_param(p->strategy) && p->strategy_param < 1))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.strategy %d with strategy_param %d is not a "
                             "strategy (segments and revolve need a parameter >= 1)", (int)p->strategy,
                             p->strategy_param);
    if (p->budget_bytes < 0 || !(p->budget_fraction >= 0.0 && p->budget_fraction <= 1.0) ||
        (p->budget_bytes > 0 && p->budget_fraction > 0))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: give rm_options.budget_bytes (> 0) or budget_fraction "
                             "(in (0, 1]), not both (got %lld and %g)", (long long)p->budget_bytes,
                             p->budget_fraction);
    int budget = p->budget_bytes > 0 || p->budget_fraction > 0;
    if (budget && p->strategy != RM_STRATEGY_NONE)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.strategy '%s' and a memory budget exclude each "
                             "other: a budget plans the strategy itself", s->strategy_name);
    if (p->fuse_optimizer && !(p->optim.grad_clip == 0.0f))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.fuse_optimizer cannot clip by the global "
                             "gradient norm (it needs every gradient before the first update, and fused updates "
                             "start during the backward pass): set optim.grad_clip to 0 (it is %g)",
                             (double)p->optim.grad_clip);
    if (p->fuse_optimizer && p->accumulate)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.fuse_optimizer frees each gradient at its "
                             "update, so it cannot accumulate micro-batches (rm_options.accumulate): set one of them");
    if ((p->page & ~(RM_PAGE_ACTIVATIONS | RM_PAGE_MOMENTS | RM_PAGE_PARAMS)) || (p->page && !p->scratch_dir))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.page %d: %s", p->page, p->scratch_dir ? "not a "
                             "combination of RM_PAGE_ACTIVATIONS, RM_PAGE_MOMENTS and RM_PAGE_PARAMS" : "paging needs "
                             "a scratch directory (rm_options.scratch_dir)");
    if ((p->page & (RM_PAGE_MOMENTS | RM_PAGE_PARAMS)) && !p->fuse_optimizer)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.page: the training state is paged through the "
                             "fused optimizer's updates: set rm_options.fuse_optimizer too");
    if (!(p->scratch_bandwidth >= 0 && p->scratch_bandwidth < 1e15))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.scratch_bandwidth %g is not a bandwidth in "
                             "bytes/s (0: measure it)", p->scratch_bandwidth);
    if (!(p->scratch_read_bandwidth >= 0 && p->scratch_read_bandwidth < 1e15) ||
        (p->scratch_read_bandwidth > 0 && !(p->scratch_bandwidth > 0)))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.scratch_read_bandwidth %g is not a bandwidth in "
                             "bytes/s, or is given without scratch_bandwidth (0: as scratch_bandwidth)",
                             p->scratch_read_bandwidth);
    _Static_assert(RM_SCRATCH_DIR_MAX < sizeof s->page.dir, "rm_session.page.dir holds RM_SCRATCH_DIR_MAX bytes");
    if (p->scratch_dir && (!*p->scratch_dir || strlen(p->scratch_dir) > RM_SCRATCH_DIR_MAX))
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: rm_options.scratch_dir is %s", *p->scratch_dir
                             ? "too long (at most RM_SCRATCH_DIR_MAX, 511 bytes)" : "empty (NULL: no paging)");
    if (p->scratch_dir) snprintf(s->page.dir, sizeof s->page.dir, "%s", p->scratch_dir);
    if (p->budget_bytes > 0) snprintf(s->budget_name, sizeof s->budget_name, "%lld", (long long)p->budget_bytes);
    else if (budget) snprintf(s->budget_name, sizeof s->budget_name, "%.17g%%", 100.0 * p->budget_fraction);
    /* from here on, only the session's own strings */
    p->checkpoint = s->strategy_name;
    p->memory_budget = budget ? s->budget_name : NULL;
    p->memory_limit = NULL;
    p->scratch_dir = p->scratch_dir ? s->page.dir : NULL;
    return RM_OK;
}
