/* server.c — weftd's main loop: ROUTER + signalfd + eventfd under
 * zmq_poll, request validation, hello / status, job replies, reload and
 * drain (see server.h). Compute happens on the workers, never here.
 */
#include "server.h"
#include "jobs/forward.h"
#include "models/models.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <zmq.h>

#include "jobs/attention.h"
#include "backend.h"
#include "cluster/cluster.h"
#include "comm/comm_host.h"
#include "comm/comm_nccl.h"
#include "comm/comm_zmq.h"
#include "runtime/job.h"
#include "base/mesh.h"
#include "base/notify.h"
#include "runtime/scheduler.h"
#include "runtime/worker.h"

/* identity, optional empty delimiter, header, tensor frames */
#define MAX_PARTS (3 + WF_PROTO_MAX_TENSORS)
/* messages read per wake-up, so signals and completions are not starved */
#define RECV_BATCH 64

/* Member: inputs of a job whose descriptor has not come yet (the two
 * travel on different sockets). Bounded; several jobs per replica may be
 * in flight, so inputs dropped for room make their part fail when its
 * descriptor comes (cl.early_lost) instead of waiting forever. */
#define XFER_EARLY 64
typedef struct xfer_early {
    uint64_t seq, epoch;         /* the job's sequence number, world epoch */
    uint32_t n;                  /* frames held */
    zmq_msg_t f[3];              /* q, k, v */
} xfer_early_t;

struct wf_server {
    wf_settings_t settings;      /* in effect (reload updates the reloadable ones) */
    const wf_cli_t *cli;         /* borrowed: flags, for reload */
    char *const *envp;           /* borrowed: environment, for reload */
    wf_log_t *log;               /* borrowed */
    wf_notify_t notify;          /* sd_notify state */
    const wf_backend_ops_t *ops; /* backend of every device */
    void *zctx;                  /* ZeroMQ context */
    void *router;                /* client endpoint */
    bool bound;                  /* router is bound to endpoint */
    bool activated;              /* the socket came from systemd (it owns the file) */
    char endpoint[WF_SETTINGS_ENDPOINT_MAX]; /* bound: settings.listen or the
                                  * activated socket's address */
    int sigfd;                   /* SIGTERM / SIGINT / SIGHUP */
    sigset_t old_mask;           /* signal mask to restore */
    bool mask_set;               /* old_mask is valid */
    struct sigaction old_act[3]; /* dispositions of handled_signals to restore */
    bool act_set;                /* old_act is valid */
    wf_done_box_t done;          /* finished jobs from the workers */
    wf_worker_t workers[WF_SETTINGS_MAX_DEVICES]; /* one per device */
    uint32_t n_workers;          /* workers started */
    bool nccl;                   /* new worlds are NCCL worlds (use_nccl) */
    wf_sched_t sched;            /* queue, admission, dispatch; the mesh in force */
    wf_comm_host_world_t *world; /* our reference on the workers' comm world */
    bool workers_stopped;        /* finish_drain stopped them: submit nothing */
    struct {                     /* the hot reconfiguration that runs, if any */
        bool active;             /* validated, dispatch paused */
        bool regrouping;         /* drained; its regroup job is on the workers */
        bool new_world;          /* regroup on a new world (the old was aborted) */
        wf_mesh_t target;        /* mesh it installs, epoch = old + 1 */
        wf_mesh_degrees_t from;  /* mesh it replaces, for the log */
        const char *why;         /* "request", "SIGHUP", "abort recovery" (static) */
        bool notify;             /* READY=1 at the end (RELOADING=1 was sent) */
        bool has_client;         /* a reconfigure request waits for the reply */
        zmq_msg_t identity;      /* its ROUTER identity (when has_client) */
        bool delim;              /* it sent an empty delimiter */
        uint64_t id;             /* its id */
        uint64_t t_start_us;     /* validated */
        uint64_t t_drained_us;   /* in-flight jobs done, regroup submitted */
        unsigned failures;       /* consecutive failed regroups */
    } reconf;
    uint64_t rejected;           /* requests refused before queueing */
    bool stopping;               /* draining: no new jobs */
    uint64_t drain_deadline_us;  /* when draining gives up */
    uint64_t t_start_us;         /* for uptime */
    wf_cluster_t *cluster;       /* control plane between nodes; NULL: single node */
    struct {                     /* cluster mode: this node's part of the world */
        wf_comm_zmq_local_t *local; /* abort domain of the world in force / forming */
        wf_comm_zmq_endpoint_t *spare[WF_SETTINGS_MAX_DEVICES]; /* bound, announced */
        char data[WF_SETTINGS_ENDPOINT_MAX]; /* their addresses ("tcp://h:p0,p1") */
        uint64_t world_epoch;    /* world whose regroup was submitted (0: none) */
        bool built;              /* its regroup succeeded */
        bool install;            /* built; install once nothing is in flight */
        bool aborted;            /* its local domain was aborted */
        wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES]; /* of world_epoch */
        uint32_t n_nodes;
        uint32_t first_rank;     /* world rank of workers[0] */
        uint32_t world_size;     /* ranks of the world */
        wf_mesh_t mesh;          /* mesh of that world (with its mesh epoch) */
        uint64_t abort_mesh_epoch; /* jobs of this mesh epoch died with a lost node */
        char lost[160];          /* names of the nodes lost then ("": none, a
                                    failed job aborted the world) */
        uint64_t failed_epoch;   /* world epoch known aborted by a failed job */
        uint64_t own_failures[WF_SETTINGS_MAX_DEVICES]; /* coordinator: each
                                    worker's own_failures already looked at */
        wf_djob_t *remote_jobs;  /* coordinator: jobs with parts on members */
        uint64_t epoch_override; /* member: mesh epoch of the coordinator's change */
        uint64_t reconf_world;   /* world epoch a mesh change started under */
        bool mesh_pending;       /* member: a mesh change waits for the running one */
        wf_mesh_degrees_t mesh_deg; /* its degrees */
        uint64_t mesh_epoch;     /* and mesh epoch */
        /* tensor channel (PROTOCOL.md section 11, "Tensor channel") */
        void *xfer;              /* ROUTER (coordinator) / DEALER (member);
                                    NULL: none */
        char xfer_ep[WF_SETTINGS_ENDPOINT_MAX]; /* bound / connected endpoint */
        uint32_t xfer_ready;     /* coordinator: bit i = node i said hi for
                                    world_epoch */
        wf_djob_t *mq_head, *mq_tail; /* member: parts and regroups not yet
                                    on the workers, in the coordinator's order */
        xfer_early_t early[XFER_EARLY]; /* member: inputs ahead of their job */
        uint32_t n_early;
        uint64_t early_lost_seq; /* member: inputs of jobs up to this seq of */
        uint64_t early_lost_epoch; /* this world epoch were dropped (0: none) */
    } cl;
    wf_registry_t models;        /* resident models (models.h) */
    wf_model_t *pending_install; /* read; its install regroup waits for the
                                    running reconfiguration */
    uint64_t t_extend_us;        /* last EXTEND_TIMEOUT_USEC while loading */
    wf_ctl_msg_t cl_msg;         /* job descriptor scratch (large) */
    wf_ctl_msg_t xf_msg;         /* tensor channel header scratch */
    wf_buf_t buf;                /* reply header encoding scratch */
    wf_request_t req;            /* request decoding scratch */
    wf_reply_t reply;            /* reply scratch (a status reply is ~6 KiB) */
};

/* cluster mode (defined with the cluster section below) */
static wf_status_t bind_spares(wf_server_t *srv);
static void cluster_message(void *arg, const char *from, const wf_ctl_msg_t *m);
static uint32_t cluster_remote(void *arg, wf_djob_t *job);
static void cluster_sync(wf_server_t *srv);
static bool cluster_ready(const wf_server_t *srv);
static wf_status_t xfer_bind(wf_server_t *srv);
static void xfer_recv(wf_server_t *srv);
static void xfer_close(wf_server_t *srv);

/* ------------------------------------------------------------------ */
/* start-up and teardown */

static const int handled_signals[3] = { SIGTERM, SIGINT, SIGHUP };

/* Threads that libraries start before main() (OpenBLAS's pool is one)
 * do not carry our signal mask, so the kernel may deliver SIGTERM to one
 * of them. Send it on to the main thread (its tid is the pid), which
 * keeps it blocked: it waits there for the signalfd. Async-signal-safe,
 * and needs no global. */
static void forward_to_main_thread(int signo)
{
    int saved = errno;
    pid_t pid = getpid();
    if (gettid() != pid)
        tgkill(pid, pid, signo);
    errno = saved;
}

/* Arena of a worker on GPU `gpu`: 0 (the backend takes 90% of the free
 * memory less 1 GiB) when the GPU has one worker; with k workers on it
 * (the mixed mode) each gets a k-th of that, as ctx_new would size one.
 * Asked before any worker starts, so every share is equal. */
static uint64_t gpu_budget(const wf_settings_t *s, int gpu)
{
    uint32_t k = 0;
    for (uint32_t d = 0; d < s->device_count; d++)
        k += s->gpu[d] == gpu;
    uint64_t free_b = 0, total_b = 0;
    if (k <= 1 || wf_cuda_device_memory(gpu, &free_b, &total_b) != WF_OK)
        return 0;
    const uint64_t reserve = UINT64_C(1) << 30; /* NCCL, cuBLAS, contexts */
    if (free_b <= reserve)
        return 0;                  /* ctx_new then says it does not fit */
    return (uint64_t)((double)(free_b - reserve) * 0.9) / k;
}

static uint64_t device_budget(const wf_settings_t *s)
{
    if (s->cpu_memory)
        return s->cpu_memory;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0)
        return UINT64_C(1) << 30;
    return (uint64_t)pages * (uint64_t)page / s->device_count;
}

static void set_max_msg_size(wf_server_t *srv)
{
    /* ZeroMQ drops a peer that sends a bigger frame, before we see it. */
    int64_t max = (int64_t)(2 * srv->settings.limits.max_tensor_bytes);
    if (zmq_setsockopt(srv->router, ZMQ_MAXMSGSIZE, &max, sizeof max) != 0)
        wf_log(srv->log, WF_LOG_WARNING, "ZMQ_MAXMSGSIZE: %s",
               zmq_strerror(zmq_errno()));
}

/* Whether this daemon's comm worlds are NCCL's: NCCL built, every rank on
 * a GPU of its own (one GPU cannot hold two ranks of one communicator:
 * the mixed mode uses the host comm behind comm_staged.h), one node (a
 * world across daemons is ZeroMQ's), and the `nccl` setting on (off for
 * comparisons: WEFT_NCCL=0). */
static bool use_nccl(const wf_settings_t *s, bool cluster)
{
    if (!wf_comm_nccl_built() || !s->nccl || cluster ||
        s->device_kind != WF_DEVICE_CUDA)
        return false;
    for (uint32_t d = 0; d < s->device_count; d++)
        for (uint32_t e = d + 1; e < s->device_count; e++)
            if (s->gpu[d] == s->gpu[e])
                return false;
    return true;
}

/* A regroup job for every worker: split the world (a new one when
 * `world` is set: an NCCL world when srv->nccl) into the groups of
 * `mesh`. NULL when out of memory. */
static wf_djob_t *regroup_job_new(wf_server_t *srv, const wf_mesh_t *mesh,
                                  wf_comm_host_world_t *world)
{
    wf_djob_t *job = wf_djob_new();
    if (!job)
        return NULL;
    job->kind = WF_DJOB_REGROUP;
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->epoch = mesh->epoch;
    job->world = world;
    if (world && srv->nccl) {
        job->nccl = wf_comm_nccl_unique_id(&job->nccl_id) == WF_OK;
        if (!job->nccl)
            wf_log(srv->log, WF_LOG_WARNING, "ncclGetUniqueId failed: this world "
                   "uses the host comm");
    }
    job->run = wf_worker_regroup_run;
    job->group_size = (int)srv->n_workers;
    job->rank_base = (int)srv->cl.first_rank;
    wf_registry_target_set(&srv->models, &job->models);
    job->done = &srv->done;
    atomic_store(&job->remaining, job->group_size);
    for (int r = 0; r < job->group_size; r++) {
        job->device[r] = (uint32_t)r;       /* rank = device index */
        job->task[r].job = job;
        job->task[r].rank = r;
    }
    return job;
}

static void regroup_submit(wf_server_t *srv, wf_djob_t *job)
{
    job->t_dispatch_us = wf_now_usec();
    for (int r = 0; r < job->group_size; r++)
        wf_worker_submit(&srv->workers[r], &job->task[r]);
}

/* The test hook WEFT_TEST_FAIL_JOB (settings.test, config.h): this
 * daemon's ranks of the listed jobs fail with WF_E_INTERNAL as a failing
 * step does, aborting the comm world (wf_worker_set_fault). Only for
 * tests of the recovery (e.g. tests/test_cluster_fault.c): nothing else
 * in the daemon fails jobs on purpose. */
static void set_test_fault(wf_server_t *srv)
{
    const wf_test_hooks_t *t = &srv->settings.test;
    if (t->n_fail_jobs == 0)
        return;
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_set_fault(&srv->workers[d], t->fail_jobs, t->n_fail_jobs);
    wf_log(srv->log, WF_LOG_WARNING, "WEFT_TEST_FAIL_JOB: jobs of %u sequence "
           "numbers, the first %" PRIu64 ", fail on this daemon's ranks (test only)",
           t->n_fail_jobs, t->fail_jobs[0]);
}

/* Build the world and the groups of the initial mesh before serving:
 * waits (on the completion eventfd) for the regroup job. */
static wf_status_t regroup_at_start(wf_server_t *srv)
{
    if (srv->ops->dev_alloc) {
        if (srv->nccl)
            wf_log(srv->log, WF_LOG_INFO, "comm: NCCL %d.%d.%d between the %u GPUs",
                   wf_comm_nccl_version() / 10000, wf_comm_nccl_version() / 100 % 100,
                   wf_comm_nccl_version() % 100, srv->n_workers);
        else
            wf_log(srv->log, WF_LOG_INFO, "comm: host, staged through each GPU's copies "
                   "(ranks sharing a GPU, NCCL not built, or nccl = false)");
    }
    wf_status_t st = wf_comm_host_world_new((int)srv->n_workers, &srv->world);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "comm world: %s", wf_status_str(st));
        return st;
    }
    wf_djob_t *job = regroup_job_new(srv, &srv->sched.mesh, srv->world);
    if (!job) {
        wf_log(srv->log, WF_LOG_ERR, "out of memory");
        return WF_E_INTERNAL;
    }
    regroup_submit(srv, job);
    /* Nothing else runs yet: the box receives this job only. */
    wf_djob_t *got = NULL;
    while (!got) {
        struct pollfd p = { .fd = srv->done.efd, .events = POLLIN };
        int rc = poll(&p, 1, 60000);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            /* The job stays with the workers; leak it rather than free
             * what they may still touch. */
            wf_log(srv->log, WF_LOG_ERR, "communicators: regroup at start-up "
                   "did not finish within 60 s");
            return WF_E_INTERNAL;
        }
        got = wf_done_box_take(&srv->done);
    }
    st = (wf_status_t)atomic_load(&got->status);
    wf_djob_free(&got);
    if (st != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "communicators: regroup failed: %s",
               wf_status_str(st));
    return st;
}

/* The ZeroMQ endpoint naming the listening socket `fd` (ipc://PATH,
 * ipc://@NAME for an abstract one, tcp://HOST:PORT): with ZMQ_USE_FD,
 * zmq_bind still parses it (and, for ipc, resolves the path). */
static wf_status_t socket_endpoint(int fd, char *buf, size_t len,
                                   char *why, size_t why_len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        snprintf(why, why_len, "getsockname: %s", strerror(errno));
        return WF_E_INTERNAL;
    }
    char host[INET6_ADDRSTRLEN];
    int n;
    if (ss.ss_family == AF_UNIX) {
        const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
        size_t off = offsetof(struct sockaddr_un, sun_path);
        size_t plen = sl > off ? sl - off : 0;
        if (plen == 0) {
            snprintf(why, why_len, "unnamed AF_UNIX socket");
            return WF_E_INTERNAL;
        }
        if (un->sun_path[0] == '\0')        /* abstract: ZeroMQ spells it @ */
            n = snprintf(buf, len, "ipc://@%.*s", (int)(plen - 1), un->sun_path + 1);
        else
            n = snprintf(buf, len, "ipc://%.*s", (int)strnlen(un->sun_path, plen),
                         un->sun_path);
    } else if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        n = snprintf(buf, len, "tcp://%s:%u", host, (unsigned)ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
        n = snprintf(buf, len, "tcp://[%s]:%u", host,
                     (unsigned)ntohs(in6->sin6_port));
    } else {
        snprintf(why, why_len, "address family %d", (int)ss.ss_family);
        return WF_E_INTERNAL;
    }
    if (n < 0 || (size_t)n >= len) {
        snprintf(why, why_len, "address too long");
        return WF_E_INTERNAL;
    }
    return WF_OK;
}

/* Bind the ROUTER: to the socket systemd passed (socket activation,
 * units/weftd.socket) when there is one, else to settings.listen. Takes
 * LISTEN_FDS out of the environment either way. */
static wf_status_t bind_router(wf_server_t *srv)
{
    int n = sd_listen_fds(1);
    if (n < 0) {
        wf_log(srv->log, WF_LOG_ERR, "socket activation: %s", strerror(-n));
        return WF_E_INTERNAL;
    }
    if (n > 1) {
        wf_log(srv->log, WF_LOG_ERR, "socket activation: systemd passed %d "
               "sockets; weftd serves one (a single ListenStream= in "
               "weftd.socket)", n);
        return WF_E_INTERNAL;
    }
    if (n == 0) {
        snprintf(srv->endpoint, sizeof srv->endpoint, "%s", srv->settings.listen);
        if (zmq_bind(srv->router, srv->endpoint) != 0) {
            wf_log(srv->log, WF_LOG_ERR, "cannot bind %s: %s", srv->endpoint,
                   zmq_strerror(zmq_errno()));
            return WF_E_INTERNAL;
        }
        srv->bound = true;
        return WF_OK;
    }
    int fd = SD_LISTEN_FDS_START;
    bool is_unix = sd_is_socket(fd, AF_UNIX, SOCK_STREAM, 1) > 0;
    if (!is_unix && sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) <= 0) {
        wf_log(srv->log, WF_LOG_ERR, "socket activation: fd %d is not a "
               "listening AF_UNIX or TCP stream socket", fd);
        return WF_E_INTERNAL;
    }
    char why[128];
    if (socket_endpoint(fd, srv->endpoint, sizeof srv->endpoint, why,
                        sizeof why) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "socket activation: fd %d: %s", fd, why);
        return WF_E_INTERNAL;
    }
    int ipv6 = strncmp(srv->endpoint, "tcp://[", 7) == 0;
    if (ipv6)
        zmq_setsockopt(srv->router, ZMQ_IPV6, &ipv6, sizeof ipv6);
    if (zmq_setsockopt(srv->router, ZMQ_USE_FD, &fd, sizeof fd) != 0 ||
        zmq_bind(srv->router, srv->endpoint) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "socket activation: cannot bind %s "
               "(fd %d): %s", srv->endpoint, fd, zmq_strerror(zmq_errno()));
        return WF_E_INTERNAL;
    }
    srv->bound = true;
    srv->activated = true;
    wf_log(srv->log, WF_LOG_INFO, "socket activation: serving on %s from "
           "systemd (fd %d); listen = %s is not used", srv->endpoint, fd,
           srv->settings.listen);
    return WF_OK;
}

wf_status_t wf_server_new(const wf_settings_t *settings, const wf_cli_t *cli,
                          char *const *envp, wf_log_t *log,
                          wf_server_t **ret_srv)
{
    wf_server_t *srv = calloc(1, sizeof *srv);
    if (!srv) {
        wf_log(log, WF_LOG_ERR, "out of memory");
        return WF_E_INTERNAL;
    }
    srv->settings = *settings;
    srv->cli = cli;
    srv->envp = envp;
    srv->log = log;
    srv->sigfd = -1;
    srv->done.efd = -1;
    srv->models.efd = -1;
    srv->models.root_fd = -1;
    zmq_msg_init(&srv->reconf.identity);
    srv->ops = settings->device_kind == WF_DEVICE_CUDA ? wf_backend_cuda()
                                                       : wf_backend_cpu();
    srv->t_start_us = wf_now_usec();
    wf_notify_init(&srv->notify);

    /* Blocked before any thread exists (workers, ZeroMQ's I/O thread), so
     * every thread inherits the mask and the signals reach only the
     * signalfd. */
    sigset_t mask;
    sigemptyset(&mask);
    for (int i = 0; i < 3; i++)
        sigaddset(&mask, handled_signals[i]);
    int rc = pthread_sigmask(SIG_BLOCK, &mask, &srv->old_mask);
    if (rc != 0) {
        wf_log(log, WF_LOG_ERR, "pthread_sigmask: %s", strerror(rc));
        goto fail;
    }
    srv->mask_set = true;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_to_main_thread;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; i++)
        sigaction(handled_signals[i], &sa, &srv->old_act[i]);
    srv->act_set = true;
    srv->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    if (srv->sigfd < 0) {
        wf_log(log, WF_LOG_ERR, "signalfd: %s", strerror(errno));
        goto fail;
    }
    if (wf_done_box_init(&srv->done) != WF_OK) {
        wf_log(log, WF_LOG_ERR, "eventfd: %s", strerror(errno));
        goto fail;
    }

    char rerr[WF_PROTO_ERROR_MAX];
    if (wf_registry_init(&srv->models, settings->model_root, rerr,
                         sizeof rerr) != WF_OK) {
        wf_log(log, WF_LOG_ERR, "model_root: %s", rerr);
        goto fail;
    }
    /* A backend computing in f32 on host memory (CPU) gets f32 host
     * copies: its shards are views of them. */
    srv->models.host_f32 = srv->ops && srv->ops->copy_h2d == NULL;

    wf_mesh_t mesh;
    char merr[256];
    /* Cluster: the mesh is the world's, installed when a world forms;
     * until then the local devices are independent replicas. */
    wf_mesh_degrees_t local_deg = { settings->device_count, 1, 1, 1 };
    bool cluster = settings->coordinator[0] != '\0';
    if (wf_mesh_init(&mesh, cluster ? &local_deg : &settings->mesh_deg,
                     (int)settings->device_count, merr, sizeof merr) != WF_OK) {
        wf_log(log, WF_LOG_ERR, "mesh: %s", merr);
        goto fail;
    }
    if (!srv->ops) {               /* the settings check this first */
        wf_log(log, WF_LOG_ERR, "devices = %s: CUDA backend not built",
               settings->devices);
        goto fail;
    }
    bool cuda = settings->device_kind == WF_DEVICE_CUDA;
    uint64_t budget[WF_SETTINGS_MAX_DEVICES];
    for (uint32_t d = 0; d < settings->device_count; d++)
        budget[d] = cuda ? gpu_budget(settings, settings->gpu[d])
                         : device_budget(settings);
    for (uint32_t d = 0; d < settings->device_count; d++) {
        int dev = cuda ? settings->gpu[d] : (int)d;
        wf_status_t st = wf_worker_start(&srv->workers[d], d, dev, srv->ops,
                                         budget[d], log);
        srv->n_workers = d + 1;      /* a failed one is still joined */
        if (st != WF_OK)
            goto fail;
        srv->workers[d].nccl_init_timeout_ms = settings->nccl_init_timeout_ms;
    }
    set_test_fault(srv);
    srv->nccl = use_nccl(settings, cluster);
    wf_sched_init(&srv->sched, srv->workers, settings->device_count,
                  settings->queue_capacity, &mesh, log);
    if (!cluster && regroup_at_start(srv) != WF_OK)
        goto fail;
    srv->sched.paused = cluster;

    srv->zctx = zmq_ctx_new();
    if (!srv->zctx) {
        wf_log(log, WF_LOG_ERR, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    srv->router = zmq_socket(srv->zctx, ZMQ_ROUTER);
    if (!srv->router) {
        wf_log(log, WF_LOG_ERR, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    int one = 1, zero = 0;
    /* MANDATORY: a reply to a vanished client fails (EHOSTUNREACH) instead
     * of vanishing silently, so we can log it. LINGER 0: close never
     * blocks on dead peers (drain raises it just before closing). */
    zmq_setsockopt(srv->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(srv->router, ZMQ_LINGER, &zero, sizeof zero);
    set_max_msg_size(srv);
    if (bind_router(srv) != WF_OK)
        goto fail;
    if (cluster) {
        if (bind_spares(srv) != WF_OK ||
            wf_cluster_new(&srv->settings, srv->zctx, srv->cl.data, log,
                           &srv->notify, &srv->cluster) != WF_OK)
            goto fail;
        wf_cluster_on_message(srv->cluster, cluster_message, srv);
        if (wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR &&
            xfer_bind(srv) != WF_OK)
            goto fail;
        srv->sched.remote = cluster_remote;
        srv->sched.remote_arg = srv;
        cluster_sync(srv);      /* a world of one node forms at once */
    }
    *ret_srv = srv;
    return WF_OK;

fail:
    wf_server_destroy(&srv);
    return WF_E_INTERNAL;
}

void wf_server_destroy(wf_server_t **psrv)
{
    if (!psrv || !*psrv)
        return;
    wf_server_t *srv = *psrv;
    /* Workers first: they run what is queued, and their jobs' replies
     * are no longer wanted here (wf_server_run already drained). A cluster
     * world is aborted first: peers of other nodes may never come. */
    if (srv->cl.local)
        wf_comm_zmq_local_abort(srv->cl.local);
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
    for (uint32_t d = 0; d < WF_SETTINGS_MAX_DEVICES; d++)
        wf_comm_zmq_endpoint_destroy(&srv->cl.spare[d]);
    wf_comm_zmq_local_unref(&srv->cl.local);
    wf_comm_host_world_unref(&srv->world);  /* workers dropped their handles */
    zmq_msg_close(&srv->reconf.identity);
    if (srv->done.efd >= 0) {
        wf_djob_t *j = wf_done_box_take(&srv->done);
        while (j) {
            wf_djob_t *next = j->next;
            wf_djob_free(&j);
            j = next;
        }
    }
    wf_djob_t *q = wf_sched_take_queued(&srv->sched);
    while (q) {
        wf_djob_t *next = q->next;
        wf_djob_free(&q);
        q = next;
    }
    xfer_close(srv);
    wf_cluster_destroy(&srv->cluster);
    wf_registry_destroy(&srv->models);
    if (srv->router)
        zmq_close(srv->router);
    if (srv->zctx)
        zmq_ctx_term(srv->zctx);  /* waits for queued replies up to LINGER */
    /* libzmq 4.3 leaves the socket file of a bound ipc endpoint behind;
     * the path is ours (the bind succeeded on it), so remove it. An
     * activated socket's file is systemd's: it outlives us, and the next
     * start (or a client connecting meanwhile) needs it. */
    if (srv->bound && !srv->activated &&
        strncmp(srv->endpoint, "ipc://", 6) == 0 &&
        unlink(srv->endpoint + 6) != 0 && errno != ENOENT)
        wf_log(srv->log, WF_LOG_WARNING, "cannot remove %s: %s",
               srv->endpoint + 6, strerror(errno));
    wf_done_box_destroy(&srv->done);
    if (srv->sigfd >= 0)
        close(srv->sigfd);
    if (srv->act_set)
        for (int i = 0; i < 3; i++)
            sigaction(handled_signals[i], &srv->old_act[i], NULL);
    if (srv->mask_set)
        pthread_sigmask(SIG_SETMASK, &srv->old_mask, NULL);
    wf_buf_free(&srv->buf);
    free(srv);
    *psrv = NULL;
}

/* ------------------------------------------------------------------ */
/* replies */

static void free_output(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Send [identity, (empty), header, outputs of job...]. The identity is
 * consumed on success. Output buffers pass to ZeroMQ (zero-copy; freed on
 * its I/O thread once sent) and are taken out of the job. */
static void send_reply(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                       const wf_reply_t *rep, wf_djob_t *job)
{
    wf_buf_reset(&srv->buf);
    wf_status_t st = wf_reply_encode(rep, &srv->buf);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reply to request %" PRIu64 ": cannot "
               "encode: %s", rep->id, wf_status_name(st));
        return;
    }
    uint32_t n_out = job && rep->status == WF_OK ? job->n_outputs : 0;
    if (zmq_msg_send(identity, srv->router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        wf_log(srv->log, e == EHOSTUNREACH ? WF_LOG_INFO : WF_LOG_WARNING,
               "reply to request %" PRIu64 " dropped: %s", rep->id,
               e == EHOSTUNREACH ? "client gone" : zmq_strerror(e));
        return;
    }
    /* After the identity frame ZeroMQ takes the rest of the message. */
    if (delim)
        zmq_send(srv->router, "", 0, ZMQ_SNDMORE);
    zmq_send(srv->router, srv->buf.data, srv->buf.len, n_out ? ZMQ_SNDMORE : 0);
    for (uint32_t i = 0; i < n_out; i++) {
        zmq_msg_t m;
        if (!job->out[i] && i < job->n_out_msgs) {
            /* the outputs a member's root sent over the tensor channel:
             * passed on as they came (zero-copy) */
            if (zmq_msg_send(&job->out_msg[i], srv->router,
                             i + 1 < n_out ? ZMQ_SNDMORE : 0) < 0)
                zmq_send(srv->router, "", 0, i + 1 < n_out ? ZMQ_SNDMORE : 0);
            continue;
        }
        if (zmq_msg_init_data(&m, job->out[i], (size_t)job->out_desc[i].nbytes,
                              free_output, NULL) != 0) {
            /* Cannot happen with a non-NULL buffer; keep the frame count. */
            zmq_send(srv->router, "", 0, i + 1 < n_out ? ZMQ_SNDMORE : 0);
            continue;
        }
        job->out[i] = NULL;
        if (zmq_msg_send(&m, srv->router, i + 1 < n_out ? ZMQ_SNDMORE : 0) < 0)
            zmq_msg_close(&m);
    }
}

static void send_error(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                       uint64_t id, uint32_t op, wf_status_t st, const char *msg)
{
    wf_reply_t *rep = &srv->reply;
    memset(rep, 0, sizeof *rep);
    rep->version = WF_PROTOCOL_VERSION;
    rep->id = id;
    rep->op = op;
    rep->status = st;
    rep->epoch = srv->sched.mesh.epoch;
    snprintf(rep->error, sizeof rep->error, "%s", msg && *msg ? msg : wf_status_str(st));
    send_reply(srv, identity, delim, rep, NULL);
}

static void reply_job(wf_server_t *srv, wf_djob_t *job)
{
    wf_status_t st = (wf_status_t)atomic_load(&job->status);
    if (st != WF_OK) {
        char msg[WF_PROTO_ERROR_MAX];
        if (srv->cluster && (st == WF_E_ABORTED || st == WF_E_NODE_LOST) &&
            srv->cl.lost[0] && job->epoch == srv->cl.abort_mesh_epoch) {
            st = WF_E_NODE_LOST;
            if (!job->err[0])
                snprintf(job->err, sizeof job->err, "node(s) %s lost during the "
                         "job (mesh epoch %" PRIu64 "); the world re-forms without "
                         "them", srv->cl.lost, job->epoch);
        } else if (srv->cluster && st == WF_E_ABORTED && !job->err[0] &&
                   job->epoch == srv->cl.abort_mesh_epoch) {
            snprintf(job->err, sizeof job->err, "the cluster's comm world was "
                     "aborted by a failed job during this one (mesh epoch %"
                     PRIu64 "); it is rebuilt with the same nodes; retry", job->epoch);
        }
        if (job->err[0])
            snprintf(msg, sizeof msg, "%s", job->err);
        else
            snprintf(msg, sizeof msg, "job failed on a device: %s", wf_status_str(st));
        send_error(srv, &job->identity, job->has_delim, job->req.id, job->req.op,
                   st, msg);
        return;
    }
    wf_reply_t *rep = &srv->reply;
    memset(rep, 0, sizeof *rep);
    rep->version = WF_PROTOCOL_VERSION;
    rep->id = job->req.id;
    rep->op = job->req.op;
    rep->status = WF_OK;
    rep->epoch = job->epoch;
    rep->n_tensors = job->n_outputs;
    memcpy(rep->tensors, job->out_desc, job->n_outputs * sizeof job->out_desc[0]);
    rep->result.attention.queue_us = job->t_dispatch_us - job->t_recv_us;
    rep->result.attention.compute_us = job->t_done_us - job->t_dispatch_us;
    rep->result.attention.devices = (uint32_t)job->group_size;
    wf_log(srv->log, WF_LOG_DEBUG, "job %" PRIu64 " done: queue %" PRIu64
           " us, compute %" PRIu64 " us, %d device(s)", job->req.id,
           rep->result.attention.queue_us, rep->result.attention.compute_us,
           job->group_size);
    send_reply(srv, &job->identity, job->has_delim, rep, job);
}

/* snprintf(dst, "%s", src) without the restrict trouble: the reply
 * scratch and the workers live in the same wf_server_t. */
static void copy_name(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

static void fill_hello(const wf_server_t *srv, wf_hello_info_t *h)
{
    h->protocol = WF_PROTOCOL_VERSION;
    snprintf(h->weft_version, sizeof h->weft_version, "%s", WEFT_VERSION);
    snprintf(h->backend, sizeof h->backend, "%s", srv->ops->name);
    h->devices = srv->settings.device_count;
    h->max_header_bytes = srv->settings.limits.max_header_bytes;
    h->max_tensor_bytes = srv->settings.limits.max_tensor_bytes;
    h->max_tensors = srv->settings.limits.max_tensors;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? resident * (uint64_t)page : 0;
}

static void fill_status(const wf_server_t *srv, wf_status_info_t *si)
{
    const wf_sched_t *s = &srv->sched;
    snprintf(si->weft_version, sizeof si->weft_version, "%s", WEFT_VERSION);
    snprintf(si->backend, sizeof si->backend, "%s", srv->ops->name);
    si->epoch = s->mesh.epoch;
    si->mesh = s->mesh.deg;
    si->reconfiguring = srv->reconf.active ? 1 : 0;
    si->uptime_ms = (wf_now_usec() - srv->t_start_us) / 1000;
    si->queue_depth = s->depth;
    si->queue_capacity = s->capacity;
    si->in_flight = s->in_flight;
    si->jobs_served = s->served;
    si->jobs_failed = s->failed;
    si->requests_rejected = srv->rejected;
    si->rss_bytes = rss_bytes();
    si->device_count = srv->n_workers;
    if (srv->cluster)
        wf_cluster_fill_status(srv->cluster, si);
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        const wf_worker_t *w = &srv->workers[d];
        wf_device_info_t *di = &si->devices[d];
        di->index = d;
        copy_name(di->name, sizeof di->name, w->name);
        di->memory_total = w->memory_total;
        uint32_t g = d + (srv->cluster ? srv->cl.first_rank : 0);  /* world rank */
        di->memory_used = s->used[g];
        di->jobs_served = atomic_load(&w->jobs_served);
        di->busy = atomic_load(&w->busy) ? 1 : 0;
        wf_mesh_coords_t c = { 0, 0, 0, 0 };
        wf_mesh_coords(&s->mesh, (int)g, &c);
        di->rank = g;
        di->coords[0] = (uint32_t)c.dp;
        di->coords[1] = (uint32_t)c.ring;
        di->coords[2] = (uint32_t)c.ulysses;
        di->coords[3] = (uint32_t)c.tp;
    }
}

/* ------------------------------------------------------------------ */
/* requests */

/* Dispatch what fits and answer the jobs that failed to start. */
static void dispatch(wf_server_t *srv)
{
    if (srv->workers_stopped)
        return;
    wf_djob_t *failed = NULL;
    wf_sched_dispatch(&srv->sched, wf_now_usec(), &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
}

/* ------------------------------------------------------------------ */
/* hot reconfiguration (DESIGN.md): validate, pause dispatch, drain the
 * running jobs, regroup every worker, epoch + 1, resume. Also the
 * recovery after an aborted world (same mesh, new world). */

/* "dp=1,ring=2,ulysses=2,tp=1" (at most 63 bytes with the NUL). */
static void format_deg(const wf_mesh_degrees_t *d, char *buf, size_t len)
{
    snprintf(buf, len, "dp=%" PRIu32 ",ring=%" PRIu32 ",ulysses=%" PRIu32
             ",tp=%" PRIu32, d->dp, d->ring, d->ulysses, d->tp);
}

/* Plan a job for `mesh`. Cluster: a head-split job (no communication,
 * every rank reads the frames) runs on this node's devices only, so its
 * device count is capped at them. */
static wf_status_t plan_job(wf_server_t *srv, wf_djob_t *job, const wf_mesh_t *mesh,
                            char *err, size_t err_len)
{
    if (job->req.op == WF_OP_FORWARD) {
        const char *name = job->req.args.forward.model;
        const wf_model_t *m = wf_registry_find(&srv->models, name);
        if (!m || m->state != WF_MODEL_READY) {
            snprintf(err, err_len, "model '%s' is not loaded%s", name,
                     m ? " yet (it is loading)" : "");
            return WF_E_BAD_ARGUMENT;
        }
        return wf_forward_plan(job, srv->ops, mesh, m, err, err_len);
    }
    wf_status_t st = wf_attention_plan(job, srv->ops, mesh, &srv->settings, err,
                                       err_len);
    if (st == WF_OK && srv->cluster && !job->cp &&
        (uint32_t)job->group_size > srv->n_workers) {
        wf_attention_args_t *a = &job->req.args.attention;
        uint32_t asked = a->devices;
        a->devices = srv->n_workers;
        st = wf_attention_plan(job, srv->ops, mesh, &srv->settings, err, err_len);
        a->devices = asked;
    }
    return st;
}

static wf_status_t plan_for_mesh(wf_djob_t *job, const wf_mesh_t *mesh, void *arg)
{
    wf_server_t *srv = arg;
    job->err[0] = '\0';
    return plan_job(srv, job, mesh, job->err, sizeof job->err);
}

static void status_line(const wf_server_t *srv, char *buf, size_t len);
static void finish_reconfigure(wf_server_t *srv, wf_status_t st);
static void models_after_regroup(wf_server_t *srv, wf_status_t st);
static void try_install(wf_server_t *srv);

/* Bytes of the smallest device: what resident shards may take per rank. */
static uint64_t min_device_memory(const wf_server_t *srv)
{
    uint64_t m = UINT64_MAX;
    for (uint32_t d = 0; d < srv->n_workers; d++)
        if (srv->workers[d].memory_total < m)
            m = srv->workers[d].memory_total;
    return m == UINT64_MAX ? 0 : m;
}

/* Drained? Then put the regroup job on every worker. */
static void advance_reconfigure(wf_server_t *srv)
{
    if (!srv->reconf.active || srv->reconf.regrouping || srv->sched.in_flight > 0 ||
        srv->workers_stopped)
        return;
    srv->reconf.t_drained_us = wf_now_usec();
    wf_comm_host_world_t *fresh = NULL;
    if (srv->reconf.new_world) {
        wf_status_t st = wf_comm_host_world_new((int)srv->n_workers, &fresh);
        if (st != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "comm world: %s", wf_status_str(st));
            finish_reconfigure(srv, st);
            return;
        }
    }
    wf_djob_t *job = regroup_job_new(srv, &srv->reconf.target, fresh);
    if (!job) {
        wf_comm_host_world_unref(&fresh);
        wf_log(srv->log, WF_LOG_ERR, "reconfiguration: out of memory");
        finish_reconfigure(srv, WF_E_INTERNAL);
        return;
    }
    if (fresh) {
        /* The workers' handles keep the old world alive until they drop
         * them in the regroup. */
        wf_comm_host_world_unref(&srv->world);
        srv->world = fresh;
    }
    srv->reconf.regrouping = true;
    /* Cluster: every node's workers split the world the same way; the
     * members queue their regroup behind the job parts they hold. */
    if (srv->cluster && wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR)
        wf_cluster_broadcast_mesh(srv->cluster, &srv->reconf.target.deg,
                                  srv->reconf.target.epoch);
    regroup_submit(srv, job);
}

/* Start a reconfiguration to `deg` (the same degrees too: a regroup).
 * Validation first: an invalid mesh changes nothing. With a client
 * (identity != NULL) its identity is taken and it gets the reply at the
 * end. `notify`: send RELOADING=1 now and READY=1 at the end. */
static wf_status_t start_reconfigure(wf_server_t *srv, const wf_mesh_degrees_t *deg,
                                     bool new_world, const char *why, bool notify,
                                     zmq_msg_t *identity, bool delim, uint64_t id,
                                     char *err, size_t err_len)
{
    if (srv->stopping && identity) {
        snprintf(err, err_len, "daemon is shutting down; no reconfiguration");
        return WF_E_SHUTTING_DOWN;
    }
    wf_mesh_t target = srv->sched.mesh;
    if (srv->cluster && (!srv->cl.built || srv->cl.install || srv->cl.aborted)) {
        snprintf(err, err_len, "the cluster world is forming; retry when it serves");
        return WF_E_BUSY;
    }
    if (wf_mesh_reconfigure(&target, deg, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (srv->reconf.active) {
        char to[96];
        format_deg(&srv->reconf.target.deg, to, sizeof to);
        snprintf(err, err_len, "a reconfiguration is running (to %s, %s); "
                 "retry when it is done", to, srv->reconf.why);
        return WF_E_BUSY;
    }
    /* Resident models are re-cut for the new tp: they must divide and fit
     * before anything changes. */
    wf_status_t mst = wf_registry_check_tp(&srv->models, (int)target.deg.tp,
                                           min_device_memory(srv), NULL, err,
                                           err_len);
    if (mst != WF_OK)
        return mst;
    if (srv->cl.epoch_override)
        target.epoch = srv->cl.epoch_override;
    if (srv->cluster)
        new_world = false;  /* a cluster world is rebuilt by the control plane */
    srv->reconf.active = true;
    srv->cl.reconf_world = srv->cl.world_epoch;
    srv->reconf.regrouping = false;
    srv->reconf.new_world = new_world;
    srv->reconf.target = target;
    srv->reconf.from = srv->sched.mesh.deg;
    srv->reconf.why = why;
    srv->reconf.notify = notify;
    srv->reconf.has_client = identity != NULL;
    if (identity)
        zmq_msg_move(&srv->reconf.identity, identity);
    srv->reconf.delim = delim;
    srv->reconf.id = id;
    srv->reconf.t_start_us = wf_now_usec();
    srv->sched.paused = true;
    if (notify)
        wf_notify_reloading(&srv->notify);
    advance_reconfigure(srv);
    return WF_OK;
}

/* The regroup ended with st (or could not start): install the mesh and
 * resume, answer the client; after a failed regroup rebuild the world on
 * the old mesh (the workers' groups are gone). */
static void finish_reconfigure(wf_server_t *srv, wf_status_t st)
{
    uint64_t now = wf_now_usec();
    char from[96], to[96];
    format_deg(&srv->reconf.from, from, sizeof from);
    format_deg(&srv->reconf.target.deg, to, sizeof to);
    if (st == WF_OK && srv->cluster && srv->cl.reconf_world != srv->cl.world_epoch)
        st = WF_E_ABORTED;    /* a new world superseded it (with its own mesh) */
    if (st == WF_OK) {
        srv->sched.mesh = srv->reconf.target;
        srv->cl.mesh = srv->reconf.target;
        srv->reconf.failures = 0;
        wf_log(srv->log, WF_LOG_INFO, "reconfigured (%s): %s -> %s, epoch %"
               PRIu64 ", drain %.1f ms, regroup %.1f ms", srv->reconf.why, from,
               to, srv->sched.mesh.epoch,
               (double)(srv->reconf.t_drained_us - srv->reconf.t_start_us) / 1e3,
               (double)(now - srv->reconf.t_drained_us) / 1e3);
    } else {
        srv->reconf.failures++;
        wf_log(srv->log, WF_LOG_ERR, "reconfiguration (%s) %s -> %s failed: %s",
               srv->reconf.why, from, to, wf_status_str(st));
    }
    models_after_regroup(srv, st);
    if (srv->reconf.has_client) {
        if (st == WF_OK) {
            wf_reply_t *rep = &srv->reply;
            memset(rep, 0, sizeof *rep);
            rep->version = WF_PROTOCOL_VERSION;
            rep->id = srv->reconf.id;
            rep->op = WF_OP_RECONFIGURE;
            rep->status = WF_OK;
            rep->epoch = srv->sched.mesh.epoch;
            rep->result.reconfigure.epoch = srv->sched.mesh.epoch;
            rep->result.reconfigure.mesh = srv->sched.mesh.deg;
            send_reply(srv, &srv->reconf.identity, srv->reconf.delim, rep, NULL);
        } else {
            send_error(srv, &srv->reconf.identity, srv->reconf.delim,
                       srv->reconf.id, WF_OP_RECONFIGURE, WF_E_INTERNAL,
                       "reconfiguration failed: the communicators could not be "
                       "rebuilt; the mesh is unchanged");
        }
        zmq_msg_close(&srv->reconf.identity);
        zmq_msg_init(&srv->reconf.identity);
        srv->reconf.has_client = false;
    }
    if (st != WF_OK && srv->reconf.failures < 3 && !srv->workers_stopped &&
        !srv->cluster) {
        /* Rebuild on the mesh in force, with a new world. */
        srv->reconf.regrouping = false;
        srv->reconf.new_world = true;
        srv->reconf.target = srv->sched.mesh;
        srv->reconf.target.epoch++;
        srv->reconf.from = srv->sched.mesh.deg;
        srv->reconf.why = "recovery";
        srv->reconf.t_start_us = now;
        advance_reconfigure(srv);
        return;
    }
    if (st != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "communicators unavailable: "
               "context-parallel jobs will fail");
    srv->reconf.active = false;
    srv->reconf.regrouping = false;
    srv->sched.paused = srv->cluster && !cluster_ready(srv);
    if (srv->reconf.notify) {
        char line[WF_SETTINGS_ENDPOINT_MAX + 256];
        status_line(srv, line, sizeof line);
        wf_notify_ready(&srv->notify, line);
    }
    /* Jobs queued meanwhile were planned for the old mesh. */
    wf_djob_t *failed = NULL;
    wf_sched_replan(&srv->sched, plan_for_mesh, srv, &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
    dispatch(srv);
    try_install(srv);
}

/* A reconfigure request that decoded: start it or refuse it. */
static void handle_reconfigure(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    if (srv->cluster && wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER) {
        st = WF_E_NOT_COORDINATOR;
        wf_cluster_why_not(srv->cluster, err, sizeof err);
    } else {
        st = start_reconfigure(srv, &req->args.reconfigure.mesh, false, "request",
                               true, identity, delim, req->id, err, sizeof err);
    }
    if (st == WF_OK)
        return;     /* cluster: the members follow once drained */
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "reconfigure request %" PRIu64 " refused: "
           "%s: %s", req->id, wf_status_name(st), err);
    send_error(srv, identity, delim, req->id, req->op, st, err);
}

/* An attention request that passed validation: plan, admit, dispatch.
 * Takes the identity and tensor frames out of parts[]. */
static void handle_attention(wf_server_t *srv, zmq_msg_t *parts, size_t h,
                             size_t n, bool delim, uint64_t t_recv)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    wf_djob_t *job = NULL;
    if (srv->stopping) {
        st = WF_E_SHUTTING_DOWN;
        snprintf(err, sizeof err, "daemon is shutting down; no new jobs");
        goto reject;
    }
    if (srv->cluster && (wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER ||
                         !wf_cluster_accepts_jobs(srv->cluster))) {
        st = wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER
                 ? WF_E_NOT_COORDINATOR : WF_E_UNAVAILABLE;
        wf_cluster_why_not(srv->cluster, err, sizeof err);
        goto reject;
    }
    job = wf_djob_new();
    if (!job) {
        st = WF_E_INTERNAL;
        snprintf(err, sizeof err, "out of memory");
        wf_log(srv->log, WF_LOG_ERR, "request %" PRIu64 ": out of memory", req->id);
        goto reject;
    }
    job->req = *req;
    job->has_delim = delim;
    job->t_recv_us = t_recv;
    job->done = &srv->done;
    st = plan_job(srv, job, &srv->sched.mesh, err, sizeof err);
    if (st == WF_OK)
        st = wf_sched_admit(&srv->sched, job, err, sizeof err);
    if (st != WF_OK) {
        wf_djob_free(&job);
        goto reject;
    }
    zmq_msg_move(&job->identity, &parts[0]);
    for (size_t i = h + 1; i < n; i++) {
        zmq_msg_init(&job->frames[job->n_frames]);
        zmq_msg_move(&job->frames[job->n_frames++], &parts[i]);
    }
    dispatch(srv);
    return;

reject:
    srv->rejected++;
    wf_log(srv->log, st == WF_E_QUEUE_FULL ? WF_LOG_DEBUG : WF_LOG_INFO,
           "request %" PRIu64 " refused: %s: %s", req->id, wf_status_name(st), err);
    send_error(srv, &parts[0], delim, req->id, req->op, st, err);
}

/* ------------------------------------------------------------------ */
/* resident models (models.h): load -> loader thread -> install regroup
 * -> ready; unload -> regroup without it; every regroup re-cuts shards */

/* Reply to the client waiting on model m (load or unload), if any. */
static void model_reply(wf_server_t *srv, wf_model_t *m, uint32_t op,
                        wf_status_t st, const char *msg)
{
    if (!m->has_client)
        return;
    if (st != WF_OK) {
        send_error(srv, m->identity, m->delim, m->req_id, op, st, msg);
    } else {
        wf_reply_t *rep = &srv->reply;
        memset(rep, 0, sizeof *rep);
        rep->version = WF_PROTOCOL_VERSION;
        rep->id = m->req_id;
        rep->op = op;
        rep->status = WF_OK;
        rep->epoch = srv->sched.mesh.epoch;
        if (op == WF_OP_LOAD_MODEL) {
            rep->result.models.n = 1;
            wf_model_info_fill(m, &rep->result.models.models[0]);
        }
        send_reply(srv, m->identity, m->delim, rep, NULL);
    }
    zmq_msg_close(m->identity);
    free(m->identity);
    m->identity = NULL;
    m->has_client = false;
}

/* Keep the client's identity in m for the reply at the end. */
static bool model_take_client(wf_model_t *m, zmq_msg_t *identity, bool delim,
                              uint64_t id)
{
    zmq_msg_t *idm = malloc(sizeof *idm);
    if (!idm)
        return false;
    zmq_msg_init(idm);
    zmq_msg_move(idm, identity);
    m->identity = idm;
    m->delim = delim;
    m->req_id = id;
    m->has_client = true;
    return true;
}

/* A regroup ended: installing models become ready (or fail), unloading
 * ones go; the shards now resident are what jobs cannot use. */
static void models_after_regroup(wf_server_t *srv, wf_status_t st)
{
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        wf_model_t *m = srv->models.m[i];
        if (!m)
            continue;
        if ((m->state == WF_MODEL_INSTALLING || m->state == WF_MODEL_READY) &&
            st == WF_OK) {
            /* its shards are cut for the mesh now in force */
            m->tp = srv->reconf.target.deg.tp;
            m->rank_bytes = wf_flux_shard_bytes(&m->cfg, &m->plan, (int)m->tp);
        }
        if (m->state == WF_MODEL_INSTALLING) {
            if (st == WF_OK) {
                m->state = WF_MODEL_READY;
                m->load_ms = (wf_now_usec() - m->t_start_us) / 1000;
                wf_log(srv->log, WF_LOG_INFO, "model '%s' (%s) ready: %" PRIu64
                       " parameters, %.1f MiB per rank at tp=%u, loaded in %"
                       PRIu64 " ms", m->name, m->path, m->params,
                       (double)m->rank_bytes / 1048576.0, m->tp, m->load_ms);
                model_reply(srv, m, WF_OP_LOAD_MODEL, WF_OK, NULL);
            } else {
                wf_log(srv->log, WF_LOG_ERR, "model '%s': cutting its shards "
                       "failed: %s", m->name, wf_status_str(st));
                model_reply(srv, m, WF_OP_LOAD_MODEL, st, "the model's shards "
                            "could not be installed on every device; nothing "
                            "was loaded (see the daemon's log)");
                wf_registry_remove(&srv->models, m);
            }
        } else if (m->state == WF_MODEL_UNLOADING) {
            wf_log(srv->log, WF_LOG_INFO, "model '%s' unloaded", m->name);
            model_reply(srv, m, WF_OP_UNLOAD_MODEL, WF_OK, NULL);
            wf_registry_remove(&srv->models, m);
        }
    }
    uint64_t resident = 0;
    if (wf_registry_check_tp(&srv->models, (int)srv->sched.mesh.deg.tp,
                             UINT64_MAX, &resident, NULL, 0) == WF_OK)
        srv->sched.resident = resident;
}

/* Start the install regroup of the model the loader finished, unless a
 * reconfiguration runs (then its end calls this again). */
static void try_install(wf_server_t *srv)
{
    wf_model_t *m = srv->pending_install;
    if (!m || srv->reconf.active || srv->workers_stopped)
        return;
    srv->pending_install = NULL;
    char err[WF_PROTO_ERROR_MAX] = "";
    m->state = WF_MODEL_INSTALLING;
    wf_status_t st = srv->stopping ? WF_E_SHUTTING_DOWN
                     : start_reconfigure(srv, &srv->sched.mesh.deg, false,
                                         "load model", false, NULL, false, 0,
                                         err, sizeof err);
    if (st == WF_OK)
        return;
    if (st == WF_E_SHUTTING_DOWN)
        snprintf(err, sizeof err, "daemon is shutting down; model not loaded");
    wf_log(srv->log, WF_LOG_INFO, "model '%s' not installed: %s", m->name, err);
    model_reply(srv, m, WF_OP_LOAD_MODEL, st, err);
    wf_registry_remove(&srv->models, m);
}

/* The loader thread finished. */
static void handle_loaded(wf_server_t *srv)
{
    wf_model_t *m = wf_registry_take_loaded(&srv->models);
    if (!m)
        return;
    if (m->status != WF_OK) {
        wf_log(srv->log, WF_LOG_INFO, "load of model '%s' (%s) refused: %s: %s",
               m->name, m->path, wf_status_name(m->status), m->err);
        model_reply(srv, m, WF_OP_LOAD_MODEL, m->status, m->err);
        wf_registry_remove(&srv->models, m);
        return;
    }
    wf_log(srv->log, WF_LOG_INFO, "model '%s' read: %.1f MiB in %" PRIu64 " ms",
           m->name, (double)m->bytes_total / 1048576.0, m->load_ms);
    srv->pending_install = m;
    try_install(srv);
}

/* Refusal common to the model ops: member nodes and clusters. */
static bool models_refused(wf_server_t *srv, char *err, size_t err_len,
                           wf_status_t *st)
{
    if (srv->stopping) {
        *st = WF_E_SHUTTING_DOWN;
        snprintf(err, err_len, "daemon is shutting down");
        return true;
    }
    if (srv->cluster) {
        *st = WF_E_UNAVAILABLE;
        snprintf(err, err_len, "resident models are served by single-node "
                 "daemons for now; this one is part of a cluster");
        return true;
    }
    if (srv->ops->copy_h2d) {
        *st = WF_E_BAD_ARGUMENT;
        snprintf(err, err_len, "resident models run on the CPU backend only "
                 "for now; this daemon runs %s devices", srv->ops->name);
        return true;
    }
    return false;
}

static void handle_load_model(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    wf_model_t *m = NULL;
    if (models_refused(srv, err, sizeof err, &st))
        goto reject;
    uint64_t avail = min_device_memory(srv);
    avail = avail > srv->sched.resident ? avail - srv->sched.resident : 0;
    st = wf_registry_start_load(&srv->models, &req->args.load_model,
                                (int)srv->sched.mesh.deg.tp, avail, &m, err,
                                sizeof err);
    if (st != WF_OK)
        goto reject;
    if (!model_take_client(m, identity, delim, req->id))
        wf_log(srv->log, WF_LOG_ERR, "load %" PRIu64 ": out of memory; the "
               "client gets no reply", req->id);
    wf_log(srv->log, WF_LOG_INFO, "loading model '%s' from %s (tp plan: %s)",
           m->name, m->path,
           req->args.load_model.weights_already_sharded ? "the files'"
           : req->args.load_model.n_plan == 0 ? "default" : "given");
    srv->t_extend_us = 0;
    return;
reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "load_model request %" PRIu64 " refused: %s: %s",
           req->id, wf_status_name(st), err);
    send_error(srv, identity, delim, req->id, req->op, st, err);
}

static void handle_unload_model(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    const char *name = req->args.unload_model.name;
    wf_model_t *m = wf_registry_find(&srv->models, name);
    if (models_refused(srv, err, sizeof err, &st))
        goto reject;
    if (!m) {
        st = WF_E_BAD_ARGUMENT;
        snprintf(err, sizeof err, "model '%s' is not loaded", name);
        goto reject;
    }
    if (m->state != WF_MODEL_READY) {
        st = WF_E_BUSY;
        snprintf(err, sizeof err, "model '%s' is %s; retry when it is ready",
                 name, m->state == WF_MODEL_UNLOADING ? "unloading" : "loading");
        goto reject;
    }
    m->state = WF_MODEL_UNLOADING;
    st = start_reconfigure(srv, &srv->sched.mesh.deg, false, "unload model",
                           false, NULL, false, 0, err, sizeof err);
    if (st != WF_OK) {
        m->state = WF_MODEL_READY;
        goto reject;
    }
    if (!model_take_client(m, identity, delim, req->id))
        wf_log(srv->log, WF_LOG_ERR, "unload %" PRIu64 ": out of memory; the "
               "client gets no reply", req->id);
    return;
reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "unload_model request %" PRIu64 " refused: "
           "%s: %s", req->id, wf_status_name(st), err);
    send_error(srv, identity, delim, req->id, req->op, st, err);
}

static void handle_list_models(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    wf_reply_t *rep = &srv->reply;
    memset(rep, 0, sizeof *rep);
    rep->version = WF_PROTOCOL_VERSION;
    rep->id = srv->req.id;
    rep->op = WF_OP_LIST_MODELS;
    rep->status = WF_OK;
    rep->epoch = srv->sched.mesh.epoch;
    for (int i = 0; i < WF_MODELS_MAX; i++)
        if (srv->models.m[i])
            wf_model_info_fill(srv->models.m[i],
                               &rep->result.models.models[rep->result.models.n++]);
    send_reply(srv, identity, delim, rep, NULL);
}

/* While a load runs: tell systemd it progresses (start-up / reload
 * timeouts stretch) and what it is doing. */
static void loading_notify(wf_server_t *srv, uint64_t now)
{
    wf_model_t *m = srv->models.loading;
    if (!m || now - srv->t_extend_us < 1000000)
        return;
    srv->t_extend_us = now;
    uint64_t done = atomic_load(&m->bytes_loaded);
    uint64_t total = atomic_load(&m->bytes_to_load);
    char line[160];
    snprintf(line, sizeof line, "loading model %s: %.0f%%", m->name,
             total ? 100.0 * (double)done / (double)total : 0.0);
    wf_notify_extend(&srv->notify, 5000000, line);
}

/* Validate and answer / admit one received message. parts[0] is the
 * identity; the caller closes every part afterwards. */
static void handle_message(wf_server_t *srv, zmq_msg_t *parts, size_t n,
                           bool overflow, uint64_t t_recv)
{
    wf_request_t *req = &srv->req;
    const wf_limits_t *lim = &srv->settings.limits;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    bool delim = n > 1 && zmq_msg_size(&parts[1]) == 0;
    size_t h = delim ? 2 : 1;       /* index of the header frame */

    memset(req, 0, offsetof(wf_request_t, tensors));
    if (h >= n) {
        st = WF_E_MALFORMED;
        snprintf(err, sizeof err, "message has no header frame");
        goto reject;
    }
    const void *hdr = zmq_msg_data(&parts[h]);
    size_t hdr_len = zmq_msg_size(&parts[h]);
    if (hdr_len > lim->max_header_bytes || overflow) {
        wf_request_peek(hdr, hdr_len, &req->id, &req->op);
        st = WF_E_LIMIT;
        if (overflow)
            snprintf(err, sizeof err, "more than %d tensor frames",
                     WF_PROTO_MAX_TENSORS);
        else
            snprintf(err, sizeof err, "header of %zu bytes exceeds max_header_bytes "
                     "%" PRIu64, hdr_len, lim->max_header_bytes);
        goto reject;
    }
    st = wf_request_decode(hdr, hdr_len, lim, req, err, sizeof err);
    if (st != WF_OK)
        goto reject;
    size_t n_frames = n - h - 1, sizes[WF_PROTO_MAX_TENSORS];
    for (size_t i = 0; i < n_frames; i++)
        sizes[i] = zmq_msg_size(&parts[h + 1 + i]);
    st = wf_request_check_frames(req, n_frames, sizes, err, sizeof err);
    if (st != WF_OK)
        goto reject;

    wf_reply_t *rep = &srv->reply;
    switch (req->op) {
    case WF_OP_HELLO:
    case WF_OP_STATUS:
        memset(rep, 0, sizeof *rep);
        rep->version = WF_PROTOCOL_VERSION;
        rep->id = req->id;
        rep->op = req->op;
        rep->status = WF_OK;
        rep->epoch = srv->sched.mesh.epoch;
        if (req->op == WF_OP_HELLO)
            fill_hello(srv, &rep->result.hello);
        else
            fill_status(srv, &rep->result.status);
        send_reply(srv, &parts[0], delim, rep, NULL);
        return;
    case WF_OP_ATTENTION:
    case WF_OP_FORWARD:
        handle_attention(srv, parts, h, n, delim, t_recv);
        return;
    case WF_OP_LOAD_MODEL:
        handle_load_model(srv, &parts[0], delim);
        return;
    case WF_OP_UNLOAD_MODEL:
        handle_unload_model(srv, &parts[0], delim);
        return;
    case WF_OP_LIST_MODELS:
        handle_list_models(srv, &parts[0], delim);
        return;
    case WF_OP_RECONFIGURE:
        handle_reconfigure(srv, &parts[0], delim);
        return;
    default:
        /* The decoder refuses unknown ops; keep a reply for a new one. */
        st = WF_E_UNKNOWN_OP;
        snprintf(err, sizeof err, "op %u not served", req->op);
        goto reject;
    }

reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "request %" PRIu64 " op %u refused: %s: %s",
           req->id, req->op, wf_status_name(st), err);
    send_error(srv, &parts[0], delim, req->id, req->op, st, err);
}

/* Read one whole multipart message (every frame, even of a message that
 * will be refused) and handle it. False when none was waiting. */
static bool recv_message(wf_server_t *srv)
{
    zmq_msg_t parts[MAX_PARTS];
    zmq_msg_init(&parts[0]);
    if (zmq_msg_recv(&parts[0], srv->router, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        if (e != EAGAIN && e != EINTR)
            wf_log(srv->log, WF_LOG_ERR, "receive: %s", zmq_strerror(e));
        zmq_msg_close(&parts[0]);
        return false;
    }
    uint64_t t_recv = wf_now_usec();
    size_t n = 1;
    bool overflow = false;
    bool more = zmq_msg_more(&parts[0]);
    while (more) {
        /* The rest of a multipart message is already here: no waiting. */
        zmq_msg_t *m = &parts[n];
        zmq_msg_t spill;
        if (n == MAX_PARTS) {
            m = &spill;
            overflow = true;
        }
        zmq_msg_init(m);
        if (zmq_msg_recv(m, srv->router, 0) < 0) {
            wf_log(srv->log, WF_LOG_ERR, "receive: %s", zmq_strerror(zmq_errno()));
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (m == &spill)
            zmq_msg_close(m);
        else
            n++;
    }
    handle_message(srv, parts, n, overflow, t_recv);
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&parts[i]);
    return true;
}

/* ------------------------------------------------------------------ */
/* cluster mode: one comm world over every rank of every node (DESIGN.md
 * "Rendezvous between nodes", "Data flow of one job"). Each node binds a
 * ZeroMQ comm endpoint per local rank ahead of time and announces them
 * (hello / "data"); a new world from the control plane becomes a regroup
 * job that joins the cross-process world and splits the mesh groups on
 * every node; the coordinator sequences every job and sends members a
 * descriptor ("job") for their ranks; they answer "done". A
 * context-parallel job whose roots are on a member gets its inputs and
 * returns its outputs over the tensor channel (below); a head-split job
 * runs on the coordinator's ranks. */

/* The world mesh for `world` ranks from the degrees asked for: dp fitted
 * when ring x ulysses x tp divides the world, else the sequence dims
 * shrink (ring first), else every rank its own replica. */
static wf_mesh_degrees_t fit_mesh(wf_mesh_degrees_t req, uint32_t world)
{
    uint32_t inner = req.ring * req.ulysses * req.tp;
    if (inner && world % inner == 0)
        return (wf_mesh_degrees_t){ world / inner, req.ring, req.ulysses, req.tp };
    inner = req.ulysses * req.tp;
    if (inner && world % inner == 0)
        return (wf_mesh_degrees_t){ 1, world / inner, req.ulysses, req.tp };
    if (req.tp && world % req.tp == 0)
        return (wf_mesh_degrees_t){ 1, world / req.tp, 1, req.tp };
    return (wf_mesh_degrees_t){ world, 1, 1, 1 };
}

/* Bind a fresh comm endpoint per local rank for the next world; cl.data
 * gets their addresses, "tcp://ADDR:P0,P1,.." (ADDR: data_address). */
static wf_status_t bind_spares(wf_server_t *srv)
{
    size_t o = 0;
    srv->cl.data[0] = '\0';
    int64_t max = (int64_t)(2 * srv->settings.limits.max_tensor_bytes) + 4096;
    char host[WF_SETTINGS_NAME_MAX], bind[WF_SETTINGS_NAME_MAX + 16];
    snprintf(host, sizeof host, "%s", srv->settings.data_address);
    if (host[0] == '\0' && gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        wf_comm_zmq_endpoint_destroy(&srv->cl.spare[d]);
        wf_status_t st = wf_comm_zmq_endpoint_new(srv->zctx, bind, max,
                                                  &srv->cl.spare[d]);
        if (st != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "cluster: cannot bind a comm endpoint "
                   "on %s (data_address): %s", host, wf_status_str(st));
            return st;
        }
        const char *a = wf_comm_zmq_endpoint_address(srv->cl.spare[d]);
        const char *port = strrchr(a, ':');
        int n = d == 0 ? snprintf(srv->cl.data, sizeof srv->cl.data, "%s", a)
                       : snprintf(srv->cl.data + o, sizeof srv->cl.data - o, ",%s",
                                  port ? port + 1 : "");
        if (n < 0 || (size_t)n >= sizeof srv->cl.data - o) {
            wf_log(srv->log, WF_LOG_ERR, "cluster: %u comm endpoints do not fit "
                   "the data field", srv->n_workers);
            return WF_E_LIMIT;
        }
        o += (size_t)n;
    }
    return WF_OK;
}

/* The endpoints of `ranks` ranks from a node's data field. */
static bool parse_data(const char *data, uint32_t ranks,
                       char (*eps)[WF_COMM_ZMQ_ENDPOINT_MAX])
{
    const char *comma = strchr(data, ',');
    size_t first = comma ? (size_t)(comma - data) : strlen(data), plen = first;
    while (plen > 0 && data[plen - 1] != ':')
        plen--;
    if (plen == 0 || first >= WF_COMM_ZMQ_ENDPOINT_MAX || ranks == 0)
        return false;
    uint32_t k = 0;
    snprintf(eps[k++], WF_COMM_ZMQ_ENDPOINT_MAX, "%.*s", (int)first, data);
    for (const char *p = comma; p; ) {
        p++;
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (k == ranks || len == 0 || len > 5 || strspn(p, "0123456789") < len)
            return false;
        snprintf(eps[k++], WF_COMM_ZMQ_ENDPOINT_MAX, "%.*s%.*s", (int)plen, data,
                 (int)len, p);
        p = e;
    }
    return k == ranks;
}

/* Abort this node's part of the comm world (every blocked rank returns
 * WF_E_ABORTED) and stop dispatching on it; jobs of the mesh epoch in
 * force then fail as node lost, naming `lost`, or, when lost is NULL (a
 * failed job aborted the world; `why` says which), as aborted. */
static void member_flush(wf_server_t *srv);

static void abort_world(wf_server_t *srv, const char *lost, const char *why)
{
    if (!srv->cl.local || srv->cl.aborted)
        return;
    member_flush(srv);      /* parts still waiting for inputs: dropped */
    wf_comm_zmq_local_abort(srv->cl.local);
    srv->cl.aborted = true;
    srv->sched.paused = true;
    srv->cl.abort_mesh_epoch = srv->sched.mesh.epoch;
    /* node names may be cut to the field: the message stays readable */
    snprintf(srv->cl.lost, sizeof srv->cl.lost, "%.*s",
             (int)(sizeof srv->cl.lost - 1), lost ? lost : "");
    wf_log(srv->log, WF_LOG_WARNING, "cluster: comm world of epoch %" PRIu64
           " aborted (%s); jobs in flight fail", srv->cl.world_epoch,
           lost ? lost : why);
}

static int node_index(const wf_cluster_node_t *nodes, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(nodes[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Coordinator, new world `nw`: the parts owed by nodes not in it fail now
 * as lost, those of nodes in it as aborted when the world was (`all`: a
 * late "done" is then ignored); the others keep their bits, renumbered
 * for the new table. */
static void settle_remote(wf_server_t *srv, const wf_cluster_node_t *nw, uint32_t nn,
                          bool all, const char *lost)
{
    for (wf_djob_t *j = srv->cl.remote_jobs; j; j = j->rnext) {
        uint32_t keep = 0, bits = j->remote_pending, xroot = 0;
        j->remote_pending = 0;
        for (uint32_t i = 0; i < srv->cl.n_nodes; i++) {
            if (!(bits & (1u << i)))
                continue;
            const char *name = srv->cl.nodes[i].name;
            int to = node_index(nw, nn, name);
            if (to >= 0 && !all) {
                keep |= 1u << to;
                if (j->xroot & (1u << i))
                    xroot = 1u << to;   /* its outputs still come */
                continue;
            }
            if (to >= 0) {
                wf_djob_rank_done(j, WF_E_ABORTED);
                continue;
            }
            if (!j->err[0])
                snprintf(j->err, sizeof j->err, "node(s) %s lost during the job "
                         "(mesh epoch %" PRIu64 "); the world re-forms without "
                         "them", lost[0] ? lost : name, j->epoch);
            wf_djob_rank_done(j, WF_E_NODE_LOST);
        }
        j->remote_pending = keep;
        j->xroot = xroot;
    }
}

static void cluster_try_install(wf_server_t *srv);
static void xfer_hi(wf_server_t *srv);
static void xfer_connect(wf_server_t *srv, const char *self_name);
static void member_enqueue(wf_server_t *srv, wf_djob_t *job);

/* The control plane has a new world (forming): join it. */
static void cluster_new_world(wf_server_t *srv, const wf_cluster_node_t *nw,
                              uint32_t nn, uint64_t epoch, uint64_t wid,
                              wf_mesh_degrees_t mdeg, uint64_t mepoch)
{
    char lost[160] = "";
    size_t o = 0;
    for (uint32_t i = 0; i < srv->cl.n_nodes; i++)
        if (node_index(nw, nn, srv->cl.nodes[i].name) < 0 && o + 1 < sizeof lost)
            o += (size_t)snprintf(lost + o, sizeof lost - o, "%s%s", o ? ", " : "",
                                  srv->cl.nodes[i].name);
    if (lost[0])
        abort_world(srv, lost, NULL);
    else if (!srv->cl.built || srv->cl.install)
        abort_world(srv, "the world re-formed before it served", NULL);
    if (wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR)
        settle_remote(srv, nw, nn, srv->cl.aborted, lost);
    srv->cl.xfer_ready = 0;     /* members say hi again on the new world */
    srv->cl.world_epoch = epoch;
    srv->cl.built = false;
    srv->cl.install = false;
    srv->cl.mesh_pending = false;   /* the world carries its mesh */
    srv->sched.paused = true;

    uint32_t total = 0, first = 0;
    int self = -1;
    for (uint32_t k = 0; k < nn; k++) {
        total += nw[k].ranks;
        if (nw[k].self) {
            self = (int)k;
            first = nw[k].first_rank;
        }
    }
    if (self < 0 || total > WF_DJOB_MAX_WORLD || nw[self].ranks != srv->n_workers) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: world of epoch %" PRIu64 " (%u "
               "ranks) cannot be served here (at most %d ranks)", epoch, total,
               WF_DJOB_MAX_WORLD);
        return;
    }
    wf_zworld_t *zw = calloc(1, sizeof *zw);
    wf_comm_zmq_local_t *local = NULL;
    if (!zw || wf_comm_zmq_local_new(&local) != WF_OK) {
        free(zw);
        wf_log(srv->log, WF_LOG_ERR, "cluster: out of memory");
        return;
    }
    for (uint32_t k = 0; k < nn; k++)
        if (!parse_data(nw[k].data, nw[k].ranks, &zw->eps[nw[k].first_rank])) {
            wf_log(srv->log, WF_LOG_ERR, "cluster: node %s announced bad comm "
                   "endpoints '%s'; world of epoch %" PRIu64 " not joined",
                   nw[k].name, nw[k].data, epoch);
            free(zw);
            wf_comm_zmq_local_unref(&local);
            return;
        }
    for (uint32_t r = 0; r < total; r++)
        zw->ep_ptrs[r] = zw->eps[r];
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        if (srv->cl.spare[d] && strcmp(wf_comm_zmq_endpoint_address(srv->cl.spare[d]),
                                       zw->eps[first + d]) == 0) {
            zw->ep[d] = srv->cl.spare[d];
            srv->cl.spare[d] = NULL;
        } else {
            /* the world names an older endpoint of ours: the join binds it */
            wf_log(srv->log, WF_LOG_WARNING, "cluster: world of epoch %" PRIu64
                   " names endpoint %s for rank %u; binding it", epoch,
                   zw->eps[first + d], first + d);
        }
    }
    wf_comm_zmq_local_unref(&srv->cl.local);
    srv->cl.local = local;
    srv->cl.aborted = false;
    zw->cfg.zmq_ctx = srv->zctx;
    zw->cfg.local = wf_comm_zmq_local_ref(local);
    zw->cfg.world_id = wid;
    zw->cfg.nranks = (int)total;
    zw->cfg.endpoints = zw->ep_ptrs;
    zw->cfg.connect_timeout_ms = (int)srv->settings.cluster_timeout_ms;
    zw->cfg.op_timeout_ms = 0;      /* node loss aborts blocked ranks */
    zw->cfg.max_message_bytes = (int64_t)(2 * srv->settings.limits.max_tensor_bytes) + 4096;
    if (bind_spares(srv) == WF_OK)
        wf_cluster_set_data(srv->cluster, srv->cl.data);

    wf_mesh_degrees_t deg = fit_mesh(mdeg, total);
    wf_mesh_t mesh;
    char err[256];
    if (wf_mesh_init(&mesh, &deg, (int)total, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: mesh: %s", err);
        for (uint32_t d = 0; d < srv->n_workers; d++)
            wf_comm_zmq_endpoint_destroy(&zw->ep[d]);
        wf_comm_zmq_local_unref(&zw->cfg.local);
        free(zw);
        return;
    }
    mesh.epoch = mepoch;
    memcpy(srv->cl.nodes, nw, nn * sizeof nw[0]);
    srv->cl.n_nodes = nn;
    srv->cl.first_rank = first;
    srv->cl.world_size = total;
    srv->cl.mesh = mesh;
    wf_djob_t *job = regroup_job_new(srv, &mesh, NULL);
    if (!job) {
        for (uint32_t d = 0; d < srv->n_workers; d++)
            wf_comm_zmq_endpoint_destroy(&zw->ep[d]);
        wf_comm_zmq_local_unref(&zw->cfg.local);
        free(zw);
        wf_log(srv->log, WF_LOG_ERR, "cluster: out of memory");
        return;
    }
    job->zworld = zw;
    job->seq = epoch;
    char m[96];
    format_deg(&deg, m, sizeof m);
    wf_log(srv->log, WF_LOG_INFO, "cluster: joining the comm world of epoch %"
           PRIu64 ": ranks %u..%u of %u, mesh %s, mesh epoch %" PRIu64, epoch,
           first, first + srv->n_workers - 1, total, m, mepoch);
    if (wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER) {
        xfer_connect(srv, nw[self].name);
        member_enqueue(srv, job);   /* behind parts waiting for inputs */
    } else {
        regroup_submit(srv, job);
    }
}

/* The regroup of a cluster world ended. */
static void cluster_regroup_done(wf_server_t *srv, const wf_djob_t *job,
                                 wf_status_t st)
{
    if (job->seq != srv->cl.world_epoch)
        return;             /* an older world's */
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_WARNING, "cluster: communicators of epoch %"
               PRIu64 " not built: %s", job->seq, wf_status_str(st));
        return;
    }
    srv->cl.built = true;
    srv->cl.install = true;
    cluster_try_install(srv);
}

/* May the coordinator dispatch? On a world that is built, installed, not
 * aborted, and serves: every member installed it too (a member refuses a
 * job's part before that, which would count as losing it). */
static bool cluster_ready(const wf_server_t *srv)
{
    return srv->cl.built && !srv->cl.install && !srv->cl.aborted &&
           wf_cluster_serving(srv->cluster);
}

/* Built, and the jobs of the old world are done: serve on the new one. */
static void cluster_try_install(wf_server_t *srv)
{
    if (!srv->cl.install || srv->sched.in_flight > 0)
        return;
    srv->cl.install = false;
    wf_sched_resize(&srv->sched, srv->cl.world_size, srv->cl.first_rank,
                    &srv->cl.mesh);
    /* which node each rank is on, and which may take a job's roots: ours,
     * and members whose tensor channel said hi for this world */
    srv->sched.remote_roots = srv->cl.xfer != NULL &&
                              wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR;
    srv->sched.roots_ok = srv->cl.xfer_ready;
    for (uint32_t i = 0; i < srv->cl.n_nodes; i++) {
        const wf_cluster_node_t *n = &srv->cl.nodes[i];
        for (uint32_t r = n->first_rank; r < n->first_rank + n->ranks &&
                                         r < WF_SETTINGS_MAX_DEVICES; r++)
            srv->sched.node_of[r] = (uint8_t)i;
        if (n->self)
            srv->sched.roots_ok |= 1u << i;
    }
    if (wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER)
        xfer_hi(srv);
    char m[96];
    format_deg(&srv->cl.mesh.deg, m, sizeof m);
    wf_log(srv->log, WF_LOG_INFO, "cluster: world of epoch %" PRIu64 " built: "
           "ranks %u..%u of %u, mesh %s, mesh epoch %" PRIu64, srv->cl.world_epoch,
           srv->cl.first_rank, srv->cl.first_rank + srv->n_workers - 1,
           srv->cl.world_size, m, srv->cl.mesh.epoch);
    wf_cluster_world_ready(srv->cluster, srv->cl.world_epoch);
    /* members: once the coordinator's serve came (cluster_sync) */
    srv->sched.paused = srv->reconf.active || !cluster_ready(srv);
    wf_djob_t *failed = NULL;
    wf_sched_replan(&srv->sched, plan_for_mesh, srv, &failed);
    while (failed) {
        wf_djob_t *next = failed->next;
        reply_job(srv, failed);
        wf_djob_free(&failed);
        failed = next;
    }
    dispatch(srv);
}

/* Member: the coordinator's mesh change, once the previous regroup's
 * completion was taken (both may arrive in one wake-up; the workers run
 * the regroups in order anyway). */
static void apply_pending_mesh(wf_server_t *srv)
{
    if (!srv->cl.mesh_pending || srv->reconf.active)
        return;
    srv->cl.mesh_pending = false;
    char err[WF_PROTO_ERROR_MAX];
    srv->cl.epoch_override = srv->cl.mesh_epoch;
    if (start_reconfigure(srv, &srv->cl.mesh_deg, false, "coordinator", false, NULL,
                          false, 0, err, sizeof err) != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "cluster: mesh from the coordinator not "
               "applied: %s", err);
    srv->cl.epoch_override = 0;
}

/* After the control plane ran: follow its world. */
static void cluster_sync(wf_server_t *srv)
{
    wf_cluster_node_t nw[WF_SETTINGS_MAX_NODES];
    uint32_t nn = 0;
    uint64_t epoch = 0, wid = 0, mepoch = 0;
    wf_mesh_degrees_t mdeg;
    if (wf_cluster_role(srv->cluster) == WF_CLUSTER_MEMBER &&
        wf_cluster_coordinator_lost(srv->cluster) && srv->cl.local && !srv->cl.aborted) {
        abort_world(srv, "the coordinator", NULL);
        srv->cl.built = false;
    }
    uint64_t failed;
    char why[WF_PROTO_ERROR_MAX];
    if (wf_cluster_take_abort(srv->cluster, &failed, why, sizeof why) &&
        failed == srv->cl.world_epoch) {
        srv->cl.failed_epoch = failed;
        abort_world(srv, NULL, why);
    }
    wf_cluster_current(srv->cluster, nw, WF_SETTINGS_MAX_NODES, &nn, &epoch, &wid,
                       &mdeg, &mepoch);
    if (nn > 0 && epoch != srv->cl.world_epoch)
        cluster_new_world(srv, nw, nn, epoch, wid, mdeg, mepoch);
    if (srv->sched.paused && !srv->reconf.active && !srv->workers_stopped &&
        wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR &&
        cluster_ready(srv)) {
        srv->sched.paused = false;     /* every member serves the world now */
        dispatch(srv);
    }
}

/* Did a failure that started here abort this node's part of the world
 * of cl.world_epoch (not the control plane: cl.aborted is unset)? Then
 * report it, once, so that the coordinator rebuilds the world. A rank
 * that only saw the abort (WF_E_ABORTED: a peer failed, or died, which
 * the heartbeats find) reports nothing. A member reports with the failed
 * part's "done" (`part_st`, its own error, sent just before), so that the
 * coordinator has the job's own error first. The coordinator reports at
 * once, from its workers' counts of own failures: its job may still wait
 * for members' parts, which only the rebuild's "abort" releases (the
 * worker that failed woke us). */
static void cluster_check_abort(wf_server_t *srv, uint64_t part_seq,
                                wf_status_t part_st)
{
    if (!srv->cluster || !srv->cl.local || srv->workers_stopped)
        return;
    bool coord = wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR;
    uint64_t seq = part_seq;
    wf_status_t st = part_st;
    bool here = !coord && st != WF_OK && st != WF_E_ABORTED;
    if (coord) {
        /* counts before the abort flag: a step aborts, then is counted */
        for (uint32_t d = 0; d < srv->n_workers; d++) {
            wf_worker_t *w = &srv->workers[d];
            uint64_t n = atomic_load(&w->own_failures);
            if (n == srv->cl.own_failures[d])
                continue;
            srv->cl.own_failures[d] = n;
            if (!here) {
                here = true;
                seq = atomic_load(&w->own_failed_seq);
                st = (wf_status_t)atomic_load(&w->own_failed_status);
            }
        }
    }
    if (!here || !wf_comm_zmq_local_aborted(srv->cl.local) || srv->cl.aborted ||
        !srv->cl.built || srv->cl.install ||
        srv->cl.failed_epoch == srv->cl.world_epoch)
        return;
    srv->cl.failed_epoch = srv->cl.world_epoch;
    wf_log(srv->log, WF_LOG_WARNING, "cluster: job seq %" PRIu64 " failed here "
           "(%s) and aborted this node's part of the comm world of epoch %"
           PRIu64 "; %s", seq, wf_status_str(st), srv->cl.world_epoch,
           coord ? "rebuilding it" : "telling the coordinator");
    wf_cluster_world_failed(srv->cluster, srv->cl.world_epoch, seq, st,
                            wf_now_usec());
    if (coord)
        cluster_sync(srv);
}

static bool xfer_send_inputs(wf_server_t *srv, const wf_djob_t *job,
                             const char *node);

/* Coordinator, at dispatch: the descriptor of `job` to every member
 * holding some of its ranks, and to the one holding its roots (if not
 * us) its inputs on the tensor channel. Returns the parts that will
 * answer. */
static uint32_t cluster_remote(void *arg, wf_djob_t *job)
{
    wf_server_t *srv = arg;
    wf_ctl_msg_t *m = &srv->cl_msg;
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];
    const wf_tensor_desc_t *k = &job->req.tensors[a->k];
    uint32_t fbits;
    memcpy(&fbits, &job->scale, sizeof fbits);
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "job");
    wf_ctl_put_uint(m, "seq", job->seq);
    wf_ctl_put_uint(m, "epoch", job->epoch);
    wf_ctl_put_uint(m, "id", job->req.id);
    wf_ctl_put_uint(m, "base", job->device[0]);
    wf_ctl_put_uint(m, "g", (uint64_t)job->group_size);
    wf_ctl_put_uint(m, "B", (uint64_t)q->shape[0]);
    wf_ctl_put_uint(m, "Sq", (uint64_t)q->shape[1]);
    wf_ctl_put_uint(m, "Hq", (uint64_t)q->shape[2]);
    wf_ctl_put_uint(m, "D", (uint64_t)q->shape[3]);
    wf_ctl_put_uint(m, "Skv", (uint64_t)k->shape[1]);
    wf_ctl_put_uint(m, "Hkv", (uint64_t)k->shape[2]);
    wf_ctl_put_uint(m, "qdt", (uint64_t)q->dtype);
    wf_ctl_put_uint(m, "kdt", (uint64_t)k->dtype);
    wf_ctl_put_uint(m, "vdt", (uint64_t)job->req.tensors[a->v].dtype);
    wf_ctl_put_uint(m, "odt", (uint64_t)job->out_desc[0].dtype);
    wf_ctl_put_uint(m, "lse", job->n_outputs > 1);
    wf_ctl_put_uint(m, "causal", a->causal);
    wf_ctl_put_uint(m, "scale", fbits);
    wf_ctl_put_uint(m, "rot", (uint64_t)job->rotate_method);
    wf_ctl_put_uint(m, "f32", job->convert_to_fp32);
    wf_ctl_put_uint(m, "ra", job->ring_anything);
    wf_ctl_put_uint(m, "ua", job->ulysses_anything);
    wf_ctl_put_uint(m, "lb", job->load_balance);
    if (!job->cp) {
        /* a head split, its ranks all on one member (scheduler.c): which
         * ones, as offsets from `base` (device order = rank order) */
        uint64_t mask = 0;
        for (int r = 0; r < job->group_size; r++)
            mask |= UINT64_C(1) << ((job->device[r] - job->device[0]) & 63);
        wf_ctl_put_uint(m, "hs", 1);
        wf_ctl_put_uint(m, "mask", mask);
    }
    uint32_t parts = 0;
    job->remote_pending = 0;
    job->xroot = 0;
    job->world_epoch = srv->cl.world_epoch;
    uint32_t lo = job->device[0], hi = lo + (uint32_t)job->group_size;
    for (uint32_t i = 0; i < srv->cl.n_nodes; i++) {
        const wf_cluster_node_t *n = &srv->cl.nodes[i];
        if (n->self || n->first_rank >= hi || n->first_rank + n->ranks <= lo)
            continue;
        bool root = n->first_rank <= lo && lo < n->first_rank + n->ranks;
        if (wf_cluster_send(srv->cluster, n->name, m) &&
            (!root || xfer_send_inputs(srv, job, n->name))) {
            job->remote_pending |= 1u << i;
            if (root)
                job->xroot = 1u << i;
            parts++;
        } else if (root) {
            /* its part would wait for the inputs forever, and every other
             * rank for it: the node counts as lost (the world re-forms) */
            snprintf(job->err, sizeof job->err, "node %s unreachable on the "
                     "tensor channel", n->name);
            atomic_store(&job->status, WF_E_NODE_LOST);
            abort_world(srv, n->name, NULL);
            wf_cluster_node_lost(srv->cluster, n->name, "its tensor channel "
                                 "failed", wf_now_usec());
        } else {
            /* its ranks never come: the loss of the node aborts the others */
            snprintf(job->err, sizeof job->err, "node %s unreachable", n->name);
            atomic_store(&job->status, WF_E_NODE_LOST);
        }
    }
    if (job->remote_pending) {
        job->rnext = srv->cl.remote_jobs;
        srv->cl.remote_jobs = job;
    }
    return parts;
}

static void unlink_remote(wf_server_t *srv, wf_djob_t *job)
{
    for (wf_djob_t **l = &srv->cl.remote_jobs; *l; l = &(*l)->rnext)
        if (*l == job) {
            *l = job->rnext;
            job->rnext = NULL;
            return;
        }
}

/* Member: "done" of our part back to the coordinator. */
static void member_done(wf_server_t *srv, uint64_t seq, uint64_t epoch,
                        wf_status_t st)
{
    wf_ctl_msg_t *m = &srv->cl_msg;
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "done");
    wf_ctl_put_uint(m, "seq", seq);
    wf_ctl_put_uint(m, "epoch", epoch);
    wf_ctl_put_uint(m, "st", (uint64_t)(int64_t)st & 0xffffffffu);
    wf_cluster_send(srv->cluster, NULL, m);
}

static bool get_u(const wf_ctl_msg_t *m, const char *key, uint64_t max,
                  uint64_t *ret)
{
    return wf_ctl_get_uint(m, key, ret) && *ret <= max;
}

static wf_status_t member_root_setup(wf_server_t *srv, wf_djob_t *job);
static void member_take_early(wf_server_t *srv, wf_djob_t *job);
static void member_pump(wf_server_t *srv);
static void member_submit(wf_server_t *srv, wf_djob_t *job);
static void early_drop(wf_server_t *srv, uint32_t i);

/* Member: a job descriptor from the coordinator: queue our ranks' parts
 * in the order received, which is the coordinator's. When the job's
 * roots are ours (a head split's: every rank, all ours), its inputs come
 * on the tensor channel: the part (and every one behind it) waits for
 * them in cl.mq. */
static void member_job(wf_server_t *srv, const wf_ctl_msg_t *m)
{
    uint64_t seq = 0, epoch = 0, id = 0, base, g, B, Sq, Hq, D, Skv, Hkv, qdt,
             kdt, vdt, odt, lse, causal, scale, rot, f32, ra, ua, lb;
    const uint64_t big = (uint64_t)INT32_MAX;
    bool ok = get_u(m, "seq", UINT64_MAX, &seq) && get_u(m, "epoch", UINT64_MAX, &epoch) &&
              get_u(m, "id", UINT64_MAX, &id) &&
              get_u(m, "base", WF_DJOB_MAX_WORLD, &base) &&
              get_u(m, "g", WF_DJOB_MAX_WORLD, &g) && get_u(m, "B", big, &B) &&
              get_u(m, "Sq", big, &Sq) && get_u(m, "Hq", big, &Hq) &&
              get_u(m, "D", big, &D) && get_u(m, "Skv", big, &Skv) &&
              get_u(m, "Hkv", big, &Hkv) && get_u(m, "qdt", 255, &qdt) &&
              get_u(m, "kdt", 255, &kdt) && get_u(m, "vdt", 255, &vdt) &&
              get_u(m, "odt", 255, &odt) && get_u(m, "lse", 1, &lse) &&
              get_u(m, "causal", 1, &causal) && get_u(m, "scale", UINT32_MAX, &scale) &&
              get_u(m, "rot", 255, &rot) && get_u(m, "f32", 1, &f32) &&
              get_u(m, "ra", 1, &ra) && get_u(m, "ua", 1, &ua) && get_u(m, "lb", 1, &lb);
    /* a head split (absent: context-parallel): its ranks base + the bits
     * of mask, g of them, in rank order */
    uint64_t hs = 0, mask = 0;
    if (ok && wf_ctl_get_uint(m, "hs", &hs))
        ok = hs <= 1 && (hs == 0 || get_u(m, "mask", UINT64_MAX, &mask));
    if (ok && hs) {
        uint32_t bits = 0, top = 0;
        for (uint32_t b = 0; b < 64; b++)
            if (mask & (UINT64_C(1) << b)) {
                bits++;
                top = b;
            }
        ok = (mask & 1) && bits == g && base + top < srv->cl.world_size;
    }
    if (!ok || g < 1 || base + g > srv->cl.world_size) {
        wf_log(srv->log, WF_LOG_WARNING, "cluster: malformed job descriptor (seq %"
               PRIu64 ") dropped", seq);
        member_done(srv, seq, epoch, WF_E_MALFORMED);
        return;
    }
    /* The mesh the job runs under: the one in force, or the one of the
     * regroup already queued on the workers (the descriptor may overtake
     * its completion; the workers run the regroup first). */
    const wf_mesh_t *mesh = srv->reconf.active && srv->reconf.regrouping
                                ? &srv->reconf.target : &srv->sched.mesh;
    if (srv->cl.aborted && srv->cl.failed_epoch == srv->cl.world_epoch &&
        srv->cl.built && epoch == mesh->epoch) {
        /* a failed job aborted this world; the coordinator rebuilds it (an
         * UNAVAILABLE here would count as losing this node) */
        member_done(srv, seq, epoch, WF_E_ABORTED);
        return;
    }
    uint32_t cp_ranks = mesh->deg.ring * mesh->deg.ulysses * mesh->deg.tp;
    if (!srv->cl.built || srv->cl.install || srv->cl.aborted || epoch != mesh->epoch ||
        (hs ? cp_ranks != mesh->deg.tp || (uint32_t)g > mesh->deg.tp
            : (uint32_t)g != cp_ranks)) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: job %" PRIu64 " (seq %" PRIu64
               ") for mesh epoch %" PRIu64 " refused: this node serves mesh epoch %"
               PRIu64, id, seq, epoch, mesh->epoch);
        member_done(srv, seq, epoch, WF_E_UNAVAILABLE);
        return;
    }
    wf_djob_t *job = wf_djob_new();
    if (!job) {
        member_done(srv, seq, epoch, WF_E_NO_MEMORY);
        return;
    }
    job->kind = WF_DJOB_ATTENTION;
    job->remote_part = true;
    job->seq = seq;
    job->epoch = epoch;
    job->plan_epoch = epoch;
    job->mesh = *mesh;
    job->cp = !hs;
    job->req.id = id;
    job->req.op = WF_OP_ATTENTION;
    job->req.n_tensors = 3;
    wf_attention_args_t *a = &job->req.args.attention;
    a->q = 0;
    a->k = 1;
    a->v = 2;
    a->causal = causal != 0;
    a->return_lse = lse != 0;
    const int64_t shp[3][4] = { { (int64_t)B, (int64_t)Sq, (int64_t)Hq, (int64_t)D },
                                { (int64_t)B, (int64_t)Skv, (int64_t)Hkv, (int64_t)D },
                                { (int64_t)B, (int64_t)Skv, (int64_t)Hkv, (int64_t)D } };
    const uint64_t dts[3] = { qdt, kdt, vdt };
    for (int t = 0; t < 3; t++) {
        wf_tensor_desc_t *d = &job->req.tensors[t];
        d->dtype = (wf_dtype_t)dts[t];
        d->rank = 4;
        memcpy(d->shape, shp[t], sizeof shp[t]);
        d->frame = (uint32_t)t;
    }
    uint32_t fbits = (uint32_t)scale;
    memcpy(&job->scale, &fbits, sizeof fbits);
    job->rotate_method = (wf_rotate_t)rot;
    job->convert_to_fp32 = f32 != 0;
    job->ring_anything = ra != 0;
    job->ulysses_anything = ua != 0;
    job->load_balance = lb != 0;
    job->out_desc[0].dtype = (wf_dtype_t)odt;
    job->n_outputs = lse ? 2 : 1;
    job->group_size = (int)g;
    job->run = hs ? wf_attention_head_split_run : wf_attention_cp_run;
    job->done = &srv->done;
    job->world_epoch = srv->cl.world_epoch;
    int local = 0, roots = 0;
    /* the roots (they read the inputs and write the outputs): a cp job's
     * first tp ranks, every rank of a head split */
    uint32_t lo = srv->cl.first_rank, T = hs ? (uint32_t)g : mesh->deg.tp;
    for (uint32_t r = 0, off = 0; r < g; r++, off++) {
        while (hs && !(mask & (UINT64_C(1) << off)))
            off++;
        uint32_t wr = (uint32_t)base + off;
        if (wr < lo || wr - lo >= srv->n_workers)
            continue;
        job->device[r] = wr - lo;
        job->task[r].job = job;
        job->task[r].rank = (int)r;
        local++;
        roots += r < T;
    }
    if (roots > 0 && ((uint32_t)roots != T || !srv->cl.xfer ||
                      member_root_setup(srv, job) != WF_OK)) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: job %" PRIu64 " (seq %" PRIu64
               ") has %s on this member; %s", id, seq,
               (uint32_t)roots != T ? "some of its roots"
                                    : !srv->cl.xfer ? "its roots but no tensor channel"
                                                    : "roots it cannot take",
               (uint32_t)local == g || hs ? "refused" : "it fails");
        /* a head split has no comm: nothing waits for its ranks */
        if ((uint32_t)local == g || hs) {
            for (uint32_t i = 0; i < srv->cl.n_early; i++)
                if (srv->cl.early[i].seq == seq &&
                    srv->cl.early[i].epoch == job->world_epoch) {
                    early_drop(srv, i);     /* its inputs, if they came */
                    break;
                }
            wf_djob_free(&job);
            member_done(srv, seq, epoch, WF_E_INTERNAL);
            return;
        }
        /* Not refused: the job's ranks on other nodes would wait for ours
         * in a collective forever. Our roots fail their step instead
         * (cp_step), which aborts the world; the coordinator rebuilds it.
         * They fail at once, not waiting for the inputs: inputs over our
         * own limits may never come (the channel drops a message over its
         * size limit); inputs that do come wait among the early ones and
         * are dropped with the aborted world. */
        job->root_here = true;
        job->inputs_bad = true;
        job->inputs_in = true;
    }
    if (local == 0) {
        wf_djob_free(&job);
        member_done(srv, seq, epoch, WF_OK);
        return;
    }
    atomic_store(&job->remaining, local);
    if (job->root_here && !job->inputs_in)
        member_take_early(srv, job);
    if (job->root_here && !job->inputs_in && srv->cl.early_lost_seq >= seq &&
        srv->cl.early_lost_epoch == job->world_epoch) {
        /* its inputs came and were dropped for room (the channel keeps
         * the coordinator's order): it would wait forever */
        wf_log(srv->log, WF_LOG_ERR, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") were dropped; it fails", id, seq);
        job->inputs_in = true;
        job->inputs_bad = true;
    }
    member_enqueue(srv, job);
}

/* Member: queue a part on its ranks' workers. */
static void member_submit(wf_server_t *srv, wf_djob_t *job)
{
    job->t_dispatch_us = wf_now_usec();
    for (int r = 0; r < job->group_size; r++)
        if (job->task[r].job)   /* our ranks (device = local index) */
            wf_worker_submit(&srv->workers[job->device[r]], &job->task[r]);
}

/* Member: hand the queue to the workers in order, up to the first part
 * whose inputs have not come (the parts behind it wait: every worker's
 * FIFO keeps the coordinator's order). */
static void member_pump(wf_server_t *srv)
{
    while (srv->cl.mq_head) {
        wf_djob_t *j = srv->cl.mq_head;
        if (j->kind != WF_DJOB_REGROUP && j->root_here && !j->inputs_in)
            return;
        srv->cl.mq_head = j->next;
        if (!srv->cl.mq_head)
            srv->cl.mq_tail = NULL;
        j->next = NULL;
        if (j->kind == WF_DJOB_REGROUP)
            regroup_submit(srv, j);
        else
            member_submit(srv, j);
    }
}

static void member_enqueue(wf_server_t *srv, wf_djob_t *job)
{
    job->next = NULL;
    if (srv->cl.mq_tail)
        srv->cl.mq_tail->next = job;
    else
        srv->cl.mq_head = job;
    srv->cl.mq_tail = job;
    member_pump(srv);
}

static void early_drop(wf_server_t *srv, uint32_t i)
{
    for (uint32_t f = 0; f < srv->cl.early[i].n; f++)
        zmq_msg_close(&srv->cl.early[i].f[f]);
    memmove(&srv->cl.early[i], &srv->cl.early[i + 1],
            (srv->cl.n_early - i - 1) * sizeof srv->cl.early[0]);
    srv->cl.n_early--;
}

/* Member, the world aborted (or lost): the parts not yet on the workers
 * answer "aborted" and are dropped with the inputs that came early;
 * regroups stay queued, in order. */
static void member_flush(wf_server_t *srv)
{
    wf_djob_t *keep = NULL, **tail = &keep, *j = srv->cl.mq_head;
    srv->cl.mq_head = srv->cl.mq_tail = NULL;
    while (j) {
        wf_djob_t *next = j->next;
        j->next = NULL;
        if (j->kind == WF_DJOB_REGROUP) {
            *tail = j;
            tail = &j->next;
            srv->cl.mq_tail = j;
        } else {
            member_done(srv, j->seq, j->epoch, WF_E_ABORTED);
            wf_djob_free(&j);
        }
        j = next;
    }
    srv->cl.mq_head = keep;
    while (srv->cl.n_early)
        early_drop(srv, 0);
    member_pump(srv);
}


/* ------------------------------------------------------------------ */
/* tensor channel (PROTOCOL.md section 11, "Tensor channel"): the
 * coordinator's ROUTER on data_address, each member's DEALER (routing id
 * = its node name). A job whose roots are on a member gets its inputs
 * ("in") from the coordinator and sends its outputs ("out") back. Each
 * message is a header (a control map: t, epoch = world epoch, seq, n,
 * st) and n tensor frames, sent zero-copy. Nothing from a peer is taken
 * before its name, world epoch, sequence number and sizes matched. */

/* Largest frame on the channel: an output may be twice its input (f16
 * in, f32 out). */
static int64_t xfer_max_msg(const wf_server_t *srv)
{
    return (int64_t)(2 * srv->settings.limits.max_tensor_bytes) + 4096;
}

/* A member takes what its coordinator sends at any size (-1): the
 * coordinator bounds the inputs by its own max_tensor_bytes, and a member
 * whose limit is smaller must still take them to fail the job (its
 * descriptor check), as ZeroMQ cuts a connection over ZMQ_MAXMSGSIZE
 * for good and every later job rooted here would stall. */
static void xfer_opts(wf_server_t *srv, void *sock, bool coord)
{
    int zero = 0;
    int64_t max = coord ? xfer_max_msg(srv) : -1;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero);  /* bounded by */
    zmq_setsockopt(sock, ZMQ_RCVHWM, &zero, sizeof zero);  /* jobs in flight */
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
}

/* Coordinator: bind the ROUTER on data_address, any port; announced in
 * every world ("xfer"). */
static wf_status_t xfer_bind(wf_server_t *srv)
{
    char host[WF_SETTINGS_NAME_MAX], bind[WF_SETTINGS_NAME_MAX + 16];
    snprintf(host, sizeof host, "%s", srv->settings.data_address);
    if (host[0] == '\0' && gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    srv->cl.xfer = zmq_socket(srv->zctx, ZMQ_ROUTER);
    if (!srv->cl.xfer) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: tensor channel: zmq_socket: %s",
               zmq_strerror(zmq_errno()));
        return WF_E_INTERNAL;
    }
    int one = 1;
    xfer_opts(srv, srv->cl.xfer, true);
    /* MANDATORY: a send to a member not connected fails instead of being
     * dropped; HANDOVER: a restarted member takes its name back */
    zmq_setsockopt(srv->cl.xfer, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(srv->cl.xfer, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    size_t len = sizeof srv->cl.xfer_ep;
    if (zmq_bind(srv->cl.xfer, bind) != 0 ||
        zmq_getsockopt(srv->cl.xfer, ZMQ_LAST_ENDPOINT, srv->cl.xfer_ep, &len) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: cannot bind the tensor channel "
               "on %s (data_address): %s", host, zmq_strerror(zmq_errno()));
        return WF_E_INTERNAL;
    }
    wf_cluster_set_xfer(srv->cluster, srv->cl.xfer_ep);
    wf_log(srv->log, WF_LOG_INFO, "cluster: tensor channel on %s", srv->cl.xfer_ep);
    return WF_OK;
}

static void xfer_close(wf_server_t *srv)
{
    wf_djob_t *j = srv->cl.mq_head;
    while (j) {
        wf_djob_t *next = j->next;
        wf_djob_free(&j);
        j = next;
    }
    srv->cl.mq_head = srv->cl.mq_tail = NULL;
    while (srv->cl.n_early)
        early_drop(srv, 0);
    if (srv->cl.xfer)
        zmq_close(srv->cl.xfer);
    srv->cl.xfer = NULL;
    srv->cl.xfer_ep[0] = '\0';
}

/* Member, a new world: connect to the channel it names (if it changed). */
static void xfer_connect(wf_server_t *srv, const char *self_name)
{
    const char *ep = wf_cluster_xfer(srv->cluster);
    if (srv->cl.xfer && strcmp(ep, srv->cl.xfer_ep) == 0)
        return;
    if (srv->cl.xfer)
        zmq_close(srv->cl.xfer);
    srv->cl.xfer = NULL;
    srv->cl.xfer_ep[0] = '\0';
    if (!ep[0])
        return;         /* no channel: our ranks are never roots */
    void *sock = zmq_socket(srv->zctx, ZMQ_DEALER);
    if (!sock) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: tensor channel: zmq_socket: %s",
               zmq_strerror(zmq_errno()));
        return;
    }
    xfer_opts(srv, sock, false);
    if (zmq_setsockopt(sock, ZMQ_ROUTING_ID, self_name, strlen(self_name)) != 0 ||
        zmq_connect(sock, ep) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: cannot connect the tensor channel "
               "%s: %s", ep, zmq_strerror(zmq_errno()));
        zmq_close(sock);
        return;
    }
    srv->cl.xfer = sock;
    snprintf(srv->cl.xfer_ep, sizeof srv->cl.xfer_ep, "%s", ep);
}

/* Send the header in srv->xf_msg (to `node` on the ROUTER; NULL: the
 * DEALER's peer), then n frames (moved out of frames[]). False when it
 * could not be queued (the frames are closed). */
static bool xfer_send(wf_server_t *srv, const char *node, zmq_msg_t *frames,
                      uint32_t n)
{
    bool ok = true;
    wf_buf_reset(&srv->buf);
    if (wf_ctl_encode(&srv->xf_msg, &srv->buf) != WF_OK)
        ok = false;
    if (ok && node && zmq_send(srv->cl.xfer, node, strlen(node),
                               ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        ok = false;
    /* after the first frame ZeroMQ takes the whole message */
    if (ok && zmq_send(srv->cl.xfer, srv->buf.data, srv->buf.len,
                       (n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
        ok = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!ok || zmq_msg_send(&frames[i], srv->cl.xfer,
                                (i + 1 < n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
            ok = false;
        zmq_msg_close(&frames[i]);
    }
    return ok;
}

/* Coordinator, at dispatch: q, k, v of `job` to the member holding its
 * roots (copies share the received buffers). */
static bool xfer_send_inputs(wf_server_t *srv, const wf_djob_t *job,
                             const char *node)
{
    if (!srv->cl.xfer)
        return false;
    const wf_attention_args_t *a = &job->req.args.attention;
    const uint32_t idx[3] = { a->q, a->k, a->v };
    zmq_msg_t f[3];
    for (int t = 0; t < 3; t++) {
        zmq_msg_init(&f[t]);
        zmq_msg_copy(&f[t], (zmq_msg_t *)&job->frames[job->req.tensors[idx[t]].frame]);
    }
    wf_ctl_msg_t *m = &srv->xf_msg;
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "in");
    wf_ctl_put_uint(m, "epoch", job->world_epoch);
    wf_ctl_put_uint(m, "seq", job->seq);
    wf_ctl_put_uint(m, "n", 3);
    bool ok = xfer_send(srv, node, f, 3);
    if (!ok)
        wf_log(srv->log, WF_LOG_WARNING, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") not sent to %s: %s", job->req.id, job->seq, node,
               zmq_strerror(zmq_errno()));
    return ok;
}

/* Member: our part of a world serves the channel: tell the coordinator
 * ("hi"), which then gives our ranks jobs' roots. */
static void xfer_hi(wf_server_t *srv)
{
    if (!srv->cl.xfer)
        return;
    wf_ctl_msg_t *m = &srv->xf_msg;
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "hi");
    wf_ctl_put_uint(m, "epoch", srv->cl.world_epoch);
    xfer_send(srv, NULL, NULL, 0);
}

/* Member: the part holding the roots ended well: its outputs (and so its
 * "done") go back on the channel. False when they could not be queued. */
static bool xfer_send_outputs(wf_server_t *srv, wf_djob_t *job)
{
    if (!srv->cl.xfer)
        return false;
    zmq_msg_t f[WF_DJOB_MAX_OUTPUTS];
    uint32_t n = job->n_outputs;
    for (uint32_t i = 0; i < n; i++) {
        if (zmq_msg_init_data(&f[i], job->out[i], (size_t)job->out_desc[i].nbytes,
                              free_output, NULL) != 0) {
            for (uint32_t k = 0; k < i; k++)
                zmq_msg_close(&f[k]);   /* gives nothing back: out[k] freed */
            return false;
        }
        job->out[i] = NULL;
    }
    wf_ctl_msg_t *m = &srv->xf_msg;
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "out");
    wf_ctl_put_uint(m, "epoch", job->world_epoch);
    wf_ctl_put_uint(m, "seq", job->seq);
    wf_ctl_put_uint(m, "st", 0);
    wf_ctl_put_uint(m, "n", n);
    return xfer_send(srv, NULL, f, n);
}

/* Member: the descriptor makes our ranks the roots: the inputs' sizes to
 * expect and the outputs to write. */
static wf_status_t member_root_setup(wf_server_t *srv, wf_djob_t *job)
{
    uint64_t max_in = srv->settings.limits.max_tensor_bytes;
    for (int t = 0; t < 3; t++)
        if (wf_tensor_desc_finish(&job->req.tensors[t]) != WF_OK ||
            job->req.tensors[t].nbytes > max_in)
            return WF_E_LIMIT;
    const wf_tensor_desc_t *q = &job->req.tensors[0];
    wf_tensor_desc_t *o = &job->out_desc[0];
    snprintf(o->name, sizeof o->name, "out");
    o->rank = 4;
    memcpy(o->shape, q->shape, 4 * sizeof q->shape[0]);
    o->frame = 0;
    if (job->n_outputs > 1) {
        wf_tensor_desc_t *l = &job->out_desc[1];
        snprintf(l->name, sizeof l->name, "lse");
        l->dtype = WF_DTYPE_F32;
        l->rank = 3;
        memcpy(l->shape, q->shape, 3 * sizeof q->shape[0]);
        l->frame = 1;
    }
    for (uint32_t i = 0; i < job->n_outputs; i++) {
        if (wf_tensor_desc_finish(&job->out_desc[i]) != WF_OK ||
            job->out_desc[i].nbytes > 2 * max_in)
            return WF_E_LIMIT;
        size_t size = ((size_t)job->out_desc[i].nbytes + 63) & ~(size_t)63;
        job->out[i] = aligned_alloc(64, size ? size : 64);
        if (!job->out[i])
            return WF_E_NO_MEMORY;
    }
    job->root_here = true;
    return WF_OK;
}

/* Member: give `job` the n received frames when they match its inputs
 * (else the root's step fails: the world is aborted and rebuilt). The
 * frames are moved out of f[]. */
static void member_give_inputs(wf_server_t *srv, wf_djob_t *job, zmq_msg_t *f,
                               uint32_t n)
{
    bool ok = n == 3;
    for (uint32_t t = 0; ok && t < 3; t++)
        ok = zmq_msg_size(&f[t]) == job->req.tensors[t].nbytes;
    for (uint32_t t = 0; t < 3 && t < n; t++) {
        zmq_msg_init(&job->frames[t]);
        zmq_msg_move(&job->frames[t], &f[t]);
    }
    job->n_frames = n < 3 ? n : 3;
    if (!ok) {
        wf_log(srv->log, WF_LOG_ERR, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") do not match its descriptor; the job fails",
               job->req.id, job->seq);
        job->inputs_bad = true;
    }
    job->inputs_in = true;
}

/* Member, a new part holding roots: its inputs may have come first. */
static void member_take_early(wf_server_t *srv, wf_djob_t *job)
{
    for (uint32_t i = 0; i < srv->cl.n_early; i++) {
        xfer_early_t *e = &srv->cl.early[i];
        if (e->seq != job->seq || e->epoch != job->world_epoch)
            continue;
        member_give_inputs(srv, job, e->f, e->n);
        e->n = 0;
        early_drop(srv, i);
        return;
    }
}

/* Member: "in" {epoch, seq, n} and its frames. */
static void member_in(wf_server_t *srv, const wf_ctl_msg_t *h, zmq_msg_t *f,
                      uint32_t n)
{
    uint64_t epoch, seq, nn;
    if (!wf_ctl_get_uint(h, "epoch", &epoch) || !wf_ctl_get_uint(h, "seq", &seq) ||
        !wf_ctl_get_uint(h, "n", &nn) || nn != n || n != 3)
        return;
    for (wf_djob_t *j = srv->cl.mq_head; j; j = j->next) {
        if (j->kind == WF_DJOB_REGROUP || !j->root_here || j->seq != seq ||
            j->world_epoch != epoch || j->inputs_in)
            continue;
        member_give_inputs(srv, j, f, n);
        member_pump(srv);
        return;
    }
    /* Its descriptor may still come only for the world in force, not
     * aborted (descriptors precede a new world on the control plane, and
     * an aborted world takes none): else nothing would ever take them. */
    if (epoch != srv->cl.world_epoch || srv->cl.aborted)
        return;
    if (srv->cl.n_early == XFER_EARLY) {
        wf_log(srv->log, WF_LOG_WARNING, "cluster: too many inputs ahead of "
               "their jobs; dropping the oldest (seq %" PRIu64 ")",
               srv->cl.early[0].seq);
        if (srv->cl.early_lost_epoch != srv->cl.early[0].epoch ||
            srv->cl.early_lost_seq < srv->cl.early[0].seq) {
            srv->cl.early_lost_seq = srv->cl.early[0].seq;
            srv->cl.early_lost_epoch = srv->cl.early[0].epoch;
        }
        early_drop(srv, 0);
    }
    xfer_early_t *e = &srv->cl.early[srv->cl.n_early++];
    e->seq = seq;
    e->epoch = epoch;
    e->n = n;
    for (uint32_t t = 0; t < n; t++) {
        zmq_msg_init(&e->f[t]);
        zmq_msg_move(&e->f[t], &f[t]);
    }
}

/* Coordinator: "hi" {epoch} from member `name`. */
static void coord_hi(wf_server_t *srv, const char *name, const wf_ctl_msg_t *h)
{
    uint64_t epoch;
    int i = node_index(srv->cl.nodes, srv->cl.n_nodes, name);
    if (i < 0 || i >= 32 || srv->cl.nodes[i].self ||
        !wf_ctl_get_uint(h, "epoch", &epoch) || epoch != srv->cl.world_epoch)
        return;
    srv->cl.xfer_ready |= 1u << i;
    if (srv->cl.built && !srv->cl.install) {
        srv->sched.roots_ok |= 1u << i;
        dispatch(srv);
    }
}

/* Coordinator: "out" {epoch, seq, st, n} and the outputs from `name`. */
static void coord_out(wf_server_t *srv, const char *name, const wf_ctl_msg_t *h,
                      zmq_msg_t *f, uint32_t n)
{
    uint64_t epoch, seq, st, nn;
    int i = node_index(srv->cl.nodes, srv->cl.n_nodes, name);
    if (i < 0 || i >= 32 || !wf_ctl_get_uint(h, "epoch", &epoch) ||
        !wf_ctl_get_uint(h, "seq", &seq) || !wf_ctl_get_uint(h, "st", &st) ||
        !wf_ctl_get_uint(h, "n", &nn) || nn != n)
        return;
    for (wf_djob_t *j = srv->cl.remote_jobs; j; j = j->rnext) {
        if (j->seq != seq)
            continue;
        uint32_t bit = 1u << i;
        if (!(j->remote_pending & bit) || !(j->xroot & bit) || j->world_epoch != epoch)
            return;     /* settled already (a late message of an old world) */
        j->remote_pending &= ~bit;
        wf_status_t s = (wf_status_t)(int32_t)(uint32_t)st;
        bool sizes = s != WF_OK || n == j->n_outputs;
        for (uint32_t k = 0; sizes && s == WF_OK && k < n; k++)
            sizes = zmq_msg_size(&f[k]) == j->out_desc[k].nbytes;
        if (!sizes) {
            s = WF_E_INTERNAL;
            snprintf(j->err, sizeof j->err, "node %s sent outputs that do not "
                     "match the job", name);
        } else if (s == WF_OK) {
            for (uint32_t k = 0; k < n; k++) {
                zmq_msg_init(&j->out_msg[k]);
                zmq_msg_move(&j->out_msg[k], &f[k]);
            }
            j->n_out_msgs = n;
        } else if (!j->err[0] && s != WF_E_ABORTED) {
            snprintf(j->err, sizeof j->err, "the job's part on node %s failed: %s",
                     name, wf_status_str(s));
        }
        wf_djob_rank_done(j, s);
        return;
    }
}

/* Read every waiting message of the tensor channel. */
static void xfer_recv(wf_server_t *srv)
{
    bool coord = wf_cluster_role(srv->cluster) == WF_CLUSTER_COORDINATOR;
    for (int budget = 0; srv->cl.xfer && budget < 256; budget++) {
        /* [name (ROUTER)], header, up to 3 frames */
        zmq_msg_t p[5];
        uint32_t n = 0, max = coord ? 5 : 4;
        bool over = false, more = true;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, srv->cl.xfer, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < max) {
                zmq_msg_init(&p[n]);
                zmq_msg_move(&p[n++], &m);
            } else {
                over = true;
            }
            zmq_msg_close(&m);
        }
        if (n == 0)
            return;
        uint32_t h = coord ? 1 : 0;
        char name[WF_SETTINGS_NAME_MAX] = "";
        char err[64];
        const char *t = NULL;
        if (coord && zmq_msg_size(&p[0]) < sizeof name)
            memcpy(name, zmq_msg_data(&p[0]), zmq_msg_size(&p[0]));
        if (!over && n > h && (!coord || (name[0] &&
                                          strlen(name) == zmq_msg_size(&p[0]))) &&
            wf_ctl_decode(zmq_msg_data(&p[h]), zmq_msg_size(&p[h]), &srv->xf_msg,
                          err, sizeof err) == WF_OK)
            t = wf_ctl_get_str(&srv->xf_msg, "t");
        if (t && coord && strcmp(t, "hi") == 0)
            coord_hi(srv, name, &srv->xf_msg);
        else if (t && coord && strcmp(t, "out") == 0)
            coord_out(srv, name, &srv->xf_msg, &p[h + 1], n - h - 1);
        else if (t && !coord && strcmp(t, "in") == 0)
            member_in(srv, &srv->xf_msg, &p[h + 1], n - h - 1);
        for (uint32_t k = 0; k < n; k++)
            zmq_msg_close(&p[k]);
    }
}

/* Coordinator: a member's part of a job ended. */
static void coord_done(wf_server_t *srv, const char *from, const wf_ctl_msg_t *m)
{
    uint64_t seq, st;
    int i = node_index(srv->cl.nodes, srv->cl.n_nodes, from);
    if (i < 0 || !wf_ctl_get_uint(m, "seq", &seq) || !wf_ctl_get_uint(m, "st", &st))
        return;
    for (wf_djob_t *j = srv->cl.remote_jobs; j; j = j->rnext) {
        if (j->seq != seq)
            continue;
        if (!(j->remote_pending & (1u << i)))
            return;
        j->remote_pending &= ~(1u << i);
        wf_status_t s = (wf_status_t)(int32_t)(uint32_t)st;
        if (s == WF_OK && (j->xroot & (1u << i))) {
            /* the roots' node answers on the tensor channel, with outputs */
            s = WF_E_INTERNAL;
            snprintf(j->err, sizeof j->err, "node %s reported the job done "
                     "without its outputs", from);
        }
        if (s == WF_E_UNAVAILABLE || s == WF_E_MALFORMED) {
            /* its ranks never ran: ours wait for them in a collective.
             * Abort the world; a new round without the node rebuilds it
             * (the node rejoins at once). */
            char why[WF_PROTO_ERROR_MAX];
            snprintf(why, sizeof why, "node %s refused job %" PRIu64, from,
                     j->req.id);
            abort_world(srv, why, NULL);
            wf_cluster_node_lost(srv->cluster, from, "it refused a job",
                                 wf_now_usec());
        }
        if (s != WF_OK && s != WF_E_ABORTED && !j->err[0])
            snprintf(j->err, sizeof j->err, "the job's part on node %s failed: %s",
                     from, wf_status_str(s));
        wf_djob_rank_done(j, s);
        return;
    }
}

static void cluster_message(void *arg, const char *from, const wf_ctl_msg_t *m)
{
    wf_server_t *srv = arg;
    const char *t = wf_ctl_get_str(m, "t");
    if (!t)
        return;
    if (!from && strcmp(t, "job") == 0)
        member_job(srv, m);
    else if (from && strcmp(t, "done") == 0)
        coord_done(srv, from, m);
}

/* ------------------------------------------------------------------ */
/* signals, completions, the loop */

static void handle_completions(wf_server_t *srv)
{
    wf_djob_t *job = wf_done_box_take(&srv->done);
    uint64_t failed_seq = 0;        /* member: a part that failed on its own */
    wf_status_t failed_st = WF_OK;
    while (job) {
        wf_djob_t *next = job->next;
        if (job->kind == WF_DJOB_REGROUP) {
            wf_status_t st = (wf_status_t)atomic_load(&job->status);
            if (job->zworld) {
                cluster_regroup_done(srv, job, st);
                wf_djob_free(&job);
            } else {
                wf_djob_free(&job);
                finish_reconfigure(srv, st);
            }
            job = next;
            continue;
        }
        if (job->remote_part) {
            wf_status_t st = (wf_status_t)atomic_load(&job->status);
            /* the roots' part answers with its outputs on the tensor
             * channel; a failure (or a channel that cannot take them)
             * with "done" on the control plane, ahead of any "aborted" */
            if (!job->root_here || st != WF_OK || !xfer_send_outputs(srv, job)) {
                if (job->root_here && st == WF_OK)
                    st = WF_E_INTERNAL;
                member_done(srv, job->seq, job->epoch, st);
            }
            if (st != WF_OK && st != WF_E_ABORTED && failed_st == WF_OK) {
                failed_seq = job->seq;
                failed_st = st;
            }
            wf_djob_free(&job);
            job = next;
            continue;
        }
        if (srv->cluster) {
            unlink_remote(srv, job);
            if (atomic_load(&job->status) == WF_OK)
                wf_cluster_job_ok(srv->cluster);
        }
        wf_sched_complete(&srv->sched, job);
        reply_job(srv, job);
        wf_djob_free(&job);
        job = next;
    }
    /* A rank failed inside a collective and aborted the world: rebuild it
     * (same mesh, epoch + 1) once the running jobs are done. */
    if (srv->world && wf_comm_host_world_aborted(srv->world) &&
        !srv->workers_stopped) {
        if (srv->reconf.active) {
            srv->reconf.new_world = true;
        } else {
            char err[WF_PROTO_ERROR_MAX];
            wf_log(srv->log, WF_LOG_WARNING, "comm world aborted by a failed "
                   "job: rebuilding it");
            start_reconfigure(srv, &srv->sched.mesh.deg, true, "abort recovery",
                              false, NULL, false, 0, err, sizeof err);
        }
    }
    cluster_check_abort(srv, failed_seq, failed_st);
    advance_reconfigure(srv);
    if (srv->cluster) {
        cluster_try_install(srv);
        apply_pending_mesh(srv);
    }
}

static void status_line(const wf_server_t *srv, char *buf, size_t len)
{
    char mesh[64];
    format_deg(&srv->sched.mesh.deg, mesh, sizeof mesh);
    snprintf(buf, len, "serving on %s, %u %s devices, mesh %s, epoch %" PRIu64,
             srv->endpoint, srv->settings.device_count, srv->ops->name,
             mesh, srv->sched.mesh.epoch);
}

static void reload(wf_server_t *srv)
{
    wf_notify_reloading(&srv->notify);
    wf_settings_t next;
    char err[512];
    bool reconfiguring = false;
    if (wf_config_build(srv->cli, srv->envp, &next, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reload failed, settings unchanged: %s", err);
    } else {
        char mesh_before[WF_SETTINGS_MESH_MAX];
        wf_mesh_degrees_t deg_before = srv->settings.mesh_deg;
        memcpy(mesh_before, srv->settings.mesh, sizeof mesh_before);
        const char *restart[16];
        size_t n_restart = 0;
        size_t applied = wf_settings_apply_reload(&srv->settings, &next, restart,
                                                  16, &n_restart);
        for (size_t i = 0; i < n_restart && i < 16; i++)
            wf_log(srv->log, WF_LOG_WARNING, "reload: %s changed; it needs a "
                   "restart, ignored", restart[i]);
        wf_log_set_level(srv->log, (wf_log_level_t)srv->settings.log_level);
        srv->sched.capacity = srv->settings.queue_capacity;
        set_max_msg_size(srv);
        wf_log(srv->log, WF_LOG_INFO, "reloaded: %zu setting(s) applied, "
               "queue_capacity %u, log_level %s", applied,
               srv->settings.queue_capacity,
               wf_log_level_name((wf_log_level_t)srv->settings.log_level));
        if (memcmp(&deg_before, &srv->settings.mesh_deg, sizeof deg_before) != 0) {
            /* RELOADING=1 is out; READY=1 comes when the regroup is done. */
            char rerr[WF_PROTO_ERROR_MAX];
            wf_status_t st = start_reconfigure(srv, &srv->settings.mesh_deg, false,
                                               "SIGHUP", false, NULL, false, 0,
                                               rerr, sizeof rerr);
            if (st == WF_OK) {
                srv->reconf.notify = true;
                reconfiguring = true;
            } else {
                /* Keep the old text so that the next SIGHUP sees the change. */
                wf_log(srv->log, WF_LOG_WARNING, "reload: mesh '%s' not applied: "
                       "%s", srv->settings.mesh, rerr);
                memcpy(srv->settings.mesh, mesh_before, sizeof mesh_before);
                srv->settings.mesh_deg = deg_before;
            }
        }
        /* A tighter queue bound applies to new jobs only; queued ones stay. */
        dispatch(srv);
    }
    if (reconfiguring)
        return;
    char line[WF_SETTINGS_ENDPOINT_MAX + 256];
    status_line(srv, line, sizeof line);
    wf_notify_ready(&srv->notify, line);
}

static void begin_drain(wf_server_t *srv, int signo)
{
    if (srv->stopping)
        return;
    srv->stopping = true;
    srv->drain_deadline_us = wf_now_usec() +
                             (uint64_t)srv->settings.drain_timeout_ms * 1000;
    char line[96];
    snprintf(line, sizeof line, "draining %u queued and %u running jobs",
             srv->sched.depth, srv->sched.in_flight);
    wf_notify_stopping(&srv->notify, line);
    wf_log(srv->log, WF_LOG_INFO, "%s: %s", strsignal(signo), line);
}

static void handle_signals(wf_server_t *srv)
{
    struct signalfd_siginfo si;
    while (read(srv->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGHUP)
            reload(srv);
        else
            begin_drain(srv, (int)si.ssi_signo);
    }
}

static int poll_timeout_ms(const wf_server_t *srv, uint64_t now)
{
    int t = wf_notify_timeout_ms(&srv->notify, now);
    if (srv->stopping) {
        int d = now >= srv->drain_deadline_us
                    ? 0 : (int)((srv->drain_deadline_us - now + 999) / 1000);
        if (t < 0 || d < t)
            t = d;
    }
    return t;
}

/* Drain ended (all done, or the deadline passed): answer what never ran,
 * let the workers finish what they hold, answer that too. */
static void finish_drain(wf_server_t *srv)
{
    wf_djob_t *q = wf_sched_take_queued(&srv->sched);
    if (q)
        wf_log(srv->log, WF_LOG_WARNING, "drain timeout: refusing jobs that "
               "never ran");
    while (q) {
        wf_djob_t *next = q->next;
        send_error(srv, &q->identity, q->has_delim, q->req.id, q->req.op,
                   WF_E_SHUTTING_DOWN, "daemon stopped before the job ran");
        srv->sched.failed++;
        wf_djob_free(&q);
        q = next;
    }
    if (srv->cl.local)
        wf_comm_zmq_local_abort(srv->cl.local);  /* nothing of ours is left */
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
    srv->workers_stopped = true;
    handle_completions(srv);
    if (srv->reconf.active && srv->reconf.has_client) {
        send_error(srv, &srv->reconf.identity, srv->reconf.delim, srv->reconf.id,
                   WF_OP_RECONFIGURE, WF_E_SHUTTING_DOWN,
                   "daemon stopped before the reconfiguration ran");
        srv->reconf.has_client = false;
    }
    /* Replies are queued in ZeroMQ; give them up to the drain timeout to
     * leave before zmq_ctx_term drops them. */
    int linger = (int)srv->settings.drain_timeout_ms;
    zmq_setsockopt(srv->router, ZMQ_LINGER, &linger, sizeof linger);
}

wf_status_t wf_server_run(wf_server_t *srv)
{
    char line[WF_SETTINGS_ENDPOINT_MAX + 256];
    status_line(srv, line, sizeof line);
    wf_notify_ready(&srv->notify, line);
    char mesh[96];
    format_deg(&srv->sched.mesh.deg, mesh, sizeof mesh);
    wf_log(srv->log, WF_LOG_INFO, "ready on %s, %u %s devices, mesh %s, epoch %"
           PRIu64, srv->endpoint, srv->settings.device_count,
           srv->ops->name, mesh, srv->sched.mesh.epoch);

    wf_status_t result = WF_OK;
    for (;;) {
        if (srv->stopping && wf_sched_idle(&srv->sched) && !srv->reconf.active)
            break;
        uint64_t now = wf_now_usec();
        if (srv->stopping && now >= srv->drain_deadline_us)
            break;
        zmq_pollitem_t items[6] = {
            { srv->router, 0, ZMQ_POLLIN, 0 },
            { NULL, srv->sigfd, ZMQ_POLLIN, 0 },
            { NULL, srv->done.efd, ZMQ_POLLIN, 0 },
            { NULL, srv->models.efd, ZMQ_POLLIN, 0 },
            { srv->cluster ? wf_cluster_socket(srv->cluster) : NULL, 0,
              ZMQ_POLLIN, 0 },
            { srv->cl.xfer, 0, ZMQ_POLLIN, 0 },
        };
        int timeout = poll_timeout_ms(srv, now);
        if (srv->cluster) {
            int ct = wf_cluster_timeout_ms(srv->cluster, now);
            if (timeout < 0 || ct < timeout)
                timeout = ct;
        }
        if (srv->models.loading && (timeout < 0 || timeout > 1000))
            timeout = 1000;     /* progress notes to systemd */
        int rc = zmq_poll(items, !srv->cluster ? 4 : srv->cl.xfer ? 6 : 5, timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            wf_log(srv->log, WF_LOG_ERR, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            result = WF_E_INTERNAL;
            break;
        }
        wf_notify_watchdog(&srv->notify, wf_now_usec());
        loading_notify(srv, wf_now_usec());
        if (srv->cluster) {
            /* timers run on every wake-up, messages when there are some */
            wf_cluster_handle(srv->cluster, wf_now_usec());
            const char *fatal = wf_cluster_fatal(srv->cluster);
            if (fatal) {
                wf_log(srv->log, WF_LOG_ERR, "stopping: %s", fatal);
                result = WF_E_INTERNAL;
                break;
            }
            cluster_sync(srv);
            if (wf_cluster_take_mesh(srv->cluster, &srv->cl.mesh_deg,
                                     &srv->cl.mesh_epoch))
                srv->cl.mesh_pending = true;
            apply_pending_mesh(srv);
            xfer_recv(srv);     /* cheap when nothing waits */
        }
        if (rc <= 0)
            continue;
        if (items[1].revents)
            handle_signals(srv);
        if (items[2].revents) {
            handle_completions(srv);
            dispatch(srv);
        }
        if (items[3].revents)
            handle_loaded(srv);
        if (items[0].revents) {
            for (int i = 0; i < RECV_BATCH && recv_message(srv); i++)
                ;
        }
    }
    finish_drain(srv);
    wf_log(srv->log, WF_LOG_INFO, "stopped: %" PRIu64 " jobs served, %" PRIu64
           " failed, %" PRIu64 " requests refused", srv->sched.served,
           srv->sched.failed, srv->rejected);
    return result;
}
