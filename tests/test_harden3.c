/* test_harden3.c: the library's classes of the third hardening round
 * (issue 28); the command line's are in tests/test_harden3.sh.
 *  2. evaluation has a finite answer or none: a batch whose loss is not
 *     finite stops rm_evaluate_part / rm_evaluate with RM_ERR_STATE naming
 *     the first such batch (it returned RM_OK and a NaN mean);
 *  3. the narrowing rule: a finite value that a 2-byte parameter cannot
 *     hold (F16 above 65504, BF16 above 3.3895e38) is refused naming the
 *     tensor, before a value is written, by every loader (rm_load_params,
 *     rm_hf_load), whatever the source dtype;
 *  6. a NUL character in JSON (a byte, or \u0000 in a string) is refused
 *     by every JSON reader: config.json, the index, a safetensors header;
 *  7. every list of names has no item twice (rm_freeze_params' globs,
 *     LoRA targets), besides no empty item and no white space;
 *  4. a limit refused without the fused optimizer names the least limit
 *     with it (the trainable state pages only through it);
 *  5. the scratch bandwidth: a median of rounds, their spread told by
 *     rm_paging; given figures (both directions) skip the probe. */
#include "check.h"
#include "scratch_dir.h"
#include "remat.h"
#include "train/hf.h"
#include "train/safetensors.h"
#include "util/util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[256];

/* Class 2: token 7 appears only from batch 3 on (batches of 2 x 8 + 1
 * tokens, sequential); its embedding row made NaN (a value no file could
 * bring: the loaders refuse it), so the losses of batches 3 and later are
 * NaN and those before finite. An untied llama: the head reads no row 7. */
static void eval_not_finite(void) {
    rm_llama_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    rm_session *s = NULL;
    CHECK(rm_llama_build(g, &c, &io) == RM_OK && rm_compile(g, &o, &s) == RM_OK, "llama: %s", rm_graph_errmsg(g));
    if (!s) return;
    int32_t tok[200];
    for (int i = 0; i < 200; i++) tok[i] = i < 3 * 16 + 1 ? i % 5 : 7;
    rm_dataset d;
    char err[256];
    CHECK(rm_data_from_tokens(&d, "seven", tok, 200, err, sizeof err) == RM_OK, "data: %s", err);
    rm_eval_result r;
    CHECK(rm_evaluate_part(s, &io, &d, RM_DATA_TRAIN, 0, &r) == RM_OK && isfinite(r.mean_loss), "a plain model: %s",
          rm_session_errmsg(s));
    float *emb = rm_value_data(s, rm_param_by_name(g, "model.embed_tokens.weight"));
    for (int k = 0; emb && k < 16; k++) emb[7 * 16 + k] = NAN;
    CHECK(rm_evaluate_part(s, &io, &d, RM_DATA_TRAIN, 3, &r) == RM_OK && isfinite(r.mean_loss),
          "the first 3 batches hold no token 7: %s", rm_session_errmsg(s));
    rm_status st = rm_evaluate_part(s, &io, &d, RM_DATA_TRAIN, 0, &r);
    CHECK(st == RM_ERR_STATE && strstr(rm_session_errmsg(s), "batch 3 of 12") &&
              strstr(rm_session_errmsg(s), "NaN") && strstr(rm_session_errmsg(s), "'seven'"),
          "a batch whose loss is NaN: %d '%s'", (int)st, rm_session_errmsg(s));
    /* rm_evaluate (the validation part: the second half, all token 7) follows the same rule */
    CHECK(rm_data_split(&d, 0.5, 2, 8, err, sizeof err) == RM_OK, "split: %s", err);
    float mean = 0;
    st = rm_evaluate(s, &io, &d, 0, &mean);
    CHECK(st == RM_ERR_STATE && strstr(rm_session_errmsg(s), "batch 0 of"), "rm_evaluate: %d '%s'", (int)st,
          rm_session_errmsg(s));
    rm_data_free(&d);
    rm_session_free(s);
    rm_graph_free(g);
}

/* A llama whose base is frozen (LoRA) and kept in `dt`, its session. */
static rm_session *llama(rm_graph **g, rm_dtype dt, int lora) {
    rm_llama_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    if (lora) c.lora = (rm_lora_config){.rank = 2, .alpha = 4.0f};
    rm_model_io io;
    rm_options o;
    rm_options_default(&o);
    o.threads = 1;
    rm_session *s = NULL;
    *g = rm_graph_new();
    if (rm_llama_build(*g, &c, &io) != RM_OK || (dt != RM_DTYPE_F32 && rm_store_frozen(*g, dt, NULL) != RM_OK) ||
        rm_compile(*g, &o, &s) != RM_OK) {
        fprintf(stderr, "llama: %s\n", rm_graph_errmsg(*g));
        exit(1);
    }
    return s;
}

/* Class 3: a weight of `big` in an F32 file, loaded into a base kept in dt. */
static void narrowing(float big, rm_dtype dt, const char *name) {
    char path[400], folder[300], err[1024];
    snprintf(folder, sizeof folder, "%s/hf_%s", dir, name);
    mkdir(folder, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    rm_graph *g;
    rm_session *s = llama(&g, RM_DTYPE_F32, 0);
    const char *tensor = "model.layers.0.mlp.up_proj.weight";
    float *w = rm_value_data(s, rm_param_by_name(g, tensor));
    w[5] = big;
    CHECK(rm_save_params(s, path, 0, NULL, NULL, err, sizeof err) == RM_OK, "save: %s", err);
    rm_session_free(s);
    rm_graph_free(g);
    snprintf(path, sizeof path, "%s/config.json", folder);
    FILE *c = fopen(path, "w");
    fprintf(c, "{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, "
               "\"intermediate_size\": 64, \"vocab_size\": 32}\n");
    fclose(c);
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    /* rm_load_params and rm_hf_load: refused naming the tensor, nothing written */
    for (int hf = 0; hf < 2; hf++) {
        s = llama(&g, dt, 1);
        const rm_val v = rm_param_by_name(g, "model.layers.0.self_attn.q_proj.weight");
        unsigned char before[512];
        memcpy(before, rm_value_data(s, v), sizeof before);
        rm_status st;
        rm_hf *m = NULL;
        if (hf) {
            st = rm_hf_open(folder, &m, err, sizeof err);
            if (st == RM_OK) st = rm_hf_load(m, s, NULL, err, sizeof err);
            rm_hf_close(m);
        } else st = rm_load_params(s, path, err, sizeof err);
        CHECK(st == RM_ERR_FORMAT && strstr(err, tensor) && strstr(err, "does not fit") &&
                  strstr(err, dt == RM_DTYPE_F16 ? "F16" : "BF16") && strstr(err, "element 5"),
              "%s %s into %s: %d '%s'", hf ? "rm_hf_load" : "rm_load_params", name,
              dt == RM_DTYPE_F16 ? "F16" : "BF16", (int)st, err);
        CHECK(!memcmp(before, rm_value_data(s, v), sizeof before), "%s: a value was written before the refusal", name);
        rm_session_free(s);
        rm_graph_free(g);
        /* kept in F32 (or in BF16 for an F16 misfit), the same file loads */
        s = llama(&g, dt == RM_DTYPE_F16 ? RM_DTYPE_BF16 : RM_DTYPE_F32, 1);
        if (hf) {
            st = rm_hf_open(folder, &m, err, sizeof err);
            if (st == RM_OK) st = rm_hf_load(m, s, NULL, err, sizeof err);
            rm_hf_close(m);
        } else st = rm_load_params(s, path, err, sizeof err);
        CHECK(st == RM_OK, "%s into a wider dtype: '%s'", name, err);
        rm_session_free(s);
        rm_graph_free(g);
    }
}

/* Class 3 at initialisation: a frozen weight kept in F16 whose init draws
 * values past 65504 (std 1e5) is refused by rm_compile, naming it. */
static void narrowing_init(void) {
    for (int k = 0; k < 2; k++) {
        rm_graph *g = rm_graph_new();
        const int64_t xs[2] = {2, 8}, ws[2] = {4, 8}, ys[1] = {2};
        rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, xs), y = rm_input(g, "y", RM_DTYPE_I32, 1, ys);
        rm_val w = rm_param(g, "big", 2, ws, RM_INIT_NORMAL, k ? 1.0f : 1e5f, 1);
        rm_val t = rm_param(g, "t", 2, ws, RM_INIT_NORMAL, 0.1f, 1); /* something to train */
        rm_param_freeze(g, w);
        rm_set_loss(g, rm_softmax_ce(g, rm_add(g, rm_linear(g, x, w, -1), rm_linear(g, x, t, -1)), y));
        CHECK(rm_param_store(g, w, RM_DTYPE_F16) == RM_OK, "store: %s", rm_graph_errmsg(g));
        rm_options o;
        rm_options_default(&o);
        o.threads = 1;
        rm_session *s = NULL;
        rm_status st = rm_compile(g, &o, &s);
        if (k == 0)
            CHECK(st == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "'big'") && strstr(rm_graph_errmsg(g), "does not fit F16"),
                  "a frozen F16 weight of std 1e5: %d '%s'", (int)st, rm_graph_errmsg(g));
        else CHECK(st == RM_OK, "a frozen F16 weight of std 1: %s", rm_graph_errmsg(g));
        rm_session_free(s);
        rm_graph_free(g);
    }
}

/* Class 6: NUL characters in the JSON of config.json, an index, a header. */
static void json_nul(void) {
    char err[512], notes[256];
    rm_hf_config h;
    const char ok[] = "{\"model_type\": \"llama\", \"hidden_size\": 16, \"num_hidden_layers\": 1, "
                      "\"num_attention_heads\": 2, \"intermediate_size\": 8, \"vocab_size\": 10";
    struct { const char *tail; size_t extra; int good; } cases[] = {
        {"}\n", 0, 1},
        {"}\n\0junk", 5, 0},                             /* a NUL byte after the object */
        {"}\n junk", 0, 0},                              /* bytes after the object (Python: "Extra data") */
        {", \"my\\u0000key\": 1}", 0, 0},               /* \u0000 in a key */
        {", \"note\": \"a\\u0000b\"}", 0, 0},           /* \u0000 in a value */
        {", \"note\": \"a\\\\u0000b\"}", 0, 1},         /* a backslash, then the text u0000: no NUL */
        {", \"note\": \"a\\\"\\u0000\"}", 0, 0},        /* after an escaped quote, still in the string */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[512];
        size_t n = strlen(ok);
        memcpy(text, ok, n);
        memcpy(text + n, cases[i].tail, strlen(cases[i].tail) + cases[i].extra + 1);
        n += strlen(cases[i].tail) + cases[i].extra;
        rm_status st = rm_hf_parse_config(text, n, "config.json", &h, notes, sizeof notes, err, sizeof err);
        if (cases[i].good) CHECK(st == RM_OK, "config case %zu: '%s'", i, err);
        else CHECK(st == RM_ERR_FORMAT && (strstr(err, "NUL character") || strstr(err, "after the JSON object")),
                   "config case %zu: %d '%s'", i, (int)st, err);
    }
    const char *esc = "{\"a\\u0000\": 1}", *text = "{\"a\": \"\\\\u0000\"}";
    CHECK(rm_json_nul_at(esc, strlen(esc)) == 3 && rm_json_nul_at(text, strlen(text)) == -1 &&
              rm_json_nul_at("{}\0", 3) == 2, "rm_json_nul_at");
    cJSON *j = rm_json_parse("{\"stages\": [], \"name\": \"x\\u0000y\"}", err, sizeof err);
    CHECK(!j && strstr(err, "NUL character"), "a chain file's \\u0000: '%s'", err);
    cJSON_Delete(j);
    /* a safetensors header naming a tensor "a\u0000b": remat would read "a" */
    const char hdr[] = "{\"a\\u0000b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    unsigned char file[256] = {0};
    const size_t hl = sizeof hdr - 1;
    file[0] = (unsigned char)hl;
    memcpy(file + 8, hdr, hl);
    rm_st_file *f = NULL;
    rm_status st = rm_st_parse(file, 8 + hl + 4, "nul.safetensors", &f, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "NUL character"), "a tensor name with \\u0000: %d '%s'", (int)st, err);
    rm_st_close(f);
}

/* Class 7: lists of names hold each name once. */
static void lists_of_names(void) {
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    rm_gpt_config c = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    CHECK(rm_gpt_build(g, &c, &io) == RM_OK, "build");
    const char *twice[] = {"lm_head,lm_head", "transformer.wte,lm_head,transformer.wte"};
    for (int i = 0; i < 2; i++) {
        CHECK(rm_freeze_params(g, twice[i], NULL, NULL) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "twice"),
              "freeze '%s': '%s'", twice[i], rm_graph_errmsg(g));
        CHECK(rm_freeze_params(g, NULL, twice[i], NULL) == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "twice"),
              "train_only '%s': '%s'", twice[i], rm_graph_errmsg(g));
    }
    rm_graph_free(g); /* a failed call leaves the graph failed: a fresh one */
    g = rm_graph_new();
    CHECK(rm_gpt_build(g, &c, &io) == RM_OK && rm_freeze_params(g, "transformer.wpe,transformer.wte", NULL, NULL) == RM_OK,
          "a list of two: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
    rm_llama_config lc = {.layers = 1, .dim = 16, .heads = 2, .context = 8, .vocab = 32, .batch = 2};
    lc.lora = (rm_lora_config){.rank = 2, .alpha = 4.0f, .targets = "q_proj,v_proj,q_proj"};
    g = rm_graph_new();
    rm_status st = rm_llama_build(g, &lc, &io);
    CHECK(st == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "'q_proj' twice"), "LoRA targets twice: %d '%s'", (int)st,
          rm_graph_errmsg(g));
    rm_graph_free(g);
}

/* Classes 4 and 5 through rm_compile with a scratch folder. */
static void paging(void) {
    char scratch[256];
    if (scratch_tmpdir(scratch, sizeof scratch, "harden3_scratch")) {
        CHECK(0, "no scratch folder on a disk");
        return;
    }
    rm_gpt_config c = {.layers = 2, .dim = 64, .heads = 4, .context = 32, .vocab = 64, .batch = 4};
    for (int k = 0; k < 4; k++) {
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_options o;
        rm_options_default(&o);
        o.threads = 1, o.scratch_dir = scratch, o.page = RM_PAGE_ACTIVATIONS;
        if (k == 1) o.scratch_bandwidth = 2e9, o.scratch_read_bandwidth = 3e9;
        if (k == 2) o.scratch_read_bandwidth = 3e9; /* without scratch_bandwidth: refused */
        if (k == 3) o.page = 0, o.limit_bytes = (int64_t)1 << 20; /* unfused, under a limit too small */
        rm_session *s = NULL;
        rm_status st = rm_gpt_build(g, &c, &io) == RM_OK ? rm_compile(g, &o, &s) : RM_ERR_ARG;
        rm_paging_info p;
        rm_paging(s, &p);
        if (k == 0)
            CHECK(st == RM_OK && p.probe_rounds >= 3 && p.probe_rounds % 2 == 1 && p.write_bps_min > 0 &&
                      p.write_bps_min <= p.write_bps && p.write_bps <= p.write_bps_max && p.read_bps_min <= p.read_bps &&
                      p.read_bps <= p.read_bps_max,
                  "the probe: %d rounds, write %g [%g, %g]: %s", p.probe_rounds, p.write_bps, p.write_bps_min,
                  p.write_bps_max, rm_graph_errmsg(g));
        if (k == 1)
            CHECK(st == RM_OK && p.probe_rounds == 0 && p.write_bps == 2e9 && p.read_bps == 3e9,
                  "given bandwidths: %d rounds, %g %g", p.probe_rounds, p.write_bps, p.read_bps);
        if (k == 2)
            CHECK(st == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "scratch_read_bandwidth"), "read bandwidth alone: '%s'",
                  rm_graph_errmsg(g));
        if (k == 3)
            CHECK(st == RM_ERR_BUDGET && strstr(rm_graph_errmsg(g), "only through the fused optimizer") &&
                      strstr(rm_graph_errmsg(g), "with the fused optimizer and a scratch directory it is"),
                  "unfused under a small limit: %d '%s'", (int)st, rm_graph_errmsg(g));
        rm_session_free(s);
        rm_graph_free(g);
    }
    CHECK(scratch_dir_entries(scratch) == 0, "files left in the scratch folder");
    check_rmdir(scratch);
}

int main(void) {
    if (check_tmpdir(dir, sizeof dir, "harden3")) return 1;
    eval_not_finite();
    narrowing(70000.0f, RM_DTYPE_F16, "f16");
    narrowing(-65520.0f, RM_DTYPE_F16, "f16_halfway"); /* rounds to -inf: the smallest misfit */
    narrowing(3.4e38f, RM_DTYPE_BF16, "bf16");
    narrowing_init();
    json_nul();
    lists_of_names();
    paging();
    check_rmdir(dir);
    return check_done("test_harden3");
}
