/* safetensors.c — parse and validate safetensors files and diffusers
 * checkpoints (see safetensors.h). The only user of jansson besides the
 * model config reader.
 *
 * Everything is checked on open; accessors then only index arrays. The
 * JSON tree lives only during validation: names and metadata are copied
 * into one pool per file, so a handle holds no jansson object.
 */
#include "safetensors.h"
#include "errf.h"
#include "json_err.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct wf_safetensors {
    char *path;               /* rel path or label, for messages (owned) */
    const uint8_t *base;      /* first byte of the file image */
    size_t size;              /* bytes of the file */
    bool mapped;              /* base is our mmap (else borrowed) */
    int fd;                   /* the open file (wf_safetensors_read); -1 for
                                 a buffer */
    uint64_t data_start;      /* 8 + N: where offsets count from */
    size_t n;                 /* tensors */
    wf_st_tensor_t *t;        /* tensors in name order */
    size_t n_meta;            /* __metadata__ entries */
    const char **meta;        /* 2 * n_meta: key, value, ... in key order */
    char *pool;               /* names, keys and values (owned) */
};

struct wf_checkpoint {
    size_t n_files;           /* files opened */
    wf_safetensors_t **files; /* in path order (owned) */
    size_t n;                 /* tensors over all files */
    wf_ckpt_ref_t *refs;      /* in name order */
    uint64_t data_bytes;      /* sum of nbytes */
};

/* ---- one file ----------------------------------------------------------- */

static bool dtype_from_name(const char *s, wf_dtype_t *ret)
{
    if (strcmp(s, "F32") == 0)
        *ret = WF_DTYPE_F32;
    else if (strcmp(s, "F16") == 0)
        *ret = WF_DTYPE_F16;
    else if (strcmp(s, "BF16") == 0)
        *ret = WF_DTYPE_BF16;
    else
        return false;
    return true;
}

static size_t dtype_bytes(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? 4 : 2;
}

/* The dtypes the safetensors format defines, to tell "unsupported" from
 * "unknown" in messages. */
static bool dtype_is_safetensors(const char *s)
{
    static const char *const known[] = {
        "BOOL", "U8", "I8", "I16", "U16", "I32", "U32", "I64", "U64",
        "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2",
        "C64",
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(s, known[i]) == 0)
            return true;
    return false;
}

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp(((const wf_st_tensor_t *)a)->name,
                  ((const wf_st_tensor_t *)b)->name);
}

static int cmp_tensor_ptr_offset(const void *a, const void *b)
{
    const wf_st_tensor_t *x = *(const wf_st_tensor_t *const *)a;
    const wf_st_tensor_t *y = *(const wf_st_tensor_t *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    /* zero-byte tensors first at a shared offset */
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int cmp_meta(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A name for messages: escaped (a tensor name is the file's bytes and may
 * hold control bytes) and shortened with "..." (names may be 255 bytes,
 * messages shorter). The buffer lives until the end of the statement. */
#define NAME_FMT "'%s'"
#define NAME_ARG(s) wf_escape((char[96]){ 0 }, 96, (s), strlen(s), WF_ESC_ASCII)

static void shape_text(const wf_st_tensor_t *t, char *buf, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int d = 0; d < t->rank && o < len; d++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, d ? ", " : "",
                              t->shape[d]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* Read a non-negative JSON integer. */
static bool json_u64(const json_t *v, uint64_t *ret)
{
    if (!json_is_integer(v))
        return false;
    json_int_t x = json_integer_value(v);
    if (x < 0)
        return false;
    *ret = (uint64_t)x;
    return true;
}

/* Validate one tensor entry `v` called `name`; fills *t but its name. */
static wf_status_t parse_entry(const char *path, const char *name, json_t *v,
                               uint64_t data_len, wf_st_tensor_t *t,
                               char *err, size_t err_len)
{
    if (!json_is_object(v)) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": entry is not an object",
                path, NAME_ARG(name));
        return WF_E_MALFORMED;
    }
    const char *key;
    json_t *val;
    json_object_foreach(v, key, val) {
        if (strcmp(key, "dtype") != 0 && strcmp(key, "shape") != 0
            && strcmp(key, "data_offsets") != 0) {
            wf_errf(err, err_len, "%s: tensor " NAME_FMT ": unexpected key (only dtype, "
                    "shape and data_offsets)", path, NAME_ARG(name));
            return WF_E_MALFORMED;
        }
    }
    json_t *jd = json_object_get(v, "dtype");
    json_t *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (jd == NULL || js == NULL || jo == NULL) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": missing '%s'", path,
                NAME_ARG(name),
                jd == NULL ? "dtype" : js == NULL ? "shape" : "data_offsets");
        return WF_E_MALFORMED;
    }

    if (!json_is_string(jd)) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": dtype is not a string",
                path, NAME_ARG(name));
        return WF_E_MALFORMED;
    }
    const char *ds = json_string_value(jd);
    if (!dtype_from_name(ds, &t->dtype)) {
        wf_errf(err, err_len,
                "%s: tensor " NAME_FMT ": %s dtype '%.20s' (weft reads F32, F16 and BF16)",
                path, NAME_ARG(name),
                dtype_is_safetensors(ds) ? "unsupported" : "unknown", ds);
        return WF_E_BAD_DTYPE;
    }

    if (!json_is_array(js)) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": shape is not an array",
                path, NAME_ARG(name));
        return WF_E_BAD_SHAPE;
    }
    size_t rank = json_array_size(js);
    if (rank > WF_MAX_RANK) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": rank %zu is more than %d",
                path, NAME_ARG(name), rank, WF_MAX_RANK);
        return WF_E_BAD_SHAPE;
    }
    t->rank = (int)rank;
    uint64_t numel = 1;
    for (size_t d = 0; d < rank; d++) {
        uint64_t dim;
        if (!json_u64(json_array_get(js, d), &dim)) {
            wf_errf(err, err_len,
                    "%s: tensor " NAME_FMT ": dim %zu is not a non-negative integer",
                    path, NAME_ARG(name), d);
            return WF_E_BAD_SHAPE;
        }
        if (__builtin_mul_overflow(numel, dim, &numel) || numel > (uint64_t)INT64_MAX) {
            wf_errf(err, err_len, "%s: tensor " NAME_FMT ": element count overflows",
                    path, NAME_ARG(name));
            return WF_E_BAD_SHAPE;
        }
        t->shape[d] = (int64_t)dim;
    }
    for (size_t d = rank; d < WF_MAX_RANK; d++)
        t->shape[d] = 0;
    t->numel = numel;
    if (__builtin_mul_overflow(numel, (uint64_t)dtype_bytes(t->dtype), &t->nbytes)) {
        wf_errf(err, err_len, "%s: tensor " NAME_FMT ": byte size overflows", path,
                NAME_ARG(name));
        return WF_E_BAD_SHAPE;
    }

    uint64_t begin, end;
    if (!json_is_array(jo) || json_array_size(jo) != 2
        || !json_u64(json_array_get(jo, 0), &begin)
        || !json_u64(json_array_get(jo, 1), &end)) {
        wf_errf(err, err_len,
                "%s: tensor " NAME_FMT ": data_offsets is not [begin, end] of non-negative integers",
                path, NAME_ARG(name));
        return WF_E_MALFORMED;
    }
    if (begin > end) {
        wf_errf(err, err_len,
                "%s: tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64 ") end before they begin",
                path, NAME_ARG(name), begin, end);
        return WF_E_MALFORMED;
    }
    if (end - begin != t->nbytes) {
        char sh[160];
        shape_text(t, sh, sizeof sh);
        wf_errf(err, err_len,
                "%s: tensor " NAME_FMT ": shape %s of %s is %" PRIu64
                " bytes but data_offsets [%" PRIu64 ", %" PRIu64 ") hold %" PRIu64,
                path, NAME_ARG(name), sh, ds, t->nbytes, begin, end, end - begin);
        return WF_E_BAD_SHAPE;
    }
    if (end > data_len) {
        wf_errf(err, err_len,
                "%s: tensor " NAME_FMT ": data_offsets [%" PRIu64 ", %" PRIu64
                ") go beyond the %" PRIu64 " bytes of data in the file",
                path, NAME_ARG(name), begin, end, data_len);
        return WF_E_MALFORMED;
    }
    t->offset = begin; /* relative for now; made absolute by the caller */
    return WF_OK;
}

/* Validate a file of st->size bytes whose first bytes are `hdr` and fill
 * st. hdr holds at least 8 bytes, and 8 + N when N (its first 8 bytes)
 * passes the checks below (the caller reads that much: nothing here
 * touches the file itself, so a file changing under us cannot fault). */
static wf_status_t parse_image(wf_safetensors_t *st, const uint8_t *hdr, uint64_t cap,
                               char *err, size_t err_len)
{
    const char *path = st->path;
    if (st->size < 8) {
        wf_errf(err, err_len,
                "%s: file is %zu bytes, too short for the 8-byte header length (truncated?)",
                path, st->size);
        return WF_E_MALFORMED;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | hdr[i];
    if (n < 2) {
        wf_errf(err, err_len, "%s: header length %" PRIu64 " is less than 2", path, n);
        return WF_E_MALFORMED;
    }
    if (n > cap) {
        wf_errf(err, err_len, "%s: header length %" PRIu64 " is more than the cap of %" PRIu64
                " bytes", path, n, cap);
        return WF_E_LIMIT;
    }
    if (n > st->size - 8) {
        wf_errf(err, err_len,
                "%s: header length %" PRIu64 " goes beyond the file (%zu bytes; truncated?)",
                path, n, st->size);
        return WF_E_MALFORMED;
    }
    st->data_start = 8 + n;
    uint64_t data_len = st->size - st->data_start;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)hdr + 8, (size_t)n,
                              JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        char where[128];
        wf_errf(err, err_len, "%s: header JSON invalid %s", path,
                wf_json_error_where(&jerr, where, sizeof where));
        return WF_E_MALFORMED;
    }
    wf_status_t s = WF_OK;
    wf_st_tensor_t **by_off = NULL;
    char *pool = NULL;
    if (!json_is_object(root)) {
        wf_errf(err, err_len, "%s: header JSON is not an object", path);
        s = WF_E_MALFORMED;
        goto out;
    }

    /* sizes of the tables and of the string pool */
    json_t *meta = json_object_get(root, "__metadata__");
    size_t nt = json_object_size(root) - (meta != NULL ? 1 : 0);
    size_t nm = 0, pool_len = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        size_t kl = strlen(key);
        if (kl == 0 || kl > WF_ST_NAME_MAX) {
            wf_errf(err, err_len, "%s: tensor name " NAME_FMT " is %s", path,
                    NAME_ARG(key), kl == 0 ? "empty" : "longer than 255 bytes");
            s = kl == 0 ? WF_E_MALFORMED : WF_E_LIMIT;
            goto out;
        }
        pool_len += kl + 1;
    }
    if (meta != NULL && !json_is_null(meta)) {
        if (!json_is_object(meta)) {
            wf_errf(err, err_len, "%s: __metadata__ is not an object", path);
            s = WF_E_MALFORMED;
            goto out;
        }
        json_object_foreach(meta, key, val) {
            if (!json_is_string(val)) {
                wf_errf(err, err_len, "%s: __metadata__ " NAME_FMT " is not a string",
                        path, NAME_ARG(key));
                s = WF_E_MALFORMED;
                goto out;
            }
            pool_len += strlen(key) + 1 + json_string_length(val) + 1;
            nm++;
        }
    }

    st->t = calloc(nt ? nt : 1, sizeof *st->t);
    st->meta = calloc(nm ? 2 * nm : 1, sizeof *st->meta);
    pool = malloc(pool_len ? pool_len : 1);
    by_off = malloc((nt ? nt : 1) * sizeof *by_off);
    if (st->t == NULL || st->meta == NULL || pool == NULL || by_off == NULL) {
        wf_errf(err, err_len, "%s: out of memory for %zu tensors", path, nt);
        s = WF_E_NO_MEMORY;
        goto out;
    }
    st->pool = pool;

    size_t i = 0, po = 0;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0)
            continue;
        wf_st_tensor_t *t = &st->t[i];
        s = parse_entry(path, key, val, data_len, t, err, err_len);
        if (s != WF_OK)
            goto out;
        size_t kl = strlen(key) + 1;
        memcpy(pool + po, key, kl);
        t->name = pool + po;
        po += kl;
        by_off[i] = t;
        i++;
    }
    st->n = nt;

    /* the tensors must tile [0, data_len) exactly */
    qsort(by_off, nt, sizeof *by_off, cmp_tensor_ptr_offset);
    uint64_t at = 0;
    const wf_st_tensor_t *prev = NULL;
    for (i = 0; i < nt; i++) {
        const wf_st_tensor_t *t = by_off[i];
        if (t->offset < at) {
            wf_errf(err, err_len,
                    "%s: tensors " NAME_FMT " [%" PRIu64 ", %" PRIu64 ") and " NAME_FMT
                    " [%" PRIu64 ", %" PRIu64 ") overlap",
                    path, NAME_ARG(prev->name), prev->offset, prev->offset + prev->nbytes,
                    NAME_ARG(t->name), t->offset, t->offset + t->nbytes);
            s = WF_E_MALFORMED;
            goto out;
        }
        if (t->offset > at) {
            wf_errf(err, err_len,
                    "%s: gap of %" PRIu64 " bytes in the data before tensor " NAME_FMT
                    " at offset %" PRIu64,
                    path, t->offset - at, NAME_ARG(t->name), t->offset);
            s = WF_E_MALFORMED;
            goto out;
        }
        at = t->offset + t->nbytes;
        prev = t;
    }
    if (at != data_len) {
        wf_errf(err, err_len,
                "%s: %" PRIu64 " trailing bytes after the last tensor (8 + header %" PRIu64
                " + data %" PRIu64 " != file size %zu)",
                path, data_len - at, n, at, st->size);
        s = WF_E_MALFORMED;
        goto out;
    }
    for (i = 0; i < nt; i++)
        st->t[i].offset += st->data_start;
    qsort(st->t, nt, sizeof *st->t, cmp_tensor_name);

    if (nm > 0) {
        size_t m = 0;
        json_object_foreach(meta, key, val) {
            size_t kl = strlen(key) + 1, vl = json_string_length(val);
            memcpy(pool + po, key, kl);
            st->meta[2 * m] = pool + po;
            po += kl;
            /* a value may hold \u0000 only with JSON_ALLOW_NUL, which is
             * off: strlen == json_string_length */
            memcpy(pool + po, json_string_value(val), vl + 1);
            st->meta[2 * m + 1] = pool + po;
            po += vl + 1;
            m++;
        }
        st->n_meta = nm;
        qsort(st->meta, nm, 2 * sizeof *st->meta, cmp_meta);
    }
out:
    free(by_off);
    json_decref(root);
    return s;
}

static wf_safetensors_t *st_new(const char *label, char *err, size_t err_len)
{
    wf_safetensors_t *st = calloc(1, sizeof *st);
    if (st != NULL) {
        st->fd = -1;
        st->path = strdup(label != NULL ? label : "(buffer)");
    }
    if (st == NULL || st->path == NULL) {
        free(st);
        wf_errf(err, err_len, "%s: out of memory", label != NULL ? label : "(buffer)");
        return NULL;
    }
    return st;
}

static uint64_t opt_cap(const wf_st_options_t *opt)
{
    return opt != NULL && opt->max_header_bytes != 0 ? opt->max_header_bytes
                                                     : WF_ST_HEADER_CAP_DEFAULT;
}

wf_status_t wf_safetensors_from_buffer(const void *buf, size_t len,
                                       const char *label,
                                       const wf_st_options_t *opt,
                                       wf_safetensors_t **ret,
                                       char *err, size_t err_len)
{
    wf_safetensors_t *st = st_new(label, err, err_len);
    if (st == NULL)
        return WF_E_NO_MEMORY;
    st->base = buf;
    st->size = len;
    wf_status_t s = parse_image(st, buf, opt_cap(opt), err, err_len);
    if (s != WF_OK) {
        wf_safetensors_close(&st);
        return s;
    }
    *ret = st;
    return WF_OK;
}

/* Read len bytes at off of fd into buf; WF_E_INTERNAL naming `what` when
 * the file ends first (it shrank since it was opened) or on an I/O
 * error. */
static wf_status_t read_at(int fd, void *buf, size_t len, uint64_t off, const char *path,
                           const char *what, char *err, size_t err_len)
{
    uint8_t *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            wf_errf(err, err_len, "%s: reading %s: %s", path, what, strerror(errno));
            return WF_E_INTERNAL;
        }
        if (n == 0) {
            wf_errf(err, err_len,
                    "%s: the file shrank while loading (%s: %zu of %zu bytes at offset %"
                    PRIu64 " could be read): it changed under the loader",
                    path, what, got, len, off);
            return WF_E_INTERNAL;
        }
        got += (size_t)n;
    }
    return WF_OK;
}

wf_status_t wf_safetensors_open(int root_fd, const char *rel,
                                const wf_st_options_t *opt,
                                wf_safetensors_t **ret,
                                char *err, size_t err_len)
{
    int fd = -1;
    uint64_t size = 0;
    wf_status_t s = wf_model_open_file(root_fd, rel,
                                       opt != NULL ? opt->resolve : WF_RESOLVE_AUTO,
                                       &fd, &size, err, err_len);
    if (s != WF_OK)
        return s;
    wf_safetensors_t *st = st_new(rel, err, err_len);
    if (st == NULL) {
        close(fd);
        return WF_E_NO_MEMORY;
    }
    st->fd = fd;
    const char *path = st->path;
    if (size < 8) {
        wf_errf(err, err_len,
                "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length (truncated?)",
                path, size);
        wf_safetensors_close(&st);
        return WF_E_MALFORMED;
    }
    if (size > SIZE_MAX) {
        wf_errf(err, err_len, "%s: file too large to map", path);
        wf_safetensors_close(&st);
        return WF_E_LIMIT;
    }
    st->size = (size_t)size;
    /* The header is read, not mapped: a file truncated under us is then a
     * short read (an error), never a SIGBUS. The data is read the same
     * way (wf_safetensors_read); the mapping below is only for
     * wf_safetensors_data's readers. */
    uint8_t len8[8];
    s = read_at(fd, len8, sizeof len8, 0, path, "the header length", err, err_len);
    if (s != WF_OK) {
        wf_safetensors_close(&st);
        return s;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | len8[i];
    uint64_t cap = opt_cap(opt);
    uint8_t *hdr = len8;
    if (n >= 2 && n <= cap && n <= size - 8) {
        hdr = malloc((size_t)(8 + n));
        if (hdr == NULL) {
            wf_errf(err, err_len, "%s: out of memory for a %" PRIu64 "-byte header", path,
                    n);
            wf_safetensors_close(&st);
            return WF_E_NO_MEMORY;
        }
        memcpy(hdr, len8, 8);
        s = read_at(fd, hdr + 8, (size_t)n, 8, path, "the header", err, err_len);
    }
    if (s == WF_OK)
        s = parse_image(st, hdr, cap, err, err_len);
    if (hdr != len8)
        free(hdr);
    if (s != WF_OK) {
        wf_safetensors_close(&st);
        return s;
    }
    /* Readers copy tensors front to back: aggressive read-ahead (advice
     * only; failure changes nothing). */
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    void *map = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        wf_errf(err, err_len, "%s: mmap of %" PRIu64 " bytes: %s", path, size,
                strerror(errno));
        wf_safetensors_close(&st);
        return WF_E_INTERNAL;
    }
    st->base = map;
    st->mapped = true;
    *ret = st;
    return WF_OK;
}

wf_status_t wf_safetensors_read(const wf_safetensors_t *st, size_t i, uint64_t off,
                                void *dst, size_t len, char *err, size_t err_len)
{
    if (i >= st->n || off > st->t[i].nbytes || len > st->t[i].nbytes - off) {
        wf_errf(err, err_len, "%s: read of %zu bytes at %" PRIu64 " beyond tensor %zu",
                st->path, len, off, i);
        return WF_E_BAD_ARGUMENT;
    }
    if (len == 0)
        return WF_OK;
    if (st->fd < 0) {
        memcpy(dst, st->base + st->t[i].offset + off, len);
        return WF_OK;
    }
    uint64_t at = st->t[i].offset + off;
    char what[WF_ST_NAME_MAX + 16];
    snprintf(what, sizeof what, "tensor " NAME_FMT, NAME_ARG(st->t[i].name));
    return read_at(st->fd, dst, len, at, st->path, what, err, err_len);
}

void wf_safetensors_close(wf_safetensors_t **pst)
{
    if (pst == NULL || *pst == NULL)
        return;
    wf_safetensors_t *st = *pst;
    if (st->mapped && st->base != NULL)
        munmap((void *)st->base, st->size);
    if (st->fd >= 0)
        close(st->fd);
    free(st->t);
    free((void *)st->meta);
    free(st->pool);
    free(st->path);
    free(st);
    *pst = NULL;
}

const char *wf_safetensors_path(const wf_safetensors_t *st) { return st->path; }
uint64_t wf_safetensors_file_size(const wf_safetensors_t *st) { return st->size; }
size_t wf_safetensors_count(const wf_safetensors_t *st) { return st->n; }

const wf_st_tensor_t *wf_safetensors_tensor(const wf_safetensors_t *st, size_t i)
{
    return i < st->n ? &st->t[i] : NULL;
}

ptrdiff_t wf_safetensors_find(const wf_safetensors_t *st, const char *name)
{
    size_t lo = 0, hi = st->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, st->t[mid].name);
        if (c == 0)
            return (ptrdiff_t)mid;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return -1;
}

const void *wf_safetensors_data(const wf_safetensors_t *st, size_t i)
{
    return i < st->n ? st->base + st->t[i].offset : NULL;
}

const char *wf_safetensors_metadata(const wf_safetensors_t *st, const char *key)
{
    size_t lo = 0, hi = st->n_meta;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(key, st->meta[2 * mid]);
        if (c == 0)
            return st->meta[2 * mid + 1];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t wf_safetensors_metadata_count(const wf_safetensors_t *st) { return st->n_meta; }

void wf_safetensors_metadata_at(const wf_safetensors_t *st, size_t i,
                                const char **ret_key, const char **ret_value)
{
    *ret_key = i < st->n_meta ? st->meta[2 * i] : NULL;
    *ret_value = i < st->n_meta ? st->meta[2 * i + 1] : NULL;
}

/* ---- checkpoints -------------------------------------------------------- */

static int cmp_ref_name(const void *a, const void *b)
{
    return strcmp(((const wf_ckpt_ref_t *)a)->tensor->name,
                  ((const wf_ckpt_ref_t *)b)->tensor->name);
}

static int cmp_file_path(const void *a, const void *b)
{
    return strcmp(wf_safetensors_path(*(wf_safetensors_t *const *)a),
                  wf_safetensors_path(*(wf_safetensors_t *const *)b));
}

void wf_checkpoint_close(wf_checkpoint_t **pck)
{
    if (pck == NULL || *pck == NULL)
        return;
    wf_checkpoint_t *ck = *pck;
    for (size_t i = 0; i < ck->n_files; i++)
        wf_safetensors_close(&ck->files[i]);
    free(ck->files);
    free(ck->refs);
    free(ck);
    *pck = NULL;
}

/* Build the name-ordered table over every tensor of every file. */
static wf_status_t ckpt_index(wf_checkpoint_t *ck, char *err, size_t err_len)
{
    size_t n = 0;
    for (size_t f = 0; f < ck->n_files; f++)
        n += wf_safetensors_count(ck->files[f]);
    ck->refs = calloc(n ? n : 1, sizeof *ck->refs);
    if (ck->refs == NULL) {
        wf_errf(err, err_len, "out of memory for %zu tensors", n);
        return WF_E_NO_MEMORY;
    }
    size_t k = 0;
    ck->data_bytes = 0;
    for (size_t f = 0; f < ck->n_files; f++) {
        for (size_t i = 0; i < wf_safetensors_count(ck->files[f]); i++) {
            ck->refs[k].file = ck->files[f];
            ck->refs[k].index = i;
            ck->refs[k].tensor = wf_safetensors_tensor(ck->files[f], i);
            ck->data_bytes += ck->refs[k].tensor->nbytes;
            k++;
        }
    }
    ck->n = n;
    qsort(ck->refs, n, sizeof *ck->refs, cmp_ref_name);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(ck->refs[i - 1].tensor->name, ck->refs[i].tensor->name) == 0) {
            wf_errf(err, err_len, "tensor " NAME_FMT " is in both %s and %s",
                    NAME_ARG(ck->refs[i].tensor->name),
                    wf_safetensors_path(ck->refs[i - 1].file),
                    wf_safetensors_path(ck->refs[i].file));
            return WF_E_MALFORMED;
        }
    }
    return WF_OK;
}

wf_status_t wf_checkpoint_open_file(int root_fd, const char *rel,
                                    const wf_st_options_t *opt,
                                    wf_checkpoint_t **ret,
                                    char *err, size_t err_len)
{
    wf_checkpoint_t *ck = calloc(1, sizeof *ck);
    if (ck == NULL || (ck->files = calloc(1, sizeof *ck->files)) == NULL) {
        free(ck);
        wf_errf(err, err_len, "%s: out of memory", rel);
        return WF_E_NO_MEMORY;
    }
    wf_status_t s = wf_safetensors_open(root_fd, rel, opt, &ck->files[0], err, err_len);
    if (s == WF_OK) {
        ck->n_files = 1;
        s = ckpt_index(ck, err, err_len);
    }
    if (s != WF_OK) {
        wf_checkpoint_close(&ck);
        return s;
    }
    *ret = ck;
    return WF_OK;
}

/* "dir" + "/" + name, or name alone when dir is "" or "."; NULL when out of
 * memory. Caller owns it. */
static char *join_path(const char *dir, size_t dir_len, const char *name)
{
    while (dir_len > 0 && dir[dir_len - 1] == '/')
        dir_len--;
    if (dir_len == 1 && dir[0] == '.')
        dir_len = 0;
    size_t nl = strlen(name);
    char *p = malloc(dir_len + 1 + nl + 1);
    if (p == NULL)
        return NULL;
    if (dir_len > 0) {
        memcpy(p, dir, dir_len);
        p[dir_len] = '/';
        memcpy(p + dir_len + 1, name, nl + 1);
    } else {
        memcpy(p, name, nl + 1);
    }
    return p;
}

static bool plain_file_name(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 255 && strchr(s, '/') == NULL && strcmp(s, ".") != 0
           && strcmp(s, "..") != 0;
}

wf_status_t wf_checkpoint_open_index(int root_fd, const char *index_rel,
                                     const wf_st_options_t *opt,
                                     wf_checkpoint_t **ret,
                                     char *err, size_t err_len)
{
    wf_resolve_mode_t mode = opt != NULL ? opt->resolve : WF_RESOLVE_AUTO;
    char *text = NULL;
    size_t len = 0;
    wf_status_t s = wf_model_read_file(root_fd, index_rel, mode, WF_ST_INDEX_CAP_DEFAULT,
                                       &text, &len, err, err_len);
    if (s != WF_OK)
        return s;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    free(text);
    if (root == NULL) {
        char where[128];
        wf_errf(err, err_len, "%s: JSON invalid %s", index_rel,
                wf_json_error_where(&jerr, where, sizeof where));
        return WF_E_BAD_FIELD;
    }

    wf_checkpoint_t *ck = NULL;
    const char **names = NULL;
    char *path = NULL;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    json_t *md = json_is_object(root) ? json_object_get(root, "metadata") : NULL;
    if (wm == NULL || !json_is_object(wm)) {
        wf_errf(err, err_len, "%s: %s", index_rel,
                json_is_object(root) ? "\"weight_map\" is missing or not an object"
                                     : "not a JSON object");
        s = WF_E_BAD_FIELD;
        goto out;
    }
    if (md != NULL && !json_is_object(md) && !json_is_null(md)) {
        wf_errf(err, err_len, "%s: \"metadata\" is not an object", index_rel);
        s = WF_E_BAD_FIELD;
        goto out;
    }
    size_t nw = json_object_size(wm);
    if (nw == 0) {
        wf_errf(err, err_len, "%s: \"weight_map\" is empty", index_rel);
        s = WF_E_BAD_FIELD;
        goto out;
    }

    /* the distinct shard names */
    names = calloc(nw, sizeof *names);
    ck = calloc(1, sizeof *ck);
    if (names == NULL || ck == NULL || (ck->files = calloc(nw, sizeof *ck->files)) == NULL) {
        wf_errf(err, err_len, "%s: out of memory", index_rel);
        s = WF_E_NO_MEMORY;
        goto out;
    }
    size_t nf = 0;
    const char *key;
    json_t *val;
    json_object_foreach(wm, key, val) {
        const char *fn = json_is_string(val) ? json_string_value(val) : NULL;
        if (fn == NULL || !plain_file_name(fn)) {
            wf_errf(err, err_len,
                    "%s: weight_map entry " NAME_FMT " is not a plain file name beside the index",
                    index_rel, NAME_ARG(key));
            s = WF_E_BAD_FIELD;
            goto out;
        }
        size_t j;
        for (j = 0; j < nf; j++)
            if (strcmp(names[j], fn) == 0)
                break;
        if (j == nf)
            names[nf++] = fn;
    }

    const char *slash = strrchr(index_rel, '/');
    size_t dir_len = slash != NULL ? (size_t)(slash - index_rel) : 0;
    for (size_t j = 0; j < nf; j++) {
        path = join_path(index_rel, dir_len, names[j]);
        if (path == NULL) {
            wf_errf(err, err_len, "%s: out of memory", index_rel);
            s = WF_E_NO_MEMORY;
            goto out;
        }
        s = wf_safetensors_open(root_fd, path, opt, &ck->files[ck->n_files], err, err_len);
        free(path);
        path = NULL;
        if (s != WF_OK)
            goto out; /* the message names the shard */
        ck->n_files++;
    }
    qsort(ck->files, ck->n_files, sizeof *ck->files, cmp_file_path);

    /* every tensor of every shard mapped to that shard ... */
    for (size_t f = 0; f < ck->n_files; f++) {
        const wf_safetensors_t *st = ck->files[f];
        const char *fpath = wf_safetensors_path(st);
        const char *base = strrchr(fpath, '/');
        base = base != NULL ? base + 1 : fpath;
        for (size_t i = 0; i < wf_safetensors_count(st); i++) {
            const char *tn = wf_safetensors_tensor(st, i)->name;
            json_t *m = json_object_get(wm, tn);
            if (m == NULL) {
                wf_errf(err, err_len, "%s: tensor " NAME_FMT " of %s is not in the weight_map",
                        index_rel, NAME_ARG(tn), fpath);
                s = WF_E_MALFORMED;
                goto out;
            }
            if (strcmp(json_string_value(m), base) != 0) {
                wf_errf(err, err_len,
                        "%s: tensor " NAME_FMT " is in both %s and %s (the weight_map names %s)",
                        index_rel, NAME_ARG(tn), fpath, json_string_value(m),
                        json_string_value(m));
                s = WF_E_MALFORMED;
                goto out;
            }
        }
    }
    /* ... and every mapped tensor present in its shard */
    json_object_foreach(wm, key, val) {
        const char *fn = json_string_value(val);
        for (size_t f = 0; f < ck->n_files; f++) {
            const char *fpath = wf_safetensors_path(ck->files[f]);
            const char *base = strrchr(fpath, '/');
            base = base != NULL ? base + 1 : fpath;
            if (strcmp(base, fn) == 0 && wf_safetensors_find(ck->files[f], key) < 0) {
                wf_errf(err, err_len,
                        "%s: tensor " NAME_FMT " is missing from %s, where the weight_map puts it",
                        index_rel, NAME_ARG(key), fpath);
                s = WF_E_MALFORMED;
                goto out;
            }
        }
    }
    s = ckpt_index(ck, err, err_len);
out:
    free(names);
    json_decref(root);
    if (s != WF_OK) {
        wf_checkpoint_close(&ck);
        return s;
    }
    *ret = ck;
    return WF_OK;
}

wf_status_t wf_checkpoint_open_dir(int root_fd, const char *dir,
                                   const wf_st_options_t *opt,
                                   wf_checkpoint_t **ret,
                                   char *err, size_t err_len)
{
    wf_resolve_mode_t mode = opt != NULL ? opt->resolve : WF_RESOLVE_AUTO;
    if (dir == NULL)
        dir = "";
    char *index = join_path(dir, strlen(dir), WF_DIFFUSERS_INDEX);
    char *single = join_path(dir, strlen(dir), WF_DIFFUSERS_WEIGHTS);
    wf_status_t s;
    if (index == NULL || single == NULL) {
        wf_errf(err, err_len, "%s: out of memory", dir);
        s = WF_E_NO_MEMORY;
    } else if (wf_model_file_exists(root_fd, index, mode)) {
        s = wf_checkpoint_open_index(root_fd, index, opt, ret, err, err_len);
    } else {
        s = wf_checkpoint_open_file(root_fd, single, opt, ret, err, err_len);
    }
    free(index);
    free(single);
    return s;
}

size_t wf_checkpoint_count(const wf_checkpoint_t *ck) { return ck->n; }

wf_ckpt_ref_t wf_checkpoint_at(const wf_checkpoint_t *ck, size_t i)
{
    wf_ckpt_ref_t none = { NULL, 0, NULL };
    return i < ck->n ? ck->refs[i] : none;
}

bool wf_checkpoint_find(const wf_checkpoint_t *ck, const char *name, wf_ckpt_ref_t *ret)
{
    size_t lo = 0, hi = ck->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, ck->refs[mid].tensor->name);
        if (c == 0) {
            *ret = ck->refs[mid];
            return true;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return false;
}

size_t wf_checkpoint_file_count(const wf_checkpoint_t *ck) { return ck->n_files; }

const wf_safetensors_t *wf_checkpoint_file(const wf_checkpoint_t *ck, size_t i)
{
    return i < ck->n_files ? ck->files[i] : NULL;
}

uint64_t wf_checkpoint_data_bytes(const wf_checkpoint_t *ck) { return ck->data_bytes; }
