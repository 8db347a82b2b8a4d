/* job.c — job lifetime and gang completion (see job.h). */
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/notify.h"
#include "session.h"

wf_djob_t *wf_djob_new(void)
{
    wf_djob_t *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    zmq_msg_init(&job->identity);
    atomic_init(&job->remaining, 0);
    atomic_init(&job->status, WF_OK);
    atomic_init(&job->stop_req, WF_OK);
    pthread_mutex_init(&job->agree_mu, NULL);
    job->agree_step = -1;
    job->agree_stop = INT64_MAX;
    return job;
}

void wf_djob_free(wf_djob_t **job)
{
    if (!job || !*job)
        return;
    wf_djob_t *j = *job;
    if (j->session)
        wf_session_unref(j->session);
    zmq_msg_close(&j->identity);
    for (uint32_t i = 0; i < j->n_frames; i++)
        zmq_msg_close(&j->frames[i]);
    for (uint32_t i = 0; i < j->n_out_msgs; i++)
        zmq_msg_close(&j->out_msg[i]);
    for (uint32_t i = 0; i < WF_DJOB_MAX_OUTPUTS; i++)
        free(j->out[i]);
    if (j->zworld) {
        for (int i = 0; i < WF_SETTINGS_MAX_DEVICES; i++)
            wf_comm_zmq_endpoint_destroy(&j->zworld->ep[i]);
        wf_comm_zmq_local_unref(&j->zworld->cfg.local);
        free(j->zworld);
    }
    pthread_mutex_destroy(&j->agree_mu);
    free(j);
    *job = NULL;
}

void wf_djob_rank_done(wf_djob_t *job, wf_status_t st)
{
    if (st != WF_OK) {
        int expected = WF_OK;
        if (!atomic_compare_exchange_strong(&job->status, &expected, (int)st) &&
            expected == WF_E_ABORTED && st != WF_E_ABORTED)
            atomic_compare_exchange_strong(&job->status, &expected, (int)st);
    }
    /* acq_rel: the last rank sees every other rank's writes to the
     * outputs before it hands the job to the main thread. */
    if (atomic_fetch_sub_explicit(&job->remaining, 1, memory_order_acq_rel) != 1)
        return;
    job->t_done_us = wf_now_usec();
    wf_done_box_t *box = job->done;
    job->next = NULL;
    pthread_mutex_lock(&box->mu);
    if (box->tail)
        box->tail->next = job;
    else
        box->head = job;
    box->tail = job;
    pthread_mutex_unlock(&box->mu);
    uint64_t one = 1;
    /* Cannot fail short of a counter overflow; the main thread also
     * drains the box on every loop iteration. */
    ssize_t w = write(box->efd, &one, sizeof one);
    (void)w;
}

wf_status_t wf_djob_stop_wanted(const wf_djob_t *job, uint64_t now_us)
{
    int req = atomic_load_explicit(&job->stop_req, memory_order_relaxed);
    if (req != WF_OK)
        return (wf_status_t)req;
    if (job->deadline_us && now_us >= job->deadline_us)
        return WF_E_DEADLINE;
    return WF_OK;
}

void wf_djob_stop_message(wf_djob_t *job, wf_status_t st, int64_t step)
{
    char where[96];
    if (step < 0)
        snprintf(where, sizeof where, "while it was queued");
    else if (step == 0)
        snprintf(where, sizeof where, "as it started; its devices are free");
    else
        snprintf(where, sizeof where, "at step boundary %lld of its run; its "
                 "devices are free", (long long)step);
    if (st == WF_E_CANCELLED)
        snprintf(job->err, sizeof job->err, "job cancelled %s", where);
    else
        snprintf(job->err, sizeof job->err, "the job's deadline (%llu ms from "
                 "receipt) passed %s",
                 (unsigned long long)((job->deadline_us - job->t_recv_us) / 1000),
                 where);
}

wf_status_t wf_djob_boundary(wf_djob_t *job, int64_t step)
{
    if (!job->stoppable)
        return WF_OK;
    pthread_mutex_lock(&job->agree_mu);
    if (job->agree_step < step) {
        /* the first rank here: every other rank is before this boundary */
        job->agree_step = step;
        if (job->agree_stop == INT64_MAX) {
            wf_status_t st = wf_djob_stop_wanted(job, wf_now_usec());
            if (st != WF_OK) {
                job->agree_stop = step;
                job->agree_status = st;
                /* read by the main thread after the last rank is done */
                wf_djob_stop_message(job, st, step);
            }
        }
    }
    wf_status_t st = job->agree_stop <= step ? job->agree_status : WF_OK;
    pthread_mutex_unlock(&job->agree_mu);
    return st;
}

wf_status_t wf_djob_boundary_ahead(wf_djob_t *job, int64_t step)
{
    if (!job->stoppable || wf_djob_stop_wanted(job, wf_now_usec()) == WF_OK)
        return WF_OK;
    pthread_mutex_lock(&job->agree_mu);
    if (job->agree_stop == INT64_MAX && job->agree_step < step) {
        /* nobody is at `step` yet: everyone will stop there */
        wf_status_t st = wf_djob_stop_wanted(job, wf_now_usec());
        job->agree_step = step;
        job->agree_stop = step;
        job->agree_status = st;
        wf_djob_stop_message(job, st, step);
    }
    wf_status_t st = job->agree_stop <= step ? job->agree_status : WF_OK;
    pthread_mutex_unlock(&job->agree_mu);
    return st;
}

wf_status_t wf_done_box_init(wf_done_box_t *box)
{
    box->head = box->tail = NULL;
    box->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (box->efd < 0)
        return WF_E_INTERNAL;
    pthread_mutex_init(&box->mu, NULL);
    return WF_OK;
}

void wf_done_box_destroy(wf_done_box_t *box)
{
    if (box->efd >= 0) {
        close(box->efd);
        pthread_mutex_destroy(&box->mu);
    }
    box->efd = -1;
}

wf_djob_t *wf_done_box_take(wf_done_box_t *box)
{
    uint64_t n;
    ssize_t r = read(box->efd, &n, sizeof n);   /* EAGAIN when zero: fine */
    (void)r;
    pthread_mutex_lock(&box->mu);
    wf_djob_t *list = box->head;
    box->head = box->tail = NULL;
    pthread_mutex_unlock(&box->mu);
    return list;
}
