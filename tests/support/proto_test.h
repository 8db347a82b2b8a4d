/* proto_test.h — what the codec's tests (test_proto.c,
 * test_proto_models.c) share: the CHECK macro and its failure count, the
 * msgpack buffer the cases are written into (mp_build.h), and the check
 * of a request decode. Static on purpose: each test is one executable.
 */
#ifndef WF_TEST_PROTO_TEST_H
#define WF_TEST_PROTO_TEST_H

#include <stdio.h>
#include <string.h>

#include "proto.h"
#include "fuzz/mp_build.h"
#include "support/check.h"

static msgpack_sbuffer sb;
#define B() msgpack_sbuffer_clear(&sb)

static const int64_t SQ[4] = { 2, 5, 4, 8 };   /* q (B, Sq, Hq, D) */

/* Decode sb as a request and check code, echoed id and a message part. */
static void expect_req_lim(const char *what, const wf_limits_t *lim, wf_status_t want,
                           uint64_t want_id, const char *substr)
{
    wf_request_t req;
    char err[WF_PROTO_ERROR_MAX];
    wf_status_t rc = wf_request_decode(sb.data, sb.size, lim, &req, err, sizeof(err));
    CHECK(rc == want, "%s: got %s, want %s (%s)", what, wf_status_name(rc),
          wf_status_name(want), err);
    CHECK(req.id == want_id, "%s: echoed id %llu, want %llu", what,
          (unsigned long long)req.id, (unsigned long long)want_id);
    if (want != WF_OK)
        CHECK(err[0] != '\0', "%s: no error message", what);
    if (substr)
        CHECK(strstr(err, substr) != NULL, "%s: message \"%s\" lacks \"%s\"", what, err,
              substr);
}

static void expect_req(const char *what, wf_status_t want, uint64_t want_id,
                       const char *substr)
{
    wf_limits_t lim;
    wf_limits_default(&lim);
    expect_req_lim(what, &lim, want, want_id, substr);
}

#endif /* WF_TEST_PROTO_TEST_H */
