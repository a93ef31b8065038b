/* trace.c: `remat train --trace FILE.json [--trace-step N]`: one training
 * step as a Chrome Trace Event file, written by the library's
 * rm_trace_write; and the descriptions of the model and the machine that
 * traces, benchmark tables and charts carry. */
#include "bench.h"
#include <stdio.h>
#include <string.h>

void cli_model_desc(const cli_args *a, char *buf, size_t n) {
    if (strcmp(a->model, "mlp") == 0) {
        size_t k = (size_t)snprintf(buf, n, "mlp");
        for (int i = 0; i < a->n_widths && k < n; i++)
            k += (size_t)snprintf(buf + k, n - k, "%c%d", i ? '-' : ' ', a->widths[i]);
        if (k < n)
            snprintf(buf + k, n - k, " T%d V%d B%d%s%s", a->context, a->vocab, a->batch, a->batchnorm ? " bn" : "",
                     strcmp(a->precision, "fp32") ? " bf16" : "");
        return;
    }
    char kv[24] = ""; /* llama's grouped-query attention: its key/value heads */
    if (!strcmp(a->model, "llama") && a->kv_heads > 0 && a->kv_heads != a->heads) snprintf(kv, sizeof kv, " K%d", a->kv_heads);
    snprintf(buf, n, "%s L%d C%d H%d%s T%d V%d B%d%s", a->model, a->layers, a->dim, a->heads, kv, a->context, a->vocab,
             a->batch, strcmp(a->precision, "fp32") ? " bf16" : "");
}

void cli_machine_desc(int threads, char *buf, size_t n) {
    char cpu[160] = "unknown CPU", line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && colon) {
            snprintf(cpu, sizeof cpu, "%s", colon + 2);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    }
    if (f) fclose(f);
    int t = threads > 0 ? threads : rm_default_threads();
    snprintf(buf, n, "%s, %d thread%s, %s", cpu, t, t == 1 ? "" : "s",
             rm_gemm_has_blas() ? "OpenBLAS" : "portable GEMM");
}

int cli_trace_arm(const cli_args *a, rm_session *s, int start) {
    if (!a->trace) return 0;
    if (a->trace_step && a->trace_step <= start)
        return cli_fail(2, "--trace-step %d was run before the step this run resumes at (%d); give a later step",
                        a->trace_step, start);
    int step = a->trace_step ? a->trace_step - 1 : start + 1; /* 0-based, as rm_step counts */
    if (!a->trace_step && step >= a->steps) step = a->steps - 1; /* one step only: trace it */
    if (step >= a->steps || step < start)
        return cli_fail(2, "--trace-step %d is past --steps %d: trace a step the run makes", step + 1, a->steps);
    if (rm_trace_enable(s, (uint64_t)step) != RM_OK) return cli_fail(1, "%s", rm_session_errmsg(s));
    return 0;
}

int cli_trace_write(const cli_args *a, const rm_session *s) {
    if (!a->trace || !rm_trace_ready(s)) return 0; /* stopped before the traced step */
    char model[256], machine[256], err[512];
    cli_model_desc(a, model, sizeof model);
    cli_machine_desc(a->threads, machine, sizeof machine);
    const char *keys[] = {"model", "checkpoint", "memory_budget", "machine"};
    const char *values[] = {model, a->checkpoint, a->memory_budget ? a->memory_budget : "none", machine};
    if (rm_trace_write(s, a->trace, 4, keys, values, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
    return 0;
}
