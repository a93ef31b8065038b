/* train/hf.h: Hugging Face model folders (internal part; the API is
 * remat.h's rm_hf_*). hfconfig.c reads config.json, hf.c maps the weights
 * (one file or an index and its shards) and loads them into a session. */
#ifndef REMAT_HF_H
#define REMAT_HF_H

#include "remat.h"
#include "train/safetensors.h"

/* What config.json says about a LlamaForCausalLM, defaults filled in as
 * transformers' LlamaConfig fills them. */
typedef struct rm_hf_config {
    int layers, dim, heads, kv_heads, ffn_dim, vocab;
    int max_positions;  /* max_position_embeddings; 0 if absent */
    float rope_theta, norm_eps;
    int tie_embeddings;
} rm_hf_config;

/* Parses config.json's text (len bytes; `name` for messages) into c. A
 * field remat cannot honour is RM_ERR_FORMAT naming it; notes (always
 * terminated) gets the keys it did not need to read, as one line. */
rm_status rm_hf_parse_config(const char *json, size_t len, const char *name, rm_hf_config *c, char *notes,
                             size_t notes_cap, char *err, size_t errlen);

/* One tensor of the folder: its view and the file (shard) it lies in. */
typedef struct rm_hf_entry {
    const rm_st_tensor *t;
    int file;
} rm_hf_entry;

struct rm_hf {
    char dir[4096];
    rm_hf_config cfg;
    char notes[1024];
    int n_files;
    rm_st_file **files;  /* open, headers read (rm_st_open) */
    char **file_paths;   /* for messages */
    char *config_path, *index_path; /* the other files read (index_path NULL: one weight file) */
    int n_tensors;
    rm_hf_entry *tensors; /* sorted by name */
};

#endif
