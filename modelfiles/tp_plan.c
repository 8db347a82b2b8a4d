/* tp_plan.c — tensor-parallel plans as data (see tp_plan.h): glob match,
 * plan check, placements with diffusers' messages,
 * and the plan's JSON wire form.
 *
 * Everything but the JSON pair is pure and allocation-free, so the
 * workers may resolve placements concurrently. The JSON pair is the only
 * user of jansson here; it keeps rule order (jansson objects preserve
 * insertion order).
 */
#include "tp_plan.h"
#include "errf.h"
#include "json_err.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static bool style_known(wf_tp_style_t s)
{
    return s == WF_TP_REPLICATED || s == WF_TP_COLWISE || s == WF_TP_ROWWISE
           || s == WF_TP_PACKED_COLWISE || s == WF_TP_PACKED_ROWWISE;
}

static bool style_packed(wf_tp_style_t s)
{
    return s == WF_TP_PACKED_COLWISE || s == WF_TP_PACKED_ROWWISE;
}

/* Splits the out dim (rows); the others split in (columns) or nothing. */
static bool style_on_rows(wf_tp_style_t s)
{
    return s == WF_TP_COLWISE || s == WF_TP_PACKED_COLWISE;
}

/* ---- glob --------------------------------------------------------------- */

/* One component: '*' matches one or more characters (a component has no
 * '.', so this is "one non-empty component" when '*' stands alone). The
 * classic wildcard scan with backtracking to the last star only, each star
 * being "one character, then any run"; O(len(p) * len(s)) at worst. */
static bool component_match(const char *p, size_t pn, const char *s, size_t sn)
{
    size_t pi = 0, si = 0;
    size_t star = SIZE_MAX, resume = 0;
    while (si < sn) {
        if (pi < pn && p[pi] == '*') {
            star = pi++;
            resume = ++si;      /* the star takes s[si] at least */
        } else if (pi < pn && p[pi] == s[si]) {
            pi++;
            si++;
        } else if (star != SIZE_MAX) {
            pi = star + 1;
            si = ++resume;      /* the star takes one more character */
        } else {
            return false;
        }
    }
    return pi == pn;
}

bool wf_tp_glob_match(const char *glob, const char *name)
{
    if (glob == NULL || name == NULL)
        return false;
    const char *g = glob, *n = name;
    for (;;) {
        const char *ge = strchr(g, '.');
        const char *ne = strchr(n, '.');
        size_t gl = ge ? (size_t)(ge - g) : strlen(g);
        size_t nl = ne ? (size_t)(ne - n) : strlen(n);
        if (!component_match(g, gl, n, nl))
            return false;
        if ((ge == NULL) != (ne == NULL))
            return false;       /* different number of components */
        if (ge == NULL)
            return true;
        g = ge + 1;
        n = ne + 1;
    }
}

/* ---- plan check --------------------------------------------------------- */

/* The glob as text for messages: it may lack its NUL when refused. */
#define GLOB_FMT "'%.*s'"
#define GLOB_ARG(r) (int)strnlen((r)->glob, WF_TP_GLOB_MAX), (r)->glob

static wf_status_t check_rule(const wf_tp_rule_t *r, uint32_t i, char *err,
                              size_t err_len)
{
    size_t len = strnlen(r->glob, WF_TP_GLOB_MAX);
    /* the glob is quoted only once every byte of it is known to be one of
     * the allowed characters */
    if (len == WF_TP_GLOB_MAX) {
        wf_errf(err, err_len, "tp_plan rule %" PRIu32 ": glob longer than %d bytes", i,
                WF_TP_GLOB_MAX - 1);
        return WF_E_BAD_FIELD;
    }
    if (len == 0) {
        wf_errf(err, err_len, "tp_plan rule %" PRIu32 ": empty glob", i);
        return WF_E_BAD_FIELD;
    }
    for (size_t k = 0; k < len; k++) {
        char c = r->glob[k];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
                  || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '*';
        if (!ok) {
            wf_errf(err, err_len, "tp_plan rule %" PRIu32
                    ": glob character 0x%02x at %zu not allowed (only A-Z a-z 0-9 _ . *)",
                    i, (unsigned)(unsigned char)c, k);
            return WF_E_BAD_FIELD;
        }
    }
    for (size_t k = 0; k < len; k++) {
        if (r->glob[k] == '.' && (k == 0 || k + 1 == len || r->glob[k + 1] == '.')) {
            wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT
                    ": empty component", i, GLOB_ARG(r));
            return WF_E_BAD_FIELD;
        }
    }
    if (!style_known(r->style)) {
        wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT ": unknown style %d",
                i, GLOB_ARG(r), (int)r->style);
        return WF_E_BAD_FIELD;
    }
    if (style_packed(r->style)) {
        if (r->n_blocks < 1 || r->n_blocks > WF_TP_MAX_BLOCKS) {
            wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT
                    ": %s needs 1..%d blocks, has %" PRIu32, i, GLOB_ARG(r),
                    wf_tp_style_name(r->style), WF_TP_MAX_BLOCKS, r->n_blocks);
            return WF_E_BAD_FIELD;
        }
        for (uint32_t b = 0; b < r->n_blocks; b++)
            if (r->blocks[b] == 0) {
                wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT
                        ": block %" PRIu32 " is 0", i, GLOB_ARG(r), b);
                return WF_E_BAD_FIELD;
            }
    } else if (r->n_blocks != 0) {
        wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT
                ": blocks given for %s (only packed styles take blocks)", i,
                GLOB_ARG(r), wf_tp_style_name(r->style));
        return WF_E_BAD_FIELD;
    }
    return WF_OK;
}

wf_status_t wf_tp_plan_check(const wf_tp_plan_t *plan, char *err, size_t err_len)
{
    if (plan == NULL) {
        wf_errf(err, err_len, "tp_plan missing");
        return WF_E_BAD_FIELD;
    }
    if (plan->n > WF_TP_MAX_RULES) {
        wf_errf(err, err_len, "tp_plan has %" PRIu32 " rules, at most %d", plan->n,
                WF_TP_MAX_RULES);
        return WF_E_BAD_FIELD;
    }
    for (uint32_t i = 0; i < plan->n; i++) {
        wf_status_t s = check_rule(&plan->rules[i], i, err, err_len);
        if (s != WF_OK)
            return s;
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(plan->rules[j].glob, plan->rules[i].glob) == 0) {
                wf_errf(err, err_len, "tp_plan rule %" PRIu32 " " GLOB_FMT
                        ": glob already given by rule %" PRIu32, i,
                        GLOB_ARG(&plan->rules[i]), j);
                return WF_E_BAD_FIELD;
            }
    }
    return WF_OK;
}

int wf_tp_plan_find(const wf_tp_plan_t *plan, const char *name)
{
    uint32_t n = plan->n < WF_TP_MAX_RULES ? plan->n : WF_TP_MAX_RULES;
    for (uint32_t i = 0; i < n; i++)
        if (wf_tp_glob_match(plan->rules[i].glob, name))
            return (int)i;
    return -1;
}

/* ---- placement ---------------------------------------------------------- */

wf_status_t wf_tp_place(const wf_tp_plan_t *plan, const char *name,
                        int64_t out, int64_t in, int tp,
                        wf_tp_place_t *ret, char *err, size_t err_len)
{
    if (tp < 1) {
        wf_errf(err, err_len, "tensor-parallel degree %d invalid (must be >= 1)", tp);
        return WF_E_BAD_ARGUMENT;
    }
    if (out < 1 || in < 1) {
        wf_errf(err, err_len, "'%s': weight shape [%" PRId64 ", %" PRId64 "] invalid",
                name, out, in);
        return WF_E_BAD_ARGUMENT;
    }
    wf_tp_place_t p;
    memset(&p, 0, sizeof p);
    p.out = out;
    p.in = in;
    p.local_out = out;
    p.local_in = in;
    p.style = WF_TP_REPLICATED;
    p.n_blocks = 1;
    p.block[0] = out;

    int ri = plan != NULL ? wf_tp_plan_find(plan, name) : -1;
    const wf_tp_rule_t *r = ri >= 0 ? &plan->rules[ri] : NULL;
    if (r == NULL || r->style == WF_TP_REPLICATED) {
        *ret = p;
        return WF_OK;
    }
    if (!style_known(r->style)
        || (style_packed(r->style) && (r->n_blocks < 1 || r->n_blocks > WF_TP_MAX_BLOCKS))) {
        wf_errf(err, err_len, "tp_plan rule %d '%.*s' invalid (unchecked plan)", ri,
                (int)strnlen(r->glob, WF_TP_GLOB_MAX), r->glob);
        return WF_E_BAD_ARGUMENT;
    }
    p.style = r->style;
    const char *sname = wf_tp_style_name(r->style);
    bool rows = style_on_rows(r->style);
    const char *what = rows ? "rows" : "columns";
    int64_t dim = rows ? out : in;

    if (!style_packed(r->style)) {
        p.block[0] = dim;
        if (dim % tp != 0) {
            wf_errf(err, err_len, "Cannot %s-shard '%s' weight %s (%" PRId64 ") across %d "
                    "tensor-parallel ranks: not divisible by %d.", sname, name, what,
                    dim, tp, tp);
            return WF_E_BAD_ARGUMENT;
        }
    } else {
        uint64_t sum = 0;
        char ratio[WF_TP_MAX_BLOCKS * 12];
        size_t o = 0;
        for (uint32_t b = 0; b < r->n_blocks; b++) {
            sum += r->blocks[b];
            o += (size_t)snprintf(ratio + o, sizeof ratio - o, "%s%" PRIu32,
                                  b ? ":" : "", r->blocks[b]);
        }
        if (sum == 0 || (uint64_t)dim % sum != 0) {
            wf_errf(err, err_len, "Cannot %s-shard '%s': weight %s (%" PRId64 ") not "
                    "divisible into blocks %s.", sname, name, what, dim, ratio);
            return WF_E_BAD_ARGUMENT;
        }
        int64_t unit = dim / (int64_t)sum;
        p.n_blocks = r->n_blocks;
        for (uint32_t b = 0; b < r->n_blocks; b++) {
            p.block[b] = (int64_t)r->blocks[b] * unit;
            if (p.block[b] % tp != 0) {
                wf_errf(err, err_len, "Cannot %s-shard '%s' block %" PRIu32 " %s (%" PRId64
                        ") across %d tensor-parallel ranks: not divisible by %d.", sname,
                        name, b, what, p.block[b], tp, tp);
                return WF_E_BAD_ARGUMENT;
            }
        }
    }
    if (rows)
        p.local_out = out / tp;
    else
        p.local_in = in / tp;
    *ret = p;
    return WF_OK;
}

void wf_tp_pieces(const wf_tp_place_t *p, int rank, int tp,
                  int64_t *ret_start, int64_t *ret_len)
{
    if (p->style == WF_TP_REPLICATED) {
        ret_start[0] = 0;
        ret_len[0] = p->block[0];
        return;
    }
    int64_t block_start = 0;
    for (uint32_t b = 0; b < p->n_blocks; b++) {
        int64_t len = p->block[b] / tp;
        ret_start[b] = block_start + (int64_t)rank * len;
        ret_len[b] = len;
        block_start += p->block[b];
    }
}

/* ---- JSON --------------------------------------------------------------- */

wf_status_t wf_tp_plan_to_json(const wf_tp_plan_t *plan, char *buf, size_t len)
{
    if (len > 0)
        buf[0] = '\0';
    if (wf_tp_plan_check(plan, NULL, 0) != WF_OK)
        return WF_E_BAD_FIELD;
    wf_status_t s = WF_E_INTERNAL;
    json_t *root = json_object();
    if (root == NULL)
        return WF_E_INTERNAL;
    for (uint32_t i = 0; i < plan->n; i++) {
        const wf_tp_rule_t *r = &plan->rules[i];
        json_t *v;
        if (style_packed(r->style)) {
            json_t *blocks = json_array();
            v = json_object();
            if (blocks == NULL || v == NULL) {
                json_decref(blocks);
                json_decref(v);
                goto out;
            }
            for (uint32_t b = 0; b < r->n_blocks; b++)
                if (json_array_append_new(blocks, json_integer(r->blocks[b])) != 0) {
                    json_decref(blocks);
                    json_decref(v);
                    goto out;
                }
            if (json_object_set_new(v, "style", json_string(wf_tp_style_name(r->style))) != 0
                || json_object_set_new(v, "blocks", blocks) != 0) {
                json_decref(v);
                goto out;
            }
        } else {
            v = json_string(wf_tp_style_name(r->style));
        }
        if (v == NULL || json_object_set_new(root, r->glob, v) != 0)
            goto out;
    }
    char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (text == NULL)
        goto out;
    size_t n = strlen(text);
    if (n + 1 > len) {
        s = WF_E_LIMIT;
    } else {
        memcpy(buf, text, n + 1);
        s = WF_OK;
    }
    free(text);
out:
    json_decref(root);
    return s;
}

/* Messages below name a rule by its index in the object ("rule 3", from 0
 * as wf_tp_plan_check counts),
 * not by its glob, and never quote a value: the text may come from a file
 * (a rank file's metadata) whose content is not echoed. */
static wf_status_t parse_style(json_t *v, const char *label, size_t nth,
                               wf_tp_style_t *ret, char *err, size_t err_len)
{
    if (!json_is_string(v)) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: style is not a string", label, nth);
        return WF_E_BAD_FIELD;
    }
    if (!wf_tp_style_parse(json_string_value(v), json_string_length(v), ret)) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: unknown style (replicated, "
                "colwise, rowwise, packed_colwise, packed_rowwise)", label, nth);
        return WF_E_BAD_FIELD;
    }
    return WF_OK;
}

static wf_status_t parse_rule(const char *key, json_t *v, const char *label, size_t nth,
                              wf_tp_rule_t *r, char *err, size_t err_len)
{
    memset(r, 0, sizeof *r);
    if (strlen(key) >= WF_TP_GLOB_MAX) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: glob longer than %d bytes", label,
                nth, WF_TP_GLOB_MAX - 1);
        return WF_E_BAD_FIELD;
    }
    memcpy(r->glob, key, strlen(key) + 1);
    if (json_is_string(v))
        return parse_style(v, label, nth, &r->style, err, err_len);
    if (!json_is_object(v)) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: value is neither a style name nor "
                "{\"style\": ..., \"blocks\": [...]}", label, nth);
        return WF_E_BAD_FIELD;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "style") != 0 && strcmp(k, "blocks") != 0) {
            wf_errf(err, err_len, "%s: tp_plan rule %zu: unknown key (only \"style\" and "
                    "\"blocks\")", label, nth);
            return WF_E_BAD_FIELD;
        }
    }
    json_t *st = json_object_get(v, "style");
    if (st == NULL) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: \"style\" missing", label, nth);
        return WF_E_BAD_FIELD;
    }
    wf_status_t s = parse_style(st, label, nth, &r->style, err, err_len);
    if (s != WF_OK)
        return s;
    json_t *bl = json_object_get(v, "blocks");
    if (bl == NULL)
        return WF_OK;   /* wf_tp_plan_check says whether the style needs them */
    if (!json_is_array(bl) || json_array_size(bl) > WF_TP_MAX_BLOCKS) {
        wf_errf(err, err_len, "%s: tp_plan rule %zu: \"blocks\" is not an array of at "
                "most %d integers", label, nth, WF_TP_MAX_BLOCKS);
        return WF_E_BAD_FIELD;
    }
    size_t i;
    json_array_foreach(bl, i, x) {
        if (!json_is_integer(x) || json_integer_value(x) < 1
            || json_integer_value(x) > (json_int_t)UINT32_MAX) {
            wf_errf(err, err_len, "%s: tp_plan rule %zu: block %zu is not an integer in "
                    "1..%" PRIu32, label, nth, i, UINT32_MAX);
            return WF_E_BAD_FIELD;
        }
        r->blocks[i] = (uint32_t)json_integer_value(x);
    }
    r->n_blocks = (uint32_t)json_array_size(bl);
    return WF_OK;
}

wf_status_t wf_tp_plan_from_json(const char *json, size_t len, const char *label,
                                 wf_tp_plan_t *ret, char *err, size_t err_len)
{
    if (label == NULL)
        label = "tp_plan";
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL) {
        char where[128];
        wf_errf(err, err_len, "%s: invalid JSON %s", label,
                wf_json_error_where(&je, where, sizeof where));
        return WF_E_BAD_FIELD;
    }
    wf_status_t s = WF_E_BAD_FIELD;
    wf_tp_plan_t *p = calloc(1, sizeof *p);
    if (p == NULL) {
        wf_errf(err, err_len, "%s: out of memory", label);
        s = WF_E_INTERNAL;
        goto out;
    }
    if (!json_is_object(root)) {
        wf_errf(err, err_len, "%s: tp_plan is not an object", label);
        goto out;
    }
    if (json_object_size(root) > WF_TP_MAX_RULES) {
        wf_errf(err, err_len, "%s: tp_plan has %zu rules, at most %d", label,
                json_object_size(root), WF_TP_MAX_RULES);
        goto out;
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        s = parse_rule(key, v, label, (size_t)p->n, &p->rules[p->n], err, err_len);
        if (s != WF_OK)
            goto out;
        p->n++;
    }
    char msg[256];
    s = wf_tp_plan_check(p, msg, sizeof msg);
    if (s != WF_OK) {
        wf_errf(err, err_len, "%s: %s", label, msg);
        goto out;
    }
    *ret = *p;
out:
    free(p);
    json_decref(root);
    return s;
}

wf_status_t wf_tp_plan_all_matched(const wf_tp_plan_t *plan, const bool *matched,
                                   bool allow_unmatched, char *err, size_t err_len)
{
    for (uint32_t r = 0; r < plan->n && !allow_unmatched; r++)
        if (!matched[r])
            return wf_errf_status(WF_E_BAD_ARGUMENT, err, err_len,
                                  "tp_plan rule '%s' matches no linear layer of this model",
                                  plan->rules[r].glob);
    if (err && err_len)
        err[0] = '\0';
    return WF_OK;
}
