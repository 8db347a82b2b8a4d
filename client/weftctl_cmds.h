/* weftctl_cmds.h — the commands main() (weftctl.c) dispatches to,
 * defined in weftctl_demo.c and weftctl_models.c. Private to
 * client/weftctl*.c; weftctl links libweft like any client.
 */
#ifndef WF_WEFTCTL_CMDS_H
#define WF_WEFTCTL_CMDS_H

#include "weft.h"

/* The commands: argv holds the command's own arguments; each returns the
 * exit code. */
int ctl_cmd_demo(wf_client_t *c, int argc, char **argv);
int ctl_cmd_load(const char *endpoint, int timeout_ms, int argc, char **argv);
int ctl_cmd_unload(wf_client_t *c, int argc, char **argv);
int ctl_cmd_models(wf_client_t *c);
int ctl_cmd_forward(wf_client_t *c, int argc, char **argv);
int ctl_cmd_shard(int argc, char **argv);

#endif /* WF_WEFTCTL_CMDS_H */
