/* test_nccl_boot.c — NCCL across nodes, bootstrapped by the rendezvous,
 * without a GPU: the logic that picks and feeds NCCL (daemon/comm/
 * comm_nccl_boot.h, proto/cluster_msg.h "ncclid" / "gpu"), run against the
 * NCCL stand-in of tests/support/nccl_standin.h:
 *   - the world message carries the unique id (Z85, exactly 128 bytes,
 *     validated) through encode / decode; a hello's "gpu";
 *   - the data plane: all-GPU world -> NCCL; CPU or mixed -> comm_zmq;
 *     which node may hold NCCL ranks;
 *   - a fresh id per epoch, and an id that made a communicator is refused
 *     a second time (as a reused ncclUniqueId);
 *   - a world of 3 "nodes" x 2 ranks (threads) joins one communicator from
 *     the id of the world message, splits the mesh groups with
 *     wf_mesh_color's colours, and every group's allreduce / the world's
 *     allgather are right;
 *   - a lost node: ranks blocked in a collective (asleep in it, by their
 *     domains' waiting counts) return WF_E_ABORTED when the cluster's
 *     abort domains are aborted; shrink vs rebuild
 *     (wf_nccl_plan_loss), both carried out: shrink drops the lost ranks
 *     without a new id, rebuild forms a new world from a new id.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/mesh.h"
#include "cluster_msg.h"
#include "comm/comm.h"
#include "comm/comm_nccl_boot.h"
#include "comm/comm_zmq.h"
#include "proto.h"
#include "support/check.h"
#include "support/ctl_wire.h"
#include "support/nccl_standin.h"
#include "support/wait.h"

#define NODES 3
#define PER 2
#define WORLD (NODES * PER)

static wf_ctl_msg_t m_out, m_in;
static wf_cmsg_t c_out, c_in;

/* The world message of a round, as cluster_coord.c fills it: 3 nodes of
 * 2 ranks, the id (NULL: none). */
static void world_msg(const wf_nccl_id_t *id, uint64_t epoch)
{
    memset(&c_out, 0, sizeof c_out);
    c_out.type = WF_CMSG_WORLD;
    wf_cmsg_world_t *w = &c_out.u.world;
    w->epoch = epoch;
    snprintf(w->id, sizeof w->id, "00112233445566778899aabbccddeeff");
    w->nn = NODES;
    w->mesh = (wf_cmsg_mesh_t){ epoch, 1, 3, 1, 2 };
    for (int k = 0; k < NODES; k++) {
        snprintf(w->nodes[k].name, sizeof w->nodes[k].name, "n%d", k);
        w->nodes[k].rank = (uint32_t)(k * PER);
        w->nodes[k].ranks = PER;
    }
    if (id)
        wf_cmsg_nccl_id_encode(id->bytes, w->ncclid);
}

/* The id a member reads from the world message (false: none). */
static bool member_reads(wf_nccl_id_t *ret)
{
    char err[256];
    if (!through_wire(&m_out, &m_in) || wf_cmsg_get(&m_in, &c_in, err, sizeof err) != WF_OK)
        return false;
    return c_in.u.world.ncclid[0] &&
           wf_cmsg_nccl_id_decode(c_in.u.world.ncclid, ret->bytes);
}

static void test_proto(void)
{
    wf_nccl_id_t id, got;
    for (int i = 0; i < WF_NCCL_ID_BYTES; i++)
        id.bytes[i] = (unsigned char)(i * 37 + 11);
    world_msg(&id, 7);
    CHECK(strlen(c_out.u.world.ncclid) == WF_CMSG_NCCL_ID_Z85, "Z85 length %zu",
          strlen(c_out.u.world.ncclid));
    CHECK(wf_cmsg_put(&m_out, &c_out) == WF_OK, "put world with ncclid");
    CHECK(member_reads(&got) && memcmp(got.bytes, id.bytes, sizeof id.bytes) == 0,
          "the id travels through the world message unchanged");

    world_msg(NULL, 7);
    CHECK(wf_cmsg_put(&m_out, &c_out) == WF_OK, "put world without ncclid");
    CHECK(!wf_ctl_get(&m_out, "ncclid"), "no id: key absent (the wire of a CPU world "
          "is unchanged)");
    CHECK(!member_reads(&got) && c_in.u.world.nn == NODES, "no id: zmq world");

    /* bad ids: short, long, a byte outside Z85 */
    const char *bad[3];
    char s_short[WF_CMSG_NCCL_ID_Z85], s_long[WF_CMSG_NCCL_ID_Z85 + 6],
        s_char[WF_CMSG_NCCL_ID_Z85 + 1];
    world_msg(&id, 7);
    /* the id's text, one character short and five long */
    const char *z = c_out.u.world.ncclid;
    size_t zn = strnlen(z, sizeof s_char - 1);
    memcpy(s_short, z, sizeof s_short - 1);                            /* 159 */
    s_short[sizeof s_short - 1] = '\0';
    memcpy(s_long, z, zn);
    memcpy(s_long + zn, "12345", 6);                                   /* 165 */
    memcpy(s_char, z, zn);
    s_char[zn] = '\0';
    s_char[17] = '~';                                                   /* not Z85 */
    bad[0] = s_short, bad[1] = s_long, bad[2] = s_char;
    for (int i = 0; i < 3; i++) {
        char err[256] = "";
        world_msg(NULL, 7);
        wf_cmsg_put(&m_out, &c_out);
        wf_ctl_put_str(&m_out, "ncclid", bad[i]);
        wf_status_t st = through_wire(&m_out, &m_in)
                             ? wf_cmsg_get(&m_in, &c_in, err, sizeof err) : WF_E_INTERNAL;
        CHECK(st == WF_E_BAD_FIELD && strstr(err, "'ncclid'"), "bad id %d: %s (%s)", i,
              wf_status_name(st), err);
    }
    unsigned char out[WF_CMSG_NCCL_ID_BYTES];
    CHECK(!wf_cmsg_nccl_id_decode("", out) && !wf_cmsg_nccl_id_decode(NULL, out),
          "empty id refused");

    /* hello: "gpu" present only when true */
    memset(&c_out, 0, sizeof c_out);
    c_out.type = WF_CMSG_HELLO;
    wf_cmsg_hello_t *h = &c_out.u.hello;
    h->proto = 1;
    snprintf(h->weft, sizeof h->weft, "0.1");
    snprintf(h->nccl, sizeof h->nccl, "2.28.9");
    snprintf(h->name, sizeof h->name, "n1");
    h->devices = 2;
    snprintf(h->data, sizeof h->data, "tcp://127.0.0.1:5000,5001");
    CHECK(wf_cmsg_put(&m_out, &c_out) == WF_OK && !wf_ctl_get(&m_out, "gpu"),
          "hello without gpu: key absent");
    h->gpu = true;
    char err[256];
    CHECK(wf_cmsg_put(&m_out, &c_out) == WF_OK && through_wire(&m_out, &m_in) &&
          wf_cmsg_get(&m_in, &c_in, err, sizeof err) == WF_OK && c_in.u.hello.gpu,
          "hello gpu = 1 read back");
}

static void test_plane(void)
{
    bool all[3] = { true, true, true }, mixed[3] = { true, false, true };
    CHECK(wf_nccl_plane(all, 3) == WF_PLANE_NCCL, "all-GPU world: nccl");
    CHECK(wf_nccl_plane(mixed, 3) == WF_PLANE_ZMQ, "mixed world: zmq");
    CHECK(wf_nccl_plane(all, 0) == WF_PLANE_ZMQ, "no node: zmq");
    CHECK(strcmp(wf_nccl_plane_name(WF_PLANE_NCCL), "nccl") == 0 &&
          strcmp(wf_nccl_plane_name(WF_PLANE_ZMQ), "zmq") == 0, "plane names");

    wf_settings_t s;
    wf_settings_default(&s);
    s.device_kind = WF_DEVICE_CPU;
    s.device_count = 2;
    s.nccl = true;
    CHECK(!wf_nccl_node_gpu(&s, 22809), "cpu devices: no NCCL ranks");
    s.device_kind = WF_DEVICE_CUDA;
    s.gpu[0] = 0, s.gpu[1] = 1;
    CHECK(wf_nccl_node_gpu(&s, 22809), "two GPUs, NCCL built: gpu");
    CHECK(!wf_nccl_node_gpu(&s, 0), "NCCL not built: no");
    s.gpu[1] = 0;
    CHECK(!wf_nccl_node_gpu(&s, 22809), "two ranks on one GPU: no");
    s.gpu[1] = 1;
    s.nccl = false;
    CHECK(!wf_nccl_node_gpu(&s, 22809), "nccl setting off: no");
    s.nccl = true;
    /* the daemon's table: the stub's or NCCL's */
    const wf_nccl_api_t *api = wf_nccl_api();
    CHECK(api && strcmp(api->name, "nccl") == 0 && api->init && api->unique_id,
          "the daemon's table");
    CHECK(wf_nccl_api_node_gpu(api, &s) == (api->version(api->arg) > 0),
          "the daemon's node_gpu follows its NCCL");
}

static void test_plan(void)
{
    wf_nccl_span_t old[3] = { { "a", 0, 2 }, { "b", 2, 2 }, { "c", 4, 2 } };
    int ex[8], n = -1;
    wf_nccl_span_t lost_b[2] = { { "a", 0, 2 }, { "c", 2, 2 } };
    CHECK(wf_nccl_plan_loss(old, 3, lost_b, 2, true, ex, 8, &n) == WF_NCCL_SHRINK &&
          n == 2 && ex[0] == 2 && ex[1] == 3, "b lost: shrink without ranks 2, 3 (n %d)", n);
    CHECK(wf_nccl_plan_loss(old, 3, lost_b, 2, false, ex, 8, &n) == WF_NCCL_REBUILD &&
          n == 0, "no ncclCommShrink: rebuild");
    CHECK(wf_nccl_plan_loss(old, 3, lost_b, 2, true, ex, 1, &n) == WF_NCCL_REBUILD,
          "more excluded ranks than room: rebuild");
    wf_nccl_span_t lost_a[2] = { { "b", 0, 2 }, { "c", 2, 2 } };
    CHECK(wf_nccl_plan_loss(old, 3, lost_a, 2, true, ex, 8, &n) == WF_NCCL_SHRINK &&
          n == 2 && ex[0] == 0 && ex[1] == 1, "a lost: shrink without ranks 0, 1");
    wf_nccl_span_t joined[3] = { { "a", 0, 2 }, { "c", 2, 2 }, { "d", 4, 2 } };
    CHECK(wf_nccl_plan_loss(old, 3, joined, 3, true, ex, 8, &n) == WF_NCCL_REBUILD,
          "b lost and d joined: rebuild (new id)");
    wf_nccl_span_t stale[2] = { { "a", 0, 2 }, { "c", 4, 2 } };
    CHECK(wf_nccl_plan_loss(old, 3, stale, 2, true, ex, 8, &n) == WF_NCCL_REBUILD,
          "ranks not renumbered as shrink does: rebuild");
    wf_nccl_span_t swapped[2] = { { "c", 0, 2 }, { "a", 2, 2 } };
    CHECK(wf_nccl_plan_loss(old, 3, swapped, 2, true, ex, 8, &n) == WF_NCCL_REBUILD,
          "order changed: rebuild");
    CHECK(wf_nccl_plan_loss(old, 3, old, 3, true, ex, 8, &n) == WF_NCCL_REBUILD,
          "nobody lost: no shrink");
    wf_nccl_span_t resized[2] = { { "a", 0, 2 }, { "c", 2, 1 } };
    CHECK(wf_nccl_plan_loss(old, 3, resized, 2, true, ex, 8, &n) == WF_NCCL_REBUILD,
          "a survivor with other ranks: rebuild");
}

/* ---- ranks in threads ------------------------------------------------ */

typedef struct rank_arg {
    const wf_nccl_api_t *api;
    wf_nccl_id_t id;               /* as the member read it */
    int nranks, rank;
    wf_comm_zmq_local_t *domain;   /* its node's abort domain */
    wf_mesh_t mesh;
    wf_comm_t *world;              /* out: kept for the next phase */
    wf_status_t st;                /* out */
    int bad;                       /* out: wrong results */
} rank_arg_t;

static double group_sum(const wf_mesh_t *m, wf_mesh_dim_t dim, int rank, int nranks)
{
    int color, key, c2, k2;
    double sum = 0;
    wf_mesh_color(m, dim, rank, &color, &key);
    for (int r = 0; r < nranks; r++)
        if (wf_mesh_color(m, dim, r, &c2, &k2) == WF_OK && c2 == color && color >= 0)
            sum += r + 1;
    return sum;
}

/* Join from the id, split every mesh group, check a collective on each. */
static void *rank_join(void *p)
{
    rank_arg_t *a = p;
    /* op_timeout_ms 0: no per-op timeout, so a blocked collective ends
     * only by an abort (the lost node's case relies on it) */
    wf_comm_nccl_opts_t o = { .device = a->rank, .init_timeout_ms = 20000,
                              .op_timeout_ms = 0, .abort_domain = a->domain };
    a->st = a->api->init(a->api->arg, &a->id, a->nranks, a->rank, &o, &a->world);
    if (a->st != WF_OK)
        return NULL;
    double mine = a->rank + 1, all[WORLD];
    wf_status_t st = wf_comm_allgather(a->world, &mine, all, sizeof mine);
    for (int r = 0; r < a->nranks && st == WF_OK; r++)
        a->bad += all[r] != r + 1;
    for (int i = 0; i < WF_MESH_NGROUPS && st == WF_OK; i++) {
        int color, key;
        wf_comm_t *g = NULL;
        st = wf_mesh_color(&a->mesh, (wf_mesh_dim_t)i, a->rank, &color, &key);
        if (st == WF_OK)
            st = wf_comm_split(a->world, color, key, &g);
        if (st == WF_OK && g) {
            double sum = 0;
            st = wf_comm_allreduce(g, &mine, &sum, 1, WF_COMM_F64, WF_COMM_SUM);
            a->bad += st == WF_OK && sum != group_sum(&a->mesh, (wf_mesh_dim_t)i,
                                                      a->rank, a->nranks);
        }
        wf_comm_destroy(&g);
    }
    a->st = st;
    return NULL;
}

/* Survivors that call a collective with a lost node's ranks. */
static atomic_int g_entered;  /* about to call it */
static atomic_int g_returned; /* their call returned */

/* A survivor blocked in a collective with a lost node's ranks. */
static void *rank_blocked(void *p)
{
    rank_arg_t *a = p;
    double mine = 1, sum = 0;
    atomic_fetch_add(&g_entered, 1);
    a->st = wf_comm_allreduce(a->world, &mine, &sum, 1, WF_COMM_F64, WF_COMM_SUM);
    atomic_fetch_add(&g_returned, 1);
    return NULL;
}

/* The domains of the surviving nodes n0 and n2 (two ranks each). */
static wf_comm_zmq_local_t *g_surv_dom[2];

/* All 4 survivors have entered the allreduce and are blocked in it:
 * nothing else runs on their nodes' domains, so each domain's waiting
 * count is its two ranks' calls. */
static bool survivors_blocked(void *p)
{
    (void)p;
    return atomic_load(&g_entered) == 4 &&
           wf_comm_zmq_local_waiting(g_surv_dom[0]) == 2 &&
           wf_comm_zmq_local_waiting(g_surv_dom[1]) == 2;
}

static bool survivors_returned(void *p)
{
    (void)p;
    return atomic_load(&g_returned) == 4;
}

/* Shrink without the excluded ranks, then check an allreduce. */
static int g_exclude[8], g_n_exclude;
static void *rank_shrink(void *p)
{
    rank_arg_t *a = p;
    wf_comm_t *s = NULL;
    wf_comm_nccl_opts_t o = { .device = a->rank, .init_timeout_ms = 20000,
                              .abort_domain = a->domain };
    a->st = a->api->shrink(a->api->arg, a->world, g_exclude, g_n_exclude, &o, &s);
    if (a->st == WF_OK) {
        double mine = 1, sum = 0;
        a->st = wf_comm_allreduce(s, &mine, &sum, 1, WF_COMM_F64, WF_COMM_SUM);
        a->bad += sum != a->nranks - g_n_exclude;
        a->bad += wf_comm_size(s) != a->nranks - g_n_exclude;
    }
    wf_comm_destroy(&s);
    return NULL;
}

static void run_ranks(rank_arg_t *a, const int *which, int n, void *(*fn)(void *))
{
    pthread_t t[WORLD];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fn, &a[which[i]]);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

/* One epoch: the coordinator draws the id and sends the world message;
 * each rank reads it and joins; the mesh groups are split. */
static bool form(const wf_nccl_api_t *api, rank_arg_t *a, wf_comm_zmq_local_t **dom,
                 const int *ranks, int n, wf_nccl_id_t *ret_id, uint64_t epoch)
{
    wf_nccl_id_t id;
    if (api->unique_id(api->arg, &id) != WF_OK)
        return false;
    world_msg(&id, epoch);
    wf_nccl_id_t read;
    if (wf_cmsg_put(&m_out, &c_out) != WF_OK || !member_reads(&read))
        return false;
    wf_mesh_degrees_t deg = { 1, (uint32_t)n / 2, 1, 2 };
    wf_mesh_t mesh;
    char err[128];
    if (wf_mesh_init(&mesh, &deg, n, err, sizeof err) != WF_OK)
        return false;
    for (int i = 0; i < n; i++) {
        rank_arg_t *x = &a[ranks[i]];
        memset(x, 0, sizeof *x);
        x->api = api;
        x->id = read;
        x->nranks = n;
        x->rank = i;
        x->domain = dom[ranks[i] / PER];
        x->mesh = mesh;
    }
    run_ranks(a, ranks, n, rank_join);
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && a[ranks[i]].st == WF_OK && a[ranks[i]].bad == 0;
    *ret_id = id;
    return ok;
}

static void drop(rank_arg_t *a, int n)
{
    for (int i = 0; i < n; i++)
        wf_comm_destroy(&a[i].world);
}

static void test_worlds(bool with_shrink)
{
    wf_nccl_standin_t *si = NULL;
    CHECK(wf_nccl_standin_new(with_shrink, &si) == WF_OK, "stand-in");
    if (!si)
        return;
    const wf_nccl_api_t *api = wf_nccl_standin_api(si);
    wf_comm_zmq_local_t *dom[NODES] = { NULL };
    for (int k = 0; k < NODES; k++)
        wf_comm_zmq_local_new(&dom[k]);
    rank_arg_t a[WORLD];
    int all[WORLD] = { 0, 1, 2, 3, 4, 5 };

    /* epoch 1: the whole world, mesh ring = 3 x tp = 2 */
    wf_nccl_id_t id1, id2;
    CHECK(form(api, a, dom, all, WORLD, &id1, 1), "epoch 1: 6 ranks joined from the "
          "world message's id, mesh groups split, collectives right");
    drop(a, WORLD);

    /* the same id again: refused (an id makes one communicator) */
    memset(a, 0, sizeof a);
    for (int i = 0; i < WORLD; i++) {
        a[i].api = api, a[i].id = id1, a[i].nranks = WORLD, a[i].rank = i;
        a[i].domain = dom[i / PER];
        wf_mesh_degrees_t deg = { 1, 3, 1, 2 };
        char err[64];
        wf_mesh_init(&a[i].mesh, &deg, WORLD, err, sizeof err);
    }
    run_ranks(a, all, WORLD, rank_join);
    int refused = 0;
    for (int i = 0; i < WORLD; i++)
        refused += a[i].st != WF_OK;
    CHECK(refused == WORLD, "a reused id is refused on every rank (%d of %d)", refused,
          WORLD);
    drop(a, WORLD);

    /* epoch 2: a fresh id */
    CHECK(form(api, a, dom, all, WORLD, &id2, 2), "epoch 2 formed");
    CHECK(memcmp(id1.bytes, id2.bytes, sizeof id1.bytes) != 0, "a fresh id per epoch");

    /* node n1 (ranks 2, 3) is lost */
    wf_nccl_span_t old[NODES] = { { "n0", 0, 2 }, { "n1", 2, 2 }, { "n2", 4, 2 } };
    wf_nccl_span_t nw[2] = { { "n0", 0, 2 }, { "n2", 2, 2 } };
    int surv[4] = { 0, 1, 4, 5 };
    g_n_exclude = 0;
    wf_nccl_next_t next = wf_nccl_plan_loss(old, NODES, nw, 2, api->shrink != NULL,
                                            g_exclude, 8, &g_n_exclude);
    CHECK(next == (with_shrink ? WF_NCCL_SHRINK : WF_NCCL_REBUILD),
          "loss plan: %s", with_shrink ? "shrink" : "rebuild");
    if (next == WF_NCCL_SHRINK) {
        run_ranks(a, surv, 4, rank_shrink);
        int ok = 0;
        for (int i = 0; i < 4; i++)
            ok += a[surv[i]].st == WF_OK && a[surv[i]].bad == 0;
        CHECK(ok == 4, "shrink: 4 survivors in a world of 4 without a new id (%d ok)", ok);
        CHECK(wf_nccl_standin_counters(si).shrinks == 4, "4 shrinks");
    }
    /* whichever the plan, the survivors blocked in a collective with the
     * lost ranks return WF_E_ABORTED once the domain is aborted (what the
     * heartbeat timeout does in the daemon); they have no per-op timeout,
     * so nothing else can end their calls */
    pthread_t t[4];
    atomic_store(&g_entered, 0);
    atomic_store(&g_returned, 0);
    g_surv_dom[0] = dom[0];
    g_surv_dom[1] = dom[2];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, rank_blocked, &a[surv[i]]);
    bool blocked = wait_for(survivors_blocked, NULL, WAIT_EVENT_MS);
    CHECK(blocked, "survivors blocked in the allreduce before the abort: %d entered, "
          "%d + %d waiting", atomic_load(&g_entered),
          wf_comm_zmq_local_waiting(dom[0]), wf_comm_zmq_local_waiting(dom[2]));
    for (int k = 0; k < NODES; k++)
        wf_comm_zmq_local_abort(dom[k]);
    if (!wait_for(survivors_returned, NULL, WAIT_EVENT_MS)) {
        /* the join would hang on a survivor the abort did not wake */
        fprintf(stderr, "FAIL: %d of 4 survivors still blocked after the abort\n",
                4 - atomic_load(&g_returned));
        exit(1);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    int aborted = 0;
    for (int i = 0; i < 4; i++)
        aborted += a[surv[i]].st == WF_E_ABORTED;
    CHECK(aborted == 4, "blocked survivors aborted: %d of 4 returned WF_E_ABORTED",
          aborted);
    drop(a, WORLD);
    for (int k = 0; k < NODES; k++) {
        wf_comm_zmq_local_unref(&dom[k]);
        wf_comm_zmq_local_new(&dom[k]);
    }

    /* rebuild: epoch 3 over the 4 survivors from a new id */
    wf_nccl_id_t id3;
    CHECK(form(api, a, dom, surv, 4, &id3, 3), "rebuild: the survivors form a world of "
          "4 from a new id");
    CHECK(memcmp(id3.bytes, id2.bytes, sizeof id3.bytes) != 0, "rebuild id is new");
    drop(a, WORLD);

    /* rejoin: epoch 4, every node again, a new id */
    wf_nccl_id_t id4;
    CHECK(form(api, a, dom, all, WORLD, &id4, 4), "rejoin: 6 ranks from a new id");
    CHECK(memcmp(id4.bytes, id3.bytes, sizeof id4.bytes) != 0, "rejoin id is new");
    drop(a, WORLD);

    wf_nccl_standin_counters_t c = wf_nccl_standin_counters(si);
    CHECK(c.unique_ids == 4 && c.refused >= WORLD, "stand-in: %llu ids, %llu refused",
          (unsigned long long)c.unique_ids, (unsigned long long)c.refused);
    for (int k = 0; k < NODES; k++)
        wf_comm_zmq_local_unref(&dom[k]);
    wf_nccl_standin_destroy(&si);
}

int main(void)
{
    test_proto();
    test_plane();
    test_plan();
    test_worlds(true);
    test_worlds(false);
    printf("test_nccl_boot: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
