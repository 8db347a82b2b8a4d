/* test_proto.c — the wire codec (proto/) on its own: round trips of every
 * op and dtype, every prevalidate rule, every request error code, frame
 * checks and the tolerant reply decoder. The resident-model ops are in
 * test_proto_models.c, the control messages between daemons in
 * test_cluster_msg.c.
 *
 * Plain checks that print the failing case; the exit status is the number
 * of failures (capped), so CTest sees any of them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "support/proto_test.h"

static const int64_t SKV[4] = { 2, 7, 2, 8 };  /* k, v (B, Skv, Hkv, D) */

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
    mpb(&sb, "M4 si si si si", "v", 3, "id", 7, "op", 1, "status", 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_VERSION && d.id == 7, "reply v=3: %s", wf_status_name(rc));
    B();
    mpb(&sb, "M4 si si si si", "v", 0, "id", 7, "op", 1, "status", 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_VERSION && d.id == 7, "reply v=0: %s", wf_status_name(rc));
    /* a version-1 daemon's reply is understood */
    B();
    mpb(&sb, "M4 si si si si", "v", 1, "id", 7, "op", 1, "status", 0);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.version == 1, "reply v=1: %s", wf_status_name(rc));
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
    B(); mpb(&sb, "M3 si si si", "v", 3, "id", 6, "op", 1);
    expect_req("v = 3", WF_E_VERSION, 6, "version 3");
    B(); mpb(&sb, "M3 si si si", "v", 0, "id", 6, "op", 1);
    expect_req("v = 0", WF_E_VERSION, 6, "version 0");
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
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 9, "op", 11);
    expect_req("op 11 (after end_session)", WF_E_UNKNOWN_OP, 9, "11");
    /* cancel (op 9): {"id": uint}, nothing else */
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 9, "op", 9);
    expect_req("cancel without args.id", WF_E_BAD_FIELD, 9, "args.id");
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 9, "op", 9, "args", "id", "x");
    expect_req("cancel with a str id", WF_E_BAD_FIELD, 9, "args.id");
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 9, "op", 9, "args", "job", 3);
    expect_req("cancel with an unknown key", WF_E_BAD_FIELD, 9, "job");

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
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 si", "deadline_ms", 200);
    expect_req("deadline_ms 200", WF_OK, 12, NULL);
    {
        wf_request_t dr;
        CHECK(wf_request_decode(sb.data, sb.size, &lim, &dr, NULL, 0) == WF_OK &&
              dr.args.attention.deadline_ms == 200, "deadline_ms decoded as %u",
              dr.args.attention.deadline_ms);
    }
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 si", "deadline_ms", -1);
    expect_req("deadline_ms -1", WF_E_BAD_FIELD, 12, "args.deadline_ms");
    B(); attn_prefix(12, SQ, SKV, SKV); mpb(&sb, "M1 sU", "deadline_ms", (uint64_t)1 << 32);
    expect_req("deadline_ms 2^32", WF_E_BAD_FIELD, 12, "args.deadline_ms");
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
                                        WF_E_PROTOCOL, WF_E_PENDING, WF_E_AUTH,
                                        WF_E_CONN_CLOSED, (wf_status_t)100,
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
    test_frames();
    test_misc();
    test_status_on_wire();
    msgpack_sbuffer_destroy(&sb);
    if (failed) {
        fprintf(stderr, "test_proto: %d checks failed\n", failed);
        return failed > 100 ? 100 : failed;
    }
    printf("test_proto: all checks passed\n");
    return 0;
}
