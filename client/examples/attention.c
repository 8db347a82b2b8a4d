/* attention.c — libweft by example: one synchronous attention call, then
 * several asynchronous jobs in flight on the same connection.
 *
 * usage: example_attention [ENDPOINT]     (default: $WEFT_ENDPOINT, else
 *                                          the daemon's default socket)
 * Start a daemon first, e.g.
 *   weftd --devices cpu:2 --listen ipc:///tmp/weft.sock
 *   example_attention ipc:///tmp/weft.sock
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

enum { B = 1, S = 64, H = 4, D = 32, JOBS = 4 };

int main(int argc, char **argv)
{
    const char *endpoint = argc > 1 ? argv[1] : getenv("WEFT_ENDPOINT");

    /* Connecting does not wait for the daemon; calls do, up to 10 s. */
    wf_client_t *client = NULL;
    wf_status_t st = wf_client_connect(endpoint, 10000, &client);
    if (st != WF_OK) {
        fprintf(stderr, "connect: %s\n", wf_status_name(st));
        return 1;
    }

    /* The handshake checks that the daemon speaks our protocol. */
    wf_hello_info_t hello;
    st = wf_hello(client, &hello);
    if (st != WF_OK) {
        fprintf(stderr, "hello: %s: %s\n", wf_status_name(st),
                wf_client_last_error(client));
        wf_client_destroy(&client);
        return 1;
    }
    printf("weftd %s, %s backend, %u devices\n", hello.weft_version,
           hello.backend, hello.devices);

    /* Tensors are (B, S, H, D) in C order, in our own memory; the library
     * borrows them (no copy) until the job is finished. */
    static float q[B * S * H * D], k[B * S * H * D], v[B * S * H * D];
    static float out[JOBS][B * S * H * D], lse[JOBS][B * S * H];
    for (int i = 0; i < B * S * H * D; i++) {
        q[i] = sinf(0.01f * (float)i);
        k[i] = cosf(0.02f * (float)i);
        v[i] = sinf(0.03f * (float)i + 1.0f);
    }
    wf_tensor_t tq = { q, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tk = { k, WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_tensor_t tv = { v, WF_DTYPE_F32, 4, { B, S, H, D } };

    /* 1. Synchronous: returns when the output is written. */
    wf_tensor_t to = { out[0], WF_DTYPE_F32, 4, { B, S, H, D } };
    wf_attention_opts_t opts = { .causal = 1 };   /* scale 0: 1/sqrt(D) */
    wf_job_result_t res;
    st = wf_attention(client, &tq, &tk, &tv, &opts, &to, lse[0], &res);
    if (st != WF_OK) {
        fprintf(stderr, "attention: %s: %s\n", wf_status_name(st),
                wf_client_last_error(client));
        wf_client_destroy(&client);
        return 1;
    }
    printf("sync: out[0] = %.5f, lse[0] = %.5f, %u devices, %llu us compute\n",
           out[0][0], lse[0][0], res.devices,
           (unsigned long long)res.compute_us);

    /* 2. Asynchronous: submit several jobs, then collect them. The daemon
     * may answer in any order; each reply finds its own job. */
    wf_job_t *jobs[JOBS] = { NULL };
    for (int j = 0; j < JOBS; j++) {
        wf_tensor_t oj = { out[j], WF_DTYPE_F32, 4, { B, S, H, D } };
        wf_attention_opts_t oo = { .causal = j % 2, .devices = 1 };
        st = wf_attention_submit(client, &tq, &tk, &tv, &oo, &oj, lse[j],
                                 &jobs[j]);
        if (st != WF_OK)
            fprintf(stderr, "submit %d: %s\n", j, wf_status_name(st));
    }
    for (int j = 0; j < JOBS; j++) {
        if (!jobs[j])
            continue;
        /* wf_job_poll(client, jobs[j]) would return WF_E_PENDING instead of
         * blocking; wf_job_wait blocks up to the given time. */
        st = wf_job_wait(client, jobs[j], 10000);
        if (st == WF_OK)
            printf("job %d (%s): out[0] = %.5f\n", j,
                   j % 2 ? "causal" : "full", out[j][0]);
        else
            printf("job %d: %s: %s\n", j, wf_status_name(st),
                   wf_job_error(jobs[j]));
        /* Destroying also works before the reply: that reply is dropped. */
        wf_job_destroy(client, &jobs[j]);
    }

    wf_client_destroy(&client);
    return 0;
}
