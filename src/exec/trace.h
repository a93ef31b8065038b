/* trace.h: recording one training step for rm_trace_write (exec/trace.c).
 * The executor calls these hooks only while a trace is armed for the step
 * it runs; with tracing off it tests one pointer per step and nothing else. */
#ifndef REMAT_TRACE_H
#define REMAT_TRACE_H
#include "exec/exec.h"

/* One executed instruction: when it ran (ms, rm_now_ms) and the live
 * activation bytes once its outputs were defined (live_in, the figure whose
 * maximum is the high-water mark) and once its dead buffers were freed. */
typedef struct rm_trace_event {
    double t0, t1;
    double u0, u1;        /* fuse_optimizer: the updates that ran after it (0, 0: none) */
    size_t live_in, live_out;
    int node;
    rm_instr_kind kind;
} rm_trace_event;

enum { RM_TRACE_ARMED = 1, RM_TRACE_STEPPED, RM_TRACE_DONE };

struct rm_trace {
    int state;            /* 0 unused, then ARMED -> STEPPED (rm_step) -> DONE (rm_optim_step) */
    uint64_t step;        /* the rm_step number to record */
    rm_trace_event *ev;   /* one per instruction of the training program */
    int n, cap;
    double opt_t0, opt_t1;/* the optimizer update after the recorded step (0: none) */
    /* paging (issue 20): each transfer of the recorded step, as the I/O
     * thread ran it (copied from the queue at the step's end) */
    rm_io_req *io;
    int n_io;
};

/* The trace to fill for a training step `step` of program p, or NULL. */
struct rm_trace *rm_trace_for(rm_session *s, const rm_program *p, uint64_t step);
/* The traced step's transfers, copied from the I/O queue at its end. */
void rm_trace_io(rm_session *s, const rm_program *p);
/* Called by rm_optim_step after its update (inline: train/ links without exec/). */
static inline void rm_trace_optimizer(rm_session *s, double t0, double t1) {
    struct rm_trace *t = s ? s->trace : NULL;
    if (!t || t->state != RM_TRACE_STEPPED) return;
    t->opt_t0 = t0, t->opt_t1 = t1;
    t->state = RM_TRACE_DONE;
}
#endif
