/* cluster_impl.h — private to daemon/cluster/cluster*.c: the control
 * plane's state (struct wf_cluster, its node table) and the functions its
 * files share. cluster.c (the member's side, the public API of cluster.h)
 * calls cluster_coord.c (the coordinator's side: rounds, hellos, node
 * loss), and both call cluster_link.c (message I/O, node queries); calls
 * go that way only. Nothing outside these files includes it.
 */
#ifndef WF_CLUSTER_IMPL_H
#define WF_CLUSTER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "cluster_msg.h"
#include "comm/comm_nccl_boot.h"

#define NCCL_VERSION_NONE "none"   /* the CPU build has no NCCL */
#define IDENTITY_MAX 256

typedef enum node_state {
    NODE_SELF = 0,     /* the coordinator itself */
    NODE_JOINING,      /* hello accepted, not in a world yet */
    NODE_WORLD,        /* sent the current world, waiting for its ready */
    NODE_READY,        /* in the current world, ready */
    NODE_LOST          /* silent for heartbeat_timeout_ms (a refused hello
                          takes no entry) */
} node_state_t;


typedef struct node {
    char name[WF_SETTINGS_NAME_MAX];       /* from its hello */
    char data[WF_SETTINGS_ENDPOINT_MAX];   /* its data-plane endpoint */
    unsigned char id[IDENTITY_MAX];        /* ROUTER identity */
    size_t id_len;
    uint32_t devices;                      /* from its hello */
    bool gpu;                              /* its hello said "gpu" (self: ours) */
    bool fp8;                              /* its hello said "fp8" (self: ours) */
    node_state_t state;
    bool in_world;                         /* part of the current world */
    uint32_t first_rank;                   /* in the current world */
    uint64_t last_heard_us;                /* last message from it */
    uint64_t lost_us;                      /* when it was lost (NODE_LOST) */
    uint64_t contended_us;                 /* a hello for its name from another
                                              connection was last logged then */
} node_t;

typedef enum cstate {
    CS_FORMING = 0,    /* gathering hellos / waiting for readies */
    CS_SERVING,        /* world of every expected node */
    CS_DEGRADED,       /* world without some nodes (lost) */
    CS_COORD_LOST      /* member: the coordinator is silent */
} cstate_t;


/* A member that has no world yet says hello every HELLO_RETRY_US (its
 * first hello is dropped while the connection is not up: ZMQ_IMMEDIATE),
 * instead of once per heartbeat. */
#define HELLO_RETRY_US 25000

struct wf_cluster {
    wf_cluster_role_t role;
    const wf_settings_t *settings;   /* borrowed (the server's copy) */
    wf_log_t *log;                   /* borrowed */
    wf_notify_t *notify;             /* borrowed */
    void *sock;                      /* ROUTER (coordinator) / DEALER (member) */
    struct wf_gate *gate;            /* coordinator: the rendezvous listener in
                                        front of the ROUTER (net/gate.h) */
    const wf_cluster_keys_t *keys;   /* borrowed; NULL: no CURVE (no node_keys) */
    char peer_user[WF_ZAP_USER_MAX]; /* coordinator: ZAP user id (node name) of
                                        the message being handled; "" without keys */
    uint32_t protocol;               /* advertised protocol version */
    char data[WF_SETTINGS_ENDPOINT_MAX]; /* our data-plane endpoint */
    char xfer[WF_SETTINGS_ENDPOINT_MAX]; /* the coordinator's tensor channel
                                        (coordinator: ours; member: of the
                                        world received; "": none) */
    char name[WF_SETTINGS_NAME_MAX]; /* node_name, else the hostname */
    cstate_t state;
    char fatal[WF_PROTO_ERROR_MAX];  /* non-empty: stop the daemon */
    uint64_t epoch;                  /* of the current (or forming) world */
    char world_id[WF_CMSG_WORLD_ID_MAX]; /* hex, fresh per epoch */
    bool had_world;                  /* a world was formed once */
    bool round_open;                 /* coordinator: world sent, readies pending */
    uint64_t step_deadline_us;       /* of the current rendezvous step */
    uint64_t next_ping_us;           /* next heartbeat send / check */
    uint64_t next_hello_us;          /* member joining: next quick hello */
    uint64_t coord_heard_us;         /* member: last message from the coordinator */
    /* the world, both roles: nodes[0..n_nodes) (coordinator: every node
     * ever seen, self first; member: the world as received) */
    node_t nodes[WF_SETTINGS_MAX_NODES];
    uint32_t n_nodes;
    bool mesh_pending;               /* member: a mesh change to apply */
    wf_mesh_degrees_t mesh_deg;      /* its degrees */
    uint64_t mesh_pending_epoch;     /* and its mesh epoch */
    wf_mesh_degrees_t mesh_req;      /* the world mesh asked for (coordinator's) */
    uint64_t mesh_epoch;             /* mesh epoch: + 1 per world and per mesh change */
    bool self_ready;                 /* this node's comm world of `epoch` is built */
    /* the NCCL data plane (comm_nccl_boot.h) */
    char nccl_version[32];           /* ours, as hellos carry it ("none") */
    bool self_gpu;                   /* this node may be in an NCCL world */
    bool self_fp8;                   /* every device of this node takes fp8 */
    bool have_nccl;                  /* the world of `epoch` is NCCL's: nccl_id */
    wf_nccl_id_t nccl_id;            /* its unique id (the coordinator's draw) */
    /* a world aborted by a failed job (not by losing a node) */
    uint64_t failed_epoch;           /* world epoch known to be aborted so (0: none) */
    bool abort_pending;              /* the server must abort its part of it */
    char abort_why[WF_PROTO_ERROR_MAX]; /* what failed, for the logs */
    uint64_t nodes_lost;             /* coordinator: nodes lost since start */
    unsigned rebuilds;               /* coordinator: rebuilds in a row, no job
                                        succeeded since the first */
    bool rebuild_round;              /* coordinator: the open round rebuilds an
                                        aborted world (jobs are admitted) */
    bool held;                       /* coordinator: too many rebuilds in a row:
                                        the next waits for step_deadline_us */
    wf_cluster_msg_fn on_msg;        /* job traffic handler (server) */
    void *on_msg_arg;
    wf_cmsg_t tx;                    /* message being sent (large: kept off the stack) */
    wf_cmsg_t rx;                    /* received message, typed */
    wf_ctl_msg_t msg;                /* tx as fields (large: kept off the stack) */
    wf_ctl_msg_t in;                 /* received message */
    wf_buf_t buf;                    /* encoding scratch */
};

/* --- cluster_link.c: names, message I/O, node queries ----------------- */

const char *cluster_node_state_name(node_state_t s);
const char *cluster_state_name(cstate_t s);
/* A member that has not received its first world yet. */
bool cluster_joining(const wf_cluster_t *c);
/* Log at notice and mirror the line as STATUS= (what tests watch). */
void cluster_status_line(wf_cluster_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A fresh random world id (hex). */
void cluster_new_world_id(char out[WF_CMSG_WORLD_ID_MAX]);
/* Send c->msg: to `to` (coordinator) or to the coordinator (member).
 * Never blocks: a peer that is gone loses the message. */
void cluster_send_msg(wf_cluster_t *c, const node_t *to);
/* Start c->tx as an empty message of `type`. */
wf_cmsg_t *cluster_tx_begin(wf_cluster_t *c, wf_cmsg_type_t type);
/* c->tx into c->msg, ready for cluster_send_msg; false (logged) when it
 * does not fit a control message. */
bool cluster_tx_put(wf_cluster_t *c);
/* Read c->in into c->rx; false (logged) when it is not valid. */
bool cluster_rx_get(wf_cluster_t *c, const char *from);
uint32_t cluster_local_devices(const wf_cluster_t *c);
bool cluster_node_alive(const node_t *n);
uint32_t cluster_count_alive(const wf_cluster_t *c);
/* Names of the nodes in `state` (or of the expected ones never seen). */
void cluster_names_in(const wf_cluster_t *c, node_state_t st, char *buf, size_t len);
node_t *cluster_find_by_id(wf_cluster_t *c, const void *id, size_t len);
node_t *cluster_find_by_name(wf_cluster_t *c, const char *name);
/* Remove node table entry i (>= 1), keeping the order of the others. */
void cluster_remove_node(wf_cluster_t *c, uint32_t i);

/* --- cluster_coord.c: the coordinator's side --------------------------- */

/* Put the alive nodes in world order (self first, then by name) and give
 * them ranks; start a round: world to every member, wait for readies. */
void cluster_start_round(wf_cluster_t *c, uint64_t now);
/* The data plane of the round being sent (world w): an NCCL id drawn
 * into w and c->nccl_id when every node of it said gpu; logged. */
void cluster_coord_nccl(wf_cluster_t *c, wf_cmsg_world_t *w);
/* Every node of the round ready: serve (or degrade) and tell them. */
void cluster_maybe_serve(wf_cluster_t *c);
/* Node `n` is lost (`why`): out of the world, a new round. */
void cluster_lose_node(wf_cluster_t *c, node_t *n, const char *why, uint64_t now);
/* A job failed on a node's ranks in world `epoch`: rebuild it. */
void cluster_coord_world_failed(wf_cluster_t *c, const node_t *from, uint64_t epoch,
                                uint64_t seq, wf_status_t st, uint64_t now);
/* One message on the ROUTER from identity `id`. */
void cluster_coord_message(wf_cluster_t *c, const void *id, size_t id_len,
                           uint64_t now);
/* Heartbeats, silence, rendezvous step deadlines. */
void cluster_coord_timers(wf_cluster_t *c, uint64_t now);

#endif /* WF_CLUSTER_IMPL_H */
