/* zap.h — weftd's ZeroMQ authentication (ZAP, RFC 27) and CURVE options.
 *
 * One handler thread per ZeroMQ context answers every CURVE handshake of
 * the context's sockets. Each CURVE server socket names a domain; a domain
 * holds the public keys it admits, each with the user id the socket then
 * reads from every message it receives from that peer (zmq_msg_gets
 * "User-Id"):
 *   WF_ZAP_CLIENTS  tcp:// client endpoints; user id "ROLE:NAME"
 *   WF_ZAP_NODES    every daemon-to-daemon socket; user id the node name
 * A key not in the domain, an unknown domain or any other mechanism is
 * refused (ZAP status 400) and logged with the peer's address and key
 * (rate-limited). The handler must run before any CURVE server socket
 * binds: without a handler libzmq admits every CURVE client.
 *
 * wf_zap_set may be called from any thread (SIGHUP reload of a list):
 * handshakes after it see the new list; connections already admitted stay.
 */
#ifndef WF_ZAP_H
#define WF_ZAP_H

#include <stddef.h>
#include <stdint.h>

#include "keys.h"
#include "log.h"
#include "weft.h"

#define WF_ZAP_CLIENTS "weft-clients"
#define WF_ZAP_NODES "weft-nodes"
#define WF_ZAP_USER_MAX 80       /* "ROLE:NAME" with the NUL */

typedef struct wf_zap wf_zap_t;

/* Start the handler on zctx (binds inproc://zeromq.zap.01). */
wf_status_t wf_zap_start(void *zctx, wf_log_t *log, wf_zap_t **ret);

/* Replace the keys `domain` admits (copied). `domain` is WF_ZAP_CLIENTS
 * (entries' roles give "ROLE:NAME") or WF_ZAP_NODES (the name). */
wf_status_t wf_zap_set(wf_zap_t *z, const char *domain,
                       const wf_key_entry_t *e, size_t n);

/* Handshakes refused since start, and admitted. */
uint64_t wf_zap_refused(wf_zap_t *z);
uint64_t wf_zap_admitted(wf_zap_t *z);

/* Stop the thread and free; NULL is fine. Before zmq_ctx_term. */
void wf_zap_stop(wf_zap_t *z);

/* Make `sock` a CURVE server for the endpoints it binds after this call:
 * our key pair, the ZAP domain. */
wf_status_t wf_curve_server(void *sock, const wf_keypair_t *kp,
                            const char *domain);

/* Make `sock` a CURVE client for the endpoints it connects after this
 * call: our key pair, the server's public key (pinned). A socket may be
 * made a server, bind, then a client and connect (options are taken at
 * each bind / connect). */
wf_status_t wf_curve_client(void *sock, const wf_keypair_t *kp,
                            const char *server_public_key);

/* The user id ZAP gave the peer that sent `msg` (a zmq_msg_t *), or NULL
 * (not a CURVE connection). A ROUTER's routing-id frame is made locally
 * and carries none: ask a frame the peer sent. */
const char *wf_msg_user_id(void *msg);

/* Parse a WF_ZAP_CLIENTS user id "ROLE:NAME"; WF_ROLE_NONE if malformed.
 * *ret_name (may be NULL) points into user_id. */
wf_role_t wf_zap_client_role(const char *user_id, const char **ret_name);

#endif /* WF_ZAP_H */
