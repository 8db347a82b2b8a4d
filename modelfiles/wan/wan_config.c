/* wan_config.c — WanTransformer3DModel config.json and its tensor list
 * (wan_config.h).
 *
 * The fields are one table (name, kind, default); the tensor list follows
 * diffusers' module tree in state_dict order (a module's own parameters
 * before its children's):
 *   scale_shift_table, patch_embedding (Conv3d),
 *   condition_embedder.{time_embedder, time_proj, text_embedder,
 *                       image_embedder?{pos_embed?, norm1, ff, norm2}},
 *   blocks.N.{scale_shift_table, attn1, attn2 (+ add_k_proj, add_v_proj,
 *             norm_added_k where added_kv_proj_dim), norm2?, ffn},
 *   proj_out.
 */
#include "wan_config.h"
#include "errf.h"
#include "json_err.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json -------------------------------------------------------- */

typedef enum field_kind {
    FIELD_POSITIVE,   /* integer in [1, WF_WAN_MAX_DIM] */
    FIELD_CHANNELS,   /* null -> 0 (in_channels later), else FIELD_POSITIVE */
    FIELD_BOOL,       /* true / false */
    FIELD_PATCH,      /* array of 3 integers in [1, WF_WAN_MAX_PATCH] */
    FIELD_REAL,       /* finite number >= 0 (eps) */
    FIELD_QK_NORM,    /* "rms_norm_across_heads" or null */
    FIELD_OPTIONAL    /* null or missing -> 0 (diffusers' None), else FIELD_POSITIVE */
} field_kind_t;

typedef struct field_def {
    const char *name;        /* key in config.json */
    field_kind_t kind;       /* how it is read */
    size_t offset;           /* of its field in wf_wan_config_t */
    uint32_t def;            /* diffusers' default, where an integer or flag */
} field_def_t;

#define OFF(f) offsetof(wf_wan_config_t, f)

static const field_def_t fields[] = {
    { "patch_size", FIELD_PATCH, OFF(patch_size), 0 },
    { "num_attention_heads", FIELD_POSITIVE, OFF(num_attention_heads), 40 },
    { "attention_head_dim", FIELD_POSITIVE, OFF(attention_head_dim), 128 },
    { "in_channels", FIELD_POSITIVE, OFF(in_channels), 16 },
    { "out_channels", FIELD_CHANNELS, OFF(out_channels), 16 },
    { "text_dim", FIELD_POSITIVE, OFF(text_dim), 4096 },
    { "freq_dim", FIELD_POSITIVE, OFF(freq_dim), 256 },
    { "ffn_dim", FIELD_POSITIVE, OFF(ffn_dim), 13824 },
    { "num_layers", FIELD_POSITIVE, OFF(num_layers), 40 },
    { "cross_attn_norm", FIELD_BOOL, OFF(cross_attn_norm), 1 },
    { "qk_norm", FIELD_QK_NORM, OFF(qk_norm), 1 },
    { "eps", FIELD_REAL, OFF(eps), 0 },
    { "image_dim", FIELD_OPTIONAL, OFF(image_dim), 0 },
    { "added_kv_proj_dim", FIELD_OPTIONAL, OFF(added_kv_proj_dim), 0 },
    { "rope_max_seq_len", FIELD_POSITIVE, OFF(rope_max_seq_len), 1024 },
    { "pos_embed_seq_len", FIELD_OPTIONAL, OFF(pos_embed_seq_len), 0 },
};
#define N_FIELDS (sizeof fields / sizeof fields[0])
static const uint32_t default_patch[3] = { 1, 2, 2 };
#define DEFAULT_EPS 1e-6f

static wf_status_t read_field(const char *label, const field_def_t *f, json_t *v,
                              wf_wan_config_t *c, char *err, size_t err_len)
{
    char *at = (char *)c + f->offset;
    switch (f->kind) {
    case FIELD_BOOL:
        if (!json_is_boolean(v))
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' is %s, expected true or false", label,
                                  f->name, wf_json_type_name(v));
        *(bool *)(void *)at = json_is_true(v);
        return WF_OK;
    case FIELD_QK_NORM:
        if (json_is_null(v)) {
            *(bool *)(void *)at = false;
            return WF_OK;
        }
        if (!json_is_string(v) || strcmp(json_string_value(v), "rms_norm_across_heads") != 0)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field 'qk_norm' is %s, expected \"rms_norm_across_heads\" "
                                  "or null", label,
                                  json_is_string(v) ? "another string" : wf_json_type_name(v));
        *(bool *)(void *)at = true;
        return WF_OK;
    case FIELD_REAL: {
        if (!json_is_number(v))
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' is %s, expected a number", label, f->name,
                                  wf_json_type_name(v));
        double x = json_number_value(v);
        if (!isfinite(x) || x < 0 || x > 1.0)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' must be a finite number in [0, 1]", label,
                                  f->name);
        *(float *)(void *)at = (float)x;
        return WF_OK;
    }
    case FIELD_PATCH: {
        if (!json_is_array(v) || json_array_size(v) != 3)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' is %s, expected an array of 3 integers "
                                  "(frames, height, width)", label, f->name,
                                  json_is_array(v) ? "an array of another length"
                                                   : wf_json_type_name(v));
        uint32_t *u = (uint32_t *)(void *)at;
        for (size_t i = 0; i < 3; i++) {
            json_t *e = json_array_get(v, i);
            json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
            if (x < 1 || x > WF_WAN_MAX_PATCH)
                return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                      "%s: field '%s' entry %zu is not an integer in [1, %d]",
                                      label, f->name, i, WF_WAN_MAX_PATCH);
            u[i] = (uint32_t)x;
        }
        return WF_OK;
    }
    case FIELD_CHANNELS:
    case FIELD_OPTIONAL:
        if (json_is_null(v)) {
            *(uint32_t *)(void *)at = 0;
            return WF_OK;
        }
        /* fall through */
    case FIELD_POSITIVE: {
        if (!json_is_integer(v))
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' is %s, expected an integer%s", label, f->name,
                                  wf_json_type_name(v),
                                  f->kind != FIELD_POSITIVE ? " or null" : "");
        json_int_t x = json_integer_value(v);
        json_int_t hi = strcmp(f->name, "num_layers") == 0 ? WF_WAN_MAX_LAYERS : WF_WAN_MAX_DIM;
        if (x < 1 || x > hi)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "%s: field '%s' is %lld, %s %lld", label, f->name,
                                  (long long)x, x < 1 ? "must be positive, at most" : "more than",
                                  (long long)hi);
        *(uint32_t *)(void *)at = (uint32_t)x;
        return WF_OK;
    }
    }
    return WF_E_INTERNAL;
}

/* Diffusers' default of field f into c. */
static void put_default(const field_def_t *f, wf_wan_config_t *c)
{
    char *at = (char *)c + f->offset;
    switch (f->kind) {
    case FIELD_BOOL:
    case FIELD_QK_NORM:
        *(bool *)(void *)at = f->def != 0;
        break;
    case FIELD_PATCH:
        memcpy(at, default_patch, sizeof default_patch);
        break;
    case FIELD_REAL:
        *(float *)(void *)at = DEFAULT_EPS;
        break;
    case FIELD_CHANNELS:
    case FIELD_OPTIONAL:
    case FIELD_POSITIVE:
        *(uint32_t *)(void *)at = f->def;
        break;
    }
}

wf_status_t wf_wan_config_parse(const char *text, size_t len, unsigned flags,
                                const char *label, wf_wan_config_t *ret, char *err,
                                size_t err_len)
{
    if (label == NULL)
        label = "config.json";
    json_t *root = NULL;
    wf_status_t s = wf_json_config_open(text, len, label, WF_WAN_CLASS_NAME, &fields[0].name,
                                        N_FIELDS, sizeof fields[0], &root, err, err_len);
    if (s != WF_OK)
        return s;
    s = WF_E_BAD_FIELD;
    wf_wan_config_t c;
    memset(&c, 0, sizeof c);
    for (size_t i = 0; i < N_FIELDS; i++) {
        const field_def_t *f = &fields[i];
        json_t *v = json_object_get(root, f->name);
        if (v == NULL) {
            if (f->kind == FIELD_OPTIONAL)
                continue; /* diffusers' default is None: 0, as memset */
            if ((flags & WF_CONFIG_DIFFUSERS_DEFAULTS) == 0) {
                wf_errf(err, err_len, "%s: missing field '%s' (pass diffusers' defaults "
                        "to take its default)", label, f->name);
                goto out;
            }
            put_default(f, &c);
            continue;
        }
        s = read_field(label, f, v, &c, err, err_len);
        if (s != WF_OK)
            goto out;
        s = WF_E_BAD_FIELD;
    }
    if (c.out_channels == 0)
        c.out_channels = c.in_channels;
    uint32_t D = c.attention_head_dim;
    if (D % 2 != 0 || D < 6) {
        wf_errf(err, err_len,
                "%s: attention_head_dim %" PRIu32 " must be even and at least 6 (RoPE "
                "rotates pairs of channels on three axes)", label, D);
        goto out;
    }
    if (c.freq_dim % 2 != 0) {
        wf_errf(err, err_len, "%s: freq_dim %" PRIu32 " must be even (sin and cos halves)",
                label, c.freq_dim);
        goto out;
    }
    uint64_t inner = (uint64_t)c.num_attention_heads * D;
    uint64_t pe = (uint64_t)c.patch_size[0] * c.patch_size[1] * c.patch_size[2];
    if (inner > WF_WAN_MAX_DIM || 6 * inner > UINT32_MAX ||
        pe * c.in_channels > WF_WAN_MAX_DIM || pe * c.out_channels > WF_WAN_MAX_DIM) {
        wf_errf(err, err_len, "%s: num_attention_heads x attention_head_dim, or "
                "patch_size's product x the channels, is more than the %u allowed",
                label, WF_WAN_MAX_DIM);
        goto out;
    }
    /* image conditioning: the embedder (image_dim) and the added K/V
     * projections of its output (added_kv_proj_dim) come together in every
     * converted model; one without the other is a model diffusers builds
     * but cannot run (added K/V with no image tokens to project: an empty
     * attention; an embedder with no added K/V: image tokens read as text) */
    if ((c.image_dim == 0) != (c.added_kv_proj_dim == 0)) {
        wf_errf(err, err_len, "%s: image_dim and added_kv_proj_dim are set together "
                "(image-to-video: an image embedder and the added K/V projections of its "
                "tokens) or both null (text-to-video); here only %s is set", label,
                c.image_dim ? "image_dim" : "added_kv_proj_dim");
        goto out;
    }
    if (c.added_kv_proj_dim != 0 && c.added_kv_proj_dim != inner) {
        wf_errf(err, err_len, "%s: added_kv_proj_dim %" PRIu32 " must equal "
                "num_attention_heads x attention_head_dim (%" PRIu64 "): add_k_proj and "
                "add_v_proj project the image embedder's output, which is that wide",
                label, c.added_kv_proj_dim, inner);
        goto out;
    }
    if (c.pos_embed_seq_len % 2 != 0) {
        wf_errf(err, err_len, "%s: pos_embed_seq_len %" PRIu32 " must be even (the tokens "
                "of the first and the last frame's images, as many each)", label,
                c.pos_embed_seq_len);
        goto out;
    }
    c.inner_dim = (uint32_t)inner;
    c.patch_elems = (uint32_t)pe;
    c.rope_dims[1] = c.rope_dims[2] = 2 * (D / 6);
    c.rope_dims[0] = D - 2 * c.rope_dims[1];
    *ret = c;
    s = WF_OK;
out:
    json_decref(root);
    return s;
}

/* ---- tensor list -------------------------------------------------------- */

typedef struct spec_list {
    wf_tensor_spec_t *v;   /* entries, or NULL: count only */
    size_t n, cap;         /* used, allocated */
} spec_list_t;

static void add(spec_list_t *l, const char *prefix, const char *name, int rank,
                const int64_t *shape)
{
    if (l->v != NULL && l->n < l->cap) {
        wf_tensor_spec_t *s = &l->v[l->n];
        snprintf(s->name, sizeof s->name, "%s%s", prefix, name);
        s->rank = rank;
        for (int i = 0; i < rank; i++)
            s->shape[i] = shape[i];
    }
    l->n++;
}

static void vec(spec_list_t *l, const char *prefix, const char *name, int64_t n)
{
    add(l, prefix, name, 1, (const int64_t[]){ n });
}

/* nn.Linear(in, out): weight [out, in], bias [out]. */
static void linear(spec_list_t *l, const char *prefix, const char *name, int64_t in,
                   int64_t out)
{
    char w[96];
    snprintf(w, sizeof w, "%s.weight", name);
    add(l, prefix, w, 2, (const int64_t[]){ out, in });
    snprintf(w, sizeof w, "%s.bias", name);
    vec(l, prefix, w, out);
}

static void build(const wf_wan_config_t *c, spec_list_t *l)
{
    const int64_t C = c->inner_dim;
    add(l, "", "scale_shift_table", 3, (const int64_t[]){ 1, 2, C });
    add(l, "", "patch_embedding.weight", 5,
        (const int64_t[]){ C, c->in_channels, c->patch_size[0], c->patch_size[1],
                           c->patch_size[2] });
    vec(l, "", "patch_embedding.bias", C);
    linear(l, "condition_embedder.", "time_embedder.linear_1", c->freq_dim, C);
    linear(l, "condition_embedder.", "time_embedder.linear_2", C, C);
    linear(l, "condition_embedder.", "time_proj", C, 6 * C);
    linear(l, "condition_embedder.", "text_embedder.linear_1", c->text_dim, C);
    linear(l, "condition_embedder.", "text_embedder.linear_2", C, C);
    if (c->image_dim != 0) {
        /* WanImageEmbedding: (pos_embed +) LayerNorm, FeedForward(mult 1,
         * GELU), LayerNorm; both norms with affine */
        const int64_t I = c->image_dim;
        const char *ie = "condition_embedder.image_embedder.";
        if (c->pos_embed_seq_len != 0)
            add(l, ie, "pos_embed", 3, (const int64_t[]){ 1, c->pos_embed_seq_len, I });
        vec(l, ie, "norm1.weight", I);
        vec(l, ie, "norm1.bias", I);
        linear(l, ie, "ff.net.0.proj", I, I);
        linear(l, ie, "ff.net.2", I, C);
        vec(l, ie, "norm2.weight", C);
        vec(l, ie, "norm2.bias", C);
    }
    char p[48];
    for (uint32_t b = 0; b < c->num_layers; b++) {
        snprintf(p, sizeof p, "blocks.%" PRIu32 ".", b);
        add(l, p, "scale_shift_table", 3, (const int64_t[]){ 1, 6, C });
        for (int a = 1; a <= 2; a++) {
            char m[32];
            snprintf(m, sizeof m, "attn%d.to_q", a);
            linear(l, p, m, C, C);
            snprintf(m, sizeof m, "attn%d.to_k", a);
            linear(l, p, m, C, C);
            snprintf(m, sizeof m, "attn%d.to_v", a);
            linear(l, p, m, C, C);
            snprintf(m, sizeof m, "attn%d.to_out.0", a);
            linear(l, p, m, C, C);
            snprintf(m, sizeof m, "attn%d.norm_q.weight", a);  /* RMSNorm over all heads */
            vec(l, p, m, C);
            snprintf(m, sizeof m, "attn%d.norm_k.weight", a);
            vec(l, p, m, C);
        }
        if (c->added_kv_proj_dim != 0) {                     /* the image tokens' K / V */
            linear(l, p, "attn2.add_k_proj", c->added_kv_proj_dim, C);
            linear(l, p, "attn2.add_v_proj", c->added_kv_proj_dim, C);
            vec(l, p, "attn2.norm_added_k.weight", C);       /* RMSNorm over all heads */
        }
        if (c->cross_attn_norm) {                            /* LayerNorm with affine */
            vec(l, p, "norm2.weight", C);
            vec(l, p, "norm2.bias", C);
        }
        linear(l, p, "ffn.net.0.proj", C, c->ffn_dim);        /* GELU(tanh) projection */
        linear(l, p, "ffn.net.2", c->ffn_dim, C);
    }
    linear(l, "", "proj_out", C, (int64_t)c->out_channels * c->patch_elems);
}

wf_status_t wf_wan_expected_tensors(const wf_wan_config_t *cfg, wf_tensor_spec_t **ret_specs,
                                    size_t *ret_n, char *err, size_t err_len)
{
    spec_list_t l = { NULL, 0, 0 };
    build(cfg, &l);
    l.cap = l.n;
    l.n = 0;
    l.v = calloc(l.cap ? l.cap : 1, sizeof *l.v);
    if (l.v == NULL)
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len,
                              "out of memory for %zu tensor specs", l.cap);
    build(cfg, &l);
    *ret_specs = l.v;
    *ret_n = l.n;
    return WF_OK;
}
