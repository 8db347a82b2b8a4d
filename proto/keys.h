/* keys.h — CURVE keys on disk: key pair files and allow-lists.
 *
 * Shared by weftd (its own key pair, the client and node allow-lists),
 * libweft (the client's pair, the daemon's public key) and weftctl keygen.
 * Keys are ZeroMQ's: Curve25519, 32 bytes, written as 40 Z85 characters.
 *
 * Key pair file (weftctl keygen writes FILE and FILE.pub):
 *     # lines starting with '#' and blank lines are ignored ('#' is a
 *     # Z85 digit, so a comment never follows a key on its line)
 *     public-key = <40 Z85 characters>
 *     secret-key = <40 Z85 characters>
 * A public-key file has the first line only. A file holding a secret key
 * must not be readable by group or others (mode & 077 == 0, as ssh asks
 * of private keys) and its public key must be the one the secret derives.
 *
 * Allow-lists, one entry per line, fields separated by blanks:
 *     client_keys:  ROLE KEY NAME     ROLE is submit or admin
 *     node_keys:    NAME KEY
 * NAME is [A-Za-z0-9._-]{1,63} (it reaches logs); a key or a name listed
 * twice is an error. Errors name the file and the line, never quote a
 * secret.
 *
 * Nothing here logs. File reads are bounded (WF_KEYS_FILE_MAX).
 */
#ifndef WF_KEYS_H
#define WF_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WF_KEY_Z85_LEN 40            /* characters of a Z85 key */
#define WF_KEY_NAME_MAX 64           /* an entry's name, with the NUL */
#define WF_KEYS_MAX 1024             /* entries of one allow-list */
#define WF_KEYS_FILE_MAX (256u << 10) /* bytes of one key or list file */

/* Roles of client keys; admin includes everything submit may do. */
typedef enum wf_role {
    WF_ROLE_NONE = 0,    /* not allowed at all */
    WF_ROLE_SUBMIT = 1,  /* hello, status, attention, forward, list_models */
    WF_ROLE_ADMIN = 2    /* also reconfigure, load_model, unload_model */
} wf_role_t;

/* A key pair; secret[0] == '\0' when only the public key is known. */
typedef struct wf_keypair {
    char public_key[WF_KEY_Z85_LEN + 1];
    char secret_key[WF_KEY_Z85_LEN + 1];
} wf_keypair_t;

/* One allow-list entry. */
typedef struct wf_key_entry {
    char key[WF_KEY_Z85_LEN + 1];    /* Z85 public key */
    char name[WF_KEY_NAME_MAX];      /* client's or node's name */
    wf_role_t role;                  /* client lists; WF_ROLE_NONE in node lists */
} wf_key_entry_t;

typedef enum wf_keylist_kind {
    WF_KEYLIST_CLIENTS = 0,   /* ROLE KEY NAME */
    WF_KEYLIST_NODES = 1      /* NAME KEY */
} wf_keylist_kind_t;

/* True when s is 40 Z85 characters that decode to 32 bytes. */
bool wf_key_z85_valid(const char *s);

/* Name of a role ("submit", "admin", "none"). */
const char *wf_role_name(wf_role_t role);

/* Parse a key pair file's text. need_secret: a missing secret-key line is
 * an error. `label` names the source in messages. WF_E_BAD_ARGUMENT with
 * the line number on any error. */
wf_status_t wf_keypair_parse(const char *text, size_t len, bool need_secret,
                             const char *label, wf_keypair_t *ret,
                             char *err, size_t err_len);

/* Read a key pair file (see the header comment; a file with a secret key
 * must be mode & 077 == 0). A bare 40-character Z85 public key is also
 * accepted as the whole file when need_secret is false. */
wf_status_t wf_keypair_read(const char *path, bool need_secret,
                            wf_keypair_t *ret, char *err, size_t err_len);

/* A fresh key pair (zmq_curve_keypair). */
wf_status_t wf_keypair_generate(wf_keypair_t *ret, char *err, size_t err_len);

/* Write `kp` to `path` (public and secret, mode 0600) and its public key
 * to path.pub (mode 0644). Both are created with O_EXCL | O_NOFOLLOW: an
 * existing file (or symlink) is never overwritten. */
wf_status_t wf_keypair_write(const char *path, const wf_keypair_t *kp,
                             char *err, size_t err_len);

/* Parse an allow-list's text into entries[0..max); *ret_n entries. */
wf_status_t wf_keylist_parse(const char *text, size_t len,
                             wf_keylist_kind_t kind, const char *label,
                             wf_key_entry_t *entries, size_t max,
                             size_t *ret_n, char *err, size_t err_len);

/* Read an allow-list file: *ret_entries is malloc'ed (caller frees), of
 * *ret_n entries (an empty list is valid: nobody admitted). */
wf_status_t wf_keylist_read(const char *path, wf_keylist_kind_t kind,
                            wf_key_entry_t **ret_entries, size_t *ret_n,
                            char *err, size_t err_len);

/* Entry of a list by key, or NULL. */
const wf_key_entry_t *wf_keylist_find_key(const wf_key_entry_t *e, size_t n,
                                          const char *key_z85);

/* Entry of a list by name, or NULL. */
const wf_key_entry_t *wf_keylist_find_name(const wf_key_entry_t *e, size_t n,
                                           const char *name);

#endif /* WF_KEYS_H */
