/* p2p_plan.h — collectives as point-to-point plans: which bytes each rank
 * sends to and receives from which peer, and what it copies locally, for
 * the backends that build collectives out of send / recv (comm_nccl for
 * the uneven ones, comm_zmq for all of them but allreduce and barrier).
 * comm_host does not use it: its ranks copy straight from each other's
 * buffers, with no messages to plan.
 *
 * Pure functions of the collective's arguments (as in comm.h, in bytes):
 * no I/O, no allocation, no logging. Every rank computes its own plan
 * from the same arguments, and the plans mirror each other: the k-th
 * send from rank r to rank p is the k-th receive at p from r, with the
 * same size when the arguments agree.
 */
#ifndef WF_P2P_PLAN_H
#define WF_P2P_PLAN_H

#include <stddef.h>

/* One point-to-point operation of a plan. Offsets are from the send
 * buffer (send) or the receive buffer (receive). */
typedef struct wf_p2p_op {
    int peer;      /* group rank, never the planning rank */
    int is_send;   /* 1 send, 0 receive */
    size_t offset; /* bytes */
    size_t bytes;  /* may be 0: see below */
} wf_p2p_op_t;

/* The local part of a plan: copy `bytes` from sendbuf + src to recvbuf +
 * dst (bytes 0: none). An executor skips it when the two addresses
 * coincide (in place). */
typedef struct wf_p2p_copy {
    size_t src, dst, bytes;
} wf_p2p_copy_t;

/* Plans for rank `rank` of `n`. `ops` has room for 2 * n entries; the
 * return value is the number written. Peers come in ring order (step s
 * = 1 .. n-1: send to rank + s, receive from rank - s; rooted plans: the
 * root sends to / receives from root + s), so every rank's list is the
 * mirror of its peers'.
 *
 * Every peer pair of the exchange appears, also with 0 bytes: the
 * executor decides. One that cannot check sizes (NCCL) leaves the empty
 * operations out on both sides, which stays in step because both sides
 * compute them from the same arguments; one that checks sizes on receipt
 * (comm_zmq) sends them, so that a rank that expected 0 bytes and got
 * some reports the mismatch.
 *
 * The local copy takes its size from one side's count (the two must
 * agree); checking it against the other side's is the executor's.
 * Arguments as in comm.h. */
size_t wf_p2p_plan_alltoallv(int rank, int n, const size_t *sendcounts,
                             const size_t *sdispls, const size_t *recvcounts,
                             const size_t *rdispls, wf_p2p_op_t *ops,
                             wf_p2p_copy_t *ret_self);
/* Even all-to-all: block j (bytes) of the send buffer to rank j. */
size_t wf_p2p_plan_alltoall(int rank, int n, size_t bytes, wf_p2p_op_t *ops,
                            wf_p2p_copy_t *ret_self);
size_t wf_p2p_plan_allgatherv(int rank, int n, size_t sendbytes,
                              const size_t *recvcounts, const size_t *displs,
                              wf_p2p_op_t *ops, wf_p2p_copy_t *ret_self);
/* Even all-gather: every rank's `bytes` at j * bytes. */
size_t wf_p2p_plan_allgather(int rank, int n, size_t bytes, wf_p2p_op_t *ops,
                             wf_p2p_copy_t *ret_self);
/* sendcounts / displs read on the root only (may be NULL elsewhere). */
size_t wf_p2p_plan_scatterv(int rank, int n, int root,
                            const size_t *sendcounts, const size_t *displs,
                            size_t recvbytes, wf_p2p_op_t *ops,
                            wf_p2p_copy_t *ret_self);
/* recvcounts / displs read on the root only (may be NULL elsewhere). */
size_t wf_p2p_plan_gatherv(int rank, int n, int root, size_t sendbytes,
                           const size_t *recvcounts, const size_t *displs,
                           wf_p2p_op_t *ops, wf_p2p_copy_t *ret_self);

/* 1 when an all-gatherv is an even, packed all-gather (every count equal,
 * displs[j] = j * count), with *ret_bytes = count; else 0. Lets a backend
 * with a native all-gather (ncclAllGather) run it. */
int wf_p2p_allgather_even(int n, const size_t *recvcounts,
                          const size_t *displs, size_t *ret_bytes);

#endif /* WF_P2P_PLAN_H */
