/* schedule.c: what a recompute strategy decides, as an ordered list of
 * items: run node n forward, run it again (recompute), run its backward.
 * Which values are kept and which are freed follows from the order alone
 * (program.c), so a strategy never deals with memory directly. */
#include "internal.h"
#include <stdio.h>
#include <string.h>

/* Store-all: every forward once, then every needed backward in reverse. */
static rm_status schedule_none(const rm_graph *g, int backward, rm_schedule *out) {
    for (int n = 0; n < g->n_nodes; n++)
        if (rm_schedule_push(out, RM_INSTR_FORWARD, n) != RM_OK) return RM_ERR_NOMEM;
    if (!backward) return RM_OK;
    for (int n = g->n_nodes - 1; n >= 0; n--)
        if (g->nodes[n].needs_grad && rm_schedule_push(out, RM_INSTR_BACKWARD, n) != RM_OK)
            return RM_ERR_NOMEM;
    return RM_OK;
}

rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward, rm_schedule *out,
                            char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!strategy || !*strategy) strategy = "none";
    rm_status rc;
    if (!backward || strcmp(strategy, "none") == 0) {
        rc = schedule_none(g, backward, out);
    } else {
        snprintf(err, errlen, "unknown recompute strategy '%s' (try none)", strategy);
        return RM_ERR_ARG;
    }
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory building the schedule");
    if (rc != RM_OK) rm_schedule_free(out);
    return rc;
}
