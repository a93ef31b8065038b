/* fuzz_data.c: a libFuzzer target for the data-file reader: llm.c token
 * files (a 256-int32 header: magic 20240520, version 1, token count, then
 * uint16 ids; or magic 20240801, version 7, uint32 ids), headerless arrays
 * of 2- or 4-byte ids, and plain text read as bytes (rm_data_parse_width:
 * the input's size modulo 3 picks the width 0, 2 or 4), then what
 * `remat train --data` does with the result: the vocabulary check, the
 * train/validation split and batches from both samplers. The first byte of
 * the input picks the batch shape, so the fuzzer explores small and large
 * B*T against short files. Built and run by tests/test_fuzz.sh; by hand:
 *   build/fuzz/fuzz_data fuzz/corpus_data */
#include "train/data.h"

#include <stdlib.h>
#include <string.h>

/* data.c's built-in corpus comes from the build (build/corpus.c); this
 * target never loads it, so a one-line corpus satisfies the linker. */
const unsigned char rm_corpus[] = "fuzz";
const size_t rm_corpus_len = 4;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int B = 1 + (data[0] & 7), T = 1 + (data[0] >> 3); /* 1..8 rows of 1..32 tokens */
    char err[512];
    rm_dataset d;
    const int widths[3] = {0, 2, 4};
    rm_status st = rm_data_parse_width(&d, "fuzz", data + 1, size - 1, widths[size % 3], err, sizeof err);
    if (st != RM_OK) {
        if (d.tokens || !memchr(err, 0, sizeof err) || !err[0]) abort(); /* an error leaves nothing, says why */
        rm_data_free(&d);
        return 0;
    }
    if (d.n < 2 || d.n_train != d.n) abort();
    for (size_t i = 0; i < d.n; i++)
        if (d.tokens[i] < 0 || d.tokens[i] > d.max_id) abort();
    (void)rm_data_check_vocab(&d, 256, err, sizeof err);
    if (rm_data_split(&d, 0.25, B, T, err, sizeof err) == RM_OK) {
        int32_t tok[8 * 32], tgt[8 * 32], y[8];
        float x[8 * 32];
        for (uint64_t k = 0; k < 3; k++) {
            if (rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 7, k, B, T, tok, tgt, err, sizeof err) != RM_OK ||
                rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_SEQUENTIAL, 7, k, B, T, tok, tgt, err, sizeof err) != RM_OK ||
                rm_data_batch_mlp(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 7, k, B, T, 65536, x, y, err, sizeof err) != RM_OK)
                abort(); /* a split that passed holds a batch */
            if (d.n_val) (void)rm_data_batch(&d, RM_DATA_VAL, RM_SAMPLE_SEQUENTIAL, 7, k, B, T, tok, tgt, err, sizeof err);
        }
    }
    rm_data_free(&d);
    return 0;
}
