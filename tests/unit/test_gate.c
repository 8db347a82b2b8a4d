/* test_gate.c — the client plane's gate (daemon/net/gate.h) on its
 * own, through a real ipc:// socket, with a raw CURVE client written
 * here from RFC 26 (so that the test decides what the peer does between
 * the handshake's commands):
 *   - a client key not in the allow-list is refused with ERROR "400", the
 *     connection closed, and counted once in wf_gate_stats' refused;
 *   - the same refusal to a client that shut down its reading side before
 *     its INITIATE (the ERROR's write then fails with EPIPE) is counted
 *     once too, not once for the key and again for the failed write.
 * Every wait is bounded by WAIT_EVENT_MS (support/wait.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <sodium.h>
#include <zmq.h>

#include "base/log.h"
#include "net/gate.h"
#include "keys.h"
#include "support/check.h"
#include "support/wait.h"

static char dir[] = "/tmp/weft-gate-XXXXXX";
static char sock_path[100];  /* fits sockaddr_un's sun_path */

/* the keys, binary */
static uint8_t server_pub[32];
static uint8_t stranger_pub[32], stranger_sec[32];
static uint8_t listed_pub[32], listed_sec[32];

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

/* A command frame (flags 4) of n bytes into out; its length. */
static size_t command_frame(uint8_t *out, const uint8_t *d, size_t n)
{
    size_t h;
    if (n > 255) {
        out[0] = 4 | 2;
        put_be64(out + 1, n);
        h = 9;
    } else {
        out[0] = 4;
        out[1] = (uint8_t)n;
        h = 2;
    }
    memcpy(out + h, d, n);
    return h + n;
}

static bool write_all(int fd, const uint8_t *d, size_t n)
{
    while (n) {
        ssize_t w = send(fd, d, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        d += w;
        n -= (size_t)w;
    }
    return true;
}

/* n bytes (the socket's receive timeout bounds each read). */
static bool read_exact(int fd, uint8_t *b, size_t n)
{
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

/* One command frame from the gate into b[0..cap); its size or -1. */
static long read_command(int fd, uint8_t *b, size_t cap)
{
    uint8_t h[9];
    if (!read_exact(fd, h, 2))
        return -1;
    uint64_t size = h[1];
    if (h[0] & 2) {
        if (!read_exact(fd, h + 2, 7))
            return -1;
        size = 0;
        for (int i = 1; i < 9; i++)
            size = size << 8 | h[i];
    }
    if (!(h[0] & 4) || size > cap || !read_exact(fd, b, (size_t)size))
        return -1;
    return (long)size;
}

static const uint8_t props_dealer[] = { 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y',
                                        'p', 'e', 0, 0, 0, 6, 'D', 'E', 'A', 'L', 'E',
                                        'R' };

/* A CURVE client with key pair (pub, sec): greeting and HELLO, the
 * gate's greeting and WELCOME read; with shut_read, shutdown(SHUT_RD) (the
 * gate's writes to it fail from then on); then INITIATE, whose vouch names
 * server key `vouch_server` (RFC 26: the server's long-term key). Returns
 * the connected socket, or -1 (a CHECK says which step failed). */
static int client_handshake(bool shut_read, const uint8_t *pub, const uint8_t *sec,
                            const uint8_t *vouch_server)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", sock_path);
    struct timeval tv = { WAIT_EVENT_MS / 1000, 0 };
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
              connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    CHECK(ok, "connect %s: %s", sock_path, strerror(errno));
    if (!ok) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    /* C', c': this connection's short-term pair */
    uint8_t cn_pub[32], cn_sec[32];
    crypto_box_keypair(cn_pub, cn_sec);
    /* greeting (ZMTP 3.1, CURVE, as client) and HELLO */
    uint8_t out[512];
    uint8_t greet[64] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1 };
    memcpy(greet + 12, "CURVE", 5);
    memcpy(out, greet, 64);
    uint8_t hello[200] = { 5, 'H', 'E', 'L', 'L', 'O', 1, 0 };
    memcpy(hello + 80, cn_pub, 32);
    put_be64(hello + 112, 1);
    uint8_t nonce[24] = "CurveZMQHELLO---", zero[64] = { 0 };
    put_be64(nonce + 16, 1);
    bool boxed = crypto_box_easy(hello + 120, zero, sizeof zero, nonce, server_pub,
                                 cn_sec) == 0;
    size_t n = 64 + command_frame(out + 64, hello, sizeof hello);
    uint8_t b[512];
    long wn = -1;
    ok = boxed && write_all(fd, out, n) && read_exact(fd, b, 64) &&
         (wn = read_command(fd, b, sizeof b)) == 168 && memcmp(b, "\x07WELCOME", 8) == 0;
    CHECK(ok, "HELLO answered by a WELCOME (%ld bytes)", wn);
    uint8_t wplain[128];
    uint8_t wnonce[24] = "WELCOME-";
    memcpy(wnonce + 8, b + 8, 16);
    ok = ok && crypto_box_open_easy(wplain, b + 24, 144, wnonce, server_pub, cn_sec) == 0;
    CHECK(ok, "WELCOME opens");
    if (!ok) {
        close(fd);
        return -1;
    }
    const uint8_t *sn = wplain;              /* S', then the cookie */
    /* INITIATE: cookie, nonce 2, Box[C, vouch nonce, vouch, metadata](C'->S') */
    uint8_t plain[128 + sizeof props_dealer];
    memcpy(plain, pub, 32);
    uint8_t vnonce[24] = "VOUCH---", vplain[64];
    randombytes_buf(vnonce + 8, 16);
    memcpy(plain + 32, vnonce + 8, 16);
    memcpy(vplain, cn_pub, 32);
    memcpy(vplain + 32, vouch_server, 32);
    boxed = crypto_box_easy(plain + 48, vplain, 64, vnonce, sn, sec) == 0;
    memcpy(plain + 128, props_dealer, sizeof props_dealer);
    uint8_t ini[113 + sizeof plain + 16];
    memcpy(ini, "\x08INITIATE", 9);
    memcpy(ini + 9, wplain + 32, 96);
    put_be64(ini + 105, 2);
    uint8_t inonce[24] = "CurveZMQINITIATE";
    put_be64(inonce + 16, 2);
    boxed = boxed && crypto_box_easy(ini + 113, plain, sizeof plain, inonce, sn,
                                     cn_sec) == 0;
    CHECK(boxed, "INITIATE boxed");
    if (shut_read)
        CHECK(shutdown(fd, SHUT_RD) == 0, "shutdown: %s", strerror(errno));
    n = command_frame(out, ini, sizeof ini);
    ok = boxed && write_all(fd, out, n);
    CHECK(ok, "INITIATE sent: %s", strerror(errno));
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

/* The stranger's handshake, vouched for this server. */
static int stranger_handshake(bool shut_read)
{
    return client_handshake(shut_read, stranger_pub, stranger_sec, server_pub);
}

typedef struct closed_wait {
    wf_gate_t *g;
    wf_gate_stats_t st;
} closed_wait_t;

/* wait_for's condition: the gate has no connection open. */
static bool gate_idle(void *arg)
{
    closed_wait_t *w = arg;
    wf_gate_stats(w->g, &w->st);
    return w->st.open == 0;
}

int main(void)
{
    if (sodium_init() < 0 || !mkdtemp(dir)) {
        fprintf(stderr, "sodium_init / mkdtemp failed\n");
        return 1;
    }
    wf_log_t log;
    wf_log_init(&log, 2, WF_LOG_ERR);
    void *zctx = zmq_ctx_new();
    void *router = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(zmq_bind(router, "inproc://test-gate") == 0, "ROUTER bind");

    char err[256];
    wf_keypair_t server, listed, stranger;
    CHECK(wf_keypair_generate(&server, err, sizeof err) == WF_OK &&
          wf_keypair_generate(&listed, err, sizeof err) == WF_OK &&
          wf_keypair_generate(&stranger, err, sizeof err) == WF_OK, "keys: %s", err);
    zmq_z85_decode(server_pub, server.public_key);
    zmq_z85_decode(stranger_pub, stranger.public_key);
    zmq_z85_decode(stranger_sec, stranger.secret_key);
    zmq_z85_decode(listed_pub, listed.public_key);
    zmq_z85_decode(listed_sec, listed.secret_key);

    snprintf(sock_path, sizeof sock_path, "%s/gate.sock", dir);
    char ep[160], bound[160];
    snprintf(ep, sizeof ep, "ipc://%s", sock_path);
    int lfd = -1;
    bool is_unix = false;
    wf_gate_t *g = NULL;
    if (wf_gate_listen(ep, &lfd, &is_unix, bound, sizeof bound, err, sizeof err) != WF_OK) {
        CHECK(false, "wf_gate_listen %s: %s", ep, err);
    } else {
        wf_gate_cfg_t gc = {
            .zctx = zctx, .router_endpoint = "inproc://test-gate", .listen_fd = lfd,
            .endpoint = ep, .unix_socket = is_unix, .mech = WF_GATE_CURVE,
            .keys = &server,
            .limits = { .frame_bytes = 1u << 20, .max_frames = 16,
                        .message_bytes = 4u << 20, .max_connections = 16,
                        .max_handshakes = 8, .handshake_ms = 2 * WAIT_EVENT_MS },
            .log = &log,
        };
        CHECK(wf_gate_start(&gc, &g) == WF_OK, "wf_gate_start");
    }
    wf_key_entry_t e = { .role = WF_ROLE_SUBMIT };
    snprintf(e.key, sizeof e.key, "%s", listed.public_key);
    snprintf(e.name, sizeof e.name, "listed");
    CHECK(g && wf_gate_set_keys(g, &e, 1) == WF_OK, "wf_gate_set_keys");

    if (g) {
        /* the stranger reads its ERROR "400", then the end of the stream */
        int fd = stranger_handshake(false);
        if (fd >= 0) {
            uint8_t b[64];
            long n = read_command(fd, b, sizeof b);
            CHECK(n == 10 && memcmp(b, "\x05" "ERROR\x03" "400", 10) == 0,
                  "the stranger gets ERROR 400 (%ld bytes)", n);
            CHECK(recv(fd, b, sizeof b, 0) == 0, "then the end of the stream");
            close(fd);
        }
        closed_wait_t w = { g, { 0 } };
        CHECK(wait_for(gate_idle, &w, WAIT_EVENT_MS), "the gate closed the connection");
        CHECK(w.st.refused == 1 && w.st.admitted == 0,
              "a refused key: refused %llu (want 1), admitted %llu",
              (unsigned long long)w.st.refused, (unsigned long long)w.st.admitted);
        printf("a refused key, ERROR written: refused %llu\n",
               (unsigned long long)w.st.refused);

        /* the stranger reads nothing more: the ERROR's write fails */
        fd = stranger_handshake(true);
        CHECK(wait_for(gate_idle, &w, WAIT_EVENT_MS), "the gate closed the connection");
        if (fd >= 0)
            close(fd);
        CHECK(w.st.refused == 2, "a refused key whose ERROR cannot be written: refused "
              "%llu in all (want 2: once per connection)",
              (unsigned long long)w.st.refused);
        printf("a refused key, ERROR not written: refused %llu in all\n",
               (unsigned long long)w.st.refused);

        /* a listed key whose vouch names another server's long-term key
         * (RFC 26: the vouch holds C' and S): the handshake fails, the key
         * is not admitted; the same key vouching for this server is */
        uint8_t other_pub[32], other_sec[32];
        crypto_box_keypair(other_pub, other_sec);
        fd = client_handshake(false, listed_pub, listed_sec, other_pub);
        CHECK(wait_for(gate_idle, &w, WAIT_EVENT_MS), "the gate closed the connection");
        if (fd >= 0)
            close(fd);
        CHECK(w.st.admitted == 0 && w.st.refused == 3, "a vouch for another server: "
              "admitted %llu (want 0), refused %llu (want 3: a failed handshake)",
              (unsigned long long)w.st.admitted, (unsigned long long)w.st.refused);
        fd = client_handshake(false, listed_pub, listed_sec, server_pub);
        uint8_t b[64];
        long n = fd >= 0 ? read_command(fd, b, sizeof b) : -1;
        CHECK(n > 6 && memcmp(b, "\x05READY", 6) == 0,
              "the listed key vouching for this server gets READY (%ld bytes)", n);
        wf_gate_stats(g, &w.st);
        CHECK(w.st.admitted == 1, "admitted %llu (want 1)",
              (unsigned long long)w.st.admitted);
        if (fd >= 0)
            close(fd);
        CHECK(wait_for(gate_idle, &w, WAIT_EVENT_MS), "the gate closed the connection");
        printf("a vouch for another server's key: not admitted; for this server's: "
               "admitted\n");
    }
    wf_gate_stop(&g);
    zmq_close(router);
    zmq_ctx_term(zctx);
    unlink(sock_path);
    rmdir(dir);
    printf("test_gate: %d passed, %d failed\n", (int)passed, (int)failed);
    return failed ? 1 : 0;
}
