/* daemon_main.c — weftd's whole life as one call (see server.h): parse
 * the settings, build the daemon, serve, tear down along one path. main.c
 * calls it with the backend the settings name; the tests' daemon on the
 * stand-in device backend (tests/support) with that one.
 */
#include "server.h"

#include <stdio.h>
#include <unistd.h>

int wf_daemon_main(int argc, char **argv, char **envp,
                   const wf_backend_ops_t *backend)
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
    if (wf_config_build(&cli, envp, &settings, err, sizeof err) != WF_OK) {
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
    if (wf_server_new(&settings, &cli, envp, &log, backend, &srv) != WF_OK)
        return 1;
    wf_status_t st = wf_server_run(srv);
    wf_server_destroy(&srv);
    return st == WF_OK ? 0 : 1;
}
