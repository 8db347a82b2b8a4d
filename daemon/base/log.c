/* log.c — journald-prefixed stderr lines with a level filter (see log.h). */
#include "log.h"

#include "errf.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

void wf_log_init(wf_log_t *lg, int fd, wf_log_level_t level)
{
    atomic_init(&lg->level, (int)level);
    lg->fd = fd;
}

void wf_log_set_level(wf_log_t *lg, wf_log_level_t level)
{
    atomic_store_explicit(&lg->level, (int)level, memory_order_relaxed);
}

bool wf_log_enabled(const wf_log_t *lg, wf_log_level_t level)
{
    return (int)level <= atomic_load_explicit(&((wf_log_t *)lg)->level,
                                              memory_order_relaxed);
}

void wf_log(wf_log_t *lg, wf_log_level_t level, const char *fmt, ...)
{
    if (!wf_log_enabled(lg, level))
        return;
    char text[1024], line[1024];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    size_t tlen = m < 0 ? 0 : (size_t)m < sizeof text ? (size_t)m : sizeof text - 1;
    int n = snprintf(line, sizeof line, "<%d>", (int)level);
    /* Messages quote client-supplied text (names, paths, errors): its
     * control bytes are escaped so that it can neither end this line nor
     * start a forged one ("\n<0>..."). Room is kept for the '\n'. */
    wf_escape(line + n, sizeof line - (size_t)n - 1, text, tlen, WF_ESC_CTRL);
    size_t len = strlen(line);
    line[len++] = '\n';
    /* A lost log line is not worth failing for; nothing to do on error. */
    ssize_t w = write(lg->fd, line, len);
    (void)w;
}

void wf_log_limit_init(wf_log_limit_t *lim, const char *what, unsigned burst, int window_s)
{
    memset(lim, 0, sizeof *lim);
    lim->what = what;
    lim->burst = burst;
    lim->window_s = window_s;
    pthread_mutex_init(&lim->mu, NULL);
}

void wf_log_limit_destroy(wf_log_limit_t *lim) { pthread_mutex_destroy(&lim->mu); }

bool wf_log_limited(wf_log_t *lg, wf_log_limit_t *lim, wf_log_level_t level,
                    const char *fmt, ...)
{
    time_t now = time(NULL);
    uint64_t summed = 0;
    bool write_it;
    pthread_mutex_lock(&lim->mu);
    if (now - lim->window >= lim->window_s) {
        summed = lim->suppressed;
        lim->window = now;
        lim->logged = 0;
        lim->suppressed = 0;
    }
    write_it = lim->logged < lim->burst;
    if (write_it)
        lim->logged++;
    else
        lim->suppressed++;
    pthread_mutex_unlock(&lim->mu);
    if (summed)
        wf_log(lg, level, "%" PRIu64 " more %s in the last %d s (not logged one by one)",
               summed, lim->what, lim->window_s);
    if (!write_it)
        return false;
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    wf_log(lg, level, "%s", text);
    return true;
}

uint64_t wf_log_limit_suppressed(wf_log_limit_t *lim)
{
    pthread_mutex_lock(&lim->mu);
    uint64_t n = lim->suppressed;
    pthread_mutex_unlock(&lim->mu);
    return n;
}

static const struct {
    const char *name;
    wf_log_level_t level;
} level_names[] = {
    { "err", WF_LOG_ERR },         { "error", WF_LOG_ERR },
    { "warning", WF_LOG_WARNING }, { "warn", WF_LOG_WARNING },
    { "notice", WF_LOG_NOTICE },   { "info", WF_LOG_INFO },
    { "debug", WF_LOG_DEBUG },
};

bool wf_log_level_parse(const char *s, wf_log_level_t *ret_level)
{
    if (s[0] >= '3' && s[0] <= '7' && s[1] == '\0') {
        *ret_level = (wf_log_level_t)(s[0] - '0');
        return true;
    }
    for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++) {
        if (strcasecmp(s, level_names[i].name) == 0) {
            *ret_level = level_names[i].level;
            return true;
        }
    }
    return false;
}

const char *wf_log_level_name(wf_log_level_t level)
{
    switch (level) {
    case WF_LOG_ERR: return "err";
    case WF_LOG_WARNING: return "warning";
    case WF_LOG_NOTICE: return "notice";
    case WF_LOG_INFO: return "info";
    case WF_LOG_DEBUG: return "debug";
    }
    return "?";
}
