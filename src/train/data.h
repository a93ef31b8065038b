/* data.h: training data (internal part). The dataset, its loaders and the
 * samplers are public (include/remat.h, "training data"); this adds the
 * layout of llm.c's token files. */
#ifndef REMAT_DATA_H
#define REMAT_DATA_H

#include "remat.h"

#define RM_LLMC_MAGIC 20240520
#define RM_LLMC_VERSION 1
#define RM_LLMC_HEADER_INTS 256

/* The contents of a data file already in memory (llm.c tokens, else bytes);
 * rm_data_load_file reads the file and calls it; the fuzzer calls it directly. */
rm_status rm_data_parse(rm_dataset *d, const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen);
#endif
