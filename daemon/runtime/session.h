/* session.h — denoising sessions: the forwards of one generation (a
 * pipeline call) that a client tags with the same session id, whose
 * first-block cache state (models/family_run.h wf_fbc_t) lives on the
 * devices of the replica that served the session's first step, until
 * the session ends.
 *
 * Main thread only; the workers hold the states (worker.h) and free them
 * when told (wf_worker_drop_session) or when their mesh changes (a
 * regroup). A session is its client's (the share's key: a CURVE key's
 * name, or one connection) and its id; the daemon gives it a sid of its
 * own, never reused, which the workers know it by, so a state is never
 * taken for another session's.
 *
 * Bounds: at most `max` sessions open (session_max); a session's state is
 * counted against the memory of each device that holds it (held[], which
 * the scheduler's admission takes off the devices' capacity) from the
 * dispatch of its first step until it is dropped. A session ends by
 * end_session, after `idle_us` without a forward (the server's reaper),
 * or with the daemon; its state also goes with a new mesh (the next step
 * computes every block again).
 */
#ifndef WF_SESSION_H
#define WF_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "weft.h"

#define WF_SESSION_KEY_MAX 257     /* a share's key: 'k' NAME or 'c' ROUTING-ID
                                      (server/requests.c: at most 1 + 256) */

struct wf_sched;

typedef struct wf_session {
    struct wf_session *next;
    struct wf_sched *owner;        /* the scheduler whose table holds it */
    uint64_t id;                   /* the client's */
    uint64_t sid;                  /* the daemon's, never reused */
    size_t key_len;
    unsigned char key[WF_SESSION_KEY_MAX]; /* its client */
    bool placed;                   /* a state is held on dev[0 .. ndev) */
    uint64_t epoch;                /* the mesh epoch it was placed under */
    uint32_t replica;              /* the replica it runs on when placed */
    uint64_t bytes;                /* a rank's state */
    uint32_t ndev;
    uint32_t dev[WF_SETTINGS_MAX_DEVICES];
    uint32_t refs;                 /* its jobs not yet freed */
    bool ended;                    /* dropped once refs reaches 0 */
    uint64_t last_us;              /* its last forward's receipt or end */
    bool has_step;
    uint64_t last_step;            /* the last step index a forward gave */
    uint64_t steps, reused;        /* forwards served, and of them reused */
} wf_session_t;

typedef struct wf_sessions {
    wf_session_t *head;
    uint32_t n;                    /* sessions in the list */
    uint32_t max;                  /* session_max */
    uint64_t next_sid;
    uint64_t held[WF_SETTINGS_MAX_DEVICES]; /* state bytes on each device */
} wf_sessions_t;

/* Client key[0 .. key_len)'s session `id`: the open one, or (create) a new
 * one at now_us. NULL with *st: WF_E_LIMIT (max sessions open),
 * WF_E_NO_MEMORY, WF_E_BAD_ARGUMENT (no such session, !create). */
wf_session_t *wf_session_get(struct wf_sched *s, const void *key, size_t key_len,
                             uint64_t id, bool create, uint64_t now_us, wf_status_t *st);

/* A step index `step` given to a forward of the session: true when it is
 * not above the last one given, which starts the session over (that
 * job's rank states are reset before it runs: job.h cache_reset; the
 * jobs before it, in every worker's FIFO ahead of it, run as they were). */
bool wf_session_step(wf_session_t *sess, uint64_t step);

/* A job of the session exists / is freed (wf_djob_free): an ended
 * session goes when its last job does. */
void wf_session_ref(wf_session_t *sess);
void wf_session_unref(wf_session_t *sess);

/* Dispatch of a session's job on replica `rep`, ranks on dev[0 .. n): the
 * state is placed there (counted on those devices) unless it is already,
 * under this epoch. */
void wf_session_place(struct wf_sched *s, wf_session_t *sess, uint32_t rep,
                      const uint32_t *dev, uint32_t n, uint64_t bytes);

/* The replica a session's next job must run on, or -1 (none placed under
 * the mesh in force). */
int wf_session_replica(const struct wf_sched *s, const wf_session_t *sess);

/* End the session (end_session, the reaper): it goes now, or when its
 * last job does. */
void wf_session_end(struct wf_sched *s, wf_session_t *sess, uint64_t now_us);

/* The workers dropped every state (a new mesh): nothing is placed. */
void wf_sessions_unplace_all(struct wf_sched *s);

/* End sessions without a job for idle_us by now_us; how many. */
uint32_t wf_sessions_reap(struct wf_sched *s, uint64_t now_us, uint64_t idle_us);

/* The earliest time (us) a session may become idle, 0 when none can. */
uint64_t wf_sessions_next_idle(const struct wf_sched *s, uint64_t idle_us);

/* Free every session (teardown; the workers free their states). */
void wf_sessions_free(struct wf_sched *s);

#endif /* WF_SESSION_H */
