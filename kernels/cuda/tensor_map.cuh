/* tensor_map.cuh — TMA tensor maps for the Hopper attention kernels
 * (attention_wgmma.cu, attention_ws.cu), host side. cuTensorMapEncodeTiled
 * comes from the driver through the runtime (weft does not link libcuda). */
#ifndef WF_TENSOR_MAP_CUH
#define WF_TENSOR_MAP_CUH

#include <cuda.h> /* CUtensorMap and its enums (types only: no libcuda link) */

/* The map of a (B, S, H, D) tensor of 16-bit elements at base: boxes of 64
 * elements (128 bytes, the swizzle span) x `rows` sequence rows of one
 * head of one batch; coordinates (d, h, s, b); out-of-range rows read 0.
 * False when the driver lacks cuTensorMapEncodeTiled or refuses the map. */
bool wf_cuda_tensor_map(CUtensorMap *m, const void *base, bool bf16, long long B,
                        long long S, long long H, int D, int rows);

/* The map of a packed 4-d tensor of bytes at base (the fp8 kernel's
 * e4m3 copies, attention_fp8.cu): dims[0] innermost (contiguous), boxes
 * of box[0..3] elements, swizzle of `swizzle` bytes (64 or 128; box[0]
 * must not exceed it); out-of-range elements read 0. False when the
 * driver lacks cuTensorMapEncodeTiled or refuses the map. */
bool wf_cuda_tensor_map_u8(CUtensorMap *m, const void *base, const long long dims[4],
                           const unsigned box[4], int swizzle);

#endif /* WF_TENSOR_MAP_CUH */
