/* attention.c — attention jobs: plan and per-rank step (see attention.h). */
#include "attention.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "worker.h"

void wf_attention_heads(int64_t hq, int rank, int group_size,
                        int64_t *ret_begin, int64_t *ret_end)
{
    int64_t base = hq / group_size, extra = hq % group_size;
    int64_t r = rank;
    *ret_begin = r * base + (r < extra ? r : extra);
    *ret_end = *ret_begin + base + (r < extra ? 1 : 0);
}

/* Params of the whole job (all heads) without buffers. */
static void base_params(const wf_djob_t *job, wf_attn_params_t *p)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];
    const wf_tensor_desc_t *k = &job->req.tensors[a->k];
    const wf_tensor_desc_t *v = &job->req.tensors[a->v];
    memset(p, 0, sizeof *p);
    p->B = q->shape[0];
    p->Sq = q->shape[1];
    p->Hq = q->shape[2];
    p->D = q->shape[3];
    p->Skv = k->shape[1];
    p->Hkv = k->shape[2];
    p->h_begin = 0;
    p->h_end = p->Hq;
    p->scale = job->scale;
    p->causal = a->causal;
    p->q_dtype = q->dtype;
    p->k_dtype = k->dtype;
    p->v_dtype = v->dtype;
    p->out_dtype = job->out_desc[0].dtype;
}

static wf_status_t attention_run(wf_djob_t *job, int rank, int group_size,
                                 wf_worker_t *w);

wf_status_t wf_attention_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                              uint32_t n_devices, char *err, size_t err_len)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];

    job->scale = a->has_scale ? a->scale : (float)(1.0 / sqrt((double)q->shape[3]));

    wf_tensor_desc_t *out = &job->out_desc[0];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "out");
    out->dtype = a->has_out_dtype ? a->out_dtype : q->dtype;
    out->rank = 4;
    memcpy(out->shape, q->shape, 4 * sizeof q->shape[0]);
    out->frame = 0;
    wf_status_t st = wf_tensor_desc_finish(out);
    job->n_outputs = 1;
    if (st == WF_OK && a->return_lse) {
        wf_tensor_desc_t *lse = &job->out_desc[1];
        memset(lse, 0, sizeof *lse);
        snprintf(lse->name, sizeof lse->name, "lse");
        lse->dtype = WF_DTYPE_F32;
        lse->rank = 3;
        memcpy(lse->shape, q->shape, 3 * sizeof q->shape[0]);
        lse->frame = 1;
        st = wf_tensor_desc_finish(lse);
        job->n_outputs = 2;
    }
    if (st != WF_OK) {
        snprintf(err, err_len, "output shape overflows");
        return st;
    }

    int64_t hq = q->shape[2];
    uint64_t g = n_devices;
    if (a->devices > 0 && a->devices < g)
        g = a->devices;
    if ((uint64_t)hq < g)
        g = (uint64_t)hq;
    job->group_size = (int)g;

    /* Memory of rank r: its share of out and lse plus the backend's
     * workspace for its head range. Bytes per head are exact: out and lse
     * have heads as their second-innermost / innermost dim. */
    uint64_t out_per_head = out->nbytes / (uint64_t)hq;
    uint64_t lse_per_head = a->return_lse ? job->out_desc[1].nbytes / (uint64_t)hq : 0;
    wf_attn_params_t p;
    base_params(job, &p);
    for (int r = 0; r < job->group_size; r++) {
        wf_attention_heads(hq, r, job->group_size, &p.h_begin, &p.h_end);
        uint64_t heads = (uint64_t)(p.h_end - p.h_begin);
        uint64_t share = heads * (out_per_head + lse_per_head);  /* <= out + lse bytes */
        uint64_t ws = ops->attention_workspace(&p);
        /* Saturate: a workspace that overflows can never fit. */
        job->reserve[r] = ws > UINT64_MAX - share ? UINT64_MAX : share + ws;
    }
    job->run = attention_run;
    return WF_OK;
}

static wf_status_t attention_run(wf_djob_t *job, int rank, int group_size,
                                 wf_worker_t *w)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    wf_attn_params_t p;
    base_params(job, &p);
    wf_attention_heads(p.Hq, rank, group_size, &p.h_begin, &p.h_end);
    /* Frames as ZeroMQ received them: unaligned, read-only here. */
    p.q = zmq_msg_data(&job->frames[job->req.tensors[a->q].frame]);
    p.k = zmq_msg_data(&job->frames[job->req.tensors[a->k].frame]);
    p.v = zmq_msg_data(&job->frames[job->req.tensors[a->v].frame]);
    p.out = job->out[0];
    p.lse = a->return_lse ? (float *)job->out[1] : NULL;
    size_t ws_bytes = w->ops->attention_workspace(&p);
    void *ws = wf_worker_workspace(w, ws_bytes);
    if (!ws)
        return WF_E_NO_MEMORY;
    return w->ops->attention(w->ctx, &p, ws);
}
