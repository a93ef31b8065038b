/* budget.c: rm_options.memory_budget for a session. The planner
 * (plan/chain/planner.c) is a pure function of (graph, budget, profile); the
 * session builds the instruction list and the memory layout of what it
 * chose, measures a profiling step, plans again with those times, and grows
 * its arena if the new plan needs more. */
#include "exec/exec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Under a memory limit: gives the planner's freed tables back to the
 * system (the allocator would keep them resident, counted by the RSS, next
 * to the arena). */
static void release_freed(const rm_session *s) {
#ifdef __GLIBC__
    if (s->opt.limit_bytes > 0) malloc_trim(0);
#else
    (void)s;
#endif
}

rm_status rm_session_budget_program(rm_session *s, const rm_profile *prof, rm_program *out) {
    rm_graph *g = s->g;
    rm_schedule sch;
    char err[512];
    rm_status rc = rm_schedule_budget(g, s->opt.memory_budget, s->threads, prof, &sch, &s->autoplan, err, sizeof err);
    s->budget_bytes = s->autoplan.budget;
    s->store_all_bytes = s->autoplan.store_all;
    if (rc != RM_OK) return rm_graph_fail(g, rc, "%s", err);
    if (s->page.open && !s->opt.page && !s->page.arena_cap && !prof) {
        /* a scratch file: paging activations is weighed against recomputing them (exec/pageplan.c) */
        rm_schedule_free(&sch);
        rm_auto_info info = s->autoplan;
        rc = rm_session_budget_paging(s, s->autoplan.budget, out);
        s->autoplan.budget = info.budget, s->autoplan.store_all = info.store_all;
        s->autoplan.min_budget = info.min_budget;
        if (rc == RM_OK) s->notes[0] = 0;
        return rc == RM_ERR_BUDGET ? rm_graph_fail(g, rc, "memory budget %.2f MiB: no plan fits",
                                                   (double)s->autoplan.budget / 1048576.0) : rc;
    }
    if ((rc = rm_session_page_schedule(s, &sch, prof, 1)) != RM_OK) {
        rm_schedule_free(&sch);
        return rc;
    }
    s->notes[0] = 0;
    if (rm_graph_has_marks(g))
        snprintf(s->notes, sizeof s->notes, "note: memory_budget schedules whole stages; per-node user marks "
                 "are not applied under it\n");
    rc = rm_program_build(g, &sch, s->threads, out, err, sizeof err);
    rm_schedule_free(&sch);
    release_freed(s);
    if (rc != RM_OK) return rm_graph_fail(g, rc, "%s", err);
    rm_memplan(out);
    /* a chain's least is exact and the same whatever the budget; a graph's
     * is a search, and a plan found may fit in less */
    if (s->autoplan.min_budget < 0 || (!s->autoplan.min_exact && (size_t)s->autoplan.min_budget > out->arena_bytes))
        s->autoplan.min_budget = (int64_t)out->arena_bytes;
    return RM_OK;
}

/* Grows the arena to `bytes`, before any real step (contents: zeros). The
 * old arena is freed first, so the two are never held together (a memory
 * limit counts one arena). */
static rm_status grow_arena(rm_session *s, size_t bytes) {
    if (bytes <= s->arena_bytes) return RM_OK;
    free(s->arena);
    s->arena = NULL, s->arena_bytes = 0;
    unsigned char *a = aligned_alloc(RM_PAGE_ALIGN, rm_page_round(bytes)); /* paged buffers: O_DIRECT */
    if (!a) return rm_graph_fail(s->g, RM_ERR_NOMEM, "out of memory for the activation arena");
    memset(a, 0, bytes);
    s->arena = a;
    s->arena_bytes = bytes;
    return RM_OK;
}

/* The plan again with the profile's times. A plan that pages under a limit
 * (exec/pageplan.c) keeps the training state it chose; the rest, placed
 * anew, must fit the arena the limit leaves: the budget is tightened by
 * the excess while it does not, and the first plan stays if none does. */
static rm_status replan(rm_session *s, rm_program *p) {
    rm_status rc = rm_session_budget_program(s, &s->prof, p);
    for (int tries = 0; rc == RM_OK && s->page.arena_cap > 0 && (int64_t)p->arena_bytes > s->page.arena_cap; tries++) {
        int64_t budget = s->budget_bytes - ((int64_t)p->arena_bytes - s->page.arena_cap);
        rm_program_free(p);
        if (tries == 4 || budget <= 0) { /* the first plan, which fits */
            *p = s->train;
            memset(&s->train, 0, sizeof s->train);
            return RM_OK;
        }
        snprintf(s->budget_name, sizeof s->budget_name, "%lld", (long long)budget);
        s->opt.memory_budget = s->budget_name;
        rc = rm_session_budget_program(s, &s->prof, p);
        if (rc == RM_ERR_BUDGET) { /* nothing at the tighter budget: the first plan */
            s->g->status = RM_OK;
            *p = s->train;
            memset(&s->train, 0, sizeof s->train);
            return RM_OK;
        }
    }
    if (s->page.arena_cap > 0 && s->budget_bytes > s->page.arena_cap) s->budget_bytes = s->page.arena_cap;
    return rc;
}

/* Steps on the inputs as they are (zeros at compile time) to time each
 * stage, then plan again with those times. A step without an optimizer
 * writes no parameter, only state (running statistics): that part of the
 * buffer (rm_graph_layout) is restored, so the profile leaves no trace. */
rm_status rm_session_profile(rm_session *s) {
    rm_graph *g = s->g;
    size_t bytes = (g->state_end - g->train_floats) * sizeof(float);
    float *saved = malloc(bytes ? bytes : 1), *state = s->params + g->train_floats;
    if (!saved) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory profiling");
    memcpy(saved, state, bytes);
    /* twice: the first step also pays for first-touch page faults and thread start-up */
    rm_status rc = rm_execute(s, &s->train, 0, 1);
    if (rc == RM_OK) rc = rm_execute(s, &s->train, 0, 1);
    memcpy(state, saved, bytes);
    free(saved);
    if (rc != RM_OK) return rm_graph_fail(g, rc, "profiling step: %s", s->errmsg);
    if (!rm_profile_copy(&s->prof, &s->timing, g)) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory profiling");
    if (s->opt.limit_bytes > 0) { /* under a limit the planner's table and the arena are never held together */
        free(s->arena);
        s->arena = NULL, s->arena_bytes = 0;
    }
    rm_program p;
    rc = replan(s, &p);
    if (rc != RM_OK) return rc;
    size_t need = p.arena_bytes > s->infer.arena_bytes ? p.arena_bytes : s->infer.arena_bytes;
    if ((rc = grow_arena(s, need)) != RM_OK) {
        rm_program_free(&p);
        return rc;
    }
    rm_program_free(&s->train);
    s->train = p;
    s->measured_peak = 0;
    /* the new program may move more (or, first, anything): the scratch
     * file's space and the I/O queue's slots for every transfer it makes */
    return rm_session_scratch_start(s);
}
