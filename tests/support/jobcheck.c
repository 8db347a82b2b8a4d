/* jobcheck.c — shared by the end-to-end attention tests (test_parity,
 * test_reconfig_load): seeded inputs in every dtype, the fp64 reference
 * and the error measure, the per-job options, waiting for a daemon.
 * Written here, independent of kernels/, so the check shares no code with
 * what it checks. See jobcheck.h. */
#include "jobcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- dtypes, written here so the check shares no code with kernels/ --- */

static double from_f16(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
             : ldexp(m + 1024, e - 25);
    return (h & 0x8000) ? -v : v;
}

static uint16_t to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f))
        return sign | 0x7e00;
    if (a >= 65520.0)
        return sign | 0x7c00;
    if (a < 0x1p-14)
        return sign | (uint16_t)nearbyint(a * 0x1p24);
    int e;
    double m = nearbyint(frexp(a, &e) * 2048.0);
    if (m == 2048.0) {
        m = 1024.0;
        e++;
    }
    return sign | (uint16_t)((e + 14) << 10) | (uint16_t)((int)m - 1024);
}

static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u); /* nearest even; inputs are finite */
    return (uint16_t)(u >> 16);
}

void store(void *buf, wf_dtype_t dt, size_t i, float x)
{
    if (dt == WF_DTYPE_F32) {
        memcpy((char *)buf + 4 * i, &x, 4);
        return;
    }
    uint16_t h = dt == WF_DTYPE_F16 ? to_f16(x) : to_bf16(x);
    memcpy((char *)buf + 2 * i, &h, 2);
}

double load(const void *buf, wf_dtype_t dt, size_t i)
{
    uint16_t h;
    if (dt == WF_DTYPE_F32) {
        float f;
        memcpy(&f, (const char *)buf + 4 * i, 4);
        return f;
    }
    memcpy(&h, (const char *)buf + 2 * i, 2);
    if (dt == WF_DTYPE_F16)
        return from_f16(h);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float rng_uniform(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* ---- one job: buffers, reference, check ------------------------------- */

void jbuf_free(jbuf_t *a)
{
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    for (int i = 0; i < 4; i++)
        free(t[i]->data);
    free(a->lse);
    memset(a, 0, sizeof *a);
}

bool jbuf_init(jbuf_t *a, const jcase_t *c, uint64_t seed)
{
    memset(a, 0, sizeof *a);
    a->c = *c;
    int64_t qs[4] = { c->B, c->Sq, c->Hq, c->D };
    int64_t ks[4] = { c->B, c->Skv, c->Hkv, c->D };
    wf_tensor_t *t[4] = { &a->q, &a->k, &a->v, &a->out };
    uint64_t s = seed;
    for (int i = 0; i < 4; i++) {
        wf_dtype_t dt = i < 3 ? c->in : c->out;
        t[i]->dtype = dt;
        t[i]->rank = 4;
        memcpy(t[i]->shape, i == 1 || i == 2 ? ks : qs, sizeof qs);
        size_t n = (size_t)wf_tensor_numel(t[i]);
        t[i]->data = malloc(n * wf_dtype_size(dt));
        if (!t[i]->data)
            return false;
        if (i < 3)
            for (size_t j = 0; j < n; j++)
                store(t[i]->data, dt, j, rng_uniform(&s));
        else
            memset(t[i]->data, 0xff, n * wf_dtype_size(dt)); /* NaN */
    }
    if (c->want_lse) {
        size_t nl = (size_t)(c->B * c->Sq * c->Hq);
        if (!(a->lse = malloc(nl * sizeof *a->lse)))
            return false;
        for (size_t j = 0; j < nl; j++)
            a->lse[j] = NAN;
    }
    return true;
}

/* Worst errors of out (absolute) and lse (relative to max(1, |lse|))
 * against the fp64 reference over the stored inputs.
 *   q (B,Sq,Hq,D), k / v (B,Skv,Hkv,D); query head h reads kv head
 *   h / (Hq / Hkv); causal: query i sees keys j <= i (top-left). */
void jbuf_errors(const jbuf_t *a, double *ret_out, double *ret_lse)
{
    const jcase_t *c = &a->c;
    double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)c->D);
    double sc[512], o[128];
    if (c->Skv > 512 || c->D > 128) { /* the stack rows above: a test bug */
        *ret_out = *ret_lse = INFINITY;
        return;
    }
    double max_err = 0.0, max_lse = 0.0;
    int64_t group = c->Hq / c->Hkv;
    for (int64_t b = 0; b < c->B; b++)
    for (int64_t i = 0; i < c->Sq; i++)
    for (int64_t h = 0; h < c->Hq; h++) {
        int64_t hk = h / group;
        int64_t nk = c->causal ? (i + 1 < c->Skv ? i + 1 : c->Skv) : c->Skv;
        size_t qo = (size_t)(((b * c->Sq + i) * c->Hq + h) * c->D);
        double m = -INFINITY;
        for (int64_t j = 0; j < nk; j++) {
            size_t ko = (size_t)(((b * c->Skv + j) * c->Hkv + hk) * c->D);
            double s = 0.0;
            for (int64_t d = 0; d < c->D; d++)
                s += load(a->q.data, c->in, qo + (size_t)d) *
                     load(a->k.data, c->in, ko + (size_t)d);
            sc[j] = s * scale;
            m = fmax(m, sc[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j < nk; j++)
            sum += (sc[j] = exp(sc[j] - m));
        for (int64_t d = 0; d < c->D; d++)
            o[d] = 0.0;
        for (int64_t j = 0; j < nk; j++) {
            size_t vo = (size_t)(((b * c->Skv + j) * c->Hkv + hk) * c->D);
            for (int64_t d = 0; d < c->D; d++)
                o[d] += sc[j] / sum * load(a->v.data, c->in, vo + (size_t)d);
        }
        for (int64_t d = 0; d < c->D; d++) {
            double e = fabs(load(a->out.data, c->out, qo + (size_t)d) - o[d]);
            if (!(e <= max_err))
                max_err = e; /* a NaN sticks */
        }
        if (a->lse) {
            double ref = m + log(sum);
            size_t li = (size_t)((b * c->Sq + i) * c->Hq + h);
            double e = fabs((double)a->lse[li] - ref) / fmax(1.0, fabs(ref));
            if (!(e <= max_lse))
                max_lse = e;
        }
    }
    *ret_out = max_err;
    *ret_lse = max_lse;
}

wf_attention_opts_t opts_of(const jcase_t *c)
{
    return (wf_attention_opts_t){ .scale = c->scale, .causal = c->causal,
                                  .rotate_method = c->rotate,
                                  .convert_to_fp32 = c->fp32,
                                  .ring_anything = c->ring_any,
                                  .ulysses_anything = c->uly_any,
                                  .load_balance = c->lb };
}

bool wait_ready(const char *endpoint)
{
    wf_client_t *c = NULL;
    if (wf_client_connect(endpoint, 20000, &c) != WF_OK)
        return false;
    wf_status_t st = wf_hello(c, NULL);
    if (st != WF_OK)
        fprintf(stderr, "daemon not ready: %s: %s\n", wf_status_name(st),
                wf_client_last_error(c));
    wf_client_destroy(&c);
    return st == WF_OK;
}
