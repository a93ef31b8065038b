/* data.h: training data: a token sequence, its train/validation split, and
 * batch samplers (internal API).
 *
 * Sources: a file in llm.c's token format (a header of 256 int32: magic
 * 20240520, version 1, token count; then uint16 tokens), any other file
 * read as bytes (one token per byte, vocab 256), or the corpus embedded in
 * the library (the project's docs and sources, as bytes).
 *
 * Every batch is a pure function of its arguments (seed, batch index), so a
 * run resumed at batch k sees the same data as one that never stopped. */
#ifndef REMAT_DATA_H
#define REMAT_DATA_H

#include "remat.h"
#include <stddef.h>
#include <stdint.h>

#define RM_LLMC_MAGIC 20240520
#define RM_LLMC_VERSION 1
#define RM_LLMC_HEADER_INTS 256

typedef enum rm_data_format { RM_DATA_BYTES = 0, RM_DATA_LLMC } rm_data_format;
typedef enum rm_data_part { RM_DATA_TRAIN = 0, RM_DATA_VAL } rm_data_part;
/* RANDOM: each row starts at a uniform offset keyed by (seed, batch, row).
 * SEQUENTIAL: llm.c's loader: batch k is the k-th run of B*T+1 tokens,
 * advancing by B*T and wrapping around. Validation is always sequential. */
typedef enum rm_sampler { RM_SAMPLE_RANDOM = 0, RM_SAMPLE_SEQUENTIAL } rm_sampler;

typedef struct rm_dataset {
    int32_t *tokens;       /* all tokens (owned) */
    size_t n;
    size_t n_train, n_val; /* train = tokens[0, n_train), val = tokens[n_train, n) */
    int32_t max_id;        /* the largest token id */
    rm_data_format format;
    char name[256];        /* the file (for messages), or "<corpus>" */
} rm_dataset;

/* Loaders fill *d (n_train = n, n_val = 0 until rm_data_split). On error *d
 * is left empty (safe to rm_data_free). Errors: RM_ERR_IO (cannot read),
 * RM_ERR_FORMAT (bad llm.c header, fewer than 2 tokens), RM_ERR_NOMEM. */
rm_status rm_data_load_file(rm_dataset *d, const char *path, char *err, size_t errlen);
rm_status rm_data_load_corpus(rm_dataset *d, char *err, size_t errlen);
rm_status rm_data_from_bytes(rm_dataset *d, const char *name, const unsigned char *bytes,
                             size_t n, char *err, size_t errlen);
void rm_data_free(rm_dataset *d);

/* RM_ERR_ARG naming the first token id >= vocab and its position. */
rm_status rm_data_check_vocab(const rm_dataset *d, int vocab, char *err, size_t errlen);

/* The last val_fraction (in [0, 1); 0 = no validation) of the tokens become
 * the validation part. Each non-empty part must hold one (B, T) batch, i.e.
 * B*T+1 tokens, else RM_ERR_ARG saying how many are needed. */
rm_status rm_data_split(rm_dataset *d, double val_fraction, int B, int T, char *err,
                        size_t errlen);

/* Tokens in a part, and batches per pass over it: floor((n - 1) / (B*T)). */
size_t rm_data_part_len(const rm_dataset *d, rm_data_part part);
uint64_t rm_data_num_batches(const rm_dataset *d, rm_data_part part, int B, int T);

/* Offset, within the part, of row r of batch k: the row covers tokens
 * [start, start + T + 1). Needs a part that passed rm_data_split's check. */
size_t rm_data_row_start(const rm_dataset *d, rm_data_part part, rm_sampler mode,
                         uint64_t seed, uint64_t k, int B, int T, int r);

/* Batch k for a language model: tokens (B,T) and targets (B,T) int32, the
 * targets shifted by one. RM_ERR_ARG if the part is too small. */
rm_status rm_data_batch(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed,
                        uint64_t k, int B, int T, int32_t *tokens, int32_t *targets,
                        char *err, size_t errlen);

/* Batch k for the mlp model: x (B,T) float, the row's first T tokens as
 * id / (vocab - 1); y (B) int32, the token after the window. Same rows as
 * rm_data_batch. RM_ERR_ARG if the part is too small or vocab < 2. */
rm_status rm_data_batch_mlp(const rm_dataset *d, rm_data_part part, rm_sampler mode,
                            uint64_t seed, uint64_t k, int B, int T, int vocab, float *x,
                            int32_t *y, char *err, size_t errlen);

#endif
