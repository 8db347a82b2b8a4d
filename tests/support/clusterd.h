/* clusterd.h — test support for end-to-end cluster tests: one weftd
 * process on loopback with its own sd_notify socket, started, waited for
 * (pidfd, with a deadline), killed and cleaned up (through
 * support/spawn.h); a free port for a coordinator; the status of a
 * daemon; a daemon whose notify socket a thread reads (clusterd_node_t);
 * a member killed mid-job. Shared by
 * test_cluster.c, test_cluster_jobs.c, test_cluster_fault.c and the other
 * cluster end-to-end tests. Not here: the daemon's arguments. Tests
 * only. */
#ifndef WF_TEST_CLUSTERD_H
#define WF_TEST_CLUSTERD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "support/check.h"
#include "support/wait.h"
#include "support/ports.h"
#include "support/spawn.h"
#include "weft.h"

/* How long clusterd waits for a killed daemon and for a status reply. */
#define CLUSTERD_TIMEOUT_MS 30000

/* One weftd process. */
typedef struct clusterd {
    char name[16];         /* node name, for messages */
    pid_t pid;             /* the process (0: none) */
    int pidfd;             /* its pidfd */
    int nfd;               /* the bound sd_notify datagram socket */
    char notify_path[108]; /* its path (the daemon's NOTIFY_SOCKET) */
    char endpoint[128];    /* ipc:// endpoint for the daemon's --listen */
    bool reaped;           /* waited for */
    int exit_status;       /* waitpid status, once reaped */
    char log_path[108];    /* set before clusterd_exec: the daemon's stderr
                              (its log) goes to this file ("": inherited);
                              removed by clusterd_close */
} clusterd_t;

/* Monotonic milliseconds. */
int64_t clusterd_now_ms(void);

/* Zero d, name it, choose its endpoint and notify path under /tmp (with
 * `tag`, this process's pid and a counter in the names) and bind the
 * notify socket. False (perror) when the socket cannot be bound. */
bool clusterd_open(clusterd_t *d, const char *name, const char *tag);

/* Fork and exec argv[0] with argv (NULL-terminated) and NOTIFY_SOCKET set
 * to d's notify path, `env` ("NAME=value", or NULL) put in its
 * environment too; open its pidfd. False when fork or pidfd_open fails.
 * clusterd_spawn with that one variable. */
bool clusterd_exec(clusterd_t *d, const char *const argv[], const char *env);

/* Start argv[0] with argv (NULL-terminated) through spawn_exec with o's
 * options (NULL: none): NOTIFY_SOCKET is d's notify path (open to every
 * user when o->as_user), stderr goes to o->log_path, else to d->log_path
 * when set; d->pid and d->pidfd are set. False when it could not be
 * started. */
bool clusterd_spawn(clusterd_t *d, const char *const argv[], const spawn_opts_t *o);

/* Wait up to timeout_ms for a line of the file at `path` holding
 * `needle`; the line (without its newline) goes to got. Polls the file
 * every 20 ms (a file has no event to wait on). For the logs of daemons
 * started some other way. */
bool clusterd_file_find(const char *path, const char *needle, int timeout_ms,
                        char *got, size_t got_len);

/* Wait up to timeout_ms for a line of d's log file (d->log_path)
 * holding `needle`; the line (without its newline) goes to got. Polls
 * the file every 20 ms (a file has no event to wait on). */
bool clusterd_log_find(const clusterd_t *d, const char *needle, int timeout_ms,
                       char *got, size_t got_len);

/* Wait up to timeout_ms for the process to exit and reap it (status in
 * d->exit_status). True at once when it is already reaped. */
bool clusterd_wait_exit(clusterd_t *d, int timeout_ms);

/* Send sig and wait (CLUSTERD_TIMEOUT_MS) for the exit; past that bound
 * the process is SIGKILLed and reaped, with a line on stderr (a test that
 * expects an exit status then fails). Nothing when the process is
 * already reaped or was never started. */
void clusterd_kill(clusterd_t *d, int sig);

/* SIGKILL the process if it runs, close d's descriptors, remove its
 * socket files and zero d. */
void clusterd_close(clusterd_t *d);

/* The daemon's status through libweft (connect timeout
 * CLUSTERD_TIMEOUT_MS). */
bool clusterd_status(const clusterd_t *d, wf_status_info_t *s);

/* A daemon watched through its notify socket: a reader thread drains the
 * socket at once (a daemon blocks in sd_notify when the queue is full)
 * into `text`, one line per notification; clusterd_node_wait takes the
 * lines after `cursor`. */
typedef struct clusterd_node {
    clusterd_t p;              /* the process and its notify socket */
    int stop_pipe[2];          /* tells the reader to stop */
    pthread_t reader;          /* the reader thread */
    bool reading;              /* it runs */
    pthread_mutex_t mu;        /* guards text, len, cap, cursor */
    pthread_cond_t cv;         /* new lines */
    char *text;                /* every line so far */
    size_t len, cap, cursor;   /* its length, size, first line not taken */
} clusterd_node_t;

/* clusterd_open (name, tag) and start the reader; start the daemon with
 * clusterd_exec(&d->p, ...). False (perror) on failure. */
bool clusterd_node_open(clusterd_node_t *d, const char *name, const char *tag);

/* Kill the daemon if it runs (SIGKILL), stop the reader, clusterd_close,
 * free; zeroes d. */
void clusterd_node_close(clusterd_node_t *d);

/* Wait up to timeout_ms for a notify line starting with `prefix`; lines
 * before it are taken and skipped. The line goes to got (got_len bytes;
 * got may be NULL). False (with a message on stderr) on timeout. */
bool clusterd_node_wait(clusterd_node_t *d, const char *prefix, int timeout_ms,
                        char *got, size_t got_len);

/* How a test starts one node of a 3-node world of `weftd --devices
 * cpu:2 --cpu-memory 1G`. */
typedef struct clusterd_opts {
    const char *name;             /* --node-name */
    const char *tag;              /* the test's tag for socket names */
    const char *coordinator;      /* --coordinator HOST:PORT */
    const char *mesh;             /* --mesh */
    const char *data_address;     /* --data-address (loopback .1/.2/.3) */
    int cluster_timeout_ms;       /* --cluster-timeout-ms */
    int heartbeat_ms;             /* --heartbeat-ms */
    int heartbeat_timeout_ms;     /* --heartbeat-timeout-ms */
    const char *max_tensor_bytes; /* --max-tensor-bytes, or NULL: the default */
    const char *log_env;          /* environment variable holding the log
                                     level (default "warning") */
    const char *env;              /* one extra K=V for the daemon, or NULL */
} clusterd_opts_t;

/* clusterd_node_open, then exec weftd with o's flags. False on failure. */
bool clusterd_node_start(clusterd_node_t *d, const char *weftd,
                         const clusterd_opts_t *o);

/* ------------------------------------------------------------------ */
/* Job parts held on a node: the daemon's test hook WEFT_TEST_HOLD_JOBS */

/* A FIFO for WEFT_TEST_HOLD_JOBS. A daemon started with `env` in its
 * environment makes every job part (attention, forward; not a regroup)
 * wait at its start for one byte from the FIFO, and counts a held part as
 * a busy device in status: a job with ranks there cannot end until the
 * test says so, however fast the machine. Nothing here writes to it: a
 * daemon held so is killed with its parts held (a node lost mid-job), or
 * opens the gate itself when it shuts down. */
typedef struct clusterd_hold {
    char path[108];   /* the FIFO, under /tmp */
    char env[160];    /* "WEFT_TEST_HOLD_JOBS=<path>" */
} clusterd_hold_t;

/* Make a fresh FIFO (`tag`, this process's pid and a counter in its
 * name) and fill h. False (perror) when mkfifo fails. */
bool clusterd_hold_open(clusterd_hold_t *h, const char *tag);

/* Remove the FIFO; zeroes h. */
void clusterd_hold_close(clusterd_hold_t *h);

/* How many of d's devices are busy now (running a job part, or held at
 * its start), from d's own status; -1 when no status came. */
int clusterd_busy(const clusterd_t *d);

/* Wait (wait_for, bound timeout_ms) until at least n of d's devices are
 * busy. False, with a line on stderr, at the bound. */
bool clusterd_wait_busy(const clusterd_t *d, int n, uint32_t timeout_ms);

/* What a node's loss may take beyond heartbeat_timeout_ms to reach the
 * coordinator's STATUS line or a client (WF_E_NODE_LOST): the
 * coordinator's timer tick, aborting the comm world on every node, the
 * reply, on a loaded 2-core machine under the sanitizers. It stays far
 * below the clients' own waits (WAIT_EVENT_MS), so a loss found by
 * anything slower than the heartbeats still fails the check. */
#define CLUSTERD_LOSS_MARGIN_MS 10000u

/* The bound on a node's loss being known, counted from the kill, for
 * daemons started with heartbeat_timeout_ms (through wait_bound_ms). */
static inline uint32_t clusterd_loss_bound_ms(uint32_t heartbeat_timeout_ms)
{
    return wait_bound_ms(heartbeat_timeout_ms + CLUSTERD_LOSS_MARGIN_MS);
}

struct jcase;

/* A member lost with a job in flight on it. victim runs with a hold
 * (clusterd_hold_t), so a job with ranks there cannot end before the
 * kill. Submit through cl jobs of case jc (inputs of seed 7700 + i) one
 * at a time until one is held on victim (a busy device there); each
 * that ends first ran on another dp replica and must end WF_OK (replicas
 * take turns, so at most one per replica does). Then expect the status on
 * cl (answered after the held job was dispatched) to count a job in
 * flight, SIGKILL victim and reap it, and expect the held job to end
 * WF_E_NODE_LOST within lost_bound_ms of the kill with lost_msg in its
 * error message (NULL: not checked). Every other wait is bounded by
 * WAIT_EVENT_MS. Prints what the job answered; returns the failed
 * expectations, each printed on stderr (the caller adds them to its
 * failures). */
int clusterd_kill_held_job(clusterd_t *victim, wf_client_t *cl, const struct jcase *jc,
                           const char *lost_msg, uint32_t lost_bound_ms);

#endif
