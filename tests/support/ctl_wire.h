/* ctl_wire.h — a control-plane message (wf_ctl_msg_t) through the wire
 * codec, for the tests of the cluster messages (test_cluster_msg.c,
 * test_nccl_boot.c). Header only; tests only. */
#ifndef WF_TEST_CTL_WIRE_H
#define WF_TEST_CTL_WIRE_H

#include <stdbool.h>

#include "proto.h"

/* m through the wire: encode, then decode into out. True when both
 * succeed. */
static inline bool through_wire(const wf_ctl_msg_t *m, wf_ctl_msg_t *out)
{
    wf_buf_t b = { 0 };
    char err[128];
    bool ok = wf_ctl_encode(m, &b) == WF_OK &&
              wf_ctl_decode(b.data, b.len, out, err, sizeof err) == WF_OK;
    wf_buf_free(&b);
    return ok;
}

#endif
