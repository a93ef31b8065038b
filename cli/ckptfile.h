/* ckptfile.h: how `remat train` maps its flags onto a training-state file
 * (rm_run_info, written and read by the library) and names its periodic
 * step files. Not to be confused with the recompute strategy, --checkpoint.
 * See docs/CHECKPOINT_FILES.md. */
#ifndef REMAT_CLI_CKPTFILE_H
#define REMAT_CLI_CKPTFILE_H
#include "args.h"

/* Saved on an interrupt when the run has no --save. */
#define CLI_INTERRUPT_PATH "remat-interrupted.safetensors"

/* The model's flags from a file's run (rm_file_model_info): a model flag
 * given that differs is a usage error naming the file. a's strings may
 * point into r afterwards: r must outlive a. */
int cli_model_args(cli_args *a, const rm_run_info *r, const char *path);
/* Resuming: the file's model config replaces the model flags (an explicit
 * flag that differs is a usage error), and its training flags replace those
 * not given (a given one that differs gets a note). Prints the error and
 * returns the exit status (2: a conflicting flag), or 0. a->data may point
 * into r afterwards: r must outlive a. */
int cli_resume_args(cli_args *a, const rm_run_info *r, const char *path);

/* "dir/m.safetensors", 100 -> "dir/m.step000100.safetensors" (the step is
 * inserted before the extension; at least 6 digits). 0 if it does not fit. */
int cli_step_path(const char *path, uint64_t step, char *out, size_t cap);
/* Whether the file name `name` is a step file of the series of the file
 * name `base` (both without folders), and its step. */
int cli_step_of(const char *base, const char *name, uint64_t *step);
/* Removes the oldest step files of path's series up to step `upto` so that
 * `keep` of those remain (keep 0: none removed); a later one is not this
 * run's and is left alone. Prints a warning for a file it cannot remove. */
void cli_prune_step_files(const char *path, int keep, uint64_t upto);
/* The first step file of path's series numbered after `step` that exists,
 * in out: 1, or 0 when there is none. */
int cli_step_file_after(const char *path, uint64_t step, char *out, size_t cap);
/* The remat file path (or open, when not NULL) holds every parameter of g
 * as a load needs it: checked on its index (rm_file_check) before
 * rm_compile allocates the model, so a file whose metadata claims a larger
 * model than its tensors is refused first; its parameters are then marked
 * (rm_file_mark_loaded), not drawn at rm_compile. 0, or 1 with the message
 * printed. */
int cli_check_weights(rm_file *open, const char *path, rm_graph *g);
#endif
