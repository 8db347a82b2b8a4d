/* fluxio.c — the FLUX and Wan io fixtures for the end-to-end tests
 * (fluxio.h). */
#include "fluxio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <signal.h>

#include "model_root.h"
#include "safetensors.h"
#include "support/check.h"
#include "support/jobcheck.h"
#include "support/spawn.h"
#include "support/wait.h"

static bool take(const wf_safetensors_t *st, const char *name, wf_tensor_t *t,
                 bool need)
{
    ptrdiff_t i = wf_safetensors_find(st, name);
    memset(t, 0, sizeof *t);
    if (i < 0) {
        if (need)
            fprintf(stderr, "fluxio: %s lacks '%s'\n", wf_safetensors_path(st), name);
        return false;
    }
    const wf_st_tensor_t *d = wf_safetensors_tensor(st, (size_t)i);
    t->dtype = d->dtype;
    t->rank = d->rank;
    memcpy(t->shape, d->shape, sizeof t->shape);
    t->data = malloc(d->nbytes ? d->nbytes : 1);
    if (!t->data)
        return false;
    memcpy(t->data, wf_safetensors_data(st, (size_t)i), d->nbytes);
    return true;
}

/* Open `dir`/`file` (message on stderr when it cannot). */
static wf_safetensors_t *io_open(const char *dir, const char *file)
{
    int root = -1;
    char err[512];
    wf_safetensors_t *st = NULL;
    if (wf_model_root_open(dir, &root, err, sizeof err) != WF_OK ||
        wf_safetensors_open(root, file, NULL, &st, err, sizeof err) != WF_OK)
        fprintf(stderr, "fluxio: %s/%s: %s\n", dir, file, err);
    if (root >= 0)
        close(root);
    return st;
}

/* max |out - ref| / max |ref| over ref's elements (NaN in out counts as
 * infinitely wrong); INFINITY when the sizes differ. */
static double rel_error(const wf_tensor_t *ref, const wf_tensor_t *out)
{
    int64_t n = wf_tensor_numel(ref);
    if (n != wf_tensor_numel(out))
        return INFINITY;
    double worst = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double r = load(ref->data, ref->dtype, (size_t)i);
        double o = load(out->data, out->dtype, (size_t)i);
        double e = fabs(o - r);
        if (!(e <= worst))      /* NaN counts as worst */
            worst = isnan(e) ? INFINITY : e;
        if (fabs(r) > mx)
            mx = fabs(r);
    }
    return mx > 0 ? worst / mx : worst;
}

bool fluxio_load(fluxio_t *io, const char *dir, const char *file)
{
    memset(io, 0, sizeof *io);
    wf_safetensors_t *st = io_open(dir, file);
    if (!st)
        return false;
    bool ok = take(st, "hidden_states", &io->hs, true) &&
              take(st, "encoder_hidden_states", &io->enc, true) &&
              take(st, "pooled_projections", &io->pooled, true) &&
              take(st, "timestep", &io->t, true) &&
              take(st, "img_ids", &io->img_ids, true) &&
              take(st, "txt_ids", &io->txt_ids, true);
    io->has_guidance = ok && take(st, "guidance", &io->guidance, false);
    if (ok) {
        io->ref_is_f64 = take(st, "output_f64", &io->ref, false);
        if (!io->ref_is_f64)
            ok = take(st, "output", &io->ref, true);
    }
    wf_safetensors_close(&st);
    if (!ok) {
        fluxio_free(io);
        return false;
    }
    io->in_dtype = io->hs.dtype;
    io->in.hidden_states = &io->hs;
    io->in.encoder_hidden_states = &io->enc;
    io->in.pooled_projections = &io->pooled;
    io->in.timestep = &io->t;
    io->in.img_ids = &io->img_ids;
    io->in.txt_ids = &io->txt_ids;
    io->in.guidance = io->has_guidance ? &io->guidance : NULL;
    return true;
}

void fluxio_free(fluxio_t *io)
{
    wf_tensor_t *all[] = { &io->hs, &io->enc, &io->pooled, &io->t, &io->img_ids,
                           &io->txt_ids, &io->guidance, &io->ref };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]->data);
    memset(io, 0, sizeof *io);
}

bool fluxio_output(const fluxio_t *io, wf_dtype_t dt, wf_tensor_t *ret)
{
    *ret = io->ref;
    ret->dtype = dt;
    int64_t n = wf_tensor_numel(ret);
    ret->data = malloc((size_t)n * wf_dtype_size(dt));
    if (!ret->data)
        return false;
    for (int64_t i = 0; i < n; i++)
        store(ret->data, dt, (size_t)i, NAN);
    return true;
}

double fluxio_error(const fluxio_t *io, const wf_tensor_t *out)
{
    return rel_error(&io->ref, out);
}

double fluxio_tolerance(const fluxio_t *io)
{
    return io->in_dtype == WF_DTYPE_F32 ? 1e-5 : 2e-2;
}

/* ---- Wan ---------------------------------------------------------------- */

const char *const wanio_input_names[WANIO_MAX_IN] = {
    "hidden_states", "timestep", "encoder_hidden_states", "timestep_tokens",
    "encoder_hidden_states_image",
};

bool wanio_load(wanio_t *io, const char *dir, const char *file)
{
    memset(io, 0, sizeof *io);
    wf_safetensors_t *st = io_open(dir, file);
    if (!st)
        return false;
    bool ok = take(st, "output_f64", &io->ref, true);
    for (int i = 0; ok && i < WANIO_MAX_IN; i++)
        if (take(st, wanio_input_names[i], &io->in[io->n], i == 0))
            io->name[io->n++] = wanio_input_names[i];
        else
            ok = i != 0;
    wf_safetensors_close(&st);
    if (!ok)
        wanio_free(io);
    return ok;
}

void wanio_free(wanio_t *io)
{
    for (uint32_t i = 0; i < io->n; i++)
        free(io->in[i].data);
    free(io->ref.data);
    memset(io, 0, sizeof *io);
}

double wanio_forward(wf_client_t *c, const char *model, const wanio_t *io,
                     const wf_tensor_t *ref, wf_status_t *ret_st,
                     wf_job_result_t *ret_res)
{
    wf_job_result_t res;
    memset(&res, 0, sizeof res);
    if (ret_res)
        *ret_res = res;
    wf_tensor_t o = *ref;
    o.dtype = WF_DTYPE_F32;
    int64_t n = wf_tensor_numel(&o);
    o.data = malloc((size_t)n * sizeof(float));
    if (!o.data) {
        *ret_st = WF_E_NO_MEMORY;
        return INFINITY;
    }
    for (int64_t i = 0; i < n; i++)
        ((float *)o.data)[i] = NAN;
    wf_named_tensor_t ins[WANIO_MAX_IN], outs[1] = { { "output", &o } };
    for (uint32_t i = 0; i < io->n; i++)
        ins[i] = (wf_named_tensor_t){ io->name[i], &io->in[i] };
    *ret_st = wf_forward_named(c, model, ins, io->n, outs, 1, NULL, &res);
    double e = *ret_st == WF_OK ? rel_error(ref, &o) : INFINITY;
    if (ret_res)
        *ret_res = res;
    free(o.data);
    return e;
}

/* ---- any family's forward by name ----------------------------------------------- */

static bool batched_name(const char *n)
{
    static const char *const names[] = { "hidden_states", "encoder_hidden_states",
                                         "pooled_projections", "timestep", "guidance",
                                         "timestep_tokens", "encoder_hidden_states_image" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(n, names[i]) == 0)
            return true;
    return false;
}

static void fwdio_add(fwdio_t *f, const char *name, const wf_tensor_t *t)
{
    f->name[f->n] = name;
    f->in[f->n] = *t;
    f->batched[f->n] = batched_name(name);
    f->n++;
}

void fwdio_from_flux(fwdio_t *f, const char *model, const fluxio_t *io)
{
    memset(f, 0, sizeof *f);
    f->model = model;
    f->ref = io->ref;
    f->tol = fluxio_tolerance(io);
    fwdio_add(f, "hidden_states", &io->hs);
    fwdio_add(f, "encoder_hidden_states", &io->enc);
    fwdio_add(f, "pooled_projections", &io->pooled);
    fwdio_add(f, "timestep", &io->t);
    fwdio_add(f, "img_ids", &io->img_ids);
    fwdio_add(f, "txt_ids", &io->txt_ids);
}

void fwdio_from_wan(fwdio_t *f, const char *model, const wanio_t *io)
{
    memset(f, 0, sizeof *f);
    f->model = model;
    f->ref = io->ref;
    f->tol = WANIO_TOLERANCE;
    for (uint32_t i = 0; i < io->n; i++)
        fwdio_add(f, io->name[i], &io->in[i]);
}

static bool gather_rows(const wf_tensor_t *t, const int *rows, int nr, wf_tensor_t *ret)
{
    size_t per = wf_dtype_size(t->dtype) * (size_t)(wf_tensor_numel(t) / t->shape[0]);
    *ret = *t;
    ret->shape[0] = nr;
    ret->data = malloc(per * (size_t)nr);
    if (!ret->data)
        return false;
    for (int i = 0; i < nr; i++)
        memcpy((char *)ret->data + per * (size_t)i,
               (const char *)t->data + per * (size_t)rows[i], per);
    return true;
}

bool fwdio_gather(const fwdio_t *f, const int *rows, int nr, fwdio_t *ret)
{
    *ret = *f;
    bool ok = gather_rows(&f->ref, rows, nr, &ret->ref);
    for (uint32_t i = 0; i < f->n; i++)
        if (f->batched[i])
            ok = gather_rows(&f->in[i], rows, nr, &ret->in[i]) && ok;
    return ok;
}

void fwdio_free_gathered(fwdio_t *g)
{
    free(g->ref.data);
    for (uint32_t i = 0; i < g->n; i++)
        if (g->batched[i])
            free(g->in[i].data);
}

wf_status_t fwdio_forward(wf_client_t *c, const fwdio_t *f, const wf_forward_opts_t *opts,
                          wf_tensor_t *out, wf_job_result_t *res)
{
    *out = f->ref;
    out->dtype = WF_DTYPE_F32;
    int64_t n = wf_tensor_numel(out);
    out->data = malloc((size_t)n * sizeof(float));
    if (!out->data)
        return WF_E_NO_MEMORY;
    for (int64_t i = 0; i < n; i++)
        ((float *)out->data)[i] = NAN;
    wf_named_tensor_t ins[FWDIO_MAX_IN], outs[1] = { { "output", out } };
    for (uint32_t i = 0; i < f->n; i++)
        ins[i] = (wf_named_tensor_t){ f->name[i], &f->in[i] };
    wf_status_t st = wf_forward_named(c, f->model, ins, f->n, outs, 1, opts, res);
    if (st != WF_OK) {
        free(out->data);
        out->data = NULL;
    }
    return st;
}

double fwdio_diff(const float *a, const float *b, int64_t n, double scale)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d))
            return INFINITY;
        m = fmax(m, d);
    }
    return m / (scale > 0 ? scale : 1);
}

double fwdio_max_abs(const wf_tensor_t *t)
{
    double m = 0;
    const float *p = t->data;
    for (int64_t i = 0; i < wf_tensor_numel(t); i++)
        m = fmax(m, fabs(p[i]));
    return m;
}

/* ---- a weftd serving the tiny fixtures ---------------------------------------------- */

bool fwdd_start(fwdd_t *d, const char *weftd, const char *fixtures, const char *mesh,
                const char *const *extra)
{
    memset(d, 0, sizeof *d);
    d->pid = -1;
    if (!fluxio_load(&d->fio, fixtures, "io-flux-tiny-f32.safetensors"))
        return false;
    if (!wanio_load(&d->wio, fixtures, "io-wan-tiny-f32.safetensors")) {
        fluxio_free(&d->fio);
        return false;
    }
    fwdio_from_flux(&d->flux, "flux", &d->fio);
    fwdio_from_wan(&d->wan, "wan", &d->wio);
    snprintf(d->dir, sizeof d->dir, "/tmp/weft-fwdd-XXXXXX");
    if (!mkdtemp(d->dir)) {
        perror("mkdtemp");
        goto fail;
    }
    snprintf(d->endpoint, sizeof d->endpoint, "ipc://%s/weftd.sock", d->dir);
    const char *argv[32] = { weftd, "--devices", "cpu:4", "--mesh", mesh,
                             "--listen", d->endpoint, "--model-root", fixtures,
                             "--log-level", "warning" };
    int n = 11;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    d->pid = spawn_daemon(argv, NULL);
    if (d->pid < 0 || !wait_ready(d->endpoint)) {
        fprintf(stderr, "weftd did not start\n");
        goto fail;
    }
    wf_model_info_t info;
    if (wf_client_connect(d->endpoint, (int)WAIT_EVENT_MS, &d->c) != WF_OK ||
        wf_hello(d->c, NULL) != WF_OK ||
        wf_load_model(d->c, "flux", "flux-tiny", NULL, &info) != WF_OK ||
        wf_load_model(d->c, "wan", "wan-tiny", NULL, &info) != WF_OK) {
        fprintf(stderr, "connect or load: %s\n", d->c ? wf_client_last_error(d->c) : "");
        goto fail;
    }
    return true;
fail:
    wf_client_destroy(&d->c);
    if (d->pid > 0)
        kill(d->pid, SIGKILL);
    d->pid = -1;
    fwdd_stop(d);
    return false;
}

void fwdd_stop(fwdd_t *d)
{
    char err[512];
    wf_client_destroy(&d->c);
    if (d->pid > 0)
        CHECK(stop_daemon(d->pid, SPAWN_STOP_MS, err, sizeof err), "weftd: %s", err);
    d->pid = -1;
    fluxio_free(&d->fio);
    wanio_free(&d->wio);
    if (d->dir[0]) {
        char sock[128];
        snprintf(sock, sizeof sock, "%s/weftd.sock", d->dir);
        unlink(sock);
        rmdir(d->dir);
        d->dir[0] = '\0';
    }
}
