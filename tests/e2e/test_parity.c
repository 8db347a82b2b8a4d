/* test_parity.c — end to end: context-parallel attention through a real
 * weftd (cpu:4) and libweft, against an fp64 reference, on every mesh.
 *
 * usage: test_parity PATH_TO_WEFTD
 *
 * One daemon with 4 CPU devices is reconfigured (wf_reconfigure) through
 *   dp=4 (one device per job), ring=2 x dp=2, ring=4, ulysses=2 x dp=2,
 *   ulysses=4, ring=2 x ulysses=2 (USP), ring=2 x tp=2, ulysses=2 x tp=2,
 *   tp=4
 * and on each mesh runs the same grid of jobs. The grid is a
 * representative subset, not the cross product (which would not fit the
 * time budget): every row below varies two or three axes at once so that
 * over the grid every value of every axis appears, each on every mesh:
 *   - rotate_method allgather / alltoall,
 *   - convert_to_fp32 on / off (off matters for f16 / bf16 when the
 *     sequence is sharded),
 *   - f32 / f16 / bf16 inputs, outputs in the same or another dtype,
 *   - divisible S (48, a multiple of 2 x 4 shards, so zigzag halves are
 *     even too) and uneven S (45, 37: remainders under 2 and 4 shards)
 *     with ring_anything + ulysses_anything on,
 *   - uneven heads under Ulysses (H / tp not a multiple of ulysses) with
 *     ulysses_anything on, alone and together with uneven S,
 *   - causal with load_balance on and off, and non-causal,
 *   - GQA / MQA (Hkv = 4, 2, 1 for Hq = 8: fewer K/V heads than the
 *     ulysses degree 4),
 *   - cross-attention Sq != Skv (both ways, causal and not),
 *   - lse requested or not,
 *   - two longer rows (S 320 and 259 / 197, D 64) so that each rank
 *     works over several kernel tiles.
 * Then, on meshes that shard the sequence, indivisible shapes with the
 * anything flags off must be refused with WF_E_BAD_ARGUMENT and a message,
 * and the daemon must keep serving (the next job of the grid checks it).
 * Every reply's epoch must be the epoch wf_reconfigure returned, and
 * status must show the mesh with row-major (dp, ring, ulysses, tp)
 * coordinates.
 *
 * Tolerances (inputs uniform in [-1, 1], so |out| <= 1; the reference
 * reads the same rounded inputs, so what remains is the daemon's
 * arithmetic and the rounding of its outputs):
 *   results kept in fp32 (convert_to_fp32 on, or ring = 1: nothing to merge):
 *     out: f32 1e-4, f16 5e-4 (half an ulp below 1 is 2.4e-4), bf16 4e-3
 *     (half an ulp is 2e-3); lse 1e-4 relative to max(1, |lse|).
 *   merged in the input dtype (ring > 1, convert_to_fp32 off, f16 / bf16
 *   inputs): every step's out and every merged out are rounded to the
 *   input dtype (at most 2R + 2 roundings of u = 2^-11 / 2^-8): out f16
 *   4e-3, bf16 3e-2; lse stays f32 (computed from f32 partial lse values),
 *   so its tolerance does not change.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"
#include "support/check.h"
#include "support/jobcheck.h"
#include "support/spawn.h"

/* Tolerances, see the file comment. */

/* ---- the daemon --------------------------------------------------------- */

static pid_t start_daemon(const char *weftd, const char *endpoint,
                          const char *devices)
{
    const char *argv[] = { weftd, "--devices", devices, "--listen", endpoint,
                           "--log-level", "warning", NULL };
    return spawn_daemon(argv, NULL);
}

/* Ready = answers hello (the client finds the daemon once it binds). */

/* ---- meshes --------------------------------------------------------------- */

typedef struct mesh_case {
    const char *name;
    wf_mesh_degrees_t m;
} mesh_case_t;

static const mesh_case_t meshes[] = {
    { "dp=4", { 4, 1, 1, 1 } },
    { "ring=2,dp=2", { 2, 2, 1, 1 } },
    { "ring=4", { 1, 4, 1, 1 } },
    { "ulysses=2,dp=2", { 2, 1, 2, 1 } },
    { "ulysses=4", { 1, 1, 4, 1 } },
    { "ring=2,ulysses=2", { 1, 2, 2, 1 } },
    { "ring=2,tp=2", { 1, 2, 1, 2 } },
    { "ulysses=2,tp=2", { 1, 1, 2, 2 } },
    { "tp=4", { 1, 1, 1, 4 } },
};
#define N_MESHES (sizeof meshes / sizeof meshes[0])

static bool mesh_eq(const wf_mesh_degrees_t *a, const wf_mesh_degrees_t *b)
{
    return a->dp == b->dp && a->ring == b->ring && a->ulysses == b->ulysses &&
           a->tp == b->tp;
}

/* status shows the mesh, no reconfiguration running, and every device's
 * coordinates are its rank unravelled row-major over (dp, ring, ulysses,
 * tp), tp innermost; on one node device i is rank i. */
static void check_status_mesh(wf_client_t *c, const mesh_case_t *mc, uint64_t epoch)
{
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s) {
        CHECK(0, "out of memory");
        return;
    }
    wf_status_t st = wf_status(c, s);
    CHECK(st == WF_OK, "status: %s %s", wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        CHECK(mesh_eq(&s->mesh, &mc->m), "%s: status mesh dp=%u ring=%u ulysses=%u tp=%u",
              mc->name, s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp);
        CHECK(s->epoch == epoch, "%s: status epoch %" PRIu64 ", reconfigure said %" PRIu64,
              mc->name, s->epoch, epoch);
        CHECK(s->reconfiguring == 0, "%s: still reconfiguring", mc->name);
        CHECK(s->device_count == 4, "%s: %u devices", mc->name, s->device_count);
        const uint32_t dims[4] = { mc->m.dp, mc->m.ring, mc->m.ulysses, mc->m.tp };
        for (uint32_t i = 0; i < s->device_count && i < 4; i++) {
            const wf_device_info_t *d = &s->devices[i];
            CHECK(d->rank == d->index, "%s: device %u has rank %u", mc->name, d->index,
                  d->rank);
            uint32_t r = d->rank, want[4];
            for (int k = 3; k >= 0; k--) {
                want[k] = r % dims[k];
                r /= dims[k];
            }
            CHECK(memcmp(want, d->coords, sizeof want) == 0,
                  "%s: rank %u coords [%u,%u,%u,%u], want [%u,%u,%u,%u]", mc->name,
                  d->rank, d->coords[0], d->coords[1], d->coords[2], d->coords[3],
                  want[0], want[1], want[2], want[3]);
        }
    }
    free(s);
}

/* ---- the grid ------------------------------------------------------------- */

#include "support/jcase_names.h"

/* Rows valid on every mesh (S a multiple of 8, H of 4, or anything on). */
static const jcase_t grid[] = {
    /* name                         B  Sq  Skv Hq Hkv D   in    out   causal lse  scale rotate fp32 ring uly lb */
    { "f32 allgather fp32",         2, 48, 48, 8, 8, 16, F32,  F32,  0, true,  0,    AG,  ON,  DEF, DEF, DEF },
    { "f32 alltoall causal lb",     1, 48, 48, 8, 8, 16, F32,  F32,  1, true,  0,    A2A, OFF, DEF, DEF, ON },
    { "f32 causal no-lb scale .3",  1, 48, 48, 4, 4, 32, F32,  F32,  1, false, 0.3f, AG,  DEF, DEF, DEF, OFF },
    { "f16 alltoall GQA 8/2 causal",1, 48, 48, 8, 2, 16, F16,  F16,  1, true,  0,    A2A, ON,  DEF, DEF, OFF },
    { "f16 no-fp32 MQA 8/1",        2, 48, 48, 8, 1, 16, F16,  F16,  0, true,  0,    AG,  OFF, DEF, DEF, DEF },
    { "f16 no-fp32 alltoall causal",1, 48, 48, 4, 4, 16, F16,  F32,  1, true,  0,    A2A, OFF, DEF, DEF, ON },
    { "bf16 alltoall GQA 8/4 lb",   1, 48, 48, 8, 4, 16, BF16, BF16, 1, true,  0,    A2A, ON,  DEF, DEF, ON },
    { "bf16 no-fp32 allgather",     2, 48, 48, 4, 4, 16, BF16, BF16, 0, true,  0,    AG,  OFF, DEF, DEF, DEF },
    { "bf16->f32 cross 48/32 causal",1, 48, 32, 8, 8, 16, BF16, F32,  1, true,  0,    A2A, DEF, DEF, DEF, DEF },
    { "f32 cross 24/56 GQA 8/2",    1, 24, 56, 8, 2, 16, F32,  F16,  0, true,  0,    AG,  ON,  DEF, DEF, DEF },
    { "f32 uneven S 45 causal lb",  1, 45, 45, 8, 8, 16, F32,  F32,  1, true,  0,    A2A, ON,  ON,  ON,  ON },
    { "f16 uneven cross 45/38",     1, 45, 38, 4, 2, 16, F16,  F16,  0, true,  0,    AG,  OFF, ON,  ON,  DEF },
    { "bf16 uneven S 37 causal",    2, 37, 37, 8, 2, 16, BF16, BF16, 1, true,  0,    A2A, ON,  ON,  ON,  OFF },
    { "f32 uneven causal cross 45/40", 1, 45, 40, 4, 1, 16, F32, F32, 1, true, 0,    AG,  ON,  ON,  ON,  DEF },
    /* longer rows: several kernel tiles per rank, D = 64 */
    { "f32 S 320 D 64 causal lb",   1, 320, 320, 8, 2, 64, F32, F32, 1, true, 0,    A2A, ON,  DEF, DEF, ON },
    { "bf16 uneven 259/197 D 64",   1, 259, 197, 4, 4, 64, BF16, F32, 0, true, 0,   AG,  OFF, ON,  ON,  DEF },
};
#define N_GRID (sizeof grid / sizeof grid[0])

/* Uneven heads under Ulysses: H / tp not a multiple of the ulysses
 * degree (3 per tp rank under ulysses 2, 6 under ulysses 4). */
static jcase_t uneven_heads_case(const wf_mesh_degrees_t *m, bool uneven_s)
{
    int64_t per_tp = m->ulysses == 4 ? 6 : 3;
    int64_t hq = per_tp * m->tp;
    jcase_t c = { uneven_s ? "f32 uneven H + uneven S" : "f32 uneven H",
                  1, uneven_s ? 45 : 48, uneven_s ? 45 : 48, hq, hq / 3, 16,
                  F32, F32, uneven_s, true, 0, A2A, ON, uneven_s ? ON : DEF, ON, DEF };
    return c;
}

typedef struct tally {
    int jobs, refused;
    double worst_out_ratio, worst_lse_ratio; /* error / tolerance */
} tally_t;

/* Run one job that must succeed; check numbers and epoch. */
static void run_ok(wf_client_t *c, const mesh_case_t *mc, const jcase_t *jc,
                   uint64_t epoch, uint64_t seed, tally_t *t)
{
    jbuf_t a;
    if (!jbuf_init(&a, jc, seed)) {
        CHECK(0, "out of memory");
        jbuf_free(&a);
        return;
    }
    wf_attention_opts_t o = opts_of(jc);
    wf_job_result_t r;
    memset(&r, 0, sizeof r);
    wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &r);
    CHECK(st == WF_OK, "%s / %s: %s %s", mc->name, jc->name, wf_status_name(st),
          wf_client_last_error(c));
    if (st == WF_OK) {
        double eo, el, to, tl;
        jbuf_errors(&a, &eo, &el);
        jcase_tolerances(jc, mc->m.ring > 1, &to, &tl);
        CHECK(eo <= to, "%s / %s: out error %.3e > %.1e", mc->name, jc->name, eo, to);
        CHECK(el <= tl, "%s / %s: lse error %.3e > %.1e", mc->name, jc->name, el, tl);
        CHECK(r.epoch == epoch, "%s / %s: reply epoch %" PRIu64 ", mesh epoch %" PRIu64,
              mc->name, jc->name, r.epoch, epoch);
        uint32_t per_job = mc->m.ring * mc->m.ulysses * mc->m.tp;
        CHECK(r.devices >= 1 && r.devices <= per_job, "%s / %s: used %u devices, a "
              "replica has %u", mc->name, jc->name, r.devices, per_job);
        t->jobs++;
        if (eo / to > t->worst_out_ratio)
            t->worst_out_ratio = eo / to;
        if (el / tl > t->worst_lse_ratio)
            t->worst_lse_ratio = el / tl;
    }
    jbuf_free(&a);
}

/* Run one job that must be refused with WF_E_BAD_ARGUMENT, with a message
 * that says what to do (a divisibility / "anything" hint). */
static void run_refused(wf_client_t *c, const mesh_case_t *mc, const jcase_t *jc,
                        tally_t *t)
{
    jbuf_t a;
    if (!jbuf_init(&a, jc, 99)) {
        CHECK(0, "out of memory");
        jbuf_free(&a);
        return;
    }
    wf_attention_opts_t o = opts_of(jc);
    wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, NULL);
    const char *msg = wf_client_last_error(c);
    CHECK(st == WF_E_BAD_ARGUMENT, "%s / %s: %s %s", mc->name, jc->name,
          wf_status_name(st), msg);
    CHECK(strstr(msg, "divisible") || strstr(msg, "anything"),
          "%s / %s: message \"%s\" names neither divisibility nor the anything flags",
          mc->name, jc->name, msg);
    if (st == WF_E_BAD_ARGUMENT)
        printf("    refused %-28s %s\n", jc->name, msg);
    t->refused++;
    jbuf_free(&a);
}

static void run_mesh(wf_client_t *c, const mesh_case_t *mc, uint64_t *epoch)
{
    double t0 = now_s();
    uint64_t e = 0;
    wf_status_t st = wf_reconfigure(c, &mc->m, &e);
    double dt = now_s() - t0;
    CHECK(st == WF_OK, "reconfigure to %s: %s %s", mc->name, wf_status_name(st),
          wf_client_last_error(c));
    if (st != WF_OK)
        return;
    CHECK(e == *epoch + 1, "reconfigure to %s: epoch %" PRIu64 " after %" PRIu64,
          mc->name, e, *epoch);
    *epoch = e;
    check_status_mesh(c, mc, e);

    tally_t t = { 0 };
    uint32_t shards = mc->m.ring * mc->m.ulysses;
    for (size_t i = 0; i < N_GRID; i++) {
        run_ok(c, mc, &grid[i], e, 1000 * (uint64_t)(i + 1) + e, &t);
        if (i == 2 && shards > 1) {
            /* indivisible S, flags explicitly off: refused, and the next
             * row proves the daemon still serves */
            jcase_t bad = grid[0];
            bad.name = "S 45 without anything";
            bad.Sq = bad.Skv = 45;
            bad.ring_any = bad.uly_any = OFF;
            run_refused(c, mc, &bad, &t);
        }
    }
    if (mc->m.ulysses > 1) {
        jcase_t uh = uneven_heads_case(&mc->m, false);
        run_ok(c, mc, &uh, e, 77 + e, &t);
        jcase_t uhs = uneven_heads_case(&mc->m, true);
        run_ok(c, mc, &uhs, e, 78 + e, &t);
        jcase_t bad = uh;
        bad.name = "uneven H without anything";
        bad.uly_any = OFF;
        bad.ring_any = OFF;
        run_refused(c, mc, &bad, &t);
        run_ok(c, mc, &grid[0], e, 79 + e, &t); /* still serving */
    }
    printf("  %-18s epoch %" PRIu64 "  reconfigure %.1f ms  %d jobs ok, %d refused  "
           "worst error/tolerance: out %.2f lse %.2f  (%.2f s)\n",
           mc->name, e, dt * 1e3, t.jobs, t.refused, t.worst_out_ratio,
           t.worst_lse_ratio, now_s() - t0);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    double t0 = now_s();
    char endpoint[96];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-test-%d-parity.sock",
             (int)getpid());

    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    pid_t pid = start_daemon(argv[1], endpoint, "cpu:4");
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (!wait_ready(endpoint)) {
        int ws;
        spawn_signal_reap(pid, -1, SIGKILL, SPAWN_STOP_MS, "weftd", &ws, NULL);
        fprintf(stderr, "FAIL: weftd did not answer hello\n");
        return 1;
    }

    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(endpoint, 30000, &c);
    CHECK(st == WF_OK, "connect: %s", wf_status_name(st));
    if (c) {
        wf_status_info_t *s = calloc(1, sizeof *s);
        uint64_t epoch = 0;
        st = s ? wf_status(c, s) : WF_E_NO_MEMORY;
        CHECK(st == WF_OK, "status: %s %s", wf_status_name(st), wf_client_last_error(c));
        size_t order[N_MESHES];
        for (size_t i = 0; i < N_MESHES; i++)
            order[i] = i;
        if (st == WF_OK) {
            epoch = s->epoch;
            printf("daemon starts with mesh dp=%u ring=%u ulysses=%u tp=%u, epoch %"
                   PRIu64 "\n", s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp,
                   epoch);
            /* every step must change the mesh, so that each bumps the epoch */
            if (mesh_eq(&s->mesh, &meshes[0].m)) {
                order[0] = 1;
                order[1] = 0;
            }
        }
        free(s);
        for (size_t i = 0; i < N_MESHES; i++)
            run_mesh(c, &meshes[order[i]], &epoch);

        /* an invalid mesh changes nothing */
        wf_mesh_degrees_t bad = { 1, 3, 1, 1 };
        uint64_t e = 12345;
        st = wf_reconfigure(c, &bad, &e);
        CHECK(st == WF_E_BAD_ARGUMENT, "reconfigure ring=3 on 4 devices: %s",
              wf_status_name(st));
        CHECK(e == 12345, "a refused reconfigure wrote the epoch");
        CHECK(wf_client_last_error(c)[0] != '\0', "no message for ring=3");
        printf("  ring=3 refused: %s\n", wf_client_last_error(c));
        check_status_mesh(c, &meshes[order[N_MESHES - 1]], epoch);
        wf_mesh_degrees_t zero = { 0, 4, 1, 1 };
        CHECK(wf_reconfigure(c, &zero, NULL) == WF_E_BAD_ARGUMENT, "dp=0 passed the client");
        wf_client_destroy(&c);
    }
    char why[128];
    CHECK(stop_daemon(pid, 20000, why, sizeof why), "%s", why);

    printf("test_parity: %.1f s, %d checks, %d failure(s)\n", now_s() - t0, passed + failed,
           failed);
    return failed ? 1 : 0;
}
