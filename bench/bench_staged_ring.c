/* bench_staged_ring.c — ring attention with alltoall rotation, timed with
 * and without the overlap of each step's transfer with its kernels:
 * R ranks as threads of this process, each its own
 * backend context, every rank passing its own shard (local mode, device
 * buffers), so the time is the ring's: the R steps' kernels and merges
 * and the R - 1 K/V exchanges.
 *
 *   bench_staged_ring BACKEND R S H D causal [rounds]
 *
 * BACKEND:
 *   cuda     the mixed mode: R contexts on GPU 0 over the host comm behind
 *            comm_staged.h; modes "overlap" (the transfer stream, the
 *            default), "sync" (WF_COMM_STAGED_SYNC: every copy staged with
 *            a synchronize of the whole stream, the path before) and
 *            "allgather" (the other rotation: every holding gathered
 *            before the first step, overlapped with nothing);
 *   nccl     one rank per GPU (R GPUs needed) over NCCL, whose isend /
 *            irecv run on NCCL's side stream: modes "alltoall" and
 *            "allgather";
 *   standin  the mixed mode on the tests' stand-in device (a CPU; its
 *            transfers are a thread with random delays, not PCIe): the
 *            same modes as cuda, for the code path, not the figures.
 * bf16 q / k / v / out, B 1, Hkv = H, load balance when causal, merge in
 * f32. Modes alternate round by round (drift hits both alike); rank 0
 * times each run between two barriers of the rank threads. Prints one
 * line per mode:
 *   "ring backend=B mode=M R=.. S=.. H=.. D=.. causal=.. ms=MEDIAN min=.. max=.."
 * and the ratios "ratio sync/overlap=.." (staged) or
 * "ratio allgather/alltoall=.." (and the same for the staged modes).
 * Each rank's last out and lse of every mode are compared bit for bit
 * with the first mode's (the same kernels and merges in the same order:
 * only the transport differs): "check ... bit-identical" per mode; exit 1
 * when the synchronous staging's differ from the overlapped one's (the
 * allgather rotation's comparison is information: its K / V live at other
 * addresses). Exits 77 when the backend is absent (no GPU, no NCCL,
 * too few GPUs). tests/e2e/staged_ring.cmake runs the stand-in form in CI.
 */
#include "comm/comm.h"
#include "comm/comm_host.h"
#include "comm/comm_nccl.h"
#include "comm/comm_staged.h"
#include "parallel/cp_attention.h"
#include "tensor.h"
#if defined(WEFT_BENCH_STANDIN)
#include "support/standin_dev.h"
#endif

#include "bench_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXR 16
#define MAXMODES 3

typedef enum { B_CUDA, B_NCCL, B_STANDIN } backend_t;

typedef struct bench {
    backend_t be;
    const wf_backend_ops_t *ops;
    int R, rounds, nmodes;
    const char *mode_name[MAXMODES];
    wf_cp_job_t job;                 /* shared shape (pointers per rank) */
    wf_comm_host_world_t *world[2];  /* staged: overlap / sync worlds */
    wf_nccl_id_t nccl_id;            /* nccl */
    pthread_barrier_t bar;
    double ms[MAXMODES][64];         /* rank 0's times */
    _Atomic int failed;              /* a rank failed (any thread) */
    int mismatch[MAXR];              /* per rank: modes whose out differs from mode 0's */
} bench_t;

typedef struct rank_arg {
    bench_t *b;
    int r;
    pthread_t tid;
} rank_arg_t;

/* Fill n bf16 elements on the device with small values. */
static wf_status_t fill_bf16(const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx, void *dev,
                             size_t n, uint32_t seed)
{
    uint16_t *h = malloc(n * 2 + 2);
    if (!h)
        return WF_E_NO_MEMORY;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        h[i] = wf_f32_to_bf16((float)((int)(x % 2001) - 1000) * 1e-3f);
    }
    wf_status_t st = ops->copy_h2d(ctx, dev, h, n * 2);
    if (st == WF_OK)
        st = ops->synchronize(ctx);
    free(h);
    return st;
}

static void *rank_main(void *p)
{
    rank_arg_t *a = p;
    bench_t *b = a->b;
    const wf_backend_ops_t *ops = b->ops;
    const int R = b->R, r = a->r;
    wf_backend_ctx_t *ctx = NULL;
    wf_comm_t *comm[2] = {NULL, NULL};
    wf_status_t st = WF_OK;
    wf_cp_job_t job = b->job;
    job.local = true;
    int64_t L = job.Sq / R; /* S divisible by 2R: every shard S / R rows */
    size_t nq = (size_t)(job.B * L * job.Hq * job.D), nl = (size_t)(job.B * L * job.Hq);
    size_t db = 0, hb = 0;
    void *dws = NULL, *hws = NULL, *q = NULL, *k = NULL, *v = NULL, *o = NULL, *l = NULL;
    st = wf_cp_attention_workspace_dev(&job, R, 1, ops, &db, &hb);
    uint64_t budget = (uint64_t)db + 4 * nq * 2 + nl * 4 + ((uint64_t)64 << 20);
    if (st == WF_OK)
        st = ops->ctx_new(b->be == B_NCCL ? r : b->be == B_CUDA ? 0 : r, budget, &ctx);
    if (st == WF_OK && b->be == B_NCCL) {
        wf_comm_nccl_opts_t o2 = {.device = r, .stream = ops->native_stream(ctx)};
        st = wf_comm_nccl_init(&b->nccl_id, R, r, &o2, &comm[0]);
    } else if (st == WF_OK) {
        for (int w = 0; w < 2 && st == WF_OK; w++) {
            wf_comm_t *inner = NULL;
            st = wf_comm_host_init(b->world[w], r, &inner);
            if (st == WF_OK)
                st = wf_comm_staged_wrap_ex(inner, ops, ctx, w ? WF_COMM_STAGED_SYNC : 0,
                                            &comm[w]);
        }
    }
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, db, &dws);
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, nq * 2, &q);
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, nq * 2, &k);
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, nq * 2, &v);
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, nq * 2, &o);
    if (st == WF_OK)
        st = ops->dev_alloc(ctx, nl * 4, &l);
    if (st == WF_OK && !(hws = aligned_alloc(64, (hb + 63) / 64 * 64 + 64)))
        st = WF_E_NO_MEMORY;
    /* every mode's last output, compared bit for bit with mode 0's: the
     * same kernels and merges in the same order, only the transport differs */
    unsigned char *outs[MAXMODES] = {NULL};
    for (int m = 0; m < b->nmodes && st == WF_OK; m++)
        if (!(outs[m] = malloc(nq * 2 + nl * 4)))
            st = WF_E_NO_MEMORY;
    if (st == WF_OK)
        st = fill_bf16(ops, ctx, q, nq, 3u * (uint32_t)r + 1);
    if (st == WF_OK)
        st = fill_bf16(ops, ctx, k, nq, 3u * (uint32_t)r + 2);
    if (st == WF_OK)
        st = fill_bf16(ops, ctx, v, nq, 3u * (uint32_t)r + 3);
    if (st != WF_OK) {
        fprintf(stderr, "rank %d: setup: %s\n", r, wf_status_name(st));
        b->failed = 1;
    }
    job.q = q;
    job.k = k;
    job.v = v;
    job.out = o;
    job.lse = l;
    /* one warm-up round, then the timed ones */
    for (int it = -1; it < b->rounds; it++)
        for (int m = 0; m < b->nmodes; m++) {
            pthread_barrier_wait(&b->bar);
            if (b->failed)
                continue; /* every rank sees it at the same barrier */
            wf_comm_t *c = comm[b->be == B_NCCL ? 0 : m == 1];
            job.rotate_method = (b->be == B_NCCL ? m == 1 : m == 2) ? WF_CP_ROTATE_ALLGATHER
                                                                    : WF_CP_ROTATE_ALLTOALL;
            wf_cp_group_t g = {.seq = c, .ring = c, .ring_degree = R, .ulysses_degree = 1};
            pthread_barrier_wait(&b->bar);
            double t0 = bench_now_s();
            wf_status_t rs = wf_cp_attention_run_dev(&job, &g, ops, ctx, dws, db, hws, hb);
            pthread_barrier_wait(&b->bar);
            double t1 = bench_now_s();
            if (rs != WF_OK) {
                fprintf(stderr, "rank %d: %s: %s\n", r, b->mode_name[m], wf_status_name(rs));
                b->failed = 1;
            }
            if (r == 0 && it >= 0)
                b->ms[m][it] = (t1 - t0) * 1e3;
            if (rs == WF_OK && it == b->rounds - 1 &&
                (ops->copy_d2h(ctx, outs[m], o, nq * 2) != WF_OK ||
                 ops->copy_d2h(ctx, outs[m] + nq * 2, l, nl * 4) != WF_OK ||
                 ops->synchronize(ctx) != WF_OK))
                b->failed = 1;
        }
    for (int m = 1; m < b->nmodes && !b->failed; m++)
        if (memcmp(outs[m], outs[0], nq * 2 + nl * 4) != 0)
            b->mismatch[r] |= 1 << m;
    for (int m = 0; m < b->nmodes; m++)
        free(outs[m]);
    if (ctx)
        ops->dev_reset(ctx);
    free(hws);
    wf_comm_destroy(&comm[0]);
    wf_comm_destroy(&comm[1]);
    ops->ctx_destroy(&ctx);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s cuda|nccl|standin R S H D causal [rounds]\n", argv[0]);
        return 2;
    }
    bench_t b;
    memset(&b, 0, sizeof b);
    const char *be = argv[1];
    b.R = atoi(argv[2]);
    int64_t S = atoll(argv[3]), H = atoll(argv[4]), D = atoll(argv[5]);
    int causal = atoi(argv[6]);
    b.rounds = argc > 7 ? atoi(argv[7]) : 7;
    if (b.R < 2 || b.R > MAXR || S < 2 * b.R || S % (2 * b.R) || H < 1 || D < 1 ||
        b.rounds < 1 || b.rounds > 64) {
        fprintf(stderr, "R in [2, %d], S a multiple of 2R, rounds in [1, 64]\n", MAXR);
        return 2;
    }
    if (strcmp(be, "cuda") == 0 || strcmp(be, "nccl") == 0) {
        b.be = be[0] == 'c' ? B_CUDA : B_NCCL;
        b.ops = wf_backend_cuda();
        int n = 0;
        if (!b.ops || wf_cuda_device_count(&n, NULL) != WF_OK || n < 1) {
            printf("ring backend=%s: no GPU, skipped\n", be);
            return 77;
        }
        if (b.be == B_NCCL && (!wf_comm_nccl_built() || n < b.R)) {
            printf("ring backend=nccl: %s, skipped\n",
                   wf_comm_nccl_built() ? "fewer GPUs than R" : "NCCL not built");
            return 77;
        }
        if (b.be == B_NCCL && wf_comm_nccl_unique_id(&b.nccl_id) != WF_OK) {
            printf("ring backend=nccl: no unique id, skipped\n");
            return 77;
        }
    } else if (strcmp(be, "standin") == 0) {
#if defined(WEFT_BENCH_STANDIN)
        b.be = B_STANDIN;
        b.ops = wf_standin_dev_backend();
#else
        printf("ring backend=standin: not built (tests off), skipped\n");
        return 77;
#endif
    } else {
        fprintf(stderr, "unknown backend %s\n", be);
        return 2;
    }
    if (b.be == B_NCCL) {
        b.nmodes = 2;
        b.mode_name[0] = "alltoall";
        b.mode_name[1] = "allgather";
    } else {
        b.nmodes = 3;
        b.mode_name[0] = "overlap";
        b.mode_name[1] = "sync";
        b.mode_name[2] = "allgather";
        if (wf_comm_host_world_new(b.R, &b.world[0]) != WF_OK ||
            wf_comm_host_world_new(b.R, &b.world[1]) != WF_OK) {
            fprintf(stderr, "host worlds\n");
            return 1;
        }
    }
    b.job = (wf_cp_job_t){.B = 1, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D,
                          .hq_begin = 0, .hq_end = H, .scale = 0.125f, .causal = causal != 0,
                          .q_dtype = WF_DTYPE_BF16, .k_dtype = WF_DTYPE_BF16,
                          .v_dtype = WF_DTYPE_BF16, .out_dtype = WF_DTYPE_BF16,
                          .return_lse = true, .convert_to_fp32 = true,
                          .load_balance = causal != 0};
    pthread_barrier_init(&b.bar, NULL, (unsigned)b.R);
    rank_arg_t a[MAXR];
    for (int r = 0; r < b.R; r++) {
        a[r] = (rank_arg_t){.b = &b, .r = r};
        if (pthread_create(&a[r].tid, NULL, rank_main, &a[r]) != 0) {
            fprintf(stderr, "pthread_create\n");
            return 1; /* the started ranks would wait at the barrier */
        }
    }
    for (int r = 0; r < b.R; r++)
        pthread_join(a[r].tid, NULL);
    pthread_barrier_destroy(&b.bar);
    wf_comm_host_world_unref(&b.world[0]);
    wf_comm_host_world_unref(&b.world[1]);
    if (b.failed) {
        printf("ring backend=%s: FAILED (see stderr)\n", be);
        return 1;
    }
    int bad = 0;
    for (int m = 1; m < b.nmodes; m++) {
        int ranks = 0;
        for (int r = 0; r < b.R; r++)
            ranks += (b.mismatch[r] >> m) & 1;
        /* overlapped and synchronous staging must agree bit for bit; the
         * other rotation reads K / V at other addresses (a kernel may pick
         * another path): told, not failed */
        int must = b.be != B_NCCL && m == 1;
        printf("check backend=%s: out and lse of mode %s %s mode %s's on %d of %d ranks%s\n",
               be, b.mode_name[m], ranks ? "DIFFER from" : "bit-identical to",
               b.mode_name[0], ranks ? ranks : b.R, b.R, must ? "" : " (information)");
        if (must)
            bad += ranks;
    }
    double med[MAXMODES];
    for (int m = 0; m < b.nmodes; m++) {
        bench_sort(b.ms[m], b.rounds);
        med[m] = b.ms[m][b.rounds / 2];
        printf("ring backend=%s mode=%s R=%d S=%lld H=%lld D=%lld causal=%d ms=%.3f min=%.3f "
               "max=%.3f rounds=%d\n",
               be, b.mode_name[m], b.R, (long long)S, (long long)H, (long long)D, causal,
               med[m], b.ms[m][0], b.ms[m][b.rounds - 1], b.rounds);
    }
    if (b.be == B_NCCL)
        printf("ratio allgather/alltoall=%.3f\n", med[1] / med[0]);
    else
        printf("ratio sync/overlap=%.3f allgather/overlap=%.3f\n", med[1] / med[0],
               med[2] / med[0]);
    return bad ? 1 : 0;
}
