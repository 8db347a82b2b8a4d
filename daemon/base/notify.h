/* notify.h — the systemd service protocol: READY / STATUS / RELOADING /
 * STOPPING / WATCHDOG messages through sd_notify. Every call is a no-op
 * when NOTIFY_SOCKET is unset (not started by systemd, or a test that does
 * not ask for notifications).
 *
 * Main thread only. The watchdog is pinged from the main poll loop: its
 * timeout is bounded by wf_notify_timeout_ms so a stuck loop stops the
 * pings and systemd restarts the service.
 */
#ifndef WF_NOTIFY_H
#define WF_NOTIFY_H

#include <stdbool.h>
#include <stdint.h>

typedef struct wf_notify {
    uint64_t watchdog_usec;   /* WATCHDOG_USEC from systemd; 0 = no watchdog */
    uint64_t next_ping_usec;  /* CLOCK_MONOTONIC time of the next WATCHDOG=1 */
} wf_notify_t;

/* Read the watchdog interval (sd_watchdog_enabled). */
void wf_notify_init(wf_notify_t *n);

/* READY=1 with a STATUS line. */
void wf_notify_ready(wf_notify_t *n, const char *status);

/* STATUS=... only. */
void wf_notify_status(wf_notify_t *n, const char *status);

/* RELOADING=1 with MONOTONIC_USEC (newer systemd wants it). Follow with
 * wf_notify_ready once the reload is done, successful or not. */
void wf_notify_reloading(wf_notify_t *n);

/* EXTEND_TIMEOUT_USEC (the start-up, reload or stop timeout grows by
 * `usec` from now: a model load in progress) with a STATUS line. */
void wf_notify_extend(wf_notify_t *n, uint64_t usec, const char *status);

/* STOPPING=1 with a STATUS line. */
void wf_notify_stopping(wf_notify_t *n, const char *status);

/* Send WATCHDOG=1 when half the interval has passed since the last one. */
void wf_notify_watchdog(wf_notify_t *n, uint64_t now_usec);

/* Poll timeout (ms) that keeps the watchdog fed; -1 when there is none. */
int wf_notify_timeout_ms(const wf_notify_t *n, uint64_t now_usec);

/* CLOCK_MONOTONIC in microseconds. */
uint64_t wf_now_usec(void);

#endif /* WF_NOTIFY_H */
