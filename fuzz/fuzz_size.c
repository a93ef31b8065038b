/* fuzz_size.c: a libFuzzer target for size strings, the value of
 * --memory-budget ("64MiB", "1.5GiB", "500MB", "123456", "50%"): whatever
 * the text, rm_parse_bytes accepts only a positive finite size (a percentage
 * at most 100) and never reads past the string. Built and run by
 * tests/test_fuzz.sh; by hand: build/fuzz/fuzz_size fuzz/corpus_size */
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    double bytes = -1;
    int percent = -1;
    if (rm_parse_bytes(s, &bytes, &percent) == RM_OK) {
        if (!(bytes > 0) || !isfinite(bytes) || (percent != 0 && percent != 1)) abort();
        if (percent && bytes > 100) abort();
    }
    free(s);
    return 0;
}
