/* flux_blocks.c — the FLUX forward's transformer blocks: the joint
 * attention (q / k / v projections as one fused linear where the plan
 * allows, each read in its strided slice; per-head RMSNorm and RoPE, the
 * attention over the seq group, back to stream order; flux_forward.c
 * "Stream order") and diffusers' FluxTransformerBlock /
 * FluxSingleTransformerBlock with their AdaLN-Zero modulation.
 *
 * Activation dtypes (geo_t.adt): every activation a GEMM or the
 * attention reads is written in adt by the op that makes it (modln the
 * normalised stream nx, head_norm_rope q / k / v, the attention its
 * output, the feed-forward's first linear or bias_act the GELU'd
 * hidden), and so are the projection group's outputs (q / k / v /
 * MLP-in before their norms and GELU, as diffusers' bf16 linears store
 * them; the norms widen them exactly); on a bf16 device that is bf16 and
 * the linears read it as it is. The residual stream S, the modulation
 * and the linears' outputs the gates read (lo) stay f32: S accumulates
 * 57 blocks of gated updates in f32 (diffusers keeps it in bf16), and
 * the norms take their statistics in f32.
 *
 * cat, a single block's proj_out input, is written in place where it can
 * be: at one tp rank with bf16 activations the MLP-in is a GEMM of its
 * own whose epilogue applies the GELU and stores cat's MLP columns, and
 * at one seq rank and one batch row the attention stores its output in
 * cat's attention columns (backend.h ld_out); elsewhere a pass moves
 * each part into cat.
 */
#include "flux_run.h"

#include <math.h>
#include <string.h>

/* Epsilon of every LayerNorm and RMSNorm of FLUX (diffusers' eps=1e-6). */
#define NORM_EPS 1e-6f

/* ---- elementwise pieces (the backend's ops) ---------------------------------- */

wf_dtype_t flux_act_dtype(const wf_flux_shard_t *s, bool dev)
{
    if (!dev || s->proj_out.w_dtype != WF_DTYPE_BF16)
        return WF_DTYPE_F32;
    for (int64_t b = 0; b < s->cfg.num_layers; b++) {
        const wf_flux_double_t *d = &s->dbl[b];
        const wf_linear_t *l[] = {&d->to_out, &d->to_add_out, &d->ff0, &d->ff2, &d->ffc0,
                                  &d->ffc2};
        for (size_t k = 0; k < sizeof l / sizeof l[0]; k++)
            if (l[k]->w_dtype != WF_DTYPE_BF16)
                return WF_DTYPE_F32;
        const wf_linear_group_t *g[] = {&d->qkv, &d->add_qkv};
        for (int j = 0; j < 2; j++)
            for (uint32_t k = 0; k < g[j]->n; k++)
                if ((g[j]->fused ? g[j]->all.w_dtype : g[j]->m[k].w_dtype) != WF_DTYPE_BF16)
                    return WF_DTYPE_F32;
    }
    for (int64_t b = 0; b < s->cfg.num_single_layers; b++) {
        const wf_flux_single_t *sb = &s->sgl[b];
        if (sb->proj_out.w_dtype != WF_DTYPE_BF16)
            return WF_DTYPE_F32;
        for (uint32_t k = 0; k < sb->qkvm.n; k++)
            if ((sb->qkvm.fused ? sb->qkvm.all.w_dtype : sb->qkvm.m[k].w_dtype) !=
                WF_DTYPE_BF16)
                return WF_DTYPE_F32;
    }
    return WF_DTYPE_BF16;
}

wf_status_t flux_ln_mod(run_t *x, const float *src, void *dst, int64_t nbatch, int64_t per,
                        const float *mod, int64_t ld_mod, int64_t shift_off,
                        int64_t scale_off)
{
    const int64_t C = x->g.C;
    wf_modln_params_t p = {
        .nbatch = nbatch, .per = per, .C = C,
        .src = src, .ld_src = C, .dst = dst, .ld_dst = C,
        .shift = mod + shift_off, .scale = mod + scale_off, .ld_mod = ld_mod,
        .eps = NORM_EPS, .dst_dtype = x->g.adt,
    };
    return x->ops->modln(x->ctx, &p);
}

/* S rows += gate[b] * lo rows, as ln_mod's batches (width C). */
static wf_status_t gate_add(run_t *x, float *S, const float *lo, int64_t nbatch, int64_t per,
                            const float *mod, int64_t ld_mod, int64_t gate_off)
{
    const int64_t C = x->g.C;
    return x->ops->gate_residual(x->ctx, S, C, lo, C, mod + gate_off, ld_mod, nbatch, per, C);
}

/* ---- attention ------------------------------------------------------------------------ */

/* The cp job of this forward's attention, Hl heads per tp rank, without
 * pointers. */
wf_cp_job_t flux_cp_job_of(const geo_t *g, int64_t Hl)
{
    /* uneven shards of the joint sequence (flux_tokens) and uneven heads
     * (tp * ulysses above the head count, or not dividing it): the
     * anything modes, tensor_split's sizes */
    wf_cp_job_t j = wf_fwd_self_attention(g->B, g->S, Hl, g->D, g->P, g->U, g->alltoall);
    j.fp8 = g->fp8;
    /* q, k, v and the output in the activation dtype; the ring's merge
     * stays f32 (convert_to_fp32) */
    j.q_dtype = j.k_dtype = j.v_dtype = j.out_dtype = g->adt;
    return j;
}

/* Kernel params of the single-rank attention (P = 1), without pointers. */
wf_attn_params_t flux_attn_params_of(const geo_t *g, int64_t Hl)
{
    wf_attn_params_t p = wf_fwd_attention_params(g->B, g->L, g->L, Hl, g->D);
    p.fp8 = g->fp8;
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = g->adt;
    return p;
}

/* The attention goes through cp_attention (local mode; its device mode
 * on a device backend) for P > 1; one seq rank calls the backend's kernel
 * on the joint buffers, on whichever memory they are. */
bool flux_via_cp(const geo_t *g, const wf_backend_ops_t *ops)
{
    (void)ops;
    return g->P > 1;
}

/* The layout the attention runs in: the common output layout of the
 * groups' q / k / v members when they agree and keep whole heads, else
 * full (every head on every tp rank). */
static wf_layout_t attn_lay(const run_t *x, const wf_linear_group_t *const *grp, int n)
{
    const int T = x->g.T;
    wf_layout_t a = wf_layout_of(&grp[0]->m[0].place, false, T);
    for (int j = 0; j < n; j++)
        for (int k = 0; k < 3; k++) {
            wf_layout_t b = wf_layout_of(&grp[j]->m[k].place, false, T);
            if (!wf_layout_same(&a, &b))
                return wf_layout_full(x->g.C);
        }
    int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS];
    int np = wf_layout_pieces(&a, 0, T, st, ln);
    for (int k = 0; k < np; k++)
        if (st[k] % x->g.D != 0 || ln[k] % x->g.D != 0)
            return wf_layout_full(x->g.C);
    return a;
}

/* One stream part of a projection (txt: Nt rows, img: Ni rows; width
 * Hl * D, row stride ld, attention layout, in sdt) -> its rows of the
 * joint buffer (B, L, Hl, D) in the activation dtype (the attention
 * kernel's operand): RMSNorm over each head with `norm` (NULL: none),
 * then RoPE with the table rows when `rope` (ops->head_norm_rope). */
static wf_status_t pack(const run_t *x, const void *src, wf_dtype_t sdt, int64_t ld, bool txt,
                        int64_t Hl, const float *norm, bool rope, void *dst)
{
    const geo_t *g = &x->g;
    wf_headrope_params_t p = {
        .nbatch = g->B, .per = txt ? g->Lt : g->Li, .L = g->L, .row0 = txt ? 0 : g->Lt,
        .H = Hl, .D = g->D, .src = src, .ld_src = ld, .dst = dst, .norm = norm,
        .cos = rope ? fp(x, x->W.rcos) : NULL, .sin = rope ? fp(x, x->W.rsin) : NULL,
        .eps = NORM_EPS, .dst_dtype = g->adt, .src_dtype = sdt,
    };
    return x->ops->head_norm_rope(x->ctx, &p);
}

/* Joint attention output (B, L, w) -> stream order (N, w), both in the
 * activation dtype: text rows of every batch, then image rows (one
 * strided copy each). */
static wf_status_t unpack(const run_t *x, const void *src, int64_t w, void *dst)
{
    const geo_t *g = &x->g;
    const size_t fs = wf_dtype_size(g->adt);
    const unsigned char *s = src;
    unsigned char *d = dst;
    wf_status_t st = x->ops->copy_rows(x->ctx, d, (size_t)(g->Lt * w) * fs, s,
                                       (size_t)(g->L * w) * fs, g->B, (size_t)(g->Lt * w) * fs);
    if (st != WF_OK)
        return st;
    return x->ops->copy_rows(x->ctx, d + (size_t)(g->Nt * w) * fs, (size_t)(g->Li * w) * fs,
                             s + (size_t)(g->Lt * w) * fs, (size_t)(g->L * w) * fs, g->B,
                             (size_t)(g->Li * w) * fs);
}

/* A projection's part (rows x its width in layout pl, row stride ld,
 * dtype dt) in the attention layout: as is, or converted into Xc. */
static wf_status_t to_attn(run_t *x, const void *raw, wf_dtype_t dt, int64_t ld,
                           const wf_layout_t *pl, int64_t rows, const wf_layout_t *al,
                           const void **ret, int64_t *ret_ld)
{
    const int T = x->g.T;
    if (wf_layout_same(pl, al)) {
        *ret = raw;
        *ret_ld = ld;
        return WF_OK;
    }
    int64_t w = wf_layout_width(al, T);
    if ((size_t)(rows * w) > x->W.Xc_n)
        return WF_E_INTERNAL;
    void *xc = fp(x, x->W.Xc);
    wf_status_t st = wf_layout_convert_dt(&x->lin, dt, raw, ld, pl, rows, al, 0, xc, w);
    *ret = xc;
    *ret_ld = w;
    return st;
}

/* Attention of the joint q / k / v buffers (Hl heads) into out (joint
 * order; query rows ld_out elements apart, 0: dense, only without cp). */
static wf_status_t attend_to(run_t *x, int64_t Hl, void *out, int64_t ld_out)
{
    const geo_t *g = &x->g;
    void *aws = x->ws + x->W.aws;
    if (!flux_via_cp(g, x->ops)) {
        wf_attn_params_t p = flux_attn_params_of(g, Hl);
        p.q = ap(x, x->W.qj, 0);
        p.k = ap(x, x->W.kj, 0);
        p.v = ap(x, x->W.vj, 0);
        p.out = out;
        p.ld_out = ld_out;
        return x->ops->attention(x->ctx, &p, aws);
    }
    if (ld_out)
        return WF_E_INTERNAL;
    wf_cp_job_t j = flux_cp_job_of(g, Hl);
    j.q = ap(x, x->W.qj, 0);
    j.k = ap(x, x->W.kj, 0);
    j.v = ap(x, x->W.vj, 0);
    j.out = out;
    wf_cp_group_t cg = {.seq = x->grp->seq, .ring = x->grp->ring,
                        .ulysses = x->grp->ulysses, .ring_degree = g->R,
                        .ulysses_degree = g->U};
    j.caller_syncs = true;      /* the forward waits once, at its end */
    if (x->dev)
        return wf_cp_attention_run_dev(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes,
                                       x->hws + x->W.haws, x->W.haws_bytes);
    return wf_cp_attention_run(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes);
}

/* Attention of the joint q / k / v buffers (Hl heads) into the q region
 * (joint order, dense). */
static wf_status_t attend(run_t *x, int64_t Hl)
{
    return attend_to(x, Hl, ap(x, x->W.q, 0), 0);
}

/* The q / k / v parts of a projection (`rows` rows: `which` 0 the text
 * rows, 1 the image rows, 2 all N rows, a single block's, text rows
 * first) -> q / k / v of the joint buffers: per-head RMSNorm (norms[0..1])
 * and RoPE of q and k, v as is, each read from its slice with its row
 * stride. */
static wf_status_t pack_parts(run_t *x, const wf_linear_part_t *parts, int64_t rows, int which,
                              const float *const *norms, const wf_layout_t *al, int64_t Hl)
{
    const geo_t *g0 = &x->g;
    void *joint[3] = {ap(x, x->W.qj, 0), ap(x, x->W.kj, 0), ap(x, x->W.vj, 0)};
    wf_status_t st;
    for (int w = 0; w < 3; w++) {
        const void *a;
        int64_t lda;
        const float *norm = w < 2 ? norms[w] : NULL;
        const wf_dtype_t dt = parts[w].dt;
        if ((st = to_attn(x, parts[w].y, dt, parts[w].ld, &parts[w].lay, rows, al, &a, &lda)) !=
            WF_OK)
            return st;
        if (which == 2) {
            /* stream order: txt rows then img rows */
            const void *ai = (const unsigned char *)a + (size_t)(g0->Nt * lda) * wf_dtype_size(dt);
            if ((st = pack(x, a, dt, lda, true, Hl, norm, w < 2, joint[w])) != WF_OK ||
                (st = pack(x, ai, dt, lda, false, Hl, norm, w < 2, joint[w])) != WF_OK)
                return st;
        } else if ((st = pack(x, a, dt, lda, which == 0, Hl, norm, w < 2, joint[w])) != WF_OK) {
            return st;
        }
    }
    return WF_OK;
}

/* The projections of one stream part (rows [row0, row0 + rows) of the
 * normalized stream, full) through group g into the proj region -> q /
 * k / v of the joint buffers (pack_parts). The members after the third
 * (a single block's MLP-in) stay in parts[3..] for the caller; acts
 * (NULL: none) their activations. */
static wf_status_t project(run_t *x, const wf_linear_group_t *g, int64_t row0, int64_t rows,
                           int which, const float *const *norms, const wf_act_t *acts,
                           const wf_layout_t *al, int64_t Hl, wf_linear_part_t *parts)
{
    const geo_t *g0 = &x->g;
    const int64_t C = g0->C;
    wf_layout_t full = wf_layout_full(C);
    wf_status_t st;
    if ((size_t)(rows * wf_linear_group_width(g)) > x->W.proj_n)
        return WF_E_INTERNAL;
    /* the group's outputs in the activation dtype too (the GEMM's
     * epilogue rounds them once, as diffusers' bf16 linears do); the
     * norms and RoPE widen them exactly */
    if ((st = wf_linear_group_apply_dt(&x->lin, g, ap(x, x->W.nx, row0 * C), g0->adt, C, &full,
                                       rows, acts, fp(x, x->W.proj), g0->adt, parts)) != WF_OK)
        return st;
    return pack_parts(x, parts, rows, which, norms, al, Hl);
}

/* Attention of the packed joint q / k / v (Hl heads) -> the output in
 * stream order, width Hl * D, in the activation dtype, at *ret_o: with
 * one batch row the joint order (text tokens, then image tokens) is the
 * stream order, so the attention's output is read where it lies (the q
 * region); else it is unpacked into the k region. */
static wf_status_t attend_unpack(run_t *x, int64_t Hl, void **ret_o)
{
    wf_status_t st;
    if ((st = attend(x, Hl)) != WF_OK)
        return st;
    if (x->g.B == 1) {
        *ret_o = ap(x, x->W.q, 0);
        return WF_OK;
    }
    *ret_o = ap(x, x->W.k, 0);
    return unpack(x, ap(x, x->W.q, 0), Hl * x->g.D, *ret_o);
}

/* Element i of a stream-order attention output o (activation dtype). */
static void *oat(const run_t *x, void *o, int64_t i)
{
    return (unsigned char *)o + (size_t)i * wf_dtype_size(x->g.adt);
}

/* ---- blocks ------------------------------------------------------------------------------ */

/* diffusers' FluxTransformerBlock on the stream. AdaLN-Zero chunks:
 * shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp. */
wf_status_t flux_double_block(run_t *x, const wf_flux_double_t *d)
{
    const geo_t *g = &x->g;
    const int64_t B = g->B, C = g->C, Nt = g->Nt, Ni = g->Ni;
    const wf_dtype_t adt = g->adt;
    float *S = fp(x, x->W.S), *lo = fp(x, x->W.lo);
    float *mi, *mt, *semb = fp(x, x->W.semb);
    void *hid = ap(x, x->W.hid, 0), *o = NULL;
    int64_t ldm;
    wf_layout_t lc = wf_layout_full(C);
    wf_status_t st;
    const wf_linear_env_t *le = &x->lin;
    if (x->s->mod_fused) {
        /* the batched modulation, computed once (flux_mod_all) */
        mi = fp(x, x->W.mod) + d->mod_off;
        mt = fp(x, x->W.mod) + d->mod_off_ctx;
        ldm = x->s->mod_width;
    } else {
        mi = fp(x, x->W.modA);
        mt = fp(x, x->W.modB);
        ldm = 6 * C;
        if ((st = wf_linear_apply_full(le, &d->norm1, semb, C, &lc, B, WF_ACT_NONE, mi)) !=
                WF_OK ||
            (st = wf_linear_apply_full(le, &d->norm1_context, semb, C, &lc, B, WF_ACT_NONE,
                                       mt)) != WF_OK)
            return st;
    }
    if ((st = flux_ln_mod(x, S, ap(x, x->W.nx, 0), B, g->Lt, mt, ldm, 0, C)) != WF_OK ||
        (st = flux_ln_mod(x, S + Nt * C, ap(x, x->W.nx, Nt * C), B, g->Li, mi, ldm, 0, C)) !=
            WF_OK)
        return st;
    const wf_linear_group_t *grp[2] = {&d->qkv, &d->add_qkv};
    const float *norms[2] = {d->norm_q, d->norm_k}, *cnorms[2] = {d->norm_added_q,
                                                                   d->norm_added_k};
    wf_layout_t al = attn_lay(x, grp, 2);
    int64_t Hl = wf_layout_width(&al, g->T) / g->D;
    wf_linear_part_t parts[WF_LINEAR_GROUP_MAX];
    /* text rows through add_q / k / v, then image rows through to_q / k / v */
    if ((st = project(x, &d->add_qkv, 0, Nt, 0, cnorms, NULL, &al, Hl, parts)) != WF_OK ||
        (st = project(x, &d->qkv, Nt, Ni, 1, norms, NULL, &al, Hl, parts)) != WF_OK ||
        (st = attend_unpack(x, Hl, &o)) != WF_OK)
        return st;
    int64_t wa = wf_layout_width(&al, g->T);
    if ((st = wf_linear_apply_full_dt(le, &d->to_out, oat(x, o, Nt * wa), adt, wa, &al, Ni,
                                      WF_ACT_NONE, lo + Nt * C)) != WF_OK ||
        (st = wf_linear_apply_full_dt(le, &d->to_add_out, o, adt, wa, &al, Nt,
                                      WF_ACT_NONE, lo)) != WF_OK ||
        (st = gate_add(x, S + Nt * C, lo + Nt * C, B, g->Li, mi, ldm, 2 * C)) != WF_OK ||
        (st = gate_add(x, S, lo, B, g->Lt, mt, ldm, 2 * C)) != WF_OK)
        return st;
    /* feed-forwards: image stream, then text stream */
    for (int part = 0; part < 2; part++) {
        bool img = part == 0;
        int64_t rows = img ? Ni : Nt, per = img ? g->Li : g->Lt, r0 = img ? Nt : 0;
        const float *mod = img ? mi : mt;
        const wf_linear_t *f0 = img ? &d->ff0 : &d->ffc0, *f2 = img ? &d->ff2 : &d->ffc2;
        wf_layout_t hl;
        wf_dtype_t hdt;
        /* GELU in the linear (its output the next linear's x), or after
         * the all-reduce of a rowwise one (then f32) */
        if ((st = flux_ln_mod(x, S + r0 * C, ap(x, x->W.nx, r0 * C), B, per, mod, ldm, 3 * C,
                              4 * C)) != WF_OK ||
            (st = wf_linear_apply_dt(le, f0, ap(x, x->W.nx, r0 * C), adt, C, &lc, rows,
                                     WF_ACT_GELU_TANH, hid, adt, &hl, &hdt)) != WF_OK)
            return st;
        int64_t hw = wf_layout_width(&hl, g->T);
        if ((st = wf_linear_apply_full_dt(le, f2, hid, hdt, hw, &hl, rows, WF_ACT_NONE,
                                          lo + r0 * C)) != WF_OK ||
            (st = gate_add(x, S + r0 * C, lo + r0 * C, B, per, mod, ldm, 5 * C)) != WF_OK)
            return st;
    }
    return WF_OK;
}

/* diffusers' FluxSingleTransformerBlock on the whole stream. Chunks:
 * shift, scale, gate. proj_out takes cat([attention, mlp]). */
wf_status_t flux_single_block(run_t *x, const wf_flux_single_t *sb)
{
    const geo_t *g = &x->g;
    const int T = g->T;
    const int64_t B = g->B, C = g->C, M = g->M, N = g->N, Nt = g->Nt;
    const wf_dtype_t adt = g->adt;
    float *S = fp(x, x->W.S), *lo = fp(x, x->W.lo);
    float *mod, *semb = fp(x, x->W.semb);
    int64_t ldm;
    wf_layout_t lc = wf_layout_full(C);
    wf_status_t st;
    const wf_linear_env_t *le = &x->lin;
    if (x->s->mod_fused) {
        mod = fp(x, x->W.mod) + sb->mod_off;
        ldm = x->s->mod_width;
    } else {
        mod = fp(x, x->W.modA);
        ldm = 3 * C;
        if ((st = wf_linear_apply_full(le, &sb->norm, semb, C, &lc, B, WF_ACT_NONE, mod)) !=
            WF_OK)
            return st;
    }
    /* one modulation for both streams: with one batch row the stream's
     * text rows and image rows are one run of rows */
    if (B == 1)
        st = flux_ln_mod(x, S, ap(x, x->W.nx, 0), 1, N, mod, ldm, 0, C);
    else if ((st = flux_ln_mod(x, S, ap(x, x->W.nx, 0), B, g->Lt, mod, ldm, 0, C)) == WF_OK)
        st = flux_ln_mod(x, S + Nt * C, ap(x, x->W.nx, Nt * C), B, g->Li, mod, ldm, 0, C);
    if (st != WF_OK)
        return st;
    /* q, k, v and the MLP-in (GELU) of the normalised stream as one
     * group; with low-precision activations the GELU writes the MLP part
     * of cat (below): the MLP-in GEMM's epilogue at one tp rank, else a
     * pass of its own, so the group leaves it bare */
    const wf_linear_group_t *grp[1] = {&sb->qkvm};
    const float *norms[2] = {sb->norm_q, sb->norm_k};
    static const wf_act_t acts_f32[4] = {WF_ACT_NONE, WF_ACT_NONE, WF_ACT_NONE,
                                         WF_ACT_GELU_TANH};
    static const wf_act_t acts_low[4] = {WF_ACT_NONE, WF_ACT_NONE, WF_ACT_NONE, WF_ACT_NONE};
    const wf_act_t *acts = adt == WF_DTYPE_F32 ? acts_f32 : acts_low;
    wf_layout_t al = attn_lay(x, grp, 1);
    int64_t Hl = wf_layout_width(&al, T) / g->D;
    wf_linear_part_t parts[WF_LINEAR_GROUP_MAX];
    /* cat([attn (C), mlp (M)]) in the layout proj_out takes: its pieces
     * ascend, so the attention columns come first in every row */
    wf_layout_t need = wf_layout_of(&sb->proj_out.place, true, T);
    int64_t ps[WF_TP_MAX_BLOCKS], pn[WF_TP_MAX_BLOCKS], wo = 0, wm = 0;
    int n = wf_layout_window(&need, x->t, T, 0, C, ps, pn);
    for (int k = 0; k < n; k++)
        wo += pn[k];
    n = wf_layout_window(&need, x->t, T, C, M, ps, pn);
    for (int k = 0; k < n; k++)
        wm += pn[k];
    int64_t ldc = wo + wm;
    if (ldc != sb->proj_out.place.local_in)
        return WF_E_INTERNAL;
    if (adt != WF_DTYPE_F32 && T == 1 && sb->qkvm.fused && sb->qkvm.n == 4) {
        /* one tp rank, low-precision activations: q / k / v as one GEMM
         * into the proj region, the MLP-in as another whose epilogue
         * applies the GELU and writes cat's MLP columns (no pass over the
         * hidden between them) */
        if ((size_t)(N * 3 * C) > x->W.proj_n)
            return WF_E_INTERNAL;
        if ((st = wf_linear_group_range_dt(le, &sb->qkvm, 0, 3, ap(x, x->W.nx, 0), adt, C, N,
                                           WF_ACT_NONE, fp(x, x->W.proj), 3 * C, adt)) !=
                WF_OK ||
            (st = wf_linear_group_range_dt(le, &sb->qkvm, 3, 4, ap(x, x->W.nx, 0), adt, C, N,
                                           WF_ACT_GELU_TANH, ap(x, x->W.cat, wo), ldc, adt)) !=
                WF_OK)
            return st;
        for (int k = 0; k < 3; k++)
            parts[k] = (wf_linear_part_t){
                .y = (unsigned char *)fp(x, x->W.proj) + (size_t)(k * C) * wf_dtype_size(adt),
                .ld = 3 * C, .lay = wf_layout_full(C), .dt = adt};
        st = pack_parts(x, parts, N, 2, norms, &al, Hl);
    } else if ((st = project(x, &sb->qkvm, 0, N, 2, norms, acts, &al, Hl, parts)) != WF_OK) {
        return st;
    } else if (adt == WF_DTYPE_F32) {
        /* the MLP part moves before the attention reuses the proj region */
        st = wf_layout_convert(le, parts[3].y, parts[3].ld, &parts[3].lay, N, &need, C,
                               fp(x, x->W.cat) + wo, ldc);
    } else if (T == 1) {
        /* GELU from the group's slice straight into cat's MLP columns */
        st = x->ops->bias_act(x->ctx, parts[3].y, parts[3].dt, N, M, parts[3].ld, NULL,
                              WF_ACT_GELU_TANH, ap(x, x->W.cat, wo), ldc, adt);
    } else {
        /* GELU into Xc in adt, then to proj_out's layout */
        int64_t wl = wf_layout_width(&parts[3].lay, T);
        if ((size_t)(N * wl) * wf_dtype_size(adt) > le->Xc_n * sizeof(float))
            return WF_E_INTERNAL;
        st = x->ops->bias_act(x->ctx, parts[3].y, parts[3].dt, N, wl, parts[3].ld, NULL,
                              WF_ACT_GELU_TANH, le->Xc, wl, adt);
        if (st == WF_OK)
            st = wf_layout_convert_dt(le, adt, le->Xc, wl, &parts[3].lay, N, &need, C,
                                      ap(x, x->W.cat, wo), ldc);
    }
    if (st != WF_OK)
        return st;
    if (!flux_via_cp(g, x->ops) && B == 1 && T == 1 && ldc % 8 == 0) {
        /* one seq rank, one batch row, one tp rank: the attention's output
         * (joint order = stream order, every head) written straight into
         * cat's attention columns, rows ldc apart */
        if ((st = attend_to(x, Hl, ap(x, x->W.cat, 0), ldc)) != WF_OK)
            return st;
    } else {
        void *o = NULL;
        if ((st = attend_unpack(x, Hl, &o)) != WF_OK ||
            (st = wf_layout_convert_dt(le, adt, o, wf_layout_width(&al, T), &al, N, &need, 0,
                                       ap(x, x->W.cat, 0), ldc)) != WF_OK)
            return st;
    }
    if ((st = wf_linear_apply_full_dt(le, &sb->proj_out, ap(x, x->W.cat, 0), adt, ldc, &need,
                                      N, WF_ACT_NONE, lo)) != WF_OK)
        return st;
    if (B == 1)
        return gate_add(x, S, lo, 1, N, mod, ldm, 2 * C);
    if ((st = gate_add(x, S, lo, B, g->Lt, mod, ldm, 2 * C)) != WF_OK)
        return st;
    return gate_add(x, S + Nt * C, lo + Nt * C, B, g->Li, mod, ldm, 2 * C);
}
