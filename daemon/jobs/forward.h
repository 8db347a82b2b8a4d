/* forward.h — the forward op as a gang job on one dp replica: every rank
 * of the replica (ring x ulysses x tp) runs its family's forward with its
 * shard of the resident model (models.h) and its mesh communicators.
 * Replica rank r has tp coordinate r % tp and seq index r / tp; rank 0 is
 * the root: it reads the request's frames and writes the output buffer.
 * With split_batch the batch's samples go to min(dp, B) replicas at once
 * (job->split; tensor_split's pieces, in replica order): job rank r is
 * rank r % g of the (r / g)-th, g = ring x ulysses x tp; each replica's
 * root reads its samples of every input with the batch as dimension 0
 * (the others whole) and writes its rows of the one output buffer. No
 * collective crosses replicas; the layer boundaries are the job's, so
 * every replica stops at the same one.
 * Every check happens in the plan, on the main thread, so a bad job never
 * reaches a collective.
 */
#ifndef WF_FORWARD_H
#define WF_FORWARD_H

#include <stdint.h>

#include "backend.h"
#include "runtime/job.h"
#include "base/mesh.h"
#include "models/models.h"

/* Plan a decoded, frame-checked forward request for `mesh` on model `m`
 * (READY): validates the inputs against its config and the mesh (the
 * sequences must split over ring x ulysses), sets kind, cp (the whole
 * replica), group_size, reserve[] (workspace; the root also the output),
 * the output descriptor, model_id and run. WF_E_BAD_ARGUMENT /
 * WF_E_BAD_SHAPE with a message. */
wf_status_t wf_forward_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                            const wf_mesh_t *mesh, const wf_model_t *m,
                            char *err, size_t err_len);

/* The step of every rank (job->run). */
wf_status_t wf_forward_step(wf_djob_t *job, int rank, int group_size,
                            wf_worker_t *w);

#endif /* WF_FORWARD_H */
