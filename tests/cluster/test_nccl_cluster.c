/* test_nccl_cluster.c — an NCCL world bootstrapped by the rendezvous, end
 * to end, without a GPU: three weftd_ncclsi processes (cpu:2 each: the
 * stand-in device backend, whose memory is scrambled, and the NCCL
 * stand-in of tests/support/nccl_standin.h in place of NCCL) on loopback.
 *
 *  1. a (coordinator, --mesh ring=6), b, c: serving, epoch 1, 6 ranks;
 *     the coordinator's log says the round's data plane is nccl with a
 *     fresh unique id, and every member's that it joins the nccl world.
 *  2. attention across the nodes (ring=6, then ulysses=3,tp=2 after a live
 *     re-mesh: the groups are split again from the same communicator, no
 *     new round) against the fp64 reference.
 *  3. member c killed (SIGKILL) while a job is in flight on it: c
 *     restarted (the world degrades to epoch 2, serves at epoch 3, nccl)
 *     with its job parts held (the daemon's test hook
 *     WEFT_TEST_HOLD_JOBS), a job held on c's devices (status), c killed:
 *     the job fails with WF_E_NODE_LOST within heartbeat_timeout_ms and a
 *     stated margin; the survivors form the world of epoch 4 (4 ranks,
 *     nccl again): with the stand-in's ncclCommShrink they shrink the
 *     communicator of epoch 3 without c's ranks (no new id), without it
 *     they make a new one from the round's id; a job on it is correct.
 *  4. c restarted with WEFT_NCCL=0 (its hello without "gpu"): the world of
 *     epoch 5 is mixed, its data plane zmq, and a job across all three
 *     is correct.
 *  4b. a GPU node whose NCCL version differs (WEFT_TEST_NCCL_VERSION) is
 *     refused: it exits 1 naming the NCCL version.
 *  5. SIGTERM stops every daemon (exit 0; no leak under ASan).
 * The whole runs twice: the stand-in without ncclCommShrink, then with it
 * (WEFT_TEST_NCCL_SHRINK=1).
 *
 * Usage: test_nccl_cluster PATH_TO_WEFTD_NCCLSI.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify and log lines */
#define HB_TIMEOUT 1000                 /* heartbeat_timeout_ms */

typedef clusterd_node_t node_t;
static char coordinator[64];
static const char *weftd;

static bool node_start(node_t *d, const char *name, const char *env)
{
    if (!clusterd_node_open(d, name, "nc"))
        return false;
    char hbt[16];
    snprintf(hbt, sizeof hbt, "%d", HB_TIMEOUT);
    snprintf(d->p.log_path, sizeof d->p.log_path, "/tmp/weft-nc-%s-%d.log", name,
             (int)getpid());
    const char *argv[] = { weftd, "--listen", d->p.endpoint, "--devices", "cpu:2",
                           "--data-address", "127.0.0.1", "--mesh", "ring=6",
                           "--coordinator", coordinator, "--nodes", "3",
                           "--node-name", name, "--cluster-timeout-ms", "5000",
                           "--heartbeat-ms", "200", "--heartbeat-timeout-ms", hbt,
                           "--cpu-memory", "256M", "--log-level", "info",
                           "--allow-anonymous", "true", NULL };
    return clusterd_exec(&d->p, argv, env);
}

static bool log_has(node_t *d, const char *needle)
{
    char line[512];
    bool ok = clusterd_log_find(&d->p, needle, TIMEOUT_MS, line, sizeof line);
    if (ok)
        printf("  %s: %s\n", d->p.name, strstr(line, "cluster:") ? strstr(line, "cluster:")
                                                                 : line);
    else
        fprintf(stderr, "%s: no log line with '%s'\n", d->p.name, needle);
    return ok;
}

#include "support/jcase_names.h"

static const jcase_t cases[] = {
    { "f32 48",                1, 48, 48, 12, 12, 16, F32,  F32,  0, true, 0, AG,  DEF, DEF, DEF, DEF },
    { "f16 36 GQA causal a2a", 2, 36, 36, 12, 4,  16, F16,  F16,  1, true, 0, A2A, DEF, DEF, DEF, DEF },
    { "bf16 uneven 45/31",     1, 45, 31, 12, 12, 16, BF16, BF16, 1, true, 0, A2A, OFF, ON,  ON,  ON },
};
#define N_CASES (sizeof cases / sizeof cases[0])

/* The whole scenario, with the stand-in's ncclCommShrink or without. */
static void scenario(bool shrink)
{
    printf("== NCCL stand-in %s ncclCommShrink\n", shrink ? "with" : "without");
    setenv("WEFT_TEST_NCCL_SHRINK", shrink ? "1" : "0", 1);
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", test_port());
    node_t a, b, c;
    CHECK(node_start(&a, "a", NULL));
    CHECK(clusterd_node_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, "b", NULL));
    CHECK(node_start(&c, "c", NULL));
    /* 1. one NCCL world through the rendezvous */
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                             TIMEOUT_MS, NULL, 0));
    CHECK(log_has(&a, "world of epoch 1: data plane nccl (nccl-standin"));
    CHECK(log_has(&a, "cluster: world of epoch 1: data plane nccl (one communicator"));
    CHECK(log_has(&b, "cluster: world of epoch 1: data plane nccl (one communicator"));
    CHECK(log_has(&c, "cluster: world of epoch 1: data plane nccl (one communicator"));

    wf_client_t *cl = NULL;
    CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl) == WF_OK);

    /* 2. jobs across the nodes; a live re-mesh splits from the same world */
    uint64_t epoch = 0;
    for (size_t k = 0; k < N_CASES; k++) {
        wf_job_result_t r;
        CHECK(jcase_run(cl, &cases[k], 100 + k, false, &r));
        CHECK(r.devices == 6);
        epoch = r.epoch;
    }
    wf_mesh_degrees_t m2 = { 1, 1, 3, 2 };
    uint64_t e2 = 0;
    CHECK(wf_reconfigure(cl, &m2, &e2) == WF_OK && e2 == epoch + 1);
    epoch = e2;
    for (size_t k = 0; k < N_CASES; k++) {
        wf_job_result_t r;
        CHECK(jcase_run(cl, &cases[k], 200 + k, false, &r));
        CHECK(r.epoch == epoch && r.devices == 6);
    }
    wf_status_info_t si;
    CHECK(wf_status(cl, &si) == WF_OK && si.world_epoch == 1);

    /* 3. a member lost with a job in flight on it: c restarted with its
     * job parts held, so a job across it cannot end before the kill */
    {
        wf_mesh_degrees_t ring6 = { 1, 6, 1, 1 };
        CHECK(wf_reconfigure(cl, &ring6, &e2) == WF_OK);
        clusterd_hold_t hold;
        CHECK(clusterd_hold_open(&hold, "nc"));
        clusterd_node_close(&c);
        CHECK(clusterd_node_wait(&a, "STATUS=cluster degraded: epoch 2, 2 node(s), 4 rank(s)",
                                 TIMEOUT_MS, NULL, 0));
        CHECK(node_start(&c, "c", hold.env));
        CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 3, 3 node(s), 6 rank(s)",
                                 TIMEOUT_MS, NULL, 0));
        CHECK(log_has(&c, "cluster: world of epoch 3: data plane nccl (one communicator"));
        clusterd_kill_held_job(&c.p, cl, &cases[0], "node(s) c lost",
                                           clusterd_loss_bound_ms(HB_TIMEOUT));
        clusterd_hold_close(&hold);
        CHECK(clusterd_node_wait(&a, "STATUS=cluster degraded: epoch 4, 2 node(s), 4 rank(s)",
                                 TIMEOUT_MS, NULL, 0));
        CHECK(log_has(&a, "world of epoch 4: data plane nccl (nccl-standin"));
        CHECK(log_has(&b, "cluster: world of epoch 4: data plane nccl (one communicator"));
        /* survivors: shrink without c's ranks 4, 5 (no new id), or a new
         * communicator from the round's id without ncclCommShrink */
        const char *how = shrink ? "cluster: world of epoch 4: shrinking the NCCL "
                                   "communicator of epoch 3 without 2 rank(s) from rank 4"
                                 : "cluster: world of epoch 4: a new NCCL communicator "
                                   "from the world message's id (no ncclCommShrink";
        CHECK(log_has(&a, how));
        CHECK(log_has(&b, how));
        wf_job_result_t r;
        CHECK(jcase_run(cl, &cases[0], 300, false, &r));
        CHECK(r.devices == 4);
    }

    /* 4. c back without "gpu": a mixed world on comm_zmq */
    {
        clusterd_node_close(&c);
        CHECK(node_start(&c, "c", "WEFT_NCCL=0"));
        CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 5, 3 node(s), 6 rank(s)",
                                 TIMEOUT_MS, NULL, 0));
        CHECK(log_has(&a, "world of epoch 5: data plane zmq (not every node"));
        CHECK(log_has(&c, "cluster: world of epoch 5: data plane zmq"));
        for (size_t k = 0; k < N_CASES; k++) {
            wf_job_result_t r;
            CHECK(jcase_run(cl, &cases[k], 400 + k, false, &r));
            CHECK(r.devices == 6);
        }
    }

    /* a GPU node whose NCCL differs from the coordinator's is refused (the
     * member exits 1 naming the field); without "gpu" it would join */
    if (!shrink) {
        node_t d;
        CHECK(node_start(&d, "d", "WEFT_TEST_NCCL_VERSION=22700"));
        CHECK(clusterd_wait_exit(&d.p, TIMEOUT_MS));
        CHECK(WIFEXITED(d.p.exit_status) && WEXITSTATUS(d.p.exit_status) == 1);
        CHECK(log_has(&d, "NCCL version"));
        clusterd_node_close(&d);
    }

    wf_client_destroy(&cl);
    /* 5. clean stops */
    node_t *all[3] = { &c, &b, &a };
    for (int i = 0; i < 3; i++) {
        kill(all[i]->p.pid, SIGTERM);
        CHECK(clusterd_wait_exit(&all[i]->p, TIMEOUT_MS));
        bool clean = WIFEXITED(all[i]->p.exit_status) && WEXITSTATUS(all[i]->p.exit_status) == 0;
        CHECK(clean);
        if (!clean)
            fprintf(stderr, "%s: exit status 0x%x (log %s kept)\n", all[i]->p.name,
                    all[i]->p.exit_status, all[i]->p.log_path);
    }
    if (failed)
        for (int i = 0; i < 3; i++) {
            fprintf(stderr, "log of %s kept: %s\n", all[i]->p.name, all[i]->p.log_path);
            all[i]->p.log_path[0] = '\0';    /* clusterd_close leaves it */
        }
    clusterd_node_close(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&c);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD_NCCLSI\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    weftd = argv[1];
    double t_begin = now_s();
    scenario(false);
    scenario(true);
    printf("test_nccl_cluster: %s (%d failure(s)) in %.1f s\n",
           failed ? "FAILED" : "passed", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
