/* comm.h — the data plane of weftd: one communicator interface, four
 * backends behind it (comm_impl.h's table):
 *   - host (comm_host.h): ranks are threads of one process, memcpy
 *     between their host buffers;
 *   - zmq (comm_zmq.h): ranks in several processes and nodes, over
 *     ZeroMQ point-to-point connections, host buffers;
 *   - nccl (comm_nccl.h): one rank per GPU, device buffers (a stub that
 *     fails with WF_E_UNAVAILABLE where NCCL is not built);
 *   - staged (comm_staged.h): device buffers over a host or zmq comm,
 *     through host mirrors (several ranks on one GPU, GPUs without NCCL).
 *
 * A wf_comm_t is one rank's handle on one group of ranks. Semantics are
 * NCCL's:
 *   - one handle per rank per group, used by one thread at a time;
 *   - every rank of a group calls the same collectives, with matching
 *     arguments, in the same order;
 *   - a collective completes the calling rank's part before it returns
 *     (its output is written and its input may be reused) on the host,
 *     zmq and staged comms; on a device comm (nccl) "complete" is
 *     stream-ordered: see "Device comms" below;
 *   - counts and displacements are in BYTES (one interface for every
 *     dtype), except the reduction, which names its element type;
 *   - point-to-point messages between an ordered pair of ranks match in
 *     posting order; the send and receive sizes must be equal;
 *   - send / recv posted between wf_comm_group_start and wf_comm_group_end
 *     progress together (a ring exchange does not deadlock);
 *   - wf_comm_abort on any handle of a world (or the backend's own world
 *     abort) makes every blocked and every later call on every handle of
 *     that world return WF_E_ABORTED (weft.h) promptly. After an abort the only
 *     useful call is wf_comm_destroy; buffers of an aborted operation hold
 *     unspecified bytes.
 * Buffers passed to an operation are borrowed until it completes (for
 * isend / irecv: until wf_comm_wait / wf_comm_test reports completion).
 * Collectives do not work in place unless the function says so.
 *
 * Device comms (nccl; comm_nccl.h), NCCL's own model: the collectives
 * (allgather(v), alltoall(v), allreduce, broadcast, scatterv, gatherv),
 * blocking send / recv and group_end are STREAM-ORDERED: the call
 * enqueues the operation on the stream the handle was made with (the
 * worker's compute stream) and returns without waiting for it. Its
 * output is written before anything queued on that stream after the call
 * runs, and its input may be overwritten by work queued on that stream
 * after the call; the host must not read the output or write the input
 * until wf_comm_sync (or a synchronize of that stream) returns. The
 * returned status reports what was known at enqueue time (bad arguments,
 * an abort seen already, a failed enqueue); a failure while the
 * operation runs shows in wf_comm_sync or the next call (WF_E_ABORTED).
 * An operation that can never complete (a lost peer, an abort) would hold
 * a synchronize of the stream forever: the backend's abort watchdog
 * aborts its communicator so that the synchronize returns. Calls that
 * keep host completion on a device comm: wf_comm_barrier, wf_comm_split,
 * wf_comm_wait (and a wf_comm_test that reports done; isend / irecv run
 * beside the stream, ordered after what it held when they were posted),
 * wf_comm_sync. Host, zmq and staged comms complete every call on
 * return, as above, and their wf_comm_sync returns WF_OK.
 *
 * This header is backend-neutral: a handle is created through its
 * backend's header (above) and used through this one only. Callers: the
 * server and the workers (server/, runtime/) create and split
 * communicators; parallel/, models/ and jobs/ run operations on the
 * handles they are given. Nothing here logs.
 */
#ifndef WF_COMM_H
#define WF_COMM_H

#include <stddef.h>

#include "weft.h"

/* Color meaning "this rank joins no sub-group" in wf_comm_split. */
#define WF_COMM_SPLIT_NOCOLOR (-1)

/* Element type of a reduction. */
typedef enum wf_comm_dtype {
    WF_COMM_F32 = 0, /* float */
    WF_COMM_F64 = 1  /* double */
} wf_comm_dtype_t;

/* Reduction operator. */
typedef enum wf_comm_redop {
    WF_COMM_SUM = 0 /* element-wise sum */
} wf_comm_redop_t;

/* One rank's handle on one group. Opaque. */
typedef struct wf_comm wf_comm_t;
/* An asynchronous point-to-point operation in flight. Opaque; owned by the
 * handle that started it until wf_comm_wait / wf_comm_test completes it. */
typedef struct wf_comm_req wf_comm_req_t;

/* --- handle ------------------------------------------------------------ */

/* This rank's index in the group, 0..size-1. */
int wf_comm_rank(const wf_comm_t *c);
/* Number of ranks in the group. */
int wf_comm_size(const wf_comm_t *c);
/* Backend name ("host", "nccl"). Static string. */
const char *wf_comm_backend(const wf_comm_t *c);

/* Collective over the group: make sub-group handles ncclCommSplit-style.
 * Ranks passing the same color >= 0 form one sub-group, ordered by key
 * (ties by rank in this group); a rank passing WF_COMM_SPLIT_NOCOLOR gets
 * *ret_comm = NULL. The new handle belongs to the same world (abort
 * reaches it) and is destroyed with wf_comm_destroy; caller owns it.
 * Errors: WF_E_BAD_ARGUMENT (color < -1), WF_E_NO_MEMORY, WF_E_ABORTED. */
wf_status_t wf_comm_split(wf_comm_t *c, int color, int key,
                          wf_comm_t **ret_comm);

/* Abort the whole world this handle belongs to (every group split from
 * it). Safe from any thread, any number of times, also while other calls
 * on this handle are blocked in another thread's frame. */
void wf_comm_abort(wf_comm_t *c);

/* Release this rank's handle; sets *c to NULL. Not collective. Every
 * request must have been completed (or the world aborted). Accepts NULL
 * and a pointer to NULL. */
void wf_comm_destroy(wf_comm_t **c);

/* Block until every operation this rank started on c is complete on the
 * host: on a device comm, everything queued on c's stream up to this call
 * (which includes the work of every other handle sharing that stream),
 * waited for while watching the world's abort, NCCL's asynchronous error
 * and the operation timeout, so an abort wakes it. Returns WF_OK, or
 * WF_E_ABORTED when the world was aborted (outputs of the operations in
 * flight hold unspecified bytes), WF_E_INTERNAL for a local failure.
 * Host, zmq and staged comms: their calls already completed, so WF_OK. */
wf_status_t wf_comm_sync(wf_comm_t *c);

/* --- point-to-point --------------------------------------------------- */

/* Send `bytes` bytes from buf to group rank `peer`. Outside a group call
 * it blocks until the receiver has the data; inside, it only posts. */
wf_status_t wf_comm_send(wf_comm_t *c, const void *buf, size_t bytes,
                         int peer);

/* Receive `bytes` bytes from group rank `peer` into buf; blocking outside
 * a group call, posted inside one. WF_E_BAD_ARGUMENT (on both sides) if
 * the matching send has another size. */
wf_status_t wf_comm_recv(wf_comm_t *c, void *buf, size_t bytes, int peer);

/* Start a group of point-to-point calls: send / recv until the matching
 * wf_comm_group_end only post. Nests; collectives are refused inside
 * (WF_E_BAD_ARGUMENT). */
wf_status_t wf_comm_group_start(wf_comm_t *c);

/* End a group: at the outermost level, block until every send / recv
 * posted since wf_comm_group_start is complete. Returns the first error. */
wf_status_t wf_comm_group_end(wf_comm_t *c);

/* Post a send and return at once with *ret_req; buf is borrowed until the
 * request completes. Also allowed inside a group call (then group_end does
 * not wait for it: the caller does). */
wf_status_t wf_comm_isend(wf_comm_t *c, const void *buf, size_t bytes,
                          int peer, wf_comm_req_t **ret_req);

/* Post a receive and return at once with *ret_req; buf is written by the
 * time the request completes. */
wf_status_t wf_comm_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                          wf_comm_req_t **ret_req);

/* Block until *req completes; release it and set *req to NULL. Returns
 * the request's status (WF_E_ABORTED if the world was aborted first).
 * Accepts a pointer to NULL (returns WF_OK). */
wf_status_t wf_comm_wait(wf_comm_t *c, wf_comm_req_t **req);

/* Check *req without blocking: *ret_done = 0 while it runs; otherwise
 * *ret_done = 1, the request is released, *req set to NULL and its status
 * returned. */
wf_status_t wf_comm_test(wf_comm_t *c, wf_comm_req_t **req, int *ret_done);

/* --- collectives (in group order, n = group size, i = this rank) ------ */

/* Block until every rank of the group has entered the barrier. */
wf_status_t wf_comm_barrier(wf_comm_t *c);

/* recvbuf (n * bytes) = concatenation of every rank's sendbuf (bytes).
 * In place when sendbuf == recvbuf + i * bytes. */
wf_status_t wf_comm_allgather(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t bytes);

/* Uneven all-gather: rank j contributes recvcounts[j] bytes (its
 * sendbytes, may be 0) placed at recvbuf + displs[j]. recvcounts[] and
 * displs[] have n entries and are the same on every rank. In place when
 * sendbuf == recvbuf + displs[i]. */
wf_status_t wf_comm_allgatherv(wf_comm_t *c, const void *sendbuf,
                               size_t sendbytes, void *recvbuf,
                               const size_t *recvcounts, const size_t *displs);

/* Block j (bytes) of rank i's sendbuf goes to block i of rank j's
 * recvbuf; both buffers n * bytes, distinct. */
wf_status_t wf_comm_alltoall(wf_comm_t *c, const void *sendbuf,
                             void *recvbuf, size_t bytes);

/* Uneven all-to-all: rank i sends sendcounts[j] bytes from sendbuf +
 * sdispls[j] to rank j, which receives them at recvbuf + rdispls[i];
 * rank j's recvcounts[i] must equal rank i's sendcounts[j] (else every
 * rank returns WF_E_BAD_ARGUMENT and nothing is copied). Counts may be 0.
 * Arrays have n entries; buffers distinct. */
wf_status_t wf_comm_alltoallv(wf_comm_t *c, const void *sendbuf,
                              const size_t *sendcounts, const size_t *sdispls,
                              void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls);

/* recvbuf[k] = sum over ranks in rank order of sendbuf[k], k < count
 * elements of `dtype`. Every rank gets bit-identical results. In place
 * when sendbuf == recvbuf. */
wf_status_t wf_comm_allreduce(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t count,
                              wf_comm_dtype_t dtype, wf_comm_redop_t op);

/* Copy `bytes` of buf on group rank `root` into buf on every other rank. */
wf_status_t wf_comm_broadcast(wf_comm_t *c, void *buf, size_t bytes,
                              int root);

/* Root's sendbuf + displs[j] (sendcounts[j] bytes) goes to rank j's
 * recvbuf (recvbytes, which must equal sendcounts[j]). sendbuf, sendcounts
 * and displs are read on the root only (may be NULL elsewhere). The root
 * may pass recvbuf == sendbuf + displs[root] (in place). */
wf_status_t wf_comm_scatterv(wf_comm_t *c, const void *sendbuf,
                             const size_t *sendcounts, const size_t *displs,
                             void *recvbuf, size_t recvbytes, int root);

/* Rank j's sendbuf (sendbytes, which must equal recvcounts[j]) goes to
 * root's recvbuf + displs[j]. recvbuf, recvcounts and displs are read on
 * the root only. The root may pass sendbuf == recvbuf + displs[root]. */
wf_status_t wf_comm_gatherv(wf_comm_t *c, const void *sendbuf,
                            size_t sendbytes, void *recvbuf,
                            const size_t *recvcounts, const size_t *displs,
                            int root);

#endif /* WF_COMM_H */
