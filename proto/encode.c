/* encode.c — wf_request_t / wf_reply_t into msgpack header frames, and
 * the wf_buf_t they are written to.
 *
 * msgpack-c's packer writes through a callback into a wf_buf_t; the first
 * failed write (out of memory) is remembered and turns the whole encode
 * into WF_E_NOMEM. Only the header is encoded here: tensor bytes travel in
 * their own frames and never pass through msgpack.
 */
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "proto.h"

void wf_buf_reset(wf_buf_t *b)
{
    b->len = 0;
}

void wf_buf_free(wf_buf_t *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

static int buf_write(void *data, const char *src, size_t n)
{
    wf_buf_t *b = data;
    if (n > SIZE_MAX - b->len)
        return -1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        char *p = realloc(b->data, cap);
        if (!p)
            return -1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

/* A packer plus a sticky failure flag. */
typedef struct enc {
    msgpack_packer pk;
    int failed;
} enc_t;

static void put_str(enc_t *e, const char *s)
{
    e->failed |= msgpack_pack_str_with_body(&e->pk, s, strlen(s));
}

static void put_key_uint(enc_t *e, const char *k, uint64_t v)
{
    put_str(e, k);
    e->failed |= msgpack_pack_uint64(&e->pk, v);
}

static void put_key_str(enc_t *e, const char *k, const char *v)
{
    put_str(e, k);
    put_str(e, v);
}

static void put_key_bool(enc_t *e, const char *k, bool v)
{
    put_str(e, k);
    e->failed |= v ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk);
}

/* A fixed-size char array that may lack its NUL: at most cap bytes. */
static void put_key_fixstr(enc_t *e, const char *k, const char *v, size_t cap)
{
    put_str(e, k);
    e->failed |= msgpack_pack_str_with_body(&e->pk, v, strnlen(v, cap));
}

static bool desc_ok(const wf_tensor_desc_t *t)
{
    size_t n = strnlen(t->name, WF_PROTO_NAME_MAX);
    if (n == 0 || n == WF_PROTO_NAME_MAX || !wf_dtype_name(t->dtype))
        return false;
    if (t->rank < 1 || t->rank > WF_MAX_RANK)
        return false;
    for (int i = 0; i < t->rank; i++)
        if (t->shape[i] <= 0)
            return false;
    return true;
}

/* Descriptors a peer would accept: each valid, frames a permutation. */
static bool descs_ok(uint32_t n, const wf_tensor_desc_t *ts)
{
    uint32_t seen = 0;
    if (n > WF_PROTO_MAX_TENSORS)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        if (!desc_ok(&ts[i]) || ts[i].frame >= n || (seen & (1u << ts[i].frame)))
            return false;
        seen |= 1u << ts[i].frame;
    }
    return true;
}

static void put_tensors(enc_t *e, uint32_t n, const wf_tensor_desc_t *ts)
{
    put_str(e, "tensors");
    e->failed |= msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        const wf_tensor_desc_t *t = &ts[i];
        e->failed |= msgpack_pack_map(&e->pk, 4);
        put_key_str(e, "name", t->name);
        put_key_str(e, "dtype", wf_dtype_name(t->dtype));
        put_str(e, "shape");
        e->failed |= msgpack_pack_array(&e->pk, (size_t)t->rank);
        for (int j = 0; j < t->rank; j++)
            e->failed |= msgpack_pack_uint64(&e->pk, (uint64_t)t->shape[j]);
        put_key_uint(e, "frame", t->frame);
    }
}

static wf_status_t finish(enc_t *e, wf_buf_t *out, size_t start)
{
    if (e->failed) {
        out->len = start;
        return WF_E_NOMEM;
    }
    return WF_OK;
}

static const char *rotate_name(wf_rotate_t r)
{
    switch (r) {
    case WF_ROTATE_ALLGATHER: return "allgather";
    case WF_ROTATE_ALLTOALL: return "alltoall";
    case WF_ROTATE_DEFAULT: break;
    }
    return NULL;
}

static bool opt_valid(wf_opt_t o)
{
    return o == WF_OPT_DEFAULT || o == WF_OPT_ON || o == WF_OPT_OFF;
}

static bool degree_ok(uint32_t d)
{
    return d >= 1 && d <= WF_PROTO_MAX_DEGREE;
}

/* A tri-state sent as a bool, only when it is not DEFAULT. */
static void put_opt(enc_t *e, const char *k, wf_opt_t o)
{
    if (o != WF_OPT_DEFAULT)
        put_key_bool(e, k, o == WF_OPT_ON);
}

static void put_mesh(enc_t *e, const wf_mesh_degrees_t *m)
{
    e->failed |= msgpack_pack_map(&e->pk, 4);
    put_key_uint(e, "dp", m->dp);
    put_key_uint(e, "ring", m->ring);
    put_key_uint(e, "ulysses", m->ulysses);
    put_key_uint(e, "tp", m->tp);
}

wf_status_t wf_request_encode(const wf_request_t *req, wf_buf_t *out)
{
    if (!req || !out || !descs_ok(req->n_tensors, req->tensors))
        return WF_E_INVALID;
    const wf_attention_args_t *a = &req->args.attention;
    const wf_mesh_degrees_t *m = &req->args.reconfigure.mesh;
    bool attn = req->op == WF_OP_ATTENTION;
    bool recon = req->op == WF_OP_RECONFIGURE;
    if (attn && ((a->has_out_dtype && !wf_dtype_name(a->out_dtype)) ||
                 (a->rotate_method != WF_ROTATE_DEFAULT && !rotate_name(a->rotate_method)) ||
                 !opt_valid(a->convert_to_fp32) || !opt_valid(a->ring_anything) ||
                 !opt_valid(a->ulysses_anything) || !opt_valid(a->load_balance)))
        return WF_E_INVALID;
    if (recon && !(degree_ok(m->dp) && degree_ok(m->ring) && degree_ok(m->ulysses) &&
                   degree_ok(m->tp)))
        return WF_E_INVALID;

    enc_t e = { .failed = 0 };
    size_t start = out->len;
    msgpack_packer_init(&e.pk, out, buf_write);
    uint32_t n = 3 + (req->n_tensors > 0) + (attn || recon);
    e.failed |= msgpack_pack_map(&e.pk, n);
    /* a zeroed version means "the one this library speaks" */
    put_key_uint(&e, "v", req->version ? req->version : WF_PROTOCOL_VERSION);
    put_key_uint(&e, "id", req->id);
    put_key_uint(&e, "op", req->op);
    if (req->n_tensors > 0)
        put_tensors(&e, req->n_tensors, req->tensors);
    if (attn) {
        put_str(&e, "args");
        uint32_t k = 2 + a->has_scale + a->has_out_dtype + (a->devices != 0) +
                     (a->rotate_method != WF_ROTATE_DEFAULT) +
                     (a->convert_to_fp32 != WF_OPT_DEFAULT) +
                     (a->ring_anything != WF_OPT_DEFAULT) +
                     (a->ulysses_anything != WF_OPT_DEFAULT) +
                     (a->load_balance != WF_OPT_DEFAULT);
        e.failed |= msgpack_pack_map(&e.pk, k);
        if (a->has_scale) {
            put_str(&e, "scale");
            e.failed |= msgpack_pack_double(&e.pk, a->scale);
        }
        put_key_bool(&e, "causal", a->causal);
        put_key_bool(&e, "return_lse", a->return_lse);
        if (a->has_out_dtype)
            put_key_str(&e, "out_dtype", wf_dtype_name(a->out_dtype));
        if (a->devices)
            put_key_uint(&e, "devices", a->devices);
        if (a->rotate_method != WF_ROTATE_DEFAULT)
            put_key_str(&e, "rotate_method", rotate_name(a->rotate_method));
        put_opt(&e, "convert_to_fp32", a->convert_to_fp32);
        put_opt(&e, "ring_anything", a->ring_anything);
        put_opt(&e, "ulysses_anything", a->ulysses_anything);
        put_opt(&e, "load_balance", a->load_balance);
    }
    if (recon) {
        put_str(&e, "args");
        put_mesh(&e, m);
    }
    return finish(&e, out, start);
}

static void put_hello(enc_t *e, const wf_hello_info_t *h)
{
    e->failed |= msgpack_pack_map(&e->pk, 5);
    put_key_uint(e, "protocol", h->protocol);
    put_key_fixstr(e, "weft_version", h->weft_version, sizeof(h->weft_version));
    put_key_fixstr(e, "backend", h->backend, sizeof(h->backend));
    put_key_uint(e, "devices", h->devices);
    put_str(e, "limits");
    e->failed |= msgpack_pack_map(&e->pk, 3);
    put_key_uint(e, "max_header_bytes", h->max_header_bytes);
    put_key_uint(e, "max_tensor_bytes", h->max_tensor_bytes);
    put_key_uint(e, "max_tensors", h->max_tensors);
}

static void put_status(enc_t *e, const wf_status_info_t *s)
{
    uint32_t n = s->device_count < WF_STATUS_MAX_DEVICES ? s->device_count
                                                         : WF_STATUS_MAX_DEVICES;
    bool cl = s->role[0] != '\0';
    e->failed |= msgpack_pack_map(&e->pk, 14 + (cl ? 1 : 0));
    put_key_fixstr(e, "weft_version", s->weft_version, sizeof(s->weft_version));
    put_key_fixstr(e, "backend", s->backend, sizeof(s->backend));
    put_key_uint(e, "epoch", s->epoch);
    put_key_uint(e, "uptime_ms", s->uptime_ms);
    put_key_uint(e, "queue_depth", s->queue_depth);
    put_key_uint(e, "queue_capacity", s->queue_capacity);
    put_key_uint(e, "in_flight", s->in_flight);
    put_key_uint(e, "jobs_served", s->jobs_served);
    put_key_uint(e, "jobs_failed", s->jobs_failed);
    put_key_uint(e, "requests_rejected", s->requests_rejected);
    put_key_uint(e, "rss_bytes", s->rss_bytes);
    put_str(e, "mesh");
    put_mesh(e, &s->mesh);
    put_key_bool(e, "reconfiguring", s->reconfiguring != 0);
    put_str(e, "devices");
    e->failed |= msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        const wf_device_info_t *d = &s->devices[i];
        e->failed |= msgpack_pack_map(&e->pk, 8);
        put_key_uint(e, "index", d->index);
        put_key_fixstr(e, "name", d->name, sizeof(d->name));
        put_key_uint(e, "memory_total", d->memory_total);
        put_key_uint(e, "memory_used", d->memory_used);
        put_key_uint(e, "jobs_served", d->jobs_served);
        put_key_uint(e, "busy", d->busy);
        put_key_uint(e, "rank", d->rank);
        put_str(e, "coords");
        e->failed |= msgpack_pack_array(&e->pk, 4);
        for (int k = 0; k < 4; k++)
            e->failed |= msgpack_pack_uint64(&e->pk, d->coords[k]);
    }
    if (!cl)
        return;
    uint32_t nn = s->node_count < WF_STATUS_MAX_NODES ? s->node_count
                                                      : WF_STATUS_MAX_NODES;
    put_str(e, "cluster");
    e->failed |= msgpack_pack_map(&e->pk, 7);
    put_key_fixstr(e, "role", s->role, sizeof(s->role));
    put_key_fixstr(e, "coordinator", s->coordinator, sizeof(s->coordinator));
    put_key_fixstr(e, "state", s->cluster_state, sizeof(s->cluster_state));
    put_key_uint(e, "world_epoch", s->world_epoch);
    put_key_uint(e, "world_size", s->world_size);
    put_key_fixstr(e, "world_id", s->world_id, sizeof(s->world_id));
    put_str(e, "nodes");
    e->failed |= msgpack_pack_array(&e->pk, nn);
    for (uint32_t i = 0; i < nn; i++) {
        const wf_node_info_t *nd = &s->nodes[i];
        e->failed |= msgpack_pack_map(&e->pk, 4);
        put_key_fixstr(e, "name", nd->name, sizeof(nd->name));
        put_key_fixstr(e, "state", nd->state, sizeof(nd->state));
        put_key_uint(e, "first_rank", nd->first_rank);
        put_key_uint(e, "ranks", nd->ranks);
    }
}

wf_status_t wf_reply_encode(const wf_reply_t *rep, wf_buf_t *out)
{
    if (!rep || !out || !descs_ok(rep->n_tensors, rep->tensors))
        return WF_E_INVALID;
    bool ok = rep->status == WF_OK;
    bool has_result = ok && (rep->op == WF_OP_HELLO || rep->op == WF_OP_STATUS ||
                             rep->op == WF_OP_ATTENTION ||
                             rep->op == WF_OP_RECONFIGURE);

    enc_t e = { .failed = 0 };
    size_t start = out->len;
    msgpack_packer_init(&e.pk, out, buf_write);
    uint32_t n = 5 + !ok + (rep->n_tensors > 0) + has_result;
    e.failed |= msgpack_pack_map(&e.pk, n);
    put_key_uint(&e, "v", rep->version ? rep->version : WF_PROTOCOL_VERSION);
    put_key_uint(&e, "id", rep->id);
    put_key_uint(&e, "op", rep->op);
    put_key_uint(&e, "status", (uint64_t)rep->status);
    if (!ok)
        /* an error reply always explains itself, even if the caller forgot */
        put_key_fixstr(&e, "error", rep->error[0] ? rep->error : wf_status_str(rep->status),
                       sizeof(rep->error));
    put_key_uint(&e, "epoch", rep->epoch);
    if (rep->n_tensors > 0)
        put_tensors(&e, rep->n_tensors, rep->tensors);
    if (has_result) {
        put_str(&e, "result");
        switch (rep->op) {
        case WF_OP_HELLO: put_hello(&e, &rep->result.hello); break;
        case WF_OP_STATUS: put_status(&e, &rep->result.status); break;
        case WF_OP_RECONFIGURE:
            e.failed |= msgpack_pack_map(&e.pk, 2);
            put_key_uint(&e, "epoch", rep->result.reconfigure.epoch);
            put_str(&e, "mesh");
            put_mesh(&e, &rep->result.reconfigure.mesh);
            break;
        default:
            e.failed |= msgpack_pack_map(&e.pk, 3);
            put_key_uint(&e, "queue_us", rep->result.attention.queue_us);
            put_key_uint(&e, "compute_us", rep->result.attention.compute_us);
            put_key_uint(&e, "devices", rep->result.attention.devices);
            break;
        }
    }
    return finish(&e, out, start);
}
