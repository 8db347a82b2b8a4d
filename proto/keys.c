/* keys.c — CURVE key files and allow-lists (see keys.h). */
#include "keys.h"

#include "errf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

bool wf_key_z85_valid(const char *s)
{
    if (strnlen(s, WF_KEY_Z85_LEN + 1) != WF_KEY_Z85_LEN)
        return false;
    uint8_t bin[32];
    return zmq_z85_decode(bin, s) != NULL;
}

const char *wf_role_name(wf_role_t role)
{
    switch (role) {
    case WF_ROLE_SUBMIT: return "submit";
    case WF_ROLE_ADMIN: return "admin";
    case WF_ROLE_NONE: break;
    }
    return "none";
}

static bool name_valid(const char *s, size_t n)
{
    if (n == 0 || n >= WF_KEY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '.' && c != '_' && c != '-')
            return false;
    }
    return true;
}

/* The next line of text[*pos..len) without its comment and surrounding
 * blanks: [*ret_b, *ret_e). False at the end. A NUL byte is an error the
 * caller sees as a bad field (it is kept in the line). */
static bool next_line(const char *text, size_t len, size_t *pos,
                      const char **ret_b, const char **ret_e)
{
    if (*pos >= len)
        return false;
    const char *b = text + *pos;
    const char *nl = memchr(b, '\n', len - *pos);
    const char *e = nl ? nl : text + len;
    *pos = (size_t)(e - text) + (nl ? 1 : 0);
    while (b < e && (*b == ' ' || *b == '\t'))
        b++;
    if (b < e && *b == '#')      /* a comment line ('#' is a Z85 digit: */
        e = b;                   /* never one after a field) */
    while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        e--;
    *ret_b = b;
    *ret_e = e;
    return true;
}

/* Split [b, e) at blanks into at most max fields; returns the count
 * (max + 1 when there are more). */
static size_t split_fields(const char *b, const char *e, const char **fb,
                           size_t *fl, size_t max)
{
    size_t n = 0;
    while (b < e) {
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        if (b == e)
            break;
        const char *s = b;
        while (b < e && *b != ' ' && *b != '\t')
            b++;
        if (n == max)
            return max + 1;
        fb[n] = s;
        fl[n] = (size_t)(b - s);
        n++;
    }
    return n;
}

static bool copy_key(char dst[WF_KEY_Z85_LEN + 1], const char *s, size_t n)
{
    if (n != WF_KEY_Z85_LEN)
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return wf_key_z85_valid(dst);
}

wf_status_t wf_keypair_parse(const char *text, size_t len, bool need_secret,
                             const char *label, wf_keypair_t *ret,
                             char *err, size_t err_len)
{
    wf_keypair_t kp = { 0 };
    size_t pos = 0, line = 0;
    const char *b, *e;
    while (next_line(text, len, &pos, &b, &e)) {
        line++;
        if (b == e)
            continue;
        size_t n = (size_t)(e - b);
        if (line == 1 && n == WF_KEY_Z85_LEN && !need_secret) {
            if (!copy_key(kp.public_key, b, n))
                break;
            continue;   /* a bare public key */
        }
        const char *eq = memchr(b, '=', n);
        if (!eq)
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: expected 'public-key = KEY' or "
                           "'secret-key = KEY'", label, line);
        const char *ke = eq, *vb = eq + 1;
        while (ke > b && (ke[-1] == ' ' || ke[-1] == '\t'))
            ke--;
        while (vb < e && (*vb == ' ' || *vb == '\t'))
            vb++;
        size_t kl = (size_t)(ke - b), vl = (size_t)(e - vb);
        char *dst;
        if (kl == 10 && memcmp(b, "public-key", 10) == 0)
            dst = kp.public_key;
        else if (kl == 10 && memcmp(b, "secret-key", 10) == 0)
            dst = kp.secret_key;
        else
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: unknown key name (public-key or secret-key)",
                           label, line);
        if (dst[0])
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: given twice", label, line);
        if (!copy_key(dst, vb, vl))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: not a Z85 key (40 characters)", label, line);
    }
    if (!kp.public_key[0])
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                       "%s: no public key", label);
    if (need_secret && !kp.secret_key[0])
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                       "%s: no secret key", label);
    if (kp.secret_key[0]) {
        char derived[WF_KEY_Z85_LEN + 1];
        if (zmq_curve_public(derived, kp.secret_key) != 0 ||
            strcmp(derived, kp.public_key) != 0)
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s: the public key is not the secret key's", label);
    }
    *ret = kp;
    return WF_OK;
}

/* Read a whole small file (at most WF_KEYS_FILE_MAX bytes) into a
 * malloc'ed buffer; *ret_mode gets its mode bits, *ret_uid its owner. */
static wf_status_t read_small(const char *path, char **ret, size_t *ret_len,
                              mode_t *ret_mode, uid_t *ret_uid, char *err,
                              size_t err_len)
{
    char q[WF_QUOTE_MAX];
    wf_quote(q, path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: %s", q,
                       strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                       "%s: not a regular file", q);
    }
    if ((uint64_t)st.st_size > WF_KEYS_FILE_MAX) {
        close(fd);
        return wf_errf_status(WF_E_LIMIT, err, err_len, "%s: larger than %u bytes",
                       q, WF_KEYS_FILE_MAX);
    }
    size_t cap = (size_t)st.st_size + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "%s: out of memory", q);
    }
    for (;;) {
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: %s", q,
                           strerror(e));
        }
        if (r == 0)
            break;
        len += (size_t)r;
        if (len == cap) {     /* grew since fstat */
            close(fd);
            free(buf);
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s: changed while read", q);
        }
    }
    close(fd);
    if (memchr(buf, '\0', len)) {
        free(buf);
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: holds a NUL byte", q);
    }
    *ret = buf;
    *ret_len = len;
    *ret_mode = st.st_mode;
    *ret_uid = st.st_uid;
    return WF_OK;
}

wf_status_t wf_keypair_read(const char *path, bool need_secret,
                            wf_keypair_t *ret, char *err, size_t err_len)
{
    char *text;
    size_t len;
    mode_t mode;
    uid_t owner;
    wf_status_t st = read_small(path, &text, &len, &mode, &owner, err, err_len);
    if (st != WF_OK)
        return st;
    char q[WF_QUOTE_MAX];
    wf_quote(q, path);
    wf_keypair_t kp;
    st = wf_keypair_parse(text, len, need_secret, q, &kp, err, err_len);
    free(text);
    if (st != WF_OK)
        return st;
    if (kp.secret_key[0] && (mode & 077)) {
        explicit_bzero(&kp, sizeof kp);
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                       "%s holds a secret key but is readable by group or "
                       "others (mode %03o): chmod 600 it", q,
                       (unsigned)(mode & 0777));
    }
    *ret = kp;
    explicit_bzero(&kp, sizeof kp);
    return WF_OK;
}

wf_status_t wf_keypair_generate(wf_keypair_t *ret, char *err, size_t err_len)
{
    wf_keypair_t kp = { 0 };
    if (zmq_curve_keypair(kp.public_key, kp.secret_key) != 0)
        return wf_errf_status(WF_E_INTERNAL, err, err_len,
                       "zmq_curve_keypair: %s (is ZeroMQ built with CURVE?)",
                       zmq_strerror(zmq_errno()));
    *ret = kp;
    explicit_bzero(&kp, sizeof kp);
    return WF_OK;
}

static wf_status_t write_new(const char *path, mode_t mode, const char *text,
                             char *err, size_t err_len)
{
    char q[WF_QUOTE_MAX];
    wf_quote(q, path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  mode);
    if (fd < 0)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: %s", q,
                       strerror(errno));
    size_t len = strlen(text), off = 0;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(path);
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: %s", q,
                           strerror(e));
        }
        off += (size_t)w;
    }
    if (fchmod(fd, mode) != 0 || fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(path);
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s: %s", q,
                       strerror(e));
    }
    return WF_OK;
}

wf_status_t wf_keypair_write(const char *path, const wf_keypair_t *kp,
                             char *err, size_t err_len)
{
    if (!wf_key_z85_valid(kp->public_key) || !wf_key_z85_valid(kp->secret_key))
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "not a key pair");
    char pub_path[4096];
    if ((size_t)snprintf(pub_path, sizeof pub_path, "%s.pub", path) >= sizeof pub_path)
        return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "path too long");
    char text[256];
    snprintf(text, sizeof text,
             "# weft CURVE key pair: keep this file secret (mode 0600)\n"
             "public-key = %s\nsecret-key = %s\n",
             kp->public_key, kp->secret_key);
    wf_status_t st = write_new(path, 0600, text, err, err_len);
    explicit_bzero(text, sizeof text);
    if (st != WF_OK)
        return st;
    snprintf(text, sizeof text,
             "# weft CURVE public key: give it to the daemon's or node's operator\n"
             "public-key = %s\n", kp->public_key);
    st = write_new(pub_path, 0644, text, err, err_len);
    if (st != WF_OK)
        unlink(path);
    return st;
}

wf_status_t wf_keylist_parse(const char *text, size_t len,
                             wf_keylist_kind_t kind, const char *label,
                             wf_key_entry_t *entries, size_t max,
                             size_t *ret_n, char *err, size_t err_len)
{
    size_t pos = 0, line = 0, n = 0;
    const char *b, *e;
    const size_t want = kind == WF_KEYLIST_CLIENTS ? 3 : 2;
    while (next_line(text, len, &pos, &b, &e)) {
        line++;
        if (b == e)
            continue;
        const char *fb[3];
        size_t fl[3];
        size_t nf = split_fields(b, e, fb, fl, 3);
        if (nf != want)
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len, "%s:%zu: expected %s",
                           label, line, kind == WF_KEYLIST_CLIENTS
                           ? "ROLE KEY NAME" : "NAME KEY");
        if (n == max)
            return wf_errf_status(WF_E_LIMIT, err, err_len, "%s:%zu: more than %zu keys",
                           label, line, max);
        wf_key_entry_t en = { .role = WF_ROLE_NONE };
        const size_t ki = 1;    /* the key is the second field of both */
        size_t ni = kind == WF_KEYLIST_CLIENTS ? 2 : 0;
        if (kind == WF_KEYLIST_CLIENTS) {
            if (fl[0] == 6 && memcmp(fb[0], "submit", 6) == 0)
                en.role = WF_ROLE_SUBMIT;
            else if (fl[0] == 5 && memcmp(fb[0], "admin", 5) == 0)
                en.role = WF_ROLE_ADMIN;
            else
                return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                               "%s:%zu: role must be submit or admin", label, line);
        }
        if (!copy_key(en.key, fb[ki], fl[ki]))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: not a Z85 public key (40 characters)",
                           label, line);
        if (!name_valid(fb[ni], fl[ni]))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: name must be 1..%d of [A-Za-z0-9._-]",
                           label, line, WF_KEY_NAME_MAX - 1);
        memcpy(en.name, fb[ni], fl[ni]);
        en.name[fl[ni]] = '\0';
        if (wf_keylist_find_key(entries, n, en.key))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: key listed twice", label, line);
        if (wf_keylist_find_name(entries, n, en.name))
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                           "%s:%zu: name '%s' listed twice", label, line, en.name);
        entries[n++] = en;
    }
    *ret_n = n;
    return WF_OK;
}

wf_status_t wf_keylist_read(const char *path, wf_keylist_kind_t kind,
                            wf_key_entry_t **ret_entries, size_t *ret_n,
                            char *err, size_t err_len)
{
    char *text;
    size_t len;
    mode_t mode;
    uid_t owner;
    wf_status_t st = read_small(path, &text, &len, &mode, &owner, err, err_len);
    if (st != WF_OK)
        return st;
    /* an allow-list grants roles and node identities: whoever may write
     * it may make themselves admin. Writable by group or others, or owned
     * by another user than this process's (or root), it is refused. */
    char q[WF_QUOTE_MAX];
    wf_quote(q, path);
    if ((mode & 022) || (owner != 0 && owner != geteuid())) {
        free(text);
        return (mode & 022)
                   ? wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                    "%s: writable by %s (mode %03o): an allow-list "
                                    "grants roles; chmod go-w it", q,
                                    (mode & 002) ? "others" : "its group",
                                    (unsigned)(mode & 0777))
                   : wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                    "%s: owned by uid %u, not by this user (uid %u) "
                                    "or root: an allow-list grants roles", q,
                                    (unsigned)owner, (unsigned)geteuid());
    }
    wf_key_entry_t *e = calloc(WF_KEYS_MAX, sizeof *e);
    if (!e) {
        free(text);
        return wf_errf_status(WF_E_NO_MEMORY, err, err_len, "out of memory");
    }
    size_t n = 0;
    st = wf_keylist_parse(text, len, kind, q, e, WF_KEYS_MAX, &n, err, err_len);
    free(text);
    if (st != WF_OK) {
        free(e);
        return st;
    }
    *ret_entries = e;
    *ret_n = n;
    return WF_OK;
}

const wf_key_entry_t *wf_keylist_find_key(const wf_key_entry_t *e, size_t n,
                                          const char *key_z85)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].key, key_z85) == 0)
            return &e[i];
    return NULL;
}

const wf_key_entry_t *wf_keylist_find_name(const wf_key_entry_t *e, size_t n,
                                           const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0)
            return &e[i];
    return NULL;
}
