/* mesh.c — rank layout, groups, parsing and validation of the parallel
 * mesh (see mesh.h for the layout rule). Pure arithmetic on small ints:
 * no allocation, no logging; messages go to the caller's buffer. */
#include "mesh.h"
#include "errf.h"

#include <assert.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Write a message into err (if any). */
/* Degrees as an array, outermost first, in the order of wf_mesh_dim_t. */
static void deg_array(const wf_mesh_degrees_t *d, uint32_t out[WF_MESH_NDIMS])
{
    out[WF_MESH_DIM_DP] = d->dp;
    out[WF_MESH_DIM_RING] = d->ring;
    out[WF_MESH_DIM_ULYSSES] = d->ulysses;
    out[WF_MESH_DIM_TP] = d->tp;
}

static void coords_array(const wf_mesh_coords_t *c, int out[WF_MESH_NDIMS])
{
    out[WF_MESH_DIM_DP] = c->dp;
    out[WF_MESH_DIM_RING] = c->ring;
    out[WF_MESH_DIM_ULYSSES] = c->ulysses;
    out[WF_MESH_DIM_TP] = c->tp;
}

const char *wf_mesh_dim_name(wf_mesh_dim_t dim)
{
    switch (dim) {
    case WF_MESH_DIM_DP: return "dp";
    case WF_MESH_DIM_RING: return "ring";
    case WF_MESH_DIM_ULYSSES: return "ulysses";
    case WF_MESH_DIM_TP: return "tp";
    case WF_MESH_DIM_SEQ: return "seq";
    }
    return "?";
}

/* Shared validation of wf_mesh_init and wf_mesh_reconfigure. */
static wf_status_t validate(const wf_mesh_degrees_t *deg, int world_size,
                            char *err, size_t errlen)
{
    uint32_t d[WF_MESH_NDIMS];
    deg_array(deg, d);
    if (world_size < 1 || world_size > WF_MESH_MAX_WORLD) {
        wf_errf(err, errlen, "world size %d out of range [1, %d]",
                world_size, WF_MESH_MAX_WORLD);
        return WF_E_BAD_ARGUMENT;
    }
    for (int i = 0; i < WF_MESH_NDIMS; i++) {
        const char *name = wf_mesh_dim_name((wf_mesh_dim_t)i);
        if (d[i] < 1) {
            wf_errf(err, errlen,
                    "`%s` degree must be greater than or equal to 1 (got %" PRIu32
                    ")", name, d[i]);
            return WF_E_BAD_FIELD;
        }
        if (d[i] > WF_MESH_MAX_WORLD) {
            wf_errf(err, errlen, "`%s` degree %" PRIu32 " exceeds the limit %d",
                    name, d[i], WF_MESH_MAX_WORLD);
            return WF_E_BAD_FIELD;
        }
    }
    /* each factor <= 65536 and we stop once past the world: no overflow */
    long long prod = 1;
    for (int i = 0; i < WF_MESH_NDIMS; i++) {
        prod *= d[i];
        if (prod > WF_MESH_MAX_WORLD)
            break;
    }
    if (prod != world_size) {
        if (prod > WF_MESH_MAX_WORLD)
            wf_errf(err, errlen,
                    "the product of the degrees (dp=%" PRIu32 ", ring=%" PRIu32
                    ", ulysses=%" PRIu32 ", tp=%" PRIu32 ") exceeds %d and "
                    "cannot equal the world size (%d)",
                    d[0], d[1], d[2], d[3], WF_MESH_MAX_WORLD, world_size);
        else
            wf_errf(err, errlen,
                    "the product of the degrees dp=%" PRIu32 " x ring=%" PRIu32
                    " x ulysses=%" PRIu32 " x tp=%" PRIu32 " is %lld, which is "
                    "not the world size (%d)",
                    d[0], d[1], d[2], d[3], prod, world_size);
        return WF_E_BAD_FIELD;
    }
    wf_errf(err, errlen, "%s", "");
    return WF_OK;
}

wf_status_t wf_mesh_init(wf_mesh_t *m, const wf_mesh_degrees_t *deg,
                         int world_size, char *err, size_t errlen)
{
    assert(m && deg);
    wf_status_t st = validate(deg, world_size, err, errlen);
    if (st != WF_OK)
        return st;
    m->deg = *deg;
    m->world_size = world_size;
    m->epoch = 0;
    return WF_OK;
}

wf_status_t wf_mesh_reconfigure(wf_mesh_t *m, const wf_mesh_degrees_t *deg,
                                char *err, size_t errlen)
{
    assert(m && deg);
    wf_status_t st = validate(deg, m->world_size, err, errlen);
    if (st != WF_OK)
        return st;
    m->deg = *deg;
    m->epoch++;
    return WF_OK;
}

wf_status_t wf_mesh_coords(const wf_mesh_t *m, int rank,
                           wf_mesh_coords_t *ret_coords)
{
    assert(m && ret_coords);
    if (rank < 0 || rank >= m->world_size)
        return WF_E_BAD_ARGUMENT;
    int r = rank;
    wf_mesh_coords_t c;
    int tp = (int)m->deg.tp, ul = (int)m->deg.ulysses, ring = (int)m->deg.ring;
    c.tp = r % tp;
    r /= tp;
    c.ulysses = r % ul;
    r /= ul;
    c.ring = r % ring;
    r /= ring;
    c.dp = r;
    *ret_coords = c;
    return WF_OK;
}

wf_status_t wf_mesh_rank(const wf_mesh_t *m, const wf_mesh_coords_t *coords,
                         int *ret_rank)
{
    assert(m && coords && ret_rank);
    uint32_t d[WF_MESH_NDIMS];
    int c[WF_MESH_NDIMS];
    deg_array(&m->deg, d);
    coords_array(coords, c);
    int r = 0;
    for (int i = 0; i < WF_MESH_NDIMS; i++) {
        if (c[i] < 0 || c[i] >= (int)d[i])
            return WF_E_BAD_ARGUMENT;
        r = r * (int)d[i] + c[i];
    }
    *ret_rank = r;
    return WF_OK;
}

int wf_mesh_group_size(const wf_mesh_t *m, wf_mesh_dim_t dim)
{
    assert(m);
    switch (dim) {
    case WF_MESH_DIM_DP: return (int)m->deg.dp;
    case WF_MESH_DIM_RING: return (int)m->deg.ring;
    case WF_MESH_DIM_ULYSSES: return (int)m->deg.ulysses;
    case WF_MESH_DIM_TP: return (int)m->deg.tp;
    case WF_MESH_DIM_SEQ: return (int)(m->deg.ring * m->deg.ulysses);
    }
    return 0;
}

/* Rank of the member at position `index` of the group along `dim` that
 * holds the rank with coordinates `c` (index < group size). */
static int member(const wf_mesh_t *m, wf_mesh_dim_t dim,
                  const wf_mesh_coords_t *c, int index)
{
    wf_mesh_coords_t x = *c;
    switch (dim) {
    case WF_MESH_DIM_DP: x.dp = index; break;
    case WF_MESH_DIM_RING: x.ring = index; break;
    case WF_MESH_DIM_ULYSSES: x.ulysses = index; break;
    case WF_MESH_DIM_TP: x.tp = index; break;
    case WF_MESH_DIM_SEQ:
        x.ring = index / (int)m->deg.ulysses;
        x.ulysses = index % (int)m->deg.ulysses;
        break;
    }
    int r = -1;
    wf_status_t st = wf_mesh_rank(m, &x, &r);
    assert(st == WF_OK);
    (void)st;
    return r;
}

/* Position of the rank with coordinates c in its group along dim. */
static int index_in_group(const wf_mesh_t *m, wf_mesh_dim_t dim,
                          const wf_mesh_coords_t *c)
{
    switch (dim) {
    case WF_MESH_DIM_DP: return c->dp;
    case WF_MESH_DIM_RING: return c->ring;
    case WF_MESH_DIM_ULYSSES: return c->ulysses;
    case WF_MESH_DIM_TP: return c->tp;
    case WF_MESH_DIM_SEQ: return c->ring * (int)m->deg.ulysses + c->ulysses;
    }
    return -1;
}

wf_status_t wf_mesh_group(const wf_mesh_t *m, wf_mesh_dim_t dim, int rank,
                          int *ret_ranks, int max_ranks, int *ret_size,
                          int *ret_index)
{
    assert(m);
    int n = wf_mesh_group_size(m, dim);
    if (n == 0)
        return WF_E_BAD_ARGUMENT;
    wf_mesh_coords_t c;
    wf_status_t st = wf_mesh_coords(m, rank, &c);
    if (st != WF_OK)
        return st;
    if (ret_ranks) {
        if (max_ranks < n)
            return WF_E_LIMIT;
        for (int i = 0; i < n; i++)
            ret_ranks[i] = member(m, dim, &c, i);
    }
    if (ret_size)
        *ret_size = n;
    if (ret_index)
        *ret_index = index_in_group(m, dim, &c);
    return WF_OK;
}

wf_status_t wf_mesh_color(const wf_mesh_t *m, wf_mesh_dim_t dim, int rank,
                          int *ret_color, int *ret_key)
{
    assert(m && ret_color && ret_key);
    if (wf_mesh_group_size(m, dim) == 0)
        return WF_E_BAD_ARGUMENT;
    wf_mesh_coords_t c;
    wf_status_t st = wf_mesh_coords(m, rank, &c);
    if (st != WF_OK)
        return st;
    /* member 0 has the lowest rank: the layout is monotonic in every
     * coordinate, and SEQ's order is the layout's order (ring outside
     * ulysses). */
    *ret_color = member(m, dim, &c, 0);
    *ret_key = index_in_group(m, dim, &c);
    return WF_OK;
}

/* Bounded copy of [p, p + n) with surrounding blanks removed. */
static void trim(const char **p, size_t *n)
{
    while (*n > 0 && isspace((unsigned char)**p)) {
        (*p)++;
        (*n)--;
    }
    while (*n > 0 && isspace((unsigned char)(*p)[*n - 1]))
        (*n)--;
}

wf_status_t wf_mesh_parse(const char *s, wf_mesh_degrees_t *ret_deg,
                          char *err, size_t errlen)
{
    assert(s && ret_deg);
    static const char *const names[WF_MESH_NDIMS] = {"dp", "ring", "ulysses",
                                                     "tp"};
    uint32_t val[WF_MESH_NDIMS] = {1, 1, 1, 1};
    int seen[WF_MESH_NDIMS] = {0, 0, 0, 0};

    const char *all = s;
    size_t alln = strlen(s);
    trim(&all, &alln);
    if (alln == 0)
        goto done; /* "" = no parallelism */

    const char *p = s;
    for (int item = 1;; item++) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *tok = p;
        size_t tokn = n;
        trim(&tok, &tokn);
        if (tokn == 0) {
            wf_errf(err, errlen, "mesh item %d is empty (in \"%s\")", item, s);
            return WF_E_BAD_FIELD;
        }
        const char *eq = memchr(tok, '=', tokn);
        if (!eq) {
            wf_errf(err, errlen,
                    "mesh item \"%.*s\" is not of the form name=value",
                    (int)tokn, tok);
            return WF_E_BAD_FIELD;
        }
        const char *name = tok;
        size_t namen = (size_t)(eq - tok);
        const char *v = eq + 1;
        size_t vn = tokn - namen - 1;
        trim(&name, &namen);
        trim(&v, &vn);
        int which = -1;
        for (int i = 0; i < WF_MESH_NDIMS; i++)
            if (strlen(names[i]) == namen && memcmp(names[i], name, namen) == 0)
                which = i;
        if (which < 0) {
            wf_errf(err, errlen,
                    "unknown mesh dim \"%.*s\" (expected dp, ring, ulysses "
                    "or tp)",
                    (int)namen, name);
            return WF_E_BAD_FIELD;
        }
        if (seen[which]) {
            wf_errf(err, errlen, "mesh dim \"%s\" given twice", names[which]);
            return WF_E_BAD_FIELD;
        }
        seen[which] = 1;
        long long x = 0;
        int ok = vn > 0;
        for (size_t i = 0; ok && i < vn; i++) {
            if (v[i] < '0' || v[i] > '9')
                ok = 0;
            else if ((x = x * 10 + (v[i] - '0')) > WF_MESH_MAX_WORLD)
                ok = 0;
        }
        if (!ok) {
            wf_errf(err, errlen,
                    "mesh dim \"%s\": \"%.*s\" is not a number in [1, %d]",
                    names[which], (int)vn, v, WF_MESH_MAX_WORLD);
            return WF_E_BAD_FIELD;
        }
        if (x < 1) {
            wf_errf(err, errlen,
                    "`%s` degree must be greater than or equal to 1 (got 0)",
                    names[which]);
            return WF_E_BAD_FIELD;
        }
        val[which] = (uint32_t)x;
        if (!end)
            break;
        p = end + 1;
    }
done:
    ret_deg->dp = val[WF_MESH_DIM_DP];
    ret_deg->ring = val[WF_MESH_DIM_RING];
    ret_deg->ulysses = val[WF_MESH_DIM_ULYSSES];
    ret_deg->tp = val[WF_MESH_DIM_TP];
    wf_errf(err, errlen, "%s", "");
    return WF_OK;
}

void wf_mesh_degrees_format(const wf_mesh_degrees_t *d, char *buf, size_t len)
{
    snprintf(buf, len, "dp=%" PRIu32 ",ring=%" PRIu32 ",ulysses=%" PRIu32
             ",tp=%" PRIu32, d->dp, d->ring, d->ulysses, d->tp);
}

wf_status_t wf_mesh_format(const wf_mesh_t *m, char *buf, size_t len)
{
    assert(m && buf);
    char deg[64];
    wf_mesh_degrees_format(&m->deg, deg, sizeof deg);
    int n = snprintf(buf, len, "%s world=%d epoch=%llu", deg, m->world_size,
                     (unsigned long long)m->epoch);
    if (n < 0 || (size_t)n >= len)
        return WF_E_LIMIT;
    return WF_OK;
}

wf_status_t wf_mesh_check_heads(const wf_mesh_t *m, int heads, char *err,
                                size_t errlen)
{
    assert(m);
    if (heads < 1) {
        wf_errf(err, errlen, "number of attention heads must be >= 1 (got %d)",
                heads);
        return WF_E_BAD_ARGUMENT;
    }
    if ((uint32_t)heads % m->deg.tp != 0) {
        wf_errf(err, errlen,
                "Cannot shard %d attention heads across %" PRIu32
                " tensor-parallel ranks: not divisible by %" PRIu32 ".",
                heads, m->deg.tp, m->deg.tp);
        return WF_E_BAD_ARGUMENT;
    }
    wf_errf(err, errlen, "%s", "");
    return WF_OK;
}
