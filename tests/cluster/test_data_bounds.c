/* test_data_bounds.c — the cluster plane's data sockets against a raw
 * ZMTP peer (plain TCP here, no libzmq on the attacking side, so that
 * what the peer has written is known byte for byte), with the bounds of
 * README "Bounded cluster data plane": cluster_recv_messages (H) whole
 * messages per connection unread (ZMQ_RCVHWM), comm_unexpected_bytes (U)
 * per source rank of a comm_zmq rank. A message is at most M = 2 x max_tensor_bytes
 * + 4 KiB; a peer's complete messages take at most (H + 2) x M of the
 * receiver (H queued, one decoded, one being read). The stated bound of
 * each phase is RSS before + that + SLACK (allocator, the jobs, ZeroMQ's
 * buffers); the peak is VmHWM, reset (clear_refs 5) at the phase start.
 * One scenario per run (argv[2]):
 *
 *  channel   weftd a (coordinator, --max-tensor-bytes 1M, H = 4) and b,
 *            mesh dp=2 x ring=2, no keys (allow_anonymous, loopback): b's replica has its
 *            roots on b, so its jobs cross the tensor channel. A raw peer
 *            on a's tensor channel floods FLOOD whole messages of M
 *            bytes while a burst of jobs runs (every job correct), then
 *            sends a message of too many frames: the gate's log line
 *            closing the connection for it (one connection is read in
 *            order) says a read every message of the flood. a's peak
 *            stays within the bound. Then a never-ending message on a
 *            new connection (see multipart) is cut; a burst after is
 *            correct. (a's main loop reads the channel as fast as it
 *            comes and drops what is no job's, so the flood holds
 *            without the HWM too; the HWM is what bounds a peer while
 *            the main loop is busy, and `comm` shows it at work.)
 *  comm      a forked process holds a comm_zmq world of two ranks (rank
 *            threads, M = 2 MiB + 4 KiB, H = 4, U = 4 x M). (b) The raw
 *            peer floods rank 0's port with FLOOD whole messages while
 *            the ranks are idle (no call reads the socket, as between
 *            jobs): once the rank's listener (the gate) stops reading
 *            (rank 0's receive window shut: our end's zero-window probe
 *            timer, /proc/net/tcp; bytes in its receive queue and the
 *            child's reading threads asleep, seen twice with nothing
 *            written between) the writer has not got everything
 *            through, the listener took at most
 *            the bound (written - both TCP queues) and the peak is within
 *            it; then
 *            the ranks run allreduces (each checked) until rank 0 has
 *            dropped every flood message (another sender: never kept);
 *            the peak within the bound. (c) Rank 1 sends 8 messages of M
 *            on a split comm that rank 0 never receives on, then both
 *            enter a barrier on the world: rank 0's call fails with
 *            WF_E_LIMIT once U is reached (the fifth message over it),
 *            the message counted in wf_comm_zmq_over; the peak within
 *            before + U + bound + SLACK.
 *  multipart the raw peer sends frames of M with the "more" flag and
 *            never ends the message, at the comm rank of `comm` (idle).
 *            The gate (net/gate.h) cuts the connection once the message
 *            passes a header and a payload: the writer's write fails
 *            before FLOOD x M went through and the peak stays within the
 *            bound (libzmq, which hands a message on only once its last
 *            frame is in and checks the HWM at a message's first frame,
 *            held all of it); then the world's allreduces are correct.
 *
 * Every wait is for an event (a log line, a pipe record, a TCP window
 * shut, the writer finishing) with a WAIT_EVENT_MS bound.
 * Usage: test_data_bounds PATH_TO_WEFTD channel|comm|multipart.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>

#include "cluster_msg.h"
#include "comm/comm.h"
#include "comm/comm_zmq.h"
#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/rawd.h"
#include "support/wait.h"
#include "weft.h"

#define MIB (UINT64_C(1) << 20)
#define EVENT_MS ((int)WAIT_EVENT_MS)
#define HWM 4                               /* cluster_recv_messages */
#define TENSOR_BYTES (UINT64_C(1) << 20)    /* max_tensor_bytes */
#define MSG_BYTES (2 * TENSOR_BYTES + 4096) /* M */
#define BOUND ((HWM + 2) * MSG_BYTES)
#define UNEXP_BYTES (4 * MSG_BYTES)         /* U: comm_unexpected_bytes' default */
#define SLACK (24 * MIB)
#define FLOOD 48                            /* messages: 96 MiB, 8 x BOUND */
#define IN_FLIGHT 8

/* ---- a raw ZMTP 3.0 peer (NULL mechanism) --------------------------- */

static bool write_all(int fd, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *p, size_t n)
{
    unsigned char *b = p;
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

static uint16_t port_of_ep(const char *ep)
{
    const char *c = strrchr(ep, ':');
    return c ? (uint16_t)atoi(c + 1) : 0;
}

static uint16_t local_port(int fd)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return 0;
    return ntohs(a.sin_port);
}

/* Connect to tcp://127.0.0.1:PORT, greet, send READY as a DEALER with
 * routing id `id`, read the peer's greeting and READY. -1 on failure. */
static int zmtp_open(const char *ep, const char *id)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port_of_ep(ep)) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("zmtp connect");
        if (fd >= 0)
            close(fd);
        return -1;
    }
    unsigned char g[64] = { 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0, 'N', 'U', 'L', 'L' };
    unsigned char peer[64];
    unsigned char cmd[256];
    size_t n = 2, il = strlen(id);
    cmd[n++] = 5;
    memcpy(cmd + n, "READY", 5);
    n += 5;
    cmd[n++] = 11;
    memcpy(cmd + n, "Socket-Type", 11);
    n += 11;
    memcpy(cmd + n, "\0\0\0\6DEALER", 10);
    n += 10;
    cmd[n++] = 8;
    memcpy(cmd + n, "Identity", 8);
    n += 8;
    cmd[n++] = 0;
    cmd[n++] = 0;
    cmd[n++] = 0;
    cmd[n++] = (unsigned char)il;
    memcpy(cmd + n, id, il);
    n += il;
    cmd[0] = 0x04;
    cmd[1] = (unsigned char)(n - 2);
    unsigned char hd[9];
    bool ok = write_all(fd, g, sizeof g) && read_all(fd, peer, sizeof peer) &&
              peer[0] == 0xFF && peer[9] == 0x7F && write_all(fd, cmd, n) &&
              read_all(fd, hd, 2);
    /* the peer's READY: a short or a long command */
    uint64_t len = hd[1];
    if (ok && (hd[0] & 0x02)) {
        ok = read_all(fd, hd + 2, 7);
        len = 0;
        for (int i = 1; i < 9; i++)
            len = len << 8 | hd[i];
    }
    ok = ok && (hd[0] & 0x04) && len < sizeof cmd && read_all(fd, cmd, (size_t)len) &&
         len >= 6 && memcmp(cmd + 1, "READY", 5) == 0;
    if (!ok) {
        fprintf(stderr, "zmtp handshake with %s failed\n", ep);
        close(fd);
        return -1;
    }
    return fd;
}

/* One frame of n bytes from data (the "more" flag when more). */
static bool zmtp_frame(int fd, const void *data, size_t n, bool more)
{
    unsigned char h[9];
    size_t hl;
    if (n < 256) {
        h[0] = more ? 1 : 0;
        h[1] = (unsigned char)n;
        hl = 2;
    } else {
        h[0] = (more ? 1 : 0) | 2;
        for (int i = 0; i < 8; i++)
            h[1 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
        hl = 9;
    }
    return write_all(fd, h, hl) && (n == 0 || write_all(fd, data, n));
}

/* A writer thread: `count` frames of `bytes`, each a whole message, or
 * (more) all with the "more" flag. */
typedef struct flood {
    int fd;
    uint32_t count;
    size_t bytes;
    bool more;
    pthread_t tid;
    atomic_uint_fast64_t written;      /* bytes of frames written */
    atomic_bool done;                  /* every frame written */
    atomic_bool ended;                 /* the writer returned */
} flood_t;

static unsigned char *zeros;           /* MSG_BYTES of payload */

static void *flood_main(void *arg)
{
    flood_t *f = arg;
    uint32_t i = 0;
    for (; i < f->count; i++) {
        if (!zmtp_frame(f->fd, zeros, f->bytes, f->more))
            break;          /* the peer closed: done stays false */
        atomic_fetch_add(&f->written, f->bytes);
    }
    atomic_store(&f->done, i == f->count);
    atomic_store(&f->ended, true);
    return NULL;
}

static void flood_start(flood_t *f, int fd, uint32_t count, size_t bytes, bool more)
{
    f->fd = fd;
    f->count = count;
    f->bytes = bytes;
    f->more = more;
    atomic_init(&f->written, 0);
    atomic_init(&f->done, false);
    atomic_init(&f->ended, false);
    CHECK(pthread_create(&f->tid, NULL, flood_main, f) == 0);
}

static void never_ending(pid_t pid, const char *addr, const char *what,
                         size_t frame);
static void silent_peer(const char *addr);

/* The TCP socket with local port lport and remote port rport, as
 * /proc/net/tcp shows it (both ends are on this host): its send and
 * receive queues and its timer (4: the zero-window probe, the peer's
 * receive window is shut). False when it is not listed. */
typedef struct tcp_info_line {
    uint64_t tx, rx;
    unsigned timer;
} tcp_line_t;

static bool tcp_line(uint16_t lport, uint16_t rport, tcp_line_t *t)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        unsigned lp, rp, tr;
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*[0-9A-Fa-f]:%x %*x %lx:%lx %x:",
                   &lp, &rp, &tx, &rx, &tr) == 5 && lp == lport && rp == rport) {
            t->tx = tx;
            t->rx = rx;
            t->timer = tr;
            found = true;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* Reset pid's VmHWM to its RSS now. */
static void peak_reset(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    CHECK(fd >= 0 && write(fd, "5", 1) == 1, "cannot reset the peak RSS (%s)", path);
    if (fd >= 0)
        close(fd);
}

static double mib(uint64_t b)
{
    return (double)b / (double)MIB;
}

/* ---- channel: a real weftd ------------------------------------------ */

typedef clusterd_node_t node_t;
static const char *weftd;
static char coordinator[64];
static char dir[64];

#include "support/jcase_names.h"

static const jcase_t cases[] = {
    /* name          B   Sq  Skv Hq Hkv D   in   out  causal lse   scale rot  fp32 ring_any uly_any lb */
    { "f32 64",      1, 64, 64, 4,  4,  16, F32, F32, 0, true,  0,    AG,  DEF, DEF, DEF, DEF },
    { "f16 48 GQA",  2, 48, 48, 8,  2,  16, F16, F16, 1, false, 0,    A2A, DEF, DEF, DEF, DEF },
};
#define N_CASES (sizeof cases / sizeof cases[0])

static bool node_start(node_t *d, const char *name, const char *addr, bool log)
{
    if (!clusterd_node_open(d, name, "db"))
        return false;
    if (log)
        snprintf(d->p.log_path, sizeof d->p.log_path, "%s/%s.log", dir, name);
    char hwm[16];
    snprintf(hwm, sizeof hwm, "%d", HWM);
    const char *argv[] = { weftd, "--listen", d->p.endpoint, "--devices", "cpu:2",
                           "--data-address", addr, "--mesh", "dp=2,ring=2",
                           "--coordinator", coordinator, "--nodes", "2",
                           "--node-name", name, "--cluster-timeout-ms", "2000",
                           "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "1000",
                           "--cpu-memory", "512M", "--max-tensor-bytes", "1M",
                           "--cluster-recv-messages", hwm, "--allow-anonymous", "true",
                           "--log-level", log ? "info" : "warning", NULL };
    return clusterd_exec(&d->p, argv, NULL);
}

/* IN_FLIGHT jobs at once to a, each checked against the fp64 reference. */
static unsigned burst(node_t *a, uint64_t seed, const char *label)
{
    return jcase_burst(a->p.endpoint, cases, N_CASES, IN_FLIGHT, seed, EVENT_MS, 0,
                       label);
}

static void stop_clean(node_t *d)
{
    clusterd_kill(&d->p, SIGTERM);
    CHECK(d->p.reaped && WIFEXITED(d->p.exit_status) &&
          WEXITSTATUS(d->p.exit_status) == 0);
}

static void scenario_channel(void)
{
    node_t a, b;
    CHECK(node_start(&a, "a", "127.0.0.1", true));
    CHECK(clusterd_node_wait(&a, "READY=1", EVENT_MS, NULL, 0));
    CHECK(node_start(&b, "b", "127.0.0.2", false));
    CHECK(clusterd_node_wait(&a, "STATUS=cluster serving: epoch 1, 2 node(s), 4 rank(s)",
                             EVENT_MS, NULL, 0));
    CHECK(burst(&a, 10, "channel: before") == IN_FLIGHT);
    char line[512], xfer[128] = "";
    CHECK(clusterd_log_find(&a.p, "tensor channel on tcp://", EVENT_MS, line, sizeof line));
    const char *p = strstr(line, "tcp://");
    if (p)
        snprintf(xfer, sizeof xfer, "%.*s", (int)strcspn(p, " \t"), p);
    printf("tensor channel at %s; M = %" PRIu64 " bytes, H = %d, bound %.1f MiB "
           "+ %.0f MiB slack\n", xfer, MSG_BYTES, HWM, mib(BOUND), mib(SLACK));

    uint64_t before = rss_of(a.p.pid);
    peak_reset(a.p.pid);
    int fd = zmtp_open(xfer, "x");
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    flood_t f;
    flood_start(&f, fd, FLOOD, MSG_BYTES, false);
    /* legit jobs across the channel meanwhile */
    CHECK(burst(&a, 20, "channel: during the flood") == IN_FLIGHT);
    pthread_join(f.tid, NULL);
    CHECK(atomic_load(&f.done), "the flood was cut after %" PRIu64 " bytes",
          (uint64_t)atomic_load(&f.written));
    /* then a message of more frames than a transfer has: the gate cuts
     * the connection at its frame 1 + WF_CMSG_XFER_MAX_FRAMES + 1, read
     * after every message of the flood (one connection keeps its order) */
    for (int i = 0; i < WF_CMSG_XFER_MAX_FRAMES + 3; i++)
        zmtp_frame(fd, "", 0, i + 1 < WF_CMSG_XFER_MAX_FRAMES + 3);
    CHECK(clusterd_log_find(&a.p, "frames in one message", EVENT_MS, line, sizeof line));
    uint64_t peak = hwm_of(a.p.pid), after = rss_of(a.p.pid);
    printf("channel flood: %d x %" PRIu64 " bytes (%.0f MiB) read: RSS %.1f -> "
           "peak %.1f -> %.1f MiB (bound %.1f)\n", FLOOD, MSG_BYTES,
           mib(FLOOD * MSG_BYTES), mib(before), mib(peak), mib(after),
           mib(before + BOUND + SLACK));
    CHECK(peak <= before + BOUND + SLACK, "peak RSS %.1f MiB over the bound %.1f MiB",
          mib(peak), mib(before + BOUND + SLACK));
    close(fd);
    never_ending(a.p.pid, xfer, "channel", MSG_BYTES);
    /* the rendezvous (the coordinator's control plane) is behind a gate
     * too: one frame of a control message (64 KiB + 1 KiB) per message;
     * frames of 32 KiB, each one libzmq's ZMQ_MAXMSGSIZE let through */
    char rv[160];
    snprintf(rv, sizeof rv, "tcp://%s", coordinator);
    never_ending(a.p.pid, rv, "rendezvous", 32 << 10);
    silent_peer(rv);
    CHECK(burst(&a, 30, "channel: after") == IN_FLIGHT);
    stop_clean(&b);
    stop_clean(&a);
    clusterd_node_close(&b);
    clusterd_node_close(&a);
}

/* ---- comm: a forked process with a world of two ranks --------------- */

enum { CMD_LEGIT = 'L', CMD_UNEXP = 'U', CMD_QUIT = 'Q' };

typedef struct crank {
    int rank;
    wf_comm_zmq_endpoint_t *ep;
    const wf_comm_zmq_config_t *cfg;
    wf_comm_t *c;
    pthread_t tid;
    wf_status_t st;            /* of the join, then of the last command */
    uint64_t iters;            /* CMD_LEGIT: allreduces done */
} crank_t;

static pthread_barrier_t cbar;
static volatile int ccmd;
static uint64_t cwant;             /* CMD_LEGIT: drops to reach */

/* Both ranks: allreduces until rank 0 has dropped cwant messages (its
 * count rides in the sum, so both stop after the same one). */
static wf_status_t rank_legit(crank_t *r)
{
    float v[1025], s[1025];
    for (;;) {
        for (int i = 0; i < 1024; i++)
            v[i] = (float)(r->rank + 1) * (float)(i % 7);
        v[1024] = r->rank == 0 && wf_comm_zmq_dropped(r->c) >= cwant ? 1.0f : 0.0f;
        wf_status_t st = wf_comm_allreduce(r->c, v, s, 1025, WF_COMM_F32, WF_COMM_SUM);
        if (st != WF_OK)
            return st;
        for (int i = 0; i < 1024; i++)
            if (s[i] != 3.0f * (float)(i % 7))
                return WF_E_INTERNAL;
        r->iters++;
        if (s[1024] > 0.5f)
            return WF_OK;
    }
}

/* Rank 1 sends 8 x M on a split comm rank 0 never receives on, then
 * both enter a barrier on the world. */
static wf_status_t rank_unexp(crank_t *r)
{
    wf_comm_t *sub = NULL;
    wf_status_t st = wf_comm_split(r->c, 0, r->rank, &sub);
    if (st != WF_OK)
        return st;
    if (r->rank == 1)
        for (int i = 0; i < 8 && st == WF_OK; i++)
            st = wf_comm_send(sub, zeros, MSG_BYTES - 4096, 0);
    if (st == WF_OK)
        st = wf_comm_barrier(r->c);
    wf_comm_destroy(&sub);
    return st;
}

/* A rank thread: join, then run the commands the child's main thread
 * hands out between barriers until CMD_QUIT. */
static void *crank_main(void *arg)
{
    crank_t *r = arg;
    char err[256];
    r->st = wf_comm_zmq_world_join(r->cfg, r->rank, &r->ep, err, sizeof err, &r->c);
    if (r->st != WF_OK)
        fprintf(stderr, "comm child: rank %d: join: %s\n", r->rank, err);
    pthread_barrier_wait(&cbar);
    for (;;) {
        pthread_barrier_wait(&cbar);    /* a command */
        if (ccmd == CMD_QUIT)
            break;
        r->st = ccmd == CMD_LEGIT ? rank_legit(r) : rank_unexp(r);
        pthread_barrier_wait(&cbar);    /* done */
    }
    return NULL;
}

typedef struct crec {
    char addr[64];                 /* rank 0's port */
    int32_t st0, st1;
    uint64_t iters, dropped, over;
} crec_t;

/* The child: reads commands (one byte, CMD_LEGIT with a u64) from `down`,
 * answers a crec_t on `up` after joining and after each command. */
static int comm_child(int down, int up)
{
    void *zctx = zmq_ctx_new();
    wf_comm_zmq_local_t *local = NULL;
    crank_t r[2];
    memset(r, 0, sizeof r);
    if (wf_comm_zmq_local_new(&local) != WF_OK)
        return 3;
    const char *eps[2];
    for (int i = 0; i < 2; i++) {
        if (wf_comm_zmq_endpoint_new(zctx, "tcp://127.0.0.1:*", (int64_t)MSG_BYTES, HWM,
                                     NULL, &r[i].ep) != WF_OK)
            return 4;
        eps[i] = wf_comm_zmq_endpoint_address(r[i].ep);
    }
    crec_t rec;
    memset(&rec, 0, sizeof rec);
    snprintf(rec.addr, sizeof rec.addr, "%s", eps[0]);
    char addr1[64];
    snprintf(addr1, sizeof addr1, "%s", eps[1]);
    const char *ep_copy[2] = { rec.addr, addr1 };
    wf_comm_zmq_config_t cfg = {
        .zmq_ctx = zctx, .local = local, .world_id = 0x5eed0000u + (uint64_t)getpid(),
        .nranks = 2, .endpoints = ep_copy, .connect_timeout_ms = EVENT_MS,
        .op_timeout_ms = EVENT_MS, .max_message_bytes = (int64_t)MSG_BYTES,
        .recv_messages = HWM, .unexpected_bytes = (int64_t)UNEXP_BYTES };
    pthread_barrier_init(&cbar, NULL, 3);
    for (int i = 0; i < 2; i++) {
        r[i].rank = i;
        r[i].cfg = &cfg;
        if (pthread_create(&r[i].tid, NULL, crank_main, &r[i]) != 0)
            return 5;
    }
    pthread_barrier_wait(&cbar);        /* joined */
    rec.st0 = r[0].st;
    rec.st1 = r[1].st;
    if (!write_all(up, &rec, sizeof rec))
        return 6;
    for (;;) {
        unsigned char cmd;
        if (!read_all(down, &cmd, 1))
            cmd = CMD_QUIT;
        if (cmd == CMD_LEGIT && !read_all(down, &cwant, sizeof cwant))
            cmd = CMD_QUIT;
        if (r[0].st != WF_OK || r[1].st != WF_OK)
            cmd = CMD_QUIT;         /* the world ended: answer nothing more */
        ccmd = cmd;
        pthread_barrier_wait(&cbar);    /* the command */
        if (cmd == CMD_QUIT)
            break;
        pthread_barrier_wait(&cbar);    /* done */
        rec.st0 = r[0].st;
        rec.st1 = r[1].st;
        rec.iters = r[0].iters;
        rec.dropped = wf_comm_zmq_dropped(r[0].c);
        rec.over = wf_comm_zmq_over(r[0].c);
        if (!write_all(up, &rec, sizeof rec))
            return 7;
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(r[i].tid, NULL);
        wf_comm_destroy(&r[i].c);
        wf_comm_zmq_endpoint_destroy(&r[i].ep);
    }
    wf_comm_zmq_local_unref(&local);
    zmq_ctx_term(zctx);
    return 0;
}

typedef struct child {
    pid_t pid;
    int down, up;                  /* our ends of its pipes */
} child_t;

static bool child_start(child_t *c)
{
    int d[2], u[2];
    if (pipe2(d, O_CLOEXEC) != 0 || pipe2(u, O_CLOEXEC) != 0)
        return false;
    fflush(NULL);
    c->pid = fork();
    if (c->pid < 0)
        return false;
    if (c->pid == 0) {
        close(d[1]);
        close(u[0]);
        _exit(comm_child(d[0], u[1]));
    }
    close(d[0]);
    close(u[1]);
    c->down = d[1];
    c->up = u[0];
    return true;
}

/* The child's next record, waited for on its pipe. */
static bool child_rec(child_t *c, crec_t *rec)
{
    struct pollfd p = { c->up, POLLIN, 0 };
    if (poll(&p, 1, (int)wait_bound_ms(WAIT_EVENT_MS)) != 1) {
        fprintf(stderr, "the comm child did not answer\n");
        return false;
    }
    return read_all(c->up, rec, sizeof *rec);
}

static void child_end(child_t *c)
{
    unsigned char q = CMD_QUIT;
    CHECK(write_all(c->down, &q, 1));
    close(c->down);
    int st = 0;
    struct pollfd p = { c->up, POLLIN, 0 };
    poll(&p, 1, (int)wait_bound_ms(WAIT_EVENT_MS));     /* EOF at its exit */
    if (waitpid(c->pid, &st, WNOHANG) != c->pid) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &st, 0);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "comm child status %#x", st);
    close(c->up);
}

/* Every thread of pid that reads sockets asleep: ZeroMQ's I/O threads
 * ("ZMQbg/IO/N", the outgoing connections) and the gates ("weft-gate",
 * the listeners). With bytes in the connection's receive queue, that
 * means its reader stopped reading it (both poll level-triggered, so
 * while one reads it is running or runnable). */
static bool io_threads_asleep(pid_t pid)
{
    char path[320], buf[512];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int found = 0, asleep = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/comm", (int)pid, e->d_name);
        FILE *f = fopen(path, "r");
        bool io = f && fgets(buf, sizeof buf, f) && (strncmp(buf, "ZMQbg/IO", 8) == 0 ||
                                                    strncmp(buf, "weft-gate", 9) == 0);
        if (f)
            fclose(f);
        if (!io)
            continue;
        found++;
        snprintf(path, sizeof path, "/proc/%d/task/%s/stat", (int)pid, e->d_name);
        f = fopen(path, "r");
        const char *p = f && fgets(buf, sizeof buf, f) ? strrchr(buf, ')') : NULL;
        asleep += p && p[1] == ' ' && p[2] == 'S';
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
    return found > 0 && asleep == found;
}

typedef struct blocked_arg {
    flood_t *f;
    pid_t pid;                      /* the receiver */
    uint16_t ours, theirs;          /* the flood connection's ports */
    tcp_line_t us, them;            /* as last read */
    uint64_t seen;                  /* written at the last stopped look */
    int looks;                      /* stopped looks in a row */
} blocked_arg_t;

/* The rank's listener stopped reading: the rank's receive window is shut
 * (our end probes the zero window), bytes wait in its receive queue and
 * its reading threads sleep, twice in a row with nothing written in
 * between; or the writer got everything through. */
static bool reading_stopped(void *arg)
{
    blocked_arg_t *b = arg;
    if (atomic_load(&b->f->done))
        return true;
    uint64_t w = atomic_load(&b->f->written);
    bool stopped = tcp_line(b->ours, b->theirs, &b->us) &&
                   tcp_line(b->theirs, b->ours, &b->them) && b->us.timer == 4 &&
                   b->them.rx > 0 && io_threads_asleep(b->pid);
    b->looks = stopped ? (b->looks && w == b->seen ? b->looks + 1 : 1) : 0;
    b->seen = w;
    return b->looks >= 2;
}

/* Flood rank 0's port of an idle world (nothing reads it) from a new
 * connection (*fd) in f's thread, until ZeroMQ stops reading it; check
 * the peak against the bound and that the flood did not all go in. */
static bool flood_ended(void *arg)
{
    return atomic_load(&((flood_t *)arg)->ended);
}

/* A never-ending message at addr (frames of `frame` bytes, every one
 * with the "more" flag, FLOOD x M bytes of them if nothing stops it)
 * from a raw peer: the listener (the gate) must cut the connection once
 * the message goes over its frames or bytes, before the writer is
 * through, and the daemon's peak stay within the bound. */
static void never_ending(pid_t pid, const char *addr, const char *what, size_t frame)
{
    uint64_t before = rss_of(pid);
    peak_reset(pid);
    int fd = zmtp_open(addr, "zz");
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    flood_t f;
    flood_start(&f, fd, (uint32_t)(FLOOD * MSG_BYTES / frame), frame, true);
    CHECK(wait_for(flood_ended, &f, WAIT_EVENT_MS), "%s: the writer neither "
          "finished nor was cut within %u ms", what, (unsigned)WAIT_EVENT_MS);
    if (!atomic_load(&f.ended))
        shutdown(fd, SHUT_RDWR);
    pthread_join(f.tid, NULL);
    uint64_t peak = hwm_of(pid), now = rss_of(pid);
    uint64_t sent = atomic_load(&f.written);
    printf("%s, never-ending message: cut after %.1f MiB written (of %.0f "
           "MiB): RSS %.1f -> peak %.1f (now %.1f) MiB (bound %.1f)\n", what,
           mib(sent), mib((uint64_t)FLOOD * MSG_BYTES), mib(before), mib(peak),
           mib(now), mib(before + BOUND + SLACK));
    CHECK(!atomic_load(&f.done), "%s: the whole never-ending message went in", what);
    CHECK(peak <= before + BOUND + SLACK, "peak RSS %.1f MiB over the bound %.1f MiB",
          mib(peak), mib(before + BOUND + SLACK));
    close(fd);
}

/* A peer that finishes its handshake with the rendezvous, then says
 * nothing (answers no PING): the gate PINGs it (ZMTP 3.1) and closes it
 * once heartbeat_timeout_ms passes with nothing from it, as libzmq's
 * heartbeats closed a dead member's connection before. */
static void silent_peer(const char *addr)
{
    int fd = zmtp_open(addr, "s");
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    double t0 = now_s();
    bool ping = false, closed = false;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    while (!closed && poll(&p, 1, EVENT_MS) > 0) {
        unsigned char h[2], b[256];
        if (!read_all(fd, h, 2) || (h[0] & 0x02) || !read_all(fd, b, h[1])) {
            closed = true;      /* the end of the stream (or a reset) */
            break;
        }
        if ((h[0] & 0x04) && h[1] >= 5 && memcmp(b, "\x04PING", 5) == 0)
            ping = true;
    }
    printf("rendezvous, a silent peer: %s, %s after %.0f ms\n",
           ping ? "PINGed" : "never PINGed", closed ? "closed" : "still open",
           (now_s() - t0) * 1000);
    CHECK(ping && closed);
    close(fd);
}

static void flood_idle(child_t *c, const char *addr, bool more, flood_t *f, int *fd)
{
    uint64_t before = rss_of(c->pid);
    peak_reset(c->pid);
    *fd = zmtp_open(addr, "zz");
    CHECK(*fd >= 0);
    if (*fd < 0)
        return;
    flood_start(f, *fd, FLOOD, MSG_BYTES, more);
    blocked_arg_t b = { .f = f, .pid = c->pid, .ours = local_port(*fd),
                        .theirs = port_of_ep(addr) };
    CHECK(wait_for(reading_stopped, &b, WAIT_EVENT_MS));
    uint64_t peak = hwm_of(c->pid), now = rss_of(c->pid);
    uint64_t sent = atomic_load(&f->written), queued = b.us.tx + b.them.rx;
    uint64_t took = sent > queued ? sent - queued : 0;
    printf("comm %s, ranks idle: %.1f MiB written, %.1f MiB in the TCP queues "
           "(window shut: %s), %.1f MiB taken by the listener: RSS %.1f -> peak %.1f (now "
           "%.1f) MiB (bound %.1f)\n", more ? "never-ending message" : "flood",
           mib(sent), mib(queued), b.us.timer == 4 ? "yes" : "no", mib(took),
           mib(before), mib(peak), mib(now), mib(before + BOUND + SLACK));
    CHECK(!atomic_load(&f->done), "the whole flood went in while nothing read it");
    CHECK(took <= BOUND, "the listener took %.1f MiB of the flood, over %.1f MiB",
          mib(took), mib(BOUND));
    CHECK(peak <= before + BOUND + SLACK, "peak RSS %.1f MiB over the bound %.1f MiB",
          mib(peak), mib(before + BOUND + SLACK));
}

static void scenario_comm(void)
{
    child_t c;
    crec_t rec;
    CHECK(child_start(&c));
    CHECK(child_rec(&c, &rec) && rec.st0 == WF_OK && rec.st1 == WF_OK);
    printf("comm world of 2 ranks, rank 0 at %s; M = %" PRIu64 " bytes, H = %d, "
           "U = %.1f MiB, bound %.1f MiB + %.0f MiB slack\n", rec.addr, MSG_BYTES,
           HWM, mib(UNEXP_BYTES), mib(BOUND), mib(SLACK));

    /* (b) whole messages from an unknown sender */
    flood_t f;
    int fd = -1;
    uint64_t before = rss_of(c.pid);
    flood_idle(&c, rec.addr, false, &f, &fd);
    if (fd < 0)
        return;
    unsigned char cmd = CMD_LEGIT;
    uint64_t want = FLOOD;
    CHECK(write_all(c.down, &cmd, 1) && write_all(c.down, &want, sizeof want));
    CHECK(child_rec(&c, &rec));
    pthread_join(f.tid, NULL);
    uint64_t peak = hwm_of(c.pid);
    printf("comm flood read: %" PRIu64 " allreduces correct meanwhile, %" PRIu64
           " messages dropped; peak %.1f MiB (bound %.1f)\n", rec.iters, rec.dropped,
           mib(peak), mib(before + BOUND + SLACK));
    CHECK(rec.st0 == WF_OK && rec.st1 == WF_OK && rec.iters > 0);
    CHECK(rec.dropped >= FLOOD && atomic_load(&f.done));
    CHECK(peak <= before + BOUND + SLACK, "peak RSS %.1f MiB over the bound %.1f MiB",
          mib(peak), mib(before + BOUND + SLACK));
    close(fd);

    /* (c) a rank sending further ahead than comm_unexpected_bytes */
    before = rss_of(c.pid);
    peak_reset(c.pid);
    cmd = CMD_UNEXP;
    CHECK(write_all(c.down, &cmd, 1));
    CHECK(child_rec(&c, &rec));
    peak = hwm_of(c.pid);
    printf("comm unexpected: rank 0's barrier %s, rank 1's %s, %" PRIu64 " over "
           "U; RSS %.1f -> peak %.1f MiB (bound %.1f)\n", wf_status_name(rec.st0),
           wf_status_name(rec.st1), rec.over, mib(before), mib(peak),
           mib(before + UNEXP_BYTES + BOUND + SLACK));
    CHECK(rec.st0 == WF_E_LIMIT && rec.over >= 1);
    CHECK(peak <= before + UNEXP_BYTES + BOUND + SLACK);
    child_end(&c);
}

static void scenario_multipart(void)
{
    child_t c;
    crec_t rec;
    CHECK(child_start(&c));
    CHECK(child_rec(&c, &rec) && rec.st0 == WF_OK && rec.st1 == WF_OK);
    never_ending(c.pid, rec.addr, "comm, ranks idle", MSG_BYTES);
    /* the world still works: allreduces, each checked */
    unsigned char cmd = CMD_LEGIT;
    uint64_t want = 0;
    CHECK(write_all(c.down, &cmd, 1) && write_all(c.down, &want, sizeof want));
    CHECK(child_rec(&c, &rec));
    CHECK(rec.st0 == WF_OK && rec.st1 == WF_OK && rec.iters > 0);
    child_end(&c);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD channel|comm|multipart\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    weftd = argv[1];
    zeros = calloc(1, MSG_BYTES);
    if (!zeros)
        return 1;
    memset(zeros, 0x5a, MSG_BYTES);     /* resident, not the zero page */
    snprintf(coordinator, sizeof coordinator, "127.0.0.1:%d", test_port());
    snprintf(dir, sizeof dir, "/tmp/weft-db-%d", (int)getpid());
    if (mkdir(dir, 0700) != 0) {
        perror(dir);
        return 1;
    }
    double t0 = now_s();
    if (strcmp(argv[2], "channel") == 0)
        scenario_channel();
    else if (strcmp(argv[2], "comm") == 0)
        scenario_comm();
    else if (strcmp(argv[2], "multipart") == 0)
        scenario_multipart();
    else {
        fprintf(stderr, "unknown scenario %s\n", argv[2]);
        failed++;
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    printf("test_data_bounds %s: %d failure(s) in %.1f s\n", argv[2], (int)failed,
           now_s() - t0);
    free(zeros);
    return failed ? 1 : 0;
}
