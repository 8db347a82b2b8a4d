/* ports.h — loopback TCP ports for a test's daemons, free of collisions
 * with the other tests running beside it.
 *
 * Picking a port by binding to 0 and closing is racy twice over: the
 * kernel hands the same ephemeral range to every bind(0) and connect()
 * on the machine, so another test (or its daemon's outgoing connection)
 * can take the port before our daemon binds it, and our client then
 * reaches somebody else's daemon. Instead a port is taken from outside
 * the kernel's ephemeral range (net.ipv4.ip_local_port_range), which
 * nothing hands out on its own, and reserved among tests by an flock on
 * /tmp/weft-test-ports/<port>: the lock is held until the test process
 * exits (the kernel drops it then, even on a crash), and a port someone
 * listens on now is skipped. tests/python/common.py's free_port() takes
 * the same locks, so C and Python tests share the reservations. */
#ifndef WF_TEST_PORTS_H
#define WF_TEST_PORTS_H

/* A reserved loopback port; exits the test with a message when none of
 * the candidates is free. */
int test_port(void);

#endif
