/* flux_shard.c — the modules of a FLUX config (the module table,
 * modelfiles/flux/flux_modules.h) walked in state_dict order, each mapped
 * to its slot of a shard, and what is done with them: the tp plan check
 * (wf_flux_plan_check), a shard's size and the shards themselves, cut
 * from the host copy for one tp rank (flux_shard.h): f32 host memory for
 * the CPU backend, one resident block in the checkpoint's dtype for a
 * device backend (two walks: measure, then copy).
 *
 * Not here: running the model (flux_forward.c and its parts).
 */
#include "flux_shard.h"
#include "flux_run.h"
#include "flux_modules.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "tensor.h"

/* ---- the modules of a config ------------------------------------------- */

/* Where a module lives in a shard: byte offset + 1 of its slot (a
 * wf_linear_t, or a norm's float *) in wf_flux_shard_t (model
 * modules), wf_flux_double_t or wf_flux_single_t (by its scope); 0: no
 * slot (a table row the shard does not hold: a bug). */
#define MS(f) (offsetof(wf_flux_shard_t, f) + 1)
#define DS(f) (offsetof(wf_flux_double_t, f) + 1)
#define SS(f) (offsetof(wf_flux_single_t, f) + 1)
static const size_t slot_of[WF_FLUX_MODULE_COUNT] = {
    [WF_FLUX_TIME_L1] = MS(time_l1),
    [WF_FLUX_TIME_L2] = MS(time_l2),
    [WF_FLUX_GUIDANCE_L1] = MS(guid_l1),
    [WF_FLUX_GUIDANCE_L2] = MS(guid_l2),
    [WF_FLUX_TEXT_L1] = MS(text_l1),
    [WF_FLUX_TEXT_L2] = MS(text_l2),
    [WF_FLUX_CONTEXT_EMBEDDER] = MS(context_embedder),
    [WF_FLUX_X_EMBEDDER] = MS(x_embedder),
    [WF_FLUX_D_NORM1] = DS(norm1),
    [WF_FLUX_D_NORM1_CONTEXT] = DS(norm1_context),
    [WF_FLUX_D_NORM_Q] = DS(norm_q),
    [WF_FLUX_D_NORM_K] = DS(norm_k),
    [WF_FLUX_D_TO_Q] = DS(qkv.m[0]),
    [WF_FLUX_D_TO_K] = DS(qkv.m[1]),
    [WF_FLUX_D_TO_V] = DS(qkv.m[2]),
    [WF_FLUX_D_TO_OUT] = DS(to_out),
    [WF_FLUX_D_NORM_ADDED_Q] = DS(norm_added_q),
    [WF_FLUX_D_NORM_ADDED_K] = DS(norm_added_k),
    [WF_FLUX_D_ADD_Q] = DS(add_qkv.m[0]),
    [WF_FLUX_D_ADD_K] = DS(add_qkv.m[1]),
    [WF_FLUX_D_ADD_V] = DS(add_qkv.m[2]),
    [WF_FLUX_D_TO_ADD_OUT] = DS(to_add_out),
    [WF_FLUX_D_FF0] = DS(ff0),
    [WF_FLUX_D_FF2] = DS(ff2),
    [WF_FLUX_D_FFC0] = DS(ffc0),
    [WF_FLUX_D_FFC2] = DS(ffc2),
    [WF_FLUX_S_NORM] = SS(norm),
    [WF_FLUX_S_PROJ_MLP] = SS(qkvm.m[3]),
    [WF_FLUX_S_PROJ_OUT] = SS(proj_out),
    [WF_FLUX_S_NORM_Q] = SS(norm_q),
    [WF_FLUX_S_NORM_K] = SS(norm_k),
    [WF_FLUX_S_TO_Q] = SS(qkvm.m[0]),
    [WF_FLUX_S_TO_K] = SS(qkvm.m[1]),
    [WF_FLUX_S_TO_V] = SS(qkvm.m[2]),
    [WF_FLUX_NORM_OUT] = MS(norm_out),
    [WF_FLUX_PROJ_OUT] = MS(proj_out),
};
#undef MS
#undef DS
#undef SS

/* Called once per module, in state_dict order (flux_modules.h). With a
 * shard, `lin` (a linear) or `norm` (a norm weight) point at its slot. */
typedef wf_status_t (*visit_fn)(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                                float **norm);

/* A walk: the visitor, its argument, the shard (or NULL). */
typedef struct walk_state {
    wf_flux_shard_t *s;
    visit_fn fn;
    void *arg;
} walk_state_t;

static wf_status_t walk_visit(void *arg, const wf_flux_module_t *m)
{
    walk_state_t *w = arg;
    if (!w->s)
        return w->fn(w->arg, m, NULL, NULL);
    if ((unsigned)m->id >= WF_FLUX_MODULE_COUNT || slot_of[m->id] == 0)
        return WF_E_INTERNAL;
    unsigned char *base = m->scope == WF_FLUX_SCOPE_DOUBLE   ? (unsigned char *)&w->s->dbl[m->block]
                          : m->scope == WF_FLUX_SCOPE_SINGLE ? (unsigned char *)&w->s->sgl[m->block]
                                                             : (unsigned char *)w->s;
    void *slot = base + slot_of[m->id] - 1;
    if (m->kind == WF_FLUX_NORM)
        return w->fn(w->arg, m, NULL, slot);
    return w->fn(w->arg, m, slot, NULL);
}

/* Every module of a model with config cfg; s may be NULL (no slots).
 * Stops at the first error. */
static wf_status_t walk(const wf_flux_config_t *cfg, wf_flux_shard_t *s, visit_fn fn,
                        void *arg)
{
    walk_state_t w = {s, fn, arg};
    return wf_flux_modules_walk(cfg, walk_visit, &w);
}

/* ---- plan check ----------------------------------------------------------- */

/* State of a plan check walk. */
typedef struct pcheck {
    const wf_flux_config_t *cfg; /* the model */
    const wf_tp_plan_t *plan;    /* the plan */
    int tp;                      /* ranks */
    bool matched[WF_TP_MAX_RULES]; /* rule matched a linear module */
    char *err;                   /* message buffer */
    size_t err_len;              /* its size */
} pcheck_t;

static wf_status_t pcheck_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                                float **norm)
{
    (void)lin;
    (void)norm;
    pcheck_t *pc = arg;
    const wf_tp_plan_t *plan = pc->plan;
    const char *module = m->name;
    for (uint32_t r = 0; r < plan->n; r++) {
        if (!wf_tp_glob_match(plan->rules[r].glob, module))
            continue;
        if (m->kind == WF_FLUX_NORM)
            return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                                  "tp_plan rule '%s' matches '%s', a norm weight: only linear "
                                  "layers can be sharded (norm weights stay replicated)",
                                  plan->rules[r].glob, module);
        pc->matched[r] = true;
    }
    if (m->kind == WF_FLUX_NORM)
        return WF_OK;
    const int64_t D = pc->cfg->attention_head_dim, H = pc->cfg->num_attention_heads;
    int ri = wf_tp_plan_find(plan, module);
    wf_tp_style_t style = ri >= 0 ? plan->rules[ri].style : WF_TP_REPLICATED;
    bool splits_out = style == WF_TP_COLWISE || style == WF_TP_PACKED_COLWISE;
    /* diffusers checks the heads before it shards anything */
    if (m->heads && splits_out && H % pc->tp != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                              "`tp_degree` (%d) must divide the number of attention heads "
                              "(%" PRId64 ").", pc->tp, H);
    wf_tp_place_t pl;
    if (wf_tp_place(plan, module, m->out, m->in, pc->tp, &pl, pc->err, pc->err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    if (m->heads && splits_out && pc->tp > 1) {
        int64_t start = 0;
        for (uint32_t b = 0; b < pl.n_blocks; b++) {
            int64_t piece = pl.block[b] / pc->tp;
            if (start % D != 0 || piece % D != 0)
                return wf_errf_status(WF_E_BAD_ARGUMENT, pc->err, pc->err_len,
                                      "tp_plan cuts attention heads: '%s' would give each of "
                                      "%d tensor-parallel ranks pieces of %" PRId64 " rows, not "
                                      "whole heads of attention_head_dim %" PRId64,
                                      module, pc->tp, piece, D);
            start += pl.block[b];
        }
    }
    return WF_OK;
}

wf_status_t wf_flux_plan_check(const wf_flux_config_t *cfg,
                               const wf_tp_plan_t *plan, int tp,
                               bool allow_unmatched, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !plan)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or plan");
    if (tp < 1 || tp > MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "tensor-parallel degree %d invalid (1..%d)", tp, MAX_DEGREE);
    if (wf_tp_plan_check(plan, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    pcheck_t pc;
    memset(&pc, 0, sizeof pc);
    pc.cfg = cfg;
    pc.plan = plan;
    pc.tp = tp;
    pc.err = err;
    pc.err_len = err_len;
    wf_status_t st = walk(cfg, NULL, pcheck_visit, &pc);
    if (st != WF_OK)
        return st;
    return wf_tp_plan_all_matched(plan, pc.matched, allow_unmatched, err, err_len);
}

/* ---- shards ---------------------------------------------------------------- */

/* The walk of a cut: every module of the config, into shard s (NULL:
 * sizing). */
typedef struct cut_arg {
    const wf_flux_config_t *cfg;
    wf_flux_shard_t *s;
    wf_shard_cut_t *c;          /* the cut in progress */
} cut_arg_t;

/* A group of projections on one input, cut at its first member's visit:
 * the modules prefix + names[k] (prefix: m's name without `first`). */
static wf_status_t cut_group(wf_shard_cut_t *c, const wf_flux_module_t *m, const char *first,
                             uint32_t n, const char *const *names, const int64_t *outs,
                             wf_linear_group_t *g)
{
    char prefix[WF_FLUX_MODULE_NAME_MAX];
    size_t nl = strlen(m->name), fl = strlen(first);
    if (nl < fl || strcmp(m->name + nl - fl, first) != 0)
        return WF_E_INTERNAL;
    snprintf(prefix, sizeof prefix, "%.*s", (int)(nl - fl), m->name);
    return wf_shard_linear_group(c, prefix, n, names, outs, m->in, m->kind == WF_FLUX_LINEAR, g);
}

/* One module as a piece of the cut (shard.h): a norm weight as a vector,
 * a linear cut for its placement; projections that share an input as
 * one group (at its first member; the others are in it), the AdaLN
 * linears by the batch (cut_mod). Without a shard (sizing) lin and norm
 * are NULL. */
static wf_status_t cut_visit(void *arg, const wf_flux_module_t *m, wf_linear_t *lin,
                             float **norm)
{
    const cut_arg_t *a = arg;
    wf_shard_cut_t *c = a->c;
    const int64_t C = m->in;
    switch (m->id) {
    case WF_FLUX_D_TO_Q: {
        static const char *const nm[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
        const int64_t outs[3] = {C, C, C};
        return cut_group(c, m, nm[0], 3, nm, outs, a->s ? &a->s->dbl[m->block].qkv : NULL);
    }
    case WF_FLUX_D_ADD_Q: {
        static const char *const nm[3] = {"attn.add_q_proj", "attn.add_k_proj",
                                          "attn.add_v_proj"};
        const int64_t outs[3] = {C, C, C};
        return cut_group(c, m, nm[0], 3, nm, outs, a->s ? &a->s->dbl[m->block].add_qkv : NULL);
    }
    case WF_FLUX_S_PROJ_MLP: {
        /* proj_mlp comes first in the walk; the group's order is q, k, v,
         * MLP-in */
        static const char *const nm[4] = {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"};
        const int64_t outs[4] = {C, C, C, m->out};
        return cut_group(c, m, nm[3], 4, nm, outs, a->s ? &a->s->sgl[m->block].qkvm : NULL);
    }
    case WF_FLUX_D_TO_K: case WF_FLUX_D_TO_V: case WF_FLUX_D_ADD_K: case WF_FLUX_D_ADD_V:
    case WF_FLUX_S_TO_Q: case WF_FLUX_S_TO_K: case WF_FLUX_S_TO_V:
    case WF_FLUX_D_NORM1: case WF_FLUX_D_NORM1_CONTEXT: case WF_FLUX_S_NORM:
    case WF_FLUX_NORM_OUT:
        return WF_OK;
    default:
        break;
    }
    if (m->kind == WF_FLUX_NORM) {
        char name[WF_TENSOR_SPEC_NAME_MAX + 8];
        snprintf(name, sizeof name, "%s.weight", m->name);
        return wf_shard_vector(c, name, m->out, norm);
    }
    return wf_shard_linear(c, m->name, m->out, m->in, m->kind == WF_FLUX_LINEAR, lin);
}

/* The AdaLN linears of every block and norm_out (all on silu(temb)) as
 * one batch, in the order double blocks (norm1, norm1_context), single
 * blocks (norm), norm_out; each member's column offset in the batch's
 * output into the shard. */
static wf_status_t cut_mod(wf_shard_cut_t *c, const wf_flux_config_t *cfg, wf_flux_shard_t *s)
{
    const uint32_t nd = cfg->num_layers, ns = cfg->num_single_layers, n = 2 * nd + ns + 1;
    const int64_t C = cfg->inner_dim;
    char *names = malloc((size_t)n * WF_FLUX_MODULE_NAME_MAX);
    const char **mods = malloc((size_t)n * sizeof *mods);
    int64_t *outs = malloc((size_t)n * sizeof *outs);
    wf_linear_t **mem = malloc((size_t)n * sizeof *mem);
    wf_status_t st = WF_E_NO_MEMORY;
    if (!names || !mods || !outs || !mem)
        goto done;
    int64_t off = 0;
    for (uint32_t k = 0; k < n; k++) {
        char *nm = names + (size_t)k * WF_FLUX_MODULE_NAME_MAX;
        wf_linear_t *L = NULL;
        int64_t *at = NULL;
        if (k < 2 * nd) {
            uint32_t b = k / 2;
            snprintf(nm, WF_FLUX_MODULE_NAME_MAX, "transformer_blocks.%u.%s", (unsigned)b,
                     k % 2 ? "norm1_context.linear" : "norm1.linear");
            outs[k] = 6 * C;
            if (s) {
                L = k % 2 ? &s->dbl[b].norm1_context : &s->dbl[b].norm1;
                at = k % 2 ? &s->dbl[b].mod_off_ctx : &s->dbl[b].mod_off;
            }
        } else if (k < 2 * nd + ns) {
            uint32_t b = k - 2 * nd;
            snprintf(nm, WF_FLUX_MODULE_NAME_MAX, "single_transformer_blocks.%u.norm.linear",
                     (unsigned)b);
            outs[k] = 3 * C;
            if (s) {
                L = &s->sgl[b].norm;
                at = &s->sgl[b].mod_off;
            }
        } else {
            snprintf(nm, WF_FLUX_MODULE_NAME_MAX, "norm_out.linear");
            outs[k] = 2 * C;
            if (s) {
                L = &s->norm_out;
                at = &s->norm_out_off;
            }
        }
        mods[k] = nm;
        mem[k] = L;
        if (at)
            *at = off;
        off += outs[k];
    }
    bool fused = false;
    st = wf_shard_linear_fused(c, n, mods, outs, C, true, s ? mem : NULL, s ? &s->mod : NULL,
                               &fused);
    if (st == WF_OK && s) {
        s->mod_fused = fused;
        s->mod_width = off;
    }
done:
    free(names);
    free(mods);
    free(outs);
    free(mem);
    return st;
}

static wf_status_t cut_walk(wf_shard_cut_t *c, void *arg)
{
    cut_arg_t a = *(const cut_arg_t *)arg;
    a.c = c;
    wf_status_t st = cut_mod(c, a.cfg, a.s);
    if (st != WF_OK)
        return st;
    return walk(a.cfg, a.s, cut_visit, &a);
}

static uint64_t shard_bytes(const wf_flux_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                            bool dev, wf_dtype_t wdt)
{
    if (wf_flux_plan_check(cfg, plan, tp, true, NULL, 0) != WF_OK)
        return 0;
    cut_arg_t a = { cfg, NULL, NULL };
    return wf_shard_size(plan, tp, dev, wdt, cut_walk, &a);
}

uint64_t wf_flux_shard_bytes(const wf_flux_config_t *cfg,
                             const wf_tp_plan_t *plan, int tp)
{
    return shard_bytes(cfg, plan, tp, false, WF_DTYPE_F32);
}

uint64_t wf_flux_shard_bytes_dev(const wf_flux_config_t *cfg,
                                 const wf_tp_plan_t *plan, int tp,
                                 wf_dtype_t weight_dtype)
{
    return shard_bytes(cfg, plan, tp, true, weight_dtype);
}

void wf_flux_shard_free(wf_flux_shard_t **s)
{
    if (!s || !*s)
        return;
    wf_shard_mem_free(&(*s)->mem);
    free((*s)->dbl);
    free((*s)->sgl);
    free(*s);
    *s = NULL;
}

wf_status_t wf_flux_shard_build(const wf_model_host_t *host,
                                const wf_tp_plan_t *plan, int tp, int tp_rank,
                                const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, wf_flux_shard_t **ret,
                                char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !ret || tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad shard arguments (tp %d, rank %d)",
                              tp, tp_rank);
    wf_flux_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    s->cfg = *wf_flux_cfg(&host->cfg);
    s->tp = tp;
    s->tp_rank = tp_rank;
    /* one spare element each: a model without a block kind still gets
     * an array */
    s->dbl = calloc((size_t)s->cfg.num_layers + 1, sizeof *s->dbl);
    s->sgl = calloc((size_t)s->cfg.num_single_layers + 1, sizeof *s->sgl);
    if (!s->dbl || !s->sgl) {
        wf_flux_shard_free(&s);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    cut_arg_t a = { &s->cfg, s, NULL };
    wf_status_t st = wf_shard_cut_run(host, plan, tp, tp_rank, ops, ctx, cut_walk, &a, &s->mem,
                                      err, err_len);
    if (st != WF_OK) {
        wf_flux_shard_free(&s);
        return st;
    }
    *ret = s;
    return WF_OK;
}
