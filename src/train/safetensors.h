/* safetensors.h: reading and writing .safetensors files (internal API).
 *
 * The format (huggingface/safetensors, docs "Format" section):
 *   8 bytes   N, a little-endian u64: the length of the header;
 *   N bytes   a UTF-8 JSON object: for each tensor
 *               "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}
 *             and optionally "__metadata__": {"key": "value", ...} (strings only);
 *             it may be padded at the end with spaces;
 *   the rest  the data section: raw little-endian, row-major tensor bytes;
 *             [b, e) are offsets into it. The tensors must cover it exactly,
 *             with no overlap and no hole.
 * The reader validates all of this and never trusts a size from the file. */
#ifndef REMAT_SAFETENSORS_H
#define REMAT_SAFETENSORS_H

#include "remat.h"
#include <stddef.h>
#include <stdint.h>

#define RM_ST_MAX_HEADER 100000000u /* as the reference implementation */
#define RM_ST_MAX_NDIM 64

/* The metadata key of remat's checksum and the size of its value:
 * "sha256:" and 64 hex digits (see checksum.c for what it covers). */
#define RM_ST_CHECKSUM_KEY "remat_checksum"
#define RM_ST_CHECKSUM_LEN 72

/* One tensor: the input of the writer, and the view the reader returns.
 * The reader's data pointer is set for a file parsed in memory
 * (rm_st_parse), not necessarily aligned for the dtype; a file opened with
 * rm_st_open keeps its tensors on disk (data NULL): read them with
 * rm_st_read, which does both. */
typedef struct rm_st_tensor {
    const char *name;
    const char *dtype;      /* "F32", "I32", "I64", "F16", "BF16", "U8", ... */
    int ndim;               /* 0 for a scalar */
    const int64_t *shape;
    const void *data;
    uint64_t bytes;         /* numel * rm_st_dtype_size(dtype) */
    /* Writing a tensor whose bytes are not in memory (data NULL; paged
     * training state, issue 20): view returns a pointer to its bytes from
     * `off` on and how many are there (*len >= 1; NULL after an error). The
     * checksum and the writer read it front to back, in turn. */
    const void *(*view)(void *user, uint64_t off, uint64_t *len);
    void *user;
} rm_st_tensor;

/* Calls f on the bytes of t front to back, a piece at a time (all at once
 * when they are in memory); stops at the first nonzero f returns, or with
 * EIO when a view fails. Returns 0 or that value. */
int rm_st_each_piece(const rm_st_tensor *t, int (*f)(void *ctx, const void *p, uint64_t n), void *ctx);

typedef struct rm_st_file rm_st_file;

/* Bytes per element of a safetensors dtype name; 0 if unknown. */
size_t rm_st_dtype_size(const char *dtype);

/* Writes the tensors (in the given order, contiguous) and the metadata
 * (n_meta key/value strings) to `path` atomically: a temp file in the same
 * directory is written, synced and renamed over `path`, so `path` holds
 * either the old or the whole new file. Bad arguments: RM_ERR_ARG; any
 * failure of the file system: RM_ERR_IO, and no temp file is left. */
rm_status rm_st_write(const char *path, int n, const rm_st_tensor *tensors,
                      int n_meta, const char *const *keys, const char *const *values,
                      char *err, size_t errlen);

/* rm_st_write, and with add_checksum the metadata gains RM_ST_CHECKSUM_KEY,
 * the digest of the tensors and the other metadata (rm_st_digest). */
rm_status rm_st_write_ex(const char *path, int n, const rm_st_tensor *tensors,
                         int n_meta, const char *const *keys, const char *const *values,
                         int add_checksum, char *err, size_t errlen);

/* Opens a file and validates its header and layout against its size,
 * reading the header only (the tensors stay on disk: rm_st_read); the file
 * stays open until rm_st_close. RM_ERR_IO if it cannot be read,
 * RM_ERR_FORMAT (message naming the file and the problem) if malformed,
 * RM_ERR_NOMEM. On success *out must be freed with rm_st_close. */
rm_status rm_st_open(const char *path, rm_st_file **out, char *err, size_t errlen);
/* s (a name or value read from a file; NULL: "") made fit for a one-line
 * message in out: control characters (newline, escape) as '?', cut after
 * about 60 bytes with "..."; returns out. Every string of a file that a
 * message shows goes through it (hf.c, hfconfig.c, this reader). */
const char *rm_st_printable(const char *s, char *out, size_t cap);
/* Bytes [off, off + n) of tensor t of f into dst: RM_ERR_IO when the file
 * can no longer be read (it shrank since it was opened), RM_ERR_ARG for a
 * range outside the tensor. */
rm_status rm_st_read(const rm_st_file *f, const rm_st_tensor *t, uint64_t off, void *dst, size_t n);
/* The same on a buffer in memory (copied); `name` is used in messages. */
rm_status rm_st_parse(const void *buf, size_t len, const char *name,
                      rm_st_file **out, char *err, size_t errlen);
void rm_st_close(rm_st_file *f);

/* Tensors in file order (by data offset). Views live until rm_st_close. */
int rm_st_count(const rm_st_file *f);
const rm_st_tensor *rm_st_at(const rm_st_file *f, int i);
/* The tensor of that name, or NULL. */
const rm_st_tensor *rm_st_find(const rm_st_file *f, const char *name);

/* Metadata: the value of `key`, or NULL; and iteration in header order. */
const char *rm_st_meta(const rm_st_file *f, const char *key);
int rm_st_meta_count(const rm_st_file *f);
const char *rm_st_meta_key(const rm_st_file *f, int i);
const char *rm_st_meta_value(const rm_st_file *f, int i);

/* The element count of a view (shape product; 1 for a scalar). */
uint64_t rm_st_numel(const rm_st_tensor *t);
/* The same for a shape; 0 with *overflow set if it passes 2^64. */
uint64_t rm_st_shape_numel(int ndim, const int64_t *shape, int *overflow);
/* rm_format_shape (remat.h) writes a shape for messages. */

/* Element i of an F32, BF16 or F16 tensor as fp32 (exactly); its data in
 * memory (rm_st_parse). */
float rm_st_element(const rm_st_tensor *t, uint64_t i);
/* The first n elements of an F32, BF16 or F16 tensor of f into dst kept as
 * `store` (F32; BF16 or F16: 2 bytes each, copied when the dtypes agree,
 * rounded to nearest even when not), read from the file (rm_st_read) when
 * not in memory; *bad: the index of the first value that is not finite, or
 * -1. RM_ERR_IO (the file shrank), RM_ERR_NOMEM. */
rm_status rm_st_convert(const rm_st_file *f, const rm_st_tensor *t, void *dst, uint64_t n, rm_dtype store,
                        int64_t *bad);
/* narrow.c, the narrowing rule: the first element of t (of file f) that is
 * finite but not kept as `store` (F16 above 65504, BF16 above 3.3895e38:
 * infinity), its index in *first and value in *value; *first -1 when all
 * fit. Values that are not finite are the callers' own check. RM_ERR_IO
 * (the file shrank), RM_ERR_NOMEM. rm_st_unfit_error words the refusal. */
rm_status rm_st_first_unfit(const rm_st_file *f, const rm_st_tensor *t, rm_dtype store, int64_t *first,
                            float *value);
void rm_st_unfit_error(char *err, size_t errlen, const char *file, const char *tensor, int64_t i, float x,
                       rm_dtype store);
/* The safetensors name of a parameter's storage: "F32", "BF16", "F16". */
const char *rm_st_dtype_name(rm_dtype store);
/* vsnprintf into err (if any): the one-line messages of train/. */
void rm_st_seterr(char *err, size_t errlen, const char *fmt, ...);

/* ---- checksum.c ------------------------------------------------------------ */

/* "sha256:<hex>" of the canonical encoding of n tensors (any order) and the
 * metadata other than RM_ST_CHECKSUM_KEY (any order). RM_ERR_NOMEM only. */
rm_status rm_st_digest(int n, const rm_st_tensor *const *tensors, int n_meta,
                       const char *const *keys, const char *const *values,
                       char out[RM_ST_CHECKSUM_LEN]);
/* Checks a file's checksum. RM_OK when it holds (*present = 1) or the file
 * has none (*present = 0); RM_ERR_FORMAT, with a message naming fname, when
 * it does not hold or is not "sha256:<64 hex>"; RM_ERR_NOMEM. computed, if
 * not NULL, receives the digest of the contents. */
rm_status rm_st_verify(const rm_st_file *f, const char *fname, int *present,
                       char computed[RM_ST_CHECKSUM_LEN], char *err, size_t errlen);

/* ---- params.c ---------------------------------------------------------------- */

/* Loads an open file into s (and o). Flags: RM_LOAD_STATE as rm_load_state
 * (a checksum, and with an AdamW o the moments and "optimizer_updates", are
 * required), else as rm_load_params (the checksum is verified if present);
 * RM_LOAD_VERIFIED: the caller has verified the checksum (rm_st_verify), so
 * it is not computed again. */
enum { RM_LOAD_STATE = 1, RM_LOAD_VERIFIED = 2 };
/* RM_OK when f holds every parameter of g as F32 of its shape (what a load
 * needs), checked on the file's index alone: before a session allocates. */
rm_status rm_params_match(const rm_graph *g, const rm_st_file *f, const char *fname, char *err, size_t errlen);
/* Marks every parameter of g that f holds as rm_params_match wants it
 * (RM_INIT_ZEROS: not drawn at rm_compile); *n (NULL-able) counts them. */
rm_status rm_params_mark_loaded(rm_graph *g, const rm_st_file *f, const char *fname, int *n);
rm_status rm_load_from(rm_session *s, rm_optim *o, const rm_st_file *f, const char *fname,
                       int flags, char *err, size_t errlen);
/* params.c: t, whose data is state `what` (0: the parameter, 1: AdamW's
 * m, 2: its v) of parameter pi of s, is read from the scratch file when s
 * pages that state (issue 20): data NULL and a view whose context is src
 * (which must live as long as t). Unchanged otherwise. */
typedef struct rm_paged_src { rm_session *s; int pi, what; } rm_paged_src;
void rm_st_tensor_paged(rm_session *s, int pi, int what, rm_st_tensor *t, rm_paged_src *src);
/* params.c: tensor t of f (F32, BF16 or F16) into paged state `what` of
 * parameter pi, a block at a time through a buffer of its own (the arena
 * stages the paging units), widened to the floats the scratch file holds;
 * *bad: the first element that is not finite (-1: none), loaded as it
 * is, as rm_st_read would: the caller decides. */
rm_status rm_st_load_paged(rm_session *s, const rm_st_file *f, const rm_st_tensor *t, int pi, int what,
                           int64_t *bad);
/* state.c: rm_file (remat.h), a file opened for reading. */
struct rm_file {
    rm_st_file *st;
    int verified;   /* rm_file_verify found a checksum that holds */
    char path[4096];
};

/* optim.c: the session an optimizer updates. */
rm_session *rm_optim_session(const rm_optim *o);

#endif
