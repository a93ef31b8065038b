/* data.h: training data (internal part). The dataset, its loaders and the
 * samplers are public (include/remat.h, "training data"); this adds the
 * layout of llm.c's token files. */
#ifndef REMAT_DATA_H
#define REMAT_DATA_H

#include "remat.h"

#define RM_LLMC_MAGIC 20240520   /* GPT-2's files: uint16 tokens */
#define RM_LLMC_VERSION 1
#define RM_LLMC_MAGIC_U32 20240801 /* llm.c's "llama-3" files: uint32 tokens */
#define RM_LLMC_VERSION_U32 7
#define RM_LLMC_HEADER_INTS 256

/* The contents of a data file already in memory (llm.c tokens, else bytes);
 * rm_data_load_file reads the file and calls it; the fuzzer calls it directly. */
rm_status rm_data_parse(rm_dataset *d, const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen);
/* The same with the token width of rm_data_load_tokens (0, 2 or 4). */
rm_status rm_data_parse_width(rm_dataset *d, const char *name, const unsigned char *buf, size_t len,
                              int token_bytes, char *err, size_t errlen);
/* Rows [r0, r0 + n) of batch k of B rows (a micro-batch): as rm_data_batch
 * into tokens and targets when x is NULL, else as rm_data_batch_mlp into x
 * and targets. RM_ERR_ARG if the rows are not within the batch. */
rm_status rm_data_rows(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed, uint64_t k,
                       int B, int T, int r0, int n, int vocab, int32_t *tokens, float *x, int32_t *targets,
                       char *err, size_t errlen);

#endif
