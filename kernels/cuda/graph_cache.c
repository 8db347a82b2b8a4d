/* graph_cache.c — the CUDA backend's cache of captured graphs (see
 * graph_cache.h). A fixed table of entries searched linearly by a 64-bit
 * hash first (a few hundred entries at most in practice: one per block
 * and shape), then the key's bytes. */
#include "graph_cache.h"

#include <stdlib.h>
#include <string.h>

typedef enum entry_state {
    ENTRY_FREE = 0,     /* unused slot */
    ENTRY_SEEN = 1,     /* ran once uncaptured */
    ENTRY_PENDING = 2,  /* being captured (wf_graph_cache_set next) */
    ENTRY_READY = 3,    /* graph held */
    ENTRY_REFUSED = 4   /* capture failed: always uncaptured */
} entry_state_t;

typedef struct entry {
    entry_state_t state;   /* the key's progress */
    uint64_t hash;         /* FNV-1a of the key */
    unsigned char *key;    /* the key's copy (owned) */
    size_t key_bytes;      /* its length */
    const void *anchor;    /* the resident block its ops read, or NULL */
    void *graph;           /* ENTRY_READY: the graph (owned) */
    uint64_t used;         /* tick of the last use (least recently used goes) */
} entry_t;

struct wf_graph_cache {
    entry_t *e;            /* max entries */
    uint32_t max;          /* table size */
    uint32_t held;         /* entries not free */
    uint64_t tick;         /* use counter */
    wf_graph_free_fn free_fn; /* lets a graph go */
    void *user;            /* free_fn's first argument */
    entry_t *pending;      /* the entry being captured, or NULL */
    entry_t *last;         /* the entry last replayed, or NULL */
    uint64_t replays, captures, refused, evicted; /* counters */
};

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = UINT64_C(14695981039346656037);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static void entry_release(wf_graph_cache_t *c, entry_t *e)
{
    if (e->state == ENTRY_FREE)
        return;
    if (e->graph)
        c->free_fn(c->user, e->graph);
    free(e->key);
    if (c->pending == e)
        c->pending = NULL;
    if (c->last == e)
        c->last = NULL;
    memset(e, 0, sizeof *e);
    c->held--;
}

wf_status_t wf_graph_cache_new(uint32_t max, wf_graph_free_fn free_fn, void *user,
                               wf_graph_cache_t **ret)
{
    if (!ret || !free_fn || max < 1 || max > WF_GRAPH_CACHE_MAX)
        return WF_E_BAD_ARGUMENT;
    wf_graph_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return WF_E_NO_MEMORY;
    c->e = calloc(max, sizeof *c->e);
    if (!c->e) {
        free(c);
        return WF_E_NO_MEMORY;
    }
    c->max = max;
    c->free_fn = free_fn;
    c->user = user;
    *ret = c;
    return WF_OK;
}

void wf_graph_cache_clear(wf_graph_cache_t *c)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->max; i++)
        entry_release(c, &c->e[i]);
}

void wf_graph_cache_destroy(wf_graph_cache_t **pc)
{
    if (!pc || !*pc)
        return;
    wf_graph_cache_t *c = *pc;
    *pc = NULL;
    wf_graph_cache_clear(c);
    free(c->e);
    free(c);
}

/* The entry of the key, or NULL. */
static entry_t *find(wf_graph_cache_t *c, const void *key, size_t n, uint64_t h)
{
    for (uint32_t i = 0; i < c->max; i++) {
        entry_t *e = &c->e[i];
        if (e->state != ENTRY_FREE && e->hash == h && e->key_bytes == n &&
            memcmp(e->key, key, n) == 0)
            return e;
    }
    return NULL;
}

/* A free slot, evicting the least recently used entry when none is. */
static entry_t *slot(wf_graph_cache_t *c)
{
    entry_t *lru = NULL;
    for (uint32_t i = 0; i < c->max; i++) {
        entry_t *e = &c->e[i];
        if (e->state == ENTRY_FREE)
            return e;
        if (!lru || e->used < lru->used)
            lru = e;
    }
    if (lru->state == ENTRY_READY)
        c->evicted++;
    entry_release(c, lru);
    return lru;
}

wf_graph_step_t wf_graph_cache_step(wf_graph_cache_t *c, const void *key, size_t key_bytes,
                                    const void *anchor, void **ret_graph)
{
    if (ret_graph)
        *ret_graph = NULL;
    if (!c || !key || key_bytes < 1 || key_bytes > WF_GRAPH_KEY_MAX || !ret_graph)
        return WF_GRAPH_RUN;
    if (c->pending) /* a capture never settled: forget it */
        entry_release(c, c->pending);
    const uint64_t h = fnv1a(key, key_bytes);
    entry_t *e = find(c, key, key_bytes, h);
    c->tick++;
    if (!e) {
        unsigned char *copy = malloc(key_bytes);
        if (!copy)
            return WF_GRAPH_RUN;
        memcpy(copy, key, key_bytes);
        e = slot(c);
        e->state = ENTRY_SEEN;
        e->hash = h;
        e->key = copy;
        e->key_bytes = key_bytes;
        e->anchor = anchor;
        e->used = c->tick;
        c->held++;
        return WF_GRAPH_RUN;
    }
    e->used = c->tick;
    /* the same key under another anchor: an entry can hold only one */
    if (e->anchor != anchor) {
        entry_release(c, e);
        return wf_graph_cache_step(c, key, key_bytes, anchor, ret_graph);
    }
    switch (e->state) {
    case ENTRY_SEEN:
        e->state = ENTRY_PENDING;
        c->pending = e;
        return WF_GRAPH_CAPTURE;
    case ENTRY_READY:
        c->replays++;
        c->last = e;
        *ret_graph = e->graph;
        return WF_GRAPH_REPLAYED;
    default:
        return WF_GRAPH_RUN;
    }
}

void wf_graph_cache_set(wf_graph_cache_t *c, void *graph)
{
    if (!c)
        return;
    entry_t *e = c->pending;
    if (!e) {
        if (graph)
            c->free_fn(c->user, graph);
        return;
    }
    c->pending = NULL;
    if (graph) {
        e->graph = graph;
        e->state = ENTRY_READY;
        c->captures++;
    } else {
        e->state = ENTRY_REFUSED;
        c->refused++;
    }
}

void wf_graph_cache_forget_last(wf_graph_cache_t *c)
{
    if (c && c->last)
        entry_release(c, c->last);
}

void wf_graph_cache_drop_anchor(wf_graph_cache_t *c, const void *anchor)
{
    if (!c)
        return;
    for (uint32_t i = 0; i < c->max; i++)
        if (c->e[i].state != ENTRY_FREE && c->e[i].anchor == anchor)
            entry_release(c, &c->e[i]);
}

void wf_graph_cache_stats(const wf_graph_cache_t *c, uint32_t *ret_held,
                          uint64_t *ret_replays, uint64_t *ret_captures,
                          uint64_t *ret_refused, uint64_t *ret_evicted)
{
    if (ret_held)
        *ret_held = c ? c->held : 0;
    if (ret_replays)
        *ret_replays = c ? c->replays : 0;
    if (ret_captures)
        *ret_captures = c ? c->captures : 0;
    if (ret_refused)
        *ret_refused = c ? c->refused : 0;
    if (ret_evicted)
        *ret_evicted = c ? c->evicted : 0;
}
