/* job.h — one admitted job of the daemon, executed as a gang.
 *
 * A job runs on a group of g devices (its ranks 0..g-1). The scheduler
 * queues the same job on the FIFO of every worker of the group in global
 * sequence order, so all workers see gang jobs in the same relative order:
 * the property that collectives (ring / ulysses context parallelism) need,
 * since a half-started collective hangs every rank. Each worker calls
 * job->run(job, rank, g, worker); the last rank to finish pushes the job to
 * the completion box, which wakes the main thread through an eventfd.
 *
 * The job owns the received frames (zmq_msg_t, closed when it is freed)
 * so the kernels read the tensors where ZeroMQ put them, and it owns its
 * output buffers until the reply hands them to ZeroMQ (zero-copy).
 *
 * Threads: the main thread creates, dispatches, replies and frees; workers
 * only call run() and wf_djob_rank_done(). Named wf_djob_t because weft.h
 * already names the client's job wf_job_t.
 */
#ifndef WF_JOB_H
#define WF_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "comm/comm_host.h"
#include "comm/comm_nccl.h"
#include "comm/comm_zmq.h"
#include "base/config.h"
#include "base/mesh.h"
#include "models/models.h"
#include "proto.h"

typedef struct wf_worker wf_worker_t;

/* Largest world of a cluster (every rank of every node): the scheduler's
 * per-device tables hold the whole world. */
#define WF_DJOB_MAX_WORLD WF_SETTINGS_MAX_DEVICES

/* A cross-process comm world to join (cluster mode): the regroup job of a
 * new world carries it; each local rank joins with its bound endpoint. */
typedef struct wf_zworld {
    wf_comm_zmq_config_t cfg;                 /* endpoints -> ep_ptrs */
    char eps[WF_DJOB_MAX_WORLD][WF_COMM_ZMQ_ENDPOINT_MAX]; /* by world rank */
    const char *ep_ptrs[WF_DJOB_MAX_WORLD];   /* into eps */
    wf_comm_zmq_endpoint_t *ep[WF_SETTINGS_MAX_DEVICES]; /* by local rank;
                                                 consumed by the join */
    bool nccl;                                /* the world is NCCL's: each rank
                                                 joins the communicator of nccl_id
                                                 (abort domain cfg.local, timeout
                                                 cfg.connect_timeout_ms) instead */
    wf_nccl_id_t nccl_id;                     /* from the world message */
    bool nccl_shrink;                         /* with nccl: shrink the NCCL world
                                                 the workers hold (of the last
                                                 world) without exclude[] instead
                                                 (comm_nccl_boot.h) */
    int n_exclude;                            /* its old world ranks to drop */
    int exclude[WF_DJOB_MAX_WORLD];
} wf_zworld_t;
typedef struct wf_djob wf_djob_t;

/* The step function of rank `rank` of a group of `group_size` on worker w.
 * Every rank of the group runs it exactly once. */
typedef wf_status_t (*wf_djob_run_fn)(wf_djob_t *job, int rank, int group_size,
                                      wf_worker_t *w);

#define WF_DJOB_MAX_OUTPUTS 2

/* What a job does. */
typedef enum wf_djob_kind {
    WF_DJOB_ATTENTION = 0,  /* a client's attention request */
    WF_DJOB_REGROUP = 1,    /* every worker (re)builds its communicators and
                               re-syncs its model shards */
    WF_DJOB_FORWARD = 2     /* a client's forward request on a resident model */
} wf_djob_kind_t;

/* One entry of a worker's FIFO: (job, rank). Lives inside the job. */
typedef struct wf_task {
    wf_djob_t *job;            /* the job */
    int rank;                  /* this worker's rank in the job's group */
    struct wf_task *next;      /* next in the worker's FIFO */
} wf_task_t;

/* Where finished jobs go: a locked list plus an eventfd the main thread
 * polls. */
typedef struct wf_done_box {
    pthread_mutex_t mu;        /* guards head / tail */
    wf_djob_t *head, *tail;    /* finished jobs, oldest first */
    int efd;                   /* eventfd written once per finished job */
} wf_done_box_t;

struct wf_djob {
    /* routing */
    zmq_msg_t identity;        /* ROUTER identity of the client */
    bool has_delim;            /* the client sent an empty delimiter: echo it */
    wf_request_t req;          /* decoded header */
    zmq_msg_t frames[WF_PROTO_MAX_TENSORS]; /* tensor frames as received */
    uint32_t n_frames;         /* frames[] entries initialised */

    wf_djob_kind_t kind;       /* attention or regroup */

    /* scheduling (main thread) */
    uint64_t seq;              /* global sequence number, in admission order */
    uint64_t epoch;            /* mesh epoch it runs under (set at dispatch) */
    uint32_t replica;          /* dp replica it runs on (set at dispatch; a
                                  split job: the first of reps[]) */
    uint32_t split;            /* forward: dp replicas its batch is split over
                                  (0 / 1: one replica); job rank r runs on
                                  reps[r / (group_size / split)] */
    uint32_t reps[WF_SETTINGS_MAX_DEVICES]; /* a split job's replicas (at dispatch) */
    uint32_t batched;          /* forward, split: bit k = schema input k has the
                                  batch B as its dimension 0 (the others go
                                  whole to every replica) */
    struct wf_session *session; /* forward of a denoising session (runtime/
                                  session.h; main thread), else NULL */
    uint64_t session_sid;      /* its id on the workers (0: none) */
    double cache_threshold;    /* the step's first-block cache threshold */
    bool cache_reset;          /* the session starts over at this step: its
                                  state holds nothing before it runs */
    size_t cache_floats;       /* floats per buffer of a rank's cache state */
    atomic_int cache_used;     /* the root's wf_cache_use_t after the run */
    wf_djob_run_fn run;        /* step function of every rank */
    int group_size;            /* g: ranks of the gang */
    uint32_t device[WF_SETTINGS_MAX_DEVICES];  /* device of each rank */
    uint64_t reserve[WF_SETTINGS_MAX_DEVICES]; /* bytes each rank reserves on its device */
    wf_task_t task[WF_SETTINGS_MAX_DEVICES];   /* FIFO entry of each rank */
    wf_djob_t *next;           /* scheduler queue / completion box link */
    struct wf_share *share;    /* the client's share (scheduler.h) from
                                  admission until the reply leaves; NULL: none */
    uint64_t in_bytes;         /* its input frames' bytes, counted in share */
    uint64_t out_bytes;        /* its outputs' bytes, counted in share */

    /* op-specific plan, filled at admission and again at dispatch when the
     * mesh changed in between (plan_epoch != the mesh's epoch) */
    uint64_t plan_epoch;       /* epoch of the mesh the plan was made for */
    wf_mesh_t mesh;            /* that mesh (regroup: the mesh to split for) */
    bool cp;                   /* attention: context parallel (ring x ulysses > 1) */
    wf_rotate_t rotate_method; /* attention: resolved per-job options */
    bool convert_to_fp32;      /*   (job's value, else the daemon's setting) */
    bool ring_anything;
    bool ulysses_anything;
    bool load_balance;
    wf_comm_host_world_t *world; /* regroup: take handles on this new world
                                    (borrowed; NULL: keep the current one) */
    wf_zworld_t *zworld;       /* regroup: join this cross-process world
                                  instead (owned; freed with the job) */
    bool nccl;                 /* regroup with `world`: the workers (one GPU
                                  each) form an NCCL world from nccl_id
                                  instead of taking host handles */
    wf_nccl_id_t nccl_id;      /* made by the server for that world */
    int rank_base;             /* regroup: world rank of local rank 0 */
    wf_model_set_t models;     /* regroup: the models every worker holds after it */
    uint64_t model_id;         /* forward: the model it runs on */
    const wf_family_run_t *frun; /* forward: its family's daemon half */
    wf_model_cfg_t mcfg;       /* forward: its config */
    uint32_t n_in;             /* forward: inputs of its schema */
    wf_schema_binding_t bind;  /* forward: the request's tensors bound to it */
    uint64_t model_lid;        /* forward, cluster: the model's id across the
                                  nodes (models.h wf_model_t lid; 0: none) */
    /* cluster */
    bool remote_part;          /* member: this node's part of a coordinator's job */
    uint32_t remote_pending;   /* coordinator: bit i = world node i owes "done" */
    wf_djob_t *rnext;          /* coordinator: list of jobs with remote parts */
    uint64_t world_epoch;      /* world epoch of the dispatch (coordinator) or
                                  of the descriptor (member): tags the job's
                                  tensor-channel messages */
    uint32_t xroot;            /* coordinator: bit i = world node i holds the
                                  roots and sends the outputs (0: we do) */
    bool root_here;            /* member: this node holds the roots: the
                                  inputs come on the tensor channel */
    bool inputs_in;            /* member: they came (frames[0..3) = q, k, v) */
    bool inputs_bad;           /* member: they did not match the descriptor;
                                  the root's step fails (aborting the world) */
    zmq_msg_t out_msg[WF_DJOB_MAX_OUTPUTS]; /* coordinator: outputs received
                                  from the root node (used where out[i] is NULL) */
    uint32_t n_out_msgs;       /* out_msg[] entries holding them */
    float scale;               /* attention: resolved softmax scale */
    uint32_t n_outputs;        /* output tensors of the reply */
    wf_tensor_desc_t out_desc[WF_DJOB_MAX_OUTPUTS]; /* their descriptors */
    void *out[WF_DJOB_MAX_OUTPUTS]; /* their buffers (64-byte aligned); owned until sent */

    /* completion (workers, then main) */
    atomic_int remaining;      /* ranks not finished */
    atomic_int status;         /* first error of any rank (WF_OK if none); an
                                  error beats WF_E_ABORTED (its consequence) */
    char err[WF_PROTO_ERROR_MAX]; /* message when failed before running */
    wf_done_box_t *done;       /* where the last rank reports */
    uint64_t t_recv_us;        /* received (monotonic) */
    uint64_t t_dispatch_us;    /* handed to the workers */
    uint64_t t_done_us;        /* last rank finished */

    /* time and cancel (wf_djob_boundary) */
    uint64_t deadline_us;      /* monotonic; 0: none (set at admission) */
    uint64_t flops;            /* estimated work (the plan's; for max_job_flops) */
    wf_djob_t *run_prev, *run_next; /* scheduler: dispatched jobs (main thread) */
    bool stoppable;            /* every rank runs in this process on this job
                                  struct: the ranks may agree to stop early
                                  (set at dispatch; a cluster job spanning
                                  nodes runs to its end) */
    atomic_int stop_req;       /* main thread: WF_E_CANCELLED when cancelled */
    pthread_mutex_t agree_mu;  /* guards the three below */
    int64_t agree_step;        /* last boundary decided (-1: none yet) */
    int64_t agree_stop;        /* boundary every rank stops at (INT64_MAX: none) */
    wf_status_t agree_status;  /* what they stop with */
};

/* A zeroed job with empty frames; NULL when out of memory. Caller owns it
 * (wf_djob_free). */
wf_djob_t *wf_djob_new(void);

/* Close the frames, free the outputs still owned, free the job; sets *job
 * to NULL; accepts NULL. */
void wf_djob_free(wf_djob_t **job);

/* Called by the worker of `rank` when its step returned st: records the
 * first error (a later error replaces WF_E_ABORTED: the rank that failed
 * names the cause, the others only saw the abort), and the last rank
 * stamps t_done and pushes the job to its done box. The job must not be
 * touched by that worker afterwards. */
void wf_djob_rank_done(wf_djob_t *job, wf_status_t st);

/* A step boundary of the job's run, the `step`-th (0, 1, ... in order on
 * every rank; every rank passes the same boundaries): WF_OK to go on, or
 * WF_E_DEADLINE / WF_E_CANCELLED to stop there. The decision for a
 * boundary is made once, by the first rank to reach it (the deadline
 * against the clock, the cancel flag), and every other rank reads that
 * decision at the same boundary: all ranks stop at the same boundary,
 * before any collective of the next step, so no peer is left waiting in
 * one and the comm world needs no abort. A job that is not stoppable
 * always goes on. Any thread (the workers); one mutex, no allocation. */
wf_status_t wf_djob_boundary(wf_djob_t *job, int64_t step);

/* Between boundaries, on the way to boundary `step`: when a stop is wanted
 * now and no rank has reached `step` yet, decide now that every rank
 * stops there and return the status (the caller may skip its work up to
 * it: nothing of it will be used); WF_OK otherwise (also when `step` was
 * decided already: to go on). Cheap when no stop is wanted (no lock). */
wf_status_t wf_djob_boundary_ahead(wf_djob_t *job, int64_t step);

/* WF_E_DEADLINE / WF_E_CANCELLED when the job should stop now (main
 * thread or worker, read-only), else WF_OK. */
wf_status_t wf_djob_stop_wanted(const wf_djob_t *job, uint64_t now_us);

/* The reply message of a job stopped with st (WF_E_DEADLINE or
 * WF_E_CANCELLED) at boundary `step` (< 0: while queued), into job->err. */
void wf_djob_stop_message(wf_djob_t *job, wf_status_t st, int64_t step);

/* Set up / tear down a done box (creates / closes its eventfd). */
wf_status_t wf_done_box_init(wf_done_box_t *box);
void wf_done_box_destroy(wf_done_box_t *box);

/* Take every finished job, oldest first (main thread); clears the eventfd. */
wf_djob_t *wf_done_box_take(wf_done_box_t *box);

#endif /* WF_JOB_H */
