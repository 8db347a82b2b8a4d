/* weftctl_util.h — what weftctl's files share: exit codes, option
 * parsing and reporting helpers (weftctl_util.c, which calls no other
 * weftctl file). Private to client/weftctl*.c.
 */
#ifndef WF_WEFTCTL_UTIL_H
#define WF_WEFTCTL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Exit code of a usage error (0 success, 1 job / daemon / check error). */
#define EXIT_USAGE 2

/* A load can take minutes: without --timeout, wait up to an hour. */
#define LOAD_DEFAULT_TIMEOUT_MS 3600000

/* Parse an integer option value in [lo, hi]; false on garbage. */
bool ctl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *ret);

/* Print "weftctl: what: STATUS: message" on stderr; returns exit code 1. */
int ctl_report_error(wf_client_t *c, wf_status_t st, const char *what);

/* b bytes as "N B" or "x.y KiB / MiB / GiB / TiB" into buf. */
void ctl_human_bytes(char *buf, size_t len, uint64_t b);

/* qsort comparison of doubles, ascending. */
int ctl_cmp_double(const void *a, const void *b);

/* Monotonic seconds. */
double ctl_now_s(void);

#endif /* WF_WEFTCTL_UTIL_H */
