/* mesh.h — the parallel mesh of weftd: degrees, rank layout, groups.
 *
 * The world (every device of every node, global rank 0..world-1) is laid
 * out row-major over four dims, outermost first: dp, ring, ulysses, tp
 * (tp innermost: it needs the most bandwidth and stays inside a node).
 * rank = ((dp_c * ring + ring_c) * ulysses + ulysses_c) * tp + tp_c.
 * So for tp = 1 the ulysses groups are consecutive ranks and the ring
 * groups are strided by ulysses, as in diffusers' default mesh.
 *
 * A group along a dim is the set of ranks that differ only in that
 * coordinate, ordered by it. WF_MESH_DIM_SEQ is the flattened ring x
 * ulysses group over which the sequence is split and gathered; its order
 * is ring-major, ulysses-minor (index = ring_c * ulysses + ulysses_c).
 *
 * This module is pure arithmetic: no allocation, no I/O, no logging, no
 * communicators (it computes the color / key a caller feeds to
 * wf_comm_split). Validation messages go to a caller buffer.
 */
#ifndef WF_MESH_H
#define WF_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Largest degree of one dim and largest world size accepted (so every
 * degree and rank fits an int once validated). */
#define WF_MESH_MAX_WORLD 65536

/* The dims a group can be taken along. The first four are the mesh's
 * own dims (their numbers are the order of the layout, outermost first). */
typedef enum wf_mesh_dim {
    WF_MESH_DIM_DP = 0,      /* independent replicas */
    WF_MESH_DIM_RING = 1,    /* ring attention (point-to-point) */
    WF_MESH_DIM_ULYSSES = 2, /* ulysses attention (all-to-all) */
    WF_MESH_DIM_TP = 3,      /* tensor parallelism (all-reduce) */
    WF_MESH_DIM_SEQ = 4      /* flattened ring x ulysses (sequence split) */
} wf_mesh_dim_t;

/* Number of mesh dims proper (dp, ring, ulysses, tp). */
#define WF_MESH_NDIMS 4
/* Number of group kinds (the mesh dims plus SEQ). */
#define WF_MESH_NGROUPS 5

/* Degrees of the mesh: the public wf_mesh_degrees_t of weft.h (uint32
 * dp, ring, ulysses, tp; each >= 1, product = world size). */

/* Coordinates of one rank; each in [0, degree). */
typedef struct wf_mesh_coords {
    int dp;      /* replica index */
    int ring;    /* position in the ring group */
    int ulysses; /* position in the ulysses group */
    int tp;      /* position in the tp group */
} wf_mesh_coords_t;

/* A validated mesh. Plain value: copy it freely. */
typedef struct wf_mesh {
    wf_mesh_degrees_t deg; /* validated degrees */
    int world_size;        /* dp * ring * ulysses * tp */
    uint64_t epoch;        /* bumped by wf_mesh_reconfigure; 0 after init */
} wf_mesh_t;

/* Validate `deg` against `world_size` and fill *m (epoch 0). Errors:
 * WF_E_BAD_FIELD when a degree is < 1 or > WF_MESH_MAX_WORLD, or when the
 * product differs from world_size (the message names both numbers);
 * WF_E_BAD_ARGUMENT when world_size itself is out of range. (weftd
 * answers a bad mesh of a request with WF_E_BAD_ARGUMENT.) On error *m
 * is untouched and `err` (when not NULL, `errlen` bytes) holds a one-line
 * message; on success err is set to "". */
wf_status_t wf_mesh_init(wf_mesh_t *m, const wf_mesh_degrees_t *deg,
                         int world_size, char *err, size_t errlen);

/* Replace the degrees of a live mesh (same world size) and bump its
 * epoch; validated exactly as wf_mesh_init. On error *m is untouched. */
wf_status_t wf_mesh_reconfigure(wf_mesh_t *m, const wf_mesh_degrees_t *deg,
                                char *err, size_t errlen);

/* Coordinates of `rank`. WF_E_BAD_ARGUMENT if rank is outside the world. */
wf_status_t wf_mesh_coords(const wf_mesh_t *m, int rank,
                           wf_mesh_coords_t *ret_coords);

/* Rank at `coords`. WF_E_BAD_ARGUMENT if a coordinate is out of range. */
wf_status_t wf_mesh_rank(const wf_mesh_t *m, const wf_mesh_coords_t *coords,
                         int *ret_rank);

/* Number of ranks in a group along `dim` (the degree; ring * ulysses for
 * SEQ); 0 for an unknown dim. */
int wf_mesh_group_size(const wf_mesh_t *m, wf_mesh_dim_t dim);

/* The group along `dim` that contains `rank`: its members in group order
 * into ret_ranks (room for `max_ranks` entries; may be NULL when only the
 * size or index is wanted), its size into *ret_size and the position of
 * `rank` in it into *ret_index (either may be NULL). Errors:
 * WF_E_BAD_ARGUMENT for an unknown dim or a rank outside the world,
 * WF_E_LIMIT when ret_ranks is given and max_ranks is too small. */
wf_status_t wf_mesh_group(const wf_mesh_t *m, wf_mesh_dim_t dim, int rank,
                          int *ret_ranks, int max_ranks, int *ret_size,
                          int *ret_index);

/* Color and key of `rank` for splitting the world communicator into the
 * groups along `dim` (ncclCommSplit style: ranks with the same color form
 * one sub-group, ordered by key). The color is the lowest world rank of
 * the group, so it is stable, non-negative and the same on every rank of
 * the group; the key is the rank's index in the group. */
wf_status_t wf_mesh_color(const wf_mesh_t *m, wf_mesh_dim_t dim, int rank,
                          int *ret_color, int *ret_key);

/* Parse "ring=2,ulysses=2" / "dp=2,tp=2" into degrees; names not given
 * are 1. Names: dp, ring, ulysses, tp; values: decimal, 1..
 * WF_MESH_MAX_WORLD; spaces around names and values are allowed; an empty
 * string is all ones. Errors (WF_E_BAD_FIELD, message in err): unknown
 * name, duplicate name, zero / out-of-range / non-numeric value, empty
 * item, missing '='. Does not check against a world size (wf_mesh_init
 * does). */
wf_status_t wf_mesh_parse(const char *s, wf_mesh_degrees_t *ret_deg,
                          char *err, size_t errlen);

/* The degrees as "dp=1,ring=2,ulysses=2,tp=1" (parses back with
 * wf_mesh_parse) into buf; truncated to len (64 bytes always suffice). */
void wf_mesh_degrees_format(const wf_mesh_degrees_t *d, char *buf, size_t len);

/* One status line for *m into buf ("dp=1,ring=2,ulysses=2,tp=2 world=8
 * epoch=0"); the degrees part parses back with wf_mesh_parse.
 * WF_E_LIMIT if `len` is too small (buf then holds a truncated line). */
wf_status_t wf_mesh_format(const wf_mesh_t *m, char *buf, size_t len);

/* Name of a dim ("dp", "ring", "ulysses", "tp", "seq"); "?" if unknown. */
const char *wf_mesh_dim_name(wf_mesh_dim_t dim);

/* Check that the tp degree divides the number of attention heads (each tp
 * rank keeps heads / tp of them). WF_E_BAD_ARGUMENT with a message in the
 * style of diffusers' sharding errors otherwise; heads < 1 is also
 * WF_E_BAD_ARGUMENT. */
wf_status_t wf_mesh_check_heads(const wf_mesh_t *m, int heads, char *err,
                                size_t errlen);

#endif /* WF_MESH_H */
