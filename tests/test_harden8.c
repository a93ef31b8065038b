/* test_harden8.c: the eighth hardening round through the public API
 * (docs/RELIABILITY.md; the command line's classes are tests/test_harden8.sh):
 *  1. a graph file's misspelt key was ignored: rm_plan_graph (and `remat
 *     plan --graph`) planned a graph without its edges when the file said
 *     "edge", nodes of 0 bytes for "output_byte", no paging for
 *     "scratch_bandwith", and rm_price_graph priced a plan without its
 *     blocks for "block". A key one or two edits from one remat reads (case
 *     ignored) is now RM_ERR_FORMAT naming it and the key meant; a key far
 *     from every one (rematplan's "random", "inplace", "holds", "part_of",
 *     a user's note) is read past as before. */
#include "check.h"
#include "remat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A chain of 4 nodes: `node` is put into node 1, `edge` into edge 0, `top` at the top level. */
static void graph_text(char *out, size_t cap, const char *node, const char *edge, const char *top) {
    snprintf(out, cap,
             "{\"nodes\": [{\"name\": \"a\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 1000},"
             " {\"name\": \"b\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 1000%s},"
             " {\"name\": \"c\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 1000},"
             " {\"name\": \"loss\", \"forward_time\": 1, \"backward_time\": 2, \"output_bytes\": 4}],"
             " \"edges\": [{\"producer\": 0, \"consumer\": 1%s}, {\"producer\": 1, \"consumer\": 2},"
             " {\"producer\": 2, \"consumer\": 3}]%s}",
             node, edge, top);
}

static rm_status plan(const char *node, const char *edge, const char *top, char *err, size_t cap) {
    char g[2048], *res = NULL;
    graph_text(g, sizeof g, node, edge, top);
    err[0] = 0;
    rm_status st = rm_plan_graph(g, 3000, &res, err, cap);
    free(res);
    return st;
}

static void misspelt_keys(void) {
    char err[512];
    const char *bad[][4] = {
        {", \"output_byte\": 5", "", "", "\"output_bytes\""},
        {", \"Output_Bytes\": 5", "", "", "\"output_bytes\""},
        {", \"backwrad_time\": 5", "", "", "\"backward_time\""},
        {", \"keeps\": true", "", "", "\"keep\""},
        {", \"blocks\": 0", "", "", "\"block\""},
        {"", ", \"backward_read\": false", "", "\"backward_reads\""},
        {"", ", \"consumr\": 1", "", "\"consumer\""},
        {"", "", ", \"edge\": []", "\"edges\""},
        {"", "", ", \"scratch_bandwith\": 1e9", "\"scratch_bandwidth\""},
        {"", "", ", \"Eager\": true", "\"eager\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_status st = plan(bad[i][0], bad[i][1], bad[i][2], err, sizeof err);
        CHECK(st == RM_ERR_FORMAT && strstr(err, "not one remat reads") && strstr(err, bad[i][3]),
              "%s%s%s: status %d, '%s'", bad[i][0], bad[i][1], bad[i][2], st, err);
    }
    /* notes far from every key, as rematplan writes them, are read past */
    const char *notes[][3] = {
        {", \"random\": true, \"inplace\": true, \"holds\": [0], \"part_of\": 0, \"side_effect\": []", "", ""},
        {", \"op\": \"aten::mm\", \"module\": \"h.0.mlp\"", ", \"note\": 1", ", \"model\": \"gpt2\", \"version\": 3"},
    };
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++) {
        rm_status st = plan(notes[i][0], notes[i][1], notes[i][2], err, sizeof err);
        CHECK(st == RM_OK || st == RM_ERR_BUDGET, "notes %zu: status %d, '%s'", i, st, err);
    }
    /* a plan to price and a "start": {"modes", "blocks", "least_bytes"} */
    char g[2048], *res = NULL;
    graph_text(g, sizeof g, "", "", "");
    rm_status st = rm_price_graph(g, "{\"modes\": [\"keep\", \"once\", \"keep\", \"keep\"], \"block\": [0, 0, 1, 2]}",
                                  &res, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "\"blocks\""), "a plan's \"block\": status %d, '%s'", st, err);
    free(res), res = NULL;
    st = rm_price_graph(g, "{\"modes\": [\"keep\", \"once\", \"keep\", \"keep\"], \"blocks\": [0, 0, 1, 2]}", &res,
                        err, sizeof err);
    CHECK(st == RM_OK && res, "a plan with its keys: status %d, '%s'", st, err);
    free(res), res = NULL;
    CHECK(plan("", "", ", \"start\": {\"modes\": [\"keep\", \"keep\", \"keep\", \"keep\"], \"least_byte\": 9}", err,
               sizeof err) == RM_ERR_FORMAT && strstr(err, "\"least_bytes\""), "\"start\"'s \"least_byte\": '%s'", err);
    /* a control character in the key is shown as '?' (one line) */
    CHECK(plan(", \"output_byte\\n\": 5", "", "", err, sizeof err) == RM_ERR_FORMAT && !strchr(err, '\n'),
          "a key with a newline: '%s'", err);
}

int main(void) {
    misspelt_keys();
    return check_done("test_harden8");
}
