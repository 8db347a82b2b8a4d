/* weftd_standin.c — the tests' weftd: the daemon's whole life
 * (wf_daemon_main) on the stand-in device backend (standin_dev.h) over
 * cpu:N settings, so that end-to-end tests drive the daemon's device
 * paths on a machine without a GPU. Give it a cpu_memory budget
 * (WEFT_CPU_MEMORY): each device's arena is allocated at start-up.
 * With WEFT_STANDIN_REPORT=1 it prints, after the daemon has ended (its
 * workers' contexts destroyed), the stand-in's transfer totals on stderr:
 * "standin: transfers N, overlapped accesses N, conflicts N" (the e2e
 * test of the overlapped staged ring reads them).
 */
#include "server/server.h"
#include "support/standin_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int main(int argc, char **argv)
{
    int rc = wf_daemon_main(argc, argv, environ, wf_standin_dev_backend());
    const char *rep = getenv("WEFT_STANDIN_REPORT");
    if (rep && strcmp(rep, "1") == 0) {
        wf_standin_totals_t t = wf_standin_totals();
        fprintf(stderr, "standin: transfers %llu, overlapped accesses %llu, conflicts %llu\n",
                (unsigned long long)t.xfers, (unsigned long long)t.overlaps,
                (unsigned long long)t.conflicts);
    }
    return rc;
}
