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

#endif /* WF_ERRF_H */
