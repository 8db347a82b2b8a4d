/* test_flux_host.c — the FLUX host copy and the sharded layout
 * (modelfiles/flux_host.h).
 *
 * Reads the fixtures diffusers wrote (tests/fixtures: one f32 file, an
 * index with four shards, bf16) and compares every host tensor byte for
 * byte with the checkpoint; writes sharded copies for tp 1, 2, 3, 4 under
 * a temporary model root, checks some pieces of the files directly, reads
 * them back and compares the reassembled copy with the plain one; then
 * damages sharded directories (a rank file missing, a file of another
 * degree, a piece of the wrong shape, a replicated tensor that differs,
 * ...) and checks that each is refused with a message naming the file.
 * Untrusted files: a checkpoint truncated between open and read is an
 * error (no SIGBUS); the writer refuses a symlinked, foreign or world-writable
 * output directory, does not follow symlinks or hard links at the names
 * it writes, and removes nothing it did not make.
 *
 * Usage: test_flux_host FIXTURES_DIR
 */
#include "flux_config.h"
#include "model_host.h"
#include "support/st_writer.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/check.h"
#include "tensor.h"

static int fix_fd = -1;        /* the fixtures directory as a model root */
static int tmp_fd = -1;        /* the temporary model root */
static char tmp_root[512];     /* its path */
static const char *fixtures_dir; /* argv[1] */

/* ---- helpers ------------------------------------------------------------ */

typedef struct progress {
    uint64_t last, total;
    int calls;
    bool monotonic;
} progress_t;

static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    progress_t *p = arg;
    if (done < p->last || (p->calls > 0 && total != p->total) || done > total)
        p->monotonic = false;
    p->last = done;
    p->total = total;
    p->calls++;
}

static bool cfg_same(const wf_flux_config_t *a, const wf_flux_config_t *b)
{
    return a->patch_size == b->patch_size && a->in_channels == b->in_channels
           && a->out_channels == b->out_channels && a->num_layers == b->num_layers
           && a->num_single_layers == b->num_single_layers
           && a->attention_head_dim == b->attention_head_dim
           && a->num_attention_heads == b->num_attention_heads
           && a->joint_attention_dim == b->joint_attention_dim
           && a->pooled_projection_dim == b->pooled_projection_dim
           && a->guidance_embeds == b->guidance_embeds && a->n_axes == b->n_axes
           && memcmp(a->axes_dims_rope, b->axes_dims_rope, sizeof a->axes_dims_rope) == 0
           && a->inner_dim == b->inner_dim && a->mlp_hidden_dim == b->mlp_hidden_dim;
}

static bool plan_same(const wf_tp_plan_t *a, const wf_tp_plan_t *b)
{
    if (a->n != b->n)
        return false;
    for (uint32_t i = 0; i < a->n; i++)
        if (strcmp(a->rules[i].glob, b->rules[i].glob) != 0
            || a->rules[i].style != b->rules[i].style
            || a->rules[i].n_blocks != b->rules[i].n_blocks
            || memcmp(a->rules[i].blocks, b->rules[i].blocks,
                      a->rules[i].n_blocks * sizeof(uint32_t)) != 0)
            return false;
    return true;
}

/* Open + read `dir` under root; NULL on failure (reported). */
static wf_model_host_t *load(int root, const char *dir, bool sharded, const wf_tp_plan_t *plan,
                            uint32_t *ret_tp, const char *what)
{
    char err[512] = "";
    wf_model_source_t *src = NULL;
    wf_model_host_t *h = NULL;
    uint32_t tp = 77;
    wf_status_t s = wf_model_source_open(root, dir, sharded, plan, &src, &tp, err, sizeof err);
    CHECK(s == WF_OK, "%s: open %s: %s %s", what, dir, wf_status_name(s), err);
    if (s != WF_OK)
        return NULL;
    CHECK(sharded ? tp >= 1 : tp == 0, "%s: ret_tp %" PRIu32, what, tp);
    CHECK((wf_model_source_plan(src) != NULL) == sharded, "%s: source plan", what);
    progress_t p = { 0, 0, 0, true };
    s = wf_model_source_read(src, on_progress, &p, &h, err, sizeof err);
    CHECK(s == WF_OK, "%s: read %s: %s %s", what, dir, wf_status_name(s), err);
    if (s == WF_OK) {
        CHECK(p.monotonic && p.calls == (int)h->n && p.last == p.total
                  && p.total == wf_model_source_bytes(src),
              "%s: progress monotonic %d calls %d/%zu last %" PRIu64 " total %" PRIu64
              " bytes %" PRIu64, what, p.monotonic, p.calls, h->n, p.last, p.total,
              wf_model_source_bytes(src));
        CHECK(h->params == wf_model_source_params(src) && h->dtype == wf_model_source_dtype(src)
                  && cfg_same(wf_flux_cfg(&h->cfg), wf_flux_cfg(wf_model_source_config(src))), "%s: facts", what);
        /* one page-aligned slab (a GPU backend pins it once): every tensor
         * inside it, 64-byte aligned, none overlapping the next */
        const uint8_t *b = h->slab;
        long page = sysconf(_SC_PAGESIZE);
        size_t bad = 0;
        for (size_t i = 0; i < h->n; i++) {
            const uint8_t *d = h->t[i].data;
            bad += !(d >= b && d + h->t[i].nbytes <= b + h->slab_bytes &&
                     ((uintptr_t)d & 63) == 0);
            for (size_t j = 0; j < h->n; j++) {
                const uint8_t *e = h->t[j].data;
                bad += j != i && e >= d && e < d + h->t[i].nbytes;
            }
        }
        CHECK(b != NULL && page > 0 && (uintptr_t)b % (uintptr_t)page == 0 &&
                  h->slab_bytes % (size_t)page == 0 && h->slab_bytes >= h->bytes && bad == 0,
              "%s: slab %p of %zu bytes for %" PRIu64 ", %zu tensors outside or overlapping",
              what, (const void *)b, h->slab_bytes, h->bytes, bad);
    }
    if (ret_tp != NULL)
        *ret_tp = tp;
    wf_model_source_close(&src);
    CHECK(src == NULL, "close sets NULL");
    return h;
}

/* Every host tensor against the checkpoint, byte for byte. */
static void compare_with_checkpoint(const wf_model_host_t *h, const char *dir)
{
    char err[512] = "";
    wf_checkpoint_t *ck = NULL;
    wf_status_t s = wf_checkpoint_open_dir(fix_fd, dir, NULL, &ck, err, sizeof err);
    CHECK(s == WF_OK, "%s: checkpoint: %s", dir, err);
    if (s != WF_OK)
        return;
    CHECK(h->n == wf_checkpoint_count(ck) && h->n == wf_flux_tensor_count(wf_flux_cfg(&h->cfg)),
          "%s: %zu host tensors, %zu in the checkpoint", dir, h->n, wf_checkpoint_count(ck));
    uint64_t params = 0, bytes = 0, bad = 0;
    uint64_t by_dtype[3] = { 0, 0, 0 };
    for (size_t i = 0; i < h->n && i < wf_checkpoint_count(ck); i++) {
        const wf_host_tensor_t *t = &h->t[i];
        wf_ckpt_ref_t r = wf_checkpoint_at(ck, i);
        bool ok = strcmp(t->name, r.tensor->name) == 0 && t->dtype == r.tensor->dtype
                  && t->rank == r.tensor->rank && t->shape[0] == r.tensor->shape[0]
                  && (t->rank == 1 || t->shape[1] == r.tensor->shape[1])
                  && t->nbytes == r.tensor->nbytes && ((uintptr_t)t->data % 64) == 0
                  && memcmp(t->data, wf_safetensors_data(r.file, r.index), t->nbytes) == 0;
        if (!ok && bad++ < 3)
            CHECK(false, "%s: tensor %zu '%s' differs from the checkpoint", dir, i, t->name);
        if (i > 0 && strcmp(h->t[i - 1].name, t->name) >= 0)
            CHECK(false, "%s: not in name order at %zu", dir, i);
        CHECK(wf_model_host_find(h, t->name) == t, "%s: find '%s'", dir, t->name);
        params += r.tensor->numel;
        bytes += r.tensor->nbytes;
        by_dtype[t->dtype] += r.tensor->numel;
    }
    CHECK(bad == 0, "%s: %" PRIu64 " tensors differ", dir, bad);
    CHECK(h->params == params && h->bytes == bytes, "%s: params %" PRIu64 " bytes %" PRIu64,
          dir, h->params, h->bytes);
    CHECK(by_dtype[h->dtype] * 2 > params, "%s: majority dtype", dir);
    CHECK(wf_model_host_find(h, "x_embedder.weightx") == NULL
              && wf_model_host_find(h, "") == NULL, "find absent");
    wf_checkpoint_close(&ck);
}

static void compare_hosts(const wf_model_host_t *a, const wf_model_host_t *b, const char *what)
{
    CHECK(a->n == b->n && a->params == b->params && a->bytes == b->bytes
              && a->dtype == b->dtype && cfg_same(wf_flux_cfg(&a->cfg), wf_flux_cfg(&b->cfg)),
          "%s: host facts differ (%zu vs %zu tensors)", what, a->n, b->n);
    size_t bad = 0;
    for (size_t i = 0; i < a->n && i < b->n; i++) {
        const wf_host_tensor_t *x = &a->t[i], *y = &b->t[i];
        bool ok = strcmp(x->name, y->name) == 0 && x->dtype == y->dtype
                  && x->rank == y->rank && x->shape[0] == y->shape[0]
                  && x->shape[1] == y->shape[1] && x->nbytes == y->nbytes
                  && ((uintptr_t)y->data % 64) == 0
                  && memcmp(x->data, y->data, x->nbytes) == 0;
        if (!ok && bad++ < 3)
            CHECK(false, "%s: tensor '%s' differs after the round trip", what, x->name);
    }
    CHECK(bad == 0, "%s: %zu tensors differ", what, bad);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_tree(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static char *slurp(const char *path, size_t *ret_len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf != NULL) {
        buf[n] = '\0';
        *ret_len = (size_t)n;
    }
    return buf;
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *b = slurp(from, &n);
    CHECK(b != NULL && st_write_bytes(to, b, n) == 0, "copy %s -> %s", from, to);
    free(b);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Write `src` (fixtures) sharded for tp into tmp_root/out. */
static wf_status_t shard(const char *src, const wf_tp_plan_t *plan, int tp, const char *out,
                         char *err, size_t err_len)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp_root, out);
    return wf_model_write_sharded(fix_fd, src, plan, tp, path, err, err_len);
}

/* ---- plain checkpoints -------------------------------------------------- */

static wf_model_host_t *plain[3];
static const char *const fixtures[3] = { "flux-tiny", "flux-tiny-guidance", "flux-tiny-bf16" };

static void test_plain(void)
{
    for (int i = 0; i < 3; i++) {
        plain[i] = load(fix_fd, fixtures[i], false, NULL, NULL, fixtures[i]);
        if (plain[i] != NULL)
            compare_with_checkpoint(plain[i], fixtures[i]);
    }
    if (plain[0] != NULL)
        CHECK(plain[0]->dtype == WF_DTYPE_F32 && plain[0]->n == 62
                  && wf_flux_cfg(&plain[0]->cfg)->inner_dim == 48, "flux-tiny: dtype %d n %zu",
              (int)plain[0]->dtype, plain[0]->n);
    if (plain[1] != NULL)
        CHECK(wf_flux_cfg(&plain[1]->cfg)->guidance_embeds
                  && wf_model_host_find(plain[1], "time_text_embed.guidance_embedder."
                                                 "linear_1.weight") != NULL, "guidance");
    if (plain[2] != NULL)
        CHECK(plain[2]->dtype == WF_DTYPE_BF16, "bf16 dtype %d", (int)plain[2]->dtype);

    /* the f32 host copy of a bf16 checkpoint: every value exact (bf16 ->
     * f32 is exact), dtype and sizes updated, the checkpoint dtype kept */
    wf_model_host_t *h16 = load(fix_fd, fixtures[2], false, NULL, NULL, "bf16 to f32");
    if (h16 != NULL && plain[2] != NULL) {
        char e2[256] = "";
        uint64_t before = h16->bytes;
        wf_status_t cs = wf_model_host_to_f32(h16, e2, sizeof e2);
        CHECK(cs == WF_OK && h16->bytes == 2 * before && h16->dtype == WF_DTYPE_BF16,
              "to_f32: %s %s bytes %" PRIu64 " -> %" PRIu64, wf_status_name(cs), e2,
              before, h16->bytes);
        size_t bad = 0;
        for (size_t i = 0; i < h16->n; i++) {
            const wf_host_tensor_t *a = &h16->t[i], *b = &plain[2]->t[i];
            size_t n = (size_t)(b->nbytes / 2);
            float *ref = malloc(n * sizeof *ref + 4);
            if (ref == NULL)
                break;
            wf_convert_to_f32(ref, b->data, b->dtype, n);
            bad += a->dtype != WF_DTYPE_F32 || a->nbytes != n * 4 ||
                   ((uintptr_t)a->data & 63u) != 0 || memcmp(a->data, ref, n * 4) != 0;
            free(ref);
        }
        CHECK(bad == 0, "to_f32: %zu tensors differ", bad);
        /* the converted tensors' slab pages are given back, but the slab
         * stays mapped whole: a hole could be taken by another mapping
         * that freeing the slab would then unmap */
        long pg = sysconf(_SC_PAGESIZE);
        unsigned char *vec = pg > 0 ? malloc(h16->slab_bytes / (size_t)pg + 1) : NULL;
        int mc = vec ? mincore(h16->slab, h16->slab_bytes, vec) : -1;
        CHECK(mc == 0, "to_f32: slab %p of %zu bytes not mapped whole: %s", h16->slab,
              h16->slab_bytes, strerror(errno));
        free(vec);
        /* an f32 copy converts nothing */
        uint64_t b32 = plain[0] ? plain[0]->bytes : 0;
        CHECK(plain[0] == NULL || (wf_model_host_to_f32(plain[0], e2, sizeof e2) == WF_OK &&
                                   plain[0]->bytes == b32), "to_f32 of an f32 copy");
    }
    wf_model_host_free(&h16);

    /* phase-1 refusals */
    char err[512] = "";
    wf_model_source_t *src = NULL;
    wf_status_t s = wf_model_source_open(fix_fd, "../fixtures/flux-tiny", false, NULL, &src,
                                        NULL, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && src == NULL, "'..' refused: %s %s", wf_status_name(s), err);
    s = wf_model_source_open(fix_fd, "no-such-model", false, NULL, &src, NULL, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strstr(err, "no-such-model/config.json") != NULL,
          "missing dir: %s %s", wf_status_name(s), err);
    s = wf_model_source_open(fix_fd, "flux-tiny", true, NULL, &src, NULL, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strstr(err, "not a sharded checkpoint") != NULL,
          "plain as sharded: %s %s", wf_status_name(s), err);
    wf_model_source_close(NULL);
    wf_model_host_free(NULL);
}

/* ---- the layout, checked without the reader ----------------------------- */

static const void *fixture_data(const char *name)
{
    const wf_host_tensor_t *t = wf_model_host_find(plain[0], name);
    return t != NULL ? t->data : NULL;
}

static void test_layout_tp2(void)
{
    char err[512] = "", path[1024];
    wf_status_t s = shard("flux-tiny", NULL, 2, "t2", err, sizeof err);
    CHECK(s == WF_OK, "shard tp 2: %s %s", wf_status_name(s), err);
    if (s != WF_OK || plain[0] == NULL)
        return;

    /* config.json as is */
    size_t a = 0, b = 0;
    snprintf(path, sizeof path, "%s/t2/config.json", tmp_root);
    char *x = slurp(path, &a), *y = NULL;
    wf_model_read_file(fix_fd, "flux-tiny/config.json", WF_RESOLVE_AUTO, 1 << 20, &y, &b,
                       err, sizeof err);
    CHECK(x != NULL && y != NULL && a == b && memcmp(x, y, a) == 0, "config.json copied");
    free(x);
    free(y);

    for (int r = 0; r < 2; r++) {
        char rel[128];
        snprintf(rel, sizeof rel, "t2/tp-rank-%05d-of-00002.safetensors", r);
        snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
        size_t n = 0;
        unsigned char *raw = (unsigned char *)slurp(path, &n);
        uint64_t hl = 0;
        for (int k = 0; raw != NULL && n >= 8 && k < 8; k++)
            hl |= (uint64_t)raw[k] << (8 * k);
        CHECK(raw != NULL && hl % 8 == 0 && hl > 0 && raw[8 + hl - 1] != 0,
              "%s: header length %" PRIu64 " is a multiple of 8", rel, hl);
        free(raw);

        wf_safetensors_t *f = NULL;
        s = wf_safetensors_open(tmp_fd, rel, NULL, &f, err, sizeof err);
        CHECK(s == WF_OK, "%s: %s", rel, err);
        if (s != WF_OK)
            continue;
        char want[8];
        snprintf(want, sizeof want, "%d", r);
        const char *fmt = wf_safetensors_metadata(f, "weft_format");
        const char *deg = wf_safetensors_metadata(f, "tp_degree");
        const char *rk = wf_safetensors_metadata(f, "tp_rank");
        const char *pj = wf_safetensors_metadata(f, "tp_plan");
        CHECK(fmt && strcmp(fmt, "tp-shard-1") == 0 && deg && strcmp(deg, "2") == 0 && rk
                  && strcmp(rk, want) == 0 && pj, "%s: metadata", rel);
        wf_tp_plan_t fp, def;
        wf_flux_family.default_plan(NULL, &def);
        CHECK(pj && wf_tp_plan_from_json(pj, strlen(pj), "m", &fp, err, sizeof err) == WF_OK
                  && plan_same(&fp, &def), "%s: tp_plan is the default", rel);
        CHECK(wf_safetensors_count(f) == 62, "%s: %zu tensors", rel, wf_safetensors_count(f));

        /* colwise to_q: rows [24r, 24r + 24) of [48, 48]; bias likewise */
        ptrdiff_t i = wf_safetensors_find(f, "transformer_blocks.0.attn.to_q.weight");
        const wf_st_tensor_t *t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        const float *full = fixture_data("transformer_blocks.0.attn.to_q.weight");
        CHECK(t && t->rank == 2 && t->shape[0] == 24 && t->shape[1] == 48 && full
                  && memcmp(wf_safetensors_data(f, (size_t)i), full + 24 * 48 * r,
                            24 * 48 * 4) == 0, "%s: to_q piece", rel);
        i = wf_safetensors_find(f, "transformer_blocks.0.attn.to_q.bias");
        t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        full = fixture_data("transformer_blocks.0.attn.to_q.bias");
        CHECK(t && t->rank == 1 && t->shape[0] == 24 && full
                  && memcmp(wf_safetensors_data(f, (size_t)i), full + 24 * r, 24 * 4) == 0,
              "%s: to_q bias piece", rel);

        /* rowwise to_out.0: columns [24r, 24r + 24) of each row; bias whole */
        i = wf_safetensors_find(f, "transformer_blocks.0.attn.to_out.0.weight");
        t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        full = fixture_data("transformer_blocks.0.attn.to_out.0.weight");
        bool ok = t && t->rank == 2 && t->shape[0] == 48 && t->shape[1] == 24 && full;
        for (int row = 0; ok && row < 48; row++) {
            float piece[24];
            memcpy(piece, (const char *)wf_safetensors_data(f, (size_t)i) + row * 24 * 4,
                   sizeof piece);
            ok = memcmp(piece, full + row * 48 + 24 * r, sizeof piece) == 0;
        }
        CHECK(ok, "%s: to_out.0 piece", rel);
        i = wf_safetensors_find(f, "transformer_blocks.0.attn.to_out.0.bias");
        t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        full = fixture_data("transformer_blocks.0.attn.to_out.0.bias");
        CHECK(t && t->shape[0] == 48 && full
                  && memcmp(wf_safetensors_data(f, (size_t)i), full, 48 * 4) == 0,
              "%s: rowwise bias whole", rel);

        /* packed_rowwise single proj_out [48, 240], blocks 48:192: row =
         * cols [24r, +24) then [48 + 96r, +96) */
        i = wf_safetensors_find(f, "single_transformer_blocks.0.proj_out.weight");
        t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        full = fixture_data("single_transformer_blocks.0.proj_out.weight");
        ok = t && t->rank == 2 && t->shape[0] == 48 && t->shape[1] == 120 && full;
        for (int row = 0; ok && row < 48; row++) {
            float piece[120];
            memcpy(piece, (const char *)wf_safetensors_data(f, (size_t)i) + row * 120 * 4,
                   sizeof piece);
            ok = memcmp(piece, full + row * 240 + 24 * r, 24 * 4) == 0
                 && memcmp(piece + 24, full + row * 240 + 48 + 96 * r, 96 * 4) == 0;
        }
        CHECK(ok, "%s: packed proj_out piece", rel);

        /* replicated: the embedder whole */
        i = wf_safetensors_find(f, "x_embedder.weight");
        t = i >= 0 ? wf_safetensors_tensor(f, (size_t)i) : NULL;
        full = fixture_data("x_embedder.weight");
        CHECK(t && t->shape[0] == 48 && t->shape[1] == 16 && full
                  && memcmp(wf_safetensors_data(f, (size_t)i), full, 48 * 16 * 4) == 0,
              "%s: replicated whole", rel);
        wf_safetensors_close(&f);
    }
}

/* ---- round trips -------------------------------------------------------- */

static void round_trip(int fixture, const wf_tp_plan_t *plan, int tp, const char *out)
{
    char err[512] = "";
    wf_status_t s = shard(fixtures[fixture], plan, tp, out, err, sizeof err);
    CHECK(s == WF_OK, "shard %s tp %d: %s %s", fixtures[fixture], tp, wf_status_name(s), err);
    if (s != WF_OK || plain[fixture] == NULL)
        return;
    char what[128];
    snprintf(what, sizeof what, "%s tp %d -> %s", fixtures[fixture], tp, out);
    uint32_t got_tp = 0;
    wf_model_host_t *h = load(tmp_fd, out, true, plan, &got_tp, what);
    CHECK(got_tp == (uint32_t)tp, "%s: tp %" PRIu32, what, got_tp);
    if (h != NULL)
        compare_hosts(plain[fixture], h, what);
    wf_model_host_free(&h);
    CHECK(h == NULL, "free sets NULL");

    /* the files' plan comes back */
    wf_model_source_t *src = NULL;
    s = wf_model_source_open(tmp_fd, out, true, NULL, &src, NULL, err, sizeof err);
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    CHECK(s == WF_OK && plan_same(wf_model_source_plan(src), plan ? plan : &def),
          "%s: source plan", what);
    wf_model_source_close(&src);
}

static void test_round_trips(void)
{
    round_trip(0, NULL, 1, "r1");
    round_trip(0, NULL, 2, "r2");
    round_trip(0, NULL, 4, "r4");
    round_trip(0, NULL, 3, "r3");
    round_trip(1, NULL, 2, "g2");
    round_trip(1, NULL, 4, "g4");
    round_trip(2, NULL, 2, "b2");
    round_trip(2, NULL, 4, "b4");

    /* a plan with every style: packed_colwise AdaLN (6 chunks), rowwise
     * embedder, colwise final projection with its bias */
    wf_tp_plan_t p;
    char err[512] = "";
    const char *pj = "{\"transformer_blocks.*.norm1.linear\": {\"style\": \"packed_colwise\","
                     " \"blocks\": [1, 1, 1, 1, 1, 1]},"
                     " \"x_embedder\": \"rowwise\", \"proj_out\": \"colwise\","
                     " \"single_transformer_blocks.*.proj_out\": {\"style\": "
                     "\"packed_rowwise\", \"blocks\": [1, 4]},"
                     " \"context_embedder\": \"replicated\"}";
    CHECK(wf_tp_plan_from_json(pj, strlen(pj), "p", &p, err, sizeof err) == WF_OK, "%s", err);
    round_trip(0, &p, 4, "custom4");
    round_trip(1, &p, 2, "custom2");

    /* a plan asked for that differs from the files' */
    wf_tp_plan_t def;
    wf_flux_family.default_plan(NULL, &def);
    wf_model_source_t *src = NULL;
    wf_status_t s = wf_model_source_open(tmp_fd, "custom4", true, &def, &src, NULL, err,
                                        sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && src == NULL
              && strstr(err, "custom4/tp-rank-00000-of-00004.safetensors") != NULL,
          "plan mismatch: %s %s", wf_status_name(s), err);
    wf_tp_plan_t empty = { 0 };
    s = wf_model_source_open(tmp_fd, "custom4", true, &empty, &src, NULL, err, sizeof err);
    CHECK(s == WF_OK, "empty plan takes the files': %s", err);
    wf_model_source_close(&src);

    /* re-sharding into the same directory replaces the set */
    s = shard("flux-tiny", NULL, 4, "r2", err, sizeof err);
    CHECK(s == WF_OK, "re-shard: %s", err);
    char path[1024];
    snprintf(path, sizeof path, "%s/r2/tp-rank-00000-of-00002.safetensors", tmp_root);
    CHECK(!file_exists(path), "old tp 2 files removed");
    uint32_t tp = 0;
    wf_model_host_t *h = load(tmp_fd, "r2", true, NULL, &tp, "re-shard");
    CHECK(tp == 4, "re-sharded tp %" PRIu32, tp);
    if (h != NULL && plain[0] != NULL)
        compare_hosts(plain[0], h, "re-shard");
    wf_model_host_free(&h);

    /* refusals of the writer: nothing written */
    s = shard("flux-tiny", NULL, 5, "t5", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "Cannot colwise-shard '") != NULL
              && strstr(err, "(48) across 5 tensor-parallel ranks: not divisible by 5.")
                     != NULL, "tp 5: %s %s", wf_status_name(s), err);
    snprintf(path, sizeof path, "%s/t5", tmp_root);
    CHECK(!file_exists(path), "tp 5 wrote nothing");
    const char *norm = "{\"transformer_blocks.*.attn.norm_q\": \"colwise\"}";
    CHECK(wf_tp_plan_from_json(norm, strlen(norm), "p", &p, err, sizeof err) == WF_OK, "%s",
          err);
    s = shard("flux-tiny", &p, 2, "tn", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "not a linear weight") != NULL
              && strstr(err, "transformer_blocks.0.attn.norm_q.weight") != NULL,
          "norm rule: %s %s", wf_status_name(s), err);
    s = shard("flux-tiny", NULL, 0, "t0", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT, "tp 0: %s", wf_status_name(s));
    s = shard("no-such", NULL, 2, "tx", err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strstr(err, "no-such/config.json") != NULL, "no source: %s",
          err);
}

/* ---- damaged sharded directories ---------------------------------------- */

/* Rewrite rank file `rel` (under tmp_root) with one change. */
typedef struct mutation {
    const char *reshape;       /* tensor given shape[] (same byte count) */
    int64_t shape[2];
    const char *flip;          /* tensor whose first byte is flipped */
    const char *meta_key;      /* metadata entry replaced */
    const char *meta_value;
    const char *extra;         /* a 4-byte F32 tensor added */
} mutation_t;

static void rewrite(const char *rel, const mutation_t *m)
{
    char err[512] = "", path[1024], tmp[1100];
    wf_safetensors_t *f = NULL;
    wf_status_t s = wf_safetensors_open(tmp_fd, rel, NULL, &f, err, sizeof err);
    CHECK(s == WF_OK, "rewrite %s: %s", rel, err);
    if (s != WF_OK)
        return;
    size_t n = wf_safetensors_count(f);
    st_w_tensor_t *t = calloc(n + 1, sizeof *t);
    void *flipped = NULL;
    static const float four = 4.0f;
    for (size_t i = 0; i < n; i++) {
        const wf_st_tensor_t *x = wf_safetensors_tensor(f, i);
        t[i].name = x->name;
        t[i].dtype = x->dtype == WF_DTYPE_F32 ? "F32" : x->dtype == WF_DTYPE_F16 ? "F16"
                                                                                 : "BF16";
        t[i].rank = x->rank;
        memcpy(t[i].shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
        t[i].data = wf_safetensors_data(f, i);
        t[i].nbytes = x->nbytes;
        if (m->reshape != NULL && strcmp(m->reshape, x->name) == 0) {
            t[i].rank = m->shape[1] ? 2 : 1;
            t[i].shape[0] = m->shape[0];
            t[i].shape[1] = m->shape[1];
        }
        if (m->flip != NULL && strcmp(m->flip, x->name) == 0) {
            flipped = malloc(x->nbytes);
            memcpy(flipped, t[i].data, x->nbytes);
            ((unsigned char *)flipped)[0] ^= 0x01;
            t[i].data = flipped;
        }
    }
    if (m->extra != NULL) {
        t[n].name = m->extra;
        t[n].dtype = "F32";
        t[n].rank = 1;
        t[n].shape[0] = 1;
        t[n].data = &four;
        t[n].nbytes = 4;
        n++;
    }
    json_t *meta = json_object();
    for (size_t i = 0; i < wf_safetensors_metadata_count(f); i++) {
        const char *k, *v;
        wf_safetensors_metadata_at(f, i, &k, &v);
        json_object_set_new(meta, k, json_string(v));
    }
    if (m->meta_key != NULL)
        json_object_set_new(meta, m->meta_key, json_string(m->meta_value));
    char *mj = json_dumps(meta, JSON_COMPACT);
    snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
    snprintf(tmp, sizeof tmp, "%s.new", path);
    CHECK(st_write(tmp, t, n, mj, 0) == 0 && rename(tmp, path) == 0, "rewrite %s", rel);
    free(mj);
    json_decref(meta);
    free(flipped);
    free(t);
    wf_safetensors_close(&f);
}

/* Open (and read) dir; expect status `want` at open, or at read when
 * at_read, with every needle in the message. */
static void expect_bad(const char *dir, wf_status_t want, bool at_read, const char *needle1,
                       const char *needle2, int line)
{
    char err[768] = "";
    wf_model_source_t *src = NULL;
    wf_model_host_t *h = NULL;
    wf_status_t s = wf_model_source_open(tmp_fd, dir, true, NULL, &src, NULL, err, sizeof err);
    if (at_read) {
        CHECK(s == WF_OK, "line %d: %s: open: %s", line, dir, err);
        if (s == WF_OK)
            s = wf_model_source_read(src, NULL, NULL, &h, err, sizeof err);
    }
    CHECK(s == want && h == NULL && (at_read || src == NULL) && strstr(err, needle1) != NULL
              && (needle2 == NULL || strstr(err, needle2) != NULL),
          "line %d: %s: got %s \"%s\", want %s with \"%s\"%s%s", line, dir, wf_status_name(s),
          err, wf_status_name(want), needle1, needle2 ? " and " : "", needle2 ? needle2 : "");
    wf_model_source_close(&src);
}
#define EXPECT_BAD(dir, want, at_read, n1, n2) \
    expect_bad(dir, want, at_read, n1, n2, __LINE__)

static void fresh(const char *out, int tp)
{
    char err[512] = "";
    wf_status_t s = shard("flux-tiny", NULL, tp, out, err, sizeof err);
    CHECK(s == WF_OK, "shard %s: %s", out, err);
}

static void test_corrupt(void)
{
    char a[1024], b[1024];

    /* a rank file missing */
    fresh("c-missing", 4);
    snprintf(a, sizeof a, "%s/c-missing/tp-rank-00002-of-00004.safetensors", tmp_root);
    CHECK(unlink(a) == 0, "unlink");
    EXPECT_BAD("c-missing", WF_E_MALFORMED, false,
               "c-missing/tp-rank-00002-of-00004.safetensors", "missing");
    /* rank 0 missing too: still found by the last rank */
    snprintf(a, sizeof a, "%s/c-missing/tp-rank-00000-of-00004.safetensors", tmp_root);
    CHECK(unlink(a) == 0, "unlink");
    EXPECT_BAD("c-missing", WF_E_MALFORMED, false,
               "c-missing/tp-rank-00000-of-00004.safetensors", "missing");

    /* a file of another degree under a rank name */
    fresh("c-degree", 2);
    fresh("c-degree4", 4);
    snprintf(a, sizeof a, "%s/c-degree4/tp-rank-00001-of-00004.safetensors", tmp_root);
    snprintf(b, sizeof b, "%s/c-degree/tp-rank-00001-of-00002.safetensors", tmp_root);
    copy_file(a, b);
    EXPECT_BAD("c-degree", WF_E_MALFORMED, false,
               "c-degree/tp-rank-00001-of-00002.safetensors", "tp_degree is \"4\"");

    /* two sets side by side */
    fresh("c-two", 2);
    snprintf(a, sizeof a, "%s/c-degree4/tp-rank-00000-of-00004.safetensors", tmp_root);
    snprintf(b, sizeof b, "%s/c-two/tp-rank-00000-of-00004.safetensors", tmp_root);
    copy_file(a, b);
    EXPECT_BAD("c-two", WF_E_MALFORMED, false, "c-two: sharded files for two tp degrees",
               NULL);

    /* rank metadata swapped */
    fresh("c-rank", 2);
    mutation_t mr = { .meta_key = "tp_rank", .meta_value = "0" };
    rewrite("c-rank/tp-rank-00001-of-00002.safetensors", &mr);
    EXPECT_BAD("c-rank", WF_E_MALFORMED, false, "c-rank/tp-rank-00001-of-00002.safetensors",
               "tp_rank");

    /* another plan in one file */
    fresh("c-plan", 2);
    mutation_t mp = { .meta_key = "tp_plan", .meta_value = "{\"x_embedder\": \"colwise\"}" };
    rewrite("c-plan/tp-rank-00001-of-00002.safetensors", &mp);
    EXPECT_BAD("c-plan", WF_E_MALFORMED, false, "c-plan/tp-rank-00001-of-00002.safetensors",
               "tp_plan differs");

    /* not written by weftctl shard */
    fresh("c-format", 2);
    mutation_t mf = { .meta_key = "weft_format", .meta_value = "other" };
    rewrite("c-format/tp-rank-00000-of-00002.safetensors", &mf);
    EXPECT_BAD("c-format", WF_E_MALFORMED, false,
               "c-format/tp-rank-00000-of-00002.safetensors", "weft_format");

    /* a piece with the wrong shape (same bytes) */
    fresh("c-shape", 2);
    mutation_t ms = { .reshape = "transformer_blocks.0.attn.to_q.weight", .shape = { 48, 24 } };
    rewrite("c-shape/tp-rank-00001-of-00002.safetensors", &ms);
    EXPECT_BAD("c-shape", WF_E_MALFORMED, false, "c-shape/tp-rank-00001-of-00002.safetensors",
               "'transformer_blocks.0.attn.to_q.weight' has shape [48, 24], but rank 1's "
               "piece under the files' tp_plan is [24, 48]");

    /* a replicated tensor that differs (found when reading) */
    fresh("c-repl", 2);
    mutation_t mx = { .flip = "x_embedder.weight" };
    rewrite("c-repl/tp-rank-00001-of-00002.safetensors", &mx);
    EXPECT_BAD("c-repl", WF_E_MALFORMED, true, "c-repl/tp-rank-00001-of-00002.safetensors",
               "replicated tensor 'x_embedder.weight' differs");
    /* a flipped sharded piece is not an error (nothing to compare), but
     * shows up in the host copy */
    fresh("c-piece", 2);
    mutation_t mq = { .flip = "transformer_blocks.0.attn.to_q.weight" };
    rewrite("c-piece/tp-rank-00001-of-00002.safetensors", &mq);
    wf_model_host_t *h = load(tmp_fd, "c-piece", true, NULL, NULL, "c-piece");
    const wf_host_tensor_t *t = h ? wf_model_host_find(h, mq.flip) : NULL;
    const unsigned char *orig = fixture_data(mq.flip);
    CHECK(t && orig && ((const unsigned char *)t->data)[24 * 48 * 4] == (orig[24 * 48 * 4] ^ 1)
              && memcmp(t->data, orig, 24 * 48 * 4) == 0, "flipped byte lands at row 24");
    wf_model_host_free(&h);

    /* an unexpected tensor */
    fresh("c-extra", 2);
    mutation_t me = { .extra = "transformer_blocks.0.attn.extra.weight" };
    rewrite("c-extra/tp-rank-00000-of-00002.safetensors", &me);
    EXPECT_BAD("c-extra", WF_E_MALFORMED, false, "c-extra/tp-rank-00000-of-00002.safetensors",
               "unexpected tensor 'transformer_blocks.0.attn.extra.weight'");

    /* config.json missing */
    fresh("c-config", 2);
    snprintf(a, sizeof a, "%s/c-config/config.json", tmp_root);
    CHECK(unlink(a) == 0, "unlink");
    EXPECT_BAD("c-config", WF_E_BAD_FIELD, false, "c-config/config.json", NULL);
}

/* ---- untrusted files: changing under the loader, the writer attacked ---- */

static char *read_text(const char *path)
{
    size_t n = 0;
    return slurp(path, &n);
}

/* Truncate the file of `rel` (under tmp_root) after the source is open. */
static void expect_shrink(const char *dir, bool sharded, const char *file)
{
    char err[768] = "", path[1024];
    wf_model_source_t *src = NULL;
    wf_model_host_t *h = NULL;
    wf_status_t s = wf_model_source_open(tmp_fd, dir, sharded, NULL, &src, NULL, err,
                                        sizeof err);
    CHECK(s == WF_OK, "%s: open: %s", dir, err);
    if (s != WF_OK)
        return;
    snprintf(path, sizeof path, "%s/%s/%s", tmp_root, dir, file);
    struct stat st;
    CHECK(stat(path, &st) == 0 && truncate(path, st.st_size / 2) == 0, "truncate %s", path);
    s = wf_model_source_read(src, NULL, NULL, &h, err, sizeof err);
    CHECK(s == WF_E_INTERNAL && h == NULL && strstr(err, file) != NULL
              && strstr(err, "the file shrank while loading") != NULL,
          "%s: read after truncate: %s \"%s\"", dir, wf_status_name(s), err);
    wf_model_host_free(&h);
    wf_model_source_close(&src);
}

static void test_shrink(void)
{
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/shrink", tmp_root);
    CHECK(mkdir(a, 0755) == 0, "mkdir");
    const char *names[] = { "config.json", WF_DIFFUSERS_WEIGHTS };
    for (int i = 0; i < 2; i++) {
        char fx[1024];
        snprintf(fx, sizeof fx, "%s/flux-tiny/%s", fixtures_dir, names[i]);
        snprintf(b, sizeof b, "%s/shrink/%s", tmp_root, names[i]);
        copy_file(fx, b);
    }
    expect_shrink("shrink", false, WF_DIFFUSERS_WEIGHTS);
    fresh("s-shrink", 2);
    expect_shrink("s-shrink", true, "tp-rank-00001-of-00002.safetensors");
}

/* Names in directory `dir` (under tmp_root) ending in ".tmp". */
static int count_tmp(const char *dir)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmp_root, dir);
    DIR *d = opendir(p);
    int n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        n += l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void test_writer_attacks(void)
{
    char err[768] = "", a[2048], b[2048];
    /* a victim directory whose files the attacker wants replaced */
    char victim[600];
    snprintf(victim, sizeof victim, "%s/victim", tmp_root);
    CHECK(mkdir(victim, 0755) == 0, "mkdir victim");
    const char *vnames[] = { "tp-rank-00000-of-00002.safetensors", "config.json",
                             "tp-rank-00000-of-00004.safetensors", "v1", "v2", "v3" };
    for (size_t i = 0; i < 6; i++) {
        snprintf(a, sizeof a, "%s/%s", victim, vnames[i]);
        CHECK(st_write_bytes(a, "victim data\n", 12) == 0, "write %s", a);
    }

    /* --out a symlink to it: refused, with or without a trailing '/' */
    snprintf(a, sizeof a, "%s/outlink", tmp_root);
    CHECK(symlink(victim, a) == 0, "symlink");
    wf_status_t s = shard("flux-tiny", NULL, 2, "outlink", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "outlink' is a symlink: refused") != NULL,
          "symlinked out: %s %s", wf_status_name(s), err);
    s = shard("flux-tiny", NULL, 2, "outlink/", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "is a symlink: refused") != NULL,
          "symlinked out/: %s %s", wf_status_name(s), err);
    for (size_t i = 0; i < 6; i++) {
        snprintf(a, sizeof a, "%s/%s", victim, vnames[i]);
        char *t = read_text(a);
        CHECK(t != NULL && strcmp(t, "victim data\n") == 0, "victim %s unchanged", vnames[i]);
        free(t);
    }
    snprintf(a, sizeof a, "%s/tp-rank-00001-of-00002.safetensors", victim);
    CHECK(!file_exists(a), "nothing written into the victim directory");
    CHECK(count_tmp("victim") == 0, "no temporary file in the victim directory");

    /* symlinks and hard links at the final names, and the old predictable
     * temporary name hard-linked to a victim: none followed or written
     * through; the links are replaced, the old temporary name left alone */
    snprintf(a, sizeof a, "%s/o-links", tmp_root);
    CHECK(mkdir(a, 0755) == 0, "mkdir");
    snprintf(a, sizeof a, "%s/v1", victim);
    snprintf(b, sizeof b, "%s/o-links/tp-rank-00000-of-00002.safetensors", tmp_root);
    CHECK(symlink(a, b) == 0, "symlink rank 0");
    snprintf(a, sizeof a, "%s/v2", victim);
    snprintf(b, sizeof b, "%s/o-links/tp-rank-00001-of-00002.safetensors", tmp_root);
    CHECK(link(a, b) == 0, "hard link rank 1");
    snprintf(a, sizeof a, "%s/v3", victim);
    snprintf(b, sizeof b, "%s/o-links/config.json", tmp_root);
    CHECK(symlink(a, b) == 0, "symlink config");
    snprintf(a, sizeof a, "%s/config.json", victim);
    snprintf(b, sizeof b, "%s/o-links/.tp-rank-00000-of-00002.safetensors.%ld.tmp", tmp_root,
             (long)getpid());
    CHECK(link(a, b) == 0, "hard link at the old temporary name");
    s = shard("flux-tiny", NULL, 2, "o-links", err, sizeof err);
    CHECK(s == WF_OK, "shard over links: %s", err);
    for (size_t i = 0; i < 6; i++) {
        snprintf(a, sizeof a, "%s/%s", victim, vnames[i]);
        char *t = read_text(a);
        CHECK(t != NULL && strcmp(t, "victim data\n") == 0, "victim %s unchanged after the "
              "links", vnames[i]);
        free(t);
    }
    const char *made[] = { "tp-rank-00000-of-00002.safetensors",
                           "tp-rank-00001-of-00002.safetensors", "config.json" };
    for (int i = 0; i < 3; i++) {
        struct stat st;
        snprintf(a, sizeof a, "%s/o-links/%s", tmp_root, made[i]);
        CHECK(lstat(a, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1,
              "%s is a new regular file", made[i]);
    }
    CHECK(file_exists(b), "the file at the old temporary name is not removed");
    CHECK(count_tmp("o-links") == 1, "no temporary file of ours left (%d)",
          count_tmp("o-links"));
    wf_model_host_t *h = load(tmp_fd, "o-links", true, NULL, NULL, "o-links");
    if (h != NULL && plain[0] != NULL)
        compare_hosts(plain[0], h, "o-links");
    wf_model_host_free(&h);

    /* a rank file of another degree that weftctl shard did not write: a
     * symlink, a plain file, a hard link; refused before anything is
     * written, left in place */
    static const struct {
        const char *dir;
        int kind; /* 0 symlink, 1 not a shard file, 2 hard link */
        const char *needle;
    } stale[] = {
        { "o-stale-sym", 0, "is a symlink" },
        { "o-stale-foreign", 1, "is not a rank file weftctl shard wrote" },
        { "o-stale-link", 2, "has more than one hard link" },
    };
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", tmp_root, stale[i].dir);
        CHECK(mkdir(a, 0755) == 0, "mkdir");
        snprintf(b, sizeof b, "%s/%s/tp-rank-00000-of-00004.safetensors", tmp_root,
                 stale[i].dir);
        snprintf(a, sizeof a, "%s/tp-rank-00000-of-00004.safetensors", victim);
        int rc = stale[i].kind == 0 ? symlink(a, b)
                 : stale[i].kind == 1 ? st_write_bytes(b, "mine\n", 5)
                                      : link(a, b);
        CHECK(rc == 0, "make %s", b);
        s = shard("flux-tiny", NULL, 2, stale[i].dir, err, sizeof err);
        CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "of another tp degree") != NULL
                  && strstr(err, stale[i].needle) != NULL,
              "%s: %s %s", stale[i].dir, wf_status_name(s), err);
        struct stat st;
        CHECK(lstat(b, &st) == 0, "%s: the file is still there", stale[i].dir);
        snprintf(b, sizeof b, "%s/%s/config.json", tmp_root, stale[i].dir);
        CHECK(!file_exists(b), "%s: nothing written", stale[i].dir);
        CHECK(count_tmp(stale[i].dir) == 0, "%s: no temporary file", stale[i].dir);
    }
    snprintf(a, sizeof a, "%s/tp-rank-00000-of-00004.safetensors", victim);
    char *t = read_text(a);
    CHECK(t != NULL && strcmp(t, "victim data\n") == 0, "stale victim unchanged");
    free(t);

    /* an output directory writable by everyone, and (as root) one owned
     * by another user */
    snprintf(a, sizeof a, "%s/o-world", tmp_root);
    CHECK(mkdir(a, 0755) == 0 && chmod(a, 0777) == 0, "mkdir 0777");
    s = shard("flux-tiny", NULL, 2, "o-world", err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strstr(err, "is writable by every user: refused") != NULL,
          "world-writable: %s %s", wf_status_name(s), err);
    if (geteuid() == 0) {
        snprintf(a, sizeof a, "%s/o-foreign", tmp_root);
        CHECK(mkdir(a, 0755) == 0 && chown(a, 4242, 4242) == 0, "chown");
        s = shard("flux-tiny", NULL, 2, "o-foreign", err, sizeof err);
        CHECK(s == WF_E_BAD_ARGUMENT
                  && strstr(err, "is owned by uid 4242, not by you (uid 0): refused") != NULL,
              "foreign: %s %s", wf_status_name(s), err);
        snprintf(b, sizeof b, "%s/o-foreign/config.json", tmp_root);
        CHECK(!file_exists(b) && count_tmp("o-foreign") == 0, "foreign: nothing written");
    } else {
        printf("(not root: the foreign-owner case is not run)\n");
    }

    /* a failure after the files are written (config.json is a directory):
     * the temporary files this call made are gone, the rest stays */
    snprintf(a, sizeof a, "%s/o-fail", tmp_root);
    snprintf(b, sizeof b, "%s/o-fail/config.json", tmp_root);
    CHECK(mkdir(a, 0755) == 0 && mkdir(b, 0755) == 0, "mkdir");
    s = shard("flux-tiny", NULL, 2, "o-fail", err, sizeof err);
    CHECK(s == WF_E_INTERNAL && strstr(err, "config.json: rename") != NULL,
          "rename onto a directory: %s %s", wf_status_name(s), err);
    CHECK(count_tmp("o-fail") == 0, "o-fail: temporary files removed (%d left)",
          count_tmp("o-fail"));
    struct stat st;
    CHECK(stat(b, &st) == 0 && S_ISDIR(st.st_mode), "o-fail: config.json left alone");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_flux_host FIXTURES_DIR\n");
        return 2;
    }
    char err[512] = "";
    fixtures_dir = argv[1];
    if (wf_model_root_open(argv[1], &fix_fd, err, sizeof err) != WF_OK) {
        fprintf(stderr, "fixtures: %s\n", err);
        return 1;
    }
    const char *tdir = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/test_flux_host.XXXXXX",
             tdir && tdir[0] ? tdir : "/tmp");
    if (mkdtemp(tmp_root) == NULL) {
        fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    if (wf_model_root_open(tmp_root, &tmp_fd, err, sizeof err) != WF_OK) {
        fprintf(stderr, "tmp root: %s\n", err);
        rm_tree(tmp_root);
        return 1;
    }

    test_plain();
    test_layout_tp2();
    test_round_trips();
    test_corrupt();
    test_shrink();
    test_writer_attacks();

    for (int i = 0; i < 3; i++)
        wf_model_host_free(&plain[i]);
    close(tmp_fd);
    close(fix_fd);
    rm_tree(tmp_root);
    printf("test_flux_host: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
