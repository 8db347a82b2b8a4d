/* nccl_standin.c — the NCCL stand-in of nccl_standin.h: a bootstrap root
 * (ZeroMQ ROUTER in a thread) that hands every rank of an id the
 * endpoints of the others, then comm_zmq worlds between them. */
#include "support/nccl_standin.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "comm/comm_zmq.h"

#define MAGIC "WFSTANDI"            /* id bytes 0..8 */
#define MAX_RANKS 64                /* of one bootstrap */
#define SESSIONS 8                  /* bootstraps gathering at once */
#define CONSUMED 256                /* nonces remembered as used */
#define HANDLES 512                 /* handles remembered for shrink */
#define ID_MAX 32                   /* ROUTER identity bytes kept */

typedef struct session {
    uint64_t nonce;                 /* 0: free */
    int nranks, got;
    unsigned char ids[MAX_RANKS][ID_MAX]; /* by rank */
    size_t id_len[MAX_RANKS];
    char eps[MAX_RANKS][WF_COMM_ZMQ_ENDPOINT_MAX];
} session_t;

typedef struct handle_rec {
    const wf_comm_t *h;             /* NULL: free */
    uint64_t nonce;
    int nranks, rank;
    wf_comm_zmq_local_t *domain;    /* borrowed: the world's */
    uint32_t timeout_ms;
    char root_ep[WF_COMM_ZMQ_ENDPOINT_MAX]; /* its bootstrap root */
} handle_rec_t;

struct wf_nccl_standin {
    wf_nccl_api_t api;              /* arg = this */
    void *zctx;                     /* own context: root and every rank */
    void *root;                     /* ROUTER (root thread only) */
    char root_ep[WF_COMM_ZMQ_ENDPOINT_MAX];
    pthread_t thread;
    atomic_int stop;
    session_t *sessions;            /* SESSIONS (root thread only) */
    uint64_t consumed[CONSUMED];    /* (root thread only) */
    unsigned n_consumed;
    pthread_mutex_t mu;             /* guards handles, counters */
    handle_rec_t handles[HANDLES];
    unsigned next_handle;
    wf_nccl_standin_counters_t cnt;
    int version;                    /* what version() answers */
};

/* ---- root --------------------------------------------------------------- */

static void root_reply(wf_nccl_standin_t *s, const void *id, size_t id_len,
                       const char *text)
{
    zmq_send(s->root, id, id_len, ZMQ_SNDMORE);
    zmq_send(s->root, text, strlen(text), 0);
}

static void root_refuse(wf_nccl_standin_t *s, const void *id, size_t id_len,
                        const char *why)
{
    pthread_mutex_lock(&s->mu);
    s->cnt.refused++;
    pthread_mutex_unlock(&s->mu);
    char text[160];
    snprintf(text, sizeof text, "E %s", why);
    root_reply(s, id, id_len, text);
}

/* One request [identity][nonce u64, nranks i32, rank i32, endpoint]. */
static void root_request(wf_nccl_standin_t *s, const unsigned char *id, size_t id_len,
                         const unsigned char *b, size_t len)
{
    uint64_t nonce;
    int32_t nranks, rank;
    if (len < 17 || len > 16 + WF_COMM_ZMQ_ENDPOINT_MAX || b[len - 1] != '\0' ||
        id_len > ID_MAX) {
        root_refuse(s, id, id_len, "malformed bootstrap request");
        return;
    }
    memcpy(&nonce, b, 8);
    memcpy(&nranks, b + 8, 4);
    memcpy(&rank, b + 12, 4);
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || nonce == 0) {
        root_refuse(s, id, id_len, "bad nranks or rank");
        return;
    }
    for (unsigned i = 0; i < s->n_consumed && i < CONSUMED; i++)
        if (s->consumed[i] == nonce) {
            root_refuse(s, id, id_len, "unique id already used");
            return;
        }
    session_t *ss = NULL, *free_ss = NULL;
    for (int i = 0; i < SESSIONS; i++) {
        if (s->sessions[i].nonce == nonce)
            ss = &s->sessions[i];
        else if (!s->sessions[i].nonce && !free_ss)
            free_ss = &s->sessions[i];
    }
    if (!ss) {
        if (!free_ss) {
            root_refuse(s, id, id_len, "too many bootstraps at once");
            return;
        }
        ss = free_ss;
        memset(ss, 0, sizeof *ss);
        ss->nonce = nonce;
        ss->nranks = nranks;
    }
    if (ss->nranks != nranks || ss->id_len[rank]) {
        root_refuse(s, id, id_len, ss->nranks != nranks ? "nranks differ between ranks"
                                                        : "rank given twice");
        return;
    }
    memcpy(ss->ids[rank], id, id_len);
    ss->id_len[rank] = id_len;
    snprintf(ss->eps[rank], sizeof ss->eps[rank], "%.255s", (const char *)b + 16);
    if (++ss->got < ss->nranks)
        return;
    /* complete: everyone gets every endpoint; the id is used up */
    size_t cap = (size_t)ss->nranks * WF_COMM_ZMQ_ENDPOINT_MAX + 4;
    char *text = malloc(cap);
    if (text) {
        size_t o = (size_t)snprintf(text, cap, "OK");
        for (int r = 0; r < ss->nranks; r++)
            o += (size_t)snprintf(text + o, cap - o, "\n%s", ss->eps[r]);
        for (int r = 0; r < ss->nranks; r++)
            root_reply(s, ss->ids[r], ss->id_len[r], text);
        free(text);
    }
    s->consumed[s->n_consumed++ % CONSUMED] = nonce;
    ss->nonce = 0;
}

static void *root_main(void *arg)
{
    wf_nccl_standin_t *s = arg;
    unsigned char id[256], body[16 + WF_COMM_ZMQ_ENDPOINT_MAX + 8];
    while (!atomic_load(&s->stop)) {
        zmq_pollitem_t it = { s->root, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        int il = zmq_recv(s->root, id, sizeof id, 0);
        int more = 0;
        size_t ml = sizeof more;
        zmq_getsockopt(s->root, ZMQ_RCVMORE, &more, &ml);
        if (il < 0 || !more)
            continue;
        int bl = zmq_recv(s->root, body, sizeof body, 0);
        if (bl < 0)
            continue;
        if ((size_t)bl > sizeof body) {
            root_refuse(s, id, (size_t)il, "request too long");
            continue;
        }
        root_request(s, id, (size_t)il > sizeof id ? sizeof id : (size_t)il, body,
                     (size_t)bl);
    }
    return NULL;
}

/* ---- ranks -------------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The world this thread joined last (a daemon's worker shrinks the world
 * it holds behind comm_staged.h's wrapper, whose address is not the
 * handle this stand-in made). */
static _Thread_local handle_rec_t tl_last;

static void remember(wf_nccl_standin_t *s, const wf_comm_t *h, const char *root_ep,
                     uint64_t nonce, int nranks, int rank, wf_comm_zmq_local_t *domain,
                     uint32_t timeout_ms)
{
    pthread_mutex_lock(&s->mu);
    handle_rec_t *r = NULL;
    for (unsigned i = 0; i < HANDLES && !r; i++)
        if (s->handles[i].h == h)
            r = &s->handles[i];       /* an address reused after a destroy */
    if (!r)
        r = &s->handles[s->next_handle++ % HANDLES];
    *r = (handle_rec_t){ h, nonce, nranks, rank, domain, timeout_ms, "" };
    snprintf(r->root_ep, sizeof r->root_ep, "%s", root_ep);
    tl_last = *r;
    pthread_mutex_unlock(&s->mu);
}

/* Bootstrap rank `rank` of `nranks` under nonce at the root `root_ep`,
 * then join the comm_zmq world. */
static wf_status_t join(wf_nccl_standin_t *s, const char *root_ep, uint64_t nonce,
                        int nranks, int rank, wf_comm_zmq_local_t *domain,
                        uint32_t timeout_ms, uint32_t op_timeout_ms, wf_comm_t **ret)
{
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return WF_E_BAD_ARGUMENT;
    if (timeout_ms == 0)
        timeout_ms = 60000;
    wf_comm_zmq_endpoint_t *ep = NULL;
    wf_status_t st = wf_comm_zmq_endpoint_new(s->zctx, "tcp://127.0.0.1:*", 0, 0, NULL, &ep);
    if (st != WF_OK)
        return st;
    void *d = zmq_socket(s->zctx, ZMQ_DEALER);
    int zero = 0;
    char *reply = malloc((size_t)nranks * WF_COMM_ZMQ_ENDPOINT_MAX + 8);
    char (*eps)[WF_COMM_ZMQ_ENDPOINT_MAX] = calloc((size_t)nranks, sizeof *eps);
    const char **ptrs = calloc((size_t)nranks, sizeof *ptrs);
    if (!d || !reply || !eps || !ptrs) {
        st = WF_E_NO_MEMORY;
        goto out;
    }
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(d, root_ep) != 0) {
        st = WF_E_CONNECT;
        goto out;
    }
    unsigned char req[16 + WF_COMM_ZMQ_ENDPOINT_MAX];
    const char *addr = wf_comm_zmq_endpoint_address(ep);
    size_t al = strlen(addr) + 1;
    int32_t n32 = nranks, r32 = rank;
    memcpy(req, &nonce, 8);
    memcpy(req + 8, &n32, 4);
    memcpy(req + 12, &r32, 4);
    memcpy(req + 16, addr, al);
    if (zmq_send(d, req, 16 + al, 0) < 0) {
        st = WF_E_CONNECT;
        goto out;
    }
    uint64_t t0 = now_ms();
    int got = -1;
    for (;;) {
        if (domain && wf_comm_zmq_local_aborted(domain)) {
            st = WF_E_ABORTED;
            goto out;
        }
        zmq_pollitem_t it = { d, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 20) > 0) {
            got = zmq_recv(d, reply, (size_t)nranks * WF_COMM_ZMQ_ENDPOINT_MAX + 7, 0);
            break;
        }
        if (now_ms() - t0 >= timeout_ms) {
            st = WF_E_ABORTED;           /* NCCL's init timeout: abort */
            goto out;
        }
    }
    if (got < 2 || reply[0] != 'O' || reply[1] != 'K') {
        st = got > 0 && reply[0] == 'E' ? WF_E_BAD_ARGUMENT : WF_E_INTERNAL;
        goto out;
    }
    reply[got] = '\0';
    char *p = reply + 2;
    for (int r = 0; r < nranks; r++) {
        if (*p != '\n') {
            st = WF_E_INTERNAL;
            goto out;
        }
        p++;
        size_t l = strcspn(p, "\n");
        snprintf(eps[r], sizeof eps[r], "%.*s", (int)l, p);
        ptrs[r] = eps[r];
        p += l;
    }
    wf_comm_zmq_config_t cfg = {
        .zmq_ctx = s->zctx,
        .local = domain,
        .world_id = nonce | 1,
        .nranks = nranks,
        .endpoints = ptrs,
        .connect_timeout_ms = (int)timeout_ms,
        .op_timeout_ms = (int)op_timeout_ms,
        .max_message_bytes = 0,
    };
    char err[256];
    st = wf_comm_zmq_world_join(&cfg, rank, &ep, err, sizeof err, ret);
    if (st == WF_OK)
        remember(s, *ret, root_ep, nonce, nranks, rank, domain, timeout_ms);
out:
    if (d)
        zmq_close(d);
    wf_comm_zmq_endpoint_destroy(&ep);
    free(reply);
    free(eps);
    free(ptrs);
    return st;
}

/* ---- the table ---------------------------------------------------------- */

static int si_version(void *arg)
{
    const wf_nccl_standin_t *s = arg;
    return s->version;
}

static wf_status_t si_unique_id(void *arg, wf_nccl_id_t *ret_id)
{
    wf_nccl_standin_t *s = arg;
    uint64_t nonce = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&nonce, sizeof nonce, 1, f) != 1) {
        if (f)
            fclose(f);
        return WF_E_INTERNAL;
    }
    fclose(f);
    nonce |= 1;                         /* never 0 */
    memset(ret_id, 0, sizeof *ret_id);
    memcpy(ret_id->bytes, MAGIC, 8);
    memcpy(ret_id->bytes + 8, &nonce, 8);
    snprintf((char *)ret_id->bytes + 16, WF_NCCL_ID_BYTES - 16, "%.111s", s->root_ep);
    pthread_mutex_lock(&s->mu);
    s->cnt.unique_ids++;
    pthread_mutex_unlock(&s->mu);
    return WF_OK;
}

static wf_status_t si_init(void *arg, const wf_nccl_id_t *id, int nranks, int rank,
                           const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    wf_nccl_standin_t *s = arg;
    if (!id || !opts || !ret_comm || memcmp(id->bytes, MAGIC, 8) != 0 ||
        !memchr(id->bytes + 16, '\0', WF_NCCL_ID_BYTES - 16))
        return WF_E_BAD_ARGUMENT;
    uint64_t nonce;
    memcpy(&nonce, id->bytes + 8, 8);
    wf_status_t st = join(s, (const char *)id->bytes + 16, nonce, nranks, rank,
                          opts->abort_domain, opts->init_timeout_ms,
                          opts->op_timeout_ms, ret_comm);
    if (st == WF_OK) {
        pthread_mutex_lock(&s->mu);
        s->cnt.inits++;
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

static wf_status_t si_shrink(void *arg, wf_comm_t *c, const int *exclude, int n,
                             const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    wf_nccl_standin_t *s = arg;
    handle_rec_t rec;
    memset(&rec, 0, sizeof rec);
    pthread_mutex_lock(&s->mu);
    for (unsigned i = 0; i < HANDLES; i++)
        if (s->handles[i].h == c)
            rec = s->handles[i];
    pthread_mutex_unlock(&s->mu);
    if (!rec.h && tl_last.h)
        rec = tl_last;      /* c wraps the world this thread joined */
    if (!rec.h || n < 1 || n >= rec.nranks)
        return WF_E_BAD_ARGUMENT;
    int below = 0;
    uint64_t nonce = rec.nonce ^ 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) {
        if (exclude[i] < 0 || exclude[i] >= rec.nranks || exclude[i] == rec.rank ||
            (i && exclude[i] <= exclude[i - 1]))
            return WF_E_BAD_ARGUMENT;
        below += exclude[i] < rec.rank;
        nonce = (nonce ^ (uint64_t)exclude[i]) * 0x100000001b3ull;
    }
    wf_status_t st = join(s, rec.root_ep, nonce | 1, rec.nranks - n, rec.rank - below,
                          opts ? opts->abort_domain : rec.domain,
                          opts && opts->init_timeout_ms ? opts->init_timeout_ms
                                                        : rec.timeout_ms,
                          opts ? opts->op_timeout_ms : 0, ret_comm);
    if (st == WF_OK) {
        pthread_mutex_lock(&s->mu);
        s->cnt.shrinks++;
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

static bool si_node_gpu(void *arg, const wf_settings_t *st)
{
    (void)arg;
    return st->nccl && st->device_count > 0;  /* each stand-in device is its own */
}

wf_status_t wf_nccl_standin_new(bool with_shrink, wf_nccl_standin_t **ret)
{
    wf_nccl_standin_t *s = calloc(1, sizeof *s);
    if (!s)
        return WF_E_NO_MEMORY;
    s->sessions = calloc(SESSIONS, sizeof *s->sessions);
    s->zctx = zmq_ctx_new();
    pthread_mutex_init(&s->mu, NULL);
    atomic_init(&s->stop, 0);
    if (!s->sessions || !s->zctx)
        goto fail;
    s->root = zmq_socket(s->zctx, ZMQ_ROUTER);
    int zero = 0;
    size_t len = sizeof s->root_ep;
    if (!s->root || zmq_setsockopt(s->root, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(s->root, "tcp://127.0.0.1:*") != 0 ||
        zmq_getsockopt(s->root, ZMQ_LAST_ENDPOINT, s->root_ep, &len) != 0)
        goto fail;
    if (pthread_create(&s->thread, NULL, root_main, s) != 0)
        goto fail;
    s->version = 22809;
    s->api = (wf_nccl_api_t){
        .name = "nccl-standin",
        .arg = s,
        .version = si_version,
        .unique_id = si_unique_id,
        .init = si_init,
        .shrink = with_shrink ? si_shrink : NULL,
        .node_gpu = si_node_gpu,
    };
    *ret = s;
    return WF_OK;
fail:
    if (s->root)
        zmq_close(s->root);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    pthread_mutex_destroy(&s->mu);
    free(s->sessions);
    free(s);
    return WF_E_INTERNAL;
}

void wf_nccl_standin_destroy(wf_nccl_standin_t **ps)
{
    if (!ps || !*ps)
        return;
    wf_nccl_standin_t *s = *ps;
    *ps = NULL;
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    zmq_close(s->root);
    zmq_ctx_term(s->zctx);
    pthread_mutex_destroy(&s->mu);
    free(s->sessions);
    free(s);
}

void wf_nccl_standin_set_version(wf_nccl_standin_t *s, int version)
{
    if (version > 0)
        s->version = version;
}

const wf_nccl_api_t *wf_nccl_standin_api(wf_nccl_standin_t *s)
{
    return &s->api;
}

wf_nccl_standin_counters_t wf_nccl_standin_counters(wf_nccl_standin_t *s)
{
    pthread_mutex_lock(&s->mu);
    wf_nccl_standin_counters_t c = s->cnt;
    pthread_mutex_unlock(&s->mu);
    return c;
}
