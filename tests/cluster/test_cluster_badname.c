/* test_cluster_badname.c — a node name with control bytes, end to end:
 * a real coordinator weftd (cpu:2, nodes 2) on loopback and a raw ZeroMQ
 * DEALER that says hello with the name "x\nWATCHDOG=trigger" (the right
 * versions, so the name is what is checked). The coordinator must answer
 * with a `refuse` whose error names the field 'node name', keep serving
 * its status, and no sd_notify datagram may carry the name: none holds
 * "WATCHDOG=trigger" (a forged notify assignment) or a newline followed by
 * it. A well-named raw hello is then accepted (its answer is a `world`,
 * not a `refuse`) to show that the refusal is the name's; that peer never
 * gets ready, and the coordinator's STATUS line losing it (after
 * heartbeat_timeout_ms) ends the watch of the notify socket: every
 * datagram sent about the bad hello came before it.
 *
 * Usage: test_cluster_badname PATH_TO_WEFTD.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <zmq.h>

#include "cluster_msg.h"
#include "proto.h"
#include "support/clusterd.h"
#include "support/wait.h"

#define TIMEOUT_MS ((int)WAIT_EVENT_MS) /* events: replies, notify lines */


static wf_cmsg_t msg;
static wf_ctl_msg_t ctl;

/* Every notify datagram of d until one starting with `want` (true) or
 * until ms pass (false): counts a failure for each forged one. */
static bool notify_scan(clusterd_t *d, int ms, const char *want)
{
    int64_t end = clusterd_now_ms() + ms;
    for (;;) {
        int64_t left = end - clusterd_now_ms();
        if (left <= 0) {
            fprintf(stderr, "no notify line '%s' within %d ms\n", want, ms);
            return false;
        }
        struct pollfd p = { .fd = d->nfd, .events = POLLIN };
        if (poll(&p, 1, (int)left) != 1)
            continue;
        char buf[4096];
        ssize_t n = recv(d->nfd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (strstr(buf, "WATCHDOG=trigger")) {
            fprintf(stderr, "forged notify datagram: %s\n", buf);
            failed++;
        }
        for (const char *line = buf; line;) {
            if (strncmp(line, want, strlen(want)) == 0) {
                printf("notify: %.*s\n", (int)strcspn(line, "\n"), line);
                return true;
            }
            const char *nl = strchr(line, '\n');
            line = nl ? nl + 1 : NULL;
        }
    }
}

static bool send_hello(void *sock, const char *weft, const char *name)
{
    memset(&msg, 0, sizeof msg);
    msg.type = WF_CMSG_HELLO;
    wf_cmsg_hello_t *h = &msg.u.hello;
    h->proto = WF_PROTOCOL_VERSION;
    snprintf(h->weft, sizeof h->weft, "%s", weft);
    snprintf(h->nccl, sizeof h->nccl, "none");
    snprintf(h->name, sizeof h->name, "%s", name);
    h->devices = 2;
    snprintf(h->data, sizeof h->data, "tcp://127.0.0.1:9,10");
    wf_ctl_init(&ctl);
    wf_buf_t b = { 0 };
    bool ok = wf_cmsg_put(&ctl, &msg) == WF_OK && wf_ctl_encode(&ctl, &b) == WF_OK &&
              zmq_send(sock, b.data, b.len, 0) == (int)b.len;
    wf_buf_free(&b);
    return ok;
}

/* The type of the next message that decodes within ms, the message in
 * msg; WF_CMSG_UNKNOWN when none came (or only types this build does not
 * know). */
static wf_cmsg_type_t recv_next(void *sock, int ms)
{
    int64_t end = clusterd_now_ms() + ms;
    for (;;) {
        int64_t left = end - clusterd_now_ms();
        zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };
        if (left <= 0 || zmq_poll(&it, 1, (long)left) <= 0)
            return WF_CMSG_UNKNOWN;
        char buf[WF_CTL_MAX_BYTES], err[WF_PROTO_ERROR_MAX];
        int n = zmq_recv(sock, buf, sizeof buf, 0);
        if (n < 0 || (size_t)n > sizeof buf)
            continue;
        if (wf_ctl_decode(buf, (size_t)n, &ctl, err, sizeof err) != WF_OK)
            continue;
        memset(&msg, 0, sizeof msg);
        wf_cmsg_get(&ctl, &msg, err, sizeof err);
        if (msg.type != WF_CMSG_UNKNOWN)
            return msg.type;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH_TO_WEFTD\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    int port = test_port();
    char coord[64], zep[80];
    snprintf(coord, sizeof coord, "127.0.0.1:%d", port);
    snprintf(zep, sizeof zep, "tcp://127.0.0.1:%d", port);

    static clusterd_t a;
    if (!clusterd_open(&a, "a", "bn"))
        return 1;
    const char *argv_a[] = { argv[1], "--listen", a.endpoint, "--devices", "cpu:2",
                             "--mesh", "ring=2", "--coordinator", coord, "--nodes", "2",
                             "--node-name", "a", "--cluster-timeout-ms", "60000",
                             "--heartbeat-ms", "200", "--heartbeat-timeout-ms", "1000",
                             "--cpu-memory", "256M", "--allow-anonymous", "true", NULL };
    CHECK(clusterd_exec(&a, argv_a, NULL));
    CHECK(notify_scan(&a, TIMEOUT_MS, "READY=1"));
    static wf_status_info_t si;
    CHECK(clusterd_status(&a, &si));

    void *zctx = zmq_ctx_new();
    void *s = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, "x", 1);
    CHECK(zmq_connect(s, zep) == 0);

    CHECK(send_hello(s, si.weft_version, "x\nWATCHDOG=trigger"));
    bool refused = recv_next(s, TIMEOUT_MS) == WF_CMSG_REFUSE;
    CHECK(refused);
    if (refused) {
        printf("refused: %s\n", msg.u.text);
        CHECK(strstr(msg.u.text, "node name") != NULL);
        CHECK(strstr(msg.u.text, "WATCHDOG") == NULL);
    }
    memset(&si, 0, sizeof si);
    CHECK(clusterd_status(&a, &si));
    CHECK(strcmp(si.role, "coordinator") == 0);

    /* the same hello with a good name is answered with a world */
    void *s2 = zmq_socket(zctx, ZMQ_DEALER);
    zmq_setsockopt(s2, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s2, ZMQ_ROUTING_ID, "y", 1);
    CHECK(zmq_connect(s2, zep) == 0);
    CHECK(send_hello(s2, si.weft_version, "y"));
    wf_cmsg_type_t answer = recv_next(s2, TIMEOUT_MS);
    printf("the well-named hello: %s\n", wf_cmsg_type_name(answer));
    CHECK(answer == WF_CMSG_WORLD);
    /* y never gets ready: lost once heartbeat_timeout_ms passes; every
     * notify datagram before that line is checked */
    CHECK(notify_scan(&a, TIMEOUT_MS, "STATUS=cluster: node y lost"));

    zmq_close(s);
    zmq_close(s2);
    zmq_ctx_term(zctx);
    clusterd_close(&a);
    printf("test_cluster_badname: %d failed\n", failed);
    return failed ? 1 : 0;
}
