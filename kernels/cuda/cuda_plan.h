/* cuda_plan.h — the host-side arithmetic of the CUDA backend: launch
 * geometry, the device arena, memory admission. Pure C, no CUDA headers,
 * no allocation, no I/O, so it is unit-tested on machines without a GPU
 * (tests/test_cuda_host.c) and the kernels take every number from here.
 *
 * Attention kernel (attention.cu), FA2 style: one thread block computes
 * WF_CUDA_BR query rows of one (batch, query head); WF_CUDA_WARPS warps,
 * 16 * WF_CUDA_MTILES rows each (every K/V fragment read from shared
 * memory feeds MTILES mma), own their rows end to end (S = Q K^T and O += P V with
 * mma.sync m16n8k16, fp32 accumulators in registers, online softmax in
 * base 2). K/V tiles of WF_CUDA_BC keys go through shared memory,
 * double-buffered with cp.async when their dtype is the compute dtype.
 *   grid  (ceil(Sq / BR), h_end - h_begin, B)   block (32 * WARPS)
 *   shared bytes = 2 * (BR * dpad + stages * 2 * BC * dpad) (16-bit
 *   elements), dpad = D + 8 (row padding: ldmatrix rows hit distinct banks)
 *
 * On Hopper (compute capability 9.0, built for sm_90a) a second kernel,
 * attention_wgmma.cu, takes the jobs whose q, k and v all have the
 * compute dtype (bf16 or f16): two warpgroups of 64 query rows each
 * (BR = 128 again) run S = Q K^T and O += P V with wgmma (Q, K, V in
 * 128-byte-swizzled shared tiles, P from registers), WF_CUDA_WG_STAGES
 * K and V tiles of WF_CUDA_WG_BC keys loaded by TMA (mbarriers); a
 * pipelined form (S of tile j + 1 beside P V of tile j) on request.
 *   grid  as above                block (WF_CUDA_WG_THREADS)
 *   shared bytes = 1024 (alignment) + 2 * D * (BR + STAGES * 2 * WG_BC)
 *                  + 128 (mbarriers)
 */
#ifndef WF_CUDA_PLAN_H
#define WF_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus /* included by the .cu files */
extern "C" {
#endif

enum {
    WF_CUDA_BR = 128,   /* query rows per block */
    WF_CUDA_BC = 64,    /* keys per K/V tile */
    WF_CUDA_WARPS = 4,  /* warps per block (32 query rows each) */
    WF_CUDA_MTILES = 2, /* m16 tiles per warp: BR = 16 * MTILES * WARPS */
    WF_CUDA_PAD = 8,    /* elements of padding per shared-memory row */
    WF_CUDA_ALIGN = 256, /* arena and staging alignment, bytes */
    WF_CUDA_WG_BC = 128,      /* keys per K/V tile of the wgmma kernel */
    WF_CUDA_WG_THREADS = 256, /* two warpgroups of 64 query rows */
    WF_CUDA_WG_STAGES = 3     /* K/V tiles of the wgmma kernel in shared memory */
};

/* Which attention kernel a geometry launches: mma.sync, wgmma (one
 * product at a time per warpgroup), wgmma pipelined. */
enum {
    WF_CUDA_KERNEL_MMA = 0,
    WF_CUDA_KERNEL_WGMMA = 1,
    WF_CUDA_KERNEL_WGMMA_PIPE = 2
};

/* What the geometry depends on, from cudaDeviceProp (or a test). */
typedef struct wf_cuda_limits {
    size_t smem_optin;  /* sharedMemPerBlockOptin, bytes */
    int max_grid_x;     /* maxGridSize[0] */
    int max_grid_y;     /* maxGridSize[1] */
    int max_grid_z;     /* maxGridSize[2] */
    int sm_count;       /* multiProcessorCount */
    int wgmma;          /* the wgmma kernel (compute capability 9.0, built
                           for sm_90a): WF_CUDA_KERNEL_WGMMA (default),
                           WF_CUDA_KERNEL_WGMMA_PIPE (WEFT_CUDA_ATTN=
                           wgmma-pipe), or 0: mma.sync only
                           (WEFT_CUDA_ATTN=mma, or no such device) */
} wf_cuda_limits_t;

/* Launch of the attention kernel. */
typedef struct wf_cuda_attn_geom {
    unsigned grid[3];  /* x: query tiles, y: heads, z: batch */
    unsigned block[3]; /* 32 * WF_CUDA_WARPS, 1, 1 */
    size_t smem_bytes; /* dynamic shared memory */
    int d;             /* head dim (64 or 128) */
    int dpad;          /* shared row stride, elements */
    int stages;        /* K/V buffers in flight (2, or 1 when 2 do not fit) */
    int compute_bf16;  /* 1: bf16 tensor-core inputs, 0: f16 */
    int kernel;        /* WF_CUDA_KERNEL_* */
} wf_cuda_attn_geom_t;

/* Shape, dtype and head-mapping checks of backend.h, plus the CUDA
 * backend's own: D in {64, 128}, every dim within int range. Pointers
 * are not looked at. 1 when valid. */
int wf_cuda_attn_params_ok(const wf_attn_params_t *p);

/* Geometry for p on a device with limits *lim. WF_E_BAD_ARGUMENT when p is
 * invalid (wf_cuda_attn_params_ok) or the grid / shared memory exceed the
 * limits. An empty head range gives grid[1] == 0 (nothing to launch).
 * The compute dtype is bf16 when q is bf16, else f16 (f16 and f32 inputs:
 * f32 is rounded to f16 for the tensor cores, fp32 accumulation). The
 * kernel is lim->wgmma's when that is set, q, k and v all have the
 * compute dtype and its shared tiles fit; mma.sync otherwise. */
wf_status_t wf_cuda_attn_geometry(const wf_attn_params_t *p,
                                  const wf_cuda_limits_t *lim,
                                  wf_cuda_attn_geom_t *ret_geom);

/* Shared bytes for head dim d (padded) with `stages` K/V buffers. */
size_t wf_cuda_attn_smem_bytes(int d, int stages);

/* Shared bytes of the wgmma kernel for head dim d. */
size_t wf_cuda_attn_wgmma_smem_bytes(int d);

/* Workspace of the CUDA attention: 0 bytes (everything stays on chip);
 * exact, pure. The workspace argument may be NULL. */
size_t wf_cuda_attn_workspace(const wf_attn_params_t *p);

/* Launch of the LSE merge (one warp per row) and of conversions
 * (grid-stride). rows >= 1; n >= 1. */
void wf_cuda_merge_geometry(int64_t rows, unsigned ret_grid[3],
                            unsigned ret_block[3]);
void wf_cuda_convert_geometry(size_t n, const wf_cuda_limits_t *lim,
                              unsigned ret_grid[3], unsigned ret_block[3]);

/* A check of the wgmma building blocks on device `device` (a one-warpgroup
 * probe: S = A B^T with both operands K-major, O = P V with P from
 * registers and V N-major, each against an exact host product, plus V
 * with its descriptor offsets swapped for diagnosis). WF_OK when the
 * kernel's own layout is right; WF_E_UNAVAILABLE without sm_90a or a 9.0
 * device; WF_E_INTERNAL otherwise. One line of findings in report.
 * Defined in attention_wgmma.cu (allocates; tests only). */
wf_status_t wf_cuda_wgmma_selftest(int device, char *report, size_t n);

/* ---- the device arena ------------------------------------------------------ */

/* A bump allocator over one device allocation made at ctx_new: offsets
 * only (the backend adds its base pointer). Per-job scratch is taken in
 * order and released all at once (reset) when the job ends. */
typedef struct wf_cuda_arena {
    uint64_t capacity;   /* bytes usable (a multiple of align) */
    uint64_t used;       /* bytes taken since the last reset */
    uint64_t high_water; /* largest `used` seen */
    uint64_t align;      /* power of two >= 16 */
    uint32_t count;      /* buffers taken since the last reset */
} wf_cuda_arena_t;

/* Set up an arena of `capacity` bytes (rounded down to align). align must
 * be a power of two >= 16, else WF_E_BAD_ARGUMENT (arena untouched). */
wf_status_t wf_cuda_arena_init(wf_cuda_arena_t *a, uint64_t capacity,
                               uint64_t align);

/* Take `bytes` (rounded up to align; 0 takes nothing and returns the
 * current offset). WF_E_NO_MEMORY when it does not fit: nothing changes. */
wf_status_t wf_cuda_arena_take(wf_cuda_arena_t *a, uint64_t bytes,
                               uint64_t *ret_offset);

/* Release everything taken (high_water is kept). */
void wf_cuda_arena_reset(wf_cuda_arena_t *a);

/* Bytes still free. */
uint64_t wf_cuda_arena_free(const wf_cuda_arena_t *a);

/* ---- admission --------------------------------------------------------------- */

/* Device bytes one attention job needs in the arena: q, k, v, out (full
 * shapes, their dtypes), lse (B, Sq, Hq) f32 and the workspace, each
 * rounded up to WF_CUDA_ALIGN (what the daemon's dev_alloc calls take).
 * UINT64_MAX on overflow or invalid shapes. Pure. */
uint64_t wf_cuda_attn_job_bytes(const wf_attn_params_t *p);

/* Admission, before anything is allocated: WF_OK when the job's bytes fit
 * `free_bytes`, WF_E_NO_MEMORY when not, WF_E_BAD_ARGUMENT for invalid params.
 * *ret_need (may be NULL) gets the bytes needed. Pure. */
wf_status_t wf_cuda_admit(const wf_attn_params_t *p, uint64_t free_bytes,
                          uint64_t *ret_need);

#ifdef __cplusplus
}
#endif

#endif /* WF_CUDA_PLAN_H */
