/* notify.c — sd_notify wrappers and the watchdog schedule (see notify.h). */
#include "notify.h"

#include <inttypes.h>
#include <systemd/sd-daemon.h>
#include <time.h>

uint64_t wf_now_usec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void wf_notify_init(wf_notify_t *n)
{
    uint64_t usec = 0;
    /* unset_environment = 0: children (none) may inherit it; harmless. */
    if (sd_watchdog_enabled(0, &usec) <= 0)
        usec = 0;
    n->watchdog_usec = usec;
    n->next_ping_usec = wf_now_usec() + usec / 2;
}

void wf_notify_ready(wf_notify_t *n, const char *status)
{
    (void)n;
    sd_notifyf(0, "READY=1\nSTATUS=%s", status);
}

void wf_notify_status(wf_notify_t *n, const char *status)
{
    (void)n;
    sd_notifyf(0, "STATUS=%s", status);
}

void wf_notify_reloading(wf_notify_t *n)
{
    (void)n;
    sd_notifyf(0, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\nSTATUS=reloading",
               wf_now_usec());
}

void wf_notify_extend(wf_notify_t *n, uint64_t usec, const char *status)
{
    (void)n;
    sd_notifyf(0, "EXTEND_TIMEOUT_USEC=%" PRIu64 "\nSTATUS=%s", usec, status);
}

void wf_notify_stopping(wf_notify_t *n, const char *status)
{
    (void)n;
    sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status);
}

void wf_notify_watchdog(wf_notify_t *n, uint64_t now_usec)
{
    if (n->watchdog_usec == 0 || now_usec < n->next_ping_usec)
        return;
    sd_notify(0, "WATCHDOG=1");
    n->next_ping_usec = now_usec + n->watchdog_usec / 2;
}

int wf_notify_timeout_ms(const wf_notify_t *n, uint64_t now_usec)
{
    if (n->watchdog_usec == 0)
        return -1;
    if (now_usec >= n->next_ping_usec)
        return 0;
    return (int)((n->next_ping_usec - now_usec + 999) / 1000);
}
