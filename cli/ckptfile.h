/* ckptfile.h: what `remat train` writes into and reads back from a
 * checkpoint file (the training state on disk; not to be confused with the
 * recompute strategy, --checkpoint). See docs/CHECKPOINT_FILES.md. */
#ifndef REMAT_CLI_CKPTFILE_H
#define REMAT_CLI_CKPTFILE_H
#include "args.h"
#include "train/safetensors.h"

/* Saved on an interrupt when the run has no --save. */
#define CLI_INTERRUPT_PATH "remat-interrupted.safetensors"

/* The metadata of a checkpoint file: the model config, the training flags
 * and the position (step, next batch) of a run. */
#define CLI_META_MAX 40
typedef struct cli_meta {
    int n;
    const char *k[CLI_META_MAX], *v[CLI_META_MAX];
    char buf[CLI_META_MAX][48];
    char widths[RM_MLP_MAX_LAYERS * 8];
} cli_meta;

/* What a run is: its flags, its data, and where it stands. */
typedef struct cli_position {
    const char *data_name;  /* --data, or "<corpus>" */
    size_t data_tokens;
    uint64_t step;          /* steps done (the next step's index) */
    uint64_t batch;         /* the next training batch's index */
} cli_position;

void cli_meta_build(const cli_args *a, const cli_position *p, cli_meta *m);

/* Resuming: the file's model config replaces the model flags (an explicit
 * flag that differs is a usage error), and its training flags replace those
 * not given. Strings are copied into r. Prints the error and returns the
 * exit status (1: the file lacks or garbles a key, 2: a conflicting flag),
 * or 0 with r->pos filled. */
typedef struct cli_resumed {
    cli_position pos;
    size_t data_tokens;     /* of the run that wrote the file */
    char data[4096];
} cli_resumed;
int cli_resume_args(cli_args *a, const rm_st_file *f, const char *path, cli_resumed *r);

/* "dir/m.safetensors", 100 -> "dir/m.step000100.safetensors" (the step is
 * inserted before the extension; at least 6 digits). 0 if it does not fit. */
int cli_step_path(const char *path, uint64_t step, char *out, size_t cap);
/* Removes the oldest step files of path's series so that `keep` remain
 * (keep 0: none removed). Prints a warning for a file it cannot remove. */
void cli_prune_step_files(const char *path, int keep);
#endif
