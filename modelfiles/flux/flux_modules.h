/* flux_modules.h — the modules of diffusers' FluxTransformer2DModel, as
 * one table: every module's name, kind, shape (from the config), its
 * style in the default tp plan, and a stable id. The checkpoint's tensor
 * list (flux_config.c), the default tp plan (flux_family.c) and the
 * daemon's shard walk (daemon/models/flux/flux_shard.c, which maps an id
 * to its slot of a shard) are all read off this table, so the three
 * cannot disagree.
 *
 * The module tree, in diffusers' state_dict order:
 *   time_text_embed.{timestep_embedder, guidance_embedder?, text_embedder}
 *   context_embedder, x_embedder,
 *   transformer_blocks.N.{norm1, norm1_context, attn, ff, ff_context},
 *   single_transformer_blocks.N.{norm, proj_mlp, proj_out, attn},
 *   norm_out, proj_out.
 *
 * Pure: no allocation, no logging.
 */
#ifndef WF_FLUX_MODULES_H
#define WF_FLUX_MODULES_H

#include <stdbool.h>
#include <stdint.h>

#include "flux_config.h"
#include "tp_plan.h"
#include "weft.h"

/* Which part of the model a module belongs to. */
typedef enum wf_flux_scope {
    WF_FLUX_SCOPE_MODEL = 0,  /* once per model: "<name>" */
    WF_FLUX_SCOPE_DOUBLE = 1, /* per double-stream block: "transformer_blocks.<b>.<name>" */
    WF_FLUX_SCOPE_SINGLE = 2  /* per single-stream block: "single_transformer_blocks.<b>.<name>" */
} wf_flux_scope_t;

/* What a module's tensors are. */
typedef enum wf_flux_module_kind {
    WF_FLUX_LINEAR = 0,        /* nn.Linear: weight [out, in], bias [out] */
    WF_FLUX_LINEAR_NO_BIAS = 1, /* nn.Linear(bias=False): weight [out, in] */
    WF_FLUX_NORM = 2           /* an RMSNorm weight [out] (never sharded) */
} wf_flux_module_kind_t;

/* Stable ids, one per row of the table (a block's modules share the id
 * across blocks; the block index says which). */
typedef enum wf_flux_module_id {
    WF_FLUX_TIME_L1 = 0,           /* time_text_embed.timestep_embedder.linear_1 */
    WF_FLUX_TIME_L2 = 1,           /* ...timestep_embedder.linear_2 */
    WF_FLUX_GUIDANCE_L1 = 2,       /* ...guidance_embedder.linear_1 (guidance models) */
    WF_FLUX_GUIDANCE_L2 = 3,       /* ...guidance_embedder.linear_2 */
    WF_FLUX_TEXT_L1 = 4,           /* ...text_embedder.linear_1 */
    WF_FLUX_TEXT_L2 = 5,           /* ...text_embedder.linear_2 */
    WF_FLUX_CONTEXT_EMBEDDER = 6,
    WF_FLUX_X_EMBEDDER = 7,
    WF_FLUX_D_NORM1 = 8,           /* double blocks */
    WF_FLUX_D_NORM1_CONTEXT = 9,
    WF_FLUX_D_NORM_Q = 10,
    WF_FLUX_D_NORM_K = 11,
    WF_FLUX_D_TO_Q = 12,
    WF_FLUX_D_TO_K = 13,
    WF_FLUX_D_TO_V = 14,
    WF_FLUX_D_TO_OUT = 15,
    WF_FLUX_D_NORM_ADDED_Q = 16,
    WF_FLUX_D_NORM_ADDED_K = 17,
    WF_FLUX_D_ADD_Q = 18,
    WF_FLUX_D_ADD_K = 19,
    WF_FLUX_D_ADD_V = 20,
    WF_FLUX_D_TO_ADD_OUT = 21,
    WF_FLUX_D_FF0 = 22,
    WF_FLUX_D_FF2 = 23,
    WF_FLUX_D_FFC0 = 24,
    WF_FLUX_D_FFC2 = 25,
    WF_FLUX_S_NORM = 26,           /* single blocks */
    WF_FLUX_S_PROJ_MLP = 27,
    WF_FLUX_S_PROJ_OUT = 28,
    WF_FLUX_S_NORM_Q = 29,
    WF_FLUX_S_NORM_K = 30,
    WF_FLUX_S_TO_Q = 31,
    WF_FLUX_S_TO_K = 32,
    WF_FLUX_S_TO_V = 33,
    WF_FLUX_NORM_OUT = 34,         /* norm_out.linear */
    WF_FLUX_PROJ_OUT = 35,         /* the model's proj_out */
    WF_FLUX_MODULE_COUNT = 36
} wf_flux_module_id_t;

/* Longest module name + 1: room for ".weight" in a tensor name. */
#define WF_FLUX_MODULE_NAME_MAX (WF_TENSOR_SPEC_NAME_MAX - 8)

/* One module of a model with a given config, as the walk hands it out. */
typedef struct wf_flux_module {
    wf_flux_module_id_t id;       /* its row of the table */
    wf_flux_scope_t scope;        /* model, double or single block */
    uint32_t block;               /* block index (0 for SCOPE_MODEL) */
    wf_flux_module_kind_t kind;   /* linear (with or without bias) or norm */
    int64_t out, in;              /* weight [out, in]; a norm: [out], in 0 */
    bool heads;                   /* a query / key / value projection: a tp
                                     split must keep whole heads */
    char name[WF_FLUX_MODULE_NAME_MAX]; /* diffusers' module name
                                     ("transformer_blocks.3.attn.to_q"); its
                                     tensors are name + ".weight" / ".bias" */
} wf_flux_module_t;

/* Called once per module; anything but WF_OK stops the walk with it. */
typedef wf_status_t (*wf_flux_module_fn)(void *arg, const wf_flux_module_t *m);

/* Every module of a model with config cfg, in state_dict order (the
 * guidance embedder only for guidance_embeds models). Returns WF_OK or
 * the first status fn returned other than WF_OK. */
wf_status_t wf_flux_modules_walk(const wf_flux_config_t *cfg, wf_flux_module_fn fn,
                                 void *arg);

/* The default tp plan of diffusers' FluxTransformer2DModel: one rule per
 * module of a block kind that is not replicated, its glob with '*' for
 * the block index; every other module replicated. */
void wf_flux_default_plan(wf_tp_plan_t *ret);

#endif /* WF_FLUX_MODULES_H */
