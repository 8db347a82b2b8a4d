/* check.h — the assertion of the unit tests: CHECK(cond, fmt, ...) counts
 * a pass, or a failure with its file, line and message on stderr;
 * CHECK_TRUE(cond) does the same with the condition's text as the message.
 * main() reports `passed` / `failed` and exits non-zero on any failure.
 * Header only: each test program gets its own counters. Tests only. */
#ifndef WF_TEST_CHECK_H
#define WF_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            passed++;                                                     \
        } else {                                                          \
            failed++;                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

/* CHECK with the condition's own text as the message. */
#define CHECK_TRUE(cond) CHECK(cond, "%s", #cond)

#endif /* WF_TEST_CHECK_H */
