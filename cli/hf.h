/* hf.h: `--init DIR` for a Hugging Face model folder (cli/hf.c), shared by
 * train and eval. */
#ifndef REMAT_CLI_HF_H
#define REMAT_CLI_HF_H
#include "args.h"

/* 1 if path names a folder. */
int cli_is_dir(const char *path);
/* Opens a->init as a Hugging Face folder and takes the model flags from its
 * config.json (--model llama; a given model flag that differs is a usage
 * error); prints its notes. Returns 0 with *out open, or the exit status
 * (the message printed). */
int cli_hf_open(cli_args *a, rm_hf **out);
/* Loads the folder's weights into s (a message unless --quiet); 0 or 1. */
int cli_hf_load(rm_hf *m, rm_session *s, const cli_args *a);
#endif
