/* check.h — the assertion of the tests: CHECK(cond, fmt, ...) counts a
 * pass, or a failure with its file, line and message on stderr;
 * CHECK_TRUE(cond) does the same with the condition's text as the message.
 * main() reports `passed` / `failed` (and may print passed + failed as the
 * number of checks) and exits non-zero on any failure.
 *
 * The counters are atomic: a test's threads (ranks, clients) CHECK as the
 * main thread does. The first CHECK_PRINT_MAX failures are printed, the
 * rest only counted (a broken kernel fails every element of a grid; the
 * first lines say what broke).
 *
 * Header only: each test program gets its own counters. Tests only. */
#ifndef WF_TEST_CHECK_H
#define WF_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

static atomic_int passed, failed;

/* Failures printed in full; later ones are counted and announced once. */
#define CHECK_PRINT_MAX 50

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            passed++;                                                     \
        } else {                                                          \
            int check_n_ = failed++;                                      \
            if (check_n_ < CHECK_PRINT_MAX) {                             \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
                fprintf(stderr, __VA_ARGS__);                             \
                fputc('\n', stderr);                                      \
            } else if (check_n_ == CHECK_PRINT_MAX) {                     \
                fprintf(stderr, "FAIL %s:%d: further failures are "       \
                        "counted, not printed\n", __FILE__, __LINE__);    \
            }                                                             \
        }                                                                 \
    } while (0)

/* CHECK with the condition's own text as the message. */
#define CHECK_TRUE(cond) CHECK(cond, "%s", #cond)

#endif /* WF_TEST_CHECK_H */
