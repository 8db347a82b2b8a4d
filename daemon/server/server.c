/* server.c — weftd's main thread (see server.h). Its sections, in order:
 *   start-up and teardown: signals, worker budgets, the start-up regroup,
 *       the client endpoint (the gate on `listen` or systemd's socket, the
 *       ROUTER it feeds), wf_server_new / _destroy;
 *   cluster mode: the hooks the cluster world (cluster/world.h) calls, and
 *       following the control plane;
 *   completions: finished jobs and regroups from the workers;
 *   reload (SIGHUP), drain (SIGTERM / SIGINT), the poll loop.
 * The rest of daemon/server/ sits below this file (server_impl.h says
 * which calls which); compute happens on the workers, never here.
 */
#include "server_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "comm/comm_nccl.h"

/* messages read per wake-up, so signals and completions are not starved */
#define RECV_BATCH 64

/* ZMQ_SNDHWM of the client ROUTER: replies ZeroMQ queues per peer. A peer
 * that does not read holds at most this many (plus one in its DEALER in
 * the gate and the one the gate is writing); the rest wait in the daemon
 * (replies.c), counted in the client's share (client_reply_bytes). */
#define REPLY_SNDHWM 4
/* Longest wait between tries of the replies that wait. */
#define RETRY_MAX_MS 50

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

/* Arena of a worker on GPU `gpu`, a k-th of the GPU's arena when k
 * workers share it (the mixed mode): the gpu_memory setting's bytes, or
 * its fraction of the GPU's total memory; by default 0 (the backend takes
 * 90% of the free memory less 1 GiB) when the GPU has one worker, else a
 * k-th of that, as ctx_new would size one. Asked before any worker
 * starts, so every share is equal. An arena larger than what is free
 * makes ctx_new fail (WF_E_NO_MEMORY): the daemon says so at start. */
static uint64_t gpu_budget(const wf_settings_t *s, int gpu)
{
    uint32_t k = 0;
    for (uint32_t d = 0; d < s->device_count; d++)
        k += s->gpu[d] == gpu;
    k = k ? k : 1;
    uint64_t free_b = 0, total_b = 0;
    if (s->gpu_memory.bytes)
        return s->gpu_memory.bytes / k;
    if (s->gpu_memory.fraction > 0)
        return wf_cuda_device_memory(gpu, &free_b, &total_b) == WF_OK
                   ? (uint64_t)((double)total_b * s->gpu_memory.fraction) / k
                   : 0;
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

/* The share limits of the settings (at start and on reload). */
static void set_share_limits(wf_server_t *srv)
{
    srv->sched.limits.jobs = srv->settings.client_queue_jobs;
    srv->sched.limits.in_bytes = srv->settings.client_queue_bytes;
    srv->sched.limits.reply_bytes = srv->settings.client_reply_bytes;
}

/* The gate's limits (gate.h) from the settings (at start and on
 * reload): a frame as large as the largest header or tensor, a message
 * as large as a header and one client's share of queued input bytes. */
static void gate_limits(const wf_settings_t *s, wf_gate_limits_t *l)
{
    l->frame_bytes = s->limits.max_header_bytes > s->limits.max_tensor_bytes
                         ? s->limits.max_header_bytes : s->limits.max_tensor_bytes;
    l->max_frames = s->client_max_frames;
    l->message_bytes = s->limits.max_header_bytes + s->client_queue_bytes;
    l->max_connections = s->client_max_connections;
    l->max_handshakes = s->client_max_handshakes;
    l->handshake_ms = s->client_handshake_ms;
}

/* The gate's limits follow the settings (reload). */
static void set_gate_limits(wf_server_t *srv)
{
    if (!srv->gate)
        return;
    wf_gate_limits_t l;
    gate_limits(&srv->settings, &l);
    wf_gate_set_limits(srv->gate, &l);
}

/* Whether this daemon's comm worlds are NCCL's: NCCL built, every rank on
 * a GPU of its own (one GPU cannot hold two ranks of one communicator:
 * the mixed mode uses the host comm behind comm_staged.h), one node (a
 * world across daemons is ZeroMQ's), and the `nccl` setting on (off for
 * comparisons: WEFT_NCCL=0). */
static bool use_nccl(const wf_settings_t *s, bool cluster)
{
    return wf_comm_nccl_built() && s->nccl && !cluster &&
           s->device_kind == WF_DEVICE_CUDA && !wf_settings_gpu_shared(s);
}

/* The test hook WEFT_TEST_FAIL_JOB (settings.test, config.h): this
 * daemon's ranks of the listed jobs fail with WF_E_INTERNAL as a failing
 * step does, aborting the comm world (wf_worker_set_fault). Only for
 * tests of the recovery (e.g. tests/cluster/test_cluster_fault.c): nothing else
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

/* The test hook WEFT_TEST_HOLD_JOBS (settings.test, config.h): every
 * worker reads one byte from the test's FIFO before each job part
 * (wf_worker_set_hold), so a test makes "a job is running" or "the queue
 * is full" happen as events instead of hoping a job is slow enough. The
 * FIFO is opened for reading and writing: the open never waits for the
 * test, a read never sees end-of-file, and test_hold_release can open the
 * gate from here. */
static wf_status_t set_test_hold(wf_server_t *srv)
{
    const char *path = srv->settings.test.hold_fifo;
    if (!path[0])
        return WF_OK;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        wf_log(srv->log, WF_LOG_ERR, "WEFT_TEST_HOLD_JOBS: cannot open %s: %s",
               path, strerror(errno));
        return WF_E_BAD_ARGUMENT;
    }
    srv->test_hold_fd = fd;
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_set_hold(&srv->workers[d], fd, &srv->test_hold_open);
    wf_log(srv->log, WF_LOG_WARNING, "WEFT_TEST_HOLD_JOBS: every job part "
           "waits for a byte from the test (test only)");
    return WF_OK;
}

/* Open the test's gate before the workers stop, so none waits for a byte
 * that will never come: one 'a' for each worker that may be reading. */
static void test_hold_release(wf_server_t *srv)
{
    if (srv->test_hold_fd < 0)
        return;
    atomic_store(&srv->test_hold_open, true);
    char a[WF_SETTINGS_MAX_DEVICES];
    memset(a, 'a', sizeof a);
    ssize_t n = write(srv->test_hold_fd, a, srv->n_workers);
    (void)n;     /* a full pipe already holds bytes for every reader */
}

/* The threads that answer clients (the main thread, ZeroMQ's I/O thread)
 * run at nice -10 where that is allowed (root before `user` takes over,
 * CAP_SYS_NICE, or systemd's LimitNICE=-10), so that status and replies
 * do not wait behind busy threads at the same priority: under full CPU
 * load the kernel's fair share makes a thread that used its share wait
 * for about (runnable threads) x (what it used); 64 busy clients on 2
 * cores held status for 300-650 ms, at nice -10 25-80 ms
 * (bench/bench_status.c, BENCHMARKS.md). They do little per wake-up, so
 * the workers lose next to nothing. Per thread, with reset-on-fork:
 * threads they start later (the model loader, the metrics endpoint)
 * begin at nice 0, and the workers keep theirs. A shorter EEVDF slice
 * alone (sched_setattr's sched_runtime) did not help: the threads had
 * used their share. */
#define ANSWER_NICE (-10)

/* True when tid runs at ANSWER_NICE (or below) now. */
static bool favour_thread(pid_t tid)
{
    errno = 0;
    int nice_now = getpriority(PRIO_PROCESS, (id_t)tid);
    if (errno != 0)
        return false;
    struct sched_param p = { .sched_priority = 0 };
    /* SCHED_RESET_ON_FORK on a thread of our own is never refused */
    (void)sched_setscheduler(tid, SCHED_OTHER | SCHED_RESET_ON_FORK, &p);
    return nice_now <= ANSWER_NICE ||
           setpriority(PRIO_PROCESS, (id_t)tid, ANSWER_NICE) == 0;
}

/* The main thread, the gate's (the client connections) and every ZeroMQ
 * I/O thread ("ZMQbg/IO/N", started by
 * the first socket of the context; it names itself once it runs, so
 * look for up to 200 ms). */
static void favour_answering_threads(wf_server_t *srv)
{
    unsigned threads = 2, niced = favour_thread(gettid());
    /* the gate reads and writes every client connection */
    niced += srv->gate && wf_gate_tid(srv->gate) > 0 &&
             favour_thread((pid_t)wf_gate_tid(srv->gate));
    for (int tries = 0; threads == 2 && tries < 10; tries++) {
        if (tries)
            usleep(20000);
        DIR *d = opendir("/proc/self/task");
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char path[64], comm[32] = "";
            snprintf(path, sizeof path, "/proc/self/task/%.20s/comm", e->d_name);
            FILE *f = fopen(path, "re");
            if (!f)
                continue;
            if (fgets(comm, sizeof comm, f) && strncmp(comm, "ZMQbg/IO/", 9) == 0) {
                threads++;
                niced += favour_thread((pid_t)atoi(e->d_name));
            }
            fclose(f);
        }
        if (d)
            closedir(d);
    }
    if (niced == threads)
        wf_log(srv->log, WF_LOG_INFO, "scheduling: the %u answering threads (main, "
               "client plane, ZeroMQ I/O) run at nice %d", threads, ANSWER_NICE);
    else
        wf_log(srv->log, WF_LOG_INFO, "scheduling: %u of %u answering threads (main, "
               "client plane, ZeroMQ I/O) at nice %d; the others stay (no CAP_SYS_NICE, no "
               "LimitNICE=%d): status may wait behind busy threads under full load",
               niced, threads, ANSWER_NICE, ANSWER_NICE);
}

/* Build the world and the groups of the initial mesh before serving:
 * waits (on the completion eventfd) for the regroup job. */
static wf_status_t regroup_at_start(wf_server_t *srv)
{
    char blas[320];
    if (!wf_cpu_blas_check(blas, sizeof blas))
        wf_log(srv->log, WF_LOG_WARNING, "%s", blas);
    else
        wf_log(srv->log, WF_LOG_INFO, "%s", blas);
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
    wf_djob_t *job = srv_regroup_new(srv, &srv->sched.mesh, srv->host_world);
    if (!job) {
        wf_log(srv->log, WF_LOG_ERR, "out of memory");
        return WF_E_INTERNAL;
    }
    srv_regroup_submit(srv, job);
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

/* The client endpoint: the socket systemd passed (socket activation,
 * units/weftd.socket) when there is one, else settings.listen, served
 * by the gate (gate.h), which hands whole messages to the ROUTER on an
 * inproc address. Takes LISTEN_FDS out of the environment either way. */
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
    int fd = -1;
    bool is_unix = false;
    char why[160];
    if (n == 0) {
        snprintf(srv->endpoint, sizeof srv->endpoint, "%s", srv->settings.listen);
        if (srv_access_prepare(srv) != WF_OK)
            return WF_E_BAD_ARGUMENT;
        if (wf_gate_listen(srv->endpoint, &fd, &is_unix, srv->access.bound_ep,
                           sizeof srv->access.bound_ep, why, sizeof why) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "cannot bind %s: %s", srv->endpoint, why);
            return WF_E_INTERNAL;
        }
        srv->bound = true;
        if (srv_access_check_bound(srv) != WF_OK) {
            close(fd);
            return WF_E_BAD_ARGUMENT;
        }
    } else {
        fd = SD_LISTEN_FDS_START;
        is_unix = sd_is_socket(fd, AF_UNIX, SOCK_STREAM, 1) > 0;
        if (!is_unix && sd_is_socket_inet(fd, 0, SOCK_STREAM, 1, 0) <= 0) {
            wf_log(srv->log, WF_LOG_ERR, "socket activation: fd %d is not a "
                   "listening AF_UNIX or TCP stream socket", fd);
            return WF_E_INTERNAL;
        }
        if (socket_endpoint(fd, srv->endpoint, sizeof srv->endpoint, why,
                            sizeof why) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "socket activation: fd %d: %s", fd, why);
            return WF_E_INTERNAL;
        }
        snprintf(srv->access.bound_ep, sizeof srv->access.bound_ep, "%s",
                 srv->endpoint);
        /* the same rules as for `listen` (protected mode, CURVE) */
        if (srv_access_prepare(srv) != WF_OK)
            return WF_E_BAD_ARGUMENT;
        int fl = fcntl(fd, F_GETFD);
        if (fl >= 0)
            fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
        srv->bound = true;
        srv->activated = true;
        wf_log(srv->log, WF_LOG_INFO, "socket activation: serving on %s from "
               "systemd (fd %d); listen = %s is not used", srv->endpoint, fd,
               srv->settings.listen);
    }
    /* the ROUTER on an address of this process only */
    snprintf(srv->router_ep, sizeof srv->router_ep, "inproc://weftd-clients-%p",
             (void *)srv);
    if (zmq_bind(srv->router, srv->router_ep) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "cannot bind %s: %s", srv->router_ep,
               zmq_strerror(zmq_errno()));
        close(fd);
        return WF_E_INTERNAL;
    }
    wf_gate_cfg_t gc = {
        .zctx = srv->zctx, .router_endpoint = srv->router_ep, .listen_fd = fd,
        .endpoint = srv->endpoint, .unix_socket = is_unix,
        .mech = srv->access.mode == SRV_ACCESS_CURVE ? WF_GATE_CURVE : WF_GATE_NULL,
        .keys = srv->has_keys ? &srv->keys : NULL, .log = srv->log,
        .client_keys = srv->access.keys, .n_client_keys = srv->access.n_keys,
    };
    gate_limits(&srv->settings, &gc.limits);
    if (wf_gate_start(&gc, &srv->gate) != WF_OK)
        return WF_E_INTERNAL;
    wf_log(srv->log, WF_LOG_INFO, "client plane: at most %u connections (%u in "
           "their handshake, %u ms each); a message of at most %u frames, %"
           PRIu64 " bytes, frames of %" PRIu64 " bytes", gc.limits.max_connections,
           gc.limits.max_handshakes, gc.limits.handshake_ms, gc.limits.max_frames,
           gc.limits.message_bytes, gc.limits.frame_bytes);
    return WF_OK;
}

wf_status_t wf_server_new(const wf_settings_t *settings, const wf_cli_t *cli,
                          char *const *envp, wf_log_t *log,
                          const wf_backend_ops_t *backend,
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
    wf_log_limit_init(&srv->dropped_lines, "replies dropped", 20, 60);
    srv->sigfd = -1;
    srv->done.efd = -1;
    srv->test_hold_fd = -1;
    atomic_init(&srv->test_hold_open, false);
    srv->models.efd = -1;
    srv->models.root_fd = -1;
    zmq_msg_init(&srv->reconf.identity);
    srv->ops = backend                                 ? backend
               : settings->device_kind == WF_DEVICE_CUDA ? wf_backend_cuda()
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
    srv->models.ops = srv->ops;

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
        const wf_backend_tuning_t tuning = {
            strcmp(settings->cuda_attention, "auto") == 0 ? NULL : settings->cuda_attention,
            !settings->cuda_gelu_epilogue, (wf_graph_mode_t)settings->cuda_graphs,
            settings->cuda_graphs_max };
        wf_status_t st = wf_worker_start(&srv->workers[d], d, dev, srv->ops, budget[d],
                                         &tuning, log);
        srv->n_workers = d + 1;      /* a failed one is still joined */
        if (st != WF_OK)
            goto fail;
        srv->workers[d].nccl_init_timeout_ms = settings->nccl_init_timeout_ms;
    }
    set_test_fault(srv);
    if (set_test_hold(srv) != WF_OK)
        goto fail;
    srv->nccl = use_nccl(settings, cluster);
    wf_sched_init(&srv->sched, srv->workers, settings->device_count,
                  settings->queue_capacity, &mesh, log);
    srv->sched.sessions.max = settings->session_max;
    set_share_limits(srv);
    if (!cluster && regroup_at_start(srv) != WF_OK)
        goto fail;
    srv->sched.paused = cluster;

    srv->zctx = zmq_ctx_new();
    if (!srv->zctx) {
        wf_log(log, WF_LOG_ERR, "zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    /* ZAP before any socket of this context binds (client and cluster):
     * without a handler libzmq admits every CURVE client. */
    if (srv_access_start(srv) != WF_OK)
        goto fail;
    srv->router = zmq_socket(srv->zctx, ZMQ_ROUTER);
    if (!srv->router) {
        wf_log(log, WF_LOG_ERR, "zmq_socket: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    int one = 1, zero = 0;
    /* MANDATORY: a reply to a vanished client fails (EHOSTUNREACH) instead
     * of vanishing silently, so we can log it. LINGER 0: close never
     * blocks on dead peers (at the end of a drain the gate has written
     * every reply its connections' peers would read: close_connections). */
    zmq_setsockopt(srv->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    zmq_setsockopt(srv->router, ZMQ_LINGER, &zero, sizeof zero);
    /* A full peer makes a send fail with EAGAIN (MANDATORY): the reply
     * waits in the daemon (replies.c) instead of growing ZeroMQ's queue. */
    int hwm = REPLY_SNDHWM;
    zmq_setsockopt(srv->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    /* one message per connection waits here; the gate holds the next */
    int one_msg = 1;
    zmq_setsockopt(srv->router, ZMQ_RCVHWM, &one_msg, sizeof one_msg);
    mode_t umask_before = srv_socket_umask(srv);     /* privileges.c */
    wf_status_t bound = bind_router(srv);
    if (srv_socket_perms(srv, umask_before) != WF_OK || bound != WF_OK)
        goto fail;
    if (cluster) {
        wf_world_cfg_t wc = {
            .settings = &srv->settings, .zctx = srv->zctx, .log = log,
            .notify = &srv->notify, .sched = &srv->sched, .workers = srv->workers,
            .n_workers = srv->n_workers, .done = &srv->done,
            .hooks = { .arg = srv, .regroup_new = world_regroup_new,
                       .job_mesh = world_job_mesh, .installed = world_installed,
                       .dispatch = world_dispatch,
                       .model_msg = srv_models_on_message,
                       .forward_plan = srv_models_forward_plan },
            .zap = srv->zap,   /* the context's ZAP handler: WF_ZAP_NODES */
            .keys = srv->has_keys ? &srv->keys : NULL,
            .fp8 = srv_devices_fp8(srv, NULL),
        };
        if (wf_world_new(&wc, &srv->world) != WF_OK)
            goto fail;
        cluster_sync(srv);      /* a world of one node forms at once */
    }
    favour_answering_threads(srv);
    /* The counters, and the metrics endpoint when metrics_listen is set
     * (bound here, before the privileges go). */
    if (srv_metrics_start(srv) != WF_OK)
        goto fail;
    /* Every socket is bound, the model root and the devices are open. */
    if (srv_drop_privileges(srv) != WF_OK)
        goto fail;
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
    /* The metrics endpoint's thread reads only srv->metrics: stop it
     * before anything goes. */
    srv_metrics_stop(srv);
    /* Workers first: they run what is queued, and their jobs' replies
     * are no longer wanted here (wf_server_run already drained). A cluster
     * world is aborted first: peers of other nodes may never come. */
    wf_world_abort_local(srv->world);
    test_hold_release(srv);
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
    if (srv->test_hold_fd >= 0)
        close(srv->test_hold_fd);
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
    srv_replies_drop_all(srv);
    wf_sched_shares_free(&srv->sched);
    wf_sessions_free(&srv->sched);
    wf_world_destroy(&srv->world);
    wf_registry_destroy(&srv->models);
    srv_access_stop(srv);
    /* its DEALERs before the ROUTER */
    wf_gate_stop(&srv->gate);
    if (srv->router)
        zmq_close(srv->router);
    /* after every socket of the context is closed, before the term */
    wf_zap_stop(srv->zap);
    srv->zap = NULL;
    explicit_bzero(&srv->keys, sizeof srv->keys);
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
    wf_log_limit_destroy(&srv->dropped_lines);
    free(srv);
    *psrv = NULL;
}

/* ------------------------------------------------------------------ */
/* cluster mode: the world (cluster/world.h) and what it asks of us */

static wf_djob_t *world_regroup_new(void *arg, const wf_mesh_t *mesh)
{
    wf_djob_t *job = srv_regroup_new(arg, mesh, NULL);
    if (job)    /* a new world's mesh: the models that fit it */
        srv_models_world_fit(arg, mesh, &job->models);
    return job;
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

/* The world was installed into the scheduler: resume unless a
 * reconfiguration runs or the world does not serve yet; queued jobs were
 * planned for the old mesh. */
static void world_installed(void *arg)
{
    wf_server_t *srv = arg;
    srv->sched.paused = srv->reconf.active || !wf_world_ready(srv->world);
    srv_replan(srv);
}

static void world_dispatch(void *arg)
{
    srv_dispatch(arg);
}

/* After the control plane ran: follow its world; the coordinator resumes
 * once every member serves it. */
static void cluster_sync(wf_server_t *srv)
{
    wf_world_sync(srv->world);
    if (srv->sched.paused && !srv->reconf.active && !srv->workers_stopped &&
        wf_world_coordinator(srv->world) && wf_world_ready(srv->world)) {
        srv->sched.paused = false;     /* every member serves the world now */
        srv_dispatch(srv);
    }
}

/* ------------------------------------------------------------------ */
/* completions */

/* What the workers finished: regroups end a reconfiguration (or join a
 * cluster world), a member's parts go back to the coordinator, our jobs
 * are answered. Then the follow-ups: rebuild an aborted world, report an
 * abort, the next regroup, a world to install, a mesh change waiting. */
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
                srv_reconf_finish(srv, st);
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
        srv_reply_job(srv, job);
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
            const wf_reconf_req_t req = { .deg = srv->sched.mesh.deg,
                                          .new_world = true, .why = "abort recovery",
                                          .done = srv_models_follow };
            srv_reconf_start(srv, &req, err, sizeof err);
        }
    }
    if (srv->world && !srv->workers_stopped &&
        wf_world_check_abort(srv->world, failed_seq, failed_st))
        cluster_sync(srv);
    srv_reconf_advance(srv);
    if (srv->world) {
        wf_world_try_install(srv->world);
        srv_reconf_apply_pending(srv, &srv_models_follow);
    }
}

/* ------------------------------------------------------------------ */
/* reload, drain, the loop */

static void reload(wf_server_t *srv)
{
    wf_notify_reloading(&srv->notify);
    wf_settings_t next;
    char err[512];
    bool reconfiguring = false;
    char failed[160] = "";      /* what of the reload did not take effect */
    if (wf_config_build(srv->cli, srv->envp, &next, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reload failed, settings unchanged: %s", err);
        snprintf(failed, sizeof failed, "settings not read; nothing changed");
    } else {
        char mesh_before[WF_SETTINGS_MESH_MAX];
        wf_mesh_degrees_t deg_before = srv->settings.mesh_deg;
        memcpy(mesh_before, srv->settings.mesh, sizeof mesh_before);
        char keys_before[WF_SETTINGS_PATH_MAX];
        memcpy(keys_before, srv->settings.client_keys, sizeof keys_before);
        const char *restart[16];
        size_t n_restart = 0;
        size_t applied = wf_settings_apply_reload(&srv->settings, &next, restart,
                                                  16, &n_restart);
        for (size_t i = 0; i < n_restart && i < 16; i++)
            wf_log(srv->log, WF_LOG_WARNING, "reload: %s changed; it needs a "
                   "restart, ignored", restart[i]);
        wf_log_set_level(srv->log, (wf_log_level_t)srv->settings.log_level);
        bool keys_ok = srv_access_reload(srv, keys_before, failed, sizeof failed);
        srv->sched.capacity = srv->settings.queue_capacity;
        set_share_limits(srv);
        set_gate_limits(srv);
        if (keys_ok)
            wf_log(srv->log, WF_LOG_INFO, "reloaded: %zu setting(s) applied, "
                   "queue_capacity %u, log_level %s", applied,
                   srv->settings.queue_capacity,
                   wf_log_level_name((wf_log_level_t)srv->settings.log_level));
        else
            wf_log(srv->log, WF_LOG_ERR, "reload failed in part: %s; %zu other "
                   "setting(s) applied, queue_capacity %u, log_level %s", failed,
                   applied, srv->settings.queue_capacity,
                   wf_log_level_name((wf_log_level_t)srv->settings.log_level));
        if (memcmp(&deg_before, &srv->settings.mesh_deg, sizeof deg_before) != 0) {
            /* RELOADING=1 is out; READY=1 comes when the regroup is done. */
            char rerr[WF_PROTO_ERROR_MAX];
            const wf_reconf_req_t req = { .deg = srv->settings.mesh_deg, .why = "SIGHUP",
                                          .notify = true, .reloading_sent = true,
                                          .done = srv_models_follow };
            wf_status_t st = srv_reconf_start(srv, &req, rerr, sizeof rerr);
            if (st == WF_OK) {
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
        srv_dispatch(srv);
    }
    srv_metrics_reloaded(srv, failed[0] == '\0');
    if (reconfiguring)
        return;
    char line[WF_SETTINGS_ENDPOINT_MAX + 256], status[sizeof line + sizeof failed + 32];
    srv_status_line(srv, line, sizeof line);
    if (failed[0])      /* the operator reads it in `systemctl status` */
        snprintf(status, sizeof status, "%s; last reload failed: %s", line, failed);
    else
        snprintf(status, sizeof status, "%s", line);
    wf_notify_ready(&srv->notify, status);
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
    /* the next denoising session to become idle */
    uint64_t idle = wf_sessions_next_idle(&srv->sched,
                                          (uint64_t)srv->settings.session_idle_ms * 1000);
    if (idle) {
        int s = idle <= now ? 0 : (int)((idle - now + 999) / 1000);
        if (t < 0 || s < t)
            t = s;
    }
    /* queued jobs' deadlines, a reconfiguration's timeout */
    int e = srv_expire_timeout_ms(srv, now), r = srv_reconf_timeout_ms(srv, now);
    if (e >= 0 && (t < 0 || e < t))
        t = e;
    if (r >= 0 && (t < 0 || r < t))
        t = r;
    if (srv->stopping) {
        int d = now >= srv->drain_deadline_us
                    ? 0 : (int)((srv->drain_deadline_us - now + 999) / 1000);
        if (t < 0 || d < t)
            t = d;
    }
    return t;
}

/* The end of a drain (PROTOCOL.md section 1): requests that wait on the
 * socket, or arrive now, are answered as the drain does (jobs, loads and
 * reconfigurations get WF_E_SHUTTING_DOWN; hello, status and list_models
 * their reply) until the socket has been quiet for DRAIN_TAIL_QUIET_MS,
 * and never for more than DRAIN_TAIL_MAX_MS or DRAIN_TAIL_MAX_MSGS
 * messages (a client told WF_E_SHUTTING_DOWN that stops sending then has
 * its requests still in flight answered). Returns how many it answered. */
#define DRAIN_TAIL_QUIET_MS 100
#define DRAIN_TAIL_MAX_MS 1000
#define DRAIN_TAIL_MAX_MSGS 4096

static unsigned answer_drain_tail(wf_server_t *srv)
{
    unsigned n = 0;
    const uint64_t end = wf_now_usec() + (uint64_t)DRAIN_TAIL_MAX_MS * 1000;
    uint64_t last = wf_now_usec();      /* the last request read */
    while (n < DRAIN_TAIL_MAX_MSGS) {
        /* replies ZeroMQ did not take (a peer at SNDHWM) go out as its
         * reader makes room: the tail's own replies may wait there too */
        if (srv->waiting)
            srv_replies_retry(srv);
        if (srv_request_recv(srv)) {
            n++;
            last = wf_now_usec();
            continue;
        }
        uint64_t now = wf_now_usec();
        if (now >= end ||
            (!srv->waiting && now - last >= (uint64_t)DRAIN_TAIL_QUIET_MS * 1000))
            break;
        uint64_t left_ms = (end - now + 999) / 1000;
        long wait = srv->waiting ? 1 : DRAIN_TAIL_QUIET_MS;
        zmq_pollitem_t it = { srv->router, 0, ZMQ_POLLIN, 0 };
        int rc = zmq_poll(&it, 1, left_ms < (uint64_t)wait ? (long)left_ms : wait);
        if (rc < 0 && zmq_errno() != EINTR)
            break;      /* the socket failed */
        if (rc == 0 && !srv->waiting)
            break;      /* quiet for the whole period */
    }
    return n;
}

/* Then the close (PROTOCOL.md section 1): the gate reads nothing more
 * and closes each connection once every request read from it has its
 * reply (wf_gate_finish). Until no connection is left, answer the
 * requests it still hands over (the whole messages it had read: jobs,
 * loads and reconfigurations get WF_E_SHUTTING_DOWN, hello, status and
 * list_models their reply, as during the drain), retry the replies
 * ZeroMQ did not take (a peer at SNDHWM: no event says when it made
 * room, hence 1 ms) and end a load that finishes meanwhile. A peer that
 * reads none of its replies keeps its connection open: that is bounded
 * by drain_timeout_ms, at least CLOSE_MIN_MS. */
#define CLOSE_MIN_MS 1000u

static void close_connections(wf_server_t *srv)
{
    uint32_t bound_ms = srv->settings.drain_timeout_ms > CLOSE_MIN_MS
                            ? srv->settings.drain_timeout_ms : CLOSE_MIN_MS;
    const uint64_t end = wf_now_usec() + (uint64_t)bound_ms * 1000;
    uint64_t refused = srv->rejected;
    unsigned n = 0;
    bool closed = false;
    wf_gate_finish(srv->gate);
    for (;;) {
        if (srv->waiting)
            srv_replies_retry(srv);
        if (srv_request_recv(srv)) {
            n++;
            continue;
        }
        uint64_t now = wf_now_usec();
        if (now >= end)
            break;
        zmq_pollitem_t it[3] = {
            { srv->router, 0, ZMQ_POLLIN, 0 },
            { NULL, wf_gate_done_fd(srv->gate), ZMQ_POLLIN, 0 },
            { NULL, srv->models.efd, ZMQ_POLLIN, 0 },
        };
        long left_ms = (long)((end - now + 999) / 1000);
        int rc = zmq_poll(it, 3, srv->waiting && left_ms > 1 ? 1 : left_ms);
        if (rc < 0 && zmq_errno() != EINTR)
            break;      /* the socket failed */
        if (rc > 0 && it[1].revents) {
            closed = true;
            break;
        }
        if (rc > 0 && it[2].revents)
            srv_models_loaded(srv);
    }
    if (n > 0)
        wf_log(srv->log, WF_LOG_INFO, "answered %u more request(s) read before the "
               "client connections closed (%" PRIu64 " refused)", n,
               srv->rejected - refused);
    if (!closed) {
        wf_gate_stats_t gs;
        wf_gate_stats(srv->gate, &gs);
        wf_log(srv->log, WF_LOG_WARNING, "%u client connection(s) still open %u ms "
               "after the drain (replies not read by their peers): closed",
               gs.open, bound_ms);
    }
}

/* Drain ended (all done, or the deadline passed): answer what never ran,
 * let the workers finish what they hold, answer that too, then what still
 * waits on the socket (answer_drain_tail), then every request read before
 * the connections close (close_connections). */
static void finish_drain(wf_server_t *srv)
{
    wf_djob_t *q = wf_sched_take_queued(&srv->sched);
    if (q)
        wf_log(srv->log, WF_LOG_WARNING, "drain timeout: refusing jobs that "
               "never ran");
    while (q) {
        wf_djob_t *next = q->next;
        wf_sched_release_job(&srv->sched, q);
        srv->reply_version = q->req.version;
        srv_reply_fail(srv, &q->identity, q->has_delim, q->req.id, q->req.op,
                       WF_E_SHUTTING_DOWN, "daemon stopped before the job ran");
        srv->sched.failed++;
        wf_djob_free(&q);
        q = next;
    }
    wf_world_abort_local(srv->world);   /* nothing of ours is left */
    test_hold_release(srv);
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
    srv->workers_stopped = true;
    handle_completions(srv);
    if (srv->reconf.active && srv->reconf.has_client) {
        srv->reply_version = srv->reconf.version;
        srv_reply_fail(srv, &srv->reconf.identity, srv->reconf.delim, srv->reconf.id,
                       WF_OP_RECONFIGURE, WF_E_SHUTTING_DOWN,
                       "daemon stopped before the reconfiguration ran");
        srv->reconf.has_client = false;
    }
    if (srv->stopping) {
        uint64_t refused = srv->rejected;
        wf_log(srv->log, WF_LOG_INFO, "drained; answering what still arrives for up "
               "to %d ms", DRAIN_TAIL_MAX_MS);
        unsigned tail = answer_drain_tail(srv);
        if (tail > 0)
            wf_log(srv->log, WF_LOG_INFO, "answered %u request(s) that arrived at "
                   "the end of the drain (%" PRIu64 " refused)", tail,
                   srv->rejected - refused);
    }
    /* also after a fatal error: the requests still read are refused as
     * in a drain */
    srv->stopping = true;
    wf_log(srv->log, WF_LOG_INFO, "closing each client connection once the "
           "requests read from it are answered");
    close_connections(srv);
}

wf_status_t wf_server_run(wf_server_t *srv)
{
    char line[WF_SETTINGS_ENDPOINT_MAX + 256];
    srv_status_line(srv, line, sizeof line);
    wf_notify_ready(&srv->notify, line);
    char mesh[96];
    wf_mesh_degrees_format(&srv->sched.mesh.deg, mesh, sizeof mesh);
    wf_log(srv->log, WF_LOG_INFO, "ready on %s, %u %s devices, mesh %s, epoch %"
           PRIu64, srv->endpoint, srv->settings.device_count,
           srv->ops->name, mesh, srv->sched.mesh.epoch);

    wf_status_t result = WF_OK;
    for (;;) {
        srv_metrics_refresh(srv);   /* the gauges the endpoint serves, as the
                                       last turn left them */
        /* replies ZeroMQ did not take (a peer at SNDHWM): try again; no
         * event says when a peer made room (POLLOUT of a ROUTER is about
         * any peer), so back off 1 ms .. RETRY_MAX_MS while none goes */
        if (srv->waiting) {
            if (srv_replies_retry(srv))
                srv->retry_ms = 1;
            else if (srv->retry_ms < RETRY_MAX_MS)
                srv->retry_ms = srv->retry_ms * 2 < RETRY_MAX_MS ? srv->retry_ms * 2
                                                                  : RETRY_MAX_MS;
        }
        if (srv->stopping && wf_sched_idle(&srv->sched) && !srv->reconf.active &&
            !srv->waiting)
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
        if (srv->waiting && (timeout < 0 || timeout > (int)srv->retry_ms))
            timeout = (int)srv->retry_ms;
        int rc = zmq_poll(items, !srv->world ? 4 : items[5].socket ? 6 : 5, timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            wf_log(srv->log, WF_LOG_ERR, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            result = WF_E_INTERNAL;
            break;
        }
        wf_notify_watchdog(&srv->notify, wf_now_usec());
        srv_models_notify(srv, wf_now_usec());
        srv_expire(srv, wf_now_usec());       /* deadlines of queued jobs */
        if (wf_sessions_reap(&srv->sched, wf_now_usec(),
                             (uint64_t)srv->settings.session_idle_ms * 1000))
            srv_dispatch(srv);                /* their memory is free again */
        srv_reconf_tick(srv, wf_now_usec());  /* a reconfiguration's timeout */
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
            srv_reconf_apply_pending(srv, &srv_models_follow);
            wf_world_recv(srv->world);  /* cheap when nothing waits */
        }
        if (rc <= 0)
            continue;
        if (items[1].revents)
            handle_signals(srv);
        if (items[2].revents) {
            handle_completions(srv);
            srv_dispatch(srv);
        }
        if (items[3].revents)
            srv_models_loaded(srv);
        if (items[0].revents) {
            for (int i = 0; i < RECV_BATCH && srv_request_recv(srv); i++)
                ;
        }
    }
    finish_drain(srv);
    wf_log(srv->log, WF_LOG_INFO, "stopped: %" PRIu64 " jobs served, %" PRIu64
           " failed, %" PRIu64 " requests refused", srv->sched.served,
           srv->sched.failed, srv->rejected);
    return result;
}
