/* hf.h: `--init DIR` for a Hugging Face model folder (cli/hf.c), shared by
 * train and eval. */
#ifndef REMAT_CLI_HF_H
#define REMAT_CLI_HF_H
#include "args.h"

/* 1 if path names a folder. */
int cli_is_dir(const char *path);
/* 1 when path is a Hugging Face model folder (it holds config.json) or one
 * of its files by name (config.json, the index, model.safetensors or a
 * model-*.safetensors shard): that folder, as named, in dir. */
int cli_hf_folder_of(const char *path, char *dir, size_t cap);
/* When path is a Hugging Face model folder (it holds config.json) or one
 * of its files by name (config.json, the index, model.safetensors or a
 * model-*.safetensors shard), "; ..." saying to give the folder with --init
 * DIR; else "". For the message of a flag that reads a remat file and
 * could not read path (--load, --resume, --init FILE, inspect). */
const char *cli_hf_hint(const char *path, char *buf, size_t cap);
/* Opens a->init as a Hugging Face folder and takes the model flags from its
 * config.json (--model llama; a given model flag that differs is a usage
 * error); prints its notes. Returns 0 with *out open, or the exit status
 * (the message printed). */
int cli_hf_open(cli_args *a, rm_hf **out);
/* Loads the folder's weights into s (a message unless --quiet); 0 or 1. */
int cli_hf_load(rm_hf *m, rm_session *s, const cli_args *a);
/* --frozen-dtype on g before rm_compile: bf16 or f16 keeps every frozen
 * weight the products read in that format (rm_store_frozen); auto keeps
 * each in its dtype in the folder or file the weights come from (hf, or
 * the --resume file, open) when that is BF16 or F16; f32 keeps them all in
 * 4 bytes. Returns 0, or the exit status (message printed). */
int cli_frozen_store(const cli_args *a, rm_graph *g, const rm_hf *hf, const rm_file *file);
/* "frozen: N parameters kept in bf16 (X MiB), M in fp32" into out (for the summary and report). */
void cli_frozen_summary(const rm_graph *g, char *out, size_t cap);
#endif
