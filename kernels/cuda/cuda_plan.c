/* cuda_plan.c — launch geometry, arena and admission of the CUDA backend
 * (see cuda_plan.h). Pure arithmetic: compiled as C, linked by the CUDA
 * backend and by the host unit test. */
#include "cuda_plan.h"

#include <math.h>
#include <string.h>

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

bool wf_cuda_attn_head_dim_ok(int64_t D) { return D == 64 || D == 128; }

int wf_cuda_attn_params_ok(const wf_attn_params_t *p)
{
    if (!p)
        return 0;
    if (p->B < 1 || p->Sq < 1 || p->Skv < 1 || p->Hq < 1 || p->Hkv < 1)
        return 0;
    if (!wf_cuda_attn_head_dim_ok(p->D))
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
    if (p->merge && !wf_cuda_attn_merge_ok(p))
        return 0;
    if (!wf_attn_ld_out_ok(p))
        return 0;
    return 1;
}

int wf_cuda_attn_merge_ok(const wf_attn_params_t *p)
{
    /* every kernel merges in its epilogue into an f32 accumulator (the
     * fp8 kernel too) */
    return p && p->out_dtype == WF_DTYPE_F32 && dtype_ok(p->merge_round) &&
           (!p->final_out || dtype_ok(p->final_dtype));
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

size_t wf_cuda_attn_ws_smem_bytes(int d, int stages)
{
    /* alignment slack, Q (also the output staging), the K and V rings,
     * the mbarriers */
    return 1024u + 2u * (size_t)d * (WF_CUDA_BR + (size_t)stages * 2u * WF_CUDA_WG_BC) +
           WF_CUDA_WS_BAR_BYTES;
}

int wf_cuda_attn_ws_stages(int d, size_t smem_optin)
{
    for (int st = WF_CUDA_WS_MAX_STAGES; st >= WF_CUDA_WS_MIN_STAGES; st--)
        if (wf_cuda_attn_ws_smem_bytes(d, st) <= smem_optin)
            return st;
    return 0;
}

static int regs_valid(int r) { return r >= 24 && r <= 256 && r % 8 == 0; }

int wf_cuda_ws_regs_ok(int entry, int producer, int consumer, int consumers)
{
    if (!regs_valid(entry) || !regs_valid(producer) || !regs_valid(consumer) ||
        consumers < 1 || consumers > 3 || producer > entry || entry > consumer)
        return 0;
    const long threads = 128L * (1 + consumers);
    if ((long)entry * threads > 65536L)
        return 0;
    if ((long)(entry - producer) * 128L < (long)(consumer - entry) * 128L * consumers)
        return 0;
    return 128L * producer + 128L * consumers * consumer <= 65536L;
}

static const struct {
    const char *name;
    unsigned features;
} ws_aliases[] = {
    {"ws-pipe", WF_CUDA_WS_PIPE},
    {"ws-pp", WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG},
    {"ws-pp-store", WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_TMA_STORE},
    {"ws-full", WF_CUDA_WS_ALL},
};
static const struct {
    const char *name;
    unsigned bit;
} ws_bits[] = {
    {"pipe", WF_CUDA_WS_PIPE},
    {"pp", WF_CUDA_WS_PINGPONG},
    {"store", WF_CUDA_WS_TMA_STORE},
    {"persist", WF_CUDA_WS_PERSISTENT},
    {"mc", WF_CUDA_WS_MULTICAST},
};

/* Length of the ws base name that sel starts with ("ws" or a cumulative
 * name) when what follows is nothing, "+..." or "-mc" (then nothing or
 * "+..."), with its features in *feat; 0 when none does. */
static size_t ws_base(const char *sel, unsigned *feat)
{
    size_t best = 0;
    for (size_t i = 0; i <= sizeof ws_aliases / sizeof ws_aliases[0]; i++) {
        const char *name = i < sizeof ws_aliases / sizeof ws_aliases[0] ? ws_aliases[i].name : "ws";
        const size_t n = strlen(name);
        if (strncmp(sel, name, n) != 0 || n <= best)
            continue;
        const char *r = sel + n;
        if (strncmp(r, "-mc", 3) == 0)
            r += 3;
        if (*r != 0 && *r != '+')
            continue;
        best = n;
        *feat = i < sizeof ws_aliases / sizeof ws_aliases[0] ? ws_aliases[i].features : 0u;
    }
    return best;
}

wf_status_t wf_cuda_attn_kernel_parse(const char *sel, int *ret_kernel,
                                      unsigned *ret_features)
{
    if (!ret_kernel || !ret_features)
        return WF_E_BAD_ARGUMENT;
    int kernel;
    unsigned feat = 0;
    if (!sel || !*sel || strcmp(sel, "wgmma") == 0) {
        kernel = WF_CUDA_KERNEL_WGMMA;
    } else if (strcmp(sel, "wgmma-pipe") == 0) {
        kernel = WF_CUDA_KERNEL_WGMMA_PIPE;
    } else if (strcmp(sel, "mma") == 0) {
        kernel = WF_CUDA_KERNEL_MMA;
    } else {
        kernel = WF_CUDA_KERNEL_WS;
        const size_t n = ws_base(sel, &feat);
        if (n == 0)
            return WF_E_BAD_ARGUMENT;
        const char *c = sel + n;
        if (strncmp(c, "-mc", 3) == 0) {
            feat |= WF_CUDA_WS_MULTICAST;
            c += 3;
        }
        while (*c) {
            if (*c != '+')
                return WF_E_BAD_ARGUMENT;
            c++;
            size_t len = strcspn(c, "+"), b;
            for (b = 0; b < sizeof ws_bits / sizeof ws_bits[0]; b++)
                if (strlen(ws_bits[b].name) == len && strncmp(c, ws_bits[b].name, len) == 0)
                    break;
            if (b == sizeof ws_bits / sizeof ws_bits[0] || (feat & ws_bits[b].bit))
                return WF_E_BAD_ARGUMENT; /* unknown or repeated */
            feat |= ws_bits[b].bit;
            c += len;
        }
    }
    *ret_kernel = kernel;
    *ret_features = feat;
    return WF_OK;
}

bool wf_cuda_attention_kernel_ok(const char *name)
{
    int k;
    unsigned f;
    return name && (strcmp(name, "auto") == 0 ||
                    (name[0] && wf_cuda_attn_kernel_parse(name, &k, &f) == WF_OK));
}

void wf_cuda_attn_kernel_name(int kernel, unsigned features, char *buf, size_t n)
{
    if (!buf || n == 0)
        return;
    buf[0] = 0;
    if (kernel != WF_CUDA_KERNEL_WS) {
        strncpy(buf, kernel == WF_CUDA_KERNEL_MMA ? "mma"
                     : kernel == WF_CUDA_KERNEL_WGMMA_PIPE ? "wgmma-pipe" : "wgmma", n - 1);
        buf[n - 1] = 0;
        return;
    }
    size_t len = 0;
    strncpy(buf, "ws", n - 1);
    buf[n - 1] = 0;
    len = strlen(buf);
    for (size_t b = 0; b < sizeof ws_bits / sizeof ws_bits[0]; b++) {
        if (!(features & ws_bits[b].bit))
            continue;
        size_t need = 1 + strlen(ws_bits[b].name);
        if (len + need >= n)
            break;
        buf[len] = '+';
        memcpy(buf + len + 1, ws_bits[b].name, need - 1);
        len += need;
        buf[len] = 0;
    }
}

wf_status_t wf_cuda_attn_geometry(const wf_attn_params_t *p,
                                  const wf_cuda_limits_t *lim,
                                  wf_cuda_attn_geom_t *ret_geom)
{
    if (!lim || !ret_geom || !wf_cuda_attn_params_ok(p))
        return WF_E_BAD_ARGUMENT;
    if (p->fp8)
        return WF_E_UNSUPPORTED; /* fp8 jobs: wf_cuda_attn_fp8_geometry */
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
    g.ws_features = 0;
    g.tiles = 0;
    wf_dtype_t cdt = g.compute_bf16 ? WF_DTYPE_BF16 : WF_DTYPE_F16;
    const int same_dt = p->q_dtype == cdt && p->k_dtype == cdt && p->v_dtype == cdt;
    /* The ws kernel (opt-in): one linear grid over every (tile, head,
     * batch); when its ring does not fit, or the tile count overflows
     * gridDim.x, the default wgmma kernel below. */
    const int64_t all_tiles = tiles * heads * p->B;
    const int ws_stages = wf_cuda_attn_ws_stages(g.d, lim->smem_optin);
    g.cluster[0] = g.cluster[1] = g.cluster[2] = 1;
    if (lim->wgmma == WF_CUDA_KERNEL_WS && same_dt && ws_stages > 0 &&
        all_tiles <= lim->max_grid_x && all_tiles <= INT32_MAX) {
        g.kernel = WF_CUDA_KERNEL_WS;
        g.ws_features = lim->ws_features & WF_CUDA_WS_KNOWN;
        g.tiles = all_tiles;
        int64_t blocks = all_tiles;
        /* +mc: pairs of query tiles of one head; dropped where a head has
         * one tile (nothing to share) or the grid of pairs is too long */
        const int64_t pairs = (tiles + 1) / 2 * heads * p->B;
        if ((g.ws_features & WF_CUDA_WS_MULTICAST) &&
            (tiles < 2 || 2 * pairs > lim->max_grid_x || 2 * pairs > INT32_MAX))
            g.ws_features &= ~(unsigned)WF_CUDA_WS_MULTICAST;
        if (g.ws_features & WF_CUDA_WS_MULTICAST) {
            g.tiles = 2 * pairs;
            int64_t clusters = pairs;
            if ((g.ws_features & WF_CUDA_WS_PERSISTENT) && lim->sm_count > 0) {
                const int64_t fit = lim->sm_count / 2 > 0 ? lim->sm_count / 2 : 1;
                if (clusters > fit)
                    clusters = fit;
            }
            blocks = WF_CUDA_WS_CLUSTER * clusters;
            g.cluster[0] = WF_CUDA_WS_CLUSTER;
        } else if ((g.ws_features & WF_CUDA_WS_PERSISTENT) && lim->sm_count > 0 &&
                   blocks > lim->sm_count) {
            blocks = lim->sm_count;
        }
        g.grid[0] = (unsigned)blocks;
        g.grid[1] = heads > 0 ? 1u : 0u; /* 0: an empty head range, nothing to launch */
        g.grid[2] = 1;
        g.block[0] = WF_CUDA_WS_THREADS;
        g.stages = ws_stages;
        g.dpad = g.d;
        g.smem_bytes = wf_cuda_attn_ws_smem_bytes(g.d, ws_stages);
        *ret_geom = g;
        return WF_OK;
    }
    const int wgmma = lim->wgmma == WF_CUDA_KERNEL_WS ? WF_CUDA_KERNEL_WGMMA : lim->wgmma;
    if ((wgmma == WF_CUDA_KERNEL_WGMMA || wgmma == WF_CUDA_KERNEL_WGMMA_PIPE) && same_dt &&
        wf_cuda_attn_wgmma_smem_bytes(g.d) <= lim->smem_optin) {
        g.kernel = wgmma;
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
    wf_cuda_fp8_ws_t L;
    if (!p || !p->fp8 || wf_cuda_attn_fp8_layout(p, &L) != WF_OK || (size_t)L.bytes != L.bytes)
        return 0;
    return (size_t)L.bytes;
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
    a->nres = 0;
    a->floor = a->capacity;
    a->resident = 0;
    return WF_OK;
}

wf_status_t wf_cuda_arena_take(wf_cuda_arena_t *a, uint64_t bytes,
                               uint64_t *ret_offset)
{
    if (!a || !ret_offset)
        return WF_E_BAD_ARGUMENT;
    uint64_t free_bytes = a->floor - a->used;
    if (bytes > free_bytes)
        return WF_E_NO_MEMORY;
    uint64_t rounded = (bytes + a->align - 1) & ~(a->align - 1);
    if (rounded > free_bytes) /* floor is a multiple of align: never */
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
    return a ? a->floor - a->used : 0;
}

wf_status_t wf_cuda_arena_res_alloc(wf_cuda_arena_t *a, uint64_t bytes,
                                    uint64_t *ret_offset)
{
    if (!a || !ret_offset)
        return WF_E_BAD_ARGUMENT;
    if (bytes == 0)
        bytes = 1;
    if (bytes > a->capacity || a->nres >= WF_CUDA_MAX_RESIDENT)
        return WF_E_NO_MEMORY;
    uint64_t rounded = (bytes + a->align - 1) & ~(a->align - 1);
    /* Holes from the top down: hole i lies below block i (i = nres: the
     * one below the capacity), above block i - 1 (or `used` for i = 0). */
    for (uint32_t i = a->nres + 1; i-- > 0;) {
        uint64_t hi = i == a->nres ? a->capacity : a->res[i].off;
        uint64_t lo = i == 0 ? a->used : a->res[i - 1].off + a->res[i - 1].bytes;
        if (hi < lo || hi - lo < rounded)
            continue;
        uint64_t off = hi - rounded;
        memmove(&a->res[i + 1], &a->res[i], (size_t)(a->nres - i) * sizeof a->res[0]);
        a->res[i].off = off;
        a->res[i].bytes = rounded;
        a->nres++;
        a->resident += rounded;
        a->floor = a->res[0].off;
        *ret_offset = off;
        return WF_OK;
    }
    return WF_E_NO_MEMORY;
}

wf_status_t wf_cuda_arena_res_free(wf_cuda_arena_t *a, uint64_t offset)
{
    if (!a)
        return WF_E_BAD_ARGUMENT;
    uint32_t lo = 0, hi = a->nres; /* binary search in the sorted blocks */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->res[mid].off < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == a->nres || a->res[lo].off != offset)
        return WF_E_BAD_ARGUMENT;
    a->resident -= a->res[lo].bytes;
    memmove(&a->res[lo], &a->res[lo + 1], (size_t)(a->nres - lo - 1) * sizeof a->res[0]);
    a->nres--;
    a->floor = a->nres ? a->res[0].off : a->capacity;
    return WF_OK;
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
    /* out: B Sq rows ld_out apart */
    t = add_region(t, mul_sat(mul_sat(mul_sat(B, Sq), (uint64_t)wf_attn_ld_out(p)),
                              dtype_bytes(p->out_dtype)));
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

/* ---- linear ------------------------------------------------------------------- */

int64_t wf_cuda_ptr_align(const void *ptr)
{
    uintptr_t v = (uintptr_t)ptr;
    int64_t al = 1;
    while (al < 256 && (v & (uintptr_t)al) == 0)
        al <<= 1;
    return al;
}

size_t wf_cuda_linear_workspace(const wf_linear_params_t *p)
{
    if (!wf_ops_linear_shape_ok(p) || p->w_dtype == WF_DTYPE_F32 ||
        p->x_dtype != WF_DTYPE_F32 || p->rows == 0)
        return 0;
    uint64_t b = (uint64_t)p->rows * (uint64_t)p->in * 2u;
    return (size_t)((b + WF_CUDA_ALIGN - 1) & ~(uint64_t)(WF_CUDA_ALIGN - 1));
}

wf_status_t wf_cuda_linear_plan(const wf_linear_params_t *p, const void *workspace,
                                int fuse_gelu, wf_cuda_linear_plan_t *ret)
{
    if (!ret || !wf_ops_linear_ok(p))
        return WF_E_BAD_ARGUMENT;
    wf_cuda_linear_plan_t pl;
    memset(&pl, 0, sizeof pl);
    if (p->rows == 0) {
        *ret = pl;
        return WF_OK;
    }
    pl.convert_x = p->w_dtype != WF_DTYPE_F32 && p->x_dtype == WF_DTYPE_F32;
    if (pl.convert_x) {
        pl.x_bytes = (uint64_t)p->rows * (uint64_t)p->in * 2u;
        if (!workspace || ((uintptr_t)workspace & (WF_CUDA_ALIGN - 1)) != 0)
            return WF_E_BAD_ARGUMENT;
    }
    int bias_fused = p->bias && wf_cuda_ptr_align(p->bias) >= 16;
    pl.post_bias = p->bias && !bias_fused;
    int gelu_fused = p->act == WF_ACT_GELU_TANH && fuse_gelu && !pl.post_bias;
    pl.post_act = p->act == WF_ACT_NONE || gelu_fused ? WF_ACT_NONE : (int)p->act;
    const size_t bsz = pl.convert_x || p->x_dtype != WF_DTYPE_F32 ? 2u : 4u;
    const unsigned char *bbase =
        pl.convert_x ? (const unsigned char *)workspace : (const unsigned char *)p->x;
    int64_t col = 0;
    pl.nwb = p->nwb;
    for (uint32_t i = 0; i < p->nwb; i++) {
        wf_cuda_gemm_t *g = &pl.g[i];
        g->a = p->wb[i];
        g->b_col = col;
        g->beta = i == 0 ? 0.0f : 1.0f;
        wf_cuda_gemm_key_t *k = &g->key;
        k->dtype = (int64_t)p->w_dtype;
        k->c_dtype = (int64_t)p->y_dtype;
        k->m = p->out;
        k->n = p->rows;
        k->k = p->wbw[i];
        k->lda = p->ldw;
        k->ldb = pl.convert_x ? p->in : p->ldx;
        k->ldc = p->ldy;
        k->epilogue = WF_CUDA_EPI_NONE;
        if (i + 1 == p->nwb)
            k->epilogue = (bias_fused ? WF_CUDA_EPI_BIAS : 0) |
                          (gelu_fused ? WF_CUDA_EPI_GELU : 0);
        k->align_a = wf_cuda_ptr_align(p->wb[i]);
        k->align_b = wf_cuda_ptr_align(bbase + (size_t)col * bsz);
        k->align_c = wf_cuda_ptr_align(p->y);
        col += p->wbw[i];
    }
    *ret = pl;
    return WF_OK;
}

/* ---- elementwise ops ------------------------------------------------------------ */

static unsigned clamp_u(int64_t v, int64_t hi)
{
    return (unsigned)(v < 1 ? 1 : v > hi ? hi : v);
}

void wf_cuda_rows_geometry(int64_t rows, int64_t n, unsigned ret_grid[3],
                           unsigned ret_block[3])
{
    ret_grid[0] = clamp_u((n + 255) / 256, 64);
    ret_grid[1] = clamp_u(rows, 65535);
    ret_grid[2] = 1;
    ret_block[0] = 256;
    ret_block[1] = ret_block[2] = 1;
}

void wf_cuda_rowblock_geometry(int64_t rows, const wf_cuda_limits_t *lim,
                               unsigned ret_grid[3], unsigned ret_block[3])
{
    int64_t cap = lim && lim->max_grid_x > 0 ? lim->max_grid_x : 65535;
    ret_grid[0] = clamp_u(rows, cap);
    ret_grid[1] = ret_grid[2] = 1;
    ret_block[0] = 256;
    ret_block[1] = ret_block[2] = 1;
}

void wf_cuda_warp_geometry(int64_t items, const wf_cuda_limits_t *lim,
                           unsigned ret_grid[3], unsigned ret_block[3])
{
    int64_t cap = lim && lim->max_grid_x > 0 ? lim->max_grid_x : 65535;
    ret_grid[0] = clamp_u((items + 7) / 8, cap);
    ret_grid[1] = ret_grid[2] = 1;
    ret_block[0] = 256;
    ret_block[1] = ret_block[2] = 1;
}

int wf_cuda_modln_ok(const wf_modln_params_t *p)
{
    /* the common checks, then the kernels' int indexing */
    return wf_ops_modln_ok(p) && p->nbatch <= INT32_MAX && p->per <= INT32_MAX &&
           p->C <= INT32_MAX && p->nbatch * p->per <= INT32_MAX;
}

int wf_cuda_headrope_ok(const wf_headrope_params_t *p)
{
    /* the common checks, then the kernels' int indexing */
    return wf_ops_headrope_ok(p) && p->nbatch <= INT32_MAX && p->per <= INT32_MAX &&
           p->H <= INT32_MAX && p->D <= INT32_MAX && p->L <= INT32_MAX &&
           p->row0 <= INT32_MAX && p->nbatch * p->per <= INT32_MAX &&
           p->nbatch * p->per * p->H <= INT32_MAX && p->H * p->D <= INT32_MAX;
}

wf_status_t wf_cuda_rope_freqs(const uint32_t *axes_dims, uint32_t n_axes,
                               double theta, int64_t D,
                               double ret_freq[WF_CUDA_ROPE_MAX_PAIRS],
                               uint8_t ret_axis[WF_CUDA_ROPE_MAX_PAIRS])
{
    /* the common checks, then the kernel argument's room */
    if (!wf_ops_rope_axes_ok(axes_dims, n_axes, theta, D) || n_axes > 255 ||
        D / 2 > WF_CUDA_ROPE_MAX_PAIRS)
        return WF_E_BAD_ARGUMENT;
    int64_t pr = 0;
    for (uint32_t a = 0; a < n_axes; a++) {
        int64_t da = axes_dims[a];
        for (int64_t j = 0; j < da / 2; j++, pr++) {
            ret_freq[pr] = 1.0 / pow(theta, (double)(2 * j) / (double)da);
            ret_axis[pr] = (uint8_t)a;
        }
    }
    return WF_OK;
}

int wf_cuda_copy_rows_ok(const void *dst, size_t ld_dst, const void *src,
                         size_t ld_src, int64_t rows, size_t row_bytes)
{
    return wf_ops_copy_rows_ok(dst, ld_dst, src, ld_src, rows, row_bytes);
}

/* ---- fp8 attention -------------------------------------------------------------- */

int wf_cuda_fp8_device_ok(int major, int minor, int built)
{
    return built != 0 && major == 9 && minor == 0;
}

int wf_cuda_fp8_key_slot(int k)
{
    return (k & 16) | (((k >> 1) & 3) << 2) | (((k >> 3) & 1) << 1) | (k & 1);
}

wf_status_t wf_cuda_attn_fp8_layout(const wf_attn_params_t *p, wf_cuda_fp8_ws_t *ret_ws)
{
    if (!ret_ws || !wf_cuda_attn_params_ok(p))
        return WF_E_BAD_ARGUMENT;
    wf_cuda_fp8_ws_t L;
    memset(&L, 0, sizeof L);
    L.skv_pad = (p->Skv + WF_CUDA_FP8_BC - 1) / WF_CUDA_FP8_BC * WF_CUDA_FP8_BC;
    if (p->h_end > p->h_begin) {
        L.kv_begin = kv_head_of(p, p->h_begin);
        L.kv_end = kv_head_of(p, p->h_end - 1) + 1;
    }
    uint64_t B = (uint64_t)p->B, Sq = (uint64_t)p->Sq, Skv = (uint64_t)p->Skv,
             Hq = (uint64_t)p->Hq, Hkv = (uint64_t)p->Hkv, D = (uint64_t)p->D;
    uint64_t t = 0;
    L.q8 = t;
    t = add_region(t, mul_sat(mul_sat(mul_sat(B, Sq), Hq), D));
    L.k8 = t;
    t = add_region(t, mul_sat(mul_sat(mul_sat(B, Skv), Hkv), D));
    L.v8t = t;
    t = add_region(t, mul_sat(mul_sat(mul_sat(B, Hkv), D), (uint64_t)L.skv_pad));
    L.amax_q = t;
    t = add_region(t, mul_sat(mul_sat(B, Hq), 4u));
    L.amax_k = t;
    t = add_region(t, mul_sat(mul_sat(B, Hkv), 4u));
    L.amax_v = t;
    t = add_region(t, mul_sat(mul_sat(B, Hkv), 4u));
    L.sq = t;
    t = add_region(t, mul_sat(mul_sat(B, Hq), 4u));
    L.sk = t;
    t = add_region(t, mul_sat(mul_sat(B, Hkv), 4u));
    L.sv = t;
    t = add_region(t, mul_sat(mul_sat(B, Hkv), 4u));
    if (t == UINT64_MAX)
        return WF_E_BAD_ARGUMENT;
    L.bytes = t;
    *ret_ws = L;
    return WF_OK;
}

size_t wf_cuda_attn_fp8_smem_bytes(int d)
{
    /* alignment slack, Q, the K and V stages (one byte per element), the
     * mbarriers */
    return 1024u + (size_t)d * (WF_CUDA_BR + WF_CUDA_FP8_STAGES * 2u * WF_CUDA_FP8_BC) +
           WF_CUDA_FP8_BAR_BYTES;
}

wf_status_t wf_cuda_attn_fp8_geometry(const wf_attn_params_t *p, const wf_cuda_limits_t *lim,
                                      int fp8_ok, wf_cuda_attn_geom_t *ret_geom)
{
    if (!lim || !ret_geom || !wf_cuda_attn_params_ok(p))
        return WF_E_BAD_ARGUMENT;
    if (!fp8_ok || wf_cuda_attn_fp8_smem_bytes((int)p->D) > lim->smem_optin)
        return WF_E_UNSUPPORTED;
    int64_t tiles = (p->Sq + WF_CUDA_BR - 1) / WF_CUDA_BR;
    int64_t heads = p->h_end - p->h_begin;
    if (tiles > lim->max_grid_x || heads > lim->max_grid_y || p->B > lim->max_grid_z)
        return WF_E_BAD_ARGUMENT;
    wf_cuda_attn_geom_t g;
    memset(&g, 0, sizeof g);
    g.grid[0] = (unsigned)tiles;
    g.grid[1] = (unsigned)heads;
    g.grid[2] = (unsigned)p->B;
    g.block[0] = WF_CUDA_FP8_THREADS;
    g.block[1] = 1;
    g.block[2] = 1;
    g.d = (int)p->D;
    g.dpad = g.d;
    g.stages = WF_CUDA_FP8_STAGES;
    g.smem_bytes = wf_cuda_attn_fp8_smem_bytes(g.d);
    g.compute_bf16 = 0;
    g.kernel = WF_CUDA_KERNEL_FP8;
    *ret_geom = g;
    return WF_OK;
}

void wf_cuda_fp8_quant_geometry(int64_t rows, int64_t heads, int64_t B, unsigned ret_grid[3],
                                unsigned ret_block[3])
{
    int64_t x = (rows + WF_CUDA_FP8_QUANT_ROWS - 1) / WF_CUDA_FP8_QUANT_ROWS;
    ret_grid[0] = (unsigned)(x < 0 ? 0 : x);
    ret_grid[1] = (unsigned)(heads < 0 ? 0 : heads);
    ret_grid[2] = (unsigned)(B < 0 ? 0 : B);
    ret_block[0] = WF_CUDA_FP8_QUANT_THREADS;
    ret_block[1] = ret_block[2] = 1;
}
