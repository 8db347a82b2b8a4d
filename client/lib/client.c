/* client.c — libweft: one ZeroMQ DEALER connection to weftd.
 *
 * A request is [msgpack header, tensor frames...]; the tensor frames point
 * at the caller's buffers (zmq_msg_init_data, no copy) and ZeroMQ's I/O
 * thread tells us through a free callback when it no longer reads them.
 * Replies carry the request id and are matched to the jobs still waiting;
 * several jobs may be in flight on one connection and their replies may
 * come back in any order. A reply for a job that was destroyed is dropped.
 *
 * Two kinds of calls: jobs with tensors (attention, forward), whose output
 * frames are checked against the caller's tensors and copied into them,
 * and simple calls without tensors (hello, status, reconfigure and the
 * resident-model calls load / unload / list), waited for at once.
 *
 * The socket has a monitor, read by every call that waits and before
 * every send; its events wake a waiting call at once. A request is sent
 * only while a connection is up (its handshake succeeded, and no close
 * since), so nothing is queued while no daemon is connected: a send
 * waits for a connection (up to the timeout) instead of leaving borrowed
 * buffers in a queue that may never drain. Not ZMQ_IMMEDIATE, which does
 * the same inside ZeroMQ but drops the replies that arrived just before
 * a close and are not read yet.
 *   - a connection that was up closes (the daemon stopped, or the
 *     connection was reset: ZMQ_EVENT_DISCONNECTED): the replies that came
 *     before the close are taken, every request still waiting fails with
 *     WF_E_CONN_CLOSED, and the socket is replaced (socket_reset: ZeroMQ
 *     releases the frames it still held, the requests it still queued
 *     never go to a later connection, and the old socket's events are
 *     gone). Until a new connection is up, a send waits for the next
 *     attempt to reconnect: sent if it succeeds, WF_E_CONN_CLOSED (nothing
 *     sent) as soon as one fails (ZMQ_EVENT_CONNECT_RETRIED). A client
 *     that has never had a connection waits for one up to its timeout (a
 *     daemon may start after it), or its connect timeout when one is set
 *     (wf_client_set_connect_timeout: WF_E_CONNECT, naming the endpoint). A request sent in the instant the
 *     connection closes, before the close is read here, stays queued in
 *     the old socket until then: were a new daemon up within ZeroMQ's
 *     reconnect interval (10 ms) while the caller makes no call, it could
 *     reach it, and still be reported WF_E_CONN_CLOSED;
 *   - tcp:// endpoints may use CURVE (the keys from the arguments of
 *     wf_client_connect_curve or the environment, proto/keys.h files): a
 *     refused handshake becomes WF_E_AUTH (it otherwise looks like a
 *     daemon that is not there).
 *
 * Not here: the wire encoding (proto/), logging (a library never logs;
 * errors go to wf_client_last_error / wf_job_error); the resident-model
 * calls (models.c, over the helpers of client_impl.h).
 */
#include "client_impl.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

/* The op each kind of job sends, and expects back. */
static const uint32_t op_of[] = {
    [JOB_HELLO] = WF_OP_HELLO,
    [JOB_STATUS] = WF_OP_STATUS,
    [JOB_ATTENTION] = WF_OP_ATTENTION,
    [JOB_RECONFIGURE] = WF_OP_RECONFIGURE,
    [JOB_LOAD_MODEL] = WF_OP_LOAD_MODEL,
    [JOB_UNLOAD_MODEL] = WF_OP_UNLOAD_MODEL,
    [JOB_LIST_MODELS] = WF_OP_LIST_MODELS,
    [JOB_FORWARD] = WF_OP_FORWARD,
    [JOB_CANCEL] = WF_OP_CANCEL,
    [JOB_END_SESSION] = WF_OP_END_SESSION,
};

/* ---- small helpers ---------------------------------------------------- */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left before `deadline` (-1: none), for zmq_poll. */
static long remaining_ms(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - now_ms();
    return left > 0 ? (long)left : 0;
}

int64_t wfc_deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

void wfc_job_link(wf_client_t *c, wf_job_t *job)
{
    job->prev = NULL;
    job->next = c->pending;
    if (c->pending)
        c->pending->prev = job;
    c->pending = job;
    job->linked = true;
}

static void job_unlink(wf_client_t *c, wf_job_t *job)
{
    if (!job->linked)
        return;
    if (job->prev)
        job->prev->next = job->next;
    else
        c->pending = job->next;
    if (job->next)
        job->next->prev = job->prev;
    job->prev = job->next = NULL;
    job->linked = false;
}

static wf_job_t *job_find(wf_client_t *c, uint64_t id)
{
    for (wf_job_t *j = c->pending; j; j = j->next)
        if (j->id == id)
            return j;
    return NULL;
}

/* The job's final status is known: take it off the waiting list. */
static void job_finish(wf_client_t *c, wf_job_t *job)
{
    job_unlink(c, job);
    job->replied = true;
}

/* ZeroMQ's free callback of a zero-copy frame; runs on the I/O thread.
 * The decrement happens under the client's mutex so that a waiter that
 * sees zero (and then frees the job) cannot race with this function still
 * touching the job. */
static void frame_released(void *data, void *hint)
{
    (void)data;
    wf_job_t *job = hint;
    wf_client_t *c = job->client;
    pthread_mutex_lock(&c->mu);
    if (atomic_fetch_sub(&job->frames_out, 1) == 1)
        pthread_cond_broadcast(&c->released);
    pthread_mutex_unlock(&c->mu);
}

/* Wait until ZeroMQ has released every frame of the job, up to
 * `deadline` (-1: no limit). True when released. */
static bool wait_released(wf_client_t *c, wf_job_t *job, int64_t deadline)
{
    bool ok = true;
    pthread_mutex_lock(&c->mu);
    while (atomic_load(&job->frames_out) > 0) {
        if (deadline < 0) {
            pthread_cond_wait(&c->released, &c->mu);
            continue;
        }
        struct timespec ts = {
            .tv_sec = (time_t)(deadline / 1000),
            .tv_nsec = (long)(deadline % 1000) * 1000000,
        };
        if (pthread_cond_timedwait(&c->released, &c->mu, &ts) == ETIMEDOUT &&
            atomic_load(&job->frames_out) > 0) {
            ok = false;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

/* ---- socket ----------------------------------------------------------- */

/* Close the socket and its monitor: stop the monitor, then close its
 * reader, then the socket. ZeroMQ's I/O thread, which serves every socket
 * of the context, writes each event into the monitor with a blocking
 * send; with the reader closed that send never returns, and the context
 * stops for good (no socket connects or reports an event again, and
 * zmq_ctx_term never returns). A socket whose connection closed goes on
 * reconnecting, and reporting CONNECT_RETRIED, until ZeroMQ's reaper has
 * finished closing it, after zmq_close. zmq_socket_monitor with no
 * endpoint stops the monitor under the lock every event is sent under:
 * no event goes out after it returns. */
static void socket_close(wf_client_t *c)
{
    if (c->sock)
        zmq_socket_monitor(c->sock, NULL, 0);   /* none: does nothing */
    if (c->mon) {
        zmq_close(c->mon);
        c->mon = NULL;
    }
    if (c->sock) {
        zmq_close(c->sock);
        c->sock = NULL;
    }
}

/* The socket's monitor (file comment): a connection up, closed, an
 * attempt to reconnect failed; on tcp:// also a handshake the daemon
 * refuses (CURVE keys, or none where it wants them), which fails the
 * call at once with WF_E_AUTH instead of a timeout: nothing is sent
 * until a handshake succeeds, so a refused one looks like no daemon. */
static wf_status_t monitor_open(wf_client_t *c, void *s)
{
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://weft-client-monitor-%llu",
             (unsigned long long)c->mon_seq++);
    int events = ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_DISCONNECTED |
                 ZMQ_EVENT_CONNECT_RETRIED;
    if (strncmp(c->endpoint, "tcp://", 6) == 0)
        events |= ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                   ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                   ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(s, ep, events) != 0)
        return fail(c, WF_E_CONNECT, "zmq_socket_monitor: %s", zmq_strerror(errno));
    void *m = zmq_socket(c->zctx, ZMQ_PAIR);
    if (!m)
        return fail(c, WF_E_CONNECT, "zmq_socket: %s", zmq_strerror(errno));
    /* linger 0; no high-water mark: the monitor sends from ZeroMQ's I/O
     * thread and must never block it, even when nobody reads for long */
    int linger = 0, hwm = 0;
    zmq_setsockopt(m, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(m, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(m, ep) != 0) {
        int e = errno;
        zmq_close(m);
        return fail(c, WF_E_CONNECT, "monitor: %s", zmq_strerror(e));
    }
    c->mon = m;
    c->handshake_fails = 0;
    c->up = false;
    return WF_OK;
}

static wf_status_t recv_ready(wf_client_t *c);
static wf_status_t socket_reset(wf_client_t *c, const char *why);

/* The connection that was up closed: take the replies that came before
 * the close, fail every request still waiting, and replace the socket
 * (see the file comment). */
static void connection_lost(wf_client_t *c)
{
    (void)recv_ready(c);
    while (c->pending) {
        wf_job_t *j = c->pending;
        job_fail(j, WF_E_CONN_CLOSED, "the connection to the daemon at '%s' closed "
                 "before the reply (the daemon stopped, or the connection was "
                 "reset)", c->endpoint);
        job_finish(c, j);
    }
    socket_reset(c, "the connection closed");
    c->lost = true;
    c->retried = false;
}

/* Read the monitor's events (file comment). WF_E_AUTH (message set) when
 * a handshake failed: the daemon refused our key (ZAP), wants CURVE while
 * we speak none (or the reverse), or closed the connection in the
 * handshake twice in a row (a wrong server key: it cannot read our
 * hello). WF_E_CONN_CLOSED when the connection was lost (every waiting
 * job failed, the socket replaced: connection_lost). Else WF_OK. */
static wf_status_t monitor_check(wf_client_t *c)
{
    if (!c->mon)
        return WF_OK;
    for (;;) {
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, c->mon, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&a);
            return WF_OK;
        }
        uint16_t event = 0;
        uint32_t value = 0;
        bool ok = zmq_msg_size(&a) == 6 && zmq_msg_more(&a);
        if (ok) {
            memcpy(&event, zmq_msg_data(&a), 2);
            memcpy(&value, (const char *)zmq_msg_data(&a) + 2, 4);
        }
        if (zmq_msg_more(&a)) {             /* the endpoint frame */
            zmq_msg_init(&b);
            zmq_msg_recv(&b, c->mon, 0);
            zmq_msg_close(&b);
        }
        zmq_msg_close(&a);
        if (!ok)
            continue;
        switch (event) {
        case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
            c->handshake_fails = 0;
            c->up = true;
            c->lost = false;
            break;
        case ZMQ_EVENT_DISCONNECTED:
            /* also sent for a connection that ends in its handshake (the
             * failure events above say why): nothing was sent on it */
            if (!c->up)
                break;
            connection_lost(c);     /* a new socket, a new monitor */
            return WF_E_CONN_CLOSED;
        case ZMQ_EVENT_CONNECT_RETRIED:
            c->retried = true;
            break;
        case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
            return fail(c, WF_E_AUTH, "the daemon at '%s' refused this client's "
                        "key (ZAP %u): it is not in the daemon's client_keys",
                        c->endpoint, value);
        case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
            if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
                return c->curve
                    ? fail(c, WF_E_AUTH, "handshake with '%s' failed: this client "
                           "uses CURVE keys, the daemon does not", c->endpoint)
                    : fail(c, WF_E_AUTH, "handshake with '%s' failed: the daemon "
                           "wants CURVE keys (set WEFT_SERVER_KEY and "
                           "WEFT_CLIENT_KEY, or weftctl --server-key / "
                           "--client-key)", c->endpoint);
            return fail(c, WF_E_AUTH, "handshake with '%s' failed (protocol error "
                        "0x%x): wrong server key?", c->endpoint, value);
        case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            /* Once may be a daemon going away mid-handshake. */
            if (++c->handshake_fails >= 2)
                return c->curve
                    ? fail(c, WF_E_AUTH, "handshake with '%s' failed: the daemon "
                           "closed the connection (wrong server key, or a daemon "
                           "without CURVE?)", c->endpoint)
                    : fail(c, WF_E_AUTH, "handshake with '%s' failed: the daemon "
                           "closed the connection (does it want CURVE keys? set "
                           "WEFT_SERVER_KEY and WEFT_CLIENT_KEY, or weftctl "
                           "--server-key / --client-key)", c->endpoint);
            break;
        default:
            break;
        }
    }
}

static wf_status_t socket_open(wf_client_t *c)
{
    void *s = zmq_socket(c->zctx, ZMQ_DEALER);
    if (!s)
        return fail(c, WF_E_CONNECT, "zmq_socket: %s", zmq_strerror(errno));
    int linger = 0, ivl = 10, ivl_max = 250;
    /* linger 0: closing never waits for a daemon that is gone.
     * Short reconnect interval: a daemon started after us is found fast. */
    if (zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL, &ivl, sizeof ivl) != 0 ||
        zmq_setsockopt(s, ZMQ_RECONNECT_IVL_MAX, &ivl_max, sizeof ivl_max) != 0) {
        int e = errno;
        zmq_close(s);
        return fail(c, WF_E_CONNECT, "zmq_setsockopt: %s", zmq_strerror(e));
    }
    if (c->curve &&
        (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, c->server_key, WF_KEY_Z85_LEN) != 0 ||
         zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, c->keys.public_key, WF_KEY_Z85_LEN) != 0 ||
         zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, c->keys.secret_key, WF_KEY_Z85_LEN) != 0)) {
        int e = errno;
        zmq_close(s);
        return fail(c, WF_E_CONNECT, "CURVE keys: %s", zmq_strerror(e));
    }
    c->sock = s;
    wf_status_t st = monitor_open(c, s);
    if (st == WF_OK && zmq_connect(s, c->endpoint) != 0)
        st = fail(c, WF_E_CONNECT, "cannot connect to '%s': %s", c->endpoint,
                  zmq_strerror(errno));
    if (st != WF_OK) {
        socket_close(c);
        return st;
    }
    return WF_OK;
}

/* Drop the connection and open a new one. Closing with linger 0 makes
 * ZeroMQ discard (and release, from its own threads) the frames it still
 * queues; the daemon's replies to the old connection can no longer reach
 * us, so every job still waiting fails. Used when a half-sent message or
 * frames that the daemon does not read would otherwise keep buffers
 * borrowed forever, and when the connection closed (connection_lost). */
static wf_status_t socket_reset(wf_client_t *c, const char *why)
{
    socket_close(c);
    while (c->pending) {
        wf_job_t *j = c->pending;
        job_fail(j, WF_E_IO, "connection reset (%s) before the reply", why);
        job_finish(c, j);
    }
    return socket_open(c);
}

/* Receive one more part of a multipart message (it is already complete
 * in ZeroMQ: parts arrive atomically), retrying on a signal. */
static int recv_part(wf_client_t *c, zmq_msg_t *m)
{
    for (;;) {
        int rc = zmq_msg_recv(m, c->sock, 0);
        if (rc >= 0 || errno != EINTR)
            return rc;
    }
}

/* Read and drop the rest of a message. */
static void drain_parts(wf_client_t *c, bool more)
{
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (recv_part(c, &m) < 0) {
            zmq_msg_close(&m);
            return;
        }
        more = zmq_msg_more(&m);
        zmq_msg_close(&m);
    }
}

/* Wait until a connection is up (the monitor says so) and the socket can
 * take a message (below its high-water mark). The monitor is read first,
 * and again once the socket is writable, so that the close of an earlier
 * connection is never taken for the new one's (its jobs fail before
 * anything goes out on the new one). After a lost connection:
 * WF_E_CONN_CLOSED, nothing sent, once an attempt to reconnect fails. */
static wf_status_t wait_writable(wf_client_t *c, int64_t deadline)
{
    c->retried = false;
    /* while no connection is up, the connect timeout bounds the wait too */
    int64_t connect_deadline = wfc_deadline_after(c->connect_timeout_ms > 0
                                                  ? c->connect_timeout_ms : -1);
    for (;;) {
        wf_status_t st = monitor_check(c);
        if (st == WF_E_AUTH)
            return st;
        if (!c->sock && socket_open(c) != WF_OK)
            return c->lost ? fail(c, WF_E_CONN_CLOSED, "the connection to the daemon "
                                  "at '%s' closed: %s", c->endpoint, c->last_error)
                           : WF_E_CONNECT;
        if (!c->up && c->lost && c->retried)
            return fail(c, WF_E_CONN_CLOSED, "the connection to the daemon at '%s' "
                        "closed and reconnecting failed (no daemon there now); "
                        "not sent", c->endpoint);
        /* while no connection is up only the monitor can say anything:
         * the socket itself takes messages (into a queue) at once */
        zmq_pollitem_t it[2] = { { .socket = c->mon, .events = ZMQ_POLLIN },
                                 { .socket = c->sock, .events = ZMQ_POLLOUT } };
        int64_t until = deadline;
        if (!c->up && connect_deadline >= 0 && (until < 0 || connect_deadline < until))
            until = connect_deadline;
        int rc = zmq_poll(it, c->up ? 2 : 1, remaining_ms(until));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return fail(c, WF_E_IO, "zmq_poll: %s", zmq_strerror(errno));
        }
        if (c->up && (it[1].revents & ZMQ_POLLOUT)) {
            st = monitor_check(c);
            if (st == WF_E_AUTH)
                return st;
            if (st == WF_OK && c->up) {
                c->lost = false;
                return WF_OK;
            }
            continue;           /* that connection closed: a new socket */
        }
        if (!c->up && connect_deadline >= 0 && now_ms() >= connect_deadline)
            return fail(c, WF_E_CONNECT,
                        "no connection to the daemon at '%s' within the connect "
                        "timeout (%d ms): is weftd running and listening there?",
                        c->endpoint, c->connect_timeout_ms);
        if (deadline >= 0 && now_ms() >= deadline)
            return fail(c, WF_E_TIMEOUT,
                        "no connection to the daemon at '%s' within the timeout",
                        c->endpoint);
    }
}

/* Send c->req (already filled) and, for an attention job, the tensor frames
 * data[i] / bytes[i] without copying. On failure nothing stays borrowed. */
wf_status_t wfc_send_request(wf_client_t *c, wf_job_t *job, int n_frames,
                             void *const *data, const size_t *bytes,
                             int64_t deadline)
{
    wf_buf_reset(&c->hdr);
    wf_status_t st = wf_request_encode(&c->req, &c->hdr);
    if (st != WF_OK)
        return fail(c, st, "cannot encode the request header");

    for (;;) {
        st = wait_writable(c, deadline);
        if (st != WF_OK)
            return st;
        int flags = ZMQ_DONTWAIT | (n_frames > 0 ? ZMQ_SNDMORE : 0);
        if (zmq_send(c->sock, c->hdr.data, c->hdr.len, flags) >= 0)
            break;
        /* EAGAIN: the queue reached its high-water mark since the poll. */
        if (errno != EAGAIN && errno != EINTR)
            return fail(c, WF_E_IO, "zmq_send: %s", zmq_strerror(errno));
    }

    for (int i = 0; i < n_frames; i++) {
        zmq_msg_t m;
        atomic_fetch_add(&job->frames_out, 1);
        if (zmq_msg_init_data(&m, data[i], bytes[i], frame_released, job) != 0) {
            atomic_fetch_sub(&job->frames_out, 1);
            socket_reset(c, "frame allocation failed");
            return fail(c, WF_E_NO_MEMORY, "zmq_msg_init_data: %s",
                        zmq_strerror(errno));
        }
        int flags = i + 1 < n_frames ? ZMQ_SNDMORE : 0;
        int rc;
        do {
            rc = zmq_msg_send(&m, c->sock, flags);
        } while (rc < 0 && errno == EINTR);
        if (rc < 0) {
            int e = errno;
            zmq_msg_close(&m); /* runs frame_released */
            /* Half a message is queued: only a new socket gets rid of it. */
            socket_reset(c, "send failed mid-message");
            wait_released(c, job, -1);
            return fail(c, WF_E_IO, "zmq_msg_send: %s", zmq_strerror(e));
        }
    }
    return WF_OK;
}

/* ---- replies ---------------------------------------------------------- */

static bool shape_eq(const wf_tensor_desc_t *d, int rank, const int64_t *shape)
{
    if (d->rank != rank)
        return false;
    for (int i = 0; i < rank; i++)
        if (d->shape[i] != shape[i])
            return false;
    return true;
}

/* "(2, 16, 64) f32" */
static void describe(char *buf, size_t len, int rank, const int64_t *shape, wf_dtype_t dt)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, len - n, "(");
    for (int i = 0; i < rank && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n < len)
        snprintf(buf + n, len - n, ") %s", wf_dtype_name(dt) ? wf_dtype_name(dt) : "?");
}

/* An OK attention / forward reply: check its tensors against what the
 * caller gave (job->outputs), then copy the frames into the caller's
 * buffers. Received frames are not aligned, hence memcpy. `more`: frames
 * follow the header. */
static void take_outputs(wf_client_t *c, wf_job_t *job, const wf_reply_t *r,
                         bool more)
{
    uint32_t want = job->n_outputs;
    void *dst[JOB_MAX_OUTPUTS] = { NULL, NULL };
    uint64_t dst_bytes[JOB_MAX_OUTPUTS] = { 0, 0 };
    bool taken[JOB_MAX_OUTPUTS] = { false, false };

    if (r->n_tensors != want) {
        job_fail(job, WF_E_PROTOCOL, "reply has %u tensors, expected %u",
                 r->n_tensors, want);
        goto drop;
    }
    for (uint32_t i = 0; i < r->n_tensors; i++) {
        const wf_tensor_desc_t *d = &r->tensors[i];
        if (d->frame >= want || dst[d->frame]) {
            job_fail(job, WF_E_PROTOCOL, "reply tensor '%s' has frame %u",
                     d->name, d->frame);
            goto drop;
        }
        uint32_t o = 0;
        while (o < want && (taken[o] || strcmp(d->name, job->outputs[o].name) != 0))
            o++;
        if (o == want) {
            job_fail(job, WF_E_PROTOCOL, "unexpected reply tensor '%s'", d->name);
            goto drop;
        }
        const job_output_t *x = &job->outputs[o];
        if (d->dtype != x->dtype || !shape_eq(d, x->rank, x->shape)) {
            char got[96], exp[96];
            describe(got, sizeof got, d->rank, d->shape, d->dtype);
            describe(exp, sizeof exp, x->rank, x->shape, x->dtype);
            /* A forward's output shape is the caller's guess of the
             * model's (its out_channels): a wrong guess is the caller's
             * mistake, not the daemon's. */
            if (job->kind == JOB_FORWARD && d->dtype == x->dtype)
                job_fail(job, WF_E_BAD_ARGUMENT, "the model's %s is %s, the caller's "
                         "buffer is %s", d->name, got, exp);
            else
                job_fail(job, WF_E_PROTOCOL, "reply tensor '%s' is %s, the caller "
                         "expects %s", d->name, got, exp);
            goto drop;
        }
        taken[o] = true;
        dst[d->frame] = x->dst;
        dst_bytes[d->frame] = d->nbytes;
    }

    for (uint32_t f = 0; f < want; f++) {
        if (!more) {
            job_fail(job, WF_E_PROTOCOL, "reply has %u frames, expected %u",
                     f, want);
            return;
        }
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (recv_part(c, &m) < 0) {
            zmq_msg_close(&m);
            job_fail(job, WF_E_IO, "zmq_msg_recv: %s", zmq_strerror(errno));
            return;
        }
        more = zmq_msg_more(&m);
        size_t sz = zmq_msg_size(&m);
        if (sz != dst_bytes[f]) {
            zmq_msg_close(&m);
            job_fail(job, WF_E_PROTOCOL,
                     "reply frame %u has %zu bytes, its descriptor says %llu",
                     f, sz, (unsigned long long)dst_bytes[f]);
            goto drop;
        }
        memcpy(dst[f], zmq_msg_data(&m), sz);
        zmq_msg_close(&m);
    }
    if (more) {
        job_fail(job, WF_E_PROTOCOL, "reply has more frames than tensors");
        goto drop;
    }
    job->status = WF_OK;
    job->result.status = WF_OK;
    job->error[0] = '\0';
    return;

drop:
    drain_parts(c, more);
}

/* Receive one reply if one is waiting. WF_OK: one was handled (perhaps
 * dropped); WF_E_PENDING: none; otherwise a socket error. */
static wf_status_t recv_reply(wf_client_t *c)
{
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) < 0) {
        int e = errno;
        zmq_msg_close(&m);
        if (e == EAGAIN || e == EINTR)
            return WF_E_PENDING;
        return fail(c, WF_E_IO, "zmq_msg_recv: %s", zmq_strerror(e));
    }
    bool more = zmq_msg_more(&m);
    /* A REQ-style empty delimiter may precede the header. */
    if (zmq_msg_size(&m) == 0 && more) {
        if (recv_part(c, &m) < 0) {
            int e = errno;
            zmq_msg_close(&m);
            return fail(c, WF_E_IO, "zmq_msg_recv: %s", zmq_strerror(e));
        }
        more = zmq_msg_more(&m);
    }

    wf_reply_t *r = &c->rep;
    char err[WF_PROTO_ERROR_MAX];
    err[0] = '\0';
    wf_status_t dst = wf_reply_decode(zmq_msg_data(&m), zmq_msg_size(&m), r,
                                      err, sizeof err);
    zmq_msg_close(&m);

    wf_job_t *job = job_find(c, r->id);
    if (!job) {
        /* A destroyed job's reply, or one we cannot attribute. */
        drain_parts(c, more);
        if (dst != WF_OK)
            fail(c, WF_E_PROTOCOL, "dropped an undecodable reply: %s", err);
        return WF_OK;
    }

    job->result.epoch = r->epoch;
    if (dst != WF_OK) {
        /* WF_E_VERSION when the reply speaks another version. */
        job_fail(job, dst, "reply header: %s", err);
        drain_parts(c, more);
    } else if (r->status != WF_OK) {
        /* The daemon's own error: keep its code and message. */
        job_fail(job, r->status, "%s",
                 r->error[0] ? r->error : wf_status_str(r->status));
        drain_parts(c, more);
    } else if (r->version != WF_PROTOCOL_VERSION) {
        job_fail(job, WF_E_VERSION, "reply has protocol version %u, "
                 "this library speaks %u", r->version, WF_PROTOCOL_VERSION);
        drain_parts(c, more);
    } else if (r->op != op_of[job->kind]) {
        job_fail(job, WF_E_PROTOCOL, "reply has op %u, the request had %u",
                 r->op, op_of[job->kind]);
        drain_parts(c, more);
    } else if (job->kind == JOB_FORWARD) {
        const wf_forward_result_t *f = &r->result.forward;
        job->result.queue_us = f->queue_us;
        job->result.compute_us = f->compute_us;
        job->result.devices = f->devices;
        job->result.cache = f->cache;
        take_outputs(c, job, r, more);
    } else if (job->kind == JOB_ATTENTION) {
        const wf_attention_result_t *a = &r->result.attention;
        job->result.queue_us = a->queue_us;
        job->result.compute_us = a->compute_us;
        job->result.devices = a->devices;
        take_outputs(c, job, r, more);
    } else {
        drain_parts(c, more);
        job->status = WF_OK;
        job->result.status = WF_OK;
        switch (job->kind) {
        case JOB_HELLO:
            if (r->result.hello.protocol != WF_PROTOCOL_VERSION)
                job_fail(job, WF_E_VERSION, "daemon speaks protocol %u, "
                         "this library speaks %u", r->result.hello.protocol,
                         WF_PROTOCOL_VERSION);
            else if (job->answer)
                *(wf_hello_info_t *)job->answer = r->result.hello;
            if (job->status == WF_OK) {
                c->features = r->features;
                c->hello_ok = true;
            }
            break;
        case JOB_STATUS:
            if (job->answer)
                *(wf_status_info_t *)job->answer = r->result.status;
            break;
        case JOB_RECONFIGURE:
            if (job->answer)
                *(wf_reconfigure_result_t *)job->answer = r->result.reconfigure;
            break;
        case JOB_END_SESSION:
            if (job->answer)
                *(wf_end_session_result_t *)job->answer = r->result.end_session;
            break;
        case JOB_LOAD_MODEL:
            if (r->result.models.n != 1)
                job_fail(job, WF_E_PROTOCOL, "load_model reply has no model");
            else if (job->answer)
                *(wf_models_result_t *)job->answer = r->result.models;
            break;
        case JOB_LIST_MODELS:
            if (job->answer)
                *(wf_models_result_t *)job->answer = r->result.models;
            break;
        default: /* unload_model: nothing to take */
            break;
        }
    }
    job_finish(c, job);
    return WF_OK;
}

/* Handle every reply already waiting, without blocking. */
static wf_status_t recv_ready(wf_client_t *c)
{
    wf_status_t st;
    while ((st = recv_reply(c)) == WF_OK)
        ;
    return st == WF_E_PENDING ? WF_OK : st;
}

/* The monitor's events while jobs wait: a closed connection fails them
 * with WF_E_CONN_CLOSED (monitor_check); a refused handshake after the
 * connection was lost (e.g. our key was removed from client_keys) with
 * WF_E_AUTH: no reply can come back. */
static wf_status_t auth_check(wf_client_t *c)
{
    wf_status_t st = monitor_check(c);
    if (st != WF_E_AUTH)
        return st;
    while (c->pending) {
        wf_job_t *j = c->pending;
        job_fail(j, st, "%s", c->last_error);
        job_finish(c, j);
    }
    return st;
}

/* Receive until `job` has its reply and its frames are released, or the
 * deadline (-1: none) passes. Returns the job's status or WF_E_TIMEOUT. */
static wf_status_t job_wait_until(wf_client_t *c, wf_job_t *job,
                                  int64_t deadline)
{
    while (!job->replied) {
        zmq_pollitem_t it[2] = { { .socket = c->sock, .events = ZMQ_POLLIN },
                                 { .socket = c->mon, .events = ZMQ_POLLIN } };
        int rc = zmq_poll(it, c->mon ? 2 : 1, remaining_ms(deadline));
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            return fail(c, WF_E_IO, "zmq_poll: %s", zmq_strerror(errno));
        }
        if (it[0].revents & ZMQ_POLLIN) {
            wf_status_t st = recv_ready(c);
            if (st != WF_OK)
                return st;
            continue;
        }
        if (auth_check(c) != WF_OK)
            continue;           /* every waiting job failed: this one too */
        if (deadline >= 0 && now_ms() >= deadline)
            return fail(c, WF_E_TIMEOUT, "no reply from the daemon at '%s' "
                        "within the timeout", c->endpoint);
    }
    if (!wait_released(c, job, deadline))
        return fail(c, WF_E_TIMEOUT,
                    "the daemon has not read the job's inputs within the timeout");
    if (job->status != WF_OK)
        fail(c, job->status, "%s", job->error);
    else
        c->last_error[0] = '\0';
    return job->status;
}

/* Give up on a job: forget it (a late reply is dropped) and get its
 * borrowed frames back, waiting up to `wait_ms` for ZeroMQ to finish with
 * them before resetting the connection. */
static void job_release(wf_client_t *c, wf_job_t *job, int wait_ms)
{
    job_unlink(c, job);
    if (!wait_released(c, job, wfc_deadline_after(wait_ms))) {
        socket_reset(c, "a cancelled job's inputs were still queued");
        wait_released(c, job, -1);
    }
}

/* ---- public API ------------------------------------------------------- */

/* Why this thread's last wf_client_connect failed (wf_client_last_error
 * with NULL). */
static _Thread_local char connect_error[WF_CLIENT_ERR_MAX];

#define connect_fail(st, ...) \
    wf_errf_status((st), connect_error, sizeof connect_error, __VA_ARGS__)

/* The daemon's public key: a 40-character Z85 key, or a file holding one
 * (a public-key file, or a key pair file). */
static wf_status_t read_server_key(const char *spec, const char *from, char *key)
{
    wf_keypair_t kp;
    char err[512];
    if (access(spec, F_OK) != 0 && wf_key_z85_valid(spec)) {
        memcpy(key, spec, WF_KEY_Z85_LEN + 1);
        return WF_OK;
    }
    if (wf_keypair_read(spec, false, &kp, err, sizeof err) != WF_OK)
        return connect_fail(WF_E_BAD_ARGUMENT, "%s: not a Z85 public key, and %s",
                            from, err);
    memcpy(key, kp.public_key, WF_KEY_Z85_LEN + 1);
    explicit_bzero(&kp, sizeof kp);
    return WF_OK;
}

/* The CURVE keys of a tcp:// connection: the arguments, else the
 * environment; both or neither. *curve false: none given. */
static wf_status_t curve_keys(const char *endpoint, const char *server_key,
                              const char *client_key_file, wf_client_t *c)
{
    const char *skey_from = "server_key", *ckey_from = "client_key_file";
    if (!server_key || !*server_key) {
        server_key = getenv("WEFT_SERVER_KEY");
        skey_from = "WEFT_SERVER_KEY";
    }
    if (!client_key_file || !*client_key_file) {
        client_key_file = getenv("WEFT_CLIENT_KEY");
        ckey_from = "WEFT_CLIENT_KEY";
    }
    bool has_s = server_key && *server_key, has_c = client_key_file && *client_key_file;
    c->curve = false;
    if (!has_s && !has_c)
        return WF_OK;
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return WF_OK;           /* ipc://: the socket file's mode, no keys */
    if (!has_s)
        return connect_fail(WF_E_BAD_ARGUMENT, "%s is set but the daemon's public "
                            "key is not (WEFT_SERVER_KEY, or --server-key)",
                            ckey_from);
    if (!has_c)
        return connect_fail(WF_E_BAD_ARGUMENT, "the daemon's public key (%s) is "
                            "set but this client's key pair is not "
                            "(WEFT_CLIENT_KEY, or --client-key; weftctl keygen "
                            "writes one)", skey_from);
    wf_status_t st = read_server_key(server_key, skey_from, c->server_key);
    if (st != WF_OK)
        return st;
    char err[512];
    if (wf_keypair_read(client_key_file, true, &c->keys, err, sizeof err) != WF_OK)
        return connect_fail(WF_E_BAD_ARGUMENT, "%s: %s", ckey_from, err);
    c->curve = true;
    return WF_OK;
}

static wf_status_t client_new(const char *endpoint, int timeout_ms,
                              const char *server_key, const char *client_key_file,
                              bool explicit_curve, wf_client_t **ret_client)
{
    connect_error[0] = '\0';
    if (!ret_client)
        return connect_fail(WF_E_BAD_ARGUMENT, "ret_client is NULL");
    if (!endpoint)
        endpoint = WF_DEFAULT_ENDPOINT;
    if (!*endpoint)
        return connect_fail(WF_E_BAD_ARGUMENT, "empty endpoint");
    if (explicit_curve && strncmp(endpoint, "tcp://", 6) != 0)
        return connect_fail(WF_E_BAD_ARGUMENT, "CURVE keys are for tcp:// "
                            "endpoints; '%s' is not one", endpoint);

    wf_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return connect_fail(WF_E_NO_MEMORY, "out of memory");
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : WF_CLIENT_DEFAULT_TIMEOUT_MS;
    c->next_id = 1;
    wf_status_t st = curve_keys(endpoint, server_key, client_key_file, c);
    if (st == WF_OK && explicit_curve && !c->curve)
        st = connect_fail(WF_E_BAD_ARGUMENT, "no CURVE keys: server_key and "
                          "client_key_file (or WEFT_SERVER_KEY and WEFT_CLIENT_KEY)");
    if (st != WF_OK) {
        explicit_bzero(&c->keys, sizeof c->keys);
        free(c);
        return st;
    }
    c->endpoint = strdup(endpoint);
    pthread_condattr_t ca;
    bool mu_ok = false, cond_ok = false;
    if (!c->endpoint)
        goto nomem;
    if (pthread_mutex_init(&c->mu, NULL) != 0)
        goto nomem;
    mu_ok = true;
    /* Monotonic clock: deadlines must not move with the wall clock. */
    if (pthread_condattr_init(&ca) != 0)
        goto nomem;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    cond_ok = pthread_cond_init(&c->released, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!cond_ok)
        goto nomem;
    c->zctx = zmq_ctx_new();
    if (!c->zctx)
        goto nomem;
    if (socket_open(c) != WF_OK) {
        connect_fail(WF_E_CONNECT, "%s", c->last_error);
        zmq_ctx_term(c->zctx);
        pthread_cond_destroy(&c->released);
        pthread_mutex_destroy(&c->mu);
        explicit_bzero(&c->keys, sizeof c->keys);
        free(c->endpoint);
        free(c);
        return WF_E_CONNECT;
    }
    *ret_client = c;
    return WF_OK;

nomem:
    if (cond_ok)
        pthread_cond_destroy(&c->released);
    if (mu_ok)
        pthread_mutex_destroy(&c->mu);
    explicit_bzero(&c->keys, sizeof c->keys);
    free(c->endpoint);
    free(c);
    return connect_fail(WF_E_NO_MEMORY, "out of memory");
}

wf_status_t wf_client_connect(const char *endpoint, int timeout_ms,
                              wf_client_t **ret_client)
{
    return client_new(endpoint, timeout_ms, NULL, NULL, false, ret_client);
}

wf_status_t wf_client_connect_curve(const char *endpoint, int timeout_ms,
                                    const char *server_key,
                                    const char *client_key_file,
                                    wf_client_t **ret_client)
{
    return client_new(endpoint, timeout_ms, server_key, client_key_file, true,
                      ret_client);
}

void wf_client_destroy(wf_client_t **client)
{
    if (!client || !*client)
        return;
    wf_client_t *c = *client;
    /* Jobs left by a careless caller: fail them; terminating the context
     * below releases every frame ZeroMQ still holds. */
    while (c->pending) {
        wf_job_t *j = c->pending;
        job_fail(j, WF_E_IO, "client destroyed before the reply");
        job_finish(c, j);
    }
    socket_close(c);
    zmq_ctx_term(c->zctx);
    explicit_bzero(&c->keys, sizeof c->keys);
    wf_buf_free(&c->hdr);
    pthread_cond_destroy(&c->released);
    pthread_mutex_destroy(&c->mu);
    free(c->endpoint);
    free(c);
    *client = NULL;
}

wf_status_t wf_client_set_connect_timeout(wf_client_t *client, int connect_timeout_ms)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    client->connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 0;
    return WF_OK;
}

const char *wf_client_last_error(const wf_client_t *client)
{
    return client ? client->last_error : connect_error;
}

/* Start a request of `kind` in c->req; the caller fills its args. */
wf_request_t *wfc_request_begin(wf_client_t *c, job_kind_t kind)
{
    memset(&c->req, 0, sizeof c->req);
    c->req.version = WF_PROTOCOL_VERSION;
    c->req.op = op_of[kind];
    return &c->req;
}

/* A request without tensors (begun with request_begin), waited for at
 * once. Other jobs' replies that arrive meanwhile are handled as usual.
 * `answer`: where the result goes (see wf_job.answer), may be NULL. */
wf_status_t wfc_simple_call(wf_client_t *c, job_kind_t kind, void *answer)
{
    wf_job_t job;
    memset(&job, 0, sizeof job);
    job.client = c;
    job.kind = kind;
    job.answer = answer;
    job.id = c->next_id++;
    atomic_init(&job.frames_out, 0);
    c->req.id = job.id;

    int64_t deadline = wfc_deadline_after(c->timeout_ms);
    wf_status_t st = wfc_send_request(c, &job, 0, NULL, NULL, deadline);
    if (st != WF_OK)
        return st;
    wfc_job_link(c, &job);
    st = job_wait_until(c, &job, deadline);
    job_unlink(c, &job); /* on timeout a late reply is dropped */
    return st;
}

wf_status_t wf_hello(wf_client_t *client, wf_hello_info_t *ret_info)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wfc_request_begin(client, JOB_HELLO);
    return wfc_simple_call(client, JOB_HELLO, ret_info);
}

wf_status_t wfc_need_feature(wf_client_t *c, uint32_t bit, const char *feature,
                             const char *what)
{
    if (!c->hello_ok) {
        wf_status_t st = wf_hello(c, NULL);
        if (st != WF_OK)
            return st;
    }
    if (c->features & bit)
        return WF_OK;
    return fail(c, WF_E_UNSUPPORTED, "%s: the daemon does not announce the feature "
                "\"%s\" (an older weftd); not sent", what, feature);
}

wf_status_t wfc_check_precision(wf_client_t *c, wf_precision_t p)
{
    if ((unsigned)p > WF_PRECISION_FP8)
        return fail(c, WF_E_BAD_ARGUMENT, "precision %d is not a wf_precision_t", (int)p);
    if (p == WF_PRECISION_DEFAULT)
        return WF_OK;
    return wfc_need_feature(c, WF_FEATURE_FP8, "fp8", "precision fp8");
}

int wf_client_has_feature(const wf_client_t *client, const char *name)
{
    if (!client || !name)
        return 0;
    uint32_t bit = wf_feature_bit(name, strlen(name));
    return bit && (client->features & bit) ? 1 : 0;
}

wf_status_t wf_status(wf_client_t *client, wf_status_info_t *ret_info)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wfc_request_begin(client, JOB_STATUS);
    return wfc_simple_call(client, JOB_STATUS, ret_info);
}

wf_status_t wf_reconfigure(wf_client_t *client, const wf_mesh_degrees_t *mesh,
                           uint64_t *ret_epoch)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    if (!mesh)
        return fail(client, WF_E_BAD_ARGUMENT, "mesh is NULL");
    const uint32_t deg[4] = { mesh->dp, mesh->ring, mesh->ulysses, mesh->tp };
    static const char *const names[4] = { "dp", "ring", "ulysses", "tp" };
    for (int i = 0; i < 4; i++)
        if (deg[i] < 1 || deg[i] > WF_PROTO_MAX_DEGREE)
            return fail(client, WF_E_BAD_ARGUMENT, "mesh.%s must be 1..%d, got %u",
                        names[i], WF_PROTO_MAX_DEGREE, deg[i]);
    /* The daemon drains running jobs before it answers: the call may take
     * as long as the longest of them, within the client's timeout. */
    wf_reconfigure_result_t r;
    memset(&r, 0, sizeof r);
    wfc_request_begin(client, JOB_RECONFIGURE)->args.reconfigure.mesh = *mesh;
    wf_status_t st = wfc_simple_call(client, JOB_RECONFIGURE, &r);
    if (st == WF_OK && ret_epoch)
        *ret_epoch = r.epoch;
    return st;
}

static bool dtype_ok(wf_dtype_t dt)
{
    return wf_dtype_size(dt) != 0;
}

/* Check one tensor argument of `op` that must have rank `rank`; bytes
 * gets its size. */
wf_status_t wfc_check_tensor(wf_client_t *c, const char *op, const char *name,
                             const wf_tensor_t *t, int rank, size_t *bytes)
{
    if (!t)
        return fail(c, WF_E_BAD_ARGUMENT, "%s is NULL", name);
    if (!t->data)
        return fail(c, WF_E_BAD_ARGUMENT, "%s->data is NULL", name);
    if (!dtype_ok(t->dtype))
        return fail(c, WF_E_BAD_ARGUMENT, "%s has unknown dtype %d", name,
                    (int)t->dtype);
    if (t->rank != rank)
        return fail(c, WF_E_BAD_ARGUMENT, "%s has rank %d, %s needs %d",
                    name, t->rank, op, rank);
    int64_t n = wf_tensor_numel(t);
    if (n <= 0)
        return fail(c, WF_E_BAD_ARGUMENT, "%s has a dim <= 0 or its element "
                    "count overflows", name);
    uint64_t b;
    if (__builtin_mul_overflow((uint64_t)n, (uint64_t)wf_dtype_size(t->dtype), &b) ||
        b > SIZE_MAX)
        return fail(c, WF_E_BAD_ARGUMENT, "%s is too large", name);
    *bytes = (size_t)b;
    return WF_OK;
}

void wfc_fill_desc(wf_tensor_desc_t *d, const char *name,
                   const wf_tensor_t *t, uint32_t frame)
{
    snprintf(d->name, sizeof d->name, "%s", name);
    d->dtype = t->dtype;
    d->rank = t->rank;
    for (int i = 0; i < t->rank; i++)
        d->shape[i] = t->shape[i];
    d->frame = frame;
    wf_tensor_desc_finish(d);
}

wf_status_t wf_attention_submit(wf_client_t *client, const wf_tensor_t *q,
                                const wf_tensor_t *k, const wf_tensor_t *v,
                                const wf_attention_opts_t *opts,
                                wf_tensor_t *out, float *lse,
                                wf_job_t **ret_job)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wf_client_t *c = client;
    if (!ret_job)
        return fail(c, WF_E_BAD_ARGUMENT, "ret_job is NULL");

    /* Validate here so that a mistake costs no round trip and sends
     * nothing: shapes q (B,Sq,Hq,D), k = v (B,Skv,Hkv,D), Hkv | Hq,
     * out like q. */
    size_t qb = 0, kb = 0, vb = 0, ob = 0;
    wf_status_t st;
    if ((st = wfc_check_tensor(c, "attention", "q", q, 4, &qb)) != WF_OK ||
        (st = wfc_check_tensor(c, "attention", "k", k, 4, &kb)) != WF_OK ||
        (st = wfc_check_tensor(c, "attention", "v", v, 4, &vb)) != WF_OK ||
        (st = wfc_check_tensor(c, "attention", "out", out, 4, &ob)) != WF_OK)
        return st;
    if (k->shape[0] != q->shape[0] || v->shape[0] != q->shape[0])
        return fail(c, WF_E_BAD_ARGUMENT, "batch differs: q %lld, k %lld, v %lld",
                    (long long)q->shape[0], (long long)k->shape[0],
                    (long long)v->shape[0]);
    if (k->shape[3] != q->shape[3] || v->shape[3] != q->shape[3])
        return fail(c, WF_E_BAD_ARGUMENT, "head dim differs: q %lld, k %lld, v %lld",
                    (long long)q->shape[3], (long long)k->shape[3],
                    (long long)v->shape[3]);
    if (v->shape[1] != k->shape[1] || v->shape[2] != k->shape[2])
        return fail(c, WF_E_BAD_ARGUMENT, "k and v shapes differ");
    if (q->shape[2] % k->shape[2] != 0)
        return fail(c, WF_E_BAD_ARGUMENT, "k/v heads (%lld) do not divide q heads "
                    "(%lld)", (long long)k->shape[2], (long long)q->shape[2]);
    for (int i = 0; i < 4; i++)
        if (out->shape[i] != q->shape[i])
            return fail(c, WF_E_BAD_ARGUMENT, "out shape differs from q's in dim %d",
                        i);
    float scale = opts ? opts->scale : 0.0f;
    if (!isfinite(scale) || scale < 0.0f)
        return fail(c, WF_E_BAD_ARGUMENT, "scale must be finite and >= 0 "
                    "(0: 1/sqrt(D))");
    if (opts) {
        if ((unsigned)opts->rotate_method > WF_ROTATE_ALLTOALL)
            return fail(c, WF_E_BAD_ARGUMENT, "rotate_method %d is not a wf_rotate_t",
                        (int)opts->rotate_method);
        const wf_opt_t flags[4] = { opts->convert_to_fp32, opts->ring_anything,
                                    opts->ulysses_anything, opts->load_balance };
        static const char *const fnames[4] = { "convert_to_fp32", "ring_anything",
                                               "ulysses_anything", "load_balance" };
        for (int i = 0; i < 4; i++)
            if ((unsigned)flags[i] > WF_OPT_OFF)
                return fail(c, WF_E_BAD_ARGUMENT, "%s %d is not a wf_opt_t", fnames[i],
                            (int)flags[i]);
        /* last: it may ask the daemon (a hello) */
        if ((st = wfc_check_precision(c, opts->precision)) != WF_OK)
            return st;
    }

    wf_job_t *job = calloc(1, sizeof *job);
    if (!job)
        return fail(c, WF_E_NO_MEMORY, "cannot allocate a job");
    job->client = c;
    job->kind = JOB_ATTENTION;
    job->id = c->next_id++;
    atomic_init(&job->frames_out, 0);
    job->status = WF_E_PENDING;
    job->result.status = WF_E_PENDING;
    job->n_outputs = lse ? 2 : 1;
    job->outputs[0] = (job_output_t){ .name = "out", .dtype = out->dtype, .rank = 4,
                                      .dst = out->data };
    memcpy(job->outputs[0].shape, q->shape, 4 * sizeof(int64_t));
    if (lse) {
        job->outputs[1] = (job_output_t){ .name = "lse", .dtype = WF_DTYPE_F32,
                                          .rank = 3, .dst = lse };
        memcpy(job->outputs[1].shape, q->shape, 3 * sizeof(int64_t));
    }

    wf_request_t *req = &c->req;
    memset(req, 0, sizeof *req);
    req->version = WF_PROTOCOL_VERSION;
    req->id = job->id;
    req->op = WF_OP_ATTENTION;
    req->n_tensors = 3;
    wfc_fill_desc(&req->tensors[0], "q", q, 0);
    wfc_fill_desc(&req->tensors[1], "k", k, 1);
    wfc_fill_desc(&req->tensors[2], "v", v, 2);
    wf_attention_args_t *a = &req->args.attention;
    a->q = 0;
    a->k = 1;
    a->v = 2;
    a->has_scale = scale > 0.0f;
    a->scale = scale;
    a->causal = opts && opts->causal;
    a->return_lse = lse != NULL;
    a->has_out_dtype = true;
    a->out_dtype = out->dtype;
    a->devices = opts ? opts->devices : 0;
    if (opts) {
        /* only what the caller set travels: DEFAULT leaves the daemon's
         * setting in force (and keeps requests valid for older daemons) */
        a->rotate_method = opts->rotate_method;
        a->convert_to_fp32 = opts->convert_to_fp32;
        a->ring_anything = opts->ring_anything;
        a->ulysses_anything = opts->ulysses_anything;
        a->load_balance = opts->load_balance;
        a->deadline_ms = opts->deadline_ms;   /* 0: not sent */
        a->fp8 = opts->precision == WF_PRECISION_FP8;   /* false: not sent */
    }

    void *const data[3] = { q->data, k->data, v->data };
    const size_t bytes[3] = { qb, kb, vb };
    st = wfc_send_request(c, job, 3, data, bytes, wfc_deadline_after(c->timeout_ms));
    if (st != WF_OK) {
        free(job);
        return st;
    }
    wfc_job_link(c, job);
    c->last_error[0] = '\0';
    *ret_job = job;
    return WF_OK;
}

wf_status_t wf_cancel(wf_client_t *client, wf_job_t *job)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    if (!job || job->client != client)
        return fail(client, WF_E_BAD_ARGUMENT, "job is NULL or of another client");
    if (job->replied)
        return fail(client, WF_E_BAD_ARGUMENT, "job %llu is finished already",
                    (unsigned long long)job->id);
    /* the job's own reply (WF_E_CANCELLED, or its result) may come before
     * the cancel's: it is taken as usual meanwhile */
    return wf_cancel_id(client, job->id);
}

const char *wf_version(void)
{
    return WEFT_VERSION;
}

uint64_t wf_job_id(const wf_job_t *job)
{
    return job ? job->id : 0;
}

wf_status_t wf_end_session(wf_client_t *client, uint64_t session, uint64_t *ret_steps,
                           uint64_t *ret_reused)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    if (session == 0)
        return fail(client, WF_E_BAD_ARGUMENT, "session 0 is none");
    wf_status_t st = wfc_need_feature(client, WF_FEATURE_SESSIONS, "sessions",
                                      "end_session");
    if (st != WF_OK)
        return st;
    wfc_request_begin(client, JOB_END_SESSION)->args.end_session.session = session;
    wf_end_session_result_t r = { 0, 0 };
    st = wfc_simple_call(client, JOB_END_SESSION, &r);
    if (st == WF_OK) {
        if (ret_steps)
            *ret_steps = r.steps;
        if (ret_reused)
            *ret_reused = r.reused;
    }
    return st;
}

wf_status_t wf_cancel_id(wf_client_t *client, uint64_t id)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wfc_request_begin(client, JOB_CANCEL)->args.cancel.id = id;
    return wfc_simple_call(client, JOB_CANCEL, NULL);
}

wf_status_t wf_job_poll(wf_client_t *client, wf_job_t *job)
{
    if (!client || !job || job->client != client)
        return WF_E_BAD_ARGUMENT;
    if (!job->replied) {
        wf_status_t st = recv_ready(client);
        if (st != WF_OK)
            return st;
        auth_check(client);
    }
    if (!job->replied || atomic_load(&job->frames_out) > 0)
        return WF_E_PENDING;
    return job->status;
}

wf_status_t wf_job_wait(wf_client_t *client, wf_job_t *job, int timeout_ms)
{
    if (!client || !job || job->client != client)
        return WF_E_BAD_ARGUMENT;
    return job_wait_until(client, job, wfc_deadline_after(timeout_ms));
}

wf_status_t wf_job_result(const wf_job_t *job, wf_job_result_t *ret_result)
{
    if (!job)
        return WF_E_BAD_ARGUMENT;
    if (!job->replied || atomic_load(&job->frames_out) > 0)
        return WF_E_PENDING;
    if (ret_result)
        *ret_result = job->result;
    return job->status;
}

const char *wf_job_error(const wf_job_t *job)
{
    if (!job || !job->replied)
        return "";
    return job->error;
}

void wf_job_destroy(wf_client_t *client, wf_job_t **job)
{
    if (!job || !*job)
        return;
    wf_job_t *j = *job;
    if (client && j->client == client)
        job_release(client, j, client->timeout_ms);
    else
        wait_released(j->client, j, -1); /* wrong client: still be safe */
    free(j);
    *job = NULL;
}

/* The second half of a synchronous job call: wait for the submitted job
 * until `deadline`, hand its result over and free it. */
wf_status_t wfc_sync_finish(wf_client_t *client, wf_job_t *job, int64_t deadline,
                            wf_job_result_t *ret_result)
{
    wf_status_t st = job_wait_until(client, job, deadline);
    if (st == WF_E_TIMEOUT) {
        /* The job had its whole timeout: do not wait again for its frames. */
        job_release(client, job, 0);
        free(job);
        return fail(client, WF_E_TIMEOUT, "no reply from the daemon at '%s' "
                    "within %d ms", client->endpoint, client->timeout_ms);
    }
    if (ret_result)
        *ret_result = job->result;
    wf_job_destroy(client, &job);
    return st;
}

wf_status_t wf_attention(wf_client_t *client, const wf_tensor_t *q,
                         const wf_tensor_t *k, const wf_tensor_t *v,
                         const wf_attention_opts_t *opts, wf_tensor_t *out,
                         float *lse, wf_job_result_t *ret_result)
{
    wf_job_t *job = NULL;
    int64_t deadline = wfc_deadline_after(client ? client->timeout_ms : 0);
    wf_status_t st = wf_attention_submit(client, q, k, v, opts, out, lse, &job);
    if (st != WF_OK)
        return st;
    return wfc_sync_finish(client, job, deadline, ret_result);
}
