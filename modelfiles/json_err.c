/* json_err.c — jansson parse errors without the parsed text (json_err.h). */
#include "json_err.h"
#include "errf.h"

#include <stdio.h>
#include <string.h>

static const char *phrase(enum json_error_code code)
{
    switch (code) {
    case json_error_out_of_memory: return "out of memory";
    case json_error_stack_overflow: return "nested too deeply";
    case json_error_invalid_utf8: return "invalid UTF-8";
    case json_error_premature_end_of_input: return "the text ends too early";
    case json_error_end_of_input_expected: return "text after the end of the value";
    case json_error_invalid_syntax: return "invalid syntax";
    case json_error_null_character: return "a \\u0000 in a string";
    case json_error_null_byte_in_key: return "a NUL byte in a key";
    case json_error_duplicate_key: return "duplicate key";
    case json_error_numeric_overflow: return "a number out of range";
    case json_error_invalid_format:
    case json_error_wrong_type:
    case json_error_null_value:
    case json_error_item_not_found:
    case json_error_index_out_of_range:
    case json_error_cannot_open_file:
    case json_error_invalid_argument:
    case json_error_unknown:
    default: return "not valid JSON";
    }
}

const char *wf_json_error_where(const json_error_t *e, char *buf, size_t len)
{
    snprintf(buf, len, "at byte %d (line %d, column %d): %s", e->position, e->line,
             e->column, phrase(json_error_code(e)));
    return buf;
}

const char *wf_json_ordinal(size_t n)
{
    if (n % 100 >= 11 && n % 100 <= 13)
        return "th";
    switch (n % 10) {
    case 1: return "st";
    case 2: return "nd";
    case 3: return "rd";
    default: return "th";
    }
}

/* Whether every key of `root` is a `_` key or a field of the table; else
 * false, with err naming the first other key by its position. */
static bool config_keys_known(json_t *root, const char *const *names, size_t n,
                               size_t stride, const char *label,
                               const char *class_name, char *err, size_t err_len)
{
    const char *key;
    json_t *val;
    size_t nth = 0;
    json_object_foreach(root, key, val) {
        nth++;
        if (key[0] == '_')
            continue; /* _class_name, _diffusers_version, _name_or_path, ... */
        size_t i = 0;
        while (i < n && strcmp(key, *(const char *const *)(const void *)
                                        ((const char *)names + i * stride)) != 0)
            i++;
        if (i == n) {
            /* named by position: the key is the file's text, not ours */
            wf_errf(err, err_len,
                    "%s: unknown field: the %zu%s key of the object is not a field of "
                    "diffusers' %s that weft knows",
                    label, nth, wf_json_ordinal(nth), class_name);
            return false;
        }
    }
    return true;
}

const char *wf_json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a real number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

wf_status_t wf_json_config_open(const char *text, size_t len, const char *label,
                                const char *class_name, const char *const *names,
                                size_t n, size_t stride, json_t **ret_root, char *err,
                                size_t err_len)
{
    *ret_root = NULL;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        char where[128];
        wf_errf(err, err_len, "%s: JSON invalid %s", label,
                wf_json_error_where(&jerr, where, sizeof where));
        return WF_E_MALFORMED; /* not a config: PROTOCOL.md 12.2 */
    }
    if (!json_is_object(root)) {
        wf_errf(err, err_len, "%s: not a JSON object", label);
        json_decref(root);
        return WF_E_MALFORMED;
    }
    json_t *cls = json_object_get(root, "_class_name");
    if (cls == NULL || !json_is_string(cls)) {
        wf_errf(err, err_len, "%s: '_class_name' is %s, expected \"%s\"", label,
                cls == NULL ? "missing" : "not a string", class_name);
    } else if (strcmp(json_string_value(cls), class_name) != 0) {
        /* the value is not echoed: a message never quotes file content */
        wf_errf(err, err_len, "%s: model class ('_class_name') is not supported: it is "
                "not \"%s\"", label, class_name);
    } else if (config_keys_known(root, names, n, stride, label, class_name, err, err_len)) {
        *ret_root = root;
        return WF_OK;
    }
    json_decref(root);
    return WF_E_BAD_FIELD;
}
