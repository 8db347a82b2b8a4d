/* gate_curve.h — the server side of CurveZMQ (RFC 26) for the gate
 * (gate.h): the handshake commands HELLO -> WELCOME, INITIATE -> READY,
 * and the MESSAGE boxes of an established connection, with libsodium's
 * crypto_box. Pure computation on buffers the caller owns: no I/O, no
 * logging. Private to daemon/net/gate*.c.
 */
#ifndef WF_GATE_CURVE_H
#define WF_GATE_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WF_CURVE_KEY 32
#define WF_CURVE_HELLO_SIZE 200       /* the HELLO command, exactly */
#define WF_CURVE_WELCOME_SIZE 168     /* the WELCOME command we send */
#define WF_CURVE_INITIATE_MIN 257     /* INITIATE without metadata */
/* MESSAGE command around n bytes: "\x07MESSAGE", nonce, MAC, flags */
#define WF_CURVE_MSG_OVERHEAD (8 + 8 + 16 + 1)

/* The daemon's long-term key pair (binary). */
typedef struct wf_curve_server {
    uint8_t public_key[WF_CURVE_KEY];
    uint8_t secret_key[WF_CURVE_KEY];
} wf_curve_server_t;

/* One connection's CURVE state. */
typedef struct wf_curve_conn {
    uint8_t cn_client[WF_CURVE_KEY];  /* C': the client's short-term key */
    uint8_t cn_public[WF_CURVE_KEY];  /* S': ours, for this connection */
    uint8_t cn_secret[WF_CURVE_KEY];
    uint8_t cookie_key[WF_CURVE_KEY]; /* seals the cookie of WELCOME */
    uint8_t precom[WF_CURVE_KEY];     /* crypto_box_beforenm(C', s') */
    uint8_t client_key[WF_CURVE_KEY]; /* C: the client's long-term key, after
                                         INITIATE */
    uint64_t nonce;                   /* our next short nonce (from 1) */
    uint64_t peer_nonce;              /* the peer's last; must grow */
} wf_curve_conn_t;

/* Z85 key pair into binary; false when malformed. */
bool wf_curve_server_init(wf_curve_server_t *s, const char *public_z85,
                          const char *secret_z85);

/* HELLO (cmd, len: the command frame's body) -> WELCOME into
 * welcome[WF_CURVE_WELCOME_SIZE]. False: malformed or not for our key. */
bool wf_curve_hello(wf_curve_conn_t *c, const wf_curve_server_t *s,
                    const uint8_t *cmd, size_t len, uint8_t *welcome);

/* INITIATE: verifies the cookie, the box and the vouch (RFC 26: both
 * keys it holds, the client's short-term key C' and this server's
 * long-term key S); on success c->client_key is the client's key and
 * *ret_meta / *ret_meta_len the metadata (in scratch, which must hold len
 * bytes). */
bool wf_curve_initiate(wf_curve_conn_t *c, const wf_curve_server_t *s,
                       const uint8_t *cmd, size_t len, uint8_t *scratch,
                       const uint8_t **ret_meta, size_t *ret_meta_len);

/* READY around the metadata props[0..n) into out (14 + 16 + n bytes);
 * returns the command's size. */
size_t wf_curve_ready(wf_curve_conn_t *c, const uint8_t *props, size_t n,
                      uint8_t *out);

/* One frame of n bytes as a MESSAGE command into out
 * (WF_CURVE_MSG_OVERHEAD + n bytes). flags: 1 more, 2 command. */
void wf_curve_box(wf_curve_conn_t *c, uint8_t flags, const void *data, size_t n,
                  uint8_t *out);

/* Open the MESSAGE command msg[0..len) in place: *ret_flags, the frame at
 * msg + *ret_off, *ret_n bytes. False: malformed, replayed nonce or a bad
 * box. */
bool wf_curve_unbox(wf_curve_conn_t *c, uint8_t *msg, size_t len,
                    uint8_t *ret_flags, size_t *ret_off, size_t *ret_n);

#endif /* WF_GATE_CURVE_H */
