/* lower.c: from a sequence of stage operations (Fn, Fck, Fall, B, L; what
 * revolve and the Rotor planner produce) to the engine's schedule items.
 *   Fn s, Fck s   run stage s to rebuild its output (its insides are freed)
 *   Fall s        run stage s keeping what its backward reads (lowered with
 *                 `outputs`: and its output, when stage s+1 runs again
 *                 before B s, as Rotor's model counts it)
 *   B s           run the backward of stage s
 *   Fsel s        like Fall, but the selective policy's cheap values are
 *                 freed and rebuilt right before B s
 *   L s           the loss stage: Fall s then B s
 * The first run of each node is a FORWARD item, later ones RECOMPUTE. The
 * difference between Fn and Fck (whether x_s stays) needs no code: x_s stays
 * exactly as long as a later item reads it. */
#include "plan/chain/chain.h"
#include "plan/rotor/rotor.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct lowering {
    const rm_graph *g;
    const rm_chain *c;
    char *forwarded; /* stage has run its first forward */
    char *all;       /* want-mask with every node set */
    rm_schedule *out;
    char *cheap;     /* the selective policy's nodes */
    char *sel;       /* stage was last kept by Fsel */
} lowering;

static rm_status forward_stage(lowering *l, int st) {
    for (int n = l->c->first[st]; n <= l->c->last[st]; n++)
        if (rm_schedule_push(l->out, RM_INSTR_FORWARD, n) != RM_OK) return RM_ERR_NOMEM;
    l->forwarded[st] = 1;
    return RM_OK;
}

/* A recomputed Fall keeps what its stage's backward reads; with `output`
 * it also rebuilds the stage's output, which else is read from its last
 * copy (held since it was made). */
static rm_status run_stage(lowering *l, int st, int keep_all, int output) {
    if (!l->forwarded[st]) return forward_stage(l, st);
    const rm_chain *c = l->c;
    const char *want = c->want ? c->want : l->all;
    if (keep_all && !output) return rm_schedule_recompute(l->g, c->first[st], c->last[st], want, -1, 1, l->out);
    if (c->outs) /* a chain of units hands over several values */
        return rm_schedule_recompute_set(l->g, c->first[st], c->last[st], want, c->outs + c->out_off[st],
                                         c->out_off[st + 1] - c->out_off[st], keep_all, l->out);
    return rm_schedule_recompute(l->g, c->first[st], c->last[st], want, st + 1 < c->n ? c->input[st + 1] : -1,
                                 keep_all, l->out);
}

/* rebuild[k]: op k keeps stage s (Fall, Fsel) and stage s+1 runs again
 * before B s, reading s's output: Rotor's model has the output rebuilt
 * inside what Fall keeps. Found from the back in one pass. */
static char *outputs_read_again(const rm_chain *c, const rm_rotor_op *ops, int n_ops) {
    char *rebuild = calloc((size_t)n_ops + 1, 1);
    int *next_fwd = malloc(sizeof *next_fwd * ((size_t)c->n + 1)), *next_b = malloc(sizeof *next_b * ((size_t)c->n + 1));
    if (!rebuild || !next_fwd || !next_b) {
        free(rebuild), free(next_fwd), free(next_b);
        return NULL;
    }
    for (int s = 0; s <= c->n; s++) next_fwd[s] = next_b[s] = n_ops;
    for (int k = n_ops - 1; k >= 0; k--) {
        int s = ops[k].stage;
        if (s < 0 || s >= c->n) continue;
        if (ops[k].kind == RM_ROTOR_FALL || ops[k].kind == RM_ROTOR_FSEL || ops[k].kind == RM_ROTOR_FPAGE)
            rebuild[k] = next_fwd[s + 1] < next_b[s];
        if (ops[k].kind == RM_ROTOR_B) next_b[s] = k;
        else next_fwd[s] = k;
    }
    free(next_fwd), free(next_b);
    return rebuild;
}

rm_status rm_schedule_lower(const rm_graph *g, const rm_chain *c, const rm_rotor_op *ops, int n_ops, int outputs,
                            rm_schedule *out, char *err, size_t errlen) {
    lowering l = {g, c, calloc((size_t)c->n + 1, 1), malloc((size_t)g->n_nodes + 1), out,
                  malloc((size_t)g->n_nodes + 1), calloc((size_t)c->n + 1, 1)};
    char *rebuild = outputs ? outputs_read_again(c, ops, n_ops) : NULL;
    rm_status rc = (l.forwarded && l.all && l.cheap && l.sel && (rebuild || !outputs)) ? RM_OK : RM_ERR_NOMEM;
    for (int n = 0; n < g->n_nodes && rc == RM_OK; n++) l.all[n] = 1;
    if (rc == RM_OK) rm_cheap_mask(g, l.cheap);
    for (int k = 0; k < n_ops && rc == RM_OK; k++) {
        int st = ops[k].stage;
        if (st < 0 || st >= c->n) {
            snprintf(err, errlen, "internal: stage %d out of range in a plan", st);
            rc = RM_ERR_STATE;
            break;
        }
        switch (ops[k].kind) {
        case RM_ROTOR_FN:
        case RM_ROTOR_FCK: rc = run_stage(&l, st, 0, 0); break;
        case RM_ROTOR_FALL:
        case RM_ROTOR_FSEL:
        case RM_ROTOR_FPAGE: /* kept as by Fall; what it keeps is paged by the caller (rm_rotor_paged_values) */
            rc = run_stage(&l, st, 1, rebuild && rebuild[k]);
            l.sel[st] = ops[k].kind == RM_ROTOR_FSEL;
            break;
        case RM_ROTOR_B:
            if (l.sel[st]) rc = rm_schedule_recompute(g, c->first[st], c->last[st], l.cheap, -1, 1, out);
            if (rc == RM_OK) rc = rm_schedule_backward(g, c->first[st], c->last[st], out);
            l.sel[st] = 0;
            break;
        case RM_ROTOR_L:
            rc = run_stage(&l, st, 1, 0);
            if (rc == RM_OK) rc = rm_schedule_backward(g, c->first[st], c->last[st], out);
            break;
        }
    }
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory lowering a plan");
    free(rebuild);
    free(l.forwarded);
    free(l.all);
    free(l.cheap);
    free(l.sel);
    return rc;
}

void rm_rotor_paged_values(const rm_graph *g, const rm_chain *c, const rm_rotor_op *ops, int n_ops, char *values) {
    for (int k = 0; k < n_ops; k++) {
        if (ops[k].kind != RM_ROTOR_FPAGE || ops[k].stage < 0 || ops[k].stage >= c->n) continue;
        const int st = ops[k].stage, out = st + 1 < c->n ? c->input[st + 1] : -1;
        for (int n = c->first[st]; n <= c->last[st]; n++)
            for (int j = 0; j < g->nodes[n].n_out; j++)
                if (g->nodes[n].out[j] != out) values[g->nodes[n].out[j]] = 1;
    }
}
