/* request_pool.c — a growing pool of a backend's requests and the list of
 * a group call's requests (see request_pool.h). No logging. */
#include "request_pool.h"

#include <assert.h>
#include <stdlib.h>

/* Requests per chunk: a handful of exchanges in flight fit in one. */
#define REQ_CHUNK 32

static wf_status_t pool_grow(wf_req_pool_t *p)
{
    if (p->nchunks == p->cap_chunks) {
        int cap = p->cap_chunks ? 2 * p->cap_chunks : 4;
        void **c = realloc(p->chunks, (size_t)cap * sizeof *c);
        if (!c)
            return WF_E_NO_MEMORY;
        p->chunks = c;
        p->cap_chunks = cap;
    }
    /* the free stack holds every request, so a put never needs room */
    wf_comm_req_t **f = realloc(p->free,
                                (size_t)(p->total + REQ_CHUNK) * sizeof *f);
    if (!f)
        return WF_E_NO_MEMORY;
    p->free = f;
    unsigned char *chunk = calloc(REQ_CHUNK, p->req_size);
    if (!chunk)
        return WF_E_NO_MEMORY;
    p->chunks[p->nchunks++] = chunk;
    p->total += REQ_CHUNK;
    for (int i = 0; i < REQ_CHUNK; i++) {
        wf_comm_req_t *r = (wf_comm_req_t *)(chunk + (size_t)i * p->req_size);
        if (p->init)
            p->init(r, p->init_arg);
        p->free[p->nfree++] = r;
    }
    return WF_OK;
}

wf_status_t wf_req_pool_init(wf_req_pool_t *p, size_t req_size,
                             wf_req_init_fn init, void *init_arg)
{
    assert(p && req_size > 0);
    *p = (wf_req_pool_t){.req_size = req_size, .init = init,
                         .init_arg = init_arg};
    return pool_grow(p);
}

wf_comm_req_t *wf_req_pool_get(wf_req_pool_t *p)
{
    if (p->nfree == 0 && pool_grow(p) != WF_OK)
        return NULL;
    return p->free[--p->nfree];
}

void wf_req_pool_put(wf_req_pool_t *p, wf_comm_req_t *r)
{
    assert(p->nfree < p->total);
    p->free[p->nfree++] = r;
}

void wf_req_pool_fini(wf_req_pool_t *p)
{
    for (int i = 0; i < p->nchunks; i++)
        free(p->chunks[i]);
    free(p->chunks);
    free(p->free);
    *p = (wf_req_pool_t){0};
}

wf_status_t wf_req_list_reserve(wf_req_list_t *l)
{
    if (l->n < l->cap)
        return WF_OK;
    int cap = l->cap ? 2 * l->cap : 8;
    wf_comm_req_t **r = realloc(l->reqs, (size_t)cap * sizeof *r);
    if (!r)
        return WF_E_NO_MEMORY;
    l->reqs = r;
    l->cap = cap;
    return WF_OK;
}

void wf_req_list_push(wf_req_list_t *l, wf_comm_req_t *r)
{
    assert(l->n < l->cap);
    l->reqs[l->n++] = r;
}

void wf_req_list_fini(wf_req_list_t *l)
{
    free(l->reqs);
    *l = (wf_req_list_t){0};
}
