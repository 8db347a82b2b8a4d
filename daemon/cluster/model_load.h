/* model_load.h — resident models across the nodes of a cluster world:
 * the coordinator's load protocol as a table of states and events, which
 * nodes hold a model, and whether a forward on it may be planned for a
 * mesh of the world. The actions (messages, replies, regroups) are the
 * owner's (daemon/server/model_requests.c). The registry is per node (models/models.h);
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

/* The coordinator's cluster load of a model (PROTOCOL.md section 12.7),
 * step by step, each waiting for every node it runs on. A load runs on
 * every node of the world, for a client; a catch-up runs the same steps
 * on the nodes that joined the world since (no client). The state is
 * kept in the model: wf_model_t.cstep (the step) and .catchup. */
typedef enum wf_mload_state {
    WF_MLOAD_IDLE = 0,           /* no step runs */
    WF_MLOAD_OPEN = 1,           /* every node opens the files, answers digests */
    WF_MLOAD_READ = 2,           /* every node reads the weights */
    WF_MLOAD_INSTALL = 3,        /* the install regroup; members answer mready */
    WF_MLOAD_CATCHUP_OPEN = 4,   /* as OPEN, on the nodes that joined */
    WF_MLOAD_CATCHUP_READ = 5,   /* as READ, on the nodes that joined */
    WF_MLOAD_CATCHUP_INSTALL = 6 /* as INSTALL, on the nodes that joined */
} wf_mload_state_t;

#define WF_MLOAD_STATES 7

/* What happens to a load. The owner (daemon/server/) finds the event,
 * looks the rule up and runs its action. */
typedef enum wf_mload_event {
    WF_MLOAD_EV_ANSWERED = 0,    /* every node the step waits for answered WF_OK,
                                    this node's part is done (opened, read,
                                    installed) and the next step may start */
    WF_MLOAD_EV_DIFFERS = 1,     /* OPEN: every node answered, a node's digests
                                    differ from the coordinator's */
    WF_MLOAD_EV_FAILED = 2,      /* every node answered, one with a failure
                                    (wf_model_t.cst, .cerr) */
    WF_MLOAD_EV_WORLD = 3,       /* the world changed (a node lost or joined) */
    WF_MLOAD_EV_TIMEOUT = 4      /* OPEN: a node did not answer within
                                    cluster_timeout_ms */
} wf_mload_event_t;

#define WF_MLOAD_EVENTS 5

/* What the owner does on a rule. */
typedef enum wf_mload_action {
    WF_MLOAD_ACT_GO = 0,         /* "mgo" to the nodes; our loader reads */
    WF_MLOAD_ACT_INSTALL = 1,    /* our install regroup (the members follow) */
    WF_MLOAD_ACT_DONE = 2,       /* the holders are every node: answer WF_OK */
    WF_MLOAD_ACT_FAIL = 3,       /* answer the failure, "mdrop" to every
                                    member, drop ours */
    WF_MLOAD_ACT_CATCHUP_GO = 4, /* "mgo" to the nodes that joined */
    WF_MLOAD_ACT_CATCHUP_INSTALL = 5, /* a regroup on the mesh in force (may
                                    have to wait: the state stays) */
    WF_MLOAD_ACT_CATCHUP_DONE = 6, /* the nodes that joined are holders */
    WF_MLOAD_ACT_CATCHUP_FAIL = 7  /* "mdrop" to the nodes that joined;
                                    forwards on the model stay refused in
                                    this world */
} wf_mload_action_t;

#define WF_MLOAD_ACTIONS 8

/* One rule of the table: in `state`, on `event`, run `action`; the state
 * becomes `next` (set before the action runs: an action may drop the
 * model; one that could not start puts the state back). */
typedef struct wf_mload_rule {
    wf_mload_state_t state;
    wf_mload_event_t event;
    wf_mload_action_t action;
    wf_mload_state_t next;
} wf_mload_rule_t;

/* The rule for `event` in `state`, or NULL: the event changes nothing
 * there. Borrowed (static). */
const wf_mload_rule_t *wf_mload_rule(wf_mload_state_t state, wf_mload_event_t event);

/* m's state (from cstep and catchup). */
wf_mload_state_t wf_mload_state(const wf_model_t *m);

/* Set m's state (cstep and catchup). */
void wf_mload_set_state(wf_model_t *m, wf_mload_state_t state);

/* Names, for logs. Static strings. */
const char *wf_mload_state_name(wf_mload_state_t state);
const char *wf_mload_event_name(wf_mload_event_t event);

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
