/* tensor_map.cu — TMA tensor maps of (B, S, H, D) tensors for the Hopper
 * attention kernels (tensor_map.cuh). Host code. */
#include "tensor_map.cuh"

#include <cuda_runtime.h>

namespace {

/* cuTensorMapEncodeTiled from the driver, through the runtime (weft does
 * not link libcuda). Null when the driver lacks it. */
typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion,
                                    CUtensorMapFloatOOBfill);
encode_tiled_fn encode_tiled()
{
    static const encode_tiled_fn fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            f = nullptr;
        }
        return reinterpret_cast<encode_tiled_fn>(f);
    }();
    return fn;
}

} /* namespace */

/* The map of a (B, S, H, D) tensor of 16-bit elements at base: boxes of 64
 * elements (128 bytes, the swizzle span) x `rows` sequence rows of one
 * head of one batch; coordinates (d, h, s, b); out-of-range rows read 0. */
bool wf_cuda_tensor_map(CUtensorMap *m, const void *base, bool bf16, long long B,
                        long long S, long long H, int D, int rows)
{
    encode_tiled_fn fn = encode_tiled();
    if (!fn)
        return false;
    const cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)D * 2, (cuuint64_t)(H * D * 2),
                                   (cuuint64_t)(S * H * D * 2)};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    return fn(m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
              const_cast<void *>(base), dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The map of a packed 4-d tensor of bytes (fp8 copies): dims[0]
 * contiguous, boxes of box[], 64- or 128-byte swizzle. */
bool wf_cuda_tensor_map_u8(CUtensorMap *m, const void *base, const long long dims[4],
                           const unsigned box[4], int swizzle)
{
    encode_tiled_fn fn = encode_tiled();
    if (!fn || (swizzle != 64 && swizzle != 128))
        return false;
    const cuuint64_t d[4] = {(cuuint64_t)dims[0], (cuuint64_t)dims[1], (cuuint64_t)dims[2],
                             (cuuint64_t)dims[3]};
    const cuuint64_t strides[3] = {d[0], d[0] * d[1], d[0] * d[1] * d[2]};
    const cuuint32_t bx[4] = {box[0], box[1], box[2], box[3]};
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    return fn(m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void *>(base), d, strides, bx,
              estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
              swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
           CUDA_SUCCESS;
}
