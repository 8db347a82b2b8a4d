/* cluster_msg.c — typed control messages between daemons (cluster_msg.h).
 *
 * Each message type is a table of its fields in wire order: {key, offset
 * in the body struct, kind, flags, bounds}. wf_cmsg_put walks the table
 * writing wf_ctl_msg_t fields; wf_cmsg_get walks it reading and checking
 * them, then runs the type's consistency check. A key appears nowhere
 * else. The codec of the map itself (msgpack, prevalidation) is ctl.c's.
 */
#include "cluster_msg.h"

#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "errf.h"
#include "proto.h"
#include "proto_check.h"

/* How a field's uint (or str) maps to its C member. */
typedef enum kind {
    K_U64,      /* uint64_t in [min, max] */
    K_U32,      /* uint32_t in [min, max] */
    K_DIM,      /* int64_t dim, 1..INT32_MAX (WF_E_BAD_SHAPE) */
    K_BOOL,     /* bool, 0 / 1 */
    K_DTYPE,    /* wf_dtype_t code (WF_E_BAD_DTYPE) */
    K_ROT,      /* wf_rotate_t code */
    K_F32,      /* float, as its uint32 bit pattern */
    K_STATUS,   /* wf_status_t, as a uint32 two's complement */
    K_STR       /* char[max]: a str of min..max-1 bytes */
} kind_t;

#define F_OPT 1u    /* get: may be absent (then 0 / "") */
#define F_OMIT 2u   /* put: left out when 0 / false / ""; get: F_OPT */
#define F_NAME 4u   /* get: a non-empty str must be a name of [A-Za-z0-9._-]
                     * (wf_check_model_name's rule): node names reach log
                     * lines and sd_notify STATUS= */

typedef struct field {
    const char *key;     /* the key, spelled here only */
    size_t off;          /* offset of the member in the body struct */
    kind_t kind;
    unsigned flags;      /* F_OPT, F_OMIT */
    uint64_t min, max;   /* K_U64 / K_U32 range; K_STR length min, buffer size */
} field_t;

typedef wf_status_t (*check_fn)(const void *body, char *err, size_t err_len);

typedef struct spec {
    wf_cmsg_type_t type;
    const char *t;           /* its "t" */
    const field_t *fields;   /* wire order */
    size_t n_fields;
    check_fn check;          /* consistency once every field is read (or NULL) */
    bool nodes;              /* a world: nodes[0..nn) follow the fields */
} spec_t;

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define U64(k, s, m) { k, offsetof(s, m), K_U64, 0, 0, UINT64_MAX }
#define U32(k, s, m, lo, hi) { k, offsetof(s, m), K_U32, 0, lo, hi }
#define STR(k, s, m, lo, fl) { k, offsetof(s, m), K_STR, fl, lo, sizeof(((s *)0)->m) }
#define TYPED(k, s, m, kind) { k, offsetof(s, m), kind, 0, 0, 0 }

static const field_t epoch_fields[] = {
    { "epoch", 0, K_U64, 0, 0, UINT64_MAX },
};

static const field_t data_fields[] = {
    { "data", 0, K_STR, 0, 0, WF_CTL_STR_MAX },
};

static const field_t refuse_fields[] = {
    { "error", 0, K_STR, F_OPT, 0, WF_CTL_STR_MAX },
};

static const field_t hello_fields[] = {
    U64("proto", wf_cmsg_hello_t, proto),
    STR("weft", wf_cmsg_hello_t, weft, 0, 0),
    STR("nccl", wf_cmsg_hello_t, nccl, 0, 0),
    STR("name", wf_cmsg_hello_t, name, 1, F_NAME),
    U32("devices", wf_cmsg_hello_t, devices, 1, WF_CMSG_MAX_DEVICES),
    STR("data", wf_cmsg_hello_t, data, 0, 0),
    U64("epoch", wf_cmsg_hello_t, epoch),
    { "gpu", offsetof(wf_cmsg_hello_t, gpu), K_BOOL, F_OMIT, 0, 0 },
    { "fp8", offsetof(wf_cmsg_hello_t, fp8), K_BOOL, F_OMIT, 0, 0 },
};

#define MESH_FIELDS(s, p)                                                  \
    U64("mepoch", s, p mepoch),                                            \
    U32("dp", s, p dp, 0, WF_CMSG_MESH_MAX),                               \
    U32("ring", s, p ring, 0, WF_CMSG_MESH_MAX),                           \
    U32("ulysses", s, p ulysses, 0, WF_CMSG_MESH_MAX),                     \
    U32("tp", s, p tp, 0, WF_CMSG_MESH_MAX)

static const field_t mesh_fields[] = {
    MESH_FIELDS(wf_cmsg_mesh_t, ),
};

static const field_t world_fields[] = {
    U64("epoch", wf_cmsg_world_t, epoch),
    STR("id", wf_cmsg_world_t, id, 0, 0),
    U32("nn", wf_cmsg_world_t, nn, 1, WF_CMSG_MAX_NODES),
    MESH_FIELDS(wf_cmsg_world_t, mesh.),
    STR("xfer", wf_cmsg_world_t, xfer, 0, F_OMIT),
    STR("ncclid", wf_cmsg_world_t, ncclid, 0, F_OMIT),
};

/* A world's node k: the key is "n<k>" followed by the suffix. */
static const field_t node_fields[] = {
    STR(".name", wf_cmsg_node_t, name, 0, F_NAME),
    U32(".rank", wf_cmsg_node_t, rank, 0, UINT32_MAX),
    U32(".ranks", wf_cmsg_node_t, ranks, 1, WF_CMSG_MAX_DEVICES),
    STR(".data", wf_cmsg_node_t, data, 0, 0),
};

static const field_t job_fields[] = {
    U64("seq", wf_cjob_t, seq),
    U64("epoch", wf_cjob_t, epoch),
    U64("id", wf_cjob_t, id),
    U32("base", wf_cjob_t, base, 0, WF_CMSG_MAX_DEVICES),
    U32("g", wf_cjob_t, g, 1, WF_CMSG_MAX_DEVICES),
    TYPED("B", wf_cjob_t, B, K_DIM),
    TYPED("Sq", wf_cjob_t, Sq, K_DIM),
    TYPED("Hq", wf_cjob_t, Hq, K_DIM),
    TYPED("D", wf_cjob_t, D, K_DIM),
    TYPED("Skv", wf_cjob_t, Skv, K_DIM),
    TYPED("Hkv", wf_cjob_t, Hkv, K_DIM),
    TYPED("qdt", wf_cjob_t, qdt, K_DTYPE),
    TYPED("kdt", wf_cjob_t, kdt, K_DTYPE),
    TYPED("vdt", wf_cjob_t, vdt, K_DTYPE),
    TYPED("odt", wf_cjob_t, odt, K_DTYPE),
    TYPED("lse", wf_cjob_t, lse, K_BOOL),
    TYPED("causal", wf_cjob_t, causal, K_BOOL),
    TYPED("scale", wf_cjob_t, scale, K_F32),
    TYPED("rot", wf_cjob_t, rot, K_ROT),
    TYPED("f32", wf_cjob_t, f32, K_BOOL),
    TYPED("ra", wf_cjob_t, ra, K_BOOL),
    TYPED("ua", wf_cjob_t, ua, K_BOOL),
    TYPED("lb", wf_cjob_t, lb, K_BOOL),
    { "hs", offsetof(wf_cjob_t, hs), K_BOOL, F_OMIT, 0, 0 },
    { "mask", offsetof(wf_cjob_t, mask), K_U64, F_OMIT, 0, UINT64_MAX },
    { "fp8", offsetof(wf_cjob_t, fp8), K_BOOL, F_OMIT, 0, 0 },
};

static const field_t done_fields[] = {
    U64("seq", wf_cmsg_result_t, seq),
    U64("epoch", wf_cmsg_result_t, epoch),
    TYPED("st", wf_cmsg_result_t, st, K_STATUS),
};

static const field_t aborted_fields[] = {
    U64("epoch", wf_cmsg_result_t, epoch),
    U64("seq", wf_cmsg_result_t, seq),
    TYPED("st", wf_cmsg_result_t, st, K_STATUS),
};

static const field_t abort_fields[] = {
    U64("epoch", wf_cmsg_abort_t, epoch),
    STR("why", wf_cmsg_abort_t, why, 0, F_OPT),
};

#define XFER_EPOCH U64("epoch", wf_cmsg_xfer_t, epoch)
#define XFER_SEQ U64("seq", wf_cmsg_xfer_t, seq)
#define XFER_N U32("n", wf_cmsg_xfer_t, n, 0, WF_CMSG_XFER_MAX_FRAMES)

static const field_t hi_fields[] = { XFER_EPOCH };
static const field_t in_fields[] = { XFER_EPOCH, XFER_SEQ, XFER_N };
static const field_t out_fields[] = {
    XFER_EPOCH, XFER_SEQ, TYPED("st", wf_cmsg_xfer_t, st, K_STATUS), XFER_N,
};

/* resident models across nodes */
static const field_t mload_fields[] = {
    { "lid", offsetof(wf_cmsg_mload_t, lid), K_U64, 0, 1, UINT64_MAX },
    STR("name", wf_cmsg_mload_t, name, 1, F_NAME),
    STR("path", wf_cmsg_mload_t, path, 1, 0),
    { "sharded", offsetof(wf_cmsg_mload_t, sharded), K_BOOL, F_OMIT, 0, 0 },
    { "tp", offsetof(wf_cmsg_mload_t, tp), K_U32, F_OMIT, 0, 65536 },
};

#define DIGEST(k, m) { k, offsetof(wf_cmsg_mfound_t, d) + offsetof(wf_cmsg_digest_t, m), \
                       K_U64, 0, 0, UINT64_MAX }
static const field_t mfound_fields[] = {
    U64("lid", wf_cmsg_mfound_t, lid),
    TYPED("st", wf_cmsg_mfound_t, st, K_STATUS),
    STR("error", wf_cmsg_mfound_t, err, 0, F_OMIT),
    DIGEST("cfg", cfg), DIGEST("tensors", tensors), DIGEST("sizes", sizes),
    DIGEST("headers", headers), DIGEST("n", n), DIGEST("bytes", bytes),
};

static const field_t mstep_fields[] = {
    U64("lid", wf_cmsg_mstep_t, lid),
};

static const field_t mres_fields[] = {
    U64("lid", wf_cmsg_mres_t, lid),
    TYPED("st", wf_cmsg_mres_t, st, K_STATUS),
    STR("error", wf_cmsg_mres_t, err, 0, F_OMIT),
};

/* One input of an fjob: name, dtype, dims (absent: "", f32, 0). */
#define FT_DIM(i, j) { "t" #i "s" #j, offsetof(wf_cfjob_t, t[i].shape[j]), K_DIM, F_OMIT, 0, 0 }
#define FT(i) \
    { "t" #i, offsetof(wf_cfjob_t, t[i].name), K_STR, F_OMIT | F_NAME, 0, WF_SCHEMA_NAME_MAX }, \
    { "t" #i "d", offsetof(wf_cfjob_t, t[i].dt), K_DTYPE, F_OMIT, 0, 0 }, \
    FT_DIM(i, 0), FT_DIM(i, 1), FT_DIM(i, 2), FT_DIM(i, 3), FT_DIM(i, 4), FT_DIM(i, 5)
static const field_t fjob_fields[] = {
    U64("seq", wf_cfjob_t, seq),
    U64("epoch", wf_cfjob_t, epoch),
    U64("id", wf_cfjob_t, id),
    U32("base", wf_cfjob_t, base, 0, WF_CMSG_MAX_DEVICES),
    U32("g", wf_cfjob_t, g, 1, WF_CMSG_MAX_DEVICES),
    { "lid", offsetof(wf_cfjob_t, lid), K_U64, 0, 1, UINT64_MAX },
    FT(0), FT(1), FT(2), FT(3), FT(4), FT(5), FT(6), FT(7),
    TYPED("odt", wf_cfjob_t, odt, K_DTYPE),
    { "fp8", offsetof(wf_cfjob_t, fp8), K_BOOL, F_OMIT, 0, 0 },
    { "a2a", offsetof(wf_cfjob_t, alltoall), K_BOOL, F_OMIT, 0, 0 },
};
_Static_assert(WF_CFJOB_MAX_TENSORS == 8 && WF_CFJOB_MAX_RANK == 6,
               "fjob_fields lists 8 inputs of 6 dims");

/* The inputs are t0.. without a gap, at least one, each with dims 0..
 * without a gap and at least one; nothing past them. */
static wf_status_t fjob_check(const void *body, char *err, size_t err_len)
{
    const wf_cfjob_t *d = body;
    bool end = false;
    for (int i = 0; i < WF_CFJOB_MAX_TENSORS; i++) {
        const wf_cfjob_tensor_t *t = &d->t[i];
        bool any = t->name[0] || t->dt;
        for (int j = 0; j < WF_CFJOB_MAX_RANK; j++)
            any |= t->shape[j] != 0;
        if (end && any)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "fjob: input %d "
                                  "after the last one", i);
        if (!t->name[0]) {
            if (i == 0)
                return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "fjob: no inputs");
            end = true;
            continue;
        }
        bool dims_end = false;
        for (int j = 0; j < WF_CFJOB_MAX_RANK; j++) {
            if (t->shape[j] == 0)
                dims_end = true;
            else if (dims_end)
                return wf_errf_status(WF_E_BAD_SHAPE, err, err_len, "fjob: input %d "
                                      "has a gap in its dims", i);
        }
        if (t->shape[0] == 0)
            return wf_errf_status(WF_E_BAD_SHAPE, err, err_len, "fjob: input %d has "
                                  "no dims", i);
    }
    return WF_OK;
}


wf_status_t wf_cmsg_check_data(const char *data, uint32_t ranks, const char *key,
                               char *err, size_t err_len)
{
    const char *why = NULL;
    const char *p = data;
    uint32_t n = 0;
    if (strncmp(p, "tcp://", 6) != 0) {
        why = "must start with tcp://";
        goto bad;
    }
    p += 6;
    size_t hl = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                          "0123456789._-");
    if (hl == 0 || hl > 253 || p[hl] != ':' || p[0] == '.' || p[0] == '-' ||
        p[hl - 1] == '.' || p[hl - 1] == '-') {
        why = "host must be 1..253 bytes of [A-Za-z0-9._-] followed by :PORT";
        goto bad;
    }
    p += hl;
    while (*p == ':' || *p == ',') {
        p++;
        size_t dl = strspn(p, "0123456789");
        unsigned long port = 0;
        for (size_t i = 0; i < dl && i < 6; i++)
            port = port * 10 + (unsigned long)(p[i] - '0');
        if (dl == 0 || dl > 5 || p[0] == '0' || port > 65535) {
            why = "each port must be 1..65535";
            goto bad;
        }
        n++;
        p += dl;
        if (*p == ':') {
            why = "one host only, then ,PORT per further endpoint";
            goto bad;
        }
    }
    if (*p != '\0') {
        why = "unexpected text after a port";
        goto bad;
    }
    if (ranks && n != ranks) {
        wf_errf(err, err_len, "field '%s': %u endpoint(s) for %u device(s)", key, n,
                ranks);
        return WF_E_BAD_FIELD;
    }
    return WF_OK;
bad:
    wf_errf(err, err_len, "field '%s': not tcp://HOST:PORT[,PORT...]: %s", key, why);
    return WF_E_BAD_FIELD;
}

/* A hello's endpoints: one per device. */
static wf_status_t hello_check(const void *body, char *err, size_t err_len)
{
    const wf_cmsg_hello_t *h = body;
    char e[WF_PROTO_ERROR_MAX];
    if (wf_cmsg_check_data(h->data, h->devices, "data", e, sizeof e) == WF_OK)
        return WF_OK;
    wf_errf(err, err_len, "hello: %s", e);
    return WF_E_BAD_FIELD;
}

/* A data message's endpoints (their count is checked against the node). */
static wf_status_t data_check(const void *body, char *err, size_t err_len)
{
    char e[WF_PROTO_ERROR_MAX];
    if (wf_cmsg_check_data(body, 0, "data", e, sizeof e) == WF_OK)
        return WF_OK;
    wf_errf(err, err_len, "data: %s", e);
    return WF_E_BAD_FIELD;
}

void wf_cmsg_nccl_id_encode(const unsigned char id[WF_CMSG_NCCL_ID_BYTES],
                            char out[WF_CMSG_NCCL_ID_Z85 + 1])
{
    _Static_assert(WF_CMSG_NCCL_ID_BYTES % 4 == 0 &&
                   WF_CMSG_NCCL_ID_Z85 == WF_CMSG_NCCL_ID_BYTES / 4 * 5, "Z85 size");
    if (!zmq_z85_encode(out, id, WF_CMSG_NCCL_ID_BYTES))
        out[0] = '\0';    /* not reached: the size is a multiple of 4 */
}

bool wf_cmsg_nccl_id_decode(const char *text, unsigned char out[WF_CMSG_NCCL_ID_BYTES])
{
    /* zmq_z85_decode wants 5k characters of its alphabet: check the length
     * here (it would read a shorter string as a shorter key) */
    unsigned char tmp[WF_CMSG_NCCL_ID_BYTES];
    if (!text || strlen(text) != WF_CMSG_NCCL_ID_Z85 || !zmq_z85_decode(tmp, text))
        return false;
    memcpy(out, tmp, sizeof tmp);
    return true;
}

/* A world's ranks are contiguous from 0, in node order; each node's
 * endpoints ("" allowed: none announced) one per rank; an NCCL id, when
 * present, is exactly WF_CMSG_NCCL_ID_BYTES bytes of Z85. */
static wf_status_t world_check(const void *body, char *err, size_t err_len)
{
    const wf_cmsg_world_t *w = body;
    unsigned char id[WF_CMSG_NCCL_ID_BYTES];
    if (w->ncclid[0] && !wf_cmsg_nccl_id_decode(w->ncclid, id)) {
        wf_errf(err, err_len, "world: field 'ncclid': must be %d Z85 characters "
                "(a %d-byte NCCL unique id)", WF_CMSG_NCCL_ID_Z85,
                WF_CMSG_NCCL_ID_BYTES);
        return WF_E_BAD_FIELD;
    }
    uint64_t next = 0;
    for (uint32_t k = 0; k < w->nn; k++) {
        if (w->nodes[k].rank != next) {
            wf_errf(err, err_len, "world: field 'n%u.rank': %u, the ranks before "
                    "end at %llu", k, w->nodes[k].rank, (unsigned long long)next);
            return WF_E_BAD_FIELD;
        }
        next += w->nodes[k].ranks;
        char key[24], e[WF_PROTO_ERROR_MAX];
        snprintf(key, sizeof key, "n%u.data", k);
        if (w->nodes[k].data[0] &&
            wf_cmsg_check_data(w->nodes[k].data, w->nodes[k].ranks, key, e,
                               sizeof e) != WF_OK) {
            wf_errf(err, err_len, "world: %s", e);
            return WF_E_BAD_FIELD;
        }
    }
    return WF_OK;
}

/* An mload's path follows the model path rule (section 12.1). */
static wf_status_t mload_check(const void *body, char *err, size_t err_len)
{
    const wf_cmsg_mload_t *l = body;
    char e[WF_PROTO_ERROR_MAX];
    if (wf_check_model_path(l->path, strlen(l->path), e, sizeof e) == WF_OK)
        return WF_OK;
    wf_errf(err, err_len, "mload: field 'path': %s", e);
    return WF_E_BAD_FIELD;
}

/* A head split's mask: bit 0 (rank 0 at base) and g bits in all. */
static wf_status_t job_check(const void *body, char *err, size_t err_len)
{
    const wf_cjob_t *j = body;
    if (!j->hs)
        return WF_OK;
    uint32_t bits = 0;
    for (uint64_t x = j->mask; x; x &= x - 1)
        bits++;
    if (!(j->mask & 1) || bits != j->g) {
        wf_errf(err, err_len, "job: field 'mask': %#llx must have bit 0 and g = %u "
                "bits set", (unsigned long long)j->mask, j->g);
        return WF_E_BAD_FIELD;
    }
    return WF_OK;
}

#define SPEC(ty, name, f, chk, nd) { ty, name, f, N(f), chk, nd }

static const spec_t specs[] = {
    SPEC(WF_CMSG_HELLO, "hello", hello_fields, hello_check, false),
    SPEC(WF_CMSG_READY, "ready", epoch_fields, NULL, false),
    SPEC(WF_CMSG_PING, "ping", epoch_fields, NULL, false),
    SPEC(WF_CMSG_DATA, "data", data_fields, data_check, false),
    SPEC(WF_CMSG_DONE, "done", done_fields, NULL, false),
    SPEC(WF_CMSG_ABORTED, "aborted", aborted_fields, NULL, false),
    SPEC(WF_CMSG_REFUSE, "refuse", refuse_fields, NULL, false),
    SPEC(WF_CMSG_WORLD, "world", world_fields, world_check, true),
    SPEC(WF_CMSG_SERVE, "serve", epoch_fields, NULL, false),
    SPEC(WF_CMSG_PONG, "pong", epoch_fields, NULL, false),
    { WF_CMSG_REJOIN, "rejoin", NULL, 0, NULL, false },
    SPEC(WF_CMSG_MESH, "mesh", mesh_fields, NULL, false),
    SPEC(WF_CMSG_JOB, "job", job_fields, job_check, false),
    SPEC(WF_CMSG_ABORT, "abort", abort_fields, NULL, false),
    SPEC(WF_CMSG_XFER_HI, "hi", hi_fields, NULL, false),
    SPEC(WF_CMSG_XFER_IN, "in", in_fields, NULL, false),
    SPEC(WF_CMSG_XFER_OUT, "out", out_fields, NULL, false),
    SPEC(WF_CMSG_MLOAD, "mload", mload_fields, mload_check, false),
    SPEC(WF_CMSG_MFOUND, "mfound", mfound_fields, NULL, false),
    SPEC(WF_CMSG_MGO, "mgo", mstep_fields, NULL, false),
    SPEC(WF_CMSG_MDROP, "mdrop", mstep_fields, NULL, false),
    SPEC(WF_CMSG_MREAD, "mread", mres_fields, NULL, false),
    SPEC(WF_CMSG_MREADY, "mready", mres_fields, NULL, false),
    SPEC(WF_CMSG_FJOB, "fjob", fjob_fields, fjob_check, false),
};

/* The key of the message's "t", the only one outside the tables. */
#define TYPE_KEY "t"

static const spec_t *spec_of(wf_cmsg_type_t type)
{
    for (size_t i = 0; i < N(specs); i++)
        if (specs[i].type == type)
            return &specs[i];
    return NULL;
}

wf_cmsg_type_t wf_cmsg_type(const wf_ctl_msg_t *m)
{
    const char *t = wf_ctl_get_str(m, TYPE_KEY);
    for (size_t i = 0; t && i < N(specs); i++)
        if (strcmp(specs[i].t, t) == 0)
            return specs[i].type;
    return WF_CMSG_UNKNOWN;
}

const char *wf_cmsg_type_name(wf_cmsg_type_t type)
{
    const spec_t *s = spec_of(type);
    return s ? s->t : "?";
}

/* ---- put ---------------------------------------------------------- */

static wf_status_t put_field(wf_ctl_msg_t *m, const field_t *f, const char *key,
                             const void *body)
{
    const char *p = (const char *)body + f->off;
    uint64_t v = 0;
    switch (f->kind) {
    case K_STR:
        if (!memchr(p, '\0', f->max))
            return WF_E_BAD_ARGUMENT;
        if ((f->flags & F_OMIT) && p[0] == '\0')
            return WF_OK;
        return wf_ctl_put_str(m, key, p);
    case K_U64: memcpy(&v, p, sizeof v); break;
    case K_U32: { uint32_t x; memcpy(&x, p, sizeof x); v = x; break; }
    case K_DIM: { int64_t x; memcpy(&x, p, sizeof x); v = (uint64_t)x; break; }
    case K_BOOL: { bool x; memcpy(&x, p, sizeof x); v = x; break; }
    case K_DTYPE: { wf_dtype_t x; memcpy(&x, p, sizeof x); v = (uint64_t)x; break; }
    case K_ROT: { wf_rotate_t x; memcpy(&x, p, sizeof x); v = (uint64_t)x; break; }
    case K_F32: { uint32_t x; memcpy(&x, p, sizeof x); v = x; break; }
    case K_STATUS: {
        wf_status_t x;
        memcpy(&x, p, sizeof x);
        v = (uint64_t)(int64_t)x & 0xffffffffu;
        break;
    }
    }
    if ((f->flags & F_OMIT) && v == 0)
        return WF_OK;
    return wf_ctl_put_uint(m, key, v);
}

static wf_status_t put_fields(wf_ctl_msg_t *m, const field_t *fields, size_t n,
                              const char *prefix, const void *body)
{
    for (size_t i = 0; i < n; i++) {
        char key[WF_CTL_KEY_MAX];
        if (snprintf(key, sizeof key, "%s%s", prefix, fields[i].key) >= (int)sizeof key)
            return WF_E_LIMIT;
        wf_status_t rc = put_field(m, &fields[i], key, body);
        if (rc != WF_OK)
            return rc;
    }
    return WF_OK;
}

static wf_status_t put_spec(wf_ctl_msg_t *m, const spec_t *s, const void *body)
{
    wf_ctl_init(m);
    wf_status_t rc = wf_ctl_put_str(m, TYPE_KEY, s->t);
    if (rc == WF_OK)
        rc = put_fields(m, s->fields, s->n_fields, "", body);
    if (rc != WF_OK || !s->nodes)
        return rc;
    const wf_cmsg_world_t *w = body;
    if (w->nn > WF_CMSG_MAX_NODES)
        return WF_E_BAD_ARGUMENT;
    for (uint32_t k = 0; k < w->nn && rc == WF_OK; k++) {
        char prefix[16];
        snprintf(prefix, sizeof prefix, "n%u", k);
        rc = put_fields(m, node_fields, N(node_fields), prefix, &w->nodes[k]);
    }
    return rc;
}

wf_status_t wf_cmsg_put(wf_ctl_msg_t *m, const wf_cmsg_t *msg)
{
    const spec_t *s = spec_of(msg->type);
    if (!s)
        return WF_E_BAD_ARGUMENT;
    return put_spec(m, s, &msg->u);
}

wf_status_t wf_cjob_put(wf_ctl_msg_t *m, const wf_cjob_t *job)
{
    return put_spec(m, spec_of(WF_CMSG_JOB), job);
}

/* ---- get ---------------------------------------------------------- */

/* Read one field into body; on failure body keeps its 0 and err says why
 * (t: the message type, for the message). */
static wf_status_t get_field(const wf_ctl_msg_t *m, const field_t *f, const char *key,
                             const char *t, void *body, char *err, size_t err_len)
{
    char *p = (char *)body + f->off;
    const wf_ctl_field_t *v = wf_ctl_get(m, key);
    if (!v) {
        if (f->flags & (F_OPT | F_OMIT))
            return WF_OK;
        wf_errf(err, err_len, "%s: field '%s': missing", t, key);
        return WF_E_BAD_FIELD;
    }
    if (f->kind == K_STR) {
        size_t len = strlen(v->s);
        if (!v->is_str || len < f->min || len >= f->max) {
            wf_errf(err, err_len, "%s: field '%s': must be a str of %llu..%llu bytes",
                    t, key, (unsigned long long)f->min,
                    (unsigned long long)(f->max - 1));
            return WF_E_BAD_FIELD;
        }
        if ((f->flags & F_NAME) && len > 0) {
            char why[WF_PROTO_ERROR_MAX];
            if (wf_check_model_name(v->s, len, why, sizeof why) != WF_OK) {
                wf_errf(err, err_len, "%s: field '%s': %s", t, key, why);
                return WF_E_BAD_FIELD;
            }
        }
        memcpy(p, v->s, len + 1);
        return WF_OK;
    }
    if (v->is_str) {
        wf_errf(err, err_len, "%s: field '%s': must be a uint, got a str", t, key);
        return WF_E_BAD_FIELD;
    }
    uint64_t u = v->u, lo = 0, hi = UINT64_MAX;
    wf_status_t code = WF_E_BAD_FIELD;
    switch (f->kind) {
    case K_U64: case K_U32: lo = f->min; hi = f->max; break;
    case K_DIM: lo = 1; hi = INT32_MAX; code = WF_E_BAD_SHAPE; break;
    case K_BOOL: hi = 1; break;
    case K_DTYPE: hi = WF_DTYPE_BF16; code = WF_E_BAD_DTYPE; break;
    case K_ROT: hi = WF_ROTATE_ALLTOALL; break;
    case K_F32: case K_STATUS: hi = UINT32_MAX; break;
    case K_STR: break;
    }
    if (u < lo || u > hi) {
        wf_errf(err, err_len, "%s: field '%s': %llu not in %llu..%llu", t, key,
                (unsigned long long)u, (unsigned long long)lo, (unsigned long long)hi);
        return code;
    }
    switch (f->kind) {
    case K_U64: memcpy(p, &u, sizeof u); break;
    case K_U32: case K_F32: { uint32_t x = (uint32_t)u; memcpy(p, &x, sizeof x); break; }
    case K_DIM: { int64_t x = (int64_t)u; memcpy(p, &x, sizeof x); break; }
    case K_BOOL: { bool x = u != 0; memcpy(p, &x, sizeof x); break; }
    case K_DTYPE: { wf_dtype_t x = (wf_dtype_t)u; memcpy(p, &x, sizeof x); break; }
    case K_ROT: { wf_rotate_t x = (wf_rotate_t)u; memcpy(p, &x, sizeof x); break; }
    case K_STATUS: {
        wf_status_t x = (wf_status_t)(int32_t)(uint32_t)u;
        memcpy(p, &x, sizeof x);
        break;
    }
    case K_STR: break;
    }
    return WF_OK;
}

/* Every field, keeping the first failure (and its message). */
static wf_status_t get_fields(const wf_ctl_msg_t *m, const field_t *fields, size_t n,
                              const char *prefix, const char *t, void *body,
                              wf_status_t first, char *err, size_t err_len)
{
    for (size_t i = 0; i < n; i++) {
        char key[WF_CTL_KEY_MAX];
        snprintf(key, sizeof key, "%s%s", prefix, fields[i].key);
        bool report = first == WF_OK;
        wf_status_t rc = get_field(m, &fields[i], key, t, body, report ? err : NULL,
                                   report ? err_len : 0);
        if (report)
            first = rc;
    }
    return first;
}

static wf_status_t get_spec(const wf_ctl_msg_t *m, const spec_t *s, void *body,
                            char *err, size_t err_len)
{
    wf_status_t rc = get_fields(m, s->fields, s->n_fields, "", s->t, body, WF_OK,
                                err, err_len);
    if (s->nodes) {
        wf_cmsg_world_t *w = body;
        for (uint32_t k = 0; k < w->nn; k++) {   /* nn is 0 when it was bad */
            char prefix[16];
            snprintf(prefix, sizeof prefix, "n%u", k);
            rc = get_fields(m, node_fields, N(node_fields), prefix, s->t,
                            &w->nodes[k], rc, err, err_len);
        }
    }
    if (rc == WF_OK && s->check)
        rc = s->check(body, err, err_len);
    return rc;
}

wf_status_t wf_cmsg_get(const wf_ctl_msg_t *m, wf_cmsg_t *ret, char *err,
                        size_t err_len)
{
    memset(ret, 0, sizeof *ret);
    ret->type = wf_cmsg_type(m);
    const spec_t *s = spec_of(ret->type);
    if (!s) {
        /* the peer's text goes into logs: printable ASCII only */
        const char *t = wf_ctl_get_str(m, TYPE_KEY);
        char shown[33] = "";
        for (size_t i = 0; t && t[i] && i + 1 < sizeof shown; i++) {
            unsigned char c = (unsigned char)t[i];
            shown[i] = (c >= 0x20 && c < 0x7f && c != '"') ? (char)c : '?';
        }
        wf_errf(err, err_len, "field '%s': %s%s%s", TYPE_KEY,
                t ? "unknown message type \"" : "missing or not a str", shown,
                t ? "\"" : "");
        return WF_E_UNKNOWN_OP;
    }
    return get_spec(m, s, &ret->u, err, err_len);
}

wf_status_t wf_cjob_get(const wf_ctl_msg_t *m, wf_cjob_t *ret, char *err,
                        size_t err_len)
{
    memset(ret, 0, sizeof *ret);
    if (wf_cmsg_type(m) != WF_CMSG_JOB) {
        wf_errf(err, err_len, "field '%s': not a job descriptor", TYPE_KEY);
        return WF_E_UNKNOWN_OP;
    }
    return get_spec(m, spec_of(WF_CMSG_JOB), ret, err, err_len);
}
