/* comm_impl.h — what a comm backend implements (ggml-backend style): the
 * table of operations behind a wf_comm_t and the common head of every
 * handle. Included by comm.c and by backends only, never by users of
 * comm.h.
 *
 * comm.c checks arguments that every backend would check the same way
 * (peer / root range, NULL buffers with non-zero sizes, collectives inside
 * a group call, nesting of group calls) before calling the table, so an
 * entry may assume them.
 */
#ifndef WF_COMM_IMPL_H
#define WF_COMM_IMPL_H

#include "comm.h"

struct wf_comm_iface {
    /* Backend name for wf_comm_backend ("host"). */
    const char *name;
    /* Free the handle (the backend allocated it, so it frees it). Not
     * collective; must not block on other ranks. */
    void (*destroy)(wf_comm_t *c);
    /* Abort the handle's world: wake every blocked call, fail later ones. */
    void (*abort)(wf_comm_t *c);
    /* (optional) wf_comm_sync: wait for the stream-ordered operations;
     * NULL where every call completes on return (WF_OK). */
    wf_status_t (*sync)(wf_comm_t *c);
    /* Collective split (see wf_comm_split). */
    wf_status_t (*split)(wf_comm_t *c, int color, int key,
                         wf_comm_t **ret_comm);
    /* Blocking send / recv when c->group_depth == 0; when > 0, post and
     * remember the operation for group_end. */
    wf_status_t (*send)(wf_comm_t *c, const void *buf, size_t bytes, int peer);
    wf_status_t (*recv)(wf_comm_t *c, void *buf, size_t bytes, int peer);
    /* Outermost group end: complete everything send / recv posted since
     * the group started (c->group_depth is already back to 0). */
    wf_status_t (*group_end)(wf_comm_t *c);
    /* Post a send / receive; return a request the caller will complete. */
    wf_status_t (*isend)(wf_comm_t *c, const void *buf, size_t bytes, int peer,
                         wf_comm_req_t **ret_req);
    wf_status_t (*irecv)(wf_comm_t *c, void *buf, size_t bytes, int peer,
                         wf_comm_req_t **ret_req);
    /* Block until req completes, release it, return its status. */
    wf_status_t (*wait)(wf_comm_t *c, wf_comm_req_t *req);
    /* Non-blocking check; when done, release req and return its status. */
    wf_status_t (*test)(wf_comm_t *c, wf_comm_req_t *req, int *ret_done);
    /* Collectives, with the arguments of the functions in comm.h. */
    wf_status_t (*barrier)(wf_comm_t *c);
    wf_status_t (*allgatherv)(wf_comm_t *c, const void *sendbuf,
                              size_t sendbytes, void *recvbuf,
                              const size_t *recvcounts, const size_t *displs);
    /* (optional) even all-gather; NULL: comm.c calls allgatherv with
     * counts it builds (which allocates, so a backend should provide it) */
    wf_status_t (*allgather)(wf_comm_t *c, const void *sendbuf, void *recvbuf,
                             size_t bytes);
    wf_status_t (*alltoallv)(wf_comm_t *c, const void *sendbuf,
                             const size_t *sendcounts, const size_t *sdispls,
                             void *recvbuf, const size_t *recvcounts,
                             const size_t *rdispls);
    /* (optional) even all-to-all; NULL: built on alltoallv like allgather */
    wf_status_t (*alltoall)(wf_comm_t *c, const void *sendbuf, void *recvbuf,
                            size_t bytes);
    wf_status_t (*allreduce)(wf_comm_t *c, const void *sendbuf, void *recvbuf,
                             size_t count, wf_comm_dtype_t dtype,
                             wf_comm_redop_t op);
    wf_status_t (*broadcast)(wf_comm_t *c, void *buf, size_t bytes, int root);
    wf_status_t (*scatterv)(wf_comm_t *c, const void *sendbuf,
                            const size_t *sendcounts, const size_t *displs,
                            void *recvbuf, size_t recvbytes, int root);
    wf_status_t (*gatherv)(wf_comm_t *c, const void *sendbuf, size_t sendbytes,
                           void *recvbuf, const size_t *recvcounts,
                           const size_t *displs, int root);
};

/* Common head of every backend's handle; a backend embeds it first. */
struct wf_comm {
    const struct wf_comm_iface *iface; /* the backend's table */
    int rank;                          /* index in the group */
    int size;                          /* ranks in the group */
    int group_depth;                   /* nesting of group_start calls */
};

/* The input of rank j, element 0 of the range being reduced. */
typedef const void *(*wf_comm_sum_input_fn)(const void *arg, int j);

/* out[k] = in_0[k] + in_1[k] + ... + in_{n-1}[k] for k < count, summed in
 * rank order block by block; in_j = input(arg, j). Every backend reduces
 * with this one function, so an all-reduce gives bit-identical results
 * on every rank and on every backend. out may alias an input (a block is
 * written only after it was read). */
void wf_comm_sum_ordered(wf_comm_dtype_t dtype, void *out, size_t count, int n,
                         wf_comm_sum_input_fn input, const void *arg);

/* Element range [lo, hi) of chunk i when count elements are cut in n
 * (the first count % n chunks one longer). Every backend that reduces
 * chunk by chunk cuts with this one, so they all reduce the same elements
 * together. */
void wf_comm_chunk_range(size_t count, int n, int i, size_t *ret_lo,
                         size_t *ret_hi);

/* Copy n bytes from src + soff to dst + doff (host memory). Nothing for
 * n == 0 (the buffers may then be NULL) or when the two addresses are
 * equal (the in-place case). */
void wf_comm_copy_at(void *dst, size_t doff, const void *src, size_t soff,
                     size_t n);

#endif /* WF_COMM_IMPL_H */
