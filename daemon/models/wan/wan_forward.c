/* wan_forward.c — diffusers' WanTransformer3DModel forward on one rank of
 * a tp x ring x ulysses mesh: the job check, the workspace layout and the
 * run. Text-, image- and first-last-frame-to-video (Wan 2.1), and Wan
 * 2.2's per-token timesteps.
 *
 * Inputs, in the schema's order (modelfiles/wan/wan_family.c):
 * hidden_states (B, C_in, F, H, W), timestep (B) or timestep_tokens (B,
 * S), encoder_hidden_states (B, S_txt, text_dim), and where the config
 * has image_dim encoder_hidden_states_image (B, S_img, image_dim); output
 * (B, C_out, F, H, W).
 *
 * Names (one rank): T tp ranks (this one t), P = R * U seq ranks (this
 * one i), C = inner_dim, H heads of D (Hl = H / T on each tp rank, Cl =
 * Hl D), FF = ffn_dim; the video is a grid of (F', H', W') = (F / pt,
 * H / ph, W / pw) patches, S = F' H' W' tokens in row-major order (the
 * order of diffusers' flatten(2)). Seq rank j holds the contiguous tokens
 * [row0_j, row0_j + L_j) of cp_attention's seq shard j (diffusers' _cp_plan
 * splits blocks.0's hidden_states and the RoPE tables on the sequence the
 * same way; uneven when P does not divide S: the ring's anything mode,
 * tensor_split's sizes). N = B L_i rows here, Nt = B S_txt text rows.
 *
 * The flow, each step a backend op (backend.h "model ops") or a
 * collective:
 *   - the root (t = 0, i = 0) converts the inputs to f32 on the host and
 *     cuts every seq rank's patches out of the latent (a reorder, rank-
 *     major), copies them to its memory, sends them over tp to the seq
 *     roots, which scatter the patches and broadcast the timestep and
 *     the text over their seq group;
 *   - patch_embedding as a linear over this rank's patches; condition
 *     embedder: timestep_embed (flip_sin_to_cos, shift 0) -> time_embedder
 *     (linear SiLU linear) = temb -> SiLU -> time_proj = tproj (B, 6C),
 *     or per token (N, 6C) for this rank's tokens with timestep_tokens
 *     (each token's modulation then its own row: modln and gate_residual
 *     per token); text_embedder (linear GELU-tanh linear) on every text
 *     token and image_embedder ((pos_embed +) LayerNorm, linear GELU
 *     linear, LayerNorm) on every image token (every rank: they are the
 *     cross-attention's K / V);
 *   - rope_grid: the 3-D RoPE tables of this rank's tokens;
 *   - each block: mod = tproj + scale_shift_table; modln; self-attention
 *     on this tp rank's heads (q / k RMSNorm across all heads: rms_sumsq
 *     all-reduced over tp, rms_norm; RoPE and the (B, L, Hl, D) order:
 *     head_norm_rope without a norm; cp_attention's local mode over P);
 *     to_out (rowwise: all-reduced); gated residual; norm2 (layer_norm
 *     with affine, or none); cross-attention of this rank's queries
 *     against every text token on its heads (no exchange over seq), plus,
 *     with an image, a second attention of the same queries against the
 *     image tokens' add_k_proj / add_v_proj (norm_added_k across heads),
 *     added before to_out;
 *     residual; modln, feed-forward (GELU-tanh, split over tp), gated
 *     residual;
 *   - norm_out: modln with temb + scale_shift_table; proj_out; the rows
 *     gathered on the seq roots; the root copies them to the host,
 *     unpatchifies (a reorder) and converts to the output's dtype.
 *
 * Layouts over tp (models/linear.h). The stream and everything outside
 * the attention and the feed-forward's hidden layer are full on every tp
 * rank. q / k / v are taken in the head split (rank t: heads [t Hl, (t +
 * 1) Hl)), converted there from whatever the plan's projections emit
 * (the default plan emits it).
 *
 * Memory. On the CPU backend the workspace and the shard are host
 * memory, and the host regions below are in the same workspace. On a
 * backend with device memory (copy_h2d) the workspace and the shard are
 * the device's, the comms move device buffers, P > 1 attention is
 * cp_attention's device mode; the host workspace holds the counts of the
 * v-collectives, cp_attention's host part and, on the root, the inputs
 * and output on their way through the reorders.
 *
 * Precision: f32 activations, the CPU backend's norms' statistics in
 * double. diffusers runs the timestep embedding and the modulation in
 * f32 whatever the model's dtype; so does this. On a device whose block
 * linears and proj_out hold bf16 weights (wan_act_dtype) the activations
 * a GEMM or an attention reads are written in bf16 by the op that makes
 * them (geo_t.adt): modln's nx, the self-attention's q / k (RoPE) and v
 * and its output, the feed-forward's hidden, and without image tokens
 * the cross-attention's (xattn_dtype): norm2's nx (layer_norm; without
 * norm2 the stream converted by bias_act), q and k (the RMSNorm across
 * heads), v and its output. With image tokens the cross-attention stays
 * f32: its two attentions' outputs are summed by add, an f32 op, before
 * to_out reads the sum, and its linears round their f32 x themselves.
 * The text embedder's output is rounded to bf16 once per forward for the
 * blocks' to_k / to_v (text_dtype). The residual stream, the modulation,
 * the projections' outputs before their norms, and the linears' outputs
 * the gates read stay f32.
 *
 * Errors after validation abort the group's world, so no peer waits in a
 * collective. Nothing here logs, nothing is allocated during a run.
 */
#include "wan_run.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "base/szcheck.h"
#include "comm/comm.h"
#include "errf.h"
#include "parallel/cp_attention.h"
#include "tensor.h"

/* The schema's inputs (modelfiles/wan/wan_family.c); the image input only
 * where the config has image_dim. */
enum { IN_HS, IN_T, IN_EHS, IN_TT, IN_EHI };

/* LayerNorm eps of the image embedder's norms (diffusers' FP32LayerNorm
 * with nn.LayerNorm's default, not the config's eps). */
#define IMAGE_LN_EPS 1e-5f

/* Sizes of a job on one rank (identical on every rank). */
typedef struct geo {
    int64_t B, CI, F, Hh, Ww;      /* hidden_states (B, CI, F, Hh, Ww) */
    int64_t Fp, Hp, Wp, S;         /* patch grid and its tokens */
    int64_t St, TD;                /* text tokens, text_dim */
    int64_t C, H, D, FF, PIN, OC;  /* widths: PIN = CI pt ph pw, OC = C_out pt ph pw */
    int64_t FQ;                    /* freq_dim */
    bool tok;                      /* per-token timesteps (timestep_tokens) */
    int64_t SI, ID, Ni;            /* image tokens, image_dim, their rows (0: none) */
    int64_t Tm;                    /* most rows of the time path: Nm per token, else B */
    int64_t Hl, Cl;                /* heads and their width on a tp rank */
    int64_t Lm, Nm, Nt;            /* most tokens and rows on a seq rank; text rows */
    int64_t KV;                    /* most rows of a projection: max(Nm, Nt, Ni) */
    int T, R, U, P;                /* degrees */
    bool alltoall;                 /* the ring's rotation (wf_fwd_io_t.alltoall) */
    wf_dtype_t adt;                /* the GEMM and attention inputs' dtype:
                                      BF16 on a bf16 device (wan_act_dtype),
                                      else F32; the cross-attention's is
                                      xattn_dtype */
    wf_dtype_t tdt;                /* the text's dtype for the blocks' to_k /
                                      to_v (text_dtype; set with adt) */
} geo_t;

/* Byte offsets of the workspace's regions (256 bytes apart; float counts
 * in comments) on the backend's memory, and of the host regions (the
 * host workspace on a device, else the same workspace). */
typedef struct wsl {
    size_t in;                /* ts (B; none per token) | eh (Nt, TD) | ei (Ni, ID)
                                 | patches (B S PIN) | tt (B S; per token), the
                                 last two rank-major */
    size_t eh, ei, pat, tt;   /* offsets of the parts inside `in` */
    size_t tf, tmp, temb, tproj; /* (Tm, FQ), (Tm, C), (Tm, C), (Tm, 6C) */
    size_t mod, modo;         /* (Tm, 6C) a block's modulation, (Tm, 2C) norm_out's */
    size_t ctxh, ctx;         /* text embedder hidden / output (Nt, C) */
    size_t ein, eih, cimg;    /* image embedder: normed (Ni, ID), hidden (Ni,
                                 ID), output (Ni, C) */
    size_t rcos, rsin;        /* RoPE (Lm, D) */
    size_t S, nx;             /* residual stream, normed (Nm, C) */
    size_t q, k, v;           /* projections in the head split (KV, Cl) */
    size_t pl;                /* a projection before its conversion (KV, C); tp > 1 */
    size_t sums;              /* sums of squares of a norm split over tp (KV) */
    size_t qj, kj;            /* RoPE'd q / k (B, Lm, Hl, D) */
    size_t ao;                /* attention out (Nm, Cl) */
    size_t proj, proj_n;      /* a projection group's output (KV, 3C at most:
                                 q | k | v per row when fused), and its
                                 floats; lo and hid live in it, used only
                                 once the group's slices are read */
    size_t lo;                /* in proj: a linear's out (Nm, C) */
    size_t hid;               /* in proj: feed-forward hidden (Nm, FF) */
    size_t out;               /* proj_out (Nm, OC) */
    size_t outg;              /* seq root: every rank's (B S OC), rank-major */
    size_t Y, Xc, G;          /* linear.h's scratch (tp > 1) */
    size_t lin_n;             /* floats of each */
    size_t lws, aws;          /* linear and attention workspaces */
    size_t lws_bytes, aws_bytes;
    size_t total;             /* bytes */
    /* host */
    size_t meta;              /* 2 P size_t counts / displacements, then
                                 2 P int64 token starts / lengths */
    size_t hin, hout;         /* root: `in` and `outg` on the host (the same
                                 regions on the CPU) */
    size_t hhs, vid;          /* root: hidden_states in f32, the output in
                                 f32 before its conversion */
    size_t haws, haws_bytes;  /* cp_attention's host part (device) */
    size_t htotal;            /* host bytes on a device; 0 on the CPU */
} wsl_t;

/* State of one run on one rank. */
typedef struct run {
    const wf_wan_shard_t *s;
    const wf_wan_config_t *cfg;
    const wf_fwd_io_t *io;
    const wf_fwd_group_t *grp;
    const wf_backend_ops_t *ops;
    wf_backend_ctx_t *ctx;
    geo_t g;
    wsl_t W;
    unsigned char *ws;        /* workspace (backend memory) */
    unsigned char *hws;       /* host regions: host workspace on a device,
                                 else ws */
    bool dev;                 /* a backend with device memory */
    int t, i;                 /* tp and seq index */
    bool root;                /* t == 0 and i == 0 */
    int64_t row0, Li, N;      /* this rank's tokens and rows */
    int64_t trows;            /* rows of the time path: N per token, else B */
    int64_t mb, mper;         /* modulation: mb groups of mper rows (B x Li, or
                                 N x 1 per token) */
    wf_layout_t heads;        /* q / k / v's layout: the head split */
    wf_linear_env_t lin;      /* linear layers' environment */
} run_t;

static float *fp(const run_t *x, size_t off) { return (float *)(void *)(x->ws + off); }
static float *hp(const run_t *x, size_t off) { return (float *)(void *)(x->hws + off); }
static bool on_device(const wf_backend_ops_t *ops) { return ops->copy_h2d != NULL; }

/* ---- sizes -------------------------------------------------------------- */

static void geo_of(const wf_wan_config_t *c, const wf_fwd_io_t *io, int T, int R, int U,
                   geo_t *g)
{
    const wf_tensor_desc_t *hs = io->in[IN_HS], *eh = io->in[IN_EHS];
    memset(g, 0, sizeof *g);
    g->B = hs->shape[0];
    g->CI = hs->shape[1];
    g->F = hs->shape[2];
    g->Hh = hs->shape[3];
    g->Ww = hs->shape[4];
    g->Fp = g->F / c->patch_size[0];
    g->Hp = g->Hh / c->patch_size[1];
    g->Wp = g->Ww / c->patch_size[2];
    g->S = g->Fp * g->Hp * g->Wp;
    g->St = eh->shape[1];
    g->TD = eh->shape[2];
    g->C = c->inner_dim;
    g->H = c->num_attention_heads;
    g->D = c->attention_head_dim;
    g->FF = c->ffn_dim;
    g->FQ = c->freq_dim;
    g->PIN = (int64_t)c->in_channels * c->patch_elems;
    g->OC = (int64_t)c->out_channels * c->patch_elems;
    g->alltoall = io->alltoall;
    g->T = T;
    g->R = R;
    g->U = U;
    g->P = R * U;
    g->Hl = g->H / T;
    g->Cl = g->Hl * g->D;
    g->Lm = (g->S + g->P - 1) / g->P;
    g->Nm = g->B * g->Lm;
    g->Nt = g->B * g->St;
    g->tok = io->n_in > IN_TT && io->in[IN_TT] != NULL;
    if (c->image_dim && io->n_in > IN_EHI && io->in[IN_EHI]) {
        g->SI = io->in[IN_EHI]->shape[1];
        g->ID = c->image_dim;
        g->Ni = g->B * g->SI;
    }
    g->Tm = g->tok ? g->Nm : g->B;
    g->KV = g->Nm > g->Nt ? g->Nm : g->Nt;
    g->KV = g->KV > g->Ni ? g->KV : g->Ni;
}

/* The self-attention's cp job (local mode) on a tp rank's heads,
 * without pointers: the anything modes where the degrees do not divide. */
static wf_cp_job_t cp_job_of(const geo_t *g)
{
    wf_cp_job_t j = wf_fwd_self_attention(g->B, g->S, g->Hl, g->D, g->P, g->U, g->alltoall);
    /* q, k, v and the output in the activation dtype; the ring's merge
     * stays f32 (convert_to_fp32) */
    j.q_dtype = j.k_dtype = j.v_dtype = j.out_dtype = g->adt;
    return j;
}

/* Kernel params of an attention of Li query tokens against Skv keys on
 * a tp rank's heads, q / k / v and out in dt, without pointers. */
static wf_attn_params_t attn_params_of(const geo_t *g, int64_t Li, int64_t Skv, wf_dtype_t dt)
{
    wf_attn_params_t p = wf_fwd_attention_params(g->B, Li, Skv, g->Hl, g->D);
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = dt;
    return p;
}

/* The dtype of the text cross-attention's activations (its nx, q, k, v
 * and output): the activation dtype, but f32 with image tokens, where
 * the image attention's output is added to the text attention's by add
 * (f32) before to_out reads the sum. */
static wf_dtype_t xattn_dtype(const geo_t *g)
{
    return g->SI ? WF_DTYPE_F32 : g->adt;
}

/* The dtype the text (the text embedder's output) is kept in for the
 * blocks' to_k / to_v: the cross-attention's (xattn_dtype) when every
 * block's to_k / to_v weight is in it (their GEMMs then read the text as
 * it is, rounded once per forward instead of once per block), else f32. */
static wf_dtype_t text_dtype(const wf_wan_shard_t *s, const geo_t *g)
{
    const wf_dtype_t xdt = xattn_dtype(g);
    if (xdt == WF_DTYPE_F32)
        return xdt;
    for (uint32_t b = 0; b < s->cfg.num_layers; b++) {
        const wf_linear_group_t *kv = &s->blk[b].kv2;
        for (uint32_t m = 0; m < kv->n; m++)
            if ((kv->fused ? kv->all.w_dtype : kv->m[m].w_dtype) != xdt)
                return WF_DTYPE_F32;
    }
    return xdt;
}

/* The activation dtype of a forward of shard s (geo_t.adt): BF16 on a
 * device when every linear that reads such an activation (the
 * self-attention's projections and output, the cross-attention's q and
 * output, the feed-forward, proj_out) holds bf16 weights, else F32. */
static wf_dtype_t wan_act_dtype(const wf_wan_shard_t *s, bool dev)
{
    if (!dev || s->proj_out.w_dtype != WF_DTYPE_BF16)
        return WF_DTYPE_F32;
    for (uint32_t b = 0; b < s->cfg.num_layers; b++) {
        const wan_block_t *k = &s->blk[b];
        if (k->o1.w_dtype != WF_DTYPE_BF16 || k->ff0.w_dtype != WF_DTYPE_BF16 ||
            k->ff2.w_dtype != WF_DTYPE_BF16 || k->q2.w_dtype != WF_DTYPE_BF16 ||
            k->o2.w_dtype != WF_DTYPE_BF16)
            return WF_DTYPE_F32;
        for (uint32_t m = 0; m < k->qkv1.n; m++)
            if ((k->qkv1.fused ? k->qkv1.all.w_dtype : k->qkv1.m[m].w_dtype) != WF_DTYPE_BF16)
                return WF_DTYPE_F32;
    }
    return WF_DTYPE_BF16;
}

/* Seq rank j's tokens [*row0, *row0 + *len): cp_attention's seq shard. */
static wf_status_t tokens_of(const geo_t *g, int j, int64_t *row0, int64_t *len)
{
    wf_cp_job_t cj = cp_job_of(g);
    return wf_fwd_seq_tokens(&cj, g->R, g->U, j, row0, len);
}

/* The largest linear workspace of the run's layers at full widths, for
 * any weight dtype a device shard holds. */
static size_t lin_ws(const wf_backend_ops_t *ops, const geo_t *g)
{
    const int64_t shapes[][3] = {
        { g->Nm, g->PIN, g->C }, { g->Tm, g->FQ, g->C }, { g->Tm, g->C, g->C },
        { g->Tm, g->C, 6 * g->C }, { g->Nt, g->TD, g->C }, { g->KV, g->C, g->C },
        { g->Nm, g->C, g->FF }, { g->Nm, g->FF, g->C }, { g->Nm, g->C, g->OC },
        { g->Ni, g->ID, g->ID }, { g->Ni, g->ID, g->C }, { g->KV, g->C, 3 * g->C },
        { g->KV, g->C, 2 * g->C },
    };
    const wf_dtype_t dts[3] = { WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16 };
    size_t m = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int d = 0; d < 3; d++) {
            wf_linear_params_t p;
            memset(&p, 0, sizeof p);
            p.rows = shapes[k][0];
            p.in = shapes[k][1];
            p.out = shapes[k][2];
            p.w_dtype = dts[d];
            p.ldw = p.in;
            p.nwb = 1;
            p.wbw[0] = p.in;
            p.ldx = p.in;
            p.ldy = p.out;
            size_t b = ops->linear_workspace ? ops->linear_workspace(&p) : 0;
            if (b > m)
                m = b;
        }
    return m;
}

/* Attention workspace: the cross-attention's kernel and the
 * self-attention's (cp_attention over P > 1, else the kernel), each in
 * either activation dtype a device forward may take (wan_act_dtype: the
 * admission does not see the shard; the image attention is f32);
 * *ret_host: cp_attention's host part on a device. */
static size_t attn_ws(szc_t *c, const geo_t *g, const wf_backend_ops_t *ops, size_t *ret_host)
{
    size_t a = 0, b = 0, h = 0;
    if (g->SI) {
        wf_attn_params_t ip = attn_params_of(g, g->Lm, g->SI, WF_DTYPE_F32);
        a = ops->attention_workspace ? ops->attention_workspace(&ip) : 0;
    }
    geo_t gd = *g;
    for (int d = 0; d < (on_device(ops) ? 2 : 1); d++) {
        gd.adt = d ? WF_DTYPE_BF16 : WF_DTYPE_F32;
        wf_attn_params_t xp = attn_params_of(g, g->Lm, g->St, xattn_dtype(&gd));
        size_t ad = ops->attention_workspace ? ops->attention_workspace(&xp) : 0;
        a = ad > a ? ad : a;
        size_t bd = 0, hd = 0;
        if (g->P > 1) {
            wf_cp_job_t j = cp_job_of(&gd);
            if (on_device(ops)) {
                if (wf_cp_attention_workspace_dev(&j, g->R, g->U, ops, &bd, &hd) != WF_OK)
                    c->overflow = true;
            } else {
                bd = wf_cp_attention_workspace(&j, g->R, g->U, ops);
                if (bd == 0)
                    c->overflow = true;
            }
        } else {
            wf_attn_params_t sp = attn_params_of(&gd, g->S, g->S, gd.adt);
            bd = ops->attention_workspace ? ops->attention_workspace(&sp) : 0;
        }
        b = bd > b ? bd : b;
        h = hd > h ? hd : h;
    }
    if (a == SIZE_MAX || b == SIZE_MAX)
        c->overflow = true;
    *ret_host = h;
    return a > b ? a : b;
}

/* Regions are 256 bytes apart (dev_alloc's alignment). */
static size_t take(szc_t *c, size_t *off, size_t bytes)
{
    size_t start = *off;
    *off = szc_add(c, start, szc_add(c, bytes, 255u) & ~(size_t)255u);
    return start;
}

static size_t ftake(szc_t *c, size_t *off, size_t floats)
{
    return take(c, off, szc_mul(c, floats, sizeof(float)));
}

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

/* Lay the regions out (every rank alike); c->overflow on overflow. */
static void ws_layout(szc_t *c, const geo_t *g, const wf_backend_ops_t *ops, wsl_t *W)
{
    memset(W, 0, sizeof *W);
    const bool dev = on_device(ops);
    size_t off = 0, hoff = 0;
    size_t *ho = dev ? &hoff : &off;
    const int64_t B = g->B, C = g->C, Nm = g->Nm, KV = g->KV, Tm = g->Tm;
    /* `in`: its parts, each 256-byte aligned inside it */
    size_t in_b = 0;
    in_b = szc_add(c, in_b, szc_add(c, szc_mul(c, g->tok ? 0u : (size_t)B, 4), 255u) &
                                ~(size_t)255u);
    W->eh = in_b;
    in_b = szc_add(c, in_b, szc_add(c, szc_mul3(c, g->Nt, g->TD, 4), 255u) & ~(size_t)255u);
    W->ei = in_b;
    in_b = szc_add(c, in_b, szc_add(c, szc_mul3(c, g->Ni, g->ID, 4), 255u) & ~(size_t)255u);
    W->pat = in_b;
    in_b = szc_add(c, in_b, szc_add(c, szc_mul3(c, B * g->S, g->PIN, 4), 255u) &
                                ~(size_t)255u);
    W->tt = in_b;
    in_b = szc_add(c, in_b, szc_mul3(c, g->tok ? B * g->S : 0, 4, 1));
    W->in = take(c, &off, in_b);
    W->tf = ftake(c, &off, szc_mul3(c, Tm, g->FQ, 1));
    W->tmp = ftake(c, &off, szc_mul3(c, Tm, C, 1));
    W->temb = ftake(c, &off, szc_mul3(c, Tm, C, 1));
    W->tproj = ftake(c, &off, szc_mul3(c, Tm, 6, C));
    W->mod = ftake(c, &off, szc_mul3(c, Tm, 6, C));
    W->modo = ftake(c, &off, szc_mul3(c, Tm, 2, C));
    W->ctxh = ftake(c, &off, szc_mul3(c, g->Nt, C, 1));
    W->ctx = ftake(c, &off, szc_mul3(c, g->Nt, C, 1));
    W->ein = ftake(c, &off, szc_mul3(c, g->Ni, g->ID, 1));
    W->eih = ftake(c, &off, szc_mul3(c, g->Ni, g->ID, 1));
    W->cimg = ftake(c, &off, szc_mul3(c, g->Ni, C, 1));
    W->rcos = ftake(c, &off, szc_mul3(c, g->Lm, g->D, 1));
    W->rsin = ftake(c, &off, szc_mul3(c, g->Lm, g->D, 1));
    W->S = ftake(c, &off, szc_mul3(c, Nm, C, 1));
    W->nx = ftake(c, &off, szc_mul3(c, Nm, C, 1));
    W->q = ftake(c, &off, szc_mul3(c, KV, g->Cl, 1));
    W->k = ftake(c, &off, szc_mul3(c, KV, g->Cl, 1));
    W->v = ftake(c, &off, szc_mul3(c, KV, g->Cl, 1));
    W->pl = ftake(c, &off, g->T > 1 ? szc_mul3(c, KV, C, 1) : 0);
    W->sums = ftake(c, &off, (size_t)KV);
    W->qj = ftake(c, &off, szc_mul3(c, Nm, g->Cl, 1));
    W->kj = ftake(c, &off, szc_mul3(c, Nm, g->Cl, 1));
    W->ao = ftake(c, &off, szc_mul3(c, Nm, g->Cl, 1));
    size_t lob = szc_add(c, szc_mul3(c, Nm, C, sizeof(float)), 255u) & ~(size_t)255u;
    W->proj_n = maxz(szc_add(c, lob / sizeof(float), szc_mul3(c, Nm, g->FF, 1)),
                     szc_mul3(c, KV, 3 * C, 1));
    W->proj = ftake(c, &off, W->proj_n);
    W->lo = W->proj;
    W->hid = W->proj + lob;
    W->out = ftake(c, &off, szc_mul3(c, Nm, g->OC, 1));
    W->outg = ftake(c, &off, szc_mul3(c, B * g->S, g->OC, 1));
    if (g->T > 1) {
        /* rows x the widest activation any linear takes or emits */
        int64_t wd = C > g->FF ? C : g->FF;
        wd = wd > g->PIN ? wd : g->PIN;
        wd = wd > g->TD ? wd : g->TD;
        wd = wd > g->FQ ? wd : g->FQ;
        wd = wd > g->OC ? wd : g->OC;
        wd = wd > g->ID ? wd : g->ID;
        W->lin_n = maxz(szc_mul3(c, KV, wd, 1), szc_mul3(c, Tm, 6, C));
    }
    W->Y = ftake(c, &off, W->lin_n);
    W->Xc = ftake(c, &off, W->lin_n);
    W->G = ftake(c, &off, W->lin_n);
    W->lws_bytes = lin_ws(ops, g);
    if (W->lws_bytes == SIZE_MAX)
        c->overflow = true;
    W->lws = take(c, &off, W->lws_bytes);
    size_t haws = 0;
    W->aws_bytes = attn_ws(c, g, ops, &haws);
    W->aws = take(c, &off, W->aws_bytes);
    /* host */
    W->meta = take(c, ho, szc_mul(c, (size_t)g->P, 2 * sizeof(size_t) + 2 * sizeof(int64_t)));
    W->hin = dev ? take(c, ho, in_b) : W->in;
    W->hout = dev ? ftake(c, ho, szc_mul3(c, B * g->S, g->OC, 1)) : W->outg;
    W->hhs = ftake(c, ho, szc_mul(c, szc_mul5(c, B, g->CI, g->F, g->Hh, 1), (size_t)g->Ww));
    W->vid = ftake(c, ho, szc_mul3(c, B * g->S, g->OC, 1));
    W->haws_bytes = dev ? haws : 0;
    W->haws = take(c, ho, W->haws_bytes);
    W->total = off;
    W->htotal = dev ? hoff : 0;
}

/* ---- checks ------------------------------------------------------------- */

/* The model ops the forward calls. */
static const wf_backend_op_t wan_ops[] = {
    WF_BACKEND_OP_ATTENTION, WF_BACKEND_OP_LINEAR, WF_BACKEND_OP_BIAS_ACT,
    WF_BACKEND_OP_ACT, WF_BACKEND_OP_ADD, WF_BACKEND_OP_MODLN,
    WF_BACKEND_OP_GATE_RESIDUAL, WF_BACKEND_OP_HEAD_NORM_ROPE, WF_BACKEND_OP_COPY_ROWS,
    WF_BACKEND_OP_RMS_SUMSQ, WF_BACKEND_OP_RMS_NORM, WF_BACKEND_OP_LAYER_NORM,
    WF_BACKEND_OP_ROPE_GRID, WF_BACKEND_OP_TIMESTEP_EMBED,
};
#define N_WAN_OPS (sizeof wan_ops / sizeof wan_ops[0])

wf_status_t wan_backend_check(const wf_wan_config_t *cfg, const wf_backend_ops_t *ops,
                              char *err, size_t err_len)
{
    if (!ops || !cfg)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or backend");
    wf_backend_op_t miss;
    if (wf_backend_require(ops, wan_ops, N_WAN_OPS, &miss) != WF_OK)
        return wf_errf_status(WF_E_UNSUPPORTED, err, err_len,
                              "the %s backend lacks %s, which the Wan forward calls", ops->name,
                              wf_backend_op_name(miss));
    const char *entry = wf_fwd_device_entry_missing(ops);
    if (entry)
        return wf_errf_status(WF_E_UNSUPPORTED, err, err_len,
                              "the %s backend has device memory but lacks %s, which the Wan "
                              "forward calls", ops->name, entry);
    if (ops->attention_head_dim_ok && !ops->attention_head_dim_ok(cfg->attention_head_dim))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "attention_head_dim %" PRIu32 " is not a head size the %s "
                              "backend's attention takes", cfg->attention_head_dim, ops->name);
    return WF_OK;
}

wf_status_t wan_forward_check(const wf_wan_config_t *c, const wf_fwd_io_t *io, int tp,
                              int R, int U, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (tp < 1 || R < 1 || U < 1 || tp > WAN_MAX_DEGREE || (int64_t)R * U > WAN_MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad degrees (tp %d, ring %d, ulysses %d)", tp, R, U);
    if (c->num_attention_heads % (uint32_t)tp != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "`tp_degree` (%d) must divide the number of attention heads "
                              "(%" PRIu32 ").", tp, c->num_attention_heads);
    const uint32_t n_in = c->image_dim ? IN_EHI + 1 : IN_TT + 1;
    if (io->n_in != n_in || !io->in[IN_HS] || !io->in[IN_EHS] ||
        (c->image_dim && !io->in[IN_EHI]) || io->n_out != 1 || !io->out[0])
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "a Wan forward takes hidden_states, timestep or "
                              "timestep_tokens, encoder_hidden_states%s and gives output",
                              c->image_dim ? " and encoder_hidden_states_image" : "");
    if ((io->in[IN_T] != NULL) == (io->in[IN_TT] != NULL))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "a Wan forward takes exactly one of timestep (B) and "
                              "timestep_tokens (B, S: one per video token); %s given",
                              io->in[IN_T] ? "both were" : "neither was");
    if (io->fp8)
        return wf_errf_status(WF_E_UNSUPPORTED, err, err_len,
                              "fp8 attention is not served for %s", WF_WAN_CLASS_NAME);
    const wf_tensor_desc_t *hs = io->in[IN_HS];
    static const char *const axis[3] = { "F (frames)", "H (height)", "W (width)" };
    for (int a = 0; a < 3; a++) {
        int64_t n = hs->shape[2 + a], p = c->patch_size[a];
        if (n % p != 0)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                                  "hidden_states' %s is %" PRId64 ", not a multiple of "
                                  "patch_size[%d] = %" PRId64, axis[a], n, a, p);
        if (n / p > (int64_t)c->rope_max_seq_len)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                                  "hidden_states' %s gives %" PRId64 " patches, more than "
                                  "rope_max_seq_len %" PRIu32 " (diffusers' RoPE table)",
                                  axis[a], n / p, c->rope_max_seq_len);
    }
    geo_t g;
    geo_of(c, io, tp, R, U, &g);
    if (g.tok && io->in[IN_TT]->shape[1] != g.S)
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "timestep_tokens has %" PRId64 " timesteps per sample, but "
                              "hidden_states gives %" PRId64 " video tokens (F/%" PRIu32
                              " x H/%" PRIu32 " x W/%" PRIu32 ")", io->in[IN_TT]->shape[1],
                              g.S, c->patch_size[0], c->patch_size[1], c->patch_size[2]);
    if (g.P > 1) {
        wf_cp_job_t j = cp_job_of(&g);
        wf_status_t st = wf_cp_attention_check(&j, R, U, err, err_len);
        if (st != WF_OK)
            return st;
    }
    return WF_OK;
}

size_t wan_cache_floats(const wf_wan_config_t *c, const wf_fwd_io_t *io, int tp, int R, int U)
{
    if (wan_forward_check(c, io, tp, R, U, NULL, 0) != WF_OK)
        return 0;
    geo_t g;
    geo_of(c, io, tp, R, U, &g);
    if (g.Nm <= 0 || g.C <= 0 || g.Nm > (int64_t)(SIZE_MAX / 16) / g.C)
        return 0;
    return (size_t)(g.Nm * g.C);
}

size_t wan_forward_workspace(const wf_wan_config_t *c, const wf_fwd_io_t *io, int tp, int R,
                             int U, const wf_backend_ops_t *ops, size_t *ret_host)
{
    if (ret_host)
        *ret_host = SIZE_MAX;
    if (!ops || wan_forward_check(c, io, tp, R, U, NULL, 0) != WF_OK)
        return SIZE_MAX;
    geo_t g;
    wsl_t W;
    szc_t sc = { false };
    geo_of(c, io, tp, R, U, &g);
    ws_layout(&sc, &g, ops, &W);
    if (sc.overflow)
        return SIZE_MAX;
    if (ret_host)
        *ret_host = W.htotal;
    return W.total;
}

/* ---- the run ------------------------------------------------------------ */

#define TRY(e)                                                                   \
    do {                                                                         \
        st = (e);                                                                \
        if (st != WF_OK)                                                         \
            return st;                                                           \
    } while (0)

/* dst (rows, out) full = act(in W^T + b), the input full (width ld_in). */
static wf_status_t lin_full(run_t *x, const wf_linear_t *L, const float *in, int64_t rows,
                            wf_act_t act, float *dst)
{
    wf_layout_t il = wf_layout_full(L->place.in);
    return wf_linear_apply_full(&x->lin, L, in, L->place.in, &il, rows, act, dst);
}

/* Element i of an activation region (byte offset off) in the run's
 * activation dtype (geo_t.adt). */
static void *ap(const run_t *x, size_t off, int64_t i)
{
    return x->ws + off + (size_t)i * wf_dtype_size(x->g.adt);
}

/* A q / k / v projection of `rows` full rows of in (dtype in_dt: f32, or
 * the weight's) into dst in the head split (rows, Cl), f32 (the RMSNorm
 * across heads reads it). */
static wf_status_t proj(run_t *x, const wf_linear_t *L, const void *in, wf_dtype_t in_dt,
                        int64_t rows, float *dst)
{
    wf_layout_t il = wf_layout_full(L->place.in), ol;
    wf_dtype_t odt;
    float *land = x->g.T == 1 ? dst : fp(x, x->W.pl);
    wf_status_t st;
    TRY(wf_linear_apply_dt(&x->lin, L, in, in_dt, L->place.in, &il, rows, WF_ACT_NONE, land,
                           WF_DTYPE_F32, &ol, &odt));
    if (x->g.T == 1)
        return WF_OK;
    return wf_layout_convert(&x->lin, land, wf_layout_width(&ol, x->g.T), &ol, rows, &x->heads,
                             0, dst, x->g.Cl);
}

/* dst = LN(src) (1 + scale) + shift over this rank's rows, dst in the
 * activation dtype (the next linear's x); row b of mod (ld_mod floats)
 * holds shift at shift_off and scale at scale_off. */
static wf_status_t ln_mod(run_t *x, const float *src, void *dst, const float *mod,
                          int64_t ld_mod, int64_t shift_off, int64_t scale_off)
{
    wf_modln_params_t p = {
        .nbatch = x->mb, .per = x->mper, .C = x->g.C, .src = src, .ld_src = x->g.C,
        .dst = dst, .ld_dst = x->g.C, .shift = mod + shift_off, .scale = mod + scale_off,
        .ld_mod = ld_mod, .eps = x->cfg->eps, .dst_dtype = x->g.adt,
    };
    return x->ops->modln(x->ctx, &p);
}

/* RMSNorm across all heads of rows (rows, Cl) in the head split, src
 * (f32, row stride ld) -> dst (rows, Cl) contiguous in dtype dt, or in
 * place (dst == src, ld Cl, f32); w the full (C) weight. Over tp: the
 * sums of squares of every rank's heads all-reduced first. */
static wf_status_t rms_to(run_t *x, const float *src, int64_t ld, int64_t rows, const float *w,
                          void *dst, wf_dtype_t dt)
{
    const geo_t *g = &x->g;
    wf_rmsnorm_params_t p = {
        .rows = rows, .n = g->Cl, .src = src, .ld_src = ld, .dst = dst, .ld_dst = g->Cl,
        .weight = w, .eps = x->cfg->eps, .dst_dtype = dt,
    };
    if (g->T == 1)
        return x->ops->rms_norm(x->ctx, &p);
    float *sums = fp(x, x->W.sums);
    wf_status_t st;
    TRY(x->ops->rms_sumsq(x->ctx, src, rows, g->Cl, ld, sums));
    TRY(wf_comm_allreduce(x->grp->tp, sums, sums, (size_t)rows, WF_COMM_F32, WF_COMM_SUM));
    p.weight = w + (int64_t)x->t * g->Cl;
    p.sumsq = sums;
    p.width = g->C;
    return x->ops->rms_norm(x->ctx, &p);
}

/* One member of a projection group (its slice p of the group's output,
 * f32, `rows` rows) into the head split dst (rows, Cl) contiguous in
 * dtype dt, as the attention takes it; with `norm` (a q or k) the
 * RMSNorm across heads on the way, which writes dt; without (a v)
 * bias_act's conversion when dt is not f32. A slice already in the head
 * split is read where it lies (the norm reads it with its row stride;
 * v is one strided copy), else converted first: into dst itself for an
 * f32 dst (normed there in place), else through pl (the layouts differ
 * only at tp > 1, where pl exists). */
static wf_status_t to_heads(run_t *x, const wf_linear_part_t *p, int64_t rows, const float *norm,
                            void *dst, wf_dtype_t dt)
{
    const int64_t Cl = x->g.Cl;
    const bool cvt = dt != WF_DTYPE_F32;
    wf_status_t st;
    float *src = p->y;
    int64_t ld = p->ld;
    if (!wf_layout_same(&p->lay, &x->heads)) {
        float *land = cvt ? fp(x, x->W.pl) : dst;
        TRY(wf_layout_convert(&x->lin, p->y, p->ld, &p->lay, rows, &x->heads, 0, land, Cl));
        src = land;
        ld = Cl;
    }
    if (norm)
        return rms_to(x, src, ld, rows, norm, dst, dt);
    if (rows == 0 || (!cvt && (const void *)src == dst))
        return WF_OK;
    if (cvt)
        return x->ops->bias_act(x->ctx, src, WF_DTYPE_F32, rows, Cl, ld, NULL, WF_ACT_NONE, dst,
                                Cl, dt);
    return x->ops->copy_rows(x->ctx, dst, (size_t)Cl * sizeof(float), src,
                             (size_t)ld * sizeof(float), rows, (size_t)Cl * sizeof(float));
}

/* Group g on `rows` rows of in (full, its width the members' in, dtype
 * in_dt) into the proj region, its parts into q / k / v in the head
 * split: parts 0 .. n-1 go to dst[0 .. n-1] in dts[k] with norms[k]
 * (NULL: none). */
static wf_status_t group_heads(run_t *x, const wf_linear_group_t *grp, const void *in,
                               wf_dtype_t in_dt, int64_t rows, void *const *dst,
                               const float *const *norms, const wf_dtype_t *dts)
{
    wf_linear_part_t parts[WF_LINEAR_GROUP_MAX];
    const int64_t w = grp->m[0].place.in;
    wf_layout_t il = wf_layout_full(w);
    wf_status_t st;
    if ((size_t)(rows * wf_linear_group_width(grp)) > x->W.proj_n)
        return WF_E_INTERNAL;
    /* f32 outputs: the RMSNorm across heads (rms_norm) reads f32 */
    TRY(wf_linear_group_apply_dt(&x->lin, grp, in, in_dt, w, &il, rows, NULL,
                                 fp(x, x->W.proj), WF_DTYPE_F32, parts));
    for (uint32_t k = 0; k < grp->n; k++)
        TRY(to_heads(x, &parts[k], rows, norms[k], dst[k], dts[k]));
    return WF_OK;
}

/* RoPE of this rank's rows of src (N, Cl) into dst (B, Li, Hl, D) in the
 * activation dtype (the self-attention's q / k). */
static wf_status_t rope(run_t *x, const float *src, void *dst)
{
    wf_headrope_params_t p = {
        .nbatch = x->g.B, .per = x->Li, .L = x->Li, .row0 = 0, .H = x->g.Hl, .D = x->g.D,
        .src = src, .ld_src = x->g.Cl, .dst = dst, .norm = NULL, .cos = fp(x, x->W.rcos),
        .sin = fp(x, x->W.rsin), .eps = x->cfg->eps, .dst_dtype = x->g.adt,
    };
    return x->ops->head_norm_rope(x->ctx, &p);
}

/* Attention of this rank's queries q (B, Li, Hl, D) against k, v (B, Skv,
 * Hl, D) into out (B, Li, Hl, D), all in dtype dt: over_seq, the
 * self-attention over the seq group (cp_attention's local mode, k / v
 * then this rank's tokens too, dt the activation dtype); else a
 * cross-attention on this rank alone. */
static wf_status_t attend(run_t *x, const void *q, const void *k, const void *v,
                          int64_t Skv, bool over_seq, wf_dtype_t dt, void *out)
{
    void *aws = x->ws + x->W.aws;
    if (over_seq && x->g.P > 1) {
        wf_cp_job_t j = cp_job_of(&x->g);
        j.q = q;
        j.k = k;
        j.v = v;
        j.out = out;
        wf_cp_group_t cg = { .seq = x->grp->seq, .ring = x->grp->ring,
                             .ulysses = x->grp->ulysses, .ring_degree = x->g.R,
                             .ulysses_degree = x->g.U };
        j.caller_syncs = true;  /* the forward waits once, at its end */
        if (x->dev)
            return wf_cp_attention_run_dev(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes,
                                           x->hws + x->W.haws, x->W.haws_bytes);
        return wf_cp_attention_run(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes);
    }
    wf_attn_params_t p = attn_params_of(&x->g, x->Li, Skv, dt);
    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    return x->ops->attention(x->ctx, &p, aws);
}

/* Counts (bytes) and displacements of every seq rank's piece of a
 * rank-major buffer of `width` floats a row, into the host meta. */
static void counts_of(run_t *x, int64_t width, size_t **ret_cnt, size_t **ret_dsp)
{
    const geo_t *g = &x->g;
    size_t *cnt = (size_t *)(void *)(x->hws + x->W.meta), *dsp = cnt + g->P;
    const int64_t *len = (const int64_t *)(const void *)(dsp + g->P) + g->P;
    size_t at = 0;
    for (int j = 0; j < g->P; j++) {
        cnt[j] = (size_t)(g->B * len[j] * width) * sizeof(float);
        dsp[j] = at;
        at += cnt[j];
    }
    *ret_cnt = cnt;
    *ret_dsp = dsp;
}

/* Every seq rank's patches, rank-major (rank j: (B, L_j, PIN)); row (b,
 * t) column ((c pt + a) ph + e) pw + d, the Conv3d weight's flattening
 * (out, c, kt, kh, kw). */
static void patchify(run_t *x, const int64_t *row0, const int64_t *len)
{
    const geo_t *g = &x->g;
    const uint32_t *ps = x->cfg->patch_size;
    const float *hs = hp(x, x->W.hhs);
    float *row = hp(x, x->W.hin + x->W.pat);
    for (int j = 0; j < g->P; j++)
        for (int64_t b = 0; b < g->B; b++)
            for (int64_t tok = row0[j]; tok < row0[j] + len[j]; tok++) {
                int64_t f = tok / (g->Hp * g->Wp), h = tok / g->Wp % g->Hp, w = tok % g->Wp;
                for (int64_t c = 0; c < g->CI; c++)
                    for (int64_t a = 0; a < ps[0]; a++)
                        for (int64_t e = 0; e < ps[1]; e++) {
                            const float *src = hs + (((b * g->CI + c) * g->F + f * ps[0] + a) *
                                                         g->Hh + h * ps[1] + e) * g->Ww +
                                               w * ps[2];
                            memcpy(row, src, ps[2] * sizeof(float));
                            row += ps[2];
                        }
            }
}

/* The output (B, C_out, F, Hh, Ww) in f32 from every seq rank's proj_out
 * rows (rank-major (B, L_j, OC)); column ((a ph + e) pw + d) C_out + c
 * (diffusers' reshape to (B, F', H', W', pt, ph, pw, C_out) and
 * permute). */
static void unpatchify(run_t *x, const int64_t *row0, const int64_t *len)
{
    const geo_t *g = &x->g;
    const uint32_t *ps = x->cfg->patch_size;
    const int64_t CO = x->cfg->out_channels;
    const float *row = hp(x, x->W.hout);
    float *vid = hp(x, x->W.vid);
    for (int j = 0; j < g->P; j++)
        for (int64_t b = 0; b < g->B; b++)
            for (int64_t tok = row0[j]; tok < row0[j] + len[j]; tok++) {
                int64_t f = tok / (g->Hp * g->Wp), h = tok / g->Wp % g->Hp, w = tok % g->Wp;
                for (int64_t a = 0; a < ps[0]; a++)
                    for (int64_t e = 0; e < ps[1]; e++)
                        for (int64_t d = 0; d < ps[2]; d++)
                            for (int64_t c = 0; c < CO; c++)
                                vid[(((b * CO + c) * g->F + f * ps[0] + a) * g->Hh + h * ps[1] +
                                     e) * g->Ww + w * ps[2] + d] = *row++;
            }
}

/* The inputs to every rank: the root fills `in` (ts, eh, ei, every rank's
 * patches and per-token timesteps), sends it over tp to the seq roots,
 * which broadcast ts, eh and ei and scatter the rest over seq. */
static wf_status_t inputs(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_fwd_io_t *io = x->io;
    const int64_t *row0 = (const int64_t *)(const void *)(x->hws + x->W.meta +
                                                          2 * (size_t)g->P * sizeof(size_t));
    const int64_t *len = row0 + g->P;
    size_t in_b = x->W.tt + (g->tok ? (size_t)(g->B * g->S) * sizeof(float) : 0);
    wf_status_t st;
    if (x->root) {
        if (!g->tok)
            wf_convert_to_f32(hp(x, x->W.hin), io->in_data[IN_T], io->in[IN_T]->dtype,
                              (size_t)g->B);
        wf_convert_to_f32(hp(x, x->W.hin + x->W.eh), io->in_data[IN_EHS],
                          io->in[IN_EHS]->dtype, (size_t)(g->Nt * g->TD));
        if (g->SI)
            wf_convert_to_f32(hp(x, x->W.hin + x->W.ei), io->in_data[IN_EHI],
                              io->in[IN_EHI]->dtype, (size_t)(g->Ni * g->ID));
        wf_convert_to_f32(hp(x, x->W.hhs), io->in_data[IN_HS], io->in[IN_HS]->dtype,
                          (size_t)(g->B * g->CI * g->F * g->Hh * g->Ww));
        patchify(x, row0, len);
        if (g->tok) {
            /* rank-major (B, L_j) pieces of (B, S), converted one row piece
             * at a time */
            const unsigned char *src = io->in_data[IN_TT];
            size_t es = wf_dtype_size(io->in[IN_TT]->dtype);
            float *dst = hp(x, x->W.hin + x->W.tt);
            for (int j = 0; j < g->P; j++)
                for (int64_t b = 0; b < g->B; b++) {
                    wf_convert_to_f32(dst, src + (size_t)(b * g->S + row0[j]) * es,
                                      io->in[IN_TT]->dtype, (size_t)len[j]);
                    dst += len[j];
                }
        }
        if (x->dev)
            TRY(x->ops->copy_h2d(x->ctx, x->ws + x->W.in, x->hws + x->W.hin, in_b));
    }
    if (g->T > 1 && x->i == 0)
        TRY(wf_comm_broadcast(x->grp->tp, x->ws + x->W.in, in_b, 0));
    if (g->P == 1)
        return WF_OK;
    TRY(wf_comm_broadcast(x->grp->seq, x->ws + x->W.in, x->W.pat, 0));
    size_t *cnt, *dsp;
    counts_of(x, g->PIN, &cnt, &dsp);
    float *pat = fp(x, x->W.in + x->W.pat);
    /* in place on the seq root: its piece is the first */
    TRY(wf_comm_scatterv(x->grp->seq, pat, cnt, dsp, pat, cnt[x->i], 0));
    if (!g->tok)
        return WF_OK;
    counts_of(x, 1, &cnt, &dsp);
    float *tt = fp(x, x->W.in + x->W.tt);
    return wf_comm_scatterv(x->grp->seq, tt, cnt, dsp, tt, cnt[x->i], 0);
}

/* The image embedder on every image token: (pos_embed +) LayerNorm,
 * linear GELU linear, LayerNorm into cimg (Ni, C). */
static wf_status_t embed_image(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_wan_shard_t *s = x->s;
    float *ei = fp(x, x->W.in + x->W.ei), *cimg = fp(x, x->W.cimg);
    wf_status_t st;
    if (s->ie_pos)
        for (int64_t b = 0; b < g->B; b++)
            TRY(x->ops->add(x->ctx, ei + b * g->SI * g->ID, s->ie_pos, g->SI * g->ID));
    wf_layernorm_params_t n1 = {
        .rows = g->Ni, .C = g->ID, .src = ei, .ld_src = g->ID, .dst = fp(x, x->W.ein),
        .ld_dst = g->ID, .weight = s->ie_n1w, .bias = s->ie_n1b, .eps = IMAGE_LN_EPS,
    };
    TRY(x->ops->layer_norm(x->ctx, &n1));
    TRY(lin_full(x, &s->ie_ff0, fp(x, x->W.ein), g->Ni, WF_ACT_GELU, fp(x, x->W.eih)));
    TRY(lin_full(x, &s->ie_ff2, fp(x, x->W.eih), g->Ni, WF_ACT_NONE, cimg));
    wf_layernorm_params_t n2 = {
        .rows = g->Ni, .C = g->C, .src = cimg, .ld_src = g->C, .dst = cimg, .ld_dst = g->C,
        .weight = s->ie_n2w, .bias = s->ie_n2b, .eps = IMAGE_LN_EPS,
    };
    return x->ops->layer_norm(x->ctx, &n2);
}

/* Condition embedder and RoPE tables: temb, tproj, the text's ctx. */
static wf_status_t embed(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_wan_shard_t *s = x->s;
    wf_status_t st;
    const int64_t tr = x->trows;
    wf_timestep_params_t tp = {
        .t = fp(x, x->W.in + (g->tok ? x->W.tt : 0)), .B = tr, .dim = x->cfg->freq_dim,
        .flip_sin_to_cos = true, .downscale_freq_shift = 0.0f, .scale = 1.0f,
        .max_period = 10000.0f, .dst = fp(x, x->W.tf),
    };
    TRY(x->ops->timestep_embed(x->ctx, &tp));
    TRY(lin_full(x, &s->t1, fp(x, x->W.tf), tr, WF_ACT_SILU, fp(x, x->W.tmp)));
    TRY(lin_full(x, &s->t2, fp(x, x->W.tmp), tr, WF_ACT_NONE, fp(x, x->W.temb)));
    TRY(x->ops->act(x->ctx, fp(x, x->W.tmp), fp(x, x->W.temb), tr * g->C, WF_ACT_SILU));
    TRY(lin_full(x, &s->tproj, fp(x, x->W.tmp), tr, WF_ACT_NONE, fp(x, x->W.tproj)));
    if (g->SI)
        TRY(embed_image(x));
    TRY(lin_full(x, &s->x1, fp(x, x->W.in + x->W.eh), g->Nt, WF_ACT_GELU_TANH,
                 fp(x, x->W.ctxh)));
    TRY(lin_full(x, &s->x2, fp(x, x->W.ctxh), g->Nt, WF_ACT_NONE, fp(x, x->W.ctx)));
    /* the text in its blocks' dtype (text_dtype), once: into ctxh, free
     * from here on */
    if (g->tdt != WF_DTYPE_F32 && g->Nt > 0)
        TRY(x->ops->bias_act(x->ctx, fp(x, x->W.ctx), WF_DTYPE_F32, g->Nt, g->C, g->C, NULL,
                             WF_ACT_NONE, fp(x, x->W.ctxh), g->C, g->tdt));
    wf_rope_grid_params_t rp = {
        .n_axes = 3, .grid = { g->Fp, g->Hp, g->Wp },
        .axes_dims = { x->cfg->rope_dims[0], x->cfg->rope_dims[1], x->cfg->rope_dims[2] },
        .theta = WF_WAN_ROPE_THETA, .D = g->D, .row0 = x->row0, .L = x->Li,
        .cos = fp(x, x->W.rcos), .sin = fp(x, x->W.rsin),
    };
    return x->ops->rope_grid(x->ctx, &rp);
}

/* diffusers' WanTransformerBlock on this rank's rows of the stream. */
static wf_status_t block(run_t *x, const wan_block_t *k)
{
    const geo_t *g = &x->g;
    const int64_t C = g->C, C6 = 6 * C, N = x->N;
    const wf_dtype_t adt = g->adt;
    float *S = fp(x, x->W.S), *nx = fp(x, x->W.nx), *mod = fp(x, x->W.mod);
    float *q = fp(x, x->W.q), *kk = fp(x, x->W.k), *v = fp(x, x->W.v);
    float *ao = fp(x, x->W.ao), *lo = fp(x, x->W.lo);
    void *hid = ap(x, x->W.hid, 0);
    wf_layout_t hl;
    wf_dtype_t hdt;
    wf_layout_t lc = wf_layout_full(C);
    wf_status_t st;
    /* (shift, scale, gate) x (self-attention, feed-forward) per batch row
     * (per token with timestep_tokens) */
    TRY(x->ops->copy_rows(x->ctx, mod, (size_t)C6 * 4, fp(x, x->W.tproj), (size_t)C6 * 4,
                          x->trows, (size_t)C6 * 4));
    TRY(x->ops->bias_act(x->ctx, mod, WF_DTYPE_F32, x->trows, C6, C6, k->sst, WF_ACT_NONE, NULL,
                         0, WF_DTYPE_F32));
    /* 1. self-attention on this tp rank's heads */
    TRY(ln_mod(x, S, nx, mod, C6, 0, C));
    void *const qkv[3] = {q, kk, v};
    const float *const n1[3] = {k->nq1, k->nk1, NULL}, *const n2[2] = {k->nk2, NULL};
    const float *const na[2] = {k->nak, NULL};
    /* q / k f32 for the RoPE, which writes them in adt; v in adt */
    const wf_dtype_t d1[3] = {WF_DTYPE_F32, WF_DTYPE_F32, adt};
    TRY(group_heads(x, &k->qkv1, nx, adt, N, qkv, n1, d1));
    TRY(rope(x, q, ap(x, x->W.qj, 0)));
    TRY(rope(x, kk, ap(x, x->W.kj, 0)));
    TRY(attend(x, ap(x, x->W.qj, 0), ap(x, x->W.kj, 0), v, x->Li, true, adt, ao));
    TRY(wf_linear_apply_full_dt(&x->lin, &k->o1, ao, adt, g->Cl, &x->heads, N, WF_ACT_NONE,
                                lo));
    TRY(x->ops->gate_residual(x->ctx, S, C, lo, C, mod + 2 * C, C6, x->mb, x->mper, C));
    /* 2. cross-attention: this rank's tokens against the whole text, its
     * nx, q / k / v and output in xdt (xattn_dtype) */
    const wf_dtype_t xdt = xattn_dtype(g);
    const void *in2 = S;
    wf_dtype_t in2_dt = WF_DTYPE_F32;
    if (k->n2w) {
        wf_layernorm_params_t lp = {
            .rows = N, .C = C, .src = S, .ld_src = C, .dst = nx, .ld_dst = C,
            .weight = k->n2w, .bias = k->n2b, .eps = x->cfg->eps, .dst_dtype = xdt,
        };
        TRY(x->ops->layer_norm(x->ctx, &lp));
        in2 = nx;
        in2_dt = xdt;
    } else if (xdt != WF_DTYPE_F32) {
        /* no norm2 (diffusers' Identity): the stream itself, converted
         * for q's GEMM */
        TRY(x->ops->bias_act(x->ctx, S, WF_DTYPE_F32, N, C, C, NULL, WF_ACT_NONE, nx, C, xdt));
        in2 = nx;
        in2_dt = xdt;
    }
    TRY(proj(x, &k->q2, in2, in2_dt, N, q));
    /* q normed in place in f32 (the image attention reads it too), else
     * into qj (free until the next block's RoPE) in xdt */
    void *qx = xdt == WF_DTYPE_F32 ? (void *)q : ap(x, x->W.qj, 0);
    TRY(rms_to(x, q, g->Cl, N, k->nq2, qx, xdt));
    const wf_dtype_t d2[2] = {xdt, xdt}, da[2] = {WF_DTYPE_F32, WF_DTYPE_F32};
    TRY(group_heads(x, &k->kv2, g->tdt == WF_DTYPE_F32 ? fp(x, x->W.ctx) : fp(x, x->W.ctxh),
                    g->tdt, g->Nt, qkv + 1, n2, d2));
    TRY(attend(x, qx, kk, v, g->St, false, xdt, ao));
    if (g->SI) {
        /* the same queries against the image tokens, added (xdt is f32) */
        TRY(group_heads(x, &k->akv, fp(x, x->W.cimg), WF_DTYPE_F32, g->Ni, qkv + 1, na, da));
        TRY(attend(x, q, kk, v, g->SI, false, WF_DTYPE_F32, lo));
        TRY(x->ops->add(x->ctx, ao, lo, N * g->Cl));
    }
    TRY(wf_linear_apply_full_dt(&x->lin, &k->o2, ao, xdt, g->Cl, &x->heads, N, WF_ACT_NONE,
                                lo));
    TRY(x->ops->add(x->ctx, S, lo, N * C));
    /* 3. feed-forward, its hidden layer as the plan splits it */
    TRY(ln_mod(x, S, nx, mod, C6, 3 * C, 4 * C));
    TRY(wf_linear_apply_dt(&x->lin, &k->ff0, nx, adt, C, &lc, N, WF_ACT_GELU_TANH, hid, adt,
                           &hl, &hdt));
    TRY(wf_linear_apply_full_dt(&x->lin, &k->ff2, hid, hdt, wf_layout_width(&hl, g->T), &hl, N,
                                WF_ACT_NONE, lo));
    return x->ops->gate_residual(x->ctx, S, C, lo, C, mod + 5 * C, C6, x->mb, x->mper, C);
}

/* One block of the forward, as wf_fwd_block_run calls it. */
typedef struct block_arg {
    run_t *x;       /* the run */
    uint32_t b;     /* the block */
} block_arg_t;

static wf_status_t run_block(void *arg)
{
    const block_arg_t *a = arg;
    return block(a->x, &a->x->s->blk[a->b]);
}

/* A block's graph key (wf_fwd_block_run): everything its ops' arguments
 * follow from. The shard's weights (the anchor's memory) by the shard
 * and the block index; the activations by the workspace bases and
 * layout; shapes, degrees and flags by the sizes and this rank's rows.
 * Zeroed first; padding that still differed could only make a key miss,
 * never match. */
typedef struct block_key {
    char family[8];           /* "wan" */
    uint32_t b;               /* the block */
    const void *shard;        /* the shard (its pieces' addresses) */
    const void *ws, *hws;     /* workspace bases */
    geo_t g;                  /* sizes */
    wsl_t W;                  /* workspace layout */
    int64_t row0, Li, N, trows, mb, mper; /* this rank's rows (run_t) */
    wf_layout_t heads;        /* q / k / v's layout */
} block_key_t;
_Static_assert(sizeof(block_key_t) <= 4096, "graph keys are at most 4096 bytes (backend.h)");

/* Block b through the backend's graphs where it can (wf_fwd_block_run). */
static wf_status_t wan_block(run_t *x, uint32_t b)
{
    block_key_t k;
    memset(&k, 0, sizeof k);
    memcpy(k.family, "wan", 3);
    k.b = b;
    k.shard = x->s;
    k.ws = x->ws;
    k.hws = x->hws;
    memcpy(&k.g, &x->g, sizeof k.g);
    memcpy(&k.W, &x->W, sizeof k.W);
    k.row0 = x->row0;
    k.Li = x->Li;
    k.N = x->N;
    k.trows = x->trows;
    k.mb = x->mb;
    k.mper = x->mper;
    memcpy(&k.heads, &x->heads, sizeof k.heads);
    block_arg_t a = {x, b};
    return wf_fwd_block_run(x->ops, x->ctx, x->grp, &k, sizeof k, x->s->mem.dev, run_block,
                            &a);
}

/* norm_out, proj_out, the gather and (root) the output. */
static wf_status_t finish(run_t *x)
{
    const geo_t *g = &x->g;
    const int64_t C = g->C;
    float *modo = fp(x, x->W.modo), *out = fp(x, x->W.out);
    wf_status_t st;
    /* (shift, scale) = scale_shift_table + temb per batch row (per token) */
    TRY(x->ops->copy_rows(x->ctx, modo, (size_t)C * 8, fp(x, x->W.temb), (size_t)C * 4,
                          x->trows, (size_t)C * 4));
    TRY(x->ops->copy_rows(x->ctx, modo + C, (size_t)C * 8, fp(x, x->W.temb), (size_t)C * 4,
                          x->trows, (size_t)C * 4));
    TRY(x->ops->bias_act(x->ctx, modo, WF_DTYPE_F32, x->trows, 2 * C, 2 * C, x->s->sst_out,
                         WF_ACT_NONE, NULL, 0, WF_DTYPE_F32));
    TRY(ln_mod(x, fp(x, x->W.S), fp(x, x->W.nx), modo, 2 * C, 0, C));
    wf_layout_t il = wf_layout_full(C);
    TRY(wf_linear_apply_full_dt(&x->lin, &x->s->proj_out, ap(x, x->W.nx, 0), g->adt, C, &il,
                                x->N, WF_ACT_NONE, out));
    if (x->t != 0)
        return WF_OK;
    size_t n = (size_t)(x->N * g->OC) * sizeof(float);
    const float *og = out;
    if (g->P > 1) {
        size_t *cnt, *dsp;
        counts_of(x, g->OC, &cnt, &dsp);
        TRY(wf_comm_gatherv(x->grp->seq, out, n, x->root ? fp(x, x->W.outg) : NULL, cnt, dsp,
                            0));
        og = fp(x, x->W.outg);
    }
    if (!x->root)
        return WF_OK;
    size_t all = (size_t)(g->B * g->S * g->OC) * sizeof(float);
    if (x->dev) {
        TRY(x->ops->copy_d2h(x->ctx, x->hws + x->W.hout, og, all));
        TRY(x->ops->synchronize(x->ctx));
    } else if (og != hp(x, x->W.hout)) {
        memcpy(hp(x, x->W.hout), og, all);
    }
    const int64_t *row0 = (const int64_t *)(const void *)(x->hws + x->W.meta +
                                                          2 * (size_t)g->P * sizeof(size_t));
    unpatchify(x, row0, row0 + g->P);
    wf_convert_from_f32(x->io->out_data[0], x->io->out[0]->dtype, hp(x, x->W.vid),
                        (size_t)(g->B * g->S * g->OC));
    return WF_OK;
}

/* The whole forward; *stopped: a layer boundary said stop (every rank
 * stops there alike: no abort). */
static wf_status_t forward(run_t *x, bool *stopped)
{
    wf_status_t st;
    TRY(inputs(x));
    TRY(lin_full(x, &x->s->patch, fp(x, x->W.in + x->W.pat), x->N, WF_ACT_NONE,
                 fp(x, x->W.S)));
    TRY(embed(x));
    /* with a first-block cache, block 0 is the head: after it the cache
     * may stand for the rest (the stream is the video rows alone) */
    wf_fbc_t *fbc = x->io->fbc;
    float *S = fp(x, x->W.S);
    size_t n = (size_t)(x->N * x->g.C);
    bool skip = false;
    for (uint32_t b = 0; b < x->cfg->num_layers && !skip; b++) {
        if (x->io->boundary) {
            /* the same answer on every rank, nothing in flight: stop here */
            st = x->io->boundary(x->io->boundary_arg, (int64_t)b, false);
            if (st != WF_OK) {
                *stopped = true;
                return st;
            }
        }
        if (b == 0 && fbc)
            TRY(wf_fbc_head_begin(fbc, x->ops, x->ctx, S, n, n));
        TRY(wan_block(x, b));
        if (b == 0 && fbc)
            TRY(wf_fbc_head_end(fbc, x->ops, x->ctx, x->grp->seq, S, S, &skip));
    }
    if (fbc && !skip)
        TRY(wf_fbc_tail_end(fbc, x->ops, x->ctx, S));
    TRY(finish(x));
    /* the output (and everything else queued) complete on return */
    return x->dev ? x->ops->synchronize(x->ctx) : WF_OK;
}

wf_status_t wan_forward_run(const wf_wan_shard_t *shard, const wf_fwd_io_t *io,
                            const wf_fwd_group_t *group, const wf_backend_ops_t *ops,
                            wf_backend_ctx_t *ctx, void *workspace, size_t bytes,
                            void *host_ws, size_t host_bytes)
{
    /* validation every rank computes alike: fails everywhere, no abort */
    if (!shard || !io || !group || !ops || !wf_fwd_group_ok(group) ||
        wan_backend_check(&shard->cfg, ops, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    const int T = group->tp_degree, R = group->ring_degree, U = group->ulysses_degree;
    if (wan_forward_check(&shard->cfg, io, T, R, U, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;

    /* this rank's own arguments: a failure aborts the world */
    run_t x;
    memset(&x, 0, sizeof x);
    x.s = shard;
    x.cfg = &shard->cfg;
    x.io = io;
    x.grp = group;
    x.ops = ops;
    x.ctx = ctx;
    x.ws = workspace;
    x.dev = on_device(ops);
    x.hws = x.dev ? host_ws : workspace;
    geo_of(x.cfg, io, T, R, U, &x.g);
    x.g.adt = wan_act_dtype(shard, x.dev);
    x.g.tdt = text_dtype(shard, &x.g);
    const geo_t *g = &x.g;
    wf_status_t st = WF_E_BAD_ARGUMENT;
    bool stopped = false;
    szc_t sc = { false };
    ws_layout(&sc, g, ops, &x.W);
    x.t = T > 1 ? wf_comm_rank(group->tp) : 0;
    x.i = g->P > 1 ? wf_comm_rank(group->seq) : 0;
    x.root = x.t == 0 && x.i == 0;
    /* a device shard on the CPU or the other way round, or another
     * rank's: a bug */
    if (sc.overflow || shard->tp != T || shard->tp_rank != x.t ||
        (shard->mem.dev != NULL) != x.dev || !workspace ||
        ((uintptr_t)workspace & (x.dev ? 255u : 63u)) != 0 || bytes < x.W.total ||
        (x.dev && (!host_ws || ((uintptr_t)host_ws & 63u) != 0 || host_bytes < x.W.htotal)))
        goto fail;
    if (x.root && (!io->in_data[IN_HS] || !io->in_data[g->tok ? IN_TT : IN_T] ||
                   !io->in_data[IN_EHS] || (g->SI && !io->in_data[IN_EHI]) ||
                   !io->out_data[0]))
        goto fail;
    x.heads = g->T > 1 ? (wf_layout_t){ .n = g->C, .nb = 1, .block = { g->C } }
                       : wf_layout_full(g->C);
    x.lin = (wf_linear_env_t){
        .ops = ops, .ctx = ctx, .tp = group->tp, .T = T, .t = x.t,
        .G = fp(&x, x.W.G), .G_n = x.W.lin_n, .Xc = fp(&x, x.W.Xc), .Xc_n = x.W.lin_n,
        .Y = fp(&x, x.W.Y), .Y_n = x.W.lin_n, .lws = x.ws + x.W.lws, .lws_bytes = x.W.lws_bytes,
    };
    /* every seq rank's tokens, in the host meta after the counts */
    int64_t *row0 = (int64_t *)(void *)(x.hws + x.W.meta + 2 * (size_t)g->P * sizeof(size_t));
    for (int j = 0; j < g->P; j++)
        if ((st = tokens_of(g, j, &row0[j], &row0[g->P + j])) != WF_OK)
            goto fail;
    x.row0 = row0[x.i];
    x.Li = row0[g->P + x.i];
    x.N = g->B * x.Li;
    x.trows = g->tok ? x.N : g->B;
    x.mb = g->tok ? x.N : g->B;
    x.mper = g->tok ? 1 : x.Li;
    if ((st = forward(&x, &stopped)) == WF_OK)
        return WF_OK;
fail:
    if (x.dev)
        (void)ops->synchronize(ctx); /* nothing queued outlives the call */
    if (!stopped)
        wf_fwd_group_abort(group);
    return st;
}
