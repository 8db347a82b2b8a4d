/* test_cluster_models_msg.c — the resident-model control messages of
 * proto/cluster_msg.h on their own (mload, mfound, mgo, mdrop, mread,
 * mready, fjob; PROTOCOL.md sections 11 and 12.7):
 *   - each survives put, encode, decode, get unchanged;
 *   - get refuses a missing key, a value out of range, a bad name or
 *     path (a peer's text reaches logs), an unknown dtype, with a stable
 *     status and a message naming the key; optional keys may be absent.
 * Exits non-zero when a check failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"
#include "proto.h"
#include "support/check.h"

static wf_ctl_msg_t m1, m2;
static wf_cmsg_t in, out;

/* put -> encode -> decode -> get; the status of get, its message in err. */
static wf_status_t wire(const wf_cmsg_t *msg, wf_cmsg_t *ret, char *err, size_t len)
{
    wf_buf_t b = { 0 };
    wf_status_t st = wf_cmsg_put(&m1, msg);
    if (st == WF_OK)
        st = wf_ctl_encode(&m1, &b);
    if (st == WF_OK)
        st = wf_ctl_decode(b.data, b.len, &m2, err, len);
    wf_buf_free(&b);
    return st == WF_OK ? wf_cmsg_get(&m2, ret, err, len) : st;
}

/* get of m1 after f(m1) edited it. */
static wf_status_t edited(const wf_cmsg_t *msg, const char *key, bool drop,
                          bool is_str, uint64_t u, const char *s, char *err,
                          size_t len)
{
    CHECK_TRUE(wf_cmsg_put(&m1, msg) == WF_OK);
    wf_ctl_init(&m2);
    for (uint32_t i = 0; i < m1.n; i++) {
        const wf_ctl_field_t *f = &m1.f[i];
        if (strcmp(f->key, key) == 0) {
            if (drop)
                continue;
            if (is_str)
                wf_ctl_put_str(&m2, key, s);
            else
                wf_ctl_put_uint(&m2, key, u);
        } else if (f->is_str) {
            wf_ctl_put_str(&m2, f->key, f->s);
        } else {
            wf_ctl_put_uint(&m2, f->key, f->u);
        }
    }
    return wf_cmsg_get(&m2, &out, err, len);
}

int main(void)
{
    char err[WF_PROTO_ERROR_MAX];

    /* mload */
    memset(&in, 0, sizeof in);
    in.type = WF_CMSG_MLOAD;
    in.u.mload.lid = (UINT64_C(0x9e3779b9) << 32) | 7;
    snprintf(in.u.mload.name, sizeof in.u.mload.name, "flux-dev.1");
    snprintf(in.u.mload.path, sizeof in.u.mload.path, "models/flux-dev");
    in.u.mload.sharded = true;
    in.u.mload.tp = 4;
    CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK);
    CHECK_TRUE(out.type == WF_CMSG_MLOAD && memcmp(&in.u.mload, &out.u.mload,
                                                   sizeof in.u.mload) == 0);
    CHECK_TRUE(edited(&in, "path", false, true, 0, "../etc", err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "'path'") != NULL);
    CHECK_TRUE(edited(&in, "path", false, true, 0, "/abs", err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "name", false, true, 0, "a b\x1b", err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "'name'") != NULL);
    CHECK_TRUE(edited(&in, "lid", false, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "name", true, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(strstr(err, "missing") != NULL);
    CHECK_TRUE(edited(&in, "sharded", true, false, 0, NULL, err, sizeof err) == WF_OK &&
               !out.u.mload.sharded);
    CHECK_TRUE(edited(&in, "sharded", false, false, 2, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "tp", true, false, 0, NULL, err, sizeof err) == WF_OK &&
               out.u.mload.tp == 0);
    CHECK_TRUE(edited(&in, "tp", false, false, 65537, NULL, err, sizeof err) == WF_E_BAD_FIELD);

    /* mfound */
    memset(&in, 0, sizeof in);
    in.type = WF_CMSG_MFOUND;
    in.u.mfound.lid = 9;
    in.u.mfound.st = WF_E_MISMATCH;
    snprintf(in.u.mfound.err, sizeof in.u.mfound.err, "model file 'x' does not exist");
    in.u.mfound.d = (wf_cmsg_digest_t){ UINT64_MAX, 1, 2, 3, 4, 5 };
    CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK);
    CHECK_TRUE(memcmp(&in.u.mfound, &out.u.mfound, sizeof in.u.mfound) == 0);
    CHECK_TRUE(edited(&in, "error", true, false, 0, NULL, err, sizeof err) == WF_OK &&
               out.u.mfound.err[0] == '\0');
    CHECK_TRUE(edited(&in, "headers", true, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "st", false, true, 0, "0", err, sizeof err) == WF_E_BAD_FIELD);

    /* mgo, mdrop, mread, mready */
    const wf_cmsg_type_t steps[] = { WF_CMSG_MGO, WF_CMSG_MDROP };
    for (int i = 0; i < 2; i++) {
        memset(&in, 0, sizeof in);
        in.type = steps[i];
        in.u.mstep.lid = 77;
        CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK);
        CHECK_TRUE(out.type == steps[i] && out.u.mstep.lid == 77);
    }
    const wf_cmsg_type_t res[] = { WF_CMSG_MREAD, WF_CMSG_MREADY };
    for (int i = 0; i < 2; i++) {
        memset(&in, 0, sizeof in);
        in.type = res[i];
        in.u.mres.lid = 5;
        in.u.mres.st = WF_E_NO_MEMORY;
        snprintf(in.u.mres.err, sizeof in.u.mres.err, "does not fit");
        CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK);
        CHECK_TRUE(out.type == res[i] && memcmp(&in.u.mres, &out.u.mres, sizeof in.u.mres) == 0);
        CHECK_TRUE(edited(&in, "lid", true, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    }

    /* fjob */
    memset(&in, 0, sizeof in);
    in.type = WF_CMSG_FJOB;
    wf_cfjob_t *f = &in.u.fjob;
    f->seq = 100;
    f->epoch = 4;
    f->id = 55;
    f->base = 2;
    f->g = 2;
    f->lid = (UINT64_C(3) << 32) | 1;
    /* FLUX's inputs, and a sixth of rank 5 (a video latent) */
    static const struct { const char *name; wf_dtype_t dt; int64_t shape[6]; } ins[] = {
        { "hidden_states", WF_DTYPE_BF16, { 2, 4096, 64 } },
        { "encoder_hidden_states", WF_DTYPE_BF16, { 2, 512, 4096 } },
        { "pooled_projections", WF_DTYPE_F16, { 2, 768 } },
        { "timestep", WF_DTYPE_F32, { 2 } },
        { "img_ids", WF_DTYPE_F32, { 4096, 3 } },
        { "latents", WF_DTYPE_BF16, { 1, 16, 21, 60, 104, 1 } },
    };
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        snprintf(f->t[i].name, sizeof f->t[i].name, "%s", ins[i].name);
        f->t[i].dt = ins[i].dt;
        memcpy(f->t[i].shape, ins[i].shape, sizeof ins[i].shape);
    }
    f->odt = WF_DTYPE_BF16;
    for (int k = 0; k < 4; k++) {
        f->fp8 = k & 1;
        f->alltoall = k >= 2;
        CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK);
        CHECK_TRUE(out.type == WF_CMSG_FJOB && memcmp(f, &out.u.fjob, sizeof *f) == 0);
    }
    CHECK_TRUE(edited(&in, "t0s1", false, false, 0, NULL, err, sizeof err) == WF_E_BAD_SHAPE);
    CHECK_TRUE(edited(&in, "t1s1", false, false, UINT64_C(1) << 31, NULL, err, sizeof err) ==
               WF_E_BAD_SHAPE);
    CHECK_TRUE(edited(&in, "t0d", false, false, 9, NULL, err, sizeof err) == WF_E_BAD_DTYPE);
    CHECK_TRUE(strstr(err, "'t0d'") != NULL);
    CHECK_TRUE(edited(&in, "g", false, false, 65, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "lid", false, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    /* a gap: input 0 without a name, or a dim missing inside a shape */
    CHECK_TRUE(edited(&in, "t0", true, false, 0, NULL, err, sizeof err) == WF_E_BAD_FIELD);
    CHECK_TRUE(edited(&in, "t1s1", true, false, 0, NULL, err, sizeof err) == WF_E_BAD_SHAPE);
    CHECK_TRUE(strstr(err, "gap") != NULL);
    /* names reach logs: only [A-Za-z0-9._-] */
    CHECK_TRUE(edited(&in, "t2", false, true, 0, "a\nb", err, sizeof err) != WF_OK);

    /* the channel takes a forward's 8 inputs, not 9 */
    memset(&in, 0, sizeof in);
    in.type = WF_CMSG_XFER_IN;
    in.u.xfer = (wf_cmsg_xfer_t){ .epoch = 3, .seq = 9, .n = 8 };
    CHECK_TRUE(wire(&in, &out, err, sizeof err) == WF_OK && out.u.xfer.n == 8);
    CHECK_TRUE(edited(&in, "n", false, false, 9, NULL, err, sizeof err) == WF_E_BAD_FIELD);

    printf("test_cluster_models_msg: %s (%d failure(s))\n", failed ? "FAILED" : "ok",
           failed);
    return failed ? 1 : 0;
}
