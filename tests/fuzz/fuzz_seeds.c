/* fuzz_seeds.c — writes a seed corpus for fuzz_proto into a directory:
 * valid requests of every op and valid replies, each prefixed with the
 * selector byte fuzz_proto expects (0 request, 1 reply). For the resident-
 * model ops also wire forms the encoder never writes (a rule as a map
 * without blocks, an empty plan, an explicit false flag, a uint flag in a
 * reply) and requests one field away from valid (a ".." path, an unknown
 * style, a forward with a wrong batch), hand-built below.
 * Usage: fuzz_seeds DIR
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static int put_bytes(const char *dir, const char *name, int sel, const void *data,
                     size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    fputc(sel, f);
    fwrite(data, 1, len, f);
    return fclose(f) != 0;
}

static int put(const char *dir, const char *name, int sel, const wf_buf_t *b)
{
    return put_bytes(dir, name, sel, b->data, b->len);
}

/* ---- hand-built msgpack (small: fix types and 8/16-bit forms only) ---- */
typedef struct raw {
    unsigned char b[2048];
    size_t n;
} raw_t;

static void raw_byte(raw_t *r, unsigned v)
{
    if (r->n >= sizeof(r->b))
        abort(); /* a seed larger than this buffer is a bug here */
    r->b[r->n++] = (unsigned char)v;
}

static void raw_str(raw_t *r, const char *s)
{
    size_t n = strlen(s);
    if (n < 32) {
        raw_byte(r, 0xa0u | (unsigned)n);
    } else {
        raw_byte(r, 0xd9);
        raw_byte(r, (unsigned)n);
    }
    for (size_t i = 0; i < n; i++)
        raw_byte(r, (unsigned char)s[i]);
}

static void raw_map(raw_t *r, unsigned n) { raw_byte(r, 0x80u | n); }   /* n < 16 */
static void raw_arr(raw_t *r, unsigned n) { raw_byte(r, 0x90u | n); }   /* n < 16 */
static void raw_bool(raw_t *r, bool v) { raw_byte(r, v ? 0xc3 : 0xc2); }

static void raw_uint(raw_t *r, unsigned v)
{
    if (v < 128) {
        raw_byte(r, v);
    } else if (v < 256) {
        raw_byte(r, 0xcc);
        raw_byte(r, v);
    } else {
        raw_byte(r, 0xcd);
        raw_byte(r, v >> 8);
        raw_byte(r, v & 0xff);
    }
}

/* {"v": 1, "id": id, "op": op, "args": ...}: the caller writes the args */
static void raw_request(raw_t *r, unsigned id, unsigned op)
{
    r->n = 0;
    raw_map(r, 4);
    raw_str(r, "v"); raw_uint(r, 1);
    raw_str(r, "id"); raw_uint(r, id);
    raw_str(r, "op"); raw_uint(r, op);
    raw_str(r, "args");
}

static int put_raw(const char *dir, const char *name, int sel, const raw_t *r)
{
    return put_bytes(dir, name, sel, r->b, r->n);
}

/* One forward input descriptor. */
static void fwd_tensor(wf_tensor_desc_t *t, const char *name, wf_dtype_t dt, int rank,
                       int64_t d0, int64_t d1, int64_t d2, uint32_t frame)
{
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->dtype = dt;
    t->rank = rank;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->shape[2] = d2;
    t->frame = frame;
}

/* A MODEL as weftd reports it. */
static void model_info(wf_model_info_t *m, const char *name, const char *path,
                       const char *state, const char *dtype, uint32_t tp, bool sharded)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    snprintf(m->path, sizeof(m->path), "%s", path);
    snprintf(m->family, sizeof(m->family), "flux");
    snprintf(m->state, sizeof(m->state), "%s", state);
    snprintf(m->dtype, sizeof(m->dtype), "%s", dtype);
    m->params = 145288;
    m->bytes_total = 581152;
    m->bytes_loaded = strcmp(state, "loading") == 0 ? 290576 : 581152;
    m->host_bytes = 581152;
    m->rank_bytes = 413312;
    m->tp = tp;
    m->sharded_input = sharded;
    m->load_ms = 12;
    snprintf(m->device, sizeof(m->device), "cpu");
    snprintf(m->compute, sizeof(m->compute), "f32");
}

/* Seeds of the resident-model ops (PROTOCOL.md section 12). */
static int model_seeds(const char *dir)
{
    int bad = 0;
    wf_buf_t b = { 0 };
    static wf_request_t r; /* large: not on the stack */
    raw_t w;

    /* load_model: default plan; then FLUX's kind of plan with a packed rule */
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 20; r.op = WF_OP_LOAD_MODEL;
    strcpy(r.args.load_model.name, "flux-dev");
    strcpy(r.args.load_model.path, "flux/dev");
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_load_model", 0, &b);
    static const struct { const char *glob; wf_tp_style_t style; } rules[] = {
        { "transformer_blocks.*.attn.to_q", WF_TP_COLWISE },
        { "transformer_blocks.*.attn.to_k", WF_TP_COLWISE },
        { "transformer_blocks.*.attn.to_out.0", WF_TP_ROWWISE },
        { "transformer_blocks.*.ff.net.0.proj", WF_TP_COLWISE },
        { "norm_out.linear", WF_TP_REPLICATED },
    };
    wf_load_model_args_t *lm = &r.args.load_model;
    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        strcpy(lm->plan[i].glob, rules[i].glob);
        lm->plan[i].style = rules[i].style;
    }
    lm->n_plan = sizeof(rules) / sizeof(rules[0]);
    strcpy(lm->plan[lm->n_plan].glob, "single_transformer_blocks.*.proj_out");
    lm->plan[lm->n_plan].style = WF_TP_PACKED_ROWWISE;
    lm->plan[lm->n_plan].n_blocks = 2;
    lm->plan[lm->n_plan].blocks[0] = 1;
    lm->plan[lm->n_plan].blocks[1] = 4;
    lm->n_plan++;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_load_model_plan", 0, &b);
    lm->n_plan = 1;
    lm->weights_already_sharded = true;
    strcpy(lm->path, "flux-tiny-tp2");
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_load_model_sharded", 0, &b);
    /* one field from valid: a ".." component (the decoder refuses it) */
    lm->n_plan = 0;
    lm->weights_already_sharded = false;
    strcpy(lm->path, "models/../flux");
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_load_model_dotdot", 0, &b);

    /* wire forms the encoder does not write */
    raw_request(&w, 21, WF_OP_LOAD_MODEL);
    raw_map(&w, 4);
    raw_str(&w, "name"); raw_str(&w, "m.1_x");
    raw_str(&w, "path"); raw_str(&w, "a..b/c");
    raw_str(&w, "tp_plan");
    raw_map(&w, 2);
    raw_str(&w, "x.*.to_q");
    raw_map(&w, 1); raw_str(&w, "style"); raw_str(&w, "colwise");
    raw_str(&w, "x.*.proj_mlp");
    raw_map(&w, 2);
    raw_str(&w, "blocks"); raw_arr(&w, 3); raw_uint(&w, 1); raw_uint(&w, 300); raw_uint(&w, 2);
    raw_str(&w, "style"); raw_str(&w, "packed_colwise");
    raw_str(&w, "weights_already_sharded"); raw_bool(&w, false);
    bad |= put_raw(dir, "raw_load_model_mapstyle", 0, &w);
    raw_request(&w, 22, WF_OP_LOAD_MODEL);
    raw_map(&w, 3);
    raw_str(&w, "name"); raw_str(&w, "m");
    raw_str(&w, "path"); raw_str(&w, "m");
    raw_str(&w, "tp_plan"); raw_map(&w, 0);
    bad |= put_raw(dir, "raw_load_model_emptyplan", 0, &w);
    raw_request(&w, 23, WF_OP_LOAD_MODEL);
    raw_map(&w, 3);
    raw_str(&w, "name"); raw_str(&w, "m");
    raw_str(&w, "path"); raw_str(&w, "m");
    raw_str(&w, "tp_plan");
    raw_map(&w, 1); raw_str(&w, "a.*"); raw_str(&w, "diagonal");
    bad |= put_raw(dir, "raw_load_model_badstyle", 0, &w);
    raw_request(&w, 24, WF_OP_LIST_MODELS);
    raw_map(&w, 0);
    bad |= put_raw(dir, "raw_list_models_emptyargs", 0, &w);

    /* unload_model, list_models */
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 25; r.op = WF_OP_UNLOAD_MODEL;
    strcpy(r.args.unload_model.name, "flux-dev");
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_unload_model", 0, &b);
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 26; r.op = WF_OP_LIST_MODELS;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_list_models", 0, &b);

    /* forward: the six inputs with frames out of order; then guidance,
     * mixed dtypes and out_dtype; then a batch that disagrees */
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 27; r.op = WF_OP_FORWARD;
    strcpy(r.args.forward.model, "flux-tiny");
    fwd_tensor(&r.tensors[0], "hidden_states", WF_DTYPE_F32, 3, 2, 16, 4, 5);
    fwd_tensor(&r.tensors[1], "encoder_hidden_states", WF_DTYPE_F32, 3, 2, 8, 32, 4);
    fwd_tensor(&r.tensors[2], "pooled_projections", WF_DTYPE_F32, 2, 2, 16, 0, 3);
    fwd_tensor(&r.tensors[3], "timestep", WF_DTYPE_F32, 1, 2, 0, 0, 2);
    fwd_tensor(&r.tensors[4], "img_ids", WF_DTYPE_F32, 2, 16, 3, 0, 1);
    fwd_tensor(&r.tensors[5], "txt_ids", WF_DTYPE_F32, 2, 8, 3, 0, 0);
    r.n_tensors = 6;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_forward", 0, &b);
    r.tensors[0].dtype = WF_DTYPE_BF16;
    r.tensors[1].dtype = WF_DTYPE_F16;
    fwd_tensor(&r.tensors[6], "guidance", WF_DTYPE_F32, 1, 2, 0, 0, 6);
    r.n_tensors = 7;
    r.args.forward.has_out_dtype = true;
    r.args.forward.out_dtype = WF_DTYPE_F32;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_forward_guidance", 0, &b);
    r.tensors[6].shape[0] = 3;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(dir, "req_forward_badbatch", 0, &b);

    /* replies */
    static wf_reply_t p; /* large: not on the stack */
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 20; p.op = WF_OP_LOAD_MODEL; p.epoch = 1;
    p.result.models.n = 1;
    model_info(&p.result.models.models[0], "flux-dev", "flux/dev", "ready", "bf16", 2, false);
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_load_model", 1, &b);
    p.op = WF_OP_LIST_MODELS;
    p.result.models.n = 3;
    model_info(&p.result.models.models[1], "tiny-sh", "flux-tiny-tp2", "ready", "f32", 2, true);
    model_info(&p.result.models.models[2], "big", "flux/big", "loading", "", 0, false);
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_list_models", 1, &b);
    p.result.models.n = 0;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_list_models_empty", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 25; p.op = WF_OP_UNLOAD_MODEL; p.epoch = 4;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_unload_model", 1, &b);
    p.op = WF_OP_LOAD_MODEL; p.status = WF_E_BAD_ARGUMENT;
    strcpy(p.error, "a model named 'tiny' is already loaded; unload it first or choose "
                    "another name");
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_load_model_error", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 27; p.op = WF_OP_FORWARD; p.epoch = 5; p.n_tensors = 1;
    strcpy(p.tensors[0].name, "output");
    p.tensors[0].dtype = WF_DTYPE_BF16;
    p.tensors[0].rank = 3;
    p.tensors[0].shape[0] = 2; p.tensors[0].shape[1] = 16; p.tensors[0].shape[2] = 4;
    p.result.forward.queue_us = 29;
    p.result.forward.compute_us = 779;
    p.result.forward.devices = 2;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(dir, "rep_forward", 1, &b);
    /* a client MUST accept sharded_input as a uint too */
    w.n = 0;
    raw_map(&w, 6);
    raw_str(&w, "v"); raw_uint(&w, 1);
    raw_str(&w, "id"); raw_uint(&w, 26);
    raw_str(&w, "op"); raw_uint(&w, WF_OP_LIST_MODELS);
    raw_str(&w, "status"); raw_uint(&w, 0);
    raw_str(&w, "epoch"); raw_uint(&w, 2);
    raw_str(&w, "result");
    raw_map(&w, 1); raw_str(&w, "models"); raw_arr(&w, 1);
    raw_map(&w, 4);
    raw_str(&w, "name"); raw_str(&w, "m");
    raw_str(&w, "state"); raw_str(&w, "ready");
    raw_str(&w, "tp"); raw_uint(&w, 4);
    raw_str(&w, "sharded_input"); raw_uint(&w, 1);
    bad |= put_raw(dir, "raw_rep_list_models_uintflag", 1, &w);
    wf_buf_free(&b);
    return bad;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    int bad = 0;
    wf_buf_t b = { 0 };
    wf_request_t r;
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 1; r.op = WF_OP_HELLO;
    bad |= wf_request_encode(&r, &b) != WF_OK || put(argv[1], "req_hello", 0, &b);
    r.op = WF_OP_STATUS;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(argv[1], "req_status", 0, &b);
    r.op = WF_OP_ATTENTION;
    r.n_tensors = 3;
    const char *names[3] = { "q", "k", "v" };
    for (int i = 0; i < 3; i++) {
        strcpy(r.tensors[i].name, names[i]);
        r.tensors[i].dtype = (wf_dtype_t)i;
        r.tensors[i].rank = 4;
        r.tensors[i].shape[0] = 1; r.tensors[i].shape[1] = 3;
        r.tensors[i].shape[2] = i == 0 ? 4 : 2; r.tensors[i].shape[3] = 8;
        r.tensors[i].frame = (uint32_t)(2 - i);
    }
    r.args.attention.has_scale = true;
    r.args.attention.scale = 0.3f;
    r.args.attention.causal = true;
    r.args.attention.return_lse = true;
    r.args.attention.has_out_dtype = true;
    r.args.attention.out_dtype = WF_DTYPE_BF16;
    r.args.attention.devices = 2;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(argv[1], "req_attention", 0, &b);
    r.args.attention.rotate_method = WF_ROTATE_ALLTOALL;
    r.args.attention.convert_to_fp32 = WF_OPT_OFF;
    r.args.attention.ring_anything = WF_OPT_ON;
    r.args.attention.ulysses_anything = WF_OPT_ON;
    r.args.attention.load_balance = WF_OPT_OFF;
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(argv[1], "req_attention_cp", 0, &b);
    memset(&r, 0, sizeof(r));
    r.version = 1; r.id = 2; r.op = WF_OP_RECONFIGURE;
    r.args.reconfigure.mesh = (wf_mesh_degrees_t){ 1, 2, 2, 1 };
    wf_buf_reset(&b);
    bad |= wf_request_encode(&r, &b) != WF_OK || put(argv[1], "req_reconfigure", 0, &b);

    wf_reply_t p;
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 9; p.op = WF_OP_HELLO;
    p.result.hello.protocol = 1;
    strcpy(p.result.hello.backend, "cpu");
    p.features = WF_FEATURES_ALL;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(argv[1], "rep_hello", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 9; p.op = WF_OP_STATUS;
    p.result.status.device_count = 2;
    strcpy(p.result.status.devices[1].name, "cpu:1");
    p.result.status.mesh = (wf_mesh_degrees_t){ 1, 2, 1, 1 };
    p.result.status.reconfiguring = 1;
    p.result.status.devices[1].rank = 1;
    p.result.status.devices[1].coords[1] = 1;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(argv[1], "rep_status", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 9; p.op = WF_OP_ATTENTION; p.n_tensors = 2;
    strcpy(p.tensors[0].name, "out"); p.tensors[0].rank = 4;
    p.tensors[0].shape[0] = p.tensors[0].shape[1] = p.tensors[0].shape[2] = p.tensors[0].shape[3] = 2;
    strcpy(p.tensors[1].name, "lse"); p.tensors[1].rank = 3; p.tensors[1].frame = 1;
    p.tensors[1].shape[0] = p.tensors[1].shape[1] = p.tensors[1].shape[2] = 2;
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(argv[1], "rep_attention", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 9; p.op = WF_OP_RECONFIGURE; p.epoch = 3;
    p.result.reconfigure.epoch = 3;
    p.result.reconfigure.mesh = (wf_mesh_degrees_t){ 2, 2, 1, 1 };
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(argv[1], "rep_reconfigure", 1, &b);
    memset(&p, 0, sizeof(p));
    p.version = 1; p.id = 9; p.op = WF_OP_ATTENTION; p.status = WF_E_BAD_SHAPE;
    strcpy(p.error, "tensors[0].shape[1]: dim must be > 0, got 0");
    wf_buf_reset(&b);
    bad |= wf_reply_encode(&p, &b) != WF_OK || put(argv[1], "rep_error", 1, &b);
    wf_buf_free(&b);
    bad |= model_seeds(argv[1]);
    return bad;
}
