/* test_trace.c: rm_trace_enable / rm_trace_write through the public API: the
 * file is valid JSON in the Chrome Trace Event Format, holds one duration
 * event per executed instruction in the categories forward, recompute,
 * backward and optimizer, a counter whose maximum equals the session's
 * activation_bytes_measured, and the metadata; odd stage names are escaped. */
#include "check.h"
#include "remat.h"
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

typedef struct counts {
    int fwd, rec, bwd, opt, spans;
    double counter_max;
    int named_by_stage; /* every instruction's name starts with its stage */
} counts;

static cJSON *parse_trace(const char *path, counts *c) {
    memset(c, 0, sizeof *c);
    char *text = slurp(path);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(root != NULL, "%s is not valid JSON", path);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents"), *e;
    CHECK(cJSON_IsArray(ev), "traceEvents is an array");
    c->named_by_stage = 1;
    cJSON_ArrayForEach(e, ev) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "ph"));
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "cat"));
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
        if (ph && !strcmp(ph, "C")) {
            double b = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(args, "bytes"));
            if (b > c->counter_max) c->counter_max = b;
        }
        if (!ph || strcmp(ph, "X") || !cat) continue;
        c->fwd += !strcmp(cat, "forward"), c->rec += !strcmp(cat, "recompute");
        c->bwd += !strcmp(cat, "backward"), c->opt += !strcmp(cat, "optimizer");
        if (strcmp(cat, "optimizer")) {
            c->spans++;
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"));
            const char *stage = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(args, "stage"));
            if (!name || !stage || strncmp(name, stage, strlen(stage))) c->named_by_stage = 0;
        }
    }
    return root;
}

static void fill(rm_session *s, const rm_model_io *io, int n) {
    int32_t *tok = rm_value_data(s, io->tokens), *tgt = rm_value_data(s, io->targets);
    for (int i = 0; i < n; i++) tok[i] = (i * 7) % 32, tgt[i] = (i * 7 + 1) % 32;
}

/* A GPT under `checkpoint` or `budget`: trace step 1 of 3, check the file. */
static void test_gpt(const char *checkpoint, const char *budget, const char *path) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_gpt_config gc = {.layers = 3, .dim = 32, .heads = 4, .context = 16, .vocab = 32, .batch = 4, .dropout = 0.1f};
    CHECK(rm_gpt_build(g, &gc, &io) == RM_OK, "gpt build");
    rm_options o;
    rm_options_default(&o);
    o.threads = 2;
    o.checkpoint = checkpoint;
    o.memory_budget = budget;
    rm_session *s = NULL;
    rm_optim *opt = NULL;
    rm_optim_config oc;
    rm_optim_config_default(&oc);
    char err[256];
    if (rm_compile(g, &o, &s) != RM_OK || rm_optim_new(s, &oc, &opt) != RM_OK) {
        CHECK(0, "compile %s: %s", checkpoint, rm_graph_errmsg(g));
        rm_session_free(s), rm_graph_free(g);
        return;
    }
    CHECK(rm_trace_write(s, path, 0, NULL, NULL, err, sizeof err) == RM_ERR_STATE, "nothing to write before enabling");
    CHECK(rm_trace_enable(s, 1) == RM_OK, "enable");
    CHECK(!rm_trace_ready(s), "not ready before the step");
    float loss;
    for (int step = 0; step < 3; step++) {
        fill(s, &io, 4 * 16);
        CHECK(rm_step(s, (uint64_t)step, &loss) == RM_OK && rm_optim_step(opt, 1e-3f, NULL) == RM_OK, "step");
        if (step == 0) CHECK(!rm_trace_ready(s), "step 0 is not the traced step");
    }
    CHECK(rm_trace_ready(s), "ready after step 1");
    const char *k[] = {"model"}, *v[] = {"tiny gpt"};
    CHECK(rm_trace_write(s, path, 1, k, v, err, sizeof err) == RM_OK, "write: %s", err);
    rm_memory_info m;
    rm_memory(s, &m);
    counts c;
    cJSON *root = parse_trace(path, &c);
    CHECK(c.fwd > 0 && c.bwd > 0 && c.opt == 1, "%s: forward %d backward %d optimizer %d", checkpoint, c.fwd, c.bwd,
          c.opt);
    CHECK(c.rec > 0, "%s: recompute events %d", checkpoint, c.rec);
    CHECK(c.spans == m.n_instructions, "%s: %d events for %d instructions", checkpoint, c.spans, m.n_instructions);
    CHECK(c.named_by_stage, "events are named after their stage");
    CHECK((size_t)c.counter_max == m.activation_bytes_measured && m.activation_bytes_measured > 0,
          "%s: counter max %.0f != activation_bytes_measured %zu", checkpoint, c.counter_max,
          m.activation_bytes_measured);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "otherData");
    const char *strategy = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "strategy"));
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(meta, "model"));
    CHECK(strategy && (budget || !strcmp(strategy, checkpoint)), "metadata strategy %s", strategy ? strategy : "-");
    CHECK(model && !strcmp(model, "tiny gpt"), "metadata model");
    double b = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(meta, "budget_bytes"));
    CHECK(budget ? b > 0 : b == 0, "metadata budget_bytes %.0f", b);
    cJSON_Delete(root);
    rm_optim_free(opt);
    rm_session_free(s);
    rm_graph_free(g);
}

/* Stage names are the user's: quotes, backslashes, newlines stay valid JSON;
 * a step never reached leaves nothing to write; a dry run cannot trace. */
static void test_edges(const char *path) {
    rm_graph *g = rm_graph_new();
    int64_t xs[2] = {4, 8}, ws[2] = {8, 8}, ts[1] = {4};
    rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, xs), y = rm_input(g, "y", RM_DTYPE_I32, 1, ts);
    rm_stage_begin(g, "odd \"stage\"\\\n\x01");
    rm_val w = rm_param(g, "w", 2, ws, RM_INIT_NORMAL, 0.1f, 1);
    rm_set_loss(g, rm_softmax_ce(g, rm_relu(g, rm_linear(g, x, w, -1)), y));
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    rm_session *s = NULL;
    char err[256];
    CHECK(rm_compile(g, &o, &s) == RM_OK, "compile: %s", rm_graph_errmsg(g));
    if (!s) {
        rm_graph_free(g);
        return;
    }
    CHECK(rm_trace_enable(s, 7) == RM_OK, "enable step 7");
    float loss;
    CHECK(rm_step(s, 0, &loss) == RM_OK, "step 0");
    CHECK(rm_trace_write(s, path, 0, NULL, NULL, err, sizeof err) == RM_ERR_STATE, "step 7 never ran");
    CHECK(rm_trace_enable(s, 1) == RM_OK && rm_step(s, 1, &loss) == RM_OK, "step 1");
    CHECK(rm_trace_write(s, path, 0, NULL, NULL, err, sizeof err) == RM_OK, "write: %s", err);
    counts c;
    cJSON_Delete(parse_trace(path, &c));
    CHECK(c.fwd == 3 && c.bwd > 0 && c.opt == 0, "no optimizer ran: fwd %d opt %d", c.fwd, c.opt);
    CHECK(rm_trace_write(s, "/nonexistent-dir/t.json", 0, NULL, NULL, err, sizeof err) == RM_ERR_IO, "bad path");
    rm_session_free(s);
    o.dry_run = 1;
    CHECK(rm_compile(g, &o, &s) == RM_OK, "dry compile");
    CHECK(rm_trace_enable(s, 0) == RM_ERR_STATE, "a dry run cannot trace");
    rm_session_free(s);
    CHECK(rm_trace_enable(NULL, 0) == RM_ERR_ARG && !rm_trace_ready(NULL), "NULL session");
    rm_graph_free(g);
}

int main(void) {
    char path[] = "/tmp/remat_trace_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    close(fd);
    test_gpt("blocks", NULL, path);
    test_gpt("revolve:2", NULL, path);
    test_gpt("none", "60%", path);
    test_edges(path);
    remove(path);
    return check_done("test_trace");
}
