/* session.c — denoising sessions (session.h). */
#include "session.h"

#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "worker.h"

static wf_sessions_t *table(struct wf_sched *s)
{
    return &s->sessions;
}

/* The state leaves its devices: uncounted, and the workers told. */
static void unplace(struct wf_sched *s, wf_session_t *sess, bool tell_workers)
{
    if (!sess->placed)
        return;
    wf_sessions_t *t = table(s);
    for (uint32_t k = 0; k < sess->ndev; k++) {
        uint32_t d = sess->dev[k];
        t->held[d] = t->held[d] > sess->bytes ? t->held[d] - sess->bytes : 0;
        if (tell_workers && d >= s->local_first && d - s->local_first < s->n_local)
            wf_worker_drop_session(&s->workers[d - s->local_first], sess->sid);
    }
    sess->placed = false;
    sess->ndev = 0;
}

static void drop(struct wf_sched *s, wf_session_t *sess)
{
    wf_sessions_t *t = table(s);
    unplace(s, sess, true);
    for (wf_session_t **p = &t->head; *p; p = &(*p)->next)
        if (*p == sess) {
            *p = sess->next;
            t->n--;
            break;
        }
    free(sess);
}

wf_session_t *wf_session_get(struct wf_sched *s, const void *key, size_t key_len,
                             uint64_t id, bool create, uint64_t now_us, wf_status_t *st)
{
    wf_sessions_t *t = table(s);
    if (key_len > WF_SESSION_KEY_MAX) {
        *st = WF_E_BAD_ARGUMENT;
        return NULL;
    }
    for (wf_session_t *x = t->head; x; x = x->next)
        if (!x->ended && x->id == id && x->key_len == key_len &&
            memcmp(x->key, key, key_len) == 0) {
            *st = WF_OK;
            return x;
        }
    if (!create) {
        *st = WF_E_BAD_ARGUMENT;
        return NULL;
    }
    if (t->n >= t->max) {
        *st = WF_E_LIMIT;
        return NULL;
    }
    wf_session_t *x = calloc(1, sizeof *x);
    if (!x) {
        *st = WF_E_NO_MEMORY;
        return NULL;
    }
    x->owner = s;
    x->id = id;
    x->sid = ++t->next_sid;
    x->key_len = key_len;
    memcpy(x->key, key, key_len);
    x->last_us = now_us;
    x->next = t->head;
    t->head = x;
    t->n++;
    *st = WF_OK;
    return x;
}

bool wf_session_step(wf_session_t *sess, uint64_t step)
{
    bool over = sess->has_step && step <= sess->last_step;
    sess->has_step = true;
    sess->last_step = step;
    return over;
}

void wf_session_ref(wf_session_t *sess)
{
    sess->refs++;
}

void wf_session_unref(wf_session_t *sess)
{
    if (sess->refs)
        sess->refs--;
    if (sess->ended && sess->refs == 0)
        drop(sess->owner, sess);
}

void wf_session_place(struct wf_sched *s, wf_session_t *sess, uint32_t rep,
                      const uint32_t *dev, uint32_t n, uint64_t bytes)
{
    if (sess->placed && sess->epoch == s->mesh.epoch && sess->replica == rep)
        return;
    unplace(s, sess, true);
    wf_sessions_t *t = table(s);
    for (uint32_t k = 0; k < n; k++) {
        sess->dev[k] = dev[k];
        t->held[dev[k]] += bytes;
    }
    sess->ndev = n;
    sess->bytes = bytes;
    sess->replica = rep;
    sess->epoch = s->mesh.epoch;
    sess->placed = true;
}

int wf_session_replica(const struct wf_sched *s, const wf_session_t *sess)
{
    return sess->placed && sess->epoch == s->mesh.epoch ? (int)sess->replica : -1;
}

void wf_session_end(struct wf_sched *s, wf_session_t *sess, uint64_t now_us)
{
    sess->ended = true;
    sess->last_us = now_us;
    if (sess->refs == 0)
        drop(s, sess);
}

void wf_sessions_unplace_all(struct wf_sched *s)
{
    for (wf_session_t *x = table(s)->head; x; x = x->next)
        unplace(s, x, false);
    memset(table(s)->held, 0, sizeof table(s)->held);
}

uint32_t wf_sessions_reap(struct wf_sched *s, uint64_t now_us, uint64_t idle_us)
{
    uint32_t n = 0;
    wf_session_t *x = table(s)->head;
    while (x) {
        wf_session_t *next = x->next;
        /* last_us may be a worker's clock reading a little after now_us */
        if (!x->ended && x->refs == 0 && now_us > x->last_us &&
            now_us - x->last_us >= idle_us) {
            wf_session_end(s, x, now_us);
            n++;
        }
        x = next;
    }
    return n;
}

uint64_t wf_sessions_next_idle(const struct wf_sched *s, uint64_t idle_us)
{
    uint64_t next = 0;
    for (const wf_session_t *x = s->sessions.head; x; x = x->next)
        if (!x->ended && x->refs == 0 && (next == 0 || x->last_us + idle_us < next))
            next = x->last_us + idle_us;
    return next;
}

void wf_sessions_free(struct wf_sched *s)
{
    wf_sessions_t *t = table(s);
    while (t->head) {
        wf_session_t *next = t->head->next;
        free(t->head);
        t->head = next;
    }
    t->n = 0;
    memset(t->held, 0, sizeof t->held);
}
