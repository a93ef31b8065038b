/* test_harden7.c: the public API called in the wrong order or with the
 * wrong handles (the adversarial pass over the C API):
 *  1. a compiled graph is sealed: a builder, rm_set_loss, rm_mark_output,
 *     rm_set_policy, rm_stage_begin or rm_recompute_begin after rm_compile
 *     is RM_ERR_STATE (before, a node or value added after rm_compile made
 *     the next rm_step write past the session's tables: ASan
 *     heap-buffer-overflow in begin_step), and its sessions still step;
 *  2. gradients before a step: rm_optim_step before any rm_step, or after
 *     one that failed, and rm_step_micro accumulating into nothing are
 *     RM_ERR_STATE (before, they used the uninitialised gradient buffer:
 *     parameters updated with garbage); rm_grad before a step reads zeros;
 *     rm_optim_step with a NaN learning rate is RM_ERR_ARG (before, every
 *     parameter became NaN);
 *  3. messages name the problem: rm_save_state / rm_save_run with another
 *     session's optimizer (was "cannot save: bad arguments"),
 *     rm_trace_write with a negative n_meta (was "no path");
 *  4. rm_session_set_comm_f with a handle that names no communicator is
 *     RM_ERR_ARG (before, MPI's default handler aborted the process), with
 *     unknown flags RM_ERR_ARG, after rm_optim_new RM_ERR_STATE. */
#define _DEFAULT_SOURCE
#include "check.h"
#include "remat.h"
#include "survives.h"
#ifdef REMAT_MPI
#include <mpi.h>
#endif

#include <limits.h>
#include <math.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


typedef struct net {
    rm_graph *g;
    rm_model_io io;
    rm_session *s;
} net;

/* A small GPT (`layers` layers), compiled, its inputs filled. */
static void net_open(net *n, int layers, int accumulate) {
    n->g = rm_graph_new();
    rm_gpt_config c = {.layers = layers, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    rm_options o;
    rm_options_default(&o);
    o.threads = 1, o.accumulate = accumulate;
    if (rm_gpt_build(n->g, &c, &n->io) != RM_OK || rm_compile(n->g, &o, &n->s) != RM_OK) abort();
    int32_t *tok = rm_value_data(n->s, n->io.tokens), *tgt = rm_value_data(n->s, n->io.targets);
    for (int i = 0; i < 16; i++) tok[i] = i % 32, tgt[i] = (i + 1) % 32;
}

static void net_close(net *n) {
    rm_session_free(n->s);
    rm_graph_free(n->g);
}

/* Call k of the calls that change a graph, on a compiled one. */
static rm_status change(net *n, int k) {
    const int64_t shape[1] = {4};
    switch (k) {
    case 0: return rm_gelu(n->g, n->io.logits) < 0 ? rm_graph_status(n->g) : RM_OK;
    case 1: return rm_param(n->g, "late", 1, shape, RM_INIT_ZEROS, 0, 0) < 0 ? rm_graph_status(n->g) : RM_OK;
    case 2: return rm_input(n->g, "late", RM_DTYPE_F32, 1, shape) < 0 ? rm_graph_status(n->g) : RM_OK;
    case 3: return rm_set_loss(n->g, n->io.loss);
    case 4: return rm_mark_output(n->g, n->io.logits);
    case 5: return rm_set_policy(n->g, n->io.logits, RM_POLICY_RECOMPUTE);
    case 6: return rm_stage_begin(n->g, "late");
    default: return rm_recompute_begin(n->g);
    }
}

/* Class 1. */
static int sealed_one(int k) {
    net n;
    net_open(&n, 1, 0);
    rm_status st = change(&n, k);
    float loss = NAN;
    int ok = st == RM_ERR_STATE && strstr(rm_graph_errmsg(n.g), "compiled already") &&
             rm_step(n.s, 0, &loss) == RM_OK && isfinite(loss);
    if (!ok) fprintf(stderr, "change %d: status %d, '%s'\n", k, st, rm_graph_errmsg(n.g));
    net_close(&n);
    return ok;
}

static void sealed_graph(void) {
    for (int k = 0; k < 8; k++) {
        char what[64];
        snprintf(what, sizeof what, "graph change %d after rm_compile", k);
        SURVIVES(what, sealed_one(k));
    }
    /* a second graph is built and compiled as ever */
    net n;
    net_open(&n, 1, 0);
    rm_session *s2;
    CHECK(rm_compile(n.g, NULL, &s2) == RM_OK, "compiling a graph twice: %s", rm_graph_errmsg(n.g));
    rm_session_free(s2);
    net_close(&n);
}

/* Class 2. */
static void grads_before_step(void) {
    net n;
    net_open(&n, 1, 0);
    rm_optim *o;
    if (rm_optim_new(n.s, NULL, &o) != RM_OK) abort();
    rm_val w = rm_param_at(n.g, 0);
    float *g = rm_grad(n.s, w), *p = rm_value_data(n.s, w), p0 = p[0];
    int zero = 1;
    for (int64_t i = 0; g && i < rm_numel(n.g, w); i++) zero &= g[i] == 0.0f;
    CHECK(g && zero, "rm_grad before the first step: zeros");
    CHECK(rm_optim_step(o, 1e-2f, NULL) == RM_ERR_STATE && strstr(rm_session_errmsg(n.s), "no gradients yet") &&
              p[0] == p0, "rm_optim_step before rm_step: '%s'", rm_session_errmsg(n.s));
    float loss;
    CHECK(rm_step(n.s, 0, &loss) == RM_OK, "step: %s", rm_session_errmsg(n.s));
    CHECK(rm_optim_step(o, NAN, NULL) == RM_ERR_ARG && strstr(rm_session_errmsg(n.s), "learning rate") &&
              p[0] == p0, "rm_optim_step with lr NaN: '%s', w[0] %g", rm_session_errmsg(n.s), p[0]);
    CHECK(rm_optim_step(o, 1e-2f, NULL) == RM_OK && p[0] != p0, "rm_optim_step after rm_step: %s",
          rm_session_errmsg(n.s));
    int32_t *tok = rm_value_data(n.s, n.io.tokens);
    tok[3] = 999; /* the step is refused: no gradients of it */
    CHECK(rm_step(n.s, 1, &loss) == RM_ERR_ARG, "a step with a bad id");
    CHECK(rm_optim_step(o, 1e-2f, NULL) == RM_ERR_STATE, "rm_optim_step after a failed step: '%s'",
          rm_session_errmsg(n.s));
    rm_optim_free(o);
    net_close(&n);

    net_open(&n, 1, 1);
    const rm_micro add = {2, 0.5f, 1};
    CHECK(rm_step_micro(n.s, 0, &add, &loss) == RM_ERR_STATE && strstr(rm_session_errmsg(n.s), "accumulate 0"),
          "rm_step_micro accumulating first: '%s'", rm_session_errmsg(n.s));
    const rm_micro first = {0, 0.5f, 0};
    CHECK(rm_step_micro(n.s, 0, &first, &loss) == RM_OK && rm_step_micro(n.s, 0, &add, &loss) == RM_OK,
          "micro-batches in order: %s", rm_session_errmsg(n.s));
    net_close(&n);
}

/* Class 3. */
static void messages(void) {
    net a, b;
    net_open(&a, 1, 0);
    net_open(&b, 2, 0);
    rm_optim *ob;
    if (rm_optim_new(b.s, NULL, &ob) != RM_OK) abort();
    char err[300] = "", path[] = "/tmp/remat_harden7.XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(rm_save_state(a.s, ob, path, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG &&
              strstr(err, "another session's") && strstr(rm_session_errmsg(a.s), "another session's"),
          "rm_save_state with another session's optimizer: '%s'", err);
    rm_run_info r;
    rm_run_info_default(&r);
    CHECK(rm_save_run(a.s, ob, path, &r, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG &&
              strstr(err, "another session's"), "rm_save_run with another session's optimizer: '%s'", err);
    CHECK(rm_trace_write(a.s, path, -1, NULL, NULL, err, sizeof err) == RM_ERR_ARG && strstr(err, "n_meta"),
          "rm_trace_write with n_meta -1: '%s'", err);
    unlink(path);
    rm_optim_free(ob);
    net_close(&a);
    net_close(&b);
}

/* Class 4 (a process that initialised MPI must not fork: main runs it in a child). */
static void communicators(void) {
    net n;
    net_open(&n, 1, 0);
#ifdef REMAT_MPI
    MPI_Init(NULL, NULL);
    const int bad[] = {-1, 12345, INT_MAX, INT_MIN};
    for (int i = 0; i < 4; i++)
        CHECK(rm_session_set_comm_f(n.s, bad[i], 0) == RM_ERR_ARG && strstr(rm_session_errmsg(n.s), "not the handle"),
              "rm_session_set_comm_f(%d): '%s'", bad[i], rm_session_errmsg(n.s));
    const int world = (int)MPI_Comm_c2f(MPI_COMM_WORLD);
    CHECK(rm_session_set_comm_f(n.s, world, -1) == RM_ERR_ARG && strstr(rm_session_errmsg(n.s), "unknown flags"),
          "rm_session_set_comm_f with flags -1: '%s'", rm_session_errmsg(n.s));
    rm_optim *o;
    if (rm_optim_new(n.s, NULL, &o) != RM_OK) abort();
    CHECK(rm_session_set_comm_f(n.s, world, RM_DIST_SHARD) == RM_ERR_STATE &&
              strstr(rm_session_errmsg(n.s), "before rm_optim_new"),
          "rm_session_set_comm_f after rm_optim_new: '%s'", rm_session_errmsg(n.s));
    rm_optim_free(o);
    CHECK(rm_session_set_comm_f(n.s, world, RM_DIST_SHARD) == RM_OK, "then alone: %s", rm_session_errmsg(n.s));
    net_close(&n);
    MPI_Finalize();
#else
    CHECK(rm_session_set_comm_f(n.s, -1, 0) == RM_ERR_STATE && strstr(rm_session_errmsg(n.s), "without MPI"),
          "rm_session_set_comm_f without MPI: '%s'", rm_session_errmsg(n.s));
    net_close(&n);
#endif
}

int main(void) {
    sealed_graph();
    grads_before_step();
    messages();
    /* in a child: MPI's own allocations outlive MPI_Finalize (LeakSanitizer),
     * and _exit skips the leak check; its failures are printed there */
    SURVIVES("rm_session_set_comm_f's checks", (communicators(), check_fail_count == 0));
    return check_done("test_harden7");
}
