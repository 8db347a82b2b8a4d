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
 * moves them. Costs: two PCIe copies per exchanged byte and no overlap of
 * a copy with the kernels (NCCL is the fast path).
 *
 * Mirrors: one per handle for blocking operations, grown on demand (a
 * handle is used by one thread at a time); one per request for isend /
 * irecv, released when the request completes; one per send / recv posted
 * inside a group call, released at group end. Host memory only (malloc);
 * nothing is allocated on the device.
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
 * copy or synchronize of the backend, a mirror that cannot be allocated,
 * an extent that overflows size_t) aborts the world (wf_comm_abort on the
 * inner handle) before the call returns its error: a peer may already
 * wait in the matching operation and would otherwise wait forever; the
 * peers then get WF_E_ABORTED.
 */
#ifndef WF_COMM_STAGED_H
#define WF_COMM_STAGED_H

#include "backend.h"
#include "comm.h"

/* Wrap `inner` (taken over: destroying the wrapper destroys it, also when
 * this fails) for device buffers of backend `ops` with context `ctx`
 * (borrowed for the wrapper's life; ops needs copy_h2d, copy_d2h and
 * synchronize). wf_comm_split on the wrapper splits the inner handle and
 * wraps the result with the same ops / ctx; wf_comm_abort forwards to the
 * inner handle (the world). wf_comm_backend answers "staged(<inner>)"
 * ("staged(host)"); unlike comm.h's static names, that string is the
 * handle's and is valid until wf_comm_destroy.
 * Errors: WF_E_BAD_ARGUMENT (NULL arguments, ops without the copies; inner is
 * destroyed), WF_E_NO_MEMORY. */
wf_status_t wf_comm_staged_wrap(wf_comm_t *inner, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_comm_t **ret_comm);

#endif /* WF_COMM_STAGED_H */
