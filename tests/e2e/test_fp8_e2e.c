/* test_fp8_e2e.c — fp8 attention end to end, real
 * daemons driven through libweft on ipc://:
 *  (a) a CPU weftd (cpu:2) announces "fp8" but refuses an fp8 attention
 *      and an fp8 forward (flux-tiny, the diffusers fixture) with
 *      WF_E_UNSUPPORTED, the message naming the option and the device
 *      ("precision fp8: device cpu:0 ..."), logged once; the next jobs
 *      (attention, forward, without fp8) are served right;
 *  (b) weftd_standin (the stand-in device, which emulates fp8 on its host
 *      copies) serves fp8 attention (bf16 in, f32 out, GQA, causal, lse,
 *      the two tp ranks splitting the heads): out within 2e-4 of the fp8
 *      reference (reference.h: q / k / v quantized per (batch, head) as
 *      kernels/fp8.h, fp64 after; the stand-in adds f32 accumulation and
 *      the f32 rounding of the dequantized values only, not the e4m3
 *      rounding of P a GPU kernel adds) and lse within 1e-4; and it
 *      differs from the same job without fp8 by more than 8 bf16 half
 *      ulps (2^-9 relative) of the largest |out|: quantization happened.
 *      An fp8 forward of flux-tiny runs, stays within 0.1 of diffusers'
 *      output and differs from the forward without fp8;
 *  (c) a cluster of a stand-in coordinator (n0) and a CPU member (n1)
 *      (mesh ring=2 over the two nodes): an fp8 attention is refused with
 *      WF_E_UNSUPPORTED naming node n1; the next job without fp8 is
 *      right. With two stand-in nodes the fp8 job runs, and each node's
 *      query rows show quantization (the member got fp8 in the job
 *      descriptor);
 *  (d) a raw peer (a ROUTER in this process answering hello without the
 *      feature "fp8", as a weft 0.4 daemon would): libweft refuses an fp8
 *      attention and an fp8 forward locally with WF_E_UNSUPPORTED naming
 *      the feature, after one hello it made itself; the peer received no
 *      job.
 * weftctl attention-demo --fp8 fails with WF_E_UNSUPPORTED against (a) and
 * passes against (b) (its check is the fp8 reference).
 * usage: test_fp8_e2e WEFTD WEFTD_STANDIN FIXTURES WEFTCTL
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zmq.h>

#include "proto.h"
#include "reference.h"
#include "support/clusterd.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"
#include "weft.h"


#define TIMEOUT_MS 60000

static const char *weftd, *standin, *fixtures, *weftctl;

/* Run weftctl with `args` against endpoint `ep`: its exit status (-1:
 * could not run), its stdout and stderr into out. */
static int run_weftctl(const char *ep, const char *args, char *out, size_t len)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --endpoint '%s' %s 2>&1", weftctl, ep, args);
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A daemon with `extra` flags, its log in a file, READY=1 awaited. */
static bool start(clusterd_node_t *n, const char *bin, const char *name,
                  const char *const *extra)
{
    if (!clusterd_node_open(n, name, "f8"))
        return false;
    snprintf(n->p.log_path, sizeof n->p.log_path, "/tmp/weft-fp8-%s-%d.log", name,
             (int)getpid());
    const char *argv[48] = { bin, "--listen", n->p.endpoint, "--log-level", "info",
                             "--model-root", fixtures };
    size_t k = 7;
    for (size_t i = 0; extra[i] && k < 47; i++)
        argv[k++] = extra[i];
    argv[k] = NULL;
    return clusterd_exec(&n->p, argv, NULL) &&
           clusterd_node_wait(n, "READY=1", TIMEOUT_MS, NULL, 0);
}

static void stop(clusterd_node_t *n)
{
    clusterd_kill(&n->p, SIGTERM);
    CHECKM(n->p.reaped && WIFEXITED(n->p.exit_status) && WEXITSTATUS(n->p.exit_status) == 0,
           "%s did not exit 0", n->p.name);
    clusterd_node_close(n);
}

static wf_client_t *connect_to(const clusterd_node_t *n)
{
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(n->p.endpoint, TIMEOUT_MS, &c);
    CHECKM(st == WF_OK, "connect %s: %s", n->p.endpoint, wf_client_last_error(NULL));
    return c;
}

static const jcase_t small = {
    .name = "small", .B = 1, .Sq = 64, .Skv = 64, .Hq = 4, .Hkv = 2, .D = 32,
    .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 0, .want_lse = true,
};
static const jcase_t mixed = {
    .name = "mixed", .B = 2, .Sq = 96, .Skv = 80, .Hq = 4, .Hkv = 2, .D = 64,
    .in = WF_DTYPE_BF16, .out = WF_DTYPE_F32, .causal = 1, .want_lse = true,
};

/* An fp8 job of case c that must be refused with WF_E_UNSUPPORTED and a
 * message holding `needle`. */
static void refused(wf_client_t *c, const jcase_t *jc, const char *needle, const char *what)
{
    jbuf_t b;
    if (!jbuf_init(&b, jc, 5)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_attention_opts_t o = opts_of(jc);
    o.precision = WF_PRECISION_FP8;
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    const char *msg = wf_client_last_error(c);
    CHECKM(st == WF_E_UNSUPPORTED, "%s: %s: %s", what, wf_status_name(st), msg);
    CHECKM(strstr(msg, needle) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, needle);
    printf("%s: %s: %s\n", what, wf_status_name(st), msg);
    jbuf_free(&b);
}

/* A job of case c without fp8, right against the fp64 reference. */
static void served(wf_client_t *c, const jcase_t *jc, const char *what)
{
    jbuf_t b;
    if (!jbuf_init(&b, jc, 6)) {
        CHECKM(false, "%s: out of memory", what);
        return;
    }
    wf_attention_opts_t o = opts_of(jc);
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    CHECKM(st == WF_OK, "%s: %s: %s", what, wf_status_name(st), wf_client_last_error(c));
    if (st == WF_OK) {
        double eo, el, to, tl;
        jbuf_errors(&b, &eo, &el);
        jcase_tolerances(jc, false, &to, &tl);
        CHECKM(eo <= to && el <= tl, "%s: errors out %g lse %g", what, eo, el);
    }
    jbuf_free(&b);
}

/* A forward of flux-tiny: status, and the output into *ret_out (owned by
 * the caller, freed with free(ret_out->data)) when WF_OK. */
static wf_status_t forward(wf_client_t *c, const fluxio_t *io, bool fp8, wf_tensor_t *ret_out)
{
    if (!fluxio_output(io, WF_DTYPE_F32, ret_out))
        return WF_E_NO_MEMORY;
    wf_forward_opts_t fo = { .precision = fp8 ? WF_PRECISION_FP8 : WF_PRECISION_DEFAULT };
    wf_status_t st = wf_forward_ex(c, "tiny", &io->in, ret_out, &fo, NULL);
    if (st != WF_OK) {
        free(ret_out->data);
        ret_out->data = NULL;
    }
    return st;
}

/* (a) */
static void test_cpu(void)
{
    clusterd_node_t n;
    const char *extra[] = { "--devices", "cpu:2", "--cpu-memory", "512M", NULL };
    if (!start(&n, weftd, "cpu", extra)) {
        CHECKM(false, "(a) weftd did not start");
        clusterd_node_close(&n);
        return;
    }
    wf_client_t *c = connect_to(&n);
    if (c) {
        refused(c, &small, "precision fp8: device cpu:0 has no fp8 tensor cores",
                "(a) cpu attention fp8");
        CHECKM(wf_client_has_feature(c, "fp8") == 1, "(a) weftd does not announce fp8");
        char line[512] = "";
        CHECKM(clusterd_log_find(&n.p, "WF_E_UNSUPPORTED: precision fp8: device cpu:0",
                                 TIMEOUT_MS, line, sizeof line),
               "(a) no log line of the refusal");
        served(c, &small, "(a) next attention");
        char text[4096];
        int rc = run_weftctl(n.p.endpoint, "attention-demo --fp8", text, sizeof text);
        CHECKM(rc == 1 && strstr(text, "WF_E_UNSUPPORTED: precision fp8: device cpu:0"),
               "(a) weftctl attention-demo --fp8: exit %d: %s", rc, text);
        wf_status_t st = wf_load_model(c, "tiny", "flux-tiny", NULL, NULL);
        CHECKM(st == WF_OK, "(a) load: %s: %s", wf_status_name(st), wf_client_last_error(c));
        fluxio_t io;
        if (st == WF_OK && fluxio_load(&io, fixtures, "io-flux-tiny-f32.safetensors")) {
            wf_tensor_t out;
            st = forward(c, &io, true, &out);
            CHECKM(st == WF_E_UNSUPPORTED &&
                   strstr(wf_client_last_error(c), "precision fp8: device cpu:0"),
                   "(a) forward fp8: %s: %s", wf_status_name(st), wf_client_last_error(c));
            printf("(a) cpu forward fp8: %s: %s\n", wf_status_name(st),
                   wf_client_last_error(c));
            st = forward(c, &io, false, &out);
            CHECKM(st == WF_OK, "(a) next forward: %s", wf_status_name(st));
            if (st == WF_OK) {
                double e = fluxio_error(&io, &out);
                CHECKM(e <= fluxio_tolerance(&io), "(a) forward error %g", e);
                free(out.data);
            }
            fluxio_free(&io);
        }
        wf_client_destroy(&c);
    }
    stop(&n);
}

/* (b) */
static void test_standin(void)
{
    clusterd_node_t n;
    const char *extra[] = { "--devices", "cpu:2", "--cpu-memory", "768M", NULL };
    if (!start(&n, standin, "standin", extra)) {
        CHECKM(false, "(b) weftd_standin did not start");
        clusterd_node_close(&n);
        return;
    }
    wf_client_t *c = connect_to(&n);
    jbuf_t b;
    if (c && jbuf_init(&b, &mixed, 11)) {
        const jcase_t *jc = &mixed;
        size_t nq = (size_t)(jc->B * jc->Sq * jc->Hq * jc->D), nl = nq / (size_t)jc->D;
        float *plain = malloc(nq * sizeof *plain);
        double *ref = malloc(nq * sizeof *ref), *rlse = malloc(nl * sizeof *rlse);
        wf_attention_opts_t o = opts_of(jc);
        wf_job_result_t r;
        wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, &r);
        CHECKM(st == WF_OK, "(b) attention: %s", wf_status_name(st));
        if (plain && st == WF_OK)
            memcpy(plain, b.out.data, nq * sizeof *plain);
        o.precision = WF_PRECISION_FP8;
        st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, &r);
        CHECKM(st == WF_OK, "(b) attention fp8: %s: %s", wf_status_name(st),
               wf_client_last_error(c));
        CHECKM(r.devices == 2, "(b) fp8 job on %u devices", r.devices);
        const wf_ref_attn_t ra = { .B = jc->B, .Sq = jc->Sq, .Skv = jc->Skv, .Hq = jc->Hq,
                                   .Hkv = jc->Hkv, .D = jc->D,
                                   .scale = 1.0 / sqrt((double)jc->D),
                                   .causal = jc->causal != 0 };
        if (st == WF_OK && plain && ref && rlse &&
            wf_ref_attention_fp8(&ra, b.q.data, b.q.dtype, b.k.data, b.k.dtype, b.v.data,
                                 b.v.dtype, ref, rlse) == WF_OK) {
            const float *out = b.out.data;
            double e = 0, el = 0, d = 0, omax = 0;
            for (size_t i = 0; i < nq; i++) {
                if (!(fabs(out[i] - ref[i]) <= e))
                    e = fabs(out[i] - ref[i]);
                d = fmax(d, fabs((double)out[i] - (double)plain[i]));
                omax = fmax(omax, fabs((double)plain[i]));
            }
            for (size_t i = 0; i < nl; i++) {
                double x = fabs(b.lse[i] - rlse[i]) / fmax(1.0, fabs(rlse[i]));
                if (!(x <= el))
                    el = x;
            }
            double eo_exact, el_exact;
            jbuf_errors(&b, &eo_exact, &el_exact);
            const double bf16_explains = 8 * 0x1p-9 * omax;
            printf("(b) standin fp8 attention: vs fp8 reference out %.3g lse %.3g; vs the "
                   "exact reference %.3g; vs without fp8 %.3g (bf16 rounding would explain "
                   "%.3g)\n", e, el, eo_exact, d, bf16_explains);
            CHECKM(e <= 2e-4 && el <= 1e-4, "(b) fp8 vs the fp8 reference: out %g lse %g", e,
                   el);
            CHECKM(d > bf16_explains, "(b) fp8 out within %g of the plain one: not "
                   "quantized?", d);
            CHECKM(eo_exact > 10 * e, "(b) fp8 out as close to the exact reference (%g) "
                   "as to the fp8 one (%g)", eo_exact, e);
        }
        free(plain);
        free(ref);
        free(rlse);
        jbuf_free(&b);
        char text[4096];
        int rc = run_weftctl(n.p.endpoint, "attention-demo --fp8 --dtype bf16 --causal "
                             "--kv-heads 2", text, sizeof text);
        CHECKM(rc == 0 && strstr(text, "precision fp8") && strstr(text, "PASS"),
               "(b) weftctl attention-demo --fp8: exit %d: %s", rc, text);
        printf("(b) weftctl attention-demo --fp8: exit %d\n%s", rc, text);
        /* a forward with fp8: the flag reaches the model's attention */
        wf_status_t ls = wf_load_model(c, "tiny", "flux-tiny", NULL, NULL);
        CHECKM(ls == WF_OK, "(b) load: %s: %s", wf_status_name(ls), wf_client_last_error(c));
        fluxio_t io;
        if (ls == WF_OK && fluxio_load(&io, fixtures, "io-flux-tiny-f32.safetensors")) {
            wf_tensor_t o8 = { 0 }, o0 = { 0 };
            wf_status_t s8 = forward(c, &io, true, &o8), s0 = forward(c, &io, false, &o0);
            CHECKM(s8 == WF_OK && s0 == WF_OK, "(b) forwards: %s %s: %s",
                   wf_status_name(s8), wf_status_name(s0), wf_client_last_error(c));
            if (s8 == WF_OK && s0 == WF_OK) {
                double e8 = fluxio_error(&io, &o8), e0 = fluxio_error(&io, &o0);
                size_t ne = 1;
                for (int i = 0; i < o8.rank; i++)
                    ne *= (size_t)o8.shape[i];
                double d = 0;
                for (size_t i = 0; i < ne; i++)
                    d = fmax(d, fabs((double)((float *)o8.data)[i] - ((float *)o0.data)[i]));
                printf("(b) standin forward: error fp8 %.3g, without %.3g; max |fp8 - "
                       "without| %.3g\n", e8, e0, d);
                CHECKM(e0 <= fluxio_tolerance(&io), "(b) forward error %g", e0);
                CHECKM(e8 <= 0.1 && d > 0, "(b) fp8 forward: error %g, diff %g", e8, d);
            }
            free(o8.data);
            free(o0.data);
            fluxio_free(&io);
        }
    }
    wf_client_destroy(&c);
    stop(&n);
}

/* The fp8 job of `small` on a cluster of stand-ins (ring=2: node n0
 * computes query rows [0, 32), n1 rows [32, 64)): both halves differ from
 * the job without fp8 (each node quantized: the job descriptor carried
 * fp8 to the member) and stay within the fp8 error of the exact
 * reference (the ring pieces are quantized per kernel call, so the
 * whole-tensor fp8 reference is not exact here). */
static void cluster_fp8_served(wf_client_t *c)
{
    jbuf_t b;
    if (!jbuf_init(&b, &small, 12)) {
        CHECKM(false, "(c) out of memory");
        return;
    }
    size_t nq = (size_t)(small.Sq * small.Hq * small.D);
    float *plain = malloc(nq * sizeof *plain);
    wf_attention_opts_t o = opts_of(&small);
    wf_status_t st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, NULL);
    CHECKM(st == WF_OK && plain, "(c) attention: %s", wf_status_name(st));
    if (st == WF_OK && plain)
        memcpy(plain, b.out.data, nq * sizeof *plain);
    o.precision = WF_PRECISION_FP8;
    wf_job_result_t r;
    st = wf_attention(c, &b.q, &b.k, &b.v, &o, &b.out, b.lse, &r);
    CHECKM(st == WF_OK, "(c) fp8 on stand-ins: %s: %s", wf_status_name(st),
           wf_client_last_error(c));
    if (st == WF_OK && plain) {
        double d[2] = { 0, 0 }, eo, el;
        for (size_t i = 0; i < nq; i++)
            d[i >= nq / 2] = fmax(d[i >= nq / 2],
                                  fabs((double)((float *)b.out.data)[i] - plain[i]));
        jbuf_errors(&b, &eo, &el);
        printf("(c) stand-in cluster fp8: |fp8 - without| n0 rows %.3g, n1 rows %.3g; "
               "vs exact %.3g (devices %u)\n", d[0], d[1], eo, r.devices);
        CHECKM(d[0] > 1e-3 && d[1] > 1e-3, "(c) a node did not quantize: %g %g", d[0], d[1]);
        CHECKM(eo <= 0x1p-4, "(c) fp8 error against the exact reference %g", eo);
    }
    free(plain);
    jbuf_free(&b);
}

/* (c) */
static void test_cluster(bool all_standin)
{
    char coord[64], tmo[] = "20000";
    snprintf(coord, sizeof coord, "127.0.0.1:%d", test_port());
    clusterd_node_t a, m;
    const char *common[] = { "--devices", "cpu:1", "--cpu-memory", "512M", "--mesh",
                             "ring=2", "--coordinator", coord, "--nodes", "2",
                             "--cluster-timeout-ms", tmo, "--data-address", "127.0.0.1",
                             "--allow-anonymous", "true", "--node-name", NULL, NULL };
    const char *ea[20], *em[20];
    memcpy(ea, common, sizeof common);
    memcpy(em, common, sizeof common);
    ea[17] = "n0";
    em[17] = "n1";
    bool up = start(&a, standin, "n0", ea);
    up = start(&m, all_standin ? standin : weftd, "n1", em) && up;
    up = up && clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 2 node(s)",
                                  TIMEOUT_MS, NULL, 0);
    CHECKM(up, "(c) cluster did not form");
    wf_client_t *c = up ? connect_to(&a) : NULL;
    if (c && all_standin) {
        cluster_fp8_served(c);
    } else if (c) {
        refused(c, &small, "precision fp8: node n1 of the cluster", "(c) cluster fp8");
        served(c, &small, "(c) next attention");
    }
    wf_client_destroy(&c);
    stop(&m);
    stop(&a);
}

/* ---- (d) a peer without the feature ---------------------------------------- */

typedef struct peer {
    void *ctx, *sock;
    char ep[128];
    int hellos, others;        /* requests received */
    volatile int stop;
} peer_t;

static void *peer_run(void *arg)
{
    peer_t *p = arg;
    static wf_reply_t rep;
    wf_buf_t buf = { 0 };
    while (!p->stop) {
        zmq_pollitem_t it = { p->sock, 0, ZMQ_POLLIN, 0 };
        if (zmq_poll(&it, 1, 50) <= 0)
            continue;
        zmq_msg_t parts[24];
        int n = 0, more = 1;
        while (more) {
            zmq_msg_t *mm = &parts[n < 23 ? n : 23];
            if (n >= 23)
                zmq_msg_close(mm);
            zmq_msg_init(mm);
            if (zmq_msg_recv(mm, p->sock, 0) < 0)
                break;
            more = zmq_msg_more(mm);
            n += n < 23;
        }
        int h = 1;
        bool delim = n > 2 && zmq_msg_size(&parts[1]) == 0;
        if (delim)
            h = 2;
        uint64_t id = 0;
        uint32_t op = 0;
        if (h < n)
            wf_request_peek(zmq_msg_data(&parts[h]), zmq_msg_size(&parts[h]), &id, &op);
        if (op == WF_OP_HELLO) {
            p->hellos++;
            memset(&rep, 0, sizeof rep);
            rep.version = WF_PROTOCOL_VERSION;
            rep.id = id;
            rep.op = op;
            rep.status = WF_OK;
            rep.result.hello.protocol = WF_PROTOCOL_VERSION;
            snprintf(rep.result.hello.weft_version, sizeof rep.result.hello.weft_version,
                     "0.4.0");
            snprintf(rep.result.hello.backend, sizeof rep.result.hello.backend, "cuda");
            rep.result.hello.devices = 1;
            rep.result.hello.max_header_bytes = 65536;
            rep.result.hello.max_tensor_bytes = 1u << 30;
            rep.result.hello.max_tensors = 16;
            rep.features = WF_FEATURES_ALL & ~(uint32_t)WF_FEATURE_FP8;
            wf_buf_reset(&buf);
            if (wf_reply_encode(&rep, &buf) == WF_OK) {
                zmq_send(p->sock, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]),
                         ZMQ_SNDMORE);
                if (delim)
                    zmq_send(p->sock, "", 0, ZMQ_SNDMORE);
                zmq_send(p->sock, buf.data, buf.len, 0);
            }
        } else {
            p->others++;   /* never answered: the test fails on the count */
        }
        for (int i = 0; i < n; i++)
            zmq_msg_close(&parts[i]);
    }
    wf_buf_free(&buf);
    return NULL;
}

static void test_old_peer(void)
{
    peer_t p = { 0 };
    snprintf(p.ep, sizeof p.ep, "ipc:///tmp/weft-fp8-peer-%d", (int)getpid());
    p.ctx = zmq_ctx_new();
    p.sock = p.ctx ? zmq_socket(p.ctx, ZMQ_ROUTER) : NULL;
    if (!p.sock || zmq_bind(p.sock, p.ep) != 0) {
        CHECKM(false, "(d) peer bind %s: %s", p.ep, zmq_strerror(zmq_errno()));
        return;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, peer_run, &p) != 0) {
        CHECKM(false, "(d) thread");
        return;
    }
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(p.ep, 10000, &c);
    CHECKM(st == WF_OK, "(d) connect: %s", wf_client_last_error(NULL));
    if (c) {
        refused(c, &small, "the daemon does not announce the feature \"fp8\"",
                "(d) old peer attention fp8");
        fluxio_t io;
        if (fluxio_load(&io, fixtures, "io-flux-tiny-f32.safetensors")) {
            wf_tensor_t out;
            st = forward(c, &io, true, &out);
            CHECKM(st == WF_E_UNSUPPORTED && strstr(wf_client_last_error(c), "\"fp8\""),
                   "(d) forward fp8: %s: %s", wf_status_name(st), wf_client_last_error(c));
            fluxio_free(&io);
        }
        CHECKM(wf_client_has_feature(c, "fp8") == 0 && wf_client_has_feature(c, "models") == 1,
               "(d) features as the peer announced");
        wf_client_destroy(&c);
    }
    p.stop = 1;
    pthread_join(th, NULL);
    CHECKM(p.hellos == 1 && p.others == 0, "(d) the peer received %d hello(s) and %d "
           "other request(s); want 1 and 0", p.hellos, p.others);
    zmq_close(p.sock);
    zmq_ctx_term(p.ctx);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: test_fp8_e2e WEFTD WEFTD_STANDIN FIXTURES WEFTCTL\n");
        return 2;
    }
    weftctl = argv[4];
    weftd = argv[1];
    standin = argv[2];
    fixtures = argv[3];
    block_test_signals();
    test_old_peer();
    test_cpu();
    test_standin();
    test_cluster(false);
    test_cluster(true);
    printf("test_fp8_e2e: %s\n", failed ? "FAILED" : "OK");
    return failed ? 1 : 0;
}
