/* attention.h — the attention op as a gang job: the plan (group size, head
 * split, outputs, memory per rank) made on the main thread at admission,
 * and the step function each rank runs on its worker.
 *
 * Heads are split over the g ranks, contiguous and as even as possible
 * (the first Hq % g ranks get one more); each rank reads Q/K/V straight
 * from the received frames (any alignment) and writes its heads into the
 * one shared output buffer. No communication between ranks.
 */
#ifndef WF_ATTENTION_H
#define WF_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "job.h"

/* Plan the attention job of a decoded, frame-checked request on a daemon
 * with n_devices devices: sets group_size, reserve[] (output + lse share
 * + workspace of each rank's head range), scale, the output descriptors
 * and run. Returns WF_OK, or an error with a message. */
wf_status_t wf_attention_plan(wf_djob_t *job, const wf_backend_ops_t *ops,
                              uint32_t n_devices, char *err, size_t err_len);

/* Query heads [*ret_begin, *ret_end) of `rank` out of `group_size`. */
void wf_attention_heads(int64_t hq, int rank, int group_size,
                        int64_t *ret_begin, int64_t *ret_end);

#endif /* WF_ATTENTION_H */
