/* paths.h: the files a command reads and writes, checked together before
 * its work (docs/RELIABILITY.md, "Files"): every output can be written, and
 * no output is the same file as another output or an input, compared by
 * canonical names whether or not the files exist. Every subcommand lists
 * its files in one table and calls cli_check_files. */
#ifndef REMAT_CLI_PATHS_H
#define REMAT_CLI_PATHS_H
#include "args.h"

typedef enum { CLI_IN, CLI_OUT, CLI_OUT_LATER, CLI_OUT_DIR, CLI_IN_ANY, CLI_MODEL_DIR } cli_file_kind;
typedef struct cli_file {
    const char *flag;     /* "--save", or a phrase ("the interrupt file") */
    const char *path;     /* NULL: not given (skipped) */
    cli_file_kind kind;   /* CLI_OUT: written, checked writable now; CLI_OUT_LATER: written
                           * only on some paths (an interrupt), checked for identity only;
                           * CLI_OUT_DIR: a folder made and written into (list its files too);
                           * CLI_IN_ANY: an input file or folder (--init: a Hugging Face folder),
                           * and no output may be its config.json or weights;
                           * CLI_MODEL_DIR: a model folder named, not read (export --base-model):
                           * guarded as CLI_IN_ANY's folder when there is one, else skipped */
    const char *may_be;   /* the flag of the one input this output may replace (--save's --resume) */
    int steps;            /* --save-every: this output also has step files up to this step (0: none) */
} cli_file;

/* The canonical absolute name of path whether or not it exists: realpath of
 * the file, else of its folder plus the last component, else the path made
 * absolute and "." and ".." removed. 0 if it does not fit out. */
int cli_canonical(const char *path, char *out, size_t cap);
/* Whether a and b name the same file: the same canonical name, or (both
 * existing) the same device and inode (hard links). */
int cli_same_file(const char *a, const char *b);
/* Every input there and a regular file (exit 1 otherwise), every output writable (rm_out_check: a regular file or none, its folder
 * there and writable, the name not too long, with its step files'), no
 * two files the same unless allowed, and no output inside a model folder
 * (a CLI_IN_ANY or CLI_MODEL_DIR folder, or a folder holding the files it
 * reads: a Hugging Face cache's blobs/) unless new_in_model is set and the
 * output is a new file. Prints the first problem; returns the exit status
 * (1: cannot write, 2: two files are one, or an output in a model folder),
 * or 0. */
int cli_check_files(const cli_file *files, int n, int new_in_model);
/* The files a PEFT adapter folder DIR holds (rm_save_adapters), as entries
 * of a table: DIR itself (CLI_OUT_DIR) and its two files (written: checked
 * when DIR exists, else for identity), in out[3] with their paths in buf. */
void cli_adapter_files(const char *flag, const char *dir, char buf[2][PATH_MAX + 64], cli_file out[3]);
/* remat train's table (--data, --init, --resume; --save and its step files,
 * --report, --trace, --save-adapters, the interrupt file) through
 * cli_check_files. */
int cli_check_outputs(const cli_args *a);
#endif
