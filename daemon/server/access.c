/* access.c — the client plane's access control (README "Security"): who
 * may connect to the client endpoint and which role each request runs
 * with. Called by server.c (start-up, SIGHUP, teardown) and requests.c
 * (the role of a message); calls nothing else of daemon/server/.
 *
 * Three kinds of client endpoint (srv->access.mode):
 *   ipc://  no keys; the socket file's mode and group decide who may
 *           connect, and the peer's credentials (SO_PEERCRED, taken by
 *           libzmq when it accepts the connection) the role: uid 0 or the
 *           daemon's effective uid is admin, anyone else submit;
 *   tcp:// with client_keys: CURVE with this daemon's key_file; the ZAP
 *           handler (base/zap.h) admits the listed keys and names each
 *           connection "ROLE:NAME";
 *   tcp:// without client_keys: anonymous, every client admin; only on a
 *           loopback address or with allow_anonymous (protected mode).
 * On a CURVE endpoint a watcher thread reads the ROUTER's monitor and
 * logs the handshakes that fail before ZAP is asked (a client without
 * keys, a wrong server key) with the peer's address, rate-limited.
 */
#include "server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "errf.h"

#define MONITOR_ENDPOINT "inproc://weftd-client-monitor"
#define WATCH_FDS 256            /* peer addresses remembered, by fd */
#define LOG_BURST 20             /* failed handshakes logged per window */
#define LOG_WINDOW_S 60

struct wf_access_watch {
    void *pair;                  /* connected to the ROUTER's monitor */
    wf_log_t *log;
    char endpoint[WF_SETTINGS_ENDPOINT_MAX];
    pthread_t thread;
    atomic_bool stop;
    char peer[WATCH_FDS][64];    /* "ADDR:PORT" of an accepted fd; thread only */
    uint32_t failed;             /* a handshake just failed with this code; 0 none */
    time_t window;               /* log rate limit; thread only */
    unsigned logged;
    uint64_t suppressed;
};

/* ------------------------------------------------------------------ */
/* endpoints */

/* The host of a tcp:// endpoint ("127.0.0.1", "::1", "*", "eth0", ...)
 * into buf, brackets removed; false when it is not tcp://HOST:PORT. */
static bool tcp_host(const char *endpoint, char *buf, size_t len)
{
    if (strncmp(endpoint, "tcp://", 6) != 0)
        return false;
    const char *h = endpoint + 6;
    const char *colon = strrchr(h, ':');
    if (!colon || colon == h)
        return false;
    size_t n = (size_t)(colon - h);
    if (h[0] == '[' && n >= 2 && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= len)
        return false;
    memcpy(buf, h, n);
    buf[n] = '\0';
    return true;
}

/* Is the bound host of a tcp:// endpoint loopback only: 127.0.0.0/8,
 * ::1 (or an IPv4-mapped 127/8), "localhost", or the interface "lo"? */
static bool tcp_loopback(const char *endpoint)
{
    char host[WF_SETTINGS_ENDPOINT_MAX];
    if (!tcp_host(endpoint, host, sizeof host))
        return false;
    if (strcmp(host, "localhost") == 0 || strcmp(host, "lo") == 0)
        return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

/* Mode name for log lines. */
static const char *mode_name(srv_access_mode_t m)
{
    switch (m) {
    case SRV_ACCESS_IPC: return "ipc (peer credentials)";
    case SRV_ACCESS_CURVE: return "CURVE (client_keys)";
    case SRV_ACCESS_ANONYMOUS: return "anonymous";
    }
    return "?";
}

/* ------------------------------------------------------------------ */
/* keys */

/* Read client_keys and give it to the ZAP handler; "N admin, M submit"
 * into counts. On error nothing changes (message in err). */
static wf_status_t load_client_keys(wf_server_t *srv, char *counts, size_t counts_len,
                                    char *err, size_t err_len)
{
    wf_key_entry_t *e = NULL;
    size_t n = 0;
    wf_status_t st = wf_keylist_read(srv->settings.client_keys, WF_KEYLIST_CLIENTS,
                                     &e, &n, err, err_len);
    if (st != WF_OK)
        return st;
    st = wf_zap_set(srv->zap, WF_ZAP_CLIENTS, e, n);
    if (st != WF_OK) {
        snprintf(err, err_len, "out of memory");
        free(e);
        return st;
    }
    size_t admin = 0, submit = 0;
    for (size_t i = 0; i < n; i++) {
        admin += e[i].role == WF_ROLE_ADMIN;
        submit += e[i].role == WF_ROLE_SUBMIT;
    }
    free(e);
    snprintf(counts, counts_len, "%zu admin, %zu submit", admin, submit);
    return WF_OK;
}

wf_status_t srv_access_start(wf_server_t *srv)
{
    wf_status_t st = wf_zap_start(srv->zctx, srv->log, &srv->zap);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "cannot start the ZAP handler: %s",
               wf_status_str(st));
        return st;
    }
    if (srv->settings.key_file[0]) {
        char err[512];
        if (wf_keypair_read(srv->settings.key_file, true, &srv->keys, err,
                            sizeof err) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "key_file: %s", err);
            return WF_E_BAD_ARGUMENT;
        }
        srv->has_keys = true;
        wf_log(srv->log, WF_LOG_INFO, "key_file: this daemon's public key is %s",
               srv->keys.public_key);
    }
    return WF_OK;
}

/* ------------------------------------------------------------------ */
/* the watcher of failed handshakes (CURVE endpoints) */

static void watch_note(struct wf_access_watch *w, int fd, const char *why)
{
    time_t now = time(NULL);
    if (now - w->window >= LOG_WINDOW_S) {
        if (w->suppressed)
            wf_log(w->log, WF_LOG_WARNING, "auth: %" PRIu64 " more client "
                   "handshakes failed in the last %d s (not logged one by one)",
                   w->suppressed, LOG_WINDOW_S);
        w->window = now;
        w->logged = 0;
        w->suppressed = 0;
    }
    if (w->logged == LOG_BURST) {
        w->suppressed++;
        return;
    }
    w->logged++;
    const char *peer = fd >= 0 && fd < WATCH_FDS && w->peer[fd][0]
                           ? w->peer[fd] : "(address gone before it was read)";
    wf_log(w->log, WF_LOG_WARNING, "auth: client %s on %s refused: %s", peer,
           w->endpoint, why);
}

static const char *failure_text(uint32_t value)
{
    if (value == 1)
        return "it left during the CURVE handshake (a client without keys, "
               "or with the wrong server key?)";
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
        return "it does not speak CURVE (a client without keys; set "
               "WEFT_SERVER_KEY and WEFT_CLIENT_KEY)";
    if (value == ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC)
        return "CURVE cryptographic error (a client with the wrong server key?)";
    return "CURVE protocol error";
}

static void watch_event(struct wf_access_watch *w, uint16_t event, uint32_t value)
{
    int fd = (int)value;
    if (event == ZMQ_EVENT_ACCEPTED) {
        if (fd < 0 || fd >= WATCH_FDS)
            return;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        char host[INET6_ADDRSTRLEN] = "";
        w->peer[fd][0] = '\0';
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
            return;             /* gone already: logged as unknown */
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
            snprintf(w->peer[fd], sizeof w->peer[fd], "%s:%u", host,
                     (unsigned)ntohs(in->sin_port));
        } else if (ss.ss_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
            snprintf(w->peer[fd], sizeof w->peer[fd], "[%s]:%u", host,
                     (unsigned)ntohs(in6->sin6_port));
        }
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
               event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
        /* The disconnection of that connection comes next, with its fd
         * (one I/O thread emits both, in this order). Refusals by ZAP
         * (FAILED_AUTH) are logged by the ZAP handler. NO_DETAIL: the
         * peer left mid-handshake (a client without keys that saw our
         * greeting first and reset the connection, a port scan). */
        w->failed = event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ? 1 : value ? value : 2;
    } else if (event == ZMQ_EVENT_DISCONNECTED) {
        if (w->failed)
            watch_note(w, fd, failure_text(w->failed));
        w->failed = 0;
        if (fd >= 0 && fd < WATCH_FDS)
            w->peer[fd][0] = '\0';
    }
}

static void *watch_thread(void *arg)
{
    struct wf_access_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        zmq_pollitem_t it = { .socket = w->pair, .events = ZMQ_POLLIN };
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zmq_msg_t a, b;
        zmq_msg_init(&a);
        zmq_msg_init(&b);
        if (zmq_msg_recv(&a, w->pair, 0) >= 0 && zmq_msg_more(&a) &&
            zmq_msg_recv(&b, w->pair, 0) >= 0 && zmq_msg_size(&a) == 6) {
            uint16_t event;
            uint32_t value;
            memcpy(&event, zmq_msg_data(&a), 2);
            memcpy(&value, (const char *)zmq_msg_data(&a) + 2, 4);
            watch_event(w, event, value);
        }
        zmq_msg_close(&a);
        zmq_msg_close(&b);
    }
    return NULL;
}

/* Start the watcher on srv->router (before it binds). Failure only logs:
 * ZAP refusals are logged anyway. */
static void watch_start(wf_server_t *srv)
{
    struct wf_access_watch *w = calloc(1, sizeof *w);
    if (!w)
        return;
    w->log = srv->log;
    snprintf(w->endpoint, sizeof w->endpoint, "%s", srv->endpoint);
    atomic_init(&w->stop, false);
    int events = ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED |
                 ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(srv->router, MONITOR_ENDPOINT, events) != 0)
        goto fail;
    w->pair = zmq_socket(srv->zctx, ZMQ_PAIR);
    if (!w->pair || zmq_connect(w->pair, MONITOR_ENDPOINT) != 0)
        goto fail;
    if (pthread_create(&w->thread, NULL, watch_thread, w) != 0)
        goto fail;
    srv->access.watch = w;
    return;
fail:
    wf_log(srv->log, WF_LOG_WARNING, "client endpoint monitor: %s (handshakes "
           "failing before ZAP are not logged)", zmq_strerror(zmq_errno()));
    zmq_socket_monitor(srv->router, NULL, 0);
    if (w->pair)
        zmq_close(w->pair);
    free(w);
}

void srv_access_stop(wf_server_t *srv)
{
    struct wf_access_watch *w = srv->access.watch;
    if (w) {
        atomic_store(&w->stop, true);
        pthread_join(w->thread, NULL);
        if (srv->router)
            zmq_socket_monitor(srv->router, NULL, 0);
        zmq_close(w->pair);
        free(w);
        srv->access.watch = NULL;
    }
}

/* ------------------------------------------------------------------ */
/* the endpoint */

wf_status_t srv_access_prepare(wf_server_t *srv)
{
    const wf_settings_t *s = &srv->settings;
    const char *ep = srv->endpoint;
    if (strncmp(ep, "tcp://", 6) != 0) {
        srv->access.mode = SRV_ACCESS_IPC;
        if (s->client_keys[0])
            wf_log(srv->log, WF_LOG_NOTICE, "client_keys is set but the client "
                   "endpoint %s is not tcp://: not used (local clients are "
                   "told apart by their uid)", ep);
        return WF_OK;
    }
    if (s->client_keys[0]) {
        if (!srv->has_keys) {
            wf_log(srv->log, WF_LOG_ERR, "client_keys is set but key_file is "
                   "not: a CURVE endpoint needs this daemon's key pair "
                   "(weftctl keygen FILE writes one; key_file = FILE)");
            return WF_E_BAD_ARGUMENT;
        }
        char counts[64], err[512];
        if (load_client_keys(srv, counts, sizeof counts, err, sizeof err) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "client_keys: %s", err);
            return WF_E_BAD_ARGUMENT;
        }
        if (wf_curve_server(srv->router, &srv->keys, WF_ZAP_CLIENTS) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "CURVE on %s: %s", ep,
                   zmq_strerror(zmq_errno()));
            return WF_E_INTERNAL;
        }
        srv->access.mode = SRV_ACCESS_CURVE;
        watch_start(srv);
        wf_log(srv->log, WF_LOG_INFO, "client endpoint %s: CURVE, keys of "
               "client_keys (%s)", ep, counts);
        return WF_OK;
    }
    srv->access.mode = SRV_ACCESS_ANONYMOUS;
    if (tcp_loopback(ep)) {
        wf_log(srv->log, WF_LOG_NOTICE, "client endpoint %s: anonymous "
               "loopback access (no client_keys): every local user may do "
               "anything, admin operations included", ep);
        return WF_OK;
    }
    if (s->allow_anonymous) {
        wf_log(srv->log, WF_LOG_WARNING, "client endpoint %s without "
               "client_keys and allow_anonymous = true: anyone who reaches it "
               "may do anything (reconfigure, load and unload models, read "
               "every job's results)", ep);
        return WF_OK;
    }
    wf_log(srv->log, WF_LOG_ERR, "refusing to serve %s: a tcp:// client "
           "endpoint that is not loopback needs client_keys (CURVE keys of the "
           "clients allowed, with key_file), or allow_anonymous = true to let "
           "anyone who reaches it do anything; or listen on 127.0.0.1 or an "
           "ipc:// socket", ep);
    return WF_E_BAD_ARGUMENT;
}

wf_status_t srv_access_check_bound(wf_server_t *srv)
{
    if (srv->access.mode != SRV_ACCESS_ANONYMOUS || srv->settings.allow_anonymous)
        return WF_OK;
    /* "localhost" and "lo" name loopback here; check what was bound. */
    char last[WF_SETTINGS_ENDPOINT_MAX];
    size_t len = sizeof last;
    if (zmq_getsockopt(srv->router, ZMQ_LAST_ENDPOINT, last, &len) != 0)
        return WF_OK;
    last[sizeof last - 1] = '\0';
    if (tcp_loopback(last))
        return WF_OK;
    wf_log(srv->log, WF_LOG_ERR, "refusing to serve %s: it bound %s, which is "
           "not loopback, and there are no client_keys (allow_anonymous = true "
           "allows it)", srv->endpoint, last);
    return WF_E_BAD_ARGUMENT;
}

void srv_access_reload(wf_server_t *srv, const char *client_keys_before)
{
    const char *now = srv->settings.client_keys;
    if (srv->access.mode != SRV_ACCESS_CURVE) {
        if (strcmp(now, client_keys_before) != 0)
            wf_log(srv->log, WF_LOG_WARNING, "reload: client_keys changed; the "
                   "client endpoint is %s: it needs a restart, ignored",
                   mode_name(srv->access.mode));
        return;
    }
    if (!now[0]) {
        wf_log(srv->log, WF_LOG_ERR, "reload: client_keys removed; the CURVE "
               "endpoint keeps the keys it has (a restart turns CURVE off)");
        snprintf(srv->settings.client_keys, sizeof srv->settings.client_keys, "%s",
                 client_keys_before);
        return;
    }
    char counts[64], err[512];
    if (load_client_keys(srv, counts, sizeof counts, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reload: client_keys: %s; the old keys stay",
               err);
        return;
    }
    wf_log(srv->log, WF_LOG_INFO, "reload: client_keys re-read: %s (new "
           "connections; connected clients keep theirs)", counts);
}

/* ------------------------------------------------------------------ */
/* roles */

/* uid and pid out of an ipc connection's "Peer-Address" (libzmq appends
 * ":UID:GID:PID" from SO_PEERCRED when it accepts the connection). */
static bool peer_creds(const char *addr, unsigned long *uid, unsigned long *pid)
{
    if (!addr)
        return false;
    const char *p[3];
    const char *end = addr + strlen(addr);
    const char *c = end;
    for (int i = 2; i >= 0; i--) {
        while (c > addr && c[-1] != ':')
            c--;
        if (c == addr)
            return false;
        p[i] = c;
        c--;                    /* the ':' */
    }
    unsigned long v[3];
    for (int i = 0; i < 3; i++) {
        char *e;
        errno = 0;
        if (p[i][0] < '0' || p[i][0] > '9')
            return false;
        v[i] = strtoul(p[i], &e, 10);
        if (errno || (i < 2 ? *e != ':' : *e != '\0'))
            return false;
    }
    *uid = v[0];
    *pid = v[2];
    return true;
}

wf_role_t srv_access_role(wf_server_t *srv, zmq_msg_t *msg, char *who, size_t who_len)
{
    switch (srv->access.mode) {
    case SRV_ACCESS_CURVE: {
        const char *user = wf_msg_user_id(msg);
        const char *name = NULL;
        wf_role_t role = user ? wf_zap_client_role(user, &name) : WF_ROLE_NONE;
        const char *addr = zmq_msg_gets(msg, "Peer-Address");
        char qn[WF_QUOTE_MAX], qa[WF_QUOTE_MAX];
        wf_quote(qn, name ? name : "?");
        wf_quote(qa, addr ? addr : "?");
        snprintf(who, who_len, "key '%s' from %s", qn, qa);
        return role;
    }
    case SRV_ACCESS_IPC: {
        unsigned long uid = 0, pid = 0;
        if (!peer_creds(zmq_msg_gets(msg, "Peer-Address"), &uid, &pid)) {
            /* No credentials: the least role. */
            snprintf(who, who_len, "a local peer of unknown uid");
            return WF_ROLE_SUBMIT;
        }
        snprintf(who, who_len, "uid %lu pid %lu", uid, pid);
        return uid == 0 || uid == (unsigned long)geteuid() ? WF_ROLE_ADMIN
                                                            : WF_ROLE_SUBMIT;
    }
    case SRV_ACCESS_ANONYMOUS: {
        const char *addr = zmq_msg_gets(msg, "Peer-Address");
        char qa[WF_QUOTE_MAX];
        wf_quote(qa, addr ? addr : "?");
        snprintf(who, who_len, "anonymous client from %s", qa);
        return WF_ROLE_ADMIN;
    }
    }
    snprintf(who, who_len, "?");
    return WF_ROLE_NONE;
}

bool srv_access_op_allowed(wf_role_t role, uint32_t op)
{
    switch (op) {
    case WF_OP_RECONFIGURE:
    case WF_OP_LOAD_MODEL:
    case WF_OP_UNLOAD_MODEL:
        return role == WF_ROLE_ADMIN;
    default:
        return role == WF_ROLE_ADMIN || role == WF_ROLE_SUBMIT;
    }
}
