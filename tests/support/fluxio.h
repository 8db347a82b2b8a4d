/* fluxio.h — test support: the FLUX io fixtures (tests/parity/
 * make_fixtures.py) as client tensors, and the comparison of a forward's
 * output with diffusers'. Tests only. */
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

#endif /* WF_TEST_FLUXIO_H */
