/* scheduler.c — job queue, memory admission, dispatch onto dp replicas
 * (see scheduler.h). */
#include "scheduler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void wf_sched_init(wf_sched_t *s, wf_worker_t *workers, uint32_t n_devices,
                   uint32_t capacity, const wf_mesh_t *mesh, wf_log_t *log)
{
    memset(s, 0, sizeof *s);
    s->workers = workers;
    s->n_devices = n_devices;
    s->capacity = capacity;
    s->mesh = *mesh;
    s->log = log;
    s->n_local = n_devices;
    for (uint32_t d = 0; d < n_devices; d++) {
        s->mem_total[d] = workers[d].memory_total;
        s->held_cap += workers[d].memory_total;
    }
}

void wf_sched_resize(wf_sched_t *s, uint32_t n_devices, uint32_t local_first,
                     const wf_mesh_t *mesh)
{
    memset(s->used, 0, sizeof s->used);
    memset(s->tasks, 0, sizeof s->tasks);
    memset(s->replica_jobs, 0, sizeof s->replica_jobs);
    memset(s->node_of, 0, sizeof s->node_of);
    s->roots_ok = 0;
    s->next_replica = 0;
    s->n_devices = n_devices;
    s->local_first = local_first;
    s->cluster = true;
    s->mesh = *mesh;
    for (uint32_t d = 0; d < n_devices; d++)
        s->mem_total[d] = s->workers[d >= local_first && d - local_first < s->n_local
                                         ? d - local_first : 0].memory_total;
}

/* Bytes of device d that jobs may reserve: its memory less the resident
 * model shards. */
static uint64_t cap(const wf_sched_t *s, uint32_t d)
{
    uint64_t taken = s->resident + s->sessions.held[d];
    return s->mem_total[d] > taken ? s->mem_total[d] - taken : 0;
}

static bool is_local(const wf_sched_t *s, uint32_t d)
{
    return d >= s->local_first && d - s->local_first < s->n_local;
}

/* Cluster mode: the world node index of the member holding every rank
 * of replica `rep`, or -1 (some rank is ours, or the replica spans
 * nodes). */
static int member_replica(const wf_sched_t *s, uint32_t rep)
{
    uint32_t n = s->n_devices / s->mesh.deg.dp, base = rep * n;
    if (is_local(s, base) || s->node_of[base] >= 32)
        return -1;
    for (uint32_t d = base + 1; d < base + n; d++)
        if (s->node_of[d] != s->node_of[base])
            return -1;
    return s->node_of[base];
}

/* Cluster mode: the ranks of replica `rep` a job may use here — a
 * context-parallel job needs its roots (replica ranks 0..tp-1: they read
 * the inputs and write the outputs) local, or, with remote_roots, all on
 * one member (whose tensor channel is up when `now`); a head-split job
 * (no comm: every rank reads the inputs and writes its heads into the
 * outputs) runs on local ranks, or, with remote_roots, on a replica all
 * on one member (channel up when `now`). Returns the count of usable
 * ranks (cp: the replica size or 0). */
static uint32_t usable_in_replica(const wf_sched_t *s, const wf_djob_t *job,
                                  uint32_t rep, bool now)
{
    uint32_t n = s->n_devices / s->mesh.deg.dp, base = rep * n, k = 0;
    int member = member_replica(s, rep);
    if (!job->cp && member >= 0)
        return s->remote_roots && (!now || (s->roots_ok & (1u << member))) ? n : 0;
    if (job->cp) {
        bool local = true, one_node = true;
        for (uint32_t r = 0; r < s->mesh.deg.tp; r++) {
            local = local && is_local(s, base + r);
            one_node = one_node && s->node_of[base + r] == s->node_of[base];
        }
        if (local)
            return n;
        if (!s->remote_roots || !one_node || s->node_of[base] >= 32 ||
            (now && !(s->roots_ok & (1u << s->node_of[base]))))
            return 0;
        return n;
    }
    for (uint32_t d = base; d < base + n; d++)
        k += is_local(s, d);
    return k;
}

static uint64_t max_reserve(const wf_djob_t *job)
{
    uint64_t m = 0;
    for (int r = 0; r < job->group_size; r++)
        if (job->reserve[r] > m)
            m = job->reserve[r];
    return m;
}

/* Could the job ever fit? Its ranks go to distinct devices of one
 * replica; the largest share must fit in the largest device (CPU devices
 * are all alike). */
/* ------------------------------------------------------------------ */
/* shares (scheduler.h) */

wf_share_t *wf_sched_share(wf_sched_t *s, const void *key, size_t key_len,
                           const char *label)
{
    for (wf_share_t *sh = s->shares; sh; sh = sh->next)
        if (sh->key_len == key_len && memcmp(sh->key, key, key_len) == 0)
            return sh;
    wf_share_t *sh = calloc(1, sizeof *sh + key_len);
    if (!sh)
        return NULL;
    memcpy(sh->key, key, key_len);
    sh->key_len = key_len;
    snprintf(sh->label, sizeof sh->label, "%s", label);
    sh->next = s->shares;
    s->shares = sh;
    return sh;
}

/* Free the share when nothing refers to it and it holds nothing. */
static void share_maybe_free(wf_sched_t *s, wf_share_t *sh)
{
    if (sh->refs || sh->queued || sh->in_bytes || sh->reply_bytes)
        return;
    for (wf_share_t **link = &s->shares; *link; link = &(*link)->next)
        if (*link == sh) {
            *link = sh->next;
            free(sh);
            return;
        }
}

/* A share made by wf_sched_share for a job that was then refused. */
static void share_unused(wf_sched_t *s, wf_share_t *sh)
{
    if (sh)
        share_maybe_free(s, sh);
}

static uint32_t share_jobs(const wf_sched_t *s)
{
    if (s->limits.jobs)
        return s->limits.jobs;
    return s->capacity / 4 ? s->capacity / 4 : 1;
}

/* A job that alone passes a share's byte bound (never admitted). */
static wf_status_t check_share_limit(const wf_sched_t *s, const wf_djob_t *job,
                                     char *err, size_t err_len)
{
    const wf_share_limits_t *l = &s->limits;
    if (job->in_bytes > l->in_bytes) {
        snprintf(err, err_len, "job's inputs of %" PRIu64 " bytes exceed "
                 "client_queue_bytes %" PRIu64 " (one client's share)",
                 job->in_bytes, l->in_bytes);
        return WF_E_LIMIT;
    }
    if (job->out_bytes > l->reply_bytes) {
        snprintf(err, err_len, "job's outputs of %" PRIu64 " bytes exceed "
                 "client_reply_bytes %" PRIu64 " (one client's share)",
                 job->out_bytes, l->reply_bytes);
        return WF_E_LIMIT;
    }
    return WF_OK;
}

/* The share's bounds for one more job (after queue_capacity). */
static wf_status_t check_share(const wf_sched_t *s, const wf_djob_t *job,
                               char *err, size_t err_len)
{
    const wf_share_t *sh = job->share;
    const wf_share_limits_t *l = &s->limits;
    if (sh->queued >= share_jobs(s)) {
        snprintf(err, err_len, "job queue share of %s is full: %u of its jobs "
                 "waiting (client_queue_jobs %u); retry later", sh->label,
                 sh->queued, share_jobs(s));
        return WF_E_QUEUE_FULL;
    }
    if (sh->in_bytes > l->in_bytes || job->in_bytes > l->in_bytes - sh->in_bytes) {
        snprintf(err, err_len, "input share of %s is full: its jobs hold %"
                 PRIu64 " bytes of inputs, this one %" PRIu64 " more "
                 "(client_queue_bytes %" PRIu64 "); retry later", sh->label,
                 sh->in_bytes, job->in_bytes, l->in_bytes);
        return WF_E_QUEUE_FULL;
    }
    if (sh->reply_bytes > l->reply_bytes ||
        job->out_bytes > l->reply_bytes - sh->reply_bytes) {
        snprintf(err, err_len, "reply share of %s is full: %" PRIu64 " bytes "
                 "of its replies are unread or still computing, this job "
                 "would add %" PRIu64 " (client_reply_bytes %" PRIu64 "); read "
                 "your replies, then retry", sh->label, sh->reply_bytes,
                 job->out_bytes, l->reply_bytes);
        return WF_E_QUEUE_FULL;
    }
    return WF_OK;
}

void wf_sched_release_inputs(wf_sched_t *s, wf_djob_t *job)
{
    wf_share_t *sh = job->share;
    if (!sh || !job->in_bytes)
        return;
    sh->in_bytes -= job->in_bytes;
    s->held_bytes -= job->in_bytes;
    job->in_bytes = 0;
}

void wf_sched_release_reply(wf_sched_t *s, wf_share_t *sh, uint64_t bytes)
{
    if (!sh)
        return;
    sh->reply_bytes -= bytes;
    s->held_bytes -= bytes;
    if (sh->refs)
        sh->refs--;
    share_maybe_free(s, sh);
}

void wf_sched_release_job(wf_sched_t *s, wf_djob_t *job)
{
    wf_sched_release_inputs(s, job);
    wf_sched_release_reply(s, job->share, job->out_bytes);
    job->share = NULL;
}

void wf_sched_shares_free(wf_sched_t *s)
{
    while (s->shares) {
        wf_share_t *next = s->shares->next;
        free(s->shares);
        s->shares = next;
    }
}

/* A queued job left the queue (dispatched, refused by a re-plan, taken). */
static void share_dequeued(wf_djob_t *job)
{
    if (job->share && job->share->queued)
        job->share->queued--;
}

/* ------------------------------------------------------------------ */

static wf_status_t check_fit(const wf_sched_t *s, wf_djob_t *job, char *err,
                             size_t err_len)
{
    uint64_t biggest = 0;
    for (uint32_t d = 0; d < s->n_devices; d++)
        if (cap(s, d) > biggest)
            biggest = cap(s, d);
    uint64_t need = max_reserve(job);
    uint32_t replica = s->n_devices / s->mesh.deg.dp;
    if (s->cluster) {
        uint32_t best = 0;
        for (uint32_t r = 0; r < s->mesh.deg.dp; r++) {
            uint32_t u = usable_in_replica(s, job, r, false);
            if (u > best)
                best = u;
        }
        if (best < (uint32_t)job->group_size) {
            snprintf(err, err_len, "no dp replica of the world mesh has the "
                     "job's %s on one node that can take them",
                     job->cp ? "roots" : "ranks");
            return WF_E_BAD_ARGUMENT;
        }
        replica = best;
    }
    uint32_t per_replica = job->split > 1 ? (uint32_t)job->group_size / job->split
                                          : (uint32_t)job->group_size;
    if (per_replica > replica || need > biggest) {
        snprintf(err, err_len, "job needs %" PRIu64 " bytes on each of %d "
                 "device(s); a device has %" PRIu64, need, job->group_size,
                 biggest);
        return WF_E_NO_MEMORY;
    }
    return WF_OK;
}

wf_status_t wf_sched_admit(wf_sched_t *s, wf_djob_t *job, char *err,
                           size_t err_len)
{
    job->out_bytes = 0;
    for (uint32_t i = 0; i < job->n_outputs; i++)
        job->out_bytes += job->out_desc[i].nbytes;
    uint64_t bytes = job->in_bytes + job->out_bytes;
    wf_status_t st = check_fit(s, job, err, err_len);
    if (st == WF_OK && job->share && bytes > s->held_cap) {
        snprintf(err, err_len, "job's inputs and outputs of %" PRIu64 " bytes "
                 "exceed the daemon's memory for them (%" PRIu64 ")", bytes,
                 s->held_cap);
        st = WF_E_NO_MEMORY;
    }
    if (st == WF_OK && job->share)
        st = check_share_limit(s, job, err, err_len);
    if (st == WF_OK && s->depth >= s->capacity) {
        snprintf(err, err_len, "job queue is full (%u jobs waiting)", s->depth);
        st = WF_E_QUEUE_FULL;
    }
    if (st == WF_OK && job->share)
        st = check_share(s, job, err, err_len);
    if (st == WF_OK && job->share && bytes > s->held_cap - s->held_bytes) {
        snprintf(err, err_len, "the daemon holds %" PRIu64 " bytes of queued "
                 "inputs and unsent outputs; this job's %" PRIu64 " would pass "
                 "its bound of %" PRIu64 " (the devices' memory); retry later",
                 s->held_bytes, bytes, s->held_cap);
        st = WF_E_QUEUE_FULL;
    }
    if (st != WF_OK) {
        share_unused(s, job->share);
        job->share = NULL;
        return st;
    }
    if (job->share) {
        wf_share_t *sh = job->share;
        sh->queued++;
        sh->in_bytes += job->in_bytes;
        sh->reply_bytes += job->out_bytes;
        sh->refs++;
        s->held_bytes += bytes;
    }
    job->seq = s->next_seq++;
    job->next = NULL;
    if (s->tail)
        s->tail->next = job;
    else
        s->head = job;
    s->tail = job;
    s->depth++;
    return WF_OK;
}

void wf_sched_replan(wf_sched_t *s, wf_sched_plan_fn plan, void *arg,
                     wf_djob_t **ret_failed)
{
    wf_djob_t *failed = NULL, **failed_tail = &failed;
    wf_djob_t **link = &s->head, *prev = NULL;
    while (*link) {
        wf_djob_t *job = *link;
        wf_status_t st = WF_OK;
        if (job->plan_epoch != s->mesh.epoch) {
            st = plan(job, &s->mesh, arg);
            if (st == WF_OK)
                st = check_fit(s, job, job->err, sizeof job->err);
        }
        if (st == WF_OK) {
            prev = job;
            link = &job->next;
            continue;
        }
        *link = job->next;          /* unlink; keep order of the rest */
        s->depth--;
        share_dequeued(job);
        if (s->tail == job)
            s->tail = prev;
        atomic_store(&job->status, (int)st);
        job->next = NULL;
        *failed_tail = job;
        failed_tail = &job->next;
        s->failed++;
    }
    *ret_failed = failed;
}

/* Put the candidates cand[0..n) in order of free memory, most first, so
 * the big ranks (rank 0.. get the extra head of an uneven split) land
 * where room is. */
static void sort_by_free(const wf_sched_t *s, uint32_t *cand, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {      /* insertion sort: n <= 64 */
        uint32_t c = cand[i], j = i;
        uint64_t fc = cap(s, c) - s->used[c];
        while (j > 0 && cap(s, cand[j - 1]) - s->used[cand[j - 1]] < fc) {
            cand[j] = cand[j - 1];
            j--;
        }
        cand[j] = c;
    }
}

/* The job's ranks on one replica: a split job's share of its group. */
static uint32_t ranks_per_replica(const wf_djob_t *job)
{
    return job->split > 1 ? (uint32_t)job->group_size / job->split
                          : (uint32_t)job->group_size;
}

/* Give job ranks off .. off + g - 1 (g = ranks_per_replica) devices on
 * replica `rep`; false when they are not all idle with room. */
static bool pick_on_replica(wf_sched_t *s, wf_djob_t *job, uint32_t rep, uint32_t off)
{
    uint32_t n = s->n_devices / s->mesh.deg.dp, base = rep * n;
    uint32_t g = ranks_per_replica(job);
    uint32_t cand[WF_SETTINGS_MAX_DEVICES], nc = 0;
    if (s->cluster && usable_in_replica(s, job, rep, true) < g)
        return false;
    if (job->cp) {
        /* every rank of the replica: job rank r is replica rank r, whose
         * communicators match the mesh coordinates of device base + r */
        for (uint32_t r = 0; r < g; r++)
            cand[r] = base + r;
        nc = g;
    } else {
        /* a replica all on one member: any of its ranks (checked above) */
        bool member = s->cluster && member_replica(s, rep) >= 0;
        for (uint32_t d = base; d < base + n; d++)
            if (s->tasks[d] == 0 && (!s->cluster || member || is_local(s, d)))
                cand[nc++] = d;
        if (nc < g)
            return false;
        sort_by_free(s, cand, nc);
        /* the first g candidates, back in device order for the ranks */
        for (uint32_t i = 1; i < g; i++) {
            uint32_t c = cand[i], j = i;
            while (j > 0 && cand[j - 1] > c) {
                cand[j] = cand[j - 1];
                j--;
            }
            cand[j] = c;
        }
    }
    for (uint32_t r = 0; r < g; r++) {
        uint32_t d = cand[r];
        if (s->tasks[d] != 0 || s->used[d] > cap(s, d) ||
            job->reserve[off + r] > cap(s, d) - s->used[d])
            return false;
    }
    for (uint32_t r = 0; r < g; r++)
        job->device[off + r] = cand[r];
    return true;
}

/* Try the replicas, fewest jobs in flight first, ties in round-robin
 * order from next_replica; false when the head must wait. */
static bool pick_devices(wf_sched_t *s, wf_djob_t *job)
{
    uint32_t dp = s->mesh.deg.dp;
    uint32_t order[WF_SETTINGS_MAX_DEVICES];
    for (uint32_t i = 0; i < dp; i++)
        order[i] = (s->next_replica + i) % dp;
    for (uint32_t i = 1; i < dp; i++) {     /* stable insertion sort by load */
        uint32_t c = order[i], j = i;
        while (j > 0 && s->replica_jobs[order[j - 1]] > s->replica_jobs[c]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = c;
    }
    /* a session's job runs where its state is */
    int pin = job->session ? wf_session_replica(s, job->session) : -1;
    if (pin >= 0) {
        if (!pick_on_replica(s, job, (uint32_t)pin, 0))
            return false;
        job->reps[0] = job->replica = (uint32_t)pin;
        return true;
    }
    /* a split job takes the first `split` replicas that can take their
     * ranks, in that order (its pieces in replica order) */
    uint32_t want = job->split > 1 ? job->split : 1, got = 0;
    for (uint32_t i = 0; i < dp && got < want; i++) {
        if (pick_on_replica(s, job, order[i], got * ranks_per_replica(job))) {
            job->reps[got++] = order[i];
            s->next_replica = (order[i] + 1) % dp;
        }
    }
    job->replica = job->reps[0];
    return got == want;
}

/* The replicas a dispatched job holds: reps[0 .. n). */
static uint32_t replicas_of(const wf_djob_t *job)
{
    return job->split > 1 ? job->split : 1;
}

static bool alloc_outputs(wf_djob_t *job)
{
    for (uint32_t i = 0; i < job->n_outputs; i++) {
        size_t n = (size_t)job->out_desc[i].nbytes;
        size_t size = (n + 63) & ~(size_t)63;
        job->out[i] = aligned_alloc(64, size ? size : 64);
        if (!job->out[i])
            return false;
    }
    return true;
}

size_t wf_sched_dispatch(wf_sched_t *s, uint64_t now_us, wf_djob_t **ret_failed)
{
    size_t dispatched = 0;
    wf_djob_t *failed = NULL, **failed_tail = &failed;
    while (!s->paused && s->head) {
        wf_djob_t *job = s->head;
        if (job->deadline_us && now_us >= job->deadline_us) {
            /* expired while queued: answered, never run */
            wf_sched_remove(s, job);
            atomic_store(&job->status, WF_E_DEADLINE);
            wf_djob_stop_message(job, WF_E_DEADLINE, -1);
            *failed_tail = job;
            failed_tail = &job->next;
            continue;
        }
        if (!pick_devices(s, job))
            break;
        s->head = job->next;
        if (!s->head)
            s->tail = NULL;
        s->depth--;
        share_dequeued(job);
        job->next = NULL;
        /* roots (head split: every rank) on a member: it writes the
         * outputs and sends them */
        if (is_local(s, job->device[0]) && !alloc_outputs(job)) {
            wf_log(s->log, WF_LOG_ERR, "job %" PRIu64 ": cannot allocate its "
                   "outputs", job->req.id);
            atomic_store(&job->status, WF_E_NO_MEMORY);
            *failed_tail = job;
            failed_tail = &job->next;
            s->failed++;
            continue;
        }
        job->t_dispatch_us = now_us;
        job->epoch = s->mesh.epoch;
        int local = 0;
        for (int r = 0; r < job->group_size; r++)
            local += is_local(s, job->device[r]);
        for (int r = 0; r < job->group_size; r++) {
            uint32_t d = job->device[r];
            s->used[d] += job->reserve[r];
            s->tasks[d]++;
        }
        for (uint32_t i = 0; i < replicas_of(job); i++)
            s->replica_jobs[job->reps[i]]++;
        s->in_flight++;
        if (job->session)
            wf_session_place(s, job->session, job->replica, job->device,
                             (uint32_t)job->group_size, wf_fbc_bytes(job->cache_floats));
        /* every rank here (none on another node): the ranks share this
         * struct and may agree to stop at a step boundary */
        job->stoppable = local == job->group_size;
        job->run_prev = NULL;
        job->run_next = s->running;
        if (s->running)
            s->running->run_prev = job;
        s->running = job;
        wf_log(s->log, WF_LOG_DEBUG, "job %" PRIu64 " (seq %" PRIu64 ") on %d "
               "device(s) from rank %u, replica %u, epoch %" PRIu64, job->req.id,
               job->seq, job->group_size, job->device[0], job->replica,
               job->epoch);
        /* Workers may finish the job while this loop submits, but only the
         * main thread frees it (after wf_sched_complete), so it stays valid. */
        for (int r = 0; r < job->group_size; r++) {
            job->task[r].job = job;
            job->task[r].rank = r;
        }
        uint32_t parts = local < job->group_size && s->remote
                             ? s->remote(s->remote_arg, job) : 0;
        atomic_store(&job->remaining, local + (int)parts);
        for (int r = 0; r < job->group_size; r++)
            if (is_local(s, job->device[r]))
                wf_worker_submit(&s->workers[job->device[r] - s->local_first],
                                 &job->task[r]);
        dispatched++;
    }
    *ret_failed = failed;
    return dispatched;
}

void wf_sched_complete(wf_sched_t *s, const wf_djob_t *job)
{
    for (int r = 0; r < job->group_size; r++) {
        uint32_t d = job->device[r];
        s->used[d] -= job->reserve[r];
        s->tasks[d]--;
    }
    for (uint32_t i = 0; i < replicas_of(job); i++)
        s->replica_jobs[job->reps[i]]--;
    s->in_flight--;
    if (job->run_prev)
        job->run_prev->run_next = job->run_next;
    else if (s->running == job)
        s->running = job->run_next;
    if (job->run_next)
        job->run_next->run_prev = job->run_prev;
    if (atomic_load(&job->status) == WF_OK)
        s->served++;
    else
        s->failed++;
}

void wf_sched_remove(wf_sched_t *s, wf_djob_t *job)
{
    wf_djob_t **link = &s->head, *prev = NULL;
    while (*link && *link != job) {
        prev = *link;
        link = &(*link)->next;
    }
    if (!*link)
        return;
    *link = job->next;
    if (s->tail == job)
        s->tail = prev;
    job->next = NULL;
    share_dequeued(job);
    s->depth--;
    s->failed++;
}

void wf_sched_expire(wf_sched_t *s, uint64_t now_us, wf_djob_t **ret_failed)
{
    wf_djob_t *failed = NULL, **failed_tail = &failed;
    wf_djob_t **link = &s->head, *prev = NULL;
    while (*link) {                 /* one pass; the rest keep their order */
        wf_djob_t *job = *link;
        if (!job->deadline_us || now_us < job->deadline_us) {
            prev = job;
            link = &job->next;
            continue;
        }
        *link = job->next;
        if (s->tail == job)
            s->tail = prev;
        share_dequeued(job);
        s->depth--;
        s->failed++;
        atomic_store(&job->status, WF_E_DEADLINE);
        wf_djob_stop_message(job, WF_E_DEADLINE, -1);
        job->next = NULL;
        *failed_tail = job;
        failed_tail = &job->next;
    }
    *ret_failed = failed;
}

uint64_t wf_sched_next_deadline(const wf_sched_t *s)
{
    uint64_t t = 0;
    for (const wf_djob_t *j = s->head; j; j = j->next)
        if (j->deadline_us && (t == 0 || j->deadline_us < t))
            t = j->deadline_us;
    return t;
}

wf_djob_t *wf_sched_take_queued(wf_sched_t *s)
{
    wf_djob_t *list = s->head;
    for (wf_djob_t *j = list; j; j = j->next)
        share_dequeued(j);
    s->head = s->tail = NULL;
    s->depth = 0;
    return list;
}

bool wf_sched_idle(const wf_sched_t *s)
{
    return s->depth == 0 && s->in_flight == 0;
}
