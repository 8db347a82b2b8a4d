/* family_run.c — the daemon's table of model families and what every
 * family's forward shares (family_run.h). */
#include "models/family_run.h"

#include <math.h>
#include <string.h>

extern const wf_family_run_t wf_flux_family_run;
extern const wf_family_run_t wf_wan_family_run;

/* Every family this daemon runs. A new family adds its line here and in
 * modelfiles/family.c. */
static const wf_family_run_t *const runs[] = {
    &wf_flux_family_run,
    &wf_wan_family_run,
};

const wf_family_run_t *wf_family_run_of(const wf_family_t *fam)
{
    for (size_t i = 0; fam && i < sizeof runs / sizeof runs[0]; i++)
        if (runs[i]->fam == fam)
            return runs[i];
    return NULL;
}

bool wf_fwd_group_ok(const wf_fwd_group_t *grp)
{
    int T = grp->tp_degree, R = grp->ring_degree, U = grp->ulysses_degree;
    const struct {
        wf_comm_t *c;
        int n;
    } cs[4] = { { grp->tp, T }, { grp->seq, R * U }, { grp->ring, R }, { grp->ulysses, U } };
    if (T < 1 || R < 1 || U < 1)
        return false;
    for (int k = 0; k < 4; k++) {
        if (cs[k].n > 1 ? (!cs[k].c || wf_comm_size(cs[k].c) != cs[k].n)
                        : (cs[k].c && wf_comm_size(cs[k].c) != 1))
            return false;
    }
    return true;
}

void wf_fwd_group_abort(const wf_fwd_group_t *grp)
{
    wf_comm_t *c = grp->tp      ? grp->tp
                   : grp->seq   ? grp->seq
                   : grp->ring  ? grp->ring
                                : grp->ulysses;
    if (c)
        wf_comm_abort(c);
}

wf_status_t wf_fwd_block_run(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                             const wf_fwd_group_t *grp, const void *key, size_t key_bytes,
                             const void *anchor, wf_status_t (*fn)(void *arg), void *arg)
{
    /* a collective inside a capture would be recorded, not run, and the
     * comms wait on the host after each operation: never captured */
    bool alone = grp->tp_degree == 1 && grp->ring_degree == 1 && grp->ulysses_degree == 1;
    if (!ops->graph_begin || !ops->graph_end || !alone)
        return fn(arg);
    wf_graph_step_t step;
    wf_status_t st = ops->graph_begin(ctx, key, key_bytes, anchor, &step);
    if (st != WF_OK)
        return st;
    if (step == WF_GRAPH_REPLAYED)
        return WF_OK;
    st = fn(arg);
    if (step != WF_GRAPH_CAPTURE)
        return st;
    if (ops->graph_end(ctx, st == WF_OK) == WF_OK)
        return WF_OK;
    return fn(arg); /* nothing ran: the same ops, uncaptured */
}

const char *wf_fwd_device_entry_missing(const wf_backend_ops_t *o)
{
    if (!o->copy_h2d)
        return NULL;
    return !o->copy_d2h      ? "copy_d2h"
           : !o->synchronize ? "synchronize"
           : !o->convert     ? "convert"
           : !o->fill_f32    ? "fill_f32"
                             : NULL;
}

wf_status_t wf_fwd_seq_tokens(const wf_cp_job_t *job, int R, int U, int seq_index,
                              int64_t *ret_row0, int64_t *ret_len)
{
    if ((int64_t)R * U == 1) {
        if (!job || seq_index != 0)
            return WF_E_INTERNAL;
        *ret_row0 = 0;
        *ret_len = job->Sq;
        return WF_OK;
    }
    wf_cp_seg_t seg[WF_CP_MAX_SEGS];
    int nseg = 0;
    if (wf_cp_attention_segments(job, R, U, seq_index, false, false, seg, &nseg) != WF_OK ||
        nseg > 1)
        return WF_E_INTERNAL;
    if (nseg == 1) {
        *ret_row0 = seg[0].start;
        *ret_len = seg[0].len;
        return WF_OK;
    }
    /* an empty shard (fewer tokens than seq ranks): the shards' sizes
     * never grow in rank order (tensor_split's), so it starts at the end */
    *ret_row0 = job->Sq;
    *ret_len = 0;
    return WF_OK;
}

wf_cp_job_t wf_fwd_self_attention(int64_t B, int64_t S, int64_t H, int64_t D, int P, int U,
                                  bool alltoall)
{
    wf_cp_job_t j;
    memset(&j, 0, sizeof j);
    j.B = B;
    j.Sq = j.Skv = S;
    j.Hq = j.Hkv = H;
    j.D = D;
    j.hq_begin = 0;
    j.hq_end = H;
    j.scale = (float)(1.0 / sqrt((double)D));
    j.q_dtype = j.k_dtype = j.v_dtype = j.out_dtype = WF_DTYPE_F32;
    j.rotate_method = alltoall ? WF_CP_ROTATE_ALLTOALL : WF_CP_ROTATE_ALLGATHER;
    j.convert_to_fp32 = true;
    j.ring_anything = S % P != 0;
    j.ulysses_anything = H % U != 0;
    j.local = true;
    return j;
}

wf_attn_params_t wf_fwd_attention_params(int64_t B, int64_t Sq, int64_t Skv, int64_t H,
                                         int64_t D)
{
    wf_attn_params_t p;
    memset(&p, 0, sizeof p);
    p.B = B;
    p.Sq = Sq;
    p.Skv = Skv;
    p.Hq = p.Hkv = H;
    p.D = D;
    p.h_begin = 0;
    p.h_end = H;
    p.scale = (float)(1.0 / sqrt((double)D));
    p.q_dtype = p.k_dtype = p.v_dtype = p.out_dtype = WF_DTYPE_F32;
    return p;
}

/* ---- the first-block cache ---------------------------------------------------------- */

#define FBC_ALIGN 256u

static size_t fbc_piece(size_t floats)
{
    return (floats * sizeof(float) + FBC_ALIGN - 1) / FBC_ALIGN * FBC_ALIGN;
}

size_t wf_fbc_bytes(size_t floats)
{
    if (floats > (SIZE_MAX - 4 * FBC_ALIGN) / 4 / sizeof(float) / 4)
        return SIZE_MAX;
    return 4 * fbc_piece(floats) + FBC_ALIGN;
}

void wf_fbc_init(wf_fbc_t *f, void *block, size_t floats)
{
    memset(f, 0, sizeof *f);
    unsigned char *p = block;
    size_t piece = fbc_piece(floats);
    f->res[0] = (float *)p;
    f->res[1] = (float *)(p + piece);
    f->head = (float *)(p + 2 * piece);
    f->tail = (float *)(p + 3 * piece);
    f->scratch = (double *)(p + 4 * piece);
    f->cap = floats;
    f->change = NAN;
}

/* dst = src, n floats, on the backend. */
static wf_status_t fbc_copy(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx, float *dst,
                            const float *src, size_t n)
{
    return n ? ops->copy_rows(ctx, dst, n * sizeof(float), src, n * sizeof(float), 1,
                              n * sizeof(float))
             : WF_OK;
}

wf_status_t wf_fbc_head_begin(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                              const float *res_rows, size_t res_n, size_t state_n)
{
    f->reused = false;
    f->change = NAN;
    if (res_n > f->cap || state_n > f->cap || res_n > state_n)
        return WF_E_INTERNAL;
    if (res_n != f->res_n || state_n != f->state_n)
        f->held = false;
    f->res_n = res_n;
    f->state_n = state_n;
    return fbc_copy(ops, ctx, f->res[1 - f->cur], res_rows, res_n);
}

wf_status_t wf_fbc_head_end(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            wf_comm_t *seq, const float *res_rows, float *stream, bool *skip)
{
    int nxt = 1 - f->cur;
    *skip = false;
    wf_status_t st = f->res_n ? ops->axpy(ctx, f->res[nxt], -1.0f, res_rows, (int64_t)f->res_n)
                              : WF_OK;
    if (st != WF_OK)
        return st;
    if (f->held && f->threshold > 0) {
        double sums[2];
        st = ops->change_sums(ctx, f->res[nxt], f->res[f->cur], (int64_t)f->res_n,
                              f->scratch, sums);
        if (st == WF_OK && seq) {
            /* the whole sequence's sums: every seq rank takes the same
             * decision (tp ranks hold the same rows and sums) */
            if (ops->copy_h2d) {
                if ((st = ops->copy_h2d(ctx, f->scratch, sums, sizeof sums)) == WF_OK &&
                    (st = ops->synchronize(ctx)) == WF_OK &&
                    (st = wf_comm_allreduce(seq, f->scratch, f->scratch, 2, WF_COMM_F64,
                                            WF_COMM_SUM)) == WF_OK &&
                    (st = ops->copy_d2h(ctx, sums, f->scratch, sizeof sums)) == WF_OK)
                    st = ops->synchronize(ctx);
            } else {
                st = wf_comm_allreduce(seq, sums, sums, 2, WF_COMM_F64, WF_COMM_SUM);
            }
        }
        if (st != WF_OK)
            return st;
        f->change = sums[1] > 0 ? sums[0] / sums[1] : (sums[0] > 0 ? INFINITY : 0);
        /* diffusers computes the remaining blocks when change > threshold */
        *skip = !(f->change > f->threshold);
    }
    if (*skip) {
        f->reused = true;
        return ops->axpy(ctx, stream, 1.0f, f->tail, (int64_t)f->state_n);
    }
    f->cur = nxt;
    f->held = false;            /* until the tail of this step is in */
    return fbc_copy(ops, ctx, f->head, stream, f->state_n);
}

wf_status_t wf_fbc_tail_end(wf_fbc_t *f, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            const float *stream)
{
    wf_status_t st = fbc_copy(ops, ctx, f->tail, stream, f->state_n);
    if (st == WF_OK && f->state_n)
        st = ops->axpy(ctx, f->tail, -1.0f, f->head, (int64_t)f->state_n);
    f->held = st == WF_OK;
    return st;
}
