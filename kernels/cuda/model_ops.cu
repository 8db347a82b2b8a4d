/* model_ops.cu — the elementwise model ops of backend.h on the device
 * (bias_act, act, add, modln, gate_residual, head_norm_rope, rope_table,
 * timestep_proj, rms_sumsq, rms_norm, layer_norm, rope_grid,
 * timestep_embed) and the rounding of a linear's x to its weight dtype,
 * with their launchers. Launch geometry comes from cuda_plan.c; params
 * are checked by the ops (cuda_backend.cu) before a launcher runs.
 *
 * Precision: this file is compiled WITHOUT --use_fast_math (see
 * kernels/CMakeLists.txt): expf, tanhf, sqrtf and divisions are the IEEE
 * / CUDA-accurate ones, so the ops follow the CPU reference's f32
 * formulas to a few ulp. Norm statistics are f32 (two passes: mean,
 * then the sum of squared deviations, each a warp-shuffle + shared
 * memory block reduction), where the CPU uses double. rope_table's angles
 * and timestep_proj's sines are taken in double on the f32 arguments
 * (the CPU's f32 results, correctly rounded).
 *
 * Not here: the matmuls (gemm_lt.cu), parameter checks (cuda_plan.c).
 */
#include "cuda_launch.h"
#include "round_dtype.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

namespace {

__device__ __forceinline__ float gelu_tanh(float a)
{
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    return 0.5f * a * (1.0f + tanhf(k0 * (a + k1 * a * a * a)));
}

__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

__device__ __forceinline__ float apply_act(float v, int act)
{
    if (act == WF_ACT_GELU_TANH)
        return gelu_tanh(v);
    if (act == WF_ACT_SILU)
        return silu(v);
    if (act == WF_ACT_GELU)
        return 0.5f * v * erfcf(-v * 0.70710678118654752f); /* no cancellation for v < 0 */
    return v;
}

/* dst (rows, n) rows ldd apart in ddt = act(src + bias), src (rows, n)
 * rows lds apart in sdt (dst may be src, same dtype and ld: each thread
 * writes only what it read). grid.y strides rows, grid.x * block strides
 * columns (wf_cuda_rows_geometry). */
__global__ void bias_act_kernel(const void *src, int sdt, long long lds, void *dst, int ddt,
                                long long ldd, int rows, int n, const float *bias, int act)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n; c += gridDim.x * blockDim.x) {
            float v = wf_cuda_load_dt(src, sdt, (long long)r * lds + c);
            if (bias)
                v += bias[c];
            wf_cuda_store_dt(dst, ddt, (long long)r * ldd + c, apply_act(v, act));
        }
    }
}

__global__ void act_kernel(float *dst, const float *src, size_t n, int act)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = apply_act(src[i], act);
}

__global__ void add_kernel(float *dst, const float *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

__global__ void axpy_kernel(float *y, float alpha, const float *x, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] += alpha * x[i];
}

/* Each thread sums its elements in double, a block reduces in shared
 * memory, thread 0 adds the block's pair to sums (atomicAdd on double:
 * compute capability 6.0 and later). The order of the additions varies
 * from run to run; the sums decide a threshold test, not a result. */
__global__ void change_sums_kernel(const float *a, const float *b, size_t n, double *sums)
{
    __shared__ double sd[256], sm[256];
    double d = 0, m = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        d += fabs((double)a[i] - (double)b[i]);
        m += fabs((double)b[i]);
    }
    sd[threadIdx.x] = d;
    sm[threadIdx.x] = m;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            sd[threadIdx.x] += sd[threadIdx.x + s];
            sm[threadIdx.x] += sm[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(&sums[0], sd[0]);
        atomicAdd(&sums[1], sm[0]);
    }
}

__device__ __forceinline__ void store_rn(__nv_bfloat16 *d, float v) { *d = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_rn(__half *d, float v) { *d = __float2half_rn(v); }

/* x (rows, in) f32 rows ldx apart -> xw (rows, in) contiguous in T
 * (round to nearest even, as tensor.h). */
template <typename T>
__global__ void round_rows_kernel(T *xw, const float *x, int rows, int in, long long ldx)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < in; c += gridDim.x * blockDim.x)
            store_rn(xw + (long long)r * in + c, x[(long long)r * ldx + c]);
}

/* Sum of v over the block (blockDim.x a multiple of 32, <= 1024); every
 * thread gets the result. `sh` holds 32 floats; reusable after return. */
__device__ float block_sum(float v, float *sh)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o /= 2)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0)
        sh[warp] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2)
        t += __shfl_xor_sync(0xffffffffu, t, o);
    __syncthreads(); /* sh free again for the next reduction */
    return t;
}

/* AdaLN (wf_modln_params_t): one block per row (grid strides rows).
 * Two passes for the statistics (mean, then mean squared deviation:
 * no cancellation), a third writes in dst's dtype (a bf16 dst is the
 * next linear's x); each thread writes only the columns it read, so dst
 * may be src (f32). */
__global__ void modln_kernel(wf_modln_params_t p, int rows)
{
    __shared__ float sh[32];
    const int C = (int)p.C;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const int b = row / (int)p.per;
        const float *x = p.src + (long long)row * p.ld_src;
        const long long yo = (long long)row * p.ld_dst;
        const float *sh_b = p.shift + (long long)b * p.ld_mod;
        const float *sc_b = p.scale + (long long)b * p.ld_mod;
        float s = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            s += x[c];
        const float mean = block_sum(s, sh) / (float)C;
        float q = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float d = x[c] - mean;
            q += d * d;
        }
        const float var = block_sum(q, sh) / (float)C;
        const float inv = 1.0f / sqrtf(var + p.eps);
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float nv = (x[c] - mean) * inv;
            wf_cuda_store_dt(p.dst, (int)p.dst_dtype, yo + c, nv * (1.0f + sc_b[c]) + sh_b[c]);
        }
    }
}

/* S row (b, r) += gate[b] * y row (b, r); rows = nbatch * per, C and
 * the row strides in elements of V. The launcher takes V = float4 when
 * every row of all three starts 16-byte aligned and C is a multiple of
 * 4 (one 16-byte load of each operand and one store per thread and
 * step), else float. */
__device__ __forceinline__ void gate_add(float &s, float g, float y) { s += g * y; }
__device__ __forceinline__ void gate_add(float4 &s, float4 g, float4 y)
{
    s.x += g.x * y.x;
    s.y += g.y * y.y;
    s.z += g.z * y.z;
    s.w += g.w * y.w;
}

template <typename V>
__global__ void gate_residual_kernel(V *S, long long ld_s, const V *y, long long ld_y,
                                     const V *gate, long long ld_gate, int rows, int per, int C)
{
    for (int r = blockIdx.y; r < rows; r += gridDim.y) {
        const V *g = gate + (long long)(r / per) * ld_gate;
        V *s = S + (long long)r * ld_s;
        const V *yr = y + (long long)r * ld_y;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
            V sv = s[c];
            gate_add(sv, g[c], yr[c]);
            s[c] = sv;
        }
    }
}

/* Per-head RMSNorm + RoPE into joint order (wf_headrope_params_t): one
 * warp per (row, head) item, item = row * H + h, src read in its dtype
 * (a projection's bf16 output widened exactly). The norm's sum of
 * squares is a warp reduction; each lane then writes the pairs
 * (2j, 2j + 1), j = lane, lane + 32, ... (D odd, norm only: element by
 * element), in dst's dtype (bf16: the attention kernels' q / k / v). */
__global__ void head_norm_rope_kernel(wf_headrope_params_t p, int items)
{
    const int lane = threadIdx.x % 32;
    const int wpb = blockDim.x / 32;
    const int D = (int)p.D, H = (int)p.H, per = (int)p.per;
    for (int it = blockIdx.x * wpb + threadIdx.x / 32; it < items; it += gridDim.x * wpb) {
        const int row = it / H, h = it % H;
        const int b = row / per, s = row % per;
        const long long xo = (long long)row * p.ld_src + (long long)h * D;
        const int xdt = (int)p.src_dtype;
        const long long oo =
            ((long long)b * p.L + p.row0 + s) * (long long)H * D + (long long)h * D;
        const int odt = (int)p.dst_dtype;
        float inv = 1.0f;
        if (p.norm) {
            float ss = 0.0f;
            for (int d = lane; d < D; d += 32) {
                const float v = wf_cuda_load_dt(p.src, xdt, xo + d);
                ss += v * v;
            }
            for (int k = 16; k > 0; k /= 2)
                ss += __shfl_xor_sync(0xffffffffu, ss, k);
            inv = 1.0f / sqrtf(ss / (float)D + p.eps);
        }
        if (!p.cos) {
            for (int d = lane; d < D; d += 32) {
                const float v = wf_cuda_load_dt(p.src, xdt, xo + d);
                wf_cuda_store_dt(p.dst, odt, oo + d, p.norm ? (v * inv) * p.norm[d] : v);
            }
            continue;
        }
        const float *cs = p.cos + (long long)(p.row0 + s) * D;
        const float *sn = p.sin + (long long)(p.row0 + s) * D;
        for (int j = lane; j < D / 2; j += 32) {
            const int d = 2 * j;
            float x0 = wf_cuda_load_dt(p.src, xdt, xo + d);
            float x1 = wf_cuda_load_dt(p.src, xdt, xo + d + 1);
            if (p.norm) {
                x0 = (x0 * inv) * p.norm[d];
                x1 = (x1 * inv) * p.norm[d + 1];
            }
            wf_cuda_store_dt(p.dst, odt, oo + d, x0 * cs[d] - x1 * sn[d]);
            wf_cuda_store_dt(p.dst, odt, oo + d + 1, x1 * cs[d + 1] + x0 * sn[d + 1]);
        }
    }
}

/* The frequencies of rope_table (from wf_cuda_rope_freqs), by value. */
struct rope_freqs {
    double freq[WF_CUDA_ROPE_MAX_PAIRS];
    uint8_t axis[WF_CUDA_ROPE_MAX_PAIRS];
};

/* cos, sin (L, D): item = l * (D / 2) + pair. */
__global__ void rope_table_kernel(rope_freqs f, const float *ids, int L, int n_axes, int D,
                                  float *cs, float *sn)
{
    const int pairs = D / 2;
    const long long n = (long long)L * pairs;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int l = (int)(i / pairs), pr = (int)(i % pairs);
        const double ang = (double)ids[(long long)l * n_axes + f.axis[pr]] * f.freq[pr];
        const float c = (float)cos(ang), s = (float)sin(ang);
        float *cr = cs + (long long)l * D + 2 * pr, *sr = sn + (long long)l * D + 2 * pr;
        cr[0] = cr[1] = c;
        sr[0] = sr[1] = s;
    }
}

/* dst (B, dim): item = b * half + k. */
__global__ void timestep_proj_kernel(const float *t, int B, int half, int rdt, float *dst)
{
    const float nl = (float)-9.210340371976184; /* -ln(10000) */
    const long long n = (long long)B * half;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / half), k = (int)(i % half);
        const float tv =
            wf_cuda_round_to(__fmul_rn(wf_cuda_round_to(t[b], rdt), 1000.0f), rdt);
        float e = __fmul_rn(nl, (float)k);
        e = __fdiv_rn(e, (float)half);
        /* exp in double rounded to f32: the correctly rounded expf of
         * the CPU's libm (CUDA's expf is within 2 ulp, which tv ~ 1000
         * would turn into 1e-4 of the sines). */
        const float arg = __fmul_rn(tv, (float)exp((double)e));
        dst[(long long)b * 2 * half + k] = (float)cos((double)arg);
        dst[(long long)b * 2 * half + half + k] = (float)sin((double)arg);
    }
}

/* sumsq[row] = sum of src row's squares: one block per row. */
__global__ void rms_sumsq_kernel(const float *src, int rows, int n, long long ld_src,
                                 float *sumsq)
{
    __shared__ float sh[32];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *x = src + (long long)row * ld_src;
        float q = 0.0f;
        for (int c = threadIdx.x; c < n; c += blockDim.x)
            q += x[c] * x[c];
        q = block_sum(q, sh);
        if (threadIdx.x == 0)
            sumsq[row] = q;
    }
}

/* RMSNorm (wf_rmsnorm_params_t): one block per row, written in dst's
 * dtype (a bf16 dst is attention's q / k); each thread writes only the
 * columns it read, so dst may be src (f32). */
__global__ void rms_norm_kernel(wf_rmsnorm_params_t p)
{
    __shared__ float sh[32];
    const int n = (int)p.n, rows = (int)p.rows;
    const int odt = (int)p.dst_dtype;
    const float width = (float)(p.sumsq ? p.width : p.n);
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *x = p.src + (long long)row * p.ld_src;
        const long long yo = (long long)row * p.ld_dst;
        float ss;
        if (p.sumsq) {
            ss = p.sumsq[row];
        } else {
            float q = 0.0f;
            for (int c = threadIdx.x; c < n; c += blockDim.x)
                q += x[c] * x[c];
            ss = block_sum(q, sh);
        }
        const float inv = 1.0f / sqrtf(ss / width + p.eps);
        for (int c = threadIdx.x; c < n; c += blockDim.x)
            wf_cuda_store_dt(p.dst, odt, yo + c,
                             p.weight ? (x[c] * inv) * p.weight[c] : x[c] * inv);
    }
}

/* LayerNorm with an optional affine (wf_layernorm_params_t): as
 * modln_kernel, two passes for the statistics, a third writes in dst's
 * dtype (a bf16 dst is the next linear's x). */
__global__ void layer_norm_kernel(wf_layernorm_params_t p)
{
    __shared__ float sh[32];
    const int C = (int)p.C, rows = (int)p.rows;
    const int odt = (int)p.dst_dtype;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *x = p.src + (long long)row * p.ld_src;
        const long long yo = (long long)row * p.ld_dst;
        float s = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            s += x[c];
        const float mean = block_sum(s, sh) / (float)C;
        float q = 0.0f;
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float d = x[c] - mean;
            q += d * d;
        }
        const float var = block_sum(q, sh) / (float)C;
        const float inv = 1.0f / sqrtf(var + p.eps);
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float nv = (x[c] - mean) * inv;
            if (p.weight)
                nv *= p.weight[c];
            if (p.bias)
                nv += p.bias[c];
            wf_cuda_store_dt(p.dst, odt, yo + c, nv);
        }
    }
}

/* The grid of rope_grid_kernel by value: tokens per step of each axis. */
struct rope_grid_dims {
    long long stride[WF_ROPE_MAX_AXES];
    long long grid[WF_ROPE_MAX_AXES];
};

/* cos, sin (L, D) of tokens row0 .. row0 + L: item = l * (D / 2) + pair;
 * the position on the pair's axis from the token index. */
__global__ void rope_grid_kernel(rope_freqs f, rope_grid_dims g, long long row0, int L, int D,
                                 float *cs, float *sn)
{
    const int pairs = D / 2;
    const long long n = (long long)L * pairs;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int l = (int)(i / pairs), pr = (int)(i % pairs);
        const int a = f.axis[pr];
        const double pos = (double)((row0 + l) / g.stride[a] % g.grid[a]);
        const double ang = pos * f.freq[pr];
        const float c = (float)cos(ang), s = (float)sin(ang);
        float *cr = cs + (long long)l * D + 2 * pr, *sr = sn + (long long)l * D + 2 * pr;
        cr[0] = cr[1] = c;
        sr[0] = sr[1] = s;
    }
}

/* dst (B, dim) of wf_timestep_params_t: item = b * half + k; the f32
 * steps of the CPU, exp / cos / sin in double rounded to f32 as
 * timestep_proj_kernel. */
__global__ void timestep_embed_kernel(wf_timestep_params_t p, int half, float nl, float div)
{
    const long long n = (long long)p.B * half;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(i / half), k = (int)(i % half);
        float e = __fmul_rn(nl, (float)k);
        e = __fdiv_rn(e, div);
        const float arg = __fmul_rn(p.scale, __fmul_rn(p.t[b], (float)exp((double)e)));
        float *row = p.dst + (long long)b * p.dim;
        float *cr = p.flip_sin_to_cos ? row : row + half;
        float *sr = p.flip_sin_to_cos ? row + half : row;
        cr[k] = (float)cos((double)arg);
        sr[k] = (float)sin((double)arg);
        if (k == 0 && p.dim % 2 != 0)
            row[p.dim - 1] = 0.0f;
    }
}

dim3 d3(const unsigned v[3]) { return dim3(v[0], v[1], v[2]); }

wf_status_t launched() { return cudaGetLastError() == cudaSuccess ? WF_OK : WF_E_INTERNAL; }

} /* namespace */

wf_status_t wf_cuda_bias_act_launch(const void *src, wf_dtype_t src_dt, int64_t ld_src,
                                    void *dst, wf_dtype_t dst_dt, int64_t ld_dst, int64_t rows,
                                    int64_t n, const float *bias, wf_act_t act,
                                    cudaStream_t stream)
{
    if (rows == 0 || n == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rows_geometry(rows, n, g, b);
    bias_act_kernel<<<d3(g), d3(b), 0, stream>>>(src, (int)src_dt, (long long)ld_src, dst,
                                                 (int)dst_dt, (long long)ld_dst, (int)rows,
                                                 (int)n, bias, (int)act);
    return launched();
}

wf_status_t wf_cuda_act_launch(float *dst, const float *src, int64_t n, wf_act_t act,
                               const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (n == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)n, lim, g, b);
    act_kernel<<<d3(g), d3(b), 0, stream>>>(dst, src, (size_t)n, (int)act);
    return launched();
}

wf_status_t wf_cuda_axpy_launch(float *y, float alpha, const float *x, int64_t n,
                                const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (n == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)n, lim, g, b);
    axpy_kernel<<<d3(g), d3(b), 0, stream>>>(y, alpha, x, (size_t)n);
    return launched();
}

wf_status_t wf_cuda_change_sums_launch(const float *a, const float *b, int64_t n,
                                       double *sums, const wf_cuda_limits_t *lim,
                                       cudaStream_t stream)
{
    (void)lim;
    if (cudaMemsetAsync(sums, 0, 2 * sizeof(double), stream) != cudaSuccess)
        return launched();
    if (n == 0)
        return WF_OK;
    /* 256 threads a block (the shared arrays' size), at most 1024 blocks */
    size_t blocks = ((size_t)n + 255) / 256;
    change_sums_kernel<<<blocks < 1024 ? (unsigned)blocks : 1024u, 256, 0, stream>>>(
        a, b, (size_t)n, sums);
    return launched();
}

wf_status_t wf_cuda_add_launch(float *dst, const float *src, int64_t n,
                               const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (n == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)n, lim, g, b);
    add_kernel<<<d3(g), d3(b), 0, stream>>>(dst, src, (size_t)n);
    return launched();
}

wf_status_t wf_cuda_round_rows_launch(void *xw, wf_dtype_t dt, const float *x, int64_t rows,
                                      int64_t in, int64_t ldx, cudaStream_t stream)
{
    if (rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rows_geometry(rows, in, g, b);
    if (dt == WF_DTYPE_BF16)
        round_rows_kernel<<<d3(g), d3(b), 0, stream>>>(static_cast<__nv_bfloat16 *>(xw), x,
                                                       (int)rows, (int)in, (long long)ldx);
    else
        round_rows_kernel<<<d3(g), d3(b), 0, stream>>>(static_cast<__half *>(xw), x, (int)rows,
                                                       (int)in, (long long)ldx);
    return launched();
}

wf_status_t wf_cuda_modln_launch(const wf_modln_params_t *p, const wf_cuda_limits_t *lim,
                                 cudaStream_t stream)
{
    const int64_t rows = p->nbatch * p->per;
    if (rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rowblock_geometry(rows, lim, g, b);
    modln_kernel<<<d3(g), d3(b), 0, stream>>>(*p, (int)rows);
    return launched();
}

wf_status_t wf_cuda_gate_residual_launch(float *S, int64_t ld_s, const float *y, int64_t ld_y,
                                         const float *gate, int64_t ld_gate, int64_t nbatch,
                                         int64_t per, int64_t C, cudaStream_t stream)
{
    const int64_t rows = nbatch * per;
    if (rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    const bool vec = C % 4 == 0 && ld_s % 4 == 0 && ld_y % 4 == 0 && ld_gate % 4 == 0 &&
                     (reinterpret_cast<uintptr_t>(S) | reinterpret_cast<uintptr_t>(y) |
                      reinterpret_cast<uintptr_t>(gate)) % 16 == 0;
    if (vec) {
        wf_cuda_rows_geometry(rows, C / 4, g, b);
        gate_residual_kernel<float4><<<d3(g), d3(b), 0, stream>>>(
            reinterpret_cast<float4 *>(S), (long long)(ld_s / 4),
            reinterpret_cast<const float4 *>(y), (long long)(ld_y / 4),
            reinterpret_cast<const float4 *>(gate), (long long)(ld_gate / 4), (int)rows,
            (int)per, (int)(C / 4));
        return launched();
    }
    wf_cuda_rows_geometry(rows, C, g, b);
    gate_residual_kernel<float><<<d3(g), d3(b), 0, stream>>>(S, (long long)ld_s, y,
                                                             (long long)ld_y, gate,
                                                             (long long)ld_gate, (int)rows,
                                                             (int)per, (int)C);
    return launched();
}

wf_status_t wf_cuda_head_norm_rope_launch(const wf_headrope_params_t *p,
                                          const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    const int64_t items = p->nbatch * p->per * p->H;
    if (items == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_warp_geometry(items, lim, g, b);
    head_norm_rope_kernel<<<d3(g), d3(b), 0, stream>>>(*p, (int)items);
    return launched();
}

wf_status_t wf_cuda_rope_table_launch(const float *ids, int64_t L, uint32_t n_axes,
                                      const double *freq, const uint8_t *axis, int64_t D,
                                      float *cs, float *sn, const wf_cuda_limits_t *lim,
                                      cudaStream_t stream)
{
    if (L == 0)
        return WF_OK;
    rope_freqs f;
    for (int64_t i = 0; i < D / 2; i++) {
        f.freq[i] = freq[i];
        f.axis[i] = axis[i];
    }
    for (int64_t i = D / 2; i < WF_CUDA_ROPE_MAX_PAIRS; i++) {
        f.freq[i] = 0.0;
        f.axis[i] = 0;
    }
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)(L * (D / 2)), lim, g, b);
    rope_table_kernel<<<d3(g), d3(b), 0, stream>>>(f, ids, (int)L, (int)n_axes, (int)D, cs, sn);
    return launched();
}

wf_status_t wf_cuda_timestep_proj_launch(const float *t, int64_t B, int64_t dim,
                                         wf_dtype_t round_dtype, float *dst,
                                         const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (B == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)(B * (dim / 2)), lim, g, b);
    timestep_proj_kernel<<<d3(g), d3(b), 0, stream>>>(t, (int)B, (int)(dim / 2),
                                                      (int)round_dtype, dst);
    return launched();
}

wf_status_t wf_cuda_rms_sumsq_launch(const float *src, int64_t rows, int64_t n,
                                     int64_t ld_src, float *sumsq, const wf_cuda_limits_t *lim,
                                     cudaStream_t stream)
{
    if (rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rowblock_geometry(rows, lim, g, b);
    rms_sumsq_kernel<<<d3(g), d3(b), 0, stream>>>(src, (int)rows, (int)n, (long long)ld_src,
                                                  sumsq);
    return launched();
}

wf_status_t wf_cuda_rms_norm_launch(const wf_rmsnorm_params_t *p, const wf_cuda_limits_t *lim,
                                    cudaStream_t stream)
{
    if (p->rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rowblock_geometry(p->rows, lim, g, b);
    rms_norm_kernel<<<d3(g), d3(b), 0, stream>>>(*p);
    return launched();
}

wf_status_t wf_cuda_layer_norm_launch(const wf_layernorm_params_t *p,
                                      const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (p->rows == 0)
        return WF_OK;
    unsigned g[3], b[3];
    wf_cuda_rowblock_geometry(p->rows, lim, g, b);
    layer_norm_kernel<<<d3(g), d3(b), 0, stream>>>(*p);
    return launched();
}

wf_status_t wf_cuda_rope_grid_launch(const wf_rope_grid_params_t *p, const double *freq,
                                     const uint8_t *axis, const wf_cuda_limits_t *lim,
                                     cudaStream_t stream)
{
    if (p->L == 0)
        return WF_OK;
    rope_freqs f;
    for (int64_t i = 0; i < WF_CUDA_ROPE_MAX_PAIRS; i++) {
        f.freq[i] = i < p->D / 2 ? freq[i] : 0.0;
        f.axis[i] = i < p->D / 2 ? axis[i] : 0;
    }
    rope_grid_dims gd;
    long long st = 1;
    for (int a = WF_ROPE_MAX_AXES - 1; a >= 0; a--) {
        const bool used = a < (int)p->n_axes;
        gd.stride[a] = used ? st : 1;
        gd.grid[a] = used ? (long long)p->grid[a] : 1;
        st *= gd.grid[a];
    }
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)(p->L * (p->D / 2)), lim, g, b);
    rope_grid_kernel<<<d3(g), d3(b), 0, stream>>>(f, gd, (long long)p->row0, (int)p->L,
                                                  (int)p->D, p->cos, p->sin);
    return launched();
}

wf_status_t wf_cuda_timestep_embed_launch(const wf_timestep_params_t *p,
                                          const wf_cuda_limits_t *lim, cudaStream_t stream)
{
    if (p->B == 0)
        return WF_OK;
    const int half = (int)(p->dim / 2);
    /* the CPU's f32 constants, computed on the host the same way */
    const float nl = (float)-log((double)p->max_period);
    const float div = (float)((double)half - (double)p->downscale_freq_shift);
    unsigned g[3], b[3];
    wf_cuda_convert_geometry((size_t)(p->B * half), lim, g, b);
    timestep_embed_kernel<<<d3(g), d3(b), 0, stream>>>(*p, half, nl, div);
    return launched();
}
