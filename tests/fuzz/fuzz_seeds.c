/* fuzz_seeds.c — writes a seed corpus for fuzz_proto into a directory:
 * valid requests of every op and valid replies, each prefixed with the
 * selector byte fuzz_proto expects (0 request, 1 reply).
 * Usage: fuzz_seeds DIR
 */
#include <stdio.h>
#include <string.h>

#include "proto.h"

static int put(const char *dir, const char *name, int sel, const wf_buf_t *b)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    fputc(sel, f);
    fwrite(b->data, 1, b->len, f);
    return fclose(f) != 0;
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
    return bad;
}
