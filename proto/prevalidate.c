/* prevalidate.c — walks raw msgpack bytes before msgpack-c may see them.
 *
 * msgpack-c trusts every count and length a header declares and reserves
 * memory for it, so a 5-byte array header can make it ask for gigabytes.
 * This walker reads the bytes by hand, allocates nothing, runs in O(len),
 * and enforces the limits of wf_limits_t. It also holds the limit defaults
 * and a bounded "peek" that finds id / op in a header that failed the walk,
 * so that even a refused request gets an error reply carrying its id.
 */
#include <stdio.h>
#include <string.h>

#include "proto.h"

/* msgpack-c's own unpacker refuses nesting deeper than 32 (its embedded
 * stack); any runtime max_depth is clamped to it so that a header that
 * passes here always unpacks. */
#define WF_PREVAL_DEPTH_CEIL 32

void wf_limits_default(wf_limits_t *ret_limits)
{
    ret_limits->max_header_bytes = 64u * 1024u;
    ret_limits->max_depth = 8;
    ret_limits->max_elements = 4096;
    ret_limits->max_str_bytes = 1024;
    ret_limits->max_tensors = WF_PROTO_MAX_TENSORS;
    ret_limits->max_tensor_bytes = 4ull * 1024u * 1024u * 1024u;
}

static uint64_t rd_be(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* What one msgpack object header says about itself. */
typedef struct mp_head {
    size_t head;      /* bytes of the type byte + length / count fields */
    uint64_t body;    /* bytes of payload that follow (str / bin / ext / scalars) */
    uint64_t children; /* objects that follow inside it (2n for a map) */
    bool container;   /* array or map */
    bool sized;       /* str / bin / ext: body is length-capped */
    uint64_t datalen; /* str / bin / ext: the declared data length */
} mp_head_t;

/* Decode the header of the object at p (avail bytes readable). Returns 0,
 * -1 when the bytes end inside the header, -2 for the never-used byte. */
static int mp_read_head(const unsigned char *p, size_t avail, mp_head_t *h)
{
    memset(h, 0, sizeof(*h));
    if (avail < 1)
        return -1;
    unsigned char b = p[0];
    int lenbytes = 0;       /* bytes of a big-endian length / count field */
    int kind = 0;           /* 0 scalar, 1 sized, 2 array, 3 map */
    uint64_t fixed = 0;     /* payload bytes of a scalar */

    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        fixed = 0;                                  /* fixint, nil, bool */
    } else if (b >= 0x80 && b <= 0x8f) {
        kind = 3; h->children = 2u * (b & 0x0f);    /* fixmap */
    } else if (b >= 0x90 && b <= 0x9f) {
        kind = 2; h->children = b & 0x0f;           /* fixarray */
    } else if (b >= 0xa0 && b <= 0xbf) {
        kind = 1; h->body = b & 0x1f;               /* fixstr */
    } else {
        switch (b) {
        case 0xc4: kind = 1; lenbytes = 1; break;   /* bin 8 */
        case 0xc5: kind = 1; lenbytes = 2; break;   /* bin 16 */
        case 0xc6: kind = 1; lenbytes = 4; break;   /* bin 32 */
        case 0xc7: kind = 1; lenbytes = 1; fixed = 1; break; /* ext 8 (+type) */
        case 0xc8: kind = 1; lenbytes = 2; fixed = 1; break; /* ext 16 */
        case 0xc9: kind = 1; lenbytes = 4; fixed = 1; break; /* ext 32 */
        case 0xca: fixed = 4; break;                /* float 32 */
        case 0xcb: fixed = 8; break;                /* float 64 */
        case 0xcc: case 0xd0: fixed = 1; break;     /* (u)int 8 */
        case 0xcd: case 0xd1: fixed = 2; break;     /* (u)int 16 */
        case 0xce: case 0xd2: fixed = 4; break;     /* (u)int 32 */
        case 0xcf: case 0xd3: fixed = 8; break;     /* (u)int 64 */
        case 0xd4: kind = 1; fixed = 1 + 1; break;  /* fixext 1 (+type) */
        case 0xd5: kind = 1; fixed = 1 + 2; break;
        case 0xd6: kind = 1; fixed = 1 + 4; break;
        case 0xd7: kind = 1; fixed = 1 + 8; break;
        case 0xd8: kind = 1; fixed = 1 + 16; break;
        case 0xd9: kind = 1; lenbytes = 1; break;   /* str 8 */
        case 0xda: kind = 1; lenbytes = 2; break;   /* str 16 */
        case 0xdb: kind = 1; lenbytes = 4; break;   /* str 32 */
        case 0xdc: kind = 2; lenbytes = 2; break;   /* array 16 */
        case 0xdd: kind = 2; lenbytes = 4; break;   /* array 32 */
        case 0xde: kind = 3; lenbytes = 2; break;   /* map 16 */
        case 0xdf: kind = 3; lenbytes = 4; break;   /* map 32 */
        default: return -2;                         /* 0xc1: never used */
        }
    }
    if (avail < 1 + (size_t)lenbytes)
        return -1;
    uint64_t n = rd_be(p + 1, lenbytes);
    h->head = 1 + (size_t)lenbytes;
    switch (kind) {
    case 0: h->body = fixed; break;
    case 1:
        /* ext carries a type byte (counted in fixed) before its data */
        h->sized = true;
        if (lenbytes)
            h->body = n + fixed;
        else
            h->body += fixed;
        h->datalen = b >= 0xd4 && b <= 0xd8 ? fixed - 1 : (lenbytes ? n : h->body);
        break;
    case 2: h->container = true; if (lenbytes) h->children = n; break;
    case 3: h->container = true; if (lenbytes) h->children = 2 * n; break;
    }
    return 0;
}

#define ERR(code, ...) \
    do { if (err && err_len) snprintf(err, err_len, __VA_ARGS__); return (code); } while (0)

wf_status_t wf_msgpack_prevalidate(const void *data, size_t len,
                                   const wf_limits_t *lim,
                                   char *err, size_t err_len)
{
    const unsigned char *p = data;
    if (err && err_len)
        err[0] = '\0';
    if (len > lim->max_header_bytes)
        ERR(WF_E_LIMIT, "header is %zu bytes, limit %llu", len,
            (unsigned long long)lim->max_header_bytes);
    if (len == 0 || !data)
        ERR(WF_E_MALFORMED, "header is empty");

    uint32_t max_depth = lim->max_depth < WF_PREVAL_DEPTH_CEIL
                             ? lim->max_depth : WF_PREVAL_DEPTH_CEIL;
    /* rem[0] is the root (exactly one object); rem[d] the objects still
     * to read inside the d-th open container. pending is their sum: each
     * needs at least one byte, so pending <= bytes left at all times. */
    uint64_t rem[WF_PREVAL_DEPTH_CEIL + 1];
    uint32_t d = 0;
    uint64_t pending = 1;
    uint64_t elements = 0;
    size_t pos = 0;
    rem[0] = 1;

    for (;;) {
        while (d > 0 && rem[d] == 0)
            d--;
        if (d == 0 && rem[0] == 0)
            break;
        rem[d]--;
        pending--;
        if (++elements > lim->max_elements)
            ERR(WF_E_LIMIT, "more than %u msgpack objects in the header",
                lim->max_elements);
        mp_head_t h;
        int rc = mp_read_head(p + pos, len - pos, &h);
        if (rc == -1)
            ERR(WF_E_MALFORMED, "truncated msgpack at byte %zu", pos);
        if (rc == -2)
            ERR(WF_E_MALFORMED, "invalid msgpack type byte 0xc1 at byte %zu", pos);
        pos += h.head;
        size_t left = len - pos;
        if (h.sized && h.datalen > lim->max_str_bytes)
            ERR(WF_E_LIMIT, "string / bin / ext of %llu bytes at byte %zu, limit %u",
                (unsigned long long)h.datalen, pos - h.head, lim->max_str_bytes);
        if (h.body > left)
            ERR(WF_E_MALFORMED, "object at byte %zu declares %llu bytes, %zu left",
                pos - h.head, (unsigned long long)h.body, left);
        pos += (size_t)h.body;
        left -= (size_t)h.body;
        if (!h.container)
            continue;
        if (d + 1 > max_depth)
            ERR(WF_E_LIMIT, "nesting deeper than %u at byte %zu", max_depth,
                pos - h.head);
        if (h.children > left || pending + h.children > left)
            ERR(WF_E_MALFORMED, "container at byte %zu declares %llu objects, %zu bytes left",
                pos - h.head, (unsigned long long)h.children, left);
        if (elements + h.children > lim->max_elements)
            ERR(WF_E_LIMIT, "more than %u msgpack objects in the header",
                lim->max_elements);
        if (h.children > 0) {
            rem[++d] = h.children;
            pending += h.children;
        }
    }
    if (pos != len)
        ERR(WF_E_MALFORMED, "%zu trailing bytes after the header", len - pos);
    return WF_OK;
}

/* Skip one object at *pos without recursion: O(bytes), bounded by len. */
static bool mp_skip(const unsigned char *p, size_t len, size_t *pos)
{
    uint64_t todo = 1;
    while (todo > 0) {
        mp_head_t h;
        if (mp_read_head(p + *pos, len - *pos, &h) != 0)
            return false;
        todo--;
        *pos += h.head;
        if (h.body > len - *pos)
            return false;
        *pos += (size_t)h.body;
        if (h.children > len - *pos || todo + h.children > len - *pos)
            return false;
        todo += h.children;
    }
    return true;
}

/* Read an unsigned integer object at *pos; false if it is not one. */
static bool mp_read_uint(const unsigned char *p, size_t len, size_t *pos,
                         uint64_t *ret)
{
    if (*pos >= len)
        return false;
    unsigned char b = p[*pos];
    int n;
    if (b <= 0x7f) {
        *ret = b;
        (*pos)++;
        return true;
    }
    bool is_signed = b >= 0xd0 && b <= 0xd3;
    switch (b) {
    case 0xcc: case 0xd0: n = 1; break;
    case 0xcd: case 0xd1: n = 2; break;
    case 0xce: case 0xd2: n = 4; break;
    case 0xcf: case 0xd3: n = 8; break;
    default: return false;
    }
    if (len - *pos < 1 + (size_t)n)
        return false;
    /* a signed encoding of a non-negative value is a uint too (section 2
     * of PROTOCOL.md), as msgpack-c decodes it */
    if (is_signed && (p[*pos + 1] & 0x80))
        return false;
    *ret = rd_be(p + *pos + 1, n);
    *pos += 1 + (size_t)n;
    return true;
}

/* Best effort, for error replies to headers that failed prevalidation:
 * scan the top-level entries of a map for "id" and "op" with unsigned
 * values. Never allocates; stops at the first byte it cannot read. */
void wf_request_peek(const void *data, size_t len, uint64_t *id, uint32_t *op)
{
    const unsigned char *p = data;
    size_t pos = 0;
    mp_head_t h;
    if (!data || mp_read_head(p, len, &h) != 0 || !h.container)
        return;
    unsigned char b = p[0];
    if (!((b >= 0x80 && b <= 0x8f) || b == 0xde || b == 0xdf))
        return;
    pos = h.head;
    bool have_id = false, have_op = false;
    for (uint64_t i = 0; i < h.children / 2; i++) {
        size_t kpos = pos;
        if (!mp_skip(p, len, &pos))
            return;
        /* key "id" is a 2-byte fixstr, "op" likewise */
        bool is_id = pos - kpos == 3 && p[kpos] == 0xa2 && memcmp(p + kpos + 1, "id", 2) == 0;
        bool is_op = pos - kpos == 3 && p[kpos] == 0xa2 && memcmp(p + kpos + 1, "op", 2) == 0;
        size_t vpos = pos;
        uint64_t v;
        if ((is_id && !have_id) || (is_op && !have_op)) {
            if (mp_read_uint(p, len, &vpos, &v)) {
                if (is_id) {
                    *id = v;
                    have_id = true;
                } else {
                    *op = wf_op_echo(v);
                    have_op = true;
                }
            }
        }
        if (!mp_skip(p, len, &pos))
            return;
    }
}
