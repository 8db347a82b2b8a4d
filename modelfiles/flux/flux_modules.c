/* flux_modules.c — the FLUX module table and what is read off it: the
 * walk over a config's modules and the default tp plan (flux_modules.h).
 *
 * Not here: what a caller does with a module (the tensor list in
 * flux_config.c, the plan check and shards in daemon/models/flux/).
 */
#include "flux_modules.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* A size of a module, in terms of the config. */
typedef enum dim {
    DIM_NONE = 0, /* a norm's in */
    DIM_C,        /* inner_dim */
    DIM_2C,       /* AdaLayerNormContinuous: shift, scale */
    DIM_3C,       /* AdaLayerNormZeroSingle: shift, scale, gate */
    DIM_6C,       /* AdaLayerNormZero: two of those */
    DIM_M,        /* mlp_hidden_dim */
    DIM_C_M,      /* single blocks' proj_out input: cat([attn, mlp]) */
    DIM_D,        /* attention_head_dim (RMSNorm over a head) */
    DIM_TC,       /* the sinusoidal timestep projection's width */
    DIM_PD,       /* pooled_projection_dim */
    DIM_J,        /* joint_attention_dim */
    DIM_IN,       /* in_channels */
    DIM_OC        /* patch_size^2 * out_channels */
} dim_t;

/* One row: a module of the model or of each block of a kind. */
typedef struct module_def {
    wf_flux_module_id_t id;     /* = its index in the table */
    wf_flux_scope_t scope;      /* model, double or single block */
    const char *name;           /* within its scope */
    wf_flux_module_kind_t kind; /* linear (bias or not) or norm */
    dim_t out, in;              /* weight [out, in]; a norm [out] */
    bool heads;                 /* q / k / v: tp keeps whole heads */
    bool guidance;              /* only in guidance_embeds models */
    wf_tp_style_t style;        /* in the default plan */
    uint32_t rule;              /* the place of its rule among its block
                                   kind's rules in the default plan
                                   (diffusers' order, attention first),
                                   1-based; 0: replicated, no rule */
    uint32_t n_blocks;          /* packed styles: relative block sizes */
    uint32_t blocks[WF_TP_MAX_BLOCKS];
} module_def_t;

#define LIN WF_FLUX_LINEAR
#define NORM WF_FLUX_NORM
#define REP WF_TP_REPLICATED
#define COL WF_TP_COLWISE
#define ROW WF_TP_ROWWISE
#define MODEL WF_FLUX_SCOPE_MODEL
#define DBL WF_FLUX_SCOPE_DOUBLE
#define SGL WF_FLUX_SCOPE_SINGLE

/* The modules in state_dict order. The default plan is diffusers':
 * attention q / k / v (both streams) colwise, their output projections
 * rowwise, each feed-forward's first linear colwise and second rowwise;
 * single blocks' proj_mlp colwise and proj_out packed_rowwise over its
 * input cat([attn (dim), mlp (4 * dim)]), each part split; embedders,
 * AdaLN linears, norms and the model's proj_out replicated. */
static const module_def_t table[WF_FLUX_MODULE_COUNT] = {
    /* row i has id i: the walk takes the model's own rows by id range */
    { WF_FLUX_TIME_L1, MODEL, "time_text_embed.timestep_embedder.linear_1", LIN, DIM_C, DIM_TC,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_TIME_L2, MODEL, "time_text_embed.timestep_embedder.linear_2", LIN, DIM_C, DIM_C,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_GUIDANCE_L1, MODEL, "time_text_embed.guidance_embedder.linear_1", LIN, DIM_C,
      DIM_TC, false, true, REP, 0, 0, {0} },
    { WF_FLUX_GUIDANCE_L2, MODEL, "time_text_embed.guidance_embedder.linear_2", LIN, DIM_C,
      DIM_C, false, true, REP, 0, 0, {0} },
    { WF_FLUX_TEXT_L1, MODEL, "time_text_embed.text_embedder.linear_1", LIN, DIM_C, DIM_PD,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_TEXT_L2, MODEL, "time_text_embed.text_embedder.linear_2", LIN, DIM_C, DIM_C,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_CONTEXT_EMBEDDER, MODEL, "context_embedder", LIN, DIM_C, DIM_J,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_X_EMBEDDER, MODEL, "x_embedder", LIN, DIM_C, DIM_IN, false, false, REP, 0, 0, {0} },

    /* FluxTransformerBlock */
    { WF_FLUX_D_NORM1, DBL, "norm1.linear", LIN, DIM_6C, DIM_C, false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_NORM1_CONTEXT, DBL, "norm1_context.linear", LIN, DIM_6C, DIM_C,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_NORM_Q, DBL, "attn.norm_q", NORM, DIM_D, DIM_NONE, false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_NORM_K, DBL, "attn.norm_k", NORM, DIM_D, DIM_NONE, false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_TO_Q, DBL, "attn.to_q", LIN, DIM_C, DIM_C, true, false, COL, 1, 0, {0} },
    { WF_FLUX_D_TO_K, DBL, "attn.to_k", LIN, DIM_C, DIM_C, true, false, COL, 2, 0, {0} },
    { WF_FLUX_D_TO_V, DBL, "attn.to_v", LIN, DIM_C, DIM_C, true, false, COL, 3, 0, {0} },
    { WF_FLUX_D_TO_OUT, DBL, "attn.to_out.0", LIN, DIM_C, DIM_C, false, false, ROW, 4, 0, {0} },
    { WF_FLUX_D_NORM_ADDED_Q, DBL, "attn.norm_added_q", NORM, DIM_D, DIM_NONE,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_NORM_ADDED_K, DBL, "attn.norm_added_k", NORM, DIM_D, DIM_NONE,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_D_ADD_Q, DBL, "attn.add_q_proj", LIN, DIM_C, DIM_C, true, false, COL, 5, 0, {0} },
    { WF_FLUX_D_ADD_K, DBL, "attn.add_k_proj", LIN, DIM_C, DIM_C, true, false, COL, 6, 0, {0} },
    { WF_FLUX_D_ADD_V, DBL, "attn.add_v_proj", LIN, DIM_C, DIM_C, true, false, COL, 7, 0, {0} },
    { WF_FLUX_D_TO_ADD_OUT, DBL, "attn.to_add_out", LIN, DIM_C, DIM_C,
      false, false, ROW, 8, 0, {0} },
    /* FeedForward: GELU(tanh) projection, then back to dim */
    { WF_FLUX_D_FF0, DBL, "ff.net.0.proj", LIN, DIM_M, DIM_C, false, false, COL, 9, 0, {0} },
    { WF_FLUX_D_FF2, DBL, "ff.net.2", LIN, DIM_C, DIM_M, false, false, ROW, 10, 0, {0} },
    { WF_FLUX_D_FFC0, DBL, "ff_context.net.0.proj", LIN, DIM_M, DIM_C,
      false, false, COL, 11, 0, {0} },
    { WF_FLUX_D_FFC2, DBL, "ff_context.net.2", LIN, DIM_C, DIM_M,
      false, false, ROW, 12, 0, {0} },

    /* FluxSingleTransformerBlock */
    { WF_FLUX_S_NORM, SGL, "norm.linear", LIN, DIM_3C, DIM_C, false, false, REP, 0, 0, {0} },
    { WF_FLUX_S_PROJ_MLP, SGL, "proj_mlp", LIN, DIM_M, DIM_C, false, false, COL, 4, 0, {0} },
    { WF_FLUX_S_PROJ_OUT, SGL, "proj_out", LIN, DIM_C, DIM_C_M, false, false,
      WF_TP_PACKED_ROWWISE, 5, 2, {1, WF_FLUX_MLP_RATIO} },
    { WF_FLUX_S_NORM_Q, SGL, "attn.norm_q", NORM, DIM_D, DIM_NONE, false, false, REP, 0, 0, {0} },
    { WF_FLUX_S_NORM_K, SGL, "attn.norm_k", NORM, DIM_D, DIM_NONE, false, false, REP, 0, 0, {0} },
    { WF_FLUX_S_TO_Q, SGL, "attn.to_q", LIN, DIM_C, DIM_C, true, false, COL, 1, 0, {0} },
    { WF_FLUX_S_TO_K, SGL, "attn.to_k", LIN, DIM_C, DIM_C, true, false, COL, 2, 0, {0} },
    { WF_FLUX_S_TO_V, SGL, "attn.to_v", LIN, DIM_C, DIM_C, true, false, COL, 3, 0, {0} },

    /* AdaLayerNormContinuous, then the patches out */
    { WF_FLUX_NORM_OUT, MODEL, "norm_out.linear", LIN, DIM_2C, DIM_C,
      false, false, REP, 0, 0, {0} },
    { WF_FLUX_PROJ_OUT, MODEL, "proj_out", LIN, DIM_OC, DIM_C, false, false, REP, 0, 0, {0} },
};

#undef LIN
#undef NORM
#undef REP
#undef COL
#undef ROW
#undef MODEL
#undef DBL
#undef SGL

/* The block-kind prefixes of module names, by scope. */
static const char *const scope_prefix[] = {
    [WF_FLUX_SCOPE_MODEL] = "",
    [WF_FLUX_SCOPE_DOUBLE] = "transformer_blocks",
    [WF_FLUX_SCOPE_SINGLE] = "single_transformer_blocks",
};

static int64_t dim_of(const wf_flux_config_t *c, dim_t d)
{
    const int64_t C = c->inner_dim, M = c->mlp_hidden_dim;
    switch (d) {
    case DIM_NONE: return 0;
    case DIM_C: return C;
    case DIM_2C: return 2 * C;
    case DIM_3C: return 3 * C;
    case DIM_6C: return 6 * C;
    case DIM_M: return M;
    case DIM_C_M: return C + M;
    case DIM_D: return c->attention_head_dim;
    case DIM_TC: return WF_FLUX_TIMESTEP_CHANNELS;
    case DIM_PD: return c->pooled_projection_dim;
    case DIM_J: return c->joint_attention_dim;
    case DIM_IN: return c->in_channels;
    case DIM_OC: return (int64_t)c->patch_size * c->patch_size * c->out_channels;
    }
    return 0;
}

/* Module `def` of block b (0 for the model's own) of config c. */
static void module_of(const wf_flux_config_t *c, const module_def_t *def, uint32_t b,
                      wf_flux_module_t *m)
{
    m->id = def->id;
    m->scope = def->scope;
    m->block = b;
    m->kind = def->kind;
    m->out = dim_of(c, def->out);
    m->in = dim_of(c, def->in);
    m->heads = def->heads;
    if (def->scope == WF_FLUX_SCOPE_MODEL)
        snprintf(m->name, sizeof m->name, "%s", def->name);
    else
        snprintf(m->name, sizeof m->name, "%s.%" PRIu32 ".%s", scope_prefix[def->scope], b,
                 def->name);
}

/* Rows [first, end) of the table with scope `scope`, each once per block
 * (n blocks; the model's own: n = 1). */
static wf_status_t walk_scope(const wf_flux_config_t *c, wf_flux_scope_t scope, size_t first,
                              size_t end, uint32_t n, wf_flux_module_fn fn, void *arg)
{
    wf_flux_module_t m;
    for (uint32_t b = 0; b < n; b++)
        for (size_t i = first; i < end; i++) {
            const module_def_t *def = &table[i];
            if (def->scope != scope || (def->guidance && !c->guidance_embeds))
                continue;
            module_of(c, def, scope == WF_FLUX_SCOPE_MODEL ? 0 : b, &m);
            wf_status_t st = fn(arg, &m);
            if (st != WF_OK)
                return st;
        }
    return WF_OK;
}

wf_status_t wf_flux_modules_walk(const wf_flux_config_t *cfg, wf_flux_module_fn fn,
                                 void *arg)
{
    /* the model's modules before the blocks (embedders) and after them
     * (norm_out, proj_out), in table order */
    wf_status_t st;
    if ((st = walk_scope(cfg, WF_FLUX_SCOPE_MODEL, 0, WF_FLUX_D_NORM1, 1, fn, arg)) != WF_OK ||
        (st = walk_scope(cfg, WF_FLUX_SCOPE_DOUBLE, 0, WF_FLUX_MODULE_COUNT, cfg->num_layers, fn,
                         arg)) != WF_OK ||
        (st = walk_scope(cfg, WF_FLUX_SCOPE_SINGLE, 0, WF_FLUX_MODULE_COUNT,
                         cfg->num_single_layers, fn, arg)) != WF_OK)
        return st;
    return walk_scope(cfg, WF_FLUX_SCOPE_MODEL, WF_FLUX_NORM_OUT, WF_FLUX_MODULE_COUNT, 1, fn,
                      arg);
}

void wf_flux_default_plan(wf_tp_plan_t *ret)
{
    memset(ret, 0, sizeof *ret);
    for (int scope = WF_FLUX_SCOPE_MODEL; scope <= WF_FLUX_SCOPE_SINGLE; scope++)
        for (uint32_t pos = 1;; pos++) {
            const module_def_t *def = NULL;
            for (size_t i = 0; i < WF_FLUX_MODULE_COUNT && !def; i++)
                if ((int)table[i].scope == scope && table[i].rule == pos)
                    def = &table[i];
            if (!def || ret->n == WF_TP_MAX_RULES)
                break;
            wf_tp_rule_t *r = &ret->rules[ret->n++];
            if (scope == WF_FLUX_SCOPE_MODEL)
                snprintf(r->glob, sizeof r->glob, "%s", def->name);
            else
                snprintf(r->glob, sizeof r->glob, "%s.*.%s", scope_prefix[scope], def->name);
            r->style = def->style;
            r->n_blocks = def->n_blocks;
            for (uint32_t k = 0; k < def->n_blocks; k++)
                r->blocks[k] = def->blocks[k];
        }
}
