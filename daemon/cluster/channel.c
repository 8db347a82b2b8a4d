/* channel.c — the tensor channel's sockets, its send paths ("in", "hi",
 * "out") and its receive loop (see channel.h). The bookkeeping of what
 * arrives (which job takes which inputs or outputs) is the owner's,
 * behind the callback.
 */
#include "channel.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/zap.h"
#include "errf.h"
#include "net/gate.h"

struct wf_channel {
    void *zctx;                  /* borrowed: ZeroMQ context */
    bool coord;                  /* ROUTER of the coordinator; else a DEALER */
    const wf_settings_t *settings; /* borrowed: data_address, limits */
    const wf_cluster_keys_t *keys; /* borrowed; NULL: no CURVE */
    uint64_t dropped;            /* messages of impostors dropped */
    uint64_t drop_logged_us;     /* last time one was logged */
    uint64_t oversized;          /* messages of too many frames dropped */
    wf_log_limit_t over_lim;     /* rate limit of their log lines */
    wf_log_t *log;               /* borrowed */
    wf_channel_msg_fn fn;        /* owner's handler of received messages */
    void *arg;                   /* its argument */
    void *sock;                  /* ROUTER / DEALER; NULL: none */
    wf_gate_t *gate;             /* coordinator: the listener in front of
                                    the ROUTER (bound on inproc only) */
    char ep[WF_SETTINGS_ENDPOINT_MAX]; /* bound / connected endpoint */
    wf_buf_t buf;                /* header encoding scratch */
    wf_ctl_msg_t msg;            /* header as fields (sent or received) */
    wf_cmsg_t hdr;               /* header, typed (sent or received) */
};

static void free_output(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Largest frame on the channel: an output may be twice its input (f16
 * in, f32 out). */
static int64_t max_msg(const wf_channel_t *ch)
{
    return (int64_t)wf_settings_data_msg_bytes(ch->settings);
}

/* What a peer can make the coordinator hold (README "Bounded cluster
 * data plane"). The coordinator's ROUTER binds inproc only; the gate
 * (net/gate.h) owns the tcp listener in front of it and reads ZMTP
 * itself, so that limits apply before anything is buffered:
 *   - a frame over max_msg, a message of more frames than a transfer has
 *     (header + WF_CMSG_XFER_MAX_FRAMES) or of more than 2 x max_msg in
 *     all (a job's output and its LSE) closes that connection before the
 *     frame is read; a multipart message that never ends is cut there;
 *   - the gate assembles one message of a connection at a time and hands
 *     it to the ROUTER through that connection's DEALER (a high-water
 *     mark of one), and at most cluster_recv_messages whole messages per
 *     connection wait unread in the ROUTER (RCVHWM, per peer pipe); past
 *     them the gate stops reading that connection and TCP pushes back on
 *     the sender. Nothing is dropped, so a member's messages are delayed
 *     at worst. wf_channel_recv reads every message and hands it on or
 *     closes it at once (the owner keeps only what a job in flight
 *     expects), so a peer holds at most (cluster_recv_messages + 2) x 2
 *     x max_msg here;
 *   - sends are never refused (SNDHWM 0): what we queue is bounded by
 *     the jobs in flight, and a full queue must not fail a job's inputs.
 * A member's DEALER takes what its coordinator sends at any size
 * (ZMQ_MAXMSGSIZE -1): the coordinator bounds the inputs by its own
 * max_tensor_bytes, and a member whose limit is smaller must still take
 * them to fail the job (its descriptor check), as ZeroMQ cuts a
 * connection over ZMQ_MAXMSGSIZE for good and every later job rooted
 * here would stall. It talks to the coordinator alone (CURVE: pinned to
 * its key). */
static void set_opts(wf_channel_t *ch, void *sock)
{
    int zero = 0, hwm = (int)ch->settings->cluster_recv_messages;
    int64_t max = ch->coord ? max_msg(ch) : -1;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_SNDHWM, &zero, sizeof zero);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    zmq_setsockopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
}

/* Connections the coordinator's channel takes at once: a member has
 * one; the rest is room for reconnections in flight. */
#define CHANNEL_MAX_CONNECTIONS 1024

static const wf_gate_names_t channel_names = {
    .frame_bytes = "2 x max_tensor_bytes + 4 KiB",
    .max_frames = "a transfer's header and tensors",
    .message_bytes = "2 x (2 x max_tensor_bytes + 4 KiB)",
    .max_connections = "the tensor channel's 1024 connections",
    .max_handshakes = "client_max_handshakes",
    .handshake_ms = "client_handshake_ms",
};

/* Coordinator: the ROUTER on inproc, the gate listening on data_address,
 * any port; announced in every world ("xfer"). */
static wf_status_t bind_router(wf_channel_t *ch)
{
    char host[WF_SETTINGS_NAME_MAX], bind[WF_SETTINGS_NAME_MAX + 16];
    snprintf(host, sizeof host, "%s", ch->settings->data_address);
    if (host[0] == '\0' && gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "127.0.0.1");
    host[sizeof host - 1] = '\0';
    snprintf(bind, sizeof bind, "tcp://%s:*", host);
    ch->sock = zmq_socket(ch->zctx, ZMQ_ROUTER);
    if (!ch->sock) {
        wf_log(ch->log, WF_LOG_ERR, "cluster: tensor channel: zmq_socket: %s",
               zmq_strerror(zmq_errno()));
        return WF_E_INTERNAL;
    }
    int one = 1;
    set_opts(ch, ch->sock);
    /* MANDATORY: a send to a member not connected fails instead of being
     * dropped. No HANDOVER: while a member's connection lives no other
     * connection can take its name (ZeroMQ refuses the second one); a
     * restarted member gets its name once the old connection is gone. */
    zmq_setsockopt(ch->sock, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    char why[160];
    uint64_t m = (uint64_t)max_msg(ch);
    wf_gate_cfg_t gc = {
        .zctx = ch->zctx,
        .limits = {
            .frame_bytes = m,
            .max_frames = 1 + WF_CMSG_XFER_MAX_FRAMES,
            .message_bytes = 2 * m,
            .max_connections = CHANNEL_MAX_CONNECTIONS,
            .max_handshakes = ch->settings->client_max_handshakes,
            .handshake_ms = ch->settings->client_handshake_ms,
        },
        .log = ch->log,
        .plane = "tensor channel",
        .names = &channel_names,
    };
    wf_gate_node_plane(&gc, ch->keys ? &ch->keys->self : NULL);
    if (wf_gate_front(ch->sock, bind, &gc, ch->ep, sizeof ch->ep, why, sizeof why,
                      &ch->gate) != WF_OK) {
        wf_log(ch->log, WF_LOG_ERR, "cluster: cannot bind the tensor channel "
               "on %s (data_address): %s", host, why);
        return WF_E_INTERNAL;
    }
    wf_log(ch->log, WF_LOG_INFO, "cluster: tensor channel on %s", ch->ep);
    return WF_OK;
}

wf_status_t wf_channel_new(void *zctx, bool coord, const wf_settings_t *settings,
                           const wf_cluster_keys_t *keys, wf_log_t *log,
                           wf_channel_msg_fn fn, void *arg, wf_channel_t **ret)
{
    wf_channel_t *ch = calloc(1, sizeof *ch);
    if (!ch) {
        wf_log(log, WF_LOG_ERR, "cluster: out of memory");
        return WF_E_NO_MEMORY;
    }
    ch->zctx = zctx;
    ch->coord = coord;
    ch->settings = settings;
    ch->keys = keys;
    ch->log = log;
    ch->fn = fn;
    ch->arg = arg;
    wf_log_limit_init(&ch->over_lim, "tensor channel messages of too many frames",
                      4, 60);
    if (coord) {
        wf_status_t st = bind_router(ch);
        if (st != WF_OK) {
            wf_channel_destroy(&ch);
            return st;
        }
    }
    *ret = ch;
    return WF_OK;
}

void wf_channel_destroy(wf_channel_t **pch)
{
    if (!pch || !*pch)
        return;
    wf_channel_t *ch = *pch;
    wf_gate_stop(&ch->gate);    /* before the ROUTER its DEALERs reach */
    if (ch->sock)
        zmq_close(ch->sock);
    wf_buf_free(&ch->buf);
    wf_log_limit_destroy(&ch->over_lim);
    free(ch);
    *pch = NULL;
}

void wf_channel_connect(wf_channel_t *ch, const char *ep, const char *self_name)
{
    if (ch->sock && strcmp(ep, ch->ep) == 0)
        return;
    if (ch->sock)
        zmq_close(ch->sock);
    ch->sock = NULL;
    ch->ep[0] = '\0';
    if (!ep[0])
        return;         /* no channel: our ranks are never roots */
    void *sock = zmq_socket(ch->zctx, ZMQ_DEALER);
    if (!sock) {
        wf_log(ch->log, WF_LOG_ERR, "cluster: tensor channel: zmq_socket: %s",
               zmq_strerror(zmq_errno()));
        return;
    }
    set_opts(ch, sock);
    if ((ch->keys && wf_curve_client(sock, &ch->keys->self,
                                     ch->keys->coord_key) != WF_OK) ||
        zmq_setsockopt(sock, ZMQ_ROUTING_ID, self_name, strlen(self_name)) != 0 ||
        zmq_connect(sock, ep) != 0) {
        wf_log(ch->log, WF_LOG_ERR, "cluster: cannot connect the tensor channel "
               "%s: %s", ep, zmq_strerror(zmq_errno()));
        zmq_close(sock);
        return;
    }
    ch->sock = sock;
    snprintf(ch->ep, sizeof ch->ep, "%s", ep);
}

void *wf_channel_socket(const wf_channel_t *ch)
{
    return ch->sock;
}

const char *wf_channel_endpoint(const wf_channel_t *ch)
{
    return ch->ep;
}

/* Start ch->hdr as a header of `type` for world `epoch`. */
static wf_cmsg_xfer_t *hdr_begin(wf_channel_t *ch, wf_cmsg_type_t type,
                                 uint64_t epoch)
{
    memset(&ch->hdr, 0, sizeof ch->hdr);
    ch->hdr.type = type;
    ch->hdr.u.xfer.epoch = epoch;
    return &ch->hdr.u.xfer;
}

/* Send the header in ch->hdr (to `node` on the ROUTER; NULL: the DEALER's
 * peer), then n frames (moved out of frames[]). False when it could not
 * be queued (the frames are closed). */
static bool send_msg(wf_channel_t *ch, const char *node, zmq_msg_t *frames,
                     uint32_t n)
{
    bool ok = true;
    wf_buf_reset(&ch->buf);
    if (wf_cmsg_put(&ch->msg, &ch->hdr) != WF_OK ||
        wf_ctl_encode(&ch->msg, &ch->buf) != WF_OK)
        ok = false;
    if (ok && node && zmq_send(ch->sock, node, strlen(node),
                               ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        ok = false;
    /* after the first frame ZeroMQ takes the whole message */
    if (ok && zmq_send(ch->sock, ch->buf.data, ch->buf.len,
                       (n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
        ok = false;
    for (uint32_t i = 0; i < n; i++) {
        if (!ok || zmq_msg_send(&frames[i], ch->sock,
                                (i + 1 < n ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
            ok = false;
        zmq_msg_close(&frames[i]);
    }
    return ok;
}

bool wf_channel_send_inputs(wf_channel_t *ch, const wf_djob_t *job,
                            const char *node)
{
    if (!ch->sock)
        return false;
    /* attention: q, k, v; forward: its inputs in request order, as "fjob"
     * lists them (proto/cluster_msg.h wf_cfjob_t) */
    const wf_attention_args_t *a = &job->req.args.attention;
    int idx[WF_CMSG_XFER_MAX_FRAMES] = { a->q, a->k, a->v };
    uint32_t n = 3;
    if (job->kind == WF_DJOB_FORWARD) {
        n = job->req.n_tensors < WF_CMSG_XFER_MAX_FRAMES ? job->req.n_tensors
                                                         : WF_CMSG_XFER_MAX_FRAMES;
        for (uint32_t t = 0; t < n; t++)
            idx[t] = (int)t;
    }
    zmq_msg_t f[WF_CMSG_XFER_MAX_FRAMES];
    for (uint32_t t = 0; t < n; t++) {
        zmq_msg_init(&f[t]);
        zmq_msg_copy(&f[t], (zmq_msg_t *)&job->frames[job->req.tensors[idx[t]].frame]);
    }
    wf_cmsg_xfer_t *x = hdr_begin(ch, WF_CMSG_XFER_IN, job->world_epoch);
    x->seq = job->seq;
    x->n = n;
    bool ok = send_msg(ch, node, f, n);
    if (!ok)
        wf_log(ch->log, WF_LOG_WARNING, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") not sent to %s: %s", job->req.id, job->seq, node,
               zmq_strerror(zmq_errno()));
    return ok;
}

void wf_channel_send_hi(wf_channel_t *ch, uint64_t epoch)
{
    if (!ch->sock)
        return;
    hdr_begin(ch, WF_CMSG_XFER_HI, epoch);
    send_msg(ch, NULL, NULL, 0);
}

bool wf_channel_send_outputs(wf_channel_t *ch, wf_djob_t *job)
{
    if (!ch->sock)
        return false;
    zmq_msg_t f[WF_DJOB_MAX_OUTPUTS];
    uint32_t n = job->n_outputs;
    for (uint32_t i = 0; i < n; i++) {
        if (zmq_msg_init_data(&f[i], job->out[i], (size_t)job->out_desc[i].nbytes,
                              free_output, NULL) != 0) {
            for (uint32_t k = 0; k < i; k++)
                zmq_msg_close(&f[k]);   /* gives nothing back: out[k] freed */
            return false;
        }
        job->out[i] = NULL;
    }
    wf_cmsg_xfer_t *x = hdr_begin(ch, WF_CMSG_XFER_OUT, job->world_epoch);
    x->seq = job->seq;
    x->st = WF_OK;
    x->n = n;
    return send_msg(ch, NULL, f, n);
}

/* Count a message whose key's node (the gate's frame) is not its
 * routing id's; log at most one a second (the names are node names of
 * [A-Za-z0-9._-], or escaped). */
static void note_impostor(wf_channel_t *ch, const char *name, const char *u)
{
    ch->dropped++;
    uint64_t now = wf_now_usec();
    if (ch->drop_logged_us && now - ch->drop_logged_us < 1000000)
        return;
    ch->drop_logged_us = now;
    char qn[WF_QUOTE_MAX], qu[WF_QUOTE_MAX];
    wf_log(ch->log, WF_LOG_WARNING, "cluster: tensor channel: message claiming "
           "node %s from node %s's key dropped (%" PRIu64 " so far)",
           wf_escape(qn, sizeof qn, name, strlen(name), WF_ESC_ASCII),
           u ? wf_escape(qu, sizeof qu, u, strlen(u), WF_ESC_ASCII) : "(none)",
           ch->dropped);
}

uint64_t wf_channel_dropped(const wf_channel_t *ch)
{
    return ch->dropped;
}

void wf_channel_recv(wf_channel_t *ch)
{
    bool coord = ch->coord;
    for (int budget = 0; ch->sock && budget < 256; budget++) {
        /* [name, gate frame (ROUTER)], header, up to
         * WF_CMSG_XFER_MAX_FRAMES frames */
        zmq_msg_t p[3 + WF_CMSG_XFER_MAX_FRAMES];
        uint32_t n = 0, max = coord ? 3 + WF_CMSG_XFER_MAX_FRAMES
                                    : 1 + WF_CMSG_XFER_MAX_FRAMES;
        bool over = false, more = true;
        while (more) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, ch->sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            more = zmq_msg_more(&m);
            if (n < max) {
                zmq_msg_init(&p[n]);
                zmq_msg_move(&p[n++], &m);
            } else {
                over = true;
            }
            zmq_msg_close(&m);
        }
        if (n == 0)
            return;
        uint32_t h = coord ? 2 : 0;
        if (over) {
            ch->oversized++;
            wf_log_limited(ch->log, &ch->over_lim, WF_LOG_WARNING, "cluster: "
                           "tensor channel: a message of more than %u frames "
                           "dropped (%" PRIu64 " so far)", max, ch->oversized);
        }
        char name[WF_SETTINGS_NAME_MAX] = "";
        char err[WF_PROTO_ERROR_MAX];
        bool ok = false;
        if (coord && zmq_msg_size(&p[0]) < sizeof name)
            memcpy(name, zmq_msg_data(&p[0]), zmq_msg_size(&p[0]));
        bool named = !coord || (name[0] && strlen(name) == zmq_msg_size(&p[0]));
        wf_gate_meta_t meta;
        if (coord && named && (n < 2 ||
            !wf_gate_meta_read(zmq_msg_data(&p[1]), zmq_msg_size(&p[1]), &meta)))
            named = false;      /* not through the gate: cannot happen */
        if (coord && named && ch->keys && (!meta.curve || strcmp(meta.key_name, name) != 0)) {
            /* the routing id claims a node the key is not */
            named = false;
            note_impostor(ch, name, meta.curve ? meta.key_name : NULL);
        }
        if (!over && n > h && named &&
            wf_ctl_decode(zmq_msg_data(&p[h]), zmq_msg_size(&p[h]), &ch->msg,
                          err, sizeof err) == WF_OK &&
            wf_cmsg_get(&ch->msg, &ch->hdr, err, sizeof err) == WF_OK)
            ok = ch->hdr.type == WF_CMSG_XFER_HI || ch->hdr.type == WF_CMSG_XFER_IN ||
                 ch->hdr.type == WF_CMSG_XFER_OUT;
        if (ok)
            ch->fn(ch->arg, coord ? name : NULL, &ch->hdr, &p[h + 1], n - h - 1);
        for (uint32_t k = 0; k < n; k++)
            zmq_msg_close(&p[k]);
    }
}
