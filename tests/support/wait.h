/* wait.h — waiting for an event in a test, never for a stretch of time.
 *
 * A test that needs a state (a job held at its start, a queue full, a node
 * lost, a thread blocked in a collective) makes it happen and then waits
 * for it with wait_for: the condition is polled until it holds or the
 * bound passes. The bound is a failure bound only, never a window the
 * machine must be fast enough for: WAIT_EVENT_MS for "this will happen",
 * or one derived from a configured setting (a timeout, a heartbeat) with
 * the margin stated where it is used.
 *
 * WEFT_TEST_WAIT_SCALE (a whole number, default 1) multiplies every bound
 * that goes through wait_bound_ms, for very slow machines (valgrind).
 * Header only. Tests only. */
#ifndef WF_TEST_WAIT_H
#define WF_TEST_WAIT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

/* Bound on an event that a correct daemon brings about on its own (a
 * reply, a status change, a log line): a minute, far above what a loaded
 * 2-core machine under ASan takes, so hitting it means the event is lost. */
#define WAIT_EVENT_MS 60000u

/* The current time on the monotonic clock, in milliseconds. */
static inline uint64_t wait_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ms times WEFT_TEST_WAIT_SCALE. */
static inline uint32_t wait_bound_ms(uint32_t ms)
{
    const char *s = getenv("WEFT_TEST_WAIT_SCALE");
    long k = s ? strtol(s, NULL, 10) : 1;
    if (k < 1 || k > 100)
        k = 1;
    uint64_t b = (uint64_t)ms * (uint64_t)k;
    return b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
}

/* Poll cond(arg) until it returns true (then true) or wait_bound_ms(
 * timeout_ms) passes (then false, after one last poll). Polls at once,
 * then every 1 ms growing to 20 ms: the wait ends within 20 ms of the
 * event, however long the bound. */
static inline bool wait_for(bool (*cond)(void *arg), void *arg,
                            uint32_t timeout_ms)
{
    uint64_t end = wait_now_ms() + wait_bound_ms(timeout_ms);
    long step_us = 1000;
    for (;;) {
        if (cond(arg))
            return true;
        if (wait_now_ms() >= end)
            return cond(arg);
        struct timespec ts = { 0, step_us * 1000 };
        nanosleep(&ts, NULL);
        if (step_us < 20000)
            step_us *= 2;
    }
}

#endif /* WF_TEST_WAIT_H */
