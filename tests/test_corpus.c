/* test_corpus.c: the built-in corpus is a fixed text (data/corpus.txt.gz,
 * Makefile): the library embeds exactly its bytes, and those bytes are the
 * frozen ones (length and FNV-1a hash pinned here), so a run on the
 * built-in corpus trains on the same text at every commit and the losses
 * quoted in docs and tests hold. Regenerating the corpus is a decision:
 * change the pinned values with it and re-check every quoted loss. */
#include "check.h"
#include "remat.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CORPUS_BYTES 891180u
#define CORPUS_FNV1A_PINNED 0x45fd94ef7f1c658bULL

static uint64_t fnv1a(const int32_t *t, size_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)(unsigned char)t[i]) * 1099511628211ULL;
    return h;
}

int main(void) {
    rm_dataset d;
    char err[256];
    CHECK(rm_data_load_corpus(&d, err, sizeof err) == RM_OK, "corpus: %s", err);
    CHECK(d.n == CORPUS_BYTES, "the corpus has %zu bytes, the frozen one %u", d.n, CORPUS_BYTES);
    uint64_t h = fnv1a(d.tokens, d.n);
    CHECK(h == CORPUS_FNV1A_PINNED, "the corpus hashes to %016llx, the frozen one to %016llx",
          (unsigned long long)h, (unsigned long long)CORPUS_FNV1A_PINNED);
    /* and it is data/corpus.txt.gz, byte for byte */
    FILE *p = popen("gzip -dc data/corpus.txt.gz", "r");
    size_t i = 0, diff = 0;
    for (int c; p && (c = fgetc(p)) != EOF; i++) diff += i >= d.n || d.tokens[i] != c;
    int rc = p ? pclose(p) : -1;
    CHECK(rc == 0 && i == d.n && diff == 0, "data/corpus.txt.gz: %zu bytes, %zu differ from the embedded corpus", i,
          diff);
    rm_data_free(&d);
    return check_done("test_corpus");
}
