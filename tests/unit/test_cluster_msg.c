/* test_cluster_msg.c — the typed control messages between daemons
 * (proto/cluster_msg.h) on their own:
 *   - every message type survives put, encode, decode, get unchanged;
 *   - the encoded bytes equal those of a wf_ctl_msg_t built by hand, key
 *     by key (same keys, order and value types);
 *   - get refuses a message with any required key missing, a key of the
 *     wrong type, a value out of range, an unknown dtype or rotate code,
 *     or fields inconsistent with each other, with a stable status and a
 *     message naming the key; optional keys may be absent;
 *   - put refuses what it cannot write.
 *
 * Plain checks that print the failing case; the exit status is the number
 * of failed (capped), so CTest sees any of them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"
#include "proto.h"

#include "support/check.h"
#include "support/ctl_wire.h"

/* Large: kept off the stack. */
static wf_ctl_msg_t m_typed, m_hand, m_wire, m_edit;
static wf_cmsg_t msg_in, msg_out;

/* ---- sample messages, typed and as the daemons built them by hand ---- */

static void sample_job(wf_cjob_t *j, bool hs)
{
    memset(j, 0, sizeof *j);
    j->seq = 12;
    j->epoch = 7;
    j->id = 0x1234567890ull;
    j->base = 2;
    j->g = hs ? 3 : 4;
    j->B = 2;
    j->Sq = 300;
    j->Hq = 8;
    j->D = 64;
    j->Skv = 310;
    j->Hkv = 4;
    j->qdt = WF_DTYPE_BF16;
    j->kdt = WF_DTYPE_BF16;
    j->vdt = WF_DTYPE_F16;
    j->odt = WF_DTYPE_F32;
    j->lse = true;
    j->causal = false;
    j->scale = 0.125f;
    j->rot = WF_ROTATE_ALLTOALL;
    j->f32 = true;
    j->ra = false;
    j->ua = true;
    j->lb = true;
    j->hs = hs;
    j->mask = hs ? 0xb : 0;   /* ranks base + 0, 1, 3 */
}

/* cluster_remote in daemon/server/server.c, key by key. */
static void hand_job(wf_ctl_msg_t *m, const wf_cjob_t *j)
{
    uint32_t fbits;
    memcpy(&fbits, &j->scale, sizeof fbits);
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "job");
    wf_ctl_put_uint(m, "seq", j->seq);
    wf_ctl_put_uint(m, "epoch", j->epoch);
    wf_ctl_put_uint(m, "id", j->id);
    wf_ctl_put_uint(m, "base", j->base);
    wf_ctl_put_uint(m, "g", (uint64_t)j->g);
    wf_ctl_put_uint(m, "B", (uint64_t)j->B);
    wf_ctl_put_uint(m, "Sq", (uint64_t)j->Sq);
    wf_ctl_put_uint(m, "Hq", (uint64_t)j->Hq);
    wf_ctl_put_uint(m, "D", (uint64_t)j->D);
    wf_ctl_put_uint(m, "Skv", (uint64_t)j->Skv);
    wf_ctl_put_uint(m, "Hkv", (uint64_t)j->Hkv);
    wf_ctl_put_uint(m, "qdt", (uint64_t)j->qdt);
    wf_ctl_put_uint(m, "kdt", (uint64_t)j->kdt);
    wf_ctl_put_uint(m, "vdt", (uint64_t)j->vdt);
    wf_ctl_put_uint(m, "odt", (uint64_t)j->odt);
    wf_ctl_put_uint(m, "lse", j->lse);
    wf_ctl_put_uint(m, "causal", j->causal);
    wf_ctl_put_uint(m, "scale", fbits);
    wf_ctl_put_uint(m, "rot", (uint64_t)j->rot);
    wf_ctl_put_uint(m, "f32", j->f32);
    wf_ctl_put_uint(m, "ra", j->ra);
    wf_ctl_put_uint(m, "ua", j->ua);
    wf_ctl_put_uint(m, "lb", j->lb);
    if (j->hs) {
        wf_ctl_put_uint(m, "hs", 1);
        wf_ctl_put_uint(m, "mask", j->mask);
    }
}

static void sample_world(wf_cmsg_world_t *w, uint32_t nn, const char *xfer)
{
    memset(w, 0, sizeof *w);
    w->epoch = 5;
    snprintf(w->id, sizeof w->id, "0123456789abcdef0123456789abcdef");
    w->nn = nn;
    w->mesh = (wf_cmsg_mesh_t){ 9, 2, 1, 2, 1 };
    snprintf(w->xfer, sizeof w->xfer, "%s", xfer);
    uint32_t rank = 0;
    for (uint32_t k = 0; k < nn; k++) {
        snprintf(w->nodes[k].name, sizeof w->nodes[k].name, "node-%c", 'a' + k);
        w->nodes[k].rank = rank;
        w->nodes[k].ranks = 2;
        snprintf(w->nodes[k].data, sizeof w->nodes[k].data,
                 k ? "tcp://10.0.0.%u:4100,4101" : "", k);
        rank += 2;
    }
}

/* start_round in daemon/cluster/cluster.c, key by key. */
static void hand_world(wf_ctl_msg_t *m, const wf_cmsg_world_t *w)
{
    wf_ctl_init(m);
    wf_ctl_put_str(m, "t", "world");
    wf_ctl_put_uint(m, "epoch", w->epoch);
    wf_ctl_put_str(m, "id", w->id);
    wf_ctl_put_uint(m, "nn", w->nn);
    wf_ctl_put_uint(m, "mepoch", w->mesh.mepoch);
    wf_ctl_put_uint(m, "dp", w->mesh.dp);
    wf_ctl_put_uint(m, "ring", w->mesh.ring);
    wf_ctl_put_uint(m, "ulysses", w->mesh.ulysses);
    wf_ctl_put_uint(m, "tp", w->mesh.tp);
    if (w->xfer[0])
        wf_ctl_put_str(m, "xfer", w->xfer);
    for (uint32_t k = 0; k < w->nn; k++) {
        char key[WF_CTL_KEY_MAX];
        snprintf(key, sizeof key, "n%u.name", k);
        wf_ctl_put_str(m, key, w->nodes[k].name);
        snprintf(key, sizeof key, "n%u.rank", k);
        wf_ctl_put_uint(m, key, w->nodes[k].rank);
        snprintf(key, sizeof key, "n%u.ranks", k);
        wf_ctl_put_uint(m, key, w->nodes[k].ranks);
        snprintf(key, sizeof key, "n%u.data", k);
        wf_ctl_put_str(m, key, w->nodes[k].data);
    }
}

/* Build sample number `i` both ways; false past the last one. */
static bool sample(int i, wf_cmsg_t *msg, wf_ctl_msg_t *hand, const char **what)
{
    memset(msg, 0, sizeof *msg);
    wf_ctl_init(hand);
    switch (i) {
    case 0: {
        *what = "hello";
        msg->type = WF_CMSG_HELLO;
        wf_cmsg_hello_t *h = &msg->u.hello;
        h->proto = 1;
        snprintf(h->weft, sizeof h->weft, "0.4.0");
        snprintf(h->nccl, sizeof h->nccl, "none");
        snprintf(h->name, sizeof h->name, "node-b");
        h->devices = 2;
        snprintf(h->data, sizeof h->data, "tcp://127.0.0.1:41234,41235");
        h->epoch = 3;
        wf_ctl_put_str(hand, "t", "hello");
        wf_ctl_put_uint(hand, "proto", 1);
        wf_ctl_put_str(hand, "weft", "0.4.0");
        wf_ctl_put_str(hand, "nccl", "none");
        wf_ctl_put_str(hand, "name", "node-b");
        wf_ctl_put_uint(hand, "devices", 2);
        wf_ctl_put_str(hand, "data", "tcp://127.0.0.1:41234,41235");
        wf_ctl_put_uint(hand, "epoch", 3);
        return true;
    }
    case 1: case 2: case 3: case 4: {
        static const wf_cmsg_type_t ty[] = { WF_CMSG_READY, WF_CMSG_PING,
                                             WF_CMSG_SERVE, WF_CMSG_PONG };
        static const char *const t[] = { "ready", "ping", "serve", "pong" };
        *what = t[i - 1];
        msg->type = ty[i - 1];
        msg->u.epoch = 40 + (uint64_t)i;
        wf_ctl_put_str(hand, "t", t[i - 1]);
        wf_ctl_put_uint(hand, "epoch", 40 + (uint64_t)i);
        return true;
    }
    case 5:
        *what = "data";
        msg->type = WF_CMSG_DATA;
        snprintf(msg->u.text, sizeof msg->u.text, "tcp://127.0.0.1:5000,5001");
        wf_ctl_put_str(hand, "t", "data");
        wf_ctl_put_str(hand, "data", "tcp://127.0.0.1:5000,5001");
        return true;
    case 6:
        *what = "done";
        msg->type = WF_CMSG_DONE;
        msg->u.result.seq = 77;     /* member by member: no padding copied */
        msg->u.result.epoch = 8;
        msg->u.result.st = WF_E_UNAVAILABLE;
        wf_ctl_put_str(hand, "t", "done");
        wf_ctl_put_uint(hand, "seq", 77);
        wf_ctl_put_uint(hand, "epoch", 8);
        wf_ctl_put_uint(hand, "st", (uint64_t)(int64_t)WF_E_UNAVAILABLE & 0xffffffffu);
        return true;
    case 7:
        *what = "aborted";
        msg->type = WF_CMSG_ABORTED;
        msg->u.result.seq = 78;
        msg->u.result.epoch = 9;
        msg->u.result.st = WF_E_INTERNAL;
        wf_ctl_put_str(hand, "t", "aborted");
        wf_ctl_put_uint(hand, "epoch", 9);
        wf_ctl_put_uint(hand, "seq", 78);
        wf_ctl_put_uint(hand, "st", (uint64_t)(int64_t)WF_E_INTERNAL & 0xffffffffu);
        return true;
    case 8:
        *what = "refuse";
        msg->type = WF_CMSG_REFUSE;
        snprintf(msg->u.text, sizeof msg->u.text, "node b: field 'devices': 3 differs");
        wf_ctl_put_str(hand, "t", "refuse");
        wf_ctl_put_str(hand, "error", "node b: field 'devices': 3 differs");
        return true;
    case 9: case 10:
        *what = i == 9 ? "world with xfer" : "world without xfer";
        msg->type = WF_CMSG_WORLD;
        sample_world(&msg->u.world, i == 9 ? WF_CMSG_MAX_NODES : 2,
                     i == 9 ? "tcp://10.0.0.1:4000" : "");
        hand_world(hand, &msg->u.world);
        return true;
    case 11:
        *what = "rejoin";
        msg->type = WF_CMSG_REJOIN;
        wf_ctl_put_str(hand, "t", "rejoin");
        return true;
    case 12:
        *what = "mesh";
        msg->type = WF_CMSG_MESH;
        msg->u.mesh = (wf_cmsg_mesh_t){ 11, 1, 2, 2, 1 };
        wf_ctl_put_str(hand, "t", "mesh");
        wf_ctl_put_uint(hand, "mepoch", 11);
        wf_ctl_put_uint(hand, "dp", 1);
        wf_ctl_put_uint(hand, "ring", 2);
        wf_ctl_put_uint(hand, "ulysses", 2);
        wf_ctl_put_uint(hand, "tp", 1);
        return true;
    case 13: case 14:
        *what = i == 13 ? "job (context-parallel)" : "job (head split)";
        msg->type = WF_CMSG_JOB;
        sample_job(&msg->u.job, i == 14);
        hand_job(hand, &msg->u.job);
        return true;
    case 15:
        *what = "abort";
        msg->type = WF_CMSG_ABORT;
        msg->u.abort.epoch = 6;
        snprintf(msg->u.abort.why, sizeof msg->u.abort.why, "job seq 3 failed on node b");
        wf_ctl_put_str(hand, "t", "abort");
        wf_ctl_put_uint(hand, "epoch", 6);
        wf_ctl_put_str(hand, "why", "job seq 3 failed on node b");
        return true;
    case 16:
        *what = "hi";
        msg->type = WF_CMSG_XFER_HI;
        msg->u.xfer.epoch = 4;
        wf_ctl_put_str(hand, "t", "hi");
        wf_ctl_put_uint(hand, "epoch", 4);
        return true;
    case 17:
        *what = "in";
        msg->type = WF_CMSG_XFER_IN;
        msg->u.xfer = (wf_cmsg_xfer_t){ .epoch = 4, .seq = 19, .n = 3 };
        wf_ctl_put_str(hand, "t", "in");
        wf_ctl_put_uint(hand, "epoch", 4);
        wf_ctl_put_uint(hand, "seq", 19);
        wf_ctl_put_uint(hand, "n", 3);
        return true;
    case 18:
        *what = "out";
        msg->type = WF_CMSG_XFER_OUT;
        msg->u.xfer = (wf_cmsg_xfer_t){ .epoch = 4, .seq = 19, .st = WF_OK, .n = 2 };
        wf_ctl_put_str(hand, "t", "out");
        wf_ctl_put_uint(hand, "epoch", 4);
        wf_ctl_put_uint(hand, "seq", 19);
        wf_ctl_put_uint(hand, "st", 0);
        wf_ctl_put_uint(hand, "n", 2);
        return true;
    }
    return false;
}

/* ---- helpers ---- */

static bool same_bytes(const wf_ctl_msg_t *a, const wf_ctl_msg_t *b)
{
    wf_buf_t x = { 0 }, y = { 0 };
    bool ok = wf_ctl_encode(a, &x) == WF_OK && wf_ctl_encode(b, &y) == WF_OK &&
              x.len == y.len && memcmp(x.data, y.data, x.len) == 0;
    wf_buf_free(&x);
    wf_buf_free(&y);
    return ok;
}

/* A copy of `from` without the field `key`. */
static void without(wf_ctl_msg_t *to, const wf_ctl_msg_t *from, const char *key)
{
    wf_ctl_init(to);
    for (uint32_t i = 0; i < from->n; i++)
        if (strcmp(from->f[i].key, key) != 0)
            to->f[to->n++] = from->f[i];
}

/* A copy of `from` with `key` set to the uint v, or to the str s. */
static void with(wf_ctl_msg_t *to, const wf_ctl_msg_t *from, const char *key,
                 uint64_t v, const char *s)
{
    *to = *from;
    for (uint32_t i = 0; i < to->n; i++) {
        wf_ctl_field_t *f = &to->f[i];
        if (strcmp(f->key, key) != 0)
            continue;
        f->is_str = s != NULL;
        f->u = s ? 0 : v;
        snprintf(f->s, sizeof f->s, "%s", s ? s : "");
        return;
    }
    if (s)
        wf_ctl_put_str(to, key, s);
    else
        wf_ctl_put_uint(to, key, v);
}

/* get m: want status `want`, and when refused a message holding `key`. */
static void expect_get(const char *what, const wf_ctl_msg_t *m, wf_status_t want,
                       const char *key)
{
    char err[WF_PROTO_ERROR_MAX] = "";
    wf_status_t rc = wf_cmsg_get(m, &msg_out, err, sizeof err);
    CHECK(rc == want, "%s: got %s, want %s (%s)", what, wf_status_name(rc),
          wf_status_name(want), err);
    if (want != WF_OK && key) {
        char q[64];
        snprintf(q, sizeof q, "'%s'", key);
        CHECK(strstr(err, q) != NULL, "%s: message \"%s\" does not name %s", what,
              err, q);
    }
}

/* ---- tests ---- */

static void test_round_trip_and_bytes(void)
{
    const char *what = "";
    int n = 0;
    for (int i = 0; sample(i, &msg_in, &m_hand, &what); i++, n++) {
        char err[WF_PROTO_ERROR_MAX] = "";
        wf_status_t rc = wf_cmsg_put(&m_typed, &msg_in);
        CHECK(rc == WF_OK, "%s: put: %s", what, wf_status_name(rc));
        /* the hand-built message's wire: same keys, order, value types, bytes */
        CHECK(m_typed.n == m_hand.n, "%s: %u fields, by hand %u", what, m_typed.n,
              m_hand.n);
        CHECK(same_bytes(&m_typed, &m_hand), "%s: bytes differ from the "
              "hand-built message", what);
        CHECK(through_wire(&m_typed, &m_wire), "%s: did not decode", what);
        CHECK(wf_cmsg_type(&m_wire) == msg_in.type, "%s: type %d", what,
              (int)wf_cmsg_type(&m_wire));
        CHECK(strcmp(wf_cmsg_type_name(msg_in.type), wf_ctl_get_str(&m_hand, "t")) == 0,
              "%s: type name %s", what, wf_cmsg_type_name(msg_in.type));
        rc = wf_cmsg_get(&m_wire, &msg_out, err, sizeof err);
        CHECK(rc == WF_OK, "%s: get: %s (%s)", what, wf_status_name(rc), err);
        CHECK(memcmp(&msg_in, &msg_out, sizeof msg_in) == 0, "%s: changed on the "
              "round trip", what);
    }
    CHECK(n == 19, "%d samples", n);
    printf("  %d messages: round trips, bytes equal to the hand-built ones\n", n);

    /* the job descriptor on its own */
    wf_cjob_t j, back;
    char err[WF_PROTO_ERROR_MAX];
    sample_job(&j, true);
    hand_job(&m_hand, &j);
    CHECK(wf_cjob_put(&m_typed, &j) == WF_OK && same_bytes(&m_typed, &m_hand),
          "wf_cjob_put: bytes differ");
    CHECK(wf_cjob_get(&m_typed, &back, err, sizeof err) == WF_OK &&
          memcmp(&j, &back, sizeof j) == 0, "wf_cjob_get: %s", err);
    CHECK(back.scale == 0.125f && back.mask == 0xb && back.rot == WF_ROTATE_ALLTOALL,
          "wf_cjob_get: fields");
    sample(6, &msg_in, &m_hand, &what);     /* a done is not a job */
    CHECK(wf_cjob_get(&m_hand, &back, err, sizeof err) == WF_E_UNKNOWN_OP,
          "wf_cjob_get of a done");
    /* a negative status survives as its two's complement */
    msg_in.u.result.st = (wf_status_t)-5;
    CHECK(wf_cmsg_put(&m_typed, &msg_in) == WF_OK &&
          wf_ctl_get(&m_typed, "st")->u == 0xfffffffbu &&
          wf_cmsg_get(&m_typed, &msg_out, err, sizeof err) == WF_OK &&
          msg_out.u.result.st == (wf_status_t)-5, "negative st");
}

/* Every required key of every message, removed in turn. */
static void test_missing_keys(void)
{
    const char *what;
    int refused = 0;
    for (int i = 0; sample(i, &msg_in, &m_hand, &what); i++) {
        for (uint32_t k = 1; k < m_hand.n; k++) {
            const char *key = m_hand.f[k].key;
            bool optional = strcmp(key, "error") == 0 || strcmp(key, "why") == 0 ||
                            strcmp(key, "xfer") == 0 || strcmp(key, "hs") == 0;
            without(&m_edit, &m_hand, key);
            char label[96];
            snprintf(label, sizeof label, "%s without %s", what, key);
            /* a head split without its mask: the mask is then 0 */
            if (strcmp(key, "mask") == 0) {
                expect_get(label, &m_edit, WF_E_BAD_FIELD, "mask");
            } else if (optional) {
                expect_get(label, &m_edit, WF_OK, NULL);
            } else {
                expect_get(label, &m_edit, WF_E_BAD_FIELD, key);
                refused++;
            }
        }
    }
    printf("  %d messages with a key missing refused\n", refused);
    /* optional keys absent read as empty */
    wf_ctl_init(&m_edit);
    wf_ctl_put_str(&m_edit, "t", "refuse");
    expect_get("refuse without error", &m_edit, WF_OK, NULL);
    CHECK(msg_out.type == WF_CMSG_REFUSE && msg_out.u.text[0] == '\0', "refuse");
    /* no "t", an unknown one, a "t" that is not a str */
    wf_ctl_init(&m_edit);
    wf_ctl_put_uint(&m_edit, "epoch", 1);
    expect_get("no t", &m_edit, WF_E_UNKNOWN_OP, "t");
    CHECK(msg_out.type == WF_CMSG_UNKNOWN, "no t: type");
    wf_ctl_put_str(&m_edit, "t", "gossip");
    expect_get("unknown t", &m_edit, WF_E_UNKNOWN_OP, "t");
    CHECK(wf_cmsg_type(&m_edit) == WF_CMSG_UNKNOWN, "unknown t: type");
    /* the peer's "t" is quoted in the message (which goes to a log) with
     * anything outside printable ASCII replaced */
    {
        char err[WF_PROTO_ERROR_MAX] = "";
        wf_ctl_init(&m_wire);
        wf_ctl_put_str(&m_wire, "t", "x\nEMERG forged\x1b[1m");
        CHECK(wf_cmsg_get(&m_wire, &msg_out, err, sizeof err) == WF_E_UNKNOWN_OP &&
              strstr(err, "\"x?EMERG forged?[1m\"") != NULL &&
              strpbrk(err, "\n\x1b") == NULL, "unknown t quoted raw: %s", err);
    }
    with(&m_wire, &m_edit, "t", 3, NULL);
    expect_get("t a uint", &m_wire, WF_E_UNKNOWN_OP, "t");
    /* keys the type does not have are ignored (the protocol adds keys) */
    sample(1, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "later", 1, NULL);
    expect_get("ready with an extra key", &m_edit, WF_OK, NULL);
}

/* Every key of every message with a value of the other type. */
static void test_wrong_types(void)
{
    const char *what;
    int refused = 0;
    for (int i = 0; sample(i, &msg_in, &m_hand, &what); i++) {
        for (uint32_t k = 1; k < m_hand.n; k++) {
            const wf_ctl_field_t *f = &m_hand.f[k];
            with(&m_edit, &m_hand, f->key, 1, f->is_str ? NULL : "1");
            char label[96];
            snprintf(label, sizeof label, "%s with %s of the wrong type", what, f->key);
            expect_get(label, &m_edit, WF_E_BAD_FIELD, f->key);
            refused++;
        }
    }
    printf("  %d messages with a key of the wrong type refused\n", refused);
}

typedef struct range_case {
    const char *key;
    uint64_t v;            /* uint value to set */
    wf_status_t want;
} range_case_t;

static void test_ranges(void)
{
    const char *what;
    /* the job descriptor (member_job's bounds, and the codes of weft.h) */
    static const range_case_t job[] = {
        { "base", WF_CMSG_MAX_DEVICES, WF_OK },
        { "base", WF_CMSG_MAX_DEVICES + 1, WF_E_BAD_FIELD },
        { "g", 0, WF_E_BAD_FIELD },
        { "g", WF_CMSG_MAX_DEVICES + 1, WF_E_BAD_FIELD },
        { "B", 0, WF_E_BAD_SHAPE },
        { "Sq", (uint64_t)INT32_MAX + 1, WF_E_BAD_SHAPE },
        { "Hkv", INT32_MAX, WF_OK },
        { "D", UINT64_MAX, WF_E_BAD_SHAPE },
        { "qdt", WF_DTYPE_BF16 + 1, WF_E_BAD_DTYPE },
        { "odt", 255, WF_E_BAD_DTYPE },
        { "lse", 2, WF_E_BAD_FIELD },
        { "causal", 2, WF_E_BAD_FIELD },
        { "scale", (uint64_t)UINT32_MAX + 1, WF_E_BAD_FIELD },
        { "rot", WF_ROTATE_ALLTOALL + 1, WF_E_BAD_FIELD },
        { "f32", 7, WF_E_BAD_FIELD },
        { "lb", 2, WF_E_BAD_FIELD },
    };
    sample(13, &msg_in, &m_hand, &what);
    for (size_t i = 0; i < sizeof job / sizeof job[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "job %s = %llu", job[i].key,
                 (unsigned long long)job[i].v);
        with(&m_edit, &m_hand, job[i].key, job[i].v, NULL);
        expect_get(label, &m_edit, job[i].want, job[i].key);
        /* refused or not, seq and epoch are read (for the "done") */
        CHECK(msg_out.u.job.seq == 12 && msg_out.u.job.epoch == 7, "%s: seq/epoch",
              label);
    }
    /* a head split: mask with bit 0 and g bits */
    sample(14, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "mask", 0xa, NULL);
    expect_get("head split, mask without bit 0", &m_edit, WF_E_BAD_FIELD, "mask");
    with(&m_edit, &m_hand, "mask", 0x7f, NULL);
    expect_get("head split, mask of 7 bits for g 3", &m_edit, WF_E_BAD_FIELD, "mask");
    with(&m_edit, &m_hand, "hs", 2, NULL);
    expect_get("hs 2", &m_edit, WF_E_BAD_FIELD, "hs");
    with(&m_edit, &m_hand, "hs", 0, NULL);
    expect_get("hs 0: context-parallel", &m_edit, WF_OK, NULL);
    CHECK(!msg_out.u.job.hs, "hs 0");

    /* hello */
    sample(0, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "devices", 0, NULL);
    expect_get("hello devices 0", &m_edit, WF_E_BAD_FIELD, "devices");
    /* the versions are read even so: the coordinator checks them first */
    CHECK(msg_out.u.hello.proto == 1 && strcmp(msg_out.u.hello.weft, "0.4.0") == 0 &&
          strcmp(msg_out.u.hello.name, "node-b") == 0, "hello fields kept");
    with(&m_edit, &m_hand, "devices", WF_CMSG_MAX_DEVICES + 1, NULL);
    expect_get("hello devices 65", &m_edit, WF_E_BAD_FIELD, "devices");
    with(&m_edit, &m_hand, "name", 0, "");
    expect_get("hello, empty name", &m_edit, WF_E_BAD_FIELD, "name");
    char longname[WF_CMSG_NAME_MAX + 1];
    memset(longname, 'x', WF_CMSG_NAME_MAX);
    longname[WF_CMSG_NAME_MAX] = '\0';
    with(&m_edit, &m_hand, "name", 0, longname);
    expect_get("hello, name of 64 bytes", &m_edit, WF_E_BAD_FIELD, "name");
    longname[WF_CMSG_NAME_MAX - 1] = '\0';
    with(&m_edit, &m_hand, "name", 0, longname);
    expect_get("hello, name of 63 bytes", &m_edit, WF_OK, NULL);
    /* node names reach log lines and STATUS=: [A-Za-z0-9._-] only, and
     * nothing of a refused name is kept */
    static const char *const bad_names[] = {
        "node\nWATCHDOG=trigger", "a b", "x\x7f", "caf\xc3\xa9", "<0>n", "a/b", "a\"b",
    };
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        with(&m_edit, &m_hand, "name", 0, bad_names[i]);
        expect_get("hello, name outside [A-Za-z0-9._-]", &m_edit, WF_E_BAD_FIELD, "name");
        CHECK(msg_out.u.hello.name[0] == '\0', "bad name %zu kept", i);
    }
    with(&m_edit, &m_hand, "name", 0, "Node_1.rack-2");
    expect_get("hello, name of every allowed kind of byte", &m_edit, WF_OK, NULL);

    /* world: nn, ranks contiguous, node fields */
    sample(10, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "nn", 0, NULL);
    expect_get("world nn 0", &m_edit, WF_E_BAD_FIELD, "nn");
    with(&m_edit, &m_hand, "nn", WF_CMSG_MAX_NODES + 1, NULL);
    expect_get("world nn 17", &m_edit, WF_E_BAD_FIELD, "nn");
    with(&m_edit, &m_hand, "nn", 3, NULL);
    expect_get("world nn 3 with 2 nodes", &m_edit, WF_E_BAD_FIELD, "n2.name");
    with(&m_edit, &m_hand, "n1.name", 0, "b\nWATCHDOG=trigger");
    expect_get("world node name with a newline", &m_edit, WF_E_BAD_FIELD, "n1.name");
    with(&m_edit, &m_hand, "n1.rank", 3, NULL);
    expect_get("world, a gap in the ranks", &m_edit, WF_E_BAD_FIELD, "n1.rank");
    with(&m_edit, &m_hand, "n0.rank", 1, NULL);
    expect_get("world, first rank 1", &m_edit, WF_E_BAD_FIELD, "n0.rank");
    with(&m_edit, &m_hand, "n1.ranks", 0, NULL);
    expect_get("world, node of 0 ranks", &m_edit, WF_E_BAD_FIELD, "n1.ranks");
    with(&m_edit, &m_hand, "tp", WF_CMSG_MESH_MAX + 1, NULL);
    expect_get("world tp 65537", &m_edit, WF_E_BAD_FIELD, "tp");
    with(&m_edit, &m_hand, "id", 0, "0123456789abcdef0123456789abcdef0123456789");
    expect_get("world id of 42 bytes", &m_edit, WF_E_BAD_FIELD, "id");

    /* mesh, done, xfer headers */
    sample(12, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "ring", WF_CMSG_MESH_MAX, NULL);
    expect_get("mesh ring 65536", &m_edit, WF_OK, NULL);
    with(&m_edit, &m_hand, "ring", WF_CMSG_MESH_MAX + 1, NULL);
    expect_get("mesh ring 65537", &m_edit, WF_E_BAD_FIELD, "ring");
    sample(6, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "st", (uint64_t)UINT32_MAX + 1, NULL);
    expect_get("done st over 32 bits", &m_edit, WF_E_BAD_FIELD, "st");
    sample(17, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "n", WF_CMSG_XFER_MAX_FRAMES + 1, NULL);
    expect_get("in n 4", &m_edit, WF_E_BAD_FIELD, "n");
    printf("  range, dtype, shape and consistency refusals checked\n");
}

/* Announced data endpoints (wf_cmsg_check_data, and through hello, data
 * and world). */
static void test_data_endpoints(void)
{
    char err[WF_PROTO_ERROR_MAX];
    static const struct { const char *s; uint32_t ranks; bool ok; } cases[] = {
        { "tcp://127.0.0.1:41234,41235", 2, true },
        { "tcp://10.0.0.2:1", 1, true },
        { "tcp://node-b.rack_1:65535,1,2", 3, true },
        { "tcp://127.0.0.1:41234,41235", 0, true },
        { "tcp://127.0.0.1:41234,41235", 3, false },   /* count */
        { "tcp://127.0.0.1:41234", 2, false },
        { "", 0, false },
        { "127.0.0.1:5000", 0, false },                /* no scheme */
        { "ipc:///tmp/x", 0, false },
        { "tcp://:5000", 0, false },                   /* no host */
        { "tcp://127.0.0.1", 0, false },               /* no port */
        { "tcp://127.0.0.1:", 0, false },
        { "tcp://127.0.0.1:0", 0, false },             /* port 0 */
        { "tcp://127.0.0.1:65536", 0, false },
        { "tcp://127.0.0.1:099", 0, false },           /* leading zero */
        { "tcp://127.0.0.1:123456", 0, false },
        { "tcp://127.0.0.1:5000,", 0, false },
        { "tcp://127.0.0.1:5000,,5001", 0, false },
        { "tcp://127.0.0.1:5000:5001", 0, false },
        { "tcp://127.0.0.1:5000 ", 0, false },
        { "tcp://127.0.0.1:5000\nX", 0, false },
        { "tcp://a b:5000", 0, false },
        { "tcp://-x:5000", 0, false },
        { "tcp://x.:5000", 0, false },
        { "tcp://[::1]:5000", 0, false },              /* data_address is a name */
        { "tcp://*:5000", 0, false },
        { "tcp://127.0.0.1:-1", 0, false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wf_status_t rc = wf_cmsg_check_data(cases[i].s, cases[i].ranks, "data", err,
                                            sizeof err);
        CHECK((rc == WF_OK) == cases[i].ok, "data endpoints case %zu: got %s (%s)", i,
              wf_status_name(rc), err);
        if (rc != WF_OK)
            CHECK(rc == WF_E_BAD_FIELD && strstr(err, "'data'") &&
                  !strstr(err, "\n"), "case %zu: %s", i, err);
    }
    const char *what;
    /* hello: one endpoint per device */
    sample(0, &msg_in, &m_hand, &what);
    with(&m_edit, &m_hand, "data", 0, "tcp://127.0.0.1:41234");
    expect_get("hello, 1 endpoint for 2 devices", &m_edit, WF_E_BAD_FIELD, "data");
    with(&m_edit, &m_hand, "data", 0, "");
    expect_get("hello, no endpoint", &m_edit, WF_E_BAD_FIELD, "data");
    with(&m_edit, &m_hand, "data", 0, "tcp://127.0.0.1:0,70000");
    expect_get("hello, bad ports", &m_edit, WF_E_BAD_FIELD, "data");
    /* data */
    wf_ctl_init(&m_edit);
    wf_ctl_put_str(&m_edit, "t", "data");
    wf_ctl_put_str(&m_edit, "data", "tcp://evil host:1");
    expect_get("data, bad host", &m_edit, WF_E_BAD_FIELD, "data");
    /* world: n<i>.data "" allowed, else one endpoint per rank */
    sample_world(&msg_in.u.world, 2, "");
    snprintf(msg_in.u.world.nodes[1].data, sizeof msg_in.u.world.nodes[1].data,
             "tcp://10.0.0.1:4100");
    hand_world(&m_edit, &msg_in.u.world);
    expect_get("world, 1 endpoint for 2 ranks", &m_edit, WF_E_BAD_FIELD, "n1.data");
}

static void test_put_refusals(void)
{
    memset(&msg_in, 0, sizeof msg_in);
    msg_in.type = WF_CMSG_UNKNOWN;
    CHECK(wf_cmsg_put(&m_typed, &msg_in) == WF_E_BAD_ARGUMENT, "put of UNKNOWN");
    msg_in.type = (wf_cmsg_type_t)999;
    CHECK(wf_cmsg_put(&m_typed, &msg_in) == WF_E_BAD_ARGUMENT, "put of type 999");
    msg_in.type = WF_CMSG_WORLD;
    sample_world(&msg_in.u.world, 2, "");
    msg_in.u.world.nn = WF_CMSG_MAX_NODES + 1;
    CHECK(wf_cmsg_put(&m_typed, &msg_in) == WF_E_BAD_ARGUMENT, "put of nn 17");
    sample_world(&msg_in.u.world, 2, "");
    memset(msg_in.u.world.id, 'a', sizeof msg_in.u.world.id);   /* no NUL */
    CHECK(wf_cmsg_put(&m_typed, &msg_in) == WF_E_BAD_ARGUMENT, "put of an id "
          "without its NUL");
    CHECK(strcmp(wf_cmsg_type_name(WF_CMSG_UNKNOWN), "?") == 0, "name of UNKNOWN");
}

int main(void)
{
    test_round_trip_and_bytes();
    test_missing_keys();
    test_wrong_types();
    test_ranges();
    test_data_endpoints();
    test_put_refusals();
    if (failed) {
        fprintf(stderr, "test_cluster_msg: %d failure(s)\n", failed);
        return failed > 100 ? 100 : failed;
    }
    printf("test_cluster_msg: all checks passed\n");
    return 0;
}
