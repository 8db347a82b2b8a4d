/* proto_check.h — the field rules of the resident-model ops (PROTOCOL.md
 * section 12.1): model names, model paths, tp plan globs and rules. The
 * strict request decoder applies them; they are here, not static in
 * decode.c, so that the daemon and the tests apply exactly the same rules.
 * The encoder and libweft do not: they send what they are given (as long
 * as the wire can carry it) and the daemon refuses it with its own code.
 * Internal to weft_proto's users: not installed.
 *
 * Pure string checks: no I/O, no allocation, no logging. Each returns
 * WF_OK, or WF_E_BAD_FIELD / WF_E_LIMIT with a message (without the
 * field's name: callers prefix it) in err (may be NULL).
 */
#ifndef WF_PROTO_CHECK_H
#define WF_PROTO_CHECK_H

#include <stddef.h>

#include "weft.h"

/* A model name: 1..WF_MODEL_NAME_MAX-1 bytes of [A-Za-z0-9._-]. */
wf_status_t wf_check_model_name(const char *s, size_t len, char *err, size_t err_len);

/* A model path: 1..WF_MODEL_PATH_LEN-1 bytes, no NUL, relative (no leading
 * '/'), no ".." component (the model root's rules, model_root.h). */
wf_status_t wf_check_model_path(const char *s, size_t len, char *err, size_t err_len);

/* A tp plan glob: 1..WF_TP_GLOB_MAX-1 bytes of [A-Za-z0-9_.*], no empty
 * component (no leading or trailing '.', no ".."). */
wf_status_t wf_check_tp_glob(const char *s, size_t len, char *err, size_t err_len);

/* A whole rule: its glob (NUL-terminated within WF_TP_GLOB_MAX), a known
 * style, and blocks: 1..WF_TP_MAX_BLOCKS entries > 0 for the packed
 * styles (more: WF_E_LIMIT), none for the others. */
wf_status_t wf_check_tp_rule(const wf_tp_rule_t *r, char *err, size_t err_len);

#endif /* WF_PROTO_CHECK_H */
