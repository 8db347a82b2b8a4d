/* weftd_ncclsi.c — the tests' weftd whose "NCCL" is the stand-in
 * (nccl_standin.h) on the stand-in device backend (standin_dev.h): the
 * daemon's whole life (wf_daemon_main) over cpu:N settings, with this
 * file's wf_nccl_api in place of comm_nccl_api.c's (the linker takes this
 * object's definition and never pulls that archive member). So the
 * rendezvous's NCCL path runs end to end on a machine without a GPU:
 * hellos say "gpu", the coordinator draws the id, the world message
 * carries it, every rank joins from it (tests/cluster/test_nccl_cluster.c).
 *
 * The stand-in lives for the process (made on first use; a daemon does
 * not destroy its NCCL either). WEFT_TEST_NCCL_SHRINK=1 gives it
 * ncclCommShrink (as NCCL 2.27+), else it has none (older NCCL).
 * WEFT_TEST_NCCL_VERSION=N makes it report NCCL version N. WEFT_NCCL=0
 * (the nccl setting) makes a node without "gpu": a mixed world.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/server.h"
#include "support/nccl_standin.h"
#include "support/standin_dev.h"

extern char **environ;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static wf_nccl_standin_t *standin;   /* the process's NCCL stand-in */

static void standin_start(void)
{
    /* WEFT_TEST_NCCL_SHRINK=1: the stand-in has ncclCommShrink (NCCL 2.27+),
     * else it is an NCCL without it */
    const char *e = getenv("WEFT_TEST_NCCL_SHRINK");
    bool shrink = e && e[0] == '1';
    if (wf_nccl_standin_new(shrink, &standin) != WF_OK) {
        fprintf(stderr, "weftd_ncclsi: cannot start the NCCL stand-in\n");
        abort();   /* a test binary: nothing can run without it */
    }
    /* WEFT_TEST_NCCL_VERSION=N: report another NCCL version (the
     * rendezvous's check between GPU nodes) */
    const char *v = getenv("WEFT_TEST_NCCL_VERSION");
    if (v)
        wf_nccl_standin_set_version(standin, atoi(v));
}

const wf_nccl_api_t *wf_nccl_api(void)
{
    pthread_once(&once, standin_start);
    return wf_nccl_standin_api(standin);
}

int main(int argc, char **argv)
{
    return wf_daemon_main(argc, argv, environ, wf_standin_dev_backend());
}
