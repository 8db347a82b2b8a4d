/* scheduler.h — the bounded job queue, memory admission and gang dispatch.
 *
 * Main thread only. A job is admitted (sequence number) when the queue
 * has room and its per-rank memory could ever fit on the devices;
 * otherwise it is refused at once (WF_E_QUEUE_FULL, WF_E_NO_MEMORY).
 *
 * The devices form the mesh (mesh.h); device index = global rank (cluster
 * mode: the world's ranks, of which workers[] are local_first..; a job's
 * ranks on other nodes go to the `remote` hook; a context-parallel job
 * whose roots are on a member, or a head-split job on a replica all on
 * one member (remote_roots, that node's bit in roots_ok), gets no output
 * buffers here: the member sends them). A job
 * runs on one dp replica: the ranks sharing a dp coordinate, which are
 * consecutive (dp is the outermost dim). Replicas serve different jobs at
 * once. Dispatch takes jobs strictly in sequence order: the head job goes
 * to a replica where its g ranks are idle and have room for their
 * reservations (the replica with the fewest jobs in flight, round-robin
 * on ties), gets its output buffers and its epoch (the mesh's, now), and
 * is queued on those workers. A context-parallel job takes every rank of
 * the replica, job rank = rank inside the replica; a head-split job takes
 * g idle ranks of the replica, rank order = device order. One gang task
 * per device at a time keeps the queue the place where jobs wait (so
 * queue_capacity means something) and keeps every worker's FIFO in the
 * same relative order.
 *
 * While `paused` (a reconfiguration) nothing is dispatched; jobs queued
 * meanwhile wait and are re-planned for the new mesh (wf_sched_replan).
 */
#ifndef WF_SCHEDULER_H
#define WF_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "base/log.h"
#include "session.h"
#include "worker.h"

/* A client's share of the queue and of the daemon's memory: what the jobs
 * of one client hold. A client is a CURVE key (its name: every connection
 * with that key shares it) or, without keys (ipc://, anonymous tcp://),
 * one connection (its ROUTER routing id). Made by wf_sched_share on the
 * first job, freed when it holds nothing. Bounds (wf_sched_t.limits):
 *   queued       jobs admitted, not dispatched      <= client_queue_jobs
 *   in_bytes     input frame bytes of its jobs from admission (the frames
 *                were just received) to completion  <= client_queue_bytes
 *   reply_bytes  output bytes of its jobs from admission until ZeroMQ
 *                takes the reply (a reply that waits for a peer that does
 *                not read keeps them)               <= client_reply_bytes */
typedef struct wf_share {
    struct wf_share *next;       /* the scheduler's list */
    uint32_t queued;
    uint64_t in_bytes;
    uint64_t reply_bytes;
    uint32_t refs;               /* admitted jobs whose reply is not yet
                                    with ZeroMQ (each holds job->share) */
    char label[96];              /* for messages: "key 'NAME'" or "this
                                    connection" (escaped) */
    size_t key_len;
    unsigned char key[];         /* 'k' NAME or 'c' ROUTING-ID */
} wf_share_t;

/* The share limits (the settings client_queue_*, client_reply_bytes;
 * reloadable). */
typedef struct wf_share_limits {
    uint32_t jobs;               /* 0: a quarter of capacity, at least 1 */
    uint64_t in_bytes;
    uint64_t reply_bytes;
} wf_share_limits_t;

/* Cluster mode: hand the job's ranks outside this node to their nodes
 * (the descriptor goes to every member holding some); returns how many
 * member nodes will report back (each one wf_djob_rank_done). Called at
 * dispatch, before the local ranks are queued. */
typedef uint32_t (*wf_sched_remote_fn)(void *arg, wf_djob_t *job);

typedef struct wf_sched {
    wf_worker_t *workers;        /* borrowed: the daemon's workers (local ranks) */
    uint32_t n_devices;          /* devices of the world (single node: workers) */
    uint32_t local_first;        /* world rank of workers[0] (cluster mode) */
    uint32_t n_local;            /* entries of workers[] */
    bool cluster;                /* head splits stay on local ranks and cp
                                    roots too, unless remote_roots */
    bool remote_roots;           /* cluster coordinator with a tensor channel:
                                    a cp job's roots may all be on one member,
                                    and a head split on a replica all on one
                                    member (it has no comm across nodes) */
    uint8_t node_of[WF_SETTINGS_MAX_DEVICES]; /* cluster: world node index of
                                    each world device (set after resize) */
    uint32_t roots_ok;           /* cluster: bit i = node i may take roots now
                                    (its tensor channel is up) */
    wf_sched_remote_fn remote;   /* cluster mode: sends the remote parts */
    void *remote_arg;
    uint64_t mem_total[WF_SETTINGS_MAX_DEVICES]; /* bytes of each world device */
    uint64_t used[WF_SETTINGS_MAX_DEVICES];   /* bytes reserved per device */
    uint64_t resident;           /* bytes of every device held by resident
                                    model shards (not available to jobs) */
    uint32_t tasks[WF_SETTINGS_MAX_DEVICES];  /* gang tasks outstanding per device */
    uint32_t replica_jobs[WF_SETTINGS_MAX_DEVICES]; /* jobs in flight per dp replica */
    uint32_t next_replica;       /* round-robin start among equally loaded replicas */
    wf_mesh_t mesh;              /* the mesh in force, with its epoch */
    bool paused;                 /* reconfiguring: dispatch nothing */
    wf_djob_t *head, *tail;      /* admitted, not dispatched, in sequence order */
    uint32_t depth;              /* jobs in the queue */
    uint32_t capacity;           /* bound on depth (reloadable) */
    uint32_t in_flight;          /* dispatched, not completed */
    uint64_t next_seq;           /* sequence number of the next admitted job */
    uint64_t served, failed;     /* completed jobs by outcome */
    wf_share_limits_t limits;    /* per client (reloadable) */
    wf_share_t *shares;          /* clients holding something */
    uint64_t held_bytes;         /* every share's in_bytes + reply_bytes */
    uint64_t held_cap;           /* bound on held_bytes: the local devices'
                                    memory summed (set by init / resize) */
    wf_djob_t *running;          /* dispatched, not completed (run_next list;
                                    for cancels) */
    wf_sessions_t sessions;      /* denoising sessions (session.h); their
                                    states' bytes leave the devices' capacity */
    wf_log_t *log;               /* borrowed */
} wf_sched_t;

/* `mesh` must be valid for n_devices (its epoch is kept). */
void wf_sched_init(wf_sched_t *s, wf_worker_t *workers, uint32_t n_devices,
                   uint32_t capacity, const wf_mesh_t *mesh, wf_log_t *log);

/* Plan (or re-plan) a job for a mesh: sets cp, group_size, reserve[],
 * plan_epoch... Returns WF_OK or an error with a message in job->err. */
typedef wf_status_t (*wf_sched_plan_fn)(wf_djob_t *job, const wf_mesh_t *mesh,
                                        void *arg);

/* Cluster mode: the world changed to n_devices ranks of which workers[]
 * are local_first.. (nothing in flight); its mesh is `mesh`. Devices of
 * other nodes count as the local ones' size (nodes bring alike devices). */
void wf_sched_resize(wf_sched_t *s, uint32_t n_devices, uint32_t local_first,
                     const wf_mesh_t *mesh);

/* Re-plan every queued job whose plan is for another epoch than s->mesh's
 * (after a reconfiguration). Jobs the new mesh refuses, or that can never
 * fit, leave the queue with their status set and go to *ret_failed (a
 * list linked by ->next) for the caller to answer. */
void wf_sched_replan(wf_sched_t *s, wf_sched_plan_fn plan, void *arg,
                     wf_djob_t **ret_failed);

/* The share of the client named by key[0..key_len) ('k' NAME for a CURVE
 * key, 'c' ROUTING-ID for a connection), made when none holds anything
 * yet (label: how messages name it). NULL when out of memory. It lives
 * while a job or a waiting reply refers to it (wf_sched_admit takes the
 * reference). */
wf_share_t *wf_sched_share(wf_sched_t *s, const void *key, size_t key_len,
                           const char *label);

/* Admit a planned job (group_size, reserve[], n_outputs, out_desc set;
 * job->share and job->in_bytes set by the caller, or share NULL: not a
 * client's): WF_OK and the queue takes ownership, or WF_E_QUEUE_FULL /
 * WF_E_NO_MEMORY / WF_E_LIMIT with a message and the caller keeps the
 * job. Besides queue_capacity and device memory it checks the share
 * (jobs, input bytes, reply bytes; a job that alone exceeds a byte
 * bound is WF_E_LIMIT) and the daemon-wide held_bytes <= held_cap. On
 * WF_OK the job's bytes count against its share and held_bytes. */
wf_status_t wf_sched_admit(wf_sched_t *s, wf_djob_t *job, char *err,
                           size_t err_len);

/* Dispatch queued jobs while the head fits (nothing while paused). A head
 * whose deadline passed is failed (WF_E_DEADLINE) instead of dispatched;
 * a dispatched job whose ranks all run here is made stoppable at its step
 * boundaries (job.h). Jobs whose outputs cannot be
 * allocated are failed: they go to *ret_failed (a list linked by ->next,
 * status set) for the caller to answer. Returns the number dispatched. */
size_t wf_sched_dispatch(wf_sched_t *s, uint64_t now_us, wf_djob_t **ret_failed);

/* A dispatched job finished: release its devices and reservations. */
void wf_sched_complete(wf_sched_t *s, const wf_djob_t *job);

/* The job's inputs are no longer needed (it completed, or failed):
 * its input bytes leave its share. Idempotent. */
void wf_sched_release_inputs(wf_sched_t *s, wf_djob_t *job);

/* `bytes` of reply reserved for a share left the daemon (ZeroMQ took the
 * reply, or it was dropped): they leave the share and held_bytes; drops
 * the reference (the share is freed when it holds nothing). */
void wf_sched_release_reply(wf_sched_t *s, wf_share_t *share, uint64_t bytes);

/* A job answered without outputs (failed, refused after admission,
 * cancelled): its inputs and its reply reservation leave its share;
 * job->share becomes NULL. Idempotent. */
void wf_sched_release_job(wf_sched_t *s, wf_djob_t *job);

/* Free every share (teardown). */
void wf_sched_shares_free(wf_sched_t *s);
/* Deadlines and cancels (main thread). */

/* Take the queued job out of the queue (a cancel): the caller answers
 * and frees it; counted as failed. `job` must be queued in s. */
void wf_sched_remove(wf_sched_t *s, wf_djob_t *job);

/* Queued jobs whose deadline passed by `now_us` leave the queue with
 * status WF_E_DEADLINE, to *ret_failed (linked by ->next) for the caller
 * to answer. Running jobs stop by themselves at their next step boundary
 * (wf_djob_boundary). */
void wf_sched_expire(wf_sched_t *s, uint64_t now_us, wf_djob_t **ret_failed);

/* The earliest deadline of a queued job (monotonic us), 0 when none. */
uint64_t wf_sched_next_deadline(const wf_sched_t *s);

/* Remove and return every queued (not dispatched) job, in order. */
wf_djob_t *wf_sched_take_queued(wf_sched_t *s);

/* True when nothing is queued or running. */
bool wf_sched_idle(const wf_sched_t *s);

#endif /* WF_SCHEDULER_H */
