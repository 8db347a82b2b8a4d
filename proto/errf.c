/* errf.c — error-message formatting (errf.h). */
#include "errf.h"

#include <stdarg.h>
#include <stdio.h>

void wf_errf(char *err, size_t err_len, const char *fmt, ...)
{
    if (err == NULL || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}
