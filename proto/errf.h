/* errf.h — the one error-message formatter of weft's C modules: modules
 * report errors as a status plus a message written into a caller's
 * buffer (`char *err, size_t err_len`), never by logging.
 *
 * wf_errf writes the message; wf_errf_status writes it and returns the
 * status, for the common `return wf_errf_status(WF_E_..., err, err_len,
 * "...")`; wf_errf_buf is the same for a wf_errbuf_t. All go through one
 * vsnprintf, so there is one formatter. */
#ifndef WF_ERRF_H
#define WF_ERRF_H

#include <stddef.h>
#include <string.h>

#include "weft.h"

/* printf into err (err_len bytes, truncated, NUL-terminated); nothing
 * when err is NULL or err_len is 0. */
void wf_errf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* wf_errf, then return st unchanged: a failing path formats its message
 * and returns its status in one statement. */
wf_status_t wf_errf_status(wf_status_t st, char *err, size_t err_len,
                           const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A caller's message buffer, for code that passes one down a chain of
 * calls (the wire decoders). */
typedef struct wf_errbuf {
    char *err;      /* the buffer; NULL: no message wanted */
    size_t err_len; /* its size */
} wf_errbuf_t;

/* wf_errf_status into b's buffer. */
wf_status_t wf_errf_buf(const wf_errbuf_t *b, wf_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Escaping of untrusted text (client-supplied names, paths, error texts
 * quoting them) before it reaches a log line or a reply:
 * WF_ESC_CTRL escapes the control bytes (< 0x20 and 0x7f) only, so that
 * a text can neither start a new log line nor forge a "<N>" priority
 * prefix; WF_ESC_ASCII also escapes '"', '\\' and every byte >= 0x80,
 * so that the result is printable ASCII (valid UTF-8) whatever the input.
 * Escapes are \n, \r, \t and \xNN. */
typedef enum wf_esc_mode { WF_ESC_CTRL, WF_ESC_ASCII } wf_esc_mode_t;

/* Escape len bytes of src (a NUL among them is escaped too) into dst
 * (size bytes, always NUL-terminated when size > 0; truncated before an
 * escape that does not fit, with "..." when room). Returns dst. */
char *wf_escape(char *dst, size_t size, const char *src, size_t len, wf_esc_mode_t mode);

/* A quoted-ready copy of a C string for a message: wf_escape(.., ASCII)
 * into a buffer of WF_QUOTE_MAX bytes. */
#define WF_QUOTE_MAX 72
#define wf_quote(buf, s) wf_escape((buf), sizeof(buf), (s), strlen(s), WF_ESC_ASCII)

#endif /* WF_ERRF_H */
