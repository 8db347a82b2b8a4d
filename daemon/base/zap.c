/* zap.c — the ZAP handler thread and CURVE socket options (see zap.h). */
#include "zap.h"

#include "errf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define ZAP_MAX_FRAMES 8
#define LOG_BURST 20             /* refusals logged per window */
#define LOG_WINDOW_S 60

typedef struct zap_domain {
    const char *name;            /* WF_ZAP_CLIENTS / WF_ZAP_NODES */
    wf_key_entry_t *e;           /* admitted keys; owned */
    size_t n;
} zap_domain_t;

struct wf_zap {
    void *zctx;
    wf_log_t *log;
    void *rep;                   /* REP on ZAP_ENDPOINT; the thread's */
    pthread_t thread;
    atomic_bool stop;
    pthread_mutex_t mu;          /* guards domains */
    zap_domain_t domains[2];
    atomic_uint_least64_t refused, admitted;
    time_t window;               /* start of the log window; thread only */
    unsigned logged;             /* refusals logged in it */
    uint64_t suppressed;         /* refusals not logged in it */
};

static zap_domain_t *find_domain(wf_zap_t *z, const char *name, size_t len)
{
    for (size_t i = 0; i < 2; i++)
        if (strlen(z->domains[i].name) == len &&
            memcmp(z->domains[i].name, name, len) == 0)
            return &z->domains[i];
    return NULL;
}

/* Log a refusal unless the window's burst is spent. */
static void log_refusal(wf_zap_t *z, const char *domain, const char *addr,
                        const char *key, const char *why)
{
    time_t now = time(NULL);
    if (now - z->window >= LOG_WINDOW_S) {
        if (z->suppressed)
            wf_log(z->log, WF_LOG_WARNING, "auth: %llu more handshakes "
                   "refused in the last %d s (not logged one by one)",
                   (unsigned long long)z->suppressed, LOG_WINDOW_S);
        z->window = now;
        z->logged = 0;
        z->suppressed = 0;
    }
    if (z->logged == LOG_BURST) {
        z->suppressed++;
        return;
    }
    z->logged++;
    wf_log(z->log, WF_LOG_WARNING, "auth: refused %s from %s on %s: %s",
           key, addr, domain, why);
}

/* Answer one request held in f[0..n). */
static void answer(wf_zap_t *z, zmq_msg_t *f, size_t n)
{
    const char *status = "400", *text = "refused";
    char user[WF_ZAP_USER_MAX] = "";
    char addr[WF_QUOTE_MAX] = "?", dom[WF_QUOTE_MAX] = "?";
    char key[WF_KEY_Z85_LEN + 1] = "";
    if (n >= 6) {
        wf_escape(addr, sizeof addr, zmq_msg_data(&f[3]), zmq_msg_size(&f[3]),
                  WF_ESC_ASCII);
        wf_escape(dom, sizeof dom, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]),
                  WF_ESC_ASCII);
    }
    bool curve = n == 7 && zmq_msg_size(&f[5]) == 5 &&
                 memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
                 zmq_msg_size(&f[6]) == 32;
    if (curve)
        zmq_z85_encode(key, zmq_msg_data(&f[6]), 32);
    const char *why = "not a CURVE handshake";
    if (curve) {
        pthread_mutex_lock(&z->mu);
        zap_domain_t *d = find_domain(z, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
        const wf_key_entry_t *e = d ? wf_keylist_find_key(d->e, d->n, key) : NULL;
        if (!d) {
            why = "unknown domain";
        } else if (!e) {
            why = "key not in the allow-list";
        } else {
            if (strcmp(d->name, WF_ZAP_CLIENTS) == 0)
                snprintf(user, sizeof user, "%s:%s", wf_role_name(e->role), e->name);
            else
                snprintf(user, sizeof user, "%s", e->name);
            status = "200";
            text = "OK";
        }
        pthread_mutex_unlock(&z->mu);
    }
    if (status[0] == '2') {
        atomic_fetch_add(&z->admitted, 1);
        wf_log(z->log, WF_LOG_DEBUG, "auth: admitted %s (%s) from %s on %s",
               user, key, addr, dom);
    } else {
        atomic_fetch_add(&z->refused, 1);
        log_refusal(z, dom, addr, curve ? key : "a peer", why);
    }
    /* version, request id (echoed), status code, text, user id, metadata */
    zmq_send(z->rep, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(z->rep, n >= 2 ? zmq_msg_data(&f[1]) : "",
             n >= 2 ? zmq_msg_size(&f[1]) : 0, ZMQ_SNDMORE);
    zmq_send(z->rep, status, 3, ZMQ_SNDMORE);
    zmq_send(z->rep, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(z->rep, user, strlen(user), ZMQ_SNDMORE);
    zmq_send(z->rep, "", 0, 0);
}

static void *zap_thread(void *arg)
{
    wf_zap_t *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = { .socket = z->rep, .events = ZMQ_POLLIN };
        if (zmq_poll(&it, 1, 100) <= 0)
            continue;
        zmq_msg_t f[ZAP_MAX_FRAMES];
        size_t n = 0;
        bool more = true, failed = false;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, z->rep, 0) < 0) {
                zmq_msg_close(&m);
                failed = true;
                break;
            }
            more = zmq_msg_more(&m);
            if (n < ZAP_MAX_FRAMES) {
                zmq_msg_init(&f[n]);
                zmq_msg_move(&f[n++], &m);
            }
            zmq_msg_close(&m);       /* too many frames: refused below */
        }
        if (!failed)
            answer(z, f, n <= 7 ? n : 0);
        for (size_t i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
    return NULL;
}

wf_status_t wf_zap_start(void *zctx, wf_log_t *log, wf_zap_t **ret)
{
    wf_zap_t *z = calloc(1, sizeof *z);
    if (!z)
        return WF_E_NO_MEMORY;
    z->zctx = zctx;
    z->log = log;
    z->domains[0].name = WF_ZAP_CLIENTS;
    z->domains[1].name = WF_ZAP_NODES;
    pthread_mutex_init(&z->mu, NULL);
    z->rep = zmq_socket(zctx, ZMQ_REP);
    int zero = 0;
    if (!z->rep || zmq_setsockopt(z->rep, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(z->rep, ZAP_ENDPOINT) != 0) {
        wf_log(log, WF_LOG_ERR, "auth: cannot start the ZAP handler: %s",
               zmq_strerror(zmq_errno()));
        if (z->rep)
            zmq_close(z->rep);
        pthread_mutex_destroy(&z->mu);
        free(z);
        return WF_E_INTERNAL;
    }
    if (pthread_create(&z->thread, NULL, zap_thread, z) != 0) {
        zmq_close(z->rep);
        pthread_mutex_destroy(&z->mu);
        free(z);
        return WF_E_INTERNAL;
    }
    *ret = z;
    return WF_OK;
}

wf_status_t wf_zap_set(wf_zap_t *z, const char *domain,
                       const wf_key_entry_t *e, size_t n)
{
    zap_domain_t *d = find_domain(z, domain, strlen(domain));
    if (!d)
        return WF_E_BAD_ARGUMENT;
    wf_key_entry_t *copy = NULL;
    if (n) {
        copy = malloc(n * sizeof *copy);
        if (!copy)
            return WF_E_NO_MEMORY;
        memcpy(copy, e, n * sizeof *copy);
    }
    pthread_mutex_lock(&z->mu);
    wf_key_entry_t *old = d->e;
    d->e = copy;
    d->n = n;
    pthread_mutex_unlock(&z->mu);
    free(old);
    return WF_OK;
}

uint64_t wf_zap_refused(wf_zap_t *z)
{
    return atomic_load(&z->refused);
}

uint64_t wf_zap_admitted(wf_zap_t *z)
{
    return atomic_load(&z->admitted);
}

void wf_zap_stop(wf_zap_t *z)
{
    if (!z)
        return;
    atomic_store(&z->stop, true);
    pthread_join(z->thread, NULL);
    zmq_close(z->rep);
    for (size_t i = 0; i < 2; i++)
        free(z->domains[i].e);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

wf_status_t wf_curve_server(void *sock, const wf_keypair_t *kp,
                            const char *domain)
{
    int one = 1;
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, kp->secret_key,
                       WF_KEY_Z85_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) != 0)
        return WF_E_INTERNAL;
    return WF_OK;
}

wf_status_t wf_curve_client(void *sock, const wf_keypair_t *kp,
                            const char *server_public_key)
{
    if (zmq_setsockopt(sock, ZMQ_CURVE_SERVERKEY, server_public_key,
                       WF_KEY_Z85_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_PUBLICKEY, kp->public_key,
                       WF_KEY_Z85_LEN) != 0 ||
        zmq_setsockopt(sock, ZMQ_CURVE_SECRETKEY, kp->secret_key,
                       WF_KEY_Z85_LEN) != 0)
        return WF_E_INTERNAL;
    return WF_OK;
}

const char *wf_msg_user_id(void *msg)
{
    const char *u = zmq_msg_gets(msg, "User-Id");
    return u && u[0] ? u : NULL;
}

wf_role_t wf_zap_client_role(const char *user_id, const char **ret_name)
{
    if (!user_id)
        return WF_ROLE_NONE;
    const char *colon = strchr(user_id, ':');
    if (!colon)
        return WF_ROLE_NONE;
    size_t n = (size_t)(colon - user_id);
    wf_role_t r = WF_ROLE_NONE;
    if (n == 6 && memcmp(user_id, "submit", 6) == 0)
        r = WF_ROLE_SUBMIT;
    else if (n == 5 && memcmp(user_id, "admin", 5) == 0)
        r = WF_ROLE_ADMIN;
    if (ret_name)
        *ret_name = colon + 1;
    return r;
}
