/* inspect.c: `remat inspect FILE`: what a .safetensors file holds (its
 * tensors and metadata) and whether its checksum holds. Exit status 0 when
 * the file is sound (with or without a checksum), 1 when it is malformed or
 * its checksum does not hold, 2 on a usage error. */
#include "args.h"
#include "hf.h"
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Prints s with control characters as '?', so one entry stays one line. */
static void put_clean(const char *s) {
    for (; *s; s++) putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

int cli_inspect(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return cli_help("inspect");
    if (argc != 1 || strncmp(argv[0], "--", 2) == 0)
        return cli_fail(2, "inspect takes one file: remat inspect FILE.safetensors");
    const char *path = argv[0];
    char err[512], sum[RM_CHECKSUM_LEN], hint[600];
    rm_file *f = NULL;
    if (rm_file_open(path, &f, err, sizeof err) != RM_OK)
        return cli_fail(1, "%s%s", err, cli_hf_hint(path, hint, sizeof hint));
    int present = 0;
    rm_status vst = rm_file_verify(f, &present, sum, err, sizeof err);

    int n = rm_file_tensor_count(f), nm = rm_file_meta_count(f);
    unsigned long long data = 0;
    int width = 4;
    rm_tensor_info ti, *t = &ti;
    for (int i = 0; i < n; i++) {
        rm_file_tensor(f, i, t);
        data += t->bytes;
        int w = (int)strlen(t->name);
        if (w > width) width = w < 60 ? w : 60;
    }
    struct stat sb;
    unsigned long long size = stat(path, &sb) == 0 ? (unsigned long long)sb.st_size : 0;
    printf("file: %s\n", path);
    printf("  %llu bytes: 8-byte length, %llu-byte header, %llu bytes of tensor data\n", size,
           size >= 8 + data ? size - 8 - data : 0, data);
    printf("metadata: %d entries\n", nm);
    for (int i = 0; i < nm; i++) {
        printf("  ");
        put_clean(rm_file_meta_key(f, i));
        printf(" = ");
        put_clean(rm_file_meta_value(f, i));
        putchar('\n');
    }
    printf("tensors: %d (in file order)\n", n);
    printf("  %-*s  %-7s  %-20s  %s\n", width, "name", "dtype", "shape", "bytes");
    for (int i = 0; i < n; i++) {
        rm_file_tensor(f, i, t);
        char shape[256];
        rm_format_shape(t->ndim, t->shape, shape, sizeof shape);
        printf("  ");
        put_clean(t->name);
        int pad = width - (int)strlen(t->name);
        printf("%*s  %-7s  %-20s  %llu\n", pad > 0 ? pad : 0, "", t->dtype, shape,
               (unsigned long long)t->bytes);
    }
    int rc = 0;
    if (vst == RM_OK && present) {
        printf("checksum: ok (%s)\n", sum);
    } else if (vst == RM_OK) {
        printf("checksum: none (no '%s' in the metadata; contents give %s)\n",
               "remat_checksum", sum);
    } else {
        printf("checksum: FAILED\n");
        rc = cli_fail(1, "%s", err);
    }
    fflush(stdout);
    rm_file_close(f);
    return rc;
}
