/* forward.c — forward jobs: plan and per-rank step (see forward.h). On a
 * backend with device memory the rank's workspace comes from the
 * context's arena (dev_alloc) and goes back after the run (dev_reset);
 * the shards are resident there already (models.h), the frames and the
 * output stay host memory. */
#include "forward.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "models/flux_forward.h"
#include "runtime/worker.h"

/* The agreed layer boundaries: step 0 is the start of the run
 * (wf_forward_step), layer i is i + 1. */
static wf_status_t layer_boundary(void *arg, int64_t step, bool ahead)
{
    return ahead ? wf_djob_boundary_ahead(arg, step + 1) : wf_djob_boundary(arg, step + 1);
}

/* Estimated flops of a forward: 2 per parameter per token (every linear;
 * the embedders and norms are a rounding error) plus the attention of
 * each block over the joint sequence, 4*B*H*S*S*D. FLUX.1-dev (12e9
 * parameters, 57 blocks, 24 x 128) at 1024x1024 (4096 + 512 tokens):
 * about 1.1e14 + 1.5e13. Saturates. */
static uint64_t forward_flops(const wf_djob_t *job, const wf_model_t *m)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    const wf_tensor_desc_t *t = job->req.tensors;
    const wf_flux_config_t *cfg = &m->cfg;
    double B = (double)t[a->hidden_states].shape[0];
    double S = (double)t[a->hidden_states].shape[1] +
               (double)t[a->encoder_hidden_states].shape[1];
    double blocks = (double)cfg->num_layers + (double)cfg->num_single_layers;
    double f = 2.0 * (double)m->params * B * S +
               blocks * 4.0 * B * (double)cfg->num_attention_heads * S * S *
                   (double)cfg->attention_head_dim;
    return f >= 1.8e19 ? UINT64_MAX : (uint64_t)f;
}

/* The flux job of a request, with the frames' pointers when `frames`. */
static void job_of(const wf_djob_t *job, bool frames, wf_flux_job_t *fj)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    const wf_tensor_desc_t *t = job->req.tensors;
    memset(fj, 0, sizeof *fj);
    fj->B = t[a->hidden_states].shape[0];
    fj->S_img = t[a->hidden_states].shape[1];
    fj->S_txt = t[a->encoder_hidden_states].shape[1];
    fj->hidden_ch = t[a->hidden_states].shape[2];
    fj->encoder_ch = t[a->encoder_hidden_states].shape[2];
    fj->pooled_ch = t[a->pooled_projections].shape[1];
    fj->img_ids_axes = t[a->img_ids].shape[1];
    fj->txt_ids_axes = t[a->txt_ids].shape[1];
    fj->hidden_dtype = t[a->hidden_states].dtype;
    fj->encoder_dtype = t[a->encoder_hidden_states].dtype;
    fj->pooled_dtype = t[a->pooled_projections].dtype;
    fj->timestep_dtype = t[a->timestep].dtype;
    fj->img_ids_dtype = t[a->img_ids].dtype;
    fj->txt_ids_dtype = t[a->txt_ids].dtype;
    fj->has_guidance = a->guidance >= 0;
    if (fj->has_guidance)
        fj->guidance_dtype = t[a->guidance].dtype;
    fj->out_dtype = job->out_desc[0].dtype;
    fj->fp8 = job->req.args.forward.fp8;
    fj->boundary = layer_boundary;        /* every rank's */
    fj->boundary_arg = (void *)job;
    if (!frames)
        return;
    zmq_msg_t *f = (zmq_msg_t *)job->frames;
#define FRAME(i) zmq_msg_data(&f[t[i].frame])
    fj->hidden_states = FRAME(a->hidden_states);
    fj->encoder_hidden_states = FRAME(a->encoder_hidden_states);
    fj->pooled_projections = FRAME(a->pooled_projections);
    fj->timestep = FRAME(a->timestep);
    fj->img_ids = FRAME(a->img_ids);
    fj->txt_ids = FRAME(a->txt_ids);
    if (fj->has_guidance)
        fj->guidance = FRAME(a->guidance);
#undef FRAME
    fj->output = job->out[0];
}

wf_status_t wf_forward_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                            const wf_mesh_t *mesh, const wf_model_t *m,
                            char *err, size_t err_len)
{
    const wf_forward_args_t *a = &job->req.args.forward;
    const wf_tensor_desc_t *hs = &job->req.tensors[a->hidden_states];
    job->kind = WF_DJOB_FORWARD;
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->model_id = m->id;
    job->model_lid = m->lid;
    job->flops = forward_flops(job, m);
    const wf_flux_config_t *cfg = &m->cfg;
    /* the load refused such a model already: a guard */
    wf_status_t cs = wf_flux_backend_check(cfg, ops, err, err_len);
    if (cs != WF_OK)
        return cs;
    wf_tensor_desc_t *out = &job->out_desc[0];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "output");
    out->dtype = a->has_out_dtype ? a->out_dtype : hs->dtype;
    out->rank = 3;
    out->shape[0] = hs->shape[0];
    out->shape[1] = hs->shape[1];
    out->shape[2] = (int64_t)cfg->patch_size * cfg->patch_size * cfg->out_channels;
    out->frame = 0;
    job->n_outputs = 1;
    if (wf_tensor_desc_finish(out) != WF_OK) {
        snprintf(err, err_len, "output shape overflows");
        return WF_E_BAD_SHAPE;
    }
    int T = (int)mesh->deg.tp, R = (int)mesh->deg.ring, U = (int)mesh->deg.ulysses;
    wf_flux_job_t fj;
    job_of(job, false, &fj);
    wf_status_t st = wf_flux_forward_check(cfg, &fj, T, R, U, err, err_len);
    /* On the wire WF_E_BAD_SHAPE means a descriptor invalid on its own
     * (PROTOCOL.md section 6); inputs that do not fit the model or a
     * sequence the mesh cannot shard are WF_E_BAD_ARGUMENT (section 12.4),
     * with the module's message, as attention's plan does. */
    if (st == WF_E_BAD_SHAPE)
        st = WF_E_BAD_ARGUMENT;
    if (st != WF_OK)
        return st;
    size_t hws = 0;
    size_t ws = wf_flux_forward_workspace(cfg, &fj, T, R, U, ops, &hws);
    if (ws == SIZE_MAX || hws == SIZE_MAX) {
        snprintf(err, err_len, "forward workspace overflows");
        return WF_E_BAD_ARGUMENT;
    }
    job->cp = true;     /* every rank of the replica, rank = replica rank */
    job->group_size = R * U * T;
    memset(job->reserve, 0, sizeof job->reserve);
    /* What the device holds: on the CPU the workspace and, on the root,
     * the output (host memory both); on a device the workspace in the
     * arena (dev_alloc rounds to 256 bytes), the output and the small
     * host workspace being host memory (as attention jobs count them). */
    uint64_t own = ops->dev_alloc ? ((uint64_t)ws + 255) & ~(uint64_t)255 : ws;
    for (int r = 0; r < job->group_size; r++)
        job->reserve[r] = own + (r == 0 && !ops->dev_alloc ? out->nbytes : 0);
    job->run = wf_forward_step;
    return WF_OK;
}

wf_status_t wf_forward_step(wf_djob_t *job, int rank, int group_size,
                            wf_worker_t *w)
{
    (void)group_size;
    wf_status_t st = WF_E_INTERNAL;
    const wf_flux_shard_t *shard = wf_rank_models_find(&w->models, job->model_id);
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
    st = wf_djob_boundary(job, 0);      /* the start: before any collective */
    if (st != WF_OK)
        return st;
    const wf_mesh_t *m = &job->mesh;
    wf_flux_job_t fj;
    job_of(job, rank == 0, &fj);
    wf_flux_group_t grp = {
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
    size_t bytes = wf_flux_forward_workspace(&shard->cfg, &fj, grp.tp_degree,
                                             grp.ring_degree, grp.ulysses_degree, o, &hbytes);
    if (bytes == SIZE_MAX || hbytes == SIZE_MAX)
        goto out;
    if (!o->dev_alloc) {
        void *ws = wf_worker_workspace(w, bytes);
        if (!ws) {
            st = WF_E_NO_MEMORY;
            goto out;
        }
        st = wf_flux_forward_run(shard, &fj, &grp, o, w->ctx, ws, bytes, NULL, 0);
        goto out;
    }
    /* device: the workspace from the arena, the host part from the
     * worker's host workspace; the run leaves nothing queued, but a
     * failure before it may have: synchronize before the arena goes */
    void *hws = wf_worker_workspace(w, hbytes);
    void *dws = NULL;
    st = hws ? o->dev_alloc(w->ctx, bytes ? bytes : 256, &dws) : WF_E_NO_MEMORY;
    if (st == WF_OK)
        st = wf_flux_forward_run(shard, &fj, &grp, o, w->ctx, dws, bytes, hws, hbytes);
    else
        wf_log(w->log, WF_LOG_ERR, "%s: forward job %" PRIu64 ": %zu bytes of device "
               "workspace: %s", w->name, job->seq, bytes, wf_status_str(st));
    wf_status_t ss = o->synchronize(w->ctx);
    o->dev_reset(w->ctx);
    if (st == WF_OK)
        st = ss;
out:
    /* not after a layer boundary stopped every rank alike */
    if (st != WF_OK && st != WF_E_DEADLINE && st != WF_E_CANCELLED && w->world)
        wf_comm_abort(w->world);
    return st;
}
