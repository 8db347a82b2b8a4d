/* main.c — weftd's entry point: the daemon's life (server.h's
 * wf_daemon_main) on the backend its settings name. The only place that
 * exits: 0 after a clean shutdown, 1 when serving failed, 2 for bad
 * settings at start-up.
 */
#include <stddef.h>

#include "server/server.h"

extern char **environ;

int main(int argc, char **argv)
{
    return wf_daemon_main(argc, argv, environ, NULL);
}
