/* cluster_link.c — what both sides of the control plane share: state
 * names, typed message I/O on the cluster socket, node-table queries
 * (see cluster_impl.h). Calls nothing else of the cluster's files.
 */
#include "cluster_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <zmq.h>

#include "proto.h"

const char *cluster_node_state_name(node_state_t s)
{
    switch (s) {
    case NODE_SELF: return "self";
    case NODE_JOINING: return "joining";
    case NODE_WORLD: return "joining";
    case NODE_READY: return "ready";
    case NODE_LOST: return "lost";
    }
    return "?";
}

const char *cluster_state_name(cstate_t s)
{
    switch (s) {
    case CS_FORMING: return "forming";
    case CS_SERVING: return "serving";
    case CS_DEGRADED: return "degraded";
    case CS_COORD_LOST: return "coordinator-lost";
    }
    return "?";
}

bool cluster_joining(const wf_cluster_t *c)
{
    return c->role == WF_CLUSTER_MEMBER && c->n_nodes == 0 && !c->fatal[0] &&
           c->state != CS_COORD_LOST;
}

void cluster_status_line(wf_cluster_t *c, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    wf_log(c->log, WF_LOG_NOTICE, "%s", line);
    wf_notify_status(c->notify, line);
}

void cluster_new_world_id(char out[WF_CMSG_WORLD_ID_MAX])
{
    unsigned char r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t t = wf_now_usec();
        memcpy(r, &t, 8);
        memcpy(r + 8, &t, 8);
    }
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* Send c->msg: to `to` (coordinator) or to the coordinator (member).
 * Never blocks: a peer that is gone loses the message. */
void cluster_send_msg(wf_cluster_t *c, const node_t *to)
{
    wf_buf_reset(&c->buf);
    if (wf_ctl_encode(&c->msg, &c->buf) != WF_OK) {
        wf_log(c->log, WF_LOG_ERR, "cluster: out of memory encoding a message");
        return;
    }
    if (c->role == WF_CLUSTER_COORDINATOR) {
        if (zmq_send(c->sock, to->id, to->id_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
            return;   /* EHOSTUNREACH: gone; its silence reports it */
    }
    zmq_send(c->sock, c->buf.data, c->buf.len, ZMQ_DONTWAIT);
}

/* Start c->tx as an empty message of `type`. */
wf_cmsg_t *cluster_tx_begin(wf_cluster_t *c, wf_cmsg_type_t type)
{
    memset(&c->tx, 0, sizeof c->tx);
    c->tx.type = type;
    return &c->tx;
}

/* c->tx into c->msg, ready for send_msg; false (logged) when it does not
 * fit a control message. */
bool cluster_tx_put(wf_cluster_t *c)
{
    wf_status_t rc = wf_cmsg_put(&c->msg, &c->tx);
    if (rc != WF_OK)
        wf_log(c->log, WF_LOG_ERR, "cluster: %s message not sent: %s",
               wf_cmsg_type_name(c->tx.type), wf_status_str(rc));
    return rc == WF_OK;
}

/* Read c->in into c->rx; false (logged) when it is not valid. */
bool cluster_rx_get(wf_cluster_t *c, const char *from)
{
    char err[WF_PROTO_ERROR_MAX];
    if (wf_cmsg_get(&c->in, &c->rx, err, sizeof err) == WF_OK)
        return true;
    wf_log(c->log, WF_LOG_WARNING, "cluster: bad control message from %s "
           "dropped: %s", from, err);
    return false;
}

uint32_t cluster_local_devices(const wf_cluster_t *c)
{
    return c->settings->device_count;
}

bool cluster_node_alive(const node_t *n)
{
    return n->state == NODE_SELF || n->state == NODE_JOINING ||
           n->state == NODE_WORLD || n->state == NODE_READY;
}

uint32_t cluster_count_alive(const wf_cluster_t *c)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < c->n_nodes; i++)
        k += cluster_node_alive(&c->nodes[i]);
    return k;
}

/* Names of the nodes in `state` (or of the expected ones never seen). */
void cluster_names_in(const wf_cluster_t *c, node_state_t st, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (uint32_t i = 0; i < c->n_nodes && o + 1 < len; i++)
        if (c->nodes[i].state == st)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "",
                                  c->nodes[i].name);
    if (o >= len)
        buf[len - 1] = '\0';
}

node_t *cluster_find_by_id(wf_cluster_t *c, const void *id, size_t len)
{
    for (uint32_t i = 1; i < c->n_nodes; i++)
        if (c->nodes[i].id_len == len && memcmp(c->nodes[i].id, id, len) == 0)
            return &c->nodes[i];
    return NULL;
}

node_t *cluster_find_by_name(wf_cluster_t *c, const char *name)
{
    for (uint32_t i = 0; i < c->n_nodes; i++)
        if (strcmp(c->nodes[i].name, name) == 0)
            return &c->nodes[i];
    return NULL;
}

void cluster_remove_node(wf_cluster_t *c, uint32_t i)
{
    if (i == 0 || i >= c->n_nodes)
        return;
    memmove(&c->nodes[i], &c->nodes[i + 1], (c->n_nodes - i - 1) * sizeof c->nodes[0]);
    c->n_nodes--;
    memset(&c->nodes[c->n_nodes], 0, sizeof c->nodes[0]);
}
