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

#endif /* WF_TEST_FLUXIO_H */
