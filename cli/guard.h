/* guard.h: what `remat train`, `sample` and `plan` check before they start
 * (docs/RELIABILITY.md): flags that conflict or do not apply, output paths,
 * the memory a configuration needs; and, while training, divergence. */
#ifndef REMAT_CLI_GUARD_H
#define REMAT_CLI_GUARD_H
#include "args.h"

/* Flags that conflict or do not apply to the model (exit 2), e.g.
 * --checkpoint with --memory-budget, --widths on a GPT, --heads on an MLP,
 * a --batch that does not split over ranks x --micro-batches (checked once
 * --resume filled the flags from its file). train, plan and bench call it.
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
/* This machine's memory, or the address-space limit (ulimit -v) when lower. */
double cli_machine_bytes(void);

/* The data the flags name (--data, else the built-in corpus; --model
 * encdec: pairs into p, or none for the built-in reverse task) loaded and
 * checked as a run uses it: the file's load fits this machine's memory
 * (checked from its size before reading), --vocab fits its tokens (a text
 * file is bytes: another --vocab is a usage error), one batch fits each part.
 * 0, or the exit status with a message. train and bench (before its first
 * point) call it. */
int cli_load_data(const cli_args *a, rm_dataset *d, rm_pairs *p);
/* Data read as bytes (a text file, or ids given without --token-bytes) with
 * a --vocab other than 256 given, or for a model whose vocab is above 256
 * (a Hugging Face folder's, a --resume or --load file's): the usage error
 * said (returns 2), else 0. */
int cli_check_bytes_vocab(const cli_args *a, const rm_dataset *d);

/* Divergence (docs/RELIABILITY.md): a loss that is not finite, or above
 * DIV_FACTOR times a base for DIV_RUN steps in a row. The base is the median
 * of the last DIV_WINDOW losses; while fewer have been seen, the smaller of
 * their median and the reference: ln(vocab) for a fresh model (its loss
 * before any training), else the loss of the run's first step (the model as
 * it was loaded). The base is at least DIV_FLOOR. Losses judged too high do
 * not enter the window. A checkpoint file carries the window, the count and
 * the reference (metadata divergence_window, divergence_run,
 * divergence_reference), so a run resumed in pieces is judged as one. */
enum { DIV_WINDOW = 50, DIV_RUN = 5 };
#define DIV_FACTOR 10.0f
#define DIV_FLOOR 0.01f
typedef struct cli_divergence {
    float window[DIV_WINDOW]; /* the last losses, a ring */
    float sorted[DIV_WINDOW]; /* scratch for the median: no allocation per step */
    int n, next, run;
    float reference;          /* 0: the first loss seen becomes it */
    int fresh;                /* the reference is ln(vocab) */
} cli_divergence;
/* Adds step's loss; 1 with a message in msg when the run has diverged. */
int cli_diverged(cli_divergence *d, int step, float loss, char *msg, size_t cap);
/* The state as the metadata of a checkpoint file: 3 keys and their values
 * (written into the caller's buffers). */
void cli_divergence_meta(const cli_divergence *d, const char *keys[3], char window[DIV_WINDOW * 16], char run[16],
                         char reference[32], const char *values[3]);
/* Takes the state from a file's metadata (the values of the 3 keys, NULL
 * when absent): 0, or 1 when they are present but malformed (the state is
 * then left as it was). */
int cli_divergence_load(cli_divergence *d, const char *window, const char *run, const char *reference);
#endif
