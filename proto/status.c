/* status.c — names and messages of status codes, dtype facts, tp style
 * names. Shared by libweft and weftd (both link weft_proto). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "proto.h"
#include "weft.h"

const char *wf_status_name(wf_status_t s)
{
    switch (s) {
    case WF_OK: return "WF_OK";
    case WF_E_MALFORMED: return "WF_E_MALFORMED";
    case WF_E_VERSION: return "WF_E_VERSION";
    case WF_E_LIMIT: return "WF_E_LIMIT";
    case WF_E_UNKNOWN_OP: return "WF_E_UNKNOWN_OP";
    case WF_E_BAD_FIELD: return "WF_E_BAD_FIELD";
    case WF_E_BAD_DTYPE: return "WF_E_BAD_DTYPE";
    case WF_E_BAD_SHAPE: return "WF_E_BAD_SHAPE";
    case WF_E_FRAME_MISMATCH: return "WF_E_FRAME_MISMATCH";
    case WF_E_BAD_ARGUMENT: return "WF_E_BAD_ARGUMENT";
    case WF_E_DENIED: return "WF_E_DENIED";
    case WF_E_QUEUE_FULL: return "WF_E_QUEUE_FULL";
    case WF_E_NO_MEMORY: return "WF_E_NO_MEMORY";
    case WF_E_SHUTTING_DOWN: return "WF_E_SHUTTING_DOWN";
    case WF_E_BUSY: return "WF_E_BUSY";
    case WF_E_NOT_COORDINATOR: return "WF_E_NOT_COORDINATOR";
    case WF_E_UNAVAILABLE: return "WF_E_UNAVAILABLE";
    case WF_E_DEADLINE: return "WF_E_DEADLINE";
    case WF_E_CANCELLED: return "WF_E_CANCELLED";
    case WF_E_MISMATCH: return "WF_E_MISMATCH";
    case WF_E_UNSUPPORTED: return "WF_E_UNSUPPORTED";
    case WF_E_INTERNAL: return "WF_E_INTERNAL";
    case WF_E_ABORTED: return "WF_E_ABORTED";
    case WF_E_NODE_LOST: return "WF_E_NODE_LOST";
    case WF_E_TIMEOUT: return "WF_E_TIMEOUT";
    case WF_E_CONNECT: return "WF_E_CONNECT";
    case WF_E_IO: return "WF_E_IO";
    case WF_E_PROTOCOL: return "WF_E_PROTOCOL";
    case WF_E_PENDING: return "WF_E_PENDING";
    case WF_E_AUTH: return "WF_E_AUTH";
    case WF_E_CONN_CLOSED: return "WF_E_CONN_CLOSED";
    }
    return "WF_E_UNKNOWN";
}

wf_status_t wf_status_on_wire(wf_status_t s)
{
    switch (s) {
    case WF_OK: case WF_E_MALFORMED: case WF_E_VERSION: case WF_E_LIMIT:
    case WF_E_UNKNOWN_OP: case WF_E_BAD_FIELD: case WF_E_BAD_DTYPE:
    case WF_E_BAD_SHAPE: case WF_E_FRAME_MISMATCH: case WF_E_BAD_ARGUMENT:
    case WF_E_DENIED: case WF_E_QUEUE_FULL: case WF_E_NO_MEMORY: case WF_E_SHUTTING_DOWN:
    case WF_E_BUSY: case WF_E_NOT_COORDINATOR: case WF_E_UNAVAILABLE:
    case WF_E_DEADLINE: case WF_E_CANCELLED: case WF_E_MISMATCH: case WF_E_UNSUPPORTED:
    case WF_E_INTERNAL: case WF_E_ABORTED: case WF_E_NODE_LOST:
        return s;
    case WF_E_TIMEOUT: case WF_E_CONNECT: case WF_E_IO: case WF_E_PROTOCOL:
    case WF_E_PENDING: case WF_E_AUTH: case WF_E_CONN_CLOSED:
        break;
    }
    return WF_E_INTERNAL;
}

const char *wf_status_str(wf_status_t s)
{
    switch (s) {
    case WF_OK: return "success";
    case WF_E_MALFORMED: return "malformed request";
    case WF_E_VERSION: return "unsupported protocol version";
    case WF_E_LIMIT: return "request exceeds a limit";
    case WF_E_UNKNOWN_OP: return "unknown op";
    case WF_E_BAD_FIELD: return "missing or invalid field";
    case WF_E_BAD_DTYPE: return "unknown or unsupported dtype";
    case WF_E_BAD_SHAPE: return "invalid tensor shape";
    case WF_E_FRAME_MISMATCH: return "tensor frames do not match their descriptors";
    case WF_E_BAD_ARGUMENT: return "invalid argument (e.g. tensors that do not fit together for the op)";
    case WF_E_DENIED: return "the client's role may not run this op";
    case WF_E_QUEUE_FULL: return "job queue is full";
    case WF_E_NO_MEMORY: return "out of memory (the job does not fit, or an allocation failed)";
    case WF_E_SHUTTING_DOWN: return "daemon is shutting down";
    case WF_E_BUSY: return "another reconfiguration or model load is running";
    case WF_E_NOT_COORDINATOR: return "this daemon is a cluster member; submit to the coordinator";
    case WF_E_UNAVAILABLE: return "the cluster cannot serve now";
    case WF_E_DEADLINE: return "the job's deadline passed: failed at a step boundary, its devices freed";
    case WF_E_CANCELLED: return "the job was cancelled: failed at a step boundary, its devices freed";
    case WF_E_MISMATCH: return "the cluster's nodes disagree (a model's files differ on a node)";
    case WF_E_UNSUPPORTED: return "the daemon's devices cannot serve an option of the job";
    case WF_E_INTERNAL: return "internal error in the daemon";
    case WF_E_ABORTED: return "a communicator was aborted while the job ran";
    case WF_E_NODE_LOST: return "a node of the cluster was lost while the job ran";
    case WF_E_TIMEOUT: return "timed out";
    case WF_E_CONNECT: return "cannot connect";
    case WF_E_IO: return "socket I/O failed";
    case WF_E_PROTOCOL: return "reply does not follow the protocol";
    case WF_E_PENDING: return "job not finished";
    case WF_E_AUTH: return "the daemon refused this client's credentials";
    case WF_E_CONN_CLOSED: return "the connection to the daemon closed before the reply";
    }
    return "unknown status";
}

size_t wf_dtype_size(wf_dtype_t dt)
{
    switch (dt) {
    case WF_DTYPE_F32: return 4;
    case WF_DTYPE_F16: return 2;
    case WF_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *wf_dtype_name(wf_dtype_t dt)
{
    switch (dt) {
    case WF_DTYPE_F32: return "f32";
    case WF_DTYPE_F16: return "f16";
    case WF_DTYPE_BF16: return "bf16";
    }
    return NULL;
}

const char *wf_tp_style_name(wf_tp_style_t s)
{
    switch (s) {
    case WF_TP_REPLICATED: return "replicated";
    case WF_TP_COLWISE: return "colwise";
    case WF_TP_ROWWISE: return "rowwise";
    case WF_TP_PACKED_COLWISE: return "packed_colwise";
    case WF_TP_PACKED_ROWWISE: return "packed_rowwise";
    }
    return NULL;
}

bool wf_tp_style_parse(const char *name, size_t len, wf_tp_style_t *ret_style)
{
    static const wf_tp_style_t all[] = { WF_TP_REPLICATED, WF_TP_COLWISE,
                                         WF_TP_ROWWISE, WF_TP_PACKED_COLWISE,
                                         WF_TP_PACKED_ROWWISE };
    if (!name)
        return false;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        const char *n = wf_tp_style_name(all[i]);
        if (strlen(n) == len && memcmp(n, name, len) == 0) {
            *ret_style = all[i];
            return true;
        }
    }
    return false;
}

int64_t wf_tensor_numel(const wf_tensor_t *t)
{
    if (!t || t->rank < 1 || t->rank > WF_MAX_RANK)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->shape[i] <= 0 || __builtin_mul_overflow(n, t->shape[i], &n))
            return -1;
    }
    return n;
}
