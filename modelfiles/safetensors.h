/* safetensors.h — a validated, read-only view of safetensors checkpoints.
 *
 * File format: 8-byte little-endian header length N, N bytes of JSON
 *   {NAME: {"dtype": D, "shape": [..], "data_offsets": [BEGIN, END]}, ...,
 *    "__metadata__": {KEY: "VALUE", ...}}
 * then the data; offsets are relative to the start of the data.
 *
 * Opening checks everything before a handle exists: N within [2, cap] and
 * within the file; the JSON (jansson, duplicate keys rejected) a top-level
 * object; each tensor's name 1..255 bytes, exactly the keys dtype / shape /
 * data_offsets, dtype F32 / F16 / BF16 (any other -> WF_E_BAD_DTYPE naming
 * the tensor), rank <= 8, dims non-negative integers whose product and byte
 * size do not overflow, END - BEGIN == numel * dtype size; sorted by BEGIN
 * the tensors tile the data region exactly (first BEGIN 0, each BEGIN the
 * previous END: no gap, no overlap) and 8 + N + last END == file size;
 * __metadata__ (optional, may be null) a map of string to string. A handle
 * never changes after open and may be read from any number of threads.
 *
 * Reading the data: wf_safetensors_read copies a tensor's bytes with
 * pread(2) from the descriptor the handle keeps open. The header is read
 * the same way at open. A file that shrinks while open (truncated by
 * someone under the loader) is then a short read, reported as
 * WF_E_INTERNAL "the file shrank while loading", never a signal: this is
 * the path the daemon's loader uses (model_host.c).
 * wf_safetensors_data instead gives a pointer into a read-only mapping of
 * the file, for tools and tests that read small files in place; like
 * every mmap reader it assumes nobody truncates the file meanwhile (a
 * read past a shrunk end is SIGBUS), so daemon code does not use it.
 * Data has any alignment (8 + N need not be a multiple of anything): read
 * mapped data with memcpy or the conversions of kernels/tensor.h
 * (wf_convert_to_f32), never by casting to float *.
 *
 * Messages never quote the header's text where it is not valid JSON: a
 * syntax error gives its byte offset, line and column (json_err.h).
 *
 * Nothing here logs. Errors are a status plus a message naming the file
 * and, where there is one, the tensor:
 *   WF_E_BAD_FIELD   path refused (see model_root.h), index.json invalid
 *   WF_E_MALFORMED   file too short, header length beyond the file, JSON
 *                    invalid, duplicate names, bad entry, offsets that do
 *                    not tile the data, trailing bytes
 *   WF_E_LIMIT       header longer than the cap, name longer than 255
 *   WF_E_BAD_DTYPE   a dtype other than F32 / F16 / BF16
 *   WF_E_BAD_SHAPE   rank > 8, a dim that is not a non-negative integer,
 *                    element count or byte size overflowing, byte size not
 *                    END - BEGIN
 *   WF_E_NO_MEMORY   allocation failed
 *   WF_E_INTERNAL    I/O error (mmap, read) with the errno text; the file
 *                    shrank while open ("the file shrank while loading")
 */
#ifndef WF_SAFETENSORS_H
#define WF_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_root.h"
#include "weft.h"

/* Default cap on the JSON header, as the safetensors reference (100 MB). */
#define WF_ST_HEADER_CAP_DEFAULT (100u * 1000u * 1000u)
/* Longest tensor name, bytes. */
#define WF_ST_NAME_MAX 255
/* Cap on an index.json file. */
#define WF_ST_INDEX_CAP_DEFAULT (64u * 1024u * 1024u)

/* Options of opening; NULL means the defaults (all fields 0). */
typedef struct wf_st_options {
    uint64_t max_header_bytes;  /* header cap; 0 = WF_ST_HEADER_CAP_DEFAULT */
    wf_resolve_mode_t resolve;  /* path resolution (tests force the walk) */
} wf_st_options_t;

/* One tensor of a file. */
typedef struct wf_st_tensor {
    const char *name;           /* NUL-terminated; borrowed until close */
    wf_dtype_t dtype;           /* F32 / F16 / BF16 */
    int rank;                   /* 0..WF_MAX_RANK (0: a scalar) */
    int64_t shape[WF_MAX_RANK]; /* dims, outermost first; each >= 0 */
    uint64_t numel;             /* product of the dims (1 for a scalar) */
    uint64_t nbytes;            /* numel * dtype size */
    uint64_t offset;            /* of the first byte, from the file start */
} wf_st_tensor_t;

typedef struct wf_safetensors wf_safetensors_t;

/* Open and validate the safetensors file `rel` beneath the model root
 * directory root_fd (see model_root.h for what is refused). On success
 * *ret is set; caller owns it (wf_safetensors_close). On failure nothing
 * stays open or mapped and `err` says why. */
wf_status_t wf_safetensors_open(int root_fd, const char *rel,
                                const wf_st_options_t *opt,
                                wf_safetensors_t **ret,
                                char *err, size_t err_len);

/* Validate a whole safetensors file image held in memory (tests, fuzzing,
 * files that arrive some other way). `buf` is borrowed and must outlive
 * the handle; `label` names it in messages (copied). */
wf_status_t wf_safetensors_from_buffer(const void *buf, size_t len,
                                       const char *label,
                                       const wf_st_options_t *opt,
                                       wf_safetensors_t **ret,
                                       char *err, size_t err_len);

/* Unmap and free; sets *st to NULL. Accepts NULL and a pointer to NULL. */
void wf_safetensors_close(wf_safetensors_t **st);

/* The path (or label) the handle was opened with; borrowed until close. */
const char *wf_safetensors_path(const wf_safetensors_t *st);

/* Size of the whole file, bytes. */
uint64_t wf_safetensors_file_size(const wf_safetensors_t *st);

/* Number of tensors. Tensors are indexed 0..count-1 in name order
 * (strcmp), so the order does not depend on the writer. */
size_t wf_safetensors_count(const wf_safetensors_t *st);

/* Tensor i (< count); borrowed until close. */
const wf_st_tensor_t *wf_safetensors_tensor(const wf_safetensors_t *st, size_t i);

/* Index of the tensor called `name` (binary search), or -1. */
ptrdiff_t wf_safetensors_find(const wf_safetensors_t *st, const char *name);

/* First byte of tensor i's data in the mapping: any alignment, read only
 * with memcpy / wf_convert_to_f32. Borrowed until close. A tensor of 0
 * bytes gets a valid non-NULL pointer that must not be read. Tools and
 * tests only (SIGBUS if the file shrinks: see above); the daemon reads
 * with wf_safetensors_read. */
const void *wf_safetensors_data(const wf_safetensors_t *st, size_t i);

/* Copy len bytes from byte `off` of tensor i's data into dst (pread for a
 * file, memcpy for a buffer). Errors: WF_E_BAD_ARGUMENT (i, off or len out
 * of the tensor), WF_E_INTERNAL (the file ended first: it shrank since
 * open, "the file shrank while loading"; or an I/O error). Any number of
 * threads may read one handle at once. */
wf_status_t wf_safetensors_read(const wf_safetensors_t *st, size_t i, uint64_t off,
                                void *dst, size_t len, char *err, size_t err_len);

/* Value of __metadata__[key], or NULL; borrowed until close. */
const char *wf_safetensors_metadata(const wf_safetensors_t *st, const char *key);

/* Number of __metadata__ entries, and entry i (key and value borrowed until
 * close), in key order. */
size_t wf_safetensors_metadata_count(const wf_safetensors_t *st);
void wf_safetensors_metadata_at(const wf_safetensors_t *st, size_t i,
                                const char **ret_key, const char **ret_value);

/* ---- checkpoints: one file, or shards with an index --------------------- */

/* A set of safetensors files seen as one name -> tensor map, as diffusers
 * writes a model: a single `diffusion_pytorch_model.safetensors`, or shards
 * listed by `diffusion_pytorch_model.safetensors.index.json`
 *   {"metadata": {...}, "weight_map": {TENSOR: FILE, ...}}.
 * Index rules: FILE is a plain file name (no '/'), a shard beside the
 * index, opened under the same root checks; every shard named in the map
 * opens and validates; every mapped tensor is in its shard; every tensor
 * of a shard is mapped to that shard (a tensor also present in another
 * shard is an error naming both); files not named in the map are ignored.
 * "metadata" (optional) must be an object; it is not interpreted. */
typedef struct wf_checkpoint wf_checkpoint_t;

/* Where a tensor of a checkpoint lives. */
typedef struct wf_ckpt_ref {
    const wf_safetensors_t *file;   /* the shard; borrowed until close */
    size_t index;                   /* tensor index in that file */
    const wf_st_tensor_t *tensor;   /* == wf_safetensors_tensor(file, index) */
} wf_ckpt_ref_t;

/* Names diffusers uses inside a model directory. */
#define WF_DIFFUSERS_WEIGHTS "diffusion_pytorch_model.safetensors"
#define WF_DIFFUSERS_INDEX "diffusion_pytorch_model.safetensors.index.json"

/* Open the checkpoint in model directory `dir` (relative to the root; ""
 * or "." = the root itself): the index when `dir`/WF_DIFFUSERS_INDEX
 * exists, else `dir`/WF_DIFFUSERS_WEIGHTS. Caller owns *ret
 * (wf_checkpoint_close). */
wf_status_t wf_checkpoint_open_dir(int root_fd, const char *dir,
                                   const wf_st_options_t *opt,
                                   wf_checkpoint_t **ret,
                                   char *err, size_t err_len);

/* Open a checkpoint from its index file `index_rel`. */
wf_status_t wf_checkpoint_open_index(int root_fd, const char *index_rel,
                                     const wf_st_options_t *opt,
                                     wf_checkpoint_t **ret,
                                     char *err, size_t err_len);

/* Open a one-file checkpoint. */
wf_status_t wf_checkpoint_open_file(int root_fd, const char *rel,
                                    const wf_st_options_t *opt,
                                    wf_checkpoint_t **ret,
                                    char *err, size_t err_len);

/* Close every file; sets *ck to NULL. Accepts NULL and a pointer to NULL. */
void wf_checkpoint_close(wf_checkpoint_t **ck);

/* Number of tensors over all files; they are indexed in name order. */
size_t wf_checkpoint_count(const wf_checkpoint_t *ck);

/* Tensor i (< count) of the checkpoint. */
wf_ckpt_ref_t wf_checkpoint_at(const wf_checkpoint_t *ck, size_t i);

/* Look a tensor up by name; false when absent (*ret untouched). */
bool wf_checkpoint_find(const wf_checkpoint_t *ck, const char *name,
                        wf_ckpt_ref_t *ret);

/* Files of the checkpoint (1 for a one-file checkpoint), in name order. */
size_t wf_checkpoint_file_count(const wf_checkpoint_t *ck);
const wf_safetensors_t *wf_checkpoint_file(const wf_checkpoint_t *ck, size_t i);

/* Total bytes of tensor data over all files. */
uint64_t wf_checkpoint_data_bytes(const wf_checkpoint_t *ck);

#endif /* WF_SAFETENSORS_H */
