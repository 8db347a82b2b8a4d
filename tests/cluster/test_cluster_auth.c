/* test_cluster_auth.c — the cluster plane attacked as a stranger would,
 * end to end: real weftd processes (cpu:2 each) on loopback,
 * raw ZeroMQ peers with the real codec (proto/cluster_msg.h), real key
 * files. One scenario per run (argv[2]), each under ~30 s:
 *
 *  keys      node_keys lists a, b and c; a (coordinator_node) and b form
 *            a world (mesh dp=2 x ring=2: b's replica has its roots on b,
 *            so its inputs cross the CURVE tensor channel) and serve a
 *            burst of jobs, every one checked against the fp64 reference
 *            and b's devices serving. Then:
 *            - two stranger weftd (their own key, not in a's node_keys;
 *              one named b, one named s, each with a list of its own that
 *              holds a's real public key) get no handshake: once a
 *              refused both (two log lines "auth: refused" with their
 *              key), a's world is still 2 nodes / 4 ranks at epoch 1, the
 *              strangers have no world and no job;
 *            - a raw CURVE peer with c's listed key saying hello as b is
 *              refused ("the connection's key is node c's"), epoch 1 kept;
 *            - on the tensor channel, a raw CURVE peer with c's key and
 *              routing id b, one with routing id zz (its user id c is not
 *              zz: dropped, logged) and a plain one with routing id b
 *              (each attempt seen made: the handshake succeeded, or for
 *              the plain one failed): none receives anything, the next
 *              burst is correct and b's devices serve it;
 *            - SIGTERM: every daemon exits 0.
 *  channel   no keys: a and b as above; a raw DEALER with routing id b
 *            connects to the tensor channel (its handshake done) and
 *            says hi: without
 *            ROUTER_HANDOVER libzmq refuses it while b's connection lives,
 *            so it receives nothing and the next burst (inputs of b's
 *            replica on the channel) is correct with b serving.
 *  squatter  node_keys: a plain ROUTER holds the rendezvous port. The
 *            coordinator a fails to start (exit status 1) and its log
 *            names the port; member b, started against the squatter,
 *            sends nothing it can read (CURVE pinned to a's key): b's
 *            connection to the squatter ends in its handshake (the
 *            squatter's socket events) and the squatter receives no
 *            frame.
 *  table     no keys: 17 raw hellos refused (16 of another protocol
 *            version, 1 with a bad data endpoint: field 'data'), the table
 *            holds a alone, then b joins (serving, 2 nodes); a hello for
 *            b from another connection with epoch 2^64-1 is ignored (no
 *            answer: the next message on that connection is the refuse
 *            of a hello of another version sent after it; epoch still 1,
 *            b ready); a new node x says hello
 *            with epoch 2^64-1 and dies: the epochs go 2 (with x) and 3
 *            (x lost), never wrap; x's entry expires; jobs are correct.
 *            A cluster without node_keys is refused at start naming
 *            node_keys and allow_anonymous, off loopback and on it (every
 *            local user could join); the no-keys scenarios set
 *            allow_anonymous.
 *
 * Usage: test_cluster_auth PATH_TO_WEFTD keys|channel|squatter|table.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster_msg.h"
#include "keys.h"
#include "proto.h"
#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify and log lines */
#define IN_FLIGHT 8

typedef clusterd_node_t node_t;
static const char *weftd;
static char coordinator[64], rdv_ep[80];
static char dir[64];                 /* key files */
static void *zctx;

/* ---- keys -------------------------------------------------------- */

typedef struct nkey {
    wf_keypair_t kp;
    char path[128];                  /* key pair file */
} nkey_t;

static bool key_make(nkey_t *k, const char *name)
{
    char err[256];
    snprintf(k->path, sizeof k->path, "%s/%s.key", dir, name);
    if (wf_keypair_generate(&k->kp, err, sizeof err) != WF_OK ||
        wf_keypair_write(k->path, &k->kp, err, sizeof err) != WF_OK) {
        fprintf(stderr, "key %s: %s\n", name, err);
        return false;
    }
    return true;
}

static bool file_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    bool ok = f && fputs(text, f) >= 0;
    if (f)
        ok = fclose(f) == 0 && ok;
    return ok;
}

/* ---- daemons ----------------------------------------------------- */

typedef struct dopts {
    const char *name;
    const char *data_address;
    const char *node_keys;           /* NULL: none */
    const char *key_file;
    const char *coordinator_node;
    const char *level;               /* --log-level */
    bool log;                        /* stderr to a file (d->p.log_path) */
    bool anonymous;                  /* --allow-anonymous true */
} dopts_t;

static bool node_start(node_t *d, const dopts_t *o)
{
    if (!clusterd_node_open(d, o->name, "ca"))
        return false;
    if (o->log)
        snprintf(d->p.log_path, sizeof d->p.log_path, "%s/%s-%d.log", dir, o->name,
                 (int)clusterd_now_ms() % 100000);
    const char *argv[40] = { weftd, "--listen", d->p.endpoint, "--devices", "cpu:2",
                             "--data-address", o->data_address, "--mesh", "dp=2,ring=2",
                             "--coordinator", coordinator, "--nodes", "2",
                             "--node-name", o->name, "--cluster-timeout-ms", "2000",
                             "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "1000",
                             "--cpu-memory", "512M", "--log-level",
                             o->level ? o->level : "warning" };
    int n = 23;
    if (o->node_keys) {
        argv[n++] = "--node-keys";
        argv[n++] = o->node_keys;
        argv[n++] = "--key-file";
        argv[n++] = o->key_file;
        argv[n++] = "--coordinator-node";
        argv[n++] = o->coordinator_node;
    }
    if (o->anonymous) {
        argv[n++] = "--allow-anonymous";
        argv[n++] = "true";
    }
    argv[n] = NULL;
    return clusterd_exec(&d->p, argv, NULL);
}

static uint64_t served(node_t *d)
{
    wf_status_info_t si;
    uint64_t n = 0;
    if (!clusterd_status(&d->p, &si))
        return 0;
    for (uint32_t i = 0; i < si.device_count; i++)
        n += si.devices[i].jobs_served;
    return n;
}

static uint64_t min_served(node_t *d)
{
    wf_status_info_t si;
    uint64_t m = UINT64_MAX;
    if (!clusterd_status(&d->p, &si) || si.device_count == 0)
        return 0;
    for (uint32_t i = 0; i < si.device_count; i++)
        if (si.devices[i].jobs_served < m)
            m = si.devices[i].jobs_served;
    return m;
}

#include "support/jcase_names.h"

static const jcase_t cases[] = {
    /* name          B   Sq  Skv Hq Hkv D   in   out  causal lse   scale rot  fp32 ring_any uly_any lb */
    { "f32 64",      1, 64, 64, 4,  4,  16, F32, F32, 0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f16 48 GQA",  2, 48, 48, 8,  2,  16, F16, F16, 1, false, 0,    A2A, DEF, DEF, DEF, DEF },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* IN_FLIGHT jobs at once to a, each checked against the fp64 reference. */
static unsigned burst(node_t *a, uint64_t seed, const char *label)
{
    return jcase_burst(a->p.endpoint, cases, N_CASES, IN_FLIGHT, seed, TIMEOUT_MS, 2,
                       label);
}

static bool status_of(node_t *d, wf_status_info_t *si)
{
    memset(si, 0, sizeof *si);
    return clusterd_status(&d->p, si);
}

static const wf_node_info_t *find_node(const wf_status_info_t *si, const char *name)
{
    for (uint32_t i = 0; i < si->node_count; i++)
        if (strcmp(si->nodes[i].name, name) == 0)
            return &si->nodes[i];
    return NULL;
}

/* Lines of d's log holding `needle` against a count to reach, for
 * wait_for. */
typedef struct log_count_arg {
    node_t *d;
    const char *needle;
    int want;                  /* the count to reach */
    int now;                   /* the last count read */
} log_count_arg_t;

static bool log_count_reached(void *arg)
{
    log_count_arg_t *l = arg;
    FILE *f = fopen(l->d->p.log_path, "r");
    char line[1024];
    l->now = 0;
    while (f && fgets(line, sizeof line, f))
        l->now += strstr(line, l->needle) != NULL;
    if (f)
        fclose(f);
    return l->now >= l->want;
}

/* Does d's status not list node `name`? For wait_for. */
typedef struct unlisted_arg {
    node_t *d;
    const char *name;
    wf_status_info_t si;       /* the last status read */
} unlisted_arg_t;

static bool unlisted(void *arg)
{
    unlisted_arg_t *u = arg;
    return status_of(u->d, &u->si) && find_node(&u->si, u->name) == NULL;
}

static void stop_clean(node_t *d)
{
    clusterd_kill(&d->p, SIGTERM);
    CHECK(d->p.reaped && WIFEXITED(d->p.exit_status) &&
          WEXITSTATUS(d->p.exit_status) == 0);
}

/* ---- raw peers ---------------------------------------------------- */

static wf_cmsg_t msg;
static wf_ctl_msg_t ctl;

/* A monitor of socket s (before it connects or binds): a PAIR that
 * receives s's events of the mask. Closed with monitor_close, before s. */
static void *monitor_of(void *s, int events)
{
    static int seq;
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://weft-ca-monitor-%d", seq++);
    CHECK(zmq_socket_monitor(s, ep, events) == 0);
    void *m = zmq_socket(zctx, ZMQ_PAIR);
    int zero = 0;
    zmq_setsockopt(m, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(zmq_connect(m, ep) == 0);
    return m;
}

/* Stop s's monitor, then close its reader m: in this order, because
 * ZeroMQ's I/O thread sends each event with a blocking send, which never
 * returns once the reader is gone, and that thread serves every socket of
 * the context. */
static void monitor_close(void *s, void *m)
{
    zmq_socket_monitor(s, NULL, 0);
    zmq_close(m);
}

/* The next event from monitor m within ms (0: none came). */
static int monitor_next(void *m, int ms)
{
    zmq_pollitem_t it = { m, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, ms) <= 0)
        return 0;
    zmq_msg_t f;
    zmq_msg_init(&f);
    int ev = 0;
    if (zmq_msg_recv(&f, m, 0) >= 0 && zmq_msg_size(&f) >= 2) {
        uint16_t e;
        memcpy(&e, zmq_msg_data(&f), sizeof e);
        ev = e;
    }
    bool more = zmq_msg_more(&f);
    zmq_msg_close(&f);
    if (more) {                      /* the endpoint */
        zmq_msg_init(&f);
        zmq_msg_recv(&f, m, 0);
        zmq_msg_close(&f);
    }
    return ev;
}

/* Wait (WAIT_EVENT_MS) for an event of the mask from monitor m. */
static bool monitor_wait(void *m, int mask)
{
    int64_t end = clusterd_now_ms() + (int64_t)wait_bound_ms(WAIT_EVENT_MS);
    for (int64_t left; (left = end - clusterd_now_ms()) > 0;)
        if (monitor_next(m, (int)left) & mask)
            return true;
    fprintf(stderr, "no socket event of mask 0x%x\n", (unsigned)mask);
    return false;
}

/* The events that end a handshake, either way. */
#define HANDSHAKE_DONE ZMQ_EVENT_HANDSHAKE_SUCCEEDED
#define HANDSHAKE_FAILED                                                     \
    (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | \
     ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_DISCONNECTED)

/* A DEALER with routing id `rid` (NULL: ZeroMQ's), CURVE client with kp
 * pinned to server_key when kp is not NULL, connected to ep; with
 * ret_mon, a monitor of its handshakes (monitor_of) into *ret_mon. */
static void *raw_dealer_mon(const char *ep, const char *rid, const wf_keypair_t *kp,
                            const char *server_key, void **ret_mon)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (rid)
        zmq_setsockopt(s, ZMQ_ROUTING_ID, rid, strlen(rid));
    if (kp) {
        zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, server_key, WF_KEY_Z85_LEN);
        zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, kp->public_key, WF_KEY_Z85_LEN);
        zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, kp->secret_key, WF_KEY_Z85_LEN);
    }
    if (ret_mon)
        *ret_mon = monitor_of(s, HANDSHAKE_DONE | HANDSHAKE_FAILED);
    CHECK(zmq_connect(s, ep) == 0);
    return s;
}

static void *raw_dealer(const char *ep, const char *rid, const wf_keypair_t *kp,
                        const char *server_key)
{
    return raw_dealer_mon(ep, rid, kp, server_key, NULL);
}

/* Encode msg and send it as one frame (more: a frame follows). */
static bool send_msg(void *sock, int flags)
{
    wf_buf_t b = { 0 };
    bool ok = wf_cmsg_put(&ctl, &msg) == WF_OK && wf_ctl_encode(&ctl, &b) == WF_OK &&
              zmq_send(sock, b.data, b.len, flags) == (int)b.len;
    wf_buf_free(&b);
    return ok;
}

static bool send_hello(void *sock, uint64_t proto, const char *weft, const char *name,
                       const char *data, uint64_t epoch)
{
    memset(&msg, 0, sizeof msg);
    msg.type = WF_CMSG_HELLO;
    wf_cmsg_hello_t *h = &msg.u.hello;
    h->proto = proto;
    snprintf(h->weft, sizeof h->weft, "%s", weft);
    snprintf(h->nccl, sizeof h->nccl, "none");
    snprintf(h->name, sizeof h->name, "%s", name);
    h->devices = 2;
    snprintf(h->data, sizeof h->data, "%s", data);
    h->epoch = epoch;
    return send_msg(sock, 0);
}

/* The type of the next message that decodes within ms, the message in
 * msg; WF_CMSG_UNKNOWN when none came. */
static wf_cmsg_type_t recv_next(void *sock, int ms)
{
    int64_t end = clusterd_now_ms() + ms;
    for (;;) {
        int64_t left = end - clusterd_now_ms();
        zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
        if (left <= 0 || zmq_poll(&it, 1, (long)left) <= 0)
            return WF_CMSG_UNKNOWN;
        static char buf[WF_CTL_MAX_BYTES];
        char err[WF_PROTO_ERROR_MAX];
        int n = zmq_recv(sock, buf, sizeof buf, 0);
        if (n < 0 || (size_t)n > sizeof buf)
            continue;
        if (wf_ctl_decode(buf, (size_t)n, &ctl, err, sizeof err) != WF_OK)
            continue;
        wf_cmsg_get(&ctl, &msg, err, sizeof err);
        if (msg.type != WF_CMSG_UNKNOWN)
            return msg.type;
    }
}

/* The next message of type `type` within ms, into msg (others are
 * passed over). */
static bool recv_type(void *sock, wf_cmsg_type_t type, int ms)
{
    int64_t end = clusterd_now_ms() + ms;
    for (int64_t left; (left = end - clusterd_now_ms()) > 0;)
        if (recv_next(sock, (int)left) == type)
            return true;
    return false;
}

/* Frames waiting on sock within ms (drained); 0 ms: those already there. */
static int frames_within(void *sock, int ms)
{
    int n = 0;
    int64_t end = clusterd_now_ms() + ms;
    for (;;) {
        int64_t left = end - clusterd_now_ms();
        zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
        if (left <= 0 || zmq_poll(&it, 1, (long)left) <= 0)
            return n;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) >= 0)
            n++;
        zmq_msg_close(&m);
    }
}

/* A "hi" on the tensor channel for world `epoch`. */
static bool send_hi(void *sock, uint64_t epoch)
{
    memset(&msg, 0, sizeof msg);
    msg.type = WF_CMSG_XFER_HI;
    msg.u.xfer.epoch = epoch;
    return send_msg(sock, 0);
}

/* The tensor channel's endpoint from a's log ("tensor channel on tcp://..."). */
static bool xfer_of(node_t *a, char *ep, size_t len)
{
    char line[512];
    if (!clusterd_log_find(&a->p, "tensor channel on tcp://", TIMEOUT_MS, line,
                           sizeof line))
        return false;
    const char *p = strstr(line, "tcp://");
    snprintf(ep, len, "%.*s", (int)strcspn(p, " \t"), p);
    return true;
}

/* ---- scenarios ----------------------------------------------------- */

static void scenario_keys(void)
{
    nkey_t ka, kb, kc, ks;
    CHECK(key_make(&ka, "a") && key_make(&kb, "b") && key_make(&kc, "c") &&
          key_make(&ks, "s"));
    char list[256], text[512];
    snprintf(list, sizeof list, "%s/nodes", dir);
    snprintf(text, sizeof text, "# the world\na %s\nb %s\nc %s\n", ka.kp.public_key,
             kb.kp.public_key, kc.kp.public_key);
    CHECK(file_write(list, text));
    /* the strangers' own lists: a's real (public) key and theirs */
    char list_sb[256], list_ss[256];
    snprintf(list_sb, sizeof list_sb, "%s/stranger-b", dir);
    snprintf(text, sizeof text, "a %s\nb %s\n", ka.kp.public_key, ks.kp.public_key);
    CHECK(file_write(list_sb, text));
    snprintf(list_ss, sizeof list_ss, "%s/stranger-s", dir);
    snprintf(text, sizeof text, "a %s\ns %s\n", ka.kp.public_key, ks.kp.public_key);
    CHECK(file_write(list_ss, text));

    node_t a, b, sb, ss;
    dopts_t oa = { "a", "127.0.0.1", list, ka.path, "a", "info", true, false };
    dopts_t ob = { "b", "127.0.0.2", list, kb.path, "a", NULL, false, false };
    CHECK(node_start(&a, &oa));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, &ob));
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 2 node(s), 4 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    CHECK(burst(&a, 10, "keys: a and b") == IN_FLIGHT);
    uint64_t b_served = served(&b);
    printf("b served %llu part(s)\n", (unsigned long long)b_served);
    CHECK(min_served(&b) > 0);

    /* strangers: stock weftd with their own key and list */
    dopts_t osb = { "b", "127.0.0.3", list_sb, ks.path, "a", NULL, false, false };
    dopts_t oss = { "s", "127.0.0.4", list_ss, ks.path, "a", NULL, false, false };
    CHECK(node_start(&sb, &osb));
    CHECK(node_start(&ss, &oss));
    CHECK(clusterd_node_wait(&sb, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(clusterd_node_wait(&ss, "READY=1", TIMEOUT_MS, NULL, 0));
    /* each stranger's handshake refused (what they send is never read):
     * a's world did not change */
    char refused_ks[128];
    snprintf(refused_ks, sizeof refused_ks, "auth: refused %s", ks.kp.public_key);
    log_count_arg_t lc = { &a, refused_ks, 2, 0 };
    CHECK(wait_for(log_count_reached, &lc, WAIT_EVENT_MS));
    printf("a refused the strangers' key %d time(s)\n", lc.now);
    wf_status_info_t si;
    CHECK(status_of(&a, &si));
    CHECK(si.world_epoch == 1 && si.world_size == 4 && si.node_count == 2);
    CHECK(find_node(&si, "s") == NULL);
    const wf_node_info_t *nb = find_node(&si, "b");
    CHECK(nb && strcmp(nb->state, "ready") == 0);
    node_t *strangers[2] = { &sb, &ss };
    for (int i = 0; i < 2; i++) {
        CHECK(status_of(strangers[i], &si));
        printf("stranger %s: state %s, world size %u\n", strangers[i]->p.name,
               si.cluster_state, si.world_size);
        CHECK(si.world_size == 0 && si.node_count == 0);
        CHECK(served(strangers[i]) == 0);
    }

    /* c's listed key saying hello as b: refused, names the key's node */
    CHECK(status_of(&a, &si));
    void *h = raw_dealer(rdv_ep, NULL, &kc.kp, ka.kp.public_key);
    CHECK(send_hello(h, WF_PROTOCOL_VERSION, si.weft_version, "b",
                     "tcp://127.0.0.9:9,10", UINT64_MAX));
    bool refused = recv_type(h, WF_CMSG_REFUSE, TIMEOUT_MS);
    CHECK(refused);
    if (refused) {
        printf("hello as b with c's key refused: %s\n", msg.u.text);
        CHECK(strstr(msg.u.text, "node c's") != NULL);
    }
    zmq_close(h);

    /* the tensor channel: takeover attempts */
    char xfer[128] = "";
    CHECK(xfer_of(&a, xfer, sizeof xfer));
    printf("tensor channel at %s\n", xfer);
    void *m1, *m2, *m3;
    void *t1 = raw_dealer_mon(xfer, "b", &kc.kp, ka.kp.public_key, &m1);
    void *t2 = raw_dealer_mon(xfer, "zz", &kc.kp, ka.kp.public_key, &m2);
    void *t3 = raw_dealer_mon(xfer, "b", NULL, NULL, &m3);
    /* the attempts are made: c's key is admitted (then the ROUTER keeps
     * b's live connection), the plain peer's handshake fails */
    CHECK(monitor_wait(m1, HANDSHAKE_DONE));
    CHECK(monitor_wait(m2, HANDSHAKE_DONE));
    CHECK(monitor_wait(m3, HANDSHAKE_FAILED));
    CHECK(send_hi(t1, 1) && send_hi(t2, 1));
    zmq_send(t3, "x", 1, ZMQ_DONTWAIT);   /* no handshake: never leaves */
    CHECK(clusterd_log_find(&a.p, "claiming node zz from node c's key", TIMEOUT_MS,
                            NULL, 0));
    CHECK(burst(&a, 20, "keys: after the takeover attempts") == IN_FLIGHT);
    uint64_t b_after = served(&b);
    printf("b served %llu part(s) after\n", (unsigned long long)b_after);
    CHECK(b_after > b_served);
    /* what a sent them it sent while handling their messages, before the
     * log line and the whole burst: it is there by now */
    CHECK(frames_within(t1, 0) == 0);
    CHECK(frames_within(t2, 0) == 0);
    CHECK(frames_within(t3, 0) == 0);
    CHECK(status_of(&a, &si));
    CHECK(si.world_epoch == 1 && si.world_size == 4 && si.world_id[0] == '\0');
    monitor_close(t1, m1);
    monitor_close(t2, m2);
    monitor_close(t3, m3);
    zmq_close(t1);
    zmq_close(t2);
    zmq_close(t3);

    clusterd_node_close(&sb);
    clusterd_node_close(&ss);
    stop_clean(&b);
    stop_clean(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&a);
}

static void scenario_channel(void)
{
    node_t a, b;
    dopts_t oa = { "a", "127.0.0.1", NULL, NULL, NULL, "info", true, true };
    dopts_t ob = { "b", "127.0.0.2", NULL, NULL, NULL, NULL, false, true };
    CHECK(node_start(&a, &oa));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, &ob));
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 2 node(s), 4 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    CHECK(burst(&a, 30, "channel: a and b") == IN_FLIGHT);
    uint64_t b_served = served(&b);
    CHECK(min_served(&b) > 0);
    char xfer[128] = "";
    CHECK(xfer_of(&a, xfer, sizeof xfer));
    printf("tensor channel at %s\n", xfer);
    void *m;
    void *t = raw_dealer_mon(xfer, "b", NULL, NULL, &m);
    CHECK(monitor_wait(m, HANDSHAKE_DONE));   /* the attempt is made */
    CHECK(send_hi(t, 1));
    CHECK(burst(&a, 40, "channel: after the takeover attempt") == IN_FLIGHT);
    uint64_t b_after = served(&b);
    printf("b served %llu part(s), then %llu\n", (unsigned long long)b_served,
           (unsigned long long)b_after);
    CHECK(b_after > b_served);
    /* b's inputs of the burst went to b, not to t: anything sent to t was
     * sent before the burst's replies, so it is there by now */
    int got = frames_within(t, 0);
    printf("the raw DEALER named b received %d frame(s)\n", got);
    CHECK(got == 0);
    monitor_close(t, m);
    zmq_close(t);
    stop_clean(&b);
    stop_clean(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&a);
}

static void scenario_squatter(void)
{
    nkey_t ka, kb;
    CHECK(key_make(&ka, "a") && key_make(&kb, "b"));
    char list[256], text[512];
    snprintf(list, sizeof list, "%s/nodes", dir);
    snprintf(text, sizeof text, "a %s\nb %s\n", ka.kp.public_key, kb.kp.public_key);
    CHECK(file_write(list, text));
    void *sq = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(sq, ZMQ_LINGER, &zero, sizeof zero);
    void *sqm = monitor_of(sq, ZMQ_EVENT_ACCEPTED | HANDSHAKE_FAILED);
    CHECK(zmq_bind(sq, rdv_ep) == 0);

    node_t a, b;
    dopts_t oa = { "a", "127.0.0.1", list, ka.path, "a", NULL, true, false };
    dopts_t ob = { "b", "127.0.0.2", list, kb.path, "a", NULL, false, false };
    CHECK(node_start(&a, &oa));
    CHECK(clusterd_wait_exit(&a.p, TIMEOUT_MS));
    /* 1: serving failed (not a sanitizer's exit code) */
    CHECK(a.p.reaped && WIFEXITED(a.p.exit_status) && WEXITSTATUS(a.p.exit_status) == 1);
    char line[512] = "";
    CHECK(clusterd_log_find(&a.p, "cannot bind the rendezvous port", TIMEOUT_MS, line,
                            sizeof line));
    printf("coordinator refused to start: %s\n", line);
    CHECK(strstr(line, coordinator) != NULL);

    CHECK(node_start(&b, &ob));
    CHECK(clusterd_node_wait(&b, "READY=1", TIMEOUT_MS, NULL, 0));
    /* b's connection is accepted, then its handshake fails (b may try
     * again or not: libzmq gives up when it sees the mismatch itself);
     * every frame the squatter gets meanwhile counts */
    int got = 0, accepted = 0, ended = 0;
    int64_t end = clusterd_now_ms() + (int64_t)wait_bound_ms(WAIT_EVENT_MS);
    for (int64_t left; ended == 0 && (left = end - clusterd_now_ms()) > 0;) {
        zmq_pollitem_t it[2] = { { sq, 0, ZMQ_POLLIN, 0 }, { sqm, 0, ZMQ_POLLIN, 0 } };
        if (zmq_poll(it, 2, (long)left) <= 0)
            continue;
        got += frames_within(sq, 0);
        int ev = it[1].revents ? monitor_next(sqm, 0) : 0;
        accepted += ev == ZMQ_EVENT_ACCEPTED;
        ended += accepted > 0 && (ev & HANDSHAKE_FAILED) != 0;
    }
    got += frames_within(sq, 0);
    printf("the squatter received %d frame(s) from member b; its connection "
           "accepted %d time(s), ended in the handshake %d\n", got, accepted, ended);
    CHECK(accepted >= 1 && ended == 1);
    CHECK(got == 0);
    wf_status_info_t si;
    CHECK(status_of(&b, &si));
    CHECK(si.world_size == 0);
    CHECK(!b.p.reaped);
    stop_clean(&b);
    monitor_close(sq, sqm);
    zmq_close(sq);
    clusterd_node_close(&b);
    clusterd_node_close(&a);
}

/* A cluster without node_keys nor allow_anonymous at `coord` (a loopback
 * one too: every local user reaches it) exits 1 at start naming both. */
static void refused_without_keys(const char *coord)
{
    node_t p;
    char saved[64];
    snprintf(saved, sizeof saved, "%s", coordinator);
    snprintf(coordinator, sizeof coordinator, "%s", coord);
    dopts_t op = { "p", "127.0.0.1", NULL, NULL, NULL, NULL, true, false };
    CHECK(node_start(&p, &op));
    CHECK(clusterd_wait_exit(&p.p, TIMEOUT_MS));
    CHECK(p.p.reaped && WIFEXITED(p.p.exit_status) && WEXITSTATUS(p.p.exit_status) == 1);
    char line[512] = "";
    CHECK(clusterd_log_find(&p.p, "without node_keys", TIMEOUT_MS, line, sizeof line));
    printf("no keys at %s: %s\n", coord, line);
    CHECK(strstr(line, "allow_anonymous") != NULL && strstr(line, "local user") != NULL);
    clusterd_node_close(&p);
    snprintf(coordinator, sizeof coordinator, "%s", saved);
}

static void scenario_table(void)
{
    char loopback[64];
    snprintf(loopback, sizeof loopback, "%s", coordinator);
    refused_without_keys("192.0.2.1:7300");
    refused_without_keys(loopback);

    node_t a, b;
    dopts_t oa = { "a", "127.0.0.1", NULL, NULL, NULL, "info", true, true };
    dopts_t ob = { "b", "127.0.0.2", NULL, NULL, NULL, NULL, false, true };
    CHECK(node_start(&a, &oa));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    wf_status_info_t si;
    CHECK(status_of(&a, &si));
    char weft[32];
    snprintf(weft, sizeof weft, "%s", si.weft_version);

    /* 17 refused hellos, each from its own connection and name */
    void *r[17];
    unsigned refused = 0;
    for (int i = 0; i < 17; i++) {
        char name[16];
        snprintf(name, sizeof name, "r%d", i);
        r[i] = raw_dealer(rdv_ep, NULL, NULL, NULL);
        bool bad_data = i == 16;
        CHECK(send_hello(r[i], bad_data ? WF_PROTOCOL_VERSION : WF_PROTOCOL_VERSION + 7,
                         weft, name, bad_data ? "tcp://127.0.0.1:0,70000" : "tcp://127.0.0.9:9,10",
                         1));
        if (recv_type(r[i], WF_CMSG_REFUSE, TIMEOUT_MS)) {
            refused++;
            if (bad_data) {
                printf("bad data endpoint refused: %s\n", msg.u.text);
                CHECK(strstr(msg.u.text, "field 'data'") != NULL);
            }
        }
    }
    printf("%u of 17 raw hellos refused\n", refused);
    CHECK(refused == 17);
    for (int i = 0; i < 17; i++)
        zmq_close(r[i]);
    CHECK(status_of(&a, &si));
    CHECK(si.node_count == 1);

    /* a real node joins */
    CHECK(node_start(&b, &ob));
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 2 node(s), 4 rank(s)",
                             TIMEOUT_MS, NULL, 0));

    /* b's name from another connection, epoch 2^64-1: ignored */
    void *imp = raw_dealer(rdv_ep, NULL, NULL, NULL);
    CHECK(send_hello(imp, WF_PROTOCOL_VERSION, weft, "b", "tcp://127.0.0.9:9,10",
                     UINT64_MAX));
    CHECK(clusterd_log_find(&a.p, "hello for node b from another connection ignored",
                            TIMEOUT_MS, NULL, 0));
    /* an answer to it would come first on this connection: the next
     * message is the refuse of a hello of another version sent now */
    CHECK(send_hello(imp, WF_PROTOCOL_VERSION + 7, weft, "b", "tcp://127.0.0.9:9,10", 1));
    CHECK(recv_next(imp, TIMEOUT_MS) == WF_CMSG_REFUSE);
    CHECK(status_of(&a, &si));
    printf("after an impostor's hello with epoch 2^64-1: world epoch %llu\n",
           (unsigned long long)si.world_epoch);
    CHECK(si.world_epoch == 1 && si.world_size == 4);
    const wf_node_info_t *nb = find_node(&si, "b");
    CHECK(nb && strcmp(nb->state, "ready") == 0);
    zmq_close(imp);

    /* a new node x, epoch 2^64-1, that never gets ready */
    void *x = raw_dealer(rdv_ep, NULL, NULL, NULL);
    CHECK(send_hello(x, WF_PROTOCOL_VERSION, weft, "x", "tcp://127.0.0.9:9,10",
                     UINT64_MAX));
    CHECK(recv_type(x, WF_CMSG_WORLD, TIMEOUT_MS));
    printf("x got the world of epoch %llu\n", (unsigned long long)msg.u.world.epoch);
    CHECK(msg.u.world.epoch == 2);
    zmq_close(x);
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 3, 2 node(s), 4 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    CHECK(status_of(&a, &si));
    CHECK(si.world_epoch == 3);
    const wf_node_info_t *nx = find_node(&si, "x");
    CHECK(nx && strcmp(nx->state, "lost") == 0);
    CHECK(burst(&a, 50, "table: a and b") == IN_FLIGHT);
    /* x's entry expires 2 x cluster_timeout_ms after the loss */
    unlisted_arg_t ux = { .d = &a, .name = "x" };
    CHECK(wait_for(unlisted, &ux, WAIT_EVENT_MS));
    CHECK(ux.si.world_epoch == 3 && ux.si.node_count == 2);
    stop_clean(&b);
    stop_clean(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&a);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD keys|channel|squatter|table\n",
                argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    weftd = argv[1];
    int port = test_port();
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", port);
    snprintf(rdv_ep, sizeof rdv_ep, "tcp://%s", coordinator);
    snprintf(dir, sizeof dir, "/tmp/weft-ca-%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    zctx = zmq_ctx_new();
    double t0 = now_s();
    if (strcmp(argv[2], "keys") == 0)
        scenario_keys();
    else if (strcmp(argv[2], "channel") == 0)
        scenario_channel();
    else if (strcmp(argv[2], "squatter") == 0)
        scenario_squatter();
    else if (strcmp(argv[2], "table") == 0)
        scenario_table();
    else {
        fprintf(stderr, "unknown scenario %s\n", argv[2]);
        failed++;
    }
    zmq_ctx_term(zctx);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("test_cluster_auth %s: %d failure(s) in %.1f s\n", argv[2], failed,
           now_s() - t0);
    return failed ? 1 : 0;
}
