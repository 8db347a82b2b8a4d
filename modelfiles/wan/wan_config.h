/* wan_config.h — diffusers' WanTransformer3DModel (Wan 2.1 text-to-video,
 * image-to-video and first-last-frame-to-video; Wan 2.2 T2V / I2V A14B and
 * TI2V-5B): config.json and the tensors a checkpoint of it must hold.
 *
 * The field set and defaults are those of diffusers' __init__
 * (src/diffusers/models/transformers/transformer_wan.py, checked against
 * diffusers 0.42.1):
 *   patch_size (1, 2, 2), num_attention_heads 40, attention_head_dim 128,
 *   in_channels 16, out_channels 16 (null -> in_channels), text_dim 4096,
 *   freq_dim 256, ffn_dim 13824, num_layers 40, cross_attn_norm true,
 *   qk_norm "rms_norm_across_heads", eps 1e-6, image_dim None,
 *   added_kv_proj_dim None, rope_max_seq_len 1024, pos_embed_seq_len None.
 * As for FLUX, a missing field is refused unless the caller asks for
 * diffusers' defaults, except the three whose default is None (image_dim,
 * added_kv_proj_dim, pos_embed_seq_len: missing is null); keys starting
 * with '_' are ignored and any other unknown key is refused.
 *
 * Served: every WanTransformer3DModel config diffusers' conversion script
 * (scripts/convert_wan_to_diffusers.py) writes for this class:
 *   - text-to-video (Wan 2.1 T2V, Wan 2.2 T2V-A14B): image_dim,
 *     added_kv_proj_dim and pos_embed_seq_len null;
 *   - image-to-video (Wan 2.1 I2V): image_dim (1280, the CLIP image
 *     tokens' width) and added_kv_proj_dim (= inner_dim: the image
 *     embedder's output width, the input of every attn2.add_k_proj /
 *     add_v_proj), set together; in_channels 36;
 *   - first-last-frame (Wan 2.1 FLF2V): I2V plus pos_embed_seq_len (514 =
 *     2 x 257, even: the tokens of both images, one learned position
 *     embedding added before the image embedder);
 *   - Wan 2.2 I2V-A14B (in_channels 36, no image embedder) and TI2V-5B
 *     (in_channels / out_channels 48, per-token timesteps: a forward
 *     input, not a config field) need nothing more; A14B is two such
 *     models, one per noise range, each loaded on its own.
 * pos_embed_seq_len without image_dim is accepted and unused, as diffusers
 * does (no image embedder to hold the embedding). Wan VACE and Animate are
 * other classes (WanVACETransformer3DModel, WanAnimateTransformer3DModel),
 * not in the family table: wf_model_cfg_parse refuses them by name, with
 * why (the family's `unserved` list, wan_family.c).
 *
 * qk_norm: diffusers' WanTransformerBlock does not read it (every
 * attention has norm_q / norm_k, RMSNorm over all heads, whatever its
 * value); it is accepted as "rms_norm_across_heads" or null and reported.
 *
 * Nothing here logs; errors as flux_config.h (WF_E_BAD_FIELD with a
 * message naming the file and the field, never quoting the file). */
#ifndef WF_WAN_CONFIG_H
#define WF_WAN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "family.h"
#include "weft.h"

/* The class name diffusers writes in config.json. */
#define WF_WAN_CLASS_NAME "WanTransformer3DModel"
/* Bounds beyond any real model that keep every product in range. */
#define WF_WAN_MAX_DIM (1u << 20)      /* any width, inner_dim, ffn_dim */
#define WF_WAN_MAX_LAYERS 4096
#define WF_WAN_MAX_PATCH 64            /* each patch_size entry */
/* RoPE theta of diffusers' WanRotaryPosEmbed. */
#define WF_WAN_ROPE_THETA 10000.0

/* A validated configuration. */
typedef struct wf_wan_config {
    uint32_t patch_size[3];         /* (t, h, w), each >= 1 */
    uint32_t num_attention_heads;   /* H */
    uint32_t attention_head_dim;    /* D, even, >= 6 (three RoPE axes) */
    uint32_t in_channels;           /* latent channels in */
    uint32_t out_channels;          /* latent channels out (null -> in) */
    uint32_t text_dim;              /* encoder_hidden_states width */
    uint32_t freq_dim;              /* sinusoidal timestep width, even */
    uint32_t ffn_dim;               /* feed-forward hidden width */
    uint32_t num_layers;            /* blocks, >= 1 */
    bool cross_attn_norm;           /* norm2: LayerNorm with affine, else identity */
    bool qk_norm;                   /* "rms_norm_across_heads" given (not null) */
    float eps;                      /* the blocks' and norm_out's eps, finite, >= 0
                                       (the image embedder's LayerNorms: 1e-5) */
    uint32_t rope_max_seq_len;      /* RoPE positions per axis */
    uint32_t image_dim;             /* image tokens' width; 0: null (no image embedder) */
    uint32_t added_kv_proj_dim;     /* 0: null; else = inner_dim (add_k_proj's input) */
    uint32_t pos_embed_seq_len;     /* 0: null; else even: the image embedder's
                                       position embedding (FLF2V) where image_dim */
    uint32_t inner_dim;             /* derived: H * D */
    uint32_t patch_elems;           /* derived: pt * ph * pw */
    uint32_t rope_dims[3];          /* derived: (D - 4 (D / 6), 2 (D / 6), 2 (D / 6)) */
} wf_wan_config_t;

/* Parse and validate config.json text (len bytes, need not be
 * NUL-terminated); label names the file in messages; flags 0 or
 * WF_CONFIG_DIFFUSERS_DEFAULTS. *ret written only on success. */
wf_status_t wf_wan_config_parse(const char *json, size_t len, unsigned flags,
                                const char *label, wf_wan_config_t *ret,
                                char *err, size_t err_len);

/* The tensors of a model with this config, in diffusers' state_dict
 * order. *ret_specs: caller owns (free). Fails only out of memory. */
wf_status_t wf_wan_expected_tensors(const wf_wan_config_t *cfg,
                                    wf_tensor_spec_t **ret_specs, size_t *ret_n,
                                    char *err, size_t err_len);

/* The Wan family (family.h): WanTransformer3DModel. */
extern const wf_family_t wf_wan_family;

/* The Wan config of a model config of the Wan family. */
static inline const wf_wan_config_t *wf_wan_cfg(const wf_model_cfg_t *c)
{
    return (const wf_wan_config_t *)(const void *)c->b;
}

#endif /* WF_WAN_CONFIG_H */
