/* worker.h — one thread per device. The worker owns its device: the
 * backend context (created and destroyed on its own thread), a workspace
 * arena that grows to the high-water mark and is reused by every job, its
 * counters, and its communicators: a handle on the world of all devices
 * (global rank = device index) and one per mesh group, split from the
 * world by a regroup job that runs on every worker (the split is
 * collective). It runs the (job, rank) tasks of its FIFO in order; the
 * scheduler fills the FIFO in global sequence order.
 *
 * Start and stop are synchronous: wf_worker_start returns once the backend
 * context exists (or failed); wf_worker_stop runs what is still queued and
 * joins the thread.
 */
#ifndef WF_WORKER_H
#define WF_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "job.h"
#include "log.h"
#include "mesh.h"

struct wf_worker {
    uint32_t index;              /* device index in the daemon (= global rank) */
    int device;                  /* the backend's device index (ctx_new): the
                                    CPU slot, or the GPU; ranks may share a GPU */
    char name[32];               /* "cpu:0", "cuda:1" (backend:device) */
    const wf_backend_ops_t *ops; /* backend of the device */
    uint64_t memory_budget;      /* bytes asked of ctx_new */
    uint64_t memory_total;       /* bytes the backend reports; set by start */
    wf_backend_ctx_t *ctx;       /* backend context; worker thread only */
    void *arena;                 /* workspace, 64-byte aligned; worker thread only */
    size_t arena_bytes;          /* its size (high-water mark) */
    /* Communicators, worker thread only (regroup jobs set them, step
     * functions use them): this device's handle on the world, and on its
     * group along each wf_mesh_dim_t (dp, ring, ulysses, tp, and seq =
     * ring x ulysses) of `mesh`. NULL before the first regroup. */
    wf_comm_t *world;
    wf_comm_t *group[WF_MESH_NGROUPS];
    wf_mesh_t mesh;              /* the mesh the groups were split for (with its epoch) */
    wf_rank_models_t models;     /* resident model shards for w->mesh's tp
                                    coordinate (regroup jobs sync them) */
    wf_log_t *log;               /* borrowed from the daemon */

    pthread_t thread;            /* the worker thread */
    pthread_mutex_t mu;          /* guards the FIFO, stop, started */
    pthread_cond_t cv;           /* FIFO non-empty / stop / started */
    wf_task_t *head, *tail;      /* FIFO of tasks */
    bool stop;                   /* finish the FIFO, then exit */
    bool started;                /* start handshake done */
    wf_status_t start_status;    /* result of ctx_new */
    bool running;                /* thread exists (start succeeded) */

    atomic_uint_fast64_t jobs_served; /* tasks run */
    atomic_bool busy;            /* running a task now */
};

/* Start the worker of daemon device `index` on the backend's device
 * `device` (the CPU slot, or the GPU index; several workers may share one
 * GPU, each with its own context and budget): spawns the thread, which
 * creates the backend context with `memory_budget` bytes; returns its
 * status. `w` must stay at the same address until wf_worker_stop. */
wf_status_t wf_worker_start(wf_worker_t *w, uint32_t index, int device,
                            const wf_backend_ops_t *ops,
                            uint64_t memory_budget, wf_log_t *log);

/* Append a task (main thread). The worker runs it after those before it. */
void wf_worker_submit(wf_worker_t *w, wf_task_t *task);

/* Run what is queued, destroy the context, join. Accepts a worker whose
 * start failed or that never started (zeroed). */
void wf_worker_stop(wf_worker_t *w);

/* The step function of a regroup job (job->kind WF_DJOB_REGROUP, on every
 * worker, rank = device index): when job->world is set, drop this
 * worker's handles and take its rank's handle on that new world; then
 * split the world into the groups of job->mesh with wf_mesh_color and set
 * w->mesh; last, make the worker's model shards those of job->models cut
 * for its tp coordinate (wf_rank_models_sync; a failure fails the regroup). Collective: every worker must run the same regroup job with
 * nothing else in flight. On a failure after splitting may have started
 * it aborts the world so no peer stays blocked. */
wf_status_t wf_worker_regroup_run(wf_djob_t *job, int rank, int group_size,
                                  wf_worker_t *w);

/* Workspace of at least `bytes` for the task being run (worker thread
 * only): grows the arena when needed, never shrinks it. Borrowed until the
 * next call. NULL when the allocation fails. */
void *wf_worker_workspace(wf_worker_t *w, size_t bytes);

#endif /* WF_WORKER_H */
