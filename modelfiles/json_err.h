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
#include <stddef.h>

/* Write "at byte B (line L, column C): PHRASE" for a failed json_load*
 * into buf (len bytes, NUL-terminated, truncated). Returns buf. */
const char *wf_json_error_where(const json_error_t *e, char *buf, size_t len);

/* Ordinal suffix for n ("st", "nd", "rd", "th"): messages name a key the
 * file chose by its position ("the 3rd key") rather than by its text. */
const char *wf_json_ordinal(size_t n);

#endif /* WF_JSON_ERR_H */
