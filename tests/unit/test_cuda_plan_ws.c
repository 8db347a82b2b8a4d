/* test_cuda_plan_ws.c — the host side of the warp-specialized Hopper
 * attention kernel (kernels/cuda/attention_ws.cu), without a
 * GPU: the cuda_attention setting's values (wf_cuda_attn_kernel_parse / _name, the
 * default untouched), the geometry's choice of kernel from the plan's
 * fields (wf_cuda_limits_t.wgmma / ws_features) and its refusals and
 * fallbacks, the launch geometry (block = producer + two consumers, the
 * linear grid, the persistent grid against the SM count), the shared
 * memory per ring depth and head dim against sm_90's 227 KiB, the
 * register split of setmaxnreg (producer / consumers within 64K
 * registers per SM), and +mc's clusters (pairs of query tiles, the grid
 * of whole clusters, persistent clusters, the rules that drop +mc). Runs
 * in every build: weft_cuda_plan is plain C. */
#include "cuda_plan.h"
#include "support/check.h"
#include "support/cuda_params.h"

#include <stdio.h>
#include <string.h>

/* sm_90's opt-in shared memory per block (227 KiB). */
#define SM90_SMEM 232448u

/* An H100 / H200 as cudaDeviceProp reports it, the ws kernel selected
 * with features f. */
static wf_cuda_limits_t hopper_ws(unsigned f)
{
    wf_cuda_limits_t l = {SM90_SMEM, 2147483647, 65535, 65535, 132, WF_CUDA_KERNEL_WS, f};
    return l;
}

static void test_parse(void)
{
    static const struct {
        const char *sel;
        wf_status_t st;
        int kernel;
        unsigned feat;
    } T[] = {
        {NULL, WF_OK, WF_CUDA_KERNEL_WGMMA, 0}, /* the default stays wgmma */
        {"", WF_OK, WF_CUDA_KERNEL_WGMMA, 0},
        {"wgmma", WF_OK, WF_CUDA_KERNEL_WGMMA, 0},
        {"wgmma-pipe", WF_OK, WF_CUDA_KERNEL_WGMMA_PIPE, 0},
        {"mma", WF_OK, WF_CUDA_KERNEL_MMA, 0},
        {"ws", WF_OK, WF_CUDA_KERNEL_WS, 0},
        {"ws+pipe", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PIPE},
        {"ws+pp", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PINGPONG},
        {"ws+store", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_TMA_STORE},
        {"ws+persist", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PERSISTENT},
        {"ws+persist+pipe", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PERSISTENT | WF_CUDA_WS_PIPE},
        {"ws+pipe+pp+store+persist", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL},
        {"ws-pipe", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PIPE},
        {"ws-pp", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG},
        {"ws-pp-store", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_TMA_STORE},
        {"ws-full", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL},
        /* +mc (clusters with TMA multicast): a feature, or "-mc" after a
         * cumulative name; "ws-full" stays the four steps without it */
        {"ws+mc", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_MULTICAST},
        {"ws-mc", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_MULTICAST},
        {"ws-pipe-mc", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_PIPE | WF_CUDA_WS_MULTICAST},
        {"ws-pp-mc", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_MULTICAST},
        {"ws-pp-store-mc", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_TMA_STORE | WF_CUDA_WS_MULTICAST},
        {"ws-full-mc", WF_OK, WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL | WF_CUDA_WS_MULTICAST},
        {"ws+mc+pp+pipe", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_MULTICAST},
        {"ws-pp+store", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_TMA_STORE},
        {"ws-pp-mc+persist", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG | WF_CUDA_WS_PERSISTENT | WF_CUDA_WS_MULTICAST},
        {"ws+pipe+pp+store+persist+mc", WF_OK, WF_CUDA_KERNEL_WS,
         WF_CUDA_WS_ALL | WF_CUDA_WS_MULTICAST},
        {"ws+mc+mc", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-mc+mc", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-mc-mc", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-mcx", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-full-mcx", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+mc-", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-pp-", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-full+pipe", WF_E_BAD_ARGUMENT, 0, 0}, /* pipe twice */
        {"ws-pp-mc-store", WF_E_BAD_ARGUMENT, 0, 0},
        {"mc", WF_E_BAD_ARGUMENT, 0, 0},
        {"wgmma-mc", WF_E_BAD_ARGUMENT, 0, 0},
        /* refused: the caller keeps the default */
        {"WS", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+pipe+", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+pipe+pipe", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+fast", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+pipex", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws+pi", WF_E_BAD_ARGUMENT, 0, 0},
        {"wspipe", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-", WF_E_BAD_ARGUMENT, 0, 0},
        {"ws-full ", WF_E_BAD_ARGUMENT, 0, 0},
        {"fa3", WF_E_BAD_ARGUMENT, 0, 0},
        {"wgmma-pipe2", WF_E_BAD_ARGUMENT, 0, 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        int k = -7;
        unsigned f = 99;
        wf_status_t st = wf_cuda_attn_kernel_parse(T[i].sel, &k, &f);
        if (st != T[i].st)
            fprintf(stderr, "parse(%s): %d, want %d\n", T[i].sel ? T[i].sel : "NULL", st,
                    T[i].st);
        CHECK_TRUE(st == T[i].st);
        if (T[i].st == WF_OK) {
            CHECK_TRUE(k == T[i].kernel && f == T[i].feat);
            /* the canonical name parses back to the same choice */
            char name[64];
            wf_cuda_attn_kernel_name(k, f, name, sizeof name);
            int k2 = -1;
            unsigned f2 = 99;
            CHECK_TRUE(wf_cuda_attn_kernel_parse(name, &k2, &f2) == WF_OK && k2 == k && f2 == f);
        } else {
            CHECK_TRUE(k == -7 && f == 99); /* untouched */
        }
    }
    char name[64];
    wf_cuda_attn_kernel_name(WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL, name, sizeof name);
    CHECK_TRUE(strcmp(name, "ws+pipe+pp+store+persist") == 0);
    wf_cuda_attn_kernel_name(WF_CUDA_KERNEL_WS, WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG |
                                                    WF_CUDA_WS_MULTICAST, name, sizeof name);
    CHECK_TRUE(strcmp(name, "ws+pipe+pp+mc") == 0);
    wf_cuda_attn_kernel_name(WF_CUDA_KERNEL_MMA, 0, name, sizeof name);
    CHECK_TRUE(strcmp(name, "mma") == 0);
    /* truncated, still terminated; whole "+feature"s only */
    wf_cuda_attn_kernel_name(WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL, name, 9);
    CHECK_TRUE(strcmp(name, "ws+pipe") == 0);
    wf_cuda_attn_kernel_name(WF_CUDA_KERNEL_WS, WF_CUDA_WS_ALL, name, 2);
    CHECK_TRUE(strcmp(name, "w") == 0);
    int k;
    unsigned f;
    CHECK_TRUE(wf_cuda_attn_kernel_parse("ws", NULL, &f) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_cuda_attn_kernel_parse("ws", &k, NULL) == WF_E_BAD_ARGUMENT);
}

static void test_budgets(void)
{
    /* Shared memory: 1 KiB alignment slack, Q (the output staging too), K
     * and V rings, the mbarriers. */
    CHECK_TRUE(wf_cuda_attn_ws_smem_bytes(128, 3) ==
               1024 + 2 * 128 * (WF_CUDA_BR + 3 * 2 * WF_CUDA_WG_BC) + WF_CUDA_WS_BAR_BYTES);
    CHECK_TRUE(wf_cuda_attn_ws_smem_bytes(128, 3) == 230656);
    CHECK_TRUE(wf_cuda_attn_ws_smem_bytes(128, 3) <= SM90_SMEM);
    CHECK_TRUE(wf_cuda_attn_ws_smem_bytes(128, 4) > SM90_SMEM); /* D 128: 3 stages at most */
    CHECK_TRUE(wf_cuda_attn_ws_smem_bytes(64, 4) == 148736);
    CHECK_TRUE(wf_cuda_attn_ws_stages(128, SM90_SMEM) == 3);
    CHECK_TRUE(wf_cuda_attn_ws_stages(64, SM90_SMEM) == WF_CUDA_WS_MAX_STAGES);
    for (int d = 64; d <= 128; d += 64)
        for (int st = WF_CUDA_WS_MIN_STAGES; st <= WF_CUDA_WS_MAX_STAGES; st++) {
            size_t b = wf_cuda_attn_ws_smem_bytes(d, st);
            CHECK_TRUE(wf_cuda_attn_ws_stages(d, b) == st);     /* exactly enough */
            CHECK_TRUE(wf_cuda_attn_ws_stages(d, b - 1) == st - 1 ||
                       (st == WF_CUDA_WS_MIN_STAGES && wf_cuda_attn_ws_stages(d, b - 1) == 0));
        }
    CHECK_TRUE(wf_cuda_attn_ws_stages(128, 160 * 1024) == 0); /* not even 2 stages */
    CHECK_TRUE(wf_cuda_attn_ws_stages(64, 48 * 1024) == 0);
    /* The mbarriers (Q full / empty, full and empty per K and V stage) fit
     * their bytes. */
    CHECK_TRUE(8 * (2 + 4 * WF_CUDA_WS_MAX_STAGES) <= WF_CUDA_WS_BAR_BYTES);

    /* Registers: the entry cap is 65536 / 384 rounded down to 8, and the
     * split 24 / 240 / 240 moves exactly what it frees. */
    CHECK_TRUE(WF_CUDA_WS_THREADS == 3 * 128);
    CHECK_TRUE(WF_CUDA_WS_REGS_ENTRY == (65536 / WF_CUDA_WS_THREADS) / 8 * 8);
    CHECK_TRUE(wf_cuda_ws_regs_ok(WF_CUDA_WS_REGS_ENTRY, WF_CUDA_WS_REGS_PRODUCER,
                                  WF_CUDA_WS_REGS_CONSUMER, 2));
    CHECK_TRUE(128 * WF_CUDA_WS_REGS_PRODUCER + 2 * 128 * WF_CUDA_WS_REGS_CONSUMER <= 65536);
    CHECK_TRUE(wf_cuda_ws_regs_ok(168, 40, 232, 2));  /* CUTLASS's cooperative split */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 24, 248, 2)); /* 66560 > 65536 */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 40, 240, 2)); /* frees 16384, takes 18432 */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 16, 240, 2)); /* below setmaxnreg's 24 */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 24, 264, 2)); /* above 256 */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(170, 24, 240, 2)); /* not a multiple of 8 */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(176, 24, 240, 2)); /* 176 * 384 > 65536 at entry */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 176, 240, 2)); /* producer above the entry */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 24, 160, 2));  /* consumer below the entry */
    CHECK_TRUE(!wf_cuda_ws_regs_ok(168, 24, 240, 0));
    CHECK_TRUE(wf_cuda_ws_regs_ok(128, 24, 160, 3));  /* 1 + 3 warpgroups: 24 / 160 */
}

static void test_geometry(void)
{
    static const int64_t S[] = {1, 63, 64, 65, 127, 128, 129, 1000, 4096, 16384};
    static const int64_t D[] = {64, 128};
    static const wf_dtype_t DT[] = {WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16};
    static const unsigned F[] = {0, WF_CUDA_WS_PIPE, WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG,
                                 WF_CUDA_WS_ALL & ~WF_CUDA_WS_PERSISTENT, WF_CUDA_WS_ALL};
    wf_cuda_attn_geom_t g;
    for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
        for (size_t di = 0; di < 2; di++)
            for (size_t ti = 0; ti < 3; ti++)
                for (size_t fi = 0; fi < sizeof F / sizeof F[0]; fi++)
                    for (int mix = 0; mix < 3; mix++) {
                        wf_cuda_limits_t lim = hopper_ws(F[fi]);
                        wf_attn_params_t p = attn_params(2, S[si], S[si] + 5, 24, 8, D[di], DT[ti]);
                        p.h_begin = 3; /* a head range: 21 heads */
                        if (mix == 1)
                            p.v_dtype = WF_DTYPE_F32;
                        if (mix == 2)
                            p.out_dtype = WF_DTYPE_F32; /* out's dtype does not matter */
                        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK);
                        const int want = DT[ti] != WF_DTYPE_F32 && mix != 1;
                        const int64_t tiles = cdiv(S[si], WF_CUDA_BR) * 21 * 2;
                        if (!want) { /* mixed or f32 inputs: mma.sync, as for wgmma */
                            CHECK_TRUE(g.kernel == WF_CUDA_KERNEL_MMA && g.ws_features == 0 &&
                                       g.tiles == 0);
                            continue;
                        }
                        CHECK_TRUE(g.kernel == WF_CUDA_KERNEL_WS);
                        CHECK_TRUE(g.ws_features == F[fi]);
                        CHECK_TRUE(g.tiles == tiles);
                        CHECK_TRUE(g.block[0] == WF_CUDA_WS_THREADS && g.block[1] == 1 &&
                                   g.block[2] == 1);
                        const int64_t grid = (F[fi] & WF_CUDA_WS_PERSISTENT) && tiles > 132
                                                 ? 132 : tiles;
                        CHECK_TRUE(g.grid[0] == (unsigned)grid && g.grid[1] == 1 && g.grid[2] == 1);
                        CHECK_TRUE(g.stages == (D[di] == 128 ? 3 : 4));
                        CHECK_TRUE(g.smem_bytes ==
                                   wf_cuda_attn_ws_smem_bytes((int)D[di], g.stages));
                        CHECK_TRUE(g.smem_bytes <= SM90_SMEM);
                        CHECK_TRUE(g.d == D[di] && g.compute_bf16 == (DT[ti] == WF_DTYPE_BF16));
                        CHECK_TRUE(g.cluster[0] == 1 && g.cluster[1] == 1 && g.cluster[2] == 1);
                    }
    {
        /* The persistent grid: at most one block per SM; fewer tiles than
         * SMs: one block per tile; an unknown SM count: one per tile. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_ALL);
        wf_attn_params_t p = attn_params(1, 16384, 16384, 24, 24, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.tiles == 128 * 24 &&
                   g.grid[0] == 132);
        p = attn_params(1, 1000, 1000, 4, 4, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.tiles == 32 &&
                   g.grid[0] == 32);
        lim.sm_count = 0;
        p = attn_params(1, 16384, 16384, 24, 24, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[0] == 128 * 24);
        /* unknown feature bits are dropped (0x10 is +mc) */
        lim = hopper_ws(0xE0u | WF_CUDA_WS_PIPE);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.ws_features == WF_CUDA_WS_PIPE);
    }
    {
        /* Refusals and fallbacks: the ring does not fit -> the wgmma kernel
         * when its tiles fit, else mma.sync; more tiles than gridDim.x ->
         * wgmma; an empty head range -> nothing to launch. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_PIPE);
        lim.smem_optin = 160 * 1024;
        wf_attn_params_t p = attn_params(1, 4096, 4096, 8, 8, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA);
        p.D = 64; /* 2 stages of D 64 fit 160 KiB */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.stages == 4);
        lim.smem_optin = 120 * 1024; /* ws: 3 stages of D 64; wgmma's 115840 too */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.stages == 3 && g.smem_bytes <= lim.smem_optin);
        lim.smem_optin = 70 * 1024; /* below ws' 2 stages (83200): wgmma does not fit either */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA);
        lim = hopper_ws(WF_CUDA_WS_PIPE);
        lim.max_grid_x = 100;
        p = attn_params(1, 4096, 4096, 8, 8, 128, WF_DTYPE_BF16); /* 32 x 8 = 256 tiles > 100 */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA &&
                   g.grid[0] == 32 && g.grid[1] == 8 && g.block[0] == WF_CUDA_WG_THREADS &&
                   g.ws_features == 0);
        lim.ws_features = WF_CUDA_WS_PERSISTENT; /* the linear grid still counts every tile */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA);
        lim = hopper_ws(WF_CUDA_WS_ALL);
        p.h_begin = p.h_end = 5;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.grid[1] == 0 && g.tiles == 0);
        /* The common refusals stay: other head dims, bad mappings. */
        p = attn_params(1, 128, 128, 4, 4, 96, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_E_BAD_ARGUMENT);
        p = attn_params(1, 64, 64, 8, 3, 64, WF_DTYPE_F16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_E_BAD_ARGUMENT);
        p = attn_params(65536, 64, 64, 1, 1, 64, WF_DTYPE_F16); /* B beyond gridDim.z */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_E_BAD_ARGUMENT);
    }
    {
        /* GQA slices, offsets and S_q != S_kv take the ws kernel alike. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG);
        wf_attn_params_t p = attn_params(1, 300, 1000, 4, 1, 64, WF_DTYPE_F16);
        p.gqa_group = 4; p.q_head_base = 8; p.kv_head_base = 2;
        p.causal = 1; p.q_offset = 700; p.kv_offset = 0;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.tiles == 3 * 4);
    }
    {
        /* The other selections are untouched by the new fields. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_ALL);
        lim.wgmma = WF_CUDA_KERNEL_WGMMA;
        wf_attn_params_t p = attn_params(1, 1000, 1000, 8, 8, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA &&
                   g.ws_features == 0 && g.tiles == 0 && g.grid[0] == 8 && g.grid[1] == 8);
        lim.wgmma = WF_CUDA_KERNEL_WGMMA_PIPE;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA_PIPE);
        lim.wgmma = 0;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA);
    }
}

/* +mc: clusters of two CTAs over pairs of query tiles of one head. */
static void test_multicast(void)
{
    static const int64_t S[] = {1, 127, 128, 129, 256, 300, 1000, 1030, 4096, 16384};
    static const unsigned F[] = {0, WF_CUDA_WS_PIPE, WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG,
                                 WF_CUDA_WS_ALL & ~WF_CUDA_WS_PERSISTENT, WF_CUDA_WS_ALL};
    wf_cuda_attn_geom_t g;
    for (size_t si = 0; si < sizeof S / sizeof S[0]; si++)
        for (int64_t d = 64; d <= 128; d += 64)
            for (size_t fi = 0; fi < sizeof F / sizeof F[0]; fi++)
                for (int causal = 0; causal < 2; causal++) {
                    const unsigned f = F[fi] | WF_CUDA_WS_MULTICAST;
                    wf_cuda_limits_t lim = hopper_ws(f);
                    wf_attn_params_t p = attn_params(2, S[si], S[si] + 5, 24, 8, d, WF_DTYPE_BF16);
                    p.h_begin = 3; /* 21 heads */
                    p.causal = causal;
                    CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK);
                    CHECK_TRUE(g.kernel == WF_CUDA_KERNEL_WS);
                    const int64_t nqt = cdiv(S[si], WF_CUDA_BR), pairs = cdiv(nqt, 2) * 21 * 2;
                    /* the ring, the block and the shared bytes per CTA as without +mc */
                    CHECK_TRUE(g.block[0] == WF_CUDA_WS_THREADS && g.stages == (d == 128 ? 3 : 4));
                    CHECK_TRUE(g.smem_bytes == wf_cuda_attn_ws_smem_bytes((int)d, g.stages) &&
                               g.smem_bytes <= SM90_SMEM);
                    CHECK_TRUE(g.grid[1] == 1 && g.grid[2] == 1 && g.cluster[1] == 1 &&
                               g.cluster[2] == 1);
                    if (nqt < 2) {
                        /* one tile per head: nothing to share, +mc dropped */
                        CHECK_TRUE(g.ws_features == F[fi] && g.cluster[0] == 1);
                        CHECK_TRUE(g.tiles == nqt * 21 * 2);
                        continue;
                    }
                    CHECK_TRUE(g.ws_features == f);
                    CHECK_TRUE(g.cluster[0] == WF_CUDA_WS_CLUSTER && WF_CUDA_WS_CLUSTER == 2);
                    CHECK_TRUE(g.tiles == 2 * pairs);
                    CHECK_TRUE(g.tiles >= nqt * 21 * 2 &&
                               g.tiles - nqt * 21 * 2 == (nqt % 2) * 21 * 2);
                    const int64_t grid = (F[fi] & WF_CUDA_WS_PERSISTENT) && pairs > 66
                                             ? 132 : 2 * pairs;
                    CHECK_TRUE(g.grid[0] == (unsigned)grid);
                    CHECK_TRUE(g.grid[0] % 2 == 0); /* whole clusters */
                }
    {
        /* The persistent grid of clusters: sm_count / 2 clusters at most,
         * at least one; an unknown SM count: one cluster per pair. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_ALL | WF_CUDA_WS_MULTICAST);
        wf_attn_params_t p = attn_params(1, 16384, 16384, 24, 24, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.tiles == 128 * 24 &&
                   g.grid[0] == 132 && g.cluster[0] == 2);
        lim.sm_count = 133; /* an odd count: 66 clusters */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[0] == 132);
        lim.sm_count = 1;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[0] == 2 &&
                   g.cluster[0] == 2);
        lim.sm_count = 0;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[0] == 128 * 24);
        /* an odd tile count: one empty tile per head in the grid */
        lim = hopper_ws(WF_CUDA_WS_PIPE | WF_CUDA_WS_MULTICAST);
        p = attn_params(1, 300, 300, 5, 5, 128, WF_DTYPE_BF16); /* 3 tiles per head */
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.tiles == 4 * 5 &&
                   g.grid[0] == 20 && g.cluster[0] == 2);
        /* fewer pairs than SMs, persistent: one cluster per pair */
        lim.ws_features |= WF_CUDA_WS_PERSISTENT;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[0] == 20);
    }
    {
        /* Fallbacks: the grid of pairs beyond gridDim.x while the tiles
         * fit: the ws kernel without clusters; both beyond: wgmma. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_PIPE | WF_CUDA_WS_MULTICAST);
        /* 30 tiles, 20 pairs */
        wf_attn_params_t p = attn_params(10, 300, 300, 1, 1, 64, WF_DTYPE_F16);
        lim.max_grid_x = 40;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.ws_features == (WF_CUDA_WS_PIPE | WF_CUDA_WS_MULTICAST) && g.grid[0] == 40);
        lim.max_grid_x = 39;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.ws_features == WF_CUDA_WS_PIPE && g.grid[0] == 30 && g.tiles == 30 &&
                   g.cluster[0] == 1);
        lim.max_grid_x = 29;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA && g.cluster[0] == 1 && g.ws_features == 0);
        /* the ring does not fit: the same fallbacks as without +mc */
        lim = hopper_ws(WF_CUDA_WS_MULTICAST);
        lim.smem_optin = 160 * 1024;
        p = attn_params(1, 4096, 4096, 8, 8, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA &&
                   g.cluster[0] == 1 && g.ws_features == 0);
        /* mixed dtypes: mma.sync, no cluster */
        lim = hopper_ws(WF_CUDA_WS_MULTICAST);
        p.v_dtype = WF_DTYPE_F32;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_MMA &&
                   g.cluster[0] == 1);
        /* an empty head range: nothing to launch */
        p = attn_params(1, 4096, 4096, 8, 8, 128, WF_DTYPE_BF16);
        p.h_begin = p.h_end = 2;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.grid[1] == 0 && g.tiles == 0);
        /* the other kernels never get a cluster */
        lim.wgmma = WF_CUDA_KERNEL_WGMMA;
        p = attn_params(1, 4096, 4096, 8, 8, 128, WF_DTYPE_BF16);
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK &&
                   g.kernel == WF_CUDA_KERNEL_WGMMA && g.cluster[0] == 1 && g.cluster[1] == 1 &&
                   g.cluster[2] == 1);
    }
    {
        /* GQA slices, offsets, causal and S_q != S_kv keep +mc. */
        wf_cuda_limits_t lim = hopper_ws(WF_CUDA_WS_PIPE | WF_CUDA_WS_PINGPONG |
                                         WF_CUDA_WS_MULTICAST);
        wf_attn_params_t p = attn_params(1, 300, 1000, 4, 1, 64, WF_DTYPE_F16);
        p.gqa_group = 4; p.q_head_base = 8; p.kv_head_base = 2;
        p.causal = 1; p.q_offset = 700; p.kv_offset = 0;
        CHECK_TRUE(wf_cuda_attn_geometry(&p, &lim, &g) == WF_OK && g.kernel == WF_CUDA_KERNEL_WS &&
                   g.tiles == 4 * 4 && g.grid[0] == 16 && g.cluster[0] == 2);
    }
}

int main(void)
{
    test_parse();
    test_budgets();
    test_geometry();
    test_multicast();
    printf("test_cuda_plan_ws: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
