/* cluster.h — the control plane between the weftd daemons of several
 * nodes (DESIGN.md "Rendezvous between nodes"): rendezvous into one world,
 * heartbeats, losing and regaining nodes. Main thread only; the server
 * polls its socket with the others and calls wf_cluster_handle.
 *
 * Every node runs with the same `coordinator` HOST:PORT. Without
 * node_keys the node that can bind it is the coordinator (ZeroMQ ROUTER);
 * the others are members (DEALER). With node_keys the setting
 * coordinator_node says which node binds it (CURVE, see
 * wf_cluster_keys_t), and a hello's name must be the name node_keys gives
 * the key that made the connection. Messages are small msgpack maps (proto.h wf_ctl_msg_t, key
 * "t" = type; typed and validated by proto/cluster_msg.h), never tensor
 * bytes:
 *   member -> coordinator: hello {proto, weft, nccl, name, devices, data,
 *       epoch, gpu}, ready {epoch}, ping {epoch}, data {data}, done {seq, epoch,
 *       st}, aborted {epoch, seq, st}
 *   coordinator -> member: refuse {error}, world {epoch, id, nodes, mesh,
 *       mepoch, xfer, ncclid}, serve {epoch}, pong {epoch}, rejoin {}, mesh {mepoch, dp,
 *       ring, ulysses, tp}, job {descriptor}, abort {epoch, why}
 * (PROTOCOL.md section 11). `xfer` is the coordinator's tensor channel
 * (the server's, wf_cluster_set_xfer), where the inputs and outputs of
 * jobs rooted on members travel; `data` is the node's comm endpoints; `job` /
 * `done` are the server's job traffic, passed through (wf_cluster_send,
 * wf_cluster_on_message). A member says ready only once the server built
 * its part of the comm world (wf_cluster_world_ready); so does the
 * coordinator for itself before it serves.
 * Nothing from a peer is used before its hello passed the version check
 * (protocol, weft and NCCL versions must equal the coordinator's).
 *
 * A round (one epoch): once `nodes` nodes are known (or, after the first
 * world, whenever a node joins or is lost) the coordinator assigns global
 * ranks (itself first, then the members by name; each node's devices
 * contiguous), draws a fresh world id, sends the world to every member
 * at once, waits for every ready (cluster_timeout_ms) and sends serve:
 * the barrier. A step that times out is logged with the missing nodes
 * and the step; a member that said nothing for heartbeat_timeout_ms is
 * lost and the next round leaves it out. The world carries the world mesh
 * asked for; the server fits it to the world's size (dp, else the
 * sequence dims shrink), so the survivors of a loss keep serving
 * ("degraded") until the node comes back in a new epoch.
 *
 * A world aborted by a failed job (a step that failed on some rank aborts
 * that node's part of the world; every node is still alive) is rebuilt
 * with the same nodes: the node that saw it says so (wf_cluster_world_failed;
 * a member sends "aborted"), the coordinator tells every member to abort
 * its part ("abort"; the server aborts its own through wf_cluster_take_abort)
 * and starts a round as after a rejoin. Jobs are admitted while that
 * round forms. At most WF_CLUSTER_MAX_REBUILDS such rounds run in a row
 * without a job succeeding (wf_cluster_job_ok); past that the next one
 * waits cluster_timeout_ms, the state is "degraded" and jobs are refused.
 *
 * The node table (coordinator) holds the coordinator, the nodes that
 * joined and, for a while, those lost: a refused hello never takes an
 * entry, a lost node's entry is forgotten 2 x cluster_timeout_ms after
 * the loss, or at once when the table is full and a new node says hello. A hello naming a node that is alive from another connection is
 * ignored (logged) until that node is lost, unless node_keys is set (the
 * key proved it is that node: a restart). Epochs come from the
 * coordinator only (a hello's epoch is not used).
 *
 * A member refused by the coordinator (version mismatch, bad field)
 * reports the reason through wf_cluster_fatal and the daemon exits 1. A
 * member whose coordinator is silent says so (log, status
 * "coordinator-lost") and keeps sending hello until one answers.
 */
#ifndef WF_CLUSTER_H
#define WF_CLUSTER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "base/log.h"
#include "base/notify.h"
#include "base/zap.h"
#include "comm/comm_nccl.h"
#include "keys.h"
#include "proto.h"

typedef struct wf_cluster wf_cluster_t;

/* Rebuilds of a world aborted by failed jobs that may follow each other
 * without a job succeeding before the next one is held back. */
#define WF_CLUSTER_MAX_REBUILDS 3

typedef enum wf_cluster_role {
    WF_CLUSTER_COORDINATOR = 1,  /* bound the coordinator address */
    WF_CLUSTER_MEMBER = 2        /* connected to it */
} wf_cluster_role_t;

/* One node of the current world, as the server needs it. */
typedef struct wf_cluster_node {
    char name[WF_SETTINGS_NAME_MAX]; /* node_name */
    char data[WF_SETTINGS_ENDPOINT_MAX]; /* its data-plane endpoint ("" for the coordinator) */
    uint32_t first_rank;         /* global rank of its first device */
    uint32_t ranks;              /* its devices */
    bool self;                   /* this daemon */
    bool fp8;                    /* its hello said "fp8" (self: ours): every
                                    device of it takes fp8 attention */
} wf_cluster_node_t;

/* The cluster's CURVE keys (settings node_keys, key_file,
 * coordinator_node; README "Security"): this node's key pair and every
 * node's public key by name. Every daemon-to-daemon socket is then CURVE:
 * the coordinator's rendezvous ROUTER and tensor channel and every comm
 * endpoint are CURVE servers in the ZAP domain WF_ZAP_NODES (whose user id
 * is the node name); members connect pinned to the coordinator's key (and
 * comm ranks to the key of the node holding the rank). */
typedef struct wf_cluster_keys {
    wf_keypair_t self;               /* this node's pair (key_file) */
    wf_key_entry_t *nodes;           /* node_keys (malloc'ed), n of them */
    size_t n;
    char coord_key[WF_KEY_Z85_LEN + 1]; /* coordinator_node's public key */
} wf_cluster_keys_t;

/* This node's name: node_name, else the hostname cut at the first byte a
 * node name may not hold ("node" when nothing is left). */
void wf_cluster_self_name(const wf_settings_t *settings,
                          char out[WF_SETTINGS_NAME_MAX]);

/* node_keys set: take this daemon's key pair `self` (key_file, read by
 * the server; NULL when key_file is unset: refused) and read node_keys, check
 * that this node and coordinator_node are listed (and that this node's
 * listed key is its own), and give the list to `zap` (WF_ZAP_NODES).
 * *ret NULL when node_keys is empty: then the cluster runs without
 * authentication, which is refused unless allow_anonymous (on loopback
 * too: every local user reaches the cluster's tcp:// sockets).
 * Every refusal is logged naming the setting; WF_E_BAD_ARGUMENT. */
wf_status_t wf_cluster_keys_load(const wf_settings_t *settings,
                                 const wf_keypair_t *self, wf_zap_t *zap,
                                 wf_log_t *log, wf_cluster_keys_t **ret);

/* Free; sets *k to NULL; accepts NULL. */
void wf_cluster_keys_free(wf_cluster_keys_t **k);

/* The public key node_keys lists for `name`, or NULL. */
const char *wf_cluster_key_of(const wf_cluster_keys_t *k, const char *name);

/* Start the control plane for settings->coordinator (non-empty). Without
 * keys: bind it (coordinator) or, when it is taken, connect to it
 * (member). With keys (borrowed until wf_cluster_destroy): the node named
 * coordinator_node binds it as a CURVE server (a failed bind is an
 * error: someone holds the port), the others connect pinned to its key.
 * `data_endpoint` is this node's data-plane endpoint, announced in the
 * hello (members). settings->test.protocol_version (a test hook)
 * overrides the protocol version this node advertises. `fp8`: every
 * device of this node takes fp8 attention (its hello says "fp8"; the
 * coordinator's own entry). Borrowed: log, notify (for STATUS= lines),
 * until wf_cluster_destroy. Logs what failed. Caller owns *ret. */
wf_status_t wf_cluster_new(const wf_settings_t *settings, void *zctx,
                           const char *data_endpoint,
                           const wf_cluster_keys_t *keys, bool fp8,
                           wf_log_t *log, wf_notify_t *notify,
                           wf_cluster_t **ret);

/* Close the socket, free; sets *c to NULL; accepts NULL. */
void wf_cluster_destroy(wf_cluster_t **c);

wf_cluster_role_t wf_cluster_role(const wf_cluster_t *c);

/* The ZeroMQ socket the server polls for ZMQ_POLLIN. Borrowed. */
void *wf_cluster_socket(const wf_cluster_t *c);

/* Milliseconds until the next timer (heartbeat, step deadline); >= 0. */
int wf_cluster_timeout_ms(const wf_cluster_t *c, uint64_t now_us);

/* Read every waiting message and run the timers. Returns true when the
 * world changed (a new epoch was installed or a node was lost): the
 * server then re-reads wf_cluster_world. */
bool wf_cluster_handle(wf_cluster_t *c, uint64_t now_us);

/* Non-NULL when the daemon must stop with an error (this member was
 * refused); the message names the node and the field. Borrowed. */
const char *wf_cluster_fatal(const wf_cluster_t *c);

/* True when the world is formed and serving (all its nodes ready), and not
 * aborted with its rebuild held back. */
bool wf_cluster_serving(const wf_cluster_t *c);

/* Coordinator: jobs may be admitted now (serving, or rebuilding an aborted
 * world with the same nodes: they wait in the queue for it). */
bool wf_cluster_accepts_jobs(const wf_cluster_t *c);

/* The nodes of the current world into ret (room for max), count into
 * *ret_n, and the world epoch into *ret_epoch. Nodes known to be lost are
 * not included. Before the first world *ret_n is 0. */
void wf_cluster_world(const wf_cluster_t *c, wf_cluster_node_t *ret, uint32_t max,
                      uint32_t *ret_n, uint64_t *ret_epoch);

/* Why the cluster does not serve now (for an error reply). */
void wf_cluster_why_not(const wf_cluster_t *c, char *buf, size_t len);

/* Coordinator: a node of the world stopped answering on the data plane
 * (or its jobs failed): treat it as lost now. */
void wf_cluster_node_lost(wf_cluster_t *c, const char *name, const char *why,
                          uint64_t now_us);

/* Coordinator: tell every member of the world to regroup for the world
 * mesh `deg` with mesh epoch `mesh_epoch` (the coordinator's own target);
 * later worlds ask for `deg` too. Sent after the coordinator drained: the
 * members' workers run the regroup after the job parts they hold. */
void wf_cluster_broadcast_mesh(wf_cluster_t *c, const wf_mesh_degrees_t *deg,
                               uint64_t mesh_epoch);

/* Member: a mesh change the coordinator asked for, taken once (true,
 * *ret_deg and its mesh epoch) after wf_cluster_handle. */
bool wf_cluster_take_mesh(wf_cluster_t *c, wf_mesh_degrees_t *ret_deg,
                          uint64_t *ret_mesh_epoch);

/* The world being formed or served (both roles; none while a member has
 * lost its coordinator): its nodes (as wf_cluster_world), epoch, world id
 * (a non-zero number, fresh per epoch: the comm world id), the world mesh
 * asked for (the server fits it to the world size, wf_cluster_fit_mesh)
 * and the mesh epoch of that world. */
void wf_cluster_current(const wf_cluster_t *c, wf_cluster_node_t *ret, uint32_t max,
                        uint32_t *ret_n, uint64_t *ret_epoch, uint64_t *ret_world_id,
                        wf_mesh_degrees_t *ret_mesh, uint64_t *ret_mesh_epoch);

/* The world of wf_cluster_current is NCCL's (every node said "gpu" in its
 * hello; comm_nccl_boot.h): true and its unique id, fresh per epoch, into
 * *ret_id. False: its data plane is comm_zmq. */
bool wf_cluster_nccl_id(const wf_cluster_t *c, wf_nccl_id_t *ret_id);

/* This node's communicators of world `epoch` are built (a stale epoch is
 * ignored): a member sends ready; the coordinator counts itself ready and
 * serves once every member is. */
void wf_cluster_world_ready(wf_cluster_t *c, uint64_t epoch);

/* This node's part of the comm world of world `epoch` was aborted by a
 * failed job, not by the control plane: `seq` and `st` name the failed job
 * part (st WF_OK when not known). Member: tells the coordinator
 * ("aborted"), once per epoch. Coordinator: every member is told to abort
 * its part and the world is rebuilt with the same nodes (see the top of
 * this file). A stale epoch is ignored. */
void wf_cluster_world_failed(wf_cluster_t *c, uint64_t epoch, uint64_t seq,
                             wf_status_t st, uint64_t now_us);

/* Both roles, taken once (after wf_cluster_handle or
 * wf_cluster_world_failed): a failed job aborted the world of *ret_epoch
 * on some node; the server aborts its own part of that world (what failed
 * goes to why, for the log). */
bool wf_cluster_take_abort(wf_cluster_t *c, uint64_t *ret_epoch, char *why,
                           size_t why_len);

/* Coordinator: a job succeeded; rebuilds in a row start again from 0. */
void wf_cluster_job_ok(wf_cluster_t *c);

/* This node's data-plane endpoints changed (fresh ones for the next
 * world): members tell the coordinator (message "data"). */
void wf_cluster_set_data(wf_cluster_t *c, const char *data);

/* Coordinator: the endpoint of its tensor channel (channel.c: a ROUTER
 * bound on data_address), announced as `xfer` in every later `world`.
 * Member: wf_cluster_xfer is the one of the world received ("" when the
 * coordinator announced none). Borrowed from c. */
void wf_cluster_set_xfer(wf_cluster_t *c, const char *endpoint);
const char *wf_cluster_xfer(const wf_cluster_t *c);

/* Job traffic (messages of types the control plane does not know, "job"
 * and "done"): handed to fn with the sender's node name (coordinator) or
 * NULL (member: from the coordinator). The message is borrowed for the
 * call. Messages of a node that is not (or no longer) known are dropped. */
typedef void (*wf_cluster_msg_fn)(void *arg, const char *from,
                                  const wf_ctl_msg_t *m);
void wf_cluster_on_message(wf_cluster_t *c, wf_cluster_msg_fn fn, void *arg);

/* Send a job message to member `node` (coordinator) or to the coordinator
 * (member: node NULL). Never blocks; false when it could not be queued
 * (the node is gone or unknown). */
bool wf_cluster_send(wf_cluster_t *c, const char *node, const wf_ctl_msg_t *m);

/* Member: true while the coordinator is silent. */
bool wf_cluster_coordinator_lost(const wf_cluster_t *c);

/* The cluster part of a status reply. */
void wf_cluster_fill_status(const wf_cluster_t *c, wf_status_info_t *si);
/* Coordinator: nodes lost since start (each loss once: a heartbeat
 * timeout, a rendezvous step without an answer, a failure report);
 * member: 0. For the metrics. */
uint64_t wf_cluster_nodes_lost(const wf_cluster_t *c);

#endif /* WF_CLUSTER_H */
