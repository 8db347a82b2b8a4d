/* rawd.c — see rawd.h. The process and its notify socket go through
 * support/spawn.h. */
#include "support/rawd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>


int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int left_ms(int64_t deadline)
{
    int64_t l = deadline - now_ms();
    return l < 0 ? 0 : (int)l;
}

/* ------------------------------------------------------------------ */
/* a daemon process */

static int counter;

bool daemon_open(daemon_t *d)
{
    memset(d, 0, sizeof *d);
    int n = counter++;
    snprintf(d->sock_path, sizeof d->sock_path, "/tmp/weft-test-%d-%d.sock",
             (int)getpid(), n);
    snprintf(d->endpoint, sizeof d->endpoint, "ipc://%s", d->sock_path);
    snprintf(d->notify_path, sizeof d->notify_path, "/tmp/weft-notify-%d-%d.sock",
             (int)getpid(), n);
    d->nfd = spawn_notify_bind(d->notify_path, 0);
    return d->nfd >= 0;
}

bool daemon_exec(daemon_t *d, const char *const *argv, const spawn_opts_t *o)
{
    spawn_opts_t so = { 0 };
    if (o)
        so = *o;
    so.notify_path = d->notify_path;
    /* a daemon running as another user must reach the notify socket */
    if (so.as_user && chmod(d->notify_path, 0666) != 0) {
        perror(d->notify_path);
        return false;
    }
    if (!spawn_exec(argv, &so, &d->pid, &d->pidfd))
        return false;
    d->zctx = zmq_ctx_new();
    d->sock = zmq_socket(d->zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d->sock, ZMQ_LINGER, &zero, sizeof zero);
    /* connect before the daemon binds: ZeroMQ retries by itself */
    return zmq_connect(d->sock, d->endpoint) == 0;
}

/* Start weftd with --listen on a fresh ipc path, NOTIFY_SOCKET on a fresh
 * datagram socket, `args` appended and `env` ("K=V", NULL-terminated, may
 * be NULL) added to the environment. */
bool daemon_start_env(daemon_t *d, const char *weftd,
                             const char *const *args, const char *const *env)
{
    if (!daemon_open(d))
        return false;
    const char *argv[32];
    int argc = 0;
    argv[argc++] = weftd;
    argv[argc++] = "--listen";
    argv[argc++] = d->endpoint;
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    spawn_opts_t o = { .env = env };
    return daemon_exec(d, argv, &o);
}

bool daemon_start(daemon_t *d, const char *weftd, const char *const *args)
{
    return daemon_start_env(d, weftd, args, NULL);
}

/* The "KEY: N kB" line of /proc/PID/status, in bytes; 0 when unreadable. */
static uint64_t status_bytes(pid_t pid, const char *key)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = strlen(key);
    uint64_t kib = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':' &&
            sscanf(line + n + 1, " %" SCNu64 " kB", &kib) == 1)
            break;
    fclose(f);
    return kib * 1024;
}

uint64_t rss_of(pid_t pid)
{
    return status_bytes(pid, "VmRSS");
}

uint64_t hwm_of(pid_t pid)
{
    return status_bytes(pid, "VmHWM");
}

/* Wait for the process to exit (on its pidfd), reap it. */
bool daemon_wait_exit(daemon_t *d, int timeout_ms)
{
    if (!d->reaped &&
        spawn_reap(d->pid, d->pidfd > 0 ? d->pidfd : -1, timeout_ms, &d->exit_status))
        d->reaped = true;
    return d->reaped;
}

void daemon_close(daemon_t *d)
{
    if (!d->reaped && d->pid > 0 &&
        spawn_signal_reap(d->pid, d->pidfd > 0 ? d->pidfd : -1, SIGKILL, TIMEOUT_MS,
                          "weftd", &d->exit_status, NULL))
        d->reaped = true;
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
bool notify_wait(daemon_t *d, const char *want, int timeout_ms)
{
    return spawn_notify_wait(d->nfd, want, timeout_ms);
}

/* ------------------------------------------------------------------ */
/* requests and replies */

bool send_frames(void *sock, bool delim, const wf_buf_t *hdr,
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

bool send_simple(daemon_t *d, uint32_t op, uint64_t id)
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

void reply_clear(reply_t *r)
{
    for (size_t i = 0; i < r->n_frames; i++)
        zmq_msg_close(&r->frames[i]);
    r->n_frames = 0;
}

/* Receive one whole reply and decode its header. */
bool recv_reply(daemon_t *d, int timeout_ms, reply_t *r)
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

uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);     /* round to nearest even; no NaNs here */
    return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_state;

static double rnd(void)   /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

void tensor_make(tensor_t *t, wf_dtype_t dt, int64_t a, int64_t b,
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

void tensor_free(tensor_t *t)
{
    free(t->bytes);
    free(t->val);
}

void attn_reference(const attn_case_t *c, attn_job_t *j)
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

void attn_job_make(const attn_case_t *c, attn_job_t *j, uint64_t seed)
{
    rng_state = seed;
    tensor_make(&j->q, c->dt, c->B, c->Sq, c->Hq, c->D);
    tensor_make(&j->k, c->dt, c->B, c->Skv, c->Hkv, c->D);
    tensor_make(&j->v, c->dt, c->B, c->Skv, c->Hkv, c->D);
    attn_reference(c, j);
}

void attn_job_free(attn_job_t *j)
{
    tensor_free(&j->q);
    tensor_free(&j->k);
    tensor_free(&j->v);
    free(j->out);
    free(j->lse);
}

bool attn_send(daemon_t *d, const attn_case_t *c, const attn_job_t *j,
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
void attn_check(const attn_case_t *c, const attn_job_t *j,
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

bool get_status(daemon_t *d, reply_t *r, uint64_t id)
{
    if (!send_simple(d, WF_OP_STATUS, id) || !recv_reply(d, TIMEOUT_MS, r))
        return false;
    reply_clear(r);
    return r->rep.status == WF_OK && r->rep.id == id;
}

void write_file(const char *path, const char *text)
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
/* the job hold (WEFT_TEST_HOLD_JOBS) */

bool hold_make(hold_t *h)
{
    memset(h, 0, sizeof *h);
    h->fd = -1;
    snprintf(h->dir, sizeof h->dir, "/tmp/weft-hold-XXXXXX");
    if (!mkdtemp(h->dir)) {
        perror("hold: mkdtemp");
        h->dir[0] = '\0';
        return false;
    }
    snprintf(h->path, sizeof h->path, "%s/fifo", h->dir);
    if (mkfifo(h->path, 0600) != 0) {
        perror("hold: mkfifo");
        return false;
    }
    /* read and write: the open does not wait for the daemon to open its
     * end, and a write never fails for want of a reader */
    h->fd = open(h->path, O_RDWR | O_CLOEXEC);
    if (h->fd < 0) {
        perror("hold: open");
        return false;
    }
    snprintf(h->env, sizeof h->env, "WEFT_TEST_HOLD_JOBS=%s", h->path);
    return true;
}

static bool hold_write(hold_t *h, char byte, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        ssize_t w;
        do
            w = write(h->fd, &byte, 1);
        while (w < 0 && errno == EINTR);
        if (w != 1) {
            perror("hold: write");
            return false;
        }
    }
    return true;
}

bool hold_release(hold_t *h, unsigned parts)
{
    return hold_write(h, '1', parts);
}

bool hold_open_gate(hold_t *h, unsigned devices)
{
    return hold_write(h, 'a', devices);
}

void hold_remove(hold_t *h)
{
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    if (h->path[0])
        unlink(h->path);
    if (h->dir[0])
        rmdir(h->dir);
    h->path[0] = h->dir[0] = '\0';
}
