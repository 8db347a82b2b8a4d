/* check.c — field rules of load_model / unload_model / forward: model
 * names, model paths, tp plan globs and rules (proto_check.h).
 *
 * One copy of each rule, applied by the strict request decoder (daemon
 * side). The model path rule mirrors modelfiles/model_root.c's
 * wf_model_path_check with the wire's shorter length; the daemon checks
 * the path again when it opens it. The glob rule is tp_plan.h's.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "errf.h"
#include "proto.h"
#include "proto_check.h"

static bool is_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

wf_status_t wf_check_model_name(const char *s, size_t len, char *err, size_t err_len)
{
    if (len == 0 || len >= WF_MODEL_NAME_MAX)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                              "must be 1..%d bytes, got %zu", WF_MODEL_NAME_MAX - 1, len);
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!is_alnum(c) && c != '.' && c != '_' && c != '-')
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "byte %zu (0x%02x) is not one of [A-Za-z0-9._-]", i,
                                  (unsigned)(unsigned char)c);
    }
    return WF_OK;
}

wf_status_t wf_check_model_path(const char *s, size_t len, char *err, size_t err_len)
{
    if (len == 0)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "is empty");
    if (len >= WF_MODEL_PATH_LEN)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "is %zu bytes, at most %d", len,
                              WF_MODEL_PATH_LEN - 1);
    if (memchr(s, '\0', len))
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "holds a NUL byte");
    if (s[0] == '/')
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                              "is absolute: paths are relative to the model root");
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && s[j] != '/')
            j++;
        if (j - i == 2 && s[i] == '.' && s[i + 1] == '.')
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "has a '..' component: refused");
        i = j + 1;
    }
    return WF_OK;
}

wf_status_t wf_check_tp_glob(const char *s, size_t len, char *err, size_t err_len)
{
    if (len == 0 || len >= WF_TP_GLOB_MAX)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "glob must be 1..%d bytes, got %zu",
                              WF_TP_GLOB_MAX - 1, len);
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!is_alnum(c) && c != '_' && c != '.' && c != '*')
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "glob byte %zu (0x%02x) is not one of [A-Za-z0-9_.*]", i,
                                  (unsigned)(unsigned char)c);
        if (c == '.' && (i == 0 || i + 1 == len || s[i + 1] == '.'))
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "glob has an empty component");
    }
    return WF_OK;
}

static bool packed(wf_tp_style_t s)
{
    return s == WF_TP_PACKED_COLWISE || s == WF_TP_PACKED_ROWWISE;
}

wf_status_t wf_check_tp_rule(const wf_tp_rule_t *r, char *err, size_t err_len)
{
    size_t len = strnlen(r->glob, WF_TP_GLOB_MAX);
    wf_status_t rc = wf_check_tp_glob(r->glob, len, err, err_len);
    if (rc != WF_OK)
        return rc;
    const char *style = wf_tp_style_name(r->style);
    if (!style)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "style %d is not a wf_tp_style_t",
                              (int)r->style);
    if (!packed(r->style)) {
        if (r->n_blocks != 0)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len,
                                  "blocks are only allowed with packed_colwise / packed_rowwise, "
                                  "not %s", style);
        return WF_OK;
    }
    if (r->n_blocks == 0)
        return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "%s needs blocks (1..%d sizes > 0)",
                              style, WF_TP_MAX_BLOCKS);
    if (r->n_blocks > WF_TP_MAX_BLOCKS)
        return wf_errf_status(WF_E_LIMIT, err, err_len, "%u blocks, limit %d", r->n_blocks,
                              WF_TP_MAX_BLOCKS);
    for (uint32_t b = 0; b < r->n_blocks; b++)
        if (r->blocks[b] == 0)
            return wf_errf_status(WF_E_BAD_FIELD, err, err_len, "blocks[%u] must be > 0", b);
    return WF_OK;
}
