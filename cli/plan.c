/* plan.c: `remat plan`: show the recompute plan for a memory budget without
 * training: for a model given by the usual flags, or for a chain or any
 * graph profiled elsewhere (--chain FILE.json, --graph FILE.json). --sweep prints the whole trade-off table. */
#define _DEFAULT_SOURCE /* open_memstream */
#include "args.h"
#include "hf.h"
#include "guard.h"
#include "bench.h"
#include "paths.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct plan_flags {
    const char *chain, *graph, *csv, *svg;
    int json, sweep, help;
} plan_flags;

/* Takes plan's own flags out of argv; the rest are the usual ones. */
static int split_flags(int argc, char **argv, plan_flags *pf, char **rest, int *n_rest) {
    static const char *const with_value[] = {"--chain", "--graph", "--csv", "--svg", NULL};
    static const char *const alone[] = {"--json", "--sweep", "--help", "-h", NULL};
    memset(pf, 0, sizeof *pf);
    *n_rest = 0;
    const char *seen[sizeof with_value / sizeof *with_value] = {NULL}; /* one per flag with a value */
    for (int i = 0; i < argc; i++) {
        const char *name, *v;
        int own = cli_own_flag(argc, argv, &i, with_value, alone, "plan", &name, &v);
        if (own < 0) return 0;
        for (int k = 0; own && v && with_value[k]; k++)
            if (!strcmp(name, with_value[k])) cli_once(name, &seen[k], v);
        if (!own) rest[(*n_rest)++] = argv[i];
        else if (!strcmp(name, "--help") || !strcmp(name, "-h")) pf->help = 1;
        else if (!strcmp(name, "--json")) pf->json = 1;
        else if (!strcmp(name, "--sweep")) pf->sweep = 1;
        else *(!strcmp(name, "--chain") ? &pf->chain : !strcmp(name, "--graph") ? &pf->graph
               : !strcmp(name, "--svg") ? &pf->svg : &pf->csv) = v;
    }
    return 1;
}

/* What plan's own flags cannot be combined with (exit 2): a file plans
 * the model in it, so the flags of another model do not apply. */
static int check_modes(const plan_flags *pf, const cli_args *a) {
    const char *file = pf->chain ? "--chain" : pf->graph ? "--graph" : NULL;
    if (pf->chain && pf->graph) return cli_fail(2, "--chain and --graph cannot be combined: plan one file at a time");
    for (int i = 0; file && i < a->n_given; i++) /* the flags of a model's plan (the others were refused or warned about) */
        if (cli_flag_applies(a->given[i], "plan") && strcmp(a->given[i], "--memory-budget") &&
            strcmp(a->given[i], "--threads"))
            return cli_fail(2, "%s plans the %s in the file: %s does not apply (plan %s takes --memory-budget%s)", file,
                            pf->chain ? "chain" : "graph", a->given[i], file,
                            pf->chain ? ", --sweep, --csv and --json" : " and --json");
    if (pf->graph && (pf->sweep || pf->csv || pf->svg))
        return cli_fail(2, "plan --graph has no %s: it plans one budget (drop it, or use --chain for a sweep)",
                        pf->sweep ? "--sweep" : pf->csv ? "--csv" : "--svg");
    if (pf->json && !file) return cli_fail(2, "--json prints the plan of --chain or --graph; a model's plan is text");
    if ((pf->csv || pf->svg) && !pf->sweep)
        return cli_fail(2, "%s writes the --sweep table: add --sweep", pf->csv ? "--csv" : "--svg");
    if (pf->svg && file) return cli_fail(2, "--svg draws the sweep of a model, not of %s: use --csv", file);
    if (pf->sweep && a->memory_budget)
        return cli_fail(2, "--sweep plans every budget from the least feasible to store-all: drop --memory-budget");
    if (pf->sweep && cli_given(a, "--checkpoint"))
        return cli_fail(2, "--sweep plans every budget from the least feasible to store-all, not one --checkpoint "
                        "strategy: drop --checkpoint (or --sweep, to see --checkpoint %s's plan)", a->checkpoint);
    if (pf->json && pf->sweep)
        return cli_fail(2, "--json prints one plan of --chain; --sweep prints the table (CSV): drop one");
    return 0;
}

/* The exit status of plan --chain and --graph once the answer is printed:
 * an infeasible budget is a runtime error, said on stderr (in the JSON too). */
static int plan_status(rm_status st, int json, const char *err) {
    if (st == RM_ERR_BUDGET) {
        if (!json) fprintf(stderr, "remat: %s\n", err);
        return 1;
    }
    return st == RM_OK ? 0 : cli_fail(1, "%s", err);
}

/* The sweep's CSV text to --csv (rm_out) or stdout. If --csv cannot be
 * written after all (a disk that filled), the table goes to stdout and the
 * message says so: the plan is not lost. */
static int emit_table(const char *csv, const char *table, size_t n) {
    char err[600];
    rm_out *o = NULL;
    int rc = 0;
    if (csv) {
        if (rm_out_open(csv, &o, err, sizeof err) == RM_OK) fwrite(table, 1, n, rm_out_file(o));
        if (!o || rm_out_close(o, 1, err, sizeof err) != RM_OK)
            rc = cli_fail(1, "--csv: %s; the table follows on stdout instead", err);
    }
    if (!csv || rc) fwrite(table, 1, n, stdout);
    if ((fflush(stdout) != 0 || ferror(stdout)) && !rc) rc = cli_fail(1, "cannot write the table to stdout: %s", strerror(errno));
    return rc;
}

/* A chain or graph file's text: a NUL before its end would hide what follows from the parser. */
static int read_json(const char *flag, const char *path, char **text) {
    char err[512];
    size_t len = 0;
    if (rm_read_file(path, 64u << 20, text, &len, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    if (strlen(*text) == len) return 0;
    cli_fail(1, "%s '%s': a NUL byte at byte %zu of %zu: not a JSON text file", flag, path, strlen(*text), len);
    free(*text);
    return 1;
}

/* --memory-budget of a chain or graph: a plain number in its units (no
 * unit, no percentage), as cli_parse_double reads numbers. */
static int chain_budget(const char *s, double *bytes) {
    return cli_parse_double("--memory-budget (a number in the file's units)", s, 0, 1e300, bytes); /* above int64: plans as the most */
}

typedef rm_status (*plan_file_fn)(const char *json, int64_t budget, char **result_json, char *err, size_t errlen);

/* The answer of rm_plan_chain or rm_plan_graph for the file's text (freed
 * here) at `bytes` (above int64: plans as the most; -1: store-all): the
 * JSON itself with --json, else the text `describe` makes of it; then the
 * exit status. */
static int print_plan(const plan_flags *pf, const char *path, char *text, double bytes, plan_file_fn plan,
                      void (*describe)(const cJSON *r)) {
    char err[512], *result = NULL;
    rm_status st = plan(text, bytes < 9e18 ? (int64_t)bytes : INT64_MAX, &result, err, sizeof err);
    free(text);
    if (!result) return cli_fail(1, "'%s': %s", path, err);
    if (pf->json) {
        printf("%s\n", result);
    } else {
        cJSON *r = cJSON_Parse(result);
        describe(r);
        cJSON_Delete(r);
    }
    free(result);
    return plan_status(st, pf->json, err);
}

static double num(const cJSON *r, const char *key) {
    return cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(r, key));
}
static const char *feasible(const cJSON *r) {
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "feasible")) ? "yes" : "no";
}

/* A chain's plan as text: its figures, then its operations in order. */
static void describe_chain(const cJSON *r) {
    const cJSON *op;
    printf("feasible: %s\ntime: %g\npeak_bytes: %.0f (budget %.0f, minimum feasible %.0f)\nsequence:", feasible(r),
           num(r, "time"), num(r, "peak_bytes"), num(r, "budget_bytes"), num(r, "min_budget_bytes"));
    cJSON_ArrayForEach(op, cJSON_GetObjectItemCaseSensitive(r, "sequence")) printf(" %s", op->valuestring);
    printf("\n");
}

/* A graph's plan as text: its figures, the nodes kept, those recomputed (and how). */
static void describe_graph(const cJSON *r) {
    const cJSON *it;
    printf("feasible: %s\ntotal time: %g (recompute %g)\npeak_bytes: %.0f (budget %.0f, store-all %.0f, "
           "minimum feasible %.0f)\nkeep:", feasible(r), num(r, "total_time"), num(r, "recompute_time"),
           num(r, "peak_bytes"), num(r, "budget_bytes"), num(r, "store_all_bytes"), num(r, "min_budget_bytes"));
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r, "keep")) printf(" %s", it->valuestring);
    printf("\nrecompute:");
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(r, "recompute"))
        printf(" %s (%s)", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "node")),
               cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(it, "mode")));
    printf("\n");
}

static int plan_chain(const plan_flags *pf, const cli_args *a) {
    char *text, err[512];
    if (read_json("--chain", pf->chain, &text)) return 1;
    int rc = 0;
    if (pf->sweep) {
        char *table = NULL;
        size_t n = 0;
        FILE *mem = open_memstream(&table, &n);
        if (!mem) rc = cli_fail(1, "out of memory");
        else if (rm_plan_chain_sweep(text, 20, mem, err, sizeof err) != RM_OK) rc = cli_fail(1, "'%s': %s", pf->chain, err);
        if (mem) fclose(mem);
        if (!rc) rc = emit_table(pf->csv, table, n);
        free(table);
        free(text);
        return rc;
    }
    double bytes;
    if (!a->memory_budget) {
        free(text);
        return cli_fail(2, "plan --chain needs --memory-budget BYTES, a number in the chain's units (plan --chain "
                        "FILE --sweep shows the range)");
    }
    if (!chain_budget(a->memory_budget, &bytes)) return free(text), 2;
    return print_plan(pf, pf->chain, text, bytes, rm_plan_chain, describe_chain);
}

/* `remat plan --graph FILE.json [--memory-budget BYTES] [--json]`: any
 * graph profiled elsewhere (rm_plan_graph); without a budget, store-all. */
static int plan_graph(const plan_flags *pf, const cli_args *a) {
    char *text;
    if (read_json("--graph", pf->graph, &text)) return 1;
    double bytes = -1;
    if (a->memory_budget && !chain_budget(a->memory_budget, &bytes)) return free(text), 2;
    return print_plan(pf, pf->graph, text, bytes, rm_plan_graph, describe_graph);
}

static int compile_dry(const cli_args *a, const char *budget, rm_graph **g, rm_session **s) {
    rm_model_io io;
    *g = rm_graph_new();
    *s = NULL;
    rm_status st = cli_build_model(a, *g, &io, 0);
    if (st != RM_OK) return cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(*g));
    int rc = cli_frozen_store(a, *g, NULL, NULL); /* --frozen-dtype bf16: the planned memory of a bf16 base */
    if (rc) return rc;
    rm_options o;
    rc = cli_options(a, budget, &o);
    if (rc) return rc;
    o.dry_run = 1;
    st = rm_compile(*g, &o, s);
    if (st != RM_OK) return cli_fail(st == RM_ERR_ARG ? 2 : 1, "%s", rm_graph_errmsg(*g));
    return 0;
}

/* One row of the sweep: the plan at budget b (with --scratch: and the plan
 * that may page, as its own row). */
typedef struct sweep_pts { double mib[24], ovh[24]; int paged[24], n; } sweep_pts;

static void sweep_row(const cli_args *a, const char *b, size_t hi, FILE *out, sweep_pts *pts) {
    rm_graph *g2;
    rm_session *s2;
    if (compile_dry(a, b, &g2, &s2) == 0) {
        rm_plan_info p2;
        rm_memory_info m2;
        rm_paging_info pg;
        rm_plan(s2, &p2);
        rm_memory(s2, &m2);
        rm_paging(s2, &pg);
        fprintf(out, "%s,%.1f,%zu,%.4f,%d,%llu,%llu,%.3f\n", b, 100.0 * (double)strtoull(b, NULL, 10) / (double)hi,
                m2.activation_arena_bytes, p2.predicted_overhead, pg.enabled, (unsigned long long)pg.out_bytes,
                (unsigned long long)pg.in_bytes, pg.predicted_wait_ms);
        if (pts->n < 24) {
            pts->mib[pts->n] = m2.activation_arena_bytes / 1048576.0, pts->ovh[pts->n] = p2.predicted_overhead;
            pts->paged[pts->n++] = pg.enabled;
        }
    }
    rm_session_free(s2);
    rm_graph_free(g2);
}

/* The budget sweep of a model: 11 budgets from the least feasible (lo) to
 * store-all (hi), the recompute plan and with --scratch also the plan that
 * may page (the sweep's paged points); a CSV on stdout or --csv, and the
 * chart of --svg. */
static int sweep_model(const plan_flags *pf, const cli_args *a, size_t lo, size_t hi) {
    sweep_pts pts = {{0}, {0}, {0}, 0};
    int rc = 0;
    char *table = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&table, &n);
    if (!out) return cli_fail(1, "out of memory");
    fprintf(out, "budget_bytes,budget_percent,activation_bytes_planned,predicted_overhead,paging,paged_out_bytes,"
            "paged_in_bytes,predicted_io_wait_ms\n");
    cli_args plain = *a;
    plain.scratch = NULL, plain.scratch_bandwidth = NULL, plain.page = NULL;
    for (int k = 0; k <= 10; k++) {
        char b[64];
        snprintf(b, sizeof b, "%zu", lo + (hi - lo) * (size_t)k / 10);
        sweep_row(&plain, b, hi, out, &pts);
        if (a->scratch) sweep_row(a, b, hi, out, &pts);
    }
    fclose(out);
    if (!pts.n) rc = cli_fail(1, "the sweep found no feasible budget up to store-all");
    if (!rc) rc = emit_table(pf->csv, table, n);
    free(table);
    char config[256];
    cli_model_desc(a, config, sizeof config);
    if (!rc && pf->svg) rc = cli_plan_svg(pf->svg, config, pts.mib, pts.ovh, pts.paged, pts.n);
    return rc;
}

static int plan_model(const plan_flags *pf, const cli_args *a) {
    rm_graph *g;
    rm_session *s;
    /* a sweep needs only the range (least feasible .. store-all), which any feasible budget gives;
     * --checkpoint plans that strategy, without a budget */
    const char *budget = a->memory_budget ? a->memory_budget : pf->sweep ? "100%"
                         : cli_given(a, "--checkpoint") ? NULL : "50%";
    cli_args range = *a;
    if (pf->sweep) range.scratch = NULL, range.scratch_bandwidth = NULL, range.page = NULL;
    int rc = compile_dry(&range, budget, &g, &s);
    if (rc) {
        rm_graph_free(g);
        return rc;
    }
    rm_plan_info p;
    rm_plan(s, &p);
    rm_memory_info m;
    rm_memory(s, &m);
    if (!pf->sweep) {
        rm_print_plan(s, stdout);
        char b[RM_MIB_TEXT], least[RM_MIB_TEXT];
        rm_mib_pair((int64_t)p.budget_bytes, (int64_t)p.min_budget_bytes, b, least, sizeof b);
        if (budget)
            printf("budget %s (store-all %.2f MiB, minimum feasible %s): activations %.2f MiB planned, "
                   "predicted overhead %.1f%% (FLOP model%s)\n", b, p.store_all_bytes / 1048576.0, least,
                   m.activation_arena_bytes / 1048576.0, 100 * p.predicted_overhead,
                   a->scratch ? ", with the predicted wait for transfers" : "");
        else
            printf("--checkpoint %s: activations %.2f MiB planned, predicted overhead %.1f%% (FLOP model)\n",
                   a->checkpoint, m.activation_arena_bytes / 1048576.0, 100 * p.predicted_overhead);
        printf("per step: forward %.2f + backward %.2f + recompute %.2f = %.2f GFLOP; parameters %.2f MiB, "
               "trainable %.2f MiB\n", p.flops_forward / 1e9, p.flops_backward / 1e9, p.flops_recompute / 1e9,
               (p.flops_forward + p.flops_backward + p.flops_recompute) / 1e9, m.param_bytes / 1048576.0,
               m.trainable_bytes / 1048576.0);
        if (strcmp(a->precision, "fp32"))
            printf("precision %s: products take bf16 inputs (%s kernel), activations next to them kept in bf16\n",
                   a->precision, rm_bf16_kernel());
    } else {
        rc = sweep_model(pf, a, p.min_budget_bytes, p.store_all_bytes);
    }
    rm_session_free(s);
    rm_graph_free(g);
    return rc;
}

int cli_plan(int argc, char **argv) {
    plan_flags pf;
    char **rest = malloc(sizeof *rest * (size_t)(argc + 1));
    int n_rest = 0;
    if (!rest) return cli_fail(1, "out of memory");
    if (!split_flags(argc, argv, &pf, rest, &n_rest)) {
        free(rest);
        return 2;
    }
    if (pf.help) {
        free(rest);
        return cli_help("plan");
    }
    cli_args a;
    cli_args_default(&a);
    a.command = "plan";
    int ok = cli_args_parse(&a, n_rest, rest, 0);
    free(rest);
    if (!ok) return 2;
    if (!pf.chain && !pf.graph && (ok = cli_check_flag_use(&a)) != 0) return ok;
    if ((ok = check_modes(&pf, &a)) != 0) return ok;
    /* before any planning: no output replaces an input or another output */
    const cli_file files[] = {{"--chain", pf.chain, CLI_IN, NULL, 0}, {"--graph", pf.graph, CLI_IN, NULL, 0},
                              {"--csv", pf.csv, CLI_OUT, NULL, 0}, {"--svg", pf.svg, CLI_OUT, NULL, 0}};
    if ((ok = cli_check_files(files, (int)(sizeof files / sizeof *files), 0)) != 0) return ok;
    return pf.chain ? plan_chain(&pf, &a) : pf.graph ? plan_graph(&pf, &a) : plan_model(&pf, &a);
}
