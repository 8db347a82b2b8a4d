/* test_cluster_models.c — resident models in a cluster, end to end: three
 * real weftd processes (cpu:2 each, data planes on 127.0.0.1, .2 and .3)
 * form one world of 6 ranks; each reads models from its own model root
 * (a copy of the diffusers fixtures, tests/fixtures). Every wait is an
 * event wait with a deadline (the sd_notify socket, the client's reply);
 * what members hold is read back with list_models, polled.
 *
 *  1. a (coordinator), b, c serving: "cluster serving: epoch 1, 3 node(s)".
 *  2. load_model on a member: WF_E_NOT_COORDINATOR naming the coordinator.
 *  3. load "tiny" (flux-tiny) on a: ready on every node; list_models on a
 *     shows its nodes and ranks ("a:0-1,b:2-3,c:4-5"); b and c hold it.
 *  4. a model whose files differ on one node: the load is refused with
 *     WF_E_MISMATCH naming that node and what differs (c's checkpoint in
 *     bf16 under the same path: the tensor list; b's config.json), and
 *     no node keeps it. A path missing on b only: refused naming b.
 *  0. the reference: a single-node weftd (cpu:1) runs a forward of
 *     flux-tiny on inputs of 24 image + 12 text tokens (the fixtures' 16 /
 *     8 tokens do not divide over 3 or 6 sequence ranks), and reports
 *     wan-tiny's per-rank size.
 *  5. forwards across nodes on meshes that cross them (tp=2 x ring=3,
 *     ulysses=6, dp=3 x tp=2, tp=2 x ulysses=3; each reconfigure re-cuts
 *     the shards on every node), 3 per mesh (dp replicas take turns, so
 *     jobs rooted on members too): the diffusers fixture where the
 *     sequence degree divides its tokens (tolerance fluxio_tolerance,
 *     1e-5 for f32) and the 24 + 12 token inputs against the single-node
 *     output (1e-5 relative).
 *  6. Wan (tests/fixtures/wan-tiny, served at tp 1 only) across nodes:
 *     the mesh re-cut to ring=3 x ulysses=2 (the ring crosses a, b and c;
 *     "tiny" re-sharded to tp 1 alike), every node's status on its epoch;
 *     "wan" loaded on a: ready on
 *     every node (nodes "a:0-1,b:2-3,c:4-5"), list_models on each node
 *     shows it (family "wan", tp 1) with the per-rank size a single-node
 *     weftd reports; forwards through wf_forward_named on ring=3 x
 *     ulysses=2, ring=6 and dp=3 x ulysses=2, 3 per mesh, each on its
 *     replica's ring x ulysses devices (the job's result), against
 *     diffusers' float64 output (io-wan-tiny-f32: 12 video tokens, which
 *     divide over 6 sequence ranks; WANIO_TOLERANCE, 1e-5); then tp=2 x
 *     ring=3 with it resident (a live re-shard on every node) and its
 *     forwards; unloaded: gone from every node.
 *  7. unload "tiny": gone from every node; load it again: ready.
 *  8. a member that does not answer (SIGSTOP c) within cluster_timeout_ms:
 *     the load fails (WF_E_NODE_LOST or WF_E_UNAVAILABLE, naming c), one
 *     reply, within cluster_timeout_ms + heartbeat_timeout_ms and a stated
 *     margin; c continued (SIGCONT), the cluster serves again and a load
 *     succeeds.
 *  9. c lost with a forward in flight on it: c restarted with its job
 *     parts held (the daemon's test hook WEFT_TEST_HOLD_JOBS), the models
 *     installed there; two forwards submitted, c's two devices hold the
 *     first one's parts (status), c killed: that forward fails with
 *     WF_E_NODE_LOST naming c within heartbeat_timeout_ms and a stated
 *     margin, the one queued behind it runs on the smaller world (a, b),
 *     parity; the models serve there (list_models' nodes a, b), parity; c
 *     restarted with nothing loaded: the coordinator installs the models
 *     there (list_models' nodes back to a, b, c), parity on the full world.
 * 10. the coordinator restarted: the members' models of the earlier one
 *     are dropped with the new one's first load (refused WF_E_BUSY, naming
 *     the node, until they are), which then succeeds; parity.
 * 11. SIGTERM stops every daemon cleanly (exit 0).
 *
 * Usage: test_cluster_models PATH_TO_WEFTD FIXTURES_DIR.
 */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support/clusterd.h"
#include "support/fluxio.h"
#include "support/wait.h"
#include "weft.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify lines */
#define HB 200            /* heartbeat_ms */
#define HB_TIMEOUT 3000   /* heartbeat_timeout_ms */
#define CLUSTER_TIMEOUT 1500

static char coordinator[64];
static char roots[3][256];      /* each node's model root */
static const char *fixtures;

typedef clusterd_node_t node_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Copy fixture `model` into node k's root as `as`. */
static bool put_model(int k, const char *model, const char *as)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -r '%.400s/%.100s' '%.300s/%.100s'", fixtures,
             model, roots[k], as);
    return system(cmd) == 0;
}

static bool node_start(node_t *d, const char *weftd, const char *name, int k)
{
    char data_addr[32], env[300];
    snprintf(data_addr, sizeof data_addr, "127.0.0.%d", 1 + k);
    snprintf(env, sizeof env, "WEFT_MODEL_ROOT=%s", roots[k]);
    clusterd_opts_t o = { .name = name, .tag = "cm", .coordinator = coordinator,
                          .mesh = "tp=2,ring=3", .data_address = data_addr,
                          .cluster_timeout_ms = CLUSTER_TIMEOUT,
                          .heartbeat_ms = HB,
                          .heartbeat_timeout_ms = HB_TIMEOUT,
                          .log_env = "CM_LOG_LEVEL", .env = env };
    return clusterd_node_start(d, weftd, &o);
}

static bool notify_wait(node_t *d, const char *prefix, int timeout_ms)
{
    return clusterd_node_wait(d, prefix, timeout_ms, NULL, 0);
}

/* Does the daemon at d hold model `name` (in `state` when not NULL)?
 * Its info into *ret when it does. */
static bool holds(node_t *d, const char *name, const char *state,
                  wf_model_info_t *ret)
{
    wf_client_t *c = NULL;
    if (wf_client_connect(d->p.endpoint, TIMEOUT_MS, &c) != WF_OK)
        return false;
    wf_model_info_t m[WF_MODELS_MAX];
    size_t n = 0;
    bool found = false;
    if (wf_list_models(c, m, WF_MODELS_MAX, &n) == WF_OK)
        for (size_t i = 0; i < n && i < WF_MODELS_MAX && !found; i++)
            if (strcmp(m[i].name, name) == 0 &&
                (!state || strcmp(m[i].state, state) == 0)) {
                found = true;
                if (ret)
                    *ret = m[i];
            }
    wf_client_destroy(&c);
    return found;
}

typedef struct holds_arg {
    node_t *d;
    const char *name, *state;
    bool want;
} holds_arg_t;

static bool holds_is(void *arg)
{
    const holds_arg_t *h = arg;
    return holds(h->d, h->name, h->state, NULL) == h->want;
}

/* Poll list_models (wait_for, WAIT_EVENT_MS) until `holds` answers `want`. */
static bool wait_holds(node_t *d, const char *name, const char *state, bool want)
{
    holds_arg_t h = { d, name, state, want };
    if (wait_for(holds_is, &h, WAIT_EVENT_MS))
        return true;
    fprintf(stderr, "node %s: model %s %s %s after %u ms\n", d->p.name, name,
            want ? "not" : "still", state ? state : "held", wait_bound_ms(WAIT_EVENT_MS));
    return false;
}

/* The coordinator and the nodes its models should be on, for models_on. */
typedef struct models_arg {
    node_t *a;
    const char *nodes;          /* list_models' `nodes` */
} models_arg_t;

/* Does the coordinator list "tiny" and "t2" ready on the nodes? */
static bool models_on(void *arg)
{
    const models_arg_t *m = arg;
    wf_model_info_t info;
    return holds(m->a, "tiny", "ready", &info) && strcmp(info.nodes, m->nodes) == 0 &&
           holds(m->a, "t2", "ready", &info) && strcmp(info.nodes, m->nodes) == 0;
}

/* Does the status of d say serving, on a world of 6 ranks? */
static bool serving6(void *arg)
{
    wf_status_info_t si;
    return clusterd_status(&((node_t *)arg)->p, &si) && si.world_size == 6 &&
           strcmp(si.cluster_state, "serving") == 0;
}


/* Inputs for flux-tiny whose sequences divide over 6 ranks (the fixtures'
 * 16 / 8 tokens do not divide by 3): B = 1, a 4 x 6 latent grid (24 image
 * tokens), 12 text tokens; randn-like values from a fixed LCG. */
typedef struct inputs6 {
    float hs[24 * 16], enc[12 * 32], pooled[16], t[1], img[24 * 3], txt[12 * 3];
    wf_tensor_t ths, tenc, tpool, tt, timg, ttxt;
    wf_flux_inputs_t in;
} inputs6_t;

static void inputs6_make(inputs6_t *x)
{
    uint64_t s = 99;
    float *all[3] = { x->hs, x->enc, x->pooled };
    size_t n[3] = { 24 * 16, 12 * 32, 16 };
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < n[k]; i++) {
            s = s * 6364136223846793005ULL + 1442695040888963407ULL;
            all[k][i] = (float)((double)(s >> 40) / (double)(1 << 24) * 2.0 - 1.0);
        }
    x->t[0] = 0.5f;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 6; c++) {
            float *id = &x->img[(r * 6 + c) * 3];
            id[0] = 0;
            id[1] = (float)r;
            id[2] = (float)c;
        }
    memset(x->txt, 0, sizeof x->txt);
    x->ths = (wf_tensor_t){ x->hs, WF_DTYPE_F32, 3, { 1, 24, 16 } };
    x->tenc = (wf_tensor_t){ x->enc, WF_DTYPE_F32, 3, { 1, 12, 32 } };
    x->tpool = (wf_tensor_t){ x->pooled, WF_DTYPE_F32, 2, { 1, 16 } };
    x->tt = (wf_tensor_t){ x->t, WF_DTYPE_F32, 1, { 1 } };
    x->timg = (wf_tensor_t){ x->img, WF_DTYPE_F32, 2, { 24, 3 } };
    x->ttxt = (wf_tensor_t){ x->txt, WF_DTYPE_F32, 2, { 12, 3 } };
    x->in = (wf_flux_inputs_t){ &x->ths, &x->tenc, &x->tpool, &x->tt, &x->timg,
                                &x->ttxt, NULL };
}

/* max |a - b| / max |b| over n floats. */
static double rel_err(const float *a, const float *b, size_t n)
{
    double e = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= e))
            e = d;      /* NaN counts */
        if (fabs((double)b[i]) > m)
            m = fabs((double)b[i]);
    }
    return m > 0 ? e / m : e;
}

static inputs6_t in6;
static float ref6[24 * 16];     /* a single-node weftd's output on in6 */
static wanio_t wio;             /* io-wan-tiny-f32: inputs, diffusers' output */
static uint64_t wan_rank_bytes; /* wan-tiny's per-rank size on a single node */

/* Forwards of "tiny" on the cluster now: the diffusers fixture (only
 * when the mesh's sequence degree divides its 16 / 8 tokens) and in6
 * against the single-node output. The largest errors into *ret_*. */
static bool forwards(wf_client_t *cl, const fluxio_t *io, const char *mesh,
                     double *ret_fix, double *ret_six)
{
    bool ok = true;
    wf_job_result_t res;
    *ret_fix = *ret_six = -1;
    wf_status_info_t si;
    bool fix = wf_status(cl, &si) == WF_OK &&
               16 % (si.mesh.ring * si.mesh.ulysses) == 0 &&
               8 % (si.mesh.ring * si.mesh.ulysses) == 0;
    for (int rep = 0; rep < 3; rep++) {     /* dp replicas take turns */
        if (fix) {
            wf_tensor_t out;
            if (!fluxio_output(io, WF_DTYPE_F32, &out))
                return false;
            wf_status_t st = wf_forward(cl, "tiny", &io->in, &out, &res);
            double e = st == WF_OK ? fluxio_error(io, &out) : 1.0;
            if (st != WF_OK)
                fprintf(stderr, "%s: forward: %s %s\n", mesh, wf_status_name(st),
                        wf_client_last_error(cl));
            ok = ok && st == WF_OK && e <= fluxio_tolerance(io);
            if (e > *ret_fix)
                *ret_fix = e;
            free(out.data);
        }
        float o[24 * 16];
        for (size_t i = 0; i < 24 * 16; i++)
            o[i] = NAN;
        wf_tensor_t out = { o, WF_DTYPE_F32, 3, { 1, 24, 16 } };
        wf_status_t st = wf_forward(cl, "tiny", &in6.in, &out, &res);
        double e = st == WF_OK ? rel_err(o, ref6, 24 * 16) : 1.0;
        if (st != WF_OK)
            fprintf(stderr, "%s: forward: %s %s\n", mesh, wf_status_name(st),
                    wf_client_last_error(cl));
        ok = ok && st == WF_OK && e <= 1e-5;
        if (e > *ret_six)
            *ret_six = e;
    }
    printf("  %-22s parity: diffusers fixture %s%.2e, 24+12 tokens vs single "
           "node %.2e  %s\n", mesh, *ret_fix < 0 ? "(n/a) " : "",
           *ret_fix < 0 ? 0.0 : *ret_fix, *ret_six, ok ? "ok" : "FAIL");
    return ok;
}

/* Forwards of "wan" on the cluster now, 3 (dp replicas take turns)
 * against diffusers, each on one replica's ring x ulysses devices (the
 * mesh's, from status); the largest error into *ret_err. */
static bool wan_forwards(wf_client_t *cl, const char *mesh, double *ret_err)
{
    *ret_err = INFINITY;
    wf_status_info_t si;
    if (wf_status(cl, &si) != WF_OK)
        return false;
    uint32_t devices = si.mesh.ring * si.mesh.ulysses * si.mesh.tp, got = 0;
    bool ok = true;
    *ret_err = 0;
    for (int rep = 0; rep < 3; rep++) {
        wf_status_t st;
        wf_job_result_t res;
        double e = wanio_forward(cl, "wan", &wio, &wio.ref, &st, &res);
        if (st != WF_OK)
            fprintf(stderr, "%s: wan forward: %s %s\n", mesh, wf_status_name(st),
                    wf_client_last_error(cl));
        ok = ok && st == WF_OK && e <= WANIO_TOLERANCE && res.devices == devices;
        got = res.devices;
        if (!(e <= *ret_err))
            *ret_err = e;
    }
    printf("  %-22s wan parity: diffusers fixture %.2e, on %u devices (want %u)  %s\n",
           mesh, *ret_err, got, devices, ok ? "ok" : "FAIL");
    return ok;
}

/* The reference: a single-node weftd (cpu:1) on node a's model root:
 * flux-tiny's output on in6, wan-tiny's per-rank size. */
static bool reference(const char *weftd)
{
    clusterd_t r;
    if (!clusterd_open(&r, "ref", "cmr"))
        return false;
    const char *argv[] = { weftd, "--listen", r.endpoint, "--devices", "cpu:1",
                           "--model-root", roots[0], "--log-level", "warning", NULL };
    bool ok = clusterd_exec(&r, argv, NULL);
    wf_client_t *c = NULL;
    ok = ok && wf_client_connect(r.endpoint, TIMEOUT_MS, &c) == WF_OK &&
         wf_load_model(c, "tiny", "tiny", NULL, NULL) == WF_OK;
    for (size_t i = 0; i < 24 * 16; i++)
        ref6[i] = NAN;
    wf_tensor_t out = { ref6, WF_DTYPE_F32, 3, { 1, 24, 16 } };
    ok = ok && wf_forward(c, "tiny", &in6.in, &out, NULL) == WF_OK;
    wf_model_info_t info;
    ok = ok && wf_load_model(c, "wan", "wan-tiny", NULL, &info) == WF_OK;
    wan_rank_bytes = ok ? info.rank_bytes : 0;
    wf_client_destroy(&c);
    clusterd_kill(&r, SIGTERM);
    clusterd_close(&r);
    return ok;
}

/* Load on client c; the status, the message into err. */
static wf_status_t load(wf_client_t *c, const char *name, const char *path,
                        wf_model_info_t *info, char *err, size_t err_len)
{
    wf_status_t st = wf_load_model(c, name, path, NULL, info);
    snprintf(err, err_len, "%s", st == WF_OK ? "" : wf_client_last_error(c));
    printf("load %s (%s): %s %s\n", name, path, wf_status_name(st), err);
    return st;
}

/* A load on the coordinator retried while the answer says to retry, for
 * wait_for: a node still drops an older model of that name (WF_E_BUSY
 * naming it), or the regroup that drops it runs (WF_E_UNAVAILABLE, "a
 * reconfiguration is running"). A refused load's own entry on the
 * coordinator goes away after the refusal (list_models shows it until
 * then, and the name is in use meanwhile: PROTOCOL.md 12.2), so each try
 * waits until the coordinator holds no model of the name. The last
 * status in `st`. */
typedef struct load_retry {
    node_t *coord;
    wf_client_t *c;
    const char *name, *path;
    wf_model_info_t *info;
    wf_status_t st;
    int busy;                   /* WF_E_BUSY answers */
    char err[512];
} load_retry_t;

static bool load_not_busy(void *arg)
{
    load_retry_t *l = arg;
    if (holds(l->coord, l->name, NULL, NULL))
        return false;
    l->st = load(l->c, l->name, l->path, l->info, l->err, sizeof l->err);
    l->busy += l->st == WF_E_BUSY;
    return l->st != WF_E_BUSY &&
           !(l->st == WF_E_UNAVAILABLE && strstr(l->err, "reconfiguration is running"));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *weftd = argv[1];
    fixtures = argv[2];
    double t_begin = now_s();
    fluxio_t io;
    if (!fluxio_load(&io, fixtures, "io-flux-tiny-f32.safetensors") ||
        !wanio_load(&wio, fixtures, "io-wan-tiny-f32.safetensors"))
        return 1;
    inputs6_make(&in6);
    char top[128];
    snprintf(top, sizeof top, "/tmp/weft-cm-%d", (int)getpid());
    CHECK(mkdir(top, 0755) == 0);
    for (int k = 0; k < 3; k++) {
        snprintf(roots[k], sizeof roots[k], "%s/%c", top, 'a' + k);
        CHECK(mkdir(roots[k], 0755) == 0);
        CHECK(put_model(k, "flux-tiny", "tiny"));
        CHECK(put_model(k, "wan-tiny", "wan-tiny"));
        /* "m2": the same everywhere but on c (bf16 weights, same config) */
        CHECK(put_model(k, k == 2 ? "flux-tiny-bf16" : "flux-tiny", "m2"));
        /* "m3": b's config differs (the guidance model) */
        CHECK(put_model(k, k == 1 ? "flux-tiny-guidance" : "flux-tiny", "m3"));
        /* "m4": missing on b */
        if (k != 1)
            CHECK(put_model(k, "flux-tiny", "m4"));
    }

    CHECK(reference(weftd));
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", test_port());
    node_t a, b, c;
    CHECK(node_start(&a, weftd, "a", 0));
    CHECK(notify_wait(&a, "READY=1", TIMEOUT_MS));
    CHECK(node_start(&b, weftd, "b", 1));
    CHECK(node_start(&c, weftd, "c", 2));

    /* 1. one world */
    CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                      TIMEOUT_MS));
    wf_client_t *cl = NULL, *cb = NULL;
    CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl) == WF_OK);
    CHECK(wf_client_connect(b.p.endpoint, TIMEOUT_MS, &cb) == WF_OK);
    char err[512];
    wf_model_info_t info;

    /* 2. a member refuses */
    CHECK(load(cb, "tiny", "tiny", NULL, err, sizeof err) == WF_E_NOT_COORDINATOR);
    CHECK(strstr(err, coordinator) != NULL);

    /* 3. on every node */
    double t0 = now_s();
    memset(&info, 0, sizeof info);
    CHECK(load(cl, "tiny", "tiny", &info, err, sizeof err) == WF_OK);
    printf("  loaded on 3 nodes in %.0f ms; nodes \"%s\"\n", (now_s() - t0) * 1e3,
           info.nodes);
    CHECK(strcmp(info.nodes, "a:0-1,b:2-3,c:4-5") == 0);
    CHECK(strcmp(info.state, "ready") == 0 && info.tp == 2);
    CHECK(holds(&a, "tiny", "ready", &info) && strcmp(info.nodes, "a:0-1,b:2-3,c:4-5") == 0);
    CHECK(holds(&b, "tiny", "ready", NULL));
    CHECK(holds(&c, "tiny", "ready", NULL));

    /* 4. files that differ on one node */
    CHECK(load(cl, "m2", "m2", NULL, err, sizeof err) == WF_E_MISMATCH);
    CHECK(strstr(err, "node c") && strstr(err, "tensor list"));
    CHECK(load(cl, "m3", "m3", NULL, err, sizeof err) == WF_E_MISMATCH);
    CHECK(strstr(err, "node b") && strstr(err, "config.json"));
    CHECK(load(cl, "m4", "m4", NULL, err, sizeof err) != WF_OK);
    CHECK(strstr(err, "node b") != NULL);
    for (int i = 0; i < 3; i++) {
        node_t *n = i == 0 ? &a : i == 1 ? &b : &c;
        CHECK(wait_holds(n, "m2", NULL, false));
        CHECK(wait_holds(n, "m3", NULL, false));
        CHECK(wait_holds(n, "m4", NULL, false));
    }

    /* 5. forward across nodes, on meshes that cross them (each
     * reconfiguration re-shards on every node) */
    static const struct { const char *name; wf_mesh_degrees_t m; } meshes[] = {
        { "tp=2 x ring=3", { 1, 3, 1, 2 } },
        { "ulysses=6", { 1, 1, 6, 1 } },
        { "dp=3 x tp=2", { 3, 1, 1, 2 } },
        { "tp=2 x ulysses=3", { 1, 1, 3, 2 } },
    };
    double worst_fix = 0, worst_six = 0;
    for (size_t i = 0; i < sizeof meshes / sizeof meshes[0]; i++) {
        if (i > 0)
            CHECK(wf_reconfigure(cl, &meshes[i].m, NULL) == WF_OK);
        double ef, e6;
        CHECK(forwards(cl, &io, meshes[i].name, &ef, &e6));
        worst_fix = ef > worst_fix ? ef : worst_fix;
        worst_six = e6 > worst_six ? e6 : worst_six;
    }
    printf("  worst parity: fixture %.2e, 24+12 tokens %.2e\n", worst_fix, worst_six);
    {
        wf_mesh_degrees_t back = { 1, 3, 1, 2 };
        CHECK(wf_reconfigure(cl, &back, NULL) == WF_OK);
    }

    /* 6. Wan across nodes. Its forward runs at tp 1 only, so the mesh
     * is re-cut first (ring x ulysses: the ring crosses the nodes, each
     * ulysses pair is one node's two devices); "tiny" stays resident and
     * is re-sharded alike */
    {
        static const struct { const char *name; wf_mesh_degrees_t m; } wmeshes[] = {
            { "ring=3 x ulysses=2", { 1, 3, 2, 1 } },
            { "ring=6", { 1, 6, 1, 1 } },
            { "dp=3 x ulysses=2", { 3, 1, 2, 1 } },
        };
        /* The coordinator answers the reconfigure once it runs the new
         * mesh, and the members may follow it later: the load goes at
         * once, each member checking its part at the coordinator's tp
         * (mload's "tp") */
        CHECK(wf_reconfigure(cl, &wmeshes[0].m, NULL) == WF_OK);
        memset(&info, 0, sizeof info);
        t0 = now_s();
        CHECK(load(cl, "wan", "wan-tiny", &info, err, sizeof err) == WF_OK);
        printf("  wan loaded on 3 nodes in %.0f ms; nodes \"%s\", %llu bytes per rank "
               "(single node: %llu)\n", (now_s() - t0) * 1e3, info.nodes,
               (unsigned long long)info.rank_bytes, (unsigned long long)wan_rank_bytes);
        CHECK(strcmp(info.nodes, "a:0-1,b:2-3,c:4-5") == 0);
        CHECK(strcmp(info.state, "ready") == 0 && strcmp(info.family, "wan") == 0);
        node_t *abc[3] = { &a, &b, &c };
        for (int i = 0; i < 3; i++) {
            wf_model_info_t ni;
            memset(&ni, 0, sizeof ni);
            bool held = holds(abc[i], "wan", "ready", &ni);
            CHECK(held && strcmp(ni.family, "wan") == 0 && ni.tp == 1 &&
                      ni.rank_bytes > 0 && ni.rank_bytes == wan_rank_bytes,
                  "node %s: wan %s, family %s, tp %u, %llu bytes per rank (single node: "
                  "%llu)", abc[i]->p.name, held ? "ready" : "not ready", ni.family, ni.tp,
                  (unsigned long long)ni.rank_bytes, (unsigned long long)wan_rank_bytes);
        }
        double worst = 0;
        for (size_t i = 0; i < sizeof wmeshes / sizeof wmeshes[0]; i++) {
            if (i > 0)
                CHECK(wf_reconfigure(cl, &wmeshes[i].m, NULL) == WF_OK);
            double e;
            CHECK(wan_forwards(cl, wmeshes[i].name, &e));
            worst = e > worst ? e : worst;
        }
        printf("  worst wan parity across nodes: %.2e\n", worst);
        /* tp 2 x ring 3 with the Wan model resident: re-sharded on every
         * node, its forwards across the nodes */
        wf_mesh_degrees_t tp2 = { 1, 3, 1, 2 };
        wf_status_t rs = wf_reconfigure(cl, &tp2, NULL);
        CHECK(rs == WF_OK, "tp 2 x ring 3 with wan resident: %s %s", wf_status_name(rs),
              wf_client_last_error(cl));
        double e;
        CHECK(wan_forwards(cl, "tp=2 x ring=3", &e));
        printf("  wan on tp=2 x ring=3 across the nodes: %.2e\n", e);
        CHECK(wf_unload_model(cl, "wan") == WF_OK);
        CHECK(!holds(&a, "wan", NULL, NULL));
        CHECK(wait_holds(&b, "wan", NULL, false));
        CHECK(wait_holds(&c, "wan", NULL, false));
    }

    /* 7. unload, load again */
    CHECK(wf_unload_model(cl, "tiny") == WF_OK);
    CHECK(!holds(&a, "tiny", NULL, NULL));
    CHECK(wait_holds(&b, "tiny", NULL, false));
    CHECK(wait_holds(&c, "tiny", NULL, false));
    CHECK(load(cl, "tiny", "tiny", NULL, err, sizeof err) == WF_OK);
    CHECK(holds(&c, "tiny", "ready", NULL));

    /* 8. a member that does not answer. The bound is the point: the load
     * ends when cluster_timeout_ms passes without c's answer to a step,
     * or c is found lost (heartbeat_timeout_ms) during one; the margin is
     * clusterd's for a loss (CLUSTERD_LOSS_MARGIN_MS), and a load that
     * waited for anything longer (the client's own timeout) fails. */
    kill(c.p.pid, SIGSTOP);
    t0 = now_s();
    wf_status_t st = load(cl, "t2", "tiny", NULL, err, sizeof err);
    double dt = now_s() - t0;
    uint32_t bound = clusterd_loss_bound_ms(CLUSTER_TIMEOUT + HB_TIMEOUT);
    printf("  with c stopped: %s after %.0f ms (bound %u ms)\n", wf_status_name(st),
           dt * 1e3, bound);
    CHECK(st == WF_E_NODE_LOST || st == WF_E_UNAVAILABLE);
    CHECK(strstr(err, "c") != NULL);
    CHECK(dt * 1e3 <= bound);
    kill(c.p.pid, SIGCONT);
    CHECK(!holds(&a, "t2", NULL, NULL));
    /* the world may re-form with c (it was lost, or not): serving again */
    CHECK(wait_for(serving6, &a, WAIT_EVENT_MS));
    /* c may still be dropping the first t2 (WF_E_BUSY naming c): retry */
    load_retry_t lr = { .coord = &a, .c = cl, .name = "t2", .path = "tiny" };
    CHECK(wait_for(load_not_busy, &lr, WAIT_EVENT_MS));
    CHECK(lr.st == WF_OK);

    /* 9. node c lost with a forward in flight on it. c restarts with its
     * job parts held (WEFT_TEST_HOLD_JOBS), so a forward across it (tp=2 x
     * ring=3: every forward has ranks on c) cannot end before c is
     * killed; then the models stay on the smaller world (a, b: 4 ranks),
     * parity there; c back (restarted, nothing loaded): the models are
     * installed there, parity at full size */
    {
        models_arg_t abc = { &a, "a:0-1,b:2-3,c:4-5" };
        clusterd_hold_t hold;
        CHECK(clusterd_hold_open(&hold, "cm"));
        clusterd_node_close(&c);
        CHECK(notify_wait(&a, "STATUS=cluster degraded:", TIMEOUT_MS));
        /* the one environment entry of clusterd_opts_t is c's model root:
         * the hook comes from this process's environment, which c
         * inherits (the threads running now, notify readers and the
         * clients' ZeroMQ threads, read no environment) */
        CHECK(setenv("WEFT_TEST_HOLD_JOBS", hold.path, 1) == 0);
        CHECK(node_start(&c, weftd, "c", 2));
        unsetenv("WEFT_TEST_HOLD_JOBS");
        CHECK(notify_wait(&a, "STATUS=cluster serving:", TIMEOUT_MS));
        CHECK(wait_for(models_on, &abc, WAIT_EVENT_MS));

        float o[2][24 * 16];
        wf_tensor_t out[2];
        wf_job_t *fj[2] = { NULL, NULL };
        for (int i = 0; i < 2; i++) {
            for (size_t k = 0; k < 24 * 16; k++)
                o[i][k] = NAN;
            out[i] = (wf_tensor_t){ o[i], WF_DTYPE_F32, 3, { 1, 24, 16 } };
            CHECK(wf_forward_submit(cl, "tiny", &in6.in, &out[i], NULL, &fj[i]) == WF_OK);
        }
        /* c's two ranks hold the first forward's parts; the second waits
         * for the devices at the coordinator */
        CHECK(clusterd_wait_busy(&c.p, 2, WAIT_EVENT_MS));
        wf_status_info_t si;
        CHECK(wf_status(cl, &si) == WF_OK && si.in_flight == 1 && si.queue_depth == 1);
        double tk = now_s();
        kill(c.p.pid, SIGKILL);
        CHECK(clusterd_wait_exit(&c.p, TIMEOUT_MS));
        wf_job_result_t res;
        memset(&res, 0, sizeof res);
        if (fj[0]) {
            wf_job_wait(cl, fj[0], TIMEOUT_MS);
            wf_job_result(fj[0], &res);
        }
        double t_lost = (now_s() - tk) * 1e3;
        uint32_t lost_bound = clusterd_loss_bound_ms(HB_TIMEOUT);
        const char *msg = fj[0] ? wf_job_error(fj[0]) : "";
        printf("  forward held on c when it was killed: %s after %.0f ms (bound %u "
               "ms): %s\n", wf_status_name(res.status), t_lost, lost_bound, msg);
        CHECK(res.status == WF_E_NODE_LOST && strstr(msg, "node(s) c lost") != NULL);
        CHECK(t_lost <= lost_bound);
        memset(&res, 0, sizeof res);
        if (fj[1]) {
            wf_job_wait(cl, fj[1], TIMEOUT_MS);
            wf_job_result(fj[1], &res);
        }
        double e1 = res.status == WF_OK ? rel_err(o[1], ref6, 24 * 16) : 1.0;
        printf("  forward queued behind it: %s %s, on %u devices, parity %.2e\n",
               wf_status_name(res.status), fj[1] ? wf_job_error(fj[1]) : "",
               res.devices, e1);
        CHECK(res.status == WF_OK && res.devices == 4 && e1 <= 1e-5);
        for (int i = 0; i < 2; i++)
            wf_job_destroy(cl, &fj[i]);
        CHECK(notify_wait(&a, "STATUS=cluster degraded:", TIMEOUT_MS));
        printf("  c killed: the world re-formed without it in %.0f ms\n",
               (now_s() - tk) * 1e3);
        double ef, e6;
        CHECK(forwards(cl, &io, "smaller world (a, b)", &ef, &e6));
        CHECK(holds(&a, "tiny", "ready", &info));
        printf("  tiny on the smaller world: nodes \"%s\", tp %u\n", info.nodes,
               info.tp);
        CHECK(strcmp(info.nodes, "a:0-1,b:2-3") == 0);

        clusterd_node_close(&c);
        clusterd_hold_close(&hold);
        double tr = now_s();
        CHECK(node_start(&c, weftd, "c", 2));
        CHECK(notify_wait(&a, "STATUS=cluster serving:", TIMEOUT_MS));
        bool back = wait_for(models_on, &abc, WAIT_EVENT_MS);
        printf("  c restarted: the models installed there %.0f ms after its start\n",
               (now_s() - tr) * 1e3);
        CHECK(back);
        CHECK(holds(&c, "tiny", "ready", NULL));
        CHECK(forwards(cl, &io, "tp=2 x ring=3 again", &ef, &e6));
    }

    /* 10. the coordinator restarted: the members' models of the earlier
     * one are dropped when the new one loads (a load of the same name is
     * refused WF_E_BUSY meanwhile), then the load and forwards work */
    {
        wf_client_destroy(&cl);
        kill(a.p.pid, SIGKILL);
        CHECK(clusterd_wait_exit(&a.p, TIMEOUT_MS));
        clusterd_node_close(&a);
        double tr = now_s();
        CHECK(node_start(&a, weftd, "a", 0));
        CHECK(notify_wait(&a, "STATUS=cluster serving: epoch 1, 3 node(s), 6 rank(s)",
                          TIMEOUT_MS));
        printf("  coordinator restarted: serving again after %.0f ms\n",
               (now_s() - tr) * 1e3);
        CHECK(wf_client_connect(a.p.endpoint, TIMEOUT_MS, &cl) == WF_OK);
        load_retry_t l9 = { .coord = &a, .c = cl, .name = "tiny", .path = "tiny",
                            .info = &info };
        CHECK(wait_for(load_not_busy, &l9, WAIT_EVENT_MS));
        CHECK(l9.st == WF_OK && l9.busy > 0);
        CHECK(wait_holds(&b, "t2", NULL, false));   /* stale, dropped */
        double ef, e6;
        CHECK(forwards(cl, &io, "after the restart", &ef, &e6));
    }

    wf_client_destroy(&cl);
    wf_client_destroy(&cb);

    /* 11. clean stop */
    node_t *all[3] = { &a, &b, &c };
    for (int i = 2; i >= 0; i--) {
        clusterd_kill(&all[i]->p, SIGTERM);
        CHECK(all[i]->p.reaped && WIFEXITED(all[i]->p.exit_status) &&
              WEXITSTATUS(all[i]->p.exit_status) == 0);
        clusterd_node_close(all[i]);
    }
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", top);
    CHECK(system(cmd) == 0);
    fluxio_free(&io);
    wanio_free(&wio);
    printf("test_cluster_models: %s (%d failure(s)), %.1f s\n",
           failed ? "FAILED" : "ok", failed, now_s() - t_begin);
    return failed ? 1 : 0;
}
