/* fuzz_gate.c — libFuzzer target for the client plane's gate
 * (daemon/net/gate.c, gate_curve.c): the first code an unauthenticated
 * remote peer reaches. Two gates run for the whole run (started once in
 * LLVMFuzzerInitialize), one NULL and one CURVE, each on an ipc:// socket
 * in a temporary directory, with one inproc ROUTER behind both as in
 * server.c. Per input: connect a plain unix socket, write, half-close,
 * read until EOF (or a short bound), close, and wait until the gate has
 * closed its side; meanwhile the ROUTER drains what the gate delivers,
 * checks it against the limits in force and echoes its frames back (the
 * reply path).
 *
 * Input: a selector byte, then the payload.
 *   bit 0      0: the NULL gate, 1: the CURVE gate
 *   bits 1-2   what the harness sends first: 0 nothing (the payload is the
 *              whole stream), 1 a valid greeting, 2 greeting + READY
 *              (NULL) / greeting + a valid HELLO (CURVE), 3 the same for
 *              NULL; for CURVE a whole client handshake (WELCOME opened,
 *              INITIATE sent, READY read), then the payload as records
 *              boxed into MESSAGE commands (box_records below)
 *   bits 3-5   the payload written in 1..8 chunks, each read by the gate
 *              before the next is written (partial reads); with NULL an
 *              even count of chunks goes to a third gate, configured as
 *              the cluster plane's (the peer's routing id kept, a message
 *              over a limit closes the connection, heartbeats of 20 ms
 *              with a timeout of 60 ms)
 *   bits 6-7   limit set (limit_sets below: small frames / messages, many
 *              frames, handshake_ms 1; set 3 with a CURVE handshake uses a
 *              client key not in the allow-list)
 * Any ASan / UBSan report in the gate's thread aborts the run (both
 * libraries are instrumented, -fno-sanitize-recover); so does a message
 * the ROUTER gets that breaks the gate's contract (gate.h) or, on an
 * authenticated CURVE connection, the oracle's prediction (X below), a
 * gate that keeps a connection open after its peer left, or a growing
 * fd count.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <linux/sockios.h>
#include <time.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "gate.h"
#include "keys.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define OUT_MAX (256u << 10)     /* the most one input writes */
#define INPUT_MS 300             /* one input's bound on every wait */

static const wf_gate_limits_t limit_sets[4] = {
    { .frame_bytes = 256, .max_frames = 4, .message_bytes = 600,
      .max_connections = 8, .max_handshakes = 4, .handshake_ms = 500 },
    { .frame_bytes = 64, .max_frames = 2, .message_bytes = 100,
      .max_connections = 8, .max_handshakes = 4, .handshake_ms = 500 },
    /* client_max_frames at its largest (64, the gate's MAX_PARTS) */
    { .frame_bytes = 4096, .max_frames = 64, .message_bytes = 8192,
      .max_connections = 8, .max_handshakes = 4, .handshake_ms = 500 },
    /* handshake_ms below the setting's least (100): the deadline is met
     * mid-handshake without the harness waiting */
    { .frame_bytes = 256, .max_frames = 4, .message_bytes = 600,
      .max_connections = 8, .max_handshakes = 4, .handshake_ms = 1 },
};

static struct {
    char dir[64];
    char path[3][128];           /* NULL, CURVE, NULL as the cluster plane's */
    void *zctx, *router;
    wf_gate_t *gate[3];
    int cur;                     /* the gate of this input */
    wf_log_t log;
    const wf_gate_limits_t *lim; /* in force */
    uint8_t spub[32];            /* the daemon's key */
    uint8_t cpub[2][32], csec[2][32]; /* client keys: listed, not listed */
    uint8_t cnpub[32], cnsec[32]; /* the client's short-term key */
    int fds_base;
    unsigned runs;
    unsigned long routed;        /* messages the ROUTER got */
    bool verbose;                /* FUZZ_GATE_VERBOSE set: the gates' debug
                                    log and a line per input */
} F;

/* The oracle of an authenticated CURVE connection: while its records are
 * well-formed (boxed, fresh nonces, plain outer frames) what the gate must
 * do with each message is known: forward it whole when within the limits,
 * or its header marked over a limit. The ROUTER gets these messages in
 * order (the tail may be lost when the gate closes the connection: its
 * DEALER has linger 0), so each message it gets must be the next one
 * predicted. */
#define EXPECT_MAX 2048
static struct {
    bool on;                     /* this input's messages are predicted */
    unsigned n, got;             /* predicted; received so far */
    bool within[EXPECT_MAX];     /* each: within the limits */
    unsigned frames[EXPECT_MAX]; /* and its frames */
} X;

static void check(bool cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_gate: %s\n", what);
        abort();
    }
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return 0;
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------------------ */
/* the ROUTER side */

/* One message from the ROUTER, checked against the gate's contract and
 * echoed back. False: none waiting. */
static bool router_one(void)
{
    zmq_msg_t parts[256];
    size_t n = 0;
    bool more = true;
    while (more) {
        check(n < 256, "more frames than the gate keeps reach the ROUTER");
        zmq_msg_init(&parts[n]);
        if (zmq_msg_recv(&parts[n], F.router, n ? 0 : ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&parts[n]);
            check(n == 0, "a message cut short at the ROUTER");
            return false;
        }
        more = zmq_msg_more(&parts[n]);
        n++;
    }
    F.routed++;
    check(n >= 2, "a message without the gate frame");
    if (F.cur == 2)     /* the peer's own routing id, or the gate's */
        check(zmq_msg_size(&parts[0]) >= 1 && zmq_msg_size(&parts[0]) <= 255,
              "a routing id of no bytes or more than 255");
    else
        check(zmq_msg_size(&parts[0]) == 5, "a routing id not of 5 bytes");
    wf_gate_meta_t meta;
    check(wf_gate_meta_read(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), &meta),
          "the second frame is not the gate's");
    check(memchr(meta.limit, '\0', sizeof meta.limit) != NULL, "limit not terminated");
    size_t frames = n - 2;
    uint64_t bytes = 0;
    for (size_t i = 2; i < n; i++)
        bytes += zmq_msg_size(&parts[i]);
    if (X.on && meta.curve && X.got < X.n) {
        check(X.within[X.got] == !meta.limit[0],
              X.within[X.got] ? "a message within the limits refused"
                              : "a message over a limit forwarded");
        check(!X.within[X.got] || n - 2 == X.frames[X.got],
              "a message forwarded with other frames than sent");
        X.got++;
    }
    check(F.cur != 2 || !meta.limit[0], "a message over a limit forwarded by a "
          "gate that closes on one");
    if (meta.limit[0]) {
        /* the header kept: the first frame, or an empty one and the next */
        check(frames <= 2, "more than the header kept of a message over a limit");
    } else {
        check(frames >= 1, "an empty message forwarded");
        check(frames <= F.lim->max_frames, "a message over max_frames forwarded");
        check(bytes <= F.lim->message_bytes, "a message over message_bytes forwarded");
        for (size_t i = 2; i < n; i++)
            check(zmq_msg_size(&parts[i]) <= F.lim->frame_bytes,
                  "a frame over frame_bytes forwarded");
    }
    /* echo: [id, the peer's frames] (dropped by the ROUTER when the peer
     * is gone or full) */
    zmq_msg_send(&parts[0], F.router, frames ? ZMQ_SNDMORE | ZMQ_DONTWAIT : ZMQ_DONTWAIT);
    zmq_msg_close(&parts[0]);
    zmq_msg_close(&parts[1]);
    for (size_t i = 2; i < n; i++) {
        zmq_msg_send(&parts[i], F.router, i + 1 < n ? ZMQ_SNDMORE | ZMQ_DONTWAIT
                                                     : ZMQ_DONTWAIT);
        zmq_msg_close(&parts[i]);
    }
    return true;
}

static void router_drain(void)
{
    while (router_one())
        ;
}

/* Wait up to ms for `ev` on fd (fd < 0: only the ROUTER), draining the
 * ROUTER meanwhile; the fd's revents. */
static short pump(int fd, short ev, int ms)
{
    zmq_pollitem_t it[2] = { { F.router, -1, ZMQ_POLLIN, 0 }, { NULL, fd, ev, 0 } };
    int rc = zmq_poll(it, fd >= 0 ? 2 : 1, ms);
    if (rc > 0 && (it[0].revents & ZMQ_POLLIN))
        router_drain();
    return fd >= 0 && rc > 0 ? it[1].revents : 0;
}

/* ------------------------------------------------------------------ */
/* the peer */

typedef struct outbuf {
    uint8_t *p;
    size_t n;
} outbuf_t;

static void out_add(outbuf_t *o, const void *d, size_t n)
{
    if (o->n + n > OUT_MAX)
        n = OUT_MAX - o->n;
    memcpy(o->p + o->n, d, n);
    o->n += n;
}

static void out_frame(outbuf_t *o, uint8_t flags, const void *d, size_t n)
{
    uint8_t h[9];
    if (n > 255) {
        h[0] = flags | 2;
        put_be64(h + 1, n);
        out_add(o, h, 9);
    } else {
        h[0] = flags;
        h[1] = (uint8_t)n;
        out_add(o, h, 2);
    }
    out_add(o, d, n);
}

static void greeting(outbuf_t *o, bool curve)
{
    uint8_t g[64] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1 };
    memcpy(g + 12, curve ? "CURVE" : "NULL", curve ? 5 : 4);
    out_add(o, g, sizeof g);
}

static const uint8_t props_dealer[] = { 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y',
                                        'p', 'e', 0, 0, 0, 6, 'D', 'E', 'A', 'L', 'E',
                                        'R' };

static void hello(outbuf_t *o)
{
    uint8_t h[200] = { 5, 'H', 'E', 'L', 'L', 'O', 1, 0 };
    memcpy(h + 80, F.cnpub, 32);
    put_be64(h + 112, 1);
    uint8_t nonce[24] = "CurveZMQHELLO---", zero[64] = { 0 };
    put_be64(nonce + 16, 1);
    check(crypto_box_easy(h + 120, zero, sizeof zero, nonce, F.spub, F.cnsec) == 0,
          "crypto_box_easy");
    out_frame(o, 4, h, sizeof h);
}

/* Write all of d (or until the gate stops reading, or the bound). */
static bool send_all(int fd, const uint8_t *d, size_t n, int64_t end)
{
    while (n) {
        ssize_t w = send(fd, d, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            d += w;
            n -= (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR)
            return false;
        if (now_ms() >= end)
            return false;
        pump(fd, POLLOUT, 5);
    }
    return true;
}

/* Until the gate has read everything written (SIOCOUTQ: bytes the
 * receiver has not taken yet), or the bound. */
static void wait_taken(int fd, int64_t end)
{
    int q = 0;
    while (ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0 && now_ms() < end) {
        router_drain();
        sched_yield();
    }
}

static bool read_exact(int fd, uint8_t *b, size_t n, int64_t end)
{
    while (n) {
        ssize_t r = recv(fd, b, n, MSG_DONTWAIT);
        if (r > 0) {
            b += r;
            n -= (size_t)r;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EINTR) || now_ms() >= end)
            return false;
        pump(fd, POLLIN, 5);
    }
    return true;
}

/* One command frame from the gate into b[0..cap); its size or -1. */
static long read_command(int fd, uint8_t *b, size_t cap, int64_t end)
{
    uint8_t h[9];
    if (!read_exact(fd, h, 2, end))
        return -1;
    uint64_t size = h[1];
    if (h[0] & 2) {
        if (!read_exact(fd, h + 2, 7, end))
            return -1;
        size = 0;
        for (int i = 1; i < 9; i++)
            size = size << 8 | h[i];
    }
    if (!(h[0] & 4) || size > cap || !read_exact(fd, b, (size_t)size, end))
        return -1;
    return (long)size;
}

/* The client side of CURVE's handshake after the HELLO the caller sent:
 * read the greeting and WELCOME, send INITIATE with client key `who`,
 * read READY. *ret_k: the MESSAGE boxes' key. */
static bool curve_client(int fd, int who, uint8_t *ret_k, int64_t end)
{
    uint8_t b[512];
    if (!read_exact(fd, b, 64, end))
        return false;
    long n = read_command(fd, b, sizeof b, end);
    if (n != 168 || memcmp(b, "\x07WELCOME", 8) != 0)
        return false;
    uint8_t nonce[24] = "WELCOME-", wplain[128];
    memcpy(nonce + 8, b + 8, 16);
    if (crypto_box_open_easy(wplain, b + 24, 144, nonce, F.spub, F.cnsec) != 0)
        return false;
    const uint8_t *sn = wplain;          /* S' */
    /* INITIATE: cookie, nonce 2, Box[C, vouch nonce, vouch, metadata] */
    uint8_t plain[128 + sizeof props_dealer];
    memcpy(plain, F.cpub[who], 32);
    uint8_t vnonce[24] = "VOUCH---", vplain[64];
    randombytes_buf(vnonce + 8, 16);
    memcpy(plain + 32, vnonce + 8, 16);
    memcpy(vplain, F.cnpub, 32);
    memcpy(vplain + 32, F.spub, 32);
    check(crypto_box_easy(plain + 48, vplain, 64, vnonce, sn, F.csec[who]) == 0,
          "crypto_box_easy");
    memcpy(plain + 128, props_dealer, sizeof props_dealer);
    uint8_t ini[113 + sizeof plain + 16];
    memcpy(ini, "\x08INITIATE", 9);
    memcpy(ini + 9, wplain + 32, 96);
    put_be64(ini + 105, 2);
    uint8_t inonce[24] = "CurveZMQINITIATE";
    put_be64(inonce + 16, 2);
    check(crypto_box_easy(ini + 113, plain, sizeof plain, inonce, sn, F.cnsec) == 0,
          "crypto_box_easy");
    uint8_t fr[9 + sizeof ini];
    outbuf_t o = { fr, 0 };
    out_frame(&o, 4, ini, sizeof ini);
    if (!send_all(fd, fr, o.n, end))
        return false;
    n = read_command(fd, b, sizeof b, end);
    if (n < 6 || memcmp(b, "\x05READY", 6) != 0)
        return false;
    return crypto_box_beforenm(ret_k, sn, F.cnsec) == 0;
}

/* The payload of an authenticated CURVE connection, as records:
 *   flags: bit 0 more, bit 1 command (inside the box); bit 2 raw (the
 *   body goes unboxed, a forged MESSAGE); bit 3 replay (the last nonce
 *   again); bits 4-5 scale the size (x1, x16, x256, x256); bit 6 / 7 the
 *   outer frame's command / more flag
 *   a size byte, then the body (from the input, zero-padded). */
static void box_records(outbuf_t *o, const uint8_t *k, const uint8_t *d, size_t n)
{
    const wf_gate_limits_t *l = F.lim;
    uint64_t nonce = 2;
    /* the oracle: the message being written */
    bool predict = true;
    unsigned frames = 0;
    uint64_t bytes = 0;
    uint8_t *frame = malloc(9 + 33 + 255 * 256);
    check(frame != NULL, "out of memory");
    while (n >= 2 && o->n < OUT_MAX) {
        uint8_t f = d[0];
        static const unsigned scale[4] = { 1, 16, 256, 256 };
        size_t len = (size_t)d[1] * scale[(f >> 4) & 3];
        d += 2;
        n -= 2;
        size_t have = len < n ? len : n;
        uint8_t *body = frame + 9;
        size_t bn;
        if (f & 4) {
            memcpy(body, d, have);
            memset(body + have, 0, len - have);
            bn = len;
        } else {
            if (!(f & 8))
                nonce++;
            uint8_t nb[24] = "CurveZMQMESSAGEC";
            put_be64(nb + 16, nonce);
            memcpy(body, "\x07MESSAGE", 8);
            put_be64(body + 8, nonce);
            uint8_t *plain = body + 32;
            plain[0] = f & 3;
            memcpy(plain + 1, d, have);
            memset(plain + 1 + have, 0, len - have);
            crypto_box_easy_afternm(body + 16, plain, len + 1, nb, k);
            bn = 33 + len;
        }
        d += have;
        n -= have;
        if (o->n + 9 + bn > OUT_MAX)
            break;
        out_frame(o, (uint8_t)((f & 0x40 ? 4 : 0) | (f & 0x80 ? 1 : 0)), body, bn);
        /* a record not well-formed, or a frame the gate closes the
         * connection for (over frame_bytes, or too large to hold while
         * it is opened), or one past the frames it drops: no more
         * predictions */
        if (f & 0xcc || len > l->frame_bytes || len > l->message_bytes ||
            frames > 1000 || X.n == EXPECT_MAX)
            predict = false;
        if (!predict || (f & 2))
            continue;            /* a command: not a frame of the message */
        frames++;
        bytes += len;
        if (f & 1)
            continue;
        X.within[X.n] = frames <= l->max_frames && bytes <= l->message_bytes;
        X.frames[X.n++] = frames;
        frames = 0;
        bytes = 0;
    }
    free(frame);
}

/* ------------------------------------------------------------------ */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    check(sodium_init() >= 0, "sodium_init");
    snprintf(F.dir, sizeof F.dir, "/tmp/fuzz_gate.XXXXXX");
    check(mkdtemp(F.dir) != NULL, "mkdtemp");
    F.verbose = getenv("FUZZ_GATE_VERBOSE") != NULL;
    wf_log_init(&F.log, 2, F.verbose ? WF_LOG_DEBUG : WF_LOG_ERR);
    F.zctx = zmq_ctx_new();
    F.router = zmq_socket(F.zctx, ZMQ_ROUTER);
    int zero = 0, one = 1;
    zmq_setsockopt(F.router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(F.router, ZMQ_RCVHWM, &one, sizeof one);
    check(zmq_bind(F.router, "inproc://fuzz-gate") == 0, "ROUTER bind");
    char err[256];
    wf_keypair_t server, client[2];
    check(wf_keypair_generate(&server, err, sizeof err) == WF_OK &&
          wf_keypair_generate(&client[0], err, sizeof err) == WF_OK &&
          wf_keypair_generate(&client[1], err, sizeof err) == WF_OK, "keys");
    zmq_z85_decode(F.spub, server.public_key);
    for (int i = 0; i < 2; i++) {
        zmq_z85_decode(F.cpub[i], client[i].public_key);
        zmq_z85_decode(F.csec[i], client[i].secret_key);
    }
    crypto_box_keypair(F.cnpub, F.cnsec);
    F.lim = &limit_sets[0];
    for (int i = 0; i < 3; i++) {
        snprintf(F.path[i], sizeof F.path[i], "%s/%s.sock", F.dir,
                 i == 1 ? "curve" : i ? "cluster" : "null");
        char ep[160], bound[160];
        snprintf(ep, sizeof ep, "ipc://%s", F.path[i]);
        int fd = -1;
        bool is_unix = false;
        check(wf_gate_listen(ep, &fd, &is_unix, bound, sizeof bound, err,
                             sizeof err) == WF_OK, "wf_gate_listen");
        wf_gate_cfg_t gc = {
            .zctx = F.zctx, .router_endpoint = "inproc://fuzz-gate", .listen_fd = fd,
            .endpoint = ep, .unix_socket = is_unix,
            .mech = i == 1 ? WF_GATE_CURVE : WF_GATE_NULL, .keys = i == 1 ? &server : NULL,
            .limits = *F.lim, .log = &F.log,
            .plane = i == 2 ? "fuzz cluster plane" : NULL,
            .peer_routing_id = i == 2, .close_over = i == 2,
            .heartbeat_ms = i == 2 ? 20 : 0, .heartbeat_timeout_ms = i == 2 ? 60 : 0,
        };
        check(wf_gate_start(&gc, &F.gate[i]) == WF_OK, "wf_gate_start");
    }
    wf_key_entry_t e = { .role = WF_ROLE_SUBMIT };
    snprintf(e.key, sizeof e.key, "%s", client[0].public_key);
    snprintf(e.name, sizeof e.name, "fuzz");
    check(wf_gate_set_keys(F.gate[1], &e, 1) == WF_OK, "wf_gate_set_keys");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    data++;
    size--;
    int curve = sel & 1;
    unsigned prefix = (sel >> 1) & 3, chunks = ((sel >> 3) & 7) + 1, ls = sel >> 6;
    F.lim = &limit_sets[ls];
    F.cur = curve ? 1 : chunks % 2 == 0 ? 2 : 0;
    wf_gate_set_limits(F.gate[F.cur], F.lim);
    X.on = false;
    X.n = X.got = 0;
    if (F.runs++ == 0)
        F.fds_base = count_fds();

    int64_t end = now_ms() + INPUT_MS;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    check(fd >= 0, "socket");
    struct sockaddr_un un = { .sun_family = AF_UNIX };
    snprintf(un.sun_path, sizeof un.sun_path, "%s", F.path[F.cur]);
    check(connect(fd, (struct sockaddr *)&un, sizeof un) == 0, "connect");
    outbuf_t o = { malloc(OUT_MAX), 0 };
    check(o.p != NULL, "out of memory");
    bool go = true;
    if (prefix >= 1)
        greeting(&o, curve);
    if (prefix >= 2) {
        if (curve)
            hello(&o);
        else
            out_frame(&o, 4, "\x05READY" "\x0bSocket-Type\0\0\0\x06" "DEALER", 28);
    }
    if (curve && prefix == 3) {
        uint8_t k[32];
        go = send_all(fd, o.p, o.n, end) && curve_client(fd, ls == 3, k, end);
        o.n = 0;
        if (go) {
            box_records(&o, k, data, size);
            X.on = true;
        }
    } else {
        out_add(&o, data, size);
    }
    /* the payload in chunks, each taken by the gate before the next */
    size_t step = o.n / chunks + 1, off = 0;
    while (go && off < o.n) {
        size_t n = o.n - off < step ? o.n - off : step;
        go = send_all(fd, o.p + off, n, end);
        off += n;
        if (go && chunks > 1)
            wait_taken(fd, end);
    }
    free(o.p);
    shutdown(fd, SHUT_WR);
    static uint8_t sink[64 << 10];
    while (now_ms() < end) {
        ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
            break;
        if (r < 0)
            pump(fd, POLLIN, 5);
    }
    close(fd);
    /* the gate closes its side once it sees ours gone */
    int64_t gone = now_ms() + 2000;
    wf_gate_stats_t st;
    for (;;) {
        wf_gate_stats(F.gate[F.cur], &st);
        if (st.open == 0)
            break;
        check(now_ms() < gone, "the gate kept a connection its peer closed");
        router_drain();
        sched_yield();
    }
    router_drain();
    X.on = false;
    if (F.verbose) {
        wf_gate_stats_t a;
        wf_gate_stats(F.gate[F.cur], &a);
        fprintf(stderr, "fuzz_gate: sel 0x%02x: accepted %llu refused %llu admitted %llu "
                "over_limit %llu; routed %lu\n", sel, (unsigned long long)a.accepted,
                (unsigned long long)a.refused, (unsigned long long)a.admitted,
                (unsigned long long)a.over_limit, F.routed);
    }
    if (F.runs % 256 == 0)
        check(count_fds() <= F.fds_base + 32, "file descriptors leak");
    return 0;
}
