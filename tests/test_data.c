/* test_data.c: token data loading (llm.c format, bytes, the embedded
 * corpus), vocab checks, the train/validation split and the samplers. */
#include "check.h"
#include "exec/exec.h"
#include "train/data.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];

static void path_in(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmpdir, name);
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

/* An llm.c token file: 256 int32 header (magic, version, count), then the
 * tokens as little-endian uint16. `extra` appends stray bytes. */
static int write_llmc(const char *path, int32_t magic, int32_t version, int32_t count,
                      const uint16_t *tok, size_t ntok, size_t extra) {
    size_t n = 1024 + 2 * ntok + extra;
    unsigned char *b = calloc(n, 1);
    if (!b) return -1;
    int32_t h[3] = {magic, version, count};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)((uint32_t)h[i] >> (8 * k));
    for (size_t i = 0; i < ntok; i++) {
        b[1024 + 2 * i] = (unsigned char)(tok[i] & 0xff);
        b[1024 + 2 * i + 1] = (unsigned char)(tok[i] >> 8);
    }
    int rc = write_bytes(path, b, n);
    free(b);
    return rc;
}

static void test_llmc(void) {
    char path[512], err[512];
    path_in(path, sizeof path, "tok.bin");
    enum { N = 3000 };
    uint16_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint16_t)(i * 7919u % 50257u);
    tok[5] = 65535;
    tok[6] = 0;
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 1, N, tok, N, 0) == 0, "write");
    rm_dataset d;
    rm_status st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_OK, "load llm.c file: %s", err);
    CHECK(d.format == RM_DATA_LLMC && d.n == N, "format %d n %zu", d.format, d.n);
    int same = 1;
    for (int i = 0; i < N && st == RM_OK; i++) same &= d.tokens[i] == tok[i];
    CHECK(same, "tokens differ");
    CHECK(d.max_id == 65535, "max id %d", d.max_id);
    CHECK(d.n_train == N && d.n_val == 0, "no split yet");

    /* token 65535 at position 5 is out of a GPT-2 vocab */
    st = rm_data_check_vocab(&d, 50257, err, sizeof err);
    char want[700];
    snprintf(want, sizeof want, "'%s': token 65535 at position 5 is >= vocab 50257; the "
             "model needs a vocab of 65536 or larger", path);
    CHECK(st == RM_ERR_ARG && strcmp(err, want) == 0, "vocab: %d '%s'", st, err);
    CHECK(rm_data_check_vocab(&d, 65536, err, sizeof err) == RM_OK, "vocab 65536: %s", err);
    CHECK(rm_data_check_vocab(&d, 0, err, sizeof err) == RM_ERR_ARG, "vocab 0");
    rm_data_free(&d);

    /* A count that does not match the size; wrong version; short header. */
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 1, N + 1, tok, N, 0) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, path) && strstr(err, "3001"), "count: %d '%s'",
          st, err);
    CHECK(d.tokens == NULL, "tokens after a failure");
    rm_data_free(&d);
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 1, N, tok, N, 1) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT, "stray byte: %d '%s'", st, err);
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 1, -5, tok, 0, 0) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT, "negative count: %d '%s'", st, err);
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 2, N, tok, N, 0) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "version 2"), "version: %d '%s'", st, err);
    CHECK(write_llmc(path, RM_LLMC_MAGIC, 1, 1, tok, 1, 0) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "2 tokens"), "one token: %d '%s'", st, err);
    unsigned char shorth[100] = {0x88, 0xd8, 0x34, 0x01}; /* 20240520 little-endian */
    CHECK(write_bytes(path, shorth, sizeof shorth) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "header"), "short header: %d '%s'", st, err);
    rm_data_free(&d);
}

/* 4-byte ids: llm.c's llama-3 header (magic 20240801, version 7) and
 * headerless arrays (--token-bytes 2 or 4); widths that disagree, sizes
 * that do not divide, ids past INT32_MAX. */
static void test_uint32(void) {
    char path[512], err[512];
    path_in(path, sizeof path, "tok32.bin");
    enum { N = 2000 };
    unsigned char b[1024 + 4 * N];
    memset(b, 0, sizeof b);
    const int32_t h[3] = {RM_LLMC_MAGIC_U32, RM_LLMC_VERSION_U32, N};
    memcpy(b, h, sizeof h); /* little-endian host (safetensors.c says so too) */
    uint32_t tok[N];
    for (int i = 0; i < N; i++) tok[i] = (uint32_t)i * 104729u % 128256u;
    tok[3] = 128255;
    memcpy(b + 1024, tok, sizeof tok);
    CHECK(write_bytes(path, b, sizeof b) == 0, "write");
    rm_dataset d;
    rm_status st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_OK && d.format == RM_DATA_LLMC && d.n == N && d.max_id == 128255, "llama-3 file: %s", err);
    int same = st == RM_OK;
    for (int i = 0; same && i < N; i++) same = d.tokens[i] == (int32_t)tok[i];
    CHECK(same, "llama-3 file: tokens differ");
    st = rm_data_check_vocab(&d, 128000, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "token 128255 at position 3"), "vocab 128000: '%s'", err);
    rm_data_free(&d);
    CHECK(rm_data_load_tokens(&d, path, 4, err, sizeof err) == RM_OK && d.n == N, "--token-bytes 4: %s", err);
    rm_data_free(&d);
    st = rm_data_load_tokens(&d, path, 2, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "4-byte tokens"), "header 4, --token-bytes 2: '%s'", err);
    /* the same ids, no header */
    CHECK(write_bytes(path, tok, sizeof tok) == 0, "write");
    st = rm_data_load_tokens(&d, path, 4, err, sizeof err);
    CHECK(st == RM_OK && d.format == RM_DATA_TOKENS && d.n == N && d.tokens[3] == 128255, "raw uint32: %s", err);
    rm_data_free(&d);
    st = rm_data_load_tokens(&d, path, 2, err, sizeof err); /* read as uint16: twice as many ids */
    CHECK(st == RM_OK && d.n == 2 * N && d.tokens[6] == (int32_t)(128255 & 0xffff), "raw uint16: %s", err);
    rm_data_free(&d);
    CHECK(write_bytes(path, tok, sizeof tok - 1) == 0, "write");
    st = rm_data_load_tokens(&d, path, 4, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "4-byte tokens"), "7999 bytes: '%s'", err);
    tok[7] = 0x80000000u;
    CHECK(write_bytes(path, tok, sizeof tok) == 0, "write");
    st = rm_data_load_tokens(&d, path, 4, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "position 7") && d.tokens == NULL, "id 2^31: '%s'", err);
    CHECK(rm_data_load_tokens(&d, path, 3, err, sizeof err) == RM_ERR_ARG, "--token-bytes 3");
    int32_t v6[3] = {RM_LLMC_MAGIC_U32, 6, 0};
    memset(b, 0, 1024);
    memcpy(b, v6, sizeof v6);
    CHECK(write_bytes(path, b, 1024) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "version 6"), "llama-3 version 6: '%s'", err);
}

static void test_bytes(void) {
    char path[512], err[512];
    path_in(path, sizeof path, "text.txt");
    const char *text = "hello, world\n\xff\x80";
    CHECK(write_bytes(path, text, strlen(text)) == 0, "write");
    rm_dataset d;
    rm_status st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_OK && d.format == RM_DATA_BYTES && d.n == strlen(text), "bytes: %s", err);
    for (size_t i = 0; st == RM_OK && i < d.n; i++)
        CHECK(d.tokens[i] == (unsigned char)text[i], "byte %zu", i);
    CHECK(d.max_id == 255, "max id %d", d.max_id);
    st = rm_data_check_vocab(&d, 128, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "token 255 at position 13"), "vocab: '%s'", err);
    rm_data_free(&d);

    CHECK(write_bytes(path, "", 0) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, path) && strstr(err, "empty"), "empty: %d '%s'",
          st, err);
    CHECK(write_bytes(path, "x", 1) == 0, "write");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_FORMAT && strstr(err, "1 token"), "one byte: %d '%s'", st, err);
    path_in(path, sizeof path, "missing.bin");
    st = rm_data_load_file(&d, path, err, sizeof err);
    CHECK(st == RM_ERR_IO && strstr(err, path), "missing: %d '%s'", st, err);
    st = rm_data_load_file(&d, tmpdir, err, sizeof err);
    CHECK(st == RM_ERR_IO && strstr(err, "directory"), "directory: %d '%s'", st, err);
    rm_data_free(&d);

    st = rm_data_load_corpus(&d, err, sizeof err);
    CHECK(st == RM_OK && d.n > 1000 && d.max_id < 256, "corpus: %s (%zu tokens)", err, d.n);
    CHECK(st != RM_OK || memcmp(d.name, "<corpus>", 8) == 0, "corpus name");
    rm_data_free(&d);
}

/* Data whose token i is i (llm.c ids up to 65535), for checking positions. */
static rm_status make_iota(rm_dataset *d, size_t n, char *err, size_t errlen) {
    char path[512];
    path_in(path, sizeof path, "iota.bin");
    uint16_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (uint16_t)i;
    int rc = write_llmc(path, RM_LLMC_MAGIC, 1, (int32_t)n, t, n, 0);
    free(t);
    if (rc) return RM_ERR_IO;
    return rm_data_load_file(d, path, err, errlen);
}

static void test_split(void) {
    char err[512];
    rm_dataset d;
    CHECK(make_iota(&d, 1000, err, sizeof err) == RM_OK, "iota: %s", err);
    rm_status st = rm_data_split(&d, 0.1, 4, 8, err, sizeof err);
    CHECK(st == RM_OK && d.n_train == 900 && d.n_val == 100, "split: %s %zu/%zu", err,
          d.n_train, d.n_val);
    CHECK(rm_data_part_len(&d, RM_DATA_TRAIN) == 900 && rm_data_part_len(&d, RM_DATA_VAL) == 100,
          "part lengths");
    st = rm_data_split(&d, 0.25, 4, 8, err, sizeof err);
    CHECK(st == RM_OK && d.n_train == 750 && d.n_val == 250, "split 0.25");
    st = rm_data_split(&d, 0.0, 4, 8, err, sizeof err);
    CHECK(st == RM_OK && d.n_train == 1000 && d.n_val == 0, "no validation");
    /* 100 validation tokens cannot hold 16*8+1 = 129 */
    st = rm_data_split(&d, 0.1, 16, 8, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "validation") && strstr(err, "129"),
          "small val: %d '%s'", st, err);
    st = rm_data_split(&d, 0.1, 30, 30, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "training") && strstr(err, "901"),
          "small train: %d '%s'", st, err);
    CHECK(rm_data_split(&d, 1.0, 4, 8, err, sizeof err) == RM_ERR_ARG, "fraction 1");
    CHECK(rm_data_split(&d, -0.1, 4, 8, err, sizeof err) == RM_ERR_ARG, "negative fraction");
    CHECK(rm_data_split(&d, NAN, 4, 8, err, sizeof err) == RM_ERR_ARG, "NaN fraction");
    CHECK(rm_data_split(&d, 0.1, 0, 8, err, sizeof err) == RM_ERR_ARG, "B = 0");
    rm_data_free(&d);
}

/* rm_dataset is public: one a caller fills by hand, with counts that do not
 * fit its tokens or ids its max_id does not say, is refused, never read
 * past (n_train past n: a read past the tokens, SIGSEGV). */
static void test_hand_made(void) {
    char err[512];
    int32_t tok[64], a[16], b[16];
    float x[16];
    for (int i = 0; i < 64; i++) tok[i] = i % 10;
    rm_dataset d = {.tokens = tok, .n = 10, .n_train = 64000, .max_id = 9, .name = "hand"};
    rm_status st = rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 5, 2, 8, a, b, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "counts disagree"), "n_train past n: %d '%s'", st, err);
    CHECK(rm_data_part_len(&d, RM_DATA_TRAIN) == 0 && rm_data_num_batches(&d, RM_DATA_TRAIN, 2, 8) == 0 &&
              rm_data_row_start(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, 5, 2, 8, 1) == 0, "part of n_train past n");
    d.n = 64, d.n_train = 40, d.n_val = 1000;
    st = rm_data_batch_mlp(&d, RM_DATA_VAL, RM_SAMPLE_SEQUENTIAL, 1, 5, 2, 8, 10, x, b, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "counts disagree"), "n_val past n: %d '%s'", st, err);
    CHECK(rm_data_check_vocab(&d, 10, err, sizeof err) == RM_ERR_ARG, "check_vocab of n_val past n");
    d.n_val = 24, tok[30] = -3; /* max_id says 9 */
    st = rm_data_check_vocab(&d, 10, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "token -3 at position 30 is negative"), "negative id: %d '%s'", st, err);
    tok[30] = 70;
    st = rm_data_check_vocab(&d, 10, err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "needs a vocab of 71"), "id above max_id: %d '%s'", st, err);
    d.tokens = NULL;
    CHECK(rm_data_check_vocab(&d, 100, err, sizeof err) == RM_ERR_ARG && strstr(err, "no data"), "no tokens");
}

static void test_sequential(void) {
    char err[512];
    rm_dataset d;
    CHECK(make_iota(&d, 1000, err, sizeof err) == RM_OK, "iota: %s", err);
    enum { B = 4, T = 8 };
    CHECK(rm_data_split(&d, 0.1, B, T, err, sizeof err) == RM_OK, "split: %s", err);
    uint64_t nb = rm_data_num_batches(&d, RM_DATA_TRAIN, B, T);
    CHECK(nb == (900 - 1) / (B * T), "batches per epoch %llu", (unsigned long long)nb);
    int32_t tok[B * T], tgt[B * T];
    int ok = 1;
    for (uint64_t k = 0; k < 3 * nb + 2; k++) {
        rm_status st = rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_SEQUENTIAL, 7, k, B, T, tok,
                                     tgt, err, sizeof err);
        if (st != RM_OK) ok = 0;
        size_t p = (size_t)(k % nb) * B * T;
        for (int r = 0; r < B; r++) {
            size_t s = rm_data_row_start(&d, RM_DATA_TRAIN, RM_SAMPLE_SEQUENTIAL, 7, k, B, T, r);
            if (s != p + (size_t)r * T) ok = 0;
            for (int t = 0; t < T; t++) {
                if (tok[r * T + t] != (int32_t)(p + (size_t)r * T + t)) ok = 0;
                if (tgt[r * T + t] != (int32_t)(p + (size_t)r * T + t + 1)) ok = 0;
            }
        }
    }
    CHECK(ok, "sequential batches differ from llm.c's positions");
    /* The last batch of an epoch ends within the training part. */
    CHECK((nb - 1) * B * T + B * T + 1 <= 900, "last batch in range");

    /* Validation: sequential over its own part, wrapping around. */
    uint64_t nv = rm_data_num_batches(&d, RM_DATA_VAL, B, T);
    CHECK(nv == (100 - 1) / (B * T), "val batches %llu", (unsigned long long)nv);
    ok = 1;
    for (uint64_t j = 0; j < 2 * nv + 1; j++) {
        /* sampler mode and seed are ignored for validation */
        rm_status st = rm_data_batch(&d, RM_DATA_VAL, RM_SAMPLE_RANDOM, j + 99, j, B, T, tok,
                                     tgt, err, sizeof err);
        if (st != RM_OK) ok = 0;
        size_t p = 900 + (size_t)(j % nv) * B * T;
        for (int i = 0; i < B * T; i++)
            if (tok[i] != (int32_t)(p + (size_t)i) || tgt[i] != (int32_t)(p + (size_t)i + 1))
                ok = 0;
    }
    CHECK(ok, "validation batches are not sequential over the validation part");

    /* A part too small for the batch asked for: an error, not a crash. */
    rm_status st = rm_data_batch(&d, RM_DATA_VAL, RM_SAMPLE_SEQUENTIAL, 0, 0, 64, 64, tok, tgt,
                                 err, sizeof err);
    CHECK(st == RM_ERR_ARG && strstr(err, "4097"), "too small: %d '%s'", st, err);
    rm_data_free(&d);
}

static void test_random(void) {
    char err[512];
    rm_dataset d;
    CHECK(make_iota(&d, 1000, err, sizeof err) == RM_OK, "iota: %s", err);
    enum { B = 4, T = 8 };
    CHECK(rm_data_split(&d, 0.1, B, T, err, sizeof err) == RM_OK, "split: %s", err);
    int32_t a[B * T], at[B * T], b[B * T], bt[B * T];
    CHECK(rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 42, 5, B, T, a, at, err,
                        sizeof err) == RM_OK, "batch: %s", err);
    CHECK(rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 42, 5, B, T, b, bt, err,
                        sizeof err) == RM_OK, "batch: %s", err);
    CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(at, bt, sizeof at) == 0,
          "same seed and k give different batches");
    for (int i = 0; i < B * T; i++) CHECK(at[i] == a[i] + 1, "targets are not shifted inputs");
    for (int r = 0; r < B; r++)
        for (int t = 1; t < T; t++)
            CHECK(a[r * T + t] == a[r * T] + t, "row %d is not contiguous", r);
    rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 42, 6, B, T, b, bt, err, sizeof err);
    CHECK(memcmp(a, b, sizeof a) != 0, "different k give the same batch");
    rm_data_batch(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 43, 5, B, T, b, bt, err, sizeof err);
    CHECK(memcmp(a, b, sizeof a) != 0, "different seeds give the same batch");

    /* Offsets stay in [0, n-T-1] and reach both ends. */
    size_t lo = SIZE_MAX, hi = 0;
    int in_range = 1;
    for (uint64_t k = 0; k < 4000; k++)
        for (int r = 0; r < B; r++) {
            size_t s = rm_data_row_start(&d, RM_DATA_TRAIN, RM_SAMPLE_RANDOM, 1, k, B, T, r);
            if (s > 900 - T - 1) in_range = 0;
            if (s < lo) lo = s;
            if (s > hi) hi = s;
        }
    CHECK(in_range, "a random offset is out of range");
    CHECK(lo == 0 && hi == 900 - T - 1, "offsets span [%zu, %zu]", lo, hi);
    rm_data_free(&d);
}

static void test_mlp(void) {
    char err[512];
    rm_dataset d;
    CHECK(make_iota(&d, 600, err, sizeof err) == RM_OK, "iota: %s", err);
    enum { B = 3, T = 5, V = 601 };
    CHECK(rm_data_split(&d, 0.1, B, T, err, sizeof err) == RM_OK, "split: %s", err);
    float x[B * T];
    int32_t y[B], tok[B * T], tgt[B * T];
    for (int mode = 0; mode < 2; mode++) {
        rm_sampler m = mode ? RM_SAMPLE_SEQUENTIAL : RM_SAMPLE_RANDOM;
        rm_status st = rm_data_batch_mlp(&d, RM_DATA_TRAIN, m, 3, 11, B, T, V, x, y, err,
                                         sizeof err);
        CHECK(st == RM_OK, "mlp batch: %s", err);
        rm_data_batch(&d, RM_DATA_TRAIN, m, 3, 11, B, T, tok, tgt, err, sizeof err);
        for (int r = 0; r < B; r++) {
            for (int t = 0; t < T; t++)
                CHECK(x[r * T + t] == (float)tok[r * T + t] / (float)(V - 1),
                      "x[%d,%d] = %g", r, t, x[r * T + t]);
            CHECK(y[r] == tok[r * T + T - 1] + 1 && y[r] == tgt[r * T + T - 1],
                  "y[%d] = %d is not the token after the window", r, y[r]);
        }
    }
    CHECK(rm_data_batch_mlp(&d, RM_DATA_VAL, RM_SAMPLE_RANDOM, 0, 0, B, T, 1, x, y, err,
                            sizeof err) == RM_ERR_ARG, "vocab 1");
    rm_data_free(&d);
}

int main(void) {
    if (check_tmpdir(tmpdir, sizeof tmpdir, "test_data")) return 1;
    test_llmc();
    test_uint32();
    test_bytes();
    test_split();
    test_hand_made();
    test_sequential();
    test_random();
    test_mlp();
    check_rmdir(tmpdir);
    return check_done("test_data");
}
