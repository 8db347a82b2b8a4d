/* comm_nccl.c — the NCCL backend of comm.h (see comm_nccl.h): handles,
 * non-blocking init / split with timeouts, every operation as grouped
 * NCCL calls enqueued on the worker's stream without a host wait (the
 * uneven collectives and alltoall as the point-to-point plans of
 * p2p_plan.h), host completion where comm.h asks for it (barrier, wait,
 * sync), the abort watchdog, and the pure helpers of comm_nccl.h. Does
 * not log: statuses carry the error.
 *
 * Threads and NCCL. A handle is used by its owner thread (comm.h) and by
 * the watchdog thread, which polls ncclCommGetAsyncError and may call
 * ncclCommAbort / ncclCommRevoke while the owner is anywhere, including
 * blocked in a synchronize of the stream the collectives run on. What
 * NCCL says that relies on (nccl.h 2.28; NCCL user guide, "Status and
 * Utility Methods", https://docs.nvidia.com/deeplearning/nccl/user-guide/
 * docs/nccl4py/communicator/status.html):
 *   - ncclCommAbort "frees resources associated with communicator object
 *     and aborts any operations that might still be running on the
 *     device" (nccl.h): what ends a collective whose peer never comes;
 *   - ncclCommRevoke "stops all in-flight operations and marks
 *     communicator state as ncclInProgress. The state will change to
 *     ncclSuccess when the communicator is quiescent; then, management
 *     operations (destroy, split, shrink) can proceed safely" (nccl.h);
 *   - "Operations with a stream argument return ncclSuccess when posted
 *     but may report errors through [ncclCommGetAsyncError] until
 *     completed. If any NCCL function returns ncclInProgress, users must
 *     query the communicator state until it becomes ncclSuccess before
 *     calling another NCCL function. Before the state becomes
 *     ncclSuccess, do not issue CUDA kernels on streams used by NCCL. If
 *     an error occurs, destroy the communicator with abort()" (user
 *     guide): settle() polls before a call returns, so the caller's next
 *     kernels come after, and an error aborts.
 * This file does not rely on NCCL tolerating two threads inside calls on
 * one communicator at once: every NCCL call on a handle's communicator
 * (an enqueue from ncclGroupStart to ncclGroupEnd, an
 * ncclCommGetAsyncError poll, split, shrink, abort, revoke) is made
 * holding the handle's mutex `mu`, and none of them waits (non-blocking
 * mode, config.blocking = 0); the watchdog only try-locks `mu` and checks
 * a handle whose owner is inside such a call at its next round, so no
 * owner can stall it. After ncclCommAbort the communicator is freed:
 * `nccl_aborted` is set under `mu` and every call checks it under `mu`
 * before it touches `comm`. Waiting for the stream (cudaEventQuery, a
 * backend's cudaStreamSynchronize) is not an NCCL call and holds no lock:
 * an abort or revoke ends the NCCL kernels, so that wait returns. */
#include "comm_nccl.h"
#include "comm_impl.h"
#include "comm_zmq.h"
#include "p2p_plan.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(sizeof(ncclUniqueId) == WF_NCCL_ID_BYTES, "ncclUniqueId size");
_Static_assert(NCCL_SPLIT_NOCOLOR == WF_COMM_SPLIT_NOCOLOR, "no-color value");

enum { REQS = 64 }; /* isend / irecv in flight per handle */

/* ncclCommRevoke came with NCCL 2.28 (NCCL_VERSION_CODE 22800). */
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= 22800
#define WF_HAVE_REVOKE 1
#else
#define WF_HAVE_REVOKE 0
#endif

/* Shared by every handle of one communicator's world in this process:
 * the ranks that init it with the same unique id (one per device, in
 * their worker threads) and every handle split from theirs, so that
 * wf_comm_abort on any of them reaches all (comm.h). Refcounted. */
typedef struct nccl_world {
    atomic_int aborted; /* raised by wf_comm_abort on any handle */
    atomic_int refs;    /* handles alive (changed under wd.mu) */
    wf_comm_zmq_local_t *domain; /* the cluster's abort domain (a reference), or NULL */
    bool keyed;         /* found by id: in wd.worlds */
    unsigned char id[WF_NCCL_ID_BYTES]; /* the unique id of its init (keyed) */
    struct nccl_world *next; /* wd.worlds */
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
    cudaEvent_t ev_last;      /* recorded after each stream-ordered call (watchdog: busy?) */
    _Atomic uint64_t last_enq_ns; /* CLOCK_MONOTONIC of that record; 0: none yet */
    pthread_mutex_t mu;       /* guards every NCCL call on comm (owner vs watchdog) */
    float *scratch;           /* device: barrier element */
    uint32_t init_timeout_ms; /* init / split / finalize */
    uint32_t op_timeout_ms;   /* each operation, 0 = none */
    atomic_bool nccl_aborted; /* ncclCommAbort done (set under mu) */
    atomic_bool revoked;      /* ncclCommRevoke done (set under mu): kept for shrink */
    atomic_bool cut_short;    /* a call's enqueue was given up (an abort while
                                 NCCL was still enqueueing): what it queued
                                 may sit on the stream, unseen by ev_last */
    bool watched;             /* in the watchdog's list */
    struct nccl_comm *wd_prev, *wd_next; /* the watchdog's list (under wd.mu) */
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

/* ncclCommAbort this handle's communicator, once. */
static void abort_comm(nccl_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->nccl_aborted) && c->comm) {
        ncclCommAbort(c->comm);
        atomic_store(&c->nccl_aborted, true);
    }
    pthread_mutex_unlock(&c->mu);
}

static void wd_kick(void);

/* Abort this handle's communicator and mark the world (and the cluster's
 * domain: the other ranks of this process and the cluster learn of it,
 * as from a comm_zmq failure); the watchdog stops the world's other
 * handles at once. */
static void abort_local(nccl_comm_t *c)
{
    atomic_store(&c->world->aborted, 1);
    wd_kick();
    if (c->world->domain)
        wf_comm_zmq_local_abort(c->world->domain);
    abort_comm(c);
}

/* Take c->mu to make NCCL calls on c->comm; false (not locked) once the
 * communicator was aborted. */
static bool comm_lock(nccl_comm_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (!atomic_load(&c->nccl_aborted) && c->comm)
        return true;
    pthread_mutex_unlock(&c->mu);
    return false;
}

/* NCCL's asynchronous state of c: WF_OK (*ret_busy: a non-blocking call
 * still in progress), or the error to fail with. */
static wf_status_t comm_poll(nccl_comm_t *c, bool *ret_busy)
{
    *ret_busy = false;
    if (!comm_lock(c))
        return WF_E_ABORTED;
    ncclResult_t ar = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &ar);
    pthread_mutex_unlock(&c->mu);
    if (r != ncclSuccess)
        return WF_E_INTERNAL;
    if (ar == ncclInProgress)
        *ret_busy = true;
    else if (ar != ncclSuccess)
        return wf_nccl_status(ar);
    return WF_OK;
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
    if (st == WF_E_ABORTED && c->world->domain && !atomic_load(&c->nccl_aborted)) {
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
        bool busy;
        wf_status_t st = comm_poll(c, &busy);
        if (st != WF_OK)
            return fail(c, st);
        if (!busy)
            return WF_OK;
        if (wf_nccl_deadline_expired(d, now_ns()))
            return fail(c, WF_E_ABORTED);
        pause_ns(wf_nccl_poll_delay_ns(it));
    }
}

/* A stop seen after an event completed: the watchdog's abort or revoke
 * ends the NCCL kernels, so the event completes without the operation
 * having done its work. */
static bool stopped(const nccl_comm_t *c)
{
    return atomic_load(&c->nccl_aborted) || atomic_load(&c->revoked) || world_aborted(c);
}

/* Wait for event ev, watching NCCL's asynchronous errors, the world's
 * abort flag and the operation timeout. */
static wf_status_t wait_event(nccl_comm_t *c, cudaEvent_t ev)
{
    wf_nccl_deadline_t d = deadline_ms(c->op_timeout_ms);
    for (unsigned it = 0;; it++) {
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return stopped(c) ? fail(c, WF_E_ABORTED) : WF_OK;
        if (e != cudaErrorNotReady) {
            (void)cudaGetLastError();
            return fail(c, WF_E_INTERNAL);
        }
        if (world_aborted(c))
            return fail(c, WF_E_ABORTED);
        bool busy;
        wf_status_t st = comm_poll(c, &busy);
        if (st != WF_OK)
            return fail(c, st);
        if (wf_nccl_deadline_expired(&d, now_ns()))
            return fail(c, WF_E_ABORTED);
        pause_ns(wf_nccl_poll_delay_ns(it));
    }
}

/* ---- the abort watchdog ------------------------------------------------------------ */

/* One thread per process, as NCCL's communicators and PyTorch's
 * ProcessGroupNCCL watchdog are per process: it runs while any handle of
 * this backend lives (started by the first, joined by the last) and every
 * WF_NCCL_WATCHDOG_MS checks each live handle; wf_comm_abort wakes it at
 * once. Its state is private to this file, guarded by wd.mu, and holds
 * nothing but the list of handles: the one process-wide object here,
 * because a stream-ordered collective that never completes blocks its
 * owner thread in a stream synchronize, where only another thread can
 * reach it. Lock order: wd.life, then wd.mu, then a handle's mu (which
 * the watchdog only try-locks). */
static struct {
    pthread_mutex_t life;   /* serializes start / stop of the thread */
    pthread_mutex_t mu;     /* guards the list, n, stop */
    pthread_cond_t cv;      /* wakes the thread (stop, abort) */
    pthread_once_t once;    /* cv on CLOCK_MONOTONIC */
    nccl_comm_t *head;      /* live, initialized handles */
    nccl_world_t *worlds;   /* worlds made by init, by unique id */
    int n;                  /* handles in the list */
    bool running;           /* thread started (under life) */
    bool stop;              /* asks the thread to end */
    atomic_int kick;        /* an abort was raised: scan again at once */
    atomic_uint_fast64_t stops; /* communicators the watchdog aborted or revoked */
    pthread_t thread;
} wd = {
    .life = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .once = PTHREAD_ONCE_INIT,
};

static void wd_init_cv(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&wd.cv, &a);
    pthread_condattr_destroy(&a);
}

/* Whether c's stream still runs work a stream-ordered call queued. */
static bool stream_busy(nccl_comm_t *c)
{
    if (atomic_load(&c->last_enq_ns) == 0)
        return false;
    cudaError_t e = cudaEventQuery(c->ev_last);
    if (e != cudaSuccess && e != cudaErrorNotReady)
        (void)cudaGetLastError();
    return e == cudaErrorNotReady;
}

/* Whether the NCCL in use has ncclCommRevoke (built and running >= 2.28). */
static bool has_revoke(void)
{
    return WF_HAVE_REVOKE && wf_comm_nccl_version() >= 22800;
}

/* ncclCommRevoke of c's communicator (c->mu held; has_revoke()). */
static ncclResult_t revoke(nccl_comm_t *c)
{
#if WF_HAVE_REVOKE
    return ncclCommRevoke(c->comm, NCCL_REVOKE_DEFAULT);
#else
    (void)c;
    return ncclInvalidUsage;
#endif
}

/* One check of c (wd.mu held): an asynchronous NCCL error, an abort of the
 * world or of the cluster's domain (a lost node, a failed rank, a job's
 * cancel that aborted), or a stream-ordered call still running
 * op_timeout_ms after the last one was queued. The communicator is then
 * aborted (every later call returns WF_E_ABORTED, the stream's NCCL
 * kernels end so a synchronize returns). A world of the cluster's domain
 * stopping with WF_E_ABORTED is revoked instead, as fail() does, so the
 * survivors can shrink it: only marked when nothing runs on its stream;
 * with work in flight, or maybe in flight (a call gave up its enqueue
 * when the abort came: cut_short), (a collective waiting for a lost peer would hold
 * the worker's synchronize forever) ncclCommRevoke-d, which "stops all
 * in-flight operations" and leaves the communicator to destroy, split or
 * shrink once quiescent (nccl.h, 2.28), or ncclCommAbort-ed where NCCL
 * has no revoke (a shrink of it then fails with WF_E_ABORTED). */
static void wd_check(nccl_comm_t *c)
{
    if (atomic_load(&c->nccl_aborted))
        return;
    /* The owner holds mu only inside a non-blocking NCCL call; a busy mu
     * is checked again next time, so no owner can stall the watchdog. */
    if (pthread_mutex_trylock(&c->mu) != 0)
        return;
    if (atomic_load(&c->nccl_aborted) || !c->comm) {
        pthread_mutex_unlock(&c->mu);
        return;
    }
    (void)cudaSetDevice(c->device);
    wf_status_t why = WF_OK;
    ncclResult_t ar = ncclSuccess;
    if (world_aborted(c)) {
        why = WF_E_ABORTED;
    } else if (ncclCommGetAsyncError(c->comm, &ar) != ncclSuccess) {
        why = WF_E_INTERNAL;
    } else if (ar != ncclSuccess && ar != ncclInProgress) {
        why = wf_nccl_status(ar);
    } else if (c->op_timeout_ms) {
        uint64_t last = atomic_load(&c->last_enq_ns);
        uint64_t now = now_ns();
        if (last && now - last >= (uint64_t)c->op_timeout_ms * 1000000u &&
            stream_busy(c) && atomic_load(&c->last_enq_ns) == last)
            why = WF_E_ABORTED;
    }
    if (why != WF_OK) {
        atomic_store(&c->world->aborted, 1);
        if (c->world->domain && !wf_comm_zmq_local_aborted(c->world->domain))
            wf_comm_zmq_local_abort(c->world->domain);
        /* each stop is counted before it is made: the owner blocked on
         * the stream may wake (and read the count) as soon as it is */
        bool keep = why == WF_E_ABORTED && c->world->domain;
        if (!keep) {
            atomic_fetch_add(&wd.stops, 1);
            ncclCommAbort(c->comm);
            atomic_store(&c->nccl_aborted, true);
        } else if (!atomic_load(&c->revoked) &&
                   (stream_busy(c) || atomic_load(&c->cut_short))) {
            atomic_fetch_add(&wd.stops, 1);
            ncclResult_t r = has_revoke() ? revoke(c) : ncclInvalidUsage;
            if (r == ncclSuccess || r == ncclInProgress) {
                atomic_store(&c->revoked, true);
            } else {
                ncclCommAbort(c->comm);
                atomic_store(&c->nccl_aborted, true);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
}

static void *wd_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wd.mu);
    while (!wd.stop) {
        atomic_store(&wd.kick, 0);
        for (nccl_comm_t *c = wd.head; c; c = c->wd_next)
            wd_check(c);
        if (wd.stop || atomic_load(&wd.kick))
            continue;
        uint64_t t = now_ns() + (uint64_t)WF_NCCL_WATCHDOG_MS * 1000000u;
        struct timespec ts = {(time_t)(t / 1000000000u), (long)(t % 1000000000u)};
        pthread_cond_timedwait(&wd.cv, &wd.mu, &ts);
    }
    pthread_mutex_unlock(&wd.mu);
    return NULL;
}

/* Watch c from now on (an initialized communicator); starts the thread
 * with the first handle. WF_E_INTERNAL if it cannot start. */
static wf_status_t wd_register(nccl_comm_t *c)
{
    pthread_once(&wd.once, wd_init_cv);
    wf_status_t st = WF_OK;
    pthread_mutex_lock(&wd.life);
    if (!wd.running) {
        wd.stop = false;
        if (pthread_create(&wd.thread, NULL, wd_main, NULL) != 0)
            st = WF_E_INTERNAL;
        else
            wd.running = true;
    }
    if (st == WF_OK) {
        pthread_mutex_lock(&wd.mu);
        c->wd_prev = NULL;
        c->wd_next = wd.head;
        if (wd.head)
            wd.head->wd_prev = c;
        wd.head = c;
        wd.n++;
        c->watched = true;
        pthread_mutex_unlock(&wd.mu);
    }
    pthread_mutex_unlock(&wd.life);
    return st;
}

/* Stop watching c (the watchdog touches it no more once this returns);
 * the last handle stops the thread. Accepts an unwatched handle. */
static void wd_unregister(nccl_comm_t *c)
{
    if (!c->watched)
        return;
    pthread_mutex_lock(&wd.life);
    pthread_mutex_lock(&wd.mu);
    if (c->wd_prev)
        c->wd_prev->wd_next = c->wd_next;
    else
        wd.head = c->wd_next;
    if (c->wd_next)
        c->wd_next->wd_prev = c->wd_prev;
    c->watched = false;
    bool last = --wd.n == 0;
    if (last) {
        wd.stop = true;
        pthread_cond_signal(&wd.cv);
    }
    pthread_mutex_unlock(&wd.mu);
    if (last) {
        pthread_join(wd.thread, NULL);
        wd.running = false;
    }
    pthread_mutex_unlock(&wd.life);
}

/* Wake the watchdog now (an abort was raised). Takes no lock, so it is
 * safe from any thread and never waits for a scan: a wake-up lost in the
 * race with the thread going to sleep costs at most one interval. */
static void wd_kick(void)
{
    atomic_store(&wd.kick, 1);
    pthread_once(&wd.once, wd_init_cv);
    pthread_cond_signal(&wd.cv);
}

uint64_t wf_comm_nccl_watchdog_stops(void)
{
    return atomic_load(&wd.stops);
}

/* Start of every call: refuse after an abort, select the device. */
static wf_status_t enter(nccl_comm_t *c)
{
    if (world_aborted(c) || atomic_load(&c->nccl_aborted))
        return fail(c, WF_E_ABORTED);
    if (cudaSetDevice(c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(c, WF_E_INTERNAL);
    }
    return WF_OK;
}

/* End of a group of NCCL calls issued on a stream: settle the
 * non-blocking group. ncclGroupEnd of a non-blocking communicator may
 * return ncclInProgress while NCCL finishes enqueueing in the background
 * (connection setup on a first use); ncclCommGetAsyncError says when it
 * is done. That is a wait for the enqueue, not for the stream: the
 * operation itself still runs on the GPU after this returns. */
static wf_status_t settle(nccl_comm_t *c, ncclResult_t r)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return fail(c, wf_nccl_status(r));
    if (r == ncclSuccess)
        return WF_OK;
    wf_nccl_deadline_t d = deadline_ms(c->op_timeout_ms);
    return wait_nccl_ready(c, &d);
}

/* A stream-ordered call was enqueued on c->stream (the group ended with
 * r): settle it and mark the stream for the watchdog's busy / timeout
 * check. No host wait for the stream. */
static wf_status_t ordered(nccl_comm_t *c, ncclResult_t r)
{
    wf_status_t st = settle(c, r);
    if (st != WF_OK) {
        /* the watchdog must still stop what may be stuck on the stream */
        atomic_store(&c->cut_short, true);
        return st;
    }
    if (cudaEventRecord(c->ev_last, c->stream) != cudaSuccess) {
        (void)cudaGetLastError();
        return fail(c, WF_E_INTERNAL);
    }
    atomic_store(&c->last_enq_ns, now_ns());
    return WF_OK;
}

/* Host completion: everything queued on c->stream so far (the call just
 * enqueued with r, when `enqueued`) is done, watched for aborts. */
static wf_status_t complete(nccl_comm_t *c, ncclResult_t r, bool enqueued)
{
    wf_status_t st = enqueued ? ordered(c, r) : WF_OK;
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

/* Enqueue a plan (grouped p2p + local copy) on the main stream.
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
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
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
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r != ncclSuccess ? r : r2);
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
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclGroupStart();
    for (int i = 0; i < REQS && r == ncclSuccess; i++)
        if (c->reqs[i].used && !c->reqs[i].issued)
            r = post(c, &c->reqs[i].op, c->side);
    ncclResult_t r2 = ncclGroupEnd();
    pthread_mutex_unlock(&c->mu);
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
        bool busy;
        st = comm_poll(c, &busy);
        if (st == WF_OK) {
            *ret_done = 0;
            return WF_OK;
        }
        st = fail(c, st);
    } else if (e != cudaSuccess) {
        (void)cudaGetLastError();
        st = fail(c, WF_E_INTERNAL);
    } else if (stopped(c)) {
        st = fail(c, WF_E_ABORTED);
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
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = post(c, &o, c->stream);
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r);
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
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; i < n && r == ncclSuccess; i++)
        r = post(c, &c->group[i], c->stream);
    ncclResult_t r2 = ncclGroupEnd();
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r != ncclSuccess ? r : r2);
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
    /* host completion (comm.h): the one collective that waits */
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclAllReduce(c->scratch, c->scratch, 1, ncclFloat32, ncclSum,
                                   c->comm, c->stream);
    pthread_mutex_unlock(&c->mu);
    return complete(c, r, true);
}

/* wf_comm_sync: post what isend / irecv left pending, then wait for the
 * stream up to here. */
static wf_status_t nc_sync(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK)
        return st;
    return complete(c, ncclSuccess, false);
}

static wf_status_t nc_allgather(wf_comm_t *base, const void *sendbuf, void *recvbuf,
                                size_t bytes)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || bytes == 0)
        return st;
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclAllGather(sendbuf, recvbuf, bytes, ncclChar, c->comm, c->stream);
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r);
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
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclAllReduce(sendbuf, recvbuf, count,
                                   dtype == WF_COMM_F32 ? ncclFloat32 : ncclFloat64,
                                   ncclSum, c->comm, c->stream);
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r);
}

static wf_status_t nc_broadcast(wf_comm_t *base, void *buf, size_t bytes, int root)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wf_status_t st = coll_enter(c);
    if (st != WF_OK || bytes == 0)
        return st;
    if (!comm_lock(c))
        return fail(c, WF_E_ABORTED);
    ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclChar, root, c->comm, c->stream);
    pthread_mutex_unlock(&c->mu);
    return ordered(c, r);
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

/* A reference to the world of unique id `id` in this process (NULL: a
 * world of its own), made on the first call; NULL when out of memory. */
static nccl_world_t *world_ref(nccl_world_t *world, const wf_nccl_id_t *id,
                               wf_comm_zmq_local_t *domain)
{
    pthread_mutex_lock(&wd.mu);
    if (!world && id)
        for (nccl_world_t *w = wd.worlds; w && !world; w = w->next)
            if (memcmp(w->id, id->bytes, sizeof w->id) == 0)
                world = w;
    if (!world && (world = calloc(1, sizeof *world)) != NULL) {
        atomic_init(&world->aborted, 0);
        atomic_init(&world->refs, 0);
        world->domain = domain ? wf_comm_zmq_local_ref(domain) : NULL;
        if (id) {
            world->keyed = true;
            memcpy(world->id, id->bytes, sizeof world->id);
            world->next = wd.worlds;
            wd.worlds = world;
        }
    }
    if (world)
        atomic_fetch_add(&world->refs, 1);
    pthread_mutex_unlock(&wd.mu);
    return world;
}

static void world_unref(nccl_world_t *world)
{
    pthread_mutex_lock(&wd.mu);
    bool last = atomic_fetch_sub(&world->refs, 1) == 1;
    if (last && world->keyed)
        for (nccl_world_t **p = &wd.worlds; *p; p = &(*p)->next)
            if (*p == world) {
                *p = world->next;
                break;
            }
    pthread_mutex_unlock(&wd.mu);
    if (last) {
        wf_comm_zmq_local_unref(&world->domain);
        free(world);
    }
}

/* Everything of a handle but the communicator; NULL on failure. world:
 * the parent's (split), else the world of id (init) or a new one. */
static nccl_comm_t *handle_new(int device, cudaStream_t stream, uint32_t init_ms,
                               uint32_t op_ms, nccl_world_t *world, const wf_nccl_id_t *id,
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
    pthread_mutex_init(&c->mu, NULL);
    atomic_init(&c->nccl_aborted, false);
    atomic_init(&c->revoked, false);
    atomic_init(&c->last_enq_ns, 0);
    if (cudaSetDevice(device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_main, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_done, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->ev_last, cudaEventDisableTiming) != cudaSuccess ||
        cudaMalloc((void **)&c->scratch, 256) != cudaSuccess ||
        cudaMemsetAsync(c->scratch, 0, 256, stream) != cudaSuccess)
        goto bad;
    for (int i = 0; i < REQS; i++)
        if (cudaEventCreateWithFlags(&c->reqs[i].done, cudaEventDisableTiming) != cudaSuccess)
            goto bad;
    if (!(c->world = world_ref(world, id, domain)))
        goto bad;
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
    if (c->ev_last)
        cudaEventDestroy(c->ev_last);
    if (c->ev_main)
        cudaEventDestroy(c->ev_main);
    if (c->side)
        cudaStreamDestroy(c->side);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return NULL;
}

/* Free a handle (the communicator already gone or aborted). */
static void handle_free(nccl_comm_t *c)
{
    wd_unregister(c);
    cudaSetDevice(c->device);
    for (int i = 0; i < REQS; i++)
        if (c->reqs[i].done)
            cudaEventDestroy(c->reqs[i].done);
    cudaFree(c->scratch);
    cudaEventDestroy(c->ev_done);
    cudaEventDestroy(c->ev_last);
    cudaEventDestroy(c->ev_main);
    cudaStreamDestroy(c->side);
    (void)cudaGetLastError();
    pthread_mutex_destroy(&c->mu);
    world_unref(c->world);
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
                                opts->init_timeout_ms, opts->op_timeout_ms, NULL, id,
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
    if (st == WF_OK)
        st = wd_register(c);
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
                                c->world, NULL, NULL);
    if (!s)
        return fail(c, WF_E_NO_MEMORY); /* the peers wait in the split: abort them */
    ncclConfig_t cfg = make_config();
    if (!comm_lock(c)) {
        handle_free(s);
        return fail(c, WF_E_ABORTED);
    }
    ncclResult_t r = ncclCommSplit(c->comm, color, key, &s->comm, &cfg);
    pthread_mutex_unlock(&c->mu);
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
    if (wd_register(s) != WF_OK) {
        ncclCommAbort(s->comm);
        handle_free(s);
        return fail(c, WF_E_INTERNAL);
    }
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
    /* a new world (own abort flag: the old one may be aborted already),
     * shared by this process's survivors: keyed by the old world's key
     * and the ranks dropped, which they all pass alike */
    wf_nccl_id_t key;
    memcpy(key.bytes, c->world->id, sizeof key.bytes);
    uint64_t h = 0xcbf29ce484222325u;
    for (int i = 0; i < n; i++)
        for (size_t b = 0; b < sizeof key.bytes; b++) {
            h = (h ^ key.bytes[b] ^ (unsigned)exclude[i]) * 0x100000001b3u;
            key.bytes[b] = (unsigned char)(h >> 56);
        }
    nccl_comm_t *s = handle_new(c->device, c->stream,
                                opts->init_timeout_ms ? opts->init_timeout_ms
                                                      : c->init_timeout_ms,
                                opts->op_timeout_ms, NULL, &key, opts->abort_domain);
    if (!s)
        return WF_E_NO_MEMORY;
    ncclConfig_t cfg = make_config();
    int *ex = (int *)exclude;   /* NCCL's prototype is not const-correct */
    /* a revoked communicator shrinks once quiescent (ncclCommGetAsyncError
     * leaves ncclInProgress) */
    wf_nccl_deadline_t d = deadline_ms(s->init_timeout_ms);
    for (unsigned it = 0; atomic_load(&c->revoked); it++) {
        bool busy;
        wf_status_t qs = comm_poll(c, &busy);
        if (qs != WF_OK || (busy && wf_nccl_deadline_expired(&d, now_ns()))) {
            handle_free(s);
            return WF_E_ABORTED;
        }
        if (!busy)
            break;
        pause_ns(wf_nccl_poll_delay_ns(it));
    }
    if (!comm_lock(c)) {        /* the watchdog aborted it meanwhile */
        handle_free(s);
        return WF_E_ABORTED;
    }
    ncclResult_t r = ncclCommShrink(c->comm, ex, n, &s->comm, &cfg, NCCL_SHRINK_ABORT);
    pthread_mutex_unlock(&c->mu);
    s->base.size = base->size - n;
    int below = 0;
    for (int i = 0; i < n; i++)
        below += exclude[i] < base->rank;
    s->base.rank = base->rank - below;
    wf_status_t st = wait_init(s, r);
    if (st == WF_OK)
        st = wd_register(s);
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
    atomic_store(&c->world->aborted, 1); /* the watchdog aborts the comms */
    wd_kick();
}

static void nc_destroy(wf_comm_t *base)
{
    nccl_comm_t *c = (nccl_comm_t *)base;
    wd_unregister(c);   /* from here on only this thread touches c */
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
    .sync = nc_sync,
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
