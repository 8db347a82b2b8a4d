/* wan_family_run.c — the Wan family's daemon half (family_run.h): its
 * shards (wan_shard.c) and its forward (wan_forward.c) behind the generic
 * table. */
#include "wan_run.h"

static wf_status_t backend_check(const void *cfg, const wf_backend_ops_t *ops, char *err,
                                 size_t err_len)
{
    return wan_backend_check(cfg, ops, err, err_len);
}

static wf_status_t plan_check(const void *cfg, const wf_tp_plan_t *plan, int tp,
                              bool allow_unmatched, char *err, size_t err_len)
{
    return wan_plan_check(cfg, plan, tp, allow_unmatched, err, err_len);
}

static uint64_t shard_bytes(const void *cfg, const wf_tp_plan_t *plan, int tp, bool device,
                            wf_dtype_t weight_dtype)
{
    return wan_shard_bytes(cfg, plan, tp, device, weight_dtype);
}

static wf_status_t shard_build(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                               int tp_rank, const wf_backend_ops_t *ops,
                               wf_backend_ctx_t *ctx, void **ret, char *err, size_t err_len)
{
    wf_wan_shard_t *s = NULL;
    wf_status_t st = wan_shard_build(host, plan, tp, tp_rank, ops, ctx, &s, err, err_len);
    *ret = s;
    return st;
}

static void shard_free(void **shard)
{
    wf_wan_shard_t *s = *shard;
    wan_shard_free(&s);
    *shard = NULL;
}

static const wf_shard_mem_t *shard_mem(const void *shard)
{
    return &((const wf_wan_shard_t *)shard)->mem;
}

static wf_status_t forward_check(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U,
                                 char *err, size_t err_len)
{
    return wan_forward_check(cfg, io, tp, R, U, err, err_len);
}

static size_t workspace(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U,
                        const wf_backend_ops_t *ops, size_t *ret_host)
{
    return wan_forward_workspace(cfg, io, tp, R, U, ops, ret_host);
}

static wf_status_t run(const void *shard, const wf_fwd_io_t *io, const wf_fwd_group_t *group,
                       const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx, void *ws,
                       size_t bytes, void *host_ws, size_t host_bytes)
{
    return wan_forward_run(shard, io, group, ops, ctx, ws, bytes, host_ws, host_bytes);
}

static size_t cache_floats(const void *cfg, const wf_fwd_io_t *io, int tp, int R, int U)
{
    return wan_cache_floats(cfg, io, tp, R, U);
}

const wf_family_run_t wf_wan_family_run = {
    .fam = &wf_wan_family,
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
