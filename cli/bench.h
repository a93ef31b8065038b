/* bench.h: what `remat bench`, `remat train --trace` and `remat plan --svg`
 * share (cli/bench.c, cli/trace.c, cli/chart.c). */
#ifndef REMAT_CLI_BENCH_H
#define REMAT_CLI_BENCH_H
#include "args.h"
#include <stddef.h>

/* "gpt L4 C128 H4 T64 V256 B8" or "mlp 256-1024-256 T32 V256 B8". */
void cli_model_desc(const cli_args *a, char *buf, size_t n);
/* "<CPU model name>, N threads, OpenBLAS|portable GEMM" (from /proc/cpuinfo). */
void cli_machine_desc(int threads, char *buf, size_t n);

/* --trace: arms the session for the step of --trace-step (1-based, default
 * the second one counted from `start`, the first step this run makes).
 * Returns 0 or an exit status (2: the step is outside the run). */
int cli_trace_arm(const cli_args *a, rm_session *s, int start);
/* Writes the trace of --trace with the model and strategy as metadata. */
int cli_trace_write(const cli_args *a, const rm_session *s);

int cli_bench(int argc, char **argv);
#endif
