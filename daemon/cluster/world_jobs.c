/* world_jobs.c — the jobs of a cluster world: the coordinator's
 * descriptors to the members (wf_world_remote, the scheduler's remote
 * hook) and their answers ("done", "out" on the tensor channel, settled
 * when a world changes); a member's descriptors (member_job) queued in the
 * coordinator's order with the inputs that come on the tensor channel; the
 * abort of this node's part of the world. Called by world.c (world_impl.h)
 * and, through the callbacks world.c registers, by the control plane and
 * the tensor channel. Calls nothing in world.c.
 *
 * The descriptors are written by job_encode / fjob_encode and read back
 * by member_job / member_fjob through proto/cluster_msg.h's codecs.
 */
#include "world_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobs/attention.h"

/* A descriptor's ranks are world ranks of a job (proto/ bounds them). */
_Static_assert(WF_DJOB_MAX_WORLD == WF_CMSG_MAX_DEVICES, "job ranks bound");

static void member_flush(wf_world_t *w);

/* Abort this node's part of the comm world: see world_impl.h. */
void wf_world_abort(wf_world_t *w, const char *lost, const char *why)
{
    if (!w->local || w->aborted)
        return;
    member_flush(w);      /* parts still waiting for inputs: dropped */
    wf_comm_zmq_local_abort(w->local);
    w->aborted = true;
    w->sched->paused = true;
    w->abort_mesh_epoch = w->sched->mesh.epoch;
    /* node names may be cut to the field: the message stays readable */
    snprintf(w->lost, sizeof w->lost, "%.*s",
             (int)(sizeof w->lost - 1), lost ? lost : "");
    wf_log(w->log, WF_LOG_WARNING, "cluster: comm world of epoch %" PRIu64
           " aborted (%s); jobs in flight fail", w->world_epoch,
           lost ? lost : why);
}

int wf_world_node_index(const wf_cluster_node_t *nodes, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(nodes[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Coordinator, new world `nw`: the parts owed by nodes not in it fail now
 * as lost, those of nodes in it as aborted when the world was (`all`: a
 * late "done" is then ignored); the others keep their bits, renumbered
 * for the new table. */
void wf_world_settle_remote(wf_world_t *w, const wf_cluster_node_t *nw, uint32_t nn,
                            bool all, const char *lost)
{
    for (wf_djob_t *j = w->remote_jobs; j; j = j->rnext) {
        uint32_t keep = 0, bits = j->remote_pending, xroot = 0;
        j->remote_pending = 0;
        for (uint32_t i = 0; i < w->n_nodes; i++) {
            if (!(bits & (1u << i)))
                continue;
            const char *name = w->nodes[i].name;
            int to = wf_world_node_index(nw, nn, name);
            if (to >= 0 && !all) {
                keep |= 1u << to;
                if (j->xroot & (1u << i))
                    xroot = 1u << to;   /* its outputs still come */
                continue;
            }
            if (to >= 0) {
                wf_djob_rank_done(j, WF_E_ABORTED);
                continue;
            }
            if (!j->err[0])
                snprintf(j->err, sizeof j->err, "node(s) %s lost during the job "
                         "(mesh epoch %" PRIu64 "); the world re-forms without "
                         "them", lost[0] ? lost : name, j->epoch);
            wf_djob_rank_done(j, WF_E_NODE_LOST);
        }
        j->remote_pending = keep;
        j->xroot = xroot;
    }
}

/* The descriptor of `job` for the members (PROTOCOL.md section 11, "job";
 * proto/cluster_msg.h spells its keys). */
static wf_status_t job_encode(wf_ctl_msg_t *m, const wf_djob_t *job)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];
    const wf_tensor_desc_t *k = &job->req.tensors[a->k];
    wf_cjob_t d = {
        .seq = job->seq, .epoch = job->epoch, .id = job->req.id,
        .base = job->device[0], .g = (uint32_t)job->group_size,
        .B = q->shape[0], .Sq = q->shape[1], .Hq = q->shape[2], .D = q->shape[3],
        .Skv = k->shape[1], .Hkv = k->shape[2],
        .qdt = q->dtype, .kdt = k->dtype, .vdt = job->req.tensors[a->v].dtype,
        .odt = job->out_desc[0].dtype,
        .lse = job->n_outputs > 1, .causal = a->causal, .scale = job->scale,
        .rot = job->rotate_method, .f32 = job->convert_to_fp32,
        .ra = job->ring_anything, .ua = job->ulysses_anything,
        .lb = job->load_balance, .fp8 = a->fp8,
    };
    if (!job->cp) {
        /* a head split, its ranks all on one member (scheduler.c): which
         * ones, as offsets from `base` (device order = rank order) */
        d.hs = true;
        for (int r = 0; r < job->group_size; r++)
            d.mask |= UINT64_C(1) << ((job->device[r] - job->device[0]) & 63);
    }
    return wf_cjob_put(m, &d);
}

/* The descriptor of a forward job (PROTOCOL.md section 11, "fjob"): its
 * inputs as the request carries them. */
static wf_status_t fjob_encode(wf_ctl_msg_t *m, const wf_djob_t *job)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    wf_cmsg_t msg = { .type = WF_CMSG_FJOB };
    wf_cfjob_t *d = &msg.u.fjob;
    d->seq = job->seq;
    d->epoch = job->epoch;
    d->id = job->req.id;
    d->base = job->device[0];
    d->g = (uint32_t)job->group_size;
    d->lid = job->model_lid;
    if (job->req.n_tensors > WF_CFJOB_MAX_TENSORS)
        return WF_E_LIMIT;
    for (uint32_t i = 0; i < job->req.n_tensors; i++) {
        const wf_tensor_desc_t *t = &job->req.tensors[i];
        /* the plan bound the tensors to the model's schema: names of a
         * schema, ranks the load checked against the descriptor's */
        size_t len = strnlen(t->name, sizeof t->name);
        if (t->rank > WF_CFJOB_MAX_RANK || len >= sizeof d->t[i].name)
            return WF_E_LIMIT;
        memcpy(d->t[i].name, t->name, len);
        d->t[i].name[len] = '\0';
        d->t[i].dt = t->dtype;
        for (int j = 0; j < t->rank; j++)
            d->t[i].shape[j] = t->shape[j];
    }
    d->odt = job->out_desc[0].dtype;
    d->fp8 = a->fp8;
    d->alltoall = job->rotate_method == WF_ROTATE_ALLTOALL;
    return wf_cmsg_put(m, &msg);
}

/* Coordinator, at dispatch: the descriptor of `job` to every member
 * holding some of its ranks, and to the one holding its roots (if not
 * us) its inputs on the tensor channel. Returns the parts that will
 * answer. */
uint32_t wf_world_remote(void *arg, wf_djob_t *job)
{
    wf_world_t *w = arg;
    wf_ctl_msg_t *m = &w->msg;
    uint32_t parts = 0;
    job->remote_pending = 0;
    job->xroot = 0;
    job->world_epoch = w->world_epoch;
    if ((job->kind == WF_DJOB_FORWARD ? fjob_encode(m, job) : job_encode(m, job)) != WF_OK) {
        /* cannot happen (a fixed set of keys): but our ranks would wait
         * for the members' in a collective, so the world is aborted */
        snprintf(job->err, sizeof job->err, "job descriptor does not fit a "
                 "control message");
        atomic_store(&job->status, WF_E_INTERNAL);
        wf_world_abort(w, NULL, job->err);
        return 0;
    }
    uint32_t lo = job->device[0], hi = lo + (uint32_t)job->group_size;
    for (uint32_t i = 0; i < w->n_nodes; i++) {
        const wf_cluster_node_t *n = &w->nodes[i];
        if (n->self || n->first_rank >= hi || n->first_rank + n->ranks <= lo)
            continue;
        bool root = n->first_rank <= lo && lo < n->first_rank + n->ranks;
        if (wf_cluster_send(w->cluster, n->name, m) &&
            (!root || wf_channel_send_inputs(w->channel, job, n->name))) {
            job->remote_pending |= 1u << i;
            if (root)
                job->xroot = 1u << i;
            parts++;
        } else if (root) {
            /* its part would wait for the inputs forever, and every other
             * rank for it: the node counts as lost (the world re-forms) */
            snprintf(job->err, sizeof job->err, "node %s unreachable on the "
                     "tensor channel", n->name);
            atomic_store(&job->status, WF_E_NODE_LOST);
            wf_world_abort(w, n->name, NULL);
            wf_cluster_node_lost(w->cluster, n->name, "its tensor channel "
                                 "failed", wf_now_usec());
        } else {
            /* its ranks never come: the loss of the node aborts the others */
            snprintf(job->err, sizeof job->err, "node %s unreachable", n->name);
            atomic_store(&job->status, WF_E_NODE_LOST);
        }
    }
    if (job->remote_pending) {
        job->rnext = w->remote_jobs;
        w->remote_jobs = job;
    }
    return parts;
}

void wf_world_unlink_remote(wf_world_t *w, wf_djob_t *job)
{
    for (wf_djob_t **l = &w->remote_jobs; *l; l = &(*l)->rnext)
        if (*l == job) {
            *l = job->rnext;
            job->rnext = NULL;
            return;
        }
}

/* Member: "done" of our part back to the coordinator. */
void wf_world_member_done(wf_world_t *w, uint64_t seq, uint64_t epoch,
                          wf_status_t st)
{
    wf_log(w->log, WF_LOG_DEBUG, "cluster: part of seq %" PRIu64 " done: %s", seq,
           wf_status_name(st));
    wf_cmsg_t done = { .type = WF_CMSG_DONE,
                       .u.result = { .seq = seq, .epoch = epoch, .st = st } };
    if (wf_cmsg_put(&w->msg, &done) == WF_OK)
        wf_cluster_send(w->cluster, NULL, &w->msg);
}

/* The highest rank offset of a head split's mask (0 when none). */
static uint32_t mask_top(uint64_t mask)
{
    uint32_t top = 0;
    for (uint32_t b = 0; b < 64; b++)
        if (mask & (UINT64_C(1) << b))
            top = b;
    return top;
}

static wf_status_t member_root_setup(wf_world_t *w, wf_djob_t *job);
static void member_take_early(wf_world_t *w, wf_djob_t *job);
static void member_pump(wf_world_t *w);
static void early_drop(wf_world_t *w, uint32_t i);
static void early_drop_seq(wf_world_t *w, uint64_t seq, uint64_t epoch);

/* Member: give the job's ranks that are this node's (world ranks base +
 * the offset of each set bit of a head split's mask, base + 0..g-1 when
 * mask is 0) their task on the local worker; *local counts them and
 * *roots those among them below T (the ranks that read the inputs). */
static void member_claim_ranks(wf_world_t *w, wf_djob_t *job, uint32_t base, uint32_t g,
                               uint64_t mask, uint32_t T, int *local, int *roots)
{
    uint32_t lo = w->first_rank;
    for (uint32_t r = 0, off = 0; r < g; r++, off++) {
        while (mask && !(mask & (UINT64_C(1) << off)))
            off++;
        uint32_t wr = base + off;
        if (wr < lo || wr - lo >= w->n_workers)
            continue;
        job->device[r] = wr - lo;
        job->task[r].job = job;
        job->task[r].rank = (int)r;
        (*local)++;
        *roots += r < T;
    }
}

/* Member: queue a placed part (local: its ranks here), or answer at once
 * when none is ours. Takes job. Roots here take the inputs that came
 * early; inputs dropped for room fail the part rather than leave it
 * waiting. */
static void member_queue_part(wf_world_t *w, wf_djob_t *job, int local)
{
    if (local == 0) {
        uint64_t seq = job->seq, epoch = job->epoch;
        wf_djob_free(&job);
        wf_world_member_done(w, seq, epoch, WF_OK);
        return;
    }
    atomic_store(&job->remaining, local);
    if (job->root_here && !job->inputs_in)
        member_take_early(w, job);
    if (job->root_here && !job->inputs_in && w->early_lost_seq >= job->seq &&
        w->early_lost_epoch == job->world_epoch) {
        /* its inputs came and were dropped for room (the channel keeps
         * the coordinator's order): it would wait forever */
        wf_log(w->log, WF_LOG_ERR, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") were dropped; it fails", job->req.id, job->seq);
        job->inputs_in = true;
        job->inputs_bad = true;
    }
    wf_world_enqueue(w, job);
}

/* Member: a job descriptor from the coordinator: queue our ranks' parts
 * in the order received, which is the coordinator's. When the job's
 * roots are ours (a head split's: every rank, all ours), its inputs come
 * on the tensor channel: the part (and every one behind it) waits for
 * them in the member queue (mq_head). */
static void member_job(wf_world_t *w, const wf_ctl_msg_t *m)
{
    /* every field validated by wf_cjob_get (seq and epoch filled as far
     * as they came, for the answer); the world's size is ours to check */
    wf_cjob_t d;
    char err[WF_PROTO_ERROR_MAX] = "";
    bool ok = wf_cjob_get(m, &d, err, sizeof err) == WF_OK;
    /* the job's last world rank: base + the top bit of a head split's mask */
    uint32_t last = d.base + (d.hs ? mask_top(d.mask) : d.g - 1);
    if (ok && last >= w->world_size) {
        ok = false;
        snprintf(err, sizeof err, "ranks %u..%u outside the world of %u", d.base,
                 last, w->world_size);
    }
    const uint64_t seq = d.seq, epoch = d.epoch, id = d.id, base = d.base, g = d.g,
                   lse = d.lse, hs = d.hs, mask = d.mask;
    if (!ok) {
        wf_log(w->log, WF_LOG_WARNING, "cluster: malformed job descriptor (seq %"
               PRIu64 ") dropped: %s", seq, err);
        wf_world_member_done(w, seq, epoch, WF_E_MALFORMED);
        return;
    }
    /* The mesh the job runs under: the one in force, or the one of the
     * regroup already queued on the workers (the descriptor may overtake
     * its completion; the workers run the regroup first). */
    const wf_mesh_t *mesh = w->hooks.job_mesh(w->hooks.arg);
    if (w->aborted && w->failed_epoch == w->world_epoch &&
        w->built && epoch == mesh->epoch) {
        /* a failed job aborted this world; the coordinator rebuilds it (an
         * UNAVAILABLE here would count as losing this node) */
        wf_world_member_done(w, seq, epoch, WF_E_ABORTED);
        return;
    }
    uint32_t cp_ranks = mesh->deg.ring * mesh->deg.ulysses * mesh->deg.tp;
    if (!w->built || w->install || w->aborted || epoch != mesh->epoch ||
        (hs ? cp_ranks != mesh->deg.tp || (uint32_t)g > mesh->deg.tp
            : (uint32_t)g != cp_ranks)) {
        wf_log(w->log, WF_LOG_ERR, "cluster: job %" PRIu64 " (seq %" PRIu64
               ") for mesh epoch %" PRIu64 " refused: this node serves mesh epoch %"
               PRIu64, id, seq, epoch, mesh->epoch);
        wf_world_member_done(w, seq, epoch, WF_E_UNAVAILABLE);
        return;
    }
    wf_djob_t *job = wf_djob_new();
    if (!job) {
        wf_world_member_done(w, seq, epoch, WF_E_NO_MEMORY);
        return;
    }
    job->kind = WF_DJOB_ATTENTION;
    job->remote_part = true;
    job->seq = seq;
    job->epoch = epoch;
    job->plan_epoch = epoch;
    job->mesh = *mesh;
    job->cp = !hs;
    job->req.id = id;
    job->req.op = WF_OP_ATTENTION;
    job->req.n_tensors = 3;
    wf_attention_args_t *a = &job->req.args.attention;
    a->q = 0;
    a->k = 1;
    a->v = 2;
    a->causal = d.causal;
    a->return_lse = lse != 0;
    a->fp8 = d.fp8;
    const int64_t shp[3][4] = { { (int64_t)d.B, (int64_t)d.Sq, (int64_t)d.Hq, (int64_t)d.D },
                                { (int64_t)d.B, (int64_t)d.Skv, (int64_t)d.Hkv, (int64_t)d.D },
                                { (int64_t)d.B, (int64_t)d.Skv, (int64_t)d.Hkv, (int64_t)d.D } };
    const wf_dtype_t dts[3] = { d.qdt, d.kdt, d.vdt };
    for (int t = 0; t < 3; t++) {
        wf_tensor_desc_t *td = &job->req.tensors[t];
        td->dtype = dts[t];
        td->rank = 4;
        memcpy(td->shape, shp[t], sizeof shp[t]);
        td->frame = (uint32_t)t;
    }
    job->scale = d.scale;
    job->rotate_method = d.rot;
    job->convert_to_fp32 = d.f32;
    job->ring_anything = d.ra;
    job->ulysses_anything = d.ua;
    job->load_balance = d.lb;
    job->out_desc[0].dtype = d.odt;
    job->n_outputs = lse ? 2 : 1;
    job->group_size = (int)g;
    job->run = hs ? wf_attention_head_split_run : wf_attention_cp_run;
    job->done = w->done;
    job->world_epoch = w->world_epoch;
    int local = 0, roots = 0;
    /* the roots (they read the inputs and write the outputs): a cp job's
     * first tp ranks, every rank of a head split */
    uint32_t T = hs ? (uint32_t)g : mesh->deg.tp;
    member_claim_ranks(w, job, (uint32_t)base, (uint32_t)g, hs ? mask : 0, T, &local,
                       &roots);
    if (roots > 0 && ((uint32_t)roots != T || !wf_channel_socket(w->channel) ||
                      member_root_setup(w, job) != WF_OK)) {
        wf_log(w->log, WF_LOG_ERR, "cluster: job %" PRIu64 " (seq %" PRIu64
               ") has %s on this member; %s", id, seq,
               (uint32_t)roots != T ? "some of its roots"
                                    : !wf_channel_socket(w->channel) ? "its roots but no tensor channel"
                                                    : "roots it cannot take",
               (uint32_t)local == g || hs ? "refused" : "it fails");
        /* a head split has no comm: nothing waits for its ranks */
        if ((uint32_t)local == g || hs) {
            early_drop_seq(w, seq, job->world_epoch); /* its inputs, if they came */
            wf_djob_free(&job);
            wf_world_member_done(w, seq, epoch, WF_E_INTERNAL);
            return;
        }
        /* Not refused: the job's ranks on other nodes would wait for ours
         * in a collective forever. Our roots fail their step instead
         * (cp_step), which aborts the world; the coordinator rebuilds it.
         * They fail at once, not waiting for the inputs: inputs over our
         * own limits may never come (the channel drops a message over its
         * size limit); inputs that do come wait among the early ones and
         * are dropped with the aborted world. */
        job->root_here = true;
        job->inputs_bad = true;
        job->inputs_in = true;
    }
    member_queue_part(w, job, local);
}

/* Member: a forward job's descriptor ("fjob"): as member_job, on this
 * node's copy of the model (hooks.forward_plan). Its roots (replica ranks
 * 0..tp-1, one node: tp stays inside a node) read the inputs from the
 * tensor channel when they are ours. */
static void member_fjob(wf_world_t *w, const wf_ctl_msg_t *m)
{
    wf_cmsg_t *msg = &w->rx;
    char err[WF_PROTO_ERROR_MAX] = "";
    bool ok = wf_cmsg_get(m, msg, err, sizeof err) == WF_OK;
    const wf_cfjob_t d = msg->u.fjob;
    if (ok && d.base + d.g > w->world_size) {
        ok = false;
        snprintf(err, sizeof err, "ranks %u..%u outside the world of %u", d.base,
                 d.base + d.g - 1, w->world_size);
    }
    if (!ok) {
        wf_log(w->log, WF_LOG_WARNING, "cluster: malformed forward descriptor (seq %"
               PRIu64 ") dropped: %s", d.seq, err);
        wf_world_member_done(w, d.seq, d.epoch, WF_E_MALFORMED);
        return;
    }
    const wf_mesh_t *mesh = w->hooks.job_mesh(w->hooks.arg);
    if (w->aborted && w->failed_epoch == w->world_epoch && w->built &&
        d.epoch == mesh->epoch) {
        wf_world_member_done(w, d.seq, d.epoch, WF_E_ABORTED);
        return;
    }
    uint32_t cp_ranks = mesh->deg.ring * mesh->deg.ulysses * mesh->deg.tp;
    if (!w->built || w->install || w->aborted || d.epoch != mesh->epoch ||
        d.g != cp_ranks || !w->hooks.forward_plan) {
        wf_log(w->log, WF_LOG_ERR, "cluster: forward job %" PRIu64 " (seq %" PRIu64
               ") for mesh epoch %" PRIu64 " refused: this node serves mesh epoch %"
               PRIu64, d.id, d.seq, d.epoch, mesh->epoch);
        wf_world_member_done(w, d.seq, d.epoch, WF_E_UNAVAILABLE);
        return;
    }
    wf_djob_t *job = wf_djob_new();
    if (!job) {
        wf_world_member_done(w, d.seq, d.epoch, WF_E_NO_MEMORY);
        return;
    }
    job->remote_part = true;
    job->seq = d.seq;
    job->epoch = d.epoch;
    job->req.id = d.id;
    job->req.op = WF_OP_FORWARD;
    wf_forward_args_t *a = &job->req.args.forward;
    a->has_out_dtype = true;
    a->out_dtype = d.odt;
    a->fp8 = d.fp8;
    uint32_t n = 0;
    while (n < WF_CFJOB_MAX_TENSORS && d.t[n].name[0]) {
        wf_tensor_desc_t *td = &job->req.tensors[n];
        snprintf(td->name, sizeof td->name, "%s", d.t[n].name);
        td->dtype = d.t[n].dt;
        td->rank = 0;
        while (td->rank < WF_CFJOB_MAX_RANK && d.t[n].shape[td->rank] > 0) {
            td->shape[td->rank] = d.t[n].shape[td->rank];
            td->rank++;
        }
        td->frame = n;
        if (wf_tensor_desc_finish(td) != WF_OK) {
            wf_log(w->log, WF_LOG_WARNING, "cluster: forward job %" PRIu64 " (seq %"
                   PRIu64 "): input %u overflows", d.id, d.seq, n);
            wf_djob_free(&job);
            wf_world_member_done(w, d.seq, d.epoch, WF_E_MALFORMED);
            return;
        }
        n++;
    }
    job->req.n_tensors = n;
    job->rotate_method = d.alltoall ? WF_ROTATE_ALLTOALL : WF_ROTATE_ALLGATHER;
    wf_status_t st = w->hooks.forward_plan(w->hooks.arg, job, d.lid, mesh, err,
                                           sizeof err);
    if (st == WF_OK && (uint32_t)job->group_size != d.g) {
        st = WF_E_INTERNAL;
        snprintf(err, sizeof err, "%d ranks here, %u in the descriptor",
                 job->group_size, d.g);
    }
    if (st != WF_OK) {
        /* the coordinator checked the same inputs on the same files: our
         * ranks never run, and it aborts the world (its ranks wait) */
        wf_log(w->log, WF_LOG_ERR, "cluster: forward job %" PRIu64 " (seq %" PRIu64
               ") refused: %s", d.id, d.seq, err);
        early_drop_seq(w, d.seq, w->world_epoch); /* its inputs, if they came */
        wf_djob_free(&job);
        wf_world_member_done(w, d.seq, d.epoch, WF_E_UNAVAILABLE);
        return;
    }
    job->done = w->done;
    job->world_epoch = w->world_epoch;
    int local = 0, roots = 0;
    uint32_t T = mesh->deg.tp;
    member_claim_ranks(w, job, d.base, d.g, 0, T, &local, &roots);
    wf_log(w->log, WF_LOG_DEBUG, "cluster: forward job %" PRIu64 " (seq %" PRIu64
           "): ranks %u..%u, %d here, %d root(s) here", d.id, d.seq, d.base,
           d.base + d.g - 1, local, roots);
    if (roots > 0 && ((uint32_t)roots != T || !wf_channel_socket(w->channel) ||
                      member_root_setup(w, job) != WF_OK)) {
        /* as member_job: our roots fail their step, which aborts the world */
        wf_log(w->log, WF_LOG_ERR, "cluster: forward job %" PRIu64 " (seq %" PRIu64
               ") has roots this member cannot take; it fails", d.id, d.seq);
        if ((uint32_t)local == d.g) {
            wf_djob_free(&job);
            wf_world_member_done(w, d.seq, d.epoch, WF_E_INTERNAL);
            return;
        }
        job->root_here = true;
        job->inputs_bad = true;
        job->inputs_in = true;
    }
    member_queue_part(w, job, local);
}

/* Member: queue a part on its ranks' workers. */
void wf_world_submit(wf_world_t *w, wf_djob_t *job)
{
    job->t_dispatch_us = wf_now_usec();
    for (int r = 0; r < job->group_size; r++)
        if (job->task[r].job)   /* our ranks (device = local index) */
            wf_worker_submit(&w->workers[job->device[r]], &job->task[r]);
}

/* Member: hand the queue to the workers in order, up to the first part
 * whose inputs have not come (the parts behind it wait: every worker's
 * FIFO keeps the coordinator's order). */
static void member_pump(wf_world_t *w)
{
    while (w->mq_head) {
        wf_djob_t *j = w->mq_head;
        if (j->kind != WF_DJOB_REGROUP && j->root_here && !j->inputs_in)
            return;
        w->mq_head = j->next;
        if (!w->mq_head)
            w->mq_tail = NULL;
        j->next = NULL;
        wf_world_submit(w, j);
    }
}

void wf_world_enqueue(wf_world_t *w, wf_djob_t *job)
{
    job->next = NULL;
    if (w->mq_tail)
        w->mq_tail->next = job;
    else
        w->mq_head = job;
    w->mq_tail = job;
    member_pump(w);
}

static void early_drop(wf_world_t *w, uint32_t i)
{
    for (uint32_t f = 0; f < w->early[i].n; f++)
        zmq_msg_close(&w->early[i].f[f]);
    memmove(&w->early[i], &w->early[i + 1],
            (w->n_early - i - 1) * sizeof w->early[0]);
    w->n_early--;
}

/* The early inputs of job seq of world epoch `epoch`, if they came (a
 * refused job never takes them). */
static void early_drop_seq(wf_world_t *w, uint64_t seq, uint64_t epoch)
{
    for (uint32_t i = 0; i < w->n_early; i++)
        if (w->early[i].seq == seq && w->early[i].epoch == epoch) {
            early_drop(w, i);
            return;
        }
}

/* Member, the world aborted (or lost): the parts not yet on the workers
 * answer "aborted" and are dropped with the inputs that came early;
 * regroups stay queued, in order. */
static void member_flush(wf_world_t *w)
{
    wf_djob_t *keep = NULL, **tail = &keep, *j = w->mq_head;
    w->mq_head = w->mq_tail = NULL;
    while (j) {
        wf_djob_t *next = j->next;
        j->next = NULL;
        if (j->kind == WF_DJOB_REGROUP) {
            *tail = j;
            tail = &j->next;
            w->mq_tail = j;
        } else {
            wf_world_member_done(w, j->seq, j->epoch, WF_E_ABORTED);
            wf_djob_free(&j);
        }
        j = next;
    }
    w->mq_head = keep;
    while (w->n_early)
        early_drop(w, 0);
    member_pump(w);
}


static wf_status_t member_root_setup(wf_world_t *w, wf_djob_t *job)
{
    uint64_t max_in = w->settings->limits.max_tensor_bytes;
    if (job->kind == WF_DJOB_FORWARD) {
        /* the plan (hooks.forward_plan) made the output's descriptor */
        for (uint32_t t = 0; t < job->req.n_tensors; t++)
            if (wf_tensor_desc_finish(&job->req.tensors[t]) != WF_OK ||
                job->req.tensors[t].nbytes > max_in)
                return WF_E_LIMIT;
        size_t size = ((size_t)job->out_desc[0].nbytes + 63) & ~(size_t)63;
        job->out[0] = aligned_alloc(64, size ? size : 64);
        if (!job->out[0])
            return WF_E_NO_MEMORY;
        job->root_here = true;
        return WF_OK;
    }
    for (int t = 0; t < 3; t++)
        if (wf_tensor_desc_finish(&job->req.tensors[t]) != WF_OK ||
            job->req.tensors[t].nbytes > max_in)
            return WF_E_LIMIT;
    const wf_tensor_desc_t *q = &job->req.tensors[0];
    wf_tensor_desc_t *o = &job->out_desc[0];
    snprintf(o->name, sizeof o->name, "out");
    o->rank = 4;
    memcpy(o->shape, q->shape, 4 * sizeof q->shape[0]);
    o->frame = 0;
    if (job->n_outputs > 1) {
        wf_tensor_desc_t *l = &job->out_desc[1];
        snprintf(l->name, sizeof l->name, "lse");
        l->dtype = WF_DTYPE_F32;
        l->rank = 3;
        memcpy(l->shape, q->shape, 3 * sizeof q->shape[0]);
        l->frame = 1;
    }
    for (uint32_t i = 0; i < job->n_outputs; i++) {
        if (wf_tensor_desc_finish(&job->out_desc[i]) != WF_OK ||
            job->out_desc[i].nbytes > 2 * max_in)
            return WF_E_LIMIT;
        size_t size = ((size_t)job->out_desc[i].nbytes + 63) & ~(size_t)63;
        job->out[i] = aligned_alloc(64, size ? size : 64);
        if (!job->out[i])
            return WF_E_NO_MEMORY;
    }
    job->root_here = true;
    return WF_OK;
}

/* Member: give `job` the n received frames when they match its inputs
 * (else the root's step fails: the world is aborted and rebuilt). The
 * frames are moved out of f[]. */
static void member_give_inputs(wf_world_t *w, wf_djob_t *job, zmq_msg_t *f,
                               uint32_t n)
{
    /* frame t is tensor t: q, k, v; a forward's inputs in wf_cfjob_t's order */
    const uint32_t want = job->req.n_tensors;
    bool ok = n == want;
    for (uint32_t t = 0; ok && t < want; t++)
        ok = zmq_msg_size(&f[t]) == job->req.tensors[t].nbytes;
    uint32_t keep = n < want ? n : want;
    for (uint32_t t = 0; t < keep; t++) {
        zmq_msg_init(&job->frames[t]);
        zmq_msg_move(&job->frames[t], &f[t]);
    }
    job->n_frames = keep;
    if (!ok) {
        wf_log(w->log, WF_LOG_ERR, "cluster: inputs of job %" PRIu64 " (seq %"
               PRIu64 ") do not match its descriptor; the job fails",
               job->req.id, job->seq);
        job->inputs_bad = true;
    }
    job->inputs_in = true;
}

/* Member, a new part holding roots: its inputs may have come first. */
static void member_take_early(wf_world_t *w, wf_djob_t *job)
{
    for (uint32_t i = 0; i < w->n_early; i++) {
        wf_world_early_t *e = &w->early[i];
        if (e->seq != job->seq || e->epoch != job->world_epoch)
            continue;
        member_give_inputs(w, job, e->f, e->n);
        e->n = 0;
        early_drop(w, i);
        return;
    }
}

/* Member: "in" {epoch, seq, n} and its frames. */
static void member_in(wf_world_t *w, const wf_cmsg_xfer_t *h, zmq_msg_t *f,
                      uint32_t n)
{
    const uint64_t epoch = h->epoch, seq = h->seq;
    if (h->n != n || n == 0 || n > WF_CMSG_XFER_MAX_FRAMES)
        return;
    for (wf_djob_t *j = w->mq_head; j; j = j->next) {
        if (j->kind == WF_DJOB_REGROUP || !j->root_here || j->seq != seq ||
            j->world_epoch != epoch || j->inputs_in)
            continue;
        member_give_inputs(w, j, f, n);
        member_pump(w);
        return;
    }
    /* Its descriptor may still come only for the world in force, not
     * aborted (descriptors precede a new world on the control plane, and
     * an aborted world takes none): else nothing would ever take them. */
    if (epoch != w->world_epoch || w->aborted)
        return;
    if (w->n_early == WF_WORLD_EARLY) {
        wf_log(w->log, WF_LOG_WARNING, "cluster: too many inputs ahead of "
               "their jobs; dropping the oldest (seq %" PRIu64 ")",
               w->early[0].seq);
        if (w->early_lost_epoch != w->early[0].epoch ||
            w->early_lost_seq < w->early[0].seq) {
            w->early_lost_seq = w->early[0].seq;
            w->early_lost_epoch = w->early[0].epoch;
        }
        early_drop(w, 0);
    }
    wf_world_early_t *e = &w->early[w->n_early++];
    e->seq = seq;
    e->epoch = epoch;
    e->n = n;
    for (uint32_t t = 0; t < n; t++) {
        zmq_msg_init(&e->f[t]);
        zmq_msg_move(&e->f[t], &f[t]);
    }
}

/* Coordinator: "hi" {epoch} from member `name`. */
static void coord_hi(wf_world_t *w, const char *name, const wf_cmsg_xfer_t *h)
{
    int i = wf_world_node_index(w->nodes, w->n_nodes, name);
    if (i < 0 || i >= 32 || w->nodes[i].self || h->epoch != w->world_epoch)
        return;
    w->xfer_ready |= 1u << i;
    if (w->built && !w->install) {
        w->sched->roots_ok |= 1u << i;
        w->hooks.dispatch(w->hooks.arg);
    }
}

/* Coordinator: "out" {epoch, seq, st, n} and the outputs from `name`. */
static void coord_out(wf_world_t *w, const char *name, const wf_cmsg_xfer_t *h,
                      zmq_msg_t *f, uint32_t n)
{
    const uint64_t epoch = h->epoch, seq = h->seq;
    int i = wf_world_node_index(w->nodes, w->n_nodes, name);
    if (i < 0 || i >= 32 || h->n != n)
        return;
    for (wf_djob_t *j = w->remote_jobs; j; j = j->rnext) {
        if (j->seq != seq)
            continue;
        uint32_t bit = 1u << i;
        if (!(j->remote_pending & bit) || !(j->xroot & bit) || j->world_epoch != epoch)
            return;     /* settled already (a late message of an old world) */
        j->remote_pending &= ~bit;
        wf_status_t s = h->st;
        bool sizes = s != WF_OK || n == j->n_outputs;
        for (uint32_t k = 0; sizes && s == WF_OK && k < n; k++)
            sizes = zmq_msg_size(&f[k]) == j->out_desc[k].nbytes;
        if (!sizes) {
            s = WF_E_INTERNAL;
            snprintf(j->err, sizeof j->err, "node %s sent outputs that do not "
                     "match the job", name);
        } else if (s == WF_OK) {
            for (uint32_t k = 0; k < n; k++) {
                zmq_msg_init(&j->out_msg[k]);
                zmq_msg_move(&j->out_msg[k], &f[k]);
            }
            j->n_out_msgs = n;
        } else if (!j->err[0] && s != WF_E_ABORTED) {
            snprintf(j->err, sizeof j->err, "the job's part on node %s failed: %s",
                     name, wf_status_str(s));
        }
        wf_djob_rank_done(j, s);
        return;
    }
}

/* Coordinator: a member's part of a job ended. */
static void coord_done(wf_world_t *w, const char *from, const wf_cmsg_result_t *m)
{
    const uint64_t seq = m->seq;
    int i = wf_world_node_index(w->nodes, w->n_nodes, from);
    if (i < 0)
        return;
    for (wf_djob_t *j = w->remote_jobs; j; j = j->rnext) {
        if (j->seq != seq)
            continue;
        if (!(j->remote_pending & (1u << i)))
            return;
        j->remote_pending &= ~(1u << i);
        wf_status_t s = m->st;
        if (s == WF_OK && (j->xroot & (1u << i))) {
            /* the roots' node answers on the tensor channel, with outputs */
            s = WF_E_INTERNAL;
            snprintf(j->err, sizeof j->err, "node %s reported the job done "
                     "without its outputs", from);
        }
        if (s == WF_E_UNAVAILABLE || s == WF_E_MALFORMED) {
            /* its ranks never ran: ours wait for them in a collective.
             * Abort the world; a new round without the node rebuilds it
             * (the node rejoins at once). */
            char why[WF_PROTO_ERROR_MAX];
            snprintf(why, sizeof why, "node %s refused job %" PRIu64, from,
                     j->req.id);
            wf_world_abort(w, why, NULL);
            wf_cluster_node_lost(w->cluster, from, "it refused a job",
                                 wf_now_usec());
        }
        if (s != WF_OK && s != WF_E_ABORTED && !j->err[0])
            snprintf(j->err, sizeof j->err, "the job's part on node %s failed: %s",
                     from, wf_status_str(s));
        wf_djob_rank_done(j, s);
        return;
    }
}

void wf_world_on_message(void *arg, const char *from, const wf_ctl_msg_t *m)
{
    wf_world_t *w = arg;
    wf_cmsg_type_t t = wf_cmsg_type(m);
    if (!from && t == WF_CMSG_JOB) {
        member_job(w, m);       /* answers even a malformed one */
    } else if (!from && t == WF_CMSG_FJOB) {
        member_fjob(w, m);      /* the same */
    } else if (t >= WF_CMSG_MLOAD && t <= WF_CMSG_MREADY) {
        if (w->hooks.model_msg)     /* resident models: the server's */
            w->hooks.model_msg(w->hooks.arg, from, m);
    } else if (from && t == WF_CMSG_DONE) {
        char err[WF_PROTO_ERROR_MAX];
        if (wf_cmsg_get(m, &w->rx, err, sizeof err) == WF_OK)
            coord_done(w, from, &w->rx.u.result);
        else
            wf_log(w->log, WF_LOG_WARNING, "cluster: bad done from %s dropped: %s",
                   from, err);
    }
}

/* The tensor channel's messages: "hi" and "out" from a member (coordinator),
 * "in" from the coordinator (member). */
void wf_world_on_channel(void *arg, const char *from, const wf_cmsg_t *h,
                         zmq_msg_t *frames, uint32_t n)
{
    wf_world_t *w = arg;
    if (from && h->type == WF_CMSG_XFER_HI)
        coord_hi(w, from, &h->u.xfer);
    else if (from && h->type == WF_CMSG_XFER_OUT)
        coord_out(w, from, &h->u.xfer, frames, n);
    else if (!from && h->type == WF_CMSG_XFER_IN)
        member_in(w, &h->u.xfer, frames, n);
}

/* Teardown: the parts still queued and the inputs that came early. */
void wf_world_clear_queue(wf_world_t *w)
{
    wf_djob_t *j = w->mq_head;
    while (j) {
        wf_djob_t *next = j->next;
        wf_djob_free(&j);
        j = next;
    }
    w->mq_head = w->mq_tail = NULL;
    while (w->n_early)
        early_drop(w, 0);
}
