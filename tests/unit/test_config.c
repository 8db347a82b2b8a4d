/* test_config.c — weftd's settings: defaults, bounds, the config file
 * (errors name file:line), environment and flag precedence, size
 * suffixes, devices (cpu:N and the CUDA forms, resolved against a GPU
 * count without a GPU), the mesh (resolved against the device count, with
 * messages naming both numbers) and the per-job defaults of context
 * parallelism, the CUDA backend's settings (gpu_memory, cuda_attention,
 * cuda_gelu_epilogue), which settings a reload applies, and the default
 * column of --help (an empty default says what its meaning column says). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "base/config.h"
#include "support/check.h"

/* Build settings from argv-style flags and an envp; returns the status. */
static wf_status_t build(int argc, char **argv, char **envp, wf_settings_t *s,
                         char *err, size_t err_len)
{
    wf_cli_t cli;
    wf_status_t st = wf_cli_parse(argc, argv, &cli, err, err_len);
    if (st != WF_OK)
        return st;
    return wf_config_build(&cli, envp, s, err, err_len);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

static void test_defaults(void)
{
    wf_settings_t s, b;
    wf_limits_t lim;
    char err[256];
    wf_settings_default(&s);
    wf_limits_default(&lim);
    CHECK_TRUE(strcmp(s.listen, WF_DEFAULT_ENDPOINT) == 0);
    CHECK_TRUE(strcmp(s.devices, "cpu:2") == 0 && s.device_count == 2);
    CHECK_TRUE(s.queue_capacity == 64);
    CHECK_TRUE(s.cpu_memory == 0);
    CHECK_TRUE(s.log_level == WF_LOG_INFO);
    CHECK_TRUE(memcmp(&s.limits, &lim, sizeof lim) == 0);
    char *argv[] = { "weftd", NULL };
    char *envp[] = { NULL };
    CHECK_TRUE(build(1, argv, envp, &b, err, sizeof err) == WF_OK);
    CHECK_TRUE(memcmp(&s, &b, sizeof s) == 0);
}

static void test_sizes(void)
{
    uint64_t v;
    CHECK_TRUE(wf_parse_size("0", &v) && v == 0);
    CHECK_TRUE(wf_parse_size("4K", &v) && v == 4096);
    CHECK_TRUE(wf_parse_size("2m", &v) && v == (UINT64_C(2) << 20));
    CHECK_TRUE(wf_parse_size("1G", &v) && v == (UINT64_C(1) << 30));
    CHECK_TRUE(wf_parse_size("3T", &v) && v == (UINT64_C(3) << 40));
    CHECK_TRUE(!wf_parse_size("", &v));
    CHECK_TRUE(!wf_parse_size("-1", &v));
    CHECK_TRUE(!wf_parse_size(" 1", &v));
    CHECK_TRUE(!wf_parse_size("1X", &v));
    CHECK_TRUE(!wf_parse_size("1KB", &v));
    CHECK_TRUE(!wf_parse_size("99999999999999999999", &v));
    CHECK_TRUE(!wf_parse_size("17000000T", &v));   /* overflows after the shift */
}

static void test_flags_and_bounds(void)
{
    wf_settings_t s;
    char err[256];
    char *envp[] = { NULL };
    {
        char *argv[] = { "weftd", "--queue-capacity", "8", "--cpu-memory=512M",
                         "--log-level", "debug", "--max_tensor_bytes", "1G",
                         "--devices", "cpu:4", "--listen", "tcp://127.0.0.1:5555",
                         NULL };
        CHECK_TRUE(build(12, argv, envp, &s, err, sizeof err) == WF_OK);
        CHECK_TRUE(s.queue_capacity == 8);
        CHECK_TRUE(s.cpu_memory == (UINT64_C(512) << 20));
        CHECK_TRUE(s.log_level == WF_LOG_DEBUG);
        CHECK_TRUE(s.limits.max_tensor_bytes == (UINT64_C(1) << 30));
        CHECK_TRUE(s.device_count == 4 && strcmp(s.devices, "cpu:4") == 0);
        CHECK_TRUE(strcmp(s.listen, "tcp://127.0.0.1:5555") == 0);
    }
    {   /* bounds are inclusive */
        char *argv[] = { "weftd", "--queue-capacity", "65536", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_OK);
        CHECK_TRUE(s.queue_capacity == 65536);
    }
    {
        char *argv[] = { "weftd", "--queue-capacity", "0", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "--queue-capacity") && strstr(err, "out of bounds"));
    }
    {
        char *argv[] = { "weftd", "--max-tensors", "17", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "--max-tensors") != NULL);
    }
    {
        /* Syntax is fine; what follows depends on the machine: a GPU
         * serves it, else the message names CUDA's reason (no GPU, no
         * driver, backend not built). */
        char *argv[] = { "weftd", "--devices", "cuda:0", NULL };
        wf_status_t st = build(3, argv, envp, &s, err, sizeof err);
        if (st == WF_OK)
            CHECK_TRUE(s.device_kind == WF_DEVICE_CUDA && s.device_count == 1 &&
                       s.gpu[0] == 0 && strcmp(s.devices, "cuda:0") == 0);
        else
            CHECK_TRUE(st == WF_E_BAD_ARGUMENT && strstr(err, "devices = 'cuda:0'") &&
                       strstr(err, "CUDA"));
        char *argv2[] = { "weftd", "--devices", "cuda:0;1", NULL };
        CHECK_TRUE(build(3, argv2, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "--devices 'cuda:0;1'") && strstr(err, "expected ','"));
    }
    {
        char *argv[] = { "weftd", "--devices", "cpu:0", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        char *argv2[] = { "weftd", "--devices", "cpu:65", NULL };
        CHECK_TRUE(build(3, argv2, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        char *argv3[] = { "weftd", "--devices", "gpu", NULL };
        CHECK_TRUE(build(3, argv3, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    }
    {
        char *argv[] = { "weftd", "--log-level", "loud", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "--log-level") != NULL);
    }
    {
        char *argv[] = { "weftd", "--listen", "udp://x", NULL };
        CHECK_TRUE(build(3, argv, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        char longpath[160] = "ipc:///tmp/";
        memset(longpath + 11, 'x', 120);
        longpath[131] = '\0';
        char *argv2[] = { "weftd", "--listen", longpath, NULL };
        CHECK_TRUE(build(3, argv2, envp, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "107") != NULL);
    }
    {   /* argv errors, before any value is looked at */
        wf_cli_t cli;
        char *a1[] = { "weftd", "--bogus", "1", NULL };
        CHECK_TRUE(wf_cli_parse(3, a1, &cli, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "--bogus") != NULL);
        char *a2[] = { "weftd", "--queue-capacity", NULL };
        CHECK_TRUE(wf_cli_parse(2, a2, &cli, err, sizeof err) == WF_E_BAD_ARGUMENT);
        CHECK_TRUE(strstr(err, "needs a value") != NULL);
        char *a3[] = { "weftd", "stray", NULL };
        CHECK_TRUE(wf_cli_parse(2, a3, &cli, err, sizeof err) == WF_E_BAD_ARGUMENT);
        char *a4[] = { "weftd", "--help", "--config=/x.conf", NULL };
        CHECK_TRUE(wf_cli_parse(3, a4, &cli, err, sizeof err) == WF_OK);
        CHECK_TRUE(cli.help && cli.config_file && strcmp(cli.config_file, "/x.conf") == 0);
        CHECK_TRUE(!cli.check_config && !cli.version);
        char *a5[] = { "weftd", "--check-config", "--version", NULL };
        CHECK_TRUE(wf_cli_parse(3, a5, &cli, err, sizeof err) == WF_OK);
        CHECK_TRUE(cli.check_config && cli.version && cli.n_sets == 0);
    }
}

static void test_file_env_precedence(const char *dir)
{
    char path[256], cfg[300], err[512];
    wf_settings_t s;
    snprintf(path, sizeof path, "%s/weftd.conf", dir);
    snprintf(cfg, sizeof cfg, "--config=%s", path);

    write_file(path,
               "# weftd test config\n"
               "\n"
               "queue_capacity = 8\n"
               "  max-header-bytes=128K   \n"
               "listen = \"ipc:///tmp/weft-cfg.sock\"\n"
               "log_level = warning\n");
    char *argv[] = { "weftd", cfg, NULL };
    char *envp0[] = { "HOME=/root", NULL };
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.queue_capacity == 8);
    CHECK_TRUE(s.limits.max_header_bytes == 128 * 1024);
    CHECK_TRUE(strcmp(s.listen, "ipc:///tmp/weft-cfg.sock") == 0);
    CHECK_TRUE(s.log_level == WF_LOG_WARNING);

    /* file < env < flag */
    char *envp1[] = { "WEFT_QUEUE_CAPACITY=9", "WEFT_LOG_LEVEL=debug", NULL };
    CHECK_TRUE(build(2, argv, envp1, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.queue_capacity == 9 && s.log_level == WF_LOG_DEBUG);
    char *argv2[] = { "weftd", cfg, "--queue-capacity", "10", NULL };
    CHECK_TRUE(build(4, argv2, envp1, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.queue_capacity == 10 && s.log_level == WF_LOG_DEBUG);

    /* WEFT_CONFIG names the file when --config does not */
    char envcfg[300];
    snprintf(envcfg, sizeof envcfg, "WEFT_CONFIG=%s", path);
    char *envp2[] = { envcfg, NULL };
    char *argv3[] = { "weftd", NULL };
    CHECK_TRUE(build(1, argv3, envp2, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.queue_capacity == 8);

    /* a bad environment value names the variable */
    char *envp3[] = { "WEFT_MAX_DEPTH=99", NULL };
    CHECK_TRUE(build(2, argv, envp3, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "WEFT_MAX_DEPTH") != NULL);

    /* file errors name file:line, and leave *ret untouched */
    wf_settings_t before = s;
    char want[300];
    write_file(path, "# ok\nqueue_capacity = 4\n\nbogus = 1\n");
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    snprintf(want, sizeof want, "%s:4:", path);
    CHECK_TRUE(strstr(err, want) && strstr(err, "unknown setting 'bogus'"));
    CHECK_TRUE(memcmp(&s, &before, sizeof s) == 0);

    write_file(path, "queue_capacity = 4\nqueue_capacity = 70000\n");
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    snprintf(want, sizeof want, "%s:2:", path);
    CHECK_TRUE(strstr(err, want) && strstr(err, "out of bounds"));

    write_file(path, "\n\njust words\n");
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    snprintf(want, sizeof want, "%s:3:", path);
    CHECK_TRUE(strstr(err, want) != NULL);

    write_file(path, "devices = cuda:1,\n");
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, ":1:") && strstr(err, "expected cuda"));

    unlink(path);
    CHECK_TRUE(build(2, argv, envp0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "cannot open") != NULL);
}

static void test_reload_rules(void)
{
    wf_settings_t cur, next;
    wf_settings_default(&cur);
    next = cur;
    const char *restart[8];
    size_t n_restart = 99;
    CHECK_TRUE(wf_settings_apply_reload(&cur, &next, restart, 8, &n_restart) == 0);
    CHECK_TRUE(n_restart == 0);

    next.queue_capacity = 7;
    next.log_level = WF_LOG_DEBUG;
    next.limits.max_tensor_bytes = 1024;
    snprintf(next.listen, sizeof next.listen, "ipc:///tmp/other.sock");
    snprintf(next.devices, sizeof next.devices, "cpu:4");
    next.device_count = 4;
    next.cpu_memory = 1 << 20;
    size_t applied = wf_settings_apply_reload(&cur, &next, restart, 8, &n_restart);
    CHECK_TRUE(applied == 3);
    CHECK_TRUE(cur.queue_capacity == 7 && cur.log_level == WF_LOG_DEBUG);
    CHECK_TRUE(cur.limits.max_tensor_bytes == 1024);
    CHECK_TRUE(n_restart == 3);
    bool saw_listen = false, saw_devices = false, saw_mem = false;
    for (size_t i = 0; i < n_restart && i < 8; i++) {
        saw_listen |= strcmp(restart[i], "listen") == 0;
        saw_devices |= strcmp(restart[i], "devices") == 0;
        saw_mem |= strcmp(restart[i], "cpu_memory") == 0;
    }
    CHECK_TRUE(saw_listen && saw_devices && saw_mem);
    /* the non-reloadable ones are unchanged */
    CHECK_TRUE(strcmp(cur.listen, WF_DEFAULT_ENDPOINT) == 0);
    CHECK_TRUE(cur.device_count == 2 && cur.cpu_memory == 0);
}

/* mesh, rotate_method and the boolean per-job defaults */
static void test_mesh_and_job_defaults(const char *dir)
{
    wf_settings_t s;
    char err[512];
    wf_settings_default(&s);
    CHECK_TRUE(s.mesh[0] == '\0');
    CHECK_TRUE(s.mesh_deg.dp == 1 && s.mesh_deg.ring == 1 && s.mesh_deg.ulysses == 1 &&
               s.mesh_deg.tp == 2);                      /* tp = devices */
    CHECK_TRUE(s.rotate_method == WF_ROTATE_ALLGATHER);
    CHECK_TRUE(s.convert_to_fp32 && !s.ring_anything && !s.ulysses_anything &&
               s.load_balance);

    /* default mesh follows the device count */
    char *a1[] = { "weftd", "--devices", "cpu:4", NULL };
    char *env0[] = { NULL };
    CHECK_TRUE(build(3, a1, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.mesh_deg.tp == 4 && s.mesh_deg.dp == 1);

    char *a2[] = { "weftd", "--devices", "cpu:4", "--mesh", "ring=2, ulysses=2",
                   "--rotate-method=alltoall", "--convert-to-fp32", "off",
                   "--ring-anything", "yes", "--ulysses_anything=1",
                   "--load-balance", "false", NULL };
    CHECK_TRUE(build(13, a2, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.mesh_deg.dp == 1 && s.mesh_deg.ring == 2 && s.mesh_deg.ulysses == 2 &&
               s.mesh_deg.tp == 1);
    CHECK_TRUE(s.rotate_method == WF_ROTATE_ALLTOALL);
    CHECK_TRUE(!s.convert_to_fp32 && s.ring_anything && s.ulysses_anything &&
               !s.load_balance);

    /* product != devices: both numbers in the message, and the source */
    char *a3[] = { "weftd", "--devices", "cpu:4", "--mesh", "ring=3", NULL };
    CHECK_TRUE(build(5, a3, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "--mesh") && strstr(err, "is 3") && strstr(err, "(4)"));
    printf("  %s\n", err);
    /* the device count may come after the mesh: checked at the end */
    char *a4[] = { "weftd", "--mesh", "dp=2,tp=2", "--devices", "cpu:4", NULL };
    CHECK_TRUE(build(5, a4, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.mesh_deg.dp == 2 && s.mesh_deg.tp == 2);
    /* zero degree, unknown name, bad values */
    char *a5[] = { "weftd", "--mesh", "ring=0", NULL };
    CHECK_TRUE(build(3, a5, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "`ring` degree must be greater than or equal to 1"));
    printf("  %s\n", err);
    char *a6[] = { "weftd", "--mesh", "rings=2", NULL };
    CHECK_TRUE(build(3, a6, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "unknown mesh dim \"rings\""));
    char *a7[] = { "weftd", "--rotate-method", "ring", NULL };
    CHECK_TRUE(build(3, a7, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "allgather or alltoall"));
    char *a8[] = { "weftd", "--load-balance", "maybe", NULL };
    CHECK_TRUE(build(3, a8, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "true or false"));

    /* environment and file, with the file's line in the error */
    char *a9[] = { "weftd", "--devices", "cpu:4", NULL };
    char *env1[] = { "WEFT_MESH=dp=4", NULL };
    CHECK_TRUE(build(3, a9, env1, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.mesh_deg.dp == 4 && s.mesh_deg.tp == 1);
    char path[256];
    snprintf(path, sizeof path, "%s/mesh.conf", dir);
    write_file(path, "devices = cpu:4\n# two replicas\nmesh = dp=2,ring=3\n");
    char *a10[] = { "weftd", "--config", path, NULL };
    CHECK_TRUE(build(3, a10, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "mesh.conf:3") && strstr(err, "is 6") && strstr(err, "(4)"));
    printf("  %s\n", err);
    /* a flag overrides the file's mesh, and the check follows the flag */
    char *a11[] = { "weftd", "--config", path, "--mesh", "ulysses=4", NULL };
    CHECK_TRUE(build(5, a11, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.mesh_deg.ulysses == 4 && s.mesh_deg.dp == 1);
    unlink(path);

    /* reload: the mesh and the job defaults are reloadable; "" and tp=2
     * on two devices are the same mesh (nothing to apply) */
    wf_settings_t cur, next;
    const char *restart[8];
    size_t n_restart = 99;
    wf_settings_default(&cur);
    next = cur;
    snprintf(next.mesh, sizeof next.mesh, "tp=2");
    CHECK_TRUE(wf_settings_apply_reload(&cur, &next, restart, 8, &n_restart) == 0);
    snprintf(next.mesh, sizeof next.mesh, "ring=2");
    next.mesh_deg = (wf_mesh_degrees_t){ 1, 2, 1, 1 };
    next.rotate_method = WF_ROTATE_ALLTOALL;
    next.load_balance = false;
    CHECK_TRUE(wf_settings_apply_reload(&cur, &next, restart, 8, &n_restart) == 3);
    CHECK_TRUE(n_restart == 0);
    CHECK_TRUE(strcmp(cur.mesh, "ring=2") == 0 && cur.mesh_deg.ring == 2 &&
               cur.mesh_deg.tp == 1);
    CHECK_TRUE(cur.rotate_method == WF_ROTATE_ALLTOALL && !cur.load_balance);
}

/* The devices forms without a GPU: parse (syntax, canonical text), then
 * resolve against a given GPU count (what wf_config_build probes). */
static void test_cuda_devices(void)
{
    wf_settings_t s;
    char why[256];
    wf_settings_default(&s);
    CHECK_TRUE(wf_settings_parse_devices("cuda", &s, why, sizeof why));
    CHECK_TRUE(s.device_kind == WF_DEVICE_CUDA && s.device_count == 0 &&
               strcmp(s.devices, "cuda") == 0);
    CHECK_TRUE(wf_settings_resolve_gpus(&s, 3, why, sizeof why));
    CHECK_TRUE(s.device_count == 3 && s.gpu[0] == 0 && s.gpu[2] == 2);
    CHECK_TRUE(wf_settings_parse_devices("CUDA", &s, why, sizeof why));
    CHECK_TRUE(wf_settings_resolve_gpus(&s, 100, why, sizeof why));
    CHECK_TRUE(s.device_count == WF_SETTINGS_MAX_DEVICES);        /* capped */
    CHECK_TRUE(wf_settings_parse_devices("cuda", &s, why, sizeof why));
    CHECK_TRUE(!wf_settings_resolve_gpus(&s, 0, why, sizeof why));
    CHECK_TRUE(strstr(why, "no CUDA device") != NULL);

    CHECK_TRUE(wf_settings_parse_devices("cuda:1, 0", &s, why, sizeof why));
    CHECK_TRUE(s.device_kind == WF_DEVICE_CUDA && s.device_count == 2 &&
               s.gpu[0] == 1 && s.gpu[1] == 0 && strcmp(s.devices, "cuda:1,0") == 0);
    CHECK_TRUE(wf_settings_resolve_gpus(&s, 2, why, sizeof why));
    CHECK_TRUE(!wf_settings_resolve_gpus(&s, 1, why, sizeof why));
    CHECK_TRUE(strstr(why, "cuda:1") && strstr(why, "out of range") &&
               strstr(why, "1 GPU"));

    /* the mixed mode: four ranks on GPU 0 */
    CHECK_TRUE(wf_settings_parse_devices("cuda:0,0,0,0", &s, why, sizeof why));
    CHECK_TRUE(s.device_count == 4 && s.gpu[3] == 0);
    CHECK_TRUE(wf_settings_resolve_gpus(&s, 1, why, sizeof why) && s.device_count == 4);

    /* 64 ranks fit the canonical text; 65 are too many */
    char many[512];
    size_t off = (size_t)snprintf(many, sizeof many, "cuda:");
    for (int i = 0; i < WF_SETTINGS_MAX_DEVICES; i++)
        off += (size_t)snprintf(many + off, sizeof many - off, "%s%d", i ? "," : "", i);
    CHECK_TRUE(wf_settings_parse_devices(many, &s, why, sizeof why));
    CHECK_TRUE(s.device_count == WF_SETTINGS_MAX_DEVICES && s.gpu[63] == 63 &&
               strcmp(s.devices, many) == 0);
    snprintf(many + off, sizeof many - off, ",0");
    CHECK_TRUE(!wf_settings_parse_devices(many, &s, why, sizeof why));
    CHECK_TRUE(strstr(why, "more than 64") != NULL);

    const char *bad[] = { "cuda:", "cuda:x", "cuda:0,", "cuda:-1", "cuda:64",
                          "cuda:0,,1", "cuda 0", "cudax", "gpu:0" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        CHECK_TRUE(!wf_settings_parse_devices(bad[i], &s, why, sizeof why));
        CHECK_TRUE(why[0] != '\0');
    }

    /* CPU devices: nothing to resolve, whatever the GPUs */
    CHECK_TRUE(wf_settings_parse_devices("cpu:3", &s, why, sizeof why));
    CHECK_TRUE(s.device_kind == WF_DEVICE_CPU && s.device_count == 3);
    CHECK_TRUE(wf_settings_resolve_gpus(&s, 0, why, sizeof why) && s.device_count == 3);
}

/* The comm knobs are settings (file, WEFT_<NAME>, flags); the test hooks
 * come from their own table, environment only, and a bad one is refused. */
static void test_comm_knobs_and_test_hooks(void)
{
    wf_settings_t s;
    char err[256];
    char *argv[] = { "weftd", NULL };
    char *env0[] = { NULL };
    CHECK_TRUE(build(1, argv, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.nccl && s.nccl_init_timeout_ms == 30000);
    CHECK_TRUE(s.test.n_fail_jobs == 0 && s.test.protocol_version == 0);

    char *env1[] = { "WEFT_NCCL=0", "WEFT_NCCL_INIT_TIMEOUT_MS=5000",
                     "WEFT_TEST_FAIL_JOB=3,17", "WEFT_TEST_PROTOCOL_VERSION=99", NULL };
    CHECK_TRUE(build(1, argv, env1, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(!s.nccl && s.nccl_init_timeout_ms == 5000);
    CHECK_TRUE(s.test.n_fail_jobs == 2 && s.test.fail_jobs[0] == 3 && s.test.fail_jobs[1] == 17);
    CHECK_TRUE(s.test.protocol_version == 99);

    char *argv2[] = { "weftd", "--nccl", "false", "--nccl-init-timeout-ms", "50", NULL };
    CHECK_TRUE(build(5, argv2, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "nccl-init-timeout-ms") != NULL);

    char *env2[] = { "WEFT_TEST_FAIL_JOB=3,x", NULL };
    CHECK_TRUE(build(1, argv, env2, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(strstr(err, "WEFT_TEST_FAIL_JOB") != NULL);
    char *env3[] = { "WEFT_TEST_FAIL_JOB=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", NULL };
    CHECK_TRUE(build(1, argv, env3, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    char *env4[] = { "WEFT_TEST_PROTOCOL_VERSION=4294967296", NULL };
    CHECK_TRUE(build(1, argv, env4, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
}

/* The CUDA backend's settings: gpu_memory (bytes or a fraction, range
 * checked, from flags, the environment and the file), cuda_attention
 * (the kernel names the backend takes) and cuda_gelu_epilogue; none is
 * reloadable. */
static void test_cuda_backend_settings(const char *dir)
{
    wf_settings_t s;
    wf_gpu_memory_t g;
    char err[256], why[128];
    char *env0[] = { NULL };
    char *argv0[] = { "weftd", NULL };
    CHECK_TRUE(build(1, argv0, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.gpu_memory.bytes == 0 && s.gpu_memory.fraction == 0.0);
    CHECK_TRUE(strcmp(s.cuda_attention, "auto") == 0 && s.cuda_gelu_epilogue);
    CHECK_TRUE(s.cuda_graphs == WF_GRAPHS_OFF && s.cuda_graphs_max == 512);

    /* the parser alone: bytes, fractions, the bounds of each */
    CHECK_TRUE(wf_parse_gpu_memory("0", &g, why, sizeof why) && g.bytes == 0 &&
               g.fraction == 0.0);
    CHECK_TRUE(wf_parse_gpu_memory("40G", &g, why, sizeof why) &&
               g.bytes == (UINT64_C(40) << 30) && g.fraction == 0.0);
    CHECK_TRUE(wf_parse_gpu_memory("64M", &g, why, sizeof why) && g.bytes == (UINT64_C(64) << 20));
    CHECK_TRUE(wf_parse_gpu_memory("1024T", &g, why, sizeof why) && g.bytes == (UINT64_C(1) << 50));
    CHECK_TRUE(wf_parse_gpu_memory("0.5", &g, why, sizeof why) && g.bytes == 0 &&
               g.fraction == 0.5);
    CHECK_TRUE(wf_parse_gpu_memory("0.01", &g, why, sizeof why) && g.fraction == 0.01);
    CHECK_TRUE(wf_parse_gpu_memory("0.95", &g, why, sizeof why) && g.fraction == 0.95);
    static const char *const bad[] = { "", "63M", "1025T", "0.0", "0.009", "0.96", "1.0",
                                       "1.5", "-0.5", ".5", "0.5x", "0.5G", "half", "5%",
                                       "nan", "1e-1" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g.bytes = 7;
        CHECK(!wf_parse_gpu_memory(bad[i], &g, why, sizeof why) && g.bytes == 7 && why[0],
              "gpu_memory '%s' was taken", bad[i]);
    }

    /* flags, the environment, the file; the message names the source */
    char *argv1[] = { "weftd", "--gpu-memory", "0.45", "--cuda-attention", "ws+pipe+mc",
                      "--cuda-gelu-epilogue", "false", NULL };
    CHECK_TRUE(build(7, argv1, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.gpu_memory.fraction == 0.45 && s.gpu_memory.bytes == 0);
    CHECK_TRUE(strcmp(s.cuda_attention, "ws+pipe+mc") == 0 && !s.cuda_gelu_epilogue);
    char *env1[] = { "WEFT_GPU_MEMORY=24G", "WEFT_CUDA_ATTENTION=mma",
                     "WEFT_CUDA_GELU_EPILOGUE=0", NULL };
    CHECK_TRUE(build(1, argv0, env1, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.gpu_memory.bytes == (UINT64_C(24) << 30) && s.gpu_memory.fraction == 0.0);
    CHECK_TRUE(strcmp(s.cuda_attention, "mma") == 0 && !s.cuda_gelu_epilogue);
    char path[256];
    snprintf(path, sizeof path, "%s/cuda.conf", dir);
    write_file(path, "gpu_memory = 0.3\ncuda_attention = wgmma-pipe\n");
    char *argv2[] = { "weftd", "--config", path, NULL };
    CHECK_TRUE(build(3, argv2, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.gpu_memory.fraction == 0.3 && strcmp(s.cuda_attention, "wgmma-pipe") == 0);
    write_file(path, "gpu_memory = 1.5\n");
    CHECK_TRUE(build(3, argv2, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK(strstr(err, "cuda.conf:1") && strstr(err, "gpu_memory"), "%s", err);
    unlink(path);
    char *argv3[] = { "weftd", "--gpu-memory", "12", NULL };
    CHECK_TRUE(build(3, argv3, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);
    CHECK(strstr(err, "--gpu-memory") != NULL, "%s", err);
    static const char *const kern_bad[] = { "bogus", "ws+pipe+pipe", "ws-", "", "WGMMA" };
    for (size_t i = 0; i < sizeof kern_bad / sizeof kern_bad[0]; i++) {
        char *argv4[] = { "weftd", "--cuda-attention", (char *)kern_bad[i], NULL };
        CHECK(build(3, argv4, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT &&
              strstr(err, "--cuda-attention"), "cuda_attention '%s' was taken", kern_bad[i]);
    }
    CHECK_TRUE(wf_cuda_attention_kernel_ok("auto") && wf_cuda_attention_kernel_ok("ws-full-mc"));
    /* cuda_graphs: off or blocks; cuda_graphs_max 1..65536 */
    char *argv5[] = { "weftd", "--cuda-graphs", "blocks", "--cuda-graphs-max", "64", NULL };
    CHECK_TRUE(build(5, argv5, env0, &s, err, sizeof err) == WF_OK);
    CHECK_TRUE(s.cuda_graphs == WF_GRAPHS_BLOCKS && s.cuda_graphs_max == 64);
    char *env5[] = { "WEFT_CUDA_GRAPHS=off", NULL };
    CHECK_TRUE(build(1, argv0, env5, &s, err, sizeof err) == WF_OK &&
               s.cuda_graphs == WF_GRAPHS_OFF);
    static const char *const graphs_bad[] = { "on", "Blocks", "", "whole", "1" };
    for (size_t i = 0; i < sizeof graphs_bad / sizeof graphs_bad[0]; i++) {
        char *argv6[] = { "weftd", "--cuda-graphs", (char *)graphs_bad[i], NULL };
        CHECK(build(3, argv6, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT &&
              strstr(err, "--cuda-graphs"), "cuda_graphs '%s' was taken", graphs_bad[i]);
    }
    char *argv7[] = { "weftd", "--cuda-graphs-max", "0", NULL };
    CHECK_TRUE(build(3, argv7, env0, &s, err, sizeof err) == WF_E_BAD_ARGUMENT);

    /* a restart, not a reload */
    wf_settings_t cur, next;
    wf_settings_default(&cur);
    next = cur;
    next.gpu_memory.fraction = 0.5;
    snprintf(next.cuda_attention, sizeof next.cuda_attention, "mma");
    next.cuda_gelu_epilogue = false;
    next.cuda_graphs = WF_GRAPHS_BLOCKS;
    next.cuda_graphs_max = 8;
    const char *restart[8];
    size_t nr = 0;
    CHECK_TRUE(wf_settings_apply_reload(&cur, &next, restart, 8, &nr) == 0 && nr == 5);
    CHECK_TRUE(cur.cuda_graphs == WF_GRAPHS_OFF);
    CHECK_TRUE(cur.gpu_memory.fraction == 0.0 && strcmp(cur.cuda_attention, "auto") == 0);
}

/* --help's default column: metrics_listen's empty default reads "" (off),
 * and every empty default that says in parentheses what it means says
 * what its meaning column's "empty = ..." says. */
static void test_help_defaults(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_TRUE(f != NULL);
    if (!f)
        return;
    wf_config_print_help(f, "weftd");
    fclose(f);
    int metrics = 0, said = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "metrics_listen ", 15) == 0) {
            metrics++;
            CHECK(strstr(line, " \"\" (off) ") != NULL, "want \"\" (off) in: %s", line);
        }
        const char *def = strstr(line, " \"\" (");
        const char *empty = strstr(line, "empty = ");
        if (!def || !empty)
            continue;
        said++;
        const char *words = def + 5;
        size_t n = strcspn(words, ")");
        empty += strlen("empty = ");
        CHECK(strncmp(words, empty, n) == 0 && (empty[n] == ';' || empty[n] == '\0'),
              "the default's words differ from \"empty = ...\" in: %s", line);
    }
    CHECK(metrics == 1 && said >= 3, "%d metrics_listen lines, %d empty defaults with words",
          metrics, said);
    printf("test_config: --help's empty defaults: %d agree with their meaning\n", said);
    free(text);
}

int main(void)
{
    char dir[] = "/tmp/weft-test-config-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults();
    test_sizes();
    test_flags_and_bounds();
    test_cuda_devices();
    test_file_env_precedence(dir);
    test_reload_rules();
    test_mesh_and_job_defaults(dir);
    test_comm_knobs_and_test_hooks();
    test_cuda_backend_settings(dir);
    test_help_defaults();
    rmdir(dir);
    if (failed) {
        fprintf(stderr, "test_config: %d check(s) failed\n", failed);
        return 1;
    }
    printf("test_config: all checks passed\n");
    return 0;
}
