/* test_cluster_fault.c — a cluster recovers from a job that fails on one
 * rank for a reason other than a lost node. Three real weftd processes
 * (cpu:2 each, mesh ring=6 over all of them) on loopback; the failure is
 * the daemon's test hook WEFT_TEST_FAIL_JOB (the listed job sequence
 * numbers fail with WF_E_INTERNAL on that daemon's ranks, aborting its part
 * of the comm world as a failing step does). Every wait is an event wait
 * with a deadline (the sd_notify socket, the client's reply, pidfd).
 *
 *  1. a (coordinator), b (fails seqs 2, 10..13), c (none): "cluster
 *     serving: epoch 1, 3 node(s), 6 rank(s)"; jobs seq 0, 1 correct.
 *  2. seq 2 submitted with seq 3 and 4 behind it on the same connection:
 *     seq 2 gets WF_E_INTERNAL naming node b (its own failure, reported by
 *     b: not WF_E_NODE_LOST, and not a job left waiting); a reports the
 *     rebuild ("comm world of epoch 1 aborted (job seq 2 failed on node
 *     b ...); rebuilding it") and serves epoch 2 with 3 nodes, 6 ranks;
 *     seq 3 and 4 (queued meanwhile) run on the new world and are correct.
 *  3. status on a: world epoch 2, serving, 6 ranks, a self, b and c ready;
 *     every job case (seq 5..9) is correct on the rebuilt world.
 *  4. the loop guard: seq 10, 11, 12 fail and each rebuilds (epochs 3, 4,
 *     5: 3 rebuilds in a row without a job succeeding); seq 13 fails and
 *     the rebuild is held back: "cluster degraded: ...", a new job is
 *     refused with WF_E_UNAVAILABLE saying why, status says degraded;
 *     epoch 6 serves no sooner than cluster_timeout_ms after seq 13 was
 *     submitted, and jobs are correct.
 *  5. a failure on the coordinator's own ranks (a fails seq 16): the job
 *     gets WF_E_INTERNAL, epoch 7 serves, the next job is correct.
 *  6. SIGTERM stops every daemon cleanly (exit 0; no leak under ASan).
 *
 * Usage: test_cluster_fault PATH_TO_WEFTD.
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
#define HB 200                /* heartbeat_ms */
#define HB_TIMEOUT 1000       /* heartbeat_timeout_ms */
#define CLUSTER_TIMEOUT_MS 3000 /* also how long a held rebuild waits */


typedef clusterd_node_t node_t;

static char coordinator[64];

static bool node_start(node_t *d, const char *weftd, const char *name,
                       const char *env)
{
    static int started;
    char data_addr[32];
    snprintf(data_addr, sizeof data_addr, "127.0.0.%d", 1 + started++ % 3);
    clusterd_opts_t o = { .name = name, .tag = "cf", .coordinator = coordinator,
                          .mesh = "ring=6", .data_address = data_addr,
                          .cluster_timeout_ms = CLUSTER_TIMEOUT_MS,
                          .heartbeat_ms = HB,
                          .heartbeat_timeout_ms = HB_TIMEOUT,
                          .log_env = "CF_LOG_LEVEL", .env = env };
    return clusterd_node_start(d, weftd, &o);
}

static bool notify_wait(node_t *d, const char *prefix, int timeout_ms)
{
    return clusterd_node_wait(d, prefix, timeout_ms, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* job cases (heads divisible by 6 or the anything flags) */

#include "support/jcase_names.h"

static const jcase_t cases[] = {
    /* name                     B   Sq  Skv Hq Hkv D  in    out   causal lse  scale rot  fp32 ring_any uly_any lb */
    { "f32 48",                 1, 48, 48, 12, 12, 16, F32,  F32,  0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f32 72 causal lb a2a",   1, 72, 72, 12, 6,  32, F32,  F32,  1, true,  0,    A2A, ON,  DEF, DEF, ON },
    { "f16 36 GQA",             2, 36, 36, 12, 4,  16, F16,  F16,  0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "bf16 uneven 45/31",      1, 45, 31, 12, 12, 16, BF16, BF16, 1, true,  0,    A2A, OFF, ON,  ON,  ON },
    { "f32 uneven heads 10",    1, 40, 40, 10, 10, 16, F32,  F32,  0, true,  0.3f, AG,  DEF, ON,  ON,  DEF },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* A job submitted, not waited for yet. */
typedef struct pending {
    jbuf_t a;
    wf_job_t *job;
} pending_t;

static bool submit(wf_client_t *cl, pending_t *p, const jcase_t *c, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    if (!jbuf_init(&p->a, c, seed))
        return false;
    wf_attention_opts_t o = opts_of(c);
    wf_status_t st = wf_attention_submit(cl, &p->a.q, &p->a.k, &p->a.v, &o,
                                         &p->a.out, p->a.lse, &p->job);
    if (st != WF_OK)
        fprintf(stderr, "submit %s: %s\n", c->name, wf_status_name(st));
    return st == WF_OK;
}

/* Wait for a submitted job; its result into *res, its error message into
 * msg; frees it. */
static void wait_job(wf_client_t *cl, pending_t *p, wf_job_result_t *res,
                     char *msg, size_t msg_len)
{
    memset(res, 0, sizeof *res);
    res->status = WF_E_INTERNAL;
    msg[0] = '\0';
    if (p->job) {
        wf_job_wait(cl, p->job, TIMEOUT_MS);
        wf_job_result(p->job, res);
        snprintf(msg, msg_len, "%s", wf_job_error(p->job) ? wf_job_error(p->job) : "");
        wf_job_destroy(cl, &p->job);
    }
}

/* The job that the hook fails: WF_E_INTERNAL naming the node. The status
 * and the message say how it ended: the failing rank's own status,
 * reported by its node, where a lost node would give WF_E_NODE_LOST and
 * ranks left waiting in the job's collectives would run into the wait's
 * bound (WAIT_EVENT_MS; the daemons' job_timeout_ms is 15 minutes). */
static bool expect_failure(wf_client_t *cl, const char *node, uint64_t seed)
{
    pending_t p;
    int64_t t0 = clusterd_now_ms();
    bool ok = submit(cl, &p, &cases[0], seed);
    wf_job_result_t res;
    char msg[512];
    wait_job(cl, &p, &res, msg, sizeof msg);
    int64_t ms = clusterd_now_ms() - t0;
    jbuf_free(&p.a);
    printf("failed job: %s after %lld ms: %s\n", wf_status_name(res.status),
           (long long)ms, msg);
    ok = ok && res.status == WF_E_INTERNAL;
    if (node && !strstr(msg, node)) {
        fprintf(stderr, "the error does not name %s\n", node);
        ok = false;
    }
    return ok;
}

static const wf_node_info_t *find_node(const wf_status_info_t *s, const char *name)
{
    for (uint32_t i = 0; i < s->node_count; i++)
        if (strcmp(s->nodes[i].name, name) == 0)
            return &s->nodes[i];
    return NULL;
}

/* Status on a: world `epoch`, `state`, 6 ranks, a self, b and c ready. */
static bool world_is(node_t *a, uint64_t epoch, const char *state)
{
    wf_status_info_t si;
    if (!clusterd_status(&a->p, &si))
        return false;
    const wf_node_info_t *na = find_node(&si, "a"), *nb = find_node(&si, "b"),
                         *nc = find_node(&si, "c");
    bool ok = si.world_epoch == epoch && strcmp(si.cluster_state, state) == 0 &&
              si.world_size == 6 && na && strcmp(na->state, "self") == 0 && nb &&
              strcmp(nb->state, "ready") == 0 && nc && strcmp(nc->state, "ready") == 0;
    printf("status on a: world epoch %llu, %s, %u ranks, b %s, c %s, jobs served "
           "%llu, failed %llu\n", (unsigned long long)si.world_epoch,
           si.cluster_state, si.world_size, nb ? nb->state : "-",
           nc ? nc->state : "-", (unsigned long long)si.jobs_served,
           (unsigned long long)si.jobs_failed);
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
    CHECK(node_start(&a, weftd, "a", "WEFT_TEST_FAIL_JOB=16"));
    CHECK(notify_wait(&a, "READY=1", TIMEOUT_MS));
    CHECK(node_start(&b, weftd, "b", "WEFT_TEST_FAIL_JOB=2,10,11,12,13"));
    CHECK(node_start(&c, weftd, "c", NULL));

    /* 1. one world; seq 0 and 1 */
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS));
    wf_client_t *cl = NULL;
    CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl) == WF_OK);
    wf_job_result_t r;
    CHECK(jcase_run(cl, &cases[0], 1, false, &r));
    uint64_t epoch1 = r.epoch;
    CHECK(jcase_run(cl, &cases[1], 2, false, &r));

    /* 2. seq 2 fails on b; seq 3 and 4 wait behind it */
    {
        pending_t p[3];
        int64_t t0 = clusterd_now_ms();
        CHECK(submit(cl, &p[0], &cases[0], 3));
        CHECK(submit(cl, &p[1], &cases[2], 4));
        CHECK(submit(cl, &p[2], &cases[3], 5));
        wf_job_result_t res;
        char msg[512];
        wait_job(cl, &p[0], &res, msg, sizeof msg);
        int64_t t_err = clusterd_now_ms() - t0;
        printf("seq 2 (fails on b): %s after %lld ms: %s\n",
               wf_status_name(res.status), (long long)t_err, msg);
        CHECK(res.status == WF_E_INTERNAL);
        CHECK(strstr(msg, "node b") != NULL);
        CHECK(notify_wait(&a, "STATUS=cluster: comm world of epoch 1 aborted (job "
                          "seq 2 failed on node b", TIMEOUT_MS));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 2, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        int64_t t_world = clusterd_now_ms() - t0;
        printf("rebuilt world serving %lld ms after the submit (%lld ms after "
               "the error)\n", (long long)t_world, (long long)(t_world - t_err));
        for (int i = 1; i < 3; i++) {
            wait_job(cl, &p[i], &res, msg, sizeof msg);
            if (res.status != WF_OK)
                fprintf(stderr, "queued job %d: %s: %s\n", i,
                        wf_status_name(res.status), msg);
            CHECK(res.status == WF_OK && jbuf_check(&p[i].a, &res, false));
            CHECK(res.epoch > epoch1 && res.devices == 6);
        }
        printf("jobs queued behind it: done %lld ms after the submit\n",
               (long long)(clusterd_now_ms() - t0));
        for (int i = 0; i < 3; i++)
            jbuf_free(&p[i].a);
    }

    /* 3. the rebuilt world serves every case (seq 5..9) */
    CHECK(world_is(&a, 2, "serving"));
    wf_status_info_t si;
    CHECK(clusterd_status(&b.p, &si) && si.world_epoch == 2 &&
          strcmp(si.role, "member") == 0);
    for (size_t k = 0; k < N_CASES; k++) {
        CHECK(jcase_run(cl, &cases[k], 100 + k, false, &r));
        CHECK(r.epoch > epoch1 && r.devices == 6);
    }

    /* 4. the loop guard: seq 10..12 rebuild (epochs 3..5), seq 13 holds */
    {
        for (int i = 0; i < 3; i++) {
            CHECK(expect_failure(cl, "node b", 200 + (uint64_t)i));
            char line[128];
            snprintf(line, sizeof line, "STATUS=cluster: comm world of epoch %d "
                     "aborted (job seq %d failed on node b", 2 + i, 10 + i);
            CHECK(notify_wait(&a, line, TIMEOUT_MS));
        }
        /* the hold starts after this submit: measured from here, the
         * rebuild can only come later than cluster_timeout_ms */
        double t_held = now_s();
        jbuf_t x;
        CHECK(jbuf_init(&x, &cases[0], 220));
        wf_attention_opts_t o = opts_of(&cases[0]);
        CHECK(expect_failure(cl, "node b", 210));
        CHECK(notify_wait(&a, "STATUS=cluster degraded: comm world of epoch 5 "
                          "aborted (job seq 13 failed on node b", TIMEOUT_MS));
        /* first thing in the hold (cluster_timeout_ms, 3 s: one job's
         * round trip here) */
        wf_status_t st = wf_attention(cl, &x.q, &x.k, &x.v, &o, &x.out, x.lse, NULL);
        const char *msg = wf_client_last_error(cl);
        printf("job while held: %s: %s\n", wf_status_name(st), msg);
        CHECK(st == WF_E_UNAVAILABLE && strstr(msg, "degraded") != NULL);
        jbuf_free(&x);
        CHECK(world_is(&a, 5, "degraded"));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 6, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        double held_ms = (now_s() - t_held) * 1e3;
        printf("held rebuild served %.0f ms after seq 13 was submitted "
               "(cluster_timeout_ms %d)\n", held_ms, CLUSTER_TIMEOUT_MS);
        CHECK(held_ms >= CLUSTER_TIMEOUT_MS);
        CHECK(world_is(&a, 6, "serving"));
        CHECK(jcase_run(cl, &cases[1], 230, false, &r));    /* seq 14 */
        CHECK(jcase_run(cl, &cases[2], 231, false, &r));    /* seq 15 */
    }

    /* 5. seq 16 fails on the coordinator's own ranks */
    {
        CHECK(expect_failure(cl, NULL, 300));
        CHECK(notify_wait(&a, "STATUS=cluster: comm world of epoch 6 aborted (job "
                          "seq 16 failed on node a", TIMEOUT_MS));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 7, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        CHECK(jcase_run(cl, &cases[4], 301, false, &r));
        CHECK(world_is(&a, 7, "serving"));
    }
    wf_client_destroy(&cl);

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
    clusterd_node_close(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&c);
    printf("test_cluster_fault: %s (%d failure(s)) in %.1f s\n",
           failed ? "FAILED" : "passed", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
