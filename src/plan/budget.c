/* budget.c: strategy "auto": a session's training program planned to fit
 * rm_options.memory_budget, then re-planned once from a measured profile. */
#include "exec/exec.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rm_status rm_budget_program(rm_session *s, const rm_profile *prof, rm_program *out) {
    rm_graph *g = s->g;
    double v;
    int percent;
    if (rm_parse_bytes(s->opt.memory_budget, &v, &percent) != RM_OK)
        return rm_graph_fail(g, RM_ERR_ARG, "memory budget '%s' is not a size: use e.g. 64MiB, 1.5GiB, 500MB, "
                             "123456 (bytes) or 50%% (of store-all)", s->opt.memory_budget);
    /* store-all's program: the reference for "50%" budgets, for reports, and
     * the source of the planner's per-stage byte figures */
    rm_program none;
    rm_status rc = rm_session_program(s, "none", 1, &none);
    if (rc != RM_OK) return rc;
    s->store_all_bytes = (int64_t)none.arena_bytes;
    s->budget_bytes = percent ? (int64_t)((double)s->store_all_bytes * v / 100.0) : (int64_t)v;
    rm_schedule sch;
    char err[512];
    rc = rm_schedule_auto(g, s->budget_bytes, 500, s->threads, prof, &none, &sch, &s->autoplan, err, sizeof err);
    rm_program_free(&none);
    if (rc != RM_OK) return rm_graph_fail(g, rc, "%s", err);
    rc = rm_program_build(g, &sch, s->threads, out, err, sizeof err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return rm_graph_fail(g, rc, "%s", err);
    rm_memplan(out);
    return RM_OK;
}

/* Steps on the inputs as they are (zeros at compile time) to time each
 * stage, then plan again with those times. Parameters and state (running
 * statistics) are restored, so the profile leaves no trace. */
rm_status rm_budget_profile(rm_session *s) {
    rm_graph *g = s->g;
    size_t bytes = g->param_floats * sizeof(float);
    float *saved = malloc(bytes ? bytes : 1);
    if (!saved) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory profiling");
    memcpy(saved, s->params, bytes);
    /* twice: the first step also pays for first-touch page faults and thread start-up */
    rm_status rc = rm_execute(s, &s->train, 0, 1);
    if (rc == RM_OK) rc = rm_execute(s, &s->train, 0, 1);
    memcpy(s->params, saved, bytes);
    free(saved);
    if (rc != RM_OK) return rm_graph_fail(g, rc, "profiling step: %s", s->errmsg);
    if (!rm_profile_copy(&s->prof, &s->timing, g)) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory profiling");
    rm_program p;
    rc = rm_budget_program(s, &s->prof, &p);
    if (rc != RM_OK) return rc;
    if (p.arena_bytes > s->arena_bytes) { /* grow once, before any real step */
        unsigned char *a = aligned_alloc(RM_ALIGN, (p.arena_bytes + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN);
        if (!a) {
            rm_program_free(&p);
            return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory for the activation arena");
        }
        memset(a, 0, p.arena_bytes);
        free(s->arena);
        s->arena = a;
        s->arena_bytes = p.arena_bytes;
    }
    rm_program_free(&s->train);
    s->train = p;
    s->measured_peak = 0;
    return RM_OK;
}
