/* nccl_lib_standin.c — the stand-in CUDA runtime and NCCL of
 * nccl_lib_standin.h: streams as threads running FIFOs, events as
 * markers in them, NCCL calls as stream operations over mailboxes. One
 * mutex and one condition variable guard everything (test scale). */
#include "support/nccl_lib_standin.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static wf_nclib_counters_t cnt;
static uint64_t next_id;                 /* unique ids and split worlds */
static int n_blocked;                    /* stream operations waiting for a message */
static _Thread_local uint64_t t_waits;   /* this thread's host waits */

/* ---- communicators ---------------------------------------------------- */

typedef struct msg {
    struct msg *next;
    size_t n;
    unsigned char data[];
} msg_t;

enum { MAXR = 64 };

/* One collective split of a world (a round of ncclCommSplit calls). */
typedef struct split_slot {
    struct split_slot *next;
    uint64_t round;               /* the parent's split number */
    int arrived, left;
    int color[MAXR], key[MAXR];
    struct ncclComm *made[MAXR];  /* by parent rank; NULL: NOCOLOR */
    bool done;
} split_slot_t;

typedef struct world {
    struct world *next;           /* every world, for lookups by id */
    uint64_t id;
    int nranks, joined;
    msg_t *head[MAXR * MAXR], *tail[MAXR * MAXR]; /* [src * MAXR + dst] */
    struct ncclComm *comm[MAXR];  /* by rank */
    split_slot_t *splits;
} world_t;

struct ncclComm {
    world_t *w;             /* NULL: made by a split still gathering */
    struct split_slot *split; /* a split of this one still gathering */
    int rank;
    bool pending;           /* next GetAsyncError: ncclInProgress */
    bool gone;              /* aborted or destroyed: freed for the caller */
    bool revoked;           /* ncclCommRevoke: its operations end unwritten */
    ncclResult_t async_err; /* set by wf_nclib_set_async_error */
    int running;            /* stream operations of it running now */
    uint64_t splits;        /* ncclCommSplit calls made */
};

static world_t *worlds;

static world_t *world_new(uint64_t id, int nranks)
{
    world_t *w = calloc(1, sizeof *w);
    if (!w)
        abort();
    w->id = id;
    w->nranks = nranks;
    w->next = worlds;
    worlds = w;
    return w;
}

static struct ncclComm *comm_new(world_t *w, int rank)
{
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        abort();
    c->w = w;
    c->rank = rank;
    c->pending = true;
    if (w)
        w->comm[rank] = c;
    cnt.live_comms++;
    return c;
}

/* A call on a communicator freed by abort / destroy (mu held). */
static bool gone(const struct ncclComm *c)
{
    if (!c || c->gone) {
        cnt.use_after_abort++;
        return true;
    }
    return false;
}

/* ---- streams and events ----------------------------------------------- */

typedef enum { OP_COPY, OP_SET, OP_RECORD, OP_WAITEV, OP_NCCL } kind_t;
typedef enum { P_SEND, P_RECV, P_ALLREDUCE, P_ALLGATHER, P_BCAST } pkind_t;

typedef struct prim {
    pkind_t k;
    const void *sb;
    void *rb;
    size_t bytes;           /* per rank (allreduce: the whole vector) */
    ncclDataType_t dt;      /* allreduce */
    size_t count;           /* allreduce */
    int peer;               /* send / recv peer, broadcast root */
    struct ncclComm *comm;
} prim_t;

typedef struct sop {
    struct sop *next;
    kind_t k;
    void *dst;
    const void *src;
    size_t n;
    int val;
    struct CUevent_st *ev;
    uint64_t ticket;
    prim_t *p;
    int np;
} sop_t;

struct CUstream_st {
    pthread_t thr;
    sop_t *head, *tail;     /* head runs; removed when done */
    bool stop;
    bool blocked;           /* an operation waits for a message */
    unsigned seed;          /* the delays */
};

struct CUevent_st {
    uint64_t rec;           /* records made */
    uint64_t reached;       /* the last record the stream passed */
    uint64_t counted;       /* the record a query counted as a wait */
};

/* Rank `dst` of c's world takes the next message from `src` (mu held);
 * NULL when c is aborted first. */
static msg_t *take(struct CUstream_st *s, struct ncclComm *c, int src)
{
    world_t *w = c->w;
    int q = src * MAXR + c->rank;
    while (!w->head[q]) {
        if (c->gone || c->revoked)
            return NULL;
        s->blocked = true;
        n_blocked++;
        pthread_cond_broadcast(&cv);
        pthread_cond_wait(&cv, &mu);
        n_blocked--;
        s->blocked = false;
    }
    msg_t *m = w->head[q];
    w->head[q] = m->next;
    if (!w->head[q])
        w->tail[q] = NULL;
    return m;
}

static void put(world_t *w, int src, int dst, const void *buf, size_t n)
{
    msg_t *m = malloc(sizeof *m + n + 1);
    if (!m)
        abort();
    m->next = NULL;
    m->n = n;
    if (n)
        memcpy(m->data, buf, n);
    int q = src * MAXR + dst;
    if (w->tail[q])
        w->tail[q]->next = m;
    else
        w->head[q] = m;
    w->tail[q] = m;
    pthread_cond_broadcast(&cv);
}

static size_t esize(ncclDataType_t dt)
{
    return dt == ncclFloat64 ? 8 : dt == ncclFloat32 ? 4 : 1;
}

/* One NCCL stream operation (mu held): every send first (buffered), then
 * every receive; an abort of the communicator ends it without writing. */
static void run_nccl(struct CUstream_st *s, sop_t *o)
{
    struct ncclComm *c = o->p[0].comm;
    if (c->gone || c->revoked)
        return;
    c->running++;
    world_t *w = c->w;
    int me = c->rank, n = w->nranks;
    for (int i = 0; i < o->np; i++) {
        prim_t *p = &o->p[i];
        switch (p->k) {
        case P_SEND:
            put(w, me, p->peer, p->sb, p->bytes);
            break;
        case P_ALLREDUCE:
        case P_ALLGATHER:
            for (int j = 0; j < n; j++)
                if (j != me)
                    put(w, me, j, p->sb, p->bytes);
            break;
        case P_BCAST:
            if (me == p->peer)
                for (int j = 0; j < n; j++)
                    if (j != me)
                        put(w, me, j, p->sb, p->bytes);
            break;
        case P_RECV:
            break;
        }
    }
    for (int i = 0; i < o->np; i++) {
        prim_t *p = &o->p[i];
        if (p->k == P_RECV) {
            msg_t *m = take(s, c, p->peer);
            if (!m)
                goto out;
            memcpy(p->rb, m->data, m->n < p->bytes ? m->n : p->bytes);
            free(m);
        } else if (p->k == P_ALLGATHER) {
            for (int j = 0; j < n; j++) {
                unsigned char *dst = (unsigned char *)p->rb + (size_t)j * p->bytes;
                if (j == me) {
                    if (dst != p->sb)
                        memmove(dst, p->sb, p->bytes);
                    continue;
                }
                msg_t *m = take(s, c, j);
                if (!m)
                    goto out;
                memcpy(dst, m->data, p->bytes);
                free(m);
            }
        } else if (p->k == P_BCAST) {
            if (me == p->peer) {
                if (p->rb != p->sb)
                    memmove(p->rb, p->sb, p->bytes);
                continue;
            }
            msg_t *m = take(s, c, p->peer);
            if (!m)
                goto out;
            memcpy(p->rb, m->data, p->bytes);
            free(m);
        } else if (p->k == P_ALLREDUCE) {
            msg_t *in[MAXR] = {0};
            bool ok = true;
            for (int j = 0; j < n && ok; j++)
                if (j != me)
                    ok = (in[j] = take(s, c, j)) != NULL;
            if (ok) {
                /* rank order, as comm_host: every rank gets the same bits */
                for (size_t k = 0; k < p->count; k++) {
                    if (p->dt == ncclFloat64) {
                        double acc = 0;
                        for (int j = 0; j < n; j++)
                            acc += ((const double *)(j == me ? p->sb : in[j]->data))[k];
                        ((double *)p->rb)[k] = acc;
                    } else {
                        float acc = 0;
                        for (int j = 0; j < n; j++)
                            acc += ((const float *)(j == me ? p->sb : in[j]->data))[k];
                        ((float *)p->rb)[k] = acc;
                    }
                }
            }
            for (int j = 0; j < n; j++)
                free(in[j]);
            if (!ok)
                goto out;
        }
    }
out:
    c->running--;
    pthread_cond_broadcast(&cv);
}

static void run_op(struct CUstream_st *s, sop_t *o)
{
    switch (o->k) {
    case OP_COPY:
        if (o->n && o->dst != o->src)
            memmove(o->dst, o->src, o->n);
        break;
    case OP_SET:
        memset(o->dst, o->val, o->n);
        break;
    case OP_RECORD:
        if (o->ev->reached < o->ticket)
            o->ev->reached = o->ticket;
        break;
    case OP_WAITEV:
        while (o->ev->reached < o->ticket)
            pthread_cond_wait(&cv, &mu);
        break;
    case OP_NCCL:
        run_nccl(s, o);
        break;
    }
}

static void *stream_main(void *arg)
{
    struct CUstream_st *s = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        while (!s->head && !s->stop)
            pthread_cond_wait(&cv, &mu);
        if (!s->head)
            break;
        /* the "GPU" lags the host: before each op its thread gives way a
         * random number of times (never sleeps), so the host usually runs
         * ahead and a missing wait shows as a wrong result; no test waits
         * on this, they wait on the stream's events */
        pthread_mutex_unlock(&mu);
        for (int y = rand_r(&s->seed) % 64; y > 0; y--)
            sched_yield();
        pthread_mutex_lock(&mu);
        sop_t *o = s->head;
        run_op(s, o);
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        free(o->p);
        free(o);
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

static struct CUstream_st *legacy;   /* the NULL stream, made on first use */

static struct CUstream_st *stream_make(void)
{
    struct CUstream_st *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->seed = (unsigned)(uintptr_t)s;
    if (pthread_create(&s->thr, NULL, stream_main, s) != 0)
        abort();
    return s;
}

/* mu held */
static struct CUstream_st *stream_of(cudaStream_t s)
{
    if (s)
        return s;
    if (!legacy)
        legacy = stream_make();
    return legacy;
}

/* Append o to s (mu held). */
static void enqueue(cudaStream_t st, sop_t *o)
{
    struct CUstream_st *s = stream_of(st);
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&cv);
}

static sop_t *sop_new(kind_t k)
{
    sop_t *o = calloc(1, sizeof *o);
    if (!o)
        abort();
    o->k = k;
    return o;
}

/* ---- the CUDA runtime ------------------------------------------------- */

cudaError_t cudaSetDevice(int device)
{
    (void)device;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* CUDA's cudaFree first waits for the device's work, which may still
 * write the block; the stand-in keeps the block instead (a few hundred
 * bytes per handle in these tests) rather than wait for every stream. */
cudaError_t cudaFree(void *p)
{
    (void)p;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    (void)flags;
    *s = stream_make();
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    s->stop = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(s->thr, NULL);
    free(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t st)
{
    t_waits++;
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream_of(st);
    while (s->head)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* Events are never freed: a record may still sit in a stream's FIFO when
 * the caller destroys its event, which CUDA allows. */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    (void)e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    sop_t *o = sop_new(OP_RECORD);
    o->ev = e;
    o->ticket = ++e->rec;
    enqueue(s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    pthread_mutex_lock(&mu);
    bool done = e->reached >= e->rec;
    if (!done && e->counted != e->rec) {
        e->counted = e->rec;
        t_waits++;
    }
    pthread_mutex_unlock(&mu);
    return done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    t_waits++;
    pthread_mutex_lock(&mu);
    while (e->reached < e->rec)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
    (void)flags;
    pthread_mutex_lock(&mu);
    sop_t *o = sop_new(OP_WAITEV);
    o->ev = e;
    o->ticket = e->rec;
    enqueue(s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t s)
{
    (void)kind;
    pthread_mutex_lock(&mu);
    sop_t *o = sop_new(OP_COPY);
    o->dst = dst;
    o->src = src;
    o->n = n;
    enqueue(s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    pthread_mutex_lock(&mu);
    sop_t *o = sop_new(OP_SET);
    o->dst = p;
    o->val = v;
    o->n = n;
    enqueue(s, o);
    pthread_mutex_unlock(&mu);
    return cudaSuccess;
}

/* ---- NCCL ----------------------------------------------------------------- */

/* This thread's group call (NCCL's group state is per thread too). */
static _Thread_local struct {
    int depth;
    prim_t *p;
    int np, cap;
    cudaStream_t stream;
} grp;

ncclResult_t ncclGetVersion(int *version)
{
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    pthread_mutex_lock(&mu);
    uint64_t v = ++next_id;
    pthread_mutex_unlock(&mu);
    memset(id->internal, 0, sizeof id->internal);
    memcpy(id->internal, &v, sizeof v);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config)
{
    (void)config;
    if (nranks < 1 || nranks > MAXR || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    uint64_t v;
    memcpy(&v, id.internal, sizeof v);
    pthread_mutex_lock(&mu);
    world_t *w = worlds;
    while (w && w->id != v)
        w = w->next;
    if (!w)
        w = world_new(v, nranks);
    if (w->nranks != nranks || w->comm[rank]) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidArgument;
    }
    *comm = comm_new(w, rank);
    w->joined++;
    pthread_mutex_unlock(&mu);
    return ncclInProgress;   /* non-blocking: ready once every rank came */
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err)
{
    pthread_mutex_lock(&mu);
    if (gone(c)) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    if (c->async_err != ncclSuccess) {
        *err = c->async_err;
    } else if (c->split && !c->split->done) {
        *err = ncclInProgress;      /* a split of it still gathering */
    } else if (!c->w) {
        *err = ncclInProgress;      /* made by a split still gathering */
    } else if (c->pending || c->w->joined < c->w->nranks) {
        c->pending = false;
        *err = ncclInProgress;
    } else {
        *err = ncclSuccess;
    }
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int *count)
{
    pthread_mutex_lock(&mu);
    bool g = gone(c);
    if (!g)
        *count = c->w->nranks;
    pthread_mutex_unlock(&mu);
    return g ? ncclInvalidUsage : ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int *rank)
{
    pthread_mutex_lock(&mu);
    bool g = gone(c);
    if (!g)
        *rank = c->rank;
    pthread_mutex_unlock(&mu);
    return g ? ncclInvalidUsage : ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    pthread_mutex_lock(&mu);
    if (gone(c)) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    c->gone = true;
    cnt.aborts++;
    cnt.live_comms--;
    pthread_cond_broadcast(&cv);
    while (c->running)          /* its kernels end before abort returns */
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c)
{
    pthread_mutex_lock(&mu);
    bool g = gone(c);
    if (!g)
        c->pending = true;
    pthread_mutex_unlock(&mu);
    return g ? ncclInvalidUsage : ncclInProgress;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    pthread_mutex_lock(&mu);
    bool g = gone(c);
    if (!g) {
        c->gone = true;
        cnt.live_comms--;
        pthread_cond_broadcast(&cv);
        while (c->running)
            pthread_cond_wait(&cv, &mu);
    }
    pthread_mutex_unlock(&mu);
    return g ? ncclInvalidUsage : ncclSuccess;
}

/* Non-blocking, as NCCL's with config blocking = 0: returns at once with
 * the new handle (NULL for NCCL_SPLIT_NOCOLOR); the parent and the new
 * handle report ncclInProgress until every rank of the parent came. */
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config)
{
    (void)config;
    pthread_mutex_lock(&mu);
    if (gone(c) || !c->w) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    world_t *w = c->w;
    uint64_t round = ++c->splits;
    split_slot_t *sl = w->splits;
    while (sl && sl->round != round)
        sl = sl->next;
    if (!sl) {
        sl = calloc(1, sizeof *sl);
        if (!sl)
            abort();
        sl->round = round;
        sl->next = w->splits;
        w->splits = sl;
    }
    sl->color[c->rank] = color;
    sl->key[c->rank] = key;
    sl->made[c->rank] = color >= 0 ? comm_new(NULL, -1) : NULL;
    *newcomm = sl->made[c->rank];
    c->split = sl;
    if (++sl->arrived == w->nranks) {
        /* the last one in forms every group: ranks by (key, parent rank) */
        bool placed[MAXR] = {false};
        for (int r = 0; r < w->nranks; r++) {
            if (sl->color[r] < 0 || placed[r])
                continue;
            int members[MAXR], m = 0;
            for (int q = 0; q < w->nranks; q++)
                if (sl->color[q] == sl->color[r])
                    members[m++] = q;
            for (int a = 1; a < m; a++)
                for (int b = a; b > 0 && sl->key[members[b]] < sl->key[members[b - 1]]; b--) {
                    int t = members[b];
                    members[b] = members[b - 1];
                    members[b - 1] = t;
                }
            world_t *nw = world_new(++next_id, m);
            nw->joined = m;
            for (int i = 0; i < m; i++) {
                struct ncclComm *x = sl->made[members[i]];
                x->w = nw;
                x->rank = i;
                nw->comm[i] = x;
                placed[members[i]] = true;
            }
        }
        sl->done = true;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

/* Stops what runs on c and keeps it for shrink / destroy (NCCL 2.28):
 * ncclInProgress once, then quiescent. */
ncclResult_t ncclCommRevoke(ncclComm_t c, int revokeFlags)
{
    pthread_mutex_lock(&mu);
    if (gone(c) || revokeFlags != NCCL_REVOKE_DEFAULT) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    c->revoked = true;
    c->pending = true;
    cnt.revokes++;
    pthread_cond_broadcast(&cv);
    while (c->running)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return ncclSuccess;
}

/* Collective over the survivors (an excluded rank does not call it): a
 * split whose excluded ranks have no color, formed once every survivor
 * came; survivors keep their order. */
ncclResult_t ncclCommShrink(ncclComm_t c, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
    (void)config, (void)shrinkFlags;
    pthread_mutex_lock(&mu);
    if (gone(c) || !c->w) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    world_t *w = c->w;
    uint64_t round = (1ull << 32) + ++c->splits;   /* apart from split rounds */
    split_slot_t *sl = w->splits;
    while (sl && sl->round != round)
        sl = sl->next;
    if (!sl) {
        sl = calloc(1, sizeof *sl);
        if (!sl)
            abort();
        sl->round = round;
        sl->next = w->splits;
        w->splits = sl;
        for (int r = 0; r < w->nranks; r++)
            sl->color[r] = 0;
        for (int i = 0; i < excludeRanksCount; i++)
            sl->color[excludeRanksList[i]] = -1;
    }
    sl->made[c->rank] = comm_new(NULL, -1);
    *newcomm = sl->made[c->rank];
    c->split = sl;
    if (++sl->arrived == w->nranks - excludeRanksCount) {
        world_t *nw = world_new(++next_id, sl->arrived);
        nw->joined = sl->arrived;
        for (int r = 0, i = 0; r < w->nranks; r++)
            if (sl->color[r] == 0) {
                struct ncclComm *x = sl->made[r];
                x->w = nw;
                x->rank = i;
                nw->comm[i++] = x;
            }
        sl->done = true;
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

/* Add one primitive: to the group, or as a stream operation of its own. */
static ncclResult_t prim_add(const prim_t *p, cudaStream_t stream)
{
    pthread_mutex_lock(&mu);
    if (gone(p->comm)) {
        pthread_mutex_unlock(&mu);
        return ncclInvalidUsage;
    }
    if (grp.depth > 0) {
        if (grp.np > 0 && grp.stream != stream) {
            pthread_mutex_unlock(&mu);
            return ncclInvalidUsage;    /* one stream per group here */
        }
        if (grp.np == grp.cap) {
            grp.cap = grp.cap ? 2 * grp.cap : 8;
            grp.p = realloc(grp.p, (size_t)grp.cap * sizeof *grp.p);
            if (!grp.p)
                abort();
        }
        grp.p[grp.np++] = *p;
        grp.stream = stream;
        pthread_mutex_unlock(&mu);
        return ncclSuccess;
    }
    sop_t *o = sop_new(OP_NCCL);
    o->p = malloc(sizeof *o->p);
    if (!o->p)
        abort();
    o->p[0] = *p;
    o->np = 1;
    p->comm->pending = true;
    cnt.nccl_ops++;
    enqueue(stream, o);
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

/* nccl.h declares these two without a prototype ("()"). */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void)
{
    grp.depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
    if (grp.depth == 0)
        return ncclInvalidUsage;
    if (--grp.depth > 0 || grp.np == 0)
        return ncclSuccess;
    pthread_mutex_lock(&mu);
    sop_t *o = sop_new(OP_NCCL);
    o->p = grp.p;
    o->np = grp.np;
    grp.p = NULL;
    grp.np = grp.cap = 0;
    o->p[0].comm->pending = true;
    cnt.nccl_ops++;
    enqueue(grp.stream, o);
    pthread_mutex_unlock(&mu);
    return ncclInProgress;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    prim_t p = {P_SEND, sendbuff, NULL, count * esize(datatype), datatype, count, peer, comm};
    return prim_add(&p, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream)
{
    prim_t p = {P_RECV, NULL, recvbuff, count * esize(datatype), datatype, count, peer, comm};
    return prim_add(&p, stream);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream)
{
    if (op != ncclSum || (datatype != ncclFloat32 && datatype != ncclFloat64))
        return ncclInvalidArgument;
    prim_t p = {P_ALLREDUCE, sendbuff, recvbuff, count * esize(datatype), datatype, count, 0,
                comm};
    return prim_add(&p, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    prim_t p = {P_ALLGATHER, sendbuff, recvbuff, sendcount * esize(datatype), datatype,
                sendcount, 0, comm};
    return prim_add(&p, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream)
{
    prim_t p = {P_BCAST, sendbuff, recvbuff, count * esize(datatype), datatype, count, root,
                comm};
    return prim_add(&p, stream);
}

/* ---- test hooks -------------------------------------------------------------- */

uint64_t wf_nclib_thread_host_waits(void)
{
    return t_waits;
}

void wf_nclib_thread_reset(void)
{
    t_waits = 0;
}

wf_nclib_counters_t wf_nclib_counters(void)
{
    pthread_mutex_lock(&mu);
    wf_nclib_counters_t c = cnt;
    pthread_mutex_unlock(&mu);
    return c;
}

int wf_nclib_set_async_error(int rank, int nccl_error)
{
    int n = 0;
    pthread_mutex_lock(&mu);
    for (world_t *w = worlds; w; w = w->next)
        if (rank < w->nranks && w->comm[rank] && !w->comm[rank]->gone) {
            w->comm[rank]->async_err = (ncclResult_t)nccl_error;
            n++;
        }
    pthread_mutex_unlock(&mu);
    return n;
}

int wf_nclib_stream_busy(void *stream)
{
    pthread_mutex_lock(&mu);
    int busy = stream_of(stream)->head != NULL;
    pthread_mutex_unlock(&mu);
    return busy;
}

void wf_nclib_wait_blocked(void *stream)
{
    pthread_mutex_lock(&mu);
    struct CUstream_st *s = stream_of(stream);
    while (!s->blocked)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

void *wf_nclib_stream_new(void)
{
    cudaStream_t s = NULL;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
}

void wf_nclib_stream_sync(void *stream)
{
    cudaStreamSynchronize((cudaStream_t)stream);
}

void wf_nclib_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

void wf_nclib_wait_any_blocked(void)
{
    pthread_mutex_lock(&mu);
    while (n_blocked == 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}
