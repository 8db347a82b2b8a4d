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

/* Send [identity, (empty), header, outputs of job...]. The identity is
 * consumed on success. Output buffers pass to ZeroMQ (zero-copy; freed on
 * its I/O thread once sent) and are taken out of the job. */
void srv_reply_send(wf_server_t *srv, zmq_msg_t *identity, bool delim,
                    const wf_reply_t *rep, wf_djob_t *job)
{
    wf_buf_reset(&srv->buf);
    wf_status_t st = wf_reply_encode(rep, &srv->buf);
    if (st != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "reply to request %" PRIu64 ": cannot "
               "encode: %s", rep->id, wf_status_name(st));
        return;
    }
    uint32_t n_out = job && rep->status == WF_OK ? job->n_outputs : 0;
    if (zmq_msg_send(identity, srv->router, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        wf_log(srv->log, e == EHOSTUNREACH ? WF_LOG_INFO : WF_LOG_WARNING,
               "reply to request %" PRIu64 " dropped: %s", rep->id,
               e == EHOSTUNREACH ? "client gone" : zmq_strerror(e));
        return;
    }
    /* After the identity frame ZeroMQ takes the rest of the message. */
    if (delim)
        zmq_send(srv->router, "", 0, ZMQ_SNDMORE);
    zmq_send(srv->router, srv->buf.data, srv->buf.len, n_out ? ZMQ_SNDMORE : 0);
    for (uint32_t i = 0; i < n_out; i++) {
        zmq_msg_t m;
        if (!job->out[i] && i < job->n_out_msgs) {
            /* the outputs a member's root sent over the tensor channel:
             * passed on as they came (zero-copy) */
            if (zmq_msg_send(&job->out_msg[i], srv->router,
                             i + 1 < n_out ? ZMQ_SNDMORE : 0) < 0)
                zmq_send(srv->router, "", 0, i + 1 < n_out ? ZMQ_SNDMORE : 0);
            continue;
        }
        if (zmq_msg_init_data(&m, job->out[i], (size_t)job->out_desc[i].nbytes,
                              free_output, NULL) != 0) {
            /* Cannot happen with a non-NULL buffer; keep the frame count. */
            zmq_send(srv->router, "", 0, i + 1 < n_out ? ZMQ_SNDMORE : 0);
            continue;
        }
        job->out[i] = NULL;
        if (zmq_msg_send(&m, srv->router, i + 1 < n_out ? ZMQ_SNDMORE : 0) < 0)
            zmq_msg_close(&m);
    }
}

wf_reply_t *srv_reply_ok(wf_server_t *srv, uint64_t id, uint32_t op)
{
    wf_reply_t *rep = &srv->reply;
    memset(rep, 0, sizeof *rep);
    rep->version = WF_PROTOCOL_VERSION;
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
    if (st != WF_OK) {
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
    rep->result.attention.queue_us = job->t_dispatch_us - job->t_recv_us;
    rep->result.attention.compute_us = job->t_done_us - job->t_dispatch_us;
    rep->result.attention.devices = (uint32_t)job->group_size;
    wf_log(srv->log, WF_LOG_DEBUG, "job %" PRIu64 " done: queue %" PRIu64
           " us, compute %" PRIu64 " us, %d device(s)", job->req.id,
           rep->result.attention.queue_us, rep->result.attention.compute_us,
           job->group_size);
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
