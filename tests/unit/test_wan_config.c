/* test_wan_config.c — the pure half of the Wan family (modelfiles/wan) for
 * each variant of WanTransformer3DModel weft serves: text-to-video,
 * image-to-video (image_dim, added_kv_proj_dim), first-last-frame
 * (pos_embed_seq_len) and Wan 2.2's per-token timesteps.
 *
 * Checked: the configs diffusers' conversion script writes for the real
 * models (scripts/convert_wan_to_diffusers.py: Wan 2.1 T2V 1.3B / 14B,
 * I2V 14B, FLF2V 14B, Wan 2.2 T2V / I2V A14B, TI2V 5B) parse, with their
 * tensor counts; the image variants' added tensors in diffusers' state_dict
 * order and shapes; the refusals (image fields set apart, added K/V of
 * another width, an odd pos_embed_seq_len, bad values, the VACE and
 * Animate classes named); each variant's schema, its binding of a
 * forward's tensors (wf_schema_bind), flops, default tp plan and public
 * config. With the
 * fixtures directory: each Wan fixture's config parses, its checkpoint
 * holds exactly the expected tensors, and its io file's inputs bind to its
 * schema (the forward itself: test_wan_forward); and a copy of the I2V
 * checkpoint with the unused attn2.norm_added_q weights of older
 * conversions loads (checked, never read, not counted), other extra
 * tensors still refused.
 *
 * Usage: test_wan_config [FIXTURES_DIR] */
#include "family.h"
#include "model_host.h"
#include "model_root.h"
#include "proto.h"
#include "safetensors.h"
#include "support/check.h"
#include "support/st_writer.h"
#include "wan/wan_config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The tiny T2V config of the fixtures (wan-tiny/config.json). */
static const char *const tiny_json =
    "{\"_class_name\": \"WanTransformer3DModel\", \"_diffusers_version\": \"0.42.1\","
    " \"added_kv_proj_dim\": null, \"attention_head_dim\": 16, \"cross_attn_norm\": true,"
    " \"eps\": 1e-06, \"ffn_dim\": 64, \"freq_dim\": 32, \"image_dim\": null,"
    " \"in_channels\": 4, \"num_attention_heads\": 2, \"num_layers\": 2, \"out_channels\": 4,"
    " \"patch_size\": [1, 2, 2], \"pos_embed_seq_len\": null,"
    " \"qk_norm\": \"rms_norm_across_heads\", \"rope_max_seq_len\": 1024, \"text_dim\": 32}";

/* tiny_json with each (from, to) pair of edits[0..n) applied; parsed. */
static wf_status_t parse_edits(const char *const (*edits)[2], size_t n, unsigned flags,
                               wf_model_cfg_t *cfg, char *err, size_t len)
{
    char buf[2048], next[2048];
    snprintf(buf, sizeof buf, "%s", tiny_json);
    for (size_t i = 0; i < n; i++) {
        const char *at = strstr(buf, edits[i][0]);
        if (!at) {
            CHECK(0, "edit '%s' not found", edits[i][0]);
            return WF_E_INTERNAL;
        }
        snprintf(next, sizeof next, "%.*s%s%s", (int)(at - buf), buf, edits[i][1],
                 at + strlen(edits[i][0]));
        memcpy(buf, next, sizeof buf);
    }
    return wf_model_cfg_parse(buf, strlen(buf), flags, "config.json", cfg, err, len);
}

static const char *const i2v_edits[][2] = {
    { "\"image_dim\": null", "\"image_dim\": 24" },
    { "\"added_kv_proj_dim\": null", "\"added_kv_proj_dim\": 32" },
    { "\"in_channels\": 4", "\"in_channels\": 8" },
};

static const wf_tensor_spec_t *find_spec(const wf_tensor_spec_t *s, size_t n,
                                         const char *name, size_t *ret_i)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0) {
            if (ret_i)
                *ret_i = i;
            return &s[i];
        }
    return NULL;
}

static bool shape_is(const wf_tensor_spec_t *s, int rank, int64_t a, int64_t b, int64_t c)
{
    const int64_t want[3] = { a, b, c };
    if (!s || s->rank != rank)
        return false;
    for (int d = 0; d < rank; d++)
        if (s->shape[d] != want[d])
            return false;
    return true;
}

/* ---- diffusers' configs of the real models -------------------------------- */

/* The fields every converted config has (convert_wan_to_diffusers.py),
 * then the model's own. */
#define REAL(extra, heads, layers, ffn, cin, cout)                                        \
    "{\"_class_name\": \"WanTransformer3DModel\", " extra " \"attention_head_dim\": 128,"  \
    " \"cross_attn_norm\": true, \"eps\": 1e-06, \"ffn_dim\": " #ffn ", \"freq_dim\": 256," \
    " \"in_channels\": " #cin ", \"num_attention_heads\": " #heads ", \"num_layers\": "    \
    #layers ", \"out_channels\": " #cout ", \"patch_size\": [1, 2, 2],"                    \
    " \"qk_norm\": \"rms_norm_across_heads\", \"text_dim\": 4096}"

static void test_real_configs(void)
{
    static const struct {
        const char *name, *json;
        uint32_t image_dim, pos;
        size_t tensors;
    } real[] = {
        { "Wan 2.1 T2V 1.3B", REAL("\"added_kv_proj_dim\": null,", 12, 30, 8960, 16, 16), 0,
          0, 15 + 30 * 27 },
        { "Wan 2.1 T2V 14B", REAL("\"added_kv_proj_dim\": null,", 40, 40, 13824, 16, 16), 0, 0,
          15 + 40 * 27 },
        /* the HF Wan2.1-I2V-14B-Diffusers index lists 1343 tensors: these
         * 1303 and 40 unused attn2.norm_added_q of older conversions */
        { "Wan 2.1 I2V 14B",
          REAL("\"image_dim\": 1280, \"added_kv_proj_dim\": 5120,", 40, 40, 13824, 36, 16),
          1280, 0, 1303 },
        { "Wan 2.1 FLF2V 14B",
          REAL("\"image_dim\": 1280, \"added_kv_proj_dim\": 5120, \"rope_max_seq_len\": 1024,"
               " \"pos_embed_seq_len\": 514,", 40, 40, 13824, 36, 16),
          1280, 514, 1304 },
        { "Wan 2.2 I2V A14B", REAL("\"added_kv_proj_dim\": null,", 40, 40, 13824, 36, 16), 0,
          0, 15 + 40 * 27 },
        { "Wan 2.2 T2V A14B", REAL("\"added_kv_proj_dim\": null,", 40, 40, 13824, 16, 16), 0,
          0, 15 + 40 * 27 },
        { "Wan 2.2 TI2V 5B", REAL("\"added_kv_proj_dim\": null,", 24, 30, 14336, 48, 48), 0,
          0, 15 + 30 * 27 },
    };
    for (size_t i = 0; i < sizeof real / sizeof real[0]; i++) {
        char err[512] = "";
        wf_model_cfg_t m;
        wf_status_t st = wf_model_cfg_parse(real[i].json, strlen(real[i].json),
                                            WF_CONFIG_DIFFUSERS_DEFAULTS, "config.json", &m,
                                            err, sizeof err);
        CHECK(st == WF_OK, "%s: %s", real[i].name, err);
        if (st != WF_OK)
            continue;
        const wf_wan_config_t *c = wf_wan_cfg(&m);
        CHECK(c->image_dim == real[i].image_dim && c->pos_embed_seq_len == real[i].pos &&
              c->added_kv_proj_dim == (real[i].image_dim ? c->inner_dim : 0) &&
              c->rope_max_seq_len == 1024, "%s: fields", real[i].name);
        wf_tensor_spec_t *s = NULL;
        size_t n = 0;
        CHECK(wf_wan_expected_tensors(c, &s, &n, err, sizeof err) == WF_OK);
        CHECK(n == real[i].tensors, "%s: %zu tensors, expected %zu", real[i].name, n,
              real[i].tensors);
        if (real[i].image_dim) {
            CHECK(shape_is(find_spec(s, n, "blocks.39.attn2.add_k_proj.weight", NULL), 2, 5120,
                           5120, 0) &&
                  shape_is(find_spec(s, n, "condition_embedder.image_embedder.ff.net.0.proj."
                                     "weight", NULL), 2, 1280, 1280, 0) &&
                  shape_is(find_spec(s, n, "condition_embedder.image_embedder.ff.net.2.weight",
                                     NULL), 2, 5120, 1280, 0), "%s: image shapes",
                  real[i].name);
        }
        if (real[i].pos)
            CHECK(shape_is(find_spec(s, n, "condition_embedder.image_embedder.pos_embed", NULL),
                           3, 1, 514, 1280), "%s: pos_embed", real[i].name);
        free(s);
    }
}

/* ---- the image variants' tensors ------------------------------------------ */

static void test_i2v_tensors(void)
{
    char err[512] = "";
    wf_model_cfg_t m;
    wf_status_t st = parse_edits(i2v_edits, 3, 0, &m, err, sizeof err);
    CHECK(st == WF_OK, "i2v: %s", err);
    if (st != WF_OK)
        return;
    const wf_wan_config_t *c = wf_wan_cfg(&m);
    CHECK(c->image_dim == 24 && c->added_kv_proj_dim == 32 && c->pos_embed_seq_len == 0 &&
          c->in_channels == 8 && c->out_channels == 4);
    wf_tensor_spec_t *s = NULL;
    size_t n = 0;
    CHECK(wf_wan_expected_tensors(c, &s, &n, err, sizeof err) == WF_OK);
    /* T2V's 15 + 2 x 27, the image embedder's 8, per block 5 */
    CHECK(n == 69 + 8 + 2 * 5, "i2v tensors %zu", n);
    /* diffusers' state_dict order and shapes (printed by
     * make_wan_fixtures.py --tensors): after the text embedder, before the
     * blocks; in each block after attn2.norm_k, before norm2 */
    static const struct {
        const char *name;
        int rank;
        int64_t a, b, c;
    } want[] = {
        { "condition_embedder.text_embedder.linear_2.bias", 1, 32, 0, 0 },
        { "condition_embedder.image_embedder.norm1.weight", 1, 24, 0, 0 },
        { "condition_embedder.image_embedder.norm1.bias", 1, 24, 0, 0 },
        { "condition_embedder.image_embedder.ff.net.0.proj.weight", 2, 24, 24, 0 },
        { "condition_embedder.image_embedder.ff.net.0.proj.bias", 1, 24, 0, 0 },
        { "condition_embedder.image_embedder.ff.net.2.weight", 2, 32, 24, 0 },
        { "condition_embedder.image_embedder.ff.net.2.bias", 1, 32, 0, 0 },
        { "condition_embedder.image_embedder.norm2.weight", 1, 32, 0, 0 },
        { "condition_embedder.image_embedder.norm2.bias", 1, 32, 0, 0 },
        { "blocks.0.scale_shift_table", 3, 1, 6, 32 },
    };
    size_t at = 0;
    CHECK(find_spec(s, n, want[0].name, &at) != NULL);
    for (size_t i = 0; i < sizeof want / sizeof want[0] && at + i < n; i++)
        CHECK(strcmp(s[at + i].name, want[i].name) == 0 &&
              shape_is(&s[at + i], want[i].rank, want[i].a, want[i].b, want[i].c),
              "i2v tensor %zu: %s, expected %s", at + i, s[at + i].name, want[i].name);
    static const struct {
        const char *name;
        int rank;
        int64_t a, b;
    } blk[] = {
        { "blocks.1.attn2.norm_k.weight", 1, 32, 0 },
        { "blocks.1.attn2.add_k_proj.weight", 2, 32, 32 },
        { "blocks.1.attn2.add_k_proj.bias", 1, 32, 0 },
        { "blocks.1.attn2.add_v_proj.weight", 2, 32, 32 },
        { "blocks.1.attn2.add_v_proj.bias", 1, 32, 0 },
        { "blocks.1.attn2.norm_added_k.weight", 1, 32, 0 },
        { "blocks.1.norm2.weight", 1, 32, 0 },
    };
    CHECK(find_spec(s, n, blk[0].name, &at) != NULL);
    for (size_t i = 0; i < sizeof blk / sizeof blk[0] && at + i < n; i++)
        CHECK(strcmp(s[at + i].name, blk[i].name) == 0 &&
              shape_is(&s[at + i], blk[i].rank, blk[i].a, blk[i].b, 0),
              "i2v tensor %zu: %s, expected %s", at + i, s[at + i].name, blk[i].name);
    CHECK(find_spec(s, n, "condition_embedder.image_embedder.pos_embed", NULL) == NULL);
    CHECK(find_spec(s, n, "blocks.0.attn2.norm_added_q.weight", NULL) == NULL);
    CHECK(find_spec(s, n, "blocks.0.attn1.add_k_proj.weight", NULL) == NULL);
    free(s);

    /* FLF2V: pos_embed first in the image embedder */
    static const char *const flf[][2] = {
        { "\"image_dim\": null", "\"image_dim\": 24" },
        { "\"added_kv_proj_dim\": null", "\"added_kv_proj_dim\": 32" },
        { "\"pos_embed_seq_len\": null", "\"pos_embed_seq_len\": 10" },
    };
    st = parse_edits(flf, 3, 0, &m, err, sizeof err);
    CHECK(st == WF_OK, "flf2v: %s", err);
    if (st == WF_OK &&
        wf_wan_expected_tensors(wf_wan_cfg(&m), &s, &n, err, sizeof err) == WF_OK) {
        CHECK(n == 69 + 9 + 2 * 5, "flf2v tensors %zu", n);
        const wf_tensor_spec_t *p = find_spec(s, n, "condition_embedder.image_embedder."
                                              "pos_embed", &at);
        CHECK(shape_is(p, 3, 1, 10, 24) &&
              strcmp(s[at + 1].name, "condition_embedder.image_embedder.norm1.weight") == 0,
              "pos_embed");
        free(s);
    }
    /* pos_embed_seq_len without image_dim: unused, as in diffusers */
    static const char *const pos_only[][2] = {
        { "\"pos_embed_seq_len\": null", "\"pos_embed_seq_len\": 10" },
    };
    st = parse_edits(pos_only, 1, 0, &m, err, sizeof err);
    CHECK(st == WF_OK, "pos_embed_seq_len alone: %s", err);
    if (st == WF_OK &&
        wf_wan_expected_tensors(wf_wan_cfg(&m), &s, &n, err, sizeof err) == WF_OK) {
        CHECK(n == 69, "pos_embed_seq_len alone: %zu tensors", n);
        free(s);
    }
    /* missing image fields are null, with or without diffusers' defaults */
    static const char *const missing[][2] = {
        { "\"image_dim\": null,", "" },
        { "\"added_kv_proj_dim\": null,", "" },
        { "\"pos_embed_seq_len\": null,", "" },
    };
    st = parse_edits(missing, 3, 0, &m, err, sizeof err);
    CHECK(st == WF_OK && wf_wan_cfg(&m)->image_dim == 0 &&
          wf_wan_cfg(&m)->added_kv_proj_dim == 0, "missing image fields: %s", err);
}

/* ---- refusals --------------------------------------------------------------- */

static void test_refusals(void)
{
    static const struct {
        const char *from, *to, *from2, *to2;
        wf_status_t status;
        const char *want, *want2;
    } bad[] = {
        { "\"image_dim\": null", "\"image_dim\": 24", NULL, NULL, WF_E_BAD_FIELD,
          "only image_dim is set", NULL },
        { "\"added_kv_proj_dim\": null", "\"added_kv_proj_dim\": 32", NULL, NULL,
          WF_E_BAD_FIELD, "only added_kv_proj_dim is set", NULL },
        { "\"image_dim\": null", "\"image_dim\": 24", "\"added_kv_proj_dim\": null",
          "\"added_kv_proj_dim\": 48", WF_E_BAD_FIELD, "must equal", "(32)" },
        { "\"pos_embed_seq_len\": null", "\"pos_embed_seq_len\": 9", NULL, NULL,
          WF_E_BAD_FIELD, "pos_embed_seq_len 9 must be even", NULL },
        { "\"image_dim\": null", "\"image_dim\": 0", NULL, NULL, WF_E_BAD_FIELD,
          "'image_dim' is 0", NULL },
        { "\"image_dim\": null", "\"image_dim\": \"1280\"", NULL, NULL, WF_E_BAD_FIELD,
          "'image_dim' is a string, expected an integer or null", NULL },
        { "\"added_kv_proj_dim\": null", "\"added_kv_proj_dim\": -5120", NULL, NULL,
          WF_E_BAD_FIELD, "'added_kv_proj_dim'", NULL },
        { "\"pos_embed_seq_len\": null", "\"pos_embed_seq_len\": 1.5", NULL, NULL,
          WF_E_BAD_FIELD, "'pos_embed_seq_len' is a real number", NULL },
        { "\"image_dim\": null", "\"image_dim\": 2097152", NULL, NULL, WF_E_BAD_FIELD,
          "more than", NULL },
        /* the other Wan classes, named with why (from weft's table) */
        { "WanTransformer3DModel", "WanVACETransformer3DModel", NULL, NULL, WF_E_BAD_FIELD,
          "WanVACETransformer3DModel is not supported (Wan VACE", "WanTransformer3DModel" },
        { "WanTransformer3DModel", "WanAnimateTransformer3DModel", NULL, NULL,
          WF_E_BAD_FIELD, "WanAnimateTransformer3DModel is not supported (Wan 2.2 Animate",
          "WanTransformer3DModel" },
        /* an unknown class is not echoed */
        { "WanTransformer3DModel", "WanTransformer4DModel", NULL, NULL, WF_E_BAD_FIELD,
          "model class ('_class_name') is not supported (weft serves", NULL },
        /* VACE's own fields under the served class */
        { "\"eps\": 1e-06,", "\"eps\": 1e-06, \"vace_layers\": [0, 2],", NULL, NULL,
          WF_E_BAD_FIELD, "unknown field", NULL },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const e[2][2] = { { bad[i].from, bad[i].to }, { bad[i].from2, bad[i].to2 } };
        char err[1024] = "";
        wf_model_cfg_t m;
        wf_status_t st = parse_edits(e, bad[i].from2 ? 2 : 1, 0, &m, err, sizeof err);
        CHECK(st == bad[i].status && strstr(err, bad[i].want) &&
              (!bad[i].want2 || strstr(err, bad[i].want2)) && m.fam == NULL,
              "refusal %zu (%s): status %d, message '%s', wanted '%s'", i, bad[i].to, (int)st,
              err, bad[i].want);
        if (i == 11)
            CHECK(strstr(err, "WanTransformer4DModel") == NULL, "echoed: %s", err);
    }
    /* the family's own parser, called directly, names the class it wants */
    char err[512] = "";
    wf_wan_config_t c;
    const char *vace = "{\"_class_name\": \"WanVACETransformer3DModel\"}";
    CHECK(wf_wan_config_parse(vace, strlen(vace), 0, "config.json", &c, err, sizeof err) ==
              WF_E_BAD_FIELD && strstr(err, "is not \"WanTransformer3DModel\""), "%s", err);
}

/* ---- schema, binding, flops, public config --------------------------------- */

static wf_tensor_desc_t desc(const char *name, int rank, int64_t a, int64_t b, int64_t c,
                             int64_t d, int64_t e)
{
    wf_tensor_desc_t t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", name);
    t.dtype = WF_DTYPE_F32;
    t.rank = rank;
    const int64_t s[5] = { a, b, c, d, e };
    for (int i = 0; i < rank; i++)
        t.shape[i] = s[i];
    CHECK(wf_tensor_desc_finish(&t) == WF_OK);
    return t;
}

static void test_schema(void)
{
    char err[512] = "";
    wf_model_cfg_t t2v, i2v, flf;
    static const char *const flf_edits[][2] = {
        { "\"image_dim\": null", "\"image_dim\": 24" },
        { "\"added_kv_proj_dim\": null", "\"added_kv_proj_dim\": 32" },
        { "\"in_channels\": 4", "\"in_channels\": 8" },
        { "\"pos_embed_seq_len\": null", "\"pos_embed_seq_len\": 10" },
    };
    if (parse_edits(NULL, 0, 0, &t2v, err, sizeof err) != WF_OK ||
        parse_edits(i2v_edits, 3, 0, &i2v, err, sizeof err) != WF_OK ||
        parse_edits(flf_edits, 4, 0, &flf, err, sizeof err) != WF_OK) {
        CHECK(0, "parse: %s", err);
        return;
    }
    wf_model_schema_t s;
    /* text-to-video: hidden_states, timestep?, encoder_hidden_states, timestep_tokens? */
    wf_wan_family.schema(wf_wan_cfg(&t2v), &s);
    CHECK(s.n_inputs == 4 && s.n_outputs == 1, "t2v inputs %u", s.n_inputs);
    static const char *const names[] = { "hidden_states", "timestep", "encoder_hidden_states",
                                         "timestep_tokens", "encoder_hidden_states_image" };
    static const uint32_t ranks[] = { 5, 1, 3, 2, 3 }, optional[] = { 0, 1, 0, 1, 0 };
    for (uint32_t i = 0; i < s.n_inputs; i++)
        CHECK(strcmp(s.inputs[i].name, names[i]) == 0 && s.inputs[i].rank == ranks[i] &&
              s.inputs[i].optional == optional[i], "t2v input %u", i);
    CHECK(strcmp(s.inputs[3].dim[0].sym, "B") == 0 && strcmp(s.inputs[3].dim[1].sym, "S") == 0 &&
          s.inputs[3].dim[1].size == 0);
    wf_model_schema_t si;
    wf_wan_family.schema(wf_wan_cfg(&i2v), &si);
    CHECK(si.n_inputs == 5, "i2v inputs %u", si.n_inputs);
    for (uint32_t i = 0; i < si.n_inputs; i++)
        CHECK(strcmp(si.inputs[i].name, names[i]) == 0 && si.inputs[i].rank == ranks[i] &&
              si.inputs[i].optional == optional[i], "i2v input %u", i);
    const wf_schema_tensor_t *img = &si.inputs[4];
    CHECK(img->dim[1].size == 0 && strcmp(img->dim[1].sym, "S_img") == 0 &&
          img->dim[2].size == 24 && strcmp(img->dim[2].sym, "image_dim") == 0 &&
          si.inputs[0].dim[1].size == 8);
    wf_model_schema_t sf;
    wf_wan_family.schema(wf_wan_cfg(&flf), &sf);
    CHECK(sf.n_inputs == 5 && sf.inputs[4].dim[1].size == 10 &&
          strcmp(sf.inputs[4].dim[1].sym, "pos_embed_seq_len") == 0, "flf2v image input");

    /* binding: B 2, a 3 x 2 x 3 grid (S 18), 7 text tokens, 5 image tokens */
    wf_tensor_desc_t hs = desc("hidden_states", 5, 2, 4, 3, 4, 6);
    wf_tensor_desc_t hs8 = desc("hidden_states", 5, 2, 8, 3, 4, 6);
    wf_tensor_desc_t ts = desc("timestep", 1, 2, 0, 0, 0, 0);
    wf_tensor_desc_t tt = desc("timestep_tokens", 2, 2, 18, 0, 0, 0);
    wf_tensor_desc_t tt3 = desc("timestep_tokens", 2, 3, 18, 0, 0, 0);
    wf_tensor_desc_t eh = desc("encoder_hidden_states", 3, 2, 7, 32, 0, 0);
    wf_tensor_desc_t im = desc("encoder_hidden_states_image", 3, 2, 5, 24, 0, 0);
    wf_tensor_desc_t im10 = desc("encoder_hidden_states_image", 3, 2, 10, 24, 0, 0);
    wf_schema_binding_t b;
    CHECK(wf_schema_bind(&s, "t", (wf_tensor_desc_t[]){ hs, ts, eh }, 3, &b, err,
                         sizeof err) == WF_OK && b.in[1] == 1 && b.in[3] == -1, "%s", err);
    CHECK(wf_schema_bind(&s, "t", (wf_tensor_desc_t[]){ hs, eh, tt }, 3, &b, err,
                         sizeof err) == WF_OK && b.in[1] == -1 && b.in[3] == 2 &&
          wf_schema_sym(&b, "S") == 18, "%s", err);
    CHECK(wf_schema_bind(&s, "t", (wf_tensor_desc_t[]){ hs, eh, tt3 }, 3, &b, err,
                         sizeof err) == WF_E_BAD_ARGUMENT && strstr(err, "(B)"),
          "timestep_tokens of another batch: %s", err);
    CHECK(wf_schema_bind(&s, "t", (wf_tensor_desc_t[]){ hs, ts, eh, im }, 4, &b, err,
                         sizeof err) == WF_E_BAD_ARGUMENT && strstr(err, "unexpected tensor"),
          "image input to t2v: %s", err);
    uint64_t f_t2v = 0, f_i2v = 0;
    if (wf_schema_bind(&s, "t", (wf_tensor_desc_t[]){ hs, ts, eh }, 3, &b, err, sizeof err) ==
        WF_OK)
        f_t2v = wf_wan_family.flops(wf_wan_cfg(&t2v), 1000, &b);
    CHECK(wf_schema_bind(&si, "i", (wf_tensor_desc_t[]){ hs8, ts, eh }, 3, &b, err,
                         sizeof err) == WF_E_BAD_FIELD &&
          strstr(err, "encoder_hidden_states_image"), "i2v without its image: %s", err);
    CHECK(wf_schema_bind(&si, "i", (wf_tensor_desc_t[]){ hs8, ts, eh, im }, 4, &b, err,
                         sizeof err) == WF_OK && wf_schema_sym(&b, "S_img") == 5, "%s", err);
    f_i2v = wf_wan_family.flops(wf_wan_cfg(&i2v), 1000, &b);
    /* the image's attention: layers 2 x 4 B C S S_img = 2 x 4 x 2 x 32 x 18 x 5 */
    CHECK(f_t2v > 0 && f_i2v == f_t2v + 2ull * 4 * 2 * 32 * 18 * 5, "flops %llu vs %llu",
          (unsigned long long)f_i2v, (unsigned long long)f_t2v);
    CHECK(wf_schema_bind(&sf, "f", (wf_tensor_desc_t[]){ hs8, ts, eh, im }, 4, &b, err,
                         sizeof err) == WF_E_BAD_ARGUMENT && strstr(err, "pos_embed_seq_len"),
          "flf2v 5 image tokens: %s", err);
    CHECK(wf_schema_bind(&sf, "f", (wf_tensor_desc_t[]){ hs8, ts, eh, im10 }, 4, &b, err,
                         sizeof err) == WF_OK, "%s", err);
    CHECK(wf_wan_family.flops(wf_wan_cfg(&flf), 1000, &b) ==
              f_t2v + 2ull * 4 * 2 * 32 * 18 * 10, "flf2v flops");

    /* default plan: the image's added K/V colwise where there are any */
    wf_tp_plan_t plan;
    wf_wan_family.default_plan(wf_wan_cfg(&t2v), &plan);
    CHECK(plan.n == 10 && wf_tp_plan_find(&plan, "blocks.0.attn2.add_k_proj") < 0);
    wf_wan_family.default_plan(wf_wan_cfg(&i2v), &plan);
    int r = wf_tp_plan_find(&plan, "blocks.1.attn2.add_v_proj");
    CHECK(plan.n == 12 && wf_tp_plan_check(&plan, err, sizeof err) == WF_OK && r >= 0 &&
          plan.rules[r].style == WF_TP_COLWISE, "i2v plan: %s", err);

    /* public config: diffusers' None as 0 */
    wf_model_config_t pc;
    wf_wan_family.public_config(wf_wan_cfg(&t2v), &pc);
    CHECK(wf_model_config_get(&pc, "image_dim", 0, -1) == 0 &&
          wf_model_config_get(&pc, "added_kv_proj_dim", 0, -1) == 0 &&
          wf_model_config_get(&pc, "pos_embed_seq_len", 0, -1) == 0);
    wf_wan_family.public_config(wf_wan_cfg(&flf), &pc);
    CHECK(wf_model_config_get(&pc, "image_dim", 0, -1) == 24 &&
          wf_model_config_get(&pc, "added_kv_proj_dim", 0, -1) == 32 &&
          wf_model_config_get(&pc, "pos_embed_seq_len", 0, -1) == 10 &&
          wf_model_config_get(&pc, "in_channels", 0, -1) == 8);
}

/* ---- the fixtures ------------------------------------------------------------ */

static void test_fixture(int root, const char *name, const char *io_name, wf_dtype_t dtype,
                         uint32_t image_dim, uint32_t channels)
{
    char err[512] = "", rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/config.json", name);
    wf_model_cfg_t m;
    wf_status_t st = wf_model_cfg_load(root, rel, WF_RESOLVE_AUTO, 0, &m, err, sizeof err);
    CHECK(st == WF_OK, "%s: %s", rel, err);
    if (st != WF_OK)
        return;
    const wf_wan_config_t *c = wf_wan_cfg(&m);
    CHECK(m.fam == &wf_wan_family && c->image_dim == image_dim &&
          c->out_channels == channels, "%s: fields", name);
    wf_checkpoint_t *ck = NULL;
    st = wf_checkpoint_open_dir(root, name, NULL, &ck, err, sizeof err);
    CHECK(st == WF_OK, "%s: %s", name, err);
    if (st != WF_OK)
        return;
    CHECK(wf_model_check_checkpoint(&m, ck, err, sizeof err) == WF_OK, "%s: %s", name, err);
    wf_ckpt_ref_t r;
    CHECK(wf_checkpoint_find(ck, "blocks.0.attn1.to_q.weight", &r) && r.tensor->dtype == dtype,
          "%s: dtype", name);
    wf_checkpoint_close(&ck);

    /* the io file's inputs bind to the schema; its output has the schema's shape */
    wf_safetensors_t *io = NULL;
    st = wf_safetensors_open(root, io_name, NULL, &io, err, sizeof err);
    CHECK(st == WF_OK, "%s: %s", io_name, err);
    if (st != WF_OK)
        return;
    wf_model_schema_t s;
    wf_wan_family.schema(c, &s);
    wf_tensor_desc_t in[WF_SCHEMA_MAX_INPUTS];
    uint32_t n = 0;
    for (uint32_t k = 0; k < s.n_inputs; k++) {
        ptrdiff_t i = wf_safetensors_find(io, s.inputs[k].name);
        if (i < 0)
            continue;
        const wf_st_tensor_t *t = wf_safetensors_tensor(io, (size_t)i);
        memset(&in[n], 0, sizeof in[n]);
        snprintf(in[n].name, sizeof in[n].name, "%s", t->name);
        in[n].dtype = t->dtype;
        in[n].rank = t->rank;
        memcpy(in[n].shape, t->shape, sizeof in[n].shape);
        CHECK(wf_tensor_desc_finish(&in[n]) == WF_OK);
        n++;
    }
    wf_schema_binding_t b;
    wf_tensor_desc_t out;
    st = wf_schema_bind(&s, name, in, n, &b, err, sizeof err);
    CHECK(st == WF_OK, "%s: bind: %s", io_name, err);
    /* exactly one timestep input; per-token: one per video token */
    bool ts = b.in[1] >= 0, tt = b.in[3] >= 0;
    int64_t S = wf_schema_sym(&b, "F") * wf_schema_sym(&b, "H") * wf_schema_sym(&b, "W") /
                c->patch_elems;
    CHECK(ts != tt && (!tt || wf_schema_sym(&b, "S") == S), "%s: timesteps", io_name);
    CHECK(S % 4 != 0 || strcmp(name, "wan-tiny") == 0, "%s: %lld tokens divide by 4", name,
          (long long)S);
    if (st == WF_OK &&
        wf_schema_output(&s, 0, &b, dtype, 0, &out, err, sizeof err) == WF_OK) {
        ptrdiff_t i = wf_safetensors_find(io, "output");
        const wf_st_tensor_t *t = i >= 0 ? wf_safetensors_tensor(io, (size_t)i) : NULL;
        CHECK(t && t->dtype == dtype && t->rank == out.rank &&
              memcmp(t->shape, out.shape, sizeof(int64_t) * (size_t)out.rank) == 0,
              "%s: output shape", io_name);
        CHECK(wf_safetensors_find(io, "output_f64") >= 0, "%s: output_f64", io_name);
        if (dtype == WF_DTYPE_BF16)
            CHECK(wf_safetensors_find(io, "output_f32") >= 0, "%s: output_f32", io_name);
    }
    wf_safetensors_close(&io);
    printf("%s: config, %s checkpoint and %s inputs checked\n", name, wf_dtype_name(dtype),
           io_name);
}

/* wan-tiny-i2v's checkpoint with `extra` (each [32], zeros) added, as
 * DIR/diffusion_pytorch_model.safetensors beside its config.json. */
static int write_with_extra(int root, const char *dir, const char *const *extra, size_t n_extra)
{
    char err[512], path[PATH_MAX + 64];
    wf_checkpoint_t *ck = NULL;
    if (wf_checkpoint_open_dir(root, "wan-tiny-i2v", NULL, &ck, err, sizeof err) != WF_OK)
        return -1;
    size_t n = wf_checkpoint_count(ck);
    st_w_tensor_t *t = calloc(n + n_extra, sizeof *t);
    int rc = -1;
    if (t != NULL) {
        for (size_t i = 0; i < n; i++) {
            wf_ckpt_ref_t r = wf_checkpoint_at(ck, i);
            t[i] = (st_w_tensor_t){ r.tensor->name, "F32", r.tensor->rank, { 0 },
                                    wf_safetensors_data(r.file, r.index),
                                    (size_t)r.tensor->nbytes };
            memcpy(t[i].shape, r.tensor->shape, sizeof r.tensor->shape);
        }
        for (size_t i = 0; i < n_extra; i++)
            t[n + i] = (st_w_tensor_t){ extra[i], "F32", 1, { 32 }, NULL, 32 * sizeof(float) };
        snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
        rc = st_write(path, t, n + n_extra, "{\"format\":\"pt\"}", 0);
    }
    free(t);
    wf_checkpoint_close(&ck);
    /* the config, copied */
    char *text = NULL;
    size_t len = 0;
    if (rc == 0 && wf_model_read_file(root, "wan-tiny-i2v/config.json", WF_RESOLVE_AUTO, 1 << 16,
                                      &text, &len, err, sizeof err) == WF_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        rc = f && fwrite(text, 1, len, f) == len ? 0 : -1;
        if (f && fclose(f) != 0)
            rc = -1;
    } else {
        rc = -1;
    }
    free(text);
    return rc;
}

static void test_ignored(int root)
{
    char base[] = "/tmp/wf-wan-test.XXXXXX", err[512] = "", dir[PATH_MAX];
    int tmp = -1;
    if (mkdtemp(base) == NULL || wf_model_root_open(base, &tmp, err, sizeof err) != WF_OK) {
        CHECK(0, "tmp dir: %s", err);
        return;
    }
    static const char *const old[] = { "blocks.0.attn2.norm_added_q.weight",
                                       "blocks.1.attn2.norm_added_q.weight" };
    static const char *const attn1[] = { "blocks.0.attn1.norm_added_q.weight" };
    static const char *const block2[] = { "blocks.2.attn2.norm_added_q.weight" };
    static const char *const zero[] = { "blocks.00.attn2.norm_added_q.weight" };
    static const struct {
        const char *name;
        const char *const *extra;
        size_t n;
        wf_status_t want;
        const char *needle;
    } cases[] = {
        { "old", old, 2, WF_OK, "" },
        { "attn1", attn1, 1, WF_E_MALFORMED, "unexpected tensor '" },
        { "block2", block2, 1, WF_E_MALFORMED, "unexpected tensor '" },
        { "zero", zero, 1, WF_E_MALFORMED, "unexpected tensor '" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(dir, sizeof dir, "%s/%s", base, cases[i].name);
        if (mkdir(dir, 0700) != 0 || write_with_extra(root, dir, cases[i].extra, cases[i].n)) {
            CHECK(0, "write %s", dir);
            continue;
        }
        wf_model_source_t *src = NULL;
        uint32_t tp = 0;
        err[0] = '\0';
        wf_status_t st = wf_model_source_open(tmp, cases[i].name, false, NULL, &src, &tp, err,
                                              sizeof err);
        CHECK(st == cases[i].want && strstr(err, cases[i].needle), "%s: %s \"%s\"",
              cases[i].name, wf_status_name(st), err);
        if (st == WF_OK) {
            /* the host copy: the expected tensors only, counted as such */
            wf_tensor_spec_t *sp = NULL;
            size_t n = 0;
            uint64_t params = 0;
            wf_model_cfg_t m;
            CHECK(wf_model_cfg_load(root, "wan-tiny-i2v/config.json", WF_RESOLVE_AUTO, 0, &m,
                                    err, sizeof err) == WF_OK);
            CHECK(wf_wan_expected_tensors(wf_wan_cfg(&m), &sp, &n, err, sizeof err) == WF_OK);
            for (size_t k = 0; k < n; k++) {
                uint64_t e = 1;
                for (int d = 0; d < sp[k].rank; d++)
                    e *= (uint64_t)sp[k].shape[d];
                params += e;
            }
            free(sp);
            CHECK(wf_model_source_params(src) == params, "params %llu, expected %llu",
                  (unsigned long long)wf_model_source_params(src), (unsigned long long)params);
            wf_model_host_t *h = NULL;
            st = wf_model_source_read(src, NULL, NULL, &h, err, sizeof err);
            CHECK(st == WF_OK, "read: %s", err);
            CHECK(h && wf_model_host_find(h, old[0]) == NULL &&
                  wf_model_host_find(h, "blocks.1.attn2.add_k_proj.weight") != NULL);
            wf_model_host_free(&h);
        }
        wf_model_source_close(&src);
        char f[PATH_MAX + 64];
        snprintf(f, sizeof f, "%s/diffusion_pytorch_model.safetensors", dir);
        unlink(f);
        snprintf(f, sizeof f, "%s/config.json", dir);
        unlink(f);
        rmdir(dir);
    }
    close(tmp);
    rmdir(base);
}

int main(int argc, char **argv)
{
    test_real_configs();
    test_i2v_tensors();
    test_refusals();
    test_schema();
    if (argc > 1) {
        char err[512];
        int root = -1;
        if (wf_model_root_open(argv[1], &root, err, sizeof err) != WF_OK) {
            CHECK(0, "fixtures: %s", err);
        } else {
            test_fixture(root, "wan-tiny", "io-wan-tiny-f32.safetensors", WF_DTYPE_F32, 0, 4);
            test_fixture(root, "wan-tiny-i2v", "io-wan-tiny-i2v-f32.safetensors", WF_DTYPE_F32,
                         24, 4);
            test_fixture(root, "wan-tiny-flf2v", "io-wan-tiny-flf2v-f32.safetensors",
                         WF_DTYPE_F32, 24, 4);
            test_fixture(root, "wan-tiny-ti2v", "io-wan-tiny-ti2v-f32.safetensors",
                         WF_DTYPE_F32, 0, 12);
            test_fixture(root, "wan-tiny-bf16", "io-wan-tiny-bf16.safetensors", WF_DTYPE_BF16,
                         0, 4);
            test_ignored(root);
            close(root);
        }
    } else {
        printf("(no fixtures directory given: the fixtures are not checked)\n");
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
