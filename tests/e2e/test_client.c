/* test_client.c — end to end: a real weftd (cpu:2) driven through libweft.
 *
 * usage: test_client PATH_TO_WEFTD
 *
 * Starts the daemon with fork/exec on a private ipc endpoint, waits for it
 * with a hello under a timeout (no sleeps), then checks: hello, status,
 * poll on a job the daemon holds (its test hook WEFT_TEST_HOLD_JOBS),
 * synchronous attention over dtypes / causal / GQA / Sq != Skv / devices /
 * LSE against an fp64 reference, 16 jobs in flight answered in any order,
 * destroying a job before its reply, client-side validation (nothing
 * reaches the daemon; bad option enums and mesh degrees included), the
 * mesh and coordinates in status, a daemon error with its message, a daemon that
 * stops reading (SIGSTOP: timeout, buffers released, client recovers), a
 * timeout on an endpoint without a daemon, two clients in two threads, and finally that
 * SIGTERM makes the daemon exit 0.
 *
 * Timeouts are checked against the client's configured timeout: a call
 * that times out must not return before it, and must return within it
 * plus TIMEOUT_SLACK_MS. Client threads record what they saw; main()
 * CHECKs it (support/check.h).
 *
 * Tolerances (inputs uniform in [-1, 1], so |out| <= 1; the reference
 * reads the same rounded inputs, so only output rounding and the daemon's
 * f32 arithmetic remain): out f32 1e-4, f16 5e-4 (half an ulp below 1 is
 * 2.4e-4), bf16 4e-3 (half an ulp is 2e-3); lse 1e-4 relative to
 * max(1, |lse|).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/check.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"

#define MAX_TENSOR_BYTES (4u << 20) /* the daemon's --max-tensor-bytes */
#define QUEUE_CAPACITY 48           /* the daemon's --queue-capacity */

/* Slack on a call bounded by its timeout: it must return within the
 * timeout plus this. A wake-up after a timer is late by milliseconds even
 * on a loaded 2-core machine under the sanitizers; ten seconds leaves
 * three orders of magnitude, and stays a third of libweft's 30 s default
 * timeout, so a call that waited for the default instead of its own
 * timeout still fails. */
#define TIMEOUT_SLACK_MS 10000u

/* The bound on a reply a working daemon sends on its own (a job, hello,
 * status): a failure bound only (support/wait.h). */
#define REPLY_MS ((int)wait_bound_ms(WAIT_EVENT_MS))

/* A call bounded by a client timeout of timeout_ms took dt_ms (measured
 * with wait_now_ms: the whole-millisecond CLOCK_MONOTONIC that libweft
 * reads, started before the call and read after it, so a timeout that
 * fired at its deadline cannot measure short). */
static bool timed_out_in_bounds(uint64_t dt_ms, int timeout_ms)
{
    return dt_ms >= (uint64_t)timeout_ms &&
           dt_ms <= (uint64_t)timeout_ms + wait_bound_ms(TIMEOUT_SLACK_MS);
}

/* ---- dtypes, rng, fp64 reference: tests/support/jobcheck.c ------------- */

static double out_tolerance(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 1e-4 : dt == WF_DTYPE_F16 ? 5e-4 : 4e-3;
}

/* ---- one attention case: buffers, reference, check -------------------- */

typedef struct acase {
    const char *name;
    int64_t B, Sq, Skv, Hq, Hkv, D;
    wf_dtype_t qt, kt, vt, ot;
    int causal;
    uint32_t devices;
    bool want_lse;
    float scale;      /* 0: 1/sqrt(D) */
    uint64_t seed;
} acase_t;

typedef struct abuf {
    acase_t c;
    wf_tensor_t q, k, v, out;
    float *lse;
} abuf_t;

static bool abuf_init(abuf_t *a, const acase_t *c)
{
    memset(a, 0, sizeof *a);
    a->c = *c;
    int64_t qs[4] = { c->B, c->Sq, c->Hq, c->D };
    int64_t ks[4] = { c->B, c->Skv, c->Hkv, c->D };
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    wf_dtype_t dt[4] = { c->qt, c->kt, c->vt, c->ot };
    uint64_t s = c->seed;
    for (int i = 0; i < 4; i++) {
        t[i]->dtype = dt[i];
        t[i]->rank = 4;
        memcpy(t[i]->shape, i == 1 || i == 2 ? ks : qs, sizeof qs);
        size_t n = (size_t)wf_tensor_numel(t[i]);
        /* +1: the library must cope with any alignment, so offset the
         * inputs by one byte from malloc's alignment. */
        char *raw = malloc(n * wf_dtype_size(dt[i]) + 1);
        if (!raw)
            return false;
        t[i]->data = raw + 1;
        if (i < 3)
            for (size_t j = 0; j < n; j++)
                store(t[i]->data, dt[i], j, rng_uniform(&s));
        else
            memset(t[i]->data, 0xff, n * wf_dtype_size(dt[i])); /* NaN */
    }
    if (c->want_lse) {
        size_t nl = (size_t)(c->B * c->Sq * c->Hq);
        a->lse = malloc(nl * sizeof *a->lse);
        if (!a->lse)
            return false;
        for (size_t j = 0; j < nl; j++)
            a->lse[j] = NAN;
    }
    return true;
}

static void abuf_free(abuf_t *a)
{
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    for (int i = 0; i < 4; i++)
        if (t[i]->data)
            free((char *)t[i]->data - 1);
    free(a->lse);
}

/* Worst errors of out (absolute) and lse against the fp64 reference
 * over the stored inputs (attention_errors: each tensor in its own
 * dtype); true when within the tolerances. */
static bool abuf_errors(const abuf_t *a, double *ret_err, double *ret_lse)
{
    const acase_t *c = &a->c;
    attention_errors(&a->q, &a->k, &a->v, &a->out, a->lse, c->causal,
                     c->scale, ret_err, ret_lse);
    return *ret_err <= out_tolerance(c->ot) && *ret_lse <= 1e-4;
}

/* Compare out / lse with the fp64 reference (main thread). */
static void abuf_check(const abuf_t *a)
{
    const acase_t *c = &a->c;
    double max_err, max_lse;
    abuf_errors(a, &max_err, &max_lse);
    double tol = out_tolerance(c->ot);
    CHECK(max_err <= tol, "%s: max abs error %.3e > %.1e", c->name, max_err, tol);
    CHECK(max_lse <= 1e-4, "%s: max lse error %.3e > 1e-4", c->name, max_lse);
    printf("  %-28s out err %.2e (tol %.0e)%s", c->name, max_err, tol,
           a->lse ? "" : "\n");
    if (a->lse)
        printf("  lse err %.2e (tol 1e-04)\n", max_lse);
}

static wf_attention_opts_t acase_opts(const acase_t *c)
{
    return (wf_attention_opts_t){ .scale = c->scale, .causal = c->causal,
                                  .devices = c->devices };
}

/* ---- the daemon --------------------------------------------------------- */

/* The daemon runs with the test hook WEFT_TEST_HOLD_JOBS on the FIFO
 * hold_fifo: each worker waits for a byte from it before a job part,
 * until it reads an 'a', which opens the gate for good. test_poll holds
 * the first job so, then opens the gate for every later job. */
static pid_t start_daemon(const char *weftd, const char *endpoint,
                          const char *hold_fifo)
{
    char tensor_bytes[32], queue[32];
    snprintf(tensor_bytes, sizeof tensor_bytes, "%u", MAX_TENSOR_BYTES);
    snprintf(queue, sizeof queue, "%d", QUEUE_CAPACITY);
    const char *argv[] = { weftd, "--devices", "cpu:2", "--listen", endpoint,
                           "--max-tensor-bytes", tensor_bytes, "--queue-capacity",
                           queue, "--client-queue-jobs", queue, "--log-level",
                           "warning", NULL };
    if (setenv("WEFT_TEST_HOLD_JOBS", hold_fifo, 1) != 0)
        return -1;
    pid_t pid = spawn_daemon(argv, NULL);
    unsetenv("WEFT_TEST_HOLD_JOBS");
    return pid;
}

typedef struct busy_arg {
    wf_client_t *c;   /* the client */
    uint32_t n;       /* devices that must be busy */
} busy_arg_t;

/* At least n of the daemon's devices are busy (a held job part counts),
 * by its status. */
static bool devices_busy(void *p)
{
    busy_arg_t *b = p;
    wf_status_info_t *s = calloc(1, sizeof *s);
    uint32_t n = 0;
    if (s && wf_status(b->c, s) == WF_OK)
        for (uint32_t i = 0; i < s->device_count && i < WF_STATUS_MAX_DEVICES; i++)
            n += s->devices[i].busy != 0;
    free(s);
    return n >= b->n;
}

/* ---- the tests ----------------------------------------------------------- */

static void test_hello_status(wf_client_t *c)
{
    printf("hello / status\n");
    wf_hello_info_t h;
    memset(&h, 0, sizeof h);
    wf_status_t st = wf_hello(c, &h);
    CHECK(st == WF_OK, "hello: %s %s", wf_status_name(st), wf_client_last_error(c));
    CHECK(h.protocol == WF_PROTOCOL_VERSION, "protocol %u", h.protocol);
    CHECK(h.devices == 2, "devices %u", h.devices);
    CHECK(strcmp(h.backend, "cpu") == 0, "backend '%s'", h.backend);
    CHECK(h.max_tensor_bytes == MAX_TENSOR_BYTES, "max_tensor_bytes %" PRIu64,
          h.max_tensor_bytes);
    CHECK(h.weft_version[0] != '\0', "empty version");
    /* one build: libweft's own version is the daemon's */
    CHECK(strcmp(wf_version(), h.weft_version) == 0, "libweft %s, daemon %s", wf_version(),
          h.weft_version);

    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s)
        return;
    st = wf_status(c, s);
    CHECK(st == WF_OK, "status: %s %s", wf_status_name(st), wf_client_last_error(c));
    CHECK(s->device_count == 2, "device_count %u", s->device_count);
    CHECK(s->queue_capacity == QUEUE_CAPACITY, "queue_capacity %u", s->queue_capacity);
    CHECK(strcmp(s->backend, "cpu") == 0, "backend '%s'", s->backend);
    for (uint32_t i = 0; i < s->device_count && i < 2; i++) {
        char want[16];
        snprintf(want, sizeof want, "cpu:%u", i);
        CHECK(strcmp(s->devices[i].name, want) == 0, "device %u named '%s'", i,
              s->devices[i].name);
        CHECK(s->devices[i].memory_total > 0, "device %u has no memory", i);
        CHECK(s->devices[i].index == i, "device index %u", s->devices[i].index);
        /* default mesh of a 2-device daemon: tp = 2 */
        CHECK(s->devices[i].rank == i && s->devices[i].coords[0] == 0 &&
              s->devices[i].coords[1] == 0 && s->devices[i].coords[2] == 0 &&
              s->devices[i].coords[3] == i, "device %u: rank %u coords [%u,%u,%u,%u]",
              i, s->devices[i].rank, s->devices[i].coords[0], s->devices[i].coords[1],
              s->devices[i].coords[2], s->devices[i].coords[3]);
    }
    CHECK(s->mesh.dp == 1 && s->mesh.ring == 1 && s->mesh.ulysses == 1 && s->mesh.tp == 2,
          "mesh dp=%u ring=%u ulysses=%u tp=%u", s->mesh.dp, s->mesh.ring,
          s->mesh.ulysses, s->mesh.tp);
    CHECK(s->reconfiguring == 0, "reconfiguring %u", s->reconfiguring);
    free(s);
}

static const acase_t sync_cases[] = {
    { "f32 basic, lse, dev 2", 2, 33, 33, 4, 4, 16, WF_DTYPE_F32, WF_DTYPE_F32,
      WF_DTYPE_F32, WF_DTYPE_F32, 0, 2, true, 0, 1 },
    { "f32 causal, no lse, dev 1", 1, 40, 40, 2, 2, 32, WF_DTYPE_F32,
      WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 1, 1, false, 0, 2 },
    { "f16 -> f32, causal, lse", 2, 24, 24, 4, 4, 64, WF_DTYPE_F16,
      WF_DTYPE_F16, WF_DTYPE_F16, WF_DTYPE_F32, 1, 2, true, 0, 3 },
    { "f16 -> f16", 1, 31, 31, 3, 3, 8, WF_DTYPE_F16, WF_DTYPE_F16,
      WF_DTYPE_F16, WF_DTYPE_F16, 0, 0, true, 0, 4 },
    { "bf16 -> bf16, GQA 8/2", 2, 16, 16, 8, 2, 32, WF_DTYPE_BF16,
      WF_DTYPE_BF16, WF_DTYPE_BF16, WF_DTYPE_BF16, 0, 2, true, 0, 5 },
    { "bf16 -> f16, Sq 17 < Skv 45", 1, 17, 45, 6, 3, 16, WF_DTYPE_BF16,
      WF_DTYPE_BF16, WF_DTYPE_BF16, WF_DTYPE_F16, 0, 1, true, 0, 6 },
    { "mixed -> bf16, causal Sq>Skv", 2, 40, 24, 4, 1, 16, WF_DTYPE_F32,
      WF_DTYPE_F16, WF_DTYPE_BF16, WF_DTYPE_BF16, 1, 2, true, 0, 7 },
    { "f32 -> f16, scale 0.3, GQA", 1, 9, 70, 4, 2, 24, WF_DTYPE_F32,
      WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F16, 0, 2, false, 0.3f, 8 },
    { "f32 causal Sq<Skv, dev 2", 3, 12, 50, 2, 1, 16, WF_DTYPE_F32,
      WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 1, 2, true, 0, 9 },
};

static void test_sync(wf_client_t *c)
{
    printf("synchronous attention\n");
    for (size_t i = 0; i < sizeof sync_cases / sizeof sync_cases[0]; i++) {
        abuf_t a;
        const acase_t *cs = &sync_cases[i];
        if (!abuf_init(&a, cs)) {
            CHECK(0, "out of memory");
            abuf_free(&a);
            return;
        }
        wf_attention_opts_t o = acase_opts(cs);
        wf_job_result_t r;
        memset(&r, 0, sizeof r);
        wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &r);
        CHECK(st == WF_OK, "%s: %s %s", cs->name, wf_status_name(st),
              wf_client_last_error(c));
        if (st == WF_OK) {
            abuf_check(&a);
            CHECK(r.status == WF_OK, "%s: result status %d", cs->name, r.status);
            CHECK(r.devices >= 1 && r.devices <= 2, "%s: devices %u", cs->name,
                  r.devices);
            if (cs->devices == 1)
                CHECK(r.devices == 1, "%s: asked 1 device, used %u", cs->name,
                      r.devices);
        }
        abuf_free(&a);
    }
}

static void test_in_flight(wf_client_t *c)
{
    enum { N = 16 };
    printf("%d jobs in flight, waited in reverse order\n", N);
    abuf_t a[N];
    wf_job_t *job[N];
    for (int i = 0; i < N; i++) {
        acase_t cs = { "in flight", 1 + i % 2, 8 + i, 5 + 2 * i, 4, i % 2 ? 2 : 4,
                       16, (wf_dtype_t)(i % 3), (wf_dtype_t)(i % 3),
                       (wf_dtype_t)(i % 3), (wf_dtype_t)((i + 1) % 3), i % 2,
                       (uint32_t)(i % 3), i % 4 != 0, 0, 100 + (uint64_t)i };
        job[i] = NULL;
        if (!abuf_init(&a[i], &cs)) {
            CHECK(0, "out of memory");
            continue;
        }
        wf_attention_opts_t o = acase_opts(&cs);
        wf_status_t st = wf_attention_submit(c, &a[i].q, &a[i].k, &a[i].v, &o,
                                             &a[i].out, a[i].lse, &job[i]);
        CHECK(st == WF_OK, "submit %d: %s %s", i, wf_status_name(st),
              wf_client_last_error(c));
    }
    for (int i = N - 1; i >= 0; i--) {
        if (!job[i])
            continue;
        wf_status_t st = wf_job_wait(c, job[i], REPLY_MS);
        CHECK(st == WF_OK, "job %d: %s %s", i, wf_status_name(st), wf_job_error(job[i]));
        wf_job_result_t r;
        CHECK(wf_job_result(job[i], &r) == WF_OK && r.status == WF_OK,
              "job %d result", i);
        if (st == WF_OK)
            abuf_check(&a[i]);
        wf_job_destroy(c, &job[i]);
        CHECK(job[i] == NULL, "destroy did not clear the pointer");
    }
    for (int i = 0; i < N; i++)
        abuf_free(&a[i]);
}

/* A job whose reply takes a while (~1 GFLOP on two CPU devices); test_poll
 * holds it in the daemon regardless. */
static const acase_t slow_case = { "slow", 1, 512, 512, 8, 8, 64, WF_DTYPE_F32,
                                   WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 0,
                                   0, true, 0, 77 };

/* The first job of the run: held by the daemon (WEFT_TEST_HOLD_JOBS) on
 * both devices, so poll and result must say pending whatever the
 * machine's speed; then the gate opens (for this job and every later one)
 * and the reply comes. */
static void test_poll(wf_client_t *c, const char *hold_fifo)
{
    printf("poll\n");
    abuf_t a;
    wf_job_t *job = NULL;
    /* the daemon holds the FIFO open for reading: this open does not wait */
    int hold = open(hold_fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    CHECK(hold >= 0, "open %s: %s", hold_fifo, strerror(errno));
    if (!abuf_init(&a, &slow_case)) {
        CHECK(0, "out of memory");
        abuf_free(&a);
        if (hold >= 0)
            close(hold);
        return;
    }
    wf_attention_opts_t o = acase_opts(&slow_case);
    wf_status_t st = wf_attention_submit(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &job);
    CHECK(st == WF_OK, "submit: %s %s", wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        /* both parts (tp = 2) reach the workers and are held there */
        busy_arg_t b = { c, 2 };
        CHECK(wait_for(devices_busy, &b, WAIT_EVENT_MS), "the job never held 2 devices");
        st = wf_job_poll(c, job);
        CHECK(st == WF_E_PENDING, "poll while held: %s", wf_status_name(st));
        wf_job_result_t r;
        CHECK(wf_job_result(job, &r) == WF_E_PENDING, "result before the reply");
        /* one 'a' for each worker waiting: the gate is open from now on */
        CHECK(hold >= 0 && write(hold, "aa", 2) == 2, "release the held job");
        st = wf_job_wait(c, job, REPLY_MS);
        CHECK(st == WF_OK, "wait: %s %s", wf_status_name(st), wf_job_error(job));
        st = wf_job_poll(c, job);
        CHECK(st == WF_OK, "poll after the reply: %s", wf_status_name(st));
        CHECK(wf_job_result(job, &r) == WF_OK, "result after the reply");
        CHECK(wf_job_error(job)[0] == '\0', "error '%s'", wf_job_error(job));
        if (st == WF_OK)
            abuf_check(&a);
    }
    wf_job_destroy(c, &job);
    abuf_free(&a);
    if (hold >= 0)
        close(hold);
}

static void test_destroy_early(wf_client_t *c)
{
    printf("destroy a job before its reply\n");
    abuf_t slow, a, b;
    acase_t ca = { "after a destroyed job (1)", 1, 20, 20, 2, 2, 16, WF_DTYPE_F32,
                   WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 1, 0, true, 0, 11 };
    acase_t cb = { "after a destroyed job (2)", 2, 7, 30, 4, 2, 8, WF_DTYPE_F16,
                   WF_DTYPE_F16, WF_DTYPE_F16, WF_DTYPE_F32, 0, 0, true, 0, 12 };
    if (!abuf_init(&slow, &slow_case) || !abuf_init(&a, &ca) || !abuf_init(&b, &cb)) {
        CHECK(0, "out of memory");
        return;
    }
    wf_job_t *js = NULL, *ja = NULL, *jb = NULL;
    wf_attention_opts_t os = acase_opts(&slow_case), oa = acase_opts(&ca), ob = acase_opts(&cb);
    CHECK(wf_attention_submit(c, &slow.q, &slow.k, &slow.v, &os, &slow.out,
                              slow.lse, &js) == WF_OK, "submit slow");
    CHECK(wf_attention_submit(c, &a.q, &a.k, &a.v, &oa, &a.out, a.lse, &ja) == WF_OK,
          "submit a");
    /* Destroying returns once ZeroMQ let go of the inputs; the daemon still
     * runs the job and its reply must be dropped, not given to another. */
    wf_job_destroy(c, &js);
    CHECK(js == NULL, "destroy did not clear the pointer");
    CHECK(wf_attention_submit(c, &b.q, &b.k, &b.v, &ob, &b.out, b.lse, &jb) == WF_OK,
          "submit b");
    wf_status_t st = jb ? wf_job_wait(c, jb, REPLY_MS) : WF_E_BAD_ARGUMENT;
    CHECK(st == WF_OK, "b: %s %s", wf_status_name(st), jb ? wf_job_error(jb) : "");
    if (st == WF_OK)
        abuf_check(&b);
    st = ja ? wf_job_wait(c, ja, REPLY_MS) : WF_E_BAD_ARGUMENT;
    CHECK(st == WF_OK, "a: %s %s", wf_status_name(st), ja ? wf_job_error(ja) : "");
    if (st == WF_OK)
        abuf_check(&a);
    /* The slow job's reply comes (or came) meanwhile; the connection still
     * works and hello gets its own reply. */
    wf_hello_info_t h;
    CHECK(wf_hello(c, &h) == WF_OK, "hello after: %s", wf_client_last_error(c));
    wf_job_destroy(c, &ja);
    wf_job_destroy(c, &jb);
    wf_job_destroy(c, NULL);
    abuf_free(&slow);
    abuf_free(&a);
    abuf_free(&b);
}

/* Requests the daemon received, from its counters. */
static uint64_t daemon_requests(wf_client_t *c)
{
    wf_status_info_t *s = calloc(1, sizeof *s);
    uint64_t n = UINT64_MAX;
    if (s && wf_status(c, s) == WF_OK)
        n = s->jobs_served + s->jobs_failed + s->requests_rejected;
    free(s);
    return n;
}

static void test_invalid(wf_client_t *c)
{
    printf("client-side validation\n");
    acase_t cs = { "valid", 1, 4, 4, 4, 2, 8, WF_DTYPE_F32, WF_DTYPE_F32,
                   WF_DTYPE_F32, WF_DTYPE_F32, 0, 0, true, 0, 21 };
    abuf_t a;
    if (!abuf_init(&a, &cs)) {
        CHECK(0, "out of memory");
        abuf_free(&a);
        return;
    }
    uint64_t before = daemon_requests(c);
    wf_attention_opts_t o = { 0 };
    wf_job_t *job = NULL;
    int n_cases = 0;

#define EXPECT_INVALID(label, q, k, v, opts, out, lse)                          \
    do {                                                                       \
        wf_status_t st_ = wf_attention(c, q, k, v, opts, out, lse, NULL);      \
        CHECK(st_ == WF_E_BAD_ARGUMENT, "%s: %s", label, wf_status_name(st_));      \
        CHECK(wf_client_last_error(c)[0] != '\0', "%s: no message", label);    \
        n_cases++;                                                             \
    } while (0)

    wf_tensor_t t;
    EXPECT_INVALID("NULL q", NULL, &a.k, &a.v, &o, &a.out, a.lse);
    EXPECT_INVALID("NULL out", &a.q, &a.k, &a.v, &o, NULL, a.lse);
    t = a.q; t.data = NULL;
    EXPECT_INVALID("NULL data", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.rank = 3;
    EXPECT_INVALID("rank 3", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.rank = 9;
    EXPECT_INVALID("rank 9", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.dtype = (wf_dtype_t)7;
    EXPECT_INVALID("dtype 7", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.shape[1] = 0;
    EXPECT_INVALID("dim 0", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.shape[0] = -1;
    EXPECT_INVALID("dim -1", &t, &a.k, &a.v, &o, &a.out, a.lse);
    t = a.q; t.shape[2] = 3;  /* Hkv = 2 does not divide 3 */
    wf_tensor_t t2 = a.out; t2.shape[2] = 3;
    EXPECT_INVALID("Hkv does not divide Hq", &t, &a.k, &a.v, &o, &t2, a.lse);
    t = a.k; t.shape[3] = 4;
    EXPECT_INVALID("D of k differs", &a.q, &t, &a.v, &o, &a.out, a.lse);
    t = a.v; t.shape[1] = 5;
    EXPECT_INVALID("Skv of v differs", &a.q, &a.k, &t, &o, &a.out, a.lse);
    t = a.k; t.shape[0] = 2;
    EXPECT_INVALID("B of k differs", &a.q, &t, &a.v, &o, &a.out, a.lse);
    t = a.out; t.shape[1] = 5;
    EXPECT_INVALID("out shape", &a.q, &a.k, &a.v, &o, &t, a.lse);
    t = a.out; t.rank = 3;
    EXPECT_INVALID("out rank", &a.q, &a.k, &a.v, &o, &t, a.lse);
    t = a.out; t.dtype = (wf_dtype_t)-1;
    EXPECT_INVALID("out dtype", &a.q, &a.k, &a.v, &o, &t, a.lse);
    wf_attention_opts_t bad = { .scale = NAN };
    EXPECT_INVALID("NaN scale", &a.q, &a.k, &a.v, &bad, &a.out, a.lse);
    bad.scale = -1.0f;
    EXPECT_INVALID("negative scale", &a.q, &a.k, &a.v, &bad, &a.out, a.lse);
    bad = (wf_attention_opts_t){ .rotate_method = (wf_rotate_t)3 };
    EXPECT_INVALID("rotate_method 3", &a.q, &a.k, &a.v, &bad, &a.out, a.lse);
    bad = (wf_attention_opts_t){ .ring_anything = (wf_opt_t)-1 };
    EXPECT_INVALID("ring_anything -1", &a.q, &a.k, &a.v, &bad, &a.out, a.lse);
    bad = (wf_attention_opts_t){ .load_balance = (wf_opt_t)9 };
    EXPECT_INVALID("load_balance 9", &a.q, &a.k, &a.v, &bad, &a.out, a.lse);
    t = a.q; t.shape[0] = INT64_MAX / 2;
    t2 = a.k; t2.shape[0] = INT64_MAX / 2;
    wf_tensor_t t3 = a.v; t3.shape[0] = INT64_MAX / 2;
    wf_tensor_t t4 = a.out; t4.shape[0] = INT64_MAX / 2;
    EXPECT_INVALID("element count overflows", &t, &t2, &t3, &o, &t4, a.lse);
#undef EXPECT_INVALID

    wf_mesh_degrees_t m0 = { 1, 0, 1, 2 }, mbig = { 1, 1, 4097, 1 }, m1 = { 1, 1, 1, 2 };
    uint64_t ep = 99;
    CHECK(wf_reconfigure(c, NULL, &ep) == WF_E_BAD_ARGUMENT && ep == 99, "reconfigure NULL mesh");
    CHECK(wf_reconfigure(c, &m0, &ep) == WF_E_BAD_ARGUMENT && ep == 99, "reconfigure ring 0");
    CHECK(strstr(wf_client_last_error(c), "ring") != NULL, "message '%s'",
          wf_client_last_error(c));
    CHECK(wf_reconfigure(c, &mbig, &ep) == WF_E_BAD_ARGUMENT, "reconfigure ulysses 4097");
    CHECK(wf_reconfigure(NULL, &m1, &ep) == WF_E_BAD_ARGUMENT, "reconfigure NULL client");
    n_cases += 4;

    wf_status_t st = wf_attention_submit(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, NULL);
    CHECK(st == WF_E_BAD_ARGUMENT, "NULL ret_job: %s", wf_status_name(st));
    st = wf_attention_submit(NULL, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &job);
    CHECK(st == WF_E_BAD_ARGUMENT && job == NULL, "NULL client: %s", wf_status_name(st));
    CHECK(wf_hello(NULL, NULL) == WF_E_BAD_ARGUMENT, "hello NULL client");
    CHECK(wf_job_poll(c, NULL) == WF_E_BAD_ARGUMENT, "poll NULL job");
    CHECK(wf_job_wait(c, NULL, 0) == WF_E_BAD_ARGUMENT, "wait NULL job");
    CHECK(wf_job_result(NULL, NULL) == WF_E_BAD_ARGUMENT, "result NULL job");
    CHECK(strcmp(wf_job_error(NULL), "") == 0, "error of NULL job");
    CHECK(strcmp(wf_client_last_error(NULL), "") == 0, "last error of NULL");

    uint64_t after = daemon_requests(c);
    CHECK(before != UINT64_MAX && after == before,
          "the daemon saw %" PRIu64 " requests from invalid calls",
          after - before);
    printf("  %d invalid calls refused, daemon counters unchanged (%" PRIu64 ")\n",
           n_cases, after);

    /* The same buffers, valid, still work. */
    st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, NULL);
    CHECK(st == WF_OK, "valid after invalid: %s %s", wf_status_name(st),
          wf_client_last_error(c));
    CHECK(wf_client_last_error(c)[0] == '\0', "stale error '%s'",
          wf_client_last_error(c));
    if (st == WF_OK)
        abuf_check(&a);
    abuf_free(&a);
}

static void test_daemon_error(wf_client_t *c)
{
    printf("daemon errors propagate\n");
    /* q is 6 MiB, 1.5x the daemon's --max-tensor-bytes: only the daemon
     * knows its limit, the client sends and gets WF_E_LIMIT back. (The
     * daemon drops connections whose frames exceed 2x the limit.) */
    acase_t cs = { "too big", 1, 1536, 4, 16, 16, 64, WF_DTYPE_F32, WF_DTYPE_F32,
                   WF_DTYPE_F32, WF_DTYPE_F32, 0, 0, false, 0, 31 };
    abuf_t a;
    if (!abuf_init(&a, &cs)) {
        CHECK(0, "out of memory");
        abuf_free(&a);
        return;
    }
    wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, NULL, &a.out, NULL, NULL);
    CHECK(st == WF_E_LIMIT, "sync: %s: %s", wf_status_name(st),
          wf_client_last_error(c));
    CHECK(wf_client_last_error(c)[0] != '\0', "no message from the daemon");
    printf("  sync:  %s: %s\n", wf_status_name(st), wf_client_last_error(c));

    wf_job_t *job = NULL;
    st = wf_attention_submit(c, &a.q, &a.k, &a.v, NULL, &a.out, NULL, &job);
    CHECK(st == WF_OK, "submit: %s", wf_status_name(st));
    if (job) {
        st = wf_job_wait(c, job, REPLY_MS);
        CHECK(st == WF_E_LIMIT, "async: %s", wf_status_name(st));
        CHECK(wf_job_error(job)[0] != '\0', "no job message");
        wf_job_result_t r;
        CHECK(wf_job_result(job, &r) == WF_E_LIMIT && r.status == WF_E_LIMIT,
              "result status %d", r.status);
        printf("  async: %s: %s\n", wf_status_name(st), wf_job_error(job));
        wf_job_destroy(c, &job);
    }
    /* The connection survives an error reply. */
    CHECK(wf_hello(c, NULL) == WF_OK, "hello after an error");
    abuf_free(&a);
}

/* A daemon that stops reading (SIGSTOP): the call must time out and give
 * the caller's buffers back (the library resets its connection to drop the
 * frames ZeroMQ still queues), and the client must work again afterwards. */
static void test_stalled_daemon(const char *endpoint, pid_t pid)
{
    enum { TIMEOUT = 500 }; /* the client's timeout here, ms */
    printf("a daemon that stops reading\n");
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, TIMEOUT, &c) != WF_OK ||
        wf_hello(c, NULL) != WF_OK) {
        CHECK(0, "connect: %s", c ? wf_client_last_error(c) : "");
        wf_client_destroy(&c);
        return;
    }
    /* 3 MiB frames: far more than the socket buffers hold. */
    acase_t cs = { "stalled", 1, 768, 768, 16, 16, 64, WF_DTYPE_F32,
                   WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 0, 0, false, 0, 51 };
    abuf_t a;
    if (!abuf_init(&a, &cs)) {
        CHECK(0, "out of memory");
        abuf_free(&a);
        wf_client_destroy(&c);
        return;
    }
    kill(pid, SIGSTOP);
    /* This connection is up: the frames go into a pipe nobody drains. */
    wf_job_t *job = NULL;
    wf_status_t st = wf_attention_submit(c, &a.q, &a.k, &a.v, NULL, &a.out,
                                         NULL, &job);
    CHECK(st == WF_OK, "submit: %s %s", wf_status_name(st), wf_client_last_error(c));
    if (job) {
        CHECK(wf_job_wait(c, job, 100) == WF_E_TIMEOUT, "wait on a stalled daemon");
        CHECK(wf_job_poll(c, job) == WF_E_PENDING, "poll on a stalled daemon");
        /* returns once the inputs are released: it waits up to the
         * client's timeout for ZeroMQ to let go of them, then resets the
         * connection, which releases them at once */
        uint64_t t0 = wait_now_ms();
        wf_job_destroy(c, &job);
        uint64_t dt = wait_now_ms() - t0;
        CHECK(dt <= TIMEOUT + wait_bound_ms(TIMEOUT_SLACK_MS),
              "destroy took %" PRIu64 " ms with a %d ms timeout", dt, TIMEOUT);
        printf("  destroy: returned after %" PRIu64 " ms (timeout %d ms)\n", dt,
               TIMEOUT);
    }
    /* The library reconnected; a stopped daemon cannot finish the
     * handshake, so nothing is even sent: the call waits out its
     * timeout for a connection. */
    uint64_t t0 = wait_now_ms();
    st = wf_attention(c, &a.q, &a.k, &a.v, NULL, &a.out, NULL, NULL);
    uint64_t dt = wait_now_ms() - t0;
    CHECK(st == WF_E_TIMEOUT, "sync: %s", wf_status_name(st));
    CHECK(timed_out_in_bounds(dt, TIMEOUT), "sync took %" PRIu64 " ms with a %d ms "
          "timeout", dt, TIMEOUT);
    printf("  sync:    %s after %" PRIu64 " ms\n", wf_status_name(st), dt);
    kill(pid, SIGCONT);
    /* Scribbling on the inputs is allowed now; the next job must still be
     * right, over the fresh connection. */
    memset(a.q.data, 0, 4);
    abuf_free(&a);
    cs = (acase_t){ "after the stall", 1, 16, 16, 2, 2, 8, WF_DTYPE_F32,
                    WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32, 1, 0, true, 0, 52 };
    if (abuf_init(&a, &cs)) {
        wf_attention_opts_t o = acase_opts(&cs);
        st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, NULL);
        CHECK(st == WF_OK, "after SIGCONT: %s %s", wf_status_name(st),
              wf_client_last_error(c));
        if (st == WF_OK)
            abuf_check(&a);
    }
    abuf_free(&a);
    wf_client_destroy(&c);
}

static void test_timeout(const char *dead_endpoint)
{
    enum { TIMEOUT = 300 }; /* the client's timeout here, ms */
    printf("timeout without a daemon\n");
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(dead_endpoint, TIMEOUT, &c);
    CHECK(st == WF_OK, "connect: %s", wf_status_name(st));
    if (!c)
        return;
    uint64_t t0 = wait_now_ms();
    st = wf_hello(c, NULL);
    uint64_t dt = wait_now_ms() - t0;
    CHECK(st == WF_E_TIMEOUT, "hello: %s", wf_status_name(st));
    CHECK(timed_out_in_bounds(dt, TIMEOUT), "hello took %" PRIu64 " ms with a %d ms "
          "timeout", dt, TIMEOUT);
    printf("  hello: %s after %" PRIu64 " ms (timeout %d ms)\n", wf_status_name(st),
           dt, TIMEOUT);

    acase_t cs = { "no daemon", 1, 4, 4, 2, 2, 8, WF_DTYPE_F32, WF_DTYPE_F32,
                   WF_DTYPE_F32, WF_DTYPE_F32, 0, 0, false, 0, 41 };
    abuf_t a;
    if (abuf_init(&a, &cs)) {
        t0 = wait_now_ms();
        st = wf_attention(c, &a.q, &a.k, &a.v, NULL, &a.out, NULL, NULL);
        dt = wait_now_ms() - t0;
        CHECK(st == WF_E_TIMEOUT, "attention: %s", wf_status_name(st));
        CHECK(timed_out_in_bounds(dt, TIMEOUT), "attention took %" PRIu64 " ms with a "
              "%d ms timeout", dt, TIMEOUT);
        wf_job_t *job = NULL;
        st = wf_attention_submit(c, &a.q, &a.k, &a.v, NULL, &a.out, NULL, &job);
        CHECK(st == WF_E_TIMEOUT && job == NULL, "submit: %s", wf_status_name(st));
    }
    abuf_free(&a);
    wf_client_destroy(&c);
    CHECK(c == NULL, "destroy did not clear the pointer");
    wf_client_destroy(&c);
    wf_client_destroy(NULL);

    CHECK(wf_client_connect("nonsense://x", 100, &c) == WF_E_CONNECT,
          "bad endpoint");
}

enum { THREAD_JOBS = 6 };

typedef struct thread_arg {
    const char *endpoint;     /* the daemon */
    int index;                /* 0 or 1 */
    int errors;               /* calls that failed */
    bool done[THREAD_JOBS];   /* job i answered WF_OK */
    double tol[THREAD_JOBS];  /* its out tolerance (its out dtype's) */
    double err[THREAD_JOBS], lse[THREAD_JOBS]; /* its errors (abuf_errors) */
} thread_arg_t;

static void *client_thread(void *p)
{
    thread_arg_t *t = p;
    wf_client_t *c = NULL;
    if (wf_client_connect(t->endpoint, REPLY_MS, &c) != WF_OK) {
        t->errors++;
        return NULL;
    }
    for (int i = 0; i < THREAD_JOBS; i++) {
        acase_t cs = { t->index ? "thread 1" : "thread 0", 1, 24 + i, 24, 4, 2,
                       32, WF_DTYPE_F32, WF_DTYPE_F32, WF_DTYPE_F32,
                       (wf_dtype_t)(i % 3), i % 2, 0, true, 0,
                       1000 * (uint64_t)(t->index + 1) + (uint64_t)i };
        abuf_t a;
        if (!abuf_init(&a, &cs)) {
            t->errors++;
            abuf_free(&a);
            break;
        }
        wf_attention_opts_t o = acase_opts(&cs);
        if (wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, NULL) != WF_OK) {
            t->errors++;
        } else {
            t->done[i] = true;
            t->tol[i] = out_tolerance(cs.ot);
            abuf_errors(&a, &t->err[i], &t->lse[i]);
        }
        abuf_free(&a);
    }
    wf_client_destroy(&c);
    return NULL;
}

static void test_threads(const char *endpoint)
{
    printf("two clients in two threads\n");
    pthread_t th[2];
    thread_arg_t arg[2] = { { .endpoint = endpoint, .index = 0 },
                            { .endpoint = endpoint, .index = 1 } };
    bool started[2];
    for (int i = 0; i < 2; i++) {
        started[i] = pthread_create(&th[i], NULL, client_thread, &arg[i]) == 0;
        CHECK(started[i], "thread %d not started", i);
    }
    for (int i = 0; i < 2; i++) {
        if (!started[i])
            continue;
        pthread_join(th[i], NULL);
        CHECK(arg[i].errors == 0, "thread %d: %d errors", i, arg[i].errors);
        const thread_arg_t *t = &arg[i];
        for (int j = 0; j < THREAD_JOBS; j++) {
            if (!t->done[j])
                continue;
            CHECK(t->err[j] <= t->tol[j], "thread %d job %d: max abs error %.3e > %.1e",
                  i, j, t->err[j], t->tol[j]);
            CHECK(t->lse[j] <= 1e-4, "thread %d job %d: max lse error %.3e > 1e-4", i,
                  j, t->lse[j]);
            printf("  thread %d job %d: out err %.2e (tol %.0e)  lse err %.2e (tol "
                   "1e-04)\n", i, j, t->err[j], t->tol[j], t->lse[j]);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    char endpoint[96], dead[96], hold_fifo[96];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-test-%d-c.sock", (int)getpid());
    snprintf(dead, sizeof dead, "ipc:///tmp/weft-test-%d-none.sock", (int)getpid());
    snprintf(hold_fifo, sizeof hold_fifo, "/tmp/weft-test-%d-hold.fifo", (int)getpid());
    unlink(hold_fifo);
    if (mkfifo(hold_fifo, 0600) != 0) {
        perror(hold_fifo);
        return 1;
    }

    pid_t pid = start_daemon(argv[1], endpoint, hold_fifo);
    if (pid < 0) {
        perror("fork");
        unlink(hold_fifo);
        return 1;
    }
    if (!wait_ready(endpoint)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fprintf(stderr, "FAIL: weftd did not answer hello\n");
        unlink(hold_fifo);
        return 1;
    }

    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(endpoint, REPLY_MS, &c);
    CHECK(st == WF_OK, "connect: %s", wf_status_name(st));
    if (c) {
        test_hello_status(c);
        test_poll(c, hold_fifo); /* the first job: see start_daemon */
        test_sync(c);
        test_in_flight(c);
        test_destroy_early(c);
        test_invalid(c);
        test_daemon_error(c);
        wf_client_destroy(&c);
    }
    test_stalled_daemon(endpoint, pid);
    test_threads(endpoint);
    test_timeout(dead);

    printf("SIGTERM\n");
    kill(pid, SIGTERM);
    int ws = 0;
    pid_t w;
    while ((w = waitpid(pid, &ws, 0)) < 0 && errno == EINTR)
        ;
    CHECK(w == pid && WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
          "weftd did not exit 0 on SIGTERM (status 0x%x)", ws);
    unlink(hold_fifo);

    printf("test_client: %d passed, %d failed\n", (int)passed, (int)failed);
    return failed ? 1 : 0;
}
