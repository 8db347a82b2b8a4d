/* family.h — model families: the table of the architectures weft serves,
 * keyed by diffusers' `_class_name` in config.json.
 *
 * This half of a family is pure: it reads files and describes the model
 * (config, the tensors of a checkpoint, the default tp plan, the
 * forward's inputs and outputs, its flops), and is linked by weftd and
 * weftctl alike. The other half, the forward on a rank and the shards, is
 * the daemon's (daemon/models/family_run.h). Everything else (checkpoint
 * reading, host copy, sharding, re-shard, loading in a cluster,
 * admission, scheduling, replies) is generic and reaches a family only
 * through these tables (FAMILIES.md: what a family supplies, the
 * checklist of a new one). */
#ifndef WF_FAMILY_H
#define WF_FAMILY_H

#include <stdalign.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model_root.h"
#include "proto.h"
#include "safetensors.h"
#include "tp_plan.h"
#include "weft.h"

/* Largest parsed config of any family (each family's static check). */
#define WF_FAMILY_CONFIG_BYTES 512
/* Cap on config.json. */
#define WF_MODEL_CONFIG_MAX_BYTES (1u << 20)
/* Flags of wf_model_cfg_parse: a missing field takes diffusers' default. */
#define WF_CONFIG_DIFFUSERS_DEFAULTS 0x1u

/* One tensor a checkpoint must hold: diffusers' state_dict key and shape
 * ([out, in] for a linear's weight, [n] for a vector; up to
 * WF_TENSOR_MAX_DIMS dims for the rest: a Conv3d patch embedding's
 * weight [out, in, kt, kh, kw], a modulation table [1, 6, dim]). Only
 * rank-2 weights are linear layers a tp plan may cut. */
#define WF_TENSOR_SPEC_NAME_MAX 128
#define WF_TENSOR_MAX_DIMS 5
typedef struct wf_tensor_spec {
    char name[WF_TENSOR_SPEC_NAME_MAX];
    int rank;                           /* 1 .. WF_TENSOR_MAX_DIMS */
    int64_t shape[WF_TENSOR_MAX_DIMS];  /* dims past rank: 0 */
} wf_tensor_spec_t;

typedef struct wf_family wf_family_t;

/* A diffusers class of a family's models that weft does not serve, and
 * why (for the refusal's message). */
typedef struct wf_unserved_class {
    const char *class_name;     /* diffusers' _class_name */
    const char *why;            /* "Wan VACE: control blocks beside the ..." */
} wf_unserved_class_t;

/* A parsed, validated config of some family: the family and its own
 * config struct, opaque here. */
typedef struct wf_model_cfg {
    const wf_family_t *fam;
    alignas(16) unsigned char b[WF_FAMILY_CONFIG_BYTES];
} wf_model_cfg_t;

struct wf_family {
    const char *name;           /* list_models' family: "flux" */
    const char *class_name;     /* diffusers' _class_name */
    /* (optional) Related classes not served, named in the refusal of a
     * config of one of them; ends with a NULL class_name. */
    const wf_unserved_class_t *unserved;
    /* Parse and validate config.json text (label names it in messages;
     * flags: WF_CONFIG_*) into the family's config struct at cfg.
     * WF_E_MALFORMED (not JSON) or WF_E_BAD_FIELD with a message. */
    wf_status_t (*parse)(const char *json, size_t len, unsigned flags,
                         const char *label, void *cfg, char *err, size_t err_len);
    /* (optional) Whether checkpoint tensor `name`, not one of
     * expected_tensors, is one diffusers skips at load
     * (_keys_to_ignore_on_load_unexpected): such a tensor is allowed in a
     * checkpoint, never read and not counted. */
    bool (*ignored_tensor)(const void *cfg, const char *name);
    /* The tensors of a checkpoint with this config, in diffusers'
     * state_dict order (*ret_specs malloc'ed). */
    wf_status_t (*expected_tensors)(const void *cfg, wf_tensor_spec_t **ret_specs,
                                    size_t *ret_n, char *err, size_t err_len);
    /* The default tp plan (diffusers' plan for the class). */
    void (*default_plan)(const void *cfg, wf_tp_plan_t *ret);
    /* The config as list_models reports it (diffusers' names). */
    void (*public_config)(const void *cfg, wf_model_config_t *ret);
    /* The forward's inputs and outputs for this config. */
    void (*schema)(const void *cfg, wf_model_schema_t *ret);
    /* Estimated flops of one forward of bound inputs (saturating). */
    uint64_t (*flops)(const void *cfg, uint64_t params, const wf_schema_binding_t *b);
};

/* The family of a diffusers class name, or NULL. */
const wf_family_t *wf_family_by_class(const char *class_name);
/* The family named `name` ("flux"), or NULL. */
const wf_family_t *wf_family_by_name(const char *name);
/* "FluxTransformer2DModel, ..." : every class served, for messages. */
void wf_family_classes(char *buf, size_t len);

/* Parse config.json text: its _class_name picks the family, which
 * parses the rest. A class weft does not serve is WF_E_BAD_FIELD naming
 * the classes it does (and, for a family's unserved class, that class
 * and why). */
wf_status_t wf_model_cfg_parse(const char *json, size_t len, unsigned flags,
                               const char *label, wf_model_cfg_t *ret,
                               char *err, size_t err_len);

/* Read `rel` (a config.json) beneath the model root and parse it. */
wf_status_t wf_model_cfg_load(int root_fd, const char *rel, wf_resolve_mode_t mode,
                              unsigned flags, wf_model_cfg_t *ret, char *err,
                              size_t err_len);

/* Check that checkpoint `ck` holds exactly the tensors of cfg with their
 * shapes, besides those the family ignores (wf_model_tensor_ignored).
 * WF_E_MALFORMED (a tensor missing or unexpected) or WF_E_BAD_SHAPE,
 * naming the first problem and counting the rest. */
wf_status_t wf_model_check_checkpoint(const wf_model_cfg_t *cfg,
                                      const wf_checkpoint_t *ck, char *err,
                                      size_t err_len);

/* Whether checkpoint tensor `name` is one cfg's family ignores
 * (wf_family_t.ignored_tensor). */
bool wf_model_tensor_ignored(const wf_model_cfg_t *cfg, const char *name);

/* The family's config struct of a model config (for the family's own
 * code, which knows its type). */
static inline const void *wf_model_cfg_data(const wf_model_cfg_t *c)
{
    return c->b;
}

#endif /* WF_FAMILY_H */
