"""common.py — what the Python tests share: real weftd daemons started
here (the binary ctest names in $WEFTD), the daemon's job hold
(WEFT_TEST_HOLD_JOBS), waiting for an event, and a float64 attention
reference.

Environment (tests/python.cmake sets it): WEFTD, WEFTCTL (the binaries),
WEFT_LIB (libweft.so), WEFT_INCLUDE (include/), WEFT_SOURCE (the
repository), PYTHONPATH (client/python/src).
"""
from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

import weft

WEFTD = os.environ.get("WEFTD", "")
WEFTCTL = os.environ.get("WEFTCTL", "")
SOURCE = Path(os.environ.get("WEFT_SOURCE", Path(__file__).resolve().parents[2]))
FIXTURES = SOURCE / "tests" / "fixtures"


# Bound on an event a correct daemon brings about on its own (a reply, a
# status change): a minute, far above what a loaded 2-core machine under
# sanitizers takes, so reaching it means the event is lost.
WAIT_EVENT_S = 60.0


def wait_for(cond: Callable[[], bool], timeout_s: float = WAIT_EVENT_S) -> bool:
    """Poll cond() until it is true (True) or timeout_s passes (False,
    after one last poll): at once, then every 1 ms growing to 20 ms. A
    failure bound, never a window the machine must be fast enough for."""
    end = time.monotonic() + timeout_s
    step = 0.001
    while True:
        if cond():
            return True
        if time.monotonic() >= end:
            return cond()
        time.sleep(step)
        step = min(step * 2, 0.02)


class JobHold:
    """The daemon's test hook WEFT_TEST_HOLD_JOBS: a FIFO made here. A
    daemon started with `env` in its environment makes every job part
    wait at its start (busy in status) for one byte from it, so that a
    test makes "a job is running" or "the queue is full" happen however
    fast the machine. release(n) lets n parts run; open_gate(devices)
    lets every part run from then on (one 'a' per device that may be
    waiting)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="weft-py-hold-")
        self.path = os.path.join(self.dir, "fifo")
        os.mkfifo(self.path, 0o600)
        # read and write: the open waits for no reader, a write never
        # fails for want of one
        self.fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self.env = {"WEFT_TEST_HOLD_JOBS": self.path}

    def release(self, parts: int) -> None:
        os.write(self.fd, b"1" * parts)

    def open_gate(self, devices: int) -> None:
        os.write(self.fd, b"a" * devices)

    def close(self) -> None:
        os.close(self.fd)
        shutil.rmtree(self.dir, ignore_errors=True)


PORT_DIR = Path("/tmp/weft-test-ports")
PORT_SPAN = 8192
_port_locks: List[object] = []     # held until this process exits


def _port_span_start() -> int:
    try:
        lo, hi = (int(v) for v in
                  Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    if lo - PORT_SPAN >= 10000:
        return lo - PORT_SPAN
    if hi + PORT_SPAN <= 65535:
        return hi + 1
    return 10000


def free_port() -> int:
    """A loopback TCP port reserved for this test: outside the kernel's
    ephemeral range (which every bind to port 0 and every outgoing
    connection on the machine draws from), locked against the other tests
    by an flock on /tmp/weft-test-ports/<port> that this process holds
    until it exits, and not listened on now. The C tests take the same
    locks (tests/support/ports.c)."""
    PORT_DIR.mkdir(mode=0o1777, exist_ok=True)
    start = _port_span_start()
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(PORT_SPAN):
        port = start + rng.randrange(PORT_SPAN)
        f = open(PORT_DIR / str(port), "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                f.close()
                continue
        _port_locks.append(f)
        return port
    raise RuntimeError(f"no free port in {start}..{start + PORT_SPAN - 1}")


class Weftd:
    """A weftd process with its own folder (socket, log). Ready when its
    hello answers (no sleeps: each hello waits up to 1 s for the reply,
    and the process is checked between tries); ready_keys: the CURVE
    keys of that hello (Client's server_key / client_key_file); env:
    variables added to the daemon's environment (JobHold.env)."""

    def __init__(self, devices: str = "cpu:4", mesh: Optional[str] = None,
                 model_root: Optional[Path] = None, extra: Sequence[str] = (),
                 endpoint: Optional[str] = None, start_timeout_s: float = WAIT_EVENT_S,
                 ready_keys: Optional[Dict[str, str]] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
        if not WEFTD:
            raise RuntimeError("WEFTD is not set (tests/python.cmake sets it)")
        self.dir = Path(tempfile.mkdtemp(prefix="weft-py-"))
        self.endpoint = endpoint or f"ipc://{self.dir}/weftd.sock"
        cmd: List[str] = [WEFTD, "--devices", devices, "--listen", self.endpoint,
                          "--log-level", "warning"]
        if mesh:
            cmd += ["--mesh", mesh]
        if model_root is not None:
            cmd += ["--model-root", str(model_root)]
        cmd += list(extra)
        self.log_path = self.dir / "weftd.log"
        self._log = open(self.log_path, "wb")
        penv = dict(os.environ)
        penv.pop("WEFT_ENDPOINT", None)
        penv.update(env or {})
        self._terminated = False
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=penv)
        self.wait_ready(start_timeout_s, **(ready_keys or {}))

    def wait_ready(self, timeout_s: float, **keys: str) -> None:
        end = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weftd exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with weft.connect(self.endpoint, 1000, **keys) as c:
                    c.hello()
                return
            except weft.ReplyTimeoutError:
                if time.monotonic() > end:
                    raise RuntimeError(f"weftd did not answer within {timeout_s} s:\n"
                                       f"{self.log()}")

    def connect(self, timeout_ms: int = int(WAIT_EVENT_S * 1000), **keys: str) -> weft.Client:
        return weft.connect(self.endpoint, timeout_ms, **keys)

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def terminate(self) -> None:
        """SIGTERM once (a second one would not wait for the drain)."""
        if not self._terminated and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self._terminated = True

    def stop(self, timeout_s: float = WAIT_EVENT_S) -> int:
        """SIGTERM, wait; the exit status (0 for a clean drain)."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        rc = int(self.proc.returncode)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                  scale: Optional[float] = None) -> tuple:
    """Attention in float64: out (B, Sq, Hq, D) and lse (B, Sq, Hq) (natural
    log of the softmax denominator, of the scaled scores); K/V heads
    shared by Hq / Hkv query heads (GQA)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, Sq, Hq, D = q.shape
    Hkv = k.shape[2]
    rep = Hq // Hkv
    k = np.repeat(k, rep, axis=2)
    v = np.repeat(v, rep, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * (scale if scale else 1.0 / np.sqrt(D))
    if causal:
        Skv = k.shape[1]
        mask = np.arange(Skv)[None, :] > np.arange(Sq)[:, None]
        s = np.where(mask[None, None], -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    den = p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", p / den, v)
    lse = (np.log(den) + m)[..., 0].transpose(0, 2, 1)
    return out, lse
