/* cp_groups.c — see cp_groups.h. */
#include "support/cp_groups.h"

wf_status_t cp_groups_split(wf_comm_t *world, int rank, int R, int U, int T,
                            wf_mesh_coords_t *ret_co, wf_comm_t **seq,
                            wf_comm_t **ring, wf_comm_t **uly)
{
    wf_mesh_t m;
    wf_mesh_degrees_t deg = {.dp = 1, .ring = R, .ulysses = U, .tp = T};
    wf_status_t st = wf_mesh_init(&m, &deg, R * U * T, NULL, 0);
    if (st == WF_OK)
        st = wf_mesh_coords(&m, rank, ret_co);
    const wf_mesh_dim_t dims[3] = {WF_MESH_DIM_SEQ, WF_MESH_DIM_RING, WF_MESH_DIM_ULYSSES};
    wf_comm_t **sub[3] = {seq, ring, uly};
    for (int i = 0; i < 3 && st == WF_OK; i++) {
        int col, key;
        st = wf_mesh_color(&m, dims[i], rank, &col, &key);
        if (st == WF_OK)
            st = wf_comm_split(world, col, key, sub[i]);
    }
    return st;
}
