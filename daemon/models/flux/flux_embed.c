/* flux_embed.c — the FLUX forward's inputs and embeddings: the root's
 * input records sent over tp and scattered over the seq group, the RoPE
 * tables of this rank's joint rows (FluxPosEmbed), and the time / guidance
 * / text embedders (temb, silu(temb)). The x / context embedders are
 * plain linears the driver runs. Arithmetic: the backend's ops
 * (rope_table, timestep_proj, linear, act, add); on a device backend the
 * root copies the raw inputs up and converts them there.
 */
#include "flux_run.h"

#include <string.h>

#include "tensor.h"

/* RoPE base (FluxPosEmbed(theta=10000)). */
#define ROPE_THETA 10000.0

/* ---- inputs ------------------------------------------------------------------------ */

/* n elements of dtype dt at host src -> n f32 at dst (backend memory):
 * on the CPU converted in place of the copy; on a device copied up raw
 * into the stage, then converted there (f32: copied straight in). */
static wf_status_t put_f32(run_t *x, float *dst, const void *src, wf_dtype_t dt, size_t n)
{
    if (!x->dev) {
        wf_convert_to_f32(dst, src, dt, n);
        return WF_OK;
    }
    size_t bytes = n * wf_dtype_size(dt);
    if (n == 0)
        return WF_OK;
    if (dt == WF_DTYPE_F32)
        return x->ops->copy_h2d(x->ctx, dst, src, bytes);
    if (bytes > x->W.stage_bytes)
        return WF_E_INTERNAL;
    /* the stream orders the next chunk's copy after this conversion */
    void *stage = x->ws + x->W.stage;
    wf_status_t st = x->ops->copy_h2d(x->ctx, stage, src, bytes);
    if (st != WF_OK)
        return st;
    return x->ops->convert(x->ctx, dst, WF_DTYPE_F32, stage, dt, n);
}

/* The root writes every seq rank's record (rank-major) from the inputs:
 * rank j's text and image tokens (flux_tokens) packed at the front of
 * each piece. */
static wf_status_t fill_records(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_job_t *job = x->job;
    const recl_t *rl = &x->W.rec;
    wf_status_t st = WF_OK;
    for (int j = 0; j < g->P && st == WF_OK; j++) {
        float *rec = fp(x, x->W.in) + (size_t)j * rl->n;
        int64_t t0, lt, i0, li;
        if ((st = flux_tokens(g, j, &t0, &lt, &i0, &li)) != WF_OK)
            break;
        size_t eh = wf_dtype_size(job->hidden_dtype), ee = wf_dtype_size(job->encoder_dtype);
        for (int64_t b = 0; b < g->B && st == WF_OK; b++) {
            const unsigned char *h = job->hidden_states;
            st = put_f32(x, rec + rl->hid + (size_t)(b * li * g->IN),
                         h + (size_t)((b * g->S_img + i0) * g->IN) * eh, job->hidden_dtype,
                         (size_t)(li * g->IN));
            const unsigned char *e = job->encoder_hidden_states;
            if (st == WF_OK)
                st = put_f32(x, rec + rl->enc + (size_t)(b * lt * g->J),
                             e + (size_t)((b * g->S_txt + t0) * g->J) * ee, job->encoder_dtype,
                             (size_t)(lt * g->J));
        }
        const unsigned char *ii = job->img_ids, *ti = job->txt_ids;
        size_t ei = wf_dtype_size(job->img_ids_dtype), et = wf_dtype_size(job->txt_ids_dtype);
        /* the joint rows' ids: text piece, then image piece */
        if (st == WF_OK)
            st = put_f32(x, rec + rl->ids + (size_t)(lt * g->NA),
                         ii + (size_t)(i0 * g->NA) * ei, job->img_ids_dtype,
                         (size_t)(li * g->NA));
        if (st == WF_OK)
            st = put_f32(x, rec + rl->ids, ti + (size_t)(t0 * g->NA) * et, job->txt_ids_dtype,
                         (size_t)(lt * g->NA));
        if (st == WF_OK)
            st = put_f32(x, rec + rl->pooled, job->pooled_projections, job->pooled_dtype,
                         (size_t)(g->B * g->PD));
        if (st == WF_OK)
            st = put_f32(x, rec + rl->ts, job->timestep, job->timestep_dtype, (size_t)g->B);
        if (st != WF_OK)
            break;
        if (job->has_guidance)
            st = put_f32(x, rec + rl->gd, job->guidance, job->guidance_dtype, (size_t)g->B);
        else if (x->dev)
            st = x->ops->fill_f32(x->ctx, rec + rl->gd, 0.0f, (size_t)g->B);
        else
            memset(rec + rl->gd, 0, (size_t)g->B * sizeof(float));
    }
    return st;
}

/* Inputs to every rank: the root's records over tp (seq index 0 ranks),
 * then each seq group's root scatters them. Every record has the same
 * size (the most of any rank), so the counts are equal; a rank with fewer
 * tokens than the most leaves the end of its pieces unread. */
wf_status_t flux_distribute(run_t *x)
{
    const geo_t *g = &x->g;
    const size_t rb = x->W.rec.n * sizeof(float);
    float *in = fp(x, x->W.in);
    wf_status_t st = WF_OK;
    if (x->root)
        st = fill_records(x);
    if (st == WF_OK && g->T > 1 && x->i == 0)
        st = wf_comm_broadcast(x->grp->tp, in, (size_t)g->P * rb, 0);
    if (st == WF_OK && g->P > 1) {
        size_t *counts = flux_meta(x), *displs = counts + g->P;
        for (int j = 0; j < g->P; j++) {
            counts[j] = rb;
            displs[j] = (size_t)j * rb;
        }
        /* in place on the seq root: its record is the first */
        st = wf_comm_scatterv(x->grp->seq, in, counts, displs, in, rb, 0);
    }
    return st;
}

/* RoPE tables (L, D) of this rank's joint rows [txt piece, img piece]
 * (the record's ids, txt_ids then img_ids):
 * diffusers' FluxPosEmbed (backend.h's rope_table). */
wf_status_t flux_rope_tables(run_t *x)
{
    const float *rec = fp(x, x->W.in);
    return x->ops->rope_table(x->ctx, rec + x->W.rec.ids, x->g.L, x->cfg->axes_dims_rope,
                              x->cfg->n_axes, ROPE_THETA, x->g.D, fp(x, x->W.rcos),
                              fp(x, x->W.rsin));
}

/* diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
 * of t * 1000 for each batch (backend.h's timestep_proj), in f32 as
 * diffusers computes it. diffusers scales with
 * `timestep.to(hidden_states.dtype) * 1000`: with bf16 / f16 activations
 * t and the product are rounded to that dtype (0.875 * 1000 becomes 876
 * in bf16, a 4 % change of a tiny model's output). That is part of the
 * function, so it is done here too, with the dtype of the hidden_states;
 * the rest stays f32. (torch takes exp from MKL, which is off by one ulp
 * for 2 of the 128 frequencies; the CPU backend's expf is correctly
 * rounded. At guidance 4 * 1000 that moves the output by about 4e-6 of
 * its largest value.) */
static wf_status_t timestep_proj(run_t *x, const float *t, float *dst)
{
    return x->ops->timestep_proj(x->ctx, t, x->g.B, WF_FLUX_TIMESTEP_CHANNELS,
                                 x->job->hidden_dtype, dst);
}

/* temb = timestep_embedder(proj(t)) [+ guidance_embedder(proj(g))] +
 * text_embedder(pooled); semb = silu(temb). The SiLU after each
 * embedder's linear_1 is that linear's activation. */
wf_status_t flux_embed_time(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_shard_t *s = x->s;
    const float *rec = fp(x, x->W.in);
    float *tp = fp(x, x->W.tproj), *v1 = fp(x, x->W.v1), *v2 = fp(x, x->W.v2);
    float *temb = fp(x, x->W.temb), *semb = fp(x, x->W.semb);
    const int64_t B = g->B, C = g->C, TC = WF_FLUX_TIMESTEP_CHANNELS;
    wf_layout_t ltc = wf_layout_full(TC), lc = wf_layout_full(C), lpd = wf_layout_full(g->PD);
    const wf_linear_env_t *le = &x->lin;
    wf_status_t st;
    if ((st = timestep_proj(x, rec + x->W.rec.ts, tp)) != WF_OK ||
        (st = wf_linear_apply_full(le, &s->time_l1, tp, TC, &ltc, B, WF_ACT_SILU, v1)) != WF_OK ||
        (st = wf_linear_apply_full(le, &s->time_l2, v1, C, &lc, B, WF_ACT_NONE, temb)) != WF_OK)
        return st;
    if (x->cfg->guidance_embeds &&
        ((st = timestep_proj(x, rec + x->W.rec.gd, tp)) != WF_OK ||
         (st = wf_linear_apply_full(le, &s->guid_l1, tp, TC, &ltc, B, WF_ACT_SILU, v1)) != WF_OK ||
         (st = wf_linear_apply_full(le, &s->guid_l2, v1, C, &lc, B, WF_ACT_NONE, v2)) != WF_OK ||
         (st = x->ops->add(x->ctx, temb, v2, B * C)) != WF_OK))
        return st;
    if ((st = wf_linear_apply_full(le, &s->text_l1, rec + x->W.rec.pooled, g->PD, &lpd, B,
                                   WF_ACT_SILU, v1)) != WF_OK ||
        (st = wf_linear_apply_full(le, &s->text_l2, v1, C, &lc, B, WF_ACT_NONE, v2)) != WF_OK ||
        (st = x->ops->add(x->ctx, temb, v2, B * C)) != WF_OK)
        return st;
    return x->ops->act(x->ctx, semb, temb, B * C, WF_ACT_SILU);
}
