/* test_models.c — end to end: resident FLUX models in a real weftd.
 *
 * usage: test_models PATH_TO_WEFTD FIXTURES_DIR
 *
 * A temporary model root gets copies of the diffusers-made fixtures
 * (flux-tiny f32 single file, flux-tiny-guidance f32 sharded + index.json,
 * flux-tiny-bf16) and broken checkpoints written here. One weftd with 4
 * CPU devices loads the three models through libweft, then, for every
 * mesh of the parity list (tp 1, 2, 4; ulysses 2; ring 2; tp 2 x ulysses
 * 2; and ring 2 x ulysses 2), reconfigures (a live re-shard of every
 * resident model) and runs each model's forward on its fixture inputs,
 * compared with diffusers' output (fluxio.h tolerances: f32 1e-5 of
 * max |ref| against diffusers' float64 run, bf16 2e-2 against diffusers'
 * bf16 run). Then:
 *   - f16 weights (flux-tiny rounded here) at tp 1, 2, 4 within 2e-3;
 *   - weights_already_sharded: `weftctl shard`'s writer makes tp = 2 files,
 *     loaded under tp = 2 and run (same output); refused under tp = 4;
 *   - bad checkpoints (missing tensor, wrong shape, truncated file,
 *     overlapping offsets, duplicate names, a symlink leaving the root,
 *     a ".." path, a missing directory): each refused with its code and
 *     a message naming the problem, nothing listed, the daemon serving;
 *   - a name in use, an unknown model, wrong input shapes: refused;
 *   - a load while a reconfiguration drains a running job (held at its
 *     start by WEFT_TEST_HOLD_JOBS until the test lets it go, so the
 *     drain lasts as long as the test needs): the checkpoint is read
 *     meanwhile, its install waits and comes after the reconfiguration,
 *     at the new tp; an unload meanwhile: WF_E_BUSY; a second load (a
 *     48 MB checkpoint) while the first one is loading: WF_E_BUSY, and
 *     loaded once the first is in;
 *   - unload: gone from the list, its forward refused, the others run;
 *   - a daemon whose devices are too small refuses the load with
 *     WF_E_NO_MEMORY before reading weights;
 *   - on cpu:6, a reconfiguration to tp = 3 (4 heads) is refused with
 *     diffusers' message and changes nothing (mesh, epoch; forward runs);
 *     then flux-tiny (16 image, 8 text tokens, 4 heads) on meshes that
 *     divide none of them (ring 3, ulysses 3, ring 3 x ulysses 2, tp 2 x
 *     ring 3) against diffusers' output.
 * The first daemon reports to an sd_notify socket of the test's: a load
 * sends EXTEND_TIMEOUT_USEC with a "loading model" STATUS. It holds every
 * job part at its start for a byte from the test until the drain case
 * opens that gate (only that case's job is held: it comes first).
 * Every daemon exits 0 on SIGTERM. Every wait is for an event (a reply,
 * status, a notify datagram), bounded by WAIT_EVENT_MS.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "weft.h"
#include "flux_config.h"
#include "model_host.h"
#include "model_root.h"
#include "safetensors.h"
#include "support/check.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/st_writer.h"
#include "support/wait.h"
#include "tensor.h"

#define WF_PROTO_ERROR_MAX_COPY 512

/* ---- files ----------------------------------------------------------------- */

static bool copy_file(const char *from, const char *to, long cut)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    bool ok = a && b;
    if (ok) {
        fseek(a, 0, SEEK_END);
        long n = ftell(a) - cut;
        fseek(a, 0, SEEK_SET);
        char buf[65536];
        while (ok && n > 0) {
            size_t k = fread(buf, 1, n < (long)sizeof buf ? (size_t)n : sizeof buf, a);
            ok = k > 0 && fwrite(buf, 1, k, b) == k;
            n -= (long)k;
        }
    }
    if (a)
        fclose(a);
    if (b && fclose(b) != 0)
        ok = false;
    return ok;
}

/* Copy the regular files of directory src into a new directory dst. */
static bool copy_dir(const char *src, const char *dst)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", src, dst);
    return system(cmd) == 0;
}

static char root[256];

static void path_of(char *buf, size_t len, const char *rel)
{
    snprintf(buf, len, "%s/%s", root, rel);
}

/* flux-tiny's checkpoint rewritten: `drop` left out; `reshape` written
 * with one element fewer in its first dim; every tensor in f16 when
 * `half`. */
static bool rewrite(const char *dir, const char *drop, const char *reshape,
                    bool half)
{
    char p[512];
    path_of(p, sizeof p, dir);
    if (mkdir(p, 0755) != 0)
        return false;
    char from[512], to[700];
    path_of(from, sizeof from, "flux-tiny/config.json");
    snprintf(to, sizeof to, "%s/config.json", p);
    if (!copy_file(from, to, 0))
        return false;
    int rfd;
    char err[256];
    wf_safetensors_t *st = NULL;
    if (wf_model_root_open(root, &rfd, err, sizeof err) != WF_OK)
        return false;
    wf_status_t s = wf_safetensors_open(rfd, "flux-tiny/" WF_DIFFUSERS_WEIGHTS,
                                        NULL, &st, err, sizeof err);
    close(rfd);
    if (s != WF_OK)
        return false;
    size_t n = wf_safetensors_count(st), k = 0;
    st_w_tensor_t *t = calloc(n, sizeof *t);
    void **conv = calloc(n, sizeof *conv);
    for (size_t i = 0; t && conv && i < n; i++) {
        const wf_st_tensor_t *d = wf_safetensors_tensor(st, i);
        if (drop && strcmp(d->name, drop) == 0)
            continue;
        t[k].name = d->name;
        t[k].dtype = half ? "F16" : "F32";
        t[k].rank = d->rank;
        memcpy(t[k].shape, d->shape, sizeof d->shape);
        t[k].data = wf_safetensors_data(st, i);
        t[k].nbytes = d->nbytes;
        if (half) {
            float *f = malloc(d->nbytes + 4);
            conv[i] = malloc(d->nbytes / 2 + 2);
            if (f && conv[i]) {
                memcpy(f, t[k].data, d->nbytes);
                wf_convert_from_f32(conv[i], WF_DTYPE_F16, f, (size_t)d->numel);
            }
            free(f);
            t[k].data = conv[i];
            t[k].nbytes = d->nbytes / 2;
        }
        if (reshape && strcmp(d->name, reshape) == 0) {
            t[k].shape[0]--;
            t[k].nbytes = d->nbytes / (uint64_t)d->shape[0] * (uint64_t)(d->shape[0] - 1);
        }
        k++;
    }
    snprintf(to, sizeof to, "%s/%s", p, WF_DIFFUSERS_WEIGHTS);
    bool ok = t && conv && st_write(to, t, k, NULL, 0) == 0;
    for (size_t i = 0; conv && i < n; i++)
        free(conv[i]);
    free(conv);
    free(t);
    wf_safetensors_close(&st);
    return ok;
}

/* A model directory with flux-tiny's config and a raw safetensors file. */
static bool raw_model(const char *dir, const char *header, size_t data_len)
{
    char p[512], from[512], to[700];
    path_of(p, sizeof p, dir);
    path_of(from, sizeof from, "flux-tiny/config.json");
    snprintf(to, sizeof to, "%s/config.json", p);
    if (mkdir(p, 0755) != 0 || !copy_file(from, to, 0))
        return false;
    snprintf(to, sizeof to, "%s/%s", p, WF_DIFFUSERS_WEIGHTS);
    return st_write_raw(to, header, data_len) == 0;
}

/* A FLUX checkpoint of about 48 MB (hidden 1024 = 8 heads x 128, one
 * block of each kind; weights all 0.01) under the root at `dir`. */
static bool big_model(const char *dir)
{
    static const char *cfgtext =
        "{\"_class_name\": \"FluxTransformer2DModel\", \"patch_size\": 1, "
        "\"in_channels\": 64, \"out_channels\": null, \"num_layers\": 1, "
        "\"num_single_layers\": 1, \"attention_head_dim\": 128, "
        "\"num_attention_heads\": 8, \"joint_attention_dim\": 256, "
        "\"pooled_projection_dim\": 64, \"guidance_embeds\": false, "
        "\"axes_dims_rope\": [16, 56, 56]}";
    char p[512], f[700];
    path_of(p, sizeof p, dir);
    snprintf(f, sizeof f, "%s/config.json", p);
    FILE *cf = NULL;
    if (mkdir(p, 0755) != 0 || !(cf = fopen(f, "w")) || fputs(cfgtext, cf) < 0) {
        if (cf)
            fclose(cf);
        return false;
    }
    fclose(cf);
    wf_flux_config_t cfg;
    wf_tensor_spec_t *sp = NULL;
    size_t n = 0;
    char err[256];
    if (wf_flux_config_parse(cfgtext, strlen(cfgtext), 0, "big", &cfg, err,
                             sizeof err) != WF_OK ||
        wf_flux_expected_tensors(&cfg, &sp, &n, err, sizeof err) != WF_OK)
        return false;
    st_w_tensor_t *t = calloc(n, sizeof *t);
    size_t most = 0;
    for (size_t i = 0; t && i < n; i++) {
        size_t ne = (size_t)sp[i].shape[0] * (sp[i].rank == 2 ? (size_t)sp[i].shape[1] : 1);
        most = ne > most ? ne : most;
    }
    float *data = t ? malloc(most * sizeof *data) : NULL;
    for (size_t i = 0; data && i < most; i++)
        data[i] = 0.01f;
    for (size_t i = 0; data && i < n; i++) {
        size_t ne = (size_t)sp[i].shape[0] * (sp[i].rank == 2 ? (size_t)sp[i].shape[1] : 1);
        t[i].name = sp[i].name;
        t[i].dtype = "F32";
        t[i].rank = sp[i].rank;
        t[i].shape[0] = sp[i].shape[0];
        t[i].shape[1] = sp[i].shape[1];
        t[i].data = data;
        t[i].nbytes = ne * sizeof(float);
    }
    snprintf(f, sizeof f, "%s/%s", p, WF_DIFFUSERS_WEIGHTS);
    bool ok = data && st_write(f, t, n, NULL, 0) == 0;
    free(data);
    free(t);
    free(sp);
    return ok;
}

/* A load from its own connection (its call blocks until the model is
 * installed); the model's info on success. */
typedef struct load_arg {
    const char *endpoint, *name, *path;
    wf_status_t st;
    wf_model_info_t info;
} load_arg_t;

static void *load_main(void *arg)
{
    load_arg_t *a = arg;
    wf_client_t *c = NULL;
    a->st = wf_client_connect(a->endpoint, (int)WAIT_EVENT_MS, &c);
    if (a->st == WF_OK)
        a->st = wf_load_model(c, a->name, a->path, NULL, &a->info);
    wf_client_destroy(&c);
    return NULL;
}

/* ---- the daemon ------------------------------------------------------------ */

/* The sd_notify socket the first daemon reports to (NOTIFY_SOCKET). */
static int notify_fd = -1;
static char notify_path[300];

static bool notify_open(void)
{
    snprintf(notify_path, sizeof notify_path, "%s.notify", root);
    notify_fd = spawn_notify_bind(notify_path, 0);
    return notify_fd >= 0;
}

/* Wait on the socket for a notify datagram holding `needle` (an event:
 * WAIT_EVENT_MS at most); the matching datagram goes to buf. */
static bool notify_wait(const char *needle, char *buf, size_t len)
{
    double end = now_s() + wait_bound_ms(WAIT_EVENT_MS) / 1e3;
    while (now_s() < end) {
        struct pollfd p = { .fd = notify_fd, .events = POLLIN };
        if (poll(&p, 1, (int)((end - now_s()) * 1000) + 1) <= 0)
            continue;
        ssize_t n = recv(notify_fd, buf, len - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (strstr(buf, needle))
            return true;
    }
    return false;
}

/* The first daemon's job hold (WEFT_TEST_HOLD_JOBS): a FIFO beside the
 * root, and the test's end of it, opened for reading and writing (the
 * open waits for no reader, a write never fails for want of one). */
static char hold_path[300];
static int hold_fd = -1;

static bool hold_make(void)
{
    snprintf(hold_path, sizeof hold_path, "%s.hold", root);
    if (mkfifo(hold_path, 0600) != 0)
        return false;
    hold_fd = open(hold_path, O_RDWR | O_CLOEXEC);
    return hold_fd >= 0;
}

/* Open the gate for good: one 'a' for each of the 4 devices (a worker
 * that reads one stops holding, and so do the others). */
static bool hold_open_gate(void)
{
    static const char a[4] = { 'a', 'a', 'a', 'a' };
    ssize_t w;
    do
        w = write(hold_fd, a, sizeof a);
    while (w < 0 && errno == EINTR);
    return w == (ssize_t)sizeof a;
}

/* weftd with dp = its device count. `held`: every job part waits at its
 * start for a byte from the hold FIFO, and a reconfiguration waits for
 * running jobs for ever (reconfigure_timeout_ms 0), however long the
 * test holds one. */
static pid_t start_daemon(const char *weftd, const char *endpoint,
                          const char *devices, const char *memory, bool held)
{
    char dp[16];
    snprintf(dp, sizeof dp, "dp=%s", strchr(devices, ':') + 1);
    const char *argv[16] = { weftd, "--devices", devices, "--mesh", dp, "--listen",
                             endpoint, "--model-root", root, "--cpu-memory", memory,
                             "--log-level", "warning" };
    if (held) {
        argv[13] = "--reconfigure-timeout-ms";
        argv[14] = "0";
    }
    /* the daemon takes the test's environment: the hook for this one only
     * (no other thread runs yet) */
    if (held)
        setenv("WEFT_TEST_HOLD_JOBS", hold_path, 1);
    pid_t pid = spawn_daemon(argv, notify_fd >= 0 ? notify_path : NULL);
    if (held)
        unsetenv("WEFT_TEST_HOLD_JOBS");
    return pid;
}

/* A reconfiguration from its own connection (its call blocks while a
 * long job drains). */
typedef struct reconf_arg {
    const char *endpoint;
    wf_mesh_degrees_t mesh;
    wf_status_t st;
} reconf_arg_t;

static void *reconf_main(void *arg)
{
    reconf_arg_t *a = arg;
    wf_client_t *c = NULL;
    a->st = wf_client_connect(a->endpoint, (int)WAIT_EVENT_MS, &c);
    if (a->st == WF_OK)
        a->st = wf_reconfigure(c, &a->mesh, NULL);
    wf_client_destroy(&c);
    return NULL;
}

/* wait_for's condition on the daemon's status through c: a job running
 * (in_flight 1), or with `reconfiguring`, a reconfiguration draining. */
typedef struct status_wait {
    wf_client_t *c;
    bool reconfiguring;
    wf_status_info_t si;   /* the last status read */
} status_wait_t;

static bool status_reached(void *arg)
{
    status_wait_t *w = arg;
    if (wf_status(w->c, &w->si) != WF_OK)
        return false;
    return w->reconfiguring ? w->si.reconfiguring == 1 : w->si.in_flight == 1;
}

/* ---- models --------------------------------------------------------------- */

typedef struct model {
    const char *name;     /* in the daemon */
    const char *dir;      /* under the root */
    const char *io;       /* fixture file */
    fluxio_t data;
} model_t;

static model_t models[] = {
    { .name = "tiny", .dir = "flux-tiny", .io = "io-flux-tiny-f32.safetensors" },
    { .name = "guidance", .dir = "flux-tiny-guidance",
      .io = "io-flux-tiny-guidance-f32.safetensors" },
    { .name = "tiny-bf16", .dir = "flux-tiny-bf16",
      .io = "io-flux-tiny-bf16.safetensors" },
};
#define N_MODELS (sizeof models / sizeof models[0])

/* Run model m's forward; its error against the reference (INFINITY on
 * failure, with the status in *ret_st). */
static double run_forward(wf_client_t *c, const char *name, const fluxio_t *io,
                          wf_status_t *ret_st)
{
    wf_tensor_t out;
    if (!fluxio_output(io, io->in_dtype, &out)) {
        /* the caller checks the status: a failed allocation is one too */
        if (ret_st)
            *ret_st = WF_E_NO_MEMORY;
        return INFINITY;
    }
    wf_job_result_t res;
    wf_status_t st = wf_forward(c, name, &io->in, &out, &res);
    double e = st == WF_OK ? fluxio_error(io, &out) : INFINITY;
    if (ret_st)
        *ret_st = st;
    free(out.data);
    return e;
}

static bool listed(wf_client_t *c, const char *name, wf_model_info_t *ret)
{
    wf_model_info_t all[WF_MODELS_MAX];
    size_t n = 0;
    if (wf_list_models(c, all, WF_MODELS_MAX, &n) != WF_OK)
        return false;
    for (size_t i = 0; i < n && i < WF_MODELS_MAX; i++)
        if (strcmp(all[i].name, name) == 0) {
            if (ret)
                *ret = all[i];
            return true;
        }
    return false;
}

/* wait_for's condition: model `name` is listed as loading with every
 * byte of its checkpoint read (its install not begun). */
typedef struct read_wait {
    wf_client_t *c;
    const char *name;
    bool listed;
    wf_model_info_t info;   /* the last listing of it */
} read_wait_t;

static bool model_read(void *arg)
{
    read_wait_t *r = arg;
    r->listed = listed(r->c, r->name, &r->info);
    return r->listed && strcmp(r->info.state, "loading") == 0 && r->info.bytes_total > 0 &&
           r->info.bytes_loaded == r->info.bytes_total;
}

/* A load that must be refused with `want` and a message holding `needle`. */
static void refused_load(wf_client_t *c, const char *name, const char *path,
                         const wf_load_opts_t *opts, wf_status_t want,
                         const char *needle)
{
    wf_status_t st = wf_load_model(c, name, path, opts, NULL);
    char msg[WF_PROTO_ERROR_MAX_COPY];
    snprintf(msg, sizeof msg, "%s", wf_client_last_error(c));
    CHECK(st == want, "load %s: %s (%s), expected %s", path, wf_status_name(st),
          msg, wf_status_name(want));
    CHECK(strstr(msg, needle) != NULL, "load %s: message '%s' lacks '%s'", path,
          msg, needle);
    CHECK(!listed(c, name, NULL), "refused model %s is listed", name);
    printf("  refused %-22s %-18s %s\n", path, wf_status_name(st), msg);
}

static void set_mesh(wf_client_t *c, uint32_t dp, uint32_t ring, uint32_t uly,
                     uint32_t tp)
{
    wf_mesh_degrees_t m = { dp, ring, uly, tp };
    uint64_t epoch = 0;
    wf_status_t st = wf_reconfigure(c, &m, &epoch);
    CHECK(st == WF_OK, "reconfigure dp=%u ring=%u ulysses=%u tp=%u: %s %s", dp,
          ring, uly, tp, wf_status_name(st), wf_client_last_error(c));
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    const char *weftd = argv[1], *fixtures = argv[2];
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);

    snprintf(root, sizeof root, "/tmp/weft-models-XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    char outside[300];
    snprintf(outside, sizeof outside, "%s-outside", root);
    for (size_t i = 0; i < N_MODELS; i++) {
        char src[512], dst[512];
        snprintf(src, sizeof src, "%s/%s", fixtures, models[i].dir);
        path_of(dst, sizeof dst, models[i].dir);
        if (!copy_dir(src, dst) || !fluxio_load(&models[i].data, fixtures, models[i].io)) {
            fprintf(stderr, "cannot prepare %s\n", models[i].dir);
            return 1;
        }
    }
    /* broken checkpoints */
    bool prep = rewrite("bad-missing", "proj_out.bias", NULL, false) &&
                rewrite("bad-shape", NULL, "x_embedder.weight", false) &&
                rewrite("flux-tiny-f16", NULL, NULL, true);
    char p[512], q[512];
    path_of(p, sizeof p, "bad-truncated");
    prep = prep && mkdir(p, 0755) == 0;
    path_of(q, sizeof q, "flux-tiny/config.json");
    snprintf(p, sizeof p, "%s/bad-truncated/config.json", root);
    prep = prep && copy_file(q, p, 0);
    path_of(q, sizeof q, "flux-tiny/" WF_DIFFUSERS_WEIGHTS);
    snprintf(p, sizeof p, "%s/bad-truncated/%s", root, WF_DIFFUSERS_WEIGHTS);
    prep = prep && copy_file(q, p, 100);
    prep = prep && raw_model("bad-overlap",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
    prep = prep && raw_model("bad-duplicate",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8);
    /* a symlink leaving the root, to a good copy outside */
    char src[512];
    snprintf(src, sizeof src, "%s/flux-tiny", fixtures);
    prep = prep && copy_dir(src, outside);
    path_of(p, sizeof p, "escape");
    prep = prep && symlink(outside, p) == 0;
    if (!prep) {
        fprintf(stderr, "cannot prepare the bad checkpoints: %s\n", strerror(errno));
        return 1;
    }

    char endpoint[300];
    snprintf(endpoint, sizeof endpoint, "ipc://%s.sock", root);
    if (!notify_open() || !hold_make()) {
        fprintf(stderr, "notify socket or job hold: %s\n", strerror(errno));
        return 1;
    }
    if (!big_model("flux-big")) {
        fprintf(stderr, "cannot write the big checkpoint\n");
        return 1;
    }
    pid_t pid = start_daemon(weftd, endpoint, "cpu:4", "0", true);
    if (!wait_ready(endpoint)) {
        fprintf(stderr, "weftd did not start\n");
        kill(pid, SIGKILL);
        return 1;
    }
    wf_client_t *c = NULL;
    wf_client_connect(endpoint, (int)WAIT_EVENT_MS, &c);
    size_t n = 99;
    CHECK(wf_list_models(c, NULL, 0, &n) == WF_OK && n == 0, "fresh daemon "
          "lists %zu models", n);

    /* ---- load the three models ---- */
    for (size_t i = 0; i < N_MODELS; i++) {
        wf_model_info_t info;
        double t0 = now_s();
        wf_status_t st = wf_load_model(c, models[i].name, models[i].dir, NULL, &info);
        CHECK(st == WF_OK, "load %s: %s %s", models[i].dir, wf_status_name(st),
              wf_client_last_error(c));
        CHECK(st != WF_OK || (strcmp(info.state, "ready") == 0 && info.params > 0 &&
                              info.bytes_loaded == info.bytes_total && info.tp == 1 &&
                              info.rank_bytes > 0),
              "info of %s: state %s params %" PRIu64 " loaded %" PRIu64 "/%" PRIu64
              " tp %u", models[i].name, info.state, info.params, info.bytes_loaded,
              info.bytes_total, info.tp);
        printf("loaded %-10s %-20s %s %8" PRIu64 " params %7.1f KiB in %.1f ms\n",
               models[i].name, models[i].dir, info.dtype, info.params,
               (double)info.bytes_total / 1024, (now_s() - t0) * 1e3);
    }
    CHECK(wf_list_models(c, NULL, 0, &n) == WF_OK && n == N_MODELS, "lists %zu", n);
    /* systemd heard of each load (the start-up / reload timeouts stretch
     * while a model loads) */
    {
        char dg[512];
        bool got = notify_wait("EXTEND_TIMEOUT_USEC=", dg, sizeof dg);
        CHECK(got && strstr(dg, "STATUS=loading model"), "no EXTEND_TIMEOUT_USEC with a "
              "loading STATUS while models loaded (last: %s)", got ? dg : "none");
        if (got)
            printf("sd_notify while loading: %s\n", strchr(dg, '\n') ? strchr(dg, '\n') + 1 : dg);
        close(notify_fd);
        notify_fd = -1;
        unlink(notify_path);
    }

    /* ---- a load while a reconfiguration drains a running job: the
     * checkpoint is read meanwhile, the install waits for the
     * reconfiguration and the model comes up cut for the new tp; an
     * unload meanwhile is busy, and so is a second load. The job is held
     * at its start until the test opens the hold's gate, so the drain
     * lasts until then (reconfigure_timeout_ms 0: it never gives up) ---- */
    {
        jcase_t held = { .name = "held", .B = 1, .Sq = 128, .Skv = 128, .Hq = 8,
                         .Hkv = 8, .D = 64, .in = WF_DTYPE_F32, .out = WF_DTYPE_F32,
                         .want_lse = true };
        jbuf_t jb;
        wf_job_t *job = NULL;
        wf_attention_opts_t o = opts_of(&held);
        bool have = jbuf_init(&jb, &held, 7);
        CHECK(have && wf_attention_submit(c, &jb.q, &jb.k, &jb.v, &o, &jb.out, jb.lse,
                                          &job) == WF_OK, "held job: %s",
              wf_client_last_error(c));
        status_wait_t sw = { .c = c, .reconfiguring = false };
        CHECK(wait_for(status_reached, &sw, WAIT_EVENT_MS), "the held job never showed "
              "in status");
        reconf_arg_t ra = { .endpoint = endpoint, .mesh = { 2, 1, 1, 2 }, .st = WF_E_TIMEOUT };
        pthread_t rth;
        pthread_create(&rth, NULL, reconf_main, &ra);
        sw.reconfiguring = true;
        CHECK(wait_for(status_reached, &sw, WAIT_EVENT_MS), "the reconfiguration never "
              "showed in status");
        wf_status_t st = wf_unload_model(c, "guidance");
        CHECK(st == WF_E_BUSY, "unload during a reconfiguration: %s %s",
              wf_status_name(st), wf_client_last_error(c));
        load_arg_t la = { .endpoint = endpoint, .name = "late", .path = "flux-tiny",
                          .st = WF_E_TIMEOUT };
        pthread_t lth;
        pthread_create(&lth, NULL, load_main, &la);
        read_wait_t rw = { .c = c, .name = "late" };
        CHECK(wait_for(model_read, &rw, WAIT_EVENT_MS), "the late model was not read "
              "while the reconfiguration drained (listed %d, state %s, %" PRIu64 " of %"
              PRIu64 " bytes)", rw.listed, rw.info.state, rw.info.bytes_loaded,
              rw.info.bytes_total);
        wf_status_info_t si;
        CHECK(wf_status(c, &si) == WF_OK && si.reconfiguring == 1 && si.in_flight == 1,
              "read, but the drain is over: reconfiguring %u, %u running",
              si.reconfiguring, si.in_flight);
        /* one load at a time: the first is loading until its install */
        st = wf_load_model(c, "big", "flux-big", NULL, NULL);
        char msg[WF_PROTO_ERROR_MAX_COPY];
        snprintf(msg, sizeof msg, "%s", wf_client_last_error(c));
        CHECK(st == WF_E_BUSY && strstr(msg, "is loading") != NULL,
              "a second load during a load: %s %s", wf_status_name(st), msg);
        printf("load during a load: %s %s\n", wf_status_name(st), msg);
        CHECK(hold_open_gate(), "open the job hold: %s", strerror(errno));
        pthread_join(rth, NULL);
        CHECK(ra.st == WF_OK, "the reconfiguration: %s", wf_status_name(ra.st));
        pthread_join(lth, NULL);
        CHECK(la.st == WF_OK && la.info.tp == 2, "load during a reconfiguration: %s, "
              "tp %u", wf_status_name(la.st), la.info.tp);
        st = job ? wf_job_wait(c, job, (int)WAIT_EVENT_MS) : WF_E_INTERNAL;
        double eo = INFINITY, el = INFINITY, to, tl;
        if (st == WF_OK)
            jbuf_errors(&jb, &eo, &el);
        jcase_tolerances(&held, false, &to, &tl);
        CHECK(st == WF_OK && eo <= to && el <= tl, "held job: %s %s, errors %.3g %.3g",
              wf_status_name(st), job ? wf_job_error(job) : "", eo, el);
        wf_job_destroy(c, &job);
        jbuf_free(&jb);
        double e2 = run_forward(c, "late", &models[0].data, &st);
        CHECK(st == WF_OK && e2 <= fluxio_tolerance(&models[0].data),
              "forward on the late model: %s %.3g", wf_status_name(st), e2);
        printf("load during a reconfiguration: read meanwhile, installed at tp=%u after "
               "it, error %.2e; unload meanwhile: busy\n", la.info.tp, e2);
        CHECK(wf_unload_model(c, "late") == WF_OK, "unload late: %s",
              wf_client_last_error(c));
        set_mesh(c, 4, 1, 1, 1);
    }

    /* ---- parity on every mesh (each reconfiguration re-shards) ---- */
    static const struct { const char *name; uint32_t dp, ring, uly, tp; } meshes[] = {
        { "tp=1 (dp=4)", 4, 1, 1, 1 },
        { "tp=2 (dp=2)", 2, 1, 1, 2 },
        { "tp=4", 1, 1, 1, 4 },
        { "ulysses=2 (dp=2)", 2, 1, 2, 1 },
        { "ring=2 (dp=2)", 2, 2, 1, 1 },
        { "tp=2 x ulysses=2", 1, 1, 2, 2 },
        { "ring=2 x ulysses=2", 1, 2, 2, 1 },
        { "tp=2 x ring=2", 1, 2, 1, 2 },
    };
    for (size_t k = 0; k < sizeof meshes / sizeof meshes[0]; k++) {
        set_mesh(c, meshes[k].dp, meshes[k].ring, meshes[k].uly, meshes[k].tp);
        wf_model_info_t info;
        CHECK(listed(c, "tiny", &info) && info.tp == meshes[k].tp,
              "after re-shard tiny reports tp %u, mesh tp %u", info.tp, meshes[k].tp);
        printf("%-20s", meshes[k].name);
        for (size_t i = 0; i < N_MODELS; i++) {
            wf_status_t st;
            double e = run_forward(c, models[i].name, &models[i].data, &st);
            double tol = fluxio_tolerance(&models[i].data);
            CHECK(st == WF_OK && e <= tol, "%s on %s: %s (%s) error %.3g > %.3g",
                  models[i].name, meshes[k].name, wf_status_name(st),
                  wf_client_last_error(c), e, tol);
            printf("  %s %.2e (tol %.0e)", models[i].name, e, tol);
        }
        printf("\n");
    }

    /* ---- f16 weights (flux-tiny rounded to f16 here), f32 inputs ---- */
    {
        wf_model_info_t info;
        wf_status_t st = wf_load_model(c, "tiny-f16", "flux-tiny-f16", NULL, &info);
        CHECK(st == WF_OK && strcmp(info.dtype, "f16") == 0, "load f16: %s %s (%s)",
              wf_status_name(st), wf_client_last_error(c), info.dtype);
        /* f16 keeps 11 bits: each weight rounded by up to 2^-12 relative;
         * measured 3.0e-4 of max |ref| against diffusers' float64 run of
         * the f32 weights; tolerance about 6x that */
        const double tol = 2e-3;
        for (uint32_t tp = 1; tp <= 4; tp *= 2) {
            set_mesh(c, 4 / tp, 1, 1, tp);
            double e = run_forward(c, "tiny-f16", &models[0].data, &st);
            CHECK(st == WF_OK && e <= tol, "f16 model at tp=%u: %s error %.3g",
                  tp, wf_status_name(st), e);
            printf("f16 weights tp=%u: error %.2e (tol %.0e)\n", tp, e, tol);
        }
        CHECK(wf_unload_model(c, "tiny-f16") == WF_OK, "unload f16: %s",
              wf_client_last_error(c));
    }

    /* ---- weights_already_sharded ---- */
    {
        int rfd;
        char err[512], out[512];
        path_of(out, sizeof out, "flux-tiny-tp2");
        wf_status_t st = wf_model_root_open(root, &rfd, err, sizeof err);
        if (st == WF_OK) {
            st = wf_model_write_sharded(rfd, "flux-tiny", NULL, 2, out, err, sizeof err);
            close(rfd);
        }
        CHECK(st == WF_OK, "write sharded: %s", err);
        wf_load_opts_t o = { 0 };
        o.weights_already_sharded = 1;
        set_mesh(c, 1, 1, 1, 4);
        refused_load(c, "sharded", "flux-tiny-tp2", &o, WF_E_BAD_ARGUMENT, "tp=2");
        set_mesh(c, 2, 1, 1, 2);
        wf_model_info_t info;
        st = wf_load_model(c, "sharded", "flux-tiny-tp2", &o, &info);
        CHECK(st == WF_OK && info.sharded_input == 1, "load sharded: %s %s",
              wf_status_name(st), wf_client_last_error(c));
        double e = run_forward(c, "sharded", &models[0].data, &st);
        CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data), "sharded forward: %s error %.3g",
              wf_status_name(st), e);
        printf("weights_already_sharded tp=2: error %.2e\n", e);
        /* re-shard the pre-sharded model to tp=4 from its host copy */
        set_mesh(c, 1, 1, 1, 4);
        e = run_forward(c, "sharded", &models[0].data, &st);
        CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data), "sharded re-shard to tp=4: %s error %.3g",
              wf_status_name(st), e);
        CHECK(wf_unload_model(c, "sharded") == WF_OK, "unload sharded: %s",
              wf_client_last_error(c));
    }

    /* ---- bad checkpoints and bad requests ---- */
    refused_load(c, "b1", "bad-missing", NULL, WF_E_MALFORMED, "proj_out.bias");
    refused_load(c, "b2", "bad-shape", NULL, WF_E_BAD_SHAPE, "x_embedder.weight");
    refused_load(c, "b3", "bad-truncated", NULL, WF_E_MALFORMED, "bad-truncated");
    refused_load(c, "b4", "bad-overlap", NULL, WF_E_MALFORMED, "bad-overlap");
    refused_load(c, "b5", "bad-duplicate", NULL, WF_E_MALFORMED, "duplicate");
    refused_load(c, "b6", "escape", NULL, WF_E_BAD_FIELD, "escape");
    refused_load(c, "b7", "no-such-model", NULL, WF_E_BAD_FIELD, "no-such-model");
    refused_load(c, "b8", "../flux-tiny", NULL, WF_E_BAD_FIELD, "..");
    {
        wf_status_t s2 = wf_load_model(c, "tiny", "flux-tiny-bf16", NULL, NULL);
        CHECK(s2 == WF_E_BAD_ARGUMENT && strstr(wf_client_last_error(c), "already loaded"),
              "a name in use: %s %s", wf_status_name(s2), wf_client_last_error(c));
        wf_model_info_t info;
        CHECK(listed(c, "tiny", &info) && strcmp(info.path, "flux-tiny") == 0,
              "the model named tiny changed: %s", info.path);
        /* its config as the daemon read it (tests/fixtures/flux-tiny/config.json) */
        const wf_model_config_t *k = &info.config;
#define K(key) wf_model_config_get(k, key, 0, -1)
        int64_t axes = K("axes_dims_rope") + wf_model_config_get(k, "axes_dims_rope", 1, -1) +
                       wf_model_config_get(k, "axes_dims_rope", 2, -1);
        CHECK(k->present && K("patch_size") == 1 && K("in_channels") == 16 &&
                  K("out_channels") == 16 && K("num_layers") == 1 &&
                  K("num_single_layers") == 1 && K("attention_head_dim") == 12 &&
                  K("num_attention_heads") == 4 && K("guidance_embeds") == 0 &&
                  wf_model_config_get(k, "axes_dims_rope", 3, -1) == -1 && axes == 12,
              "config of tiny: present %u in %lld heads %lld x %lld axes sum %lld guidance %lld",
              k->present, (long long)K("in_channels"), (long long)K("num_attention_heads"),
              (long long)K("attention_head_dim"), (long long)axes,
              (long long)K("guidance_embeds"));
#undef K
        CHECK(strcmp(info.family, "flux") == 0, "family of tiny: %s", info.family);
        /* its forward's schema: six inputs (no guidance embedder), one output
         * (patch^2 * out_channels = 16 wide) */
        const wf_model_schema_t *sc = &info.schema;
        const wf_schema_tensor_t *hs = wf_schema_find(sc->inputs, sc->n_inputs, "hidden_states");
        const wf_schema_tensor_t *ids = wf_schema_find(sc->inputs, sc->n_inputs, "img_ids");
        CHECK(sc->n_inputs == 6 && sc->n_outputs == 1 && hs && hs->rank == 3 &&
                  hs->dim[0].size == 0 && strcmp(hs->dim[0].sym, "B") == 0 &&
                  strcmp(hs->dim[1].sym, "S_img") == 0 && hs->dim[2].size == 16 &&
                  ids && ids->dim[1].size == 3 &&
                  !wf_schema_find(sc->inputs, sc->n_inputs, "guidance") &&
                  strcmp(sc->outputs[0].name, "output") == 0 &&
                  sc->outputs[0].dim[2].size == 16,
              "schema of tiny: %u inputs, %u outputs", sc->n_inputs, sc->n_outputs);
    }
    {
        wf_tp_rule_t rule = { .glob = "transformer_blocks.*.attn.to_q",
                              .style = WF_TP_COLWISE };
        wf_load_opts_t o = { .plan = &rule, .n_plan = 1 };
        set_mesh(c, 1, 1, 1, 4);
        /* to_q colwise over 4 ranks keeps 12 of 48 columns = 1 head: fine;
         * a glob matching nothing is refused */
        wf_tp_rule_t none = { .glob = "no_such_blocks.*.to_q", .style = WF_TP_COLWISE };
        o.plan = &none;
        refused_load(c, "b9", "flux-tiny", &o, WF_E_BAD_ARGUMENT, "no_such_blocks");
        (void)rule;
    }
    set_mesh(c, 4, 1, 1, 1);
    wf_status_t st;
    run_forward(c, "nope", &models[0].data, &st);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(wf_client_last_error(c), "not loaded"),
          "forward on an unknown model: %s %s", wf_status_name(st),
          wf_client_last_error(c));
    /* the guidance model without guidance */
    {
        fluxio_t io = models[1].data;
        io.in.guidance = NULL;
        run_forward(c, "guidance", &io, &st);
        CHECK(st != WF_OK && strstr(wf_client_last_error(c), "guidance"),
              "guidance model without guidance: %s %s", wf_status_name(st),
              wf_client_last_error(c));
    }
    /* the daemon still serves every model */
    for (size_t i = 0; i < N_MODELS; i++) {
        double e = run_forward(c, models[i].name, &models[i].data, &st);
        CHECK(st == WF_OK && e <= fluxio_tolerance(&models[i].data),
              "%s after the refusals: %s error %.3g", models[i].name,
              wf_status_name(st), e);
    }

    /* ---- one load at a time: the 48 MB checkpoint refused while
     * another was loading loads now ---- */
    {
        wf_model_info_t info;
        st = wf_load_model(c, "big", "flux-big", NULL, &info);
        CHECK(st == WF_OK && strcmp(info.state, "ready") == 0 &&
                  info.bytes_loaded == info.bytes_total && info.bytes_total > 40000000u,
              "big load: %s %s (%s, %" PRIu64 " of %" PRIu64 " bytes)", wf_status_name(st),
              wf_client_last_error(c), info.state, info.bytes_loaded, info.bytes_total);
        printf("big load: %s, %.1f MiB\n", wf_status_name(st),
               (double)info.bytes_total / 1048576.0);
        CHECK(wf_unload_model(c, "big") == WF_OK, "unload big: %s",
              wf_client_last_error(c));
    }

    /* ---- unload ---- */
    st = wf_unload_model(c, "tiny-bf16");
    CHECK(st == WF_OK, "unload: %s %s", wf_status_name(st), wf_client_last_error(c));
    CHECK(!listed(c, "tiny-bf16", NULL), "unloaded model still listed");
    run_forward(c, "tiny-bf16", &models[2].data, &st);
    CHECK(st == WF_E_BAD_ARGUMENT, "forward on an unloaded model: %s",
          wf_status_name(st));
    st = wf_unload_model(c, "tiny-bf16");
    CHECK(st == WF_E_BAD_ARGUMENT, "second unload: %s", wf_status_name(st));
    double e = run_forward(c, "tiny", &models[0].data, &st);
    CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data), "tiny after the unload: %s %.3g",
          wf_status_name(st), e);

    wf_client_destroy(&c);
    char err[256];
    CHECK(stop_daemon(pid, SPAWN_STOP_MS, err, sizeof err), "weftd: %s", err);
    close(hold_fd);
    unlink(hold_path);

    /* ---- devices too small: refused before reading ---- */
    pid = start_daemon(weftd, endpoint, "cpu:4", "256K", false);
    if (wait_ready(endpoint)) {
        wf_client_connect(endpoint, (int)WAIT_EVENT_MS, &c);
        refused_load(c, "tiny", "flux-tiny", NULL, WF_E_NO_MEMORY, "does not fit");
        wf_client_destroy(&c);
        CHECK(stop_daemon(pid, SPAWN_STOP_MS, err, sizeof err), "weftd (small): %s", err);
    } else {
        CHECK(false, "small weftd did not start");
        kill(pid, SIGKILL);
    }

    /* ---- a tp change a resident model cannot take changes nothing ---- */
    pid = start_daemon(weftd, endpoint, "cpu:6", "0", false);
    if (wait_ready(endpoint)) {
        wf_client_connect(endpoint, (int)WAIT_EVENT_MS, &c);
        st = wf_load_model(c, "tiny", "flux-tiny", NULL, NULL);
        CHECK(st == WF_OK, "load on cpu:6: %s %s", wf_status_name(st),
              wf_client_last_error(c));
        wf_status_info_t si;
        uint64_t epoch = wf_status(c, &si) == WF_OK ? si.epoch : 0;
        wf_mesh_degrees_t m3 = { 2, 1, 1, 3 };
        st = wf_reconfigure(c, &m3, NULL);
        CHECK(st == WF_E_BAD_ARGUMENT &&
              strstr(wf_client_last_error(c), "must divide the number of attention heads"),
              "tp=3 with a 4-head model: %s %s", wf_status_name(st),
              wf_client_last_error(c));
        printf("  refused reconfigure tp=3  %-18s %s\n", wf_status_name(st),
               wf_client_last_error(c));
        CHECK(wf_status(c, &si) == WF_OK && si.mesh.tp == 1 && si.mesh.dp == 6 &&
              si.epoch == epoch, "refused change moved the mesh: dp %u tp %u epoch %"
              PRIu64 " -> %" PRIu64, si.mesh.dp, si.mesh.tp, epoch, si.epoch);
        e = run_forward(c, "tiny", &models[0].data, &st);
        CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data),
              "forward after the refused change: %s %.3g %s", wf_status_name(st), e,
              wf_client_last_error(c));
        set_mesh(c, 3, 1, 1, 2);
        e = run_forward(c, "tiny", &models[0].data, &st);
        CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data),
              "forward at dp=3,tp=2: %s %.3g", wf_status_name(st), e);
        /* meshes that divide neither the 16 image nor the 8 text tokens,
         * nor the 4 heads over ulysses 3: uneven shards, diffusers' output */
        static const struct { const char *name; uint32_t dp, ring, uly, tp; } um[] = {
            { "ring=3 (dp=2)", 2, 3, 1, 1 },
            { "ulysses=3 (dp=2)", 2, 1, 3, 1 },
            { "ring=3 x ulysses=2", 1, 3, 2, 1 },
            { "tp=2 x ring=3", 1, 3, 1, 2 },
        };
        for (size_t k = 0; k < sizeof um / sizeof um[0]; k++) {
            set_mesh(c, um[k].dp, um[k].ring, um[k].uly, um[k].tp);
            e = run_forward(c, "tiny", &models[0].data, &st);
            CHECK(st == WF_OK && e <= fluxio_tolerance(&models[0].data),
                  "forward on %s: %s (%s) error %.3g", um[k].name, wf_status_name(st),
                  wf_client_last_error(c), e);
            printf("  uneven %-20s tiny %.2e (tol %.0e)\n", um[k].name, e,
                   fluxio_tolerance(&models[0].data));
        }
        wf_client_destroy(&c);
        CHECK(stop_daemon(pid, SPAWN_STOP_MS, err, sizeof err), "weftd (cpu:6): %s", err);
    } else {
        CHECK(false, "weftd cpu:6 did not start");
        kill(pid, SIGKILL);
    }

    for (size_t i = 0; i < N_MODELS; i++)
        fluxio_free(&models[i].data);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, outside);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", root);
    printf("%s: %d checks, %d failures\n", failed ? "FAIL" : "ok", passed + failed, failed);
    return failed ? 1 : 0;
}
