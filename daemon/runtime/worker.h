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
 *
 * A failed task also wakes the main thread (its job's done box) at once,
 * before the job as a whole is done: in a cluster the job may still wait
 * for other nodes, and the main thread has to see that the failure aborted
 * this node's comm world to have it rebuilt (server.c).
 */
#ifndef WF_WORKER_H
#define WF_WORKER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm/comm.h"
#include "job.h"
#include "base/config.h"
#include "base/log.h"
#include "base/mesh.h"
#include "models/family_run.h"

/* Sequence numbers the test hook may list (WEFT_TEST_FAIL_JOB). */
#define WF_WORKER_MAX_FAULTS WF_TEST_MAX_FAIL_JOBS

/* The sessions a worker holds a first-block cache state of at once (the
 * setting session_max is at most this). */
#define WF_WORKER_SESSIONS 64

/* One denoising session's state on this device (worker thread only). */
typedef struct wf_worker_session {
    uint64_t sid;                /* the daemon's session id; 0: a free slot */
    void *block;                 /* its memory: ops->mem_alloc, or malloc */
    size_t floats;               /* per buffer (wf_fbc_bytes) */
    wf_fbc_t fbc;                /* laid out on block */
} wf_worker_session_t;

struct wf_worker {
    uint32_t index;              /* device index in the daemon (= global rank) */
    int device;                  /* the backend's device index (ctx_new): the
                                    CPU slot, or the GPU; ranks may share a GPU */
    char name[32];               /* "cpu:0", "cuda:1" (backend:device) */
    const wf_backend_ops_t *ops; /* backend of the device */
    uint64_t memory_budget;      /* bytes asked of ctx_new */
    char attention[64];          /* the tuning's attention kernel ("" = default) */
    bool gelu_kernel;            /* the tuning's GELU choice (wf_backend_tuning_t) */
    wf_graph_mode_t graphs;      /* the tuning's CUDA graphs mode */
    uint32_t graphs_max;         /* the tuning's bound on kept graphs */
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
    uint32_t nccl_init_timeout_ms; /* bound on joining an NCCL world (the
                                    nccl_init_timeout_ms setting); set before start */
    /* Test hook (WEFT_TEST_FAIL_JOB, read once by the server; see
     * wf_worker_set_fault): job parts whose sequence number is listed fail
     * as a failed step does. Set before the first task, read-only after. */
    uint64_t fault_seq[WF_WORKER_MAX_FAULTS];
    uint32_t n_fault;            /* entries of fault_seq; 0: no fault */
    /* Test hook (WEFT_TEST_HOLD_JOBS, see wf_worker_set_hold): a FIFO read
     * one byte per job part before it runs; -1: none. Set before the first
     * task, read-only after. */
    int hold_fd;
    atomic_bool *hold_open;      /* the server's: once set, nothing is held */
    /* Denoising sessions' cache states (worker thread only), and the
     * sessions the main thread dropped (guarded by mu; the worker frees
     * their states before its next task, or at once when idle). */
    wf_worker_session_t sessions[WF_WORKER_SESSIONS];
    uint64_t *drops;
    uint32_t n_drops, cap_drops;

    pthread_t thread;            /* the worker thread */
    pthread_mutex_t mu;          /* guards the FIFO, stop, started */
    pthread_cond_t cv;           /* FIFO non-empty / stop / started */
    wf_task_t *head, *tail;      /* FIFO of tasks */
    bool stop;                   /* finish the FIFO, then exit */
    bool started;                /* start handshake done */
    wf_status_t start_status;    /* result of ctx_new (and ctx_tune) */
    bool running;                /* thread exists (start succeeded) */

    atomic_uint_fast64_t jobs_served; /* tasks run */
    atomic_bool busy;            /* running a task now */
    /* Job steps that failed on their own (an error other than
     * WF_E_ABORTED, which only follows a failure elsewhere), and the
     * sequence number and status of the last: the daemon tells from them
     * whether an abort of its comm world started here. Written after the
     * step returned, so after any abort it made. */
    atomic_uint_fast64_t own_failures;
    atomic_uint_fast64_t own_failed_seq;
    atomic_int own_failed_status;
};

/* Start the worker of daemon device `index` on the backend's device
 * `device` (the CPU slot, or the GPU index; several workers may share one
 * GPU, each with its own context and budget): spawns the thread, which
 * creates the backend context with `memory_budget` bytes and applies
 * `tuning` (copied; NULL: the defaults) where the backend has ctx_tune;
 * returns its status. `w` must stay at the same address until
 * wf_worker_stop. */
wf_status_t wf_worker_start(wf_worker_t *w, uint32_t index, int device,
                            const wf_backend_ops_t *ops, uint64_t memory_budget,
                            const wf_backend_tuning_t *tuning, wf_log_t *log);

/* Test hook, never set in production: every part of a job (not a regroup)
 * whose sequence number is one of seq[0..n) fails on this worker with
 * WF_E_INTERNAL the way a failing step does: the worker aborts its world
 * (peers blocked in a collective return WF_E_ABORTED) and does not run the
 * step. Call after wf_worker_start, before the first wf_worker_submit. n is
 * capped at WF_WORKER_MAX_FAULTS. */
void wf_worker_set_fault(wf_worker_t *w, const uint64_t *seq, uint32_t n);

/* Test hook, never set in production: before each part of a job (not a
 * regroup) the worker, already counted busy, reads one byte from fd (a
 * FIFO the server holds open for reading and writing) while *open is
 * false, and runs the part once it has it; the byte 'a' sets *open. So a
 * test holds every job at its start, sees it held in status (busy), and
 * releases parts one byte at a time. Call after wf_worker_start, before
 * the first wf_worker_submit. fd and open are borrowed until the worker
 * stops. */
void wf_worker_set_hold(wf_worker_t *w, int fd, atomic_bool *open);

/* Main thread: session sid ended; the worker frees its state (if it holds
 * one) before its next task, or at once when idle. No job of the session
 * may be queued on w still. */
void wf_worker_drop_session(wf_worker_t *w, uint64_t sid);

/* Worker thread, outside a job's dev_alloc .. dev_reset: session sid's
 * state with buffers of `floats` floats, made (or made anew, holding
 * nothing, when its size differs) on this device. NULL when it cannot be
 * had: no free slot, or no memory. */
wf_fbc_t *wf_worker_session(wf_worker_t *w, uint64_t sid, size_t floats);

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
