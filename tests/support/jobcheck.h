/* jobcheck.h — test support for end-to-end attention jobs through
 * libweft: a job case, its buffers with seeded inputs, the fp64 reference
 * check, and helpers every such test needs. Tests only. */
#ifndef WF_TEST_JOBCHECK_H
#define WF_TEST_JOBCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "weft.h"

/* Monotonic seconds. */
double now_s(void);

/* Element i of buf (dtype dt) written from x / read as double;
 * round-to-nearest-even, any alignment. */
void store(void *buf, wf_dtype_t dt, size_t i, float x);
double load(const void *buf, wf_dtype_t dt, size_t i);

/* Uniform in [-1, 1) from a splitmix64 state. */
float rng_uniform(uint64_t *s);

typedef struct jcase {
    const char *name;
    int64_t B, Sq, Skv, Hq, Hkv, D;
    wf_dtype_t in, out;        /* q, k, v share `in` */
    int causal;
    bool want_lse;
    float scale;               /* 0: 1/sqrt(D) */
    wf_rotate_t rotate;
    wf_opt_t fp32, ring_any, uly_any, lb;
} jcase_t;

typedef struct jbuf {
    jcase_t c;
    wf_tensor_t q, k, v, out;
    float *lse;
} jbuf_t;

/* Free the buffers of a job; zeroes *a. */
void jbuf_free(jbuf_t *a);

/* Allocate q, k, v (seeded uniform inputs), out (NaN) and lse (NaN, when
 * c->want_lse) for case c. False when out of memory. */
bool jbuf_init(jbuf_t *a, const jcase_t *c, uint64_t seed);

/* Worst errors of out (absolute) and lse (relative to max(1, |lse|); 0
 * without lse) against the fp64 reference computed over the stored
 * inputs, each tensor read in its own dtype: q (B,Sq,Hq,D), k / v
 * (B,Skv,Hkv,D), out like q, lse (B,Sq,Hq) or NULL; scale_opt 0 means
 * 1/sqrt(D). Infinite errors when out of memory. */
void attention_errors(const wf_tensor_t *q, const wf_tensor_t *k,
                      const wf_tensor_t *v, const wf_tensor_t *out,
                      const float *lse, int causal, float scale_opt,
                      double *ret_out, double *ret_lse);

/* Worst errors of out (absolute) and lse (relative to max(1, |lse|))
 * against the fp64 reference computed over the stored inputs
 * (attention_errors). */
void jbuf_errors(const jbuf_t *a, double *ret_out, double *ret_lse);

/* The stated tolerances of case c (max abs error of out; lse relative to
 * max(1, |lse|)): out by its dtype, f32 1e-4, f16 5e-4, bf16 4e-3,
 * loosened to the input dtype's (f16 4e-3, bf16 3e-2) when ring steps may
 * be merged in the input dtype (`ring_merge`, convert_to_fp32 off and a
 * low-precision input); lse 1e-4. */
void jcase_tolerances(const jcase_t *c, bool ring_merge, double *ret_out,
                      double *ret_lse);

/* The libweft options of case c. */
wf_attention_opts_t opts_of(const jcase_t *c);

/* The outputs of a job of a->c that answered WF_OK (its result res)
 * against the fp64 reference, with the tolerances of a cluster job
 * (jcase_tolerances with ring_merge): true when within them. Prints the
 * errors, epoch and devices to stdout, unless quiet and within them. */
bool jbuf_check(const jbuf_t *a, const wf_job_result_t *res, bool quiet);

/* The most jobs of one jcase_burst. */
#define JCASE_BURST_MAX 32

/* n (<= JCASE_BURST_MAX) attention jobs submitted at once to the daemon at
 * endpoint over one new connection, job i of cases[i % n_cases] with seed
 * seed + i, then each awaited (timeout_ms) and checked against the fp64
 * reference (jcase_tolerances with ring_merge); devices > 0: each must also
 * have run on that many devices. Prints each failure and "label: k/n jobs
 * correct"; returns k (0 when the connection fails). */
unsigned jcase_burst(const char *endpoint, const jcase_t *cases, size_t n_cases, int n,
                     uint64_t seed, int timeout_ms, uint32_t devices, const char *label);

/* Run case c through cl (wf_attention, inputs seeded with seed) and check
 * it (jbuf_check): true when WF_OK and within tolerance. A failed job's
 * status and message go to stderr. The job's result goes to *ret_res
 * (NULL: not wanted), also when it failed. */
bool jcase_run(wf_client_t *cl, const jcase_t *c, uint64_t seed, bool quiet,
               wf_job_result_t *ret_res);

/* Start a daemon (support/spawn.h's spawn_exec): argv[0] is its path,
 * argv NULL-terminated; the child gets an empty signal mask and, when
 * notify_socket is not NULL, NOTIFY_SOCKET (never the test's own).
 * Returns the pid (-1 when it could not be started); an exec failure
 * exits the child with SPAWN_EXIT_EXEC (127). */
pid_t spawn_daemon(const char *const argv[], const char *notify_socket);

/* The signal set-up of an end-to-end test's main(): SIGPIPE ignored (a
 * write to a daemon that died fails instead of killing the test) and
 * SIGCHLD blocked (children are waited for on pidfds, which the block
 * does not affect). */
void block_test_signals(void);

/* True once the daemon at endpoint answers hello (20 s timeout). */
bool wait_ready(const char *endpoint);

/* SIGTERM the daemon (started by spawn_daemon) and wait for it to exit,
 * within timeout_ms (spawn_signal_reap: on its pidfd). True when it
 * exited 0; otherwise the reason goes to err. A daemon still running at
 * the bound is SIGKILLed and reaped, with a line on stderr. */
bool stop_daemon(pid_t pid, int timeout_ms, char *err, size_t errlen);

#endif
