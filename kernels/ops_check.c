/* ops_check.c — the model ops' params checks shared by the backends
 * (see ops_check.h). Pure arithmetic on shapes and addresses. */
#include "ops_check.h"

#include <math.h>

static bool act_known(wf_act_t act)
{
    return act == WF_ACT_NONE || act == WF_ACT_GELU_TANH || act == WF_ACT_SILU ||
           act == WF_ACT_GELU;
}

static bool dtype_known(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 || dt == WF_DTYPE_BF16 || dt == WF_DTYPE_F16;
}

/* Bytes of an element of dtype dt. */
static size_t dt_bytes(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

/* A pointer to `count` elements: required unless there are none. */
static bool have(const void *ptr, int64_t count) { return ptr != NULL || count == 0; }

/* Bytes spanned by `rows` rows of `width` elements `ld` apart (elements of
 * `esize` bytes), or 0 when none / on overflow (*ok cleared). */
static uint64_t span_bytes(int64_t rows, int64_t width, int64_t ld, size_t esize, bool *ok)
{
    if (rows <= 0 || width <= 0)
        return 0;
    const uint64_t lim = (uint64_t)1 << 62;
    uint64_t r = (uint64_t)(rows - 1), l = (uint64_t)ld, w = (uint64_t)width;
    if (l != 0 && r > lim / l) {
        *ok = false;
        return 0;
    }
    uint64_t elems = r * l + w;
    if (elems > lim / esize) {
        *ok = false;
        return 0;
    }
    return elems * esize;
}

/* Whether [a, a + na) and [b, b + nb) (bytes) share a byte. */
static bool overlap(const void *a, uint64_t na, const void *b, uint64_t nb)
{
    if (na == 0 || nb == 0)
        return false;
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb ? pb - pa < na : pa - pb < nb;
}

static bool eps_ok(float eps) { return eps >= 0.0f && eps < INFINITY; }

/* nbatch * per without overflow (both >= 0). */
static bool rows_fit(int64_t nbatch, int64_t per)
{
    return nbatch == 0 || per <= INT64_MAX / nbatch;
}

/* ---- linear ---------------------------------------------------------------- */

bool wf_ops_linear_shape_ok(const wf_linear_params_t *p)
{
    if (!p || p->rows < 0 || p->in < 1 || p->out < 1)
        return false;
    if (p->rows > INT32_MAX || p->in > INT32_MAX || p->out > INT32_MAX ||
        p->ldx > INT32_MAX || p->ldw > INT32_MAX || p->ldy > INT32_MAX)
        return false; /* BLAS dimensions are int; CUDA's kernels index with int */
    if (p->ldx < p->in || p->ldy < p->out || !dtype_known(p->w_dtype) || !act_known(p->act))
        return false;
    if (p->nwb < 1 || p->nwb > WF_LINEAR_MAX_BLOCKS)
        return false;
    /* x in f32 or in the low-precision weight's own dtype; a low-precision
     * y takes the whole sum in one block (blocks accumulate in y) */
    if (p->x_dtype != WF_DTYPE_F32 &&
        (p->x_dtype != p->w_dtype || !dtype_known(p->x_dtype)))
        return false;
    if (!dtype_known(p->y_dtype) || (p->y_dtype != WF_DTYPE_F32 && p->nwb != 1))
        return false;
    int64_t sum = 0;
    for (uint32_t k = 0; k < p->nwb; k++) {
        if (p->wbw[k] < 1 || p->wbw[k] > p->in || p->ldw < p->wbw[k])
            return false;
        sum += p->wbw[k];
        if (sum > p->in)
            return false;
    }
    bool ok = true;
    span_bytes(p->rows, p->in, p->ldx, dt_bytes(p->x_dtype), &ok);
    span_bytes(p->rows, p->out, p->ldy, dt_bytes(p->y_dtype), &ok);
    span_bytes(p->out, p->in, p->ldw, p->w_dtype == WF_DTYPE_F32 ? 4u : 2u, &ok);
    return ok && sum == p->in;
}

bool wf_ops_linear_ok(const wf_linear_params_t *p)
{
    if (!wf_ops_linear_shape_ok(p))
        return false;
    if (p->rows == 0)
        return true; /* a no-op: nothing is looked at */
    for (uint32_t k = 0; k < p->nwb; k++)
        if (!p->wb[k])
            return false;
    if (!p->x || !p->y)
        return false;
    bool ok = true;
    uint64_t nx = span_bytes(p->rows, p->in, p->ldx, dt_bytes(p->x_dtype), &ok);
    uint64_t ny = span_bytes(p->rows, p->out, p->ldy, dt_bytes(p->y_dtype), &ok);
    uint64_t nb = p->bias ? (uint64_t)p->out * sizeof(float) : 0;
    return ok && !overlap(p->x, nx, p->y, ny) && !overlap(p->bias, nb, p->y, ny);
}

/* ---- bias_act, act, add -------------------------------------------------------- */

bool wf_ops_bias_act_ok(const void *y, wf_dtype_t y_dtype, int64_t rows, int64_t n,
                        int64_t ldy, const float *bias, wf_act_t act, const void *dst,
                        int64_t ld_dst, wf_dtype_t dst_dtype)
{
    if (rows < 0 || n < 0 || ldy < n || !act_known(act) || !dtype_known(dst_dtype) ||
        !dtype_known(y_dtype))
        return false;
    if (!dst && dst_dtype != y_dtype)
        return false;
    bool ok = true;
    uint64_t ny = span_bytes(rows, n, ldy, dt_bytes(y_dtype), &ok);
    uint64_t nbias = bias ? (uint64_t)n * 4u : 0;
    if (!ok || (ny != 0 && !y) || overlap(y, ny, bias, nbias))
        return false;
    if (!dst)
        return true;
    if (ld_dst < n)
        return false;
    uint64_t nd = span_bytes(rows, n, ld_dst, dt_bytes(dst_dtype), &ok);
    return ok && !overlap(dst, nd, y, ny) && !overlap(dst, nd, bias, nbias);
}

/* dst, src (n): present, and dst is src or apart from it. */
static bool pair_ok(const float *dst, const float *src, int64_t n)
{
    if (n < 0 || n > INT64_MAX / 8 || !have(dst, n) || !have(src, n))
        return false;
    uint64_t nb = (uint64_t)n * sizeof(float);
    return dst == src || !overlap(dst, nb, src, nb);
}

bool wf_ops_act_ok(const float *dst, const float *src, int64_t n, wf_act_t act)
{
    return act_known(act) && act != WF_ACT_NONE && pair_ok(dst, src, n);
}

bool wf_ops_add_ok(const float *dst, const float *src, int64_t n)
{
    return pair_ok(dst, src, n);
}

bool wf_ops_axpy_ok(const float *y, float alpha, const float *x, int64_t n)
{
    return isfinite(alpha) && pair_ok(y, x, n) && (n == 0 || y != x);
}

bool wf_ops_change_sums_ok(const float *a, const float *b, int64_t n, const double *scratch,
                           const double *ret)
{
    return pair_ok(a, b, n) && scratch && ((uintptr_t)scratch & 7u) == 0 && ret;
}

/* ---- modln, gate_residual, head_norm_rope -------------------------------------------- */

bool wf_ops_modln_ok(const wf_modln_params_t *p)
{
    if (!p || p->nbatch < 0 || p->per < 0 || p->C < 1 || p->ld_src < p->C ||
        p->ld_dst < p->C || p->ld_mod < p->C || !eps_ok(p->eps) || !rows_fit(p->nbatch, p->per))
        return false;
    if (!dtype_known(p->dst_dtype))
        return false;
    const int64_t rows = p->nbatch * p->per;
    bool ok = true;
    uint64_t ns = span_bytes(rows, p->C, p->ld_src, sizeof(float), &ok);
    uint64_t nd = span_bytes(rows, p->C, p->ld_dst, dt_bytes(p->dst_dtype), &ok);
    uint64_t nm = span_bytes(p->nbatch, p->C, p->ld_mod, sizeof(float), &ok);
    if (!ok)
        return false;
    if (rows == 0)
        return true;
    if (!p->src || !p->dst || !p->shift || !p->scale)
        return false;
    /* dst is src (same rows, f32) or apart from it; shift / scale apart
     * from dst */
    bool inplace = (const void *)p->dst == (const void *)p->src;
    if (inplace ? p->ld_dst != p->ld_src || p->dst_dtype != WF_DTYPE_F32
                : overlap(p->src, ns, p->dst, nd))
        return false;
    return !overlap(p->shift, nm, p->dst, nd) && !overlap(p->scale, nm, p->dst, nd);
}

bool wf_ops_gate_residual_ok(const float *S, int64_t ld_s, const float *y, int64_t ld_y,
                             const float *gate, int64_t ld_gate, int64_t nbatch,
                             int64_t per, int64_t C)
{
    if (nbatch < 0 || per < 0 || C < 1 || ld_s < C || ld_y < C || ld_gate < C ||
        !rows_fit(nbatch, per))
        return false;
    const int64_t rows = nbatch * per;
    bool ok = true;
    uint64_t ns = span_bytes(rows, C, ld_s, sizeof(float), &ok);
    uint64_t ny = span_bytes(rows, C, ld_y, sizeof(float), &ok);
    uint64_t ng = span_bytes(nbatch, C, ld_gate, sizeof(float), &ok);
    if (!ok)
        return false;
    if (rows == 0)
        return true;
    return S && y && gate && !overlap(S, ns, y, ny) && !overlap(S, ns, gate, ng);
}

bool wf_ops_headrope_ok(const wf_headrope_params_t *p)
{
    if (!p || p->nbatch < 0 || p->per < 0 || p->L < 0 || p->row0 < 0 || p->H < 1 ||
        p->D < 1 || p->row0 > p->L || p->per > p->L - p->row0 || !eps_ok(p->eps))
        return false;
    if (p->H > INT64_MAX / p->D)
        return false;
    const int64_t HD = p->H * p->D;
    bool rope = p->cos != NULL || p->sin != NULL;
    if (rope && (!p->cos || !p->sin || p->D % 2 != 0))
        return false;
    if (p->ld_src < HD || !rows_fit(p->nbatch, p->per) || !rows_fit(p->nbatch, p->L) ||
        !dtype_known(p->dst_dtype) || !dtype_known(p->src_dtype))
        return false;
    bool ok = true;
    const int64_t rows = p->nbatch * p->per;
    uint64_t ns = span_bytes(rows, HD, p->ld_src, dt_bytes(p->src_dtype), &ok);
    uint64_t nd = span_bytes(p->nbatch * p->L, HD, HD, dt_bytes(p->dst_dtype), &ok);
    return ok && have(p->src, rows) && have(p->dst, rows) && !overlap(p->src, ns, p->dst, nd);
}

/* ---- rope_table, timestep_proj, copy_rows ----------------------------------------------- */

bool wf_ops_rope_axes_ok(const uint32_t *axes_dims, uint32_t n_axes, double theta,
                         int64_t D)
{
    if (D < 2 || n_axes < 1 || !axes_dims || !(theta > 0.0) || isinf(theta))
        return false;
    int64_t sum = 0;
    for (uint32_t a = 0; a < n_axes; a++) {
        if (axes_dims[a] == 0 || axes_dims[a] % 2 != 0)
            return false;
        sum += axes_dims[a];
        if (sum > D)
            return false;
    }
    return sum == D;
}

bool wf_ops_rope_table_ok(const float *ids, int64_t L, const uint32_t *axes_dims,
                          uint32_t n_axes, double theta, int64_t D, const float *cos_t,
                          const float *sin_t)
{
    if (L < 0 || !wf_ops_rope_axes_ok(axes_dims, n_axes, theta, D) || !have(ids, L) ||
        !have(cos_t, L) || !have(sin_t, L))
        return false;
    bool ok = true;
    uint64_t nt = span_bytes(L, D, D, sizeof(float), &ok);
    return ok && !overlap(cos_t, nt, sin_t, nt);
}

bool wf_ops_timestep_ok(const float *t, int64_t B, int64_t dim, wf_dtype_t round_dtype,
                        const float *dst)
{
    if (B < 0 || dim < 2 || dim % 2 != 0 || dim > INT32_MAX || !have(t, B) ||
        !have(dst, B) || !dtype_known(round_dtype))
        return false;
    bool ok = true;
    uint64_t nd = span_bytes(B, dim, dim, sizeof(float), &ok);
    return ok && !overlap(t, (uint64_t)B * 4u, dst, nd);
}

bool wf_ops_copy_rows_ok(const void *dst, size_t ld_dst, const void *src, size_t ld_src,
                         int64_t rows, size_t row_bytes)
{
    const uint64_t lim = (uint64_t)1 << 62;
    if (rows < 0 || ld_dst < row_bytes || ld_src < row_bytes || ld_dst > lim ||
        ld_src > lim || row_bytes > lim)
        return false;
    int64_t n = row_bytes == 0 ? 0 : rows;
    bool ok = true;
    uint64_t nd = span_bytes(n, (int64_t)row_bytes, (int64_t)ld_dst, 1, &ok);
    uint64_t ns = span_bytes(n, (int64_t)row_bytes, (int64_t)ld_src, 1, &ok);
    return ok && have(dst, n) && have(src, n) && !overlap(dst, nd, src, ns);
}

/* ---- rms_sumsq, rms_norm, layer_norm -------------------------------------------------- */

bool wf_ops_rms_sumsq_ok(const float *src, int64_t rows, int64_t n, int64_t ld_src,
                         const float *sumsq)
{
    if (rows < 0 || n < 1 || ld_src < n)
        return false;
    bool ok = true;
    uint64_t ns = span_bytes(rows, n, ld_src, sizeof(float), &ok);
    uint64_t nq = span_bytes(rows, 1, 1, sizeof(float), &ok);
    return ok && have(src, rows) && have(sumsq, rows) && !overlap(src, ns, sumsq, nq);
}

/* A row norm's f32 src and dst (rows, n) of dst_dtype: dst is src with
 * the same ld (f32), or apart from it; *ret_nd the bytes of dst. */
static bool norm_rows_ok(const float *src, int64_t ld_src, const void *dst, int64_t ld_dst,
                         wf_dtype_t dst_dtype, int64_t rows, int64_t n, uint64_t *ret_nd)
{
    if (rows < 0 || n < 1 || ld_src < n || ld_dst < n || !dtype_known(dst_dtype))
        return false;
    bool ok = true;
    uint64_t ns = span_bytes(rows, n, ld_src, sizeof(float), &ok);
    *ret_nd = span_bytes(rows, n, ld_dst, dt_bytes(dst_dtype), &ok);
    if (!ok || !have(src, rows) || !have(dst, rows))
        return false;
    if ((const void *)src == dst && rows > 0)
        return ld_src == ld_dst && dst_dtype == WF_DTYPE_F32;
    return !overlap(src, ns, dst, *ret_nd);
}

bool wf_ops_rms_norm_ok(const wf_rmsnorm_params_t *p)
{
    uint64_t nd;
    if (!p || !eps_ok(p->eps) || !norm_rows_ok(p->src, p->ld_src, p->dst, p->ld_dst,
                                               p->dst_dtype, p->rows, p->n, &nd))
        return false;
    if (p->sumsq ? p->width < p->n : p->width != 0)
        return false;
    const uint64_t nw = p->weight ? (uint64_t)p->n * sizeof(float) : 0;
    const uint64_t nq = p->sumsq ? (uint64_t)p->rows * sizeof(float) : 0;
    return !overlap(p->weight, nw, p->dst, nd) && !overlap(p->sumsq, nq, p->dst, nd);
}

bool wf_ops_layer_norm_ok(const wf_layernorm_params_t *p)
{
    uint64_t nd;
    if (!p || !eps_ok(p->eps) || !norm_rows_ok(p->src, p->ld_src, p->dst, p->ld_dst,
                                               p->dst_dtype, p->rows, p->C, &nd))
        return false;
    const uint64_t nc = (uint64_t)p->C * sizeof(float);
    return !overlap(p->weight, p->weight ? nc : 0, p->dst, nd) &&
           !overlap(p->bias, p->bias ? nc : 0, p->dst, nd);
}

/* ---- rope_grid, timestep_embed --------------------------------------------------------- */

bool wf_ops_rope_grid_ok(const wf_rope_grid_params_t *p)
{
    if (!p || p->n_axes < 1 || p->n_axes > WF_ROPE_MAX_AXES || p->row0 < 0 || p->L < 0 ||
        !wf_ops_rope_axes_ok(p->axes_dims, p->n_axes, p->theta, p->D))
        return false;
    int64_t tokens = 1;
    for (uint32_t a = 0; a < p->n_axes; a++) {
        if (p->grid[a] < 1 || p->grid[a] > INT32_MAX / tokens)
            return false;
        tokens *= p->grid[a];
    }
    if (p->row0 > tokens || p->L > tokens - p->row0 || !have(p->cos, p->L) ||
        !have(p->sin, p->L))
        return false;
    bool ok = true;
    uint64_t nt = span_bytes(p->L, p->D, p->D, sizeof(float), &ok);
    return ok && !overlap(p->cos, nt, p->sin, nt);
}

bool wf_ops_timestep_embed_ok(const wf_timestep_params_t *p)
{
    if (!p || p->B < 0 || p->dim < 2 || p->dim > INT32_MAX || !have(p->t, p->B) ||
        !have(p->dst, p->B))
        return false;
    if (!(p->max_period > 0.0f) || isinf(p->max_period) || !isfinite(p->scale) ||
        !isfinite(p->downscale_freq_shift) ||
        !((double)p->downscale_freq_shift < (double)(p->dim / 2)))
        return false;
    bool ok = true;
    uint64_t nd = span_bytes(p->B, p->dim, p->dim, sizeof(float), &ok);
    return ok && !overlap(p->t, (uint64_t)p->B * 4u, p->dst, nd);
}
