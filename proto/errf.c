/* errf.c — error-message formatting (errf.h). */
#include "errf.h"

#include <stdarg.h>
#include <stdio.h>

/* The one formatter behind both entry points. */
static void errf_v(char *err, size_t err_len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void errf_v(char *err, size_t err_len, const char *fmt, va_list ap)
{
    if (err == NULL || err_len == 0)
        return;
    vsnprintf(err, err_len, fmt, ap);
}

void wf_errf(char *err, size_t err_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errf_v(err, err_len, fmt, ap);
    va_end(ap);
}

wf_status_t wf_errf_status(wf_status_t st, char *err, size_t err_len,
                           const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errf_v(err, err_len, fmt, ap);
    va_end(ap);
    return st;
}

wf_status_t wf_errf_buf(const wf_errbuf_t *b, wf_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errf_v(b->err, b->err_len, fmt, ap);
    va_end(ap);
    return st;
}
