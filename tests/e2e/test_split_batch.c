/* test_split_batch.c — end to end: a forward's batch split over the dp
 * replicas (split_batch) in a real weftd.
 *
 * usage: test_split_batch PATH_TO_WEFTD FIXTURES_DIR
 *
 * One weftd on cpu:4 (the fixtures directory as its model root) loads
 * flux-tiny and wan-tiny. On dp 2 x ulysses 2, dp 2 x ring 2, dp 2 x
 * tp 2, dp 4 and ring 2 x ulysses 2 (dp 1: split_batch changes nothing), each model's forward runs on its fixture's batch (B = 2) and
 * on a batch of 3 made of the fixture's samples 0, 1, 0 (uneven pieces:
 * 2 + 1 over two replicas), once unsplit and once with split_batch:
 *   - the split output against diffusers' float64 run (its rows picked
 *     alike) within the fixtures' tolerance (1e-5 of max |ref|), and
 *     against the unsplit output within 1e-6 of max |ref| (each replica
 *     computes its samples as one replica computes them all; rows of a
 *     GEMM may round differently with the row count);
 *   - the reply's `devices`: min(dp, B) replicas' worth for the split
 *     job, one replica's for the unsplit one (and on dp 1 both);
 *   - on dp 2 x ulysses 2, status: each of the 4 devices served the
 *     split job (jobs_served + 1 on every device; the unsplit job adds 1
 *     on one replica's 2 only).
 * The daemon exits 0 on SIGTERM.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/check.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/wait.h"
#include "weft.h"

/* The split output against the unsplit one, of max |ref|. */
#define SPLIT_TOLERANCE 1e-6

/* One forward, split or not. */
static wf_status_t forward(wf_client_t *c, const fwdio_t *io, bool split,
                           wf_tensor_t *out, wf_job_result_t *res)
{
    wf_forward_opts_t o = { .split_batch = split };
    return fwdio_forward(c, io, &o, out, res);
}

static uint64_t served(wf_client_t *c, uint64_t ret[4])
{
    static wf_status_info_t si;
    if (wf_status(c, &si) != WF_OK || si.device_count != 4)
        return 0;
    uint64_t sum = 0;
    for (int d = 0; d < 4; d++)
        sum += ret[d] = si.devices[d].jobs_served;
    return sum;
}

/* The unsplit and split forwards of io on mesh m; checks as the header. */
static void both(wf_client_t *c, const fwdio_t *io, const wf_mesh_degrees_t *m,
                 bool count_devices)
{
    int64_t B = io->ref.shape[0];
    uint32_t per = m->ring * m->ulysses * m->tp;
    uint32_t k = m->dp < (uint32_t)B ? m->dp : (uint32_t)B;
    wf_tensor_t ou, os;
    wf_job_result_t ru, rs;
    uint64_t before[4], mid[4], after[4];
    served(c, before);
    wf_status_t su = forward(c, io, false, &ou, &ru);
    served(c, mid);
    wf_status_t ss = forward(c, io, true, &os, &rs);
    served(c, after);
    double rmax = fwdio_max_abs(&io->ref);
    int64_t n = wf_tensor_numel(&io->ref);
    CHECK(su == WF_OK && ss == WF_OK, "%s B %lld dp %u ring %u ulysses %u tp %u: "
          "unsplit %s, split %s (%s)", io->model, (long long)B, m->dp, m->ring, m->ulysses,
          m->tp, wf_status_name(su), wf_status_name(ss), wf_client_last_error(c));
    if (su == WF_OK && ss == WF_OK) {
        double e_ref = fwdio_diff(os.data, io->ref.data, n, rmax);
        double e_u = fwdio_diff(os.data, ou.data, n, rmax);
        CHECK(e_ref <= io->tol, "%s B %lld dp %u: split vs diffusers %.3g", io->model,
              (long long)B, m->dp, e_ref);
        CHECK(e_u <= SPLIT_TOLERANCE, "%s B %lld dp %u: split vs unsplit %.3g", io->model,
              (long long)B, m->dp, e_u);
        CHECK(ru.devices == per && rs.devices == k * per, "%s B %lld dp %u: devices "
              "unsplit %u (want %u), split %u (want %u)", io->model, (long long)B, m->dp,
              ru.devices, per, rs.devices, k * per);
        printf("%-5s B %lld, dp %u ring %u ulysses %u tp %u: split over %u replica(s), "
               "%u devices; vs diffusers f64 %.3g, vs unsplit %.3g\n", io->model,
               (long long)B, m->dp, m->ring, m->ulysses, m->tp, k, rs.devices, e_ref, e_u);
    }
    if (count_devices) {
        /* the unsplit job on one replica's devices, the split one on all */
        uint32_t on_u = 0, on_s = 0;
        for (int d = 0; d < 4; d++) {
            on_u += mid[d] - before[d] == 1;
            on_s += after[d] - mid[d] == 1;
        }
        CHECK(on_u == per && on_s == k * per, "%s B %lld: devices serving: unsplit %u "
              "(want %u), split %u (want %u)", io->model, (long long)B, on_u, per, on_s,
              k * per);
    }
    free(ou.data);
    free(os.data);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    block_test_signals();
    static fwdd_t d;
    if (!fwdd_start(&d, argv[1], argv[2], "dp=2,ulysses=2", NULL))
        return 1;
    wf_client_t *c = d.c;
    fwdio_t *flux = &d.flux, *wan = &d.wan;
    CHECK(flux->ref.dtype == WF_DTYPE_F32 && wan->ref.dtype == WF_DTYPE_F32 &&
          flux->ref.shape[0] == 2 && wan->ref.shape[0] == 2, "fixtures: f32 references, B 2");
    CHECK(wf_client_has_feature(c, "split_batch"), "the daemon announces split_batch");

    static const int rows3[] = { 0, 1, 0 };
    fwdio_t flux3, wan3;
    CHECK(fwdio_gather(flux, rows3, 3, &flux3) && fwdio_gather(wan, rows3, 3, &wan3),
          "batches of 3");
    static const wf_mesh_degrees_t meshes[] = {
        { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 },
        { .dp = 2, .ring = 2, .ulysses = 1, .tp = 1 },
        { .dp = 2, .ring = 1, .ulysses = 1, .tp = 2 },
        { .dp = 4, .ring = 1, .ulysses = 1, .tp = 1 },
        { .dp = 1, .ring = 2, .ulysses = 2, .tp = 1 },
    };
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        const wf_mesh_degrees_t *m = &meshes[i];
        if (i > 0) {
            wf_status_t rs = wf_reconfigure(c, m, NULL);
            CHECK(rs == WF_OK, "reconfigure dp %u ring %u ulysses %u tp %u: %s %s", m->dp,
                  m->ring, m->ulysses, m->tp, wf_status_name(rs), wf_client_last_error(c));
            if (rs != WF_OK)
                continue;
        }
        bool count = m->dp == 2 && m->ulysses == 2;
        both(c, flux, m, count);
        both(c, wan, m, count);
        both(c, &flux3, m, false);
        both(c, &wan3, m, false);
    }
    fwdio_free_gathered(&flux3);
    fwdio_free_gathered(&wan3);
    fwdd_stop(&d);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
