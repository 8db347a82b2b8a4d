/* metrics.h — private to daemon/server/: the daemon's counters for
 * operators, and the Prometheus endpoint that serves them.
 *
 * The counters are counted where the events happen, on the main thread:
 * replies.c (jobs served, failed and refused, by op and status code, and
 * the jobs' latency), reconfigure.c (reconfigurations and their
 * durations). The gauges (queue depth, jobs running, device memory, the
 * mesh, the cluster) are copied from the main thread's own state by
 * srv_metrics_refresh once per turn of the poll loop. The handshake
 * counts are counted by the threads that refuse and admit (the gate's,
 * the ZAP handler's) and read from them when a status reply or a scrape
 * is built, so neither waits for the main loop to wake. Every value the
 * HTTP thread reads is an atomic (relaxed: each value is exact, a scrape
 * is not one instant across values), and the rest (version, backend,
 * device names and budgets, the gate and ZAP handles) is written before
 * that thread starts and never again: the HTTP thread never touches
 * wf_server_t and never waits for the main loop.
 *
 * The endpoint (setting metrics_listen, HOST:PORT; "" = off) is served
 * by libmicrohttpd on its own internal thread: GET (or HEAD) /metrics
 * answers the text exposition format 0.0.4; any other path 404, any
 * other method 405; bodies are never read; at most 8 connections, 10 s
 * of idleness each. Like the client plane's protected mode, an address
 * other than loopback is refused at start unless allow_anonymous is set
 * (the figures tell anyone how loaded the daemon is).
 *
 * status (requests.c) reports the same counters (srv_metrics_fill_status:
 * the `counters` map of PROTOCOL.md section 5).
 */
#ifndef WF_SERVER_METRICS_H
#define WF_SERVER_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "weft.h"

typedef struct wf_server wf_server_t;
typedef struct srv_metrics srv_metrics_t;

/* Allocate srv->metrics (zeroed counters, names of the devices): once the
 * workers, the gate and the ZAP handler are started. Then, when
 * metrics_listen is set, check the address (loopback, or
 * allow_anonymous) and start the endpoint. Logs what failed; an error
 * means weftd must not start. */
wf_status_t srv_metrics_start(wf_server_t *srv);

/* Stop the endpoint (joins its thread) and free srv->metrics. Accepts a
 * server without them. */
void srv_metrics_stop(wf_server_t *srv);

/* Copy the gauges from the main thread's state (once per loop turn). */
void srv_metrics_refresh(wf_server_t *srv);

/* Counters (main thread). A reply to `op` with status st: a request
 * refused before any work (srv_reply_error); a request or job that was
 * taken and then failed (srv_reply_fail, srv_reply_job); a job served,
 * with its latency from receipt to the end of its compute. */
void srv_metrics_refused(wf_server_t *srv, uint32_t op, wf_status_t st);
void srv_metrics_failed(wf_server_t *srv, uint32_t op, wf_status_t st);
void srv_metrics_served(wf_server_t *srv, uint32_t op, uint64_t latency_us);
/* A reconfiguration ended (ok or not) after dur_us since it started. */
void srv_metrics_reconfigured(wf_server_t *srv, bool ok, uint64_t dur_us);

/* A reload (SIGHUP) ended: ok, or some of it failed (the previous settings
 * or keys stay). */
void srv_metrics_reloaded(wf_server_t *srv, bool ok);

/* A forward of a denoising session was served: reused its cache or not. */
void srv_metrics_cache(wf_server_t *srv, bool reused);

/* The counters into a status reply (si->has_counters = 1). */
void srv_metrics_fill_status(const wf_server_t *srv, wf_status_info_t *si);

/* The exposition text (the body of GET /metrics) into a malloc'd,
 * NUL-terminated buffer; NULL when out of memory. Any thread. */
char *srv_metrics_render(srv_metrics_t *m, size_t *len);

/* The port the endpoint listens on (0: none); for the log and tests. */
unsigned srv_metrics_port(const srv_metrics_t *m);

#endif /* WF_SERVER_METRICS_H */
