/* fluxio.h — test support: the io fixtures of the diffusers model
 * families as client tensors, and the comparison of a forward's output
 * with diffusers': FLUX's (tests/parity/make_fixtures.py; fluxio_t,
 * wf_forward) and Wan's (make_wan_fixtures.py, make_wan_long.py; wanio_t,
 * wf_forward_named). Tests only. */
#ifndef WF_TEST_FLUXIO_H
#define WF_TEST_FLUXIO_H

#include <stdbool.h>
#include <stddef.h>

#include "weft.h"

/* The inputs and references of one io-*.safetensors file, copied out. */
typedef struct fluxio {
    wf_tensor_t hs, enc, pooled, t, img_ids, txt_ids, guidance;
    bool has_guidance;
    wf_tensor_t ref;        /* output_f64 when the file has it, else output */
    bool ref_is_f64;        /* ref came from diffusers' float64 run */
    wf_dtype_t in_dtype;    /* dtype of hidden_states */
    wf_flux_inputs_t in;    /* pointers into the above */
} fluxio_t;

/* Read `dir`/`file`. False (message on stderr) when it cannot. */
bool fluxio_load(fluxio_t *io, const char *dir, const char *file);
void fluxio_free(fluxio_t *io);

/* A zeroed-NaN output tensor of the reference's shape, in `dt`. */
bool fluxio_output(const fluxio_t *io, wf_dtype_t dt, wf_tensor_t *ret);

/* max |out - ref| / max |ref|. */
double fluxio_error(const fluxio_t *io, const wf_tensor_t *out);

/* The tolerance stated for a checkpoint dtype (max |out - ref| over
 * max |ref|): f32 models against diffusers' float64 run: 1e-5 (weft
 * accumulates in f32: about 3e-7 on flux-tiny; 4.4e-6 on the guidance
 * model, where torch's exp, one ulp off on 2 of the 128 timestep
 * frequencies, is magnified by guidance x 1000); bf16 models against
 * diffusers' bf16 run: 2e-2, about 5 units of bf16 roundoff (diffusers
 * rounds every activation to bf16, weft computes in f32 from the same
 * bf16 weights: 4.7e-3 measured, and a float64 run of diffusers with the
 * bf16 weights differs from its own bf16 output by the same 4.7e-3). */
double fluxio_tolerance(const fluxio_t *io);

/* ------------------------------------------------------------------ */
/* Wan: io-wan-*.safetensors, served through wf_forward_named */

/* The tolerance of a Wan forward against diffusers' float64 run (max
 * |out - ref| over max |ref|): 1e-5, as FLUX's f32 models (weft
 * accumulates in f32: about 3e-7 on wan-tiny). */
#define WANIO_TOLERANCE 1e-5

/* The Wan schema's inputs, in its order. */
#define WANIO_MAX_IN 5
extern const char *const wanio_input_names[WANIO_MAX_IN];

/* The inputs and the reference of one io-wan-*.safetensors file, copied
 * out: those of the schema's inputs the file holds (hidden_states first;
 * a text-to-video file: hidden_states, timestep, encoder_hidden_states). */
typedef struct wanio {
    uint32_t n;                   /* inputs held */
    const char *name[WANIO_MAX_IN]; /* their names (wanio_input_names') */
    wf_tensor_t in[WANIO_MAX_IN]; /* in the file's dtypes */
    wf_tensor_t ref;              /* output_f64 (F32) */
} wanio_t;

/* Read `dir`/`file`. False (message on stderr) when it cannot. */
bool wanio_load(wanio_t *io, const char *dir, const char *file);
void wanio_free(wanio_t *io);

/* One forward of resident model `model` through c on the inputs of `io`
 * into an f32 output of ref's shape; its error
 * against ref (max |out - ref| / max |ref|; INFINITY when the forward
 * fails). The status into *ret_st, the result into *ret_res (NULL: not
 * kept). */
double wanio_forward(wf_client_t *c, const char *model, const wanio_t *io,
                     const wf_tensor_t *ref, wf_status_t *ret_st,
                     wf_job_result_t *ret_res);

/* ------------------------------------------------------------------ */
/* Any family's forward by name (wf_forward_named) with options */

#define FWDIO_MAX_IN 8

/* One forward: a model name, its named inputs (borrowed), which carry the
 * batch as dimension 0, diffusers' f32 output and the tolerance against it
 * (of max |ref|). */
typedef struct fwdio {
    const char *model;
    uint32_t n;
    const char *name[FWDIO_MAX_IN];
    wf_tensor_t in[FWDIO_MAX_IN];
    bool batched[FWDIO_MAX_IN];
    wf_tensor_t ref;
    double tol;
} fwdio_t;

/* From a FLUX io file's data (guidance left out) / a Wan io file's. */
void fwdio_from_flux(fwdio_t *f, const char *model, const fluxio_t *io);
void fwdio_from_wan(fwdio_t *f, const char *model, const wanio_t *io);

/* f with its batch made of samples rows[0 .. nr) (the batched inputs and
 * the reference copied: fwdio_free_gathered). False when out of memory. */
bool fwdio_gather(const fwdio_t *f, const int *rows, int nr, fwdio_t *ret);
void fwdio_free_gathered(fwdio_t *g);

/* One forward of f into *out (an f32 tensor of ref's shape, malloc'ed,
 * NaN-filled first; on WF_OK the caller frees out->data, on an error it
 * is freed here and NULL), with opts (may be NULL). */
wf_status_t fwdio_forward(wf_client_t *c, const fwdio_t *f, const wf_forward_opts_t *opts,
                          wf_tensor_t *out, wf_job_result_t *res);

/* max |a - b| over n floats / scale (NaN anywhere: INFINITY). */
double fwdio_diff(const float *a, const float *b, int64_t n, double scale);

/* max |t| of an f32 tensor. */
double fwdio_max_abs(const wf_tensor_t *t);

/* A weftd on cpu:4 whose model root is the fixtures directory, with
 * flux-tiny loaded as "flux" and wan-tiny as "wan", a client connected
 * (its hello made: the features known),
 * and their io files' forwards (flux, wan: B = 2, f32 references). */
typedef struct fwdd {
    int pid;
    wf_client_t *c;
    char dir[64], endpoint[128];
    fluxio_t fio;
    wanio_t wio;
    fwdio_t flux, wan;
} fwdd_t;

/* Start it with --mesh mesh and the arguments extra[] (NULL-terminated;
 * may be NULL). False (message on stderr) when anything fails: nothing is
 * left running then. */
bool fwdd_start(fwdd_t *d, const char *weftd, const char *fixtures, const char *mesh,
                const char *const *extra);

/* Close the client, stop the daemon (a check that it exits 0 on
 * SIGTERM), free the io and remove the folder. */
void fwdd_stop(fwdd_t *d);

#endif /* WF_TEST_FLUXIO_H */
