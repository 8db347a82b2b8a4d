/* commcheck.h — test support for the comm backends (comm.h): one checked
 * instance of every op, and the rank bodies built from them (every op,
 * a random mix, ring exchanges, mesh splits), shared by test_comm.c (host
 * backend, one thread per rank) and test_comm_zmq.c (ZeroMQ backend,
 * processes). Each checker runs one op on every rank of `c`, with sizes,
 * roots and data chosen by `it` (the same on every rank), checks what the
 * rank holds byte for byte and returns the failed expectations (each
 * printed on stderr). A checker calls wf_comm_sync before the host
 * reads what an operation wrote, as comm.h asks of a device comm (nccl:
 * stream-ordered); elsewhere it returns WF_OK at once. Not here: harnesses, abort, mismatch verdicts and
 * anything backend-specific. Tests only. */
#ifndef WF_TEST_COMMCHECK_H
#define WF_TEST_COMMCHECK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"

/* Count a failed expectation in the enclosing function's `fails`. */
#define EXPECT(cond)                                                         \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__,          \
                    __LINE__, #cond);                                        \
            fails++;                                                         \
        }                                                                    \
    } while (0)

#define EXPECT_OK(expr)                                                      \
    do {                                                                     \
        wf_status_t st_ = (expr);                                            \
        if (st_ != WF_OK) {                                                  \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__,   \
                    #expr, (int)st_);                                        \
            fails++;                                                         \
        }                                                                    \
    } while (0)

#define CC_GAP 3     /* bytes left between blocks to catch stray writes */
#define CC_SENT 0xEE /* sentinel value of untouched bytes */

/* Same value on every rank for the same arguments. */
uint64_t cc_rnd(uint64_t a, uint64_t b, uint64_t c, uint64_t d);

/* Byte k of the message from src to dst in iteration it. */
uint8_t cc_pat(int src, int dst, int it, size_t k);

/* Uneven per-pair byte count in [0, 40], zero about a quarter of the time. */
size_t cc_cnt(int it, int src, int dst, int salt);

/* One checked op of `it`'s sizes and roots; every rank of `c` calls it. */
typedef int (*cc_op_fn)(wf_comm_t *c, int it);

/* Shared by the ranks of one world (threads, or processes through shared
 * memory): set before the ranks start. */
typedef struct cc_shared {
    atomic_int arrivals;  /* cc_barrier: arrivals so far, all ranks */
    int iters;            /* loop length of the body */
    size_t allreduce_big; /* cc_allreduce's largest count in run_op */
    cc_op_fn extra;       /* (optional) a backend's own op, op number
                           * CC_OP_N of cc_body_every_op / cc_body_mixed */
} cc_shared_t;

/* The ops cc_body_every_op and cc_body_mixed run (without `extra`). */
enum { CC_OP_N = 10 };

/* Collectives. Counts go up to 40 bytes a pair, with all-zero ones;
 * cc_allreduce sums f32 and f64 vectors of 0, 1, 2, 7, 1001 or `big`
 * elements (by it % 6), in place on odd it / 6. */
int cc_allgather(wf_comm_t *c, int it);
int cc_allgatherv(wf_comm_t *c, int it);
int cc_alltoall(wf_comm_t *c, int it);
int cc_alltoallv(wf_comm_t *c, int it);
int cc_allreduce(wf_comm_t *c, int it, size_t big);
int cc_broadcast(wf_comm_t *c, int it);
int cc_scatterv(wf_comm_t *c, int it);
int cc_gatherv(wf_comm_t *c, int it);

/* A barrier that checks, with sh->arrivals, that nobody passed early;
 * *round counts this rank's barriers (start at 0). */
int cc_barrier(wf_comm_t *c, cc_shared_t *sh, int *round);

/* Blocking send / recv between pairs (0,1), (2,3), ..., and to myself
 * inside a group call. */
int cc_sendrecv(wf_comm_t *c, int it);

/* Arguments (up to 8 ranks) of an all-to-all-v of 2 bytes a pair whose
 * counts do not match: rank 0 expects 3 bytes from rank n-1, which sends
 * 2. Blocks are 4 bytes apart. */
void cc_mismatched_counts(wf_comm_t *c, size_t sc[8], size_t sd[8],
                          size_t rc[8], size_t rd[8]);

/* What every backend refuses locally: a collective inside a group call,
 * a group end without a start, a send to a rank outside the group. */
int cc_local_refusals(wf_comm_t *c);

/* After an abort: every later call fails at once with WF_E_ABORTED
 * (barrier, send, irecv, split). */
int cc_aborted_refusals(wf_comm_t *c);

/* Rank bodies; `arg` is a cc_shared_t (NULL for the ring bodies). */

/* Every op (then sh->extra), sh->iters times, each with varying sizes. */
int cc_body_every_op(wf_comm_t *c, void *arg);

/* sh->iters ops drawn at random, the same sequence on every rank. */
int cc_body_mixed(wf_comm_t *c, void *arg);

/* Ring exchange of 1000-byte shards, 3 rounds in group calls. */
int cc_body_ring_grouped(wf_comm_t *c, void *arg);

/* Ring exchange with isend / irecv in flight while the current shard is
 * checked, then wf_comm_test on a receive from myself. */
int cc_body_ring_overlap(wf_comm_t *c, void *arg);

/* World of 8 as dp=2, ring=2, ulysses=2: split along the mesh's
 * dimensions, check each sub-group's members, run sh->iters rounds of
 * interleaved collectives in all of them; a split of a split, NOCOLOR,
 * and the world handle after its sub-groups are gone. */
int cc_body_split_mesh(wf_comm_t *c, void *arg);

#endif
