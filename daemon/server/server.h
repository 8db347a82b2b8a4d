/* server.h — the daemon context and its main loop.
 *
 * The main thread owns a ZeroMQ ROUTER bound to the listen endpoint (or,
 * under socket activation, to the one socket systemd passed), a
 * signalfd (SIGTERM / SIGINT drain and stop, SIGHUP reloads the settings)
 * and the eventfd through which workers report finished jobs; it polls the
 * three with zmq_poll. It validates every request before anything is
 * allocated for it, answers hello and status itself, and hands attention
 * jobs to the scheduler. All state hangs off wf_server_t: no globals.
 *
 * With a coordinator set (cluster mode) it also polls the control plane
 * and follows its worlds (cluster/world.h, which owns that state): the workers' communicators are one
 * ZeroMQ comm world (comm_zmq.h) over every rank of every node, rebuilt
 * per world epoch; the coordinator sequences every job, keeps its roots
 * (inputs, outputs) and sends members a descriptor for their ranks; a lost
 * node aborts the comm world and its jobs fail with WF_E_NODE_LOST
 * (PROTOCOL.md section 11). Without one, the in-process host comm.
 *
 * The only header of daemon/server/ for others (main.c); the folder's
 * files and which calls which are listed in server_impl.h.
 */
#ifndef WF_SERVER_H
#define WF_SERVER_H

#include "backend.h"
#include "base/config.h"
#include "base/log.h"

typedef struct wf_server wf_server_t;

/* Build the daemon. Call from the process's initial thread (signals that
 * land on a thread a library started before main() are forwarded to it).
 * Blocks the handled signals (before any thread of ours starts, so that
 * only the signalfd sees them), starts one worker per device
 * (synchronously), binds the ROUTER. `cli` and `envp` are borrowed for the
 * daemon's lifetime (SIGHUP rebuilds the settings from them); `log` too.
 * `backend` NULL: the one the settings name (cpu:N: the CPU backend; cuda:
 * the CUDA one); else that one on the settings' devices (the tests'
 * daemon on the stand-in device backend, with cpu:N settings and a
 * cpu_memory budget for its arenas). Logs what failed. Caller owns
 * *ret_srv. */
wf_status_t wf_server_new(const wf_settings_t *settings, const wf_cli_t *cli,
                          char *const *envp, wf_log_t *log,
                          const wf_backend_ops_t *backend,
                          wf_server_t **ret_srv);

/* Serve until SIGTERM / SIGINT, then drain: every admitted job is run and
 * answered (bounded by drain_timeout_ms), workers stop. Returns WF_OK
 * after a clean shutdown. */
wf_status_t wf_server_run(wf_server_t *srv);

/* weftd from the command line to its exit code (main.c's body): parse
 * argv and the environment, build, serve until told to stop, tear down.
 * Returns 0 after a clean shutdown, 1 when serving failed, 2 for bad
 * settings. `backend` as wf_server_new's. */
int wf_daemon_main(int argc, char **argv, char **envp,
                   const wf_backend_ops_t *backend);

/* Stop the workers, close the sockets (the ipc socket file goes with the
 * bound socket), restore the signal mask, free; sets *srv to NULL; accepts
 * NULL. */
void wf_server_destroy(wf_server_t **srv);

#endif /* WF_SERVER_H */
