/* test_cluster_jobs.c — jobs across daemons end to end: three real weftd
 * processes (cpu:2 each) on loopback (data planes on 127.0.0.1, .2 and .3) form one world of
 * 6 ranks whose mesh groups span the processes; clients submit to the
 * coordinator only. Every wait is an event wait with a deadline (pidfd,
 * the sd_notify socket, the client's reply).
 *
 *  1. a (coordinator, --mesh ring=6), b, c: "cluster serving: epoch 1,
 *     3 node(s), 6 rank(s)".
 *  2. for each mesh of ring=6, ulysses=6, ring=3,tp=2, ulysses=2,ring=3
 *     (USP), ulysses=3,tp=2, dp=3,ring=2, and tp=6 (head split: on the
 *     coordinator's 2 devices only): reconfigure (reply epoch =
 *     previous + 1), then every job case against the fp64 reference
 *     (tests/support/jobcheck: out f32 1e-4, f16 5e-4, bf16 4e-3, with
 *     reduced-precision merges 4e-3 / 3e-2; lse 1e-4 relative), reply
 *     epoch = the mesh's, devices = the replica size.
 *  3. the members' devices did work: status on b and c shows jobs served
 *     on each of their devices.
 *  4. live re-mesh under load: 3 client threads submit jobs back to back
 *     (each has had a job served before the first reconfiguration) while
 *     the coordinator is reconfigured 8 times across processes; zero lost
 *     jobs (every one WF_OK and within tolerance).
 *  5. member c killed while a ring=6 job is in flight on it: c restarted
 *     (the world degrades to epoch 2, serves at epoch 3) with its job
 *     parts held (the daemon's test hook WEFT_TEST_HOLD_JOBS), a job
 *     submitted, held on c's devices (status), c killed (SIGKILL): the job
 *     fails with WF_E_NODE_LOST naming c within heartbeat_timeout_ms and
 *     a stated margin of the kill; the world re-forms with 4 ranks (epoch
 *     4, degraded) and a job on it is correct.
 *  6. c restarted: rejoins (epoch 5, 6 ranks); jobs span it again (its
 *     devices serve) and are correct.
 *  7. SIGTERM stops every daemon cleanly (exit 0; no leak under ASan).
 *
 * Usage: test_cluster_jobs PATH_TO_WEFTD.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify lines */
#define HB 200            /* heartbeat_ms */
#define HB_TIMEOUT 1000   /* heartbeat_timeout_ms */
#define CLUSTER_TIMEOUT 5000


/* A daemon and its sd_notify socket, read by a thread (clusterd.h). */
typedef clusterd_node_t node_t;

static char coordinator[64];

/* Start a node; env: one "K=V" for its environment, or NULL. */
static bool node_start(node_t *d, const char *weftd, const char *name, const char *env)
{
    /* each node's data plane on its own loopback address (data_address):
     * jobs only work if peers connect to what each node announces */
    static int started;
    char data_addr[32];
    snprintf(data_addr, sizeof data_addr, "127.0.0.%d", 1 + started++ % 3);
    clusterd_opts_t o = { .name = name, .tag = "cj", .coordinator = coordinator,
                          .mesh = "ring=6", .data_address = data_addr,
                          .cluster_timeout_ms = CLUSTER_TIMEOUT,
                          .heartbeat_ms = HB,
                          .heartbeat_timeout_ms = HB_TIMEOUT,
                          .log_env = "CJ_LOG_LEVEL", .env = env };
    return clusterd_node_start(d, weftd, &o);
}

static void node_close(node_t *d)
{
    clusterd_node_close(d);
}

/* Wait for a notify line starting with `prefix` (earlier lines skipped). */
static bool notify_wait(node_t *d, const char *prefix, int timeout_ms)
{
    return clusterd_node_wait(d, prefix, timeout_ms, NULL, 0);
}

/* ------------------------------------------------------------------ */
/* job cases: heads divisible by 6 (or the anything flags), every dtype */

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

/* ------------------------------------------------------------------ */
/* load */

typedef struct loader {
    const char *endpoint;
    int index;
    atomic_bool *stop;
    atomic_uint ok, bad;          /* jobs correct, failed or wrong */
    pthread_t th;
} loader_t;

static void *loader_main(void *arg)
{
    loader_t *l = arg;
    wf_client_t *c = NULL;
    if (wf_client_connect(l->endpoint, TIMEOUT_MS, &c) != WF_OK) {
        l->bad++;
        return NULL;
    }
    for (uint64_t seq = 0; !atomic_load(l->stop); seq++) {
        const jcase_t *jc = &cases[(seq + (uint64_t)l->index) % N_CASES];
        if (jcase_run(c, jc, ((uint64_t)l->index << 32) | seq, true, NULL))
            l->ok++;
        else
            l->bad++;
    }
    wf_client_destroy(&c);
    return NULL;
}

/* Has every loader of ld[3] had a job served? */
static bool loaders_served(void *arg)
{
    loader_t *ld = arg;
    for (int i = 0; i < 3; i++)
        if (atomic_load(&ld[i].ok) + atomic_load(&ld[i].bad) == 0)
            return false;
    return true;
}

static uint64_t served_on(node_t *d)
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
    CHECK(node_start(&a, weftd, "a", NULL));
    CHECK(notify_wait(&a, "READY=1", TIMEOUT_MS));
    CHECK(node_start(&b, weftd, "b", NULL));
    CHECK(node_start(&c, weftd, "c", NULL));

    /* 1. one world */
    double t0 = now_s();
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS));
    printf("world of 3 daemons serving in %.0f ms\n", (now_s() - t0) * 1e3);

    wf_client_t *cl = NULL;
    CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl) == WF_OK);

    /* 2. meshes whose groups span the processes */
    static const struct { const char *name; wf_mesh_degrees_t m; } meshes[] = {
        { "ring=6", { 1, 6, 1, 1 } },
        { "ulysses=6", { 1, 1, 6, 1 } },
        { "ring=3,tp=2", { 1, 3, 1, 2 } },
        { "ulysses=2,ring=3", { 1, 3, 2, 1 } },
        { "ulysses=3,tp=2", { 1, 1, 3, 2 } },
        { "dp=3,ring=2", { 3, 2, 1, 1 } },
        { "tp=6 (head split: coordinator only)", { 1, 1, 1, 6 } },
    };
    uint64_t epoch = 0;
    wf_status_info_t si;
    CHECK(clusterd_status(&a.p, &si));
    epoch = si.epoch;
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        uint64_t e = 0;
        wf_status_t st = wf_reconfigure(cl, &meshes[i].m, &e);
        printf("mesh %s: %s, epoch %llu\n", meshes[i].name, wf_status_name(st),
               (unsigned long long)e);
        CHECK(st == WF_OK && e == epoch + 1);
        epoch = e;
        uint32_t replica = 6 / meshes[i].m.dp;
        if (meshes[i].m.ring * meshes[i].m.ulysses == 1)
            replica = 2;     /* head split: the coordinator's 2 devices */
        for (size_t k = 0; k < N_CASES; k++) {
            const jcase_t *jc = &cases[k];
            bool heads_fit = jc->Hq % meshes[i].m.tp == 0;
            wf_job_result_t res;
            if (!heads_fit)
                continue;
            CHECK(jcase_run(cl, jc, 1000 * i + k, false, &res));
            CHECK(res.epoch == epoch && res.devices == replica);
        }
    }

    /* 3. the members' devices served */
    uint64_t sb = served_on(&b), sc = served_on(&c);
    printf("parts served per device: b >= %llu, c >= %llu\n",
           (unsigned long long)sb, (unsigned long long)sc);
    CHECK(sb > 0 && sc > 0);

    /* 4. live re-mesh under load */
    {
        atomic_bool stop;
        atomic_init(&stop, false);
        loader_t ld[3];
        for (int i = 0; i < 3; i++) {
            memset(&ld[i], 0, sizeof ld[i]);
            ld[i].endpoint = a.p.endpoint;
            ld[i].index = i;
            ld[i].stop = &stop;
            atomic_init(&ld[i].ok, 0);
            atomic_init(&ld[i].bad, 0);
            CHECK(pthread_create(&ld[i].th, NULL, loader_main, &ld[i]) == 0);
        }
        /* the load is there before the first reconfiguration */
        CHECK(wait_for(loaders_served, ld, WAIT_EVENT_MS));
        static const wf_mesh_degrees_t seq[] = {
            { 1, 6, 1, 1 }, { 1, 3, 2, 1 }, { 1, 3, 1, 2 }, { 1, 1, 6, 1 },
            { 1, 2, 3, 1 }, { 1, 1, 3, 2 }, { 3, 2, 1, 1 }, { 1, 6, 1, 1 },
        };
        double tr = now_s();
        for (int i = 0; i < 8; i++) {
            /* some jobs under each mesh: three in a row on this client */
            for (int k = 0; k < 2; k++)
                CHECK(jcase_run(cl, &cases[2 + k], 7200 + (uint64_t)(i * 2 + k),
                                true, NULL));
            /* let some jobs through under each mesh: wait for one reply */
            CHECK(jcase_run(cl, &cases[0], 7000 + (uint64_t)i, true, NULL));
            uint64_t e = 0;
            wf_status_t st = wf_reconfigure(cl, &seq[i], &e);
            CHECK(st == WF_OK && e == epoch + 1);
            epoch = e;
        }
        CHECK(jcase_run(cl, &cases[1], 7100, true, NULL));
        atomic_store(&stop, true);
        unsigned ok = 0, bad = 0;
        for (int i = 0; i < 3; i++) {
            pthread_join(ld[i].th, NULL);
            ok += atomic_load(&ld[i].ok);
            bad += atomic_load(&ld[i].bad);
        }
        printf("re-mesh under load: 8 reconfigurations in %.2f s, %u jobs ok, "
               "%u lost or wrong\n", now_s() - tr, ok, bad);
        CHECK(ok > 0 && bad == 0);
    }

    /* 5. a member killed with a job in flight on it: c restarted with its
     * job parts held, so a job across it cannot end before the kill */
    {
        uint64_t e = 0;
        wf_mesh_degrees_t ring6 = { 1, 6, 1, 1 };
        CHECK(wf_reconfigure(cl, &ring6, &e) == WF_OK);
        clusterd_hold_t hold;
        CHECK(clusterd_hold_open(&hold, "cj"));
        node_close(&c);
        CHECK(notify_wait(&a, "STATUS=cluster degraded: epoch 2, 2 node(s), 4 rank(s)",
                          TIMEOUT_MS));
        CHECK(node_start(&c, weftd, "c", hold.env));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 3, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        wf_status_info_t s5;
        CHECK(clusterd_status(&a.p, &s5) && s5.mesh.ring == 6);
        epoch = s5.epoch;
        clusterd_kill_held_job(&c.p, cl, &cases[0], "node(s) c lost",
                                           clusterd_loss_bound_ms(HB_TIMEOUT));
        clusterd_hold_close(&hold);
        CHECK(notify_wait(&a, "STATUS=cluster degraded: epoch 4, 2 node(s), 4 rank(s)",
                          TIMEOUT_MS));
        wf_job_result_t r2;
        /* the survivors serve the smaller world (ring=6 fitted to ring=4) */
        CHECK(jcase_run(cl, &cases[0], 4242, false, &r2));
        CHECK(r2.epoch > epoch && r2.devices == 4);
        epoch = r2.epoch;
    }

    /* 6. c restarted: rejoins, jobs span it again */
    {
        node_close(&c);
        CHECK(node_start(&c, weftd, "c", NULL));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 5, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        for (size_t k = 0; k < N_CASES; k++) {
            wf_job_result_t r3;
            CHECK(jcase_run(cl, &cases[k], 9000 + k, false, &r3));
            CHECK(r3.epoch > epoch && r3.devices == 6);
        }
        uint64_t s3 = served_on(&c);
        printf("restarted c: parts served per device >= %llu\n",
               (unsigned long long)s3);
        CHECK(s3 >= N_CASES);
    }

    wf_client_destroy(&cl);
    /* 7. clean stops (SIGTERM: drain, abort the comm world, exit 0; under
     * the sanitizers also no leak): members first, then the coordinator */
    node_t *all[3] = { &c, &b, &a };
    for (int i = 0; i < 3; i++) {
        kill(all[i]->p.pid, SIGTERM);
        CHECK(clusterd_wait_exit(&all[i]->p, TIMEOUT_MS));
        CHECK(WIFEXITED(all[i]->p.exit_status) && WEXITSTATUS(all[i]->p.exit_status) == 0);
        if (!WIFEXITED(all[i]->p.exit_status) || WEXITSTATUS(all[i]->p.exit_status) != 0)
            fprintf(stderr, "%s: exit status 0x%x\n", all[i]->p.name, all[i]->p.exit_status);
    }
    node_close(&a);
    node_close(&b);
    node_close(&c);
    printf("test_cluster_jobs: %s (%d failure(s)) in %.1f s\n",
           failed ? "FAILED" : "passed", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
