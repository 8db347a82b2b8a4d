/* access.c — the client plane's access control (README "Security"): who
 * may connect to the client endpoint and which role each request runs
 * with. Called by server.c (start-up, SIGHUP, teardown) and requests.c
 * (the role of a message); calls nothing else of daemon/server/.
 *
 * Three kinds of client endpoint (srv->access.mode):
 *   ipc://  no keys; the socket file's mode and group decide who may
 *           connect, and the peer's credentials (SO_PEERCRED, taken by
 *           the gate when it accepts the connection) the role: uid 0 or
 *           the daemon's effective uid is admin, anyone else submit;
 *   tcp:// with client_keys: CURVE with this daemon's key_file; the gate
 *           (gate.h) admits the listed keys and tells each message's
 *           key name and role;
 *   tcp:// without client_keys: anonymous, every client admin; only on a
 *           loopback address or with allow_anonymous (protected mode).
 * The gate logs the handshakes it refuses (rate-limited, with the
 * peer's address and key).
 */
#include "server_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "errf.h"

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
    free(srv->access.keys);
    srv->access.keys = e;
    srv->access.n_keys = n;
    srv_access_gate_keys(srv);
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

void srv_access_gate_keys(wf_server_t *srv)
{
    if (srv->gate && srv->access.mode == SRV_ACCESS_CURVE &&
        wf_gate_set_keys(srv->gate, srv->access.keys, srv->access.n_keys) != WF_OK)
        wf_log(srv->log, WF_LOG_ERR, "client_keys: out of memory; the gate keeps "
               "the keys it had");
}

void srv_access_stop(wf_server_t *srv)
{
    free(srv->access.keys);
    srv->access.keys = NULL;
    srv->access.n_keys = 0;
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
        srv->access.mode = SRV_ACCESS_CURVE;
        wf_log(srv->log, WF_LOG_INFO, "client endpoint %s: CURVE, keys of "
               "client_keys (%s)", ep, counts);
        return WF_OK;
    }
    srv->access.mode = SRV_ACCESS_ANONYMOUS;
    if (tcp_loopback(ep)) {
        if (s->anonymous_admin || s->allow_anonymous)
            wf_log(srv->log, WF_LOG_NOTICE, "client endpoint %s: anonymous "
                   "loopback access (no client_keys): every local user may do "
                   "anything, admin operations included (%s)", ep,
                   s->anonymous_admin ? "anonymous_admin" : "allow_anonymous");
        else
            wf_log(srv->log, WF_LOG_NOTICE, "client endpoint %s: anonymous "
                   "loopback access (no client_keys): every local user may submit "
                   "jobs; admin operations need the ipc:// socket as root or this "
                   "daemon's user, client_keys, or anonymous_admin = true", ep);
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
    const char *last = srv->access.bound_ep;
    if (!last[0] || tcp_loopback(last))
        return WF_OK;
    wf_log(srv->log, WF_LOG_ERR, "refusing to serve %s: it bound %s, which is "
           "not loopback, and there are no client_keys (allow_anonymous = true "
           "allows it)", srv->endpoint, last);
    return WF_E_BAD_ARGUMENT;
}

bool srv_access_reload(wf_server_t *srv, const char *client_keys_before, char *why,
                       size_t why_len)
{
    const char *now = srv->settings.client_keys;
    if (srv->access.mode != SRV_ACCESS_CURVE) {
        if (strcmp(now, client_keys_before) != 0)
            wf_log(srv->log, WF_LOG_WARNING, "reload: client_keys changed; the "
                   "client endpoint is %s: it needs a restart, ignored",
                   mode_name(srv->access.mode));
        return true;
    }
    if (!now[0]) {
        wf_log(srv->log, WF_LOG_ERR, "reload: client_keys removed; the CURVE "
               "endpoint keeps the keys it has (a restart turns CURVE off)");
        snprintf(srv->settings.client_keys, sizeof srv->settings.client_keys, "%s",
                 client_keys_before);
        snprintf(why, why_len, "client_keys removed; the previous keys stay");
        return false;
    }
    char counts[64], err[512];
    if (load_client_keys(srv, counts, sizeof counts, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reload: client_keys: %s; the old keys stay",
               err);
        snprintf(why, why_len, "client_keys not read; the previous keys stay");
        return false;
    }
    wf_log(srv->log, WF_LOG_INFO, "reload: client_keys re-read: %s (open "
           "connections too: a key no longer listed is closed, a changed role "
           "applies from its next message)", counts);
    return true;
}

/* ------------------------------------------------------------------ */
/* roles */

wf_role_t srv_access_role(wf_server_t *srv, const wf_gate_meta_t *m, char *who,
                          size_t who_len)
{
    char qa[WF_QUOTE_MAX];
    wf_quote(qa, m->addr);
    switch (srv->access.mode) {
    case SRV_ACCESS_CURVE: {
        char qn[WF_QUOTE_MAX];
        wf_quote(qn, m->curve ? m->key_name : "?");
        snprintf(who, who_len, "key '%s' from %s", qn, qa);
        return m->curve ? m->key_role : WF_ROLE_NONE;
    }
    case SRV_ACCESS_IPC:
        if (!m->has_creds) {
            /* No credentials: the least role. */
            snprintf(who, who_len, "a local peer of unknown uid");
            return WF_ROLE_SUBMIT;
        }
        snprintf(who, who_len, "uid %u pid %u", m->uid, m->pid);
        return m->uid == 0 || m->uid == (uint32_t)geteuid() ? WF_ROLE_ADMIN
                                                              : WF_ROLE_SUBMIT;
    case SRV_ACCESS_ANONYMOUS:
        snprintf(who, who_len, "anonymous client from %s", qa);
        /* off loopback only with allow_anonymous, which says anyone may do
         * anything; on loopback as the ipc:// socket's other local users
         * unless anonymous_admin */
        return srv->settings.allow_anonymous || srv->settings.anonymous_admin
                   ? WF_ROLE_ADMIN
                   : WF_ROLE_SUBMIT;
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
