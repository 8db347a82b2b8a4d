/* rawd.h — test support for end-to-end tests that drive a real weftd
 * over raw ZeroMQ with the real codec (proto): start a daemon with its own
 * NOTIFY_SOCKET and a pidfd, wait for sd_notify lines, send requests,
 * receive replies, build attention jobs with an fp64 reference and check
 * their replies. Every wait is an event wait with a deadline. Tests only.
 * The process and the notify socket go through support/spawn.h. Shared
 * by the raw-ZeroMQ end-to-end tests (test_daemon, test_reconfig_basic,
 * test_fair, test_zmtp, test_privileges, test_socket_activation). */
#ifndef WF_TEST_RAWD_H
#define WF_TEST_RAWD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <zmq.h>

#include "proto.h"
#include "support/check.h"
#include "support/spawn.h"

#define TIMEOUT_MS 60000   /* generous: the suite may run under sanitizers */


typedef struct daemon {
    pid_t pid;
    int pidfd;                 /* readable when the process exits */
    int nfd;                   /* our end of NOTIFY_SOCKET */
    char notify_path[108];
    char endpoint[128];
    char sock_path[108];       /* file of the ipc endpoint */
    void *zctx, *sock;         /* a DEALER connected to it */
    int exit_status;           /* from waitpid once it exited */
    bool reaped;
} daemon_t;

typedef struct reply {
    wf_reply_t rep;
    bool delim;                /* an empty frame came before the header */
    size_t n_frames;           /* tensor frames */
    zmq_msg_t frames[4];
} reply_t;

typedef struct tensor {
    wf_dtype_t dt;
    int64_t shape[4];
    size_t numel, nbytes;
    unsigned char *bytes;      /* wire bytes */
    double *val;               /* the same values, as the daemon reads them */
} tensor_t;

typedef struct attn_case {
    const char *name;
    wf_dtype_t dt;             /* q, k, v */
    int64_t B, Sq, Skv, Hq, Hkv, D;
    bool causal, lse;
    bool has_out_dtype;
    wf_dtype_t out_dtype;
    float scale;               /* 0: default 1/sqrt(D) */
    uint32_t devices;          /* request arg */
    uint32_t want_devices;     /* devices the reply must report */
    bool delim;                /* send a REQ-style empty delimiter */
} attn_case_t;

typedef struct attn_job {
    tensor_t q, k, v;
    double *out, *lse;         /* fp64 reference */
} attn_job_t;


int64_t now_ms(void);
int left_ms(int64_t deadline);
/* Zero d, choose its ipc endpoint (d->endpoint, file d->sock_path) and
 * notify path under /tmp (this process's pid and a counter in the names)
 * and bind the notify socket (d->nfd). False (perror) when it cannot be
 * bound. */
bool daemon_open(daemon_t *d);
/* Start argv (argv[0] the program; run as given: the caller puts
 * d->endpoint in it, or passes a socket bound at d->sock_path) through
 * spawn_exec with o's options (NULL: none) and d's notify socket as
 * NOTIFY_SOCKET (open to every user when o->as_user), then connect d's
 * DEALER to d->endpoint. False when it could not be started. */
bool daemon_exec(daemon_t *d, const char *const *argv, const spawn_opts_t *o);
/* daemon_open, then daemon_exec of `weftd --listen d->endpoint args...`
 * with env ("K=V", NULL-terminated; NULL: none) added to its
 * environment. */
bool daemon_start_env(daemon_t *d, const char *weftd,
                             const char *const *args, const char *const *env);
bool daemon_start(daemon_t *d, const char *weftd, const char *const *args);
bool daemon_wait_exit(daemon_t *d, int timeout_ms);
void daemon_close(daemon_t *d);
/* VmRSS of process pid in bytes, from /proc/PID/status (0 when
 * unreadable). */
uint64_t rss_of(pid_t pid);

/* VmHWM of process pid (its peak resident set since it started, or since
 * its clear_refs "5"), in bytes; 0 when unreadable. */
uint64_t hwm_of(pid_t pid);
bool notify_wait(daemon_t *d, const char *want, int timeout_ms);
bool send_frames(void *sock, bool delim, const wf_buf_t *hdr,
                        size_t n, const void *const *data, const size_t *len);
bool send_simple(daemon_t *d, uint32_t op, uint64_t id);
void reply_clear(reply_t *r);
bool recv_reply(daemon_t *d, int timeout_ms, reply_t *r);
uint16_t f32_to_bf16(float f);
float bf16_to_f32(uint16_t h);
void tensor_make(tensor_t *t, wf_dtype_t dt, int64_t a, int64_t b,
                        int64_t c, int64_t e);
void tensor_free(tensor_t *t);
void attn_reference(const attn_case_t *c, attn_job_t *j);
void attn_job_make(const attn_case_t *c, attn_job_t *j, uint64_t seed);
void attn_job_free(attn_job_t *j);
bool attn_send(daemon_t *d, const attn_case_t *c, const attn_job_t *j,
                      uint64_t id);
void attn_check(const attn_case_t *c, const attn_job_t *j,
                       const reply_t *r);
bool get_status(daemon_t *d, reply_t *r, uint64_t id);
void write_file(const char *path, const char *text);

/* The job hold of the daemon's test hook WEFT_TEST_HOLD_JOBS
 * (daemon/base/config.h): a FIFO made by the test. A daemon started with
 * `env` in its environment makes every job part wait at its start,
 * counted busy in status (devices[].busy), for one byte from it; so a
 * test makes "a job is running" and "the queue is full" happen and waits
 * for them in status, instead of hoping that jobs are slow enough. The
 * daemon opens the gate itself at its shutdown. */
typedef struct hold {
    char dir[64];              /* a fresh directory under /tmp */
    char path[96];             /* the FIFO in it */
    char env[128];             /* "WEFT_TEST_HOLD_JOBS=PATH", for the daemon */
    int fd;                    /* the test's end, read and write; -1: none */
} hold_t;

/* Make the FIFO and open it. False (perror) when that fails; hold_remove
 * cleans up either way. */
bool hold_make(hold_t *h);
/* Let `parts` held job parts run, one byte each (the workers keep
 * holding the parts after them). */
bool hold_release(hold_t *h, unsigned parts);
/* Open the gate for good: one 'a' per device of the daemon (each worker
 * that reads one stops holding, and so do the others). */
bool hold_open_gate(hold_t *h, unsigned devices);
/* Close the test's end, remove the FIFO and its directory. */
void hold_remove(hold_t *h);

#endif
