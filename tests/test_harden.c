/* test_harden.c: the library never crashes on bad arguments (issue 10).
 * Class 2: every public function given NULL pointers returns RM_ERR_ARG
 * (or a documented neutral value, or does nothing for the void ones).
 * Class 8: rm_fast_expf on NaN, chain sizes near 2^63, an update count that
 * would wrap. Class 9: budgets at the edges. Class 11: error paths set a
 * message. Each call runs in a child process, so a crash is one named
 * failure and the rest still run. */
#include "check.h"
#include "exec/exec.h"
#include "util/fastmath.h"
#include "survives.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>


static rm_graph *small_graph(rm_model_io *io) {
    rm_graph *g = rm_graph_new();
    rm_gpt_config c = {.layers = 2, .dim = 16, .heads = 2, .context = 16, .vocab = 32, .batch = 2};
    if (rm_gpt_build(g, &c, io) != RM_OK) abort();
    return g;
}

static rm_session *small_session(rm_graph **g, rm_model_io *io) {
    *g = small_graph(io);
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    rm_session *s;
    if (rm_compile(*g, &o, &s) != RM_OK) abort();
    return s;
}

static void null_graph_builders(void) {
    int64_t shape[2] = {2, 3};
    SURVIVES("rm_graph_free(NULL)", (rm_graph_free(NULL), 1));
    SURVIVES("rm_graph_errmsg(NULL)", rm_graph_errmsg(NULL) != NULL);
    SURVIVES("rm_graph_status(NULL)", rm_graph_status(NULL) != RM_OK); /* documented: allocation failed */
    SURVIVES("rm_status_name(99)", rm_status_name((rm_status)99) != NULL);
    SURVIVES("rm_input(NULL g)", rm_input(NULL, "x", RM_DTYPE_F32, 2, shape) == -1);
    rm_graph *g = rm_graph_new();
    SURVIVES("rm_input(NULL name)", rm_input(g, NULL, RM_DTYPE_F32, 2, shape) >= 0); /* named "input" */
    SURVIVES("rm_input(NULL shape)", rm_input(g, "x", RM_DTYPE_F32, 2, NULL) == -1 && rm_graph_errmsg(g)[0]);
    SURVIVES("rm_constant_i32(NULL data)", rm_constant_i32(g, "c", 2, shape, NULL) == -1);
    SURVIVES("rm_param(NULL shape)", rm_param(g, "w", 2, NULL, RM_INIT_ZEROS, 0, 0) == -1);
    SURVIVES("rm_param(NULL name)", rm_param(g, NULL, 2, shape, RM_INIT_ZEROS, 0, 0) == -1);
    SURVIVES("rm_state(NULL g)", rm_state(NULL, "s", 2, shape, RM_INIT_ZEROS) == -1);
    SURVIVES("rm_linear(NULL g)", rm_linear(NULL, 0, 1, -1) == -1);
    SURVIVES("rm_add(NULL g)", rm_add(NULL, 0, 1) == -1);
    SURVIVES("rm_embedding(NULL g)", rm_embedding(NULL, 0, 1) == -1);
    SURVIVES("rm_layernorm(NULL g)", rm_layernorm(NULL, 0, 1, 2) == -1);
    SURVIVES("rm_gelu(NULL g)", rm_gelu(NULL, 0) == -1);
    SURVIVES("rm_relu(NULL g)", rm_relu(NULL, 0) == -1);
    SURVIVES("rm_dropout(NULL g)", rm_dropout(NULL, 0, 0.1f) == -1);
    SURVIVES("rm_attention(NULL g)", rm_attention(NULL, 0, 1) == -1);
    SURVIVES("rm_softmax_ce(NULL g)", rm_softmax_ce(NULL, 0, 1) == -1);
    SURVIVES("rm_batchnorm(NULL g)", rm_batchnorm(NULL, 0, 1, 2, 3, 4) == -1);
    SURVIVES("rm_custom(NULL g)", rm_custom(NULL, "c", 0, NULL, NULL, NULL) == -1);
    rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, shape);
    SURVIVES("rm_custom(NULL callbacks)", rm_custom(g, "c", x, NULL, NULL, NULL) == -1 && rm_graph_errmsg(g)[0]);
    SURVIVES("rm_stage_begin(NULL g)", rm_stage_begin(NULL, "s") == RM_ERR_ARG);
    SURVIVES("rm_stage_begin(NULL name)", rm_stage_begin(g, NULL) == RM_OK); /* named "stage" */
    SURVIVES("rm_recompute_begin(NULL)", rm_recompute_begin(NULL) == RM_ERR_ARG);
    SURVIVES("rm_recompute_end(NULL)", rm_recompute_end(NULL) == RM_ERR_ARG);
    SURVIVES("rm_set_policy(NULL)", rm_set_policy(NULL, 0, RM_POLICY_SAVE) == RM_ERR_ARG);
    SURVIVES("rm_set_loss(NULL)", rm_set_loss(NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_mark_output(NULL)", rm_mark_output(NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_numel(NULL)", rm_numel(NULL, 0) == 0);
    SURVIVES("rm_shape(NULL g)", rm_shape(NULL, 0, (int64_t[RM_MAX_DIMS]){0}) == 0);
    SURVIVES("rm_shape(NULL shape)", rm_shape(g, x, NULL) == 0);
    SURVIVES("rm_name(NULL)", rm_name(NULL, 0) != NULL);
    SURVIVES("rm_param_count(NULL)", rm_param_count(NULL) == 0);
    SURVIVES("rm_param_at(NULL)", rm_param_at(NULL, 0) == -1);
    SURVIVES("rm_param_decay(NULL)", rm_param_decay(NULL, 0) == 0);
    SURVIVES("rm_param_trainable(NULL)", rm_param_trainable(NULL, 0) == 0);
    rm_graph_free(g);
}

static void null_models(void) {
    rm_model_io io;
    rm_gpt_config gc = {.layers = 1, .dim = 8, .heads = 2, .context = 4, .vocab = 16, .batch = 2};
    rm_mlp_config mc = {.context = 4, .vocab = 16, .batch = 2, .n_widths = 1, .widths = {8}};
    rm_graph *g = rm_graph_new();
    SURVIVES("rm_gpt_build(NULL g)", rm_gpt_build(NULL, &gc, &io) == RM_ERR_ARG);
    SURVIVES("rm_gpt_build(NULL config)", rm_gpt_build(g, NULL, &io) == RM_ERR_ARG && rm_graph_errmsg(g)[0]);
    SURVIVES("rm_gpt_build(NULL io)", rm_gpt_build(g, &gc, NULL) == RM_ERR_ARG && rm_graph_errmsg(g)[0]);
    SURVIVES("rm_mlp_build(NULL config)", rm_mlp_build(g, NULL, &io) == RM_ERR_ARG);
    SURVIVES("rm_mlp_build(NULL io)", rm_mlp_build(g, &mc, NULL) == RM_ERR_ARG);
    rm_graph_free(g);
}

static void null_sessions(void) {
    SURVIVES("rm_options_default(NULL)", (rm_options_default(NULL), 1));
    rm_model_io io;
    rm_graph *g = small_graph(&io);
    rm_session *s = NULL;
    SURVIVES("rm_compile(NULL out)", rm_compile(g, NULL, NULL) == RM_ERR_ARG && rm_graph_errmsg(g)[0]);
    SURVIVES("rm_compile(NULL g)", rm_compile(NULL, NULL, &s) == RM_ERR_ARG && s == NULL);
    rm_graph_free(g);
    SURVIVES("rm_session_free(NULL)", (rm_session_free(NULL), 1));
    SURVIVES("rm_session_errmsg(NULL)", rm_session_errmsg(NULL) != NULL);
    SURVIVES("rm_value_data(NULL)", rm_value_data(NULL, 0) == NULL);
    SURVIVES("rm_grad(NULL)", rm_grad(NULL, 0) == NULL);
    SURVIVES("rm_step(NULL)", rm_step(NULL, 0, NULL) == RM_ERR_ARG);
    SURVIVES("rm_forward(NULL)", rm_forward(NULL, NULL) == RM_ERR_ARG);
    rm_memory_info m;
    rm_plan_info p;
    SURVIVES("rm_memory(NULL, m)", (rm_memory(NULL, &m), m.param_bytes == 0));
    SURVIVES("rm_plan(NULL, p)", (rm_plan(NULL, &p), p.n_stages == 0));
    SURVIVES("rm_step_overhead(NULL)", rm_step_overhead(NULL) == 0);
    SURVIVES("rm_plan_notes(NULL)", rm_plan_notes(NULL) != NULL);
    SURVIVES("rm_print_plan(NULL, stdout)", (rm_print_plan(NULL, stdout), 1));
    rm_graph *g2;
    rm_session *s2 = small_session(&g2, &io);
    SURVIVES("rm_memory(s, NULL)", (rm_memory(s2, NULL), 1));
    SURVIVES("rm_plan(s, NULL)", (rm_plan(s2, NULL), 1));
    SURVIVES("rm_print_plan(s, NULL)", (rm_print_plan(s2, NULL), 1));
    SURVIVES("rm_shape(s's graph, bad id)", rm_shape(g2, 99999, (int64_t[RM_MAX_DIMS]){0}) == 0);
    char err[256] = "";
    SURVIVES("rm_save_params(NULL s)", rm_save_params(NULL, "/tmp/x", 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_save_params(NULL path)",
             rm_save_params(s2, NULL, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_save_params(NULL keys)",
             rm_save_params(s2, "/tmp/x", 2, NULL, NULL, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_save_params(NULL err)", rm_save_params(s2, NULL, 0, NULL, NULL, NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_load_params(NULL path)", rm_load_params(s2, NULL, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_load_params(NULL s)", rm_load_params(NULL, "/tmp/x", err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_save_state(NULL path)",
             rm_save_state(s2, NULL, NULL, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_load_state(NULL s)", rm_load_state(NULL, NULL, "/tmp/x", err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_load_state(NULL err)", rm_load_state(s2, NULL, NULL, NULL, 0) == RM_ERR_ARG);
    rm_session_free(s2);
    rm_graph_free(g2);
}

static void null_optim_and_chain(void) {
    SURVIVES("rm_optim_config_default(NULL)", (rm_optim_config_default(NULL), 1));
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    rm_optim *o = NULL;
    SURVIVES("rm_optim_new(NULL out)", rm_optim_new(NULL, &oc, NULL) == RM_ERR_ARG);
    SURVIVES("rm_optim_new(NULL s)", rm_optim_new(NULL, &oc, &o) == RM_ERR_ARG && o == NULL);
    SURVIVES("rm_optim_free(NULL)", (rm_optim_free(NULL), 1));
    SURVIVES("rm_optim_step(NULL)", rm_optim_step(NULL, 0.1f, NULL) == RM_ERR_ARG);
    SURVIVES("rm_optim_state(NULL)", rm_optim_state(NULL, NULL, NULL, NULL) == RM_ERR_ARG);
    SURVIVES("rm_optim_set_updates(NULL)", rm_optim_set_updates(NULL, 1) == RM_ERR_ARG);
    char err[256] = "", *res = NULL;
    SURVIVES("rm_plan_chain(NULL json)", rm_plan_chain(NULL, 100, &res, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_plan_chain(NULL result)", rm_plan_chain("{}", 100, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_plan_chain(NULL err)", rm_plan_chain("{}", 100, &res, NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_plan_chain_sweep(NULL csv)",
             rm_plan_chain_sweep("{\"stages\":[{\"uf\":1,\"ub\":1,\"a\":1,\"ab\":1}]}", 3, NULL, err, sizeof err) ==
                 RM_ERR_ARG);
}

static void null_data_and_files(void) {
    char err[256] = "";
    rm_dataset d;
    int32_t tok[8], tgt[8], y[2];
    float x[8], loss;
    SURVIVES("rm_data_load_file(NULL d)", rm_data_load_file(NULL, "x", err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_load_file(NULL path)", rm_data_load_file(&d, NULL, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_data_load_corpus(NULL)", rm_data_load_corpus(NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_from_bytes(NULL d)", rm_data_from_bytes(NULL, "x", (const unsigned char *)"ab", 2, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_from_tokens(NULL tokens)", rm_data_from_tokens(&d, "x", NULL, 4, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_free(NULL)", (rm_data_free(NULL), 1));
    SURVIVES("rm_data_check_vocab(NULL)", rm_data_check_vocab(NULL, 256, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_split(NULL)", rm_data_split(NULL, 0.1, 1, 1, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_part_len(NULL)", rm_data_part_len(NULL, RM_DATA_TRAIN) == 0);
    SURVIVES("rm_data_num_batches(NULL)", rm_data_num_batches(NULL, RM_DATA_TRAIN, 1, 1) == 0);
    SURVIVES("rm_data_row_start(NULL)", (rm_data_row_start(NULL, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0, 1, 1, 0), 1));
    SURVIVES("rm_data_batch(NULL d)",
             rm_data_batch(NULL, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0, 2, 4, tok, tgt, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_data_batch_mlp(NULL d)", rm_data_batch_mlp(NULL, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0, 2, 4, 16, x,
                                                            y, err, sizeof err) == RM_ERR_ARG);
    rm_model_io io;
    rm_graph *g;
    rm_session *s = small_session(&g, &io);
    SURVIVES("rm_data_fill(NULL s)", rm_data_fill(NULL, &io, &d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0) == RM_ERR_ARG);
    SURVIVES("rm_data_fill(NULL io, d)", rm_data_fill(s, NULL, NULL, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0) == RM_ERR_ARG);
    SURVIVES("rm_evaluate(NULL)", rm_evaluate(s, NULL, NULL, 1, &loss) == RM_ERR_ARG);
    SURVIVES("rm_evaluate(NULL s)", rm_evaluate(NULL, &io, NULL, 1, &loss) == RM_ERR_ARG);
    SURVIVES("rm_lr_at(NULL)", rm_lr_at(NULL, 3) == 0);
    SURVIVES("rm_run_info_default(NULL)", (rm_run_info_default(NULL), 1));
    rm_run_info r;
    rm_run_info_default(&r);
    SURVIVES("rm_run_build(NULL r)", rm_run_build(NULL, g, &io, 0) == RM_ERR_ARG);
    SURVIVES("rm_run_build(NULL g)", rm_run_build(&r, NULL, &io, 0) == RM_ERR_ARG);
    SURVIVES("rm_save_run(NULL path)", rm_save_run(s, NULL, NULL, &r, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_save_run(NULL r)", rm_save_run(s, NULL, "/tmp/x", NULL, 0, NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    rm_file *f = NULL;
    SURVIVES("rm_file_open(NULL path)", rm_file_open(NULL, &f, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_file_open(NULL out)", rm_file_open("/tmp/x", NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_file_close(NULL)", (rm_file_close(NULL), 1));
    SURVIVES("rm_file_verify(NULL)", rm_file_verify(NULL, NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_file_meta(NULL)", rm_file_meta(NULL, "k") == NULL);
    SURVIVES("rm_file_meta_count(NULL)", rm_file_meta_count(NULL) == 0);
    SURVIVES("rm_file_meta_key(NULL)", rm_file_meta_key(NULL, 0) == NULL);
    SURVIVES("rm_file_meta_value(NULL)", rm_file_meta_value(NULL, 0) == NULL);
    SURVIVES("rm_file_tensor_count(NULL)", rm_file_tensor_count(NULL) == 0);
    SURVIVES("rm_format_shape(NULL shape)", (rm_format_shape(2, NULL, err, sizeof err), 1));
    SURVIVES("rm_format_shape(NULL out)", (rm_format_shape(2, (int64_t[2]){1, 2}, NULL, 8), 1));
    rm_tensor_info ti;
    SURVIVES("rm_file_tensor(NULL)", rm_file_tensor(NULL, 0, &ti) == RM_ERR_ARG);
    SURVIVES("rm_file_run_info(NULL)", rm_file_run_info(NULL, &r, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_file_restore(NULL)", rm_file_restore(NULL, s, NULL, err, sizeof err) == RM_ERR_ARG);
    rm_strategy strat;
    int param;
    int64_t bytes;
    double frac;
    SURVIVES("rm_parse_strategy(NULL s)", rm_parse_strategy(NULL, &strat, &param, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_parse_strategy(NULL out)", rm_parse_strategy("sqrt", NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_strategy_name(NULL out)", rm_strategy_name(strat, 0, NULL, 16) == 0);
    SURVIVES("rm_parse_size(NULL)", rm_parse_size(NULL, &bytes, &frac, err, sizeof err) == RM_ERR_ARG && err[0]);
    SURVIVES("rm_parse_size(NULL out)", rm_parse_size("1GiB", NULL, NULL, NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_step_micro(NULL s)", rm_step_micro(NULL, 0, NULL, &loss) == RM_ERR_ARG);
    SURVIVES("rm_step_micro(NULL micro)", rm_step_micro(s, 0, NULL, &loss) == RM_ERR_ARG || rm_step_micro(s, 0, NULL, &loss) == RM_OK);
    SURVIVES("rm_read_file(NULL path)", rm_read_file(NULL, 10, (char *[]){NULL}, NULL, err, sizeof err) == RM_ERR_ARG);
    rm_session_free(s);
    rm_graph_free(g);
}

/* The public functions of the other milestones (new ops, models, seq2seq
 * data, traces, charts): the same rule. */
static void null_newer_api(void) {
    char err[256] = "";
    rm_model_io io;
    SURVIVES("rm_attention_general(NULL g)", rm_attention_general(NULL, 0, 1, 2, -1, 1, 1) == -1);
    SURVIVES("rm_concat(NULL g)", rm_concat(NULL, 0, 1) == -1);
    SURVIVES("rm_mul(NULL g)", rm_mul(NULL, 0, 1) == -1);
    SURVIVES("rm_rmsnorm(NULL g)", rm_rmsnorm(NULL, 0, 1, 1e-5f) == -1);
    SURVIVES("rm_rope(NULL g)", rm_rope(NULL, 0, 1, 1e4f) == -1);
    SURVIVES("rm_silu(NULL g)", rm_silu(NULL, 0) == -1);
    SURVIVES("rm_swiglu(NULL g)", rm_swiglu(NULL, 0, 1) == -1);
    SURVIVES("rm_softmax_ce_ignore(NULL g)", rm_softmax_ce_ignore(NULL, 0, 1, -1) == -1);
    rm_graph *g = rm_graph_new();
    SURVIVES("rm_llama_build(NULL config)", rm_llama_build(g, NULL, &io) == RM_ERR_ARG);
    SURVIVES("rm_encdec_build(NULL config)", rm_encdec_build(g, NULL, &io) == RM_ERR_ARG);
    SURVIVES("rm_uvit_build(NULL config)", rm_uvit_build(g, NULL, &io) == RM_ERR_ARG);
    SURVIVES("rm_llama_build(NULL g)", rm_llama_build(NULL, NULL, NULL) == RM_ERR_ARG);
    rm_graph_free(g);
    SURVIVES("rm_pairs_load(NULL path)", rm_pairs_load(NULL, NULL, err, sizeof err) == RM_ERR_ARG);
    SURVIVES("rm_pairs_free(NULL)", (rm_pairs_free(NULL), 1));
    SURVIVES("rm_seq2seq_batch(NULL)", rm_seq2seq_batch(NULL, 1, 0, 1, 4, NULL, NULL, NULL, NULL) == RM_ERR_ARG);
    SURVIVES("rm_seq2seq_fill(NULL)", rm_seq2seq_fill(NULL, NULL, NULL, 1, 0) == RM_ERR_ARG);
    SURVIVES("rm_data_fill_rows(NULL)",
             rm_data_fill_rows(NULL, NULL, NULL, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 0, 1, 0) == RM_ERR_ARG);
    SURVIVES("rm_trace_enable(NULL)", rm_trace_enable(NULL, 0) == RM_ERR_ARG);
    SURVIVES("rm_trace_ready(NULL)", rm_trace_ready(NULL) == 0);
    SURVIVES("rm_trace_write(NULL)", rm_trace_write(NULL, "/tmp/x", 0, NULL, NULL, err, sizeof err) != RM_OK && err[0]);
    SURVIVES("rm_chart_svg(NULL)", rm_chart_svg(NULL, "/tmp/x", err, sizeof err) == RM_ERR_ARG);
}

/* Class 8: UB. Under -fsanitize=undefined -fno-sanitize-recover these abort
 * at 13ccd50; without the sanitizer they check the values. */
static void undefined_behaviour(void) {
    volatile float nan = NAN;
    CHECK(isnan(rm_fast_expf(nan)), "rm_fast_expf(NaN) must be NaN");
    CHECK(isnan(rm_sigmoidf(nan)), "rm_sigmoidf(NaN) must be NaN");
    CHECK(rm_fast_expf(-1000.0f) >= 0 && rm_fast_expf(-1000.0f) < 1e-30f, "exp(-1000) ~ 0");
    CHECK(fabsf(rm_fast_expf(1.0f) - 2.7182817f) < 1e-6f, "exp(1)");
    /* a chain whose sizes add up near 2^63: refused with a message, no overflow */
    const char *huge = "{\"stages\":[{\"uf\":1,\"ub\":1,\"a\":9e18,\"ab\":9e18},"
                       "{\"uf\":1,\"ub\":1,\"a\":9e18,\"ab\":9e18,\"ft\":9e18,\"bt\":9e18}]}";
    char err[256] = "", *res = NULL;
    rm_status st = rm_plan_chain(huge, INT64_MAX, &res, err, sizeof err);
    CHECK(st != RM_OK && err[0], "a chain of 9e18-byte stages: status %d, '%s'", st, err);
    free(res);
    FILE *devnull = fopen("/dev/null", "w");
    err[0] = 0;
    st = rm_plan_chain_sweep(huge, 5, devnull, err, sizeof err);
    CHECK(st != RM_OK && err[0], "sweeping a chain of 9e18-byte stages: status %d, '%s'", st, err);
    /* a big but plannable chain, with a budget far above it */
    const char *big = "{\"stages\":[{\"uf\":1,\"ub\":1,\"a\":1e17,\"ab\":1e17},{\"uf\":1,\"ub\":1,\"a\":1e17,\"ab\":1e17}]}";
    res = NULL;
    st = rm_plan_chain(big, INT64_MAX, &res, err, sizeof err);
    CHECK(st == RM_OK && res && strstr(res, "\"feasible\":true"), "a 1e17-byte chain, budget 2^63-1: %d %s", st,
          res ? res : err);
    free(res);
    CHECK(rm_plan_chain_sweep(big, 5, devnull, err, sizeof err) == RM_OK, "sweeping a 1e17-byte chain: %s", err);
    fclose(devnull);
    /* an optimizer update count that would wrap: an error, parameters unchanged */
    rm_model_io io;
    rm_graph *g;
    rm_session *s = small_session(&g, &io);
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    rm_optim *o;
    CHECK(rm_optim_new(s, &oc, &o) == RM_OK, "optimizer");
    float loss;
    CHECK(rm_step(s, 0, &loss) == RM_OK, "step");
    rm_optim_set_updates(o, UINT64_MAX);
    st = rm_optim_step(o, 1e-3f, NULL);
    CHECK(st != RM_OK && rm_session_errmsg(s)[0], "an update count at 2^64-1: status %d", st);
    int finite = 1;
    for (size_t i = 0; i < g->param_floats; i++) finite &= isfinite(s->params[i]) != 0;
    CHECK(finite, "the parameters stay finite when the update count would wrap");
    rm_optim_free(o);
    /* hyperparameters that would divide by zero or give NaN: refused */
    const struct { float b1, b2, eps, wd, clip; const char *name; } bad[] = {
        {1.0f, 0.95f, 1e-8f, 0.1f, 1.0f, "beta1"}, {0.9f, -0.1f, 1e-8f, 0.1f, 1.0f, "beta2"},
        {0.9f, 0.95f, 0.0f, 0.1f, 1.0f, "eps"},    {0.9f, 0.95f, NAN, 0.1f, 1.0f, "eps"},
        {0.9f, 0.95f, 1e-8f, -1.0f, 1.0f, "weight_decay"}, {0.9f, 0.95f, 1e-8f, 0.1f, INFINITY, "grad_clip"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rm_optim_config c = oc;
        c.beta1 = bad[i].b1, c.beta2 = bad[i].b2, c.eps = bad[i].eps;
        c.weight_decay = bad[i].wd, c.grad_clip = bad[i].clip;
        o = (rm_optim *)&c;
        st = rm_optim_new(s, &c, &o);
        CHECK(st == RM_ERR_ARG && o == NULL && strstr(rm_session_errmsg(s), bad[i].name),
              "rm_optim_new with a bad %s: status %d, '%s'", bad[i].name, st, rm_session_errmsg(s));
    }
    oc.kind = (rm_optim_kind)7;
    CHECK(rm_optim_new(s, &oc, &o) == RM_ERR_ARG && strstr(rm_session_errmsg(s), "kind"), "an unknown kind: '%s'",
          rm_session_errmsg(s));
    rm_session_free(s);
    rm_graph_free(g);
}

/* A plan-only session of the small GPT under `budget`. */
static rm_status plan_for(const char *budget, rm_graph **g, rm_session **s) {
    rm_model_io io;
    *g = small_graph(&io);
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    o.dry_run = 1;
    o.memory_budget = budget;
    *s = NULL;
    return rm_compile(*g, &o, s);
}

/* Class 1 (fixed by the session API): a token id or target outside
 * [0, vocab) is refused by the step, naming the position and the value,
 * instead of reading or writing outside the embedding or the logits. */
static void bad_ids(void) {
    const int32_t bad[] = {-3, 2000, 2000000000};
    for (int k = 0; k < 6; k++) {
        rm_model_io io;
        rm_graph *g;
        rm_session *s = small_session(&g, &io);
        int32_t *tok = rm_value_data(s, io.tokens), *tgt = rm_value_data(s, io.targets);
        int32_t *where = k < 3 ? tok : tgt;
        where[5] = bad[k % 3];
        float loss;
        rm_status st = rm_step(s, 0, &loss);
        char want[32];
        snprintf(want, sizeof want, "%d", (int)bad[k % 3]);
        CHECK(st == RM_ERR_ARG && strstr(rm_session_errmsg(s), want), "%s id %d: status %d, '%s'",
              k < 3 ? "token" : "target", (int)bad[k % 3], st, rm_session_errmsg(s));
        rm_session_free(s);
        rm_graph_free(g);
    }
}

/* Class 9: budgets at the edges are refused or met, with a message. */
static void budget_edges(void) {
    const char *bad[] = {"1e19", "nan", "inf", "1e30", "-1", "0", "", "12XB", "nan%", "1e30%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_graph *g;
        rm_session *s;
        rm_status st = plan_for(bad[i], &g, &s);
        const char *msg = rm_graph_errmsg(g);
        CHECK(st != RM_OK && s == NULL && msg[0] && !strstr(msg, "budget -"), "budget '%s': status %d, message '%s'",
              bad[i], st, msg);
        rm_session_free(s);
        rm_graph_free(g);
    }
    /* a budget far above store-all plans store-all; min_budget never exceeds a feasible plan's arena */
    const char *good[] = {"1e18", "100%", "60%"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        rm_graph *g;
        rm_session *s;
        rm_status st = plan_for(good[i], &g, &s);
        CHECK(st == RM_OK, "budget '%s': %s", good[i], rm_graph_errmsg(g));
        if (st == RM_OK) {
            rm_plan_info p;
            rm_memory_info m;
            rm_plan(s, &p);
            rm_memory(s, &m);
            CHECK(p.min_budget_bytes > 0 && p.min_budget_bytes <= m.activation_arena_bytes,
                  "budget '%s': min_budget_bytes %zu > the feasible plan's arena %zu", good[i], p.min_budget_bytes,
                  m.activation_arena_bytes);
        }
        rm_session_free(s);
        rm_graph_free(g);
    }
}

int main(void) {
    null_graph_builders();
    null_models();
    null_sessions();
    null_optim_and_chain();
    null_data_and_files();
    null_newer_api();
    undefined_behaviour();
    budget_edges();
    bad_ids();
    return check_done("test_harden");
}
