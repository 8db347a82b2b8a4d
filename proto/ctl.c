/* ctl.c — control messages between weftd daemons (cluster rendezvous,
 * heartbeats, job descriptors): one flat msgpack map of str keys to
 * uint or str values (see proto.h, wf_ctl_msg_t). Decoding prevalidates
 * the raw bytes before msgpack-c sees them, as for client requests: a
 * peer is not trusted before its version check, and not after either.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "errf.h"
#include "proto.h"

void wf_ctl_init(wf_ctl_msg_t *m)
{
    m->n = 0;
}

static wf_ctl_field_t *ctl_slot(wf_ctl_msg_t *m, const char *key)
{
    size_t kl = strlen(key);
    if (kl == 0 || kl >= WF_CTL_KEY_MAX || m->n >= WF_CTL_MAX_FIELDS)
        return NULL;
    wf_ctl_field_t *f = &m->f[m->n++];
    memcpy(f->key, key, kl + 1);
    return f;
}

wf_status_t wf_ctl_put_uint(wf_ctl_msg_t *m, const char *key, uint64_t v)
{
    wf_ctl_field_t *f = ctl_slot(m, key);
    if (!f)
        return WF_E_LIMIT;
    f->is_str = false;
    f->u = v;
    f->s[0] = '\0';
    return WF_OK;
}

wf_status_t wf_ctl_put_str(wf_ctl_msg_t *m, const char *key, const char *v)
{
    size_t n = strlen(v);
    if (n >= WF_CTL_STR_MAX)
        return WF_E_LIMIT;
    wf_ctl_field_t *f = ctl_slot(m, key);
    if (!f)
        return WF_E_LIMIT;
    f->is_str = true;
    f->u = 0;
    memcpy(f->s, v, n + 1);
    return WF_OK;
}

const wf_ctl_field_t *wf_ctl_get(const wf_ctl_msg_t *m, const char *key)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (strcmp(m->f[i].key, key) == 0)
            return &m->f[i];
    return NULL;
}

bool wf_ctl_get_uint(const wf_ctl_msg_t *m, const char *key, uint64_t *ret)
{
    const wf_ctl_field_t *f = wf_ctl_get(m, key);
    if (!f || f->is_str)
        return false;
    *ret = f->u;
    return true;
}

const char *wf_ctl_get_str(const wf_ctl_msg_t *m, const char *key)
{
    const wf_ctl_field_t *f = wf_ctl_get(m, key);
    return f && f->is_str ? f->s : NULL;
}

static int ctl_write(void *data, const char *src, size_t n)
{
    wf_buf_t *b = data;
    if (n > SIZE_MAX - b->len)
        return -1;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
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

wf_status_t wf_ctl_encode(const wf_ctl_msg_t *m, wf_buf_t *out)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, ctl_write);
    int failed = msgpack_pack_map(&pk, m->n);
    for (uint32_t i = 0; i < m->n; i++) {
        const wf_ctl_field_t *f = &m->f[i];
        failed |= msgpack_pack_str_with_body(&pk, f->key, strlen(f->key));
        if (f->is_str)
            failed |= msgpack_pack_str_with_body(&pk, f->s, strlen(f->s));
        else
            failed |= msgpack_pack_uint64(&pk, f->u);
    }
    return failed ? WF_E_NO_MEMORY : WF_OK;
}

static wf_status_t ctl_decode_obj(const msgpack_object *o, wf_ctl_msg_t *m,
                                  char *err, size_t err_len)
{
    if (o->type != MSGPACK_OBJECT_MAP) {
        wf_errf(err, err_len, "control message is not a map");
        return WF_E_MALFORMED;
    }
    if (o->via.map.size > WF_CTL_MAX_FIELDS) {
        wf_errf(err, err_len, "control message has %u fields (max %d)",
                o->via.map.size, WF_CTL_MAX_FIELDS);
        return WF_E_MALFORMED;
    }
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        const msgpack_object *v = &o->via.map.ptr[i].val;
        if (k->type != MSGPACK_OBJECT_STR || k->via.str.size == 0 ||
            k->via.str.size >= WF_CTL_KEY_MAX ||
            memchr(k->via.str.ptr, '\0', k->via.str.size)) {
            wf_errf(err, err_len, "field %u: bad key", i);
            return WF_E_MALFORMED;
        }
        wf_ctl_field_t *f = &m->f[m->n++];
        memcpy(f->key, k->via.str.ptr, k->via.str.size);
        f->key[k->via.str.size] = '\0';
        for (uint32_t j = 0; j + 1 < m->n; j++)
            if (strcmp(m->f[j].key, f->key) == 0) {
                wf_errf(err, err_len, "%s: duplicated key", f->key);
                return WF_E_MALFORMED;
            }
        if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
            f->is_str = false;
            f->u = v->via.u64;
            f->s[0] = '\0';
        } else if (v->type == MSGPACK_OBJECT_STR && v->via.str.size < WF_CTL_STR_MAX &&
                   !memchr(v->via.str.ptr, '\0', v->via.str.size)) {
            f->is_str = true;
            f->u = 0;
            memcpy(f->s, v->via.str.ptr, v->via.str.size);
            f->s[v->via.str.size] = '\0';
        } else {
            wf_errf(err, err_len, "%s: must be a uint or a str of < %d bytes",
                    f->key, WF_CTL_STR_MAX);
            return WF_E_MALFORMED;
        }
    }
    return WF_OK;
}

wf_status_t wf_ctl_decode(const void *data, size_t len, wf_ctl_msg_t *m,
                          char *err, size_t err_len)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    lim.max_header_bytes = WF_CTL_MAX_BYTES;
    lim.max_depth = 2;
    lim.max_elements = 2 * WF_CTL_MAX_FIELDS + 1;
    lim.max_str_bytes = WF_CTL_STR_MAX;
    m->n = 0;
    wf_status_t rc = wf_msgpack_prevalidate(data, len, &lim, err, err_len);
    if (rc != WF_OK)
        return rc;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, data, len, &off) != MSGPACK_UNPACK_SUCCESS ||
        off != len) {
        wf_errf(err, err_len, "msgpack could not be unpacked");
        rc = WF_E_MALFORMED;
    } else {
        rc = ctl_decode_obj(&up.data, m, err, err_len);
    }
    msgpack_unpacked_destroy(&up);
    if (rc != WF_OK)
        m->n = 0;
    return rc;
}
