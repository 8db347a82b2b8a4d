/* gate_curve.c — CurveZMQ's server side for the gate (gate_curve.h),
 * written from RFC 26 (rfc.zeromq.org/spec/26): every box is libsodium's
 * crypto_box (XSalsa20-Poly1305 over X25519), its nonce a 16-byte prefix
 * naming the command and an 8-byte counter (or 16 random bytes).
 */
#include "gate_curve.h"

#include <string.h>
#include <sodium.h>
#include <zmq.h>

#define MAC crypto_box_MACBYTES   /* 16 */

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* A box from the peer: its nonce (the 16-byte prefix and the 8-byte
 * counter at p) into nonce, the counter into *ret_n. False when the
 * counter is not above the last one accepted (a replayed box). */
static bool peer_nonce(const wf_curve_conn_t *c, const char *prefix, const uint8_t *p,
                       uint8_t nonce[crypto_box_NONCEBYTES], uint64_t *ret_n)
{
    uint64_t n = get_be64(p);
    if (n <= c->peer_nonce)
        return false;
    memcpy(nonce, prefix, 16);
    memcpy(nonce + 16, p, 8);
    *ret_n = n;
    return true;
}

/* Our next box: its nonce (the 16-byte prefix and our counter, which
 * advances) into nonce, the counter's 8 bytes also at out. */
static void own_nonce(wf_curve_conn_t *c, const char *prefix,
                      uint8_t nonce[crypto_box_NONCEBYTES], uint8_t *out)
{
    memcpy(nonce, prefix, 16);
    put_be64(nonce + 16, c->nonce++);
    memcpy(out, nonce + 16, 8);
}

bool wf_curve_server_init(wf_curve_server_t *s, const char *public_z85,
                          const char *secret_z85)
{
    if (strlen(public_z85) != 40 || strlen(secret_z85) != 40)
        return false;
    return zmq_z85_decode(s->public_key, public_z85) != NULL &&
           zmq_z85_decode(s->secret_key, secret_z85) != NULL;
}

/* HELLO: "\x05HELLO", version 1.0, 72 bytes of padding, C', nonce,
 * Box[64 zero bytes](C' -> S). */
bool wf_curve_hello(wf_curve_conn_t *c, const wf_curve_server_t *s,
                    const uint8_t *cmd, size_t len, uint8_t *welcome)
{
    if (len != WF_CURVE_HELLO_SIZE || memcmp(cmd, "\x05HELLO", 6) != 0 ||
        cmd[6] != 1 || cmd[7] != 0)
        return false;
    memcpy(c->cn_client, cmd + 80, WF_CURVE_KEY);
    uint8_t nonce[crypto_box_NONCEBYTES], plain[64];
    memcpy(nonce, "CurveZMQHELLO---", 16);
    memcpy(nonce + 16, cmd + 112, 8);
    if (crypto_box_open_easy(plain, cmd + 120, 80, nonce, c->cn_client,
                             s->secret_key) != 0)
        return false;
    c->peer_nonce = get_be64(cmd + 112);
    /* S' for this connection; the cookie Box[C' + s'](K) lets INITIATE
     * prove it answers this WELCOME. */
    crypto_box_keypair(c->cn_public, c->cn_secret);
    randombytes_buf(c->cookie_key, sizeof c->cookie_key);
    uint8_t cookie_nonce[crypto_secretbox_NONCEBYTES], cookie_plain[64];
    memcpy(cookie_nonce, "COOKIE--", 8);
    randombytes_buf(cookie_nonce + 8, 16);
    memcpy(cookie_plain, c->cn_client, 32);
    memcpy(cookie_plain + 32, c->cn_secret, 32);
    uint8_t wplain[128];
    memcpy(wplain, c->cn_public, 32);
    memcpy(wplain + 32, cookie_nonce + 8, 16);
    crypto_secretbox_easy(wplain + 48, cookie_plain, 64, cookie_nonce, c->cookie_key);
    sodium_memzero(cookie_plain, sizeof cookie_plain);
    uint8_t wnonce[crypto_box_NONCEBYTES];
    memcpy(wnonce, "WELCOME-", 8);
    randombytes_buf(wnonce + 8, 16);
    memcpy(welcome, "\x07WELCOME", 8);
    memcpy(welcome + 8, wnonce + 8, 16);
    if (crypto_box_easy(welcome + 24, wplain, sizeof wplain, wnonce, c->cn_client,
                        s->secret_key) != 0)
        return false;
    c->nonce = 1;
    return true;
}

/* INITIATE: "\x08INITIATE", cookie (nonce 16, box 80), nonce 8,
 * Box[C + vouch nonce + vouch + metadata](C' -> S'); the vouch is
 * Box[C' + S](C -> S'). */
bool wf_curve_initiate(wf_curve_conn_t *c, const wf_curve_server_t *s,
                       const uint8_t *cmd, size_t len, uint8_t *scratch,
                       const uint8_t **ret_meta, size_t *ret_meta_len)
{
    if (len < WF_CURVE_INITIATE_MIN || memcmp(cmd, "\x08INITIATE", 9) != 0)
        return false;
    uint8_t cookie_nonce[crypto_secretbox_NONCEBYTES], cookie_plain[64];
    memcpy(cookie_nonce, "COOKIE--", 8);
    memcpy(cookie_nonce + 8, cmd + 9, 16);
    if (crypto_secretbox_open_easy(cookie_plain, cmd + 25, 80, cookie_nonce,
                                   c->cookie_key) != 0)
        return false;
    bool same = sodium_memcmp(cookie_plain, c->cn_client, 32) == 0 &&
                sodium_memcmp(cookie_plain + 32, c->cn_secret, 32) == 0;
    sodium_memzero(cookie_plain, sizeof cookie_plain);
    if (!same)
        return false;
    uint64_t n8;
    uint8_t nonce[crypto_box_NONCEBYTES];
    if (!peer_nonce(c, "CurveZMQINITIATE", cmd + 105, nonce, &n8))
        return false;
    size_t clen = len - 113;
    if (crypto_box_open_easy(scratch, cmd + 113, clen, nonce, c->cn_client,
                             c->cn_secret) != 0)
        return false;
    size_t plen = clen - MAC;           /* >= 128: len >= 257 */
    uint8_t vnonce[crypto_box_NONCEBYTES], vouch[64];
    memcpy(vnonce, "VOUCH---", 8);
    memcpy(vnonce + 8, scratch + 32, 16);
    /* the vouch binds the client's long-term key to this connection (C')
     * and to this server (S): a vouch made for another server is refused */
    bool vouched = crypto_box_open_easy(vouch, scratch + 48, 80, vnonce, scratch,
                                        c->cn_secret) == 0 &&
                   sodium_memcmp(vouch, c->cn_client, 32) == 0 &&
                   sodium_memcmp(vouch + 32, s->public_key, 32) == 0;
    sodium_memzero(vouch, sizeof vouch);
    if (!vouched)
        return false;
    memcpy(c->client_key, scratch, 32);
    c->peer_nonce = n8;
    if (crypto_box_beforenm(c->precom, c->cn_client, c->cn_secret) != 0)
        return false;
    *ret_meta = scratch + 128;
    *ret_meta_len = plen - 128;
    return true;
}

size_t wf_curve_ready(wf_curve_conn_t *c, const uint8_t *props, size_t n,
                      uint8_t *out)
{
    uint8_t nonce[crypto_box_NONCEBYTES];
    memcpy(out, "\x05READY", 6);
    own_nonce(c, "CurveZMQREADY---", nonce, out + 6);
    crypto_box_easy_afternm(out + 14, props, n, nonce, c->precom);
    return 14 + MAC + n;
}

void wf_curve_box(wf_curve_conn_t *c, uint8_t flags, const void *data, size_t n,
                  uint8_t *out)
{
    uint8_t nonce[crypto_box_NONCEBYTES];
    memcpy(out, "\x07MESSAGE", 8);
    own_nonce(c, "CurveZMQMESSAGES", nonce, out + 8);
    /* the plaintext where the box ends up, then sealed in place
     * (libsodium allows the overlap) */
    uint8_t *plain = out + 16 + MAC;
    plain[0] = flags;
    if (n)
        memmove(plain + 1, data, n);
    crypto_box_easy_afternm(out + 16, plain, n + 1, nonce, c->precom);
}

bool wf_curve_unbox(wf_curve_conn_t *c, uint8_t *msg, size_t len,
                    uint8_t *ret_flags, size_t *ret_off, size_t *ret_n)
{
    if (len < WF_CURVE_MSG_OVERHEAD || memcmp(msg, "\x07MESSAGE", 8) != 0)
        return false;
    uint64_t n8;
    uint8_t nonce[crypto_box_NONCEBYTES];
    if (!peer_nonce(c, "CurveZMQMESSAGEC", msg + 8, nonce, &n8))
        return false;
    if (crypto_box_open_easy_afternm(msg + 16, msg + 16, len - 16, nonce,
                                     c->precom) != 0)
        return false;
    c->peer_nonce = n8;
    *ret_flags = msg[16];
    *ret_off = 17;
    *ret_n = len - WF_CURVE_MSG_OVERHEAD;
    return true;
}
