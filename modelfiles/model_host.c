/* model_host.c — a checkpoint of any family read into the daemon's host copy, and
 * the sharded layout (one safetensors file per tp rank) read and written
 * (see model_host.h).
 *
 * A source keeps the validated files open between the two phases; its
 * tensor table (name order, as the host copy) says for each tensor where
 * its bytes are: one checkpoint entry, or one piece per rank file. The
 * piece layout of a tensor is a view [outer, dim, inner] of the full
 * tensor cut on `dim` by wf_tp_pieces: a colwise weight is [1, out, in],
 * a rowwise one [out, in, 1], a colwise bias [1, out, 1]. The same view
 * cuts pieces when writing and pastes them back when reading, so the two
 * directions cannot disagree.
 *
 * The tp degree of a sharded directory is found by probing file names
 * (the model root gives no directory listing): rank 0 or the last rank of
 * each degree up to SHARD_MAX_TP. Not here: memory admission, cutting
 * device shards (the family's), logging.
 */
#include "model_host.h"
#include "errf.h"
#include "tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Most tp ranks a sharded directory may have: a cluster's whole world
 * (16 nodes of 64 devices, config.h), and the bound of the name probe. */
#define SHARD_MAX_TP 1024
/* Metadata of the sharded layout. */
#define SHARD_FORMAT "tp-shard-1"
/* Room for the plan's JSON text: per rule at most the quoted glob (129),
 * ':' and {"style":"packed_colwise","blocks":[8 x 10 digits]} (127) and
 * ','. */
#define PLAN_JSON_MAX (WF_TP_MAX_RULES * (WF_TP_GLOB_MAX + 192) + 16)
/* Alignment of host buffers. */
#define HOST_ALIGN 64

/* How one tensor is laid out over the rank files. */
typedef struct split {
    bool cut;                 /* false: whole on every rank */
    wf_tp_place_t place;      /* the weight's placement (pieces on dim) */
    int64_t outer, dim, inner; /* view of the full tensor; cut on dim */
    int rank;                 /* dims (1 .. WF_TENSOR_MAX_DIMS) */
    int64_t local[WF_TENSOR_MAX_DIMS]; /* local shape (only rank-2 weights
                                          and their biases are cut) */
} split_t;

/* One tensor of a source. */
typedef struct src_tensor {
    char name[WF_TENSOR_SPEC_NAME_MAX]; /* diffusers' name */
    wf_dtype_t dtype;         /* as stored (every rank file agrees) */
    int rank;                 /* 1 .. WF_TENSOR_MAX_DIMS */
    int64_t shape[WF_TENSOR_MAX_DIMS]; /* full shape (dims past rank: 0) */
    uint64_t numel, nbytes;   /* full */
    wf_ckpt_ref_t ref;        /* plain checkpoint: where it is */
    split_t split;            /* sharded: how it is cut */
} src_tensor_t;

struct wf_model_source {
    char dir[WF_MODEL_PATH_MAX + 1]; /* as given, for messages */
    wf_model_cfg_t cfg;       /* config.json, validated (its family) */
    bool sharded;             /* the per-rank layout */
    uint32_t tp;              /* sharded: the files' degree */
    wf_tp_plan_t plan;        /* sharded: the files' plan */
    wf_checkpoint_t *ck;      /* plain: the checkpoint (owned) */
    wf_safetensors_t **files; /* sharded: tp files in rank order (owned) */
    size_t n;                 /* tensors */
    src_tensor_t *t;          /* in name order */
    uint64_t params;          /* elements */
    uint64_t bytes;           /* full tensor bytes (the host copy) */
    uint64_t read_bytes;      /* data bytes of the files */
    wf_dtype_t dtype;         /* majority dtype, by elements */
};

/* ---- small helpers ------------------------------------------------------ */

/* dir + "/" + name, or name when dir is "" or "." (trailing '/' of dir
 * dropped). false when it does not fit. */
static bool join(char *buf, size_t len, const char *dir, const char *name)
{
    size_t dl = strlen(dir);
    while (dl > 0 && dir[dl - 1] == '/')
        dl--;
    int n;
    if (dl == 0 || (dl == 1 && dir[0] == '.'))
        n = snprintf(buf, len, "%s", name);
    else
        n = snprintf(buf, len, "%.*s/%s", (int)dl, dir, name);
    return n >= 0 && (size_t)n < len;
}

static void shard_name(char *buf, size_t len, uint32_t rank, uint32_t tp)
{
    snprintf(buf, len, "tp-rank-%05" PRIu32 "-of-%05" PRIu32 ".safetensors", rank, tp);
}

static const char *st_dtype_name(wf_dtype_t dt)
{
    return dt == WF_DTYPE_F32 ? "F32" : dt == WF_DTYPE_F16 ? "F16" : "BF16";
}

static void shape_text(char *buf, size_t len, int rank, const int64_t *shape)
{
    size_t o = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < rank && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (o < len)
        snprintf(buf + o, len - o, "]");
}

/* Elements of a shape of `rank` dims. */
static uint64_t shape_numel(int rank, const int64_t *shape)
{
    uint64_t n = 1;
    for (int i = 0; i < rank; i++)
        n *= (uint64_t)shape[i];
    return n;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int cmp_spec_name(const void *a, const void *b)
{
    return strcmp(((const wf_tensor_spec_t *)a)->name,
                  ((const wf_tensor_spec_t *)b)->name);
}

static bool plan_equal(const wf_tp_plan_t *a, const wf_tp_plan_t *b)
{
    if (a->n != b->n)
        return false;
    for (uint32_t i = 0; i < a->n; i++) {
        const wf_tp_rule_t *x = &a->rules[i], *y = &b->rules[i];
        if (strcmp(x->glob, y->glob) != 0 || x->style != y->style
            || x->n_blocks != y->n_blocks)
            return false;
        for (uint32_t k = 0; k < x->n_blocks && k < WF_TP_MAX_BLOCKS; k++)
            if (x->blocks[k] != y->blocks[k])
                return false;
    }
    return true;
}

/* ---- the piece layout --------------------------------------------------- */

/* The split of tensor `s` (specs: all tensors, name order, to find a bias'
 * weight) under `plan` for `tp` ranks. Linear weights follow their rule; a
 * bias follows its weight on the rows (colwise, packed_colwise) and is
 * whole otherwise; any other tensor (norm weights) is whole and a rule
 * that shards it is refused. WF_E_BAD_ARGUMENT with the message. */
static wf_status_t tensor_split(const wf_tp_plan_t *plan, int tp,
                                const wf_tensor_spec_t *s,
                                const wf_tensor_spec_t *specs, size_t n,
                                split_t *ret, char *err, size_t err_len)
{
    memset(ret, 0, sizeof *ret);
    ret->rank = s->rank;
    memcpy(ret->local, s->shape, sizeof ret->local);

    char module[WF_TENSOR_SPEC_NAME_MAX];
    size_t len = strlen(s->name);
    bool weight = ends_with(s->name, ".weight"), bias = ends_with(s->name, ".bias");
    if (!weight && !bias)
        return WF_OK;
    size_t ml = len - (weight ? 7 : 5);
    memcpy(module, s->name, ml);
    module[ml] = '\0';

    int64_t out, in;
    if (weight && s->rank == 2) {
        out = s->shape[0];
        in = s->shape[1];
    } else if (bias) {
        wf_tensor_spec_t key;
        if (ml + sizeof ".weight" > sizeof key.name)
            return WF_OK;     /* no such weight name: whole */
        memcpy(key.name, module, ml);
        memcpy(key.name + ml, ".weight", sizeof ".weight");
        const wf_tensor_spec_t *w = bsearch(&key, specs, n, sizeof *specs, cmp_spec_name);
        if (w == NULL || w->rank != 2)
            return WF_OK;     /* not a linear's bias: whole */
        out = w->shape[0];
        in = w->shape[1];
    } else {
        int ri = wf_tp_plan_find(plan, module);
        if (ri >= 0 && plan->rules[ri].style != WF_TP_REPLICATED) {
            wf_errf(err, err_len, "tp_plan rule %d '%s' matches '%s', which is not a "
                    "linear weight and cannot be sharded", ri, plan->rules[ri].glob,
                    s->name);
            return WF_E_BAD_ARGUMENT;
        }
        return WF_OK;
    }

    wf_tp_place_t p;
    wf_status_t st = wf_tp_place(plan, module, out, in, tp, &p, err, err_len);
    if (st != WF_OK)
        return st;
    bool rows = p.style == WF_TP_COLWISE || p.style == WF_TP_PACKED_COLWISE;
    bool cols = p.style == WF_TP_ROWWISE || p.style == WF_TP_PACKED_ROWWISE;
    ret->place = p;
    if (weight && rows) {
        ret->cut = true;
        ret->outer = 1;
        ret->dim = out;
        ret->inner = in;
        ret->local[0] = p.local_out;
    } else if (weight && cols) {
        ret->cut = true;
        ret->outer = out;
        ret->dim = in;
        ret->inner = 1;
        ret->local[1] = p.local_in;
    } else if (bias && rows) {
        ret->cut = true;
        ret->outer = 1;
        ret->dim = out;
        ret->inner = 1;
        ret->local[0] = p.local_out;
    }
    return WF_OK;
}

static uint64_t local_numel(const split_t *sp)
{
    return shape_numel(sp->rank, sp->local);
}

/* Rank `rank`'s piece of a full tensor: full -> local. */
static void cut_piece(const split_t *sp, int rank, int tp, size_t es, const uint8_t *full,
                      uint8_t *local)
{
    int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS], ldim = 0;
    wf_tp_pieces(&sp->place, rank, tp, st, ln);
    for (uint32_t b = 0; b < sp->place.n_blocks; b++)
        ldim += ln[b];
    size_t row = (size_t)sp->inner * es;
    for (int64_t o = 0; o < sp->outer; o++) {
        int64_t loff = 0;
        for (uint32_t b = 0; b < sp->place.n_blocks; b++) {
            memcpy(local + (size_t)(o * ldim + loff) * row,
                   full + (size_t)(o * sp->dim + st[b]) * row, (size_t)ln[b] * row);
            loff += ln[b];
        }
    }
}

/* The inverse: local -> its place in the full tensor. */
static void paste_piece(const split_t *sp, int rank, int tp, size_t es,
                        const uint8_t *local, uint8_t *full)
{
    int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS], ldim = 0;
    wf_tp_pieces(&sp->place, rank, tp, st, ln);
    for (uint32_t b = 0; b < sp->place.n_blocks; b++)
        ldim += ln[b];
    size_t row = (size_t)sp->inner * es;
    for (int64_t o = 0; o < sp->outer; o++) {
        int64_t loff = 0;
        for (uint32_t b = 0; b < sp->place.n_blocks; b++) {
            memcpy(full + (size_t)(o * sp->dim + st[b]) * row,
                   local + (size_t)(o * ldim + loff) * row, (size_t)ln[b] * row);
            loff += ln[b];
        }
    }
}

/* ---- opening ------------------------------------------------------------ */

static void source_free(wf_model_source_t *s)
{
    if (s == NULL)
        return;
    wf_checkpoint_close(&s->ck);
    if (s->files != NULL)
        for (uint32_t r = 0; r < s->tp; r++)
            wf_safetensors_close(&s->files[r]);
    free(s->files);
    free(s->t);
    free(s);
}

static void count_dtypes(wf_model_source_t *s)
{
    uint64_t by[3] = { 0, 0, 0 };
    s->params = s->bytes = 0;
    for (size_t i = 0; i < s->n; i++) {
        s->params += s->t[i].numel;
        s->bytes += s->t[i].nbytes;
        if ((unsigned)s->t[i].dtype < 3)
            by[s->t[i].dtype] += s->t[i].numel;
    }
    s->dtype = WF_DTYPE_F32;
    if (by[WF_DTYPE_F16] > by[s->dtype])
        s->dtype = WF_DTYPE_F16;
    if (by[WF_DTYPE_BF16] > by[s->dtype])
        s->dtype = WF_DTYPE_BF16;
}

/* A plain diffusers checkpoint (one file or an index). */
static wf_status_t open_plain(int root_fd, wf_model_source_t *s, char *err, size_t err_len)
{
    wf_status_t st = wf_checkpoint_open_dir(root_fd, s->dir, NULL, &s->ck, err, err_len);
    if (st != WF_OK)
        return st;
    st = wf_model_check_checkpoint(&s->cfg, s->ck, err, err_len);
    if (st != WF_OK)
        return st;
    size_t n = wf_checkpoint_count(s->ck);
    s->t = calloc(n ? n : 1, sizeof *s->t);
    if (s->t == NULL) {
        wf_errf(err, err_len, "%s: out of memory", s->dir);
        return WF_E_NO_MEMORY;
    }
    s->read_bytes = 0;
    s->n = 0;
    for (size_t i = 0; i < n; i++) {
        wf_ckpt_ref_t r = wf_checkpoint_at(s->ck, i);
        if (wf_model_tensor_ignored(&s->cfg, r.tensor->name))
            continue; /* never read (the family's ignored_tensor) */
        src_tensor_t *t = &s->t[s->n++];
        /* the config check passed: names fit, ranks are the specs' */
        snprintf(t->name, sizeof t->name, "%s", r.tensor->name);
        t->dtype = r.tensor->dtype;
        t->rank = r.tensor->rank;
        for (int d = 0; d < t->rank && d < WF_TENSOR_MAX_DIMS; d++)
            t->shape[d] = r.tensor->shape[d];
        t->numel = r.tensor->numel;
        t->nbytes = r.tensor->nbytes;
        t->ref = r;
        s->read_bytes += t->nbytes;
    }
    count_dtypes(s);
    return WF_OK;
}

/* The tp degree of the sharded files in s->dir (see the file comment). */
static wf_status_t find_degree(int root_fd, const wf_model_source_t *s, uint32_t *ret,
                               char *err, size_t err_len)
{
    char name[64], rel[WF_MODEL_PATH_MAX + 1];
    uint32_t found = 0;
    for (uint32_t T = 1; T <= SHARD_MAX_TP; T++) {
        bool any = false;
        for (int k = 0; k < 2 && !any; k++) {
            shard_name(name, sizeof name, k == 0 ? 0 : T - 1, T);
            if (join(rel, sizeof rel, s->dir, name)
                && wf_model_file_exists(root_fd, rel, WF_RESOLVE_AUTO))
                any = true;
        }
        if (!any)
            continue;
        if (found != 0) {
            wf_errf(err, err_len, "%s: sharded files for two tp degrees (%" PRIu32 " and %"
                    PRIu32 "); keep one set", s->dir, found, T);
            return WF_E_MALFORMED;
        }
        found = T;
    }
    if (found == 0) {
        shard_name(name, sizeof name, 0, 1);
        wf_errf(err, err_len, "%s: not a sharded checkpoint: no tp-rank-RRRRR-of-TTTTT."
                "safetensors files (e.g. %s)", s->dir, name);
        return WF_E_BAD_FIELD;
    }
    *ret = found;
    return WF_OK;
}

/* Metadata of rank file r: format, degree, rank, plan (into *plan). */
static wf_status_t check_meta(const wf_safetensors_t *f, uint32_t r, uint32_t tp,
                              wf_tp_plan_t *plan, char *err, size_t err_len)
{
    const char *path = wf_safetensors_path(f);
    const char *fmt = wf_safetensors_metadata(f, "weft_format");
    if (fmt == NULL || strcmp(fmt, SHARD_FORMAT) != 0) {
        wf_errf(err, err_len, "%s: __metadata__ weft_format is %s%.40s%s, expected \""
                SHARD_FORMAT "\" (not written by weftctl shard)", path,
                fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
        return WF_E_MALFORMED;
    }
    char want[16];
    const char *deg = wf_safetensors_metadata(f, "tp_degree");
    snprintf(want, sizeof want, "%" PRIu32, tp);
    if (deg == NULL || strcmp(deg, want) != 0) {
        wf_errf(err, err_len, "%s: __metadata__ tp_degree is %s%.20s%s, but the files "
                "are named for tp %" PRIu32, path, deg ? "\"" : "",
                deg ? deg : "missing", deg ? "\"" : "", tp);
        return WF_E_MALFORMED;
    }
    const char *rk = wf_safetensors_metadata(f, "tp_rank");
    snprintf(want, sizeof want, "%" PRIu32, r);
    if (rk == NULL || strcmp(rk, want) != 0) {
        wf_errf(err, err_len, "%s: __metadata__ tp_rank is %s%.20s%s, expected %" PRIu32,
                path, rk ? "\"" : "", rk ? rk : "missing", rk ? "\"" : "", r);
        return WF_E_MALFORMED;
    }
    const char *pj = wf_safetensors_metadata(f, "tp_plan");
    if (pj == NULL) {
        wf_errf(err, err_len, "%s: __metadata__ tp_plan missing", path);
        return WF_E_MALFORMED;
    }
    char label[WF_MODEL_PATH_MAX + 32];
    snprintf(label, sizeof label, "%s: __metadata__ tp_plan", path);
    if (wf_tp_plan_from_json(pj, strlen(pj), label, plan, err, err_len) != WF_OK)
        return WF_E_MALFORMED;
    return WF_OK;
}

/* The tensors of rank file r against the expected list and the split. */
static wf_status_t check_pieces(const wf_model_source_t *s, uint32_t r, char *err,
                                size_t err_len)
{
    const wf_safetensors_t *f = s->files[r];
    const char *path = wf_safetensors_path(f);
    for (size_t i = 0; i < s->n; i++) {
        const src_tensor_t *t = &s->t[i];
        ptrdiff_t k = wf_safetensors_find(f, t->name);
        if (k < 0) {
            wf_errf(err, err_len, "%s: tensor '%s' missing", path, t->name);
            return WF_E_MALFORMED;
        }
        const wf_st_tensor_t *x = wf_safetensors_tensor(f, (size_t)k);
        const split_t *sp = &t->split;
        bool same = x->rank == sp->rank;
        for (int d = 0; same && d < sp->rank; d++)
            same = x->shape[d] == sp->local[d];
        if (!same) {
            char got[96], want[96];
            shape_text(want, sizeof want, sp->rank, sp->local);
            if (x->rank >= 1 && x->rank <= WF_TENSOR_MAX_DIMS)
                shape_text(got, sizeof got, x->rank, x->shape);
            else
                snprintf(got, sizeof got, "of rank %d", x->rank);
            wf_errf(err, err_len, "%s: tensor '%s' has shape %s, but rank %" PRIu32
                    "'s piece under the files' tp_plan is %s", path, t->name, got, r, want);
            return WF_E_MALFORMED;
        }
        if (x->dtype != t->dtype) {
            wf_errf(err, err_len, "%s: tensor '%s' is %s, but %s in %s", path, t->name,
                    st_dtype_name(x->dtype), st_dtype_name(t->dtype),
                    wf_safetensors_path(s->files[0]));
            return WF_E_MALFORMED;
        }
    }
    if (wf_safetensors_count(f) != s->n) {
        /* every expected name is there: find the extra one */
        for (size_t k = 0; k < wf_safetensors_count(f); k++) {
            const char *nm = wf_safetensors_tensor(f, k)->name;
            bool known = false;
            for (size_t i = 0; i < s->n && !known; i++)
                known = strcmp(s->t[i].name, nm) == 0;
            if (!known) {
                wf_errf(err, err_len, "%s: unexpected tensor '%.80s' (not in the model "
                        "of config.json)", path, nm);
                return WF_E_MALFORMED;
            }
        }
        wf_errf(err, err_len, "%s: %zu tensors, expected %zu", path,
                wf_safetensors_count(f), s->n);
        return WF_E_MALFORMED;
    }
    return WF_OK;
}

static wf_status_t open_sharded(int root_fd, wf_model_source_t *s, const wf_tp_plan_t *want,
                                char *err, size_t err_len)
{
    wf_status_t st = find_degree(root_fd, s, &s->tp, err, err_len);
    if (st != WF_OK)
        return st;
    uint32_t tp = s->tp;
    s->files = calloc(tp, sizeof *s->files);
    wf_tp_plan_t *other = malloc(sizeof *other);
    wf_tensor_spec_t *specs = NULL;
    size_t n = 0;
    if (s->files == NULL || other == NULL) {
        wf_errf(err, err_len, "%s: out of memory", s->dir);
        st = WF_E_NO_MEMORY;
        goto out;
    }
    char name[64], rel[WF_MODEL_PATH_MAX + 1];
    for (uint32_t r = 0; r < tp; r++) {
        shard_name(name, sizeof name, r, tp);
        if (!join(rel, sizeof rel, s->dir, name)) {
            wf_errf(err, err_len, "%s: path too long", s->dir);
            st = WF_E_BAD_FIELD;
            goto out;
        }
        if (!wf_model_file_exists(root_fd, rel, WF_RESOLVE_AUTO)) {
            wf_errf(err, err_len, "%s: missing: the directory holds tp %" PRIu32
                    " shards, and rank %" PRIu32 "'s file is not there", rel, tp, r);
            st = WF_E_MALFORMED;
            goto out;
        }
        st = wf_safetensors_open(root_fd, rel, NULL, &s->files[r], err, err_len);
        if (st != WF_OK)
            goto out;
        st = check_meta(s->files[r], r, tp, r == 0 ? &s->plan : other, err, err_len);
        if (st != WF_OK)
            goto out;
        if (r > 0 && !plan_equal(&s->plan, other)) {
            wf_errf(err, err_len, "%s: __metadata__ tp_plan differs from the one of %s",
                    rel, wf_safetensors_path(s->files[0]));
            st = WF_E_MALFORMED;
            goto out;
        }
        if (r == 0 && want != NULL && want->n > 0 && !plan_equal(&s->plan, want)) {
            wf_errf(err, err_len, "%s: the tp_plan asked for differs from the plan the "
                    "sharded files were cut with (see its __metadata__ tp_plan); omit "
                    "tp_plan or shard again", rel);
            st = WF_E_BAD_ARGUMENT;
            goto out;
        }
    }

    /* the tensor table: the expected list, cut by the files' plan */
    st = s->cfg.fam->expected_tensors(s->cfg.b, &specs, &n, err, err_len);
    if (st != WF_OK)
        goto out;
    qsort(specs, n, sizeof *specs, cmp_spec_name);
    s->n = n;
    s->t = calloc(n ? n : 1, sizeof *s->t);
    if (s->t == NULL) {
        wf_errf(err, err_len, "%s: out of memory", s->dir);
        st = WF_E_NO_MEMORY;
        goto out;
    }
    s->read_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        src_tensor_t *t = &s->t[i];
        memcpy(t->name, specs[i].name, sizeof t->name);
        t->rank = specs[i].rank;
        memcpy(t->shape, specs[i].shape, sizeof t->shape);
        t->numel = shape_numel(t->rank, t->shape);
        char msg[384];
        if (tensor_split(&s->plan, (int)tp, &specs[i], specs, n, &t->split, msg, sizeof msg)
            != WF_OK) {
            wf_errf(err, err_len, "%s: the files' tp_plan does not fit the model: %s",
                    wf_safetensors_path(s->files[0]), msg);
            st = WF_E_MALFORMED;
            goto out;
        }
        ptrdiff_t k = wf_safetensors_find(s->files[0], t->name);
        if (k < 0) {
            wf_errf(err, err_len, "%s: tensor '%s' missing",
                    wf_safetensors_path(s->files[0]), t->name);
            st = WF_E_MALFORMED;
            goto out;
        }
        t->dtype = wf_safetensors_tensor(s->files[0], (size_t)k)->dtype;
        t->nbytes = t->numel * wf_dtype_size(t->dtype);
        uint64_t local = local_numel(&t->split) * wf_dtype_size(t->dtype);
        s->read_bytes += t->split.cut ? t->nbytes : local * tp;
    }
    for (uint32_t r = 0; r < tp; r++) {
        st = check_pieces(s, r, err, err_len);
        if (st != WF_OK)
            goto out;
    }
    count_dtypes(s);
out:
    free(specs);
    free(other);
    return st;
}

wf_status_t wf_model_source_open(int root_fd, const char *dir,
                                bool already_sharded, const wf_tp_plan_t *plan,
                                wf_model_source_t **ret, uint32_t *ret_tp,
                                char *err, size_t err_len)
{
    if (dir == NULL || strlen(dir) > WF_MODEL_PATH_MAX) {
        wf_errf(err, err_len, "model directory %s", dir ? "path too long" : "missing");
        return WF_E_BAD_FIELD;
    }
    wf_model_source_t *s = calloc(1, sizeof *s);
    if (s == NULL) {
        wf_errf(err, err_len, "%s: out of memory", dir);
        return WF_E_NO_MEMORY;
    }
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->sharded = already_sharded;

    char rel[WF_MODEL_PATH_MAX + 1];
    wf_status_t st;
    if (!join(rel, sizeof rel, dir, "config.json")) {
        wf_errf(err, err_len, "%s: path too long", dir);
        st = WF_E_BAD_FIELD;
        goto fail;
    }
    st = wf_model_cfg_load(root_fd, rel, WF_RESOLVE_AUTO, 0, &s->cfg, err, err_len);
    if (st != WF_OK)
        goto fail;
    st = already_sharded ? open_sharded(root_fd, s, plan, err, err_len)
                         : open_plain(root_fd, s, err, err_len);
    if (st != WF_OK)
        goto fail;
    if (ret_tp != NULL)
        *ret_tp = already_sharded ? s->tp : 0;
    *ret = s;
    return WF_OK;
fail:
    source_free(s);
    return st;
}

const wf_model_cfg_t *wf_model_source_config(const wf_model_source_t *src)
{
    return &src->cfg;
}

uint64_t wf_model_source_params(const wf_model_source_t *src)
{
    return src->params;
}

uint64_t wf_model_source_bytes(const wf_model_source_t *src)
{
    return src->read_bytes;
}

wf_dtype_t wf_model_source_dtype(const wf_model_source_t *src)
{
    return src->dtype;
}

const wf_tp_plan_t *wf_model_source_plan(const wf_model_source_t *src)
{
    return src->sharded ? &src->plan : NULL;
}

void wf_model_source_close(wf_model_source_t **src)
{
    if (src == NULL)
        return;
    source_free(*src);
    *src = NULL;
}

/* ---- reading ------------------------------------------------------------ */

/* Whether p lies in h's slab. */
static bool in_slab(const wf_model_host_t *h, const void *p)
{
    const uint8_t *b = h->slab, *q = p;
    return b != NULL && q >= b && q < b + h->slab_bytes;
}

/* A tensor at each 64-byte offset of one page-aligned mapping: bytes of
 * the slab for tensors of these sizes (0 on overflow). */
static size_t slab_size(const src_tensor_t *t, size_t n, size_t page)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t alloc = ((size_t)t[i].nbytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
        alloc = alloc ? alloc : HOST_ALIGN;
        if (total > SIZE_MAX - alloc - page)
            return 0;
        total += alloc;
    }
    return (total + page - 1) / page * page;
}

void wf_model_host_free(wf_model_host_t **h)
{
    if (h == NULL || *h == NULL)
        return;
    for (size_t i = 0; i < (*h)->n; i++)
        if (!in_slab(*h, (*h)->t[i].data))
            free((*h)->t[i].data);
    if ((*h)->slab)
        munmap((*h)->slab, (*h)->slab_bytes);
    free((*h)->t);
    free(*h);
    *h = NULL;
}

/* Tensor t of a sharded source pasted together from every rank file;
 * scratch holds at least a piece and the whole tensor (for the replicated
 * check); *ret_read gets the bytes read. */
static wf_status_t read_sharded(const wf_model_source_t *s, const src_tensor_t *t,
                                uint8_t *full, uint8_t *scratch, uint64_t *ret_read,
                                char *err, size_t err_len)
{
    size_t es = wf_dtype_size(t->dtype);
    uint64_t local = local_numel(&t->split) * es;
    for (uint32_t r = 0; r < s->tp; r++) {
        const wf_safetensors_t *f = s->files[r];
        ptrdiff_t k = wf_safetensors_find(f, t->name);   /* checked at open */
        uint8_t *dst = (!t->split.cut && r == 0) ? full : scratch;
        wf_status_t st = wf_safetensors_read(f, (size_t)k, 0, dst, (size_t)local, err,
                                             err_len);
        if (st != WF_OK)
            return st;
        if (t->split.cut) {
            paste_piece(&t->split, (int)r, (int)s->tp, es, scratch, full);
        } else if (r > 0 && memcmp(full, scratch, (size_t)t->nbytes) != 0) {
            wf_errf(err, err_len, "%s: replicated tensor '%s' differs from its copy in %s",
                    wf_safetensors_path(f), t->name, wf_safetensors_path(s->files[0]));
            return WF_E_MALFORMED;
        }
        *ret_read += local;
    }
    return WF_OK;
}

/* qsort has no context argument: the source being sorted (one reading
 * thread at a time per process is not guaranteed, so this is
 * thread-local). */
static _Thread_local const wf_model_source_t *sort_src;

/* Tensor order in the files: by file, then by offset. */
static int cmp_file_order(const void *a, const void *b)
{
    const src_tensor_t *x = &sort_src->t[*(const size_t *)a];
    const src_tensor_t *y = &sort_src->t[*(const size_t *)b];
    uintptr_t fx = (uintptr_t)x->ref.file, fy = (uintptr_t)y->ref.file;
    if (fx != fy)
        return fx < fy ? -1 : 1;
    uint64_t ox = x->ref.tensor->offset, oy = y->ref.tensor->offset;
    return ox < oy ? -1 : ox > oy;
}

wf_status_t wf_model_source_read(wf_model_source_t *src,
                                wf_model_progress_fn progress, void *arg,
                                wf_model_host_t **ret, char *err, size_t err_len)
{
    wf_status_t st = WF_OK;
    wf_model_host_t *h = calloc(1, sizeof *h);
    if (h == NULL || (h->t = calloc(src->n ? src->n : 1, sizeof *h->t)) == NULL) {
        free(h);
        wf_errf(err, err_len, "%s: out of memory for the host copy", src->dir);
        return WF_E_NO_MEMORY;
    }
    h->cfg = src->cfg;
    h->dtype = src->dtype;
    h->params = src->params;
    h->bytes = src->bytes;
    h->n = src->n;          /* t[] is zeroed: a failure frees what was made */
    /* Copy in file order (the tensors are kept in name order): sequential
     * reads of each file let the kernel's read-ahead work. */
    size_t *order = malloc((src->n ? src->n : 1) * sizeof *order);
    if (order == NULL) {
        free(h->t);
        free(h);
        wf_errf(err, err_len, "%s: out of memory for the host copy", src->dir);
        return WF_E_NO_MEMORY;
    }
    for (size_t i = 0; i < src->n; i++)
        order[i] = i;
    /* a sharded tensor is read piece by piece into scratch (a piece, or a
     * replicated tensor's other copies) */
    uint8_t *scratch = NULL;
    if (src->sharded) {
        uint64_t most = 0;
        for (size_t i = 0; i < src->n; i++)
            if (src->t[i].nbytes > most)
                most = src->t[i].nbytes;
        scratch = malloc(most ? (size_t)most : 1);
        if (scratch == NULL) {
            free(order);
            free(h->t);
            free(h);
            wf_errf(err, err_len, "%s: out of memory for a %" PRIu64 "-byte buffer",
                    src->dir, most);
            return WF_E_NO_MEMORY;
        }
    }
    if (!src->sharded) {
        sort_src = src;
        qsort(order, src->n, sizeof *order, cmp_file_order);
        sort_src = NULL;
    }
    /* One mapping for every tensor, laid out in file order: a GPU backend
     * pins it with one registration (registering tensors one by one
     * fails where two share a page). */
    long page = sysconf(_SC_PAGESIZE);
    size_t slab = slab_size(src->t, src->n, page > 0 ? (size_t)page : 4096);
    void *base = slab ? mmap(NULL, slab, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0)
                      : MAP_FAILED;
    if (src->n > 0 && base == MAP_FAILED) {
        wf_errf(err, err_len, "%s: out of memory for the host copy (%zu bytes)", src->dir,
                slab);
        st = WF_E_NO_MEMORY;
        goto fail;
    }
    h->slab = src->n > 0 ? base : NULL;
    h->slab_bytes = src->n > 0 ? slab : 0;
    uint64_t done = 0;
    size_t at = 0;
    for (size_t k = 0; k < src->n; k++) {
        size_t i = order[k];
        const src_tensor_t *t = &src->t[i];
        wf_host_tensor_t *ht = &h->t[i];
        size_t size = (size_t)t->nbytes;
        size_t alloc = (size + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
        ht->data = (uint8_t *)base + at;
        at += alloc ? alloc : HOST_ALIGN;
        memcpy(ht->name, t->name, sizeof ht->name);
        ht->dtype = t->dtype;
        ht->rank = t->rank;
        memcpy(ht->shape, t->shape, sizeof ht->shape);
        ht->nbytes = t->nbytes;
        if (src->sharded) {
            st = read_sharded(src, t, ht->data, scratch, &done, err, err_len);
        } else {
            /* read, not mapped: a file that shrinks now is an error */
            st = wf_safetensors_read(t->ref.file, t->ref.index, 0, ht->data, size, err,
                                     err_len);
            done += t->nbytes;
        }
        if (st != WF_OK)
            goto fail;
        if (progress != NULL)
            progress(arg, done, src->read_bytes);
    }
    free(scratch);
    free(order);
    *ret = h;
    return WF_OK;
fail:
    free(scratch);
    free(order);
    wf_model_host_free(&h);
    return st;
}

/* A tensor's bytes the host copy no longer needs: its own allocation
 * freed, or the whole pages it covers in the slab returned to the system
 * with MADV_DONTNEED. The range stays mapped, so nothing else can be
 * mapped into it before wf_model_host_free unmaps the whole slab (an
 * munmap hole could be reused by another mapping, which that munmap would
 * then take away). Its neighbours' bytes stay. */
static void release(wf_model_host_t *h, void *data, size_t nbytes)
{
    if (!in_slab(h, data)) {
        free(data);
        return;
    }
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    uintptr_t lo = ((uintptr_t)data + page - 1) / page * page;
    uintptr_t hi = ((uintptr_t)data + nbytes) / page * page;
    if (hi > lo)
        (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

wf_status_t wf_model_host_to_f32(wf_model_host_t *h, char *err, size_t err_len)
{
    for (size_t i = 0; i < h->n; i++) {
        wf_host_tensor_t *t = &h->t[i];
        if (t->dtype == WF_DTYPE_F32)
            continue;
        uint64_t n = t->nbytes / wf_dtype_size(t->dtype);
        size_t bytes = (size_t)n * sizeof(float);
        size_t alloc = (bytes + HOST_ALIGN - 1) / HOST_ALIGN * HOST_ALIGN;
        float *f = aligned_alloc(HOST_ALIGN, alloc ? alloc : HOST_ALIGN);
        if (f == NULL) {
            wf_errf(err, err_len, "out of memory converting tensor '%s' to f32 "
                    "(%zu bytes)", t->name, bytes);
            return WF_E_NO_MEMORY;
        }
        wf_convert_to_f32(f, t->data, t->dtype, (size_t)n);
        release(h, t->data, (size_t)t->nbytes);
        t->data = f;
        h->bytes += bytes - t->nbytes;
        t->nbytes = bytes;
        t->dtype = WF_DTYPE_F32;
    }
    return WF_OK;
}

static int cmp_host_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const wf_host_tensor_t *)elem)->name);
}

const wf_host_tensor_t *wf_model_host_find(const wf_model_host_t *h, const char *name)
{
    if (h == NULL || name == NULL || h->n == 0)
        return NULL;
    return bsearch(name, h->t, h->n, sizeof *h->t, cmp_host_name);
}

/* ---- writing ------------------------------------------------------------ */

static wf_status_t write_all(int fd, const void *buf, size_t len, const char *path,
                             char *err, size_t err_len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            wf_errf(err, err_len, "%s: write: %s", path,
                    n < 0 ? strerror(errno) : "no progress");
            return WF_E_INTERNAL;
        }
        p += n;
        len -= (size_t)n;
    }
    return WF_OK;
}

/* The safetensors header of rank r's file, padded with spaces so the data
 * starts 8-byte aligned. Caller owns *ret (free). */
static wf_status_t shard_header(const wf_model_source_t *s, const split_t *splits,
                                uint32_t r, int tp, const char *plan_json,
                                char **ret, size_t *ret_len)
{
    json_t *root = json_object(), *meta = json_object();
    char num[16];
    wf_status_t st = WF_E_NO_MEMORY;
    if (root == NULL || meta == NULL)
        goto out;
    snprintf(num, sizeof num, "%d", tp);
    bool ok = json_object_set_new(meta, "weft_format", json_string(SHARD_FORMAT)) == 0
              && json_object_set_new(meta, "tp_degree", json_string(num)) == 0;
    snprintf(num, sizeof num, "%" PRIu32, r);
    ok = ok && json_object_set_new(meta, "tp_rank", json_string(num)) == 0
         && json_object_set_new(meta, "tp_plan", json_string(plan_json)) == 0;
    if (!ok || json_object_set(root, "__metadata__", meta) != 0)
        goto out;
    uint64_t off = 0;
    for (size_t i = 0; i < s->n; i++) {
        const src_tensor_t *t = &s->t[i];
        const split_t *sp = &splits[i];
        uint64_t nb = local_numel(sp) * wf_dtype_size(t->dtype);
        json_t *e = json_pack("{s:s, s:[I], s:[I, I]}", "dtype", st_dtype_name(t->dtype),
                              "shape", (json_int_t)sp->local[0], "data_offsets",
                              (json_int_t)off, (json_int_t)(off + nb));
        for (int d = 1; e != NULL && d < sp->rank; d++)
            if (json_array_append_new(json_object_get(e, "shape"),
                                      json_integer(sp->local[d])) != 0) {
                json_decref(e);
                e = NULL;
            }
        if (e == NULL || json_object_set_new(root, t->name, e) != 0)
            goto out;
        off += nb;
    }
    char *text = json_dumps(root, JSON_COMPACT);
    if (text == NULL)
        goto out;
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char *buf = malloc(padded);
    if (buf == NULL) {
        free(text);
        goto out;
    }
    memcpy(buf, text, len);
    memset(buf + len, ' ', padded - len);
    free(text);
    *ret = buf;
    *ret_len = padded;
    st = WF_OK;
out:
    json_decref(meta);
    json_decref(root);
    return st;
}

/* ---- the output directory and its files ---------------------------------
 *
 * The writer works under one descriptor of the output directory, opened
 * with O_NOFOLLOW after checking it is not a symlink, is the caller's and
 * not writable by everyone; every later name is resolved with openat /
 * renameat / unlinkat under that descriptor, so a symlink swapped in
 * for the directory afterwards changes nothing. A file is created only
 * with O_CREAT | O_EXCL | O_NOFOLLOW under a random name; a file is
 * removed only when it is one this call created (same inode) or a rank
 * file of another degree that weftctl shard wrote (a regular file of the
 * caller's, one link, whose metadata says "weft_format": "tp-shard-1"). */

/* A file this call created. */
typedef struct out_file {
    char tmp[128];            /* its temporary name ("" when none) */
    dev_t dev;                /* its inode, to unlink only ourselves */
    ino_t ino;
} out_file_t;

/* Open (creating it if missing) the output directory; *ret_fd is an
 * O_RDONLY | O_DIRECTORY descriptor. */
static wf_status_t open_out_dir(const char *out_dir, int *ret_fd, char *err, size_t err_len)
{
    char path[4096], q[256];
    size_t n = strlen(out_dir);
    wf_escape(q, sizeof q, out_dir, n, WF_ESC_ASCII);
    /* "link/" would follow the link whatever O_NOFOLLOW says */
    while (n > 1 && out_dir[n - 1] == '/')
        n--;
    if (n >= sizeof path) {
        wf_errf(err, err_len, "output directory '%s': path too long", q);
        return WF_E_BAD_ARGUMENT;
    }
    memcpy(path, out_dir, n);
    path[n] = '\0';
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        wf_errf(err, err_len, "output directory '%s': mkdir: %s", q, strerror(errno));
        return WF_E_INTERNAL;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat lst;
        if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
            wf_errf(err, err_len, "output directory '%s' is a symlink: refused (give the "
                    "directory itself)", q);
            return WF_E_BAD_ARGUMENT;
        }
        wf_errf(err, err_len, "output directory '%s': open: %s", q, strerror(e));
        return e == ENOTDIR ? WF_E_BAD_ARGUMENT : WF_E_INTERNAL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        wf_errf(err, err_len, "output directory '%s': fstat: %s", q, strerror(errno));
        close(fd);
        return WF_E_INTERNAL;
    }
    if (st.st_uid != geteuid()) {
        wf_errf(err, err_len, "output directory '%s' is owned by uid %u, not by you "
                "(uid %u): refused", q, (unsigned)st.st_uid, (unsigned)geteuid());
        close(fd);
        return WF_E_BAD_ARGUMENT;
    }
    if ((st.st_mode & S_IWOTH) != 0) {
        wf_errf(err, err_len, "output directory '%s' is writable by every user: refused",
                q);
        close(fd);
        return WF_E_BAD_ARGUMENT;
    }
    *ret_fd = fd;
    return WF_OK;
}

/* Create a new file for `final` under dfd: ".FINAL.RANDOM.tmp", O_EXCL so
 * that nothing already there (a file, a symlink) is opened. Returns the
 * fd, or -errno. */
static int create_temp(int dfd, const char *final, out_file_t *f)
{
    for (int tries = 0; tries < 16; tries++) {
        uint64_t rnd = 0;
        ssize_t got;
        do
            got = getrandom(&rnd, sizeof rnd, 0);
        while (got < 0 && errno == EINTR);
        if (got != (ssize_t)sizeof rnd)
            return got < 0 ? -errno : -EIO;
        snprintf(f->tmp, sizeof f->tmp, ".%s.%016" PRIx64 ".tmp", final, rnd);
        int fd = openat(dfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0644);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) != 0) {
                int e = errno;
                (void)unlinkat(dfd, f->tmp, 0); /* just made by O_EXCL: ours */
                close(fd);
                f->tmp[0] = '\0';
                return -e;
            }
            f->dev = st.st_dev;
            f->ino = st.st_ino;
            return fd;
        }
        if (errno != EEXIST) {
            int e = errno;
            f->tmp[0] = '\0';
            return -e;
        }
    }
    f->tmp[0] = '\0';
    return -EEXIST;
}

/* True when name under dfd is still the inode (dev, ino), not followed. */
static bool same_inode(int dfd, const char *name, dev_t dev, ino_t ino)
{
    struct stat st;
    return fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev
           && st.st_ino == ino;
}

/* Remove f's temporary file if it is still the one we made. */
static void drop_temp(int dfd, out_file_t *f)
{
    if (f->tmp[0] != '\0' && same_inode(dfd, f->tmp, f->dev, f->ino))
        (void)unlinkat(dfd, f->tmp, 0);
    f->tmp[0] = '\0';
}

/* Move f's temporary file to `final` (replacing the entry there, never
 * writing through it). */
static wf_status_t place_temp(int dfd, out_file_t *f, const char *final, const char *q,
                              char *err, size_t err_len)
{
    if (!same_inode(dfd, f->tmp, f->dev, f->ino)) {
        wf_errf(err, err_len, "%s/%s: the temporary file was replaced while writing: "
                "refused", q, f->tmp);
        return WF_E_INTERNAL;
    }
    if (renameat(dfd, f->tmp, dfd, final) != 0) {
        wf_errf(err, err_len, "%s/%s: rename: %s", q, final, strerror(errno));
        return WF_E_INTERNAL;
    }
    f->tmp[0] = '\0';
    return WF_OK;
}

/* Write rank r's file (a new temporary file f for `final`) in dfd; `full`
 * holds the largest tensor, `scratch` the largest piece. */
static wf_status_t write_rank(const wf_model_source_t *s, const split_t *splits, uint32_t r,
                              int tp, const char *plan_json, uint8_t *full, uint8_t *scratch,
                              int dfd, out_file_t *f, const char *final, const char *path,
                              char *err, size_t err_len)
{
    char *hdr = NULL;
    size_t hlen = 0;
    wf_status_t st = shard_header(s, splits, r, tp, plan_json, &hdr, &hlen);
    if (st != WF_OK) {
        wf_errf(err, err_len, "%s: out of memory for the header", path);
        return st;
    }
    int fd = create_temp(dfd, final, f);
    if (fd < 0) {
        wf_errf(err, err_len, "%s: creating a temporary file: %s", path, strerror(-fd));
        free(hdr);
        return WF_E_INTERNAL;
    }
    uint8_t le[8];
    for (int b = 0; b < 8; b++)
        le[b] = (uint8_t)((uint64_t)hlen >> (8 * b));
    st = write_all(fd, le, sizeof le, path, err, err_len);
    if (st == WF_OK)
        st = write_all(fd, hdr, hlen, path, err, err_len);
    for (size_t i = 0; i < s->n && st == WF_OK; i++) {
        const src_tensor_t *t = &s->t[i];
        size_t es = wf_dtype_size(t->dtype);
        st = wf_safetensors_read(t->ref.file, t->ref.index, 0, full, (size_t)t->nbytes, err,
                                 err_len);
        if (st != WF_OK)
            break;
        if (splits[i].cut) {
            cut_piece(&splits[i], (int)r, tp, es, full, scratch);
            st = write_all(fd, scratch, (size_t)(local_numel(&splits[i]) * es), path, err,
                           err_len);
        } else {
            st = write_all(fd, full, (size_t)t->nbytes, path, err, err_len);
        }
    }
    if (st == WF_OK && fsync(fd) != 0) {
        wf_errf(err, err_len, "%s: fsync: %s", path, strerror(errno));
        st = WF_E_INTERNAL;
    }
    if (close(fd) != 0 && st == WF_OK) {
        wf_errf(err, err_len, "%s: close: %s", path, strerror(errno));
        st = WF_E_INTERNAL;
    }
    free(hdr);
    return st;
}

/* A rank file of another degree than the one being written. */
typedef struct stale {
    char name[40];            /* tp-rank-RRRRR-of-TTTTT.safetensors */
    dev_t dev;                /* its inode when checked */
    ino_t ino;
} stale_t;

/* Find the rank files of other degrees than tp in dfd (the reader refuses
 * two sets, so they go once the new set is in place) and check that each
 * is one weftctl shard wrote (see above): anything else is left alone and
 * refused before a byte is written. Caller owns *ret (free). */
static wf_status_t find_stale(int dfd, int tp, const char *q, stale_t **ret, size_t *ret_n,
                              char *err, size_t err_len)
{
    int fd = dup(dfd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        wf_errf(err, err_len, "%s: opendir: %s", q, strerror(errno));
        if (fd >= 0)
            close(fd);
        return WF_E_INTERNAL;
    }
    wf_status_t st = WF_OK;
    stale_t *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        unsigned r, T;
        int used = 0;
        if (strlen(e->d_name) != strlen("tp-rank-00000-of-00000.safetensors")
            || sscanf(e->d_name, "tp-rank-%5u-of-%5u.safetensors%n", &r, &T, &used) != 2
            || used != (int)strlen(e->d_name) || T == (unsigned)tp)
            continue;
        struct stat lst;
        if (fstatat(dfd, e->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0)
            continue; /* gone already */
        const char *why = NULL;
        if (!S_ISREG(lst.st_mode))
            why = S_ISLNK(lst.st_mode) ? "is a symlink" : "is not a regular file";
        else if (lst.st_uid != geteuid())
            why = "is not yours";
        else if (lst.st_nlink != 1)
            why = "has more than one hard link";
        wf_safetensors_t *f = NULL;
        char ferr[64];
        if (why == NULL) {
            const char *fmt = NULL;
            if (wf_safetensors_open(dfd, e->d_name, NULL, &f, ferr, sizeof ferr) == WF_OK)
                fmt = wf_safetensors_metadata(f, "weft_format");
            if (fmt == NULL || strcmp(fmt, SHARD_FORMAT) != 0)
                why = "is not a rank file weftctl shard wrote";
            wf_safetensors_close(&f);
        }
        if (why != NULL) {
            wf_errf(err, err_len, "%s/%s: a rank file of another tp degree that %s: "
                    "refused (it would be removed; remove it yourself or choose another "
                    "directory)", q, e->d_name, why);
            st = WF_E_BAD_ARGUMENT;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? 2 * cap : 8;
            stale_t *nv = realloc(v, nc * sizeof *nv);
            if (nv == NULL) {
                wf_errf(err, err_len, "out of memory");
                st = WF_E_NO_MEMORY;
                break;
            }
            v = nv;
            cap = nc;
        }
        size_t nl = strlen(e->d_name);   /* the pattern above bounds it */
        if (nl >= sizeof v[n].name)
            continue;
        memcpy(v[n].name, e->d_name, nl + 1);
        v[n].dev = lst.st_dev;
        v[n].ino = lst.st_ino;
        n++;
    }
    closedir(d);
    if (st != WF_OK) {
        free(v);
        return st;
    }
    *ret = v;
    *ret_n = n;
    return WF_OK;
}

wf_status_t wf_model_write_sharded(int root_fd, const char *src_dir,
                                  const wf_tp_plan_t *plan, int tp,
                                  const char *out_dir, char *err, size_t err_len)
{
    if (tp < 1 || tp > SHARD_MAX_TP) {
        wf_errf(err, err_len, "tp degree %d out of range 1..%d", tp, SHARD_MAX_TP);
        return WF_E_BAD_ARGUMENT;
    }
    if (out_dir == NULL || out_dir[0] == '\0') {
        wf_errf(err, err_len, "output directory missing");
        return WF_E_BAD_ARGUMENT;
    }
    wf_tp_plan_t *def = NULL;
    wf_model_source_t *s = NULL;
    split_t *splits = NULL;
    char *plan_json = NULL, *config = NULL;
    uint8_t *scratch = NULL, *full = NULL;
    stale_t *stale = NULL;
    size_t n_stale = 0;
    out_file_t *files = NULL;  /* tp rank files, then config.json */
    int dfd = -1;
    wf_status_t st;
    char name[64], path[4352], q[256];
    wf_escape(q, sizeof q, out_dir, strlen(out_dir), WF_ESC_ASCII);

    if (plan != NULL && (st = wf_tp_plan_check(plan, err, err_len)) != WF_OK)
        goto out;
    plan_json = malloc(PLAN_JSON_MAX);
    files = calloc((size_t)tp + 1, sizeof *files);
    if (plan_json == NULL || files == NULL) {
        wf_errf(err, err_len, "out of memory");
        st = WF_E_NO_MEMORY;
        goto out;
    }
    st = wf_model_source_open(root_fd, src_dir, false, NULL, &s, NULL, err, err_len);
    if (st != WF_OK)
        goto out;
    if (plan == NULL) {
        /* the family's default plan: the config says which family */
        const wf_model_cfg_t *mc = wf_model_source_config(s);
        def = malloc(sizeof *def);
        if (def == NULL) {
            wf_errf(err, err_len, "out of memory");
            st = WF_E_NO_MEMORY;
            goto out;
        }
        mc->fam->default_plan(mc->b, def);
        plan = def;
    }
    st = wf_tp_plan_to_json(plan, plan_json, PLAN_JSON_MAX);
    if (st != WF_OK) {
        wf_errf(err, err_len, "tp_plan: cannot write it as JSON (%s)", wf_status_name(st));
        goto out;
    }

    /* every placement before any file is touched */
    wf_tensor_spec_t *specs = calloc(s->n ? s->n : 1, sizeof *specs);
    splits = calloc(s->n ? s->n : 1, sizeof *splits);
    if (specs == NULL || splits == NULL) {
        free(specs);
        wf_errf(err, err_len, "out of memory");
        st = WF_E_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < s->n; i++) {
        memcpy(specs[i].name, s->t[i].name, sizeof specs[i].name);
        specs[i].rank = s->t[i].rank;
        memcpy(specs[i].shape, s->t[i].shape, sizeof specs[i].shape);
    }
    uint64_t max_local = 0, max_full = 0;
    for (size_t i = 0; i < s->n && st == WF_OK; i++) {
        st = tensor_split(plan, tp, &specs[i], specs, s->n, &splits[i], err, err_len);
        uint64_t nb = local_numel(&splits[i]) * wf_dtype_size(s->t[i].dtype);
        if (splits[i].cut && nb > max_local)
            max_local = nb;
        if (s->t[i].nbytes > max_full)
            max_full = s->t[i].nbytes;
    }
    free(specs);
    if (st != WF_OK)
        goto out;
    scratch = malloc(max_local ? (size_t)max_local : 1);
    full = malloc(max_full ? (size_t)max_full : 1);
    if (scratch == NULL || full == NULL) {
        wf_errf(err, err_len, "out of memory for a %" PRIu64 "-byte tensor",
                max_full + max_local);
        st = WF_E_NO_MEMORY;
        goto out;
    }
    char rel[WF_MODEL_PATH_MAX + 1];
    size_t config_len = 0;
    if (!join(rel, sizeof rel, src_dir, "config.json")) {
        wf_errf(err, err_len, "%s: path too long", src_dir);
        st = WF_E_BAD_FIELD;
        goto out;
    }
    st = wf_model_read_file(root_fd, rel, WF_RESOLVE_AUTO, WF_MODEL_CONFIG_MAX_BYTES,
                            &config, &config_len, err, err_len);
    if (st != WF_OK)
        goto out;

    st = open_out_dir(out_dir, &dfd, err, err_len);
    if (st != WF_OK)
        goto out;
    st = find_stale(dfd, tp, q, &stale, &n_stale, err, err_len);
    if (st != WF_OK)
        goto out;

    /* temp files first; renamed into place only when all are written */
    for (uint32_t r = 0; r < (uint32_t)tp; r++) {
        shard_name(name, sizeof name, r, (uint32_t)tp);
        snprintf(path, sizeof path, "%s/%s", q, name);
        st = write_rank(s, splits, r, tp, plan_json, full, scratch, dfd, &files[r], name,
                        path, err, err_len);
        if (st != WF_OK)
            goto out;
    }
    out_file_t *cf = &files[tp];
    snprintf(path, sizeof path, "%s/config.json", q);
    int cfd = create_temp(dfd, "config.json", cf);
    if (cfd < 0) {
        wf_errf(err, err_len, "%s: creating a temporary file: %s", path, strerror(-cfd));
        st = WF_E_INTERNAL;
        goto out;
    }
    st = write_all(cfd, config, config_len, path, err, err_len);
    if (close(cfd) != 0 && st == WF_OK) {
        wf_errf(err, err_len, "%s: close: %s", path, strerror(errno));
        st = WF_E_INTERNAL;
    }
    if (st == WF_OK)
        st = place_temp(dfd, cf, "config.json", q, err, err_len);
    if (st != WF_OK)
        goto out;
    for (uint32_t r = 0; r < (uint32_t)tp; r++) {
        shard_name(name, sizeof name, r, (uint32_t)tp);
        st = place_temp(dfd, &files[r], name, q, err, err_len);
        if (st != WF_OK)
            goto out;
    }
    /* the old set goes, each file only if it is still the one checked */
    for (size_t i = 0; i < n_stale; i++)
        if (same_inode(dfd, stale[i].name, stale[i].dev, stale[i].ino)
            && unlinkat(dfd, stale[i].name, 0) != 0 && errno != ENOENT) {
            wf_errf(err, err_len, "%s/%s: unlink: %s", q, stale[i].name, strerror(errno));
            st = WF_E_INTERNAL;
            break;
        }
    if (st == WF_OK)
        (void)fsync(dfd);
out:
    for (int r = 0; files != NULL && dfd >= 0 && r <= tp; r++)
        drop_temp(dfd, &files[r]);
    if (dfd >= 0)
        close(dfd);
    free(files);
    free(stale);
    free(full);
    free(scratch);
    free(config);
    free(plan_json);
    free(splits);
    wf_model_source_close(&s);
    free(def);
    return st;
}
