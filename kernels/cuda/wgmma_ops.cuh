/* wgmma_ops.cuh — the Hopper building blocks shared by the wgmma attention
 * kernels (attention_wgmma.cu, attention_ws.cu): shared-memory matrix
 * descriptors, wgmma issue / fence / commit / wait, the async-proxy
 * fence, mbarriers, the 4-d TMA load and the 128-byte swizzle offset;
 * at the end, the cluster operations of attention_ws.cu's +mc (rank,
 * cluster barrier, multicast TMA load, remote mbarrier arrival).
 * sm_90a device code only: included inside each kernel's anonymous
 * namespace, under its own "sm_90a body" #ifdef. */
#ifndef WF_WGMMA_OPS_CUH
#define WF_WGMMA_OPS_CUH

/* ---- wgmma --------------------------------------------------------------------- */

/* Shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * start address, leading and stride byte offsets (each >> 4, 14 bits),
 * swizzle mode 1 = 128 bytes in bits 62-63. */
__device__ __forceinline__ uint64_t desc_field(uint32_t bytes)
{
    return (uint64_t)((bytes & 0x3FFFF) >> 4);
}
__device__ __forceinline__ uint64_t make_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo)
{
    return desc_field(saddr) | (desc_field(lbo) << 16) | (desc_field(sbo) << 32) |
           ((uint64_t)1 << 62);
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Shared memory written through the generic proxy (cp.async) becomes
 * visible to wgmma's async proxy. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* Keep the compiler from moving accesses of accumulator registers across
 * the asynchronous MMAs that own them. */
template <int N> __device__ __forceinline__ void reg_fence(float *r)
{
#pragma unroll
    for (int i = 0; i < N; i++)
        asm volatile("" : "+f"(r[i])::"memory");
}

/* d (64 x N, f32) (+)= A (64 x 16) B (16 x N): A and B K-major in shared
 * memory (descriptors). scale_d 0 overwrites d. */
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float *d, uint64_t da, uint64_t db, int scale_d);
/* The same with A from registers (the m16n8k16 A fragment of this warp's
 * 16 rows) and B N-major (transposed) in shared memory. */
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t db,
                                         int scale_d);

/* The accumulator operands of a wgmma with N = 32 or 64 f32 registers
 * per thread (m64n64 / m64n128): the register list of the PTX
 * instruction ("{%0, ..., %N-1}", the first N operands) and the matching
 * "+f" constraints on d[0..N-1]. Shared by the 16-bit wrappers below and
 * attention_fp8.cu's e4m3 ones. */
#define WF_WGMMA_REGS32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WF_WGMMA_REGS64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define WF_WGMMA_ACC32(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31])
#define WF_WGMMA_ACC64(d) \
    WF_WGMMA_ACC32(d), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), \
    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), \
    "+f"(d[62]), "+f"(d[63])

/* The wrappers of one element type T_ (PTX type TY_): the SS product with
 * N = 128 (S) and the RS products with N = 64 and 128 (O, D = 64 / 128). */
#define WF_WGMMA_WRAPPERS(T_, TY_) \
template <> \
__device__ __forceinline__ void \
wgmma_ss<T_, 128>(float *d, uint64_t da, uint64_t db, int scale_d) \
{ \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY_ "." TY_ " " \
        WF_WGMMA_REGS64 ", %64, %65, p, 1, 1, 0, 0;\n}\n" \
        : WF_WGMMA_ACC64(d) \
        : "l"(da), "l"(db), "r"(scale_d)); \
} \
 \
template <> \
__device__ __forceinline__ void \
wgmma_rs<T_, 64>(float *d, const uint32_t *a, uint64_t db, int scale_d) \
{ \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY_ "." TY_ " " \
        WF_WGMMA_REGS32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n" \
        : WF_WGMMA_ACC32(d) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)); \
} \
 \
template <> \
__device__ __forceinline__ void \
wgmma_rs<T_, 128>(float *d, const uint32_t *a, uint64_t db, int scale_d) \
{ \
    asm volatile( \
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY_ "." TY_ " " \
        WF_WGMMA_REGS64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n" \
        : WF_WGMMA_ACC64(d) \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)); \
}

WF_WGMMA_WRAPPERS(__nv_bfloat16, "bf16")
WF_WGMMA_WRAPPERS(__half, "f16")
#undef WF_WGMMA_WRAPPERS

/* ---- mbarriers and TMA ----------------------------------------------------------- */

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
/* The inits are visible to the async proxy (TMA) and the other threads
 * after this and a barrier. */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* One arrival that also announces `bytes` the TMA will deliver. */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* Wait until the phase with this parity completed. A wait that never
 * ends (a defect) traps after ~2^28 polls, so the job fails with a launch
 * error instead of hanging its stream. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done, polls = 0;
    do {
        if (++polls == (1u << 28))
            __trap();
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* TMA: the box at coordinates (c0..c3) of the 4-d tensor map into shared
 * memory at dst (128-byte swizzled, as the map says); completes bytes on
 * the mbarrier. */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                            int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2),
                 "r"(c3)
                 : "memory");
}

/* ---- tiles --------------------------------------------------------------------- */

/* Byte offset of 16-byte chunk j (of D / 8 per row) of row r in a
 * swizzled tile of R rows. */
template <int R>
__device__ __forceinline__ uint32_t sw_offset(int r, int j)
{
    return (uint32_t)((j >> 3) * (R * 128) + r * 128 + (((j & 7) ^ (r & 7)) << 4));
}

/* ---- clusters (attention_ws.cu's +mc) ---------------------------------------------- */

/* This CTA's rank in its cluster. */
__device__ __forceinline__ uint32_t cluster_ctarank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every non-exited thread of the cluster: arrive (release: this thread's
 * earlier writes and remote arrivals are seen by whoever waits) and wait
 * (acquire) for the others' arrivals. Not .aligned: a warp may have
 * exited lanes. `on` uniform per thread pair: predicated, no branch. */
__device__ __forceinline__ void cluster_sync_if(int on)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n"
                 "@p barrier.cluster.arrive.release;\n"
                 "@p barrier.cluster.wait.acquire;\n}\n" ::"r"(on)
                 : "memory");
}
/* TMA with .multicast::cluster: the box at (c0..c3) lands at the same
 * CTA-relative offset dst in every CTA of `mask` (bit i: rank i) and
 * completes its bytes on the mbarrier at offset bar of each of them. */
__device__ __forceinline__ void tma_load_4d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                               uint16_t mask, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "h"(mask), "r"(c0), "r"(c1),
                 "r"(c2), "r"(c3)
                 : "memory");
}
/* A release of an mbarrier (an empty barrier) by one warp: without a
 * cluster (mc 0) every thread arrives on bar; with one (mc 1) lane 0
 * arrives on bar and on the barrier at the same offset in CTA `peer`
 * (mapa). The remote arrival keeps mbarrier.arrive's default semantics
 * (release at CTA scope, as CUTLASS's ClusterBarrier::arrive(cta_id)):
 * what it orders is the warp's reads of the stage, which its waited
 * wgmmas (or the caller's __syncwarp after ld.shared) completed before
 * it, and .release.cluster compiled to a MEMBAR.ALL.GPU per release.
 * Predicated: no branch between the asynchronous MMAs and their waits. */
__device__ __forceinline__ void mbar_release(uint32_t bar, int mc, int lane, uint32_t peer)
{
    asm volatile("{\n.reg .pred pa, pm;\n.reg .u32 ra;\n"
                 "setp.eq.b32 pa, %1, 0;\n"
                 "setp.ne.b32 pm, %1, 0;\n"
                 "@pa mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                 "setp.eq.and.b32 pm, %2, 0, pm;\n"
                 "@pm mbarrier.arrive.shared::cta.b64 _, [%0];\n"
                 "@pm mapa.shared::cluster.u32 ra, %0, %3;\n"
                 "@pm mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(mc), "r"(lane), "r"(peer)
                 : "memory");
}

#endif /* WF_WGMMA_OPS_CUH */
