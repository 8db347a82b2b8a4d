/* weftctl_models.c — weftctl's resident-model commands: load (with a
 * progress bar from a second connection), unload, models (with each
 * model's config and forward schema), forward (any family's inputs read
 * by name from a safetensors file as the model's schema names them,
 * every output checked against the file's reference and optionally
 * written to a safetensors file) and shard (per-rank checkpoint files,
 * no daemon). See weftctl.c for the command line.
 */
#include "weftctl_cmds.h"
#include "weftctl_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model_host.h"
#include "model_root.h"
#include "safetensors.h"
#include "tensor.h"
#include "tp_plan.h"

/* Read a whole small file (a tp plan) into a NUL-terminated buffer;
 * caller frees. NULL with a message on stderr. */
static char *read_small_file(const char *path, size_t max, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "weftctl: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = buf ? fread(buf, 1, max + 1, f) : 0;
    bool err = ferror(f) != 0;
    fclose(f);
    if (!buf || err || n > max) {
        fprintf(stderr, "weftctl: %s: %s\n", path,
                !buf ? "out of memory" : err ? "read error" : "file too large");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *ret_len = n;
    return buf;
}

/* --tp-plan FILE.json: the wire form of a plan (tp_plan.h), checked. */
static int load_plan_file(const char *path, wf_tp_plan_t *plan)
{
    size_t len = 0;
    char *json = read_small_file(path, 1u << 20, &len);
    if (!json)
        return 1;
    char err[512];
    wf_status_t st = wf_tp_plan_from_json(json, len, path, plan, err, sizeof err);
    free(json);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --tp-plan: %s: %s\n", wf_status_name(st), err);
        return 1;
    }
    return 0;
}

/* A parameter count: 145288, 12.5 M, 11.90 G. */
static void human_count(char *buf, size_t len, uint64_t n)
{
    if (n < 1000000)
        snprintf(buf, len, "%" PRIu64, n);
    else if (n < 1000000000)
        snprintf(buf, len, "%.1f M", (double)n * 1e-6);
    else
        snprintf(buf, len, "%.2f G", (double)n * 1e-9);
}

/* The dtypes of a schema mask, "f32/f16/bf16". */
static void dtypes_text(uint32_t mask, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int d = WF_DTYPE_F32; d <= WF_DTYPE_BF16 && o < len; d++)
        if (mask & (1u << d))
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "/" : "",
                                  wf_dtype_name((wf_dtype_t)d));
}

/* One schema tensor: "hidden_states (B, S_img, in_channels=64) f32/f16/bf16". */
static void print_schema_tensor(const char *indent, const char *what,
                                const wf_schema_tensor_t *t)
{
    char dt[32];
    dtypes_text(t->dtypes, dt, sizeof dt);
    printf("%s%-6s %s (", indent, what, t->name);
    uint32_t rank = t->rank < WF_MAX_RANK ? t->rank : WF_MAX_RANK;
    for (uint32_t d = 0; d < rank; d++) {
        const wf_schema_dim_t *x = &t->dim[d];
        const char *sep = d ? ", " : "";
        if (x->size > 0 && x->sym[0])
            printf("%s%.*s=%" PRId64, sep, (int)sizeof x->sym, x->sym, x->size);
        else if (x->size > 0)
            printf("%s%" PRId64, sep, x->size);
        else
            printf("%s%.*s", sep, (int)sizeof x->sym, x->sym);
    }
    printf(") %s%s\n", dt, t->optional ? " optional" : "");
}

/* A model's config entries on one line and its schema, a line per
 * tensor; nothing while it has none (loading). */
static void print_config_schema(const char *indent, const wf_model_info_t *m)
{
    const wf_model_config_t *c = &m->config;
    if (!c->present)
        return;
    printf("%sconfig", indent);
    for (uint32_t i = 0; i < c->n && i < WF_MODEL_CONFIG_MAX; i++) {
        const wf_model_config_entry_t *e = &c->e[i];
        printf(" %.*s=", (int)sizeof e->key, e->key);
        if (e->kind == WF_CONFIG_FLAG) {
            printf("%s", e->v[0] ? "true" : "false");
        } else if (e->kind == WF_CONFIG_LIST) {
            uint32_t n = e->n < WF_MODEL_CONFIG_VALUES ? e->n : WF_MODEL_CONFIG_VALUES;
            printf("[");
            for (uint32_t j = 0; j < n; j++)
                printf("%s%" PRId64, j ? "," : "", e->v[j]);
            printf("]");
        } else {
            printf("%" PRId64, e->v[0]);
        }
    }
    printf("\n");
    const wf_model_schema_t *s = &m->schema;
    for (uint32_t i = 0; i < s->n_inputs && i < WF_SCHEMA_MAX_INPUTS; i++)
        print_schema_tensor(indent, "input", &s->inputs[i]);
    for (uint32_t i = 0; i < s->n_outputs && i < WF_SCHEMA_MAX_OUTPUTS; i++)
        print_schema_tensor(indent, "output", &s->outputs[i]);
}

static void print_model(const wf_model_info_t *m)
{
    char total[32], host[32], rank[32], params[32];
    human_count(params, sizeof params, m->params);
    ctl_human_bytes(total, sizeof total, m->bytes_total);
    ctl_human_bytes(host, sizeof host, m->host_bytes);
    ctl_human_bytes(rank, sizeof rank, m->rank_bytes);
    printf("model %s  path %s  family %s  dtype %s  state %s\n", m->name, m->path,
           m->family, m->dtype, m->state);
    printf("params %s  checkpoint %s  host copy %s  per rank %s  tp %u%s\n",
           params, total, host, rank, m->tp,
           m->sharded_input ? "  (loaded from per-rank files)" : "");
    printf("device %s  weights as %s%s\n", m->device[0] ? m->device : "?",
           m->compute[0] ? m->compute : "?",
           m->host_pinned ? "  (host copy pinned)" : "");
    if (m->nodes[0])
        printf("nodes %.*s\n", (int)sizeof m->nodes, m->nodes);
    printf("loaded in %.3f s\n", (double)m->load_ms / 1000.0);
    print_config_schema("", m);
}

/* What `load` shares between its loading thread and the progress loop. */
typedef struct load_job {
    wf_client_t *client;        /* connection of the load (its thread only) */
    const char *name, *path;
    wf_load_opts_t opts;
    wf_model_info_t info;       /* filled on success */
    wf_status_t st;             /* the load's status */
    char err[512];              /* its message */
    pthread_mutex_t mu;         /* guards done */
    pthread_cond_t cv;          /* signalled when done */
    bool done;
} load_job_t;

static void *load_thread(void *arg)
{
    load_job_t *j = arg;
    wf_status_t st = wf_load_model(j->client, j->name, j->path, &j->opts, &j->info);
    snprintf(j->err, sizeof j->err, "%s", wf_client_last_error(j->client));
    pthread_mutex_lock(&j->mu);
    j->st = st;
    j->done = true;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Progress of a load on stderr: a bar redrawn with '\r' on a terminal,
 * else one line per 10 %. */
typedef struct progress {
    bool tty;
    int decile;                 /* last tenth printed (lines) */
    bool drawn;                 /* a bar is on the line (tty) */
} progress_t;

static void progress_draw(progress_t *p, const char *name, uint64_t done, uint64_t total)
{
    double frac = total ? (double)done / (double)total : 0.0;
    if (frac > 1.0)
        frac = 1.0;
    char d[32], t[32];
    ctl_human_bytes(d, sizeof d, done);
    ctl_human_bytes(t, sizeof t, total);
    if (p->tty) {
        char bar[31];
        int fill = (int)(frac * 30.0);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\rloading %s [%s] %3d%%  %s / %s   ", name, bar,
                (int)(frac * 100.0), d, t);
        p->drawn = true;
    } else {
        /* each tenth crossed since the last poll gets its line, with its
         * own figure; the last one with the bytes read so far */
        int dec = (int)(frac * 10.0);
        for (int k = p->decile + 1; k <= dec; k++) {
            if (k < dec)
                ctl_human_bytes(d, sizeof d, total / 10 * (uint64_t)k);
            else
                ctl_human_bytes(d, sizeof d, done);
            fprintf(stderr, "loading %s: %3d%%  (%s of %s)\n", name, k * 10, d, t);
        }
        if (dec > p->decile)
            p->decile = dec;
    }
    fflush(stderr);
}

int ctl_cmd_load(const char *endpoint, int timeout_ms, int argc, char **argv)
{
    const char *pos[2] = { NULL, NULL };
    const char *plan_file = NULL;
    int npos = 0;
    bool sharded = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--sharded") == 0) {
            sharded = true;
        } else if (strcmp(argv[i], "--tp-plan") == 0 && i + 1 < argc) {
            plan_file = argv[++i];
        } else if (argv[i][0] == '-' || npos == 2) {
            fprintf(stderr, "weftctl: load: %s: unknown option, missing value or extra "
                    "argument\n", argv[i]);
            return EXIT_USAGE;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos != 2) {
        fprintf(stderr, "weftctl: load NAME PATH [--tp-plan FILE.json] [--sharded]\n");
        return EXIT_USAGE;
    }

    static wf_tp_plan_t plan; /* large: not on the stack */
    load_job_t j;
    memset(&j, 0, sizeof j);
    j.name = pos[0];
    j.path = pos[1];
    j.opts.weights_already_sharded = sharded;
    if (plan_file) {
        if (load_plan_file(plan_file, &plan) != 0)
            return 1;
        j.opts.plan = plan.rules;
        j.opts.n_plan = plan.n;
    }

    /* Two connections: the load blocks one until the model is resident;
     * the other asks list_models for the progress. */
    wf_client_t *poll = NULL;
    wf_status_t st = wf_client_connect(endpoint, timeout_ms, &j.client);
    if (st == WF_OK)
        st = wf_client_connect(endpoint, timeout_ms < 5000 ? timeout_ms : 5000, &poll);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: connect to %s: %s\n",
                endpoint ? endpoint : WF_DEFAULT_ENDPOINT, wf_status_name(st));
        wf_client_destroy(&j.client);
        return 1;
    }
    pthread_mutex_init(&j.mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    if (pthread_create(&th, NULL, load_thread, &j) != 0) {
        fprintf(stderr, "weftctl: cannot start a thread\n");
        pthread_cond_destroy(&j.cv);
        pthread_mutex_destroy(&j.mu);
        wf_client_destroy(&poll);
        wf_client_destroy(&j.client);
        return 1;
    }

    progress_t pr = { .tty = isatty(STDERR_FILENO) == 1, .decile = 0 };
    wf_model_info_t *list = calloc(WF_MODELS_MAX, sizeof *list);
    struct timespec tick;
    pthread_mutex_lock(&j.mu);
    while (!j.done) {
        /* 200 ms after the last poll, or at once when the load returns */
        clock_gettime(CLOCK_MONOTONIC, &tick);
        tick.tv_nsec += 200 * 1000000L;
        if (tick.tv_nsec >= 1000000000L) {
            tick.tv_sec++;
            tick.tv_nsec -= 1000000000L;
        }
        while (!j.done && pthread_cond_timedwait(&j.cv, &j.mu, &tick) != ETIMEDOUT)
            ;
        if (j.done)
            break;
        pthread_mutex_unlock(&j.mu);
        size_t n = 0;
        if (list && wf_list_models(poll, list, WF_MODELS_MAX, &n) == WF_OK) {
            for (size_t i = 0; i < n && i < WF_MODELS_MAX; i++)
                if (strcmp(list[i].name, j.name) == 0 && list[i].bytes_total > 0)
                    progress_draw(&pr, j.name, list[i].bytes_loaded, list[i].bytes_total);
        }
        pthread_mutex_lock(&j.mu);
    }
    pthread_mutex_unlock(&j.mu);
    pthread_join(th, NULL);
    free(list);

    if (j.st == WF_OK)
        progress_draw(&pr, j.name, j.info.bytes_total, j.info.bytes_total);
    if (pr.tty && pr.drawn)
        fputc('\n', stderr);
    int rc = 0;
    if (j.st != WF_OK) {
        fprintf(stderr, "weftctl: load: %s: %s\n", wf_status_name(j.st),
                j.err[0] ? j.err : wf_status_str(j.st));
        rc = 1;
    } else {
        print_model(&j.info);
    }
    pthread_cond_destroy(&j.cv);
    pthread_mutex_destroy(&j.mu);
    wf_client_destroy(&poll);
    wf_client_destroy(&j.client);
    return rc;
}

int ctl_cmd_unload(wf_client_t *c, int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "weftctl: unload NAME\n");
        return EXIT_USAGE;
    }
    wf_status_t st = wf_unload_model(c, argv[0]);
    if (st != WF_OK)
        return ctl_report_error(c, st, "unload");
    printf("unloaded %s\n", argv[0]);
    return 0;
}

int ctl_cmd_models(wf_client_t *c)
{
    wf_model_info_t *m = calloc(WF_MODELS_MAX, sizeof *m);
    if (!m) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    size_t n = 0;
    wf_status_t st = wf_list_models(c, m, WF_MODELS_MAX, &n);
    if (st != WF_OK) {
        free(m);
        return ctl_report_error(c, st, "models");
    }
    printf("%-20s %-8s %-6s %-5s %10s %3s %11s %11s %6s %9s %-6s  %s\n", "NAME", "STATE",
           "FAMILY", "DTYPE", "PARAMS", "TP", "PER RANK", "HOST", "LOADED", "LOAD TIME",
           "DEVICE", "PATH");
    for (size_t i = 0; i < n && i < WF_MODELS_MAX; i++) {
        const wf_model_info_t *x = &m[i];
        char rank[32], host[32], params[32], when[32];
        ctl_human_bytes(rank, sizeof rank, x->rank_bytes);
        ctl_human_bytes(host, sizeof host, x->host_bytes);
        human_count(params, sizeof params, x->params);
        double pct = x->bytes_total
            ? 100.0 * (double)x->bytes_loaded / (double)x->bytes_total : 0.0;
        snprintf(when, sizeof when, "%.1f s", (double)x->load_ms / 1000.0);
        printf("%-20s %-8s %-6s %-5s %10s %3u %11s %11s %5.1f%% %9s %-6s  %s%s\n", x->name,
               x->state, x->family, x->dtype, params, x->tp, rank, host, pct, when,
               x->device[0] ? x->device : "-", x->path,
               x->sharded_input ? " (sharded)" : "");
        if (x->nodes[0])   /* a cluster: where its shards live */
            printf("%-20s nodes %.*s\n", "", (int)sizeof x->nodes, x->nodes);
        /* under the row, never starting with a name: scripts read rows by
         * their first field */
        print_config_schema("    ", x);
    }
    if (n == 0)
        printf("(no models)\n");
    free(m);
    return 0;
}

/* A tensor of the file as a borrowed wf_tensor_t (the mapping's bytes:
 * libweft only reads inputs). False with a message for a scalar. */
static bool file_tensor(const wf_safetensors_t *st, size_t i, wf_tensor_t *t)
{
    const wf_st_tensor_t *x = wf_safetensors_tensor(st, i);
    if (x->rank < 1 || x->numel == 0) {
        fprintf(stderr, "weftctl: tensor %s of %s is a scalar or empty\n", x->name,
                wf_safetensors_path(st));
        return false;
    }
    memset(t, 0, sizeof *t);
    t->data = (void *)wf_safetensors_data(st, i);
    t->dtype = x->dtype;
    t->rank = x->rank;
    memcpy(t->shape, x->shape, sizeof t->shape);
    return true;
}

/* Tolerance factor of a dtype, relative to max |reference|. */
static double dtype_tol(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 1e-4 : dt == WF_DTYPE_F16 ? 4e-3 : 3e-2;
}

/* Named sizes ("B", "S_img") most a forward binds: every dim of every
 * input could name its own. */
#define FWD_MAX_SYMS (WF_SCHEMA_MAX_INPUTS * WF_MAX_RANK)

/* A forward's tensors: the inputs found in the file by the schema's
 * names, the outputs allocated by the schema's shapes. */
typedef struct fwd_io {
    wf_safetensors_t *st;                       /* the --inputs file */
    wf_model_info_t *info;                      /* the model (list_models) */
    wf_tensor_t in_t[WF_SCHEMA_MAX_INPUTS];     /* borrowed from the mapping */
    wf_named_tensor_t in[WF_SCHEMA_MAX_INPUTS];
    size_t n_in;
    wf_tensor_t out_t[WF_SCHEMA_MAX_OUTPUTS];   /* data: malloc'ed here */
    wf_named_tensor_t out[WF_SCHEMA_MAX_OUTPUTS];
    size_t n_out;
    char sym[FWD_MAX_SYMS][WF_SCHEMA_NAME_MAX]; /* named sizes, first seen first */
    int64_t val[FWD_MAX_SYMS];
    size_t n_syms;
} fwd_io_t;

/* The model `name` as list_models reports it, into *ret; false with the
 * message on stderr (the daemon's words for a model it does not hold). */
static bool find_model(wf_client_t *c, const char *name, wf_model_info_t *ret)
{
    wf_model_info_t *m = calloc(WF_MODELS_MAX, sizeof *m);
    if (!m) {
        fprintf(stderr, "weftctl: out of memory\n");
        return false;
    }
    size_t n = 0;
    wf_status_t st = wf_list_models(c, m, WF_MODELS_MAX, &n);
    if (st != WF_OK) {
        free(m);
        ctl_report_error(c, st, "forward: models");
        return false;
    }
    bool found = false;
    for (size_t i = 0; i < n && i < WF_MODELS_MAX && !found; i++)
        if (strcmp(m[i].name, name) == 0) {
            *ret = m[i];
            found = true;
        }
    free(m);
    if (!found) {
        fprintf(stderr, "weftctl: forward: %s: model '%s' is not loaded\n",
                wf_status_name(WF_E_BAD_ARGUMENT), name);
        return false;
    }
    if (!ret->config.present || ret->schema.n_outputs == 0) {
        fprintf(stderr, "weftctl: forward: model '%s' is %s and has no schema yet (or "
                "the daemon is older than protocol version 2)\n", name, ret->state);
        return false;
    }
    return true;
}

/* The file's tensors whose names are schema inputs, in the schema's
 * order, and the named sizes they give (the first tensor naming one
 * gives it; whether the others agree is the daemon's to judge, with its
 * message). A required input the file lacks is left to the daemon too. */
static bool bind_inputs(fwd_io_t *f)
{
    const wf_model_schema_t *s = &f->info->schema;
    for (uint32_t k = 0; k < s->n_inputs && k < WF_SCHEMA_MAX_INPUTS; k++) {
        const wf_schema_tensor_t *si = &s->inputs[k];
        ptrdiff_t i = wf_safetensors_find(f->st, si->name);
        if (i < 0)
            continue;
        wf_tensor_t *t = &f->in_t[f->n_in];
        if (!file_tensor(f->st, (size_t)i, t))
            return false;
        f->in[f->n_in] = (wf_named_tensor_t){ si->name, t };
        f->n_in++;
        for (uint32_t d = 0; d < si->rank && d < (uint32_t)t->rank; d++) {
            if (si->dim[d].size > 0)
                continue;
            size_t j = 0;
            while (j < f->n_syms && strcmp(f->sym[j], si->dim[d].sym) != 0)
                j++;
            if (j == f->n_syms && j < FWD_MAX_SYMS) {
                snprintf(f->sym[j], sizeof f->sym[j], "%s", si->dim[d].sym);
                f->val[j] = t->shape[d];
                f->n_syms++;
            }
        }
    }
    if (f->n_in == 0) {
        fprintf(stderr, "weftctl: %s holds none of the inputs of model '%s'\n",
                wf_safetensors_path(f->st), f->info->name);
        return false;
    }
    return true;
}

/* Allocate every output of the schema in dtype dt, its named sizes from
 * the inputs. */
static bool alloc_outputs(fwd_io_t *f, wf_dtype_t dt)
{
    const wf_model_schema_t *s = &f->info->schema;
    for (uint32_t k = 0; k < s->n_outputs && k < WF_SCHEMA_MAX_OUTPUTS; k++) {
        const wf_schema_tensor_t *so = &s->outputs[k];
        wf_tensor_t *t = &f->out_t[k];
        memset(t, 0, sizeof *t);
        t->dtype = dt;
        t->rank = (int)(so->rank < WF_MAX_RANK ? so->rank : WF_MAX_RANK);
        for (int d = 0; d < t->rank; d++) {
            int64_t v = so->dim[d].size;
            for (size_t j = 0; v <= 0 && j < f->n_syms; j++)
                if (strcmp(f->sym[j], so->dim[d].sym) == 0)
                    v = f->val[j];
            if (v <= 0) {
                fprintf(stderr, "weftctl: output %s: no input of the file gives its "
                        "size %s\n", so->name, so->dim[d].sym);
                return false;
            }
            t->shape[d] = v;
        }
        int64_t numel = wf_tensor_numel(t);
        if (numel <= 0 || numel > ((int64_t)1 << 34)) {
            fprintf(stderr, "weftctl: output %s: shape out of range\n", so->name);
            return false;
        }
        t->data = calloc((size_t)numel, wf_dtype_size(dt));
        if (!t->data) {
            fprintf(stderr, "weftctl: out of memory\n");
            return false;
        }
        f->out[k] = (wf_named_tensor_t){ so->name, t };
        f->n_out = k + 1;
    }
    return true;
}

/* Output `t` against the file's reference `name`_f64 (an fp64 reference
 * stored rounded to f32) or `name`, when it holds one: prints the max
 * abs error and PASS / FAIL. 0 pass or no reference, 1 fail. */
static int check_output(const fwd_io_t *f, const wf_named_tensor_t *o, double in_tol,
                        bool fp8, double rel_tol)
{
    char key[WF_SCHEMA_NAME_MAX + 8];
    snprintf(key, sizeof key, "%s_f64", o->name);
    ptrdiff_t ri = wf_safetensors_find(f->st, key);
    if (ri < 0)
        ri = wf_safetensors_find(f->st, o->name);
    if (ri < 0)
        return 0;
    wf_tensor_t ref_t;
    if (!file_tensor(f->st, (size_t)ri, &ref_t))
        return 1;
    const wf_tensor_t *t = o->tensor;
    int64_t numel = wf_tensor_numel(t);
    if (ref_t.rank != t->rank ||
        memcmp(ref_t.shape, t->shape, (size_t)t->rank * sizeof t->shape[0]) != 0) {
        fprintf(stderr, "weftctl: output %s: the file's reference has another shape\n",
                o->name);
        return 1;
    }
    float *got = malloc((size_t)numel * sizeof *got);
    float *ref = malloc((size_t)numel * sizeof *ref);
    if (!got || !ref) {
        free(got);
        free(ref);
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    wf_convert_to_f32(got, t->data, t->dtype, (size_t)numel);
    wf_convert_to_f32(ref, ref_t.data, ref_t.dtype, (size_t)numel);
    double max_err = 0.0, max_ref = 0.0;
    for (int64_t i = 0; i < numel; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (!(e <= max_err))
            max_err = e; /* NaN sticks */
        if (fabs((double)ref[i]) > max_ref)
            max_ref = fabs((double)ref[i]);
    }
    free(got);
    free(ref);
    /* the looser of the inputs' and the output's dtype */
    double k = fmax(in_tol, dtype_tol(t->dtype));
    /* fp8 attention (q, k, v in e4m3: 2^-4 relative per element, through
     * every block) against a reference without it: a sanity bound */
    if (fp8)
        k = fmax(k, 0.1);
    /* --tolerance: the caller's own bound (one derived for its model and
     * reference) in place of the dtype's */
    if (rel_tol > 0)
        k = rel_tol;
    double tol = k * max_ref;
    bool pass = max_err <= tol;
    if (f->n_out > 1)
        printf("output %s\n", o->name);
    printf("max abs error %.3e (tolerance %.3e) %s\n", max_err, tol, pass ? "PASS" : "FAIL");
    return pass ? 0 : 1;
}

/* Names the safetensors header below takes as they are (no escaping). */
static bool plain_name(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || *s == '.' || *s == '-'))
            return false;
    return true;
}

/* Write every output to the safetensors file `path`: the JSON header,
 * padded with spaces to 8 bytes, then the tensors in order. */
static int write_outputs(const fwd_io_t *f, const char *path)
{
    static const char *const st_dtype[] = { "F32", "F16", "BF16" };
    size_t cap = 256 + f->n_out * (WF_SCHEMA_NAME_MAX + 64 + WF_MAX_RANK * 24);
    char *hdr = malloc(cap);
    if (!hdr) {
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    size_t o = (size_t)snprintf(hdr, cap, "{");
    uint64_t off = 0;
    for (size_t k = 0; k < f->n_out; k++) {
        const wf_tensor_t *t = f->out[k].tensor;
        if (!plain_name(f->out[k].name)) {
            fprintf(stderr, "weftctl: --out: output name '%s' is not [A-Za-z0-9_.-]\n",
                    f->out[k].name);
            free(hdr);
            return 1;
        }
        uint64_t nb = (uint64_t)wf_tensor_numel(t) * wf_dtype_size(t->dtype);
        o += (size_t)snprintf(hdr + o, cap - o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              k ? "," : "", f->out[k].name, st_dtype[t->dtype]);
        for (int d = 0; d < t->rank; d++)
            o += (size_t)snprintf(hdr + o, cap - o, "%s%" PRId64, d ? "," : "", t->shape[d]);
        o += (size_t)snprintf(hdr + o, cap - o, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64
                              "]}", off, off + nb);
        off += nb;
    }
    o += (size_t)snprintf(hdr + o, cap - o, "}");
    while (o % 8 != 0 && o + 1 < cap)
        hdr[o++] = ' ';
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "weftctl: --out %s: %s\n", path, strerror(errno));
        free(hdr);
        return 1;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)o >> (8 * i)); /* little-endian */
    bool ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr, 1, o, fp) == o;
    for (size_t k = 0; ok && k < f->n_out; k++) {
        const wf_tensor_t *t = f->out[k].tensor;
        size_t nb = (size_t)wf_tensor_numel(t) * wf_dtype_size(t->dtype);
        ok = fwrite(t->data, 1, nb, fp) == nb;
    }
    ok = fclose(fp) == 0 && ok;
    free(hdr);
    if (!ok) {
        fprintf(stderr, "weftctl: --out %s: write error\n", path);
        return 1;
    }
    printf("wrote %zu output%s to %s\n", f->n_out, f->n_out == 1 ? "" : "s", path);
    return 0;
}

int ctl_cmd_forward(wf_client_t *c, int argc, char **argv)
{
    const char *model = NULL, *inputs = NULL, *out_path = NULL;
    bool has_odt = false;
    wf_dtype_t odt = WF_DTYPE_F32;
    int64_t iters = 1, deadline_ms = 0, session = 0;
    double threshold = 0, rel_tol = 0;
    bool fp8 = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--fp8") == 0) {
            fp8 = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "weftctl: forward: %s: unknown option or missing value\n",
                    argv[i]);
            return EXIT_USAGE;
        }
        const char *a = argv[i], *v = argv[++i];
        if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--inputs") == 0) {
            inputs = v;
        } else if (strcmp(a, "--out") == 0) {
            out_path = v;
        } else if (strcmp(a, "--out-dtype") == 0) {
            if (strcmp(v, "f32") == 0)
                odt = WF_DTYPE_F32;
            else if (strcmp(v, "f16") == 0)
                odt = WF_DTYPE_F16;
            else if (strcmp(v, "bf16") == 0)
                odt = WF_DTYPE_BF16;
            else {
                fprintf(stderr, "weftctl: --out-dtype: f32, f16 or bf16\n");
                return EXIT_USAGE;
            }
            has_odt = true;
        } else if (strcmp(a, "--iters") == 0) {
            if (!ctl_parse_i64(v, 1, 1 << 20, &iters)) {
                fprintf(stderr, "weftctl: --iters: bad value '%s'\n", v);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--deadline-ms") == 0) {
            if (!ctl_parse_i64(v, 1, UINT32_MAX, &deadline_ms)) {
                fprintf(stderr, "weftctl: --deadline-ms: bad value '%s' (1 .. 2^32-1)\n", v);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--session") == 0) {
            if (!ctl_parse_i64(v, 1, INT64_MAX, &session)) {
                fprintf(stderr, "weftctl: --session: bad value '%s' (1 .. 2^63-1)\n", v);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--tolerance") == 0) {
            char *end = NULL;
            rel_tol = strtod(v, &end);
            if (!end || *end || !isfinite(rel_tol) || rel_tol <= 0) {
                fprintf(stderr, "weftctl: --tolerance: bad value '%s' (> 0, relative to "
                        "max |reference|)\n", v);
                return EXIT_USAGE;
            }
        } else if (strcmp(a, "--cache-threshold") == 0) {
            char *end = NULL;
            threshold = strtod(v, &end);
            if (!end || *end || !isfinite(threshold) || threshold < 0) {
                fprintf(stderr, "weftctl: --cache-threshold: bad value '%s' (>= 0)\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "weftctl: forward: unknown option %s\n", a);
            return EXIT_USAGE;
        }
    }
    if (!model || !inputs) {
        fprintf(stderr, "weftctl: forward --model NAME --inputs FILE.safetensors "
                "[--out FILE.safetensors] [--out-dtype D] [--iters N] [--deadline-ms MS] "
                "[--fp8] [--tolerance REL] [--session ID [--cache-threshold T]]\n");
        return EXIT_USAGE;
    }
    if (threshold > 0 && !session) {
        fprintf(stderr, "weftctl: --cache-threshold needs --session\n");
        return EXIT_USAGE;
    }

    /* The file's directory is the "root" its name is resolved under. */
    char dir[4096], err[512];
    const char *slash = strrchr(inputs, '/');
    const char *base = slash ? slash + 1 : inputs;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == inputs)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - inputs), inputs);
    fwd_io_t *f = calloc(1, sizeof *f);
    wf_model_info_t *info = calloc(1, sizeof *info);
    if (!f || !info) {
        free(f);
        free(info);
        fprintf(stderr, "weftctl: out of memory\n");
        return 1;
    }
    f->info = info;
    int rc = 1, fd = -1;
    double *times = NULL;
    wf_status_t st = wf_model_root_open(dir, &fd, err, sizeof err);
    if (st == WF_OK) {
        st = wf_safetensors_open(fd, base, NULL, &f->st, err, sizeof err);
        close(fd);
    }
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --inputs %s: %s: %s\n", inputs, wf_status_name(st), err);
        goto done;
    }
    if (!find_model(c, model, info) || !bind_inputs(f))
        goto done;
    /* outputs in --out-dtype, else the first input's (FLUX: hidden_states) */
    wf_dtype_t in_dt = f->in_t[0].dtype;
    if (!alloc_outputs(f, has_odt ? odt : in_dt))
        goto done;
    times = malloc((size_t)iters * sizeof *times);
    if (!times) {
        fprintf(stderr, "weftctl: out of memory\n");
        goto done;
    }
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    int64_t reused = 0;
    for (int64_t it = 0; it < iters; it++) {
        double t0 = ctl_now_s();
        /* a session's iterations are its steps 0, 1, ... */
        wf_forward_opts_t fo = { .deadline_ms = (uint32_t)deadline_ms,
                                 .precision = fp8 ? WF_PRECISION_FP8
                                                  : WF_PRECISION_DEFAULT,
                                 .session = (uint64_t)session,
                                 .step = session ? (uint64_t)it : 0,
                                 .cache_threshold = threshold };
        st = wf_forward_named(c, model, f->in, f->n_in, f->out, f->n_out, &fo, &res);
        times[it] = ctl_now_s() - t0;
        if (st != WF_OK) {
            ctl_report_error(c, st, "forward");
            goto done;
        }
        reused += res.cache == WF_CACHE_REUSED;
    }
    if (session) {
        st = wf_end_session(c, (uint64_t)session, NULL, NULL);
        if (st != WF_OK) {
            ctl_report_error(c, st, "end_session");
            goto done;
        }
        printf("session %" PRId64 ": %" PRId64 " of %" PRId64 " steps reused the first-block "
               "cache (threshold %g)\n", session, reused, iters, threshold);
    }
    qsort(times, (size_t)iters, sizeof *times, ctl_cmp_double);
    printf("forward %s ", model);
    for (size_t j = 0; j < f->n_syms; j++)
        printf(" %s=%" PRId64, f->sym[j], f->val[j]);
    printf("  %s -> %s  devices %u  epoch %" PRIu64 "\n", wf_dtype_name(in_dt),
           wf_dtype_name(f->out_t[0].dtype), res.devices, res.epoch);
    printf("time %.3f ms median, %.3f ms best over %" PRId64 " iteration%s "
           "(daemon: queue %" PRIu64 " us, compute %" PRIu64 " us)\n",
           times[iters / 2] * 1e3, times[0] * 1e3, iters, iters == 1 ? "" : "s",
           res.queue_us, res.compute_us);
    double in_tol = 0.0;
    for (size_t j = 0; j < f->n_in; j++)
        in_tol = fmax(in_tol, dtype_tol(f->in_t[j].dtype));
    rc = 0;
    for (size_t k = 0; k < f->n_out; k++)
        rc |= check_output(f, &f->out[k], in_tol, fp8, rel_tol);
    if (out_path)
        rc |= write_outputs(f, out_path);

done:
    for (size_t k = 0; k < WF_SCHEMA_MAX_OUTPUTS; k++)
        free(f->out_t[k].data);
    free(times);
    wf_safetensors_close(&f->st);
    free(info);
    free(f);
    return rc;
}

int ctl_cmd_shard(int argc, char **argv)
{
    const char *root = NULL, *path = NULL, *out = NULL, *plan_file = NULL;
    int64_t tp = 0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "weftctl: shard: %s: unknown option or missing value\n",
                    argv[i]);
            return EXIT_USAGE;
        }
        const char *a = argv[i], *v = argv[++i];
        if (strcmp(a, "--model-root") == 0)
            root = v;
        else if (strcmp(a, "--path") == 0)
            path = v;
        else if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--tp-plan") == 0)
            plan_file = v;
        else if (strcmp(a, "--tp") == 0) {
            if (!ctl_parse_i64(v, 1, 4096, &tp)) {
                fprintf(stderr, "weftctl: --tp: a degree 1..4096, got '%s'\n", v);
                return EXIT_USAGE;
            }
        } else {
            fprintf(stderr, "weftctl: shard: unknown option %s\n", a);
            return EXIT_USAGE;
        }
    }
    if (!root || !path || !out || tp == 0) {
        fprintf(stderr, "weftctl: shard --model-root ROOT --path P --tp T --out DIR "
                "[--tp-plan FILE.json]\n");
        return EXIT_USAGE;
    }
    static wf_tp_plan_t plan; /* large: not on the stack */
    if (plan_file && load_plan_file(plan_file, &plan) != 0)
        return 1;
    char err[512];
    int fd = -1;
    wf_status_t st = wf_model_root_open(root, &fd, err, sizeof err);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: --model-root %s: %s: %s\n", root, wf_status_name(st), err);
        return 1;
    }
    double t0 = ctl_now_s();
    st = wf_model_write_sharded(fd, path, plan_file ? &plan : NULL, (int)tp, out, err,
                               sizeof err);
    close(fd);
    if (st != WF_OK) {
        fprintf(stderr, "weftctl: shard: %s: %s\n", wf_status_name(st), err);
        return 1;
    }
    printf("wrote %s: config.json and %" PRId64 " rank file%s "
           "tp-rank-RRRRR-of-%05" PRId64 ".safetensors (plan: %s) in %.3f s\n",
           out, tp, tp == 1 ? "" : "s", tp, plan_file ? plan_file : "the family's default",
           ctl_now_s() - t0);
    return 0;
}
