/* attn tensor files: safetensors (https://github.com/huggingface/safetensors), the format
 * PyTorch and the Hugging Face tools read and write.
 *
 * A file is an 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"__metadata__": {"key": "string", ...},
 *    "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8 bytes, then the tensors' raw little-endian bytes,
 * row-major. data_offsets count from the end of the header; the tensors tile the data area
 * exactly: no gaps, no overlaps, nothing after the last one.
 *
 * Writing is atomic: the file appears complete at its path or the previous file stays there
 * untouched. Reading validates the whole file before anything is returned, so a caller never
 * sees a tensor whose bytes lie outside the file or disagree with its dtype and shape.
 * Files are read on little-endian hosts only (a build on a big-endian host fails to compile).
 */
#ifndef ATTN_TENSOR_FILE_H
#define ATTN_TENSOR_FILE_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- element types ------------------------------------------------------------------ */

/* safetensors' element types, named as in the file ("F32", "BF16", ...). */
typedef enum attn_dtype {
    ATTN_DTYPE_BOOL = 0,
    ATTN_DTYPE_U8,
    ATTN_DTYPE_I8,
    ATTN_DTYPE_F8_E5M2,
    ATTN_DTYPE_F8_E4M3,
    ATTN_DTYPE_I16,
    ATTN_DTYPE_U16,
    ATTN_DTYPE_F16,
    ATTN_DTYPE_BF16,
    ATTN_DTYPE_I32,
    ATTN_DTYPE_U32,
    ATTN_DTYPE_F32,
    ATTN_DTYPE_F64,
    ATTN_DTYPE_I64,
    ATTN_DTYPE_U64,
    ATTN_DTYPE_COUNT /* not a type: the number of them */
} attn_dtype;

/* "F32", ...; "?" for a value that is not a dtype. */
ATTN_API const char *attn_dtype_name(attn_dtype dtype);
/* Bytes per element; 0 for a value that is not a dtype. */
ATTN_API size_t attn_dtype_size(attn_dtype dtype);

/* ---- writing ----------------------------------------------------------------------- */

/* One tensor to write: contiguous row-major data in host (little-endian) byte order.
 * data may be NULL only when the tensor has no elements. ndim 0 is a scalar. */
typedef struct attn_named_tensor {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    const void *data;
} attn_named_tensor;

/* One "__metadata__" entry: both strings UTF-8 (a JSON document is fine as a value). */
typedef struct attn_metadata_entry {
    const char *key;
    const char *value;
} attn_metadata_entry;

/* Writes tensors[0..n_tensors) and metadata[0..n_metadata) as a safetensors file at path.
 *
 * The header lists the tensors in the given order, with "__metadata__" first (omitted when
 * n_metadata is 0). In the data area each tensor starts at a multiple of its element size:
 * tensors are placed by element size, 8-byte types first, then 4, 2 and 1, keeping the given
 * order within each size (the format allows no padding between tensors). With tensors of
 * one dtype, the data order is the given order. Same inputs, same bytes.
 *
 * Atomic: the file is written to "<path>.tmp.<pid>" in the same folder, flushed, fsync'ed
 * and closed, then renamed over path, and the folder is fsync'ed. On failure the temporary
 * file is removed and a file already at path is left as it was; the error is ATTN_ERR_IO
 * with a message naming the path and the system's reason (a full disk, a read-only or
 * missing folder). Only the final folder sync can fail after the rename; it also returns
 * ATTN_ERR_IO, and then the new file is already in place. One writer per path at a time.
 *
 * ATTN_ERR_INVALID_ARGUMENT: NULL or empty path, NULL arrays with nonzero counts, a NULL,
 * empty, duplicate or non-UTF-8 name, the name "__metadata__", an unknown dtype, ndim
 * outside [0, ATTN_MAX_DIMS], a negative dimension, NULL data for a non-empty tensor, a NULL,
 * duplicate or non-UTF-8 metadata key or value, or tensors too large for the format. */
ATTN_API attn_status attn_tensor_file_write(const char *path, const attn_named_tensor *tensors,
                                            size_t n_tensors, const attn_metadata_entry *metadata,
                                            size_t n_metadata);

/* Removes the temporary files "<path>.tmp.<pid>" that attn_tensor_file_write leaves beside
 * path when its process is killed while writing, for each <pid> that no longer runs. A
 * running writer's file and every other file are left alone; a missing folder holds nothing
 * to remove. Counts the removed files in *removed (may be NULL). ATTN_ERR_IO, naming the
 * folder or file, when the folder cannot be read or a stale file cannot be removed (the ones
 * before it are gone). */
ATTN_API attn_status attn_tensor_file_remove_stale_temporaries(const char *path, int64_t *removed);

/* Whether attn_tensor_file_write could write path now: creates and removes the temporary file
 * it would write ("<path>.tmp.<pid>"), so a missing or read-only folder, a path that is a
 * folder, or an empty name is found before hours of work depend on the write. ATTN_ERR_IO or
 * ATTN_ERR_INVALID_ARGUMENT naming the path and the reason. A file already at path is left as
 * it is. */
ATTN_API attn_status attn_tensor_file_check_writable(const char *path);

/* One writer per path: an exclusive advisory lock (flock) on "<path>.lock", created if missing,
 * held until attn_tensor_file_unlock. A second process asking for the same path gets
 * ATTN_ERR_IO at once ("... is being written by another process (pid N)") instead of both
 * writing and the last silently winning. */
typedef struct attn_tensor_file_lock attn_tensor_file_lock;
ATTN_API attn_status attn_tensor_file_lock_path(const char *path, attn_tensor_file_lock **out);
/* Releases the lock and removes the lock file; NULL is ignored. */
ATTN_API void attn_tensor_file_unlock(attn_tensor_file_lock *lock);

/* ---- reading ----------------------------------------------------------------------- */

typedef struct attn_tensor_file attn_tensor_file;

/* What the file says about one tensor. Pointers stay valid until attn_tensor_file_close. */
typedef struct attn_tensor_info {
    const char *name;
    attn_dtype dtype;
    int ndim;
    const int64_t *shape; /* ndim entries */
    int64_t numel;
    size_t nbytes;
    /* The raw little-endian bytes. Aligned to the element size when the file's offsets are
     * (files written by attn and by the safetensors library are); copy through memcpy, or
     * use attn_tensor_file_read_*, to read any file safely. */
    const void *data;
} attn_tensor_info;

/* Reads the whole file at path into memory and validates it. ATTN_ERR_IO when it cannot be
 * opened or read; ATTN_ERR_FORMAT, with a message naming the file and the problem, when it
 * is not a valid safetensors file: shorter than 8 bytes; a header length above 100 MB or
 * past the end of the file; a header that is not UTF-8, does not start with '{', is not a
 * JSON object, or has text after the object other than whitespace; "__metadata__" that is
 * not an object of strings; a duplicate tensor name or metadata key; an unknown dtype; a
 * shape that is not a list of non-negative integers; data_offsets that are not two integers
 * begin <= end inside the data area, or whose length differs from the dtype size times the
 * element count; tensors that overlap or leave gaps; bytes after the last tensor. Keys in a
 * tensor entry other than dtype, shape and data_offsets are ignored, as the reference
 * implementation does. */
ATTN_API attn_status attn_tensor_file_open(const char *path, attn_tensor_file **out);
/* Frees everything; NULL is ignored. */
ATTN_API void attn_tensor_file_close(attn_tensor_file *file);
/* The path the file was opened from, for messages. */
ATTN_API const char *attn_tensor_file_path(const attn_tensor_file *file);

/* Tensors, in the header's order. */
ATTN_API size_t attn_tensor_file_count(const attn_tensor_file *file);
ATTN_API attn_status attn_tensor_file_get(const attn_tensor_file *file, size_t index,
                                          attn_tensor_info *out);
/* ATTN_ERR_FORMAT ("<file>: no tensor named 'x'") when the file has no such tensor. */
ATTN_API attn_status attn_tensor_file_find(const attn_tensor_file *file, const char *name,
                                           attn_tensor_info *out);
/* 1 if the file has a tensor of that name, else 0 (also for NULL arguments). */
ATTN_API int attn_tensor_file_contains(const attn_tensor_file *file, const char *name);

/* "__metadata__" entries, in the header's order. */
ATTN_API size_t attn_tensor_file_metadata_count(const attn_tensor_file *file);
ATTN_API attn_status attn_tensor_file_metadata_at(const attn_tensor_file *file, size_t index,
                                                  const char **key, const char **value);
/* ATTN_ERR_FORMAT ("<file>: no metadata key 'x'") when the key is absent. */
ATTN_API attn_status attn_tensor_file_metadata(const attn_tensor_file *file, const char *key,
                                               const char **value);

/* Copies tensor `name` into out as float32, converting from F16, BF16 or F64 (F64 values
 * beyond float's range are an error; NaN and infinities pass through). The file's shape must
 * equal shape[0..ndim): ATTN_ERR_FORMAT names both shapes otherwise, and also when the tensor
 * is missing or has another dtype. out must hold the element count. */
ATTN_API attn_status attn_tensor_file_read_f32(const attn_tensor_file *file, const char *name,
                                               int ndim, const int64_t *shape, float *out);
/* Copies tensor `name`'s bytes into out unchanged; its dtype must be `dtype` and its shape
 * shape[0..ndim) (ATTN_ERR_FORMAT otherwise). For integer tensors such as step counters. */
ATTN_API attn_status attn_tensor_file_read_raw(const attn_tensor_file *file, const char *name,
                                               attn_dtype dtype, int ndim, const int64_t *shape,
                                               void *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TENSOR_FILE_H */
