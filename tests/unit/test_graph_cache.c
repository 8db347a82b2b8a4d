/* test_graph_cache.c — the CUDA backend's cache of captured graphs
 * (kernels/cuda/graph_cache.h) without a GPU: a key runs uncaptured at
 * its first sight, is captured at its second and replayed after; a
 * failed capture keeps the key uncaptured; keys differing in one byte
 * (a workspace base, a shape) are apart; the same key under another
 * anchor starts over; the count is bounded (least recently used goes);
 * freeing an anchor drops its graphs and no other; every graph let go is
 * let go exactly once. The graphs are tokens counted by the free
 * callback. */
#include "graph_cache.h"
#include "support/check.h"

#include <stdio.h>
#include <string.h>

static int let_go[64];     /* times token i was let go */
static int user_seen;      /* the callback got _new's user pointer */

static void free_token(void *user, void *graph)
{
    user_seen += user == (void *)&user_seen;
    let_go[(int *)graph - let_go]++;
}

static void *token(int i) { return &let_go[i]; }

typedef struct key {
    int block;
    const void *ws;
    long shape;
} key_t_;

static key_t_ key_of(int block, const void *ws, long shape)
{
    key_t_ k;
    memset(&k, 0, sizeof k);
    k.block = block;
    k.ws = ws;
    k.shape = shape;
    return k;
}

static void test_steps(void)
{
    wf_graph_cache_t *c = NULL;
    void *g;
    int anchor;
    memset(let_go, 0, sizeof let_go);
    CHECK_TRUE(wf_graph_cache_new(8, free_token, &user_seen, &c) == WF_OK && c);
    key_t_ k = key_of(0, (void *)0x1000, 4608);
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_RUN && !g);
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_CAPTURE && !g);
    wf_graph_cache_set(c, token(1));
    for (int i = 0; i < 3; i++)
        CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_REPLAYED &&
                   g == token(1));
    /* one byte apart: another workspace base, another shape */
    key_t_ k2 = key_of(0, (void *)0x2000, 4608), k3 = key_of(0, (void *)0x1000, 4609);
    CHECK_TRUE(wf_graph_cache_step(c, &k2, sizeof k2, &anchor, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, &k3, sizeof k3, &anchor, &g) == WF_GRAPH_RUN);
    /* a failed capture: uncaptured from then on */
    CHECK_TRUE(wf_graph_cache_step(c, &k2, sizeof k2, &anchor, &g) == WF_GRAPH_CAPTURE);
    wf_graph_cache_set(c, NULL);
    for (int i = 0; i < 3; i++)
        CHECK_TRUE(wf_graph_cache_step(c, &k2, sizeof k2, &anchor, &g) == WF_GRAPH_RUN);
    /* a capture never settled is forgotten at the next step */
    CHECK_TRUE(wf_graph_cache_step(c, &k3, sizeof k3, &anchor, &g) == WF_GRAPH_CAPTURE);
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_REPLAYED);
    CHECK_TRUE(wf_graph_cache_step(c, &k3, sizeof k3, &anchor, &g) == WF_GRAPH_RUN);
    /* a replay that failed to launch: the key starts over */
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_REPLAYED);
    wf_graph_cache_forget_last(c);
    CHECK_TRUE(let_go[1] == 1);
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, &g) == WF_GRAPH_RUN);
    /* refusals: no key, too long a key, no out-parameter */
    static unsigned char big[WF_GRAPH_KEY_MAX + 1];
    CHECK_TRUE(wf_graph_cache_step(c, NULL, 8, &anchor, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, big, sizeof big, &anchor, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, big, sizeof big, &anchor, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, &k, sizeof k, &anchor, NULL) == WF_GRAPH_RUN);
    /* set without a pending entry lets the graph go */
    wf_graph_cache_set(c, token(2));
    CHECK_TRUE(let_go[2] == 1);
    uint64_t rep, cap, ref, ev;
    uint32_t held;
    wf_graph_cache_stats(c, &held, &rep, &cap, &ref, &ev);
    CHECK(rep == 5 && cap == 1 && ref == 1 && ev == 0, "replays %llu captures %llu refused "
          "%llu evicted %llu", (unsigned long long)rep, (unsigned long long)cap,
          (unsigned long long)ref, (unsigned long long)ev);
    wf_graph_cache_destroy(&c);
    CHECK_TRUE(c == NULL && user_seen == 2);
    wf_graph_cache_destroy(&c); /* NULL accepted */
    CHECK_TRUE(wf_graph_cache_new(0, free_token, NULL, &c) == WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_graph_cache_new(WF_GRAPH_CACHE_MAX + 1, free_token, NULL, &c) ==
               WF_E_BAD_ARGUMENT);
    CHECK_TRUE(wf_graph_cache_new(4, NULL, NULL, &c) == WF_E_BAD_ARGUMENT);
}

/* Capture key k with token i (two steps and a set). */
static void capture(wf_graph_cache_t *c, const key_t_ *k, const void *anchor, int i)
{
    void *g;
    CHECK_TRUE(wf_graph_cache_step(c, k, sizeof *k, anchor, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, k, sizeof *k, anchor, &g) == WF_GRAPH_CAPTURE);
    wf_graph_cache_set(c, token(i));
}

static void test_bound_and_drops(void)
{
    wf_graph_cache_t *c = NULL;
    void *g;
    int a1, a2;
    memset(let_go, 0, sizeof let_go);
    CHECK_TRUE(wf_graph_cache_new(4, free_token, NULL, &c) == WF_OK);
    key_t_ k[6];
    for (int i = 0; i < 6; i++)
        k[i] = key_of(i, (void *)0x1000, 4608);
    for (int i = 0; i < 4; i++)
        capture(c, &k[i], i < 2 ? &a1 : &a2, i);
    /* k0 used last: k1 is the least recently used */
    CHECK_TRUE(wf_graph_cache_step(c, &k[0], sizeof k[0], &a1, &g) == WF_GRAPH_REPLAYED);
    CHECK_TRUE(wf_graph_cache_step(c, &k[4], sizeof k[4], &a2, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(let_go[1] == 1 && let_go[0] == 0 && let_go[2] == 0 && let_go[3] == 0);
    uint32_t held;
    uint64_t ev;
    wf_graph_cache_stats(c, &held, NULL, NULL, NULL, &ev);
    CHECK_TRUE(held == 4 && ev == 1);
    CHECK_TRUE(wf_graph_cache_step(c, &k[1], sizeof k[1], &a1, &g) == WF_GRAPH_RUN);
    wf_graph_cache_destroy(&c);
    for (int i = 0; i < 4; i++)
        CHECK(let_go[i] == 1, "token %d let go %d times", i, let_go[i]);

    /* room for all: the anchors alone decide */
    memset(let_go, 0, sizeof let_go);
    CHECK_TRUE(wf_graph_cache_new(16, free_token, NULL, &c) == WF_OK);
    for (int i = 0; i < 4; i++)
        capture(c, &k[i], i < 2 ? &a1 : &a2, i);
    /* the same key under another anchor starts over */
    CHECK_TRUE(wf_graph_cache_step(c, &k[0], sizeof k[0], &a2, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(let_go[0] == 1);
    /* dropping an anchor drops its graphs only */
    capture(c, &k[5], &a1, 5);
    wf_graph_cache_drop_anchor(c, &a2);
    CHECK_TRUE(let_go[2] == 1 && let_go[3] == 1 && let_go[1] == 0 && let_go[5] == 0);
    CHECK_TRUE(wf_graph_cache_step(c, &k[5], sizeof k[5], &a1, &g) == WF_GRAPH_REPLAYED &&
               g == token(5));
    CHECK_TRUE(wf_graph_cache_step(c, &k[1], sizeof k[1], &a1, &g) == WF_GRAPH_REPLAYED &&
               g == token(1));
    CHECK_TRUE(wf_graph_cache_step(c, &k[2], sizeof k[2], &a2, &g) == WF_GRAPH_RUN);
    CHECK_TRUE(wf_graph_cache_step(c, &k[0], sizeof k[0], &a2, &g) == WF_GRAPH_RUN);
    wf_graph_cache_clear(c);
    CHECK_TRUE(let_go[5] == 1 && let_go[1] == 1);
    wf_graph_cache_stats(c, &held, NULL, NULL, NULL, &ev);
    CHECK_TRUE(held == 0 && ev == 0);
    wf_graph_cache_destroy(&c);
    for (int i = 0; i < 6; i++)
        CHECK(let_go[i] == (i == 4 ? 0 : 1), "token %d let go %d times", i, let_go[i]);
}

int main(void)
{
    test_steps();
    test_bound_and_drops();
    printf("test_graph_cache: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
