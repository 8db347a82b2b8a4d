/* test_tp_plan.c — tensor-parallel plans (modelfiles/tp_plan.h): glob
 * matching, plan checks, the FLUX default plan against the tensor list of
 * flux_config.h, placements and their diffusers messages, pieces, and the
 * JSON wire form.
 *
 * Usage: test_tp_plan
 */
#include "flux_config.h"
#include "tp_plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/check.h"

static void test_glob(void)
{
    static const struct {
        const char *glob, *name;
        bool match;
    } cases[] = {
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.3.attn.to_q", true },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.18.attn.to_q", true },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks..attn.to_q", false },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.3.4.attn.to_q", false },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.3.attn.to_qq", false },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.3.attn.to_", false },
        { "transformer_blocks.*.attn.to_q", "transformer_blocks.3.attn.to_q.x", false },
        { "transformer_blocks.*.attn.to_q", "single_transformer_blocks.3.attn.to_q", false },
        { "transformer_blocks.*.attn.to_out.0", "transformer_blocks.0.attn.to_out.0", true },
        { "transformer_blocks.*.attn.to_out.0", "transformer_blocks.0.attn.to_out.1", false },
        { "*", "x_embedder", true },
        { "*", "x_embedder.weight", false },
        { "*", "", false },
        { "*.*", "a.b", true },
        { "*.*", "a.", false },
        { "*.*", ".b", false },
        { "x_embedder", "x_embedder", true },
        { "x_embedder", "x_embedde", false },
        { "x_embedder", "x_embedderr", false },
        { "a*", "abc", true },      /* a star inside a component: 1+ chars */
        { "a*", "a", false },
        { "*c", "abc", true },
        { "a*c", "abbbc", true },
        { "a*c", "ac", false },
        { "a*b*c", "aXbYbZc", true },
        { "a*b*c", "aXbYc.d", false },
        { "*_proj", "add_q_proj", true },
        { "", "", true },
        { "", "a", false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(wf_tp_glob_match(cases[i].glob, cases[i].name) == cases[i].match,
              "glob '%s' vs '%s': want %d", cases[i].glob, cases[i].name, cases[i].match);
}

static void rule(wf_tp_plan_t *p, const char *glob, wf_tp_style_t s, uint32_t nb,
                 const uint32_t *blocks)
{
    wf_tp_rule_t *r = &p->rules[p->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->glob, sizeof r->glob, "%s", glob);
    r->style = s;
    r->n_blocks = nb;
    for (uint32_t b = 0; b < nb; b++)
        r->blocks[b] = blocks[b];
}

static void expect_check(const wf_tp_plan_t *p, wf_status_t want, const char *needle,
                         int line)
{
    char err[256] = "";
    wf_status_t s = wf_tp_plan_check(p, err, sizeof err);
    CHECK(s == want && (needle == NULL || strstr(err, needle) != NULL),
          "line %d: got %s \"%s\", want %s \"%s\"", line, wf_status_name(s), err,
          wf_status_name(want), needle ? needle : "");
}
#define EXPECT_CHECK(p, want, needle) expect_check(p, want, needle, __LINE__)

static void test_check(void)
{
    static const uint32_t b14[] = { 1, 4 }, b10[] = { 1, 0 };
    wf_tp_plan_t p;

    memset(&p, 0, sizeof p);
    EXPECT_CHECK(&p, WF_OK, NULL);   /* no rules: everything replicated */
    rule(&p, "a.*.b", WF_TP_COLWISE, 0, NULL);
    rule(&p, "a.*.c", WF_TP_PACKED_ROWWISE, 2, b14);
    rule(&p, "x_embedder", WF_TP_REPLICATED, 0, NULL);
    EXPECT_CHECK(&p, WF_OK, NULL);

    memset(&p, 0, sizeof p);
    rule(&p, "a.b", (wf_tp_style_t)7, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "unknown style 7");

    memset(&p, 0, sizeof p);
    rule(&p, "a..b", WF_TP_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "'a..b': empty component");
    memset(&p, 0, sizeof p);
    rule(&p, ".a", WF_TP_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "empty component");
    memset(&p, 0, sizeof p);
    rule(&p, "a.", WF_TP_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "empty component");
    memset(&p, 0, sizeof p);
    rule(&p, "", WF_TP_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "empty glob");
    memset(&p, 0, sizeof p);
    rule(&p, "a/b", WF_TP_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "not allowed");
    memset(&p, 0, sizeof p);
    rule(&p, "a.b", WF_TP_COLWISE, 0, NULL);
    memset(p.rules[0].glob, 'a', WF_TP_GLOB_MAX);   /* no NUL */
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "longer than 127 bytes");

    memset(&p, 0, sizeof p);
    rule(&p, "a.*", WF_TP_COLWISE, 0, NULL);
    rule(&p, "b", WF_TP_ROWWISE, 0, NULL);
    rule(&p, "a.*", WF_TP_ROWWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "rule 2 'a.*': glob already given by rule 0");

    memset(&p, 0, sizeof p);
    rule(&p, "a", WF_TP_PACKED_COLWISE, 0, NULL);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "packed_colwise needs 1..8 blocks, has 0");
    memset(&p, 0, sizeof p);
    rule(&p, "a", WF_TP_PACKED_ROWWISE, 2, b10);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "block 1 is 0");
    memset(&p, 0, sizeof p);
    rule(&p, "a", WF_TP_PACKED_ROWWISE, 2, b14);
    p.rules[0].n_blocks = WF_TP_MAX_BLOCKS + 1;
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "needs 1..8 blocks, has 9");
    memset(&p, 0, sizeof p);
    rule(&p, "a", WF_TP_COLWISE, 2, b14);
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "blocks given for colwise");

    memset(&p, 0, sizeof p);
    p.n = WF_TP_MAX_RULES + 1;
    EXPECT_CHECK(&p, WF_E_BAD_FIELD, "at most 64");
}

/* The default plan against the real tensor list of the fixtures' config
 * and of FLUX.1-dev: each rule matches some linear weight, every
 * double / single block linear named in the header is sharded with the
 * right style, the rest replicated. */
static void test_flux_default(void)
{
    wf_tp_plan_t p;
    wf_flux_family.default_plan(NULL, &p);
    char err[256] = "";
    CHECK(wf_tp_plan_check(&p, err, sizeof err) == WF_OK, "default plan: %s", err);
    CHECK(p.n == 17, "default plan has %" PRIu32 " rules", p.n);

    static const struct {
        const char *suffix;
        wf_tp_style_t style;
    } want[] = {
        { "attn.to_q", WF_TP_COLWISE },        { "attn.to_k", WF_TP_COLWISE },
        { "attn.to_v", WF_TP_COLWISE },        { "attn.to_out.0", WF_TP_ROWWISE },
        { "attn.add_q_proj", WF_TP_COLWISE },  { "attn.add_k_proj", WF_TP_COLWISE },
        { "attn.add_v_proj", WF_TP_COLWISE },  { "attn.to_add_out", WF_TP_ROWWISE },
        { "ff.net.0.proj", WF_TP_COLWISE },    { "ff.net.2", WF_TP_ROWWISE },
        { "ff_context.net.0.proj", WF_TP_COLWISE }, { "ff_context.net.2", WF_TP_ROWWISE },
        { "proj_mlp", WF_TP_COLWISE },         { "proj_out", WF_TP_PACKED_ROWWISE },
    };

    /* tiny (fixtures) and FLUX.1-dev sizes */
    static const char *const cfgs[] = {
        "{\"_class_name\": \"FluxTransformer2DModel\", \"attention_head_dim\": 12,"
        " \"axes_dims_rope\": [4, 4, 4], \"guidance_embeds\": true, \"in_channels\": 16,"
        " \"joint_attention_dim\": 32, \"num_attention_heads\": 4, \"num_layers\": 2,"
        " \"num_single_layers\": 3, \"out_channels\": null, \"patch_size\": 1,"
        " \"pooled_projection_dim\": 16}",
        "{\"_class_name\": \"FluxTransformer2DModel\", \"attention_head_dim\": 128,"
        " \"guidance_embeds\": true, \"in_channels\": 64, \"joint_attention_dim\": 4096,"
        " \"num_attention_heads\": 24, \"num_layers\": 19, \"num_single_layers\": 38,"
        " \"patch_size\": 1, \"pooled_projection_dim\": 768}",
    };
    for (size_t c = 0; c < 2; c++) {
        wf_flux_config_t cfg;
        CHECK(wf_flux_config_parse(cfgs[c], strlen(cfgs[c]), 0, "cfg", &cfg, err,
                                   sizeof err) == WF_OK, "config %zu: %s", c, err);
        wf_tensor_spec_t *specs = NULL;
        size_t n = 0;
        CHECK(wf_flux_expected_tensors(&cfg, &specs, &n, err, sizeof err) == WF_OK,
              "specs: %s", err);
        uint32_t used[WF_TP_MAX_RULES] = { 0 };
        size_t sharded = 0;
        for (size_t i = 0; i < n; i++) {
            const char *name = specs[i].name;
            size_t len = strlen(name);
            if (len < 7 || strcmp(name + len - 7, ".weight") != 0)
                continue;
            char module[WF_TENSOR_SPEC_NAME_MAX];
            snprintf(module, sizeof module, "%.*s", (int)(len - 7), name);
            int ri = wf_tp_plan_find(&p, module);
            wf_tp_style_t expect = WF_TP_REPLICATED;
            bool in_block = strncmp(module, "transformer_blocks.", 19) == 0
                            || strncmp(module, "single_transformer_blocks.", 26) == 0;
            bool single = strncmp(module, "single_", 7) == 0;
            for (size_t w = 0; in_block && w < sizeof want / sizeof want[0]; w++) {
                const char *tail = strchr(strchr(module, '.') + 1, '.') + 1;
                if (strcmp(tail, want[w].suffix) == 0 && (single || w < 12))
                    expect = want[w].style;
            }
            wf_tp_style_t got = ri >= 0 ? p.rules[ri].style : WF_TP_REPLICATED;
            CHECK(got == expect, "config %zu: '%s' has style %d, want %d", c, module,
                  (int)got, (int)expect);
            if (ri >= 0) {
                used[ri]++;
                CHECK(specs[i].rank == 2, "rule matches a non-linear '%s'", name);
                sharded++;
                /* every default placement divides for tp 1, 2, 4 */
                for (int tp = 1; tp <= 4; tp *= 2) {
                    wf_tp_place_t pl;
                    wf_status_t s = wf_tp_place(&p, module, specs[i].shape[0],
                                                specs[i].shape[1], tp, &pl, err,
                                                sizeof err);
                    CHECK(s == WF_OK, "place %s tp %d: %s", module, tp, err);
                }
            }
        }
        for (uint32_t r = 0; r < p.n; r++)
            CHECK(used[r] > 0, "config %zu: default rule %" PRIu32 " '%s' matches nothing",
                  c, r, p.rules[r].glob);
        CHECK(sharded == (size_t)cfg.num_layers * 12 + (size_t)cfg.num_single_layers * 5,
              "config %zu: %zu sharded weights", c, sharded);
        free(specs);
    }
}

static void expect_place(const wf_tp_plan_t *p, const char *name, int64_t out, int64_t in,
                         int tp, wf_tp_style_t style, int64_t lo, int64_t li, int line)
{
    char err[256] = "";
    wf_tp_place_t pl;
    wf_status_t s = wf_tp_place(p, name, out, in, tp, &pl, err, sizeof err);
    CHECK(s == WF_OK && pl.style == style && pl.out == out && pl.in == in
              && pl.local_out == lo && pl.local_in == li,
          "line %d: place %s [%" PRId64 ", %" PRId64 "] tp %d: %s style %d local [%"
          PRId64 ", %" PRId64 "] %s", line, name, out, in, tp, wf_status_name(s),
          (int)pl.style, pl.local_out, pl.local_in, err);
}
#define EXPECT_PLACE(p, name, out, in, tp, style, lo, li) \
    expect_place(p, name, out, in, tp, style, lo, li, __LINE__)

static void expect_place_err(const wf_tp_plan_t *p, const char *name, int64_t out,
                             int64_t in, int tp, const char *want, int line)
{
    char err[256] = "";
    wf_tp_place_t pl;
    wf_status_t s = wf_tp_place(p, name, out, in, tp, &pl, err, sizeof err);
    CHECK(s == WF_E_BAD_ARGUMENT && strcmp(err, want) == 0,
          "line %d: got %s \"%s\"\n  want \"%s\"", line, wf_status_name(s), err, want);
}
#define EXPECT_PLACE_ERR(p, name, out, in, tp, want) \
    expect_place_err(p, name, out, in, tp, want, __LINE__)

/* Every rank's pieces cover [0, dim) exactly once, in block order. */
static void check_cover(const wf_tp_place_t *pl, int tp, int line)
{
    int64_t dim = pl->style == WF_TP_REPLICATED ? pl->out
                  : (pl->style == WF_TP_COLWISE || pl->style == WF_TP_PACKED_COLWISE)
                      ? pl->out : pl->in;
    int64_t local = dim == pl->out ? pl->local_out : pl->local_in;
    unsigned char *seen = calloc((size_t)dim, 1);
    for (int r = 0; r < tp; r++) {
        int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS], sum = 0;
        wf_tp_pieces(pl, r, tp, st, ln);
        int64_t block_start = 0;
        for (uint32_t b = 0; b < pl->n_blocks; b++) {
            CHECK(st[b] >= block_start && st[b] + ln[b] <= block_start + pl->block[b],
                  "line %d: rank %d piece %u outside block", line, r, b);
            for (int64_t k = st[b]; k < st[b] + ln[b]; k++)
                seen[k]++;
            sum += ln[b];
            block_start += pl->block[b];
        }
        if (pl->style != WF_TP_REPLICATED)
            CHECK(sum == local, "line %d: rank %d pieces sum %" PRId64 " != local %" PRId64,
                  line, r, sum, local);
    }
    if (pl->style != WF_TP_REPLICATED) {
        int bad = 0;
        for (int64_t k = 0; k < dim; k++)
            bad += seen[k] != 1;
        CHECK(bad == 0, "line %d: %d positions not covered exactly once", line, bad);
    }
    free(seen);
}

static void test_place(void)
{
    static const uint32_t b14[] = { 1, 4 }, b112[] = { 1, 1, 2 }, b21[] = { 2, 1 };
    wf_tp_plan_t p;
    memset(&p, 0, sizeof p);
    rule(&p, "blk.*.p21", WF_TP_PACKED_COLWISE, 2, b21);
    rule(&p, "blk.*.col", WF_TP_COLWISE, 0, NULL);
    rule(&p, "blk.*.row", WF_TP_ROWWISE, 0, NULL);
    rule(&p, "blk.*.pcol", WF_TP_PACKED_COLWISE, 3, b112);
    rule(&p, "blk.*.prow", WF_TP_PACKED_ROWWISE, 2, b14);
    rule(&p, "blk.*.rep", WF_TP_REPLICATED, 0, NULL);
    rule(&p, "blk.0.*", WF_TP_ROWWISE, 0, NULL);   /* shadowed: first rule wins */

    EXPECT_PLACE(&p, "blk.0.col", 48, 32, 1, WF_TP_COLWISE, 48, 32);
    EXPECT_PLACE(&p, "blk.0.col", 48, 32, 4, WF_TP_COLWISE, 12, 32);
    EXPECT_PLACE(&p, "blk.7.row", 48, 32, 4, WF_TP_ROWWISE, 48, 8);
    EXPECT_PLACE(&p, "blk.1.pcol", 64, 10, 4, WF_TP_PACKED_COLWISE, 16, 10);
    EXPECT_PLACE(&p, "blk.1.prow", 48, 240, 4, WF_TP_PACKED_ROWWISE, 48, 60);
    EXPECT_PLACE(&p, "blk.1.rep", 48, 240, 4, WF_TP_REPLICATED, 48, 240);
    EXPECT_PLACE(&p, "other", 7, 5, 4, WF_TP_REPLICATED, 7, 5);
    EXPECT_PLACE(&p, "blk.0.other", 48, 8, 8, WF_TP_ROWWISE, 48, 1);
    EXPECT_PLACE(&p, "blk.0.col", 48, 7, 2, WF_TP_COLWISE, 24, 7);
    EXPECT_PLACE(NULL, "blk.0.col", 48, 7, 2, WF_TP_REPLICATED, 48, 7);

    wf_tp_place_t pl;
    char err[256];
    CHECK(wf_tp_place(&p, "blk.1.prow", 48, 240, 4, &pl, err, sizeof err) == WF_OK
              && pl.n_blocks == 2 && pl.block[0] == 48 && pl.block[1] == 192,
          "prow blocks %" PRId64 " %" PRId64, pl.block[0], pl.block[1]);
    int64_t st[WF_TP_MAX_BLOCKS], ln[WF_TP_MAX_BLOCKS];
    wf_tp_pieces(&pl, 1, 4, st, ln);
    CHECK(st[0] == 12 && ln[0] == 12 && st[1] == 48 + 48 && ln[1] == 48,
          "prow rank 1 pieces %" PRId64 "+%" PRId64 " %" PRId64 "+%" PRId64, st[0], ln[0],
          st[1], ln[1]);
    CHECK(wf_tp_place(&p, "blk.1.pcol", 64, 10, 4, &pl, err, sizeof err) == WF_OK
              && pl.n_blocks == 3 && pl.block[0] == 16 && pl.block[1] == 16
              && pl.block[2] == 32, "pcol blocks");
    wf_tp_pieces(&pl, 3, 4, st, ln);
    CHECK(st[0] == 12 && ln[0] == 4 && st[1] == 28 && ln[1] == 4 && st[2] == 56
              && ln[2] == 8, "pcol rank 3 pieces");

    /* coverage for every style and several tp */
    static const char *const names[] = { "blk.2.col", "blk.2.row", "blk.2.pcol",
                                         "blk.2.prow", "blk.2.rep" };
    for (size_t i = 0; i < 5; i++)
        for (int tp = 1; tp <= 8; tp *= 2) {
            int64_t out = 64 * 3, in = 40 * 5;   /* divisible by all of these */
            wf_status_t s = wf_tp_place(&p, names[i], i == 2 ? 128 : out,
                                        i == 3 ? 80 : in, tp, &pl, err, sizeof err);
            CHECK(s == WF_OK, "%s tp %d: %s", names[i], tp, err);
            if (s == WF_OK)
                check_cover(&pl, tp, __LINE__);
        }

    /* diffusers' wording */
    EXPECT_PLACE_ERR(&p, "blk.0.col", 50, 32, 4,
                     "Cannot colwise-shard 'blk.0.col' weight rows (50) across 4 "
                     "tensor-parallel ranks: not divisible by 4.");
    EXPECT_PLACE_ERR(&p, "blk.3.row", 48, 30, 4,
                     "Cannot rowwise-shard 'blk.3.row' weight columns (30) across 4 "
                     "tensor-parallel ranks: not divisible by 4.");
    EXPECT_PLACE_ERR(&p, "blk.3.pcol", 62, 32, 2,
                     "Cannot packed_colwise-shard 'blk.3.pcol': weight rows (62) not "
                     "divisible into blocks 1:1:2.");
    EXPECT_PLACE_ERR(&p, "blk.3.p21", 9, 32, 2,
                     "Cannot packed_colwise-shard 'blk.3.p21' block 1 rows (3) across 2 "
                     "tensor-parallel ranks: not divisible by 2.");
    EXPECT_PLACE(&p, "blk.3.p21", 12, 32, 2, WF_TP_PACKED_COLWISE, 6, 32);
    EXPECT_PLACE_ERR(&p, "blk.3.pcol", 64, 32, 32,
                     "Cannot packed_colwise-shard 'blk.3.pcol' block 0 rows (16) across "
                     "32 tensor-parallel ranks: not divisible by 32.");
    EXPECT_PLACE_ERR(&p, "blk.3.prow", 48, 10, 4,
                     "Cannot packed_rowwise-shard 'blk.3.prow' block 0 columns (2) across "
                     "4 tensor-parallel ranks: not divisible by 4.");
    EXPECT_PLACE_ERR(&p, "blk.3.prow", 48, 241, 1,
                     "Cannot packed_rowwise-shard 'blk.3.prow': weight columns (241) not "
                     "divisible into blocks 1:4.");
    /* the FLUX tiny fixture: 4 heads of 12, tp 3 does not divide proj_out's
     * 48:192 blocks? 48 / 3 = 16, 192 / 3 = 64: fine; tp 5 does not */
    wf_tp_plan_t fd;
    wf_flux_family.default_plan(NULL, &fd);
    EXPECT_PLACE(&fd, "single_transformer_blocks.0.proj_out", 48, 240, 3,
                 WF_TP_PACKED_ROWWISE, 48, 80);
    EXPECT_PLACE_ERR(&fd, "single_transformer_blocks.0.proj_out", 48, 240, 5,
                     "Cannot packed_rowwise-shard 'single_transformer_blocks.0.proj_out' "
                     "block 0 columns (48) across 5 tensor-parallel ranks: not divisible "
                     "by 5.");
    EXPECT_PLACE_ERR(&fd, "transformer_blocks.0.attn.to_q", 48, 48, 5,
                     "Cannot colwise-shard 'transformer_blocks.0.attn.to_q' weight rows (48) "
                     "across 5 tensor-parallel ranks: not divisible by 5.");
    CHECK(wf_tp_place(&p, "blk.0.col", 48, 32, 0, &pl, err, sizeof err)
              == WF_E_BAD_ARGUMENT, "tp 0");
    CHECK(wf_tp_place(&p, "blk.0.col", 0, 32, 1, &pl, err, sizeof err)
              == WF_E_BAD_ARGUMENT, "out 0");
}

static void test_json(void)
{
    char buf[8192], err[256] = "";
    wf_tp_plan_t p, q;
    wf_flux_family.default_plan(NULL, &p);
    CHECK(wf_tp_plan_to_json(&p, buf, sizeof buf) == WF_OK, "to_json");
    CHECK(strncmp(buf, "{\"transformer_blocks.*.attn.to_q\":\"colwise\",", 44) == 0,
          "json starts %.60s", buf);
    CHECK(strstr(buf, "\"single_transformer_blocks.*.proj_out\":{\"style\":"
                      "\"packed_rowwise\",\"blocks\":[1,4]}") != NULL, "packed form: %s", buf);
    memset(&q, 0x5a, sizeof q);
    CHECK(wf_tp_plan_from_json(buf, strlen(buf), "t", &q, err, sizeof err) == WF_OK,
          "from_json: %s", err);
    bool same = q.n == p.n;
    for (uint32_t i = 0; same && i < p.n; i++)
        same = strcmp(p.rules[i].glob, q.rules[i].glob) == 0
               && p.rules[i].style == q.rules[i].style
               && p.rules[i].n_blocks == q.rules[i].n_blocks
               && memcmp(p.rules[i].blocks, q.rules[i].blocks,
                         sizeof p.rules[i].blocks) == 0;
    CHECK(same, "round trip differs");

    size_t full = strlen(buf);
    CHECK(wf_tp_plan_to_json(&p, buf, full) == WF_E_LIMIT, "no room for the NUL");
    CHECK(wf_tp_plan_to_json(&p, buf, full + 1) == WF_OK, "exact fit");

    /* not NUL-terminated input */
    const char *t = "{\"a.*\": \"rowwise\", \"b\": {\"style\": \"packed_colwise\", "
                    "\"blocks\": [2, 1, 1]}, \"c\": {\"style\": \"colwise\"}}XXXX";
    CHECK(wf_tp_plan_from_json(t, strlen(t) - 4, "t", &q, err, sizeof err) == WF_OK
              && q.n == 3 && q.rules[0].style == WF_TP_ROWWISE
              && q.rules[1].style == WF_TP_PACKED_COLWISE && q.rules[1].n_blocks == 3
              && q.rules[1].blocks[0] == 2 && q.rules[2].style == WF_TP_COLWISE
              && strcmp(q.rules[2].glob, "c") == 0, "explicit len: %s", err);
    memset(&p, 0, sizeof p);
    CHECK(wf_tp_plan_to_json(&p, buf, sizeof buf) == WF_OK && strcmp(buf, "{}") == 0,
          "empty plan '%s'", buf);

    static const struct {
        const char *json, *needle;
    } bad[] = {
        { "{\"a\": \"colwise\", \"a\": \"rowwise\"}", "duplicate" },
        { "{\"a\": \"sideways\"}", "rule 0: unknown style (replicated" },
        { "{\"a\": 3}", "neither a style name" },
        { "[]", "not an object" },
        { "{\"a\": {\"blocks\": [1]}}", "\"style\" missing" },
        { "{\"a\": {\"style\": \"packed_rowwise\"}}", "needs 1..8 blocks, has 0" },
        { "{\"a\": {\"style\": \"packed_rowwise\", \"blocks\": [1, 0]}}", "block 1" },
        { "{\"a\": {\"style\": \"packed_rowwise\", \"blocks\": [1, 1.5]}}", "block 1" },
        { "{\"a\": {\"style\": \"packed_rowwise\", \"blocks\": [1,1,1,1,1,1,1,1,1]}}",
          "at most 8" },
        { "{\"a\": {\"style\": \"colwise\", \"blocks\": [1]}}", "blocks given for colwise" },
        { "{\"a\": {\"style\": \"colwise\", \"extra\": 1}}", "rule 0: unknown key" },
        { "{\"a..b\": \"colwise\"}", "empty component" },
        { "{\"a b\": \"colwise\"}", "not allowed" },
        { "{\"a\": \"colwise\"", "invalid JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        wf_status_t s = wf_tp_plan_from_json(bad[i].json, strlen(bad[i].json), "plan.json",
                                             &q, err, sizeof err);
        CHECK(s == WF_E_BAD_FIELD && strstr(err, bad[i].needle) != NULL
                  && strncmp(err, "plan.json: ", 11) == 0,
              "bad %zu %s: got %s \"%s\", want \"%s\"", i, bad[i].json, wf_status_name(s),
              err, bad[i].needle);
    }
    /* 65 rules */
    size_t o = (size_t)snprintf(buf, sizeof buf, "{");
    for (int i = 0; i < 65; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s\"r%d\": \"colwise\"",
                              i ? ", " : "", i);
    snprintf(buf + o, sizeof buf - o, "}");
    CHECK(wf_tp_plan_from_json(buf, strlen(buf), "p", &q, err, sizeof err)
              == WF_E_BAD_FIELD && strstr(err, "at most 64") != NULL, "65 rules: %s", err);
}

int main(void)
{
    test_glob();
    test_check();
    test_flux_default();
    test_place();
    test_json();
    printf("test_tp_plan: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
