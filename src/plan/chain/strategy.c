/* strategy.c: the named recompute strategies, each a schedule made of the
 * primitives of schedule.c (docs/RECOMPUTE.md explains them for users):
 *   none          store everything
 *   blocks        keep each stage's input, recompute the stage before its backward
 *   segments:K    K segments of stages; keep segment inputs; recompute each
 *                 segment but the last once (PyTorch checkpoint_sequential)
 *   sqrt          segments:round(sqrt(stages))
 *   selective     recompute only the values of ops marked cheap (rm_op_def.cheap):
 *                 layernorm, GELU, dropout outputs and attention probabilities
 *   revolve:S     Griewank-Walther binomial checkpointing, S slots (revolve.c)
 * User marks (rm_recompute_begin/end, rm_set_policy) are applied on top when
 * the caller asks for them; what they changed is counted, and the session
 * words the note. */
#include "plan/chain/chain.h"
#include "plan/graphplan/graphplan.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "segments:K" -> K; returns 0 when `s` does not start with `prefix`. */
static int parse_count(const char *s, const char *prefix, int *k) {
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0) return 0;
    char *end;
    long v = strtol(s + n, &end, 10);
    *k = (*end || end == s + n || v < 1 || v > 1000000) ? -1 : (int)v;
    return 1;
}

/* User marks win over the strategy; what they changed is counted. */
static void apply_user_marks(const rm_graph *g, char *want, rm_marks *marks) {
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        int rec = nd->user_recompute, save = 0;
        for (int j = 0; j < nd->n_out; j++) {
            if (g->vals[nd->out[j]].policy == RM_POLICY_RECOMPUTE) rec = 1;
            if (g->vals[nd->out[j]].policy == RM_POLICY_SAVE) save = 1;
        }
        if (save && want[n]) marks->kept++, want[n] = 0;
        else if (rec && !save && !want[n]) marks->forced++, want[n] = 1;
    }
}

/* The groups (node ranges recomputed and reversed together) and the nodes
 * a uniform strategy recomputes; *k is the parsed count of segments:K. */
static rm_status uniform(const rm_graph *g, const rm_chain *c, const char *strategy, int is_segments, int k,
                         char *want, int *gf, int *gl, int *n_groups, char *err, size_t errlen) {
    /* default groups: the stages, contiguous node ranges (also when not a chain) */
    *n_groups = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (n == 0 || g->nodes[n].stage != g->nodes[n - 1].stage) gf[(*n_groups)++] = n;
        gl[*n_groups - 1] = n;
    }
    if (!strcmp(strategy, "none")) return RM_OK; /* nothing wanted */
    if (!strcmp(strategy, "blocks")) {
        for (int n = 0; n < g->n_nodes; n++) want[n] = n < c->first[c->n - 1]; /* all but the last stage */
        return RM_OK;
    }
    if (!strcmp(strategy, "selective")) {
        rm_cheap_mask(g, want);
        return RM_OK;
    }
    if (is_segments || !strcmp(strategy, "sqrt")) {
        if (!is_segments) k = (int)lround(sqrt((double)c->n));
        if (k < 1 || k > c->n) {
            snprintf(err, errlen, "segments:K needs 1 <= K <= %d (the number of stages), got '%s'", c->n, strategy);
            return RM_ERR_ARG;
        }
        /* K near-equal contiguous segments, as checkpoint_sequential splits */
        *n_groups = k;
        for (int j = 0; j < k; j++) {
            int s0 = (int)((long)c->n * j / k), s1 = (int)((long)c->n * (j + 1) / k) - 1;
            gf[j] = c->first[s0], gl[j] = c->last[s1];
        }
        for (int n = 0; n < g->n_nodes; n++) want[n] = n < gf[k - 1];
        return RM_OK;
    }
    snprintf(err, errlen, "unknown recompute strategy '%s' (try none, blocks, segments:K, sqrt, selective, "
             "revolve:S)", strategy);
    return RM_ERR_ARG;
}

/* A uniform strategy's schedule, with the user's marks when `marks` is set. */
static rm_status build_uniform(const rm_graph *g, const rm_chain *c, const char *strategy, int is_segments, int k,
                               rm_marks *marks, rm_schedule *out, char *err, size_t errlen) {
    char *want = calloc((size_t)g->n_nodes + 1, 1);
    int *gf = malloc(sizeof(int) * (size_t)(g->n_stages + 1)), *gl = malloc(sizeof(int) * (size_t)(g->n_stages + 1));
    rm_status rc = want && gf && gl ? RM_OK : RM_ERR_NOMEM;
    int n_groups = 0;
    if (rc == RM_OK) rc = uniform(g, c, strategy, is_segments, k, want, gf, gl, &n_groups, err, errlen);
    if (rc == RM_OK && marks) apply_user_marks(g, want, marks);
    if (rc == RM_OK) rc = rm_schedule_grouped(g, gf, gl, n_groups, want, out);
    free(want), free(gf), free(gl);
    return rc;
}

/* blocks, segments:K and sqrt on a graph that is not a chain
 * (graphbudget.c); they schedule whole groups, so per-node marks do not
 * apply. */
static rm_status uniform_graph(const rm_graph *g, const char *strategy, int is_segments, int k, rm_marks *marks,
                               rm_schedule *out, char *err, size_t errlen) {
    if (is_segments && k < 1) {
        snprintf(err, errlen, "segments:K needs K >= 1, got '%s'", strategy);
        return RM_ERR_ARG;
    }
    rm_status rc = rm_schedule_uniform_graph(g, is_segments ? k : 0, !strcmp(strategy, "sqrt"), out, err, errlen);
    if (marks) marks->ignored = rm_graph_has_marks(g);
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory building the schedule");
    return rc;
}

rm_status rm_schedule_build(const rm_graph *g, const char *strategy, int backward, rm_marks *marks,
                            rm_schedule *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (marks) memset(marks, 0, sizeof *marks);
    if (!strategy || !*strategy) strategy = "none";
    if (!backward) {
        if (rm_schedule_forward(0, g->n_nodes - 1, out) == RM_OK) return RM_OK;
        rm_schedule_free(out);
        snprintf(err, errlen, "out of memory building the schedule");
        return RM_ERR_NOMEM;
    }
    rm_chain c;
    rm_status rc = rm_chain_build(g, &c, err, errlen);
    int k = 0, is_revolve = parse_count(strategy, "revolve:", &k);
    int is_segments = parse_count(strategy, "segments:", &k);
    int needs_chain = is_revolve || is_segments || !strcmp(strategy, "blocks") || !strcmp(strategy, "sqrt");
    if (rc == RM_OK && c.n <= 1 && needs_chain) rm_chain_free(&c), rc = RM_ERR_ARG; /* no stages */
    if (is_revolve && k < 1) {
        if (rc == RM_OK) rm_chain_free(&c);
        snprintf(err, errlen, "revolve:S needs a slot count S >= 1, got '%s'", strategy);
        return RM_ERR_ARG;
    }
    if (rc == RM_ERR_ARG && is_revolve) { /* not a chain: revolve over the graph's units */
        rc = rm_schedule_revolve_graph(g, k, out, err, errlen);
        if (marks) marks->ignored = rm_graph_has_marks(g);
        if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory building the schedule");
        return rc;
    }
    if (rc == RM_ERR_ARG && needs_chain && !is_revolve) /* not a chain: the same strategy on any graph */
        return uniform_graph(g, strategy, is_segments, k, marks, out, err, errlen);
    if (rc != RM_OK && (needs_chain || rc == RM_ERR_NOMEM)) return rc;
    if (is_revolve) {
        /* revolve schedules whole stages: per-node marks do not apply */
        rc = rm_schedule_revolve(g, &c, k, out, err, errlen);
        if (marks) marks->ignored = rm_graph_has_marks(g);
    } else {
        rc = build_uniform(g, &c, strategy, is_segments, k, marks, out, err, errlen);
    }
    rm_chain_free(&c);
    if (rc == RM_ERR_NOMEM) snprintf(err, errlen, "out of memory building the schedule");
    if (rc != RM_OK) rm_schedule_free(out);
    return rc;
}
