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
#include "cluster/world.h"
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
    wf_comm_host_world_t *host_world; /* single node: our reference on the
                                    workers' comm world */
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
        uint64_t world_epoch;    /* cluster world it started under */
    } reconf;
    uint64_t epoch_override;     /* member: mesh epoch of the coordinator's change */
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
};

/* cluster mode (defined with the cluster section below) */
static wf_djob_t *world_regroup_new(void *arg, const wf_mesh_t *mesh);
static const wf_mesh_t *world_job_mesh(void *arg);
static void world_installed(void *arg);
static void world_dispatch(void *arg);
static void cluster_sync(wf_server_t *srv);

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
    job->rank_base = srv->world ? (int)wf_world_first_rank(srv->world) : 0;
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
    wf_status_t st = wf_comm_host_world_new((int)srv->n_workers, &srv->host_world);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "comm world: %s", wf_status_str(st));
        return st;
    }
    wf_djob_t *job = regroup_job_new(srv, &srv->sched.mesh, srv->host_world);
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
        wf_world_cfg_t wc = {
            .settings = &srv->settings, .zctx = srv->zctx, .log = log,
            .notify = &srv->notify, .sched = &srv->sched, .workers = srv->workers,
            .n_workers = srv->n_workers, .done = &srv->done,
            .hooks = { .arg = srv, .regroup_new = world_regroup_new,
                       .job_mesh = world_job_mesh, .installed = world_installed,
                       .dispatch = world_dispatch },
        };
        if (wf_world_new(&wc, &srv->world) != WF_OK)
            goto fail;
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
    wf_world_abort_local(srv->world);
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
    wf_comm_host_world_unref(&srv->host_world); /* workers dropped their handles */
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
    wf_world_destroy(&srv->world);
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
        if (srv->world)
            wf_world_explain(srv->world, job, &st);
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
    if (srv->world)
        wf_cluster_fill_status(wf_world_cluster(srv->world), si);
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        const wf_worker_t *w = &srv->workers[d];
        wf_device_info_t *di = &si->devices[d];
        di->index = d;
        copy_name(di->name, sizeof di->name, w->name);
        di->memory_total = w->memory_total;
        uint32_t g = d + (srv->world ? wf_world_first_rank(srv->world) : 0); /* world rank */
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
    if (st == WF_OK && srv->world && !job->cp &&
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
        wf_comm_host_world_unref(&srv->host_world);
        srv->host_world = fresh;
    }
    srv->reconf.regrouping = true;
    /* Cluster: every node's workers split the world the same way; the
     * members queue their regroup behind the job parts they hold. */
    if (srv->world && wf_world_coordinator(srv->world))
        wf_cluster_broadcast_mesh(wf_world_cluster(srv->world), &srv->reconf.target.deg,
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
    if (srv->world && wf_world_forming(srv->world)) {
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
    if (srv->epoch_override)
        target.epoch = srv->epoch_override;
    if (srv->world)
        new_world = false;  /* a cluster world is rebuilt by the control plane */
    srv->reconf.active = true;
    srv->reconf.world_epoch = srv->world ? wf_world_epoch(srv->world) : 0;
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
    if (st == WF_OK && srv->world && srv->reconf.world_epoch != wf_world_epoch(srv->world))
        st = WF_E_ABORTED;    /* a new world superseded it (with its own mesh) */
    if (st == WF_OK) {
        srv->sched.mesh = srv->reconf.target;
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
        !srv->world) {
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
    srv->sched.paused = srv->world && !wf_world_ready(srv->world);
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
    if (srv->world && !wf_world_coordinator(srv->world)) {
        st = WF_E_NOT_COORDINATOR;
        wf_cluster_why_not(wf_world_cluster(srv->world), err, sizeof err);
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
    if (srv->world && (!wf_world_coordinator(srv->world) ||
                       !wf_cluster_accepts_jobs(wf_world_cluster(srv->world)))) {
        st = !wf_world_coordinator(srv->world) ? WF_E_NOT_COORDINATOR
                                               : WF_E_UNAVAILABLE;
        wf_cluster_why_not(wf_world_cluster(srv->world), err, sizeof err);
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
    if (srv->world) {
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
/* cluster mode: the world (cluster/world.h) and what it asks of us */

static wf_djob_t *world_regroup_new(void *arg, const wf_mesh_t *mesh)
{
    return regroup_job_new(arg, mesh, NULL);
}

/* The mesh a member's job descriptor runs under: the one in force, or the
 * one of the regroup already queued on the workers (the descriptor may
 * overtake its completion; the workers run the regroup first). */
static const wf_mesh_t *world_job_mesh(void *arg)
{
    wf_server_t *srv = arg;
    return srv->reconf.active && srv->reconf.regrouping ? &srv->reconf.target
                                                        : &srv->sched.mesh;
}

static void world_installed(void *arg)
{
    wf_server_t *srv = arg;
    srv->sched.paused = srv->reconf.active || !wf_world_ready(srv->world);
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

static void world_dispatch(void *arg)
{
    dispatch(arg);
}

/* After the control plane ran: follow its world; the coordinator resumes
 * once every member serves it. */
static void cluster_sync(wf_server_t *srv)
{
    wf_world_sync(srv->world);
    if (srv->sched.paused && !srv->reconf.active && !srv->workers_stopped &&
        wf_world_coordinator(srv->world) && wf_world_ready(srv->world)) {
        srv->sched.paused = false;     /* every member serves the world now */
        dispatch(srv);
    }
}

/* Member: the coordinator's mesh change, once the previous regroup's
 * completion was taken (both may arrive in one wake-up; the workers run
 * the regroups in order anyway). */
static void apply_pending_mesh(wf_server_t *srv)
{
    wf_mesh_degrees_t deg;
    uint64_t epoch;
    if (srv->reconf.active || !wf_world_take_mesh(srv->world, &deg, &epoch))
        return;
    char err[WF_PROTO_ERROR_MAX];
    srv->epoch_override = epoch;
    if (start_reconfigure(srv, &deg, false, "coordinator", false, NULL,
                          false, 0, err, sizeof err) != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "cluster: mesh from the coordinator not "
               "applied: %s", err);
    srv->epoch_override = 0;
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
                wf_world_regroup_done(srv->world, job, st);
                wf_djob_free(&job);
            } else {
                wf_djob_free(&job);
                finish_reconfigure(srv, st);
            }
            job = next;
            continue;
        }
        if (job->remote_part) {
            wf_status_t st = wf_world_part_done(srv->world, job);
            if (st != WF_OK && st != WF_E_ABORTED && failed_st == WF_OK) {
                failed_seq = job->seq;
                failed_st = st;
            }
            wf_djob_free(&job);
            job = next;
            continue;
        }
        if (srv->world)
            wf_world_job_done(srv->world, job);
        wf_sched_complete(&srv->sched, job);
        reply_job(srv, job);
        wf_djob_free(&job);
        job = next;
    }
    /* A rank failed inside a collective and aborted the world: rebuild it
     * (same mesh, epoch + 1) once the running jobs are done. */
    if (srv->host_world && wf_comm_host_world_aborted(srv->host_world) &&
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
    if (srv->world && !srv->workers_stopped &&
        wf_world_check_abort(srv->world, failed_seq, failed_st))
        cluster_sync(srv);
    advance_reconfigure(srv);
    if (srv->world) {
        wf_world_try_install(srv->world);
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
    wf_world_abort_local(srv->world);   /* nothing of ours is left */
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
            { srv->world ? wf_cluster_socket(wf_world_cluster(srv->world)) : NULL,
              0, ZMQ_POLLIN, 0 },
            { srv->world ? wf_world_channel_socket(srv->world) : NULL, 0,
              ZMQ_POLLIN, 0 },
        };
        int timeout = poll_timeout_ms(srv, now);
        if (srv->world) {
            int ct = wf_cluster_timeout_ms(wf_world_cluster(srv->world), now);
            if (timeout < 0 || ct < timeout)
                timeout = ct;
        }
        if (srv->models.loading && (timeout < 0 || timeout > 1000))
            timeout = 1000;     /* progress notes to systemd */
        int rc = zmq_poll(items, !srv->world ? 4 : items[5].socket ? 6 : 5, timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            wf_log(srv->log, WF_LOG_ERR, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            result = WF_E_INTERNAL;
            break;
        }
        wf_notify_watchdog(&srv->notify, wf_now_usec());
        loading_notify(srv, wf_now_usec());
        if (srv->world) {
            /* timers run on every wake-up, messages when there are some */
            wf_cluster_t *cluster = wf_world_cluster(srv->world);
            wf_cluster_handle(cluster, wf_now_usec());
            const char *fatal = wf_cluster_fatal(cluster);
            if (fatal) {
                wf_log(srv->log, WF_LOG_ERR, "stopping: %s", fatal);
                result = WF_E_INTERNAL;
                break;
            }
            cluster_sync(srv);
            wf_world_note_mesh(srv->world);
            apply_pending_mesh(srv);
            wf_world_recv(srv->world);  /* cheap when nothing waits */
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
