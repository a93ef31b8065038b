/* schedule.c: what a recompute strategy decides, as an ordered list of
 * items: run node n forward, run it again (recompute), run its backward.
 * Which values are kept and which are freed follows from the order alone
 * (program.c): a value that is recomputed before its backward has its first
 * copy freed after its last forward reader. A strategy never deals with
 * memory directly.
 *
 * Strategies (docs/RECOMPUTE.md explains them for users):
 *   none          store everything
 *   blocks        keep each stage's input, recompute the stage before its backward
 *   segments:K    K segments of stages; keep segment inputs; recompute each
 *                 segment but the last once (PyTorch checkpoint_sequential)
 *   sqrt          segments:round(sqrt(stages))
 *   selective     recompute only cheap values inside their own stage:
 *                 layernorm, GELU, dropout outputs and attention probabilities
 *   revolve:S     Griewank-Walther binomial checkpointing, S slots (revolve.c)
 * User marks (rm_recompute_begin/end, rm_set_policy) are applied on top. */
#include "plan/plan.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rm_status rm_schedule_backward(const rm_graph *g, int lo, int hi, rm_schedule *out) {
    for (int n = hi; n >= lo; n--)
        if (g->nodes[n].needs_grad && rm_schedule_push(out, RM_INSTR_BACKWARD, n) != RM_OK) return RM_ERR_NOMEM;
    return RM_OK;
}

void rm_selective_mask(const rm_graph *g, char *want) {
    for (int n = 0; n < g->n_nodes; n++) {
        rm_op_kind op = g->nodes[n].op;
        want[n] = op == RM_OP_LAYERNORM || op == RM_OP_GELU || op == RM_OP_DROPOUT || op == RM_OP_ATTENTION;
    }
}

/* Marks the producer of v if it lies in [lo, hi] and is wanted. */
static void need_value(const rm_graph *g, int v, int lo, int hi, const char *want, char *need) {
    if (v < 0 || g->vals[v].kind != RM_VALUE_ACT) return;
    int p = g->vals[v].node;
    if (p >= lo && p <= hi && want[p]) need[p] = 1;
}

rm_status rm_schedule_recompute(const rm_graph *g, int lo, int hi, const char *want, rm_val also, int for_backward,
                                rm_schedule *out) {
    char *need = calloc((size_t)g->n_nodes, 1);
    if (!need) return RM_ERR_NOMEM;
    /* what the backwards of [lo, hi] read ... */
    for (int n = lo; n <= hi && for_backward; n++) {
        const rm_node *nd = &g->nodes[n];
        if (!nd->needs_grad) continue;
        unsigned reads = rm_op_get(nd->op)->bwd_reads;
        for (int i = 0; i < nd->n_in; i++)
            if (reads & RM_READS_IN(i)) need_value(g, nd->in[i], lo, hi, want, need);
        for (int j = 0; j < nd->n_out; j++)
            if (reads & RM_READS_OUT(j)) need_value(g, nd->out[j], lo, hi, want, need);
    }
    need_value(g, also, lo, hi, want, need);
    /* ... and, to rebuild those, what their recomputations read */
    for (int n = hi; n >= lo; n--) {
        if (!need[n]) continue;
        const rm_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_in; i++) need_value(g, nd->in[i], lo, hi, want, need);
    }
    rm_status rc = RM_OK;
    for (int n = lo; n <= hi && rc == RM_OK; n++)
        if (need[n]) rc = rm_schedule_push(out, RM_INSTR_RECOMPUTE, n);
    free(need);
    return rc;
}

/* "segments:K" -> K; returns 0 when `s` does not start with `prefix`. */
static int parse_count(const char *s, const char *prefix, int *k) {
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0) return 0;
    char *end;
    long v = strtol(s + n, &end, 10);
    *k = (*end || end == s + n || v < 1 || v > 1000000) ? -1 : (int)v;
    return 1;
}

/* User marks win over the strategy; each override is noted for the user. */
static void apply_user_marks(const rm_graph *g, const char *strategy, char *want, char *notes, size_t notes_len) {
    int forced = 0, kept = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        int rec = nd->user_recompute, save = 0;
        for (int j = 0; j < nd->n_out; j++) {
            if (g->vals[nd->out[j]].policy == RM_POLICY_RECOMPUTE) rec = 1;
            if (g->vals[nd->out[j]].policy == RM_POLICY_SAVE) save = 1;
        }
        if (save && want[n]) kept++, want[n] = 0;
        else if (rec && !save && !want[n]) forced++, want[n] = 1;
    }
    size_t len = strlen(notes);
    if (forced)
        snprintf(notes + len, notes_len - len, "note: %d node(s) marked for recompute by the user are recomputed, "
                 "although strategy '%s' would keep them\n", forced, strategy);
    len = strlen(notes);
    if (kept)
        snprintf(notes + len, notes_len - len, "note: %d node(s) whose values the user marked must-save are kept, "
                 "although strategy '%s' would recompute them\n", kept, strategy);
}

/* Forward everything, then for each group of stages from the last: recompute
 * what the group's backward needs among the wanted nodes, run its backward. */
static rm_status grouped(const rm_graph *g, const int *group_first, const int *group_last, int n_groups,
                         const char *want, rm_schedule *out) {
    for (int n = 0; n < g->n_nodes; n++)
        if (rm_schedule_push(out, RM_INSTR_FORWARD, n) != RM_OK) return RM_ERR_NOMEM;
    for (int k = n_groups - 1; k >= 0; k--) {
        if (rm_schedule_recompute(g, group_first[k], group_last[k], want, -1, 1, out) != RM_OK) return RM_ERR_NOMEM;
        if (rm_schedule_backward(g, group_first[k], group_last[k], out) != RM_OK) return RM_ERR_NOMEM;
    }
    return RM_OK;
}

rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward, rm_schedule *out, char *notes,
                            size_t notes_len, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!strategy || !*strategy) strategy = "none";
    if (!backward) {
        for (int n = 0; n < g->n_nodes; n++)
            if (rm_schedule_push(out, RM_INSTR_FORWARD, n) != RM_OK) goto nomem;
        return RM_OK;
    }
    rm_chain c;
    rm_status rc = rm_chain_build(g, &c, err, errlen);
    int k = 0, is_revolve = parse_count(strategy, "revolve:", &k);
    int is_segments = parse_count(strategy, "segments:", &k);
    int needs_chain = is_revolve || is_segments || !strcmp(strategy, "blocks") || !strcmp(strategy, "sqrt");
    if (rc != RM_OK && (needs_chain || rc == RM_ERR_NOMEM)) return rc;
    char *want = calloc((size_t)g->n_nodes + 1, 1);
    int *gf = malloc(sizeof(int) * (size_t)(g->n_stages + 1)), *gl = malloc(sizeof(int) * (size_t)(g->n_stages + 1));
    if (!want || !gf || !gl) {
        free(want), free(gf), free(gl);
        rm_chain_free(&c);
        goto nomem;
    }
    /* groups: the stages, contiguous node ranges (also when not a chain) */
    int n_groups = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (n == 0 || g->nodes[n].stage != g->nodes[n - 1].stage) gf[n_groups++] = n;
        gl[n_groups - 1] = n;
    }
    rc = RM_OK;
    if (!strcmp(strategy, "none")) {
        /* nothing wanted */
    } else if (!strcmp(strategy, "blocks")) {
        for (int n = 0; n < g->n_nodes; n++) want[n] = n < c.first[c.n - 1]; /* all but the last stage */
    } else if (!strcmp(strategy, "selective")) {
        rm_selective_mask(g, want);
    } else if (is_segments || !strcmp(strategy, "sqrt")) {
        if (!is_segments) k = (int)lround(sqrt((double)c.n));
        if (k < 1 || k > c.n) {
            snprintf(err, errlen, "segments:K needs 1 <= K <= %d (the number of stages), got '%s'", c.n, strategy);
            rc = RM_ERR_ARG;
        } else {
            /* K near-equal contiguous segments, as checkpoint_sequential splits */
            n_groups = k;
            for (int j = 0; j < k; j++) {
                int s0 = (int)((long)c.n * j / k), s1 = (int)((long)c.n * (j + 1) / k) - 1;
                gf[j] = c.first[s0], gl[j] = c.last[s1];
            }
            for (int n = 0; n < g->n_nodes; n++) want[n] = n < gf[k - 1];
        }
    } else if (is_revolve) {
        if (k < 1) {
            snprintf(err, errlen, "revolve:S needs a slot count S >= 1, got '%s'", strategy);
            rc = RM_ERR_ARG;
        }
    } else {
        snprintf(err, errlen, "unknown recompute strategy '%s' (try none, blocks, segments:K, sqrt, selective, "
                 "revolve:S)", strategy);
        rc = RM_ERR_ARG;
    }
    if (rc == RM_OK && is_revolve) {
        rc = rm_schedule_revolve(g, &c, k, out, err, errlen);
        size_t len = strlen(notes);
        int marked = 0;
        for (int n = 0; n < g->n_nodes; n++) marked |= g->nodes[n].user_recompute;
        for (int v = 0; v < g->n_vals; v++) marked |= g->vals[v].policy != RM_POLICY_DEFAULT;
        if (marked)
            snprintf(notes + len, notes_len - len, "note: revolve schedules whole stages; per-node user marks "
                     "are not applied under it\n");
    } else if (rc == RM_OK) {
        apply_user_marks(g, strategy, want, notes, notes_len);
        rc = grouped(g, gf, gl, n_groups, want, out);
    }
    free(want), free(gf), free(gl);
    rm_chain_free(&c);
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory building the schedule");
    if (rc != RM_OK) rm_schedule_free(out);
    return rc;
nomem:
    rm_schedule_free(out);
    snprintf(err, errlen, "out of memory building the schedule");
    return RM_ERR_NOMEM;
}
