/* client_impl.h — private to client/lib: the connection and job state of
 * libweft and the helpers its files share. client.c holds the connection,
 * replies, jobs and the attention / control calls; models.c the
 * resident-model calls, which call client.c's helpers (never the other
 * way). The helpers' names start with wfc_: libweft.so keeps them local
 * (its version script), libweft.a carries them under that prefix.
 */
#ifndef WF_CLIENT_IMPL_H
#define WF_CLIENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "errf.h"
#include "keys.h"
#include "proto.h"
#include "weft.h"

#define WF_CLIENT_DEFAULT_TIMEOUT_MS 30000
/* Room for the daemon's message (WF_PROTO_ERROR_MAX) plus our prefix. */
#define WF_CLIENT_ERR_MAX (WF_PROTO_ERROR_MAX + 64)

typedef enum job_kind {
    JOB_HELLO,
    JOB_STATUS,
    JOB_ATTENTION,
    JOB_RECONFIGURE,
    JOB_LOAD_MODEL,
    JOB_UNLOAD_MODEL,
    JOB_LIST_MODELS,
    JOB_FORWARD,
    JOB_CANCEL,
    JOB_END_SESSION
} job_kind_t;

/* An output tensor a job expects in its reply, and where its bytes go. */
typedef struct job_output {
    char name[WF_PROTO_NAME_MAX]; /* "out", "lse", a forward output's name */
    wf_dtype_t dtype;            /* expected dtype */
    int rank;                    /* expected rank */
    int64_t shape[WF_MAX_RANK];  /* expected shape */
    void *dst;                   /* caller's buffer, exactly that many bytes */
} job_output_t;

#define JOB_MAX_OUTPUTS WF_SCHEMA_MAX_OUTPUTS

struct wf_job {
    wf_client_t *client;       /* connection that sent it */
    uint64_t id;               /* request id, unique on this client */
    job_kind_t kind;           /* which reply it expects */
    wf_job_t *prev, *next;     /* client's list of jobs awaiting a reply */
    bool linked;               /* on that list */
    bool replied;              /* final status known (reply or local failure) */
    atomic_int frames_out;     /* zero-copy frames ZeroMQ still holds */
    wf_status_t status;        /* final status once replied */
    wf_job_result_t result;    /* filled from the reply */
    char error[WF_CLIENT_ERR_MAX]; /* message when status != WF_OK */
    /* Where a simple call's answer goes (NULL: dropped), by kind:
     * wf_hello_info_t, wf_status_info_t, wf_reconfigure_result_t,
     * wf_models_result_t (load / list models); unused otherwise. */
    void *answer;
    uint32_t n_outputs;        /* JOB_ATTENTION / JOB_FORWARD: tensors expected */
    job_output_t outputs[JOB_MAX_OUTPUTS]; /* ... and where they go */
};

struct wf_client {
    void *zctx;                /* own ZeroMQ context: no shared globals */
    void *sock;                /* DEALER connected to the daemon */
    char *endpoint;            /* kept to reconnect after a reset */
    bool curve;                /* CURVE client: keys and server_key below */
    wf_keypair_t keys;         /* this client's key pair (when curve) */
    char server_key[WF_KEY_Z85_LEN + 1]; /* the daemon's public key (pinned) */
    void *mon;                 /* PAIR reading sock's monitor */
    uint64_t mon_seq;          /* numbers the monitor's inproc endpoints */
    int handshake_fails;       /* failed handshakes without detail in a row */
    bool up;                   /* sock's connection finished its handshake
                                  and has not closed since */
    bool lost;                 /* a connection closed and no new one is up:
                                  a send waits for one attempt to reconnect */
    bool retried;              /* lost: an attempt to reconnect failed */
    int timeout_ms;            /* default timeout of synchronous calls */
    int connect_timeout_ms;    /* bound on a send's wait for a connection
                                  while none is up (0: the call's timeout) */
    uint64_t next_id;          /* next request id (increasing) */
    wf_job_t *pending;         /* jobs awaiting a reply (doubly linked) */
    pthread_mutex_t mu;        /* guards frame releases against waiters */
    pthread_cond_t released;   /* signalled when a job's last frame is freed */
    wf_buf_t hdr;              /* reused header encode buffer */
    wf_request_t req;          /* reused request (large: kept off the stack) */
    wf_reply_t rep;            /* reused decoded reply */
    wf_models_result_t models; /* answer of load / list models, copied out */
    uint32_t features;         /* WF_FEATURE_* of the last hello reply */
    bool hello_ok;             /* a hello succeeded on this client (features read) */
    char last_error[WF_CLIENT_ERR_MAX]; /* see wf_client_last_error */
};

/* The connection's last error: message (proto/errf.h, the one formatter)
 * and status. */
#define fail(c, st, ...) wf_errf_status((st), (c)->last_error, sizeof (c)->last_error, \
                                        __VA_ARGS__)

/* A job's error: message, and its status in both places it is read. */
#define job_fail(job, st, ...)                                                  \
    ((job)->status = (job)->result.status =                                   \
         wf_errf_status((st), (job)->error, sizeof (job)->error, __VA_ARGS__))

void wfc_job_link(wf_client_t *c, wf_job_t *job);

/* Send c->req (already filled) and, for an attention job, the tensor frames
 * data[i] / bytes[i] without copying. On failure nothing stays borrowed. */
wf_status_t wfc_send_request(wf_client_t *c, wf_job_t *job, int n_frames,
                             void *const *data, const size_t *bytes,
                             int64_t deadline);

/* Start a request of `kind` in c->req; the caller fills its args. */
wf_request_t *wfc_request_begin(wf_client_t *c, job_kind_t kind);

/* A request without tensors (begun with request_begin), waited for at
 * once. Other jobs' replies that arrive meanwhile are handled as usual.
 * `answer`: where the result goes (see wf_job.answer), may be NULL. */
wf_status_t wfc_simple_call(wf_client_t *c, job_kind_t kind, void *answer);

/* Check one tensor argument of `op` that must have rank `rank`; bytes
 * gets its size. */
wf_status_t wfc_check_tensor(wf_client_t *c, const char *op, const char *name,
                             const wf_tensor_t *t, int rank, size_t *bytes);

void wfc_fill_desc(wf_tensor_desc_t *d, const char *name,
                   const wf_tensor_t *t, uint32_t frame);

/* The second half of a synchronous job call: wait for the submitted job
 * until `deadline`, hand its result over and free it. */
wf_status_t wfc_sync_finish(wf_client_t *client, wf_job_t *job, int64_t deadline,
                            wf_job_result_t *ret_result);

int64_t wfc_deadline_after(int timeout_ms);

/* A job option that needs the daemon's feature `bit` (named `feature`;
 * `what` names the option for the message): WF_OK when the daemon
 * announced it. Without a hello on this client so far, one is made first
 * (its failure is returned). Else WF_E_UNSUPPORTED, nothing sent
 * (PROTOCOL.md section 9: a client never sends a field the daemon did
 * not announce). */
wf_status_t wfc_need_feature(wf_client_t *c, uint32_t bit, const char *feature,
                             const char *what);

/* Check a wf_precision_t argument (WF_E_BAD_ARGUMENT) and, for fp8, the
 * daemon's feature "fp8" (wfc_need_feature). */
wf_status_t wfc_check_precision(wf_client_t *c, wf_precision_t p);

#endif /* WF_CLIENT_IMPL_H */
