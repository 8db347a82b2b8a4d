"""test_gate_interop.py — weftd's client gate (daemon/net/gate.c,
gate_curve.c: ZMTP 3.1 and CurveZMQ written in this project) against
stacks that are not libweft's: pyzmq (its wheel bundles its own libzmq
and libsodium) and raw-socket handshakes made here byte for byte from
RFC 23 / 37 (ZMTP) and RFC 26 (CurveZMQ) with the system's libsodium
through ctypes. Two real weftd daemons: one on an anonymous loopback
tcp:// endpoint (NULL), one with key_file and client_keys (CURVE), both
with client_handshake_ms = HANDSHAKE_MS.

The matrix (each row printed with what it showed):
  (a) pyzmq DEALER and REQ, NULL: hello and status requests (msgpack
      bytes as PROTOCOL.md section 10 writes them) get their replies;
  (b) pyzmq DEALER, CURVE, a key listed in client_keys: served;
  (c) pyzmq with a key not listed (libzmq's monitor reports the ERROR
      "400": HANDSHAKE_FAILED_AUTH) and pyzmq pinning another server key:
      refused, no reply;
  (d) pyzmq NULL against the CURVE endpoint, CURVE against the NULL one:
      refused, no reply;
  (e) raw handshakes: the good one, made by the same code, is served
      (proving that what the mutated ones are refused for is the
      mutation); then every command truncated (a shorter command; on
      the wire, a command never finished), reordered (INITIATE before
      HELLO, two HELLOs, READY / ERROR / a message in place of a
      handshake command), replayed (a previous connection's HELLO and
      INITIATE, another live connection's cookie, an INITIATE nonce not
      above HELLO's, INITIATE again after READY, a MESSAGE resent), an
      unboxed PING after READY (every frame after a CURVE handshake is a
      MESSAGE box: the good handshake's boxed PING gets a PONG) and
      bit-flipped (the greeting's signature, version and mechanism; each
      field and box of HELLO and INITIATE; the vouch; a MESSAGE box),
      and the vouch made for another server, for another short-term key,
      by another long-term key, and a client key not in client_keys.
      Each is refused: the connection closed with nothing served (no
      READY, no reply), on receipt (before client_handshake_ms: the close
      is the refusal, not the timer) or, for a command never finished, at
      client_handshake_ms; each handshake refusal moves status's
      handshakes_refused by exactly one and handshakes_admitted by none.
The raw rows run ROUNDS times. Both daemons' RSS (VmRSS) is read before
the matrix and after it: the stated bound is before + RSS_BOUND each.
At the end a libweft client and pyzmq clients are served by both.
Every wait is for an event (a reply, an EOF, a monitor event), bounded.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import zmq
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

import weft
from common import WAIT_EVENT_S, WEFTCTL, Weftd, free_port, wait_for

# client_handshake_ms of both daemons: a refusal on receipt must close the
# connection well before it (a refusal takes microseconds; 4 s leaves the
# loaded 2-core machine under sanitizers three orders of magnitude), and a
# command never finished is closed at it (the wire-truncated rows wait it
# once, all together).
HANDSHAKE_MS = 4000
ROUNDS = 3
# RSS after the matrix within this of before, per daemon: every refused
# connection's memory is given back (one holds about 24 KiB while in its
# handshake); 8 MiB is allocator slack, not growth with the rows.
RSS_BOUND = 8 << 20
WAIT_MS = int(WAIT_EVENT_S * 1000)

# ---------------------------------------------------------------------
# libsodium (the one weftd links), crypto_box as RFC 26 uses it


def _load_sodium() -> ctypes.CDLL:
    for name in ("libsodium.so.23", ctypes.util.find_library("sodium")):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                pass
    raise RuntimeError("libsodium not found (weftd's own dependency, libsodium23)")


SODIUM = _load_sodium()
if SODIUM.sodium_init() < 0:
    raise RuntimeError("sodium_init failed")
MAC = 16


def keypair() -> Tuple[bytes, bytes]:
    pk, sk = ctypes.create_string_buffer(32), ctypes.create_string_buffer(32)
    SODIUM.crypto_box_keypair(pk, sk)
    return pk.raw, sk.raw


def seal(msg: bytes, nonce: bytes, pk: bytes, sk: bytes) -> bytes:
    """Box[msg](sk -> pk)."""
    assert len(nonce) == 24
    out = ctypes.create_string_buffer(len(msg) + MAC)
    if SODIUM.crypto_box_easy(out, msg, ctypes.c_ulonglong(len(msg)), nonce, pk, sk) != 0:
        raise RuntimeError("crypto_box_easy failed")
    return out.raw


def unseal(box: bytes, nonce: bytes, pk: bytes, sk: bytes) -> Optional[bytes]:
    if len(box) < MAC:
        return None
    out = ctypes.create_string_buffer(len(box) - MAC + 1)
    if SODIUM.crypto_box_open_easy(out, box, ctypes.c_ulonglong(len(box)), nonce,
                                   pk, sk) != 0:
        return None
    return out.raw[:len(box) - MAC]


def flip(b: bytes, i: int) -> bytes:
    """b with the low bit of byte i flipped (i < 0 from the end)."""
    a = bytearray(b)
    a[i] ^= 1
    return bytes(a)


# ---------------------------------------------------------------------
# msgpack: the requests as PROTOCOL.md section 10 writes them, and a
# reader for the replies (maps, arrays, str, bin, ints, floats, bools)


def request(op: int, rid: int) -> bytes:
    """{"v": 1, "id": rid, "op": op}; id as a uint 64."""
    return (b"\x83\xa1v\x01\xa2id\xcf" + struct.pack(">Q", rid) +
            b"\xa2op" + bytes([op]))


def unpack(b: bytes) -> Any:
    def one(i: int) -> Tuple[Any, int]:
        t = b[i]
        i += 1
        if t <= 0x7f:
            return t, i
        if t >= 0xe0:
            return t - 256, i
        if 0x80 <= t <= 0x8f:
            return mapn(t & 15, i)
        if 0x90 <= t <= 0x9f:
            return arrn(t & 15, i)
        if 0xa0 <= t <= 0xbf:
            n = t & 31
            return b[i:i + n].decode(), i + n
        if t == 0xc0:
            return None, i
        if t in (0xc2, 0xc3):
            return t == 0xc3, i
        sizes = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q", 0xd0: ">b",
                 0xd1: ">h", 0xd2: ">i", 0xd3: ">q", 0xca: ">f", 0xcb: ">d"}
        if t in sizes:
            f = sizes[t]
            return struct.unpack_from(f, b, i)[0], i + struct.calcsize(f)
        lens = {0xd9: ">B", 0xda: ">H", 0xdb: ">I", 0xc4: ">B", 0xc5: ">H", 0xc6: ">I"}
        if t in lens:
            f = lens[t]
            n = struct.unpack_from(f, b, i)[0]
            i += struct.calcsize(f)
            v = b[i:i + n]
            return (v.decode() if t >= 0xd9 else bytes(v)), i + n
        if t in (0xdc, 0xdd, 0xde, 0xdf):
            f = ">H" if t in (0xdc, 0xde) else ">I"
            n = struct.unpack_from(f, b, i)[0]
            i += struct.calcsize(f)
            return (arrn if t <= 0xdd else mapn)(n, i)
        raise ValueError(f"msgpack type 0x{t:02x} not read here")

    def mapn(n: int, i: int) -> Tuple[Any, int]:
        d = {}
        for _ in range(n):
            k, i = one(i)
            d[k], i = one(i)
        return d, i

    def arrn(n: int, i: int) -> Tuple[Any, int]:
        a = []
        for _ in range(n):
            v, i = one(i)
            a.append(v)
        return a, i

    v, end = one(0)
    if end != len(b):
        raise ValueError("trailing bytes")
    return v


# ---------------------------------------------------------------------
# ZMTP 3.1 on a raw socket


def greeting(mech: bytes) -> bytes:
    """Signature, version 3.1, mechanism, as-server 0, filler."""
    g = bytearray(64)
    g[0], g[9], g[10], g[11] = 0xff, 0x7f, 3, 1
    g[12:12 + len(mech)] = mech
    return bytes(g)


def frame(body: bytes, flags: int = 0x04) -> bytes:
    """One frame (default: a command); long form past 255 bytes."""
    if len(body) > 255:
        return bytes([flags | 0x02]) + struct.pack(">Q", len(body)) + body
    return bytes([flags, len(body)]) + body


def props(value: bytes = b"DEALER", name: bytes = b"Socket-Type") -> bytes:
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def null_ready(value: bytes = b"DEALER", name: bytes = b"Socket-Type") -> bytes:
    return b"\x05READY" + props(value, name)


ERROR_CMD = b"\x05ERROR\x03bad"
PING = b"\x04PING\x00\x00ab"          # TTL 0, context "ab" (RFC 37)


class Raw:
    """A TCP connection to a daemon: bytes out, bytes in until the
    daemon closes; t0 is taken before the connect."""

    def __init__(self, port: int) -> None:
        self.t0 = time.monotonic()
        # a bound on the connect and on every send (a daemon that stops
        # reading fails the row instead of hanging the test)
        self.s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_EVENT_S)
        self.buf = b""
        self.eof = False
        self.greeted = False       # the daemon's greeting taken off buf

    def send(self, b: bytes) -> None:
        try:
            self.s.sendall(b)
        except (BrokenPipeError, ConnectionResetError):
            pass                    # closed by the daemon: until_eof sees it

    def _fill(self, deadline: float) -> None:
        r, _, _ = select.select([self.s], [], [], max(0.0, deadline - time.monotonic()))
        if not r:
            raise TimeoutError("no bytes and no close from the daemon in time")
        try:
            d = self.s.recv(65536)
        except ConnectionResetError:
            d = b""
        if d:
            self.buf += d
        else:
            self.eof = True

    def read(self, n: int) -> Optional[bytes]:
        """n bytes, or None at the close."""
        deadline = time.monotonic() + WAIT_EVENT_S
        while len(self.buf) < n:
            if self.eof:
                return None
            self._fill(deadline)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_greeting(self, mech: bytes) -> None:
        g = self.read(64)
        if g is None or g[0] != 0xff or g[10] != 3 or g[12:12 + len(mech) + 1] != mech + b"\0":
            raise AssertionError(f"not the daemon's {mech!r} greeting: {g!r}")
        self.greeted = True

    def read_frame(self) -> Optional[Tuple[int, bytes]]:
        h = self.read(2)
        if h is None:
            return None
        if h[0] & 2:
            rest = self.read(7)
            if rest is None:
                return None
            size = struct.unpack(">Q", h[1:] + rest)[0]
        else:
            size = h[1]
        body = self.read(size)
        return None if body is None else (h[0], body)

    def until_eof(self, timeout_s: float) -> float:
        """Seconds from the connect to the daemon's close."""
        deadline = time.monotonic() + timeout_s
        while not self.eof:
            self._fill(deadline)
        return time.monotonic() - self.t0

    def frames_left(self) -> List[bytes]:
        """The frames' bodies still in buf (after the greeting)."""
        b = self.buf
        if not self.greeted and len(b) >= 64 and b[0] == 0xff:
            b = b[64:]
        out = []
        while len(b) >= 2:
            if b[0] & 2:
                if len(b) < 9:
                    break
                size, hl = struct.unpack(">Q", b[1:9])[0], 9
            else:
                size, hl = b[1], 2
            if len(b) < hl + size:
                break
            out.append(b[hl:hl + size])
            b = b[hl + size:]
        return out

    def close(self) -> None:
        self.s.close()


class Curve:
    """One CurveZMQ client connection's keys and nonces (RFC 26): server
    key S, long-term C / c, short-term C' / c' (fresh), S' and the cookie
    from WELCOME."""

    def __init__(self, server: bytes, long_term: Tuple[bytes, bytes]) -> None:
        self.S = server
        self.C, self.c = long_term
        self.Cp, self.cp = keypair()
        self.nonce = 1
        self.Sp = b""
        self.cookie = b""

    def n8(self) -> bytes:
        n = struct.pack(">Q", self.nonce)
        self.nonce += 1
        return n

    def hello(self, server: Optional[bytes] = None, version: bytes = b"\x01\x00") -> bytes:
        """"\\x05HELLO", version, 72 bytes of padding, C', nonce,
        Box[64 zero bytes](C' -> S): 200 bytes."""
        n = self.n8()
        box = seal(bytes(64), b"CurveZMQHELLO---" + n, server or self.S, self.cp)
        return b"\x05HELLO" + version + bytes(72) + self.Cp + n + box

    def welcome(self, body: bytes) -> None:
        """"\\x07WELCOME", nonce 16, Box[S' + cookie](S -> C')."""
        if len(body) != 168 or body[:8] != b"\x07WELCOME":
            raise AssertionError(f"not a WELCOME: {body[:16]!r}")
        plain = unseal(body[24:], b"WELCOME-" + body[8:24], self.S, self.cp)
        if plain is None:
            raise AssertionError("WELCOME does not open")
        self.Sp, self.cookie = plain[:32], plain[32:128]

    def initiate(self, cookie: Optional[bytes] = None, meta: Optional[bytes] = None,
                 vouch_plain: Optional[bytes] = None,
                 signer: Optional[Tuple[bytes, bytes]] = None,
                 claimed: Optional[bytes] = None, vouch_flip: Optional[int] = None,
                 nonce: Optional[bytes] = None) -> bytes:
        """"\\x08INITIATE", cookie, nonce, Box[C + vouch nonce + vouch +
        metadata](C' -> S'), the vouch Box[C' + S](C -> S'). The keyword
        arguments make it wrong in one way each."""
        vn = os.urandom(16)
        _, signer_sk = signer or (self.C, self.c)
        vouch = seal(vouch_plain if vouch_plain is not None else self.Cp + self.S,
                     b"VOUCH---" + vn, self.Sp, signer_sk)
        if vouch_flip is not None:
            vouch = flip(vouch, vouch_flip)
        plain = (claimed or self.C) + vn + vouch + (props() if meta is None else meta)
        n = nonce or self.n8()
        box = seal(plain, b"CurveZMQINITIATE" + n, self.Sp, self.cp)
        return b"\x08INITIATE" + (cookie or self.cookie) + n + box

    def ready(self, body: bytes) -> bytes:
        """READY's metadata: "\\x05READY", nonce 8, Box[metadata](S' -> C')."""
        plain = unseal(body[14:], b"CurveZMQREADY---" + body[6:14], self.Sp, self.cp) \
            if body[:6] == b"\x05READY" else None
        if plain is None:
            raise AssertionError(f"not a READY that opens: {body[:16]!r}")
        return plain

    def message(self, data: bytes, flags: int = 0) -> bytes:
        """"\\x07MESSAGE", nonce 8, Box[flags + data](C' -> S'); flags 1
        more, 2 command."""
        n = self.n8()
        box = seal(bytes([flags]) + data, b"CurveZMQMESSAGEC" + n, self.Sp, self.cp)
        return b"\x07MESSAGE" + n + box

    def open_message(self, body: bytes) -> bytes:
        plain = unseal(body[16:], b"CurveZMQMESSAGES" + body[8:16], self.Sp, self.cp) \
            if body[:8] == b"\x07MESSAGE" else None
        if plain is None:
            raise AssertionError(f"not a MESSAGE that opens: {body[:16]!r}")
        return plain


def rss(pid: int) -> int:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m
    return int(m.group(1)) * 1024


class Daemon:
    """A Weftd with a libweft client kept open on it (the well-behaved
    client, and the reader of the handshake counters)."""

    def __init__(self, d: Weftd, port: int, keys: Dict[str, str]) -> None:
        self.d, self.port, self.keys = d, port, keys
        self.ep = f"tcp://127.0.0.1:{port}"
        self.client = weft.connect(self.ep, WAIT_MS, **keys)

    def counts(self) -> Tuple[int, int]:
        c = self.client.status().counters
        assert c.present
        return c.handshakes_refused, c.handshakes_admitted


class GateInterop(unittest.TestCase):
    rows: List[str] = []

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp(prefix="weft-py-interop-"))
        for k in ("daemon", "admin"):
            subprocess.run([WEFTCTL, "keygen", str(cls.tmp / k)], check=True,
                           capture_output=True)

        def z85_of(path: Path, what: str) -> str:
            m = re.search(rf"^{what} = (\S+)", path.read_text(), re.M)
            assert m
            return m.group(1)

        cls.S = z85.decode(z85_of(cls.tmp / "daemon.pub", "public-key"))
        # the listed raw client, the listed pyzmq client, a stranger
        cls.listed = keypair()
        cls.pz_pub, cls.pz_sec = zmq.curve_keypair()
        cls.stranger = keypair()
        (cls.tmp / "clients").write_text(
            f"admin {z85_of(cls.tmp / 'admin.pub', 'public-key')} ops\n"
            f"submit {z85.encode(cls.listed[0]).decode()} raw\n"
            f"submit {cls.pz_pub.decode()} pyzmq\n")
        common = ["--client-handshake-ms", str(HANDSHAKE_MS)]
        pn, pc = free_port(), free_port()
        admin = dict(server_key=str(cls.tmp / "daemon.pub"),
                     client_key_file=str(cls.tmp / "admin"))
        cls.null = Daemon(Weftd("cpu:1", endpoint=f"tcp://127.0.0.1:{pn}", extra=common),
                          pn, {})
        cls.curve = Daemon(Weftd("cpu:1", endpoint=f"tcp://127.0.0.1:{pc}",
                                 extra=common + ["--key-file", str(cls.tmp / "daemon"),
                                                 "--client-keys", str(cls.tmp / "clients")],
                                 ready_keys=admin), pc, admin)
        cls.ctx = zmq.Context()
        cls.rid = 100

    @classmethod
    def tearDownClass(cls) -> None:
        cls.ctx.destroy(linger=0)
        for d in (cls.null, cls.curve):
            d.client.close()
            rc = d.d.stop()
            if rc != 0:
                print(f"weftd exited with {rc}:\n{d.d.log()}", file=sys.stderr)
        shutil.rmtree(cls.tmp, ignore_errors=True)
        print("\nmatrix:\n  " + "\n  ".join(cls.rows))

    def row(self, text: str) -> None:
        if text not in self.rows:
            self.rows.append(text)

    def next_id(self) -> int:
        type(self).rid += 1
        return self.rid

    # -- checks ---------------------------------------------------------

    def check_reply(self, data: bytes, rid: int, op: int) -> Dict[str, Any]:
        h = unpack(data)
        self.assertEqual((h["id"], h["op"], h["status"]), (rid, op, 0), h)
        return h

    def refused(self, d: Daemon, r: Raw, before: Tuple[int, int], at_once: bool = True,
                error400: bool = False, counted: bool = True) -> float:
        """r closed by the daemon with nothing served; d's
        handshakes_refused moved by one (counted), admitted by none.
        Seconds from connect to the close."""
        t = r.until_eof(HANDSHAKE_MS / 1000 + WAIT_EVENT_S)
        r.close()
        frames = r.frames_left()
        for b in frames:
            self.assertFalse(b.startswith(b"\x05READY") or b.startswith(b"\x07MESSAGE"),
                             f"served after a bad handshake: {b[:16]!r}")
        if error400:
            self.assertIn(b"\x05ERROR\x03400", frames)
        if at_once:
            self.assertLess(t * 1000, HANDSHAKE_MS, "closed by the timer, not refused")
        else:
            self.assertGreaterEqual(t * 1000, HANDSHAKE_MS - 100, "closed before its time")
        after = d.counts()
        self.assertEqual(after[0] - before[0], 1 if counted else 0, "handshakes_refused")
        self.assertEqual(after[1], before[1], "handshakes_admitted")
        return t

    # -- raw CURVE ------------------------------------------------------

    def curve_open(self, key: Optional[Tuple[bytes, bytes]] = None) -> Tuple[Raw, Curve]:
        r = Raw(self.curve.port)
        r.send(greeting(b"CURVE"))
        r.read_greeting(b"CURVE")
        return r, Curve(self.S, key or self.listed)

    def curve_welcomed(self, key: Optional[Tuple[bytes, bytes]] = None) -> Tuple[Raw, Curve]:
        r, cv = self.curve_open(key)
        r.send(frame(cv.hello()))
        f = r.read_frame()
        assert f is not None, "closed after a good HELLO"
        cv.welcome(f[1])
        return r, cv

    def curve_ready(self, r: Raw, cv: Curve, initiate: Optional[bytes] = None) -> bytes:
        """Send INITIATE, take READY; the INITIATE sent."""
        cmd = initiate or cv.initiate()
        r.send(frame(cmd))
        f = r.read_frame()
        assert f is not None, "closed after a good INITIATE"
        meta = cv.ready(f[1])
        self.assertIn(b"Socket-Type\x00\x00\x00\x06ROUTER", meta)
        return cmd

    def curve_served(self, r: Raw, cv: Curve) -> bytes:
        """A hello request in a MESSAGE, its reply; the MESSAGE sent."""
        rid = self.next_id()
        msg = cv.message(request(1, rid))
        r.send(frame(msg, 0))
        f = r.read_frame()
        assert f is not None, "closed instead of a reply"
        plain = cv.open_message(f[1])
        self.assertEqual(plain[0], 0)            # one frame: no "more"
        self.check_reply(plain[1:], rid, 1)
        return msg

    def good_curve(self) -> Tuple[bytes, bytes]:
        """A whole raw handshake and a request served; its HELLO and
        INITIATE (for the replay rows)."""
        before = self.curve.counts()
        r, cv = self.curve_open()
        hello = cv.hello()
        r.send(frame(hello))
        f = r.read_frame()
        assert f is not None
        cv.welcome(f[1])
        init = self.curve_ready(r, cv)
        self.curve_served(r, cv)
        # a command in a box (libzmq's heartbeat): PING gets a boxed PONG
        r.send(frame(cv.message(PING, flags=2), 0))
        f = r.read_frame()
        assert f is not None, "closed instead of a PONG"
        self.assertEqual(cv.open_message(f[1]), b"\x02\x04PONG" + PING[7:])
        r.close()
        after = self.curve.counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (0, 1))
        return hello, init

    def curve_rows(self) -> None:
        """Every on-receipt refusal of the CURVE endpoint, each beside the
        good handshake it mutates."""
        S, cd = self.S, self.curve
        hello0, init0 = self.good_curve()
        self.row("raw CURVE, the good handshake (the same code as every row below): "
                 "hello served, a boxed PING answered with a boxed PONG, "
                 "handshakes_admitted +1")

        def case(name: str, **kw: Any) -> Any:
            return self.subTest(row=name, **kw)

        # the greeting, bit-flipped: signature, version, mechanism
        for i in (0, 9, 10, 12, 16):
            with case("greeting bit-flipped", byte=i):
                before = cd.counts()
                r = Raw(cd.port)
                r.send(flip(greeting(b"CURVE"), i))
                self.refused(cd, r, before)
        self.row("CURVE greeting bit-flipped (signature 0 / 9, major version 10, "
                 "mechanism 12 / 16): refused on receipt")
        # HELLO: truncated, bit-flipped (name, version, C', nonce, box), for
        # another server, version 2.0
        for i in (1, 6, 7, 80, 111, 119, 120, 160, 199):
            with case("HELLO bit-flipped", byte=i):
                before = cd.counts()
                r, cv = self.curve_open()
                r.send(frame(flip(cv.hello(), i)))
                self.refused(cd, r, before)
        self.row("HELLO bit-flipped (name 1, version 6 / 7, C' 80 / 111, nonce 119, "
                 "box 120 / 160 / 199): refused on receipt")
        for name, make in (("HELLO truncated (199 bytes)", lambda cv: cv.hello()[:-1]),
                           ("HELLO with 1 byte more (201)", lambda cv: cv.hello() + b"\0"),
                           ("HELLO for another server key",
                            lambda cv: cv.hello(server=keypair()[0])),
                           ("HELLO version 2.0", lambda cv: cv.hello(version=b"\x02\x00"))):
            with case(name):
                before = cd.counts()
                r, cv = self.curve_open()
                r.send(frame(make(cv)))
                self.refused(cd, r, before)
            self.row(f"{name}: refused on receipt")
        # reordered: INITIATE / READY / ERROR / a message in HELLO's place
        r0, cv0 = self.curve_welcomed()          # a live connection's cookie
        for name, make in (("INITIATE before HELLO (another connection's cookie)",
                            lambda cv: frame(self.mirror(cv, cv0).initiate())),
                           ("READY in place of HELLO", lambda cv: frame(null_ready())),
                           ("ERROR in place of HELLO", lambda cv: frame(ERROR_CMD)),
                           ("a message in place of HELLO",
                            lambda cv: frame(request(1, 1), 0))):
            with case(name):
                before = cd.counts()
                r, cv = self.curve_open()
                r.send(make(cv))
                self.refused(cd, r, before)
            self.row(f"{name}: refused on receipt")
        # the WELCOME-reply path: what comes after WELCOME instead of a
        # good INITIATE
        def initiate_rows() -> List[Tuple[str, Any, bool]]:
            other_S = keypair()[0]
            other_long = keypair()
            return [
                ("a second HELLO after WELCOME", lambda r, cv: cv.hello(), False),
                ("READY after WELCOME", lambda r, cv: null_ready(), False),
                ("ERROR after WELCOME", lambda r, cv: ERROR_CMD, False),
                ("INITIATE truncated (last byte)", lambda r, cv: cv.initiate()[:-1], False),
                ("INITIATE truncated below its minimum (256 bytes)",
                 lambda r, cv: cv.initiate(meta=b"")[:256], False),
                ("INITIATE with another connection's cookie",
                 lambda r, cv: cv.initiate(cookie=cv0.cookie), False),
                ("INITIATE of a previous connection", lambda r, cv: init0, False),
                ("INITIATE nonce equal to HELLO's (replayed nonce)",
                 lambda r, cv: cv.initiate(nonce=struct.pack(">Q", 1)), False),
                ("vouch made for another server",
                 lambda r, cv: cv.initiate(vouch_plain=cv.Cp + other_S), False),
                ("vouch made for another short-term key",
                 lambda r, cv: cv.initiate(vouch_plain=keypair()[0] + cv.S), False),
                ("vouch made by another long-term key (the listed key claimed)",
                 lambda r, cv: cv.initiate(signer=other_long), False),
                ("vouch box bit-flipped (first byte)",
                 lambda r, cv: cv.initiate(vouch_flip=0), False),
                ("vouch box bit-flipped (last byte)",
                 lambda r, cv: cv.initiate(vouch_flip=-1), False),
                ("no metadata (no Socket-Type)", lambda r, cv: cv.initiate(meta=b""), False),
                ("Socket-Type PUB", lambda r, cv: cv.initiate(meta=props(b"PUB")), False),
                ("a client key not in client_keys (a good vouch)",
                 lambda r, cv: cv.initiate(), True),
            ]

        for name, make, stranger in initiate_rows():
            with case(name):
                before = cd.counts()
                r, cv = self.curve_welcomed(self.stranger if stranger else None)
                r.send(frame(make(r, cv)))
                self.refused(cd, r, before, error400=stranger)
            self.row(f"{name}: refused on receipt" +
                     (" (ERROR \"400\", then closed)" if stranger else ""))
        # INITIATE bit-flipped: name, cookie nonce, cookie box, nonce, box
        for i in (1, 9, 24, 25, 60, 104, 105, 112, 113, 200, -1):
            with case("INITIATE bit-flipped", byte=i):
                before = cd.counts()
                r, cv = self.curve_welcomed()
                r.send(frame(flip(cv.initiate(), i)))
                self.refused(cd, r, before)
        self.row("INITIATE bit-flipped (name 1, cookie nonce 9 / 24, cookie box 25 / 60 / "
                 "104, nonce 105 / 112, box 113 / 200 / last): refused on receipt")
        # replayed: the previous connection's HELLO (accepted: RFC 26 has no
        # HELLO replay protection, the WELCOME is for C' whose secret the
        # replayer lacks), then its INITIATE
        with case("HELLO and INITIATE of a previous connection"):
            before = cd.counts()
            r = Raw(cd.port)
            r.send(greeting(b"CURVE"))
            r.read_greeting(b"CURVE")
            r.send(frame(hello0))
            f = r.read_frame()
            self.assertTrue(f is not None and f[1][:8] == b"\x07WELCOME")
            r.send(frame(init0))
            self.refused(cd, r, before)
        self.row("HELLO + INITIATE replayed from a previous connection: WELCOME "
                 "(to the old C'), then refused at INITIATE")
        # the connection whose cookie the rows above borrowed: still good
        with case("the cookie's own connection"):
            self.curve_ready(r0, cv0)
            self.curve_served(r0, cv0)
            r0.close()
        # after READY: INITIATE again, a MESSAGE bit-flipped, a MESSAGE
        # resent. Closed, nothing served twice; not handshake refusals.
        for name in ("INITIATE again after READY", "PING not boxed after READY",
                     "MESSAGE box bit-flipped",
                     "MESSAGE nonce bit-flipped", "MESSAGE replayed"):
            with case(name):
                before = cd.counts()
                r, cv = self.curve_welcomed()
                init = self.curve_ready(r, cv)
                if name.startswith("INITIATE"):
                    r.send(frame(init))
                elif name.startswith("PING"):
                    r.send(frame(PING))
                elif name == "MESSAGE replayed":
                    msg = self.curve_served(r, cv)
                    r.send(frame(msg, 0))
                else:
                    msg = cv.message(request(1, self.next_id()))
                    r.send(frame(flip(msg, 20 if "box" in name else 15), 0))
                after_ready = cd.counts()
                self.assertEqual(after_ready[1] - before[1], 1)
                self.refused(cd, r, after_ready, counted=False)
            self.row(f"{name}: connection closed on receipt, nothing (more) served "
                     "(no reply, no PONG)")

    @staticmethod
    def mirror(cv: Curve, other: Curve) -> Curve:
        """cv with another connection's S' and cookie (an INITIATE made
        for a WELCOME this connection never got)."""
        cv.Sp, cv.cookie = other.Sp, other.cookie
        return cv

    # -- raw NULL -------------------------------------------------------

    def null_rows(self) -> None:
        nd = self.null

        def case(name: str, **kw: Any) -> Any:
            return self.subTest(row=name, **kw)

        with case("raw NULL, the good handshake"):
            before = nd.counts()
            r = Raw(nd.port)
            r.send(greeting(b"NULL") + frame(null_ready()))
            r.read_greeting(b"NULL")
            f = r.read_frame()
            self.assertTrue(f is not None and f[1].startswith(b"\x05READY"))
            rid = self.next_id()
            r.send(frame(request(1, rid), 0))
            f = r.read_frame()
            assert f is not None
            self.check_reply(f[1], rid, 1)
            r.close()
            self.assertEqual(nd.counts(), before)
        self.row("raw NULL, the good handshake (greeting + READY DEALER): served")
        for name, data in (
                ("NULL greeting bit-flipped (mechanism)", flip(greeting(b"NULL"), 15)),
                ("NULL greeting bit-flipped (signature)", flip(greeting(b"NULL"), 0)),
                ("NULL greeting bit-flipped (major version)", flip(greeting(b"NULL"), 10)),
                ("READY truncated", frame(null_ready()[:-1])),
                ("READY name bit-flipped (Socket-Typd)", frame(flip(null_ready(), 17))),
                ("READY value bit-flipped (DEALES)", frame(flip(null_ready(), -1))),
                ("READY of a PUB socket", frame(null_ready(b"PUB"))),
                ("ERROR in place of READY", frame(ERROR_CMD)),
                ("CURVE HELLO in place of READY",
                 frame(Curve(self.S, self.listed).hello())),
                ("a message before READY", frame(request(1, 1), 0))):
            with case(name):
                before = nd.counts()
                r = Raw(nd.port)
                r.send(data if name.startswith("NULL greeting")
                       else greeting(b"NULL") + data)
                self.refused(nd, r, before)
            self.row(f"{name}: refused on receipt")

    # -- the wire-truncated: closed at client_handshake_ms --------------

    def truncated_on_wire(self) -> None:
        cd, nd = self.curve, self.null
        welcomed = self.curve_welcomed()
        init = welcomed[1].initiate()
        b_c, b_n = cd.counts(), nd.counts()
        conns = [(cd, Raw(cd.port), greeting(b"CURVE")[:10], "CURVE greeting, 10 bytes"),
                 (cd, Raw(cd.port), greeting(b"CURVE")[:63], "CURVE greeting, 63 bytes"),
                 (cd, Raw(cd.port), greeting(b"CURVE"), "CURVE greeting, then nothing"),
                 (cd, Raw(cd.port), greeting(b"CURVE") + frame(
                     Curve(self.S, self.listed).hello())[:100], "HELLO, 98 of 200 bytes"),
                 (nd, Raw(nd.port), greeting(b"NULL")[:30], "NULL greeting, 30 bytes"),
                 (nd, Raw(nd.port), greeting(b"NULL") + frame(null_ready())[:12],
                  "NULL READY, 10 of 28 bytes")]
        # and INITIATE cut short on a connection that got its WELCOME
        # (its connect was earlier: its close is waited for on its own)
        r_i, _ = welcomed
        r_i.send(frame(init)[:150])
        for _, r, data, _ in conns:
            r.send(data)
        t = r_i.until_eof(HANDSHAKE_MS / 1000 + WAIT_EVENT_S)
        self.assertGreaterEqual(t * 1000, HANDSHAKE_MS - 100)
        self.assertFalse(any(f.startswith(b"\x05READY") for f in r_i.frames_left()))
        r_i.close()
        for d, r, _, name in conns:
            with self.subTest(row=name):
                t = r.until_eof(HANDSHAKE_MS / 1000 + WAIT_EVENT_S)
                self.assertGreaterEqual(t * 1000, HANDSHAKE_MS - 100)
                self.assertFalse(any(f.startswith(b"\x05READY") for f in r.frames_left()))
                r.close()
        a_c, a_n = cd.counts(), nd.counts()
        self.assertEqual((a_c[0] - b_c[0], a_c[1] - b_c[1]), (5, 0))
        self.assertEqual((a_n[0] - b_n[0], a_n[1] - b_n[1]), (2, 0))
        self.row(f"on the wire, never finished ({', '.join(c[3] for c in conns)}, "
                 f"INITIATE, 150 of {len(frame(init))} bytes): each closed at client_handshake_ms "
                 f"({HANDSHAKE_MS} ms), nothing served, refused counted")

    # -- pyzmq ----------------------------------------------------------

    def zsock(self, ep: str, kind: int = zmq.DEALER,
              curve: Optional[Tuple[bytes, bytes, bytes]] = None) -> Tuple[Any, Any]:
        s = self.ctx.socket(kind)
        s.linger = 0
        # a send or a receive that cannot complete (a connection that went
        # and is not tried again) raises zmq.Again instead of blocking
        s.sndtimeo = s.rcvtimeo = WAIT_MS
        s.setsockopt(zmq.RECONNECT_IVL, -1)      # one connection: counts exact
        if curve:
            s.curve_serverkey, s.curve_publickey, s.curve_secretkey = curve
        mon = s.get_monitor_socket()
        s.connect(ep)
        return s, mon

    @staticmethod
    def zclose(s: Any, mon: Any) -> None:
        """The monitor's inproc endpoint (named after the socket's fd)
        released before the socket: the next socket may get that fd."""
        s.disable_monitor()
        mon.close()
        s.close()

    def wait_events(self, mon: Any, wanted: int) -> List[int]:
        """Monitor events until one in the mask `wanted`; all seen."""
        seen = []
        deadline = time.monotonic() + WAIT_EVENT_S
        while True:
            left = int((deadline - time.monotonic()) * 1000)
            self.assertTrue(left > 0 and mon.poll(left), f"no event {wanted:#x}; saw {seen}")
            ev = recv_monitor_message(mon)
            seen.append(ev["event"])
            if ev["event"] & wanted:
                return seen

    def zserved(self, s: Any, op: int = 1) -> Dict[str, Any]:
        rid = self.next_id()
        s.send(request(op, rid))
        self.assertTrue(s.poll(WAIT_MS), "no reply")
        return self.check_reply(s.recv(), rid, op)

    def pyzmq_good(self) -> None:
        s, mon = self.zsock(self.null.ep)
        h = self.zserved(s)
        self.assertIn("limits", h["result"])
        self.assertIn("counters", self.zserved(s, 2)["result"])
        self.zclose(s, mon)
        s, mon = self.zsock(self.null.ep, zmq.REQ)
        rid = self.next_id()
        s.send(request(1, rid))
        self.assertTrue(s.poll(WAIT_MS))
        self.check_reply(s.recv(), rid, 1)
        self.zclose(s, mon)
        before = self.curve.counts()
        s, mon = self.zsock(self.curve.ep, curve=(z85.encode(self.S), self.pz_pub,
                                                  self.pz_sec))
        self.zserved(s)
        self.zclose(s, mon)
        after = self.curve.counts()
        self.assertEqual((after[0] - before[0], after[1] - before[1]), (0, 1))

    def pyzmq_refused(self, d: Daemon, ep: str, curve: Any, wanted: int,
                      counted: bool = True) -> List[int]:
        before = d.counts()
        s, mon = self.zsock(ep, curve=curve)
        try:
            s.send(request(1, self.next_id()), zmq.NOBLOCK)
        except zmq.Again:
            pass    # refused already: the connection, not tried again, is gone
        seen = self.wait_events(mon, wanted)
        self.assertNotIn(zmq.EVENT_HANDSHAKE_SUCCEEDED, seen)
        # no reconnect (RECONNECT_IVL -1): no reply can come any more
        self.assertEqual(s.poll(0), 0)
        self.zclose(s, mon)
        if counted:
            # the refusal is counted as the daemon ends the handshake, which
            # the client may see first
            self.assertTrue(wait_for(lambda: d.counts()[0] - before[0] >= 1),
                            "handshakes_refused never counted")
        after = d.counts()
        if counted:
            self.assertEqual(after[0] - before[0], 1, "handshakes_refused")
        self.assertEqual(after[1], before[1], "handshakes_admitted")
        return seen

    # -- the test -------------------------------------------------------

    def test_matrix(self) -> None:
        t0 = time.monotonic()
        cd, nd = self.curve, self.null
        self.pyzmq_good()                        # warm: both stacks have run once
        self.row(f"(a) pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}) DEALER and "
                 "REQ, NULL: hello and status served")
        self.row("(b) pyzmq DEALER, CURVE, a listed key: served, handshakes_admitted +1")
        rss0 = {"NULL": rss(nd.d.proc.pid), "CURVE": rss(cd.d.proc.pid)}
        # (c) a key not listed; another server key pinned
        seen = self.pyzmq_refused(cd, cd.ep, (z85.encode(self.S), *zmq.curve_keypair()),
                                  zmq.EVENT_HANDSHAKE_FAILED_AUTH)
        self.row(f"(c) pyzmq, a key not in client_keys: refused (monitor: {seen}: "
                 "HANDSHAKE_FAILED_AUTH, the ERROR \"400\"), no reply, refused +1")
        seen = self.pyzmq_refused(cd, cd.ep, (z85.encode(keypair()[0]), *zmq.curve_keypair()),
                                  zmq.EVENT_DISCONNECTED)
        self.row(f"(c) pyzmq pinning another server key: refused (monitor {seen}), "
                 "no reply, refused +1")
        # (d) mechanism mismatches: libzmq may hang up first (a clean close
        # in the greeting is not counted), so only the handshake's failure
        # and the silence are required
        mism = zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
        seen = self.pyzmq_refused(cd, cd.ep, None, mism, counted=False)
        self.row(f"(d) pyzmq NULL against the CURVE endpoint: refused (monitor {seen}), "
                 "no reply")
        seen = self.pyzmq_refused(nd, nd.ep, (z85.encode(self.S), *zmq.curve_keypair()),
                                  mism, counted=False)
        self.row(f"(d) pyzmq CURVE against the NULL endpoint: refused (monitor {seen}), "
                 "no reply")
        # (e) raw handshakes
        for i in range(ROUNDS):
            self.curve_rows()
            self.null_rows()
        self.truncated_on_wire()
        rss1 = {"NULL": rss(nd.d.proc.pid), "CURVE": rss(cd.d.proc.pid)}
        # well-behaved clients at the end: libweft and pyzmq on both
        for d in (nd, cd):
            self.assertGreaterEqual(d.client.hello().devices, 1)
        self.pyzmq_good()
        self.row("at the end: libweft (hello, status) and pyzmq (NULL DEALER / REQ, "
                 "CURVE DEALER) served by both daemons")
        for k in rss0:
            self.row(f"RSS {k} daemon: before {rss0[k] / 2**20:.1f} MiB, after "
                     f"{rss1[k] / 2**20:.1f} MiB (bound: before + "
                     f"{RSS_BOUND / 2**20:.0f} MiB)")
            self.assertLessEqual(rss1[k], rss0[k] + RSS_BOUND, k)
        self.row(f"refused / admitted: CURVE {cd.counts()}, NULL {nd.counts()}; "
                 f"{ROUNDS} rounds of the raw rows; {time.monotonic() - t0:.1f} s")
        for d in (nd, cd):
            self.assertIsNone(d.d.proc.poll(), d.d.log())


if __name__ == "__main__":
    # every thread's stack on stderr, and the test failed, if it ever runs
    # past ctest's TIMEOUT for it (600 s, tests/python/python.cmake) less a
    # margin: a wait without a bound shows where it is instead of a bare
    # timeout
    faulthandler.dump_traceback_later(540, exit=True)
    t0 = time.monotonic()
    prog = unittest.main(exit=False, verbosity=2)
    print(f"test_gate_interop: {time.monotonic() - t0:.1f} s")
    sys.exit(0 if prog.result.wasSuccessful() else 1)
