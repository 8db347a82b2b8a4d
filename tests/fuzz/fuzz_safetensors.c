/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser.
 *
 * The input is a whole file image; wf_safetensors_from_buffer validates it
 * exactly as an opened file. On success every accessor is walked and every
 * tensor's bytes are read, so a validation hole shows up as an ASan
 * out-of-bounds report. A small header cap keeps jansson's memory bounded.
 *
 * clang -fsanitize=fuzzer,address,undefined ... ; run with
 *   -max_total_time=60 -malloc_limit_mb=512 -rss_limit_mb=1024
 */
#include "safetensors.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    wf_safetensors_t *st = NULL;
    wf_st_options_t opt = { 1u << 20, WF_RESOLVE_AUTO };
    if (wf_safetensors_from_buffer(data, size, "fuzz", &opt, &st, err, sizeof err) != WF_OK)
        return 0;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < wf_safetensors_count(st); i++) {
        const wf_st_tensor_t *t = wf_safetensors_tensor(st, i);
        const uint8_t *p = wf_safetensors_data(st, i);
        for (uint64_t b = 0; b < t->nbytes; b++)
            sink ^= p[b];
        /* the copying reader agrees with the pointer, and refuses a range
         * past the tensor */
        uint8_t head[64];
        size_t hn = t->nbytes < sizeof head ? (size_t)t->nbytes : sizeof head;
        if (wf_safetensors_read(st, i, t->nbytes - hn, head, hn, err, sizeof err) != WF_OK
            || memcmp(head, p + (t->nbytes - hn), hn) != 0
            || wf_safetensors_read(st, i, t->nbytes, head, 1, err, sizeof err) == WF_OK)
            __builtin_trap();
        if (wf_safetensors_find(st, t->name) != (ptrdiff_t)i)
            __builtin_trap();
    }
    for (size_t i = 0; i < wf_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        wf_safetensors_metadata_at(st, i, &k, &v);
        if (wf_safetensors_metadata(st, k) != v)
            __builtin_trap();
    }
    (void)sink;
    wf_safetensors_close(&st);
    return 0;
}
