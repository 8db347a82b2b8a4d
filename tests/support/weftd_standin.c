/* weftd_standin.c — the tests' weftd: the daemon's whole life
 * (wf_daemon_main) on the stand-in device backend (standin_dev.h) over
 * cpu:N settings, so that end-to-end tests drive the daemon's device
 * paths on a machine without a GPU. Give it a cpu_memory budget
 * (WEFT_CPU_MEMORY): each device's arena is allocated at start-up.
 */
#include "server/server.h"
#include "support/standin_dev.h"

extern char **environ;

int main(int argc, char **argv)
{
    return wf_daemon_main(argc, argv, environ, wf_standin_dev_backend());
}
