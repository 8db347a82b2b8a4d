/* attention.h — the attention op as a gang job on one dp replica of the
 * mesh: the plan (group size, per-rank memory, outputs, resolved per-job
 * options) made on the main thread, and the step function each rank runs
 * on its worker.
 *
 * Two shapes of job, chosen by the mesh:
 *  - ring = ulysses = 1: the query heads are split over g of the replica's
 *    tp ranks (g = min(tp, the job's `devices` when set, Hq)), contiguous
 *    and as even as possible (the first Hq % g ranks get one more); each
 *    rank reads Q/K/V straight from the received frames (any alignment)
 *    and writes its heads into the one shared output buffer. No
 *    communication.
 *  - ring x ulysses > 1 (context parallelism): every rank of the replica;
 *    each tp slice (ranks with the same tp coordinate) is a context-
 *    parallel group serving query heads [t*Hq/T, (t+1)*Hq/T) (tp must
 *    divide Hq) with wf_cp_attention_run over its seq / ring / ulysses
 *    communicators. The slice's root (seq index 0) reads the frames and
 *    writes its heads of the outputs. `devices` is not used.
 * Every check happens in the plan, on the main thread, so a bad job never
 * reaches a collective; a rank whose step fails after that aborts the
 * world (the daemon then rebuilds it).
 */
#ifndef WF_ATTENTION_H
#define WF_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "base/config.h"
#include "runtime/job.h"
#include "base/mesh.h"

/* Plan the attention job of a decoded, frame-checked request for `mesh`
 * (its epoch goes to job->plan_epoch): resolves the per-job options (the
 * request's, else the settings' defaults), sets cp, group_size, reserve[]
 * (output share + workspace of each rank), scale, the output descriptors
 * and run. The tp ranks split the heads unevenly where tp does not
 * divide them (wf_attention_heads), on every mesh. Returns WF_OK, or
 * WF_E_BAD_ARGUMENT with a message: on a mesh with ring x ulysses > 1
 * fewer heads than tp ranks or `devices` != 0, or what the
 * context-parallel check says (its WF_E_BAD_SHAPE becomes
 * WF_E_BAD_ARGUMENT: PROTOCOL.md section 6, "7 or 9"). */
wf_status_t wf_attention_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                              const wf_mesh_t *mesh,
                              const wf_settings_t *defaults, char *err,
                              size_t err_len);

/* The step function of a context-parallel attention job (what the plan
 * sets as job->run); a cluster member runs its ranks' parts with it from
 * a job rebuilt from the coordinator's descriptor, roots included when
 * they are on the member (job->root_here: the inputs came on the tensor
 * channel into frames[0..3); a root whose inputs did not match fails
 * with WF_E_INTERNAL, aborting the world). */
wf_status_t wf_attention_cp_run(wf_djob_t *job, int rank, int group_size,
                                wf_worker_t *w);

/* The step function of a head-split attention job (ring = ulysses = 1;
 * what the plan sets as job->run): rank `rank` of `group_size` computes
 * its query heads from the request frames into the shared outputs; no
 * communication. A cluster member runs it for a job rebuilt from the
 * coordinator's descriptor whose ranks are all its own (job->root_here:
 * the inputs came on the tensor channel into frames[0..3); a part whose
 * inputs did not match fails with WF_E_INTERNAL). */
wf_status_t wf_attention_head_split_run(wf_djob_t *job, int rank,
                                        int group_size, wf_worker_t *w);

/* Query heads [*ret_begin, *ret_end) of `rank` out of `group_size`. */
void wf_attention_heads(int64_t hq, int rank, int group_size,
                        int64_t *ret_begin, int64_t *ret_end);


#endif /* WF_ATTENTION_H */
