/* test_request_pool.c — the request pool and group-call list of
 * daemon/comm/request_pool.h (comm_host's and comm_zmq's): growth past
 * one chunk, distinct and aligned requests, the init callback once per
 * request, reuse after put (nothing new allocated), the list's growth and
 * order, and finishing a zeroed pool / list. */
#include "comm/request_pool.h"
#include "support/check.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* This test's request type (each backend has its own). */
struct wf_comm_req {
    double payload[3]; /* something with an alignment */
    int inits;         /* times the init callback ran on it */
    int tag;           /* written by the user */
};

static void count_init(wf_comm_req_t *r, void *arg)
{
    r->inits++;
    (*(int *)arg)++;
}

enum { MANY = 100 }; /* more than three chunks */

static void test_pool(void)
{
    int inits = 0;
    wf_req_pool_t p;
    CHECK_TRUE(wf_req_pool_init(&p, sizeof(wf_comm_req_t), count_init, &inits) ==
               WF_OK);
    CHECK_TRUE(inits > 0 && inits == p.total && p.nfree == p.total);
    wf_comm_req_t *r[MANY];
    for (int i = 0; i < MANY; i++) {
        r[i] = wf_req_pool_get(&p);
        CHECK_TRUE(r[i] != NULL);
        if (!r[i])
            return;
        CHECK_TRUE((uintptr_t)r[i] % _Alignof(wf_comm_req_t) == 0);
        CHECK_TRUE(r[i]->inits == 1);
        r[i]->tag = i;
    }
    CHECK_TRUE(inits == p.total && p.total >= MANY);
    /* all distinct and intact (no request overlaps another) */
    for (int i = 0; i < MANY; i++) {
        CHECK_TRUE(r[i]->tag == i);
        for (int j = 0; j < i; j++)
            CHECK_TRUE(r[i] != r[j]);
    }
    /* put back and take again: the same requests, nothing new */
    int total = p.total;
    for (int i = 0; i < MANY; i++)
        wf_req_pool_put(&p, r[i]);
    CHECK_TRUE(p.nfree == p.total);
    for (int i = 0; i < MANY; i++)
        CHECK_TRUE(wf_req_pool_get(&p) != NULL);
    CHECK_TRUE(p.total == total && inits == total);
    wf_req_pool_fini(&p);
    CHECK_TRUE(p.total == 0 && p.chunks == NULL);
    wf_req_pool_fini(&p); /* twice: zeroed */

    /* without a callback: zeroed requests */
    CHECK_TRUE(wf_req_pool_init(&p, sizeof(wf_comm_req_t), NULL, NULL) == WF_OK);
    wf_comm_req_t *z = wf_req_pool_get(&p);
    CHECK_TRUE(z && z->inits == 0 && z->tag == 0);
    wf_req_pool_put(&p, z);
    wf_req_pool_fini(&p);
}

static void test_list(void)
{
    wf_req_list_t l;
    memset(&l, 0, sizeof l);
    wf_req_list_fini(&l); /* zeroed */
    wf_comm_req_t reqs[MANY];
    for (int i = 0; i < MANY; i++) {
        CHECK_TRUE(wf_req_list_reserve(&l) == WF_OK);
        CHECK_TRUE(l.cap > l.n);
        wf_req_list_push(&l, &reqs[i]);
    }
    CHECK_TRUE(l.n == MANY);
    for (int i = 0; i < MANY; i++)
        CHECK_TRUE(l.reqs[i] == &reqs[i]);
    /* reserving with room to spare changes nothing */
    l.n = 0;
    int cap = l.cap;
    CHECK_TRUE(wf_req_list_reserve(&l) == WF_OK && l.cap == cap);
    wf_req_list_fini(&l);
    CHECK_TRUE(l.reqs == NULL && l.n == 0 && l.cap == 0);
}

int main(void)
{
    test_pool();
    test_list();
    if (failed) {
        fprintf(stderr, "test_request_pool: %d failure(s)\n", failed);
        return 1;
    }
    printf("test_request_pool: ok\n");
    return 0;
}
