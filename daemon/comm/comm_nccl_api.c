/* comm_nccl_api.c — the daemon's NCCL table (comm_nccl_boot.h
 * wf_nccl_api): comm_nccl.c's functions where NCCL is built, the stub's
 * (WF_E_UNAVAILABLE, version 0, no shrink) elsewhere. Alone in its object
 * file on purpose: a test daemon that defines wf_nccl_api itself (the
 * stand-in of tests/support/nccl_standin.h) never pulls this one from the
 * static library. Nothing else may be defined here.
 */
#include "comm_nccl_boot.h"

static int api_version(void *arg)
{
    (void)arg;
    return wf_comm_nccl_version();
}

static wf_status_t api_unique_id(void *arg, wf_nccl_id_t *ret_id)
{
    (void)arg;
    return wf_comm_nccl_unique_id(ret_id);
}

static wf_status_t api_init(void *arg, const wf_nccl_id_t *id, int nranks, int rank,
                            const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    (void)arg;
    return wf_comm_nccl_init(id, nranks, rank, opts, ret_comm);
}

static wf_status_t api_shrink(void *arg, wf_comm_t *c, const int *exclude, int n,
                              const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    (void)arg;
    return wf_comm_nccl_shrink(c, exclude, n, opts, ret_comm);
}

static const wf_nccl_api_t real_api = {
    .name = "nccl",
    .arg = NULL,
    .version = api_version,
    .unique_id = api_unique_id,
    .init = api_init,
    .shrink = api_shrink,   /* WF_E_UNAVAILABLE where NCCL has no shrink */
    .node_gpu = NULL,
};

const wf_nccl_api_t *wf_nccl_api(void)
{
    return &real_api;
}
