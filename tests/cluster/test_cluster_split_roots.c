/* test_cluster_split_roots.c — dp replicas that span nodes, with their
 * roots on a member (the tensor channel, PROTOCOL.md section 11): three
 * real weftd processes (cpu:2 each) on loopback, world mesh dp=2 x
 * ring=3, so replica 0 = ranks 0..2 (a, a, b; root on a) and replica 1 =
 * ranks 3..5 (b, c, c; root on b). Node b runs with a smaller
 * max_tensor_bytes (32 KiB) than the coordinator. Every wait is an event
 * wait with a deadline (pidfd, the sd_notify socket, the client's reply).
 *
 *  1. a (coordinator, --mesh dp=2,ring=3), b, c: "cluster serving: epoch
 *     1, 3 node(s), 6 rank(s)".
 *  2. 24 jobs in flight from 2 connections (inputs within b's limit),
 *     each correct against the fp64 reference, devices = 3; c's devices
 *     (only in replica 1, rooted on b) served.
 *  3. twice, a job whose inputs fit the coordinator's limit but not b's
 *     (q of 48 KiB: the channel still carries it; then 96 KiB: over b's
 *     channel message limit, so it never comes), submitted one at a time
 *     until one lands on replica 1: that one fails with WF_E_INTERNAL
 *     naming b (b's root step fails inside the world, PROTOCOL.md section
 *     11, instead of b's and c's ranks waiting for inputs that never come:
 *     such a job would end only at the daemons' job_timeout_ms, far past
 *     this test's waits); the world is rebuilt with the same nodes (next
 *     epoch, 3 nodes, 6 ranks) and a burst on it is correct.
 *  4. SIGTERM stops every daemon cleanly (exit 0).
 *
 * Usage: test_cluster_split_roots PATH_TO_WEFTD.
 */
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
#define IN_FLIGHT 24
#define CLIENTS 2

typedef clusterd_node_t node_t;
static char coordinator[64];

static bool node_start(node_t *d, const char *weftd, const char *name, int addr,
                       const char *max_tensor_bytes)
{
    char data_addr[32];
    snprintf(data_addr, sizeof data_addr, "127.0.0.%d", addr);
    clusterd_opts_t o = { .name = name, .tag = "cs", .coordinator = coordinator,
                          .mesh = "dp=2,ring=3", .data_address = data_addr,
                          .cluster_timeout_ms = 5000, .heartbeat_ms = 200,
                          .heartbeat_timeout_ms = 1000,
                          .max_tensor_bytes = max_tensor_bytes,
                          .log_env = "CS_LOG_LEVEL" };
    return clusterd_node_start(d, weftd, &o);
}

#include "support/jcase_names.h"

/* ring = 3: sequence lengths divisible by 3 (by 6 with load balance);
 * every tensor within b's 32 KiB */
static const jcase_t cases[] = {
    /* name                  B   Sq  Skv Hq Hkv D  in    out   causal lse  scale rot  fp32 ring_any uly_any lb */
    { "f32 48",              1, 48, 48, 4,  4,  16, F32,  F32,  0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f32 96 causal lb",    1, 96, 96, 2,  2,  32, F32,  F32,  1, true,  0,    A2A, ON,  DEF, DEF, ON },
    { "f16 72 GQA",          1, 72, 72, 8,  2,  16, F16,  F16,  0, false, 0,    AG,  DEF, DEF, DEF, DEF },
    { "bf16 60 causal lb",   1, 60, 60, 6,  6,  16, BF16, BF16, 1, true,  0,    A2A, OFF, DEF, DEF, ON },
    { "f16 in f32 out 48",   1, 48, 48, 2,  2,  64, F16,  F32,  0, true,  0.2f, AG,  DEF, DEF, DEF, DEF },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* The smallest jobs_served of d's devices, from d's own status. */
static uint64_t min_served(node_t *d)
{
    wf_status_info_t si;
    uint64_t min = UINT64_MAX;
    if (!clusterd_status(&d->p, &si) || si.device_count == 0)
        return 0;
    for (uint32_t i = 0; i < si.device_count; i++)
        if (si.devices[i].jobs_served < min)
            min = si.devices[i].jobs_served;
    return min;
}

/* One job of case c, checked; true when correct. */
static bool check_result(const char *label, int i, const jbuf_t *b, wf_job_t *job,
                         wf_status_t st, uint64_t epoch, uint32_t devices)
{
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    wf_job_result(job, &res);
    if (st != WF_OK || res.status != WF_OK) {
        fprintf(stderr, "%s: job %d (%s): %s: %s\n", label, i, b->c.name,
                wf_status_name(res.status), wf_job_error(job));
        return false;
    }
    double eo, el, to, tl;
    jbuf_errors(b, &eo, &el);
    jcase_tolerances(&b->c, true, &to, &tl);
    bool good = eo <= to && (!b->c.want_lse || el <= tl) && res.devices == devices &&
                res.epoch == epoch;
    if (!good)
        fprintf(stderr, "%s: job %d (%s): out err %.2e (tol %.0e), lse err %.2e, "
                "devices %u, epoch %llu (want %llu)\n", label, i, b->c.name, eo,
                to, el, res.devices, (unsigned long long)res.epoch,
                (unsigned long long)epoch);
    return good;
}

/* IN_FLIGHT jobs over CLIENTS connections, all submitted before any wait;
 * returns the jobs correct. */
static unsigned burst(wf_client_t *cl[CLIENTS], uint64_t epoch, uint64_t seed,
                      const char *label)
{
    static jbuf_t buf[IN_FLIGHT];
    wf_job_t *job[IN_FLIGHT];
    unsigned ok = 0;
    double t0 = now_s();
    for (int i = 0; i < IN_FLIGHT; i++) {
        job[i] = NULL;
        if (!jbuf_init(&buf[i], &cases[(size_t)i % N_CASES], seed + (uint64_t)i))
            continue;
        wf_attention_opts_t o = opts_of(&buf[i].c);
        if (wf_attention_submit(cl[i % CLIENTS], &buf[i].q, &buf[i].k, &buf[i].v,
                                &o, &buf[i].out, buf[i].lse, &job[i]) != WF_OK)
            job[i] = NULL;
    }
    for (int i = 0; i < IN_FLIGHT; i++) {
        if (job[i]) {
            wf_status_t st = wf_job_wait(cl[i % CLIENTS], job[i], TIMEOUT_MS);
            ok += check_result(label, i, &buf[i], job[i], st, epoch, 3);
            wf_job_destroy(cl[i % CLIENTS], &job[i]);
        } else {
            fprintf(stderr, "%s: job %d not submitted\n", label, i);
        }
        jbuf_free(&buf[i]);
    }
    printf("%s: %u/%d jobs correct in %.0f ms\n", label, ok, IN_FLIGHT,
           (now_s() - t0) * 1e3);
    return ok;
}

/* Jobs of case big one at a time until one fails (at most 4: the
 * replicas take turns); true when one failed with WF_E_INTERNAL naming
 * node b. */
static bool over_b_limit(wf_client_t *cl, const jcase_t *big, uint64_t epoch,
                         uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        jbuf_t x;
        wf_job_t *job = NULL;
        if (!jbuf_init(&x, big, seed + (uint64_t)i))
            return false;
        wf_attention_opts_t o = opts_of(big);
        int64_t t0 = clusterd_now_ms();
        if (wf_attention_submit(cl, &x.q, &x.k, &x.v, &o, &x.out, x.lse, &job) != WF_OK) {
            jbuf_free(&x);
            return false;
        }
        wf_status_t st = wf_job_wait(cl, job, TIMEOUT_MS);
        int64_t t = clusterd_now_ms() - t0;
        wf_job_result_t res;
        memset(&res, 0, sizeof res);
        wf_job_result(job, &res);
        printf("  %s #%d: %s after %lld ms %s\n", big->name, i,
               wf_status_name(res.status), (long long)t, wf_job_error(job));
        bool job_failed = st != WF_OK || res.status != WF_OK;
        bool good = job_failed ? res.status == WF_E_INTERNAL &&
                                 strstr(wf_job_error(job), "node b") != NULL
                           : check_result(big->name, i, &x, job, st, epoch, 3);
        wf_job_destroy(cl, &job);
        jbuf_free(&x);
        if (job_failed || !good)
            return job_failed && good;
    }
    fprintf(stderr, "%s: no job failed on replica 1\n", big->name);
    return false;
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
    CHECK(node_start(&a, weftd, "a", 1, "16777216"));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, weftd, "b", 2, "32768"));
    CHECK(node_start(&c, weftd, "c", 3, "16777216"));

    /* 1. one world, dp=2 x ring=3: both replicas span nodes */
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    wf_client_t *cl[CLIENTS] = { NULL, NULL };
    for (int i = 0; i < CLIENTS; i++)
        CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl[i]) == WF_OK);
    wf_status_info_t si;
    CHECK(clusterd_status(&a.p, &si));
    CHECK(si.mesh.dp == 2 && si.mesh.ring == 3);
    uint64_t epoch = si.epoch;

    /* 2. a burst: both replicas serve (c's ranks are only in replica 1) */
    CHECK(burst(cl, epoch, 100, "dp=2,ring=3") == IN_FLIGHT);
    uint64_t served_c = min_served(&c);
    printf("  node c: fewest jobs served by a device %llu\n",
           (unsigned long long)served_c);
    CHECK(served_c > 0);

    /* 3. inputs over b's limit on the replica rooted on b */
    static const jcase_t big[] = {
        { "f32 q 48 KiB",    1, 96, 96, 4, 4, 32, F32, F32, 0, true, 0, AG, DEF, DEF, DEF, DEF },
        { "f32 q 96 KiB",    1, 96, 96, 4, 4, 64, F32, F32, 0, true, 0, AG, DEF, DEF, DEF, DEF },
    };
    for (int k = 0; k < 2; k++) {
        CHECK(over_b_limit(cl[0], &big[k], epoch, 3000 + 10 * (uint64_t)k));
        char want[96];
        snprintf(want, sizeof want, "STATUS=cluster serving: epoch %d, 3 node(s), "
                 "6 rank(s)", k + 2);
        CHECK(clusterd_node_wait(&a, want, TIMEOUT_MS, NULL, 0));
        CHECK(clusterd_status(&a.p, &si));
        CHECK(si.mesh.dp == 2 && si.mesh.ring == 3 && si.epoch > epoch);
        epoch = si.epoch;
        uint64_t before = min_served(&c);
        CHECK(burst(cl, epoch, 200 + 100 * (uint64_t)k, "rebuilt dp=2,ring=3") ==
              IN_FLIGHT);
        uint64_t now = min_served(&c);
        printf("  node c: fewest jobs served by a device %llu (was %llu)\n",
               (unsigned long long)now, (unsigned long long)before);
        CHECK(burst(cl, epoch, 250 + 100 * (uint64_t)k, "rebuilt dp=2,ring=3") ==
              IN_FLIGHT);
        now = min_served(&c);
        printf("  node c: fewest jobs served by a device %llu (was %llu)\n",
               (unsigned long long)now, (unsigned long long)before);
        CHECK(now > before);
    }

    for (int i = 0; i < CLIENTS; i++)
        wf_client_destroy(&cl[i]);
    /* 4. clean stops: members first, then the coordinator */
    node_t *all[3] = { &c, &b, &a };
    for (int i = 0; i < 3; i++) {
        kill(all[i]->p.pid, SIGTERM);
        CHECK(clusterd_wait_exit(&all[i]->p, TIMEOUT_MS));
        CHECK(WIFEXITED(all[i]->p.exit_status) && WEXITSTATUS(all[i]->p.exit_status) == 0);
    }
    for (int i = 0; i < 3; i++)
        clusterd_node_close(all[i]);
    printf("test_cluster_split_roots: %s (%d failure(s)) in %.1f s\n",
           failed ? "FAILED" : "passed", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
