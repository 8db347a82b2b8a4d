/* config.c — the settings table and its sources (see config.h).
 *
 * Every setting is one row of `settings_table`; defaults, parsing, bounds,
 * --help and the reload rules all read that row, so adding a setting is
 * adding a row (and a field to wf_settings_t).
 */
#include "config.h"

#include "backend.h"
#include "errf.h"
#include "mesh.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef enum setting_kind {
    KIND_ENDPOINT,  /* char[WF_SETTINGS_ENDPOINT_MAX] */
    KIND_DEVICES,   /* "cpu:N" / "cuda[:I,...]" -> devices, device_kind, count, gpu */
    KIND_U32,       /* uint32_t; K/M/G/T suffixes accepted */
    KIND_U64,       /* uint64_t; K/M/G/T suffixes accepted */
    KIND_LEVEL,     /* uint32_t holding a wf_log_level_t */
    KIND_MESH,      /* "dp=..,ring=..": mesh text + mesh_deg */
    KIND_ROTATE,    /* uint32_t holding a wf_rotate_t: allgather | alltoall */
    KIND_BOOL,      /* bool: true/false, yes/no, on/off, 1/0 */
    KIND_HOSTPORT,  /* char[WF_SETTINGS_NAME_MAX]: "" or HOST:PORT */
    KIND_NAME,      /* char[WF_SETTINGS_NAME_MAX]: "" or [A-Za-z0-9._-]{1,63} */
    KIND_PATH,      /* char[WF_SETTINGS_PATH_MAX]: "" or an absolute path */
    KIND_MODE,      /* uint32_t file mode bits, octal text ("0660"), <= max */
    KIND_GPU_MEMORY, /* wf_gpu_memory_t: bytes or a fraction (wf_parse_gpu_memory) */
    KIND_CUDA_ATTN, /* char[WF_SETTINGS_NAME_MAX]: wf_cuda_attention_kernel_ok */
    KIND_GRAPHS     /* uint32_t holding a wf_graph_mode_t: off | blocks */
} setting_kind_t;

typedef struct setting_def {
    const char *name;       /* key in the file; flag --name with '-'; env WEFT_NAME */
    setting_kind_t kind;    /* how the value is parsed and stored */
    size_t offset;          /* of the field in wf_settings_t */
    const char *def;        /* default as text; NULL: from wf_limits_default */
    uint64_t min, max;      /* bounds of integer kinds */
    bool reloadable;        /* SIGHUP applies it without a restart */
    const char *help;       /* one line for --help */
} setting_def_t;

#define OFF(f) offsetof(wf_settings_t, f)
#define GIB (UINT64_C(1) << 30)

static const setting_def_t settings_table[] = {
    { "listen", KIND_ENDPOINT, OFF(listen), WF_DEFAULT_ENDPOINT, 0, 0, false,
      "ZeroMQ endpoint to bind (ipc://PATH or tcp://HOST:PORT)" },
    { "devices", KIND_DEVICES, OFF(devices), "cpu:2", 1,
      WF_SETTINGS_MAX_DEVICES, false, "devices to own: cpu:N (N virtual CPU devices), cuda (every GPU) or "
      "cuda:I[,I...] (those GPUs; a repeated index: several ranks on one GPU)" },
    { "queue_capacity", KIND_U32, OFF(queue_capacity), "64", 1, 65536, true,
      "jobs admitted and waiting for devices; more get WF_E_QUEUE_FULL" },
    { "client_queue_jobs", KIND_U32, OFF(client_queue_jobs), "0", 0, 65536, true,
      "jobs one client (a CURVE key, else a connection) may have waiting; "
      "more get WF_E_QUEUE_FULL; 0 = a quarter of queue_capacity" },
    { "session_max", KIND_U32, OFF(session_max), "16", 1, 64, false,
      "denoising sessions open at once (forward's session); a new one past it "
      "gets WF_E_LIMIT" },
    { "session_idle_ms", KIND_U32, OFF(session_idle_ms), "60000", 100, UINT32_MAX, true,
      "a denoising session without a forward for this long ends (its cache "
      "state is freed)" },
    { "client_queue_bytes", KIND_U64, OFF(client_queue_bytes), "1G", 1,
      UINT64_C(1) << 50, true, "input bytes of one client's jobs, from receipt "
      "to completion; more get WF_E_QUEUE_FULL" },
    { "client_reply_bytes", KIND_U64, OFF(client_reply_bytes), "1G", 1,
      UINT64_C(1) << 50, true, "output bytes of one client's jobs from admission "
      "until ZeroMQ takes the reply (replies it does not read); more get "
      "WF_E_QUEUE_FULL" },
    { "max_header_bytes", KIND_U64, OFF(limits.max_header_bytes), NULL, 64,
      16u << 20, true, "largest msgpack header frame" },
    { "max_depth", KIND_U32, OFF(limits.max_depth), NULL, 2, 32, true,
      "deepest nesting of maps / arrays in a header" },
    { "max_elements", KIND_U32, OFF(limits.max_elements), NULL, 16, 1u << 20,
      true, "msgpack objects in one header, all levels" },
    { "max_str_bytes", KIND_U32, OFF(limits.max_str_bytes), NULL, 64, 1u << 20,
      true, "longest string / bin in a header" },
    { "max_tensors", KIND_U32, OFF(limits.max_tensors), NULL, 1,
      WF_PROTO_MAX_TENSORS, true, "tensor frames in one request" },
    { "max_tensor_bytes", KIND_U64, OFF(limits.max_tensor_bytes), NULL, 1,
      64 * GIB, true, "bytes of one tensor frame" },
    { "cpu_memory", KIND_U64, OFF(cpu_memory), "0", 0, UINT64_C(1) << 50,
      false, "job memory per CPU device in bytes; 0 = physical RAM / devices" },
    { "log_level", KIND_LEVEL, OFF(log_level), "info", 0, 0, true,
      "err, warning, notice, info or debug" },
    { "drain_timeout_ms", KIND_U32, OFF(drain_timeout_ms), "30000", 0,
      3600000, true, "at shutdown, how long queued and running jobs may take" },
    { "max_job_flops", KIND_U64, OFF(max_job_flops), "500000000000000", 0,
      UINT64_MAX, true, "bound on a job's estimated work in flops (attention "
      "4*B*Hq*Sq*Skv*D, halved when causal; forward 2*params*tokens plus its "
      "attention); more is refused at once with WF_E_LIMIT; 0 = no bound. "
      "5e14 admits a FLUX.1-dev forward at 1024x1024 (~1.1e14) and refuses "
      "q/k/v (1, 2^24, 1, 1) (~1.1e15, hours on one CPU device)" },
    { "job_timeout_ms", KIND_U32, OFF(job_timeout_ms), "900000", 0, UINT32_MAX,
      true, "longest a job may take from receipt (queued and running); a job's "
      "deadline_ms is capped by it; past it the job fails with WF_E_DEADLINE "
      "at its next step boundary; 0 = none" },
    { "reconfigure_timeout_ms", KIND_U32, OFF(reconfigure_timeout_ms), "60000", 0,
      UINT32_MAX, true, "how long a reconfiguration waits for running jobs to "
      "drain before it gives up (WF_E_BUSY; the old mesh keeps serving); 0 = "
      "waits for ever" },
    { "mesh", KIND_MESH, OFF(mesh), "", 0, 0, true,
      "degrees dp,ring,ulysses,tp (e.g. ring=2,ulysses=2), product = devices; "
      "empty = tp=devices; a change runs a hot reconfiguration; cluster: the "
      "world's mesh (the coordinator's counts), dp fitted to the world" },
    { "rotate_method", KIND_ROTATE, OFF(rotate_method), "allgather", 0, 0, true,
      "jobs' default ring K/V movement: allgather or alltoall; a resident model's "
      "forwards use it too (alltoall: one K/V shard per step, memory 1/ring)" },
    { "convert_to_fp32", KIND_BOOL, OFF(convert_to_fp32), "true", 0, 0, true,
      "jobs' default: merge ring steps in fp32" },
    { "ring_anything", KIND_BOOL, OFF(ring_anything), "false", 0, 0, true,
      "jobs' default: allow sequence lengths not divisible by the shards" },
    { "ulysses_anything", KIND_BOOL, OFF(ulysses_anything), "false", 0, 0, true,
      "jobs' default: allow heads / lengths not divisible by ulysses" },
    { "load_balance", KIND_BOOL, OFF(load_balance), "true", 0, 0, true,
      "jobs' default: zigzag sharding of causal ring attention" },
    { "coordinator", KIND_HOSTPORT, OFF(coordinator), "", 0, 0, false,
      "cluster: HOST:PORT of the rendezvous, the same on every node; with "
      "node_keys coordinator_node binds it, without (allow_anonymous) the first "
      "node that can bind it coordinates; empty = single node" },
    { "nodes", KIND_U32, OFF(nodes), "1", 1, WF_SETTINGS_MAX_NODES, false,
      "cluster: nodes expected in the world (the coordinator's value counts)" },
    { "node_name", KIND_NAME, OFF(node_name), "", 0, 0, false,
      "cluster: this node's name, unique in the world; empty = hostname" },
    { "cluster_timeout_ms", KIND_U32, OFF(cluster_timeout_ms), "10000", 100,
      3600000, false, "cluster: bound on each rendezvous step" },
    { "heartbeat_ms", KIND_U32, OFF(heartbeat_ms), "500", 10, 60000, false,
      "cluster: interval of the pings between coordinator and members" },
    { "heartbeat_timeout_ms", KIND_U32, OFF(heartbeat_timeout_ms), "2000", 50,
      600000, false, "cluster: silence after which a peer counts as lost" },
    { "data_address", KIND_NAME, OFF(data_address), "127.0.0.1", 0, 0, false,
      "cluster: address (host name or IP) this node's data-plane endpoints "
      "bind and announce to the other nodes; must be reachable from them; "
      "empty = the hostname" },
    { "cluster_recv_messages", KIND_U32, OFF(cluster_recv_messages), "4", 1,
      65536, false, "cluster: whole messages one peer's connection may have "
      "waiting unread on the tensor channel and on each comm_zmq data port "
      "(ZMQ_RCVHWM); past it ZeroMQ stops reading that connection and TCP "
      "pushes back on the sender (whose sends still never block: its own "
      "queue grows). A peer's complete messages then take at most (this + 2) "
      "x (2 x max_tensor_bytes + 4 KiB) there; not bounded by it: one "
      "multipart message that never ends (README \"Bounded cluster data "
      "plane\")" },
    { "comm_unexpected_bytes", KIND_U64, OFF(comm_unexpected_bytes), "0", 0,
      UINT64_C(1) << 50, false, "cluster: payload bytes one peer rank may have "
      "sent to a comm_zmq rank ahead of the receives posted for them; the "
      "message that would go over is dropped and counted and fails the "
      "rank's operation with WF_E_LIMIT (the world is aborted: the job fails, "
      "the daemon stays); 0 = 4 x (2 x max_tensor_bytes + 4 KiB)" },
    { "model_root", KIND_PATH, OFF(model_root), "", 0, 0, false,
      "absolute directory that load_model paths are relative to (nothing "
      "outside it is read); empty = no models" },
    /* security (README "Security"); none reloadable but client_keys */
    { "key_file", KIND_PATH, OFF(key_file), "", 0, 0, false,
      "this daemon's CURVE key pair (weftctl keygen writes one; mode 0600); "
      "needed by client_keys and node_keys" },
    { "client_keys", KIND_PATH, OFF(client_keys), "", 0, 0, true,
      "tcp:// clients allowed, one per line: ROLE KEY NAME (ROLE submit or "
      "admin, KEY a Z85 public key); set = CURVE on tcp:// endpoints; SIGHUP "
      "re-reads it; empty = none" },
    { "allow_anonymous", KIND_BOOL, OFF(allow_anonymous), "false", 0, 0, false,
      "allow a tcp:// client endpoint without client_keys on addresses other "
      "than loopback, and a cluster without node_keys on any address (anyone "
      "reaching them, on loopback any local user, may do anything)" },
    { "anonymous_admin", KIND_BOOL, OFF(anonymous_admin), "false", 0, 0, false,
      "anonymous clients of a loopback tcp:// endpoint (no client_keys) get the "
      "admin role; false: submit, as other local users on the ipc:// socket "
      "(allow_anonymous grants admin too)" },
    { "socket_mode", KIND_MODE, OFF(socket_mode), "0660", 0, 0777, false,
      "ipc:// endpoint: mode of the socket file (who may connect; local "
      "clients other than root and the daemon's user get the submit role)" },
    { "socket_group", KIND_NAME, OFF(socket_group), "", 0, 0, false,
      "ipc:// endpoint: group of the socket file; empty = the daemon's" },
    { "node_keys", KIND_PATH, OFF(node_keys), "", 0, 0, false,
      "cluster: the nodes admitted, one per line: NAME KEY (Z85 public key); "
      "set = CURVE on every daemon-to-daemon socket; the same file on every node" },
    { "coordinator_node", KIND_NAME, OFF(coordinator_node), "", 0, 0, false,
      "cluster with node_keys: the name of the node that coordinates (it binds "
      "the rendezvous; the others pin its key)" },
    { "user", KIND_NAME, OFF(user), "", 0, 0, false,
      "started as root: the user to switch to once the sockets are bound; "
      "empty = stay" },
    { "metrics_listen", KIND_HOSTPORT, OFF(metrics_listen), "", 0, 0, false,
      "HOST:PORT of the Prometheus metrics endpoint (HTTP GET /metrics, "
      "text format 0.0.4); loopback only unless allow_anonymous; empty = off" },
    { "metrics_connection_ms", KIND_U32, OFF(metrics_connection_ms), "5000", 100, 600000,
      false, "longest a metrics connection stays open from its accept, whatever it "
      "sends (a slow or trickling client cannot hold a slot past it)" },
    { "gpu_memory", KIND_GPU_MEMORY, OFF(gpu_memory), "0", 0, 0, false,
      "CUDA: the device arena of each GPU (weights, activations, workspaces; "
      "the ranks on one GPU share it equally): bytes (K/M/G/T, 64M..1P) or a "
      "fraction of the GPU's total memory (0.01..0.95, e.g. 0.5: room for "
      "another process); 0 = 90% of the free memory less 1 GiB at start" },
    { "cuda_attention", KIND_CUDA_ATTN, OFF(cuda_attention), "auto", 0, 0, false,
      "CUDA: the attention kernel: auto (wgmma on compute capability 9.0 "
      "built for sm_90a, else mma), wgmma, wgmma-pipe, mma, or the opt-in "
      "warp-specialized ws, ws-pipe, ws-pp, ws-pp-store, ws-full (-mc: with "
      "TMA multicast; +pipe, +pp, +store, +persist, +mc features); for "
      "comparisons and as a fallback" },
    { "cuda_gelu_epilogue", KIND_BOOL, OFF(cuda_gelu_epilogue), "true", 0, 0, false,
      "CUDA: GELU after a linear in cuBLASLt's epilogue; false = a kernel of "
      "its own after the product (the tanh form as the CPU backend computes it)" },
    { "cuda_graphs", KIND_GRAPHS, OFF(cuda_graphs), "off", 0, 0, false,
      "CUDA: blocks = each transformer block of a forward recorded once per "
      "shape as a CUDA graph and replayed as one launch (tp 1, ring x ulysses "
      "1; elsewhere and with off every kernel is launched as it comes)" },
    { "cuda_graphs_max", KIND_U32, OFF(cuda_graphs_max), "512", 1, 65536, false,
      "CUDA: most graphs each GPU rank keeps with cuda_graphs = blocks (one per "
      "block and shape; the least recently used goes)" },
    { "nccl", KIND_BOOL, OFF(nccl), "true", 0, 0, false,
      "CUDA: NCCL worlds when NCCL is built and every rank has its own GPU; "
      "false = the host comm staged through copies (for comparisons)" },
    { "nccl_init_timeout_ms", KIND_U32, OFF(nccl_init_timeout_ms), "30000",
      100, 3600000, false, "CUDA: bound on building an NCCL communicator" },
    /* zmtp: the client plane's transport (net/gate.h, PROTOCOL.md 1.1) */
    { "client_max_connections", KIND_U32, OFF(client_max_connections), "256", 1,
      65536, true, "client connections open at once; more are closed at accept" },
    { "client_max_handshakes", KIND_U32, OFF(client_max_handshakes), "64", 1,
      65536, true, "client connections in their ZMTP / CURVE handshake at once" },
    { "client_handshake_ms", KIND_U32, OFF(client_handshake_ms), "10000", 100,
      600000, true, "longest a client connection may take to its first message "
      "(greeting and handshake)" },
    { "client_max_frames", KIND_U32, OFF(client_max_frames), "18", 2, 64, true,
      "frames of one client message (delimiter, header, tensors); a longer "
      "message is refused with WF_E_LIMIT, its frames dropped unread" },
};

#define N_SETTINGS (sizeof settings_table / sizeof settings_table[0])

/* Find a setting by name; '-' and '_' are the same, case matters not. */
static const setting_def_t *find_setting(const char *name, size_t len)
{
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const char *t = settings_table[i].name;
        size_t j = 0;
        for (; j < len && t[j]; j++) {
            char c = name[j] == '-' ? '_' : (char)tolower((unsigned char)name[j]);
            if (c != t[j])
                break;
        }
        if (j == len && t[j] == '\0')
            return &settings_table[i];
    }
    return NULL;
}

bool wf_parse_size(const char *s, uint64_t *ret)
{
    if (!isdigit((unsigned char)s[0]))
        return false;   /* strtoull would accept "-1" and " 1" */
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0)
        return false;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case 'K': shift = 10; end++; break;
    case 'M': shift = 20; end++; break;
    case 'G': shift = 30; end++; break;
    case 'T': shift = 40; end++; break;
    default: break;
    }
    if (*end != '\0')
        return false;
    if (shift && v > (UINT64_MAX >> shift))
        return false;
    *ret = (uint64_t)v << shift;
    return true;
}

bool wf_parse_gpu_memory(const char *s, wf_gpu_memory_t *ret, char *why,
                         size_t why_len)
{
    const uint64_t lo = UINT64_C(64) << 20, hi = UINT64_C(1) << 50;
    wf_gpu_memory_t g = { 0, 0.0 };
    if (strchr(s, '.')) {
        char *end;
        errno = 0;
        double f = isdigit((unsigned char)s[0]) ? strtod(s, &end) : -1.0;
        if (f < 0 || errno || *end != '\0' || !(f >= 0.01 && f <= 0.95)) {
            snprintf(why, why_len, "expected a fraction of the GPU's memory in "
                     "[0.01, 0.95]");
            return false;
        }
        g.fraction = f;
    } else {
        uint64_t v;
        if (!wf_parse_size(s, &v) || (v != 0 && (v < lo || v > hi))) {
            snprintf(why, why_len, "expected 0, bytes in [64M, 1P] (K/M/G/T "
                     "suffixes allowed) or a fraction in [0.01, 0.95]");
            return false;
        }
        g.bytes = v;
    }
    *ret = g;
    return true;
}

bool wf_settings_parse_devices(const char *v, wf_settings_t *s, char *why,
                               size_t why_len)
{
    if (strcasecmp(v, "cuda") == 0) {
        snprintf(s->devices, sizeof s->devices, "cuda");
        s->device_kind = WF_DEVICE_CUDA;
        s->device_count = 0;             /* every GPU: resolved later */
        return true;
    }
    if (strncasecmp(v, "cuda:", 5) == 0) {
        int32_t gpu[WF_SETTINGS_MAX_DEVICES];
        uint32_t n = 0;
        const char *p = v + 5;
        for (;;) {
            char *end;
            errno = 0;
            if (!isdigit((unsigned char)*p)) {
                snprintf(why, why_len, "expected cuda, or cuda:I[,I...] with "
                         "GPU indices 0..%d", WF_SETTINGS_MAX_DEVICES - 1);
                return false;
            }
            unsigned long i = strtoul(p, &end, 10);
            if (errno || i >= WF_SETTINGS_MAX_DEVICES) {
                snprintf(why, why_len, "GPU index '%.*s' out of 0..%d",
                         (int)(end - p), p, WF_SETTINGS_MAX_DEVICES - 1);
                return false;
            }
            if (n == WF_SETTINGS_MAX_DEVICES) {
                snprintf(why, why_len, "more than %d devices",
                         WF_SETTINGS_MAX_DEVICES);
                return false;
            }
            gpu[n++] = (int32_t)i;
            p = end;
            while (*p == ' ')
                p++;
            if (*p == '\0')
                break;
            if (*p != ',') {
                snprintf(why, why_len, "expected ',' after GPU index %lu", i);
                return false;
            }
            p++;
            while (*p == ' ')
                p++;
        }
        size_t off = (size_t)snprintf(s->devices, sizeof s->devices, "cuda:");
        for (uint32_t k = 0; k < n; k++)
            off += (size_t)snprintf(s->devices + off, sizeof s->devices - off,
                                    "%s%d", k ? "," : "", gpu[k]);
        memcpy(s->gpu, gpu, n * sizeof gpu[0]);
        s->device_kind = WF_DEVICE_CUDA;
        s->device_count = n;
        return true;
    }
    if (strncasecmp(v, "cpu:", 4) != 0) {
        snprintf(why, why_len, "expected cpu:N, cuda or cuda:I[,I...]");
        return false;
    }
    uint64_t n;
    if (!wf_parse_size(v + 4, &n) || n < 1 || n > WF_SETTINGS_MAX_DEVICES) {
        snprintf(why, why_len, "expected cpu:N with N in 1..%d",
                 WF_SETTINGS_MAX_DEVICES);
        return false;
    }
    snprintf(s->devices, sizeof s->devices, "cpu:%" PRIu64, n);
    s->device_kind = WF_DEVICE_CPU;
    s->device_count = (uint32_t)n;
    return true;
}

bool wf_settings_resolve_gpus(wf_settings_t *s, int gpus, char *why,
                              size_t why_len)
{
    if (s->device_kind != WF_DEVICE_CUDA)
        return true;
    if (gpus <= 0) {
        snprintf(why, why_len, "no CUDA device found");
        return false;
    }
    if (strcmp(s->devices, "cuda") == 0) {
        uint32_t n = gpus > WF_SETTINGS_MAX_DEVICES ? WF_SETTINGS_MAX_DEVICES
                                                    : (uint32_t)gpus;
        for (uint32_t i = 0; i < n; i++)
            s->gpu[i] = (int32_t)i;
        s->device_count = n;
        return true;
    }
    for (uint32_t i = 0; i < s->device_count; i++)
        if (s->gpu[i] >= gpus) {
            snprintf(why, why_len, "cuda:%d: GPU index out of range (%d GPU%s: "
                     "0..%d)", s->gpu[i], gpus, gpus == 1 ? "" : "s", gpus - 1);
            return false;
        }
    return true;
}

bool wf_settings_gpu_shared(const wf_settings_t *s)
{
    if (s->device_kind != WF_DEVICE_CUDA)
        return false;
    for (uint32_t d = 0; d < s->device_count; d++)
        for (uint32_t e = d + 1; e < s->device_count; e++)
            if (s->gpu[d] == s->gpu[e])
                return true;
    return false;
}

static bool parse_endpoint(const char *v, char *why, size_t why_len)
{
    size_t len = strlen(v);
    if (len >= WF_SETTINGS_ENDPOINT_MAX) {
        snprintf(why, why_len, "endpoint longer than %d bytes",
                 WF_SETTINGS_ENDPOINT_MAX - 1);
        return false;
    }
    if (strncmp(v, "ipc://", 6) == 0) {
        /* sockaddr_un.sun_path holds 108 bytes with the NUL. */
        if (len - 6 == 0 || len - 6 > 107) {
            snprintf(why, why_len, "ipc path must have 1..107 characters");
            return false;
        }
        return true;
    }
    if (strncmp(v, "tcp://", 6) == 0 && len > 6)
        return true;
    snprintf(why, why_len, "expected ipc://PATH or tcp://HOST:PORT");
    return false;
}

/* Parse `value` into the field of `d` in *s. On failure writes why. */
static bool parse_value(const setting_def_t *d, const char *value,
                        wf_settings_t *s, char *why, size_t why_len)
{
    char *field = (char *)s + d->offset;
    switch (d->kind) {
    case KIND_ENDPOINT:
        if (!parse_endpoint(value, why, why_len))
            return false;
        snprintf(field, WF_SETTINGS_ENDPOINT_MAX, "%s", value);
        return true;
    case KIND_DEVICES:
        return wf_settings_parse_devices(value, s, why, why_len);
    case KIND_LEVEL: {
        wf_log_level_t lv;
        if (!wf_log_level_parse(value, &lv)) {
            snprintf(why, why_len, "expected err, warning, notice, info or debug");
            return false;
        }
        uint32_t u = (uint32_t)lv;
        memcpy(field, &u, sizeof u);
        return true;
    }
    case KIND_MESH: {
        wf_mesh_degrees_t deg;
        if (strlen(value) >= WF_SETTINGS_MESH_MAX) {
            snprintf(why, why_len, "longer than %d bytes", WF_SETTINGS_MESH_MAX - 1);
            return false;
        }
        if (wf_mesh_parse(value, &deg, why, why_len) != WF_OK)
            return false;
        snprintf(s->mesh, sizeof s->mesh, "%s", value);
        s->mesh_deg = deg;     /* checked against the devices at the end */
        return true;
    }
    case KIND_HOSTPORT: {
        if (value[0] == '\0') {
            field[0] = '\0';
            return true;
        }
        const char *colon = strrchr(value, ':');
        uint64_t port;
        if (strlen(value) >= WF_SETTINGS_NAME_MAX || !colon || colon == value ||
            !wf_parse_size(colon + 1, &port) || port < 1 || port > 65535 ||
            !isdigit((unsigned char)colon[strlen(colon) - 1])) {
            snprintf(why, why_len, "expected HOST:PORT (port 1..65535, at most "
                     "%d characters) or empty", WF_SETTINGS_NAME_MAX - 1);
            return false;
        }
        snprintf(field, WF_SETTINGS_NAME_MAX, "%s", value);
        return true;
    }
    case KIND_PATH: {
        size_t n = strlen(value);
        if (n >= WF_SETTINGS_PATH_MAX || (n > 0 && value[0] != '/')) {
            snprintf(why, why_len, "expected an absolute path of at most %d "
                     "bytes, or empty", WF_SETTINGS_PATH_MAX - 1);
            return false;
        }
        memcpy(field, value, n + 1);
        return true;
    }
    case KIND_NAME: {
        size_t n = strlen(value);
        if (n >= WF_SETTINGS_NAME_MAX) {
            snprintf(why, why_len, "longer than %d characters", WF_SETTINGS_NAME_MAX - 1);
            return false;
        }
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)value[i];
            if (!isalnum(c) && c != '.' && c != '_' && c != '-') {
                snprintf(why, why_len, "only letters, digits, '.', '_' and '-'");
                return false;
            }
        }
        memcpy(field, value, n + 1);
        return true;
    }
    case KIND_GRAPHS: {
        uint32_t u;
        if (strcmp(value, "off") == 0) {
            u = WF_GRAPHS_OFF;
        } else if (strcmp(value, "blocks") == 0) {
            u = WF_GRAPHS_BLOCKS;
        } else {
            snprintf(why, why_len, "expected off or blocks");
            return false;
        }
        memcpy(field, &u, sizeof u);
        return true;
    }
    case KIND_ROTATE: {
        uint32_t u;
        if (strcmp(value, "allgather") == 0) {
            u = WF_ROTATE_ALLGATHER;
        } else if (strcmp(value, "alltoall") == 0) {
            u = WF_ROTATE_ALLTOALL;
        } else {
            snprintf(why, why_len, "expected allgather or alltoall");
            return false;
        }
        memcpy(field, &u, sizeof u);
        return true;
    }
    case KIND_BOOL: {
        bool b;
        if (!strcasecmp(value, "true") || !strcasecmp(value, "yes") ||
            !strcasecmp(value, "on") || !strcmp(value, "1")) {
            b = true;
        } else if (!strcasecmp(value, "false") || !strcasecmp(value, "no") ||
                   !strcasecmp(value, "off") || !strcmp(value, "0")) {
            b = false;
        } else {
            snprintf(why, why_len, "expected true or false");
            return false;
        }
        memcpy(field, &b, sizeof b);
        return true;
    }
    case KIND_GPU_MEMORY: {
        wf_gpu_memory_t g;
        if (!wf_parse_gpu_memory(value, &g, why, why_len))
            return false;
        memcpy(field, &g, sizeof g);
        return true;
    }
    case KIND_CUDA_ATTN:
        if (strlen(value) >= WF_SETTINGS_NAME_MAX || !wf_cuda_attention_kernel_ok(value)) {
            snprintf(why, why_len, "expected auto, wgmma, wgmma-pipe, mma or a ws "
                     "form (ws, ws-pp, ws-full, ws+pipe+mc, ...)");
            return false;
        }
        snprintf(field, WF_SETTINGS_NAME_MAX, "%s", value);
        return true;
    case KIND_MODE: {
        char *end;
        errno = 0;
        unsigned long m = value[0] >= '0' && value[0] <= '7'
                        ? strtoul(value, &end, 8) : ULONG_MAX;
        if (m == ULONG_MAX || errno || *end != '\0' || m > d->max) {
            snprintf(why, why_len, "expected octal file mode bits 0..%03" PRIo64,
                     d->max);
            return false;
        }
        uint32_t u = (uint32_t)m;
        memcpy(field, &u, sizeof u);
        return true;
    }
    case KIND_U32:
    case KIND_U64: {
        uint64_t v;
        if (!wf_parse_size(value, &v)) {
            snprintf(why, why_len, "expected an integer (K/M/G/T suffixes allowed)");
            return false;
        }
        if (v < d->min || v > d->max) {
            snprintf(why, why_len, "%" PRIu64 " out of bounds [%" PRIu64
                     ", %" PRIu64 "]", v, d->min, d->max);
            return false;
        }
        if (d->kind == KIND_U32) {
            uint32_t u = (uint32_t)v;
            memcpy(field, &u, sizeof u);
        } else {
            memcpy(field, &v, sizeof v);
        }
        return true;
    }
    }
    return false;
}

/* The mesh against the device count: "" is tp = devices (today's head
 * split over every device); otherwise the product must match. */
static bool resolve_mesh(wf_settings_t *s, char *why, size_t why_len)
{
    if (s->mesh[0] == '\0' || wf_mesh_parse(s->mesh, &s->mesh_deg, NULL, 0) != WF_OK)
        s->mesh_deg = (wf_mesh_degrees_t){ 1, 1, 1, s->device_count };
    if (s->mesh[0] == '\0')
        return true;
    if (s->coordinator[0]) {
        /* cluster: the mesh of the world (nodes x devices); dp is fitted
         * to the world that forms, the inner degrees must divide it */
        uint64_t inner = (uint64_t)s->mesh_deg.ring * s->mesh_deg.ulysses * s->mesh_deg.tp;
        uint64_t world = (uint64_t)s->device_count * (s->nodes ? s->nodes : 1);
        if (inner == 0 || world % inner != 0) {
            snprintf(why, why_len, "mesh '%s': ring x ulysses x tp = %" PRIu64
                     " does not divide the world of %" PRIu64 " devices (nodes x "
                     "devices)", s->mesh, inner, world);
            return false;
        }
        return true;
    }
    wf_mesh_t m;
    if (wf_mesh_init(&m, &s->mesh_deg, (int)s->device_count, why, why_len) != WF_OK) {
        size_t n = strlen(why);
        if (n + 1 < why_len)
            snprintf(why + n, why_len - n, " (devices = %.64s)", s->devices);
        return false;
    }
    return true;
}

void wf_settings_default(wf_settings_t *ret)
{
    memset(ret, 0, sizeof *ret);
    wf_limits_default(&ret->limits);
    char why[256];
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_def_t *d = &settings_table[i];
        /* A default that does not parse is a bug in the table. */
        if (d->def && !parse_value(d, d->def, ret, why, sizeof why))
            abort();
    }
    resolve_mesh(ret, why, sizeof why);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static wf_status_t read_file(const char *path, wf_settings_t *s,
                             char *mesh_src, size_t mesh_src_len, char *err,
                             size_t err_len)
{
    FILE *f = fopen(path, "re");
    if (!f) {
        wf_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
        return WF_E_BAD_ARGUMENT;
    }
    char line[4096];
    unsigned lineno = 0;
    wf_status_t st = WF_OK;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            wf_errf(err, err_len, "%s:%u: line longer than %zu bytes", path,
                    lineno, sizeof line - 2);
            st = WF_E_BAD_ARGUMENT;
            break;
        }
        char *p = trim(line);
        if (*p == '\0' || *p == '#')
            continue;
        char *eq = strchr(p, '=');
        if (!eq) {
            wf_errf(err, err_len, "%s:%u: expected `key = value`", path, lineno);
            st = WF_E_BAD_ARGUMENT;
            break;
        }
        *eq = '\0';
        char *key = trim(p);
        char *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && value[0] == '"' && value[vlen - 1] == '"') {
            value[vlen - 1] = '\0';
            value++;
        }
        const setting_def_t *d = find_setting(key, strlen(key));
        if (!d) {
            wf_errf(err, err_len, "%s:%u: unknown setting '%s'", path, lineno, key);
            st = WF_E_BAD_ARGUMENT;
            break;
        }
        char why[256];
        if (!parse_value(d, value, s, why, sizeof why)) {
            wf_errf(err, err_len, "%s:%u: %s = '%s': %s", path, lineno, d->name,
                    value, why);
            st = WF_E_BAD_ARGUMENT;
            break;
        }
        if (d->kind == KIND_MESH)
            snprintf(mesh_src, mesh_src_len, "%s:%u", path, lineno);
    }
    if (st == WF_OK && ferror(f)) {
        wf_errf(err, err_len, "%s: read error", path);
        st = WF_E_BAD_ARGUMENT;
    }
    fclose(f);
    return st;
}

/* Value of NAME in a "K=V" array, or NULL. */
static const char *env_get(char *const *envp, const char *name)
{
    if (!envp)
        return NULL;
    size_t n = strlen(name);
    for (size_t i = 0; envp[i]; i++) {
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    }
    return NULL;
}

/* The test hooks: a table apart from the settings (environment only, not
 * in --help or the config file), so that no deployment sets them by
 * accident. Each parser fills its field or says why not. */
typedef struct test_hook_def {
    const char *env;        /* variable name */
    bool (*parse)(const char *v, wf_test_hooks_t *t, char *why, size_t why_len);
} test_hook_def_t;

static bool parse_fail_jobs(const char *v, wf_test_hooks_t *t, char *why,
                            size_t why_len)
{
    char buf[256];
    if (strlen(v) >= sizeof buf) {
        snprintf(why, why_len, "longer than %zu bytes", sizeof buf - 1);
        return false;
    }
    snprintf(buf, sizeof buf, "%s", v);
    t->n_fail_jobs = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (t->n_fail_jobs == WF_TEST_MAX_FAIL_JOBS ||
            !wf_parse_size(tok, &t->fail_jobs[t->n_fail_jobs])) {
            snprintf(why, why_len, "expected a list of at most %d sequence "
                     "numbers", WF_TEST_MAX_FAIL_JOBS);
            return false;
        }
        t->n_fail_jobs++;
    }
    return true;
}

static bool parse_protocol_version(const char *v, wf_test_hooks_t *t,
                                   char *why, size_t why_len)
{
    uint64_t u;
    if (!wf_parse_size(v, &u) || u > UINT32_MAX) {
        snprintf(why, why_len, "expected a version number");
        return false;
    }
    t->protocol_version = (uint32_t)u;
    return true;
}

static bool parse_hold_fifo(const char *v, wf_test_hooks_t *t, char *why,
                            size_t why_len)
{
    if (v[0] != '/' || strlen(v) >= sizeof t->hold_fifo) {
        snprintf(why, why_len, "expected an absolute path shorter than %zu "
                 "bytes", sizeof t->hold_fifo);
        return false;
    }
    snprintf(t->hold_fifo, sizeof t->hold_fifo, "%s", v);
    return true;
}

static const test_hook_def_t test_hooks_table[] = {
    { "WEFT_TEST_FAIL_JOB", parse_fail_jobs },
    { "WEFT_TEST_HOLD_JOBS", parse_hold_fifo },
    { "WEFT_TEST_PROTOCOL_VERSION", parse_protocol_version },
};

static void env_name(const setting_def_t *d, char *buf, size_t len)
{
    size_t j = (size_t)snprintf(buf, len, "WEFT_");
    for (size_t i = 0; d->name[i] && j + 1 < len; i++)
        buf[j++] = (char)toupper((unsigned char)d->name[i]);
    buf[j] = '\0';
}

wf_status_t wf_config_build(const wf_cli_t *cli, char *const *envp,
                            wf_settings_t *ret, char *err, size_t err_len)
{
    wf_settings_t s;
    wf_settings_default(&s);
    char mesh_src[160] = "default";

    const char *file = cli->config_file ? cli->config_file
                                        : env_get(envp, "WEFT_CONFIG");
    if (file && *file) {
        wf_status_t st = read_file(file, &s, mesh_src, sizeof mesh_src, err,
                                   err_len);
        if (st != WF_OK)
            return st;
    }

    char why[256];
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_def_t *d = &settings_table[i];
        char name[64];
        env_name(d, name, sizeof name);
        const char *v = env_get(envp, name);
        if (v && !parse_value(d, v, &s, why, sizeof why)) {
            wf_errf(err, err_len, "environment %s='%s': %s", name, v, why);
            return WF_E_BAD_ARGUMENT;
        }
        if (v && d->kind == KIND_MESH)
            snprintf(mesh_src, sizeof mesh_src, "environment %s", name);
    }

    for (size_t i = 0; i < sizeof test_hooks_table / sizeof test_hooks_table[0]; i++) {
        const char *v = env_get(envp, test_hooks_table[i].env);
        if (v && *v && !test_hooks_table[i].parse(v, &s.test, why, sizeof why)) {
            wf_errf(err, err_len, "environment %s='%s': %s (test hook)",
                    test_hooks_table[i].env, v, why);
            return WF_E_BAD_ARGUMENT;
        }
    }

    for (size_t i = 0; i < cli->n_sets; i++) {
        const setting_def_t *d = find_setting(cli->sets[i].name,
                                              strlen(cli->sets[i].name));
        if (!d || !parse_value(d, cli->sets[i].value, &s, why, sizeof why)) {
            char flag[64];
            size_t j = 0;
            for (; cli->sets[i].name[j] && j + 1 < sizeof flag; j++)
                flag[j] = cli->sets[i].name[j] == '_' ? '-' : cli->sets[i].name[j];
            flag[j] = '\0';
            wf_errf(err, err_len, "--%s '%s': %s", flag, cli->sets[i].value,
                    d ? why : "unknown setting");
            return WF_E_BAD_ARGUMENT;
        }
        if (d->kind == KIND_MESH)
            snprintf(mesh_src, sizeof mesh_src, "--mesh");
    }
    if (s.device_kind == WF_DEVICE_CUDA) {
        int gpus = 0;
        const char *cuda_why = NULL;
        if (wf_cuda_device_count(&gpus, &cuda_why) != WF_OK) {
            wf_errf(err, err_len, "devices = '%s': no usable CUDA device (%s)",
                    s.devices, cuda_why ? cuda_why : "CUDA runtime failed");
            return WF_E_BAD_ARGUMENT;
        }
        if (!wf_settings_resolve_gpus(&s, gpus, why, sizeof why)) {
            wf_errf(err, err_len, "devices = '%s': %s", s.devices, why);
            return WF_E_BAD_ARGUMENT;
        }
    }
    if (!resolve_mesh(&s, why, sizeof why)) {
        wf_errf(err, err_len, "%s: mesh = '%s': %s", mesh_src, s.mesh, why);
        return WF_E_BAD_ARGUMENT;
    }
    if (s.coordinator[0] && s.heartbeat_timeout_ms <= s.heartbeat_ms) {
        wf_errf(err, err_len, "heartbeat_timeout_ms (%u) must exceed heartbeat_ms "
                "(%u)", s.heartbeat_timeout_ms, s.heartbeat_ms);
        return WF_E_BAD_ARGUMENT;
    }
    *ret = s;
    return WF_OK;
}

wf_status_t wf_cli_parse(int argc, char **argv, wf_cli_t *ret_cli, char *err,
                         size_t err_len)
{
    wf_cli_t cli;
    memset(&cli, 0, sizeof cli);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli.help = true;
            continue;
        }
        if (strcmp(a, "--version") == 0) {
            cli.version = true;
            continue;
        }
        if (strcmp(a, "--check-config") == 0) {
            cli.check_config = true;
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            wf_errf(err, err_len, "unexpected argument '%s' (see --help)", a);
            return WF_E_BAD_ARGUMENT;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const char *value = eq ? eq + 1 : NULL;
        bool is_config = nlen == 6 && strncmp(name, "config", 6) == 0;
        const setting_def_t *d = is_config ? NULL : find_setting(name, nlen);
        if (!is_config && !d) {
            wf_errf(err, err_len, "unknown option '--%.*s' (see --help)",
                    (int)nlen, name);
            return WF_E_BAD_ARGUMENT;
        }
        if (!value) {
            if (i + 1 >= argc) {
                wf_errf(err, err_len, "option '--%.*s' needs a value", (int)nlen,
                        name);
                return WF_E_BAD_ARGUMENT;
            }
            value = argv[++i];
        }
        if (is_config) {
            cli.config_file = value;
            continue;
        }
        if (cli.n_sets == WF_CLI_MAX_SETS) {
            wf_errf(err, err_len, "too many options");
            return WF_E_BAD_ARGUMENT;
        }
        cli.sets[cli.n_sets].name = d->name;
        cli.sets[cli.n_sets].value = value;
        cli.n_sets++;
    }
    *ret_cli = cli;
    return WF_OK;
}

static bool field_equal(const setting_def_t *d, const wf_settings_t *a,
                        const wf_settings_t *b)
{
    const char *fa = (const char *)a + d->offset;
    const char *fb = (const char *)b + d->offset;
    switch (d->kind) {
    case KIND_ENDPOINT:
    case KIND_DEVICES:
    case KIND_HOSTPORT:
    case KIND_NAME:
    case KIND_PATH:
    case KIND_CUDA_ATTN:
        return strcmp(fa, fb) == 0;
    case KIND_GPU_MEMORY:
        return memcmp(fa, fb, sizeof(wf_gpu_memory_t)) == 0;
    case KIND_U32:
    case KIND_LEVEL:
    case KIND_MODE:
        return memcmp(fa, fb, sizeof(uint32_t)) == 0;
    case KIND_U64:
        return memcmp(fa, fb, sizeof(uint64_t)) == 0;
    case KIND_MESH:
        /* "" and "tp=N" on N devices are the same mesh */
        return memcmp(&a->mesh_deg, &b->mesh_deg, sizeof a->mesh_deg) == 0;
    case KIND_ROTATE:
    case KIND_GRAPHS:
        return memcmp(fa, fb, sizeof(uint32_t)) == 0;
    case KIND_BOOL:
        return memcmp(fa, fb, sizeof(bool)) == 0;
    }
    return true;
}

static void field_copy(const setting_def_t *d, wf_settings_t *dst,
                       const wf_settings_t *src)
{
    char *fd = (char *)dst + d->offset;
    const char *fs = (const char *)src + d->offset;
    switch (d->kind) {
    case KIND_ENDPOINT:
        memcpy(fd, fs, WF_SETTINGS_ENDPOINT_MAX);
        break;
    case KIND_HOSTPORT:
    case KIND_NAME:
    case KIND_CUDA_ATTN:
        memcpy(fd, fs, WF_SETTINGS_NAME_MAX);
        break;
    case KIND_GPU_MEMORY:
        memcpy(fd, fs, sizeof(wf_gpu_memory_t));
        break;
    case KIND_PATH:
        memcpy(fd, fs, WF_SETTINGS_PATH_MAX);
        break;
    case KIND_DEVICES:
        /* Never reloadable (workers own devices); kept for completeness. */
        memcpy(dst->devices, src->devices, sizeof dst->devices);
        dst->device_count = src->device_count;
        dst->device_kind = src->device_kind;
        memcpy(dst->gpu, src->gpu, sizeof dst->gpu);
        break;
    case KIND_U32:
    case KIND_LEVEL:
    case KIND_MODE:
        memcpy(fd, fs, sizeof(uint32_t));
        break;
    case KIND_U64:
        memcpy(fd, fs, sizeof(uint64_t));
        break;
    case KIND_MESH:
        memcpy(dst->mesh, src->mesh, sizeof dst->mesh);
        dst->mesh_deg = src->mesh_deg;
        break;
    case KIND_ROTATE:
    case KIND_GRAPHS:
        memcpy(fd, fs, sizeof(uint32_t));
        break;
    case KIND_BOOL:
        memcpy(fd, fs, sizeof(bool));
        break;
    }
}

size_t wf_settings_apply_reload(wf_settings_t *cur, const wf_settings_t *next,
                                const char **ret_restart, size_t max,
                                size_t *ret_n_restart)
{
    size_t applied = 0, restart = 0;
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_def_t *d = &settings_table[i];
        if (field_equal(d, cur, next))
            continue;
        if (d->reloadable) {
            field_copy(d, cur, next);
            applied++;
        } else {
            if (restart < max)
                ret_restart[restart] = d->name;
            restart++;
        }
    }
    *ret_n_restart = restart;
    return applied;
}

/* An empty text setting's value for --help's default column: "" and,
 * in parentheses, what its help line says an empty value means (the
 * words after "empty = ", up to a ';' or the end), so the two columns
 * cannot disagree; `fallback` where the help line does not say. */
static void format_empty(const setting_def_t *d, const char *fallback, char *buf,
                         size_t len)
{
    const char *e = strstr(d->help, "empty = ");
    if (e) {
        e += strlen("empty = ");
        snprintf(buf, len, "\"\" (%.*s)", (int)strcspn(e, ";"), e);
    } else if (fallback) {
        snprintf(buf, len, "\"\" (%s)", fallback);
    } else {
        snprintf(buf, len, "\"\"");
    }
}

static void format_value(const setting_def_t *d, const wf_settings_t *s,
                         char *buf, size_t len)
{
    const char *f = (const char *)s + d->offset;
    uint32_t u32;
    uint64_t u64;
    switch (d->kind) {
    case KIND_ENDPOINT:
    case KIND_DEVICES:
    case KIND_CUDA_ATTN:
        snprintf(buf, len, "%s", f);
        return;
    case KIND_GPU_MEMORY: {
        wf_gpu_memory_t g;
        memcpy(&g, f, sizeof g);
        if (g.fraction > 0)
            snprintf(buf, len, "%.2f", g.fraction);
        else
            snprintf(buf, len, "%" PRIu64, g.bytes);
        return;
    }
    case KIND_HOSTPORT:
    case KIND_NAME:
    case KIND_PATH:
        if (f[0])
            snprintf(buf, len, "%s", f);
        else
            format_empty(d, d->kind == KIND_PATH ? "none" : NULL, buf, len);
        return;
    case KIND_LEVEL:
        memcpy(&u32, f, sizeof u32);
        snprintf(buf, len, "%s", wf_log_level_name((wf_log_level_t)u32));
        return;
    case KIND_U32:
        memcpy(&u32, f, sizeof u32);
        snprintf(buf, len, "%" PRIu32, u32);
        return;
    case KIND_MODE:
        memcpy(&u32, f, sizeof u32);
        snprintf(buf, len, "0%03" PRIo32, u32);
        return;
    case KIND_U64:
        memcpy(&u64, f, sizeof u64);
        snprintf(buf, len, "%" PRIu64, u64);
        return;
    case KIND_MESH:
        snprintf(buf, len, "%s", s->mesh[0] ? s->mesh : "\"\" (tp=devices)");
        return;
    case KIND_ROTATE:
        memcpy(&u32, f, sizeof u32);
        snprintf(buf, len, "%s", u32 == WF_ROTATE_ALLTOALL ? "alltoall" : "allgather");
        return;
    case KIND_GRAPHS:
        memcpy(&u32, f, sizeof u32);
        snprintf(buf, len, "%s", u32 == WF_GRAPHS_BLOCKS ? "blocks" : "off");
        return;
    case KIND_BOOL: {
        bool b;
        memcpy(&b, f, sizeof b);
        snprintf(buf, len, "%s", b ? "true" : "false");
        return;
    }
    }
}

void wf_config_print_help(FILE *out, const char *argv0)
{
    wf_settings_t s;
    wf_settings_default(&s);
    fprintf(out,
            "usage: %s [--config FILE] [--SETTING VALUE]... [--check-config]\n"
            "       [--help] [--version]\n"
            "\n"
            "Serves attention jobs to libweft clients over ZeroMQ.\n"
            "Each setting comes from, last one winning: its default, the config\n"
            "file (`setting = value` lines, # comments), the environment variable\n"
            "WEFT_<SETTING>, the flag --setting VALUE (or --setting=VALUE).\n"
            "Integers accept K/M/G/T suffixes (powers of 1024). SIGHUP re-reads\n"
            "the file; settings marked 'reload' take effect, others need a restart.\n"
            "--check-config resolves every setting, reports the first error and\n"
            "exits (0: valid, 2: invalid) without starting.\n"
            "\n",
            argv0);
    fprintf(out, "%-18s %-28s %-26s %-6s %s\n", "setting", "default", "bounds",
            "reload", "meaning");
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const setting_def_t *d = &settings_table[i];
        char def[WF_SETTINGS_ENDPOINT_MAX], bounds[64] = "";
        format_value(d, &s, def, sizeof def);
        if (d->kind == KIND_U32 || d->kind == KIND_U64 || d->kind == KIND_DEVICES)
            snprintf(bounds, sizeof bounds, "%" PRIu64 "..%" PRIu64, d->min, d->max);
        else if (d->kind == KIND_GPU_MEMORY)
            snprintf(bounds, sizeof bounds, "0, 64M..1P or 0.01..0.95");
        fprintf(out, "%-18s %-28s %-26s %-6s %s\n", d->name, def, bounds,
                d->reloadable ? "yes" : "no", d->help);
    }
}
