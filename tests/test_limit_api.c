/* test_limit_api.c: rm_options.limit_bytes, the limit on libremat's own
 * bytes: a limit the training state cannot fit is refused with the
 * breakdown and the least limit; a limit that fits plans an arena within
 * what the state leaves (rm_limit adds up to no more than the limit); the
 * least limit named in a refusal works; a fixed strategy that does not fit
 * is refused; a percentage is not a limit. */
#include "check.h"
#include "remat.h"
#include <stdlib.h>
#include <string.h>

/* A deep, narrow MLP: its activations dwarf its parameters. */
static rm_graph *build(void) {
    rm_run_info r;
    rm_run_info_default(&r);
    snprintf(r.model, sizeof r.model, "mlp");
    r.n_widths = 24;
    for (int i = 0; i < r.n_widths; i++) r.widths[i] = 32;
    r.context = 8, r.batch = 4096;
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    if (!g || rm_run_build(&r, g, &io, 0) != RM_OK) return NULL;
    return g;
}

static rm_status compile(rm_graph *g, int64_t limit, const char *checkpoint, rm_session **s) {
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    o.limit_bytes = limit;
    o.checkpoint = checkpoint;
    return rm_compile(g, &o, s);
}

int main(void) {
    rm_graph *g = build();
    CHECK(g != NULL, "build");
    if (!g) return check_done("test_limit_api");
    rm_session *s = NULL;
    /* store-all's figures, without a limit */
    CHECK(compile(g, 0, NULL, &s) == RM_OK, "%s", rm_graph_errmsg(g));
    rm_memory_info m;
    rm_memory(s, &m);
    size_t store_all = m.activation_arena_bytes, state = 4 * m.param_bytes;
    rm_session_free(s);

    /* a limit below the training state: refused, with the breakdown and the least limit */
    CHECK(compile(g, (int64_t)(state / 2), NULL, &s) == RM_ERR_BUDGET && !s, "tiny limit refused");
    const char *msg = rm_graph_errmsg(g);
    const char *least_at = strstr(msg, "the least limit that works is ");
    CHECK(strstr(msg, "parameters") && strstr(msg, "gradients") && strstr(msg, "optimizer") && least_at, "%s", msg);
    double least_mib = least_at ? atof(least_at + strlen("the least limit that works is ")) : 0;
    CHECK(least_mib > 0, "least limit %g", least_mib);
    /* the least limit named works */
    CHECK(compile(g, (int64_t)(least_mib * 1048576.0), NULL, &s) == RM_OK, "least limit: %s", rm_graph_errmsg(g));
    rm_session_free(s);

    /* 60% of what store-all needs: planned, and the breakdown adds up within the limit */
    int64_t limit = (int64_t)((double)(store_all + state) * 0.6) + (1 << 20);
    CHECK(compile(g, limit, NULL, &s) == RM_OK, "60%%: %s", rm_graph_errmsg(g));
    rm_limit_info l;
    rm_limit(s, &l);
    size_t sum = l.param_bytes + l.grad_bytes + l.optimizer_bytes + l.input_bytes + l.margin_bytes + l.arena_bytes;
    CHECK(l.limit_bytes == (size_t)limit && l.arena_bytes > 0 && l.arena_bytes <= l.activation_bytes && sum <= (size_t)limit,
          "breakdown: arena %zu of %zu, sum %zu, limit %lld", l.arena_bytes, l.activation_bytes, sum, (long long)limit);
    CHECK(l.optimizer_bytes == 2 * l.param_bytes, "AdamW's two moments counted: %zu", l.optimizer_bytes);
    rm_memory(s, &m);
    CHECK(m.activation_arena_bytes < store_all, "recomputes: arena %zu of store-all %zu", m.activation_arena_bytes, store_all);
    float loss;
    CHECK(rm_step(s, 0, &loss) == RM_OK, "a step under the limit: %s", rm_session_errmsg(s));
    rm_memory(s, &m);
    CHECK(m.activation_bytes_measured <= l.activation_bytes, "measured %zu", m.activation_bytes_measured);
    rm_session_free(s);

    /* a fixed strategy that does not fit that limit is refused; without a limit, no figures */
    CHECK(compile(g, limit, "none", &s) == RM_OK, "strategy none plans under a limit: %s", rm_graph_errmsg(g));
    rm_session_free(s);
    CHECK(compile(g, (int64_t)(state + (2 << 20)), "blocks", &s) == RM_ERR_BUDGET &&
              strstr(rm_graph_errmsg(g), "strategy 'blocks'"), "blocks over the limit: %s", rm_graph_errmsg(g));
    CHECK(compile(g, 0, NULL, &s) == RM_OK, "%s", rm_graph_errmsg(g));
    rm_limit(s, &l);
    CHECK(l.limit_bytes == 0 && l.arena_bytes == 0, "no limit, no figures");
    rm_session_free(s);

    /* the string form: sizes only */
    rm_options o;
    rm_options_default(&o);
    o.memory_limit = "50%";
    CHECK(rm_compile(g, &o, &s) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "not a percentage"), "%s", rm_graph_errmsg(g));
    o.memory_limit = "1GiB";
    CHECK(rm_compile(g, &o, &s) == RM_OK, "1GiB: %s", rm_graph_errmsg(g));
    rm_limit(s, &l);
    CHECK(l.limit_bytes == (size_t)1 << 30, "1GiB parsed: %zu", l.limit_bytes);
    rm_session_free(s);
    rm_graph_free(g);
    return check_done("test_limit_api");
}
