/* p2p_plan.c — collectives as point-to-point plans (see p2p_plan.h).
 * Pure: no I/O, no allocation. */
#include "p2p_plan.h"

static void add_op(wf_p2p_op_t *ops, size_t *k, int peer, int is_send,
                   size_t off, size_t bytes)
{
    ops[*k] = (wf_p2p_op_t){peer, is_send, off, bytes};
    (*k)++;
}

size_t wf_p2p_plan_alltoallv(int rank, int n, const size_t *sendcounts,
                             const size_t *sdispls, const size_t *recvcounts,
                             const size_t *rdispls, wf_p2p_op_t *ops,
                             wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    *ret_self = (wf_p2p_copy_t){sdispls[rank], rdispls[rank], sendcounts[rank]};
    for (int s = 1; s < n; s++) {
        int to = (rank + s) % n, from = (rank - s + n) % n;
        add_op(ops, &k, to, 1, sdispls[to], sendcounts[to]);
        add_op(ops, &k, from, 0, rdispls[from], recvcounts[from]);
    }
    return k;
}

size_t wf_p2p_plan_alltoall(int rank, int n, size_t bytes, wf_p2p_op_t *ops,
                            wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    size_t me = (size_t)rank * bytes;
    *ret_self = (wf_p2p_copy_t){me, me, bytes};
    for (int s = 1; s < n; s++) {
        int to = (rank + s) % n, from = (rank - s + n) % n;
        add_op(ops, &k, to, 1, (size_t)to * bytes, bytes);
        add_op(ops, &k, from, 0, (size_t)from * bytes, bytes);
    }
    return k;
}

size_t wf_p2p_plan_allgatherv(int rank, int n, size_t sendbytes,
                              const size_t *recvcounts, const size_t *displs,
                              wf_p2p_op_t *ops, wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    *ret_self = (wf_p2p_copy_t){0, displs[rank], sendbytes};
    for (int s = 1; s < n; s++) {
        int to = (rank + s) % n, from = (rank - s + n) % n;
        add_op(ops, &k, to, 1, 0, sendbytes);
        add_op(ops, &k, from, 0, displs[from], recvcounts[from]);
    }
    return k;
}

size_t wf_p2p_plan_allgather(int rank, int n, size_t bytes, wf_p2p_op_t *ops,
                             wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    *ret_self = (wf_p2p_copy_t){0, (size_t)rank * bytes, bytes};
    for (int s = 1; s < n; s++) {
        int to = (rank + s) % n, from = (rank - s + n) % n;
        add_op(ops, &k, to, 1, 0, bytes);
        add_op(ops, &k, from, 0, (size_t)from * bytes, bytes);
    }
    return k;
}

size_t wf_p2p_plan_scatterv(int rank, int n, int root,
                            const size_t *sendcounts, const size_t *displs,
                            size_t recvbytes, wf_p2p_op_t *ops,
                            wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    *ret_self = (wf_p2p_copy_t){0, 0, 0};
    if (rank != root) {
        add_op(ops, &k, root, 0, 0, recvbytes);
        return k;
    }
    *ret_self = (wf_p2p_copy_t){displs[root], 0, sendcounts[root]};
    for (int s = 1; s < n; s++) {
        int to = (root + s) % n;
        add_op(ops, &k, to, 1, displs[to], sendcounts[to]);
    }
    return k;
}

size_t wf_p2p_plan_gatherv(int rank, int n, int root, size_t sendbytes,
                           const size_t *recvcounts, const size_t *displs,
                           wf_p2p_op_t *ops, wf_p2p_copy_t *ret_self)
{
    size_t k = 0;
    *ret_self = (wf_p2p_copy_t){0, 0, 0};
    if (rank != root) {
        add_op(ops, &k, root, 1, 0, sendbytes);
        return k;
    }
    *ret_self = (wf_p2p_copy_t){0, displs[root], recvcounts[root]};
    for (int s = 1; s < n; s++) {
        int from = (root + s) % n;
        add_op(ops, &k, from, 0, displs[from], recvcounts[from]);
    }
    return k;
}

int wf_p2p_allgather_even(int n, const size_t *recvcounts,
                          const size_t *displs, size_t *ret_bytes)
{
    if (n < 1)
        return 0;
    size_t c = recvcounts[0];
    for (int j = 0; j < n; j++)
        if (recvcounts[j] != c || displs[j] != (size_t)j * c)
            return 0;
    *ret_bytes = c;
    return 1;
}
