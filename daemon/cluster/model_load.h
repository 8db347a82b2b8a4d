/* model_load.h — resident models across the nodes of a cluster world:
 * which nodes hold a model, and whether a forward on it may be planned
 * for a mesh of the world. The registry is per node (models/models.h);
 * a model's holders are the list "a:0-1,b:2-3" in wf_model_t.nodes.
 * Main thread only. Called by daemon/server/.
 */
#ifndef WF_MODEL_LOAD_H
#define WF_MODEL_LOAD_H

#include <stdbool.h>
#include <stddef.h>

#include "base/mesh.h"
#include "models/models.h"
#include "runtime/scheduler.h"
#include "world.h"

/* Does the holders' list `nodes` ("a:0-1,b:2-3") name node `name`? */
bool wf_mload_holds(const char *nodes, const char *name);

/* Forward jobs on m for `mesh` in world w (NULL: a single node): NULL
 * when they may be planned, else why not, written into buf: the mesh's
 * tp groups span nodes (s: the scheduler of the world, its node_of), m
 * does not fit the mesh (m->unfit), or, on the coordinator, a node of
 * the world does not hold m. */
const char *wf_mload_forward_refused(const wf_world_t *w, const wf_sched_t *s,
                                     const wf_model_t *m, const wf_mesh_t *mesh,
                                     char *buf, size_t len);

#endif /* WF_MODEL_LOAD_H */
