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

/* Write "at byte B (line L, column C): PHRASE" for a failed json_load*
 * into buf (len bytes, NUL-terminated, truncated). Returns buf. */
const char *wf_json_error_where(const json_error_t *e, char *buf, size_t len);

/* Ordinal suffix for n ("st", "nd", "rd", "th"): messages name a key the
 * file chose by its position ("the 3rd key") rather than by its text. */
const char *wf_json_ordinal(size_t n);

/* Whether every key of config.json's object `root` is diffusers'
 * bookkeeping (`_class_name`, `_diffusers_version`: any `_` key) or one
 * of the n field names at *names, stride bytes apart (a family's table of
 * fields: &fields[0].name, sizeof fields[0]). Else false, with err naming
 * the first other key by its position, as not a field of class_name. */
bool wf_json_config_keys_known(json_t *root, const char *const *names, size_t n,
                               size_t stride, const char *label,
                               const char *class_name, char *err, size_t err_len);

#endif /* WF_JSON_ERR_H */
