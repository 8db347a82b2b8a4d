/* json_err.h — jansson parse errors described without the text parsed.
 *
 * jansson's own message quotes the input near the error ("invalid token
 * near 'hunter2'"). The JSON weft parses comes from files (config.json,
 * index.json, safetensors headers, tp plans) whose error messages travel
 * to clients and logs, so they say where (byte offset, line, column) and
 * what kind of error (a fixed phrase per json_error_code), never what the
 * bytes were. Internal to modelfiles; nothing here logs.
 */
#ifndef WF_JSON_ERR_H
#define WF_JSON_ERR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "weft.h"

/* Write "at byte B (line L, column C): PHRASE" for a failed json_load*
 * into buf (len bytes, NUL-terminated, truncated). Returns buf. */
const char *wf_json_error_where(const json_error_t *e, char *buf, size_t len);

/* Ordinal suffix for n ("st", "nd", "rd", "th"): messages name a key the
 * file chose by its position ("the 3rd key") rather than by its text. */
const char *wf_json_ordinal(size_t n);

/* "an object", "an integer", "null", ...: a value's JSON type in a
 * message (never its text). */
const char *wf_json_type_name(const json_t *v);

/* config.json text (len bytes; label names it in messages) as the JSON
 * object of a model of class_name whose keys are all diffusers'
 * bookkeeping (any `_` key) or one of the n field names at *names, stride
 * bytes apart (a family's table of fields: &fields[0].name, sizeof
 * fields[0]): the object into
 * *ret_root (the caller's: json_decref). WF_E_MALFORMED when it is not
 * JSON or not an object; WF_E_BAD_FIELD when `_class_name` is missing,
 * not a string or another class (not echoed), or a key is unknown (named
 * by its position, not its text). */
wf_status_t wf_json_config_open(const char *text, size_t len, const char *label,
                                const char *class_name, const char *const *names,
                                size_t n, size_t stride, json_t **ret_root, char *err,
                                size_t err_len);

#endif /* WF_JSON_ERR_H */
