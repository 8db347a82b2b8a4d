/* comm_host.h — the host backend of comm.h: ranks are threads of one
 * process and data moves by memcpy between their buffers.
 *
 * The owner (the daemon's main thread, or a test) creates a world of N
 * ranks; each worker thread then takes its rank's handle with
 * wf_comm_host_init and uses it as any wf_comm_t (split, collectives,
 * abort, destroy). The world is reference-counted: it lives until the
 * owner's reference and every handle (including split ones) are gone.
 *
 * Memory: a world allocates its root group (per rank: one slot; per
 * ordered pair: one mailbox) at creation, a split allocates the same for
 * each new group. A handle preallocates a pool of requests and a list of
 * posted group operations and grows them (doubling) when more are in
 * flight at once; nothing is allocated per operation beyond that growth.
 * A split allocates (it is not on the hot path).
 *
 * Cost: a group of n ranks holds n * n mailboxes, and every collective
 * checks all ranks' sizes against each other (O(n^2) compares, so that
 * every rank returns the same WF_E_BAD_ARGUMENT on a mismatch); meant for
 * the devices of one node, hence the limit below.
 */
#ifndef WF_COMM_HOST_H
#define WF_COMM_HOST_H

#include "comm.h"

/* Largest world the host backend accepts. */
#define WF_COMM_HOST_MAX_RANKS 256

typedef struct wf_comm_host_world wf_comm_host_world_t;

/* Create a world of `nranks` ranks (1..WF_COMM_HOST_MAX_RANKS). Caller
 * owns one reference, dropped with wf_comm_host_world_unref.
 * Errors: WF_E_BAD_ARGUMENT, WF_E_NO_MEMORY. */
wf_status_t wf_comm_host_world_new(int nranks,
                                   wf_comm_host_world_t **ret_world);

/* Take the world-group handle of `rank` (not collective: each rank's
 * thread calls it once, in any order). The handle holds a reference on
 * the world; caller owns it (wf_comm_destroy). Errors:
 * WF_E_BAD_ARGUMENT (rank out of range or already taken), WF_E_NO_MEMORY,
 * WF_E_ABORTED. */
wf_status_t wf_comm_host_init(wf_comm_host_world_t *w, int rank,
                              wf_comm_t **ret_comm);

/* Abort the world from outside its ranks (e.g. the owner on a timeout or
 * at shutdown); same effect as wf_comm_abort on one of its handles. */
void wf_comm_host_world_abort(wf_comm_host_world_t *w);

/* 1 once the world has been aborted, else 0. */
int wf_comm_host_world_aborted(const wf_comm_host_world_t *w);

/* How many calls on the world's handles are asleep now waiting for a
 * peer: in a collective's rendezvous, or in a wait on a send / receive
 * not yet matched. A test waits for it (with its own flag set just before
 * each call) to know that its ranks are blocked inside their calls before
 * it aborts them. Any thread; a snapshot. */
int wf_comm_host_world_waiting(const wf_comm_host_world_t *w);

/* Drop the owner's reference and set *w to NULL; the world is freed when
 * its last handle is destroyed too. Accepts NULL and a pointer to NULL. */
void wf_comm_host_world_unref(wf_comm_host_world_t **w);

#endif /* WF_COMM_HOST_H */
