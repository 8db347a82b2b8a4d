/* flux_linear.c — the FLUX forward's linear layers on one tp rank and
 * the layouts of the activations between them (flux_forward.c "Layouts
 * over tp"): a layout is full or split by the producing placement;
 * flux_convert turns any into any other, deciding on the layouts alone so
 * that every tp rank enters the same collectives. The arithmetic is the
 * backend's (ops->linear, bias_act, copy_rows) on its memory; the
 * collectives are the comm's.
 *
 * Not here: which layer runs when (flux_blocks.c, flux_embed.c).
 */
#include "flux_run.h"

#include <string.h>

_Static_assert(WF_TP_MAX_BLOCKS <= WF_LINEAR_MAX_BLOCKS,
               "a rowwise packed shard view is one weight block per plan block");

/* ---- layouts over tp ----------------------------------------------------------- */

lay_t flux_lay_full(int64_t n)
{
    lay_t l;
    memset(&l, 0, sizeof l);
    l.n = n;
    return l;
}

/* The layout a linear takes (`input`) or emits with placement p. With one
 * rank everything is full. */
lay_t flux_lay_of(const wf_tp_place_t *p, bool input, int T)
{
    bool cols = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool rows = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    lay_t l = flux_lay_full(input ? p->in : p->out);
    if (T == 1 || !(input ? rows : cols))
        return l;
    l.nb = p->n_blocks;
    for (uint32_t b = 0; b < p->n_blocks; b++)
        l.block[b] = p->block[b];
    return l;
}

int64_t flux_lay_width(const lay_t *l, int T) { return l->nb ? l->n / T : l->n; }

bool flux_lay_same(const lay_t *a, const lay_t *b)
{
    if (a->n != b->n || a->nb != b->nb)
        return false;
    for (uint32_t k = 0; k < a->nb; k++)
        if (a->block[k] != b->block[k])
            return false;
    return true;
}

/* Pieces of rank r (ascending): count, starts and lengths in full columns. */
int flux_lay_pieces(const lay_t *l, int r, int T, int64_t *st, int64_t *ln)
{
    if (l->nb == 0) {
        st[0] = 0;
        ln[0] = l->n;
        return 1;
    }
    int64_t bs = 0;
    for (uint32_t b = 0; b < l->nb; b++) {
        int64_t q = l->block[b] / T;
        st[b] = bs + (int64_t)r * q;
        ln[b] = q;
        bs += l->block[b];
    }
    return (int)l->nb;
}

/* Rank r's pieces of l inside the window [a, a + w), shifted by -a. */
int flux_win_pieces(const lay_t *l, int r, int T, int64_t a, int64_t w, int64_t *st,
                    int64_t *ln)
{
    int64_t s0[WF_TP_MAX_BLOCKS], l0[WF_TP_MAX_BLOCKS];
    int n = flux_lay_pieces(l, r, T, s0, l0), m = 0;
    for (int k = 0; k < n; k++) {
        int64_t lo = wf_max_i64(s0[k], a), hi = wf_min_i64(s0[k] + l0[k], a + w);
        if (hi <= lo)
            continue;
        st[m] = lo - a;
        ln[m] = hi - lo;
        m++;
    }
    return m;
}

/* rows x `w` floats from src (row stride ld_src floats) to dst (ld_dst). */
static wf_status_t copy_cols(run_t *x, float *dst, int64_t ld_dst, const float *src,
                             int64_t ld_src, int64_t rows, int64_t w)
{
    if (w <= 0 || rows <= 0)
        return WF_OK;
    return x->ops->copy_rows(x->ctx, dst, (size_t)ld_dst * sizeof(float), src,
                             (size_t)ld_src * sizeof(float), rows, (size_t)w * sizeof(float));
}

/* Columns of an activation in layout sl (rows x its local width at src,
 * row stride ld_src) -> this rank's columns of target layout tl inside
 * the window [a, a + sl->n) of tl's dim, into dst (row stride ld_dst).
 * Collective over tp when sl is split and the pieces differ on some rank. */
wf_status_t flux_convert(run_t *x, const float *src, int64_t ld_src, const lay_t *sl,
                         int64_t rows, const lay_t *tl, int64_t a, float *dst,
                         int64_t ld_dst)
{
    const int T = x->g.T;
    int64_t ts[WF_TP_MAX_BLOCKS], tn[WF_TP_MAX_BLOCKS];
    int nt = flux_win_pieces(tl, x->t, T, a, sl->n, ts, tn);
    wf_status_t st;
    if (sl->nb == 0) {
        /* full source: a local slice, one strided copy per piece */
        int64_t o = 0;
        for (int k = 0; k < nt; k++) {
            if ((st = copy_cols(x, dst + o, ld_dst, src + ts[k], ld_src, rows, tn[k])) != WF_OK)
                return st;
            o += tn[k];
        }
        return WF_OK;
    }
    /* split source: already what every rank wants? (the same answer on
     * every rank, so that all or none enter the all-gather) */
    bool same = true;
    for (int r = 0; r < T && same; r++) {
        int64_t as[WF_TP_MAX_BLOCKS], an[WF_TP_MAX_BLOCKS];
        int64_t bs[WF_TP_MAX_BLOCKS], bn[WF_TP_MAX_BLOCKS];
        int na = flux_win_pieces(tl, r, T, a, sl->n, as, an);
        int nb = flux_lay_pieces(sl, r, T, bs, bn);
        same = na == nb;
        for (int k = 0; k < na && same; k++)
            same = as[k] == bs[k] && an[k] == bn[k];
    }
    const int64_t wl = flux_lay_width(sl, T);
    if (same)
        return copy_cols(x, dst, ld_dst, src, ld_src, rows, wl);
    if (ld_src != wl || (size_t)(rows * sl->n) > x->W.G_n || !x->grp->tp)
        return WF_E_INTERNAL;
    float *G = fp(x, x->W.G);
    st = wf_comm_allgather(x->grp->tp, src, G, (size_t)(rows * wl) * sizeof(float));
    if (st != WF_OK)
        return st;
    /* full column c lies in block b at offset o: rank o / q holds it at
     * local column (q's of earlier blocks) + o % q; a run of columns from
     * one owner is one strided copy over every row */
    int64_t d = 0;
    for (int k = 0; k < nt; k++) {
        int64_t c = ts[k], end = ts[k] + tn[k];
        while (c < end) {
            int64_t bs = 0, pre = 0, q = 0, o = 0;
            for (uint32_t b = 0; b < sl->nb; b++) {
                q = sl->block[b] / T;
                if (c < bs + sl->block[b]) {
                    o = c - bs;
                    break;
                }
                bs += sl->block[b];
                pre += q;
            }
            int64_t owner = o / q, lc = pre + o % q, run = wf_min_i64(end - c, q - o % q);
            st = copy_cols(x, dst + d, ld_dst, G + owner * rows * wl + lc, wl, rows, run);
            if (st != WF_OK)
                return st;
            d += run;
            c += run;
        }
    }
    return WF_OK;
}

wf_linear_params_t flux_lin_params(const wf_flux_linear_t *L, int64_t rows)
{
    wf_linear_params_t p;
    memset(&p, 0, sizeof p);
    p.rows = rows;
    p.in = L->place.local_in;
    p.out = L->place.local_out;
    p.w_dtype = L->w_dtype;
    p.ldw = L->ldw;
    p.nwb = L->nwb;
    for (uint32_t k = 0; k < L->nwb && k < WF_LINEAR_MAX_BLOCKS; k++) {
        p.wb[k] = L->wb[k];
        p.wbw[k] = L->wbw[k];
    }
    p.ldy = p.out;
    return p;
}

/* dst (rows x local_out, contiguous) = act(in W^T + b) on this rank, in
 * the placement's output layout (*ret_lay); the input (layout il, row
 * stride ld_in) is converted to the layout the placement takes first.
 * Rowwise partial sums are all-reduced over tp, then the bias and the
 * activation are applied once (ops->bias_act); otherwise both are in the
 * linear call. */
wf_status_t flux_lin_raw(run_t *x, const wf_flux_linear_t *L, const float *in,
                         int64_t ld_in, const lay_t *il, int64_t rows, wf_act_t act,
                         float *dst, lay_t *ret_lay)
{
    const wf_tp_place_t *p = &L->place;
    const int T = x->g.T;
    lay_t need = flux_lay_of(p, true, T);
    const float *a = in;
    int64_t lda = ld_in;
    wf_status_t st;
    if (flux_lay_width(&need, T) != p->local_in || il->n != p->in)
        return WF_E_INTERNAL;
    if (!flux_lay_same(il, &need)) {
        if ((size_t)(rows * p->local_in) > x->W.Xc_n)
            return WF_E_INTERNAL;
        float *xc = fp(x, x->W.Xc);
        st = flux_convert(x, in, ld_in, il, rows, &need, 0, xc, p->local_in);
        if (st != WF_OK)
            return st;
        a = xc;
        lda = p->local_in;
    }
    const int64_t lo = p->local_out;
    bool reduce = T > 1 && (p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE);
    wf_linear_params_t lp = flux_lin_params(L, rows);
    lp.x = a;
    lp.ldx = lda;
    lp.bias = reduce ? NULL : L->b;
    lp.act = reduce ? WF_ACT_NONE : act;
    lp.y = dst;
    lp.ldy = lo;
    size_t need_ws = x->ops->linear_workspace(&lp);
    if (need_ws > x->W.lws_bytes)
        return WF_E_INTERNAL;
    if (rows > 0 && (st = x->ops->linear(x->ctx, &lp, need_ws ? x->ws + x->W.lws : NULL)) != WF_OK)
        return st;
    if (reduce) {
        if (!x->grp->tp)
            return WF_E_INTERNAL;
        st = wf_comm_allreduce(x->grp->tp, dst, dst, (size_t)(rows * lo), WF_COMM_F32,
                               WF_COMM_SUM);
        if (st != WF_OK)
            return st;
        if ((L->b || act != WF_ACT_NONE) &&
            (st = x->ops->bias_act(x->ctx, dst, rows, lo, lo, L->b, act)) != WF_OK)
            return st;
    }
    *ret_lay = flux_lay_of(p, false, T);
    return WF_OK;
}

/* As lin_raw, but dst (rows x out, contiguous) always gets the full
 * output (a split one is gathered through Y). */
wf_status_t flux_lin_full(run_t *x, const wf_flux_linear_t *L, const float *in,
                          int64_t ld_in, const lay_t *il, int64_t rows, wf_act_t act,
                          float *dst)
{
    const wf_tp_place_t *p = &L->place;
    lay_t ol = flux_lay_of(p, false, x->g.T);
    if (ol.nb == 0)
        return flux_lin_raw(x, L, in, ld_in, il, rows, act, dst, &ol);
    if ((size_t)(rows * p->local_out) > x->W.Y_n)
        return WF_E_INTERNAL;
    float *Y = fp(x, x->W.Y);
    wf_status_t st = flux_lin_raw(x, L, in, ld_in, il, rows, act, Y, &ol);
    if (st != WF_OK)
        return st;
    lay_t full = flux_lay_full(p->out);
    return flux_convert(x, Y, p->local_out, &ol, rows, &full, 0, dst, p->out);
}
