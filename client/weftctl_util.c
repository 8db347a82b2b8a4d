/* weftctl_util.c — weftctl's shared helpers (weftctl_util.h): option
 * values, error reports, sizes, timing.
 */
#include "weftctl_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Parse a positive integer option value; false on garbage. */
bool ctl_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *ret)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *ret = v;
    return true;
}

int ctl_report_error(wf_client_t *c, wf_status_t st, const char *what)
{
    const char *msg = wf_client_last_error(c);
    fprintf(stderr, "weftctl: %s: %s: %s\n", what, wf_status_name(st),
            msg[0] ? msg : wf_status_str(st));
    if (st == WF_E_DENIED)
        fprintf(stderr, "weftctl: an admin may: a key of role admin in the "
                "daemon's client_keys (tcp://), or root / the daemon's user "
                "(ipc://)\n");
    else if (st == WF_E_AUTH)
        fprintf(stderr, "weftctl: keys: --server-key FILE.pub --client-key FILE "
                "(or WEFT_SERVER_KEY / WEFT_CLIENT_KEY); the client's public key "
                "must be in the daemon's client_keys\n");
    return 1;
}

void ctl_human_bytes(char *buf, size_t len, uint64_t b)
{
    static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", b);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
}

int ctl_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ctl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
