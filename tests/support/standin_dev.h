/* standin_dev.h — a stand-in device backend for tests on machines without
 * a GPU: the CPU backend's attention behind the device-memory entries of
 * backend.h (dev_alloc, dev_reset, copy_h2d, copy_d2h, synchronize,
 * lse_merge, convert, fill_f32), on "device" memory that stores every
 * byte XOR 0xA5. Code that reads or writes device memory without going
 * through the backend's copies or ops (a comm handed a device pointer, a
 * memcpy from a device buffer) gets scrambled bytes, so its results are
 * wrong and a test against a reference fails.
 *
 * ctx_new(index, budget): an arena of `budget` bytes (0: 256 MiB) from
 * which dev_alloc takes 256-byte aligned buffers (WF_E_NO_MEMORY past it);
 * memory_info reports the arena. attention() unscrambles q / k / v into
 * host copies, runs wf_backend_cpu()'s attention (its own workspace:
 * attention_workspace answers 0, as the CUDA backend does) and scrambles
 * out / lse back. lse_merge is backend.h's formula (cp_attention.c's
 * merge_rows, bit for bit), convert is tensor.h's, fill_f32 stores
 * scrambled values. Every op is synchronous; synchronize returns WF_OK.
 * native_stream is NULL. Counters (copies in each direction, bytes) are
 * for tests that check a path went through the copies.
 * Thread safety: one context per thread, as the daemon's workers.
 */
#ifndef WF_TEST_STANDIN_DEV_H
#define WF_TEST_STANDIN_DEV_H

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
} wf_standin_counters_t;

/* The counters of a stand-in context (zeroed by ctx_new). */
wf_standin_counters_t wf_standin_counters(const wf_backend_ctx_t *ctx);

/* Scramble / unscramble n bytes (the same XOR), for tests that put data
 * on the "device" or read it back without a context. */
void wf_standin_xor(void *dst, const void *src, size_t n);

#endif /* WF_TEST_STANDIN_DEV_H */
