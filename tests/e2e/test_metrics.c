/* test_metrics.c — the operators' counters against a real weftd:
 *   (a) metrics_listen = 127.0.0.1:PORT: GET /metrics over a plain
 *       socket (HTTP/1.0 by hand) answers 200 with Content-Type
 *       text/plain; version=0.0.4 and every metric name, all zero;
 *   (b) after 5 attention jobs (checked against the fp64 reference), one
 *       refused reconfigure (dp=3 on 2 devices: WF_E_BAD_ARGUMENT) and
 *       one hot reconfiguration (ring=2): the served counter, the latency
 *       histogram (+Inf bucket, count), the refusal by op and code, the
 *       reconfigurations and their duration histogram, the mesh epoch,
 *       the device budget; the same through libweft's status (counters)
 *       and `weftctl status`;
 *   (c) other paths 404, other methods 405 (with Allow; a body sent with
 *       them is never read), HEAD 200 without a body; an HTTP/1.1
 *       request without exactly one Host header 400, with one 200;
 *   (d) metrics_listen on 0.0.0.0 without allow_anonymous: weftd exits
 *       non-zero and says why; with allow_anonymous it serves; an address
 *       that does not resolve stops the start too, and so does a port
 *       already taken;
 *   (e) the wire: the counters round trip through the codec, a status
 *       without them decodes with present 0, unknown keys in them are
 *       ignored;
 *   (f) a raw socket on the ipc endpoint sends a greeting that is not
 *       ZMTP 3 and is refused: with no request to wake the daemon's main
 *       loop, scrapes alone see weft_handshakes_refused_total move (they
 *       are polled until it does, bounded by WAIT_EVENT_MS);
 *   (g) a cancel of an id no job has (WF_E_BAD_ARGUMENT) is counted as
 *       weft_requests_refused_total{op="cancel",...}, not op="other";
 *   (h) 40 connections from 10 loopback addresses holding the endpoint's
 *       slots with half a request: a scrape is served within 10 x
 *       metrics_connection_ms, each holder's connection is closed, a job
 *       runs meanwhile.
 * usage: test_metrics WEFTD WEFTCTL
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto.h"
#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"


#define TIMEOUT_MS 60000

static const char *weftd, *weftctl;
static char dir[] = "/tmp/weft-metrics-XXXXXX";

/* ---- HTTP by hand ------------------------------------------------------ */

typedef struct http {
    int code;                  /* status code; 0: no answer */
    char head[4096];           /* status line and headers */
    char *body;                /* malloc'd, NUL-terminated */
    size_t body_len;
} http_t;

static void http_free(http_t *h)
{
    free(h->body);
    memset(h, 0, sizeof *h);
}

/* Send `request` (a whole HTTP/1.0 request, or HTTP/1.1 with
 * "Connection: close") to 127.0.0.1:port, read the answer to EOF (the
 * server closes the connection after it). */
static bool http_do(int port, const char *request, http_t *h)
{
    memset(h, 0, sizeof *h);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    /* a failure bound on the answer (an event the daemon brings about) */
    struct timeval tv = { wait_bound_ms(WAIT_EVENT_MS) / 1000, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    bool ok = buf && connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              write(fd, request, strlen(request)) == (ssize_t)strlen(request);
    while (ok) {
        if (len == cap) {
            char *nb = realloc(buf, 2 * cap + 1);
            if (!nb) {
                ok = false;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            ok = false;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    if (!ok) {
        free(buf);
        return false;
    }
    buf[len] = '\0';
    char *end = strstr(buf, "\r\n\r\n");
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &h->code) != 1) {
        free(buf);
        return false;
    }
    size_t hl = (size_t)(end - buf);
    snprintf(h->head, sizeof h->head, "%.*s", (int)hl, buf);
    h->body_len = len - hl - 4;
    h->body = malloc(h->body_len + 1);
    if (h->body) {
        memcpy(h->body, end + 4, h->body_len);
        h->body[h->body_len] = '\0';
    }
    free(buf);
    return h->body != NULL;
}

static bool get_metrics(int port, http_t *h)
{
    bool ok = http_do(port, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", h);
    CHECKM(ok && h->code == 200, "GET /metrics: %d", h->code);
    return ok && h->code == 200;
}

/* The value of the sample `series` (its name and labels exactly as
 * printed) in an exposition body; NAN when absent. */
static double sample(const char *body, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    return NAN;
}

static void expect_sample(const char *body, const char *series, double want)
{
    double got = sample(body, series);
    CHECKM(got == want, "%s: %g, want %g", series, got, want);
}

/* wait_for's condition: a scrape reads `want` for `series` (the last
 * value read goes to got). */
typedef struct gauge_wait {
    int port;
    const char *series;
    double want;
    double got;
} gauge_wait_t;

static bool gauge_reads(void *arg)
{
    gauge_wait_t *g = arg;
    http_t h;
    if (http_do(g->port, "GET /metrics HTTP/1.0\r\n\r\n", &h) && h.code == 200)
        g->got = sample(h.body, g->series);
    http_free(&h);
    return g->got == g->want;
}

/* A gauge: copied by the daemon's main loop once per turn, so it may lag
 * a reply by that turn: scraped until it reads `want` (the turn is an
 * event the daemon brings about: WAIT_EVENT_MS at most). */
static void expect_gauge(int port, const char *series, double want)
{
    gauge_wait_t g = { port, series, want, NAN };
    CHECKM(wait_for(gauge_reads, &g, WAIT_EVENT_MS), "%s: %g, want %g", series, g.got,
           want);
}

/* ---- daemons ------------------------------------------------------------ */

typedef struct wd {
    clusterd_node_t n;
    char log[256];
    char ep[160];
} wd_t;

/* Whether a line of the log at path holds needle, waiting for it (a log
 * line is an event: WAIT_EVENT_MS at most). */
static bool log_has(const char *path, const char *needle)
{
    return clusterd_file_find(path, needle, (int)wait_bound_ms(WAIT_EVENT_MS), NULL, 0);
}

/* weftd --devices cpu:2 --cpu-memory 256M on an ipc endpoint in dir, with
 * `extra` flags; stderr into dir/TAG.log; READY=1 awaited when want_ready. */
static bool wd_start(wd_t *w, const char *tag, const char *const *extra, bool want_ready)
{
    memset(w, 0, sizeof *w);
    if (!clusterd_node_open(&w->n, "metrics", tag))
        return false;
    snprintf(w->log, sizeof w->log, "%s/%s.log", dir, tag);
    snprintf(w->ep, sizeof w->ep, "ipc://%s/%s.sock", dir, tag);
    const char *argv[32] = { weftd, "--devices", "cpu:2", "--cpu-memory", "256M",
                             "--log-level", "info", "--listen", w->ep };
    size_t n = 9;
    for (size_t i = 0; extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    spawn_opts_t o = { .log_path = w->log };
    if (!clusterd_spawn(&w->n.p, argv, &o))
        return false;
    if (!want_ready)
        return true;
    return clusterd_node_wait(&w->n, "READY=1", TIMEOUT_MS, NULL, 0);
}

static void wd_stop(wd_t *w)
{
    clusterd_kill(&w->n.p, SIGTERM);
    CHECKM(w->n.p.reaped && WIFEXITED(w->n.p.exit_status) &&
           WEXITSTATUS(w->n.p.exit_status) == 0, "daemon %s did not exit 0", w->log);
    clusterd_node_close(&w->n);
}

/* A daemon that must refuse to start: exits non-zero, its log says `why`. */
static void expect_no_start(const char *tag, const char *const *extra, const char *why)
{
    wd_t w;
    if (wd_start(&w, tag, extra, false)) {
        CHECKM(clusterd_wait_exit(&w.n.p, TIMEOUT_MS) && WIFEXITED(w.n.p.exit_status) &&
               WEXITSTATUS(w.n.p.exit_status) != 0, "%s: must not start", tag);
        CHECKM(log_has(w.log, why), "%s: the log says '%s'", tag, why);
    } else {
        CHECKM(false, "%s: could not run weftd", tag);
    }
    clusterd_node_close(&w.n);
}

/* ---- jobs -------------------------------------------------------------- */

static const jcase_t job_case = {
    .name = "metrics", .B = 1, .Sq = 48, .Skv = 40, .Hq = 4, .Hkv = 2, .D = 32,
    .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 0, .want_lse = true,
};

static bool job_ok(wf_client_t *c, uint64_t seed)
{
    jbuf_t a;
    if (!jbuf_init(&a, &job_case, seed))
        return false;
    wf_attention_opts_t o = opts_of(&job_case);
    wf_job_result_t r;
    wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &r);
    double eo = INFINITY, el = INFINITY, to, tl;
    if (st == WF_OK)
        jbuf_errors(&a, &eo, &el);
    jcase_tolerances(&job_case, false, &to, &tl);
    bool ok = st == WF_OK && eo <= to && el <= tl;
    CHECKM(ok, "attention %s (%s), errors out %.3g lse %.3g", wf_status_name(st),
           wf_client_last_error(c), eo, el);
    jbuf_free(&a);
    return ok;
}

/* ---- the checks --------------------------------------------------------- */

static const char *const names[] = {
    "weft_build_info", "weft_uptime_seconds", "weft_jobs_queued", "weft_jobs_running",
    "weft_queue_capacity", "weft_jobs_served_total", "weft_requests_failed_total",
    "weft_requests_refused_total", "weft_job_latency_seconds",
    "weft_device_memory_budget_bytes", "weft_device_memory_used_bytes",
    "weft_device_model_bytes", "weft_reconfigurations_total", "weft_reloads_total",
    "weft_reconfiguration_duration_seconds", "weft_reconfiguring", "weft_mesh_epoch",
    "weft_world_size", "weft_cluster_nodes_lost_total", "weft_handshakes_refused_total",
    "weft_handshakes_admitted_total",
};

/* (a) */
static void check_fresh(int port)
{
    http_t h;
    if (!get_metrics(port, &h))
        return;
    CHECKM(strstr(h.head, "Content-Type: text/plain; version=0.0.4") != NULL,
           "content type; head:\n%s", h.head);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char t[128];
        snprintf(t, sizeof t, "# TYPE %s ", names[i]);
        CHECKM(strstr(h.body, t) != NULL, "%s missing", names[i]);
    }
    char bi[96];
    snprintf(bi, sizeof bi, "weft_build_info{version=\"%s\",backend=\"cpu\"}",
             WF_VERSION_STRING);
    expect_sample(h.body, bi, 1);
    expect_sample(h.body, "weft_jobs_served_total{op=\"attention\"}", 0);
    expect_sample(h.body, "weft_job_latency_seconds_count{op=\"attention\"}", 0);
    expect_sample(h.body, "weft_reconfigurations_total{result=\"ok\"}", 0);
    expect_sample(h.body, "weft_reloads_total{result=\"failed\"}", 0);
    expect_sample(h.body, "weft_jobs_queued", 0);
    expect_sample(h.body, "weft_jobs_running", 0);
    expect_sample(h.body, "weft_queue_capacity", 64);
    expect_sample(h.body, "weft_world_size", 2);
    expect_sample(h.body, "weft_mesh_epoch", 0);
    expect_sample(h.body, "weft_device_memory_budget_bytes{device=\"cpu:0\"}",
                  256.0 * 1024 * 1024);
    expect_sample(h.body, "weft_device_memory_used_bytes{device=\"cpu:1\"}", 0);
    CHECKM(strstr(h.body, "weft_requests_refused_total{") == NULL, "no refusal yet");
    CHECKM(sample(h.body, "weft_uptime_seconds") > 0, "uptime");
    http_free(&h);
}

/* (b) */
static void check_after(int port, wd_t *w, int n_jobs)
{
    http_t h;
    if (!get_metrics(port, &h))
        return;
    expect_sample(h.body, "weft_jobs_served_total{op=\"attention\"}", n_jobs);
    expect_sample(h.body, "weft_jobs_served_total{op=\"forward\"}", 0);
    expect_sample(h.body, "weft_job_latency_seconds_count{op=\"attention\"}", n_jobs);
    expect_sample(h.body, "weft_job_latency_seconds_bucket{op=\"attention\",le=\"+Inf\"}",
                  n_jobs);
    expect_sample(h.body, "weft_job_latency_seconds_bucket{op=\"attention\",le=\"300\"}",
                  n_jobs);
    CHECKM(sample(h.body, "weft_job_latency_seconds_sum{op=\"attention\"}") > 0,
           "latency sum");
    expect_sample(h.body, "weft_requests_refused_total{op=\"reconfigure\","
                  "code=\"WF_E_BAD_ARGUMENT\"}", 1);
    expect_sample(h.body, "weft_reconfigurations_total{result=\"ok\"}", 1);
    expect_sample(h.body, "weft_reconfigurations_total{result=\"failed\"}", 0);
    expect_sample(h.body, "weft_reconfiguration_duration_seconds_count", 1);
    CHECKM(sample(h.body, "weft_reconfiguration_duration_seconds_sum") > 0, "reconf sum");
    CHECKM(strstr(h.body, "weft_requests_failed_total{") == NULL, "nothing failed:\n%s",
           h.body);
    CHECKM(sample(h.body, "weft_metrics_scrapes_total") >= 1, "scrapes counted");
    http_free(&h);
    expect_gauge(port, "weft_mesh_epoch", 1);
    expect_gauge(port, "weft_reconfiguring", 0);
    expect_gauge(port, "weft_jobs_queued", 0);
    expect_gauge(port, "weft_jobs_running", 0);

    /* the same through status */
    wf_client_t *c = NULL;
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (s && wf_client_connect(w->ep, TIMEOUT_MS, &c) == WF_OK && wf_status(c, s) == WF_OK) {
        const wf_status_counters_t *k = &s->counters;
        CHECKM(k->present == 1, "status has counters");
        CHECKM(k->op_count == 2 && strcmp(k->ops[0].op, "attention") == 0 &&
               k->ops[0].served == (uint64_t)n_jobs && k->ops[0].failed == 0,
               "attention served %" PRIu64, k->ops[0].served);
        CHECKM(k->ops[0].p50_us > 0 && k->ops[0].p50_us <= k->ops[0].p99_us &&
               k->ops[0].p99_us <= k->ops[0].max_us, "latency p50 %" PRIu64 " p99 %"
               PRIu64 " max %" PRIu64, k->ops[0].p50_us, k->ops[0].p99_us, k->ops[0].max_us);
        CHECKM(k->refused_count == 1 && k->refused[0].code == WF_E_BAD_ARGUMENT &&
               k->refused[0].count == 1, "refused by code");
        CHECKM(k->failed_count == 0, "failed by code");
        CHECKM(s->requests_rejected == 1, "requests_rejected %" PRIu64, s->requests_rejected);
        CHECKM(k->reconfigurations == 1 && k->reconfigurations_failed == 0,
               "reconfigurations");
        CHECKM(k->nodes_lost == 0 && k->handshakes_refused == 0, "no losses, no handshakes");
    } else {
        CHECKM(false, "status: %s", wf_client_last_error(c));
    }
    free(s);
    wf_client_destroy(&c);

    /* and weftctl status */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s --endpoint %s status", weftctl, w->ep);
    FILE *p = popen(cmd, "r");
    static char out[1 << 16];
    size_t n = p ? fread(out, 1, sizeof out - 1, p) : 0;
    out[n] = '\0';
    int rc = p ? pclose(p) : -1;
    char want[64];
    snprintf(want, sizeof want, "  attention  served %d  failed 0  latency p50 ", n_jobs);
    CHECKM(rc == 0 && strstr(out, "counters since start:") && strstr(out, want) &&
           strstr(out, "  refused    WF_E_BAD_ARGUMENT 1\n") &&
           strstr(out, "  failed     none\n") && strstr(out, "  reconfig   1 ok, 0 failed"),
           "weftctl status printed:\n%s", out);
}

/* (c) */
static void check_http_errors(int port)
{
    http_t h;
    CHECKM(http_do(port, "GET / HTTP/1.0\r\n\r\n", &h) && h.code == 404, "GET /: %d", h.code);
    http_free(&h);
    CHECKM(http_do(port, "GET /metrics/x HTTP/1.0\r\n\r\n", &h) && h.code == 404,
           "GET /metrics/x: %d", h.code);
    http_free(&h);
    CHECKM(http_do(port, "POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello", &h) &&
           h.code == 405 && strstr(h.head, "Allow: GET, HEAD"), "POST: %d\n%s", h.code,
           h.head);
    http_free(&h);
    CHECKM(http_do(port, "DELETE /metrics HTTP/1.0\r\n\r\n", &h) && h.code == 405,
           "DELETE: %d", h.code);
    http_free(&h);
    /* a body announced and never sent: answered all the same, before the
     * body (a server that waited for it would close the connection at
     * its idle timeout, HTTP_TIMEOUT_S, with no answer to read) */
    CHECKM(http_do(port, "PUT /metrics HTTP/1.0\r\nContent-Length: 1000000\r\n\r\nab", &h) &&
           h.code == 405, "PUT: %d", h.code);
    http_free(&h);
    CHECKM(http_do(port, "HEAD /metrics HTTP/1.0\r\n\r\n", &h) && h.code == 200 &&
           h.body_len == 0, "HEAD: %d, %zu body bytes", h.code, h.body_len);
    http_free(&h);
    CHECKM(http_do(port, "garbage\r\n\r\n", &h) ? h.code >= 400 : true, "garbage: %d",
           h.code);
    http_free(&h);
    /* HTTP/1.1 needs exactly one Host (RFC 9112 section 3.2): without it,
     * or with two, 400 whatever the path; with one, served */
    static const char *const no_host[] = {
        "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.2\r\n"
        "Connection: close\r\n\r\n",
        "GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof no_host / sizeof no_host[0]; i++) {
        CHECKM(http_do(port, no_host[i], &h) && h.code == 400, "HTTP/1.1 request %zu "
               "without one Host: %d", i, h.code);
        http_free(&h);
    }
    CHECKM(http_do(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                         "close\r\n\r\n", &h) && h.code == 200 &&
               strstr(h.body, "weft_uptime_seconds"),
           "HTTP/1.1 GET with Host: %d", h.code);
    http_free(&h);
}

/* (f) */
static void check_handshake_refused(int port, const wd_t *w)
{
    http_t h;
    if (!get_metrics(port, &h))
        return;
    double before = sample(h.body, "weft_handshakes_refused_total");
    http_free(&h);
    CHECKM(before == 0, "weft_handshakes_refused_total before: %g", before);
    /* an HTTP request where the ZMTP greeting belongs: the gate closes
     * the connection (the end of the stream, read here) and counts it */
    static const char junk[] = "GET / HTTP/1.0\r\n\r\n..........................................";
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", w->ep + strlen("ipc://"));
    struct timeval tv = { WAIT_EVENT_MS / 1000, 0 };
    bool closed = false;
    if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
        connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, junk, sizeof junk - 1) == (ssize_t)(sizeof junk - 1)) {
        char buf[256];
        ssize_t r;
        while ((r = read(fd, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
            ;
        closed = r == 0 || (r < 0 && errno == ECONNRESET);
    }
    if (fd >= 0)
        close(fd);
    CHECKM(closed, "the gate did not close a connection that sent no ZMTP greeting");
    gauge_wait_t g = { port, "weft_handshakes_refused_total", before + 1, NAN };
    bool moved = wait_for(gauge_reads, &g, WAIT_EVENT_MS);
    CHECKM(moved, "weft_handshakes_refused_total: %g after a refused handshake "
           "(before %g), with no request to the daemon", g.got, before);
    printf("(f) a refused greeting: weft_handshakes_refused_total %g -> %g, scrapes "
           "only\n", before, g.got);
}

/* (g) */
static void check_cancel_label(int port, const wd_t *w)
{
    wf_client_t *c = NULL;
    if (wf_client_connect(w->ep, TIMEOUT_MS, &c) != WF_OK) {
        CHECKM(false, "connect: %s", wf_client_last_error(NULL));
        return;
    }
    wf_status_t st = wf_cancel_id(c, 987654321);
    CHECKM(st == WF_E_BAD_ARGUMENT, "cancel of an id no job has: %s: %s",
           wf_status_name(st), wf_client_last_error(c));
    wf_client_destroy(&c);
    /* counted before the reply went out: no wait */
    http_t h;
    if (!get_metrics(port, &h))
        return;
    expect_sample(h.body, "weft_requests_refused_total{op=\"cancel\","
                  "code=\"WF_E_BAD_ARGUMENT\"}", 1);
    CHECKM(strstr(h.body, "op=\"other\"") == NULL, "a series labelled op=\"other\":\n%s",
           h.body);
    http_free(&h);
    printf("(g) a refused cancel: op=\"cancel\"\n");
}

/* (h) Connections that hold the endpoint's slots (40 from 10 loopback
 * addresses, each with half a request line, never finished) against a
 * daemon with metrics_connection_ms = HOLD_MS: a scrape is served within
 * a bound derived from it (each held slot is closed HOLD_MS after its
 * accept, long before libmicrohttpd's 10 s idle timeout would), every
 * holder sees its connection closed, and jobs run meanwhile. */
#define HOLD_MS 300
#define HOLDERS 40

static int hold_slot(int port, int k)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in src = { .sin_family = AF_INET };
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (uint32_t)(k % 10));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char part[] = "GET /metr";
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0 ||
        connect(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        write(fd, part, sizeof part - 1) != (ssize_t)(sizeof part - 1)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void check_slots_held(int port, const wd_t *w)
{
    int fds[HOLDERS], held = 0;
    for (int k = 0; k < HOLDERS; k++)
        if ((fds[k] = hold_slot(port, k)) >= 0)
            held++;
    CHECKM(held == HOLDERS, "%d of %d holders connected", held, HOLDERS);
    wf_client_t *c = NULL;
    if (wf_client_connect(w->ep, TIMEOUT_MS, &c) == WF_OK)
        CHECKM(job_ok(c, 900), "a job while the metrics slots are held");
    wf_client_destroy(&c);
    /* served within 10 deadlines (the idle timeout alone would take 10 s) */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double ms = 0;
    bool served = false;
    while (!served && ms < 10.0 * HOLD_MS) {
        http_t h;
        served = http_do(port, "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", &h) &&
                 h.code == 200;
        http_free(&h);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    }
    CHECKM(served, "a scrape while %d connections held the slots: not served in %.0f ms "
           "(metrics_connection_ms %d)", HOLDERS, ms, HOLD_MS);
    printf("metrics: a scrape past %d slot holders served after %.0f ms "
           "(metrics_connection_ms %d)\n", HOLDERS, ms, HOLD_MS);
    /* every holder's connection ends: EOF or a reset, not our read timeout */
    int closed = 0;
    for (int k = 0; k < HOLDERS; k++) {
        if (fds[k] < 0)
            continue;
        struct timeval tv = { wait_bound_ms(WAIT_EVENT_MS) / 1000, 0 };
        setsockopt(fds[k], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        char b[256];
        ssize_t r;
        while ((r = read(fds[k], b, sizeof b)) > 0)
            ;
        closed += r == 0 || (r < 0 && errno == ECONNRESET);
        close(fds[k]);
    }
    CHECKM(closed == held, "%d of %d held connections closed by the daemon", closed, held);
}

static bool counters_equal(const wf_status_counters_t *a, const wf_status_counters_t *b)
{
    bool eq = a->present == b->present && a->refused_count == b->refused_count &&
              a->failed_count == b->failed_count && a->op_count == b->op_count &&
              a->reconfigurations == b->reconfigurations &&
              a->reconfigurations_failed == b->reconfigurations_failed &&
              a->reconfigure_ms == b->reconfigure_ms && a->nodes_lost == b->nodes_lost &&
              a->handshakes_refused == b->handshakes_refused &&
              a->handshakes_admitted == b->handshakes_admitted;
    for (uint32_t i = 0; eq && i < a->refused_count; i++)
        eq = a->refused[i].code == b->refused[i].code &&
             a->refused[i].count == b->refused[i].count;
    for (uint32_t i = 0; eq && i < a->failed_count; i++)
        eq = a->failed[i].code == b->failed[i].code && a->failed[i].count == b->failed[i].count;
    for (uint32_t i = 0; eq && i < a->op_count; i++)
        eq = strcmp(a->ops[i].op, b->ops[i].op) == 0 && a->ops[i].served == b->ops[i].served &&
             a->ops[i].failed == b->ops[i].failed && a->ops[i].p50_us == b->ops[i].p50_us &&
             a->ops[i].p99_us == b->ops[i].p99_us && a->ops[i].max_us == b->ops[i].max_us;
    return eq;
}

/* (e) the wire: status counters encode and decode back (every field);
 * a reply without them decodes with present 0; a decoder meets unknown
 * keys inside them and ignores them (a newer daemon). */
static void check_wire(void)
{
    static wf_reply_t rep, back;
    memset(&rep, 0, sizeof rep);
    rep.version = WF_PROTOCOL_VERSION;
    rep.id = 7;
    rep.op = WF_OP_STATUS;
    wf_status_info_t *s = &rep.result.status;
    snprintf(s->weft_version, sizeof s->weft_version, "0.2.0");
    s->mesh = (wf_mesh_degrees_t){ 1, 1, 1, 2 };
    wf_status_counters_t *c = &s->counters;
    c->present = 1;
    c->refused_count = 2;
    c->refused[0] = (wf_code_count_t){ WF_E_QUEUE_FULL, 12 };
    c->refused[1] = (wf_code_count_t){ WF_E_DENIED, UINT64_C(1) << 40 };
    c->failed_count = 1;
    c->failed[0] = (wf_code_count_t){ WF_E_NODE_LOST, 3 };
    c->op_count = 2;
    c->ops[0] = (wf_op_counters_t){ "attention", 100, 4, 1500, 90000, 120000 };
    c->ops[1] = (wf_op_counters_t){ "forward", 1, 0, 2000000, 2000000, 2000000 };
    c->reconfigurations = 5;
    c->reconfigurations_failed = 1;
    c->reconfigure_ms = 4321;
    c->nodes_lost = 2;
    c->handshakes_refused = 9;
    c->handshakes_admitted = 11;
    wf_buf_t b = { 0 };
    char err[256] = "";
    CHECKM(wf_reply_encode(&rep, &b) == WF_OK, "encode");
    CHECKM(wf_reply_decode(b.data, b.len, &back, err, sizeof err) == WF_OK, "decode: %s", err);
    CHECKM(counters_equal(&back.result.status.counters, c), "counters round trip");
    CHECKM(back.result.status.mesh.tp == 2, "the rest still there");
    /* without counters */
    c->present = 0;
    wf_buf_free(&b);
    CHECKM(wf_reply_encode(&rep, &b) == WF_OK &&
           wf_reply_decode(b.data, b.len, &back, err, sizeof err) == WF_OK &&
           back.result.status.counters.present == 0 &&
           back.result.status.counters.op_count == 0, "no counters: present 0");
    wf_buf_free(&b);
    /* unknown keys inside counters (and an op map with one more key) */
    static const unsigned char newer[] = {
        0x85, 0xa1, 'v', 0x01, 0xa2, 'i', 'd', 0x07, 0xa2, 'o', 'p', 0x02,
        0xa6, 's', 't', 'a', 't', 'u', 's', 0x00,
        0xa6, 'r', 'e', 's', 'u', 'l', 't', 0x81,
        0xa8, 'c', 'o', 'u', 'n', 't', 'e', 'r', 's', 0x83,
        0xa3, 'n', 'e', 'w', 0x2a,                                   /* new: 42 */
        0xa3, 'o', 'p', 's', 0x91, 0x82, 0xa2, 'o', 'p', 0xa1, 'x',  /* ops: [{op: x, */
        0xa4, 'm', 'o', 'r', 'e', 0xc3,                              /*   more: true}] */
        0xa7, 'r', 'e', 'f', 'u', 's', 'e', 'd', 0x91, 0x83,         /* refused: [{ */
        0xa4, 'c', 'o', 'd', 'e', 0x0b, 0xa5, 'c', 'o', 'u', 'n', 't', 0x02,
        0xa4, 'w', 'h', 'e', 'n', 0x01,                              /* when: 1}] */
    };
    wf_status_t st = wf_reply_decode(newer, sizeof newer, &back, err, sizeof err);
    const wf_status_counters_t *k = &back.result.status.counters;
    CHECKM(st == WF_OK && k->present == 1 && k->op_count == 1 &&
           strcmp(k->ops[0].op, "x") == 0 && k->refused_count == 1 &&
           k->refused[0].code == 11 && k->refused[0].count == 2,
           "unknown keys ignored: %s: %s", wf_status_name(st), err);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s WEFTD WEFTCTL\n", argv[0]);
        return 2;
    }
    weftd = argv[1];
    weftctl = argv[2];
    signal(SIGPIPE, SIG_IGN);
    check_wire();
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    /* (a) .. (c) */
    int port = test_port();
    char ml[64];
    snprintf(ml, sizeof ml, "127.0.0.1:%d", port);
    const char *extra[] = { "--metrics-listen", ml, NULL };
    wd_t w;
    if (!wd_start(&w, "main", extra, true)) {
        fprintf(stderr, "weftd did not start\n");
        clusterd_node_close(&w.n);
        return 1;
    }
    CHECKM(log_has(w.log, "metrics: serving http://"), "the log names the endpoint");
    check_fresh(port);
    wf_client_t *c = NULL;
    const int n_jobs = 5;
    if (wf_client_connect(w.ep, TIMEOUT_MS, &c) == WF_OK) {
        for (int i = 0; i < n_jobs; i++)
            job_ok(c, 100 + (uint64_t)i);
        wf_mesh_degrees_t bad = { 3, 1, 1, 1 }, ring = { 1, 2, 1, 1 };
        uint64_t rr = 0;
        wf_status_t st = wf_reconfigure(c, &bad, &rr);
        CHECKM(st == WF_E_BAD_ARGUMENT, "dp=3 on 2 devices: %s", wf_status_name(st));
        st = wf_reconfigure(c, &ring, &rr);
        CHECKM(st == WF_OK, "ring=2: %s: %s", wf_status_name(st), wf_client_last_error(c));
    } else {
        CHECKM(false, "connect: %s", wf_client_last_error(NULL));
    }
    wf_client_destroy(&c);
    check_after(port, &w, n_jobs);
    check_http_errors(port);
    check_handshake_refused(port, &w);
    check_cancel_label(port, &w);
    printf("metrics: (a)-(c), (f), (g) done, %d failure(s) so far\n", failed);
    wd_stop(&w);

    /* (h) */
    char hl[64], hold_ms[16];
    int ph = test_port();
    snprintf(hl, sizeof hl, "127.0.0.1:%d", ph);
    snprintf(hold_ms, sizeof hold_ms, "%d", HOLD_MS);
    const char *hold[] = { "--metrics-listen", hl, "--metrics-connection-ms", hold_ms, NULL };
    if (wd_start(&w, "hold", hold, true)) {
        check_slots_held(ph, &w);
        wd_stop(&w);
    } else {
        CHECKM(false, "the slot-holding daemon did not start");
        clusterd_node_close(&w.n);
    }

    /* (d) */
    char any[64];
    snprintf(any, sizeof any, "0.0.0.0:%d", test_port());
    const char *open_[] = { "--metrics-listen", any, NULL };
    expect_no_start("open", open_, "is not a loopback address");
    const char *open_ok[] = { "--metrics-listen", any, "--allow-anonymous", "true", NULL };
    if (wd_start(&w, "anon", open_ok, true)) {
        int p2 = atoi(strrchr(any, ':') + 1);
        http_t h;
        CHECKM(get_metrics(p2, &h), "allow_anonymous: served");
        http_free(&h);
        wd_stop(&w);
    } else {
        CHECKM(false, "allow_anonymous daemon did not start");
        clusterd_node_close(&w.n);
    }
    const char *bad_host[] = { "--metrics-listen", "no-such-host.invalid:9464", NULL };
    expect_no_start("badhost", bad_host, "metrics_listen");
    /* the port taken (by the daemon below's own endpoint): no start */
    int p3 = test_port();
    char taken[64];
    snprintf(taken, sizeof taken, "127.0.0.1:%d", p3);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p3) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (lfd >= 0 && bind(lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(lfd, 1) == 0) {
        const char *busy[] = { "--metrics-listen", taken, NULL };
        expect_no_start("taken", busy, "cannot serve HTTP there");
    }
    if (lfd >= 0)
        close(lfd);

    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (failed == 0 && system(rm) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("test_metrics: %s (%d failure(s))\n", failed ? "FAILED" : "ok", failed);
    return failed ? 1 : 0;
}
