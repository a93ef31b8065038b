/* plan/paging/paging.h: what the paging planner offers: the transfers to
 * and from a scratch file placed into any schedule, on a simulated
 * timeline of the step. */
#ifndef REMAT_PLAN_PAGING_H
#define REMAT_PLAN_PAGING_H

#include "plan/plan.h"

/* plan/paging/paging.c: paging items merged into a schedule (issue 20): each
 * computation of a value `values` marks is paged out after its last reader
 * before its longest idle gap and in ahead of its first reader after it;
 * under a fused optimizer (g->fuse_grads) the AdamW moments of the
 * parameters `moments` marks are read ahead of their update in chunks,
 * updated and written back, and the parameters `params` marks (their
 * moments then paged too) are read before their readers and written back
 * after their update; a frozen parameter `params` marks (with any
 * optimizer) is only read, before its readers. Transfers are placed on a timeline of the step
 * (item_ms, the bandwidths); *stall_ms (NULL-able) is the time it predicts
 * the step waits for reads, *step_ms (NULL-able) the step's time: every
 * item at item_ms, the updates of paged state, and the waits. */
typedef struct rm_page_opts {
    const char *values;    /* per value (NULL: none) */
    const char *moments;   /* per parameter (NULL: none) */
    const char *params;    /* per parameter (NULL: none) */
    const double *item_ms; /* per item of the schedule: its compute time, ms (NULL: 1 each) */
    double write_bps, read_bps;
    size_t chunk_bytes;    /* moments: the most bytes (m and v) one unit stages */
    int forward_only;      /* a forward-only program: parameters are read, nothing is updated */
    double update_ms_per_float; /* a fused AdamW update's time per float, ms (0: ~3 ns) */
    /* the most bytes staged beyond what the schedule itself holds (reads
     * issued ahead of their reader, writes not yet waited for) at any
     * point, for reads moved earlier and waits moved later (0: no cap;
     * what must be staged at the least is staged regardless) */
    size_t max_staged;
} rm_page_opts;
rm_status rm_schedule_page(const rm_graph *g, const rm_schedule *in, const rm_page_opts *o, rm_schedule *out,
                           double *stall_ms, double *step_ms, char *err, size_t errlen);
/* Per item of s, an estimate of its compute time in ms: from the profile
 * (forward and recompute per node, backward per stage split by FLOPs), else
 * FLOPs at flops_per_ms; under a fused optimizer with the updates of the
 * parameters it makes final (update_ms_per_float each float; 0: ~3 ns), but those whose moments `paged` marks (per
 * parameter, NULL: none; they are UPDATE items of their own). */
void rm_schedule_item_ms(const rm_graph *g, const rm_schedule *s, const rm_profile *prof, double flops_per_ms,
                         double update_ms_per_float, const char *paged, double *out);

#endif
