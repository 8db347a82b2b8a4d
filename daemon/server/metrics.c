/* metrics.c — the operators' counters and the Prometheus endpoint (see
 * metrics.h). Counters and gauges are atomics written by the main thread
 * and read by libmicrohttpd's thread; the handshake counts are the gate's
 * and the ZAP handler's own atomics, read where a reply or a scrape is
 * built. Nothing on the counters locks; the endpoint's connection
 * deadlines (a table under a mutex, a thread that closes overdue ones)
 * are the HTTP side's own.
 */
#include "server_impl.h"
#include "metrics.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#ifdef WEFT_HAVE_MHD
#include <microhttpd.h>
#endif

#include "cluster/cluster.h"
#include "errf.h"

/* Wire codes are below 100 (wf_status_on_wire). */
#define N_CODES 100
/* Op slots: the wire ops 1..10 (WF_OP_HELLO .. WF_OP_END_SESSION); 0
 * for anything else. */
#define N_OPS 11
/* Ops with a latency histogram: attention, forward. */
#define N_JOB_OPS 2

/* Job latency buckets (seconds) */
static const double lat_le[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300 };
#define N_LAT (sizeof lat_le / sizeof lat_le[0])
/* Reconfiguration duration buckets (seconds) */
static const double rec_le[] = { 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
                                 60, 120 };
#define N_REC (sizeof rec_le / sizeof rec_le[0])

/* The endpoint's bounds */
#define HTTP_MAX_CONNECTIONS 32
#define HTTP_PER_ADDRESS 4
#define HTTP_TIMEOUT_S 10
#define HTTP_MEMORY_LIMIT (32 * 1024)
/* libmicrohttpd's warnings logged per window (each peer that closes
 * mid-request causes one); the rest counted */
#define LOG_LINES_BURST 20
#define LOG_LINES_WINDOW_S 60

typedef atomic_uint_fast64_t counter_t;

typedef struct histogram {
    counter_t bucket[N_LAT + 1];   /* per bucket (not cumulative); last: +Inf */
    counter_t sum_us;
    counter_t max_us;
} histogram_t;

typedef struct device_gauges {
    char name[32];                 /* set before the HTTP thread starts */
    uint64_t budget;               /* bytes; set before it starts */
    counter_t used;                /* bytes reserved by jobs */
} device_gauges_t;

/* An open HTTP connection and when it must be closed (the whole-
 * connection deadline: libmicrohttpd's own timeout is an idle one, which
 * each byte a client trickles restarts). */
typedef struct http_conn {
    bool used;
    int fd;
    uint64_t deadline_us;          /* UINT64_MAX once shut down */
} http_conn_t;

/* The deadline keeper: the open connections (libmicrohttpd's
 * notifications fill the table) and a thread that shuts each down at its
 * deadline; libmicrohttpd then sees the end of the stream and closes it. */
typedef struct reaper {
    pthread_mutex_t mu;
    pthread_cond_t cv;             /* CLOCK_MONOTONIC */
    pthread_t tid;
    bool running, stop;
    uint64_t life_us;              /* metrics_connection_ms */
    http_conn_t conn[HTTP_MAX_CONNECTIONS];
} reaper_t;

struct srv_metrics {
    /* immutable once the endpoint runs */
    char backend[16];
    uint64_t t_start_us;
    uint32_t n_devices;
    device_gauges_t dev[WF_SETTINGS_MAX_DEVICES];
    void *httpd;                   /* struct MHD_Daemon (WEFT_HAVE_MHD) */
    reaper_t reap;                 /* its connections' deadlines */
    unsigned port;
    wf_log_t *log;
    wf_log_limit_t mhd_lines;      /* libmicrohttpd's complaints (a peer
                                      closing mid-request causes one) */
    wf_gate_t *gate;               /* borrowed: the client plane (NULL: none);
                                      its counters are atomics, any thread */
    wf_zap_t *zap;                 /* borrowed: the ZAP handler (NULL: none),
                                      likewise */
    /* counters (main thread writes) */
    counter_t refused[N_OPS][N_CODES];
    counter_t failed[N_OPS][N_CODES];
    counter_t served[N_OPS];
    histogram_t latency[N_JOB_OPS];
    counter_t reconf_ok, reconf_failed;
    counter_t reload_ok, reload_failed;
    counter_t cache_computed, cache_reused; /* forwards of sessions */
    counter_t reconf_bucket[N_REC + 1];
    counter_t reconf_sum_us;
    /* gauges (srv_metrics_refresh) */
    counter_t queued, running, capacity, epoch, reconfiguring, world_size;
    counter_t resident;            /* bytes of every device held by model shards */
    counter_t nodes_lost;
    counter_t scrapes;             /* GET /metrics answered */
};

static const char *const op_names[N_OPS] = {
    "other", "hello", "status", "attention", "reconfigure", "load_model",
    "unload_model", "list_models", "forward", "cancel", "end_session"
};
_Static_assert(WF_OP_END_SESSION == N_OPS - 1, "an op slot and a label per wire op");

static uint32_t op_slot(uint32_t op)
{
    return op < N_OPS ? op : 0;
}

/* attention 0, forward 1, others -1 */
static int job_slot(uint32_t op)
{
    return op == WF_OP_ATTENTION ? 0 : op == WF_OP_FORWARD ? 1 : -1;
}

static uint32_t code_slot(wf_status_t st)
{
    uint32_t c = (uint32_t)wf_status_on_wire(st);
    return c < N_CODES ? c : (uint32_t)WF_E_INTERNAL;
}

static void inc(counter_t *c, uint64_t by)
{
    atomic_fetch_add_explicit(c, by, memory_order_relaxed);
}

static void set(counter_t *c, uint64_t v)
{
    atomic_store_explicit(c, v, memory_order_relaxed);
}

static uint64_t get(const counter_t *c)
{
    return atomic_load_explicit(c, memory_order_relaxed);
}

/* ------------------------------------------------------------------ */
/* counting (main thread) */

void srv_metrics_refused(wf_server_t *srv, uint32_t op, wf_status_t st)
{
    if (srv->metrics)
        inc(&srv->metrics->refused[op_slot(op)][code_slot(st)], 1);
}

void srv_metrics_failed(wf_server_t *srv, uint32_t op, wf_status_t st)
{
    if (srv->metrics)
        inc(&srv->metrics->failed[op_slot(op)][code_slot(st)], 1);
}

void srv_metrics_served(wf_server_t *srv, uint32_t op, uint64_t latency_us)
{
    srv_metrics_t *m = srv->metrics;
    if (!m)
        return;
    inc(&m->served[op_slot(op)], 1);
    int j = job_slot(op);
    if (j < 0)
        return;
    histogram_t *h = &m->latency[j];
    size_t b = 0;
    while (b < N_LAT && (double)latency_us > lat_le[b] * 1e6)
        b++;
    inc(&h->bucket[b], 1);
    inc(&h->sum_us, latency_us);
    if (latency_us > get(&h->max_us))      /* one writer: no CAS needed */
        set(&h->max_us, latency_us);
}

void srv_metrics_reloaded(wf_server_t *srv, bool ok)
{
    srv_metrics_t *m = srv->metrics;
    if (m)
        inc(ok ? &m->reload_ok : &m->reload_failed, 1);
}

void srv_metrics_cache(wf_server_t *srv, bool reused)
{
    srv_metrics_t *m = srv->metrics;
    if (m)
        inc(reused ? &m->cache_reused : &m->cache_computed, 1);
}

void srv_metrics_reconfigured(wf_server_t *srv, bool ok, uint64_t dur_us)
{
    srv_metrics_t *m = srv->metrics;
    if (!m)
        return;
    inc(ok ? &m->reconf_ok : &m->reconf_failed, 1);
    size_t b = 0;
    while (b < N_REC && (double)dur_us > rec_le[b] * 1e6)
        b++;
    inc(&m->reconf_bucket[b], 1);
    inc(&m->reconf_sum_us, dur_us);
}

void srv_metrics_refresh(wf_server_t *srv)
{
    srv_metrics_t *m = srv->metrics;
    if (!m)
        return;
    const wf_sched_t *s = &srv->sched;
    set(&m->queued, s->depth);
    set(&m->running, s->in_flight);
    set(&m->capacity, s->capacity);
    set(&m->epoch, s->mesh.epoch);
    set(&m->reconfiguring, srv->reconf.active ? 1 : 0);
    set(&m->world_size, (uint64_t)s->mesh.world_size);
    set(&m->resident, s->resident);
    uint32_t first = srv->world ? wf_world_first_rank(srv->world) : 0;
    for (uint32_t d = 0; d < m->n_devices; d++) {
        uint32_t g = d + first;
        set(&m->dev[d].used, g < WF_SETTINGS_MAX_DEVICES ? s->used[g] : 0);
    }
    if (srv->world)
        set(&m->nodes_lost, wf_cluster_nodes_lost(wf_world_cluster(srv->world)));
}

/* Handshakes refused and admitted since start: the client plane's (the
 * gate's thread counts them) and the cluster plane's (the ZAP handler's
 * thread), read now rather than copied once per main-loop turn, so that
 * a status reply or a scrape counts every refusal made before it, also
 * while the main loop waits. Any thread. */
static void handshakes(const srv_metrics_t *m, uint64_t *ret_refused,
                       uint64_t *ret_admitted)
{
    wf_gate_stats_t gs;
    wf_gate_stats(m->gate, &gs);             /* zeroes for NULL */
    *ret_refused = gs.refused + (m->zap ? wf_zap_refused(m->zap) : 0);
    *ret_admitted = gs.admitted + (m->zap ? wf_zap_admitted(m->zap) : 0);
}

/* ------------------------------------------------------------------ */
/* quantiles for status */

/* The q-quantile of histogram h in microseconds, interpolated linearly
 * inside its bucket (as Prometheus' histogram_quantile); the +Inf bucket
 * and the top of each bucket are capped by the largest value seen. */
static uint64_t quantile_us(const histogram_t *h, double q)
{
    uint64_t n[N_LAT + 1], total = 0;
    for (size_t b = 0; b <= N_LAT; b++)
        total += n[b] = get(&h->bucket[b]);
    if (total == 0)
        return 0;
    double max = (double)get(&h->max_us);
    double rank = q * (double)total, seen = 0;
    for (size_t b = 0; b <= N_LAT; b++) {
        if (n[b] == 0 || seen + (double)n[b] < rank) {
            seen += (double)n[b];
            continue;
        }
        double lo = b == 0 ? 0.0 : lat_le[b - 1] * 1e6;
        double hi = b == N_LAT ? max : lat_le[b] * 1e6;
        if (hi > max)
            hi = max;
        if (lo > hi)
            lo = hi;
        return (uint64_t)(lo + (hi - lo) * (rank - seen) / (double)n[b]);
    }
    return (uint64_t)max;
}

void srv_metrics_fill_status(const wf_server_t *srv, wf_status_info_t *si)
{
    const srv_metrics_t *m = srv->metrics;
    wf_status_counters_t *c = &si->counters;
    memset(c, 0, sizeof *c);
    if (!m)
        return;
    c->present = 1;
    for (uint32_t code = 0; code < N_CODES; code++) {
        uint64_t r = 0, f = 0;
        for (uint32_t op = 0; op < N_OPS; op++) {
            r += get(&m->refused[op][code]);
            f += get(&m->failed[op][code]);
        }
        if (r && c->refused_count < WF_STATUS_MAX_CODES)
            c->refused[c->refused_count++] = (wf_code_count_t){ code, r };
        if (f && c->failed_count < WF_STATUS_MAX_CODES)
            c->failed[c->failed_count++] = (wf_code_count_t){ code, f };
    }
    static const uint32_t job_ops[N_JOB_OPS] = { WF_OP_ATTENTION, WF_OP_FORWARD };
    for (int j = 0; j < N_JOB_OPS; j++) {
        uint32_t op = job_ops[j];
        wf_op_counters_t *o = &c->ops[c->op_count++];
        snprintf(o->op, sizeof o->op, "%s", op_names[op]);
        o->served = get(&m->served[op]);
        for (uint32_t code = 0; code < N_CODES; code++)
            o->failed += get(&m->failed[op][code]);
        o->p50_us = quantile_us(&m->latency[j], 0.50);
        o->p99_us = quantile_us(&m->latency[j], 0.99);
        o->max_us = get(&m->latency[j].max_us);
    }
    c->reconfigurations = get(&m->reconf_ok);
    c->reconfigurations_failed = get(&m->reconf_failed);
    c->reconfigure_ms = get(&m->reconf_sum_us) / 1000;
    c->nodes_lost = get(&m->nodes_lost);
    handshakes(m, &c->handshakes_refused, &c->handshakes_admitted);
}

/* ------------------------------------------------------------------ */
/* the exposition text (any thread) */

typedef struct text {
    char *p;
    size_t len, cap;
    bool oom;
} text_t;

__attribute__((format(printf, 2, 3)))
static void put(text_t *t, const char *fmt, ...)
{
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap * 2 + (size_t)n;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

static void head(text_t *t, const char *name, const char *type, const char *help)
{
    put(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void histogram_put(text_t *t, const char *name, const char *labels,
                          const counter_t *bucket, const double *le, size_t n_le,
                          uint64_t sum_us)
{
    uint64_t cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (size_t b = 0; b <= n_le; b++) {
        cum += get(&bucket[b]);
        if (b < n_le)
            put(t, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep, le[b], cum);
        else
            put(t, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep, cum);
    }
    if (labels[0]) {
        put(t, "%s_sum{%s} %.6f\n", name, labels, (double)sum_us / 1e6);
        put(t, "%s_count{%s} %" PRIu64 "\n", name, labels, cum);
    } else {
        put(t, "%s_sum %.6f\n", name, (double)sum_us / 1e6);
        put(t, "%s_count %" PRIu64 "\n", name, cum);
    }
}

/* per (op, code) counter table: only the non-zero entries */
static void by_code_put(text_t *t, const char *name, counter_t (*tab)[N_CODES])
{
    for (uint32_t op = 0; op < N_OPS; op++)
        for (uint32_t code = 0; code < N_CODES; code++) {
            uint64_t v = get(&tab[op][code]);
            if (v)
                put(t, "%s{op=\"%s\",code=\"%s\"} %" PRIu64 "\n", name, op_names[op],
                    wf_status_name((wf_status_t)code), v);
        }
}

char *srv_metrics_render(srv_metrics_t *m, size_t *len)
{
    text_t t = { malloc(8192), 0, 8192, false };
    if (!t.p)
        return NULL;
    t.p[0] = '\0';
    head(&t, "weft_build_info", "gauge", "weftd's version and backend (value 1)");
    put(&t, "weft_build_info{version=\"%s\",backend=\"%s\"} 1\n", WEFT_VERSION, m->backend);
    head(&t, "weft_uptime_seconds", "gauge", "seconds since weftd started");
    put(&t, "weft_uptime_seconds %.3f\n", (double)(wf_now_usec() - m->t_start_us) / 1e6);

    head(&t, "weft_jobs_queued", "gauge", "jobs admitted and not yet dispatched");
    put(&t, "weft_jobs_queued %" PRIu64 "\n", get(&m->queued));
    head(&t, "weft_jobs_running", "gauge", "jobs dispatched to devices and not finished");
    put(&t, "weft_jobs_running %" PRIu64 "\n", get(&m->running));
    head(&t, "weft_queue_capacity", "gauge", "bound on queued jobs (queue_capacity)");
    put(&t, "weft_queue_capacity %" PRIu64 "\n", get(&m->capacity));

    head(&t, "weft_jobs_served_total", "counter", "jobs answered OK, by op");
    for (uint32_t op = 0; op < N_OPS; op++)
        if (job_slot(op) >= 0 || get(&m->served[op]))
            put(&t, "weft_jobs_served_total{op=\"%s\"} %" PRIu64 "\n", op_names[op],
                get(&m->served[op]));
    head(&t, "weft_requests_failed_total", "counter", "requests taken (jobs admitted, "
         "reconfigurations, model loads) that then failed, by op and status code");
    by_code_put(&t, "weft_requests_failed_total", m->failed);
    head(&t, "weft_requests_refused_total", "counter", "requests refused before any "
         "work, by op and status code");
    by_code_put(&t, "weft_requests_refused_total", m->refused);

    head(&t, "weft_job_latency_seconds", "histogram", "served jobs: receipt to the end "
         "of compute, by op");
    for (uint32_t j = 0; j < N_JOB_OPS; j++) {
        char labels[32];
        snprintf(labels, sizeof labels, "op=\"%s\"", j == 0 ? "attention" : "forward");
        histogram_put(&t, "weft_job_latency_seconds", labels, m->latency[j].bucket,
                      lat_le, N_LAT, get(&m->latency[j].sum_us));
    }

    head(&t, "weft_device_memory_budget_bytes", "gauge", "bytes each device may use");
    for (uint32_t d = 0; d < m->n_devices; d++)
        put(&t, "weft_device_memory_budget_bytes{device=\"%s\"} %" PRIu64 "\n",
            m->dev[d].name, m->dev[d].budget);
    head(&t, "weft_device_memory_used_bytes", "gauge", "bytes reserved by running jobs "
         "on each device");
    for (uint32_t d = 0; d < m->n_devices; d++)
        put(&t, "weft_device_memory_used_bytes{device=\"%s\"} %" PRIu64 "\n",
            m->dev[d].name, get(&m->dev[d].used));
    head(&t, "weft_device_model_bytes", "gauge", "bytes of each device held by resident "
         "model shards");
    for (uint32_t d = 0; d < m->n_devices; d++)
        put(&t, "weft_device_model_bytes{device=\"%s\"} %" PRIu64 "\n", m->dev[d].name,
            get(&m->resident));

    head(&t, "weft_reconfigurations_total", "counter", "hot reconfigurations ended, by "
         "result");
    put(&t, "weft_reconfigurations_total{result=\"ok\"} %" PRIu64 "\n", get(&m->reconf_ok));
    put(&t, "weft_reconfigurations_total{result=\"failed\"} %" PRIu64 "\n",
        get(&m->reconf_failed));
    head(&t, "weft_reloads_total", "counter", "reloads (SIGHUP) ended, by result: "
         "failed = some of it did not take effect (the previous settings or keys "
         "stay)");
    put(&t, "weft_reloads_total{result=\"ok\"} %" PRIu64 "\n", get(&m->reload_ok));
    put(&t, "weft_reloads_total{result=\"failed\"} %" PRIu64 "\n",
        get(&m->reload_failed));
    head(&t, "weft_forward_cache_total", "counter", "forwards of denoising sessions by "
         "what the first-block cache did: computed = every block run, reused = the "
         "blocks after the first replaced by the session's cached residual");
    put(&t, "weft_forward_cache_total{result=\"computed\"} %" PRIu64 "\n",
        get(&m->cache_computed));
    put(&t, "weft_forward_cache_total{result=\"reused\"} %" PRIu64 "\n",
        get(&m->cache_reused));
    head(&t, "weft_reconfiguration_duration_seconds", "histogram", "hot "
         "reconfigurations: validated to installed (or failed)");
    histogram_put(&t, "weft_reconfiguration_duration_seconds", "", m->reconf_bucket,
                  rec_le, N_REC, get(&m->reconf_sum_us));
    head(&t, "weft_reconfiguring", "gauge", "1 while a reconfiguration runs");
    put(&t, "weft_reconfiguring %" PRIu64 "\n", get(&m->reconfiguring));
    head(&t, "weft_mesh_epoch", "gauge", "epoch of the mesh in force");
    put(&t, "weft_mesh_epoch %" PRIu64 "\n", get(&m->epoch));

    head(&t, "weft_world_size", "gauge", "ranks of the mesh in force (cluster: of the "
         "world)");
    put(&t, "weft_world_size %" PRIu64 "\n", get(&m->world_size));
    head(&t, "weft_cluster_nodes_lost_total", "counter", "cluster coordinator: nodes "
         "lost since start");
    put(&t, "weft_cluster_nodes_lost_total %" PRIu64 "\n", get(&m->nodes_lost));
    uint64_t hs_refused, hs_admitted;
    handshakes(m, &hs_refused, &hs_admitted);
    head(&t, "weft_handshakes_refused_total", "counter", "connections refused before "
         "their handshake ended (client and cluster planes)");
    put(&t, "weft_handshakes_refused_total %" PRIu64 "\n", hs_refused);
    head(&t, "weft_handshakes_admitted_total", "counter", "CURVE handshakes admitted");
    put(&t, "weft_handshakes_admitted_total %" PRIu64 "\n", hs_admitted);
    head(&t, "weft_metrics_scrapes_total", "counter", "GET /metrics answered");
    put(&t, "weft_metrics_scrapes_total %" PRIu64 "\n", get(&m->scrapes));
    if (t.oom) {
        free(t.p);
        return NULL;
    }
    *len = t.len;
    return t.p;
}

/* ------------------------------------------------------------------ */
/* the HTTP endpoint (libmicrohttpd's thread) */

#ifdef WEFT_HAVE_MHD

static enum MHD_Result respond(struct MHD_Connection *con, unsigned code,
                               const char *body, const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response(con, code, r);
    MHD_destroy_response(r);
    return rc;
}

/* MHD_get_connection_values' iterator over the request's headers:
 * counts its Host lines in *cls. */
static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value)
{
    (void)kind;
    (void)value;
    if (key && strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        (*(unsigned *)cls)++;
    return MHD_YES;
}

/* Answered on the first call, before any body is read: a request with a
 * body gets its answer and the connection is closed after it. A request
 * of any version but HTTP/1.0 (1.1, or a later 1.x served as 1.1) needs
 * exactly one Host header line (RFC 9112 section 3.2): without it, or
 * with several, 400 whatever the path. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *con,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    srv_metrics_t *m = cls;
    if (strcmp(version, MHD_HTTP_VERSION_1_0) != 0) {
        unsigned hosts = 0;
        MHD_get_connection_values(con, MHD_HEADER_KIND, count_host, &hosts);
        if (hosts != 1)
            return respond(con, MHD_HTTP_BAD_REQUEST,
                           "bad request: an HTTP/1.1 request needs one Host header\n", NULL);
    }
    bool get_ = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    bool head_ = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    if (strcmp(url, "/metrics") != 0)
        return respond(con, MHD_HTTP_NOT_FOUND, "not found: GET /metrics\n", NULL);
    if (!get_ && !head_)
        return respond(con, MHD_HTTP_METHOD_NOT_ALLOWED,
                       "method not allowed: GET /metrics\n", "GET, HEAD");
    size_t len = 0;
    char *body = srv_metrics_render(m, &len);
    if (!body)
        return respond(con, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response(con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    inc(&m->scrapes, 1);
    return rc;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    srv_metrics_t *m = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    wf_log_limited(m->log, &m->mhd_lines, WF_LOG_WARNING, "metrics: %s", line);
}


static uint64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* libmicrohttpd's connection notifications: a slot of the table per open
 * connection (its index + 1 in *socket_context). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    reaper_t *r = &((srv_metrics_t *)cls)->reap;
    pthread_mutex_lock(&r->mu);
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        for (size_t i = 0; ci && i < HTTP_MAX_CONNECTIONS; i++)
            if (!r->conn[i].used) {
                r->conn[i] = (http_conn_t){ true, ci->connect_fd, mono_us() + r->life_us };
                *socket_context = (void *)(uintptr_t)(i + 1);
                pthread_cond_signal(&r->cv);
                break;
            }
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        uintptr_t i = (uintptr_t)*socket_context;
        if (i >= 1 && i <= HTTP_MAX_CONNECTIONS)
            r->conn[i - 1].used = false;
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&r->mu);
}

/* The deadline keeper's thread: shuts each connection down at its
 * deadline (under the mutex, so the connection's close, which removes it
 * from the table first, cannot race the fd away). */
static void *reaper_main(void *arg)
{
    reaper_t *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        uint64_t now = mono_us(), next = UINT64_MAX;
        for (size_t i = 0; i < HTTP_MAX_CONNECTIONS; i++) {
            http_conn_t *c = &r->conn[i];
            if (!c->used || c->deadline_us == UINT64_MAX)
                continue;
            if (c->deadline_us <= now) {
                shutdown(c->fd, SHUT_RDWR);
                c->deadline_us = UINT64_MAX;
            } else if (c->deadline_us < next) {
                next = c->deadline_us;
            }
        }
        if (next == UINT64_MAX) {
            pthread_cond_wait(&r->cv, &r->mu);
        } else {
            struct timespec ts = { (time_t)(next / 1000000u), (long)(next % 1000000u) * 1000 };
            pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        }
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

static bool reaper_start(reaper_t *r, uint32_t life_ms)
{
    pthread_condattr_t ca;
    memset(r, 0, sizeof *r);
    r->life_us = (uint64_t)life_ms * 1000u;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    bool ok = pthread_mutex_init(&r->mu, NULL) == 0 && pthread_cond_init(&r->cv, &ca) == 0 &&
              pthread_create(&r->tid, NULL, reaper_main, r) == 0;
    pthread_condattr_destroy(&ca);
    r->running = ok;
    return ok;
}

static void reaper_stop(reaper_t *r)
{
    if (!r->running)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->tid, NULL);
    r->running = false;
}

static void *http_start(srv_metrics_t *m, const struct sockaddr_storage *ss)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ss->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, m,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, m,     /* first: it says so */
        MHD_OPTION_SOCK_ADDR, (const struct sockaddr *)ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int)HTTP_MAX_CONNECTIONS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)HTTP_PER_ADDRESS,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)HTTP_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_MEMORY_LIMIT,
        MHD_OPTION_END);
    if (!d)
        return NULL;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : 0;
    return d;
}

/* libmicrohttpd stopped first: its last close notifications need the
 * table, whose thread then goes. */
static void http_stop(srv_metrics_t *m)
{
    if (m->httpd)
        MHD_stop_daemon(m->httpd);
    m->httpd = NULL;
    reaper_stop(&m->reap);
    pthread_mutex_destroy(&m->reap.mu);
    pthread_cond_destroy(&m->reap.cv);
}
#endif /* WEFT_HAVE_MHD */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return true;
        return IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127;
    }
    return false;
}

/* metrics_listen (HOST:PORT, [V6]:PORT) to an address; message in err. */
static bool resolve(const char *hostport, struct sockaddr_storage *ss, socklen_t *sl,
                    char *err, size_t err_len)
{
    char host[WF_SETTINGS_NAME_MAX];
    const char *colon = strrchr(hostport, ':');
    size_t hl = colon ? (size_t)(colon - hostport) : 0;
    if (!colon || hl == 0 || hl >= sizeof host) {
        snprintf(err, err_len, "expected HOST:PORT");
        return false;
    }
    memcpy(host, hostport, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl >= 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV | AI_PASSIVE };
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, err_len, "cannot resolve %s: %s", host, gai_strerror(rc));
        return false;
    }
    /* localhost may resolve to ::1 and 127.0.0.1: the first one it gives */
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *sl = res->ai_addrlen;
    freeaddrinfo(res);
    return true;
}

unsigned srv_metrics_port(const srv_metrics_t *m)
{
    return m ? m->port : 0;
}

wf_status_t srv_metrics_start(wf_server_t *srv)
{
    srv_metrics_t *m = calloc(1, sizeof *m);
    if (!m) {
        wf_log(srv->log, WF_LOG_ERR, "metrics: out of memory");
        return WF_E_INTERNAL;
    }
    snprintf(m->backend, sizeof m->backend, "%s", srv->ops->name);
    m->t_start_us = srv->t_start_us;
    m->log = srv->log;
    wf_log_limit_init(&m->mhd_lines, "metrics endpoint warnings", LOG_LINES_BURST,
                      LOG_LINES_WINDOW_S);
    /* both outlive the endpoint: wf_server_destroy stops it first */
    m->gate = srv->gate;
    m->zap = srv->zap;
    m->n_devices = srv->n_workers;
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        size_t n = strnlen(srv->workers[d].name, sizeof m->dev[d].name - 1);
        memcpy(m->dev[d].name, srv->workers[d].name, n);
        /* a label value: no quote, backslash or newline in it */
        for (size_t i = 0; i < n; i++)
            if (m->dev[d].name[i] == '"' || m->dev[d].name[i] == '\\' ||
                (unsigned char)m->dev[d].name[i] < 0x20)
                m->dev[d].name[i] = '_';
        m->dev[d].budget = srv->workers[d].memory_total;
    }
    srv->metrics = m;
    srv_metrics_refresh(srv);
    const char *listen = srv->settings.metrics_listen;
    if (!listen[0])
        return WF_OK;
    char q[WF_QUOTE_MAX], err[160];
    wf_quote(q, listen);
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    memset(&ss, 0, sizeof ss);
    if (!resolve(listen, &ss, &sl, err, sizeof err)) {
        wf_log(srv->log, WF_LOG_ERR, "metrics_listen %s: %s", q, err);
        return WF_E_BAD_ARGUMENT;
    }
    if (!is_loopback((const struct sockaddr *)&ss) && !srv->settings.allow_anonymous) {
        wf_log(srv->log, WF_LOG_ERR, "metrics_listen %s is not a loopback address: "
               "the metrics tell anyone who reaches them how loaded this daemon is; "
               "set allow_anonymous = true to serve them there anyway", q);
        return WF_E_BAD_ARGUMENT;
    }
#ifdef WEFT_HAVE_MHD
    if (!reaper_start(&m->reap, srv->settings.metrics_connection_ms)) {
        wf_log(srv->log, WF_LOG_ERR, "metrics: cannot start its connection deadlines");
        return WF_E_INTERNAL;
    }
    m->httpd = http_start(m, &ss);
    if (!m->httpd) {
        wf_log(srv->log, WF_LOG_ERR, "metrics_listen %s: cannot serve HTTP there "
               "(address in use or not ours?)", q);
        return WF_E_INTERNAL;
    }
#else
    wf_log(srv->log, WF_LOG_ERR, "metrics_listen %s: this weftd was built without "
           "libmicrohttpd (Debian libmicrohttpd-dev): it cannot serve metrics", q);
    return WF_E_BAD_ARGUMENT;
#endif
    wf_log(srv->log, WF_LOG_INFO, "metrics: serving http://%s/metrics (port %u)", q,
           m->port);
    return WF_OK;
}

void srv_metrics_stop(wf_server_t *srv)
{
    srv_metrics_t *m = srv->metrics;
    if (!m)
        return;
#ifdef WEFT_HAVE_MHD
    if (m->reap.running)
        http_stop(m);
#endif
    srv->metrics = NULL;
    wf_log_limit_destroy(&m->mhd_lines);
    free(m);
}
