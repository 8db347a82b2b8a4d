/* bench_models.c — resident models on the CPU backend:
 *
 *  1. load speed beside reading the same bytes from disk: a FLUX
 *     checkpoint of random f32 weights (hidden 512 = 4 heads x 128,
 *     2 double + 4 single blocks, ~90 MB) is written under a temporary
 *     model root; its pages are dropped from the page cache
 *     (fsync + posix_fadvise DONTNEED) before each measurement; baseline:
 *     read(2) of the whole file into memory; measured: wf_load_model
 *     round trip (read, validate, cut and install the shards on 4 ranks).
 *  2. forward time per mesh on weftd cpu:4 (B = 1, 256 image + 64 text
 *     tokens), median of 3 after a warm-up, beside the single-device run
 *     (dp=4: one rank per job).
 *  3. live re-shard (a reconfiguration tp 1 -> 2 with the model
 *     resident) beside unload + load of the same model at tp 2 (cold page
 *     cache, as a reload after eviction would be), for the f32 checkpoint
 *     and the same weights in bf16. On the CPU backend the host copy is
 *     f32 (a bf16 checkpoint is converted once, at load) and the shards
 *     are views of it: re-sharding copies no weight. Target: >= 5x.
 * Prints markdown. Usage: bench_models PATH_TO_WEFTD
 */
#include <fcntl.h>
#include <inttypes.h>
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

#include "flux_config.h"
#include "tensor.h"
#include "weft.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static const char *CONFIG =
    "{\"_class_name\": \"FluxTransformer2DModel\", \"patch_size\": 1, "
    "\"in_channels\": 64, \"out_channels\": null, \"num_layers\": 2, "
    "\"num_single_layers\": 4, \"attention_head_dim\": 128, "
    "\"num_attention_heads\": 4, \"joint_attention_dim\": 512, "
    "\"pooled_projection_dim\": 256, \"guidance_embeds\": false, "
    "\"axes_dims_rope\": [16, 56, 56]}";

/* Write DIR/config.json and DIR/diffusion_pytorch_model.safetensors with
 * random weights of std 1/sqrt(fan_in), in f32 or bf16. Returns the
 * weights file size. */
static uint64_t write_model(const char *dir, bool bf16)
{
    const unsigned es = bf16 ? 2 : 4;
    const char *dts = bf16 ? "BF16" : "F32";
    char p[512];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f || fputs(CONFIG, f) < 0 || fclose(f) != 0)
        exit(1);
    wf_flux_config_t cfg;
    char err[256];
    if (wf_flux_config_parse(CONFIG, strlen(CONFIG), 0, "bench", &cfg, err,
                             sizeof err) != WF_OK) {
        fprintf(stderr, "config: %s\n", err);
        exit(1);
    }
    wf_tensor_spec_t *sp = NULL;
    size_t n = 0;
    if (wf_flux_expected_tensors(&cfg, &sp, &n, err, sizeof err) != WF_OK)
        exit(1);
    size_t hcap = n * 200 + 64, hl = 0;
    char *h = malloc(hcap);
    uint64_t off = 0;
    hl += (size_t)snprintf(h + hl, hcap - hl, "{");
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = (uint64_t)sp[i].shape[0] * (sp[i].rank == 2 ? (uint64_t)sp[i].shape[1] : 1);
        if (sp[i].rank == 2)
            hl += (size_t)snprintf(h + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"%s\","
                                   "\"shape\":[%" PRId64 ",%" PRId64 "],\"data_offsets\":"
                                   "[%" PRIu64 ",%" PRIu64 "]}", i ? "," : "", sp[i].name,
                                   dts, sp[i].shape[0], sp[i].shape[1], off, off + ne * es);
        else
            hl += (size_t)snprintf(h + hl, hcap - hl, "%s\"%s\":{\"dtype\":\"%s\","
                                   "\"shape\":[%" PRId64 "],\"data_offsets\":"
                                   "[%" PRIu64 ",%" PRIu64 "]}", i ? "," : "", sp[i].name,
                                   dts, sp[i].shape[0], off, off + ne * es);
        off += ne * es;
    }
    hl += (size_t)snprintf(h + hl, hcap - hl, "}");
    while (hl % 8)
        h[hl++] = ' ';
    snprintf(p, sizeof p, "%s/diffusion_pytorch_model.safetensors", dir);
    f = fopen(p, "wb");
    uint64_t hl64 = hl;
    if (!f || fwrite(&hl64, 8, 1, f) != 1 || fwrite(h, 1, hl, f) != hl)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = (uint64_t)sp[i].shape[0] * (sp[i].rank == 2 ? (uint64_t)sp[i].shape[1] : 1);
        float scale = sp[i].rank == 2 ? 1.0f / sqrtf((float)sp[i].shape[1]) : 0.1f;
        if (strstr(sp[i].name, "norm_q") || strstr(sp[i].name, "norm_k") ||
            strstr(sp[i].name, "norm_added"))
            scale = 0;      /* RMSNorm weights: 1 + 0 * noise below */
        float buf[4096];
        uint16_t half[4096];
        for (uint64_t k = 0; k < ne; k += 4096) {
            size_t m = ne - k < 4096 ? (size_t)(ne - k) : 4096;
            for (size_t j = 0; j < m; j++)
                buf[j] = scale == 0 ? 1.0f : scale * rnd();
            if (bf16) {
                wf_convert_from_f32(half, WF_DTYPE_BF16, buf, m);
                if (fwrite(half, 2, m, f) != m)
                    exit(1);
            } else if (fwrite(buf, 4, m, f) != m) {
                exit(1);
            }
        }
    }
    fflush(f);
    fsync(fileno(f));
    fclose(f);
    free(h);
    free(sp);
    return 8 + hl + off;
}

/* Drop the file's pages from the page cache (clean pages: no root needed). */
static void evict(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static double read_file(const char *path, uint64_t bytes)
{
    char *buf = malloc(bytes);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    double t0 = now_s();
    uint64_t got = 0;
    while (got < bytes) {
        ssize_t r = read(fd, buf + got, bytes - got);
        if (r <= 0)
            break;
        got += (uint64_t)r;
    }
    double t = now_s() - t0;
    close(fd);
    volatile char sink = buf[bytes / 2];
    (void)sink;
    free(buf);
    return t;
}

static pid_t start_daemon(const char *weftd, const char *endpoint, const char *root)
{
    pid_t pid = fork();
    if (pid == 0) {
        char *argv[] = { (char *)weftd, "--devices", "cpu:4", "--mesh", "dp=4",
                         "--listen", (char *)endpoint, "--model-root", (char *)root,
                         "--log-level",
                         getenv("BENCH_LOG_LEVEL") ? getenv("BENCH_LOG_LEVEL") : "warning",
                         NULL };
        execv(weftd, argv);
        _exit(127);
    }
    return pid;
}

static wf_tensor_t tensor(wf_dtype_t dt, int rank, int64_t a, int64_t b, int64_t c)
{
    wf_tensor_t t = { .dtype = dt, .rank = rank, .shape = { a, b, c } };
    int64_t n = wf_tensor_numel(&t);
    float *d = malloc((size_t)n * sizeof *d);
    for (int64_t i = 0; i < n; i++)
        d[i] = rnd();
    t.data = d;
    return t;
}

static bool mesh(wf_client_t *c, uint32_t dp, uint32_t r, uint32_t u, uint32_t tp,
                 double *ret_s)
{
    wf_mesh_degrees_t m = { dp, r, u, tp };
    double t0 = now_s();
    wf_status_t st = wf_reconfigure(c, &m, NULL);
    if (ret_s)
        *ret_s = now_s() - t0;
    if (st != WF_OK)
        fprintf(stderr, "reconfigure: %s\n", wf_client_last_error(c));
    return st == WF_OK;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    char root[] = "/var/tmp/weft-bench-models-XXXXXX";
    if (!mkdtemp(root))
        return 1;
    char dir[300], file[400], endpoint[400];
    snprintf(dir, sizeof dir, "%s/flux-bench", root);
    snprintf(file, sizeof file, "%s/diffusion_pytorch_model.safetensors", dir);
    snprintf(endpoint, sizeof endpoint, "ipc://%s.sock", root);
    uint64_t bytes = write_model(dir, false);
    char dir16[300], file16[400];
    snprintf(dir16, sizeof dir16, "%s/flux-bench-bf16", root);
    snprintf(file16, sizeof file16, "%s/diffusion_pytorch_model.safetensors", dir16);
    write_model(dir16, true);

    pid_t pid = start_daemon(argv[1], endpoint, root);
    wf_client_t *c = NULL;
    wf_client_connect(endpoint, 600000, &c);
    wf_hello_info_t hi;
    for (int i = 0; i < 200 && wf_hello(c, &hi) != WF_OK; i++)
        usleep(50000);

    /* 1. load beside read */
    double tr[3], tl[3];
    wf_model_info_t info;
    for (int k = 0; k < 3; k++) {
        evict(file);
        tr[k] = read_file(file, bytes);
        evict(file);
        double t0 = now_s();
        if (wf_load_model(c, "bench", "flux-bench", NULL, &info) != WF_OK) {
            fprintf(stderr, "load: %s\n", wf_client_last_error(c));
            return 1;
        }
        tl[k] = now_s() - t0;
        if (k < 2)
            wf_unload_model(c, "bench");
    }
    qsort(tr, 3, sizeof tr[0], cmp);
    qsort(tl, 3, sizeof tl[0], cmp);
    printf("Model: FLUX, hidden 512 (4 heads x 128), 2 double + 4 single blocks, "
           "%" PRIu64 " parameters, f32, %.1f MB; weftd cpu:4, mesh dp=4 (the load "
           "cuts 4 shards). Page cache dropped before each run; medians of 3.\n\n",
           info.params, (double)bytes / 1e6);
    printf("| what | time | throughput | ratio |\n|---|---|---|---|\n");
    printf("| read(2) of the file (baseline) | %.1f ms | %.0f MB/s | 1 |\n",
           tr[1] * 1e3, (double)bytes / tr[1] / 1e6);
    printf("| wf_load_model (read, validate, cut, install) | %.1f ms | %.0f MB/s | "
           "%.2f of read |\n\n", tl[1] * 1e3, (double)bytes / tl[1] / 1e6, tr[1] / tl[1]);

    /* 2. forward per mesh */
    const int64_t B = 1, S_img = 256, S_txt = 64;
    wf_tensor_t hs = tensor(WF_DTYPE_F32, 3, B, S_img, 64);
    wf_tensor_t enc = tensor(WF_DTYPE_F32, 3, B, S_txt, 512);
    wf_tensor_t pooled = tensor(WF_DTYPE_F32, 2, B, 256, 1);
    wf_tensor_t t = tensor(WF_DTYPE_F32, 1, B, 1, 1);
    wf_tensor_t img_ids = tensor(WF_DTYPE_F32, 2, S_img, 3, 1);
    wf_tensor_t txt_ids = tensor(WF_DTYPE_F32, 2, S_txt, 3, 1);
    for (int64_t i = 0; i < S_img; i++) {
        float *d = img_ids.data;
        d[i * 3] = 0;
        d[i * 3 + 1] = (float)(i / 16);
        d[i * 3 + 2] = (float)(i % 16);
    }
    memset(txt_ids.data, 0, (size_t)S_txt * 3 * sizeof(float));
    ((float *)t.data)[0] = 0.5f;
    wf_tensor_t out = tensor(WF_DTYPE_F32, 3, B, S_img, 64);
    wf_flux_inputs_t in = { &hs, &enc, &pooled, &t, &img_ids, &txt_ids, NULL };
    static const struct { const char *name; uint32_t dp, r, u, tp; } ms[] = {
        { "single device (dp=4)", 4, 1, 1, 1 }, { "tp=2", 2, 1, 1, 2 },
        { "tp=4", 1, 1, 1, 4 }, { "ulysses=2", 2, 1, 2, 1 }, { "ring=2", 2, 2, 1, 1 },
        { "tp=2 x ulysses=2", 1, 1, 2, 2 }, { "ring=2 x ulysses=2", 1, 2, 2, 1 },
    };
    printf("Forward, B=1, %" PRId64 " image + %" PRId64 " text tokens, f32 (this "
           "machine: %ld cores for 4 virtual devices):\n\n", S_img, S_txt,
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("| mesh | forward (median of 3) | ratio to single device |\n|---|---|---|\n");
    double base = 0;
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        if (!mesh(c, ms[k].dp, ms[k].r, ms[k].u, ms[k].tp, NULL))
            return 1;
        double ts[4];
        for (int j = 0; j < 4; j++) {
            double t0 = now_s();
            if (wf_forward(c, "bench", &in, &out, NULL) != WF_OK) {
                fprintf(stderr, "forward: %s\n", wf_client_last_error(c));
                return 1;
            }
            ts[j] = now_s() - t0;
        }
        qsort(ts + 1, 3, sizeof ts[0], cmp);
        if (k == 0)
            base = ts[2];
        printf("| %s | %.1f ms | %.2f |\n", ms[k].name, ts[2] * 1e3, ts[2] / base);
    }

    /* 3. re-shard beside unload + load, f32 and bf16 checkpoints */
    printf("\nLive re-shard tp 1 -> 2 (reconfiguration round trip with the model "
           "resident) beside unload + load at tp 2 (cold page cache), medians of 3 "
           "(target: >= 5x):\n\n");
    printf("| checkpoint | unload + load (baseline) | live re-shard | ratio |\n"
           "|---|---|---|---|\n");
    for (int v = 0; v < 2; v++) {
        const char *name = v ? "bench16" : "bench", *path = v ? "flux-bench-bf16" : "flux-bench";
        const char *f = v ? file16 : file;
        if (v) {
            wf_unload_model(c, "bench");
            mesh(c, 4, 1, 1, 1, NULL);
            evict(f);
            if (wf_load_model(c, name, path, NULL, NULL) != WF_OK) {
                fprintf(stderr, "load bf16: %s\n", wf_client_last_error(c));
                return 1;
            }
        }
        double rs[3], ul[3];
        for (int k = 0; k < 3; k++) {
            mesh(c, 4, 1, 1, 1, NULL);
            mesh(c, 2, 1, 1, 2, &rs[k]);
            double t0 = now_s();
            wf_unload_model(c, name);
            evict(f);
            if (wf_load_model(c, name, path, NULL, NULL) != WF_OK)
                return 1;
            ul[k] = now_s() - t0;
        }
        qsort(rs, 3, sizeof rs[0], cmp);
        qsort(ul, 3, sizeof ul[0], cmp);
        printf("| %s (%s) | %.1f ms | %.1f ms | %.1fx faster |\n",
               v ? "bf16" : "f32", v ? "host copy converted to f32 once at load"
                                     : "host copy as read",
               ul[1] * 1e3, rs[1] * 1e3, ul[1] / rs[1]);
    }
    wf_client_destroy(&c);
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s.sock'", root, root);
    return system(cmd) == 0 ? 0 : 1;
}
