/* program/program.h: what the program/ folder offers: the instruction list
 * of any schedule (program.c) and the memory layout of its buffers in one
 * arena (memplan.c). It knows nothing of planners or strategies. */
#ifndef REMAT_PROGRAM_H
#define REMAT_PROGRAM_H

#include "plan/plan.h"

/* ---- the step program ------------------------------------------------------ */

/* One instruction of a step. Buffer ids index rm_program.bufs. */
typedef struct rm_instr {
    rm_instr_kind kind;
    int node;
    int in_buf[RM_MAX_IN];   /* buffer holding each input (-1: external/absent) */
    int out_buf[RM_MAX_OUT]; /* forward: buffers defined; backward: buffers of fwd outputs read */
    int dout_buf[RM_MAX_OUT];
    int din_buf[RM_MAX_IN];
    int acc[RM_MAX_IN];
    int work_buf;            /* workspace buffer or -1 */
    int n_free;              /* buffers whose life ends after this instruction */
    int free_at;             /* index into rm_program.frees */
    int n_final;             /* parameters final after this instruction (rm_program.param_final) */
    int final_at;            /* index into rm_program.finals */
    int io;                  /* PAGE_OUT, PAGE_IN: its transfer (rm_program.io); WAIT: the one it waits for */
} rm_instr;

/* One transfer of a step: a buffer to or from a place in the scratch file.
 * Each checksum region is one place written (a value's page-out, a unit of
 * state). */
typedef struct rm_io_slot {
    int buf;         /* the buffer moved */
    int unit;
    int write;
    int region;
    uint64_t off;    /* in the scratch file */
    size_t bytes;
} rm_io_slot;

/* A buffer is one lifetime of one value in the arena: a value recomputed
 * has one buffer per computation. */
typedef struct rm_buffer {
    int value;       /* value id, or -1 for a workspace */
    size_t bytes;    /* rounded up to RM_ALIGN */
    int first, last; /* instruction indices of definition and last use */
    size_t offset;   /* in the arena, from the memory planner */
    int paged;       /* moved to or from the scratch file: offset and bytes multiples of RM_PAGE_ALIGN */
} rm_buffer;

typedef struct rm_program {
    rm_instr *instrs;
    int n_instrs, cap_instrs;
    rm_buffer *bufs;
    int n_bufs, cap_bufs;
    int *frees;
    int n_frees, cap_frees;
    int *final_buf;         /* value -> its buffer at the end of the step, or -1 */
    size_t peak_live_bytes; /* max over instructions of the sum of live buffers */
    size_t arena_bytes;     /* max over buffers of offset + bytes */
    /* Per parameter (index into g->params): the instruction after which
     * nothing reads it or writes its gradient any more (-1: none does), and
     * the parameters grouped by that instruction (rm_instr.final_at). The
     * MPI overlap starts a gradient's allreduce there; a fused optimizer
     * updates the parameter there. */
    int *param_final, *finals;
    int n_params;
    /* fused (g->fuse_grads at build): each trainable parameter's gradient
     * is an arena buffer, param_buf[i] (-1: never written), from its first
     * backward writer to param_final[i]; else they are the session's flat
     * gradient buffer and param_buf is all -1 */
    int fused;
    int *param_buf;
    size_t peak_grad_bytes; /* fused: the parameter-gradient bytes among peak_live_bytes */
    /* paging (issue 20): the units, the transfers, the scratch file they
     * need (state units first, at fixed places; then one place per value
     * paged out) and the bytes a step moves each way */
    rm_page_unit *units;
    int n_units;
    rm_io_slot *io;
    int n_io, n_regions;
    uint64_t scratch_bytes, state_scratch_bytes;
    uint64_t page_out_bytes, page_in_bytes;
    uint64_t *unit_off;     /* per state unit: its place in the file (VALUE units: 0) */
    int *param_unit;        /* per parameter: its PARAM unit, or -1 (resident) */
} rm_program;

void rm_program_free(rm_program *p);

/* program/program.c: instructions + buffers from a schedule (liveness). */
rm_status rm_program_build(const rm_graph *g, const rm_schedule *s, int threads,
                           rm_program *p, char *err, size_t errlen);
/* program/memplan.c: offsets of the buffers in one arena. */
void rm_memplan(rm_program *p);

/* program/program.c: what a program's recomputations cost: ms from the
 * profile (rm_profile_recompute_ms), or FLOPs when prof is NULL. */
double rm_recompute_cost(const rm_graph *g, const rm_program *p, const rm_profile *prof);

#endif
