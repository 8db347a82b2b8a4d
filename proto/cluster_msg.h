/* cluster_msg.h — the control messages between weftd daemons as typed C
 * structs (PROTOCOL.md section 11): the rendezvous and health messages of
 * daemon/cluster, the job descriptor and its answer, and the headers of
 * the tensor channel.
 *
 * On the wire each is a wf_ctl_msg_t (proto.h): one flat msgpack map of
 * str keys to uints or strs, key "t" = the type. Every key is spelled
 * once, in cluster_msg.c's tables ({key, offset, kind, bounds}), and
 * wf_cmsg_put writes them in the order those tables give, so a given
 * message always encodes to the same bytes.
 *
 * wf_cmsg_get validates a received message as a client request is
 * validated (proto/decode.c): every field present with its type and in
 * range, dtype and rotate codes known, dims > 0, and the consistency of
 * the fields among themselves (a world's ranks contiguous, a head split's
 * mask against g). Keys it does not know are ignored (the protocol grows
 * by adding keys). What needs the receiver's state (its protocol version,
 * its world size, its device count) is the caller's to check.
 *
 * No I/O, no logging; the structs are plain values the caller owns.
 */
#ifndef WF_CLUSTER_MSG_H
#define WF_CLUSTER_MSG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Bounds of the fields. The daemon's own constants must equal them
 * (daemon/cluster/cluster.c asserts so at compile time). */
#define WF_CMSG_MAX_NODES 16         /* nodes of a world (WF_SETTINGS_MAX_NODES) */
#define WF_CMSG_NAME_MAX 64          /* node name, with the NUL (WF_SETTINGS_NAME_MAX) */
#define WF_CMSG_MAX_DEVICES 64       /* devices of a node; a job's base and g
                                        (WF_SETTINGS_MAX_DEVICES, WF_DJOB_MAX_WORLD) */
#define WF_CMSG_WORLD_ID_MAX 40      /* world id (32 hex digits), with the NUL */
#define WF_CMSG_MESH_MAX 65536       /* a mesh degree (WF_MESH_MAX_WORLD) */
#define WF_CMSG_XFER_MAX_FRAMES 8    /* tensor frames behind a channel header
                                        (a forward's inputs) */
#define WF_CMSG_NCCL_ID_BYTES 128    /* an ncclUniqueId (NCCL_UNIQUE_ID_BYTES,
                                        daemon/comm/comm_nccl.h WF_NCCL_ID_BYTES) */
#define WF_CMSG_NCCL_ID_Z85 160      /* its Z85 text ("ncclid" of world), without the NUL */

/* The NCCL unique id of a world ("ncclid"; PROTOCOL.md section 11) as Z85
 * text: exactly WF_CMSG_NCCL_ID_Z85 characters that decode to
 * WF_CMSG_NCCL_ID_BYTES bytes. Encode writes out (with its NUL); decode
 * answers false (out untouched) for anything else. */
void wf_cmsg_nccl_id_encode(const unsigned char id[WF_CMSG_NCCL_ID_BYTES],
                            char out[WF_CMSG_NCCL_ID_Z85 + 1]);
bool wf_cmsg_nccl_id_decode(const char *text, unsigned char out[WF_CMSG_NCCL_ID_BYTES]);

/* Check a node's announced comm endpoints ("data" of hello, data and
 * n<i>.data of world; PROTOCOL.md section 11): "tcp://HOST:PORT" then
 * ",PORT" per further endpoint, HOST 1..253 bytes of [A-Za-z0-9._-] (a
 * host name or an IPv4 address: the data_address rule) not starting or
 * ending with '.' or '-', each PORT decimal 1..65535 without leading
 * zeros. ranks > 0: exactly that many endpoints; 0: any number >= 1.
 * WF_OK, or WF_E_BAD_FIELD with a message naming `key` (the peer's text
 * is never quoted). Used by wf_cmsg_get; exported for the daemon's own
 * checks. */
wf_status_t wf_cmsg_check_data(const char *data, uint32_t ranks, const char *key,
                               char *err, size_t err_len);

/* The message types, by their "t". Stable only inside one build: the wire
 * carries the names. */
typedef enum wf_cmsg_type {
    WF_CMSG_UNKNOWN = 0, /* a "t" this build does not know (ignore it) */
    /* control socket, member -> coordinator */
    WF_CMSG_HELLO,       /* "hello": hello */
    WF_CMSG_READY,       /* "ready": epoch */
    WF_CMSG_PING,        /* "ping": epoch */
    WF_CMSG_DATA,        /* "data": data */
    WF_CMSG_DONE,        /* "done": result (seq, epoch = mesh epoch, st) */
    WF_CMSG_ABORTED,     /* "aborted": result (epoch = world epoch, seq, st) */
    /* control socket, coordinator -> member */
    WF_CMSG_REFUSE,      /* "refuse": text (error) */
    WF_CMSG_WORLD,       /* "world": world */
    WF_CMSG_SERVE,       /* "serve": epoch */
    WF_CMSG_PONG,        /* "pong": epoch */
    WF_CMSG_REJOIN,      /* "rejoin": no fields */
    WF_CMSG_MESH,        /* "mesh": mesh */
    WF_CMSG_JOB,         /* "job": job */
    WF_CMSG_ABORT,       /* "abort": abort (epoch, why) */
    /* tensor channel headers (world epoch) */
    WF_CMSG_XFER_HI,     /* "hi": xfer (epoch), member -> coordinator */
    WF_CMSG_XFER_IN,     /* "in": xfer (epoch, seq, n), coordinator -> member */
    WF_CMSG_XFER_OUT,    /* "out": xfer (epoch, seq, st, n), member -> coordinator */
    /* resident models across nodes (PROTOCOL.md sections 11 and 12.7), on
     * the control socket */
    WF_CMSG_MLOAD,       /* "mload": mload, coordinator -> member */
    WF_CMSG_MFOUND,      /* "mfound": mfound, member -> coordinator */
    WF_CMSG_MGO,         /* "mgo": mstep (lid), coordinator -> member */
    WF_CMSG_MDROP,       /* "mdrop": mstep (lid), coordinator -> member */
    WF_CMSG_MREAD,       /* "mread": mres, member -> coordinator */
    WF_CMSG_MREADY,      /* "mready": mres, member -> coordinator */
    WF_CMSG_FJOB         /* "fjob": fjob, coordinator -> member */
} wf_cmsg_type_t;

/* hello: a member asks to join. The version fields come first and the
 * coordinator compares them before anything else is used. */
typedef struct wf_cmsg_hello {
    uint64_t proto;                  /* "proto": protocol version (any uint) */
    char weft[WF_CTL_STR_MAX];       /* "weft": weft version */
    char nccl[WF_CTL_STR_MAX];       /* "nccl": NCCL version, "none" on CPU builds */
    char name[WF_CMSG_NAME_MAX];     /* "name": node name, non-empty */
    uint32_t devices;                /* "devices": 1..WF_CMSG_MAX_DEVICES */
    char data[WF_CTL_STR_MAX];       /* "data": its comm endpoints */
    uint64_t epoch;                  /* "epoch": the last world epoch it knew */
    bool gpu;                        /* "gpu": every device of the node is a GPU
                                        of its own and NCCL is built and on (the
                                        world may then be NCCL's); key absent
                                        when false */
    bool fp8;                        /* "fp8": every device of the node takes
                                        fp8 attention (backend.h
                                        attention_fp8_ok); key absent when false */
} wf_cmsg_hello_t;

/* One node of a world ("n<i>.name", "n<i>.rank", "n<i>.ranks", "n<i>.data"). */
typedef struct wf_cmsg_node {
    char name[WF_CMSG_NAME_MAX];     /* node name */
    uint32_t rank;                   /* global rank of its first device */
    uint32_t ranks;                  /* its devices, 1..WF_CMSG_MAX_DEVICES */
    char data[WF_CTL_STR_MAX];       /* its comm endpoints ("" allowed) */
} wf_cmsg_node_t;

/* The mesh degrees and mesh epoch ("mesh", and inside "world"). */
typedef struct wf_cmsg_mesh {
    uint64_t mepoch;                 /* "mepoch": mesh epoch */
    uint32_t dp, ring, ulysses, tp;  /* "dp" .. "tp": 0..WF_CMSG_MESH_MAX each */
} wf_cmsg_mesh_t;

/* world: one rendezvous round. get checks nn in 1..WF_CMSG_MAX_NODES and
 * the ranks contiguous from 0 (node k starts where node k - 1 ends). */
typedef struct wf_cmsg_world {
    uint64_t epoch;                  /* "epoch": world epoch */
    char id[WF_CMSG_WORLD_ID_MAX];   /* "id": world id, hex */
    uint32_t nn;                     /* "nn": nodes */
    wf_cmsg_mesh_t mesh;             /* "mepoch", "dp", "ring", "ulysses", "tp" */
    char xfer[WF_CTL_STR_MAX];       /* "xfer": tensor channel; "" = key absent */
    char ncclid[WF_CMSG_NCCL_ID_Z85 + 1]; /* "ncclid": the world's NCCL unique id
                                        (wf_cmsg_nccl_id_encode); "" = key absent:
                                        the data plane is comm_zmq */
    wf_cmsg_node_t nodes[WF_CMSG_MAX_NODES]; /* nodes[0..nn) */
} wf_cmsg_world_t;

/* job: the descriptor of an attention job's part, coordinator to every
 * member holding ranks of it. q is (B, Sq, Hq, D); k and v are
 * (B, Skv, Hkv, D). */
typedef struct wf_cjob {
    uint64_t seq;                    /* "seq": global sequence number */
    uint64_t epoch;                  /* "epoch": mesh epoch */
    uint64_t id;                     /* "id": the client's request id (logs) */
    uint32_t base;                   /* "base": world rank of job rank 0, <= WF_CMSG_MAX_DEVICES */
    uint32_t g;                      /* "g": ranks of the job, 1..WF_CMSG_MAX_DEVICES */
    int64_t B, Sq, Hq, D, Skv, Hkv;  /* "B" .. "Hkv": 1..INT32_MAX */
    wf_dtype_t qdt, kdt, vdt, odt;   /* "qdt" .. "odt": dtype codes (weft.h) */
    bool lse;                        /* "lse": lse is an output too */
    bool causal;                     /* "causal" */
    float scale;                     /* "scale": sent as its f32 bit pattern */
    wf_rotate_t rot;                 /* "rot": rotate method code */
    bool f32;                        /* "f32": convert_to_fp32 */
    bool ra;                         /* "ra": ring_anything */
    bool ua;                         /* "ua": ulysses_anything */
    bool lb;                         /* "lb": load_balance */
    bool hs;                         /* "hs": head split (key absent when false) */
    uint64_t mask;                   /* "mask" (with hs): its ranks are base + the
                                        bit numbers; bit 0 set, g bits */
    bool fp8;                        /* "fp8": precision fp8 (key absent when false) */
} wf_cjob_t;

/* done / aborted: how a job part ended. */
typedef struct wf_cmsg_result {
    uint64_t seq;                    /* "seq" */
    uint64_t epoch;                  /* "epoch": mesh epoch (done), world epoch (aborted) */
    wf_status_t st;                  /* "st": as a uint32, two's complement */
} wf_cmsg_result_t;

/* abort: every member aborts its part of world `epoch`. */
typedef struct wf_cmsg_abort {
    uint64_t epoch;                  /* "epoch": world epoch */
    char why[WF_CTL_STR_MAX];        /* "why": what failed, for logs ("" when absent) */
} wf_cmsg_abort_t;

/* hi / in / out: a tensor channel header; n frames follow it. Only the
 * fields of the type are on the wire (hi: epoch; in: epoch, seq, n; out:
 * epoch, seq, st, n); the others are 0. */
typedef struct wf_cmsg_xfer {
    uint64_t epoch;                  /* "epoch": world epoch */
    uint64_t seq;                    /* "seq" */
    wf_status_t st;                  /* "st" */
    uint32_t n;                      /* "n": 0..WF_CMSG_XFER_MAX_FRAMES */
} wf_cmsg_xfer_t;

/* ---- resident models across nodes (PROTOCOL.md section 12.7) ----------
 * A load on the coordinator: "mload" to every member; each opens the
 * model (config, headers; no weight read) and answers "mfound" with the
 * digests of what it found; the coordinator compares them with its own
 * and sends "mgo" (read the weights) or "mdrop" (forget the load) to
 * every member; a member answers "mread" once its weights are read and
 * "mready" once its shards are cut (the coordinator's regroup). "mdrop"
 * also unloads a model. `lid` is the coordinator's id of the model. */

/* The digests of a model's files as a node found them (64-bit FNV-1a
 * each; models.h wf_model_digest_t). */
typedef struct wf_cmsg_digest {
    uint64_t cfg;                    /* "cfg": config.json's bytes */
    uint64_t tensors;                /* "tensors": names, dtypes, shapes */
    uint64_t sizes;                  /* "sizes": file names and sizes */
    uint64_t headers;                /* "headers": the headers' offsets and metadata */
    uint64_t n;                      /* "n": tensors */
    uint64_t bytes;                  /* "bytes": data bytes */
} wf_cmsg_digest_t;

/* mload: open model `path` under the model root as `name`. */
typedef struct wf_cmsg_mload {
    uint64_t lid;                    /* "lid": > 0 */
    char name[WF_MODEL_NAME_MAX];    /* "name": a model name (section 12.1) */
    char path[WF_MODEL_PATH_LEN];    /* "path": a model path (section 12.1) */
    bool sharded;                    /* "sharded": weights_already_sharded */
    uint32_t tp;                     /* "tp": the tp degree of the mesh the
                                        coordinator runs (a member checks the
                                        load at it: it may not have switched
                                        yet); 0 / absent: the member's own */
} wf_cmsg_mload_t;

/* mfound: what the member found (st WF_OK: the digests; else err). */
typedef struct wf_cmsg_mfound {
    uint64_t lid;                    /* "lid" */
    wf_status_t st;                  /* "st" */
    char err[WF_CTL_STR_MAX];        /* "error" (optional) */
    wf_cmsg_digest_t d;              /* "cfg" .. "bytes" (0 when st fails) */
} wf_cmsg_mfound_t;

/* mgo / mdrop. */
typedef struct wf_cmsg_mstep {
    uint64_t lid;                    /* "lid" */
} wf_cmsg_mstep_t;

/* mread / mready: how a step ended on the member. */
typedef struct wf_cmsg_mres {
    uint64_t lid;                    /* "lid" */
    wf_status_t st;                  /* "st" */
    char err[WF_CTL_STR_MAX];        /* "error" (optional) */
} wf_cmsg_mres_t;

/* fjob: the descriptor of a forward job's part (a resident model's),
 * coordinator to every member holding ranks of it; answered like "job"
 * ("done", or the outputs on the tensor channel from the roots' node).
 * Its inputs are the request's tensors in request order: each one's name,
 * dtype and shape ("t<i>", "t<i>d", "t<i>s<j>"); the tensor channel
 * carries their frames in the same order. The member binds them to its
 * copy of the model's schema (the coordinator's checks are the same). */
#define WF_CFJOB_MAX_TENSORS 8           /* inputs of a forward in a cluster */
#define WF_CFJOB_MAX_RANK 6              /* their rank */
typedef struct wf_cfjob_tensor {
    char name[WF_SCHEMA_NAME_MAX];   /* "" past the last input */
    wf_dtype_t dt;
    int64_t shape[WF_CFJOB_MAX_RANK]; /* 1..INT32_MAX each, then 0s (the rank) */
} wf_cfjob_tensor_t;
typedef struct wf_cfjob {
    uint64_t seq;                    /* "seq": global sequence number */
    uint64_t epoch;                  /* "epoch": mesh epoch */
    uint64_t id;                     /* "id": the client's request id (logs) */
    uint32_t base;                   /* "base": world rank of job rank 0 */
    uint32_t g;                      /* "g": ranks of the job, 1..WF_CMSG_MAX_DEVICES */
    uint64_t lid;                    /* "lid": the model (mload's lid) */
    wf_cfjob_tensor_t t[WF_CFJOB_MAX_TENSORS];
    wf_dtype_t odt;                  /* "odt": the outputs' dtype */
    bool fp8;                        /* "fp8": precision fp8 (key absent when false) */
    bool alltoall;                   /* "a2a": the ring rotates one shard per step
                                        (the coordinator's rotate_method; key
                                        absent when allgather) */
} wf_cfjob_t;

/* One control message: its type and the body of that type. */
typedef struct wf_cmsg {
    wf_cmsg_type_t type;
    union {
        wf_cmsg_hello_t hello;       /* HELLO */
        uint64_t epoch;              /* READY, PING, SERVE, PONG: "epoch" */
        char text[WF_CTL_STR_MAX];   /* DATA: "data"; REFUSE: "error" ("" when absent) */
        wf_cmsg_world_t world;       /* WORLD */
        wf_cmsg_mesh_t mesh;         /* MESH */
        wf_cjob_t job;               /* JOB */
        wf_cmsg_result_t result;     /* DONE, ABORTED */
        wf_cmsg_abort_t abort;       /* ABORT */
        wf_cmsg_xfer_t xfer;         /* XFER_HI, XFER_IN, XFER_OUT */
        wf_cmsg_mload_t mload;       /* MLOAD */
        wf_cmsg_mfound_t mfound;     /* MFOUND */
        wf_cmsg_mstep_t mstep;       /* MGO, MDROP */
        wf_cmsg_mres_t mres;         /* MREAD, MREADY */
        wf_cfjob_t fjob;             /* FJOB */
    } u;                             /* REJOIN, UNKNOWN: none */
} wf_cmsg_t;

/* The type named by m's "t"; WF_CMSG_UNKNOWN when absent, not a str or
 * not known. */
wf_cmsg_type_t wf_cmsg_type(const wf_ctl_msg_t *m);

/* The "t" of a type ("hello"); "?" for WF_CMSG_UNKNOWN. Static. */
const char *wf_cmsg_type_name(wf_cmsg_type_t type);

/* Fill m (emptied first) with msg: "t", then the fields of its type in
 * their wire order. Strings are written as they are, without checking
 * the bounds get enforces; optional keys ("xfer", "hs", "mask") are left
 * out when empty / false / 0. WF_OK; WF_E_BAD_ARGUMENT for
 * WF_CMSG_UNKNOWN, a world's nn over WF_CMSG_MAX_NODES or a string
 * without its NUL; WF_E_LIMIT when a field does not fit a wf_ctl_msg_t
 * (m is then incomplete: do not send it). */
wf_status_t wf_cmsg_put(wf_ctl_msg_t *m, const wf_cmsg_t *msg);

/* Read m into *ret, validating every field of its type. WF_OK, or:
 *   WF_E_UNKNOWN_OP  "t" missing or unknown (ret->type WF_CMSG_UNKNOWN;
 *                    a receiver ignores such a message),
 *   WF_E_BAD_FIELD   a field missing, of the wrong type, out of range,
 *                    or inconsistent with the others,
 *   WF_E_BAD_DTYPE   a dtype code not in weft.h,
 *   WF_E_BAD_SHAPE   a dim 0 or over INT32_MAX,
 * with a message naming the key in err (wf_errf). On failure ret->type
 * is the type and every field that was valid is filled (the others are
 * 0 / ""): the first failure is the one reported. So a member can answer
 * a bad job descriptor with its seq and epoch, and a coordinator check a
 * hello's versions before the rest. *ret is large (a world): keep it off
 * small stacks. */
wf_status_t wf_cmsg_get(const wf_ctl_msg_t *m, wf_cmsg_t *ret, char *err,
                        size_t err_len);

/* The job descriptor alone: wf_cmsg_put / wf_cmsg_get of a WF_CMSG_JOB.
 * wf_cjob_get answers WF_E_UNKNOWN_OP when m is not a "job". Callers
 * answering a refused descriptor keep sending "done" with
 * WF_E_MALFORMED whatever the status here: the coordinator treats that
 * code as "the part never ran". The receiver still checks base + g (and
 * base + the top bit of mask) against its world size. */
wf_status_t wf_cjob_put(wf_ctl_msg_t *m, const wf_cjob_t *job);
wf_status_t wf_cjob_get(const wf_ctl_msg_t *m, wf_cjob_t *ret, char *err,
                        size_t err_len);

#endif /* WF_CLUSTER_MSG_H */
