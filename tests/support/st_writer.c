/* st_writer.c — test support: write safetensors files (see st_writer.h). */
#include "st_writer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int st_write_bytes(const char *path, const void *bytes, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t w = len ? fwrite(bytes, 1, len, f) : 0;
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

int st_write_raw_n(const char *path, uint64_t n_field, const char *header,
                   size_t data_len)
{
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_len;
    unsigned char *buf = malloc(total ? total : 1);
    if (buf == NULL)
        return -1;
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(n_field >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, 0x5a, data_len);
    int rc = st_write_bytes(path, buf, total);
    free(buf);
    return rc;
}

int st_write_raw(const char *path, const char *header, size_t data_len)
{
    return st_write_raw_n(path, strlen(header), header, data_len);
}

int st_write(const char *path, const st_w_tensor_t *t, size_t n,
             const char *metadata_json, size_t pad)
{
    size_t cap = 4096 + pad + (metadata_json ? strlen(metadata_json) : 0);
    for (size_t i = 0; i < n; i++)
        cap += strlen(t[i].name) + 200;
    char *h = malloc(cap);
    if (h == NULL)
        return -1;
    size_t o = 0, off = 0, data_len = 0;
    o += (size_t)snprintf(h + o, cap - o, "{");
    if (metadata_json != NULL)
        o += (size_t)snprintf(h + o, cap - o, "\"__metadata__\":%s%s", metadata_json,
                              n ? "," : "");
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(h + o, cap - o, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                              i ? "," : "", t[i].name, t[i].dtype);
        for (int d = 0; d < t[i].rank; d++)
            o += (size_t)snprintf(h + o, cap - o, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
        o += (size_t)snprintf(h + o, cap - o, "],\"data_offsets\":[%zu,%zu]}", off,
                              off + t[i].nbytes);
        off += t[i].nbytes;
    }
    data_len = off;
    o += (size_t)snprintf(h + o, cap - o, "}");
    memset(h + o, ' ', pad);
    o += pad;
    h[o] = '\0';

    size_t total = 8 + o + data_len;
    unsigned char *buf = malloc(total);
    if (buf == NULL) {
        free(h);
        return -1;
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)o >> (8 * i));
    memcpy(buf + 8, h, o);
    off = 8 + o;
    for (size_t i = 0; i < n; i++) {
        if (t[i].data != NULL)
            memcpy(buf + off, t[i].data, t[i].nbytes);
        else
            memset(buf + off, 0, t[i].nbytes);
        off += t[i].nbytes;
    }
    int rc = st_write_bytes(path, buf, total);
    free(buf);
    free(h);
    return rc;
}
