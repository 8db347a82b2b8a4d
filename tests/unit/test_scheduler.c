/* test_scheduler.c — daemon/runtime/scheduler.[ch] on its own: admission
 * against device memory (and the resident shards), the queue bound
 * (WF_E_QUEUE_FULL), sequence numbers, strict sequence-order dispatch (a
 * later job never overtakes a waiting head), one gang task per device,
 * devices picked by free memory and handed out in device order, dp
 * replicas by load then round-robin, a context-parallel job on every rank
 * of its replica, output buffers, completion bookkeeping, pause and
 * re-plan for a reconfiguration, taking the queue, and the cluster hooks
 * (local ranks only for head splits, cp roots, the remote hook).
 *
 * The workers are real wf_worker_t structs that are never started: the
 * scheduler appends to their FIFOs (wf_worker_submit) and the test reads
 * those FIFOs to see what each device would run, in which order. No
 * threads, no sockets: the scheduler is main-thread code.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/scheduler.h"
#include "support/check.h"

#define NW 4 /* workers of the tests */

static wf_worker_t workers[NW];
static wf_log_t lg;

/* Workers with the given memory, never started: their FIFOs only fill. */
static void workers_init(const uint64_t mem[NW])
{
    for (int i = 0; i < NW; i++) {
        memset(&workers[i], 0, sizeof workers[i]);
        workers[i].index = (uint32_t)i;
        workers[i].memory_total = mem[i];
        pthread_mutex_init(&workers[i].mu, NULL);
        pthread_cond_init(&workers[i].cv, NULL);
    }
}

static void workers_destroy(void)
{
    for (int i = 0; i < NW; i++) {
        pthread_cond_destroy(&workers[i].cv);
        pthread_mutex_destroy(&workers[i].mu);
    }
}

/* Take worker w's FIFO: the tasks it would run, in order. */
static wf_task_t *fifo_take(int w)
{
    wf_task_t *t = workers[w].head;
    workers[w].head = workers[w].tail = NULL;
    return t;
}

static wf_mesh_t mesh_of(uint32_t dp, uint32_t ring, uint32_t uly, uint32_t tp)
{
    wf_mesh_degrees_t deg = { .dp = dp, .ring = ring, .ulysses = uly, .tp = tp };
    wf_mesh_t m;
    char err[128];
    wf_status_t st = wf_mesh_init(&m, &deg, (int)(dp * ring * uly * tp), err, sizeof err);
    CHECK(st == WF_OK, "mesh: %s", err);
    return m;
}

/* A planned job: g ranks each reserving `reserve` bytes, cp or head split,
 * planned for epoch `epoch`. */
static wf_djob_t *job_new(int g, uint64_t reserve, bool cp, uint64_t epoch)
{
    wf_djob_t *j = wf_djob_new();
    if (!j) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    j->kind = WF_DJOB_ATTENTION;
    j->group_size = g;
    for (int r = 0; r < g; r++)
        j->reserve[r] = reserve;
    j->cp = cp;
    j->plan_epoch = epoch;
    return j;
}

static wf_sched_t *sched_new(uint32_t n_devices, uint32_t capacity, const wf_mesh_t *m)
{
    wf_sched_t *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    wf_sched_init(s, workers, n_devices, capacity, m, &lg);
    return s;
}

/* ---- admission ----------------------------------------------------------- */

static void test_admission(void)
{
    const uint64_t mem[NW] = { 1000, 1000, 1000, 1000 };
    workers_init(mem);
    wf_mesh_t m = mesh_of(2, 1, 1, 2); /* replicas of 2 devices */
    wf_sched_t *s = sched_new(NW, 3, &m);
    char err[256];

    /* a share larger than any device: refused, the caller keeps the job */
    wf_djob_t *big = job_new(1, 1001, false, 0);
    err[0] = '\0';
    wf_status_t st = wf_sched_admit(s, big, err, sizeof err);
    CHECK(st == WF_E_NO_MEMORY, "too big: %s", wf_status_name(st));
    CHECK(strcmp(err, "job needs 1001 bytes on each of 1 device(s); a device has 1000") == 0,
          "message '%s'", err);
    CHECK(s->depth == 0 && s->head == NULL && s->next_seq == 0, "a refused job was queued");
    wf_djob_free(&big);

    /* more ranks than a replica has */
    wf_djob_t *wide = job_new(3, 10, false, 0);
    st = wf_sched_admit(s, wide, err, sizeof err);
    CHECK(st == WF_E_NO_MEMORY, "3 ranks on replicas of 2: %s", wf_status_name(st));
    wf_djob_free(&wide);

    /* resident model shards leave less to jobs */
    s->resident = 400;
    wf_djob_t *fits = job_new(2, 600, false, 0);
    CHECK(wf_sched_admit(s, fits, err, sizeof err) == WF_OK, "600 of 600 free: %s", err);
    wf_djob_t *over = job_new(2, 601, false, 0);
    st = wf_sched_admit(s, over, err, sizeof err);
    CHECK(st == WF_E_NO_MEMORY && strstr(err, "a device has 600"),
          "601 of 600 free: %s '%s'", wf_status_name(st), err);
    wf_djob_free(&over);
    s->resident = 0;

    /* the queue bound, and sequence numbers in admission order */
    wf_djob_t *b = job_new(1, 1, false, 0), *c = job_new(1, 1, false, 0);
    CHECK(wf_sched_admit(s, b, err, sizeof err) == WF_OK, "b: %s", err);
    CHECK(wf_sched_admit(s, c, err, sizeof err) == WF_OK, "c: %s", err);
    CHECK(fits->seq == 0 && b->seq == 1 && c->seq == 2, "seq %llu %llu %llu",
          (unsigned long long)fits->seq, (unsigned long long)b->seq,
          (unsigned long long)c->seq);
    wf_djob_t *d = job_new(1, 1, false, 0);
    st = wf_sched_admit(s, d, err, sizeof err);
    CHECK(st == WF_E_QUEUE_FULL, "4th of capacity 3: %s", wf_status_name(st));
    CHECK(strcmp(err, "job queue is full (3 jobs waiting)") == 0, "message '%s'", err);
    CHECK(s->depth == 3 && s->tail == c && d->next == NULL, "queue changed by a refusal");
    /* a reload may raise the bound */
    s->capacity = 4;
    CHECK(wf_sched_admit(s, d, err, sizeof err) == WF_OK && d->seq == 3,
          "after raising capacity: %s", err);
    CHECK(!wf_sched_idle(s), "idle with 4 queued");

    /* take_queued hands back everything, in order */
    wf_djob_t *all = wf_sched_take_queued(s);
    CHECK(all == fits && fits->next == b && b->next == c && c->next == d && d->next == NULL,
          "take_queued order");
    CHECK(s->depth == 0 && s->head == NULL && s->tail == NULL && wf_sched_idle(s),
          "queue not empty after take_queued");
    wf_djob_free(&fits);
    wf_djob_free(&b);
    wf_djob_free(&c);
    wf_djob_free(&d);
    free(s);
    workers_destroy();
    printf("admission: memory, resident shards, queue bound, sequence order\n");
}

/* ---- dispatch ------------------------------------------------------------- */

/* The one task worker w got since the last look: its job and rank. */
static void expect_task(int w, const wf_djob_t *job, int rank)
{
    wf_task_t *t = fifo_take(w);
    CHECK(t && t->job == job && t->rank == rank && t->next == NULL,
          "worker %d: task (%p rank %d), want (%p rank %d)", w, t ? (void *)t->job : NULL,
          t ? t->rank : -1, (const void *)job, rank);
}

static void test_dispatch_replicas(void)
{
    const uint64_t mem[NW] = { 1000, 1000, 1000, 1000 };
    workers_init(mem);
    wf_mesh_t m = mesh_of(2, 1, 1, 2);
    wf_sched_t *s = sched_new(NW, 8, &m);
    char err[256];
    wf_djob_t *j[4];
    for (int i = 0; i < 4; i++) {
        j[i] = job_new(2, 100, false, 0);
        CHECK(wf_sched_admit(s, j[i], err, sizeof err) == WF_OK, "admit %d: %s", i, err);
    }
    j[0]->n_outputs = 1;
    j[0]->out_desc[0].nbytes = 100;

    /* a replica each for the first two; the third waits for a free replica */
    wf_djob_t *failed_jobs = NULL;
    size_t n = wf_sched_dispatch(s, 77, &failed_jobs);
    CHECK(n == 2 && failed_jobs == NULL, "dispatched %zu, failed %p", n, (void *)failed_jobs);
    CHECK(j[0]->replica == 0 && j[0]->device[0] == 0 && j[0]->device[1] == 1,
          "job 0 on replica %u devices %u %u", j[0]->replica, j[0]->device[0],
          j[0]->device[1]);
    CHECK(j[1]->replica == 1 && j[1]->device[0] == 2 && j[1]->device[1] == 3,
          "job 1 on replica %u devices %u %u", j[1]->replica, j[1]->device[0],
          j[1]->device[1]);
    CHECK(j[0]->out[0] && ((uintptr_t)j[0]->out[0] & 63u) == 0, "job 0's output buffer");
    CHECK(j[0]->t_dispatch_us == 77 && j[0]->epoch == m.epoch, "dispatch stamp");
    CHECK(atomic_load(&j[0]->remaining) == 2, "remaining %d",
          atomic_load(&j[0]->remaining));
    CHECK(s->head == j[2] && s->depth == 2 && s->in_flight == 2, "queue after dispatch");
    CHECK(s->used[0] == 100 && s->tasks[0] == 1 && s->replica_jobs[0] == 1 &&
              s->replica_jobs[1] == 1,
          "bookkeeping used %llu tasks %u", (unsigned long long)s->used[0], s->tasks[0]);
    expect_task(0, j[0], 0);
    expect_task(1, j[0], 1);
    expect_task(2, j[1], 0);
    expect_task(3, j[1], 1);

    /* nothing more until a job completes */
    CHECK(wf_sched_dispatch(s, 78, &failed_jobs) == 0, "dispatched onto busy devices");

    /* replica 0 frees first (its job failed): the head goes there, the
     * next waits */
    atomic_store(&j[0]->status, WF_E_INTERNAL);
    wf_sched_complete(s, j[0]);
    CHECK(s->used[0] == 0 && s->tasks[0] == 0 && s->in_flight == 1 && s->failed == 1 &&
              s->replica_jobs[0] == 0,
          "complete bookkeeping");
    n = wf_sched_dispatch(s, 79, &failed_jobs);
    CHECK(n == 1 && j[2]->replica == 0 && s->head == j[3], "job 2 to replica %u (%zu)",
          j[2]->replica, n);
    expect_task(0, j[2], 0);
    expect_task(1, j[2], 1);

    /* both replicas idle and equally loaded: round-robin from the one
     * after the last picked (replica 0), so replica 1, not the first */
    wf_sched_complete(s, j[1]);
    wf_sched_complete(s, j[2]);
    CHECK(s->served == 2 && s->failed == 1 && !wf_sched_idle(s), "served %llu failed %llu",
          (unsigned long long)s->served, (unsigned long long)s->failed);
    n = wf_sched_dispatch(s, 80, &failed_jobs);
    CHECK(n == 1 && j[3]->replica == 1, "job 3 to replica %u, want 1", j[3]->replica);
    expect_task(2, j[3], 0);
    expect_task(3, j[3], 1);
    wf_sched_complete(s, j[3]);
    CHECK(wf_sched_idle(s), "not idle after every completion");

    /* one-rank jobs: the least loaded replica beats round-robin and a
     * free device on a busier replica */
    wf_djob_t *k[3];
    for (int i = 0; i < 2; i++) {
        k[i] = job_new(1, 10, false, 0);
        CHECK(wf_sched_admit(s, k[i], err, sizeof err) == WF_OK, "admit k%d: %s", i, err);
    }
    /* k0: loads equal, round-robin from replica 0 (after replica 1);
     * k1: replica 1 (load 0 against 1) */
    CHECK(wf_sched_dispatch(s, 81, &failed_jobs) == 2, "k0, k1");
    CHECK(k[0]->replica == 0 && k[0]->device[0] == 0 && k[1]->replica == 1 &&
              k[1]->device[0] == 2,
          "k0, k1 on replicas %u %u devices %u %u", k[0]->replica, k[1]->replica,
          k[0]->device[0], k[1]->device[0]);
    /* round-robin now starts at replica 0, which has a free device, but
     * replica 1 has no job in flight: k2 goes there */
    wf_sched_complete(s, k[1]);
    k[2] = job_new(1, 10, false, 0);
    CHECK(wf_sched_admit(s, k[2], err, sizeof err) == WF_OK, "admit k2: %s", err);
    CHECK(wf_sched_dispatch(s, 82, &failed_jobs) == 1 && k[2]->replica == 1 &&
              k[2]->device[0] == 2,
          "k2 to replica %u device %u, want 1, 2", k[2]->replica, k[2]->device[0]);
    wf_sched_complete(s, k[0]);
    wf_sched_complete(s, k[2]);
    CHECK(wf_sched_idle(s), "not idle after the k jobs");
    for (int i = 0; i < 3; i++)
        wf_djob_free(&k[i]);
    for (int w = 0; w < NW; w++)
        fifo_take(w);
    for (int i = 0; i < 4; i++)
        wf_djob_free(&j[i]);
    free(s);
    workers_destroy();
    printf("dispatch: one task per device, replicas by load then round-robin\n");
}

static void test_dispatch_order_and_memory(void)
{
    /* one replica of 4 devices of different sizes */
    const uint64_t mem[NW] = { 1000, 4000, 2000, 3000 };
    workers_init(mem);
    wf_mesh_t m = mesh_of(1, 1, 1, 4);
    wf_sched_t *s = sched_new(NW, 8, &m);
    char err[256];
    wf_djob_t *failed_jobs = NULL;

    /* a head split takes the devices with the most room, ranks in device
     * order: devices 1 (4000) and 3 (3000) */
    wf_djob_t *a = job_new(2, 500, false, 0);
    CHECK(wf_sched_admit(s, a, err, sizeof err) == WF_OK, "a: %s", err);
    CHECK(wf_sched_dispatch(s, 1, &failed_jobs) == 1, "a not dispatched");
    CHECK(a->device[0] == 1 && a->device[1] == 3, "a on devices %u %u", a->device[0],
          a->device[1]);
    expect_task(1, a, 0);
    expect_task(3, a, 1);

    /* the head needs 4 devices: it waits, and the small job behind it
     * waits too although devices 0 and 2 are idle (sequence order) */
    wf_djob_t *b = job_new(4, 10, false, 0), *c = job_new(1, 10, false, 0);
    CHECK(wf_sched_admit(s, b, err, sizeof err) == WF_OK, "b: %s", err);
    CHECK(wf_sched_admit(s, c, err, sizeof err) == WF_OK, "c: %s", err);
    CHECK(wf_sched_dispatch(s, 2, &failed_jobs) == 0, "overtook the head");
    CHECK(s->head == b && b->next == c && workers[0].head == NULL && workers[2].head == NULL,
          "queue or FIFOs changed");
    wf_sched_complete(s, a);
    CHECK(wf_sched_dispatch(s, 3, &failed_jobs) == 1 && s->head == c, "b after a");
    for (int w = 0; w < NW; w++)
        expect_task(w, b, w);
    wf_sched_complete(s, b);
    CHECK(wf_sched_dispatch(s, 4, &failed_jobs) == 1 && c->device[0] == 1, "c on device %u",
          c->device[0]);
    expect_task(1, c, 0);

    /* a share only device 1 can hold waits while device 1 is busy */
    wf_djob_t *d = job_new(1, 3500, false, 0);
    CHECK(wf_sched_admit(s, d, err, sizeof err) == WF_OK, "d: %s", err);
    CHECK(wf_sched_dispatch(s, 5, &failed_jobs) == 0 && s->head == d, "d on a device too small");
    wf_sched_complete(s, c);
    CHECK(wf_sched_dispatch(s, 6, &failed_jobs) == 1 && d->device[0] == 1, "d on device %u",
          d->device[0]);
    expect_task(1, d, 0);
    wf_sched_complete(s, d);

    /* a context-parallel job takes every rank of the replica in order */
    wf_djob_t *e = job_new(4, 10, true, 0);
    CHECK(wf_sched_admit(s, e, err, sizeof err) == WF_OK, "e: %s", err);
    CHECK(wf_sched_dispatch(s, 7, &failed_jobs) == 1, "e not dispatched");
    for (int w = 0; w < NW; w++) {
        CHECK(e->device[w] == (uint32_t)w, "cp rank %d on device %u", w, e->device[w]);
        expect_task(w, e, w);
    }
    wf_sched_complete(s, e);
    CHECK(wf_sched_idle(s) && s->served == 5, "served %llu", (unsigned long long)s->served);
    wf_djob_t *all[] = { a, b, c, d, e };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        wf_djob_free(&all[i]);
    free(s);
    workers_destroy();
    printf("dispatch: strict sequence order, devices by free memory in device order, "
           "cp on the whole replica\n");
}

/* ---- pause and re-plan ------------------------------------------------------ */

/* Re-plan for the new mesh: a job asking for 3 ranks is refused with a
 * message, a job marked by reserve 999 gets more ranks than a replica
 * has, the rest take the new epoch. */
static int plans;
static wf_status_t replan(wf_djob_t *job, const wf_mesh_t *mesh, void *arg)
{
    (void)arg;
    plans++;
    if (job->group_size == 3) {
        snprintf(job->err, sizeof job->err, "refused by the new mesh");
        return WF_E_BAD_ARGUMENT;
    }
    if (job->reserve[0] == 999)
        job->group_size = 4;
    job->plan_epoch = mesh->epoch;
    return WF_OK;
}

static void test_pause_replan(void)
{
    const uint64_t mem[NW] = { 1000, 1000, 1000, 1000 };
    workers_init(mem);
    wf_mesh_t m = mesh_of(1, 1, 1, 4);
    wf_sched_t *s = sched_new(NW, 8, &m);
    char err[256];
    wf_djob_t *failed_jobs = NULL;

    s->paused = true;
    wf_djob_t *j[4] = { job_new(1, 10, false, 0), job_new(3, 10, false, 0),
                        job_new(2, 999, false, 0), job_new(2, 10, false, 0) };
    for (int i = 0; i < 4; i++)
        CHECK(wf_sched_admit(s, j[i], err, sizeof err) == WF_OK, "admit %d: %s", i, err);
    CHECK(wf_sched_dispatch(s, 1, &failed_jobs) == 0 && s->depth == 4, "dispatched while paused");
    for (int w = 0; w < NW; w++)
        CHECK(workers[w].head == NULL, "worker %d got a task while paused", w);

    /* the reconfiguration: dp 2 x tp 2, a new epoch */
    wf_mesh_degrees_t deg = { .dp = 2, .ring = 1, .ulysses = 1, .tp = 2 };
    CHECK(wf_mesh_reconfigure(&s->mesh, &deg, err, sizeof err) == WF_OK, "%s", err);
    j[3]->plan_epoch = s->mesh.epoch; /* already planned for it: left alone */
    plans = 0;
    wf_sched_replan(s, replan, NULL, &failed_jobs);
    CHECK(plans == 3, "%d plans, want 3 (one job was already planned)", plans);
    CHECK(failed_jobs == j[1] && j[1]->next == j[2] && j[2]->next == NULL, "failed list");
    CHECK(atomic_load(&j[1]->status) == WF_E_BAD_ARGUMENT &&
              strcmp(j[1]->err, "refused by the new mesh") == 0,
          "refused job: %d '%s'", atomic_load(&j[1]->status), j[1]->err);
    CHECK(atomic_load(&j[2]->status) == WF_E_NO_MEMORY && strstr(j[2]->err, "4 device(s)"),
          "job too wide for the new replicas: %d '%s'", atomic_load(&j[2]->status),
          j[2]->err);
    CHECK(s->head == j[0] && j[0]->next == j[3] && s->tail == j[3] && s->depth == 2 &&
              s->failed == 2,
          "queue after replan: depth %u", s->depth);

    /* resumed: the survivors run under the new mesh, on its replicas */
    s->paused = false;
    CHECK(wf_sched_dispatch(s, 2, &failed_jobs) == 2 && failed_jobs == NULL, "after resume");
    CHECK(j[0]->epoch == s->mesh.epoch && j[0]->replica == 0 && j[3]->replica == 1 &&
              j[3]->device[0] == 2 && j[3]->device[1] == 3,
          "j3 on replica %u devices %u %u", j[3]->replica, j[3]->device[0], j[3]->device[1]);
    wf_sched_complete(s, j[0]);
    wf_sched_complete(s, j[3]);
    for (int w = 0; w < NW; w++)
        fifo_take(w);
    for (int i = 0; i < 4; i++)
        wf_djob_free(&j[i]);
    free(s);
    workers_destroy();
    printf("pause: nothing dispatched, re-plan keeps order and fails what the new mesh "
           "refuses\n");
}

/* ---- cluster ---------------------------------------------------------------- */

static int remote_calls;
static wf_djob_t *remote_job;
static uint32_t remote(void *arg, wf_djob_t *job)
{
    (void)arg;
    remote_calls++;
    remote_job = job;
    return 1; /* one member reports back */
}

static void test_cluster(void)
{
    const uint64_t mem[NW] = { 1000, 1000, 1000, 1000 };
    workers_init(mem);
    /* this node's 2 workers; a world of 4 where a member holds ranks 2, 3 */
    wf_mesh_t m2 = mesh_of(1, 1, 1, 2), m4 = mesh_of(1, 4, 1, 1);
    wf_sched_t *s = sched_new(2, 8, &m2);
    wf_sched_resize(s, 4, 0, &m4);
    s->node_of[2] = s->node_of[3] = 1;
    s->remote = remote;
    char err[256];
    wf_djob_t *failed_jobs = NULL;

    /* a head split runs on local ranks only */
    wf_djob_t *wide = job_new(3, 10, false, 0);
    wf_status_t st = wf_sched_admit(s, wide, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "job's ranks on one node"),
          "3 ranks, 2 local: %s '%s'", wf_status_name(st), err);
    wf_djob_free(&wide);

    /* a ring job across both nodes: roots here, the member's part through
     * the hook, every local rank's task queued */
    wf_djob_t *r = job_new(4, 10, true, 0);
    r->n_outputs = 1;
    r->out_desc[0].nbytes = 64;
    CHECK(wf_sched_admit(s, r, err, sizeof err) == WF_OK, "ring: %s", err);
    CHECK(wf_sched_dispatch(s, 1, &failed_jobs) == 1 && r->out[0], "ring not dispatched");
    CHECK(remote_calls == 1 && remote_job == r, "remote hook called %d times", remote_calls);
    CHECK(atomic_load(&r->remaining) == 3, "remaining %d, want 2 local + 1 member",
          atomic_load(&r->remaining));
    expect_task(0, r, 0);
    expect_task(1, r, 1);
    CHECK(s->tasks[2] == 1 && s->tasks[3] == 1, "the member's devices are not marked busy");
    wf_sched_complete(s, r);
    wf_djob_free(&r);

    /* the roots on the member: only with remote_roots, and only once its
     * tensor channel is up (roots_ok) */
    wf_sched_resize(s, 4, 2, &m4); /* now we hold ranks 2, 3 */
    s->node_of[0] = s->node_of[1] = 1;
    wf_djob_t *x = job_new(4, 10, true, 0);
    x->n_outputs = 1;
    x->out_desc[0].nbytes = 64;
    st = wf_sched_admit(s, x, err, sizeof err);
    CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, "job's roots on one node"),
          "roots on a member without remote_roots: %s '%s'", wf_status_name(st), err);
    s->remote_roots = true;
    CHECK(wf_sched_admit(s, x, err, sizeof err) == WF_OK, "with remote_roots: %s", err);
    CHECK(wf_sched_dispatch(s, 2, &failed_jobs) == 0, "dispatched before the channel was up");
    s->roots_ok = 1u << 1;
    CHECK(wf_sched_dispatch(s, 3, &failed_jobs) == 1 && x->out[0] == NULL,
          "after roots_ok (the member sends the outputs)");
    CHECK(remote_calls == 2 && atomic_load(&x->remaining) == 3, "remote hook / remaining");
    /* workers[] are world ranks local_first.. */
    expect_task(0, x, 2);
    expect_task(1, x, 3);
    wf_sched_complete(s, x);
    wf_djob_free(&x);
    free(s);
    workers_destroy();
    printf("cluster: local head splits, remote hook, remote roots behind roots_ok\n");
}

int main(void)
{
    wf_log_init(&lg, 2, WF_LOG_ERR);
    test_admission();
    test_dispatch_replicas();
    test_dispatch_order_and_memory();
    test_pause_replan();
    test_cluster();
    printf("%d checks, %d failures\n", passed + failed, failed);
    return failed ? 1 : 0;
}
