/* replies.c — what the daemon sends back: a reply with its output frames
 * (zero-copy), an error reply, a job's reply (with the cluster's account
 * of a lost node), the status line for systemd. Called by every other file
 * of daemon/server/; calls none of them (server_impl.h).
 */
#include "server_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void free_output(void *data, void *hint)
{
    (void)hint;
    free(data);
}

/* Send the identity (a copy), then frames[0..n) (consumed). 0, or the
 * errno of the identity frame: EAGAIN (the peer's queue is at SNDHWM;
 * nothing was sent, the frames are untouched), EHOSTUNREACH (gone). After
 * the identity frame ZeroMQ takes the whole message (HWM is checked on
 * the first frame only). */
static int send_frames(wf_server_t *srv, zmq_msg_t *identity, zmq_msg_t *frames,
                       uint32_t n)
{
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_copy(&id, identity) != 0 ||
        zmq_msg_send(&id, srv->router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&id);
        return e ? e : EINVAL;
    }
    for (uint32_t i = 0; i < n; i++)
        if (zmq_msg_send(&frames[i], srv->router, i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            zmq_msg_close(&frames[i]);
    return 0;
}

static void pending_free(wf_server_t *srv, srv_conn_t *c, srv_pending_t *p)
{
    for (uint32_t i = 0; i < p->n_frames; i++)
        zmq_msg_close(&p->frames[i]);
    wf_sched_release_reply(&srv->sched, p->share, p->share_bytes);
    c->small_bytes -= p->small_bytes;
    free(p);
}

static srv_conn_t *conn_find(wf_server_t *srv, zmq_msg_t *identity)
{
    size_t len = zmq_msg_size(identity);
    for (srv_conn_t *c = srv->waiting; c; c = c->next)
        if (zmq_msg_size(&c->identity) == len &&
            memcmp(zmq_msg_data(&c->identity), zmq_msg_data(identity), len) == 0)
            return c;
    return NULL;
}

static void conn_unlink(wf_server_t *srv, srv_conn_t *c)
{
    for (srv_conn_t **link = &srv->waiting; *link; link = &(*link)->next)
        if (*link == c) {
            *link = c->next;
            break;
        }
    zmq_msg_close(&c->identity);
    free(c);
}

/* Drop every reply waiting for c, free c. */
static void conn_drop(wf_server_t *srv, srv_conn_t *c, const char *why)
{
    uint32_t n = 0;
    while (c->head) {
        srv_pending_t *p = c->head;
        c->head = p->next;
        pending_free(srv, c, p);
        n++;
    }
    srv->replies_dropped += n;
    wf_log(srv->log, WF_LOG_INFO, "%u waiting repl%s dropped: %s", n,
           n == 1 ? "y" : "ies", why);
    conn_unlink(srv, c);
}

/* Keep a reply that ZeroMQ did not take (p: its frames, share). False:
 * out of memory, or a reply without a share past the connection's bound
 * (the caller drops it). */
static bool conn_keep(wf_server_t *srv, srv_conn_t *c, zmq_msg_t *identity,
                      srv_pending_t *p)
{
    if (!p->share && c &&
        c->small_bytes + p->small_bytes > srv->settings.client_reply_bytes)
        return false;
    srv_pending_t *kept = malloc(sizeof *kept);
    if (!kept)
        return false;
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c) {
            free(kept);
            return false;
        }
        zmq_msg_init(&c->identity);
        zmq_msg_copy(&c->identity, identity);
        c->next = srv->waiting;
        srv->waiting = c;
        srv->retry_ms = 1;
    }
    *kept = *p;
    for (uint32_t i = 0; i < p->n_frames; i++) {
        zmq_msg_init(&kept->frames[i]);
        zmq_msg_move(&kept->frames[i], &p->frames[i]);
    }
    kept->next = NULL;
    if (c->tail)
        c->tail->next = kept;
    else
        c->head = kept;
    c->tail = kept;
    c->n++;
    c->small_bytes += kept->small_bytes;
    return true;
}

/* Send [identity, (empty), header, outputs of job...] now, or keep it
 * (see server_impl.h). Output buffers pass to ZeroMQ (zero-copy; freed on
 * its I/O thread once sent) and are taken out of the job; so is its
 * share's reservation. */
void srv_reply_send(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                    const wf_reply_t *rep, wf_djob_t *job)
{
    srv_pending_t p;
    memset(&p, 0, sizeof p);
    p.id = rep->id;
    if (job) {
        p.share = job->share;
        p.share_bytes = job->out_bytes;
        job->share = NULL;
    }
    wf_buf_reset(&srv->buf);
    wf_status_t st = wf_reply_encode(rep, &srv->buf);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reply to request %" PRIu64 ": cannot "
               "encode: %s", rep->id, wf_status_name(st));
        wf_sched_release_reply(&srv->sched, p.share, p.share_bytes);
        return;
    }
    uint32_t n_out = job && rep->status == WF_OK ? job->n_outputs : 0;
    if (delim)
        zmq_msg_init(&p.frames[p.n_frames++]);
    zmq_msg_t *hdr = &p.frames[p.n_frames++];
    if (zmq_msg_init_size(hdr, srv->buf.len) == 0)
        memcpy(zmq_msg_data(hdr), srv->buf.data, srv->buf.len);
    else
        zmq_msg_init(hdr);      /* out of memory: an empty header frame */
    for (uint32_t i = 0; i < n_out; i++) {
        zmq_msg_t *m = &p.frames[p.n_frames++];
        zmq_msg_init(m);
        if (!job->out[i] && i < job->n_out_msgs) {
            /* the outputs a member's root sent over the tensor channel:
             * passed on as they came (zero-copy) */
            zmq_msg_move(m, &job->out_msg[i]);
            continue;
        }
        if (job->out[i] &&
            zmq_msg_init_data(m, job->out[i], (size_t)job->out_desc[i].nbytes,
                              free_output, NULL) == 0)
            job->out[i] = NULL;
        /* else (cannot happen with a buffer): an empty frame keeps the count */
    }
    if (!p.share)
        p.small_bytes = srv->buf.len;
    srv_conn_t *c = conn_find(srv, identity);
    int e = c ? EAGAIN : send_frames(srv, identity, p.frames, p.n_frames);
    if (e == 0) {
        wf_sched_release_reply(&srv->sched, p.share, p.share_bytes);
        return;
    }
    if (e == EAGAIN && conn_keep(srv, c, identity, &p))
        return;
    /* the client is gone, or a reply without a share does not fit */
    for (uint32_t i = 0; i < p.n_frames; i++)
        zmq_msg_close(&p.frames[i]);
    wf_sched_release_reply(&srv->sched, p.share, p.share_bytes);
    srv->replies_dropped++;
    wf_log_limited(srv->log, &srv->dropped_lines,
                   e == EHOSTUNREACH ? WF_LOG_INFO : WF_LOG_WARNING,
                   "reply to request %" PRIu64 " dropped: %s", rep->id,
                   e == EHOSTUNREACH ? "client gone"
                   : e == EAGAIN     ? "the client does not read its replies and those "
                                       "waiting pass client_reply_bytes"
                                     : zmq_strerror(e));
}

bool srv_replies_retry(wf_server_t *srv)
{
    bool progress = false;
    srv_conn_t *c = srv->waiting;
    while (c) {
        srv_conn_t *next = c->next;
        int e = 0;
        while (c->head) {
            srv_pending_t *p = c->head;
            e = send_frames(srv, &c->identity, p->frames, p->n_frames);
            if (e != 0)
                break;
            p->n_frames = 0;        /* taken by ZeroMQ */
            c->head = p->next;
            if (!c->head)
                c->tail = NULL;
            c->n--;
            pending_free(srv, c, p);
            progress = true;
        }
        if (!c->head) {
            conn_unlink(srv, c);
        } else if (e != EAGAIN) {
            conn_drop(srv, c, e == EHOSTUNREACH ? "client gone" : zmq_strerror(e));
            progress = true;
        }
        c = next;
    }
    return progress;
}

void srv_replies_drop_all(wf_server_t *srv)
{
    while (srv->waiting)
        conn_drop(srv, srv->waiting, "the daemon stops");
}

wf_reply_t *srv_reply_ok(wf_server_t *srv, uint64_t id, uint32_t op)
{
    wf_reply_t *rep = &srv->reply;
    memset(rep, 0, sizeof *rep);
    rep->version = srv->reply_version ? srv->reply_version : WF_PROTOCOL_VERSION;
    rep->id = id;
    rep->op = op;
    rep->status = WF_OK;
    rep->epoch = srv->sched.mesh.epoch;
    return rep;
}

static void send_error(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                       uint64_t id, uint32_t op, wf_status_t st, const char *msg)
{
    wf_reply_t *rep = srv_reply_ok(srv, id, op);
    rep->status = st;
    snprintf(rep->error, sizeof rep->error, "%s", msg && *msg ? msg : wf_status_str(st));
    srv_reply_send(srv, identity, delim, rep, NULL);
}

void srv_reply_error(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                     uint64_t id, uint32_t op, wf_status_t st, const char *msg)
{
    srv_metrics_refused(srv, op, st);
    send_error(srv, identity, delim, id, op, st, msg);
}

void srv_reply_fail(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                    uint64_t id, uint32_t op, wf_status_t st, const char *msg)
{
    srv_metrics_failed(srv, op, st);
    send_error(srv, identity, delim, id, op, st, msg);
}

void srv_reply_job(wf_server_t *srv, wf_djob_t *job)
{
    wf_status_t st = (wf_status_t)atomic_load(&job->status);
    srv->reply_version = job->req.version;
    wf_sched_release_inputs(&srv->sched, job);
    if (st != WF_OK) {
        /* an error reply has no outputs: their reservation ends here */
        wf_sched_release_job(&srv->sched, job);
        char msg[WF_PROTO_ERROR_MAX];
        if (srv->world)
            wf_world_explain(srv->world, job, &st);
        if (job->err[0])
            snprintf(msg, sizeof msg, "%s", job->err);
        else
            snprintf(msg, sizeof msg, "job failed on a device: %s", wf_status_str(st));
        srv_reply_fail(srv, &job->identity, job->has_delim, job->req.id, job->req.op,
                       st, msg);
        return;
    }
    srv_metrics_served(srv, job->req.op, job->t_done_us > job->t_recv_us
                                         ? job->t_done_us - job->t_recv_us : 0);
    wf_reply_t *rep = srv_reply_ok(srv, job->req.id, job->req.op);
    rep->epoch = job->epoch;
    rep->n_tensors = job->n_outputs;
    memcpy(rep->tensors, job->out_desc, job->n_outputs * sizeof job->out_desc[0]);
    uint64_t queue_us = job->t_dispatch_us - job->t_recv_us;
    uint64_t compute_us = job->t_done_us - job->t_dispatch_us;
    if (job->kind == WF_DJOB_FORWARD) {
        rep->result.forward.queue_us = queue_us;
        rep->result.forward.compute_us = compute_us;
        rep->result.forward.devices = (uint32_t)job->group_size;
        if (job->session) {
            /* the session's count, and the metric, of what the cache did */
            bool reused = atomic_load(&job->cache_used) == WF_CACHE_REUSED;
            rep->result.forward.cache = reused ? WF_CACHE_REUSED : WF_CACHE_COMPUTED;
            job->session->steps++;
            job->session->reused += reused;
            job->session->last_us = job->t_done_us;
            srv_metrics_cache(srv, reused);
        }
    } else {
        rep->result.attention.queue_us = queue_us;
        rep->result.attention.compute_us = compute_us;
        rep->result.attention.devices = (uint32_t)job->group_size;
    }
    wf_log(srv->log, WF_LOG_DEBUG, "job %" PRIu64 " done: queue %" PRIu64
           " us, compute %" PRIu64 " us, %d device(s)", job->req.id, queue_us,
           compute_us, job->group_size);
    srv_reply_send(srv, &job->identity, job->has_delim, rep, job);
}

/* "dp=1,ring=2,ulysses=2,tp=1" (at most 63 bytes with the NUL). */
void srv_status_line(const wf_server_t *srv, char *buf, size_t len)
{
    char mesh[64];
    wf_mesh_degrees_format(&srv->sched.mesh.deg, mesh, sizeof mesh);
    snprintf(buf, len, "serving on %s, %u %s devices, mesh %s, epoch %" PRIu64,
             srv->endpoint, srv->settings.device_count, srv->ops->name,
             mesh, srv->sched.mesh.epoch);
}
