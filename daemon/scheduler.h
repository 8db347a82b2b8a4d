/* scheduler.h — the bounded job queue, memory admission and gang dispatch.
 *
 * Main thread only. A job is admitted (sequence number, epoch) when the
 * queue has room and its per-rank memory could ever fit on the devices;
 * otherwise it is refused at once (WF_E_QUEUE_FULL, WF_E_NO_MEMORY).
 * Dispatch takes jobs strictly in sequence order: the head job waits until
 * g devices are idle and each has room for its rank's reservation, then it
 * gets its output buffers and is queued on those g workers, rank order =
 * device order. One gang task per device at a time keeps the queue the
 * place where jobs wait (so queue_capacity means something) and keeps
 * every worker's FIFO in the same relative order.
 */
#ifndef WF_SCHEDULER_H
#define WF_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job.h"
#include "log.h"
#include "worker.h"

typedef struct wf_sched {
    wf_worker_t *workers;        /* borrowed: the daemon's workers */
    uint32_t n_devices;          /* entries of workers[] */
    uint64_t used[WF_SETTINGS_MAX_DEVICES];   /* bytes reserved per device */
    uint32_t tasks[WF_SETTINGS_MAX_DEVICES];  /* gang tasks outstanding per device */
    wf_djob_t *head, *tail;      /* admitted, not dispatched, in sequence order */
    uint32_t depth;              /* jobs in the queue */
    uint32_t capacity;           /* bound on depth (reloadable) */
    uint32_t in_flight;          /* dispatched, not completed */
    uint64_t next_seq;           /* sequence number of the next admitted job */
    uint64_t epoch;              /* mesh epoch (0 until meshes exist) */
    uint64_t served, failed;     /* completed jobs by outcome */
    wf_log_t *log;               /* borrowed */
} wf_sched_t;

void wf_sched_init(wf_sched_t *s, wf_worker_t *workers, uint32_t n_devices,
                   uint32_t capacity, wf_log_t *log);

/* Admit a planned job (group_size, reserve[], n_outputs set): WF_OK and
 * the queue takes ownership, or WF_E_QUEUE_FULL / WF_E_NO_MEMORY with a
 * message and the caller keeps the job. */
wf_status_t wf_sched_admit(wf_sched_t *s, wf_djob_t *job, char *err,
                           size_t err_len);

/* Dispatch queued jobs while the head fits. Jobs whose outputs cannot be
 * allocated are failed: they go to *ret_failed (a list linked by ->next,
 * status set) for the caller to answer. Returns the number dispatched. */
size_t wf_sched_dispatch(wf_sched_t *s, uint64_t now_us, wf_djob_t **ret_failed);

/* A dispatched job finished: release its devices and reservations. */
void wf_sched_complete(wf_sched_t *s, const wf_djob_t *job);

/* Remove and return every queued (not dispatched) job, in order. */
wf_djob_t *wf_sched_take_queued(wf_sched_t *s);

/* True when nothing is queued or running. */
bool wf_sched_idle(const wf_sched_t *s);

#endif /* WF_SCHEDULER_H */
