/* chain.c: seeing a graph as a chain of stages. Recompute strategies work
 * on stages: keep a stage's input, drop its insides, rebuild them from that
 * input before the stage's backward. That is only a memory saving when the
 * graph is a chain at stage granularity: every stage reads activations from
 * itself and from exactly one value of the stage before it. */
#include "plan/chain/chain.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_chain_free(rm_chain *c) {
    free(c->first);
    free(c->last);
    free(c->input);
    free(c->graph_stage);
    free(c->out_off), free(c->outs), free(c->want);
    memset(c, 0, sizeof *c);
}

rm_status rm_chain_build(const rm_graph *g, rm_chain *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    int ns = g->n_stages;
    int *of_stage = malloc(sizeof *of_stage * (size_t)(ns ? ns : 1)); /* graph stage -> chain stage */
    c->first = malloc(sizeof(int) * (size_t)(ns ? ns : 1));
    c->last = malloc(sizeof(int) * (size_t)(ns ? ns : 1));
    c->input = malloc(sizeof(int) * (size_t)(ns ? ns : 1));
    c->graph_stage = malloc(sizeof(int) * (size_t)(ns ? ns : 1));
    if (!of_stage || !c->first || !c->last || !c->input || !c->graph_stage) {
        free(of_stage);
        rm_chain_free(c);
        snprintf(err, errlen, "out of memory analysing stages");
        return RM_ERR_NOMEM;
    }
    for (int s = 0; s < ns; s++) of_stage[s] = -1;
    /* nodes of one stage are contiguous: stages only ever advance while recording */
    for (int n = 0; n < g->n_nodes; n++) {
        int gs = g->nodes[n].stage;
        if (of_stage[gs] < 0) {
            of_stage[gs] = c->n;
            c->first[c->n] = n;
            c->input[c->n] = -1;
            c->graph_stage[c->n] = gs;
            c->n++;
        }
        c->last[of_stage[gs]] = n;
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        int s = of_stage[nd->stage];
        for (int i = 0; i < nd->n_in; i++) {
            int v = nd->in[i];
            if (v < 0 || g->vals[v].kind != RM_VALUE_ACT) continue;
            int ps = of_stage[g->vals[v].stage];
            if (ps == s) continue;
            const char *here = g->stages[nd->stage].name, *there = g->stages[g->vals[v].stage].name;
            if (ps != s - 1) {
                snprintf(err, errlen, "not a chain of stages: stage '%s' reads '%s' from stage '%s', which is not the "
                         "stage right before it", here, g->vals[v].name, there);
                free(of_stage);
                rm_chain_free(c);
                return RM_ERR_ARG;
            }
            if (c->input[s] >= 0 && c->input[s] != v) {
                snprintf(err, errlen, "not a chain of stages: stage '%s' reads both '%s' and '%s' from stage '%s' "
                         "(a chain passes one value between stages)", here, g->vals[c->input[s]].name,
                         g->vals[v].name, there);
                free(of_stage);
                rm_chain_free(c);
                return RM_ERR_ARG;
            }
            c->input[s] = v;
        }
    }
    free(of_stage);
    return RM_OK;
}

rm_status rm_chain_units(const rm_graph *g, const int *unit, rm_chain *c) {
    memset(c, 0, sizeof *c);
    int nn = g->n_nodes, nu = nn ? unit[nn - 1] + 1 : 0;
    size_t k = (size_t)nu + 1;
    c->first = malloc(k * sizeof(int)), c->last = malloc(k * sizeof(int)), c->input = malloc(k * sizeof(int));
    c->graph_stage = malloc(k * sizeof(int)), c->out_off = calloc(k + 1, sizeof(int));
    c->outs = malloc(((size_t)g->n_vals + 1) * sizeof(int)), c->want = malloc((size_t)nn + 1);
    int *handed = malloc(((size_t)g->n_vals + 1) * sizeof *handed); /* value -> unit it was handed from, or -1 */
    if (!c->first || !c->last || !c->input || !c->graph_stage || !c->out_off || !c->outs || !c->want || !handed) {
        free(handed);
        rm_chain_free(c);
        return RM_ERR_NOMEM;
    }
    c->n = nu;
    for (int n = 0; n < nn; n++) {
        if (n == 0 || unit[n] != unit[n - 1]) c->first[unit[n]] = n, c->graph_stage[unit[n]] = g->nodes[n].stage;
        c->last[unit[n]] = n;
        c->want[n] = 1;
    }
    for (int u = 0; u < nu; u++) c->input[u] = -1;
    for (int v = 0; v < g->n_vals; v++) handed[v] = -1;
    /* values produced in unit u and read in u+1, grouped by u (nodes are in unit order) */
    int n_outs = 0;
    for (int u = 0; u < nu; u++) {
        c->out_off[u] = n_outs;
        for (int n = u + 1 < nu ? c->first[u + 1] : nn; u + 1 < nu && n <= c->last[u + 1]; n++) {
            const rm_node *nd = &g->nodes[n];
            for (int i = 0; i < nd->n_in; i++) {
                int v = nd->in[i];
                if (v < 0 || g->vals[v].kind != RM_VALUE_ACT || unit[g->vals[v].node] != u || handed[v] == u) continue;
                handed[v] = u, c->outs[n_outs++] = v;
            }
        }
    }
    c->out_off[nu] = n_outs;
    /* read two or more units later: kept */
    for (int n = 0; n < nn; n++) {
        const rm_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_in; i++) {
            int v = nd->in[i];
            if (v >= 0 && g->vals[v].kind == RM_VALUE_ACT && unit[n] >= unit[g->vals[v].node] + 2)
                c->want[g->vals[v].node] = 0;
        }
    }
    free(handed);
    return RM_OK;
}
