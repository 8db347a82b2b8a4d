/* test_reshard_load.c — end to end: live tensor-parallel re-sharding of
 * resident models under load.
 *
 * usage: test_reshard_load PATH_TO_WEFTD FIXTURES_DIR
 *
 * One weftd with 4 CPU devices and the model root at the fixtures holds
 * flux-tiny (f32) and flux-tiny-guidance. Four client threads, one
 * connection each, run forward jobs back to back (alternating the two
 * models), each output checked against diffusers' (fluxio.h tolerances),
 * while the main thread changes tp 1 -> 2 -> 4 -> 1 (dp filling the
 * devices) three times over, plus tp 2 x ulysses 2 and ring 2 x tp 2 once
 * each: every change re-cuts every resident model's shards from the host
 * copies. Before each change the main thread waits (condition variable,
 * bounded) until every thread finished a few more jobs, so every mesh
 * serves real load.
 *
 * Asserted: every job returns WF_OK with a correct output (none lost:
 * each thread's completed count equals what it sent; none duplicated:
 * the daemon's jobs_served equals the total and jobs_failed is 0); every
 * reconfiguration succeeds; the models report the final tp. Printed: the
 * re-shard times (reconfiguration round trips under load).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "support/check.h"
#include "support/fluxio.h"
#include "support/jobcheck.h"

#define N_THREADS 4
#define JOBS_PER_STEP 3
#define STEP_TIMEOUT_S 60.0

static fluxio_t io_tiny, io_guid;

typedef struct shared {
    const char *endpoint;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t progress;
    uint64_t done[N_THREADS];
    uint64_t sent[N_THREADS];
} shared_t;

typedef struct targ {
    shared_t *sh;
    int index;
} targ_t;

static void *client_main(void *arg)
{
    targ_t *t = arg;
    shared_t *sh = t->sh;
    wf_client_t *c = NULL;
    if (wf_client_connect(sh->endpoint, 120000, &c) != WF_OK) {
        CHECK(false, "thread %d cannot connect", t->index);
        return NULL;
    }
    for (uint64_t k = 0; !atomic_load(&sh->stop); k++) {
        bool guid = (k + (uint64_t)t->index) % 2 == 1;
        const fluxio_t *io = guid ? &io_guid : &io_tiny;
        wf_tensor_t out;
        if (!fluxio_output(io, WF_DTYPE_F32, &out)) {
            CHECK(false, "out of memory");
            break;
        }
        pthread_mutex_lock(&sh->mu);
        sh->sent[t->index]++;
        pthread_mutex_unlock(&sh->mu);
        wf_status_t st = wf_forward(c, guid ? "guidance" : "tiny", &io->in, &out, NULL);
        double e = st == WF_OK ? fluxio_error(io, &out) : INFINITY;
        CHECK(st == WF_OK && e <= fluxio_tolerance(io),
              "thread %d job %" PRIu64 " (%s): %s %s error %.3g", t->index, k,
              guid ? "guidance" : "tiny", wf_status_name(st),
              wf_client_last_error(c), e);
        free(out.data);
        pthread_mutex_lock(&sh->mu);
        if (st == WF_OK)
            sh->done[t->index]++;
        pthread_cond_broadcast(&sh->progress);
        pthread_mutex_unlock(&sh->mu);
        if (st != WF_OK)
            break;
    }
    wf_client_destroy(&c);
    return NULL;
}

/* Wait until every thread finished `more` jobs after `base`. */
static bool wait_progress(shared_t *sh, const uint64_t *base, uint64_t more)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)STEP_TIMEOUT_S;
    pthread_mutex_lock(&sh->mu);
    for (;;) {
        bool all = true;
        for (int i = 0; i < N_THREADS; i++)
            all = all && sh->done[i] >= base[i] + more;
        if (all || failed > 0)
            break;
        if (pthread_cond_timedwait(&sh->progress, &sh->mu, &dl) != 0) {
            pthread_mutex_unlock(&sh->mu);
            return false;
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return true;
}

static pid_t start_daemon(const char *weftd, const char *endpoint, const char *root)
{
    const char *argv[] = { weftd, "--devices", "cpu:4", "--mesh", "dp=4", "--listen",
                           endpoint, "--model-root", root, "--log-level", "warning",
                           NULL };
    return spawn_daemon(argv, NULL);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    if (!fluxio_load(&io_tiny, argv[2], "io-flux-tiny-f32.safetensors") ||
        !fluxio_load(&io_guid, argv[2], "io-flux-tiny-guidance-f32.safetensors"))
        return 1;
    char endpoint[128];
    snprintf(endpoint, sizeof endpoint, "ipc:///tmp/weft-reshard-%d.sock", (int)getpid());
    char fixtures[4096];
    if (!realpath(argv[2], fixtures)) {
        perror(argv[2]);
        return 1;
    }
    pid_t pid = start_daemon(argv[1], endpoint, fixtures);
    if (!wait_ready(endpoint)) {
        fprintf(stderr, "weftd did not start\n");
        kill(pid, SIGKILL);
        return 1;
    }
    shared_t sh;
    memset(&sh, 0, sizeof sh);
    sh.endpoint = endpoint;
    pthread_mutex_init(&sh.mu, NULL);
    pthread_cond_init(&sh.progress, NULL);

    wf_client_t *c = NULL;
    wf_client_connect(endpoint, 120000, &c);
    wf_status_t st = wf_load_model(c, "tiny", "flux-tiny", NULL, NULL);
    CHECK(st == WF_OK, "load tiny: %s", wf_client_last_error(c));
    st = wf_load_model(c, "guidance", "flux-tiny-guidance", NULL, NULL);
    CHECK(st == WF_OK, "load guidance: %s", wf_client_last_error(c));

    pthread_t th[N_THREADS];
    targ_t ta[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ta[i].sh = &sh;
        ta[i].index = i;
        pthread_create(&th[i], NULL, client_main, &ta[i]);
    }
    static const wf_mesh_degrees_t seq[] = {
        { 2, 1, 1, 2 }, { 1, 1, 1, 4 }, { 4, 1, 1, 1 },
        { 2, 1, 1, 2 }, { 1, 1, 1, 4 }, { 4, 1, 1, 1 },
        { 1, 1, 2, 2 }, { 1, 2, 1, 2 },
        { 2, 1, 1, 2 }, { 1, 1, 1, 4 }, { 4, 1, 1, 1 },
    };
    size_t n_seq = sizeof seq / sizeof seq[0], ok_changes = 0;
    double worst = 0, sum = 0;
    for (size_t k = 0; k < n_seq && failed == 0; k++) {
        uint64_t base[N_THREADS];
        pthread_mutex_lock(&sh.mu);
        memcpy(base, sh.done, sizeof base);
        pthread_mutex_unlock(&sh.mu);
        CHECK(wait_progress(&sh, base, JOBS_PER_STEP), "no progress before "
              "change %zu", k);
        double t0 = now_s();
        st = wf_reconfigure(c, &seq[k], NULL);
        double dt = now_s() - t0;
        CHECK(st == WF_OK, "change %zu to tp=%u: %s %s", k, seq[k].tp,
              wf_status_name(st), wf_client_last_error(c));
        if (st == WF_OK) {
            ok_changes++;
            sum += dt;
            worst = dt > worst ? dt : worst;
        }
        wf_model_info_t info[WF_MODELS_MAX];
        size_t n = 0;
        st = wf_list_models(c, info, WF_MODELS_MAX, &n);
        for (size_t i = 0; st == WF_OK && i < n; i++)
            CHECK(info[i].tp == seq[k].tp && strcmp(info[i].state, "ready") == 0,
                  "model %s reports tp %u (%s) after change to tp=%u", info[i].name,
                  info[i].tp, info[i].state, seq[k].tp);
    }
    uint64_t base[N_THREADS];
    pthread_mutex_lock(&sh.mu);
    memcpy(base, sh.done, sizeof base);
    pthread_mutex_unlock(&sh.mu);
    wait_progress(&sh, base, 1);
    atomic_store(&sh.stop, true);
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);

    uint64_t sent = 0, done = 0;
    for (int i = 0; i < N_THREADS; i++) {
        sent += sh.sent[i];
        done += sh.done[i];
        CHECK(sh.sent[i] == sh.done[i], "thread %d: %" PRIu64 " sent, %"
              PRIu64 " completed", i, sh.sent[i], sh.done[i]);
    }
    wf_status_info_t si;
    st = wf_status(c, &si);
    CHECK(st == WF_OK && si.jobs_served == done && si.jobs_failed == 0,
          "daemon served %" PRIu64 " failed %" PRIu64 ", clients completed %" PRIu64,
          si.jobs_served, si.jobs_failed, done);
    printf("%zu re-shards under load (tp 1 -> 2 -> 4 -> 1 x3, tp2 x ulysses2, "
           "ring2 x tp2): mean %.1f ms, worst %.1f ms; %" PRIu64 " forward jobs "
           "sent, %" PRIu64 " correct, 0 lost\n", ok_changes,
           ok_changes ? sum / (double)ok_changes * 1e3 : 0.0, worst * 1e3, sent, done);
    CHECK(ok_changes == n_seq, "%zu of %zu changes succeeded", ok_changes, n_seq);
    wf_client_destroy(&c);
    char err[256];
    CHECK(stop_daemon(pid, 30000, err, sizeof err), "weftd: %s", err);
    fluxio_free(&io_tiny);
    fluxio_free(&io_guid);
    printf("%s: %d checks, %d failures\n", failed ? "FAIL" : "ok", passed + failed, failed);
    return failed ? 1 : 0;
}
