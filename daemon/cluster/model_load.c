/* model_load.c — resident models across the nodes of a cluster world (see
 * model_load.h): holders and the forward refusal. Calls the control plane
 * (cluster.h) for the nodes of the world; never the server.
 */
#include "model_load.h"

#include <string.h>

#include "errf.h"

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
