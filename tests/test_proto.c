/* test_proto.c — the wire codec (proto/) on its own: round trips of every
 * op and dtype, every prevalidate rule, every request error code, frame
 * checks and the tolerant reply decoder; the resident-model ops
 * (load_model, unload_model, list_models, forward) with each refusal.
 *
 * Plain checks that print the failing case; the exit status is the number
 * of failures (capped), so CTest sees any of them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "proto_check.h"
#include "fuzz/mp_build.h"

static int failures;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            failures++;                                                    \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static msgpack_sbuffer sb;
#define B() msgpack_sbuffer_clear(&sb)

static const int64_t SQ[4] = { 2, 5, 4, 8 };   /* q (B, Sq, Hq, D) */
static const int64_t SKV[4] = { 2, 7, 2, 8 };  /* k, v (B, Skv, Hkv, D) */

/* Decode sb as a request and check code, echoed id and a message part. */
static void expect_req_lim(const char *what, const wf_limits_t *lim, wf_status_t want,
                           uint64_t want_id, const char *substr)
{
    wf_request_t req;
    char err[WF_PROTO_ERROR_MAX];
    wf_status_t rc = wf_request_decode(sb.data, sb.size, lim, &req, err, sizeof(err));
    CHECK(rc == want, "%s: got %s, want %s (%s)", what, wf_status_name(rc),
          wf_status_name(want), err);
    CHECK(req.id == want_id, "%s: echoed id %llu, want %llu", what,
          (unsigned long long)req.id, (unsigned long long)want_id);
    if (want != WF_OK)
        CHECK(err[0] != '\0', "%s: no error message", what);
    if (substr)
        CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err,
              substr);
}

static void expect_req(const char *what, wf_status_t want, uint64_t want_id,
                       const char *substr)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    expect_req_lim(what, &lim, want, want_id, substr);
}

/* {v:1, id, op:3, tensors:[q, k, v], "args": <caller writes the value>} */
static void attn_prefix(uint64_t id, const int64_t *qs, const int64_t *ks,
                        const int64_t *vs)
{
    mpb(&sb, "M5 si sU si s A3", "v", 1, "id", id, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, qs, 0);
    mpb_tensor(&sb, "k", "f32", 4, ks, 1);
    mpb_tensor(&sb, "v", "f32", 4, vs, 2);
    mpb(&sb, "s", "args");
}

static void test_round_trip_requests(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];

    for (uint32_t op = WF_OP_HELLO; op <= WF_OP_STATUS; op++) {
        wf_request_t r = { .version = 1, .id = 0xfedcba9876543210ull, .op = op }, d;
        wf_buf_reset(&buf);
        CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode op %u", op);
        wf_status_t rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.id == r.id && d.op == op && d.version == 1 && d.n_tensors == 0,
              "round trip op %u: %s %s", op, wf_status_name(rc), err);
    }
    /* attention: every dtype for q/k/v and out, both flag values, GQA,
     * tensors listed in a permuted frame order */
    for (int dq = 0; dq < 3; dq++)
        for (int dkv = 0; dkv < 3; dkv++)
            for (int dout = -1; dout < 3; dout++) {
                wf_request_t r, d;
                memset(&r, 0, sizeof(r));
                r.version = 1;
                r.id = (uint64_t)(dq * 100 + dkv * 10 + dout + 1);
                r.op = WF_OP_ATTENTION;
                r.n_tensors = 3;
                const char *names[3] = { "k", "q", "v" };
                const uint32_t frames[3] = { 2, 0, 1 };
                for (int i = 0; i < 3; i++) {
                    wf_tensor_desc_t *t = &r.tensors[i];
                    snprintf(t->name, sizeof(t->name), "%s", names[i]);
                    t->dtype = (wf_dtype_t)(i == 1 ? dq : dkv);
                    t->rank = 4;
                    memcpy(t->shape, i == 1 ? SQ : SKV, sizeof(SQ));
                    t->frame = frames[i];
                }
                wf_attention_args_t *a = &r.args.attention;
                a->has_scale = dout != 0;
                a->scale = 0.125f;
                a->causal = dq & 1;
                a->return_lse = dkv & 1;
                a->has_out_dtype = dout >= 0;
                a->out_dtype = (wf_dtype_t)(dout >= 0 ? dout : 0);
                a->devices = (uint32_t)dkv;
                wf_buf_reset(&buf);
                CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode attention");
                wf_status_t rc = wf_request_decode(buf.data, buf.len, &lim, &d, err,
                                                   sizeof(err));
                CHECK(rc == WF_OK, "attention %d/%d/%d: %s %s", dq, dkv, dout,
                      wf_status_name(rc), err);
                if (rc != WF_OK)
                    continue;
                const wf_attention_args_t *b = &d.args.attention;
                CHECK(d.id == r.id && d.op == WF_OP_ATTENTION && d.n_tensors == 3,
                      "attention header fields");
                CHECK(b->q == 1 && b->k == 0 && b->v == 2, "q/k/v indices %d %d %d", b->q,
                      b->k, b->v);
                CHECK(b->has_scale == a->has_scale && (!a->has_scale || b->scale == 0.125f) &&
                      b->causal == a->causal && b->return_lse == a->return_lse &&
                      b->has_out_dtype == a->has_out_dtype &&
                      (!a->has_out_dtype || b->out_dtype == a->out_dtype) &&
                      b->devices == a->devices, "attention args %d/%d/%d", dq, dkv, dout);
                for (int i = 0; i < 3; i++) {
                    const wf_tensor_desc_t *t = &d.tensors[i];
                    const int64_t *s = i == 1 ? SQ : SKV;
                    size_t es = wf_dtype_size(r.tensors[i].dtype);
                    CHECK(strcmp(t->name, names[i]) == 0 && t->dtype == r.tensors[i].dtype &&
                          t->rank == 4 && memcmp(t->shape, s, sizeof(SQ)) == 0 &&
                          t->frame == frames[i] &&
                          t->numel == (uint64_t)(s[0] * s[1] * s[2] * s[3]) &&
                          t->nbytes == t->numel * es,
                          "tensor %d of %d/%d/%d", i, dq, dkv, dout);
                }
            }
    /* what the encoder refuses */
    wf_request_t bad = { .version = 1, .op = WF_OP_ATTENTION, .n_tensors = 1 };
    bad.tensors[0].rank = 1;
    bad.tensors[0].shape[0] = 1;
    CHECK(wf_request_encode(&bad, &buf) == WF_E_BAD_ARGUMENT, "encode nameless tensor");
    bad.n_tensors = 2;
    bad.tensors[1] = bad.tensors[0];
    strcpy(bad.tensors[0].name, "a");
    strcpy(bad.tensors[1].name, "b");
    CHECK(wf_request_encode(&bad, &buf) == WF_E_BAD_ARGUMENT, "encode frame 0 twice");
    bad.tensors[1].frame = 1;
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&bad, &buf) == WF_OK, "encode frames 0, 1");
    bad.n_tensors = WF_PROTO_MAX_TENSORS + 1;
    CHECK(wf_request_encode(&bad, &buf) == WF_E_BAD_ARGUMENT, "encode too many tensors");
    wf_buf_free(&buf);
    wf_buf_free(&buf); /* twice: must be harmless */
}

static void test_round_trip_replies(void)
{
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    wf_reply_t r, d;

    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 42; r.op = WF_OP_HELLO; r.epoch = 3;
    wf_hello_info_t *h = &r.result.hello;
    h->protocol = 1; strcpy(h->weft_version, "0.1.0"); strcpy(h->backend, "cpu");
    h->devices = 4; h->max_header_bytes = 65536; h->max_tensor_bytes = 1ull << 32;
    h->max_tensors = 16;
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode hello reply");
    wf_status_t rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.id == 42 && d.op == WF_OP_HELLO && d.status == WF_OK &&
          d.epoch == 3 && d.error[0] == '\0' && memcmp(&d.result.hello, h, sizeof(*h)) == 0,
          "hello reply round trip: %s %s", wf_status_name(rc), err);

    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 43; r.op = WF_OP_STATUS; r.epoch = 9;
    wf_status_info_t *s = &r.result.status;
    strcpy(s->weft_version, "0.1.0"); strcpy(s->backend, "cpu");
    s->epoch = 9; s->uptime_ms = 123456; s->queue_depth = 2; s->queue_capacity = 64;
    s->in_flight = 1; s->jobs_served = 1000; s->jobs_failed = 3; s->requests_rejected = 77;
    s->rss_bytes = 1ull << 30; s->device_count = WF_STATUS_MAX_DEVICES;
    s->mesh = (wf_mesh_degrees_t){ 2, 4, 2, 4 }; s->reconfiguring = 1;
    for (uint32_t i = 0; i < WF_STATUS_MAX_DEVICES; i++) {
        s->devices[i].index = i;
        snprintf(s->devices[i].name, sizeof(s->devices[i].name), "cpu:%u", i);
        s->devices[i].memory_total = 1ull << 33;
        s->devices[i].memory_used = i * 1000;
        s->devices[i].jobs_served = i * 7;
        s->devices[i].busy = i & 1;
        s->devices[i].rank = 63 - i;
        for (uint32_t k = 0; k < 4; k++)
            s->devices[i].coords[k] = (i >> (2 * k)) & 3;
    }
    wf_buf_reset(&buf);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode status reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.id == 43 && d.epoch == 9 &&
          memcmp(&d.result.status, s, sizeof(*s)) == 0,
          "status reply round trip (64 devices): %s %s", wf_status_name(rc), err);

    for (int dt = 0; dt < 3; dt++) {
        memset(&r, 0, sizeof(r));
        r.version = 1; r.id = 44 + (uint64_t)dt; r.op = WF_OP_ATTENTION; r.epoch = 1;
        r.n_tensors = 2;
        strcpy(r.tensors[0].name, "out");
        r.tensors[0].dtype = (wf_dtype_t)dt; r.tensors[0].rank = 4;
        memcpy(r.tensors[0].shape, SQ, sizeof(SQ)); r.tensors[0].frame = 0;
        strcpy(r.tensors[1].name, "lse");
        r.tensors[1].dtype = WF_DTYPE_F32; r.tensors[1].rank = 3;
        memcpy(r.tensors[1].shape, SQ, 3 * sizeof(int64_t)); r.tensors[1].frame = 1;
        r.result.attention.queue_us = 12; r.result.attention.compute_us = 3400;
        r.result.attention.devices = 2;
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode attention reply");
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.n_tensors == 2 && d.tensors[0].dtype == (wf_dtype_t)dt &&
              d.tensors[0].nbytes == 2 * 5 * 4 * 8 * wf_dtype_size((wf_dtype_t)dt) &&
              strcmp(d.tensors[1].name, "lse") == 0 && d.tensors[1].rank == 3 &&
              d.tensors[1].nbytes == 2 * 5 * 4 * 4 &&
              d.result.attention.queue_us == 12 && d.result.attention.compute_us == 3400 &&
              d.result.attention.devices == 2,
              "attention reply round trip dtype %d: %s %s", dt, wf_status_name(rc), err);
    }

    /* error reply: message travels, result does not */
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 50; r.op = WF_OP_ATTENTION; r.status = WF_E_BAD_SHAPE;
    strcpy(r.error, "tensors[1].shape[2]: dim must be > 0, got -3");
    wf_buf_reset(&buf);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode error reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.status == WF_E_BAD_SHAPE && d.id == 50 &&
          strcmp(d.error, r.error) == 0, "error reply round trip: %s", err);
    /* an error reply without a message gets the status text */
    r.error[0] = '\0';
    wf_buf_reset(&buf);
    wf_reply_encode(&r, &buf);
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && strcmp(d.error, wf_status_str(WF_E_BAD_SHAPE)) == 0,
          "error reply default message \"%s\"", d.error);

    /* a successful load_model reply must carry its model (PROTOCOL.md
     * 12.2; found by fuzz_proto) */
    B();
    mpb(&sb, "M4 si si si si", "v", 1, "id", 8, "op", 5, "status", 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "load_model"),
          "load_model reply without result: %s (%s)", wf_status_name(rc), err);

    /* tolerance: unknown keys at every level are skipped */
    B();
    mpb(&sb, "M7 si si si si si s M2 s A2 M3 ss si sb M1 si si s M0",
        "v", 1, "id", 7, "op", 2, "status", 0, "future_key", 5,
        "result", "devices", "index", "cpu:0", "new", 1, "another", 1, "x", 1,
        "queue_depth", 3, "extra");
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    /* devices[0].index is a str: that is a type error, not an unknown key */
    CHECK(rc == WF_E_PROTOCOL, "reply with wrongly typed device index: %s", wf_status_name(rc));
    B();
    mpb(&sb, "M6 si si si si si s M3 sA1 M2 si sb si si", "v", 1, "id", 7, "op", 2,
        "status", 0, "future_key", 5, "result", "devices", "index", 5, "new", 1,
        "queue_depth", 3, "zz", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.status.queue_depth == 3 && d.result.status.device_count == 1 &&
          d.result.status.devices[0].index == 5, "tolerant reply: %s %s", wf_status_name(rc),
          err);
    B();
    mpb(&sb, "M4 si si si si", "v", 2, "id", 7, "op", 1, "status", 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_VERSION && d.id == 7, "reply v=2: %s", wf_status_name(rc));
    B();
    mpb(&sb, "M3 si si si", "v", 1, "id", 7, "op", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && d.id == 7, "reply without status: %s", wf_status_name(rc));
    static const unsigned char junk[] = { 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00 };
    rc = wf_reply_decode(junk, sizeof(junk), &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL, "reply of junk: %s", wf_status_name(rc));
    wf_buf_free(&buf);
}

/* prevalidate alone, on raw bytes */
static void expect_pre(const char *what, const void *p, size_t n, const wf_limits_t *lim,
                       wf_status_t want)
{
    char err[WF_PROTO_ERROR_MAX];
    wf_status_t rc = wf_msgpack_prevalidate(p, n, lim, err, sizeof(err));
    CHECK(rc == want, "prevalidate %s: got %s, want %s (%s)", what, wf_status_name(rc),
          wf_status_name(want), err);
}

static void test_prevalidate(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);

    /* one of every msgpack type, in an array of a map so both nest */
    static const unsigned char every[] = {
        0x81, 0xa1, 'x', 0xdc, 0x00, 37,            /* {x: array16 of 37} */
        0x05, 0xe0, 0xc0, 0xc2, 0xc3,               /* fixint, -32, nil, false, true */
        0xcc, 0xff, 0xcd, 0xff, 0xff, 0xce, 0, 0, 0, 1, 0xcf, 0, 0, 0, 0, 0, 0, 0, 1,
        0xd0, 0x80, 0xd1, 0x80, 0, 0xd2, 0x80, 0, 0, 0, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0,
        0xca, 0x3f, 0x80, 0, 0, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0,
        0xa2, 'h', 'i', 0xd9, 1, 'a', 0xda, 0, 1, 'b', 0xdb, 0, 0, 0, 1, 'c',
        0xc4, 1, 0x00, 0xc5, 0, 1, 0x00, 0xc6, 0, 0, 0, 1, 0x00,
        0xc7, 1, 5, 0x00, 0xc8, 0, 1, 5, 0x00, 0xc9, 0, 0, 0, 1, 5, 0x00,
        0xd4, 5, 1, 0xd5, 5, 1, 2, 0xd6, 5, 1, 2, 3, 4, 0xd7, 5, 1, 2, 3, 4, 5, 6, 7, 8,
        0xd8, 5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
        0x90, 0x80, 0xdc, 0, 1, 0x01, 0xdd, 0, 0, 0, 1, 0x01,
        0xde, 0, 1, 0x01, 0x02, 0xdf, 0, 0, 0, 1, 0x01, 0x02,
        0x91, 0x81, 0x01, 0x91, 0x07,               /* nested: depth 5 in all */
    };
    expect_pre("every type", every, sizeof(every), &lim, WF_OK);
    /* msgpack-c agrees that it is one object */
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    CHECK(msgpack_unpack_next(&up, (const char *)every, sizeof(every), &off) ==
          MSGPACK_UNPACK_SUCCESS && off == sizeof(every), "msgpack-c on every type");
    msgpack_unpacked_destroy(&up);
    for (size_t n = 0; n < sizeof(every); n++)
        expect_pre("every type, truncated", every, n, &lim, WF_E_MALFORMED);

    unsigned char trailing[sizeof(every) + 1];
    memcpy(trailing, every, sizeof(every));
    trailing[sizeof(every)] = 0xc0;
    expect_pre("trailing byte", trailing, sizeof(trailing), &lim, WF_E_MALFORMED);
    static const unsigned char two[] = { 0x01, 0x02 };
    expect_pre("two objects", two, 2, &lim, WF_E_MALFORMED);
    static const unsigned char c1[] = { 0x91, 0xc1 };
    expect_pre("0xc1", c1, 2, &lim, WF_E_MALFORMED);
    expect_pre("empty", "", 0, &lim, WF_E_MALFORMED);

    /* declared counts and lengths far beyond the bytes */
    static const unsigned char arr32[] = { 0xdd, 0x80, 0, 0, 0, 1, 2, 3, 4, 5 };
    expect_pre("array32 of 2^31 in 10 bytes", arr32, sizeof(arr32), &lim, WF_E_MALFORMED);
    static const unsigned char arr16[] = { 0xdc, 0xff, 0xff, 1 };
    expect_pre("array16 of 65535 in 4 bytes", arr16, sizeof(arr16), &lim, WF_E_MALFORMED);
    static const unsigned char map32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 1, 2 };
    expect_pre("map32 of 2^32-1", map32, sizeof(map32), &lim, WF_E_MALFORMED);
    static const unsigned char map16[] = { 0xde, 0, 3, 1, 2, 3, 4, 5 };
    expect_pre("map16 of 3 with 5 bytes", map16, sizeof(map16), &lim, WF_E_MALFORMED);
    /* nested lies: every level fits alone, together they do not */
    static const unsigned char nest[] = { 0x93, 0x93, 0x01, 0x02, 0x03 };
    expect_pre("nested counts exceed bytes", nest, sizeof(nest), &lim, WF_E_MALFORMED);
    static const unsigned char str32[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'a' };
    expect_pre("str32 of 4 GiB", str32, sizeof(str32), &lim, WF_E_LIMIT);
    static const unsigned char bin32[] = { 0xc6, 0x7f, 0xff, 0xff, 0xff, 'a' };
    expect_pre("bin32 of 2 GiB", bin32, sizeof(bin32), &lim, WF_E_LIMIT);
    static const unsigned char ext32[] = { 0xc9, 0xff, 0xff, 0xff, 0xff, 1, 'a' };
    expect_pre("ext32 of 4 GiB", ext32, sizeof(ext32), &lim, WF_E_LIMIT);
    static const unsigned char str8[] = { 0xd9, 200, 'a', 'b' };
    expect_pre("str8 of 200 in 2 bytes", str8, sizeof(str8), &lim, WF_E_MALFORMED);
    static const unsigned char fixstr[] = { 0xbf, 'a' };
    expect_pre("fixstr of 31 in 1 byte", fixstr, sizeof(fixstr), &lim, WF_E_MALFORMED);
    static const unsigned char u64t[] = { 0xcf, 0, 0, 0 };
    expect_pre("uint64 cut", u64t, sizeof(u64t), &lim, WF_E_MALFORMED);

    /* string cap: exactly max_str_bytes is fine, one more is not */
    unsigned char *s = calloc(1, 3 + 1025);
    s[0] = 0xda; s[1] = 0x04; s[2] = 0x00;           /* str16 of 1024 */
    expect_pre("str of max_str_bytes", s, 3 + 1024, &lim, WF_OK);
    s[2] = 0x01;
    expect_pre("str of max_str_bytes + 1", s, 3 + 1025, &lim, WF_E_LIMIT);
    free(s);

    /* depth: 8 nested containers pass, 9 and 40 do not */
    unsigned char deep[41];
    for (int depth = 1; depth <= 40; depth++) {
        for (int i = 0; i < depth; i++)
            deep[i] = 0x91;
        deep[depth] = 0x01;
        expect_pre("depth", deep, (size_t)depth + 1, &lim, depth <= 8 ? WF_OK : WF_E_LIMIT);
        /* an empty innermost container counts as a level too */
        deep[depth - 1] = 0x90;
        expect_pre("depth, empty innermost", deep, (size_t)depth, &lim,
                   depth <= 8 ? WF_OK : WF_E_LIMIT);
    }
    /* the runtime depth is clamped to what msgpack-c can unpack */
    wf_limits_t l2 = lim;
    l2.max_depth = 1000;
    memset(deep, 0x91, 40);
    deep[40] = 0x01;
    expect_pre("depth 40 with max_depth 1000", deep, 41, &l2, WF_E_LIMIT);

    /* element count: 10^5 elements, over the default header size and,
     * with a bigger header allowed, over the element cap */
    size_t n = 100000;
    unsigned char *many = malloc(5 + n);
    many[0] = 0xdd; many[1] = 0; many[2] = 0x01; many[3] = 0x86; many[4] = 0xa0;
    memset(many + 5, 0x01, n);
    expect_pre("10^5 elements, default limits", many, 5 + n, &lim, WF_E_LIMIT);
    l2 = lim;
    l2.max_header_bytes = 1u << 20;
    expect_pre("10^5 elements, 1 MiB header allowed", many, 5 + n, &l2, WF_E_LIMIT);
    l2.max_elements = 100001;
    expect_pre("10^5 elements, allowed", many, 5 + n, &l2, WF_OK);
    l2.max_elements = 100000;
    expect_pre("10^5 + 1 objects, cap 10^5", many, 5 + n, &l2, WF_E_LIMIT);
    free(many);

    /* header size */
    l2 = lim;
    l2.max_header_bytes = 4;
    static const unsigned char five[] = { 0x94, 1, 2, 3, 4 };
    expect_pre("5-byte header, limit 4", five, 5, &l2, WF_E_LIMIT);
    l2.max_header_bytes = 5;
    expect_pre("5-byte header, limit 5", five, 5, &l2, WF_OK);
}

static void test_request_errors(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    int64_t qs[4], ks[4], vs[4];

    /* a good attention request, as the reference for the mutations */
    B(); attn_prefix(11, SQ, SKV, SKV); mpb(&sb, "M3 sd sb sb", "scale", 0.25, "causal", 1,
                                            "return_lse", 1);
    expect_req("good attention", WF_OK, 11, NULL);
    /* every prefix of it is an error, never a crash */
    {
        msgpack_sbuffer keep = sb;
        wf_request_t req;
        for (size_t n = 0; n < keep.size; n++) {
            wf_status_t rc = wf_request_decode(keep.data, n, &lim, &req, NULL, 0);
            CHECK(rc == WF_E_MALFORMED, "good header truncated to %zu of %zu: %s", n,
                  keep.size, wf_status_name(rc));
        }
    }

    /* MALFORMED */
    B(); mpb(&sb, "A4 si si", "v", 1, "id", 1);
    expect_req("header is an array", WF_E_MALFORMED, 0, "map");
    B(); mpb(&sb, "s", "hello");
    expect_req("header is a str", WF_E_MALFORMED, 0, "map");
    B(); mpb(&sb, "M3 si si si i", "v", 1, "id", 5, "op", 1, 7);
    expect_req("trailing bytes", WF_E_MALFORMED, 5, "trailing");

    /* VERSION, checked before anything else; id still echoed */
    B(); mpb(&sb, "M2 si si", "id", 5, "op", 1);
    expect_req("v missing", WF_E_VERSION, 5, "v");
    B(); mpb(&sb, "M3 si si si", "v", 2, "id", 6, "op", 1);
    expect_req("v = 2", WF_E_VERSION, 6, "version 2");
    B(); mpb(&sb, "M3 si si si", "v", 0, "id", 6, "op", 1);
    expect_req("v = 0", WF_E_VERSION, 6, NULL);
    B(); mpb(&sb, "M3 ss si si", "v", "1", "id", 6, "op", 1);
    expect_req("v is a str", WF_E_VERSION, 6, NULL);
    B(); mpb(&sb, "M3 si si si", "v", -1, "id", 6, "op", 1);
    expect_req("v = -1", WF_E_VERSION, 6, NULL);
    B(); mpb(&sb, "M4 si si ss sb", "v", 7, "id", 8, "op", "x", "junk", 1);
    expect_req("v = 7 with other errors", WF_E_VERSION, 8, NULL);

    /* LIMIT, with the id found by the peek */
    B(); mpb(&sb, "M4 si si si s A1A1A1A1A1A1A1A1 i", "v", 1, "id", 77, "op", 1, "deep", 1);
    expect_req("depth 9", WF_E_LIMIT, 77, "nesting");
    B(); mpb(&sb, "M4 si si si s A*", "v", 1, "id", 78, "op", 1, "many", 5000);
    for (int i = 0; i < 5000; i++)
        mpb(&sb, "i", 1);
    expect_req("5000 elements", WF_E_LIMIT, 78, "objects");
    {
        char big[2000];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        B(); mpb(&sb, "M4 si si si ss", "v", 1, "id", 79, "op", 1, "name", big);
        expect_req("string over 1024", WF_E_LIMIT, 79, "string");
    }
    B(); mpb(&sb, "M4 si si si s A*", "v", 1, "id", 80, "op", 1, "pad", 3200);
    for (int i = 0; i < 3200; i++)
        mpb(&sb, "s", "0123456789abcdefghij");
    expect_req("header over 64 KiB", WF_E_LIMIT, 80, "header is");
    B(); mpb(&sb, "M4 si si si sA17", "v", 1, "id", 81, "op", 3, "tensors");
    for (int i = 0; i < 17; i++) {
        char nm[8];
        snprintf(nm, sizeof(nm), "t%d", i);
        mpb_tensor(&sb, nm, "f32", 1, SQ, i);
    }
    expect_req("17 tensors", WF_E_LIMIT, 81, "limit 16");
    {
        wf_limits_t l3 = lim;
        l3.max_tensors = 2;
        B(); attn_prefix(82, SQ, SKV, SKV); mpb(&sb, "M0");
        expect_req_lim("3 tensors, max_tensors 2", &l3, WF_E_LIMIT, 82, NULL);
        l3 = lim;
        l3.max_tensor_bytes = 2 * 5 * 4 * 8 * 4 - 1;
        B(); attn_prefix(83, SQ, SKV, SKV); mpb(&sb, "M0");
        expect_req_lim("q one byte over max_tensor_bytes", &l3, WF_E_LIMIT, 83, "\"q\"");
        l3.max_tensor_bytes = 2 * 5 * 4 * 8 * 4;
        expect_req_lim("q exactly max_tensor_bytes", &l3, WF_OK, 83, NULL);
    }

    /* UNKNOWN_OP */
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 9, "op", 99);
    expect_req("op 99", WF_E_UNKNOWN_OP, 9, "99");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 9, "op", 0);
    expect_req("op 0", WF_E_UNKNOWN_OP, 9, NULL);
    B(); mpb(&sb, "M3 si si sU", "v", 1, "id", 9, "op", (uint64_t)1 << 40);
    expect_req("op 2^40", WF_E_UNKNOWN_OP, 9, NULL);
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 9, "op", 9);
    expect_req("op 9 (after forward)", WF_E_UNKNOWN_OP, 9, "9");

    /* BAD_FIELD: top level */
    B(); mpb(&sb, "M2 si si", "v", 1, "op", 1);
    expect_req("id missing", WF_E_BAD_FIELD, 0, "id: missing");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", -4, "op", 1);
    expect_req("id negative", WF_E_BAD_FIELD, 0, "id");
    B(); mpb(&sb, "M3 si sd si", "v", 1, "id", 1.0, "op", 1);
    expect_req("id float", WF_E_BAD_FIELD, 0, "id");
    B(); mpb(&sb, "M3 si sU si", "v", 1, "id", UINT64_MAX, "op", 1);
    expect_req("id 2^64-1 is fine", WF_OK, UINT64_MAX, NULL);
    B(); mpb(&sb, "M2 si si", "v", 1, "id", 3);
    expect_req("op missing", WF_E_BAD_FIELD, 3, "op: missing");
    B(); mpb(&sb, "M3 si si ss", "v", 1, "id", 3, "op", "hello");
    expect_req("op str", WF_E_BAD_FIELD, 3, "op");
    B(); mpb(&sb, "M3 si si sn", "v", 1, "id", 3, "op");
    expect_req("op nil", WF_E_BAD_FIELD, 3, "op");
    B(); mpb(&sb, "M4 si si si si", "v", 1, "id", 3, "op", 1, "colour", 2);
    expect_req("unknown top-level key", WF_E_BAD_FIELD, 3, "unknown key \"colour\"");
    B(); mpb(&sb, "M4 si si si si", "v", 1, "id", 3, "op", 1, "id", 4);
    expect_req("duplicate id", WF_E_BAD_FIELD, 3, "duplicate key \"id\"");
    B(); mpb(&sb, "M4 si si si si", "v", 1, "v", 1, "id", 3, "op", 1);
    expect_req("duplicate v", WF_E_BAD_FIELD, 3, "duplicate");
    B(); mpb(&sb, "M4 si si si ii", "v", 1, "id", 3, "op", 1, 5, 6);
    expect_req("integer key", WF_E_BAD_FIELD, 3, "keys must be str");
    B(); mpb(&sb, "M4 si si si si", "v", 1, "id", 3, "op", 3, "tensors", 1);
    expect_req("tensors not an array", WF_E_BAD_FIELD, 3, "tensors");
    B(); mpb(&sb, "M4 si si si sA1i", "v", 1, "id", 3, "op", 3, "tensors", 1);
    expect_req("tensor not a map", WF_E_BAD_FIELD, 3, "tensors[0]");
    B(); mpb(&sb, "M4 si si si sA1 M3 ss ss sA1i", "v", 1, "id", 3, "op", 3, "tensors",
             "name", "q", "dtype", "f32", "shape", 4);
    expect_req("frame missing", WF_E_BAD_FIELD, 3, "tensors[0].frame: missing");
    B(); mpb(&sb, "M4 si si si sA1 M3 ss sA1i si", "v", 1, "id", 3, "op", 3, "tensors",
             "dtype", "f32", "shape", 4, "frame", 0);
    expect_req("name missing", WF_E_BAD_FIELD, 3, "tensors[0].name: missing");
    B(); mpb(&sb, "M4 si si si sA1 M5 ss ss sA1i si si", "v", 1, "id", 3, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 4, "frame", 0, "stride", 1);
    expect_req("unknown tensor key", WF_E_BAD_FIELD, 3, "unknown key \"stride\"");
    B(); mpb(&sb, "M4 si si si sA1 M4 si ss sA1i si", "v", 1, "id", 3, "op", 3,
             "tensors", "name", 5, "dtype", "f32", "shape", 4, "frame", 0);
    expect_req("name int", WF_E_BAD_FIELD, 3, "name");
    {
        char longname[80];
        memset(longname, 'n', sizeof(longname) - 1);
        longname[sizeof(longname) - 1] = '\0';
        B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA1i si", "v", 1, "id", 3, "op", 3,
                 "tensors", "name", longname, "dtype", "f32", "shape", 4, "frame", 0);
        expect_req("name too long", WF_E_BAD_FIELD, 3, "name");
    }
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA1i si", "v", 1, "id", 3, "op", 3,
             "tensors", "name", "", "dtype", "f32", "shape", 4, "frame", 0);
    expect_req("name empty", WF_E_BAD_FIELD, 3, "name");
    B(); mpb(&sb, "M4 si si si sA1 M4 ss si sA1i si", "v", 1, "id", 3, "op", 3,
             "tensors", "name", "q", "dtype", 0, "shape", 4, "frame", 0);
    expect_req("dtype int", WF_E_BAD_FIELD, 3, "dtype");
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss si si", "v", 1, "id", 3, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 4, "frame", 0);
    expect_req("shape int", WF_E_BAD_FIELD, 3, "shape");
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA1i ss", "v", 1, "id", 3, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 4, "frame", "0");
    expect_req("frame str", WF_E_BAD_FIELD, 3, "frame");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "i", 1);
    expect_req("args not a map", WF_E_BAD_FIELD, 12, "args");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 sb", "window", 1);
    expect_req("unknown args key", WF_E_BAD_FIELD, 12, "args: unknown key \"window\"");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M2 sb sb", "causal", 1, "causal", 0);
    expect_req("duplicate args key", WF_E_BAD_FIELD, 12, "duplicate");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 ss", "scale", "0.5");
    expect_req("scale str", WF_E_BAD_FIELD, 12, "args.scale");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 si", "causal", 1);
    expect_req("causal int", WF_E_BAD_FIELD, 12, "args.causal");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 sn", "return_lse");
    expect_req("return_lse nil", WF_E_BAD_FIELD, 12, "args.return_lse");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 si", "out_dtype", 0);
    expect_req("out_dtype int", WF_E_BAD_FIELD, 12, "args.out_dtype");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 si", "devices", -1);
    expect_req("devices -1", WF_E_BAD_FIELD, 12, "args.devices");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 sU", "devices", (uint64_t)1 << 33);
    expect_req("devices 2^33", WF_E_BAD_FIELD, 12, "args.devices");
    B(); mpb(&sb, "M4 si si si sA2", "v", 1, "id", 13, "op", 3, "tensors");
    mpb_tensor(&sb, "k", "f32", 4, SKV, 0);
    mpb_tensor(&sb, "v", "f32", 4, SKV, 1);
    expect_req("q missing", WF_E_BAD_FIELD, 13, "no tensor named \"q\"");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 13, "op", 3);
    expect_req("attention without tensors", WF_E_BAD_FIELD, 13, "\"q\"");
    B(); mpb(&sb, "M4 si si si sA3", "v", 1, "id", 14, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
    mpb_tensor(&sb, "k", "f32", 4, SKV, 1);
    mpb_tensor(&sb, "q", "f32", 4, SKV, 2);
    expect_req("duplicate tensor name", WF_E_BAD_FIELD, 14, "used twice");
    B(); mpb(&sb, "M4 si si si sM0", "v", 1, "id", 15, "op", 1, "args");
    expect_req("hello with empty args", WF_OK, 15, NULL);
    B(); mpb(&sb, "M4 si si si sM1 si", "v", 1, "id", 15, "op", 2, "args", "verbose", 1);
    expect_req("status with an arg", WF_E_BAD_FIELD, 15, "verbose");

    /* BAD_DTYPE */
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 16, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f64", 4, SQ, 0);
    expect_req("dtype f64", WF_E_BAD_DTYPE, 16, "\"f64\"");
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 16, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "F32", 4, SQ, 0);
    expect_req("dtype F32 (case matters)", WF_E_BAD_DTYPE, 16, NULL);
    B(); attn_prefix(16, SQ, SKV, SKV); mpb(&sb, "M1 ss", "out_dtype", "int8");
    expect_req("out_dtype int8", WF_E_BAD_DTYPE, 16, "int8");

    /* BAD_SHAPE */
    struct { const char *what; int rank; int64_t dims[9]; const char *msg; } shapes[] = {
        { "rank 0", 0, { 0 }, "rank" },
        { "rank 9", 9, { 1, 1, 1, 1, 1, 1, 1, 1, 1 }, "rank" },
        { "dim -3", 4, { 2, 3, -3, 4 }, "tensors[1].shape[2]: dim must be > 0, got -3" },
        { "dim 0", 4, { 2, 0, 3, 4 }, "tensors[1].shape[1]: dim must be > 0, got 0" },
        { "dim INT64_MIN", 2, { INT64_MIN, 1 }, "shape[0]" },
        { "numel overflow", 2, { (int64_t)1 << 32, (int64_t)1 << 32 }, "overflow" },
        { "nbytes overflow", 2, { (int64_t)1 << 31, (int64_t)1 << 31 }, "overflow" },
        { "rank 8 ok but big", 8, { 256, 256, 256, 256, 256, 256, 256, 256 }, "overflow" },
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        B(); mpb(&sb, "M4 si si si sA2", "v", 1, "id", 17, "op", 3, "tensors");
        mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
        mpb_tensor(&sb, "k", "f32", shapes[i].rank, shapes[i].dims, 1);
        expect_req(shapes[i].what, WF_E_BAD_SHAPE, 17, shapes[i].msg);
    }
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA2 i d si", "v", 1, "id", 18, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 2, 2.0, "frame", 0);
    expect_req("dim float", WF_E_BAD_SHAPE, 18, "integer");
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA2 i s si", "v", 1, "id", 18, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 2, "2", "frame", 0);
    expect_req("dim str", WF_E_BAD_SHAPE, 18, "integer");
    B(); mpb(&sb, "M4 si si si sA1 M4 ss ss sA2 i U si", "v", 1, "id", 18, "op", 3,
             "tensors", "name", "q", "dtype", "f32", "shape", 2, (uint64_t)1 << 63, "frame", 0);
    expect_req("dim 2^63", WF_E_BAD_SHAPE, 18, "overflows");

    /* FRAME_MISMATCH in the header */
    B(); mpb(&sb, "M4 si si si sA3", "v", 1, "id", 19, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
    mpb_tensor(&sb, "k", "f32", 4, SKV, 3);
    mpb_tensor(&sb, "v", "f32", 4, SKV, 1);
    expect_req("frame 3 of 3", WF_E_FRAME_MISMATCH, 19, "out of range");
    B(); mpb(&sb, "M4 si si si sA3", "v", 1, "id", 19, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 1);
    mpb_tensor(&sb, "k", "f32", 4, SKV, 0);
    mpb_tensor(&sb, "v", "f32", 4, SKV, 1);
    expect_req("frame 1 twice", WF_E_FRAME_MISMATCH, 19, "twice");

    /* BAD_ARGUMENT */
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 20, "op", 1, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
    expect_req("hello with a tensor", WF_E_BAD_ARGUMENT, 20, "no tensors");
    B(); mpb(&sb, "M4 si si si sA4", "v", 1, "id", 21, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
    mpb_tensor(&sb, "k", "f32", 4, SKV, 1);
    mpb_tensor(&sb, "v", "f32", 4, SKV, 2);
    mpb_tensor(&sb, "mask", "f32", 4, SKV, 3);
    expect_req("extra tensor", WF_E_BAD_ARGUMENT, 21, "\"mask\"");
    B(); mpb(&sb, "M4 si si si sA3", "v", 1, "id", 22, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 3, SQ, 0);
    mpb_tensor(&sb, "k", "f32", 4, SKV, 1);
    mpb_tensor(&sb, "v", "f32", 4, SKV, 2);
    expect_req("q of rank 3", WF_E_BAD_ARGUMENT, 22, "rank");
    memcpy(qs, SQ, sizeof(qs)); memcpy(ks, SKV, sizeof(ks)); memcpy(vs, SKV, sizeof(vs));
    qs[0] = 3;
    B(); attn_prefix(23, qs, ks, vs); mpb(&sb, "M0");
    expect_req("batch mismatch", WF_E_BAD_ARGUMENT, 23, "batch");
    qs[0] = 2; qs[3] = 16;
    B(); attn_prefix(23, qs, ks, vs); mpb(&sb, "M0");
    expect_req("head dim mismatch", WF_E_BAD_ARGUMENT, 23, "head dim");
    qs[3] = 8; qs[2] = 3;
    B(); attn_prefix(23, qs, ks, vs); mpb(&sb, "M0");
    expect_req("GQA 3 q heads, 2 kv heads", WF_E_BAD_ARGUMENT, 23, "divide");
    qs[2] = 4; vs[1] = 6;
    B(); attn_prefix(23, qs, ks, vs); mpb(&sb, "M0");
    expect_req("k and v differ", WF_E_BAD_ARGUMENT, 23, "differ");
    vs[1] = 7;
    B(); attn_prefix(23, qs, ks, vs); mpb(&sb, "M0");
    expect_req("args empty is fine", WF_OK, 23, NULL);
    const double bad_scales[] = { NAN, INFINITY, -INFINITY, -1.0, 0.0, -0.0, 1e300 };
    for (size_t i = 0; i < sizeof(bad_scales) / sizeof(bad_scales[0]); i++) {
        B(); attn_prefix(24, SQ, SKV, SKV); mpb(&sb, "M1 sd", "scale", bad_scales[i]);
        expect_req("bad scale", WF_E_BAD_ARGUMENT, 24, "args.scale");
    }
    B(); attn_prefix(24, SQ, SKV, SKV); mpb(&sb, "M1 sf", "scale", 0.5);
    expect_req("scale float32", WF_OK, 24, NULL);
    B(); attn_prefix(24, SQ, SKV, SKV); mpb(&sb, "M1 si", "scale", 2);
    expect_req("scale integer", WF_OK, 24, NULL);
}

/* Context-parallel attention options, the reconfigure op and the status
 * additions. */
static void test_parallel_fields(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    wf_status_t rc;

    /* attention options: every value of every option survives encode ->
     * decode; DEFAULT is not sent at all */
    for (int rot = 0; rot < 3; rot++)
        for (int o = 0; o < 3 * 3 * 3 * 3; o++) {
            wf_request_t r, d;
            memset(&r, 0, sizeof(r));
            r.id = 500 + (uint64_t)(rot * 81 + o);
            r.op = WF_OP_ATTENTION;
            r.n_tensors = 3;
            const char *names[3] = { "q", "k", "v" };
            for (int i = 0; i < 3; i++) {
                snprintf(r.tensors[i].name, sizeof(r.tensors[i].name), "%s", names[i]);
                r.tensors[i].rank = 4;
                memcpy(r.tensors[i].shape, i == 0 ? SQ : SKV, sizeof(SQ));
                r.tensors[i].frame = (uint32_t)i;
            }
            wf_attention_args_t *a = &r.args.attention;
            a->rotate_method = (wf_rotate_t)rot;
            a->convert_to_fp32 = (wf_opt_t)(o % 3);
            a->ring_anything = (wf_opt_t)(o / 3 % 3);
            a->ulysses_anything = (wf_opt_t)(o / 9 % 3);
            a->load_balance = (wf_opt_t)(o / 27 % 3);
            wf_buf_reset(&buf);
            CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode options %d/%d", rot, o);
            bool any = rot || o;
            CHECK(any == (memmem(buf.data, buf.len, "anything", 8) || memmem(buf.data, buf.len,
                  "rotate", 6) || memmem(buf.data, buf.len, "fp32", 4) ||
                  memmem(buf.data, buf.len, "load_balance", 12)),
                  "options %d/%d: DEFAULT must not be sent, others must", rot, o);
            rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
            CHECK(rc == WF_OK, "decode options %d/%d: %s", rot, o, err);
            const wf_attention_args_t *b = &d.args.attention;
            CHECK(rc != WF_OK || (b->rotate_method == a->rotate_method &&
                  b->convert_to_fp32 == a->convert_to_fp32 &&
                  b->ring_anything == a->ring_anything &&
                  b->ulysses_anything == a->ulysses_anything &&
                  b->load_balance == a->load_balance), "options %d/%d differ", rot, o);
        }
    {
        wf_request_t r;
        memset(&r, 0, sizeof(r));
        r.op = WF_OP_ATTENTION;
        r.args.attention.rotate_method = (wf_rotate_t)3;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode rotate_method 3");
        r.args.attention.rotate_method = WF_ROTATE_DEFAULT;
        r.args.attention.load_balance = (wf_opt_t)7;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode load_balance 7");
    }
    /* wire spellings, absent = DEFAULT, and wrong values */
    B(); attn_prefix(600, SQ, SKV, SKV);
    mpb(&sb, "M5 ss sb sb sb sb", "rotate_method", "alltoall", "convert_to_fp32", 0,
        "ring_anything", 1, "ulysses_anything", 1, "load_balance", 0);
    {
        wf_request_t d;
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        const wf_attention_args_t *b = &d.args.attention;
        CHECK(rc == WF_OK && b->rotate_method == WF_ROTATE_ALLTOALL &&
              b->convert_to_fp32 == WF_OPT_OFF && b->ring_anything == WF_OPT_ON &&
              b->ulysses_anything == WF_OPT_ON && b->load_balance == WF_OPT_OFF,
              "explicit options: %s %s", wf_status_name(rc), err);
        B(); attn_prefix(601, SQ, SKV, SKV); mpb(&sb, "M1 ss", "rotate_method", "allgather");
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.attention.rotate_method == WF_ROTATE_ALLGATHER &&
              d.args.attention.convert_to_fp32 == WF_OPT_DEFAULT &&
              d.args.attention.ring_anything == WF_OPT_DEFAULT &&
              d.args.attention.ulysses_anything == WF_OPT_DEFAULT &&
              d.args.attention.load_balance == WF_OPT_DEFAULT, "allgather, rest absent");
    }
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 ss", "rotate_method", "ring");
    expect_req("rotate_method ring", WF_E_BAD_FIELD, 602, "args.rotate_method: unknown method \"ring\"");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 ss", "rotate_method", "AllGather");
    expect_req("rotate_method case", WF_E_BAD_FIELD, 602, "rotate_method");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 si", "rotate_method", 1);
    expect_req("rotate_method int", WF_E_BAD_FIELD, 602, "args.rotate_method: must be a str");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 si", "convert_to_fp32", 1);
    expect_req("convert_to_fp32 int", WF_E_BAD_FIELD, 602, "args.convert_to_fp32: must be a bool");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 ss", "ring_anything", "true");
    expect_req("ring_anything str", WF_E_BAD_FIELD, 602, "args.ring_anything");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 sn", "ulysses_anything");
    expect_req("ulysses_anything nil", WF_E_BAD_FIELD, 602, "args.ulysses_anything");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 sd", "load_balance", 1.0);
    expect_req("load_balance float", WF_E_BAD_FIELD, 602, "args.load_balance");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M2 sb sb", "ring_anything", 1, "ring_anything", 1);
    expect_req("ring_anything twice", WF_E_BAD_FIELD, 602, "duplicate");
    B(); attn_prefix(602, SQ, SKV, SKV); mpb(&sb, "M1 sb", "ring_degree", 1);
    expect_req("ring_degree is not a job option", WF_E_BAD_FIELD, 602, "unknown key");
    /* the order of checks: a bad option comes before the tensors' fit */
    {
        int64_t q3[4] = { 2, 5, 3, 8 };
        B(); attn_prefix(603, q3, SKV, SKV); mpb(&sb, "M1 si", "load_balance", 2);
        expect_req("bad option before Hkv | Hq", WF_E_BAD_FIELD, 603, "load_balance");
    }

    /* reconfigure */
    for (uint32_t v = 1; v <= WF_PROTO_MAX_DEGREE; v = v * 2 + 1) {
        wf_request_t r, d;
        memset(&r, 0, sizeof(r));
        r.id = 700 + v;
        r.op = WF_OP_RECONFIGURE;
        r.args.reconfigure.mesh = (wf_mesh_degrees_t){ v, 1, v % 7 + 1, WF_PROTO_MAX_DEGREE };
        wf_buf_reset(&buf);
        CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode reconfigure %u", v);
        rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.op == WF_OP_RECONFIGURE && d.id == r.id &&
              memcmp(&d.args.reconfigure.mesh, &r.args.reconfigure.mesh,
                     sizeof(wf_mesh_degrees_t)) == 0,
              "reconfigure %u round trip: %s %s", v, wf_status_name(rc), err);
    }
    {
        wf_request_t r;
        memset(&r, 0, sizeof(r));
        r.op = WF_OP_RECONFIGURE;
        r.args.reconfigure.mesh = (wf_mesh_degrees_t){ 1, 0, 1, 1 };
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode ring 0");
        r.args.reconfigure.mesh = (wf_mesh_degrees_t){ 1, 1, WF_PROTO_MAX_DEGREE + 1, 1 };
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode ulysses 4097");
        wf_request_t d;
        B(); mpb(&sb, "M4 si si si s M2 si si", "v", 1, "id", 710, "op", 4, "args",
                 "ring", 2, "ulysses", 2);
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.reconfigure.mesh.dp == 1 && d.args.reconfigure.mesh.ring == 2 &&
              d.args.reconfigure.mesh.ulysses == 2 && d.args.reconfigure.mesh.tp == 1,
              "absent degrees are 1: %s %s", wf_status_name(rc), err);
        B(); mpb(&sb, "M3 si si si", "v", 1, "id", 711, "op", 4);
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.reconfigure.mesh.dp == 1 && d.args.reconfigure.mesh.tp == 1,
              "no args: all degrees 1: %s", err);
    }
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 720, "op", 4, "args", "dp", 0);
    expect_req("reconfigure dp 0", WF_E_BAD_FIELD, 720, "args.dp: degree must be 1..4096, got 0");
    B(); mpb(&sb, "M4 si si si s M1 sU", "v", 1, "id", 720, "op", 4, "args", "ring",
             (uint64_t)1 << 40);
    expect_req("reconfigure ring 2^40", WF_E_BAD_FIELD, 720, "args.ring");
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 720, "op", 4, "args", "ulysses", -2);
    expect_req("reconfigure ulysses -2", WF_E_BAD_FIELD, 720, "args.ulysses: must be an unsigned");
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 720, "op", 4, "args", "tp", "2");
    expect_req("reconfigure tp str", WF_E_BAD_FIELD, 720, "args.tp");
    B(); mpb(&sb, "M4 si si si s M1 sd", "v", 1, "id", 720, "op", 4, "args", "tp", 2.0);
    expect_req("reconfigure tp float", WF_E_BAD_FIELD, 720, "args.tp");
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 720, "op", 4, "args", "pp", 2);
    expect_req("reconfigure unknown degree", WF_E_BAD_FIELD, 720, "unknown key \"pp\"");
    B(); mpb(&sb, "M4 si si si s M2 si si", "v", 1, "id", 720, "op", 4, "args", "dp", 2,
             "dp", 2);
    expect_req("reconfigure dp twice", WF_E_BAD_FIELD, 720, "duplicate");
    B(); mpb(&sb, "M4 si si si s A0", "v", 1, "id", 720, "op", 4, "args");
    expect_req("reconfigure args array", WF_E_BAD_FIELD, 720, "args: must be a map");
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 721, "op", 4, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, SQ, 0);
    expect_req("reconfigure with a tensor", WF_E_BAD_ARGUMENT, 721, "no tensors");

    /* reconfigure reply */
    wf_reply_t rep, d;
    memset(&rep, 0, sizeof(rep));
    rep.id = 730; rep.op = WF_OP_RECONFIGURE; rep.epoch = 7;
    rep.result.reconfigure.epoch = 7;
    rep.result.reconfigure.mesh = (wf_mesh_degrees_t){ 1, 2, 2, 1 };
    wf_buf_reset(&buf);
    CHECK(wf_reply_encode(&rep, &buf) == WF_OK, "encode reconfigure reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_RECONFIGURE && d.epoch == 7 &&
          d.result.reconfigure.epoch == 7 &&
          memcmp(&d.result.reconfigure.mesh, &rep.result.reconfigure.mesh,
                 sizeof(wf_mesh_degrees_t)) == 0,
          "reconfigure reply round trip: %s %s", wf_status_name(rc), err);
    rep.status = WF_E_BUSY;
    strcpy(rep.error, "another reconfiguration is running");
    wf_buf_reset(&buf);
    wf_reply_encode(&rep, &buf);
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.status == WF_E_BUSY && d.result.reconfigure.epoch == 0 &&
          strstr(d.error, "another"), "busy reply: %s", err);
    /* status additions, as a tolerant client reads them: reconfiguring as
     * a bool or a uint; coords must be 4 uints */
    B();
    mpb(&sb, "M5 si si si si s M3 s M2 si si s i s A1 M2 si s A4 iiii", "v", 1, "id", 731,
        "op", 2, "status", 0, "result", "mesh", "ring", 4, "future", 1, "reconfiguring", 1,
        "devices", "rank", 3, "coords", 0, 3, 0, 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.status.mesh.ring == 4 && d.result.status.reconfiguring == 1 &&
          d.result.status.devices[0].rank == 3 && d.result.status.devices[0].coords[1] == 3,
          "status additions: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M1 s A1 M1 s A3 iii", "v", 1, "id", 732, "op", 2, "status", 0,
        "result", "devices", "coords", 0, 0, 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "coords"), "3 coords: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M1 s i", "v", 1, "id", 733, "op", 2, "status", 0,
        "result", "mesh", 4);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "mesh"), "mesh not a map: %s", wf_status_name(rc));
    CHECK(strcmp(wf_status_name(WF_E_ABORTED), "WF_E_ABORTED") == 0 && WF_E_ABORTED == 41 &&
          WF_E_BUSY == 23, "status numbers");
    wf_buf_free(&buf);
}

/* ---- resident models: load_model, unload_model, list_models, forward ---- */

/* One rule for a test plan. */
static wf_tp_rule_t rule(const char *glob, wf_tp_style_t style, uint32_t n_blocks,
                         const uint32_t *blocks)
{
    wf_tp_rule_t r;
    memset(&r, 0, sizeof(r));
    snprintf(r.glob, sizeof(r.glob), "%s", glob);
    r.style = style;
    r.n_blocks = n_blocks;
    for (uint32_t b = 0; b < n_blocks; b++)
        r.blocks[b] = blocks[b];
    return r;
}

/* {v:1, id, op:5, args: <caller writes the value>} */
static void load_prefix(uint64_t id)
{
    mpb(&sb, "M4 si sU si s", "v", 1, "id", id, "op", WF_OP_LOAD_MODEL, "args");
}

/* {v:1, id, op:5, args: {name, path, tp_plan: <caller writes the value>}} */
static void load_plan_prefix(uint64_t id)
{
    load_prefix(id);
    mpb(&sb, "M3 ss ss s", "name", "m", "path", "flux", "tp_plan");
}

static void test_models_requests(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_request_t r, d; /* large: off the stack */
    wf_status_t rc;

    /* load_model round trips: full plan (str and map forms) + sharded flag;
     * no plan; the most rules */
    static const uint32_t b14[] = { 1, 4 }, b8[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    for (int variant = 0; variant < 3; variant++) {
        memset(&r, 0, sizeof(r));
        r.id = 900 + (uint64_t)variant;
        r.op = WF_OP_LOAD_MODEL;
        wf_load_model_args_t *a = &r.args.load_model;
        strcpy(a->name, variant == 1 ? "A-z_0.9" : "flux-dev");
        strcpy(a->path, variant == 1 ? "./models/x..y/flux" : "flux/dev");
        if (variant == 0) {
            a->plan[0] = rule("transformer_blocks.*.attn.to_q", WF_TP_COLWISE, 0, NULL);
            a->plan[1] = rule("single_transformer_blocks.*.proj_out",
                              WF_TP_PACKED_ROWWISE, 2, b14);
            a->plan[2] = rule("x_embedder", WF_TP_REPLICATED, 0, NULL);
            a->plan[3] = rule("ff.net.2", WF_TP_ROWWISE, 0, NULL);
            a->plan[4] = rule("fused.*", WF_TP_PACKED_COLWISE, 8, b8);
            a->n_plan = 5;
            a->weights_already_sharded = true;
        } else if (variant == 2) {
            for (uint32_t i = 0; i < WF_TP_MAX_RULES; i++) {
                char g[WF_TP_GLOB_MAX];
                snprintf(g, sizeof(g), "blocks.%u.*.%0100u", i, i);
                a->plan[i] = rule(g, i % 2 ? WF_TP_PACKED_COLWISE : WF_TP_COLWISE,
                                  i % 2 ? 2 : 0, b14);
            }
            a->n_plan = WF_TP_MAX_RULES;
        }
        wf_buf_reset(&buf);
        CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode load_model %d", variant);
        rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.op == WF_OP_LOAD_MODEL && d.id == r.id && d.n_tensors == 0 &&
              memcmp(&d.args.load_model, a, sizeof(*a)) == 0,
              "load_model %d round trip: %s %s", variant, wf_status_name(rc), err);
    }
    /* The encoder refuses only what the wire cannot carry; field rules are
     * the decoder's, so a bad value travels and the daemon refuses it with
     * its own code (what weft.h promises for wf_load_model). */
    {
        wf_load_model_args_t *a = &r.args.load_model;
        static const struct {
            const char *name, *path;
            wf_tp_rule_t r0, r1;
            uint32_t n_plan;
            wf_status_t want;
            const char *msg;
        } cases[] = {
            { "m", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_OK, NULL },
            { "a b", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.name: byte 1" },
            { "", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.name: must be 1..63" },
            { "m", "/abs", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.path: is absolute" },
            { "m", "a/../b", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "'..' component" },
            { "m", "", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.path: is empty" },
            { "m", "p", { .glob = "proj_out", .style = WF_TP_PACKED_ROWWISE },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "packed_rowwise needs blocks" },
            { "m", "p", { .glob = "proj_out", .style = WF_TP_COLWISE, .n_blocks = 2,
                          .blocks = { 1, 4 } },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "only allowed with packed" },
            { "m", "p", { .glob = "a", .style = WF_TP_COLWISE },
              { .glob = "a", .style = WF_TP_ROWWISE }, 2, WF_E_BAD_FIELD,
              "duplicate glob \"a\"" },
            { "m", "p", { .glob = "a-b", .style = WF_TP_COLWISE }, { .n_blocks = 0 }, 1,
              WF_E_BAD_FIELD, "[A-Za-z0-9_.*]" },
            { "m", "p", { .glob = "p", .style = WF_TP_PACKED_COLWISE, .n_blocks = 2,
                          .blocks = { 1, 0 } },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "blocks[1]" },
        };
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            memset(&r, 0, sizeof(r));
            r.id = 905;
            r.op = WF_OP_LOAD_MODEL;
            strcpy(a->name, cases[k].name);
            strcpy(a->path, cases[k].path);
            a->plan[0] = cases[k].r0;
            a->plan[1] = cases[k].r1;
            a->n_plan = cases[k].n_plan;
            wf_buf_reset(&buf);
            CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode load_model case %zu", k);
            rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
            CHECK(rc == cases[k].want && d.id == 905 &&
                  (!cases[k].msg || strstr(err, cases[k].msg)),
                  "load_model case %zu: %s (%s), want %s", k, wf_status_name(rc), err,
                  wf_status_name(cases[k].want));
        }
        memset(&r, 0, sizeof(r));
        r.op = WF_OP_LOAD_MODEL;
        strcpy(a->name, "m");
        strcpy(a->path, "p");
        memset(a->name, 'x', sizeof(a->name)); /* no NUL at all */
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated name");
        strcpy(a->name, "m");
        memset(a->path, 'p', sizeof(a->path));
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated path");
        strcpy(a->path, "p");
        a->n_plan = 1;
        a->plan[0] = rule("proj_out", (wf_tp_style_t)9, 0, NULL);
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode style 9");
        a->plan[0] = rule("proj_out", WF_TP_PACKED_COLWISE, 2, b14);
        a->plan[0].n_blocks = WF_TP_MAX_BLOCKS + 1;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode 9 blocks");
        a->plan[0] = rule("proj_out", WF_TP_COLWISE, 0, NULL);
        memset(a->plan[0].glob, 'g', sizeof(a->plan[0].glob));
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated glob");
        a->plan[0] = rule("proj_out", WF_TP_COLWISE, 0, NULL);
        a->n_plan = WF_TP_MAX_RULES + 1;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode 65 rules");
    }

    /* load_model refusals */
    B(); load_prefix(910); mpb(&sb, "M2 ss ss", "name", "flux-dev", "path", "flux");
    expect_req("good load_model", WF_OK, 910, NULL);
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "flux dev", "path", "flux");
    expect_req("name with a space", WF_E_BAD_FIELD, 911, "args.name: byte 4");
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "a/b", "path", "flux");
    expect_req("name with a slash", WF_E_BAD_FIELD, 911, "args.name");
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "", "path", "flux");
    expect_req("empty name", WF_E_BAD_FIELD, 911, "args.name: must be 1..63 bytes");
    {
        char n64[65];
        memset(n64, 'n', 64);
        n64[64] = '\0';
        B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", n64, "path", "flux");
        expect_req("name of 64 bytes", WF_E_BAD_FIELD, 911, "args.name: must be 1..63");
        n64[63] = '\0';
        B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", n64, "path", "flux");
        expect_req("name of 63 bytes", WF_OK, 911, NULL);
    }
    B(); load_prefix(911); mpb(&sb, "M2 si ss", "name", 5, "path", "flux");
    expect_req("name int", WF_E_BAD_FIELD, 911, "args.name: must be a str");
    B(); load_prefix(911); mpb(&sb, "M1 ss", "path", "flux");
    expect_req("name missing", WF_E_BAD_FIELD, 911, "args.name: missing");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 911, "op", WF_OP_LOAD_MODEL);
    expect_req("load_model without args", WF_E_BAD_FIELD, 911, "args.name: missing");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "/models/flux");
    expect_req("absolute path", WF_E_BAD_FIELD, 912, "args.path: is absolute");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "..");
    expect_req("path ..", WF_E_BAD_FIELD, 912, "args.path: has a '..' component");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a/../b");
    expect_req("path a/../b", WF_E_BAD_FIELD, 912, "'..'");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a/..");
    expect_req("path a/..", WF_E_BAD_FIELD, 912, "'..'");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a..b/.x/..y");
    expect_req("dots that are not ..", WF_OK, 912, NULL);
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "");
    expect_req("empty path", WF_E_BAD_FIELD, 912, "args.path: is empty");
    B(); load_prefix(912); mpb(&sb, "M2 ss s R", "name", "m", "path", "\xa3" "a\0b", (size_t)4);
    expect_req("path with NUL", WF_E_BAD_FIELD, 912, "NUL");
    {
        char p256[257];
        memset(p256, 'p', 256);
        p256[256] = '\0';
        B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", p256);
        expect_req("path of 256 bytes", WF_E_BAD_FIELD, 912, "args.path: is 256 bytes");
    }
    B(); load_prefix(912); mpb(&sb, "M1 ss", "name", "m");
    expect_req("path missing", WF_E_BAD_FIELD, 912, "args.path: missing");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss sb", "name", "m", "path", "p", "tp", 1);
    expect_req("unknown load_model arg", WF_E_BAD_FIELD, 913, "unknown key \"tp\"");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss si", "name", "m", "path", "p",
                               "weights_already_sharded", 1);
    expect_req("sharded flag int", WF_E_BAD_FIELD, 913, "weights_already_sharded: must be a bool");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss ss", "name", "m", "path", "p", "name", "n");
    expect_req("name twice", WF_E_BAD_FIELD, 913, "duplicate");
    B(); mpb(&sb, "M5 si si si sA1", "v", 1, "id", 914, "op", WF_OP_LOAD_MODEL, "tensors");
    mpb_tensor(&sb, "w", "f32", 1, SQ, 0);
    mpb(&sb, "s M2 ss ss", "args", "name", "m", "path", "p");
    expect_req("load_model with a tensor", WF_E_BAD_ARGUMENT, 914, "no tensors");

    /* tp_plan forms and refusals */
    B(); load_plan_prefix(920);
    mpb(&sb, "M3 ss s M2 ss sA2 ii s M1 ss", "a.*.to_q", "colwise",
        "s.*.proj_out", "style", "packed_rowwise", "blocks", 1, 4,
        "norm", "style", "replicated");
    {
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        const wf_load_model_args_t *a = &d.args.load_model;
        CHECK(rc == WF_OK && a->n_plan == 3 && strcmp(a->plan[0].glob, "a.*.to_q") == 0 &&
              a->plan[0].style == WF_TP_COLWISE && a->plan[0].n_blocks == 0 &&
              a->plan[1].style == WF_TP_PACKED_ROWWISE && a->plan[1].n_blocks == 2 &&
              a->plan[1].blocks[0] == 1 && a->plan[1].blocks[1] == 4 &&
              a->plan[2].style == WF_TP_REPLICATED && !a->weights_already_sharded,
              "plan forms: %s %s", wf_status_name(rc), err);
    }
    B(); load_plan_prefix(921); mpb(&sb, "M0");
    {
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.load_model.n_plan == 0, "empty plan: %s", err);
    }
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "to_q", "diagonal");
    expect_req("unknown style", WF_E_BAD_FIELD, 922, "unknown style \"diagonal\"");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "to_q", "Colwise");
    expect_req("style case", WF_E_BAD_FIELD, 922, "unknown style");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "proj_out", "packed_rowwise");
    expect_req("packed without blocks (str form)", WF_E_BAD_FIELD, 922,
               "args.tp_plan[\"proj_out\"]: packed_rowwise needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 ss", "proj_out", "style", "packed_colwise");
    expect_req("packed without blocks (map form)", WF_E_BAD_FIELD, 922, "needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA0", "proj_out", "style",
                                    "packed_colwise", "blocks");
    expect_req("packed with no blocks", WF_E_BAD_FIELD, 922, "needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 ii", "to_q", "style", "colwise",
                                    "blocks", 1, 1);
    expect_req("blocks on colwise", WF_E_BAD_FIELD, 922, "only allowed with packed");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA9 iiiiiiiii", "p", "style",
                                    "packed_colwise", "blocks", 1, 1, 1, 1, 1, 1, 1, 1, 1);
    expect_req("9 blocks", WF_E_LIMIT, 922, "9 blocks, limit 8");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 ii", "p", "style",
                                    "packed_colwise", "blocks", 1, 0);
    expect_req("block 0", WF_E_BAD_FIELD, 922, "blocks[1]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 id", "p", "style",
                                    "packed_colwise", "blocks", 1, 2.0);
    expect_req("block float", WF_E_BAD_FIELD, 922, "blocks[1]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss si", "p", "style", "packed_colwise",
                                    "blocks", 4);
    expect_req("blocks not an array", WF_E_BAD_FIELD, 922, "blocks: must be an array");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 sA1i", "p", "blocks", 1);
    expect_req("map without style", WF_E_BAD_FIELD, 922, "style: missing");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss si", "p", "style", "colwise", "dim", 0);
    expect_req("unknown rule key", WF_E_BAD_FIELD, 922, "unknown key \"dim\"");
    B(); load_plan_prefix(922); mpb(&sb, "M1 si", "p", 1);
    expect_req("rule an int", WF_E_BAD_FIELD, 922, "must be a style str or a map");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 si", "p", "style", 1);
    expect_req("style an int", WF_E_BAD_FIELD, 922, "style: must be a str");
    B(); load_plan_prefix(922); mpb(&sb, "A0");
    expect_req("tp_plan an array", WF_E_BAD_FIELD, 922, "args.tp_plan: must be a map");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "a-b", "colwise");
    expect_req("glob with '-'", WF_E_BAD_FIELD, 922, "[A-Za-z0-9_.*]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "a..b", "colwise");
    expect_req("glob with an empty component", WF_E_BAD_FIELD, 922, "empty component");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", ".a", "colwise");
    expect_req("glob starting with '.'", WF_E_BAD_FIELD, 922, "empty component");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "", "colwise");
    expect_req("empty glob", WF_E_BAD_FIELD, 922, "glob must be 1..127 bytes");
    B(); load_plan_prefix(922); mpb(&sb, "M1 is", 3, "colwise");
    expect_req("glob an int", WF_E_BAD_FIELD, 922, "globs must be str");
    B(); load_plan_prefix(922); mpb(&sb, "M2 ss ss", "a", "colwise", "a", "rowwise");
    expect_req("glob twice", WF_E_BAD_FIELD, 922, "duplicate glob \"a\"");
    {
        char g[WF_TP_GLOB_MAX + 1];
        memset(g, 'g', WF_TP_GLOB_MAX);
        g[WF_TP_GLOB_MAX] = '\0';
        B(); load_plan_prefix(922); mpb(&sb, "M1 ss", g, "colwise");
        expect_req("glob of 128 bytes", WF_E_BAD_FIELD, 922, "glob must be 1..127");
        g[WF_TP_GLOB_MAX - 1] = '\0';
        B(); load_plan_prefix(922); mpb(&sb, "M1 ss", g, "colwise");
        expect_req("glob of 127 bytes", WF_OK, 922, NULL);
    }
    for (int n = WF_TP_MAX_RULES; n <= WF_TP_MAX_RULES + 1; n++) {
        B(); load_plan_prefix(923); mpb(&sb, "M*", n);
        for (int i = 0; i < n; i++) {
            char g[16];
            snprintf(g, sizeof(g), "m%d", i);
            mpb(&sb, "ss", g, "colwise");
        }
        expect_req(n == WF_TP_MAX_RULES ? "64 rules" : "65 rules",
                   n == WF_TP_MAX_RULES ? WF_OK : WF_E_LIMIT, 923,
                   n == WF_TP_MAX_RULES ? NULL : "65 rules, limit 64");
    }

    /* unload_model */
    memset(&r, 0, sizeof(r));
    r.id = 930;
    r.op = WF_OP_UNLOAD_MODEL;
    strcpy(r.args.unload_model.name, "flux-dev");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode unload_model");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_UNLOAD_MODEL &&
          strcmp(d.args.unload_model.name, "flux-dev") == 0,
          "unload_model round trip: %s %s", wf_status_name(rc), err);
    strcpy(r.args.unload_model.name, "x y");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode unload of a bad name");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_E_BAD_FIELD && strstr(err, "args.name"), "unload of a bad name: %s %s",
          wf_status_name(rc), err);
    memset(r.args.unload_model.name, 'x', sizeof(r.args.unload_model.name));
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated unload name");
    B(); mpb(&sb, "M4 si si si s M2 ss sb", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL,
             "args", "name", "m", "force", 1);
    expect_req("unload with an unknown arg", WF_E_BAD_FIELD, 931, "unknown key \"force\"");
    B(); mpb(&sb, "M4 si si si s M0", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL, "args");
    expect_req("unload without a name", WF_E_BAD_FIELD, 931, "args.name: missing");
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL,
             "args", "name", "../m");
    expect_req("unload of a bad name", WF_E_BAD_FIELD, 931, "args.name");

    /* list_models: like status, no args, no tensors */
    memset(&r, 0, sizeof(r));
    r.id = 940;
    r.op = WF_OP_LIST_MODELS;
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode list_models");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_LIST_MODELS && d.id == 940,
          "list_models round trip: %s %s", wf_status_name(rc), err);
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 941, "op", WF_OP_LIST_MODELS,
             "args", "name", "m");
    expect_req("list_models with an arg", WF_E_BAD_FIELD, 941, "takes no args");
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 942, "op", WF_OP_LIST_MODELS, "tensors");
    mpb_tensor(&sb, "x", "f32", 1, SQ, 0);
    expect_req("list_models with a tensor", WF_E_BAD_ARGUMENT, 942, "no tensors");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 943, "op", WF_OP_FORWARD + 1);
    expect_req("op 9 (after forward)", WF_E_UNKNOWN_OP, 943, "9");
    wf_buf_free(&buf);
}

/* The inputs of a forward request in a test: name, dtype, shape. */
typedef struct fwd_tensor {
    const char *name;
    const char *dtype;
    int rank;
    int64_t shape[3];
} fwd_tensor_t;

/* FLUX-tiny's inputs: B 2, S_img 16, in_channels 16, S_txt 8,
 * joint_attention_dim 32, pooled 16, 3 axes; guidance last. */
static int fwd_default(fwd_tensor_t *t, bool guidance)
{
    const fwd_tensor_t def[7] = {
        { "hidden_states", "f32", 3, { 2, 16, 16 } },
        { "encoder_hidden_states", "bf16", 3, { 2, 8, 32 } },
        { "pooled_projections", "f16", 2, { 2, 16 } },
        { "timestep", "f32", 1, { 2 } },
        { "img_ids", "f32", 2, { 16, 3 } },
        { "txt_ids", "f32", 2, { 8, 3 } },
        { "guidance", "f32", 1, { 2 } },
    };
    memcpy(t, def, sizeof(def));
    return guidance ? 7 : 6;
}

/* {v:1, id, op:8, tensors: t[0..n), "args": <caller writes the value>};
 * frames in reverse order of listing */
static void fwd_prefix(uint64_t id, const fwd_tensor_t *t, int n)
{
    mpb(&sb, "M5 si sU si s A*", "v", 1, "id", id, "op", WF_OP_FORWARD, "tensors", n);
    for (int i = 0; i < n; i++)
        mpb_tensor(&sb, t[i].name, t[i].dtype, t[i].rank, t[i].shape, n - 1 - i);
    mpb(&sb, "s", "args");
}

static void test_forward_requests(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_request_t r, d;
    fwd_tensor_t t[8];
    wf_status_t rc;

    /* round trips: with and without guidance, with and without out_dtype */
    for (int g = 0; g < 2; g++)
        for (int od = -1; od < 3; od++) {
            int n = fwd_default(t, g);
            memset(&r, 0, sizeof(r));
            r.id = 1000 + (uint64_t)(g * 10 + od + 1);
            r.op = WF_OP_FORWARD;
            r.n_tensors = (uint32_t)n;
            for (int i = 0; i < n; i++) {
                wf_tensor_desc_t *td = &r.tensors[i];
                snprintf(td->name, sizeof(td->name), "%s", t[i].name);
                wf_dtype_parse(t[i].dtype, strlen(t[i].dtype), &td->dtype);
                td->rank = t[i].rank;
                memcpy(td->shape, t[i].shape, sizeof(t[i].shape));
                td->frame = (uint32_t)((i + 2) % n);
            }
            strcpy(r.args.forward.model, "flux-tiny");
            r.args.forward.has_out_dtype = od >= 0;
            r.args.forward.out_dtype = (wf_dtype_t)(od >= 0 ? od : 0);
            wf_buf_reset(&buf);
            CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode forward %d/%d", g, od);
            rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
            const wf_forward_args_t *a = &d.args.forward;
            CHECK(rc == WF_OK && d.op == WF_OP_FORWARD && d.n_tensors == (uint32_t)n &&
                  strcmp(a->model, "flux-tiny") == 0 && a->hidden_states == 0 &&
                  a->encoder_hidden_states == 1 && a->pooled_projections == 2 &&
                  a->timestep == 3 && a->img_ids == 4 && a->txt_ids == 5 &&
                  a->guidance == (g ? 6 : -1) && a->has_out_dtype == (od >= 0) &&
                  (od < 0 || a->out_dtype == (wf_dtype_t)od),
                  "forward %d/%d round trip: %s %s", g, od, wf_status_name(rc), err);
            for (int i = 0; rc == WF_OK && i < n; i++)
                CHECK(d.tensors[i].dtype == r.tensors[i].dtype &&
                      d.tensors[i].frame == r.tensors[i].frame &&
                      d.tensors[i].rank == t[i].rank, "forward tensor %d", i);
        }
    /* listed in any order: indices follow the names */
    {
        int n = fwd_default(t, true);
        fwd_tensor_t rev[7];
        for (int i = 0; i < n; i++)
            rev[i] = t[n - 1 - i];
        B(); fwd_prefix(1010, rev, n); mpb(&sb, "M1 ss", "model", "m");
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.forward.hidden_states == 6 &&
              d.args.forward.guidance == 0 && d.args.forward.txt_ids == 1,
              "reversed forward tensors: %s %s", wf_status_name(rc), err);
    }
    memset(&r, 0, sizeof(r));
    r.op = WF_OP_FORWARD;
    strcpy(r.args.forward.model, "a:b");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode forward of a bad name");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_E_BAD_FIELD && strstr(err, "args.model: byte 1"),
          "forward of a bad name: %s %s", wf_status_name(rc), err);
    memset(r.args.forward.model, 'm', sizeof(r.args.forward.model));
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated model name");
    strcpy(r.args.forward.model, "m");
    r.args.forward.has_out_dtype = true;
    r.args.forward.out_dtype = (wf_dtype_t)7;
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode forward out_dtype 7");

    /* refusals */
    int n = fwd_default(t, false);
    B(); fwd_prefix(1020, t, n); mpb(&sb, "M2 ss ss", "model", "m", "out_dtype", "bf16");
    expect_req("good forward", WF_OK, 1020, NULL);
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M0");
    expect_req("forward without model", WF_E_BAD_FIELD, 1021, "args.model: missing");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M1 ss", "model", "/m");
    expect_req("forward of a bad model name", WF_E_BAD_FIELD, 1021, "args.model");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss sd", "model", "m", "guidance_scale", 3.5);
    expect_req("forward with an unknown arg", WF_E_BAD_FIELD, 1021,
               "unknown key \"guidance_scale\"");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss ss", "model", "m", "out_dtype", "f64");
    expect_req("forward out_dtype f64", WF_E_BAD_DTYPE, 1021, "args.out_dtype");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss si", "model", "m", "out_dtype", 0);
    expect_req("forward out_dtype int", WF_E_BAD_FIELD, 1021, "args.out_dtype: must be a str");
    /* a bad arg comes before the tensors */
    B(); fwd_prefix(1021, t, 2); mpb(&sb, "M1 si", "model", 1);
    expect_req("bad model before missing tensors", WF_E_BAD_FIELD, 1021, "args.model");
    for (int miss = 0; miss < 6; miss++) {
        fwd_tensor_t u[7];
        int m = 0;
        for (int i = 0; i < n; i++)
            if (i != miss)
                u[m++] = t[i];
        B(); fwd_prefix(1022, u, m); mpb(&sb, "M1 ss", "model", "m");
        char want[64];
        snprintf(want, sizeof(want), "no tensor named \"%s\"", t[miss].name);
        expect_req("forward with a missing tensor", WF_E_BAD_FIELD, 1022, want);
    }
    {
        fwd_tensor_t u[8];
        memcpy(u, t, sizeof(fwd_tensor_t) * (size_t)n);
        u[n] = (fwd_tensor_t){ "attention_mask", "f32", 2, { 2, 8 } };
        B(); fwd_prefix(1023, u, n + 1); mpb(&sb, "M1 ss", "model", "m");
        expect_req("forward with an extra tensor", WF_E_BAD_ARGUMENT, 1023,
                   "unexpected tensor \"attention_mask\"");
    }
    static const int ranks[7] = { 3, 3, 2, 1, 2, 2, 1 };
    for (int i = 0; i < 7; i++) {
        fwd_tensor_t u[7];
        int m = fwd_default(u, true);
        u[i].rank = ranks[i] == 3 ? 2 : ranks[i] + 1;
        u[i].shape[0] = u[i].shape[1] = u[i].shape[2] = 2;
        B(); fwd_prefix(1024, u, m); mpb(&sb, "M1 ss", "model", "m");
        char want[64];
        snprintf(want, sizeof(want), "%s: rank must be %d", u[i].name, ranks[i]);
        expect_req("forward tensor of a wrong rank", WF_E_BAD_ARGUMENT, 1024, want);
    }
    /* B of every batched tensor, S_img, S_txt and n_axes must agree */
    static const struct { int tensor, dim; const char *msg; } bad[] = {
        { 1, 0, "batch of encoder_hidden_states (3) and hidden_states (2) differ" },
        { 2, 0, "batch of pooled_projections (3)" },
        { 3, 0, "batch of timestep (3)" },
        { 6, 0, "batch of guidance (3)" },
        { 4, 0, "img_ids has 3 rows, hidden_states 16 tokens (S_img)" },
        { 0, 1, "img_ids has 16 rows, hidden_states 3 tokens" },
        { 5, 0, "txt_ids has 3 rows, encoder_hidden_states 8 tokens (S_txt)" },
        { 1, 1, "txt_ids has 8 rows, encoder_hidden_states 3" },
        { 4, 1, "img_ids has 3 axes, txt_ids 3" },
        { 5, 1, "img_ids has 3 axes, txt_ids 3" },
    };
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        fwd_tensor_t u[7];
        int m = fwd_default(u, true);
        u[bad[k].tensor].shape[bad[k].dim] = 3;
        if (k == 8)
            u[4].shape[1] = 3, u[5].shape[1] = 4; /* 3 vs 4 */
        if (k == 9)
            u[4].shape[1] = 3, u[5].shape[1] = 2;
        B(); fwd_prefix(1025 + k, u, m); mpb(&sb, "M1 ss", "model", "m");
        const char *want = k == 8 ? "img_ids has 3 axes, txt_ids 4 (n_axes)"
                         : k == 9 ? "img_ids has 3 axes, txt_ids 2" : bad[k].msg;
        expect_req("inconsistent forward tensors", WF_E_BAD_ARGUMENT, 1025 + k, want);
    }
    wf_buf_free(&buf);
}

static void fill_model(wf_model_info_t *m, int i)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "model-%d", i);
    snprintf(m->path, sizeof(m->path), "flux/%0200d", i);
    strcpy(m->family, "flux");
    strcpy(m->state, i % 2 ? "loading" : "ready");
    strcpy(m->dtype, "bf16");
    m->params = 11901408320ull + (uint64_t)i;
    m->bytes_total = 23802816640ull;
    m->bytes_loaded = i % 2 ? 1234567 : m->bytes_total;
    m->host_bytes = m->bytes_total;
    m->rank_bytes = 6000000000ull + (uint64_t)i;
    m->tp = (uint32_t)(1 + i % 4);
    m->sharded_input = (uint32_t)(i % 3 == 0);
    m->load_ms = i % 2 ? 0 : 45000;
}

static void test_models_replies(void)
{
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_reply_t r, d;
    wf_status_t rc;

    /* load_model: {"model": MODEL} */
    memset(&r, 0, sizeof(r));
    r.id = 1100; r.op = WF_OP_LOAD_MODEL; r.epoch = 2;
    r.result.models.n = 1;
    fill_model(&r.result.models.models[0], 0);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode load_model reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_LOAD_MODEL && d.epoch == 2 && d.result.models.n == 1 &&
          memcmp(&d.result.models.models[0], &r.result.models.models[0],
                 sizeof(wf_model_info_t)) == 0,
          "load_model reply round trip: %s %s", wf_status_name(rc), err);

    /* list_models: 0, 3 and WF_MODELS_MAX models */
    static const uint32_t counts[] = { 0, 3, WF_MODELS_MAX };
    for (size_t k = 0; k < 3; k++) {
        memset(&r, 0, sizeof(r));
        r.id = 1101 + k; r.op = WF_OP_LIST_MODELS;
        r.result.models.n = counts[k];
        for (uint32_t i = 0; i < counts[k]; i++)
            fill_model(&r.result.models.models[i], (int)i);
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode list_models reply");
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.result.models.n == counts[k] &&
              memcmp(&d.result.models, &r.result.models, sizeof(wf_models_result_t)) == 0,
              "list_models reply of %u: %s %s", counts[k], wf_status_name(rc), err);
    }

    /* unload_model: no result */
    memset(&r, 0, sizeof(r));
    r.id = 1110; r.op = WF_OP_UNLOAD_MODEL;
    wf_buf_reset(&buf);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode unload_model reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_UNLOAD_MODEL && d.status == WF_OK,
          "unload_model reply: %s %s", wf_status_name(rc), err);

    /* forward: result as attention's, one "output" tensor */
    for (int dt = 0; dt < 3; dt++) {
        memset(&r, 0, sizeof(r));
        r.id = 1120 + (uint64_t)dt; r.op = WF_OP_FORWARD; r.epoch = 5;
        r.n_tensors = 1;
        strcpy(r.tensors[0].name, "output");
        r.tensors[0].dtype = (wf_dtype_t)dt;
        r.tensors[0].rank = 3;
        r.tensors[0].shape[0] = 2; r.tensors[0].shape[1] = 16; r.tensors[0].shape[2] = 64;
        r.result.forward.queue_us = 7; r.result.forward.compute_us = 91000;
        r.result.forward.devices = 4;
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode forward reply");
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.n_tensors == 1 && strcmp(d.tensors[0].name, "output") == 0 &&
              d.tensors[0].dtype == (wf_dtype_t)dt &&
              d.tensors[0].nbytes == 2 * 16 * 64 * wf_dtype_size((wf_dtype_t)dt) &&
              d.result.forward.queue_us == 7 && d.result.forward.compute_us == 91000 &&
              d.result.forward.devices == 4 && d.epoch == 5,
              "forward reply dtype %d: %s %s", dt, wf_status_name(rc), err);
    }

    /* errors travel with their message and no result */
    static const struct { uint32_t op; wf_status_t st; const char *msg; } errs[] = {
        { WF_OP_LOAD_MODEL, WF_E_BUSY, "model \"a\" is loading: one load at a time" },
        { WF_OP_LOAD_MODEL, WF_E_NO_MEMORY, "shards need 30.1 GiB per rank, 23.0 GiB free" },
        { WF_OP_LOAD_MODEL, WF_E_BAD_ARGUMENT, "name \"flux\" is in use" },
        { WF_OP_FORWARD, WF_E_BAD_ARGUMENT, "model flux is not loaded" },
        { WF_OP_UNLOAD_MODEL, WF_E_BAD_ARGUMENT, "model flux is not loaded" },
    };
    for (size_t k = 0; k < sizeof(errs) / sizeof(errs[0]); k++) {
        memset(&r, 0, sizeof(r));
        r.id = 1130 + k; r.op = errs[k].op; r.status = errs[k].st;
        strcpy(r.error, errs[k].msg);
        r.result.models.n = 1;
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode error reply %zu", k);
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.status == errs[k].st && strcmp(d.error, errs[k].msg) == 0 &&
              d.result.models.n == 0, "error reply %zu: %s %s", k, wf_status_name(rc), err);
    }

    /* tolerance: unknown keys skipped, sharded_input as a uint, more than
     * WF_MODELS_MAX models keeps the first ones */
    B();
    mpb(&sb, "M5 si si si si s M2 s M4 ss si ss si sb",
        "v", 1, "id", 1140, "op", WF_OP_LOAD_MODEL, "status", 0, "result", "model",
        "name", "m", "sharded_input", 1, "quant", "none", "tp", 2, "extra", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.models.n == 1 &&
          strcmp(d.result.models.models[0].name, "m") == 0 &&
          d.result.models.models[0].sharded_input == 1 && d.result.models.models[0].tp == 2,
          "tolerant load_model reply: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M1 s A*", "v", 1, "id", 1141, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", WF_MODELS_MAX + 3);
    for (int i = 0; i < WF_MODELS_MAX + 3; i++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "m%d", i);
        mpb(&sb, "M1 ss", "name", nm);
    }
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.models.n == WF_MODELS_MAX &&
          strcmp(d.result.models.models[WF_MODELS_MAX - 1].name, "m15") == 0,
          "19 models: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M0", "v", 1, "id", 1142, "op", WF_OP_LOAD_MODEL, "status", 0,
        "result");
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "result.model"), "load reply without model: %s",
          wf_status_name(rc));
    B();
    mpb(&sb, "M5 si si si si s M1 s M1 si", "v", 1, "id", 1143, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", "name", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "models"), "models not an array: %s",
          wf_status_name(rc));
    B();
    mpb(&sb, "M5 si si si si s M1 s A1 M1 ss", "v", 1, "id", 1144, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", "bytes_loaded", "lots");
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "bytes_loaded"), "bytes_loaded a str: %s",
          wf_status_name(rc));
    wf_buf_free(&buf);
}

static void test_model_names(void)
{
    /* style names and their parse are inverses; unknown is NULL / false */
    for (int s = WF_TP_REPLICATED; s <= WF_TP_PACKED_ROWWISE; s++) {
        const char *n = wf_tp_style_name((wf_tp_style_t)s);
        wf_tp_style_t back = (wf_tp_style_t)99;
        CHECK(n && wf_tp_style_parse(n, strlen(n), &back) && back == (wf_tp_style_t)s,
              "style %d name round trip", s);
    }
    wf_tp_style_t st;
    CHECK(wf_tp_style_name((wf_tp_style_t)5) == NULL, "style 5 has no name");
    CHECK(!wf_tp_style_parse("colwis", 6, &st) && !wf_tp_style_parse("colwisee", 8, &st) &&
          !wf_tp_style_parse(NULL, 0, &st) && !wf_tp_style_parse("colwise", 6, &st),
          "style prefixes are not styles");
    CHECK(strcmp(wf_tp_style_name(WF_TP_PACKED_COLWISE), "packed_colwise") == 0,
          "packed_colwise spelling");
    /* the shared rules on their own */
    CHECK(wf_check_model_name("a.B_9-z", 7, NULL, 0) == WF_OK, "good name");
    CHECK(wf_check_model_name("a\0b", 3, NULL, 0) == WF_E_BAD_FIELD, "name with NUL");
    CHECK(wf_check_model_path("a/b/c", 5, NULL, 0) == WF_OK, "good path");
    CHECK(wf_check_model_path("a//b/", 5, NULL, 0) == WF_OK, "path with empty components");
    CHECK(wf_check_model_path("../a", 4, NULL, 0) == WF_E_BAD_FIELD, "path ../a");
    CHECK(wf_check_model_path("a/..x", 5, NULL, 0) == WF_OK, "path a/..x");
    CHECK(wf_check_tp_glob("a.*.b", 5, NULL, 0) == WF_OK, "glob a.*.b");
    CHECK(wf_check_tp_glob("a.", 2, NULL, 0) == WF_E_BAD_FIELD, "glob a.");
    CHECK(wf_check_tp_glob("*", 1, NULL, 0) == WF_OK, "glob *");
    wf_tp_rule_t r = rule("x", WF_TP_PACKED_COLWISE, WF_TP_MAX_BLOCKS,
                          (const uint32_t[]){ 1, 1, 1, 1, 1, 1, 1, 1 });
    CHECK(wf_check_tp_rule(&r, NULL, 0) == WF_OK, "rule of 8 blocks");
    r.n_blocks = WF_TP_MAX_BLOCKS + 1; /* a count beyond the array: never read */
    CHECK(wf_check_tp_rule(&r, NULL, 0) == WF_E_LIMIT, "rule of 9 blocks");
}

static void test_frames(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_request_t req;
    char err[WF_PROTO_ERROR_MAX];
    /* q, k, v listed with frames 2, 0, 1: the byte sizes follow the frame
     * order, not the list order */
    int64_t qs[4] = { 1, 3, 2, 4 }, ks[4] = { 1, 5, 1, 4 };
    B(); mpb(&sb, "M5 si si si sA3", "v", 1, "id", 30, "op", 3, "tensors");
    mpb_tensor(&sb, "q", "f32", 4, qs, 2);
    mpb_tensor(&sb, "k", "bf16", 4, ks, 0);
    mpb_tensor(&sb, "v", "f16", 4, ks, 1);
    mpb(&sb, "s M0", "args");
    wf_status_t rc = wf_request_decode(sb.data, sb.size, &lim, &req, err, sizeof(err));
    CHECK(rc == WF_OK, "frames request: %s", err);
    size_t good[3] = { 5 * 4 * 2, 5 * 4 * 2, 3 * 2 * 4 * 4 };
    CHECK(wf_request_check_frames(&req, 3, good, err, sizeof(err)) == WF_OK,
          "permuted frames: %s", err);
    size_t list_order[3] = { 3 * 2 * 4 * 4, 5 * 4 * 2, 5 * 4 * 2 };
    CHECK(wf_request_check_frames(&req, 3, list_order, err, sizeof(err)) ==
          WF_E_FRAME_MISMATCH, "frames in list order instead of frame order");
    CHECK(wf_request_check_frames(&req, 2, good, err, sizeof(err)) == WF_E_FRAME_MISMATCH,
          "too few frames");
    size_t four[4] = { good[0], good[1], good[2], 8 };
    CHECK(wf_request_check_frames(&req, 4, four, err, sizeof(err)) == WF_E_FRAME_MISMATCH,
          "too many frames");
    size_t off_by_one[3] = { good[0], good[1] + 1, good[2] };
    CHECK(wf_request_check_frames(&req, 3, off_by_one, err, sizeof(err)) ==
          WF_E_FRAME_MISMATCH && strstr(err, "frame 1"), "frame 1 one byte long: %s", err);
    size_t many[WF_PROTO_MAX_TENSORS + 1] = { 0 };
    CHECK(wf_request_check_frames(&req, WF_PROTO_MAX_TENSORS + 1, many, err, sizeof(err)) ==
          WF_E_LIMIT, "17 frames");
    /* a request without tensors takes no frames */
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 31, "op", 1);
    wf_request_decode(sb.data, sb.size, &lim, &req, err, sizeof(err));
    CHECK(wf_request_check_frames(&req, 0, NULL, err, sizeof(err)) == WF_OK, "hello, no frames");
    CHECK(wf_request_check_frames(&req, 1, good, err, sizeof(err)) == WF_E_FRAME_MISMATCH,
          "hello with a frame");
}

static void test_misc(void)
{
    wf_dtype_t dt;
    CHECK(wf_dtype_parse("bf16", 4, &dt) && dt == WF_DTYPE_BF16, "parse bf16");
    CHECK(wf_dtype_parse("f16", 3, &dt) && dt == WF_DTYPE_F16, "parse f16");
    CHECK(wf_dtype_parse("f32", 3, &dt) && dt == WF_DTYPE_F32, "parse f32");
    CHECK(!wf_dtype_parse("f3", 2, &dt) && !wf_dtype_parse("f32x", 4, &dt) &&
          !wf_dtype_parse("f32", 2, &dt), "dtype prefixes are not dtypes");
    wf_tensor_desc_t t = { .dtype = WF_DTYPE_BF16, .rank = 2, .shape = { 3, 5 } };
    CHECK(wf_tensor_desc_finish(&t) == WF_OK && t.numel == 15 && t.nbytes == 30, "finish");
    t.shape[1] = INT64_MAX / 2;
    CHECK(wf_tensor_desc_finish(&t) == WF_E_BAD_SHAPE, "finish overflow");
    t.shape[1] = -1;
    CHECK(wf_tensor_desc_finish(&t) == WF_E_BAD_SHAPE, "finish negative");
    t.shape[1] = 1; t.rank = 9;
    CHECK(wf_tensor_desc_finish(&t) == WF_E_BAD_SHAPE, "finish rank 9");
    wf_limits_t lim;
    wf_limits_default(&lim);
    CHECK(lim.max_header_bytes == 65536 && lim.max_depth == 8 && lim.max_elements == 4096 &&
          lim.max_str_bytes == 1024 && lim.max_tensors == 16 &&
          lim.max_tensor_bytes == 4ull << 30, "documented defaults");
    uint64_t id = 0;
    uint32_t op = 0;
    static const unsigned char peek[] = { 0x83, 0xa1, 'x', 0x92, 0xa2, 'i', 'd', 0x01,
                                          0xa2, 'o', 'p', 0x03, 0xa2, 'i', 'd', 0xcd, 0x12, 0x34 };
    wf_request_peek(peek, sizeof(peek), &id, &op);
    CHECK(id == 0x1234 && op == 3, "peek skips nested look-alikes: id %llu op %u",
          (unsigned long long)id, op);
    /* int8 5 is a uint for the peek as for msgpack-c; int8 -5 is not */
    static const unsigned char peek2[] = { 0x82, 0xa2, 'i', 'd', 0xd0, 0x05,
                                           0xa2, 'o', 'p', 0xd0, 0xfb };
    id = 0; op = 7;
    wf_request_peek(peek2, sizeof(peek2), &id, &op);
    CHECK(id == 5 && op == 7, "peek of signed encodings: id %llu op %u",
          (unsigned long long)id, op);
}

/* One status domain on the wire: a client-side code given to the reply
 * encoder goes out as WF_E_INTERNAL; every wire code goes out as itself. */
static void test_status_on_wire(void)
{
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    wf_reply_t r, d;
    const wf_status_t client_side[] = { WF_E_TIMEOUT, WF_E_CONNECT, WF_E_IO,
                                        WF_E_PROTOCOL, WF_E_PENDING, (wf_status_t)100,
                                        (wf_status_t)105, (wf_status_t)77 };
    for (size_t i = 0; i < sizeof client_side / sizeof client_side[0]; i++) {
        memset(&r, 0, sizeof r);
        r.version = 1; r.id = 7; r.op = WF_OP_ATTENTION; r.status = client_side[i];
        buf.len = 0;
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode status %d", (int)client_side[i]);
        wf_status_t rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof err);
        CHECK(rc == WF_OK && d.status == WF_E_INTERNAL && strcmp(d.error, wf_status_str(WF_E_INTERNAL)) == 0,
              "status %d on the wire: %s (%s)", (int)client_side[i], wf_status_name(d.status), d.error);
    }
    for (int s = 0; s < 100; s++) {
        const char *name = wf_status_name((wf_status_t)s);
        bool known = strcmp(name, "WF_E_UNKNOWN") != 0;
        CHECK(wf_status_on_wire((wf_status_t)s) == (known ? (wf_status_t)s : WF_E_INTERNAL),
              "wf_status_on_wire(%d) = %d", s, (int)wf_status_on_wire((wf_status_t)s));
    }
    wf_buf_free(&buf);
}

int main(void)
{
    msgpack_sbuffer_init(&sb);
    test_round_trip_requests();
    test_round_trip_replies();
    test_prevalidate();
    test_request_errors();
    test_parallel_fields();
    test_models_requests();
    test_forward_requests();
    test_models_replies();
    test_model_names();
    test_frames();
    test_misc();
    test_status_on_wire();
    msgpack_sbuffer_destroy(&sb);
    if (failures) {
        fprintf(stderr, "test_proto: %d checks failed\n", failures);
        return failures > 100 ? 100 : failures;
    }
    printf("test_proto: all checks passed\n");
    return 0;
}
