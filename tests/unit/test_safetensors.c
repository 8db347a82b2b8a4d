/* test_safetensors.c — the safetensors reader and the model-root checks.
 *
 * Files come from two writers: st_writer (in this test, able to write any
 * broken file) and, when a fixtures directory is given as argv[1], the
 * Python safetensors package (tests/parity/make_fixtures.py). Every bad
 * case checks the status and that the message names what is wrong; path
 * cases run with openat2 and with the hand walk.
 *
 * Usage: test_safetensors [FIXTURES_DIR]
 */
#include "safetensors.h"
#include "support/st_writer.h"
#include "tensor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/check.h"

static int root_fd = -1;
static char base_dir[PATH_MAX];

static const wf_resolve_mode_t modes[2] = { WF_RESOLVE_AUTO, WF_RESOLVE_WALK };
static const char *const mode_name[2] = { "openat2", "walk" };

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/* Open `rel` under the root and expect failure with `want` and `needle` in
 * the message. */
static void expect_bad_mode(const char *rel, wf_resolve_mode_t mode, wf_status_t want,
                            const char *needle, int line)
{
    char err[512] = "";
    wf_safetensors_t *st = NULL;
    wf_st_options_t opt = { 0, mode };
    wf_status_t s = wf_safetensors_open(root_fd, rel, &opt, &st, err, sizeof err);
    CHECK(s == want && st == NULL && strstr(err, needle) != NULL,
          "line %d: %s [%s]: got %s \"%s\", want %s with \"%s\"", line, rel,
          mode_name[mode], wf_status_name(s), err, wf_status_name(want), needle);
    wf_safetensors_close(&st);
}

static void expect_bad(const char *rel, wf_status_t want, const char *needle, int line)
{
    expect_bad_mode(rel, WF_RESOLVE_AUTO, want, needle, line);
}

#define BAD(rel, want, needle) expect_bad(rel, want, needle, __LINE__)
#define BAD_BOTH(rel, want, needle)                                       \
    do {                                                                  \
        expect_bad_mode(rel, WF_RESOLVE_AUTO, want, needle, __LINE__);    \
        expect_bad_mode(rel, WF_RESOLVE_WALK, want, needle, __LINE__);    \
    } while (0)

static wf_safetensors_t *open_ok(const char *rel, wf_resolve_mode_t mode)
{
    char err[512] = "";
    wf_safetensors_t *st = NULL;
    wf_st_options_t opt = { 0, mode };
    wf_status_t s = wf_safetensors_open(root_fd, rel, &opt, &st, err, sizeof err);
    CHECK(s == WF_OK && st != NULL, "%s [%s]: %s %s", rel, mode_name[mode],
          wf_status_name(s), err);
    return s == WF_OK ? st : NULL;
}

/* ---- round trip --------------------------------------------------------- */

static void test_round_trip(void)
{
    float f32[6] = { 1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -65504.0f };
    uint16_t f16[4], bf16[4];
    const float src16[4] = { 0.5f, -1.0f, 1024.0f, -0.0009765625f };
    for (int i = 0; i < 4; i++) {
        f16[i] = wf_f32_to_f16(src16[i]);
        bf16[i] = wf_f32_to_bf16(src16[i] * 3.0f);
    }
    float scalar = 7.0f;
    st_w_tensor_t t[] = {
        { "w.f32", "F32", 2, { 2, 3 }, f32, sizeof f32 },
        { "w.f16", "F16", 1, { 4 }, f16, sizeof f16 },
        { "w.bf16", "BF16", 2, { 2, 2 }, bf16, sizeof bf16 },
        { "scalar", "F32", 0, { 0 }, &scalar, 4 },
        { "empty", "F32", 2, { 0, 3 }, NULL, 0 },
    };
    /* pad 1: 8 + N is odd, so every data pointer is misaligned */
    bool misaligned = false;
    for (size_t pad = 0; pad < 4; pad++) {
        CHECK(st_write("root/good.safetensors", t, 5,
                       "{\"format\":\"pt\",\"note\":\"h\\u00e9\"}", pad) == 0, "write");
        for (int m = 0; m < 2; m++) {
            wf_safetensors_t *st = open_ok("good.safetensors", modes[m]);
            if (st == NULL)
                continue;
            CHECK(wf_safetensors_count(st) == 5, "count %zu", wf_safetensors_count(st));
            /* name order */
            CHECK(strcmp(wf_safetensors_tensor(st, 0)->name, "empty") == 0, "order");
            CHECK(strcmp(wf_safetensors_tensor(st, 4)->name, "w.f32") == 0, "order");
            ptrdiff_t i = wf_safetensors_find(st, "w.f32");
            CHECK(i >= 0, "find w.f32");
            if (i >= 0) {
                const wf_st_tensor_t *ti = wf_safetensors_tensor(st, (size_t)i);
                CHECK(ti->dtype == WF_DTYPE_F32 && ti->rank == 2 && ti->shape[0] == 2
                      && ti->shape[1] == 3 && ti->numel == 6 && ti->nbytes == 24,
                      "w.f32 info");
                float got[6];
                wf_convert_to_f32(got, wf_safetensors_data(st, (size_t)i), WF_DTYPE_F32, 6);
                CHECK(memcmp(got, f32, sizeof got) == 0, "w.f32 data");
                if (((uintptr_t)wf_safetensors_data(st, (size_t)i) & 3) != 0)
                    misaligned = true;
            }
            i = wf_safetensors_find(st, "w.f16");
            CHECK(i >= 0, "find w.f16");
            if (i >= 0) {
                float got[4];
                wf_convert_to_f32(got, wf_safetensors_data(st, (size_t)i), WF_DTYPE_F16, 4);
                CHECK(wf_safetensors_tensor(st, (size_t)i)->dtype == WF_DTYPE_F16
                      && memcmp(got, src16, sizeof got) == 0, "w.f16 data");
            }
            i = wf_safetensors_find(st, "w.bf16");
            CHECK(i >= 0, "find w.bf16");
            if (i >= 0) {
                float got[4];
                wf_convert_to_f32(got, wf_safetensors_data(st, (size_t)i), WF_DTYPE_BF16, 4);
                bool same = true;
                for (int k = 0; k < 4; k++)
                    same = same && got[k] == wf_bf16_to_f32(bf16[k]);
                CHECK(wf_safetensors_tensor(st, (size_t)i)->nbytes == 8 && same,
                      "w.bf16 data");
            }
            i = wf_safetensors_find(st, "scalar");
            CHECK(i >= 0 && wf_safetensors_tensor(st, (size_t)i)->rank == 0
                  && wf_safetensors_tensor(st, (size_t)i)->numel == 1, "scalar");
            i = wf_safetensors_find(st, "empty");
            CHECK(i >= 0 && wf_safetensors_tensor(st, (size_t)i)->nbytes == 0
                  && wf_safetensors_data(st, (size_t)i) != NULL, "empty");
            CHECK(wf_safetensors_find(st, "nope") == -1, "find absent");
            CHECK(wf_safetensors_find(st, "w.f3") == -1, "find prefix");
            const char *v = wf_safetensors_metadata(st, "format");
            CHECK(v != NULL && strcmp(v, "pt") == 0, "metadata format");
            v = wf_safetensors_metadata(st, "note");
            CHECK(v != NULL && strcmp(v, "h\xc3\xa9") == 0, "metadata utf-8");
            CHECK(wf_safetensors_metadata(st, "x") == NULL, "metadata absent");
            CHECK(wf_safetensors_metadata_count(st) == 2, "metadata count");
            const char *k0, *v0;
            wf_safetensors_metadata_at(st, 0, &k0, &v0);
            CHECK(strcmp(k0, "format") == 0, "metadata order");
            CHECK(strcmp(wf_safetensors_path(st), "good.safetensors") == 0, "path");
            wf_safetensors_close(&st);
            CHECK(st == NULL, "close nulls");
        }
    }
    wf_safetensors_close(NULL);
    CHECK(misaligned, "no padding misaligned the data: unaligned reads untested");

    /* from a buffer */
    FILE *f = fopen("root/good.safetensors", "rb");
    static unsigned char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf, f) : 0;
    if (f)
        fclose(f);
    char err[256];
    wf_safetensors_t *st = NULL;
    CHECK(wf_safetensors_from_buffer(buf, n, "buf", NULL, &st, err, sizeof err) == WF_OK,
          "from_buffer: %s", err);
    CHECK(st != NULL && wf_safetensors_count(st) == 5, "from_buffer count");
    wf_safetensors_close(&st);
    CHECK(wf_safetensors_from_buffer(buf, n - 1, "buf", NULL, &st, err, sizeof err)
          == WF_E_MALFORMED, "from_buffer short");

    /* the empty file and null metadata */
    CHECK(st_write_raw("root/empty.safetensors", "{}", 0) == 0, "write");
    st = open_ok("empty.safetensors", WF_RESOLVE_AUTO);
    CHECK(st != NULL && wf_safetensors_count(st) == 0, "empty file");
    wf_safetensors_close(&st);
    CHECK(st_write_raw("root/nullmeta.safetensors", "{\"__metadata__\":null}  ", 0) == 0,
          "write");
    st = open_ok("nullmeta.safetensors", WF_RESOLVE_AUTO);
    CHECK(st != NULL && wf_safetensors_metadata_count(st) == 0, "null metadata");
    wf_safetensors_close(&st);

    /* name of 255 bytes: fine */
    char name[300];
    memset(name, 'n', 255);
    name[255] = '\0';
    st_w_tensor_t one = { name, "F32", 1, { 1 }, &scalar, 4 };
    CHECK(st_write("root/name255.safetensors", &one, 1, NULL, 0) == 0, "write");
    st = open_ok("name255.safetensors", WF_RESOLVE_AUTO);
    CHECK(st != NULL && wf_safetensors_find(st, name) == 0, "255-byte name");
    wf_safetensors_close(&st);
}

/* ---- bad files ---------------------------------------------------------- */

#define E(name, json) "\"" name "\":" json
#define T(dt, shape, b, e) "{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_bad_files(void)
{
    /* truncated: shorter than the length field, inside the header, inside
     * the data */
    CHECK(st_write_bytes("root/t5.safetensors", "\x10\0\0\0\0", 5) == 0, "write");
    BAD("t5.safetensors", WF_E_MALFORMED, "too short");
    CHECK(st_write_bytes("root/t0.safetensors", "", 0) == 0, "write");
    BAD("t0.safetensors", WF_E_MALFORMED, "0 bytes");
    const char *hdr = "{" E("a", T("F32", "[2,2]", 0, 16)) "}";
    CHECK(st_write_raw_n("root/thdr.safetensors", strlen(hdr) + 40, hdr, 0) == 0, "write");
    BAD("thdr.safetensors", WF_E_MALFORMED, "goes beyond the file");
    CHECK(st_write_raw("root/tdata.safetensors", hdr, 10) == 0, "write");
    BAD("tdata.safetensors", WF_E_MALFORMED, "go beyond the 10 bytes of data");
    BAD("tdata.safetensors", WF_E_MALFORMED, "'a'");

    /* header length: 0, 1, over the default cap, over a small cap */
    CHECK(st_write_raw_n("root/n0.safetensors", 0, "", 4) == 0, "write");
    BAD("n0.safetensors", WF_E_MALFORMED, "less than 2");
    CHECK(st_write_raw_n("root/n1.safetensors", 1, "{", 0) == 0, "write");
    BAD("n1.safetensors", WF_E_MALFORMED, "less than 2");
    CHECK(st_write_raw_n("root/ncap.safetensors", 100000001ull, "{}", 0) == 0, "write");
    BAD("ncap.safetensors", WF_E_LIMIT, "cap of 100000000");
    CHECK(st_write_raw_n("root/nhuge.safetensors", UINT64_MAX, "{}", 0) == 0, "write");
    BAD("nhuge.safetensors", WF_E_LIMIT, "cap");
    CHECK(st_write_raw("root/small.safetensors", hdr, 16) == 0, "write");
    {
        char err[256];
        wf_safetensors_t *st = NULL;
        wf_st_options_t opt = { 16, WF_RESOLVE_AUTO };
        wf_status_t s = wf_safetensors_open(root_fd, "small.safetensors", &opt, &st, err,
                                            sizeof err);
        CHECK(s == WF_E_LIMIT && strstr(err, "cap of 16") != NULL, "small cap: %s", err);
    }
    CHECK(st_write_raw_n("root/nbig.safetensors", 1000, "{}", 0) == 0, "write");
    BAD("nbig.safetensors", WF_E_MALFORMED, "beyond the file");

    /* JSON */
    CHECK(st_write_raw("root/json.safetensors", "{\"a\": {\"dtype\": ", 0) == 0, "write");
    BAD("json.safetensors", WF_E_MALFORMED, "JSON invalid");
    CHECK(st_write_raw("root/arr.safetensors", "[]", 0) == 0, "write");
    BAD("arr.safetensors", WF_E_MALFORMED, "not an object");
    CHECK(st_write_raw("root/trail.safetensors", "{} x", 0) == 0, "write");
    BAD("trail.safetensors", WF_E_MALFORMED, "JSON invalid");
    CHECK(st_write_bytes("root/nul.safetensors", "\x04\0\0\0\0\0\0\0{}\0 ", 12) == 0,
          "write");
    BAD("nul.safetensors", WF_E_MALFORMED, "JSON invalid");
    CHECK(st_write_raw("root/dup.safetensors",
                       "{" E("a", T("F32", "[1]", 0, 4)) "," E("a", T("F32", "[1]", 4, 8)) "}",
                       8) == 0, "write");
    BAD("dup.safetensors", WF_E_MALFORMED, "duplicate");
    CHECK(st_write_raw("root/notobj.safetensors", "{" E("a", "[1,2]") "}", 0) == 0, "write");
    BAD("notobj.safetensors", WF_E_MALFORMED, "'a': entry is not an object");

    /* dtype */
    CHECK(st_write_raw("root/f64.safetensors", "{" E("big.w", T("F64", "[2]", 0, 16)) "}", 16)
          == 0, "write");
    BAD("f64.safetensors", WF_E_BAD_DTYPE, "tensor 'big.w': unsupported dtype 'F64'");
    CHECK(st_write_raw("root/q4.safetensors", "{" E("q", T("Q4", "[2]", 0, 1)) "}", 1) == 0,
          "write");
    BAD("q4.safetensors", WF_E_BAD_DTYPE, "unknown dtype 'Q4'");
    CHECK(st_write_raw("root/f32lc.safetensors", "{" E("q", T("f32", "[1]", 0, 4)) "}", 4)
          == 0, "write");
    BAD("f32lc.safetensors", WF_E_BAD_DTYPE, "'q'");
    CHECK(st_write_raw("root/dtnum.safetensors",
                       "{\"q\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", 4) == 0,
          "write");
    BAD("dtnum.safetensors", WF_E_MALFORMED, "dtype is not a string");

    /* entries: missing / extra keys */
    CHECK(st_write_raw("root/nooff.safetensors", "{\"q\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4)
          == 0, "write");
    BAD("nooff.safetensors", WF_E_MALFORMED, "missing 'data_offsets'");
    CHECK(st_write_raw("root/extra.safetensors",
                       "{\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}",
                       4) == 0, "write");
    BAD("extra.safetensors", WF_E_MALFORMED, "unexpected key (only dtype, shape and data_offsets)");
    CHECK(st_write_raw("root/off3.safetensors",
                       "{\"q\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 8)
          == 0, "write");
    BAD("off3.safetensors", WF_E_MALFORMED, "data_offsets is not");
    CHECK(st_write_raw("root/offneg.safetensors", "{" E("q", T("F32", "[0]", -4, 0)) "}", 0)
          == 0, "write");
    BAD("offneg.safetensors", WF_E_MALFORMED, "data_offsets is not");
    CHECK(st_write_raw("root/rev.safetensors", "{" E("q", T("F32", "[1]", 4, 0)) "}", 4) == 0,
          "write");
    BAD("rev.safetensors", WF_E_MALFORMED, "end before they begin");

    /* shapes */
    CHECK(st_write_raw("root/rank9.safetensors",
                       "{" E("r9", T("F32", "[1,1,1,1,1,1,1,1,1]", 0, 4)) "}", 4) == 0, "write");
    BAD("rank9.safetensors", WF_E_BAD_SHAPE, "tensor 'r9': rank 9 is more than 8");
    CHECK(st_write_raw("root/rank8.safetensors",
                       "{" E("r8", T("F32", "[1,1,1,1,1,1,1,2]", 0, 8)) "}", 8) == 0, "write");
    wf_safetensors_t *st = open_ok("rank8.safetensors", WF_RESOLVE_AUTO);
    CHECK(st != NULL && wf_safetensors_tensor(st, 0)->rank == 8, "rank 8 ok");
    wf_safetensors_close(&st);
    CHECK(st_write_raw("root/ovf.safetensors",
                       "{" E("h", T("F32", "[4294967296,4294967296]", 0, 0)) "}", 0) == 0,
          "write");
    BAD("ovf.safetensors", WF_E_BAD_SHAPE, "tensor 'h': element count overflows");
    CHECK(st_write_raw("root/ovfb.safetensors",
                       "{" E("h", T("F32", "[2305843009213693952,2]", 0, 0)) "}", 0) == 0,
          "write");
    BAD("ovfb.safetensors", WF_E_BAD_SHAPE, "byte size overflows");
    CHECK(st_write_raw("root/ovfj.safetensors",
                       "{" E("h", T("F32", "[99999999999999999999]", 0, 0)) "}", 0) == 0,
          "write");
    BAD("ovfj.safetensors", WF_E_MALFORMED, "JSON invalid");
    CHECK(st_write_raw("root/negdim.safetensors", "{" E("n", T("F32", "[2,-1]", 0, 0)) "}", 0)
          == 0, "write");
    BAD("negdim.safetensors", WF_E_BAD_SHAPE, "dim 1 is not a non-negative integer");
    CHECK(st_write_raw("root/realdim.safetensors", "{" E("n", T("F32", "[2.0]", 0, 8)) "}", 8)
          == 0, "write");
    BAD("realdim.safetensors", WF_E_BAD_SHAPE, "dim 0");
    CHECK(st_write_raw("root/shapestr.safetensors", "{" E("n", T("F32", "\"2\"", 0, 8)) "}", 8)
          == 0, "write");
    BAD("shapestr.safetensors", WF_E_BAD_SHAPE, "shape is not an array");
    CHECK(st_write_raw("root/mism.safetensors", "{" E("m", T("F16", "[2,3]", 0, 24)) "}", 24)
          == 0, "write");
    BAD("mism.safetensors", WF_E_BAD_SHAPE,
        "tensor 'm': shape [2, 3] of F16 is 12 bytes but data_offsets [0, 24) hold 24");

    /* layout of the data region */
    CHECK(st_write_raw("root/overlap.safetensors",
                       "{" E("a", T("F32", "[2]", 0, 8)) "," E("b", T("F32", "[2]", 4, 12)) "}",
                       12) == 0, "write");
    BAD("overlap.safetensors", WF_E_MALFORMED, "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    CHECK(st_write_raw("root/same.safetensors",
                       "{" E("a", T("F32", "[2]", 0, 8)) "," E("b", T("F32", "[2]", 0, 8)) "}",
                       8) == 0, "write");
    BAD("same.safetensors", WF_E_MALFORMED, "overlap");
    CHECK(st_write_raw("root/inside0.safetensors",
                       "{" E("a", T("F32", "[2]", 0, 8)) "," E("z", T("F32", "[0]", 4, 4)) "}",
                       8) == 0, "write");
    BAD("inside0.safetensors", WF_E_MALFORMED, "overlap");
    CHECK(st_write_raw("root/gap.safetensors",
                       "{" E("a", T("F32", "[2]", 0, 8)) "," E("b", T("F32", "[2]", 12, 20)) "}",
                       20) == 0, "write");
    BAD("gap.safetensors", WF_E_MALFORMED, "gap of 4 bytes in the data before tensor 'b'");
    CHECK(st_write_raw("root/gap0.safetensors", "{" E("a", T("F32", "[2]", 4, 12)) "}", 12)
          == 0, "write");
    BAD("gap0.safetensors", WF_E_MALFORMED, "gap of 4 bytes");
    CHECK(st_write_raw("root/trailing.safetensors", "{" E("a", T("F32", "[2]", 0, 8)) "}", 9)
          == 0, "write");
    BAD("trailing.safetensors", WF_E_MALFORMED, "1 trailing bytes");
    CHECK(st_write_raw("root/beyond.safetensors",
                       "{" E("a", T("F32", "[2]", 0, 8)) "," E("b", T("F32", "[2]", 8, 16)) "}",
                       12) == 0, "write");
    BAD("beyond.safetensors", WF_E_MALFORMED, "tensor 'b': data_offsets [8, 16) go beyond");
    CHECK(st_write_raw("root/nodata.safetensors", "{}", 3) == 0, "write");
    BAD("nodata.safetensors", WF_E_MALFORMED, "3 trailing bytes");

    /* names */
    char hbuf[1024], name[300];
    memset(name, 'n', 256);
    name[256] = '\0';
    snprintf(hbuf, sizeof hbuf, "{\"%s\":" T("F32", "[1]", 0, 4) "}", name);
    CHECK(st_write_raw("root/name256.safetensors", hbuf, 4) == 0, "write");
    BAD("name256.safetensors", WF_E_LIMIT, "longer than 255 bytes");
    CHECK(st_write_raw("root/name0.safetensors", "{" E("", T("F32", "[1]", 0, 4)) "}", 4) == 0,
          "write");
    BAD("name0.safetensors", WF_E_MALFORMED, "is empty");

    /* metadata */
    CHECK(st_write_raw("root/meta1.safetensors", "{\"__metadata__\":{\"a\":1}}", 0) == 0,
          "write");
    BAD("meta1.safetensors", WF_E_MALFORMED, "__metadata__ 'a' is not a string");
    CHECK(st_write_raw("root/meta2.safetensors", "{\"__metadata__\":[]}", 0) == 0, "write");
    BAD("meta2.safetensors", WF_E_MALFORMED, "__metadata__ is not an object");
}

/* ---- paths -------------------------------------------------------------- */

static void test_paths(void)
{
    float v = 1.0f;
    st_w_tensor_t t = { "x", "F32", 1, { 1 }, &v, 4 };
    CHECK(mkdir("root/sub", 0755) == 0 && mkdir("root/sub/deep", 0755) == 0
          && mkdir("outside", 0755) == 0, "mkdir");
    CHECK(st_write("root/sub/ok.safetensors", &t, 1, NULL, 0) == 0
          && st_write("outside/evil.safetensors", &t, 1, NULL, 0) == 0, "write");
    char abs_evil[PATH_MAX + 64];
    snprintf(abs_evil, sizeof abs_evil, "%s/outside/evil.safetensors", base_dir);
    char abs_out[PATH_MAX + 64];
    snprintf(abs_out, sizeof abs_out, "%s/outside", base_dir);
    CHECK(symlink(abs_evil, "root/abs_link.safetensors") == 0
          && symlink("../outside/evil.safetensors", "root/rel_out.safetensors") == 0
          && symlink("../../../outside/evil.safetensors", "root/sub/deep/up3.safetensors") == 0
          && symlink("sub/ok.safetensors", "root/in_link.safetensors") == 0
          && symlink("../ok.safetensors", "root/sub/deep/up1.safetensors") == 0
          && symlink("sub", "root/dirlink") == 0
          && symlink(abs_out, "root/dirout") == 0
          && symlink("../outside", "root/dirout_rel") == 0
          && symlink("loop_b", "root/loop_a") == 0 && symlink("loop_a", "root/loop_b") == 0
          && symlink("sub/deep/up1.safetensors", "root/chain.safetensors") == 0
          && symlink("/proc/self/fd/0", "root/magic") == 0,
          "symlink: %s", strerror(errno));
    CHECK(mkfifo("root/fifo.safetensors", 0644) == 0, "mkfifo");

    for (int m = 0; m < 2; m++) {
        wf_resolve_mode_t mode = modes[m];
        /* allowed: plain, nested, symlinks that stay inside */
        const char *good[] = { "sub/ok.safetensors", "./sub/ok.safetensors",
                               "sub//ok.safetensors", "in_link.safetensors",
                               "sub/deep/up1.safetensors", "dirlink/ok.safetensors",
                               "chain.safetensors" };
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
            wf_safetensors_t *st = open_ok(good[i], mode);
            CHECK(st != NULL && wf_safetensors_count(st) == 1, "%s", good[i]);
            wf_safetensors_close(&st);
        }
        expect_bad_mode("../outside/evil.safetensors", mode, WF_E_BAD_FIELD, "'..'", __LINE__);
        expect_bad_mode("sub/../sub/ok.safetensors", mode, WF_E_BAD_FIELD, "'..'", __LINE__);
        expect_bad_mode("sub/..", mode, WF_E_BAD_FIELD, "'..'", __LINE__);
        expect_bad_mode(abs_evil, mode, WF_E_BAD_FIELD, "absolute", __LINE__);
        expect_bad_mode("", mode, WF_E_BAD_FIELD, "empty", __LINE__);
        expect_bad_mode("abs_link.safetensors", mode, WF_E_BAD_FIELD, "outside the model root",
                        __LINE__);
        expect_bad_mode("rel_out.safetensors", mode, WF_E_BAD_FIELD, "outside the model root",
                        __LINE__);
        expect_bad_mode("sub/deep/up3.safetensors", mode, WF_E_BAD_FIELD,
                        "outside the model root", __LINE__);
        expect_bad_mode("dirout/evil.safetensors", mode, WF_E_BAD_FIELD,
                        "outside the model root", __LINE__);
        expect_bad_mode("dirout_rel/evil.safetensors", mode, WF_E_BAD_FIELD,
                        "outside the model root", __LINE__);
        expect_bad_mode("magic", mode, WF_E_BAD_FIELD, "refused", __LINE__);
        expect_bad_mode("loop_a", mode, WF_E_BAD_FIELD, "symlinks", __LINE__);
        expect_bad_mode("sub", mode, WF_E_BAD_FIELD, "'sub' is a directory", __LINE__);
        expect_bad_mode("dirlink", mode, WF_E_BAD_FIELD, "is a directory", __LINE__);
        expect_bad_mode("fifo.safetensors", mode, WF_E_BAD_FIELD, "is a FIFO", __LINE__);
        expect_bad_mode("missing.safetensors", mode, WF_E_BAD_FIELD, "does not exist",
                        __LINE__);
        expect_bad_mode("sub/ok.safetensors/x", mode, WF_E_BAD_FIELD, "not a directory",
                        __LINE__);
    }
    CHECK(wf_model_path_check("a/b..c/..d", NULL, 0) == WF_OK, "'..' only as a component");

    char err[256];
    int fd = -1;
    CHECK(wf_model_root_open("does/not/exist", &fd, err, sizeof err) == WF_E_BAD_FIELD,
          "root missing");
    CHECK(wf_model_root_open("root/sub/ok.safetensors", &fd, err, sizeof err)
          == WF_E_BAD_FIELD, "root not a dir: %s", err);
}

/* ---- checkpoints -------------------------------------------------------- */

static void write_shards(const char *dir)
{
    char p[PATH_MAX];
    float a[2] = { 1, 2 }, b[3] = { 3, 4, 5 }, c[1] = { 6 };
    st_w_tensor_t s1[] = { { "a", "F32", 1, { 2 }, a, 8 }, { "b", "F32", 1, { 3 }, b, 12 } };
    st_w_tensor_t s2[] = { { "c", "F32", 1, { 1 }, c, 4 } };
    snprintf(p, sizeof p, "%s/m-1.safetensors", dir);
    CHECK(st_write(p, s1, 2, NULL, 0) == 0, "write");
    snprintf(p, sizeof p, "%s/m-2.safetensors", dir);
    CHECK(st_write(p, s2, 1, NULL, 0) == 0, "write");
}

static void write_index(const char *dir, const char *json)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/" WF_DIFFUSERS_INDEX, dir);
    CHECK(st_write_bytes(p, json, strlen(json)) == 0, "write index");
}

static void expect_ckpt_bad(const char *dir, wf_status_t want, const char *needle, int line)
{
    char err[512] = "";
    wf_checkpoint_t *ck = NULL;
    wf_status_t s = wf_checkpoint_open_dir(root_fd, dir, NULL, &ck, err, sizeof err);
    CHECK(s == want && ck == NULL && strstr(err, needle) != NULL,
          "line %d: %s: got %s \"%s\", want %s with \"%s\"", line, dir, wf_status_name(s),
          err, wf_status_name(want), needle);
    wf_checkpoint_close(&ck);
}

static void test_checkpoints(void)
{
    char err[512];
    const char *good = "{\"metadata\":{\"total_size\":24},\"weight_map\":{"
                       "\"a\":\"m-1.safetensors\",\"b\":\"m-1.safetensors\","
                       "\"c\":\"m-2.safetensors\"}}";
    CHECK(mkdir("root/ck", 0755) == 0, "mkdir");
    write_shards("root/ck");
    write_index("root/ck", good);
    CHECK(st_write_bytes("root/ck/unrelated.safetensors", "junk", 4) == 0, "write junk");
    for (int m = 0; m < 2; m++) {
        wf_checkpoint_t *ck = NULL;
        wf_st_options_t opt = { 0, modes[m] };
        wf_status_t s = wf_checkpoint_open_dir(root_fd, "ck", &opt, &ck, err, sizeof err);
        CHECK(s == WF_OK, "sharded [%s]: %s", mode_name[m], err);
        if (s != WF_OK)
            continue;
        CHECK(wf_checkpoint_count(ck) == 3 && wf_checkpoint_file_count(ck) == 2
              && wf_checkpoint_data_bytes(ck) == 24, "sharded counts");
        wf_ckpt_ref_t r;
        CHECK(wf_checkpoint_find(ck, "c", &r)
              && strcmp(wf_safetensors_path(r.file), "ck/m-2.safetensors") == 0
              && r.tensor->numel == 1, "find c");
        float got[3];
        CHECK(wf_checkpoint_find(ck, "b", &r), "find b");
        wf_convert_to_f32(got, wf_safetensors_data(r.file, r.index), WF_DTYPE_F32, 3);
        CHECK(got[0] == 3 && got[2] == 5, "b data");
        CHECK(!wf_checkpoint_find(ck, "d", &r), "find absent");
        CHECK(strcmp(wf_checkpoint_at(ck, 0).tensor->name, "a") == 0
              && strcmp(wf_checkpoint_at(ck, 2).tensor->name, "c") == 0, "name order");
        wf_checkpoint_close(&ck);
        CHECK(ck == NULL, "close nulls");
    }
    wf_checkpoint_close(NULL);

    /* one-file checkpoint chosen when there is no index */
    CHECK(mkdir("root/one", 0755) == 0, "mkdir");
    write_shards("root/one");
    CHECK(rename("root/one/m-1.safetensors", "root/one/" WF_DIFFUSERS_WEIGHTS) == 0, "rename");
    wf_checkpoint_t *ck = NULL;
    CHECK(wf_checkpoint_open_dir(root_fd, "one", NULL, &ck, err, sizeof err) == WF_OK
          && wf_checkpoint_count(ck) == 2 && wf_checkpoint_file_count(ck) == 1,
          "one-file: %s", err);
    wf_checkpoint_close(&ck);
    expect_ckpt_bad("nowhere", WF_E_BAD_FIELD, "does not exist", __LINE__);

    /* a shard missing */
    CHECK(mkdir("root/ck_missing", 0755) == 0, "mkdir");
    write_shards("root/ck_missing");
    write_index("root/ck_missing", "{\"weight_map\":{\"a\":\"m-1.safetensors\","
                                   "\"b\":\"m-1.safetensors\",\"c\":\"m-3.safetensors\"}}");
    expect_ckpt_bad("ck_missing", WF_E_BAD_FIELD, "ck_missing/m-3.safetensors' does not exist",
                    __LINE__);
    /* a tensor in two files */
    CHECK(mkdir("root/ck_two", 0755) == 0, "mkdir");
    write_shards("root/ck_two");
    {
        float a[2] = { 9, 9 }, c[1] = { 6 };
        st_w_tensor_t s2[] = { { "a", "F32", 1, { 2 }, a, 8 }, { "c", "F32", 1, { 1 }, c, 4 } };
        CHECK(st_write("root/ck_two/m-2.safetensors", s2, 2, NULL, 0) == 0, "write");
    }
    write_index("root/ck_two", good);
    expect_ckpt_bad("ck_two", WF_E_MALFORMED,
                    "tensor 'a' is in both ck_two/m-2.safetensors and m-1.safetensors", __LINE__);
    /* a mapped tensor missing from its shard */
    CHECK(mkdir("root/ck_lack", 0755) == 0, "mkdir");
    write_shards("root/ck_lack");
    write_index("root/ck_lack", "{\"weight_map\":{\"a\":\"m-1.safetensors\","
                                "\"b\":\"m-1.safetensors\",\"c\":\"m-2.safetensors\","
                                "\"d\":\"m-2.safetensors\"}}");
    expect_ckpt_bad("ck_lack", WF_E_MALFORMED,
                    "tensor 'd' is missing from ck_lack/m-2.safetensors", __LINE__);
    /* a shard's tensor not in the map */
    CHECK(mkdir("root/ck_unmapped", 0755) == 0, "mkdir");
    write_shards("root/ck_unmapped");
    write_index("root/ck_unmapped", "{\"weight_map\":{\"a\":\"m-1.safetensors\","
                                    "\"c\":\"m-2.safetensors\"}}");
    expect_ckpt_bad("ck_unmapped", WF_E_MALFORMED, "tensor 'b' of ck_unmapped/m-1.safetensors "
                    "is not in the weight_map", __LINE__);
    /* index itself bad */
    CHECK(mkdir("root/ck_bad", 0755) == 0, "mkdir");
    write_shards("root/ck_bad");
    write_index("root/ck_bad", "{\"weight_map\":{\"a\":\"../one/m-2.safetensors\"}}");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "entry 'a' is not a plain file name", __LINE__);
    write_index("root/ck_bad", "{\"weight_map\":{\"a\":\"m-1.safetensors\","
                               "\"a\":\"m-1.safetensors\"}}");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "duplicate", __LINE__);
    write_index("root/ck_bad", "{\"weight_map\":{}}");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "empty", __LINE__);
    write_index("root/ck_bad", "{\"metadata\":{}}");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "\"weight_map\" is missing", __LINE__);
    write_index("root/ck_bad", "{\"weight_map\":{\"a\":7}}");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "not a plain file name", __LINE__);
    write_index("root/ck_bad", "{\"weight_map\":");
    expect_ckpt_bad("ck_bad", WF_E_BAD_FIELD, "JSON invalid", __LINE__);
    /* a broken shard: its own error, naming it */
    write_index("root/ck_bad", "{\"weight_map\":{\"a\":\"m-1.safetensors\","
                               "\"b\":\"m-1.safetensors\",\"c\":\"m-2.safetensors\"}}");
    CHECK(st_write_raw("root/ck_bad/m-2.safetensors", "{" E("c", T("F32", "[1]", 0, 4)) "}", 2)
          == 0, "write");
    expect_ckpt_bad("ck_bad", WF_E_MALFORMED, "ck_bad/m-2.safetensors: tensor 'c'", __LINE__);
}

/* ---- files written by Python's safetensors ----------------------------- */

static void test_python_fixtures(const char *dir)
{
    char err[512];
    int fx = -1;
    if (wf_model_root_open(dir, &fx, err, sizeof err) != WF_OK) {
        CHECK(0, "fixtures: %s", err);
        return;
    }
    wf_safetensors_t *st = NULL;
    wf_status_t s = wf_safetensors_open(fx, "st-dtypes.safetensors", NULL, &st, err, sizeof err);
    CHECK(s == WF_OK, "st-dtypes: %s", err);
    if (s == WF_OK) {
        CHECK(wf_safetensors_count(st) == 5, "st-dtypes count");
        const char *dts[3] = { "f32", "f16", "bf16" };
        const wf_dtype_t dtv[3] = { WF_DTYPE_F32, WF_DTYPE_F16, WF_DTYPE_BF16 };
        for (int d = 0; d < 3; d++) {
            ptrdiff_t i = wf_safetensors_find(st, dts[d]);
            CHECK(i >= 0, "find %s", dts[d]);
            if (i < 0)
                continue;
            const wf_st_tensor_t *t = wf_safetensors_tensor(st, (size_t)i);
            CHECK(t->dtype == dtv[d] && t->rank == 3 && t->shape[0] == 2 && t->shape[1] == 3
                  && t->shape[2] == 4, "%s info", dts[d]);
            float got[24];
            wf_convert_to_f32(got, wf_safetensors_data(st, (size_t)i), t->dtype, 24);
            bool same = true;
            for (int k = 0; k < 24; k++)
                same = same && got[k] == (float)k / 4.0f - 3.0f;
            CHECK(same, "%s values", dts[d]);
        }
        ptrdiff_t i = wf_safetensors_find(st, "scalar");
        float sc = 0;
        if (i >= 0)
            memcpy(&sc, wf_safetensors_data(st, (size_t)i), 4);
        CHECK(i >= 0 && wf_safetensors_tensor(st, (size_t)i)->rank == 0 && sc == 1.5f,
              "scalar");
        i = wf_safetensors_find(st, "empty");
        CHECK(i >= 0 && wf_safetensors_tensor(st, (size_t)i)->nbytes == 0
              && wf_safetensors_tensor(st, (size_t)i)->shape[0] == 0, "empty");
        const char *w = wf_safetensors_metadata(st, "writer");
        CHECK(w != NULL && strcmp(w, "make_fixtures.py") == 0, "metadata");
        wf_safetensors_close(&st);
    }

    /* io files: bf16 inputs are the f32 ones rounded to nearest even, by
     * torch; check weft's rounding agrees bit for bit */
    wf_safetensors_t *f = NULL, *b = NULL;
    if (wf_safetensors_open(fx, "io-flux-tiny-f32.safetensors", NULL, &f, err, sizeof err)
            == WF_OK
        && wf_safetensors_open(fx, "io-flux-tiny-bf16.safetensors", NULL, &b, err, sizeof err)
            == WF_OK) {
        const char *names[3] = { "hidden_states", "encoder_hidden_states", "pooled_projections" };
        for (int k = 0; k < 3; k++) {
            ptrdiff_t i = wf_safetensors_find(f, names[k]), j = wf_safetensors_find(b, names[k]);
            CHECK(i >= 0 && j >= 0, "io %s", names[k]);
            if (i < 0 || j < 0)
                continue;
            const wf_st_tensor_t *ti = wf_safetensors_tensor(f, (size_t)i);
            const wf_st_tensor_t *tj = wf_safetensors_tensor(b, (size_t)j);
            CHECK(ti->dtype == WF_DTYPE_F32 && tj->dtype == WF_DTYPE_BF16
                  && ti->numel == tj->numel, "io %s dtypes", names[k]);
            size_t n = (size_t)ti->numel;
            float *x = malloc(n * sizeof *x);
            uint16_t *y = malloc(n * sizeof *y);
            if (x != NULL && y != NULL) {
                wf_convert_to_f32(x, wf_safetensors_data(f, (size_t)i), WF_DTYPE_F32, n);
                memcpy(y, wf_safetensors_data(b, (size_t)j), n * 2);
                size_t bad = 0;
                for (size_t e = 0; e < n; e++)
                    bad += wf_f32_to_bf16(x[e]) != y[e];
                CHECK(bad == 0, "io %s: %zu of %zu bf16 values differ from torch's rounding",
                      names[k], bad, n);
            }
            free(x);
            free(y);
        }
        const char *model = wf_safetensors_metadata(f, "model");
        CHECK(model != NULL && strcmp(model, "flux-tiny") == 0, "io metadata");
    } else {
        CHECK(0, "io files: %s", err);
    }
    wf_safetensors_close(&f);
    wf_safetensors_close(&b);

    /* checkpoints written by save_pretrained */
    const char *dirs[3] = { "flux-tiny", "flux-tiny-guidance", "flux-tiny-bf16" };
    const size_t files[3] = { 1, 4, 1 };
    for (int d = 0; d < 3; d++) {
        wf_checkpoint_t *ck = NULL;
        s = wf_checkpoint_open_dir(fx, dirs[d], NULL, &ck, err, sizeof err);
        CHECK(s == WF_OK, "%s: %s", dirs[d], err);
        if (s != WF_OK)
            continue;
        CHECK(wf_checkpoint_file_count(ck) == files[d], "%s files %zu", dirs[d],
              wf_checkpoint_file_count(ck));
        wf_ckpt_ref_t r;
        CHECK(wf_checkpoint_find(ck, "x_embedder.weight", &r)
              && r.tensor->dtype == (d == 2 ? WF_DTYPE_BF16 : WF_DTYPE_F32), "%s dtype",
              dirs[d]);
        wf_checkpoint_close(&ck);
    }
    close(fx);
}

/* ---- untrusted files: hard links, files shrinking, parse errors ---------- */

/* A hard link inside the root to a file outside it is not read, by either
 * resolver, through any entry point (safetensors, the small-file reader
 * that config.json and index.json use); the secret never reaches the
 * message. A symlink within the root to a one-link file still works. */
static void test_hard_links(void)
{
    const char *secret = "{\"password\": \"hunter2-SECRET-d0e1\"}";
    float v = 1.0f;
    st_w_tensor_t t = { "x", "F32", 1, { 1 }, &v, 4 };
    CHECK(mkdir("hl_outside", 0700) == 0 && mkdir("root/hl", 0755) == 0, "mkdir");
    CHECK(st_write_bytes("hl_outside/secret.json", secret, strlen(secret)) == 0
          && st_write("hl_outside/w.safetensors", &t, 1, NULL, 0) == 0, "write");
    CHECK(link("hl_outside/secret.json", "root/hl/config.json") == 0
          && link("hl_outside/w.safetensors", "root/hl/w.safetensors") == 0,
          "link: %s", strerror(errno));
    CHECK(st_write("root/hl/one.safetensors", &t, 1, NULL, 0) == 0
          && symlink("one.safetensors", "root/hl/sym.safetensors") == 0, "write one");
    for (int m = 0; m < 2; m++) {
        expect_bad_mode("hl/w.safetensors", modes[m], WF_E_BAD_FIELD,
                        "model file 'hl/w.safetensors' has 2 hard links: refused", __LINE__);
        char err[512] = "";
        char *buf = NULL;
        wf_status_t s = wf_model_read_file(root_fd, "hl/config.json", modes[m], 1 << 20, &buf,
                                           NULL, err, sizeof err);
        CHECK(s == WF_E_BAD_FIELD && buf == NULL
                  && strstr(err, "'hl/config.json' has 2 hard links: refused") != NULL
                  && strstr(err, "hunter2") == NULL,
              "[%s] hard-linked config.json: %s %s", mode_name[m], wf_status_name(s), err);
        free(buf);
        int fd = -1;
        s = wf_model_open_file(root_fd, "hl/config.json", modes[m], &fd, NULL, err,
                               sizeof err);
        CHECK(s == WF_E_BAD_FIELD && fd == -1, "[%s] open_file: %s", mode_name[m], err);
        wf_safetensors_t *st = open_ok("hl/sym.safetensors", modes[m]);
        wf_safetensors_close(&st);
    }
    /* three links: the count is in the message */
    CHECK(link("hl_outside/w.safetensors", "root/hl/w2.safetensors") == 0, "link 3");
    BAD("hl/w2.safetensors", WF_E_BAD_FIELD, "has 3 hard links: refused");
    /* once the outside name is gone, the file has one link and is read */
    CHECK(unlink("hl_outside/w.safetensors") == 0 && unlink("root/hl/w2.safetensors") == 0,
          "unlink");
    wf_safetensors_t *st = open_ok("hl/w.safetensors", WF_RESOLVE_AUTO);
    wf_safetensors_close(&st);

    /* a path with control bytes is escaped in the message */
    char err[512] = "";
    wf_safetensors_t *bad = NULL;
    wf_status_t s = wf_safetensors_open(root_fd, "no\nsuch\x1b[1m", NULL, &bad, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strchr(err, '\n') == NULL && strchr(err, '\x1b') == NULL
              && strstr(err, "no\\nsuch\\x1b[1m") != NULL, "escaped path: %s", err);
}

/* A real file truncated after open, before its data is read: the read is
 * an error naming the file, the process lives (with mmap this was SIGBUS). */
static void test_shrinking(void)
{
    enum { N = 1 << 16 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    CHECK(a != NULL && b != NULL, "malloc");
    for (int i = 0; i < N; i++) {
        a[i] = (float)i;
        b[i] = (float)-i;
    }
    st_w_tensor_t t[2] = { { "a", "F32", 1, { N }, a, N * 4 },
                           { "b", "F32", 1, { N }, b, N * 4 } };
    CHECK(st_write("root/shrink.safetensors", t, 2, NULL, 0) == 0, "write");
    char err[512] = "";
    wf_safetensors_t *st = open_ok("shrink.safetensors", WF_RESOLVE_AUTO);
    float *got = malloc(N * sizeof *got);
    if (st != NULL && got != NULL) {
        ptrdiff_t ia = wf_safetensors_find(st, "a"), ib = wf_safetensors_find(st, "b");
        CHECK(ia >= 0 && ib >= 0, "find");
        wf_status_t s = wf_safetensors_read(st, (size_t)ia, 0, got, N * 4, err, sizeof err);
        CHECK(s == WF_OK && memcmp(got, a, N * 4) == 0, "read a: %s", err);
        s = wf_safetensors_read(st, (size_t)ib, 4, got, 8, err, sizeof err);
        CHECK(s == WF_OK && got[0] == b[1] && got[1] == b[2], "read part of b: %s", err);
        s = wf_safetensors_read(st, (size_t)ib, 4, got, N * 4, err, sizeof err);
        CHECK(s == WF_E_BAD_ARGUMENT, "read past the tensor: %s", wf_status_name(s));
        /* cut the file in the middle of b: b is short, a still whole */
        off_t cut = (off_t)(wf_safetensors_tensor(st, (size_t)ib)->offset + 1000);
        CHECK(truncate("root/shrink.safetensors", cut) == 0, "truncate");
        s = wf_safetensors_read(st, (size_t)ib, 0, got, N * 4, err, sizeof err);
        CHECK(s == WF_E_INTERNAL
                  && strstr(err, "shrink.safetensors: the file shrank while loading") != NULL
                  && strstr(err, "tensor 'b'") != NULL,
              "read after truncate: %s %s", wf_status_name(s), err);
        s = wf_safetensors_read(st, (size_t)ia, 0, got, N * 4, err, sizeof err);
        CHECK(s == WF_OK && memcmp(got, a, N * 4) == 0, "a before the cut: %s", err);
        CHECK(truncate("root/shrink.safetensors", 0) == 0, "truncate to 0");
        s = wf_safetensors_read(st, (size_t)ia, 0, got, N * 4, err, sizeof err);
        CHECK(s == WF_E_INTERNAL && strstr(err, "shrank while loading") != NULL,
              "read of an empty file: %s %s", wf_status_name(s), err);
    }
    wf_safetensors_close(&st);
    free(got);
    free(a);
    free(b);
}

/* Parse errors name the file and where, never the text: a header, an
 * index and (test_flux_config) a config.json holding a secret-looking
 * string that is not valid JSON. */
static void test_no_echo(void)
{
    const char *secret = "hunter2-SECRET-77aa";
    char hdr[256];
    snprintf(hdr, sizeof hdr, "{\"x\": %s}", secret);
    CHECK(st_write_raw("root/echo.safetensors", hdr, 0) == 0, "write");
    char err[512] = "";
    wf_safetensors_t *st = NULL;
    wf_status_t s = wf_safetensors_open(root_fd, "echo.safetensors", NULL, &st, err,
                                        sizeof err);
    CHECK(s == WF_E_MALFORMED && strstr(err, "header JSON invalid at byte ") != NULL
              && strstr(err, "(line 1, column ") != NULL && strstr(err, "hunter2") == NULL,
          "header: %s", err);
    CHECK(mkdir("root/echo", 0755) == 0, "mkdir");
    char idx[256];
    snprintf(idx, sizeof idx, "{\"weight_map\": {\"a\": \"m.safetensors\"}, \"k\": '%s'}",
             secret);
    write_index("root/echo", idx);
    wf_checkpoint_t *ck = NULL;
    s = wf_checkpoint_open_dir(root_fd, "echo", NULL, &ck, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strstr(err, "JSON invalid at byte") != NULL
              && strstr(err, "hunter2") == NULL, "index: %s", err);
    /* a valid index naming a secret as a file: named by the key, not the value */
    snprintf(idx, sizeof idx, "{\"weight_map\": {\"a\": \"../%s\"}}", secret);
    write_index("root/echo", idx);
    s = wf_checkpoint_open_dir(root_fd, "echo", NULL, &ck, err, sizeof err);
    CHECK(s == WF_E_BAD_FIELD && strstr(err, "hunter2") == NULL, "index value: %s", err);
}

int main(int argc, char **argv)
{
    snprintf(base_dir, sizeof base_dir, "/tmp/wf-st-test.XXXXXX");
    if (mkdtemp(base_dir) == NULL || chdir(base_dir) != 0 || mkdir("root", 0755) != 0) {
        perror("test dir");
        return 1;
    }
    char err[256];
    if (wf_model_root_open("root", &root_fd, err, sizeof err) != WF_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    int fds = count_fds();

    test_round_trip();
    test_bad_files();
    test_paths();
    test_checkpoints();
    test_hard_links();
    test_shrinking();
    test_no_echo();
    if (argc > 1) {
        char fx[PATH_MAX];
        /* relative to where the test was started */
        if (argv[1][0] == '/')
            snprintf(fx, sizeof fx, "%s", argv[1]);
        else if (getenv("PWD") != NULL)
            snprintf(fx, sizeof fx, "%s/%s", getenv("PWD"), argv[1]);
        else
            snprintf(fx, sizeof fx, "%s", argv[1]);
        test_python_fixtures(fx);
    } else {
        printf("(no fixtures directory given: Python-written files not checked)\n");
    }
    CHECK(count_fds() == fds, "file descriptors leaked: %d -> %d", fds, count_fds());

    close(root_fd);
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", base_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
