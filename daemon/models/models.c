/* models.c — registry, loader thread and per-worker shards (models.h). */
#include "models.h"
#include "errf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>
#include <zmq.h>

#include "cluster_msg.h"
#include "model_root.h"
#include "proto_check.h"
#include "safetensors.h"
#include "base/notify.h"

/* ---- worker side --------------------------------------------------------- */

const wf_rank_model_t *wf_rank_models_find(const wf_rank_models_t *rm, uint64_t id)
{
    for (uint32_t i = 0; i < rm->n; i++)
        if (rm->m[i].id == id)
            return &rm->m[i];
    return NULL;
}

void wf_rank_models_clear(wf_rank_models_t *rm)
{
    for (uint32_t i = 0; i < rm->n; i++)
        rm->m[i].run->shard_free(&rm->m[i].shard);
    rm->n = 0;
}

wf_status_t wf_rank_models_sync(wf_rank_models_t *rm, const wf_model_set_t *set,
                                int tp, int tp_rank, const wf_backend_ops_t *ops,
                                wf_backend_ctx_t *ctx, char *err, size_t err_len)
{
    /* drop what the set no longer holds or what was cut for another rank */
    uint32_t k = 0;
    for (uint32_t i = 0; i < rm->n; i++) {
        bool keep = false;
        for (uint32_t j = 0; j < set->n && !keep; j++)
            keep = set->m[j].id == rm->m[i].id && rm->m[i].tp == tp &&
                   rm->m[i].tp_rank == tp_rank;
        if (keep)
            rm->m[k++] = rm->m[i];
        else
            rm->m[i].run->shard_free(&rm->m[i].shard);
    }
    rm->n = k;
    for (uint32_t j = 0; j < set->n; j++) {
        if (wf_rank_models_find(rm, set->m[j].id))
            continue;
        if (rm->n >= WF_MODELS_MAX) {
            wf_errf(err, err_len, "more than %d models", WF_MODELS_MAX);
            return WF_E_INTERNAL;
        }
        const wf_family_run_t *run = wf_family_run_of(set->m[j].host->cfg.fam);
        if (!run) {
            wf_errf(err, err_len, "no family runs model %" PRIu64, set->m[j].id);
            return WF_E_INTERNAL;
        }
        void *sh = NULL;
        wf_status_t st = run->shard_build(set->m[j].host, set->m[j].plan, tp, tp_rank,
                                          ops, ctx, &sh, err, err_len);
        if (st != WF_OK)
            return st;
        rm->m[rm->n].id = set->m[j].id;
        rm->m[rm->n].run = run;
        rm->m[rm->n].tp = tp;
        rm->m[rm->n].tp_rank = tp_rank;
        rm->m[rm->n].shard = sh;
        rm->n++;
    }
    return WF_OK;
}

/* ---- registry -------------------------------------------------------------- */

wf_status_t wf_registry_init(wf_registry_t *r, const char *model_root,
                             char *err, size_t err_len)
{
    memset(r, 0, sizeof *r);
    r->root_fd = -1;
    r->next_id = 1;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        rnd = (uint32_t)wf_now_usec() ^ (uint32_t)getpid();
    r->lid_base = (uint64_t)(rnd | 1u) << 32;
    pthread_mutex_init(&r->gate_mu, NULL);
    pthread_cond_init(&r->gate_cv, NULL);
    r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (r->efd < 0) {
        wf_errf(err, err_len, "eventfd: %s", strerror(errno));
        return WF_E_INTERNAL;
    }
    if (model_root && model_root[0]) {
        wf_status_t st = wf_model_root_open(model_root, &r->root_fd, err, err_len);
        if (st != WF_OK) {
            close(r->efd);
            r->efd = -1;
            return st;
        }
    }
    return WF_OK;
}

/* Pin m's host copy: its slab (model_host.h), one registration, so that
 * no page is registered twice (tensors share pages at 64-byte offsets).
 * A failure to pin is no error (copies from pageable memory work,
 * slower): m->pinned then stays false, so that list_models tells the
 * truth and model_free unpins exactly what is pinned. A copy without a
 * slab, or with a tensor outside it (converted to f32 for the CPU
 * backend, which pins nothing), is not pinned. */
static void host_pin(const wf_registry_t *r, wf_model_t *m)
{
    if (!r->ops || !r->ops->host_register || !r->ops->host_unregister || !m->host ||
        !m->host->slab)
        return;
    const uint8_t *b = m->host->slab;
    for (size_t i = 0; i < m->host->n; i++) {
        const uint8_t *p = m->host->t[i].data;
        if (p < b || p >= b + m->host->slab_bytes)
            return;
    }
    m->pinned = r->ops->host_register(m->host->slab, m->host->slab_bytes) == WF_OK;
}

static void model_free(const wf_registry_t *r, wf_model_t *m)
{
    if (!m)
        return;
    if (m->pinned && m->host)
        r->ops->host_unregister(m->host->slab);
    wf_model_host_free(&m->host);
    if (m->identity) {
        zmq_msg_close(m->identity);
        free(m->identity);
    }
    free(m);
}

void wf_registry_destroy(wf_registry_t *r)
{
    if (r->loading) {
        wf_registry_gate(r, r->loading, false);  /* a gated load stops */
        pthread_join(r->loader, NULL);
        r->loading = NULL;
    }
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        model_free(r, r->m[i]);
        r->m[i] = NULL;
    }
    if (r->root_fd >= 0)
        close(r->root_fd);
    if (r->efd >= 0) {
        close(r->efd);
        pthread_cond_destroy(&r->gate_cv);
        pthread_mutex_destroy(&r->gate_mu);
    }
    r->root_fd = r->efd = -1;
}

wf_model_t *wf_registry_find(const wf_registry_t *r, const char *name)
{
    for (int i = 0; i < WF_MODELS_MAX; i++)
        if (r->m[i] && strcmp(r->m[i]->name, name) == 0)
            return r->m[i];
    return NULL;
}

uint32_t wf_registry_count(const wf_registry_t *r)
{
    uint32_t n = 0;
    for (int i = 0; i < WF_MODELS_MAX; i++)
        n += r->m[i] != NULL;
    return n;
}

static void progress(void *arg, uint64_t done, uint64_t total)
{
    wf_model_t *m = arg;
    atomic_store(&m->bytes_to_load, total);
    atomic_store(&m->bytes_loaded, done);
}

static void human(uint64_t b, char *buf, size_t len)
{
    if (b >= (UINT64_C(1) << 30))
        snprintf(buf, len, "%.2f GiB", (double)b / (double)(UINT64_C(1) << 30));
    else if (b >= (UINT64_C(1) << 20))
        snprintf(buf, len, "%.2f MiB", (double)b / (double)(UINT64_C(1) << 20));
    else
        snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
}

/* Host memory the kernel could give us now (MemAvailable). */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    uint64_t kb = 0;
    if (!f)
        return UINT64_MAX;
    char line[128];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %" SCNu64 " kB", &kb) == 1)
            break;
    fclose(f);
    return kb ? kb * 1024 : UINT64_MAX;
}

/* ---- digests of a model's files (cluster loads) ------------------------- */

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));   /* the same on every host */
    return fnv(h, b, sizeof b);
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fnv(h, s, strlen(s) + 1);
}

#define FNV_START UINT64_C(14695981039346656037)

/* The last component of a path. */
static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* One safetensors file into the digests: its name and size, every tensor
 * (name, dtype, shape; its offset to `headers`) and its __metadata__. */
static void digest_file(wf_model_digest_t *d, const wf_safetensors_t *f)
{
    d->sizes = fnv_str(d->sizes, base_name(wf_safetensors_path(f)));
    d->sizes = fnv_u64(d->sizes, wf_safetensors_file_size(f));
    d->headers = fnv_str(d->headers, base_name(wf_safetensors_path(f)));
    for (size_t i = 0; i < wf_safetensors_metadata_count(f); i++) {
        const char *k, *v;
        wf_safetensors_metadata_at(f, i, &k, &v);
        d->headers = fnv_str(fnv_str(d->headers, k), v);
    }
    for (size_t i = 0; i < wf_safetensors_count(f); i++) {
        const wf_st_tensor_t *t = wf_safetensors_tensor(f, i);
        d->tensors = fnv_str(d->tensors, t->name);
        d->tensors = fnv_u64(d->tensors, (uint64_t)t->dtype);
        d->tensors = fnv_u64(d->tensors, (uint64_t)t->rank);
        for (int k = 0; k < t->rank; k++)
            d->tensors = fnv_u64(d->tensors, (uint64_t)t->shape[k]);
        d->headers = fnv_u64(d->headers, t->offset);
        d->n++;
        d->bytes += t->nbytes;
    }
}

/* dir + "/" + name, as the model files library joins them. */
static bool join_rel(char *buf, size_t len, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    while (dl > 0 && dir[dl - 1] == '/')
        dl--;
    int n = dl == 0 || (dl == 1 && dir[0] == '.')
                ? snprintf(buf, len, "%s", name)
                : snprintf(buf, len, "%.*s/%s", (int)dl, dir, name);
    return n >= 0 && (size_t)n < len;
}

/* The digests of model `m` (opened already: the files are valid) as
 * this node finds them: config.json, then the checkpoint's files (the
 * diffusers layout) or the per-rank files of a sharded one (`files_tp`). */
static wf_status_t digest_make(const wf_registry_t *r, wf_model_t *m,
                               uint32_t files_tp, char *err, size_t err_len)
{
    wf_model_digest_t d = { FNV_START, FNV_START, FNV_START, FNV_START, 0, 0 };
    char rel[WF_MODEL_PATH_MAX + 1];
    char *cfg = NULL;
    size_t cfg_len = 0;
    if (!join_rel(rel, sizeof rel, m->path, "config.json")) {
        wf_errf(err, err_len, "model path too long");
        return WF_E_BAD_FIELD;
    }
    wf_status_t st = wf_model_read_file(r->root_fd, rel, WF_RESOLVE_AUTO,
                                        1u << 20, &cfg, &cfg_len, err, err_len);
    if (st != WF_OK)
        return st;
    d.cfg = fnv(d.cfg, cfg, cfg_len);
    free(cfg);
    if (!m->already_sharded) {
        wf_checkpoint_t *ck = NULL;
        st = wf_checkpoint_open_dir(r->root_fd, m->path, NULL, &ck, err, err_len);
        if (st != WF_OK)
            return st;
        for (size_t i = 0; i < wf_checkpoint_file_count(ck); i++)
            digest_file(&d, wf_checkpoint_file(ck, i));
        wf_checkpoint_close(&ck);
    } else {
        for (uint32_t k = 0; k < files_tp; k++) {
            char name[64];
            snprintf(name, sizeof name, "tp-rank-%05" PRIu32 "-of-%05" PRIu32
                     ".safetensors", k, files_tp);
            wf_safetensors_t *f = NULL;
            if (!join_rel(rel, sizeof rel, m->path, name)) {
                wf_errf(err, err_len, "model path too long");
                return WF_E_BAD_FIELD;
            }
            st = wf_safetensors_open(r->root_fd, rel, NULL, &f, err, err_len);
            if (st != WF_OK)
                return st;
            digest_file(&d, f);
            wf_safetensors_close(&f);
        }
    }
    m->digest = d;
    return WF_OK;
}

/* A gated load: say the model is open (the main thread reads m->digest)
 * and wait for wf_registry_gate. WF_OK to read, WF_E_ABORTED to stop. */
static wf_status_t gate_wait(wf_registry_t *r, wf_model_t *m)
{
    atomic_store(&m->opened, true);
    uint64_t one = 1;
    ssize_t w = write(r->efd, &one, sizeof one);
    (void)w;
    pthread_mutex_lock(&r->gate_mu);
    while (m->gate == WF_GATE_WAIT)
        pthread_cond_wait(&r->gate_cv, &r->gate_mu);
    bool go = m->gate == WF_GATE_GO;
    pthread_mutex_unlock(&r->gate_mu);
    if (go)
        return WF_OK;
    wf_errf(m->err, sizeof m->err, "the load of model '%s' was stopped before "
            "its weights were read", m->name);
    return WF_E_ABORTED;
}

void wf_registry_gate(wf_registry_t *r, wf_model_t *m, bool go)
{
    pthread_mutex_lock(&r->gate_mu);
    if (m->gate == WF_GATE_WAIT)
        m->gate = go ? WF_GATE_GO : WF_GATE_STOP;
    pthread_cond_broadcast(&r->gate_cv);
    pthread_mutex_unlock(&r->gate_mu);
}

bool wf_registry_stop_at_gate(wf_registry_t *r, wf_model_t *m)
{
    if (r->loading != m)
        return false;
    pthread_mutex_lock(&r->gate_mu);
    /* opened is set before the loader takes the lock to wait */
    bool waiting = m->gate == WF_GATE_WAIT && atomic_load(&m->opened);
    if (waiting) {
        m->gate = WF_GATE_STOP;
        pthread_cond_broadcast(&r->gate_cv);
    }
    pthread_mutex_unlock(&r->gate_mu);
    if (!waiting)
        return false;
    pthread_join(r->loader, NULL);  /* it only closes the files now */
    r->loading = NULL;              /* its eventfd writes find nothing */
    wf_registry_remove(r, m);
    return true;
}

static wf_status_t load(wf_registry_t *r, wf_model_t *m)
{
    char *err = m->err;
    size_t err_len = sizeof m->err;
    wf_model_source_t *src = NULL;
    uint32_t files_tp = 0;
    wf_status_t st = wf_model_source_open(r->root_fd, m->path, m->already_sharded,
                                         m->default_plan ? NULL : &m->plan, &src,
                                         &files_tp, err, err_len);
    if (st != WF_OK)
        return st;
    m->cfg = *wf_model_source_config(src);
    m->run = wf_family_run_of(m->cfg.fam);
    if (!m->run) {
        wf_errf(err, err_len, "'%s': this daemon does not run family %s", m->path,
                m->cfg.fam->name);
        st = WF_E_BAD_ARGUMENT;
        goto out;
    }
    m->cfg.fam->schema(m->cfg.b, &m->schema);
    /* a cluster's forward descriptor carries the inputs (cluster_msg.h) */
    for (uint32_t i = 0; i < m->schema.n_inputs; i++)
        if (m->schema.n_inputs > WF_CFJOB_MAX_TENSORS ||
            m->schema.inputs[i].rank > WF_CFJOB_MAX_RANK) {
            wf_errf(err, err_len, "'%s': family %s takes more inputs or dims than a "
                    "forward carries (%d inputs of rank <= %d)", m->path,
                    m->cfg.fam->name, WF_CFJOB_MAX_TENSORS, WF_CFJOB_MAX_RANK);
            st = WF_E_INTERNAL;
            goto out;
        }
    if (m->default_plan)
        m->cfg.fam->default_plan(m->cfg.b, &m->plan);
    m->params = wf_model_source_params(src);
    m->bytes_total = wf_model_source_bytes(src);
    m->dtype = wf_model_source_dtype(src);
    if (m->already_sharded) {
        m->plan = *wf_model_source_plan(src);
        m->default_plan = false;
        if ((int)files_tp != r->load_tp) {
            wf_errf(err, err_len, "'%s' is sharded for tp=%" PRIu32 " but the "
                    "mesh has tp=%d: load it with that tp, or load the full "
                    "checkpoint", m->path, files_tp, r->load_tp);
            st = WF_E_BAD_ARGUMENT;
            goto out;
        }
    }
    st = m->run->plan_check(m->cfg.b, &m->plan, r->load_tp, m->default_plan, err,
                            err_len);
    if (st != WF_OK)
        goto out;
    if (r->ops && (st = m->run->backend_check(m->cfg.b, r->ops, err, err_len)) != WF_OK)
        goto out;
    m->tp = (uint32_t)r->load_tp;
    m->rank_bytes = wf_model_rank_bytes(r, m, r->load_tp);
    if (m->rank_bytes > r->load_avail) {
        char need[32], have[32];
        human(m->rank_bytes, need, sizeof need);
        human(r->load_avail, have, sizeof have);
        wf_errf(err, err_len, "model '%s' does not fit: its shards need %s on "
                "each device at tp=%d, %s free; nothing was loaded", m->name,
                need, r->load_tp, have);
        st = WF_E_NO_MEMORY;
        goto out;
    }
    uint64_t avail = mem_available();
    uint64_t host = r->host_f32 ? m->params * sizeof(float) : m->bytes_total;
    if (host > avail) {
        char need[32], have[32];
        human(host, need, sizeof need);
        human(avail, have, sizeof have);
        wf_errf(err, err_len, "model '%s' does not fit: its host copy needs %s, "
                "%s of host memory available; nothing was loaded", m->name,
                need, have);
        st = WF_E_NO_MEMORY;
        goto out;
    }
    pthread_mutex_lock(&r->gate_mu);
    bool gated = m->gate != WF_GATE_NONE;
    pthread_mutex_unlock(&r->gate_mu);
    if (gated) {
        st = digest_make(r, m, files_tp, err, err_len);
        if (st != WF_OK)
            goto out;
        if ((st = gate_wait(r, m)) != WF_OK)
            goto out;
    }
    st = wf_model_source_read(src, progress, m, &m->host, err, err_len);
    if (st == WF_OK && r->host_f32) {
        st = wf_model_host_to_f32(m->host, err, err_len);
        if (st != WF_OK)
            wf_model_host_free(&m->host);
    }
    if (st == WF_OK)
        host_pin(r, m);
out:
    wf_model_source_close(&src);
    return st;
}

static void *loader_main(void *arg)
{
    wf_registry_t *r = arg;
    wf_model_t *m = r->loading;
    m->status = load(r, m);
    atomic_store(&m->finished, true);   /* before the eventfd: see take_loaded */
    uint64_t one = 1;
    ssize_t w = write(r->efd, &one, sizeof one);
    (void)w;
    return NULL;
}

wf_status_t wf_registry_start_load(wf_registry_t *r,
                                   const wf_load_model_args_t *args, int tp,
                                   uint64_t avail, bool gated, wf_model_t **ret,
                                   char *err, size_t err_len)
{
    if (r->root_fd < 0) {
        wf_errf(err, err_len, "no model_root is configured: set model_root in "
                "the daemon's settings to load models");
        return WF_E_BAD_ARGUMENT;
    }
    /* the decoder checked both already; the registry does not rely on it */
    wf_status_t cs = wf_check_model_name(args->name, strlen(args->name), err, err_len);
    if (cs != WF_OK)
        return cs;
    if (wf_model_path_check(args->path, err, err_len) != WF_OK)
        return WF_E_BAD_FIELD;
    if (wf_registry_find(r, args->name)) {
        wf_errf(err, err_len, "a model named '%s' is already loaded; unload it "
                "first or choose another name", args->name);
        return WF_E_BAD_ARGUMENT;
    }
    /* one load at a time, from the request until it is installed (read
     * but waiting for a reconfiguration to end counts) */
    for (int i = 0; i < WF_MODELS_MAX; i++)
        if (r->m[i] && (r->m[i]->state == WF_MODEL_LOADING ||
                        r->m[i]->state == WF_MODEL_INSTALLING)) {
            wf_errf(err, err_len, "model '%s' is loading; one load at a time, "
                    "retry when it is done", r->m[i]->name);
            return WF_E_BUSY;
        }
    int slot = -1;
    for (int i = 0; i < WF_MODELS_MAX && slot < 0; i++)
        if (!r->m[i])
            slot = i;
    if (slot < 0) {
        wf_errf(err, err_len, "%d models are loaded, the most a daemon holds; "
                "unload one first", WF_MODELS_MAX);
        return WF_E_LIMIT;
    }
    wf_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        wf_errf(err, err_len, "out of memory");
        return WF_E_NO_MEMORY;
    }
    snprintf(m->name, sizeof m->name, "%s", args->name);
    snprintf(m->path, sizeof m->path, "%s", args->path);
    m->already_sharded = args->weights_already_sharded;
    if (args->n_plan == 0) {
        m->default_plan = true;     /* the family's, once config.json is read */
    } else {
        m->plan.n = args->n_plan;
        memcpy(m->plan.rules, args->plan, args->n_plan * sizeof args->plan[0]);
        wf_status_t st = wf_tp_plan_check(&m->plan, err, err_len);
        if (st != WF_OK) {
            free(m);
            return st;
        }
    }
    m->id = r->next_id++;
    m->state = WF_MODEL_LOADING;
    m->gate = gated ? WF_GATE_WAIT : WF_GATE_NONE;
    atomic_init(&m->opened, false);
    atomic_init(&m->finished, false);
    m->t_start_us = wf_now_usec();
    atomic_init(&m->bytes_loaded, 0);
    atomic_init(&m->bytes_to_load, 0);
    r->load_tp = tp;
    r->load_avail = avail;
    r->loading = m;
    int rc = pthread_create(&r->loader, NULL, loader_main, r);
    if (rc != 0) {
        r->loading = NULL;
        free(m);
        wf_errf(err, err_len, "cannot start the loader thread: %s", strerror(rc));
        return WF_E_INTERNAL;
    }
    r->m[slot] = m;
    *ret = m;
    return WF_OK;
}

wf_model_t *wf_registry_take_loaded(wf_registry_t *r, bool *ret_opened)
{
    uint64_t v;
    *ret_opened = false;
    if (read(r->efd, &v, sizeof v) != (ssize_t)sizeof v || !r->loading)
        return NULL;
    wf_model_t *m = r->loading;
    if (!atomic_load(&m->finished)) {
        /* the loader waits at its gate (it writes the eventfd again only
         * once released); the two writes may come as one read: then the
         * end is what counts */
        if (!atomic_load(&m->opened) || m->opened_seen)
            return NULL;
        m->opened_seen = true;
        *ret_opened = true;
        return m;
    }
    pthread_join(r->loader, NULL);
    r->loading = NULL;
    m->load_ms = (wf_now_usec() - m->t_start_us) / 1000;
    return m;
}

void wf_registry_remove(wf_registry_t *r, wf_model_t *m)
{
    for (int i = 0; i < WF_MODELS_MAX; i++)
        if (r->m[i] == m)
            r->m[i] = NULL;
    model_free(r, m);
}

void wf_registry_target_set(const wf_registry_t *r, wf_model_set_t *ret)
{
    ret->n = 0;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        const wf_model_t *m = r->m[i];
        /* state first: a LOADING entry's host is the loader thread's */
        if (!m || (m->state != WF_MODEL_INSTALLING && m->state != WF_MODEL_READY) ||
            !m->host)
            continue;
        ret->m[ret->n].id = m->id;
        ret->m[ret->n].host = m->host;
        ret->m[ret->n].plan = &m->plan;
        ret->n++;
    }
}

wf_status_t wf_registry_check_tp(const wf_registry_t *r, int tp, uint64_t avail,
                                 uint64_t *ret_bytes, char *err, size_t err_len)
{
    uint64_t sum = 0;
    for (int i = 0; i < WF_MODELS_MAX; i++) {
        const wf_model_t *m = r->m[i];
        if (!m || (m->state != WF_MODEL_INSTALLING && m->state != WF_MODEL_READY) ||
            !m->host)
            continue;
        char why[WF_PROTO_ERROR_MAX];
        if (m->run->plan_check(m->cfg.b, &m->plan, tp, m->default_plan, why,
                               sizeof why) != WF_OK) {
            wf_errf(err, err_len, "model '%s' cannot be sharded for tp=%d: %s",
                    m->name, tp, why);
            return WF_E_BAD_ARGUMENT;
        }
        sum += wf_model_rank_bytes(r, m, tp);
    }
    if (sum > avail) {
        char need[32], have[32];
        human(sum, need, sizeof need);
        human(avail, have, sizeof have);
        wf_errf(err, err_len, "the resident models need %s on each device at "
                "tp=%d, %s available", need, tp, have);
        return WF_E_NO_MEMORY;
    }
    if (ret_bytes)
        *ret_bytes = sum;
    return WF_OK;
}

uint64_t wf_model_rank_bytes(const wf_registry_t *r, const wf_model_t *m, int tp)
{
    /* a device shard holds each weight in its checkpoint dtype: the
     * majority dtype is the figure (exact for a checkpoint of one dtype) */
    return m->run ? m->run->shard_bytes(m->cfg.b, &m->plan, tp,
                                        r->ops && r->ops->mem_alloc, m->dtype)
                  : 0;
}

void wf_model_info_fill(const wf_model_t *m, wf_model_info_t *ret)
{
    memset(ret, 0, sizeof *ret);
    snprintf(ret->name, sizeof ret->name, "%s", m->name);
    snprintf(ret->path, sizeof ret->path, "%s", m->path);
    if (m->cfg.fam)
        snprintf(ret->family, sizeof ret->family, "%s", m->cfg.fam->name);
    snprintf(ret->nodes, sizeof ret->nodes, "%s", m->nodes);
    static const char *const states[] = { "loading", "installing", "ready",
                                          "unloading" };
    snprintf(ret->state, sizeof ret->state, "%s", states[m->state]);
    if (m->state == WF_MODEL_LOADING) {
        /* the loader thread owns the other fields until it is done */
        ret->bytes_total = atomic_load(&m->bytes_to_load);
        ret->bytes_loaded = atomic_load(&m->bytes_loaded);
        return;
    }
    const char *dt = m->bytes_total ? wf_dtype_name(m->dtype) : NULL;
    snprintf(ret->dtype, sizeof ret->dtype, "%s", dt ? dt : "");
    ret->params = m->params;
    ret->bytes_total = m->bytes_total;
    ret->bytes_loaded = atomic_load(&m->bytes_loaded);
    ret->host_bytes = m->host ? m->host->bytes : 0;
    ret->rank_bytes = m->rank_bytes;
    ret->tp = m->tp;
    ret->sharded_input = m->already_sharded;
    ret->load_ms = m->state == WF_MODEL_READY ? m->load_ms : 0;
    /* past "loading": the loader opened and checked config.json */
    if (m->cfg.fam) {
        m->cfg.fam->public_config(m->cfg.b, &ret->config);
        ret->schema = m->schema;
    }
}
