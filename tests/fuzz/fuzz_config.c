/* fuzz_config.c — libFuzzer target for config.json: the family table and
 * every family's parser (modelfiles/family.c, flux/, wan/).
 *
 * The input is config.json's text, parsed with and without diffusers'
 * defaults (wf_model_cfg_parse). A refusal must leave no family and say
 * why; an accepted config is walked through its family's whole pure half,
 * each result checked against the contract the daemon relies on:
 *   - expected_tensors: names NUL-terminated and not empty, ranks 1..5,
 *     every dim > 0;
 *   - schema: at most 8 inputs (a cluster's forward descriptor), ranks
 *     1..WF_MAX_RANK, each dim a fixed size > 0 or a named size;
 *   - default_plan: passes wf_tp_plan_check;
 *   - public_config: within WF_MODEL_CONFIG_MAX;
 *   - flops: on a binding of tensors built from the schema (every named
 *     size 3), any value, no undefined behaviour.
 * A violation aborts (a crash libFuzzer reports).
 *
 * clang -fsanitize=fuzzer,address,undefined ... ; run with
 *   -max_total_time=60 -malloc_limit_mb=512 -rss_limit_mb=1536
 *   -dict=tests/fuzz/config.dict CORPUS tests/fixtures config seeds
 */
#include "family.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tensors(const wf_model_cfg_t *cfg)
{
    char err[512];
    wf_tensor_spec_t *s = NULL;
    size_t n = 0;
    if (cfg->fam->expected_tensors(wf_model_cfg_data(cfg), &s, &n, err, sizeof err) != WF_OK)
        return; /* out of memory only */
    for (size_t i = 0; i < n; i++) {
        if (memchr(s[i].name, '\0', sizeof s[i].name) == NULL || s[i].name[0] == '\0' ||
            s[i].rank < 1 || s[i].rank > WF_TENSOR_MAX_DIMS)
            abort();
        for (int d = 0; d < s[i].rank; d++)
            if (s[i].shape[d] <= 0)
                abort();
    }
    free(s);
}

/* The schema's inputs as tensors (named sizes 3), bound; the flops of it. */
static void check_schema(const wf_model_cfg_t *cfg, uint64_t params)
{
    wf_model_schema_t s;
    cfg->fam->schema(wf_model_cfg_data(cfg), &s);
    if (s.n_inputs < 1 || s.n_inputs > 8 || s.n_outputs < 1 ||
        s.n_outputs > WF_SCHEMA_MAX_OUTPUTS)
        abort();
    wf_tensor_desc_t t[WF_SCHEMA_MAX_INPUTS];
    uint32_t n = 0;
    bool fits = true;
    for (uint32_t i = 0; i < s.n_inputs; i++) {
        const wf_schema_tensor_t *x = &s.inputs[i];
        if (x->rank < 1 || x->rank > WF_MAX_RANK || x->name[0] == '\0' ||
            memchr(x->name, '\0', sizeof x->name) == NULL)
            abort();
        memset(&t[n], 0, sizeof t[n]);
        memcpy(t[n].name, x->name, strlen(x->name) + 1);
        t[n].dtype = WF_DTYPE_F32;
        t[n].rank = (int)x->rank;
        for (uint32_t d = 0; d < x->rank; d++) {
            if (x->dim[d].size < 0 || (x->dim[d].size == 0 && x->dim[d].sym[0] == '\0'))
                abort();
            t[n].shape[d] = x->dim[d].size > 0 ? x->dim[d].size : 3;
        }
        fits = fits && wf_tensor_desc_finish(&t[n]) == WF_OK;
        n++;
    }
    char err[512];
    wf_schema_binding_t b;
    if (fits && wf_schema_bind(&s, "fuzz", t, n, &b, err, sizeof err) == WF_OK) {
        volatile uint64_t f = cfg->fam->flops(wf_model_cfg_data(cfg), params, &b);
        (void)f;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > WF_MODEL_CONFIG_MAX_BYTES)
        return 0;
    for (unsigned flags = 0; flags <= WF_CONFIG_DIFFUSERS_DEFAULTS; flags++) {
        char err[512] = "";
        wf_model_cfg_t cfg;
        wf_status_t st = wf_model_cfg_parse((const char *)data, size, flags, "config.json",
                                            &cfg, err, sizeof err);
        if (st != WF_OK) {
            if (cfg.fam != NULL || err[0] == '\0')
                abort();
            continue;
        }
        if (cfg.fam == NULL)
            abort();
        check_tensors(&cfg);
        check_schema(&cfg, 1000);
        wf_tp_plan_t plan;
        cfg.fam->default_plan(wf_model_cfg_data(&cfg), &plan);
        if (wf_tp_plan_check(&plan, err, sizeof err) != WF_OK)
            abort();
        wf_model_config_t pc;
        cfg.fam->public_config(wf_model_cfg_data(&cfg), &pc);
        if (pc.n > WF_MODEL_CONFIG_MAX)
            abort();
    }
    return 0;
}
