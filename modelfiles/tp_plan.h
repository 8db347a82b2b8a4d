/* tp_plan.h — tensor-parallel plans as data (diffusers' tp_plan).
 *
 * A plan is a list of rules (weft.h's wf_tp_rule_t): a glob over module
 * names -> a style. Module names are diffusers' (the state_dict key
 * without ".weight" / ".bias"), e.g. "transformer_blocks.3.attn.to_q".
 * In a glob, '*' matches exactly one non-empty component without '.'
 * (a block index); every other character matches itself. A module matched
 * by no rule is replicated.
 *
 * Styles on a linear weight [out, in] (bias [out]) for tp ranks t of T:
 *   colwise         rows [t*out/T, (t+1)*out/T) of weight and bias
 *   rowwise         columns [t*in/T, (t+1)*in/T); bias replicated
 *   packed_colwise  out cut into blocks proportional to rule.blocks
 *                   (sum of blocks must divide out: unit = out / sum, block
 *                   b has blocks[b] * unit rows); each block split as
 *                   colwise, the rank's pieces concatenated in block order
 *   packed_rowwise  the same on the in dim (columns); bias replicated
 *   replicated      everything on every rank
 * Divisibility errors carry diffusers' wording:
 *   "Cannot colwise-shard '<module>' weight rows (<n>) across <T>
 *    tensor-parallel ranks: not divisible by <T>."
 * (rowwise: "weight columns"; packed: "Cannot packed_colwise-shard
 *  '<module>' block <b> rows (<n>) across ..."; a block sum that does not
 *  divide the dim: "Cannot packed_colwise-shard '<module>': weight rows
 *  (<n>) not divisible into blocks <a>:<b>:... ".)
 *
 * Pure functions, no logging, no allocation (the JSON pair at the end
 * uses jansson). Style names: weft.h's wf_tp_style_name and proto.h's
 * wf_tp_style_parse.
 */
#ifndef WF_TP_PLAN_H
#define WF_TP_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* A plan: rules in the order given. */
typedef struct wf_tp_plan {
    uint32_t n;
    wf_tp_rule_t rules[WF_TP_MAX_RULES];
} wf_tp_plan_t;

/* True when `name` matches `glob` (rules above). */
bool wf_tp_glob_match(const char *glob, const char *name);

/* Check a plan on its own: globs non-empty, NUL-terminated, only
 * [A-Za-z0-9_.*] and no empty component; styles known; packed rules with
 * 1..WF_TP_MAX_BLOCKS blocks > 0, others with none; no glob twice.
 * WF_E_BAD_FIELD with a message naming the rule. */
wf_status_t wf_tp_plan_check(const wf_tp_plan_t *plan, char *err, size_t err_len);

/* The end of a family's plan check, once it matched plan's rules against
 * its linear layers (matched[r]: rule r matched one): unless
 * allow_unmatched (a default plan), WF_E_BAD_ARGUMENT naming the first
 * rule that matched none; else WF_OK, err emptied. */
wf_status_t wf_tp_plan_all_matched(const wf_tp_plan_t *plan, const bool *matched,
                                   bool allow_unmatched, char *err, size_t err_len);

/* The rule index matching module `name`, -1 when none. When several
 * match, the first. */
int wf_tp_plan_find(const wf_tp_plan_t *plan, const char *name);

/* One linear weight's placement on tp rank `rank` of `tp`. */
typedef struct wf_tp_place {
    wf_tp_style_t style;         /* REPLICATED when no rule matched */
    uint32_t n_blocks;           /* 1 for colwise / rowwise / replicated */
    int64_t block[WF_TP_MAX_BLOCKS]; /* full sizes of the blocks along the
                                    split dim (sum = out or in) */
    int64_t out, in;             /* full weight shape */
    int64_t local_out, local_in; /* this rank's weight shape */
} wf_tp_place_t;

/* Resolve module `name` with full weight shape [out, in] for `tp` ranks:
 * find its rule, turn packed relative blocks into sizes, check
 * divisibility. WF_OK, or WF_E_BAD_ARGUMENT with diffusers' message. */
wf_status_t wf_tp_place(const wf_tp_plan_t *plan, const char *name,
                        int64_t out, int64_t in, int tp,
                        wf_tp_place_t *ret, char *err, size_t err_len);

/* Piece of a split dim held by rank `rank` of `tp`: for each block b the
 * range [block_start_b + rank * block[b] / tp, + block[b] / tp) of the
 * full dim, concatenated. Writes the number of pieces (= n_blocks) and,
 * per piece, its full-dim start and length. Pure. */
void wf_tp_pieces(const wf_tp_place_t *p, int rank, int tp,
                  int64_t *ret_start, int64_t *ret_len);

/* The plan as JSON text, the wire form of a tp_plan map:
 *   {"<glob>": "<style>" | {"style": "<style>", "blocks": [1, 4]}, ...}
 * in rule order. Writes a NUL-terminated string into buf (len bytes);
 * WF_E_LIMIT when it does not fit. */
wf_status_t wf_tp_plan_to_json(const wf_tp_plan_t *plan, char *buf, size_t len);

/* Parse that JSON (len bytes, need not be NUL-terminated; duplicate keys
 * refused) and check it (wf_tp_plan_check). `label` names the source in
 * messages. WF_E_BAD_FIELD with a message. */
wf_status_t wf_tp_plan_from_json(const char *json, size_t len, const char *label,
                                 wf_tp_plan_t *ret, char *err, size_t err_len);

#endif /* WF_TP_PLAN_H */
