/* fuzz_chain.c: a libFuzzer target for the chain planner's input, the JSON
 * of `remat plan --chain` ({"stages": [{"uf","ub","a","ab","ft","bt"}, ...]}):
 * the parser, the Rotor dynamic program, the minimum-budget search and the
 * sweep. The first 8 bytes of the input are the budget (any int64, so
 * negative and huge budgets are tried too), the rest the JSON. Inputs are
 * kept short (-max_len in tests/test_fuzz.sh): the dynamic program is cubic
 * in the number of stages. Built and run by tests/test_fuzz.sh; by hand:
 *   build/fuzz/fuzz_chain -dict=fuzz/chain.dict fuzz/corpus_chain */
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    int64_t budget;
    memcpy(&budget, data, 8);
    char *text = malloc(size - 8 + 1);
    if (!text) return 0;
    memcpy(text, data + 8, size - 8);
    text[size - 8] = 0;
    char err[512] = "", *res = NULL;
    rm_status st = rm_plan_chain(text, budget, &res, err, sizeof err);
    if (st != RM_OK && !err[0]) abort(); /* every error says why */
    if ((st == RM_OK || st == RM_ERR_BUDGET) && (!res || res[0] != '{')) abort();
    free(res);
    FILE *sink = fopen("/dev/null", "w");
    if (sink) {
        err[0] = 0;
        st = rm_plan_chain_sweep(text, 3, sink, err, sizeof err);
        if (st != RM_OK && !err[0]) abort();
        fclose(sink);
    }
    free(text);
    return 0;
}
