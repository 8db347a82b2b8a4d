/* flux_forward.c — diffusers' FluxTransformer2DModel forward on one rank
 * of a tp x ring x ulysses mesh: the job check, the workspace layout and
 * the driver (inputs and embedders, the blocks in order, norm_out and
 * proj_out, the output gathered on the root). See flux_forward.h for the
 * contract. The parts, by part of the model, sharing flux_run.h:
 *   flux_shard.c   the plan check and the shards cut from the host copy
 *   flux_embed.c   the inputs over the mesh, RoPE tables, time / text
 *                  embedders
 *   flux_blocks.c  the joint attention and the double / single blocks
 *
 * Names (one rank): T tp ranks (this one t), P = R * U seq ranks (this one
 * i), C = inner_dim, H heads of D, M = mlp_hidden_dim, OC = p^2 *
 * out_channels. Lt and Li tokens of each stream on this rank, L = Lt + Li;
 * Nt = B * Lt, Ni = B * Li, N = Nt + Ni rows.
 *
 * Tokens. Rank j's L_j joint rows are its seq shard of cp_attention's
 * plan for the joint sequence S = S_txt + S_img (cp_attention.h local
 * mode; tensor_split's sizes, uneven where P does not divide S: the
 * ring's anything mode): piece j of the tensor_split of S_txt into P,
 * then the L_j - Lt_j image tokens that follow rank j - 1's (flux_tokens).
 * When P divides S_txt and S_img that is S_txt / P and S_img / P, the
 * split of diffusers' _cp_plan; otherwise every rank has its own Lt, Li,
 * the input records and buffers are sized by the most of any rank, and
 * the output is gathered with each rank's count. Heads that ulysses does
 * not divide split as cp_attention's ulysses_anything does.
 *
 * Stream order. The residual stream is one (N, C) buffer S: the text rows
 * of every batch (b-major), then the image rows. Double blocks work on its
 * two halves with their own weights, single blocks on all of it; only the
 * attention sees the joint order (B, L) — each batch's [text piece, image
 * piece], which is what diffusers' cat([encoder, hidden]) is on one rank —
 * and pack() / unpack() (flux_blocks.c) move rows between the two
 * orders (with one batch row they agree: the attention's output is read
 * where it lies). The RoPE table is built from this rank's ids pieces in
 * that joint order.
 *
 * Layouts over tp (models/linear.h). An activation's columns are full
 * on every rank or split by the producing linear's placement;
 * wf_layout_convert turns any layout into any other, every tp rank
 * entering the same collectives. The attention runs on the heads of the
 * q / k / v projections' common split layout, or on every head when they
 * differ.
 *
 * Workspace. One fixed list of regions (ws_layout), computed alike by
 * wf_flux_forward_workspace and the run. Its widths are the full ones, so
 * that one figure serves every plan (the workspace call has no plan).
 *
 * Memory. Every layer operation is the backend's (backend.h "model
 * ops"), every exchange the comm's; nothing here touches an activation.
 * On the CPU backend the workspace and the shards are host memory. On a
 * backend with device memory (copy_h2d) they are the device's: the root
 * copies each raw input chunk up and converts it there, the output is
 * converted there and copied down, the comms move device buffers (NCCL,
 * or a host comm behind comm_staged.h), P > 1 attention is
 * cp_attention's device mode; only the counts of the v-collectives and
 * cp_attention's host part live in the small host workspace.
 *
 * Not here: logging, allocation during a run.
 */
#include "flux_run.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "errf.h"
#include "models/family_run.h"
#include "tensor.h"

/* Largest rows of one GEMM (the CPU backend's BLAS takes int). */
#define MAX_ROWS ((int64_t)INT32_MAX)

static size_t maxz(size_t a, size_t b) { return a > b ? a : b; }

/* ---- tokens ---------------------------------------------------------------- */

/* Piece j of torch.tensor_split of n into P: [*start, *start + *len). */
static void tensor_split_piece(int64_t n, int64_t P, int64_t j, int64_t *start, int64_t *len)
{
    int64_t q = n / P, r = n % P;
    *start = j * q + (j < r ? j : r);
    *len = q + (j < r ? 1 : 0);
}

wf_status_t flux_tokens(const geo_t *g, int j, int64_t *t0, int64_t *lt, int64_t *i0,
                        int64_t *li)
{
    wf_cp_job_t cj = flux_cp_job_of(g, g->H);
    int64_t row0, len, ts, tl;
    if (wf_fwd_seq_tokens(&cj, g->R, g->U, j, &row0, &len) != WF_OK)
        return WF_E_INTERNAL;
    tensor_split_piece(g->S_txt, g->P, j, &ts, &tl);
    /* the shards before j hold row0 joint tokens, ts of them text */
    if (len < tl || row0 < ts || row0 - ts + len - tl > g->S_img)
        return WF_E_INTERNAL;
    *t0 = ts;
    *lt = tl;
    *i0 = row0 - ts;
    *li = len - tl;
    return WF_OK;
}

static geo_t geo_base(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int T, int R,
                      int U);

/* ---- job check -------------------------------------------------------------- */

wf_status_t wf_flux_forward_check(const wf_flux_config_t *cfg,
                                  const wf_flux_job_t *job, int tp, int R, int U,
                                  char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !job)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or job");
    if (tp < 1 || R < 1 || U < 1 || tp > MAX_DEGREE || R > MAX_DEGREE || U > MAX_DEGREE ||
        (int64_t)R * U > MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "mesh degrees tp %d, ring %d, ulysses %d invalid", tp, R, U);
    if (job->B < 1 || job->S_img < 1 || job->S_txt < 1)
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "batch (%" PRId64 "), image tokens (%" PRId64 ") and text tokens "
                              "(%" PRId64 ") must be positive", job->B, job->S_img, job->S_txt);
    struct {
        const char *name;
        wf_dtype_t dt;
        bool used;
    } dts[] = {
        {"hidden_states", job->hidden_dtype, true},
        {"encoder_hidden_states", job->encoder_dtype, true},
        {"pooled_projections", job->pooled_dtype, true},
        {"timestep", job->timestep_dtype, true},
        {"img_ids", job->img_ids_dtype, true},
        {"txt_ids", job->txt_ids_dtype, true},
        {"guidance", job->guidance_dtype, job->has_guidance},
        {"output", job->out_dtype, true},
    };
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++)
        if (dts[k].used && !wf_dtype_size(dts[k].dt))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                  "%s: dtype %d is not f32, f16 or bf16", dts[k].name,
                                  (int)dts[k].dt);
    struct {
        const char *name, *field;
        int64_t got, want;
        const char *what;
    } sh[] = {
        {"hidden_states", "in_channels", job->hidden_ch, cfg->in_channels, "channels"},
        {"encoder_hidden_states", "joint_attention_dim", job->encoder_ch,
         cfg->joint_attention_dim, "channels"},
        {"pooled_projections", "pooled_projection_dim", job->pooled_ch,
         cfg->pooled_projection_dim, "channels"},
        {"img_ids", "axes_dims_rope", job->img_ids_axes, cfg->n_axes, "axes"},
        {"txt_ids", "axes_dims_rope", job->txt_ids_axes, cfg->n_axes, "axes"},
    };
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++)
        if (sh[k].got != sh[k].want)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                                  "%s has %" PRId64 " %s in its last dim; the model's %s wants "
                                  "%" PRId64, sh[k].name, sh[k].got, sh[k].what, sh[k].field,
                                  sh[k].want);
    if (cfg->guidance_embeds && !job->has_guidance)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "guidance is required: the model has guidance_embeds (a "
                              "guidance-distilled FLUX)");
    if (!cfg->guidance_embeds && job->has_guidance)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "guidance given, but the model has no guidance embedder "
                              "(guidance_embeds is false)");
    /* rows of one GEMM and every product of the workspace in range */
    int64_t S = job->S_img + job->S_txt;
    if (job->S_img > INT32_MAX || job->S_txt > INT32_MAX || S > INT32_MAX ||
        job->B > MAX_ROWS / S)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "job too large: B %" PRId64 " x %" PRId64 " tokens", job->B, S);
    /* any S_img and S_txt on any ring x ulysses: every rank's pieces
     * (flux_tokens) tile both sequences in rank order */
    geo_t g = geo_base(cfg, job, tp, R, U);
    int64_t next = 0;
    for (int j = 0; j < g.P; j++) {
        int64_t t0, lt, i0, li;
        if (flux_tokens(&g, j, &t0, &lt, &i0, &li) != WF_OK || i0 != next)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                                  "no split of the joint sequence (S_txt = %" PRId64 ", S_img = "
                                  "%" PRId64 ") over ring x ulysses = %d gives seq rank %d its "
                                  "shard's tokens", job->S_txt, job->S_img, g.P, j);
        next = i0 + li;
    }
    if (next != job->S_img)
        return wf_errf_status(WF_E_BAD_SHAPE, err, err_len,
                              "the image pieces over ring x ulysses = %d cover %" PRId64
                              " of S_img = %" PRId64 " tokens", g.P, next, job->S_img);
    return WF_OK;
}

/* The model ops the forward calls (backend.h "model ops"). */
static const wf_backend_op_t flux_ops[] = {
    WF_BACKEND_OP_ATTENTION,     WF_BACKEND_OP_LINEAR,         WF_BACKEND_OP_BIAS_ACT,
    WF_BACKEND_OP_ACT,           WF_BACKEND_OP_ADD,            WF_BACKEND_OP_MODLN,
    WF_BACKEND_OP_GATE_RESIDUAL, WF_BACKEND_OP_HEAD_NORM_ROPE, WF_BACKEND_OP_ROPE_TABLE,
    WF_BACKEND_OP_TIMESTEP_PROJ, WF_BACKEND_OP_COPY_ROWS,
};
#define N_FLUX_OPS (sizeof flux_ops / sizeof flux_ops[0])

wf_status_t wf_flux_backend_check(const wf_flux_config_t *cfg,
                                  const wf_backend_ops_t *ops, char *err,
                                  size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !ops)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or backend");
    wf_backend_op_t missing;
    if (wf_backend_require(ops, flux_ops, N_FLUX_OPS, &missing) != WF_OK)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "the %s backend lacks %s, which the FLUX forward calls",
                              ops->name, wf_backend_op_name(missing));
    const char *entry = wf_fwd_device_entry_missing(ops);
    if (entry)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "the %s backend has device memory but lacks %s, which the "
                              "FLUX forward calls", ops->name, entry);
    if (ops->attention_head_dim_ok && !ops->attention_head_dim_ok(cfg->attention_head_dim))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "attention_head_dim %" PRIu32 " is not one the %s backend's "
                              "attention takes (64 and 128)", cfg->attention_head_dim,
                              ops->name);
    return WF_OK;
}

/* ---- sizes and the workspace layout ------------------------------------------ */

static geo_t geo_base(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int T, int R,
                      int U)
{
    geo_t g;
    memset(&g, 0, sizeof g);
    g.T = T;
    g.R = R;
    g.U = U;
    g.P = R * U;
    g.B = job->B;
    g.S_img = job->S_img;
    g.S_txt = job->S_txt;
    g.S = g.S_img + g.S_txt;
    g.C = cfg->inner_dim;
    g.H = cfg->num_attention_heads;
    g.D = cfg->attention_head_dim;
    g.M = cfg->mlp_hidden_dim;
    g.nd = cfg->num_layers;
    g.ns = cfg->num_single_layers;
    g.OC = (int64_t)cfg->patch_size * cfg->patch_size * cfg->out_channels;
    g.IN = cfg->in_channels;
    g.J = cfg->joint_attention_dim;
    g.PD = cfg->pooled_projection_dim;
    g.NA = cfg->n_axes;
    g.fp8 = job->fp8;
    g.alltoall = job->alltoall;
    return g;
}

/* Seq rank i's tokens and rows into g. */
static wf_status_t geo_rank(geo_t *g, int i)
{
    int64_t t0, i0;
    if (flux_tokens(g, i, &t0, &g->Lt, &i0, &g->Li) != WF_OK)
        return WF_E_INTERNAL;
    g->L = g->Lt + g->Li;
    g->Nt = g->B * g->Lt;
    g->Ni = g->B * g->Li;
    g->N = g->Nt + g->Ni;
    return WF_OK;
}

/* The sizes of a job the check accepted: the most tokens of any rank,
 * and rank 0's as this rank's (the run sets its own with geo_rank). */
static wf_status_t geo_of(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int T, int R,
                          int U, geo_t *ret)
{
    geo_t g = geo_base(cfg, job, T, R, U);
    for (int j = g.P - 1; j >= 0; j--) {
        if (geo_rank(&g, j) != WF_OK)
            return WF_E_INTERNAL;
        g.Ltm = wf_max_i64(g.Ltm, g.Lt);
        g.Lim = wf_max_i64(g.Lim, g.Li);
        g.Lm = wf_max_i64(g.Lm, g.L);
    }
    g.Ntm = g.B * g.Ltm;
    g.Nim = g.B * g.Lim;
    g.Nm = g.B * g.Lm;
    *ret = g;
    return WF_OK;
}

static recl_t rec_layout(szc_t *c, const geo_t *g)
{
    recl_t r;
    size_t o = 0;
    r.hid = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->Lim, g->IN));
    r.enc = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->Ltm, g->J));
    r.ids = o;
    o = szc_add(c, o, szc_mul3(c, g->Lm, g->NA, 1));
    r.pooled = o;
    o = szc_add(c, o, szc_mul3(c, g->B, g->PD, 1));
    r.ts = o;
    o = szc_add(c, o, (size_t)g->B);
    r.gd = o;
    o = szc_add(c, o, (size_t)g->B);
    r.n = szc_add(c, o, 15u) & ~(size_t)15u;
    return r;
}

/* Regions are 256 bytes apart (dev_alloc's alignment, which a device
 * backend's workspaces need; the base is 64-byte aligned on the CPU). */
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

/* Attention workspace for any plan: heads per rank are H (attention on
 * every head) or H / T (split heads). *ret_host: cp_attention's host part
 * in device mode. */
static size_t attn_ws(szc_t *c, const geo_t *g, const wf_backend_ops_t *ops, size_t *ret_host)
{
    int64_t opts[2] = {g->H, g->H % g->T == 0 ? g->H / g->T : g->H};
    size_t most = 0, hmost = 0;
    /* either activation dtype a device forward may take (flux_act_dtype:
     * the admission does not see the shard) */
    geo_t gd = *g;
    for (int k = 0; k < 4; k++) {
        size_t n, h = 0;
        gd.adt = k >= 2 && flux_on_device(ops) ? WF_DTYPE_BF16 : WF_DTYPE_F32;
        g = &gd;
        if (flux_via_cp(g, ops)) {
            wf_cp_job_t j = flux_cp_job_of(g, opts[k % 2]);
            if (flux_on_device(ops)) {
                if (wf_cp_attention_workspace_dev(&j, g->R, g->U, ops, &n, &h) != WF_OK)
                    c->overflow = true; /* refused, or a backend without the entries */
            } else {
                n = wf_cp_attention_workspace(&j, g->R, g->U, ops);
                if (n == 0)
                    c->overflow = true; /* refused: cannot happen after the check */
            }
        } else {
            wf_attn_params_t p = flux_attn_params_of(g, opts[k % 2]);
            n = ops->attention_workspace ? ops->attention_workspace(&p) : 0;
        }
        if (n == SIZE_MAX)
            c->overflow = true;
        most = n > most ? n : most;
        hmost = h > hmost ? h : hmost;
    }
    *ret_host = hmost;
    return most;
}

/* Linear workspace for any plan: the most ops->linear_workspace asks of
 * any layer at its full shape on N rows (local shapes are no larger),
 * for any weight dtype, the weight in one block as a device shard holds
 * it. */
static size_t lin_ws(const geo_t *g, const wf_backend_ops_t *ops)
{
    const int64_t C = g->C, M = g->M, TC = WF_FLUX_TIMESTEP_CHANNELS;
    const int64_t MW = (12 * g->nd + 3 * g->ns + 2) * C;
    const int64_t shapes[][2] = {{TC, C},   {C, C},     {g->PD, C},    {g->IN, C},
                                 {g->J, C}, {C, 6 * C}, {C, 3 * C},    {C, M},
                                 {M, C},    {C + M, C}, {C, 2 * C},    {C, g->OC},
                                 {C, MW},   {C, 3 * C + M}};
    const wf_dtype_t dts[3] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    size_t most = 0;
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int d = 0; d < 3; d++) {
            wf_linear_params_t p;
            memset(&p, 0, sizeof p);
            p.rows = g->Nm;
            p.in = shapes[k][0];
            p.out = shapes[k][1];
            p.ldx = p.in;
            p.w_dtype = dts[d];
            p.ldw = p.in;
            p.nwb = 1;
            p.wbw[0] = p.in;
            p.ldy = p.out;
            size_t n = ops->linear_workspace(&p);
            most = n > most ? n : most;
        }
    return most;
}

/* Columns of the batched AdaLN linears' output (flux_shard.h): 12 C
 * per double block, 3 C per single block, 2 C of norm_out. */
static size_t mod_width(szc_t *c, const geo_t *g)
{
    return szc_mul3(c, 12u * (size_t)g->nd + 3u * (size_t)g->ns + 2u, (size_t)g->C, 1);
}

/* The regions of a rank with seq index 0 (seq0) and / or the root; on a
 * device backend (dev) with the host workspace apart. */
static wsl_t ws_layout(szc_t *c, const geo_t *g, bool seq0, bool root, bool dev,
                       size_t aws_bytes, size_t haws_bytes, size_t lws_bytes)
{
    wsl_t w;
    memset(&w, 0, sizeof w);
    size_t off = 0, hoff = 0;
    const int64_t B = g->B, N = g->Nm, C = g->C, M = g->M;
    w.rec = rec_layout(c, g);
    w.meta = take(c, dev ? &hoff : &off,
                  szc_mul(c, 2u * (size_t)wf_max_i64(g->P, g->T), sizeof(size_t)));
    w.in = ftake(c, &off, szc_mul(c, w.rec.n, seq0 ? (size_t)g->P : 1u));
    w.rcos = ftake(c, &off, szc_mul3(c, g->Lm, g->D, 1));
    w.rsin = ftake(c, &off, szc_mul3(c, g->Lm, g->D, 1));
    w.tproj = ftake(c, &off, szc_mul3(c, B, WF_FLUX_TIMESTEP_CHANNELS, 1));
    w.v1 = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.v2 = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.temb = ftake(c, &off, szc_mul3(c, B, C, 1));
    w.semb = ftake(c, &off, szc_mul3(c, B, C, 1));
    const size_t MW = mod_width(c, g);
    w.modA = ftake(c, &off, szc_mul3(c, B, 6, C));
    w.modB = ftake(c, &off, szc_mul3(c, B, 6, C));
    w.mod = ftake(c, &off, szc_mul(c, (size_t)B, MW));
    w.S = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.nx = ftake(c, &off, szc_mul3(c, N, C, 1));
    /* proj holds a group's output, and later q and k 256 bytes apart */
    size_t qb = szc_add(c, szc_mul3(c, N, C, sizeof(float)), 255u) & ~(size_t)255u;
    w.proj_n = maxz(szc_mul3(c, N, 3 * C + M, 1), szc_add(c, qb / sizeof(float),
                                                          szc_mul3(c, N, C, 1)));
    w.proj = ftake(c, &off, w.proj_n);
    w.q = w.proj;
    w.k = w.proj + qb;
    w.hid = w.proj;
    w.qj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.kj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.vj = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.lo = ftake(c, &off, szc_mul3(c, N, C, 1));
    w.cat = ftake(c, &off, szc_mul3(c, N, C + M, 1));
    /* Y: any linear's split output (rows x out) before it is made full */
    w.Y_n = maxz(maxz(szc_mul(c, (size_t)B, MW), szc_mul3(c, N, C, 1)),
                 szc_mul3(c, g->Nim, g->OC, 1));
    w.Y = ftake(c, &off, w.Y_n);
    /* Xc: any linear's input (rows x in), or a q / k / v part (N x C) */
    w.Xc_n = maxz(maxz(szc_mul3(c, N, M, 1), szc_mul3(c, g->Nim, g->IN, 1)),
                  maxz(szc_mul3(c, g->Ntm, g->J, 1),
                       szc_mul3(c, B, wf_max_i64(g->PD, WF_FLUX_TIMESTEP_CHANNELS), 1)));
    w.Xc = ftake(c, &off, w.Xc_n);
    /* G: rows x full width of anything converted: an input (Xc's bound)
     * or an output (Y's bound) */
    w.G_n = maxz(w.Xc_n, w.Y_n);
    w.G = ftake(c, &off, w.G_n);
    w.lws_bytes = lws_bytes;
    w.lws = take(c, &off, lws_bytes);
    w.aws_bytes = aws_bytes;
    w.aws = take(c, &off, aws_bytes);
    w.out = ftake(c, &off, szc_mul3(c, g->Nim, g->OC, 1));
    w.outg = ftake(c, &off, root && g->P > 1 ? szc_mul3(c, g->P, g->Nim, g->OC) : 0);
    if (dev && root) {
        /* a raw input chunk (at most 4 bytes an element), or the whole
         * output in out_dtype */
        size_t chunk = maxz(maxz(szc_mul3(c, g->Lim, g->IN, 1), szc_mul3(c, g->Ltm, g->J, 1)),
                            maxz(szc_mul3(c, g->Lm, g->NA, 1), szc_mul3(c, B, g->PD, 1)));
        w.stage_bytes = szc_mul(c, maxz(chunk, szc_mul3(c, g->P, g->Nim, g->OC)), sizeof(float));
    }
    w.stage = take(c, &off, w.stage_bytes);
    w.total = off;
    w.haws_bytes = dev ? haws_bytes : 0;
    w.haws = take(c, &hoff, w.haws_bytes);
    w.htotal = dev ? hoff : 0;
    return w;
}

size_t wf_flux_cache_floats(const wf_flux_config_t *cfg, const wf_flux_job_t *job, int tp,
                            int R, int U)
{
    geo_t g;
    if (wf_flux_forward_check(cfg, job, tp, R, U, NULL, 0) != WF_OK ||
        geo_of(cfg, job, tp, R, U, &g) != WF_OK || g.Nm <= 0 || g.C <= 0 ||
        g.Nm > (int64_t)(SIZE_MAX / 16) / g.C)
        return 0;
    return (size_t)(g.Nm * g.C);
}

size_t wf_flux_forward_workspace(const wf_flux_config_t *cfg,
                                 const wf_flux_job_t *job, int tp, int R, int U,
                                 const wf_backend_ops_t *ops, size_t *ret_host)
{
    /* a refused job has no size: SIZE_MAX, which admission refuses too */
    if (ret_host)
        *ret_host = SIZE_MAX;
    if (!ops || wf_flux_forward_check(cfg, job, tp, R, U, NULL, 0) != WF_OK)
        return SIZE_MAX;
    geo_t g;
    if (geo_of(cfg, job, tp, R, U, &g) != WF_OK)
        return SIZE_MAX;
    szc_t c = {false};
    size_t haws = 0, aws = attn_ws(&c, &g, ops, &haws), lws = lin_ws(&g, ops);
    if (lws == SIZE_MAX)
        c.overflow = true;
    size_t most = 0, hmost = 0;
    for (int role = 0; role < 3; role++) { /* other, seq index 0, the root */
        wsl_t w = ws_layout(&c, &g, role >= 1, role == 2, flux_on_device(ops), aws, haws, lws);
        most = w.total > most ? w.total : most;
        hmost = w.htotal > hmost ? w.htotal : hmost;
    }
    if (c.overflow)
        return SIZE_MAX;
    if (ret_host)
        *ret_host = hmost;
    return most;
}

/* ---- the forward ------------------------------------------------------------------------- */

/* norm_out (AdaLayerNormContinuous: scale, then shift) and proj_out of
 * the image rows, then every seq rank's output to the root (rank j's
 * (Ni_j, OC) at j * Nim * OC), which writes (B, S_img, OC) in out_dtype,
 * each rank's image tokens at their place (on a device: converted there,
 * copied down chunk by chunk). Only the tp rank 0 ranks gather. */
static wf_status_t finish(run_t *x)
{
    const geo_t *g = &x->g;
    const int64_t B = g->B, C = g->C, Nt = g->Nt, OC = g->OC;
    float *S = fp(x, x->W.S), *mod = fp(x, x->W.modA);
    float *out = fp(x, x->W.out);
    int64_t ldm = 2 * C;
    wf_layout_t lc = wf_layout_full(C);
    wf_status_t st;
    if (x->s->mod_fused) {
        mod = fp(x, x->W.mod) + x->s->norm_out_off;
        ldm = x->s->mod_width;
    } else if ((st = wf_linear_apply_full(&x->lin, &x->s->norm_out, fp(x, x->W.semb), C, &lc,
                                          B, WF_ACT_NONE, mod)) != WF_OK) {
        return st;
    }
    if ((st = flux_ln_mod(x, S + Nt * C, ap(x, x->W.nx, Nt * C), B, g->Li, mod, ldm, C, 0)) !=
            WF_OK ||
        (st = wf_linear_apply_full_dt(&x->lin, &x->s->proj_out, ap(x, x->W.nx, Nt * C), g->adt,
                                      C, &lc, g->Ni, WF_ACT_NONE, out)) != WF_OK)
        return st;
    if (x->t != 0)
        return WF_OK;
    const float *src = out;
    size_t rb = (size_t)(g->Ni * OC) * sizeof(float);
    if (g->P > 1) {
        size_t *counts = flux_meta(x), *displs = counts + g->P;
        for (int j = 0; j < g->P; j++) {
            int64_t t0, lt, i0, li;
            if ((st = flux_tokens(g, j, &t0, &lt, &i0, &li)) != WF_OK)
                return st;
            counts[j] = (size_t)(B * li * OC) * sizeof(float);
            displs[j] = (size_t)(j * g->Nim * OC) * sizeof(float);
        }
        float *outg = x->root ? fp(x, x->W.outg) : NULL;
        st = wf_comm_gatherv(x->grp->seq, out, rb, outg, counts, displs, 0);
        if (st != WF_OK)
            return st;
        src = outg;
    }
    if (!x->root)
        return WF_OK;
    const size_t eo = wf_dtype_size(x->job->out_dtype);
    unsigned char *dst = x->job->output;
    const unsigned char *conv = NULL;
    if (x->dev) {
        /* rank j's rows at j * Nim * OC; the ends of shorter ranks'
         * pieces are converted too, never read */
        size_t n = (size_t)((g->P > 1 ? g->P * g->Nim : g->Ni) * OC);
        if (n * eo > x->W.stage_bytes)
            return WF_E_INTERNAL;
        conv = x->ws + x->W.stage;
        st = x->ops->convert(x->ctx, x->ws + x->W.stage, x->job->out_dtype, src, WF_DTYPE_F32,
                             n);
        if (st != WF_OK)
            return st;
    }
    for (int j = 0; j < g->P; j++) {
        int64_t t0, lt, i0, li;
        if ((st = flux_tokens(g, j, &t0, &lt, &i0, &li)) != WF_OK)
            return st;
        for (int64_t b = 0; b < B; b++) {
            unsigned char *d = dst + (size_t)((b * g->S_img + i0) * OC) * eo;
            size_t at = (size_t)((j * g->Nim + b * li) * OC), n = (size_t)(li * OC);
            if (x->dev) {
                if ((st = x->ops->copy_d2h(x->ctx, d, conv + at * eo, n * eo)) != WF_OK)
                    return st;
            } else {
                wf_convert_from_f32(d, x->job->out_dtype, src + at, n);
            }
        }
    }
    return WF_OK;
}

/* One block of the forward, as wf_fwd_block_run calls it. */
typedef struct block_arg {
    run_t *x;       /* the run */
    uint32_t b;     /* the block: double blocks first, then single */
} block_arg_t;

static wf_status_t run_block(void *arg)
{
    const block_arg_t *a = arg;
    uint32_t nd = a->x->cfg->num_layers;
    return a->b < nd ? flux_double_block(a->x, &a->x->s->dbl[a->b])
                     : flux_single_block(a->x, &a->x->s->sgl[a->b - nd]);
}

/* A block's graph key (wf_fwd_block_run): everything its ops' arguments
 * follow from. The shard's weights (the anchor's memory) by the shard
 * and the block index; the activations by the workspace bases and
 * layout; shapes, degrees and flags by the sizes. Zeroed first; padding
 * that still differed could only make a key miss, never match. */
typedef struct block_key {
    char family[8];       /* "flux" */
    uint32_t b;           /* the block */
    const void *shard;    /* the shard (its pieces' addresses) */
    const void *ws, *hws; /* workspace bases */
    geo_t g;              /* sizes on this rank */
    wsl_t W;              /* workspace layout */
} block_key_t;
_Static_assert(sizeof(block_key_t) <= 4096, "graph keys are at most 4096 bytes (backend.h)");

/* Block b through the backend's graphs where it can (wf_fwd_block_run). */
static wf_status_t flux_block(run_t *x, uint32_t b)
{
    block_key_t k;
    memset(&k, 0, sizeof k);
    memcpy(k.family, "flux", 4);
    k.b = b;
    k.shard = x->s;
    k.ws = x->ws;
    k.hws = x->hws;
    memcpy(&k.g, &x->g, sizeof k.g);
    memcpy(&k.W, &x->W, sizeof k.W);
    block_arg_t a = {x, b};
    return wf_fwd_block_run(x->ops, x->ctx, x->grp, &k, sizeof k, x->s->mem.dev, run_block,
                            &a);
}

/* The entries the forward calls (wf_flux_backend_check's list). */
static bool ops_ok(const wf_backend_ops_t *o)
{
    return wf_backend_require(o, flux_ops, N_FLUX_OPS, NULL) == WF_OK &&
           wf_fwd_device_entry_missing(o) == NULL;
}

wf_status_t wf_flux_forward_run(const wf_flux_shard_t *shard,
                                const wf_flux_job_t *job,
                                const wf_fwd_group_t *group,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, void *workspace,
                                size_t bytes, void *host_ws, size_t host_bytes)
{
    /* validation every rank computes alike: fails everywhere, no abort */
    if (!shard || !job || !group || !ops || !ops_ok(ops))
        return WF_E_BAD_ARGUMENT;
    const int T = group->tp_degree, R = group->ring_degree, U = group->ulysses_degree;
    if (wf_flux_forward_check(&shard->cfg, job, T, R, U, NULL, 0) != WF_OK)
        return WF_E_BAD_ARGUMENT;

    /* this rank's own arguments: a failure aborts the world */
    run_t x;
    memset(&x, 0, sizeof x);
    x.s = shard;
    x.cfg = &shard->cfg;
    x.job = job;
    x.grp = group;
    x.ops = ops;
    x.ctx = ctx;
    x.ws = workspace;
    x.hws = host_ws;
    x.dev = flux_on_device(ops);
    wf_status_t st = WF_E_BAD_ARGUMENT;
    bool stopped = false;       /* a layer boundary stopped every rank alike */
    int64_t step = 0;           /* layer boundaries passed */
    if (!wf_fwd_group_ok(group))
        goto fail;
    x.t = T > 1 ? wf_comm_rank(group->tp) : 0;
    x.i = R * U > 1 ? wf_comm_rank(group->seq) : 0;
    x.root = x.t == 0 && x.i == 0;
    if (geo_of(&shard->cfg, job, T, R, U, &x.g) != WF_OK || geo_rank(&x.g, x.i) != WF_OK)
        goto fail;
    x.g.adt = flux_act_dtype(shard, x.dev);
    /* a device shard on the CPU or the other way round: a bug */
    if (shard->tp != T || shard->tp_rank != x.t || (shard->mem.dev != NULL) != x.dev)
        goto fail;
    szc_t c = {false};
    size_t haws = 0, aws = attn_ws(&c, &x.g, ops, &haws), lws = lin_ws(&x.g, ops);
    x.W = ws_layout(&c, &x.g, x.i == 0, x.root, x.dev, aws, haws, lws);
    if (c.overflow || lws == SIZE_MAX || !workspace ||
        ((uintptr_t)workspace & (x.dev ? 255u : 63u)) != 0 || bytes < x.W.total)
        goto fail;
    if (x.dev && (!host_ws || ((uintptr_t)host_ws & 63u) != 0 || host_bytes < x.W.htotal))
        goto fail;
    x.lin = (wf_linear_env_t){
        .ops = ops, .ctx = ctx, .tp = group->tp, .T = T, .t = x.t,
        .G = fp(&x, x.W.G), .G_n = x.W.G_n, .Xc = fp(&x, x.W.Xc), .Xc_n = x.W.Xc_n,
        .Y = fp(&x, x.W.Y), .Y_n = x.W.Y_n, .lws = x.ws + x.W.lws, .lws_bytes = x.W.lws_bytes,
    };
    if (x.root && (!job->hidden_states || !job->encoder_hidden_states ||
                   !job->pooled_projections || !job->timestep || !job->img_ids ||
                   !job->txt_ids || (job->has_guidance && !job->guidance) || !job->output))
        goto fail;

    const geo_t *g = &x.g;
    const float *rec = fp(&x, x.W.in);
    float *S = fp(&x, x.W.S);
    wf_layout_t lin_in = wf_layout_full(g->IN), lj = wf_layout_full(g->J);
    if ((st = flux_distribute(&x)) != WF_OK || (st = flux_rope_tables(&x)) != WF_OK ||
        (st = wf_linear_apply_full(&x.lin, &shard->x_embedder, rec + x.W.rec.hid, g->IN,
                                   &lin_in, g->Ni, WF_ACT_NONE, S + g->Nt * g->C)) != WF_OK ||
        (st = flux_embed_time(&x)) != WF_OK ||
        (st = wf_linear_apply_full(&x.lin, &shard->context_embedder, rec + x.W.rec.enc, g->J,
                                   &lj, g->Nt, WF_ACT_NONE, S)) != WF_OK)
        goto fail;
    /* every block's AdaLN modulation at once, when batched */
    wf_layout_t lc = wf_layout_full(g->C);
    if (shard->mod_fused &&
        (shard->mod_width != (int64_t)mod_width(&c, g) ||
         (st = wf_linear_apply_full(&x.lin, &shard->mod, fp(&x, x.W.semb), g->C, &lc, g->B,
                                    WF_ACT_NONE, fp(&x, x.W.mod))) != WF_OK)) {
        if (st == WF_OK)
            st = WF_E_INTERNAL;
        goto fail;
    }
    /* the blocks in order, double then single; with a first-block cache
     * the first is the head: after it the cache may stand for the rest */
    uint32_t nd = x.cfg->num_layers, nblocks = nd + x.cfg->num_single_layers;
    wf_fbc_t *fbc = job->fbc;
    float *img = S + g->Nt * g->C;
    size_t res_n = (size_t)(g->Ni * g->C), state_n = (size_t)((g->Nt + g->Ni) * g->C);
    bool skip = false;
    for (uint32_t b = 0; b < nblocks && !skip; b++) {
        if (job->boundary && (st = job->boundary(job->boundary_arg, step++, false)) != WF_OK) {
            stopped = true;
            goto fail;
        }
        if (b == 0 && fbc && (st = wf_fbc_head_begin(fbc, ops, ctx, img, res_n, state_n)) != WF_OK)
            goto fail;
        if ((st = flux_block(&x, b)) != WF_OK)
            goto fail;
        if (b == 0 && fbc &&
            (st = wf_fbc_head_end(fbc, ops, ctx, group->seq, img, S, &skip)) != WF_OK)
            goto fail;
    }
    if (fbc && !skip && (st = wf_fbc_tail_end(fbc, ops, ctx, S)) != WF_OK)
        goto fail;
    if ((st = finish(&x)) != WF_OK)
        goto fail;
    /* the output (and everything else queued) complete on return */
    if (x.dev && (st = ops->synchronize(ctx)) != WF_OK)
        goto fail;
    return WF_OK;
fail:
    if (x.dev)
        (void)ops->synchronize(ctx); /* nothing queued outlives the call */
    if (!stopped)
        wf_fwd_group_abort(group);
    return st;
}
