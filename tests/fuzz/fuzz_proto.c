/* fuzz_proto.c — libFuzzer target for the header decoders.
 *
 * The first byte picks the decoder (even: request, odd: reply); the rest
 * is the header frame. Beyond "no crash, no leak, no huge allocation"
 * (run with -malloc_limit_mb=256 -rss_limit_mb=1024), every header that
 * decodes must survive encode -> decode unchanged, and a decoded request
 * must satisfy the invariants the daemon relies on. For the resident-model
 * ops (PROTOCOL.md section 12) those invariants are restated here from the
 * document, not by calling proto_check.h, so that a rule the checks get
 * wrong is caught rather than agreed with: names of [A-Za-z0-9._-], paths
 * relative without a ".." component, plan globs and rules well formed and
 * unique, forward tensors named, ranked and sized consistently.
 * Seeds: fuzz_seeds DIR; dictionary: proto.dict.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
    if (!cond)
        abort();
}

/* A NUL-terminated string within cap bytes; its length. */
static size_t cstr_len(const char *s, size_t cap)
{
    const char *nul = memchr(s, '\0', cap);
    check(nul != NULL);
    return (size_t)(nul - s);
}

/* PROTOCOL.md 12.1: a model name is 1..63 bytes of A-Z a-z 0-9 . _ - */
static void check_model_name(const char *s, size_t cap)
{
    size_t n = cstr_len(s, cap);
    check(n >= 1 && n <= 63);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        check((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-');
    }
}

/* A model path: 1..255 bytes, not absolute, no ".." component. */
static void check_model_path(const char *s, size_t cap)
{
    size_t n = cstr_len(s, cap);
    check(n >= 1 && n <= 255 && s[0] != '/');
    for (size_t i = 0; i <= n;) {
        size_t j = i;
        while (j < n && s[j] != '/')
            j++;
        check(!(j - i == 2 && s[i] == '.' && s[i + 1] == '.'));
        i = j + 1;
    }
}

/* A plan rule: glob of 1..127 bytes of A-Z a-z 0-9 _ . * without an empty
 * component; a known style; blocks (1..8, each > 0) iff packed. */
static void check_tp_rule(const wf_tp_rule_t *r)
{
    size_t n = cstr_len(r->glob, sizeof(r->glob));
    check(n >= 1 && n <= 127 && r->glob[0] != '.' && r->glob[n - 1] != '.');
    for (size_t i = 0; i < n; i++) {
        char c = r->glob[i];
        check((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '*');
        check(!(c == '.' && i + 1 < n && r->glob[i + 1] == '.'));
    }
    check(wf_tp_style_name(r->style) != NULL);
    bool packed = r->style == WF_TP_PACKED_COLWISE || r->style == WF_TP_PACKED_ROWWISE;
    if (!packed) {
        check(r->n_blocks == 0);
        return;
    }
    check(r->n_blocks >= 1 && r->n_blocks <= WF_TP_MAX_BLOCKS);
    for (uint32_t b = 0; b < r->n_blocks; b++)
        check(r->blocks[b] > 0);
}

static void check_load_model(const wf_request_t *req)
{
    const wf_load_model_args_t *a = &req->args.load_model;
    check(req->n_tensors == 0);
    check_model_name(a->name, sizeof(a->name));
    check_model_path(a->path, sizeof(a->path));
    check(a->n_plan <= WF_TP_MAX_RULES);
    for (uint32_t i = 0; i < a->n_plan; i++) {
        check_tp_rule(&a->plan[i]);
        for (uint32_t j = 0; j < i; j++)
            check(strcmp(a->plan[i].glob, a->plan[j].glob) != 0);
    }
}

/* A schema like FLUX's (modelfiles/flux/flux_family.c) with guidance
 * optional: fixed and named sizes, rank 1 to 3. */
static void fuzz_schema(wf_model_schema_t *s)
{
    static const struct { const char *name; uint32_t rank; int64_t size[3];
                          const char *sym[3]; bool optional; } in[] = {
        { "hidden_states", 3, { 0, 0, 4 }, { "B", "S_img", "in_channels" }, false },
        { "encoder_hidden_states", 3, { 0, 0, 32 }, { "B", "S_txt", "joint" }, false },
        { "pooled_projections", 2, { 0, 16 }, { "B", "pooled" }, false },
        { "timestep", 1, { 0 }, { "B" }, false },
        { "img_ids", 2, { 0, 3 }, { "S_img", "axes" }, false },
        { "txt_ids", 2, { 0, 3 }, { "S_txt", "axes" }, false },
        { "guidance", 1, { 0 }, { "B" }, true },
    };
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        wf_schema_tensor_t *t = &s->inputs[s->n_inputs++];
        snprintf(t->name, sizeof t->name, "%s", in[i].name);
        t->dtypes = 1u << WF_DTYPE_F32 | 1u << WF_DTYPE_BF16;
        t->optional = in[i].optional;
        t->rank = in[i].rank;
        for (uint32_t d = 0; d < t->rank; d++) {
            t->dim[d].size = in[i].size[d];
            snprintf(t->dim[d].sym, sizeof t->dim[d].sym, "%s", in[i].sym[d]);
        }
    }
    s->outputs[0] = s->inputs[0];
    s->n_outputs = 1;
}

/* forward: a model name, a dtype, at least one tensor (which tensors a
 * model takes is its schema's: wf_schema_bind, fuzzed here against a
 * FLUX-like schema). A binding that succeeds has every required input,
 * each tensor once, accepted dtypes, the schema's ranks and fixed sizes,
 * and one value per named size. */
static void check_forward(const wf_request_t *req)
{
    const wf_forward_args_t *a = &req->args.forward;
    check_model_name(a->model, sizeof(a->model));
    check(!a->has_out_dtype || wf_dtype_name(a->out_dtype) != NULL);
    check(req->n_tensors >= 1);
    static wf_model_schema_t s;
    static bool made;
    if (!made) {
        fuzz_schema(&s);
        made = true;
    }
    wf_schema_binding_t b;
    char err[WF_PROTO_ERROR_MAX];
    if (wf_schema_bind(&s, "m", req->tensors, req->n_tensors, &b, err, sizeof err) != WF_OK) {
        check(err[0] != '\0');
        return;
    }
    unsigned used = 0;
    for (uint32_t k = 0; k < s.n_inputs; k++) {
        const wf_schema_tensor_t *si = &s.inputs[k];
        if (b.in[k] < 0) {
            check(si->optional);
            continue;
        }
        check((uint32_t)b.in[k] < req->n_tensors && !(used & (1u << b.in[k])));
        used |= 1u << b.in[k];
        const wf_tensor_desc_t *t = &req->tensors[b.in[k]];
        check(strcmp(t->name, si->name) == 0 && (uint32_t)t->rank == si->rank);
        check(si->dtypes & (1u << t->dtype));
        for (uint32_t d = 0; d < si->rank; d++)
            check(si->dim[d].size > 0 ? t->shape[d] == si->dim[d].size
                                      : t->shape[d] == wf_schema_sym(&b, si->dim[d].sym));
    }
    check(__builtin_popcount(used) == (int)req->n_tensors);
    wf_tensor_desc_t out;
    check(wf_schema_output(&s, 0, &b, WF_DTYPE_F32, 0, &out, err, sizeof err) == WF_OK &&
          out.shape[0] == wf_schema_sym(&b, "B"));
}

/* Two MODEL maps equal as the wire carries them: C strings, uints, and
 * sharded_input as a flag (the decoder keeps a uint as sent, the encoder
 * sends a bool). */
static void check_same_model(const wf_model_info_t *x, const wf_model_info_t *y)
{
    check(strcmp(x->name, y->name) == 0 && strcmp(x->path, y->path) == 0 &&
          strcmp(x->family, y->family) == 0 && strcmp(x->state, y->state) == 0 &&
          strcmp(x->dtype, y->dtype) == 0);
    check(x->params == y->params && x->bytes_total == y->bytes_total &&
          x->bytes_loaded == y->bytes_loaded && x->host_bytes == y->host_bytes &&
          x->rank_bytes == y->rank_bytes && x->tp == y->tp && x->load_ms == y->load_ms);
    check((x->sharded_input != 0) == (y->sharded_input != 0));
    check(strcmp(x->device, y->device) == 0 && strcmp(x->compute, y->compute) == 0 &&
          (x->host_pinned != 0) == (y->host_pinned != 0));
}

static void fuzz_request(const uint8_t *data, size_t size)
{
    wf_limits_t lim;
    wf_request_t req, again;
    char err[WF_PROTO_ERROR_MAX];
    wf_limits_default(&lim);
    lim.max_tensor_bytes = 1u << 20;
    wf_status_t rc = wf_request_decode(data, size, &lim, &req, err, sizeof(err));
    check(memchr(err, '\0', sizeof(err)) != NULL);
    if (rc != WF_OK) {
        check(rc == WF_E_MALFORMED || rc == WF_E_VERSION || rc == WF_E_LIMIT ||
              rc == WF_E_UNKNOWN_OP || rc == WF_E_BAD_FIELD || rc == WF_E_BAD_DTYPE ||
              rc == WF_E_BAD_SHAPE || rc == WF_E_FRAME_MISMATCH || rc == WF_E_BAD_ARGUMENT);
        check(err[0] != '\0');
        return;
    }
    /* invariants: frames a permutation, sizes consistent and within limits */
    size_t frame_bytes[WF_PROTO_MAX_TENSORS];
    unsigned seen = 0;
    check(req.n_tensors <= lim.max_tensors);
    for (uint32_t i = 0; i < req.n_tensors; i++) {
        const wf_tensor_desc_t *t = &req.tensors[i];
        check(t->frame < req.n_tensors && !(seen & (1u << t->frame)));
        seen |= 1u << t->frame;
        check(t->nbytes <= lim.max_tensor_bytes && t->nbytes == t->numel * wf_dtype_size(t->dtype));
        frame_bytes[t->frame] = (size_t)t->nbytes;
    }
    check(wf_request_check_frames(&req, req.n_tensors, frame_bytes, err, sizeof(err)) == WF_OK);
    if (req.op == WF_OP_ATTENTION) {
        const wf_attention_args_t *a = &req.args.attention;
        check(req.n_tensors == 3);
        check(req.tensors[a->q].shape[2] % req.tensors[a->k].shape[2] == 0);
        check(!a->has_scale || a->scale > 0.0f);
        check((unsigned)a->rotate_method <= WF_ROTATE_ALLTOALL);
        check((unsigned)a->convert_to_fp32 <= WF_OPT_OFF &&
              (unsigned)a->ring_anything <= WF_OPT_OFF &&
              (unsigned)a->ulysses_anything <= WF_OPT_OFF &&
              (unsigned)a->load_balance <= WF_OPT_OFF);
    }
    if (req.op == WF_OP_RECONFIGURE) {
        const wf_mesh_degrees_t *m = &req.args.reconfigure.mesh;
        check(req.n_tensors == 0);
        check(m->dp >= 1 && m->dp <= WF_PROTO_MAX_DEGREE && m->ring >= 1 &&
              m->ring <= WF_PROTO_MAX_DEGREE && m->ulysses >= 1 &&
              m->ulysses <= WF_PROTO_MAX_DEGREE && m->tp >= 1 &&
              m->tp <= WF_PROTO_MAX_DEGREE);
    }
    if (req.op == WF_OP_HELLO || req.op == WF_OP_STATUS || req.op == WF_OP_LIST_MODELS)
        check(req.n_tensors == 0);
    if (req.op == WF_OP_LOAD_MODEL)
        check_load_model(&req);
    if (req.op == WF_OP_UNLOAD_MODEL) {
        check(req.n_tensors == 0);
        check_model_name(req.args.unload_model.name, sizeof(req.args.unload_model.name));
    }
    if (req.op == WF_OP_FORWARD)
        check_forward(&req);
    wf_buf_t buf = { 0 };
    check(wf_request_encode(&req, &buf) == WF_OK);
    check(wf_request_decode(buf.data, buf.len, &lim, &again, err, sizeof(err)) == WF_OK);
    check(again.version == req.version && again.id == req.id && again.op == req.op &&
          again.n_tensors == req.n_tensors);
    for (uint32_t i = 0; i < req.n_tensors; i++)
        check(memcmp(&again.tensors[i], &req.tensors[i], sizeof(req.tensors[i])) == 0);
    if (req.op == WF_OP_ATTENTION)
        check(memcmp(&again.args.attention, &req.args.attention,
                     sizeof(req.args.attention)) == 0);
    if (req.op == WF_OP_RECONFIGURE)
        check(memcmp(&again.args.reconfigure, &req.args.reconfigure,
                     sizeof(req.args.reconfigure)) == 0);
    /* the decoder zeroes the request first and copies strings up to their
     * NUL, so the bytes past it are zero in both and memcmp is exact */
    if (req.op == WF_OP_LOAD_MODEL)
        check(memcmp(&again.args.load_model, &req.args.load_model,
                     sizeof(req.args.load_model)) == 0);
    if (req.op == WF_OP_UNLOAD_MODEL)
        check(memcmp(&again.args.unload_model, &req.args.unload_model,
                     sizeof(req.args.unload_model)) == 0);
    if (req.op == WF_OP_FORWARD)
        check(memcmp(&again.args.forward, &req.args.forward,
                     sizeof(req.args.forward)) == 0);
    wf_buf_free(&buf);
}

static void fuzz_reply(const uint8_t *data, size_t size)
{
    wf_reply_t rep, again;
    char err[WF_PROTO_ERROR_MAX];
    wf_status_t rc = wf_reply_decode(data, size, &rep, err, sizeof(err));
    check(memchr(err, '\0', sizeof(err)) != NULL);
    check(memchr(rep.error, '\0', sizeof(rep.error)) != NULL);
    if (rc != WF_OK) {
        check(rc == WF_E_PROTOCOL || rc == WF_E_VERSION);
        return;
    }
    /* the encoder writes only known results and sane error text */
    wf_buf_t buf = { 0 };
    check(wf_reply_encode(&rep, &buf) == WF_OK);
    rc = wf_reply_decode(buf.data, buf.len, &again, err, sizeof(err));
    check(rc == WF_OK);
    /* only wire codes leave the encoder (an unknown one goes out as
     * WF_E_INTERNAL) */
    check(again.id == rep.id && again.op == rep.op &&
          again.status == wf_status_on_wire(rep.status) &&
          again.epoch == rep.epoch && again.n_tensors == rep.n_tensors);
    if (rep.status == WF_OK && rep.op == WF_OP_ATTENTION)
        check(memcmp(&again.result.attention, &rep.result.attention,
                     sizeof(rep.result.attention)) == 0);
    if (rep.status == WF_OK && rep.op == WF_OP_RECONFIGURE)
        check(memcmp(&again.result.reconfigure, &rep.result.reconfigure,
                     sizeof(rep.result.reconfigure)) == 0);
    if (rep.status == WF_OK && rep.op == WF_OP_STATUS)
        check(memcmp(&again.result.status.mesh, &rep.result.status.mesh,
                     sizeof(rep.result.status.mesh)) == 0);
    /* hello: the features this side knows survive; no other bit is set */
    if (rep.status == WF_OK && rep.op == WF_OP_HELLO)
        check(again.features == rep.features && (rep.features & ~WF_FEATURES_ALL) == 0);
    if (rep.status == WF_OK && rep.op == WF_OP_FORWARD)
        check(memcmp(&again.result.forward, &rep.result.forward,
                     sizeof(rep.result.forward)) == 0);
    /* a load_model success reply always holds its model: the decoder
     * refuses one without "result" (PROTOCOL.md 12.2) */
    if (rep.status == WF_OK &&
        (rep.op == WF_OP_LOAD_MODEL || rep.op == WF_OP_LIST_MODELS)) {
        check(rep.result.models.n <= WF_MODELS_MAX);
        check(rep.op != WF_OP_LOAD_MODEL || rep.result.models.n == 1);
        check(again.result.models.n == rep.result.models.n);
        for (uint32_t i = 0; i < rep.result.models.n; i++)
            check_same_model(&again.result.models.models[i], &rep.result.models.models[i]);
    }
    /* an error reply keeps its text (an empty one is filled in on encode) */
    if (rep.status != WF_OK && rep.error[0])
        check(strcmp(again.error, rep.error) == 0);
    for (uint32_t i = 0; i < rep.n_tensors; i++) {
        const wf_tensor_desc_t *x = &again.tensors[i], *y = &rep.tensors[i];
        check(strcmp(x->name, y->name) == 0 && x->dtype == y->dtype && x->rank == y->rank &&
              x->frame == y->frame && x->numel == y->numel && x->nbytes == y->nbytes);
        for (int k = 0; k < y->rank; k++)
            check(x->shape[k] == y->shape[k]);
    }
    wf_buf_free(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] & 1)
        fuzz_reply(data + 1, size - 1);
    else
        fuzz_request(data + 1, size - 1);
    return 0;
}
