/* proto.h — weft's wire protocol as typed C structs, and its codec.
 *
 * Decodes every header frame into a wf_request_t / wf_reply_t and encodes
 * them back, with msgpack-c kept inside proto/. Before msgpack-c sees a
 * byte, wf_msgpack_prevalidate() walks the raw bytes and enforces the
 * limits (declared counts <= bytes left, nesting depth, total element
 * count, string / bin length), because msgpack-c reserves memory for
 * whatever count a header declares.
 *
 * No I/O and no logging: callers own sockets and frames. proto/PROTOCOL.md
 * is the normative description of what these functions read and write.
 */
#ifndef WF_PROTO_H
#define WF_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Op codes: stable numbers, part of the protocol. */
typedef enum wf_op {
    WF_OP_HELLO = 1,
    WF_OP_STATUS = 2,
    WF_OP_ATTENTION = 3,
    WF_OP_RECONFIGURE = 4,
    WF_OP_LOAD_MODEL = 5,
    WF_OP_UNLOAD_MODEL = 6,
    WF_OP_LIST_MODELS = 7,
    WF_OP_FORWARD = 8,
    WF_OP_CANCEL = 9,
    WF_OP_END_SESSION = 10
} wf_op_t;

/* Compile-time ceilings of the structs below; the runtime limits
 * (wf_limits_t) may only be lower. */
#define WF_PROTO_MAX_TENSORS 16   /* tensor frames in one message */
#define WF_PROTO_NAME_MAX 64      /* tensor name, including the NUL */
#define WF_PROTO_ERROR_MAX 256    /* error message, including the NUL */
#define WF_PROTO_MAX_DEGREE 4096  /* largest mesh degree a reconfigure may name */

/* Limits enforced on every request header. The daemon fills them from its
 * settings; wf_limits_default() gives the documented defaults. */
typedef struct wf_limits {
    uint64_t max_header_bytes;  /* size of the msgpack header frame */
    uint32_t max_depth;         /* nesting of arrays / maps (top map = 1) */
    uint32_t max_elements;      /* msgpack objects in the header, all levels */
    uint32_t max_str_bytes;     /* length of any str / bin in the header */
    uint32_t max_tensors;       /* tensor frames per message (<= WF_PROTO_MAX_TENSORS) */
    uint64_t max_tensor_bytes;  /* bytes of one tensor frame */
} wf_limits_t;

/* Defaults: 64 KiB header, depth 8, 4096 elements, 1024-byte strings,
 * 16 tensors, 4 GiB per tensor. */
void wf_limits_default(wf_limits_t *ret_limits);

/* One tensor as the header describes it. */
typedef struct wf_tensor_desc {
    char name[WF_PROTO_NAME_MAX]; /* NUL-terminated; unique in the message */
    wf_dtype_t dtype;             /* element type */
    int rank;                     /* 1..WF_MAX_RANK */
    int64_t shape[WF_MAX_RANK];   /* each > 0 */
    uint32_t frame;               /* index among the tensor frames (0 = first after the header) */
    uint64_t numel;               /* product of shape, overflow-checked */
    uint64_t nbytes;              /* numel * dtype size, overflow-checked */
} wf_tensor_desc_t;

/* The largest attention scale (args.scale, PROTOCOL.md section 3.3.1):
 * 2^64. Beyond it the scores and the lse of ordinary inputs leave the f32
 * range (the kernels' arithmetic and the wire's lse): with f16 inputs
 * |q . k| <= 65504^2 D, times 2^64 stays below 2^128 for any D < 2^30. */
#define WF_ATTN_SCALE_MAX 0x1p64

/* Arguments of an attention request ("args" map). */
typedef struct wf_attention_args {
    int q, k, v;               /* indices into wf_request_t.tensors */
    bool has_scale;            /* false: 1/sqrt(D) */
    float scale;               /* softmax scale when has_scale; finite, > 0,
                                * <= WF_ATTN_SCALE_MAX */
    bool causal;               /* top-left aligned causal mask */
    bool return_lse;           /* also return lse (B, Sq, Hq) f32 */
    bool has_out_dtype;        /* false: the dtype of q */
    wf_dtype_t out_dtype;      /* dtype of the output when has_out_dtype */
    uint32_t devices;          /* at most this many devices; 0 = daemon decides */
    wf_rotate_t rotate_method; /* "rotate_method": "allgather" | "alltoall"; absent = DEFAULT */
    wf_opt_t convert_to_fp32;  /* bool "convert_to_fp32"; absent = DEFAULT */
    wf_opt_t ring_anything;    /* bool "ring_anything"; absent = DEFAULT */
    wf_opt_t ulysses_anything; /* bool "ulysses_anything"; absent = DEFAULT */
    wf_opt_t load_balance;     /* bool "load_balance"; absent = DEFAULT */
    uint32_t deadline_ms;      /* "deadline_ms": ms from receipt; 0 / absent = none */
    bool fp8;                  /* "precision": "fp8" (true) or "default" / absent
                                * (false); feature "fp8" (PROTOCOL.md 3.3) */
} wf_attention_args_t;

/* Arguments of a reconfigure request ("args" map {"dp","ring","ulysses",
 * "tp"}: uints in 1..WF_PROTO_MAX_DEGREE, else WF_E_BAD_FIELD; an absent
 * degree is 1). Validation against the device count is the daemon's. */
typedef struct wf_reconfigure_args {
    wf_mesh_degrees_t mesh;
} wf_reconfigure_args_t;

/* Arguments of load_model: {"name": str, "path": str, "tp_plan"?: map,
 * "weights_already_sharded"?: bool}. name: 1..WF_MODEL_NAME_MAX-1 bytes of
 * [A-Za-z0-9._-]; path: checked with the model-root rules of PROTOCOL.md
 * (relative, no "..", < WF_MODEL_PATH_LEN bytes). tp_plan: a map of glob
 * (str, < WF_TP_GLOB_MAX bytes, non-empty) to a style name str, or to a map
 * {"style": str, "blocks": [uint > 0, ...]} (blocks required for, and only
 * allowed with, the packed styles; 1..WF_TP_MAX_BLOCKS entries); at most
 * WF_TP_MAX_RULES rules; absent or empty = the family's default plan. No
 * tensors. */
typedef struct wf_load_model_args {
    char name[WF_MODEL_NAME_MAX];
    char path[WF_MODEL_PATH_LEN];
    uint32_t n_plan;                 /* 0 = default plan */
    wf_tp_rule_t plan[WF_TP_MAX_RULES];
    bool weights_already_sharded;
} wf_load_model_args_t;

/* Arguments of unload_model: {"name": str}. */
typedef struct wf_unload_model_args {
    char name[WF_MODEL_NAME_MAX];
} wf_unload_model_args_t;

/* Arguments of forward: {"model": str}, "out_dtype"?: dtype name
 * (default: the dtype of the model's first input), "deadline_ms"?,
 * "precision"?, "split_batch"?: bool; tensors: the model's inputs by name (its schema,
 * list_models; each at most once). The decoder checks only what needs no
 * model; the daemon binds the tensors to the model's schema
 * (wf_schema_bind). */
typedef struct wf_forward_args {
    char model[WF_MODEL_NAME_MAX];
    bool has_out_dtype;
    wf_dtype_t out_dtype;
    uint32_t deadline_ms;      /* "deadline_ms": ms from receipt; 0 / absent = none */
    bool fp8;                  /* "precision": "fp8" (true) or "default" / absent
                                * (false): the model's attention in fp8 */
    bool split_batch;          /* "split_batch": true: the batch's samples are
                                * independent; the daemon may split them over
                                * the dp replicas (absent = false) */
    uint64_t session;          /* "session": the client's denoising session
                                * (>= 1); 0 / absent: none */
    uint64_t step;             /* "step": the step's index in the session */
    bool has_step;
    double cache_threshold;    /* "cache_threshold" (>= 0, finite): the
                                * first-block cache's; 0 / absent: every
                                * step computed */
} wf_forward_args_t;

/* Arguments of end_session: {"session": uint >= 1}. No tensors. */
typedef struct wf_end_session_args {
    uint64_t session;
} wf_end_session_args_t;

/* Arguments of cancel: {"id": uint}, the id of a job this connection
 * submitted (an admin's: any connection's). No tensors. */
typedef struct wf_cancel_args {
    uint64_t id;
} wf_cancel_args_t;

/* A decoded request header. */
typedef struct wf_request {
    uint32_t version;          /* "v" */
    uint64_t id;               /* "id", chosen by the client, echoed back */
    uint32_t op;               /* "op", a wf_op_t */
    uint32_t n_tensors;        /* entries used in tensors[] */
    wf_tensor_desc_t tensors[WF_PROTO_MAX_TENSORS];
    union {
        wf_attention_args_t attention;     /* op == WF_OP_ATTENTION */
        wf_reconfigure_args_t reconfigure; /* op == WF_OP_RECONFIGURE */
        wf_load_model_args_t load_model;   /* op == WF_OP_LOAD_MODEL */
        wf_unload_model_args_t unload_model; /* op == WF_OP_UNLOAD_MODEL */
        wf_forward_args_t forward;         /* op == WF_OP_FORWARD */
        wf_cancel_args_t cancel;           /* op == WF_OP_CANCEL */
        wf_end_session_args_t end_session; /* op == WF_OP_END_SESSION */
    } args;
} wf_request_t;

/* Result fields of an attention reply. */
typedef struct wf_attention_result {
    uint64_t queue_us;    /* time in the daemon's queue */
    uint64_t compute_us;  /* time on the devices */
    uint32_t devices;     /* devices used */
} wf_attention_result_t;

/* Result fields of a forward reply: {"queue_us", "compute_us", "devices"}
 * (the devices of the replica that ran it); its outputs are the reply's
 * tensors, named by the model's schema. */
typedef struct wf_forward_result {
    uint64_t queue_us;    /* time in the daemon's queue */
    uint64_t compute_us;  /* time on the devices */
    uint32_t devices;     /* devices of the replica */
    uint32_t cache;       /* "cache" of a session's forward: WF_CACHE_COMPUTED
                             ("computed") or WF_CACHE_REUSED ("reused");
                             WF_CACHE_NONE (absent) without a session */
} wf_forward_result_t;

/* Result of end_session: {"steps", "reused"}: the session's forwards and
 * how many of them reused the first-block cache. */
typedef struct wf_end_session_result {
    uint64_t steps;
    uint64_t reused;
} wf_end_session_result_t;

/* Result of a reconfigure reply: {"epoch", "mesh": {"dp","ring","ulysses","tp"}}. */
typedef struct wf_reconfigure_result {
    uint64_t epoch;   /* the new epoch */
    wf_mesh_degrees_t mesh;   /* the mesh now in force */
} wf_reconfigure_result_t;

/* Result of load_model: {"model": MODEL}; of list_models: {"models":
 * [MODEL, ...]} (at most WF_MODELS_MAX); MODEL is a map of the fields of
 * weft.h's wf_model_info_t under their names. unload_model has no result
 * fields. forward: as attention's (queue_us, compute_us, devices), one
 * output tensor named "output". */
typedef struct wf_models_result {
    uint32_t n;                          /* entries used */
    wf_model_info_t models[WF_MODELS_MAX];
} wf_models_result_t;

/* What a hello reply announces in result.features (PROTOCOL.md section
 * 9): additions to version 1 a client may use only when announced. One
 * bit each; the wire carries the names. */
enum {
    WF_FEATURE_RECONFIGURE = 1u << 0,   /* "reconfigure": op 4, status mesh fields */
    WF_FEATURE_CP_OPTIONS = 1u << 1,    /* "cp_options": attention's five CP args */
    WF_FEATURE_MODELS = 1u << 2,        /* "models": ops 5..8 */
    WF_FEATURE_ROLES = 1u << 3,         /* "roles": roles, status code 10 */
    WF_FEATURE_FP8 = 1u << 4,           /* "fp8": args "precision" of attention and
                                           forward, status code 29 */
    WF_FEATURE_SPLIT_BATCH = 1u << 5,   /* "split_batch": forward's arg "split_batch" */
    WF_FEATURE_SESSIONS = 1u << 6,      /* "sessions": forward's "session", "step",
                                           "cache_threshold", result "cache"; op 10 */
};
#define WF_FEATURES_COUNT 7
/* Every feature this build serves: what weftd announces. */
#define WF_FEATURES_ALL ((1u << WF_FEATURES_COUNT) - 1u)
/* The name of feature bit i (0 .. WF_FEATURES_COUNT - 1), else NULL. */
const char *wf_feature_name(unsigned i);
/* The bit of a feature name, 0 when this build does not know it. */
uint32_t wf_feature_bit(const char *name, size_t len);

/* A decoded reply header. */
typedef struct wf_reply {
    uint32_t version;                 /* "v" */
    uint64_t id;                      /* the request's id */
    uint32_t op;                      /* the request's op */
    wf_status_t status;               /* WF_OK or an error code */
    char error[WF_PROTO_ERROR_MAX];   /* message when status != WF_OK, else "" */
    uint64_t epoch;                   /* mesh epoch the request ran under */
    uint32_t n_tensors;               /* output tensors (frames after the header) */
    wf_tensor_desc_t tensors[WF_PROTO_MAX_TENSORS];
    union {
        wf_hello_info_t hello;         /* op == WF_OP_HELLO */
        wf_status_info_t status;       /* op == WF_OP_STATUS */
        wf_attention_result_t attention; /* op == WF_OP_ATTENTION */
        wf_reconfigure_result_t reconfigure; /* op == WF_OP_RECONFIGURE */
        wf_models_result_t models;     /* LOAD_MODEL (n = 1), LIST_MODELS */
        wf_forward_result_t forward;   /* op == WF_OP_FORWARD */
        wf_end_session_result_t end_session; /* op == WF_OP_END_SESSION */
    } result;
    uint32_t features;                /* hello: WF_FEATURE_* announced */
} wf_reply_t;

/* A growable byte buffer that encoders append to. Zero-initialise it;
 * free with wf_buf_free. */
typedef struct wf_buf {
    char *data;     /* owned */
    size_t len;     /* bytes used */
    size_t cap;     /* bytes allocated */
} wf_buf_t;

void wf_buf_reset(wf_buf_t *b);   /* len = 0, keeps the allocation */
void wf_buf_free(wf_buf_t *b);    /* frees and zeroes; accepts NULL */

/* Walk raw msgpack bytes without allocating: the data must be exactly one
 * object (no trailing bytes), every declared count / length must fit in the
 * bytes left, nesting <= lim->max_depth, total objects <=
 * lim->max_elements, str / bin / ext <= lim->max_str_bytes, and the size
 * <= lim->max_header_bytes. Returns WF_OK, WF_E_MALFORMED or WF_E_LIMIT,
 * with a message in err (may be NULL). */
wf_status_t wf_msgpack_prevalidate(const void *data, size_t len,
                                   const wf_limits_t *lim,
                                   char *err, size_t err_len);

/* Decode a request header: prevalidate, unpack, check every field's type,
 * the version, the op, the tensor descriptors (dtype names, rank, dims > 0,
 * overflow-checked products, nbytes <= lim->max_tensor_bytes, frames a
 * permutation of 0..n-1, unique names) and the op's arguments (attention:
 * tensors named q, k, v of rank 4, consistent B / D / Skv, Hkv dividing Hq,
 * no other tensors; load_model / unload_model / forward: the rules of the
 * args structs above, PROTOCOL.md section 12).
 * *req is always written: on failure req->id and req->op hold what could
 * be read (0 otherwise) so that the error reply can echo them. The message
 * goes to err (may be NULL). */
wf_status_t wf_request_decode(const void *data, size_t len,
                              const wf_limits_t *lim, wf_request_t *req,
                              char *err, size_t err_len);

/* Best effort, for the error reply to a header that failed to decode
 * before its fields were read (e.g. a limit): if the bytes start with a
 * map, scan its top-level entries, without allocating, for "id" and "op"
 * holding unsigned integers and store them. Leaves *id / *op unchanged
 * when not found. wf_request_decode already does this itself. */
void wf_request_peek(const void *data, size_t len, uint64_t *id, uint32_t *op);

/* The op a reply echoes for a request's uint op u (PROTOCOL.md section 6,
 * "Error replies echo"): u itself when it fits 32 bits (every op code
 * does), else WF_OP_ECHO_TOO_LARGE, 2^32 - 1, never an op code. */
#define WF_OP_ECHO_TOO_LARGE UINT32_MAX
static inline uint32_t wf_op_echo(uint64_t u)
{
    return u <= UINT32_MAX ? (uint32_t)u : WF_OP_ECHO_TOO_LARGE;
}

/* Check the frames that followed the header: n_frames must equal
 * req->n_tensors and frame i must be exactly the nbytes of the tensor
 * whose .frame is i. Returns WF_OK or WF_E_FRAME_MISMATCH / WF_E_LIMIT. */
wf_status_t wf_request_check_frames(const wf_request_t *req, size_t n_frames,
                                    const size_t *frame_bytes,
                                    char *err, size_t err_len);

/* Encode a request header (client side). Tensor numel / nbytes are not
 * sent; req->version 0 is sent as WF_PROTOCOL_VERSION; for attention,
 * scale / out_dtype only when has_scale / has_out_dtype, devices only
 * when != 0, rotate_method and the wf_opt_t flags only when not DEFAULT
 * (args.attention.q / k / v are not read: names identify the tensors);
 * for reconfigure all four degrees; for load_model tp_plan only when
 * n_plan > 0 (a rule without blocks as its style str) and
 * weights_already_sharded only when true; for forward out_dtype only when
 * has_out_dtype (the tensor indices are not read). Appends to out.
 * Returns WF_OK, WF_E_BAD_ARGUMENT (bad descriptor, frames not < n_tensors,
 * too many tensors, an option value outside its enum, a degree outside
 * 1..WF_PROTO_MAX_DEGREE; for the model ops a name, path or glob without
 * its NUL inside its array, more than WF_TP_MAX_RULES rules, a style
 * outside wf_tp_style_t, more than WF_TP_MAX_BLOCKS blocks) or
 * WF_E_NO_MEMORY. The field rules of PROTOCOL.md section 12 (name bytes,
 * relative path, plan semantics) are the decoder's: the encoder sends
 * what it is given, so that the daemon refuses it with its own code. */
wf_status_t wf_request_encode(const wf_request_t *req, wf_buf_t *out);

/* The code a reply carries for status `s`: `s` itself when it is a wire
 * code (PROTOCOL.md section 6), WF_E_INTERNAL for a client-side one, so
 * that a daemon never sends a code its clients read as their own. */
wf_status_t wf_status_on_wire(wf_status_t s);

/* Encode a reply header (daemon side): the common fields, the output
 * tensor descriptors and the result of the op (rep->result is read for
 * op hello / status / attention / reconfigure / load_model (models[0]) /
 * list_models / forward when status == WF_OK; unload_model has none).
 * rep->status goes out through wf_status_on_wire. Appends to out. */
wf_status_t wf_reply_encode(const wf_reply_t *rep, wf_buf_t *out);

/* Decode a reply header (client side), with the default limits raised to
 * what a status reply needs. *rep is always written (id / op when they
 * could be read). Unknown keys are skipped (forward compatibility); a
 * status number this side does not know is kept as it is. Returns WF_OK,
 * WF_E_VERSION (reply "v" != 1) or WF_E_PROTOCOL (anything else wrong). */
wf_status_t wf_reply_decode(const void *data, size_t len, wf_reply_t *rep,
                            char *err, size_t err_len);

/* Parse a tp style name ("replicated", "colwise", "rowwise",
 * "packed_colwise", "packed_rowwise"; weft.h's wf_tp_style_name is the
 * inverse); false if unknown. */
bool wf_tp_style_parse(const char *name, size_t len, wf_tp_style_t *ret_style);

/* Parse a dtype name ("f32", "f16", "bf16"); false if unknown. */
bool wf_dtype_parse(const char *name, size_t len, wf_dtype_t *ret_dtype);

/* Fill d->numel and d->nbytes from dtype and shape; WF_E_BAD_SHAPE when a
 * dim <= 0, rank out of range or the product overflows uint64 / int64. */
wf_status_t wf_tensor_desc_finish(wf_tensor_desc_t *d);

/* A forward's tensors bound to a model's schema: for each schema input
 * the index of its tensor in the request (-1: an optional input absent),
 * and each named size with its value and the input that gave it. */
#define WF_SCHEMA_MAX_SYMS 16
typedef struct wf_schema_binding {
    int in[WF_SCHEMA_MAX_INPUTS];
    uint32_t n_syms;
    char sym[WF_SCHEMA_MAX_SYMS][WF_SCHEMA_NAME_MAX];
    char who[WF_SCHEMA_MAX_SYMS][WF_SCHEMA_NAME_MAX];
    int64_t val[WF_SCHEMA_MAX_SYMS];
} wf_schema_binding_t;

/* Bind tensors t[0..n) to schema s of model `model` (for messages):
 * every tensor is an input of s, every input that is not optional is
 * there, with an accepted dtype, its rank, its fixed sizes, and named
 * sizes that agree across tensors. WF_E_BAD_FIELD (a required input
 * missing), WF_E_BAD_DTYPE, WF_E_BAD_ARGUMENT, each with a message. */
wf_status_t wf_schema_bind(const wf_model_schema_t *s, const char *model,
                           const wf_tensor_desc_t *t, uint32_t n,
                           wf_schema_binding_t *b, char *err, size_t err_len);

/* The value of named size `sym` in b, or -1. */
int64_t wf_schema_sym(const wf_schema_binding_t *b, const char *sym);

/* The descriptor of output i of s under binding b, in `dtype`, as frame
 * `frame` of the reply. */
wf_status_t wf_schema_output(const wf_model_schema_t *s, uint32_t i,
                             const wf_schema_binding_t *b, wf_dtype_t dtype,
                             uint32_t frame, wf_tensor_desc_t *out, char *err,
                             size_t err_len);

/* --- control messages between daemons (proto/ctl.c) -----------------
 * weftd's cluster control plane (daemon/cluster/, PROTOCOL.md section 11)
 * speaks small msgpack maps of str keys to uint or str values; lists are
 * flattened into keys ("n0.name"). Never tensor bytes. The messages
 * themselves, typed and validated, are cluster_msg.h's. */
#define WF_CTL_MAX_FIELDS 96     /* fields in one message */
#define WF_CTL_KEY_MAX 24        /* key length, with the NUL */
#define WF_CTL_STR_MAX 256       /* str value length, with the NUL */
#define WF_CTL_MAX_BYTES 65536   /* encoded size accepted */

typedef struct wf_ctl_field {
    char key[WF_CTL_KEY_MAX];    /* NUL-terminated, non-empty */
    bool is_str;                 /* value is s (else u) */
    uint64_t u;                  /* uint value */
    char s[WF_CTL_STR_MAX];      /* str value, NUL-terminated */
} wf_ctl_field_t;

typedef struct wf_ctl_msg {
    uint32_t n;                  /* fields used */
    wf_ctl_field_t f[WF_CTL_MAX_FIELDS];
} wf_ctl_msg_t;

/* Empty the message. */
void wf_ctl_init(wf_ctl_msg_t *m);
/* Append a field; WF_E_LIMIT when full or the key / value is too long. */
wf_status_t wf_ctl_put_uint(wf_ctl_msg_t *m, const char *key, uint64_t v);
wf_status_t wf_ctl_put_str(wf_ctl_msg_t *m, const char *key, const char *v);
/* The field named key, or NULL. Borrowed from m. */
const wf_ctl_field_t *wf_ctl_get(const wf_ctl_msg_t *m, const char *key);
/* A uint field: true and *ret when present with that type. */
bool wf_ctl_get_uint(const wf_ctl_msg_t *m, const char *key, uint64_t *ret);
/* A str field (borrowed from m), or NULL when absent or not a str. */
const char *wf_ctl_get_str(const wf_ctl_msg_t *m, const char *key);
/* Append the encoded map to out. WF_OK or WF_E_NO_MEMORY. */
wf_status_t wf_ctl_encode(const wf_ctl_msg_t *m, wf_buf_t *out);
/* Decode one message: prevalidated (size <= WF_CTL_MAX_BYTES, depth 2),
 * a map of <= WF_CTL_MAX_FIELDS unique non-empty str keys to uints or
 * strs of < WF_CTL_STR_MAX bytes without NUL. WF_OK, or WF_E_MALFORMED /
 * WF_E_LIMIT with a message; *m is empty on failure. */
wf_status_t wf_ctl_decode(const void *data, size_t len, wf_ctl_msg_t *m,
                          char *err, size_t err_len);

#endif /* WF_PROTO_H */
