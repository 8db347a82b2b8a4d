/* config.h — weftd's settings: one table (name, kind, default, bounds,
 * reloadable, help) and the sources that fill it, in increasing
 * precedence: built-in defaults < config file (`key = value` lines) <
 * WEFT_<NAME> environment variables < command-line flags (--name value).
 *
 * Nothing here logs or exits: errors come back as a status and a message
 * naming where the bad value came from (file:line, variable or flag).
 */
#ifndef WF_CONFIG_H
#define WF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "log.h"
#include "proto.h"

#define WF_SETTINGS_MAX_DEVICES 64      /* == WF_STATUS_MAX_DEVICES */
#define WF_SETTINGS_ENDPOINT_MAX 256    /* listen endpoint, with the NUL */
#define WF_SETTINGS_MESH_MAX 96         /* mesh text, with the NUL */
#define WF_SETTINGS_NAME_MAX 64         /* node_name / coordinator, with the NUL */
#define WF_SETTINGS_MAX_NODES 16        /* bound of the nodes setting */

#define WF_SETTINGS_DEVICES_MAX 256    /* devices text, with the NUL */
#define WF_SETTINGS_PATH_MAX 1024      /* model_root, with the NUL */

#define WF_TEST_MAX_FAIL_JOBS 16       /* entries of WEFT_TEST_FAIL_JOB */

/* Test-only hooks, read from the environment alone (never from the file
 * or flags): the second, separate table of config.c. Zero = off. */
typedef struct wf_test_hooks {
    /* WEFT_TEST_FAIL_JOB=SEQ[,SEQ...]: this daemon's ranks of the jobs with
     * these global sequence numbers fail as a failed step does
     * (wf_worker_set_fault), for tests of the recovery */
    uint64_t fail_jobs[WF_TEST_MAX_FAIL_JOBS];
    uint32_t n_fail_jobs;        /* entries of fail_jobs */
    /* WEFT_TEST_PROTOCOL_VERSION=N: the protocol version the cluster hello
     * advertises (0 = the real one), to test the coordinator's refusal */
    uint32_t protocol_version;
    /* WEFT_TEST_HOLD_JOBS=PATH: a FIFO the test made; each worker, before
     * a part of a job (not a regroup), reads one byte from it, so the test
     * holds every job at its start and releases one per byte ('a' opens
     * the gate for good). A held part counts as busy in status. "" = off. */
    char hold_fifo[WF_SETTINGS_PATH_MAX];
} wf_test_hooks_t;

/* What the devices are. */
typedef enum wf_device_kind {
    WF_DEVICE_CPU = 0,           /* cpu:N: N virtual CPU devices */
    WF_DEVICE_CUDA = 1           /* cuda / cuda:i,j,...: GPUs (kernels/cuda) */
} wf_device_kind_t;

/* The gpu_memory setting: the CUDA arena of each GPU (shared equally by
 * the ranks on one GPU). Both 0: 90% of the free memory less 1 GiB. */
typedef struct wf_gpu_memory {
    uint64_t bytes;              /* > 0: this many bytes */
    double fraction;             /* > 0: this share of the GPU's total memory */
} wf_gpu_memory_t;

/* Every setting, resolved. */
typedef struct wf_settings {
    char listen[WF_SETTINGS_ENDPOINT_MAX]; /* ZeroMQ endpoint to bind */
    char devices[WF_SETTINGS_DEVICES_MAX]; /* canonical "cpu:N", "cuda" or "cuda:0,1" */
    uint32_t device_count;       /* devices (= ranks) the daemon runs; for "cuda"
                                    0 until wf_settings_resolve_gpus */
    uint32_t device_kind;        /* a wf_device_kind_t */
    int32_t gpu[WF_SETTINGS_MAX_DEVICES]; /* CUDA: GPU index of device i (repeats:
                                    several ranks on one GPU, host comm) */
    uint32_t queue_capacity;     /* jobs admitted and waiting for devices */
    uint32_t client_queue_jobs;  /* per client share: jobs waiting; 0 = a
                                    quarter of queue_capacity (at least 1) */
    uint32_t session_max;        /* denoising sessions open at once (<= 64) */
    uint32_t session_idle_ms;    /* a session without a forward this long ends */
    uint64_t client_queue_bytes; /* per client share: input bytes of its jobs
                                    from receipt to completion */
    uint64_t client_reply_bytes; /* per client share: output bytes of its jobs
                                    from admission until ZeroMQ takes them */
    wf_limits_t limits;          /* request limits (proto) */
    uint64_t cpu_memory;         /* bytes per CPU device; 0 = RAM / devices */
    uint32_t log_level;          /* a wf_log_level_t */
    uint32_t drain_timeout_ms;   /* bound on finishing jobs at shutdown */
    uint64_t max_job_flops;      /* bound on a job's estimated flops; 0 = none */
    uint32_t job_timeout_ms;     /* longest a job may take from receipt; 0 = none */
    uint32_t reconfigure_timeout_ms; /* drain bound of a reconfiguration; 0 = none */
    char mesh[WF_SETTINGS_MESH_MAX]; /* "ring=2,ulysses=2" as given; "" = tp=devices */
    wf_mesh_degrees_t mesh_deg;  /* resolved and validated against device_count */
    uint32_t rotate_method;      /* per-job default, a wf_rotate_t (never DEFAULT) */
    bool convert_to_fp32;        /* per-job default: merge ring steps in f32 */
    bool ring_anything;          /* per-job default: any S under ring */
    bool ulysses_anything;       /* per-job default: any S / heads under ulysses */
    bool load_balance;           /* per-job default: zigzag causal ring sharding */
    /* cluster (daemon/cluster.h); none reloadable */
    char coordinator[WF_SETTINGS_NAME_MAX]; /* HOST:PORT; "" = single node */
    uint32_t nodes;              /* nodes expected in the world */
    char node_name[WF_SETTINGS_NAME_MAX]; /* this node's name; default hostname */
    uint32_t cluster_timeout_ms; /* bound on each rendezvous step */
    uint32_t heartbeat_ms;       /* interval of control-plane pings */
    uint32_t heartbeat_timeout_ms; /* silence after which a peer is lost */
    char data_address[WF_SETTINGS_NAME_MAX]; /* host / IP the data-plane
                                    endpoints bind and announce; "" = hostname */
    uint32_t cluster_recv_messages; /* whole messages one peer connection may
                                    have unread in the tensor channel and
                                    each comm_zmq data port (ZMQ_RCVHWM) */
    uint64_t comm_unexpected_bytes; /* comm_zmq: payload bytes one peer rank
                                    may send ahead of posted receives;
                                    0 = 4 x (2 x max_tensor_bytes + 4 KiB) */
    /* resident models */
    char model_root[WF_SETTINGS_PATH_MAX]; /* directory models load from; "" = none */
    /* security (README "Security") */
    char key_file[WF_SETTINGS_PATH_MAX]; /* this daemon's CURVE key pair; "" = none */
    char client_keys[WF_SETTINGS_PATH_MAX]; /* tcp clients' keys and roles; "" = no CURVE */
    bool allow_anonymous;        /* tcp without keys off loopback, cluster without keys */
    bool anonymous_admin;        /* anonymous loopback tcp clients are admin */
    uint32_t socket_mode;        /* ipc socket file mode bits */
    char socket_group[WF_SETTINGS_NAME_MAX]; /* ipc socket file group; "" = ours */
    char node_keys[WF_SETTINGS_PATH_MAX]; /* cluster nodes' keys; "" = no CURVE */
    char coordinator_node[WF_SETTINGS_NAME_MAX]; /* with node_keys: who coordinates */
    char user[WF_SETTINGS_NAME_MAX]; /* root: switch to this user after binding */
    char metrics_listen[WF_SETTINGS_NAME_MAX]; /* HOST:PORT of the Prometheus
                                    endpoint (GET /metrics); "" = off */
    uint32_t metrics_connection_ms; /* longest a metrics connection stays open,
                                    however it trickles */
    /* the CUDA backend */
    wf_gpu_memory_t gpu_memory;  /* the arena of each GPU */
    char cuda_attention[WF_SETTINGS_NAME_MAX]; /* attention kernel; "auto" =
                                    the backend's default */
    bool cuda_gelu_epilogue;     /* GELU in cuBLASLt's epilogue; false: a
                                    kernel of its own */
    uint32_t cuda_graphs;        /* wf_graph_mode_t: off, or each forward
                                    block replayed as a CUDA graph */
    uint32_t cuda_graphs_max;    /* graphs kept per GPU rank */
    /* comm on GPUs */
    bool nccl;                   /* NCCL worlds where every rank has its own GPU */
    uint32_t nccl_init_timeout_ms; /* bound on an NCCL communicator's init */
    /* zmtp: the client plane's transport (net/gate.h) */
    uint32_t client_max_connections; /* client connections open at once */
    uint32_t client_max_handshakes; /* of them, not yet through the handshake */
    uint32_t client_handshake_ms; /* longest handshake of a client connection */
    uint32_t client_max_frames;  /* frames of one client message */
    wf_test_hooks_t test;        /* test-only hooks (environment only) */
} wf_settings_t;

/* Largest message of the cluster's data plane (tensor channel, comm_zmq):
 * an output may be twice its input (f16 in, f32 out), plus a header. */
static inline uint64_t wf_settings_data_msg_bytes(const wf_settings_t *s)
{
    return 2 * s->limits.max_tensor_bytes + 4096;
}

/* comm_unexpected_bytes resolved: 0 is four of the largest messages (a
 * peer is at most a step or two ahead of us on each of its comms). */
static inline uint64_t wf_settings_comm_unexpected(const wf_settings_t *s)
{
    return s->comm_unexpected_bytes ? s->comm_unexpected_bytes
                                    : 4 * wf_settings_data_msg_bytes(s);
}

/* Command-line flags that are not settings, plus the setting flags in the
 * order given (applied last, so they win). */
#define WF_CLI_MAX_SETS 64
typedef struct wf_cli {
    const char *config_file;     /* --config FILE, or NULL; borrowed from argv */
    bool help;                   /* --help / -h */
    bool version;                /* --version */
    bool check_config;           /* --check-config: validate the settings, exit */
    size_t n_sets;               /* entries used in sets[] */
    struct {
        const char *name;        /* setting name (table spelling); static */
        const char *value;       /* borrowed from argv */
    } sets[WF_CLI_MAX_SETS];
} wf_cli_t;

/* Parse argv. Accepts "--name value" and "--name=value" with the setting's
 * name spelled with '-' or '_'. Unknown flags and missing values are
 * errors (WF_E_BAD_ARGUMENT, message in err). Values are checked later, by
 * wf_config_build. */
wf_status_t wf_cli_parse(int argc, char **argv, wf_cli_t *ret_cli,
                         char *err, size_t err_len);

/* The built-in defaults (mesh_deg: tp = device_count of the default
 * devices). */
void wf_settings_default(wf_settings_t *ret);

/* Resolve every setting: defaults, then the config file (cli->config_file,
 * else WEFT_CONFIG from envp, else none), then WEFT_<NAME> variables from
 * envp (a NULL-terminated "K=V" array, usually environ), then the flags.
 * The test hooks (wf_test_hooks_t) come from envp only.
 * Last, the mesh is resolved against the device count ("" means tp =
 * devices: today's head split) and validated: degrees >= 1 and their
 * product = the device count (the message names both numbers).
 * On error *ret is untouched and err names the source (file:line,
 * variable, flag) and the problem. */
wf_status_t wf_config_build(const wf_cli_t *cli, char *const *envp,
                            wf_settings_t *ret, char *err, size_t err_len);

/* Parse a `devices` value into s->devices (canonical text),
 * device_kind, device_count and gpu[]: "cpu:N", "cuda" (every GPU;
 * device_count stays 0 until wf_settings_resolve_gpus) or "cuda:I,J,..."
 * (those GPUs, one rank each, spaces allowed after commas; a repeated
 * index puts several ranks on one GPU: the mixed mode, CUDA kernels with
 * the host comm). Syntax only: whether the GPUs exist is
 * wf_settings_resolve_gpus's question. False with the reason in why (s
 * may be partly written). */
bool wf_settings_parse_devices(const char *v, wf_settings_t *s, char *why,
                               size_t why_len);

/* CUDA devices against the `gpus` GPUs this machine has (from
 * wf_cuda_device_count): "cuda" takes GPUs 0..gpus-1 (at most
 * WF_SETTINGS_MAX_DEVICES) and sets device_count; "cuda:i,..." checks each
 * index < gpus. CPU devices: nothing to do. Pure (wf_config_build calls
 * it with the probed count), so it is tested without a GPU. False with
 * the reason in why ("no CUDA device", "cuda:3: index out of range (2
 * GPUs)"). */
bool wf_settings_resolve_gpus(wf_settings_t *s, int gpus, char *why,
                              size_t why_len);

/* Whether two of the devices are one GPU ("cuda:0,0": the mixed mode, its
 * ranks on one GPU talk through the host comm, never one NCCL
 * communicator). False for CPU devices. */
bool wf_settings_gpu_shared(const wf_settings_t *s);

/* SIGHUP: copy into *cur the reloadable settings in which `next` differs.
 * `mesh` is copied like the others (text and degrees); the caller compares
 * cur->mesh_deg before and after to start a hot reconfiguration.
 * Names of the non-reloadable settings that differ (they need a restart
 * and are ignored) are stored in ret_restart (up to max, static strings)
 * and counted in *ret_n_restart. Returns the number of reloadable settings
 * applied. */
size_t wf_settings_apply_reload(wf_settings_t *cur, const wf_settings_t *next,
                                const char **ret_restart, size_t max,
                                size_t *ret_n_restart);

/* Parse an integer with an optional K/M/G/T suffix (powers of 1024).
 * False on anything else or on overflow. */
bool wf_parse_size(const char *s, uint64_t *ret);

/* Parse a gpu_memory value: "0" (the default share), bytes with an
 * optional K/M/G/T suffix in [64M, 1P], or a decimal fraction of the
 * GPU's total memory in [0.01, 0.95] ("0.5"; a '.' makes it a fraction).
 * False with the reason in why on anything else. */
bool wf_parse_gpu_memory(const char *s, wf_gpu_memory_t *ret, char *why,
                         size_t why_len);

/* Print the usage and the settings table (name, default, bounds,
 * reloadable, help) for --help. */
void wf_config_print_help(FILE *out, const char *argv0);

#endif /* WF_CONFIG_H */
