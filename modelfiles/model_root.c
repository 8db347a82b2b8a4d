/* model_root.c — opening files beneath the model root (see model_root.h).
 *
 * Two resolvers with one rule ("never leave the root"): the kernel's
 * openat2(RESOLVE_BENEATH) and a hand walk for kernels without it. Both
 * are used twice per file: once O_PATH to learn what the path names
 * without opening it, once O_RDONLY | O_NONBLOCK to read it; the two
 * must name the same inode (a swap in between is refused).
 */
#include "model_root.h"
#include "errf.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Symlinks followed in one resolution, as the kernel's MAXSYMLINKS. */
#define WALK_MAX_LINKS 40
/* Directory depth of one resolution. */
#define WALK_MAX_DEPTH 256
/* A path escaped for a message: long enough for most paths, truncated
 * with "..." beyond. */
#define WF_MODEL_QPATH_MAX 320

wf_status_t wf_model_path_check(const char *rel, char *err, size_t err_len)
{
    if (rel == NULL || rel[0] == '\0') {
        wf_errf(err, err_len, "model path is empty");
        return WF_E_BAD_FIELD;
    }
    size_t n = strnlen(rel, WF_MODEL_PATH_MAX + 1);
    if (n > WF_MODEL_PATH_MAX) {
        wf_errf(err, err_len, "model path is longer than %d bytes",
                WF_MODEL_PATH_MAX);
        return WF_E_BAD_FIELD;
    }
    char q[WF_MODEL_QPATH_MAX];
    if (rel[0] == '/') {
        wf_errf(err, err_len,
                "model path '%s' is absolute: paths are relative to the model root",
                wf_escape(q, sizeof q, rel, n, WF_ESC_ASCII));
        return WF_E_BAD_FIELD;
    }
    for (const char *p = rel; *p != '\0';) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 2 && p[0] == '.' && p[1] == '.') {
            wf_errf(err, err_len,
                    "model path '%s' has a '..' component: refused",
                    wf_escape(q, sizeof q, rel, n, WF_ESC_ASCII));
            return WF_E_BAD_FIELD;
        }
        p += len;
        while (*p == '/')
            p++;
    }
    return WF_OK;
}

wf_status_t wf_model_root_open(const char *path, int *ret_fd, char *err,
                               size_t err_len)
{
    if (path == NULL || path[0] == '\0') {
        wf_errf(err, err_len, "model root is not set");
        return WF_E_BAD_FIELD;
    }
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        char q[WF_MODEL_QPATH_MAX];
        wf_errf(err, err_len, "model root '%s': %s",
                wf_escape(q, sizeof q, path, strlen(path), WF_ESC_ASCII), strerror(e));
        return WF_E_BAD_FIELD;
    }
    *ret_fd = fd;
    return WF_OK;
}

/* ---- hand walk ---------------------------------------------------------- */

/* Resolve `rel` beneath root_fd component by component. Intermediate
 * components and symlinks are looked at with O_PATH | O_NOFOLLOW; the
 * final component is opened with `flags` | O_NOFOLLOW. Returns an fd or
 * -errno; -EXDEV means "leaves the root" (as openat2 reports it). */
static int walk_open(int root_fd, const char *rel, int flags)
{
    /* pending = the path still to resolve; symlink targets are spliced in
     * front of what remains. */
    char *pending = malloc(2 * (size_t)PATH_MAX + 2);
    char *tmp = malloc(2 * (size_t)PATH_MAX + 2);
    int stack[WALK_MAX_DEPTH]; /* stack[0] = root_fd (not owned) */
    int depth = 0, links = 0, rc = -EINVAL;
    if (pending == NULL || tmp == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    stack[0] = root_fd;
    if (strlen(rel) > PATH_MAX) {
        rc = -ENAMETOOLONG;
        goto out;
    }
    strcpy(pending, rel);

    for (;;) {
        char *p = pending;
        while (*p == '/')
            p++;
        if (*p == '\0') {
            /* the path named a directory (or was empty): open it */
            int fd = openat(stack[depth], ".", flags | O_NOFOLLOW);
            rc = fd < 0 ? -errno : fd;
            goto out;
        }
        char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        char comp[NAME_MAX + 1];
        if (len > NAME_MAX) {
            rc = -ENAMETOOLONG;
            goto out;
        }
        memcpy(comp, p, len);
        comp[len] = '\0';
        char *rest = p + len;
        while (*rest == '/')
            rest++;
        bool last = (*rest == '\0');
        memmove(pending, rest, strlen(rest) + 1);

        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) {
            if (depth == 0) {
                rc = -EXDEV;
                goto out;
            }
            close(stack[depth--]);
            continue;
        }

        int fd = openat(stack[depth], comp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            rc = -errno;
            goto out;
        }
        struct stat st;
        if (fstat(fd, &st) != 0) {
            rc = -errno;
            close(fd);
            goto out;
        }
        if (S_ISLNK(st.st_mode)) {
            if (++links > WALK_MAX_LINKS) {
                rc = -ELOOP;
                close(fd);
                goto out;
            }
            ssize_t n = readlinkat(fd, "", tmp, PATH_MAX);
            close(fd);
            if (n < 0) {
                rc = -errno;
                goto out;
            }
            if (n == 0 || n >= PATH_MAX) {
                rc = n == 0 ? -ENOENT : -ENAMETOOLONG;
                goto out;
            }
            tmp[n] = '\0';
            if (tmp[0] == '/') {   /* absolute target: outside by definition */
                rc = -EXDEV;
                goto out;
            }
            size_t rl = strlen(pending);
            if ((size_t)n + 1 + rl > 2 * (size_t)PATH_MAX) {
                rc = -ENAMETOOLONG;
                goto out;
            }
            tmp[n] = '/';
            memcpy(tmp + n + 1, pending, rl + 1);
            memcpy(pending, tmp, (size_t)n + 1 + rl + 1);
            continue;
        }
        if (last) {
            if ((flags & O_PATH) != 0) {
                rc = fd;
            } else {
                close(fd);
                int rfd = openat(stack[depth], comp, flags | O_NOFOLLOW);
                rc = rfd < 0 ? -errno : rfd;
            }
            goto out;
        }
        if (!S_ISDIR(st.st_mode)) {
            close(fd);
            rc = -ENOTDIR;
            goto out;
        }
        if (depth + 1 >= WALK_MAX_DEPTH) {
            close(fd);
            rc = -ENAMETOOLONG;
            goto out;
        }
        stack[++depth] = fd;
    }
out:
    while (depth > 0)
        close(stack[depth--]);
    free(pending);
    free(tmp);
    return rc;
}

/* ---- openat2 ------------------------------------------------------------ */

/* openat2 beneath root_fd; -errno on failure. */
static int beneath_open(int root_fd, const char *rel, int flags,
                        wf_resolve_mode_t mode)
{
    if (mode == WF_RESOLVE_AUTO) {
        struct open_how how;
        memset(&how, 0, sizeof how);
        how.flags = (uint64_t)(unsigned)flags;
        how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
        long fd = syscall(SYS_openat2, root_fd, rel, &how, sizeof how);
        if (fd >= 0)
            return (int)fd;
        int e = errno;
        if (e != ENOSYS && e != EPERM && e != E2BIG)
            return -e;
        /* no openat2 here (old kernel, seccomp): the walk does the same */
    }
    return walk_open(root_fd, rel, flags);
}

static const char *why_refused(int e)
{
    switch (e) {
    case EXDEV: return "resolves outside the model root (symlink or '..' escape): refused";
    case ELOOP: return "has too many levels of symlinks, or a /proc magic link: refused";
    case ENOENT: return "does not exist";
    case ENOTDIR: return "has a component that is not a directory";
    case EACCES: return "permission denied";
    case ENAMETOOLONG: return "is too long";
    default: return NULL;
    }
}

/* rel escaped for a message (control bytes, quotes and non-ASCII as \xNN):
 * a model path comes from a client and may hold anything. */
static const char *qpath(char *buf, size_t len, const char *rel)
{
    return wf_escape(buf, len, rel, strlen(rel), WF_ESC_ASCII);
}

/* What a regular file must also be to be read (see model_root.h): one link
 * only. NULL when fine, else the reason, formatted into buf. */
static const char *file_refused(const struct stat *st, char *buf, size_t len)
{
    if (st->st_nlink > 1) {
        snprintf(buf, len, "has %ju hard links: refused (a hard link can name a file "
                 "outside the model root; copy the file instead)",
                 (uintmax_t)st->st_nlink);
        return buf;
    }
    return NULL;
}

wf_status_t wf_model_open_file(int root_fd, const char *rel,
                               wf_resolve_mode_t mode, int *ret_fd,
                               uint64_t *ret_size, char *err, size_t err_len)
{
    wf_status_t s = wf_model_path_check(rel, err, err_len);
    if (s != WF_OK)
        return s;
    char q[WF_MODEL_QPATH_MAX], why_buf[160];

    int pfd = beneath_open(root_fd, rel, O_PATH | O_CLOEXEC, mode);
    if (pfd < 0) {
        const char *why = why_refused(-pfd);
        if (why != NULL) {
            wf_errf(err, err_len, "model file '%s' %s", qpath(q, sizeof q, rel), why);
            return WF_E_BAD_FIELD;
        }
        wf_errf(err, err_len, "model file '%s': %s", qpath(q, sizeof q, rel),
                strerror(-pfd));
        return WF_E_INTERNAL;
    }
    struct stat st;
    if (fstat(pfd, &st) != 0) {
        wf_errf(err, err_len, "model file '%s': fstat: %s", qpath(q, sizeof q, rel),
                strerror(errno));
        close(pfd);
        return WF_E_INTERNAL;
    }
    close(pfd);
    if (!S_ISREG(st.st_mode)) {
        const char *what = S_ISDIR(st.st_mode) ? "a directory"
                           : S_ISFIFO(st.st_mode) ? "a FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode) ? "a character device"
                           : S_ISBLK(st.st_mode) ? "a block device"
                           : "not a regular file";
        wf_errf(err, err_len, "model file '%s' is %s: only regular files are read",
                qpath(q, sizeof q, rel), what);
        return WF_E_BAD_FIELD;
    }
    const char *refused = file_refused(&st, why_buf, sizeof why_buf);
    if (refused != NULL) {
        wf_errf(err, err_len, "model file '%s' %s", qpath(q, sizeof q, rel), refused);
        return WF_E_BAD_FIELD;
    }

    /* O_NONBLOCK: should the path have become a FIFO since, open does not
     * hang; the inode check below then refuses it. */
    int fd = beneath_open(root_fd, rel, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                          mode);
    if (fd < 0) {
        const char *why = why_refused(-fd);
        wf_errf(err, err_len, "model file '%s' %s", qpath(q, sizeof q, rel),
                why != NULL ? why : strerror(-fd));
        return why != NULL ? WF_E_BAD_FIELD : WF_E_INTERNAL;
    }
    struct stat st2;
    if (fstat(fd, &st2) != 0 || st2.st_dev != st.st_dev || st2.st_ino != st.st_ino
        || !S_ISREG(st2.st_mode)) {
        wf_errf(err, err_len, "model file '%s' changed while being opened: refused",
                qpath(q, sizeof q, rel));
        close(fd);
        return WF_E_BAD_FIELD;
    }
    /* again on the descriptor that will be read: a link made between the
     * two opens counts too */
    refused = file_refused(&st2, why_buf, sizeof why_buf);
    if (refused != NULL) {
        wf_errf(err, err_len, "model file '%s' %s", qpath(q, sizeof q, rel), refused);
        close(fd);
        return WF_E_BAD_FIELD;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *ret_fd = fd;
    if (ret_size != NULL)
        *ret_size = (uint64_t)st2.st_size;
    return WF_OK;
}

bool wf_model_file_exists(int root_fd, const char *rel, wf_resolve_mode_t mode)
{
    if (wf_model_path_check(rel, NULL, 0) != WF_OK)
        return true;
    int fd = beneath_open(root_fd, rel, O_PATH | O_CLOEXEC, mode);
    if (fd >= 0) {
        close(fd);
        return true;
    }
    return fd != -ENOENT;
}

wf_status_t wf_model_read_file(int root_fd, const char *rel,
                               wf_resolve_mode_t mode, uint64_t max_bytes,
                               char **ret_buf, size_t *ret_len,
                               char *err, size_t err_len)
{
    int fd = -1;
    uint64_t size = 0;
    wf_status_t s = wf_model_open_file(root_fd, rel, mode, &fd, &size, err, err_len);
    if (s != WF_OK)
        return s;
    char q[WF_MODEL_QPATH_MAX];
    if (size > max_bytes || size >= SIZE_MAX) {
        wf_errf(err, err_len, "model file '%s' is %llu bytes, more than the %llu allowed",
                qpath(q, sizeof q, rel), (unsigned long long)size, (unsigned long long)max_bytes);
        close(fd);
        return WF_E_LIMIT;
    }
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL) {
        wf_errf(err, err_len, "model file '%s': out of memory for %llu bytes",
                qpath(q, sizeof q, rel),
                (unsigned long long)size);
        close(fd);
        return WF_E_NO_MEMORY;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, buf + got, (size_t)size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            wf_errf(err, err_len, "model file '%s': read: %s", qpath(q, sizeof q, rel),
                    n == 0 ? "the file shrank while being read" : strerror(errno));
            free(buf);
            close(fd);
            return WF_E_INTERNAL;
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *ret_buf = buf;
    if (ret_len != NULL)
        *ret_len = got;
    return WF_OK;
}
