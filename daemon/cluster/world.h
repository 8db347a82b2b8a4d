/* world.h — this node's part of the cluster world (cluster mode): one comm
 * world over every rank of every node (DESIGN.md "Rendezvous between
 * nodes", "Data flow of one job"). Each node binds a ZeroMQ comm endpoint
 * per local rank ahead of time and announces them (hello / "data"); a new
 * world from the control plane (cluster.h) becomes a regroup job that joins
 * the cross-process world and splits the mesh groups on every node; the
 * coordinator sequences every job (the scheduler's `remote` hook,
 * wf_world_remote) and sends members a descriptor ("job") for their ranks;
 * they answer "done". A context-parallel job whose roots are on a member
 * gets its inputs and returns its outputs over the tensor channel
 * (channel.h); a head-split job runs on the coordinator's ranks. A lost
 * node aborts the comm world and its jobs fail with WF_E_NODE_LOST
 * (PROTOCOL.md section 11).
 *
 * The world owns the control plane (wf_cluster_t), the tensor channel, the
 * spare comm endpoints, the abort domain of the world in force, the
 * coordinator's jobs with parts on members and a member's queue of parts
 * (with the inputs that came ahead of their descriptors). It drives the
 * scheduler it is given (pause, resize, roots) and calls back into its
 * owner (the server) through wf_world_hooks_t for what only the owner
 * knows. Main thread only. Called by daemon/server/ (which is above it).
 */
#ifndef WF_WORLD_H
#define WF_WORLD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "base/log.h"
#include "base/mesh.h"
#include "base/notify.h"
#include "cluster.h"
#include "runtime/job.h"
#include "runtime/scheduler.h"
#include "runtime/worker.h"

typedef struct wf_world wf_world_t;

/* What the world asks of its owner. Every function gets `arg`. */
typedef struct wf_world_hooks {
    void *arg;
    /* A regroup job for every local worker into the groups of `mesh` (on
     * the cluster's comm world; the world sets its zworld). NULL when out
     * of memory. Caller owns it. */
    wf_djob_t *(*regroup_new)(void *arg, const wf_mesh_t *mesh);
    /* The mesh a job descriptor arriving now runs under (member): the one
     * in force, or that of a regroup already on the workers. Borrowed. */
    const wf_mesh_t *(*job_mesh)(void *arg);
    /* A new world was installed into the scheduler: resume (pause per
     * what else runs), re-plan queued jobs, dispatch. */
    void (*installed)(void *arg);
    /* More jobs may be dispatched (a member's channel said hi). */
    void (*dispatch)(void *arg);
    /* A resident-model message (mload .. mready, cluster_msg.h) from node
     * `from` (coordinator) or from the coordinator (member: NULL); the
     * message is borrowed for the call. NULL: such messages are dropped. */
    void (*model_msg)(void *arg, const char *from, const wf_ctl_msg_t *m);
    /* Member: plan the part of a forward job on the model whose
     * coordinator's id is `lid`, for `mesh` (jobs/forward.h; the inputs'
     * descriptors are set). WF_OK, or a status with err (no such model
     * ready here, inputs that do not fit it). NULL: forwards refused. */
    wf_status_t (*forward_plan)(void *arg, wf_djob_t *job, uint64_t lid,
                                const wf_mesh_t *mesh, char *err, size_t err_len);
} wf_world_hooks_t;

/* What a world is built from; every pointer borrowed until
 * wf_world_destroy. */
typedef struct wf_world_cfg {
    const wf_settings_t *settings; /* coordinator, data_address, limits, ... */
    void *zctx;                  /* ZeroMQ context */
    wf_log_t *log;
    wf_notify_t *notify;         /* for the control plane's STATUS= lines */
    wf_sched_t *sched;           /* the scheduler this world drives */
    wf_worker_t *workers;        /* the local workers, n_workers of them */
    uint32_t n_workers;
    wf_done_box_t *done;         /* where the workers put finished parts */
    wf_zap_t *zap;               /* the ZAP handler of zctx (node_keys go to its
                                    WF_ZAP_NODES domain); required with node_keys */
    const wf_keypair_t *keys;    /* this daemon's key pair (key_file, read by
                                    the owner); NULL: none */
    bool fp8;                    /* every local device takes fp8 attention
                                    (the node hello's "fp8") */
    wf_world_hooks_t hooks;
} wf_world_cfg_t;

/* Load the cluster's keys (node_keys; cluster.h wf_cluster_keys_load: a
 * bad or missing key, or a cluster without keys nor allow_anonymous, is an
 * error), bind the spare comm endpoints, start the control plane
 * (cluster.h), bind the tensor channel (coordinator), become the
 * scheduler's remote hook.
 * Call wf_world_sync next (a world of one node forms at once). Logs what
 * failed. Caller owns *ret. */
wf_status_t wf_world_new(const wf_world_cfg_t *cfg, wf_world_t **ret);

/* Abort this node's part of the comm world, if any (blocked ranks return
 * WF_E_ABORTED): before the workers are stopped. Accepts NULL. */
void wf_world_abort_local(wf_world_t *w);

/* Free the queued parts, the early inputs, the channel, the endpoints and
 * the control plane (the workers are stopped); sets *w to NULL; accepts
 * NULL. */
void wf_world_destroy(wf_world_t **w);

/* The control plane. Borrowed until wf_world_destroy. */
wf_cluster_t *wf_world_cluster(const wf_world_t *w);

/* This node is the coordinator (else a member). */
bool wf_world_coordinator(const wf_world_t *w);

/* The tensor channel's socket to poll, NULL when there is none. */
void *wf_world_channel_socket(const wf_world_t *w);

/* Read the tensor channel (cheap when nothing waits). */
void wf_world_recv(wf_world_t *w);

/* After the control plane ran: follow its world (abort ours when the
 * coordinator is lost or a failed job aborted it; join a new one). */
void wf_world_sync(wf_world_t *w);

/* After the control plane ran: take a mesh change the coordinator asked
 * for (member); it waits in the world until wf_world_take_mesh. A new
 * world drops it (the world carries its mesh). */
void wf_world_note_mesh(wf_world_t *w);

/* The pending mesh change, taken once: its degrees and mesh epoch. */
bool wf_world_take_mesh(wf_world_t *w, wf_mesh_degrees_t *ret_deg,
                        uint64_t *ret_epoch);

/* May the coordinator dispatch? On a world that is built, installed, not
 * aborted, and serves. */
bool wf_world_ready(const wf_world_t *w);

/* The world is forming (not built, not installed, or aborted): no
 * reconfiguration now. */
bool wf_world_forming(const wf_world_t *w);

/* The world epoch joined last (0: none). */
uint64_t wf_world_epoch(const wf_world_t *w);

/* World rank of the first local worker. */
uint32_t wf_world_first_rank(const wf_world_t *w);

/* The regroup of a cluster world (job->zworld set) ended with st. */
void wf_world_regroup_done(wf_world_t *w, const wf_djob_t *job, wf_status_t st);

/* Built, and the jobs of the old world are done: serve on the new one
 * (the scheduler gets its size and mesh; hooks.installed). */
void wf_world_try_install(wf_world_t *w);

/* Member: a job part (job->remote_part) came back from the workers: its
 * outputs on the channel or its "done" on the control plane. Returns its
 * status (what the coordinator was told). The caller frees the job. */
wf_status_t wf_world_part_done(wf_world_t *w, wf_djob_t *job);

/* Coordinator: a job of ours finished (before it is answered). */
void wf_world_job_done(wf_world_t *w, wf_djob_t *job);

/* After completions: did a failure that started here abort this node's
 * part of the world (see world.c)? Then report it, once. `part_seq` /
 * `part_st`: a member's part that failed on its own this time (st WF_OK:
 * none). True when the coordinator must re-sync (wf_world_sync). */
bool wf_world_check_abort(wf_world_t *w, uint64_t part_seq, wf_status_t part_st);

/* A job of ours failed with *st: when it died with a lost node or an
 * aborted world, *st and job->err say so. */
void wf_world_explain(const wf_world_t *w, wf_djob_t *job, wf_status_t *st);

#endif /* WF_WORLD_H */
