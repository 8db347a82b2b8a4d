/* flux_family_run.c — the FLUX family's daemon half (family_run.h): its
 * shards (flux_shard.h) and its forward (flux_forward.h) behind the
 * generic table. The inputs arrive in the schema's order (modelfiles/
 * flux/flux_family.c): hidden_states, encoder_hidden_states,
 * pooled_projections, timestep, img_ids, txt_ids, guidance. */
#include "flux_forward.h"
#include "flux_shard.h"
#include "models/family_run.h"

#include <string.h>

enum { IN_HS, IN_EHS, IN_POOLED, IN_T, IN_IMG, IN_TXT, IN_GUIDANCE };

/* The FLUX job of a bound forward (pointers: root only). */
static void job_of(const wf_fwd_io_t *io, wf_flux_job_t *fj)
{
    const wf_tensor_desc_t *const *t = io->in;
    memset(fj, 0, sizeof *fj);
    fj->B = t[IN_HS]->shape[0];
    fj->S_img = t[IN_HS]->shape[1];
    fj->S_txt = t[IN_EHS]->shape[1];
    fj->hidden_ch = t[IN_HS]->shape[2];
    fj->encoder_ch = t[IN_EHS]->shape[2];
    fj->pooled_ch = t[IN_POOLED]->shape[1];
    fj->img_ids_axes = t[IN_IMG]->shape[1];
    fj->txt_ids_axes = t[IN_TXT]->shape[1];
    fj->hidden_dtype = t[IN_HS]->dtype;
    fj->encoder_dtype = t[IN_EHS]->dtype;
    fj->pooled_dtype = t[IN_POOLED]->dtype;
    fj->timestep_dtype = t[IN_T]->dtype;
    fj->img_ids_dtype = t[IN_IMG]->dtype;
    fj->txt_ids_dtype = t[IN_TXT]->dtype;
    fj->has_guidance = io->n_in > IN_GUIDANCE && t[IN_GUIDANCE];
    if (fj->has_guidance)
        fj->guidance_dtype = t[IN_GUIDANCE]->dtype;
    fj->out_dtype = io->out[0]->dtype;
    fj->fp8 = io->fp8;
    fj->alltoall = io->alltoall;
    fj->boundary = io->boundary;
    fj->boundary_arg = io->boundary_arg;
    fj->hidden_states = io->in_data[IN_HS];
    fj->encoder_hidden_states = io->in_data[IN_EHS];
    fj->pooled_projections = io->in_data[IN_POOLED];
    fj->timestep = io->in_data[IN_T];
    fj->img_ids = io->in_data[IN_IMG];
    fj->txt_ids = io->in_data[IN_TXT];
    if (fj->has_guidance)
        fj->guidance = io->in_data[IN_GUIDANCE];
    fj->output = io->out_data[0];
    fj->fbc = io->fbc;
}

static wf_status_t backend_check(const void *cfg, const wf_backend_ops_t *ops,
                                 char *err, size_t err_len)
{
    return wf_flux_backend_check(cfg, ops, err, err_len);
}

static wf_status_t plan_check(const void *cfg, const wf_tp_plan_t *plan, int tp,
                              bool allow_unmatched, char *err, size_t err_len)
{
    return wf_flux_plan_check(cfg, plan, tp, allow_unmatched, err, err_len);
}

static uint64_t shard_bytes(const void *cfg, const wf_tp_plan_t *plan, int tp,
                            bool device, wf_dtype_t weight_dtype)
{
    return device ? wf_flux_shard_bytes_dev(cfg, plan, tp, weight_dtype)
                  : wf_flux_shard_bytes(cfg, plan, tp);
}

static wf_status_t shard_build(const wf_model_host_t *host, const wf_tp_plan_t *plan,
                               int tp, int tp_rank, const wf_backend_ops_t *ops,
                               wf_backend_ctx_t *ctx, void **ret, char *err,
                               size_t err_len)
{
    wf_flux_shard_t *s = NULL;
    wf_status_t st = wf_flux_shard_build(host, plan, tp, tp_rank, ops, ctx, &s, err,
                                         err_len);
    *ret = s;
    return st;
}

static void shard_free(void **shard)
{
    wf_flux_shard_t *s = *shard;
    wf_flux_shard_free(&s);
    *shard = NULL;
}

static const wf_shard_mem_t *shard_mem(const void *shard)
{
    return &((const wf_flux_shard_t *)shard)->mem;
}

static wf_status_t forward_check(const void *cfg, const wf_fwd_io_t *io, int tp, int R,
                                 int U, char *err, size_t err_len)
{
    wf_flux_job_t fj;
    job_of(io, &fj);
    return wf_flux_forward_check(cfg, &fj, tp, R, U, err, err_len);
}

static size_t workspace(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U,
                        const wf_backend_ops_t *ops, size_t *ret_host)
{
    wf_flux_job_t fj;
    job_of(io, &fj);
    return wf_flux_forward_workspace(cfg, &fj, tp, R, U, ops, ret_host);
}

static size_t cache_floats(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U)
{
    wf_flux_job_t fj;
    job_of(io, &fj);
    return wf_flux_cache_floats(cfg, &fj, tp, R, U);
}

static wf_status_t run(const void *shard, const wf_fwd_io_t *io,
                       const wf_fwd_group_t *group, const wf_backend_ops_t *ops,
                       wf_backend_ctx_t *ctx, void *ws, size_t bytes, void *host_ws,
                       size_t host_bytes)
{
    wf_flux_job_t fj;
    job_of(io, &fj);
    return wf_flux_forward_run(shard, &fj, group, ops, ctx, ws, bytes, host_ws,
                               host_bytes);
}

const wf_family_run_t wf_flux_family_run = {
    .fam = &wf_flux_family,
    .backend_check = backend_check,
    .plan_check = plan_check,
    .shard_bytes = shard_bytes,
    .shard_build = shard_build,
    .shard_free = shard_free,
    .shard_mem = shard_mem,
    .forward_check = forward_check,
    .workspace = workspace,
    .cache_floats = cache_floats,
    .run = run,
};
