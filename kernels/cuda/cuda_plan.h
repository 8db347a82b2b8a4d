/* cuda_plan.h — the host-side arithmetic of the CUDA backend: launch
 * geometry, the device arena, memory admission. Pure C, no CUDA headers,
 * no allocation, no I/O, so it is unit-tested on machines without a GPU
 * (tests/unit/test_cuda_host.c) and the kernels take every number from here.
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
#include "ops_check.h"

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

/* The warp-specialized Hopper kernel (attention_ws.cu; sm_90a,
 * opt-in: cuda_attention = ws..., never the default until a GPU run shows
 * it right and faster). Three warpgroups: warpgroup 0 the producer (one
 * thread issues every TMA load of Q and of the K / V ring; setmaxnreg
 * lowers its registers to WF_CUDA_WS_REGS_PRODUCER), warpgroups 1 and 2
 * the consumers of 64 query rows each (registers raised to
 * WF_CUDA_WS_REGS_CONSUMER). BR = WF_CUDA_BR rows per tile, keys in tiles
 * of WF_CUDA_WG_BC, K and V rings of `stages` (2..WF_CUDA_WS_MAX_STAGES:
 * the most that fit) with full / empty mbarriers.
 *   grid  (tiles, 1, 1): tiles = ceil(Sq / BR) * heads * B, or
 *         min(tiles, sm_count) with WF_CUDA_WS_PERSISTENT (each block
 *         strides over the tiles; causal: heavy tiles first)
 *   block (WF_CUDA_WS_THREADS)
 *   shared bytes = 1024 (alignment) + 2 * D * (BR + stages * 2 * WG_BC)
 *                  + WF_CUDA_WS_BAR_BYTES (mbarriers); the output staging
 *                  of WF_CUDA_WS_TMA_STORE reuses Q's tile. */
enum {
    WF_CUDA_KERNEL_WS = 3,         /* the kernel of attention_ws.cu */
    WF_CUDA_WS_THREADS = 384,      /* producer + two consumer warpgroups */
    WF_CUDA_WS_MIN_STAGES = 2,     /* the pipelined loop holds K of j + 1 and V of j */
    WF_CUDA_WS_MAX_STAGES = 4,
    WF_CUDA_WS_BAR_BYTES = 256,    /* 2 + 4 * MAX_STAGES mbarriers of 8 bytes, rounded */
    WF_CUDA_WS_REGS_ENTRY = 168,   /* the cap at entry: 65536 / 384 rounded down to 8 */
    WF_CUDA_WS_REGS_PRODUCER = 24, /* setmaxnreg.dec of warpgroup 0 */
    WF_CUDA_WS_REGS_CONSUMER = 240 /* setmaxnreg.inc of warpgroups 1, 2 */
};

/* Features of the ws kernel (bits of wf_cuda_limits_t.ws_features), each
 * one step that can be switched on alone, so that its gain is measured
 * alone: */
enum {
    WF_CUDA_WS_PIPE = 1u << 0,       /* in a warpgroup, S of tile j + 1 issued beside
                                        P V of tile j (softmax under the GEMMs) */
    WF_CUDA_WS_PINGPONG = 1u << 1,   /* the consumers take turns issuing their GEMMs
                                        (named barriers): one's softmax under the
                                        other's GEMMs */
    WF_CUDA_WS_TMA_STORE = 1u << 2,  /* 16-bit out written through shared memory and
                                        a TMA store (f32 out: direct stores) */
    WF_CUDA_WS_PERSISTENT = 1u << 3, /* grid of sm_count blocks striding over the tiles */
    WF_CUDA_WS_ALL = 15u,            /* the four steps above ("ws-full") */
    WF_CUDA_WS_MULTICAST = 1u << 4,  /* clusters of 2 CTAs (two query tiles of one
                                        head) sharing each K / V tile by TMA
                                        multicast (+mc; not in "ws-full") */
    WF_CUDA_WS_KNOWN = 31u           /* every bit above */
};

/* +mc, the multicast form of the ws kernel (opt-in until a measurement
 * shows it pays: FlashAttention-3 found clusters help little in the
 * forward). Thread-block clusters of WF_CUDA_WS_CLUSTER CTAs: the two
 * CTAs of a cluster take query tiles 2 i and 2 i + 1 of one (batch, head)
 * (an odd tile count leaves the second CTA of each head's last pair a tile
 * without rows: it loads and releases with its partner, writes nothing);
 * each CTA's producer loads half of every K and V tile (64 key rows) with
 * .multicast::cluster into both CTAs, and a stage is reused once the
 * consumer warps of both CTAs released it. Causal: the ring carries the
 * union of the pair's key ranges (the later tile's); the CTA that does not
 * need a key tile waits for it and releases it without computing.
 *   grid  (2 * pairs, 1, 1), pairs = ceil(ceil(Sq / BR) / 2) * heads * B;
 *         tiles = 2 * pairs (the tile order: pairs, each head's heavy
 *         pairs first when causal); with WF_CUDA_WS_PERSISTENT
 *         2 * min(pairs, max(1, sm_count / 2)) (each cluster strides over
 *         the pairs; sm_count 0: one cluster per pair)
 *   cluster (2, 1, 1); shared bytes per CTA as without +mc.
 * The geometry drops +mc (the ws kernel without clusters) when a head has
 * a single query tile (its pair would be one tile and an empty one:
 * nothing shared, half the CTAs idle) and when 2 * pairs exceeds
 * gridDim.x. */
enum {
    WF_CUDA_WS_CLUSTER = 2 /* CTAs per cluster with +mc */
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
                           WF_CUDA_KERNEL_WGMMA_PIPE (cuda_attention =
                           wgmma-pipe), or 0: mma.sync only
                           (cuda_attention = mma, or no such device);
                           WF_CUDA_KERNEL_WS: the ws kernel (opt-in) */
    unsigned ws_features; /* WF_CUDA_WS_* bits when wgmma is WF_CUDA_KERNEL_WS */
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
    unsigned ws_features; /* WF_CUDA_KERNEL_WS: its WF_CUDA_WS_* bits, else 0 */
    int64_t tiles;     /* WF_CUDA_KERNEL_WS: query tiles in all (ceil(Sq / BR) *
                          heads * B; with +mc 2 * pairs, empty tiles included);
                          grid[0] is that or, persistent, fewer */
    unsigned cluster[3]; /* thread-block cluster dims: (2, 1, 1) with +mc
                            (WF_CUDA_WS_MULTICAST in ws_features), else 1, 1, 1 */
} wf_cuda_attn_geom_t;

/* Shape, dtype and head-mapping checks of backend.h, plus the CUDA
 * backend's own: D in {64, 128}, every dim within int range, merge mode
 * only as wf_cuda_attn_merge_ok. Pointers are not looked at. 1 when
 * valid. */
int wf_cuda_attn_params_ok(const wf_attn_params_t *p);

/* Merge mode (backend.h wf_attn_params_t.merge; attention_merge_ok):
 * 1 when p may run merged in the kernels' epilogue: out_dtype F32, a
 * valid merge_round (and final_dtype with final_out); fp8 too. Pure; the
 * pointers' values are not looked at (attention() checks lse). */
int wf_cuda_attn_merge_ok(const wf_attn_params_t *p);

/* Head dims the attention kernels take: 64 and 128. */
bool wf_cuda_attn_head_dim_ok(int64_t D);

/* Geometry for p on a device with limits *lim. WF_E_BAD_ARGUMENT when p is
 * invalid (wf_cuda_attn_params_ok) or the grid / shared memory exceed the
 * limits. An empty head range gives grid[1] == 0 (nothing to launch).
 * The compute dtype is bf16 when q is bf16, else f16 (f16 and f32 inputs:
 * f32 is rounded to f16 for the tensor cores, fp32 accumulation). The
 * kernel is lim->wgmma's when that is set, q, k and v all have the
 * compute dtype and its shared tiles fit; mma.sync otherwise.
 * WF_CUDA_KERNEL_WS: the ws kernel (grid, block, stages, smem_bytes,
 * ws_features, tiles as above) when its ring fits (wf_cuda_attn_ws_stages)
 * and every tile fits gridDim.x; else as for WF_CUDA_KERNEL_WGMMA. +mc:
 * cluster, grid and tiles of the multicast form, or the bit dropped from
 * ws_features by the rules above.
 * p->fp8: WF_E_UNSUPPORTED (those jobs take wf_cuda_attn_fp8_geometry). */
wf_status_t wf_cuda_attn_geometry(const wf_attn_params_t *p,
                                  const wf_cuda_limits_t *lim,
                                  wf_cuda_attn_geom_t *ret_geom);

/* Shared bytes for head dim d (padded) with `stages` K/V buffers. */
size_t wf_cuda_attn_smem_bytes(int d, int stages);

/* Shared bytes of the wgmma kernel for head dim d. */
size_t wf_cuda_attn_wgmma_smem_bytes(int d);

/* Shared bytes of the ws kernel for head dim d with a K / V ring of
 * `stages` (formula above). */
size_t wf_cuda_attn_ws_smem_bytes(int d, int stages);

/* Ring depth of the ws kernel for head dim d under smem_optin: the most
 * stages in [WF_CUDA_WS_MIN_STAGES, WF_CUDA_WS_MAX_STAGES] that fit, or 0
 * when not even the minimum does (the geometry then takes another
 * kernel). */
int wf_cuda_attn_ws_stages(int d, size_t smem_optin);

/* 1 when a warp-specialized split of registers is valid on sm_90: every
 * count a multiple of 8 in [24, 256] (setmaxnreg's range), producer <=
 * entry <= consumer, entry * threads <= 65536 (threads = 128 * (1 +
 * consumers)), what the producer warpgroup frees covers what the
 * consumers take ((entry - producer) * 128 >= (consumer - entry) * 128 *
 * consumers), and the total after the moves within 65536. */
int wf_cuda_ws_regs_ok(int entry, int producer, int consumer, int consumers);

/* The cuda_attention setting's value as a kernel choice: NULL or "" or "wgmma" the
 * default (WF_CUDA_KERNEL_WGMMA), "wgmma-pipe", "mma" (0), and the ws
 * kernel: "ws" optionally followed by "+pipe", "+pp" (ping-pong),
 * "+store" (TMA store), "+persist", "+mc" (clusters with TMA multicast)
 * in any order, or the names of the cumulative steps "ws-pipe" (ws+pipe),
 * "ws-pp" (ws+pipe+pp), "ws-pp-store" (ws+pipe+pp+store), "ws-full" (the
 * four but mc); "ws" or a cumulative name may end in "-mc" (+mc: "ws-mc",
 * "ws-pp-mc", "ws-full-mc") and be followed by "+feature"s (each at most
 * once).
 * WF_E_BAD_ARGUMENT for anything else (the outputs untouched: the caller
 * keeps the default). */
wf_status_t wf_cuda_attn_kernel_parse(const char *sel, int *ret_kernel,
                                      unsigned *ret_features);

/* The canonical name of a choice ("mma", "wgmma", "wgmma-pipe",
 * "ws+pipe+pp", ...) into buf (n bytes, NUL-terminated, truncated). */
void wf_cuda_attn_kernel_name(int kernel, unsigned features, char *buf, size_t n);

/* Workspace of the CUDA attention: 0 bytes (everything stays on chip;
 * the workspace argument may be NULL), or for p->fp8 the quantized
 * copies (wf_cuda_attn_fp8_layout's bytes); exact, pure. */
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

/* A check of the ws kernel's building blocks on device `device`, by
 * name: a K ring of 2 stages loaded by TMA from a producer warpgroup
 * (setmaxnreg.dec) and consumed by two warpgroups (setmaxnreg.inc) through
 * full / empty mbarriers, each consumer copying its rows into a swizzled
 * staging tile that a TMA store writes out; the output must equal the
 * input, rows past the tensor's end (zero-filled in, clipped out) leave
 * the guard after it untouched; each tile also starts with a ping-pong
 * turn of the two consumers (named barriers 1 / 2), whose order must
 * alternate. WF_OK / WF_E_UNAVAILABLE / WF_E_INTERNAL
 * as wf_cuda_wgmma_selftest; one line in report. Defined in
 * attention_ws.cu (allocates; tests only). */
wf_status_t wf_cuda_ws_selftest(int device, char *report, size_t n);

/* A check of +mc's building block on device `device`: a cluster of two
 * CTAs, each CTA's producer multicasting half of every tile of a
 * (1, S, 1, 128) bf16 tensor into a 2-stage ring of both CTAs (full
 * mbarrier of each CTA expecting the whole tile), each CTA's consumer
 * warps checking every byte of every tile (the swizzle as sw_offset
 * reads it, rows past S zero) and releasing the stage on both CTAs'
 * empty barriers (a remote arrive through mapa), each producer finally
 * waiting for the last phase of its empty barriers (every remote arrival
 * seen); cluster barriers at start and before exit. WF_OK when every
 * byte matched in both CTAs and both saw every release; else as
 * wf_cuda_ws_selftest. One line in report. Defined in attention_ws.cu
 * (allocates; tests only). */
wf_status_t wf_cuda_ws_mc_selftest(int device, char *report, size_t n);

/* 1 when the ws kernel was compiled for sm_90a (a real body). */
int wf_cuda_ws_built(void);

/* ---- fp8 attention (fp8_quant.cu, attention_fp8.cu) -------------------------
 *
 * A job with p->fp8 runs in two steps on the context's stream:
 *   1. quantize (fp8_quant.cu): per (batch, head) of this call, amax = the
 *      largest finite |x| (atomicMax on the bits), then kernels/fp8.h's
 *      e4m3(x * 448 / amax) into the workspace:
 *        q8  (B, Sq, Hq, D)        e4m3, heads [h_begin, h_end)
 *        k8  (B, Skv, Hkv, D)      e4m3, the K/V heads those read
 *        v8t (B, Hkv, D, skv_pad)  e4m3, V transposed (keys contiguous, the
 *                                  K-major B operand of P V that 8-bit wgmma
 *                                  needs), keys permuted within each 32 (the
 *                                  P fragment, attention_fp8.cu), zero past
 *                                  Skv; skv_pad = Skv rounded up to
 *                                  WF_CUDA_FP8_BC
 *        amax u32 (B, Hq) + 2 x (B, Hkv); scales f32 sq (B, Hq), sk, sv
 *        (B, Hkv) = fp8.h's wf_fp8_scale(amax)
 *   2. the fp8 kernel (attention_fp8.cu, sm_90a): as the wgmma kernel (BR
 *      = WF_CUDA_BR rows per block in two warpgroups, key tiles of
 *      WF_CUDA_FP8_BC by TMA into WF_CUDA_FP8_STAGES stages) with
 *      wgmma m64nNk32 e4m3 x e4m3 -> f32, softmax scale * sq * sk, P
 *      rounded to e4m3 in registers, O * sv at the end.
 *   grid  (ceil(Sq / BR), h_end - h_begin, B)   block (WF_CUDA_FP8_THREADS)
 *   shared bytes = 1024 (alignment) + D * (BR + STAGES * 2 * BC) (one byte
 *                  per element) + WF_CUDA_FP8_BAR_BYTES
 * Only on a device of compute capability 9.0 in a build with sm_90a
 * (wf_cuda_fp8_device_ok); elsewhere WF_E_UNSUPPORTED. */
enum {
    WF_CUDA_KERNEL_FP8 = 4,          /* the kernel of attention_fp8.cu */
    WF_CUDA_FP8_BC = 128,            /* keys per tile (S is m64n128) */
    WF_CUDA_FP8_THREADS = 256,       /* two warpgroups of 64 query rows */
    WF_CUDA_FP8_STAGES = 4,          /* K and V tiles in shared memory each */
    WF_CUDA_FP8_BAR_BYTES = 256,     /* 1 + 4 * STAGES mbarriers of 8 bytes, rounded */
    WF_CUDA_FP8_QUANT_ROWS = 64,     /* sequence rows per block of the quantizer */
    WF_CUDA_FP8_QUANT_THREADS = 256  /* threads per block of the quantizer */
};

/* Where the quantized copies live in the workspace of an fp8 call (byte
 * offsets from the workspace's start, each WF_CUDA_ALIGN-aligned). */
typedef struct wf_cuda_fp8_ws {
    int64_t skv_pad;          /* Skv rounded up to WF_CUDA_FP8_BC */
    int64_t kv_begin, kv_end; /* K/V heads read by [h_begin, h_end) */
    uint64_t q8, k8, v8t;     /* the e4m3 copies (layouts above) */
    uint64_t amax_q, amax_k, amax_v; /* u32 bits of each head's amax */
    uint64_t sq, sk, sv;      /* f32 scales */
    uint64_t bytes;           /* the whole workspace */
} wf_cuda_fp8_ws_t;

/* The slot of key k (0..31) of a 32-key chunk in v8t: the fp8 kernel's
 * P fragment holds, in byte j of its A register 2 h + r, the score of key
 * 16 h + 8 (j / 2) + 2 t + (j % 2) of its row (t = lane % 4: S's
 * accumulator layout), where wgmma's k32 A fragment wants column 16 h +
 * 4 t + j; so key 16 h + 8 a + 2 t + e is stored at slot 16 h + 4 t + 2 a
 * + e (attention_fp8.cu has the derivation). A permutation of 0..31. */
int wf_cuda_fp8_key_slot(int k);

/* 1 when a device of compute capability major.minor runs the fp8 kernel
 * in a build whose kernels have an sm_90a body (built != 0): 9.0 only. */
int wf_cuda_fp8_device_ok(int major, int minor, int built);

/* The workspace layout of fp8 call p (p->fp8 need not be set).
 * WF_E_BAD_ARGUMENT when p is invalid (wf_cuda_attn_params_ok) or the
 * sizes overflow. */
wf_status_t wf_cuda_attn_fp8_layout(const wf_attn_params_t *p, wf_cuda_fp8_ws_t *ret_ws);

/* Shared bytes of the fp8 kernel for head dim d (formula above). */
size_t wf_cuda_attn_fp8_smem_bytes(int d);

/* Geometry of the fp8 kernel for p on a device with limits *lim whose
 * fp8 support is fp8_ok (wf_cuda_fp8_device_ok): kernel
 * WF_CUDA_KERNEL_FP8, grid and block as above, stages, smem_bytes.
 * WF_E_UNSUPPORTED when !fp8_ok or its shared memory exceeds
 * lim->smem_optin; WF_E_BAD_ARGUMENT for invalid p or a grid past the
 * limits. An empty head range gives grid[1] == 0. */
wf_status_t wf_cuda_attn_fp8_geometry(const wf_attn_params_t *p, const wf_cuda_limits_t *lim,
                                      int fp8_ok, wf_cuda_attn_geom_t *ret_geom);

/* Grid of the quantizer's kernels over `rows` sequence rows of `heads`
 * heads of B batches: (ceil(rows / WF_CUDA_FP8_QUANT_ROWS), heads, B),
 * block (WF_CUDA_FP8_QUANT_THREADS). */
void wf_cuda_fp8_quant_geometry(int64_t rows, int64_t heads, int64_t B, unsigned ret_grid[3],
                                unsigned ret_block[3]);

/* A check of the fp8 kernel's building blocks on device `device`, by
 * name: S = A B^T with e4m3 wgmma m64n128k32 (both K-major, swizzled as
 * the kernel's tiles), O = P V with P packed from S's accumulator layout
 * to e4m3 A fragments against V^T with keys permuted as the quantizer
 * stores them, each against an exact host product, and the quantizer
 * (amax, q8, k8, v8t, scales) against kernels/fp8.h on the host.
 * WF_OK / WF_E_UNAVAILABLE / WF_E_INTERNAL as wf_cuda_wgmma_selftest;
 * one line in report. Defined in attention_fp8.cu (allocates; tests only). */
wf_status_t wf_cuda_fp8_selftest(int device, char *report, size_t n);

/* 1 when the fp8 kernel was compiled for sm_90a (a real body). */
int wf_cuda_fp8_built(void);

/* The CUDA backend's attention() of an fp8 job (p->fp8 need not be set)
 * in steps, for benchmarks that time the kernel without the quantization:
 * steps 1 quantizes p's q / k / v into workspace, 2 runs the fp8 kernel
 * on the copies an earlier step 1 wrote there, 3 both (attention()). Same
 * checks and statuses as attention(). Defined in cuda_backend.cu. */
wf_status_t wf_cuda_attention_fp8_steps(wf_backend_ctx_t *ctx, const wf_attn_params_t *p,
                                        void *workspace, int steps);

/* ---- the device arena ------------------------------------------------------ */

/* Most resident blocks (mem_alloc) one context holds at once. */
#define WF_CUDA_MAX_RESIDENT 1024

/* One resident block: [off, off + bytes) of the arena. */
typedef struct wf_cuda_block {
    uint64_t off;   /* offset in the arena (a multiple of align) */
    uint64_t bytes; /* rounded up to align */
} wf_cuda_block_t;

/* One device allocation made at ctx_new, shared by two allocators
 * (offsets only; the backend adds its base pointer):
 *   per-job scratch (dev_alloc): a bump allocator from the bottom, taken
 *     in order and released all at once (reset) when the job ends;
 *   resident blocks (mem_alloc, model shards): first fit from the top,
 *     each freed alone. The blocks are kept sorted by offset; the holes
 *     between them are the free list (so freeing coalesces by itself).
 * The bump pointer never crosses the lowest resident block (`floor`),
 * and a resident block never goes below the bump pointer, so job buffers
 * and resident blocks never overlap.
 *
 *   0          used          floor                        capacity
 *   | job bufs | free (jobs) | resident, holes between them |
 */
typedef struct wf_cuda_arena {
    uint64_t capacity;   /* bytes usable (a multiple of align) */
    uint64_t used;       /* bytes taken since the last reset */
    uint64_t high_water; /* largest `used` seen */
    uint64_t align;      /* power of two >= 16 */
    uint32_t count;      /* buffers taken since the last reset */
    uint32_t nres;       /* resident blocks in res[] */
    uint64_t floor;      /* offset of the lowest resident block, or capacity */
    uint64_t resident;   /* bytes of the resident blocks (rounded) */
    wf_cuda_block_t res[WF_CUDA_MAX_RESIDENT]; /* sorted by offset */
} wf_cuda_arena_t;

/* Set up an arena of `capacity` bytes (rounded down to align). align must
 * be a power of two >= 16, else WF_E_BAD_ARGUMENT (arena untouched). */
wf_status_t wf_cuda_arena_init(wf_cuda_arena_t *a, uint64_t capacity,
                               uint64_t align);

/* Take `bytes` (rounded up to align; 0 takes nothing and returns the
 * current offset) below the lowest resident block. WF_E_NO_MEMORY when
 * it does not fit: nothing changes. */
wf_status_t wf_cuda_arena_take(wf_cuda_arena_t *a, uint64_t bytes,
                               uint64_t *ret_offset);

/* Release everything taken (high_water is kept). */
void wf_cuda_arena_reset(wf_cuda_arena_t *a);

/* Bytes dev_alloc can still take (up to the lowest resident block). */
uint64_t wf_cuda_arena_free(const wf_cuda_arena_t *a);

/* A resident block of `bytes` (rounded up to align; 0 takes one align
 * unit, so every block has its own offset): the highest hole that holds
 * it, at the top of that hole, never below `used`. WF_E_NO_MEMORY when
 * no hole holds it or WF_CUDA_MAX_RESIDENT blocks exist (nothing changes);
 * WF_E_BAD_ARGUMENT for NULL arguments. */
wf_status_t wf_cuda_arena_res_alloc(wf_cuda_arena_t *a, uint64_t bytes,
                                    uint64_t *ret_offset);

/* Free the resident block at `offset`. WF_E_BAD_ARGUMENT (nothing
 * changes) when no block starts there. */
wf_status_t wf_cuda_arena_res_free(wf_cuda_arena_t *a, uint64_t offset);

/* ---- linear (cuBLASLt) ------------------------------------------------------- *
 *
 * y = act(x W^T + bias) (backend.h wf_linear_params_t) as cuBLASLt
 * matmuls, which are column-major. A row-major matrix (r, c) with row
 * stride ld is the column-major matrix (c, r) with the same ld, so
 *   y (rows, out) row-major  = Y^T (out, rows) column-major, ldc = ldy;
 *   W block (out, wbw) rm    = (wbw, out) cm, lda = ldw, used transposed;
 *   x block (rows, wbw) rm   = (wbw, rows) cm, ldb = ldx (or in when x
 *                              was converted into the workspace);
 * and Y^T = sum over blocks of op(A) B with op(A) = A^T (TRANSA = T,
 * TRANSB = N): m = out, n = rows, k = wbw. The first block writes
 * (beta 0), the others accumulate (beta 1, C = D = y); only the last
 * carries the epilogue (bias, GELU), which cuBLASLt applies to
 * alpha A B + beta C, i.e. to the full sum.
 *
 * Precision: bf16 / f16 weights: an f32 x is rounded to the weight dtype
 * in the workspace (contiguous, rows x in), an x already in that dtype
 * (x_dtype) is read in place; products in fp32 (CUBLAS_COMPUTE_32F),
 * bias f32, y f32 or (y_dtype) bf16 / f16, the epilogue's f32 result
 * rounded once as D is stored. f32 weights: x used as is,
 * CUBLAS_COMPUTE_32F with f32 operands, which is plain fp32 (TF32 only
 * with CUBLAS_COMPUTE_32F_FAST_TF32, never asked for). */

/* What the matmul's epilogue does (cublasLtEpilogue_t of gemm_lt.cu). */
enum {
    WF_CUDA_EPI_NONE = 0,     /* CUBLASLT_EPILOGUE_DEFAULT */
    WF_CUDA_EPI_BIAS = 1,     /* CUBLASLT_EPILOGUE_BIAS */
    WF_CUDA_EPI_GELU = 2,     /* CUBLASLT_EPILOGUE_GELU */
    WF_CUDA_EPI_GELU_BIAS = 3 /* CUBLASLT_EPILOGUE_GELU_BIAS */
};

/* What one cuBLASLt matmul depends on beside its pointers: the key of
 * the context's descriptor / heuristic cache. All 64-bit fields: no
 * padding, compared with memcmp. */
typedef struct wf_cuda_gemm_key {
    int64_t dtype;            /* wf_dtype_t of A and B */
    int64_t c_dtype;          /* wf_dtype_t of C = D (y_dtype) */
    int64_t m, n, k;          /* column-major, see above */
    int64_t lda, ldb, ldc;    /* ldc = ldd */
    int64_t epilogue;         /* WF_CUDA_EPI_* */
    int64_t align_a, align_b, align_c; /* pointer alignments, bytes (<= 256) */
} wf_cuda_gemm_key_t;

/* One matmul of a linear: column block `k` of W. */
typedef struct wf_cuda_gemm {
    const void *a;        /* the weight block (wb[i]) */
    int64_t b_col;        /* its first column in x (sum of the wbw before) */
    float beta;           /* 0 for the first block, 1 after */
    wf_cuda_gemm_key_t key;
} wf_cuda_gemm_t;

/* The whole linear. */
typedef struct wf_cuda_linear_plan {
    int convert_x;        /* 1: x rounded to w_dtype into the workspace */
    uint64_t x_bytes;     /* bytes of that copy (rows * in * 2), else 0 */
    int post_bias;        /* 1: bias added by a kernel after the matmuls
                             (not fused: a bias pointer not 16-byte aligned;
                             with a bf16 / f16 y the kernel reads the sum
                             already rounded to y's dtype) */
    int post_act;         /* wf_act_t applied by a kernel after the matmuls
                             (SiLU always; GELU when not fused) */
    uint32_t nwb;         /* matmuls */
    wf_cuda_gemm_t g[WF_LINEAR_MAX_BLOCKS];
} wf_cuda_linear_plan_t;

/* Bytes of workspace linear() needs: 0 for f32 weights or an x already
 * in the weight's dtype; for bf16 / f16 weights and an f32 x rows * in *
 * 2 rounded up to WF_CUDA_ALIGN (x rounded to the weight dtype). 0 for
 * invalid shapes or rows 0. Pure: the pointers of p are not looked at
 * (admission asks before any buffer exists). */
size_t wf_cuda_linear_workspace(const wf_linear_params_t *p);

/* Check p (backend.h's rules: pointers non-NULL, rows >= 0, in and out
 * >= 1, nwb in [1, WF_LINEAR_MAX_BLOCKS], each wbw >= 1 and their sum ==
 * in, w_dtype f32 / f16 / bf16, act known, ldx >= in, ldy >= out, ldw >=
 * every wbw, x and y not overlapping; rows 0 skips the pointer checks) and
 * make the plan for a workspace at `workspace` (NULL when
 * wf_cuda_linear_workspace is 0). fuse_gelu 0 keeps GELU out of the
 * epilogue (a kernel applies it). WF_E_BAD_ARGUMENT when invalid
 * (*ret untouched). rows 0: WF_OK with nwb 0 (nothing to do). */
wf_status_t wf_cuda_linear_plan(const wf_linear_params_t *p, const void *workspace,
                                int fuse_gelu, wf_cuda_linear_plan_t *ret);

/* Largest power of two dividing the address, at most 256 (256 for 0). */
int64_t wf_cuda_ptr_align(const void *ptr);

/* ---- elementwise ops --------------------------------------------------------- */

/* A row-wise elementwise kernel over (rows, n): block 256 threads,
 * grid.x over the columns (ceil(n / 256), at most 64), grid.y over the
 * rows (at most 65535); the kernel strides over both. rows, n >= 1. */
void wf_cuda_rows_geometry(int64_t rows, int64_t n, unsigned ret_grid[3],
                           unsigned ret_block[3]);

/* One block of 256 threads per row (LayerNorm): grid.x = rows, at most
 * lim->max_grid_x (the kernel strides). rows >= 1. */
void wf_cuda_rowblock_geometry(int64_t rows, const wf_cuda_limits_t *lim,
                               unsigned ret_grid[3], unsigned ret_block[3]);

/* One warp per item (head_norm_rope: per (row, head)): 8 warps per
 * block, grid.x = ceil(items / 8) at most lim->max_grid_x (the kernel
 * strides). items >= 1. */
void wf_cuda_warp_geometry(int64_t items, const wf_cuda_limits_t *lim,
                           unsigned ret_grid[3], unsigned ret_block[3]);

/* Params checks of the elementwise ops (backend.h): 1 when valid. */
int wf_cuda_modln_ok(const wf_modln_params_t *p);
int wf_cuda_headrope_ok(const wf_headrope_params_t *p);

/* Most rotary pairs (D / 2) rope_table handles: its frequencies travel
 * as a kernel argument. */
#define WF_CUDA_ROPE_MAX_PAIRS 256

/* The frequencies of rope_table, in double on the host exactly as the
 * CPU contract states: pair p (columns 2p, 2p + 1) belongs to axis
 * ret_axis[p] and has frequency ret_freq[p] = 1 / theta^(2j / d) (j its
 * index in the axis of width d). WF_E_BAD_ARGUMENT when an axis width is
 * odd or 0, the widths do not sum to D, D / 2 > WF_CUDA_ROPE_MAX_PAIRS,
 * n_axes is 0 or theta <= 0. */
wf_status_t wf_cuda_rope_freqs(const uint32_t *axes_dims, uint32_t n_axes,
                               double theta, int64_t D,
                               double ret_freq[WF_CUDA_ROPE_MAX_PAIRS],
                               uint8_t ret_axis[WF_CUDA_ROPE_MAX_PAIRS]);

/* copy_rows' checks: 1 when rows >= 0, ld_dst and ld_src >= row_bytes,
 * pointers non-NULL when there is something to copy, and the byte ranges
 * [p, p + (rows - 1) ld + row_bytes) of dst and src disjoint. */
int wf_cuda_copy_rows_ok(const void *dst, size_t ld_dst, const void *src,
                         size_t ld_src, int64_t rows, size_t row_bytes);

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
