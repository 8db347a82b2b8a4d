/* privileges.c — who may reach weftd's local socket, and what a weftd
 * started as root keeps: the ipc:// socket file's mode and group
 * (socket_mode, socket_group) and the switch to `user` once every socket
 * is bound and every privileged file is open.
 *
 * The socket file is created by zmq_bind: the umask is narrowed around the
 * bind, so the file is never wider than socket_mode (and has no group
 * bits until it carries socket_group), then chown and chmod give it its
 * final owner, group and mode. A socket systemd passed (weftd.socket) is
 * systemd's: its SocketMode= / SocketGroup= decide, nothing here touches
 * it. An abstract socket (ipc://@name) has no file and no permissions.
 *
 * Dropping privileges: supplementary groups, then the group, then the
 * user (real, effective and saved), then a check that root cannot be had
 * back. glibc applies set*id and setgroups to every thread of the process
 * (its setxid broadcast), so the workers, ZeroMQ's I/O thread and the
 * libraries' pools change too (tests/e2e/test_privileges.c checks each task).
 * The kernel then marks the process non-dumpable: no core dumps, and
 * other processes of `user` cannot ptrace it (the CURVE secret key is in
 * its memory).
 *
 * Then what could give privileges back through an execve: the capability
 * bounding set emptied (while CAP_SETPCAP is still held) and
 * no_new_privs set. Both are per-thread in Linux and inherited by the
 * threads started later: they hold for the main thread and every thread
 * started after the drop; threads started before keep theirs, and none of
 * weftd's threads ever exec.
 */
#include "server_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>
#include <sys/prctl.h>

/* getpwnam_r / getgrnam_r buffers grow up to this (a group with many
 * members has a long entry). */
#define NSS_BUF_MAX (1u << 20)

/* Look `name` up as a user (group false: uid and primary gid) or a group
 * (group true: gid only, uid untouched), *found false when there is no
 * such entry; WF_E_INTERNAL (why in err) when the lookup failed. The
 * buffer grows on ERANGE up to NSS_BUF_MAX. */
static wf_status_t nss_lookup(bool group, const char *name, bool *found,
                              uid_t *uid, gid_t *gid, char *err, size_t err_len)
{
    size_t len = 4096;
    for (;;) {
        char *buf = malloc(len);
        if (!buf) {
            snprintf(err, err_len, "out of memory");
            return WF_E_INTERNAL;
        }
        int rc;
        bool hit;
        if (group) {
            struct group gr, *res = NULL;
            rc = getgrnam_r(name, &gr, buf, len, &res);
            hit = rc == 0 && res;
            if (hit)
                *gid = gr.gr_gid;
        } else {
            struct passwd pw, *res = NULL;
            rc = getpwnam_r(name, &pw, buf, len, &res);
            hit = rc == 0 && res;
            if (hit) {
                *uid = pw.pw_uid;
                *gid = pw.pw_gid;
            }
        }
        free(buf);
        if (rc == ERANGE && len < NSS_BUF_MAX) {
            len *= 2;
            continue;
        }
        if (rc != 0) {
            snprintf(err, err_len, "%s lookup failed: %s",
                     group ? "group" : "user", strerror(rc));
            return WF_E_INTERNAL;
        }
        *found = hit;
        return WF_OK;
    }
}

static wf_status_t find_user(const char *name, bool *found, uid_t *uid,
                             gid_t *gid, char *err, size_t err_len)
{
    return nss_lookup(false, name, found, uid, gid, err, err_len);
}

static wf_status_t find_group(const char *name, bool *found, gid_t *gid,
                              char *err, size_t err_len)
{
    uid_t unused;
    return nss_lookup(true, name, found, &unused, gid, err, err_len);
}

/* Whether srv_drop_privileges will switch users: started as root with
 * `user` set to a user other than root. Its uid and gid when so. */
static bool will_drop(const wf_server_t *srv, uid_t *uid, gid_t *gid)
{
    char err[128];
    bool found = false;
    return srv->settings.user[0] && geteuid() == 0 &&
           find_user(srv->settings.user, &found, uid, gid, err, sizeof err) ==
               WF_OK && found && *uid != 0;
}

/* Whether the bound endpoint is a socket file of ours (ipc://PATH, bound
 * by zmq_bind, not systemd's). */
static bool own_socket_file(const wf_server_t *srv)
{
    return srv->bound && !srv->activated &&
           strncmp(srv->endpoint, "ipc://", 6) == 0 && srv->endpoint[6] != '@';
}

mode_t srv_socket_umask(const wf_server_t *srv)
{
    /* The file is created 0777 & ~umask. Group bits come only with the
     * group: until the chown the file has the daemon's group. */
    mode_t mask = ~(mode_t)srv->settings.socket_mode & 0777;
    if (srv->settings.socket_group[0])
        mask |= 0070;
    return umask(mask);
}

wf_status_t srv_socket_perms(wf_server_t *srv, mode_t umask_before)
{
    umask(umask_before);
    const wf_settings_t *s = &srv->settings;
    if (!srv->bound || strncmp(srv->endpoint, "ipc://", 6) != 0)
        return WF_OK;
    if (srv->activated) {
        wf_log(srv->log, WF_LOG_INFO, "ipc socket %s is systemd's: its mode and "
               "group come from weftd.socket (SocketMode=, SocketGroup=), not "
               "from socket_mode / socket_group", srv->endpoint + 6);
        return WF_OK;
    }
    if (!own_socket_file(srv)) {
        wf_log(srv->log, WF_LOG_NOTICE, "ipc socket %s is abstract: it has no "
               "file, so no mode or group; any local process of this network "
               "namespace may connect", srv->endpoint);
        return WF_OK;
    }
    const char *path = srv->endpoint + 6;
    char err[128];
    uid_t uid = (uid_t)-1, user_uid;
    gid_t gid = (gid_t)-1, user_gid;
    /* Dropping to `user`: the file is that user's, as if it had bound it
     * (and it can remove it at exit, in a sticky directory too). */
    if (will_drop(srv, &user_uid, &user_gid)) {
        uid = user_uid;
        gid = user_gid;
    }
    if (s->socket_group[0]) {
        bool found = false;
        if (find_group(s->socket_group, &found, &gid, err, sizeof err) != WF_OK) {
            wf_log(srv->log, WF_LOG_ERR, "socket_group = %s: %s", s->socket_group,
                   err);
            return WF_E_INTERNAL;
        }
        if (!found) {
            wf_log(srv->log, WF_LOG_ERR, "socket_group = %s: no such group",
                   s->socket_group);
            return WF_E_BAD_ARGUMENT;
        }
    }
    struct stat sb;
    errno = 0;
    if (lstat(path, &sb) != 0 || !S_ISSOCK(sb.st_mode)) {
        wf_log(srv->log, WF_LOG_ERR, "ipc socket %s: %s", path,
               errno ? strerror(errno) : "not a socket after the bind");
        return WF_E_INTERNAL;
    }
    if ((uid != (uid_t)-1 || gid != (gid_t)-1) &&
        fchownat(AT_FDCWD, path, uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "socket_group = %s: cannot give %s to "
               "gid %ld: %s (weftd must run as root or be a member of the "
               "group)", s->socket_group[0] ? s->socket_group : "\"\"", path,
               (long)gid, strerror(errno));
        return WF_E_INTERNAL;
    }
    if (fchmodat(AT_FDCWD, path, (mode_t)s->socket_mode, AT_SYMLINK_NOFOLLOW) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "socket_mode = %04o: chmod %s: %s",
               (unsigned)s->socket_mode, path, strerror(errno));
        return WF_E_INTERNAL;
    }
    if (lstat(path, &sb) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "ipc socket %s: %s", path, strerror(errno));
        return WF_E_INTERNAL;
    }
    struct group gr, *res = NULL;
    char gbuf[1024];
    const char *gname = getgrgid_r(sb.st_gid, &gr, gbuf, sizeof gbuf, &res) == 0 &&
                        res ? gr.gr_name : "?";
    wf_log(srv->log, WF_LOG_INFO, "ipc socket %s: mode %04o, owner uid %ld, "
           "group %s (gid %ld)", path, (unsigned)(sb.st_mode & 07777),
           (long)sb.st_uid, gname, (long)sb.st_gid);
    return WF_OK;
}

/* No capability left in the permitted set (the kernel clears it on the
 * switch from uid 0, unless securebits say otherwise). */
static bool no_capabilities(void)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &hdr, data) != 0)
        return false;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        if (data[i].permitted || data[i].effective)
            return false;
    return true;
}

wf_status_t srv_drop_privileges(wf_server_t *srv)
{
    const char *name = srv->settings.user;
    if (!name[0])
        return WF_OK;
    char err[128];
    uid_t uid;
    gid_t gid;
    bool found = false;
    if (find_user(name, &found, &uid, &gid, err, sizeof err) != WF_OK) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: %s", name, err);
        return WF_E_INTERNAL;
    }
    if (!found) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: no such user", name);
        return WF_E_BAD_ARGUMENT;
    }
    uid_t euid = geteuid();
    if (euid != 0) {
        if (euid == uid) {
            wf_log(srv->log, WF_LOG_NOTICE, "user = %s: already running as %s "
                   "(uid %ld), nothing to drop", name, name, (long)uid);
            return WF_OK;
        }
        wf_log(srv->log, WF_LOG_ERR, "user = %s: weftd runs as uid %ld, not "
               "root, and cannot switch to %s (uid %ld); start it as root or as "
               "%s, or leave user empty", name, (long)euid, name, (long)uid, name);
        return WF_E_BAD_ARGUMENT;
    }
    if (uid == 0) {
        wf_log(srv->log, WF_LOG_WARNING, "user = %s: uid 0, weftd keeps root's "
               "privileges", name);
        return WF_OK;
    }
    /* Groups before the user: once the uid is not 0, they cannot change. */
    if (initgroups(name, gid) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: initgroups: %s", name,
               strerror(errno));
        return WF_E_INTERNAL;
    }
    /* the bounding set, while CAP_SETPCAP is held (EINVAL: a capability
     * this kernel does not have, past its last one) */
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
            wf_log(srv->log, WF_LOG_ERR, "user = %s: dropping capability %d from the "
                   "bounding set: %s", name, cap, strerror(errno));
            return WF_E_INTERNAL;
        }
    if (setresgid(gid, gid, gid) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: setresgid(%ld): %s", name,
               (long)gid, strerror(errno));
        return WF_E_INTERNAL;
    }
    if (setresuid(uid, uid, uid) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: setresuid(%ld): %s", name,
               (long)uid, strerror(errno));
        return WF_E_INTERNAL;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: no_new_privs: %s", name, strerror(errno));
        return WF_E_INTERNAL;
    }
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    bool dropped = prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1 &&
                   prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0 &&
                   setuid(0) != 0 && setgid(0) != 0 &&
                   getresuid(&ru, &eu, &su) == 0 && ru == uid && eu == uid &&
                   su == uid && getresgid(&rg, &eg, &sg) == 0 && rg == gid &&
                   eg == gid && sg == gid && no_capabilities();
    if (!dropped) {
        wf_log(srv->log, WF_LOG_ERR, "user = %s: the switch did not hold (root "
               "can be regained or capabilities remain); stopping", name);
        return WF_E_INTERNAL;
    }
    wf_log(srv->log, WF_LOG_INFO, "dropped privileges to %s (uid %ld, gid %ld)",
           name, (long)uid, (long)gid);
    return WF_OK;
}
