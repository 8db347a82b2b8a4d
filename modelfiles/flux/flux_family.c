/* flux_family.c — the FLUX family's table entry (family.h): diffusers'
 * FluxTransformer2DModel, its config, tensors, default tp plan, forward
 * schema and flops. */
#include "flux_config.h"
#include "flux_modules.h"

#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(wf_flux_config_t) <= WF_FAMILY_CONFIG_BYTES,
               "wf_flux_config_t fits wf_model_cfg_t");

static wf_status_t flux_parse(const char *json, size_t len, unsigned flags,
                              const char *label, void *cfg, char *err, size_t err_len)
{
    return wf_flux_config_parse(json, len, flags, label, cfg, err, err_len);
}

static wf_status_t flux_tensors(const void *cfg, wf_tensor_spec_t **ret, size_t *n,
                                char *err, size_t err_len)
{
    return wf_flux_expected_tensors(cfg, ret, n, err, err_len);
}

/* The default plan of diffusers' FluxTransformer2DModel (the module
 * table's styles: flux_modules.c). */
static void flux_default_plan(const void *cfg, wf_tp_plan_t *ret)
{
    (void)cfg;
    wf_flux_default_plan(ret);
}

static void put_int(wf_model_config_t *c, const char *key, int64_t v, wf_config_kind_t k)
{
    wf_model_config_entry_t *e = &c->e[c->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->kind = k;
    e->n = 1;
    e->v[0] = v;
}

static void flux_public_config(const void *cfg, wf_model_config_t *ret)
{
    const wf_flux_config_t *c = cfg;
    memset(ret, 0, sizeof *ret);
    put_int(ret, "patch_size", c->patch_size, WF_CONFIG_INT);
    put_int(ret, "in_channels", c->in_channels, WF_CONFIG_INT);
    put_int(ret, "out_channels", c->out_channels, WF_CONFIG_INT);
    put_int(ret, "num_layers", c->num_layers, WF_CONFIG_INT);
    put_int(ret, "num_single_layers", c->num_single_layers, WF_CONFIG_INT);
    put_int(ret, "attention_head_dim", c->attention_head_dim, WF_CONFIG_INT);
    put_int(ret, "num_attention_heads", c->num_attention_heads, WF_CONFIG_INT);
    put_int(ret, "joint_attention_dim", c->joint_attention_dim, WF_CONFIG_INT);
    put_int(ret, "pooled_projection_dim", c->pooled_projection_dim, WF_CONFIG_INT);
    put_int(ret, "guidance_embeds", c->guidance_embeds, WF_CONFIG_FLAG);
    wf_model_config_entry_t *e = &ret->e[ret->n++];
    snprintf(e->key, sizeof e->key, "axes_dims_rope");
    e->kind = WF_CONFIG_LIST;
    e->n = c->n_axes <= WF_MODEL_CONFIG_VALUES ? c->n_axes : WF_MODEL_CONFIG_VALUES;
    for (uint32_t i = 0; i < e->n; i++)
        e->v[i] = c->axes_dims_rope[i];
    ret->present = 1;
}

/* One schema tensor: rank dims, each a fixed size (> 0, labelled with
 * its config field) or a named size (size 0). */
static void tensor(wf_schema_tensor_t *t, const char *name, bool optional, uint32_t rank,
                   const int64_t *size, const char *const *sym)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtypes = 1u << WF_DTYPE_F32 | 1u << WF_DTYPE_F16 | 1u << WF_DTYPE_BF16;
    t->optional = optional;
    t->rank = rank;
    for (uint32_t d = 0; d < rank; d++) {
        t->dim[d].size = size[d];
        snprintf(t->dim[d].sym, sizeof t->dim[d].sym, "%s", sym[d]);
    }
}

/* diffusers' FluxTransformer2DModel.forward:
 *   hidden_states          (B, S_img, in_channels)
 *   encoder_hidden_states  (B, S_txt, joint_attention_dim)
 *   pooled_projections     (B, pooled_projection_dim)
 *   timestep               (B)         (the model multiplies by 1000)
 *   img_ids                (S_img, n_axes)    txt_ids (S_txt, n_axes)
 *   guidance               (B), only for guidance_embeds models
 * output: (B, S_img, patch^2 * out_channels). f32, f16 or bf16 each. */
static void flux_schema(const void *cfg, wf_model_schema_t *s)
{
    const wf_flux_config_t *c = cfg;
    memset(s, 0, sizeof *s);
    int64_t oc = (int64_t)c->patch_size * c->patch_size * c->out_channels;
    tensor(&s->inputs[s->n_inputs++], "hidden_states", false, 3,
           (const int64_t[]){ 0, 0, c->in_channels },
           (const char *const[]){ "B", "S_img", "in_channels" });
    tensor(&s->inputs[s->n_inputs++], "encoder_hidden_states", false, 3,
           (const int64_t[]){ 0, 0, c->joint_attention_dim },
           (const char *const[]){ "B", "S_txt", "joint_attention_dim" });
    tensor(&s->inputs[s->n_inputs++], "pooled_projections", false, 2,
           (const int64_t[]){ 0, c->pooled_projection_dim },
           (const char *const[]){ "B", "pooled_projection_dim" });
    tensor(&s->inputs[s->n_inputs++], "timestep", false, 1, (const int64_t[]){ 0 },
           (const char *const[]){ "B" });
    tensor(&s->inputs[s->n_inputs++], "img_ids", false, 2,
           (const int64_t[]){ 0, c->n_axes },
           (const char *const[]){ "S_img", "axes_dims_rope" });
    tensor(&s->inputs[s->n_inputs++], "txt_ids", false, 2,
           (const int64_t[]){ 0, c->n_axes },
           (const char *const[]){ "S_txt", "axes_dims_rope" });
    if (c->guidance_embeds)
        tensor(&s->inputs[s->n_inputs++], "guidance", false, 1, (const int64_t[]){ 0 },
               (const char *const[]){ "B" });
    tensor(&s->outputs[s->n_outputs++], "output", false, 3,
           (const int64_t[]){ 0, 0, oc },
           (const char *const[]){ "B", "S_img", "out_channels" });
}

/* 2 flops per parameter per token (every linear; the embedders and norms
 * are a rounding error) plus the attention of each block over the joint
 * sequence, 4*B*H*S*S*D. FLUX.1-dev (12e9 parameters, 57 blocks, 24 x
 * 128) at 1024x1024 (4096 + 512 tokens): about 1.1e14 + 1.5e13. */
static uint64_t flux_flops(const void *cfg, uint64_t params, const wf_schema_binding_t *b)
{
    const wf_flux_config_t *c = cfg;
    double B = (double)wf_schema_sym(b, "B");
    double S = (double)wf_schema_sym(b, "S_img") + (double)wf_schema_sym(b, "S_txt");
    double blocks = (double)c->num_layers + (double)c->num_single_layers;
    double f = 2.0 * (double)params * B * S +
               blocks * 4.0 * B * (double)c->num_attention_heads * S * S *
                   (double)c->attention_head_dim;
    return f >= 1.8e19 ? UINT64_MAX : (uint64_t)f;
}

const wf_family_t wf_flux_family = {
    .name = "flux",
    .class_name = WF_FLUX_CLASS_NAME,
    .parse = flux_parse,
    .expected_tensors = flux_tensors,
    .default_plan = flux_default_plan,
    .public_config = flux_public_config,
    .schema = flux_schema,
    .flops = flux_flops,
};
