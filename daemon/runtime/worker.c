/* worker.c — the device thread (see worker.h). */
#include "worker.h"

#include "comm/comm_host.h"
#include "comm/comm_nccl.h"
#include "comm/comm_nccl_boot.h"
#include "comm/comm_staged.h"
#include "comm/comm_zmq.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void drop_comms(wf_worker_t *w)
{
    for (int i = 0; i < WF_MESH_NGROUPS; i++)
        wf_comm_destroy(&w->group[i]);
    wf_comm_destroy(&w->world);
}

/* The test hook (wf_worker_set_fault): is this task's job listed? */
static bool fault_hit(const wf_worker_t *w, const wf_djob_t *job)
{
    if (job->kind == WF_DJOB_REGROUP)
        return false;
    for (uint32_t i = 0; i < w->n_fault; i++)
        if (w->fault_seq[i] == job->seq)
            return true;
    return false;
}

/* The test hook (wf_worker_set_hold): wait for the test's byte. */
static void hold_wait(wf_worker_t *w, const wf_djob_t *job, int rank)
{
    if (w->hold_fd < 0 || job->kind == WF_DJOB_REGROUP ||
        atomic_load(w->hold_open))
        return;
    wf_log(w->log, WF_LOG_INFO, "%s: job %llu (seq %llu) rank %d held "
           "(WEFT_TEST_HOLD_JOBS, test only)", w->name,
           (unsigned long long)job->req.id, (unsigned long long)job->seq, rank);
    char c = 0;
    ssize_t n;
    do
        n = read(w->hold_fd, &c, 1);
    while (n < 0 && errno == EINTR);
    if (n != 1 || c == 'a')
        atomic_store(w->hold_open, true);
}

/* ---- denoising sessions' states ---------------------------------------------------- */

static void session_free(wf_worker_t *w, wf_worker_session_t *s)
{
    if (s->block) {
        if (w->ops->mem_free)
            w->ops->mem_free(w->ctx, s->block);
        else
            free(s->block);
    }
    memset(s, 0, sizeof *s);
}

/* Every state (a new mesh, or the end). */
static void sessions_clear(wf_worker_t *w)
{
    if (w->ops->synchronize && w->ctx)
        (void)w->ops->synchronize(w->ctx);
    for (int i = 0; i < WF_WORKER_SESSIONS; i++)
        session_free(w, &w->sessions[i]);
}

/* The drops the main thread posted (called without w->mu held). */
static void sessions_drop(wf_worker_t *w)
{
    pthread_mutex_lock(&w->mu);
    uint32_t n = w->n_drops;
    uint64_t *d = w->drops;
    w->drops = NULL;
    w->n_drops = w->cap_drops = 0;
    pthread_mutex_unlock(&w->mu);
    if (n && w->ops->synchronize)
        (void)w->ops->synchronize(w->ctx);
    for (uint32_t k = 0; k < n; k++)
        for (int i = 0; i < WF_WORKER_SESSIONS; i++)
            if (w->sessions[i].sid == d[k])
                session_free(w, &w->sessions[i]);
    free(d);
}

void wf_worker_drop_session(wf_worker_t *w, uint64_t sid)
{
    pthread_mutex_lock(&w->mu);
    if (w->n_drops == w->cap_drops) {
        uint32_t cap = w->cap_drops ? 2 * w->cap_drops : 16;
        uint64_t *d = realloc(w->drops, cap * sizeof *d);
        if (!d) {
            /* keep what is queued; this state goes with the next mesh or
             * at the end (the slot stays taken meanwhile) */
            pthread_mutex_unlock(&w->mu);
            wf_log(w->log, WF_LOG_WARNING, "%s: out of memory dropping session %llu",
                   w->name, (unsigned long long)sid);
            return;
        }
        w->drops = d;
        w->cap_drops = cap;
    }
    w->drops[w->n_drops++] = sid;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

wf_fbc_t *wf_worker_session(wf_worker_t *w, uint64_t sid, size_t floats)
{
    wf_worker_session_t *s = NULL, *free_slot = NULL;
    for (int i = 0; i < WF_WORKER_SESSIONS; i++) {
        if (w->sessions[i].sid == sid)
            s = &w->sessions[i];
        else if (!w->sessions[i].sid && !free_slot)
            free_slot = &w->sessions[i];
    }
    if (s && s->floats != floats) {
        if (w->ops->synchronize)
            (void)w->ops->synchronize(w->ctx);
        session_free(w, s);
        free_slot = s;
        s = NULL;
    }
    if (s)
        return &s->fbc;
    size_t bytes = wf_fbc_bytes(floats);
    if (!free_slot || floats == 0 || bytes == SIZE_MAX)
        return NULL;
    void *block = NULL;
    if (w->ops->mem_alloc) {
        if (w->ops->mem_alloc(w->ctx, bytes, &block) != WF_OK)
            return NULL;
    } else if (!(block = aligned_alloc(256, bytes))) {
        return NULL;
    }
    free_slot->sid = sid;
    free_slot->block = block;
    free_slot->floats = floats;
    wf_fbc_init(&free_slot->fbc, block, floats);
    return &free_slot->fbc;
}

/* Wake the main thread without handing it a job: it drains the box (maybe
 * empty) and looks at the state of the comm world. */
static void poke(wf_done_box_t *box)
{
    uint64_t one = 1;
    ssize_t n = write(box->efd, &one, sizeof one);
    (void)n;     /* only a counter overflow fails; the loop drains anyway */
}

static void *worker_main(void *arg)
{
    wf_worker_t *w = arg;
    wf_backend_ctx_t *ctx = NULL;
    wf_status_t st = w->ops->ctx_new(w->device, w->memory_budget, &ctx);
    if (st == WF_OK && w->ops->ctx_tune) {
        const wf_backend_tuning_t t = { w->attention, w->gelu_kernel, w->graphs,
                                        w->graphs_max };
        st = w->ops->ctx_tune(ctx, &t);
        if (st != WF_OK)
            w->ops->ctx_destroy(&ctx);
    }
    uint64_t total = 0, avail = 0;
    if (st == WF_OK)
        w->ops->memory_info(ctx, &total, &avail);

    pthread_mutex_lock(&w->mu);
    w->ctx = ctx;
    w->memory_total = total ? total : w->memory_budget;
    w->start_status = st;
    w->started = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (st != WF_OK)
        return NULL;

    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stop && !w->n_drops)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->n_drops) {
            pthread_mutex_unlock(&w->mu);
            sessions_drop(w);
            continue;
        }
        wf_task_t *t = w->head;
        if (!t) {                       /* stop, and the FIFO is empty */
            pthread_mutex_unlock(&w->mu);
            break;
        }
        w->head = t->next;
        if (!w->head)
            w->tail = NULL;
        pthread_mutex_unlock(&w->mu);

        wf_djob_t *job = t->job;
        bool counted = job->kind != WF_DJOB_REGROUP;  /* housekeeping: not a job part */
        if (counted)
            atomic_store(&w->busy, true);
        wf_status_t rs;
        if (counted)
            hold_wait(w, job, t->rank);
        if (fault_hit(w, job)) {
            /* test only: fail as a step that fails after the job's first
             * collective may have started */
            wf_log(w->log, WF_LOG_WARNING, "%s: job %llu (seq %llu) rank %d: "
                   "failing it on purpose (WEFT_TEST_FAIL_JOB, test only)",
                   w->name, (unsigned long long)job->req.id,
                   (unsigned long long)job->seq, t->rank);
            if (w->world)
                wf_comm_abort(w->world);
            rs = WF_E_INTERNAL;
        } else {
            rs = job->run(job, t->rank, job->group_size, w);
        }
        if (counted) {
            atomic_store(&w->busy, false);
            atomic_fetch_add(&w->jobs_served, 1);
        }
        /* a deadline or a cancel stopped every rank at one boundary: no
         * failure of this device, nothing aborted */
        bool stopped = rs == WF_E_DEADLINE || rs == WF_E_CANCELLED;
        if (rs != WF_OK)
            wf_log(w->log, stopped ? WF_LOG_DEBUG : WF_LOG_ERR,
                   "%s: job %llu rank %d %s: %s", w->name,
                   (unsigned long long)job->req.id, t->rank,
                   stopped ? "stopped" : "failed", wf_status_name(rs));
        if (counted && rs != WF_OK && rs != WF_E_ABORTED && !stopped) {
            atomic_store(&w->own_failed_seq, job->seq);
            atomic_store(&w->own_failed_status, (int)rs);
            atomic_fetch_add(&w->own_failures, 1);  /* last: readers see the two */
        }
        if (rs != WF_OK && !stopped && job->done)
            poke(job->done);           /* the job may wait for other nodes */
        wf_djob_rank_done(job, rs);    /* job may be freed from here on */
    }

    drop_comms(w);
    sessions_drop(w);
    sessions_clear(w);
    wf_rank_models_clear(&w->models);
    free(w->arena);
    w->arena = NULL;
    w->arena_bytes = 0;
    w->ops->ctx_destroy(&w->ctx);
    return NULL;
}

/* A backend on device memory computes on device buffers, so its comm
 * must move them: a new world of host memory (host or ZeroMQ) goes behind
 * the staging (comm_staged.h); an NCCL world moves them itself. */
static wf_status_t device_world(wf_worker_t *w)
{
    if (!w->ops->dev_alloc || strcmp(wf_comm_backend(w->world), "nccl") == 0)
        return WF_OK;
    wf_comm_t *inner = w->world;
    w->world = NULL;
    return wf_comm_staged_wrap(inner, w->ops, w->ctx, &w->world);
}

/* This rank's handle on the new NCCL world of the job (one GPU per
 * rank): collective over the local workers, bounded by the init timeout. */
static wf_status_t nccl_world(wf_worker_t *w, const wf_djob_t *job, int rank)
{
    wf_comm_nccl_opts_t o = {
        .device = w->device,
        .stream = w->ops->native_stream ? w->ops->native_stream(w->ctx) : NULL,
        .init_timeout_ms = w->nccl_init_timeout_ms,
        .op_timeout_ms = 0,
    };
    return wf_comm_nccl_init(&job->nccl_id, job->group_size, rank, &o, &w->world);
}

/* This rank's handle on a cluster world that is NCCL's (comm_nccl_boot.h):
 * the survivors of a lost node shrink the world they hold (zw->nccl_shrink);
 * otherwise the communicator of the world message's id over every rank of
 * every node, bounded by the cluster timeout, in the cluster's abort
 * domain. The previous world is destroyed; the comm_zmq endpoint kept for
 * the world is closed. */
static wf_status_t cluster_nccl_world(wf_worker_t *w, const wf_zworld_t *zw, int grank,
                                      wf_comm_zmq_endpoint_t **ep, char *err,
                                      size_t errlen)
{
    wf_comm_zmq_endpoint_destroy(ep);
    const wf_nccl_api_t *api = wf_nccl_api();
    wf_comm_nccl_opts_t o = {
        .device = w->device,
        .stream = w->ops->native_stream ? w->ops->native_stream(w->ctx) : NULL,
        .init_timeout_ms = zw->cfg.connect_timeout_ms > 0
                               ? (uint32_t)zw->cfg.connect_timeout_ms : 0,
        .op_timeout_ms = 0,             /* node loss aborts the domain */
        .abort_domain = zw->cfg.local,
    };
    wf_comm_t *nw = NULL;
    wf_status_t st;
    if (zw->nccl_shrink && w->world && api->shrink) {
        st = api->shrink(api->arg, w->world, zw->exclude, zw->n_exclude, &o, &nw);
        if (st == WF_OK && (wf_comm_rank(nw) != grank || wf_comm_size(nw) != zw->cfg.nranks))
            st = WF_E_INTERNAL;     /* the plan and the new world disagree */
        snprintf(err, errlen, "%s shrink to rank %d of %d (%d rank(s) dropped): %s",
                 api->name, grank, zw->cfg.nranks, zw->n_exclude, wf_status_str(st));
        wf_comm_destroy(&w->world);
        if (st != WF_OK)
            wf_comm_destroy(&nw);
    } else {
        wf_comm_destroy(&w->world);
        st = api->init(api->arg, &zw->nccl_id, zw->cfg.nranks, grank, &o, &nw);
        snprintf(err, errlen, "%s init of rank %d of %d: %s", api->name, grank,
                 zw->cfg.nranks, wf_status_str(st));
    }
    w->world = nw;
    return st;
}

wf_status_t wf_worker_regroup_run(wf_djob_t *job, int rank, int group_size,
                                  wf_worker_t *w)
{
    (void)group_size;
    /* a new mesh: the sessions' states are for the old one */
    sessions_clear(w);
    for (int i = 0; i < WF_MESH_NGROUPS; i++)
        wf_comm_destroy(&w->group[i]);
    int grank = job->rank_base + rank;     /* world rank */
    if (job->zworld) {
        if (!job->zworld->nccl)
            wf_comm_destroy(&w->world);
        w->mesh.epoch = 0;
        char err[256];
        wf_status_t st = job->zworld->nccl
            ? cluster_nccl_world(w, job->zworld, grank, &job->zworld->ep[rank], err,
                                 sizeof err)
            : wf_comm_zmq_world_join(&job->zworld->cfg, grank, &job->zworld->ep[rank],
                                     err, sizeof err, &w->world);
        if (st != WF_OK) {
            /* peers of this process waiting in the join wake up too */
            wf_comm_zmq_local_abort(job->zworld->cfg.local);
            wf_log(w->log, WF_LOG_WARNING, "%s: joining the world as rank %d: "
                   "%s", w->name, grank, err);
            return st;
        }
        st = device_world(w);
        if (st != WF_OK) {
            wf_comm_zmq_local_abort(job->zworld->cfg.local);
            return st;
        }
    } else if (job->world) {
        wf_comm_destroy(&w->world);
        wf_status_t st = job->nccl ? nccl_world(w, job, rank)
                                   : wf_comm_host_init(job->world, rank, &w->world);
        if (st == WF_OK)
            st = device_world(w);
        if (st != WF_OK) {
            /* Not collective: peers proceed to the split and would wait
             * for this rank there (an NCCL init of the peers ends with its
             * timeout). */
            if (job->nccl)
                wf_log(w->log, WF_LOG_ERR, "%s: NCCL world as rank %d: %s", w->name,
                       rank, wf_status_str(st));
            if (w->world)
                wf_comm_abort(w->world);
            wf_comm_host_world_abort(job->world);
            return st;
        }
    }
    if (!w->world)
        return WF_E_INTERNAL;
    for (int i = 0; i < WF_MESH_NGROUPS; i++) {
        int color, key;
        wf_status_t st = wf_mesh_color(&job->mesh, (wf_mesh_dim_t)i, grank,
                                       &color, &key);
        if (st == WF_OK)
            st = wf_comm_split(w->world, color, key, &w->group[i]);
        if (st != WF_OK) {
            wf_comm_abort(w->world);
            for (int j = 0; j < WF_MESH_NGROUPS; j++)
                wf_comm_destroy(&w->group[j]);
            return st;
        }
    }
    w->mesh = job->mesh;
    wf_mesh_coords_t c;
    wf_status_t st = wf_mesh_coords(&job->mesh, grank, &c);
    char err[WF_PROTO_ERROR_MAX] = "";
    if (st == WF_OK)
        st = wf_rank_models_sync(&w->models, &job->models, (int)job->mesh.deg.tp,
                                 c.tp, w->ops, w->ctx, err, sizeof err);
    if (st != WF_OK) {
        wf_log(w->log, WF_LOG_ERR, "%s: model shards for tp rank %d of %u: %s",
               w->name, c.tp, job->mesh.deg.tp, err);
        return st;
    }
    return WF_OK;
}

wf_status_t wf_worker_start(wf_worker_t *w, uint32_t index, int device,
                            const wf_backend_ops_t *ops, uint64_t memory_budget,
                            const wf_backend_tuning_t *tuning, wf_log_t *log)
{
    memset(w, 0, sizeof *w);
    w->index = index;
    w->device = device;
    snprintf(w->name, sizeof w->name, "%s:%d", ops->name, device);
    w->ops = ops;
    w->memory_budget = memory_budget;
    if (tuning && tuning->attention)
        snprintf(w->attention, sizeof w->attention, "%s", tuning->attention);
    w->gelu_kernel = tuning && tuning->gelu_kernel;
    w->graphs = tuning ? tuning->graphs : WF_GRAPHS_OFF;
    w->graphs_max = tuning ? tuning->graphs_max : 0;
    w->log = log;
    w->hold_fd = -1;
    atomic_init(&w->jobs_served, 0);
    atomic_init(&w->busy, false);
    atomic_init(&w->own_failures, 0);
    atomic_init(&w->own_failed_seq, 0);
    atomic_init(&w->own_failed_status, WF_OK);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);

    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        wf_log(log, WF_LOG_ERR, "%s: cannot start worker thread: %s", w->name,
               strerror(rc));
        return WF_E_INTERNAL;
    }
    w->running = true;
    pthread_mutex_lock(&w->mu);
    while (!w->started)
        pthread_cond_wait(&w->cv, &w->mu);
    wf_status_t st = w->start_status;
    pthread_mutex_unlock(&w->mu);
    if (st != WF_OK)
        wf_log(log, WF_LOG_ERR, "%s: backend context failed: %s", w->name,
               wf_status_str(st));
    else if (ops->ctx_tune && (w->attention[0] || w->gelu_kernel))
        wf_log(log, WF_LOG_INFO, "%s: attention kernel %s, GELU %s", w->name,
               w->attention[0] ? w->attention : "auto",
               w->gelu_kernel ? "in a kernel" : "in cuBLASLt's epilogue");
    return st;
}

void wf_worker_set_fault(wf_worker_t *w, const uint64_t *seq, uint32_t n)
{
    if (n > WF_WORKER_MAX_FAULTS)
        n = WF_WORKER_MAX_FAULTS;
    memcpy(w->fault_seq, seq, n * sizeof seq[0]);
    w->n_fault = n;
}

void wf_worker_set_hold(wf_worker_t *w, int fd, atomic_bool *open)
{
    w->hold_fd = fd;
    w->hold_open = open;
}

void wf_worker_submit(wf_worker_t *w, wf_task_t *task)
{
    task->next = NULL;
    pthread_mutex_lock(&w->mu);
    if (w->tail)
        w->tail->next = task;
    else
        w->head = task;
    w->tail = task;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void wf_worker_stop(wf_worker_t *w)
{
    if (!w->running)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->running = false;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

void *wf_worker_workspace(wf_worker_t *w, size_t bytes)
{
    if (w->arena && bytes <= w->arena_bytes)
        return w->arena;
    /* Never NULL for 0 bytes; aligned_alloc wants a multiple of 64. */
    size_t size = bytes ? (bytes + 63) & ~(size_t)63 : 64;
    void *p = aligned_alloc(64, size);
    if (!p)
        return NULL;
    free(w->arena);
    w->arena = p;
    w->arena_bytes = size;
    return p;
}
