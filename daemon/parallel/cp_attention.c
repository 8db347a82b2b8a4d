/* cp_attention.c — context-parallel attention: sequence plan, workspace
 * layout, scatter / all-to-all / ring / gather over comm.h, log-sum-exp
 * merge of partial results. See cp_attention.h for the contract.
 *
 * Names used throughout (per rank, all lengths in tokens):
 *   P = R * U seq ranks; this rank is seq (r, u), index r * U + u
 *   Hs        heads of the slice (hq_end - hq_begin); G = Hq / Hkv
 *   head range of ulysses rank j: slice heads [h0_j, h0_j + nh_j) and the
 *             global K/V heads [kv0_j, kv0_j + nkv_j) they read;
 *             KVsum = sum_j nkv_j (K/V heads are replicated when two
 *             ranges need the same one)
 *   Lq_s, Lkv_s   tokens of this seq rank's shard
 *   Lq_r, Lkv_r   tokens of this ring rank's holding (the union of its
 *             ulysses group's shards, shard j at rows off_j of it)
 * Buffers (all in the caller's workspace):
 *   shard, "a2a order": for each b, for each ulysses rank j, the block
 *     (L_s, n_j, D): exactly the send side of the ulysses all-to-all, and
 *     plain (B, L_s, Hs, D) when U = 1. The root packs shards in this
 *     order straight from the full tensors, and unpacks outputs from it.
 *   holding: (B, L_r, nh_u, D) for q, out; K/V holding = K (B, L_r, nkv_u,
 *     D) followed by V (B, L_r, nkv_u, D), in their dtypes, so that one
 *     message moves a ring step's K and V.
 *   acc (B, Lq_r, nh_u, D) f32 and its lse (B, Lq_r, nh_u) f32: the merge
 *     accumulator; part (Lq_r, nh_u, D) f32 + (Lq_r, nh_u): one kernel call.
 *     With a kernel that merges (layout_t.fused: the backend's merge mode)
 *     there is no part: each call merges into acc and the last step writes
 *     the out holding; with R = 1 there is neither acc nor part: the
 *     kernel writes the out holding and the lse directly (ring_step).
 * The ulysses all-to-all runs once per batch index: a source's rows of one
 * batch are contiguous in the holding, the whole source block is not.
 * Local mode swaps the root's scatter and gather for local copies between
 * the caller's shard and the same buffers (local_view); nothing else
 * changes, so its results are bit-identical to the root mode's.
 *
 * Device mode (cp_attention.h): the same buffers on the device (the
 * counts of the collectives, `meta`, and the root's host staging `stage`
 * in the host workspace; `dstage` its device side); merge, fill and
 * conversion by the backend. Host mode needs a backend on host memory.
 *
 * Not here: job admission (the daemon), logging, allocation, device
 * streams.
 */
#include "cp_attention.h"
#include "base/szcheck.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "errf.h"
#include "proto.h"
#include "tensor.h"

/* Largest R * U accepted (the mesh's world limit). */
#define CP_MAX_RANKS 65536

/* ---- small arithmetic ---------------------------------------------------- */


/* tensor_split: part i of n items over `parts` (the first n % parts parts
 * get one more). */
static void split(int64_t n, int64_t parts, int64_t i, int64_t *ret_start,
                  int64_t *ret_len)
{
    int64_t q = n / parts, rem = n % parts;
    *ret_start = i * q + wf_min_i64(i, rem);
    *ret_len = q + (i < rem ? 1 : 0);
}

/* ---- validation ------------------------------------------------------------ */

/* a * b * c * d fits in int64 with room for 8-byte elements. */
static bool fits(int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t lim = INT64_MAX / 16;
    if (a > lim / b)
        return false;
    int64_t x = a * b;
    if (x > lim / c)
        return false;
    x *= c;
    return x <= lim / d;
}

wf_status_t wf_cp_attention_check(const wf_cp_job_t *job, int R, int U,
                                  char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (!job)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen, "no job");
    if (R < 1 || U < 1)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "`ring_degree` (%lld) and `ulysses_degree` (%lld) must be "
                              "greater than or equal to 1.", (long long)R, (long long)U);
    if ((int64_t)R * U > CP_MAX_RANKS)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "ring_degree x ulysses_degree = %lld exceeds %lld ranks",
                              (long long)R * U, (long long)CP_MAX_RANKS);
    if (job->B < 1 || job->Sq < 1 || job->Skv < 1 || job->Hq < 1 ||
        job->Hkv < 1 || job->D < 1)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "shapes must be positive (B, Sq, Skv, Hq, Hkv, D)");
    if (job->Sq > INT32_MAX || job->Skv > INT32_MAX || job->D > INT32_MAX ||
        !fits(job->B, job->Sq, job->Hq, job->D) ||
        !fits(job->B, job->Skv, job->Hkv, job->D) ||
        !fits(job->B, job->Skv, job->Hq + R * (int64_t)U, job->D))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "tensor sizes overflow (Sq %lld, Skv %lld)",
                              (long long)job->Sq, (long long)job->Skv);
    if (job->Hq % job->Hkv != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "Hkv (%lld) must divide Hq (%lld)", (long long)job->Hkv,
                              (long long)job->Hq);
    if (job->hq_begin < 0 || job->hq_end <= job->hq_begin || job->hq_end > job->Hq)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "head slice [%lld, %lld) is empty or outside the heads",
                        (long long)job->hq_begin, (long long)job->hq_end);
    if (job->local && (job->hq_begin != 0 || job->hq_end != job->Hq))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "local mode serves every head: slice [%lld, %lld) is not "
                        "[0, %lld)", (long long)job->hq_begin,
                        (long long)job->hq_end, (long long)job->Hq);
    if (!wf_dtype_size(job->q_dtype) || !wf_dtype_size(job->k_dtype) ||
        !wf_dtype_size(job->v_dtype) || !wf_dtype_size(job->out_dtype))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "dtypes must be f32, f16 or bf16");
    if (job->rotate_method != WF_CP_ROTATE_ALLGATHER &&
        job->rotate_method != WF_CP_ROTATE_ALLTOALL)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "unknown rotate_method %lld",
                              (long long)job->rotate_method);
    /* a scale beyond 2^64 overflows the f32 lse of ordinary inputs, and
     * two partial lse of +inf cannot be merged (proto.h) */
    if (!(job->scale == job->scale) || isinf(job->scale) ||
        !(fabs(job->scale) <= WF_ATTN_SCALE_MAX))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, errlen,
                              "scale must be finite, |scale| <= 2^64");

    /* Sequence: tensor_split sharding is what ring_anything asks for;
     * diffusers' ulysses_anything also covers sequence lengths (R = 1). */
    int64_t P = (int64_t)R * U;
    bool any_seq = job->ring_anything || (job->ulysses_anything && R == 1);
    /* the flag to name: diffusers' for the mesh (ulysses_anything without
     * ring), and ring_anything, weft's for any sequence sharding */
    const char *seq_flag = R == 1 ? "ulysses_anything (or ring_anything)"
                                  : "ring_anything";
    if (!any_seq) {
        if (job->Sq % P != 0)
            return wf_errf_status(WF_E_BAD_SHAPE, err, errlen,
                                  "Tensor size along dimension to be sharded must be "
                                  "divisible by mesh size (Sq = %lld, mesh size %lld); "
                                  "set %s to shard it unevenly",
                                  (long long)job->Sq, (long long)P, seq_flag);
        if (job->Skv % P != 0)
            return wf_errf_status(WF_E_BAD_SHAPE, err, errlen,
                                  "Tensor size along dimension to be sharded must be "
                                  "divisible by mesh size (Skv = %lld, mesh size %lld); "
                                  "set %s to shard it unevenly",
                                  (long long)job->Skv, (long long)P, seq_flag);
    }
    int64_t Hs = job->hq_end - job->hq_begin;
    if (!job->ulysses_anything && Hs % U != 0)
        return wf_errf_status(WF_E_BAD_SHAPE, err, errlen,
                              "Number of attention heads (%lld) must be divisible by "
                              "ulysses_degree (%lld); set ulysses_anything to split "
                              "them unevenly",
                              (long long)Hs, (long long)U);
    return WF_OK;
}

/* ---- plan -------------------------------------------------------------------- */

/* Segments of ring rank r's holding of a sequence of length S. */
static int ring_segs(const wf_cp_job_t *job, int R, int U, int r, int64_t S,
                     wf_cp_seg_t *segs)
{
    wf_cp_seg_t s[2];
    int n;
    if (job->load_balance && R > 1) {
        /* zigzag: chunks r and 2R-1-r of 2R */
        split(S, 2 * (int64_t)R, r, &s[0].start, &s[0].len);
        split(S, 2 * (int64_t)R, 2 * (int64_t)R - 1 - r, &s[1].start, &s[1].len);
        n = 2;
    } else {
        /* shards r*U .. r*U+U-1 of the tensor_split into R*U */
        int64_t P = (int64_t)R * U, len, end;
        split(S, P, (int64_t)r * U, &s[0].start, &len);
        if (r + 1 < R)
            split(S, P, (int64_t)(r + 1) * U, &end, &len);
        else
            end = S;
        s[0].len = end - s[0].start;
        n = 1;
    }
    /* drop empty pieces, merge neighbours, number the local rows */
    int m = 0;
    int64_t local = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].len == 0)
            continue;
        if (m > 0 && segs[m - 1].start + segs[m - 1].len == s[i].start) {
            segs[m - 1].len += s[i].len;
        } else {
            segs[m] = (wf_cp_seg_t){.start = s[i].start, .len = s[i].len, .local = local};
            m++;
        }
        local += s[i].len;
    }
    return m;
}

static int64_t segs_len(const wf_cp_seg_t *segs, int n)
{
    int64_t t = 0;
    for (int i = 0; i < n; i++)
        t += segs[i].len;
    return t;
}

/* Seq shard u of ring holding `hold`: local rows [a, a + len) of the
 * holding, as segments with local rows relative to the shard. */
static int shard_segs(const wf_cp_seg_t *hold, int nh, int64_t a, int64_t len,
                      wf_cp_seg_t *segs)
{
    int m = 0;
    for (int i = 0; i < nh; i++) {
        int64_t lo = wf_max_i64(a, hold[i].local);
        int64_t hi = wf_min_i64(a + len, hold[i].local + hold[i].len);
        if (hi <= lo)
            continue;
        segs[m] = (wf_cp_seg_t){.start = hold[i].start + (lo - hold[i].local),
                                .len = hi - lo, .local = lo - a};
        m++;
    }
    return m;
}

/* Heads of ulysses rank j. */
typedef struct heads {
    int64_t h0, nh;   /* slice-relative first query head, count */
    int64_t kv0, nkv; /* global first K/V head, count (0 when nh = 0) */
    int64_t kvpre;    /* sum of nkv of ulysses ranks before j */
} heads_t;

static heads_t heads_of(const wf_cp_job_t *job, int U, int j)
{
    int64_t Hs = job->hq_end - job->hq_begin, G = job->Hq / job->Hkv;
    heads_t h = {0, 0, 0, 0, 0};
    for (int i = 0; i <= j; i++) {
        int64_t h0, nh, kv0 = 0, nkv = 0;
        split(Hs, U, i, &h0, &nh);
        if (nh > 0) {
            int64_t a = job->hq_begin + h0, b = a + nh;
            kv0 = a / G;
            nkv = (b - 1) / G + 1 - kv0;
        }
        if (i < j)
            h.kvpre += nkv;
        else {
            h.h0 = h0;
            h.nh = nh;
            h.kv0 = kv0;
            h.nkv = nkv;
        }
    }
    return h;
}

static int64_t kv_sum(const wf_cp_job_t *job, int U)
{
    heads_t last = heads_of(job, U, U - 1);
    return last.kvpre + last.nkv;
}

/* Everything a rank needs to know about one seq rank's place. */
typedef struct geom {
    int R, U, P;            /* degrees, R * U */
    int r, u;               /* coordinates of the rank described */
    int64_t Hs, G, KVsum;   /* slice heads, GQA group, K/V heads over ulysses */
    heads_t hd;             /* heads of ulysses rank u */
    wf_cp_seg_t qhold[WF_CP_MAX_SEGS], kvhold[WF_CP_MAX_SEGS]; /* ring holding */
    int nqhold, nkvhold;    /* their counts */
    wf_cp_seg_t qsh[WF_CP_MAX_SEGS], kvsh[WF_CP_MAX_SEGS];     /* seq shard */
    int nqsh, nkvsh;        /* their counts */
    int64_t Lq_r, Lkv_r;    /* holding lengths */
    int64_t Lq_s, Lkv_s;    /* shard lengths */
    int64_t qoff, kvoff;    /* first row of the shard in the holding */
} geom_t;

static geom_t geom_of(const wf_cp_job_t *job, int R, int U, int r, int u)
{
    geom_t g;
    memset(&g, 0, sizeof g);
    g.R = R;
    g.U = U;
    g.P = R * U;
    g.r = r;
    g.u = u;
    g.Hs = job->hq_end - job->hq_begin;
    g.G = job->Hq / job->Hkv;
    g.KVsum = kv_sum(job, U);
    g.hd = heads_of(job, U, u);
    g.nqhold = ring_segs(job, R, U, r, job->Sq, g.qhold);
    g.nkvhold = ring_segs(job, R, U, r, job->Skv, g.kvhold);
    g.Lq_r = segs_len(g.qhold, g.nqhold);
    g.Lkv_r = segs_len(g.kvhold, g.nkvhold);
    split(g.Lq_r, U, u, &g.qoff, &g.Lq_s);
    split(g.Lkv_r, U, u, &g.kvoff, &g.Lkv_s);
    g.nqsh = shard_segs(g.qhold, g.nqhold, g.qoff, g.Lq_s, g.qsh);
    g.nkvsh = shard_segs(g.kvhold, g.nkvhold, g.kvoff, g.Lkv_s, g.kvsh);
    return g;
}

wf_status_t wf_cp_attention_segments(const wf_cp_job_t *job, int R, int U,
                                     int seq_index, bool ring_holding,
                                     bool keys, wf_cp_seg_t *ret_segs,
                                     int *ret_n)
{
    if (wf_cp_attention_check(job, R, U, NULL, 0) != WF_OK || !ret_segs ||
        !ret_n || seq_index < 0 || seq_index >= R * U)
        return WF_E_BAD_ARGUMENT;
    geom_t g = geom_of(job, R, U, seq_index / U, seq_index % U);
    const wf_cp_seg_t *s = ring_holding ? (keys ? g.kvhold : g.qhold)
                                        : (keys ? g.kvsh : g.qsh);
    int n = ring_holding ? (keys ? g.nkvhold : g.nqhold) : (keys ? g.nkvsh : g.nqsh);
    memcpy(ret_segs, s, (size_t)n * sizeof *s);
    *ret_n = n;
    return WF_OK;
}

/* ---- workspace layout ---------------------------------------------------------- */

/* Byte offsets of the regions of one rank's workspace (64-byte aligned). */
typedef struct layout {
    size_t meta;   /* 4 * max(R, U) size_t: counts / displacements */
    size_t qsh;    /* q shard, a2a order (U > 1) */
    size_t kvsh;   /* K shard then V shard, a2a order (U > 1) */
    size_t qh;     /* q holding (B, Lq_r, nh, D) q_dtype */
    size_t ring;   /* K/V holdings: all R (allgather) or 2 buffers (alltoall) */
    size_t acc;    /* (B, Lq_r, nh, D) f32 */
    size_t accl;   /* (B, Lq_r, nh) f32, also the lse holding */
    size_t part;   /* (Lq_r, nh, D) f32 (empty when fused or R = 1) */
    size_t partl;  /* (Lq_r, nh) f32 (empty when fused or R = 1) */
    size_t kws;    /* backend workspace */
    size_t oh;     /* out holding (B, Lq_r, nh, D) out_dtype */
    size_t osh;    /* out shard, a2a order (U > 1) */
    size_t oshl;   /* lse shard, a2a order (U > 1, return_lse) */
    size_t stage;  /* root: one message to or from another rank (host) */
    size_t dstage; /* device mode, root: the same message on the device */
    size_t total;  /* bytes (device mode: of the device workspace) */
    size_t htotal; /* device mode: bytes of the host workspace (meta, stage) */
    /* sizes used by the run */
    size_t ring_slot;   /* bytes of one alltoall buffer (largest holding) */
    size_t kws_bytes;   /* backend workspace bytes */
    bool fused;         /* the kernel merges into acc (merge mode, R > 1) */
} layout_t;

static size_t take(szc_t *c, size_t *off, size_t bytes)
{
    size_t start = *off;
    size_t rounded = szc_add(c, bytes, 63u) & ~(size_t)63u;
    *off = szc_add(c, start, rounded);
    return start;
}

/* Bytes of the K/V holding of ring rank with Lkv tokens, for nkv heads. */
static size_t hold_bytes(szc_t *c, const wf_cp_job_t *job, int64_t Lkv, int64_t nkv)
{
    return szc_mul5(c, job->B, Lkv, nkv, job->D, wf_dtype_size(job->k_dtype) + wf_dtype_size(job->v_dtype));
}

/* Facts about the whole group that every rank's layout uses. */
typedef struct group_facts {
    int64_t max_Lkv_r;   /* largest K/V holding (tokens) over ring ranks */
    int64_t max_kvseg;   /* largest K/V holding segment over ring ranks */
    size_t stage;        /* root's largest message to or from another rank */
} group_facts_t;

/* Message sizes of seq rank (r, u) exchanged with the root. */
static size_t max_msg(szc_t *c, const wf_cp_job_t *job, const geom_t *g)
{
    size_t m = szc_mul5(c, job->B, g->Lq_s, g->Hs, job->D, wf_dtype_size(job->q_dtype));
    size_t kb = szc_mul5(c, job->B, g->Lkv_s, g->KVsum, job->D, wf_dtype_size(job->k_dtype));
    size_t vb = szc_mul5(c, job->B, g->Lkv_s, g->KVsum, job->D, wf_dtype_size(job->v_dtype));
    size_t ob = szc_mul5(c, job->B, g->Lq_s, g->Hs, job->D, wf_dtype_size(job->out_dtype));
    size_t lb = job->return_lse ? szc_mul5(c, job->B, g->Lq_s, g->Hs, 1, 4) : 0;
    m = kb > m ? kb : m;
    m = vb > m ? vb : m;
    m = ob > m ? ob : m;
    return lb > m ? lb : m;
}

static group_facts_t facts_of(szc_t *c, const wf_cp_job_t *job, int R, int U)
{
    group_facts_t f = {0, 0, 0};
    for (int r = 0; r < R; r++) {
        wf_cp_seg_t s[WF_CP_MAX_SEGS];
        int n = ring_segs(job, R, U, r, job->Skv, s);
        f.max_Lkv_r = wf_max_i64(f.max_Lkv_r, segs_len(s, n));
        for (int i = 0; i < n; i++)
            f.max_kvseg = wf_max_i64(f.max_kvseg, s[i].len);
    }
    for (int i = 1; i < R * U; i++) {
        geom_t g = geom_of(job, R, U, i / U, i % U);
        size_t m = max_msg(c, job, &g);
        f.stage = m > f.stage ? m : f.stage;
    }
    return f;
}

/* Kernel params of one (q piece, kv piece) call of this rank, without the
 * pointers; also used to size the backend workspace. */
static wf_attn_params_t kernel_params(const wf_cp_job_t *job, const geom_t *g,
                                      int64_t sq, int64_t skv)
{
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = 1;
    p.Sq = sq;
    p.Skv = skv;
    p.Hq = g->hd.nh;
    p.Hkv = g->hd.nkv;
    p.D = job->D;
    p.h_begin = 0;
    p.h_end = g->hd.nh;
    p.scale = job->scale;
    p.causal = job->causal;
    p.q_dtype = job->q_dtype;
    p.k_dtype = job->k_dtype;
    p.v_dtype = job->v_dtype;
    p.out_dtype = WF_DTYPE_F32;
    p.gqa_group = g->G;
    p.q_head_base = job->hq_begin + g->hd.h0;
    p.kv_head_base = g->hd.kv0;
    p.fp8 = job->fp8;
    return p;
}

/* The rounding of the merged ring steps: convert_to_fp32 off keeps the
 * partial outputs in the input dtype, as diffusers keeps them; a single
 * step (R = 1) has nothing to merge and is not rounded. lse stays f32
 * either way, as the kernel (and diffusers' ops) return it. */
static wf_dtype_t step_round(const wf_cp_job_t *job, const geom_t *g)
{
    return (job->convert_to_fp32 || g->R == 1) ? WF_DTYPE_F32 : job->q_dtype;
}

/* Whether this rank's kernel merges each ring step into the accumulator
 * itself (backend.h merge mode): no partial buffers, no lse_merge, and
 * the last step writes the out holding. R > 1 only: a single step writes
 * the out holding directly. attention_merge_ok looks at no length or
 * pointer, so one question covers every call of the run. */
static bool merge_in_kernel(const wf_cp_job_t *job, const geom_t *g,
                            const wf_backend_ops_t *ops)
{
    if (g->R == 1 || g->hd.nh == 0 || !ops || !ops->attention_merge_ok)
        return false;
    wf_attn_params_t p = kernel_params(job, g, 1, 1);
    p.merge = true;
    p.merge_round = step_round(job, g);
    p.final_dtype = job->out_dtype;
    return ops->attention_merge_ok(&p);
}

static layout_t layout_of(szc_t *c, const wf_cp_job_t *job, const geom_t *g,
                          const group_facts_t *f, const wf_backend_ops_t *ops, bool dev)
{
    layout_t L;
    memset(&L, 0, sizeof L);
    size_t off = 0, hoff_dev = 0;
    /* host regions: in the one workspace, or (device mode) their own */
    size_t *hoff = dev ? &hoff_dev : &off;
    const int64_t B = job->B, D = job->D, nh = g->hd.nh, nkv = g->hd.nkv;
    /* the staging buffer serves the root's scatter and gather only */
    const bool root = g->r == 0 && g->u == 0 && !job->local;
    int maxd = g->R > g->U ? g->R : g->U;

    L.meta = take(c, hoff, szc_mul(c, 4u * (size_t)maxd, sizeof(size_t)));
    if (g->U > 1) {
        L.qsh = take(c, &off, szc_mul5(c, B, g->Lq_s, g->Hs, D, wf_dtype_size(job->q_dtype)));
        L.kvsh = take(c, &off, szc_mul5(c, B, g->Lkv_s, g->KVsum, D,
                                    wf_dtype_size(job->k_dtype) + wf_dtype_size(job->v_dtype)));
    }
    L.qh = take(c, &off, szc_mul5(c, B, g->Lq_r, nh, D, wf_dtype_size(job->q_dtype)));
    if (nh > 0) {
        L.ring_slot = hold_bytes(c, job, f->max_Lkv_r, nkv);
        size_t ring;
        if (g->R == 1)
            ring = hold_bytes(c, job, g->Lkv_r, nkv);
        else if (job->rotate_method == WF_CP_ROTATE_ALLGATHER)
            ring = hold_bytes(c, job, job->Skv, nkv); /* holdings sum to Skv */
        else
            ring = szc_add(c, L.ring_slot, L.ring_slot);
        L.ring = take(c, &off, ring);
    } else {
        L.ring = take(c, &off, 0);
    }
    /* R = 1: the kernel writes the out holding and the lse directly; a
     * kernel that merges (fused) needs no partial buffers */
    L.fused = merge_in_kernel(job, g, ops);
    const bool one = g->R == 1, parts = !one && !L.fused;
    L.acc = take(c, &off, one ? 0 : szc_mul5(c, B, g->Lq_r, nh, D, 4));
    L.accl = take(c, &off, szc_mul5(c, B, g->Lq_r, nh, 1, 4));
    L.part = take(c, &off, parts ? szc_mul5(c, 1, g->Lq_r, nh, D, 4) : 0);
    L.partl = take(c, &off, parts ? szc_mul5(c, 1, g->Lq_r, nh, 1, 4) : 0);
    if (nh > 0 && g->Lq_r > 0 && f->max_Lkv_r > 0 && ops && ops->attention_workspace) {
        /* The largest call: pieces are at most the own q holding and the
         * largest K/V holding (one segment each when causal). Backends'
         * workspaces grow with Sq and Skv. */
        int64_t skv = job->causal ? f->max_kvseg : f->max_Lkv_r;
        wf_attn_params_t p = kernel_params(job, g, g->Lq_r, skv);
        L.kws_bytes = ops->attention_workspace(&p);
        if (L.kws_bytes == SIZE_MAX)
            c->overflow = true;
    }
    L.kws = take(c, &off, L.kws_bytes);
    L.oh = take(c, &off, szc_mul5(c, B, g->Lq_r, nh, D, wf_dtype_size(job->out_dtype)));
    if (g->U > 1) {
        L.osh = take(c, &off, szc_mul5(c, B, g->Lq_s, g->Hs, D, wf_dtype_size(job->out_dtype)));
        L.oshl = take(c, &off, job->return_lse ? szc_mul5(c, B, g->Lq_s, g->Hs, 1, 4) : 0);
    }
    /* Device mode: the root's own shards pass through the host stage too
     * (packed there, then copied up). */
    size_t own = dev && root ? max_msg(c, job, g) : 0;
    L.stage = take(c, hoff, root ? (f->stage > own ? f->stage : own) : 0);
    L.dstage = dev ? take(c, &off, root ? f->stage : 0) : 0;
    L.total = off;
    L.htotal = dev ? hoff_dev : 0;
    return L;
}

size_t wf_cp_attention_workspace(const wf_cp_job_t *job, int R, int U,
                                 const wf_backend_ops_t *ops)
{
    if (wf_cp_attention_check(job, R, U, NULL, 0) != WF_OK)
        return 0;
    szc_t c = {false};
    group_facts_t f = facts_of(&c, job, R, U);
    size_t most = 0;
    for (int i = 0; i < R * U && !c.overflow; i++) {
        geom_t g = geom_of(job, R, U, i / U, i % U);
        layout_t L = layout_of(&c, job, &g, &f, ops, false);
        most = L.total > most ? L.total : most;
    }
    return c.overflow ? SIZE_MAX : most;
}

/* The backend entries device mode uses. */
static bool dev_ops_ok(const wf_backend_ops_t *o)
{
    return o && o->attention && o->dev_alloc && o->copy_h2d && o->copy_d2h &&
           o->synchronize && o->lse_merge && o->convert && o->fill_f32;
}

/* Device mode for this job: local mode also needs copy_rows (its shard
 * copies run on the device). */
static bool dev_job_ok(const wf_cp_job_t *job, const wf_backend_ops_t *o)
{
    return dev_ops_ok(o) && (!job->local || o->copy_rows);
}

wf_status_t wf_cp_attention_workspace_dev(const wf_cp_job_t *job, int R, int U,
                                          const wf_backend_ops_t *ops,
                                          size_t *ret_dev, size_t *ret_host)
{
    if (!ret_dev || !ret_host || !job || !dev_job_ok(job, ops) ||
        wf_cp_attention_check(job, R, U, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    szc_t c = {false};
    group_facts_t f = facts_of(&c, job, R, U);
    size_t dev = 0, host = 0;
    for (int i = 0; i < R * U && !c.overflow; i++) {
        geom_t g = geom_of(job, R, U, i / U, i % U);
        layout_t L = layout_of(&c, job, &g, &f, ops, true);
        dev = L.total > dev ? L.total : dev;
        host = L.htotal > host ? L.htotal : host;
    }
    if (c.overflow)
        return WF_E_NO_MEMORY;
    *ret_dev = dev;
    *ret_host = host;
    return WF_OK;
}

/* ---- root: pack inputs, unpack outputs -------------------------------------- */

/* Which tensor a shard message carries. */
typedef enum which { W_Q, W_K, W_V, W_OUT, W_LSE } which_t;

/* How shard_copy moves its runs: host memcpy, or (dev != NULL: local
 * mode on device buffers) one strided copy_rows of the backend per
 * segment; *st gets the first error of those. */
typedef struct copier {
    const wf_backend_ops_t *ops; /* NULL: host memcpy */
    wf_backend_ctx_t *ctx;       /* the backend's context */
    wf_status_t st;              /* first error */
} copier_t;

/* Shard of seq rank g in a2a order <-> full tensor. to_shard: copy from
 * the full tensor `full` into `shard`; else from `shard` into `full`.
 * Returns the shard's bytes. `cp` NULL: host memory. */
static size_t shard_copy_by(copier_t *cp, const wf_cp_job_t *job, const geom_t *g,
                            int U, which_t w, void *full, void *shard, bool to_shard)
{
    const int64_t D = w == W_LSE ? 1 : job->D;
    const bool kv = w == W_K || w == W_V;
    const int64_t S = kv ? job->Skv : job->Sq, H = kv ? job->Hkv : job->Hq;
    const wf_cp_seg_t *segs = kv ? g->kvsh : g->qsh;
    const int nseg = kv ? g->nkvsh : g->nqsh;
    size_t es = w == W_Q   ? wf_dtype_size(job->q_dtype)
                : w == W_K ? wf_dtype_size(job->k_dtype)
                : w == W_V ? wf_dtype_size(job->v_dtype)
                : w == W_OUT ? wf_dtype_size(job->out_dtype)
                             : 4u;
    unsigned char *sp = shard, *fullp = full;
    size_t done = 0;
    for (int64_t b = 0; b < job->B; b++)
        for (int j = 0; j < U; j++) {
            heads_t hd = heads_of(job, U, j);
            int64_t h0 = kv ? hd.kv0 : job->hq_begin + hd.h0;
            size_t run = (size_t)((kv ? hd.nkv : hd.nh) * D) * es;
            if (run == 0)
                continue;
            for (int s = 0; s < nseg; s++) {
                if (cp && cp->ops) {
                    /* the segment's rows: H * D elements apart in the full
                     * tensor, `run` bytes apart in the shard */
                    size_t at = (size_t)(((b * S + segs[s].start) * H + h0) * D) * es;
                    size_t ld = (size_t)(H * D) * es;
                    wf_status_t st =
                        to_shard ? cp->ops->copy_rows(cp->ctx, sp + done, run, fullp + at, ld,
                                                      segs[s].len, run)
                                 : cp->ops->copy_rows(cp->ctx, fullp + at, ld, sp + done, run,
                                                      segs[s].len, run);
                    if (cp->st == WF_OK)
                        cp->st = st;
                    done += (size_t)segs[s].len * run;
                    continue;
                }
                for (int64_t t = 0; t < segs[s].len; t++) {
                    size_t at = (size_t)(((b * S + segs[s].start + t) * H + h0) * D) * es;
                    if (to_shard)
                        memcpy(sp + done, fullp + at, run);
                    else
                        memcpy(fullp + at, sp + done, run);
                    done += run;
                }
            }
        }
    return done;
}

/* shard_copy_by on host memory. */
static size_t shard_copy(const wf_cp_job_t *job, const geom_t *g, int U, which_t w,
                         void *full, void *shard, bool to_shard)
{
    return shard_copy_by(NULL, job, g, U, w, full, shard, to_shard);
}

/* Local mode: this rank's own shard seen as the full tensors of a job of
 * length L_s with one segment at 0, so that shard_copy moves rows between
 * the caller's (B, L_s, H, D) buffers and the a2a-order buffers exactly as
 * it does for the root. */
static void local_view(const wf_cp_job_t *job, const geom_t *g,
                       wf_cp_job_t *ret_job, geom_t *ret_g)
{
    *ret_job = *job;
    ret_job->Sq = g->Lq_s;
    ret_job->Skv = g->Lkv_s;
    *ret_g = *g;
    ret_g->qsh[0] = (wf_cp_seg_t){.start = 0, .len = g->Lq_s, .local = 0};
    ret_g->nqsh = g->Lq_s > 0 ? 1 : 0;
    ret_g->kvsh[0] = (wf_cp_seg_t){.start = 0, .len = g->Lkv_s, .local = 0};
    ret_g->nkvsh = g->Lkv_s > 0 ? 1 : 0;
}

/* ---- run ----------------------------------------------------------------------- */

/* State of one run on one rank. */
typedef struct run {
    const wf_cp_job_t *job;      /* the job */
    const wf_cp_group_t *grp;    /* communicators */
    const wf_backend_ops_t *ops; /* backend */
    wf_backend_ctx_t *ctx;       /* backend context */
    geom_t g;                    /* this rank */
    layout_t L;                  /* its workspace */
    unsigned char *ws;           /* workspace base (device mode: device memory) */
    unsigned char *hws;          /* host regions' base (host mode: ws) */
    size_t *meta;                /* 4 * max(R, U) counts / displacements */
    bool root;                   /* seq index 0 */
    bool dev;                    /* device mode */
    bool stopped;                /* a step boundary stopped the run (every
                                    rank alike): nothing to abort */
    int next_boundary;           /* ring: the boundary after this step */
} run_t;

static unsigned char *at(const run_t *x, size_t region) { return x->ws + region; }
static unsigned char *hat(const run_t *x, size_t region) { return x->hws + region; }

/* K/V holding of ring rank rr (for this rank's heads) in allgather mode
 * lies at the sum of the earlier holdings. */
static size_t ring_displ(const run_t *x, int rr)
{
    szc_t c = {false};
    size_t d = 0;
    for (int i = 0; i < rr; i++) {
        geom_t gi = geom_of(x->job, x->g.R, x->g.U, i, x->g.u);
        d += hold_bytes(&c, x->job, gi.Lkv_r, x->g.hd.nkv);
    }
    return d;
}

/* Where this rank's own K/V holding lives before the ring starts. */
static unsigned char *own_hold(const run_t *x)
{
    if (x->g.R > 1 && x->job->rotate_method == WF_CP_ROTATE_ALLGATHER)
        return at(x, x->L.ring) + ring_displ(x, x->g.r);
    return at(x, x->L.ring);
}

/* Device mode: host -> device / device -> host, complete on return (the
 * host side is reused at once). */
static wf_status_t up(run_t *x, void *dev, const void *host, size_t n)
{
    if (n == 0)
        return WF_OK;
    wf_status_t st = x->ops->copy_h2d(x->ctx, dev, host, n);
    return st == WF_OK ? x->ops->synchronize(x->ctx) : st;
}
static wf_status_t down(run_t *x, void *host, const void *dev, size_t n)
{
    if (n == 0)
        return WF_OK;
    wf_status_t st = x->ops->copy_d2h(x->ctx, host, dev, n);
    return st == WF_OK ? x->ops->synchronize(x->ctx) : st;
}

/* Phase 1: the root sends every other seq rank its shards; every rank
 * ends with its q shard and K / V shards in their a2a-order buffers (the
 * q and K/V holdings themselves when U = 1). */
static wf_status_t scatter(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    unsigned char *qdst, *kdst, *vdst;
    if (g->U > 1) {
        qdst = at(x, x->L.qsh);
        kdst = at(x, x->L.kvsh);
        vdst = kdst + (size_t)(job->B * g->Lkv_s * g->KVsum * job->D) * wf_dtype_size(job->k_dtype);
    } else {
        qdst = at(x, x->L.qh);
        kdst = own_hold(x);
        vdst = kdst + (size_t)(job->B * g->Lkv_r * g->hd.nkv * job->D) * wf_dtype_size(job->k_dtype);
    }
    if (job->local) {
        wf_cp_job_t lj;
        geom_t lg;
        copier_t cp = {x->dev ? x->ops : NULL, x->ctx, WF_OK};
        local_view(job, g, &lj, &lg);
        shard_copy_by(&cp, &lj, &lg, g->U, W_Q, (void *)job->q, qdst, true);
        shard_copy_by(&cp, &lj, &lg, g->U, W_K, (void *)job->k, kdst, true);
        shard_copy_by(&cp, &lj, &lg, g->U, W_V, (void *)job->v, vdst, true);
        return cp.st;
    }
    if (x->root) {
        const void *src[3] = {job->q, job->k, job->v};
        for (int i = 1; i < g->P; i++) {
            geom_t gi = geom_of(job, g->R, g->U, i / g->U, i % g->U);
            for (int w = W_Q; w <= W_V; w++) {
                size_t n = shard_copy(job, &gi, g->U, (which_t)w, (void *)src[w],
                                      hat(x, x->L.stage), true);
                if (n == 0)
                    continue;
                wf_status_t st = WF_OK;
                unsigned char *msg = hat(x, x->L.stage);
                if (x->dev) {
                    msg = at(x, x->L.dstage);
                    st = up(x, msg, hat(x, x->L.stage), n);
                }
                if (st == WF_OK)
                    st = wf_comm_send(x->grp->seq, msg, n, i);
                if (st != WF_OK)
                    return st;
            }
        }
        unsigned char *dst[3] = {qdst, kdst, vdst};
        for (int w = W_Q; w <= W_V; w++) {
            if (!x->dev) {
                shard_copy(job, g, g->U, (which_t)w, (void *)src[w], dst[w], true);
                continue;
            }
            size_t n = shard_copy(job, g, g->U, (which_t)w, (void *)src[w],
                                  hat(x, x->L.stage), true);
            wf_status_t st = up(x, dst[w], hat(x, x->L.stage), n);
            if (st != WF_OK)
                return st;
        }
        return WF_OK;
    }
    unsigned char *dst[3] = {qdst, kdst, vdst};
    size_t bytes[3] = {
        (size_t)(job->B * g->Lq_s * g->Hs * job->D) * wf_dtype_size(job->q_dtype),
        (size_t)(job->B * g->Lkv_s * g->KVsum * job->D) * wf_dtype_size(job->k_dtype),
        (size_t)(job->B * g->Lkv_s * g->KVsum * job->D) * wf_dtype_size(job->v_dtype),
    };
    for (int w = 0; w < 3; w++) {
        if (bytes[w] == 0)
            continue;
        wf_status_t st = wf_comm_recv(x->grp->seq, dst[w], bytes[w], 0);
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

/* One ulysses all-to-all of one batch index between shards (a2a order,
 * per-rank heads n_j, `tot` heads in all, shard rows ls, head offset pre_j
 * of rank j) and holdings (rows of ulysses rank i at off_i, n_u heads).
 * to_heads: shard -> holding (sequence -> heads), else holding -> shard.
 * `kvheads` selects the K/V head ranges. row_bytes = D * element size. */
static wf_status_t a2a_batch(run_t *x, int64_t b, bool kvheads, bool to_heads,
                             unsigned char *shard, unsigned char *hold,
                             size_t row_bytes)
{
    const geom_t *g = &x->g;
    const int U = g->U;
    const int64_t ls = kvheads ? g->Lkv_s : g->Lq_s;
    const int64_t lr = kvheads ? g->Lkv_r : g->Lq_r;
    const int64_t tot = kvheads ? g->KVsum : g->Hs;
    const int64_t mine = kvheads ? g->hd.nkv : g->hd.nh;
    size_t *sc = x->meta, *sd = sc + U, *rc = sd + U, *rd = rc + U;
    for (int j = 0; j < U; j++) {
        heads_t hj = heads_of(x->job, U, j);
        int64_t nj = kvheads ? hj.nkv : hj.nh, prej = kvheads ? hj.kvpre : hj.h0;
        int64_t offj, lenj; /* rows of ulysses rank j in this ring holding */
        split(lr, U, j, &offj, &lenj);
        /* shard side: block (b, j) of (ls, n_j) rows */
        size_t sh_n = (size_t)(ls * nj) * row_bytes;
        size_t sh_d = (size_t)(b * ls * tot + ls * prej) * row_bytes;
        /* holding side: rows of rank j in batch b, my heads */
        size_t ho_n = (size_t)(lenj * mine) * row_bytes;
        size_t ho_d = (size_t)((b * lr + offj) * mine) * row_bytes;
        if (to_heads) {
            sc[j] = sh_n; sd[j] = sh_d; rc[j] = ho_n; rd[j] = ho_d;
        } else {
            sc[j] = ho_n; sd[j] = ho_d; rc[j] = sh_n; rd[j] = sh_d;
        }
    }
    if (to_heads)
        return wf_comm_alltoallv(x->grp->ulysses, shard, sc, sd, hold, rc, rd);
    return wf_comm_alltoallv(x->grp->ulysses, hold, sc, sd, shard, rc, rd);
}

/* Phase 2: sequence-sharded q, K, V -> full ring holding on my heads. */
static wf_status_t ulysses_in(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    unsigned char *kh = own_hold(x);
    unsigned char *vh = kh + (size_t)(job->B * g->Lkv_r * g->hd.nkv * job->D) *
                                 wf_dtype_size(job->k_dtype);
    unsigned char *ks = at(x, x->L.kvsh);
    unsigned char *vs = ks + (size_t)(job->B * g->Lkv_s * g->KVsum * job->D) *
                                 wf_dtype_size(job->k_dtype);
    size_t D = (size_t)job->D;
    for (int64_t b = 0; b < job->B; b++) {
        wf_status_t st = a2a_batch(x, b, false, true, at(x, x->L.qsh), at(x, x->L.qh),
                                   D * wf_dtype_size(job->q_dtype));
        if (st == WF_OK)
            st = a2a_batch(x, b, true, true, ks, kh, D * wf_dtype_size(job->k_dtype));
        if (st == WF_OK)
            st = a2a_batch(x, b, true, true, vs, vh, D * wf_dtype_size(job->v_dtype));
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

/* One kernel call, on the buffers where the backend computes (device
 * mode: device buffers; host mode: host buffers). */
static wf_status_t kernel_call(run_t *x, const wf_attn_params_t *p)
{
    return x->ops->attention(x->ctx, p, at(x, x->L.kws));
}

/* Step boundary i of the ring (see wf_cp_job_t.boundary). */
static wf_status_t boundary(run_t *x, int i)
{
    if (!x->job->boundary)
        return WF_OK;
    wf_status_t st = x->job->boundary(x->job->boundary_arg, i, false);
    x->stopped = st != WF_OK;
    x->next_boundary = i + 1;
    return st;
}

/* With boundaries: query rows per kernel call, about 2^28 multiply-adds
 * of q k^T (~0.1 s on a CPU core, far less on a GPU), so that a stop
 * wanted in a step skips the rest of its compute; a multiple of 128 rows
 * (the CPU kernel's query tile) and at least 512 (the CPU kernel converts
 * K / V once per call and head: 2 values per 4 x 512 flops of the call).
 * Without: the whole segment. */
static int64_t chunk_rows(const run_t *x, int64_t qlen, int64_t klen)
{
    if (!x->job->boundary)
        return qlen > 0 ? qlen : 1;
    int64_t per = klen * x->g.hd.nh * x->job->D;
    int64_t rows = per > 0 ? (INT64_C(1) << 28) / per : qlen;
    rows = rows / 128 * 128;
    return rows < 512 ? 512 : rows;
}

/* Whether the (q, k) piece has nothing to compute: empty, or fully
 * masked (the first key is after the last query). */
static bool piece_skipped(const wf_cp_job_t *job, const wf_cp_seg_t *q,
                          const wf_cp_seg_t *k)
{
    return q->len == 0 || k->len == 0 ||
           (job->causal && k->start > q->start + q->len - 1);
}

/* Rows [row0, row0 + n) of the f32 accumulator -> the out holding in
 * out_dtype (the conversion of ulysses_out, for rows the fused last step
 * does not write). */
static wf_status_t convert_rows(run_t *x, size_t row0, size_t n)
{
    const size_t D = (size_t)x->job->D;
    const float *src = (const float *)(const void *)at(x, x->L.acc) + row0 * D;
    unsigned char *dst = at(x, x->L.oh) + row0 * D * wf_dtype_size(x->job->out_dtype);
    if (x->dev)
        return x->ops->convert(x->ctx, dst, x->job->out_dtype, src, WF_DTYPE_F32, n * D);
    wf_convert_from_f32(dst, x->job->out_dtype, src, n * D);
    return WF_OK;
}

/* The kernel calls of one (q, k) piece of a ring step, one per batch
 * index: q rows of my holding against k rows of the K/V holding at kb /
 * vb of a ring rank holding Lkv_src tokens. `final_here` (fused mode):
 * the last call of the last step for these rows, which also writes their
 * out-holding rows (final_out). The three modes are ring_step's. */
static wf_status_t piece_calls(run_t *x, const wf_cp_seg_t *q, const wf_cp_seg_t *k,
                               const unsigned char *kb, const unsigned char *vb,
                               int64_t Lkv_src, bool final_here)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    const int64_t nh = g->hd.nh, nkv = g->hd.nkv, D = job->D;
    const size_t esq = wf_dtype_size(job->q_dtype), esk = wf_dtype_size(job->k_dtype),
                 esv = wf_dtype_size(job->v_dtype), eso = wf_dtype_size(job->out_dtype);
    const bool one = g->R == 1, fused = x->L.fused;
    const wf_dtype_t rdt = step_round(job, g);
    float *acc = (float *)(void *)at(x, x->L.acc);
    float *accl = (float *)(void *)at(x, x->L.accl);
    float *part = (float *)(void *)at(x, x->L.part);
    float *partl = (float *)(void *)at(x, x->L.partl);
    unsigned char *oh = at(x, x->L.oh);

    wf_attn_params_t p = kernel_params(job, g, q->len, k->len);
    p.q_offset = job->causal ? q->start : 0;
    p.kv_offset = job->causal ? k->start : 0;
    if (one) {
        p.out_dtype = job->out_dtype;
    } else if (fused) {
        p.merge = true;
        p.merge_round = rdt;
        p.final_dtype = job->out_dtype;
    } else {
        p.out = part;
        p.lse = partl;
    }
    for (int64_t b = 0; b < job->B; b++) {
        const size_t row0 = (size_t)((b * g->Lq_r + q->local) * nh);
        p.q = at(x, x->L.qh) + row0 * (size_t)D * esq;
        p.k = kb + (size_t)((b * Lkv_src + k->local) * nkv * D) * esk;
        p.v = vb + (size_t)((b * Lkv_src + k->local) * nkv * D) * esv;
        if (one) {
            p.out = oh + row0 * (size_t)D * eso;
            p.lse = accl + row0;
        } else if (fused) {
            p.out = acc + row0 * (size_t)D;
            p.lse = accl + row0;
            p.final_out = final_here ? oh + row0 * (size_t)D * eso : NULL;
        }
        wf_status_t st = kernel_call(x, &p);
        if (st != WF_OK)
            return st;
        if (one || fused)
            continue;
        if (x->dev) {
            st = x->ops->lse_merge(x->ctx, acc + row0 * (size_t)D, accl + row0, part, partl,
                                   q->len * nh, D, rdt);
            if (st != WF_OK)
                return st;
        } else {
            wf_lse_merge_rows(acc + row0 * (size_t)D, accl + row0, part, partl, q->len * nh,
                              D, rdt);
        }
    }
    return WF_OK;
}

/* Attention of my q holding against the K/V holding of ring rank src
 * (at hold), merged into acc; `last`: the last ring step. Three ways:
 *   R = 1: each call writes the out holding (out_dtype) and the lse
 *     directly: nothing to merge, nothing to convert.
 *   fused (layout_t.fused): each call merges into acc / accl in the
 *     kernel (merge mode); on the last step the last call that touches a
 *     query row also writes its out-holding row (final_out), and rows no
 *     call of the last step touches (fully masked or empty pieces) are
 *     converted here, so ulysses_out converts nothing.
 *   otherwise: each call writes part / partl, merged into acc / accl by
 *     lse_merge (device) or wf_lse_merge_rows (host). */
static wf_status_t ring_step(run_t *x, int src, const unsigned char *hold, bool last)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    geom_t gs = geom_of(job, g->R, g->U, src, g->u);
    const int64_t nh = g->hd.nh;
    const unsigned char *vb =
        hold + (size_t)(job->B * gs.Lkv_r * g->hd.nkv * job->D) * wf_dtype_size(job->k_dtype);
    wf_cp_seg_t qall = {0, g->Lq_r, 0}, kall = {0, gs.Lkv_r, 0};
    /* Without a mask positions do not matter: one call per batch. */
    const wf_cp_seg_t *qs = job->causal ? g->qhold : &qall;
    const wf_cp_seg_t *ks = job->causal ? gs.kvhold : &kall;
    int nq = job->causal ? g->nqhold : 1, nk = job->causal ? gs.nkvhold : 1;
    const bool final = x->L.fused && last;
    int64_t kmax = 0;
    for (int c = 0; c < nk; c++)
        kmax = wf_max_i64(kmax, ks[c].len);

    for (int a = 0; a < nq; a++)
        for (int64_t r0 = 0, rows = chunk_rows(x, qs[a].len, kmax); r0 < qs[a].len;
             r0 += rows) {
            /* rows [r0, r0 + rows) of query segment a (query rows are
             * independent: the same results as one call) */
            const wf_cp_seg_t q = {qs[a].start + r0, wf_min_i64(rows, qs[a].len - r0),
                                   qs[a].local + r0};
            /* the last piece that computes these rows (final_out there) */
            int clast = -1;
            for (int c = 0; c < nk; c++)
                if (!piece_skipped(job, &q, &ks[c]))
                    clast = c;
            for (int64_t b = 0; final && clast < 0 && b < job->B; b++) {
                wf_status_t st = convert_rows(x, (size_t)((b * g->Lq_r + q.local) * nh),
                                              (size_t)(q.len * nh));
                if (st != WF_OK)
                    return st;
            }
            for (int c = 0; c <= clast; c++) {
                if (job->boundary &&
                    job->boundary(job->boundary_arg, x->next_boundary, true) != WF_OK)
                    return WF_OK;   /* every rank stops at the next boundary:
                                       the rest of this step is not used */
                if (piece_skipped(job, &q, &ks[c]))
                    continue;
                wf_status_t st = piece_calls(x, &q, &ks[c], hold, vb, gs.Lkv_r,
                                             final && c == clast);
                if (st != WF_OK)
                    return st;
            }
        }
    return WF_OK;
}

static wf_status_t ring_steps(run_t *x);

/* Phase 3: ring attention over the ring group, into acc / accl. */
static wf_status_t ring(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    const int R = g->R;
    float *acc = (float *)(void *)at(x, x->L.acc);
    float *accl = (float *)(void *)at(x, x->L.accl);
    size_t rows = (size_t)(job->B * g->Lq_r * g->hd.nh);
    /* R = 1 writes the out holding directly: no accumulator (the lse is
     * filled all the same, for rows a stop left unwritten) */
    size_t nacc = R == 1 ? 0 : rows * (size_t)job->D;
    if (x->dev) {
        wf_status_t st = x->ops->fill_f32(x->ctx, acc, 0.0f, nacc);
        if (st == WF_OK)
            st = x->ops->fill_f32(x->ctx, accl, -INFINITY, rows);
        if (st != WF_OK)
            return st;
    } else {
        memset(acc, 0, nacc * sizeof(float));
        for (size_t i = 0; i < rows; i++)
            accl[i] = -INFINITY;
    }
    if (g->hd.nh == 0) {
        /* the whole ring group has no heads: no traffic, but the same
         * boundaries as every other rank */
        wf_status_t st = WF_OK;
        for (int i = 0; i <= R && st == WF_OK; i++)
            st = boundary(x, i);
        return st;
    }
    wf_status_t st = ring_steps(x);
    /* the boundary after the last step: a rank that skipped compute (a
     * stop decided ahead) stops here at the latest, as every rank */
    return st == WF_OK ? boundary(x, R) : st;
}

/* The R steps of ring(). */
static wf_status_t ring_steps(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    const int R = g->R, r = g->r;
    szc_t c = {false};

    if (R == 1) {
        wf_status_t st = boundary(x, 0);
        return st == WF_OK ? ring_step(x, 0, at(x, x->L.ring), true) : st;
    }

    if (job->rotate_method == WF_CP_ROTATE_ALLGATHER) {
        size_t *counts = x->meta, *displs = counts + R, d = 0;
        for (int i = 0; i < R; i++) {
            geom_t gi = geom_of(job, R, g->U, i, g->u);
            counts[i] = hold_bytes(&c, job, gi.Lkv_r, g->hd.nkv);
            displs[i] = d;
            d += counts[i];
        }
        unsigned char *base = at(x, x->L.ring);
        wf_status_t st = boundary(x, 0);
        if (st != WF_OK)
            return st;
        st = wf_comm_allgatherv(x->grp->ring, base + displs[r], counts[r],
                                            base, counts, displs);
        for (int i = 0; i < R && st == WF_OK; i++) {
            int src = (r + i) % R;
            if (i > 0 && (st = boundary(x, i)) != WF_OK)
                break;
            st = ring_step(x, src, base + displs[src], i == R - 1);
        }
        return st;
    }

    /* alltoall: step i computes on the holding of (r + i) mod R while the
     * next one arrives from r + 1 and the current one leaves for r - 1. */
    unsigned char *cur = at(x, x->L.ring), *nxt = cur + x->L.ring_slot;
    for (int i = 0; i < R; i++) {
        int src = (r + i) % R;
        wf_comm_req_t *rq = NULL, *sq = NULL;
        wf_status_t st = boundary(x, i);   /* nothing in flight here */
        if (st != WF_OK)
            return st;
        if (i + 1 < R) {
            geom_t gn = geom_of(job, R, g->U, (src + 1) % R, g->u);
            geom_t gc = geom_of(job, R, g->U, src, g->u);
            st = wf_comm_irecv(x->grp->ring, nxt, hold_bytes(&c, job, gn.Lkv_r, g->hd.nkv),
                               (r + 1) % R, &rq);
            if (st == WF_OK)
                st = wf_comm_isend(x->grp->ring, cur,
                                   hold_bytes(&c, job, gc.Lkv_r, g->hd.nkv),
                                   (r - 1 + R) % R, &sq);
        }
        if (st == WF_OK)
            st = ring_step(x, src, cur, i == R - 1);
        if (st != WF_OK && (rq || sq))
            wf_comm_abort(x->grp->ring); /* let the requests finish */
        wf_status_t s1 = wf_comm_wait(x->grp->ring, &rq);
        wf_status_t s2 = wf_comm_wait(x->grp->ring, &sq);
        if (st == WF_OK)
            st = s1 != WF_OK ? s1 : s2;
        if (st != WF_OK)
            return st;
        unsigned char *t = cur;
        cur = nxt;
        nxt = t;
    }
    return WF_OK;
}

/* Phase 4: acc -> out holding in out_dtype (unless the ring wrote it:
 * R = 1 or fused); heads -> sequence. */
static wf_status_t ulysses_out(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    const size_t n = (size_t)(job->B * g->Lq_r * g->hd.nh * job->D);
    if (g->R == 1 || x->L.fused) {
        /* written by the ring's kernels (ring_step) */
    } else if (x->dev) {
        wf_status_t st = x->ops->convert(x->ctx, at(x, x->L.oh), job->out_dtype,
                                         at(x, x->L.acc), WF_DTYPE_F32, n);
        if (st != WF_OK)
            return st;
    } else {
        wf_convert_from_f32(at(x, x->L.oh), job->out_dtype,
                            (const float *)(const void *)at(x, x->L.acc), n);
    }
    if (g->U == 1)
        return WF_OK;
    for (int64_t b = 0; b < job->B; b++) {
        wf_status_t st = a2a_batch(x, b, false, false, at(x, x->L.osh), at(x, x->L.oh),
                                   (size_t)job->D * wf_dtype_size(job->out_dtype));
        if (st == WF_OK && job->return_lse)
            st = a2a_batch(x, b, false, false, at(x, x->L.oshl), at(x, x->L.accl),
                           sizeof(float));
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

/* Phase 5: every seq rank's out / lse shard to the root, which writes
 * them into the full tensors. */
static wf_status_t gather(run_t *x)
{
    const wf_cp_job_t *job = x->job;
    const geom_t *g = &x->g;
    unsigned char *osh = at(x, g->U > 1 ? x->L.osh : x->L.oh);
    unsigned char *lsh = at(x, g->U > 1 ? x->L.oshl : x->L.accl);
    size_t ob = (size_t)(job->B * g->Lq_s * g->Hs * job->D) * wf_dtype_size(job->out_dtype);
    size_t lb = (size_t)(job->B * g->Lq_s * g->Hs) * sizeof(float);
    if (job->local) {
        wf_cp_job_t lj;
        geom_t lg;
        copier_t cp = {x->dev ? x->ops : NULL, x->ctx, WF_OK};
        local_view(job, g, &lj, &lg);
        shard_copy_by(&cp, &lj, &lg, g->U, W_OUT, job->out, osh, false);
        if (job->return_lse)
            shard_copy_by(&cp, &lj, &lg, g->U, W_LSE, job->lse, lsh, false);
        return cp.st;
    }
    if (!x->root) {
        wf_status_t st = ob ? wf_comm_send(x->grp->seq, osh, ob, 0) : WF_OK;
        if (st == WF_OK && job->return_lse && lb)
            st = wf_comm_send(x->grp->seq, lsh, lb, 0);
        return st;
    }
    /* The root's own shard: in place (host mode) or through the stage. */
    if (x->dev) {
        wf_status_t st = down(x, hat(x, x->L.stage), osh, ob);
        if (st != WF_OK)
            return st;
        shard_copy(job, g, g->U, W_OUT, job->out, hat(x, x->L.stage), false);
        if (job->return_lse) {
            st = down(x, hat(x, x->L.stage), lsh, lb);
            if (st != WF_OK)
                return st;
            shard_copy(job, g, g->U, W_LSE, job->lse, hat(x, x->L.stage), false);
        }
    } else {
        shard_copy(job, g, g->U, W_OUT, job->out, osh, false);
        if (job->return_lse)
            shard_copy(job, g, g->U, W_LSE, job->lse, lsh, false);
    }
    /* Others: received into the stage (device mode: its device side, then
     * copied down). */
    unsigned char *in = x->dev ? at(x, x->L.dstage) : hat(x, x->L.stage);
    for (int i = 1; i < g->P; i++) {
        geom_t gi = geom_of(job, g->R, g->U, i / g->U, i % g->U);
        size_t n = (size_t)(job->B * gi.Lq_s * gi.Hs * job->D) * wf_dtype_size(job->out_dtype);
        if (n == 0)
            continue;
        wf_status_t st = wf_comm_recv(x->grp->seq, in, n, i);
        if (st == WF_OK && x->dev)
            st = down(x, hat(x, x->L.stage), in, n);
        if (st != WF_OK)
            return st;
        shard_copy(job, &gi, g->U, W_OUT, job->out, hat(x, x->L.stage), false);
        if (!job->return_lse)
            continue;
        n = (size_t)(job->B * gi.Lq_s * gi.Hs) * sizeof(float);
        st = wf_comm_recv(x->grp->seq, in, n, i);
        if (st == WF_OK && x->dev)
            st = down(x, hat(x, x->L.stage), in, n);
        if (st != WF_OK)
            return st;
        shard_copy(job, &gi, g->U, W_LSE, job->lse, hat(x, x->L.stage), false);
    }
    return WF_OK;
}

static void abort_group(const wf_cp_group_t *grp)
{
    wf_comm_t *c = grp->seq ? grp->seq : grp->ring ? grp->ring : grp->ulysses;
    if (c)
        wf_comm_abort(c);
}

static wf_status_t run_common(const wf_cp_job_t *job, const wf_cp_group_t *group,
                              const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                              void *workspace, size_t bytes, void *host_ws,
                              size_t host_bytes, bool dev)
{
    /* Validation every rank computes alike: fails everywhere at once. */
    if (!group || wf_cp_attention_check(job, group->ring_degree,
                                        group->ulysses_degree, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (dev ? !dev_job_ok(job, ops) : (ops && ops->dev_alloc))
        return WF_E_BAD_ARGUMENT; /* device buffers need device mode */
    const int R = group->ring_degree, U = group->ulysses_degree;

    /* Validation of this rank's own arguments: a failure here leaves the
     * peers in a collective, so the world is aborted. */
    wf_status_t st = WF_E_BAD_ARGUMENT;
    bool ok = (R == 1 ? (!group->ring || wf_comm_size(group->ring) == 1)
                      : (group->ring && wf_comm_size(group->ring) == R)) &&
              (U == 1 ? (!group->ulysses || wf_comm_size(group->ulysses) == 1)
                      : (group->ulysses && wf_comm_size(group->ulysses) == U)) &&
              (R * U == 1 ? (!group->seq || wf_comm_size(group->seq) == 1)
                          : (group->seq && wf_comm_size(group->seq) == R * U));
    int r = ok && R > 1 ? wf_comm_rank(group->ring) : 0;
    int u = ok && U > 1 ? wf_comm_rank(group->ulysses) : 0;
    ok = ok && (R * U == 1 || wf_comm_rank(group->seq) == r * U + u);
    if (!ok || !ops || !ops->attention) {
        abort_group(group);
        return st;
    }

    run_t x;
    memset(&x, 0, sizeof x);
    x.job = job;
    x.grp = group;
    x.ops = ops;
    x.ctx = ctx;
    x.dev = dev;
    x.g = geom_of(job, R, U, r, u);
    x.root = r == 0 && u == 0;
    szc_t c = {false};
    group_facts_t f = facts_of(&c, job, R, U);
    x.L = layout_of(&c, job, &x.g, &f, ops, dev);
    x.ws = workspace;
    x.hws = dev ? host_ws : workspace;
    st = WF_E_BAD_ARGUMENT;
    if (c.overflow || !workspace || ((uintptr_t)workspace & 63u) != 0 ||
        bytes < x.L.total)
        goto fail;
    if (dev && (!host_ws || ((uintptr_t)host_ws & 63u) != 0 || host_bytes < x.L.htotal))
        goto fail;
    if ((x.root || job->local) && (!job->q || !job->k || !job->v || !job->out ||
                                   (job->return_lse && !job->lse)))
        goto fail;
    x.meta = (size_t *)(void *)hat(&x, x.L.meta);

    st = scatter(&x);
    if (st == WF_OK && U > 1)
        st = ulysses_in(&x);
    if (st == WF_OK)
        st = ring(&x);
    if (st == WF_OK)
        st = ulysses_out(&x);
    if (st == WF_OK)
        st = gather(&x);
    if (dev && !job->caller_syncs) {
        /* Everything queued is done before the caller releases the
         * workspace; a kernel error surfaces here. */
        wf_status_t ss = ops->synchronize(ctx);
        if (st == WF_OK)
            st = ss;
    }
    if (st != WF_OK)
        goto fail;
    return WF_OK;
fail:
    if (!x.stopped)     /* a boundary stopped every rank alike: no abort */
        abort_group(group);
    return st;
}

wf_status_t wf_cp_attention_run(const wf_cp_job_t *job,
                                const wf_cp_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes)
{
    return run_common(job, group, ops, ctx, workspace, bytes, NULL, 0, false);
}

wf_status_t wf_cp_attention_run_dev(const wf_cp_job_t *job,
                                    const wf_cp_group_t *group,
                                    const wf_backend_ops_t *ops,
                                    wf_backend_ctx_t *ctx, void *dev_ws,
                                    size_t dev_bytes, void *host_ws,
                                    size_t host_bytes)
{
    return run_common(job, group, ops, ctx, dev_ws, dev_bytes, host_ws, host_bytes, true);
}
