/* family.c — the table of model families and what is generic about
 * their configs and checkpoints (family.h). */
#include "family.h"
#include "errf.h"
#include "json_err.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const wf_family_t wf_flux_family;
extern const wf_family_t wf_wan_family;

/* Every family served, in the order messages list them. A new family
 * adds its line here and in daemon/models/family_run.c. */
static const wf_family_t *const families[] = {
    &wf_flux_family,
    &wf_wan_family,
};
#define N_FAMILIES (sizeof families / sizeof families[0])

const wf_family_t *wf_family_by_class(const char *class_name)
{
    for (size_t i = 0; class_name && i < N_FAMILIES; i++)
        if (strcmp(families[i]->class_name, class_name) == 0)
            return families[i];
    return NULL;
}

const wf_family_t *wf_family_by_name(const char *name)
{
    for (size_t i = 0; name && i < N_FAMILIES; i++)
        if (strcmp(families[i]->name, name) == 0)
            return families[i];
    return NULL;
}

/* The entry of a family's unserved class `class_name`, or NULL. */
static const wf_unserved_class_t *unserved_class(const char *class_name)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        for (const wf_unserved_class_t *u = families[i]->unserved; u && u->class_name; u++)
            if (strcmp(u->class_name, class_name) == 0)
                return u;
    return NULL;
}

void wf_family_classes(char *buf, size_t len)
{
    size_t o = 0;
    if (len)
        buf[0] = '\0';
    for (size_t i = 0; i < N_FAMILIES && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s\"%s\"", i ? ", " : "",
                              families[i]->class_name);
}

wf_status_t wf_model_cfg_parse(const char *json, size_t len, unsigned flags,
                               const char *label, wf_model_cfg_t *ret,
                               char *err, size_t err_len)
{
    memset(ret, 0, sizeof *ret);
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char where[128];
        wf_errf(err, err_len, "%s: JSON invalid %s", label,
                wf_json_error_where(&jerr, where, sizeof where));
        return WF_E_MALFORMED; /* not a config: PROTOCOL.md 12.2 */
    }
    char served[256];
    wf_family_classes(served, sizeof served);
    wf_status_t s = WF_E_BAD_FIELD;
    json_t *cls = json_is_object(root) ? json_object_get(root, "_class_name") : NULL;
    if (!json_is_object(root)) {
        wf_errf(err, err_len, "%s: not a JSON object", label);
        s = WF_E_MALFORMED;
    } else if (!cls || !json_is_string(cls)) {
        wf_errf(err, err_len, "%s: '_class_name' is %s, expected one of %s", label,
                cls ? "not a string" : "missing", served);
    } else if (!(ret->fam = wf_family_by_class(json_string_value(cls)))) {
        const wf_unserved_class_t *u = unserved_class(json_string_value(cls));
        /* the value is not echoed: a message never quotes file content
         * (a known class is named from the table) */
        if (u)
            wf_errf(err, err_len, "%s: model class ('_class_name') %s is not supported "
                    "(%s; weft serves %s)", label, u->class_name, u->why, served);
        else
            wf_errf(err, err_len, "%s: model class ('_class_name') is not supported "
                    "(weft serves %s)", label, served);
    } else {
        s = ret->fam->parse(json, len, flags, label, ret->b, err, err_len);
    }
    json_decref(root);
    if (s != WF_OK)
        ret->fam = NULL;
    return s;
}

wf_status_t wf_model_cfg_load(int root_fd, const char *rel, wf_resolve_mode_t mode,
                              unsigned flags, wf_model_cfg_t *ret, char *err,
                              size_t err_len)
{
    char *text = NULL;
    size_t len = 0;
    wf_status_t s = wf_model_read_file(root_fd, rel, mode, WF_MODEL_CONFIG_MAX_BYTES,
                                       &text, &len, err, err_len);
    if (s != WF_OK)
        return s;
    s = wf_model_cfg_parse(text, len, flags, rel, ret, err, err_len);
    free(text);
    return s;
}

bool wf_model_tensor_ignored(const wf_model_cfg_t *cfg, const char *name)
{
    return cfg->fam->ignored_tensor != NULL && cfg->fam->ignored_tensor(cfg->b, name);
}

static int cmp_spec_name(const void *a, const void *b)
{
    return strcmp(((const wf_tensor_spec_t *)a)->name,
                  ((const wf_tensor_spec_t *)b)->name);
}

static void dims_text(int rank, const int64_t *shape, char *buf, size_t len)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

wf_status_t wf_model_check_checkpoint(const wf_model_cfg_t *cfg,
                                      const wf_checkpoint_t *ck, char *err,
                                      size_t err_len)
{
    wf_tensor_spec_t *specs = NULL;
    size_t n = 0;
    wf_status_t s = cfg->fam->expected_tensors(cfg->b, &specs, &n, err, err_len);
    if (s != WF_OK)
        return s;
    size_t problems = 0;
    s = WF_OK;
    for (size_t i = 0; i < n; i++) {
        const wf_tensor_spec_t *sp = &specs[i];
        wf_ckpt_ref_t r;
        char want[64], have[160];
        dims_text(sp->rank, sp->shape, want, sizeof want);
        if (!wf_checkpoint_find(ck, sp->name, &r)) {
            if (problems++ == 0) {
                wf_errf(err, err_len, "checkpoint lacks tensor '%s' (expected shape %s)",
                        sp->name, want);
                s = WF_E_MALFORMED;
            }
            continue;
        }
        bool same = r.tensor->rank == sp->rank;
        for (int k = 0; same && k < sp->rank; k++)
            same = r.tensor->shape[k] == sp->shape[k];
        if (!same) {
            if (problems++ == 0) {
                dims_text(r.tensor->rank, r.tensor->shape, have, sizeof have);
                wf_errf(err, err_len,
                        "tensor '%s' in %s has shape %s, expected %s for this config",
                        sp->name, wf_safetensors_path(r.file), have, want);
                s = WF_E_BAD_SHAPE;
            }
        }
    }
    /* every checkpoint tensor expected: compare the name-ordered lists */
    qsort(specs, n, sizeof *specs, cmp_spec_name);
    for (size_t i = 0; i < wf_checkpoint_count(ck); i++) {
        wf_ckpt_ref_t r = wf_checkpoint_at(ck, i);
        wf_tensor_spec_t key;
        snprintf(key.name, sizeof key.name, "%s", r.tensor->name);
        if ((strlen(r.tensor->name) >= sizeof key.name
             || bsearch(&key, specs, n, sizeof *specs, cmp_spec_name) == NULL)
            && !wf_model_tensor_ignored(cfg, r.tensor->name)) {
            if (problems++ == 0) {
                /* the name is the file's: escaped (control bytes) */
                char q[160];
                wf_errf(err, err_len,
                        "checkpoint has unexpected tensor '%s' in %s (not part of %s with this config)",
                        wf_escape(q, sizeof q, r.tensor->name, strlen(r.tensor->name),
                                  WF_ESC_ASCII),
                        wf_safetensors_path(r.file), cfg->fam->class_name);
                s = WF_E_MALFORMED;
            }
        }
    }
    free(specs);
    if (problems > 1 && err != NULL && err_len > 0) {
        size_t o = strlen(err);
        if (o < err_len)
            snprintf(err + o, err_len - o, " (and %zu more problems)", problems - 1);
    }
    return s;
}
