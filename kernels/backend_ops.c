/* backend_ops.c — which ops a backend's table has (backend.h
 * wf_backend_supports / wf_backend_require): one row per op of
 * wf_backend_op_t, its name and whether its entries are filled. No
 * compute, no logging: a caller that gets WF_E_UNSUPPORTED words the
 * message with wf_backend_op_name. */
#include "backend.h"

#include <stddef.h>

static const char *const op_names[WF_BACKEND_OP_COUNT] = {
    [WF_BACKEND_OP_ATTENTION] = "attention",
    [WF_BACKEND_OP_LINEAR] = "linear",
    [WF_BACKEND_OP_BIAS_ACT] = "bias_act",
    [WF_BACKEND_OP_ACT] = "act",
    [WF_BACKEND_OP_ADD] = "add",
    [WF_BACKEND_OP_MODLN] = "modln",
    [WF_BACKEND_OP_GATE_RESIDUAL] = "gate_residual",
    [WF_BACKEND_OP_HEAD_NORM_ROPE] = "head_norm_rope",
    [WF_BACKEND_OP_ROPE_TABLE] = "rope_table",
    [WF_BACKEND_OP_TIMESTEP_PROJ] = "timestep_proj",
    [WF_BACKEND_OP_COPY_ROWS] = "copy_rows",
    [WF_BACKEND_OP_RMS_SUMSQ] = "rms_sumsq",
    [WF_BACKEND_OP_RMS_NORM] = "rms_norm",
    [WF_BACKEND_OP_LAYER_NORM] = "layer_norm",
    [WF_BACKEND_OP_ROPE_GRID] = "rope_grid",
    [WF_BACKEND_OP_TIMESTEP_EMBED] = "timestep_embed",
    [WF_BACKEND_OP_AXPY] = "axpy",
    [WF_BACKEND_OP_CHANGE_SUMS] = "change_sums",
};

bool wf_backend_supports(const wf_backend_ops_t *o, wf_backend_op_t op)
{
    if (!o)
        return false;
    switch (op) {
    case WF_BACKEND_OP_ATTENTION: return o->attention && o->attention_workspace;
    case WF_BACKEND_OP_LINEAR: return o->linear && o->linear_workspace;
    case WF_BACKEND_OP_BIAS_ACT: return o->bias_act != NULL;
    case WF_BACKEND_OP_ACT: return o->act != NULL;
    case WF_BACKEND_OP_ADD: return o->add != NULL;
    case WF_BACKEND_OP_MODLN: return o->modln != NULL;
    case WF_BACKEND_OP_GATE_RESIDUAL: return o->gate_residual != NULL;
    case WF_BACKEND_OP_HEAD_NORM_ROPE: return o->head_norm_rope != NULL;
    case WF_BACKEND_OP_ROPE_TABLE: return o->rope_table != NULL;
    case WF_BACKEND_OP_TIMESTEP_PROJ: return o->timestep_proj != NULL;
    case WF_BACKEND_OP_COPY_ROWS: return o->copy_rows != NULL;
    case WF_BACKEND_OP_RMS_SUMSQ: return o->rms_sumsq != NULL;
    case WF_BACKEND_OP_RMS_NORM: return o->rms_norm != NULL;
    case WF_BACKEND_OP_LAYER_NORM: return o->layer_norm != NULL;
    case WF_BACKEND_OP_ROPE_GRID: return o->rope_grid != NULL;
    case WF_BACKEND_OP_TIMESTEP_EMBED: return o->timestep_embed != NULL;
    case WF_BACKEND_OP_AXPY: return o->axpy != NULL;
    case WF_BACKEND_OP_CHANGE_SUMS: return o->change_sums != NULL;
    case WF_BACKEND_OP_COUNT: break;
    }
    return false;
}

const char *wf_backend_op_name(wf_backend_op_t op)
{
    return (unsigned)op < WF_BACKEND_OP_COUNT ? op_names[op] : "?";
}

wf_status_t wf_backend_require(const wf_backend_ops_t *ops, const wf_backend_op_t *need,
                               size_t n, wf_backend_op_t *ret_missing)
{
    for (size_t i = 0; i < n; i++)
        if (!wf_backend_supports(ops, need[i])) {
            if (ret_missing)
                *ret_missing = need[i];
            return WF_E_UNSUPPORTED;
        }
    return WF_OK;
}
