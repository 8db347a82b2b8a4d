/* standin_dev.h — a stand-in device backend for tests on machines without
 * a GPU: the CPU backend's attention and model ops behind the
 * device-memory entries of backend.h (dev_alloc, dev_reset, copy_h2d,
 * copy_d2h, synchronize, lse_merge, convert, fill_f32, mem_alloc,
 * mem_free), on "device" memory that stores every byte XOR 0xA5. Code
 * that reads or writes device memory without going through the backend's
 * copies or ops (a comm handed a device pointer, a memcpy from a device
 * buffer) gets scrambled bytes, so its results are wrong and a test
 * against a reference fails.
 *
 * ctx_new(index, budget): an arena of `budget` bytes (0: 256 MiB) from
 * which dev_alloc takes 256-byte aligned buffers. Resident blocks
 * (mem_alloc) are separate 256-byte aligned allocations charged to the
 * same budget (rounded up to 256 bytes): memory_info reports total =
 * budget, free = budget - dev_alloc bytes - resident bytes; dev_alloc and
 * mem_alloc fail with WF_E_NO_MEMORY past it (nothing changes). mem_alloc
 * during a job (after a dev_alloc, before dev_reset; backend.h forbids it)
 * is refused with WF_E_BAD_ARGUMENT. mem_free accepts NULL; a pointer that
 * is not a live block is ignored and counted (bad_frees). dev_reset leaves
 * resident blocks alone; ctx_destroy frees them. host_register /
 * host_unregister are NULL (optional for callers).
 *
 * Device pointers are checked: every range an op reads or writes (its
 * exact extent from the params: a strided (rows, width, ld) operand spans
 * (rows - 1) * ld + width elements) must lie in the allocated part of the
 * arena or inside one live resident block, else the op returns
 * WF_E_BAD_ARGUMENT and touches nothing (a host pointer, a freed block,
 * another context's buffer, a range past the end). Host pointers the
 * contract names (rope_table's axes_dims) are used as given.
 *
 * attention() unscrambles q / k / v into host copies, runs
 * wf_backend_cpu()'s attention (its own workspace: attention_workspace
 * answers 0, as the CUDA backend does, except for fp8 params, where it
 * asks for the e4m3 copies a device keeps there, checks that the caller
 * passes them as device memory clear of the operands and fills them with
 * junk) and scrambles out / lse back;
 * merge mode (attention_merge_ok: the CPU backend's answer) unscrambles
 * the accumulator out / lse and final_out too, so the CPU op merges into
 * them, and scrambles all three back.
 * fp8 (p->fp8): attention_fp8_ok answers true for every device; the host
 * copies of q, k and v are quantized-dequantized per (batch, head) of the
 * call with kernels/fp8.h (reference.h wf_ref_fp8_qdq) into f32 first,
 * so an fp8 job matches wf_ref_attention_fp8 (P is not rounded to e4m3,
 * as a GPU kernel's is).
 * The model ops (linear, bias_act, act, add, modln, gate_residual,
 * head_norm_rope, rope_table, timestep_proj, copy_rows) run
 * wf_backend_cpu()'s same op on unscrambled host copies of their ranges
 * (ranges that meet share one copy, so in-place and interleaved operands
 * alias as on the device) and scramble the written ranges back whole:
 * results are the CPU op's bit for bit, bytes between strided rows are
 * kept, and a refusal by the CPU op leaves the device memory untouched.
 * A linear whose weight is bf16 or f16 first rounds an f32 input to that
 * dtype, as the CUDA backend's does (its GEMM takes both operands in the
 * weight's dtype, accumulating in f32): the device's numerics, so tests
 * hold the device path of a bf16 model to bf16 tolerances (with f32
 * weights it is the CPU op's bit for bit). Low-precision activations
 * (backend.h: linear's x / y, modln's, rms_norm's and layer_norm's dst,
 * bias_act's y and dst, head_norm_rope's src and dst) are staged in their
 * dtype and go to the CPU op as they are, which widens an input exactly
 * and rounds an output once as stored, where the device's kernels and
 * cuBLASLt's epilogue round it. Attention takes q / k / v in their dtype
 * as the CPU's does (exactly widened, f32 products) and, with 16-bit
 * q / k / v, rounds P to their dtype before P V as a GPU kernel's
 * tensor-core product takes it, the row sums from the f32 P
 * (wf_cpu_attention_round_p: the CPU's cblas path).
 * linear_workspace asks for a contiguous f32 copy of x (rows * in * 4,
 * rounded up to 256), as a device backend converting operands might;
 * linear checks that the workspace is device memory, 256-byte aligned and
 * clear of every operand, and fills it with junk. lse_merge is
 * backend.h's formula (cp_attention.c's merge_rows, bit for bit), convert
 * is tensor.h's, fill_f32 stores scrambled values. Every op is
 * synchronous; synchronize returns WF_OK. native_stream is NULL. Counters
 * (copies in each direction, bytes, kernels, resident blocks) are for
 * tests that check a path went through the copies.
 * Transfers on a second stream (xfer_mark, xfer_d2h, xfer_h2d,
 * xfer_wait): a real second thread per context (made at the first
 * transfer) carries them out in queue order after a random delay of up
 * to 0.3 ms, while the main stream's ops stay synchronous. xfer_d2h
 * reads the device range when queued and writes the host buffer later;
 * xfer_h2d reads the host buffer and writes the device range later. Until
 * its xfer_wait, every main-stream op touching the range of a pending
 * h2d is refused (WF_E_BAD_ARGUMENT) and counted in xfer_conflicts, as is
 * a dev_reset with anything pending (which then waits): so a caller that
 * uses a transfer's buffers before waiting for it, on either side, fails
 * its test. Marks complete at once.
 * Thread safety: one context per thread, as the daemon's workers (plus
 * its own transfer thread).
 */
#ifndef WF_TEST_STANDIN_DEV_H
#define WF_TEST_STANDIN_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"

const wf_backend_ops_t *wf_standin_dev_backend(void);

typedef struct wf_standin_counters {
    uint64_t h2d, d2h;             /* copies */
    uint64_t h2d_bytes, d2h_bytes; /* bytes copied */
    uint64_t kernels;              /* successful attention / lse_merge / convert /
                                    * fill / model op calls */
    uint64_t mem_allocs, mem_frees; /* resident blocks allocated / freed */
    uint64_t bad_frees;            /* mem_free of a pointer that is no live block */
    /* ringfuse: which ops ran (also counted in kernels), so that a test
     * can tell the merge-in-kernel path (backend.h merge mode) from
     * attention + lse_merge + convert */
    uint64_t lse_merges, converts; /* successful lse_merge / convert calls */
    uint64_t merged_attentions;    /* successful attention calls in merge mode */
    /* transfers on the second stream (xfer_*, see below) */
    uint64_t xfer_d2h, xfer_h2d;   /* transfers queued */
    uint64_t xfer_bytes;           /* their bytes */
    uint64_t xfer_overlaps;        /* main-stream device accesses made while a
                                    * transfer was pending (the overlap) */
    uint64_t xfer_conflicts;       /* main-stream accesses refused because an h2d
                                    * into the range was pending, and dev_resets
                                    * with a transfer pending (0 in a correct
                                    * caller) */
} wf_standin_counters_t;

/* The counters of a stand-in context (zeroed by ctx_new). */
wf_standin_counters_t wf_standin_counters(const wf_backend_ctx_t *ctx);

/* Make the nth transfer queued on ctx from now (1: the next) fail: it
 * copies nothing and its xfer_wait returns WF_E_INTERNAL, as a failed
 * asynchronous copy on a GPU (error-path tests). */
void wf_standin_xfer_fail(wf_backend_ctx_t *ctx, uint64_t nth);

/* Hold (true) / release (false) ctx's transfer stream: while held it
 * starts no transfer, so a test can keep one pending for sure (an
 * xfer_wait of a held transfer waits forever: release first; dev_reset
 * and ctx_destroy release the hold). */
void wf_standin_xfer_hold(wf_backend_ctx_t *ctx, bool hold);

/* Sums over every stand-in context destroyed so far in the process
 * (weftd_standin prints them at exit for the end-to-end tests). */
typedef struct wf_standin_totals {
    uint64_t xfers;                /* transfers queued (d2h + h2d) */
    uint64_t overlaps;             /* xfer_overlaps */
    uint64_t conflicts;            /* xfer_conflicts */
} wf_standin_totals_t;
wf_standin_totals_t wf_standin_totals(void);

/* Scramble / unscramble n bytes (the same XOR), for tests that put data
 * on the "device" or read it back without a context. */
void wf_standin_xor(void *dst, const void *src, size_t n);

#endif /* WF_TEST_STANDIN_DEV_H */
