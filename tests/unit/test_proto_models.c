/* test_proto_models.c — the wire codec of the resident-model ops
 * (load_model, unload_model, list_models, forward; PROTOCOL.md section
 * 12): round trips, each refusal with its code, the replies, and the
 * field rules of proto_check.h (model names, paths, tp plan rules).
 *
 * Plain checks that print the failing case; the exit status is the number
 * of failures (capped), so CTest sees any of them.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"
#include "proto_check.h"
#include "support/proto_test.h"

/* One rule for a test plan. */
static wf_tp_rule_t rule(const char *glob, wf_tp_style_t style, uint32_t n_blocks,
                         const uint32_t *blocks)
{
    wf_tp_rule_t r;
    memset(&r, 0, sizeof(r));
    snprintf(r.glob, sizeof(r.glob), "%s", glob);
    r.style = style;
    r.n_blocks = n_blocks;
    for (uint32_t b = 0; b < n_blocks; b++)
        r.blocks[b] = blocks[b];
    return r;
}

/* {v:1, id, op:5, args: <caller writes the value>} */
static void load_prefix(uint64_t id)
{
    mpb(&sb, "M4 si sU si s", "v", 1, "id", id, "op", WF_OP_LOAD_MODEL, "args");
}

/* {v:1, id, op:5, args: {name, path, tp_plan: <caller writes the value>}} */
static void load_plan_prefix(uint64_t id)
{
    load_prefix(id);
    mpb(&sb, "M3 ss ss s", "name", "m", "path", "flux", "tp_plan");
}

static void test_models_requests(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_request_t r, d; /* large: off the stack */
    wf_status_t rc;

    /* load_model round trips: full plan (str and map forms) + sharded flag;
     * no plan; the most rules */
    static const uint32_t b14[] = { 1, 4 }, b8[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    for (int variant = 0; variant < 3; variant++) {
        memset(&r, 0, sizeof(r));
        r.id = 900 + (uint64_t)variant;
        r.op = WF_OP_LOAD_MODEL;
        wf_load_model_args_t *a = &r.args.load_model;
        strcpy(a->name, variant == 1 ? "A-z_0.9" : "flux-dev");
        strcpy(a->path, variant == 1 ? "./models/x..y/flux" : "flux/dev");
        if (variant == 0) {
            a->plan[0] = rule("transformer_blocks.*.attn.to_q", WF_TP_COLWISE, 0, NULL);
            a->plan[1] = rule("single_transformer_blocks.*.proj_out",
                              WF_TP_PACKED_ROWWISE, 2, b14);
            a->plan[2] = rule("x_embedder", WF_TP_REPLICATED, 0, NULL);
            a->plan[3] = rule("ff.net.2", WF_TP_ROWWISE, 0, NULL);
            a->plan[4] = rule("fused.*", WF_TP_PACKED_COLWISE, 8, b8);
            a->n_plan = 5;
            a->weights_already_sharded = true;
        } else if (variant == 2) {
            for (uint32_t i = 0; i < WF_TP_MAX_RULES; i++) {
                char g[WF_TP_GLOB_MAX];
                snprintf(g, sizeof(g), "blocks.%u.*.%0100u", i, i);
                a->plan[i] = rule(g, i % 2 ? WF_TP_PACKED_COLWISE : WF_TP_COLWISE,
                                  i % 2 ? 2 : 0, b14);
            }
            a->n_plan = WF_TP_MAX_RULES;
        }
        wf_buf_reset(&buf);
        CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode load_model %d", variant);
        rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.op == WF_OP_LOAD_MODEL && d.id == r.id && d.n_tensors == 0 &&
              memcmp(&d.args.load_model, a, sizeof(*a)) == 0,
              "load_model %d round trip: %s %s", variant, wf_status_name(rc), err);
    }
    /* The encoder refuses only what the wire cannot carry; field rules are
     * the decoder's, so a bad value travels and the daemon refuses it with
     * its own code (what weft.h promises for wf_load_model). */
    {
        wf_load_model_args_t *a = &r.args.load_model;
        static const struct {
            const char *name, *path;
            wf_tp_rule_t r0, r1;
            uint32_t n_plan;
            wf_status_t want;
            const char *msg;
        } cases[] = {
            { "m", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_OK, NULL },
            { "a b", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.name: byte 1" },
            { "", "p", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.name: must be 1..63" },
            { "m", "/abs", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.path: is absolute" },
            { "m", "a/../b", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "'..' component" },
            { "m", "", { .n_blocks = 0 }, { .n_blocks = 0 }, 0, WF_E_BAD_FIELD,
              "args.path: is empty" },
            { "m", "p", { .glob = "proj_out", .style = WF_TP_PACKED_ROWWISE },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "packed_rowwise needs blocks" },
            { "m", "p", { .glob = "proj_out", .style = WF_TP_COLWISE, .n_blocks = 2,
                          .blocks = { 1, 4 } },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "only allowed with packed" },
            { "m", "p", { .glob = "a", .style = WF_TP_COLWISE },
              { .glob = "a", .style = WF_TP_ROWWISE }, 2, WF_E_BAD_FIELD,
              "duplicate glob \"a\"" },
            { "m", "p", { .glob = "a-b", .style = WF_TP_COLWISE }, { .n_blocks = 0 }, 1,
              WF_E_BAD_FIELD, "[A-Za-z0-9_.*]" },
            { "m", "p", { .glob = "p", .style = WF_TP_PACKED_COLWISE, .n_blocks = 2,
                          .blocks = { 1, 0 } },
              { .n_blocks = 0 }, 1, WF_E_BAD_FIELD, "blocks[1]" },
        };
        for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
            memset(&r, 0, sizeof(r));
            r.id = 905;
            r.op = WF_OP_LOAD_MODEL;
            strcpy(a->name, cases[k].name);
            strcpy(a->path, cases[k].path);
            a->plan[0] = cases[k].r0;
            a->plan[1] = cases[k].r1;
            a->n_plan = cases[k].n_plan;
            wf_buf_reset(&buf);
            CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode load_model case %zu", k);
            rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
            CHECK(rc == cases[k].want && d.id == 905 &&
                  (!cases[k].msg || strstr(err, cases[k].msg)),
                  "load_model case %zu: %s (%s), want %s", k, wf_status_name(rc), err,
                  wf_status_name(cases[k].want));
        }
        memset(&r, 0, sizeof(r));
        r.op = WF_OP_LOAD_MODEL;
        strcpy(a->name, "m");
        strcpy(a->path, "p");
        memset(a->name, 'x', sizeof(a->name)); /* no NUL at all */
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated name");
        strcpy(a->name, "m");
        memset(a->path, 'p', sizeof(a->path));
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated path");
        strcpy(a->path, "p");
        a->n_plan = 1;
        a->plan[0] = rule("proj_out", (wf_tp_style_t)9, 0, NULL);
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode style 9");
        a->plan[0] = rule("proj_out", WF_TP_PACKED_COLWISE, 2, b14);
        a->plan[0].n_blocks = WF_TP_MAX_BLOCKS + 1;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode 9 blocks");
        a->plan[0] = rule("proj_out", WF_TP_COLWISE, 0, NULL);
        memset(a->plan[0].glob, 'g', sizeof(a->plan[0].glob));
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated glob");
        a->plan[0] = rule("proj_out", WF_TP_COLWISE, 0, NULL);
        a->n_plan = WF_TP_MAX_RULES + 1;
        CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode 65 rules");
    }

    /* load_model refusals */
    B(); load_prefix(910); mpb(&sb, "M2 ss ss", "name", "flux-dev", "path", "flux");
    expect_req("good load_model", WF_OK, 910, NULL);
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "flux dev", "path", "flux");
    expect_req("name with a space", WF_E_BAD_FIELD, 911, "args.name: byte 4");
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "a/b", "path", "flux");
    expect_req("name with a slash", WF_E_BAD_FIELD, 911, "args.name");
    B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", "", "path", "flux");
    expect_req("empty name", WF_E_BAD_FIELD, 911, "args.name: must be 1..63 bytes");
    {
        char n64[65];
        memset(n64, 'n', 64);
        n64[64] = '\0';
        B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", n64, "path", "flux");
        expect_req("name of 64 bytes", WF_E_BAD_FIELD, 911, "args.name: must be 1..63");
        n64[63] = '\0';
        B(); load_prefix(911); mpb(&sb, "M2 ss ss", "name", n64, "path", "flux");
        expect_req("name of 63 bytes", WF_OK, 911, NULL);
    }
    B(); load_prefix(911); mpb(&sb, "M2 si ss", "name", 5, "path", "flux");
    expect_req("name int", WF_E_BAD_FIELD, 911, "args.name: must be a str");
    B(); load_prefix(911); mpb(&sb, "M1 ss", "path", "flux");
    expect_req("name missing", WF_E_BAD_FIELD, 911, "args.name: missing");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 911, "op", WF_OP_LOAD_MODEL);
    expect_req("load_model without args", WF_E_BAD_FIELD, 911, "args.name: missing");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "/models/flux");
    expect_req("absolute path", WF_E_BAD_FIELD, 912, "args.path: is absolute");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "..");
    expect_req("path ..", WF_E_BAD_FIELD, 912, "args.path: has a '..' component");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a/../b");
    expect_req("path a/../b", WF_E_BAD_FIELD, 912, "'..'");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a/..");
    expect_req("path a/..", WF_E_BAD_FIELD, 912, "'..'");
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "a..b/.x/..y");
    expect_req("dots that are not ..", WF_OK, 912, NULL);
    B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", "");
    expect_req("empty path", WF_E_BAD_FIELD, 912, "args.path: is empty");
    B(); load_prefix(912); mpb(&sb, "M2 ss s R", "name", "m", "path", "\xa3" "a\0b", (size_t)4);
    expect_req("path with NUL", WF_E_BAD_FIELD, 912, "NUL");
    {
        char p256[257];
        memset(p256, 'p', 256);
        p256[256] = '\0';
        B(); load_prefix(912); mpb(&sb, "M2 ss ss", "name", "m", "path", p256);
        expect_req("path of 256 bytes", WF_E_BAD_FIELD, 912, "args.path: is 256 bytes");
    }
    B(); load_prefix(912); mpb(&sb, "M1 ss", "name", "m");
    expect_req("path missing", WF_E_BAD_FIELD, 912, "args.path: missing");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss sb", "name", "m", "path", "p", "tp", 1);
    expect_req("unknown load_model arg", WF_E_BAD_FIELD, 913, "unknown key \"tp\"");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss si", "name", "m", "path", "p",
                               "weights_already_sharded", 1);
    expect_req("sharded flag int", WF_E_BAD_FIELD, 913, "weights_already_sharded: must be a bool");
    B(); load_prefix(913); mpb(&sb, "M3 ss ss ss", "name", "m", "path", "p", "name", "n");
    expect_req("name twice", WF_E_BAD_FIELD, 913, "duplicate");
    B(); mpb(&sb, "M5 si si si sA1", "v", 1, "id", 914, "op", WF_OP_LOAD_MODEL, "tensors");
    mpb_tensor(&sb, "w", "f32", 1, SQ, 0);
    mpb(&sb, "s M2 ss ss", "args", "name", "m", "path", "p");
    expect_req("load_model with a tensor", WF_E_BAD_ARGUMENT, 914, "no tensors");

    /* tp_plan forms and refusals */
    B(); load_plan_prefix(920);
    mpb(&sb, "M3 ss s M2 ss sA2 ii s M1 ss", "a.*.to_q", "colwise",
        "s.*.proj_out", "style", "packed_rowwise", "blocks", 1, 4,
        "norm", "style", "replicated");
    {
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        const wf_load_model_args_t *a = &d.args.load_model;
        CHECK(rc == WF_OK && a->n_plan == 3 && strcmp(a->plan[0].glob, "a.*.to_q") == 0 &&
              a->plan[0].style == WF_TP_COLWISE && a->plan[0].n_blocks == 0 &&
              a->plan[1].style == WF_TP_PACKED_ROWWISE && a->plan[1].n_blocks == 2 &&
              a->plan[1].blocks[0] == 1 && a->plan[1].blocks[1] == 4 &&
              a->plan[2].style == WF_TP_REPLICATED && !a->weights_already_sharded,
              "plan forms: %s %s", wf_status_name(rc), err);
    }
    B(); load_plan_prefix(921); mpb(&sb, "M0");
    {
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.args.load_model.n_plan == 0, "empty plan: %s", err);
    }
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "to_q", "diagonal");
    expect_req("unknown style", WF_E_BAD_FIELD, 922, "unknown style \"diagonal\"");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "to_q", "Colwise");
    expect_req("style case", WF_E_BAD_FIELD, 922, "unknown style");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "proj_out", "packed_rowwise");
    expect_req("packed without blocks (str form)", WF_E_BAD_FIELD, 922,
               "args.tp_plan[\"proj_out\"]: packed_rowwise needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 ss", "proj_out", "style", "packed_colwise");
    expect_req("packed without blocks (map form)", WF_E_BAD_FIELD, 922, "needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA0", "proj_out", "style",
                                    "packed_colwise", "blocks");
    expect_req("packed with no blocks", WF_E_BAD_FIELD, 922, "needs blocks");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 ii", "to_q", "style", "colwise",
                                    "blocks", 1, 1);
    expect_req("blocks on colwise", WF_E_BAD_FIELD, 922, "only allowed with packed");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA9 iiiiiiiii", "p", "style",
                                    "packed_colwise", "blocks", 1, 1, 1, 1, 1, 1, 1, 1, 1);
    expect_req("9 blocks", WF_E_LIMIT, 922, "9 blocks, limit 8");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 ii", "p", "style",
                                    "packed_colwise", "blocks", 1, 0);
    expect_req("block 0", WF_E_BAD_FIELD, 922, "blocks[1]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss sA2 id", "p", "style",
                                    "packed_colwise", "blocks", 1, 2.0);
    expect_req("block float", WF_E_BAD_FIELD, 922, "blocks[1]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss si", "p", "style", "packed_colwise",
                                    "blocks", 4);
    expect_req("blocks not an array", WF_E_BAD_FIELD, 922, "blocks: must be an array");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 sA1i", "p", "blocks", 1);
    expect_req("map without style", WF_E_BAD_FIELD, 922, "style: missing");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M2 ss si", "p", "style", "colwise", "dim", 0);
    expect_req("unknown rule key", WF_E_BAD_FIELD, 922, "unknown key \"dim\"");
    B(); load_plan_prefix(922); mpb(&sb, "M1 si", "p", 1);
    expect_req("rule an int", WF_E_BAD_FIELD, 922, "must be a style str or a map");
    B(); load_plan_prefix(922); mpb(&sb, "M1 s M1 si", "p", "style", 1);
    expect_req("style an int", WF_E_BAD_FIELD, 922, "style: must be a str");
    B(); load_plan_prefix(922); mpb(&sb, "A0");
    expect_req("tp_plan an array", WF_E_BAD_FIELD, 922, "args.tp_plan: must be a map");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "a-b", "colwise");
    expect_req("glob with '-'", WF_E_BAD_FIELD, 922, "[A-Za-z0-9_.*]");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "a..b", "colwise");
    expect_req("glob with an empty component", WF_E_BAD_FIELD, 922, "empty component");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", ".a", "colwise");
    expect_req("glob starting with '.'", WF_E_BAD_FIELD, 922, "empty component");
    B(); load_plan_prefix(922); mpb(&sb, "M1 ss", "", "colwise");
    expect_req("empty glob", WF_E_BAD_FIELD, 922, "glob must be 1..127 bytes");
    B(); load_plan_prefix(922); mpb(&sb, "M1 is", 3, "colwise");
    expect_req("glob an int", WF_E_BAD_FIELD, 922, "globs must be str");
    B(); load_plan_prefix(922); mpb(&sb, "M2 ss ss", "a", "colwise", "a", "rowwise");
    expect_req("glob twice", WF_E_BAD_FIELD, 922, "duplicate glob \"a\"");
    {
        char g[WF_TP_GLOB_MAX + 1];
        memset(g, 'g', WF_TP_GLOB_MAX);
        g[WF_TP_GLOB_MAX] = '\0';
        B(); load_plan_prefix(922); mpb(&sb, "M1 ss", g, "colwise");
        expect_req("glob of 128 bytes", WF_E_BAD_FIELD, 922, "glob must be 1..127");
        g[WF_TP_GLOB_MAX - 1] = '\0';
        B(); load_plan_prefix(922); mpb(&sb, "M1 ss", g, "colwise");
        expect_req("glob of 127 bytes", WF_OK, 922, NULL);
    }
    for (int n = WF_TP_MAX_RULES; n <= WF_TP_MAX_RULES + 1; n++) {
        B(); load_plan_prefix(923); mpb(&sb, "M*", n);
        for (int i = 0; i < n; i++) {
            char g[16];
            snprintf(g, sizeof(g), "m%d", i);
            mpb(&sb, "ss", g, "colwise");
        }
        expect_req(n == WF_TP_MAX_RULES ? "64 rules" : "65 rules",
                   n == WF_TP_MAX_RULES ? WF_OK : WF_E_LIMIT, 923,
                   n == WF_TP_MAX_RULES ? NULL : "65 rules, limit 64");
    }

    /* unload_model */
    memset(&r, 0, sizeof(r));
    r.id = 930;
    r.op = WF_OP_UNLOAD_MODEL;
    strcpy(r.args.unload_model.name, "flux-dev");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode unload_model");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_UNLOAD_MODEL &&
          strcmp(d.args.unload_model.name, "flux-dev") == 0,
          "unload_model round trip: %s %s", wf_status_name(rc), err);
    strcpy(r.args.unload_model.name, "x y");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode unload of a bad name");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_E_BAD_FIELD && strstr(err, "args.name"), "unload of a bad name: %s %s",
          wf_status_name(rc), err);
    memset(r.args.unload_model.name, 'x', sizeof(r.args.unload_model.name));
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated unload name");
    B(); mpb(&sb, "M4 si si si s M2 ss sb", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL,
             "args", "name", "m", "force", 1);
    expect_req("unload with an unknown arg", WF_E_BAD_FIELD, 931, "unknown key \"force\"");
    B(); mpb(&sb, "M4 si si si s M0", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL, "args");
    expect_req("unload without a name", WF_E_BAD_FIELD, 931, "args.name: missing");
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 931, "op", WF_OP_UNLOAD_MODEL,
             "args", "name", "../m");
    expect_req("unload of a bad name", WF_E_BAD_FIELD, 931, "args.name");

    /* list_models: like status, no args, no tensors */
    memset(&r, 0, sizeof(r));
    r.id = 940;
    r.op = WF_OP_LIST_MODELS;
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode list_models");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_LIST_MODELS && d.id == 940,
          "list_models round trip: %s %s", wf_status_name(rc), err);
    B(); mpb(&sb, "M4 si si si s M1 ss", "v", 1, "id", 941, "op", WF_OP_LIST_MODELS,
             "args", "name", "m");
    expect_req("list_models with an arg", WF_E_BAD_FIELD, 941, "takes no args");
    B(); mpb(&sb, "M4 si si si sA1", "v", 1, "id", 942, "op", WF_OP_LIST_MODELS, "tensors");
    mpb_tensor(&sb, "x", "f32", 1, SQ, 0);
    expect_req("list_models with a tensor", WF_E_BAD_ARGUMENT, 942, "no tensors");
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 943, "op", WF_OP_END_SESSION + 1);
    expect_req("op 11 (after end_session)", WF_E_UNKNOWN_OP, 943, "11");
    /* end_session (op 10): {"session": uint >= 1} */
    B(); mpb(&sb, "M3 si si si", "v", 1, "id", 944, "op", WF_OP_END_SESSION);
    expect_req("end_session without args", WF_E_BAD_FIELD, 944, "args.session: missing");
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 945, "op", WF_OP_END_SESSION, "args",
             "session", 0);
    expect_req("end_session of session 0", WF_E_BAD_FIELD, 945, "args.session");
    B(); mpb(&sb, "M4 si si si s M1 si", "v", 1, "id", 946, "op", WF_OP_END_SESSION, "args",
             "session", 7);
    expect_req("end_session 7", WF_OK, 946, NULL);
    wf_buf_free(&buf);
}

/* The inputs of a forward request in a test: name, dtype, shape. */
typedef struct fwd_tensor {
    const char *name;
    const char *dtype;
    int rank;
    int64_t shape[3];
} fwd_tensor_t;

/* FLUX-tiny's inputs: B 2, S_img 16, in_channels 16, S_txt 8,
 * joint_attention_dim 32, pooled 16, 3 axes; guidance last. */
static int fwd_default(fwd_tensor_t *t, bool guidance)
{
    const fwd_tensor_t def[7] = {
        { "hidden_states", "f32", 3, { 2, 16, 16 } },
        { "encoder_hidden_states", "bf16", 3, { 2, 8, 32 } },
        { "pooled_projections", "f16", 2, { 2, 16 } },
        { "timestep", "f32", 1, { 2 } },
        { "img_ids", "f32", 2, { 16, 3 } },
        { "txt_ids", "f32", 2, { 8, 3 } },
        { "guidance", "f32", 1, { 2 } },
    };
    memcpy(t, def, sizeof(def));
    return guidance ? 7 : 6;
}

/* {v:1, id, op:8, tensors: t[0..n), "args": <caller writes the value>};
 * frames in reverse order of listing */
static void fwd_prefix(uint64_t id, const fwd_tensor_t *t, int n)
{
    mpb(&sb, "M5 si sU si s A*", "v", 1, "id", id, "op", WF_OP_FORWARD, "tensors", n);
    for (int i = 0; i < n; i++)
        mpb_tensor(&sb, t[i].name, t[i].dtype, t[i].rank, t[i].shape, n - 1 - i);
    mpb(&sb, "s", "args");
}

static void test_forward_requests(void)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_request_t r, d;
    fwd_tensor_t t[8];
    wf_status_t rc;

    /* round trips: with and without guidance, with and without out_dtype */
    for (int g = 0; g < 2; g++)
        for (int od = -1; od < 3; od++) {
            int n = fwd_default(t, g);
            memset(&r, 0, sizeof(r));
            r.id = 1000 + (uint64_t)(g * 10 + od + 1);
            r.op = WF_OP_FORWARD;
            r.n_tensors = (uint32_t)n;
            for (int i = 0; i < n; i++) {
                wf_tensor_desc_t *td = &r.tensors[i];
                snprintf(td->name, sizeof(td->name), "%s", t[i].name);
                wf_dtype_parse(t[i].dtype, strlen(t[i].dtype), &td->dtype);
                td->rank = t[i].rank;
                memcpy(td->shape, t[i].shape, sizeof(t[i].shape));
                td->frame = (uint32_t)((i + 2) % n);
            }
            strcpy(r.args.forward.model, "flux-tiny");
            r.args.forward.has_out_dtype = od >= 0;
            r.args.forward.out_dtype = (wf_dtype_t)(od >= 0 ? od : 0);
            r.args.forward.split_batch = g == 1;
            wf_buf_reset(&buf);
            CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode forward %d/%d", g, od);
            rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
            const wf_forward_args_t *a = &d.args.forward;
            CHECK(rc == WF_OK && d.op == WF_OP_FORWARD && d.n_tensors == (uint32_t)n &&
                  strcmp(a->model, "flux-tiny") == 0 && a->has_out_dtype == (od >= 0) &&
                  (od < 0 || a->out_dtype == (wf_dtype_t)od) && a->split_batch == (g == 1),
                  "forward %d/%d round trip: %s %s", g, od, wf_status_name(rc), err);
            for (int i = 0; rc == WF_OK && i < n; i++)
                CHECK(strcmp(d.tensors[i].name, t[i].name) == 0 &&
                      d.tensors[i].dtype == r.tensors[i].dtype &&
                      d.tensors[i].frame == r.tensors[i].frame &&
                      d.tensors[i].rank == t[i].rank, "forward tensor %d", i);
        }
    /* any names: which tensors a model takes is its schema's to say (the
     * daemon binds them: test_family), not the decoder's */
    {
        fwd_tensor_t u[2] = { { "latents", "bf16", 3, { 1, 16, 8 } },
                              { "attention_mask", "f32", 2, { 2, 8 } } };
        B(); fwd_prefix(1010, u, 2); mpb(&sb, "M1 ss", "model", "m");
        rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.n_tensors == 2 && strcmp(d.tensors[1].name, "attention_mask") == 0,
              "forward of other names: %s %s", wf_status_name(rc), err);
        B(); fwd_prefix(1011, u, 0); mpb(&sb, "M1 ss", "model", "m");
        expect_req("forward without tensors", WF_E_BAD_FIELD, 1011, "got none");
    }
    memset(&r, 0, sizeof(r));
    r.op = WF_OP_FORWARD;
    strcpy(r.args.forward.model, "a:b");
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&r, &buf) == WF_OK, "encode forward of a bad name");
    rc = wf_request_decode(buf.data, buf.len, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_E_BAD_FIELD && strstr(err, "args.model: byte 1"),
          "forward of a bad name: %s %s", wf_status_name(rc), err);
    memset(r.args.forward.model, 'm', sizeof(r.args.forward.model));
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode unterminated model name");
    strcpy(r.args.forward.model, "m");
    r.args.forward.has_out_dtype = true;
    r.args.forward.out_dtype = (wf_dtype_t)7;
    CHECK(wf_request_encode(&r, &buf) == WF_E_BAD_ARGUMENT, "encode forward out_dtype 7");

    /* refusals */
    int n = fwd_default(t, false);
    B(); fwd_prefix(1020, t, n); mpb(&sb, "M2 ss ss", "model", "m", "out_dtype", "bf16");
    expect_req("good forward", WF_OK, 1020, NULL);
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M0");
    expect_req("forward without model", WF_E_BAD_FIELD, 1021, "args.model: missing");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M1 ss", "model", "/m");
    expect_req("forward of a bad model name", WF_E_BAD_FIELD, 1021, "args.model");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss sd", "model", "m", "guidance_scale", 3.5);
    expect_req("forward with an unknown arg", WF_E_BAD_FIELD, 1021,
               "unknown key \"guidance_scale\"");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss ss", "model", "m", "out_dtype", "f64");
    expect_req("forward out_dtype f64", WF_E_BAD_DTYPE, 1021, "args.out_dtype");
    B(); fwd_prefix(1021, t, n); mpb(&sb, "M2 ss si", "model", "m", "out_dtype", 0);
    expect_req("forward out_dtype int", WF_E_BAD_FIELD, 1021, "args.out_dtype: must be a str");
    B(); fwd_prefix(1022, t, n); mpb(&sb, "M2 ss sb", "model", "m", "split_batch", true);
    rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.args.forward.split_batch, "forward split_batch true: %s %s",
          wf_status_name(rc), err);
    B(); fwd_prefix(1023, t, n); mpb(&sb, "M2 ss sb", "model", "m", "split_batch", false);
    rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && !d.args.forward.split_batch, "forward split_batch false: %s %s",
          wf_status_name(rc), err);
    B(); fwd_prefix(1024, t, n); mpb(&sb, "M2 ss si", "model", "m", "split_batch", 1);
    expect_req("forward split_batch int", WF_E_BAD_FIELD, 1024, "args.split_batch: must be a bool");
    /* a denoising session: session >= 1; step and cache_threshold only with it */
    B(); fwd_prefix(1025, t, n);
    mpb(&sb, "M4 ss si si sd", "model", "m", "session", 3, "step", 7, "cache_threshold", 0.12);
    rc = wf_request_decode(sb.data, sb.size, &lim, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.args.forward.session == 3 && d.args.forward.has_step &&
          d.args.forward.step == 7 && d.args.forward.cache_threshold == 0.12,
          "forward of a session: %s %s", wf_status_name(rc), err);
    /* and back through the encoder */
    wf_buf_reset(&buf);
    CHECK(wf_request_encode(&d, &buf) == WF_OK, "encode a session's forward");
    static wf_request_t d2;
    rc = wf_request_decode(buf.data, buf.len, &lim, &d2, err, sizeof(err));
    CHECK(rc == WF_OK && d2.args.forward.session == 3 && d2.args.forward.step == 7 &&
          d2.args.forward.cache_threshold == 0.12, "a session's forward round trip: %s %s",
          wf_status_name(rc), err);
    B(); fwd_prefix(1026, t, n); mpb(&sb, "M2 ss si", "model", "m", "session", 0);
    expect_req("forward session 0", WF_E_BAD_FIELD, 1026, "args.session");
    B(); fwd_prefix(1027, t, n); mpb(&sb, "M2 ss si", "model", "m", "step", 1);
    expect_req("forward step without a session", WF_E_BAD_FIELD, 1027, "only with args.session");
    B(); fwd_prefix(1028, t, n);
    mpb(&sb, "M3 ss si sd", "model", "m", "session", 1, "cache_threshold", -0.5);
    expect_req("forward cache_threshold < 0", WF_E_BAD_FIELD, 1028, "args.cache_threshold");
    B(); fwd_prefix(1029, t, n); mpb(&sb, "M3 ss si ss", "model", "m", "session", 1, "step", "x");
    expect_req("forward step a str", WF_E_BAD_FIELD, 1029, "args.step");
    /* a bad arg comes before the tensors */
    B(); fwd_prefix(1021, t, 2); mpb(&sb, "M1 si", "model", 1);
    expect_req("bad model before missing tensors", WF_E_BAD_FIELD, 1021, "args.model");
    wf_buf_free(&buf);
}

static void fill_model(wf_model_info_t *m, int i)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "model-%d", i);
    snprintf(m->path, sizeof(m->path), "flux/%0200d", i);
    strcpy(m->family, "flux");
    strcpy(m->state, i % 2 ? "loading" : "ready");
    strcpy(m->dtype, "bf16");
    m->params = 11901408320ull + (uint64_t)i;
    m->bytes_total = 23802816640ull;
    m->bytes_loaded = i % 2 ? 1234567 : m->bytes_total;
    m->host_bytes = m->bytes_total;
    m->rank_bytes = 6000000000ull + (uint64_t)i;
    m->tp = (uint32_t)(1 + i % 4);
    m->sharded_input = (uint32_t)(i % 3 == 0);
    m->load_ms = i % 2 ? 0 : 45000;
    strcpy(m->device, i % 2 ? "cpu" : "cuda");
    strcpy(m->compute, i % 2 ? "f32" : "bf16");
    m->host_pinned = (uint32_t)(i % 2 == 0);
    if (i % 2 == 0) { /* past loading: the config (FLUX.1-dev's, axes varied) */
        wf_model_config_t *c = &m->config;
        static const char *const keys[] = { "patch_size", "in_channels", "num_layers",
                                            "attention_head_dim", "guidance_embeds",
                                            "axes_dims_rope" };
        static const int64_t vals[] = { 1, 64, 19, 128, 0, 0 };
        c->present = 1;
        for (int k = 0; k < 6; k++) {
            wf_model_config_entry_t *e = &c->e[c->n++];
            snprintf(e->key, sizeof e->key, "%s", keys[k]);
            e->kind = k == 4 ? WF_CONFIG_FLAG : k == 5 ? WF_CONFIG_LIST : WF_CONFIG_INT;
            e->n = 1;
            e->v[0] = k == 4 ? (i % 4 == 0) : vals[k];
            if (k == 5) {
                e->n = (uint32_t)(1 + i % WF_MODEL_CONFIG_VALUES);
                for (uint32_t a = 0; a < e->n; a++)
                    e->v[a] = 16 + 2 * a;
            }
        }
        /* and a schema: a fixed size, named sizes, an optional input */
        wf_model_schema_t *sc = &m->schema;
        sc->n_inputs = 2;
        sc->n_outputs = 1;
        wf_schema_tensor_t *x = &sc->inputs[0];
        strcpy(x->name, "hidden_states");
        x->dtypes = 1u << WF_DTYPE_F32 | 1u << WF_DTYPE_BF16;
        x->rank = 3;
        strcpy(x->dim[0].sym, "B");
        strcpy(x->dim[1].sym, "S_img");
        x->dim[2].size = 64;
        strcpy(x->dim[2].sym, "in_channels");
        x = &sc->inputs[1];
        strcpy(x->name, "guidance");
        x->dtypes = 1u << WF_DTYPE_F16;
        x->optional = 1;
        x->rank = 1;
        strcpy(x->dim[0].sym, "B");
        sc->outputs[0] = sc->inputs[0];
        memset(sc->outputs[0].name, 0, sizeof sc->outputs[0].name);
        strcpy(sc->outputs[0].name, "output");
    }
}

static void test_models_replies(void)
{
    wf_buf_t buf = { 0 };
    char err[WF_PROTO_ERROR_MAX];
    static wf_reply_t r, d;
    wf_status_t rc;

    /* load_model: {"model": MODEL} */
    memset(&r, 0, sizeof(r));
    r.id = 1100; r.op = WF_OP_LOAD_MODEL; r.epoch = 2;
    r.result.models.n = 1;
    fill_model(&r.result.models.models[0], 0);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode load_model reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_LOAD_MODEL && d.epoch == 2 && d.result.models.n == 1 &&
          memcmp(&d.result.models.models[0], &r.result.models.models[0],
                 sizeof(wf_model_info_t)) == 0,
          "load_model reply round trip: %s %s", wf_status_name(rc), err);

    /* list_models: 0, 3 and WF_MODELS_MAX models */
    static const uint32_t counts[] = { 0, 3, WF_MODELS_MAX };
    for (size_t k = 0; k < 3; k++) {
        memset(&r, 0, sizeof(r));
        r.id = 1101 + k; r.op = WF_OP_LIST_MODELS;
        r.result.models.n = counts[k];
        for (uint32_t i = 0; i < counts[k]; i++)
            fill_model(&r.result.models.models[i], (int)i);
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode list_models reply");
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.result.models.n == counts[k] &&
              memcmp(&d.result.models, &r.result.models, sizeof(wf_models_result_t)) == 0,
              "list_models reply of %u: %s %s", counts[k], wf_status_name(rc), err);
    }

    /* unload_model: no result */
    memset(&r, 0, sizeof(r));
    r.id = 1110; r.op = WF_OP_UNLOAD_MODEL;
    wf_buf_reset(&buf);
    CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode unload_model reply");
    rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.op == WF_OP_UNLOAD_MODEL && d.status == WF_OK,
          "unload_model reply: %s %s", wf_status_name(rc), err);

    /* forward: result as attention's, one "output" tensor */
    for (int dt = 0; dt < 3; dt++) {
        memset(&r, 0, sizeof(r));
        r.id = 1120 + (uint64_t)dt; r.op = WF_OP_FORWARD; r.epoch = 5;
        r.n_tensors = 1;
        strcpy(r.tensors[0].name, "output");
        r.tensors[0].dtype = (wf_dtype_t)dt;
        r.tensors[0].rank = 3;
        r.tensors[0].shape[0] = 2; r.tensors[0].shape[1] = 16; r.tensors[0].shape[2] = 64;
        r.result.forward.queue_us = 7; r.result.forward.compute_us = 91000;
        r.result.forward.devices = 4;
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode forward reply");
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.n_tensors == 1 && strcmp(d.tensors[0].name, "output") == 0 &&
              d.tensors[0].dtype == (wf_dtype_t)dt &&
              d.tensors[0].nbytes == 2 * 16 * 64 * wf_dtype_size((wf_dtype_t)dt) &&
              d.result.forward.queue_us == 7 && d.result.forward.compute_us == 91000 &&
              d.result.forward.devices == 4 && d.epoch == 5,
              "forward reply dtype %d: %s %s", dt, wf_status_name(rc), err);
    }

    /* errors travel with their message and no result */
    static const struct { uint32_t op; wf_status_t st; const char *msg; } errs[] = {
        { WF_OP_LOAD_MODEL, WF_E_BUSY, "model \"a\" is loading: one load at a time" },
        { WF_OP_LOAD_MODEL, WF_E_NO_MEMORY, "shards need 30.1 GiB per rank, 23.0 GiB free" },
        { WF_OP_LOAD_MODEL, WF_E_BAD_ARGUMENT, "name \"flux\" is in use" },
        { WF_OP_FORWARD, WF_E_BAD_ARGUMENT, "model flux is not loaded" },
        { WF_OP_UNLOAD_MODEL, WF_E_BAD_ARGUMENT, "model flux is not loaded" },
    };
    for (size_t k = 0; k < sizeof(errs) / sizeof(errs[0]); k++) {
        memset(&r, 0, sizeof(r));
        r.id = 1130 + k; r.op = errs[k].op; r.status = errs[k].st;
        strcpy(r.error, errs[k].msg);
        r.result.models.n = 1;
        wf_buf_reset(&buf);
        CHECK(wf_reply_encode(&r, &buf) == WF_OK, "encode error reply %zu", k);
        rc = wf_reply_decode(buf.data, buf.len, &d, err, sizeof(err));
        CHECK(rc == WF_OK && d.status == errs[k].st && strcmp(d.error, errs[k].msg) == 0 &&
              d.result.models.n == 0, "error reply %zu: %s %s", k, wf_status_name(rc), err);
    }

    /* tolerance: unknown keys skipped, sharded_input as a uint, more than
     * WF_MODELS_MAX models keeps the first ones */
    B();
    mpb(&sb, "M5 si si si si s M2 s M4 ss si ss si sb",
        "v", 1, "id", 1140, "op", WF_OP_LOAD_MODEL, "status", 0, "result", "model",
        "name", "m", "sharded_input", 1, "quant", "none", "tp", 2, "extra", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.models.n == 1 &&
          strcmp(d.result.models.models[0].name, "m") == 0 &&
          d.result.models.models[0].sharded_input == 1 && d.result.models.models[0].tp == 2,
          "tolerant load_model reply: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M1 s A*", "v", 1, "id", 1141, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", WF_MODELS_MAX + 3);
    for (int i = 0; i < WF_MODELS_MAX + 3; i++) {
        char nm[16];
        snprintf(nm, sizeof(nm), "m%d", i);
        mpb(&sb, "M1 ss", "name", nm);
    }
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_OK && d.result.models.n == WF_MODELS_MAX &&
          strcmp(d.result.models.models[WF_MODELS_MAX - 1].name, "m15") == 0,
          "19 models: %s %s", wf_status_name(rc), err);
    B();
    mpb(&sb, "M5 si si si si s M0", "v", 1, "id", 1142, "op", WF_OP_LOAD_MODEL, "status", 0,
        "result");
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "result.model"), "load reply without model: %s",
          wf_status_name(rc));
    B();
    mpb(&sb, "M5 si si si si s M1 s M1 si", "v", 1, "id", 1143, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", "name", 1);
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "models"), "models not an array: %s",
          wf_status_name(rc));
    B();
    mpb(&sb, "M5 si si si si s M1 s A1 M1 ss", "v", 1, "id", 1144, "op", WF_OP_LIST_MODELS,
        "status", 0, "result", "models", "bytes_loaded", "lots");
    rc = wf_reply_decode(sb.data, sb.size, &d, err, sizeof(err));
    CHECK(rc == WF_E_PROTOCOL && strstr(err, "bytes_loaded"), "bytes_loaded a str: %s",
          wf_status_name(rc));
    wf_buf_free(&buf);
}

static void test_model_names(void)
{
    /* style names and their parse are inverses; unknown is NULL / false */
    for (int s = WF_TP_REPLICATED; s <= WF_TP_PACKED_ROWWISE; s++) {
        const char *n = wf_tp_style_name((wf_tp_style_t)s);
        wf_tp_style_t back = (wf_tp_style_t)99;
        CHECK(n && wf_tp_style_parse(n, strlen(n), &back) && back == (wf_tp_style_t)s,
              "style %d name round trip", s);
    }
    wf_tp_style_t st;
    CHECK(wf_tp_style_name((wf_tp_style_t)5) == NULL, "style 5 has no name");
    CHECK(!wf_tp_style_parse("colwis", 6, &st) && !wf_tp_style_parse("colwisee", 8, &st) &&
          !wf_tp_style_parse(NULL, 0, &st) && !wf_tp_style_parse("colwise", 6, &st),
          "style prefixes are not styles");
    CHECK(strcmp(wf_tp_style_name(WF_TP_PACKED_COLWISE), "packed_colwise") == 0,
          "packed_colwise spelling");
    /* the shared rules on their own */
    CHECK(wf_check_model_name("a.B_9-z", 7, NULL, 0) == WF_OK, "good name");
    CHECK(wf_check_model_name("a\0b", 3, NULL, 0) == WF_E_BAD_FIELD, "name with NUL");
    CHECK(wf_check_model_path("a/b/c", 5, NULL, 0) == WF_OK, "good path");
    CHECK(wf_check_model_path("a//b/", 5, NULL, 0) == WF_OK, "path with empty components");
    CHECK(wf_check_model_path("../a", 4, NULL, 0) == WF_E_BAD_FIELD, "path ../a");
    CHECK(wf_check_model_path("a/..x", 5, NULL, 0) == WF_OK, "path a/..x");
    CHECK(wf_check_tp_glob("a.*.b", 5, NULL, 0) == WF_OK, "glob a.*.b");
    CHECK(wf_check_tp_glob("a.", 2, NULL, 0) == WF_E_BAD_FIELD, "glob a.");
    CHECK(wf_check_tp_glob("*", 1, NULL, 0) == WF_OK, "glob *");
    wf_tp_rule_t r = rule("x", WF_TP_PACKED_COLWISE, WF_TP_MAX_BLOCKS,
                          (const uint32_t[]){ 1, 1, 1, 1, 1, 1, 1, 1 });
    CHECK(wf_check_tp_rule(&r, NULL, 0) == WF_OK, "rule of 8 blocks");
    r.n_blocks = WF_TP_MAX_BLOCKS + 1; /* a count beyond the array: never read */
    CHECK(wf_check_tp_rule(&r, NULL, 0) == WF_E_LIMIT, "rule of 9 blocks");
}
int main(void)
{
    msgpack_sbuffer_init(&sb);
    test_models_requests();
    test_forward_requests();
    test_models_replies();
    test_model_names();
    msgpack_sbuffer_destroy(&sb);
    if (failed) {
        fprintf(stderr, "test_proto_models: %d checks failed\n", failed);
        return failed > 100 ? 100 : failed;
    }
    printf("test_proto_models: all checks passed\n");
    return 0;
}
