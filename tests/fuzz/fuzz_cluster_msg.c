/* fuzz_cluster_msg.c — libFuzzer target for the control messages between
 * daemons (proto/ctl.c, proto/cluster_msg.c): what a peer on the cluster
 * socket or the tensor channel can send.
 *
 * The input is one control message's bytes. Beyond "no crash, no leak",
 * every message that decodes and passes wf_cmsg_get must survive
 * put -> encode -> decode -> get unchanged (the typed message is the whole
 * of what the daemon reads), and what get accepted must hold the bounds
 * the daemon relies on (strings NUL-terminated within their fields, a
 * job's dtypes known and dims positive).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_msg.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int cond)
{
    if (!cond)
        abort();
}

/* Large: off the stack. */
static wf_ctl_msg_t m1, m2;
static wf_cmsg_t c1, c2;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[WF_PROTO_ERROR_MAX];
    if (wf_ctl_decode(data, size, &m1, err, sizeof err) != WF_OK)
        return 0;
    check(memchr(err, '\0', sizeof err) != NULL);
    memset(&c1, 0, sizeof c1);
    wf_status_t rc = wf_cmsg_get(&m1, &c1, err, sizeof err);
    check(memchr(err, '\0', sizeof err) != NULL);
    if (rc != WF_OK) {
        check(rc == WF_E_UNKNOWN_OP || rc == WF_E_BAD_FIELD ||
              rc == WF_E_BAD_DTYPE || rc == WF_E_BAD_SHAPE);
        return 0;
    }
    check(c1.type != WF_CMSG_UNKNOWN);
    if (c1.type == WF_CMSG_JOB) {
        const wf_cjob_t *j = &c1.u.job;
        check(wf_dtype_size(j->qdt) && wf_dtype_size(j->kdt) &&
              wf_dtype_size(j->vdt) && wf_dtype_size(j->odt));
        check(j->B > 0 && j->Sq > 0 && j->Hq > 0 && j->D > 0 && j->Skv > 0 &&
              j->Hkv > 0);
    }
    /* round trip: what was accepted is written back and read the same */
    check(wf_cmsg_put(&m2, &c1) == WF_OK);
    wf_buf_t buf = { 0 };
    check(wf_ctl_encode(&m2, &buf) == WF_OK);
    check(wf_ctl_decode(buf.data, buf.len, &m2, err, sizeof err) == WF_OK);
    memset(&c2, 0, sizeof c2);
    check(wf_cmsg_get(&m2, &c2, err, sizeof err) == WF_OK);
    check(memcmp(&c1, &c2, sizeof c1) == 0);
    wf_buf_free(&buf);
    return 0;
}
