/* model_host.h — reading a checkpoint of any family (family.h) into the
 * daemon's host copy.
 *
 * Loading is two phases so that a model which cannot fit is refused before
 * a byte of weights is read:
 *   1. wf_model_source_open: config.json (family.h), the safetensors
 *      headers (safetensors.h: every bound checked), the tensor list
 *      against the config, the dtypes. Cheap: no tensor data is touched.
 *      The caller then checks memory (the family's shard bytes)
 *      and the plan.
 *   2. wf_model_source_read: every tensor read (pread, safetensors.h's
 *      wf_safetensors_read) into the host copy, in its checkpoint dtype
 *      (64-byte aligned buffers), reporting progress. A file that shrinks
 *      meanwhile is an error (WF_E_INTERNAL, "the file shrank while
 *      loading"), never a SIGBUS. The host copy is what re-sharding reads:
 *      a tp change never touches the disk again.
 *
 * Sharded checkpoints (weights_already_sharded; written by
 * wf_model_write_sharded, i.e. `weftctl shard`). Layout of a directory DIR:
 *   DIR/config.json                          the model's config, as is
 *   DIR/tp-rank-RRRRR-of-TTTTT.safetensors   one per rank (5-digit,
 *                                            zero-padded), every tensor of
 *                                            the model under its diffusers
 *                                            name holding that rank's piece
 *                                            (replicated ones whole)
 * Each file's __metadata__: "weft_format" = "tp-shard-1", "tp_degree" =
 * "T", "tp_rank" = "R", "tp_plan" = the plan as JSON
 * ({"glob": "style" | {"style": s, "blocks": [..]}}, the wire form). All T
 * files must agree on T and the plan and exist; each piece's shape must be
 * the plan's local shape. Reading one reassembles the full tensors into
 * the host copy (so a later tp change can re-shard) and checks that
 * replicated tensors are byte-identical in every file.
 *
 * Thread: a source and a host copy are used by one thread at a time; a
 * finished host copy is read-only and may be read by any number of
 * threads (the workers cut their shards from it concurrently).
 * Nothing here logs; errors are a status and a message naming the file
 * and the tensor (codes as in safetensors.h / family.h; a sharded
 * directory that disagrees with itself: WF_E_MALFORMED; a plan that does
 * not match the files' plan: WF_E_BAD_ARGUMENT).
 */
#ifndef WF_MODEL_HOST_H
#define WF_MODEL_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "family.h"
#include "model_root.h"
#include "safetensors.h"
#include "tp_plan.h"
#include "weft.h"

/* One tensor of the host copy. */
typedef struct wf_host_tensor {
    char name[WF_TENSOR_SPEC_NAME_MAX]; /* diffusers' name */
    wf_dtype_t dtype;                   /* as in the checkpoint */
    int rank;                           /* 1 .. WF_TENSOR_MAX_DIMS */
    int64_t shape[WF_TENSOR_MAX_DIMS];  /* full shape (dims past rank: 0) */
    uint64_t nbytes;
    void *data;                         /* 64-byte aligned: inside the host
                                           copy's slab, else owned alone */
} wf_host_tensor_t;

/* The host copy of one model. */
typedef struct wf_model_host {
    wf_model_cfg_t cfg;
    wf_dtype_t dtype;          /* dtype of the majority of the weights */
    size_t n;                  /* tensors */
    wf_host_tensor_t *t;  /* in name order (strcmp) */
    uint64_t params;           /* elements over all tensors */
    uint64_t bytes;            /* bytes over all tensors */
    void *slab;                /* the one page-aligned mapping that
                                  wf_model_source_read puts every tensor in
                                  (64-byte offsets), so that a GPU backend
                                  pins it with one registration; NULL: each
                                  tensor's data is its own allocation */
    size_t slab_bytes;         /* its length (a whole number of pages) */
} wf_model_host_t;

/* An opened, validated checkpoint not yet read. */
typedef struct wf_model_source wf_model_source_t;

/* Open model directory `dir` under the root (phase 1). With
 * `already_sharded`, `dir` must hold the sharded layout above; `plan` is
 * then compared with the files' plan (NULL or n == 0: take the files'),
 * and *ret_tp (may be NULL) gets the files' tp degree. Without it,
 * `plan` is not read and *ret_tp is 0. */
wf_status_t wf_model_source_open(int root_fd, const char *dir,
                                bool already_sharded, const wf_tp_plan_t *plan,
                                wf_model_source_t **ret, uint32_t *ret_tp,
                                char *err, size_t err_len);

/* Facts of an opened source. */
const wf_model_cfg_t *wf_model_source_config(const wf_model_source_t *src);
uint64_t wf_model_source_params(const wf_model_source_t *src);
uint64_t wf_model_source_bytes(const wf_model_source_t *src);   /* data to read */
wf_dtype_t wf_model_source_dtype(const wf_model_source_t *src); /* majority dtype */
/* The plan of a sharded source (the files'); NULL otherwise. */
const wf_tp_plan_t *wf_model_source_plan(const wf_model_source_t *src);

/* Progress of phase 2: bytes copied so far of `total`, called after each
 * tensor (from the reading thread). */
typedef void (*wf_model_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Phase 2: copy every tensor into a new host copy: one page-aligned slab
 * (h->slab) holding every tensor at a 64-byte offset. Caller owns *ret
 * (wf_model_host_free). On failure nothing is kept. */
wf_status_t wf_model_source_read(wf_model_source_t *src,
                                wf_model_progress_fn progress, void *arg,
                                wf_model_host_t **ret, char *err, size_t err_len);

/* Convert every tensor of the host copy that is not f32 to f32, one at a
 * time (peak: the copy plus its largest tensor in f32: a converted
 * tensor's whole pages of the slab go back to the system at once; its f32
 * copy is an allocation of its own, outside the slab); updates dtype,
 * nbytes and h->bytes (h->dtype, the checkpoint's, stays). For a backend
 * that computes in f32 on host memory (the CPU backend): its shards can
 * then be views of the host copy, and re-sharding converts nothing.
 * WF_E_NO_MEMORY leaves the copy valid (partly converted). */
wf_status_t wf_model_host_to_f32(wf_model_host_t *h, char *err, size_t err_len);

/* Close a source (unmaps the files); sets *src to NULL; accepts NULL. */
void wf_model_source_close(wf_model_source_t **src);

/* Free a host copy; sets *h to NULL; accepts NULL. */
void wf_model_host_free(wf_model_host_t **h);

/* The tensor called `name`, or NULL (binary search). */
const wf_host_tensor_t *wf_model_host_find(const wf_model_host_t *h,
                                               const char *name);

/* Write the sharded layout of model directory `src_dir` (under root_fd)
 * for `tp` ranks with `plan` (NULL: the family's default) into directory
 * `out_dir` (absolute or relative to the working directory; created 0755
 * if missing). Every planned weight must divide (wf_tp_place's errors).
 * For `weftctl shard`.
 * The output directory is refused (WF_E_BAD_ARGUMENT) when it is a
 * symlink (its last component; a trailing '/' does not get one followed),
 * not a directory, owned by another user than the caller's euid (root
 * included: root writing into a user's directory is the classic attack),
 * or writable by every user. It is opened once (O_NOFOLLOW) and every file
 * is made under that descriptor: new files are created O_EXCL | O_NOFOLLOW
 * under random names (".NAME.<16 hex digits>.tmp", getrandom) and renamed
 * into place when all are written, so an existing config.json or rank file
 * of this degree is replaced as a directory entry, never written through
 * (a symlink or hard link there is not followed). On failure only the
 * temporary files this call made are removed. Rank files of another
 * degree (the reader refuses two sets) are removed after the new set is
 * in place, and only when each is a regular file of the caller's with one
 * link whose metadata says weft wrote it; any other such file is refused
 * up front, before anything is written. */
wf_status_t wf_model_write_sharded(int root_fd, const char *src_dir,
                                  const wf_tp_plan_t *plan, int tp,
                                  const char *out_dir, char *err, size_t err_len);

#endif /* WF_MODEL_HOST_H */
