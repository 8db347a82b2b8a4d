/* wan_shard.c — the tp plan check of a Wan model and a rank's shard cut
 * from the host copy (wan_run.h). CPU backend: every piece f32 in host
 * memory, a view into the host copy where it is already f32 (the
 * daemon's CPU registry converts it: wf_model_host_to_f32), else the
 * shard's own converted copy. */
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
    if (tp > 1)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                              "%s: tensor parallelism is not implemented for the Wan family "
                              "yet (tp = %d): load it with tp = 1 (ring and ulysses sequence "
                              "parallelism are served)", WF_WAN_CLASS_NAME, tp);
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
    if (!allow_unmatched)
        for (uint32_t r = 0; r < plan->n; r++)
            if (!matched[r])
                return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                      "tp_plan rule '%s' matches no linear layer of this model",
                                      plan->rules[r].glob);
    if (err && err_len)
        err[0] = '\0';
    return WF_OK;
}

uint64_t wan_shard_bytes(const wf_wan_config_t *cfg, const wf_tp_plan_t *plan, int tp)
{
    char err[256];
    if (wan_plan_check(cfg, plan, tp, true, err, sizeof err) != WF_OK)
        return 0;
    wf_tensor_spec_t *specs = NULL;
    size_t n = 0;
    if (wf_wan_expected_tensors(cfg, &specs, &n, err, sizeof err) != WF_OK)
        return 0;
    uint64_t b = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t e = 1;
        for (int d = 0; d < specs[i].rank; d++)
            e *= (uint64_t)specs[i].shape[d];
        b += e * sizeof(float);
    }
    free(specs);
    return b;
}

/* State of one build. */
typedef struct build {
    const wf_model_host_t *host;   /* the host copy */
    wf_wan_shard_t *s;             /* the shard being built */
    size_t cap;                    /* entries allocated in s->owned */
    char *err;                     /* message buffer */
    size_t err_len;                /* its size */
} build_t;

/* The f32 data of host tensor `name` of `numel` elements (a view, or a
 * converted copy the shard owns); NULL with a message. */
static const float *piece(build_t *bd, const char *name, uint64_t numel)
{
    const wf_host_tensor_t *t = wf_model_host_find(bd->host, name);
    uint64_t have = 1;
    for (int d = 0; t && d < t->rank; d++)
        have *= (uint64_t)t->shape[d];
    if (!t || !t->data || have != numel) {
        wf_errf(bd->err, bd->err_len, "host copy %s tensor '%s'%s",
                t ? "has the wrong size of" : "lacks", name,
                t ? " for this config" : "");
        return NULL;
    }
    bd->s->bytes += numel * sizeof(float);
    if (t->dtype == WF_DTYPE_F32)
        return t->data;
    if (bd->s->n_owned == bd->cap) {
        size_t cap = bd->cap ? 2 * bd->cap : 64;
        float **o = realloc(bd->s->owned, cap * sizeof *o);
        if (!o)
            goto oom;
        bd->s->owned = o;
        bd->cap = cap;
    }
    float *f = aligned_alloc(64, ((size_t)numel * sizeof(float) + 63) & ~(size_t)63);
    if (!f)
        goto oom;
    wf_convert_to_f32(f, t->data, t->dtype, (size_t)numel);
    bd->s->owned[bd->s->n_owned++] = f;
    return f;
oom:
    wf_errf(bd->err, bd->err_len, "out of memory converting tensor '%s' to f32", name);
    return NULL;
}

/* Linear `module` [out, in] (+ bias) into l; false with a message. */
static bool lin(build_t *bd, wan_lin_t *l, const char *prefix, const char *module,
                int64_t out, int64_t in)
{
    char n[WF_TENSOR_SPEC_NAME_MAX];
    l->out = out;
    l->in = in;
    snprintf(n, sizeof n, "%s%s.weight", prefix, module);
    if (!(l->w = piece(bd, n, (uint64_t)out * (uint64_t)in)))
        return false;
    snprintf(n, sizeof n, "%s%s.bias", prefix, module);
    return (l->b = piece(bd, n, (uint64_t)out)) != NULL;
}

static bool vec(build_t *bd, const float **v, const char *prefix, const char *name,
                int64_t n)
{
    char t[WF_TENSOR_SPEC_NAME_MAX];
    snprintf(t, sizeof t, "%s%s", prefix, name);
    return (*v = piece(bd, t, (uint64_t)n)) != NULL;
}

static bool build(build_t *bd)
{
    wf_wan_shard_t *s = bd->s;
    const wf_wan_config_t *c = &s->cfg;
    const int64_t C = c->inner_dim, FF = c->ffn_dim;
    const char *ce = "condition_embedder.";
    bool ok = vec(bd, &s->sst_out, "", "scale_shift_table", 2 * C);
    /* Conv3d with kernel = stride = patch_size: a linear over patches */
    if (ok) {
        s->patch.out = C;
        s->patch.in = (int64_t)c->in_channels * c->patch_elems;
        ok = (s->patch.w = piece(bd, "patch_embedding.weight",
                                 (uint64_t)s->patch.out * (uint64_t)s->patch.in)) &&
             (s->patch.b = piece(bd, "patch_embedding.bias", (uint64_t)C));
    }
    ok = ok && lin(bd, &s->t1, ce, "time_embedder.linear_1", C, c->freq_dim) &&
         lin(bd, &s->t2, ce, "time_embedder.linear_2", C, C) &&
         lin(bd, &s->tproj, ce, "time_proj", 6 * C, C) &&
         lin(bd, &s->x1, ce, "text_embedder.linear_1", C, c->text_dim) &&
         lin(bd, &s->x2, ce, "text_embedder.linear_2", C, C);
    char p[48];
    for (uint32_t b = 0; ok && b < c->num_layers; b++) {
        wan_block_t *k = &s->blk[b];
        snprintf(p, sizeof p, "blocks.%" PRIu32 ".", b);
        ok = vec(bd, &k->sst, p, "scale_shift_table", 6 * C) &&
             lin(bd, &k->q1, p, "attn1.to_q", C, C) && lin(bd, &k->k1, p, "attn1.to_k", C, C) &&
             lin(bd, &k->v1, p, "attn1.to_v", C, C) &&
             lin(bd, &k->o1, p, "attn1.to_out.0", C, C) &&
             vec(bd, &k->nq1, p, "attn1.norm_q.weight", C) &&
             vec(bd, &k->nk1, p, "attn1.norm_k.weight", C) &&
             lin(bd, &k->q2, p, "attn2.to_q", C, C) && lin(bd, &k->k2, p, "attn2.to_k", C, C) &&
             lin(bd, &k->v2, p, "attn2.to_v", C, C) &&
             lin(bd, &k->o2, p, "attn2.to_out.0", C, C) &&
             vec(bd, &k->nq2, p, "attn2.norm_q.weight", C) &&
             vec(bd, &k->nk2, p, "attn2.norm_k.weight", C) &&
             (!c->cross_attn_norm || (vec(bd, &k->n2w, p, "norm2.weight", C) &&
                                      vec(bd, &k->n2b, p, "norm2.bias", C))) &&
             lin(bd, &k->ff0, p, "ffn.net.0.proj", FF, C) &&
             lin(bd, &k->ff2, p, "ffn.net.2", C, FF);
    }
    return ok && lin(bd, &s->proj_out, "", "proj_out",
                     (int64_t)c->out_channels * c->patch_elems, C);
}

wf_status_t wan_shard_build(const wf_model_host_t *host, const wf_tp_plan_t *plan, int tp,
                            int tp_rank, wf_wan_shard_t **ret, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = '\0';
    if (!host || !plan || !ret || host->cfg.fam != &wf_wan_family || tp_rank < 0 ||
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
    build_t bd = { host, s, 0, err, err_len };
    if (!s->blk) {
        wan_shard_free(&s);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    if (!build(&bd)) {
        wan_shard_free(&s);
        return WF_E_MALFORMED;
    }
    *ret = s;
    return WF_OK;
}

void wan_shard_free(wf_wan_shard_t **s)
{
    if (!s || !*s)
        return;
    for (size_t i = 0; i < (*s)->n_owned; i++)
        free((*s)->owned[i]);
    free((*s)->owned);
    free((*s)->blk);
    free(*s);
    *s = NULL;
}
