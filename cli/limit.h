/* limit.h: `remat train --memory-limit SIZE`, a limit on the process's
 * peak RSS (VmHWM), everything included (cli/limit.c). */
#ifndef REMAT_CLI_LIMIT_H
#define REMAT_CLI_LIMIT_H
#include "args.h"

typedef struct cli_limit {
    int64_t limit;   /* --memory-limit in bytes (0: none) */
    int64_t startup; /* VmRSS before the session: libraries, corpus, data, the graph */
    int64_t margin;  /* stated: OpenBLAS/OpenMP buffers and thread stacks, stdio, step-time arrays */
    int scratch;     /* --scratch given (for the refusal's words) */
} cli_limit;

/* The process's resident bytes now (VmRSS) or at their peak (VmHWM); -1 if unknown. */
int64_t cli_rss_bytes(const char *field);
/* Fills l and sets o->limit_bytes to what the limit leaves the library
 * (limit - start-up RSS - margin). Refuses (exit 1, breakdown) when the
 * start-up RSS and the margin alone reach the limit; exit 2 for a bad size. */
int cli_limit_options(const cli_args *a, rm_options *o, cli_limit *l);
/* A compile refused under the limit (RM_ERR_BUDGET, library message msg):
 * prints the whole breakdown and the least --memory-limit; returns 1. */
int cli_limit_refused(const cli_limit *l, const char *msg);
/* The breakdown of the limit, one line, on f. */
void cli_limit_print(const cli_limit *l, const rm_session *s, FILE *f);
#endif
