/* model_load.c — resident models across the nodes of a cluster world (see
 * model_load.h): the table of the coordinator's load steps, holders and
 * the forward refusal. Calls the control plane
 * (cluster.h) for the nodes of the world; never the server.
 */
#include "model_load.h"

#include <string.h>

#include "errf.h"

/* The coordinator's steps. Every failure ends the load (the client gets
 * it once, every member forgets the model); a catch-up that fails leaves
 * the model on the nodes that held it, refused for forwards in that
 * world. TIMEOUT is raised in OPEN only: the later steps wait on this
 * node's own reading and regroup, which end. */
static const wf_mload_rule_t rules[] = {
    /* state                     event                 action                        next */
    { WF_MLOAD_OPEN,            WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_GO,              WF_MLOAD_READ },
    { WF_MLOAD_OPEN,            WF_MLOAD_EV_DIFFERS,  WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_OPEN,            WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_OPEN,            WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_OPEN,            WF_MLOAD_EV_TIMEOUT,  WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_READ,            WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_INSTALL,         WF_MLOAD_INSTALL },
    { WF_MLOAD_READ,            WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_READ,            WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_INSTALL,         WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_DONE,            WF_MLOAD_IDLE },
    { WF_MLOAD_INSTALL,         WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_INSTALL,         WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_FAIL,            WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_OPEN,    WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_CATCHUP_GO,      WF_MLOAD_CATCHUP_READ },
    { WF_MLOAD_CATCHUP_OPEN,    WF_MLOAD_EV_DIFFERS,  WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_OPEN,    WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_OPEN,    WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_OPEN,    WF_MLOAD_EV_TIMEOUT,  WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_READ,    WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_CATCHUP_INSTALL, WF_MLOAD_CATCHUP_INSTALL },
    { WF_MLOAD_CATCHUP_READ,    WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_READ,    WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_INSTALL, WF_MLOAD_EV_ANSWERED, WF_MLOAD_ACT_CATCHUP_DONE,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_INSTALL, WF_MLOAD_EV_FAILED,   WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
    { WF_MLOAD_CATCHUP_INSTALL, WF_MLOAD_EV_WORLD,    WF_MLOAD_ACT_CATCHUP_FAIL,    WF_MLOAD_IDLE },
};

const wf_mload_rule_t *wf_mload_rule(wf_mload_state_t state, wf_mload_event_t event)
{
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].state == state && rules[i].event == event)
            return &rules[i];
    return NULL;
}

wf_mload_state_t wf_mload_state(const wf_model_t *m)
{
    if (m->cstep < WF_MLOAD_OPEN || m->cstep > WF_MLOAD_INSTALL)
        return WF_MLOAD_IDLE;
    return (wf_mload_state_t)(m->cstep + (m->catchup ? 3 : 0));
}

void wf_mload_set_state(wf_model_t *m, wf_mload_state_t state)
{
    m->catchup = state >= WF_MLOAD_CATCHUP_OPEN;
    m->cstep = state >= WF_MLOAD_CATCHUP_OPEN ? (int)state - 3 : (int)state;
}

const char *wf_mload_state_name(wf_mload_state_t state)
{
    static const char *const names[WF_MLOAD_STATES] = {
        "idle", "open", "read", "install", "catch-up open", "catch-up read",
        "catch-up install",
    };
    return (unsigned)state < WF_MLOAD_STATES ? names[state] : "?";
}

const char *wf_mload_event_name(wf_mload_event_t event)
{
    static const char *const names[WF_MLOAD_EVENTS] = {
        "answered", "differs", "failed", "world changed", "timeout",
    };
    return (unsigned)event < WF_MLOAD_EVENTS ? names[event] : "?";
}

bool wf_mload_holds(const char *nodes, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = nodes; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ':')
            return true;
    return false;
}

/* The first node of world w now that does not hold m, or NULL. */
static const char *missing_node(const wf_world_t *w, const wf_model_t *m,
                                char *buf, size_t len)
{
    wf_cluster_node_t nodes[WF_SETTINGS_MAX_NODES];
    uint64_t epoch;
    uint32_t n = 0;
    wf_cluster_world(wf_world_cluster(w), nodes, WF_SETTINGS_MAX_NODES, &n, &epoch);
    for (uint32_t i = 0; i < n; i++)
        if (!wf_mload_holds(m->nodes, nodes[i].name)) {
            wf_errf(buf, len, "%s", nodes[i].name);
            return buf;
        }
    return NULL;
}

const char *wf_mload_forward_refused(const wf_world_t *w, const wf_sched_t *s,
                                     const wf_model_t *m, const wf_mesh_t *mesh,
                                     char *buf, size_t len)
{
    if (!w)
        return NULL;
    /* a forward's roots are its replica's tp ranks: one replica at least
     * must have them on one node, else the job would wait forever */
    uint32_t dp = mesh->deg.dp ? mesh->deg.dp : 1, n = s->n_devices / dp;
    bool placeable = false;
    for (uint32_t r = 0; r < dp && !placeable && n >= mesh->deg.tp; r++) {
        placeable = true;
        for (uint32_t k = 1; k < mesh->deg.tp; k++)
            placeable = placeable && s->node_of[r * n + k] == s->node_of[r * n];
    }
    if (!placeable) {
        wf_errf(buf, len, "the mesh's tp groups (tp=%u) span nodes: a forward's tp "
                "ranks must be on one node; reconfigure with tp inside a node "
                "(ring / ulysses / dp across nodes)", mesh->deg.tp);
        return buf;
    }
    if (m->unfit_epoch && m->unfit_epoch == mesh->epoch) {
        wf_errf(buf, len, "%s", m->unfit);
        return buf;
    }
    char who[WF_SETTINGS_NAME_MAX];
    if (!wf_world_coordinator(w) || !m->lid || !m->nodes[0] ||
        !missing_node(w, m, who, sizeof who))
        return NULL;
    if (m->catchup)
        wf_errf(buf, len, "model '%s' is being installed on node %s, which "
                "joined the cluster's world; retry", m->name, who);
    else
        wf_errf(buf, len, "model '%s' is not resident on node %s of the "
                "cluster's world (it is held by %s)%s%s", m->name, who, m->nodes,
                m->cerr[0] ? ": " : "; retry", m->cerr);
    return buf;
}
