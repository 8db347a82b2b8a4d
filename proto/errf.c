/* errf.c — error-message formatting (errf.h). */
#include "errf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

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

char *wf_escape(char *dst, size_t size, const char *src, size_t len, wf_esc_mode_t mode)
{
    if (size == 0)
        return dst;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        char e[5];
        size_t n;
        bool ctrl = c < 0x20 || c == 0x7f;
        bool esc = ctrl || (mode == WF_ESC_ASCII && (c >= 0x80 || c == '"' || c == '\\'));
        if (!esc) {
            e[0] = (char)c;
            n = 1;
        } else if (c == '\n' || c == '\r' || c == '\t' || c == '"' || c == '\\') {
            e[0] = '\\';
            e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : (char)c;
            n = 2;
        } else {
            snprintf(e, sizeof e, "\\x%02x", c);
            n = 4;
        }
        if (o + n + 1 > size) {
            /* truncated: mark it when there is room for the mark */
            if (size >= 4) {
                while (o + 4 > size)
                    o--;
                memcpy(dst + o, "...", 3);
                o += 3;
            }
            break;
        }
        memcpy(dst + o, e, n);
        o += n;
    }
    dst[o] = '\0';
    return dst;
}
