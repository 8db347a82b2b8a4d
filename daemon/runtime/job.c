/* job.c — job lifetime and gang completion (see job.h). */
#include "job.h"

#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/notify.h"

wf_djob_t *wf_djob_new(void)
{
    wf_djob_t *job = calloc(1, sizeof *job);
    if (!job)
        return NULL;
    zmq_msg_init(&job->identity);
    atomic_init(&job->remaining, 0);
    atomic_init(&job->status, WF_OK);
    return job;
}

void wf_djob_free(wf_djob_t **job)
{
    if (!job || !*job)
        return;
    wf_djob_t *j = *job;
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
