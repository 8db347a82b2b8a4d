/* errf.h — the one error-message formatter of weft's C modules: modules
 * report errors as a status plus a message written into a caller's
 * buffer (`char *err, size_t err_len`), never by logging. */
#ifndef WF_ERRF_H
#define WF_ERRF_H

#include <stddef.h>

/* printf into err (err_len bytes, truncated, NUL-terminated); nothing
 * when err is NULL or err_len is 0. */
void wf_errf(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* WF_ERRF_H */
