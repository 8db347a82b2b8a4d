/* comm_count.h — a comm.h handle that counts the calls made on it and
 * passes each to the handle it wraps: to count, from the code that runs,
 * how many collectives a forward issues on each group (test_flux_forward
 * and the figures in daemon/comm/README.md). Tests only. */
#ifndef WF_TEST_COMM_COUNT_H
#define WF_TEST_COMM_COUNT_H

#include <stdint.h>

#include "comm/comm.h"

/* The calls counted (wf_comm_<name>). */
typedef enum wf_cnt_op {
    WF_CNT_SEND, WF_CNT_RECV, WF_CNT_GROUP_END, WF_CNT_ISEND, WF_CNT_IRECV,
    WF_CNT_WAIT, WF_CNT_TEST, WF_CNT_BARRIER, WF_CNT_ALLGATHER, WF_CNT_ALLGATHERV,
    WF_CNT_ALLTOALL, WF_CNT_ALLTOALLV, WF_CNT_ALLREDUCE, WF_CNT_BROADCAST,
    WF_CNT_SCATTERV, WF_CNT_GATHERV, WF_CNT_SYNC, WF_CNT_SPLIT,
    WF_CNT_N
} wf_cnt_op_t;

/* Its name ("allreduce"). Static. */
const char *wf_cnt_op_name(wf_cnt_op_t op);

/* Wrap inner (taken: destroyed with the wrapper) so that every call adds
 * one to counts[op] (WF_CNT_N entries, borrowed until the wrapper is
 * destroyed; shared by wrappers counting together, one thread). Caller
 * owns *ret (wf_comm_destroy). Errors: WF_E_NO_MEMORY. */
wf_status_t wf_comm_count_wrap(wf_comm_t *inner, uint64_t *counts, wf_comm_t **ret);

#endif /* WF_TEST_COMM_COUNT_H */
