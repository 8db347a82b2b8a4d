/* test_auth.c — CURVE keys on disk (proto/keys.h) and the ZAP handler
 * (daemon/base/zap.h), over real ZeroMQ sockets:
 *   - a key pair written by wf_keypair_write reads back; the secret file
 *     is 0600 and refused once group-readable; an existing file is never
 *     overwritten; a public key that is not the secret's is refused;
 *   - allow-lists: roles, names, keys checked line by line, duplicates
 *     refused, the error names the line;
 *   - a CURVE ROUTER in the clients' domain admits a listed key and its
 *     messages carry "ROLE:NAME"; a stranger's key is refused (nothing
 *     arrives, the refusal is counted); a key removed by wf_zap_set is
 *     refused on its next connection; the nodes' domain gives the name;
 *   - a client pinning the wrong server key gets nothing through.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "base/log.h"
#include "base/zap.h"
#include "keys.h"
#include "support/check.h"

static char dir[] = "/tmp/weft-auth-XXXXXX";

static void test_files(void)
{
    char err[256], path[256];
    wf_keypair_t kp, back;
    CHECK(wf_keypair_generate(&kp, err, sizeof err) == WF_OK, "generate: %s", err);
    snprintf(path, sizeof path, "%s/daemon.key", dir);
    CHECK(wf_keypair_write(path, &kp, err, sizeof err) == WF_OK, "write: %s", err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "secret file mode %o",
          (unsigned)(st.st_mode & 0777));
    CHECK(wf_keypair_read(path, true, &back, err, sizeof err) == WF_OK &&
          strcmp(back.public_key, kp.public_key) == 0 &&
          strcmp(back.secret_key, kp.secret_key) == 0, "read back: %s", err);
    char pub[300];
    snprintf(pub, sizeof pub, "%s.pub", path);
    CHECK(wf_keypair_read(pub, false, &back, err, sizeof err) == WF_OK &&
          strcmp(back.public_key, kp.public_key) == 0 && back.secret_key[0] == '\0',
          "public file: %s", err);
    CHECK(wf_keypair_read(pub, true, &back, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "no secret key"), "public file as a pair: %s", err);
    CHECK(wf_keypair_write(path, &kp, err, sizeof err) != WF_OK &&
          strstr(err, "exists"), "overwrite refused: %s", err);
    chmod(path, 0640);
    CHECK(wf_keypair_read(path, true, &back, err, sizeof err) == WF_E_BAD_ARGUMENT &&
          strstr(err, "readable by group or others") &&
          !strstr(err, kp.secret_key), "group-readable secret: %s", err);

    /* a public key that is not the secret's */
    wf_keypair_t other;
    wf_keypair_generate(&other, err, sizeof err);
    char text[256];
    snprintf(text, sizeof text, "public-key = %s\nsecret-key = %s\n",
             other.public_key, kp.secret_key);
    CHECK(wf_keypair_parse(text, strlen(text), true, "t", &back, err, sizeof err) ==
          WF_E_BAD_ARGUMENT && strstr(err, "not the secret key's"), "mismatch: %s", err);
    snprintf(text, sizeof text, "public-key = %.39s\n", kp.public_key);
    CHECK(wf_keypair_parse(text, strlen(text), false, "t", &back, err, sizeof err) ==
          WF_E_BAD_ARGUMENT && strstr(err, "t:1"), "short key: %s", err);
    /* a bare public key is a public-key file */
    CHECK(wf_keypair_parse(kp.public_key, 40, false, "t", &back, err, sizeof err) ==
          WF_OK && strcmp(back.public_key, kp.public_key) == 0, "bare key: %s", err);
}

static void test_lists(void)
{
    char err[256], text[1024];
    wf_keypair_t a, b;
    wf_keypair_generate(&a, err, sizeof err);
    wf_keypair_generate(&b, err, sizeof err);
    wf_key_entry_t e[4];
    size_t n = 9;
    snprintf(text, sizeof text, "# clients\nadmin %s ops-1\n\n  # ok\n  submit\t%s  job.runner\n",
             a.public_key, b.public_key);
    CHECK(wf_keylist_parse(text, strlen(text), WF_KEYLIST_CLIENTS, "k", e, 4, &n,
                           err, sizeof err) == WF_OK && n == 2 &&
          e[0].role == WF_ROLE_ADMIN && strcmp(e[0].name, "ops-1") == 0 &&
          e[1].role == WF_ROLE_SUBMIT && strcmp(e[1].name, "job.runner") == 0 &&
          strcmp(e[1].key, b.public_key) == 0, "clients list: %s (n %zu)", err, n);
    /* "K" in a template stands for alice's key */
    const struct { const char *tmpl; const char *want; } bad[] = {
        { "root K x\n", "k:1: role must be" },
        { "submit K\n", "k:1: expected ROLE KEY NAME" },
        { "\nsubmit K a\nadmin K b\n", "k:3: key listed twice" },
        { "submit K bad\\nname\n", "k:1: name must be" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t o = 0;
        for (const char *t = bad[i].tmpl; *t && o + 41 < sizeof text; t++)
            o += (size_t)(*t == 'K' ? snprintf(text + o, sizeof text - o, "%s", a.public_key)
                                    : snprintf(text + o, sizeof text - o, "%c", *t));
        CHECK(wf_keylist_parse(text, strlen(text), WF_KEYLIST_CLIENTS, "k", e, 4,
                               &n, err, sizeof err) != WF_OK &&
              strstr(err, bad[i].want), "bad list %zu: %s", i, err);
    }
    snprintf(text, sizeof text, "submit %.39s~ a\n", a.public_key);
    CHECK(wf_keylist_parse(text, strlen(text), WF_KEYLIST_CLIENTS, "k", e, 4, &n,
                           err, sizeof err) != WF_OK && strstr(err, "Z85"),
          "bad key: %s", err);
    snprintf(text, sizeof text, "n1 %s\nn1 %s\n", a.public_key, b.public_key);
    CHECK(wf_keylist_parse(text, strlen(text), WF_KEYLIST_NODES, "k", e, 4, &n,
                           err, sizeof err) != WF_OK && strstr(err, "k:2: name 'n1'"),
          "duplicate node name: %s", err);
    snprintf(text, sizeof text, "n1 %s\nn2 %s\n", a.public_key, b.public_key);
    CHECK(wf_keylist_parse(text, strlen(text), WF_KEYLIST_NODES, "k", e, 1, &n,
                           err, sizeof err) == WF_E_LIMIT, "list over its bound");

    /* on disk: an allow-list writable by its group or by others is
     * refused, with the path and the mode; 0644 and 0600 are read */
    char path[256];
    snprintf(path, sizeof path, "%s/clients", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "write %s", path);
    if (!f)
        return;
    fprintf(f, "admin %s ops\n", a.public_key);
    fclose(f);
    static const struct { mode_t mode; bool ok; const char *why; } modes[] = {
        { 0600, true, NULL }, { 0644, true, NULL },
        { 0664, false, "writable by its group (mode 664)" },
        { 0666, false, "writable by others (mode 666)" },
        { 0646, false, "writable by others (mode 646)" },
    };
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        chmod(path, modes[i].mode);
        wf_key_entry_t *le = NULL;
        size_t ln = 0;
        err[0] = '\0';
        wf_status_t st = wf_keylist_read(path, WF_KEYLIST_CLIENTS, &le, &ln, err, sizeof err);
        if (modes[i].ok)
            CHECK(st == WF_OK && ln == 1, "mode %03o read: %s", (unsigned)modes[i].mode, err);
        else
            CHECK(st == WF_E_BAD_ARGUMENT && strstr(err, modes[i].why) &&
                      strstr(err, path), "mode %03o refused: '%s'",
                  (unsigned)modes[i].mode, err);
        free(le);
    }
    unlink(path);
}

/* Send "ping" from a new DEALER with key pair `kp` pinned to `server_pub`;
 * the ROUTER's User-Id for it, "" when nothing arrived within 500 ms. */
static void try_client(void *zctx, void *router, const char *ep,
                       const wf_keypair_t *kp, const char *server_pub,
                       char *ret_user, size_t len)
{
    void *d = zmq_socket(zctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    wf_curve_client(d, kp, server_pub);
    zmq_connect(d, ep);
    zmq_send(d, "ping", 4, ZMQ_DONTWAIT);
    ret_user[0] = '\0';
    zmq_pollitem_t it = { .socket = router, .events = ZMQ_POLLIN };
    if (zmq_poll(&it, 1, 500) == 1) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, router, 0);           /* routing id: made here */
        zmq_msg_close(&m);
        zmq_msg_init(&m);
        zmq_msg_recv(&m, router, 0);           /* the peer's frame */
        const char *u = wf_msg_user_id(&m);
        snprintf(ret_user, len, "%s", u ? u : "(none)");
        zmq_msg_close(&m);
        while (1) {
            int more;
            size_t ml = sizeof more;
            zmq_getsockopt(router, ZMQ_RCVMORE, &more, &ml);
            if (!more)
                break;
            zmq_msg_init(&m);
            zmq_msg_recv(&m, router, 0);
            zmq_msg_close(&m);
        }
    }
    zmq_close(d);
}

static void test_zap(void)
{
    char err[256], user[WF_ZAP_USER_MAX + 16];
    wf_log_t log;
    wf_log_init(&log, 2, WF_LOG_INFO);
    void *zctx = zmq_ctx_new();
    wf_zap_t *zap = NULL;
    CHECK(wf_zap_start(zctx, &log, &zap) == WF_OK, "zap start");
    wf_keypair_t server, alice, mallory;
    wf_keypair_generate(&server, err, sizeof err);
    wf_keypair_generate(&alice, err, sizeof err);
    wf_keypair_generate(&mallory, err, sizeof err);
    wf_key_entry_t e = { .role = WF_ROLE_SUBMIT };
    snprintf(e.key, sizeof e.key, "%s", alice.public_key);
    snprintf(e.name, sizeof e.name, "alice");
    CHECK(wf_zap_set(zap, WF_ZAP_CLIENTS, &e, 1) == WF_OK, "set clients");
    CHECK(wf_zap_set(zap, "other", &e, 1) == WF_E_BAD_ARGUMENT, "unknown domain");

    void *router = zmq_socket(zctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(router, ZMQ_LINGER, &zero, sizeof zero);
    CHECK(wf_curve_server(router, &server, WF_ZAP_CLIENTS) == WF_OK, "curve server");
    CHECK(zmq_bind(router, "tcp://127.0.0.1:*") == 0, "bind");
    char ep[128];
    size_t el = sizeof ep;
    zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &el);

    try_client(zctx, router, ep, &alice, server.public_key, user, sizeof user);
    CHECK(strcmp(user, "submit:alice") == 0, "alice admitted as '%s'", user);
    wf_role_t role = wf_zap_client_role(user, NULL);
    CHECK(role == WF_ROLE_SUBMIT, "role of '%s'", user);
    uint64_t refused = wf_zap_refused(zap);
    try_client(zctx, router, ep, &mallory, server.public_key, user, sizeof user);
    CHECK(user[0] == '\0', "stranger's message arrived (user '%s')", user);
    CHECK(wf_zap_refused(zap) > refused, "stranger refused and counted");
    /* alice pinning a wrong server key: the handshake cannot complete */
    try_client(zctx, router, ep, &alice, mallory.public_key, user, sizeof user);
    CHECK(user[0] == '\0', "wrong server key got through (user '%s')", user);
    /* reload without alice */
    CHECK(wf_zap_set(zap, WF_ZAP_CLIENTS, NULL, 0) == WF_OK, "empty list");
    try_client(zctx, router, ep, &alice, server.public_key, user, sizeof user);
    CHECK(user[0] == '\0', "removed key admitted (user '%s')", user);
    /* the nodes' domain gives the name */
    snprintf(e.name, sizeof e.name, "node-b");
    wf_zap_set(zap, WF_ZAP_NODES, &e, 1);
    void *r2 = zmq_socket(zctx, ZMQ_ROUTER);
    zmq_setsockopt(r2, ZMQ_LINGER, &zero, sizeof zero);
    wf_curve_server(r2, &server, WF_ZAP_NODES);
    zmq_bind(r2, "tcp://127.0.0.1:*");
    el = sizeof ep;
    zmq_getsockopt(r2, ZMQ_LAST_ENDPOINT, ep, &el);
    try_client(zctx, r2, ep, &alice, server.public_key, user, sizeof user);
    CHECK(strcmp(user, "node-b") == 0, "node admitted as '%s'", user);
    CHECK(wf_zap_client_role("node-b", NULL) == WF_ROLE_NONE &&
          wf_zap_client_role("root:x", NULL) == WF_ROLE_NONE, "malformed user ids");
    zmq_close(r2);
    zmq_close(router);
    wf_zap_stop(zap);
    zmq_ctx_term(zctx);
}

int main(void)
{
    if (!zmq_has("curve")) {
        fprintf(stderr, "ZeroMQ without CURVE\n");
        return 1;
    }
    if (!mkdtemp(dir))
        return 1;
    test_files();
    test_lists();
    test_zap();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cleanup of %s failed\n", dir);
    printf("test_auth: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
