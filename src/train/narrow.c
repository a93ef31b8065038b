/* narrow.c: the narrowing rule (docs/RELIABILITY.md): a finite value kept
 * in a narrower format must stay finite there. F16's largest value is
 * 65504, so a pretrained weight of 70000 would become infinity when a
 * frozen base is kept in F16 (--frozen-dtype f16), and training would then
 * "diverge" for a reason no learning rate fixes; BF16 keeps fp32's range
 * but for the last rounding step (|x| above 3.3895e38). Every load into a
 * 2-byte parameter checks its tensor before a value is written. */
#include "train/safetensors.h"
#include "util/half.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Whether finite x stays finite kept as store. */
static int fits(float x, rm_dtype store) {
    if (store == RM_DTYPE_BF16) return isfinite(rm_bf16_to_f32(rm_f32_to_bf16(x)));
    if (store == RM_DTYPE_F16) return isfinite(rm_f16_to_f32(rm_f32_to_f16(x)));
    return 1;
}

/* Whether every value of dtype `from` fits `store` (nothing to scan). */
static int always_fits(const char *from, rm_dtype store) {
    return store == RM_DTYPE_F32 || (store == RM_DTYPE_BF16 && strcmp(from, "F32") != 0) ||
           (store == RM_DTYPE_F16 && strcmp(from, "F16") == 0);
}

#define FIT_BLOCK 65536 /* elements read at a time from a file kept on disk */

rm_status rm_st_first_unfit(const rm_st_file *f, const rm_st_tensor *t, rm_dtype store, int64_t *first,
                            float *value) {
    *first = -1;
    if (always_fits(t->dtype, store)) return RM_OK;
    const uint64_t n = rm_st_numel(t), esize = rm_st_dtype_size(t->dtype);
    unsigned char *buf = t->data ? NULL : malloc(FIT_BLOCK * esize);
    if (!t->data && !buf) return RM_ERR_NOMEM;
    rm_status st = RM_OK;
    for (uint64_t i0 = 0; i0 < n && st == RM_OK && *first < 0; i0 += FIT_BLOCK) {
        const uint64_t k = n - i0 < FIT_BLOCK ? n - i0 : FIT_BLOCK;
        rm_st_tensor part = *t;
        part.data = t->data ? (const unsigned char *)t->data + i0 * esize : buf, part.bytes = k * esize;
        if (!t->data) st = rm_st_read(f, t, i0 * esize, buf, (size_t)(k * esize));
        for (uint64_t i = 0; st == RM_OK && i < k; i++) {
            const float x = rm_st_element(&part, i);
            if (isfinite(x) && !fits(x, store)) {
                *first = (int64_t)(i0 + i), *value = x;
                break;
            }
        }
    }
    free(buf);
    return st;
}

void rm_st_unfit_error(char *err, size_t errlen, const char *file, const char *tensor, int64_t i, float x,
                       rm_dtype store) {
    rm_st_seterr(err, errlen, "'%s': tensor '%.120s' has the value %g (element %lld), which does not fit %s (largest "
                 "%s): it would become infinity; keep that weight in %s (rm_param_store; remat --frozen-dtype %s)",
                 file, tensor, (double)x, (long long)i, rm_st_dtype_name(store),
                 store == RM_DTYPE_F16 ? "65504" : "3.3895e38", store == RM_DTYPE_F16 ? "BF16 or F32" : "F32",
                 store == RM_DTYPE_F16 ? "bf16 or f32" : "f32");
}
