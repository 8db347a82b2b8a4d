/* test_cluster_replicas.c — dp replicas rooted on member nodes serve
 * context-parallel and head-split jobs (the tensor channel, PROTOCOL.md section 11): three
 * real weftd processes (cpu:2 each) on loopback (data planes on 127.0.0.1,
 * .2 and .3), world mesh dp=3 x ring=2, so replica r is node r's two
 * ranks and replicas 1 and 2 have their roots on the members. Every wait
 * is an event wait with a deadline (pidfd, the sd_notify socket, the
 * client's reply).
 *
 *  1. a (coordinator, --mesh dp=3,ring=2), b, c: "cluster serving: epoch
 *     1, 3 node(s), 6 rank(s)".
 *  2. 24 jobs in flight at once from 2 client connections (varied shapes,
 *     dtypes, options), each checked against the fp64 reference
 *     (tests/support/jobcheck), devices = 2, epoch = the mesh's; then
 *     every device of every node (each one's own status: the members'
 *     through their own endpoints) served jobs.
 *  3. the same under dp=3 x ulysses=2 (after a reconfigure): every
 *     device's count grew.
 *  3b. head-split jobs under dp=3 x tp=2 (ring = ulysses = 1): the same
 *     burst, each replica's two ranks (b's, c's: all on one member) read
 *     the inputs from the tensor channel and write their heads; every
 *     device's count grew. Then back to dp=3 x ulysses=2.
 *  4. member c killed (SIGKILL) while its replica holds a job rooted
 *     there: c restarted (the world degrades, then serves with 3 nodes)
 *     with its job parts held (the daemon's test hook
 *     WEFT_TEST_HOLD_JOBS); jobs submitted one at a time until one is held
 *     on c's devices (status; the replicas take turns, the others' jobs
 *     end WF_OK); c killed: the held job fails with WF_E_NODE_LOST naming
 *     c within heartbeat_timeout_ms and a stated margin; the world
 *     re-forms on a and b (degraded, dp=2 x ulysses=2, at a later world
 *     epoch) and a burst on it is correct with b's replica serving.
 *  5. c restarted: rejoins (serving, 3 nodes, a later epoch); a burst is
 *     correct and c's devices serve again.
 *  6. SIGTERM stops every daemon cleanly (exit 0; no leak under ASan).
 *
 * Usage: test_cluster_replicas PATH_TO_WEFTD.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify lines */
#define HB_TIMEOUT 1000                 /* heartbeat_timeout_ms */
#define IN_FLIGHT 24        /* jobs submitted before the first wait */
#define CLIENTS 2

typedef clusterd_node_t node_t;
static char coordinator[64];

/* Start a node; env: one "K=V" for its environment, or NULL. */
static bool node_start(node_t *d, const char *weftd, const char *name, int addr,
                       const char *env)
{
    char data_addr[32];
    snprintf(data_addr, sizeof data_addr, "127.0.0.%d", addr);
    clusterd_opts_t o = { .name = name, .tag = "cr", .coordinator = coordinator,
                          .mesh = "dp=3,ring=2", .data_address = data_addr,
                          .cluster_timeout_ms = 5000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = HB_TIMEOUT,
                          .log_env = "CR_LOG_LEVEL", .env = env };
    return clusterd_node_start(d, weftd, &o);
}

#include "support/jcase_names.h"

static const jcase_t cases[] = {
    /* name                  B   Sq  Skv Hq Hkv D  in    out   causal lse  scale rot  fp32 ring_any uly_any lb */
    { "f32 64",              1, 64, 64, 4,  4,  16, F32,  F32,  0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f32 96 causal lb",    1, 96, 96, 4,  2,  32, F32,  F32,  1, true,  0,    A2A, ON,  DEF, DEF, ON },
    { "f16 48 GQA",          2, 48, 48, 8,  2,  16, F16,  F16,  0, false, 0,    AG,  DEF, DEF, DEF, DEF },
    { "bf16 uneven 45/31",   1, 45, 31, 6,  6,  16, BF16, BF16, 1, true,  0,    A2A, OFF, ON,  ON,  ON },
    { "f16 in f32 out 40",   1, 40, 56, 2,  2,  64, F16,  F32,  0, true,  0.2f, AG,  DEF, DEF, DEF, DEF },
    { "f32 uneven heads 5",  1, 40, 40, 5,  5,  16, F32,  F32,  0, true,  0,    AG,  DEF, ON,  ON,  DEF },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* Wait for a STATUS= line "cluster STATE: epoch E, NODES" with any epoch
 * (a failed job's rebuild may come before a loss's, adding an epoch) and
 * E above `after`; lines of other states or counts are passed over. */
static bool wait_state(node_t *d, const char *state, const char *nodes,
                       uint64_t after, uint64_t *ret_epoch)
{
    char prefix[64], got[256];
    snprintf(prefix, sizeof prefix, "STATUS=cluster %s: epoch ", state);
    int64_t end = clusterd_now_ms() + TIMEOUT_MS;
    while (clusterd_now_ms() < end) {
        int left = (int)(end - clusterd_now_ms());
        if (!clusterd_node_wait(d, prefix, left > 0 ? left : 1, got, sizeof got))
            return false;
        unsigned long long e = strtoull(got + strlen(prefix), NULL, 10);
        if (e > after && strstr(got, nodes)) {
            *ret_epoch = e;
            return true;
        }
    }
    return false;
}

/* The smallest jobs_served of d's devices, from d's own status; the
 * first two devices' counts into per_device. */
static uint64_t min_served(node_t *d, uint64_t per_device[2])
{
    wf_status_info_t si;
    uint64_t min = UINT64_MAX;
    if (!clusterd_status(&d->p, &si) || si.device_count == 0)
        return 0;
    for (uint32_t i = 0; i < si.device_count; i++) {
        if (i < 2)
            per_device[i] = si.devices[i].jobs_served;
        if (si.devices[i].jobs_served < min)
            min = si.devices[i].jobs_served;
    }
    return min;
}

/* IN_FLIGHT jobs over CLIENTS connections, all submitted before any wait;
 * returns the jobs correct (on `devices` devices under mesh epoch
 * `epoch`). */
static unsigned burst(wf_client_t *cl[CLIENTS], uint64_t epoch, uint32_t devices,
                      uint64_t seed, const char *label)
{
    static jbuf_t buf[IN_FLIGHT];
    wf_job_t *job[IN_FLIGHT];
    unsigned ok = 0;
    double t0 = now_s();
    for (int i = 0; i < IN_FLIGHT; i++) {
        const jcase_t *c = &cases[(size_t)i % N_CASES];
        job[i] = NULL;
        if (!jbuf_init(&buf[i], c, seed + (uint64_t)i)) {
            CHECK(false);
            continue;
        }
        wf_attention_opts_t o = opts_of(c);
        wf_status_t st = wf_attention_submit(cl[i % CLIENTS], &buf[i].q, &buf[i].k,
                                             &buf[i].v, &o, &buf[i].out,
                                             buf[i].lse, &job[i]);
        if (st != WF_OK) {
            fprintf(stderr, "%s: submit %d: %s\n", label, i, wf_status_name(st));
            job[i] = NULL;
        }
    }
    double max_rel = 0;
    for (int i = 0; i < IN_FLIGHT; i++) {
        const jcase_t *c = &cases[(size_t)i % N_CASES];
        if (!job[i]) {
            CHECK(false);
            jbuf_free(&buf[i]);
            continue;
        }
        wf_status_t st = wf_job_wait(cl[i % CLIENTS], job[i], TIMEOUT_MS);
        wf_job_result_t res;
        memset(&res, 0, sizeof res);
        wf_job_result(job[i], &res);
        bool good = st == WF_OK && res.status == WF_OK;
        if (!good) {
            fprintf(stderr, "%s: job %d (%s): %s: %s\n", label, i, c->name,
                    wf_status_name(res.status), wf_job_error(job[i]));
        } else {
            double eo, el, to, tl;
            jbuf_errors(&buf[i], &eo, &el);
            jcase_tolerances(c, true, &to, &tl);
            good = eo <= to && (!c->want_lse || el <= tl) && res.devices == devices &&
                   res.epoch == epoch;
            if (eo / to > max_rel)
                max_rel = eo / to;
            if (!good)
                fprintf(stderr, "%s: job %d (%s): out err %.2e (tol %.0e), lse "
                        "err %.2e, devices %u, epoch %llu (want %llu)\n", label, i,
                        c->name, eo, to, el, res.devices,
                        (unsigned long long)res.epoch, (unsigned long long)epoch);
        }
        ok += good;
        wf_job_destroy(cl[i % CLIENTS], &job[i]);
        jbuf_free(&buf[i]);
    }
    printf("%s: %u/%d jobs correct in %.0f ms (worst out error %.2f of its "
           "tolerance)\n", label, ok, IN_FLIGHT, (now_s() - t0) * 1e3, max_rel);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *weftd = argv[1];
    double t_begin = now_s();
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", test_port());
    node_t a, b, c;
    CHECK(node_start(&a, weftd, "a", 1, NULL));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, weftd, "b", 2, NULL));
    CHECK(node_start(&c, weftd, "c", 3, NULL));

    /* 1. one world, dp=3 x ring=2: one replica per node */
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    wf_client_t *cl[CLIENTS] = { NULL, NULL };
    for (int i = 0; i < CLIENTS; i++)
        CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl[i]) == WF_OK);
    wf_status_info_t si;
    CHECK(clusterd_status(&a.p, &si));
    CHECK(si.mesh.dp == 3 && si.mesh.ring == 2);
    uint64_t epoch = si.epoch;

    /* 2. every replica serves */
    node_t *nodes[3] = { &a, &b, &c };
    uint64_t before[3][2], after[3][2];
    CHECK(burst(cl, epoch, 2, 100, "dp=3,ring=2") == IN_FLIGHT);
    for (int n = 0; n < 3; n++) {
        uint64_t m = min_served(nodes[n], after[n]);
        printf("  node %s: jobs served per device %llu, %llu\n", nodes[n]->p.name,
               (unsigned long long)after[n][0], (unsigned long long)after[n][1]);
        CHECK(m > 0);
        memcpy(before[n], after[n], sizeof before[n]);
    }

    /* 3. the same under Ulysses */
    wf_mesh_degrees_t uly = { 3, 1, 2, 1 };
    uint64_t e = 0;
    CHECK(wf_reconfigure(cl[0], &uly, &e) == WF_OK && e == epoch + 1);
    epoch = e;
    CHECK(burst(cl, epoch, 2, 900, "dp=3,ulysses=2") == IN_FLIGHT);
    for (int n = 0; n < 3; n++) {
        min_served(nodes[n], after[n]);
        printf("  node %s: jobs served per device %llu, %llu\n", nodes[n]->p.name,
               (unsigned long long)after[n][0], (unsigned long long)after[n][1]);
        CHECK(after[n][0] > before[n][0] && after[n][1] > before[n][1]);
    }

    /* 3b. head-split jobs (dp=3 x tp=2: ring = ulysses = 1): replicas 1
     * and 2 are all on b and c, whose ranks run them (the inputs and
     * outputs on the tensor channel); then back to Ulysses */
    {
        wf_mesh_degrees_t hs = { 3, 1, 1, 2 };
        CHECK(wf_reconfigure(cl[0], &hs, &e) == WF_OK && e == epoch + 1);
        epoch = e;
        for (int n = 0; n < 3; n++)
            min_served(nodes[n], before[n]);
        CHECK(burst(cl, epoch, 2, 1700, "dp=3,tp=2 head split") == IN_FLIGHT);
        for (int n = 0; n < 3; n++) {
            min_served(nodes[n], after[n]);
            printf("  node %s: jobs served per device %llu, %llu\n", nodes[n]->p.name,
                   (unsigned long long)after[n][0], (unsigned long long)after[n][1]);
            CHECK(after[n][0] > before[n][0] && after[n][1] > before[n][1]);
        }
        CHECK(wf_reconfigure(cl[0], &uly, &e) == WF_OK && e == epoch + 1);
        epoch = e;
    }

    uint64_t world_epoch = 1;   /* of the last world seen forming */

    /* 4. c killed while its replica holds a job: c restarted with its job
     * parts held, so the job rooted there cannot end before the kill */
    {
        clusterd_hold_t hold;
        CHECK(clusterd_hold_open(&hold, "cr"));
        clusterd_node_close(&c);
        CHECK(wait_state(&a, "degraded", ", 2 node(s), 4 rank(s)", world_epoch,
                         &world_epoch));
        CHECK(node_start(&c, weftd, "c", 3, hold.env));
        CHECK(wait_state(&a, "serving", ", 3 node(s), 6 rank(s)", world_epoch,
                         &world_epoch));
        CHECK(clusterd_status(&a.p, &si));
        CHECK(si.mesh.dp == 3 && si.mesh.ulysses == 2);
        epoch = si.epoch;
        clusterd_kill_held_job(&c.p, cl[0], &cases[0], "node(s) c lost",
                                           clusterd_loss_bound_ms(HB_TIMEOUT));
        clusterd_hold_close(&hold);
        CHECK(wait_state(&a, "degraded", ", 2 node(s), 4 rank(s)", world_epoch,
                         &world_epoch));
        CHECK(clusterd_status(&a.p, &si));
        CHECK(si.mesh.dp == 2 && si.mesh.ulysses == 2 && si.epoch > epoch);
        epoch = si.epoch;
        uint64_t pb[2];
        min_served(&b, pb);
        CHECK(burst(cl, epoch, 2, 5000, "degraded dp=2,ulysses=2") == IN_FLIGHT);
        min_served(&b, after[1]);
        printf("  node b: jobs served per device %llu, %llu\n",
               (unsigned long long)after[1][0], (unsigned long long)after[1][1]);
        CHECK(after[1][0] > pb[0] && after[1][1] > pb[1]);
    }

    /* 5. c back: its replica serves again */
    {
        clusterd_node_close(&c);
        CHECK(node_start(&c, weftd, "c", 3, NULL));
        CHECK(wait_state(&a, "serving", ", 3 node(s), 6 rank(s)", world_epoch,
                         &world_epoch));
        CHECK(clusterd_status(&a.p, &si));
        CHECK(si.mesh.dp == 3 && si.epoch > epoch);
        epoch = si.epoch;
        CHECK(burst(cl, epoch, 2, 6000, "rejoined dp=3,ulysses=2") == IN_FLIGHT);
        uint64_t m = min_served(&c, after[2]);
        printf("  node c: jobs served per device %llu, %llu\n",
               (unsigned long long)after[2][0], (unsigned long long)after[2][1]);
        CHECK(m > 0);
    }

    for (int i = 0; i < CLIENTS; i++)
        wf_client_destroy(&cl[i]);
    /* 6. clean stops: members first, then the coordinator */
    node_t *all[3] = { &c, &b, &a };
    for (int i = 0; i < 3; i++) {
        kill(all[i]->p.pid, SIGTERM);
        CHECK(clusterd_wait_exit(&all[i]->p, TIMEOUT_MS));
        CHECK(WIFEXITED(all[i]->p.exit_status) && WEXITSTATUS(all[i]->p.exit_status) == 0);
        if (!WIFEXITED(all[i]->p.exit_status) || WEXITSTATUS(all[i]->p.exit_status) != 0)
            fprintf(stderr, "%s: exit status 0x%x\n", all[i]->p.name,
                    all[i]->p.exit_status);
    }
    for (int i = 0; i < 3; i++)
        clusterd_node_close(all[i]);
    printf("test_cluster_replicas: %s (%d failure(s)) in %.1f s\n",
           failed ? "FAILED" : "passed", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
