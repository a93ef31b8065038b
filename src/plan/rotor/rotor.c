/* rotor.c: the chain model of Rotor's planner (rotor.h) and its simulator:
 * which activations, kept forward values and gradients each operation
 * holds, the peak memory and time of a sequence. The dynamic program that
 * chooses a sequence is in rotor_dp.c. */
#include "rotor.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

rm_status rm_chain_model_alloc(rm_chain_model *c, int n) {
    memset(c, 0, sizeof *c);
    c->n = n;
    c->uf = calloc((size_t)n + 1, sizeof *c->uf);
    c->ub = calloc((size_t)n + 1, sizeof *c->ub);
    c->a = calloc((size_t)n + 2, sizeof *c->a);
    c->ab = calloc((size_t)n + 1, sizeof *c->ab);
    c->ft = calloc((size_t)n + 1, sizeof *c->ft);
    c->bt = calloc((size_t)n + 1, sizeof *c->bt);
    if (!c->uf || !c->ub || !c->a || !c->ab || !c->ft || !c->bt) {
        rm_chain_model_free(c);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

rm_status rm_chain_model_alloc_selective(rm_chain_model *c) {
    c->ub2 = calloc((size_t)c->n + 1, sizeof *c->ub2);
    c->ab2 = calloc((size_t)c->n + 1, sizeof *c->ab2);
    c->bt2 = calloc((size_t)c->n + 1, sizeof *c->bt2);
    return c->ub2 && c->ab2 && c->bt2 ? RM_OK : RM_ERR_NOMEM;
}

rm_status rm_chain_model_alloc_ranges(rm_chain_model *c) {
    c->ck_last = malloc(((size_t)c->n + 1) * sizeof *c->ck_last);
    if (!c->ck_last) return RM_ERR_NOMEM;
    for (int i = 0; i <= c->n; i++) c->ck_last[i] = c->n - 1;
    return RM_OK;
}

rm_status rm_chain_model_add_paging(rm_chain_model *c, double bw, double lat) {
    free(c->ubp);
    c->ubp = calloc((size_t)c->n + 1, sizeof *c->ubp);
    if (!c->ubp) return RM_ERR_NOMEM;
    for (int i = 0; i < c->n; i++) {
        double io = i + 1 < c->n && c->ab[i] > c->a[i + 1] ? 2 * ((double)(c->ab[i] - c->a[i + 1]) / bw + lat) : 0;
        double window = i + 1 < c->n ? c->uf[i + 1] + c->ub[i + 1] : 0;
        /* nothing to page beyond the output: no third way (it would be Fall) */
        c->ubp[i] = io > 0 ? c->ub[i] + (io > window ? io - window : 0) : INFINITY;
    }
    return RM_OK;
}

void rm_chain_model_free(rm_chain_model *c) {
    free(c->uf), free(c->ub), free(c->a), free(c->ab), free(c->ft), free(c->bt);
    free(c->ub2), free(c->ab2), free(c->bt2), free(c->ubp), free(c->ck_last);
    memset(c, 0, sizeof *c);
}

const char *rm_rotor_op_name(rm_rotor_op_kind k) {
    static const char *names[] = {"Fn", "Fck", "Fall", "B", "L", "Fsel", "Fpage"};
    return (unsigned)k < 7 ? names[k] : "?";
}

void rm_rotor_plan_free(rm_rotor_plan *p) {
    free(p->ops);
    memset(p, 0, sizeof *p);
}

int rm_rotor_seq_push(rm_rotor_seq *q, rm_rotor_op_kind k, int stage) {
    if (q->n == q->cap) {
        int nc = q->cap ? q->cap * 2 : 64;
        void *p = realloc(q->ops, sizeof *q->ops * (size_t)nc);
        if (!p) return 0;
        q->ops = p, q->cap = nc;
    }
    q->ops[q->n].kind = k, q->ops[q->n].stage = stage;
    q->n++;
    return 1;
}

/* Memory in the persistent model: x_i (1: transient, 2: a checkpoint kept by
 * Fck, freed only by its backward), the x̄_i kept by Fall, gradients d_i; a
 * gradient takes the place of its activation. */
int rm_rotor_sim_init(const rm_chain_model *c, rm_rotor_sim *st) {
    int n = c->n;
    memset(st, 0, sizeof *st);
    st->x = calloc((size_t)n + 2, 1), st->xbar = calloc((size_t)n + 1, 1), st->dgrad = calloc((size_t)n + 2, 1);
    if (!st->x || !st->xbar || !st->dgrad) {
        rm_rotor_sim_free(st);
        return 0;
    }
    st->x[0] = 2, st->dgrad[n] = 1; /* the chain input, and the loss output's gradient (a[n] bytes) */
    st->mem = st->peak = c->a[0] + c->a[n];
    return 1;
}

void rm_rotor_sim_free(rm_rotor_sim *st) {
    free(st->x), free(st->xbar), free(st->dgrad);
    memset(st, 0, sizeof *st);
}

static void high(rm_rotor_sim *st, int64_t m) {
    if (m > st->peak) st->peak = m;
}

int rm_rotor_apply(const rm_chain_model *c, rm_rotor_sim *st, rm_rotor_op op) {
    int n = c->n, s = op.stage;
    if (s < 0 || s >= n) return 0;
    int have_in = st->x[s] || (s > 0 && st->xbar[s - 1]);
    int64_t ws = c->ft[s] > c->bt[s] ? c->ft[s] : c->bt[s];
    switch (op.kind) {
    case RM_ROTOR_FN:
    case RM_ROTOR_FCK:
        if (!have_in || s == n - 1) return 0;
        high(st, st->mem + c->a[s + 1] + c->ft[s]);
        if (!st->x[s + 1]) st->x[s + 1] = 1, st->mem += c->a[s + 1];
        /* persistent model: a checkpoint (x kept by Fck) lives until its backward */
        if (op.kind == RM_ROTOR_FCK && st->x[s]) st->x[s] = 2; /* an x inside x̄_{s-1} is held there */
        if (op.kind == RM_ROTOR_FN && st->x[s] == 1 && s > 0) st->x[s] = 0, st->mem -= c->a[s];
        st->time += c->uf[s];
        return 1;
    case RM_ROTOR_FALL:
    case RM_ROTOR_FSEL: {
        int sel = op.kind == RM_ROTOR_FSEL;
        if (!have_in || st->xbar[s] || s == n - 1 || (sel && !c->ab2)) return 0;
        int64_t ab = sel ? c->ab2[s] : c->ab[s];
        high(st, st->mem + ab + c->ft[s]);
        st->xbar[s] = (char)(1 + sel), st->mem += ab;
        /* persistent model: B s reads x_s, so x_s now stays until then */
        if (st->x[s]) st->x[s] = 2;
        st->time += c->uf[s];
        return 1;
    }
    case RM_ROTOR_FPAGE: /* as Fall, then all but the output goes to disk */
        if (!have_in || st->xbar[s] || s == n - 1 || !c->ubp) return 0;
        high(st, st->mem + c->ab[s] + c->ft[s]);
        st->xbar[s] = 3, st->mem += c->a[s + 1];
        if (st->x[s]) st->x[s] = 2;
        st->time += c->uf[s];
        return 1;
    case RM_ROTOR_B: {
        /* the backward reads its stage's input too (ab counts only what the
         * forward made), so x_s must still be there, alone or inside x̄_{s-1} */
        if (!st->xbar[s] || !st->dgrad[s + 1] || !have_in) return 0;
        int sel = st->xbar[s] == 2, paged = st->xbar[s] == 3;
        if (paged) { /* read back: all it keeps is there again for the backward */
            high(st, st->mem + (c->ab[s] - c->a[s + 1]) + c->bt[s]);
            st->mem -= c->a[s + 1];
        } else {
            high(st, st->mem + (sel ? c->bt2[s] : c->bt[s]));
            st->mem -= sel ? c->ab2[s] : c->ab[s];
        }
        st->xbar[s] = 0;
        st->dgrad[s + 1] = 0, st->mem -= c->a[s + 1];
        if (st->x[s]) st->x[s] = 0, st->mem -= c->a[s]; /* d_s takes x_s's place */
        st->dgrad[s] = 1, st->mem += c->a[s];
        st->time += paged ? c->ubp[s] : sel ? c->ub2[s] : c->ub[s];
        return 1;
    }
    case RM_ROTOR_L:
        if (s != n - 1 || !have_in || !st->dgrad[s + 1]) return 0;
        high(st, st->mem + c->ab[s] + ws);
        st->dgrad[s + 1] = 0, st->mem -= c->a[s + 1];
        if (st->x[s]) st->x[s] = 0, st->mem -= c->a[s];
        st->dgrad[s] = 1, st->mem += c->a[s];
        st->time += c->uf[s] + c->ub[s];
        return 1;
    }
    return 0;
}

int rm_rotor_simulate(const rm_chain_model *c, const rm_rotor_op *ops, int n_ops, double *time, int64_t *peak) {
    rm_rotor_sim st;
    if (!rm_rotor_sim_init(c, &st)) return 0;
    int ok = 1;
    for (int k = 0; k < n_ops && ok; k++) ok = rm_rotor_apply(c, &st, ops[k]);
    ok = ok && st.dgrad[0];
    if (time) *time = st.time;
    if (peak) *peak = st.peak;
    rm_rotor_sim_free(&st);
    return ok;
}

