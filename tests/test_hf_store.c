/* test_hf_store.c: frozen weights of a Hugging Face folder kept in 2 bytes
 * (rm_hf_store_frozen, rm_param_store): what may and may not be, the same
 * training as fp32 storage of the same values under every strategy, files
 * in and out; rm_hf_mark_loaded (weights not drawn at rm_compile). Folders
 * from hf_folders.h; test_hf.c checks the folders themselves. */
#include "hf_folders.h"
#include "exec/exec.h"

/* A LoRA llama (folder in BF16) with its base kept in BF16 against the same
 * values kept in fp32: the same adapters after 3 steps; half the frozen
 * bytes; the saved file holds BF16 weights that load back bit for bit, and
 * into fp32 storage exactly. What may not be kept in 2 bytes is refused. */
static void test_store(void) {
    shape_cfg c = {2, 32, 4, 2, 48, 60, 1};
    char dir[400], err[1024], path[600];
    rm_hf *m = open_made("store", &c, "BF16", dir, sizeof dir);
    if (!m) return;
    rm_graph *g[2];
    rm_session *s[2] = {NULL, NULL};
    rm_model_io io;
    rm_optim *o[2] = {NULL, NULL};
    size_t param_bytes[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        rm_llama_config lc;
        memset(&lc, 0, sizeof lc);
        rm_hf_llama_config(m, &lc);
        lc.context = 8, lc.batch = 2, lc.lora.rank = 2, lc.lora.alpha = 4.0f;
        g[k] = rm_graph_new();
        int n = 0;
        CHECK(rm_llama_build(g[k], &lc, &io) == RM_OK, "store build: %s", rm_graph_errmsg(g[k]));
        if (k == 1) CHECK(rm_hf_store_frozen(m, g[k], &n) == RM_OK && n == 15, "store: %d kept in 2 bytes", n);
        rm_options op;
        rm_options_default(&op);
        op.optim.grad_clip = 0.0f;
        CHECK(rm_compile(g[k], &op, &s[k]) == RM_OK, "store compile: %s", rm_graph_errmsg(g[k]));
        if (!s[k]) continue;
        CHECK(rm_hf_load(m, s[k], NULL, err, sizeof err) == RM_OK, "store load: %s", err);
        rm_memory_info mi;
        rm_memory(s[k], &mi);
        param_bytes[k] = mi.param_bytes;
        rm_optim_new(s[k], NULL, &o[k]);
        int32_t *tok = rm_value_data(s[k], io.tokens), *tgt = rm_value_data(s[k], io.targets);
        for (int step = 0; step < 3; step++) {
            for (int i = 0; i < 16; i++) tok[i] = (i * 7 + step) % 60, tgt[i] = (i * 11 + step) % 60;
            float l;
            CHECK(rm_step(s[k], (uint64_t)step, &l) == RM_OK && rm_optim_step(o[k], 1e-2f, NULL) == RM_OK,
                  "store step: %s", rm_session_errmsg(s[k]));
        }
    }
    if (s[0] && s[1]) {
        int differ = 0, adapters = 0;
        for (int i = 0; i < rm_param_count(g[0]); i++) {
            const rm_val v = rm_param_at(g[0], i);
            if (!rm_param_trainable(g[0], v)) continue;
            adapters++;
            differ += memcmp(rm_value_data(s[0], v), rm_value_data(s[1], v), (size_t)rm_numel(g[0], v) * 4) != 0;
        }
        CHECK(adapters == 28 && differ == 0, "store: %d of %d adapters differ between bf16 and fp32 storage", differ,
              adapters);
        /* the frozen bytes halve: 2 bytes a frozen weight instead of 4 */
        CHECK(param_bytes[1] < param_bytes[0] * 0.6, "store: params %zu bytes in bf16 vs %zu in fp32",
              param_bytes[1], param_bytes[0]);
        const rm_val emb = rm_param_by_name(g[1], "model.embed_tokens.weight");
        CHECK(rm_param_store_dtype(g[1], emb) == RM_DTYPE_BF16 &&
                  rm_param_store_dtype(g[1], rm_param_by_name(g[1], "model.norm.weight")) == RM_DTYPE_F32,
              "store: the embedding in bf16, the norms in fp32");
        /* saved in BF16; loaded back bit for bit, and into fp32 exactly */
        snprintf(path, sizeof path, "%s/store_state.safetensors", tmpdir);
        CHECK(rm_save_params(s[1], path, 0, NULL, NULL, err, sizeof err) == RM_OK, "store save: %s", err);
        rm_file *f = NULL;
        rm_tensor_info ti = {0};
        CHECK(rm_file_open(path, &f, err, sizeof err) == RM_OK, "%s", err);
        for (int i = 0; f && i < rm_file_tensor_count(f); i++)
            if (rm_file_tensor(f, i, &ti) == RM_OK && !strcmp(ti.name, "model.embed_tokens.weight")) break;
        CHECK(f && !strcmp(ti.dtype, "BF16") && ti.bytes == 60 * 32 * 2, "store: the embedding saved as %s",
              f ? ti.dtype : "?");
        rm_file_close(f);
        uint16_t before[64];
        memcpy(before, rm_value_data(s[1], emb), sizeof before);
        memset(rm_value_data(s[1], emb), 0, sizeof before);
        CHECK(rm_load_params(s[1], path, err, sizeof err) == RM_OK &&
                  memcmp(before, rm_value_data(s[1], emb), sizeof before) == 0,
              "store: BF16 reloaded: %s", err);
        CHECK(rm_load_params(s[0], path, err, sizeof err) == RM_OK, "store: BF16 into fp32: %s", err);
        int wrong = 0;
        for (int i = 0; i < 64; i++) wrong += ((float *)rm_value_data(s[0], emb))[i] != rm_bf16_to_f32(before[i]);
        CHECK(wrong == 0, "store: BF16 widened into fp32 storage: %d wrong", wrong);
    }
    for (int k = 0; k < 2; k++) {
        rm_optim_free(o[k]);
        rm_session_free(s[k]);
        rm_graph_free(g[k]);
    }
    /* refusals: not frozen; a norm's weight (rmsnorm takes fp32 only); after compile */
    rm_graph *h = rm_graph_new();
    rm_llama_config lc = {.layers = 1, .dim = 16, .heads = 2, .context = 4, .vocab = 20, .batch = 1};
    rm_llama_build(h, &lc, &io);
    const rm_val norm = rm_param_by_name(h, "model.norm.weight"), q = rm_param_by_name(h, "model.layers.0.self_attn.q_proj.weight");
    CHECK(rm_param_store(h, q, RM_DTYPE_BF16) == RM_ERR_ARG && strstr(rm_graph_errmsg(h), "not a frozen"),
          "store: a trainable weight: %s", rm_graph_errmsg(h));
    rm_graph_free(h);
    h = rm_graph_new();
    rm_llama_build(h, &lc, &io);
    rm_param_freeze(h, norm);
    rm_session *sx = NULL;
    rm_options op;
    rm_options_default(&op);
    CHECK(rm_param_store(h, norm, RM_DTYPE_BF16) == RM_OK && rm_compile(h, &op, &sx) == RM_ERR_ARG &&
              strstr(rm_graph_errmsg(h), "rmsnorm"),
          "store: a norm's weight in bf16: %s", rm_graph_errmsg(h));
    CHECK(rm_param_store(h, norm, (rm_dtype)7) == RM_ERR_ARG, "store: dtype 7");
    rm_session_free(sx);
    rm_graph_free(h);
    h = rm_graph_new();
    rm_llama_build(h, &lc, &io);
    rm_param_freeze(h, q);
    int n = 0;
    CHECK(rm_store_frozen(h, RM_DTYPE_F16, &n) == RM_OK && n == 1 && rm_compile(h, &op, &sx) == RM_OK,
          "store: f16 q_proj: %d, %s", n, rm_graph_errmsg(h));
    CHECK(rm_param_store(h, q, RM_DTYPE_BF16) == RM_ERR_STATE, "store: after rm_compile");
    rm_session_free(sx);
    rm_graph_free(h);
    rm_hf_close(m);
}

/* A bf16-kept LoRA llama with adapter dropout under every strategy and a
 * budget: the adapters bit-identical to `none`. */
static void test_store_strategies(void) {
    shape_cfg c = {3, 32, 4, 2, 48, 60, 1};
    char dir[400], err[1024];
    rm_hf *m = open_made("store_strat", &c, "BF16", dir, sizeof dir);
    if (!m) return;
    const char *strategies[] = {"none", "blocks", "sqrt", "selective", "revolve:2", "60%"};
    float *first = NULL;
    size_t n_first = 0;
    for (int k = 0; k < 6; k++) {
        rm_llama_config lc;
        memset(&lc, 0, sizeof lc);
        rm_hf_llama_config(m, &lc);
        lc.context = 8, lc.batch = 2, lc.dropout = 0.1f, lc.lora.rank = 2, lc.lora.alpha = 4.0f, lc.lora.dropout = 0.2f;
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_session *s = NULL;
        rm_optim *o = NULL;
        rm_options op;
        rm_options_default(&op);
        if (k == 5) op.memory_budget = strategies[k];
        else op.checkpoint = strategies[k];
        if (rm_llama_build(g, &lc, &io) != RM_OK || rm_hf_store_frozen(m, g, NULL) != RM_OK ||
            rm_compile(g, &op, &s) != RM_OK || rm_hf_load(m, s, NULL, err, sizeof err) != RM_OK ||
            rm_optim_new(s, NULL, &o) != RM_OK) {
            CHECK(0, "store strategies %s: %s %s", strategies[k], rm_graph_errmsg(g), err);
        } else {
            int32_t *tok = rm_value_data(s, io.tokens), *tgt = rm_value_data(s, io.targets);
            for (int step = 0; step < 3; step++) {
                for (int i = 0; i < 16; i++) tok[i] = (i * 5 + step) % 60, tgt[i] = (i * 13 + step) % 60;
                float l;
                CHECK(rm_step(s, (uint64_t)step, &l) == RM_OK && rm_optim_step(o, 1e-2f, NULL) == RM_OK,
                      "store strategies %s step: %s", strategies[k], rm_session_errmsg(s));
            }
            rm_memory_info mi;
            rm_memory(s, &mi);
            const float *adapters = s->params; /* the trainable parameters lie first (rm_graph_layout) */
            const size_t bytes = mi.trainable_bytes;
            if (k == 0) {
                first = malloc(bytes);
                if (first) memcpy(first, adapters, bytes);
                n_first = bytes;
                int moved = 0; /* the B matrices start at zero: they moved */
                for (size_t i = 0; i < bytes / 4; i++) moved += adapters[i] != 0.0f;
                CHECK(bytes >= 42 * 4 * 2 && moved > (int)(bytes / 8), "store strategies: %d of %zu adapter values "
                      "nonzero", moved, bytes / 4);
            } else {
                CHECK(first && bytes == n_first && memcmp(first, adapters, bytes) == 0,
                      "store strategies: %s differs from none", strategies[k]);
            }
        }
        rm_optim_free(o);
        rm_session_free(s);
        rm_graph_free(g);
    }
    free(first);
    rm_hf_close(m);
}

/* rm_hf_mark_loaded: the folder's weights are not drawn at rm_compile (zero
 * until rm_hf_load), a parameter the folder lacks is drawn as before, and
 * the loaded session is the same bit for bit. */
static void test_mark_loaded(void) {
    shape_cfg c = {2, 16, 4, 2, 24, 40, 0};
    char dir[400], err[1024];
    rm_hf *m = open_made("marked", &c, "BF16", dir, sizeof dir);
    rm_llama_config lc;
    memset(&lc, 0, sizeof lc);
    if (m) rm_hf_llama_config(m, &lc);
    lc.context = 4, lc.batch = 1;
    rm_graph *g[2];
    rm_session *s[2] = {NULL, NULL};
    rm_val extra[2] = {-1, -1};
    int n = -1;
    for (int k = 0; k < 2 && m; k++) {
        rm_model_io io;
        rm_options o;
        rm_options_default(&o);
        o.forward_only = 1;
        g[k] = rm_graph_new();
        if (rm_llama_build(g[k], &lc, &io) != RM_OK) continue;
        extra[k] = rm_param(g[k], "adapter.weight", 1, (int64_t[]){5}, RM_INIT_NORMAL, 0.02f, 0);
        if (k == 1) CHECK(rm_hf_mark_loaded(m, g[k], &n) == RM_OK && n == 21, "mark: %d marked", n);
        CHECK(rm_compile(g[k], &o, &s[k]) == RM_OK, "mark: compile %s", rm_graph_errmsg(g[k]));
    }
    const rm_val wq = s[1] ? rm_param_by_name(g[1], "model.layers.0.self_attn.q_proj.weight") : -1;
    int zero = wq >= 0, same = s[0] && s[1];
    for (int64_t e = 0; wq >= 0 && e < rm_numel(g[1], wq); e++) zero &= ((const float *)rm_value_data(s[1], wq))[e] == 0;
    CHECK(zero, "mark: a marked weight is zero before the load, not drawn");
    for (int k = 0; k < 2 && same; k++) same = rm_hf_load(m, s[k], NULL, err, sizeof err) == RM_OK;
    for (int p = 0; same && p < rm_param_count(g[0]); p++) {
        const rm_val v = rm_param_at(g[0], p);
        same = !memcmp(rm_value_data(s[0], v), rm_value_data(s[1], rm_param_at(g[1], p)),
                       (size_t)rm_numel(g[0], v) * sizeof(float));
    }
    CHECK(same && extra[0] >= 0, "mark: loaded sessions differ (or did not load: %s)", err);
    CHECK(rm_hf_mark_loaded(NULL, g[0], NULL) == RM_ERR_ARG && rm_hf_mark_loaded(m, NULL, &n) == RM_ERR_ARG && n == 0,
          "mark: NULL arguments");
    for (int k = 0; k < 2 && m; k++) rm_session_free(s[k]), rm_graph_free(g[k]);
    rm_hf_close(m);
}

int main(void) {
    if (check_tmpdir(tmpdir, sizeof tmpdir, "test_hf_store")) return 1;
    test_store();
    test_store_strategies();
    test_mark_loaded();
    check_rmdir(tmpdir);
    return check_done("test_hf_store");
}
