/* attention.c — attention jobs: plan and per-rank step (see attention.h). */
#include "attention.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "runtime/worker.h"

#include "parallel/cp_attention.h"

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
    p->fp8 = a->fp8;
}

/* Estimated flops of an attention job: two matmuls of 2*Sq*Skv*D per
 * (batch, query head), 4*B*Hq*Sq*Skv*D, half of it when causal (about
 * half the (q, k) pairs are masked). Saturates (double, then clamped). */
static uint64_t attention_flops(const wf_djob_t *job)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];
    const wf_tensor_desc_t *k = &job->req.tensors[a->k];
    double f = 4.0 * (double)q->shape[0] * (double)q->shape[2] * (double)q->shape[1] *
               (double)k->shape[1] * (double)q->shape[3];
    if (a->causal)
        f /= 2.0;
    return f >= 1.8e19 ? UINT64_MAX : (uint64_t)f;
}

/* The agreed step boundaries of a cp job: step 0 is the start of the
 * run (wf_attention_cp_run), ring boundary i is i + 1. */
static wf_status_t cp_boundary(void *arg, int64_t step, bool ahead)
{
    return ahead ? wf_djob_boundary_ahead(arg, step + 1) : wf_djob_boundary(arg, step + 1);
}

static bool opt(wf_opt_t o, bool def)
{
    return o == WF_OPT_ON ? true : o == WF_OPT_OFF ? false : def;
}

static wf_status_t head_split_run(wf_djob_t *job, int rank, int group_size,
                                  wf_worker_t *w);

/* Arena bytes of one rank of a head-split job on a device-memory backend:
 * q, k, v, out and lse (when returned), each rounded up to 256 bytes, the
 * dev_alloc alignment (as wf_cuda_attn_job_bytes counts them); the
 * kernel's workspace comes on top (plan_attention). Saturates. */
static uint64_t dev_bytes(const wf_djob_t *job)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    uint64_t b[5] = { job->req.tensors[a->q].nbytes, job->req.tensors[a->k].nbytes,
                      job->req.tensors[a->v].nbytes, job->out_desc[0].nbytes,
                      job->n_outputs > 1 ? job->out_desc[1].nbytes : 0 };
    uint64_t t = 0;
    for (int i = 0; i < 5; i++) {
        if (b[i] > UINT64_MAX - 255 - t)
            return UINT64_MAX;
        t += (b[i] + 255) & ~(uint64_t)255;
    }
    return t;
}


/* The context-parallel job of tp slice t (tensor pointers left NULL).
 * The tp slices split the heads as a head-split job does
 * (wf_attention_heads: the first Hq mod tp slices one head more). */
static void cp_job_of(const wf_djob_t *job, int t, wf_cp_job_t *cj)
{
    wf_attn_params_t p;
    base_params(job, &p);
    int64_t hb = 0, he = 0;
    wf_attention_heads(p.Hq, t, (int)job->mesh.deg.tp, &hb, &he);
    memset(cj, 0, sizeof *cj);
    cj->B = p.B;
    cj->Sq = p.Sq;
    cj->Skv = p.Skv;
    cj->Hq = p.Hq;
    cj->Hkv = p.Hkv;
    cj->D = p.D;
    cj->hq_begin = hb;
    cj->hq_end = he;
    cj->scale = p.scale;
    cj->causal = p.causal;
    cj->q_dtype = p.q_dtype;
    cj->k_dtype = p.k_dtype;
    cj->v_dtype = p.v_dtype;
    cj->out_dtype = p.out_dtype;
    cj->return_lse = job->n_outputs > 1;
    cj->rotate_method = job->rotate_method == WF_ROTATE_ALLTOALL
                            ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER;
    cj->convert_to_fp32 = job->convert_to_fp32;
    cj->ring_anything = job->ring_anything;
    cj->ulysses_anything = job->ulysses_anything;
    cj->load_balance = job->load_balance;
    cj->fp8 = p.fp8;
}

/* Plan of a context-parallel job: checks and per-rank memory. */
static wf_status_t plan_cp(wf_djob_t *job, const wf_backend_ops_t *ops,
                           uint64_t out_per_head, uint64_t lse_per_head,
                           char *err, size_t err_len)
{
    const wf_mesh_t *m = &job->mesh;
    int64_t hq = job->req.tensors[job->req.args.attention.q].shape[2];
    int R = (int)m->deg.ring, U = (int)m->deg.ulysses, T = (int)m->deg.tp;
    /* Every rank of the replica runs, so every tp slice needs a head;
     * the slices may be uneven (cp_job_of), as on a head-split mesh. */
    if (hq < T) {
        snprintf(err, err_len, "%lld attention heads for %d tensor-parallel ranks: on a "
                 "mesh with ring x ulysses > 1 every tp rank needs at least one head",
                 (long long)hq, T);
        return WF_E_BAD_ARGUMENT;
    }
    /* Each slice against the ring / Ulysses degrees (the last, smallest
     * slices may not divide by ulysses where the first do). */
    wf_cp_job_t cj;
    for (int t = T - 1; t >= 0; t--) {
        cp_job_of(job, t, &cj);
        wf_status_t st = wf_cp_attention_check(&cj, R, U, err, err_len);
        /* On the wire WF_E_BAD_SHAPE means an invalid descriptor
         * (PROTOCOL.md section 6); a valid shape that the mesh cannot
         * shard is a job that does not fit: WF_E_BAD_ARGUMENT, with the
         * module's message. */
        if (st == WF_E_BAD_SHAPE)
            st = WF_E_BAD_ARGUMENT;
        if (st != WF_OK)
            return st;
    }
    /* cj is slice 0 now, the largest: its workspace bounds every rank's */
    /* A backend on device memory (CUDA) runs the job in device mode (its
     * comms move device buffers: NCCL, or the host comm behind the
     * staging): each rank reserves its device workspace in the arena;
     * the outputs are host memory there. Otherwise the host workspace and
     * the root's share of the outputs. */
    size_t ws = 0, hws = 0;
    if (ops->dev_alloc) {
        if (wf_cp_attention_workspace_dev(&cj, R, U, ops, &ws, &hws) != WF_OK)
            ws = 0;
    } else {
        ws = wf_cp_attention_workspace(&cj, R, U, ops);
    }
    if (ws == 0 || ws == SIZE_MAX) {
        snprintf(err, err_len, "context-parallel plan refused the job");
        return WF_E_BAD_ARGUMENT;
    }
    job->group_size = R * U * T;
    for (int r = 0; r < job->group_size; r++) {
        /* replica rank r: tp coordinate r % T, seq index r / T; seq index
         * 0 is its slice's root and writes the slice's outputs */
        int64_t hb = 0, he = 0;
        wf_attention_heads(hq, r % T, T, &hb, &he);
        uint64_t share = ops->dev_alloc ? 0
                         : (uint64_t)(he - hb) * (out_per_head + lse_per_head);
        uint64_t mine = r < T ? share : 0;
        job->reserve[r] = ws > UINT64_MAX - mine ? UINT64_MAX : ws + mine;
    }
    job->run = wf_attention_cp_run;
    return WF_OK;
}

wf_status_t wf_attention_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                              const wf_mesh_t *mesh,
                              const wf_settings_t *defaults, char *err,
                              size_t err_len)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    const wf_tensor_desc_t *q = &job->req.tensors[a->q];

    job->kind = WF_DJOB_ATTENTION;
    job->flops = attention_flops(job);
    job->mesh = *mesh;
    job->plan_epoch = mesh->epoch;
    job->scale = a->has_scale ? a->scale : (float)(1.0 / sqrt((double)q->shape[3]));
    job->rotate_method = a->rotate_method != WF_ROTATE_DEFAULT
                             ? a->rotate_method
                             : (wf_rotate_t)defaults->rotate_method;
    job->convert_to_fp32 = opt(a->convert_to_fp32, defaults->convert_to_fp32);
    job->ring_anything = opt(a->ring_anything, defaults->ring_anything);
    job->ulysses_anything = opt(a->ulysses_anything, defaults->ulysses_anything);
    job->load_balance = opt(a->load_balance, defaults->load_balance);

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

    /* Bytes per head are exact: out and lse have heads as their
     * second-innermost / innermost dim. */
    int64_t hq = q->shape[2];
    uint64_t out_per_head = out->nbytes / (uint64_t)hq;
    uint64_t lse_per_head = a->return_lse ? job->out_desc[1].nbytes / (uint64_t)hq : 0;
    memset(job->reserve, 0, sizeof job->reserve);

    /* A backend whose kernels take some head dims only (CUDA: 64 and
     * 128, kernels/cuda/README.md): refuse others here, before any rank
     * runs. */
    if (ops->attention_head_dim_ok && !ops->attention_head_dim_ok(q->shape[3])) {
        snprintf(err, err_len, "head dim %lld: the %s backend supports 64 "
                 "and 128", (long long)q->shape[3], ops->name);
        return WF_E_BAD_ARGUMENT;
    }

    /* One rule on every mesh (PROTOCOL.md 3.3.1): the tp ranks split the
     * query heads as tensor_split does, the first Hq mod tp one head
     * more (wf_attention_heads); `devices` narrows a head split only
     * (ring = ulysses = 1): a sequence-sharded job uses every rank of its
     * replica, so another value is refused, not ignored. */
    job->cp = mesh->deg.ring * mesh->deg.ulysses > 1;
    if (job->cp && a->devices != 0) {
        snprintf(err, err_len, "devices = %" PRIu32 ": a job on a mesh with ring "
                 "(%" PRIu32 ") x ulysses (%" PRIu32 ") > 1 runs on every rank of its "
                 "replica; devices applies to ring = ulysses = 1 only (send 0)",
                 a->devices, mesh->deg.ring, mesh->deg.ulysses);
        return WF_E_BAD_ARGUMENT;
    }
    if (job->cp)
        return plan_cp(job, ops, out_per_head, lse_per_head, err, err_len);

    uint64_t g = mesh->deg.tp;
    if (a->devices > 0 && a->devices < g)
        g = a->devices;
    if ((uint64_t)hq < g)
        g = (uint64_t)hq;
    job->group_size = (int)g;

    /* Memory of rank r: its share of out and lse plus the backend's
     * workspace for its head range. */
    wf_attn_params_t p;
    base_params(job, &p);
    if (ops->dev_alloc) {
        /* Device memory: every rank stages the whole of q, k, v and out
         * (and lse) in its arena (dev_bytes); the head split is in the
         * kernel's head range. What the arena holds is what is admitted. */
        uint64_t need = dev_bytes(job);
        for (int r = 0; r < job->group_size; r++) {
            /* plus the kernel's workspace of the rank's heads (the CUDA
             * fp8 path's e4m3 copies; 0 otherwise), 256-byte rounded */
            wf_attention_heads(hq, r, job->group_size, &p.h_begin, &p.h_end);
            uint64_t ws = ops->attention_workspace(&p);
            ws = ws > UINT64_MAX - 255 ? UINT64_MAX : (ws + 255) & ~(uint64_t)255;
            job->reserve[r] = ws > UINT64_MAX - need ? UINT64_MAX : need + ws;
        }
        job->run = head_split_run;
        return WF_OK;
    }
    for (int r = 0; r < job->group_size; r++) {
        wf_attention_heads(hq, r, job->group_size, &p.h_begin, &p.h_end);
        uint64_t heads = (uint64_t)(p.h_end - p.h_begin);
        uint64_t share = heads * (out_per_head + lse_per_head);  /* <= out + lse bytes */
        uint64_t ws = ops->attention_workspace(&p);
        /* Saturate: a workspace that overflows can never fit. */
        job->reserve[r] = ws > UINT64_MAX - share ? UINT64_MAX : share + ws;
    }
    job->run = head_split_run;
    return WF_OK;
}

/* The head-split step on a device-memory backend: q, k, v from the
 * frames (unaligned host memory is fine for the copies) into the arena,
 * the kernel on this rank's heads, the results back, synchronize (a
 * kernel error surfaces there and fails the job), release the arena.
 * A rank that computes every head copies out straight into the job's
 * output buffers; otherwise the whole device out goes to the worker's
 * host workspace and only this rank's heads are copied from there, since
 * the ranks share the job's output buffers. */
static wf_status_t head_split_dev(wf_djob_t *job, wf_attn_params_t *p,
                                  const void *hq, const void *hk,
                                  const void *hv, wf_worker_t *w)
{
    const wf_backend_ops_t *o = w->ops;
    const wf_attention_args_t *a = &job->req.args.attention;
    const size_t qb = job->req.tensors[a->q].nbytes;
    const size_t kb = job->req.tensors[a->k].nbytes;
    const size_t vb = job->req.tensors[a->v].nbytes;
    const size_t ob = job->out_desc[0].nbytes;
    const size_t lb = p->lse ? job->out_desc[1].nbytes : 0;
    const bool whole = p->h_begin == 0 && p->h_end == p->Hq;
    unsigned char *host = NULL;
    if (!whole) {
        host = wf_worker_workspace(w, ob + lb);
        if (!host)
            return WF_E_NO_MEMORY;
    }
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL, *dlse = NULL;
    wf_status_t st = o->dev_alloc(w->ctx, qb, &dq);
    if (st == WF_OK)
        st = o->dev_alloc(w->ctx, kb, &dk);
    if (st == WF_OK)
        st = o->dev_alloc(w->ctx, vb, &dv);
    if (st == WF_OK)
        st = o->dev_alloc(w->ctx, ob, &dout);
    if (st == WF_OK && lb)
        st = o->dev_alloc(w->ctx, lb, &dlse);
    if (st == WF_OK)
        st = o->copy_h2d(w->ctx, dq, hq, qb);
    if (st == WF_OK)
        st = o->copy_h2d(w->ctx, dk, hk, kb);
    if (st == WF_OK)
        st = o->copy_h2d(w->ctx, dv, hv, vb);
    void *hout = p->out;
    float *hlse = p->lse;
    if (st == WF_OK) {
        p->q = dq;
        p->k = dk;
        p->v = dv;
        p->out = dout;
        p->lse = lb ? (float *)dlse : NULL;
        /* the kernel's workspace (fp8: the quantized copies), counted in
         * the job's reservation */
        size_t wsb = o->attention_workspace(p);
        void *dws = NULL;
        if (wsb)
            st = o->dev_alloc(w->ctx, wsb, &dws);
        if (st == WF_OK)
            st = o->attention(w->ctx, p, dws);
    }
    if (st == WF_OK)
        st = o->copy_d2h(w->ctx, whole ? hout : host, dout, ob);
    if (st == WF_OK && lb)
        st = o->copy_d2h(w->ctx, whole ? (void *)hlse : host + ob, dlse, lb);
    /* Always: the copies already queued must finish before the arena is
     * released, and an asynchronous kernel error is reported here. */
    wf_status_t ss = o->synchronize(w->ctx);
    o->dev_reset(w->ctx);
    if (st == WF_OK)
        st = ss;
    if (st != WF_OK || whole)
        return st;
    /* out (B, Sq, Hq, D) and lse (B, Sq, Hq): this rank's heads are one
     * run per (b, s) row. */
    const size_t es = ob / (size_t)(p->B * p->Sq * p->Hq * p->D);
    const size_t row = (size_t)(p->Hq * p->D) * es;
    const size_t off = (size_t)(p->h_begin * p->D) * es;
    const size_t len = (size_t)((p->h_end - p->h_begin) * p->D) * es;
    const size_t rows = (size_t)(p->B * p->Sq);
    for (size_t i = 0; i < rows; i++)
        memcpy((unsigned char *)hout + i * row + off, host + i * row + off, len);
    if (lb)
        for (size_t i = 0; i < rows; i++)
            memcpy(hlse + i * (size_t)p->Hq + p->h_begin,
                   (const float *)(const void *)(host + ob) + i * (size_t)p->Hq + p->h_begin,
                   (size_t)(p->h_end - p->h_begin) * sizeof(float));
    return WF_OK;
}

static wf_status_t head_split_run(wf_djob_t *job, int rank, int group_size,
                                  wf_worker_t *w)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    if (job->root_here && (!job->inputs_in || job->inputs_bad))
        return WF_E_INTERNAL;   /* a member's part: inputs not as described */
    /* no communication: each rank may stop on its own; its heads are one
     * kernel call, so the start is its only boundary */
    wf_status_t bs = wf_djob_boundary(job, 0);
    if (bs != WF_OK)
        return bs;
    wf_attn_params_t p;
    base_params(job, &p);
    wf_attention_heads(p.Hq, rank, group_size, &p.h_begin, &p.h_end);
    /* Frames as ZeroMQ received them: unaligned, read-only here. */
    p.q = zmq_msg_data(&job->frames[job->req.tensors[a->q].frame]);
    p.k = zmq_msg_data(&job->frames[job->req.tensors[a->k].frame]);
    p.v = zmq_msg_data(&job->frames[job->req.tensors[a->v].frame]);
    p.out = job->out[0];
    p.lse = a->return_lse ? (float *)job->out[1] : NULL;
    if (w->ops->dev_alloc)
        return head_split_dev(job, &p, p.q, p.k, p.v, w);
    size_t ws_bytes = w->ops->attention_workspace(&p);
    void *ws = wf_worker_workspace(w, ws_bytes);
    if (!ws)
        return WF_E_NO_MEMORY;
    return w->ops->attention(w->ctx, &p, ws);
}

wf_status_t wf_attention_head_split_run(wf_djob_t *job, int rank,
                                        int group_size, wf_worker_t *w)
{
    return head_split_run(job, rank, group_size, w);
}

/* The single call site of the context-parallel module. */
static wf_status_t cp_step(wf_djob_t *job, int rank, wf_worker_t *w)
{
    const wf_attention_args_t *a = &job->req.args.attention;
    int T = (int)job->mesh.deg.tp;
    int t = rank % T;
    bool root = rank / T == 0;
    wf_cp_job_t cj;
    cp_job_of(job, t, &cj);
    cj.boundary = cp_boundary;
    cj.boundary_arg = job;
    if (root && job->root_here && (!job->inputs_in || job->inputs_bad))
        /* a member's root: inputs not as described. Not WF_E_MALFORMED:
         * the coordinator reads that in a "done" as a refused part (the
         * node counts as lost) instead of a failed one (rebuild) */
        return WF_E_INTERNAL;
    if (root) {
        cj.q = zmq_msg_data(&job->frames[job->req.tensors[a->q].frame]);
        cj.k = zmq_msg_data(&job->frames[job->req.tensors[a->k].frame]);
        cj.v = zmq_msg_data(&job->frames[job->req.tensors[a->v].frame]);
        cj.out = job->out[0];
        cj.lse = a->return_lse ? (float *)job->out[1] : NULL;
    }
    wf_cp_group_t grp = {
        .seq = w->group[WF_MESH_DIM_SEQ],
        .ring = w->group[WF_MESH_DIM_RING],
        .ulysses = w->group[WF_MESH_DIM_ULYSSES],
        .ring_degree = (int)job->mesh.deg.ring,
        .ulysses_degree = (int)job->mesh.deg.ulysses,
    };
    if (w->ops->dev_alloc) {
        /* Device mode: the workspace in the arena (admitted with the job),
         * the counts and the root's staging on the host. */
        size_t db = 0, hb = 0;
        void *dws = NULL;
        wf_status_t st = wf_cp_attention_workspace_dev(&cj, grp.ring_degree,
                                                       grp.ulysses_degree, w->ops, &db, &hb);
        if (st == WF_OK)
            st = w->ops->dev_alloc(w->ctx, db, &dws);
        void *hws = st == WF_OK ? wf_worker_workspace(w, hb) : NULL;
        if (st == WF_OK && !hws)
            st = WF_E_NO_MEMORY;
        if (st == WF_OK) /* (a failure before it: the caller aborts the world) */
            st = wf_cp_attention_run_dev(&cj, &grp, w->ops, w->ctx, dws, db, hws, hb);
        w->ops->dev_reset(w->ctx); /* the run synchronized before returning */
        return st;
    }
    size_t bytes = wf_cp_attention_workspace(&cj, grp.ring_degree,
                                             grp.ulysses_degree, w->ops);
    void *ws = wf_worker_workspace(w, bytes);
    if (!ws)
        return WF_E_NO_MEMORY;
    return wf_cp_attention_run(&cj, &grp, w->ops, w->ctx, ws, bytes);
}

wf_status_t wf_attention_cp_run(wf_djob_t *job, int rank, int group_size,
                                wf_worker_t *w)
{
    (void)group_size;
    wf_status_t st;
    if (!w->world || w->mesh.epoch != job->epoch ||
        memcmp(&w->mesh.deg, &job->mesh.deg, sizeof w->mesh.deg) != 0) {
        /* the scheduler only dispatches between regroups: a bug */
        st = WF_E_INTERNAL;
    } else {
        /* step 0: the start, before the first collective (every rank) */
        st = wf_djob_boundary(job, 0);
        if (st != WF_OK)
            return st;
        st = cp_step(job, rank, w);
        /* stream-ordered collectives of a device comm (comm.h "Device
         * comms"): the result stands only if none was aborted after it
         * was queued */
        if (st == WF_OK)
            st = wf_comm_sync(w->world);
    }
    /* Peers may be inside a collective waiting for this rank: abort the
     * world so they return WF_E_ABORTED; the daemon rebuilds it. Not after
     * a step boundary stopped the job: every rank stopped there alike. */
    if (st != WF_OK && st != WF_E_DEADLINE && st != WF_E_CANCELLED && w->world)
        wf_comm_abort(w->world);
    return st;
}
