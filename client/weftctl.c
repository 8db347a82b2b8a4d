/* weftctl.c — command line of weftd: the option parsing, hello / status / reconfigure and main. The other
 * commands live beside it: weftctl_demo.c (attention-demo) and
 * weftctl_models.c (load / unload / models / forward / shard), declared in
 * weftctl_cmds.h; all of them use weftctl_util.c. It talks
 * to the daemon through libweft only; the model commands also use the
 * model-file library locally (tp_plan.h to read --tp-plan, safetensors.h
 * to read --inputs, model_host.h to write a sharded checkpoint), never to
 * reach the daemon.
 *
 *   weftctl [--endpoint E] [--timeout MS] hello
 *   weftctl [--endpoint E] [--timeout MS] status
 *   weftctl [--endpoint E] [--timeout MS] reconfigure [--dp D] [--ring R]
 *       [--ulysses U] [--tp T]
 *   weftctl [--endpoint E] [--timeout MS] attention-demo [--batch B]
 *       [--seq S] [--kv-seq SKV] [--heads H] [--kv-heads HKV] [--dim D]
 *       [--dtype f32|f16|bf16] [--causal] [--devices N] [--iters N]
 *       [--seed N] [--rotate allgather|alltoall] [--no-fp32-merge]
 *       [--ring-anything] [--ulysses-anything] [--no-load-balance] [--fp8]
 *   weftctl [--endpoint E] [--timeout MS] load NAME PATH
 *       [--tp-plan FILE.json] [--sharded]
 *   weftctl [--endpoint E] [--timeout MS] unload NAME
 *   weftctl [--endpoint E] [--timeout MS] models
 *   weftctl [--endpoint E] [--timeout MS] forward --model NAME
 *       --inputs FILE.safetensors [--out FILE.safetensors]
 *       [--out-dtype f32|f16|bf16] [--iters N] [--deadline-ms MS] [--fp8]
 *       [--tolerance REL] [--session ID [--cache-threshold T]]
 *   weftctl [--endpoint E] [--timeout MS] cancel ID
 *   weftctl shard --model-root ROOT --path P --tp T --out DIR
 *       [--tp-plan FILE.json]
 *   weftctl keygen FILE
 *
 * Before the command: --server-key FILE|KEY (the daemon's public key) and
 * --client-key FILE (this client's key pair) make a tcp:// connection use
 * CURVE; they set WEFT_SERVER_KEY / WEFT_CLIENT_KEY, which libweft reads
 * (so the environment works too). keygen writes a new key pair to FILE
 * (mode 0600) and its public key to FILE.pub; it never overwrites.
 *
 * reconfigure changes the mesh of a running daemon (a degree left out is
 * 1; the product must be the daemon's device count) and prints the old
 * and new mesh and the new epoch. The daemon drains running jobs first,
 * so it can take as long as the longest of them: --timeout bounds it.
 *
 * attention-demo runs seeded random Q/K/V through the daemon and checks
 * the output (and LSE) against the fp64 reference of kernels/reference.h,
 * computed here from the same rounded inputs; it exits 0 only when the error is within the
 * tolerance of the output dtype.
 *
 * load sends load_model (PATH relative to the daemon's model root) on one
 * connection from a thread while the main thread asks list_models on a
 * second one every 200 ms and draws the progress on stderr (a bar redrawn
 * with '\r' on a terminal, else a line per 10 %); it prints the model at
 * the end. Without --timeout it waits up to an hour. --tp-plan reads a
 * plan in its JSON wire form ({"glob": "style" | {"style": s, "blocks":
 * [..]}}); --sharded loads per-rank files written by `shard`.
 *
 * models lists each model's family, state and sizes on one row, and under
 * it (indented) its config entries and its forward schema: a line per
 * input and output with its dims (a named size such as B, or a config
 * field and its value such as in_channels=64) and dtypes.
 *
 * forward asks list_models for the model's schema and reads from a
 * safetensors file every tensor whose name is one of its inputs (FLUX:
 * hidden_states, encoder_hidden_states, pooled_projections, timestep,
 * img_ids, txt_ids, guidance if the model takes it); other tensors are
 * not sent. It allocates every output by the schema's shapes (named
 * sizes from the inputs) in --out-dtype, else the first input's dtype,
 * runs the forward and prints the named sizes and its time. For each
 * output NAME the file holds as `NAME_f64` (preferred) or `NAME`, that
 * tensor is the reference: the max abs error is checked against a
 * tolerance of max|ref| times 1e-4 (f32), 4e-3 (f16) or 3e-2 (bf16), the
 * loosest of the inputs' and the output's dtypes (--tolerance REL: REL
 * instead, a bound the caller derived for its model and reference):
 * PASS, or FAIL and exit 1. --out writes every output, under its schema
 * name, to a safetensors file.
 *
 * forward --deadline-ms gives each forward that deadline (deadline_ms:
 * WF_E_DEADLINE when it is not done that long after the daemon got it).
 *
 * cancel sends op 9 for request id ID (the id status and the daemon's log
 * name): an admin client (CURVE key with role admin, or root / the
 * daemon's user on ipc://) cancels a queued or running job of any
 * connection; its owner gets WF_E_CANCELLED. It prints "cancelled ID" when
 * the daemon found the job and exits 1 otherwise (no such job queued or
 * running: WF_E_BAD_ARGUMENT; a job across cluster nodes: WF_E_BUSY).
 *
 * shard writes the per-rank layout of model_host.h for T ranks locally,
 * without a daemon (ROOT is the model root, P the model directory under it).
 *
 * Endpoint: --endpoint, else $WEFT_ENDPOINT, else WF_DEFAULT_ENDPOINT.
 * Exit codes: 0 success, 1 job / daemon error, a failed check or a file
 * that cannot be read, 2 usage.
 */
#include "weftctl_cmds.h"
#include "weftctl_util.h"
#include "keys.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f)
{
    fprintf(f,
        "usage: weftctl [--endpoint E] [--timeout MS] [--server-key FILE|KEY]\n"
        "               [--client-key FILE] COMMAND [options]\n"
        "commands:\n"
        "  hello            protocol handshake; prints what the daemon reports\n"
        "  status           mesh, epoch, devices (rank, coordinates), memory,\n"
        "                   queue, counters\n"
        "  reconfigure      change the mesh: --dp D --ring R --ulysses U --tp T\n"
        "                   (absent = 1; product = devices); waits for the\n"
        "                   running jobs to drain\n"
        "  attention-demo   run a random attention job and check it against\n"
        "                   an fp64 reference; options:\n"
        "      --batch B --seq S --kv-seq SKV --heads H --kv-heads HKV\n"
        "      --dim D --dtype f32|f16|bf16 --causal --devices N --iters N\n"
        "      --seed N --rotate allgather|alltoall --no-fp32-merge\n"
        "      --ring-anything --ulysses-anything --no-load-balance\n"
        "      --fp8 (precision fp8, checked against the fp8 reference)\n"
        "  load NAME PATH [--tp-plan FILE.json] [--sharded]\n"
        "                   load a model (PATH under the daemon's model root);\n"
        "                   progress on stderr, the model on stdout; without\n"
        "                   --timeout waits up to an hour\n"
        "  unload NAME      unload a model\n"
        "  models           list the models (family, state, size, tp, progress)\n"
        "                   with each one's config and forward schema\n"
        "  forward --model NAME --inputs FILE.safetensors [--out FILE.safetensors]\n"
        "          [--out-dtype D] [--iters N] [--deadline-ms MS] [--fp8]\n"
        "          [--session ID [--cache-threshold T]]\n"
        "                   run a forward on the file's tensors named as the\n"
        "                   model's schema inputs; checks each output NAME\n"
        "                   against the file's NAME_f64 / NAME; --out writes\n"
        "                   every output; --session: the iterations are that\n"
        "                   denoising session's steps (first-block cache with\n"
        "                   --cache-threshold), ended after the last\n"
        "  cancel ID        cancel queued or running request ID (an admin client\n"
        "                   cancels any connection's job)\n"
        "  shard --model-root ROOT --path P --tp T --out DIR [--tp-plan FILE.json]\n"
        "                   write per-rank checkpoint files (no daemon needed)\n"
        "  keygen FILE      write a CURVE key pair to FILE (mode 0600) and its\n"
        "                   public key to FILE.pub (never overwrites)\n"
        "endpoint: --endpoint, else $WEFT_ENDPOINT, else %s\n"
        "keys (tcp:// only): --server-key (the daemon's FILE.pub or its Z85 key)\n"
        "      and --client-key (this client's FILE), else $WEFT_SERVER_KEY and\n"
        "      $WEFT_CLIENT_KEY; none: no CURVE\n"
        "exit: 0 ok, 1 job or daemon error / failed check / unreadable file,\n"
        "      2 usage\n",
        WF_DEFAULT_ENDPOINT);
}

/* ---- cancel ------------------------------------------------------------ */

static int cmd_cancel(wf_client_t *c, int argc, char **argv)
{
    int64_t id;
    if (argc != 1 || !ctl_parse_i64(argv[0], 0, INT64_MAX, &id)) {
        fprintf(stderr, "weftctl: cancel ID (a request id, 0 .. 2^63-1)\n");
        return EXIT_USAGE;
    }
    wf_status_t st = wf_cancel_id(c, (uint64_t)id);
    if (st != WF_OK)
        return ctl_report_error(c, st, "cancel");
    printf("cancelled %" PRId64 "\n", id);
    return 0;
}

/* ---- hello / status --------------------------------------------------- */

static int cmd_hello(wf_client_t *c)
{
    wf_hello_info_t h;
    wf_status_t st = wf_hello(c, &h);
    if (st != WF_OK)
        return ctl_report_error(c, st, "hello");
    char hb[32], tb[32];
    ctl_human_bytes(hb, sizeof hb, h.max_header_bytes);
    ctl_human_bytes(tb, sizeof tb, h.max_tensor_bytes);
    printf("weftd %s, protocol %u, backend %s, %u device%s\n",
           h.weft_version, h.protocol, h.backend, h.devices,
           h.devices == 1 ? "" : "s");
    printf("limits: header %s, tensor %s, %u tensors per request\n",
           hb, tb, h.max_tensors);
    return 0;
}

/* "WF_E_QUEUE_FULL 3, WF_E_LIMIT 1" or "none" */
static void print_codes(const char *what, uint32_t n, const wf_code_count_t *cc)
{
    if (n > WF_STATUS_MAX_CODES)
        n = WF_STATUS_MAX_CODES;
    printf("  %-10s ", what);
    if (n == 0)
        printf("none");
    for (uint32_t i = 0; i < n; i++)
        printf("%s%s %" PRIu64, i ? ", " : "", wf_status_name((wf_status_t)cc[i].code),
               cc[i].count);
    printf("\n");
}

/* The counters of a daemon that sends them (0.2 on). */
static void print_counters(const wf_status_counters_t *c)
{
    printf("\ncounters since start:\n");
    uint32_t nop = c->op_count < WF_STATUS_MAX_OPS ? c->op_count : WF_STATUS_MAX_OPS;
    for (uint32_t i = 0; i < nop; i++) {
        const wf_op_counters_t *o = &c->ops[i];
        printf("  %-10s served %" PRIu64 "  failed %" PRIu64, o->op, o->served, o->failed);
        if (o->served)
            printf("  latency p50 %.1f ms  p99 %.1f ms  max %.1f ms",
                   (double)o->p50_us / 1e3, (double)o->p99_us / 1e3,
                   (double)o->max_us / 1e3);
        printf("\n");
    }
    print_codes("refused", c->refused_count, c->refused);
    print_codes("failed", c->failed_count, c->failed);
    printf("  %-10s %" PRIu64 " ok, %" PRIu64 " failed, %.1f s in all\n",
           "reconfig", c->reconfigurations, c->reconfigurations_failed,
           (double)c->reconfigure_ms / 1e3);
    printf("  %-10s %" PRIu64 " refused, %" PRIu64 " admitted  nodes lost %" PRIu64 "\n",
           "handshakes", c->handshakes_refused, c->handshakes_admitted, c->nodes_lost);
}

static int cmd_status(wf_client_t *c)
{
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    wf_status_t st = wf_status(c, s);
    if (st != WF_OK) {
        free(s);
        return ctl_report_error(c, st, "status");
    }
    char rss[32];
    ctl_human_bytes(rss, sizeof rss, s->rss_bytes);
    printf("weftd %s (%s)  epoch %" PRIu64 "  uptime %.1f s  rss %s\n",
           s->weft_version, s->backend, s->epoch,
           (double)s->uptime_ms / 1000.0, rss);
    printf("mesh dp=%u ring=%u ulysses=%u tp=%u  epoch %" PRIu64 "%s\n",
           s->mesh.dp, s->mesh.ring, s->mesh.ulysses, s->mesh.tp, s->epoch,
           s->reconfiguring ? "  (reconfiguring)" : "");
    printf("queue %u/%u  in flight %u  served %" PRIu64 "  failed %" PRIu64
           "  rejected %" PRIu64 "\n\n",
           s->queue_depth, s->queue_capacity, s->in_flight, s->jobs_served,
           s->jobs_failed, s->requests_rejected);
    printf("%-6s %-10s %4s %-16s %12s %12s %6s %10s %s\n", "DEVICE", "NAME",
           "RANK", "[DP,RING,ULY,TP]", "MEM USED", "MEM TOTAL", "USED%", "JOBS",
           "BUSY");
    uint32_t n = s->device_count;
    if (n > WF_STATUS_MAX_DEVICES)
        n = WF_STATUS_MAX_DEVICES;
    for (uint32_t i = 0; i < n; i++) {
        const wf_device_info_t *d = &s->devices[i];
        char used[32], total[32];
        ctl_human_bytes(used, sizeof used, d->memory_used);
        ctl_human_bytes(total, sizeof total, d->memory_total);
        double pct = d->memory_total
            ? 100.0 * (double)d->memory_used / (double)d->memory_total : 0.0;
        char coords[48];
        snprintf(coords, sizeof coords, "[%u,%u,%u,%u]", d->coords[0],
                 d->coords[1], d->coords[2], d->coords[3]);
        printf("%-6u %-10s %4u %-16s %12s %12s %5.1f%% %10" PRIu64 " %s\n",
               d->index, d->name, d->rank, coords, used, total, pct,
               d->jobs_served, d->busy ? "yes" : "no");
    }
    if (s->role[0]) {
        printf("\ncluster: %s of %s  state %s  world epoch %" PRIu64 "  %u rank(s)"
               "  world id %s\n", s->role, s->coordinator, s->cluster_state,
               s->world_epoch, s->world_size, s->world_id[0] ? s->world_id : "-");
        printf("%-20s %-10s %10s %6s\n", "NODE", "STATE", "FIRST RANK", "RANKS");
        uint32_t nn = s->node_count < WF_STATUS_MAX_NODES ? s->node_count
                                                          : WF_STATUS_MAX_NODES;
        for (uint32_t i = 0; i < nn; i++)
            printf("%-20s %-10s %10u %6u\n", s->nodes[i].name, s->nodes[i].state,
                   s->nodes[i].first_rank, s->nodes[i].ranks);
    }
    if (s->counters.present)
        print_counters(&s->counters);
    free(s);
    return 0;
}

/* ---- keygen ----------------------------------------------------------- */

static int cmd_keygen(int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '\0' || argv[0][0] == '-') {
        fprintf(stderr, "weftctl: keygen takes one argument: FILE\n");
        return EXIT_USAGE;
    }
    wf_keypair_t kp;
    char err[512];
    wf_status_t st = wf_keypair_generate(&kp, err, sizeof err);
    if (st == WF_OK)
        st = wf_keypair_write(argv[0], &kp, err, sizeof err);
    if (st != WF_OK) {
        explicit_bzero(&kp, sizeof kp);
        fprintf(stderr, "weftctl: keygen: %s\n", err);
        return 1;
    }
    printf("wrote %s (key pair, mode 0600) and %s.pub\n", argv[0], argv[0]);
    printf("public key: %s\n", kp.public_key);
    explicit_bzero(&kp, sizeof kp);
    return 0;
}

/* ---- reconfigure ------------------------------------------------------ */

static int cmd_reconfigure(wf_client_t *c, int argc, char **argv)
{
    wf_mesh_degrees_t m = { 1, 1, 1, 1 };
    for (int i = 0; i < argc; i++) {
        uint32_t *dst = NULL;
        if (strcmp(argv[i], "--dp") == 0) dst = &m.dp;
        else if (strcmp(argv[i], "--ring") == 0) dst = &m.ring;
        else if (strcmp(argv[i], "--ulysses") == 0) dst = &m.ulysses;
        else if (strcmp(argv[i], "--tp") == 0) dst = &m.tp;
        int64_t v;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "weftctl: reconfigure: %s: unknown option or missing "
                    "value\n", argv[i]);
            return EXIT_USAGE;
        }
        if (!ctl_parse_i64(argv[i + 1], 1, 4096, &v)) {
            fprintf(stderr, "weftctl: %s: a degree 1..4096, got '%s'\n", argv[i],
                    argv[i + 1]);
            return EXIT_USAGE;
        }
        *dst = (uint32_t)v;
        i++;
    }
    wf_status_info_t *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    wf_status_t st = wf_status(c, s);
    if (st != WF_OK) {
        free(s);
        return ctl_report_error(c, st, "status");
    }
    wf_mesh_degrees_t old = s->mesh;
    uint64_t old_epoch = s->epoch;
    free(s);
    uint64_t epoch = 0;
    st = wf_reconfigure(c, &m, &epoch);
    if (st != WF_OK)
        return ctl_report_error(c, st, "reconfigure");
    printf("mesh dp=%u ring=%u ulysses=%u tp=%u (epoch %" PRIu64 ") -> "
           "dp=%u ring=%u ulysses=%u tp=%u (epoch %" PRIu64 ")\n",
           old.dp, old.ring, old.ulysses, old.tp, old_epoch,
           m.dp, m.ring, m.ulysses, m.tp, epoch);
    return 0;
}

int main(int argc, char **argv)
{
    const char *endpoint = getenv("WEFT_ENDPOINT");
    int64_t timeout = 30000;
    bool timeout_given = false;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--endpoint") == 0 && i + 1 < argc) {
            endpoint = argv[++i];
        } else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
            if (!ctl_parse_i64(argv[++i], 1, INT32_MAX, &timeout)) {
                fprintf(stderr, "weftctl: --timeout: milliseconds > 0\n");
                return EXIT_USAGE;
            }
            timeout_given = true;
        } else if ((strcmp(argv[i], "--server-key") == 0 ||
                    strcmp(argv[i], "--client-key") == 0) && i + 1 < argc) {
            /* libweft reads them from the environment, for every
             * connection (load opens two of its own) */
            const char *var = argv[i][2] == 's' ? "WEFT_SERVER_KEY" : "WEFT_CLIENT_KEY";
            if (!argv[i + 1][0]) {
                fprintf(stderr, "weftctl: %s: empty value\n", argv[i]);
                return EXIT_USAGE;
            }
            setenv(var, argv[++i], 1);
        } else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            usage(stdout);
            return 0;
        } else {
            break;
        }
    }
    if (i >= argc || argv[i][0] == '-') {
        usage(stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[i++];
    static const char *const commands[] = { "hello", "status", "attention-demo",
                                            "reconfigure", "load", "unload", "models",
                                            "forward", "cancel", "shard", "keygen" };
    size_t k = 0;
    while (k < sizeof commands / sizeof commands[0] && strcmp(cmd, commands[k]) != 0)
        k++;
    if (k == sizeof commands / sizeof commands[0]) {
        fprintf(stderr, "weftctl: unknown command '%s'\n", cmd);
        usage(stderr);
        return EXIT_USAGE;
    }
    if ((strcmp(cmd, "hello") == 0 || strcmp(cmd, "status") == 0 ||
         strcmp(cmd, "models") == 0) && i < argc) {
        fprintf(stderr, "weftctl: %s takes no arguments\n", cmd);
        return EXIT_USAGE;
    }
    if (endpoint && !*endpoint)
        endpoint = NULL;
    /* shard works on files only; load opens its own two connections */
    if (strcmp(cmd, "shard") == 0)
        return ctl_cmd_shard(argc - i, argv + i);
    if (strcmp(cmd, "keygen") == 0)
        return cmd_keygen(argc - i, argv + i);
    if (strcmp(cmd, "load") == 0)
        return ctl_cmd_load(endpoint, timeout_given ? (int)timeout : LOAD_DEFAULT_TIMEOUT_MS,
                            argc - i, argv + i);

    wf_client_t *c = NULL;
    wf_status_t st = wf_client_connect(endpoint, (int)timeout, &c);
    if (st != WF_OK) {
        const char *why = wf_client_last_error(NULL);
        fprintf(stderr, "weftctl: connect to %s: %s%s%s\n",
                endpoint ? endpoint : WF_DEFAULT_ENDPOINT, wf_status_name(st),
                why[0] ? ": " : "", why);
        return 1;
    }
    int rc;
    if (strcmp(cmd, "hello") == 0)
        rc = cmd_hello(c);
    else if (strcmp(cmd, "status") == 0)
        rc = cmd_status(c);
    else if (strcmp(cmd, "reconfigure") == 0)
        rc = cmd_reconfigure(c, argc - i, argv + i);
    else if (strcmp(cmd, "unload") == 0)
        rc = ctl_cmd_unload(c, argc - i, argv + i);
    else if (strcmp(cmd, "models") == 0)
        rc = ctl_cmd_models(c);
    else if (strcmp(cmd, "forward") == 0)
        rc = ctl_cmd_forward(c, argc - i, argv + i);
    else if (strcmp(cmd, "cancel") == 0)
        rc = cmd_cancel(c, argc - i, argv + i);
    else
        rc = ctl_cmd_demo(c, argc - i, argv + i);
    wf_client_destroy(&c);
    return rc;
}
