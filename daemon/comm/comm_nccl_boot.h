/* comm_nccl_boot.h — NCCL across nodes, bootstrapped by the cluster's
 * rendezvous (DESIGN.md "Rendezvous between nodes"): the seam between the
 * daemon and the NCCL it uses, and the pure decisions the cluster makes
 * about it. Nothing here includes nccl.h or logs.
 *
 * The seam, wf_nccl_api_t: the calls that create NCCL handles (unique id,
 * init of a rank, shrink) as a table of function pointers, in the style
 * of comm_impl.h's backend table. Everything else weft does with NCCL
 * (split, abort, async error polling, the collectives) is a call on the
 * handle, through comm.h's interface (comm_nccl.c's table). The daemon
 * uses wf_nccl_api() (comm_nccl.c, or the stub where NCCL is not built);
 * tests/support/nccl_standin.h implements the same table over the host
 * backend, so that the code choosing and feeding NCCL runs in CI.
 *
 * The decisions (every node computes them from the same world message):
 *   - plane: a world is NCCL's when every node of it said "gpu" in its
 *     hello (every device a GPU of its own, NCCL built and on); a CPU or
 *     mixed world's data plane is comm_zmq (comm_zmq.h);
 *   - id: the coordinator draws a fresh unique id for every round (epoch)
 *     of an NCCL world and sends it in "world" (proto/cluster_msg.h
 *     "ncclid"); an id is used for one communicator only;
 *   - the mesh groups are ncclCommSplit-s of the world communicator with
 *     base/mesh.h's colours (wf_mesh_color), so a re-mesh needs no new id;
 *   - loss: the survivors of a lost node may shrink the world communicator
 *     (ncclCommShrink, NCCL 2.27 and later) when the new world is the old
 *     one without the lost nodes' ranks, in the same order; anything else
 *     (a node joined, an order that changed, no shrink) is a rebuild from
 *     the new round's id.
 */
#ifndef WF_COMM_NCCL_BOOT_H
#define WF_COMM_NCCL_BOOT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "comm_nccl.h"

/* How NCCL handles are made. Every entry gets `arg`. */
typedef struct wf_nccl_api {
    const char *name;   /* "nccl" (the real one), or a stand-in's name */
    void *arg;          /* the implementation's state (NULL for the real one) */
    /* NCCL version as major * 10000 + minor * 100 + patch; 0: none built */
    int (*version)(void *arg);
    /* A fresh unique id (ncclGetUniqueId; needs no GPU). */
    wf_status_t (*unique_id)(void *arg, wf_nccl_id_t *ret_id);
    /* This rank's world handle on the communicator of `id`
     * (wf_comm_nccl_init's contract). */
    wf_status_t (*init)(void *arg, const wf_nccl_id_t *id, int nranks, int rank,
                        const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm);
    /* (optional) Collective over the survivors: a handle on c's world
     * without the ranks exclude[0..n) (ncclCommShrink: survivors keep their
     * order, ranks renumbered from 0), the new world in opts' abort domain
     * under its init timeout (device and stream are c's). An excluded rank
     * does not call it. WF_E_UNAVAILABLE when the NCCL in use has none
     * (checked at run time); NULL: never. */
    wf_status_t (*shrink)(void *arg, wf_comm_t *c, const int *exclude, int n,
                          const wf_comm_nccl_opts_t *opts, wf_comm_t **ret_comm);
    /* (optional) Whether this node may hold NCCL ranks ("gpu" of its
     * hello); NULL: wf_nccl_node_gpu(s, version). A stand-in with devices
     * of its own answers for them. */
    bool (*node_gpu)(void *arg, const wf_settings_t *s);
} wf_nccl_api_t;

/* The daemon's table (comm_nccl_api.c, alone in its object file): NCCL's
 * (comm_nccl.c), or the stub's, whose calls fail with WF_E_UNAVAILABLE.
 * Static. A test daemon that defines its own wf_nccl_api (a stand-in,
 * tests/support/weftd_ncclsi.c) is linked with that one instead. */
const wf_nccl_api_t *wf_nccl_api(void);

/* This node's "gpu": api->node_gpu, else wf_nccl_node_gpu. */
bool wf_nccl_api_node_gpu(const wf_nccl_api_t *api, const wf_settings_t *s);

/* The data plane of a world. */
typedef enum wf_nccl_plane {
    WF_PLANE_ZMQ = 0,   /* comm_zmq: CPU or mixed worlds */
    WF_PLANE_NCCL = 1   /* one NCCL communicator over the world */
} wf_nccl_plane_t;

/* "zmq" / "nccl". Static. */
const char *wf_nccl_plane_name(wf_nccl_plane_t p);

/* Whether this node may be part of an NCCL world ("gpu" of its hello):
 * `version` > 0 (NCCL built), the `nccl` setting on, CUDA devices, and no
 * two devices on one GPU (one GPU cannot hold two ranks of one
 * communicator). */
bool wf_nccl_node_gpu(const wf_settings_t *s, int version);

/* The plane of a world whose n nodes said gpu[i]: NCCL when n > 0 and
 * every one did. */
wf_nccl_plane_t wf_nccl_plane(const bool *gpu, uint32_t n);

/* One node of a world, as the loss plan needs it. */
typedef struct wf_nccl_span {
    const char *name;   /* node name (borrowed) */
    uint32_t first;     /* global rank of its first device */
    uint32_t ranks;     /* its devices */
} wf_nccl_span_t;

typedef enum wf_nccl_next {
    WF_NCCL_REBUILD = 0, /* a new communicator from the new round's id */
    WF_NCCL_SHRINK = 1   /* shrink the old one: exclude[] are the ranks to drop */
} wf_nccl_next_t;

/* From the world `old` (n_old nodes) to the world `nw` (n_new nodes): may
 * the survivors shrink the old communicator (can_shrink: the NCCL in use
 * has ncclCommShrink)? SHRINK when every node of nw was in old with as
 * many ranks, in the same order, and at least one old node is gone; then
 * exclude[0..*ret_n) are the old world ranks of the nodes gone, ascending
 * (room for `max`; more than that: REBUILD). Else REBUILD (*ret_n 0). */
wf_nccl_next_t wf_nccl_plan_loss(const wf_nccl_span_t *old, uint32_t n_old,
                                 const wf_nccl_span_t *nw, uint32_t n_new,
                                 bool can_shrink, int *exclude, int max,
                                 int *ret_n);

#endif /* WF_COMM_NCCL_BOOT_H */
