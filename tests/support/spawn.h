/* spawn.h — how a test starts a program (weftd, weftd_standin,
 * weftd_ncclsi, weftctl, systemd-socket-activate) and how it ends it.
 *
 * Start: fork + execve of argv with an empty signal mask, extra
 * environment, NOTIFY_SOCKET, stderr / stdout into files, listening
 * sockets passed the way systemd passes them (LISTEN_FDS) and a user to
 * run as; a pidfd to wait on. End: a wait bounded by a timeout (on the
 * pidfd, never a bare waitpid); a stop that sends a signal, waits with a
 * bound and past it SIGKILLs the process and says so on stderr, so that a
 * hung daemon fails its test with a message instead of running into
 * CTest's TIMEOUT. Also the daemon's notify socket: bound, and read until
 * a line arrives.
 *
 * Two levels: spawn_exec / spawn_reap / spawn_signal_reap work on a pid
 * and pidfd that the caller keeps in a struct of its own (rawd's daemon_t,
 * clusterd_t, jobcheck's bare pid); spawn_t keeps them together for a test
 * that has no such struct. Every bound goes through wait_bound_ms
 * (WEFT_TEST_WAIT_SCALE). Not here: the daemon's flags, a reader thread
 * on the notify socket (clusterd_node_t), clients. Tests only. */
#ifndef WF_TEST_SPAWN_H
#define WF_TEST_SPAWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "support/wait.h"

/* Exit status of a child that could not set itself up (a descriptor, the
 * user to run as) before exec. */
#define SPAWN_EXIT_SETUP 126
/* Exit status of a child whose execve failed. */
#define SPAWN_EXIT_EXEC 127

/* Bound on a daemon's exit after SIGTERM when nothing is left to drain:
 * the exit is an event the daemon brings about on its own. */
#define SPAWN_STOP_MS ((int)WAIT_EVENT_MS)

/* Bound on a daemon's exit after SIGTERM with jobs still in flight: its
 * drain_timeout_ms (the longest it finishes jobs for) plus the same
 * margin. */
static inline int spawn_stop_ms(uint32_t drain_timeout_ms)
{
    uint64_t ms = (uint64_t)drain_timeout_ms + WAIT_EVENT_MS;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* How to start a program. A zeroed struct (or NULL) inherits everything
 * but NOTIFY_SOCKET and LISTEN_*, which the child never takes from the
 * test. */
typedef struct spawn_opts {
    const char *const *env;   /* "NAME=value" entries set in the child's
                                 environment, NULL-terminated (NULL: none) */
    const char *const *unset; /* names removed from it, NULL-terminated
                                 (NULL: none) */
    const char *notify_path;  /* the child's NOTIFY_SOCKET (NULL: none) */
    const char *log_path;     /* its stderr: this file, created or
                                 truncated (NULL: the test's stderr) */
    const char *stdout_path;  /* its stdout, likewise (NULL: the test's) */
    const int *listen_fds;    /* sockets passed as systemd passes them:
                                 fd 3, 4, ... in this order, LISTEN_FDS,
                                 LISTEN_PID the child's own pid */
    int n_listen_fds;         /* how many (0: none) */
    bool as_user;             /* run as uid / gid, with no supplementary
                                 groups (the test runs as root) */
    uid_t uid;                /* with as_user */
    gid_t gid;                /* with as_user */
} spawn_opts_t;

/* Fork and execve argv[0] with argv (NULL-terminated) as o says (NULL:
 * defaults). The pid goes to *ret_pid; a pidfd of it to *ret_pidfd
 * (NULL: none kept). False (with a message on stderr) when a file, fork
 * or pidfd_open fails; then no child is left running. A child that
 * cannot set itself up exits SPAWN_EXIT_SETUP, one that cannot exec
 * SPAWN_EXIT_EXEC, each after a line on its stderr. */
bool spawn_exec(const char *const argv[], const spawn_opts_t *o, pid_t *ret_pid,
                int *ret_pidfd);

/* Wait up to wait_bound_ms(timeout_ms) for child pid to exit and reap it;
 * its waitpid status goes to *ret_status. pidfd: the child's, or -1 (one
 * is opened here). False when it still runs at the bound (nothing is
 * sent to it) or is not a child of this process. timeout_ms 0: whether
 * it has exited, without waiting. */
bool spawn_reap(pid_t pid, int pidfd, int timeout_ms, int *ret_status);

/* Send sig to child pid and reap it within timeout_ms (spawn_reap). Past
 * the bound: a line on stderr naming `name`, the pid, the signal and the
 * bound, then SIGKILL and a second wait (WAIT_EVENT_MS); *ret_killed
 * (NULL: not wanted) says whether that happened. True when reaped, the
 * status in *ret_status. */
bool spawn_signal_reap(pid_t pid, int pidfd, int sig, int timeout_ms, const char *name,
                       int *ret_status, bool *ret_killed);

/* "exit N" or "signal N (NAME)" for a waitpid status, into buf. */
const char *spawn_status_str(int status, char *buf, size_t len);

/* A started program, for tests that keep no pid of their own. */
typedef struct spawn {
    pid_t pid;       /* the process (0: none) */
    int pidfd;       /* readable once it exited (-1: none) */
    bool reaped;     /* waited for: status says how it ended */
    int status;      /* its waitpid status, once reaped */
    char name[32];   /* argv[0]'s base name, for messages */
} spawn_t;

/* spawn_exec into p (zeroed first). False as spawn_exec. */
bool spawn_start(spawn_t *p, const char *const argv[], const spawn_opts_t *o);

/* spawn_reap: true once p was reaped (at once when it already was). */
bool spawn_wait(spawn_t *p, int timeout_ms);

/* spawn_signal_reap with sig and timeout_ms: true when p exited within
 * the bound (false also when it had to be killed, or was never
 * started). Nothing is sent when p was already reaped (true). */
bool spawn_stop(spawn_t *p, int sig, int timeout_ms);

/* Whether p was reaped after exiting with code. */
bool spawn_exited(const spawn_t *p, int code);

/* SIGKILL p if it still runs (spawn_stop, bounded), close its pidfd;
 * p is left zeroed (pidfd -1). NULL or never started: nothing. */
void spawn_close(spawn_t *p);

/* A datagram socket bound at path (a file left there is removed first)
 * for a child's NOTIFY_SOCKET, close-on-exec; chmod'ed to mode unless 0
 * (0666: a child running as another user reaches it). The fd, or -1
 * (perror). */
int spawn_notify_bind(const char *path, unsigned mode);

/* Read notify datagrams from fd until one holds `line` as a whole line
 * (true) or wait_bound_ms(timeout_ms) passes (false, a line on stderr).
 * Every datagram read is consumed, the matching one included. */
bool spawn_notify_wait(int fd, const char *line, int timeout_ms);

#endif /* WF_TEST_SPAWN_H */
