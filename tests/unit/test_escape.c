/* test_escape.c — escaping of untrusted text (proto/errf.h wf_escape) and
 * the logger that applies it (daemon/base/log.c):
 *   - WF_ESC_CTRL escapes the control bytes (< 0x20, 0x7f) only, as \n,
 *     \r, \t or \xNN, and leaves UTF-8 and quotes alone;
 *   - WF_ESC_ASCII also escapes '"', '\\' and every byte >= 0x80, so the
 *     result is printable ASCII;
 *   - truncation never overruns the buffer and ends with "...";
 *   - wf_log writes exactly one line per call, "<N>" first, whatever the
 *     message holds: a "\n<0>..." inside a formatted argument cannot start
 *     a forged line (read back through a pipe).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "errf.h"
#include "support/check.h"

static void expect(const char *in, size_t len, wf_esc_mode_t mode, size_t size,
                   const char *want)
{
    char buf[256];
    memset(buf, 'Z', sizeof buf);
    wf_escape(buf, size, in, len, mode);
    CHECK(strcmp(buf, want) == 0, "escape(%s, size %zu): got \"%s\", want \"%s\"",
          mode == WF_ESC_CTRL ? "ctrl" : "ascii", size, buf, want);
    CHECK(strlen(buf) < size, "escape wrote %zu bytes into %zu", strlen(buf) + 1, size);
    CHECK(buf[size] == 'Z' || size == sizeof buf, "escape wrote past %zu bytes", size);
}

static void test_escape(void)
{
    const char forged[] = "x\n<0>kernel: EMERG forged";
    expect(forged, strlen(forged), WF_ESC_CTRL, 200, "x\\n<0>kernel: EMERG forged");
    expect("a\tb\rc\x01\x1f\x7f", 8, WF_ESC_CTRL, 200, "a\\tb\\rc\\x01\\x1f\\x7f");
    expect("nul\0in", 6, WF_ESC_CTRL, 200, "nul\\x00in");
    expect("caf\xc3\xa9 \"q\" \\", 11, WF_ESC_CTRL, 200, "caf\xc3\xa9 \"q\" \\");
    expect("caf\xc3\xa9 \"q\" \\", 11, WF_ESC_ASCII, 200, "caf\\xc3\\xa9 \\\"q\\\" \\\\");
    expect("\xff\xfe", 2, WF_ESC_ASCII, 200, "\\xff\\xfe");
    expect("plain-name_1.2", 14, WF_ESC_ASCII, 200, "plain-name_1.2");
    /* truncation: never past size, "..." when cut */
    expect("abcdefghij", 10, WF_ESC_CTRL, 8, "abcd...");
    expect("\n\n\n\n\n", 5, WF_ESC_CTRL, 8, "\\n\\n...");
    expect("abc", 3, WF_ESC_CTRL, 4, "abc");
    expect("abcd", 4, WF_ESC_CTRL, 4, "...");
    expect("abcd", 4, WF_ESC_CTRL, 2, "a");
    expect("abcd", 4, WF_ESC_CTRL, 1, "");
    /* every byte value: ASCII mode output is printable ASCII only */
    char all[256], out[1100];
    for (int i = 0; i < 256; i++)
        all[i] = (char)i;
    wf_escape(out, sizeof out, all, sizeof all, WF_ESC_ASCII);
    for (size_t i = 0; out[i]; i++)
        CHECK(out[i] >= 0x20 && out[i] < 0x7f, "ascii escape left byte 0x%02x at %zu",
              (unsigned)(unsigned char)out[i], i);
    wf_escape(out, sizeof out, all, sizeof all, WF_ESC_CTRL);
    for (size_t i = 0; out[i]; i++)
        CHECK((unsigned char)out[i] >= 0x20 && out[i] != 0x7f,
              "ctrl escape left byte 0x%02x at %zu", (unsigned)(unsigned char)out[i], i);
}

static void test_log(void)
{
    int p[2];
    if (pipe(p) != 0) {
        CHECK(0, "pipe");
        return;
    }
    wf_log_t lg;
    wf_log_init(&lg, p[1], WF_LOG_DEBUG);
    wf_log(&lg, WF_LOG_INFO, "request 7 refused: tensor \"%s\"",
           "q\n<0>kernel: EMERG forged");
    wf_log(&lg, WF_LOG_ERR, "node %s", "a\r\nWATCHDOG=trigger\x1b[2J");
    char big[3000];
    memset(big, '\n', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    wf_log(&lg, WF_LOG_WARNING, "long %s", big);
    close(p[1]);
    char buf[8192];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    buf[n] = '\0';
    const char *want0 = "<6>request 7 refused: tensor \"q\\n<0>kernel: EMERG forged\"\n";
    const char *want1 = "<3>node a\\r\\nWATCHDOG=trigger\\x1b[2J\n";
    CHECK(strncmp(buf, want0, strlen(want0)) == 0, "first line: %s", buf);
    CHECK(strncmp(buf + strlen(want0), want1, strlen(want1)) == 0, "second line: %s",
          buf + strlen(want0));
    int lines = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || buf[i - 1] == '\n')
            CHECK(buf[i] == '<' && buf[i + 1] >= '3' && buf[i + 1] <= '7' && buf[i + 2] == '>',
                  "line %d does not start with a real prefix: %.20s", lines, buf + i);
        lines += buf[i] == '\n';
    }
    CHECK(lines == 3, "%d lines written, want 3", lines);
    CHECK(n > 0 && buf[n - 1] == '\n', "output does not end with a newline");
    CHECK(n < 1024 * 3, "%zu bytes: a line was not truncated", n);
}

/* A flood through a rate limit from 4 threads: exactly `burst` lines
 * written, the rest counted; the first line of the next window is
 * preceded by the count (the window's start is moved back by hand: no
 * waiting). */
typedef struct flood {
    pthread_t tid;
    wf_log_t *lg;
    wf_log_limit_t *lim;
    int written;
} flood_t;

static void *flood_main(void *arg)
{
    flood_t *f = arg;
    for (int i = 0; i < 1000; i++)
        f->written += wf_log_limited(f->lg, f->lim, WF_LOG_WARNING, "line %d", i);
    return NULL;
}

static void test_log_limit(void)
{
    int p[2];
    if (pipe(p) != 0) {
        CHECK(0, "pipe");
        return;
    }
    wf_log_t lg;
    wf_log_init(&lg, p[1], WF_LOG_DEBUG);
    wf_log_limit_t lim;
    wf_log_limit_init(&lim, "test lines", 20, 3600);
    flood_t f[4];
    for (int i = 0; i < 4; i++) {
        f[i] = (flood_t){ .lg = &lg, .lim = &lim };
        CHECK(pthread_create(&f[i].tid, NULL, flood_main, &f[i]) == 0, "thread");
    }
    int written = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(f[i].tid, NULL);
        written += f[i].written;
    }
    CHECK(written == 20, "%d lines written through a burst of 20", written);
    CHECK(wf_log_limit_suppressed(&lim) == 3980, "%llu counted, want 3980",
          (unsigned long long)wf_log_limit_suppressed(&lim));
    lim.window -= 3600; /* the next window */
    CHECK(wf_log_limited(&lg, &lim, WF_LOG_WARNING, "after"), "first line of a new window");
    CHECK(wf_log_limit_suppressed(&lim) == 0, "count not reset");
    wf_log_limit_destroy(&lim);
    close(p[1]);
    static char buf[65536];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(p[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)r;
    close(p[0]);
    buf[n] = '\0';
    int lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += buf[i] == '\n';
    CHECK(lines == 22, "%d lines in the log, want 20 + summary + 1", lines);
    CHECK(strstr(buf, "<4>3980 more test lines in the last 3600 s (not logged one by one)\n"
                      "<4>after\n") != NULL, "summary line missing: ...%s",
          n > 200 ? buf + n - 200 : buf);
}

int main(void)
{
    test_escape();
    test_log();
    test_log_limit();
    printf("test_escape: %d failures\n", failed);
    return failed ? 1 : 0;
}
