/* comm_nccl.h — the NCCL backend of comm.h: one communicator per GPU,
 * built when NCCL is found (daemon/CMakeLists.txt). Only comm_nccl.c
 * includes nccl.h; this header does not.
 *
 * Buffers are DEVICE pointers of the handle's device. Operations are
 * enqueued on the worker's stream (given at creation, borrowed: the CUDA
 * backend's context stream, backend.h native_stream), so they are ordered
 * after the kernels the worker queued before them and before the ones it
 * queues after. The collectives, send / recv and group_end are
 * stream-ordered (comm.h "Device comms"): they return once NCCL has
 * enqueued them, with no host wait for the stream. The host waits only in
 * wf_comm_sync, wf_comm_barrier and wf_comm_wait (and the backend's
 * synchronize, e.g. before a copy_d2h's bytes are read or at the end of a
 * job), each by polling an event together with ncclCommGetAsyncError, the
 * world's abort flag and the operation timeout (never a blocking NCCL or
 * CUDA wait that an abort could not interrupt). isend / irecv run on a
 * side stream of the handle, ordered after the worker's stream at their
 * flush.
 *
 * The abort watchdog: one thread per process while any handle lives
 * polls every live communicator each WF_NCCL_WATCHDOG_MS (at once after a
 * wf_comm_abort) and ncclCommAbort-s it on an asynchronous NCCL error, an
 * abort of its world (wf_comm_abort on any handle of it: a failed rank,
 * a job that aborts) or of the cluster's abort domain (a lost node), or a
 * stream-ordered call still running op_timeout_ms after the handle's last
 * call was queued. That is what ends a collective that will never
 * complete while its owner thread is blocked in a synchronize of the
 * stream, which no call of this backend could interrupt.
 *
 * Init is non-blocking (ncclConfig_t.blocking = 0): ncclCommInitRankConfig
 * and ncclCommSplit return at once and are polled under init_timeout_ms;
 * on failure or timeout the communicator is ncclCommAbort-ed and the call
 * returns WF_E_ABORTED (timeout, remote failure) or WF_E_INTERNAL.
 *
 * Errors of operations: an asynchronous NCCL error, a timeout or an abort
 * of the world aborts this communicator (ncclCommAbort) and every later
 * call on every handle of the world returns WF_E_ABORTED; a local CUDA /
 * NCCL failure returns WF_E_INTERNAL (and aborts too: a half-started
 * collective cannot be resumed). Differences from the host backend:
 *   - sizes that differ between ranks are not detected (NCCL cannot); the
 *     daemon computes them from one plan on every rank;
 *   - allreduce is NCCL's: identical on every rank, not in rank order;
 *   - isend / irecv are issued as one NCCL group when a send and a receive
 *     are both pending (the ring exchange), or at the next wait / test /
 *     other call; post more than one exchange inside group_start / end.
 * abort() only raises the world's flag and wakes the watchdog (safe from
 * any thread); the watchdog calls ncclCommAbort on every handle of the
 * world, and an owner thread that polls first does it itself.
 * A world created with an abort domain (the cluster's, opts.abort_domain)
 * is revoked instead when it stops with WF_E_ABORTED (the domain aborted
 * for a lost node, a remote error, a timeout): every later call refuses
 * and the domain is aborted, but the communicator is kept until
 * wf_comm_nccl_shrink (the survivors) or wf_comm_destroy (ncclCommAbort)
 * so that a shrink can drop the lost ranks; a local failure
 * (WF_E_INTERNAL) still aborts at once. When such a world still has work
 * on its stream (a collective waiting for a lost peer would hold the
 * worker's synchronize forever) the watchdog ncclCommRevoke-s it (NCCL
 * 2.28 and later: the in-flight operations stop, the communicator stays
 * shrinkable once quiescent), or ncclCommAbort-s it where NCCL has no
 * revoke (2.27: a shrink of it then fails with WF_E_ABORTED, where it
 * would otherwise have waited forever in that synchronize).
 *
 * The uneven collectives (and alltoall) run as grouped ncclSend /
 * ncclRecv from the plans of p2p_plan.h, the ones comm_zmq runs too. The
 * pure functions at the end (deadlines, poll pacing, error mapping) are
 * the NCCL backend's own and are unit-tested without a GPU
 * (tests/unit/test_cuda_host.c).
 */
#ifndef WF_COMM_NCCL_H
#define WF_COMM_NCCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm.h"

/* ncclUniqueId as plain bytes (NCCL_UNIQUE_ID_BYTES, pinned by a static
 * assert in comm_nccl.c): what the rendezvous hands to every node. */
#define WF_NCCL_ID_BYTES 128
typedef struct wf_nccl_id {
    unsigned char bytes[WF_NCCL_ID_BYTES]; /* opaque */
} wf_nccl_id_t;

typedef struct wf_comm_zmq_local wf_comm_zmq_local_t; /* comm_zmq.h */

/* Creation options of one rank. */
typedef struct wf_comm_nccl_opts {
    int device;               /* CUDA device of this rank */
    void *stream;             /* cudaStream_t of the worker (borrowed); NULL: the legacy default stream */
    uint32_t init_timeout_ms; /* init / split / finalize; 0 = 60000 */
    uint32_t op_timeout_ms;   /* each operation; 0 = none */
    wf_comm_zmq_local_t *abort_domain; /* (optional) the cluster's abort domain
                                 (comm_zmq.h): an abort of it aborts this
                                 world (polled with NCCL's async error), and a
                                 failure of this world aborts it. The world
                                 holds a reference (wf_comm_zmq_local_ref). */
} wf_comm_nccl_opts_t;

/* Whether NCCL was built in (comm_nccl.c); false with the stub
 * (comm_nccl_stub.c), whose calls below fail with WF_E_UNAVAILABLE and
 * whose version is 0, so that callers need no #ifdef. */
bool wf_comm_nccl_built(void);

/* Make a fresh unique id (ncclGetUniqueId), on the coordinator: locally
 * for one node, handed out by the rendezvous across nodes.
 * Errors: WF_E_INTERNAL. */
wf_status_t wf_comm_nccl_unique_id(wf_nccl_id_t *ret_id);

/* This rank's world handle: ncclCommInitRankConfig (non-blocking) on
 * opts->device, polled under the init timeout. Every rank of the world
 * calls it with the same id and nranks (one thread per device; ranks of
 * one process may call it concurrently). The ranks of one process that
 * init with the same id share the world: wf_comm_abort on any handle of
 * theirs (or a split of one) stops all of them. Caller owns *ret_comm
 * (wf_comm_destroy). Errors: WF_E_BAD_ARGUMENT, WF_E_NO_MEMORY,
 * WF_E_ABORTED (timeout or remote failure), WF_E_INTERNAL. */
wf_status_t wf_comm_nccl_init(const wf_nccl_id_t *id, int nranks, int rank,
                              const wf_comm_nccl_opts_t *opts,
                              wf_comm_t **ret_comm);

/* NCCL's version as major * 10000 + minor * 100 + patch (the version the
 * rendezvous compares between nodes). */
int wf_comm_nccl_version(void);

/* Whether the NCCL in use has ncclCommShrink: built against 2.27 or later
 * (NCCL_VERSION_CODE) and running on 2.27 or later (ncclGetVersion). */
bool wf_comm_nccl_has_shrink(void);

/* Collective over the surviving ranks of c's world (c: a world handle of
 * this backend, from wf_comm_nccl_init): a new world handle without the
 * ranks exclude[0..n) (ascending, 1..size-1 of them; an excluded rank does
 * not call it), ncclCommShrink with NCCL_SHRINK_ABORT (operations still
 * queued on c are terminated first), non-blocking and polled under the
 * init timeout (opts: its init_timeout_ms and abort_domain are the new
 * world's; device and stream are c's). Survivors keep their order,
 * renumbered from 0. c itself
 * is left to wf_comm_destroy; it must not have been ncclCommAbort-ed (a
 * failed operation or an abort of its world does that: WF_E_ABORTED, then
 * rebuild). Caller owns *ret_comm. Errors:
 * WF_E_UNAVAILABLE (no ncclCommShrink: rebuild from a new id instead),
 * WF_E_BAD_ARGUMENT, WF_E_NO_MEMORY, WF_E_ABORTED, WF_E_INTERNAL. */
wf_status_t wf_comm_nccl_shrink(wf_comm_t *c, const int *exclude, int n,
                                const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm);

/* Interval of the abort watchdog's checks, milliseconds: the longest an
 * asynchronous NCCL error, a lost node or an operation timeout goes
 * unnoticed while a rank waits on its stream (wf_comm_abort wakes the
 * watchdog at once). */
#define WF_NCCL_WATCHDOG_MS 10

/* Communicators the watchdog has stopped in this process (ncclCommAbort,
 * or ncclCommRevoke for a world of the cluster's domain with work in
 * flight), for tests and metrics; 0 with the stub. */
uint64_t wf_comm_nccl_watchdog_stops(void);

/* ---- pure host logic (no NCCL, no CUDA) ------------------------------------ */

/* A deadline for polling: timeout 0 never expires. */
typedef struct wf_nccl_deadline {
    uint64_t start_ns;   /* CLOCK_MONOTONIC at the start */
    uint64_t timeout_ns; /* 0 = none */
} wf_nccl_deadline_t;

/* 1 when `now_ns` is past the deadline. */
int wf_nccl_deadline_expired(const wf_nccl_deadline_t *d, uint64_t now_ns);

/* Pause before poll number `iteration` (0, 1, ...): spin first (an
 * operation on NVLink completes in microseconds), then back off to
 * 100 us so a long wait costs no core. Nanoseconds; 0 = do not sleep. */
uint64_t wf_nccl_poll_delay_ns(unsigned iteration);

/* weft status of an ncclResult_t value (its number), as a job error:
 * success / in progress -> WF_OK; invalid argument / usage ->
 * WF_E_BAD_ARGUMENT; remote error -> WF_E_ABORTED; anything else
 * (CUDA, system, internal) -> WF_E_INTERNAL. */
wf_status_t wf_nccl_status(int nccl_result);

#endif /* WF_COMM_NCCL_H */
