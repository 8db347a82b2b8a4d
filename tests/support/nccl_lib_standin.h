/* nccl_lib_standin.h — a stand-in for the libraries under comm_nccl.c
 * (the CUDA runtime calls and NCCL calls it makes), so that the NCCL
 * comm backend itself (daemon/comm/comm_nccl.c: stream ordering, settling
 * non-blocking groups, the abort watchdog) runs on machines without a
 * GPU. A test executable compiles comm_nccl.c and nccl_lib_standin.c
 * together (tests/unit/nccl_stream.cmake); it is not the stand-in of
 * nccl_standin.h, which replaces the whole backend by comm_zmq worlds.
 *
 * The model:
 *   - "device" memory is host memory (cudaMalloc is malloc; cudaFree keeps
 *     the block, as the device may still write it), so a test
 *     fills and reads buffers directly, after a synchronize;
 *   - a stream is a FIFO of operations run by a thread of its own, after
 *     a short random delay each, so the host always runs ahead of the
 *     "GPU" and a missing wait shows as a wrong result; events are
 *     markers in that FIFO (cudaEventRecord / Query / Synchronize,
 *     cudaStreamWaitEvent), cudaStreamSynchronize waits for the FIFO;
 *   - an NCCL call (or a group of them, ncclGroupStart / End) is one
 *     operation of the stream it names: sends are buffered (a copy goes
 *     to the peer's mailbox when the operation runs), receives wait for
 *     the matching message; allreduce sums in rank order (f32 / f64),
 *     allgather and broadcast go through the same mailboxes. A receive
 *     whose peer never sends waits until the communicator is aborted, as
 *     an NCCL kernel spins until ncclCommAbort;
 *   - communicators are non-blocking: init and every ncclGroupEnd return
 *     ncclInProgress and ncclCommGetAsyncError reports ncclInProgress
 *     once before ncclSuccess, so the caller's settling is exercised;
 *     init completes when every rank of the id has called it; split is
 *     collective over the parent (by color, then key, then rank);
 *   - ncclCommAbort ends the operations of that communicator on every
 *     stream (they finish without writing), waits until none runs, and
 *     frees the communicator: any later call with it is counted
 *     (use_after_abort) and refused with ncclInvalidUsage;
 *   - ncclCommRevoke (NCCL 2.28) ends them the same way but keeps the
 *     communicator, quiescent after one ncclInProgress, for shrink or
 *     destroy; ncclCommShrink is collective over the survivors (they keep
 *     their order) and non-blocking like split.
 *
 * Not modelled: device contexts (cudaSetDevice is accepted and ignored),
 * NCCL's algorithms and numerics (allreduce is a rank-order sum, as
 * comm_host's), a peer's abort reaching this rank (real NCCL does not
 * either; a local abort only ends the local rank's kernels), a collective
 * that fails with an error of its own (only set_async_error), timing.
 *
 * Counters for tests: host waits per calling thread (see
 * wf_nclib_thread_host_waits), NCCL operations enqueued, aborts, uses
 * after abort. Thread-safe.
 */
#ifndef WF_TEST_NCCL_LIB_STANDIN_H
#define WF_TEST_NCCL_LIB_STANDIN_H

#include <stdint.h>

/* Host waits made by the calling thread since its last reset: each
 * cudaStreamSynchronize or cudaEventSynchronize, and each event RECORD
 * that cudaEventQuery found incomplete at least once (a poll loop
 * counts once per wait, however many times it polls). A query that finds
 * the record done at once waited for nothing and does not count. */
uint64_t wf_nclib_thread_host_waits(void);
void wf_nclib_thread_reset(void);

typedef struct wf_nclib_counters {
    uint64_t nccl_ops;        /* stream operations enqueued by NCCL calls (a group is one) */
    uint64_t aborts;          /* ncclCommAbort calls */
    uint64_t revokes;         /* ncclCommRevoke calls */
    uint64_t use_after_abort; /* calls on a communicator after its abort */
    uint64_t live_comms;      /* communicators not yet destroyed or aborted */
} wf_nclib_counters_t;

wf_nclib_counters_t wf_nclib_counters(void);

/* Make ncclCommGetAsyncError of every live communicator of `rank` (the
 * rank in its communicator) report `nccl_error` (an ncclResult_t value)
 * from now on, as NCCL does after a network failure; its operations keep
 * waiting, as NCCL's kernels do, until it is aborted. Returns how many
 * communicators it marked. */
int wf_nclib_set_async_error(int rank, int nccl_error);

/* A stream (cudaStreamCreateWithFlags) for a test's rank, its
 * synchronize (cudaStreamSynchronize: what the CUDA backend's synchronize
 * does, a host wait of the calling thread), and its destruction. */
void *wf_nclib_stream_new(void);
void wf_nclib_stream_sync(void *stream);
void wf_nclib_stream_destroy(void *stream);

/* Whether stream `stream` (a cudaStream_t) has operations queued or
 * running: for a test that waits for a rank to be blocked on it. */
int wf_nclib_stream_busy(void *stream);

/* Block until some operation on `stream` waits for a message that has
 * not come (a collective or receive whose peer has not sent). */
void wf_nclib_wait_blocked(void *stream);

/* The same for any stream (a handle's own side stream of isend / irecv,
 * which a test cannot name). */
void wf_nclib_wait_any_blocked(void);

#endif /* WF_TEST_NCCL_LIB_STANDIN_H */
