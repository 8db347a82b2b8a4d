/* ports.c — see ports.h. */
#include "support/ports.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#define PORT_DIR "/tmp/weft-test-ports"
#define PORT_SPAN 8192

/* The first port of the span the tests pick from: below the ephemeral
 * range when there is room, else above it. */
static int span_start(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2) {
            lo = 32768;
            hi = 60999;
        }
        fclose(f);
    }
    if (lo - PORT_SPAN >= 10000)
        return lo - PORT_SPAN;
    if (hi + PORT_SPAN <= 65535)
        return hi + 1;
    return 10000;       /* no room outside the range: the locks still help */
}

/* Nobody listens on (or holds) 127.0.0.1:port now. */
static int bindable(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = { .sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

int test_port(void)
{
    if (mkdir(PORT_DIR, 01777) == 0)
        chmod(PORT_DIR, 01777);      /* past the umask: every user's tests */
    int start = span_start();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint32_t x = (uint32_t)getpid() * 2654435761u ^ (uint32_t)ts.tv_nsec;
    for (int tries = 0; tries < PORT_SPAN; tries++) {
        x = x * 1664525u + 1013904223u;
        int port = start + (int)((x >> 8) % PORT_SPAN);
        char path[64];
        snprintf(path, sizeof path, PORT_DIR "/%d", port);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0)
            continue;
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            continue;
        }
        if (bindable(port))
            return port;    /* fd stays open: the lock lasts until exit */
        close(fd);
    }
    fprintf(stderr, "test_port: no free port in %d..%d (%s)\n", start,
            start + PORT_SPAN - 1, strerror(errno));
    exit(1);
}
