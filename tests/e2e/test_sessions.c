/* test_sessions.c — end to end: denoising sessions and the first-block
 * cache in a real weftd.
 *
 * usage: test_sessions PATH_TO_WEFTD FIXTURES_DIR
 *
 * One weftd on cpu:4 (the fixtures directory as its model root,
 * --session-max 3, --session-idle-ms 400) loads flux-tiny and wan-tiny.
 * On dp 2 x ulysses 2, ring 2 x ulysses 2, tp 2 x ring 2 and dp 4, for
 * each model (its fixture's inputs, B = 2):
 *   - threshold 0: three steps of a session, each output bit-identical to
 *     a forward without a session, each "computed";
 *   - threshold 1e9: step 0 computed; step 1 on the same inputs reused
 *     (the head block's residual has not changed: change 0), its output
 *     the computed one's within 1e-6 of max |ref| (head output + the held
 *     residual of the blocks after it, against the blocks run); step 2 on
 *     another timestep reused too (change > 0 under the threshold) and
 *     finite, not equal to step 1's; a step index not above the last (0
 *     again) starts the session over: computed; end_session says 4 steps,
 *     2 reused, and a second end_session is refused (no such session);
 *   - threshold 1e-12 on the changed timestep: computed (the change is
 *     above it).
 * Then: a session's step computed, a reconfiguration (its state dropped),
 * its next step on the same inputs computed again, the one after reused;
 * session_max: a fourth open session refused with WF_E_LIMIT, and once
 * the three are idle past session_idle_ms a new one opens (waited for by
 * polling that forward, bounded by 40 x session_idle_ms); the metrics of
 * the cache in status (counters) are not there: the reply and
 * end_session's counts are the record. The daemon exits 0 on SIGTERM.
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

#define IDLE_MS 400
/* A reused step on unchanged inputs against the computed one, of max |ref|. */
#define REUSE_TOLERANCE 1e-6

static uint64_t next_session = 100;

/* One step of session `sess` (0: none) into *out; its cache use. */
static wf_status_t step(wf_client_t *c, const fwdio_t *io, uint64_t sess, uint64_t k,
                        double threshold, wf_tensor_t *out, uint32_t *cache)
{
    wf_forward_opts_t o = { .session = sess, .step = sess ? k : 0,
                            .cache_threshold = sess ? threshold : 0 };
    wf_job_result_t r;
    memset(&r, 0, sizeof r);
    wf_status_t st = fwdio_forward(c, io, &o, out, &r);
    *cache = r.cache;
    return st;
}

static const char *use_name(uint32_t u)
{
    return u == WF_CACHE_REUSED ? "reused" : u == WF_CACHE_COMPUTED ? "computed" : "none";
}

/* The checks of the header's first part for one model on the mesh in force. */
static void cache_cases(wf_client_t *c, const fwdio_t *io, const fwdio_t *later,
                        const char *mesh)
{
    int64_t n = wf_tensor_numel(&io->ref);
    double rmax = fwdio_max_abs(&io->ref);
    wf_tensor_t plain, o[4];
    uint32_t u[4];
    wf_status_t st = step(c, io, 0, 0, 0, &plain, &u[0]);
    CHECK(st == WF_OK && u[0] == WF_CACHE_NONE && fwdio_diff(plain.data, io->ref.data, n,
                                                              rmax) <= io->tol,
          "%s %s: forward without a session: %s %s", io->model, mesh, wf_status_name(st),
          use_name(u[0]));
    /* threshold 0: every step computed, bit-identical */
    uint64_t s0 = next_session++;
    for (int k = 0; k < 3; k++) {
        st = step(c, io, s0, (uint64_t)k, 0, &o[0], &u[0]);
        CHECK(st == WF_OK && u[0] == WF_CACHE_COMPUTED &&
              memcmp(o[0].data, plain.data, (size_t)n * sizeof(float)) == 0,
              "%s %s: threshold 0 step %d: %s %s, bit-identical %d", io->model, mesh, k,
              wf_status_name(st), use_name(u[0]),
              st == WF_OK && memcmp(o[0].data, plain.data, (size_t)n * sizeof(float)) == 0);
        free(o[0].data);
    }
    CHECK(wf_end_session(c, s0, NULL, NULL) == WF_OK, "end the threshold-0 session");

    /* a huge threshold: everything after step 0 reused */
    uint64_t s1 = next_session++;
    wf_status_t s[4];
    s[0] = step(c, io, s1, 0, 1e9, &o[0], &u[0]);
    s[1] = step(c, io, s1, 1, 1e9, &o[1], &u[1]);
    s[2] = step(c, later, s1, 2, 1e9, &o[2], &u[2]);
    s[3] = step(c, io, s1, 0, 1e9, &o[3], &u[3]);
    bool ok = s[0] == WF_OK && s[1] == WF_OK && s[2] == WF_OK && s[3] == WF_OK;
    CHECK(ok, "%s %s: the steps: %s %s %s %s (%s)", io->model, mesh, wf_status_name(s[0]),
          wf_status_name(s[1]), wf_status_name(s[2]), wf_status_name(s[3]),
          wf_client_last_error(c));
    if (ok) {
        double e1 = fwdio_diff(o[1].data, o[0].data, n, rmax);
        double e2 = fwdio_diff(o[2].data, o[1].data, n, rmax);
        double e3 = fwdio_diff(o[3].data, plain.data, n, rmax);
        CHECK(u[0] == WF_CACHE_COMPUTED && u[1] == WF_CACHE_REUSED &&
              u[2] == WF_CACHE_REUSED && u[3] == WF_CACHE_COMPUTED,
              "%s %s: cache use %s %s %s %s", io->model, mesh, use_name(u[0]),
              use_name(u[1]), use_name(u[2]), use_name(u[3]));
        CHECK(e1 <= REUSE_TOLERANCE, "%s %s: reused on the same inputs vs computed %.3g",
              io->model, mesh, e1);
        CHECK(isfinite(e2) && e2 > 0, "%s %s: reused on another timestep vs step 1: %.3g",
              io->model, mesh, e2);
        CHECK(e3 == 0, "%s %s: the session started over: %.3g", io->model, mesh, e3);
        printf("%-4s %-22s steps: %s %s %s %s; reused vs computed %.3g, another "
               "timestep moved it %.3g\n", io->model, mesh, use_name(u[0]), use_name(u[1]),
               use_name(u[2]), use_name(u[3]), e1, e2);
    }
    for (int k = 0; k < 4; k++)
        if (s[k] == WF_OK)
            free(o[k].data);
    uint64_t steps = 0, reused = 0;
    CHECK(wf_end_session(c, s1, &steps, &reused) == WF_OK && steps == 4 && reused == 2,
          "%s %s: end_session: %llu steps, %llu reused", io->model, mesh,
          (unsigned long long)steps, (unsigned long long)reused);
    wf_status_t es = wf_end_session(c, s1, NULL, NULL);
    CHECK(es == WF_E_BAD_ARGUMENT && strstr(wf_client_last_error(c), "no session"),
          "a second end_session: %s %s", wf_status_name(es), wf_client_last_error(c));

    /* a tiny threshold: a changed timestep is computed */
    uint64_t s2 = next_session++;
    s[0] = step(c, io, s2, 0, 1e-12, &o[0], &u[0]);
    s[1] = step(c, later, s2, 1, 1e-12, &o[1], &u[1]);
    CHECK(s[0] == WF_OK && s[1] == WF_OK && u[1] == WF_CACHE_COMPUTED,
          "%s %s: threshold 1e-12 on another timestep: %s", io->model, mesh, use_name(u[1]));
    for (int k = 0; k < 2; k++)
        if (s[k] == WF_OK)
            free(o[k].data);
    CHECK(wf_end_session(c, s2, NULL, NULL) == WF_OK, "end the 1e-12 session");
    free(plain.data);
}

/* A forward opening a new session succeeds (the idle ones were reaped). */
typedef struct open_arg {
    wf_client_t *c;
    const fwdio_t *io;
    uint64_t sess;
} open_arg_t;

static bool opens(void *arg)
{
    open_arg_t *a = arg;
    wf_tensor_t o;
    uint32_t u;
    wf_status_t st = step(a->c, a->io, a->sess, 0, 0, &o, &u);
    if (st == WF_OK)
        free(o.data);
    return st == WF_OK;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    block_test_signals();
    char idle[16];
    snprintf(idle, sizeof idle, "%d", IDLE_MS);
    const char *extra[] = { "--session-max", "3", "--session-idle-ms", idle, NULL };
    static fwdd_t dd;
    if (!fwdd_start(&dd, argv[1], argv[2], "dp=2,ulysses=2", extra))
        return 1;
    wf_client_t *c = dd.c;
    fwdio_t flux = dd.flux, wan = dd.wan;
    /* the same inputs at other timesteps (a later denoising step) */
    fwdio_t flux_later = flux, wan_later = wan;
    static float tf[8], tw[8];
    for (uint32_t i = 0; i < flux.n; i++)
        if (strcmp(flux.name[i], "timestep") == 0 && flux.in[i].dtype == WF_DTYPE_F32 &&
            flux.in[i].shape[0] <= 8) {
            memcpy(tf, flux.in[i].data, (size_t)flux.in[i].shape[0] * sizeof(float));
            for (int64_t b = 0; b < flux.in[i].shape[0]; b++)
                tf[b] *= 0.9f;
            flux_later.in[i].data = tf;
        }
    for (uint32_t i = 0; i < wan.n; i++)
        if (strcmp(wan.name[i], "timestep") == 0 && wan.in[i].dtype == WF_DTYPE_F32 &&
            wan.in[i].shape[0] <= 8) {
            memcpy(tw, wan.in[i].data, (size_t)wan.in[i].shape[0] * sizeof(float));
            for (int64_t b = 0; b < wan.in[i].shape[0]; b++)
                tw[b] *= 0.9f;
            wan_later.in[i].data = tw;
        }
    CHECK(flux_later.in[3].data == tf && wan_later.in[1].data == tw,
          "the fixtures' timesteps are f32 (B) as expected");
    CHECK(wf_client_has_feature(c, "sessions"), "the daemon announces sessions");

    static const wf_mesh_degrees_t meshes[] = {
        { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 },
        { .dp = 1, .ring = 2, .ulysses = 2, .tp = 1 },
        { .dp = 1, .ring = 2, .ulysses = 1, .tp = 2 },
        { .dp = 4, .ring = 1, .ulysses = 1, .tp = 1 },
    };
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        const wf_mesh_degrees_t *m = &meshes[i];
        char name[64];
        snprintf(name, sizeof name, "dp %u ring %u ulysses %u tp %u", m->dp, m->ring,
                 m->ulysses, m->tp);
        if (i > 0) {
            wf_status_t rs = wf_reconfigure(c, m, NULL);
            CHECK(rs == WF_OK, "reconfigure to %s: %s %s", name, wf_status_name(rs),
                  wf_client_last_error(c));
            if (rs != WF_OK)
                continue;
        }
        cache_cases(c, &flux, &flux_later, name);
        cache_cases(c, &wan, &wan_later, name);
    }

    /* a reconfiguration drops the states */
    {
        uint64_t s = next_session++;
        wf_tensor_t o;
        uint32_t u[3];
        wf_status_t a = step(c, &flux, s, 0, 1e9, &o, &u[0]);
        if (a == WF_OK)
            free(o.data);
        wf_mesh_degrees_t back = { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 };
        CHECK(wf_reconfigure(c, &back, NULL) == WF_OK, "reconfigure with a session open");
        wf_status_t b = step(c, &flux, s, 1, 1e9, &o, &u[1]);
        if (b == WF_OK)
            free(o.data);
        wf_status_t d = step(c, &flux, s, 2, 1e9, &o, &u[2]);
        if (d == WF_OK)
            free(o.data);
        CHECK(a == WF_OK && b == WF_OK && d == WF_OK && u[0] == WF_CACHE_COMPUTED &&
              u[1] == WF_CACHE_COMPUTED && u[2] == WF_CACHE_REUSED,
              "across a reconfiguration: %s %s %s", use_name(u[0]), use_name(u[1]),
              use_name(u[2]));
        printf("across a reconfiguration: %s, then %s, %s\n", use_name(u[0]), use_name(u[1]),
               use_name(u[2]));
        CHECK(wf_end_session(c, s, NULL, NULL) == WF_OK, "end it");
    }

    /* session_max 3: a fourth is refused until the three idle out */
    {
        wf_tensor_t o;
        uint32_t u;
        for (int k = 0; k < 3; k++) {
            wf_status_t st = step(c, &wan, next_session++, 0, 0, &o, &u);
            CHECK(st == WF_OK, "session %d of 3: %s", k, wf_status_name(st));
            if (st == WF_OK)
                free(o.data);
        }
        wf_status_t st = step(c, &wan, next_session, 0, 0, &o, &u);
        CHECK(st == WF_E_LIMIT && strstr(wf_client_last_error(c), "session_max"),
              "a fourth session: %s %s", wf_status_name(st), wf_client_last_error(c));
        if (st == WF_OK)
            free(o.data);
        uint64_t t0 = wait_now_ms();
        open_arg_t oa = { c, &wan, next_session++ };
        CHECK(wait_for(opens, &oa, 40 * IDLE_MS), "a new session after the idle ones "
              "went (session_idle_ms %d)", IDLE_MS);
        printf("session_max 3: the fourth refused, opened %llu ms later (session_idle_ms "
               "%d)\n", (unsigned long long)(wait_now_ms() - t0), IDLE_MS);
    }

    fwdd_stop(&dd);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
