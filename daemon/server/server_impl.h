/* server_impl.h — private to daemon/server/: the daemon context and the
 * functions its files call in each other. Calls go one way only, down this
 * list (a file calls those listed below it, never above):
 *
 *   server.c          start-up, teardown, the poll loop, completions,
 *                     signals, reload, drain; the cluster world's hooks
 *   requests.c        receive, validate and route a client message; hello,
 *                     status, attention / forward, reconfigure requests
 *   model_requests.c  load / unload / list models, the install regroup
 *   reconfigure.c     the hot reconfiguration state machine, regroup jobs
 *   dispatch.c        planning, dispatch, re-planning queued jobs
 *   replies.c         replies and error replies, status lines
 *   metrics.c         the operators' counters and the Prometheus endpoint
 *                     (metrics.h; calls none of the others)
 *   privileges.c      the ipc socket file's mode and group, the switch
 *                     from root to `user`
 *   access.c          the client plane's access control: CURVE keys, the
 *                     protected mode, the role of a message (calls none
 *                     of the others)
 *   gate.c, gate_curve.c  the client endpoint's ZMTP transport, in its own
 *                     thread (gate.h; calls none of the others)
 *
 * No file reaches one above it: the end of a reconfiguration goes to the
 * completion its request carries (srv_reconf_done_t), which the file that
 * asked for it chose. Nothing outside daemon/server/ includes this.
 */
#ifndef WF_SERVER_IMPL_H
#define WF_SERVER_IMPL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <zmq.h>

#include "server.h"
#include "net/gate.h"
#include "metrics.h"
#include "backend.h"
#include "base/mesh.h"
#include "base/zap.h"
#include "base/notify.h"
#include "cluster/world.h"
#include "comm/comm_host.h"
#include "keys.h"
#include "models/models.h"
#include "runtime/job.h"
#include "runtime/scheduler.h"
#include "runtime/worker.h"

/* The completion a reconfiguration carries: what its end tells the file
 * that asked for it. Both entries run on the main thread, from
 * reconfigure.c; either may be NULL. */
typedef struct srv_reconf_done {
    /* A regroup of this reconfiguration ended with st (WF_OK: its mesh is
     * in force; a failed one may be followed by a recovery regroup, which
     * ends here too). No reconfiguration can start from here. */
    void (*regrouped)(wf_server_t *srv, wf_status_t st, void *arg);
    /* The reconfiguration is over (installed, failed or given up) and
     * dispatch resumed: another may start from here. */
    void (*finished)(wf_server_t *srv, void *arg);
    void *arg;                   /* borrowed: passed to both */
} srv_reconf_done_t;

/* A reconfiguration asked for: by a client, by SIGHUP, by a model load or
 * unload (the mesh in force: a regroup that re-cuts shards), by the
 * recovery of an aborted world, or by the coordinator (member). */
typedef struct wf_reconf_req {
    wf_mesh_degrees_t deg;       /* degrees to install */
    uint64_t epoch;              /* mesh epoch to install; 0: the one in force + 1 */
    bool new_world;              /* single node: regroup on a new comm world */
    const char *why;             /* "request", "SIGHUP", ... (static) */
    bool notify;                 /* READY=1 at the end, RELOADING=1 now */
    bool reloading_sent;         /* with notify: RELOADING=1 is out already */
    zmq_msg_t *identity;         /* the client's ROUTER identity, taken when the
                                    reconfiguration starts; NULL: no client */
    bool delim;                  /* the client sent an empty delimiter */
    uint64_t id;                 /* its request id */
    srv_reconf_done_t done;      /* its completion (every regroup re-cuts
                                    the resident models: callers pass
                                    srv_models_follow, or a completion
                                    that calls it) */
} wf_reconf_req_t;

/* Who may use the client endpoint, and how roles are told (access.c). */
typedef enum srv_access_mode {
    SRV_ACCESS_IPC = 0,          /* ipc://: socket file mode; roles by peer uid */
    SRV_ACCESS_CURVE = 1,        /* tcp:// with client_keys: roles by key */
    SRV_ACCESS_ANONYMOUS = 2     /* tcp:// without keys (loopback or
                                    allow_anonymous): everyone admin */
} srv_access_mode_t;

/* A reply ZeroMQ did not take (its peer's queue holds SNDHWM messages:
 * the client does not read): kept here, in order, and retried by the
 * loop (replies.c). */
typedef struct srv_pending {
    struct srv_pending *next;
    uint64_t id;                 /* request id, for logs */
    zmq_msg_t frames[2 + WF_DJOB_MAX_OUTPUTS]; /* (delimiter), header, outputs */
    uint32_t n_frames;
    wf_share_t *share;           /* a job's reply: the share its outputs
                                    count in (reserved at admission) */
    uint64_t share_bytes;        /* those bytes */
    uint64_t small_bytes;        /* a reply without a share (errors, hello,
                                    status...): its bytes, counted in the
                                    connection's small_bytes */
} srv_pending_t;

/* A connection with replies waiting (srv->waiting). */
typedef struct srv_conn {
    struct srv_conn *next;
    zmq_msg_t identity;          /* its routing id */
    srv_pending_t *head, *tail;  /* oldest first */
    uint32_t n;                  /* replies waiting */
    uint64_t small_bytes;        /* bytes of its replies without a share;
                                    <= client_reply_bytes */
} srv_conn_t;

struct wf_server {
    wf_settings_t settings;      /* in effect (reload updates the reloadable ones) */
    const wf_cli_t *cli;         /* borrowed: flags, for reload */
    char *const *envp;           /* borrowed: environment, for reload */
    wf_log_t *log;               /* borrowed */
    wf_notify_t notify;          /* sd_notify state */
    const wf_backend_ops_t *ops; /* backend of every device */
    void *zctx;                  /* ZeroMQ context */
    void *router;                /* client messages, from the gate (inproc) */
    char router_ep[64];          /* its inproc:// address */
    wf_gate_t *gate;             /* the client endpoint's transport (gate.h) */
    wf_zap_t *zap;               /* the ZAP handler of zctx (every CURVE socket
                                    of this daemon, the cluster's too) */
    wf_keypair_t keys;           /* key_file's pair, when has_keys */
    bool has_keys;               /* key_file was read */
    struct {                     /* the client plane (access.c) */
        srv_access_mode_t mode;
        char bound_ep[WF_SETTINGS_ENDPOINT_MAX]; /* the address bound */
        wf_key_entry_t *keys;    /* CURVE: client_keys as last read */
        size_t n_keys;
    } access;
    bool bound;                  /* router is bound to endpoint */
    bool activated;              /* the socket came from systemd (it owns the file) */
    char endpoint[WF_SETTINGS_ENDPOINT_MAX]; /* bound: settings.listen or the
                                  * activated socket's address */
    int sigfd;                   /* SIGTERM / SIGINT / SIGHUP */
    sigset_t old_mask;           /* signal mask to restore */
    bool mask_set;               /* old_mask is valid */
    struct sigaction old_act[3]; /* dispositions of the handled signals to restore */
    bool act_set;                /* old_act is valid */
    wf_done_box_t done;          /* finished jobs from the workers */
    wf_worker_t workers[WF_SETTINGS_MAX_DEVICES]; /* one per device */
    uint32_t n_workers;          /* workers started */
    bool nccl;                   /* new worlds are NCCL worlds (use_nccl) */
    wf_sched_t sched;            /* queue, admission, dispatch; its mesh is the
                                    mesh in force */
    wf_comm_host_world_t *host_world; /* single node: our reference on the
                                    workers' comm world */
    bool workers_stopped;        /* finish_drain stopped them: submit nothing */
    int test_hold_fd;            /* WEFT_TEST_HOLD_JOBS's FIFO; -1: none */
    atomic_bool test_hold_open;  /* its gate opened: workers hold nothing */
    struct {                     /* the hot reconfiguration that runs, if any */
        bool active;             /* validated, dispatch paused */
        bool regrouping;         /* drained; its regroup job is on the workers */
        bool new_world;          /* regroup on a new world (the old was aborted) */
        wf_mesh_t target;        /* the mesh it installs (the pending mesh) */
        const char *why;         /* "request", "SIGHUP", "abort recovery" (static) */
        bool notify;             /* READY=1 at the end (RELOADING=1 was sent) */
        bool has_client;         /* a reconfigure request waits for the reply */
        zmq_msg_t identity;      /* its ROUTER identity (when has_client) */
        bool delim;              /* it sent an empty delimiter */
        uint64_t id;             /* its id */
        uint32_t version;        /* its protocol version (the reply's) */
        uint64_t world_epoch;    /* cluster: the world it started under */
        uint64_t t_start_us;     /* validated */
        uint64_t t_drained_us;   /* in-flight jobs done, regroup submitted */
        unsigned failures;       /* consecutive failed regroups */
        srv_reconf_done_t done;  /* its request's completion */
    } reconf;
    srv_conn_t *waiting;         /* connections with replies ZeroMQ did
                                    not take yet (replies.c) */
    uint32_t retry_ms;           /* while some wait: poll timeout before the
                                    next try (backs off to 50 ms) */
    uint64_t replies_dropped;    /* replies lost: client gone, or a reply
                                    without a share past client_reply_bytes */
    wf_log_limit_t dropped_lines; /* their log lines (a client that stops
                                    reading causes one per reply) */
    uint64_t rejected;           /* requests refused before queueing */
    bool stopping;               /* draining: no new jobs */
    uint64_t drain_deadline_us;  /* when draining gives up */
    uint64_t t_start_us;         /* for uptime */
    wf_world_t *world;           /* cluster mode: this node's part of the
                                    cluster world; NULL: single node */
    wf_registry_t models;        /* resident models (models.h) */
    wf_model_t *pending_install; /* read; its install regroup waits for the
                                    running reconfiguration */
    uint64_t t_extend_us;        /* last EXTEND_TIMEOUT_USEC while loading */
    wf_buf_t buf;                /* reply header encoding scratch */
    wf_request_t req;            /* request decoding scratch */
    wf_reply_t reply;            /* reply scratch (a status reply is ~6 KiB) */
    uint32_t reply_version;      /* "v" of the reply being built: the version
                                    of the request it answers, which the
                                    client's decoder accepts (0: this
                                    daemon's, WF_PROTOCOL_VERSION) */
    srv_metrics_t *metrics;      /* counters, the metrics endpoint (metrics.h) */
};

/* requests.c */

/* Read one whole multipart message from the ROUTER and handle it. False
 * when none was waiting. */
bool srv_request_recv(wf_server_t *srv);

/* model_requests.c */

/* Handlers of the decoded model requests (srv->req); the identity is
 * taken when the request is kept for a later reply. */
void srv_models_load(wf_server_t *srv, zmq_msg_t *identity, bool delim);
void srv_models_unload(wf_server_t *srv, zmq_msg_t *identity, bool delim);
void srv_models_list(wf_server_t *srv, zmq_msg_t *identity, bool delim);
/* The loader thread finished (models.efd readable). */
void srv_models_loaded(wf_server_t *srv);
/* While a load runs: progress to systemd, at most once a second. */
void srv_models_notify(wf_server_t *srv, uint64_t now);
/* The completion every reconfiguration's request carries (the resident
 * models follow each regroup: installing ones become ready, unloading
 * ones go, every shard is re-cut for the mesh; once the reconfiguration
 * is over a model install that waited for it starts). arg: unused. */
extern const srv_reconf_done_t srv_models_follow;
/* Cluster: a resident-model message between daemons (world.h model_msg;
 * arg = srv). */
void srv_models_on_message(void *arg, const char *from, const wf_ctl_msg_t *m);
/* A cluster world's regroup for `mesh`: leave out of `set` the models
 * that cannot be cut for it or do not fit this node's devices (forwards
 * on them are then refused with the reason, until a regroup cuts them). */
void srv_models_world_fit(wf_server_t *srv, const wf_mesh_t *mesh,
                          wf_model_set_t *set);
/* Member: plan a forward part on the coordinator's model `lid` (world.h
 * forward_plan; arg = srv). */
wf_status_t srv_models_forward_plan(void *arg, wf_djob_t *job, uint64_t lid,
                                    const wf_mesh_t *mesh, char *err, size_t err_len);

/* reconfigure.c */

/* Start the reconfiguration `req` (validation first: an invalid mesh
 * changes nothing). With a client (req->identity) its identity is taken
 * and it gets the reply at the end. Refusals: WF_E_SHUTTING_DOWN,
 * WF_E_BUSY, WF_E_BAD_ARGUMENT, a model's refusal (message in err). */
wf_status_t srv_reconf_start(wf_server_t *srv, const wf_reconf_req_t *req,
                             char *err, size_t err_len);
/* Drained? Then put the regroup job on every worker. */
void srv_reconf_advance(wf_server_t *srv);
/* The regroup ended with st: install the mesh and resume, answer the
 * client (see reconfigure.c). */
void srv_reconf_finish(wf_server_t *srv, wf_status_t st);
/* Member: start the coordinator's mesh change if one waits and nothing
 * runs; `done` is its completion. */
void srv_reconf_apply_pending(wf_server_t *srv, const srv_reconf_done_t *done);
/* A reconfiguration still draining past reconfigure_timeout_ms gives up:
 * its client gets WF_E_BUSY, the mesh in force keeps serving. Called on
 * every wake-up of the loop. */
void srv_reconf_tick(wf_server_t *srv, uint64_t now_us);
/* Milliseconds until that timeout; -1: none. */
int srv_reconf_timeout_ms(const wf_server_t *srv, uint64_t now_us);
/* A regroup job for every worker into the groups of `mesh` (a new comm
 * world when `world` is set). NULL when out of memory. Caller owns it. */
wf_djob_t *srv_regroup_new(wf_server_t *srv, const wf_mesh_t *mesh,
                           wf_comm_host_world_t *world);
/* Put a regroup job on every worker. */
void srv_regroup_submit(wf_server_t *srv, wf_djob_t *job);
/* Bytes of the smallest device: what resident shards may take per rank. */
uint64_t srv_min_device_memory(const wf_server_t *srv);

/* dispatch.c */

/* Whether every local device takes fp8 attention (the backend's
 * attention_fp8_ok; a NULL entry: none does). When not and ret_name is
 * not NULL, *ret_name is the first device that does not ("cpu:0"). */
bool srv_devices_fp8(const wf_server_t *srv, const char **ret_name);

/* Plan `job` for `mesh` (message in err). A job asking for precision fp8
 * is then refused with WF_E_UNSUPPORTED unless every local device takes
 * it and, on a coordinator, every node of the world said "fp8" in its
 * hello: before any admission (PROTOCOL.md section 6, step 11). */
wf_status_t srv_plan_job(wf_server_t *srv, wf_djob_t *job, const wf_mesh_t *mesh,
                         char *err, size_t err_len);
/* Dispatch what fits and answer the jobs that failed to start. */
void srv_dispatch(wf_server_t *srv);
/* Re-plan queued jobs for the mesh in force (answering those it refuses),
 * then dispatch. */
void srv_replan(wf_server_t *srv);
/* After the plan, before the queue: refuse a job whose estimated work
 * exceeds max_job_flops (WF_E_LIMIT, message in err); set its deadline
 * (its own deadline_ms capped by job_timeout_ms; from its receipt). */
wf_status_t srv_time_admit(wf_server_t *srv, wf_djob_t *job, char *err,
                           size_t err_len);
/* Answer (WF_E_DEADLINE) the queued jobs whose deadline passed. */
void srv_expire(wf_server_t *srv, uint64_t now_us);
/* Milliseconds until the next queued job's deadline; -1: none. */
int srv_expire_timeout_ms(const wf_server_t *srv, uint64_t now_us);

/* access.c */

/* Start the ZAP handler on srv->zctx (before any socket binds) and read
 * key_file if set. Logs what failed. */
wf_status_t srv_access_start(wf_server_t *srv);
/* The client endpoint srv->endpoint is about to be bound on srv->router:
 * choose the mode; CURVE (client_keys, key_file) or the protected mode's
 * refusal of an anonymous tcp:// endpoint off loopback. Logs what it
 * decided; an error means weftd must not start. */
wf_status_t srv_access_prepare(wf_server_t *srv);
/* After the bind: an anonymous endpoint named by "localhost" / "lo" is
 * checked against the address actually bound. */
wf_status_t srv_access_check_bound(wf_server_t *srv);
/* SIGHUP: re-read client_keys (the settings already hold the new path;
 * `before` is the old one). A bad file keeps the old keys. */
/* Re-read client_keys after a reload (keys_before: the path before it).
 * False when they could not be taken (the previous keys stay), with why. */
bool srv_access_reload(wf_server_t *srv, const char *client_keys_before, char *why,
                       size_t why_len);
/* Give the gate the keys read (CURVE; once it runs). */
void srv_access_gate_keys(wf_server_t *srv);
/* Free what access holds. */
void srv_access_stop(wf_server_t *srv);
/* The role of the peer the gate frame `m` describes, and who it is for
 * log lines and messages (key name, uid / pid, or address; escaped). */
wf_role_t srv_access_role(wf_server_t *srv, const wf_gate_meta_t *m, char *who,
                          size_t who_len);
/* May `role` run `op`? */
bool srv_access_op_allowed(wf_role_t role, uint32_t op);

/* replies.c */

/* Send [identity, (empty), header, outputs of job...]; output buffers
 * pass to ZeroMQ (zero-copy). When the peer's queue is full (it does not
 * read) or older replies to it wait, the reply waits in srv->waiting:
 * a job's (its outputs counted in its share until ZeroMQ takes them), or
 * one without a job while the connection's small_bytes allow it (else it
 * is dropped and logged). The identity is not consumed (a copy is sent). */
void srv_reply_send(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                    const wf_reply_t *rep, wf_djob_t *job);
/* Retry the replies that wait (srv->waiting), oldest first per
 * connection; true when one was taken or dropped. */
bool srv_replies_retry(wf_server_t *srv);
/* Drop every waiting reply (teardown), logging how many. */
void srv_replies_drop_all(wf_server_t *srv);
/* An error reply (msg NULL or "": the status's text). */
void srv_reply_error(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                     uint64_t id, uint32_t op, wf_status_t st, const char *msg);
/* An error reply to a request that was taken (a reconfiguration, a model
 * load, a job that never ran) and then failed: counted as failed, not as
 * refused (srv_reply_error). */
void srv_reply_fail(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                    uint64_t id, uint32_t op, wf_status_t st, const char *msg);
/* A finished (or failed) job's reply. */
void srv_reply_job(wf_server_t *srv, wf_djob_t *job);
/* A reply header in srv->reply: version, id, op, status WF_OK, the epoch
 * in force; the rest zero. */
wf_reply_t *srv_reply_ok(wf_server_t *srv, uint64_t id, uint32_t op);
/* "serving on ..., mesh ..., epoch ..." for sd_notify STATUS=. */
void srv_status_line(const wf_server_t *srv, char *buf, size_t len);

/* privileges.c */

/* Narrow the umask for the bind so that an ipc:// socket file is never
 * wider than socket_mode (no group bits before socket_group is set).
 * Returns the umask before, for srv_socket_perms. */
mode_t srv_socket_umask(const wf_server_t *srv);
/* After the bind (successful or not): restore the umask; on a socket file
 * of ours (bound ipc://PATH, not systemd's, not abstract), set its group
 * (socket_group; `user`'s when dropping to it), owner (`user` when
 * dropping) and mode (socket_mode), and log them. Errors (unknown group,
 * chown / chmod refused) are logged; start-up stops. */
wf_status_t srv_socket_perms(wf_server_t *srv, mode_t umask_before);
/* Once every socket is bound and every privileged file is open: started
 * as root with `user` set, switch to it (supplementary groups, gid, uid,
 * then check that root cannot be regained); every thread follows. `user`
 * set but not root: fine when we already run as it, else an error.
 * Errors are logged. */
wf_status_t srv_drop_privileges(wf_server_t *srv);

#endif /* WF_SERVER_IMPL_H */
