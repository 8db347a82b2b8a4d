/* stub.c — wf_backend_cuda() of a build without CUDA: NULL, so the
 * daemon asks for the backend without an #ifdef and reports "no CUDA". */
#include "backend.h"

#include <stddef.h>

const wf_backend_ops_t *wf_backend_cuda(void)
{
    return NULL;
}

wf_status_t wf_cuda_device_count(int *ret_count, const char **ret_why)
{
    (void)ret_count;
    if (ret_why)
        *ret_why = "CUDA backend not built (this weft has the CPU backend only)";
    return WF_E_UNAVAILABLE;
}

wf_status_t wf_cuda_device_memory(int index, uint64_t *ret_free,
                                  uint64_t *ret_total)
{
    (void)index;
    (void)ret_free;
    (void)ret_total;
    return WF_E_UNAVAILABLE;
}
