/* test_lists.c: issue 22, classes 3 and 14 in the library: one rule for
 * every list, size and strategy string a program gives remat, the same rule
 * the command line applies (cli/args.c):
 *  - a comma-separated list (rm_freeze_params' globs, rm_lora_config's
 *    targets) has no empty item, so no comma first, last or twice, and no
 *    white space in an item ("lm_head," was taken as "lm_head");
 *  - a size (rm_parse_size) has no white space around it (' 5MiB' passed,
 *    '5MiB ' did not), is written in decimal, counts whole bytes when it has
 *    no unit ('1.5' was 1 byte), and goes up to its documented 1EiB (the
 *    limit's own message named a unit that was not one);
 *  - a strategy's count has no sign or space ('segments: 2' passed). */
#include "check.h"
#include "remat.h"
#include <string.h>

static void test_freeze_lists(void) {
    static const char *const bad[] = {"lm_head,", ",lm_head", "lm_head,,wte", " lm_head", "lm_head ", "lm_head, wte",
                                      ","};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        for (int only = 0; only < 2; only++) {
            rm_run_info r;
            rm_run_info_default(&r);
            r.layers = 1, r.dim = 16, r.heads = 2, r.context = 8, r.batch = 2;
            rm_graph *g = rm_graph_new();
            rm_model_io io;
            CHECK(rm_run_build(&r, g, &io, 0) == RM_OK, "build: %s", rm_graph_errmsg(g));
            int n = -1;
            rm_status st = rm_freeze_params(g, only ? NULL : bad[i], only ? bad[i] : NULL, &n);
            CHECK(st == RM_ERR_ARG && strstr(rm_graph_errmsg(g), "no comma first, last or twice"),
                  "%s '%s': %d, %s", only ? "train_only" : "freeze", bad[i], (int)st, rm_graph_errmsg(g));
            rm_graph_free(g);
        }
    rm_run_info r; /* the same list, well formed, freezes */
    rm_run_info_default(&r);
    r.layers = 1, r.dim = 16, r.heads = 2, r.context = 8, r.batch = 2;
    rm_graph *g = rm_graph_new();
    rm_model_io io;
    int n = 0;
    CHECK(rm_run_build(&r, g, &io, 0) == RM_OK && rm_freeze_params(g, "transformer.wpe,transformer.h.0.ln_1", NULL, &n) == RM_OK && n > 0,
          "a good list: %s", rm_graph_errmsg(g));
    rm_graph_free(g);
}

static void test_lora_targets(void) {
    static const char *const bad[] = {"c_attn,", ",c_attn", "c_attn,,c_proj", "c_attn, c_proj", " c_attn"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_run_info r;
        rm_run_info_default(&r);
        r.layers = 1, r.dim = 16, r.heads = 2, r.context = 8, r.batch = 2;
        r.lora.rank = 2, r.lora.alpha = 4.0f;
        snprintf(r.lora.targets, sizeof r.lora.targets, "%s", bad[i]);
        rm_graph *g = rm_graph_new();
        rm_model_io io;
        rm_status st = rm_run_build(&r, g, &io, 0);
        CHECK(st == RM_ERR_ARG, "LoRA targets '%s': %d, %s", bad[i], (int)st, rm_graph_errmsg(g));
        rm_graph_free(g);
    }
}

static void test_sizes(void) {
    static const char *const bad[] = {" 5MiB", "5MiB ", "\t5MiB", "5MiB\n", "", " ", "1.5", "1.5B", "0x10", "0x10MiB",
                                      "inf", "nan", "2EiB", "1.1EiB", "5 MiB ", "-5MiB", "5mib", "1e305PiB", "1e300EB"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int64_t b = -1;
        double f = -1;
        char err[256] = "";
        CHECK(rm_parse_size(bad[i], &b, &f, err, sizeof err) == RM_ERR_ARG && *err, "size '%s' accepted (%lld)",
              bad[i], (long long)b);
    }
    static const struct { const char *s; int64_t bytes; } good[] = {
        {"5MiB", 5 << 20}, {"5 MiB", 5 << 20}, {"1EiB", (int64_t)1 << 60}, {"1TiB", (int64_t)1 << 40},
        {"2PiB", (int64_t)2 << 50}, {"3TB", 3000000000000}, {"1EB", 1000000000000000000}, {"1e3", 1000},
        {"1.5KiB", 1536}, {"7B", 7}, {"+9", 9}};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        int64_t b = -1;
        double f = -1;
        char err[256] = "";
        rm_status st = rm_parse_size(good[i].s, &b, &f, err, sizeof err);
        CHECK(st == RM_OK && b == good[i].bytes && f == 0, "size '%s': %d %lld %s", good[i].s, (int)st, (long long)b,
              err);
    }
    int64_t b;
    double f;
    char err[256];
    CHECK(rm_parse_size("1.5", &b, &f, err, sizeof err) == RM_ERR_ARG && strstr(err, "give 1 or 2"), "1.5: %s", err);
    CHECK(rm_parse_size(" 5MiB", &b, &f, err, sizeof err) == RM_ERR_ARG && strstr(err, "white space"), "' 5MiB': %s",
          err);
}

static void test_strategies(void) {
    static const char *const bad[] = {"segments: 2", "segments:+2", "segments:-2", "segments:2 ", " none", "none ",
                                      "revolve: 3"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rm_strategy s;
        int p;
        char err[256] = "";
        CHECK(rm_parse_strategy(bad[i], &s, &p, err, sizeof err) == RM_ERR_ARG && *err, "strategy '%s' accepted",
              bad[i]);
    }
    rm_strategy s;
    int p = 0;
    char err[256];
    CHECK(rm_parse_strategy("segments:2", &s, &p, err, sizeof err) == RM_OK && p == 2, "segments:2");
}

int main(void) {
    test_freeze_lists();
    test_lora_targets();
    test_sizes();
    test_strategies();
    return check_done("test_lists");
}
