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
