/* comm_nccl.c — the NCCL backend of comm.h (see comm_nccl.h): handles,
 * non-blocking init / split with timeouts, every operation as grouped
 * NCCL calls on the worker's stream (the uneven collectives and alltoall
 * as the point-to-point plans of p2p_plan.h), completion and error
 * polling, and the pure helpers of comm_nccl.h. Does not log: statuses
 * carry the error. */
#include "comm_nccl.h"
#include "comm_impl.h"
#include "comm_zmq.h"
#include "p2p_plan.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <assert.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(ncclUniqueId) == WF_NCCL_ID_BYTES, "ncclUniqueId size");
_Static_assert(NCCL_SPLIT_NOCOLOR == WF_COMM_SPLIT_NOCOLOR, "no-color value");

enum { REQS = 64 }; /* isend / irecv in flight per handle */

/* Shared by every handle split from one world handle (refcounted). */
typedef struct nccl_world {
    atomic_int aborted; /* raised by wf_comm_abort on any handle */
    atomic_int refs;    /* handles alive */
    wf_comm_zmq_local_t *domain; /* the cluster's abort domain (a reference), or NULL */
} nccl_world_t;

/* A posted point-to-point operation (group or asynchronous). */
typedef struct posted {
    void *buf;     /* device */
    size_t bytes;
    int peer;
    int is_send;
} posted_t;

struct wf_comm_req {
    int used;         /* slot taken */
    int issued;       /* in a flushed NCCL group */
    posted_t op;      /* the operation */
    cudaEvent_t done; /* recorded after its group on the side stream */
};

typedef struct nccl_comm {
    struct wf_comm base;      /* first: comm_impl.h */
    ncclComm_t comm;          /* this rank's communicator */
    nccl_world_t *world;      /* shared abort flag */
    int device;               /* CUDA device */
    cudaStream_t stream;      /* the worker's (borrowed) */
    cudaStream_t side;        /* own: asynchronous p2p */
    cudaEvent_t ev_main;      /* orders side after main */
    cudaEvent_t ev_done;      /* completion of a blocking call */
    float *scratch;           /* device: barrier element */
    uint32_t init_timeout_ms; /* init / split / finalize */
    uint32_t op_timeout_ms;   /* each operation, 0 = none */
    bool nccl_aborted;        /* ncclCommAbort done */
    posted_t *group;          /* send / recv posted inside a group call */
    size_t ngroup, capgroup;
    struct wf_comm_req reqs[REQS]; /* request pool */
} nccl_comm_t;

static const struct wf_comm_iface nccl_iface;

/* ---- pure helpers ---------------------------------------------------------------- */

wf_status_t wf_nccl_status(int r)
{
    switch (r) {
    case ncclSuccess:
    case ncclInProgress:
        return WF_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return WF_E_BAD_ARGUMENT;
    case ncclRemoteError:
        return WF_E_ABORTED;
    default:
        return WF_E_INTERNAL;
    }
}

int wf_nccl_deadline_expired(const wf_nccl_deadline_t *d, uint64_t now_ns)
{
    if (!d || d->timeout_ns == 0)
        return 0;
    return now_ns >= d->start_ns && now_ns - d->start_ns >= d->timeout_ns;
}

uint64_t wf_nccl_poll_delay_ns(unsigned iteration)
{
    if (iteration < 1000)
        return 0;
    uint64_t d = 1000u << ((iteration - 1000) / 100 < 7 ? (iteration - 1000) / 100 : 7);
    return d > 100000u ? 100000u : d;
}

/* ---- polling ------------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static wf_nccl_deadline_t deadline_ms(uint32_t ms)
{
    return (wf_nccl_deadline_t){now_ns(), (uint64_t)ms * 1000000u};
}

static void pause_ns(uint64_t ns)
{
    if (ns == 0)
        return;
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&ts, NULL);
}

/* The world was aborted: by a handle of it, or through the cluster's
 * abort domain (a lost node, a failed job on another rank). */
static bool world_aborted(const nccl_comm_t *c)
{
    return atomic_load(&c->world->aborted) ||
           (c->world->domain && wf_comm_zmq_local_aborted(c->world->domain));
}

/* Abort this handle's communicator (once) and mark the world (and the
 * cluster's domain: the other ranks of this process and the cluster learn
 * of it, as from a comm_zmq failure). */
static void abort_local(nccl_comm_t *c)
{
    atomic_store(&c->world->aborted, 1);
    if (c->world->domain)
        wf_comm_zmq_local_abort(c->world->domain);
    if (!c->nccl_aborted && c->comm) {
        ncclCommAbort(c->comm);
        c->nccl_aborted = true;
    }
}

/* After an error: abort and turn it into a job error. A world in the
 * cluster's abort domain that stops for an abort, a remote error or a
 * timeout (WF_E_ABORTED: a peer is lost or failed) is only revoked: the
 * world and the domain are marked (every later call refuses, the other
 * ranks of this process wake up) and the communicator is kept, so that
 * the survivors can ncclCommShrink it (NCCL_SHRINK_ABORT ends what is
 * still queued on it); destroy ncclCommAbort-s it otherwise. A local
 * failure aborts at once. */
static wf_status_t fail(nccl_comm_t *c, wf_status_t st)
{
    if (st == WF_E_ABORTED && c->world->domain && !c->nccl_aborted) {
        atomic_store(&c->world->aborted, 1);
        wf_comm_zmq_local_abort(c->world->domain);
        return st;
    }
    abort_local(c);
    return st == WF_E_BAD_ARGUMENT || st == WF_E_ABORTED ? st : WF_E_INTERNAL;
}

/* Wait until the communicator has no NCCL call in progress (non-blocking
 * mode), under deadline d. */
static wf_status_t wait_nccl_ready(nccl_comm_t *c, const wf_nccl_deadline_t *d)
{
    for (unsigned it = 0;; it++) {
        if (world_aborted(c))
            return fail(c, WF_E_ABORTED);
        ncclResult_t ar = ncclSuccess;
        if (ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess)
            return fail(c, WF_E_INTERNAL);
        if (ar == ncclSuccess)
            return WF_OK;
        if (ar != ncclInProgress)
            return fail(c, wf_nccl_status(ar));
        if (wf_nccl_deadline_expired(d, now_ns()))
            return fail(c, WF_E_ABORTED);
        pause_ns(wf_nccl_poll_delay_ns(it));
    }
}

/* Wait for event ev, watching NCCL's asynchronous errors, the world's
 * abort flag and the operation timeout. */
static wf_status_t wait_event(nccl_comm_t *c, cudaEvent_t ev)
{
    wf_nccl_deadline_t d = deadline_ms(c->op_timeout_ms);
    for (unsigned it = 0;; it++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return WF_OK;
        if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return fail(c, WF_E_INTERNAL);
        }
        if (world_aborted(c))
            return fail(c, WF_E_ABORTED);
        ncclResult_t ar = ncclSuccess;
        if (ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess)
            return fail(c, WF_E_INTERNAL);
        if (ar != ncclSuccess && ar != ncclInProgress)
            return fail(c, wf_nccl_status(ar));
        if (wf_nccl_deadline_expired(&d, now_ns()))
            return fail(c, WF_E_ABORTED);
        pause_ns(wf_nccl_poll_delay_ns(it));
    }
}

/* Start of every call: refuse after an abort, select the device. */
static wf_status_t enter(nccl_comm_t *c)
{
    if (world_aborted(c) || c->nccl_aborted)
        return fail(c, WF_E_ABORTED);
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(c, WF_E_INTERNAL);
    }
    return WF_OK;
}

/* End of a group of NCCL calls issued on `stream`: settle the
 * non-blocking group, then (blocking calls) wait for completion. */
static wf_status_t settle(nccl_comm_t *c, ncclResult_t r)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return fail(c, wf_nccl_status(r));
    wf_nccl_deadline_t d = deadline_ms(c->op_timeout_ms);
    return wait_nccl_ready(c, &d);
}

static wf_status_t complete(nccl_comm_t *c, ncclResult_t r)
{
    wf_status_t st = settle(c, r);
    if (st != WF_OK)
        return st;
    if (cudaEventRecord(c->ev_done, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(c, WF_E_INTERNAL);
    }
    return wait_event(c, c->ev_done);
}

static ncclResult_t post(nccl_comm_t *c, const posted_t *o, cudaStream_t s)
{
    return o->is_send ? ncclSend(o->buf, o->bytes, ncclChar, o->peer, c->comm, s)
                      : ncclRecv(o->buf, o->bytes, ncclChar, o->peer, c->comm, s);
}

/* Run a plan (grouped p2p + local copy) on the main stream and wait.
 * Zero-byte operations are left out: every rank computed the same plan,
 * so its peer leaves out the matching one too. */
static wf_status_t run_plan(nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                            const wf_p2p_op_t *ops, size_t nops,
                            const wf_p2p_copy_t *self)
{
    if (self->bytes) {
        const char *src = (const char *)sendbuf + self->src;
        char *dst = (char *)recvbuf + self->dst;
        if (src != dst &&
            cudaMemcpyAsync(dst, src, self->bytes, cudaMemcpyDeviceToDevice,
                            c->stream) != cudaSuccess) {
            (void)cudaGetLastError();
            return fail(c, WF_E_INTERNAL);
        }
    }
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; i < nops && r == ncclSuccess; i++) {
        if (ops[i].bytes == 0)
            continue;
        posted_t o = {ops[i].is_send ? (void *)((char *)sendbuf + ops[i].offset)
                                     : (void *)((char *)recvbuf + ops[i].offset),
                      ops[i].bytes, ops[i].peer, ops[i].is_send};
        r = post(c, &o, c->stream);
    }
    ncclResult_t r2 = ncclGroupEnd();
    return complete(c, r != ncclSuccess ? r : r2);
}

/* A plan needs 2 * n entries: from the heap, but for the group sizes of
 * one node on the stack. */
enum { PLAN_STACK = 64 };

/* ---- asynchronous p2p ------------------------------------------------------------- */

/* Issue every posted-but-unissued request as one NCCL group on the side
 * stream, after what the main stream holds now. */
static wf_status_t flush_reqs(nccl_comm_t *c)
{
    int any = 0;
    for (int i = 0; i < REQS; i++)
        any |= c->reqs[i].used && !c->reqs[i].issued;
    if (!any)
        return WF_OK;
    if (cudaEventRecord(c->ev_main, c->stream) != cudaSuccess ||
        cudaStreamWaitEvent(c->side, c->ev_main, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(c, WF_E_INTERNAL);
    }
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < REQS && r == ncclSuccess; i++)
        if (c->reqs[i].used && !c->reqs[i].issued)
            r = post(c, &c->reqs[i].op, c->side);
    ncclResult_t r2 = ncclGroupEnd();
    wf_status_t st = settle(c, r != ncclSuccess ? r : r2);
    if (st != WF_OK)
        return st;
    for (int i = 0; i < REQS; i++)
        if (c->reqs[i].used && !c->reqs[i].issued) {
            c->reqs[i].issued = 1;
            if (cudaEventRecord(c->reqs[i].done, c->side) != cudaSuccess) {
                (void)cudaGetLastError();
                return fail(c, WF_E_INTERNAL);
            }
        }
    return WF_OK;
}

static wf_status_t post_req(wf_comm_t *base, void *buf, size_t bytes, int peer,
                            int is_send, wf_comm_req_t **ret_req)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = enter(c);
    if (st != WF_OK)
        return st;
    struct wf_comm_req *q = NULL;
    int sends = 0, recvs = 0;
    for (int i = 0; i < REQS; i++) {
        if (!c->reqs[i].used) {
            if (!q)
                q = &c->reqs[i];
        } else if (!c->reqs[i].issued) {
            sends += c->reqs[i].op.is_send;
            recvs += !c->reqs[i].op.is_send;
        }
    }
    if (!q)
        return WF_E_NO_MEMORY;
    q->used = 1;
    q->issued = 0;
    q->op = (posted_t){buf, bytes, peer, is_send};
    *ret_req = q;
    if (is_send ? recvs > 0 : sends > 0)
        return flush_reqs(c); /* an exchange: start it now, overlapping compute */
    return WF_OK;
}

static wf_status_t nc_isend(wf_comm_t *c, const void *buf, size_t bytes, int peer,
                            wf_comm_req_t **ret_req)
{
    return post_req(c, (void *)buf, bytes, peer, 1, ret_req);
}

static wf_status_t nc_irecv(wf_comm_t *c, void *buf, size_t bytes, int peer,
                            wf_comm_req_t **ret_req)
{
    return post_req(c, buf, bytes, peer, 0, ret_req);
}

static wf_status_t nc_wait(wf_comm_t *base, wf_comm_req_t *req)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = enter(c);
    if (st == WF_OK && !req->issued)
        st = flush_reqs(c);
    if (st == WF_OK)
        st = wait_event(c, req->done);
    req->used = 0;
    return st;
}

static wf_status_t nc_test(wf_comm_t *base, wf_comm_req_t *req, int *ret_done)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = enter(c);
    if (st == WF_OK && !req->issued)
        st = flush_reqs(c);
    if (st != WF_OK) {
        req->used = 0;
        *ret_done = 1;
        return st;
    }
    cudaError_t e = cudaEventQuery(req->done);
    if (e == cudaErrorNotReady) {
        ncclResult_t ar = ncclSuccess;
        ncclCommGetAsyncError(c->comm, &ar);
        if (ar == ncclSuccess || ar == ncclInProgress) {
            *ret_done = 0;
            return WF_OK;
        }
        st = fail(c, wf_nccl_status(ar));
    } else if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st = fail(c, WF_E_INTERNAL);
    }
    req->used = 0;
    *ret_done = 1;
    return st;
}

/* ---- blocking p2p and groups ------------------------------------------------------- */

static wf_status_t group_push(nccl_comm_t *c, void *buf, size_t bytes, int peer,
                              int is_send)
{
    if (c->ngroup == c->capgroup) {
        size_t cap = c->capgroup ? 2 * c->capgroup : 16;
        posted_t *g = realloc(c->group, cap * sizeof *g);
        if (!g)
            return WF_E_NO_MEMORY;
        c->group = g;
        c->capgroup = cap;
    }
    c->group[c->ngroup++] = (posted_t){buf, bytes, peer, is_send};
    return WF_OK;
}

static wf_status_t p2p(wf_comm_t *base, void *buf, size_t bytes, int peer, int is_send)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = enter(c);
    if (st != WF_OK)
        return st;
    if (base->group_depth > 0)
        return group_push(c, buf, bytes, peer, is_send);
    if ((st = flush_reqs(c)) != WF_OK)
        return st;
    posted_t o = {buf, bytes, peer, is_send};
    return complete(c, post(c, &o, c->stream));
}

static wf_status_t nc_send(wf_comm_t *c, const void *buf, size_t bytes, int peer)
{
    return p2p(c, (void *)buf, bytes, peer, 1);
}

static wf_status_t nc_recv(wf_comm_t *c, void *buf, size_t bytes, int peer)
{
    return p2p(c, buf, bytes, peer, 0);
}

static wf_status_t nc_group_end(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    size_t n = c->ngroup;
    c->ngroup = 0;
    wf_status_t st = enter(c);
    if (st == WF_OK)
        st = flush_reqs(c);
    if (st != WF_OK || n == 0)
        return st;
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        r = post(c, &c->group[i], c->stream);
    ncclResult_t r2 = ncclGroupEnd();
    return complete(c, r != ncclSuccess ? r : r2);
}

/* ---- collectives --------------------------------------------------------------------- */

/* Common start of a collective: enter + flush pending requests. */
static wf_status_t coll_enter(nccl_comm_t *c)
{
    wf_status_t st = enter(c);
    return st == WF_OK ? flush_reqs(c) : st;
}

static wf_status_t nc_barrier(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    return complete(c, ncclAllReduce(c->scratch, c->scratch, 1, ncclFloat32, ncclSum,
                                     c->comm, c->stream));
}

static wf_status_t nc_allgather(wf_comm_t *base, const void *sendbuf, void *recvbuf,
                                size_t bytes)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || bytes == 0)
        return st;
    return complete(c, ncclAllGather(sendbuf, recvbuf, bytes, ncclChar, c->comm,
                                     c->stream));
}

/* Room for a plan of 2 * n operations. */
static wf_p2p_op_t *plan_room(int n, wf_p2p_op_t *stack)
{
    if (n <= PLAN_STACK / 2)
        return stack;
    return malloc(2 * (size_t)n * sizeof(wf_p2p_op_t));
}

static wf_status_t nc_allgatherv(wf_comm_t *base, const void *sendbuf, size_t sendbytes,
                                 void *recvbuf, const size_t *recvcounts,
                                 const size_t *displs)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    size_t even;
    if (wf_p2p_allgather_even(base->size, recvcounts, displs, &even))
        return nc_allgather(base, sendbuf, recvbuf, even);
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    wf_p2p_op_t stack[PLAN_STACK], *ops = plan_room(base->size, stack);
    if (!ops)
        return fail(c, WF_E_NO_MEMORY);
    wf_p2p_copy_t self;
    size_t n = wf_p2p_plan_allgatherv(base->rank, base->size, sendbytes, recvcounts,
                                       displs, ops, &self);
    st = run_plan(c, sendbuf, recvbuf, ops, n, &self);
    if (ops != stack)
        free(ops);
    return st;
}

static wf_status_t nc_alltoallv(wf_comm_t *base, const void *sendbuf,
                                const size_t *sendcounts, const size_t *sdispls,
                                void *recvbuf, const size_t *recvcounts,
                                const size_t *rdispls)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    wf_p2p_op_t stack[PLAN_STACK], *ops = plan_room(base->size, stack);
    if (!ops)
        return fail(c, WF_E_NO_MEMORY);
    wf_p2p_copy_t self;
    size_t n = wf_p2p_plan_alltoallv(base->rank, base->size, sendcounts, sdispls,
                                      recvcounts, rdispls, ops, &self);
    st = run_plan(c, sendbuf, recvbuf, ops, n, &self);
    if (ops != stack)
        free(ops);
    return st;
}

static wf_status_t nc_alltoall(wf_comm_t *base, const void *sendbuf, void *recvbuf,
                               size_t bytes)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || bytes == 0)
        return st;
    wf_p2p_op_t stack[PLAN_STACK], *ops = plan_room(base->size, stack);
    if (!ops)
        return fail(c, WF_E_NO_MEMORY);
    wf_p2p_copy_t self;
    size_t n = wf_p2p_plan_alltoall(base->rank, base->size, bytes, ops, &self);
    st = run_plan(c, sendbuf, recvbuf, ops, n, &self);
    if (ops != stack)
        free(ops);
    return st;
}

static wf_status_t nc_allreduce(wf_comm_t *base, const void *sendbuf, void *recvbuf,
                                size_t count, wf_comm_dtype_t dtype, wf_comm_redop_t op)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    if (op != WF_COMM_SUM || (dtype != WF_COMM_F32 && dtype != WF_COMM_F64))
        return WF_E_BAD_ARGUMENT;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || count == 0)
        return st;
    return complete(c, ncclAllReduce(sendbuf, recvbuf, count,
                                     dtype == WF_COMM_F32 ? ncclFloat32 : ncclFloat64,
                                     ncclSum, c->comm, c->stream));
}

static wf_status_t nc_broadcast(wf_comm_t *base, void *buf, size_t bytes, int root)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || bytes == 0)
        return st;
    return complete(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, c->comm, c->stream));
}

static wf_status_t nc_scatterv(wf_comm_t *base, const void *sendbuf,
                               const size_t *sendcounts, const size_t *displs,
                               void *recvbuf, size_t recvbytes, int root)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    wf_p2p_op_t stack[PLAN_STACK], *ops = plan_room(base->size, stack);
    if (!ops)
        return fail(c, WF_E_NO_MEMORY);
    wf_p2p_copy_t self;
    size_t n = wf_p2p_plan_scatterv(base->rank, base->size, root, sendcounts, displs,
                                     recvbytes, ops, &self);
    st = run_plan(c, sendbuf, recvbuf, ops, n, &self);
    if (ops != stack)
        free(ops);
    return st;
}

static wf_status_t nc_gatherv(wf_comm_t *base, const void *sendbuf, size_t sendbytes,
                              void *recvbuf, const size_t *recvcounts,
                              const size_t *displs, int root)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    wf_p2p_op_t stack[PLAN_STACK], *ops = plan_room(base->size, stack);
    if (!ops)
        return fail(c, WF_E_NO_MEMORY);
    wf_p2p_copy_t self;
    size_t n = wf_p2p_plan_gatherv(base->rank, base->size, root, sendbytes, recvcounts,
                                    displs, ops, &self);
    st = run_plan(c, sendbuf, recvbuf, ops, n, &self);
    if (ops != stack)
        free(ops);
    return st;
}

/* ---- lifetime ----------------------------------------------------------------------- */

static ncclConfig_t make_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

/* Everything of a handle but the communicator; NULL on failure. */
static nccl_comm_t *handle_new(int device, cudaStream_t stream, uint32_t init_ms,
                               uint32_t op_ms, nccl_world_t *world,
                               wf_comm_zmq_local_t *domain)
{
    nccl_comm_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.iface = &nccl_iface;
    c->device = device;
    c->stream = stream;
    c->init_timeout_ms = init_ms ? init_ms : 60000u;
    c->op_timeout_ms = op_ms;
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_main, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_done, cudaEventDisableTiming) != cudaSuccess ||
        cudaMalloc((void **)&c->scratch, 256) != cudaSuccess ||
        cudaMemsetAsync(c->scratch, 0, 256, stream) != cudaSuccess)
        goto bad;
    for (int i = 0; i < REQS; i++)
        if (cudaEventCreateWithFlags(&c->reqs[i].done, cudaEventDisableTiming) != cudaSuccess)
            goto bad;
    if (!world) {
        world = calloc(1, sizeof *world);
        if (!world)
            goto bad;
        atomic_init(&world->aborted, 0);
        atomic_init(&world->refs, 0);
        world->domain = domain ? wf_comm_zmq_local_ref(domain) : NULL;
    }
    atomic_fetch_add(&world->refs, 1);
    c->world = world;
    return c;
bad:
    (void)cudaGetLastError();
    for (int i = 0; i < REQS; i++)
        if (c->reqs[i].done)
            cudaEventDestroy(c->reqs[i].done);
    if (c->scratch)
        cudaFree(c->scratch);
    if (c->ev_done)
        cudaEventDestroy(c->ev_done);
    if (c->ev_main)
        cudaEventDestroy(c->ev_main);
    if (c->side)
        cudaStreamDestroy(c->side);
    free(c);
    return NULL;
}

/* Free a handle (the communicator already gone or aborted). */
static void handle_free(nccl_comm_t *c)
{
    cudaSetDevice(c->device);
    for (int i = 0; i < REQS; i++)
        if (c->reqs[i].done)
            cudaEventDestroy(c->reqs[i].done);
    cudaFree(c->scratch);
    cudaEventDestroy(c->ev_done);
    cudaEventDestroy(c->ev_main);
    cudaStreamDestroy(c->side);
    (void)cudaGetLastError();
    if (atomic_fetch_sub(&c->world->refs, 1) == 1) {
        wf_comm_zmq_local_unref(&c->world->domain);
        free(c->world);
    }
    free(c->group);
    free(c);
}

/* Poll a fresh communicator until ready; abort it on failure / timeout. */
static wf_status_t wait_init(nccl_comm_t *c, ncclResult_t r)
{
    if (r != ncclSuccess && r != ncclInProgress) {
        if (c->comm) {
            ncclCommAbort(c->comm);
            c->nccl_aborted = true;
        }
        return wf_nccl_status(r) == WF_E_BAD_ARGUMENT ? WF_E_BAD_ARGUMENT : WF_E_INTERNAL;
    }
    wf_nccl_deadline_t d = deadline_ms(c->init_timeout_ms);
    return wait_nccl_ready(c, &d);
}

wf_status_t wf_comm_nccl_unique_id(wf_nccl_id_t *ret_id)
{
    ncclUniqueId id;
    if (!ret_id || ncclGetUniqueId(&id) != ncclSuccess)
        return WF_E_INTERNAL;
    memcpy(ret_id->bytes, id.internal, sizeof id.internal);
    return WF_OK;
}

bool wf_comm_nccl_built(void)
{
    return true;
}

int wf_comm_nccl_version(void)
{
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess)
        return 0;
    return v;
}

wf_status_t wf_comm_nccl_init(const wf_nccl_id_t *id, int nranks, int rank,
                              const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    if (!id || !opts || !ret_comm || nranks < 1 || rank < 0 || rank >= nranks ||
        opts->device < 0)
        return WF_E_BAD_ARGUMENT;
    nccl_comm_t *c = handle_new(opts->device, (cudaStream_t)opts->stream,
                                opts->init_timeout_ms, opts->op_timeout_ms, NULL,
                                opts->abort_domain);
    if (!c)
        return WF_E_NO_MEMORY;
    c->base.rank = rank;
    c->base.size = nranks;
    ncclUniqueId uid;
    memcpy(uid.internal, id->bytes, sizeof uid.internal);
    ncclConfig_t cfg = make_config();
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, nranks, uid, rank, &cfg);
    wf_status_t st = wait_init(c, r);
    if (st != WF_OK) {
        if (c->comm && !c->nccl_aborted)
            ncclCommAbort(c->comm);
        handle_free(c);
        return st;
    }
    *ret_comm = &c->base;
    return WF_OK;
}

static wf_status_t nc_split(wf_comm_t *base, int color, int key, wf_comm_t **ret_comm)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    nccl_comm_t *s = handle_new(c->device, c->stream, c->init_timeout_ms, c->op_timeout_ms,
                                c->world, NULL);
    if (!s)
        return fail(c, WF_E_NO_MEMORY); /* the peers wait in the split: abort them */
    ncclConfig_t cfg = make_config();
    ncclResult_t r = ncclCommSplit(c->comm, color, key, &s->comm, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        handle_free(s);
        return fail(c, wf_nccl_status(r));
    }
    /* The parent settles first (the split is a call on it). */
    wf_nccl_deadline_t d = deadline_ms(c->init_timeout_ms);
    st = wait_nccl_ready(c, &d);
    if (st == WF_OK && color != WF_COMM_SPLIT_NOCOLOR && s->comm)
        st = wait_nccl_ready(s, &d);
    if (st != WF_OK || color == WF_COMM_SPLIT_NOCOLOR || !s->comm) {
        if (s->comm && !s->nccl_aborted)
            ncclCommAbort(s->comm);
        handle_free(s);
        if (st == WF_OK)
            *ret_comm = NULL;
        return st;
    }
    int n = 0, rk = 0;
    if (ncclCommCount(s->comm, &n) != ncclSuccess ||
        ncclCommUserRank(s->comm, &rk) != ncclSuccess) {
        ncclCommAbort(s->comm);
        handle_free(s);
        return fail(c, WF_E_INTERNAL);
    }
    s->base.size = n;
    s->base.rank = rk;
    *ret_comm = &s->base;
    return WF_OK;
}

/* ncclCommShrink came with NCCL 2.27 (NCCL_VERSION_CODE 22700). */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22700
#define WF_HAVE_SHRINK 1
#else
#define WF_HAVE_SHRINK 0
#endif

bool wf_comm_nccl_has_shrink(void)
{
    return WF_HAVE_SHRINK && wf_comm_nccl_version() >= 22700;
}

wf_status_t wf_comm_nccl_shrink(wf_comm_t *base, const int *exclude, int n,
                                const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    if (!base || !ret_comm || !exclude || !opts || n < 1 || n >= base->size ||
        strcmp(wf_comm_backend(base), "nccl") != 0)
        return WF_E_BAD_ARGUMENT;
    for (int i = 0; i < n; i++)
        if (exclude[i] < 0 || exclude[i] >= base->size || (i && exclude[i] <= exclude[i - 1]) ||
            exclude[i] == base->rank)
            return WF_E_BAD_ARGUMENT;
    if (!wf_comm_nccl_has_shrink())
        return WF_E_UNAVAILABLE;
#if WF_HAVE_SHRINK
    nccl_comm_t *c = (nccl_comm_t *)base;
    if (c->nccl_aborted || !c->comm)
        return WF_E_ABORTED;    /* an aborted communicator cannot shrink */
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_INTERNAL;
    }
    /* a new world (own abort flag): the old one may be aborted already */
    nccl_comm_t *s = handle_new(c->device, c->stream,
                                opts->init_timeout_ms ? opts->init_timeout_ms
                                                      : c->init_timeout_ms,
                                opts->op_timeout_ms, NULL, opts->abort_domain);
    if (!s)
        return WF_E_NO_MEMORY;
    ncclConfig_t cfg = make_config();
    int *ex = (int *)exclude;   /* NCCL's prototype is not const-correct */
    ncclResult_t r = ncclCommShrink(c->comm, ex, n, &s->comm, &cfg, NCCL_SHRINK_ABORT);
    s->base.size = base->size - n;
    int below = 0;
    for (int i = 0; i < n; i++)
        below += exclude[i] < base->rank;
    s->base.rank = base->rank - below;
    wf_status_t st = wait_init(s, r);
    if (st != WF_OK) {
        if (s->comm && !s->nccl_aborted)
            ncclCommAbort(s->comm);
        handle_free(s);
        return st;
    }
    *ret_comm = &s->base;
    return WF_OK;
#else
    return WF_E_UNAVAILABLE;
#endif
}

static void nc_abort(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    atomic_store(&c->world->aborted, 1); /* owners abort their comms */
}

static void nc_destroy(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    cudaSetDevice(c->device);
    if (c->comm && !c->nccl_aborted) {
        /* Finalize flushes; a peer that never comes must not hang us. */
        bool ok = false;
        if (!world_aborted(c)) {
            ncclResult_t r = ncclCommFinalize(c->comm);
            if (r == ncclSuccess || r == ncclInProgress) {
                wf_nccl_deadline_t d = deadline_ms(c->init_timeout_ms);
                for (unsigned it = 0;; it++) {
                    ncclResult_t ar = ncclSuccess;
                    if (ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess)
                        break;
                    if (ar == ncclSuccess) {
                        ok = true;
                        break;
                    }
                    if (ar != ncclInProgress || wf_nccl_deadline_expired(&d, now_ns()))
                        break;
                    pause_ns(wf_nccl_poll_delay_ns(it));
                }
            }
        }
        if (ok)
            ncclCommDestroy(c->comm);
        else
            ncclCommAbort(c->comm);
    }
    handle_free(c);
}

static const struct wf_comm_iface nccl_iface = {
    .name = "nccl",
    .destroy = nc_destroy,
    .abort = nc_abort,
    .split = nc_split,
    .send = nc_send,
    .recv = nc_recv,
    .group_end = nc_group_end,
    .isend = nc_isend,
    .irecv = nc_irecv,
    .wait = nc_wait,
    .test = nc_test,
    .barrier = nc_barrier,
    .allgatherv = nc_allgatherv,
    .allgather = nc_allgather,
    .alltoallv = nc_alltoallv,
    .alltoall = nc_alltoall,
    .allreduce = nc_allreduce,
    .broadcast = nc_broadcast,
    .scatterv = nc_scatterv,
    .gatherv = nc_gatherv,
};
