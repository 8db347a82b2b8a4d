/* comm_nccl_stub.c — the NCCL backend where NCCL is not built
 * (daemon/CMakeLists.txt compiles this file instead of comm_nccl.c):
 * every call fails with WF_E_UNAVAILABLE, so that the server and the
 * workers choose their comm at run time, with no #ifdef.
 */
#include "comm_nccl.h"

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
                                const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm)
{
    (void)c, (void)exclude, (void)n, (void)opts, (void)ret_comm;
    return WF_E_UNAVAILABLE;
}

uint64_t wf_comm_nccl_watchdog_stops(void)
{
    return 0;
}
