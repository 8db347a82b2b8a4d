/* nccl_standin.h — a stand-in for NCCL behind comm_nccl_boot.h's table
 * (wf_nccl_api_t), for tests on machines without GPUs: the code that picks
 * and feeds NCCL (the rendezvous's id, the per-rank init, the splits of
 * the mesh groups, shrink or rebuild after a loss) runs as the daemon runs
 * it, with ranks in threads or in processes.
 *
 * How it works, as NCCL's own bootstrap does: unique_id makes an id that
 * names a bootstrap root (a ZeroMQ ROUTER this stand-in runs in a thread
 * of the process that drew it, on 127.0.0.1) and a random nonce. init
 * binds a comm_zmq endpoint, tells the root (nonce, nranks, rank,
 * endpoint), and once all nranks ranks of that nonce have come the root
 * answers each with every endpoint; the rank then joins a comm_zmq world
 * (world id from the nonce, the abort domain of opts). So the handles are
 * comm_zmq's ("zmq"), the collectives are real, an abort of the cluster's
 * domain reaches them, and the daemon's staging wraps them for device
 * memory as it wraps any host-memory comm. Checks NCCL makes too: an id
 * makes one communicator only (a nonce that completed is refused, as a
 * reused ncclUniqueId would fail), every rank of a nonce gives the same
 * nranks and a distinct rank. shrink (when enabled) is a new bootstrap at
 * the parent's root with a nonce derived from the parent's and the
 * excluded ranks, ranks renumbered as ncclCommShrink does; the parent is
 * the handle given, or (a daemon passes its staging wrapper) the world
 * the calling thread joined last.
 *
 * What it does not do: device memory (the ranks' buffers are host memory;
 * behind comm_staged.h in the daemon), NCCL's numerics (allreduce is
 * comm_zmq's rank-order sum), CURVE (plain tcp on loopback).
 *
 * Counters (unique ids drawn, inits, shrinks, refused bootstraps) are for
 * tests. Thread-safe.
 */
#ifndef WF_TEST_NCCL_STANDIN_H
#define WF_TEST_NCCL_STANDIN_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm_nccl_boot.h"

typedef struct wf_nccl_standin wf_nccl_standin_t;

/* Start a stand-in (its ZeroMQ context and bootstrap root thread).
 * with_shrink: the table has shrink (as NCCL 2.27+), else NULL (older
 * NCCL). Caller owns *ret (wf_nccl_standin_destroy). */
wf_status_t wf_nccl_standin_new(bool with_shrink, wf_nccl_standin_t **ret);

/* Stop the root, close the context (every handle must be destroyed);
 * sets *s to NULL; accepts NULL. */
void wf_nccl_standin_destroy(wf_nccl_standin_t **s);

/* Its table (name "nccl-standin", version 22809, node_gpu: every cpu or
 * cuda device counts as a device of its own). Borrowed from s. */
const wf_nccl_api_t *wf_nccl_standin_api(wf_nccl_standin_t *s);

/* The version it reports (major * 10000 + minor * 100 + patch; > 0), to
 * test the rendezvous's version check. Before any use of the table. */
void wf_nccl_standin_set_version(wf_nccl_standin_t *s, int version);

typedef struct wf_nccl_standin_counters {
    uint64_t unique_ids;   /* ids drawn */
    uint64_t inits;        /* init calls that returned a handle */
    uint64_t shrinks;      /* shrink calls that returned a handle */
    uint64_t refused;      /* bootstraps the root refused (reused id, mismatch) */
} wf_nccl_standin_counters_t;

wf_nccl_standin_counters_t wf_nccl_standin_counters(wf_nccl_standin_t *s);

#endif /* WF_TEST_NCCL_STANDIN_H */
