/* test_client_auth.c — end to end: weftd's client plane (README
 * "Security") against real daemons over real sockets, through libweft.
 *
 * usage: test_client_auth WEFTD curve   a daemon on tcp://127.0.0.1:PORT
 *                                       with key_file and client_keys:
 *   (a) a client without keys gets WF_E_AUTH (from the refused
 *       handshake: waiting out its 60 s timeout would read WF_E_TIMEOUT)
 *       and the daemon's log names the refusal and the address;
 *   (b) a key not in client_keys: WF_E_AUTH, logged with the address;
 *   (c) a wrong server key: WF_E_AUTH;
 *   (d) a submit key: hello, status, attention (checked against the fp64
 *       reference) succeed; reconfigure, load_model, unload_model get
 *       WF_E_DENIED naming the op and the role (logged with the key's
 *       name), while an admin client's 8 jobs in flight beside it all
 *       come back right;
 *   (e) an admin key reconfigures (and gets past the role check of
 *       unload_model); the server key given as a Z85 string works too;
 *   (f) SIGHUP with a bad client_keys keeps the old keys; SIGHUP after
 *       the submit key was removed: that key is refused on a new
 *       connection and the submit client connected since (d) is closed
 *       (its next request fails), the admin key still works; SIGHUP with
 *       the admin key listed as submit: the admin client connected since
 *       (d) is refused reconfigure (WF_E_DENIED) on its next request;
 *   (g) protected mode: tcp://0.0.0.0 without client_keys exits non-zero
 *       naming client_keys and allow_anonymous; with allow_anonymous it
 *       serves (warning in the log); tcp://127.0.0.1 without keys serves
 *       anonymous clients as submit (reconfigure WF_E_DENIED), as admin
 *       with anonymous_admin = true; client_keys without key_file exits
 *       non-zero; a client with keys against an anonymous daemon gets
 *       WF_E_AUTH; a secret key file readable by others is refused by
 *       libweft; the same rules for a TCP socket passed by systemd
 *       (LISTEN_FDS) on 0.0.0.0 (refused) and 127.0.0.1 (served).
 * usage: test_client_auth WEFTD ipc     (h) ipc:// peer credentials: a
 *       child that setuid(65534) (nobody) on a socket file of mode 0666
 *       gets WF_E_DENIED for reconfigure while its attention works; root
 *       reconfigures; a local peer that is no ZMTP client is refused and
 *       logged by its credentials ("client uid U pid P on ipc://...").
 *       Needs root: exits 77 (skipped) otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "keys.h"
#include "support/clusterd.h"
#include "support/jobcheck.h"
#include "support/wait.h"
#include "weft.h"


/* the clients' timeout: a refusal the client waited out reads
 * WF_E_TIMEOUT, never WF_E_AUTH (libweft gives WF_E_AUTH only for the
 * refused handshake it is told of) */
#define TIMEOUT_MS ((int)WAIT_EVENT_MS)

static const char *weftd;
static char dir[] = "/tmp/weft-cauth-XXXXXX";

/* ---- files ------------------------------------------------------------ */

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

/* A key pair written to dir/name (and name.pub); its keys in *kp. */
static void make_keys(const char *name, wf_keypair_t *kp)
{
    char path[256], err[512];
    path_of(path, sizeof path, name);
    if (wf_keypair_generate(kp, err, sizeof err) != WF_OK ||
        wf_keypair_write(path, kp, err, sizeof err) != WF_OK) {
        fprintf(stderr, "keys %s: %s\n", name, err);
        exit(1);
    }
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* Wait for `needle` in the file (the daemon logs from its threads; the
 * client may see the refusal first): a log line is an event, bounded by
 * WAIT_EVENT_MS. */
static bool log_has(const char *path, const char *needle)
{
    return clusterd_file_find(path, needle, (int)wait_bound_ms(WAIT_EVENT_MS), NULL, 0);
}

/* ---- daemons ---------------------------------------------------------- */

typedef struct wd {
    clusterd_node_t n;
    char log[256];
} wd_t;

/* Start weftd --devices cpu:2 with `extra` flags (NULL-terminated), its
 * stderr into dir/TAG.log; wait for READY=1 when want_ready. */
static bool wd_start_fd(wd_t *w, const char *tag, const char *const *extra,
                        bool want_ready, int listen_fd);

static bool wd_start(wd_t *w, const char *tag, const char *const *extra,
                     bool want_ready)
{
    return wd_start_fd(w, tag, extra, want_ready, -1);
}

/* wd_start, with `listen_fd` (>= 0) passed as systemd's socket (fd 3,
 * LISTEN_FDS=1, LISTEN_PID the daemon's). */
static bool wd_start_fd(wd_t *w, const char *tag, const char *const *extra,
                        bool want_ready, int listen_fd)
{
    memset(w, 0, sizeof *w);
    if (!clusterd_node_open(&w->n, "auth", tag))
        return false;
    char name[64];
    snprintf(name, sizeof name, "%s.log", tag);
    path_of(w->log, sizeof w->log, name);
    const char *argv[32] = { weftd, "--devices", "cpu:2", "--cpu-memory", "256M",
                             "--log-level", "info" };
    size_t n = 7;
    for (size_t i = 0; extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    /* the test's own client keys are not the daemon's business */
    static const char *const unset[] = { "WEFT_SERVER_KEY", "WEFT_CLIENT_KEY", NULL };
    spawn_opts_t o = { .unset = unset, .log_path = w->log };
    if (listen_fd >= 0) {
        o.listen_fds = &listen_fd;
        o.n_listen_fds = 1;
    }
    if (!clusterd_spawn(&w->n.p, argv, &o))
        return false;
    if (!want_ready)
        return true;
    return clusterd_node_wait(&w->n, "READY=1", TIMEOUT_MS, NULL, 0);
}

static void wd_stop(wd_t *w)
{
    clusterd_kill(&w->n.p, SIGTERM);
    CHECKM(w->n.p.reaped && WIFEXITED(w->n.p.exit_status) &&
           WEXITSTATUS(w->n.p.exit_status) == 0, "daemon %s did not exit 0", w->log);
    clusterd_node_close(&w->n);
}

/* ---- clients ---------------------------------------------------------- */

static wf_client_t *connect_keys(const char *ep, const char *server, const char *client)
{
    char sp[256], cp[256];
    path_of(sp, sizeof sp, server);
    path_of(cp, sizeof cp, client);
    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect_curve(ep, TIMEOUT_MS, server[0] == '=' ? server + 1
                                                                              : sp,
                                             cp, &c);
    CHECKM(st == WF_OK, "connect_curve %s: %s: %s", client, wf_status_name(st),
           wf_client_last_error(NULL));
    return c;
}

/* One call that must be refused at the handshake: WF_E_AUTH, which
 * libweft returns when its socket monitor reports the refusal, before the
 * client's timeout (a wait-out would read WF_E_TIMEOUT). */
static void expect_auth(wf_client_t *c, const char *what)
{
    if (!c)
        return;
    int64_t t0 = clusterd_now_ms();
    wf_hello_info_t h;
    wf_status_t st = wf_hello(c, &h);
    int64_t ms = clusterd_now_ms() - t0;
    CHECKM(st == WF_E_AUTH, "%s: hello gave %s: %s", what, wf_status_name(st),
           wf_client_last_error(c));
    printf("%s: %s in %" PRId64 " ms: %s\n", what, wf_status_name(st), ms,
           wf_client_last_error(c));
}

static const jcase_t job_case = {
    .name = "auth", .B = 1, .Sq = 48, .Skv = 40, .Hq = 4, .Hkv = 2, .D = 32,
    .in = WF_DTYPE_F32, .out = WF_DTYPE_F32, .causal = 0, .want_lse = true,
};

/* An attention job through c, checked against the fp64 reference. */
static bool job_ok(wf_client_t *c, uint64_t seed, const char *who)
{
    jbuf_t a;
    if (!jbuf_init(&a, &job_case, seed))
        return false;
    wf_attention_opts_t o = opts_of(&job_case);
    wf_job_result_t r;
    wf_status_t st = wf_attention(c, &a.q, &a.k, &a.v, &o, &a.out, a.lse, &r);
    double eo = INFINITY, el = INFINITY, to, tl;
    if (st == WF_OK)
        jbuf_errors(&a, &eo, &el);
    jcase_tolerances(&job_case, false, &to, &tl);
    bool ok = st == WF_OK && eo <= to && el <= tl;
    CHECKM(ok, "%s: attention %s (%s), errors out %.3g lse %.3g", who,
           wf_status_name(st), wf_client_last_error(c), eo, el);
    jbuf_free(&a);
    return ok;
}

static void expect_denied(wf_client_t *c, wf_status_t st, const char *op)
{
    const char *msg = wf_client_last_error(c);
    CHECKM(st == WF_E_DENIED && strstr(msg, op) && strstr(msg, "submit"),
           "%s by submit: %s: %s", op, wf_status_name(st), msg);
    printf("%s by submit: %s: %s\n", op, wf_status_name(st), msg);
}

/* ---- the CURVE endpoint: (a) .. (f) ------------------------------------ */

static void write_clients(const char *path, const wf_keypair_t *admin,
                          const wf_keypair_t *submit)
{
    char text[512];
    int n = snprintf(text, sizeof text, "# test clients\nadmin %s ops-1\n",
                     admin->public_key);
    if (submit)
        snprintf(text + n, sizeof text - (size_t)n, "submit %s runner.a\n",
                 submit->public_key);
    write_text(path, text);
}

static void test_curve(void)
{
    wf_keypair_t kd, ka, ks, kx;
    make_keys("daemon", &kd);
    make_keys("admin", &ka);
    make_keys("submit", &ks);
    make_keys("stranger", &kx);
    char keyfile[256], clients[256], ep[64];
    path_of(keyfile, sizeof keyfile, "daemon");
    path_of(clients, sizeof clients, "clients");
    write_clients(clients, &ka, &ks);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", test_port());
    const char *extra[] = { "--listen", ep, "--key-file", keyfile, "--client-keys",
                            clients, NULL };
    wd_t w;
    if (!wd_start(&w, "curve", extra, true)) {
        CHECKM(false, "daemon did not start (log %s)", w.log);
        clusterd_node_close(&w.n);
        return;
    }
    CHECKM(log_has(w.log, "CURVE, keys of client_keys (1 admin, 1 submit)"),
           "start-up line");

    /* (a) no keys at all */
    wf_client_t *c = NULL;
    unsetenv("WEFT_SERVER_KEY");
    unsetenv("WEFT_CLIENT_KEY");
    CHECKM(wf_client_connect(ep, TIMEOUT_MS, &c) == WF_OK, "connect");
    expect_auth(c, "(a) no keys");
    CHECKM(strstr(wf_client_last_error(c), "CURVE keys") != NULL, "(a) message");
    wf_client_destroy(&c);
    /* the daemon's side of the refusal, with the peer's address when it
     * was read before the connection went (almost always; not checked) */
    CHECKM(log_has(w.log, "auth: client ") && log_has(w.log, " refused: it "),
           "(a) logged");

    /* (b) a key the daemon does not know */
    c = connect_keys(ep, "daemon.pub", "stranger");
    expect_auth(c, "(b) unknown key");
    CHECKM(c && strstr(wf_client_last_error(c), "refused this client's key"),
           "(b) message");
    wf_client_destroy(&c);
    char line[128];
    snprintf(line, sizeof line, "auth: refused %s from 127.0.0.1", kx.public_key);
    CHECKM(log_has(w.log, line), "(b) logged with the key and the address");

    /* (c) a wrong server key (the admin's own public key) */
    c = connect_keys(ep, "admin.pub", "admin");
    expect_auth(c, "(c) wrong server key");
    wf_client_destroy(&c);

    /* (d) submit beside admin */
    wf_client_t *adm = connect_keys(ep, "daemon.pub", "admin");
    wf_client_t *sub = connect_keys(ep, "daemon.pub", "submit");
    if (!adm || !sub)
        goto out;
    enum { N_ADMIN = 8 };
    jbuf_t ab[N_ADMIN];
    wf_job_t *aj[N_ADMIN] = { NULL };
    wf_attention_opts_t o = opts_of(&job_case);
    for (int i = 0; i < N_ADMIN; i++) {
        CHECKM(jbuf_init(&ab[i], &job_case, 100 + (uint64_t)i), "buffers");
        wf_status_t st = wf_attention_submit(adm, &ab[i].q, &ab[i].k, &ab[i].v, &o,
                                             &ab[i].out, ab[i].lse, &aj[i]);
        CHECKM(st == WF_OK, "admin submit %d: %s", i, wf_status_name(st));
    }
    wf_hello_info_t h;
    CHECKM(wf_hello(sub, &h) == WF_OK && h.devices == 2, "(d) submit hello: %s",
           wf_client_last_error(sub));
    wf_status_info_t *si = calloc(1, sizeof *si);
    CHECKM(si && wf_status(sub, si) == WF_OK, "(d) submit status: %s",
           wf_client_last_error(sub));
    wf_mesh_degrees_t before = si ? si->mesh : (wf_mesh_degrees_t){ 0, 0, 0, 0 };
    uint64_t epoch_before = si ? si->epoch : 0;
    job_ok(sub, 7, "(d) submit");
    wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
    uint64_t epoch = 0;
    expect_denied(sub, wf_reconfigure(sub, &dp2, &epoch), "reconfigure");
    expect_denied(sub, wf_load_model(sub, "m", "flux", NULL, NULL), "load_model");
    expect_denied(sub, wf_unload_model(sub, "m"), "unload_model");
    CHECKM(log_has(w.log, "reconfigure denied: key 'runner.a' from 127.0.0.1, role "
                          "submit"), "(d) denial logged");
    /* nothing happened: same mesh, same epoch */
    CHECKM(si && wf_status(sub, si) == WF_OK &&
           memcmp(&si->mesh, &before, sizeof before) == 0 && si->epoch == epoch_before,
           "(d) the mesh did not change");
    free(si);
    job_ok(sub, 8, "(d) submit after the denials");
    for (int i = 0; i < N_ADMIN; i++) {
        if (!aj[i])
            continue;
        wf_status_t st = wf_job_wait(adm, aj[i], TIMEOUT_MS);
        double eo = INFINITY, el = INFINITY, to, tl;
        if (st == WF_OK)
            jbuf_errors(&ab[i], &eo, &el);
        jcase_tolerances(&job_case, false, &to, &tl);
        CHECKM(st == WF_OK && eo <= to && el <= tl, "(d) admin job %d: %s (%s), "
               "errors %.3g %.3g", i, wf_status_name(st), wf_job_error(aj[i]), eo, el);
        wf_job_destroy(adm, &aj[i]);
    }
    for (int i = 0; i < N_ADMIN; i++)
        jbuf_free(&ab[i]);
    printf("(d) %d admin jobs beside the submit client: checked\n", N_ADMIN);

    /* (e) admin reconfigures, and passes the role check of unload */
    epoch = 0;
    wf_status_t st = wf_reconfigure(adm, &dp2, &epoch);
    CHECKM(st == WF_OK && epoch == epoch_before + 1, "(e) admin reconfigure: %s: %s",
           wf_status_name(st), wf_client_last_error(adm));
    job_ok(adm, 9, "(e) admin after reconfigure");
    st = wf_unload_model(adm, "absent");
    CHECKM(st != WF_OK && st != WF_E_DENIED, "(e) admin unload: %s",
           wf_status_name(st));
    CHECKM(wf_reconfigure(adm, &before, &epoch) == WF_OK, "(e) back: %s",
           wf_client_last_error(adm));
    char z85[WF_KEY_Z85_LEN + 2] = "=";
    memcpy(z85 + 1, kd.public_key, WF_KEY_Z85_LEN + 1);
    wf_client_t *adm2 = connect_keys(ep, z85, "admin");
    CHECKM(adm2 && wf_hello(adm2, &h) == WF_OK, "(e) server key as Z85: %s",
           adm2 ? wf_client_last_error(adm2) : "");
    wf_client_destroy(&adm2);

    /* (f) SIGHUP: a bad file keeps the old keys */
    write_text(clients, "admin not-a-key x\n");
    kill(w.n.p.pid, SIGHUP);
    CHECKM(clusterd_node_wait(&w.n, "READY=1", TIMEOUT_MS, NULL, 0), "(f) reload 1");
    /* the STATUS= lines in order: the reload's is the last one sent */
    char status[1024] = "";
    bool said = false;
    for (int i = 0; i < 8 && !said &&
                    clusterd_node_wait(&w.n, "STATUS=", TIMEOUT_MS, status, sizeof status);
         i++)
        said = strstr(status, "last reload failed: client_keys not read; the previous "
                              "keys stay") != NULL;
    CHECKM(said, "(f) STATUS says the reload failed: %s", status);
    CHECKM(log_has(w.log, "the old keys stay"), "(f) bad file logged");
    CHECKM(log_has(w.log, "reload failed in part: client_keys not read"),
           "(f) the reload logged as failed");
    c = connect_keys(ep, "daemon.pub", "submit");
    CHECKM(c && wf_hello(c, &h) == WF_OK, "(f) submit key kept: %s",
           c ? wf_client_last_error(c) : "");
    wf_client_destroy(&c);
    /* ... the submit key removed */
    write_clients(clients, &ka, NULL);
    kill(w.n.p.pid, SIGHUP);
    CHECKM(clusterd_node_wait(&w.n, "READY=1", TIMEOUT_MS, NULL, 0), "(f) reload 2");
    CHECKM(log_has(w.log, "client_keys re-read: 1 admin, 0 submit"), "(f) reloaded");
    /* the next STATUS= line, after reload 2's READY=1, is the good reload's */
    CHECKM(clusterd_node_wait(&w.n, "STATUS=", TIMEOUT_MS, status, sizeof status) &&
               !strstr(status, "reload failed"), "(f) STATUS after a good reload: %s",
           status);
    c = connect_keys(ep, "daemon.pub", "submit");
    expect_auth(c, "(f) removed submit key");
    wf_client_destroy(&c);
    c = connect_keys(ep, "daemon.pub", "admin");
    CHECKM(c && wf_hello(c, &h) == WF_OK, "(f) admin key still works: %s",
           c ? wf_client_last_error(c) : "");
    if (c)
        job_ok(c, 10, "(f) admin after reload");
    wf_client_destroy(&c);
    /* the connected admin client keeps working */
    job_ok(adm, 11, "(f) connected admin after reload");
    /* the submit client connected since (d): closed by the reload */
    CHECKM(log_has(w.log, "(submit:runner.a) closed: its key was removed from client_keys"),
           "(f) the revoked connection closed");
    st = sub ? wf_hello(sub, &h) : WF_E_AUTH;
    CHECKM(st != WF_OK, "(f) revoked client's next request: %s", wf_status_name(st));
    printf("(f) a revoked open connection: its next hello gives %s\n", wf_status_name(st));
    /* the admin key demoted to submit: the open admin connection with it */
    {
        char text[256];
        snprintf(text, sizeof text, "submit %s ops-1\n", ka.public_key);
        write_text(clients, text);
    }
    kill(w.n.p.pid, SIGHUP);
    CHECKM(clusterd_node_wait(&w.n, "READY=1", TIMEOUT_MS, NULL, 0), "(f) reload 3");
    CHECKM(log_has(w.log, "(admin:ops-1) is now submit:ops-1"), "(f) role change logged");
    st = wf_reconfigure(adm, &before, &epoch);
    CHECKM(st == WF_E_DENIED, "(f) demoted open connection reconfigures: %s: %s",
           wf_status_name(st), wf_client_last_error(adm));
    job_ok(adm, 12, "(f) demoted open connection still submits");
out:
    wf_client_destroy(&sub);
    wf_client_destroy(&adm);
    wd_stop(&w);
}

/* ---- protected mode: (g) ---------------------------------------------- */

static void test_protected(void)
{
    char ep[64], ep_any[64];
    snprintf(ep_any, sizeof ep_any, "tcp://0.0.0.0:%d", test_port());
    wd_t w;
    const char *refused[] = { "--listen", ep_any, NULL };
    if (wd_start(&w, "open", refused, false)) {
        CHECKM(clusterd_wait_exit(&w.n.p, 60000) && WIFEXITED(w.n.p.exit_status) &&
               WEXITSTATUS(w.n.p.exit_status) != 0, "(g) 0.0.0.0 without keys "
               "must not start");
        CHECKM(log_has(w.log, "refusing to serve") && log_has(w.log, "client_keys") &&
               log_has(w.log, "allow_anonymous"), "(g) the refusal explains itself");
    }
    clusterd_node_close(&w.n);

    const char *allowed[] = { "--listen", ep_any, "--allow-anonymous", "true", NULL };
    if (wd_start(&w, "anon", allowed, true)) {
        CHECKM(log_has(w.log, "anyone who reaches it may do anything"), "(g) warning");
        wd_stop(&w);
    } else {
        CHECKM(false, "(g) allow_anonymous daemon did not start");
        clusterd_node_close(&w.n);
    }

    char clients[256], keyfile[256];
    path_of(clients, sizeof clients, "clients");
    path_of(keyfile, sizeof keyfile, "daemon");
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", test_port());
    const char *nokey[] = { "--listen", ep, "--client-keys", clients, NULL };
    if (wd_start(&w, "nokeyfile", nokey, false)) {
        CHECKM(clusterd_wait_exit(&w.n.p, 60000) && WIFEXITED(w.n.p.exit_status) &&
               WEXITSTATUS(w.n.p.exit_status) != 0, "(g) client_keys without key_file");
        CHECKM(log_has(w.log, "key_file is not"), "(g) key_file named");
    }
    clusterd_node_close(&w.n);

    const char *loop[] = { "--listen", ep, NULL };
    if (!wd_start(&w, "loopback", loop, true)) {
        CHECKM(false, "(g) loopback daemon did not start");
        clusterd_node_close(&w.n);
        return;
    }
    CHECKM(log_has(w.log, "anonymous loopback access"), "(g) loopback notice");
    wf_client_t *c = NULL;
    CHECKM(wf_client_connect(ep, TIMEOUT_MS, &c) == WF_OK, "connect");
    wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
    wf_hello_info_t hi;
    CHECKM(c && wf_hello(c, &hi) == WF_OK, "(g) anonymous loopback client served");
    wf_status_t rs = c ? wf_reconfigure(c, &dp2, NULL) : WF_E_INTERNAL;
    CHECKM(rs == WF_E_DENIED, "(g) anonymous loopback client is submit: reconfigure %s",
           wf_status_name(rs));
    wf_client_destroy(&c);
    /* anonymous_admin: the operator says local users are admins */
    {
        char ep2[64];
        snprintf(ep2, sizeof ep2, "tcp://127.0.0.1:%d", test_port());
        const char *adm_loop[] = { "--listen", ep2, "--anonymous-admin", "true", NULL };
        wd_t w2;
        if (wd_start(&w2, "loopback-admin", adm_loop, true)) {
            CHECKM(wf_client_connect(ep2, TIMEOUT_MS, &c) == WF_OK, "connect");
            CHECKM(c && wf_reconfigure(c, &dp2, NULL) == WF_OK, "(g) anonymous_admin: "
                   "reconfigure: %s", c ? wf_client_last_error(c) : "");
            wf_client_destroy(&c);
            wd_stop(&w2);
        } else {
            CHECKM(false, "(g) anonymous_admin daemon did not start");
            clusterd_node_close(&w2.n);
        }
    }
    /* keys against a daemon without CURVE: refused at once */
    c = connect_keys(ep, "daemon.pub", "admin");
    expect_auth(c, "(g) keys against an anonymous daemon");
    wf_client_destroy(&c);
    /* a secret key file that others may read: libweft refuses it */
    char admin[256];
    path_of(admin, sizeof admin, "admin");
    chmod(admin, 0644);
    char pub[256];
    path_of(pub, sizeof pub, "daemon.pub");
    wf_status_t st = wf_client_connect_curve(ep, TIMEOUT_MS, pub, admin, &c);
    CHECKM(st == WF_E_BAD_ARGUMENT && c == NULL &&
           strstr(wf_client_last_error(NULL), "readable by group or others"),
           "(g) open secret file: %s: %s", wf_status_name(st),
           wf_client_last_error(NULL));
    chmod(admin, 0600);
    /* environment: one of the two is an error */
    setenv("WEFT_SERVER_KEY", pub, 1);
    st = wf_client_connect(ep, TIMEOUT_MS, &c);
    CHECKM(st == WF_E_BAD_ARGUMENT && strstr(wf_client_last_error(NULL),
                                             "WEFT_CLIENT_KEY"),
           "(g) WEFT_SERVER_KEY alone: %s: %s", wf_status_name(st),
           wf_client_last_error(NULL));
    unsetenv("WEFT_SERVER_KEY");
    wf_client_destroy(&c);
    wd_stop(&w);
}

/* A listening TCP socket on addr (network order) and a free port. */
static int tcp_listener(uint32_t addr, int *ret_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = addr };
    socklen_t len = sizeof sa;
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        perror("listener");
        exit(1);
    }
    *ret_port = ntohs(sa.sin_port);
    return fd;
}

/* (g) with socket activation: the socket systemd passes follows the same
 * rules as `listen`. */
static void test_activation(void)
{
    int port;
    int fd = tcp_listener(htonl(INADDR_ANY), &port);
    const char *none[] = { NULL };
    wd_t w;
    if (wd_start_fd(&w, "act-any", none, false, fd)) {
        CHECKM(clusterd_wait_exit(&w.n.p, 60000) && WIFEXITED(w.n.p.exit_status) &&
               WEXITSTATUS(w.n.p.exit_status) != 0, "(g) activated 0.0.0.0 without "
               "keys must not start");
        CHECKM(log_has(w.log, "refusing to serve tcp://0.0.0.0:") &&
               log_has(w.log, "allow_anonymous"), "(g) activated: the refusal");
    }
    clusterd_node_close(&w.n);
    close(fd);

    fd = tcp_listener(htonl(INADDR_LOOPBACK), &port);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    if (wd_start_fd(&w, "act-loop", none, true, fd)) {
        close(fd);
        CHECKM(log_has(w.log, "anonymous loopback access"), "(g) activated loopback");
        wf_client_t *c = NULL;
        wf_hello_info_t h;
        CHECKM(wf_client_connect(ep, TIMEOUT_MS, &c) == WF_OK && wf_hello(c, &h) == WF_OK,
               "(g) activated loopback hello: %s", c ? wf_client_last_error(c) : "");
        wf_client_destroy(&c);
        wd_stop(&w);
    } else {
        close(fd);
        CHECKM(false, "(g) activated loopback daemon did not start");
        clusterd_node_close(&w.n);
    }
}

/* ---- ipc peer credentials: (h) ------------------------------------------ */

static int test_ipc(void)
{
    if (geteuid() != 0) {
        printf("SKIP: ipc peer credentials need root (setuid to nobody)\n");
        return 77;
    }
    wd_t w;
    /* the socket file in a directory nobody can reach */
    char ep[300];
    snprintf(ep, sizeof ep, "ipc://%s/weftd.sock", dir);
    chmod(dir, 0755);
    const char *extra[] = { "--listen", ep, "--socket-mode", "0666", NULL };
    if (!wd_start(&w, "ipc", extra, true)) {
        CHECKM(false, "ipc daemon did not start (log %s)", w.log);
        clusterd_node_close(&w.n);
        return 1;
    }
    /* whether or not this tree sets socket_mode, make the file 0666 */
    chmod(ep + 6, 0666);
    pid_t pid = fork();
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) {
            perror("setuid");
            _exit(3);
        }
        wf_client_t *c = NULL;
        if (wf_client_connect(ep, TIMEOUT_MS, &c) != WF_OK)
            _exit(4);
        wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
        wf_status_t st = wf_reconfigure(c, &dp2, NULL);
        printf("(h) reconfigure by uid 65534: %s: %s\n", wf_status_name(st),
               wf_client_last_error(c));
        fflush(stdout);
        if (st != WF_E_DENIED || !strstr(wf_client_last_error(c), "uid 65534"))
            _exit(5);
        st = wf_unload_model(c, "m");
        if (st != WF_E_DENIED)
            _exit(6);
        if (!job_ok(c, 21, "(h) nobody's attention"))
            _exit(7);
        wf_client_destroy(&c);
        _exit(0);
    }
    /* its four calls are each bounded by the client timeout */
    int status = 0;
    bool done = pid > 0 && spawn_reap(pid, -1, 4 * TIMEOUT_MS + (int)WAIT_EVENT_MS, &status);
    if (pid > 0 && !done)
        spawn_signal_reap(pid, -1, SIGKILL, (int)WAIT_EVENT_MS, "the unprivileged child",
                          &status, NULL);
    CHECKM(done && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "(h) the unprivileged child failed (exit %d)",
           done && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECKM(log_has(w.log, "reconfigure denied: uid 65534 pid"), "(h) denial logged");
    wf_client_t *c = NULL;
    CHECKM(wf_client_connect(ep, TIMEOUT_MS, &c) == WF_OK, "connect");
    wf_mesh_degrees_t dp2 = { 2, 1, 1, 1 };
    CHECKM(c && wf_reconfigure(c, &dp2, NULL) == WF_OK, "(h) root reconfigures: %s",
           c ? wf_client_last_error(c) : "");
    if (c)
        job_ok(c, 22, "(h) root's attention");
    wf_client_destroy(&c);
    /* a local peer that sends no ZMTP greeting: the gate's log line names
     * it by its credentials, "client uid U pid P on ipc://..." */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char *sock = ep + strlen("ipc://");
    const bool fits = strlen(sock) < sizeof sa.sun_path;
    if (fits)
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
    static const char junk[64] = "GET / HTTP/1.1\r\n\r\n";
    CHECKM(fd >= 0 && fits && connect(fd, (const struct sockaddr *)&sa, sizeof sa) == 0 &&
               write(fd, junk, sizeof junk) == (ssize_t)sizeof junk,
           "(h) a raw local peer: %s", strerror(errno));
    char want[160], got[512] = "";
    snprintf(want, sizeof want, "client plane: client uid %u pid %d on ipc://",
             (unsigned)geteuid(), (int)getpid());
    bool named = clusterd_file_find(w.log, want, (int)wait_bound_ms(WAIT_EVENT_MS), got,
                                    sizeof got);
    CHECKM(named, "(h) no log line with '%s' in %s", want, w.log);
    if (named)
        printf("(h) %s\n", got);
    if (fd >= 0)
        close(fd);
    wd_stop(&w);
    return 0;
}

/* ---- main --------------------------------------------------------------- */

static void cleanup(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[2], "curve") != 0 && strcmp(argv[2], "ipc") != 0)) {
        fprintf(stderr, "usage: %s WEFTD curve|ipc\n", argv[0]);
        return 2;
    }
    weftd = argv[1];
    signal(SIGPIPE, SIG_IGN);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = 0;
    if (strcmp(argv[2], "curve") == 0) {
        test_curve();
        test_protected();
        test_activation();
    } else {
        rc = test_ipc();
    }
    cleanup();
    if (rc == 77)
        return 77;
    if (failed) {
        fprintf(stderr, "%d check(s) failed\n", failed);
        return 1;
    }
    printf("all client-plane checks passed\n");
    return 0;
}
