/* guard.h: what `remat train`, `sample` and `plan` check before they start
 * (docs/RELIABILITY.md): flags that conflict or do not apply, output paths,
 * the memory a configuration needs; and, while training, divergence. */
#ifndef REMAT_CLI_GUARD_H
#define REMAT_CLI_GUARD_H
#include "args.h"

/* Flags that conflict or do not apply to the model (exit 2), e.g.
 * --checkpoint with --memory-budget, --widths on a GPT, --heads on an MLP.
 * Prints the error and returns the exit status, or 0. */
int cli_check_flag_use(const cli_args *a);
/* The bytes the run described by r needs at least (parameters, `state`
 * more parameter-sized arrays when training: gradients and optimizer state;
 * activations stored whole), against this machine's memory. `file`: where r
 * came from (NULL: the flags). */
int cli_check_fits(const rm_run_info *r, int training, double state, const char *file);
/* The parameter-sized arrays a's training holds besides the parameters: the
 * flat gradients unless fused, AdamW's two moments (sharded over the ranks
 * with --shard-optimizer); plain SGD keeps no state. */
double cli_train_state_copies(const cli_args *a, int ranks);

/* Divergence: a loss that is not finite, or above DIV_FACTOR times the
 * median of the last DIV_WINDOW losses (all of them while fewer, from
 * DIV_RUN on) for DIV_RUN steps in a row. Losses judged too high do not
 * enter the window. */
enum { DIV_WINDOW = 50, DIV_RUN = 5 };
#define DIV_FACTOR 10.0f
typedef struct cli_divergence {
    float window[DIV_WINDOW]; /* the last losses, a ring */
    float sorted[DIV_WINDOW]; /* scratch for the median: no allocation per step */
    int n, next, run;
} cli_divergence;
/* Adds step's loss; 1 with a message in msg when the run has diverged. */
int cli_diverged(cli_divergence *d, int step, float loss, char *msg, size_t cap);
#endif
