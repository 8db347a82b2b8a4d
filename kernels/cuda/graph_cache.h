/* graph_cache.h — the CUDA backend's cache of captured graphs (the
 * cuda_graphs setting; backend.h graph_begin / graph_end), as plain C:
 * the keys, the first-sight / capture / replay decision, the bound on the
 * count and the drops. It holds each graph as an opaque pointer and
 * destroys it through the callback it was made with (cudaGraphExecDestroy
 * in the backend; a counter in tests/unit/test_graph_cache.c, which runs
 * without a GPU).
 *
 * A key is the caller's bytes (at most WF_GRAPH_KEY_MAX), compared
 * whole: everything that decides the arguments of the ops a graph
 * records (backend.h graph_begin). Each entry also names an anchor, the
 * resident block (mem_alloc) whose memory the recorded ops read:
 * wf_graph_cache_drop_anchor drops every entry of an anchor when that
 * block is freed, so no graph outlives memory it points into.
 *
 * Per key, in order of use:
 *   first sight    WF_GRAPH_RUN: the entry is remembered as seen; the
 *                  caller runs the ops uncaptured (every lazy load,
 *                  first-call allocation and heuristic query happens
 *                  there, outside any capture);
 *   second sight   WF_GRAPH_CAPTURE: the caller captures the ops and
 *                  hands the result to wf_graph_cache_set (a graph, or
 *                  NULL: capture failed, the key is never captured again:
 *                  WF_GRAPH_RUN from then on);
 *   later          WF_GRAPH_REPLAYED with the graph (the caller launches
 *                  it).
 * At `max` entries the least recently used goes (its graph destroyed).
 *
 * Not thread-safe: one per backend context, used by its worker thread.
 * Allocation: the table at _new; a key's copy at its first sight (once
 * per shape, never on a replay). No logging. */
#ifndef WF_GRAPH_CACHE_H
#define WF_GRAPH_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest key, in bytes. */
#define WF_GRAPH_KEY_MAX 4096u
/* Most entries of one cache (the cuda_graphs_max setting's bound). */
#define WF_GRAPH_CACHE_MAX 65536u

typedef struct wf_graph_cache wf_graph_cache_t;

/* Destroys one graph the cache holds (never called with NULL graph);
 * user is _new's. A graph may still be queued on the device when it is
 * let go: the backend defers the destruction to a point where its
 * stream is idle. */
typedef void (*wf_graph_free_fn)(void *user, void *graph);

/* A cache of at most max entries (1 .. WF_GRAPH_CACHE_MAX), letting its
 * graphs go through free_fn(user, graph). Caller owns *ret
 * (wf_graph_cache_destroy). WF_E_BAD_ARGUMENT, WF_E_NO_MEMORY. */
wf_status_t wf_graph_cache_new(uint32_t max, wf_graph_free_fn free_fn, void *user,
                               wf_graph_cache_t **ret);

/* Destroy every graph, free the cache, set *c to NULL; accepts NULL. */
void wf_graph_cache_destroy(wf_graph_cache_t **c);

/* What to do with the ops of key (key_bytes bytes, 1 ..
 * WF_GRAPH_KEY_MAX) reading the resident block anchor (may be NULL):
 * the file comment's order. With WF_GRAPH_REPLAYED, *ret_graph is the
 * graph (borrowed until the next call on c); else NULL. A key that
 * cannot be remembered (too long, no memory for its copy) is
 * WF_GRAPH_RUN every time. With WF_GRAPH_CAPTURE the entry is pending:
 * the next call on c must be wf_graph_cache_set. */
wf_graph_step_t wf_graph_cache_step(wf_graph_cache_t *c, const void *key, size_t key_bytes,
                                    const void *anchor, void **ret_graph);

/* The pending entry's capture: graph (taken over) or NULL (the capture
 * failed: the key runs uncaptured from now on). No pending entry: graph
 * is destroyed, nothing else changes. */
void wf_graph_cache_set(wf_graph_cache_t *c, void *graph);

/* Forget the entry whose graph was just replayed and failed to launch
 * (its graph destroyed; the key starts over at first sight). */
void wf_graph_cache_forget_last(wf_graph_cache_t *c);

/* Drop every entry anchored at anchor (the block is being freed). */
void wf_graph_cache_drop_anchor(wf_graph_cache_t *c, const void *anchor);

/* Drop every entry. */
void wf_graph_cache_clear(wf_graph_cache_t *c);

/* Counters since _new: entries held now, graphs replayed, captured,
 * refused (capture failed) and evicted. Any pointer may be NULL. */
void wf_graph_cache_stats(const wf_graph_cache_t *c, uint32_t *ret_held,
                          uint64_t *ret_replays, uint64_t *ret_captures,
                          uint64_t *ret_refused, uint64_t *ret_evicted);

#ifdef __cplusplus
}
#endif

#endif /* WF_GRAPH_CACHE_H */
