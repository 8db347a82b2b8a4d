/* linear.h — linear layers with tensor-parallel placement on one tp
 * rank, and the layouts of the activations between them; model code of
 * any family (daemon/models/<family>/) runs its linears through these.
 *
 * Layouts over tp (wf_layout_t). An activation's columns are either full
 * on every rank, or split: the full width cut into blocks, each block
 * split evenly, rank r holding piece r of every block in block order
 * (what a colwise / packed_colwise linear emits, and what a rowwise /
 * packed_rowwise linear takes). wf_layout_convert turns any layout into
 * any other: a local slice from full, a copy when every rank's pieces
 * already agree, else an all-gather over tp and a column reorder. The
 * decision depends on the layouts only, never on the rank, so every tp
 * rank enters the same collectives.
 *
 * The arithmetic is the backend's (ops->linear, bias_act, copy_rows) on
 * its memory; the collectives are the comm's. Activations are f32, or
 * (the _dt forms, a device backend with bf16 / f16 weights) a linear's
 * input in its weight's dtype and an output in bf16 / f16 where the
 * linear's own epilogue makes the final value; partial sums (rowwise tp
 * before the all-reduce) and the outputs the residual stream takes stay
 * f32. Nothing
 * here allocates or logs; scratch is the caller's (wf_linear_env_t).
 *
 * Not here: cutting a layer's weights from a checkpoint (the family's
 * shard code), which layer runs when.
 */
#ifndef WF_LINEAR_H
#define WF_LINEAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm/comm.h"
#include "tp_plan.h"
#include "weft.h"

/* One linear layer on this rank (the weight as backend.h's
 * wf_linear_params_t takes it: nwb column blocks of (local_out, wbw[k])
 * rows ldw elements apart). */
typedef struct wf_linear {
    wf_tp_place_t place;   /* its placement (full and local shapes) */
    wf_dtype_t w_dtype;    /* of the weight as held: f32 on the CPU, the
                              checkpoint tensor's on a device */
    void *w;               /* a host f32 copy [local_out, local_in] the shard owns
                              (CPU, not a view), else NULL */
    float *b;              /* bias f32 on the backend's memory:
                              colwise / packed_colwise [local_out],
                              otherwise [out]; NULL when the module has none */
    bool w_view, b_view;   /* w / b are not owned (a view of the host copy,
                              or a piece of a device block) */
    int64_t ldw;           /* elements between rows of the weight */
    uint32_t nwb;          /* column blocks: 1, or (CPU view) the rank's
                              pieces of a rowwise / packed_rowwise view */
    const void *wb[WF_TP_MAX_BLOCKS]; /* first element of each block */
    int64_t wbw[WF_TP_MAX_BLOCKS];    /* their widths (sum = local_in) */
} wf_linear_t;

/* Layout of an activation's columns over the tp ranks. */
typedef struct wf_layout {
    int64_t n;                       /* full width */
    uint32_t nb;                     /* 0: full on every rank; else blocks */
    int64_t block[WF_TP_MAX_BLOCKS]; /* full sizes of the blocks (sum n) */
} wf_layout_t;

/* Most members of a linear group. */
#define WF_LINEAR_GROUP_MAX 4

/* Linears that take the same input (q / k / v, and a single block's
 * MLP-in), run as one linear where their placements allow
 * (shard.h's wf_shard_linear_fused). */
typedef struct wf_linear_group {
    uint32_t n;                          /* members */
    bool fused;                          /* `all` holds every member's weight */
    wf_linear_t all;                     /* the fused linear (fused only) */
    wf_linear_t m[WF_LINEAR_GROUP_MAX];  /* the members: placements always,
                                            weights when not fused */
} wf_linear_group_t;

/* Where one member's output lies after wf_linear_group_apply. */
typedef struct wf_linear_part {
    void *y;          /* first element: rows x width(lay) elements of dt */
    int64_t ld;       /* elements between rows */
    wf_layout_t lay;  /* its layout over tp (the member's output layout) */
    wf_dtype_t dt;    /* its dtype (f32; the group's out_dt where asked) */
} wf_linear_part_t;

/* Where this rank's linear layers run: the backend, the tp group, and
 * the scratch regions of the forward's workspace (backend memory), each
 * with its size. Borrowed for the forward. */
typedef struct wf_linear_env {
    const wf_backend_ops_t *ops; /* backend */
    wf_backend_ctx_t *ctx;       /* its context */
    wf_comm_t *tp;               /* tp group; NULL when T == 1 */
    int T, t;                    /* tp ranks, this one */
    float *G;                    /* all-gather landing of wf_layout_convert */
    size_t G_n;                  /* its floats */
    float *Xc;                   /* a linear's input converted to its layout */
    size_t Xc_n;                 /* its floats */
    float *Y;                    /* a split output before it is made full */
    size_t Y_n;                  /* its floats */
    void *lws;                   /* ops->linear's workspace */
    size_t lws_bytes;            /* its bytes */
} wf_linear_env_t;

/* Full width n on every rank. */
wf_layout_t wf_layout_full(int64_t n);

/* The layout a linear takes (`input`) or emits with placement p over T
 * ranks (with one rank everything is full). */
wf_layout_t wf_layout_of(const wf_tp_place_t *p, bool input, int T);

/* Columns of l on one rank. */
int64_t wf_layout_width(const wf_layout_t *l, int T);

/* Same layout. */
bool wf_layout_same(const wf_layout_t *a, const wf_layout_t *b);

/* Pieces of rank r (ascending): count, starts and lengths in full
 * columns (st, ln: WF_TP_MAX_BLOCKS each). */
int wf_layout_pieces(const wf_layout_t *l, int r, int T, int64_t *st, int64_t *ln);

/* Rank r's pieces of l inside the window [a, a + w), shifted by -a. */
int wf_layout_window(const wf_layout_t *l, int r, int T, int64_t a, int64_t w, int64_t *st,
                     int64_t *ln);

/* Columns in layout sl (rows x its local width at src, row stride
 * ld_src) -> this rank's columns of layout tl inside the window
 * [a, a + sl->n) of tl's dim, into dst (row stride ld_dst); collective
 * over tp when sl is split and the pieces differ on some rank (every tp
 * rank decides alike; a strided split src is compacted into e->G first).
 * WF_E_INTERNAL when e's scratch is short. */
wf_status_t wf_layout_convert(const wf_linear_env_t *e, const float *src, int64_t ld_src,
                              const wf_layout_t *sl, int64_t rows, const wf_layout_t *tl,
                              int64_t a, float *dst, int64_t ld_dst);

/* wf_layout_convert of elements of dtype dt (f32, bf16, f16: moved as
 * bytes, the same on src and dst; e->G holds G_n floats of them). */
wf_status_t wf_layout_convert_dt(const wf_linear_env_t *e, wf_dtype_t dt, const void *src,
                                 int64_t ld_src, const wf_layout_t *sl, int64_t rows,
                                 const wf_layout_t *tl, int64_t a, void *dst, int64_t ld_dst);

/* The backend's linear params of layer L on an input of `rows` rows (x,
 * y, bias and act unset). */
wf_linear_params_t wf_linear_params_of(const wf_linear_t *L, int64_t rows);

/* dst (rows x local_out, contiguous) = act(in W^T + b) on this rank, in
 * the placement's output layout (*ret_lay); the input (layout il, row
 * stride ld_in) is converted to the layout the placement takes first.
 * Rowwise partial sums are all-reduced over tp, then the bias and the
 * activation are applied once (ops->bias_act); otherwise both are in the
 * linear call. */
wf_status_t wf_linear_apply(const wf_linear_env_t *e, const wf_linear_t *L, const float *in,
                            int64_t ld_in, const wf_layout_t *il, int64_t rows, wf_act_t act,
                            float *dst, wf_layout_t *ret_lay);

/* wf_linear_apply of an input in in_dt (f32, or the weight's dtype: the
 * GEMM reads it as it is), asking for the output in out_dt; *ret_dt the
 * dtype dst holds: out_dt, or f32 where the output is a partial sum
 * (rowwise over tp, several weight blocks) finished after the linear.
 * dst holds rows x local_out f32 whatever the dtype. WF_E_INTERNAL for a
 * low-precision input in another dtype than the weight's. */
wf_status_t wf_linear_apply_dt(const wf_linear_env_t *e, const wf_linear_t *L, const void *in,
                               wf_dtype_t in_dt, int64_t ld_in, const wf_layout_t *il,
                               int64_t rows, wf_act_t act, void *dst, wf_dtype_t out_dt,
                               wf_layout_t *ret_lay, wf_dtype_t *ret_dt);

/* wf_linear_apply with the full output in dst (rows x out, contiguous):
 * a split one is gathered through e->Y. */
wf_status_t wf_linear_apply_full(const wf_linear_env_t *e, const wf_linear_t *L,
                                 const float *in, int64_t ld_in, const wf_layout_t *il,
                                 int64_t rows, wf_act_t act, float *dst);

/* wf_linear_apply_full of an input in in_dt (as wf_linear_apply_dt);
 * the output f32. */
wf_status_t wf_linear_apply_full_dt(const wf_linear_env_t *e, const wf_linear_t *L,
                                    const void *in, wf_dtype_t in_dt, int64_t ld_in,
                                    const wf_layout_t *il, int64_t rows, wf_act_t act,
                                    float *dst);

/* Floats per row of a group's outputs on this rank (sum of the
 * members' local_out). */
int64_t wf_linear_group_width(const wf_linear_group_t *g);

/* Every member of g on `rows` rows of one input (layout il, row stride
 * ld_in), each with its bias and then acts[k] (acts NULL: none), into
 * dst (rows x wf_linear_group_width floats; parts[k] says where member k
 * is). Fused: one linear, member k's columns at dst + (the local_out of
 * the members before it), row stride the group's width (a strided slice:
 * consumers read it with their row stride), its activation by bias_act
 * on that slice. Not fused: one wf_linear_apply per member, member k's
 * rows contiguous at dst + rows x (the local_out before it). */
wf_status_t wf_linear_group_apply(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                  const float *in, int64_t ld_in, const wf_layout_t *il,
                                  int64_t rows, const wf_act_t *acts, float *dst,
                                  wf_linear_part_t *parts);

/* wf_linear_group_apply of an input in in_dt, asking for the outputs in
 * out_dt (as wf_linear_apply_dt: each part's dt says what it holds, f32
 * where a member's output is a partial sum finished after its linear);
 * dst holds rows x the group's width f32 whatever the dtype. */
wf_status_t wf_linear_group_apply_dt(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                     const void *in, wf_dtype_t in_dt, int64_t ld_in,
                                     const wf_layout_t *il, int64_t rows, const wf_act_t *acts,
                                     void *dst, wf_dtype_t out_dt, wf_linear_part_t *parts);

/* Members [k0, k1) of the fused group g on one tp rank as one linear:
 * the rows of g->all's weight and bias that are theirs, `act` on all of
 * them, from `rows` rows of the full input (row stride ld_in, in_dt as
 * wf_linear_apply_dt) into dst (rows x their width, row stride ld_dst)
 * in out_dt. A single block's q / k / v and its GELU'd MLP-in go apart
 * this way, the MLP-in straight into the concatenation proj_out reads.
 * WF_E_INTERNAL unless g is fused, T is 1 and the weight is one block. */
wf_status_t wf_linear_group_range_dt(const wf_linear_env_t *e, const wf_linear_group_t *g,
                                     uint32_t k0, uint32_t k1, const void *in,
                                     wf_dtype_t in_dt, int64_t ld_in, int64_t rows,
                                     wf_act_t act, void *dst, int64_t ld_dst,
                                     wf_dtype_t out_dt);

#endif /* WF_LINEAR_H */
