/* data.c: the data a run trains on (--data, or the built-in corpus; encdec
 * pairs), loaded and checked as train and bench (before its first point)
 * use it. Apart from guard.c so that the flag checks link without the
 * library (fuzz/fuzz_args.c). */
#include "guard.h"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The memory loading data file `path` takes at its peak: the file itself,
 * then a 4-byte id per token (a byte of text, or 2 bytes of an llm.c token
 * file), or for encdec pairs the file and 4 offsets per line. */
static int check_data_fits(const char *path, int encdec) {
    struct stat st;
    unsigned char m[4] = {0};
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0; /* the reader says what is wrong */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    const int llmc = fd >= 0 && read(fd, m, 4) == 4 && /* llm.c's magic, 20240520 */
                     ((uint32_t)m[0] | (uint32_t)m[1] << 8 | (uint32_t)m[2] << 16 | (uint32_t)m[3] << 24) == 20240520u;
    if (fd >= 0) close(fd);
    double size = (double)st.st_size, need = encdec ? size * 3 : size * (llmc ? 3 : 5), have = cli_machine_bytes();
    if (need <= have) return 0;
    return cli_fail(1, "--data '%s' (%.1f GiB%s) needs %.1f GiB in memory to load (%s), more than this machine's "
                    "%.1f GiB: use a smaller file%s", path, size / 1073741824.0, llmc ? " of llm.c tokens" : "",
                    need / 1073741824.0, encdec ? "the file and each line's offsets"
                    : llmc ? "the file, then a 4-byte id per 2-byte token" : "the file, then a 4-byte id per byte",
                    have / 1073741824.0, llmc || encdec ? "" : ", or tokenize it into an llm.c token file");
}

int cli_check_bytes_vocab(const cli_args *a, const rm_dataset *d) {
    if (d->format != RM_DATA_BYTES || !strcmp(a->model, "encdec")) return 0;
    /* a text file is bytes whatever --vocab says: that first, not which token a small vocab lacks */
    if (cli_given(a, "--vocab") && !a->resume && a->vocab != 256)
        return cli_fail(2, "'%s' is read as bytes (a text file: vocab 256), but --vocab is %d: --vocab is for llm.c "
                        "token files; drop it", d->name, a->vocab);
    if (a->vocab <= 256) return 0;
    return cli_fail(2, "'%s' is read as bytes (ids 0 to 255: a text file, or token ids given without --token-bytes), "
                    "but the model's vocab is %d (%s): its ids above 255 would never be seen; give the data as its "
                    "token ids (--token-bytes 2 or 4, or an llm.c token file)", d->name, a->vocab,
                    a->resume ? "from --resume" : a->init ? "from the --init folder's config.json" :
                    a->load ? "from --load" : "--vocab");
}

int cli_load_data(const cli_args *a, rm_dataset *d, rm_pairs *p) {
    char err[512];
    if (!strcmp(a->model, "encdec")) {
        for (int i = 0; i < 2; i++)
            if (cli_given(a, i ? "--val-fraction" : "--sampler"))
                cli_notice("warning", "%s does not apply to --model encdec (it draws (source, target) pairs "
                              "at random; evaluation uses pairs drawn with another seed); ignored",
                              i ? "--val-fraction" : "--sampler");
        if (a->context < 2) return cli_fail(2, "--model encdec needs --context >= 2 (a byte and EOS)");
        if (a->data && check_data_fits(a->data, 1)) return 1;
        if (a->data && rm_pairs_load(p, a->data, err, sizeof err) != RM_OK) return cli_fail(1, "%s", err);
        return 0;
    }
    if (!a->data && a->token_bytes) return cli_fail(2, "--token-bytes is for --data FILE (token ids)");
    if (a->data && check_data_fits(a->data, 0)) return 1;
    rm_status st = a->data ? rm_data_load_tokens(d, a->data, a->token_bytes, err, sizeof err)
                           : rm_data_load_corpus(d, err, sizeof err);
    if (st != RM_OK) return cli_fail(1, "%s", err);
    if (!a->resume && cli_check_bytes_vocab(a, d)) return 2; /* (--resume: once its file is checked) */
    st = rm_data_check_vocab(d, a->vocab, err, sizeof err);
    if (st == RM_OK) st = rm_data_split(d, a->val_fraction, a->batch, a->context, err, sizeof err);
    return st == RM_OK ? 0 : cli_fail(1, "%s", err);
}
