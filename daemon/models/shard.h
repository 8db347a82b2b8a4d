/* shard.h — one tp rank's shard of a model, cut from the host copy, for
 * any family: its linear layers (wf_linear_t, each cut for its tp
 * placement) and its f32 vectors (norm weights, modulation tables,
 * biases of layers that are not linears).
 *
 * Where the pieces live:
 *   - CPU backend: host memory, f32. A linear's weight is a view into the
 *     host copy where the copy is f32 and the rank's pieces allow it
 *     (whole, one row piece, or strided column pieces), else the shard's
 *     own converted copy; vectors are always the shard's own copies.
 *   - a backend with resident memory (mem_alloc): one block, 256-byte
 *     aligned pieces; weights in the checkpoint's dtype (the device's
 *     linear converts), vectors and biases in f32. The family's walk runs
 *     twice: the first pass measures the block and the staging buffer,
 *     the block is then allocated (refused before a byte is copied when it
 *     does not fit), the second pass copies.
 *
 * The family supplies the walk: one function that names every piece of
 * its shard in a fixed order (wf_shard_linear, wf_shard_vector), storing
 * the result in its own struct. The same walk sizes a shard without a
 * host copy (wf_shard_size), so the figure admission uses and the shard
 * cannot disagree.
 *
 * Nothing here logs; errors carry a message naming the tensor.
 */
#ifndef WF_SHARD_H
#define WF_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "model_host.h"
#include "models/linear.h"
#include "tp_plan.h"
#include "weft.h"

/* Where a shard's pieces live and what it owns; the family's shard holds
 * one. Zeroed, it owns nothing. */
typedef struct wf_shard_mem {
    const wf_backend_ops_t *ops; /* backend with resident memory; NULL: CPU */
    wf_backend_ctx_t *ctx;       /* its context (borrowed) */
    void *dev;                   /* the resident block, or NULL */
    uint64_t bytes;              /* bytes held: the f32 pieces on the CPU
                                    (views counted too), the block on a
                                    device */
    void **owned;                /* CPU: host buffers this shard owns */
    size_t n_owned, cap_owned;
} wf_shard_mem_t;

/* One cut in progress (a walk's handle). */
typedef struct wf_shard_cut wf_shard_cut_t;

/* A family's walk over its shard's pieces; arg is the family's. Returns
 * the first error of a piece call. */
typedef wf_status_t (*wf_shard_walk_fn)(wf_shard_cut_t *c, void *arg);

/* Linear `module` (tensors "<module>.weight" [out, in] — any rank whose
 * first dim is out and whose other dims multiply to in, as a Conv3d whose
 * stride is its kernel — and "<module>.bias" [out] when has_bias) cut for
 * its placement in the plan, into *lin. */
wf_status_t wf_shard_linear(wf_shard_cut_t *c, const char *module, int64_t out, int64_t in,
                            bool has_bias, wf_linear_t *lin);

/* Linears that take the same input, cut as one weight where their
 * placements allow it: modules[k] ([outs[k], in], with a bias each when
 * has_bias). They fuse when there are two or more and, at tp 1, always;
 * at tp > 1 when all are replicated (the fused one is too) or all split
 * their rows (colwise / packed_colwise) with at most WF_TP_MAX_BLOCKS
 * blocks in all (the fused one is packed_colwise over the members'
 * blocks in order: this rank's rows are each member's rows of this rank,
 * member after member, so one linear emits [member 0 | member 1 | ...]
 * per row, each member's columns in its own output layout); and, with a
 * host copy, when every weight has one dtype. Fused: *fused gets the one
 * linear (on the CPU an f32 copy the shard owns, never a view: the
 * members are separate host tensors), each members[k] its placement only
 * (no weight), *ret_fused true. Otherwise each member is cut as
 * wf_shard_linear cuts it and *ret_fused is false. members and fused are
 * NULL when sizing (wf_shard_size), which counts the same bytes. */
wf_status_t wf_shard_linear_fused(wf_shard_cut_t *c, uint32_t n, const char *const *modules,
                                  const int64_t *outs, int64_t in, bool has_bias,
                                  wf_linear_t *const *members, wf_linear_t *fused,
                                  bool *ret_fused);

/* wf_shard_linear_fused of up to WF_LINEAR_GROUP_MAX modules `prefix` +
 * names[k] into group g (NULL when sizing). */
wf_status_t wf_shard_linear_group(wf_shard_cut_t *c, const char *prefix, uint32_t n,
                                  const char *const *names, const int64_t *outs, int64_t in,
                                  bool has_bias, wf_linear_group_t *g);

/* Tensor `name` of n elements (any shape) as an f32 vector on the
 * backend's memory, into *ret. */
wf_status_t wf_shard_vector(wf_shard_cut_t *c, const char *name, int64_t n, float **ret);

/* The tp degree and rank of a cut (for a family's own checks). */
int wf_shard_cut_tp(const wf_shard_cut_t *c);

/* Cut rank `rank` of `tp` from the host copy with `walk` onto backend
 * ops / ctx (a device when ops->mem_alloc, else the CPU) into *mem (zeroed
 * by the caller). On failure everything cut so far is freed
 * (wf_shard_mem_free) and err says why. */
wf_status_t wf_shard_cut_run(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                             int rank, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                             wf_shard_walk_fn walk, void *arg, wf_shard_mem_t *mem, char *err,
                             size_t err_len);

/* Bytes of one rank's shard without a host copy: f32 pieces (device =
 * false) or the device block with weights of weight_dtype. Every rank's
 * shard has the same size (all splits are even). 0 when a placement
 * fails (the plan check says why). */
uint64_t wf_shard_size(const wf_tp_plan_t *plan, int tp, bool device, wf_dtype_t weight_dtype,
                       wf_shard_walk_fn walk, void *arg);

/* Free what mem holds: the device block (after the backend's queue has
 * drained: kernels of a failed job may still read it) or the owned host
 * buffers. mem is zeroed. */
void wf_shard_mem_free(wf_shard_mem_t *mem);

#endif /* WF_SHARD_H */
