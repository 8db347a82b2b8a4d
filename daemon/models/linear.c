/* linear.c — linear layers with tp placement on one tp rank and the
 * layouts of the activations between them (linear.h): a layout is full
 * or split by the producing placement; wf_layout_convert turns any into
 * any other, deciding on the layouts alone so that every tp rank enters
 * the same collectives.
 *
 * Not here: which layer runs when (the family's model code).
 */
#include "models/linear.h"

#include <stdlib.h>
#include <string.h>

#include "base/szcheck.h"

_Static_assert(WF_TP_MAX_BLOCKS <= WF_LINEAR_MAX_BLOCKS,
               "a rowwise packed shard view is one weight block per plan block");

/* ---- layouts over tp ----------------------------------------------------------- */

wf_layout_t wf_layout_full(int64_t n)
{
    wf_layout_t l;
    memset(&l, 0, sizeof l);
    l.n = n;
    return l;
}

/* The layout a linear takes (`input`) or emits with placement p. With one
 * rank everything is full. */
wf_layout_t wf_layout_of(const wf_tp_place_t *p, bool input, int T)
{
    bool cols = p->style == WF_TP_COLWISE || p->style == WF_TP_PACKED_COLWISE;
    bool rows = p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE;
    wf_layout_t l = wf_layout_full(input ? p->in : p->out);
    if (T == 1 || !(input ? rows : cols))
        return l;
    l.nb = p->n_blocks;
    for (uint32_t b = 0; b < p->n_blocks; b++)
        l.block[b] = p->block[b];
    return l;
}

int64_t wf_layout_width(const wf_layout_t *l, int T) { return l->nb ? l->n / T : l->n; }

bool wf_layout_same(const wf_layout_t *a, const wf_layout_t *b)
{
    if (a->n != b->n || a->nb != b->nb)
        return false;
    for (uint32_t k = 0; k < a->nb; k++)
        if (a->block[k] != b->block[k])
            return false;
    return true;
}

/* Pieces of rank r (ascending): count, starts and lengths in full columns. */
int wf_layout_pieces(const wf_layout_t *l, int r, int T, int64_t *st, int64_t *ln)
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
int wf_layout_window(const wf_layout_t *l, int r, int T, int64_t a, int64_t w, int64_t *st,
                    int64_t *ln)
{
    int64_t s0[WF_TP_MAX_BLOCKS], l0[WF_TP_MAX_BLOCKS];
    int n = wf_layout_pieces(l, r, T, s0, l0), m = 0;
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

/* Element i of an activation of es-byte elements at p. */
static void *el(const void *p, int64_t i, size_t es)
{
    return (unsigned char *)(uintptr_t)p + (size_t)i * es;
}

/* rows x `w` elements of es bytes from src (row stride ld_src elements)
 * to dst (ld_dst). */
static wf_status_t copy_cols(const wf_linear_env_t *e, size_t es, void *dst, int64_t ld_dst,
                             const void *src, int64_t ld_src, int64_t rows, int64_t w)
{
    if (w <= 0 || rows <= 0)
        return WF_OK;
    return e->ops->copy_rows(e->ctx, dst, (size_t)ld_dst * es, src, (size_t)ld_src * es, rows,
                             (size_t)w * es);
}

/* Columns of an activation in layout sl (rows x its local width at src,
 * row stride ld_src) -> this rank's columns of target layout tl inside
 * the window [a, a + sl->n) of tl's dim, into dst (row stride ld_dst).
 * Collective over tp when sl is split and the pieces differ on some rank. */
wf_status_t wf_layout_convert(const wf_linear_env_t *e, const float *src, int64_t ld_src,
                              const wf_layout_t *sl, int64_t rows, const wf_layout_t *tl,
                              int64_t a, float *dst, int64_t ld_dst)
{
    return wf_layout_convert_dt(e, WF_DTYPE_F32, src, ld_src, sl, rows, tl, a, dst, ld_dst);
}

wf_status_t wf_layout_convert_dt(const wf_linear_env_t *e, wf_dtype_t dt, const void *src,
                                 int64_t ld_src, const wf_layout_t *sl, int64_t rows,
                                 const wf_layout_t *tl, int64_t a, void *dst, int64_t ld_dst)
{
    const int T = e->T;
    const size_t es = wf_dtype_size(dt);
    if (es == 0)
        return WF_E_INTERNAL;
    int64_t ts[WF_TP_MAX_BLOCKS], tn[WF_TP_MAX_BLOCKS];
    int nt = wf_layout_window(tl, e->t, T, a, sl->n, ts, tn);
    wf_status_t st;
    if (sl->nb == 0) {
        /* full source: a local slice, one strided copy per piece */
        int64_t o = 0;
        for (int k = 0; k < nt; k++) {
            if ((st = copy_cols(e, es, el(dst, o, es), ld_dst, el(src, ts[k], es), ld_src, rows,
                                tn[k])) != WF_OK)
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
        int na = wf_layout_window(tl, r, T, a, sl->n, as, an);
        int nb = wf_layout_pieces(sl, r, T, bs, bn);
        same = na == nb;
        for (int k = 0; k < na && same; k++)
            same = as[k] == bs[k] && an[k] == bn[k];
    }
    const int64_t wl = wf_layout_width(sl, T);
    if (same)
        return copy_cols(e, es, dst, ld_dst, src, ld_src, rows, wl);
    /* G holds G_n floats: rows x the full width of es-byte elements */
    if ((size_t)(rows * sl->n) * es > e->G_n * sizeof(float) || !e->tp)
        return WF_E_INTERNAL;
    void *G = e->G;
    if (ld_src != wl) {
        /* a strided slice (a fused linear's member): compacted into this
         * rank's block of the landing, gathered in place */
        void *own = el(G, (int64_t)e->t * rows * wl, es);
        if ((st = copy_cols(e, es, own, wl, src, ld_src, rows, wl)) != WF_OK)
            return st;
        src = own;
    }
    st = wf_comm_allgather(e->tp, src, G, (size_t)(rows * wl) * es);
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
            st = copy_cols(e, es, el(dst, d, es), ld_dst, el(G, owner * rows * wl + lc, es), wl,
                           rows, run);
            if (st != WF_OK)
                return st;
            d += run;
            c += run;
        }
    }
    return WF_OK;
}

wf_linear_params_t wf_linear_params_of(const wf_linear_t *L, int64_t rows)
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
wf_status_t wf_linear_apply(const wf_linear_env_t *e, const wf_linear_t *L, const float *in,
                            int64_t ld_in, const wf_layout_t *il, int64_t rows, wf_act_t act,
                            float *dst, wf_layout_t *ret_lay)
{
    wf_dtype_t dt;
    return wf_linear_apply_dt(e, L, in, WF_DTYPE_F32, ld_in, il, rows, act, dst, WF_DTYPE_F32,
                              ret_lay, &dt);
}

/* lp's x, y, bias and activation set (params of wf_linear_params_of),
 * then the backend's linear with the env's workspace: WF_E_INTERNAL when
 * that is short; nothing runs for no rows. */
static wf_status_t run_linear(const wf_linear_env_t *e, wf_linear_params_t *lp, const void *x,
                              wf_dtype_t x_dt, int64_t ldx, const float *bias, wf_act_t act,
                              void *y, int64_t ldy, wf_dtype_t y_dt)
{
    lp->x = x;
    lp->x_dtype = x_dt;
    lp->ldx = ldx;
    lp->bias = bias;
    lp->act = act;
    lp->y = y;
    lp->ldy = ldy;
    lp->y_dtype = y_dt;
    size_t need_ws = e->ops->linear_workspace(lp);
    if (need_ws > e->lws_bytes)
        return WF_E_INTERNAL;
    return lp->rows > 0 ? e->ops->linear(e->ctx, lp, need_ws ? e->lws : NULL) : WF_OK;
}

wf_status_t wf_linear_apply_dt(const wf_linear_env_t *e, const wf_linear_t *L, const void *in,
                               wf_dtype_t in_dt, int64_t ld_in, const wf_layout_t *il,
                               int64_t rows, wf_act_t act, void *dst, wf_dtype_t out_dt,
                               wf_layout_t *ret_lay, wf_dtype_t *ret_dt)
{
    const wf_tp_place_t *p = &L->place;
    const int T = e->T;
    wf_layout_t need = wf_layout_of(p, true, T);
    const void *a = in;
    int64_t lda = ld_in;
    wf_status_t st;
    if (wf_layout_width(&need, T) != p->local_in || il->n != p->in)
        return WF_E_INTERNAL;
    /* a low-precision input is the GEMM's operand: the weight's dtype */
    if (in_dt != WF_DTYPE_F32 && in_dt != L->w_dtype)
        return WF_E_INTERNAL;
    if (!wf_layout_same(il, &need)) {
        if ((size_t)(rows * p->local_in) * wf_dtype_size(in_dt) > e->Xc_n * sizeof(float))
            return WF_E_INTERNAL;
        void *xc = e->Xc;
        st = wf_layout_convert_dt(e, in_dt, in, ld_in, il, rows, &need, 0, xc, p->local_in);
        if (st != WF_OK)
            return st;
        a = xc;
        lda = p->local_in;
    }
    const int64_t lo = p->local_out;
    bool reduce = T > 1 && (p->style == WF_TP_ROWWISE || p->style == WF_TP_PACKED_ROWWISE);
    /* a low-precision output only where the linear's own epilogue makes
     * the final value: partial sums (tp rowwise, several weight blocks)
     * stay f32 */
    wf_dtype_t y_dt = reduce || L->nwb != 1 ? WF_DTYPE_F32 : out_dt;
    wf_linear_params_t lp = wf_linear_params_of(L, rows);
    if ((st = run_linear(e, &lp, a, in_dt, lda, reduce ? NULL : L->b,
                         reduce ? WF_ACT_NONE : act, dst, lo, y_dt)) != WF_OK)
        return st;
    if (reduce) {
        if (!e->tp)
            return WF_E_INTERNAL;
        st = wf_comm_allreduce(e->tp, dst, dst, (size_t)(rows * lo), WF_COMM_F32,
                               WF_COMM_SUM);
        if (st != WF_OK)
            return st;
        if ((L->b || act != WF_ACT_NONE) &&
            (st = e->ops->bias_act(e->ctx, dst, WF_DTYPE_F32, rows, lo, lo, L->b, act, NULL, 0,
                                   WF_DTYPE_F32)) != WF_OK)
            return st;
    }
    *ret_lay = wf_layout_of(p, false, T);
    *ret_dt = y_dt;
    return WF_OK;
}

/* As wf_linear_apply, but dst (rows x out, contiguous) always gets the full
 * output (a split one is gathered through Y). */
wf_status_t wf_linear_apply_full(const wf_linear_env_t *e, const wf_linear_t *L,
                                 const float *in, int64_t ld_in, const wf_layout_t *il,
                                 int64_t rows, wf_act_t act, float *dst)
{
    return wf_linear_apply_full_dt(e, L, in, WF_DTYPE_F32, ld_in, il, rows, act, dst);
}

wf_status_t wf_linear_apply_full_dt(const wf_linear_env_t *e, const wf_linear_t *L,
                                    const void *in, wf_dtype_t in_dt, int64_t ld_in,
                                    const wf_layout_t *il, int64_t rows, wf_act_t act,
                                    float *dst)
{
    const wf_tp_place_t *p = &L->place;
    wf_layout_t ol = wf_layout_of(p, false, e->T);
    wf_dtype_t dt;
    if (ol.nb == 0)
        return wf_linear_apply_dt(e, L, in, in_dt, ld_in, il, rows, act, dst, WF_DTYPE_F32, &ol,
                                  &dt);
    if ((size_t)(rows * p->local_out) > e->Y_n)
        return WF_E_INTERNAL;
    float *Y = e->Y;
    wf_status_t st = wf_linear_apply_dt(e, L, in, in_dt, ld_in, il, rows, act, Y, WF_DTYPE_F32,
                                        &ol, &dt);
    if (st != WF_OK)
        return st;
    wf_layout_t full = wf_layout_full(p->out);
    return wf_layout_convert(e, Y, p->local_out, &ol, rows, &full, 0, dst, p->out);
}

int64_t wf_linear_group_width(const wf_linear_group_t *g)
{
    int64_t w = 0;
    for (uint32_t k = 0; k < g->n; k++)
        w += g->m[k].place.local_out;
    return w;
}

wf_status_t wf_linear_group_apply(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                  const float *in, int64_t ld_in, const wf_layout_t *il,
                                  int64_t rows, const wf_act_t *acts, float *dst,
                                  wf_linear_part_t *parts)
{
    return wf_linear_group_apply_dt(e, g, in, WF_DTYPE_F32, ld_in, il, rows, acts, dst,
                                    WF_DTYPE_F32, parts);
}

wf_status_t wf_linear_group_apply_dt(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                     const void *in, wf_dtype_t in_dt, int64_t ld_in,
                                     const wf_layout_t *il, int64_t rows, const wf_act_t *acts,
                                     void *dst, wf_dtype_t out_dt, wf_linear_part_t *parts)
{
    const int64_t W = wf_linear_group_width(g);
    wf_dtype_t dt = WF_DTYPE_F32;
    wf_status_t st;
    if (g->n < 1 || g->n > WF_LINEAR_GROUP_MAX)
        return WF_E_INTERNAL;
    if (g->fused) {
        wf_layout_t fl;
        if (g->all.place.local_out != W)
            return WF_E_INTERNAL;
        if ((st = wf_linear_apply_dt(e, &g->all, in, in_dt, ld_in, il, rows, WF_ACT_NONE, dst,
                                     out_dt, &fl, &dt)) != WF_OK)
            return st;
    }
    int64_t off = 0;
    for (uint32_t k = 0; k < g->n; k++) {
        const wf_linear_t *L = &g->m[k];
        wf_act_t act = acts ? acts[k] : WF_ACT_NONE;
        wf_linear_part_t *pt = &parts[k];
        pt->lay = wf_layout_of(&L->place, false, e->T);
        if (g->fused) {
            pt->dt = dt;
            pt->y = (unsigned char *)dst + (size_t)off * wf_dtype_size(dt);
            pt->ld = W;
            if (act != WF_ACT_NONE && rows > 0 &&
                (st = e->ops->bias_act(e->ctx, pt->y, dt, rows, L->place.local_out, W, NULL,
                                       act, NULL, 0, dt)) != WF_OK)
                return st;
        } else {
            wf_layout_t ol;
            /* f32 room for each member: one that reduces over tp stays f32 */
            pt->y = (unsigned char *)dst + (size_t)(rows * off) * sizeof(float);
            pt->ld = L->place.local_out;
            if ((st = wf_linear_apply_dt(e, L, in, in_dt, ld_in, il, rows, act, pt->y, out_dt,
                                         &ol, &pt->dt)) != WF_OK)
                return st;
        }
        off += L->place.local_out;
    }
    return WF_OK;
}

wf_status_t wf_linear_group_range_dt(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                     uint32_t k0, uint32_t k1, const void *in,
                                     wf_dtype_t in_dt, int64_t ld_in, int64_t rows,
                                     wf_act_t act, void *dst, int64_t ld_dst,
                                     wf_dtype_t out_dt)
{
    const wf_linear_t *A = &g->all;
    if (!g->fused || e->T != 1 || A->nwb != 1 || k0 >= k1 || k1 > g->n ||
        (in_dt != WF_DTYPE_F32 && in_dt != A->w_dtype))
        return WF_E_INTERNAL;
    int64_t off = 0, w = 0;
    for (uint32_t k = 0; k < k0; k++)
        off += g->m[k].place.local_out;
    for (uint32_t k = k0; k < k1; k++)
        w += g->m[k].place.local_out;
    if (off + w > A->place.local_out || ld_dst < w)
        return WF_E_INTERNAL;
    wf_linear_params_t lp = wf_linear_params_of(A, rows);
    lp.out = w;
    lp.wb[0] = (const unsigned char *)A->wb[0] +
               (size_t)(off * A->ldw) * wf_dtype_size(A->w_dtype);
    return run_linear(e, &lp, in, in_dt, ld_in, A->b ? A->b + off : NULL, act, dst, ld_dst,
                      out_dt);
}
