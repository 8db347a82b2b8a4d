/* encode.c — wf_request_t / wf_reply_t into msgpack header frames, and
 * the wf_buf_t they are written to.
 *
 * msgpack-c's packer writes through a callback into a wf_buf_t; the first
 * failed write (out of memory) is remembered and turns the whole encode
 * into WF_E_NO_MEMORY. Only the header is encoded here: tensor bytes travel in
 * their own frames and never pass through msgpack.
 */
#include <math.h>
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
        return WF_E_NO_MEMORY;
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

/* A fixed char array holding a C string (NUL inside the array). */
static bool fixstr_ok(const char *s, size_t cap)
{
    return strnlen(s, cap) < cap;
}

/* load_model arguments the wire can carry. Only representability: the
 * field rules of PROTOCOL.md 12.1 (name bytes, relative path, plan
 * semantics) are the daemon's to refuse, with its codes and messages. */
static bool load_model_ok(const wf_load_model_args_t *a)
{
    if (!fixstr_ok(a->name, sizeof(a->name)) || !fixstr_ok(a->path, sizeof(a->path)) ||
        a->n_plan > WF_TP_MAX_RULES)
        return false;
    for (uint32_t i = 0; i < a->n_plan; i++) {
        const wf_tp_rule_t *r = &a->plan[i];
        if (!fixstr_ok(r->glob, sizeof(r->glob)) || !wf_tp_style_name(r->style) ||
            r->n_blocks > WF_TP_MAX_BLOCKS)
            return false;
    }
    return true;
}

/* "tp_plan": a rule without blocks as its style str, a rule with blocks
 * (packed, or a wrong one the daemon will refuse) as {"style", "blocks"}. */
static void put_plan(enc_t *e, uint32_t n, const wf_tp_rule_t *plan)
{
    put_str(e, "tp_plan");
    e->failed |= msgpack_pack_map(&e->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        const wf_tp_rule_t *r = &plan[i];
        put_str(e, r->glob);
        if (r->n_blocks == 0) {
            put_str(e, wf_tp_style_name(r->style));
            continue;
        }
        e->failed |= msgpack_pack_map(&e->pk, 2);
        put_key_str(e, "style", wf_tp_style_name(r->style));
        put_str(e, "blocks");
        e->failed |= msgpack_pack_array(&e->pk, r->n_blocks);
        for (uint32_t b = 0; b < r->n_blocks; b++)
            e->failed |= msgpack_pack_uint64(&e->pk, r->blocks[b]);
    }
}

wf_status_t wf_request_encode(const wf_request_t *req, wf_buf_t *out)
{
    if (!req || !out || !descs_ok(req->n_tensors, req->tensors))
        return WF_E_BAD_ARGUMENT;
    const wf_attention_args_t *a = &req->args.attention;
    const wf_mesh_degrees_t *m = &req->args.reconfigure.mesh;
    bool attn = req->op == WF_OP_ATTENTION;
    bool recon = req->op == WF_OP_RECONFIGURE;
    if (attn && ((a->has_out_dtype && !wf_dtype_name(a->out_dtype)) ||
                 (a->rotate_method != WF_ROTATE_DEFAULT && !rotate_name(a->rotate_method)) ||
                 !opt_valid(a->convert_to_fp32) || !opt_valid(a->ring_anything) ||
                 !opt_valid(a->ulysses_anything) || !opt_valid(a->load_balance)))
        return WF_E_BAD_ARGUMENT;
    if (recon && !(degree_ok(m->dp) && degree_ok(m->ring) && degree_ok(m->ulysses) &&
                   degree_ok(m->tp)))
        return WF_E_BAD_ARGUMENT;
    const wf_load_model_args_t *lm = &req->args.load_model;
    const wf_forward_args_t *fw = &req->args.forward;
    bool load = req->op == WF_OP_LOAD_MODEL;
    bool unload = req->op == WF_OP_UNLOAD_MODEL;
    bool fwd = req->op == WF_OP_FORWARD;
    bool cancel = req->op == WF_OP_CANCEL;
    bool endsess = req->op == WF_OP_END_SESSION;
    if (load && !load_model_ok(lm))
        return WF_E_BAD_ARGUMENT;
    if (unload && !fixstr_ok(req->args.unload_model.name,
                             sizeof(req->args.unload_model.name)))
        return WF_E_BAD_ARGUMENT;
    if (fwd && (!fixstr_ok(fw->model, sizeof(fw->model)) ||
                (fw->has_out_dtype && !wf_dtype_name(fw->out_dtype)) ||
                !isfinite(fw->cache_threshold) || fw->cache_threshold < 0 ||
                (!fw->session && (fw->has_step || fw->cache_threshold > 0))))
        return WF_E_BAD_ARGUMENT;
    if (endsess && req->args.end_session.session == 0)
        return WF_E_BAD_ARGUMENT;

    enc_t e = { .failed = 0 };
    size_t start = out->len;
    msgpack_packer_init(&e.pk, out, buf_write);
    uint32_t n = 3 + (req->n_tensors > 0) + (attn || recon || load || unload || fwd ||
                                                  cancel || endsess);
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
                     (a->load_balance != WF_OPT_DEFAULT) + (a->deadline_ms != 0) +
                     a->fp8;
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
        if (a->deadline_ms)
            put_key_uint(&e, "deadline_ms", a->deadline_ms);
        /* only when set: "default" is what an absent key means, and a
         * daemon without the feature "fp8" refuses the key */
        if (a->fp8)
            put_key_str(&e, "precision", "fp8");
    }
    if (recon) {
        put_str(&e, "args");
        put_mesh(&e, m);
    }
    if (load) {
        /* the plan and the flag only when set: absent is the default */
        put_str(&e, "args");
        e.failed |= msgpack_pack_map(&e.pk, 2 + (lm->n_plan > 0) +
                                                lm->weights_already_sharded);
        put_key_str(&e, "name", lm->name);
        put_key_str(&e, "path", lm->path);
        if (lm->n_plan > 0)
            put_plan(&e, lm->n_plan, lm->plan);
        if (lm->weights_already_sharded)
            put_key_bool(&e, "weights_already_sharded", true);
    }
    if (unload) {
        put_str(&e, "args");
        e.failed |= msgpack_pack_map(&e.pk, 1);
        put_key_str(&e, "name", req->args.unload_model.name);
    }
    if (fwd) {
        put_str(&e, "args");
        bool sess = fw->session != 0;
        e.failed |= msgpack_pack_map(&e.pk, 1 + fw->has_out_dtype + (fw->deadline_ms != 0) +
                                                fw->fp8 + fw->split_batch + sess +
                                                (sess && fw->has_step) +
                                                (sess && fw->cache_threshold > 0));
        put_key_str(&e, "model", fw->model);
        if (fw->has_out_dtype)
            put_key_str(&e, "out_dtype", wf_dtype_name(fw->out_dtype));
        if (fw->deadline_ms)
            put_key_uint(&e, "deadline_ms", fw->deadline_ms);
        if (fw->fp8)
            put_key_str(&e, "precision", "fp8");
        if (fw->split_batch)
            put_key_bool(&e, "split_batch", true);
        if (sess) {
            put_key_uint(&e, "session", fw->session);
            if (fw->has_step)
                put_key_uint(&e, "step", fw->step);
            if (fw->cache_threshold > 0) {
                put_str(&e, "cache_threshold");
                e.failed |= msgpack_pack_double(&e.pk, fw->cache_threshold);
            }
        }
    }
    if (endsess) {
        put_str(&e, "args");
        e.failed |= msgpack_pack_map(&e.pk, 1);
        put_key_uint(&e, "session", req->args.end_session.session);
    }
    if (cancel) {
        put_str(&e, "args");
        e.failed |= msgpack_pack_map(&e.pk, 1);
        put_key_uint(&e, "id", req->args.cancel.id);
    }
    return finish(&e, out, start);
}

static const char *const feature_names[WF_FEATURES_COUNT] = {
    "reconfigure", "cp_options", "models", "roles", "fp8", "split_batch", "sessions",
};

const char *wf_feature_name(unsigned i)
{
    return i < WF_FEATURES_COUNT ? feature_names[i] : NULL;
}

uint32_t wf_feature_bit(const char *name, size_t len)
{
    for (unsigned i = 0; i < WF_FEATURES_COUNT; i++)
        if (strlen(feature_names[i]) == len && memcmp(feature_names[i], name, len) == 0)
            return 1u << i;
    return 0;
}

static void put_hello(enc_t *e, const wf_hello_info_t *h, uint32_t features)
{
    uint32_t n = 0;
    for (unsigned i = 0; i < WF_FEATURES_COUNT; i++)
        n += (features >> i) & 1u;
    e->failed |= msgpack_pack_map(&e->pk, 6);
    put_key_uint(e, "protocol", h->protocol);
    put_key_fixstr(e, "weft_version", h->weft_version, sizeof(h->weft_version));
    put_key_fixstr(e, "backend", h->backend, sizeof(h->backend));
    put_key_uint(e, "devices", h->devices);
    put_str(e, "limits");
    e->failed |= msgpack_pack_map(&e->pk, 3);
    put_key_uint(e, "max_header_bytes", h->max_header_bytes);
    put_key_uint(e, "max_tensor_bytes", h->max_tensor_bytes);
    put_key_uint(e, "max_tensors", h->max_tensors);
    put_str(e, "features");
    e->failed |= msgpack_pack_array(&e->pk, n);
    for (unsigned i = 0; i < WF_FEATURES_COUNT; i++)
        if ((features >> i) & 1u)
            put_str(e, feature_names[i]);
}

/* [{"code": uint, "count": uint}, ...] */
static void put_code_counts(enc_t *e, const char *key, uint32_t n,
                            const wf_code_count_t *c)
{
    if (n > WF_STATUS_MAX_CODES)
        n = WF_STATUS_MAX_CODES;
    put_str(e, key);
    e->failed |= msgpack_pack_array(&e->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        e->failed |= msgpack_pack_map(&e->pk, 2);
        put_key_uint(e, "code", c[i].code);
        put_key_uint(e, "count", c[i].count);
    }
}

/* status `counters` (section 5) */
static void put_counters(enc_t *e, const wf_status_counters_t *c)
{
    uint32_t nop = c->op_count < WF_STATUS_MAX_OPS ? c->op_count : WF_STATUS_MAX_OPS;
    put_str(e, "counters");
    e->failed |= msgpack_pack_map(&e->pk, 9);
    put_code_counts(e, "refused", c->refused_count, c->refused);
    put_code_counts(e, "failed", c->failed_count, c->failed);
    put_str(e, "ops");
    e->failed |= msgpack_pack_array(&e->pk, nop);
    for (uint32_t i = 0; i < nop; i++) {
        const wf_op_counters_t *o = &c->ops[i];
        e->failed |= msgpack_pack_map(&e->pk, 6);
        put_key_fixstr(e, "op", o->op, sizeof(o->op));
        put_key_uint(e, "served", o->served);
        put_key_uint(e, "failed", o->failed);
        put_key_uint(e, "p50_us", o->p50_us);
        put_key_uint(e, "p99_us", o->p99_us);
        put_key_uint(e, "max_us", o->max_us);
    }
    put_key_uint(e, "reconfigurations", c->reconfigurations);
    put_key_uint(e, "reconfigurations_failed", c->reconfigurations_failed);
    put_key_uint(e, "reconfigure_ms", c->reconfigure_ms);
    put_key_uint(e, "nodes_lost", c->nodes_lost);
    put_key_uint(e, "handshakes_refused", c->handshakes_refused);
    put_key_uint(e, "handshakes_admitted", c->handshakes_admitted);
}

static void put_status(enc_t *e, const wf_status_info_t *s)
{
    uint32_t n = s->device_count < WF_STATUS_MAX_DEVICES ? s->device_count
                                                         : WF_STATUS_MAX_DEVICES;
    bool cl = s->role[0] != '\0';
    bool co = s->counters.present != 0;
    e->failed |= msgpack_pack_map(&e->pk, 14 + (cl ? 1 : 0) + (co ? 1 : 0));
    if (co)
        put_counters(e, &s->counters);
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

/* MODEL's "config" (section 12.5): diffusers' names, in the family's
 * order; an int, a flag (bool) or a list. */
static void put_model_config(enc_t *e, const wf_model_config_t *c)
{
    uint32_t n = c->n <= WF_MODEL_CONFIG_MAX ? c->n : WF_MODEL_CONFIG_MAX;
    put_str(e, "config");
    e->failed |= msgpack_pack_map(&e->pk, n);
    for (uint32_t i = 0; i < n; i++) {
        const wf_model_config_entry_t *x = &c->e[i];
        put_str(e, x->key);
        if (x->kind == WF_CONFIG_FLAG) {
            e->failed |= x->v[0] ? msgpack_pack_true(&e->pk) : msgpack_pack_false(&e->pk);
        } else if (x->kind == WF_CONFIG_LIST) {
            uint32_t m = x->n <= WF_MODEL_CONFIG_VALUES ? x->n : WF_MODEL_CONFIG_VALUES;
            e->failed |= msgpack_pack_array(&e->pk, m);
            for (uint32_t j = 0; j < m; j++)
                e->failed |= msgpack_pack_uint64(&e->pk, (uint64_t)x->v[j]);
        } else {
            e->failed |= msgpack_pack_uint64(&e->pk, (uint64_t)x->v[0]);
        }
    }
}

static void put_schema_tensor(enc_t *e, const wf_schema_tensor_t *t)
{
    e->failed |= msgpack_pack_map(&e->pk, 5);
    put_key_fixstr(e, "name", t->name, sizeof t->name);
    put_key_bool(e, "optional", t->optional != 0);
    put_str(e, "dtypes");
    uint32_t nd = 0;
    for (int k = 0; k < 32; k++)
        nd += (t->dtypes >> k & 1u) && wf_dtype_name((wf_dtype_t)k);
    e->failed |= msgpack_pack_array(&e->pk, nd);
    for (int k = 0; k < 32; k++)
        if ((t->dtypes >> k & 1u) && wf_dtype_name((wf_dtype_t)k))
            put_str(e, wf_dtype_name((wf_dtype_t)k));
    uint32_t r = t->rank <= WF_MAX_RANK ? t->rank : WF_MAX_RANK;
    put_str(e, "shape");
    e->failed |= msgpack_pack_array(&e->pk, r);
    for (uint32_t j = 0; j < r; j++) {
        if (t->dim[j].size > 0)
            e->failed |= msgpack_pack_uint64(&e->pk, (uint64_t)t->dim[j].size);
        else
            put_str(e, t->dim[j].sym);
    }
    put_str(e, "dims");
    e->failed |= msgpack_pack_array(&e->pk, r);
    for (uint32_t j = 0; j < r; j++)
        put_str(e, t->dim[j].sym);
}

/* MODEL's "schema" (section 12.5): the forward's inputs and outputs. */
static void put_model_schema(enc_t *e, const wf_model_schema_t *s)
{
    uint32_t ni = s->n_inputs <= WF_SCHEMA_MAX_INPUTS ? s->n_inputs : WF_SCHEMA_MAX_INPUTS;
    uint32_t no = s->n_outputs <= WF_SCHEMA_MAX_OUTPUTS ? s->n_outputs : WF_SCHEMA_MAX_OUTPUTS;
    put_str(e, "schema");
    e->failed |= msgpack_pack_map(&e->pk, 2);
    put_str(e, "inputs");
    e->failed |= msgpack_pack_array(&e->pk, ni);
    for (uint32_t i = 0; i < ni; i++)
        put_schema_tensor(e, &s->inputs[i]);
    put_str(e, "outputs");
    e->failed |= msgpack_pack_array(&e->pk, no);
    for (uint32_t i = 0; i < no; i++)
        put_schema_tensor(e, &s->outputs[i]);
}

/* MODEL (section 12.5): every field of wf_model_info_t under its name. */
static void put_model(enc_t *e, const wf_model_info_t *m)
{
    /* "nodes" only in a cluster (a single node's MODEL has no such key);
     * "config" once the daemon checked it */
    bool nodes = m->nodes[0] != '\0', config = m->config.present != 0;
    e->failed |= msgpack_pack_map(&e->pk, 16 + nodes + 2 * config);
    put_key_fixstr(e, "name", m->name, sizeof(m->name));
    put_key_fixstr(e, "path", m->path, sizeof(m->path));
    put_key_fixstr(e, "family", m->family, sizeof(m->family));
    put_key_fixstr(e, "state", m->state, sizeof(m->state));
    put_key_fixstr(e, "dtype", m->dtype, sizeof(m->dtype));
    put_key_uint(e, "params", m->params);
    put_key_uint(e, "bytes_total", m->bytes_total);
    put_key_uint(e, "bytes_loaded", m->bytes_loaded);
    put_key_uint(e, "host_bytes", m->host_bytes);
    put_key_uint(e, "rank_bytes", m->rank_bytes);
    put_key_uint(e, "tp", m->tp);
    put_key_bool(e, "sharded_input", m->sharded_input != 0);
    put_key_uint(e, "load_ms", m->load_ms);
    put_key_fixstr(e, "device", m->device, sizeof(m->device));
    put_key_fixstr(e, "compute", m->compute, sizeof(m->compute));
    put_key_bool(e, "host_pinned", m->host_pinned != 0);
    if (nodes)
        put_key_fixstr(e, "nodes", m->nodes, sizeof(m->nodes));
    if (config) {
        put_model_config(e, &m->config);
        put_model_schema(e, &m->schema);
    }
}

wf_status_t wf_reply_encode(const wf_reply_t *rep, wf_buf_t *out)
{
    if (!rep || !out || !descs_ok(rep->n_tensors, rep->tensors))
        return WF_E_BAD_ARGUMENT;
    /* the one place every reply is encoded: only wire codes leave */
    wf_status_t status = wf_status_on_wire(rep->status);
    bool ok = status == WF_OK;
    bool has_result = ok && (rep->op == WF_OP_HELLO || rep->op == WF_OP_STATUS ||
                             rep->op == WF_OP_ATTENTION ||
                             rep->op == WF_OP_RECONFIGURE ||
                             rep->op == WF_OP_LOAD_MODEL ||
                             rep->op == WF_OP_LIST_MODELS || rep->op == WF_OP_FORWARD ||
                             rep->op == WF_OP_END_SESSION);

    enc_t e = { .failed = 0 };
    size_t start = out->len;
    msgpack_packer_init(&e.pk, out, buf_write);
    uint32_t n = 5 + !ok + (rep->n_tensors > 0) + has_result;
    e.failed |= msgpack_pack_map(&e.pk, n);
    put_key_uint(&e, "v", rep->version ? rep->version : WF_PROTOCOL_VERSION);
    put_key_uint(&e, "id", rep->id);
    put_key_uint(&e, "op", rep->op);
    put_key_uint(&e, "status", (uint64_t)status);
    if (!ok)
        /* an error reply always explains itself, even if the caller forgot */
        put_key_fixstr(&e, "error", rep->error[0] ? rep->error : wf_status_str(status),
                       sizeof(rep->error));
    put_key_uint(&e, "epoch", rep->epoch);
    if (rep->n_tensors > 0)
        put_tensors(&e, rep->n_tensors, rep->tensors);
    if (has_result) {
        put_str(&e, "result");
        switch (rep->op) {
        case WF_OP_HELLO: put_hello(&e, &rep->result.hello, rep->features); break;
        case WF_OP_STATUS: put_status(&e, &rep->result.status); break;
        case WF_OP_RECONFIGURE:
            e.failed |= msgpack_pack_map(&e.pk, 2);
            put_key_uint(&e, "epoch", rep->result.reconfigure.epoch);
            put_str(&e, "mesh");
            put_mesh(&e, &rep->result.reconfigure.mesh);
            break;
        case WF_OP_LOAD_MODEL:
            e.failed |= msgpack_pack_map(&e.pk, 1);
            put_str(&e, "model");
            put_model(&e, &rep->result.models.models[0]);
            break;
        case WF_OP_LIST_MODELS: {
            uint32_t nm = rep->result.models.n < WF_MODELS_MAX ? rep->result.models.n
                                                               : WF_MODELS_MAX;
            e.failed |= msgpack_pack_map(&e.pk, 1);
            put_str(&e, "models");
            e.failed |= msgpack_pack_array(&e.pk, nm);
            for (uint32_t i = 0; i < nm; i++)
                put_model(&e, &rep->result.models.models[i]);
            break;
        }
        case WF_OP_FORWARD: {
            const wf_forward_result_t *f = &rep->result.forward;
            bool cache = f->cache == WF_CACHE_COMPUTED || f->cache == WF_CACHE_REUSED;
            e.failed |= msgpack_pack_map(&e.pk, 3 + cache);
            put_key_uint(&e, "queue_us", f->queue_us);
            put_key_uint(&e, "compute_us", f->compute_us);
            put_key_uint(&e, "devices", f->devices);
            if (cache)
                put_key_str(&e, "cache", f->cache == WF_CACHE_REUSED ? "reused" : "computed");
            break;
        }
        case WF_OP_END_SESSION:
            e.failed |= msgpack_pack_map(&e.pk, 2);
            put_key_uint(&e, "steps", rep->result.end_session.steps);
            put_key_uint(&e, "reused", rep->result.end_session.reused);
            break;
        default: {
            const wf_attention_result_t *a = &rep->result.attention;
            e.failed |= msgpack_pack_map(&e.pk, 3);
            put_key_uint(&e, "queue_us", a->queue_us);
            put_key_uint(&e, "compute_us", a->compute_us);
            put_key_uint(&e, "devices", a->devices);
            break;
        }
        }
    }
    return finish(&e, out, start);
}
