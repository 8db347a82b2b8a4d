/* decode.c — msgpack header frames into wf_request_t / wf_reply_t.
 *
 * Requests are decoded strictly (the daemon side): every key is known,
 * none repeats, every field has its type, and the first problem found is
 * returned with a stable code and a message naming the field. Replies are
 * decoded tolerantly (the client side): unknown keys are skipped so that a
 * newer daemon can add fields. msgpack-c only ever sees bytes that passed
 * wf_msgpack_prevalidate(). The order of the checks is normative, see
 * proto/PROTOCOL.md "Validation order".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <msgpack.h>

#include "errf.h"
#include "proto.h"
#include "proto_check.h"

/* Where messages go (errf.h's formatter writes them). */
typedef wf_errbuf_t dec_t;

/* A printable excerpt of a str object for messages: wf_escape'd to
 * printable ASCII (errf.h), truncated with "..." to fit buf. */
static const char *excerpt(const msgpack_object *o, char buf[40])
{
    buf[0] = '\0';
    if (o->type == MSGPACK_OBJECT_STR)
        wf_escape(buf, 40, o->via.str.ptr, o->via.str.size, WF_ESC_ASCII);
    return buf;
}

static const char *type_name(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER: return "unsigned integer";
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "negative integer";
    case MSGPACK_OBJECT_FLOAT32: return "float32";
    case MSGPACK_OBJECT_FLOAT64: return "float64";
    case MSGPACK_OBJECT_STR: return "str";
    case MSGPACK_OBJECT_ARRAY: return "array";
    case MSGPACK_OBJECT_MAP: return "map";
    case MSGPACK_OBJECT_BIN: return "bin";
    case MSGPACK_OBJECT_EXT: return "ext";
    }
    return "unknown";
}

static bool key_is(const msgpack_object *k, const char *s)
{
    size_t n = strlen(s);
    return k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
           memcmp(k->via.str.ptr, s, n) == 0;
}

/* First value stored under key `name`, or NULL. */
static const msgpack_object *map_get(const msgpack_object *map, const char *name)
{
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (key_is(&map->via.map.ptr[i].key, name))
            return &map->via.map.ptr[i].val;
    return NULL;
}

/* Strict map: every key is a str among names[0..n), none twice. vals[i]
 * gets the value of names[i] or NULL. */
static wf_status_t map_fields(dec_t *d, const msgpack_object *map,
                             const char *path, const char *const *names,
                             int n, const msgpack_object **vals)
{
    for (int j = 0; j < n; j++)
        vals[j] = NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        char buf[40];
        if (k->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: key #%u is a %s, keys must be str",
                               path, i, type_name(k));
        int j = 0;
        while (j < n && !key_is(k, names[j]))
            j++;
        if (j == n)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: unknown key \"%s\"", path, excerpt(k, buf));
        if (vals[j])
            return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: duplicate key \"%s\"", path, names[j]);
        vals[j] = &map->via.map.ptr[i].val;
    }
    return WF_OK;
}

static bool as_uint(const msgpack_object *o, uint64_t *v)
{
    if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *v = o->via.u64;
    return true;
}

/* Any msgpack number as a double (integers included). */
static bool as_number(const msgpack_object *o, double *v)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *v = (double)o->via.u64; return true;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = (double)o->via.i64; return true;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *v = o->via.f64; return true;
    default: return false;
    }
}

bool wf_dtype_parse(const char *name, size_t len, wf_dtype_t *ret_dtype)
{
    static const wf_dtype_t all[] = { WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16 };
    if (!name)
        return false;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        const char *n = wf_dtype_name(all[i]);
        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *ret_dtype = all[i];
            return true;
        }
    }
    return false;
}

wf_status_t wf_tensor_desc_finish(wf_tensor_desc_t *desc)
{
    size_t esize = wf_dtype_size(desc->dtype);
    if (esize == 0)
        return WF_E_BAD_DTYPE;
    if (desc->rank < 1 || desc->rank > WF_MAX_RANK)
        return WF_E_BAD_SHAPE;
    int64_t numel = 1;
    for (int i = 0; i < desc->rank; i++)
        if (desc->shape[i] <= 0 || __builtin_mul_overflow(numel, desc->shape[i], &numel))
            return WF_E_BAD_SHAPE;
    int64_t nbytes;
    if (__builtin_mul_overflow(numel, (int64_t)esize, &nbytes))
        return WF_E_BAD_SHAPE;
    desc->numel = (uint64_t)numel;
    desc->nbytes = (uint64_t)nbytes;
    return WF_OK;
}

/* One tensor descriptor {name, dtype, shape, frame}. strict: unknown keys
 * are an error (requests); otherwise skipped (replies). n_frames: frame
 * indices must be below it. */
static wf_status_t decode_desc(dec_t *d, const msgpack_object *o, uint32_t idx,
                               bool strict, uint32_t n_frames,
                               uint64_t max_tensor_bytes, wf_tensor_desc_t *t)
{
    char q[WF_QUOTE_MAX];
    static const char *const names[] = { "name", "dtype", "shape", "frame" };
    const msgpack_object *f[4];
    char buf[40];
    wf_status_t rc;

    if (o->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u]: must be a map, got %s", idx,
                           type_name(o));
    if (strict) {
        char path[32];
        snprintf(path, sizeof(path), "tensors[%u]", idx);
        if ((rc = map_fields(d, o, path, names, 4, f)) != WF_OK)
            return rc;
    } else {
        for (int j = 0; j < 4; j++)
            f[j] = map_get(o, names[j]);
    }
    for (int j = 0; j < 4; j++)
        if (!f[j])
            return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u].%s: missing", idx, names[j]);

    /* name: 1..WF_PROTO_NAME_MAX-1 bytes, no NUL (it becomes a C string) */
    if (f[0]->type != MSGPACK_OBJECT_STR)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u].name: must be a str, got %s",
                           idx, type_name(f[0]));
    uint32_t nlen = f[0]->via.str.size;
    if (nlen == 0 || nlen >= WF_PROTO_NAME_MAX ||
        memchr(f[0]->via.str.ptr, '\0', nlen))
        return wf_errf_buf(d, WF_E_BAD_FIELD,
                           "tensors[%u].name: must be 1..%d bytes without NUL, got %u bytes",
                           idx, WF_PROTO_NAME_MAX - 1, nlen);
    memcpy(t->name, f[0]->via.str.ptr, nlen);
    t->name[nlen] = '\0';

    if (f[1]->type != MSGPACK_OBJECT_STR)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u].dtype: must be a str, got %s",
                           idx, type_name(f[1]));
    if (!wf_dtype_parse(f[1]->via.str.ptr, f[1]->via.str.size, &t->dtype))
        return wf_errf_buf(d, WF_E_BAD_DTYPE,
                           "tensors[%u].dtype: unknown dtype \"%s\" (f32, f16, bf16)", idx,
                           excerpt(f[1], buf));

    if (f[2]->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u].shape: must be an array, got %s",
                           idx, type_name(f[2]));
    uint32_t rank = f[2]->via.array.size;
    if (rank < 1 || rank > WF_MAX_RANK)
        return wf_errf_buf(d, WF_E_BAD_SHAPE, "tensors[%u].shape: rank must be 1..%d, got %u",
                           idx, WF_MAX_RANK, rank);
    t->rank = (int)rank;
    for (uint32_t i = 0; i < rank; i++) {
        const msgpack_object *e = &f[2]->via.array.ptr[i];
        if (e->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
            return wf_errf_buf(d, WF_E_BAD_SHAPE,
                               "tensors[%u].shape[%u]: dim must be > 0, got %lld", idx, i,
                               (long long)e->via.i64);
        if (e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return wf_errf_buf(d, WF_E_BAD_SHAPE,
                               "tensors[%u].shape[%u]: dim must be an integer, got %s", idx, i,
                               type_name(e));
        if (e->via.u64 == 0)
            return wf_errf_buf(d, WF_E_BAD_SHAPE, "tensors[%u].shape[%u]: dim must be > 0, got 0",
                               idx, i);
        if (e->via.u64 > (uint64_t)INT64_MAX)
            return wf_errf_buf(d, WF_E_BAD_SHAPE, "tensors[%u].shape[%u]: dim %llu overflows int64",
                               idx, i, (unsigned long long)e->via.u64);
        t->shape[i] = (int64_t)e->via.u64;
    }
    if (wf_tensor_desc_finish(t) != WF_OK)
        return wf_errf_buf(d, WF_E_BAD_SHAPE, "tensors[%u].shape: byte size overflows int64", idx);

    uint64_t fr;
    if (!as_uint(f[3], &fr))
        return wf_errf_buf(d, WF_E_BAD_FIELD,
                           "tensors[%u].frame: must be an unsigned integer, got %s", idx,
                           type_name(f[3]));
    if (fr >= n_frames)
        return wf_errf_buf(d, WF_E_FRAME_MISMATCH, "tensors[%u].frame: %llu out of range 0..%u",
                           idx, (unsigned long long)fr, n_frames - 1);
    t->frame = (uint32_t)fr;

    if (t->nbytes > max_tensor_bytes)
        return wf_errf_buf(d, WF_E_LIMIT, "tensors[%u] (\"%s\"): %llu bytes, limit %llu", idx,
                           wf_quote(q, t->name), (unsigned long long)t->nbytes,
                           (unsigned long long)max_tensor_bytes);
    return WF_OK;
}

/* The "tensors" array: descriptors, frames a permutation of 0..n-1,
 * unique names. */
static wf_status_t decode_tensors(dec_t *d, const msgpack_object *o, bool strict,
                                  uint32_t max_tensors, uint64_t max_tensor_bytes,
                                  uint32_t *ret_n, wf_tensor_desc_t *tensors)
{
    char q[WF_QUOTE_MAX];
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors: must be an array, got %s", type_name(o));
    uint32_t n = o->via.array.size;
    if (max_tensors > WF_PROTO_MAX_TENSORS)
        max_tensors = WF_PROTO_MAX_TENSORS;
    if (n > max_tensors)
        return wf_errf_buf(d, WF_E_LIMIT, "tensors: %u tensors, limit %u", n, max_tensors);
    bool seen[WF_PROTO_MAX_TENSORS] = { false };
    for (uint32_t i = 0; i < n; i++) {
        wf_status_t rc = decode_desc(d, &o->via.array.ptr[i], i, strict, n,
                                     max_tensor_bytes, &tensors[i]);
        if (rc != WF_OK)
            return rc;
        *ret_n = i + 1;
        if (seen[tensors[i].frame])
            return wf_errf_buf(d, WF_E_FRAME_MISMATCH, "tensors[%u].frame: %u used twice", i,
                               tensors[i].frame);
        seen[tensors[i].frame] = true;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(tensors[j].name, tensors[i].name) == 0)
                return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors[%u].name: \"%s\" used twice", i,
                                   wf_quote(q, tensors[i].name));
    }
    *ret_n = n;
    return WF_OK;
}

static int find_tensor(const wf_request_t *req, const char *name)
{
    for (uint32_t i = 0; i < req->n_tensors; i++)
        if (strcmp(req->tensors[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* An optional bool argument as a tri-state: absent stays DEFAULT. */
static wf_status_t opt_flag(dec_t *d, const msgpack_object *o, const char *name,
                            wf_opt_t *ret)
{
    if (!o)
        return WF_OK;
    if (o->type != MSGPACK_OBJECT_BOOLEAN)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.%s: must be a bool, got %s", name,
                           type_name(o));
    *ret = o->via.boolean ? WF_OPT_ON : WF_OPT_OFF;
    return WF_OK;
}

static bool str_is(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

/* "deadline_ms" (attention, forward): absent = 0 = none. */
static wf_status_t opt_deadline(dec_t *d, const msgpack_object *o, uint32_t *ret)
{
    uint64_t n;
    if (!o)
        return WF_OK;
    if (!as_uint(o, &n) || n > UINT32_MAX)
        return wf_errf_buf(d, WF_E_BAD_FIELD,
                           "args.deadline_ms: must be an unsigned 32-bit integer");
    *ret = (uint32_t)n;
    return WF_OK;
}

/* "precision" (attention, forward): "default" or "fp8"; absent = default. */
static wf_status_t opt_precision(dec_t *d, const msgpack_object *o, bool *ret)
{
    char buf[40];
    if (!o)
        return WF_OK;
    if (o->type != MSGPACK_OBJECT_STR)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.precision: must be a str, got %s",
                           type_name(o));
    if (str_is(o, "fp8"))
        *ret = true;
    else if (!str_is(o, "default"))
        return wf_errf_buf(d, WF_E_BAD_FIELD,
                           "args.precision: unknown precision \"%s\" (default, fp8)",
                           excerpt(o, buf));
    return WF_OK;
}

static wf_status_t decode_attention(dec_t *d, const msgpack_object *args,
                                    wf_request_t *req)
{
    char qn[WF_QUOTE_MAX];
    static const char *const names[] = { "scale", "causal", "return_lse",
                                         "out_dtype", "devices", "rotate_method",
                                         "convert_to_fp32", "ring_anything",
                                         "ulysses_anything", "load_balance",
                                         "deadline_ms", "precision" };
    enum { N_ARGS = sizeof(names) / sizeof(names[0]) };
    const msgpack_object *f[N_ARGS] = { NULL };
    wf_attention_args_t *a = &req->args.attention;
    wf_status_t rc;
    char buf[40];

    if (args && (rc = map_fields(d, args, "args", names, N_ARGS, f)) != WF_OK)
        return rc;
    double scale = 0;
    if (f[0]) {
        if (!as_number(f[0], &scale))
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.scale: must be a number, got %s",
                               type_name(f[0]));
        a->has_scale = true;
    }
    if (f[1]) {
        if (f[1]->type != MSGPACK_OBJECT_BOOLEAN)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.causal: must be a bool, got %s",
                               type_name(f[1]));
        a->causal = f[1]->via.boolean;
    }
    if (f[2]) {
        if (f[2]->type != MSGPACK_OBJECT_BOOLEAN)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.return_lse: must be a bool, got %s",
                               type_name(f[2]));
        a->return_lse = f[2]->via.boolean;
    }
    if (f[3]) {
        if (f[3]->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.out_dtype: must be a str, got %s",
                               type_name(f[3]));
        if (!wf_dtype_parse(f[3]->via.str.ptr, f[3]->via.str.size, &a->out_dtype))
            return wf_errf_buf(d, WF_E_BAD_DTYPE, "args.out_dtype: unknown dtype \"%s\"",
                               excerpt(f[3], buf));
        a->has_out_dtype = true;
    }
    if (f[4]) {
        uint64_t n;
        if (!as_uint(f[4], &n) || n > UINT32_MAX)
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.devices: must be an unsigned 32-bit integer");
        a->devices = (uint32_t)n;
    }
    if (f[5]) {
        if (f[5]->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.rotate_method: must be a str, got %s",
                               type_name(f[5]));
        if (str_is(f[5], "allgather"))
            a->rotate_method = WF_ROTATE_ALLGATHER;
        else if (str_is(f[5], "alltoall"))
            a->rotate_method = WF_ROTATE_ALLTOALL;
        else
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.rotate_method: unknown method \"%s\" (allgather, alltoall)",
                               excerpt(f[5], buf));
    }
    if ((rc = opt_flag(d, f[6], names[6], &a->convert_to_fp32)) != WF_OK ||
        (rc = opt_flag(d, f[7], names[7], &a->ring_anything)) != WF_OK ||
        (rc = opt_flag(d, f[8], names[8], &a->ulysses_anything)) != WF_OK ||
        (rc = opt_flag(d, f[9], names[9], &a->load_balance)) != WF_OK ||
        (rc = opt_deadline(d, f[10], &a->deadline_ms)) != WF_OK ||
        (rc = opt_precision(d, f[11], &a->fp8)) != WF_OK)
        return rc;

    static const char *const qkv[] = { "q", "k", "v" };
    int idx[3];
    for (int i = 0; i < 3; i++)
        if ((idx[i] = find_tensor(req, qkv[i])) < 0)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors: no tensor named \"%s\"", qkv[i]);
    if (req->n_tensors != 3) {
        for (uint32_t i = 0; i < req->n_tensors; i++)
            if ((int)i != idx[0] && (int)i != idx[1] && (int)i != idx[2])
                return wf_errf_buf(d, WF_E_BAD_ARGUMENT,
                                   "tensors[%u]: unexpected tensor \"%s\" "
                                   "(attention takes q, k, v)", i, wf_quote(qn, req->tensors[i].name));
    }
    a->q = idx[0];
    a->k = idx[1];
    a->v = idx[2];
    const wf_tensor_desc_t *q = &req->tensors[a->q], *k = &req->tensors[a->k],
                           *v = &req->tensors[a->v];
    for (int i = 0; i < 3; i++)
        if (req->tensors[idx[i]].rank != 4)
            return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "%s: rank must be 4 (B, S, H, D), got %d",
                               qkv[i], req->tensors[idx[i]].rank);
    for (int i = 0; i < 4; i++)
        if (k->shape[i] != v->shape[i])
            return wf_errf_buf(d, WF_E_BAD_ARGUMENT,
                               "k and v shapes differ in dim %d (%lld vs %lld)", i,
                               (long long)k->shape[i], (long long)v->shape[i]);
    if (q->shape[0] != k->shape[0])
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "batch of q (%lld) and k (%lld) differ",
                           (long long)q->shape[0], (long long)k->shape[0]);
    if (q->shape[3] != k->shape[3])
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "head dim of q (%lld) and k (%lld) differ",
                           (long long)q->shape[3], (long long)k->shape[3]);
    if (q->shape[2] % k->shape[2] != 0)
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "k/v heads (%lld) do not divide q heads (%lld)",
                           (long long)k->shape[2], (long long)q->shape[2]);
    if (a->has_scale) {
        float s = (float)scale;
        if (!isfinite(scale) || !isfinite(s) || !(s > 0.0f) || !(s <= WF_ATTN_SCALE_MAX))
            return wf_errf_buf(d, WF_E_BAD_ARGUMENT,
                               "args.scale: must be > 0 and <= 2^64, got %g", scale);
        a->scale = s;
    }
    return WF_OK;
}

/* Mesh degrees of a reconfigure request: each a uint in
 * 1..WF_PROTO_MAX_DEGREE, absent = 1. Whether their product matches the
 * devices is the daemon's check. */
static wf_status_t decode_reconfigure(dec_t *d, const msgpack_object *args,
                                      wf_request_t *req)
{
    static const char *const names[] = { "dp", "ring", "ulysses", "tp" };
    const msgpack_object *f[4] = { NULL, NULL, NULL, NULL };
    uint32_t deg[4] = { 1, 1, 1, 1 };
    wf_status_t rc;

    if (args && (rc = map_fields(d, args, "args", names, 4, f)) != WF_OK)
        return rc;
    for (int i = 0; i < 4; i++) {
        uint64_t u;
        if (!f[i])
            continue;
        if (!as_uint(f[i], &u))
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.%s: must be an unsigned integer, got %s",
                               names[i], type_name(f[i]));
        if (u < 1 || u > WF_PROTO_MAX_DEGREE)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.%s: degree must be 1..%d, got %llu",
                               names[i], WF_PROTO_MAX_DEGREE, (unsigned long long)u);
        deg[i] = (uint32_t)u;
    }
    if (req->n_tensors > 0)
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "tensors: op %u takes no tensors, got %u",
                           req->op, req->n_tensors);
    req->args.reconfigure.mesh = (wf_mesh_degrees_t){ .dp = deg[0], .ring = deg[1],
                                                      .ulysses = deg[2], .tp = deg[3] };
    return WF_OK;
}

/* ---- resident models (PROTOCOL.md section 12) ---- */

/* A str field checked by one of proto_check.h's rules and copied into a
 * buffer of cap bytes (the rule bounds the length below cap). */
typedef wf_status_t (*str_rule_fn)(const char *s, size_t len, char *err, size_t err_len);

static wf_status_t take_str(dec_t *d, const msgpack_object *o, const char *path,
                            str_rule_fn rule, char *out, size_t cap)
{
    char why[160];
    if (!o)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: missing", path);
    if (o->type != MSGPACK_OBJECT_STR)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: must be a str, got %s", path, type_name(o));
    wf_status_t rc = rule(o->via.str.ptr, o->via.str.size, why, sizeof(why));
    if (rc != WF_OK)
        return wf_errf_buf(d, rc, "%s: %s", path, why);
    if (o->via.str.size >= cap) /* the rules bound it; never trust that blindly */
        return wf_errf_buf(d, WF_E_BAD_FIELD, "%s: too long", path);
    memcpy(out, o->via.str.ptr, o->via.str.size);
    out[o->via.str.size] = '\0';
    return WF_OK;
}

/* The "blocks" of a packed rule: an array of 1..WF_TP_MAX_BLOCKS uints in
 * 1..2^32-1 (more entries: WF_E_LIMIT). */
static wf_status_t decode_blocks(dec_t *d, const msgpack_object *o, const char *glob,
                                 wf_tp_rule_t *r)
{
    if (o->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_BAD_FIELD,
                           "args.tp_plan[\"%s\"].blocks: must be an array, got %s", glob,
                           type_name(o));
    uint32_t n = o->via.array.size;
    if (n > WF_TP_MAX_BLOCKS)
        return wf_errf_buf(d, WF_E_LIMIT, "args.tp_plan[\"%s\"].blocks: %u blocks, limit %d", glob,
                           n, WF_TP_MAX_BLOCKS);
    for (uint32_t b = 0; b < n; b++) {
        uint64_t u;
        if (!as_uint(&o->via.array.ptr[b], &u) || u == 0 || u > UINT32_MAX)
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.tp_plan[\"%s\"].blocks[%u]: must be an integer in 1..%u",
                               glob, b, UINT32_MAX);
        r->blocks[b] = (uint32_t)u;
    }
    r->n_blocks = n;
    return WF_OK;
}

/* "tp_plan": {glob: style | {"style": style, "blocks": [..]}, ...}, at
 * most WF_TP_MAX_RULES rules, in map order. */
static wf_status_t decode_plan(dec_t *d, const msgpack_object *o, wf_load_model_args_t *a)
{
    static const char *const names[] = { "style", "blocks" };
    char why[160], buf[40];
    wf_status_t rc;

    if (o->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.tp_plan: must be a map, got %s", type_name(o));
    uint32_t n = o->via.map.size;
    if (n > WF_TP_MAX_RULES)
        return wf_errf_buf(d, WF_E_LIMIT, "args.tp_plan: %u rules, limit %d", n, WF_TP_MAX_RULES);
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key, *v = &o->via.map.ptr[i].val;
        wf_tp_rule_t *r = &a->plan[i];
        if (k->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.tp_plan: key #%u is a %s, globs must be str", i, type_name(k));
        if ((rc = wf_check_tp_glob(k->via.str.ptr, k->via.str.size, why, sizeof(why))) !=
            WF_OK)
            return wf_errf_buf(d, rc, "args.tp_plan: key \"%s\": %s", excerpt(k, buf), why);
        memcpy(r->glob, k->via.str.ptr, k->via.str.size);
        r->glob[k->via.str.size] = '\0';
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(a->plan[j].glob, r->glob) == 0)
                return wf_errf_buf(d, WF_E_BAD_FIELD, "args.tp_plan: duplicate glob \"%s\"",
                                   r->glob);

        const msgpack_object *style = v, *blocks = NULL;
        if (v->type == MSGPACK_OBJECT_MAP) {
            const msgpack_object *f[2];
            char path[WF_TP_GLOB_MAX + 24];
            snprintf(path, sizeof(path), "args.tp_plan[\"%s\"]", r->glob);
            if ((rc = map_fields(d, v, path, names, 2, f)) != WF_OK)
                return rc;
            if (!f[0])
                return wf_errf_buf(d, WF_E_BAD_FIELD, "%s.style: missing", path);
            style = f[0];
            blocks = f[1];
        } else if (v->type != MSGPACK_OBJECT_STR) {
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.tp_plan[\"%s\"]: must be a style str or a map, got %s",
                               r->glob, type_name(v));
        }
        if (style->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.tp_plan[\"%s\"].style: must be a str, got %s", r->glob,
                               type_name(style));
        if (!wf_tp_style_parse(style->via.str.ptr, style->via.str.size, &r->style))
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.tp_plan[\"%s\"]: unknown style \"%s\" (replicated, colwise, "
                               "rowwise, packed_colwise, packed_rowwise)", r->glob,
                               excerpt(style, buf));
        if (blocks && (rc = decode_blocks(d, blocks, r->glob, r)) != WF_OK)
            return rc;
        /* blocks required for, and only allowed with, the packed styles */
        if ((rc = wf_check_tp_rule(r, why, sizeof(why))) != WF_OK)
            return wf_errf_buf(d, rc, "args.tp_plan[\"%s\"]: %s", r->glob, why);
        a->n_plan = i + 1;
    }
    return WF_OK;
}

/* Ops without tensors refuse any. */
static wf_status_t no_tensors(dec_t *d, const wf_request_t *req)
{
    if (req->n_tensors > 0)
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "tensors: op %u takes no tensors, got %u",
                           req->op, req->n_tensors);
    return WF_OK;
}

static wf_status_t decode_load_model(dec_t *d, const msgpack_object *args,
                                     wf_request_t *req)
{
    static const char *const names[] = { "name", "path", "tp_plan",
                                         "weights_already_sharded" };
    const msgpack_object *f[4] = { NULL, NULL, NULL, NULL };
    wf_load_model_args_t *a = &req->args.load_model;
    wf_status_t rc;

    if (args && (rc = map_fields(d, args, "args", names, 4, f)) != WF_OK)
        return rc;
    if ((rc = take_str(d, f[0], "args.name", wf_check_model_name, a->name,
                       sizeof(a->name))) != WF_OK ||
        (rc = take_str(d, f[1], "args.path", wf_check_model_path, a->path,
                       sizeof(a->path))) != WF_OK)
        return rc;
    if (f[2] && (rc = decode_plan(d, f[2], a)) != WF_OK)
        return rc;
    if (f[3]) {
        if (f[3]->type != MSGPACK_OBJECT_BOOLEAN)
            return wf_errf_buf(d, WF_E_BAD_FIELD,
                               "args.weights_already_sharded: must be a bool, got %s",
                               type_name(f[3]));
        a->weights_already_sharded = f[3]->via.boolean;
    }
    return no_tensors(d, req);
}

static wf_status_t decode_unload_model(dec_t *d, const msgpack_object *args,
                                       wf_request_t *req)
{
    static const char *const names[] = { "name" };
    const msgpack_object *f[1] = { NULL };
    wf_unload_model_args_t *a = &req->args.unload_model;
    wf_status_t rc;

    if (args && (rc = map_fields(d, args, "args", names, 1, f)) != WF_OK)
        return rc;
    if ((rc = take_str(d, f[0], "args.name", wf_check_model_name, a->name,
                       sizeof(a->name))) != WF_OK)
        return rc;
    return no_tensors(d, req);
}

/* forward: {"model", "out_dtype"?, "deadline_ms"?, "precision"?,
 * "split_batch"?}; its
 * tensors are the model's inputs by name, which only the daemon knows
 * (wf_schema_bind against the model's schema): here only that there is
 * at least one (names are unique in every message). */
static wf_status_t decode_forward(dec_t *d, const msgpack_object *args, wf_request_t *req)
{
    static const char *const names[] = { "model", "out_dtype", "deadline_ms", "precision",
                                         "split_batch", "session", "step",
                                         "cache_threshold" };
    const msgpack_object *f[8] = { NULL };
    wf_forward_args_t *a = &req->args.forward;
    wf_status_t rc;
    char buf[40];
    wf_opt_t split = WF_OPT_DEFAULT;

    if (args && (rc = map_fields(d, args, "args", names, 8, f)) != WF_OK)
        return rc;
    if ((rc = opt_deadline(d, f[2], &a->deadline_ms)) != WF_OK ||
        (rc = opt_precision(d, f[3], &a->fp8)) != WF_OK ||
        (rc = opt_flag(d, f[4], "split_batch", &split)) != WF_OK)
        return rc;
    a->split_batch = split == WF_OPT_ON;
    if (f[5] && (!as_uint(f[5], &a->session) || a->session == 0))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.session: must be an unsigned integer "
                           ">= 1, got %s", f[5]->type == MSGPACK_OBJECT_POSITIVE_INTEGER
                                               ? "0" : type_name(f[5]));
    if (f[6] && !as_uint(f[6], &a->step))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.step: must be an unsigned integer, got %s",
                           type_name(f[6]));
    a->has_step = f[6] != NULL;
    if (f[7] && (!as_number(f[7], &a->cache_threshold) || !isfinite(a->cache_threshold) ||
                 a->cache_threshold < 0))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.cache_threshold: must be a finite "
                           "number >= 0");
    if ((f[6] || f[7]) && !f[5])
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.%s: only with args.session",
                           f[6] ? "step" : "cache_threshold");
    if ((rc = take_str(d, f[0], "args.model", wf_check_model_name, a->model,
                       sizeof(a->model))) != WF_OK)
        return rc;
    if (f[1]) {
        if (f[1]->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_BAD_FIELD, "args.out_dtype: must be a str, got %s",
                               type_name(f[1]));
        if (!wf_dtype_parse(f[1]->via.str.ptr, f[1]->via.str.size, &a->out_dtype))
            return wf_errf_buf(d, WF_E_BAD_DTYPE, "args.out_dtype: unknown dtype \"%s\"",
                               excerpt(f[1], buf));
        a->has_out_dtype = true;
    }
    if (req->n_tensors == 0)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "tensors: a forward carries the model's "
                           "inputs, got none");
    return WF_OK;
}

/* end_session: {"session": uint >= 1}, no tensors. */
static wf_status_t decode_end_session(dec_t *d, const msgpack_object *args, wf_request_t *req)
{
    static const char *const names[] = { "session" };
    const msgpack_object *f[1] = { NULL };
    wf_status_t rc;
    if (args && (rc = map_fields(d, args, "args", names, 1, f)) != WF_OK)
        return rc;
    if (!f[0])
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.session: missing");
    if (!as_uint(f[0], &req->args.end_session.session) || req->args.end_session.session == 0)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.session: must be an unsigned integer "
                           ">= 1");
    return no_tensors(d, req);
}

/* cancel: {"id": uint}, no tensors. */
static wf_status_t decode_cancel(dec_t *d, const msgpack_object *args, wf_request_t *req)
{
    static const char *const names[] = { "id" };
    const msgpack_object *f[1] = { NULL };
    wf_status_t rc;
    if (args && (rc = map_fields(d, args, "args", names, 1, f)) != WF_OK)
        return rc;
    if (!f[0])
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.id: missing (the id of the job to cancel)");
    if (!as_uint(f[0], &req->args.cancel.id))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args.id: must be an unsigned integer, got %s",
                           type_name(f[0]));
    return no_tensors(d, req);
}

static wf_status_t decode_request_obj(dec_t *d, const msgpack_object *o,
                                      const wf_limits_t *lim, wf_request_t *req)
{
    static const char *const names[] = { "v", "id", "op", "tensors", "args" };
    const msgpack_object *f[5];
    uint64_t u;
    wf_status_t rc;

    if (o->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_MALFORMED, "header must be a map, got %s", type_name(o));
    /* id / op first, best effort, so that every later error echoes them */
    const msgpack_object *x;
    if ((x = map_get(o, "id")) && as_uint(x, &u))
        req->id = u;
    if ((x = map_get(o, "op")) && as_uint(x, &u))
        req->op = wf_op_echo(u);

    /* the version comes before anything else: a future client must learn
     * that it speaks another version, not that a field is wrong */
    if (!(x = map_get(o, "v")))
        return wf_errf_buf(d, WF_E_VERSION, "v: missing (protocol version, must be %d or %d)",
                           WF_PROTOCOL_VERSION_MIN, WF_PROTOCOL_VERSION);
    if (!as_uint(x, &u))
        return wf_errf_buf(d, WF_E_VERSION, "v: must be an unsigned integer, got %s", type_name(x));
    if (u < WF_PROTOCOL_VERSION_MIN || u > WF_PROTOCOL_VERSION)
        return wf_errf_buf(d, WF_E_VERSION,
                           "v: protocol version %llu not supported (this side speaks %d..%d)",
                           (unsigned long long)u, WF_PROTOCOL_VERSION_MIN,
                           WF_PROTOCOL_VERSION);
    req->version = (uint32_t)u;

    if ((rc = map_fields(d, o, "header", names, 5, f)) != WF_OK)
        return rc;
    if (!f[1])
        return wf_errf_buf(d, WF_E_BAD_FIELD, "id: missing");
    if (!as_uint(f[1], &u))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "id: must be an unsigned integer, got %s",
                           type_name(f[1]));
    if (!f[2])
        return wf_errf_buf(d, WF_E_BAD_FIELD, "op: missing");
    if (!as_uint(f[2], &u))
        return wf_errf_buf(d, WF_E_BAD_FIELD, "op: must be an unsigned integer, got %s",
                           type_name(f[2]));
    if (u < WF_OP_HELLO || u > WF_OP_END_SESSION)
        return wf_errf_buf(d, WF_E_UNKNOWN_OP, "op: unknown op %llu", (unsigned long long)u);

    if (f[3] && (rc = decode_tensors(d, f[3], true, lim->max_tensors,
                                     lim->max_tensor_bytes, &req->n_tensors,
                                     req->tensors)) != WF_OK)
        return rc;
    if (f[4] && f[4]->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args: must be a map, got %s", type_name(f[4]));

    if (req->op == WF_OP_ATTENTION)
        return decode_attention(d, f[4], req);
    if (req->op == WF_OP_RECONFIGURE)
        return decode_reconfigure(d, f[4], req);
    if (req->op == WF_OP_LOAD_MODEL)
        return decode_load_model(d, f[4], req);
    if (req->op == WF_OP_UNLOAD_MODEL)
        return decode_unload_model(d, f[4], req);
    if (req->op == WF_OP_FORWARD)
        return decode_forward(d, f[4], req);
    if (req->op == WF_OP_CANCEL)
        return decode_cancel(d, f[4], req);
    if (req->op == WF_OP_END_SESSION)
        return decode_end_session(d, f[4], req);
    /* hello, status and list_models: no arguments, no tensors */
    if (f[4] && f[4]->via.map.size > 0) {
        char buf[40];
        const msgpack_object *k = &f[4]->via.map.ptr[0].key;
        return wf_errf_buf(d, WF_E_BAD_FIELD, "args: unknown key \"%s\" (op %u takes no args)",
                           excerpt(k, buf), req->op);
    }
    if (req->n_tensors > 0)
        return wf_errf_buf(d, WF_E_BAD_ARGUMENT, "tensors: op %u takes no tensors, got %u",
                           req->op, req->n_tensors);
    return WF_OK;
}

wf_status_t wf_request_decode(const void *data, size_t len,
                              const wf_limits_t *lim, wf_request_t *req,
                              char *err, size_t err_len)
{
    dec_t d = { err, err_len };
    memset(req, 0, sizeof(*req));
    if (err && err_len)
        err[0] = '\0';
    wf_status_t rc = wf_msgpack_prevalidate(data, len, lim, err, err_len);
    if (rc != WF_OK) {
        wf_request_peek(data, len, &req->id, &req->op);
        return rc;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
        rc = wf_errf_buf(&d, WF_E_MALFORMED, "msgpack could not be unpacked");
    else
        rc = decode_request_obj(&d, &up.data, lim, req);
    msgpack_unpacked_destroy(&up);
    if (rc != WF_OK) {
        /* only the fields that identify the request survive a failure */
        uint64_t id = req->id;
        uint32_t op = req->op;
        memset(req, 0, sizeof(*req));
        req->id = id;
        req->op = op;
    }
    return rc;
}

wf_status_t wf_request_check_frames(const wf_request_t *req, size_t n_frames,
                                    const size_t *frame_bytes,
                                    char *err, size_t err_len)
{
    char q[WF_QUOTE_MAX];
    dec_t d = { err, err_len };
    if (err && err_len)
        err[0] = '\0';
    if (n_frames != req->n_tensors)
        return wf_errf_buf(&d, n_frames > WF_PROTO_MAX_TENSORS ? WF_E_LIMIT : WF_E_FRAME_MISMATCH,
                           "%zu tensor frames follow the header, %u tensors described",
                           n_frames, req->n_tensors);
    for (uint32_t i = 0; i < req->n_tensors; i++) {
        const wf_tensor_desc_t *t = &req->tensors[i];
        if (t->frame >= n_frames || frame_bytes[t->frame] != t->nbytes)
            return wf_errf_buf(&d, WF_E_FRAME_MISMATCH,
                               "frame %u (tensor \"%s\") has %zu bytes, expected %llu",
                               t->frame, wf_quote(q, t->name), t->frame < n_frames ? frame_bytes[t->frame] : 0,
                               (unsigned long long)t->nbytes);
    }
    return WF_OK;
}

/* ---- replies: tolerant of unknown keys ---- */

/* Reply limits: a status reply lists up to WF_STATUS_MAX_DEVICES devices,
 * and a newer daemon may add fields, so the header limits are generous;
 * output tensors are as big as the daemon allowed the inputs to be. */
static void reply_limits(wf_limits_t *lim)
{
    wf_limits_default(lim);
    lim->max_header_bytes = 16u * 1024u * 1024u;
    lim->max_depth = 16;
    lim->max_elements = 1u << 20;
    lim->max_str_bytes = 64u * 1024u;
    lim->max_tensors = WF_PROTO_MAX_TENSORS;
    lim->max_tensor_bytes = UINT64_MAX;
}

/* Optional unsigned field of a map: absent leaves *v, wrong type fails. */
static wf_status_t opt_uint(dec_t *d, const msgpack_object *map, const char *path,
                            const char *name, uint64_t max, uint64_t *v)
{
    const msgpack_object *x = map_get(map, name);
    uint64_t u;
    if (!x)
        return WF_OK;
    if (!as_uint(x, &u) || u > max)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s.%s: must be an unsigned integer <= %llu", path,
                           name, (unsigned long long)max);
    *v = u;
    return WF_OK;
}

static wf_status_t opt_u32(dec_t *d, const msgpack_object *map, const char *path,
                           const char *name, uint32_t *v)
{
    uint64_t u = *v;
    wf_status_t rc = opt_uint(d, map, path, name, UINT32_MAX, &u);
    *v = (uint32_t)u;
    return rc;
}

static wf_status_t opt_u64(dec_t *d, const msgpack_object *map, const char *path,
                           const char *name, uint64_t *v)
{
    return opt_uint(d, map, path, name, UINT64_MAX, v);
}

/* Optional str field copied (truncated) into a fixed buffer. */
static wf_status_t opt_str(dec_t *d, const msgpack_object *map, const char *path,
                           const char *name, char *out, size_t cap)
{
    const msgpack_object *x = map_get(map, name);
    if (!x)
        return WF_OK;
    if (x->type != MSGPACK_OBJECT_STR)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s.%s: must be a str, got %s", path, name,
                           type_name(x));
    size_t n = x->via.str.size < cap - 1 ? x->via.str.size : cap - 1;
    memcpy(out, x->via.str.ptr, n);
    out[n] = '\0';
    return WF_OK;
}

#define TRY(expr) do { wf_status_t rc_ = (expr); if (rc_ != WF_OK) return rc_; } while (0)

/* Optional "mesh" map {"dp","ring","ulysses","tp"} of uints; absent keys
 * leave the degree as it is. */
static wf_status_t opt_mesh(dec_t *d, const msgpack_object *map, const char *path,
                            wf_mesh_degrees_t *m)
{
    const msgpack_object *x = map_get(map, "mesh");
    if (!x)
        return WF_OK;
    if (x->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s.mesh: must be a map, got %s", path, type_name(x));
    TRY(opt_u32(d, x, "mesh", "dp", &m->dp));
    TRY(opt_u32(d, x, "mesh", "ring", &m->ring));
    TRY(opt_u32(d, x, "mesh", "ulysses", &m->ulysses));
    TRY(opt_u32(d, x, "mesh", "tp", &m->tp));
    return WF_OK;
}

/* Optional flag: a bool (what weftd sends) or a uint 0 / 1. */
static wf_status_t opt_flag_u32(dec_t *d, const msgpack_object *map, const char *path,
                                const char *name, uint32_t *v)
{
    const msgpack_object *x = map_get(map, name);
    if (x && x->type == MSGPACK_OBJECT_BOOLEAN) {
        *v = x->via.boolean ? 1 : 0;
        return WF_OK;
    }
    return opt_u32(d, map, path, name, v);
}

/* result.features: an array of str (absent: a daemon before weft 0.4,
 * nothing announced); names this side does not know are skipped. */
static wf_status_t decode_features(dec_t *d, const msgpack_object *r, uint32_t *ret)
{
    const msgpack_object *f = map_get(r, "features");
    *ret = 0;
    if (!f)
        return WF_OK;
    if (f->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.features: must be an array, got %s",
                           type_name(f));
    for (uint32_t i = 0; i < f->via.array.size; i++) {
        const msgpack_object *e = &f->via.array.ptr[i];
        if (e->type != MSGPACK_OBJECT_STR)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.features[%u]: must be a str, "
                               "got %s", i, type_name(e));
        *ret |= wf_feature_bit(e->via.str.ptr, e->via.str.size);
    }
    return WF_OK;
}

static wf_status_t decode_hello_result(dec_t *d, const msgpack_object *r,
                                       wf_hello_info_t *h)
{
    TRY(opt_u32(d, r, "result", "protocol", &h->protocol));
    TRY(opt_str(d, r, "result", "weft_version", h->weft_version, sizeof(h->weft_version)));
    TRY(opt_str(d, r, "result", "backend", h->backend, sizeof(h->backend)));
    TRY(opt_u32(d, r, "result", "devices", &h->devices));
    const msgpack_object *l = map_get(r, "limits");
    if (l) {
        if (l->type != MSGPACK_OBJECT_MAP)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.limits: must be a map");
        TRY(opt_u64(d, l, "result.limits", "max_header_bytes", &h->max_header_bytes));
        TRY(opt_u64(d, l, "result.limits", "max_tensor_bytes", &h->max_tensor_bytes));
        TRY(opt_u32(d, l, "result.limits", "max_tensors", &h->max_tensors));
    }
    return WF_OK;
}

/* An optional array of {"code", "count"} maps (status counters). */
static wf_status_t opt_code_counts(dec_t *d, const msgpack_object *map, const char *name,
                                   uint32_t *n_out, wf_code_count_t *out)
{
    const msgpack_object *a = map_get(map, name);
    if (!a)
        return WF_OK;
    if (a->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.counters.%s: must be an array", name);
    uint32_t n = a->via.array.size < WF_STATUS_MAX_CODES ? a->via.array.size
                                                        : WF_STATUS_MAX_CODES;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *m = &a->via.array.ptr[i];
        if (m->type != MSGPACK_OBJECT_MAP)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.counters.%s[%u]: must be a map",
                               name, i);
        TRY(opt_u32(d, m, "result.counters[]", "code", &out[i].code));
        TRY(opt_u64(d, m, "result.counters[]", "count", &out[i].count));
    }
    *n_out = n;
    return WF_OK;
}

/* The optional `counters` map of a status result (section 5). */
static wf_status_t decode_status_counters(dec_t *d, const msgpack_object *r,
                                          wf_status_counters_t *c)
{
    const msgpack_object *x = map_get(r, "counters");
    if (!x)
        return WF_OK;
    if (x->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.counters: must be a map");
    c->present = 1;
    TRY(opt_code_counts(d, x, "refused", &c->refused_count, c->refused));
    TRY(opt_code_counts(d, x, "failed", &c->failed_count, c->failed));
    const char *p = "result.counters";
    TRY(opt_u64(d, x, p, "reconfigurations", &c->reconfigurations));
    TRY(opt_u64(d, x, p, "reconfigurations_failed", &c->reconfigurations_failed));
    TRY(opt_u64(d, x, p, "reconfigure_ms", &c->reconfigure_ms));
    TRY(opt_u64(d, x, p, "nodes_lost", &c->nodes_lost));
    TRY(opt_u64(d, x, p, "handshakes_refused", &c->handshakes_refused));
    TRY(opt_u64(d, x, p, "handshakes_admitted", &c->handshakes_admitted));
    const msgpack_object *a = map_get(x, "ops");
    if (!a)
        return WF_OK;
    if (a->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.counters.ops: must be an array");
    uint32_t n = a->via.array.size < WF_STATUS_MAX_OPS ? a->via.array.size
                                                      : WF_STATUS_MAX_OPS;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *m = &a->via.array.ptr[i];
        wf_op_counters_t *o = &c->ops[i];
        if (m->type != MSGPACK_OBJECT_MAP)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.counters.ops[%u]: must be a map", i);
        const char *q = "result.counters.ops[]";
        TRY(opt_str(d, m, q, "op", o->op, sizeof(o->op)));
        TRY(opt_u64(d, m, q, "served", &o->served));
        TRY(opt_u64(d, m, q, "failed", &o->failed));
        TRY(opt_u64(d, m, q, "p50_us", &o->p50_us));
        TRY(opt_u64(d, m, q, "p99_us", &o->p99_us));
        TRY(opt_u64(d, m, q, "max_us", &o->max_us));
    }
    c->op_count = n;
    return WF_OK;
}

static wf_status_t decode_status_result(dec_t *d, const msgpack_object *r,
                                        wf_status_info_t *s)
{
    TRY(opt_str(d, r, "result", "weft_version", s->weft_version, sizeof(s->weft_version)));
    TRY(opt_str(d, r, "result", "backend", s->backend, sizeof(s->backend)));
    TRY(opt_u64(d, r, "result", "epoch", &s->epoch));
    TRY(opt_u64(d, r, "result", "uptime_ms", &s->uptime_ms));
    TRY(opt_u32(d, r, "result", "queue_depth", &s->queue_depth));
    TRY(opt_u32(d, r, "result", "queue_capacity", &s->queue_capacity));
    TRY(opt_u32(d, r, "result", "in_flight", &s->in_flight));
    TRY(opt_u64(d, r, "result", "jobs_served", &s->jobs_served));
    TRY(opt_u64(d, r, "result", "jobs_failed", &s->jobs_failed));
    TRY(opt_u64(d, r, "result", "requests_rejected", &s->requests_rejected));
    TRY(opt_u64(d, r, "result", "rss_bytes", &s->rss_bytes));
    TRY(opt_mesh(d, r, "result", &s->mesh));
    TRY(opt_flag_u32(d, r, "result", "reconfiguring", &s->reconfiguring));
    TRY(decode_status_counters(d, r, &s->counters));
    const msgpack_object *cl = map_get(r, "cluster");
    if (cl) {
        if (cl->type != MSGPACK_OBJECT_MAP)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.cluster: must be a map");
        TRY(opt_str(d, cl, "result.cluster", "role", s->role, sizeof(s->role)));
        TRY(opt_str(d, cl, "result.cluster", "coordinator", s->coordinator,
                    sizeof(s->coordinator)));
        TRY(opt_str(d, cl, "result.cluster", "state", s->cluster_state,
                    sizeof(s->cluster_state)));
        TRY(opt_u64(d, cl, "result.cluster", "world_epoch", &s->world_epoch));
        TRY(opt_u32(d, cl, "result.cluster", "world_size", &s->world_size));
        TRY(opt_str(d, cl, "result.cluster", "world_id", s->world_id,
                    sizeof(s->world_id)));
        const msgpack_object *na = map_get(cl, "nodes");
        if (na) {
            if (na->type != MSGPACK_OBJECT_ARRAY)
                return wf_errf_buf(d, WF_E_PROTOCOL, "result.cluster.nodes: must be an array");
            uint32_t nn = na->via.array.size < WF_STATUS_MAX_NODES
                              ? na->via.array.size : WF_STATUS_MAX_NODES;
            for (uint32_t i = 0; i < nn; i++) {
                const msgpack_object *m = &na->via.array.ptr[i];
                wf_node_info_t *ni = &s->nodes[i];
                if (m->type != MSGPACK_OBJECT_MAP)
                    return wf_errf_buf(d, WF_E_PROTOCOL,
                                       "result.cluster.nodes[%u]: must be a map", i);
                TRY(opt_str(d, m, "result.cluster.nodes[]", "name", ni->name,
                            sizeof(ni->name)));
                TRY(opt_str(d, m, "result.cluster.nodes[]", "state", ni->state,
                            sizeof(ni->state)));
                TRY(opt_u32(d, m, "result.cluster.nodes[]", "first_rank",
                            &ni->first_rank));
                TRY(opt_u32(d, m, "result.cluster.nodes[]", "ranks", &ni->ranks));
            }
            s->node_count = nn;
        }
    }
    const msgpack_object *a = map_get(r, "devices");
    if (!a)
        return WF_OK;
    if (a->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.devices: must be an array");
    /* more devices than the struct holds: the first ones are kept */
    uint32_t n = a->via.array.size < WF_STATUS_MAX_DEVICES ? a->via.array.size
                                                          : WF_STATUS_MAX_DEVICES;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *m = &a->via.array.ptr[i];
        wf_device_info_t *dv = &s->devices[i];
        if (m->type != MSGPACK_OBJECT_MAP)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.devices[%u]: must be a map", i);
        TRY(opt_u32(d, m, "result.devices[]", "index", &dv->index));
        TRY(opt_str(d, m, "result.devices[]", "name", dv->name, sizeof(dv->name)));
        TRY(opt_u64(d, m, "result.devices[]", "memory_total", &dv->memory_total));
        TRY(opt_u64(d, m, "result.devices[]", "memory_used", &dv->memory_used));
        TRY(opt_u64(d, m, "result.devices[]", "jobs_served", &dv->jobs_served));
        TRY(opt_u32(d, m, "result.devices[]", "busy", &dv->busy));
        TRY(opt_u32(d, m, "result.devices[]", "rank", &dv->rank));
        const msgpack_object *c = map_get(m, "coords");
        if (c) {
            if (c->type != MSGPACK_OBJECT_ARRAY || c->via.array.size != 4)
                return wf_errf_buf(d, WF_E_PROTOCOL,
                                   "result.devices[%u].coords: must be an array of 4", i);
            for (uint32_t k = 0; k < 4; k++) {
                uint64_t u;
                if (!as_uint(&c->via.array.ptr[k], &u) || u > UINT32_MAX)
                    return wf_errf_buf(d, WF_E_PROTOCOL,
                                       "result.devices[%u].coords[%u]: must be an unsigned integer",
                                       i, k);
                dv->coords[k] = (uint32_t)u;
            }
        }
    }
    s->device_count = n;
    return WF_OK;
}

/* A str of at most cap - 1 bytes into out. */
static wf_status_t take_name(dec_t *d, const msgpack_object *x, const char *path,
                             char *out, size_t cap)
{
    if (!x || x->type != MSGPACK_OBJECT_STR || x->via.str.size == 0 ||
        x->via.str.size >= cap)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s: must be a str of 1..%zu bytes", path,
                           cap - 1);
    memcpy(out, x->via.str.ptr, x->via.str.size);
    out[x->via.str.size] = '\0';
    return WF_OK;
}

/* MODEL's optional "config" map (PROTOCOL.md 12.5): key -> uint, bool or
 * array of uints; present = 1 when it is there. */
static wf_status_t decode_model_config(dec_t *d, const msgpack_object *m, const char *path,
                                       wf_model_config_t *c)
{
    const msgpack_object *x = map_get(m, "config");
    if (!x)
        return WF_OK;
    if (x->type != MSGPACK_OBJECT_MAP || x->via.map.size > WF_MODEL_CONFIG_MAX)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s.config: must be a map of at most %d "
                           "entries", path, WF_MODEL_CONFIG_MAX);
    for (uint32_t i = 0; i < x->via.map.size; i++) {
        const msgpack_object *k = &x->via.map.ptr[i].key, *v = &x->via.map.ptr[i].val;
        wf_model_config_entry_t *e = &c->e[i];
        TRY(take_name(d, k, "config key", e->key, sizeof e->key));
        uint64_t u;
        if (v->type == MSGPACK_OBJECT_BOOLEAN) {
            e->kind = WF_CONFIG_FLAG;
            e->n = 1;
            e->v[0] = v->via.boolean;
        } else if (as_uint(v, &u) && u <= INT64_MAX) {
            e->kind = WF_CONFIG_INT;
            e->n = 1;
            e->v[0] = (int64_t)u;
        } else if (v->type == MSGPACK_OBJECT_ARRAY &&
                   v->via.array.size <= WF_MODEL_CONFIG_VALUES) {
            e->kind = WF_CONFIG_LIST;
            e->n = v->via.array.size;
            for (uint32_t j = 0; j < e->n; j++) {
                if (!as_uint(&v->via.array.ptr[j], &u) || u > INT64_MAX)
                    return wf_errf_buf(d, WF_E_PROTOCOL, "%s.config.%s[%u]: must be a "
                                       "uint", path, e->key, j);
                e->v[j] = (int64_t)u;
            }
        } else {
            return wf_errf_buf(d, WF_E_PROTOCOL, "%s.config.%s: must be a uint, a bool or "
                               "an array of at most %d uints", path, e->key,
                               WF_MODEL_CONFIG_VALUES);
        }
    }
    c->n = x->via.map.size;
    c->present = 1;
    return WF_OK;
}

/* One tensor of a schema: {"name", "dtypes": [str], "optional": bool,
 * "shape": [uint (fixed) | str (named size)], "dims": [str]}. */
static wf_status_t decode_schema_tensor(dec_t *d, const msgpack_object *x,
                                        wf_schema_tensor_t *t)
{
    if (x->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "schema tensor: must be a map");
    TRY(take_name(d, map_get(x, "name"), "schema name", t->name, sizeof t->name));
    TRY(opt_flag_u32(d, x, "schema", "optional", &t->optional));
    const msgpack_object *dt = map_get(x, "dtypes");
    if (!dt || dt->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "schema %s.dtypes: must be an array", t->name);
    for (uint32_t j = 0; j < dt->via.array.size; j++) {
        const msgpack_object *o = &dt->via.array.ptr[j];
        wf_dtype_t v;
        if (o->type == MSGPACK_OBJECT_STR && wf_dtype_parse(o->via.str.ptr, o->via.str.size, &v))
            t->dtypes |= 1u << v;       /* dtypes this side does not know: skipped */
    }
    const msgpack_object *sh = map_get(x, "shape"), *dm = map_get(x, "dims");
    if (!sh || sh->type != MSGPACK_OBJECT_ARRAY || sh->via.array.size < 1 ||
        sh->via.array.size > WF_MAX_RANK)
        return wf_errf_buf(d, WF_E_PROTOCOL, "schema %s.shape: must be an array of 1..%d",
                           t->name, WF_MAX_RANK);
    t->rank = sh->via.array.size;
    for (uint32_t j = 0; j < t->rank; j++) {
        const msgpack_object *o = &sh->via.array.ptr[j];
        uint64_t u;
        if (as_uint(o, &u) && u > 0 && u <= INT64_MAX)
            t->dim[j].size = (int64_t)u;
        else
            TRY(take_name(d, o, "schema shape", t->dim[j].sym, sizeof t->dim[j].sym));
        if (t->dim[j].size > 0 && dm && dm->type == MSGPACK_OBJECT_ARRAY &&
            j < dm->via.array.size)
            TRY(take_name(d, &dm->via.array.ptr[j], "schema dims", t->dim[j].sym,
                          sizeof t->dim[j].sym));
    }
    return WF_OK;
}

/* MODEL's optional "schema": {"inputs": [T], "outputs": [T]}. */
static wf_status_t decode_model_schema(dec_t *d, const msgpack_object *m, const char *path,
                                       wf_model_schema_t *s)
{
    const msgpack_object *x = map_get(m, "schema");
    if (!x)
        return WF_OK;
    const msgpack_object *in = x->type == MSGPACK_OBJECT_MAP ? map_get(x, "inputs") : NULL;
    const msgpack_object *out = x->type == MSGPACK_OBJECT_MAP ? map_get(x, "outputs") : NULL;
    if (!in || !out || in->type != MSGPACK_OBJECT_ARRAY || out->type != MSGPACK_OBJECT_ARRAY ||
        in->via.array.size > WF_SCHEMA_MAX_INPUTS || out->via.array.size > WF_SCHEMA_MAX_OUTPUTS)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s.schema: must be {inputs: [at most %d], "
                           "outputs: [at most %d]}", path, WF_SCHEMA_MAX_INPUTS,
                           WF_SCHEMA_MAX_OUTPUTS);
    for (uint32_t i = 0; i < in->via.array.size; i++)
        TRY(decode_schema_tensor(d, &in->via.array.ptr[i], &s->inputs[i]));
    for (uint32_t i = 0; i < out->via.array.size; i++)
        TRY(decode_schema_tensor(d, &out->via.array.ptr[i], &s->outputs[i]));
    s->n_inputs = in->via.array.size;
    s->n_outputs = out->via.array.size;
    return WF_OK;
}

/* One MODEL map (PROTOCOL.md 12.5): the fields of wf_model_info_t. */
static wf_status_t decode_model_info(dec_t *d, const msgpack_object *m, const char *path,
                                     wf_model_info_t *mi)
{
    if (m->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "%s: must be a map, got %s", path, type_name(m));
    TRY(opt_str(d, m, path, "name", mi->name, sizeof(mi->name)));
    TRY(opt_str(d, m, path, "path", mi->path, sizeof(mi->path)));
    TRY(opt_str(d, m, path, "family", mi->family, sizeof(mi->family)));
    TRY(opt_str(d, m, path, "state", mi->state, sizeof(mi->state)));
    TRY(opt_str(d, m, path, "dtype", mi->dtype, sizeof(mi->dtype)));
    TRY(opt_u64(d, m, path, "params", &mi->params));
    TRY(opt_u64(d, m, path, "bytes_total", &mi->bytes_total));
    TRY(opt_u64(d, m, path, "bytes_loaded", &mi->bytes_loaded));
    TRY(opt_u64(d, m, path, "host_bytes", &mi->host_bytes));
    TRY(opt_u64(d, m, path, "rank_bytes", &mi->rank_bytes));
    TRY(opt_u32(d, m, path, "tp", &mi->tp));
    TRY(opt_flag_u32(d, m, path, "sharded_input", &mi->sharded_input));
    TRY(opt_u64(d, m, path, "load_ms", &mi->load_ms));
    TRY(opt_str(d, m, path, "device", mi->device, sizeof(mi->device)));
    TRY(opt_str(d, m, path, "compute", mi->compute, sizeof(mi->compute)));
    TRY(opt_flag_u32(d, m, path, "host_pinned", &mi->host_pinned));
    TRY(opt_str(d, m, path, "nodes", mi->nodes, sizeof(mi->nodes)));
    TRY(decode_model_config(d, m, path, &mi->config));
    TRY(decode_model_schema(d, m, path, &mi->schema));
    return WF_OK;
}

/* load_model: {"model": MODEL} (required); list_models: {"models": [MODEL,
 * ...]} (absent = none; more than WF_MODELS_MAX: the first ones kept). */
static wf_status_t decode_models_result(dec_t *d, const msgpack_object *r, uint32_t op,
                                        wf_models_result_t *res)
{
    const msgpack_object *x;
    if (op == WF_OP_LOAD_MODEL) {
        if (!(x = map_get(r, "model")))
            return wf_errf_buf(d, WF_E_PROTOCOL, "result.model: missing");
        TRY(decode_model_info(d, x, "result.model", &res->models[0]));
        res->n = 1;
        return WF_OK;
    }
    if (!(x = map_get(r, "models")))
        return WF_OK;
    if (x->type != MSGPACK_OBJECT_ARRAY)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result.models: must be an array, got %s",
                           type_name(x));
    uint32_t n = x->via.array.size < WF_MODELS_MAX ? x->via.array.size : WF_MODELS_MAX;
    for (uint32_t i = 0; i < n; i++)
        TRY(decode_model_info(d, &x->via.array.ptr[i], "result.models[]", &res->models[i]));
    res->n = n;
    return WF_OK;
}

static wf_status_t decode_reply_obj(dec_t *d, const msgpack_object *o, wf_reply_t *rep)
{
    const msgpack_object *x;
    uint64_t u;
    if (o->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "reply header must be a map, got %s", type_name(o));
    if ((x = map_get(o, "id")) && as_uint(x, &u))
        rep->id = u;
    if ((x = map_get(o, "op")) && as_uint(x, &u))
        rep->op = wf_op_echo(u);
    if (!(x = map_get(o, "v")) || !as_uint(x, &u))
        return wf_errf_buf(d, WF_E_PROTOCOL, "reply: v missing or not an unsigned integer");
    if (u < WF_PROTOCOL_VERSION_MIN || u > WF_PROTOCOL_VERSION)
        return wf_errf_buf(d, WF_E_VERSION, "reply: protocol version %llu, this side "
                           "speaks %d..%d", (unsigned long long)u, WF_PROTOCOL_VERSION_MIN,
                           WF_PROTOCOL_VERSION);
    rep->version = (uint32_t)u;
    static const char *const req_names[] = { "id", "op", "status" };
    for (int i = 0; i < 3; i++)
        if (!(x = map_get(o, req_names[i])) || !as_uint(x, &u))
            return wf_errf_buf(d, WF_E_PROTOCOL, "reply: %s missing or not an unsigned integer",
                               req_names[i]);
    if (u > INT32_MAX)
        return wf_errf_buf(d, WF_E_PROTOCOL, "reply: status %llu out of range",
                           (unsigned long long)u);
    /* a status number this side does not know is kept as it is */
    rep->status = (wf_status_t)u;
    TRY(opt_str(d, o, "reply", "error", rep->error, sizeof(rep->error)));
    TRY(opt_u64(d, o, "reply", "epoch", &rep->epoch));
    if ((x = map_get(o, "tensors"))) {
        wf_status_t rc = decode_tensors(d, x, false, WF_PROTO_MAX_TENSORS, UINT64_MAX,
                                        &rep->n_tensors, rep->tensors);
        if (rc != WF_OK) {
            rep->n_tensors = 0;
            return WF_E_PROTOCOL;
        }
    }
    if (rep->status != WF_OK)
        return WF_OK;
    if (!(x = map_get(o, "result"))) {
        /* a loaded model's reply must say what was loaded (PROTOCOL.md 12.2) */
        if (rep->op == WF_OP_LOAD_MODEL)
            return wf_errf_buf(d, WF_E_PROTOCOL, "result: missing from a load_model reply");
        return WF_OK;
    }
    if (x->type != MSGPACK_OBJECT_MAP)
        return wf_errf_buf(d, WF_E_PROTOCOL, "result: must be a map, got %s", type_name(x));
    switch (rep->op) {
    case WF_OP_HELLO:
        TRY(decode_features(d, x, &rep->features));
        return decode_hello_result(d, x, &rep->result.hello);
    case WF_OP_STATUS: return decode_status_result(d, x, &rep->result.status);
    case WF_OP_ATTENTION: {
        wf_attention_result_t *a = &rep->result.attention;
        TRY(opt_u64(d, x, "result", "queue_us", &a->queue_us));
        TRY(opt_u64(d, x, "result", "compute_us", &a->compute_us));
        TRY(opt_u32(d, x, "result", "devices", &a->devices));
        return WF_OK;
    }
    case WF_OP_FORWARD: {
        wf_forward_result_t *f = &rep->result.forward;
        TRY(opt_u64(d, x, "result", "queue_us", &f->queue_us));
        TRY(opt_u64(d, x, "result", "compute_us", &f->compute_us));
        TRY(opt_u32(d, x, "result", "devices", &f->devices));
        const msgpack_object *c = map_get(x, "cache");
        if (c) {
            if (str_is(c, "computed"))
                f->cache = WF_CACHE_COMPUTED;
            else if (str_is(c, "reused"))
                f->cache = WF_CACHE_REUSED;
            else
                return wf_errf_buf(d, WF_E_PROTOCOL, "result.cache: \"computed\" or "
                                   "\"reused\", got %s", type_name(c));
        }
        return WF_OK;
    }
    case WF_OP_END_SESSION:
        TRY(opt_u64(d, x, "result", "steps", &rep->result.end_session.steps));
        TRY(opt_u64(d, x, "result", "reused", &rep->result.end_session.reused));
        return WF_OK;
    case WF_OP_LOAD_MODEL:
    case WF_OP_LIST_MODELS:
        return decode_models_result(d, x, rep->op, &rep->result.models);
    case WF_OP_RECONFIGURE:
        TRY(opt_u64(d, x, "result", "epoch", &rep->result.reconfigure.epoch));
        return opt_mesh(d, x, "result", &rep->result.reconfigure.mesh);
    default:
        return WF_OK;
    }
}

wf_status_t wf_reply_decode(const void *data, size_t len, wf_reply_t *rep,
                            char *err, size_t err_len)
{
    dec_t d = { err, err_len };
    wf_limits_t lim;
    memset(rep, 0, sizeof(*rep));
    if (err && err_len)
        err[0] = '\0';
    reply_limits(&lim);
    if (wf_msgpack_prevalidate(data, len, &lim, err, err_len) != WF_OK) {
        wf_request_peek(data, len, &rep->id, &rep->op);
        return WF_E_PROTOCOL;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    wf_status_t rc;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
        rc = wf_errf_buf(&d, WF_E_PROTOCOL, "reply msgpack could not be unpacked");
    else
        rc = decode_reply_obj(&d, &up.data, rep);
    msgpack_unpacked_destroy(&up);
    return rc;
}
