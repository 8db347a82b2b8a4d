/* flux_config.h — diffusers' FluxTransformer2DModel: config.json and the
 * tensors a checkpoint of it must hold.
 *
 * The field set and defaults are those of diffusers' __init__
 * (src/diffusers/models/transformers/transformer_flux.py, checked against
 * diffusers 0.42.1):
 *   patch_size 1, in_channels 64, out_channels None (-> in_channels),
 *   num_layers 19, num_single_layers 38, attention_head_dim 128,
 *   num_attention_heads 24, joint_attention_dim 4096,
 *   pooled_projection_dim 768, guidance_embeds False,
 *   axes_dims_rope (16, 56, 56).
 * diffusers silently fills a missing field with its default (a FLUX.1-dev
 * size); weft refuses a missing field unless the caller asks for
 * diffusers' defaults, except out_channels, which diffusers' own FLUX.1
 * configs omit, and axes_dims_rope, which they predate (its default is
 * FLUX.1's RoPE; the sum check still catches any other head size). Keys starting with '_' (_class_name aside) are ignored;
 * any other unknown key is refused, since it may change the architecture.
 *
 * Nothing here logs; errors are a status and a message naming the file
 * and the field or tensor. A message never quotes the file's text: a JSON
 * syntax error gives the byte offset, line and column and the kind of
 * error; a key is named only when it is one of the fields above, an
 * unknown one by its position ("the 3rd key"); the class name is not
 * echoed. (The file may be any file beneath the model root; the message
 * goes back to whichever client asked.)
 *   WF_E_BAD_FIELD  invalid JSON, wrong class, missing field, wrong type,
 *                   value out of range, inconsistent fields
 *   WF_E_BAD_SHAPE  a checkpoint tensor with the wrong shape
 *   WF_E_MALFORMED  a checkpoint lacking a tensor or holding an unexpected one
 */
#ifndef WF_FLUX_CONFIG_H
#define WF_FLUX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "family.h"
#include "model_root.h"
#include "safetensors.h"
#include "weft.h"

/* The class name diffusers writes in config.json. */
#define WF_FLUX_CLASS_NAME "FluxTransformer2DModel"
/* Most RoPE axes accepted (FLUX uses 3). */
#define WF_FLUX_MAX_AXES 8
/* Width of the sinusoidal timestep / guidance projection (diffusers'
 * Timesteps(num_channels=256)), the input of their embedders. */
#define WF_FLUX_TIMESTEP_CHANNELS 256
/* MLP width = WF_FLUX_MLP_RATIO * inner_dim (mlp_ratio 4.0 of the single
 * blocks, mult 4 of FeedForward in the double blocks). */
#define WF_FLUX_MLP_RATIO 4
/* Bounds beyond any real model that keep every product in range. */
#define WF_FLUX_MAX_DIM (1u << 20)     /* any width, and inner_dim */
#define WF_FLUX_MAX_LAYERS 4096        /* each of the two block counts */
/* Cap on config.json. */
#define WF_FLUX_CONFIG_MAX_BYTES WF_MODEL_CONFIG_MAX_BYTES

/* Flags of wf_flux_config_parse. */
#define WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS WF_CONFIG_DIFFUSERS_DEFAULTS

/* A validated configuration. */
typedef struct wf_flux_config {
    uint32_t patch_size;            /* >= 1 */
    uint32_t in_channels;           /* x_embedder input width, >= 1 */
    uint32_t out_channels;          /* proj_out emits patch^2 * this; null -> in_channels */
    uint32_t num_layers;            /* double-stream blocks, >= 0 */
    uint32_t num_single_layers;     /* single-stream blocks, >= 0 (sum >= 1) */
    uint32_t attention_head_dim;    /* D per head, even, = sum of axes_dims_rope */
    uint32_t num_attention_heads;   /* H */
    uint32_t joint_attention_dim;   /* encoder_hidden_states width */
    uint32_t pooled_projection_dim; /* pooled_projections width */
    bool guidance_embeds;           /* has time_text_embed.guidance_embedder */
    uint32_t n_axes;                /* RoPE axes = width of img_ids / txt_ids */
    uint32_t axes_dims_rope[WF_FLUX_MAX_AXES]; /* each even, >= 2 */
    uint32_t inner_dim;             /* derived: H * D */
    uint32_t mlp_hidden_dim;        /* derived: 4 * inner_dim */
} wf_flux_config_t;

/* Parse and validate config.json text (len bytes, need not be
 * NUL-terminated). `label` names the file in messages. flags: 0 or
 * WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS. *ret written only on success. */
wf_status_t wf_flux_config_parse(const char *json, size_t len, unsigned flags,
                                 const char *label, wf_flux_config_t *ret,
                                 char *err, size_t err_len);

/* Read `rel` (a config.json) beneath the model root and parse it. */
wf_status_t wf_flux_config_load(int root_fd, const char *rel,
                                wf_resolve_mode_t mode, unsigned flags,
                                wf_flux_config_t *ret, char *err, size_t err_len);


/* Number of tensors of a model with this config. */
size_t wf_flux_tensor_count(const wf_flux_config_t *cfg);

/* The tensors of a model with this config, in diffusers' state_dict
 * order. On success *ret_specs (caller owns it: free) holds *ret_n
 * entries. Fails only when out of memory. */
wf_status_t wf_flux_expected_tensors(const wf_flux_config_t *cfg,
                                     wf_tensor_spec_t **ret_specs,
                                     size_t *ret_n, char *err, size_t err_len);


/* The FLUX family (family.h): FluxTransformer2DModel. */
extern const wf_family_t wf_flux_family;

/* The FLUX config of a model config of the FLUX family. */
static inline const wf_flux_config_t *wf_flux_cfg(const wf_model_cfg_t *c)
{
    return (const wf_flux_config_t *)(const void *)c->b;
}

#endif /* WF_FLUX_CONFIG_H */
