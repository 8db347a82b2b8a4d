/* test_numerics.c — end to end: non-finite inputs and extreme scales
 * through a real weftd (argv[1], cpu:2 on a private ipc endpoint) over
 * libweft, on a ring = 2 mesh (partial results merged by lse across the
 * ring) and a ulysses = 2 mesh (heads over the all-to-all).
 *
 * Each job's out and lse are compared with the fp64 reference
 * (kernels/reference.h) on the same inputs: where the reference is NaN
 * the daemon must answer NaN, where it is +-inf the same inf, where it is
 * finite within 1e-4 (out, absolute; lse relative to max(1, |lse|)); the
 * cases also check that they mean what they say (the reference has NaN
 * rows and finite rows where the case puts them). Cases: a NaN in q (one
 * row), a NaN in k (causal: the rows that see the key), a NaN in v (one
 * column of those rows), +-inf in v (that column +-inf in the rows that
 * see the key, ring merges included), +inf in q, the first half of the
 * keys -inf for every row (one ring rank's partial is all -inf: it must
 * give way to the other's), every key -inf (out NaN, lse -inf), scale 2^64 (the
 * bound: a hard maximum) and 1e-38 (a mean), and scale 3e38, refused
 * with WF_E_BAD_ARGUMENT naming the bound. The daemon serves a clean job
 * after them all and exits 0 on SIGTERM.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reference.h"
#include "support/jobcheck.h"
#include "weft.h"
#include "support/check.h"


enum { B = 1, S = 32, H = 2, D = 16, NQ = B * S * H * D, NL = B * S * H };

typedef struct job {
    float q[NQ], k[NQ], v[NQ], out[NQ], lse[NL];
    double ro[NQ], rl[NL];
} job_t;

static wf_tensor_t tensor_of(float *x)
{
    return (wf_tensor_t){ .data = x, .dtype = WF_DTYPE_F32, .rank = 4,
                          .shape = { B, S, H, D } };
}

static void fill(job_t *j, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < NQ; i++) {
        j->q[i] = rng_uniform(&s);
        j->k[i] = rng_uniform(&s);
        j->v[i] = rng_uniform(&s);
    }
}

/* Run j on the daemon and compare with the reference. Returns the
 * reference's NaN rows (any NaN in out) through *nan_rows and its
 * all-finite rows through *fin_rows; WF_OK or the job's status. */
static wf_status_t run(wf_client_t *c, const char *mesh, const char *name, job_t *j,
                       float scale, int causal, int *nan_rows, int *fin_rows)
{
    wf_tensor_t q = tensor_of(j->q), k = tensor_of(j->k), v = tensor_of(j->v),
                o = tensor_of(j->out);
    for (int i = 0; i < NQ; i++)
        j->out[i] = 12345.0f;
    wf_attention_opts_t opts = { .scale = scale, .causal = causal };
    wf_job_result_t r;
    wf_status_t st = wf_attention(c, &q, &k, &v, &opts, &o, j->lse, &r);
    if (st != WF_OK)
        return st;
    const wf_ref_attn_t ra = { .B = B, .Sq = S, .Skv = S, .Hq = H, .Hkv = H, .D = D,
                               .scale = scale > 0 ? (double)scale : 1.0 / sqrt((double)D),
                               .causal = causal };
    CHECK(wf_ref_attention(&ra, j->q, j->k, j->v, j->ro, j->rl) == WF_OK, "reference");
    int bad = 0, nr = 0, fr = 0;
    for (int row = 0; row < NL; row++) {
        bool any_nan = false, all_fin = true;
        for (int d = 0; d < D; d++) {
            double x = j->ro[row * D + d], g = j->out[row * D + d];
            any_nan |= isnan(x);
            all_fin &= isfinite(x) != 0;
            bool ok = isnan(x) ? isnan(g) != 0 : isinf(x) ? g == x : fabs(g - x) <= 1e-4;
            if (!ok && bad++ < 4)
                CHECK(false, "%s, %s: out[%d][%d] = %.9g, reference %.9g", mesh, name,
                      row / H, d, g, x);
        }
        nr += any_nan;
        fr += all_fin;
        double x = j->rl[row], g = j->lse[row];
        bool ok = isnan(x)   ? isnan(g) != 0
                  : isinf(x) ? g == x
                             : fabs(g - x) <= 1e-4 * (fabs(x) > 1 ? fabs(x) : 1);
        if (!ok && bad++ < 4)
            CHECK(false, "%s, %s: lse[%d] = %.9g, reference %.9g", mesh, name, row, g, x);
    }
    *nan_rows = nr;
    *fin_rows = fr;
    return WF_OK;
}

#define RUN_OK(name, scale, causal)                                                      \
    do {                                                                                 \
        st = run(c, mesh, (name), j, (scale), (causal), &nr, &fr);                       \
        CHECK(st == WF_OK, "%s, %s: %s %s", mesh, (name), wf_status_name(st),            \
              wf_client_last_error(c));                                                  \
    } while (0)

static void cases(wf_client_t *c, const char *mesh)
{
    job_t *j = malloc(sizeof *j);
    int nr = 0, fr = 0;
    wf_status_t st;

    /* NaN in q (row 5, head 1): that row NaN, the others exact */
    for (int causal = 0; causal < 2; causal++) {
        fill(j, 1);
        j->q[(5 * H + 1) * D + 3] = NAN;
        RUN_OK(causal ? "NaN in q, causal" : "NaN in q", 0, causal);
        CHECK(st != WF_OK || (nr == 1 && fr == NL - 1), "%s, NaN in q: %d NaN rows, %d finite",
              mesh, nr, fr);
    }
    /* NaN in k (key 20, head 0), causal: rows 20.. of head 0 NaN (a key
     * on the second sequence shard; rows before it must not see it) */
    fill(j, 2);
    j->k[(20 * H + 0) * D + 7] = NAN;
    RUN_OK("NaN in k, causal", 0, 1);
    CHECK(st != WF_OK || (nr == S - 20 && fr == NL - (S - 20)),
          "%s, NaN in k: %d NaN rows, %d finite", mesh, nr, fr);
    /* NaN in v (key 20, head 1, column 3), causal: column 3 of rows 20..
     * of head 1, lse finite */
    fill(j, 3);
    j->v[(20 * H + 1) * D + 3] = NAN;
    RUN_OK("NaN in v, causal", 0, 1);
    CHECK(st != WF_OK || (nr == S - 20 && fr == NL - (S - 20)),
          "%s, NaN in v: %d NaN rows, %d finite", mesh, nr, fr);
    /* +-inf in v, not causal and causal: +inf in column 2 of head 0 at
     * key 3 (the first ring shard), -inf in column 5 of head 1 at key 20
     * (the second), +inf in column 9 of head 0 at keys 4 and 24 (one in
     * each: two equal infinities merged). Every row that sees such a key
     * has that column +-inf, whatever the mesh (a ring merges a finite
     * partial with an infinite one), and no element is NaN */
    for (int causal = 0; causal < 2; causal++) {
        fill(j, 10);
        j->v[(3 * H + 0) * D + 2] = INFINITY;
        j->v[(20 * H + 1) * D + 5] = -INFINITY;
        j->v[(4 * H + 0) * D + 9] = INFINITY;
        j->v[(24 * H + 0) * D + 9] = INFINITY;
        RUN_OK(causal ? "+-inf in v, causal" : "+-inf in v", 0, causal);
        int infs = 0;
        for (int i = 0; i < NQ; i++)
            infs += isinf(j->ro[i]) != 0;
        const int want = causal ? (S - 3) + (S - 20) + (S - 4) : 3 * S;
        CHECK(st != WF_OK || (nr == 0 && infs == want),
              "%s, +-inf in v%s: %d NaN rows, %d infinite elements in the reference (want "
              "%d)", mesh, causal ? ", causal" : "", nr, infs, want);
    }
    /* +inf in q (row 9, head 0): +-inf scores, inf - inf: that row NaN */
    fill(j, 4);
    j->q[(9 * H + 0) * D + 1] = INFINITY;
    RUN_OK("+inf in q", 0, 0);
    CHECK(st != WF_OK || (nr == 1 && fr == NL - 1), "%s, +inf in q: %d NaN rows, %d finite",
          mesh, nr, fr);
    /* q[0] > 0 everywhere, k[j][0] = -inf for the first half of the keys:
     * their scores are -inf and weigh 0; the first ring rank's partial
     * sees only them (out NaN, lse -inf) and must give way: all finite */
    fill(j, 5);
    for (int i = 0; i < S * H; i++)
        j->q[i * D] = 0.5f + 0.5f * (float)(i % 2);
    for (int i = 0; i < S / 2 * H; i++)
        j->k[i * D] = -INFINITY;
    RUN_OK("-inf in the first half of k", 0, 0);
    CHECK(st != WF_OK || fr == NL, "%s, -inf half: %d finite rows of %d", mesh, fr, NL);
    /* every key -inf: weights sum to 0, out NaN, lse -inf */
    for (int i = 0; i < S * H; i++)
        j->k[i * D] = -INFINITY;
    RUN_OK("-inf in every k", 0, 0);
    CHECK(st != WF_OK || (nr == NL && isinf(j->rl[0]) && j->rl[0] < 0),
          "%s, -inf everywhere: %d NaN rows, reference lse %g", mesh, nr, j->rl[0]);
    /* scales: the bound 2^64 (a hard maximum: out = v of the best key)
     * and 1e-38 (a mean), causal and not */
    static const float scales[] = { 0x1p64f, 1e-38f };
    for (int si = 0; si < 2; si++)
        for (int causal = 0; causal < 2; causal++) {
            char nm[48];
            snprintf(nm, sizeof nm, "scale %g%s", (double)scales[si], causal ? ", causal" : "");
            fill(j, 6 + (uint64_t)si);
            RUN_OK(nm, scales[si], causal);
            CHECK(st != WF_OK || fr == NL, "%s, %s: %d finite rows of %d", mesh, nm, fr, NL);
        }
    /* scale 3e38: refused with 9, the message naming the bound */
    fill(j, 8);
    st = run(c, mesh, "scale 3e38", j, 3e38f, 0, &nr, &fr);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(wf_client_last_error(c), "2^64") != NULL,
          "%s, scale 3e38: %s (%s), want WF_E_BAD_ARGUMENT naming 2^64", mesh,
          wf_status_name(st), wf_client_last_error(c));
    /* and a clean job after all of them */
    fill(j, 9);
    RUN_OK("clean job", 0, 1);
    CHECK(st != WF_OK || fr == NL, "%s, clean job: %d finite rows", mesh, fr);
    free(j);
}

static void one_mesh(const char *weftd, const char *mesh)
{
    char path[80], endpoint[96];
    snprintf(path, sizeof path, "/tmp/weft-num-%d.sock", (int)getpid());
    snprintf(endpoint, sizeof endpoint, "ipc://%s", path);
    unlink(path);
    const char *argv[] = { weftd, "--devices", "cpu:2", "--mesh", mesh, "--listen", endpoint,
                           "--log-level", "warning", NULL };
    pid_t pid = spawn_daemon(argv, NULL);
    if (pid < 0 || !wait_ready(endpoint)) {
        CHECK(false, "%s: weftd did not start", mesh);
        if (pid > 0)
            stop_daemon(pid, 5000, NULL, 0);
        return;
    }
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, 20000, &c) != WF_OK) {
        CHECK(false, "%s: connect failed", mesh);
    } else {
        cases(c, mesh);
        wf_client_destroy(&c);
    }
    char err[256] = "";
    CHECK(stop_daemon(pid, 20000, err, sizeof err), "%s: weftd stop: %s", mesh, err);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    one_mesh(argv[1], "ring=2");
    one_mesh(argv[1], "ulysses=2");
    printf("test_numerics: %d failed\n", failed);
    return failed ? 1 : 0;
}
