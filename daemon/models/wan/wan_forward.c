/* wan_forward.c — diffusers' WanTransformer3DModel forward (Wan 2.1
 * text-to-video) on one rank of a ring x ulysses mesh at tp = 1, on the
 * CPU backend: the job check, the workspace layout and the run.
 *
 * Inputs, in the schema's order (modelfiles/wan/wan_family.c):
 * hidden_states (B, C_in, F, H, W), timestep (B), encoder_hidden_states
 * (B, S_txt, text_dim); output (B, C_out, F, H, W).
 *
 * Names (one rank): P = R * U seq ranks (this one i), C = inner_dim, H
 * heads of D, FF = ffn_dim; the video is a grid of (F', H', W') = (F / pt,
 * H / ph, W / pw) patches, S = F' H' W' tokens in row-major order (the
 * order of diffusers' flatten(2)); this rank holds the contiguous tokens
 * [row0, row0 + Li), Li = S / P (cp_attention's seq shard i; diffusers'
 * _cp_plan splits blocks.0's hidden_states and the rope tables on the
 * sequence the same way), N = B * Li rows, Nt = B * S_txt text rows.
 *
 * The flow, each step a backend op (backend.h "model ops") unless said:
 *   - the root converts the inputs to f32 and broadcasts them over the
 *     seq group (latents and text are small next to the activations);
 *     each rank cuts its tokens' patches out of the latent (a reorder,
 *     here) and runs patch_embedding as a linear over them;
 *   - condition embedder: timestep_embed (flip_sin_to_cos, shift 0) ->
 *     time_embedder (linear SiLU linear) = temb -> SiLU -> time_proj =
 *     tproj (B, 6C); text_embedder (linear GELU-tanh linear) on every text
 *     token (every rank: the text is the cross-attention's K / V,
 *     replicated);
 *   - rope_grid: the 3-D RoPE tables of this rank's tokens;
 *   - each block: mod = tproj + scale_shift_table (bias_act); modln;
 *     self-attention (q / k RMSNorm across all heads: rms_norm; RoPE and
 *     the (B, L, H, D) order: head_norm_rope without a norm; attention on
 *     one rank, cp_attention's local mode over P); gated residual;
 *     norm2 (layer_norm with affine, or none); cross-attention (q of this
 *     rank's tokens against every text token: the backend's attention,
 *     no exchange); residual; modln, feed-forward (GELU-tanh), gated
 *     residual;
 *   - norm_out: modln with temb + scale_shift_table; proj_out; the
 *     tokens gathered on the root, which unpatchifies (a reorder) and
 *     converts to the output's dtype.
 *
 * Precision: f32 activations, the CPU backend's norms' statistics in
 * double. diffusers runs the timestep embedding and the modulation in
 * f32 whatever the model's dtype; so does this.
 *
 * Errors after validation abort the seq group's world (wf_comm_abort),
 * as cp_attention.h, so no peer waits in a collective. Nothing here
 * logs, nothing is allocated during a run.
 */
#include "wan_run.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "errf.h"
#include "parallel/cp_attention.h"
#include "tensor.h"

enum { IN_HS, IN_T, IN_EHS, N_IN };

/* Sizes of a job on one rank (identical on every rank). */
typedef struct geo {
    int64_t B, CI, F, Hh, Ww;      /* hidden_states (B, CI, F, Hh, Ww) */
    int64_t Fp, Hp, Wp, S;         /* patch grid and its tokens */
    int64_t St, TD;                /* text tokens, text_dim */
    int64_t C, H, D, FF, PIN, OC;  /* widths: PIN = CI pt ph pw, OC = C_out pt ph pw */
    int64_t Li, N, Nt;             /* tokens and rows per rank */
    int R, U, P;                   /* degrees */
} geo_t;

/* Byte offsets of the workspace's regions (64 bytes apart; float counts
 * in comments). */
typedef struct wsl {
    size_t meta;              /* 2 P size_t: gather counts */
    size_t hs, ts, eh;        /* inputs in f32: (B CI F Hh Ww), (B), (Nt, TD) */
    size_t xp;                /* this rank's patches (N, PIN) */
    size_t tf, tmp, temb, tproj; /* (B, freq), (B, C), (B, C), (B, 6C) */
    size_t mod, modo;         /* (B, 6C) a block's modulation, (B, 2C) norm_out's */
    size_t ctxh, ctx;         /* text embedder hidden / output (Nt, C) */
    size_t rcos, rsin;        /* RoPE (Li, D) */
    size_t S, nx;             /* residual stream, normed (N, C) */
    size_t q, k, v;           /* projections (max(N, Nt), C) */
    size_t qj, kj;            /* RoPE'd q / k (B, Li, H, D) */
    size_t ao, lo;            /* attention out, a linear's out (N, C) */
    size_t hid;               /* feed-forward hidden (N, FF) */
    size_t out;               /* proj_out (N, OC) */
    size_t outg;              /* root: every rank's (P N OC) */
    size_t vid;               /* root: the unpatchified output (B C_out F Hh Ww) */
    size_t lws;               /* linear workspace */
    size_t aws;               /* attention workspace */
    size_t lws_bytes, aws_bytes;
    size_t total;             /* bytes */
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
    unsigned char *ws;
    int i;                    /* seq index */
    int64_t row0;             /* first token of this rank */
} run_t;

static float *fp(const run_t *x, size_t off) { return (float *)(void *)(x->ws + off); }

/* ---- sizes -------------------------------------------------------------- */

static void geo_of(const wf_wan_config_t *c, const wf_fwd_io_t *io, int R, int U, geo_t *g)
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
    g->PIN = (int64_t)c->in_channels * c->patch_elems;
    g->OC = (int64_t)c->out_channels * c->patch_elems;
    g->R = R;
    g->U = U;
    g->P = R * U;
    g->Li = g->S / g->P;
    g->N = g->B * g->Li;
    g->Nt = g->B * g->St;
}

/* The self-attention's cp job (local mode), without pointers. */
static wf_cp_job_t cp_job_of(const geo_t *g)
{
    wf_cp_job_t j;
    memset(&j, 0, sizeof j);
    j.B = g->B;
    j.Sq = j.Skv = g->S;
    j.Hq = j.Hkv = g->H;
    j.D = g->D;
    j.hq_begin = 0;
    j.hq_end = g->H;
    j.scale = (float)(1.0 / sqrt((double)g->D));
    j.q_dtype = j.k_dtype = j.v_dtype = j.out_dtype = WF_DTYPE_F32;
    j.rotate_method = WF_CP_ROTATE_ALLGATHER;
    j.convert_to_fp32 = true;
    j.ulysses_anything = g->H % g->U != 0; /* heads need not divide over ulysses */
    j.local = true;
    return j;
}

/* Kernel params of an attention of Li query tokens against Skv keys on
 * this rank, every head, without pointers. */
static wf_attn_params_t attn_params_of(const geo_t *g, int64_t Skv)
{
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = g->B;
    p.Sq = g->Li;
    p.Skv = Skv;
    p.Hq = p.Hkv = g->H;
    p.D = g->D;
    p.h_begin = 0;
    p.h_end = g->H;
    p.scale = (float)(1.0 / sqrt((double)g->D));
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_F32;
    return p;
}

/* The largest linear workspace of the run's layers. */
static size_t lin_ws(const wf_backend_ops_t *ops, const geo_t *g, int64_t freq, int64_t TD)
{
    const int64_t shapes[][3] = {
        { g->N, g->PIN, g->C }, { g->B, freq, g->C }, { g->B, g->C, g->C },
        { g->B, g->C, 6 * g->C }, { g->Nt, TD, g->C }, { g->Nt, g->C, g->C },
        { g->N, g->C, g->C }, { g->N, g->C, g->FF }, { g->N, g->FF, g->C },
        { g->N, g->C, g->OC },
    };
    size_t m = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        wf_linear_params_t p;
        memset(&p, 0, sizeof p);
        p.rows = shapes[i][0];
        p.in = shapes[i][1];
        p.out = shapes[i][2];
        p.w_dtype = WF_DTYPE_F32;
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

/* Lay the regions out; false on overflow. */
static bool ws_layout(const wf_wan_config_t *c, const geo_t *g, const wf_backend_ops_t *ops,
                      wsl_t *W)
{
    memset(W, 0, sizeof *W);
    size_t off = 0;
    bool ok = true;
#define REGION(field, nfloats)                                                   \
    do {                                                                         \
        double n_ = (double)(nfloats) * sizeof(float);                           \
        if (n_ > (double)(SIZE_MAX / 4))                                         \
            ok = false;                                                          \
        W->field = off;                                                          \
        off += ((size_t)(ok ? n_ : 0) + 63) & ~(size_t)63;                       \
    } while (0)
    const int64_t KV = g->N > g->Nt ? g->N : g->Nt;
    REGION(meta, 2.0 * g->P * sizeof(size_t) / sizeof(float));
    REGION(hs, (double)g->B * g->CI * g->F * g->Hh * g->Ww);
    REGION(ts, g->B);
    REGION(eh, (double)g->Nt * g->TD);
    REGION(xp, (double)g->N * g->PIN);
    REGION(tf, (double)g->B * c->freq_dim);
    REGION(tmp, (double)g->B * g->C);
    REGION(temb, (double)g->B * g->C);
    REGION(tproj, 6.0 * g->B * g->C);
    REGION(mod, 6.0 * g->B * g->C);
    REGION(modo, 2.0 * g->B * g->C);
    REGION(ctxh, (double)g->Nt * g->C);
    REGION(ctx, (double)g->Nt * g->C);
    REGION(rcos, (double)g->Li * g->D);
    REGION(rsin, (double)g->Li * g->D);
    REGION(S, (double)g->N * g->C);
    REGION(nx, (double)g->N * g->C);
    REGION(q, (double)KV * g->C);
    REGION(k, (double)KV * g->C);
    REGION(v, (double)KV * g->C);
    REGION(qj, (double)g->N * g->C);
    REGION(kj, (double)g->N * g->C);
    REGION(ao, (double)g->N * g->C);
    REGION(lo, (double)g->N * g->C);
    REGION(hid, (double)g->N * g->FF);
    REGION(out, (double)g->N * g->OC);
    REGION(outg, (double)g->P * g->N * g->OC);
    REGION(vid, (double)g->P * g->N * g->OC);
    W->lws_bytes = lin_ws(ops, g, c->freq_dim, g->TD);
    REGION(lws, (double)W->lws_bytes / sizeof(float));
    wf_attn_params_t sp = attn_params_of(g, g->Li), xp = attn_params_of(g, g->St);
    size_t a = ops->attention_workspace(&xp);
    size_t b;
    if (g->P > 1) {
        wf_cp_job_t j = cp_job_of(g);
        b = wf_cp_attention_workspace(&j, g->R, g->U, ops);
        ok = ok && b != 0 && b != SIZE_MAX;
    } else {
        b = ops->attention_workspace(&sp);
    }
    W->aws_bytes = a > b ? a : b;
    REGION(aws, (double)W->aws_bytes / sizeof(float));
#undef REGION
    W->total = off;
    return ok;
}

/* ---- checks ------------------------------------------------------------- */

wf_status_t wan_backend_check(const wf_wan_config_t *cfg, const wf_backend_ops_t *ops,
                              char *err, size_t err_len)
{
    static const wf_backend_op_t need[] = {
        WF_BACKEND_OP_ATTENTION, WF_BACKEND_OP_LINEAR, WF_BACKEND_OP_BIAS_ACT,
        WF_BACKEND_OP_ACT, WF_BACKEND_OP_ADD, WF_BACKEND_OP_MODLN,
        WF_BACKEND_OP_GATE_RESIDUAL, WF_BACKEND_OP_HEAD_NORM_ROPE, WF_BACKEND_OP_COPY_ROWS,
        WF_BACKEND_OP_RMS_NORM, WF_BACKEND_OP_LAYER_NORM, WF_BACKEND_OP_ROPE_GRID,
        WF_BACKEND_OP_TIMESTEP_EMBED,
    };
    if (!ops)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no backend");
    if (ops->copy_h2d || ops->mem_alloc)
        return wf_errf_status(WF_E_UNSUPPORTED, err, err_len,
                              "%s runs on the CPU backend only so far, not on the %s "
                              "backend", WF_WAN_CLASS_NAME, ops->name);
    wf_backend_op_t miss;
    if (wf_backend_require(ops, need, sizeof need / sizeof need[0], &miss) != WF_OK)
        return wf_errf_status(WF_E_UNSUPPORTED, err, err_len, "backend %s lacks %s", ops->name,
                              wf_backend_op_name(miss));
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
    if (tp != 1)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "%s: tensor parallelism is not implemented for the Wan family "
                              "yet (tp = %d)", WF_WAN_CLASS_NAME, tp);
    if (R < 1 || U < 1 || (int64_t)R * U > WAN_MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "bad degrees (ring %d, "
                              "ulysses %d)", R, U);
    if (io->n_in != N_IN || !io->in[IN_HS] || !io->in[IN_T] || !io->in[IN_EHS] ||
        io->n_out != 1 || !io->out[0])
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "a Wan forward takes hidden_states, timestep and "
                              "encoder_hidden_states and gives output");
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
    geo_of(c, io, R, U, &g);
    if (g.S % g.P != 0)
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "Tensor size along dimension to be sharded must be divisible "
                              "by mesh size: the %" PRId64 " video tokens of hidden_states "
                              "(F/%" PRIu32 " x H/%" PRIu32 " x W/%" PRIu32 ") over ring x "
                              "ulysses = %d", g.S, c->patch_size[0], c->patch_size[1],
                              c->patch_size[2], g.P);
    if (g.P > 1) {
        wf_cp_job_t j = cp_job_of(&g);
        wf_status_t st = wf_cp_attention_check(&j, R, U, err, err_len);
        if (st != WF_OK)
            return st;
    }
    wsl_t W;
    if (!ws_layout(c, &g, wf_backend_cpu(), &W))
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len, "the job is too large");
    return WF_OK;
}

size_t wan_forward_workspace(const wf_wan_config_t *c, const wf_fwd_io_t *io, int tp, int R,
                             int U, const wf_backend_ops_t *ops, size_t *ret_host)
{
    char err[256];
    if (ret_host)
        *ret_host = 0;
    if (wan_forward_check(c, io, tp, R, U, err, sizeof err) != WF_OK)
        return SIZE_MAX;
    geo_t g;
    wsl_t W;
    geo_of(c, io, R, U, &g);
    if (!ws_layout(c, &g, ops, &W))
        return SIZE_MAX;
    return W.total;
}

/* ---- the run ------------------------------------------------------------ */

/* y (rows, out) = act(x (rows, in) W^T + b), contiguous rows. */
static wf_status_t lin(run_t *x, const wan_lin_t *L, const float *in, int64_t rows,
                       wf_act_t act, float *y)
{
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows;
    p.in = L->in;
    p.out = L->out;
    p.x = in;
    p.ldx = L->in;
    p.w_dtype = WF_DTYPE_F32;
    p.ldw = L->in;
    p.nwb = 1;
    p.wb[0] = L->w;
    p.wbw[0] = L->in;
    p.bias = L->b;
    p.act = act;
    p.y = y;
    p.ldy = L->out;
    return x->ops->linear(x->ctx, &p, x->W.lws_bytes ? x->ws + x->W.lws : NULL);
}

/* dst = LN(src) (1 + scale) + shift over this rank's rows; row b of mod
 * (ld_mod floats) holds shift at shift_off and scale at scale_off. */
static wf_status_t ln_mod(run_t *x, const float *src, float *dst, const float *mod,
                          int64_t ld_mod, int64_t shift_off, int64_t scale_off)
{
    wf_modln_params_t p = {
        .nbatch = x->g.B, .per = x->g.Li, .C = x->g.C, .src = src, .ld_src = x->g.C,
        .dst = dst, .ld_dst = x->g.C, .shift = mod + shift_off, .scale = mod + scale_off,
        .ld_mod = ld_mod, .eps = x->cfg->eps,
    };
    return x->ops->modln(x->ctx, &p);
}

/* RMSNorm across all heads of rows (rows, C), in place. */
static wf_status_t rms(run_t *x, float *v, int64_t rows, const float *w)
{
    wf_rmsnorm_params_t p = {
        .rows = rows, .n = x->g.C, .src = v, .ld_src = x->g.C, .dst = v, .ld_dst = x->g.C,
        .weight = w, .eps = x->cfg->eps,
    };
    return x->ops->rms_norm(x->ctx, &p);
}

/* RoPE of this rank's rows of src (N, C) into dst (B, Li, H, D). */
static wf_status_t rope(run_t *x, const float *src, float *dst)
{
    wf_headrope_params_t p = {
        .nbatch = x->g.B, .per = x->g.Li, .L = x->g.Li, .row0 = 0, .H = x->g.H, .D = x->g.D,
        .src = src, .ld_src = x->g.C, .dst = dst, .norm = NULL, .cos = fp(x, x->W.rcos),
        .sin = fp(x, x->W.rsin), .eps = x->cfg->eps,
    };
    return x->ops->head_norm_rope(x->ctx, &p);
}

/* Attention of this rank's queries q (B, Li, H, D) against k, v (B, Skv,
 * H, D) into out (B, Li, H, D): the self-attention over the seq group
 * (cp_attention's local mode, Skv then this rank's Li too) or on this
 * rank alone. */
static wf_status_t attend(run_t *x, const float *q, const float *k, const float *v,
                          int64_t Skv, bool over_seq, float *out)
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
        return wf_cp_attention_run(&j, &cg, x->ops, x->ctx, aws, x->W.aws_bytes);
    }
    wf_attn_params_t p = attn_params_of(&x->g, Skv);
    p.q = q;
    p.k = k;
    p.v = v;
    p.out = out;
    return x->ops->attention(x->ctx, &p, aws);
}

/* The root's inputs in f32, broadcast over the seq group. */
static wf_status_t inputs(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_fwd_io_t *io = x->io;
    size_t nh = (size_t)(g->B * g->CI * g->F * g->Hh * g->Ww), ne = (size_t)(g->Nt * g->TD);
    if (x->i == 0) {
        wf_convert_to_f32(fp(x, x->W.hs), io->in_data[IN_HS], io->in[IN_HS]->dtype, nh);
        wf_convert_to_f32(fp(x, x->W.ts), io->in_data[IN_T], io->in[IN_T]->dtype,
                          (size_t)g->B);
        wf_convert_to_f32(fp(x, x->W.eh), io->in_data[IN_EHS], io->in[IN_EHS]->dtype, ne);
    }
    if (g->P == 1)
        return WF_OK;
    /* hs, ts and eh are consecutive regions: one broadcast */
    return wf_comm_broadcast(x->grp->seq, x->ws + x->W.hs, x->W.xp - x->W.hs, 0);
}

/* This rank's patches (N, PIN): row (b, t - row0), column ((c pt + a) ph
 * + e) pw + d, the Conv3d weight's flattening (out, c, kt, kh, kw). */
static void patchify(run_t *x)
{
    const geo_t *g = &x->g;
    const uint32_t *ps = x->cfg->patch_size;
    const float *hs = fp(x, x->W.hs);
    float *xp = fp(x, x->W.xp);
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t t = 0; t < g->Li; t++) {
            int64_t tok = x->row0 + t;
            int64_t f = tok / (g->Hp * g->Wp), h = tok / g->Wp % g->Hp, w = tok % g->Wp;
            float *row = xp + (b * g->Li + t) * g->PIN;
            int64_t col = 0;
            for (int64_t c = 0; c < g->CI; c++)
                for (int64_t a = 0; a < ps[0]; a++)
                    for (int64_t e = 0; e < ps[1]; e++)
                        for (int64_t d = 0; d < ps[2]; d++)
                            row[col++] = hs[(((b * g->CI + c) * g->F + f * ps[0] + a) * g->Hh +
                                             h * ps[1] + e) * g->Ww + w * ps[2] + d];
        }
}

/* The root's output (B, C_out, F, Hh, Ww) from every rank's proj_out rows
 * (P, B, Li, OC): token t of batch b is rank t / Li's row b Li + t % Li;
 * column ((a ph + e) pw + d) C_out + c (diffusers' reshape to (B, F', H',
 * W', pt, ph, pw, C_out) and permute). */
static void unpatchify(run_t *x, const float *og, float *vid)
{
    const geo_t *g = &x->g;
    const uint32_t *ps = x->cfg->patch_size;
    const int64_t CO = x->cfg->out_channels;
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t tok = 0; tok < g->S; tok++) {
            int64_t f = tok / (g->Hp * g->Wp), h = tok / g->Wp % g->Hp, w = tok % g->Wp;
            const float *row = og + ((tok / g->Li) * g->N + b * g->Li + tok % g->Li) * g->OC;
            int64_t col = 0;
            for (int64_t a = 0; a < ps[0]; a++)
                for (int64_t e = 0; e < ps[1]; e++)
                    for (int64_t d = 0; d < ps[2]; d++)
                        for (int64_t c = 0; c < CO; c++)
                            vid[(((b * CO + c) * g->F + f * ps[0] + a) * g->Hh + h * ps[1] + e) *
                                    g->Ww + w * ps[2] + d] = row[col++];
        }
}

#define TRY(e)                                                                   \
    do {                                                                         \
        st = (e);                                                                \
        if (st != WF_OK)                                                         \
            return st;                                                           \
    } while (0)

/* Condition embedder and RoPE tables: temb, tproj, the text's ctx. */
static wf_status_t embed(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_wan_shard_t *s = x->s;
    wf_status_t st;
    wf_timestep_params_t tp = {
        .t = fp(x, x->W.ts), .B = g->B, .dim = x->cfg->freq_dim, .flip_sin_to_cos = true,
        .downscale_freq_shift = 0.0f, .scale = 1.0f, .max_period = 10000.0f,
        .dst = fp(x, x->W.tf),
    };
    TRY(x->ops->timestep_embed(x->ctx, &tp));
    TRY(lin(x, &s->t1, fp(x, x->W.tf), g->B, WF_ACT_SILU, fp(x, x->W.tmp)));
    TRY(lin(x, &s->t2, fp(x, x->W.tmp), g->B, WF_ACT_NONE, fp(x, x->W.temb)));
    TRY(x->ops->act(x->ctx, fp(x, x->W.tmp), fp(x, x->W.temb), g->B * g->C, WF_ACT_SILU));
    TRY(lin(x, &s->tproj, fp(x, x->W.tmp), g->B, WF_ACT_NONE, fp(x, x->W.tproj)));
    TRY(lin(x, &s->x1, fp(x, x->W.eh), g->Nt, WF_ACT_GELU_TANH, fp(x, x->W.ctxh)));
    TRY(lin(x, &s->x2, fp(x, x->W.ctxh), g->Nt, WF_ACT_NONE, fp(x, x->W.ctx)));
    wf_rope_grid_params_t rp = {
        .n_axes = 3, .grid = { g->Fp, g->Hp, g->Wp },
        .axes_dims = { x->cfg->rope_dims[0], x->cfg->rope_dims[1], x->cfg->rope_dims[2] },
        .theta = WF_WAN_ROPE_THETA, .D = g->D, .row0 = x->row0, .L = g->Li,
        .cos = fp(x, x->W.rcos), .sin = fp(x, x->W.rsin),
    };
    return x->ops->rope_grid(x->ctx, &rp);
}

/* diffusers' WanTransformerBlock on this rank's rows of the stream. */
static wf_status_t block(run_t *x, const wan_block_t *k)
{
    const geo_t *g = &x->g;
    const int64_t C = g->C, C6 = 6 * C;
    float *S = fp(x, x->W.S), *nx = fp(x, x->W.nx), *mod = fp(x, x->W.mod);
    float *q = fp(x, x->W.q), *kk = fp(x, x->W.k), *v = fp(x, x->W.v);
    float *ao = fp(x, x->W.ao), *lo = fp(x, x->W.lo);
    wf_status_t st;
    /* (shift, scale, gate) x (self-attention, feed-forward) per batch row */
    TRY(x->ops->copy_rows(x->ctx, mod, (size_t)C6 * 4, fp(x, x->W.tproj), (size_t)C6 * 4, g->B,
                          (size_t)C6 * 4));
    TRY(x->ops->bias_act(x->ctx, mod, g->B, C6, C6, k->sst, WF_ACT_NONE));
    /* 1. self-attention */
    TRY(ln_mod(x, S, nx, mod, C6, 0, C));
    TRY(lin(x, &k->q1, nx, g->N, WF_ACT_NONE, q));
    TRY(lin(x, &k->k1, nx, g->N, WF_ACT_NONE, kk));
    TRY(lin(x, &k->v1, nx, g->N, WF_ACT_NONE, v));
    TRY(rms(x, q, g->N, k->nq1));
    TRY(rms(x, kk, g->N, k->nk1));
    TRY(rope(x, q, fp(x, x->W.qj)));
    TRY(rope(x, kk, fp(x, x->W.kj)));
    TRY(attend(x, fp(x, x->W.qj), fp(x, x->W.kj), v, g->Li, true, ao));
    TRY(lin(x, &k->o1, ao, g->N, WF_ACT_NONE, lo));
    TRY(x->ops->gate_residual(x->ctx, S, C, lo, C, mod + 2 * C, C6, g->B, g->Li, C));
    /* 2. cross-attention: this rank's tokens against the whole text */
    const float *in2 = S;
    if (k->n2w) {
        wf_layernorm_params_t lp = {
            .rows = g->N, .C = C, .src = S, .ld_src = C, .dst = nx, .ld_dst = C,
            .weight = k->n2w, .bias = k->n2b, .eps = x->cfg->eps,
        };
        TRY(x->ops->layer_norm(x->ctx, &lp));
        in2 = nx;
    }
    TRY(lin(x, &k->q2, in2, g->N, WF_ACT_NONE, q));
    TRY(lin(x, &k->k2, fp(x, x->W.ctx), g->Nt, WF_ACT_NONE, kk));
    TRY(lin(x, &k->v2, fp(x, x->W.ctx), g->Nt, WF_ACT_NONE, v));
    TRY(rms(x, q, g->N, k->nq2));
    TRY(rms(x, kk, g->Nt, k->nk2));
    TRY(attend(x, q, kk, v, g->St, false, ao));
    TRY(lin(x, &k->o2, ao, g->N, WF_ACT_NONE, lo));
    TRY(x->ops->add(x->ctx, S, lo, g->N * C));
    /* 3. feed-forward */
    TRY(ln_mod(x, S, nx, mod, C6, 3 * C, 4 * C));
    TRY(lin(x, &k->ff0, nx, g->N, WF_ACT_GELU_TANH, fp(x, x->W.hid)));
    TRY(lin(x, &k->ff2, fp(x, x->W.hid), g->N, WF_ACT_NONE, lo));
    return x->ops->gate_residual(x->ctx, S, C, lo, C, mod + 5 * C, C6, g->B, g->Li, C);
}

/* norm_out, proj_out, the gather and (root) the output. */
static wf_status_t finish(run_t *x)
{
    const geo_t *g = &x->g;
    const int64_t C = g->C;
    float *modo = fp(x, x->W.modo), *out = fp(x, x->W.out);
    wf_status_t st;
    /* (shift, scale) = scale_shift_table + temb per batch row */
    TRY(x->ops->copy_rows(x->ctx, modo, (size_t)C * 8, fp(x, x->W.temb), (size_t)C * 4, g->B,
                          (size_t)C * 4));
    TRY(x->ops->copy_rows(x->ctx, modo + C, (size_t)C * 8, fp(x, x->W.temb), (size_t)C * 4,
                          g->B, (size_t)C * 4));
    TRY(x->ops->bias_act(x->ctx, modo, g->B, 2 * C, 2 * C, x->s->sst_out, WF_ACT_NONE));
    TRY(ln_mod(x, fp(x, x->W.S), fp(x, x->W.nx), modo, 2 * C, 0, C));
    TRY(lin(x, &x->s->proj_out, fp(x, x->W.nx), g->N, WF_ACT_NONE, out));
    const float *og = out;
    size_t n = (size_t)(g->N * g->OC);
    if (g->P > 1) {
        size_t *cnt = (size_t *)(void *)(x->ws + x->W.meta), *dsp = cnt + g->P;
        for (int r = 0; r < g->P; r++) {
            cnt[r] = n * sizeof(float);
            dsp[r] = (size_t)r * n * sizeof(float);
        }
        TRY(wf_comm_gatherv(x->grp->seq, out, n * sizeof(float), fp(x, x->W.outg), cnt, dsp,
                            0));
        og = fp(x, x->W.outg);
    }
    if (x->i == 0) {
        unpatchify(x, og, fp(x, x->W.vid));
        wf_convert_from_f32(x->io->out_data[0], x->io->out[0]->dtype, fp(x, x->W.vid),
                            (size_t)g->P * n);
    }
    return WF_OK;
}

/* The whole forward; *stopped: a layer boundary said stop (every rank
 * stops there alike: no abort). */
static wf_status_t forward(run_t *x, bool *stopped)
{
    wf_status_t st;
    TRY(inputs(x));
    patchify(x);
    TRY(lin(x, &x->s->patch, fp(x, x->W.xp), x->g.N, WF_ACT_NONE, fp(x, x->W.S)));
    TRY(embed(x));
    for (uint32_t b = 0; b < x->cfg->num_layers; b++) {
        if (x->io->boundary) {
            /* the same answer on every rank, nothing in flight: stop here */
            st = x->io->boundary(x->io->boundary_arg, (int64_t)b, false);
            if (st != WF_OK) {
                *stopped = true;
                return st;
            }
        }
        TRY(block(x, &x->s->blk[b]));
    }
    return finish(x);
}

wf_status_t wan_forward_run(const wf_wan_shard_t *shard, const wf_fwd_io_t *io,
                            const wf_fwd_group_t *group, const wf_backend_ops_t *ops,
                            wf_backend_ctx_t *ctx, void *workspace, size_t bytes)
{
    char err[256];
    if (!shard || !io || !group || !ops || !workspace)
        return WF_E_BAD_ARGUMENT;
    const int R = group->ring_degree, U = group->ulysses_degree;
    if (shard->tp != 1 || group->tp_degree != 1 ||
        wan_forward_check(&shard->cfg, io, 1, R, U, err, sizeof err) != WF_OK ||
        wan_backend_check(&shard->cfg, ops, err, sizeof err) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    run_t x;
    memset(&x, 0, sizeof x);
    x.s = shard;
    x.cfg = &shard->cfg;
    x.io = io;
    x.grp = group;
    x.ops = ops;
    x.ctx = ctx;
    x.ws = workspace;
    geo_of(x.cfg, io, R, U, &x.g);
    if (!ws_layout(x.cfg, &x.g, ops, &x.W) || bytes < x.W.total ||
        (x.g.P > 1 && !group->seq))
        return WF_E_BAD_ARGUMENT;
    x.i = x.g.P > 1 ? wf_comm_rank(group->seq) : 0;
    if (x.i == 0 && (!io->in_data[IN_HS] || !io->in_data[IN_T] || !io->in_data[IN_EHS] ||
                     !io->out_data[0]))
        return WF_E_BAD_ARGUMENT; /* every rank's check passed: the root alone returns */
    /* this rank's tokens: cp_attention's seq shard i (one piece, no
     * load balance) */
    if (x.g.P > 1) {
        wf_cp_job_t j = cp_job_of(&x.g);
        wf_cp_seg_t seg[WF_CP_MAX_SEGS];
        int nseg = 0;
        if (wf_cp_attention_segments(&j, R, U, x.i, false, false, seg, &nseg) != WF_OK ||
            nseg != 1 || seg[0].len != x.g.Li)
            return WF_E_INTERNAL;
        x.row0 = seg[0].start;
    }
    bool stopped = false;
    wf_status_t st = forward(&x, &stopped);
    if (st != WF_OK && !stopped && x.g.P > 1)
        wf_comm_abort(group->seq);
    return st;
}
