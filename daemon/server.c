/* server.c — weftd's main loop: ROUTER + signalfd + eventfd under
 * zmq_poll, request validation, hello / status, job replies, reload and
 * drain (see server.h). Compute happens on the workers, never here.
 */
#include "server.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <zmq.h>

#include "attention.h"
#include "backend.h"
#include "cluster.h"
#include "comm_host.h"
#include "job.h"
#include "mesh.h"
#include "notify.h"
#include "scheduler.h"
#include "worker.h"

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
    bool bound;                  /* router is bound to settings.listen */
    int sigfd;                   /* SIGTERM / SIGINT / SIGHUP */
    sigset_t old_mask;           /* signal mask to restore */
    bool mask_set;               /* old_mask is valid */
    struct sigaction old_act[3]; /* dispositions of handled_signals to restore */
    bool act_set;                /* old_act is valid */
    wf_done_box_t done;          /* finished jobs from the workers */
    wf_worker_t workers[WF_SETTINGS_MAX_DEVICES]; /* one per device */
    uint32_t n_workers;          /* workers started */
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
    wf_buf_t buf;                /* reply header encoding scratch */
    wf_request_t req;            /* request decoding scratch */
    wf_reply_t reply;            /* reply scratch (a status reply is ~6 KiB) */
};

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

/* A regroup job for every worker: split the world (a new one when
 * `world` is set) into the groups of `mesh`. NULL when out of memory. */
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
    job->run = wf_worker_regroup_run;
    job->group_size = (int)srv->n_workers;
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

/* Build the world and the groups of the initial mesh before serving:
 * waits (on the completion eventfd) for the regroup job. */
static wf_status_t regroup_at_start(wf_server_t *srv)
{
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

    wf_mesh_t mesh;
    char merr[256];
    if (wf_mesh_init(&mesh, &settings->mesh_deg, (int)settings->device_count,
                     merr, sizeof merr) != WF_OK) {
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
    }
    wf_sched_init(&srv->sched, srv->workers, settings->device_count,
                  settings->queue_capacity, &mesh, log);
    if (regroup_at_start(srv) != WF_OK)
        goto fail;

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
    if (zmq_bind(srv->router, settings->listen) != 0) {
        wf_log(log, WF_LOG_ERR, "cannot bind %s: %s", settings->listen,
               zmq_strerror(zmq_errno()));
        goto fail;
    }
    srv->bound = true;
    if (settings->coordinator[0] &&
        wf_cluster_new(&srv->settings, srv->zctx, "", envp, log, &srv->notify,
                       &srv->cluster) != WF_OK)
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
    /* Workers first: they run what is queued, and their jobs' replies
     * are no longer wanted here (wf_server_run already drained). */
    for (uint32_t d = 0; d < srv->n_workers; d++)
        wf_worker_stop(&srv->workers[d]);
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
    wf_cluster_destroy(&srv->cluster);
    if (srv->router)
        zmq_close(srv->router);
    if (srv->zctx)
        zmq_ctx_term(srv->zctx);  /* waits for queued replies up to LINGER */
    /* libzmq 4.3 leaves the socket file of a bound ipc endpoint behind;
     * the path is ours (the bind succeeded on it), so remove it. */
    if (srv->bound && strncmp(srv->settings.listen, "ipc://", 6) == 0 &&
        unlink(srv->settings.listen + 6) != 0 && errno != ENOENT)
        wf_log(srv->log, WF_LOG_WARNING, "cannot remove %s: %s",
               srv->settings.listen + 6, strerror(errno));
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
        di->memory_used = s->used[d];
        di->jobs_served = atomic_load(&w->jobs_served);
        di->busy = atomic_load(&w->busy) ? 1 : 0;
        wf_mesh_coords_t c = { 0, 0, 0, 0 };
        wf_mesh_coords(&s->mesh, (int)d, &c);   /* device index = global rank */
        di->rank = d;
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

static wf_status_t plan_for_mesh(wf_djob_t *job, const wf_mesh_t *mesh, void *arg)
{
    wf_server_t *srv = arg;
    job->err[0] = '\0';
    return wf_attention_plan(job, srv->ops, mesh, &srv->settings, job->err,
                             sizeof job->err);
}

static void status_line(const wf_server_t *srv, char *buf, size_t len);
static void finish_reconfigure(wf_server_t *srv, wf_status_t st);

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
    if (wf_mesh_reconfigure(&target, deg, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (srv->reconf.active) {
        char to[96];
        format_deg(&srv->reconf.target.deg, to, sizeof to);
        snprintf(err, err_len, "a reconfiguration is running (to %s, %s); "
                 "retry when it is done", to, srv->reconf.why);
        return WF_E_BUSY;
    }
    srv->reconf.active = true;
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
    if (st != WF_OK && srv->reconf.failures < 3 && !srv->workers_stopped) {
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
    srv->sched.paused = false;
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
    if (st == WF_OK) {
        /* every node is whole replicas: each takes the same local mesh */
        if (srv->cluster)
            wf_cluster_broadcast_mesh(srv->cluster, &req->args.reconfigure.mesh);
        return;
    }
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
                         !wf_cluster_serving(srv->cluster))) {
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
    st = wf_attention_plan(job, srv->ops, &srv->sched.mesh, &srv->settings, err,
                           sizeof err);
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
        handle_attention(srv, parts, h, n, delim, t_recv);
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
/* signals, completions, the loop */

static void handle_completions(wf_server_t *srv)
{
    wf_djob_t *job = wf_done_box_take(&srv->done);
    while (job) {
        wf_djob_t *next = job->next;
        if (job->kind == WF_DJOB_REGROUP) {
            wf_status_t st = (wf_status_t)atomic_load(&job->status);
            wf_djob_free(&job);
            finish_reconfigure(srv, st);
            job = next;
            continue;
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
    advance_reconfigure(srv);
}

static void status_line(const wf_server_t *srv, char *buf, size_t len)
{
    char mesh[64];
    format_deg(&srv->sched.mesh.deg, mesh, sizeof mesh);
    snprintf(buf, len, "serving on %s, %u %s devices, mesh %s, epoch %" PRIu64,
             srv->settings.listen, srv->settings.device_count, srv->ops->name,
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
           PRIu64, srv->settings.listen, srv->settings.device_count,
           srv->ops->name, mesh, srv->sched.mesh.epoch);

    wf_status_t result = WF_OK;
    for (;;) {
        if (srv->stopping && wf_sched_idle(&srv->sched) && !srv->reconf.active)
            break;
        uint64_t now = wf_now_usec();
        if (srv->stopping && now >= srv->drain_deadline_us)
            break;
        zmq_pollitem_t items[4] = {
            { srv->router, 0, ZMQ_POLLIN, 0 },
            { NULL, srv->sigfd, ZMQ_POLLIN, 0 },
            { NULL, srv->done.efd, ZMQ_POLLIN, 0 },
            { srv->cluster ? wf_cluster_socket(srv->cluster) : NULL, 0,
              ZMQ_POLLIN, 0 },
        };
        int timeout = poll_timeout_ms(srv, now);
        if (srv->cluster) {
            int ct = wf_cluster_timeout_ms(srv->cluster, now);
            if (timeout < 0 || ct < timeout)
                timeout = ct;
        }
        int rc = zmq_poll(items, srv->cluster ? 4 : 3, timeout);
        if (rc < 0 && zmq_errno() != EINTR) {
            wf_log(srv->log, WF_LOG_ERR, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            result = WF_E_INTERNAL;
            break;
        }
        wf_notify_watchdog(&srv->notify, wf_now_usec());
        if (srv->cluster) {
            /* timers run on every wake-up, messages when there are some */
            wf_cluster_handle(srv->cluster, wf_now_usec());
            const char *fatal = wf_cluster_fatal(srv->cluster);
            if (fatal) {
                wf_log(srv->log, WF_LOG_ERR, "stopping: %s", fatal);
                result = WF_E_INTERNAL;
                break;
            }
            wf_mesh_degrees_t deg;
            if (wf_cluster_take_mesh(srv->cluster, &deg)) {
                char err[WF_PROTO_ERROR_MAX];
                if (start_reconfigure(srv, &deg, false, "coordinator", false, NULL,
                                      false, 0, err, sizeof err) != WF_OK)
                    wf_log(srv->log, WF_LOG_WARNING, "cluster: mesh from the "
                           "coordinator not applied: %s", err);
            }
        }
        if (rc <= 0)
            continue;
        if (items[1].revents)
            handle_signals(srv);
        if (items[2].revents) {
            handle_completions(srv);
            dispatch(srv);
        }
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
