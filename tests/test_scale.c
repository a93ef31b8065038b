/* test_scale.c: issue 22, class 12: what took time quadratic in a model's
 * size. rm_param checked a new name against every parameter before it (an
 * encdec of 4096 + 4096 layers, 10^5 parameters, spent minutes in strcmp
 * before planning began); the names are now a hash set. Here: 200000
 * parameters are recorded (seconds before, now milliseconds: a regression
 * shows as a suite that takes minutes), every one is found by name, and a
 * name given twice is still refused, at any point of the set's growth. */
#include "check.h"
#include "remat.h"
#include <stdio.h>
#include <string.h>

int main(void) {
    rm_graph *g = rm_graph_new();
    const int64_t shape[1] = {1};
    const int n = 200000;
    char name[64];
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        ok = rm_param(g, name, 1, shape, RM_INIT_ZEROS, 0.0f, 0) >= 0;
    }
    CHECK(ok && rm_param_count(g) == n, "%d distinct parameters: %s", n, rm_graph_errmsg(g));
    int found = 0;
    for (int i = 0; i < n; i += 997) {
        snprintf(name, sizeof name, "model.layers.%d.weight", i);
        rm_val v = rm_param_by_name(g, name);
        found += v >= 0 && rm_param_at(g, i) == v;
    }
    CHECK(found == (n + 996) / 997, "found %d of %d parameters by name", found, (n + 996) / 997);
    rm_graph_free(g);
    for (int size = 1; size <= 300; size = size * 3 + 1) { /* a repeat just after each growth of the set */
        g = rm_graph_new();
        for (int i = 0; i < size; i++) {
            snprintf(name, sizeof name, "p%d", i);
            rm_param(g, name, 1, shape, RM_INIT_ZEROS, 0.0f, 0);
        }
        snprintf(name, sizeof name, "p%d", size / 2);
        CHECK(rm_param(g, name, 1, shape, RM_INIT_ZEROS, 0.0f, 0) < 0 && rm_graph_status(g) == RM_ERR_ARG &&
                  strstr(rm_graph_errmsg(g), "two parameters are named 'p"),
              "a name twice among %d: %s", size, rm_graph_errmsg(g));
        rm_graph_free(g);
    }
    return check_done("test_scale");
}
