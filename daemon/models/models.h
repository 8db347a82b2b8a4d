/* models.h — the daemon's resident models: the registry the main thread
 * keeps, the loader thread that reads a checkpoint into the host copy, and
 * the shards each worker holds.
 *
 * Life of a model (DESIGN.md "Resident models and tensor parallelism"):
 *   load_model  -> LOADING: a loader thread opens the checkpoint (config,
 *                  headers, tensor list), checks the plan and that the
 *                  shards fit (WF_E_NO_MEMORY before a weight is read),
 *                  then reads every tensor into the host copy; progress
 *                  is an atomic byte count that list_models reports.
 *              -> INSTALLING: the server runs a regroup (the hot
 *                  reconfiguration path: drain, every worker, epoch + 1)
 *                  whose model set includes it; each worker cuts its
 *                  shard from the host copy (on a device backend into
 *                  device memory, the family's shard_build).
 *              -> READY: forward jobs run on it.
 *   unload      -> UNLOADING: a regroup without it; then the host copy
 *                  is freed.
 *   tp change   -> every regroup re-cuts the shards of every model from
 *                  the host copies: the disk is not read again.
 * Workers read host copies only inside regroup jobs, when nothing else
 * runs; the host copy of a model is freed only when no regroup runs.
 *
 * Threads: the registry is the main thread's; the loader thread touches
 * only its own entry's `src`, `host`, `status`, `err` and the atomic
 * progress until it signals completion on the eventfd. rank_models are
 * a worker's own.
 */
#ifndef WF_MODELS_H
#define WF_MODELS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "model_host.h"
#include "models/family_run.h"
#include "proto.h"
#include "tp_plan.h"

/* list_models' `nodes` of a model, with the NUL (weft.h). */
#define WF_MODEL_NODES_MAX WF_MODEL_NODES_LEN
/* Nodes of a cluster world (WF_SETTINGS_MAX_NODES). */
#define WF_MODEL_MAX_NODES 16

typedef enum wf_model_state {
    WF_MODEL_LOADING = 0,
    WF_MODEL_INSTALLING = 1,
    WF_MODEL_READY = 2,
    WF_MODEL_UNLOADING = 3
} wf_model_state_t;

/* What a node found of a model before reading a weight: the digests a
 * cluster's nodes compare (64-bit FNV-1a each). */
typedef struct wf_model_digest {
    uint64_t cfg;                    /* config.json's bytes */
    uint64_t tensors;                /* each tensor's name, dtype and shape */
    uint64_t sizes;                  /* each file's name and size */
    uint64_t headers;                /* each tensor's file and offset, the
                                        files' __metadata__ */
    uint64_t n;                      /* tensors */
    uint64_t bytes;                  /* data bytes */
} wf_model_digest_t;

/* Where a gated load stands (cluster loads, see wf_registry_start_load). */
typedef enum wf_model_gate {
    WF_GATE_NONE = 0,                /* not gated: opens and reads at once */
    WF_GATE_WAIT = 1,                /* the loader waits after opening */
    WF_GATE_GO = 2,                  /* read the weights */
    WF_GATE_STOP = 3                 /* stop (the load ends WF_E_ABORTED) */
} wf_model_gate_t;

/* One model of the registry. */
typedef struct wf_model {
    uint64_t id;                     /* unique in the daemon's life, > 0 */
    char name[WF_MODEL_NAME_MAX];
    char path[WF_MODEL_PATH_LEN];
    wf_model_state_t state;
    bool already_sharded;            /* loaded from per-rank files */
    bool default_plan;               /* plan is the family's default */
    wf_tp_plan_t plan;               /* plan in force */
    wf_model_cfg_t cfg;              /* valid once opened: its family and
                                        config */
    const wf_family_run_t *run;      /* the family's daemon half (once opened) */
    wf_model_schema_t schema;        /* its forward's inputs and outputs (once
                                        opened) */
    wf_dtype_t dtype;                /* checkpoint's majority dtype */
    uint64_t params, bytes_total;    /* from the headers */
    _Atomic uint64_t bytes_loaded;   /* progress of the read */
    _Atomic uint64_t bytes_to_load;  /* its total (0 until the read starts) */
    wf_model_host_t *host;            /* host copy (NULL until read) */
    bool pinned;                     /* its host copy's slab host_register'ed */
    uint64_t rank_bytes;             /* per-rank shard bytes at `tp` */
    uint32_t tp;                     /* tp its shards are cut for */
    uint64_t t_start_us, load_ms;
    /* the load request waiting for its reply */
    bool has_client;
    void *identity;                  /* zmq_msg_t * (owned, heap) */
    bool delim;
    uint64_t req_id;
    uint32_t req_version;            /* its protocol version (the reply's) */
    /* loader thread result */
    wf_status_t status;
    char err[WF_PROTO_ERROR_MAX];
    /* cluster loads (daemon/server/model_requests.c) */
    uint64_t lid;                    /* the coordinator's id of the model (0:
                                        a single node's) */
    wf_model_gate_t gate;            /* under the registry's gate_mu */
    _Atomic bool opened;             /* loader: opened, digest made, waiting */
    _Atomic bool finished;           /* loader: done (status, err set) */
    bool opened_seen;                /* main thread: took that */
    wf_model_digest_t digest;        /* valid once opened */
    bool doomed;                     /* refused while loading: removed when the
                                        loader ends (nobody is answered) */
    uint32_t owed;                   /* coordinator: bit i = world node i owes
                                        the answer of the step */
    uint64_t step_deadline_us;       /* coordinator: when that step times out */
    uint64_t world_epoch;            /* the world the load started on */
    uint32_t world_nodes;            /* and its nodes (bits of owed) */
    char nodes[WF_MODEL_NODES_MAX];  /* nodes and ranks holding it
                                        ("a:0-1,b:2-3"; "" single node) */
    int cstep;                       /* coordinator, while the client waits:
                                        1 open, 2 read, 3 install (0: none) */
    wf_model_digest_t found[WF_MODEL_MAX_NODES]; /* coordinator: what each
                                        world node found (by node index) */
    bool catchup;                    /* coordinator: the steps run for nodes
                                        that joined the world since the load
                                        (no client waits) */
    uint32_t cnodes;                 /* coordinator: the nodes the steps run on
                                        (bits by world node index) */
    uint32_t ready_early;            /* coordinator: nodes whose shards another
                                        regroup cut before our install */
    uint64_t catchup_epoch;          /* coordinator: world epoch of the last
                                        catch-up that failed (no retry in it) */
    uint64_t unfit_epoch;            /* cluster: the mesh epoch of a world
                                        whose mesh it does not fit (0: fits) */
    char unfit[WF_PROTO_ERROR_MAX];  /* and why */
    wf_status_t cst;                 /* coordinator: a member's first failure */
    char cerr[WF_PROTO_ERROR_MAX];   /* and its message */
} wf_model_t;

/* What a regroup tells every worker to hold. */
typedef struct wf_model_ref {
    uint64_t id;
    const wf_model_host_t *host;      /* read-only during the regroup */
    const wf_tp_plan_t *plan;
} wf_model_ref_t;

typedef struct wf_model_set {
    uint32_t n;
    wf_model_ref_t m[WF_MODELS_MAX];
} wf_model_set_t;

/* A worker's shards. */
typedef struct wf_rank_model {
    uint64_t id;
    int tp, tp_rank;
    const wf_family_run_t *run;      /* its family's daemon half */
    void *shard;                     /* the family's shard */
} wf_rank_model_t;

typedef struct wf_rank_models {
    uint32_t n;
    wf_rank_model_t m[WF_MODELS_MAX];
} wf_rank_models_t;

/* Make rm hold exactly the models of `set` cut for (tp, tp_rank) on the
 * worker's backend `ops` / `ctx` (the family's shard_build: device memory when ops
 * has mem_alloc; every shard of rm is built on the same ones): keeps a
 * shard already cut so, cuts the missing ones, frees the others (device
 * memory returns at once). On a failure (WF_E_NO_MEMORY) rm holds what
 * it could keep and err says which model. Worker thread of ctx. */
wf_status_t wf_rank_models_sync(wf_rank_models_t *rm, const wf_model_set_t *set,
                                int tp, int tp_rank, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, char *err, size_t err_len);

/* The shard of model `id`, or NULL. */
const wf_rank_model_t *wf_rank_models_find(const wf_rank_models_t *rm, uint64_t id);

/* Free every shard. */
void wf_rank_models_clear(wf_rank_models_t *rm);

/* The registry (main thread). */
typedef struct wf_registry {
    int root_fd;                     /* model root (O_PATH), -1: none */
    wf_model_t *m[WF_MODELS_MAX];    /* entries, NULL = free slot */
    uint64_t next_id;
    uint64_t lid_base;               /* random high 32 bits of the ids a
                                        cluster's coordinator gives its
                                        loads (lid): unique across its
                                        restarts */
    int efd;                         /* eventfd: the loader finished */
    pthread_t loader;                /* the loader thread */
    wf_model_t *loading;             /* its entry, NULL when none runs */
    bool host_f32;                   /* keep host copies in f32 (the
                                        backend computes in f32 on host
                                        memory: shards become views) */
    const wf_backend_ops_t *ops;     /* the workers' backend, or NULL (the
                                        CPU figures): with mem_alloc the
                                        shards live in device memory and
                                        weights count at the checkpoint's
                                        dtype; with host_register the host
                                        copies are pinned once read, so
                                        that cutting shards copies fast */
    pthread_mutex_t gate_mu;         /* guards every entry's gate */
    pthread_cond_t gate_cv;          /* a gate changed */
    bool flush_wanted;               /* coordinator: a member drops models and
                                        waits for a regroup (cm_flush) */
    int load_tp;                     /* tp the loader checks the plan for */
    uint64_t load_avail;             /* bytes a rank may give the shards */
} wf_registry_t;

/* Open the model root (NULL / "" : no models) and the eventfd. */
wf_status_t wf_registry_init(wf_registry_t *r, const char *model_root,
                             char *err, size_t err_len);

/* Join a running loader, free every entry, close the fds. */
void wf_registry_destroy(wf_registry_t *r);

/* Entry by name (any state), or NULL. */
wf_model_t *wf_registry_find(const wf_registry_t *r, const char *name);

/* Entries in use. */
uint32_t wf_registry_count(const wf_registry_t *r);

/* Start loading: checks (root configured, name free, a slot free, no
 * load running, the request's plan), makes the entry (LOADING) and starts
 * the loader thread with the tp in force and the bytes each rank may give
 * to shards. With `gated` (a cluster load) the loader stops after opening
 * the model and checking it (no weight read yet), makes its digest and
 * waits for wf_registry_gate. On refusal nothing changes and err says why
 * (WF_E_BAD_FIELD, WF_E_BAD_ARGUMENT, WF_E_BUSY, WF_E_LIMIT). *ret is the
 * new entry. */
wf_status_t wf_registry_start_load(wf_registry_t *r,
                                   const wf_load_model_args_t *args, int tp,
                                   uint64_t avail, bool gated, wf_model_t **ret,
                                   char *err, size_t err_len);

/* After the eventfd fired: the loader's entry when it finished (joined;
 * status and err set; host read when WF_OK; *ret_opened false) or when a
 * gated load opened the model and waits (m->digest set; *ret_opened
 * true); NULL when neither. */
wf_model_t *wf_registry_take_loaded(wf_registry_t *r, bool *ret_opened);

/* Release the gated load waiting at its gate: read the weights (go) or
 * stop (the load then ends with WF_E_ABORTED). Main thread. */
void wf_registry_gate(wf_registry_t *r, wf_model_t *m, bool go);

/* Stop the gated load m when its loader waits at the gate (it opened the
 * model; no weight is read): the loader ends at once, is joined and m is
 * removed and freed. False (nothing done) when m's loader is elsewhere. */
bool wf_registry_stop_at_gate(wf_registry_t *r, wf_model_t *m);

/* Remove an entry and free it (its host copy too). */
void wf_registry_remove(wf_registry_t *r, wf_model_t *m);

/* The models workers must hold: INSTALLING and READY entries. */
void wf_registry_target_set(const wf_registry_t *r, wf_model_set_t *ret);

/* Check that every model of the target set can be cut for `tp` and fits
 * in `avail` bytes per rank (sum of shards); *ret_bytes the sum.
 * WF_E_BAD_ARGUMENT / WF_E_NO_MEMORY with a message naming the model. */
wf_status_t wf_registry_check_tp(const wf_registry_t *r, int tp, uint64_t avail,
                                 uint64_t *ret_bytes, char *err, size_t err_len);

/* Bytes of one rank's shard of m at `tp` as this registry's workers hold
 * them (the family's shard_bytes: f32 on the CPU, the checkpoint's
 * dtype when ops has mem_alloc); 0 when m cannot be cut so. */
uint64_t wf_model_rank_bytes(const wf_registry_t *r, const wf_model_t *m, int tp);

/* Fill a list_models entry. */
void wf_model_info_fill(const wf_model_t *m, wf_model_info_t *ret);

#endif /* WF_MODELS_H */
