/* test_request_pool.c — the request pool and group-call list of
 * daemon/comm/request_pool.h (comm_host's and comm_zmq's): growth past
 * one chunk, distinct and aligned requests, the init callback once per
 * request, reuse after put (nothing new allocated), the list's growth and
 * order, and finishing a zeroed pool / list. */
#include "comm/request_pool.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            failures++;                                                      \
        }                                                                    \
    } while (0)

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
    CHECK(wf_req_pool_init(&p, sizeof(wf_comm_req_t), count_init, &inits) ==
          WF_OK);
    CHECK(inits > 0 && inits == p.total && p.nfree == p.total);
    wf_comm_req_t *r[MANY];
    for (int i = 0; i < MANY; i++) {
        r[i] = wf_req_pool_get(&p);
        CHECK(r[i] != NULL);
        if (!r[i])
            return;
        CHECK((uintptr_t)r[i] % _Alignof(wf_comm_req_t) == 0);
        CHECK(r[i]->inits == 1);
        r[i]->tag = i;
    }
    CHECK(inits == p.total && p.total >= MANY);
    /* all distinct and intact (no request overlaps another) */
    for (int i = 0; i < MANY; i++) {
        CHECK(r[i]->tag == i);
        for (int j = 0; j < i; j++)
            CHECK(r[i] != r[j]);
    }
    /* put back and take again: the same requests, nothing new */
    int total = p.total;
    for (int i = 0; i < MANY; i++)
        wf_req_pool_put(&p, r[i]);
    CHECK(p.nfree == p.total);
    for (int i = 0; i < MANY; i++)
        CHECK(wf_req_pool_get(&p) != NULL);
    CHECK(p.total == total && inits == total);
    wf_req_pool_fini(&p);
    CHECK(p.total == 0 && p.chunks == NULL);
    wf_req_pool_fini(&p); /* twice: zeroed */

    /* without a callback: zeroed requests */
    CHECK(wf_req_pool_init(&p, sizeof(wf_comm_req_t), NULL, NULL) == WF_OK);
    wf_comm_req_t *z = wf_req_pool_get(&p);
    CHECK(z && z->inits == 0 && z->tag == 0);
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
        CHECK(wf_req_list_reserve(&l) == WF_OK);
        CHECK(l.cap > l.n);
        wf_req_list_push(&l, &reqs[i]);
    }
    CHECK(l.n == MANY);
    for (int i = 0; i < MANY; i++)
        CHECK(l.reqs[i] == &reqs[i]);
    /* reserving with room to spare changes nothing */
    l.n = 0;
    int cap = l.cap;
    CHECK(wf_req_list_reserve(&l) == WF_OK && l.cap == cap);
    wf_req_list_fini(&l);
    CHECK(l.reqs == NULL && l.n == 0 && l.cap == 0);
}

int main(void)
{
    test_pool();
    test_list();
    if (failures) {
        fprintf(stderr, "test_request_pool: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_request_pool: ok\n");
    return 0;
}
