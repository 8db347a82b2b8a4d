/* st_writer.h — test support: write safetensors files, good and bad.
 *
 * A tiny writer for the tests of the reader; it checks nothing (it must be
 * able to write every kind of broken file). Not part of weftd.
 */
#ifndef WF_TEST_ST_WRITER_H
#define WF_TEST_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

/* One tensor to write; data holds nbytes bytes (NULL: zeros). */
typedef struct st_w_tensor {
    const char *name;        /* key */
    const char *dtype;       /* "F32", "F16", "BF16", or anything */
    int rank;                /* dims in shape */
    int64_t shape[9];        /* dims (rank 9 allowed, to test refusal) */
    const void *data;        /* bytes, or NULL for zeros */
    size_t nbytes;           /* bytes written and spanned by data_offsets */
} st_w_tensor_t;

/* Write a well-formed file at `path` (relative to the working directory):
 * tensors laid out in the given order, metadata_json (an object text, or
 * NULL) as __metadata__, the header padded with `pad` spaces. 0 or -1. */
int st_write(const char *path, const st_w_tensor_t *t, size_t n,
             const char *metadata_json, size_t pad);

/* Write 8-byte length N = strlen(header), the header, then data_len bytes
 * of 0x5a. 0 or -1. */
int st_write_raw(const char *path, const char *header, size_t data_len);

/* Like st_write_raw with the length field given explicitly. */
int st_write_raw_n(const char *path, uint64_t n_field, const char *header,
                   size_t data_len);

/* Write len bytes. 0 or -1. */
int st_write_bytes(const char *path, const void *bytes, size_t len);

#endif /* WF_TEST_ST_WRITER_H */
