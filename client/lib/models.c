/* models.c — libweft's resident-model calls (weft.h): load_model,
 * unload_model, list_models and forward, on the connection and job
 * machinery of client.c (client_impl.h).
 */
#include "client_impl.h"

#include <math.h>
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

/* The tensor `name` of a list, or NULL; dup: it appears twice. */
static const wf_named_tensor_t *find_named(const wf_named_tensor_t *t, size_t n,
                                           const char *name, size_t skip)
{
    for (size_t i = 0; i < n; i++)
        if (i != skip && t[i].name && strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

/* Names and descriptors of a forward's inputs or outputs: what the
 * request can carry is checked here (a NULL, a name too long or twice,
 * too many tensors); whether they fit the model is the daemon's to judge
 * against its schema (list_models), with its code and message. */
static wf_status_t check_named(wf_client_t *c, const char *what,
                               const wf_named_tensor_t *t, size_t n, size_t max,
                               size_t *bytes)
{
    if (n > 0 && !t)
        return fail(c, WF_E_BAD_ARGUMENT, "%s is NULL with %zu tensors", what, n);
    if (n > max)
        return fail(c, WF_E_BAD_ARGUMENT, "%zu %s, at most %zu", n, what, max);
    for (size_t i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0])
            return fail(c, WF_E_BAD_ARGUMENT, "%s[%zu] has no name", what, i);
        if (strnlen(t[i].name, WF_PROTO_NAME_MAX) >= WF_PROTO_NAME_MAX)
            return fail(c, WF_E_BAD_ARGUMENT, "%s[%zu]: name longer than %d bytes",
                        what, i, WF_PROTO_NAME_MAX - 1);
        if (find_named(t, i, t[i].name, SIZE_MAX))
            return fail(c, WF_E_BAD_ARGUMENT, "%s: \"%s\" appears twice", what,
                        t[i].name);
        const wf_tensor_t *x = t[i].tensor;
        wf_status_t st = wfc_check_tensor(c, "forward", t[i].name, x,
                                          x ? x->rank : 0, &bytes[i]);
        if (st != WF_OK)
            return st;
        if (x->rank < 1 || x->rank > WF_MAX_RANK)
            return fail(c, WF_E_BAD_ARGUMENT, "%s has rank %d (1..%d)", t[i].name,
                        x->rank, WF_MAX_RANK);
    }
    return WF_OK;
}

wf_status_t wf_forward_named_submit(wf_client_t *client, const char *model,
                                    const wf_named_tensor_t *inputs, size_t n_inputs,
                                    const wf_named_tensor_t *outputs, size_t n_outputs,
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
    size_t bytes[WF_PROTO_MAX_TENSORS] = { 0 }, obytes[JOB_MAX_OUTPUTS] = { 0 };
    if ((st = check_named(c, "inputs", inputs, n_inputs, WF_PROTO_MAX_TENSORS,
                          bytes)) != WF_OK ||
        (st = check_named(c, "outputs", outputs, n_outputs, JOB_MAX_OUTPUTS,
                          obytes)) != WF_OK)
        return st;
    if (n_outputs == 0)
        return fail(c, WF_E_BAD_ARGUMENT, "a forward needs an output buffer");
    /* one out_dtype on the wire: every output comes converted to it */
    for (size_t i = 1; i < n_outputs; i++)
        if (outputs[i].tensor->dtype != outputs[0].tensor->dtype)
            return fail(c, WF_E_BAD_ARGUMENT, "outputs %s and %s differ in dtype",
                        outputs[0].name, outputs[i].name);
    /* last: they may ask the daemon (a hello) */
    if (opts && (st = wfc_check_precision(c, opts->precision)) != WF_OK)
        return st;
    /* a session where announced (WF_E_UNSUPPORTED elsewhere, nothing sent) */
    if (opts && opts->session) {
        if (!isfinite(opts->cache_threshold) || opts->cache_threshold < 0)
            return fail(c, WF_E_BAD_ARGUMENT, "cache_threshold %g: a finite number >= 0",
                        opts->cache_threshold);
        if ((st = wfc_need_feature(c, WF_FEATURE_SESSIONS, "sessions", "session")) != WF_OK)
            return st;
    } else if (opts && (opts->step || opts->cache_threshold != 0)) {
        return fail(c, WF_E_BAD_ARGUMENT, "step and cache_threshold need a session");
    }
    /* split_batch only where announced: elsewhere the job runs unsplit,
     * which gives the same output */
    bool split = false;
    if (opts && opts->split_batch) {
        if (!c->hello_ok && (st = wf_hello(c, NULL)) != WF_OK)
            return st;
        split = (c->features & WF_FEATURE_SPLIT_BATCH) != 0;
    }

    wf_job_t *job = calloc(1, sizeof *job);
    if (!job)
        return fail(c, WF_E_NO_MEMORY, "cannot allocate a job");
    job->client = c;
    job->kind = JOB_FORWARD;
    job->id = c->next_id++;
    atomic_init(&job->frames_out, 0);
    job->status = WF_E_PENDING;
    job->result.status = WF_E_PENDING;
    job->n_outputs = (uint32_t)n_outputs;
    for (size_t i = 0; i < n_outputs; i++) {
        const wf_tensor_t *o = outputs[i].tensor;
        job_output_t *x = &job->outputs[i];
        snprintf(x->name, sizeof x->name, "%s", outputs[i].name);
        x->dtype = o->dtype;
        x->rank = o->rank;
        x->dst = o->data;
        memcpy(x->shape, o->shape, (size_t)o->rank * sizeof(int64_t));
    }

    wf_request_t *req = wfc_request_begin(c, JOB_FORWARD);
    req->id = job->id;
    req->n_tensors = (uint32_t)n_inputs;
    void *data[WF_PROTO_MAX_TENSORS];
    for (size_t i = 0; i < n_inputs; i++) {
        wfc_fill_desc(&req->tensors[i], inputs[i].name, inputs[i].tensor, (uint32_t)i);
        data[i] = inputs[i].tensor->data; /* sent without a copy, only read */
    }
    wf_forward_args_t *a = &req->args.forward;
    snprintf(a->model, sizeof a->model, "%s", model);
    a->has_out_dtype = true;
    a->out_dtype = outputs[0].tensor->dtype;
    a->deadline_ms = opts ? opts->deadline_ms : 0;
    a->fp8 = opts && opts->precision == WF_PRECISION_FP8;
    a->split_batch = split;
    if (opts && opts->session) {
        a->session = opts->session;
        a->step = opts->step;
        a->has_step = true;
        a->cache_threshold = opts->cache_threshold;
    }

    st = wfc_send_request(c, job, (int)n_inputs, data, bytes, deadline);
    if (st != WF_OK) {
        free(job);
        return st;
    }
    wfc_job_link(c, job);
    c->last_error[0] = '\0';
    *ret_job = job;
    return WF_OK;
}

wf_status_t wf_forward_named(wf_client_t *client, const char *model,
                             const wf_named_tensor_t *inputs, size_t n_inputs,
                             const wf_named_tensor_t *outputs, size_t n_outputs,
                             const wf_forward_opts_t *opts, wf_job_result_t *ret_result)
{
    wf_job_t *job = NULL;
    int64_t deadline = wfc_deadline_after(client ? client->timeout_ms : 0);
    wf_status_t st = wf_forward_named_submit(client, model, inputs, n_inputs, outputs,
                                             n_outputs, opts, &job);
    if (st != WF_OK)
        return st;
    return wfc_sync_finish(client, job, deadline, ret_result);
}

/* FLUX's inputs as named tensors (guidance only when given). */
static size_t flux_named(const wf_flux_inputs_t *in, wf_named_tensor_t *t)
{
    size_t n = 0;
    t[n++] = (wf_named_tensor_t){ "hidden_states", in->hidden_states };
    t[n++] = (wf_named_tensor_t){ "encoder_hidden_states", in->encoder_hidden_states };
    t[n++] = (wf_named_tensor_t){ "pooled_projections", in->pooled_projections };
    t[n++] = (wf_named_tensor_t){ "timestep", in->timestep };
    t[n++] = (wf_named_tensor_t){ "img_ids", in->img_ids };
    t[n++] = (wf_named_tensor_t){ "txt_ids", in->txt_ids };
    if (in->guidance)
        t[n++] = (wf_named_tensor_t){ "guidance", in->guidance };
    return n;
}

wf_status_t wf_forward_submit(wf_client_t *client, const char *model,
                              const wf_flux_inputs_t *in, wf_tensor_t *output,
                              const wf_forward_opts_t *opts, wf_job_t **ret_job)
{
    if (client && !in)
        return fail(client, WF_E_BAD_ARGUMENT, "inputs are NULL");
    wf_named_tensor_t t[7];
    size_t n = in ? flux_named(in, t) : 0;
    wf_named_tensor_t out = { "output", output };
    return wf_forward_named_submit(client, model, t, n, &out, 1, opts, ret_job);
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
