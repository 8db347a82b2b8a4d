/* log.h — the daemon's logger: one stderr line per event, prefixed with a
 * journald priority ("<3>" error .. "<7>" debug) so that journald files
 * each line at its level, and filtered by a level that SIGHUP may change.
 *
 * There is no global logger: the daemon context owns one and passes it to
 * whatever logs (server, scheduler, workers). Safe to call from any thread.
 */
#ifndef WF_LOG_H
#define WF_LOG_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* syslog / journald priorities. */
typedef enum wf_log_level {
    WF_LOG_ERR = 3,
    WF_LOG_WARNING = 4,
    WF_LOG_NOTICE = 5,
    WF_LOG_INFO = 6,
    WF_LOG_DEBUG = 7
} wf_log_level_t;

typedef struct wf_log {
    atomic_int level;   /* lines above this priority number are dropped */
    int fd;             /* where lines go (stderr) */
} wf_log_t;

/* Initialise a logger writing to fd at `level`. */
void wf_log_init(wf_log_t *lg, int fd, wf_log_level_t level);

/* Change the level (SIGHUP reload); any thread may log meanwhile. */
void wf_log_set_level(wf_log_t *lg, wf_log_level_t level);

/* True when a line of this level would be written (skip costly formatting). */
bool wf_log_enabled(const wf_log_t *lg, wf_log_level_t level);

/* Write one line "<N>text\n" with a single write(2), so that lines of
 * different threads never interleave. Long lines are truncated. Control
 * bytes of the formatted text (< 0x20, 0x7f) are escaped (\n, \t, \xNN:
 * wf_escape, WF_ESC_CTRL), so that text quoted from a client can never
 * start a new line or forge a priority prefix. */
void wf_log(wf_log_t *lg, wf_log_level_t level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A rate limit on one kind of line that a peer can cause at will (a
 * refused connection, a dropped reply): at most `burst` lines per
 * `window_s` seconds; the rest are counted, and the first line of a later
 * window is preceded by one that says how many were not written. Any
 * thread may log through it (wf_log_limit_init first). */
typedef struct wf_log_limit {
    const char *what;          /* what the lines are, for the summary:
                                  "client-plane refusals" */
    unsigned burst;            /* lines per window */
    int window_s;              /* the window */
    pthread_mutex_t mu;
    time_t window;             /* start of the current window */
    unsigned logged;           /* lines written in it */
    uint64_t suppressed;       /* lines not written since the last summary */
} wf_log_limit_t;

/* Set lim up: `what` (a static string) names the lines in summaries. */
void wf_log_limit_init(wf_log_limit_t *lim, const char *what, unsigned burst, int window_s);

/* Release lim (nothing logs through it any more). */
void wf_log_limit_destroy(wf_log_limit_t *lim);

/* wf_log under limit `lim`: written, or counted when the window's burst
 * is spent. Returns true when the line was written. */
bool wf_log_limited(wf_log_t *lg, wf_log_limit_t *lim, wf_log_level_t level,
                    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Lines lim has not written (since its last summary). */
uint64_t wf_log_limit_suppressed(wf_log_limit_t *lim);

/* Parse "err"/"error", "warning"/"warn", "notice", "info", "debug" or the
 * digits 3..7. False if unknown. */
bool wf_log_level_parse(const char *s, wf_log_level_t *ret_level);

/* Canonical name of a level ("info"). */
const char *wf_log_level_name(wf_log_level_t level);

#endif /* WF_LOG_H */
