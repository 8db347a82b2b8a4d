/* flux_config.c — FluxTransformer2DModel config.json and its tensor list
 * (see flux_config.h).
 *
 * The fields are one table (name, kind, default); the tensor list is the
 * module table's (flux_modules.h) tensors, in state_dict order.
 */
#include "flux_config.h"
#include "flux_modules.h"
#include "errf.h"
#include "json_err.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- config.json -------------------------------------------------------- */

typedef enum field_kind {
    FIELD_POSITIVE,   /* integer in [1, WF_FLUX_MAX_DIM] */
    FIELD_LAYERS,     /* integer in [0, WF_FLUX_MAX_LAYERS] */
    FIELD_OPTIONAL,   /* null / absent -> 0 (filled later), else FIELD_POSITIVE */
    FIELD_BOOL,       /* true / false */
    FIELD_AXES        /* array of 1..WF_FLUX_MAX_AXES even positive integers */
} field_kind_t;

typedef struct field_def {
    const char *name;        /* key in config.json */
    field_kind_t kind;       /* how it is read */
    size_t offset;           /* of its uint32_t / bool in wf_flux_config_t */
    uint32_t def;            /* diffusers' default (FIELD_AXES: see below) */
} field_def_t;

#define OFF(f) offsetof(wf_flux_config_t, f)

static const field_def_t fields[] = {
    { "patch_size", FIELD_POSITIVE, OFF(patch_size), 1 },
    { "in_channels", FIELD_POSITIVE, OFF(in_channels), 64 },
    { "out_channels", FIELD_OPTIONAL, OFF(out_channels), 0 },
    { "num_layers", FIELD_LAYERS, OFF(num_layers), 19 },
    { "num_single_layers", FIELD_LAYERS, OFF(num_single_layers), 38 },
    { "attention_head_dim", FIELD_POSITIVE, OFF(attention_head_dim), 128 },
    { "num_attention_heads", FIELD_POSITIVE, OFF(num_attention_heads), 24 },
    { "joint_attention_dim", FIELD_POSITIVE, OFF(joint_attention_dim), 4096 },
    { "pooled_projection_dim", FIELD_POSITIVE, OFF(pooled_projection_dim), 768 },
    { "guidance_embeds", FIELD_BOOL, OFF(guidance_embeds), 0 },
    { "axes_dims_rope", FIELD_AXES, OFF(axes_dims_rope), 0 },
};
#define N_FIELDS (sizeof fields / sizeof fields[0])
static const uint32_t default_axes[3] = { 16, 56, 56 };

static wf_status_t read_field(const char *label, const field_def_t *f, json_t *v,
                              wf_flux_config_t *c, char *err, size_t err_len)
{
    uint32_t *u = (uint32_t *)((char *)c + f->offset);
    switch (f->kind) {
    case FIELD_BOOL:
        if (!json_is_boolean(v)) {
            wf_errf(err, err_len, "%s: field '%s' is %s, expected true or false",
                    label, f->name, wf_json_type_name(v));
            return WF_E_BAD_FIELD;
        }
        *(bool *)((char *)c + f->offset) = json_is_true(v);
        return WF_OK;
    case FIELD_OPTIONAL:
        if (json_is_null(v)) {
            *u = 0;
            return WF_OK;
        }
        /* fall through */
    case FIELD_POSITIVE:
    case FIELD_LAYERS: {
        if (!json_is_integer(v)) {
            wf_errf(err, err_len, "%s: field '%s' is %s, expected an integer%s",
                    label, f->name, wf_json_type_name(v),
                    f->kind == FIELD_OPTIONAL ? " or null" : "");
            return WF_E_BAD_FIELD;
        }
        json_int_t x = json_integer_value(v);
        json_int_t lo = f->kind == FIELD_LAYERS ? 0 : 1;
        json_int_t hi = f->kind == FIELD_LAYERS ? WF_FLUX_MAX_LAYERS : WF_FLUX_MAX_DIM;
        if (x < lo || x > hi) {
            wf_errf(err, err_len, "%s: field '%s' is %lld, %s", label, f->name,
                    (long long)x,
                    x < lo ? (lo == 1 ? "must be positive" : "must not be negative")
                           : (f->kind == FIELD_LAYERS ? "more than the 4096 blocks allowed"
                                                      : "more than the 1048576 allowed"));
            return WF_E_BAD_FIELD;
        }
        *u = (uint32_t)x;
        return WF_OK;
    }
    case FIELD_AXES: {
        if (!json_is_array(v)) {
            wf_errf(err, err_len, "%s: field '%s' is %s, expected an array of integers",
                    label, f->name, wf_json_type_name(v));
            return WF_E_BAD_FIELD;
        }
        size_t n = json_array_size(v);
        if (n < 1 || n > WF_FLUX_MAX_AXES) {
            wf_errf(err, err_len, "%s: field '%s' has %zu axes, expected 1 to %d",
                    label, f->name, n, WF_FLUX_MAX_AXES);
            return WF_E_BAD_FIELD;
        }
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(v, i);
            json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
            if (x < 2 || x > WF_FLUX_MAX_DIM || x % 2 != 0) {
                wf_errf(err, err_len,
                        "%s: field '%s' entry %zu is not an even positive integer"
                        " (RoPE rotates pairs of channels)",
                        label, f->name, i);
                return WF_E_BAD_FIELD;
            }
            c->axes_dims_rope[i] = (uint32_t)x;
        }
        c->n_axes = (uint32_t)n;
        return WF_OK;
    }
    }
    return WF_E_INTERNAL;
}

wf_status_t wf_flux_config_parse(const char *text, size_t len, unsigned flags,
                                 const char *label, wf_flux_config_t *ret,
                                 char *err, size_t err_len)
{
    if (label == NULL)
        label = "config.json";
    json_t *root = NULL;
    wf_status_t s = wf_json_config_open(text, len, label, WF_FLUX_CLASS_NAME,
                                        &fields[0].name, N_FIELDS, sizeof fields[0], &root,
                                        err, err_len);
    if (s != WF_OK)
        return s;
    s = WF_E_BAD_FIELD;
    wf_flux_config_t c;
    memset(&c, 0, sizeof c);
    bool axes_defaulted = false;

    for (size_t i = 0; i < N_FIELDS; i++) {
        const field_def_t *f = &fields[i];
        json_t *v = json_object_get(root, f->name);
        if (v == NULL) {
            if (f->kind == FIELD_OPTIONAL)
                continue; /* out_channels: FLUX.1's own configs omit it */
            if (f->kind == FIELD_AXES) {
                /* FLUX.1's configs predate this field too: diffusers'
                 * default is FLUX.1's RoPE, and the sum check below still
                 * guards any other head size */
                memcpy(c.axes_dims_rope, default_axes, sizeof default_axes);
                c.n_axes = 3;
                axes_defaulted = true;
                continue;
            }
            if ((flags & WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS) == 0) {
                if (f->kind == FIELD_BOOL)
                    wf_errf(err, err_len, "%s: missing field '%s' (diffusers would use false)",
                            label, f->name);
                else
                    wf_errf(err, err_len, "%s: missing field '%s' (diffusers would use %" PRIu32 ")",
                            label, f->name, f->def);
                goto out;
            }
            if (f->kind == FIELD_BOOL) {
                *(bool *)((char *)&c + f->offset) = f->def != 0;
            } else {
                *(uint32_t *)((char *)&c + f->offset) = f->def;
            }
            continue;
        }
        s = read_field(label, f, v, &c, err, err_len);
        if (s != WF_OK)
            goto out;
        s = WF_E_BAD_FIELD;
    }

    if (c.out_channels == 0)
        c.out_channels = c.in_channels;
    if (c.num_layers + c.num_single_layers == 0) {
        wf_errf(err, err_len, "%s: num_layers and num_single_layers are both 0", label);
        goto out;
    }
    uint64_t inner = (uint64_t)c.num_attention_heads * c.attention_head_dim;
    if (inner > WF_FLUX_MAX_DIM) {
        wf_errf(err, err_len,
                "%s: num_attention_heads %" PRIu32 " x attention_head_dim %" PRIu32
                " = %" PRIu64 " is more than the 1048576 allowed",
                label, c.num_attention_heads, c.attention_head_dim, inner);
        goto out;
    }
    uint64_t sum = 0;
    for (uint32_t a = 0; a < c.n_axes; a++)
        sum += c.axes_dims_rope[a];
    if (sum != c.attention_head_dim) {
        char axes[128];
        size_t o = 0;
        for (uint32_t a = 0; a < c.n_axes && o < sizeof axes; a++)
            o += (size_t)snprintf(axes + o, sizeof axes - o, "%s%" PRIu32, a ? ", " : "",
                                  c.axes_dims_rope[a]);
        wf_errf(err, err_len,
                "%s: axes_dims_rope [%s]%s sum to %" PRIu64 ", not attention_head_dim %" PRIu32,
                label, axes, axes_defaulted ? " (diffusers' default: the field is missing)" : "",
                sum, c.attention_head_dim);
        goto out;
    }
    if ((uint64_t)c.patch_size * c.patch_size * c.out_channels > WF_FLUX_MAX_DIM) {
        wf_errf(err, err_len, "%s: patch_size^2 x out_channels is more than the 1048576 allowed",
                label);
        goto out;
    }
    c.inner_dim = (uint32_t)inner;
    c.mlp_hidden_dim = WF_FLUX_MLP_RATIO * c.inner_dim;
    *ret = c;
    s = WF_OK;
out:
    json_decref(root);
    return s;
}

wf_status_t wf_flux_config_load(int root_fd, const char *rel, wf_resolve_mode_t mode,
                                unsigned flags, wf_flux_config_t *ret,
                                char *err, size_t err_len)
{
    char *text = NULL;
    size_t len = 0;
    wf_status_t s = wf_model_read_file(root_fd, rel, mode, WF_FLUX_CONFIG_MAX_BYTES,
                                       &text, &len, err, err_len);
    if (s != WF_OK)
        return s;
    s = wf_flux_config_parse(text, len, flags, rel, ret, err, err_len);
    free(text);
    return s;
}

/* ---- tensor list -------------------------------------------------------- */

typedef struct spec_list {
    wf_tensor_spec_t *v;   /* entries, or NULL to count only */
    size_t n, cap;         /* used, allocated (cap is exact) */
} spec_list_t;

static void add(spec_list_t *l, const char *module, const char *suffix, int rank,
                int64_t d0, int64_t d1)
{
    if (l->v != NULL && l->n < l->cap) {
        wf_tensor_spec_t *s = &l->v[l->n];
        snprintf(s->name, sizeof s->name, "%s%s", module, suffix);
        s->rank = rank;
        s->shape[0] = d0;
        s->shape[1] = rank == 2 ? d1 : 0;
    }
    l->n++;
}

/* A module's tensors: nn.Linear(in, out) weight [out, in] and bias
 * [out]; an RMSNorm weight [out]. */
static wf_status_t add_module(void *arg, const wf_flux_module_t *m)
{
    spec_list_t *l = arg;
    if (m->kind == WF_FLUX_NORM) {
        add(l, m->name, ".weight", 1, m->out, 0);
        return WF_OK;
    }
    add(l, m->name, ".weight", 2, m->out, m->in);
    if (m->kind == WF_FLUX_LINEAR)
        add(l, m->name, ".bias", 1, m->out, 0);
    return WF_OK;
}

size_t wf_flux_tensor_count(const wf_flux_config_t *cfg)
{
    spec_list_t l = { NULL, 0, 0 };
    (void)wf_flux_modules_walk(cfg, add_module, &l);
    return l.n;
}

wf_status_t wf_flux_expected_tensors(const wf_flux_config_t *cfg,
                                     wf_tensor_spec_t **ret_specs,
                                     size_t *ret_n, char *err, size_t err_len)
{
    spec_list_t l = { NULL, 0, 0 };
    l.cap = wf_flux_tensor_count(cfg);
    l.v = calloc(l.cap, sizeof *l.v);
    if (l.v == NULL) {
        wf_errf(err, err_len, "out of memory for %zu tensor specs", l.cap);
        return WF_E_NO_MEMORY;
    }
    (void)wf_flux_modules_walk(cfg, add_module, &l);
    *ret_specs = l.v;
    *ret_n = l.n;
    return WF_OK;
}
