/* fuzz_proto.c — libFuzzer target for the header decoders.
 *
 * The first byte picks the decoder (even: request, odd: reply); the rest
 * is the header frame. Beyond "no crash, no leak, no huge allocation"
 * (run with -malloc_limit_mb=256 -rss_limit_mb=1024), every header that
 * decodes must survive encode -> decode unchanged, and a decoded request
 * must satisfy the invariants the daemon relies on.
 */
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
    wf_buf_t buf = { 0 };
    check(wf_request_encode(&req, &buf) == WF_OK);
    check(wf_request_decode(buf.data, buf.len, &lim, &again, err, sizeof(err)) == WF_OK);
    check(again.id == req.id && again.op == req.op && again.n_tensors == req.n_tensors);
    for (uint32_t i = 0; i < req.n_tensors; i++)
        check(memcmp(&again.tensors[i], &req.tensors[i], sizeof(req.tensors[i])) == 0);
    if (req.op == WF_OP_ATTENTION)
        check(memcmp(&again.args.attention, &req.args.attention,
                     sizeof(req.args.attention)) == 0);
    if (req.op == WF_OP_RECONFIGURE)
        check(memcmp(&again.args.reconfigure, &req.args.reconfigure,
                     sizeof(req.args.reconfigure)) == 0);
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
    check(again.id == rep.id && again.op == rep.op && again.status == rep.status &&
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
