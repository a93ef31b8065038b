/* test_hfconfig.c: config.json as transformers 4.x and 5 write it. 5 moves
 * RoPE's base into rope_parameters ({"rope_type": "default", "rope_theta":
 * ...}) and reads it from there first; a reader that took only the top
 * level's rope_theta built another model from such a folder, with a note
 * and no error. JSON null where LlamaConfig has no default is refused. */
#include "check.h"
#include "train/hf.h"
#include <stdio.h>
#include <string.h>

#define SHAPE "\"model_type\": \"llama\", \"hidden_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2, " \
              "\"intermediate_size\": 24, \"vocab_size\": 30"

static rm_status parse(const char *tail, rm_hf_config *h, char *notes, size_t ncap, char *err, size_t ecap) {
    char text[1024];
    if (ecap) err[0] = 0;
    snprintf(text, sizeof text, "{" SHAPE "%s}", tail);
    return rm_hf_parse_config(text, strlen(text), "config.json", h, notes, ncap, err, ecap);
}

/* What transformers 5.25's LlamaConfig(...).save_pretrained wrote (the shape's keys aside). */
static void test_transformers5(void) {
    rm_hf_config h;
    char notes[512], err[512];
    const char *v5 = ", \"attention_bias\": false, \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
                     "\"eos_token_id\": 2, \"head_dim\": 8, \"hidden_act\": \"silu\", \"initializer_range\": 0.02, "
                     "\"max_position_embeddings\": 2048, \"mlp_bias\": false, \"num_key_value_heads\": 2, "
                     "\"pad_token_id\": null, \"pretraining_tp\": 1, \"rms_norm_eps\": 1e-06, "
                     "\"rope_parameters\": {\"rope_theta\": 100000.0, \"rope_type\": \"default\"}, "
                     "\"tie_word_embeddings\": false, \"transformers_version\": \"5.25.0\", \"use_cache\": true, "
                     "\"dtype\": \"bfloat16\"";
    rm_status st = parse(v5, &h, notes, sizeof notes, err, sizeof err);
    CHECK(st == RM_OK && h.rope_theta == 100000.0f, "transformers 5's rope_parameters: %d theta %g '%s'", st,
          (double)h.rope_theta, err);
    CHECK(st == RM_OK && notes[0] == 0, "transformers 5's keys are all read or known: '%s'", notes);
    /* rope_parameters first, then the top level, then 10000; "type" is the old name of rope_type */
    struct { const char *tail; float theta; } ok[] = {
        {"", 10000.0f},
        {", \"rope_theta\": 500000", 500000.0f},
        {", \"rope_parameters\": {\"rope_type\": \"default\"}, \"rope_theta\": 250000", 250000.0f},
        {", \"rope_parameters\": {\"type\": \"default\", \"rope_theta\": 2e5}", 200000.0f},
        {", \"rope_parameters\": {\"rope_theta\": 3e5}, \"rope_theta\": 3e5", 300000.0f},
        {", \"rope_parameters\": {\"rope_theta\": null}, \"rope_theta\": 7e4", 70000.0f},
        {", \"rope_parameters\": null, \"rope_theta\": 4e4, \"rope_scaling\": null", 40000.0f},
        {", \"rope_parameters\": {}, \"partial_rotary_factor\": 1.0", 10000.0f},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        st = parse(ok[i].tail, &h, notes, sizeof notes, err, sizeof err);
        CHECK(st == RM_OK && h.rope_theta == ok[i].theta, "rope case %zu: %d theta %g (want %g) '%s'", i, st,
              (double)h.rope_theta, (double)ok[i].theta, err);
    }
}

/* Each refused, naming the key. */
static void test_refused(void) {
    struct { const char *tail, *word; } bad[] = {
        {", \"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 1e4}", "linear"},
        {", \"rope_parameters\": {\"type\": \"yarn\", \"factor\": 4.0}", "yarn"},
        {", \"rope_parameters\": {\"rope_type\": 3}", "rope_type"},
        {", \"rope_parameters\": [10000]", "rope_parameters must be an object"},
        {", \"rope_parameters\": {\"rope_theta\": -1}", "rope_parameters' rope_theta must be a number above 1"},
        {", \"rope_parameters\": {\"rope_theta\": \"1e4\"}", "rope_parameters' rope_theta"},
        {", \"rope_parameters\": {\"rope_theta\": 1e5}, \"rope_theta\": 1e4", "differ"},
        {", \"rope_parameters\": {\"rope_theta\": 1e5, \"partial_rotary_factor\": 0.5}", "partial_rotary_factor"},
        {", \"partial_rotary_factor\": 0.25", "partial_rotary_factor"},
        {", \"hidden_act\": null", "hidden_act is null"},
        {", \"rms_norm_eps\": null", "rms_norm_eps is null"},
        {", \"rope_theta\": null", "rope_theta is null"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_hf_config h;
        char notes[256], err[512];
        rm_status st = parse(bad[i].tail, &h, notes, sizeof notes, err, sizeof err);
        CHECK(st == RM_ERR_FORMAT && strstr(err, bad[i].word), "refused case %zu (%s): %d '%s'", i, bad[i].word, st,
              err);
    }
    /* null where LlamaConfig's None is the default: num_key_value_heads = heads, no sliding window */
    rm_hf_config h;
    char notes[256], err[512];
    rm_status st = parse(", \"num_key_value_heads\": null, \"sliding_window\": null, \"rope_scaling\": null", &h,
                         notes, sizeof notes, err, sizeof err);
    CHECK(st == RM_OK && h.kv_heads == 2, "nulls that are LlamaConfig's defaults: %d kv %d '%s'", st, h.kv_heads, err);
}

int main(void) {
    test_transformers5();
    test_refused();
    return check_done("test_hfconfig");
}
