/* cuda_plan.c — launch geometry, arena and admission of the CUDA backend
 * (see cuda_plan.h). Pure arithmetic: compiled as C, linked by the CUDA
 * backend and by the host unit test. */
#include "cuda_plan.h"

static int dtype_ok(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 || dt == WF_DTYPE_F16 || dt == WF_DTYPE_BF16;
}

static uint64_t dtype_bytes(wf_dtype_t dt) { return dt == WF_DTYPE_F32 ? 4u : 2u; }

/* Local K/V head of local query head h (backend.h, GQA). */
static int64_t kv_head_of(const wf_attn_params_t *p, int64_t h)
{
    if (p->gqa_group == 0)
        return h / (p->Hq / p->Hkv);
    return (p->q_head_base + h) / p->gqa_group - p->kv_head_base;
}

int wf_cuda_attn_params_ok(const wf_attn_params_t *p)
{
    if (!p)
        return 0;
    if (p->B < 1 || p->Sq < 1 || p->Skv < 1 || p->Hq < 1 || p->Hkv < 1)
        return 0;
    if (p->D != 64 && p->D != 128)
        return 0;
    if (p->h_begin < 0 || p->h_end < p->h_begin || p->h_end > p->Hq)
        return 0;
    /* Every index the kernel forms ((b * S + s) * H + h) * D fits int64;
     * keep each dim within int so the kernel's loop counters are ints. */
    if (p->B > INT32_MAX || p->Sq > INT32_MAX || p->Skv > INT32_MAX ||
        p->Hq > INT32_MAX || p->Hkv > INT32_MAX)
        return 0;
    if (p->gqa_group == 0) {
        if (p->Hq % p->Hkv != 0 || p->q_head_base != 0 || p->kv_head_base != 0)
            return 0;
    } else {
        if (p->gqa_group < 0 || p->q_head_base < 0 || p->kv_head_base < 0 ||
            p->q_head_base > INT32_MAX || p->kv_head_base > INT32_MAX ||
            p->gqa_group > INT32_MAX)
            return 0;
        if (p->h_end > p->h_begin &&
            (kv_head_of(p, p->h_begin) < 0 || kv_head_of(p, p->h_end - 1) >= p->Hkv))
            return 0;
    }
    if (!dtype_ok(p->q_dtype) || !dtype_ok(p->k_dtype) || !dtype_ok(p->v_dtype) ||
        !dtype_ok(p->out_dtype))
        return 0;
    /* Offsets take part in q_offset + i - kv_offset: keep them sane. */
    if (p->q_offset < 0 || p->kv_offset < 0 || p->q_offset > INT32_MAX ||
        p->kv_offset > INT32_MAX)
        return 0;
    return 1;
}

size_t wf_cuda_attn_smem_bytes(int d, int stages)
{
    size_t dpad = (size_t)d + WF_CUDA_PAD;
    return 2u * (WF_CUDA_BR * dpad + (size_t)stages * 2u * WF_CUDA_BC * dpad);
}

size_t wf_cuda_attn_wgmma_smem_bytes(int d)
{
    /* alignment slack, Q, the K and V stages, 13 mbarriers (128 bytes) */
    return 1024u + 2u * (size_t)d * (WF_CUDA_BR + WF_CUDA_WG_STAGES * 2u * WF_CUDA_WG_BC) + 128u;
}

wf_status_t wf_cuda_attn_geometry(const wf_attn_params_t *p,
                                  const wf_cuda_limits_t *lim,
                                  wf_cuda_attn_geom_t *ret_geom)
{
    if (!lim || !ret_geom || !wf_cuda_attn_params_ok(p))
        return WF_E_BAD_ARGUMENT;
    int64_t tiles = (p->Sq + WF_CUDA_BR - 1) / WF_CUDA_BR;
    int64_t heads = p->h_end - p->h_begin;
    if (tiles > lim->max_grid_x || heads > lim->max_grid_y || p->B > lim->max_grid_z)
        return WF_E_BAD_ARGUMENT;
    int stages = 2;
    if (wf_cuda_attn_smem_bytes((int)p->D, stages) > lim->smem_optin)
        stages = 1;
    if (wf_cuda_attn_smem_bytes((int)p->D, stages) > lim->smem_optin)
        return WF_E_BAD_ARGUMENT;
    wf_cuda_attn_geom_t g;
    g.grid[0] = (unsigned)tiles;
    g.grid[1] = (unsigned)heads;
    g.grid[2] = (unsigned)p->B;
    g.block[0] = 32u * WF_CUDA_WARPS;
    g.block[1] = 1;
    g.block[2] = 1;
    g.d = (int)p->D;
    g.dpad = (int)p->D + WF_CUDA_PAD;
    g.stages = stages;
    g.smem_bytes = wf_cuda_attn_smem_bytes(g.d, stages);
    g.compute_bf16 = p->q_dtype == WF_DTYPE_BF16;
    g.kernel = WF_CUDA_KERNEL_MMA;
    wf_dtype_t cdt = g.compute_bf16 ? WF_DTYPE_BF16 : WF_DTYPE_F16;
    if ((lim->wgmma == WF_CUDA_KERNEL_WGMMA || lim->wgmma == WF_CUDA_KERNEL_WGMMA_PIPE) &&
        p->q_dtype == cdt && p->k_dtype == cdt && p->v_dtype == cdt &&
        wf_cuda_attn_wgmma_smem_bytes(g.d) <= lim->smem_optin) {
        g.kernel = lim->wgmma;
        g.block[0] = WF_CUDA_WG_THREADS;
        g.stages = WF_CUDA_WG_STAGES;
        g.dpad = g.d;
        g.smem_bytes = wf_cuda_attn_wgmma_smem_bytes(g.d);
    }
    *ret_geom = g;
    return WF_OK;
}

size_t wf_cuda_attn_workspace(const wf_attn_params_t *p)
{
    (void)p;
    return 0;
}

void wf_cuda_merge_geometry(int64_t rows, unsigned ret_grid[3],
                            unsigned ret_block[3])
{
    /* 8 warps per block, one row each. */
    int64_t blocks = rows < 1 ? 1 : (rows + 7) / 8;
    ret_grid[0] = (unsigned)(blocks > INT32_MAX ? INT32_MAX : blocks);
    ret_grid[1] = ret_grid[2] = 1;
    ret_block[0] = 256;
    ret_block[1] = ret_block[2] = 1;
}

void wf_cuda_convert_geometry(size_t n, const wf_cuda_limits_t *lim,
                              unsigned ret_grid[3], unsigned ret_block[3])
{
    /* Grid-stride: enough blocks to fill the device a few times over. */
    size_t want = (n + 255) / 256;
    size_t cap = lim && lim->sm_count > 0 ? (size_t)lim->sm_count * 16u : 1024u;
    if (want > cap)
        want = cap;
    if (want < 1)
        want = 1;
    ret_grid[0] = (unsigned)want;
    ret_grid[1] = ret_grid[2] = 1;
    ret_block[0] = 256;
    ret_block[1] = ret_block[2] = 1;
}

/* ---- arena ------------------------------------------------------------------- */

wf_status_t wf_cuda_arena_init(wf_cuda_arena_t *a, uint64_t capacity,
                               uint64_t align)
{
    if (!a || align < 16 || (align & (align - 1)) != 0)
        return WF_E_BAD_ARGUMENT;
    a->capacity = capacity & ~(align - 1);
    a->used = 0;
    a->high_water = 0;
    a->align = align;
    a->count = 0;
    return WF_OK;
}

wf_status_t wf_cuda_arena_take(wf_cuda_arena_t *a, uint64_t bytes,
                               uint64_t *ret_offset)
{
    if (!a || !ret_offset)
        return WF_E_BAD_ARGUMENT;
    uint64_t free_bytes = a->capacity - a->used;
    if (bytes > free_bytes)
        return WF_E_NO_MEMORY;
    uint64_t rounded = (bytes + a->align - 1) & ~(a->align - 1);
    if (rounded > free_bytes) /* capacity is a multiple of align: never */
        return WF_E_NO_MEMORY;
    *ret_offset = a->used;
    a->used += rounded;
    if (bytes)
        a->count++;
    if (a->used > a->high_water)
        a->high_water = a->used;
    return WF_OK;
}

void wf_cuda_arena_reset(wf_cuda_arena_t *a)
{
    if (!a)
        return;
    a->used = 0;
    a->count = 0;
}

uint64_t wf_cuda_arena_free(const wf_cuda_arena_t *a)
{
    return a ? a->capacity - a->used : 0;
}

/* ---- admission --------------------------------------------------------------- */

/* a * b, UINT64_MAX on overflow (sticky). */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    if (a == UINT64_MAX || b == UINT64_MAX)
        return UINT64_MAX;
    if (a != 0 && b > UINT64_MAX / a)
        return UINT64_MAX;
    return a * b;
}

/* total + bytes rounded up to the alignment, saturating. */
static uint64_t add_region(uint64_t total, uint64_t bytes)
{
    if (total == UINT64_MAX || bytes > UINT64_MAX - WF_CUDA_ALIGN)
        return UINT64_MAX;
    bytes = (bytes + WF_CUDA_ALIGN - 1) & ~(uint64_t)(WF_CUDA_ALIGN - 1);
    if (bytes > UINT64_MAX - total)
        return UINT64_MAX;
    return total + bytes;
}

uint64_t wf_cuda_attn_job_bytes(const wf_attn_params_t *p)
{
    if (!wf_cuda_attn_params_ok(p))
        return UINT64_MAX;
    uint64_t B = (uint64_t)p->B, Sq = (uint64_t)p->Sq, Skv = (uint64_t)p->Skv,
             Hq = (uint64_t)p->Hq, Hkv = (uint64_t)p->Hkv, D = (uint64_t)p->D;
    uint64_t qn = mul_sat(mul_sat(mul_sat(B, Sq), Hq), D);
    uint64_t kvn = mul_sat(mul_sat(mul_sat(B, Skv), Hkv), D);
    uint64_t t = 0;
    t = add_region(t, mul_sat(qn, dtype_bytes(p->q_dtype)));
    t = add_region(t, mul_sat(kvn, dtype_bytes(p->k_dtype)));
    t = add_region(t, mul_sat(kvn, dtype_bytes(p->v_dtype)));
    t = add_region(t, mul_sat(qn, dtype_bytes(p->out_dtype)));
    t = add_region(t, mul_sat(mul_sat(mul_sat(B, Sq), Hq), 4u));
    t = add_region(t, (uint64_t)wf_cuda_attn_workspace(p));
    return t;
}

wf_status_t wf_cuda_admit(const wf_attn_params_t *p, uint64_t free_bytes,
                          uint64_t *ret_need)
{
    if (!wf_cuda_attn_params_ok(p))
        return WF_E_BAD_ARGUMENT;
    uint64_t need = wf_cuda_attn_job_bytes(p);
    if (ret_need)
        *ret_need = need;
    return need <= free_bytes ? WF_OK : WF_E_NO_MEMORY;
}
