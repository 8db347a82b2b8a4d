/* world_impl.h — private to cluster/world.c and cluster/world_jobs.c: the
 * world's state and the functions world.c calls in world_jobs.c (calls go
 * that way only). Nothing outside cluster/ includes this.
 */
#ifndef WF_WORLD_IMPL_H
#define WF_WORLD_IMPL_H

#include <zmq.h>

#include "channel.h"
#include "comm/comm_zmq.h"
#include "world.h"

/* Member: inputs of a job whose descriptor has not come yet (the two
 * travel on different sockets). Bounded; several jobs per replica may be
 * in flight, so inputs dropped for room make their part fail when its
 * descriptor comes (early_lost) instead of waiting forever. */
#define WF_WORLD_EARLY 64
typedef struct wf_world_early {
    uint64_t seq, epoch;         /* the job's sequence number, world epoch */
    uint32_t n;                  /* frames held */
    zmq_msg_t f[3];              /* q, k, v */
} wf_world_early_t;

struct wf_world {
    const wf_settings_t *settings; /* borrowed (the server's, reloads included) */
    void *zctx;                  /* borrowed: ZeroMQ context */
    wf_log_t *log;               /* borrowed */
    wf_sched_t *sched;           /* borrowed: the scheduler this world drives;
                                    its mesh is the mesh in force */
    wf_worker_t *workers;        /* borrowed: the local workers */
    uint32_t n_workers;
    wf_done_box_t *done;         /* borrowed: finished parts go there */
    wf_world_hooks_t hooks;      /* the owner's side */
    wf_cluster_keys_t *keys;     /* node_keys loaded; NULL: no CURVE */
    wf_cluster_t *cluster;       /* control plane between nodes */
    wf_channel_t *channel;       /* tensor channel */
    wf_comm_zmq_local_t *local;  /* abort domain of the world in force / forming */
    wf_comm_zmq_endpoint_t *spare[WF_SETTINGS_MAX_DEVICES]; /* bound, announced */
    char data[WF_SETTINGS_ENDPOINT_MAX]; /* their addresses ("tcp://h:p0,p1") */
    uint64_t world_epoch;        /* world whose regroup was submitted (0: none) */
    uint64_t world_wid;          /* and its world id: a coordinator that
                                    restarted counts epochs from 1 again */
    bool built;                  /* its regroup succeeded */
    bool install;                /* built; install once nothing is in flight */
    bool aborted;                /* its local domain was aborted */
    uint64_t nccl_epoch;         /* world epoch whose NCCL world this node
                                    built (0: none): survivors may shrink it */
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES]; /* of world_epoch */
    uint32_t n_nodes;
    uint32_t first_rank;         /* world rank of workers[0] */
    uint32_t world_size;         /* ranks of the world */
    wf_mesh_t mesh;              /* mesh of that world until it is installed
                                    (then the scheduler's is in force) */
    uint64_t abort_mesh_epoch;   /* jobs of this mesh epoch died with a lost node */
    char lost[160];              /* names of the nodes lost then ("": none, a
                                    failed job aborted the world) */
    uint64_t failed_epoch;       /* world epoch known aborted by a failed job */
    uint64_t own_failures[WF_SETTINGS_MAX_DEVICES]; /* coordinator: each
                                    worker's own_failures already looked at */
    wf_djob_t *remote_jobs;      /* coordinator: jobs with parts on members */
    bool mesh_pending;           /* member: a mesh change from the coordinator */
    wf_mesh_degrees_t mesh_deg;  /* its degrees */
    uint64_t mesh_epoch;         /* and mesh epoch */
    uint32_t xfer_ready;         /* coordinator: bit i = node i's channel said
                                    hi for world_epoch */
    wf_djob_t *mq_head, *mq_tail; /* member: parts and regroups not yet on
                                    the workers, in the coordinator's order */
    wf_world_early_t early[WF_WORLD_EARLY]; /* member: inputs ahead of their job */
    uint32_t n_early;
    uint64_t early_lost_seq;     /* member: inputs of jobs up to this seq of */
    uint64_t early_lost_epoch;   /* this world epoch were dropped (0: none) */
    wf_ctl_msg_t msg;            /* job descriptor / done as fields (large) */
    wf_cmsg_t rx;                /* a received control message, typed (large) */
};

/* world_jobs.c */

/* Index of node `name` in nodes[n], -1 when absent. */
int wf_world_node_index(const wf_cluster_node_t *nodes, uint32_t n, const char *name);

/* Abort this node's part of the comm world (every blocked rank returns
 * WF_E_ABORTED) and stop dispatching on it; jobs of the mesh epoch in
 * force then fail as node lost, naming `lost`, or, when lost is NULL (a
 * failed job aborted the world; `why` says which), as aborted. */
void wf_world_abort(wf_world_t *w, const char *lost, const char *why);

/* Coordinator, new world `nw`: settle the parts owed by members (see
 * world_jobs.c). */
void wf_world_settle_remote(wf_world_t *w, const wf_cluster_node_t *nw, uint32_t nn,
                            bool all, const char *lost);

/* Queue a local job (a part, or a regroup) on its workers (member: behind
 * the parts waiting for inputs). */
void wf_world_submit(wf_world_t *w, wf_djob_t *job);
void wf_world_enqueue(wf_world_t *w, wf_djob_t *job);

/* Member: "done" of a part back to the coordinator. */
void wf_world_member_done(wf_world_t *w, uint64_t seq, uint64_t epoch,
                          wf_status_t st);

/* Coordinator: forget a job with parts on members. */
void wf_world_unlink_remote(wf_world_t *w, wf_djob_t *job);

/* Member: free the queued parts and the early inputs (teardown). */
void wf_world_clear_queue(wf_world_t *w);

/* The scheduler's remote hook (scheduler.h wf_sched_remote_fn; arg = w). */
uint32_t wf_world_remote(void *arg, wf_djob_t *job);

/* Handlers of the control plane's job traffic and of the tensor channel
 * (arg = w). */
void wf_world_on_message(void *arg, const char *from, const wf_ctl_msg_t *m);
void wf_world_on_channel(void *arg, const char *from, const wf_cmsg_t *h,
                         zmq_msg_t *frames, uint32_t n);

#endif /* WF_WORLD_IMPL_H */
