/* test_privileges.c — end-to-end: the ipc:// socket file of a real weftd
 * (socket_mode, socket_group) and, when the test runs as root, the switch
 * to `user` after binding (daemon/server/privileges.c).
 *
 * Checks, on `weftd --devices cpu:2 --listen ipc:///tmp/...`:
 * - default: the file is a socket, mode 0660, our uid and gid, logged;
 *   hello works; SIGTERM: exit 0, file removed;
 * - WEFT_SOCKET_MODE=0600: mode 0600;
 * - socket_group = the primary group of `nobody` (root) or our own group
 *   (not root), socket_mode 0640: that gid, mode 0640;
 * - socket_group / user naming nothing: start-up error (exit 1) naming
 *   the setting;
 * - root only: user = nobody: every task in /proc/PID/task (main thread,
 *   workers, ZeroMQ's, the libraries') has nobody's uid and gid, real,
 *   effective, saved and fs; no supplementary group but nobody's; the
 *   socket file is nobody's; a client running as root still gets hello
 *   and an attention job answered (the workers compute as nobody);
 *   SIGTERM: exit 0, file removed; "dropped privileges to nobody" logged;
 * - user set, not root: started as nobody with user = nobody it runs
 *   (a notice); with user = root (another user) it refuses (exit 1).
 *   As root, the daemon is started as nobody for these; when nobody
 *   cannot execute the binary (a build tree under a private home), those
 *   two checks are skipped with a message.
 *
 * Usage: test_privileges PATH_TO_WEFTD. Every wait is an event wait with
 * a deadline (poll on the notify socket and on a pidfd, zmq_poll); the
 * daemons are started through rawd (support/spawn.h, as_user for the
 * switch to nobody).
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
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

static int counter;

/* A daemon started by start(): rawd's daemon_t (for notify_wait,
 * send_simple, recv_reply, daemon_wait_exit, daemon_close) and the file
 * its stderr goes to. */
typedef struct proc {
    daemon_t d;
    char log_path[108];
} proc_t;

/* Start `weftd --listen ipc:///tmp/... --devices cpu:2 args...` (rawd's
 * daemon_exec) with NOTIFY_SOCKET set, `env` (K=V or NULL) in its
 * environment and stderr to a file; as user `as` (uid and gid; -1: as we
 * are) when not -1. The notify socket is made writable for everyone so
 * that a daemon running as nobody can reach it. */
static bool start(proc_t *p, const char *weftd, const char *const *args,
                  const char *env, uid_t as_uid, gid_t as_gid)
{
    memset(p, 0, sizeof *p);
    daemon_t *d = &p->d;
    /* a daemon that switches to `user` itself sends READY=1 as that user */
    if (!daemon_open(d) || chmod(d->notify_path, 0666) != 0)
        return false;
    snprintf(p->log_path, sizeof p->log_path, "/tmp/weft-priv-%d-%d.log",
             (int)getpid(), counter++);
    const char *argv[32];
    int argc = 0;
    argv[argc++] = weftd;
    argv[argc++] = "--listen";
    argv[argc++] = d->endpoint;
    argv[argc++] = "--devices";
    argv[argc++] = "cpu:2";
    for (int i = 0; args[i] && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    const char *const envs[] = { env, NULL };
    spawn_opts_t o = { .env = env ? envs : NULL, .log_path = p->log_path,
                       .as_user = as_uid != (uid_t)-1, .uid = as_uid, .gid = as_gid };
    return daemon_exec(d, argv, &o);
}

/* Whether the daemon's stderr so far holds `text`. */
static bool log_has(const proc_t *p, const char *text)
{
    FILE *f = fopen(p->log_path, "re");
    if (!f)
        return false;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

static void finish(proc_t *p)
{
    daemon_close(&p->d);
    unlink(p->d.sock_path);
    unlink(p->log_path);
}

/* The daemon exits with `code` on its own (a start-up error); its log
 * names `text`. */
static void expect_refusal(proc_t *p, int code, const char *text)
{
    CHECK(daemon_wait_exit(&p->d, TIMEOUT_MS));
    CHECK(p->d.reaped && WIFEXITED(p->d.exit_status) &&
          WEXITSTATUS(p->d.exit_status) == code);
    if (!log_has(p, text)) {
        fprintf(stderr, "log of a refused start lacks \"%s\"\n", text);
        failed++;
    }
}

/* hello answered: the socket file lets us connect. */
static void expect_hello(proc_t *p, reply_t *r, uint64_t id)
{
    CHECK(send_simple(&p->d, WF_OP_HELLO, id) && recv_reply(&p->d, TIMEOUT_MS, r));
    CHECK(r->rep.status == WF_OK && r->rep.id == id && r->rep.op == WF_OP_HELLO);
    CHECK(r->rep.result.hello.devices == 2);
    reply_clear(r);
}

/* SIGTERM: exit 0, the socket file removed. */
static void expect_clean_stop(proc_t *p)
{
    CHECK(kill(p->d.pid, SIGTERM) == 0);
    CHECK(daemon_wait_exit(&p->d, TIMEOUT_MS));
    CHECK(p->d.reaped && WIFEXITED(p->d.exit_status) &&
          WEXITSTATUS(p->d.exit_status) == 0);
    CHECK(access(p->d.sock_path, F_OK) != 0);
}

/* The socket file: a socket with mode `mode`, owner uid, group gid. */
static void expect_socket(const proc_t *p, mode_t mode, uid_t uid, gid_t gid)
{
    struct stat st;
    CHECK(lstat(p->d.sock_path, &st) == 0);
    CHECK(S_ISSOCK(st.st_mode));
    if ((st.st_mode & 07777) != mode || st.st_uid != uid || st.st_gid != gid) {
        fprintf(stderr, "%s: mode %04o uid %ld gid %ld, want %04o %ld %ld\n",
                p->d.sock_path, (unsigned)(st.st_mode & 07777), (long)st.st_uid,
                (long)st.st_gid, (unsigned)mode, (long)uid, (long)gid);
        failed++;
    }
}

static void test_default_mode(const char *weftd, reply_t *r)
{
    const char *args[] = { NULL };
    proc_t p;
    CHECK(start(&p, weftd, args, NULL, (uid_t)-1, (gid_t)-1));
    CHECK(notify_wait(&p.d, "READY=1", TIMEOUT_MS));
    expect_socket(&p, 0660, geteuid(), getegid());
    CHECK(log_has(&p, ": mode 0660, owner uid "));
    expect_hello(&p, r, 1);
    expect_clean_stop(&p);
    finish(&p);
}

static void test_mode_0600(const char *weftd, reply_t *r)
{
    const char *args[] = { NULL };
    proc_t p;
    CHECK(start(&p, weftd, args, "WEFT_SOCKET_MODE=0600", (uid_t)-1, (gid_t)-1));
    CHECK(notify_wait(&p.d, "READY=1", TIMEOUT_MS));
    expect_socket(&p, 0600, geteuid(), getegid());
    expect_hello(&p, r, 1);
    expect_clean_stop(&p);
    finish(&p);
}

static void test_group(const char *weftd, const char *group, gid_t gid, reply_t *r)
{
    const char *args[] = { "--socket-group", group, "--socket-mode", "0640", NULL };
    proc_t p;
    CHECK(start(&p, weftd, args, NULL, (uid_t)-1, (gid_t)-1));
    CHECK(notify_wait(&p.d, "READY=1", TIMEOUT_MS));
    expect_socket(&p, 0640, geteuid(), gid);
    char want[128];
    snprintf(want, sizeof want, "mode 0640, owner uid %ld, group %s (gid %ld)",
             (long)geteuid(), group, (long)gid);
    CHECK(log_has(&p, want));
    expect_hello(&p, r, 1);
    expect_clean_stop(&p);
    finish(&p);
}

static void test_unknown_names(const char *weftd)
{
    const char *args1[] = { "--socket-group", "weft-no-such-group", NULL };
    proc_t p;
    CHECK(start(&p, weftd, args1, NULL, (uid_t)-1, (gid_t)-1));
    expect_refusal(&p, 1, "socket_group = weft-no-such-group: no such group");
    finish(&p);
    const char *args2[] = { "--user", "weft-no-such-user", NULL };
    CHECK(start(&p, weftd, args2, NULL, (uid_t)-1, (gid_t)-1));
    expect_refusal(&p, 1, "user = weft-no-such-user: no such user");
    finish(&p);
}

/* Every task of `pid` has uid / gid (real, effective, saved, fs) and no
 * supplementary group but gid. The number of tasks in *n. */
static bool tasks_run_as(pid_t pid, uid_t uid, gid_t gid, int *n)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *dp = opendir(dir);
    if (!dp)
        return false;
    char want_uid[96], want_gid[96], want_groups[64];
    snprintf(want_uid, sizeof want_uid, "Uid:\t%ld\t%ld\t%ld\t%ld\n", (long)uid,
             (long)uid, (long)uid, (long)uid);
    snprintf(want_gid, sizeof want_gid, "Gid:\t%ld\t%ld\t%ld\t%ld\n", (long)gid,
             (long)gid, (long)gid, (long)gid);
    snprintf(want_groups, sizeof want_groups, "Groups:\t%ld", (long)gid);
    bool ok = true;
    *n = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64 + sizeof e->d_name + 8];
        snprintf(path, sizeof path, "%s/%s/status", dir, e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;           /* the task ended meanwhile */
        char line[256];
        bool uid_ok = false, gid_ok = false, groups_ok = false;
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "Uid:", 4) == 0)
                uid_ok = strcmp(line, want_uid) == 0;
            else if (strncmp(line, "Gid:", 4) == 0)
                gid_ok = strcmp(line, want_gid) == 0;
            else if (strncmp(line, "Groups:", 7) == 0)
                /* "Groups:\t65534 \n" or "Groups:\t65534\n" */
                groups_ok = strncmp(line, want_groups, strlen(want_groups)) == 0 &&
                            strspn(line + strlen(want_groups), " \n") ==
                                strlen(line + strlen(want_groups));
        }
        fclose(f);
        (*n)++;
        if (!uid_ok || !gid_ok || !groups_ok) {
            fprintf(stderr, "task %s of %d: uid %s, gid %s, groups %s\n",
                    e->d_name, (int)pid, uid_ok ? "ok" : "WRONG",
                    gid_ok ? "ok" : "WRONG", groups_ok ? "ok" : "WRONG");
            ok = false;
        }
    }
    closedir(dp);
    return ok && *n > 0;
}

static void test_drop(const char *weftd, const struct passwd *nobody, reply_t *r)
{
    const char *args[] = { "--user", nobody->pw_name, NULL };
    proc_t p;
    CHECK(start(&p, weftd, args, NULL, (uid_t)-1, (gid_t)-1));
    CHECK(notify_wait(&p.d, "READY=1", TIMEOUT_MS));
    int tasks = 0;
    bool switched = tasks_run_as(p.d.pid, nobody->pw_uid, nobody->pw_gid, &tasks);
    CHECK(switched);
    /* the main thread, two workers, ZeroMQ's I/O thread at least */
    if (tasks < 4) {
        fprintf(stderr, "only %d tasks: the workers were not checked\n", tasks);
        failed++;
    }
    if (switched)
        printf("  user = %s: %d tasks, each uid %ld gid %ld\n", nobody->pw_name,
               tasks, (long)nobody->pw_uid, (long)nobody->pw_gid);
    /* the main thread: no new privileges, an empty bounding set */
    {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/%d/status", (int)p.d.pid);
        FILE *f = fopen(path, "re");
        bool nnp = false, bnd = false;
        while (f && fgets(line, sizeof line, f)) {
            nnp |= strcmp(line, "NoNewPrivs:\t1\n") == 0;
            bnd |= strcmp(line, "CapBnd:\t0000000000000000\n") == 0;
        }
        if (f)
            fclose(f);
        CHECK(nnp);
        CHECK(bnd);
        printf("  user = %s: NoNewPrivs %s, CapBnd %s\n", nobody->pw_name,
               nnp ? "1" : "not set", bnd ? "empty" : "NOT empty");
    }
    /* the file is nobody's, as if it had bound it; root still connects */
    expect_socket(&p, 0660, nobody->pw_uid, nobody->pw_gid);
    char want[128];
    snprintf(want, sizeof want, "dropped privileges to %s (uid %ld, gid %ld)",
             nobody->pw_name, (long)nobody->pw_uid, (long)nobody->pw_gid);
    CHECK(log_has(&p, want));
    expect_hello(&p, r, 1);
    /* the workers compute as nobody */
    static const attn_case_t c = { "f32 small", WF_DTYPE_F32, 1, 9, 13, 2, 2,
                                   16, true, true, false, 0, 0, 2, 2, false };
    attn_job_t j;
    attn_job_make(&c, &j, 7);
    CHECK(attn_send(&p.d, &c, &j, 2));
    CHECK(recv_reply(&p.d, TIMEOUT_MS, r));
    CHECK(r->rep.id == 2 && r->rep.op == WF_OP_ATTENTION);
    attn_check(&c, &j, r);
    reply_clear(r);
    attn_job_free(&j);
    /* still nobody after the job (no task was started as root since) */
    CHECK(tasks_run_as(p.d.pid, nobody->pw_uid, nobody->pw_gid, &tasks));
    expect_clean_stop(&p);
    finish(&p);
}

/* `user` set and weftd not root: as nobody with user = nobody it runs,
 * with user = other it refuses. `as` NULL: as we are. False when weftd
 * could not be executed as nobody (skipped). */
static bool test_not_root(const char *weftd, const struct passwd *as,
                          const char *other, reply_t *r)
{
    uid_t uid = as ? as->pw_uid : (uid_t)-1;
    gid_t gid = as ? as->pw_gid : (gid_t)-1;
    proc_t p;
    const char *args1[] = { "--user", other, NULL };
    CHECK(start(&p, weftd, args1, NULL, uid, gid));
    CHECK(daemon_wait_exit(&p.d, TIMEOUT_MS));
    if (as && p.d.reaped && WIFEXITED(p.d.exit_status) &&
        (WEXITSTATUS(p.d.exit_status) == SPAWN_EXIT_EXEC ||
         WEXITSTATUS(p.d.exit_status) == SPAWN_EXIT_SETUP)) {
        printf("  %s cannot execute %s: not-root checks skipped\n", as->pw_name,
               weftd);
        finish(&p);
        return false;
    }
    CHECK(p.d.reaped && WIFEXITED(p.d.exit_status) &&
          WEXITSTATUS(p.d.exit_status) == 1);
    CHECK(log_has(&p, "not root, and cannot switch to"));
    finish(&p);
    if (!as)
        return true;
    const char *args2[] = { "--user", as->pw_name, NULL };
    CHECK(start(&p, weftd, args2, NULL, uid, gid));
    CHECK(notify_wait(&p.d, "READY=1", TIMEOUT_MS));
    CHECK(log_has(&p, "already running as"));
    expect_socket(&p, 0660, uid, gid);
    expect_hello(&p, r, 1);
    expect_clean_stop(&p);
    finish(&p);
    return true;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    const char *weftd = argv[1];
    static reply_t r;
    bool root = geteuid() == 0;
    static struct passwd nobody;
    static char nobody_name[64];
    const struct passwd *pw = getpwnam("nobody");
    if (pw) {
        nobody = *pw;
        snprintf(nobody_name, sizeof nobody_name, "%s", pw->pw_name);
        nobody.pw_name = nobody_name;
    }

    printf("socket file: default mode 0660\n");
    test_default_mode(weftd, &r);
    printf("socket file: socket_mode 0600\n");
    test_mode_0600(weftd, &r);

    /* root may give the file any group; others only one of theirs */
    gid_t gid = root && pw ? nobody.pw_gid : getegid();
    const struct group *gr = getgrgid(gid);
    if (gr) {
        char group[64];
        snprintf(group, sizeof group, "%s", gr->gr_name);
        printf("socket file: socket_group %s, socket_mode 0640\n", group);
        test_group(weftd, group, gid, &r);
    } else {
        printf("socket file: gid %ld has no name: socket_group not checked\n",
               (long)gid);
    }
    printf("unknown socket_group / user refused\n");
    test_unknown_names(weftd);

    bool skipped = false;
    if (!root) {
        printf("user set, not root: refused\n");
        test_not_root(weftd, NULL, "root", &r);
        printf("not root: the switch to user = nobody skipped\n");
        skipped = true;
    } else if (!pw) {
        printf("no user nobody: the switch skipped\n");
        skipped = true;
    } else {
        printf("user = %s: every task switched, root clients still served\n",
               nobody.pw_name);
        test_drop(weftd, &nobody, &r);
        printf("user set, started as %s: runs when it is that user, refused "
               "otherwise\n", nobody.pw_name);
        if (!test_not_root(weftd, &nobody, "root", &r))
            skipped = true;
    }
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("privileges: all checks passed%s\n", skipped ? " (some skipped)" : "");
    /* the root-only checks are the point of this test: skip when they
     * could not run */
    return root && !skipped ? 0 : 77;
}
