/* fuzz_gate_seeds.c — writes a seed corpus for fuzz_gate into a
 * directory: each file a selector byte (fuzz_gate.c's header says what
 * its bits mean), then the bytes: whole NULL streams (greeting, READY, a
 * hello request, a PING), streams after the harness's own greeting and
 * READY (multipart messages, an empty delimiter, frames over the limits,
 * reserved flags), raw CURVE greetings and HELLO-sized commands, and
 * records for an authenticated CURVE connection (boxed frames, PINGs,
 * a forged and a replayed MESSAGE).
 * Usage: fuzz_gate_seeds DIR
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proto.h"

typedef struct seed {
    uint8_t b[4096];
    size_t n;
} seed_t;

static void add(seed_t *s, const void *d, size_t n)
{
    if (s->n + n > sizeof s->b)
        n = sizeof s->b - s->n;
    memcpy(s->b + s->n, d, n);
    s->n += n;
}

static void byte(seed_t *s, unsigned v)
{
    uint8_t b = (uint8_t)v;
    add(s, &b, 1);
}

static void frame(seed_t *s, unsigned flags, const void *d, size_t n)
{
    if (n > 255) {
        byte(s, flags | 2);
        for (int i = 7; i >= 0; i--)
            byte(s, (unsigned)((uint64_t)n >> (8 * i)) & 0xff);
    } else {
        byte(s, flags);
        byte(s, (unsigned)n);
    }
    add(s, d, n);
}

static void greeting(seed_t *s, const char *mech)
{
    uint8_t g[64] = { 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 3, 1 };
    memcpy(g + 12, mech, strlen(mech));
    add(s, g, sizeof g);
}

static const char ready[] = "\x05READY\x0bSocket-Type\0\0\0\x06" "DEALER";
static const char ping[] = "\x04PING\x00\x0a" "ctx";

static int put(const char *dir, const char *name, unsigned sel, const seed_t *s)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    fputc((int)sel, f);
    fwrite(s->b, 1, s->n, f);
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int bad = 0;
    wf_buf_t req = { 0 };
    wf_request_t r;
    memset(&r, 0, sizeof r);
    r.version = 1;
    r.id = 7;
    r.op = WF_OP_HELLO;
    if (wf_request_encode(&r, &req) != WF_OK)
        return 1;
    seed_t s;

    /* NULL, the whole stream: greeting, READY, a hello, a PING */
    memset(&s, 0, sizeof s);
    greeting(&s, "NULL");
    frame(&s, 4, ready, sizeof ready - 1);
    frame(&s, 0, req.data, req.len);
    frame(&s, 4, ping, sizeof ping - 1);
    bad |= put(dir, "null_hello", 0x00, &s);
    bad |= put(dir, "null_hello_chunks", 0x38, &s);       /* 8 chunks */

    /* NULL after the harness's READY: a REQ-style message (empty
     * delimiter), a multipart one, one over the frame limit, too many
     * frames, reserved flags */
    memset(&s, 0, sizeof s);
    frame(&s, 1, "", 0);
    frame(&s, 0, req.data, req.len);
    frame(&s, 1, req.data, req.len);
    frame(&s, 1, "a", 1);
    frame(&s, 0, "b", 1);
    bad |= put(dir, "null_ready_messages", 0x04, &s);
    memset(&s, 0, sizeof s);
    uint8_t big[1024];
    memset(big, 'x', sizeof big);
    frame(&s, 1, req.data, req.len);
    frame(&s, 1, big, sizeof big);
    frame(&s, 0, big, 300);
    frame(&s, 0, req.data, req.len);
    bad |= put(dir, "null_ready_over", 0x04, &s);
    bad |= put(dir, "null_ready_over_small", 0x44, &s);   /* limit set 1 */
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 80; i++)
        frame(&s, 1, "f", 1);
    frame(&s, 0, "end", 3);
    bad |= put(dir, "null_ready_frames", 0x84, &s);       /* limit set 2 */
    memset(&s, 0, sizeof s);
    frame(&s, 4, ping, sizeof ping - 1);
    frame(&s, 0x08, "r", 1);
    bad |= put(dir, "null_ready_ping_reserved", 0x04, &s);

    /* CURVE: a raw greeting and HELLO-sized garbage; a HELLO from the
     * harness, then an INITIATE too short */
    memset(&s, 0, sizeof s);
    greeting(&s, "CURVE");
    uint8_t h[200] = { 5, 'H', 'E', 'L', 'L', 'O', 1, 0 };
    frame(&s, 4, h, sizeof h);
    bad |= put(dir, "curve_hello_bad", 0x01, &s);
    memset(&s, 0, sizeof s);
    uint8_t ini[300] = { 8, 'I', 'N', 'I', 'T', 'I', 'A', 'T', 'E' };
    frame(&s, 4, ini, sizeof ini);
    bad |= put(dir, "curve_initiate_bad", 0x05, &s);

    /* CURVE records after a whole handshake: flags, size, body */
    memset(&s, 0, sizeof s);
    byte(&s, 0x00);
    byte(&s, (unsigned)req.len);
    add(&s, req.data, req.len);
    byte(&s, 0x01);                      /* more */
    byte(&s, 0);
    byte(&s, 0x00);
    byte(&s, 3);
    add(&s, "abc", 3);
    byte(&s, 0x02);                      /* a PING inside the box */
    byte(&s, sizeof ping - 1);
    add(&s, ping, sizeof ping - 1);
    byte(&s, 0x11);                      /* 16 x 20 bytes, more */
    byte(&s, 20);
    byte(&s, 0x00);
    byte(&s, 1);
    byte(&s, 'z');
    byte(&s, 0x08);                      /* replayed nonce */
    byte(&s, 1);
    byte(&s, 'r');
    bad |= put(dir, "curve_records", 0x07, &s);
    bad |= put(dir, "curve_records_chunks", 0x27, &s);
    bad |= put(dir, "curve_records_unlisted", 0xc7, &s);
    /* heartbeats (PINGs inside boxes) between messages: not frames of
     * the next message (the gate counted them once) */
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 20; i++) {
        byte(&s, 0x02);
        byte(&s, sizeof ping - 1);
        add(&s, ping, sizeof ping - 1);
    }
    byte(&s, 0x00);
    byte(&s, 3);
    add(&s, "abc", 3);
    bad |= put(dir, "curve_heartbeats", 0x07, &s);
    memset(&s, 0, sizeof s);
    byte(&s, 0x04);                      /* forged (unboxed) MESSAGE */
    byte(&s, 40);
    add(&s, "\x07MESSAGE\0\0\0\0\0\0\0\x09", 16);
    bad |= put(dir, "curve_forged", 0x07, &s);
    wf_buf_free(&req);
    return bad;
}
