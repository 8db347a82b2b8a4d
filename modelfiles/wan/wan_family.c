/* wan_family.c — the Wan family's table entry (family.h): diffusers'
 * WanTransformer3DModel (text-, image- and first-last-frame-to-video, and
 * Wan 2.2's per-token timesteps), its config, tensors, default tp plan,
 * forward schema and flops. */
#include "wan_config.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(wf_wan_config_t) <= WF_FAMILY_CONFIG_BYTES,
               "wf_wan_config_t fits wf_model_cfg_t");

static wf_status_t wan_parse(const char *json, size_t len, unsigned flags,
                             const char *label, void *cfg, char *err, size_t err_len)
{
    return wf_wan_config_parse(json, len, flags, label, cfg, err, err_len);
}

static wf_status_t wan_tensors(const void *cfg, wf_tensor_spec_t **ret, size_t *n,
                               char *err, size_t err_len)
{
    return wf_wan_expected_tensors(cfg, ret, n, err, err_len);
}

/* diffusers' _keys_to_ignore_on_load_unexpected ["norm_added_q"]: the
 * image-to-video checkpoints converted before diffusers dropped it (the
 * Hub's Wan2.1-I2V-14B-*-Diffusers among them: 1343 tensors, these 40 and
 * the 1303 expected) hold an RMSNorm weight blocks.N.attn2.norm_added_q
 * that no forward reads. Only that exact name is skipped, never one of
 * the expected tensors. */
static bool wan_ignored_tensor(const void *cfg, const char *name)
{
    const wf_wan_config_t *c = cfg;
    static const char pre[] = "blocks.", post[] = ".attn2.norm_added_q.weight";
    if (strncmp(name, pre, sizeof pre - 1) != 0)
        return false;
    const char *p = name + sizeof pre - 1, *q = p;
    uint64_t b = 0;
    while (*q >= '0' && *q <= '9' && q - p < 6)
        b = b * 10 + (uint64_t)(*q++ - '0');
    if (q == p || (*p == '0' && q - p > 1))
        return false;
    return b < c->num_layers && strcmp(q, post) == 0;
}

/* diffusers 0.42.1 gives WanTransformer3DModel no _tp_plan; this is the
 * Megatron split of its blocks, as diffusers' FLUX plan does for FLUX:
 * the self- and cross-attention's to_q / to_k / to_v colwise (whole heads
 * per rank; the q / k RMSNorm across heads then needs the sums of squares
 * all-reduced), to_out.0 rowwise, ffn.net.0.proj colwise, ffn.net.2
 * rowwise; with an image (added_kv_proj_dim), attn2.add_k_proj /
 * add_v_proj colwise too: the image's K / V of the rank's heads, beside
 * its text K / V (norm_added_k across heads as norm_k). Everything else
 * (patch embedding, condition and image embedders, the modulation tables,
 * norms, proj_out) replicated. */
static void wan_default_plan(const void *cfg, wf_tp_plan_t *ret)
{
    const wf_wan_config_t *c = cfg;
    static const struct {
        const char *glob;
        wf_tp_style_t style;
        bool image;             /* only where added_kv_proj_dim */
    } rules[] = {
        { "blocks.*.attn1.to_q", WF_TP_COLWISE, false },
        { "blocks.*.attn1.to_k", WF_TP_COLWISE, false },
        { "blocks.*.attn1.to_v", WF_TP_COLWISE, false },
        { "blocks.*.attn1.to_out.0", WF_TP_ROWWISE, false },
        { "blocks.*.attn2.to_q", WF_TP_COLWISE, false },
        { "blocks.*.attn2.to_k", WF_TP_COLWISE, false },
        { "blocks.*.attn2.to_v", WF_TP_COLWISE, false },
        { "blocks.*.attn2.to_out.0", WF_TP_ROWWISE, false },
        { "blocks.*.ffn.net.0.proj", WF_TP_COLWISE, false },
        { "blocks.*.ffn.net.2", WF_TP_ROWWISE, false },
        { "blocks.*.attn2.add_k_proj", WF_TP_COLWISE, true },
        { "blocks.*.attn2.add_v_proj", WF_TP_COLWISE, true },
    };
    memset(ret, 0, sizeof *ret);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (rules[i].image && c->added_kv_proj_dim == 0)
            continue;
        wf_tp_rule_t *r = &ret->rules[ret->n++];
        snprintf(r->glob, sizeof r->glob, "%s", rules[i].glob);
        r->style = rules[i].style;
    }
}

static void put(wf_model_config_t *c, const char *key, wf_config_kind_t k, uint32_t n,
                const int64_t *v)
{
    wf_model_config_entry_t *e = &c->e[c->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->kind = k;
    e->n = n;
    for (uint32_t i = 0; i < n; i++)
        e->v[i] = v[i];
}

static void put_int(wf_model_config_t *c, const char *key, int64_t v, wf_config_kind_t k)
{
    put(c, key, k, 1, &v);
}

/* The integer and flag fields (eps is a real number: list_models' config
 * holds integers only, so it is not reported). */
static void wan_public_config(const void *cfg, wf_model_config_t *ret)
{
    const wf_wan_config_t *c = cfg;
    memset(ret, 0, sizeof *ret);
    put(ret, "patch_size", WF_CONFIG_LIST, 3,
        (const int64_t[]){ c->patch_size[0], c->patch_size[1], c->patch_size[2] });
    put_int(ret, "num_attention_heads", c->num_attention_heads, WF_CONFIG_INT);
    put_int(ret, "attention_head_dim", c->attention_head_dim, WF_CONFIG_INT);
    put_int(ret, "in_channels", c->in_channels, WF_CONFIG_INT);
    put_int(ret, "out_channels", c->out_channels, WF_CONFIG_INT);
    put_int(ret, "text_dim", c->text_dim, WF_CONFIG_INT);
    put_int(ret, "freq_dim", c->freq_dim, WF_CONFIG_INT);
    put_int(ret, "ffn_dim", c->ffn_dim, WF_CONFIG_INT);
    put_int(ret, "num_layers", c->num_layers, WF_CONFIG_INT);
    put_int(ret, "cross_attn_norm", c->cross_attn_norm, WF_CONFIG_FLAG);
    put_int(ret, "qk_norm", c->qk_norm, WF_CONFIG_FLAG);
    put_int(ret, "rope_max_seq_len", c->rope_max_seq_len, WF_CONFIG_INT);
    /* diffusers' None as 0 (no image embedder, no added K/V, no position
     * embedding of the image tokens) */
    put_int(ret, "image_dim", c->image_dim, WF_CONFIG_INT);
    put_int(ret, "added_kv_proj_dim", c->added_kv_proj_dim, WF_CONFIG_INT);
    put_int(ret, "pos_embed_seq_len", c->pos_embed_seq_len, WF_CONFIG_INT);
    ret->present = 1;
}

static void tensor(wf_schema_tensor_t *t, const char *name, uint32_t rank,
                   const int64_t *size, const char *const *sym)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtypes = 1u << WF_DTYPE_F32 | 1u << WF_DTYPE_F16 | 1u << WF_DTYPE_BF16;
    t->rank = rank;
    for (uint32_t d = 0; d < rank; d++) {
        t->dim[d].size = size[d];
        snprintf(t->dim[d].sym, sizeof t->dim[d].sym, "%s", sym[d]);
    }
}

/* diffusers' WanTransformer3DModel.forward's arguments; the inputs that
 * every config has keep their places (0 .. 3), the image input comes last:
 *   0 hidden_states          (B, in_channels, F, H, W)  the latent video
 *   1 timestep               (B)   optional: one timestep per sample, as
 *                            the pipeline passes it (0..1000)
 *   2 encoder_hidden_states  (B, S_txt, text_dim)
 *   3 timestep_tokens        (B, S) optional: one timestep per video token,
 *                            S = (F / pt) (H / ph) (W / pw) in the patch
 *                            grid's order (frame, row, column): diffusers'
 *                            rank-2 `timestep` (Wan 2.2 TI2V, the
 *                            pipelines' expand_timesteps: 0 on the first
 *                            frame's tokens when conditioned on an image)
 *   4 encoder_hidden_states_image  (B, S_img, image_dim)  only where the
 *                            config has image_dim, and then required (an
 *                            image-to-video model's cross-attention has
 *                            nothing to attend with its added K/V without
 *                            it): the image encoder's tokens (Wan 2.1: CLIP,
 *                            257 per image). With pos_embed_seq_len
 *                            (FLF2V) S_img is that fixed size: diffusers'
 *                            (2 B, 257, image_dim) of the first and last
 *                            frames, viewed as (B, 514, image_dim), the
 *                            view its image embedder takes.
 * Exactly one of timestep and timestep_tokens is given: the schema cannot
 * say so (each is optional on its own); the family's forward_check refuses
 * neither or both, and S other than the patch grid's token count.
 * output (its `sample`): (B, out_channels, F, H, W). F, H, W must be
 * multiples of patch_size (forward_check). */
static void wan_schema(const void *cfg, wf_model_schema_t *s)
{
    const wf_wan_config_t *c = cfg;
    memset(s, 0, sizeof *s);
    tensor(&s->inputs[s->n_inputs++], "hidden_states", 5,
           (const int64_t[]){ 0, c->in_channels, 0, 0, 0 },
           (const char *const[]){ "B", "in_channels", "F", "H", "W" });
    tensor(&s->inputs[s->n_inputs], "timestep", 1, (const int64_t[]){ 0 },
           (const char *const[]){ "B" });
    s->inputs[s->n_inputs++].optional = 1;
    tensor(&s->inputs[s->n_inputs++], "encoder_hidden_states", 3,
           (const int64_t[]){ 0, 0, c->text_dim },
           (const char *const[]){ "B", "S_txt", "text_dim" });
    tensor(&s->inputs[s->n_inputs], "timestep_tokens", 2, (const int64_t[]){ 0, 0 },
           (const char *const[]){ "B", "S" });
    s->inputs[s->n_inputs++].optional = 1;
    if (c->image_dim != 0) {
        if (c->pos_embed_seq_len != 0)
            tensor(&s->inputs[s->n_inputs++], "encoder_hidden_states_image", 3,
                   (const int64_t[]){ 0, c->pos_embed_seq_len, c->image_dim },
                   (const char *const[]){ "B", "pos_embed_seq_len", "image_dim" });
        else
            tensor(&s->inputs[s->n_inputs++], "encoder_hidden_states_image", 3,
                   (const int64_t[]){ 0, 0, c->image_dim },
                   (const char *const[]){ "B", "S_img", "image_dim" });
    }
    tensor(&s->outputs[s->n_outputs++], "output", 5,
           (const int64_t[]){ 0, c->out_channels, 0, 0, 0 },
           (const char *const[]){ "B", "out_channels", "F", "H", "W" });
}

/* 2 flops per parameter per video token (every linear of the blocks and
 * the patch embedding and proj_out; the text's and the image tokens' K/V
 * projections and embedders, and the timestep embedding, per text or image
 * token or per sample, are counted as if per video token) plus each
 * block's attention: self 4 B H S S D, cross 4 B H S S_txt D, and with an
 * image 4 B H S S_img D (its own softmax over the image tokens). Wan 2.1
 * 14B at 81 x 720 x 1280 (21 x 45 x 80 = 75600 tokens, 512 text tokens):
 * about 2.1e15 + 4.7e15; I2V's 257 image tokens add about 1.6e13. */
static uint64_t wan_flops(const void *cfg, uint64_t params, const wf_schema_binding_t *b)
{
    const wf_wan_config_t *c = cfg;
    double B = (double)wf_schema_sym(b, "B");
    double S = (double)wf_schema_sym(b, "F") * (double)wf_schema_sym(b, "H") *
               (double)wf_schema_sym(b, "W") / (double)c->patch_elems;
    double St = (double)wf_schema_sym(b, "S_txt");
    double Si = 0;
    if (c->image_dim != 0)
        Si = c->pos_embed_seq_len != 0 ? (double)c->pos_embed_seq_len
                                       : (double)wf_schema_sym(b, "S_img");
    if (Si < 0)
        Si = 0; /* not bound: the forward check refuses it */
    double f = 2.0 * (double)params * B * S +
               (double)c->num_layers * 4.0 * B * (double)c->inner_dim * S * (S + St + Si);
    return f >= 1.8e19 ? UINT64_MAX : f <= 0 ? 0 : (uint64_t)f;
}

/* The Wan models of other diffusers classes: their blocks differ. */
static const wf_unserved_class_t wan_unserved[] = {
    { "WanVACETransformer3DModel",
      "Wan VACE: video editing and control, with vace_blocks and a control patch "
      "embedding beside the transformer's" },
    { "WanAnimateTransformer3DModel",
      "Wan 2.2 Animate: a motion encoder and a face adapter in the blocks" },
    { NULL, NULL },
};

const wf_family_t wf_wan_family = {
    .name = "wan",
    .class_name = WF_WAN_CLASS_NAME,
    .unserved = wan_unserved,
    .ignored_tensor = wan_ignored_tensor,
    .parse = wan_parse,
    .expected_tensors = wan_tensors,
    .default_plan = wan_default_plan,
    .public_config = wan_public_config,
    .schema = wan_schema,
    .flops = wan_flops,
};
