/* request_pool.h — the requests of a comm backend's point-to-point
 * operations (wf_comm_req_t, which each backend defines): a pool that
 * grows in chunks and recycles, so that posting allocates nothing once
 * warm, and the list of requests a group call posted, completed at
 * wf_comm_group_end. Used by comm_host and comm_zmq (comm_nccl keeps a
 * fixed table: each of its requests owns a CUDA event).
 *
 * The pool knows a request only by its size: it does not touch the
 * request's bytes after the optional init callback, so a backend's own
 * links (queues, free lists) stay its own. Not thread-safe: one pool
 * belongs to one rank's thread. Does not log.
 */
#ifndef WF_REQUEST_POOL_H
#define WF_REQUEST_POOL_H

#include <stddef.h>

#include "comm.h"

/* Called once per request when its chunk is allocated (zeroed). */
typedef void (*wf_req_init_fn)(wf_comm_req_t *r, void *arg);

typedef struct wf_req_pool {
    size_t req_size;         /* sizeof(struct wf_comm_req) of the backend */
    wf_req_init_fn init;     /* per new request; NULL: zeroed is enough */
    void *init_arg;          /* passed to init */
    wf_comm_req_t **free;    /* stack of free requests */
    int nfree;               /* entries in free */
    int total;               /* requests allocated (room in free) */
    void **chunks;           /* allocated chunks */
    int nchunks, cap_chunks; /* used / room in chunks */
} wf_req_pool_t;

/* Set up an empty pool of requests of req_size bytes and allocate the
 * first chunk. On failure the pool is left empty and safe to finish.
 * Errors: WF_E_NO_MEMORY. */
wf_status_t wf_req_pool_init(wf_req_pool_t *p, size_t req_size,
                             wf_req_init_fn init, void *init_arg);

/* A free request (growing the pool by a chunk when none is left), with
 * whatever its last user left in it; NULL when out of memory. Owned by
 * the pool: hand it back with wf_req_pool_put. */
wf_comm_req_t *wf_req_pool_get(wf_req_pool_t *p);

/* Hand a request from wf_req_pool_get back. Never fails. */
void wf_req_pool_put(wf_req_pool_t *p, wf_comm_req_t *r);

/* Free every chunk (requests in use included). Accepts a pool that
 * wf_req_pool_init failed on, and a zeroed one. */
void wf_req_pool_fini(wf_req_pool_t *p);

/* Requests posted by send / recv inside a group call, in posting order.
 * Borrowed pointers (the pool owns the requests). */
typedef struct wf_req_list {
    wf_comm_req_t **reqs; /* n entries in use */
    int n, cap;           /* used / room */
} wf_req_list_t;

/* Make room for one more entry (so that the push after posting cannot
 * fail, and a request is never posted without a place in the list).
 * Errors: WF_E_NO_MEMORY. */
wf_status_t wf_req_list_reserve(wf_req_list_t *l);

/* Append r; the room must have been reserved. */
void wf_req_list_push(wf_req_list_t *l, wf_comm_req_t *r);

/* Free the list's storage. Accepts a zeroed list. */
void wf_req_list_fini(wf_req_list_t *l);

#endif /* WF_REQUEST_POOL_H */
