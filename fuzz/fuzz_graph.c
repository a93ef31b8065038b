/* fuzz_graph.c: a libFuzzer target for graph files (`remat plan --graph`,
 * rm_plan_graph): the JSON parser of plan/graphplan/graphfile.c and the general-graph
 * planner behind it, at a budget taken from the input's last bytes. Only
 * the planner's files are linked (graphfile, graphplan, blocks, schedule),
 * so the target builds in seconds; schedule.c's strategies that consult op
 * definitions are never reached from a graph file, and the stubs below
 * satisfy the linker. Inputs are kept short (-max_len in tests/test_fuzz.sh):
 * the search is polynomial in the nodes. Built and run by tests/test_fuzz.sh; by hand:
 *   build/fuzz/fuzz_graph/fuzz_graph fuzz/corpus_graph */
#include "ops/ops.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

const rm_op_def *rm_op_get(rm_op_kind k) {
    (void)k;
    abort(); /* not reachable from a graph file */
}

unsigned rm_node_bwd_reads(const rm_node *n, const rm_value *vals) {
    (void)n, (void)vals;
    abort(); /* not reachable from a graph file */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    int64_t budget = size >= 2 ? (int64_t)(data[size - 1] | data[size - 2] << 8) * 4 - 1 : -1;
    char *out = NULL, err[256];
    rm_plan_graph(text, budget, &out, err, sizeof err);
    free(out);
    free(text);
    return 0;
}
