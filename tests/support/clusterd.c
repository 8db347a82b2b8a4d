/* clusterd.c — weftd processes for end-to-end cluster tests (see
 * clusterd.h), started, waited for and stopped through support/spawn.h.
 * Every wait is an event wait (pidfd, notify lines) with a deadline. */
#include "support/clusterd.h"
#include "support/jobcheck.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Daemons started by this process: makes each one's paths unique. */
static int counter;

int64_t clusterd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool clusterd_open(clusterd_t *d, const char *name, const char *tag)
{
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    int n = counter++;
    snprintf(d->endpoint, sizeof d->endpoint, "ipc:///tmp/weft-%s-%d-%d.sock",
             tag, (int)getpid(), n);
    snprintf(d->notify_path, sizeof d->notify_path, "/tmp/weft-%sn-%d-%d.sock",
             tag, (int)getpid(), n);
    d->nfd = spawn_notify_bind(d->notify_path, 0);
    return d->nfd >= 0;
}

bool clusterd_spawn(clusterd_t *d, const char *const argv[], const spawn_opts_t *o)
{
    spawn_opts_t so = { 0 };
    if (o)
        so = *o;
    so.notify_path = d->notify_path;
    if (!so.log_path && d->log_path[0])
        so.log_path = d->log_path;
    /* a daemon running as another user must reach the notify socket */
    if (so.as_user && chmod(d->notify_path, 0666) != 0) {
        perror(d->notify_path);
        return false;
    }
    return spawn_exec(argv, &so, &d->pid, &d->pidfd);
}

bool clusterd_exec(clusterd_t *d, const char *const argv[], const char *env)
{
    const char *const envs[] = { env, NULL };
    spawn_opts_t o = { .env = env ? envs : NULL };
    return clusterd_spawn(d, argv, &o);
}

bool clusterd_file_find(const char *path, const char *needle, int timeout_ms,
                        char *got, size_t got_len)
{
    int64_t end = clusterd_now_ms() + timeout_ms;
    for (;;) {
        FILE *f = path[0] ? fopen(path, "r") : NULL;
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            if (!strstr(line, needle))
                continue;
            line[strcspn(line, "\n")] = '\0';
            if (got && got_len)
                snprintf(got, got_len, "%s", line);
            fclose(f);
            return true;
        }
        if (f)
            fclose(f);
        if (clusterd_now_ms() >= end)
            break;
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "%s: no line with '%s' within %d ms\n", path, needle,
            timeout_ms);
    return false;
}

bool clusterd_log_find(const clusterd_t *d, const char *needle, int timeout_ms,
                       char *got, size_t got_len)
{
    return clusterd_file_find(d->log_path, needle, timeout_ms, got, got_len);
}

bool clusterd_wait_exit(clusterd_t *d, int timeout_ms)
{
    if (!d->reaped &&
        spawn_reap(d->pid, d->pidfd > 0 ? d->pidfd : -1, timeout_ms, &d->exit_status))
        d->reaped = true;
    return d->reaped;
}

void clusterd_kill(clusterd_t *d, int sig)
{
    if (!d->reaped && d->pid > 0 &&
        spawn_signal_reap(d->pid, d->pidfd > 0 ? d->pidfd : -1, sig, CLUSTERD_TIMEOUT_MS,
                          d->name[0] ? d->name : "weftd", &d->exit_status, NULL))
        d->reaped = true;
}

void clusterd_close(clusterd_t *d)
{
    clusterd_kill(d, SIGKILL);
    if (d->pidfd > 0)
        close(d->pidfd);
    if (d->nfd > 0)
        close(d->nfd);
    unlink(d->notify_path);
    unlink(d->endpoint + 6);
    if (d->log_path[0])
        unlink(d->log_path);
    memset(d, 0, sizeof *d);
}

bool clusterd_status(const clusterd_t *d, wf_status_info_t *s)
{
    wf_client_t *c = NULL;
    bool ok = wf_client_connect(d->endpoint, CLUSTERD_TIMEOUT_MS, &c) == WF_OK &&
              wf_status(c, s) == WF_OK;
    wf_client_destroy(&c);
    return ok;
}

/* ------------------------------------------------------------------ */
/* clusterd_node_t */

static void *notify_reader(void *arg)
{
    clusterd_node_t *d = arg;
    for (;;) {
        struct pollfd p[2] = { { .fd = d->p.nfd, .events = POLLIN },
                               { .fd = d->stop_pipe[0], .events = POLLIN } };
        if (poll(p, 2, -1) < 0 || p[1].revents)
            return NULL;
        char buf[4096];
        ssize_t n = recv(d->p.nfd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        if (buf[n - 1] != '\n')
            buf[n++] = '\n';
        pthread_mutex_lock(&d->mu);
        if (d->len + (size_t)n + 1 > d->cap) {
            size_t cap = (d->cap ? d->cap * 2 : 65536) + (size_t)n;
            char *t = realloc(d->text, cap);
            if (t) {
                d->text = t;
                d->cap = cap;
            }
        }
        if (d->len + (size_t)n + 1 <= d->cap) {
            memcpy(d->text + d->len, buf, (size_t)n);
            d->len += (size_t)n;
            d->text[d->len] = '\0';
        }
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
}

bool clusterd_node_open(clusterd_node_t *d, const char *name, const char *tag)
{
    memset(d, 0, sizeof *d);
    if (!clusterd_open(&d->p, name, tag))
        return false;
    if (pipe2(d->stop_pipe, O_CLOEXEC) != 0) {
        perror("notify reader");
        return false;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->reading = pthread_create(&d->reader, NULL, notify_reader, d) == 0;
    return d->reading;
}

void clusterd_node_close(clusterd_node_t *d)
{
    clusterd_kill(&d->p, SIGKILL);
    if (d->reading) {
        if (write(d->stop_pipe[1], "x", 1) != 1)
            perror("stop pipe");
        pthread_join(d->reader, NULL);
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        close(d->stop_pipe[0]);
        close(d->stop_pipe[1]);
    }
    free(d->text);
    clusterd_close(&d->p);
    memset(d, 0, sizeof *d);
}

/* Take the lines after the cursor up to one starting with prefix (copied
 * to got). Called with d->mu held. */
static bool take_line(clusterd_node_t *d, const char *prefix, char *got,
                      size_t got_len)
{
    size_t pl = strlen(prefix);
    while (d->cursor < d->len) {
        char *line = d->text + d->cursor;
        char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        d->cursor += ll + (nl ? 1 : 0);
        if (ll >= pl && strncmp(line, prefix, pl) == 0) {
            if (got && got_len)
                snprintf(got, got_len, "%.*s", (int)ll, line);
            return true;
        }
    }
    return false;
}

bool clusterd_node_wait(clusterd_node_t *d, const char *prefix, int timeout_ms,
                        char *got, size_t got_len)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    bool found = false;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        found = take_line(d, prefix, got, got_len);
        if (found || pthread_cond_timedwait(&d->cv, &d->mu, &dl) != 0)
            break;
    }
    if (!found)      /* a last look after the timeout */
        found = take_line(d, prefix, got, got_len);
    pthread_mutex_unlock(&d->mu);
    if (!found)
        fprintf(stderr, "%s: no '%s' within %d ms\n", d->p.name, prefix, timeout_ms);
    return found;
}

bool clusterd_node_start(clusterd_node_t *d, const char *weftd,
                         const clusterd_opts_t *o)
{
    if (!clusterd_node_open(d, o->name, o->tag))
        return false;
    char tmo[16], hb[16], hbt[16];
    snprintf(tmo, sizeof tmo, "%d", o->cluster_timeout_ms);
    snprintf(hb, sizeof hb, "%d", o->heartbeat_ms);
    snprintf(hbt, sizeof hbt, "%d", o->heartbeat_timeout_ms);
    const char *level = o->log_env && getenv(o->log_env) ? getenv(o->log_env) : "warning";
    const char *argv[32] = { weftd, "--listen", d->p.endpoint, "--devices", "cpu:2",
                             "--data-address", o->data_address, "--mesh", o->mesh,
                             "--coordinator", o->coordinator, "--nodes", "3",
                             "--node-name", o->name, "--cluster-timeout-ms", tmo,
                             "--heartbeat-ms", hb, "--heartbeat-timeout-ms", hbt,
                             "--cpu-memory", "1G", "--log-level", level,
                             "--allow-anonymous", "true" };
    int n = 27;
    if (o->max_tensor_bytes) {
        argv[n++] = "--max-tensor-bytes";
        argv[n++] = o->max_tensor_bytes;
    }
    argv[n] = NULL;
    return clusterd_exec(&d->p, argv, o->env);
}

/* ------------------------------------------------------------------ */
/* Job parts held on a node (WEFT_TEST_HOLD_JOBS) */

/* FIFOs made by this process: makes each one's path unique. */
static int hold_counter;

bool clusterd_hold_open(clusterd_hold_t *h, const char *tag)
{
    memset(h, 0, sizeof *h);
    snprintf(h->path, sizeof h->path, "/tmp/weft-%sh-%d-%d.fifo", tag, (int)getpid(),
             hold_counter++);
    snprintf(h->env, sizeof h->env, "WEFT_TEST_HOLD_JOBS=%s", h->path);
    unlink(h->path);
    if (mkfifo(h->path, 0600) != 0) {
        perror(h->path);
        return false;
    }
    return true;
}

void clusterd_hold_close(clusterd_hold_t *h)
{
    if (h->path[0])
        unlink(h->path);
    memset(h, 0, sizeof *h);
}

int clusterd_busy(const clusterd_t *d)
{
    wf_status_info_t si;
    if (!clusterd_status(d, &si))
        return -1;
    int n = 0;
    for (uint32_t i = 0; i < si.device_count && i < WF_STATUS_MAX_DEVICES; i++)
        n += si.devices[i].busy != 0;
    return n;
}

typedef struct busy_wait {
    const clusterd_t *d;
    int n;
} busy_wait_t;

static bool busy_reached(void *arg)
{
    const busy_wait_t *w = arg;
    return clusterd_busy(w->d) >= w->n;
}

bool clusterd_wait_busy(const clusterd_t *d, int n, uint32_t timeout_ms)
{
    busy_wait_t w = { d, n };
    if (wait_for(busy_reached, &w, timeout_ms))
        return true;
    fprintf(stderr, "%s: not %d busy device(s) within %u ms\n", d->name, n,
            wait_bound_ms(timeout_ms));
    return false;
}

/* A submitted job and the node that should hold it, for wait_for. */
typedef struct held_wait {
    const clusterd_t *victim;
    wf_client_t *cl;
    wf_job_t *job;
    bool held;                 /* the victim holds a part (else the job ended) */
} held_wait_t;

static bool held_or_ended(void *arg)
{
    held_wait_t *w = arg;
    /* the victim runs no other job: a busy device there is this job's */
    if (clusterd_busy(w->victim) > 0) {
        w->held = true;
        return true;
    }
    return wf_job_poll(w->cl, w->job) != WF_E_PENDING;
}

/* Jobs clusterd_kill_held_job submits at most before one lands on the
 * victim: each replica takes one in turn, and a mesh has at most
 * WF_STATUS_MAX_DEVICES replicas. */
#define HELD_TRIES WF_STATUS_MAX_DEVICES

int clusterd_kill_held_job(clusterd_t *victim, wf_client_t *cl, const struct jcase *jc,
                           const char *lost_msg, uint32_t lost_bound_ms)
{
    int failed_before = failed;
    jbuf_t x;
    memset(&x, 0, sizeof x);
    held_wait_t w = { victim, cl, NULL, false };
    for (int i = 0; i < HELD_TRIES && !w.held; i++) {
        bool init = jbuf_init(&x, jc, 7700 + (uint64_t)i);
        CHECK(init);
        if (!init)
            return failed - failed_before;
        wf_attention_opts_t o = opts_of(jc);
        wf_status_t st = wf_attention_submit(cl, &x.q, &x.k, &x.v, &o, &x.out, x.lse,
                                             &w.job);
        CHECKM(st == WF_OK, "submit: %s", wf_status_name(st));
        if (st != WF_OK) {
            jbuf_free(&x);
            return failed - failed_before;
        }
        CHECKM(wait_for(held_or_ended, &w, WAIT_EVENT_MS),
               "job %d neither held on %s nor ended", i, victim->name);
        if (!w.held) {
            wf_job_result_t res;
            memset(&res, 0, sizeof res);
            wf_job_result(w.job, &res);
            CHECKM(res.status == WF_OK, "job %d on another replica: %s: %s", i,
                   wf_status_name(res.status), wf_job_error(w.job));
            wf_job_destroy(cl, &w.job);
            jbuf_free(&x);
            if (res.status != WF_OK)
                return failed - failed_before;
        }
    }
    CHECKM(w.held, "no job held on %s after %d", victim->name, HELD_TRIES);
    if (!w.held)
        return failed - failed_before;
    wf_status_info_t si;
    CHECKM(wf_status(cl, &si) == WF_OK && si.in_flight >= 1,
           "the coordinator counts no job in flight");
    int64_t t_kill = clusterd_now_ms();
    kill(victim->pid, SIGKILL);
    CHECK(clusterd_wait_exit(victim, (int)WAIT_EVENT_MS));
    wf_status_t st = wf_job_wait(cl, w.job, (int)wait_bound_ms(WAIT_EVENT_MS));
    int64_t t_err = clusterd_now_ms() - t_kill;
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    wf_job_result(w.job, &res);
    const char *msg = wf_job_error(w.job);
    printf("job held on %s when it was killed: %s after %lld ms (bound %u): %s\n",
           victim->name, wf_status_name(res.status), (long long)t_err, lost_bound_ms,
           msg);
    CHECK(st == WF_OK || st == WF_E_NODE_LOST);
    CHECKM(res.status == WF_E_NODE_LOST, "the held job: %s", wf_status_name(res.status));
    CHECKM(t_err <= (int64_t)lost_bound_ms, "the loss after %lld ms", (long long)t_err);
    if (lost_msg)
        CHECKM(strstr(msg, lost_msg) != NULL, "the job's error: %s", msg);
    wf_job_destroy(cl, &w.job);
    jbuf_free(&x);
    return failed - failed_before;
}
