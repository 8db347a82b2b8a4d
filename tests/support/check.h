/* check.h — the assertion of every test: CHECK(cond) counts a pass, or a
 * failure with its file, line and the condition's text on stderr;
 * CHECK(cond, fmt, ...) prints fmt's message instead. CHECK_TRUE and
 * CHECKM are the same macro under the names some tests read better with.
 * main() reports `passed` / `failed` (and may print passed + failed as the
 * number of checks) and exits non-zero on any failure.
 *
 * The counters are one pair per test program (support/check.c, linked
 * into every test): the support code's checks (rawd, clusterd) count in
 * the same pair as the test's own. They are atomic: a test's threads
 * (ranks, clients) CHECK as the main thread does. The first
 * CHECK_PRINT_MAX failures are printed, the rest only counted (a broken
 * kernel fails every element of a grid; the first lines say what broke).
 *
 * Tests only. */
#ifndef WF_TEST_CHECK_H
#define WF_TEST_CHECK_H

#include <stdatomic.h>
#include <stdio.h>

/* Checks passed and failed in this test program (support/check.c). */
extern atomic_int passed, failed;

/* Failures printed in full; later ones are counted and announced once. */
#define CHECK_PRINT_MAX 50

/* CHECK's message form; cond, then a printf format and its arguments. */
#define CHECK_MSG_(cond, ...)                                             \
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

/* CHECK(cond): the condition's own text as the message. */
#define CHECK_COND_(cond) CHECK_MSG_(cond, "%s", #cond)

/* The 21st argument: CHECK_COND_ for one argument, CHECK_MSG_ for 2 to 20. */
#define CHECK_PICK_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13,  \
                    a14, a15, a16, a17, a18, a19, a20, name, ...) name
#define CHECK(...)                                                        \
    CHECK_PICK_(__VA_ARGS__, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, \
                CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_,   \
                CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_,   \
                CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_, CHECK_MSG_,   \
                CHECK_COND_, unused)(__VA_ARGS__)

#define CHECK_TRUE(cond) CHECK_COND_(cond)
#define CHECKM CHECK

#endif /* WF_TEST_CHECK_H */
