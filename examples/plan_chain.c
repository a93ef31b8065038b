/* plan_chain.c: planning recomputation for a model trained elsewhere. A
 * chain of stages, profiled in any framework, is described as JSON; remat
 * answers with the fastest schedule that fits a memory budget, and with the
 * whole trade-off between memory and time. Only remat.h is used.
 *
 * Each stage of the chain (the loss last) gives, in bytes and milliseconds:
 *   a    its input (what keeping it as a checkpoint costs)
 *   ab   what its backward needs, its output included
 *   uf   ub  the times of its forward and backward
 *   ft   bt  the workspace of its forward and backward. bt must include the
 *        gradient of the stage input: remat lets that gradient replace the
 *        input during the backward. (Rotor's bwd_tmp leaves it out: there,
 *        bt = bwd_tmp + a.)
 */
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>

int main(void) {
    /* Six equal blocks of 1 MiB activations, ab = 4 MiB each, and a loss. */
    char json[2048];
    int n = snprintf(json, sizeof json, "{\"stages\": [");
    for (int i = 0; i < 6; i++)
        n += snprintf(json + n, sizeof json - (size_t)n,
                      "{\"uf\": 1.0, \"ub\": 2.0, \"a\": 1048576, \"ab\": 4194304, \"ft\": 0, \"bt\": 1048576},");
    snprintf(json + n, sizeof json - (size_t)n, "{\"uf\": 0.1, \"ub\": 0.1, \"a\": 1048576, \"ab\": 1048576}]}");

    /* The fastest schedule within 12 MiB (keeping everything takes about 30). */
    char err[256], *result = NULL;
    rm_status st = rm_plan_chain(json, 12 << 20, &result, err, sizeof err);
    if (!result) {
        fprintf(stderr, "plan_chain: %s\n", err);
        return 1;
    }
    printf("12 MiB: %s\n", result); /* {"feasible": true, ..., "sequence": ["Fck 0", ...]} */
    free(result);
    if (st != RM_OK) {
        fprintf(stderr, "plan_chain: %s\n", err);
        return 1;
    }

    /* The trade-off: 5 budgets from the least feasible to keeping everything. */
    if (rm_plan_chain_sweep(json, 5, stdout, err, sizeof err) != RM_OK) {
        fprintf(stderr, "plan_chain: %s\n", err);
        return 1;
    }
    return 0;
}
