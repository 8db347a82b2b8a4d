/* flux_embed.c — the FLUX forward's inputs and embeddings: the root's
 * input records sent over tp and scattered over the seq group, the RoPE
 * tables of this rank's joint rows (FluxPosEmbed), and the time / guidance
 * / text embedders (temb, silu(temb)). The x / context embedders are
 * plain linears the driver runs.
 */
#include "flux_run.h"

#include <math.h>
#include <string.h>

#include "tensor.h"

/* RoPE base (FluxPosEmbed(theta=10000)). */
#define ROPE_THETA 10000.0

static float silu(float v) { return v / (1.0f + expf(-v)); }

static void silu_n(float *v, int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        v[k] = silu(v[k]);
}

/* ---- inputs ------------------------------------------------------------------------ */

/* The root writes every seq rank's record (rank-major) from the inputs. */
static void fill_records(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_job_t *job = x->job;
    const recl_t *rl = &x->W.rec;
    for (int j = 0; j < g->P; j++) {
        float *rec = fp(x, x->W.in) + (size_t)j * rl->n;
        size_t eh = wf_dtype_size(job->hidden_dtype), ee = wf_dtype_size(job->encoder_dtype);
        for (int64_t b = 0; b < g->B; b++) {
            const unsigned char *h = job->hidden_states;
            wf_convert_to_f32(rec + rl->hid + (size_t)(b * g->Li * g->IN),
                              h + (size_t)((b * g->S_img + j * g->Li) * g->IN) * eh,
                              job->hidden_dtype, (size_t)(g->Li * g->IN));
            const unsigned char *e = job->encoder_hidden_states;
            wf_convert_to_f32(rec + rl->enc + (size_t)(b * g->Lt * g->J),
                              e + (size_t)((b * g->S_txt + j * g->Lt) * g->J) * ee,
                              job->encoder_dtype, (size_t)(g->Lt * g->J));
        }
        const unsigned char *ii = job->img_ids, *ti = job->txt_ids;
        size_t ei = wf_dtype_size(job->img_ids_dtype), et = wf_dtype_size(job->txt_ids_dtype);
        wf_convert_to_f32(rec + rl->iid, ii + (size_t)(j * g->Li * g->NA) * ei,
                          job->img_ids_dtype, (size_t)(g->Li * g->NA));
        wf_convert_to_f32(rec + rl->tid, ti + (size_t)(j * g->Lt * g->NA) * et,
                          job->txt_ids_dtype, (size_t)(g->Lt * g->NA));
        wf_convert_to_f32(rec + rl->pooled, job->pooled_projections, job->pooled_dtype,
                          (size_t)(g->B * g->PD));
        wf_convert_to_f32(rec + rl->ts, job->timestep, job->timestep_dtype, (size_t)g->B);
        if (job->has_guidance)
            wf_convert_to_f32(rec + rl->gd, job->guidance, job->guidance_dtype, (size_t)g->B);
        else
            memset(rec + rl->gd, 0, (size_t)g->B * sizeof(float));
    }
}

/* Inputs to every rank: the root's records over tp (seq index 0 ranks),
 * then each seq group's root scatters them. */
wf_status_t flux_distribute(run_t *x)
{
    const geo_t *g = &x->g;
    const size_t rb = x->W.rec.n * sizeof(float);
    float *in = fp(x, x->W.in);
    wf_status_t st = WF_OK;
    if (x->root)
        fill_records(x);
    if (g->T > 1 && x->i == 0)
        st = wf_comm_broadcast(x->grp->tp, in, (size_t)g->P * rb, 0);
    if (st == WF_OK && g->P > 1) {
        size_t *counts = (size_t *)(void *)(x->ws + x->W.meta), *displs = counts + g->P;
        for (int j = 0; j < g->P; j++) {
            counts[j] = rb;
            displs[j] = (size_t)j * rb;
        }
        /* in place on the seq root: its record is the first */
        st = wf_comm_scatterv(x->grp->seq, in, counts, displs, in, rb, 0);
    }
    return st;
}

/* RoPE tables (L, D) of this rank's joint rows [txt piece, img piece]:
 * diffusers' FluxPosEmbed — per axis a of width d_a, frequency j
 * 1 / theta^(2j / d_a) in float64 at the f32 position, cos / sin rounded
 * to f32, each repeated twice (repeat_interleave_real). */
void flux_rope_tables(run_t *x)
{
    const geo_t *g = &x->g;
    const float *rec = fp(x, x->W.in);
    float *cs = fp(x, x->W.rcos), *sn = fp(x, x->W.rsin);
    for (int64_t r = 0; r < g->L; r++) {
        const float *ids = r < g->Lt ? rec + x->W.rec.tid + r * g->NA
                                     : rec + x->W.rec.iid + (r - g->Lt) * g->NA;
        int64_t d = 0;
        for (uint32_t a = 0; a < x->cfg->n_axes; a++) {
            int64_t da = x->cfg->axes_dims_rope[a];
            for (int64_t j = 0; j < da / 2; j++) {
                double freq = 1.0 / pow(ROPE_THETA, (double)(2 * j) / (double)da);
                double ang = (double)ids[a] * freq;
                float c = (float)cos(ang), s = (float)sin(ang);
                cs[r * g->D + d] = cs[r * g->D + d + 1] = c;
                sn[r * g->D + d] = sn[r * g->D + d + 1] = s;
                d += 2;
            }
        }
    }
}

/* diffusers' Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
 * of t * 1000 for each batch, in f32 as diffusers computes it:
 * [cos(t f_k), sin(t f_k)], f_k = exp(-ln(10000) k / 128).
 * diffusers scales with `timestep.to(hidden_states.dtype) * 1000`: with
 * bf16 / f16 activations t and the product are rounded to that dtype
 * (0.875 * 1000 becomes 876 in bf16, a 4 % change of a tiny model's
 * output). That is part of the function, so it is done here too, with
 * the dtype of the hidden_states given (`adt`); the rest stays f32.
 * (torch takes exp from MKL, which is off by one ulp for 2 of the 128
 * frequencies; here expf is correctly rounded. At guidance 4 * 1000 that
 * moves the output by about 4e-6 of its largest value.) */
static void timestep_proj(const float *t, int64_t B, wf_dtype_t adt, float *dst)
{
    const int half = WF_FLUX_TIMESTEP_CHANNELS / 2;
    const float nl = (float)-9.210340371976184; /* -ln(10000) */
    for (int64_t b = 0; b < B; b++) {
        float tv = wf_round_to_dtype(wf_round_to_dtype(t[b], adt) * 1000.0f, adt);
        for (int k = 0; k < half; k++) {
            float e = nl * (float)k;
            e = e / (float)half;
            float arg = tv * expf(e);
            dst[b * 2 * half + k] = cosf(arg);
            dst[b * 2 * half + half + k] = sinf(arg);
        }
    }
}

/* temb = timestep_embedder(proj(t)) [+ guidance_embedder(proj(g))] +
 * text_embedder(pooled); semb = silu(temb). */
wf_status_t flux_embed_time(run_t *x)
{
    const geo_t *g = &x->g;
    const wf_flux_shard_t *s = x->s;
    const float *rec = fp(x, x->W.in);
    float *tp = fp(x, x->W.tproj), *v1 = fp(x, x->W.v1), *v2 = fp(x, x->W.v2);
    float *temb = fp(x, x->W.temb), *semb = fp(x, x->W.semb);
    const int64_t B = g->B, C = g->C, TC = WF_FLUX_TIMESTEP_CHANNELS;
    lay_t ltc = flux_lay_full(TC), lc = flux_lay_full(C), lpd = flux_lay_full(g->PD);
    timestep_proj(rec + x->W.rec.ts, B, x->job->hidden_dtype, tp);
    wf_status_t st = flux_lin_full(x, &s->time_l1, tp, TC, &ltc, B, v1);
    if (st != WF_OK)
        return st;
    silu_n(v1, B * C);
    if ((st = flux_lin_full(x, &s->time_l2, v1, C, &lc, B, temb)) != WF_OK)
        return st;
    if (x->cfg->guidance_embeds) {
        timestep_proj(rec + x->W.rec.gd, B, x->job->hidden_dtype, tp);
        if ((st = flux_lin_full(x, &s->guid_l1, tp, TC, &ltc, B, v1)) != WF_OK)
            return st;
        silu_n(v1, B * C);
        if ((st = flux_lin_full(x, &s->guid_l2, v1, C, &lc, B, v2)) != WF_OK)
            return st;
        for (int64_t k = 0; k < B * C; k++)
            temb[k] += v2[k];
    }
    if ((st = flux_lin_full(x, &s->text_l1, rec + x->W.rec.pooled, g->PD, &lpd, B, v1)) != WF_OK)
        return st;
    silu_n(v1, B * C);
    if ((st = flux_lin_full(x, &s->text_l2, v1, C, &lc, B, v2)) != WF_OK)
        return st;
    for (int64_t k = 0; k < B * C; k++) {
        temb[k] += v2[k];
        semb[k] = silu(temb[k]);
    }
    return WF_OK;
}
