/* mp_build.h — a printf-like msgpack writer for tests (test_proto,
 * test_badinput, the fuzz seed generator).
 *
 * Tests need headers that are wrong in precise ways (a float where an int
 * goes, a duplicate key, a count that lies), which a typed encoder cannot
 * produce, so this writes msgpack token by token with msgpack-c's packer.
 * Format characters (spaces ignored):
 *   M<n> map of n entries     A<n> array of n items   (n: decimal, or '*'
 *                                                      to take an int arg)
 *   s const char *   i int   U uint64_t   I int64_t   d double   f double as float32
 *   b int (bool)     n nil   R const void *, size_t (raw bytes, verbatim)
 * Static functions in a header on purpose: each test is one executable and
 * this keeps the helper next to the tests without a library target.
 */
#ifndef WF_TEST_MP_BUILD_H
#define WF_TEST_MP_BUILD_H

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

static int mpb_read_count(const char **fmt, va_list *ap)
{
    if (**fmt == '*') {
        (*fmt)++;
        return va_arg(*ap, int);
    }
    int n = 0;
    while (**fmt >= '0' && **fmt <= '9')
        n = n * 10 + (*(*fmt)++ - '0');
    return n;
}

/* Append tokens to sb. */
static void mpb(msgpack_sbuffer *sb, const char *fmt, ...)
{
    msgpack_packer pk;
    va_list ap;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    va_start(ap, fmt);
    while (*fmt) {
        char c = *fmt++;
        switch (c) {
        case ' ': break;
        case 'M': msgpack_pack_map(&pk, (size_t)mpb_read_count(&fmt, &ap)); break;
        case 'A': msgpack_pack_array(&pk, (size_t)mpb_read_count(&fmt, &ap)); break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            msgpack_pack_str_with_body(&pk, s, strlen(s));
            break;
        }
        case 'i': msgpack_pack_int(&pk, va_arg(ap, int)); break;
        case 'U': msgpack_pack_uint64(&pk, va_arg(ap, uint64_t)); break;
        case 'I': msgpack_pack_int64(&pk, va_arg(ap, int64_t)); break;
        case 'd': msgpack_pack_double(&pk, va_arg(ap, double)); break;
        case 'f': msgpack_pack_float(&pk, (float)va_arg(ap, double)); break;
        case 'b': if (va_arg(ap, int)) msgpack_pack_true(&pk); else msgpack_pack_false(&pk); break;
        case 'n': msgpack_pack_nil(&pk); break;
        case 'R': {
            const void *p = va_arg(ap, const void *);
            size_t n = va_arg(ap, size_t);
            msgpack_sbuffer_write(sb, p, n);
            break;
        }
        default: abort(); /* a typo in a test's format string */
        }
    }
    va_end(ap);
}

/* One tensor descriptor map {name, dtype, shape (rank dims), frame}. */
static void mpb_tensor(msgpack_sbuffer *sb, const char *name, const char *dtype,
                       int rank, const int64_t *shape, int frame)
{
    mpb(sb, "M4 ss ss s A*", "name", name, "dtype", dtype, "shape", rank);
    for (int i = 0; i < rank; i++)
        mpb(sb, "I", shape[i]);
    mpb(sb, "s i", "frame", frame);
}

#endif /* WF_TEST_MP_BUILD_H */
