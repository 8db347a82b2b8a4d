/* test_daemon.c — end-to-end: real weftd processes driven over real
 * ZeroMQ sockets with the real codec (proto), watched through a real
 * sd_notify datagram socket and a pidfd.
 *
 * Checks: READY=1; hello and status; attention (f32, bf16, GQA, causal,
 * lse, custom scale, split over 1 and 2 devices, REQ-style delimiter)
 * against an fp64 reference; bad requests refused without harm; status
 * counters; WF_E_QUEUE_FULL with every admitted job still answered;
 * WF_E_NO_MEMORY under --cpu-memory; SIGHUP reload (applied, ignored when
 * not reloadable, nothing changed by an invalid file) with RELOADING=1 /
 * READY=1; WATCHDOG=1 pings when systemd asks for them; SIGTERM with
 * jobs in flight: every admitted job answered, STOPPING=1, exit 0, socket
 * file removed; start-up errors exit 2, --check-config exits 0.
 *
 * Usage: test_daemon PATH_TO_WEFTD. Every wait is an event wait with a
 * deadline (zmq_poll, poll on the notify socket and on a pidfd).
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "proto.h"

#define TIMEOUT_MS 60000   /* generous: the suite may run under sanitizers */

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__,         \
                    __LINE__, #cond);                                      \
            failures++;                                                    \
        }                                                                  \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(int64_t deadline)
{
    int64_t l = deadline - now_ms();
    return l < 0 ? 0 : (int)l;
}

/* ------------------------------------------------------------------ */
/* a daemon process */

typedef struct daemon {
    pid_t pid;
    int pidfd;                 /* readable when the process exits */
    int nfd;                   /* our end of NOTIFY_SOCKET */
    char notify_path[108];
    char endpoint[128];
    char sock_path[108];       /* file of the ipc endpoint */
    void *zctx, *sock;         /* a DEALER connected to it */
    int exit_status;           /* from waitpid once it exited */
    bool reaped;
} daemon_t;

static int counter;

/* Start weftd with --listen on a fresh ipc path, NOTIFY_SOCKET on a fresh
 * datagram socket, `args` appended and `env` ("K=V", NULL-terminated, may
 * be NULL) added to the environment. */
static bool daemon_start_env(daemon_t *d, const char *weftd,
                             const char *const *args, const char *const *env)
{
    memset(d, 0, sizeof *d);
    int n = counter++;
    snprintf(d->sock_path, sizeof d->sock_path, "/tmp/weft-test-%d-%d.sock",
             (int)getpid(), n);
    snprintf(d->endpoint, sizeof d->endpoint, "ipc://%s", d->sock_path);
    snprintf(d->notify_path, sizeof d->notify_path, "/tmp/weft-notify-%d-%d.sock",
             (int)getpid(), n);
    unlink(d->notify_path);
    d->nfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d->notify_path);
    if (d->nfd < 0 || bind(d->nfd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("notify socket");
        return false;
    }
    const char *argv[32];
    int argc = 0;
    argv[argc++] = weftd;
    argv[argc++] = "--listen";
    argv[argc++] = d->endpoint;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    d->pid = fork();
    if (d->pid < 0) {
        perror("fork");
        return false;
    }
    if (d->pid == 0) {
        setenv("NOTIFY_SOCKET", d->notify_path, 1);
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        execv(weftd, (char *const *)argv);
        _exit(127);
    }
    d->pidfd = (int)syscall(SYS_pidfd_open, d->pid, 0);
    if (d->pidfd < 0) {
        perror("pidfd_open");
        return false;
    }
    d->zctx = zmq_ctx_new();
    d->sock = zmq_socket(d->zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d->sock, ZMQ_LINGER, &zero, sizeof zero);
    /* connect before the daemon binds: ZeroMQ retries by itself */
    return zmq_connect(d->sock, d->endpoint) == 0;
}

static bool daemon_start(daemon_t *d, const char *weftd, const char *const *args)
{
    return daemon_start_env(d, weftd, args, NULL);
}

/* Wait for the process to exit (poll on its pidfd), reap it. */
static bool daemon_wait_exit(daemon_t *d, int timeout_ms)
{
    if (d->reaped)
        return true;
    struct pollfd p = { .fd = d->pidfd, .events = POLLIN };
    if (poll(&p, 1, timeout_ms) != 1)
        return false;
    int st;
    if (waitpid(d->pid, &st, 0) != d->pid)
        return false;
    d->exit_status = st;
    d->reaped = true;
    return true;
}

static void daemon_close(daemon_t *d)
{
    if (!d->reaped && d->pid > 0) {
        kill(d->pid, SIGKILL);
        daemon_wait_exit(d, TIMEOUT_MS);
    }
    if (d->sock)
        zmq_close(d->sock);
    if (d->zctx)
        zmq_ctx_term(d->zctx);
    if (d->pidfd > 0)
        close(d->pidfd);
    if (d->nfd > 0)
        close(d->nfd);
    unlink(d->notify_path);
    d->sock = d->zctx = NULL;
}

/* Wait until a notify datagram holding the line `want` arrives; lines of
 * earlier datagrams are skipped. */
static bool notify_wait(daemon_t *d, const char *want, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        struct pollfd p = { .fd = d->nfd, .events = POLLIN };
        if (poll(&p, 1, left_ms(deadline)) != 1) {
            fprintf(stderr, "no %s within %d ms\n", want, timeout_ms);
            return false;
        }
        char buf[4096];
        ssize_t n = recv(d->nfd, buf, sizeof buf - 1, 0);
        if (n < 0)
            return false;
        buf[n] = '\0';
        for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save))
            if (strcmp(line, want) == 0)
                return true;
    }
}

/* ------------------------------------------------------------------ */
/* requests and replies */

static bool send_frames(void *sock, bool delim, const wf_buf_t *hdr,
                        size_t n, const void *const *data, const size_t *len)
{
    if (delim && zmq_send(sock, "", 0, ZMQ_SNDMORE) != 0)
        return false;
    if (zmq_send(sock, hdr->data, hdr->len, n ? ZMQ_SNDMORE : 0) < 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (zmq_send(sock, data[i], len[i], i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
            return false;
    return true;
}

static bool send_simple(daemon_t *d, uint32_t op, uint64_t id)
{
    wf_request_t req;
    memset(&req, 0, sizeof req);
    req.version = WF_PROTOCOL_VERSION;
    req.op = op;
    req.id = id;
    wf_buf_t b = { 0 };
    bool ok = wf_request_encode(&req, &b) == WF_OK &&
              send_frames(d->sock, false, &b, 0, NULL, NULL);
    wf_buf_free(&b);
    return ok;
}

typedef struct reply {
    wf_reply_t rep;
    bool delim;                /* an empty frame came before the header */
    size_t n_frames;           /* tensor frames */
    zmq_msg_t frames[4];
} reply_t;

static void reply_clear(reply_t *r)
{
    for (size_t i = 0; i < r->n_frames; i++)
        zmq_msg_close(&r->frames[i]);
    r->n_frames = 0;
}

/* Receive one whole reply and decode its header. */
static bool recv_reply(daemon_t *d, int timeout_ms, reply_t *r)
{
    zmq_pollitem_t it = { d->sock, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, timeout_ms) != 1) {
        fprintf(stderr, "no reply within %d ms\n", timeout_ms);
        return false;
    }
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, d->sock, 0) < 0)
        return false;
    r->delim = zmq_msg_size(&m) == 0;
    if (r->delim) {
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, d->sock, 0) < 0)
            return false;
    }
    char err[256];
    wf_status_t st = wf_reply_decode(zmq_msg_data(&m), zmq_msg_size(&m), &r->rep,
                                     err, sizeof err);
    bool more = zmq_msg_more(&m);
    zmq_msg_close(&m);
    r->n_frames = 0;
    while (more) {
        zmq_msg_t *f = r->n_frames < 4 ? &r->frames[r->n_frames] : &m;
        zmq_msg_init(f);
        zmq_msg_recv(f, d->sock, 0);
        more = zmq_msg_more(f);
        if (f == &m)
            zmq_msg_close(f);
        else
            r->n_frames++;
    }
    if (st != WF_OK)
        fprintf(stderr, "reply does not decode: %s\n", err);
    return st == WF_OK;
}

/* ------------------------------------------------------------------ */
/* tensors and the fp64 reference */

static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);     /* round to nearest even; no NaNs here */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

typedef struct tensor {
    wf_dtype_t dt;
    int64_t shape[4];
    size_t numel, nbytes;
    unsigned char *bytes;      /* wire bytes */
    double *val;               /* the same values, as the daemon reads them */
} tensor_t;

static uint64_t rng_state;

static double rnd(void)   /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static void tensor_make(tensor_t *t, wf_dtype_t dt, int64_t a, int64_t b,
                        int64_t c, int64_t e)
{
    t->dt = dt;
    t->shape[0] = a; t->shape[1] = b; t->shape[2] = c; t->shape[3] = e;
    t->numel = (size_t)(a * b * c * e);
    t->nbytes = t->numel * wf_dtype_size(dt);
    t->bytes = malloc(t->nbytes);
    t->val = malloc(t->numel * sizeof(double));
    for (size_t i = 0; i < t->numel; i++) {
        float f = (float)rnd();
        if (dt == WF_DTYPE_BF16) {
            uint16_t h = f32_to_bf16(f);
            memcpy(t->bytes + 2 * i, &h, 2);
            t->val[i] = bf16_to_f32(h);
        } else {
            memcpy(t->bytes + 4 * i, &f, 4);
            t->val[i] = f;
        }
    }
}

static void tensor_free(tensor_t *t)
{
    free(t->bytes);
    free(t->val);
}

typedef struct attn_case {
    const char *name;
    wf_dtype_t dt;             /* q, k, v */
    int64_t B, Sq, Skv, Hq, Hkv, D;
    bool causal, lse;
    bool has_out_dtype;
    wf_dtype_t out_dtype;
    float scale;               /* 0: default 1/sqrt(D) */
    uint32_t devices;          /* request arg */
    uint32_t want_devices;     /* devices the reply must report */
    bool delim;                /* send a REQ-style empty delimiter */
} attn_case_t;

typedef struct attn_job {
    tensor_t q, k, v;
    double *out, *lse;         /* fp64 reference */
} attn_job_t;

static void attn_reference(const attn_case_t *c, attn_job_t *j)
{
    int64_t B = c->B, Sq = c->Sq, Skv = c->Skv, Hq = c->Hq, Hkv = c->Hkv, D = c->D;
    double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)D);
    j->out = calloc((size_t)(B * Sq * Hq * D), sizeof(double));
    j->lse = calloc((size_t)(B * Sq * Hq), sizeof(double));
    double *s = malloc((size_t)Skv * sizeof(double));
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t hk = h / (Hq / Hkv);
            for (int64_t i = 0; i < Sq; i++) {
                const double *q = &j->q.val[((b * Sq + i) * Hq + h) * D];
                int64_t n = c->causal ? (i + 1 < Skv ? i + 1 : Skv) : Skv;
                double m = -INFINITY;
                for (int64_t t = 0; t < n; t++) {
                    const double *k = &j->k.val[((b * Skv + t) * Hkv + hk) * D];
                    double dot = 0;
                    for (int64_t x = 0; x < D; x++)
                        dot += q[x] * k[x];
                    s[t] = dot * scale;
                    if (s[t] > m)
                        m = s[t];
                }
                double l = 0;
                for (int64_t t = 0; t < n; t++)
                    l += (s[t] = exp(s[t] - m));
                double *o = &j->out[((b * Sq + i) * Hq + h) * D];
                for (int64_t t = 0; t < n; t++) {
                    const double *v = &j->v.val[((b * Skv + t) * Hkv + hk) * D];
                    for (int64_t x = 0; x < D; x++)
                        o[x] += s[t] / l * v[x];
                }
                j->lse[(b * Sq + i) * Hq + h] = m + log(l);
            }
        }
    free(s);
}

static void attn_job_make(const attn_case_t *c, attn_job_t *j, uint64_t seed)
{
    rng_state = seed;
    tensor_make(&j->q, c->dt, c->B, c->Sq, c->Hq, c->D);
    tensor_make(&j->k, c->dt, c->B, c->Skv, c->Hkv, c->D);
    tensor_make(&j->v, c->dt, c->B, c->Skv, c->Hkv, c->D);
    attn_reference(c, j);
}

static void attn_job_free(attn_job_t *j)
{
    tensor_free(&j->q);
    tensor_free(&j->k);
    tensor_free(&j->v);
    free(j->out);
    free(j->lse);
}

static bool attn_send(daemon_t *d, const attn_case_t *c, const attn_job_t *j,
                      uint64_t id)
{
    wf_request_t *req = calloc(1, sizeof *req);
    req->version = WF_PROTOCOL_VERSION;
    req->id = id;
    req->op = WF_OP_ATTENTION;
    req->n_tensors = 3;
    const tensor_t *t[3] = { &j->q, &j->k, &j->v };
    const char *names[3] = { "q", "k", "v" };
    const void *data[3];
    size_t len[3];
    for (int i = 0; i < 3; i++) {
        wf_tensor_desc_t *td = &req->tensors[i];
        snprintf(td->name, sizeof td->name, "%s", names[i]);
        td->dtype = t[i]->dt;
        td->rank = 4;
        memcpy(td->shape, t[i]->shape, sizeof t[i]->shape);
        td->frame = (uint32_t)i;
        wf_tensor_desc_finish(td);
        data[i] = t[i]->bytes;
        len[i] = t[i]->nbytes;
    }
    wf_attention_args_t *a = &req->args.attention;
    a->q = 0; a->k = 1; a->v = 2;
    a->has_scale = c->scale > 0;
    a->scale = c->scale;
    a->causal = c->causal;
    a->return_lse = c->lse;
    a->has_out_dtype = c->has_out_dtype;
    a->out_dtype = c->out_dtype;
    a->devices = c->devices;
    wf_buf_t b = { 0 };
    bool ok = wf_request_encode(req, &b) == WF_OK &&
              send_frames(d->sock, c->delim, &b, 3, data, len);
    wf_buf_free(&b);
    free(req);
    return ok;
}

/* Check a successful attention reply against the reference.
 * Tolerances (absolute; outputs lie in [-1, 1], lse is O(log Skv)):
 *   out f32: 1e-4 (fp32 accumulation vs fp64);
 *   out bf16: 1e-2 (one bf16 rounding, 2^-8 relative, plus the above);
 *   lse f32: 1e-3. */
static void attn_check(const attn_case_t *c, const attn_job_t *j,
                       const reply_t *r)
{
    wf_dtype_t odt = c->has_out_dtype ? c->out_dtype : c->dt;
    CHECK(r->rep.status == WF_OK);
    if (r->rep.status != WF_OK) {
        fprintf(stderr, "%s: %s: %s\n", c->name, wf_status_name(r->rep.status),
                r->rep.error);
        return;
    }
    CHECK(r->delim == c->delim);
    CHECK(r->rep.result.attention.devices == c->want_devices);
    CHECK(r->rep.n_tensors == (c->lse ? 2u : 1u));
    CHECK(r->n_frames == r->rep.n_tensors);
    if (r->n_frames != (c->lse ? 2u : 1u) || r->rep.n_tensors != r->n_frames)
        return;
    const wf_tensor_desc_t *od = &r->rep.tensors[0];
    CHECK(strcmp(od->name, "out") == 0 && od->dtype == odt && od->rank == 4);
    CHECK(od->shape[0] == c->B && od->shape[1] == c->Sq &&
          od->shape[2] == c->Hq && od->shape[3] == c->D);
    size_t n = (size_t)(c->B * c->Sq * c->Hq * c->D);
    const zmq_msg_t *of = &r->frames[od->frame];
    CHECK(zmq_msg_size((zmq_msg_t *)of) == n * wf_dtype_size(odt));
    if (zmq_msg_size((zmq_msg_t *)of) != n * wf_dtype_size(odt))
        return;
    const unsigned char *ob = zmq_msg_data((zmq_msg_t *)of);
    double tol = odt == WF_DTYPE_BF16 ? 1e-2 : 1e-4, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double got;
        if (odt == WF_DTYPE_BF16) {
            uint16_t h;
            memcpy(&h, ob + 2 * i, 2);
            got = bf16_to_f32(h);
        } else {
            float f;
            memcpy(&f, ob + 4 * i, 4);   /* frames are not aligned: copy */
            got = f;
        }
        double e = fabs(got - j->out[i]);
        if (!(e <= worst))
            worst = e;
    }
    CHECK(worst <= tol);
    double worst_lse = 0;
    if (c->lse) {
        const wf_tensor_desc_t *ld = &r->rep.tensors[1];
        size_t nl = (size_t)(c->B * c->Sq * c->Hq);
        CHECK(strcmp(ld->name, "lse") == 0 && ld->dtype == WF_DTYPE_F32 &&
              ld->rank == 3);
        const zmq_msg_t *lf = &r->frames[ld->frame];
        CHECK(zmq_msg_size((zmq_msg_t *)lf) == nl * 4);
        if (zmq_msg_size((zmq_msg_t *)lf) == nl * 4) {
            const unsigned char *lb = zmq_msg_data((zmq_msg_t *)lf);
            for (size_t i = 0; i < nl; i++) {
                float f;
                memcpy(&f, lb + 4 * i, 4);
                double e = fabs(f - j->lse[i]);
                if (!(e <= worst_lse))
                    worst_lse = e;
            }
            CHECK(worst_lse <= 1e-3);
        }
    }
    char lse_txt[32] = "-";
    if (c->lse)
        snprintf(lse_txt, sizeof lse_txt, "%.2e", worst_lse);
    printf("  %-34s devices %u  max|err| out %.2e (tol %.0e)  lse %s  "
           "compute %llu us\n", c->name, r->rep.result.attention.devices, worst,
           tol, lse_txt, (unsigned long long)r->rep.result.attention.compute_us);
}

static bool get_status(daemon_t *d, reply_t *r, uint64_t id)
{
    if (!send_simple(d, WF_OP_STATUS, id) || !recv_reply(d, TIMEOUT_MS, r))
        return false;
    reply_clear(r);
    return r->rep.status == WF_OK && r->rep.id == id;
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

/* ------------------------------------------------------------------ */
/* scenarios */

/* cpu:2 with a config file: hello, status, attention, bad requests,
 * reload, SIGTERM with jobs in flight. */
static void test_main_daemon(const char *weftd, reply_t *r)
{
    char cfg[128];
    snprintf(cfg, sizeof cfg, "/tmp/weft-test-%d.conf", (int)getpid());
    write_file(cfg, "# test\nqueue_capacity = 4\n");
    const char *args[] = { "--devices", "cpu:2", "--config", cfg, NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, args));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    /* hello */
    CHECK(send_simple(&d, WF_OP_HELLO, 1) && recv_reply(&d, TIMEOUT_MS, r));
    wf_limits_t lim;
    wf_limits_default(&lim);
    CHECK(r->rep.status == WF_OK && r->rep.id == 1 && r->rep.op == WF_OP_HELLO);
    CHECK(r->rep.result.hello.protocol == WF_PROTOCOL_VERSION);
    CHECK(r->rep.result.hello.devices == 2);
    CHECK(strcmp(r->rep.result.hello.backend, "cpu") == 0);
    CHECK(r->rep.result.hello.max_tensor_bytes == lim.max_tensor_bytes);
    CHECK(r->rep.result.hello.max_header_bytes == lim.max_header_bytes);
    CHECK(r->n_frames == 0);
    reply_clear(r);

    /* status of a fresh daemon */
    CHECK(get_status(&d, r, 2));
    const wf_status_info_t *si = &r->rep.result.status;
    CHECK(si->device_count == 2);
    CHECK(strcmp(si->devices[0].name, "cpu:0") == 0);
    CHECK(strcmp(si->devices[1].name, "cpu:1") == 0);
    CHECK(si->devices[0].memory_total > 0 && si->devices[0].memory_used == 0);
    CHECK(si->queue_capacity == 4 && si->queue_depth == 0 && si->in_flight == 0);
    CHECK(si->jobs_served == 0 && si->requests_rejected == 0);
    CHECK(si->rss_bytes > 0);

    /* attention */
    static const attn_case_t cases[] = {
        { "f32 one device", WF_DTYPE_F32, 2, 33, 47, 4, 4, 32, false, false,
          false, 0, 0, 1, 1, false },
        { "f32 causal lse split 2, delimiter", WF_DTYPE_F32, 1, 40, 40, 4, 4, 64,
          true, true, false, 0, 0, 0, 2, true },
        { "bf16 GQA 6/2 -> f32 out, lse", WF_DTYPE_BF16, 2, 17, 29, 6, 2, 32,
          false, true, true, WF_DTYPE_F32, 0, 2, 2, false },
        { "bf16 GQA 3/1 causal, 2+1 heads", WF_DTYPE_BF16, 1, 50, 50, 3, 1, 16,
          true, false, false, 0, 0, 0, 2, false },
        { "f32 one head, scale 0.3", WF_DTYPE_F32, 1, 9, 70, 1, 1, 64, false,
          true, false, 0, 0.3f, 0, 1, false },
    };
    size_t n_cases = sizeof cases / sizeof cases[0];
    uint32_t ranks = 0;
    for (size_t i = 0; i < n_cases; i++) {
        attn_job_t j;
        attn_job_make(&cases[i], &j, 1000 + i);
        CHECK(attn_send(&d, &cases[i], &j, 100 + i));
        CHECK(recv_reply(&d, TIMEOUT_MS, r));
        CHECK(r->rep.id == 100 + i && r->rep.op == WF_OP_ATTENTION);
        CHECK(r->rep.epoch == 0);
        attn_check(&cases[i], &j, r);
        ranks += cases[i].want_devices;
        reply_clear(r);
        attn_job_free(&j);
    }

    /* bad requests: refused, answered, harmless */
    wf_buf_t junk = { 0 };
    junk.data = "\xc1\x01\x02";
    junk.len = 3;
    CHECK(send_frames(d.sock, false, &junk, 0, NULL, NULL));
    CHECK(recv_reply(&d, TIMEOUT_MS, r) && r->rep.status == WF_E_MALFORMED);
    reply_clear(r);
    {
        attn_case_t c = cases[0];
        attn_job_t j;
        attn_job_make(&c, &j, 7);
        j.v.nbytes -= 4;      /* the v frame is one element short */
        CHECK(attn_send(&d, &c, &j, 200));
        CHECK(recv_reply(&d, TIMEOUT_MS, r));
        CHECK(r->rep.status == WF_E_FRAME_MISMATCH && r->rep.id == 200);
        CHECK(r->rep.op == WF_OP_ATTENTION && r->n_frames == 0);
        reply_clear(r);
        attn_job_free(&j);
    }

    /* status counts them */
    CHECK(get_status(&d, r, 3));
    CHECK(si->jobs_served == n_cases && si->jobs_failed == 0);
    CHECK(si->requests_rejected == 2);
    CHECK(si->devices[0].jobs_served + si->devices[1].jobs_served == ranks);
    CHECK(si->devices[0].memory_used == 0 && si->devices[1].memory_used == 0);
    printf("  status: served %llu, rejected %llu, parts per device %llu + %llu, "
           "rss %llu KiB\n", (unsigned long long)si->jobs_served,
           (unsigned long long)si->requests_rejected,
           (unsigned long long)si->devices[0].jobs_served,
           (unsigned long long)si->devices[1].jobs_served,
           (unsigned long long)si->rss_bytes / 1024);

    /* SIGHUP: a reloadable change applies, a non-reloadable one is ignored */
    /* (devices = cpu:3 is overridden by the flag, cpu_memory needs a
     * restart: neither may change anything) */
    write_file(cfg, "queue_capacity = 7\ndevices = cpu:3\nlog_level = debug\n"
                    "cpu_memory = 1G\n");
    uint64_t mem_before = si->devices[0].memory_total;
    kill(d.pid, SIGHUP);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 4));
    CHECK(si->queue_capacity == 7 && si->device_count == 2);
    CHECK(si->devices[0].memory_total == mem_before);

    /* SIGHUP with an invalid file changes nothing */
    write_file(cfg, "queue_capacity = 3\nqueue_capacity = 0\n");
    kill(d.pid, SIGHUP);
    CHECK(notify_wait(&d, "RELOADING=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    CHECK(get_status(&d, r, 5));
    CHECK(si->queue_capacity == 7);

    /* SIGTERM with jobs in flight: all admitted jobs are answered */
    enum { N_LATE = 6 };
    /* Long sequences, few bytes: compute (~1 GFLOP a job) outlasts sending. */
    attn_case_t big = { "f32 job in flight at SIGTERM", WF_DTYPE_F32, 1, 2048, 2048,
                        2, 2, 32, false, false, false, 0, 0, 1, 1, false };
    attn_job_t bj;
    attn_job_make(&big, &bj, 99);
    for (int i = 0; i < N_LATE; i++)
        CHECK(attn_send(&d, &big, &bj, 300 + (uint64_t)i));
    /* The status reply proves the daemon has read the jobs sent before it
     * (same connection, in order); job replies may come first. */
    CHECK(send_simple(&d, WF_OP_STATUS, 6));
    int n_ok = 0, n_queued = -1;
    for (int got = 0; got < N_LATE + 1;) {
        if (!recv_reply(&d, TIMEOUT_MS, r))
            break;
        got++;
        if (r->rep.op == WF_OP_STATUS) {
            n_queued = (int)(r->rep.result.status.queue_depth +
                             r->rep.result.status.in_flight);
            kill(d.pid, SIGTERM);
        } else {
            CHECK(r->rep.status == WF_OK);
            if (r->rep.status == WF_OK)
                n_ok++;
            if (n_ok == 1)
                attn_check(&big, &bj, r);
        }
        reply_clear(r);
    }
    printf("  SIGTERM with %d job(s) queued or running: %d/%d answered OK\n",
           n_queued, n_ok, N_LATE);
    CHECK(n_queued >= 1);
    CHECK(n_ok == N_LATE);
    CHECK(notify_wait(&d, "STOPPING=1", TIMEOUT_MS));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    CHECK(access(d.sock_path, F_OK) != 0 && errno == ENOENT);
    attn_job_free(&bj);
    daemon_close(&d);
    unlink(cfg);
}

/* cpu:1, queue of 1, 4 MiB per device: queue full and no memory. */
static void test_limits_daemon(const char *weftd, reply_t *r)
{
    const char *args[] = { "--devices", "cpu:1", "--queue-capacity", "1",
                           "--cpu-memory", "4M", NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, args));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    /* 8 MiB of output on a 4 MiB device can never fit */
    attn_case_t huge = { "too big", WF_DTYPE_F32, 1, 2048, 64, 4, 4, 256, false,
                         false, false, 0, 0, 0, 1, false };
    attn_job_t hj;
    attn_job_make(&huge, &hj, 5);
    CHECK(attn_send(&d, &huge, &hj, 1));
    CHECK(recv_reply(&d, TIMEOUT_MS, r));
    CHECK(r->rep.status == WF_E_NO_MEMORY && r->rep.id == 1);
    printf("  no memory: %s: %s\n", wf_status_name(r->rep.status), r->rep.error);
    reply_clear(r);
    attn_job_free(&hj);

    /* many pipelined jobs on one device with room for one waiting */
    enum { N = 16 };
    attn_case_t c = { "f32 pipelined", WF_DTYPE_F32, 1, 1024, 1024, 2, 2, 64,
                      false, false, false, 0, 0, 0, 1, false };
    attn_job_t j;
    attn_job_make(&c, &j, 11);
    for (int i = 0; i < N; i++)
        CHECK(attn_send(&d, &c, &j, 10 + (uint64_t)i));
    int ok = 0, full = 0, other = 0;
    bool seen[N] = { false };
    for (int i = 0; i < N; i++) {
        if (!recv_reply(&d, TIMEOUT_MS, r))
            break;
        uint64_t id = r->rep.id;
        if (id >= 10 && id < 10 + N)
            seen[id - 10] = true;
        if (r->rep.status == WF_OK) {
            if (ok++ == 0)
                attn_check(&c, &j, r);
        } else if (r->rep.status == WF_E_QUEUE_FULL) {
            full++;
        } else {
            other++;
        }
        reply_clear(r);
    }
    int n_seen = 0;
    for (int i = 0; i < N; i++)
        n_seen += seen[i];
    printf("  queue full: %d OK, %d WF_E_QUEUE_FULL, %d other, %d/%d answered\n",
           ok, full, other, n_seen, N);
    CHECK(ok >= 1 && full >= 1 && other == 0 && n_seen == N);

    CHECK(get_status(&d, r, 99));
    const wf_status_info_t *si = &r->rep.result.status;
    CHECK(si->jobs_served == (uint64_t)ok);
    CHECK(si->requests_rejected == (uint64_t)full + 1);
    CHECK(si->queue_capacity == 1 && si->devices[0].memory_total == (4u << 20));
    attn_job_free(&j);

    kill(d.pid, SIGTERM);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
}

/* systemd's watchdog at 100 ms: WATCHDOG=1 about every 50 ms. A daemon
 * of its own, stopped at once: sd_notify blocks once the datagram queue
 * of a NOTIFY_SOCKET nobody reads is full (systemd always reads it). */
static void test_watchdog(const char *weftd)
{
    const char *args[] = { "--devices", "cpu:1", NULL };
    const char *env[] = { "WATCHDOG_USEC=100000", NULL };
    daemon_t d;
    CHECK(daemon_start_env(&d, weftd, args, env));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));
    int64_t t0 = now_ms();
    CHECK(notify_wait(&d, "WATCHDOG=1", TIMEOUT_MS));
    CHECK(notify_wait(&d, "WATCHDOG=1", TIMEOUT_MS));
    printf("  two WATCHDOG=1 pings within %lld ms (interval 100 ms)\n",
           (long long)(now_ms() - t0));
    kill(d.pid, SIGTERM);
    CHECK(notify_wait(&d, "STOPPING=1", TIMEOUT_MS));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    daemon_close(&d);
}

/* Bad settings: exit 2 at start-up, before READY. */
static void test_bad_start(const char *weftd)
{
    const char *bad[][3] = {
        { "--queue-capacity", "0", NULL },
        { "--devices", "cuda:0", NULL },
        { "--no-such-flag", "1", NULL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        daemon_t d;
        CHECK(daemon_start(&d, weftd, bad[i]));
        CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
        CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 2);
        daemon_close(&d);
    }
    /* --check-config with valid settings: exit 0 without serving */
    const char *check[] = { "--check-config", "--devices", "cpu:3", NULL };
    daemon_t d;
    CHECK(daemon_start(&d, weftd, check));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    CHECK(access(d.sock_path, F_OK) != 0);
    daemon_close(&d);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    reply_t *r = calloc(1, sizeof *r);
    printf("main daemon (cpu:2):\n");
    test_main_daemon(argv[1], r);
    printf("limits daemon (cpu:1, queue 1, 4 MiB):\n");
    test_limits_daemon(argv[1], r);
    printf("watchdog:\n");
    test_watchdog(argv[1]);
    printf("bad start-up settings:\n");
    test_bad_start(argv[1]);
    free(r);
    if (failures) {
        fprintf(stderr, "test_daemon: %d check(s) failed\n", failures);
        return 1;
    }
    printf("test_daemon: all checks passed\n");
    return 0;
}
