/* test_badinput.c — end to end: a real weftd against malformed requests.
 *
 * Starts weftd (argv[1]) on a private ipc endpoint with a 1 MiB tensor
 * limit, then speaks raw ZeroMQ + msgpack to it (no libweft, so the bytes
 * are exactly the ones under test). Every bad request must get exactly one
 * error reply with the right stable code and the request's id when the id
 * could be read; after each one a good small attention job must still
 * succeed and match an fp64 reference. At the end the daemon must still be
 * alive, and SIGTERM must make it exit 0. The resident-model ops (load,
 * unload, list, forward) get their malformed requests too; the daemon has
 * no model root, so even the well-formed loads are refused.
 *
 * Every receive goes through zmq_poll with a timeout: a daemon that stays
 * silent fails the test instead of hanging it; the daemon is started and
 * stopped through support/spawn.h (a stop past its bound is reported).
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "proto.h"
#include "fuzz/mp_build.h"
#include "support/check.h"
#include "support/spawn.h"

#define REPLY_TIMEOUT_MS 20000
#define MAX_PARTS 24
#define MAX_TENSOR_BYTES 1048576

/* weftd's stderr (its log, at level info) goes here; checked at the end
 * for forged lines. */
static char log_path[80];

/* Good job: q (1, 4, 2, 8), k / v (1, 5, 1, 8) f32, GQA 2:1, causal,
 * scale 0.3, lse requested. */
enum { B_ = 1, SQ_ = 4, HQ_ = 2, D_ = 8, SKV_ = 5, HKV_ = 1 };
#define NQ (B_ * SQ_ * HQ_ * D_)
#define NKV (B_ * SKV_ * HKV_ * D_)
#define SCALE 0.3

typedef struct t {
    void *zctx;
    void *sock;
    spawn_t d;                 /* the daemon */
    uint64_t next_id;
    int bad_cases;
    float q[NQ], k[NKV], v[NKV];
    double ref_out[NQ];
    double ref_lse[B_ * SQ_ * HQ_];
    msgpack_sbuffer sb;
} t_t;

/* A received multipart message, copied out of ZeroMQ (frames arrive at
 * arbitrary alignment). */
typedef struct msg {
    int n;
    size_t len[MAX_PARTS];
    unsigned char *part[MAX_PARTS];
} msg_t;

static void msg_free(msg_t *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->part[i]);
    m->n = 0;
}

/* One frame to send. */
typedef struct frame {
    const void *p;
    size_t n;
} frame_t;

static int send_parts(t_t *t, bool delimiter, const void *hdr, size_t hlen,
                      const frame_t *frames, int nframes)
{
    /* hdr NULL: a message of the delimiter alone */
    if (delimiter && zmq_send(t->sock, "", 0, hdr ? ZMQ_SNDMORE : 0) < 0)
        return -1;
    if (hdr && zmq_send(t->sock, hdr, hlen, nframes > 0 ? ZMQ_SNDMORE : 0) < 0)
        return -1;
    for (int i = 0; i < nframes; i++)
        if (zmq_send(t->sock, frames[i].p, frames[i].n, i + 1 < nframes ? ZMQ_SNDMORE : 0) < 0)
            return -1;
    return 0;
}

/* Wait up to timeout_ms for one whole message. Returns 0, or -1 on
 * timeout / error. */
static int recv_msg(t_t *t, int timeout_ms, msg_t *m)
{
    zmq_pollitem_t it = { t->sock, 0, ZMQ_POLLIN, 0 };
    m->n = 0;
    if (zmq_poll(&it, 1, timeout_ms) <= 0 || !(it.revents & ZMQ_POLLIN))
        return -1;
    int more = 1;
    while (more) {
        zmq_msg_t zm;
        zmq_msg_init(&zm);
        if (zmq_msg_recv(&zm, t->sock, 0) < 0) {
            zmq_msg_close(&zm);
            msg_free(m);
            return -1;
        }
        more = zmq_msg_more(&zm);
        if (m->n < MAX_PARTS) {
            size_t n = zmq_msg_size(&zm);
            m->part[m->n] = malloc(n ? n : 1);
            memcpy(m->part[m->n], zmq_msg_data(&zm), n);
            m->len[m->n] = n;
            m->n++;
        }
        zmq_msg_close(&zm);
    }
    return 0;
}

/* Receive the reply to `id`: a message whose header decodes, with the
 * delimiter echoed iff one was sent. Returns the header's part index or -1. */
static int recv_reply(t_t *t, const char *what, bool delimiter, msg_t *m, wf_reply_t *rep)
{
    char err[WF_PROTO_ERROR_MAX];
    if (recv_msg(t, REPLY_TIMEOUT_MS, m) != 0) {
        CHECK(0, "%s: no reply within %d ms", what, REPLY_TIMEOUT_MS);
        return -1;
    }
    int h = 0;
    if (delimiter) {
        CHECK(m->n >= 2 && m->len[0] == 0, "%s: empty delimiter not echoed", what);
        if (m->n < 2 || m->len[0] != 0) {
            msg_free(m);
            return -1;
        }
        h = 1;
    }
    if (m->n <= h) {
        CHECK(0, "%s: reply has no header", what);
        msg_free(m);
        return -1;
    }
    wf_status_t rc = wf_reply_decode(m->part[h], m->len[h], rep, err, sizeof(err));
    if (rc != WF_OK) {
        CHECK(0, "%s: reply header does not decode: %s %s", what, wf_status_name(rc), err);
        msg_free(m);
        return -1;
    }
    return h;
}

/* ---- the good job ---- */

static void fill_inputs(t_t *t)
{
    uint32_t s = 12345;
    float *all[3] = { t->q, t->k, t->v };
    int n[3] = { NQ, NKV, NKV };
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < n[a]; i++) {
            s = s * 1664525u + 1013904223u;
            all[a][i] = (float)((double)(s >> 8) / (double)(1u << 24) * 2.0 - 1.0);
        }
    /* fp64 reference: causal top-left, query i sees keys j <= i */
    for (int b = 0; b < B_; b++)
        for (int i = 0; i < SQ_; i++)
            for (int h = 0; h < HQ_; h++) {
                int kh = h / (HQ_ / HKV_);
                const float *qr = &t->q[((b * SQ_ + i) * HQ_ + h) * D_];
                double sc[SKV_], mx = -INFINITY;
                int nvis = i + 1 < SKV_ ? i + 1 : SKV_;
                for (int j = 0; j < nvis; j++) {
                    const float *kr = &t->k[((b * SKV_ + j) * HKV_ + kh) * D_];
                    double dot = 0;
                    for (int d = 0; d < D_; d++)
                        dot += (double)qr[d] * kr[d];
                    sc[j] = dot * (double)(float)SCALE;
                    if (sc[j] > mx)
                        mx = sc[j];
                }
                double sum = 0, acc[D_] = { 0 };
                for (int j = 0; j < nvis; j++) {
                    double w = exp(sc[j] - mx);
                    sum += w;
                    const float *vr = &t->v[((b * SKV_ + j) * HKV_ + kh) * D_];
                    for (int d = 0; d < D_; d++)
                        acc[d] += w * vr[d];
                }
                for (int d = 0; d < D_; d++)
                    t->ref_out[((b * SQ_ + i) * HQ_ + h) * D_ + d] = acc[d] / sum;
                t->ref_lse[(b * SQ_ + i) * HQ_ + h] = mx + log(sum);
            }
}

static const int64_t GQ[4] = { B_, SQ_, HQ_, D_ };
static const int64_t GKV[4] = { B_, SKV_, HKV_, D_ };

/* {v, id, op: 3, tensors: [q, k, v], args: {scale, causal, return_lse}} */
static void good_header(msgpack_sbuffer *sb, uint64_t id)
{
    mpb(sb, "M5 si sU si s A3", "v", 1, "id", id, "op", 3, "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    mpb(sb, "s M3 sd sb sb", "args", "scale", SCALE, "causal", 1, "return_lse", 1);
}

static int good_frames(t_t *t, frame_t *f)
{
    f[0] = (frame_t){ t->q, sizeof(t->q) };
    f[1] = (frame_t){ t->k, sizeof(t->k) };
    f[2] = (frame_t){ t->v, sizeof(t->v) };
    return 3;
}

static const wf_tensor_desc_t *find_out(const wf_reply_t *rep, const char *name)
{
    for (uint32_t i = 0; i < rep->n_tensors; i++)
        if (strcmp(rep->tensors[i].name, name) == 0)
            return &rep->tensors[i];
    return NULL;
}

/* Run the good job and check every number. Returns 0 when all matched. */
static int good_job(t_t *t, const char *after, bool delimiter)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint64_t id = t->next_id++;
    good_header(&sb, id);
    frame_t f[3];
    int before = failed;
    if (send_parts(t, delimiter, sb.data, sb.size, f, good_frames(t, f)) != 0)
        CHECK(0, "good job after %s: send failed: %s", after, zmq_strerror(errno));
    msgpack_sbuffer_destroy(&sb);

    msg_t m;
    wf_reply_t rep;
    char what[160];
    snprintf(what, sizeof(what), "good job after \"%s\"", after);
    int h = recv_reply(t, what, delimiter, &m, &rep);
    if (h < 0)
        return -1;
    CHECK(rep.id == id, "%s: reply id %llu, want %llu (an extra reply to the bad request?)",
          what, (unsigned long long)rep.id, (unsigned long long)id);
    CHECK(rep.status == WF_OK, "%s: status %s: %s", what, wf_status_name(rep.status),
          rep.error);
    const wf_tensor_desc_t *o = find_out(&rep, "out"), *l = find_out(&rep, "lse");
    CHECK(o && l && rep.n_tensors == 2, "%s: reply lacks out / lse", what);
    if (rep.status != WF_OK || !o || !l || rep.n_tensors != 2) {
        msg_free(&m);
        return -1;
    }
    CHECK(m.n == h + 1 + 2, "%s: %d parts, want header + 2 frames", what, m.n);
    CHECK(o->dtype == WF_DTYPE_F32 && o->rank == 4 && memcmp(o->shape, GQ, sizeof(GQ)) == 0,
          "%s: out descriptor", what);
    CHECK(l->dtype == WF_DTYPE_F32 && l->rank == 3 && memcmp(l->shape, GQ, 3 * sizeof(int64_t)) == 0,
          "%s: lse descriptor", what);
    if (m.n != h + 3 || m.len[h + 1 + o->frame] != sizeof(float) * NQ ||
        m.len[h + 1 + l->frame] != sizeof(float) * B_ * SQ_ * HQ_) {
        CHECK(0, "%s: output frame sizes", what);
        msg_free(&m);
        return -1;
    }
    float out[NQ], lse[B_ * SQ_ * HQ_];
    memcpy(out, m.part[h + 1 + o->frame], sizeof(out));
    memcpy(lse, m.part[h + 1 + l->frame], sizeof(lse));
    /* f32 compute with fp32 accumulation over D = 8, S = 5 */
    const double atol = 2e-5, rtol = 2e-5;
    double worst = 0;
    for (int i = 0; i < NQ; i++) {
        double e = fabs(out[i] - t->ref_out[i]);
        if (e > worst)
            worst = e;
        CHECK(e <= atol + rtol * fabs(t->ref_out[i]), "%s: out[%d] = %.7g, ref %.7g", what,
              i, out[i], t->ref_out[i]);
    }
    for (int i = 0; i < B_ * SQ_ * HQ_; i++)
        CHECK(fabs(lse[i] - t->ref_lse[i]) <= atol + rtol * fabs(t->ref_lse[i]),
              "%s: lse[%d] = %.7g, ref %.7g", what, i, lse[i], t->ref_lse[i]);
    msg_free(&m);
    return failed == before ? 0 : -1;
}

/* ---- bad requests ---- */

/* Send one bad request, expect exactly one error reply with `want` and
 * `want_id`, then prove the daemon still serves. */
static void bad(t_t *t, const char *what, bool delimiter, const void *hdr, size_t hlen,
                const frame_t *frames, int nframes, wf_status_t want, uint64_t want_id)
{
    t->bad_cases++;
    if (send_parts(t, delimiter, hdr, hlen, frames, nframes) != 0) {
        CHECK(0, "%s: send failed: %s", what, zmq_strerror(errno));
        return;
    }
    msg_t m;
    wf_reply_t rep;
    int h = recv_reply(t, what, delimiter, &m, &rep);
    if (h >= 0) {
        CHECK(rep.status == want, "%s: got %s (%s), want %s", what,
              wf_status_name(rep.status), rep.error, wf_status_name(want));
        CHECK(rep.id == want_id, "%s: reply id %llu, want %llu", what,
              (unsigned long long)rep.id, (unsigned long long)want_id);
        CHECK(rep.error[0] != '\0', "%s: error reply without a message", what);
        CHECK(m.n == h + 1 && rep.n_tensors == 0, "%s: error reply carries frames", what);
        msg_free(&m);
    }
    good_job(t, what, false);
}

/* bad() with the header in t->sb and the good job's three frames */
static void bad_sb(t_t *t, const char *what, wf_status_t want, uint64_t want_id)
{
    frame_t f[3];
    bad(t, what, false, t->sb.data, t->sb.size, f, good_frames(t, f), want, want_id);
}

static void hdr_begin(t_t *t, int entries, uint64_t id)
{
    msgpack_sbuffer_clear(&t->sb);
    mpb(&t->sb, "M* si sU si", entries, "v", 1, "id", id, "op", 3);
}

/* A good attention header whose tensors are (name, dtype, shape, frame)
 * as given, with empty args. */
static void hdr_tensors(t_t *t, uint64_t id, int n, const char *const *names,
                        const char *const *dtypes, const int *ranks,
                        const int64_t *const *shapes, const int *frames)
{
    hdr_begin(t, 5, id);
    mpb(&t->sb, "s A*", "tensors", n);
    for (int i = 0; i < n; i++)
        mpb_tensor(&t->sb, names[i], dtypes[i], ranks[i], shapes[i], frames[i]);
    mpb(&t->sb, "s M0", "args");
}

/* the good header with the k descriptor's shape replaced */
static void hdr_kshape(t_t *t, uint64_t id, int rank, const int64_t *kshape)
{
    const char *names[3] = { "q", "k", "v" }, *dts[3] = { "f32", "f32", "f32" };
    const int ranks[3] = { 4, rank, 4 }, frames[3] = { 0, 1, 2 };
    const int64_t *shapes[3] = { GQ, kshape, GKV };
    hdr_tensors(t, id, 3, names, dts, ranks, shapes, frames);
}

/* the good header with args replaced by a map written by fmt */
static void hdr_args(t_t *t, uint64_t id)
{
    hdr_begin(t, 5, id);
    mpb(&t->sb, "s A3", "tensors");
    mpb_tensor(&t->sb, "q", "f32", 4, GQ, 0);
    mpb_tensor(&t->sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(&t->sb, "v", "f32", 4, GKV, 2);
    mpb(&t->sb, "s", "args");
}

/* Resident-model ops (5-8) against a daemon without a model root: every
 * malformed request refused by the decoder with its code, every valid one
 * by the daemon (no model root, no such model), and the daemon serving
 * after each. */
static void run_bad_model_cases(t_t *t)
{
    msgpack_sbuffer *sb = &t->sb;
    frame_t f[8];
    good_frames(t, f);
    /* load_model */
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M3 ss ss si", "v", 1, "id", 1200, "op", 5, "args", "name", "m",
        "path", "flux", "colour", 1);
    bad(t, "load_model unknown arg", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD, 1200);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M2 ss ss", "v", 1, "id", 1201, "op", 5, "args", "name", "a/b",
        "path", "flux");
    bad(t, "load_model name with '/'", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD,
        1201);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M2 ss ss", "v", 1, "id", 1202, "op", 5, "args", "name", "m",
        "path", "/etc");
    bad(t, "load_model absolute path", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD,
        1202);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M2 ss ss", "v", 1, "id", 1203, "op", 5, "args", "name", "m",
        "path", "a/../../etc");
    bad(t, "load_model '..' path", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD, 1203);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M3 ss ss s M1 ss", "v", 1, "id", 1204, "op", 5, "args", "name",
        "m", "path", "flux", "tp_plan", "transformer_blocks.*.attn.to_q", "diagonal");
    bad(t, "load_model unknown tp style", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_FIELD, 1204);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M3 ss ss s M1 s M1 ss", "v", 1, "id", 1205, "op", 5, "args",
        "name", "m", "path", "flux", "tp_plan", "single_transformer_blocks.*.proj_out",
        "style", "packed_rowwise");
    bad(t, "load_model packed rule without blocks", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_FIELD, 1205);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M5 si si si s A1", "v", 1, "id", 1206, "op", 5, "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    mpb(sb, "s M2 ss ss", "args", "name", "m", "path", "flux");
    bad(t, "load_model with a tensor", false, sb->data, sb->size, f, 1, WF_E_BAD_ARGUMENT,
        1206);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M2 ss ss", "v", 1, "id", 1207, "op", 5, "args", "name", "m",
        "path", "flux");
    bad(t, "load_model without a model root", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_ARGUMENT, 1207);
    /* unload_model / list_models */
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 ss", "v", 1, "id", 1210, "op", 6, "args", "name", "ghost");
    bad(t, "unload_model of no model", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_ARGUMENT, 1210);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 si", "v", 1, "id", 1211, "op", 7, "args", "all", 1);
    bad(t, "list_models with an arg", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD,
        1211);
    /* forward: (B=1, S_img=2, C=4), (1, 2, 4), (1, 4), (1), (2, 3), (2, 3) */
    static const int64_t hs[3] = { 1, 2, 4 }, enc[3] = { 1, 2, 4 }, pooled[2] = { 1, 4 },
                         ts[1] = { 1 }, ids[2] = { 2, 3 };
    static float buf[64];
    frame_t ff[6] = { { buf, 32 }, { buf, 32 }, { buf, 16 }, { buf, 4 }, { buf, 24 },
                      { buf, 24 } };
    const char *names[6] = { "hidden_states", "encoder_hidden_states", "pooled_projections",
                             "timestep", "img_ids", "txt_ids" };
    const int64_t *shapes[6] = { hs, enc, pooled, ts, ids, ids };
    const int ranks[6] = { 3, 3, 2, 1, 2, 2 };
    for (int c = 0; c < 3; c++) {
        /* 0: a valid request for a model that is not loaded; 1: no
         * tensors at all; 2: the hidden_states frame one float short */
        int n = c == 1 ? 0 : 6;
        msgpack_sbuffer_clear(sb);
        mpb(sb, "M5 si sU si s A*", "v", 1, "id", (uint64_t)(1220 + c), "op", 8,
            "tensors", n);
        for (int i = 0; i < n; i++)
            mpb_tensor(sb, names[i], "f32", ranks[i], shapes[i], i);
        mpb(sb, "s M1 ss", "args", "model", "ghost");
        frame_t fc[6];
        memcpy(fc, ff, sizeof fc);
        if (c == 2)
            fc[0].n -= 4;
        static const char *const what[3] = { "forward on no model",
                                             "forward without tensors",
                                             "forward frame one float short" };
        static const wf_status_t want[3] = { WF_E_BAD_ARGUMENT, WF_E_BAD_FIELD,
                                             WF_E_FRAME_MISMATCH };
        bad(t, what[c], false, sb->data, sb->size, fc, n, want[c], (uint64_t)(1220 + c));
    }
}

#define FORGED "q\n<0>kernel: EMERG forged"

/* A tensor name holding a newline and a forged priority prefix: refused
 * (attention takes q, k, v only: WF_E_BAD_ARGUMENT), with a reply whose text is printable
 * ASCII and quotes the name escaped. check_log reads weftd's log after. */
static void forged_name(t_t *t)
{
    uint64_t id = 1100;
    hdr_begin(t, 5, id);
    mpb(&t->sb, "s A4", "tensors");
    mpb_tensor(&t->sb, "q", "f32", 4, GQ, 0);
    mpb_tensor(&t->sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(&t->sb, "v", "f32", 4, GKV, 2);
    mpb_tensor(&t->sb, FORGED, "f32", 4, GKV, 3);
    mpb(&t->sb, "s M0", "args");
    frame_t f[4];
    good_frames(t, f);
    f[3] = f[2];
    t->bad_cases++;
    if (send_parts(t, false, t->sb.data, t->sb.size, f, 4) != 0) {
        CHECK(0, "forged name: send failed");
        return;
    }
    msg_t m;
    wf_reply_t rep;
    if (recv_reply(t, "forged name", false, &m, &rep) >= 0) {
        CHECK(rep.status == WF_E_BAD_ARGUMENT && rep.id == id, "forged name: got %s id %llu",
              wf_status_name(rep.status), (unsigned long long)rep.id);
        for (size_t i = 0; rep.error[i]; i++)
            CHECK(rep.error[i] >= 0x20 && rep.error[i] < 0x7f,
                  "forged name: reply text byte %zu is 0x%02x", i,
                  (unsigned)(unsigned char)rep.error[i]);
        CHECK(strstr(rep.error, "q\\n<0>kernel: EMERG forged") != NULL,
              "forged name: reply does not quote the name escaped: %s", rep.error);
        msg_free(&m);
    }
    good_job(t, "forged name", false);
}

/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF) of
 * len bytes. */
static bool utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n;
        unsigned min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (i + n >= len)
            return false; /* truncated sequence */
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += n + 1;
    }
    return true;
}

/* The raw bytes of the reply header's "error" str (what a strict msgpack
 * decoder sees, before any library copies it): NULL when not found. */
static const unsigned char *raw_error(const unsigned char *h, size_t len, size_t *ret_len)
{
    static const unsigned char key[] = { 0xa5, 'e', 'r', 'r', 'o', 'r' };
    for (size_t i = 0; i + sizeof key < len; i++) {
        if (memcmp(h + i, key, sizeof key) != 0)
            continue;
        size_t p = i + sizeof key, n;
        if ((h[p] & 0xe0) == 0xa0) {
            n = h[p] & 0x1f, p += 1;
        } else if (h[p] == 0xd9 && p + 1 < len) {
            n = h[p + 1], p += 2;
        } else if (h[p] == 0xda && p + 2 < len) {
            n = (size_t)h[p + 1] << 8 | h[p + 2], p += 3;
        } else {
            return NULL;
        }
        if (p + n > len)
            return NULL;
        *ret_len = n;
        return h + p;
    }
    return NULL;
}

/* An oversized tensor (4 MiB, the limit is 1 MiB) whose name holds bytes
 * 0x80-0xff (no valid UTF-8 sequence) and control bytes: WF_E_LIMIT, and
 * the reply's error text, as sent, valid UTF-8 and printable ASCII. */
static void binary_name(t_t *t)
{
    uint64_t id = 1200;
    static const char name[] = "q\x80\xc3\x28\xff\xfe\x01\x1b[2J\n\r\t\x7f\xe2\x82\xc0\xaf\xed\xa0\x80z";
    static const int64_t big[4] = { 1, 1024, 256, 4 }; /* f32: 4 MiB */
    /* the validator itself: rejects the name, takes UTF-8 */
    CHECK(!utf8_valid((const unsigned char *)name, sizeof name - 1) &&
              utf8_valid((const unsigned char *)"a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 10) &&
              !utf8_valid((const unsigned char *)"\xed\xa0\x80", 3) &&
              !utf8_valid((const unsigned char *)"\xc0\xaf", 2),
          "binary name: utf8_valid is wrong");
    hdr_begin(t, 5, id);
    mpb(&t->sb, "s A3", "tensors");
    mpb_tensor(&t->sb, name, "f32", 4, big, 0);
    mpb_tensor(&t->sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(&t->sb, "v", "f32", 4, GKV, 2);
    mpb(&t->sb, "s M0", "args");
    frame_t f[3];
    good_frames(t, f);
    t->bad_cases++;
    if (send_parts(t, false, t->sb.data, t->sb.size, f, 3) != 0) {
        CHECK(0, "binary name: send failed");
        return;
    }
    msg_t m;
    wf_reply_t rep;
    int h = recv_reply(t, "binary name", false, &m, &rep);
    if (h >= 0) {
        CHECK(rep.status == WF_E_LIMIT && rep.id == id, "binary name: got %s id %llu (%s)",
              wf_status_name(rep.status), (unsigned long long)rep.id, rep.error);
        size_t n = 0;
        const unsigned char *e = raw_error(m.part[h], m.len[h], &n);
        CHECK(e != NULL && n > 0, "binary name: no error str in the reply header");
        if (e) {
            CHECK(utf8_valid(e, n), "binary name: the reply's error is not valid UTF-8");
            for (size_t i = 0; i < n; i++)
                CHECK(e[i] >= 0x20 && e[i] < 0x7f, "binary name: error byte %zu is 0x%02x",
                      i, (unsigned)e[i]);
            char text[WF_PROTO_ERROR_MAX];
            size_t tn = n < sizeof text - 1 ? n : sizeof text - 1;
            memcpy(text, e, tn);
            text[tn] = '\0';
            CHECK(strstr(text, "q\\x80\\xc3(") != NULL,
                  "binary name: the name is not quoted escaped: %s", text);
        }
        msg_free(&m);
    }
    good_job(t, "binary name", false);
}

/* weftd's log: no line forged by the name above (none starts "<0>" or
 * "kernel:"), and the refusal logged with the name escaped. */
static void check_log(void)
{
    FILE *f = fopen(log_path, "r");
    if (!f) {
        CHECK(0, "no log at %s", log_path);
        return;
    }
    char line[4096];
    int lines = 0, escaped = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        CHECK(strncmp(line, "<0>", 3) != 0 && strncmp(line, "kernel:", 7) != 0,
              "weftd log line %d is forged: %s", lines, line);
        CHECK(line[0] == '<' && line[1] >= '3' && line[1] <= '7' && line[2] == '>',
              "weftd log line %d has no priority prefix: %s", lines, line);
        escaped += strstr(line, "q\\n<0>kernel: EMERG forged") != NULL;
    }
    fclose(f);
    CHECK(escaped >= 1, "the refused forged name is not in weftd's log, escaped "
          "(%d lines)", lines);
}

static void run_bad_cases(t_t *t)
{
    msgpack_sbuffer *sb = &t->sb;
    frame_t f[5];
    good_frames(t, f);
    uint64_t id;

    /* --- bytes that are not a msgpack map --- */
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1001);
    bad(t, "truncated msgpack (half a good header)", false, sb->data, sb->size / 2, f, 3,
        WF_E_MALFORMED, id);
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1002);
    bad(t, "truncated msgpack (last byte missing)", false, sb->data, sb->size - 1, f, 3,
        WF_E_MALFORMED, id);
    /* an empty first frame is the REQ-style delimiter, so "no header" is
     * a message of that frame alone (PROTOCOL.md, Transport) */
    bad(t, "no header (a lone empty frame)", true, NULL, 0, NULL, 0, WF_E_MALFORMED, 0);
    bad(t, "empty header after a delimiter", true, "", 0, NULL, 0, WF_E_MALFORMED, 0);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "A3 si s", "v", 1, "id");
    bad_sb(t, "header is an array", WF_E_MALFORMED, 0);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "i", 42);
    bad_sb(t, "header is an integer", WF_E_MALFORMED, 0);
    static const unsigned char c1[] = { 0xc1 };
    bad(t, "never-used byte 0xc1", false, c1, 1, f, 3, WF_E_MALFORMED, 0);
    static const unsigned char arr32[] = { 0xdd, 0x80, 0, 0, 0, 1, 2, 3, 4, 5 };
    bad(t, "array32 of 2^31 in 10 bytes", false, arr32, sizeof(arr32), f, 3, WF_E_MALFORMED, 0);
    static const unsigned char str32[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b' };
    bad(t, "str32 of 4 GiB", false, str32, sizeof(str32), f, 3, WF_E_LIMIT, 0);
    /* the same lies inside a request map: the id before them is echoed */
    hdr_begin(t, 4, id = 1003);
    mpb(sb, "s R", "x", arr32, sizeof(arr32));
    bad_sb(t, "map holding an array32 of 2^31", WF_E_MALFORMED, id);
    hdr_begin(t, 4, id = 1004);
    static const unsigned char map32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 1, 2, 3 };
    mpb(sb, "s R", "x", map32, sizeof(map32));
    bad_sb(t, "map holding a map32 of 2^32-1", WF_E_MALFORMED, id);
    hdr_begin(t, 4, id = 1005);
    mpb(sb, "s R", "x", str32, sizeof(str32));
    bad_sb(t, "map holding a str32 of 4 GiB", WF_E_LIMIT, id);
    hdr_begin(t, 4, id = 1006);
    static const unsigned char bin32[] = { 0xc6, 0x7f, 0xff, 0xff, 0xff, 0 };
    mpb(sb, "s R", "x", bin32, sizeof(bin32));
    bad_sb(t, "map holding a bin32 of 2 GiB", WF_E_LIMIT, id);
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1007);
    mpb(sb, "n");
    bad_sb(t, "trailing bytes after the header", WF_E_MALFORMED, id);

    /* --- limits of the header --- */
    hdr_begin(t, 4, id = 1010);
    mpb(sb, "s", "deep");
    for (int i = 0; i < 40; i++)
        mpb(sb, "A1");
    mpb(sb, "i", 0);
    bad_sb(t, "nesting depth 41", WF_E_LIMIT, id);
    hdr_begin(t, 4, id = 1011);
    mpb(sb, "s A*", "many", 5000);
    for (int i = 0; i < 5000; i++)
        mpb(sb, "i", 0);
    bad_sb(t, "5000 elements", WF_E_LIMIT, id);
    hdr_begin(t, 4, id = 1012);
    mpb(sb, "s A*", "pad", 3500);
    for (int i = 0; i < 3500; i++)
        mpb(sb, "s", "0123456789abcdefghij");
    bad_sb(t, "header of 70 KiB", WF_E_LIMIT, id);
    hdr_begin(t, 4, id = 1013);
    mpb(sb, "s A17", "tensors");
    for (int i = 0; i < 17; i++) {
        char nm[8];
        snprintf(nm, sizeof(nm), "t%d", i);
        mpb_tensor(sb, nm, "f32", 4, GKV, i);
    }
    bad_sb(t, "17 tensors", WF_E_LIMIT, id);

    /* --- too many frames after a good header (the three good frames
     * first, then empty ones). Without a delimiter, identity + header +
     * 17 frames fit the daemon's receive array exactly: the count must
     * still be refused before the per-frame sizes are recorded (this
     * wrote one size past the end, which UBSan / ASan abort on). --- */
    {
        static const int counts[] = { 17, 18, 40 };
        frame_t many[40];
        good_frames(t, many);
        for (int i = 3; i < 40; i++)
            many[i] = (frame_t){ "", 0 };
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int d = 0; d < 2; d++) {
                char what[64];
                snprintf(what, sizeof what, "%d tensor frames%s", counts[c],
                         d ? ", with a delimiter" : "");
                msgpack_sbuffer_clear(sb);
                good_header(sb, id = 1014 + 2 * c + (uint64_t)d);
                bad(t, what, d, sb->data, sb->size, many, counts[c], WF_E_LIMIT, id);
            }
    }

    forged_name(t);
    binary_name(t);

    /* --- version --- */
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M2 si si", "id", 1020, "op", 1);
    bad_sb(t, "version missing", WF_E_VERSION, 1020);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si si", "v", 3, "id", 1021, "op", 1);
    bad_sb(t, "version 3", WF_E_VERSION, 1021);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 ss si si", "v", "1", "id", 1022, "op", 1);
    bad_sb(t, "version is a str", WF_E_VERSION, 1022);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si si", "v", 3, "id", 1023, "op", 3);
    bad(t, "version 3 with a REQ-style delimiter", true, sb->data, sb->size, f, 3,
        WF_E_VERSION, 1023);

    /* --- fields: wrong types, missing, unknown, duplicated --- */
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si ss si", "v", 1, "id", "1030", "op", 1);
    bad_sb(t, "id is a str", WF_E_BAD_FIELD, 0);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si si", "v", 1, "id", -5, "op", 1);
    bad_sb(t, "id negative", WF_E_BAD_FIELD, 0);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M2 si si", "v", 1, "op", 1);
    bad_sb(t, "id missing", WF_E_BAD_FIELD, 0);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M2 si si", "v", 1, "id", 1031);
    bad_sb(t, "op missing", WF_E_BAD_FIELD, 1031);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si ss", "v", 1, "id", 1032, "op", "attention");
    bad_sb(t, "op is a str", WF_E_BAD_FIELD, 1032);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si sd", "v", 1, "id", 1033, "op", 3.0);
    bad_sb(t, "op is a float", WF_E_BAD_FIELD, 1033);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M3 si si si", "v", 1, "id", 1034, "op", 77);
    bad_sb(t, "unknown op 77", WF_E_UNKNOWN_OP, 1034);
    hdr_begin(t, 4, id = 1035);
    mpb(sb, "s i", "priority", 1);
    bad_sb(t, "unknown top-level key", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1036);
    mpb(sb, "s i", "op", 3);
    bad_sb(t, "duplicate key op", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1037);
    mpb(sb, "s M0", "tensors");
    bad_sb(t, "tensors is a map", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1038);
    mpb(sb, "s A1 s", "tensors", "q");
    bad_sb(t, "tensor descriptor is a str", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1039);
    mpb(sb, "s", "causal");
    bad_sb(t, "args is a str", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1040);
    mpb(sb, "M1 ss", "scale", "0.5");
    bad_sb(t, "scale is a str", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1041);
    mpb(sb, "M1 si", "causal", 1);
    bad_sb(t, "causal is an integer", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1042);
    mpb(sb, "M1 ss", "return_lse", "yes");
    bad_sb(t, "return_lse is a str", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1043);
    mpb(sb, "M1 si", "devices", -2);
    bad_sb(t, "devices negative", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1044);
    mpb(sb, "M1 sb", "dropout", 1);
    bad_sb(t, "unknown args key", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1045);
    mpb(sb, "M2 sd sd", "scale", 0.5, "scale", 0.25);
    bad_sb(t, "duplicate args key", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1046);
    mpb(sb, "s A3", "tensors");
    mpb(sb, "M4 si ss sA4iiii si", "name", 1, "dtype", "f32", "shape", B_, SQ_, HQ_, D_, "frame", 0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "tensor name is an integer", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1047);
    mpb(sb, "s A3", "tensors");
    mpb(sb, "M4 ss si sA4iiii si", "name", "q", "dtype", 0, "shape", B_, SQ_, HQ_, D_, "frame", 0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "dtype is an integer", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1048);
    mpb(sb, "s A3", "tensors");
    mpb(sb, "M4 ss ss ss si", "name", "q", "dtype", "f32", "shape", "1x4x2x8", "frame", 0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "shape is a str", WF_E_BAD_FIELD, id);
    hdr_begin(t, 4, id = 1049);
    mpb(sb, "s A3", "tensors");
    mpb(sb, "M4 ss ss sA4iiii sd", "name", "q", "dtype", "f32", "shape", B_, SQ_, HQ_, D_,
        "frame", 0.0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "frame is a float", WF_E_BAD_FIELD, id);

    /* --- dtypes --- */
    {
        const char *names[3] = { "q", "k", "v" }, *dts[3] = { "f32", "f64", "f32" };
        const int ranks[3] = { 4, 4, 4 }, frames[3] = { 0, 1, 2 };
        const int64_t *shapes[3] = { GQ, GKV, GKV };
        hdr_tensors(t, id = 1050, 3, names, dts, ranks, shapes, frames);
        bad_sb(t, "unknown dtype f64", WF_E_BAD_DTYPE, id);
    }
    hdr_args(t, id = 1051);
    mpb(sb, "M1 ss", "out_dtype", "fp8");
    bad_sb(t, "unknown out_dtype fp8", WF_E_BAD_DTYPE, id);

    /* --- shapes --- */
    int64_t s[9] = { B_, SKV_, HKV_, D_ };
    s[2] = -1;
    hdr_kshape(t, id = 1060, 4, s);
    bad_sb(t, "negative dim", WF_E_BAD_SHAPE, id);
    s[2] = 0;
    hdr_kshape(t, id = 1061, 4, s);
    bad_sb(t, "zero dim", WF_E_BAD_SHAPE, id);
    s[2] = (int64_t)1 << 40; s[1] = (int64_t)1 << 40;
    hdr_kshape(t, id = 1062, 4, s);
    bad_sb(t, "element count overflows", WF_E_BAD_SHAPE, id);
    s[1] = (int64_t)1 << 31; s[2] = (int64_t)1 << 30; s[0] = 1; s[3] = 1;
    hdr_kshape(t, id = 1063, 4, s);
    bad_sb(t, "byte count overflows (2^61 f32)", WF_E_BAD_SHAPE, id);
    for (int i = 0; i < 9; i++)
        s[i] = 1;
    hdr_kshape(t, id = 1064, 9, s);
    bad_sb(t, "rank 9", WF_E_BAD_SHAPE, id);
    hdr_kshape(t, id = 1065, 0, s);
    bad_sb(t, "rank 0", WF_E_BAD_SHAPE, id);
    hdr_begin(t, 4, id = 1066);
    mpb(sb, "s A3", "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    mpb(sb, "M4 ss ss sA4 i i d i si", "name", "k", "dtype", "f32", "shape", B_, SKV_,
        (double)HKV_, D_, "frame", 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "dim is a float", WF_E_BAD_SHAPE, id);
    hdr_begin(t, 4, id = 1067);
    mpb(sb, "s A3", "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    mpb(sb, "M4 ss ss sA4 i i U i si", "name", "k", "dtype", "f32", "shape", B_, SKV_,
        (uint64_t)1 << 63, D_, "frame", 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    bad_sb(t, "dim 2^63 overflows int64", WF_E_BAD_SHAPE, id);

    /* --- tensor bytes and frames --- */
    {
        /* q one element over the 1 MiB limit, and its frame sent too
         * (below ZMQ_MAXMSGSIZE = 2 MiB, so the daemon sees it) */
        int64_t bigq[4] = { 1, 1, 1, MAX_TENSOR_BYTES / 4 + 1 };
        int64_t bigkv[4] = { 1, 1, 1, MAX_TENSOR_BYTES / 4 + 1 };
        const char *names[3] = { "q", "k", "v" }, *dts[3] = { "f32", "f32", "f32" };
        const int ranks[3] = { 4, 4, 4 }, frames[3] = { 0, 1, 2 };
        const int64_t *shapes[3] = { bigq, bigkv, bigkv };
        hdr_tensors(t, id = 1070, 3, names, dts, ranks, shapes, frames);
        size_t nb = (size_t)MAX_TENSOR_BYTES + 4;
        void *big = calloc(1, nb);
        frame_t bf[3] = { { big, nb }, { big, nb }, { big, nb } };
        bad(t, "tensor one element over max_tensor_bytes", false, sb->data, sb->size, bf, 3,
            WF_E_LIMIT, id);
        free(big);
    }
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1071);
    bad(t, "two frames for three tensors", false, sb->data, sb->size, f, 2,
        WF_E_FRAME_MISMATCH, id);
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1072);
    f[3] = f[2];
    bad(t, "four frames for three tensors", false, sb->data, sb->size, f, 4,
        WF_E_FRAME_MISMATCH, id);
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1073);
    bad(t, "no frames for three tensors", false, sb->data, sb->size, f, 0,
        WF_E_FRAME_MISMATCH, id);
    msgpack_sbuffer_clear(sb);
    good_header(sb, id = 1074);
    {
        frame_t g[3] = { f[0], f[1], { f[2].p, f[2].n - 4 } };
        bad(t, "frame 2 four bytes short", false, sb->data, sb->size, g, 3,
            WF_E_FRAME_MISMATCH, id);
    }
    {
        /* q described as frame 1 and k as frame 0, but sent in list order:
         * sizes differ, so the frame sizes no longer match */
        const char *names[3] = { "q", "k", "v" }, *dts[3] = { "f32", "f32", "f32" };
        const int ranks[3] = { 4, 4, 4 }, swapped[3] = { 1, 0, 2 };
        const int64_t *shapes[3] = { GQ, GKV, GKV };
        hdr_tensors(t, id = 1075, 3, names, dts, ranks, shapes, swapped);
        bad_sb(t, "frames sent in list order, described permuted", WF_E_FRAME_MISMATCH, id);
        const int out_of_range[3] = { 0, 1, 3 };
        hdr_tensors(t, id = 1076, 3, names, dts, ranks, shapes, out_of_range);
        bad_sb(t, "frame index out of range", WF_E_FRAME_MISMATCH, id);
        const int dup[3] = { 0, 1, 1 };
        hdr_tensors(t, id = 1077, 3, names, dts, ranks, shapes, dup);
        bad_sb(t, "frame index used twice", WF_E_FRAME_MISMATCH, id);
    }

    /* --- tensors that do not fit together --- */
    {
        const char *names[3] = { "q", "k", "v" }, *dts[3] = { "f32", "f32", "f32" };
        const int ranks[3] = { 4, 4, 4 }, frames[3] = { 0, 1, 2 };
        int64_t q3[4] = { B_, SQ_, 3, D_ }, k2[4] = { B_, SKV_, 2, D_ };
        const int64_t *shapes[3] = { q3, k2, k2 };
        hdr_tensors(t, id = 1080, 3, names, dts, ranks, shapes, frames);
        frame_t g[3] = { { t->q, 4 * B_ * SQ_ * 3 * D_ }, { t->k, 4 * B_ * SKV_ * 2 * D_ },
                         { t->v, 4 * B_ * SKV_ * 2 * D_ } };
        /* frames of the described size, taken from a big enough buffer */
        float *buf = calloc(1, 4096);
        for (int i = 0; i < 3; i++)
            g[i].p = buf;
        bad(t, "GQA: 2 kv heads do not divide 3 q heads", false, t->sb.data, t->sb.size, g, 3,
            WF_E_BAD_ARGUMENT, id);
        int64_t d16[4] = { B_, SQ_, HQ_, 16 };
        const int64_t *shapes2[3] = { d16, GKV, GKV };
        hdr_tensors(t, id = 1081, 3, names, dts, ranks, shapes2, frames);
        frame_t g2[3] = { { buf, 4 * B_ * SQ_ * HQ_ * 16 }, f[1], f[2] };
        bad(t, "head dim of q and k differ", false, t->sb.data, t->sb.size, g2, 3,
            WF_E_BAD_ARGUMENT, id);
        free(buf);
        int64_t kv6[4] = { B_, 6, HKV_, D_ };
        const int64_t *shapes3[3] = { GQ, GKV, kv6 };
        hdr_tensors(t, id = 1082, 3, names, dts, ranks, shapes3, frames);
        bad_sb(t, "k and v shapes differ", WF_E_BAD_ARGUMENT, id);
        const int r3[3] = { 3, 4, 4 };
        hdr_tensors(t, id = 1083, 3, names, dts, r3, shapes, frames);
        bad_sb(t, "q of rank 3", WF_E_BAD_ARGUMENT, id);
    }
    hdr_begin(t, 5, id = 1084);
    mpb(sb, "s A2", "tensors");
    mpb_tensor(sb, "k", "f32", 4, GKV, 0);
    mpb_tensor(sb, "v", "f32", 4, GKV, 1);
    mpb(sb, "s M0", "args");
    bad(t, "missing q", false, sb->data, sb->size, f + 1, 2, WF_E_BAD_FIELD, id);
    hdr_begin(t, 5, id = 1085);
    mpb(sb, "s A4", "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    mpb_tensor(sb, "k", "f32", 4, GKV, 1);
    mpb_tensor(sb, "v", "f32", 4, GKV, 2);
    mpb_tensor(sb, "bias", "f32", 4, GKV, 3);
    mpb(sb, "s M0", "args");
    f[3] = f[2];
    bad(t, "extra tensor bias", false, sb->data, sb->size, f, 4, WF_E_BAD_ARGUMENT, id);
    const double scales[] = { NAN, -0.5, 0.0, INFINITY };
    const char *scale_names[] = { "scale NaN", "scale negative", "scale zero", "scale inf" };
    for (int i = 0; i < 4; i++) {
        hdr_args(t, id = 1086 + (uint64_t)i);
        mpb(sb, "M1 sd", "scale", scales[i]);
        bad_sb(t, scale_names[i], WF_E_BAD_ARGUMENT, id);
    }

    /* --- context-parallel options and the reconfigure op --- */
    hdr_args(t, id = 1100);
    mpb(sb, "M1 ss", "rotate_method", "ring");
    bad_sb(t, "rotate_method unknown string", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1101);
    mpb(sb, "M1 si", "rotate_method", 2);
    bad_sb(t, "rotate_method is an integer", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1102);
    mpb(sb, "M1 si", "convert_to_fp32", 1);
    bad_sb(t, "convert_to_fp32 is an integer", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1103);
    mpb(sb, "M1 ss", "ring_anything", "yes");
    bad_sb(t, "ring_anything is a str", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1104);
    mpb(sb, "M1 sn", "ulysses_anything");
    bad_sb(t, "ulysses_anything is nil", WF_E_BAD_FIELD, id);
    hdr_args(t, id = 1105);
    mpb(sb, "M1 sd", "load_balance", 1.0);
    bad_sb(t, "load_balance is a float", WF_E_BAD_FIELD, id);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 si", "v", 1, "id", 1110, "op", 4, "args", "dp", 0);
    bad(t, "reconfigure dp 0", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD, 1110);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 sU", "v", 1, "id", 1111, "op", 4, "args", "ring",
        (uint64_t)1 << 33);
    bad(t, "reconfigure ring 2^33", false, sb->data, sb->size, NULL, 0, WF_E_BAD_FIELD, 1111);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 ss", "v", 1, "id", 1112, "op", 4, "args", "ulysses", "2");
    bad(t, "reconfigure ulysses is a str", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_FIELD, 1112);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s M1 si", "v", 1, "id", 1113, "op", 4, "args", "pp", 2);
    bad(t, "reconfigure unknown degree pp", false, sb->data, sb->size, NULL, 0,
        WF_E_BAD_FIELD, 1113);
    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s A1", "v", 1, "id", 1114, "op", 4, "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    bad(t, "reconfigure with a tensor", false, sb->data, sb->size, f, 1, WF_E_BAD_ARGUMENT,
        1114);

    msgpack_sbuffer_clear(sb);
    mpb(sb, "M4 si si si s A1", "v", 1, "id", 1090, "op", 1, "tensors");
    mpb_tensor(sb, "q", "f32", 4, GQ, 0);
    bad(t, "hello with a tensor", false, sb->data, sb->size, f, 1, WF_E_BAD_ARGUMENT, 1090);

    run_bad_model_cases(t);
}

/* ---- daemon process ---- */

/* weftd on endpoint, its stderr (log level info) into log_path. */
static bool start_daemon(t_t *t, const char *weftd, const char *endpoint)
{
    char maxb[32];
    snprintf(maxb, sizeof(maxb), "%d", MAX_TENSOR_BYTES);
    const char *argv[] = { weftd, "--devices", "cpu:2", "--listen", endpoint,
                           "--max-tensor-bytes", maxb, "--log-level", "info", NULL };
    spawn_opts_t o = { .log_path = log_path };
    return spawn_start(&t->d, argv, &o);
}

static int hello(t_t *t)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    uint64_t id = t->next_id++;
    mpb(&sb, "M3 si sU si", "v", 1, "id", id, "op", 1);
    int rc = send_parts(t, false, sb.data, sb.size, NULL, 0);
    msgpack_sbuffer_destroy(&sb);
    if (rc != 0)
        return -1;
    /* the daemon may still be starting: wait for the reply in slices and
     * stop early if the process died */
    msg_t m;
    for (int waited = 0; waited < REPLY_TIMEOUT_MS; waited += 200) {
        if (recv_msg(t, 200, &m) == 0) {
            wf_reply_t rep;
            char err[WF_PROTO_ERROR_MAX];
            wf_status_t st = wf_reply_decode(m.part[0], m.len[0], &rep, err, sizeof(err));
            CHECK(st == WF_OK && rep.status == WF_OK && rep.id == id &&
                  rep.op == WF_OP_HELLO, "hello reply: %s %s %s", wf_status_name(st), err,
                  rep.error);
            CHECK(rep.result.hello.protocol == WF_PROTOCOL_VERSION &&
                  rep.result.hello.devices == 2 &&
                  rep.result.hello.max_tensor_bytes == MAX_TENSOR_BYTES,
                  "hello result: protocol %u devices %u max_tensor_bytes %llu",
                  rep.result.hello.protocol, rep.result.hello.devices,
                  (unsigned long long)rep.result.hello.max_tensor_bytes);
            msg_free(&m);
            return 0;
        }
        if (spawn_wait(&t->d, 0)) {
            char how[64];
            fprintf(stderr, "weftd exited before answering hello (%s)\n",
                    spawn_status_str(t->d.status, how, sizeof how));
            return -1;
        }
    }
    fprintf(stderr, "weftd did not answer hello within %d ms\n", REPLY_TIMEOUT_MS);
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    static t_t T;
    t_t *t = &T;
    t->next_id = 1;
    fill_inputs(t);
    msgpack_sbuffer_init(&t->sb);

    char endpoint[96], path[80];
    snprintf(path, sizeof(path), "/tmp/weft-bad-%d.sock", (int)getpid());
    snprintf(log_path, sizeof(log_path), "/tmp/weft-bad-%d.log", (int)getpid());
    snprintf(endpoint, sizeof(endpoint), "ipc://%s", path);
    unlink(path);

    if (!start_daemon(t, argv[1], endpoint))
        return 1;

    t->zctx = zmq_ctx_new();
    t->sock = zmq_socket(t->zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(t->sock, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(t->sock, endpoint) != 0) {
        fprintf(stderr, "connect %s: %s\n", endpoint, zmq_strerror(errno));
        return 1;
    }

    int rc = 1;
    if (hello(t) == 0 && good_job(t, "nothing (first job)", false) == 0 &&
        good_job(t, "nothing, with a delimiter", true) == 0) {
        run_bad_cases(t);
        /* the daemon is alive and still answers hello */
        CHECK(!spawn_wait(&t->d, 0), "weftd died during the bad requests");
        CHECK(hello(t) == 0, "hello after the bad requests");
        rc = 0;
    }
    CHECK(rc == 0, "weftd did not serve hello and the first good jobs");

    if (!t->d.reaped) {
        /* nothing in flight: the drain ends at once */
        bool stopped = spawn_stop(&t->d, SIGTERM, SPAWN_STOP_MS);
        char how[64];
        CHECK(stopped && spawn_exited(&t->d, 0), "weftd after SIGTERM: %s",
              stopped ? spawn_status_str(t->d.status, how, sizeof how) : "killed");
        }
    spawn_close(&t->d);
    zmq_close(t->sock);
    zmq_ctx_term(t->zctx);
    msgpack_sbuffer_destroy(&t->sb);
    unlink(path);
    check_log();
    unlink(log_path);

    printf("test_badinput: %d bad requests, %d checks, %d failures\n", t->bad_cases,
           passed + failed, failed);
    return failed ? 1 : 0;
}
