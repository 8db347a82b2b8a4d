/* forward.c — forward jobs: plan and per-rank step (see forward.h). On a
 * backend with device memory the rank's workspace comes from the
 * context's arena (dev_alloc) and goes back after the run (dev_reset);
 * the shards are resident there already (models.h), the frames and the
 * output stay host memory. */
#include "forward.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "models/family_run.h"
#include "runtime/worker.h"

/* The agreed layer boundaries: step 0 is the start of the run
 * (wf_forward_step), layer i is i + 1. */
static wf_status_t layer_boundary(void *arg, int64_t step, bool ahead)
{
    return ahead ? wf_djob_boundary_ahead(arg, step + 1) : wf_djob_boundary(arg, step + 1);
}

/* Samples [*b0, *b0 + *n) of B for replica `rep` of a split over k:
 * tensor_split's pieces (the first B % k replicas take one more). */
static void split_range(int64_t B, uint32_t k, uint32_t rep, int64_t *b0, int64_t *n)
{
    int64_t q = B / (int64_t)k, r = B % (int64_t)k, i = (int64_t)rep;
    *n = q + (i < r);
    *b0 = i * q + (i < r ? i : r);
}

/* Descriptors of one replica's slice of a split forward. */
typedef struct io_slice {
    wf_tensor_desc_t in[WF_SCHEMA_MAX_INPUTS];
    wf_tensor_desc_t out[WF_DJOB_MAX_OUTPUTS];
} io_slice_t;

/* d cut to samples [b0, b0 + n) of its dimension 0 (of B); the byte
 * offset of the first. */
static size_t slice_desc(wf_tensor_desc_t *d, int64_t B, int64_t b0, int64_t n)
{
    uint64_t per = d->nbytes / (uint64_t)B;
    d->shape[0] = n;
    d->numel = d->numel / (uint64_t)B * (uint64_t)n;
    d->nbytes = per * (uint64_t)n;
    return (size_t)(per * (uint64_t)b0);
}

/* The bound forward of a job, with the frames' pointers when `frames`
 * (a root's); a split job's replica `rep` sees its samples of every
 * batched input and output (descriptors in *sl). */
static void io_of(const wf_djob_t *job, bool frames, uint32_t rep, io_slice_t *sl,
                  wf_fwd_io_t *io)
{
    const wf_tensor_desc_t *t = job->req.tensors;
    zmq_msg_t *f = (zmq_msg_t *)job->frames;
    bool split = job->split > 1;
    int64_t B = 0, b0 = 0, n = 0;
    if (split) {
        B = wf_schema_sym(&job->bind, "B");
        split_range(B, job->split, rep, &b0, &n);
    }
    memset(io, 0, sizeof *io);
    io->bind = &job->bind;
    io->n_in = job->n_in;
    for (uint32_t k = 0; k < job->n_in; k++) {
        int i = job->bind.in[k];
        if (i < 0)
            continue;
        io->in[k] = &t[i];
        size_t off = 0;
        if (split && (job->batched >> k & 1u)) {
            sl->in[k] = t[i];
            off = slice_desc(&sl->in[k], B, b0, n);
            io->in[k] = &sl->in[k];
        }
        if (frames)
            io->in_data[k] = (const char *)zmq_msg_data(&f[t[i].frame]) + off;
    }
    io->n_out = job->n_outputs;
    for (uint32_t o = 0; o < job->n_outputs; o++) {
        io->out[o] = &job->out_desc[o];
        size_t off = 0;
        if (split) {
            sl->out[o] = job->out_desc[o];
            off = slice_desc(&sl->out[o], B, b0, n);
            io->out[o] = &sl->out[o];
        }
        if (frames)
            io->out_data[o] = (char *)job->out[o] + off;
    }
    io->fp8 = job->req.args.forward.fp8;
    io->alltoall = job->rotate_method == WF_ROTATE_ALLTOALL;
    io->boundary = layer_boundary;      /* every rank's */
    io->boundary_arg = (void *)job;
}

/* The schema inputs whose dimension 0 is the batch B (bits), when B
 * appears nowhere else in the inputs and is dimension 0 of every output:
 * then the samples are independent rows of every tensor that has them.
 * *ok false otherwise (the forward runs unsplit). */
static uint32_t batched_inputs(const wf_model_schema_t *s, bool *ok)
{
    uint32_t bits = 0;
    *ok = true;
    for (uint32_t k = 0; k < s->n_inputs; k++)
        for (uint32_t d = 0; d < s->inputs[k].rank; d++)
            if (s->inputs[k].dim[d].size == 0 && strcmp(s->inputs[k].dim[d].sym, "B") == 0) {
                if (d != 0)
                    *ok = false;
                bits |= 1u << k;
            }
    for (uint32_t o = 0; o < s->n_outputs; o++)
        if (s->outputs[o].rank < 1 || s->outputs[o].dim[0].size != 0 ||
            strcmp(s->outputs[o].dim[0].sym, "B") != 0)
            *ok = false;
    return bits;
}

wf_status_t wf_forward_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                            const wf_mesh_t *mesh, const wf_model_t *m,
                            char *err, size_t err_len)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    job->kind = WF_DJOB_FORWARD;
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->model_id = m->id;
    job->model_lid = m->lid;
    job->frun = m->run;
    job->mcfg = m->cfg;
    job->n_in = m->schema.n_inputs;
    const void *cfg = m->cfg.b;
    /* the tensors against the model's schema: names, dtypes, ranks, sizes */
    wf_status_t st = wf_schema_bind(&m->schema, m->name, job->req.tensors,
                                    job->req.n_tensors, &job->bind, err, err_len);
    if (st != WF_OK)
        return st;
    job->flops = m->cfg.fam->flops(cfg, m->params, &job->bind);
    /* the load refused such a model already: a guard */
    wf_status_t cs = m->run->backend_check(cfg, ops, err, err_len);
    if (cs != WF_OK)
        return cs;
    if (m->schema.n_outputs < 1 || m->schema.n_outputs > WF_DJOB_MAX_OUTPUTS) {
        snprintf(err, err_len, "model '%s' has %u outputs, at most %d", m->name,
                 m->schema.n_outputs, WF_DJOB_MAX_OUTPUTS);
        return WF_E_INTERNAL;
    }
    /* out_dtype: by default the dtype of the first input */
    const wf_tensor_desc_t *first = &job->req.tensors[job->bind.in[0] >= 0 ? job->bind.in[0] : 0];
    wf_dtype_t odt = a->has_out_dtype ? a->out_dtype : first->dtype;
    uint64_t out_bytes = 0;
    for (uint32_t o = 0; o < m->schema.n_outputs; o++) {
        st = wf_schema_output(&m->schema, o, &job->bind, odt, o, &job->out_desc[o], err,
                              err_len);
        if (st != WF_OK)
            return st == WF_E_BAD_SHAPE ? WF_E_BAD_ARGUMENT : st;
        out_bytes += job->out_desc[o].nbytes;
    }
    job->n_outputs = m->schema.n_outputs;
    int T = (int)mesh->deg.tp, R = (int)mesh->deg.ring, U = (int)mesh->deg.ulysses;
    /* split_batch: the samples over min(dp, B) replicas, each its
     * tensor_split piece (replica 0 the largest) */
    bool splittable;
    job->batched = batched_inputs(&m->schema, &splittable);
    int64_t B = wf_schema_sym(&job->bind, "B");
    job->split = 1;
    /* a session's steps keep their state on one replica: never split */
    if (a->split_batch && splittable && mesh->deg.dp > 1 && B > 1 && !job->session_sid)
        job->split = B < (int64_t)mesh->deg.dp ? (uint32_t)B : mesh->deg.dp;
    uint32_t k = job->split;
    job->split = 1;                     /* the whole forward checked first */
    io_slice_t sl;
    wf_fwd_io_t io;
    io_of(job, false, 0, &sl, &io);
    st = m->run->forward_check(cfg, &io, T, R, U, err, err_len);
    /* On the wire WF_E_BAD_SHAPE means a descriptor invalid on its own
     * (PROTOCOL.md section 6); inputs that do not fit the model or a
     * sequence the mesh cannot shard are WF_E_BAD_ARGUMENT (section 12.4),
     * with the family's message, as attention's plan does. */
    if (st == WF_E_BAD_SHAPE)
        st = WF_E_BAD_ARGUMENT;
    if (st != WF_OK)
        return st;
    job->split = k;
    io_of(job, false, 0, &sl, &io);     /* replica 0's piece: the largest */
    size_t hws = 0;
    size_t ws = m->run->workspace(cfg, &io, T, R, U, ops, &hws);
    if (ws == SIZE_MAX || hws == SIZE_MAX) {
        snprintf(err, err_len, "forward workspace overflows");
        return WF_E_BAD_ARGUMENT;
    }
    /* a session's step: its ranks' cache states, counted with the job too
     * (so that the first step, which places them, fits) */
    uint64_t state = 0;
    if (job->session_sid) {
        job->cache_floats = m->run->cache_floats(cfg, &io, T, R, U);
        size_t sb = wf_fbc_bytes(job->cache_floats);
        if (job->cache_floats == 0 || sb == SIZE_MAX) {
            snprintf(err, err_len, "forward: the session's cache state overflows");
            return WF_E_BAD_ARGUMENT;
        }
        state = sb;
    }
    job->cp = true;     /* every rank of the replica (of each replica of a
                           split job), rank = replica rank (+ its offset) */
    job->group_size = (int)k * R * U * T;
    memset(job->reserve, 0, sizeof job->reserve);
    /* What the device holds: on the CPU the workspace and, on the root,
     * the outputs (host memory both); on a device the workspace in the
     * arena (dev_alloc rounds to 256 bytes), the outputs and the small
     * host workspace being host memory (as attention jobs count them). */
    uint64_t own = ops->dev_alloc ? ((uint64_t)ws + 255) & ~(uint64_t)255 : ws;
    for (int r = 0; r < job->group_size; r++)
        job->reserve[r] = own + state + (r == 0 && !ops->dev_alloc ? out_bytes : 0);
    job->run = wf_forward_step;
    return WF_OK;
}

wf_status_t wf_forward_step(wf_djob_t *job, int rank, int group_size,
                            wf_worker_t *w)
{
    wf_status_t st = WF_E_INTERNAL;
    const wf_rank_model_t *rm = wf_rank_models_find(&w->models, job->model_id);
    const void *shard = rm ? rm->shard : NULL;
    if (!w->world || !shard || w->mesh.epoch != job->epoch ||
        memcmp(&w->mesh.deg, &job->mesh.deg, sizeof w->mesh.deg) != 0) {
        /* the scheduler only dispatches between regroups, which install
         * the shards: a bug */
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 " finds no shard "
               "of model %" PRIu64 " for epoch %" PRIu64, w->name, job->seq,
               job->model_id, job->epoch);
        goto out;
    }
    if (rank == 0 && job->root_here && (!job->inputs_in || job->inputs_bad)) {
        /* a cluster member's root whose inputs did not come right
         * (cluster/world_jobs.c): fail, aborting the world */
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": its inputs from "
               "the coordinator are missing or do not match", w->name, job->seq);
        goto out;
    }
    /* a session's cache state, before any dev_alloc (resident memory) */
    wf_fbc_t *fbc = NULL;
    if (job->session_sid) {
        fbc = wf_worker_session(w, job->session_sid, job->cache_floats);
        if (!fbc) {
            wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": no room for session "
                   "%" PRIu64 "'s cache state (%zu floats a buffer)", w->name, job->seq,
                   job->session_sid, job->cache_floats);
            st = WF_E_NO_MEMORY;
            goto out;
        }
        fbc->threshold = job->cache_threshold;
        if (job->cache_reset)
            fbc->held = false;
    }
    st = wf_djob_boundary(job, 0);      /* the start: before any collective */
    if (st != WF_OK)
        return st;
    const wf_mesh_t *m = &job->mesh;
    /* a split job: this rank's replica, and its rank there (0: the root
     * that reads that replica's samples and writes its output rows) */
    uint32_t per = job->split > 1 ? (uint32_t)group_size / job->split : (uint32_t)group_size;
    uint32_t rep = (uint32_t)rank / per;
    io_slice_t sl;
    wf_fwd_io_t io;
    io_of(job, (uint32_t)rank % per == 0, rep, &sl, &io);
    io.fbc = fbc;
    wf_fwd_group_t grp = {
        .tp = m->deg.tp > 1 ? w->group[WF_MESH_DIM_TP] : NULL,
        .seq = m->deg.ring * m->deg.ulysses > 1 ? w->group[WF_MESH_DIM_SEQ] : NULL,
        .ring = m->deg.ring > 1 ? w->group[WF_MESH_DIM_RING] : NULL,
        .ulysses = m->deg.ulysses > 1 ? w->group[WF_MESH_DIM_ULYSSES] : NULL,
        .tp_degree = (int)m->deg.tp,
        .ring_degree = (int)m->deg.ring,
        .ulysses_degree = (int)m->deg.ulysses,
    };
    const wf_backend_ops_t *o = w->ops;
    size_t hbytes = 0;
    const wf_family_run_t *fr = job->frun;
    size_t bytes = fr->workspace(job->mcfg.b, &io, grp.tp_degree, grp.ring_degree,
                                 grp.ulysses_degree, o, &hbytes);
    if (bytes == SIZE_MAX || hbytes == SIZE_MAX)
        goto out;
    if (!o->dev_alloc) {
        void *ws = wf_worker_workspace(w, bytes);
        if (!ws) {
            st = WF_E_NO_MEMORY;
            goto out;
        }
        st = fr->run(shard, &io, &grp, o, w->ctx, ws, bytes, NULL, 0);
        goto out;
    }
    /* device: the workspace from the arena, the host part from the
     * worker's host workspace; the run leaves nothing queued, but a
     * failure before it may have: synchronize before the arena goes */
    void *hws = wf_worker_workspace(w, hbytes);
    void *dws = NULL;
    st = hws ? o->dev_alloc(w->ctx, bytes ? bytes : 256, &dws) : WF_E_NO_MEMORY;
    if (st == WF_OK) {
        st = fr->run(shard, &io, &grp, o, w->ctx, dws, bytes, hws, hbytes);
        /* a device comm's collectives are stream-ordered (comm.h "Device
         * comms"): the output stands only if none of them was aborted
         * after it was queued (the watchdog, a peer); WF_OK at once
         * elsewhere */
        if (st == WF_OK && w->world)
            st = wf_comm_sync(w->world);
    } else {
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": %zu bytes of device "
               "workspace: %s", w->name, job->seq, bytes, wf_status_str(st));
    }
    wf_status_t ss = o->synchronize(w->ctx);
    o->dev_reset(w->ctx);
    if (st == WF_OK)
        st = ss;
out:
    if (st == WF_OK && fbc && rank == 0)
        atomic_store(&job->cache_used, fbc->reused ? WF_CACHE_REUSED : WF_CACHE_COMPUTED);
    /* not after a layer boundary stopped every rank alike */
    if (st != WF_OK && st != WF_E_DEADLINE && st != WF_E_CANCELLED && w->world)
        wf_comm_abort(w->world);
    return st;
}
