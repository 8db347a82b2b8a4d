/* test_wan_e2e.c — end to end: a Wan model in a real weftd.
 *
 * usage: test_wan_e2e PATH_TO_WEFTD FIXTURES_DIR [tiny|long]
 *
 * One weftd on cpu:4 (the fixtures directory as its model root) loads a
 * Wan checkpoint through libweft (wf_load_model) and serves its forward
 * through wf_forward_named (support/fluxio.h's wanio_forward) on several
 * meshes (wf_reconfigure between them: a live re-shard), each compared
 * with diffusers' float64 output within WANIO_TOLERANCE (1e-5 of max
 * |ref|). The daemon exits 0 on SIGTERM.
 *
 * tiny (the default): tests/fixtures/wan-tiny with io-wan-tiny-f32 (12
 * video tokens, B = 2): list_models' entry (family "wan", its config and
 * schema); the meshes dp 4, then ring 2, ulysses 2, ring 2 x ulysses 2,
 * ring 4, tp 2, tp 2 x ring 2, tp 2 x ulysses 2 (tp changing twice). A
 * mesh with tp 4 is refused (the model's 2 heads do not split over 4),
 * and a forward whose height is not a multiple of the patch is refused
 * naming patch_size; the daemon keeps serving. Then the image-to-video,
 * first-last-frame and per-token-timestep fixtures load beside it (each
 * rank's size below the whole model's at tp 2) and forward on tp 2 x
 * ulysses 2, each unloaded after.
 *
 * long: tests/fixtures/wan-long with io-wan-long (8,192 video tokens,
 * f16 inputs: make_wan_long.py) on ring 2 x ulysses 2 and ring 4, where
 * each rank's attention runs over key blocks of 2,048 or 4,096 and the
 * softmax sums over all 8,192 keys (diffusers' output moves by 1.7e-2 of
 * max |ref| when one block of 2,048 keys is left out: far above the
 * tolerance), then ulysses 2 and ring 2 (dp 2: the job on one replica)
 * and tp 2 x ring 2, the daemon's rotate_method alltoall (the ring passes
 * one K / V shard per step); each forward's time is printed.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support/check.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/wait.h"
#include "weft.h"

/* One case: a model directory of the fixtures, its io file, the meshes
 * its forwards run on (the first one is the daemon's --mesh). */
typedef struct wan_case {
    const char *name;                   /* the test's argument */
    const char *model_dir, *io_file;    /* under FIXTURES_DIR */
    const char *first_mesh;             /* --mesh: meshes[0] */
    const char *rotate;                 /* --rotate-method: the ring's rotation */
    const wf_mesh_degrees_t *meshes;
    size_t n_meshes;
} wan_case_t;

static const wf_mesh_degrees_t tiny_meshes[] = {
    { .dp = 4, .ring = 1, .ulysses = 1, .tp = 1 },
    { .dp = 2, .ring = 2, .ulysses = 1, .tp = 1 },
    { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 },
    { .dp = 1, .ring = 2, .ulysses = 2, .tp = 1 },
    { .dp = 1, .ring = 4, .ulysses = 1, .tp = 1 },
    { .dp = 2, .ring = 1, .ulysses = 1, .tp = 2 },
    { .dp = 1, .ring = 2, .ulysses = 1, .tp = 2 },
    { .dp = 1, .ring = 1, .ulysses = 2, .tp = 2 },
};

static const wf_mesh_degrees_t long_meshes[] = {
    { .dp = 1, .ring = 2, .ulysses = 2, .tp = 1 },
    { .dp = 1, .ring = 4, .ulysses = 1, .tp = 1 },
    { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 },
    { .dp = 2, .ring = 2, .ulysses = 1, .tp = 1 },
    { .dp = 1, .ring = 2, .ulysses = 1, .tp = 2 },
};

static const wan_case_t cases[] = {
    { "tiny", "wan-tiny", "io-wan-tiny-f32.safetensors", "dp=4", "allgather", tiny_meshes,
      sizeof tiny_meshes / sizeof tiny_meshes[0] },
    /* long sequences: the ring passes one K / V shard per step */
    { "long", "wan-long", "io-wan-long.safetensors", "ring=2,ulysses=2", "alltoall",
      long_meshes, sizeof long_meshes / sizeof long_meshes[0] },
};

/* The tiny case's checks beyond parity: list_models' entry, tp 4 and a
 * bad shape refused, service after the refusals; the other variants on
 * the mesh in force (tp 2 x ulysses 2). */
static void tiny_checks(wf_client_t *c, const wf_model_info_t *info, const wanio_t *io,
                        const char *fixtures)
{
    CHECK(strcmp(info->family, "wan") == 0 && strcmp(info->state, "ready") == 0 &&
          info->tp == 1 && info->params > 0, "info: family %s state %s tp %u",
          info->family, info->state, info->tp);
    CHECK(info->config.present &&
          wf_model_config_get(&info->config, "num_attention_heads", 0, -1) == 2 &&
          wf_model_config_get(&info->config, "patch_size", 2, -1) == 2, "config");
    CHECK(info->schema.n_inputs == 4 && strcmp(info->schema.inputs[0].name,
                                               "hidden_states") == 0 &&
          info->schema.inputs[0].rank == 5 && info->schema.inputs[1].optional &&
          strcmp(info->schema.inputs[3].name, "timestep_tokens") == 0 &&
          info->schema.inputs[3].optional && info->schema.n_outputs == 1, "schema");

    /* tp 4: refused (2 heads), naming the limit; the mesh stays */
    wf_mesh_degrees_t tp4 = { .dp = 1, .ring = 1, .ulysses = 1, .tp = 4 };
    wf_status_t rs = wf_reconfigure(c, &tp4, NULL);
    CHECK(rs != WF_OK && strstr(wf_client_last_error(c), "attention heads"),
          "tp 4: %s %s", wf_status_name(rs), wf_client_last_error(c));
    /* a height that is no multiple of the patch */
    wanio_t odd = *io;
    odd.in[0].shape[3] = 3;
    wf_tensor_t r = io->ref;
    r.shape[3] = 3;
    wf_status_t fs;
    wanio_forward(c, "wan", &odd, &r, &fs, NULL);
    CHECK(fs != WF_OK && strstr(wf_client_last_error(c), "patch_size"),
          "odd height: %s %s", wf_status_name(fs), wf_client_last_error(c));
    double e = wanio_forward(c, "wan", io, &io->ref, &fs, NULL);
    CHECK(fs == WF_OK && e <= WANIO_TOLERANCE, "forward after the refusals: %s %.3g",
          wf_status_name(fs), e);
    /* the image-to-video, first-last-frame and per-token-timestep variants
     * beside it: 18 tokens over 2 ulysses ranks, one head per tp rank over
     * 2 (the anything mode) */
    static const struct {
        const char *name, *dir, *io;
    } var[] = {
        { "i2v", "wan-tiny-i2v", "io-wan-tiny-i2v-f32.safetensors" },
        { "flf2v", "wan-tiny-flf2v", "io-wan-tiny-flf2v-f32.safetensors" },
        { "ti2v", "wan-tiny-ti2v", "io-wan-tiny-ti2v-f32.safetensors" },
    };
    for (size_t i = 0; i < sizeof var / sizeof var[0]; i++) {
        wanio_t vio;
        wf_model_info_t vi;
        if (!wanio_load(&vio, fixtures, var[i].io)) {
            CHECK(0, "%s: io file", var[i].io);
            continue;
        }
        wf_status_t ls = wf_load_model(c, var[i].name, var[i].dir, NULL, &vi);
        CHECK(ls == WF_OK, "load %s: %s %s", var[i].dir, wf_status_name(ls),
              wf_client_last_error(c));
        if (ls == WF_OK) {
            /* each rank holds its tp half of the sharded layers */
            CHECK(vi.tp == 2 && vi.rank_bytes > 0 && vi.rank_bytes < vi.params * 4,
                  "%s: tp %u, %llu bytes per rank of %llu params", var[i].dir, vi.tp,
                  (unsigned long long)vi.rank_bytes, (unsigned long long)vi.params);
            e = wanio_forward(c, var[i].name, &vio, &vio.ref, &fs, NULL);
            CHECK(fs == WF_OK && e <= WANIO_TOLERANCE, "%s via weftd: %s, rel err %.3g",
                  var[i].dir, wf_status_name(fs), e);
            printf("%s via weftd, tp 2 x ulysses 2: rel err vs diffusers f64 %.3g\n",
                   var[i].dir, e);
            CHECK(wf_unload_model(c, var[i].name) == WF_OK, "unload %s", var[i].name);
        }
        wanio_free(&vio);
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR [tiny|long]\n", argv[0]);
        return 2;
    }
    const wan_case_t *wc = NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argc > 3 ? argv[3] : "tiny", cases[i].name) == 0)
            wc = &cases[i];
    if (!wc) {
        fprintf(stderr, "%s: no case '%s'\n", argv[0], argv[3]);
        return 2;
    }
    block_test_signals();
    const char *weftd = argv[1], *fixtures = argv[2];
    char err[512], endpoint[300], tmpl[] = "/tmp/weft-wan-e2e-XXXXXX";
    wanio_t io;
    if (!wanio_load(&io, fixtures, wc->io_file))
        return 1;
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(endpoint, sizeof endpoint, "ipc://%s/weftd.sock", tmpl);

    const char *dargv[] = { weftd, "--devices", "cpu:4", "--mesh", wc->first_mesh,
                            "--rotate-method", wc->rotate,
                            "--listen", endpoint, "--model-root", fixtures,
                            "--log-level", "warning", NULL };
    pid_t pid = spawn_daemon(dargv, NULL);
    if (pid < 0 || !wait_ready(endpoint)) {
        fprintf(stderr, "weftd did not start\n");
        if (pid > 0)
            kill(pid, SIGKILL);
        return 1;
    }
    wf_client_t *c = NULL;
    CHECK(wf_client_connect(endpoint, (int)WAIT_EVENT_MS, &c) == WF_OK, "connect");

    wf_model_info_t info;
    wf_status_t st = wf_load_model(c, "wan", wc->model_dir, NULL, &info);
    CHECK(st == WF_OK, "load %s: %s %s", wc->model_dir, wf_status_name(st),
          wf_client_last_error(c));
    if (st == WF_OK)
        printf("%s loaded: %llu params, %llu bytes per rank, in %llu ms\n", wc->model_dir,
               (unsigned long long)info.params, (unsigned long long)info.rank_bytes,
               (unsigned long long)info.load_ms);

    int64_t tokens = 1;
    for (int a = 2; a < 5; a++)
        tokens *= io.in[0].shape[a];
    tokens /= 4;                        /* patch (1, 2, 2), both fixtures */
    for (size_t i = 0; st == WF_OK && i < wc->n_meshes; i++) {
        const wf_mesh_degrees_t *m = &wc->meshes[i];
        if (i > 0) {
            wf_status_t rs = wf_reconfigure(c, m, NULL);
            CHECK(rs == WF_OK, "reconfigure to ring %u ulysses %u: %s %s", m->ring, m->ulysses,
                  wf_status_name(rs), wf_client_last_error(c));
            if (rs != WF_OK)
                continue;
        }
        wf_status_t fs;
        uint64_t t0 = wait_now_ms();
        double e = wanio_forward(c, "wan", &io, &io.ref, &fs, NULL);
        uint64_t ms = wait_now_ms() - t0;
        CHECK(fs == WF_OK, "forward (dp %u ring %u ulysses %u tp %u): %s %s", m->dp, m->ring,
              m->ulysses, m->tp, wf_status_name(fs), wf_client_last_error(c));
        CHECK(e <= WANIO_TOLERANCE, "forward (dp %u ring %u ulysses %u tp %u): rel err %.3g",
              m->dp, m->ring, m->ulysses, m->tp, e);
        printf("%s via weftd, %lld video tokens, dp %u ring %u ulysses %u tp %u: rel err vs "
               "diffusers f64 %.3g (tolerance %.0e), %llu ms\n", wc->model_dir,
               (long long)tokens, m->dp, m->ring, m->ulysses, m->tp, e, WANIO_TOLERANCE,
               (unsigned long long)ms);
    }
    if (st == WF_OK && strcmp(wc->name, "tiny") == 0)
        tiny_checks(c, &info, &io, fixtures);
    wf_client_destroy(&c);
    CHECK(stop_daemon(pid, SPAWN_STOP_MS, err, sizeof err), "weftd: %s", err);
    wanio_free(&io);
    char sock[400];
    snprintf(sock, sizeof sock, "%s/weftd.sock", tmpl);
    unlink(sock);
    rmdir(tmpl);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
