/* main.c — weftd's entry point: parse the settings, build the daemon,
 * serve, tear down along one path. The only place that exits: 0 after a
 * clean shutdown, 1 when serving failed, 2 for bad settings at start-up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/config.h"
#include "base/log.h"
#include "server/server.h"

extern char **environ;

int main(int argc, char **argv)
{
    wf_cli_t cli;
    wf_settings_t settings;
    char err[512];

    if (wf_cli_parse(argc, argv, &cli, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weftd: %s\n", err);
        return 2;
    }
    if (cli.help) {
        wf_config_print_help(stdout, "weftd");
        return 0;
    }
    if (cli.version) {
        printf("weftd %s (protocol %d)\n", WEFT_VERSION, WF_PROTOCOL_VERSION);
        return 0;
    }
    if (wf_config_build(&cli, environ, &settings, err, sizeof err) != WF_OK) {
        fprintf(stderr, "weftd: %s\n", err);
        return 2;
    }
    if (cli.check_config) {
        printf("weftd: configuration OK (listen %s, devices %s, mesh dp=%u,"
               "ring=%u,ulysses=%u,tp=%u)\n", settings.listen, settings.devices,
               settings.mesh_deg.dp, settings.mesh_deg.ring,
               settings.mesh_deg.ulysses, settings.mesh_deg.tp);
        return 0;
    }

    wf_log_t log;
    wf_log_init(&log, STDERR_FILENO, (wf_log_level_t)settings.log_level);
    wf_server_t *srv = NULL;
    if (wf_server_new(&settings, &cli, environ, &log, &srv) != WF_OK)
        return 1;
    wf_status_t st = wf_server_run(srv);
    wf_server_destroy(&srv);
    return st == WF_OK ? 0 : 1;
}
