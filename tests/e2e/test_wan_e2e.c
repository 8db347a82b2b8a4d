/* test_wan_e2e.c — end to end: a Wan model in a real weftd.
 *
 * usage: test_wan_e2e PATH_TO_WEFTD FIXTURES_DIR
 *
 * One weftd on cpu:4 (the fixtures directory as its model root) loads
 * tests/fixtures/wan-tiny through libweft (wf_load_model), lists it
 * (family "wan", its config and schema), and serves its forward through
 * wf_forward_named with the inputs of io-wan-tiny-f32.safetensors on the
 * meshes dp 4, then ring 2, ulysses 2, ring 2 x ulysses 2, ring 4, tp 2,
 * tp 2 x ring 2, tp 2 x ulysses 2 (wf_reconfigure: a live re-shard, tp
 * changing twice), each compared with diffusers' float64 output (1e-5 of
 * max |ref|, as test_wan_forward). A mesh with tp 4 is refused (the
 * model's 2 heads do not split over 4), and a forward whose
 * height is not a multiple of the patch is refused naming patch_size;
 * the daemon keeps serving. Then the image-to-video, first-last-frame and
 * per-token-timestep fixtures load beside it (each rank's size below the
 * whole model's at tp 2) and forward on tp 2 x ulysses 2 against
 * diffusers' float64 outputs, each unloaded after. The daemon exits 0 on SIGTERM.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_root.h"
#include "safetensors.h"
#include "support/check.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/wait.h"
#include "tensor.h"
#include "weft.h"

#include <unistd.h>

static const char *const in_names[3] = { "hidden_states", "timestep", "encoder_hidden_states" };

/* The io file's tensor `name` as a client tensor (data mapped). */
static bool get(const wf_safetensors_t *st, const char *name, wf_tensor_t *t)
{
    memset(t, 0, sizeof *t);
    ptrdiff_t i = wf_safetensors_find(st, name);
    if (i < 0)
        return false;
    const wf_st_tensor_t *d = wf_safetensors_tensor(st, (size_t)i);
    t->data = (void *)(uintptr_t)wf_safetensors_data(st, (size_t)i);
    t->dtype = d->dtype;
    t->rank = d->rank;
    for (int k = 0; k < d->rank; k++)
        t->shape[k] = d->shape[k];
    return true;
}

/* One forward of the fixture's inputs; its error against ref64 (INFINITY
 * on failure, the status in *ret_st). */
static double forward(wf_client_t *c, const wf_tensor_t *in, const wf_tensor_t *ref64,
                      wf_status_t *ret_st)
{
    size_t n = (size_t)wf_tensor_numel(ref64);
    float *out = calloc(n, sizeof(float)), *ref = malloc(n * sizeof(float));
    wf_tensor_t o = *ref64;
    o.data = out;
    o.dtype = WF_DTYPE_F32;
    wf_named_tensor_t ins[3], outs[1] = { { "output", &o } };
    for (int i = 0; i < 3; i++)
        ins[i] = (wf_named_tensor_t){ in_names[i], &in[i] };
    wf_job_result_t res;
    wf_status_t st = wf_forward_named(c, "wan", ins, 3, outs, 1, NULL, &res);
    *ret_st = st;
    double e = INFINITY;
    if (st == WF_OK) {
        wf_convert_to_f32(ref, ref64->data, ref64->dtype, n);
        double m = 0;
        e = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)out[i] - (double)ref[i]);
            if (!(d <= e))
                e = d;
            m = fmax(m, fabs((double)ref[i]));
        }
        e /= m > 0 ? m : 1;
    }
    free(out);
    free(ref);
    return e;
}

/* A forward of model `model` on every input of io file `file` (all its
 * tensors but the outputs) against its output_f64: the error (INFINITY
 * on failure). */
static double forward_file(wf_client_t *c, const char *fixtures, const char *model,
                           const char *file)
{
    char err[512];
    int rfd = -1;
    wf_safetensors_t *io = NULL;
    if (wf_model_root_open(fixtures, &rfd, err, sizeof err) != WF_OK ||
        wf_safetensors_open(rfd, file, NULL, &io, err, sizeof err) != WF_OK) {
        CHECK(0, "%s: %s", file, err);
        if (rfd >= 0)
            close(rfd);
        return INFINITY;
    }
    close(rfd);
    wf_tensor_t t[8], ref64, o;
    wf_named_tensor_t ins[8];
    uint32_t n = 0;
    for (size_t i = 0; i < wf_safetensors_count(io) && n < 8; i++) {
        const char *name = wf_safetensors_tensor(io, i)->name;
        if (strncmp(name, "output", 6) != 0 && get(io, name, &t[n])) {
            ins[n] = (wf_named_tensor_t){ name, &t[n] };
            n++;
        }
    }
    double e = INFINITY;
    if (get(io, "output_f64", &ref64)) {
        size_t k = (size_t)wf_tensor_numel(&ref64);
        float *out = calloc(k, sizeof(float)), *ref = malloc(k * sizeof(float));
        o = ref64;
        o.data = out;
        o.dtype = WF_DTYPE_F32;
        wf_named_tensor_t outs[1] = { { "output", &o } };
        wf_job_result_t res;
        wf_status_t st = wf_forward_named(c, model, ins, n, outs, 1, NULL, &res);
        CHECK(st == WF_OK, "%s forward: %s %s", model, wf_status_name(st),
              wf_client_last_error(c));
        if (st == WF_OK) {
            wf_convert_to_f32(ref, ref64.data, ref64.dtype, k);
            double m = 0;
            e = 0;
            for (size_t i = 0; i < k; i++) {
                double d = fabs((double)out[i] - (double)ref[i]);
                if (!(d <= e))
                    e = d;
                m = fmax(m, fabs((double)ref[i]));
            }
            e /= m > 0 ? m : 1;
        }
        free(out);
        free(ref);
    }
    wf_safetensors_close(&io);
    return e;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    block_test_signals();
    const char *weftd = argv[1], *fixtures = argv[2];
    char err[512], endpoint[300], tmpl[] = "/tmp/weft-wan-e2e-XXXXXX";
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(endpoint, sizeof endpoint, "ipc://%s/weftd.sock", tmpl);
    int rfd = -1;
    wf_safetensors_t *io = NULL;
    if (wf_model_root_open(fixtures, &rfd, err, sizeof err) != WF_OK ||
        wf_safetensors_open(rfd, "io-wan-tiny-f32.safetensors", NULL, &io, err, sizeof err) !=
            WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    close(rfd);
    wf_tensor_t in[3], ref64;
    bool ok = get(io, "output_f64", &ref64);
    for (int i = 0; i < 3; i++)
        ok &= get(io, in_names[i], &in[i]);
    if (!ok) {
        fprintf(stderr, "io-wan-tiny-f32.safetensors lacks a tensor\n");
        return 1;
    }

    const char *dargv[] = { weftd, "--devices", "cpu:4", "--mesh", "dp=4", "--listen",
                            endpoint, "--model-root", fixtures, "--log-level", "warning",
                            NULL };
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
    wf_status_t st = wf_load_model(c, "wan", "wan-tiny", NULL, &info);
    CHECK(st == WF_OK, "load wan-tiny: %s %s", wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        CHECK(strcmp(info.family, "wan") == 0 && strcmp(info.state, "ready") == 0 &&
              info.tp == 1 && info.params > 0, "info: family %s state %s tp %u",
              info.family, info.state, info.tp);
        CHECK(info.config.present &&
              wf_model_config_get(&info.config, "num_attention_heads", 0, -1) == 2 &&
              wf_model_config_get(&info.config, "patch_size", 2, -1) == 2, "config");
        CHECK(info.schema.n_inputs == 4 && strcmp(info.schema.inputs[0].name,
                                                  "hidden_states") == 0 &&
              info.schema.inputs[0].rank == 5 && info.schema.inputs[1].optional &&
              strcmp(info.schema.inputs[3].name, "timestep_tokens") == 0 &&
              info.schema.inputs[3].optional && info.schema.n_outputs == 1, "schema");
    }

    /* Tolerance: 1e-5 of max |ref| against diffusers' float64 run (the
     * unit test measures about 3e-7). */
    static const wf_mesh_degrees_t meshes[] = {
        { .dp = 4, .ring = 1, .ulysses = 1, .tp = 1 },
        { .dp = 2, .ring = 2, .ulysses = 1, .tp = 1 },
        { .dp = 2, .ring = 1, .ulysses = 2, .tp = 1 },
        { .dp = 1, .ring = 2, .ulysses = 2, .tp = 1 },
        { .dp = 1, .ring = 4, .ulysses = 1, .tp = 1 },
        { .dp = 2, .ring = 1, .ulysses = 1, .tp = 2 },
        { .dp = 1, .ring = 2, .ulysses = 1, .tp = 2 },
        { .dp = 1, .ring = 1, .ulysses = 2, .tp = 2 },
    };
    for (size_t i = 0; st == WF_OK && i < sizeof meshes / sizeof meshes[0]; i++) {
        const wf_mesh_degrees_t *m = &meshes[i];
        if (i > 0) {
            wf_status_t rs = wf_reconfigure(c, m, NULL);
            CHECK(rs == WF_OK, "reconfigure to ring %u ulysses %u: %s %s", m->ring, m->ulysses,
                  wf_status_name(rs), wf_client_last_error(c));
            if (rs != WF_OK)
                continue;
        }
        wf_status_t fs;
        double e = forward(c, in, &ref64, &fs);
        CHECK(fs == WF_OK, "forward (dp %u ring %u ulysses %u tp %u): %s %s", m->dp, m->ring,
              m->ulysses, m->tp, wf_status_name(fs), wf_client_last_error(c));
        CHECK(e <= 1e-5, "forward (dp %u ring %u ulysses %u tp %u): rel err %.3g", m->dp,
              m->ring, m->ulysses, m->tp, e);
        printf("wan-tiny via weftd, dp %u ring %u ulysses %u tp %u: rel err vs diffusers f64 "
               "%.3g\n", m->dp, m->ring, m->ulysses, m->tp, e);
    }
    if (st == WF_OK) {
        /* tp 4: refused (2 heads), naming the limit; the mesh stays */
        wf_mesh_degrees_t tp4 = { .dp = 1, .ring = 1, .ulysses = 1, .tp = 4 };
        wf_status_t rs = wf_reconfigure(c, &tp4, NULL);
        CHECK(rs != WF_OK && strstr(wf_client_last_error(c), "attention heads"),
              "tp 4: %s %s", wf_status_name(rs), wf_client_last_error(c));
        /* a height that is no multiple of the patch */
        wf_tensor_t odd[3] = { in[0], in[1], in[2] };
        odd[0].shape[3] = 3;
        wf_tensor_t r = ref64;
        r.shape[3] = 3;
        wf_status_t fs;
        forward(c, odd, &r, &fs);
        CHECK(fs != WF_OK && strstr(wf_client_last_error(c), "patch_size"),
              "odd height: %s %s", wf_status_name(fs), wf_client_last_error(c));
        double e = forward(c, in, &ref64, &fs);
        CHECK(fs == WF_OK && e <= 1e-5, "forward after the refusals: %s %.3g",
              wf_status_name(fs), e);
        /* the image-to-video and per-token-timestep variants beside it, on
         * the tp 2 x ulysses 2 mesh: 18 tokens over 2 ulysses ranks, one
         * head per tp rank over 2 (the anything mode) */
        static const struct {
            const char *name, *dir, *io;
        } var[] = {
            { "i2v", "wan-tiny-i2v", "io-wan-tiny-i2v-f32.safetensors" },
            { "flf2v", "wan-tiny-flf2v", "io-wan-tiny-flf2v-f32.safetensors" },
            { "ti2v", "wan-tiny-ti2v", "io-wan-tiny-ti2v-f32.safetensors" },
        };
        for (size_t i = 0; i < sizeof var / sizeof var[0]; i++) {
            wf_model_info_t vi;
            wf_status_t ls = wf_load_model(c, var[i].name, var[i].dir, NULL, &vi);
            CHECK(ls == WF_OK, "load %s: %s %s", var[i].dir, wf_status_name(ls),
                  wf_client_last_error(c));
            if (ls != WF_OK)
                continue;
            /* each rank holds its tp half of the sharded layers */
            CHECK(vi.tp == 2 && vi.rank_bytes > 0 && vi.rank_bytes < vi.params * 4,
                  "%s: tp %u, %llu bytes per rank of %llu params", var[i].dir, vi.tp,
                  (unsigned long long)vi.rank_bytes, (unsigned long long)vi.params);
            e = forward_file(c, fixtures, var[i].name, var[i].io);
            CHECK(e <= 1e-5, "%s via weftd: rel err %.3g", var[i].dir, e);
            printf("%s via weftd, tp 2 x ulysses 2: rel err vs diffusers f64 %.3g\n",
                   var[i].dir, e);
            CHECK(wf_unload_model(c, var[i].name) == WF_OK, "unload %s", var[i].name);
        }
    }
    wf_client_destroy(&c);
    CHECK(stop_daemon(pid, SPAWN_STOP_MS, err, sizeof err), "weftd: %s", err);
    wf_safetensors_close(&io);
    char sock[400];
    snprintf(sock, sizeof sock, "%s/weftd.sock", tmpl);
    unlink(sock);
    rmdir(tmpl);
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
