/* wan_shard.c — the tp plan check of a Wan model and a rank's shard cut
 * from the host copy (wan_run.h) through models/shard.h: one walk names
 * every piece in state_dict order, and the same walk sizes a shard. */
#include "wan_run.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errf.h"
#include "tensor.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The module of tensor `name` (without ".weight" / ".bias") into m. */
static void module_of(const char *name, char *m, size_t len)
{
    size_t n = strlen(name);
    if (ends_with(name, ".weight"))
        n -= 7;
    else if (ends_with(name, ".bias"))
        n -= 5;
    snprintf(m, len, "%.*s", (int)n, name);
}

wf_status_t wan_plan_check(const wf_wan_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                           bool allow_unmatched, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!cfg || !plan)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "no config or plan");
    if (tp < 1 || tp > WAN_MAX_DEGREE)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "tensor-parallel degree %d invalid (1..%d)", tp, WAN_MAX_DEGREE);
    /* each tp rank attends whole heads of its own (diffusers checks the
     * heads before it shards anything) */
    if (cfg->num_attention_heads % (uint32_t)tp != 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "`tp_degree` (%d) must divide the number of attention heads "
                              "(%" PRIu32 ").", tp, cfg->num_attention_heads);
    if (wf_tp_plan_check(plan, err, err_len) != WF_OK)
        return WF_E_BAD_ARGUMENT;
    wf_tensor_spec_t *specs = NULL;
    size_t n = 0;
    wf_status_t st = wf_wan_expected_tensors(cfg, &specs, &n, err, err_len);
    if (st != WF_OK)
        return st;
    bool matched[WF_TP_MAX_RULES] = { false };
    for (size_t i = 0; i < n && st == WF_OK; i++) {
        if (ends_with(specs[i].name, ".bias"))
            continue; /* a bias follows its weight */
        char m[WF_TENSOR_SPEC_NAME_MAX];
        module_of(specs[i].name, m, sizeof m);
        bool linear = specs[i].rank == 2;
        for (uint32_t r = 0; r < plan->n && st == WF_OK; r++) {
            if (!wf_tp_glob_match(plan->rules[r].glob, m))
                continue;
            if (!linear)
                st = wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                    "tp_plan rule '%s' matches '%s', which is not a linear "
                                    "layer: only linear layers can be sharded",
                                    plan->rules[r].glob, m);
            matched[r] = true;
        }
        if (st == WF_OK && linear) {
            wf_tp_place_t pl;
            if (wf_tp_place(plan, m, specs[i].shape[0], specs[i].shape[1], tp, &pl, err,
                            err_len) != WF_OK)
                st = WF_E_BAD_ARGUMENT;
        }
    }
    free(specs);
    if (st != WF_OK)
        return st;
    return wf_tp_plan_all_matched(plan, matched, allow_unmatched, err, err_len);
}

/* Every piece of a shard in state_dict order (shard.h's walk); s is
 * NULL when sizing. */
typedef struct cut_arg {
    const wf_wan_config_t *cfg;
    wf_wan_shard_t *s;
} cut_arg_t;

/* A linear with a bias: `prefix` + `module`. */
static wf_status_t lin(wf_shard_cut_t *c, wf_linear_t *l, const char *prefix,
                       const char *module, int64_t out, int64_t in)
{
    char n[WF_TENSOR_SPEC_NAME_MAX];
    snprintf(n, sizeof n, "%s%s", prefix, module);
    return wf_shard_linear(c, n, out, in, true, l);
}

static wf_status_t vec(wf_shard_cut_t *c, float **v, const char *prefix, const char *name,
                       int64_t n)
{
    char t[WF_TENSOR_SPEC_NAME_MAX];
    snprintf(t, sizeof t, "%s%s", prefix, name);
    return wf_shard_vector(c, t, n, v);
}

#define TRY(e)                                                                   \
    do {                                                                         \
        wf_status_t st_ = (e);                                                   \
        if (st_ != WF_OK)                                                        \
            return st_;                                                          \
    } while (0)

static wf_status_t cut_walk(wf_shard_cut_t *c, void *arg)
{
    const cut_arg_t *a = arg;
    wf_wan_shard_t *s = a->s;
    const wf_wan_config_t *cf = a->cfg;
    const int64_t C = cf->inner_dim, FF = cf->ffn_dim;
    const char *ce = "condition_embedder.";
    /* sizing: the slots of one scratch block and model */
    wan_block_t scratch;
    wf_wan_shard_t *m = s;
    wf_wan_shard_t none;
    if (!m) {
        memset(&none, 0, sizeof none);
        m = &none;
    }
    TRY(vec(c, &m->sst_out, "", "scale_shift_table", 2 * C));
    /* Conv3d with kernel = stride = patch_size: a linear over patches */
    TRY(lin(c, &m->patch, "", "patch_embedding", C,
            (int64_t)cf->in_channels * cf->patch_elems));
    TRY(lin(c, &m->t1, ce, "time_embedder.linear_1", C, cf->freq_dim));
    TRY(lin(c, &m->t2, ce, "time_embedder.linear_2", C, C));
    TRY(lin(c, &m->tproj, ce, "time_proj", 6 * C, C));
    TRY(lin(c, &m->x1, ce, "text_embedder.linear_1", C, cf->text_dim));
    TRY(lin(c, &m->x2, ce, "text_embedder.linear_2", C, C));
    if (cf->image_dim) {
        const int64_t I = cf->image_dim;
        const char *ie = "condition_embedder.image_embedder.";
        if (cf->pos_embed_seq_len)
            TRY(vec(c, &m->ie_pos, ie, "pos_embed", (int64_t)cf->pos_embed_seq_len * I));
        TRY(vec(c, &m->ie_n1w, ie, "norm1.weight", I));
        TRY(vec(c, &m->ie_n1b, ie, "norm1.bias", I));
        TRY(lin(c, &m->ie_ff0, ie, "ff.net.0.proj", I, I));
        TRY(lin(c, &m->ie_ff2, ie, "ff.net.2", C, I));
        TRY(vec(c, &m->ie_n2w, ie, "norm2.weight", C));
        TRY(vec(c, &m->ie_n2b, ie, "norm2.bias", C));
    }
    char p[48];
    for (uint32_t b = 0; b < cf->num_layers; b++) {
        wan_block_t *k = s ? &s->blk[b] : &scratch;
        snprintf(p, sizeof p, "blocks.%" PRIu32 ".", b);
        TRY(vec(c, &k->sst, p, "scale_shift_table", 6 * C));
        static const char *const qkv1[3] = {"attn1.to_q", "attn1.to_k", "attn1.to_v"};
        static const char *const kv2[2] = {"attn2.to_k", "attn2.to_v"};
        static const char *const akv[2] = {"attn2.add_k_proj", "attn2.add_v_proj"};
        const int64_t o3[3] = {C, C, C};
        TRY(wf_shard_linear_group(c, p, 3, qkv1, o3, C, true, s ? &k->qkv1 : NULL));
        TRY(lin(c, &k->o1, p, "attn1.to_out.0", C, C));
        TRY(vec(c, &k->nq1, p, "attn1.norm_q.weight", C));
        TRY(vec(c, &k->nk1, p, "attn1.norm_k.weight", C));
        TRY(lin(c, &k->q2, p, "attn2.to_q", C, C));
        TRY(wf_shard_linear_group(c, p, 2, kv2, o3, C, true, s ? &k->kv2 : NULL));
        TRY(lin(c, &k->o2, p, "attn2.to_out.0", C, C));
        TRY(vec(c, &k->nq2, p, "attn2.norm_q.weight", C));
        TRY(vec(c, &k->nk2, p, "attn2.norm_k.weight", C));
        if (cf->added_kv_proj_dim) {
            TRY(wf_shard_linear_group(c, p, 2, akv, o3, cf->added_kv_proj_dim, true,
                                      s ? &k->akv : NULL));
            TRY(vec(c, &k->nak, p, "attn2.norm_added_k.weight", C));
        }
        if (cf->cross_attn_norm) {
            TRY(vec(c, &k->n2w, p, "norm2.weight", C));
            TRY(vec(c, &k->n2b, p, "norm2.bias", C));
        }
        TRY(lin(c, &k->ff0, p, "ffn.net.0.proj", FF, C));
        TRY(lin(c, &k->ff2, p, "ffn.net.2", C, FF));
    }
    return lin(c, &m->proj_out, "", "proj_out", (int64_t)cf->out_channels * cf->patch_elems, C);
}

uint64_t wan_shard_bytes(const wf_wan_config_t *cfg, const wf_tp_plan_t *plan, int tp,
                         bool device, wf_dtype_t weight_dtype)
{
    if (wan_plan_check(cfg, plan, tp, true, NULL, 0) != WF_OK)
        return 0;
    cut_arg_t a = { cfg, NULL };
    return wf_shard_size(plan, tp, device, weight_dtype, cut_walk, &a);
}

wf_status_t wan_shard_build(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                            int tp_rank, const wf_backend_ops_t *ops, wf_backend_ctx_t *ctx,
                            wf_wan_shard_t **ret, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !ret || host->cfg.fam != &wf_wan_family || tp < 1 || tp_rank < 0 ||
        tp_rank >= tp)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "bad shard arguments (tp %d, rank %d)", tp, tp_rank);
    wf_status_t st = wan_plan_check(wf_wan_cfg(&host->cfg), plan, tp, true, err, err_len);
    if (st != WF_OK)
        return st;
    wf_wan_shard_t *s = calloc(1, sizeof *s);
    if (!s)
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    s->cfg = *wf_wan_cfg(&host->cfg);
    s->tp = tp;
    s->tp_rank = tp_rank;
    s->blk = calloc(s->cfg.num_layers, sizeof *s->blk);
    if (!s->blk) {
        wan_shard_free(&s);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    cut_arg_t a = { &s->cfg, s };
    st = wf_shard_cut_run(host, plan, tp, tp_rank, ops, ctx, cut_walk, &a, &s->mem, err,
                          err_len);
    if (st != WF_OK) {
        wan_shard_free(&s);
        return st;
    }
    *ret = s;
    return WF_OK;
}

void wan_shard_free(wf_wan_shard_t **s)
{
    if (!s || !*s)
        return;
    wf_shard_mem_free(&(*s)->mem);
    free((*s)->blk);
    free(*s);
    *s = NULL;
}
