/* comm_zmq_world.c — the ZeroMQ comm backend's entry points (see
 * comm_zmq.h for the contract): bound endpoints and world formation
 * (bind, connect down, hello / ack with every peer). It calls
 * comm_zmq_ops.c (the handles' operations), which calls comm_zmq_rank.c
 * (one rank's machinery and the abort domain); what they share is in
 * comm_zmq_impl.h. It does not log; world formation can fill a caller's
 * message buffer.
 */
#include "comm_zmq_impl.h"
#include "errf.h"
#include "base/zap.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* endpoints                                                               */

wf_status_t wf_comm_zmq_endpoint_new(void *zmq_ctx, const char *bind_addr,
                                     int64_t max_message_bytes,
                                     int recv_messages,
                                     const wf_keypair_t *curve,
                                     wf_comm_zmq_endpoint_t **ret_ep)
{
    assert(zmq_ctx && bind_addr && ret_ep);
    if (strlen(bind_addr) >= WF_COMM_ZMQ_ENDPOINT_MAX)
        return WF_E_BAD_ARGUMENT;
    if (curve && (!wf_key_z85_valid(curve->public_key) ||
                  !wf_key_z85_valid(curve->secret_key)))
        return WF_E_BAD_ARGUMENT;
    wf_comm_zmq_endpoint_t *ep = calloc(1, sizeof *ep);
    if (!ep)
        return WF_E_NO_MEMORY;
    ep->curve = curve != NULL;
    wf_status_t st = wf_zmq_listen(zmq_ctx, bind_addr, max_message_bytes,
                                   recv_messages, curve, &ep->sock, &ep->gate,
                                   ep->addr, sizeof ep->addr);
    if (st != WF_OK) {
        free(ep);
        return st;
    }
    *ret_ep = ep;
    return WF_OK;
}

const char *wf_comm_zmq_endpoint_address(const wf_comm_zmq_endpoint_t *ep)
{
    assert(ep);
    return ep->addr;
}

void wf_comm_zmq_endpoint_destroy(wf_comm_zmq_endpoint_t **ep)
{
    if (!ep || !*ep)
        return;
    wf_gate_stop(&(*ep)->gate);
    zmq_close((*ep)->sock);
    free(*ep);
    *ep = NULL;
}


/* ---------------------------------------------------------------------- */
/* world formation                                                         */

/* "3, 5, 7" (at most a few) into buf: the peers that did not join. */
static void missing_list(const zrank_t *rs, char *buf, size_t len)
{
    size_t off = 0;
    int shown = 0;
    buf[0] = '\0';
    for (int j = 0; j < rs->nranks && off < len; j++) {
        if (j == rs->rank || rs->joined[j])
            continue;
        if (shown == 8) {
            snprintf(buf + off, len - off, ", ...");
            return;
        }
        int w = snprintf(buf + off, len - off, "%s%d", shown ? ", " : "", j);
        if (w < 0)
            return;
        off += (size_t)w;
        shown++;
    }
}

wf_status_t wf_comm_zmq_world_new(const wf_comm_zmq_config_t *cfg, int rank,
                                  wf_comm_t **ret_comm)
{
    return wf_comm_zmq_world_join(cfg, rank, NULL, NULL, 0, ret_comm);
}

wf_status_t wf_comm_zmq_world_join(const wf_comm_zmq_config_t *cfg, int rank,
                                   wf_comm_zmq_endpoint_t **epp, char *err,
                                   size_t errlen, wf_comm_t **ret_comm)
{
    assert(cfg && ret_comm);
    wf_comm_zmq_endpoint_t *ep = epp ? *epp : NULL;
    if (epp)
        *epp = NULL;
    wf_errf(err, errlen, "%s", "");
    wf_status_t st = WF_OK;
    zrank_t *rs = NULL;
    if (!cfg->zmq_ctx || cfg->nranks < 1 ||
        cfg->nranks > WF_COMM_ZMQ_MAX_RANKS || rank < 0 ||
        rank >= cfg->nranks || !cfg->endpoints) {
        wf_errf(err, errlen, "comm zmq: bad config (rank %d of %d)", rank,
                cfg->nranks);
        st = WF_E_BAD_ARGUMENT;
        goto fail;
    }
    for (int j = 0; j < cfg->nranks; j++) {
        if (!cfg->endpoints[j] ||
            strlen(cfg->endpoints[j]) >= WF_COMM_ZMQ_ENDPOINT_MAX) {
            wf_errf(err, errlen, "comm zmq: endpoint of rank %d missing or "
                    "too long", j);
            st = WF_E_BAD_ARGUMENT;
            goto fail;
        }
    }
    if (cfg->curve) {
        if (!wf_key_z85_valid(cfg->curve->public_key) ||
            !wf_key_z85_valid(cfg->curve->secret_key) || !cfg->rank_keys ||
            !cfg->rank_nodes) {
            wf_errf(err, errlen, "comm zmq: CURVE without a key pair or the "
                    "ranks' keys and nodes");
            st = WF_E_BAD_ARGUMENT;
            goto fail;
        }
        for (int j = 0; j < cfg->nranks; j++) {
            if (!cfg->rank_keys[j] || !wf_key_z85_valid(cfg->rank_keys[j]) ||
                !cfg->rank_nodes[j] || !cfg->rank_nodes[j][0] ||
                strlen(cfg->rank_nodes[j]) >= WF_ZAP_USER_MAX) {
                wf_errf(err, errlen, "comm zmq: rank %d: node key or name "
                        "missing or malformed", j);
                st = WF_E_BAD_ARGUMENT;
                goto fail;
            }
        }
        if (strcmp(cfg->rank_keys[rank], cfg->curve->public_key) != 0) {
            wf_errf(err, errlen, "comm zmq: rank %d: the world gives it "
                    "another node's key than ours", rank);
            st = WF_E_BAD_ARGUMENT;
            goto fail;
        }
    }
    if (ep && ep->curve != (cfg->curve != NULL)) {
        wf_errf(err, errlen, "comm zmq: rank %d: endpoint bound %s CURVE, "
                "world %s", rank, ep->curve ? "with" : "without",
                cfg->curve ? "with" : "without");
        st = WF_E_BAD_ARGUMENT;
        goto fail;
    }
    wf_comm_zmq_local_t *local = cfg->local;
    if (local)
        wf_comm_zmq_local_ref(local);
    else if ((st = wf_comm_zmq_local_new(&local)) != WF_OK)
        goto fail;
    rs = wf_zmq_rank_alloc(cfg, rank);
    if (!rs) {
        wf_comm_zmq_local_unref(&local);
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    rs->local = local; /* rs owns the reference from here */
    if (ep) {
        rs->sock = ep->sock;
        rs->gate = ep->gate;
        free(ep);
        ep = NULL;
    } else {
        char bound[WF_COMM_ZMQ_ENDPOINT_MAX];
        st = wf_zmq_listen(cfg->zmq_ctx, cfg->endpoints[rank],
                           cfg->max_message_bytes, cfg->recv_messages,
                           cfg->curve, &rs->sock, &rs->gate, bound, sizeof bound);
        if (st != WF_OK) {
            wf_errf(err, errlen, "comm zmq: rank %d: bind %s: %s", rank,
                    cfg->endpoints[rank], st == WF_E_CONNECT
                    ? "address not available" : "socket or thread failed");
            goto fail;
        }
    }
    /* the identity peers see on this rank's outgoing connections */
    if (zmq_setsockopt(rs->sock, ZMQ_ROUTING_ID,
                       rs->ids + (size_t)rank * ID_LEN, ID_LEN) != 0) {
        st = WF_E_INTERNAL;
        goto fail;
    }
    /* connect down: one connection per pair, used both ways. With
     * CONNECT_ROUTING_ID the peer is routable at once (messages wait in
     * the pipe until the connection is up), so the hello goes now. */
    for (int j = 0; j < rank; j++) {
        /* CURVE: a client of rank j's node, its key pinned (taken at the
         * connect, like the routing id) */
        if (cfg->curve && wf_curve_client(rs->sock, cfg->curve,
                                          cfg->rank_keys[j]) != WF_OK) {
            wf_errf(err, errlen, "comm zmq: rank %d: CURVE client options "
                    "for rank %d: %s", rank, j, zmq_strerror(errno));
            st = WF_E_INTERNAL;
            goto fail;
        }
        /* libzmq aborts the process when a connect's routing id is
         * already a peer's (one that connected to this endpoint claiming
         * rank j's id): find it first (ROUTER_MANDATORY: a send to an
         * unknown id fails at once) and refuse the world instead. A
         * peer whose handshake completes between this check and the
         * connect is not caught (a window of microseconds); with CURVE
         * only an admitted node can try. */
        if (zmq_send(rs->sock, rs->ids + (size_t)j * ID_LEN, ID_LEN,
                     ZMQ_SNDMORE) >= 0) {
            zmq_send(rs->sock, "", 0, 0); /* end the message: a no-op */
            wf_errf(err, errlen, "comm zmq: world %#llx rank %d: rank %d's "
                    "routing id is taken by a peer that connected to this "
                    "rank; refusing the world",
                    (unsigned long long)rs->world_id, rank, j);
            st = WF_E_CONNECT;
            goto fail;
        } else if (errno != EHOSTUNREACH) {
            wf_errf(err, errlen, "comm zmq: rank %d: probe of rank %d: %s",
                    rank, j, zmq_strerror(errno));
            st = WF_E_INTERNAL;
            goto fail;
        }
        if (zmq_setsockopt(rs->sock, ZMQ_CONNECT_ROUTING_ID,
                           rs->ids + (size_t)j * ID_LEN, ID_LEN) != 0 ||
            zmq_connect(rs->sock, cfg->endpoints[j]) != 0) {
            wf_errf(err, errlen, "comm zmq: rank %d: connect to rank %d at "
                    "%s: %s", rank, j, cfg->endpoints[j], zmq_strerror(errno));
            st = WF_E_CONNECT;
            goto fail;
        }
        if ((st = wf_zmq_send_hdr_only(rs, j, MSG_HELLO)) != WF_OK) {
            wf_errf(err, errlen, "comm zmq: rank %d: hello to rank %d: %s",
                    rank, j, zmq_strerror(errno));
            goto fail;
        }
    }
    /* wait for a hello from every higher rank and an ack from every lower
     * one: then every peer is connected and routable both ways */
    int64_t deadline = cfg->connect_timeout_ms > 0
                           ? wf_zmq_now_ms() + cfg->connect_timeout_ms : -1;
    while (rs->missing > 0) {
        long t = -1;
        if (deadline >= 0) {
            int64_t left = deadline - wf_zmq_now_ms();
            if (left <= 0) {
                char who[128];
                missing_list(rs, who, sizeof who);
                char why[96] = "";
                uint64_t refused = atomic_load(&rs->refused);
                if (refused)
                    snprintf(why, sizeof why, " (%llu message(s) refused: "
                             "sent by a node that does not hold the rank)",
                             (unsigned long long)refused);
                wf_errf(err, errlen, "comm zmq: world %#llx rank %d: hello: "
                        "no answer within %d ms from rank(s) %s%s",
                        (unsigned long long)rs->world_id, rank,
                        cfg->connect_timeout_ms, who, why);
                st = WF_E_TIMEOUT;
                goto fail;
            }
            t = (long)left;
        }
        st = wf_zmq_progress(rs, t);
        if (st != WF_OK) {
            char who[128];
            missing_list(rs, who, sizeof who);
            wf_errf(err, errlen, "comm zmq: world %#llx rank %d: hello: %s "
                    "while waiting for rank(s) %s",
                    (unsigned long long)rs->world_id, rank,
                    st == WF_E_ABORTED ? "aborted" : "socket failed", who);
            goto fail;
        }
    }
    int *world_of = malloc((size_t)cfg->nranks * sizeof *world_of);
    if (!world_of) {
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    for (int j = 0; j < cfg->nranks; j++)
        world_of[j] = j;
    zcomm_t *zc =
        wf_zmq_comm_new(rs, WORLD_COMM_ID, cfg->nranks, rank, world_of);
    if (!zc) {
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    *ret_comm = &zc->base;
    return WF_OK;
fail:
    wf_comm_zmq_endpoint_destroy(&ep);
    if (rs) {
        wf_zmq_rank_free(rs, 0); /* nothing queued matters: drop it */
    }
    return st;
}
