/* comm_nccl_stub.c — the NCCL backend where NCCL is not built
 * (daemon/CMakeLists.txt compiles this file instead of comm_nccl.c):
 * every call fails with WF_E_UNAVAILABLE, so that the server and the
 * workers choose their comm at run time, with no #ifdef.
 */
#include "comm_nccl.h"
#include "comm_nccl_boot.h"

bool wf_comm_nccl_built(void)
{
    return false;
}

wf_status_t wf_comm_nccl_unique_id(wf_nccl_id_t *ret_id)
{
    (void)ret_id;
    return WF_E_UNAVAILABLE;
}

wf_status_t wf_comm_nccl_init(const wf_nccl_id_t *id, int nranks, int rank,
                              const wf_comm_nccl_opts_t *opts,
                              wf_comm_t **ret_comm)
{
    (void)id, (void)nranks, (void)rank, (void)opts, (void)ret_comm;
    return WF_E_UNAVAILABLE;
}

int wf_comm_nccl_version(void)
{
    return 0;
}

bool wf_comm_nccl_has_shrink(void)
{
    return false;
}

wf_status_t wf_comm_nccl_shrink(wf_comm_t *c, const int *exclude, int n,
                                wf_comm_t **ret_comm)
{
    (void)c, (void)exclude, (void)n, (void)ret_comm;
    return WF_E_UNAVAILABLE;
}

static int api_version(void *arg)
{
    (void)arg;
    return 0;
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

static const wf_nccl_api_t stub_api = {
    .name = "nccl",
    .arg = NULL,
    .version = api_version,
    .unique_id = api_unique_id,
    .init = api_init,
    .shrink = NULL,
};

const wf_nccl_api_t *wf_nccl_api(void)
{
    return &stub_api;
}
