/* channel.h — the tensor channel between the coordinator and the members
 * (PROTOCOL.md section 11, "Tensor channel"): the coordinator's ROUTER on
 * data_address, each member's DEALER (routing id = its node name). No
 * routing-id handover: while a member's connection lives, another
 * connection with its name is refused by ZeroMQ. With the cluster's keys
 * (cluster.h wf_cluster_keys_t) the ROUTER is a CURVE server in
 * WF_ZAP_NODES and the members pin the coordinator's key; a message whose
 * ZAP user id is not the node name its routing id claims is dropped
 * (logged). A job
 * whose roots are on a member gets its inputs ("in") from the coordinator
 * and sends its outputs ("out") back; a member says "hi" once its part of
 * a world serves. Each message is a header (a typed control message of
 * proto/cluster_msg.h: epoch = world epoch, seq, n, st) and n tensor
 * frames, sent zero-copy.
 *
 * This module moves bytes only: it knows neither jobs' bookkeeping nor
 * worlds. What it receives goes to its owner's callback (world.c); nothing
 * from a peer is passed on before its name and header decoded and
 * validated (wf_cmsg_get), and only hi / in / out headers. Main thread
 * only. Called by cluster/world.c.
 */
#ifndef WF_CHANNEL_H
#define WF_CHANNEL_H

#include <stdbool.h>
#include <stdint.h>
#include <zmq.h>

#include "base/config.h"
#include "base/log.h"
#include "cluster.h"
#include "cluster_msg.h"
#include "proto.h"
#include "runtime/job.h"

typedef struct wf_channel wf_channel_t;

/* A received message: the sender's node name (coordinator; NULL on a
 * member: from the coordinator), the validated header (type
 * WF_CMSG_XFER_HI, _IN or _OUT) and its n tensor frames. Header and frames
 * are borrowed for the call; the callee may move frames out
 * (zmq_msg_move). */
typedef void (*wf_channel_msg_fn)(void *arg, const char *from,
                                  const wf_cmsg_t *header, zmq_msg_t *frames,
                                  uint32_t n);

/* Coordinator (`coord`): bind a ROUTER on settings->data_address, any port
 * (wf_channel_endpoint says which). Member: no socket until
 * wf_channel_connect. Received messages go to fn(arg, ...). Borrowed until
 * wf_channel_destroy: zctx, settings, keys (NULL: no CURVE), log. Logs
 * what failed. Caller owns *ret. */
wf_status_t wf_channel_new(void *zctx, bool coord, const wf_settings_t *settings,
                           const wf_cluster_keys_t *keys, wf_log_t *log,
                           wf_channel_msg_fn fn, void *arg, wf_channel_t **ret);

/* Coordinator: messages dropped because their user id was not the node
 * their routing id names (keys) or they came from an unnamed peer. */
uint64_t wf_channel_dropped(const wf_channel_t *ch);

/* Close the socket, free; sets *ch to NULL; accepts NULL. */
void wf_channel_destroy(wf_channel_t **ch);

/* Member, a new world: connect to the channel at `ep` as `self_name`
 * (reconnects only when ep changed; "" closes it: no channel). */
void wf_channel_connect(wf_channel_t *ch, const char *ep, const char *self_name);

/* The socket to poll for ZMQ_POLLIN, NULL when there is none. Borrowed. */
void *wf_channel_socket(const wf_channel_t *ch);

/* The bound (coordinator) or connected (member) endpoint; "" when none.
 * Borrowed. */
const char *wf_channel_endpoint(const wf_channel_t *ch);

/* Coordinator, at dispatch: q, k, v of `job` to member `node` (copies
 * share the received frames). False when they could not be queued
 * (logged). */
bool wf_channel_send_inputs(wf_channel_t *ch, const wf_djob_t *job,
                            const char *node);

/* Member: our part of world `epoch` serves: "hi" to the coordinator. */
void wf_channel_send_hi(wf_channel_t *ch, uint64_t epoch);

/* Member: the outputs of `job` (its roots' part ended well), taken out of
 * the job (zero-copy). False when they could not be queued. */
bool wf_channel_send_outputs(wf_channel_t *ch, wf_djob_t *job);

/* Read every waiting message (at most 256) and pass each to the callback. */
void wf_channel_recv(wf_channel_t *ch);

#endif /* WF_CHANNEL_H */
