/* comm_staged.h — a comm whose buffers are device memory, over a comm
 * whose buffers are host memory (the host backend in one process, the
 * ZeroMQ backend across processes): every operation copies what it sends
 * from the device into a host mirror (the backend's copy_d2h), runs the
 * inner operation on the mirrors, and copies what it received back into
 * device memory (copy_h2d), with the backend's synchronize in between so
 * that each buffer is complete when the operation returns, as comm.h
 * promises. Semantics (ordering, matching, groups, abort, errors) are the
 * inner comm's.
 *
 * What it is for: the mixed mode (several ranks on one GPU, which one NCCL
 * communicator cannot hold) and GPUs without NCCL, so that
 * parallel/cp_attention.c runs one code path on device buffers whatever
 * moves them.
 *
 * isend / irecv overlap the kernels when the backend has a transfer
 * stream (backend.h's xfer_* entries; the CUDA backend and the tests'
 * stand-in do) and the handle was not wrapped WF_COMM_STAGED_SYNC:
 *   - isend queues the copy of its buffer into a host mirror on the
 *     transfer stream, ordered after everything the main stream held at
 *     the call (a kernel may have written the buffer), and returns at
 *     once; the inner isend of the mirror is DEFERRED until that copy is
 *     done, and posted at the latest at the next call on this handle, of
 *     any kind (wait, test, another isend / irecv, a collective, split,
 *     group calls): every call first posts the deferred sends, oldest
 *     first, waiting for their copies. So sends keep their order, and a
 *     rank that waits on this handle never leaves a peer waiting for a
 *     send it deferred. A rank must not block elsewhere (another handle, a
 *     lock) on a peer's receipt of a send it has not yet waited for, or
 *     tested, here;
 *   - irecv posts the inner irecv at once and marks the main stream; wait
 *     (or a test that finds it complete) copies the mirror into the
 *     device buffer on the transfer stream, ordered after that mark (the
 *     kernels queued before the irecv may still read the buffer; those
 *     queued after it must not touch it until the request completes, as
 *     comm.h says), and waits for that copy alone, not for the kernels
 *     queued since;
 *   - so cp_attention's ring with alltoall rotation (post irecv + isend,
 *     queue the step's kernels, wait) overlaps each step's two copies and
 *     the host exchange with the step's kernels.
 * Without a transfer stream (or WF_COMM_STAGED_SYNC), and for isend /
 * irecv posted inside a group call, the staging is synchronous as for the
 * blocking operations: isend copies (copy_d2h + synchronize of the whole
 * stream) before it posts, wait copies out (copy_h2d + synchronize).
 *
 * Costs: two PCIe copies per exchanged byte. Blocking operations and
 * group calls stage synchronously (each synchronize waits for every
 * kernel queued before). The isend / irecv mirrors are a pool of the
 * handle, reused (a ring settles on two), page-aligned and pinned with
 * the backend's host_register once each when it has one; a mirror is
 * regrown (an eighth of slack) when no free one fits. NCCL remains the
 * fast path (device to device, no host hop).
 *
 * Mirrors of blocking operations: one per handle, grown on demand (a
 * handle is used by one thread at a time); one per send / recv posted
 * inside a group call, released at group end. Plain host memory
 * (malloc). Nothing is allocated on the device.
 *
 * Extents: for the v-collectives a buffer's extent is max(displs[i] +
 * counts[i]) bytes over the blocks with counts[i] > 0; only that prefix
 * is copied in, and only the blocks themselves are copied out (the gaps
 * between blocks of a receive buffer keep their bytes, as with the inner
 * comm). Buffers read on the root only (scatterv's send side, gatherv's
 * receive side) are copied on the root only. The in-place forms of
 * comm.h work, but not in place: the input is copied into its own mirror
 * first, so the inner operation never runs in place.
 *
 * Failures: an error of the inner operation is returned as it is (no
 * received data is copied out then). A failure of the staging itself (a
 * copy or synchronize of the backend, a transfer whose xfer_wait fails, a
 * mirror that cannot be allocated, an extent that overflows size_t)
 * aborts the world (wf_comm_abort on the inner handle) before the call
 * returns its error: a peer may already wait in the matching operation
 * and would otherwise wait forever; the peers then get WF_E_ABORTED. A
 * deferred send whose copy fails is never posted: its wait / test
 * returns the copy's error (the call that found it failing aborted the
 * world). wf_comm_destroy after an abort waits for the copies still in
 * flight before it frees their mirrors. Unlike comm.h's "every later
 * call returns WF_E_ABORTED", an overlapped isend learns of an abort only
 * from this handle (its wf_comm_abort, a staging failure, an inner call
 * that returned WF_E_ABORTED): after an abort made elsewhere it may
 * return WF_OK, and its wait or test returns WF_E_ABORTED.
 */
#ifndef WF_COMM_STAGED_H
#define WF_COMM_STAGED_H

#include <stdbool.h>

#include "backend.h"
#include "comm.h"

/* wf_comm_staged_wrap_ex flag: stage isend / irecv synchronously even when
 * the backend has a transfer stream (the path before overlap, kept for
 * comparison: bench_staged_ring). */
#define WF_COMM_STAGED_SYNC 1u

/* Wrap `inner` (taken over: destroying the wrapper destroys it, also when
 * this fails) for device buffers of backend `ops` with context `ctx`
 * (borrowed for the wrapper's life; ops needs copy_h2d, copy_d2h and
 * synchronize; with xfer_mark, xfer_d2h, xfer_h2d and xfer_wait too,
 * isend / irecv overlap the kernels, see above). wf_comm_split on the wrapper splits the inner handle and
 * wraps the result with the same ops / ctx; wf_comm_abort forwards to the
 * inner handle (the world). wf_comm_backend answers "staged(<inner>)"
 * ("staged(host)"); unlike comm.h's static names, that string is the
 * handle's and is valid until wf_comm_destroy.
 * Errors: WF_E_BAD_ARGUMENT (NULL arguments, ops without the copies; inner is
 * destroyed), WF_E_NO_MEMORY. */
wf_status_t wf_comm_staged_wrap(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_comm_t **ret_comm);

/* wf_comm_staged_wrap with flags (0 or WF_COMM_STAGED_SYNC; split handles
 * inherit them). WF_E_BAD_ARGUMENT also for an unknown flag. */
wf_status_t wf_comm_staged_wrap_ex(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                   wf_backend_ctx_t *ctx, unsigned flags,
                                   wf_comm_t **ret_comm);

/* Whether c is a staged handle whose isend / irecv overlap the kernels
 * (the backend has the xfer_* entries and the handle is not
 * WF_COMM_STAGED_SYNC). false for any other handle and for NULL. */
bool wf_comm_staged_overlaps(const wf_comm_t *c);

#endif /* WF_COMM_STAGED_H */
