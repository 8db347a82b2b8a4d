/* weft.h — the public interface of libweft, the client of weftd.
 *
 * This is the only installed header. It declares the status codes (the same
 * stable numbers the daemon puts on the wire, see proto/PROTOCOL.md), the
 * tensor descriptor used to pass borrowed buffers, and the client calls:
 * connect, hello, status, attention (synchronous) and submit / poll / wait
 * (asynchronous, several jobs in flight on one connection).
 *
 * Threading: a wf_client_t is used by one thread at a time. Open one
 * connection per thread; they are independent.
 *
 * Memory: tensors are borrowed. Input buffers are sent without a copy and
 * must stay valid and unchanged until the job is finished (wf_attention
 * returns, or wf_job_wait / wf_job_poll reports the job done). Output
 * buffers are written by the library when the reply arrives.
 */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Symbols of the public API. libweft.so is built with hidden visibility,
 * so only what is marked WF_API is exported. */
#if defined(__GNUC__) || defined(__clang__)
#define WF_API __attribute__((visibility("default")))
#else
#define WF_API
#endif

#define WF_VERSION_MAJOR 0
#define WF_VERSION_MINOR 7
#define WF_VERSION_PATCH 0
#define WF_VERSION_STRING "0.7.0"

/* Wire protocol versions spoken by this library (the "v" field): it
 * sends WF_PROTOCOL_VERSION and accepts replies of either (PROTOCOL.md
 * section 9). */
#define WF_PROTOCOL_VERSION 2
#define WF_PROTOCOL_VERSION_MIN 1

/* Largest tensor rank accepted anywhere. */
#define WF_MAX_RANK 8

/* Default endpoint of the daemon (the systemd unit's RuntimeDirectory). */
#define WF_DEFAULT_ENDPOINT "ipc:///run/weftd/weftd.sock"

/* Status codes. Numbers are stable: they are part of the wire protocol.
 * 1..99 are wire codes: the daemon replies with nothing else (anything
 * else is sent as WF_E_INTERNAL, wf_status_on_wire in proto/), and the
 * client library raises them too where they fit; 100.. are raised by the
 * client library only (transport, timeouts) and never travel on the wire. */
typedef enum wf_status {
    WF_OK = 0,
    /* request could not be parsed (truncated / invalid msgpack, header not a map) */
    WF_E_MALFORMED = 1,
    /* protocol version missing or not supported */
    WF_E_VERSION = 2,
    /* a limit was exceeded: header size, nesting, element count, string
     * length, frame count, tensor bytes */
    WF_E_LIMIT = 3,
    /* op code unknown */
    WF_E_UNKNOWN_OP = 4,
    /* a field is missing, has the wrong type or an out-of-range value */
    WF_E_BAD_FIELD = 5,
    /* dtype name unknown or not allowed for this tensor */
    WF_E_BAD_DTYPE = 6,
    /* shape invalid: rank 0 or > 8, a dim <= 0, element count overflows */
    WF_E_BAD_SHAPE = 7,
    /* frame count or a frame's byte size does not match the descriptors */
    WF_E_FRAME_MISMATCH = 8,
    /* an argument that is well-formed but not acceptable: tensors that do
     * not fit together for the op (K/V heads that do not divide Q heads,
     * head dims differ), a bad setting, a bad argument to a libweft call */
    WF_E_BAD_ARGUMENT = 9,
    /* the client's role may not run this op: a `submit` key, or a local
     * user other than root and the daemon's, asked for reconfigure,
     * load_model or unload_model (README "Security") */
    WF_E_DENIED = 10,
    /* the job queue is full; retry later */
    WF_E_QUEUE_FULL = 20,
    /* out of memory: the job does not fit in device memory (refused
     * before allocating), or an allocation failed (daemon or client) */
    WF_E_NO_MEMORY = 21,
    /* the daemon is draining for shutdown and takes no new jobs */
    WF_E_SHUTTING_DOWN = 22,
    /* another reconfiguration is running */
    WF_E_BUSY = 23,
    /* this daemon is a member of a cluster: submit jobs to the coordinator
     * (the message names its address) */
    WF_E_NOT_COORDINATOR = 24,
    /* the cluster cannot serve now: its world is forming or waits for a
     * lost node (the message says which); retry later */
    WF_E_UNAVAILABLE = 25,
    /* the job's deadline passed (its deadline_ms, or the daemon's
     * job_timeout_ms): failed while queued, or at a step boundary of its
     * run (a ring step, a model layer), its devices freed */
    WF_E_DEADLINE = 26,
    /* the job was cancelled (wf_cancel, op cancel): while queued, or at a
     * step boundary of its run, its devices freed */
    WF_E_CANCELLED = 27,
    /* a cluster's nodes disagree: a model's files (config, tensors, sizes
     * or headers) differ on the node the message names */
    WF_E_MISMATCH = 28,
    /* the daemon's devices cannot serve an option the job asks for (an
     * fp8 attention on a device without fp8 tensor cores, e.g. the CPU);
     * the message names the option and the device */
    WF_E_UNSUPPORTED = 29,
    /* a bug or an unexpected failure inside the daemon */
    WF_E_INTERNAL = 40,
    /* a communicator was aborted (a peer failed) while the job ran */
    WF_E_ABORTED = 41,
    /* a node of the cluster was lost (died or stopped answering) while the
     * job ran; the message names it */
    WF_E_NODE_LOST = 42,

    /* raised by the client library itself, never on the wire (100 and
     * 105 are retired: the library's bad arguments are WF_E_BAD_ARGUMENT,
     * its failed allocations WF_E_NO_MEMORY, as the daemon's are) */
    WF_E_TIMEOUT = 101,  /* no reply within the timeout */
    WF_E_CONNECT = 102,  /* endpoint invalid or connection failed */
    WF_E_IO = 103,       /* ZeroMQ send / receive failed */
    WF_E_PROTOCOL = 104, /* the reply did not follow the protocol */
    WF_E_PENDING = 106,  /* wf_job_poll: the job is not finished yet */
    /* the daemon refused this client's credentials: its CURVE handshake
     * failed (a key not in the daemon's client_keys, the wrong server key,
     * or no keys where the endpoint wants them) */
    WF_E_AUTH = 107,
    /* the connection to the daemon closed (the daemon stopped, or the
     * connection was reset) before the reply: every request still waiting
     * on it fails with this at once, and while no new connection is up so
     * does every new request, nothing sent. At the end of a daemon's
     * shutdown (PROTOCOL.md section 1) it means that the daemon never
     * read the request: nothing of it ran */
    WF_E_CONN_CLOSED = 108
} wf_status_t;

/* Stable short name of a status ("WF_E_LIMIT"); never NULL. */
WF_API const char *wf_status_name(wf_status_t s);

/* The version of this libweft ("0.5.0"; the daemon's is in hello). */
WF_API const char *wf_version(void);
/* One-line English description of a status; never NULL. */
WF_API const char *wf_status_str(wf_status_t s);

/* Element types. The numbers are library-local; the wire uses the names
 * "f32", "f16", "bf16". */
typedef enum wf_dtype {
    WF_DTYPE_F32 = 0,
    WF_DTYPE_F16 = 1,
    WF_DTYPE_BF16 = 2
} wf_dtype_t;

/* Size in bytes of one element (0 for an unknown dtype). */
WF_API size_t wf_dtype_size(wf_dtype_t dt);
/* Wire name of a dtype ("f32"), or NULL if unknown. */
WF_API const char *wf_dtype_name(wf_dtype_t dt);

/* A dense little-endian C-order tensor in caller memory. Borrowed: the
 * library never frees `data`. */
typedef struct wf_tensor {
    void *data;                     /* first element; any alignment */
    wf_dtype_t dtype;               /* element type */
    int rank;                       /* number of dims, 1..WF_MAX_RANK */
    int64_t shape[WF_MAX_RANK];     /* dims, outermost first, each > 0 */
} wf_tensor_t;

/* Number of elements of t, or -1 when the shape is invalid or overflows. */
WF_API int64_t wf_tensor_numel(const wf_tensor_t *t);

typedef struct wf_client wf_client_t;
typedef struct wf_job wf_job_t;

/* Open a connection to a daemon at `endpoint` (ipc://PATH or
 * tcp://HOST:PORT; NULL means WF_DEFAULT_ENDPOINT). `timeout_ms` is the
 * default reply timeout of every synchronous call on this connection
 * (<= 0: 30000). Connecting does not wait for the daemon; the first call
 * does. On success *ret_client is set; caller owns it. On failure
 * wf_client_last_error(NULL) says why.
 *
 * A tcp:// endpoint uses CURVE (README "Security") when the environment
 * names the keys: WEFT_SERVER_KEY, the daemon's public key (a file
 * written by `weftctl keygen`, FILE.pub, or the 40-character Z85 key
 * itself) and WEFT_CLIENT_KEY, the path of this client's key pair file
 * (`weftctl keygen FILE`; mode 0600). Both or neither (WF_E_BAD_ARGUMENT);
 * ipc:// endpoints ignore them (the socket file's mode decides who may
 * connect). A handshake the daemon refuses (a key not in its
 * client_keys, no keys where it wants them, a wrong server key) fails
 * the next call with WF_E_AUTH at once, not with a timeout. */
WF_API wf_status_t wf_client_connect(const char *endpoint, int timeout_ms,
                                     wf_client_t **ret_client);

/* wf_client_connect to a tcp:// endpoint with CURVE keys given here:
 * `server_key` the daemon's public key (a 40-character Z85 key or a file
 * holding it), `client_key_file` this client's key pair file (mode 0600).
 * NULL takes that one from WEFT_SERVER_KEY / WEFT_CLIENT_KEY; both must
 * be had. An unreadable or malformed key is WF_E_BAD_ARGUMENT (message in
 * wf_client_last_error(NULL)), an ipc:// endpoint too. */
WF_API wf_status_t wf_client_connect_curve(const char *endpoint, int timeout_ms,
                                           const char *server_key,
                                           const char *client_key_file,
                                           wf_client_t **ret_client);

/* Bound, apart from the reply timeout, how long a call waits for a
 * connection to the daemon while none is up (a daemon not started yet, a
 * wrong endpoint): past `connect_timeout_ms` the call fails with
 * WF_E_CONNECT, nothing sent, and wf_client_last_error names the
 * endpoint. The reply timeout still bounds the whole call. <= 0: none
 * (the default: only the reply timeout bounds the wait). Added in 0.6. */
WF_API wf_status_t wf_client_set_connect_timeout(wf_client_t *client,
                                                 int connect_timeout_ms);

/* Close the connection, cancel unfinished jobs and free the client; sets
 * *client to NULL. Jobs created on it must be destroyed first. Accepts NULL
 * and a pointer to NULL. */
WF_API void wf_client_destroy(wf_client_t **client);

/* Message of the last error on this client (from the daemon's reply or
 * from the library); "" when none. Borrowed until the next call. With
 * NULL: why this thread's last wf_client_connect(_curve) failed. */
WF_API const char *wf_client_last_error(const wf_client_t *client);

/* What the daemon says of itself in the hello handshake. */
typedef struct wf_hello_info {
    uint32_t protocol;          /* protocol version the daemon speaks */
    char weft_version[32];      /* daemon version string */
    char backend[16];           /* "cpu" or "cuda" */
    uint32_t devices;           /* number of devices it owns */
    uint64_t max_header_bytes;  /* limit on the msgpack header frame */
    uint64_t max_tensor_bytes;  /* limit on one tensor frame */
    uint32_t max_tensors;       /* limit on tensor frames per request */
} wf_hello_info_t;

/* Version handshake: sends hello, checks the daemon speaks
 * WF_PROTOCOL_VERSION. Fills *ret_info when not NULL. */
WF_API wf_status_t wf_hello(wf_client_t *client, wf_hello_info_t *ret_info);

/* Whether the daemon announced the feature `name` in the `features` list
 * of this connection's last successful wf_hello (PROTOCOL.md section 9:
 * "reconfigure", "cp_options", "models", "roles", "fp8"): 1 yes, 0 no. 0 also
 * before any hello, from a daemon older than weft 0.4 (it announces
 * nothing) and for a name this library does not know. An accessor, not a
 * field of wf_hello_info_t: the caller allocates that struct, so its size
 * is part of the ABI. */
WF_API int wf_client_has_feature(const wf_client_t *client, const char *name);

/* One device as status reports it. */
typedef struct wf_device_info {
    uint32_t index;          /* device index inside the daemon */
    char name[32];           /* "cpu:0", "cuda:1" */
    uint64_t memory_total;   /* bytes the device may use for jobs */
    uint64_t memory_used;    /* bytes reserved by jobs right now */
    uint64_t jobs_served;    /* job parts this device has run */
    uint32_t busy;           /* 1 while running a job part */
    uint32_t rank;           /* global rank in the mesh */
    uint32_t coords[4];      /* mesh coordinates: dp, ring, ulysses, tp */
} wf_device_info_t;

/* Degrees of the parallel mesh; their product is the number of devices.
 * Ranks are laid out row-major (dp, ring, ulysses, tp), tp innermost. */
typedef struct wf_mesh_degrees {
    uint32_t dp;       /* independent replicas, each serving its own jobs */
    uint32_t ring;     /* ring attention degree */
    uint32_t ulysses;  /* Ulysses (all-to-all) degree */
    uint32_t tp;       /* tensor parallel degree: ranks split heads */
} wf_mesh_degrees_t;

#define WF_STATUS_MAX_DEVICES 64
/* Most nodes a status reply lists. */
#define WF_STATUS_MAX_NODES 16

/* One node of a cluster as status reports it. */
typedef struct wf_node_info {
    char name[64];           /* node_name setting */
    char state[16];          /* "self", "joining", "ready", "lost", "refused",
                                "waiting" (see PROTOCOL.md 3.2) */
    uint32_t first_rank;     /* global rank of its first device in the world */
    uint32_t ranks;          /* its devices (ranks) in the world; 0 when out */
} wf_node_info_t;

/* A status code and how often it was counted. */
typedef struct wf_code_count {
    uint32_t code;           /* a wire status code (wf_status_t) */
    uint64_t count;
} wf_code_count_t;

/* One job op as status counts it. */
typedef struct wf_op_counters {
    char op[16];             /* "attention", "forward" */
    uint64_t served;         /* jobs answered OK */
    uint64_t failed;         /* jobs admitted that ended in an error */
    uint64_t p50_us;         /* latency of the served jobs (receipt to the end */
    uint64_t p99_us;         /*   of compute), estimated from the daemon's */
                             /*   histogram buckets (PROTOCOL.md section 5) */
    uint64_t max_us;         /* the longest served job */
} wf_op_counters_t;

/* Most codes and ops a status reply's counters list. */
#define WF_STATUS_MAX_CODES 32
#define WF_STATUS_MAX_OPS 4

/* Counters since the daemon started (PROTOCOL.md section 5, `counters`);
 * all 0 when the daemon did not send them (present 0). */
typedef struct wf_status_counters {
    uint32_t present;        /* 1: the reply had them */
    uint32_t refused_count;  /* entries used in refused[] */
    wf_code_count_t refused[WF_STATUS_MAX_CODES]; /* requests refused before any
                                work, by code (their sum: requests_rejected) */
    uint32_t failed_count;   /* entries used in failed[] */
    wf_code_count_t failed[WF_STATUS_MAX_CODES];  /* requests taken (jobs admitted,
                                reconfigurations, loads) that then failed, by code */
    uint32_t op_count;       /* entries used in ops[] */
    wf_op_counters_t ops[WF_STATUS_MAX_OPS];
    uint64_t reconfigurations;        /* ended OK */
    uint64_t reconfigurations_failed; /* ended in an error */
    uint64_t reconfigure_ms;          /* time spent in both kinds */
    uint64_t nodes_lost;              /* cluster coordinator: nodes lost */
    uint64_t handshakes_refused;      /* CURVE handshakes refused (ZAP) */
    uint64_t handshakes_admitted;     /* and admitted */
} wf_status_counters_t;

/* What status reports. */
typedef struct wf_status_info {
    char weft_version[32];    /* daemon version string */
    char backend[16];         /* "cpu" or "cuda" */
    uint64_t epoch;           /* mesh epoch */
    uint64_t uptime_ms;       /* since the daemon started */
    uint32_t queue_depth;     /* jobs admitted and not yet dispatched */
    uint32_t queue_capacity;  /* bound of the job queue */
    uint32_t in_flight;       /* jobs running on devices */
    uint64_t jobs_served;     /* jobs finished successfully */
    uint64_t jobs_failed;     /* jobs finished with an error */
    uint64_t requests_rejected; /* requests refused before queueing */
    uint64_t rss_bytes;       /* resident memory of the daemon */
    wf_mesh_degrees_t mesh;           /* current mesh degrees */
    uint32_t reconfiguring;   /* 1 while a reconfiguration runs */
    uint32_t device_count;    /* entries used in devices[] */
    wf_device_info_t devices[WF_STATUS_MAX_DEVICES];
    /* cluster (PROTOCOL.md 3.2): role "single", "coordinator" or "member";
     * the others are 0 / "" for "single" */
    char role[16];            /* this daemon's role */
    char coordinator[64];     /* HOST:PORT of the coordinator */
    char cluster_state[24];   /* "forming", "serving", "degraded", "waiting",
                                 "coordinator-lost" */
    uint64_t world_epoch;     /* epoch of the current world (each rendezvous + 1) */
    uint32_t world_size;      /* ranks of the world */
    char world_id[40];        /* fresh per epoch (hex); the NCCL unique-id slot */
    uint32_t node_count;      /* entries used in nodes[] */
    wf_node_info_t nodes[WF_STATUS_MAX_NODES];
    wf_status_counters_t counters; /* operators' counters (since 0.2) */
} wf_status_info_t;

/* Ask the daemon for its status. */
WF_API wf_status_t wf_status(wf_client_t *client,
                             wf_status_info_t *ret_info);

/* Options of an attention job. Zero-initialise, then set what you need. */
/* How ring attention moves K/V between ranks. */
typedef enum wf_rotate {
    WF_ROTATE_DEFAULT = 0,   /* the daemon's rotate_method setting */
    WF_ROTATE_ALLGATHER = 1, /* gather every K/V shard first (diffusers) */
    WF_ROTATE_ALLTOALL = 2   /* pass one shard per step, overlapped with compute */
} wf_rotate_t;

/* A tri-state option: zero means "the daemon's setting". */
typedef enum wf_opt {
    WF_OPT_DEFAULT = 0,
    WF_OPT_ON = 1,
    WF_OPT_OFF = 2
} wf_opt_t;

/* The precision of a job's attention (added in 0.5; feature "fp8"). */
typedef enum wf_precision {
    WF_PRECISION_DEFAULT = 0, /* the inputs' dtypes, f32 accumulation */
    WF_PRECISION_FP8 = 1      /* q, k, v quantized to fp8 (e4m3) per (batch,
                                 head), f32 accumulation: faster on GPUs with
                                 fp8 tensor cores (compute capability 9.0),
                                 less exact. Refused with WF_E_UNSUPPORTED by
                                 a daemon whose devices have none (the CPU),
                                 and by libweft, nothing sent, when the
                                 daemon does not announce "fp8" */
} wf_precision_t;

typedef struct wf_attention_opts {
    float scale;        /* softmax scale; 0 means 1/sqrt(D) */
    int causal;         /* 1: query i sees keys j <= i (top-left aligned) */
    uint32_t devices;   /* mesh with ring = ulysses = 1 only: at most this many
                           tp ranks split the heads; 0: all of them */
    wf_rotate_t rotate_method;  /* ring: allgather or alltoall */
    wf_opt_t convert_to_fp32;   /* ring: merge per-step results in fp32 */
    wf_opt_t ring_anything;     /* allow S not divisible by the shards */
    wf_opt_t ulysses_anything;  /* allow heads not divisible by ulysses */
    wf_opt_t load_balance;      /* causal ring: zigzag sharding */
    uint32_t deadline_ms;       /* fail the job with WF_E_DEADLINE when it is not
                                   done this many ms after the daemon received
                                   it; 0: none (the daemon's job_timeout_ms
                                   still applies). Added in 0.4: keep the
                                   struct zero-initialised */
    wf_precision_t precision;   /* WF_PRECISION_FP8: fp8 attention (see
                                   wf_precision_t); added in 0.5 */
} wf_attention_opts_t;

/* Change the mesh of a running daemon (hot reconfiguration). The daemon
 * validates the degrees first: each must be in 1..4096 (refused here with
 * WF_E_BAD_ARGUMENT, nothing sent) and their product must equal its device
 * count (WF_E_BAD_ARGUMENT; nothing changes). Then it stops dispatching,
 * drains running jobs, regroups, bumps the epoch and resumes. Queued jobs
 * wait; none is dropped. WF_E_BUSY when another reconfiguration runs.
 * It can take as long as the longest running job, within the client's
 * timeout. On success *ret_epoch (when not NULL) is the new epoch. */
WF_API wf_status_t wf_reconfigure(wf_client_t *client, const wf_mesh_degrees_t *mesh,
                                  uint64_t *ret_epoch);

/* What a forward of a denoising session did with its first-block cache
 * (wf_forward_opts_t.session). */
typedef enum wf_cache_use {
    WF_CACHE_NONE = 0,      /* no session: every block computed */
    WF_CACHE_COMPUTED = 1,  /* every block computed (the cache refreshed) */
    WF_CACHE_REUSED = 2     /* the first block computed, the rest's residual
                               reused from the session's last computed step */
} wf_cache_use_t;

/* Result of a finished job. */
typedef struct wf_job_result {
    wf_status_t status;   /* WF_OK or the error */
    uint64_t epoch;       /* mesh epoch the job ran under */
    uint64_t queue_us;    /* time waiting in the daemon's queue */
    uint64_t compute_us;  /* time on the devices */
    uint32_t devices;     /* devices the job used */
    uint32_t cache;       /* a forward: a wf_cache_use_t (added in 0.7, in
                             what was padding: the struct's size is 0.6's) */
} wf_job_result_t;

/* Attention forward, synchronous.
 *   q: (B, Sq, Hq, D)   k, v: (B, Skv, Hkv, D), Hkv divides Hq (GQA)
 *   out: (B, Sq, Hq, D), caller-allocated, any of the three dtypes
 *   lse: (B, Sq, Hq) f32, caller-allocated; NULL if not wanted
 * q, k, v may have different dtypes. Blocks up to the client's timeout.
 * Fills *ret_result when not NULL. */
WF_API wf_status_t wf_attention(wf_client_t *client, const wf_tensor_t *q,
                                const wf_tensor_t *k, const wf_tensor_t *v,
                                const wf_attention_opts_t *opts,
                                wf_tensor_t *out, float *lse,
                                wf_job_result_t *ret_result);

/* Attention forward, asynchronous: sends the job and returns at once
 * (while no connection to the daemon is up, it waits for one, up to the
 * client's timeout: WF_E_TIMEOUT, nothing sent).
 * Same arguments as wf_attention; q, k, v, out and lse are borrowed until
 * the job is finished. *ret_job is set on success; caller owns it and
 * destroys it with wf_job_destroy. */
WF_API wf_status_t wf_attention_submit(wf_client_t *client,
                                       const wf_tensor_t *q,
                                       const wf_tensor_t *k,
                                       const wf_tensor_t *v,
                                       const wf_attention_opts_t *opts,
                                       wf_tensor_t *out, float *lse,
                                       wf_job_t **ret_job);

/* Check without blocking: WF_E_PENDING while the job runs, otherwise the
 * job's final status (its result is then available). */
WF_API wf_status_t wf_job_poll(wf_client_t *client, wf_job_t *job);

/* Block until the job finishes or `timeout_ms` passes (< 0: forever).
 * Returns the job's status, or WF_E_TIMEOUT (the job stays pending). */
WF_API wf_status_t wf_job_wait(wf_client_t *client, wf_job_t *job,
                               int timeout_ms);

/* Result of a finished job; WF_E_PENDING if it is not finished. */
WF_API wf_status_t wf_job_result(const wf_job_t *job,
                                 wf_job_result_t *ret_result);

/* Error message of a finished job ("" on success). Borrowed until
 * wf_job_destroy. */
WF_API const char *wf_job_error(const wf_job_t *job);

/* Ask the daemon to cancel a submitted job (queued or running). The call
 * waits for the cancel's own answer: WF_OK when the daemon found the job
 * (the job then finishes with WF_E_CANCELLED: at once when it was queued,
 * at its next step boundary when it runs; if it finished first, its
 * result stands), WF_E_BAD_ARGUMENT when it has no such job of this
 * client (already answered, or never admitted). Keep waiting for the job
 * (wf_job_wait) to read its final status. */
WF_API wf_status_t wf_cancel(wf_client_t *client, wf_job_t *job);

/* The request id of a submitted job (the id the daemon's log and status
 * name, and that wf_cancel_id takes); 0 for NULL. */
WF_API uint64_t wf_job_id(const wf_job_t *job);

/* Cancel by request id, as weftctl cancel does: the same op as wf_cancel
 * for a job this library did not submit. A submit client reaches only
 * jobs of its own connection (WF_E_BAD_ARGUMENT otherwise); an admin
 * client reaches its own job with that id first, else the oldest queued,
 * else a running one with that id from any connection (PROTOCOL.md
 * section 3.6). The job's owner gets WF_E_CANCELLED. */
WF_API wf_status_t wf_cancel_id(wf_client_t *client, uint64_t id);

/* Forget a job (a reply that arrives later is discarded) and free it; sets
 * *job to NULL. Blocks until the library no longer reads the job's input
 * buffers. Accepts NULL and a pointer to NULL. */
WF_API void wf_job_destroy(wf_client_t *client, wf_job_t **job);


/* ---- resident models (FLUX transformers) ---------------------------------
 * A model is a diffusers model directory (config.json + safetensors, one
 * file or shards with their index.json) under the daemon's model root. The
 * daemon keeps it resident, sharded over the tensor-parallel ranks of the
 * mesh, and serves forward jobs on it. See proto/PROTOCOL.md section 12. */

/* How one linear layer is split over the tp ranks (diffusers' tp_plan). */
typedef enum wf_tp_style {
    WF_TP_REPLICATED = 0,     /* every rank holds the whole weight */
    WF_TP_COLWISE = 1,        /* weight [out, in] split on out (bias too) */
    WF_TP_ROWWISE = 2,        /* split on in; partial sums all-reduced; bias replicated */
    WF_TP_PACKED_COLWISE = 3, /* fused outputs: out cut into blocks, each split */
    WF_TP_PACKED_ROWWISE = 4  /* fused inputs: in cut into blocks, each split */
} wf_tp_style_t;

/* Wire name of a style ("colwise", ...), or NULL if unknown. */
WF_API const char *wf_tp_style_name(wf_tp_style_t s);

#define WF_TP_GLOB_MAX 128    /* glob length, with the NUL */
#define WF_TP_MAX_BLOCKS 8    /* blocks of a packed rule */
#define WF_TP_MAX_RULES 64    /* rules of a plan */

/* One rule of a plan: modules whose name matches `glob` (a '*' matches
 * one dot-free component, e.g. a block index) get `style`. Packed styles
 * give the fused parts' relative sizes in blocks[] (FLUX's single-block
 * proj_out: {1, 4}, i.e. [dim, 4 * dim]); other styles n_blocks = 0. */
typedef struct wf_tp_rule {
    char glob[WF_TP_GLOB_MAX];
    wf_tp_style_t style;
    uint32_t n_blocks;
    uint32_t blocks[WF_TP_MAX_BLOCKS];
} wf_tp_rule_t;

/* Options of wf_load_model. Zero-initialise. */
typedef struct wf_load_opts {
    const wf_tp_rule_t *plan;   /* tp plan; NULL / n_plan 0: the family's default */
    uint32_t n_plan;            /* rules in plan (<= WF_TP_MAX_RULES) */
    int weights_already_sharded; /* 1: `path` holds per-rank files written by
                                    `weftctl shard` (README "Sharded checkpoints") */
} wf_load_opts_t;

#define WF_MODEL_NAME_MAX 64
#define WF_MODEL_PATH_LEN 256   /* model path in requests, with the NUL */
#define WF_MODELS_MAX 16     /* models a daemon holds at once */
#define WF_MODEL_NODES_LEN 256  /* a model's `nodes` in list_models, with the NUL */

/* A model's architecture as the daemon read it from its config.json
 * (list_models' "config"): the fields of diffusers' config that its
 * family reads, under diffusers' names, in the family's order. A value
 * is an integer, a flag (0 / 1) or a list of integers. */
#define WF_MODEL_CONFIG_MAX 32      /* entries */
#define WF_MODEL_CONFIG_KEY_MAX 40  /* key length, with the NUL */
#define WF_MODEL_CONFIG_VALUES 8    /* values of a list */
typedef enum wf_config_kind {
    WF_CONFIG_INT = 0,
    WF_CONFIG_FLAG = 1,
    WF_CONFIG_LIST = 2
} wf_config_kind_t;
typedef struct wf_model_config_entry {
    char key[WF_MODEL_CONFIG_KEY_MAX];
    wf_config_kind_t kind;
    uint32_t n;                     /* values used (1 unless a list) */
    int64_t v[WF_MODEL_CONFIG_VALUES];
} wf_model_config_entry_t;
typedef struct wf_model_config {
    uint32_t present;               /* 0: not known (loading, or a daemon
                                       before this field) */
    uint32_t n;                     /* entries used */
    wf_model_config_entry_t e[WF_MODEL_CONFIG_MAX];
} wf_model_config_t;

/* Value i of config entry `key`, or `dflt` when there is none. */
WF_API int64_t wf_model_config_get(const wf_model_config_t *c, const char *key,
                                   uint32_t i, int64_t dflt);

/* What a model's forward takes and gives (list_models' "schema"): each
 * tensor's name, the dtypes it may have, its rank, and each dimension as
 * a fixed size or a named size that every tensor naming it shares (the
 * batch "B", a sequence length). The daemon checks a forward's tensors
 * against it (wf_schema_bind): names, dtypes, ranks, fixed sizes, and
 * that named sizes agree. The mesh adds its own rules (a sequence that
 * ring x ulysses must divide), said in the refusal. */
#define WF_SCHEMA_NAME_MAX 32       /* tensor and size names, with the NUL */
#define WF_SCHEMA_MAX_INPUTS 16
#define WF_SCHEMA_MAX_OUTPUTS 4
typedef struct wf_schema_dim {
    int64_t size;                   /* > 0: fixed; 0: the named size `sym` */
    char sym[WF_SCHEMA_NAME_MAX];   /* its name ("B", "S_img"); for a fixed
                                       size the config field it comes from */
} wf_schema_dim_t;
typedef struct wf_schema_tensor {
    char name[WF_SCHEMA_NAME_MAX];
    uint32_t dtypes;                /* bit (1u << dtype) for each accepted
                                       wf_dtype_t; an output: any of them,
                                       chosen with out_dtype */
    uint32_t optional;              /* 1: an input that may be absent */
    uint32_t rank;
    wf_schema_dim_t dim[WF_MAX_RANK];
} wf_schema_tensor_t;
typedef struct wf_model_schema {
    uint32_t n_inputs, n_outputs;
    wf_schema_tensor_t inputs[WF_SCHEMA_MAX_INPUTS];
    wf_schema_tensor_t outputs[WF_SCHEMA_MAX_OUTPUTS];
} wf_model_schema_t;

/* A tensor with its name, as a forward's inputs and outputs travel. */
typedef struct wf_named_tensor {
    const char *name;
    const wf_tensor_t *tensor;
} wf_named_tensor_t;

/* The input or output `name` of a schema, or NULL. */
WF_API const wf_schema_tensor_t *wf_schema_find(const wf_schema_tensor_t *t,
                                                uint32_t n, const char *name);

/* One resident (or loading) model as list_models reports it. */
typedef struct wf_model_info {
    char name[WF_MODEL_NAME_MAX];  /* the name given at load */
    char path[WF_MODEL_PATH_LEN];  /* relative to the model root */
    char family[32];               /* its family ("flux"): what the daemon
                                      read in config.json's _class_name */
    char state[16];                /* "loading", "ready" */
    char dtype[8];                 /* checkpoint dtype: "f32", "f16", "bf16" */
    uint64_t params;               /* parameters */
    uint64_t bytes_total;          /* checkpoint bytes to read */
    uint64_t bytes_loaded;         /* read so far (progress; = total when ready) */
    uint64_t host_bytes;           /* host copy kept for re-sharding */
    uint64_t rank_bytes;           /* largest per-rank shard in a device's memory */
    uint32_t tp;                   /* tp degree its shards are cut for */
    uint32_t sharded_input;        /* loaded from per-rank files */
    uint64_t load_ms;              /* time of the load (0 while loading) */
    char device[16];               /* where the shards live and run: "cpu", "cuda" */
    char compute[8];               /* dtype of the weights as the device holds
                                      them ("f32" on the CPU; the checkpoint's
                                      on a GPU, accumulating in f32) */
    uint32_t host_pinned;          /* host copy pinned for fast re-shard copies */
    char nodes[WF_MODEL_NODES_LEN]; /* a cluster's nodes holding it and their
                                      world ranks, "NODE:FIRST-LAST,..." in
                                      rank order ("" on a single node, and
                                      from daemons before this field) */
    wf_model_config_t config;      /* its architecture, once checked (not
                                      while "loading") */
    wf_model_schema_t schema;      /* its forward's inputs and outputs, with
                                      config.present (0 from daemons before
                                      protocol version 2) */
} wf_model_info_t;

/* Load a model: blocks until it is resident on every rank (or refused),
 * up to the client's timeout. The daemon refuses a name in use, a path
 * outside the model root, a bad checkpoint, a plan that does not divide,
 * and a model that does not fit (WF_E_NO_MEMORY, before reading weights);
 * each with a message (wf_client_last_error) and nothing changed.
 * WF_E_BUSY while another load or a reconfiguration runs. Progress shows
 * in wf_list_models (bytes_loaded) from another connection. *ret_info may
 * be NULL. */
WF_API wf_status_t wf_load_model(wf_client_t *client, const char *name,
                                 const char *path, const wf_load_opts_t *opts,
                                 wf_model_info_t *ret_info);

/* Unload a model (after the jobs queued before it). */
WF_API wf_status_t wf_unload_model(wf_client_t *client, const char *name);

/* List models: up to `cap` entries into ret (may be NULL with cap 0);
 * *ret_n gets how many the daemon holds. */
WF_API wf_status_t wf_list_models(wf_client_t *client, wf_model_info_t *ret,
                                  size_t cap, size_t *ret_n);

/* Options of a forward job (added in 0.4: keep the struct
 * zero-initialised; NULL means all defaults). */
typedef struct wf_forward_opts {
    uint32_t deadline_ms; /* fail the job with WF_E_DEADLINE when it is not
                             done this many ms after the daemon received it
                             (checked while queued and at each layer of its
                             run); 0: none (the daemon's job_timeout_ms
                             still applies) */
    wf_precision_t precision; /* WF_PRECISION_FP8: the model's attention in
                                 fp8 (see wf_precision_t); added in 0.5 */
    uint32_t split_batch; /* non-zero: the batch's samples are independent
                             (classifier-free guidance's branches, several
                             images per prompt): the daemon splits them over
                             its dp replicas, each computing its part at once
                             with its own ring / ulysses / tp group, and the
                             output is theirs in batch order, equal to the
                             unsplit forward's. Ignored where dp is 1 or B is
                             1, and in a cluster (the job runs unsplit).
                             Added in 0.7: libweft sends it only to a daemon
                             announcing the feature "split_batch"; an older
                             one runs the job unsplit */
    /* A denoising session (added in 0.7; feature "sessions", else
     * WF_E_UNSUPPORTED): the forwards of one generation tagged with the
     * same non-zero id (the client's own; per connection, or per CURVE
     * key) and their step index (0, 1, ...; an index not above the last
     * one starts the session over). Its forwards run on one replica, which
     * keeps its first-block cache state until wf_end_session, the
     * daemon's session_idle_ms without a forward, or a reconfiguration;
     * its batch is never split. cache_threshold > 0: after the first
     * transformer block, when the relative L1 change of that block's
     * output residual since the session's last computed step is at most
     * the threshold, the other blocks are skipped and their cached residual
     * added (diffusers' FirstBlockCacheConfig(threshold)); 0: every block
     * computed, the output that of a forward without a session.
     * wf_job_result_t.cache says which. */
    uint64_t session;
    uint64_t step;
    double cache_threshold;
} wf_forward_opts_t;

/* End denoising session `session` of this client (wf_forward_opts_t): its
 * state on the devices is freed once its last forward is done. The
 * session's forwards and how many of them reused the cache into
 * *ret_steps / *ret_reused (either may be NULL). WF_E_BAD_ARGUMENT when
 * no such session is open (ended, or idle past the daemon's
 * session_idle_ms). Synchronous. */
WF_API wf_status_t wf_end_session(wf_client_t *client, uint64_t session, uint64_t *ret_steps,
                                  uint64_t *ret_reused);

/* Forward of resident model `model` with named tensors: `inputs` as the
 * model's schema names them (wf_model_info_t.schema, from wf_list_models:
 * names, dtypes, ranks, fixed and shared sizes), `outputs` caller-allocated
 * with the shapes the schema gives (any dtype, the same for every output:
 * the daemon converts). Over the mesh: tp ranks split the weights, ring x
 * ulysses ranks split the sequences. The daemon checks the tensors against
 * the schema and the mesh and refuses with a message (wf_client_last_error)
 * naming the tensor. Synchronous. */
WF_API wf_status_t wf_forward_named(wf_client_t *client, const char *model,
                                    const wf_named_tensor_t *inputs, size_t n_inputs,
                                    const wf_named_tensor_t *outputs, size_t n_outputs,
                                    const wf_forward_opts_t *opts,
                                    wf_job_result_t *ret_result);

/* wf_forward_named, asynchronous: sends the job and returns at once, as
 * wf_attention_submit. The tensors are borrowed until the job is
 * finished; wait with wf_job_wait, cancel with wf_cancel, free with
 * wf_job_destroy. */
WF_API wf_status_t wf_forward_named_submit(wf_client_t *client, const char *model,
                                           const wf_named_tensor_t *inputs,
                                           size_t n_inputs,
                                           const wf_named_tensor_t *outputs,
                                           size_t n_outputs,
                                           const wf_forward_opts_t *opts,
                                           wf_job_t **ret_job);

/* FLUX's forward as one call: a wrapper over wf_forward_named for the
 * "flux" family's inputs. */
/* Inputs of a FLUX forward, as diffusers' FluxTransformer2DModel takes them:
 *   hidden_states          (B, S_img, in_channels)      f32 / f16 / bf16
 *   encoder_hidden_states  (B, S_txt, joint_attention_dim)
 *   pooled_projections     (B, pooled_projection_dim)
 *   timestep               (B)         (the model multiplies by 1000)
 *   img_ids                (S_img, n_axes)    txt_ids (S_txt, n_axes)
 *   guidance               (B), only for guidance_embeds models, else NULL
 * output: (B, S_img, patch^2 * out_channels), caller-allocated, any dtype. */
typedef struct wf_flux_inputs {
    const wf_tensor_t *hidden_states;
    const wf_tensor_t *encoder_hidden_states;
    const wf_tensor_t *pooled_projections;
    const wf_tensor_t *timestep;
    const wf_tensor_t *img_ids;
    const wf_tensor_t *txt_ids;
    const wf_tensor_t *guidance;
} wf_flux_inputs_t;

/* Forward of resident model `model`, synchronous. Over the mesh: tp ranks
 * split the weights, ring x ulysses ranks split the sequences. */
WF_API wf_status_t wf_forward(wf_client_t *client, const char *model,
                              const wf_flux_inputs_t *in, wf_tensor_t *output,
                              wf_job_result_t *ret_result);

/* wf_forward with options. */
WF_API wf_status_t wf_forward_ex(wf_client_t *client, const char *model,
                                 const wf_flux_inputs_t *in, wf_tensor_t *output,
                                 const wf_forward_opts_t *opts,
                                 wf_job_result_t *ret_result);

/* Forward, asynchronous: sends the job and returns at once, as
 * wf_attention_submit. The inputs and `output` are borrowed until the job
 * is finished; wait with wf_job_wait, cancel with wf_cancel, free with
 * wf_job_destroy. */
WF_API wf_status_t wf_forward_submit(wf_client_t *client, const char *model,
                                     const wf_flux_inputs_t *in, wf_tensor_t *output,
                                     const wf_forward_opts_t *opts, wf_job_t **ret_job);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_H */
