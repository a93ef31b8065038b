/* limit.c: rm_options.limit_bytes, a limit on the session's own bytes.
 *
 *   limit = parameters + gradients + optimizer + inputs + margin + arena
 *
 * Everything but the arena is fixed by the model and the optimizer; the
 * arena is what recomputation can shrink. So the session subtracts the
 * fixed part and plans (through the memory-budget path, exec/budget.c) the
 * fastest schedule whose arena fits the rest. When even the least arena the
 * planner knows does not fit, it refuses before allocating anything, with
 * the breakdown and the least limit that would work. Under a fused
 * optimizer the gradients are arena buffers: they leave the fixed part and
 * the planner fits them into the arena with the activations. */
#include "exec/exec.h"
#include "plan/rotor/rotor.h"
#include <stdio.h>
#include <string.h>

/* The session's own small tables (programs, profiles, optimizer partial
 * sums): a stated margin, not a measurement. */
#define LIMIT_MARGIN_BYTES ((size_t)1 << 20)

static double mib(double b) { return b / 1048576.0; }

/* The fixed part of the limit, into s->limit. */
static size_t fixed_bytes(rm_session *s) {
    rm_limit_info *l = &s->limit;
    const rm_graph *g = s->g;
    l->limit_bytes = (size_t)s->opt.limit_bytes;
    const size_t all = g->param_floats * sizeof(float);
    /* gradients and moments: trainable parameters only (frozen ones have none) */
    const size_t train_bytes = g->train_floats * sizeof(float);
    const size_t state_bytes = (g->state_end - g->train_floats) * sizeof(float);
    /* the training state the plan pages to the scratch file is not held */
    size_t paged_params, paged_moments;
    rm_session_paged_bytes(s, &paged_params, &paged_moments);
    const int adamw = s->opt.optim.kind == RM_OPTIM_ADAMW;
    l->param_bytes = all - paged_params;
    l->paged_bytes = paged_params + (adamw ? 2 * paged_moments : 0);
    /* fused: in the arena; accumulating micro-batches: a second buffer */
    l->grad_bytes = s->opt.fuse_optimizer ? 0 : train_bytes * (s->opt.accumulate ? 2 : 1);
    /* AdamW's two moments; a profiling step (planned schedules) copies the
     * state (running statistics) before the optimizer exists: the larger */
    size_t moments = adamw ? 2 * (train_bytes - paged_moments) : 0;
    l->optimizer_bytes = moments > state_bytes || s->opt.strategy != RM_STRATEGY_NONE ? moments : state_bytes;
    l->input_bytes = g->input_bytes;
    l->margin_bytes = LIMIT_MARGIN_BYTES;
    return l->param_bytes + l->grad_bytes + l->optimizer_bytes + l->input_bytes + l->margin_bytes;
}

/* RM_ERR_BUDGET with the breakdown; `need`: the least arena that works. */
static size_t fixed_bytes(rm_session *s);

static rm_status refuse(rm_session *s, size_t fixed, size_t need, const char *why) {
    const rm_limit_info *l = &s->limit;
    /* and the least limit with the training state paged to a scratch file;
     * unfused, only activations and frozen parameters page: the trainable
     * state pages through the fused optimizer, so its least limit too */
    char paged[640] = "";
    size_t least_paged = rm_session_least_paged(s, fixed_bytes), k = 0;
    size_t least_fused = rm_session_least_paged_fused(s, fixed_bytes);
    if (least_paged > 0)
        k = (size_t)snprintf(paged, sizeof paged, "; with a scratch directory (paging the training state) it is %.2f "
                             "MiB", mib((double)least_paged) + 0.01);
    if (least_fused > 0 && (!least_paged || least_fused < least_paged))
        snprintf(paged + k, sizeof paged - k, "; unfused, %sthe trainable state (parameters, gradients, moments) "
                 "stays in memory: it pages only through the fused optimizer (updates in the backward pass, no "
                 "gradient clipping), and with the fused optimizer and a scratch directory it is %.2f MiB",
                 s->page.open ? "a scratch directory pages activations and frozen parameters only; " : "",
                 mib((double)least_fused) + 0.01);
    char left[RM_MIB_TEXT], needs[RM_MIB_TEXT]; /* the two compared: bytes where rounding hides it */
    rm_mib_pair(fixed < l->limit_bytes ? (int64_t)(l->limit_bytes - fixed) : 0, (int64_t)need, left, needs,
                sizeof left);
    return rm_graph_fail(s->g, RM_ERR_BUDGET,
                         "memory limit %.2f MiB: parameters %.2f + gradients %.2f%s + optimizer %.2f + inputs %.2f + "
                         "margin %.2f MiB leave %s for activations%s; %s needs %s: the least limit that "
                         "works is %.2f MiB%s",
                         mib((double)l->limit_bytes), mib((double)l->param_bytes), mib((double)l->grad_bytes),
                         s->opt.fuse_optimizer ? " (fused: in the arena)" : "",
                         mib((double)l->optimizer_bytes), mib((double)l->input_bytes), mib((double)l->margin_bytes),
                         left, s->opt.fuse_optimizer ? " and gradients" : "", why, needs,
                         mib((double)(fixed + need)) + 0.01, paged);
}

/* The planner's dynamic-programming table: held while planning, when no
 * arena is. */
static size_t planner_bytes(const rm_graph *g) { return rm_rotor_table_bytes(g->n_stages + 1, 500); }

/* The planner's schedule for `budget` bytes as the train program. */
static rm_status plan_bytes(rm_session *s, int64_t budget) {
    snprintf(s->budget_name, sizeof s->budget_name, "%lld", (long long)budget);
    s->opt.memory_budget = s->budget_name;
    s->opt.checkpoint = "auto";
    return rm_session_budget_program(s, NULL, &s->train);
}

/* With strategy NONE (a fixed strategy is built as usual and checked by
 * rm_session_limit_check). */
rm_status rm_session_limit_program(rm_session *s) {
    /* a scratch file, and the plan to choose what to page: exec/pageplan.c */
    if ((s->page.open || s->page.planning) && !(s->opt.page & (RM_PAGE_MOMENTS | RM_PAGE_PARAMS)) &&
        !s->opt.memory_budget) {
        rm_status rc = rm_session_limit_paging(s, fixed_bytes);
        if (rc != RM_ERR_BUDGET) return rc;
        s->g->status = RM_OK; /* nothing fits, paging or not: the breakdown without paging, and both least limits */
    }
    size_t fixed = fixed_bytes(s);
    int64_t avail = s->opt.limit_bytes > (int64_t)fixed ? s->opt.limit_bytes - (int64_t)fixed : 0;
    s->limit.activation_bytes = (size_t)avail;
    rm_status rc = RM_OK;
    {
        /* a budget given too: its own plan when it is the smaller */
        if (s->opt.memory_budget) {
            if ((rc = rm_session_budget_program(s, NULL, &s->train)) != RM_OK) return rc;
            if (s->budget_bytes > avail) rm_program_free(&s->train);
        }
        /* the planner's table is held while planning, the arena after: the
         * larger of the two must fit (planned first, for the least arena) */
        size_t table = planner_bytes(s->g);
        if (!s->train.n_instrs) rc = plan_bytes(s, avail > 0 ? avail : 1);
        if (rc == RM_ERR_BUDGET || (rc == RM_OK && table > (size_t)avail)) {
            s->g->status = RM_OK; /* the planner's message, replaced by the whole breakdown */
            /* no minimum known (planning stopped early): store-all surely works */
            int64_t least = rc == RM_OK ? (int64_t)s->train.arena_bytes
                          : s->autoplan.min_budget > 0 ? s->autoplan.min_budget : s->autoplan.store_all;
            int big = table > (size_t)least;
            return refuse(s, fixed, big ? table : (size_t)least,
                          big ? "the planner's table" : "the least recompute plan");
        }
        if (rc != RM_OK) return rc;
    }
    s->limit.arena_bytes = s->train.arena_bytes;
    return RM_OK;
}

rm_status rm_session_limit_check(rm_session *s) {
    if (s->opt.limit_bytes <= 0) return RM_OK;
    size_t fixed = fixed_bytes(s);
    s->limit.activation_bytes = s->opt.limit_bytes > (int64_t)fixed ? (size_t)(s->opt.limit_bytes - (int64_t)fixed) : 0;
    s->limit.arena_bytes = s->arena_bytes;
    if (s->arena_bytes <= s->limit.activation_bytes) return RM_OK;
    char why[64];
    if (s->opt.strategy != RM_STRATEGY_NONE) snprintf(why, sizeof why, "strategy '%s'", s->strategy_name);
    else snprintf(why, sizeof why, "%s", s->train.n_instrs ? "the plan" : "the forward pass");
    return refuse(s, fixed, s->arena_bytes, why);
}

void rm_limit(const rm_session *s, rm_limit_info *l) {
    if (!l) return;
    memset(l, 0, sizeof *l);
    if (s && s->opt.limit_bytes > 0) {
        *l = s->limit;
        l->arena_bytes = s->arena_bytes; /* after the profiling step's plan */
    }
}
