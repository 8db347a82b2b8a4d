/* test_flux_config.c — FluxTransformer2DModel config.json and the tensor
 * list of a checkpoint.
 *
 * With a fixtures directory (argv[1], from tests/parity/make_fixtures.py)
 * it also checks the configs and checkpoints diffusers wrote, and writes
 * altered copies of one (a tensor dropped, a shape changed, a tensor
 * added) to check that each is refused with a message naming the tensor.
 *
 * Usage: test_flux_config [FIXTURES_DIR]
 */
#include "flux_config.h"
#include "support/st_writer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/check.h"

/* The tiny config of the fixtures, with one field's text replaced or
 * removed. */
/* The family's checkpoint check (family.h) on a FLUX config. */
static wf_status_t check_ck(const wf_flux_config_t *c, const wf_checkpoint_t *ck,
                            char *err, size_t len)
{
    wf_model_cfg_t m = { .fam = &wf_flux_family };
    memcpy(m.b, c, sizeof *c);
    return wf_model_check_checkpoint(&m, ck, err, len);
}

static const char *const tiny_fields[][2] = {
    { "_class_name", "\"FluxTransformer2DModel\"" },
    { "_diffusers_version", "\"0.42.1\"" },
    { "attention_head_dim", "12" },
    { "axes_dims_rope", "[4, 4, 4]" },
    { "guidance_embeds", "false" },
    { "in_channels", "16" },
    { "joint_attention_dim", "32" },
    { "num_attention_heads", "4" },
    { "num_layers", "1" },
    { "num_single_layers", "1" },
    { "out_channels", "null" },
    { "patch_size", "1" },
    { "pooled_projection_dim", "16" },
};
#define N_TINY (sizeof tiny_fields / sizeof tiny_fields[0])

/* value NULL: drop `field`; field NULL: no change. */
static void tiny_json(char *buf, size_t len, const char *field, const char *value)
{
    size_t o = (size_t)snprintf(buf, len, "{");
    bool first = true;
    for (size_t i = 0; i < N_TINY; i++) {
        const char *v = tiny_fields[i][1];
        if (field != NULL && strcmp(field, tiny_fields[i][0]) == 0) {
            if (value == NULL)
                continue;
            v = value;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s\n  \"%s\": %s", first ? "" : ",",
                              tiny_fields[i][0], v);
        first = false;
    }
    snprintf(buf + o, len - o, "\n}\n");
}

static wf_status_t parse_with(const char *field, const char *value, unsigned flags,
                              wf_flux_config_t *c, char *err, size_t err_len)
{
    char buf[2048];
    tiny_json(buf, sizeof buf, field, value);
    return wf_flux_config_parse(buf, strlen(buf), flags, "config.json", c, err, err_len);
}

/* A field refused (WF_E_BAD_FIELD); a document that is not JSON, or not
 * an object, is WF_E_MALFORMED (PROTOCOL.md 12.2). */
static void expect_bad(const char *field, const char *value, const char *needle, int line)
{
    char err[512] = "";
    wf_flux_config_t c;
    wf_status_t s = parse_with(field, value, 0, &c, err, sizeof err);
    wf_status_t want = strstr(needle, "JSON invalid") ? WF_E_MALFORMED : WF_E_BAD_FIELD;
    CHECK(s == want && strstr(err, needle) != NULL,
          "line %d: %s = %s: got %s \"%s\", want \"%s\"", line, field,
          value ? value : "(absent)", wf_status_name(s), err, needle);
}
#define BAD(field, value, needle) expect_bad(field, value, needle, __LINE__)

static void test_parse(void)
{
    char err[512];
    wf_flux_config_t c;
    CHECK(parse_with(NULL, NULL, 0, &c, err, sizeof err) == WF_OK, "tiny: %s", err);
    CHECK(c.patch_size == 1 && c.in_channels == 16 && c.out_channels == 16 && c.num_layers == 1
          && c.num_single_layers == 1 && c.attention_head_dim == 12
          && c.num_attention_heads == 4 && c.joint_attention_dim == 32
          && c.pooled_projection_dim == 16 && !c.guidance_embeds && c.n_axes == 3
          && c.axes_dims_rope[0] == 4 && c.axes_dims_rope[2] == 4 && c.inner_dim == 48
          && c.mlp_hidden_dim == 192, "tiny values");
    CHECK(parse_with("out_channels", "8", 0, &c, err, sizeof err) == WF_OK
          && c.out_channels == 8, "out_channels 8");
    CHECK(parse_with("out_channels", NULL, 0, &c, err, sizeof err) == WF_OK
          && c.out_channels == 16, "out_channels absent");
    CHECK(parse_with("guidance_embeds", "true", 0, &c, err, sizeof err) == WF_OK
          && c.guidance_embeds, "guidance");
    CHECK(parse_with("num_layers", "0", 0, &c, err, sizeof err) == WF_OK && c.num_layers == 0,
          "no double blocks");
    CHECK(parse_with("axes_dims_rope", "[12]", 0, &c, err, sizeof err) == WF_OK
          && c.n_axes == 1, "one axis");
    CHECK(parse_with("_name_or_path", NULL, 0, &c, err, sizeof err) == WF_OK, "underscore");

    /* FLUX.1-dev's config.json as published (no out_channels, no
     * axes_dims_rope) */
    const char *dev = "{\"_class_name\": \"FluxTransformer2DModel\","
                      "\"_diffusers_version\": \"0.30.0.dev0\","
                      "\"_name_or_path\": \"../checkpoints/flux-dev/transformer\","
                      "\"attention_head_dim\": 128, \"guidance_embeds\": true,"
                      "\"in_channels\": 64, \"joint_attention_dim\": 4096,"
                      "\"num_attention_heads\": 24, \"num_layers\": 19,"
                      "\"num_single_layers\": 38, \"patch_size\": 1,"
                      "\"pooled_projection_dim\": 768}";
    CHECK(wf_flux_config_parse(dev, strlen(dev), 0, "dev", &c, err, sizeof err) == WF_OK,
          "FLUX.1-dev: %s", err);
    CHECK(c.inner_dim == 3072 && c.mlp_hidden_dim == 12288 && c.n_axes == 3
          && c.axes_dims_rope[0] == 16 && c.axes_dims_rope[1] == 56 && c.out_channels == 64,
          "FLUX.1-dev values");
    /* 19 double blocks x 32 + 38 single blocks x 14 + 12 embedders + 4
     * guidance + 4 final = 1160 */
    CHECK(wf_flux_tensor_count(&c) == 19 * 32 + 38 * 14 + 12 + 4 + 4, "FLUX.1-dev tensors %zu",
          wf_flux_tensor_count(&c));

    /* diffusers' defaults when asked */
    const char *bare = "{\"_class_name\": \"FluxTransformer2DModel\"}";
    CHECK(wf_flux_config_parse(bare, strlen(bare), WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS, "bare",
                               &c, err, sizeof err) == WF_OK
          && c.num_layers == 19 && c.num_single_layers == 38 && c.in_channels == 64
          && c.joint_attention_dim == 4096 && !c.guidance_embeds, "defaults: %s", err);
    CHECK(wf_flux_config_parse(bare, strlen(bare), 0, "bare", &c, err, sizeof err)
          == WF_E_BAD_FIELD && strstr(err, "missing field 'patch_size'"), "bare strict: %s", err);

    /* every required field, missing */
    const char *required[] = { "attention_head_dim", "guidance_embeds", "in_channels",
                               "joint_attention_dim", "num_attention_heads", "num_layers",
                               "num_single_layers", "patch_size", "pooled_projection_dim" };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        char want[96];
        snprintf(want, sizeof want, "missing field '%s' (diffusers would use", required[i]);
        BAD(required[i], NULL, want);
    }
    BAD("_class_name", NULL, "'_class_name' is missing");
    BAD("_class_name", "\"FluxControlNetModel\"", "model class ('_class_name') is not supported");
    BAD("_class_name", "3", "'_class_name' is not a string");
    BAD("axes_dims_rope", NULL, "(diffusers' default: the field is missing) sum to 128, not attention_head_dim 12");

    /* types */
    BAD("num_layers", "\"1\"", "field 'num_layers' is a string, expected an integer");
    BAD("num_layers", "1.0", "field 'num_layers' is a real number");
    BAD("num_layers", "true", "is a boolean");
    BAD("patch_size", "null", "field 'patch_size' is null");
    BAD("out_channels", "\"x\"", "expected an integer or null");
    BAD("guidance_embeds", "1", "field 'guidance_embeds' is an integer, expected true or false");
    BAD("axes_dims_rope", "4", "field 'axes_dims_rope' is an integer, expected an array");
    BAD("axes_dims_rope", "[4, \"4\", 4]", "entry 1 is not an even positive integer");

    /* ranges */
    BAD("attention_head_dim", "0", "field 'attention_head_dim' is 0, must be positive");
    BAD("num_attention_heads", "-4", "is -4, must be positive");
    BAD("num_layers", "-1", "field 'num_layers' is -1, must not be negative");
    BAD("num_layers", "5000", "more than the 4096 blocks allowed");
    BAD("in_channels", "2000000", "more than the 1048576 allowed");
    BAD("in_channels", "99999999999999999999", "JSON invalid");
    BAD("out_channels", "0", "must be positive");
    BAD("axes_dims_rope", "[4, 3, 5]", "entry 1 is not an even positive integer");
    BAD("axes_dims_rope", "[4, 0, 8]", "entry 1");
    BAD("axes_dims_rope", "[]", "has 0 axes");
    BAD("axes_dims_rope", "[2,2,2,2,2,2,2,2,2]", "has 9 axes");

    /* consistency */
    BAD("axes_dims_rope", "[4, 4, 6]", "axes_dims_rope [4, 4, 6] sum to 14, not attention_head_dim 12");
    BAD("num_attention_heads", "1048576", "= 12582912 is more than");
    {
        char buf[2048];
        tiny_json(buf, sizeof buf, "num_layers", "0");
        char *p = strstr(buf, "\"num_single_layers\": 1");
        if (p != NULL)
            p[strlen("\"num_single_layers\": ")] = '0';
        wf_status_t s = wf_flux_config_parse(buf, strlen(buf), 0, "c", &c, err, sizeof err);
        CHECK(s == WF_E_BAD_FIELD && strstr(err, "both 0"), "no blocks: %s", err);
    }

    /* the document */
    const char *unknown = "{\"_class_name\": \"FluxTransformer2DModel\", \"mlp_ratio\": 4}";
    CHECK(wf_flux_config_parse(unknown, strlen(unknown), WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS, "u",
                               &c, err, sizeof err) == WF_E_BAD_FIELD
          && strstr(err, "unknown field: the 2nd key of the object")
          && !strstr(err, "mlp_ratio"), "unknown: %s", err);
    const char *dup = "{\"_class_name\": \"FluxTransformer2DModel\", \"patch_size\": 1, "
                      "\"patch_size\": 2}";
    CHECK(wf_flux_config_parse(dup, strlen(dup), WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS, "d", &c,
                               err, sizeof err) == WF_E_MALFORMED && strstr(err, "duplicate"),
          "duplicate: %s", err);
    CHECK(wf_flux_config_parse("[1]", 3, 0, "a", &c, err, sizeof err) == WF_E_MALFORMED
          && strstr(err, "not a JSON object"), "array: %s", err);
    CHECK(wf_flux_config_parse("{", 1, 0, "a", &c, err, sizeof err) == WF_E_MALFORMED
          && strstr(err, "JSON invalid"), "truncated: %s", err);
}

static const wf_tensor_spec_t *find_spec(const wf_tensor_spec_t *s, size_t n,
                                              const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0)
            return &s[i];
    return NULL;
}

static void test_tensor_list(void)
{
    char err[256];
    wf_flux_config_t c;
    CHECK(parse_with("guidance_embeds", "true", 0, &c, err, sizeof err) == WF_OK, "%s", err);
    c.patch_size = 2; /* proj_out emits patch^2 * out_channels */
    wf_tensor_spec_t *s = NULL;
    size_t n = 0;
    CHECK(wf_flux_expected_tensors(&c, &s, &n, err, sizeof err) == WF_OK, "list");
    /* 12 + 4 (guidance) + 32 + 14 + 4 */
    CHECK(n == 66 && n == wf_flux_tensor_count(&c), "count %zu", n);
    struct { const char *name; int rank; int64_t d0, d1; } want[] = {
        { "time_text_embed.timestep_embedder.linear_1.weight", 2, 48, 256 },
        { "time_text_embed.guidance_embedder.linear_2.bias", 1, 48, 0 },
        { "time_text_embed.text_embedder.linear_1.weight", 2, 48, 16 },
        { "context_embedder.weight", 2, 48, 32 },
        { "x_embedder.weight", 2, 48, 16 },
        { "transformer_blocks.0.norm1.linear.weight", 2, 288, 48 },
        { "transformer_blocks.0.attn.norm_added_k.weight", 1, 12, 0 },
        { "transformer_blocks.0.attn.to_out.0.bias", 1, 48, 0 },
        { "transformer_blocks.0.ff.net.0.proj.weight", 2, 192, 48 },
        { "transformer_blocks.0.ff_context.net.2.weight", 2, 48, 192 },
        { "single_transformer_blocks.0.norm.linear.weight", 2, 144, 48 },
        { "single_transformer_blocks.0.proj_out.weight", 2, 48, 240 },
        { "single_transformer_blocks.0.attn.to_v.weight", 2, 48, 48 },
        { "norm_out.linear.weight", 2, 96, 48 },
        { "proj_out.weight", 2, 64, 48 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const wf_tensor_spec_t *sp = s ? find_spec(s, n, want[i].name) : NULL;
        CHECK(sp != NULL && sp->rank == want[i].rank && sp->shape[0] == want[i].d0
              && (sp->rank == 1 || sp->shape[1] == want[i].d1), "spec %s", want[i].name);
    }
    CHECK(s != NULL && strcmp(s[0].name, "time_text_embed.timestep_embedder.linear_1.weight") == 0
          && strcmp(s[n - 1].name, "proj_out.bias") == 0, "state_dict order");
    free(s);
}

/* ---- diffusers' checkpoints --------------------------------------------- */

static int copy_altered(const wf_checkpoint_t *ck, const char *path, const char *drop,
                        const char *reshape, const char *add)
{
    size_t n = wf_checkpoint_count(ck);
    st_w_tensor_t *t = calloc(n + 1, sizeof *t);
    size_t k = 0;
    if (t == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        wf_ckpt_ref_t r = wf_checkpoint_at(ck, i);
        if (drop != NULL && strcmp(r.tensor->name, drop) == 0)
            continue;
        st_w_tensor_t *w = &t[k++];
        w->name = r.tensor->name;
        w->dtype = r.tensor->dtype == WF_DTYPE_F32 ? "F32"
                   : r.tensor->dtype == WF_DTYPE_F16 ? "F16" : "BF16";
        w->rank = r.tensor->rank;
        memcpy(w->shape, r.tensor->shape, sizeof r.tensor->shape);
        w->data = wf_safetensors_data(r.file, r.index);
        w->nbytes = (size_t)r.tensor->nbytes;
        if (reshape != NULL && strcmp(r.tensor->name, reshape) == 0 && w->rank == 2) {
            /* same bytes, transposed shape */
            int64_t d = w->shape[0];
            w->shape[0] = w->shape[1];
            w->shape[1] = d;
        }
    }
    static const float extra[4];
    if (add != NULL)
        t[k++] = (st_w_tensor_t){ add, "F32", 1, { 4 }, extra, sizeof extra };
    int rc = st_write(path, t, k, "{\"format\":\"pt\"}", 0);
    free(t);
    return rc;
}

static void test_fixtures(const char *dir)
{
    char err[512];
    int fx = -1, tmp = -1;
    if (wf_model_root_open(dir, &fx, err, sizeof err) != WF_OK) {
        CHECK(0, "fixtures: %s", err);
        return;
    }
    const char *dirs[3] = { "flux-tiny", "flux-tiny-guidance", "flux-tiny-bf16" };
    wf_flux_config_t tiny_cfg;
    memset(&tiny_cfg, 0, sizeof tiny_cfg);
    wf_checkpoint_t *tiny = NULL;
    for (int d = 0; d < 3; d++) {
        char rel[PATH_MAX];
        snprintf(rel, sizeof rel, "%s/config.json", dirs[d]);
        wf_flux_config_t c;
        wf_status_t s = wf_flux_config_load(fx, rel, WF_RESOLVE_AUTO, 0, &c, err, sizeof err);
        CHECK(s == WF_OK, "%s: %s", rel, err);
        if (s != WF_OK)
            continue;
        CHECK(c.guidance_embeds == (d == 1) && c.inner_dim == 48, "%s values", rel);
        wf_checkpoint_t *ck = NULL;
        s = wf_checkpoint_open_dir(fx, dirs[d], NULL, &ck, err, sizeof err);
        CHECK(s == WF_OK, "%s: %s", dirs[d], err);
        if (s != WF_OK)
            continue;
        CHECK(wf_checkpoint_count(ck) == wf_flux_tensor_count(&c), "%s: %zu tensors, expected %zu",
              dirs[d], wf_checkpoint_count(ck), wf_flux_tensor_count(&c));
        s = check_ck(&c, ck, err, sizeof err);
        CHECK(s == WF_OK, "%s check: %s", dirs[d], err);
        if (d == 0) {
            tiny = ck;
            tiny_cfg = c;
            continue;
        }
        if (d == 1) {
            /* the guidance checkpoint against the config without guidance */
            wf_flux_config_t ng = c;
            ng.guidance_embeds = false;
            s = check_ck(&ng, ck, err, sizeof err);
            CHECK(s == WF_E_MALFORMED
                  && strstr(err, "unexpected tensor 'time_text_embed.guidance_embedder.linear_1.bias'")
                  && strstr(err, "(and 3 more problems)"), "guidance extra: %s", err);
        }
        wf_checkpoint_close(&ck);
    }
    if (tiny == NULL) {
        close(fx);
        return;
    }
    /* the tiny checkpoint against the config with guidance */
    wf_flux_config_t g = tiny_cfg;
    g.guidance_embeds = true;
    wf_status_t s = check_ck(&g, tiny, err, sizeof err);
    CHECK(s == WF_E_MALFORMED
          && strstr(err, "lacks tensor 'time_text_embed.guidance_embedder.linear_1.weight' "
                         "(expected shape [48, 256])")
          && strstr(err, "(and 3 more problems)"), "guidance missing: %s", err);
    /* ... and against a config with 2 double blocks */
    wf_flux_config_t two = tiny_cfg;
    two.num_layers = 2;
    s = check_ck(&two, tiny, err, sizeof err);
    CHECK(s == WF_E_MALFORMED && strstr(err, "transformer_blocks.1.norm1.linear.weight"),
          "2 blocks: %s", err);

    /* altered copies */
    char base[] = "/tmp/wf-flux-test.XXXXXX";
    if (mkdtemp(base) == NULL || wf_model_root_open(base, &tmp, err, sizeof err) != WF_OK) {
        CHECK(0, "tmp dir");
        wf_checkpoint_close(&tiny);
        close(fx);
        return;
    }
    struct {
        const char *file, *drop, *reshape, *add;
        wf_status_t want;
        const char *needle;
    } cases[] = {
        { "drop.safetensors", "proj_out.bias", NULL, NULL, WF_E_MALFORMED,
          "lacks tensor 'proj_out.bias' (expected shape [16])" },
        { "shape.safetensors", NULL, "transformer_blocks.0.ff.net.2.weight", NULL, WF_E_BAD_SHAPE,
          "tensor 'transformer_blocks.0.ff.net.2.weight' in shape.safetensors has shape "
          "[192, 48], expected [48, 192]" },
        { "add.safetensors", NULL, NULL, "transformer_blocks.0.attn.to_qkv.weight",
          WF_E_MALFORMED, "unexpected tensor 'transformer_blocks.0.attn.to_qkv.weight'" },
        { "same.safetensors", NULL, NULL, NULL, WF_OK, "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", base, cases[i].file);
        CHECK(copy_altered(tiny, path, cases[i].drop, cases[i].reshape, cases[i].add) == 0,
              "write %s", path);
        wf_checkpoint_t *ck = NULL;
        s = wf_checkpoint_open_file(tmp, cases[i].file, NULL, &ck, err, sizeof err);
        CHECK(s == WF_OK, "%s: %s", cases[i].file, err);
        if (s != WF_OK)
            continue;
        err[0] = '\0';
        s = check_ck(&tiny_cfg, ck, err, sizeof err);
        CHECK(s == cases[i].want && strstr(err, cases[i].needle) != NULL, "%s: got %s \"%s\"",
              cases[i].file, wf_status_name(s), err);
        wf_checkpoint_close(&ck);
        unlink(path);
    }
    rmdir(base);
    close(tmp);
    wf_checkpoint_close(&tiny);
    close(fx);
}

/* config.json files holding a secret-looking string: invalid JSON, and
 * valid JSON with the secret as a value or a key where weft does not want
 * one. The message names the file and where, never the secret. */
static void test_no_echo(void)
{
    static const char *const texts[] = {
        "{\"_class_name\": \"FluxTransformer2DModel\", \"token\": hunter2-SECRET-5c}",
        "hunter2-SECRET-5c",
        "{\"_class_name\": \"hunter2-SECRET-5c\"}",
        "{\"_class_name\": \"FluxTransformer2DModel\", \"hunter2-SECRET-5c\": 1}",
        "{\"_class_name\": \"FluxTransformer2DModel\", \"patch_size\": \"hunter2-SECRET-5c\"}",
        "{\"hunter2-SECRET-5c\": 1, \"hunter2-SECRET-5c\": 2}",
    };
    char base[] = "/tmp/wf-flux-echo.XXXXXX", err[512], path[PATH_MAX];
    int root = -1;
    if (mkdtemp(base) == NULL || wf_model_root_open(base, &root, err, sizeof err) != WF_OK) {
        CHECK(0, "tmp dir");
        return;
    }
    snprintf(path, sizeof path, "%s/config.json", base);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        CHECK(st_write_bytes(path, texts[i], strlen(texts[i])) == 0, "write");
        wf_flux_config_t c;
        err[0] = '\0';
        wf_status_t s = wf_flux_config_load(root, "config.json", WF_RESOLVE_AUTO,
                                            WF_FLUX_CONFIG_DIFFUSERS_DEFAULTS, &c, err,
                                            sizeof err);
        /* texts 0, 1 and 5 (a duplicated key) are not JSON documents
         * jansson takes: MALFORMED; the others BAD_FIELD */
        CHECK(s == (i < 2 || i == 5 ? WF_E_MALFORMED : WF_E_BAD_FIELD) && strstr(err, "config.json") != NULL
                  && strstr(err, "hunter2") == NULL && strstr(err, "SECRET") == NULL,
              "text %zu: %s \"%s\"", i, wf_status_name(s), err);
        if (i == 0)
            CHECK(strstr(err, "JSON invalid at byte ") != NULL, "where: %s", err);
    }
    unlink(path);
    rmdir(base);
    close(root);
}

int main(int argc, char **argv)
{
    test_parse();
    test_no_echo();
    test_tensor_list();
    if (argc > 1)
        test_fixtures(argv[1]);
    else
        printf("(no fixtures directory given: diffusers' checkpoints not checked)\n");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
