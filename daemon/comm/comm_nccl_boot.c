/* comm_nccl_boot.c — the pure decisions of comm_nccl_boot.h (plane, node
 * capability, loss plan). The table wf_nccl_api() is comm_nccl.c's (or
 * comm_nccl_stub.c's). No NCCL, no logging. */
#include "comm_nccl_boot.h"

#include <string.h>

const char *wf_nccl_plane_name(wf_nccl_plane_t p)
{
    return p == WF_PLANE_NCCL ? "nccl" : "zmq";
}

bool wf_nccl_node_gpu(const wf_settings_t *s, int version)
{
    return version > 0 && s->nccl && s->device_kind == WF_DEVICE_CUDA &&
           s->device_count > 0 && !wf_settings_gpu_shared(s);
}

wf_nccl_plane_t wf_nccl_plane(const bool *gpu, uint32_t n)
{
    if (n == 0)
        return WF_PLANE_ZMQ;
    for (uint32_t i = 0; i < n; i++)
        if (!gpu[i])
            return WF_PLANE_ZMQ;
    return WF_PLANE_NCCL;
}

wf_nccl_next_t wf_nccl_plan_loss(const wf_nccl_span_t *old, uint32_t n_old,
                                 const wf_nccl_span_t *nw, uint32_t n_new,
                                 bool can_shrink, int *exclude, int max,
                                 int *ret_n)
{
    *ret_n = 0;
    if (!can_shrink || n_new == 0 || n_new >= n_old)
        return WF_NCCL_REBUILD;
    /* nw must be old with some nodes left out: walk both in order */
    uint32_t j = 0, next_rank = 0;
    int n = 0;
    for (uint32_t i = 0; i < n_old; i++) {
        if (j < n_new && strcmp(old[i].name, nw[j].name) == 0) {
            /* a survivor: same ranks, renumbered as shrink renumbers */
            if (old[i].ranks != nw[j].ranks || nw[j].first != next_rank)
                return WF_NCCL_REBUILD;
            next_rank += nw[j].ranks;
            j++;
            continue;
        }
        for (uint32_t r = 0; r < old[i].ranks; r++) {
            if (n == max)
                return (*ret_n = 0, WF_NCCL_REBUILD);
            exclude[n++] = (int)(old[i].first + r);
        }
    }
    if (j != n_new || n == 0) {
        *ret_n = 0;      /* a node of nw was not in old (or out of order) */
        return WF_NCCL_REBUILD;
    }
    *ret_n = n;
    return WF_NCCL_SHRINK;
}

bool wf_nccl_api_node_gpu(const wf_nccl_api_t *api, const wf_settings_t *s)
{
    if (api->node_gpu)
        return api->node_gpu(api->arg, s);
    return wf_nccl_node_gpu(s, api->version(api->arg));
}
