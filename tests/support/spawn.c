/* spawn.c — starting and ending a test's programs (see spawn.h). The
 * child runs only async-signal-safe calls between fork and execve (its
 * environment is built before the fork), since the test may have threads
 * (clusterd's notify readers, client threads). */
#include "support/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The most sockets spawn_opts_t passes (systemd's own limit is far
 * higher; a test passes one or two). */
#define MAX_LISTEN_FDS 8

/* ---- the child's environment ------------------------------------------ */

/* Whether the entry "NAME=value" names `name` (name may end at '='). */
static bool env_names(const char *entry, const char *name)
{
    size_t n = strcspn(name, "=");
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/* Whether the inherited entry is left out: the variables the child only
 * gets from o, those o removes and those o sets anew. */
static bool env_dropped(const char *entry, const spawn_opts_t *o)
{
    static const char *const ours[] = { "NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID",
                                        "LISTEN_FDNAMES", NULL };
    for (size_t i = 0; ours[i]; i++)
        if (env_names(entry, ours[i]))
            return true;
    for (size_t i = 0; o->unset && o->unset[i]; i++)
        if (env_names(entry, o->unset[i]))
            return true;
    for (size_t i = 0; o->env && o->env[i]; i++)
        if (env_names(entry, o->env[i]))
            return true;
    return false;
}

/* The child's environment: the test's filtered by env_dropped, then o's
 * entries, NOTIFY_SOCKET and LISTEN_FDS; LISTEN_PID last, as `pid_slot`
 * (its digits are written by the child, which alone knows its pid).
 * Caller owns the array (not its strings, but *notify and *fds); NULL
 * when out of memory. */
static char **env_build(const spawn_opts_t *o, char *notify, size_t notify_len,
                        char *fds, size_t fds_len, char *pid_slot)
{
    size_t n = 0, k = 0;
    while (environ && environ[n])
        n++;
    for (size_t i = 0; o->env && o->env[i]; i++)
        n++;
    char **envp = malloc((n + 4) * sizeof *envp);
    if (!envp)
        return NULL;
    for (size_t i = 0; environ && environ[i]; i++)
        if (!env_dropped(environ[i], o))
            envp[k++] = environ[i];
    for (size_t i = 0; o->env && o->env[i]; i++)
        envp[k++] = (char *)o->env[i];
    if (o->notify_path) {
        snprintf(notify, notify_len, "NOTIFY_SOCKET=%s", o->notify_path);
        envp[k++] = notify;
    }
    if (o->n_listen_fds > 0) {
        snprintf(fds, fds_len, "LISTEN_FDS=%d", o->n_listen_fds);
        envp[k++] = fds;
        envp[k++] = pid_slot;
    }
    envp[k] = NULL;
    return envp;
}

/* ---- the child, between fork and exec ------------------------------------ */

/* A line on the child's stderr (async-signal-safe), then _exit(code). */
static void child_fail(const char *what, const char *arg, int code)
{
    const char *parts[] = { "spawn: ", what, " ", arg, "\n" };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (write(2, parts[i], strlen(parts[i])) < 0)
            break;
    _exit(code);
}

/* The decimal digits of v at the end of buf (async-signal-safe). */
static void put_digits(char *buf, long v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    char *p = buf + strlen(buf);
    while (n > 0)
        *p++ = tmp[--n];
    *p = '\0';
}

static void child_run(const char *const argv[], const spawn_opts_t *o, int log_fd,
                      int out_fd, char **envp, char *pid_slot)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (log_fd >= 0 && dup2(log_fd, 2) != 2)
        child_fail("cannot redirect stderr for", argv[0], SPAWN_EXIT_SETUP);
    if (out_fd >= 0 && dup2(out_fd, 1) != 1)
        child_fail("cannot redirect stdout for", argv[0], SPAWN_EXIT_SETUP);
    if (o->n_listen_fds > 0) {
        /* out of the way of 3..3+n first, so no socket is overwritten by
         * another before it is moved; the copies close at exec */
        int high[MAX_LISTEN_FDS];
        for (int i = 0; i < o->n_listen_fds; i++) {
            high[i] = fcntl(o->listen_fds[i], F_DUPFD_CLOEXEC, 3 + MAX_LISTEN_FDS);
            if (high[i] < 0)
                child_fail("cannot pass a listening socket to", argv[0], SPAWN_EXIT_SETUP);
        }
        for (int i = 0; i < o->n_listen_fds; i++)
            if (dup2(high[i], 3 + i) != 3 + i)
                child_fail("cannot pass a listening socket to", argv[0], SPAWN_EXIT_SETUP);
        put_digits(pid_slot, (long)getpid());
    }
    if (o->as_user &&
        (setgroups(0, NULL) != 0 || setgid(o->gid) != 0 || setuid(o->uid) != 0))
        child_fail("cannot switch user for", argv[0], SPAWN_EXIT_SETUP);
    execve(argv[0], (char *const *)argv, envp);
    child_fail("cannot execute", argv[0], SPAWN_EXIT_EXEC);
}

/* ---- start --------------------------------------------------------------- */

static int open_out(const char *path)
{
    if (!path)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        perror(path);
    return fd;
}

static int pidfd_of(pid_t pid)
{
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

bool spawn_exec(const char *const argv[], const spawn_opts_t *o, pid_t *ret_pid,
                int *ret_pidfd)
{
    static const spawn_opts_t defaults = { 0 };
    if (!o)
        o = &defaults;
    if (o->n_listen_fds < 0 || o->n_listen_fds > MAX_LISTEN_FDS) {
        fprintf(stderr, "spawn %s: %d listening sockets (at most %d)\n", argv[0],
                o->n_listen_fds, MAX_LISTEN_FDS);
        return false;
    }
    char notify[160], fds[32], pid_slot[48] = "LISTEN_PID=";
    int log_fd = open_out(o->log_path);
    /* the same file for both: one open file, so the two do not overwrite
     * each other */
    bool same = o->log_path && o->stdout_path && strcmp(o->log_path, o->stdout_path) == 0;
    int out_fd = same ? log_fd : open_out(o->stdout_path);
    char **envp = env_build(o, notify, sizeof notify, fds, sizeof fds, pid_slot);
    if (!envp)
        fprintf(stderr, "spawn %s: out of memory\n", argv[0]);
    pid_t pid = -1;
    if (envp && (!o->log_path || log_fd >= 0) && (!o->stdout_path || out_fd >= 0)) {
        pid = fork();
        if (pid == 0)
            child_run(argv, o, log_fd, out_fd, envp, pid_slot);
        if (pid < 0)
            perror("fork");
    }
    free(envp);
    if (log_fd >= 0)
        close(log_fd);
    if (out_fd >= 0 && !same)
        close(out_fd);
    if (pid < 0)
        return false;
    int pidfd = pidfd_of(pid);
    if (pidfd < 0) {
        perror("pidfd_open");
        int st;
        spawn_signal_reap(pid, -1, SIGKILL, SPAWN_STOP_MS, argv[0], &st, NULL);
        return false;
    }
    *ret_pid = pid;
    if (ret_pidfd)
        *ret_pidfd = pidfd;
    else
        close(pidfd);
    return true;
}

/* ---- waiting ------------------------------------------------------------- */

/* Remaining milliseconds to `end` on the monotonic clock (0 when past). */
static int left_to(uint64_t end)
{
    uint64_t now = wait_now_ms();
    return now >= end ? 0 : (int)(end - now > INT32_MAX ? INT32_MAX : end - now);
}

/* Reap pid without a pidfd: waitpid(WNOHANG) every 1 ms growing to 20
 * ms until `end` (the kernel has no pidfd_open). */
static bool reap_polling(pid_t pid, uint64_t end, int *ret_status)
{
    long step_us = 1000;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            *ret_status = st;
            return true;
        }
        if (r < 0 && errno != EINTR)
            return false;
        if (left_to(end) == 0)
            return false;
        struct timespec ts = { 0, step_us * 1000 };
        nanosleep(&ts, NULL);
        if (step_us < 20000)
            step_us *= 2;
    }
}

bool spawn_reap(pid_t pid, int pidfd, int timeout_ms, int *ret_status)
{
    if (pid <= 0)
        return false;
    uint64_t end = wait_now_ms() + wait_bound_ms(timeout_ms > 0 ? (uint32_t)timeout_ms : 0);
    int own = pidfd < 0 ? pidfd_of(pid) : -1;
    int fd = pidfd >= 0 ? pidfd : own;
    if (fd < 0)
        return reap_polling(pid, end, ret_status);
    bool done = false;
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, left_to(end));
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 1) {
            /* readable: the process has exited, so this does not block */
            int st;
            pid_t w;
            while ((w = waitpid(pid, &st, WNOHANG)) < 0 && errno == EINTR)
                ;
            if (w == pid) {
                *ret_status = st;
                done = true;
            }
        }
        break;
    }
    if (own >= 0)
        close(own);
    return done;
}

bool spawn_signal_reap(pid_t pid, int pidfd, int sig, int timeout_ms, const char *name,
                       int *ret_status, bool *ret_killed)
{
    if (ret_killed)
        *ret_killed = false;
    if (pid <= 0)
        return false;
    kill(pid, sig);
    if (spawn_reap(pid, pidfd, timeout_ms, ret_status))
        return true;
    fprintf(stderr, "%s (pid %d) still running %u ms after signal %d (%s): SIGKILL\n",
            name ? name : "child", (int)pid, wait_bound_ms((uint32_t)timeout_ms), sig,
            strsignal(sig));
    if (ret_killed)
        *ret_killed = true;
    kill(pid, SIGKILL);
    if (spawn_reap(pid, pidfd, SPAWN_STOP_MS, ret_status))
        return true;
    fprintf(stderr, "%s (pid %d) not reaped %u ms after SIGKILL\n", name ? name : "child",
            (int)pid, wait_bound_ms(SPAWN_STOP_MS));
    return false;
}

const char *spawn_status_str(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exit %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(buf, len, "status 0x%x", (unsigned)status);
    return buf;
}

/* ---- spawn_t ------------------------------------------------------------- */

bool spawn_start(spawn_t *p, const char *const argv[], const spawn_opts_t *o)
{
    memset(p, 0, sizeof *p);
    p->pidfd = -1;
    const char *base = strrchr(argv[0], '/');
    snprintf(p->name, sizeof p->name, "%s", base ? base + 1 : argv[0]);
    return spawn_exec(argv, o, &p->pid, &p->pidfd);
}

bool spawn_wait(spawn_t *p, int timeout_ms)
{
    if (!p->reaped && spawn_reap(p->pid, p->pidfd, timeout_ms, &p->status))
        p->reaped = true;
    return p->reaped;
}

bool spawn_stop(spawn_t *p, int sig, int timeout_ms)
{
    if (p->reaped)
        return true;
    bool killed = false;
    if (spawn_signal_reap(p->pid, p->pidfd, sig, timeout_ms, p->name, &p->status, &killed))
        p->reaped = true;
    return p->reaped && !killed;
}

bool spawn_exited(const spawn_t *p, int code)
{
    return p->reaped && WIFEXITED(p->status) && WEXITSTATUS(p->status) == code;
}

void spawn_close(spawn_t *p)
{
    if (!p)
        return;
    if (p->pid > 0 && !p->reaped)
        spawn_stop(p, SIGKILL, SPAWN_STOP_MS);
    if (p->pidfd >= 0)
        close(p->pidfd);
    memset(p, 0, sizeof *p);
    p->pidfd = -1;
}

/* ---- the notify socket ---------------------------------------------------- */

int spawn_notify_bind(const char *path, unsigned mode)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof sa.sun_path) {
        fprintf(stderr, "notify socket %s: path too long\n", path);
        return -1;
    }
    memcpy(sa.sun_path, path, strlen(path) + 1);
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        (mode && chmod(path, (mode_t)mode) != 0)) {
        perror("notify socket");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

bool spawn_notify_wait(int fd, const char *line, int timeout_ms)
{
    uint64_t end = wait_now_ms() + wait_bound_ms(timeout_ms > 0 ? (uint32_t)timeout_ms : 0);
    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = poll(&p, 1, left_to(end));
        if (r < 0 && errno == EINTR)
            continue;
        if (r != 1) {
            fprintf(stderr, "no %s within %d ms\n", line, timeout_ms);
            return false;
        }
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n < 0) {
            perror("notify socket");
            return false;
        }
        buf[n] = '\0';
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l;
             l = strtok_r(NULL, "\n", &save))
            if (strcmp(l, line) == 0)
                return true;
    }
}
