/* schema.c — a model's config entries and forward schema (weft.h), and
 * binding a forward's tensors to a schema (proto.h wf_schema_bind).
 * Shared by libweft and weftd: both judge tensors from the same data. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "weft.h"

int64_t wf_model_config_get(const wf_model_config_t *c, const char *key, uint32_t i,
                            int64_t dflt)
{
    if (!c || !key)
        return dflt;
    for (uint32_t j = 0; j < c->n && j < WF_MODEL_CONFIG_MAX; j++)
        if (strcmp(c->e[j].key, key) == 0)
            return i < c->e[j].n && i < WF_MODEL_CONFIG_VALUES ? c->e[j].v[i] : dflt;
    return dflt;
}

const wf_schema_tensor_t *wf_schema_find(const wf_schema_tensor_t *t, uint32_t n,
                                         const char *name)
{
    for (uint32_t i = 0; t && name && i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

int64_t wf_schema_sym(const wf_schema_binding_t *b, const char *sym)
{
    for (uint32_t i = 0; i < b->n_syms; i++)
        if (strcmp(b->sym[i], sym) == 0)
            return b->val[i];
    return -1;
}

/* "(B, S_img, in_channels)" */
static void dims_text(const wf_schema_tensor_t *s, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "(");
    for (uint32_t d = 0; d < s->rank && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", d ? ", " : "",
                              s->dim[d].sym[0] ? s->dim[d].sym : "?");
    if (o < len)
        snprintf(buf + o, len - o, ")");
}

/* The names of a schema's inputs, "a, b, c (optional)". */
static void names_text(const wf_model_schema_t *s, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < s->n_inputs && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s%s", i ? ", " : "",
                              s->inputs[i].name,
                              s->inputs[i].optional ? " (optional)" : "");
}

wf_status_t wf_schema_bind(const wf_model_schema_t *s, const char *model,
                           const wf_tensor_desc_t *t, uint32_t n,
                           wf_schema_binding_t *b, char *err, size_t err_len)
{
    char txt[256];
    memset(b, 0, sizeof *b);
    for (uint32_t i = 0; i < n; i++) {
        if (!wf_schema_find(s->inputs, s->n_inputs, t[i].name)) {
            names_text(s, txt, sizeof txt);
            snprintf(err, err_len, "tensors[%u]: unexpected tensor \"%s\" (model '%s' "
                     "takes %s)", i, t[i].name, model, txt);
            return WF_E_BAD_ARGUMENT;
        }
    }
    for (uint32_t k = 0; k < s->n_inputs; k++) {
        const wf_schema_tensor_t *si = &s->inputs[k];
        b->in[k] = -1;
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(t[i].name, si->name) == 0)
                b->in[k] = (int)i;
        if (b->in[k] < 0) {
            if (si->optional)
                continue;
            snprintf(err, err_len, "tensors: no tensor named \"%s\" (model '%s' needs it)",
                     si->name, model);
            return WF_E_BAD_FIELD;
        }
        const wf_tensor_desc_t *x = &t[b->in[k]];
        if (!(si->dtypes & (1u << x->dtype))) {
            snprintf(err, err_len, "%s: dtype %s is not accepted", si->name,
                     wf_dtype_name(x->dtype));
            return WF_E_BAD_DTYPE;
        }
        if ((uint32_t)x->rank != si->rank) {
            dims_text(si, txt, sizeof txt);
            snprintf(err, err_len, "%s: rank must be %u %s, got %d", si->name, si->rank,
                     txt, x->rank);
            return WF_E_BAD_ARGUMENT;
        }
        for (uint32_t d = 0; d < si->rank; d++) {
            const wf_schema_dim_t *sd = &si->dim[d];
            int64_t got = x->shape[d];
            if (sd->size > 0) {
                if (got != sd->size) {
                    snprintf(err, err_len, "%s: dim %u (%s) must be %" PRId64 " for "
                             "model '%s', got %" PRId64, si->name, d, sd->sym, sd->size,
                             model, got);
                    return WF_E_BAD_ARGUMENT;
                }
                continue;
            }
            uint32_t j = 0;
            while (j < b->n_syms && strcmp(b->sym[j], sd->sym) != 0)
                j++;
            if (j < b->n_syms) {
                if (b->val[j] != got) {
                    snprintf(err, err_len, "%s: dim %u (%s) is %" PRId64 ", but %s "
                             "gave %s = %" PRId64, si->name, d, sd->sym, got,
                             b->who[j], sd->sym, b->val[j]);
                    return WF_E_BAD_ARGUMENT;
                }
                continue;
            }
            if (j >= WF_SCHEMA_MAX_SYMS) {
                snprintf(err, err_len, "schema of model '%s' names more than %d sizes",
                         model, WF_SCHEMA_MAX_SYMS);
                return WF_E_INTERNAL;
            }
            snprintf(b->sym[j], sizeof b->sym[j], "%s", sd->sym);
            snprintf(b->who[j], sizeof b->who[j], "%s", si->name);
            b->val[j] = got;
            b->n_syms++;
        }
    }
    return WF_OK;
}

wf_status_t wf_schema_output(const wf_model_schema_t *s, uint32_t i,
                             const wf_schema_binding_t *b, wf_dtype_t dtype,
                             uint32_t frame, wf_tensor_desc_t *out, char *err,
                             size_t err_len)
{
    const wf_schema_tensor_t *so = &s->outputs[i];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", so->name);
    out->dtype = dtype;
    out->rank = (int)so->rank;
    out->frame = frame;
    for (uint32_t d = 0; d < so->rank; d++) {
        int64_t v = so->dim[d].size > 0 ? so->dim[d].size : wf_schema_sym(b, so->dim[d].sym);
        if (v <= 0) {
            snprintf(err, err_len, "output %s: size %s is not given by any input",
                     so->name, so->dim[d].sym);
            return WF_E_INTERNAL;
        }
        out->shape[d] = v;
    }
    if (wf_tensor_desc_finish(out) != WF_OK) {
        snprintf(err, err_len, "output %s: shape overflows", so->name);
        return WF_E_BAD_SHAPE;
    }
    return WF_OK;
}
