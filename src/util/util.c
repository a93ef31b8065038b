/* util.c: small helpers shared by every part of the library. */
#include "util/util.h"
#include <stdio.h>
#include <string.h>

size_t rm_dtype_size(rm_dtype d) {
    switch (d) {
    case RM_DTYPE_F32: return 4;
    case RM_DTYPE_I32: return 4;
    }
    return 0; /* an invalid dtype: callers treat 0 bytes as an error */
}

/* Copies at most n-1 bytes of src and always terminates dst (when n > 0);
 * a too-long src is truncated, never overflows. */
void rm_strlcpy(char *dst, const char *src, size_t n) {
    if (n == 0) return;
    size_t len = src ? strlen(src) : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(dst, src, len);
    dst[len] = '\0';
}

const char *rm_version(void) { return RM_VERSION; }
