/* requests.c — one client message: receive every frame, validate the
 * header against the limits before anything is allocated, then answer
 * hello and status here, admit attention / forward jobs, start a
 * reconfiguration, or hand model requests to model_requests.c. Called by
 * server.c (the poll loop); calls model_requests.c, reconfigure.c,
 * dispatch.c and replies.c (server_impl.h).
 */
#include "server_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "errf.h"

/* identity, optional empty delimiter, header, tensor frames */
#define MAX_PARTS (3 + WF_PROTO_MAX_TENSORS)

/* snprintf(dst, "%s", src) without the restrict trouble: the reply
 * scratch and the workers live in the same wf_server_t. */
static void copy_name(char *dst, size_t size, const char *src)
{
    size_t n = strnlen(src, size - 1);
    memmove(dst, src, n);
    dst[n] = '\0';
}

static void fill_hello(const wf_server_t *srv, wf_hello_info_t *h)
{
    h->protocol = WF_PROTOCOL_VERSION;
    snprintf(h->weft_version, sizeof h->weft_version, "%s", WEFT_VERSION);
    snprintf(h->backend, sizeof h->backend, "%s", srv->ops->name);
    h->devices = srv->settings.device_count;
    h->max_header_bytes = srv->settings.limits.max_header_bytes;
    h->max_tensor_bytes = srv->settings.limits.max_tensor_bytes;
    h->max_tensors = srv->settings.limits.max_tensors;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "re");
    if (!f)
        return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? resident * (uint64_t)page : 0;
}

static void fill_status(const wf_server_t *srv, wf_status_info_t *si)
{
    const wf_sched_t *s = &srv->sched;
    snprintf(si->weft_version, sizeof si->weft_version, "%s", WEFT_VERSION);
    snprintf(si->backend, sizeof si->backend, "%s", srv->ops->name);
    si->epoch = s->mesh.epoch;
    si->mesh = s->mesh.deg;
    si->reconfiguring = srv->reconf.active ? 1 : 0;
    si->uptime_ms = (wf_now_usec() - srv->t_start_us) / 1000;
    si->queue_depth = s->depth;
    si->queue_capacity = s->capacity;
    si->in_flight = s->in_flight;
    si->jobs_served = s->served;
    si->jobs_failed = s->failed;
    si->requests_rejected = srv->rejected;
    si->rss_bytes = rss_bytes();
    si->device_count = srv->n_workers;
    if (srv->world)
        wf_cluster_fill_status(wf_world_cluster(srv->world), si);
    srv_metrics_fill_status(srv, si);
    for (uint32_t d = 0; d < srv->n_workers; d++) {
        const wf_worker_t *w = &srv->workers[d];
        wf_device_info_t *di = &si->devices[d];
        di->index = d;
        copy_name(di->name, sizeof di->name, w->name);
        di->memory_total = w->memory_total;
        uint32_t g = d + (srv->world ? wf_world_first_rank(srv->world) : 0); /* world rank */
        di->memory_used = s->used[g];
        di->jobs_served = atomic_load(&w->jobs_served);
        di->busy = atomic_load(&w->busy) ? 1 : 0;
        wf_mesh_coords_t c = { 0, 0, 0, 0 };
        wf_mesh_coords(&s->mesh, (int)g, &c);
        di->rank = g;
        di->coords[0] = (uint32_t)c.dp;
        di->coords[1] = (uint32_t)c.ring;
        di->coords[2] = (uint32_t)c.ulysses;
        di->coords[3] = (uint32_t)c.tp;
    }
}

/* A reconfigure request that decoded: start it or refuse it. */
static void handle_reconfigure(wf_server_t *srv, zmq_msg_t *identity, bool delim)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    if (srv->world && !wf_world_coordinator(srv->world)) {
        st = WF_E_NOT_COORDINATOR;
        wf_cluster_why_not(wf_world_cluster(srv->world), err, sizeof err);
    } else {
        const wf_reconf_req_t rreq = {
            .deg = req->args.reconfigure.mesh, .why = "request", .notify = true,
            .identity = identity, .delim = delim, .id = req->id,
            .done = srv_models_follow,
        };
        st = srv_reconf_start(srv, &rreq, err, sizeof err);
    }
    if (st == WF_OK)
        return;     /* cluster: the members follow once drained */
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "reconfigure request %" PRIu64 " refused: "
           "%s: %s", req->id, wf_status_name(st), err);
    srv_reply_error(srv, identity, delim, req->id, req->op, st, err);
}

/* Who sent a message, as its share (scheduler.h) and its sessions
 * (runtime/session.h) know it: its CURVE key's name (every connection with
 * that key is the same client), else the connection (the routing id): on
 * ipc:// a uid is not a client, so that one user's processes do not
 * starve each other. key: 'k' NAME or 'c' ROUTING-ID; label: how
 * messages name it. */
typedef struct client_id {
    unsigned char key[1 + 256];
    size_t len;
    char label[96];
} client_id_t;

static void client_id_of(const wf_server_t *srv, zmq_msg_t *identity,
                         const wf_gate_meta_t *meta, client_id_t *c)
{
    size_t len;
    const char *name = srv->access.mode == SRV_ACCESS_CURVE && meta->curve &&
                       meta->key_role != WF_ROLE_NONE ? meta->key_name : NULL;
    if (name) {
        char qn[WF_QUOTE_MAX];
        wf_quote(qn, name);
        snprintf(c->label, sizeof c->label, "key '%s'", qn);
        len = strnlen(name, 256);
        c->key[0] = 'k';
        memcpy(c->key + 1, name, len);
    } else {
        snprintf(c->label, sizeof c->label, "this connection");
        len = zmq_msg_size(identity);
        if (len > 256)
            len = 256;
        c->key[0] = 'c';
        memcpy(c->key + 1, zmq_msg_data(identity), len);
    }
    c->len = len + 1;
}

/* A forward of a denoising session (args.session): the job joins its
 * client's session (opened by its first forward), whose state its ranks
 * use. In a cluster the forward runs without (every block computed). */
static wf_status_t join_session(wf_server_t *srv, wf_djob_t *job, const client_id_t *who,
                                char *err, size_t err_len)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    if (job->req.op != WF_OP_FORWARD || !a->session || srv->world)
        return WF_OK;
    wf_status_t st;
    wf_session_t *sess = wf_session_get(&srv->sched, who->key, who->len, a->session, true,
                                        job->t_recv_us, &st);
    if (!sess) {
        if (st == WF_E_LIMIT)
            snprintf(err, err_len, "session %" PRIu64 ": session_max (%u) sessions are "
                     "open; end one (end_session) or let one idle for session_idle_ms "
                     "(%u)", a->session, srv->settings.session_max,
                     srv->settings.session_idle_ms);
        else
            snprintf(err, err_len, "session %" PRIu64 ": %s", a->session,
                     wf_status_str(st));
        return st;
    }
    wf_session_ref(sess);
    job->session = sess;
    job->session_sid = sess->sid;
    job->cache_threshold = a->cache_threshold;
    job->cache_reset = a->has_step && wf_session_step(sess, a->step);
    sess->last_us = job->t_recv_us;
    return WF_OK;
}

/* A job request (attention or forward) that passed validation: plan
 * (srv_plan_job, by op), admit, dispatch. Takes the identity and tensor
 * frames out of parts[]. */
static void submit_job(wf_server_t *srv, zmq_msg_t *parts, size_t h, size_t n,
                       bool delim, uint64_t t_recv, const wf_gate_meta_t *meta)
{
    const wf_request_t *req = &srv->req;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    wf_djob_t *job = NULL;
    if (srv->stopping) {
        st = WF_E_SHUTTING_DOWN;
        snprintf(err, sizeof err, "daemon is shutting down; no new jobs");
        goto reject;
    }
    if (srv->world && (!wf_world_coordinator(srv->world) ||
                       !wf_cluster_accepts_jobs(wf_world_cluster(srv->world)))) {
        st = !wf_world_coordinator(srv->world) ? WF_E_NOT_COORDINATOR
                                               : WF_E_UNAVAILABLE;
        wf_cluster_why_not(wf_world_cluster(srv->world), err, sizeof err);
        goto reject;
    }
    job = wf_djob_new();
    if (!job) {
        st = WF_E_INTERNAL;
        snprintf(err, sizeof err, "out of memory");
        wf_log(srv->log, WF_LOG_ERR, "request %" PRIu64 ": out of memory", req->id);
        goto reject;
    }
    job->req = *req;
    job->has_delim = delim;
    job->t_recv_us = t_recv;
    job->done = &srv->done;
    client_id_t who;
    client_id_of(srv, &parts[0], meta, &who);
    st = join_session(srv, job, &who, err, sizeof err);
    if (st == WF_OK)
        st = srv_plan_job(srv, job, &srv->sched.mesh, err, sizeof err);
    if (st == WF_OK) {
        for (size_t i = h + 1; i < n; i++)
            job->in_bytes += zmq_msg_size(&parts[i]);
        job->share = wf_sched_share(&srv->sched, who.key, who.len, who.label);
        if (!job->share) {
            st = WF_E_INTERNAL;
            snprintf(err, sizeof err, "out of memory");
        }
    }
    if (st == WF_OK)
        st = srv_time_admit(srv, job, err, sizeof err);
    if (st == WF_OK)
        st = wf_sched_admit(&srv->sched, job, err, sizeof err);
    if (st != WF_OK) {
        wf_djob_free(&job);
        goto reject;
    }
    zmq_msg_move(&job->identity, &parts[0]);
    for (size_t i = h + 1; i < n; i++) {
        zmq_msg_init(&job->frames[job->n_frames]);
        zmq_msg_move(&job->frames[job->n_frames++], &parts[i]);
    }
    srv_dispatch(srv);
    return;

reject:
    srv->rejected++;
    wf_log(srv->log, st == WF_E_QUEUE_FULL ? WF_LOG_DEBUG : WF_LOG_INFO,
           "request %" PRIu64 " refused: %s: %s", req->id, wf_status_name(st), err);
    srv_reply_error(srv, &parts[0], delim, req->id, req->op, st, err);
}

/* attention (op 3): q, k, v over the mesh's ring x ulysses (or split by
 * heads), PROTOCOL.md section 3.3. */
static void handle_attention(wf_server_t *srv, zmq_msg_t *parts, size_t h,
                             size_t n, bool delim, uint64_t t_recv,
                             const wf_gate_meta_t *meta)
{
    submit_job(srv, parts, h, n, delim, t_recv, meta);
}

/* forward (op 8): a resident model's forward on one dp replica; its
 * tensors are bound to the model's schema when it is planned
 * (jobs/forward.c), PROTOCOL.md section 12.4. */
static void handle_forward(wf_server_t *srv, zmq_msg_t *parts, size_t h,
                           size_t n, bool delim, uint64_t t_recv,
                           const wf_gate_meta_t *meta)
{
    submit_job(srv, parts, h, n, delim, t_recv, meta);
}

/* end_session (op 10): the client's session ends; its state is freed
 * once its last job is done. The reply counts its forwards. */
static void handle_end_session(wf_server_t *srv, zmq_msg_t *identity,
                               const wf_gate_meta_t *meta, bool delim)
{
    const wf_request_t *req = &srv->req;
    uint64_t id = req->args.end_session.session;
    char err[WF_PROTO_ERROR_MAX];
    client_id_t who;
    client_id_of(srv, identity, meta, &who);
    wf_status_t st;
    wf_session_t *sess = wf_session_get(&srv->sched, who.key, who.len, id, false, 0, &st);
    if (!sess) {
        srv->rejected++;
        snprintf(err, sizeof err, "no session %" PRIu64 " of %s is open (ended "
                 "already, idle past session_idle_ms, or never opened)", id, who.label);
        srv_reply_error(srv, identity, delim, req->id, req->op, WF_E_BAD_ARGUMENT, err);
        return;
    }
    wf_reply_t *rep = srv_reply_ok(srv, req->id, req->op);
    rep->result.end_session.steps = sess->steps;
    rep->result.end_session.reused = sess->reused;
    wf_session_end(&srv->sched, sess, wf_now_usec());
    srv_reply_send(srv, identity, delim, rep, NULL);
    srv_dispatch(srv);          /* its memory may let the head in */
}

/* Does the job come from the connection with this routing id? */
static bool same_peer(wf_djob_t *job, zmq_msg_t *identity)
{
    size_t n = zmq_msg_size(identity);
    return zmq_msg_size(&job->identity) == n &&
           memcmp(zmq_msg_data(&job->identity), zmq_msg_data(identity), n) == 0;
}

/* The job `id` of this peer, queued (*queued true) or running; with
 * `any` (an admin), another connection's when this one has none. A
 * running job of this peer that a cancel has flagged already is found
 * all the same (*flagged true): it is the one the client means, so the
 * search never goes on to another connection's job with that id. Of
 * other connections' running jobs, a flagged one is passed over: an
 * admin's repeated cancel of an id reaches the next job with it. */
static wf_djob_t *find_job(wf_server_t *srv, uint64_t id, zmq_msg_t *identity,
                           bool any, bool *queued, bool *flagged)
{
    *flagged = false;
    for (int pass = 0; pass < (any ? 2 : 1); pass++) {
        for (wf_djob_t *j = srv->sched.head; j; j = j->next)
            if (j->req.id == id && (pass == 1 || same_peer(j, identity))) {
                *queued = true;
                return j;
            }
        for (wf_djob_t *j = srv->sched.running; j; j = j->run_next) {
            if (j->req.id != id || (pass == 0 && !same_peer(j, identity)))
                continue;
            bool stop = atomic_load(&j->stop_req) != WF_OK;
            if (pass == 1 && stop)
                continue;
            *queued = false;
            *flagged = stop;
            return j;
        }
    }
    return NULL;
}

/* cancel {id}: a queued job is answered WF_E_CANCELLED at once; a running
 * one is flagged and stops at its next step boundary (job.h), answered
 * then. The cancel itself: OK when found (also when this client's job is
 * flagged already: the job still gets its one reply), WF_E_BAD_ARGUMENT
 * when this client (an admin: anyone) has no such job waiting or
 * running. A job running across cluster nodes cannot stop early:
 * refused (WF_E_BUSY). */
static void handle_cancel(wf_server_t *srv, zmq_msg_t *identity,
                          const wf_gate_meta_t *meta, bool delim)
{
    const wf_request_t *req = &srv->req;
    uint64_t id = req->args.cancel.id;
    char who[160], err[WF_PROTO_ERROR_MAX];
    bool admin = srv_access_role(srv, meta, who, sizeof who) == WF_ROLE_ADMIN;
    bool queued = false, flagged = false;
    wf_djob_t *job = find_job(srv, id, identity, admin, &queued, &flagged);
    if (!job) {
        srv->rejected++;
        snprintf(err, sizeof err, "no job %" PRIu64 " of this client is queued "
                 "or running (answered already, or never admitted)", id);
        srv_reply_error(srv, identity, delim, req->id, req->op, WF_E_BAD_ARGUMENT, err);
        return;
    }
    if (!queued && !job->stoppable) {
        srv->rejected++;
        snprintf(err, sizeof err, "job %" PRIu64 " runs across cluster nodes and "
                 "cannot stop before its end", id);
        srv_reply_error(srv, identity, delim, req->id, req->op, WF_E_BUSY, err);
        return;
    }
    wf_log(srv->log, WF_LOG_INFO, "request %" PRIu64 ": cancel of job %" PRIu64
           " (%s) by %s", req->id, id, queued ? "queued" : flagged ?
           "running, already cancelling" : "running", who);
    /* A running job is flagged before the cancel is answered: a client
     * that acts on the answer (here, a test releasing a held job) finds
     * the job's next step boundary already stopping it. The job's own
     * reply still comes after the cancel's: this thread sends both. */
    if (!queued)
        atomic_store(&job->stop_req, WF_E_CANCELLED);
    /* the cancel's reply first: the job's may follow at once */
    uint64_t cid = req->id;
    uint32_t cop = req->op;
    srv_reply_send(srv, identity, delim, srv_reply_ok(srv, cid, cop), NULL);
    if (queued) {
        wf_sched_remove(&srv->sched, job);
        atomic_store(&job->status, WF_E_CANCELLED);
        wf_djob_stop_message(job, WF_E_CANCELLED, -1);
        srv_reply_job(srv, job);
        wf_djob_free(&job);
        srv_dispatch(srv);      /* the head may have changed */
    }
}

static const char *op_label(uint32_t op)
{
    switch (op) {
    case WF_OP_HELLO: return "hello";
    case WF_OP_STATUS: return "status";
    case WF_OP_ATTENTION: return "attention";
    case WF_OP_RECONFIGURE: return "reconfigure";
    case WF_OP_LOAD_MODEL: return "load_model";
    case WF_OP_UNLOAD_MODEL: return "unload_model";
    case WF_OP_LIST_MODELS: return "list_models";
    case WF_OP_FORWARD: return "forward";
    case WF_OP_CANCEL: return "cancel";
    case WF_OP_END_SESSION: return "end_session";
    default: return "this op";
    }
}

/* May the peer (the gate's frame `meta`) run srv->req's op? When not,
 * the refusal is logged (notice, with who the peer is) and its message
 * is in err. */
static bool role_allows(wf_server_t *srv, const wf_gate_meta_t *meta, char *err,
                        size_t err_len)
{
    const wf_request_t *req = &srv->req;
    char who[160];
    wf_role_t role = srv_access_role(srv, meta, who, sizeof who);
    if (srv_access_op_allowed(role, req->op))
        return true;
    if (role == WF_ROLE_NONE)
        snprintf(err, err_len, "%s refused: this client (%s) has no role",
                 op_label(req->op), who);
    else
        snprintf(err, err_len, "%s needs the admin role; this client (%s) has "
                 "the %s role", op_label(req->op), who, wf_role_name(role));
    wf_log(srv->log, WF_LOG_NOTICE, "request %" PRIu64 " %s denied: %s, role %s",
           req->id, op_label(req->op), who, wf_role_name(role));
    return false;
}

/* Validate and answer / admit one received message. parts[0] is the
 * identity; meta the gate's word on the peer; the caller closes every
 * part afterwards. */
static void handle_message(wf_server_t *srv, zmq_msg_t *parts, size_t n,
                           bool overflow, uint64_t t_recv, const wf_gate_meta_t *meta)
{
    wf_request_t *req = &srv->req;
    const wf_limits_t *lim = &srv->settings.limits;
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t st;
    bool delim = n > 1 && zmq_msg_size(&parts[1]) == 0;
    size_t h = delim ? 2 : 1;       /* index of the header frame */

    memset(req, 0, offsetof(wf_request_t, tensors));
    if (meta->limit[0]) {
        /* the gate dropped what went over its limits; the header stayed
         * unless it was the frame over them */
        if (h < n)
            wf_request_peek(zmq_msg_data(&parts[h]), zmq_msg_size(&parts[h]),
                            &req->id, &req->op);
        st = WF_E_LIMIT;
        snprintf(err, sizeof err, "%s", meta->limit);
        goto reject;
    }
    if (h >= n) {
        st = WF_E_MALFORMED;
        snprintf(err, sizeof err, "message has no header frame");
        goto reject;
    }
    const void *hdr = zmq_msg_data(&parts[h]);
    size_t hdr_len = zmq_msg_size(&parts[h]);

    /* MAX_PARTS leaves room for a delimiter: without one, 17 tensor
     * frames still fit in parts[] and must be refused here, before
     * sizes[WF_PROTO_MAX_TENSORS] below is filled. */
    size_t n_frames = n - h - 1;
    if (n_frames > WF_PROTO_MAX_TENSORS)
        overflow = true;
    if (hdr_len > lim->max_header_bytes || overflow) {
        wf_request_peek(hdr, hdr_len, &req->id, &req->op);
        st = WF_E_LIMIT;
        if (overflow)
            snprintf(err, sizeof err, "more than %d tensor frames",
                     WF_PROTO_MAX_TENSORS);
        else
            snprintf(err, sizeof err, "header of %zu bytes exceeds max_header_bytes "
                     "%" PRIu64, hdr_len, lim->max_header_bytes);
        goto reject;
    }
    st = wf_request_decode(hdr, hdr_len, lim, req, err, sizeof err);
    srv->reply_version = req->version;      /* 0 before "v" was read */
    if (st != WF_OK)
        goto reject;
    size_t sizes[WF_PROTO_MAX_TENSORS];
    for (size_t i = 0; i < n_frames; i++)
        sizes[i] = zmq_msg_size(&parts[h + 1 + i]);
    st = wf_request_check_frames(req, n_frames, sizes, err, sizeof err);
    if (st != WF_OK)
        goto reject;
    /* Once per message, before any work: the role of the peer that sent
     * the header frame (the identity frame is made here and carries no
     * credentials). */
    if (!role_allows(srv, meta, err, sizeof err)) {
        srv->rejected++;
        srv_reply_error(srv, &parts[0], delim, req->id, req->op, WF_E_DENIED, err);
        return;
    }

    wf_reply_t *rep;
    switch (req->op) {
    case WF_OP_HELLO:
    case WF_OP_STATUS:
        rep = srv_reply_ok(srv, req->id, req->op);
        if (req->op == WF_OP_HELLO) {
            fill_hello(srv, &rep->result.hello);
            rep->features = WF_FEATURES_ALL;
        }
        else
            fill_status(srv, &rep->result.status);
        srv_reply_send(srv, &parts[0], delim, rep, NULL);
        return;
    case WF_OP_ATTENTION:
        handle_attention(srv, parts, h, n, delim, t_recv, meta);
        return;
    case WF_OP_FORWARD:
        handle_forward(srv, parts, h, n, delim, t_recv, meta);
        return;
    case WF_OP_LOAD_MODEL:
        srv_models_load(srv, &parts[0], delim);
        return;
    case WF_OP_UNLOAD_MODEL:
        srv_models_unload(srv, &parts[0], delim);
        return;
    case WF_OP_LIST_MODELS:
        srv_models_list(srv, &parts[0], delim);
        return;
    case WF_OP_RECONFIGURE:
        handle_reconfigure(srv, &parts[0], delim);
        return;
    case WF_OP_CANCEL:
        handle_cancel(srv, &parts[0], meta, delim);
        return;
    case WF_OP_END_SESSION:
        handle_end_session(srv, &parts[0], meta, delim);
        return;
    default:
        /* The decoder refuses unknown ops; keep a reply for a new one. */
        st = WF_E_UNKNOWN_OP;
        snprintf(err, sizeof err, "op %u not served", req->op);
        goto reject;
    }

reject:
    srv->rejected++;
    wf_log(srv->log, WF_LOG_INFO, "request %" PRIu64 " op %u refused: %s: %s",
           req->id, req->op, wf_status_name(st), err);
    srv_reply_error(srv, &parts[0], delim, req->id, req->op, st, err);
}

/* Read one whole multipart message (every frame, even of a message that
 * will be refused) and handle it. False when none was waiting. */
bool srv_request_recv(wf_server_t *srv)
{
    zmq_msg_t parts[MAX_PARTS];
    zmq_msg_init(&parts[0]);
    if (zmq_msg_recv(&parts[0], srv->router, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        if (e != EAGAIN && e != EINTR)
            wf_log(srv->log, WF_LOG_ERR, "receive: %s", zmq_strerror(e));
        zmq_msg_close(&parts[0]);
        return false;
    }
    uint64_t t_recv = wf_now_usec();
    size_t n = 1;
    bool overflow = false;
    bool more = zmq_msg_more(&parts[0]);
    /* the gate's frame (gate.h) comes first */
    wf_gate_meta_t meta;
    bool has_meta = false;
    if (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, srv->router, 0) >= 0) {
            has_meta = wf_gate_meta_read(zmq_msg_data(&m), zmq_msg_size(&m), &meta);
            more = zmq_msg_more(&m);
        } else {
            more = false;
        }
        zmq_msg_close(&m);
    }
    while (more) {
        /* The rest of a multipart message is already here: no waiting. */
        zmq_msg_t *m = &parts[n];
        zmq_msg_t spill;
        if (n == MAX_PARTS) {
            m = &spill;
            overflow = true;
        }
        zmq_msg_init(m);
        if (zmq_msg_recv(m, srv->router, 0) < 0) {
            wf_log(srv->log, WF_LOG_ERR, "receive: %s", zmq_strerror(zmq_errno()));
            zmq_msg_close(m);
            break;
        }
        more = zmq_msg_more(m);
        if (m == &spill)
            zmq_msg_close(m);
        else
            n++;
    }
    if (has_meta)
        handle_message(srv, parts, n, overflow, t_recv, &meta);
    else
        wf_log(srv->log, WF_LOG_ERR, "a client message without the gate's frame "
               "(dropped)");
    for (size_t i = 0; i < n; i++)
        zmq_msg_close(&parts[i]);
    return true;
}
