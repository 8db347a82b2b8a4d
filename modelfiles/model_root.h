/* model_root.h — opening files beneath the allow-listed model root.
 *
 * Every file of a model (config.json, safetensors, index.json) is named by
 * a path relative to the model root, a directory the daemon opened once.
 * Opening resolves that path with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS), or, where the kernel lacks openat2 (ENOSYS, or
 * EPERM from a seccomp filter), with a component-by-component O_NOFOLLOW
 * walk that follows symlinks by hand under the same rule. Either way:
 *   - an empty or absolute path, or one with a ".." component, is refused
 *     before anything is opened (even a ".." that would stay inside);
 *   - a symlink is followed only while its target stays beneath the root
 *     (a relative target inside the root is fine; an absolute target, or one
 *     whose ".." climbs above the root, is refused); /proc magic links are
 *     refused;
 *   - only regular files are opened for reading: the path is first opened
 *     O_PATH and fstat'ed, so a FIFO, socket or device is refused without
 *     ever being opened (opening a FIFO would block, a device could act);
 *   - a regular file with more than one hard link (st_nlink > 1) is
 *     refused, checked on the O_PATH descriptor and again on the one that
 *     is read: a hard link inside the root may name a file outside it
 *     (whoever can write into the root and read nothing else could link
 *     /etc/shadow in and have the daemon read it), and nothing tells the
 *     "inside" link from the other. Tools that deduplicate with hard links
 *     need a copy. Symlinks are fine: they are resolved under the rule
 *     above.
 *
 * Owners are not checked: a file owned by another user than the daemon's
 * is read when the daemon may read it. Model roots are commonly owned by
 * an administrator's account (or a shared, read-only download cache)
 * distinct from the daemon's user, and a file's owner does not say who
 * linked it in (the link count does); who may write into the root is the
 * operator's choice of directory permissions, and a writer there can put
 * any model in anyway. What the checks above guarantee is that a file
 * read is one that lives beneath the root.
 *
 * Nothing here logs; errors come back as a status and a message naming the
 * path, escaped (control bytes, quotes and non-ASCII bytes as \xNN: a model
 * path comes from a client). Does not read or parse anything but the
 * small-file helper.
 */
#ifndef WF_MODEL_ROOT_H
#define WF_MODEL_ROOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Longest relative path accepted, bytes without the NUL (PATH_MAX - 1). */
#define WF_MODEL_PATH_MAX 4095

/* How relative paths are resolved. */
typedef enum wf_resolve_mode {
    WF_RESOLVE_AUTO = 0,  /* openat2, else the walk when the kernel refuses it */
    WF_RESOLVE_WALK = 1   /* always the hand walk (tests of the fallback) */
} wf_resolve_mode_t;

/* Open the model root directory `path` (absolute or relative to the
 * working directory; symlinks followed: it is the operator's setting, not
 * user input). On success *ret_fd is an O_PATH | O_DIRECTORY descriptor;
 * caller owns it (close(2)). */
wf_status_t wf_model_root_open(const char *path, int *ret_fd,
                               char *err, size_t err_len);

/* Check that `rel` is a path this module would try to open: non-empty, at
 * most WF_MODEL_PATH_MAX bytes, relative, no ".." component. Pure string
 * check (used by request validation before touching the disk). */
wf_status_t wf_model_path_check(const char *rel, char *err, size_t err_len);

/* Open the regular file `rel` beneath the directory `root_fd` for reading
 * (O_RDONLY | O_CLOEXEC). On success *ret_fd is set (caller owns it) and,
 * when ret_size is not NULL, *ret_size is the file's size.
 * Errors: WF_E_BAD_FIELD (path refused, missing, a symlink leaving the
 * root, not a regular file, more than one hard link ("model file 'REL'
 * has 2 hard links: refused ..."); the message says which and names `rel`),
 * WF_E_INTERNAL (other I/O errors, with the errno text). */
wf_status_t wf_model_open_file(int root_fd, const char *rel,
                               wf_resolve_mode_t mode, int *ret_fd,
                               uint64_t *ret_size, char *err, size_t err_len);

/* True unless `rel` (checked as above) surely does not exist beneath
 * root_fd (ENOENT): lets a caller choose between two layouts; any other
 * problem answers true so that the real open reports it. */
bool wf_model_file_exists(int root_fd, const char *rel, wf_resolve_mode_t mode);

/* Read the whole regular file `rel` beneath root_fd into a new buffer,
 * NUL-terminated (not counted in *ret_len). Files larger than max_bytes
 * are refused with WF_E_LIMIT before reading; a file that shrinks while
 * read is WF_E_INTERNAL ("the file shrank while being read"). Caller owns
 * *ret_buf (free). For config.json and index.json. */
wf_status_t wf_model_read_file(int root_fd, const char *rel,
                               wf_resolve_mode_t mode, uint64_t max_bytes,
                               char **ret_buf, size_t *ret_len,
                               char *err, size_t err_len);

#endif /* WF_MODEL_ROOT_H */
