/* cp_groups.h — the context-parallel groups of one rank, for the tests
 * that run wf_cp_attention on threads of the host comm (test_cp_attention.c,
 * test_cp_fused.c): the mesh of a ring x ulysses x tp world and the seq /
 * ring / ulysses communicators split from it by wf_mesh_color, as the
 * daemon's worlds have them. Not here: the job, its buffers and checks.
 * Tests only. */
#ifndef WF_TEST_CP_GROUPS_H
#define WF_TEST_CP_GROUPS_H

#include "base/mesh.h"
#include "comm/comm.h"

/* Rank `rank` of world (dp 1, ring R, ulysses U, tp T: R * U * T ranks):
 * its coordinates to *ret_co and its seq / ring / ulysses groups split
 * from world (collective: every rank of world calls it). WF_OK, or the
 * first failure; the groups made before it are set, and the caller
 * destroys *seq, *ring and *uly in either case. */
wf_status_t cp_groups_split(wf_comm_t *world, int rank, int R, int U, int T,
                            wf_mesh_coords_t *ret_co, wf_comm_t **seq,
                            wf_comm_t **ring, wf_comm_t **uly);

#endif
