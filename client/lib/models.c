/* models.c — libweft's resident-model calls (weft.h): load_model,
 * unload_model, list_models and forward, on the connection and job
 * machinery of client.c (client_impl.h).
 */
#include "client_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- resident models -------------------------------------------------- */

/* A string argument that must fit the request's fixed array of `cap`
 * bytes. Only that is checked here: the daemon checks the field rules
 * (PROTOCOL.md 12.1) and refuses with its own code and message, as
 * weft.h promises. */
static wf_status_t check_str(wf_client_t *c, const char *what, const char *s,
                             size_t cap)
{
    if (!s)
        return fail(c, WF_E_BAD_ARGUMENT, "%s is NULL", what);
    size_t n = strnlen(s, cap);
    if (n >= cap)
        return fail(c, WF_E_BAD_ARGUMENT, "%s \"%.32s...\" is longer than %zu bytes",
                    what, s, cap - 1);
    return WF_OK;
}

wf_status_t wf_load_model(wf_client_t *client, const char *name, const char *path,
                          const wf_load_opts_t *opts, wf_model_info_t *ret_info)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wf_client_t *c = client;
    wf_status_t st;
    /* What the request cannot carry is refused here (WF_E_BAD_ARGUMENT); the
     * rest (name bytes, a path leaving the root, plan semantics) is the
     * daemon's to refuse, with its code and message. */
    if ((st = check_str(c, "name", name, WF_MODEL_NAME_MAX)) != WF_OK ||
        (st = check_str(c, "path", path, WF_MODEL_PATH_LEN)) != WF_OK)
        return st;
    uint32_t n_plan = opts ? opts->n_plan : 0;
    if (n_plan > WF_TP_MAX_RULES)
        return fail(c, WF_E_BAD_ARGUMENT, "the plan has %u rules, at most %d", n_plan,
                    WF_TP_MAX_RULES);
    if (n_plan > 0 && !opts->plan)
        return fail(c, WF_E_BAD_ARGUMENT, "opts->plan is NULL with n_plan %u", n_plan);
    for (uint32_t i = 0; i < n_plan; i++) {
        const wf_tp_rule_t *r = &opts->plan[i];
        if (strnlen(r->glob, WF_TP_GLOB_MAX) == WF_TP_GLOB_MAX)
            return fail(c, WF_E_BAD_ARGUMENT, "plan rule %u: glob without a NUL in its "
                        "%d bytes", i, WF_TP_GLOB_MAX);
        if (!wf_tp_style_name(r->style))
            return fail(c, WF_E_BAD_ARGUMENT, "plan rule %u: style %d is not a "
                        "wf_tp_style_t", i, (int)r->style);
        if (r->n_blocks > WF_TP_MAX_BLOCKS)
            return fail(c, WF_E_BAD_ARGUMENT, "plan rule %u: %u blocks, at most %d", i,
                        r->n_blocks, WF_TP_MAX_BLOCKS);
    }

    wf_load_model_args_t *a = &wfc_request_begin(c, JOB_LOAD_MODEL)->args.load_model;
    snprintf(a->name, sizeof a->name, "%s", name);
    snprintf(a->path, sizeof a->path, "%s", path);
    a->n_plan = n_plan;
    if (n_plan > 0)
        memcpy(a->plan, opts->plan, n_plan * sizeof(wf_tp_rule_t));
    a->weights_already_sharded = opts && opts->weights_already_sharded;
    /* The reply comes once the model is resident on every rank: as long
     * as reading the checkpoint takes, within the client's timeout. */
    st = wfc_simple_call(c, JOB_LOAD_MODEL, &c->models);
    if (st == WF_OK && ret_info)
        *ret_info = c->models.models[0];
    return st;
}

wf_status_t wf_unload_model(wf_client_t *client, const char *name)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wf_status_t st = check_str(client, "name", name, WF_MODEL_NAME_MAX);
    if (st != WF_OK)
        return st;
    wf_unload_model_args_t *a = &wfc_request_begin(client, JOB_UNLOAD_MODEL)->args.unload_model;
    snprintf(a->name, sizeof a->name, "%s", name);
    return wfc_simple_call(client, JOB_UNLOAD_MODEL, NULL);
}

wf_status_t wf_list_models(wf_client_t *client, wf_model_info_t *ret, size_t cap,
                           size_t *ret_n)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    if (!ret_n)
        return fail(client, WF_E_BAD_ARGUMENT, "ret_n is NULL");
    if (!ret && cap > 0)
        return fail(client, WF_E_BAD_ARGUMENT, "ret is NULL with cap %zu", cap);
    wfc_request_begin(client, JOB_LIST_MODELS);
    wf_status_t st = wfc_simple_call(client, JOB_LIST_MODELS, &client->models);
    if (st != WF_OK)
        return st;
    size_t n = client->models.n;
    if (cap > 0)
        memcpy(ret, client->models.models, (n < cap ? n : cap) * sizeof *ret);
    *ret_n = n;
    return WF_OK;
}

/* The inputs of a forward in wire order, with their ranks. */
enum { FWD_HS, FWD_EHS, FWD_POOLED, FWD_T, FWD_IMG, FWD_TXT, FWD_GUIDANCE, FWD_N };
static const char *const fwd_names[FWD_N] = {
    "hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
    "img_ids", "txt_ids", "guidance"
};
static const int fwd_ranks[FWD_N] = { 3, 3, 2, 1, 2, 2, 1 };

wf_status_t wf_forward_submit(wf_client_t *client, const char *model,
                              const wf_flux_inputs_t *in, wf_tensor_t *output,
                              const wf_forward_opts_t *opts, wf_job_t **ret_job)
{
    if (!client)
        return WF_E_BAD_ARGUMENT;
    wf_client_t *c = client;
    if (!ret_job)
        return fail(c, WF_E_BAD_ARGUMENT, "ret_job is NULL");
    int64_t deadline = wfc_deadline_after(c->timeout_ms);
    wf_status_t st = check_str(c, "model", model, WF_MODEL_NAME_MAX);
    if (st != WF_OK)
        return st;
    if (!in)
        return fail(c, WF_E_BAD_ARGUMENT, "inputs are NULL");

    /* Validate the tensors here, as the daemon's decoder will (and as
     * attention does), so that a mistake costs no round trip and sends
     * nothing; the model name is the daemon's to judge. */
    const wf_tensor_t *t[FWD_N] = { in->hidden_states, in->encoder_hidden_states,
                                    in->pooled_projections, in->timestep, in->img_ids,
                                    in->txt_ids, in->guidance };
    size_t bytes[FWD_N] = { 0 }, ob = 0;
    int n = t[FWD_GUIDANCE] ? FWD_N : FWD_N - 1;
    for (int i = 0; i < n; i++)
        if ((st = wfc_check_tensor(c, "forward", fwd_names[i], t[i], fwd_ranks[i],
                               &bytes[i])) != WF_OK)
            return st;
    if ((st = wfc_check_tensor(c, "forward", "output", output, 3, &ob)) != WF_OK)
        return st;
    int64_t B = t[FWD_HS]->shape[0];
    static const int batched[] = { FWD_EHS, FWD_POOLED, FWD_T, FWD_GUIDANCE };
    for (size_t j = 0; j < sizeof batched / sizeof batched[0]; j++) {
        int i = batched[j];
        if (i < n && t[i]->shape[0] != B)
            return fail(c, WF_E_BAD_ARGUMENT, "batch of %s (%lld) and hidden_states (%lld) "
                        "differ", fwd_names[i], (long long)t[i]->shape[0], (long long)B);
    }
    if (t[FWD_IMG]->shape[0] != t[FWD_HS]->shape[1])
        return fail(c, WF_E_BAD_ARGUMENT, "img_ids has %lld rows, hidden_states %lld tokens",
                    (long long)t[FWD_IMG]->shape[0], (long long)t[FWD_HS]->shape[1]);
    if (t[FWD_TXT]->shape[0] != t[FWD_EHS]->shape[1])
        return fail(c, WF_E_BAD_ARGUMENT, "txt_ids has %lld rows, encoder_hidden_states "
                    "%lld tokens", (long long)t[FWD_TXT]->shape[0],
                    (long long)t[FWD_EHS]->shape[1]);
    if (t[FWD_IMG]->shape[1] != t[FWD_TXT]->shape[1])
        return fail(c, WF_E_BAD_ARGUMENT, "img_ids has %lld axes, txt_ids %lld",
                    (long long)t[FWD_IMG]->shape[1], (long long)t[FWD_TXT]->shape[1]);
    if (output->shape[0] != B || output->shape[1] != t[FWD_HS]->shape[1])
        return fail(c, WF_E_BAD_ARGUMENT, "output must be (B %lld, S_img %lld, C), got "
                    "(%lld, %lld, %lld)", (long long)B, (long long)t[FWD_HS]->shape[1],
                    (long long)output->shape[0], (long long)output->shape[1],
                    (long long)output->shape[2]);
    /* last: it may ask the daemon (a hello) */
    if (opts && (st = wfc_check_precision(c, opts->precision)) != WF_OK)
        return st;

    wf_job_t *job = calloc(1, sizeof *job);
    if (!job)
        return fail(c, WF_E_NO_MEMORY, "cannot allocate a job");
    job->client = c;
    job->kind = JOB_FORWARD;
    job->id = c->next_id++;
    atomic_init(&job->frames_out, 0);
    job->status = WF_E_PENDING;
    job->result.status = WF_E_PENDING;
    job->n_outputs = 1;
    job->outputs[0] = (job_output_t){ .name = "output", .dtype = output->dtype,
                                      .rank = 3, .dst = output->data };
    memcpy(job->outputs[0].shape, output->shape, 3 * sizeof(int64_t));

    wf_request_t *req = wfc_request_begin(c, JOB_FORWARD);
    req->id = job->id;
    req->n_tensors = (uint32_t)n;
    void *data[FWD_N];
    for (int i = 0; i < n; i++) {
        wfc_fill_desc(&req->tensors[i], fwd_names[i], t[i], (uint32_t)i);
        data[i] = t[i]->data; /* sent without a copy, only read */
    }
    wf_forward_args_t *a = &req->args.forward;
    snprintf(a->model, sizeof a->model, "%s", model);
    a->hidden_states = FWD_HS;
    a->encoder_hidden_states = FWD_EHS;
    a->pooled_projections = FWD_POOLED;
    a->timestep = FWD_T;
    a->img_ids = FWD_IMG;
    a->txt_ids = FWD_TXT;
    a->guidance = n == FWD_N ? FWD_GUIDANCE : -1;
    a->has_out_dtype = true;
    a->out_dtype = output->dtype;
    a->deadline_ms = opts ? opts->deadline_ms : 0;
    a->fp8 = opts && opts->precision == WF_PRECISION_FP8;

    st = wfc_send_request(c, job, n, data, bytes, deadline);
    if (st != WF_OK) {
        free(job);
        return st;
    }
    wfc_job_link(c, job);
    c->last_error[0] = '\0';
    *ret_job = job;
    return WF_OK;
}

wf_status_t wf_forward_ex(wf_client_t *client, const char *model,
                          const wf_flux_inputs_t *in, wf_tensor_t *output,
                          const wf_forward_opts_t *opts, wf_job_result_t *ret_result)
{
    wf_job_t *job = NULL;
    int64_t deadline = wfc_deadline_after(client ? client->timeout_ms : 0);
    wf_status_t st = wf_forward_submit(client, model, in, output, opts, &job);
    if (st != WF_OK)
        return st;
    return wfc_sync_finish(client, job, deadline, ret_result);
}

wf_status_t wf_forward(wf_client_t *client, const char *model,
                       const wf_flux_inputs_t *in, wf_tensor_t *output,
                       wf_job_result_t *ret_result)
{
    return wf_forward_ex(client, model, in, output, NULL, ret_result);
}
