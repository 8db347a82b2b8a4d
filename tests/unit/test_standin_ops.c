/* test_standin_ops.c — the stand-in device backend's model ops and
 * resident memory (support/standin_dev.h):
 *   - every model op on stand-in memory equals the CPU backend's op on the
 *     same host data bit for bit (it is the same code), compared over the
 *     whole buffers, so the bytes between strided rows and past the last
 *     row must come back unchanged too; strided operands, in-place calls
 *     (act, modln), interleaved chunks (modln's shift / scale, the qkv
 *     columns of head_norm_rope), weights in resident blocks, all weight
 *     dtypes;
 *   - an op given a host pointer, a freed resident block, a range past the
 *     allocated arena or a bad workspace fails with WF_E_BAD_ARGUMENT and
 *     touches nothing; each successful op counts one kernel;
 *   - resident memory: 256-byte alignment, memory_info (free = budget -
 *     dev_alloc bytes - resident bytes), exhaustion (WF_E_NO_MEMORY, nothing
 *     changes) for mem_alloc and dev_alloc, mem_free (NULL, twice, a
 *     dev_alloc pointer: counted, ignored), data surviving dev_reset,
 *     mem_alloc refused during a job.
 * Host reference buffers are 256-byte aligned like the device ones, so the
 * CPU op sees the same alignment on both sides. */
#include "support/check.h"
#include "support/standin_dev.h"

#include "tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const wf_backend_ops_t *sd, *cpu;
static wf_backend_ctx_t *dctx, *cctx; /* stand-in, CPU */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float rnd(void) /* uniform in [-2, 2) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 4.0 - 2.0);
}

/* One operand: a host reference copy and its device twin, same bytes. */
typedef struct buf {
    unsigned char *h;  /* host, 256-byte aligned */
    void *d;           /* stand-in memory */
    size_t bytes;
    bool resident;     /* d from mem_alloc */
} buf_t;

/* A buffer of n elements of dt filled with random values (f32, or f32
 * rounded to bf16 / f16 bits), on the device by copy_h2d; resident: a
 * mem_alloc block (call before any dev_alloc of the job). */
static buf_t mk(size_t n, wf_dtype_t dt, bool resident)
{
    buf_t b = {.bytes = n * (dt == WF_DTYPE_F32 ? 4 : 2), .resident = resident};
    b.h = aligned_alloc(256, (b.bytes + 255) / 256 * 256 + 256);
    float *f = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++)
        f[i] = rnd();
    wf_convert_from_f32(b.h, dt, f, n);
    free(f);
    wf_status_t st = resident ? sd->mem_alloc(dctx, b.bytes, &b.d)
                              : sd->dev_alloc(dctx, b.bytes, &b.d);
    CHECK(st == WF_OK, "allocation of %zu bytes: %d", b.bytes, (int)st);
    CHECK(sd->copy_h2d(dctx, b.d, b.h, b.bytes) == WF_OK, "copy_h2d");
    return b;
}

/* The device twin equals the host copy, every byte. */
static bool same(const buf_t *b)
{
    unsigned char *t = malloc(b->bytes + 1);
    bool ok = sd->copy_d2h(dctx, t, b->d, b->bytes) == WF_OK &&
              memcmp(t, b->h, b->bytes) == 0;
    free(t);
    return ok;
}

static void drop(buf_t *b)
{
    if (b->resident)
        sd->mem_free(dctx, b->d);
    free(b->h);
    b->h = NULL;
}

static float *H(const buf_t *b) { return (float *)(void *)b->h; }
static float *D(const buf_t *b) { return (float *)b->d; }

static uint64_t kernels(void) { return wf_standin_counters(dctx).kernels; }

/* ---- ops equal to the CPU's --------------------------------------------- */

/* linear: x (5, 24) ldx 30, W (out 11, 24) ldw 29 as 3 column blocks of
 * a wider matrix (8, 10, 6 columns at 0, 8, 18: a rowwise shard in place),
 * y (5, 11) ldy 13, with and without bias, each act, each weight dtype
 * (a bf16 / f16 weight: the CPU op on x rounded to that dtype, as the
 * device's GEMM takes it); then the refusals. */
static void test_linear(void)
{
    static const wf_dtype_t dts[] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    static const wf_act_t acts[] = {WF_ACT_NONE, WF_ACT_GELU_TANH, WF_ACT_SILU, WF_ACT_GELU};
    const int64_t rows = 5, in = 24, out = 11, ldx = 30, ldw = 29, ldy = 13;
    for (int di = 0; di < 3; di++)
        for (int ai = 0; ai < 3; ai++)
            for (int bias = 0; bias < 2; bias++) {
                wf_dtype_t dt = dts[di];
                size_t es = dt == WF_DTYPE_F32 ? 4 : 2;
                buf_t w = mk((size_t)(out * ldw), dt, true);
                buf_t bb = mk((size_t)out, WF_DTYPE_F32, true);
                buf_t x = mk((size_t)(rows * ldx), WF_DTYPE_F32, false);
                buf_t y = mk((size_t)(rows * ldy) + 7, WF_DTYPE_F32, false);
                wf_linear_params_t p = {.rows = rows, .in = in, .out = out, .ldx = ldx,
                                        .w_dtype = dt, .ldw = ldw, .nwb = 3,
                                        .wbw = {8, 10, 6}, .act = acts[ai], .ldy = ldy};
                static const int64_t col[3] = {0, 8, 18};
                wf_linear_params_t hp = p, dp = p;
                hp.x = H(&x);
                hp.y = H(&y);
                hp.bias = bias ? H(&bb) : NULL;
                dp.x = D(&x);
                dp.y = D(&y);
                dp.bias = bias ? D(&bb) : NULL;
                for (int k = 0; k < 3; k++) {
                    hp.wb[k] = w.h + (size_t)col[k] * es;
                    dp.wb[k] = (unsigned char *)w.d + (size_t)col[k] * es;
                }
                float *xr = NULL;
                if (dt != WF_DTYPE_F32) {
                    size_t nx = (size_t)(rows * ldx);
                    unsigned char *t = malloc(nx * es);
                    xr = malloc(nx * sizeof(float));
                    wf_convert_from_f32(t, dt, hp.x, nx);
                    wf_convert_to_f32(xr, t, dt, nx);
                    free(t);
                    hp.x = xr;
                }
                size_t cws = cpu->linear_workspace(&hp);
                void *cw = cws ? aligned_alloc(256, (cws + 255) / 256 * 256) : NULL;
                CHECK(cpu->linear(cctx, &hp, cw) == WF_OK, "cpu linear");
                free(cw);
                free(xr);
                size_t wsb = sd->linear_workspace(&dp);
                CHECK(wsb >= (size_t)(rows * in * 4), "stand-in workspace %zu", wsb);
                void *ws = NULL;
                CHECK(sd->dev_alloc(dctx, wsb, &ws) == WF_OK, "workspace");
                uint64_t k0 = kernels();
                CHECK(sd->linear(dctx, &dp, ws) == WF_OK, "stand-in linear");
                CHECK(same(&y), "linear dtype %d act %d bias %d: y differs", (int)dt,
                      (int)acts[ai], bias);
                CHECK(same(&x) && same(&w) && same(&bb), "linear inputs unchanged");
                CHECK(kernels() == k0 + 1, "linear counted");
                float junk[4];
                CHECK(sd->copy_d2h(dctx, junk, ws, sizeof junk) == WF_OK && isnan(junk[0]) &&
                          isnan(junk[3]), "the workspace holds junk after linear");
                /* refusals: nothing touched, nothing counted */
                wf_linear_params_t bad = dp;
                CHECK(sd->linear(dctx, &dp, NULL) == WF_E_BAD_ARGUMENT,
                      "linear without its workspace");
                CHECK(sd->linear(dctx, &dp, (char *)ws + 256) == WF_E_BAD_ARGUMENT,
                      "linear with a workspace past its buffer");
                CHECK(sd->linear(dctx, &dp, y.d) == WF_E_BAD_ARGUMENT,
                      "linear with a workspace on y");
                bad.x = H(&x);
                CHECK(sd->linear(dctx, &bad, ws) == WF_E_BAD_ARGUMENT, "host x");
                bad = dp;
                bad.wb[2] = w.h + 18 * es;
                CHECK(sd->linear(dctx, &bad, ws) == WF_E_BAD_ARGUMENT, "host W block");
                bad = dp;
                bad.ldx = 1 << 16; /* x's last row far past the arena's allocated part */
                CHECK(sd->linear(dctx, &bad, ws) == WF_E_BAD_ARGUMENT, "x past the arena");
                CHECK(same(&y) && kernels() == k0 + 1, "refused linear touched y");
                drop(&w);
                CHECK(sd->linear(dctx, &dp, ws) == WF_E_BAD_ARGUMENT,
                      "a freed weight block");
                CHECK(same(&y) && kernels() == k0 + 1, "linear on a freed block touched y");
                drop(&bb);
                drop(&x);
                drop(&y);
                sd->dev_reset(dctx);
            }
    /* x and y as column ranges of one buffer (rows 20 apart: x columns
     * [0, 8), y columns [8, 20)), extents interleaved, elements apart:
     * the stand-in answers as the CPU does on the same layout */
    {
        buf_t w = mk(12 * 8, WF_DTYPE_BF16, true);
        buf_t xy = mk(4 * 20, WF_DTYPE_F32, false);
        wf_linear_params_t p = {.rows = 4, .in = 8, .out = 12, .ldx = 20,
                                .w_dtype = WF_DTYPE_BF16, .ldw = 8, .nwb = 1, .wbw = {8},
                                .act = WF_ACT_SILU, .ldy = 20};
        wf_linear_params_t hp = p, dp = p;
        hp.x = H(&xy);
        hp.y = H(&xy) + 8;
        hp.wb[0] = w.h;
        dp.x = D(&xy);
        dp.y = D(&xy) + 8;
        dp.wb[0] = w.d;
        size_t cws = cpu->linear_workspace(&hp);
        void *cw = cws ? aligned_alloc(256, (cws + 255) / 256 * 256) : NULL;
        wf_status_t want = cpu->linear(cctx, &hp, cw);
        free(cw);
        void *ws = NULL;
        CHECK(sd->dev_alloc(dctx, sd->linear_workspace(&dp), &ws) == WF_OK, "workspace");
        CHECK(sd->linear(dctx, &dp, ws) == want, "interleaved x / y: status %d", (int)want);
        CHECK(same(&xy), "interleaved x / y");
        drop(&w);
        free(xy.h);
        sd->dev_reset(dctx);
    }
    /* rows = 0: a no-op that still wants device weights */
    buf_t w = mk(4 * 4, WF_DTYPE_F32, true);
    wf_linear_params_t p = {.rows = 0, .in = 4, .out = 4, .ldx = 4, .w_dtype = WF_DTYPE_F32,
                            .ldw = 4, .nwb = 1, .wb = {w.d}, .wbw = {4}, .ldy = 4};
    float hx[4], hy[4];
    p.x = hx;
    p.y = hy;
    CHECK(sd->linear_workspace(&p) == 0, "rows 0: no workspace");
    CHECK(sd->linear(dctx, &p, NULL) == WF_OK, "rows 0 is a no-op");
    drop(&w);
}

/* bias_act on (4, 9) rows 12 apart, each act, with and without bias. */
static void test_bias_act(void)
{
    static const wf_act_t acts[] = {WF_ACT_NONE, WF_ACT_GELU_TANH, WF_ACT_SILU, WF_ACT_GELU};
    for (int ai = 0; ai < 3; ai++)
        for (int bias = 0; bias < 2; bias++) {
            buf_t b = mk(9, WF_DTYPE_F32, false);
            buf_t y = mk(4 * 12, WF_DTYPE_F32, false); /* last: ends the arena's used part */
            CHECK(cpu->bias_act(cctx, H(&y), WF_DTYPE_F32, 4, 9, 12, bias ? H(&b) : NULL,
                                acts[ai], NULL, 0, WF_DTYPE_F32) ==
                      WF_OK, "cpu bias_act");
            CHECK(sd->bias_act(dctx, D(&y), WF_DTYPE_F32, 4, 9, 12, bias ? D(&b) : NULL, acts[ai],
                               NULL, 0, WF_DTYPE_F32) ==
                      WF_OK, "bias_act");
            CHECK(same(&y), "bias_act act %d bias %d", (int)acts[ai], bias);
            uint64_t k0 = kernels();
            CHECK(sd->bias_act(dctx, D(&y), WF_DTYPE_F32, 4, 9, 12, H(&b), acts[ai], NULL, 0,
                               WF_DTYPE_F32) == WF_E_BAD_ARGUMENT,
                  "bias_act with a host bias");
            CHECK(sd->bias_act(dctx, D(&y), WF_DTYPE_F32, 5, 9, 12, NULL, acts[ai], NULL, 0,
                               WF_DTYPE_F32) == WF_E_BAD_ARGUMENT,
                  "bias_act past the arena");
            CHECK(sd->bias_act(dctx, D(&y), WF_DTYPE_F32, 4, 9, INT64_MAX, NULL, acts[ai], NULL,
                               0, WF_DTYPE_F32) ==
                      WF_E_BAD_ARGUMENT, "bias_act with an extent past SIZE_MAX");
            CHECK(sd->bias_act(dctx, D(&y), WF_DTYPE_F32, -1, 9, 12, NULL, acts[ai], NULL, 0,
                               WF_DTYPE_F32) == WF_E_BAD_ARGUMENT,
                  "bias_act with rows < 0");
            CHECK(same(&y) && kernels() == k0, "refused bias_act touched y");
            sd->dev_reset(dctx);
            free(y.h);
            free(b.h);
        }
}

/* act (out of place, in place), add. */
static void test_act_add(void)
{
    static const wf_act_t acts[] = {WF_ACT_GELU_TANH, WF_ACT_SILU};
    for (int ai = 0; ai < 2; ai++) {
        buf_t s = mk(37, WF_DTYPE_F32, false), d = mk(37, WF_DTYPE_F32, false);
        CHECK(cpu->act(cctx, H(&d), H(&s), 37, acts[ai]) == WF_OK, "cpu act");
        CHECK(sd->act(dctx, D(&d), D(&s), 37, acts[ai]) == WF_OK, "act");
        CHECK(same(&d) && same(&s), "act %d", (int)acts[ai]);
        CHECK(cpu->act(cctx, H(&s) + 1, H(&s) + 1, 30, acts[ai]) == WF_OK, "cpu act in place");
        CHECK(sd->act(dctx, D(&s) + 1, D(&s) + 1, 30, acts[ai]) == WF_OK, "act in place");
        CHECK(same(&s), "act %d in place", (int)acts[ai]);
        uint64_t k0 = kernels();
        CHECK(sd->act(dctx, D(&d), H(&s), 37, acts[ai]) == WF_E_BAD_ARGUMENT, "act host src");
        CHECK(sd->act(dctx, H(&d), D(&s), 37, acts[ai]) == WF_E_BAD_ARGUMENT, "act host dst");
        CHECK(same(&d) && kernels() == k0, "refused act touched dst");
        sd->dev_reset(dctx);
        free(s.h);
        free(d.h);
    }
    buf_t s = mk(41, WF_DTYPE_F32, false), d = mk(41, WF_DTYPE_F32, false);
    CHECK(cpu->add(cctx, H(&d), H(&s), 41) == WF_OK, "cpu add");
    CHECK(sd->add(dctx, D(&d), D(&s), 41) == WF_OK, "add");
    CHECK(same(&d) && same(&s), "add");
    uint64_t k0 = kernels();
    CHECK(sd->add(dctx, D(&d), H(&s), 41) == WF_E_BAD_ARGUMENT, "add host src");
    CHECK(sd->add(dctx, D(&d), D(&s), 42) == WF_E_BAD_ARGUMENT, "add past the arena");
    CHECK(same(&d) && kernels() == k0, "refused add touched dst");
    sd->dev_reset(dctx);
    free(s.h);
    free(d.h);
}

/* modln: nbatch 2 x per 3 rows of C 16, src rows 20 apart, dst rows 18
 * apart, shift / scale chunks 1 and 2 of a (2, 6 C) AdaLN output; then in
 * place on src. */
static void test_modln(void)
{
    const int64_t nb = 2, per = 3, C = 16;
    buf_t mod = mk(2 * 6 * 16, WF_DTYPE_F32, true); /* resident: before the job */
    buf_t src = mk(6 * 20, WF_DTYPE_F32, false), dst = mk(6 * 18, WF_DTYPE_F32, false);
    wf_modln_params_t hp = {.nbatch = nb, .per = per, .C = C, .src = H(&src), .ld_src = 20,
                            .dst = H(&dst), .ld_dst = 18, .shift = H(&mod) + C,
                            .scale = H(&mod) + 2 * C, .ld_mod = 6 * C, .eps = 1e-6f};
    wf_modln_params_t dp = hp;
    dp.src = D(&src);
    dp.dst = D(&dst);
    dp.shift = D(&mod) + C;
    dp.scale = D(&mod) + 2 * C;
    CHECK(cpu->modln(cctx, &hp) == WF_OK, "cpu modln");
    CHECK(sd->modln(dctx, &dp) == WF_OK, "modln");
    CHECK(same(&dst) && same(&src) && same(&mod), "modln");
    hp.dst = H(&src);
    hp.ld_dst = 20;
    dp.dst = D(&src);
    dp.ld_dst = 20;
    CHECK(cpu->modln(cctx, &hp) == WF_OK, "cpu modln in place");
    CHECK(sd->modln(dctx, &dp) == WF_OK, "modln in place");
    CHECK(same(&src), "modln in place");
    uint64_t k0 = kernels();
    wf_modln_params_t bad = dp;
    bad.scale = H(&mod) + 2 * C;
    CHECK(sd->modln(dctx, &bad) == WF_E_BAD_ARGUMENT, "modln host scale");
    bad = dp;
    bad.ld_mod = 6 * C + 80; /* the second batch's chunk past the block */
    CHECK(sd->modln(dctx, &bad) == WF_E_BAD_ARGUMENT, "modln past the resident block");
    CHECK(same(&src) && kernels() == k0, "refused modln touched dst");
    drop(&mod);
    CHECK(sd->modln(dctx, &dp) == WF_E_BAD_ARGUMENT, "modln on a freed block");
    CHECK(same(&src) && kernels() == k0, "modln on a freed block touched dst");
    sd->dev_reset(dctx);
    free(src.h);
    free(dst.h);
}

/* gate_residual: 2 x 4 rows of C 8, S rows 11 apart, y rows 9 apart, gate
 * rows 24 apart (a chunk of an AdaLN output). */
static void test_gate_residual(void)
{
    buf_t S = mk(8 * 11, WF_DTYPE_F32, false), y = mk(8 * 9, WF_DTYPE_F32, false);
    buf_t g = mk(2 * 24, WF_DTYPE_F32, false);
    CHECK(cpu->gate_residual(cctx, H(&S), 11, H(&y), 9, H(&g) + 8, 24, 2, 4, 8) == WF_OK,
          "cpu gate_residual");
    CHECK(sd->gate_residual(dctx, D(&S), 11, D(&y), 9, D(&g) + 8, 24, 2, 4, 8) == WF_OK,
          "gate_residual");
    CHECK(same(&S) && same(&y) && same(&g), "gate_residual");
    uint64_t k0 = kernels();
    CHECK(sd->gate_residual(dctx, D(&S), 11, H(&y), 9, D(&g) + 8, 24, 2, 4, 8) ==
              WF_E_BAD_ARGUMENT, "gate_residual host y");
    CHECK(sd->gate_residual(dctx, D(&S), 11, D(&y), 9, D(&g) + 17, 24, 2, 4, 8) ==
              WF_E_BAD_ARGUMENT, "gate_residual gate past the arena");
    CHECK(same(&S) && kernels() == k0, "refused gate_residual touched S");
    sd->dev_reset(dctx);
    free(S.h);
    free(y.h);
    free(g.h);
}

/* head_norm_rope: nbatch 2 x per 3 rows of H 2 x D 8 taken from the k
 * columns of a qkv projection (rows 3 H D apart), into rows row0 2.. of a
 * (2, L 7, H, D) joint buffer; with norm and rotation, and with neither. */
static void test_head_norm_rope(void)
{
    const int64_t nb = 2, per = 3, L = 7, row0 = 2, Hh = 2, Dd = 8, hd = Hh * Dd;
    for (int v = 0; v < 2; v++) {
        buf_t src = mk((size_t)(nb * per * 3 * hd), WF_DTYPE_F32, false);
        buf_t dst = mk((size_t)(nb * L * hd), WF_DTYPE_F32, false);
        buf_t nrm = mk((size_t)Dd, WF_DTYPE_F32, false);
        buf_t cs = mk((size_t)(L * Dd), WF_DTYPE_F32, false);
        buf_t sn = mk((size_t)(L * Dd), WF_DTYPE_F32, false);
        wf_headrope_params_t hp = {.nbatch = nb, .per = per, .L = L, .row0 = row0, .H = Hh,
                                   .D = Dd, .src = H(&src) + hd, .ld_src = 3 * hd,
                                   .dst = H(&dst), .norm = v ? NULL : H(&nrm),
                                   .cos = v ? NULL : H(&cs), .sin = v ? NULL : H(&sn),
                                   .eps = 1e-6f};
        wf_headrope_params_t dp = hp;
        dp.src = D(&src) + hd;
        dp.dst = D(&dst);
        dp.norm = v ? NULL : D(&nrm);
        dp.cos = v ? NULL : D(&cs);
        dp.sin = v ? NULL : D(&sn);
        CHECK(cpu->head_norm_rope(cctx, &hp) == WF_OK, "cpu head_norm_rope");
        CHECK(sd->head_norm_rope(dctx, &dp) == WF_OK, "head_norm_rope");
        CHECK(same(&dst) && same(&src), "head_norm_rope variant %d", v);
        uint64_t k0 = kernels();
        wf_headrope_params_t bad = dp;
        bad.dst = H(&dst);
        CHECK(sd->head_norm_rope(dctx, &bad) == WF_E_BAD_ARGUMENT, "head_norm_rope host dst");
        if (v == 0) {
            bad = dp;
            bad.norm = H(&nrm);
            CHECK(sd->head_norm_rope(dctx, &bad) == WF_E_BAD_ARGUMENT,
                  "head_norm_rope host norm");
        }
        CHECK(same(&dst) && kernels() == k0, "refused head_norm_rope touched dst");
        sd->dev_reset(dctx);
        free(src.h);
        free(dst.h);
        free(nrm.h);
        free(cs.h);
        free(sn.h);
    }
}

/* rope_table: L 5 tokens of 3 axes (2, 4, 2), ids on the device,
 * axes_dims on the host. */
static void test_rope_table(void)
{
    const int64_t L = 5, Dd = 8;
    const uint32_t axes[3] = {2, 4, 2};
    buf_t ids = mk((size_t)(L * 3), WF_DTYPE_F32, false);
    for (int i = 0; i < L * 3; i++)
        H(&ids)[i] = (float)((i * 7) % 11) - 3.0f;
    sd->copy_h2d(dctx, ids.d, ids.h, ids.bytes);
    buf_t cs = mk((size_t)(L * Dd), WF_DTYPE_F32, false);
    buf_t sn = mk((size_t)(L * Dd), WF_DTYPE_F32, false);
    CHECK(cpu->rope_table(cctx, H(&ids), L, axes, 3, 10000.0, Dd, H(&cs), H(&sn)) == WF_OK,
          "cpu rope_table");
    CHECK(sd->rope_table(dctx, D(&ids), L, axes, 3, 10000.0, Dd, D(&cs), D(&sn)) == WF_OK,
          "rope_table");
    CHECK(same(&cs) && same(&sn) && same(&ids), "rope_table");
    uint64_t k0 = kernels();
    CHECK(sd->rope_table(dctx, H(&ids), L, axes, 3, 10000.0, Dd, D(&cs), D(&sn)) ==
              WF_E_BAD_ARGUMENT, "rope_table host ids");
    CHECK(sd->rope_table(dctx, D(&ids), L, axes, 3, 10000.0, Dd, D(&cs), H(&sn)) ==
              WF_E_BAD_ARGUMENT, "rope_table host sin");
    CHECK(same(&cs) && kernels() == k0, "refused rope_table touched cos");
    sd->dev_reset(dctx);
    free(ids.h);
    free(cs.h);
    free(sn.h);
}

/* timestep_proj: B 3, dim 16, rounding to bf16 and none. */
static void test_timestep_proj(void)
{
    static const wf_dtype_t rd[] = {WF_DTYPE_F32, WF_DTYPE_BF16, WF_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
        buf_t t = mk(3, WF_DTYPE_F32, false), d = mk(3 * 16, WF_DTYPE_F32, false);
        float tv[3] = {0.0f, 0.37f, 1.0f};
        memcpy(t.h, tv, sizeof tv);
        sd->copy_h2d(dctx, t.d, t.h, t.bytes);
        CHECK(cpu->timestep_proj(cctx, H(&t), 3, 16, rd[i], H(&d)) == WF_OK,
              "cpu timestep_proj");
        CHECK(sd->timestep_proj(dctx, D(&t), 3, 16, rd[i], D(&d)) == WF_OK, "timestep_proj");
        CHECK(same(&d), "timestep_proj round %d", (int)rd[i]);
        uint64_t k0 = kernels();
        CHECK(sd->timestep_proj(dctx, H(&t), 3, 16, rd[i], D(&d)) == WF_E_BAD_ARGUMENT,
              "timestep_proj host t");
        CHECK(sd->timestep_proj(dctx, D(&t), 3, 18, rd[i], D(&d)) == WF_E_BAD_ARGUMENT,
              "timestep_proj past the arena");
        CHECK(same(&d) && kernels() == k0, "refused timestep_proj touched dst");
        sd->dev_reset(dctx);
        free(t.h);
        free(d.h);
    }
}

/* copy_rows: 5 rows of 13 bytes, from rows 20 bytes apart (a resident
 * block) to rows 17 bytes apart, odd offsets. */
static void test_copy_rows(void)
{
    buf_t s = mk(30, WF_DTYPE_F32, true), d = mk(30, WF_DTYPE_F32, false);
    CHECK(cpu->copy_rows(cctx, d.h + 3, 17, s.h + 1, 20, 5, 13) == WF_OK, "cpu copy_rows");
    CHECK(sd->copy_rows(dctx, (char *)d.d + 3, 17, (char *)s.d + 1, 20, 5, 13) == WF_OK,
          "copy_rows");
    CHECK(same(&d) && same(&s), "copy_rows");
    uint64_t k0 = kernels();
    CHECK(sd->copy_rows(dctx, (char *)d.d + 3, 17, s.h + 1, 20, 5, 13) == WF_E_BAD_ARGUMENT,
          "copy_rows host src");
    CHECK(sd->copy_rows(dctx, (char *)d.d + 3, 17, (char *)s.d + 1, 27, 5, 13) ==
              WF_E_BAD_ARGUMENT, "copy_rows src past its block");
    CHECK(same(&d) && kernels() == k0, "refused copy_rows touched dst");
    /* overlapping rows in one buffer: the CPU op's refusal, device memory
     * untouched (the two ranges share one host copy, so the CPU op sees
     * the overlap) */
    CHECK(cpu->copy_rows(cctx, d.h + 8, 20, d.h, 20, 5, 13) == WF_E_BAD_ARGUMENT,
          "cpu copy_rows refuses overlapping rows");
    CHECK(sd->copy_rows(dctx, (char *)d.d + 8, 20, d.d, 20, 5, 13) == WF_E_BAD_ARGUMENT,
          "copy_rows refuses overlapping rows");
    CHECK(same(&d) && kernels() == k0, "refused overlapping copy_rows touched dst");
    drop(&s);
    sd->dev_reset(dctx);
    free(d.h);
}

/* ---- resident memory ----------------------------------------------------- */

static void test_resident(void)
{
    const uint64_t budget = 1 << 20;
    wf_backend_ctx_t *c = NULL;
    CHECK(sd->ctx_new(0, budget, &c) == WF_OK, "ctx_new");
    if (!c)
        return;
    uint64_t total = 0, fr = 0;
    sd->memory_info(c, &total, &fr);
    CHECK(total == budget && fr == budget, "fresh: total %llu free %llu",
          (unsigned long long)total, (unsigned long long)fr);
    void *a = NULL, *b = NULL, *j = NULL, *x = NULL;
    CHECK(sd->mem_alloc(c, 1000, &a) == WF_OK && a && ((uintptr_t)a & 255) == 0,
          "mem_alloc 1000, aligned");
    sd->memory_info(c, &total, &fr);
    CHECK(total == budget && fr == budget - 1024, "1000 resident bytes charge 1024: free %llu",
          (unsigned long long)fr);
    /* data in a resident block survives a job */
    float v[250], back[250];
    for (int i = 0; i < 250; i++)
        v[i] = (float)i * 0.5f;
    CHECK(sd->copy_h2d(c, a, v, sizeof v) == WF_OK, "copy into a resident block");
    CHECK(memcmp(a, v, sizeof v) != 0, "resident bytes are scrambled");
    CHECK(sd->dev_alloc(c, 100, &j) == WF_OK, "dev_alloc in a job");
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == budget - 1024 - 100, "free %llu with 100 job bytes", (unsigned long long)fr);
    CHECK(sd->mem_alloc(c, 256, &x) == WF_E_BAD_ARGUMENT && !x, "mem_alloc during a job");
    CHECK(sd->dev_alloc(c, (size_t)(budget - 1024 - 256 + 1), &x) == WF_E_NO_MEMORY && !x,
          "dev_alloc past budget - resident");
    CHECK(sd->dev_alloc(c, (size_t)(budget - 1024 - 256), &x) == WF_OK && x,
          "dev_alloc of the rest");
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == 0, "nothing free: %llu", (unsigned long long)fr);
    sd->dev_reset(c);
    CHECK(sd->copy_d2h(c, back, a, sizeof back) == WF_OK && memcmp(back, v, sizeof v) == 0,
          "resident data after dev_reset");
    /* exhaustion: nothing changes */
    x = NULL;
    CHECK(sd->mem_alloc(c, (size_t)budget - 1024 + 1, &x) == WF_E_NO_MEMORY && !x,
          "mem_alloc past the budget");
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == budget - 1024, "failed mem_alloc changed nothing: %llu",
          (unsigned long long)fr);
    CHECK(sd->mem_alloc(c, (size_t)budget - 1024, &b) == WF_OK, "mem_alloc of the rest");
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == 0, "all resident: free %llu", (unsigned long long)fr);
    CHECK(sd->mem_alloc(c, 1, &x) == WF_E_NO_MEMORY && !x, "mem_alloc on a full budget");
    CHECK(sd->dev_alloc(c, 1, &x) == WF_E_NO_MEMORY && !x, "dev_alloc on a full budget");
    sd->mem_free(c, b);
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == budget - 1024, "mem_free gives back: %llu", (unsigned long long)fr);
    CHECK(sd->copy_h2d(c, b, v, 4) == WF_E_BAD_ARGUMENT, "a freed block is no device memory");
    /* bad frees: counted, nothing changes */
    sd->mem_free(c, NULL);
    sd->mem_free(c, b);
    CHECK(sd->dev_alloc(c, 256, &j) == WF_OK, "dev_alloc");
    sd->mem_free(c, j);
    sd->mem_free(c, (char *)a + 256);
    wf_standin_counters_t k = wf_standin_counters(c);
    CHECK(k.bad_frees == 3 && k.mem_allocs == 2 && k.mem_frees == 1,
          "counters: bad_frees %llu allocs %llu frees %llu",
          (unsigned long long)k.bad_frees, (unsigned long long)k.mem_allocs,
          (unsigned long long)k.mem_frees);
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == budget - 1024 - 256, "bad frees changed nothing: %llu", (unsigned long long)fr);
    CHECK(sd->copy_d2h(c, back, a, sizeof back) == WF_OK && memcmp(back, v, sizeof v) == 0,
          "resident data after bad frees");
    sd->dev_reset(c);
    /* a zero-byte block: a unique pointer, charged nothing */
    void *z = NULL;
    CHECK(sd->mem_alloc(c, 0, &z) == WF_OK && z && z != a, "mem_alloc 0");
    sd->memory_info(c, NULL, &fr);
    CHECK(fr == budget - 1024, "a zero-byte block is free: %llu", (unsigned long long)fr);
    sd->mem_free(c, z);
    CHECK(sd->mem_alloc(NULL, 8, &x) == WF_E_BAD_ARGUMENT, "NULL ctx");
    /* ctx_destroy frees the live block a (ASan would report a leak) */
    sd->ctx_destroy(&c);
    CHECK(!c, "ctx_destroy nulls");
    CHECK(sd->host_register == NULL && sd->host_unregister == NULL,
          "host_register / host_unregister are left out (optional)");
}

int main(void)
{
    sd = wf_standin_dev_backend();
    cpu = wf_backend_cpu();
    if (sd->ctx_new(0, 8 << 20, &dctx) != WF_OK || cpu->ctx_new(0, 0, &cctx) != WF_OK) {
        fprintf(stderr, "ctx_new failed\n");
        return 1;
    }
    bool have = cpu->linear_workspace && cpu->linear && cpu->bias_act && cpu->act &&
                cpu->add && cpu->modln && cpu->gate_residual && cpu->head_norm_rope &&
                cpu->rope_table && cpu->timestep_proj && cpu->copy_rows;
    CHECK(have, "the CPU backend lacks model ops");
    if (have) {
        test_linear();
        test_bias_act();
        test_act_add();
        test_modln();
        test_gate_residual();
        test_head_norm_rope();
        test_rope_table();
        test_timestep_proj();
        test_copy_rows();
    }
    wf_standin_counters_t k = wf_standin_counters(dctx);
    CHECK(k.mem_allocs == k.mem_frees, "every resident block of the op tests freed");
    sd->ctx_destroy(&dctx);
    cpu->ctx_destroy(&cctx);
    test_resident();
    printf("test_standin_ops: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
