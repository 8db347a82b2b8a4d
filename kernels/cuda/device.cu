/* device.cu — what the daemon asks of the CUDA runtime before any worker
 * exists: how many GPUs there are, and how much memory one has (to split
 * a GPU between several workers in the mixed mode). backend.h declares
 * both; stub.c answers them in a build without CUDA. */
#include <cuda_runtime.h>

#include "backend.h"

extern "C" wf_status_t wf_cuda_device_count(int *ret_count, const char **ret_why)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice) {       /* a driver but no GPU: zero devices */
        (void)cudaGetLastError();
        *ret_count = 0;
        return WF_OK;
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (ret_why)
            *ret_why = cudaGetErrorString(e);
        return WF_E_UNAVAILABLE;
    }
    *ret_count = n;
    return WF_OK;
}

extern "C" wf_status_t wf_cuda_device_memory(int index, uint64_t *ret_free,
                                             uint64_t *ret_total)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_UNAVAILABLE;
    }
    if (index < 0 || index >= n)
        return WF_E_BAD_ARGUMENT;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(index) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        return WF_E_UNAVAILABLE;
    }
    *ret_free = free_b;
    *ret_total = total_b;
    return WF_OK;
}
