/* test_conform.c — end to end: weftd does what proto/PROTOCOL.md says,
 * in the details a client written from the document alone relies on.
 * Real daemons on private ipc endpoints;
 * libweft where the case is about the library (hello features), raw
 * ZeroMQ + the codec where the bytes matter (an op of 2^32, the drain).
 *
 *  1. hello: weft_version is the build's (0.7.0, section 9's history) and
 *     the reply announces its features (libweft's wf_client_has_feature
 *     and the raw reply's `features` list).
 *  2. an op of 2^32 or more is answered 4 and echoed as 2^32 - 1; an op
 *     that fits 32 bits is echoed as sent (section 6); end_session (op
 *     10) of a session never opened is 9, without its args 5 (12.8).
 *  3. heads not divisible by tp: split unevenly (2 + 1) on a head-split
 *     mesh (dp 2 x tp 2), on ring 2 x tp 2 and on ulysses 2 x tp 2 alike,
 *     with one device's result; fewer heads than tp ranks is 9 where
 *     every rank runs (section 3.3.1).
 *  4. `devices` other than 0 on a ring / Ulysses mesh: 9; on a head-split
 *     mesh honoured (the job uses that many devices).
 *  5. uneven sequences: on a Ulysses-only mesh ring_anything or
 *     ulysses_anything allows them and the refusal names
 *     ulysses_anything; on a ring mesh only ring_anything, and the
 *     refusal names it (section 3.3.1).
 *  6. forward with S_img not divisible by ring x ulysses: served (uneven
 *     sequence shards, 12.4); channels that do not fit the model: 9.
 *  7. SIGTERM while a client sends jobs without pause: every request the
 *     client sent gets exactly one reply (section 1), the client stopping
 *     once it has seen WF_E_SHUTTING_DOWN (as section 1 asks); the daemon
 *     exits 0.
 *
 * Usage: test_conform PATH_TO_WEFTD FIXTURES_DIR
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "proto.h"
#include "support/jobcheck.h"
#include "support/check.h"
#include "support/spawn.h"
#include "support/wait.h"


#define REPLY_TIMEOUT_MS 20000

/* PROTOCOL.md section 10: the reply of a fresh daemon (epoch 0) to the
 * hello request without "v", as the document prints it. */
#define PROTOCOL_10_REPLY \
    "86 a1 76 02 a2 69 64 01 a2 6f 70 01 a6 73 74 61 " \
    "74 75 73 02 a5 65 72 72 6f 72 d9 2d 76 3a 20 6d " \
    "69 73 73 69 6e 67 20 28 70 72 6f 74 6f 63 6f 6c " \
    "20 76 65 72 73 69 6f 6e 2c 20 6d 75 73 74 20 62 " \
    "65 20 31 20 6f 72 20 32 29 a5 65 70 6f 63 68 00"


/* ---- raw ZeroMQ ---------------------------------------------------------- */

/* Receive one whole message; the header (first frame) decoded into rep.
 * 0, or -1 on timeout / a reply that does not decode. */
static int recv_reply(void *sock, int timeout_ms, wf_reply_t *rep)
{
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return -1;
    int part = 0, more = 1, rc = -1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (part++ == 0) {
            char err[WF_PROTO_ERROR_MAX];
            rc = wf_reply_decode(zmq_msg_data(&m), zmq_msg_size(&m), rep, err,
                                 sizeof err) == WF_OK ? 0 : -1;
        }
        zmq_msg_close(&m);
    }
    return rc;
}

static void *dealer(void *zctx, const char *endpoint)
{
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(s, endpoint) != 0) {
        zmq_close(s);
        return NULL;
    }
    return s;
}

/* Receive one message; its first frame's bytes into buf (at most cap),
 * their count in *ret_len. 0, or -1 on timeout. */
static int recv_header_bytes(void *sock, int timeout_ms, unsigned char *buf, size_t cap,
                             size_t *ret_len)
{
    zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
    if (zmq_poll(&it, 1, timeout_ms) <= 0)
        return -1;
    int part = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, sock, 0) < 0) {
            zmq_msg_close(&m);
            return -1;
        }
        more = zmq_msg_more(&m);
        if (part++ == 0) {
            size_t n = zmq_msg_size(&m) < cap ? zmq_msg_size(&m) : cap;
            memcpy(buf, zmq_msg_data(&m), n);
            *ret_len = n;
        }
        zmq_msg_close(&m);
    }
    return 0;
}

static void hex(const unsigned char *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, i ? " %02x" : "%02x", p[i]);
    out[o] = '\0';
}

/* Section 10's worked example, byte for byte: the hello request as the
 * encoder writes it, and the daemon's reply to a request without "v". */
static void test_worked_example(void *zctx, const char *endpoint)
{
    static const char want_req[] = "83 a1 76 01 a2 69 64 01 a2 6f 70 01";
    static const char want_rep[] = PROTOCOL_10_REPLY;
    char got[1024];
    wf_request_t *req = calloc(1, sizeof *req);
    wf_buf_t b = { 0 };
    req->version = 1;
    req->id = 1;
    req->op = WF_OP_HELLO;
    CHECK(wf_request_encode(req, &b) == WF_OK, "encode hello");
    hex((const unsigned char *)b.data, b.len, got, sizeof got);
    CHECK(strcmp(got, want_req) == 0, "section 10 hello request: %s", got);
    void *s = dealer(zctx, endpoint);
    /* {"id": 1, "op": 1}: no "v" */
    static const unsigned char nov[] = { 0x82, 0xa2, 'i', 'd', 0x01, 0xa2, 'o', 'p', 0x01 };
    zmq_send(s, nov, sizeof nov, 0);
    unsigned char buf[512];
    size_t n = 0;
    CHECK(recv_header_bytes(s, REPLY_TIMEOUT_MS, buf, sizeof buf, &n) == 0,
          "section 10: no reply");
    hex(buf, n, got, sizeof got);
    CHECK(strcmp(got, want_rep) == 0, "section 10 reply (%zu bytes): %s", n, got);
    printf("  section 10 reply, %zu bytes: %s\n", n, got);
    /* a version-1 client gets version-1 replies (section 9), a version-2
     * one version 2: the hello above as each sends it */
    for (unsigned v = 1; v <= 2; v++) {
        wf_buf_reset(&b);
        req->version = v;
        CHECK(wf_request_encode(req, &b) == WF_OK, "encode hello v%u", v);
        zmq_send(s, b.data, b.len, 0);
        CHECK(recv_header_bytes(s, REPLY_TIMEOUT_MS, buf, sizeof buf, &n) == 0 && n > 4,
              "hello v%u: no reply", v);
        /* the reply's first key: fixmap, "v" (a1 76), the version */
        hex(buf, n < 16 ? n : 16, got, sizeof got);
        CHECK(buf[1] == 0xa1 && buf[2] == 'v' && buf[3] == v, "hello v%u answered with "
              "v %u: %s", v, buf[3], got);
    }
    wf_buf_free(&b);
    free(req);
    zmq_close(s);
}

/* ---- libweft helpers --------------------------------------------------------- */

/* f32 tensor of rank 4 with a deterministic fill; data malloc'd. */
static wf_tensor_t t4(int64_t b, int64_t s, int64_t h, int64_t d)
{
    wf_tensor_t t = { NULL, WF_DTYPE_F32, 4, { b, s, h, d } };
    size_t n = (size_t)(b * s * h * d);
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 37u) % 17u) / 17.0f - 0.5f;
    t.data = p;
    return t;
}

/* Attention with Sq = Skv = s, Hq = Hkv = h, D 8 and opts; its status,
 * devices used in *ret_devices, message in msg. */
static wf_status_t attn(wf_client_t *c, int64_t s, int64_t h, const wf_attention_opts_t *o,
                        uint32_t *ret_devices, char *msg, size_t msg_len)
{
    wf_tensor_t q = t4(1, s, h, 8), k = t4(1, s, h, 8), v = t4(1, s, h, 8),
                out = t4(1, s, h, 8);
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    wf_status_t st = wf_attention(c, &q, &k, &v, o, &out, NULL, &res);
    snprintf(msg, msg_len, "%s", st == WF_OK ? "" : wf_client_last_error(c));
    if (ret_devices)
        *ret_devices = res.devices;
    free(q.data);
    free(k.data);
    free(v.data);
    free(out.data);
    return st;
}

static bool set_mesh(wf_client_t *c, uint32_t dp, uint32_t ring, uint32_t uly, uint32_t tp)
{
    wf_mesh_degrees_t m = { dp, ring, uly, tp };
    wf_status_t st = wf_reconfigure(c, &m, NULL);
    CHECK(st == WF_OK, "reconfigure dp=%u ring=%u ulysses=%u tp=%u: %s %s", dp, ring,
          uly, tp, wf_status_name(st), wf_client_last_error(c));
    return st == WF_OK;
}

/* ---- 1, 2: hello and the op echo --------------------------------------------- */

static void test_hello(wf_client_t *c, void *zctx, const char *endpoint)
{
    wf_hello_info_t h;
    memset(&h, 0, sizeof h);
    CHECK(wf_client_has_feature(c, "models") == 0, "a feature before any hello");
    wf_status_t st = wf_hello(c, &h);
    CHECK(st == WF_OK, "hello: %s", wf_status_name(st));
    CHECK(strcmp(h.weft_version, WF_VERSION_STRING) == 0 &&
          strcmp(h.weft_version, "0.7.0") == 0,
          "hello weft_version %s, libweft %s", h.weft_version, WF_VERSION_STRING);
    const char *feats[] = { "reconfigure", "cp_options", "models", "roles", "fp8",
                            "split_batch", "sessions" };
    for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++)
        CHECK(wf_client_has_feature(c, feats[i]) == 1, "feature %s not announced",
              feats[i]);
    CHECK(wf_client_has_feature(c, "teleport") == 0, "an unknown feature announced");
    CHECK(wf_client_has_feature(c, "") == 0 && wf_client_has_feature(c, NULL) == 0 &&
          wf_client_has_feature(NULL, "models") == 0, "has_feature with NULL / \"\"");
    printf("  hello: weft_version %s, features reconfigure cp_options models roles fp8 "
           "split_batch sessions\n", h.weft_version);

    /* the raw reply: features is an array of the names */
    void *s = dealer(zctx, endpoint);
    CHECK(s != NULL, "connect");
    if (!s)
        return;
    wf_request_t *req = calloc(1, sizeof *req);
    wf_reply_t *rep = calloc(1, sizeof *rep);
    wf_buf_t b = { 0 };
    req->version = 1;
    req->id = 41;
    req->op = WF_OP_HELLO;
    CHECK(wf_request_encode(req, &b) == WF_OK, "encode hello");
    zmq_send(s, b.data, b.len, 0);
    CHECK(recv_reply(s, REPLY_TIMEOUT_MS, rep) == 0, "raw hello: no reply");
    CHECK(rep->status == WF_OK && rep->features == WF_FEATURES_ALL,
          "raw hello: status %d features %#x", rep->status, rep->features);

    /* ops that fit 32 bits are echoed; 2^32 and more as 2^32 - 1 */
    static const struct {
        uint64_t op;
        uint32_t echo;
    } ops[] = {
        { 99, 99 },
        { UINT32_MAX, UINT32_MAX },
        { (uint64_t)UINT32_MAX + 1, UINT32_MAX },
        { (uint64_t)1 << 40, UINT32_MAX },
        { UINT64_MAX, UINT32_MAX },
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        /* {"v": 1, "id": 500 + i, "op": uint 64} */
        unsigned char hdr[32];
        size_t n = 0;
        hdr[n++] = 0x83;
        hdr[n++] = 0xa1; hdr[n++] = 'v'; hdr[n++] = 0x01;
        hdr[n++] = 0xa2; hdr[n++] = 'i'; hdr[n++] = 'd';
        hdr[n++] = 0xcd; hdr[n++] = 0x01; hdr[n++] = (unsigned char)(0xf4 + i);
        hdr[n++] = 0xa2; hdr[n++] = 'o'; hdr[n++] = 'p';
        hdr[n++] = 0xcf;
        for (int j = 7; j >= 0; j--)
            hdr[n++] = (unsigned char)(ops[i].op >> (8 * j));
        zmq_send(s, hdr, n, 0);
        memset(rep, 0, sizeof *rep);
        int rc = recv_reply(s, REPLY_TIMEOUT_MS, rep);
        CHECK(rc == 0 && rep->id == 500 + i && rep->status == WF_E_UNKNOWN_OP &&
              rep->op == ops[i].echo,
              "op %llu: reply id %llu status %d op %u, expected status 4 op %u",
              (unsigned long long)ops[i].op, (unsigned long long)rep->id, rep->status,
              rep->op, ops[i].echo);
        printf("  op %llu: status %d, echoed op %u\n", (unsigned long long)ops[i].op,
               rep->status, rep->op);
    }
    /* end_session (op 10, section 12.8): a session never opened is 9; no
     * session is 5 */
    for (int k = 0; k < 2; k++) {
        memset(req, 0, sizeof *req);
        req->version = 1;
        req->id = 600 + (uint64_t)k;
        req->op = WF_OP_END_SESSION;
        req->args.end_session.session = 77;
        wf_buf_reset(&b);
        CHECK(wf_request_encode(req, &b) == WF_OK, "encode end_session");
        if (k == 1) {
            /* {"v": 1, "id": 601, "op": 10}: no args */
            static const unsigned char bare[] = { 0x83, 0xa1, 'v', 0x01, 0xa2, 'i', 'd',
                                                  0xcd, 0x02, 0x59, 0xa2, 'o', 'p', 0x0a };
            zmq_send(s, bare, sizeof bare, 0);
        } else {
            zmq_send(s, b.data, b.len, 0);
        }
        memset(rep, 0, sizeof *rep);
        int rc = recv_reply(s, REPLY_TIMEOUT_MS, rep);
        wf_status_t want = k == 0 ? WF_E_BAD_ARGUMENT : WF_E_BAD_FIELD;
        CHECK(rc == 0 && rep->id == 600 + (uint64_t)k && rep->op == WF_OP_END_SESSION &&
              rep->status == want, "end_session %d: status %d (%s), expected %d", k,
              rep->status, rep->error, want);
        printf("  end_session %s: status %d (%s)\n", k == 0 ? "of a session never opened"
                                                          : "without args", rep->status,
               rep->error);
    }
    wf_buf_free(&b);
    free(req);
    free(rep);
    zmq_close(s);
}

/* ---- 3, 4, 5: the mesh rules of attention ---------------------------------- */

/* Attention with Sq = Skv = s, Hq = Hkv = h, D 8 into out (caller frees
 * out.data); its status. */
static wf_status_t attn_out(wf_client_t *c, int64_t s, int64_t h, const wf_attention_opts_t *o,
                            wf_tensor_t *out)
{
    wf_tensor_t q = t4(1, s, h, 8), k = t4(1, s, h, 8), v = t4(1, s, h, 8);
    /* k, v differ from q: a different fill */
    float *kp = k.data, *vp = v.data;
    for (int64_t i = 0; i < s * h * 8; i++) {
        kp[i] = (float)((i * 11) % 13) / 13.0f - 0.4f;
        vp[i] = (float)((i * 5) % 7) / 7.0f - 0.3f;
    }
    *out = t4(1, s, h, 8);
    wf_status_t st = wf_attention(c, &q, &k, &v, o, out, NULL, NULL);
    free(q.data);
    free(k.data);
    free(v.data);
    return st;
}

static double max_diff(const wf_tensor_t *a, const wf_tensor_t *b)
{
    int64_t n = wf_tensor_numel(a);
    const float *x = a->data, *y = b->data;
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] > y[i] ? x[i] - y[i] : y[i] - x[i];
        m = d > m ? d : m;
    }
    return m;
}

/* Heads not divisible by tp (3 heads, tp 2): split unevenly on every
 * mesh (2 + 1), with the result of one device. */
static void uneven_tp(wf_client_t *c, const char *mesh, const wf_tensor_t *ref, int64_t s,
                      int64_t h, const wf_attention_opts_t *o)
{
    wf_tensor_t out;
    wf_status_t st = attn_out(c, s, h, o, &out);
    double d = st == WF_OK ? max_diff(&out, ref) : -1;
    CHECK(st == WF_OK && d < 1e-5, "%s, %lld heads: %s %s, max diff %g", mesh,
          (long long)h, wf_status_name(st), wf_client_last_error(c), d);
    printf("  %s, %lld heads, S %lld: %s, max |diff| to one device %.3g\n", mesh,
           (long long)h, (long long)s, wf_status_name(st), d);
    free(out.data);
}

static void test_mesh_rules(wf_client_t *c)
{
    char msg[512];
    wf_attention_opts_t o;
    uint32_t used = 0;
    wf_status_t st;

    /* references on one device (dp 4) */
    wf_tensor_t ref3, ref5;
    memset(&o, 0, sizeof o);
    if (!set_mesh(c, 4, 1, 1, 1))
        return;
    st = attn_out(c, 8, 3, &o, &ref3);
    CHECK(st == WF_OK, "reference, 3 heads: %s", wf_status_name(st));
    st = attn_out(c, 8, 5, &o, &ref5);
    CHECK(st == WF_OK, "reference, 5 heads: %s", wf_status_name(st));

    /* head split: dp 2 x tp 2 */
    if (set_mesh(c, 2, 1, 1, 2)) {
        memset(&o, 0, sizeof o);
        uneven_tp(c, "dp2 x tp2", &ref3, 8, 3, &o);
        st = attn(c, 4, 2, &o, &used, msg, sizeof msg);
        CHECK(st == WF_OK && used == 2, "tp 2, 2 heads: %s %u '%s'", wf_status_name(st),
              used, msg);
        /* devices narrows the head split there */
        o.devices = 1;
        st = attn(c, 4, 2, &o, &used, msg, sizeof msg);
        CHECK(st == WF_OK && used == 1, "tp 2, devices 1: %s, %u devices", wf_status_name(st),
              used);
        /* fewer heads than tp ranks: the job uses as many ranks as heads */
        o.devices = 0;
        st = attn(c, 4, 1, &o, &used, msg, sizeof msg);
        CHECK(st == WF_OK && used == 1, "tp 2, 1 head: %s, %u devices", wf_status_name(st),
              used);
    }
    /* ring 2 x tp 2 */
    if (set_mesh(c, 1, 2, 1, 2)) {
        memset(&o, 0, sizeof o);
        uneven_tp(c, "ring2 x tp2", &ref3, 8, 3, &o);
        st = attn(c, 4, 2, &o, &used, msg, sizeof msg);
        CHECK(st == WF_OK && used == 4, "ring 2 x tp 2, 2 heads: %s %u '%s'",
              wf_status_name(st), used, msg);
        /* a tp slice cannot be empty where every rank runs */
        st = attn(c, 4, 1, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "at least one head"),
              "ring 2 x tp 2, 1 head: %s '%s'", wf_status_name(st), msg);
        printf("  ring2 x tp2, 1 head: %s: %s\n", wf_status_name(st), msg);
        o.devices = 2;
        st = attn(c, 4, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "devices"),
              "ring mesh, devices 2: %s '%s'", wf_status_name(st), msg);
        printf("  ring2 x tp2, devices 2: %s: %s\n", wf_status_name(st), msg);
    }
    /* ulysses 2 x tp 2, 5 heads: slices of 3 and 2, neither all divisible
     * by ulysses 2 without ulysses_anything */
    if (set_mesh(c, 1, 1, 2, 2)) {
        memset(&o, 0, sizeof o);
        o.ulysses_anything = WF_OPT_OFF;
        st = attn(c, 8, 5, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "ulysses"),
              "ulysses 2 x tp 2, 5 heads: %s '%s'", wf_status_name(st), msg);
        printf("  ulysses2 x tp2, 5 heads: %s: %s\n", wf_status_name(st), msg);
        o.ulysses_anything = WF_OPT_ON;
        uneven_tp(c, "ulysses2 x tp2 (ulysses_anything)", &ref5, 8, 5, &o);
    }
    free(ref3.data);
    free(ref5.data);
    /* Ulysses only (dp 2 x ulysses 2), Sq = Skv = 5, 2 heads */
    if (set_mesh(c, 2, 1, 2, 1)) {
        memset(&o, 0, sizeof o);
        o.devices = 1;
        st = attn(c, 4, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT, "ulysses mesh, devices 1: %s", wf_status_name(st));
        memset(&o, 0, sizeof o);
        o.ring_anything = WF_OPT_OFF;
        o.ulysses_anything = WF_OPT_OFF;
        st = attn(c, 5, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "set ulysses_anything"),
              "ulysses mesh, S 5: %s '%s'", wf_status_name(st), msg);
        printf("  ulysses2, S 5: %s: %s\n", wf_status_name(st), msg);
        o.ring_anything = WF_OPT_ON;
        st = attn(c, 5, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_OK, "ulysses mesh, S 5, ring_anything: %s '%s'", wf_status_name(st),
              msg);
        o.ring_anything = WF_OPT_OFF;
        o.ulysses_anything = WF_OPT_ON;
        st = attn(c, 5, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_OK, "ulysses mesh, S 5, ulysses_anything: %s '%s'",
              wf_status_name(st), msg);
    }
    /* ring only (dp 2 x ring 2) */
    if (set_mesh(c, 2, 2, 1, 1)) {
        memset(&o, 0, sizeof o);
        o.ring_anything = WF_OPT_OFF;
        o.ulysses_anything = WF_OPT_ON;
        st = attn(c, 5, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "set ring_anything") &&
              !strstr(msg, "ulysses_anything"),
              "ring mesh, S 5, ulysses_anything: %s '%s'", wf_status_name(st), msg);
        printf("  ring2, S 5, ulysses_anything only: %s: %s\n", wf_status_name(st), msg);
        o.ring_anything = WF_OPT_ON;
        st = attn(c, 5, 2, &o, NULL, msg, sizeof msg);
        CHECK(st == WF_OK, "ring mesh, S 5, ring_anything: %s '%s'", wf_status_name(st),
              msg);
    }
}

/* ---- 6: forward against the mesh -------------------------------------------- */

/* flux-tiny (tests/fixtures/README): in_channels 16, joint_attention_dim
 * 32, pooled_projection_dim 16, 3 rope axes. Zero inputs: only the
 * shapes matter here. */
static wf_status_t forward_simg(wf_client_t *c, int64_t s_img, int64_t chans, char *msg,
                                size_t msg_len)
{
    float *z = calloc(4096, sizeof *z);
    wf_tensor_t hs = { z, WF_DTYPE_F32, 3, { 1, s_img, chans } };
    wf_tensor_t enc = { z, WF_DTYPE_F32, 3, { 1, 8, 32 } };
    wf_tensor_t pooled = { z, WF_DTYPE_F32, 2, { 1, 16 } };
    wf_tensor_t t = { z, WF_DTYPE_F32, 1, { 1 } };
    wf_tensor_t img = { z, WF_DTYPE_F32, 2, { s_img, 3 } };
    wf_tensor_t txt = { z, WF_DTYPE_F32, 2, { 8, 3 } };
    float *o = calloc((size_t)s_img * 16, sizeof *o);
    wf_tensor_t out = { o, WF_DTYPE_F32, 3, { 1, s_img, 16 } };
    wf_flux_inputs_t in = { &hs, &enc, &pooled, &t, &img, &txt, NULL };
    wf_status_t st = wf_forward(c, "tiny", &in, &out, NULL);
    snprintf(msg, msg_len, "%s", st == WF_OK ? "" : wf_client_last_error(c));
    free(z);
    free(o);
    return st;
}

static void test_forward(wf_client_t *c)
{
    char msg[512];
    if (!set_mesh(c, 4, 1, 1, 1))
        return;
    wf_status_t st = wf_load_model(c, "tiny", "flux-tiny", NULL, NULL);
    CHECK(st == WF_OK, "load flux-tiny: %s %s", wf_status_name(st), wf_client_last_error(c));
    if (st != WF_OK)
        return;
    if (set_mesh(c, 2, 2, 1, 1)) {
        /* 15 image tokens (23 joint) over 2 seq ranks: uneven shards */
        st = forward_simg(c, 15, 16, msg, sizeof msg);
        CHECK(st == WF_OK, "forward S_img 15 on ring 2: %s '%s'", wf_status_name(st), msg);
        printf("  forward S_img 15, ring 2: %s\n", wf_status_name(st));
        st = forward_simg(c, 16, 16, msg, sizeof msg);
        CHECK(st == WF_OK, "forward S_img 16 on ring 2: %s '%s'", wf_status_name(st), msg);
    }
    /* inputs that do not fit the model's config: 9 too (section 6, "7 or 9") */
    st = forward_simg(c, 16, 12, msg, sizeof msg);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(msg, "in_channels"),
          "forward with 12 channels: %s '%s'", wf_status_name(st), msg);
    printf("  forward with 12 channels: %s: %s\n", wf_status_name(st), msg);
    if (set_mesh(c, 2, 1, 2, 1)) {
        st = forward_simg(c, 15, 16, msg, sizeof msg);
        CHECK(st == WF_OK, "forward S_img 15 on ulysses 2: %s '%s'", wf_status_name(st), msg);
    }
    wf_unload_model(c, "tiny");
}

/* ---- 7: the end of a SIGTERM drain --------------------------------------------- */

#define DRAIN_WINDOW 32       /* requests in flight at most */
#define DRAIN_MAX 100000      /* ids 1..DRAIN_MAX */

/* Whether the file at path holds needle; the number after it in *ret_n
 * when ret_n is not NULL. */
static bool log_has(const char *path, const char *needle, unsigned *ret_n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, needle);
        if (p) {
            found = true;
            if (ret_n)
                *ret_n = (unsigned)strtoul(p + strlen(needle), NULL, 10);
        }
    }
    fclose(f);
    return found;
}

/* A client keeps DRAIN_WINDOW small attention jobs in flight on one
 * connection, sending the next as each reply comes; SIGTERM lands once
 * DRAIN_SIGNAL replies have come. It goes on the same way after the
 * first WF_E_SHUTTING_DOWN, through the drain and its tail, until the
 * daemon closes the connection (the monitor's DISCONNECTED): so requests
 * are always on their way when the drain ends and when the daemon stops
 * reading. Section 1's promise is checked against the daemon's own
 * count: every request it read got exactly one reply (the client got as
 * many replies as the daemon says it read and wrote, none twice, none
 * stray), the rest were never read, and the tail answered some. */
#define DRAIN_SIGNAL 200

static void test_drain(const char *weftd)
{
    char endpoint[96], log_path[96], mon_ep[64];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-conform-drain-%d.sock",
             (int)getpid());
    snprintf(log_path, sizeof log_path, "/tmp/weft-conform-drain-%d.log", (int)getpid());
    snprintf(mon_ep, sizeof mon_ep, "inproc://conform-drain-%d", (int)getpid());
    /* one client keeps DRAIN_WINDOW jobs in flight: its share is the
     * whole queue (client_queue_jobs), so every reply is OK or 22 */
    const char *argv[] = { weftd, "--devices", "cpu:2", "--listen", endpoint,
                           "--log-level", "info", "--client-queue-jobs", "64",
                           NULL };
    spawn_opts_t so = { .log_path = log_path };
    pid_t pid = 0;
    int pidfd = -1;
    bool started = spawn_exec(argv, &so, &pid, &pidfd);
    CHECK(started && wait_ready(endpoint), "drain: weftd did not start");
    if (!started)
        return;
    void *zctx = zmq_ctx_new();
    void *s = dealer(zctx, endpoint);
    zmq_socket_monitor(s, mon_ep, ZMQ_EVENT_DISCONNECTED);
    void *mon = zmq_socket(zctx, ZMQ_PAIR);
    zmq_connect(mon, mon_ep);
    unsigned char *answered = calloc(DRAIN_MAX + 1, 1);
    /* q, k, v (1, 4, 2, 8) f32 */
    wf_request_t *req = calloc(1, sizeof *req);
    wf_reply_t *rep = calloc(1, sizeof *rep);
    req->version = 1;
    req->op = WF_OP_ATTENTION;
    req->n_tensors = 3;
    const char *names[3] = { "q", "k", "v" };
    for (int i = 0; i < 3; i++) {
        wf_tensor_desc_t *d = &req->tensors[i];
        snprintf(d->name, sizeof d->name, "%s", names[i]);
        d->dtype = WF_DTYPE_F32;
        d->rank = 4;
        d->shape[0] = 1; d->shape[1] = 4; d->shape[2] = 2; d->shape[3] = 8;
        d->frame = (uint32_t)i;
        wf_tensor_desc_finish(d);
    }
    req->args.attention.q = 0;
    req->args.attention.k = 1;
    req->args.attention.v = 2;
    float data[64];
    for (int i = 0; i < 64; i++)
        data[i] = (float)i / 64.0f;
    wf_buf_t b = { 0 };

    uint64_t sent = 0, replies = 0, dup = 0, stray = 0, refused = 0, ok = 0;
    bool signalled = false, closed = false;
    uint64_t end = wait_now_ms() + wait_bound_ms(WAIT_EVENT_MS);
    while (!closed && wait_now_ms() < end) {
        while (sent - replies < DRAIN_WINDOW && sent < DRAIN_MAX) {
            req->id = ++sent;
            wf_buf_reset(&b);
            wf_request_encode(req, &b);
            zmq_send(s, b.data, b.len, ZMQ_SNDMORE);
            zmq_send(s, data, sizeof data, ZMQ_SNDMORE);
            zmq_send(s, data, sizeof data, ZMQ_SNDMORE);
            zmq_send(s, data, sizeof data, 0);
        }
        if (!signalled && replies >= DRAIN_SIGNAL) {
            kill(pid, SIGTERM);
            signalled = true;
        }
        zmq_pollitem_t it[2] = { { s, 0, ZMQ_POLLIN, 0 }, { mon, 0, ZMQ_POLLIN, 0 } };
        if (zmq_poll(it, 2, 100) <= 0)
            continue;
        if (it[1].revents & ZMQ_POLLIN) {
            /* the event frame, then the endpoint frame */
            zmq_msg_t m;
            int more = 1;
            while (more) {
                zmq_msg_init(&m);
                zmq_msg_recv(&m, mon, 0);
                more = zmq_msg_more(&m);
                zmq_msg_close(&m);
            }
            closed = true;
        }
        /* every reply the daemon wrote before its close is in the socket
         * by the time the close is seen: take them all */
        memset(rep, 0, sizeof *rep);
        while (recv_reply(s, 0, rep) == 0) {
            if (rep->id == 0 || rep->id > sent) {
                stray++;
            } else if (answered[rep->id]++) {
                dup++;
            } else {
                replies++;
                refused += rep->status == WF_E_SHUTTING_DOWN;
                ok += rep->status == WF_OK;
            }
            memset(rep, 0, sizeof *rep);
            if (!closed)
                break;
        }
    }
    /* it closed every connection: its exit needs nothing more */
    int wst = 0;
    bool reaped = spawn_reap(pid, pidfd, SPAWN_STOP_MS, &wst);
    if (!reaped)
        spawn_signal_reap(pid, pidfd, SIGKILL, SPAWN_STOP_MS, "weftd", &wst, NULL);
    if (pidfd >= 0)
        close(pidfd);
    CHECK(reaped && WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
          "drain: weftd did not exit 0 after SIGTERM (status %#x)", wst);
    unsigned read_n = 0, written = 0, unanswered = 0;
    /* logged only when the tail answered at least one */
    bool tail = log_has(log_path, "request(s) that arrived at the end of the drain", NULL);
    bool counted = log_has(log_path, "every connection closed: ", &read_n);
    log_has(log_path, "requests read since the start, ", &written);
    log_has(log_path, "replies written, ", &unanswered);
    printf("  drain: %llu sent, %llu replies (%llu ok, %llu shutting down), %llu never "
           "read, %llu duplicated; the daemon read %u, wrote %u, answered %s after "
           "its drain\n",
           (unsigned long long)sent, (unsigned long long)replies, (unsigned long long)ok,
           (unsigned long long)refused, (unsigned long long)(sent - replies),
           (unsigned long long)dup, read_n, written, tail ? "some" : "none");
    CHECK(closed, "drain: the daemon never closed the connection");
    CHECK(signalled && refused > 0, "drain: no WF_E_SHUTTING_DOWN reply seen");
    CHECK(ok + refused == replies, "drain: %llu replies neither OK nor shutting down",
          (unsigned long long)(replies - ok - refused));
    CHECK(dup == 0 && stray == 0, "drain: %llu replies twice, %llu stray",
          (unsigned long long)dup, (unsigned long long)stray);
    /* the daemon's count includes wait_ready's hello on its own connection */
    CHECK(counted && read_n == replies + 1 && written == read_n && unanswered == 0,
          "drain: the daemon read %u requests and wrote %u replies (%u unanswered); "
          "the client got %llu", read_n, written, unanswered,
          (unsigned long long)replies);
    CHECK(tail, "drain: no request answered after the drain");
    unlink(log_path);
    wf_buf_free(&b);
    free(req);
    free(rep);
    free(answered);
    /* the monitor is stopped before its reader closes: ZeroMQ's I/O
     * thread would block for good on an event sent to a closed reader */
    zmq_socket_monitor(s, NULL, 0);
    zmq_close(mon);
    zmq_close(s);
    zmq_ctx_term(zctx);
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

    char endpoint[96];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-conform-%d.sock", (int)getpid());
    const char *args[] = { weftd, "--devices", "cpu:4", "--mesh", "dp=4", "--listen",
                           endpoint, "--model-root", fixtures, "--log-level", "warning",
                           NULL };
    pid_t pid = spawn_daemon(args, NULL);
    if (pid <= 0 || !wait_ready(endpoint)) {
        fprintf(stderr, "weftd did not start\n");
        return 1;
    }
    void *zctx = zmq_ctx_new();
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(endpoint, 60000, &c);
    CHECK(st == WF_OK, "connect: %s", wf_status_name(st));
    if (st == WF_OK) {
        printf("hello and the op echo\n");
        test_hello(c, zctx, endpoint);
        test_worked_example(zctx, endpoint);
        printf("mesh rules\n");
        test_mesh_rules(c);
        printf("forward\n");
        test_forward(c);
    }
    wf_client_destroy(&c);
    zmq_ctx_term(zctx);
    char err[256] = "";
    CHECK(stop_daemon(pid, 30000, err, sizeof err), "weftd: %s", err);

    printf("SIGTERM drain\n");
    test_drain(weftd);

    if (failed) {
        fprintf(stderr, "%d failure(s)\n", failed);
        return 1;
    }
    printf("conform: all passed\n");
    return 0;
}
