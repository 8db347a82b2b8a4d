/* test_cluster.c — the cluster control plane end to end: real weftd
 * processes on loopback (127.0.0.1 only), driven through libweft and
 * watched through their sd_notify sockets (STATUS= lines mirror every
 * cluster event). Every wait is an event wait with a deadline.
 *
 *  1. coordinator a (cpu:2, nodes 3) started first (READY=1), members b, c:
 *     one world of 3 nodes, 6 ranks, epoch 1; status on a lists a, b, c
 *     with first ranks 0, 2, 4; status on b says member, epoch 1; no
 *     world id in either (the data plane's token is not for clients).
 *  2. an attention job (ring=2 on the coordinator's devices) against the
 *     fp64 reference (f32 out: 1e-4 absolute, values in [-1, 1]); the
 *     same job sent to member b is refused with WF_E_NOT_COORDINATOR.
 *  3. a member advertising protocol version 3 (WEFT_TEST_PROTOCOL_VERSION,
 *     test only) is refused: it exits non-zero, a's status does not list
 *     it (a refused hello takes no entry), the world is untouched.
 *  4. member c killed (SIGKILL): a reports it lost within
 *     heartbeat_timeout_ms of the kill and a stated margin, and serves a
 *     degraded world of 2 nodes, 4 ranks, epoch 2, within a round's
 *     cluster_timeout_ms more.
 *  5. c restarted: rejoins, epoch 3, 3 nodes, 6 ranks.
 *  6. coordinator a killed: b says the coordinator is lost; a restarted:
 *     b and c rejoin it; its epochs start again at 1 (a coordinator takes
 *     no epoch from a hello), the members follow its fresh world id.
 *  7. a second cluster (e coordinator, nodes 3): member f joins and is
 *     killed during the rendezvous; e reports f lost within
 *     heartbeat_timeout_ms and names it when the 'hello' step times out.
 *
 * Usage: test_cluster PATH_TO_WEFTD.
 */
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "support/clusterd.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify lines */
#define HB "200"                 /* heartbeat_ms */
#define HB_TIMEOUT_MS 1000       /* heartbeat_timeout_ms */
#define CLUSTER_TIMEOUT_MS 5000  /* cluster_timeout_ms of the first cluster */
#define STR_(x) #x
#define STR(x) STR_(x)


static int left_ms(int64_t deadline)
{
    int64_t l = deadline - clusterd_now_ms();
    return l < 0 ? 0 : (int)l;
}

/* A daemon; its notify socket is read here directly (notify_wait). */
typedef clusterd_t node_t;

static char coordinator[64];

static bool node_start(node_t *d, const char *weftd, const char *name,
                       const char *coord, const char *nodes,
                       const char *cluster_timeout, const char *env)
{
    if (!clusterd_open(d, name, "cl"))
        return false;
    const char *argv[] = { weftd, "--listen", d->endpoint, "--devices", "cpu:2",
                           "--mesh", "ring=2", "--coordinator", coord,
                           "--nodes", nodes, "--node-name", name,
                           "--cluster-timeout-ms", cluster_timeout,
                           "--heartbeat-ms", HB, "--heartbeat-timeout-ms",
                           STR(HB_TIMEOUT_MS), "--cpu-memory", "256M",
                           "--allow-anonymous", "true", NULL };
    return clusterd_exec(d, argv, env);
}

/* Wait for a notify line starting with `prefix` (earlier lines skipped);
 * the line goes to got (may be NULL). */
static bool notify_wait(node_t *d, const char *prefix, int timeout_ms,
                        char *got, size_t got_len)
{
    int64_t deadline = clusterd_now_ms() + timeout_ms;
    size_t pl = strlen(prefix);
    for (;;) {
        struct pollfd p = { .fd = d->nfd, .events = POLLIN };
        if (poll(&p, 1, left_ms(deadline)) != 1) {
            fprintf(stderr, "%s: no '%s' within %d ms\n", d->name, prefix, timeout_ms);
            return false;
        }
        char buf[4096];
        ssize_t n = recv(d->nfd, buf, sizeof buf - 1, 0);
        if (n < 0)
            return false;
        buf[n] = '\0';
        for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            if (strncmp(line, prefix, pl) == 0) {
                if (got)
                    snprintf(got, got_len, "%s", line);
                return true;
            }
    }
}

static const wf_node_info_t *find_node(const wf_status_info_t *s, const char *name)
{
    for (uint32_t i = 0; i < s->node_count; i++)
        if (strcmp(s->nodes[i].name, name) == 0)
            return &s->nodes[i];
    return NULL;
}

/* A coordinator and a node's name, for lists: does its status list it? */
typedef struct lists_arg {
    node_t *coord;
    const char *name;
} lists_arg_t;

static bool lists(void *arg)
{
    const lists_arg_t *l = arg;
    static wf_status_info_t si;
    return clusterd_status(l->coord, &si) && find_node(&si, l->name) != NULL;
}

/* ------------------------------------------------------------------ */
/* one attention job and its fp64 reference */

enum { B = 1, S = 64, H = 2, D = 16 };

static double rnd(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*x >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* Run the job on d; WF_OK and the max error against fp64, or the status. */
static wf_status_t attention_on(node_t *d, double *ret_err)
{
    static float q[B * S * H * D], k[B * S * H * D], v[B * S * H * D], o[B * S * H * D];
    uint64_t x = 42;
    for (int i = 0; i < B * S * H * D; i++) {
        q[i] = (float)rnd(&x);
        k[i] = (float)rnd(&x);
        v[i] = (float)rnd(&x);
    }
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t to = { o, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_attention_opts_t opts;
    memset(&opts, 0, sizeof opts);
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(d->endpoint, TIMEOUT_MS, &c);
    if (st == WF_OK)
        st = wf_attention(c, &tq, &tk, &tv, &opts, &to, NULL, NULL);
    if (st != WF_OK)
        fprintf(stderr, "%s: attention: %s: %s\n", d->name, wf_status_name(st),
                wf_client_last_error(c));
    wf_client_destroy(&c);
    if (st != WF_OK)
        return st;
    double worst = 0, scale = 1.0 / sqrt((double)D);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < S; i++) {
            double sc[S], m = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                double acc = 0;
                for (int e = 0; e < D; e++)
                    acc += (double)q[(i * H + h) * D + e] * (double)k[(j * H + h) * D + e];
                sc[j] = acc * scale;
                if (sc[j] > m)
                    m = sc[j];
            }
            for (int j = 0; j < S; j++)
                sum += (sc[j] = exp(sc[j] - m));
            for (int e = 0; e < D; e++) {
                double acc = 0;
                for (int j = 0; j < S; j++)
                    acc += sc[j] * (double)v[(j * H + h) * D + e];
                double err = fabs(acc / sum - (double)o[(i * H + h) * D + e]);
                if (err > worst)
                    worst = err;
            }
        }
    *ret_err = worst;
    return WF_OK;
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    const char *weftd = argv[1];
    signal(SIGPIPE, SIG_IGN);
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", test_port());
    static wf_status_info_t si;
    char line[512];
    node_t a, b, c, d;

    /* 1. rendezvous of three */
    int64_t t0 = clusterd_now_ms();
    CHECK(node_start(&a, weftd, "a", coordinator, "3", STR(CLUSTER_TIMEOUT_MS), NULL));
    CHECK(notify_wait(&a, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&b, weftd, "b", coordinator, "3", STR(CLUSTER_TIMEOUT_MS), NULL));
    CHECK(node_start(&c, weftd, "c", coordinator, "3", STR(CLUSTER_TIMEOUT_MS), NULL));
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS, NULL, 0));
    printf("world of 3 formed in %lld ms (processes started to serving)\n",
           (long long)(clusterd_now_ms() - t0));
    CHECK(notify_wait(&b, "STATUS=cluster serving: epoch 1", TIMEOUT_MS, NULL, 0));
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&a, &si));
    CHECK(strcmp(si.role, "coordinator") == 0);
    CHECK(strcmp(si.cluster_state, "serving") == 0);
    CHECK(si.world_epoch == 1 && si.world_size == 6 && si.node_count == 3);
    CHECK(si.world_id[0] == '\0');   /* the data plane's token: not for clients */
    const char *names[3] = { "a", "b", "c" };
    for (int i = 0; i < 3; i++) {
        const wf_node_info_t *n = find_node(&si, names[i]);
        CHECK(n && n->first_rank == (uint32_t)(2 * i) && n->ranks == 2);
        CHECK(n && strcmp(n->state, i == 0 ? "self" : "ready") == 0);
    }
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&b, &si));
    CHECK(strcmp(si.role, "member") == 0 && si.world_epoch == 1 &&
          si.world_size == 6 && si.world_id[0] == '\0');

    /* 2. jobs: the coordinator serves, a member points at it */
    double err = 1;
    CHECK(attention_on(&a, &err) == WF_OK);
    printf("attention on the coordinator: max error %.3g (tolerance 1e-4)\n", err);
    CHECK(err < 1e-4);
    CHECK(attention_on(&b, &err) == WF_E_NOT_COORDINATOR);

    /* 3. version mismatch */
    CHECK(node_start(&d, weftd, "d", coordinator, "3", STR(CLUSTER_TIMEOUT_MS),
                     "WEFT_TEST_PROTOCOL_VERSION=3"));
    CHECK(clusterd_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) != 0);
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&a, &si));
    /* a refused hello takes no entry of the node table */
    CHECK(find_node(&si, "d") == NULL);
    CHECK(si.world_epoch == 1 && si.world_size == 6);
    clusterd_close(&d);

    /* 4. a member killed: the bounds are the point (found by the
     * heartbeats, then one round) and come from the settings with
     * clusterd's margin for a loss */
    int64_t tk = clusterd_now_ms();
    clusterd_kill(&c, SIGKILL);
    CHECK(notify_wait(&a, "STATUS=cluster: node c lost", TIMEOUT_MS, line, sizeof line));
    int64_t lost_ms = clusterd_now_ms() - tk;
    CHECK(notify_wait(&a, "STATUS=cluster degraded: epoch 2, 2 node(s), 4 rank(s)",
                      TIMEOUT_MS, NULL, 0));
    int64_t degraded_ms = clusterd_now_ms() - tk;
    uint32_t lost_bound = clusterd_loss_bound_ms(HB_TIMEOUT_MS);
    uint32_t degraded_bound = clusterd_loss_bound_ms(HB_TIMEOUT_MS + CLUSTER_TIMEOUT_MS);
    printf("member killed: reported in %lld ms (bound %u), degraded world in %lld ms "
           "(bound %u)\n", (long long)lost_ms, lost_bound, (long long)degraded_ms,
           degraded_bound);
    CHECK(lost_ms <= (int64_t)lost_bound);
    CHECK(degraded_ms <= (int64_t)degraded_bound);
    CHECK(attention_on(&a, &err) == WF_OK && err < 1e-4);
    clusterd_close(&c);

    /* 5. the member comes back */
    CHECK(node_start(&c, weftd, "c", coordinator, "3", STR(CLUSTER_TIMEOUT_MS), NULL));
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 3, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS, NULL, 0));
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&c, &si));
    CHECK(si.world_epoch == 3 && si.world_size == 6);

    /* 6. the coordinator dies and comes back */
    clusterd_close(&a);
    CHECK(notify_wait(&b, "STATUS=cluster: coordinator 127.0.0.1:", TIMEOUT_MS, line,
                      sizeof line));
    CHECK(strstr(line, "lost") != NULL);
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&b, &si));
    CHECK(strcmp(si.cluster_state, "coordinator-lost") == 0);
    CHECK(node_start(&a, weftd, "a", coordinator, "3", STR(CLUSTER_TIMEOUT_MS), NULL));
    /* the restarted coordinator counts its epochs from 1 again (it takes
     * none from a hello); the members follow its world by its fresh id */
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS, NULL, 0));
    CHECK(notify_wait(&b, "STATUS=cluster serving: epoch 1", TIMEOUT_MS, NULL, 0));
    CHECK(attention_on(&a, &err) == WF_OK && err < 1e-4);
    clusterd_close(&a);
    clusterd_close(&b);
    clusterd_close(&c);

    /* 7. a member killed during the rendezvous */
    char coord2[64];
    snprintf(coord2, sizeof coord2, "127.0.0.1:%d", test_port());
    node_t e, f;
    CHECK(node_start(&e, weftd, "e", coord2, "3", "1500", NULL));
    CHECK(notify_wait(&e, "READY=1", TIMEOUT_MS, NULL, 0));
    CHECK(node_start(&f, weftd, "f", coord2, "3", "1500", NULL));
    memset(&si, 0, sizeof si);
    /* f is known once e lists it: wait on f's own notify for its READY,
     * then on e's status */
    CHECK(notify_wait(&f, "READY=1", TIMEOUT_MS, NULL, 0));
    lists_arg_t ef = { &e, "f" };
    CHECK(wait_for(lists, &ef, WAIT_EVENT_MS));
    tk = clusterd_now_ms();
    clusterd_kill(&f, SIGKILL);
    CHECK(notify_wait(&e, "STATUS=cluster: node f lost", TIMEOUT_MS, line, sizeof line));
    CHECK(strstr(line, "rendezvous step 'hello'") != NULL);
    CHECK(notify_wait(&e, "STATUS=cluster: rendezvous step 'hello' timed out",
                      TIMEOUT_MS, line, sizeof line));
    CHECK(strstr(line, "lost: f") != NULL);
    printf("member killed during the rendezvous: reported in %lld ms (%s)\n",
           (long long)(clusterd_now_ms() - tk), line + 7);
    clusterd_close(&e);
    clusterd_close(&f);

    printf("%s: %d failure(s)\n", argv[0], failed);
    return failed ? 1 : 0;
}
