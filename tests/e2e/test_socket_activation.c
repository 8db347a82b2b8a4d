/* test_socket_activation.c — end-to-end: weftd started the way
 * units/weftd.socket starts it, under `systemd-socket-activate -l PATH`
 * (no systemd as PID 1 needed): the ROUTER serves on the inherited socket
 * (ZMQ_USE_FD), not on --listen. Checks READY=1, hello and a small
 * attention job through that socket, SIGTERM → exit 0 with the socket
 * file left to its owner; two inherited sockets → start-up error (exit 1).
 *
 * Usage: test_socket_activation PATH_TO_WEFTD. Exits 77 (skip) when
 * systemd-socket-activate is not installed. Every wait is an event wait
 * with a deadline (zmq_poll, poll on the notify socket and on a pidfd);
 * the activator is started through rawd (support/spawn.h).
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "proto.h"
#include "support/rawd.h"

/* systemd-socket-activate from PATH (then /usr/bin, /bin) into `buf`. */
static bool find_activator(char *buf, size_t len)
{
    const char *env = getenv("PATH");
    char path[4096];
    snprintf(path, sizeof path, "%s:/usr/bin:/bin", env ? env : "");
    for (char *save = NULL, *dir = strtok_r(path, ":", &save); dir;
         dir = strtok_r(NULL, ":", &save)) {
        snprintf(buf, len, "%s/systemd-socket-activate", dir);
        if (access(buf, X_OK) == 0)
            return true;
    }
    return false;
}

/* Start `activator -l sock [-l extra] --fdname=weftd -E NOTIFY_SOCKET=…
 * weftd --listen <unused endpoint> --devices cpu:1` and connect a DEALER
 * to the activated socket. The activator execs weftd in place (same pid,
 * so the pidfd watches weftd) when the first connection arrives, and
 * passes on only the environment named with -E. */
static bool sa_start(daemon_t *d, const char *activator, const char *weftd,
                     const char *extra_sock)
{
    if (!daemon_open(d))
        return false;
    unlink(d->sock_path);
    char notify_env[160], unused[160];
    snprintf(notify_env, sizeof notify_env, "NOTIFY_SOCKET=%s", d->notify_path);
    /* the daemon must not bind this: activation replaces --listen */
    snprintf(unused, sizeof unused, "ipc:///tmp/weft-sa-unused-%d.sock",
             (int)getpid());
    const char *argv[16];
    int argc = 0;
    argv[argc++] = activator;
    argv[argc++] = "-l";
    argv[argc++] = d->sock_path;
    if (extra_sock) {
        argv[argc++] = "-l";
        argv[argc++] = extra_sock;
    }
    argv[argc++] = "--fdname=weftd";
    argv[argc++] = "-E";
    argv[argc++] = notify_env;
    argv[argc++] = weftd;
    argv[argc++] = "--listen";
    argv[argc++] = unused;
    argv[argc++] = "--devices";
    argv[argc++] = "cpu:1";
    argv[argc] = NULL;
    /* the DEALER connects before the activator listens: ZeroMQ retries by
     * itself, and the first connection is what starts weftd */
    return daemon_exec(d, argv, NULL);
}

static void test_serves(const char *activator, const char *weftd, reply_t *r)
{
    daemon_t d;
    CHECK(sa_start(&d, activator, weftd, NULL));
    CHECK(notify_wait(&d, "READY=1", TIMEOUT_MS));

    CHECK(send_simple(&d, WF_OP_HELLO, 1) && recv_reply(&d, TIMEOUT_MS, r));
    CHECK(r->rep.status == WF_OK && r->rep.id == 1 && r->rep.op == WF_OP_HELLO);
    CHECK(r->rep.result.hello.protocol == WF_PROTOCOL_VERSION);
    CHECK(r->rep.result.hello.devices == 1);
    reply_clear(r);

    static const attn_case_t c = { "f32 small", WF_DTYPE_F32, 1, 9, 13, 2, 2,
                                   16, true, true, false, 0, 0, 1, 1, false };
    attn_job_t j;
    attn_job_make(&c, &j, 42);
    CHECK(attn_send(&d, &c, &j, 2));
    CHECK(recv_reply(&d, TIMEOUT_MS, r));
    CHECK(r->rep.id == 2 && r->rep.op == WF_OP_ATTENTION);
    attn_check(&c, &j, r);
    reply_clear(r);
    attn_job_free(&j);

    CHECK(kill(d.pid, SIGTERM) == 0);
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(d.reaped && WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 0);
    /* the socket file belongs to whoever activated us */
    struct stat st;
    CHECK(stat(d.sock_path, &st) == 0 && S_ISSOCK(st.st_mode));
    char unused[160];
    snprintf(unused, sizeof unused, "/tmp/weft-sa-unused-%d.sock", (int)getpid());
    CHECK(access(unused, F_OK) != 0);
    daemon_close(&d);
    unlink(d.sock_path);
}

/* Two sockets: weftd serves one, so it refuses to start (exit 1). */
static void test_two_sockets(const char *activator, const char *weftd)
{
    char extra[108];
    snprintf(extra, sizeof extra, "/tmp/weft-sa-extra-%d.sock", (int)getpid());
    unlink(extra);
    daemon_t d;
    CHECK(sa_start(&d, activator, weftd, extra));
    CHECK(daemon_wait_exit(&d, TIMEOUT_MS));
    CHECK(d.reaped && WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 1);
    daemon_close(&d);
    unlink(d.sock_path);
    unlink(extra);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    char activator[4200];
    if (!find_activator(activator, sizeof activator)) {
        printf("systemd-socket-activate not found: skipped\n");
        return 77;
    }
    static reply_t r;
    printf("socket activation: hello, attention, SIGTERM\n");
    test_serves(activator, argv[1], &r);
    printf("socket activation: two sockets refused\n");
    test_two_sockets(activator, argv[1]);
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("socket activation: all checks passed\n");
    return 0;
}
