/* comm.c — the backend-neutral front of comm.h: argument checks that are
 * the same for every backend, group-call nesting, then dispatch through
 * the handle's table (comm_impl.h). No state of its own, no logging. */
#include "comm_impl.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* A buffer may be NULL only when it holds no bytes. */
#define BAD_BUF(p, n) ((p) == NULL && (n) != 0)

int wf_comm_rank(const wf_comm_t *c)
{
    assert(c);
    return c->rank;
}

int wf_comm_size(const wf_comm_t *c)
{
    assert(c);
    return c->size;
}

const char *wf_comm_backend(const wf_comm_t *c)
{
    assert(c);
    return c->iface->name;
}

wf_status_t wf_comm_split(wf_comm_t *c, int color, int key,
                          wf_comm_t **ret_comm)
{
    assert(c && ret_comm);
    if (color < WF_COMM_SPLIT_NOCOLOR || c->group_depth > 0)
        return WF_E_BAD_ARGUMENT;
    return c->iface->split(c, color, key, ret_comm);
}

void wf_comm_abort(wf_comm_t *c)
{
    if (c)
        c->iface->abort(c);
}

void wf_comm_destroy(wf_comm_t **c)
{
    if (!c || !*c)
        return;
    wf_comm_t *x = *c;
    *c = NULL;
    x->iface->destroy(x);
}

wf_status_t wf_comm_sync(wf_comm_t *c)
{
    assert(c);
    if (c->group_depth > 0)
        return WF_E_BAD_ARGUMENT;
    return c->iface->sync ? c->iface->sync(c) : WF_OK;
}

wf_status_t wf_comm_send(wf_comm_t *c, const void *buf, size_t bytes, int peer)
{
    assert(c);
    if (peer < 0 || peer >= c->size || BAD_BUF(buf, bytes))
        return WF_E_BAD_ARGUMENT;
    return c->iface->send(c, buf, bytes, peer);
}

wf_status_t wf_comm_recv(wf_comm_t *c, void *buf, size_t bytes, int peer)
{
    assert(c);
    if (peer < 0 || peer >= c->size || BAD_BUF(buf, bytes))
        return WF_E_BAD_ARGUMENT;
    return c->iface->recv(c, buf, bytes, peer);
}

wf_status_t wf_comm_group_start(wf_comm_t *c)
{
    assert(c);
    c->group_depth++;
    return WF_OK;
}

wf_status_t wf_comm_group_end(wf_comm_t *c)
{
    assert(c);
    if (c->group_depth <= 0)
        return WF_E_BAD_ARGUMENT;
    if (--c->group_depth > 0)
        return WF_OK;
    return c->iface->group_end(c);
}

wf_status_t wf_comm_isend(wf_comm_t *c, const void *buf, size_t bytes,
                          int peer, wf_comm_req_t **ret_req)
{
    assert(c && ret_req);
    if (peer < 0 || peer >= c->size || BAD_BUF(buf, bytes))
        return WF_E_BAD_ARGUMENT;
    return c->iface->isend(c, buf, bytes, peer, ret_req);
}

wf_status_t wf_comm_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                          wf_comm_req_t **ret_req)
{
    assert(c && ret_req);
    if (peer < 0 || peer >= c->size || BAD_BUF(buf, bytes))
        return WF_E_BAD_ARGUMENT;
    return c->iface->irecv(c, buf, bytes, peer, ret_req);
}

wf_status_t wf_comm_wait(wf_comm_t *c, wf_comm_req_t **req)
{
    assert(c && req);
    if (!*req)
        return WF_OK;
    wf_comm_req_t *r = *req;
    *req = NULL;
    return c->iface->wait(c, r);
}

wf_status_t wf_comm_test(wf_comm_t *c, wf_comm_req_t **req, int *ret_done)
{
    assert(c && req && ret_done);
    if (!*req) {
        *ret_done = 1;
        return WF_OK;
    }
    int done = 0;
    wf_status_t st = c->iface->test(c, *req, &done);
    if (done)
        *req = NULL;
    *ret_done = done;
    return st;
}

wf_status_t wf_comm_barrier(wf_comm_t *c)
{
    assert(c);
    if (c->group_depth > 0)
        return WF_E_BAD_ARGUMENT;
    return c->iface->barrier(c);
}

wf_status_t wf_comm_allgather(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t bytes)
{
    assert(c);
    if (c->group_depth > 0 || BAD_BUF(sendbuf, bytes) || BAD_BUF(recvbuf, bytes))
        return WF_E_BAD_ARGUMENT;
    if (c->iface->allgather)
        return c->iface->allgather(c, sendbuf, recvbuf, bytes);
    size_t n = (size_t)c->size;
    size_t *counts = malloc(2 * n * sizeof *counts);
    if (!counts)
        return WF_E_NO_MEMORY; /* NOTE: the peers then block until an abort */
    for (size_t j = 0; j < n; j++) {
        counts[j] = bytes;
        counts[n + j] = j * bytes;
    }
    wf_status_t st = c->iface->allgatherv(c, sendbuf, bytes, recvbuf, counts,
                                          counts + n);
    free(counts);
    return st;
}

wf_status_t wf_comm_allgatherv(wf_comm_t *c, const void *sendbuf,
                               size_t sendbytes, void *recvbuf,
                               const size_t *recvcounts, const size_t *displs)
{
    assert(c);
    if (c->group_depth > 0 || BAD_BUF(sendbuf, sendbytes) || !recvcounts ||
        !displs)
        return WF_E_BAD_ARGUMENT;
    return c->iface->allgatherv(c, sendbuf, sendbytes, recvbuf, recvcounts,
                                displs);
}

wf_status_t wf_comm_alltoall(wf_comm_t *c, const void *sendbuf,
                             void *recvbuf, size_t bytes)
{
    assert(c);
    if (c->group_depth > 0 || BAD_BUF(sendbuf, bytes) || BAD_BUF(recvbuf, bytes))
        return WF_E_BAD_ARGUMENT;
    if (c->iface->alltoall)
        return c->iface->alltoall(c, sendbuf, recvbuf, bytes);
    size_t n = (size_t)c->size;
    size_t *counts = malloc(2 * n * sizeof *counts);
    if (!counts)
        return WF_E_NO_MEMORY;
    for (size_t j = 0; j < n; j++) {
        counts[j] = bytes;
        counts[n + j] = j * bytes;
    }
    wf_status_t st = c->iface->alltoallv(c, sendbuf, counts, counts + n,
                                         recvbuf, counts, counts + n);
    free(counts);
    return st;
}

wf_status_t wf_comm_alltoallv(wf_comm_t *c, const void *sendbuf,
                              const size_t *sendcounts, const size_t *sdispls,
                              void *recvbuf, const size_t *recvcounts,
                              const size_t *rdispls)
{
    assert(c);
    if (c->group_depth > 0 || !sendcounts || !sdispls || !recvcounts ||
        !rdispls)
        return WF_E_BAD_ARGUMENT;
    return c->iface->alltoallv(c, sendbuf, sendcounts, sdispls, recvbuf,
                               recvcounts, rdispls);
}

wf_status_t wf_comm_allreduce(wf_comm_t *c, const void *sendbuf,
                              void *recvbuf, size_t count,
                              wf_comm_dtype_t dtype, wf_comm_redop_t op)
{
    assert(c);
    if (c->group_depth > 0 || BAD_BUF(sendbuf, count) ||
        BAD_BUF(recvbuf, count) || (dtype != WF_COMM_F32 && dtype != WF_COMM_F64) ||
        op != WF_COMM_SUM)
        return WF_E_BAD_ARGUMENT;
    return c->iface->allreduce(c, sendbuf, recvbuf, count, dtype, op);
}

wf_status_t wf_comm_broadcast(wf_comm_t *c, void *buf, size_t bytes, int root)
{
    assert(c);
    if (c->group_depth > 0 || root < 0 || root >= c->size || BAD_BUF(buf, bytes))
        return WF_E_BAD_ARGUMENT;
    return c->iface->broadcast(c, buf, bytes, root);
}

wf_status_t wf_comm_scatterv(wf_comm_t *c, const void *sendbuf,
                             const size_t *sendcounts, const size_t *displs,
                             void *recvbuf, size_t recvbytes, int root)
{
    assert(c);
    if (c->group_depth > 0 || root < 0 || root >= c->size ||
        BAD_BUF(recvbuf, recvbytes))
        return WF_E_BAD_ARGUMENT;
    if (c->rank == root && (!sendcounts || !displs))
        return WF_E_BAD_ARGUMENT;
    return c->iface->scatterv(c, sendbuf, sendcounts, displs, recvbuf,
                              recvbytes, root);
}

wf_status_t wf_comm_gatherv(wf_comm_t *c, const void *sendbuf,
                            size_t sendbytes, void *recvbuf,
                            const size_t *recvcounts, const size_t *displs,
                            int root)
{
    assert(c);
    if (c->group_depth > 0 || root < 0 || root >= c->size ||
        BAD_BUF(sendbuf, sendbytes))
        return WF_E_BAD_ARGUMENT;
    if (c->rank == root && (!recvcounts || !displs))
        return WF_E_BAD_ARGUMENT;
    return c->iface->gatherv(c, sendbuf, sendbytes, recvbuf, recvcounts,
                             displs, root);
}

/* Block size of the ordered sum: the accumulator stays on the stack. */
#define SUM_BLOCK 256

#define SUM_ORDERED(T)                                                       \
    do {                                                                     \
        T acc[SUM_BLOCK];                                                    \
        T *o = out;                                                          \
        for (size_t b = 0; b < count; b += SUM_BLOCK) {                      \
            size_t w = count - b < SUM_BLOCK ? count - b : SUM_BLOCK;        \
            memcpy(acc, (const T *)input(arg, 0) + b, w * sizeof(T));        \
            for (int j = 1; j < n; j++) {                                    \
                const T *in = (const T *)input(arg, j) + b;                  \
                for (size_t k = 0; k < w; k++)                               \
                    acc[k] += in[k];                                         \
            }                                                                \
            memcpy(o + b, acc, w * sizeof(T));                               \
        }                                                                    \
    } while (0)

void wf_comm_sum_ordered(wf_comm_dtype_t dtype, void *out, size_t count, int n,
                         wf_comm_sum_input_fn input, const void *arg)
{
    if (count == 0 || n < 1)
        return;
    if (dtype == WF_COMM_F64)
        SUM_ORDERED(double);
    else
        SUM_ORDERED(float);
}

void wf_comm_chunk_range(size_t count, int n, int i, size_t *ret_lo,
                         size_t *ret_hi)
{
    /* count * i may overflow for absurd counts; split as q * i + r-part */
    size_t q = count / (size_t)n, r = count % (size_t)n;
    size_t ui = (size_t)i;
    *ret_lo = q * ui + (ui < r ? ui : r);
    *ret_hi = *ret_lo + q + (ui < r ? 1 : 0);
}

void wf_comm_copy_at(void *dst, size_t doff, const void *src, size_t soff,
                     size_t n)
{
    if (n == 0)
        return;
    char *d = (char *)dst + doff;
    const char *s = (const char *)src + soff;
    if (d != s)
        memcpy(d, s, n);
}
