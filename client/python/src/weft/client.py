"""client.py — a connection to weftd through libweft: every call of
include/weft.h as a method, results as dataclasses, errors as the
exceptions of weft.errors.

A Client is one libweft connection. libweft wants one thread at a time on
a connection: each Client holds a lock around its calls, so sharing one
between threads is safe but serialises them; open one per thread for
parallel calls. Calls that wait (hello, attention, forward, load_model,
Job.wait, ...) release the GIL while libweft waits.

Tensors are borrowed, never copied on the send path (weft._tensors): a
Job keeps its inputs and outputs alive until it is closed.
"""
from __future__ import annotations

import ctypes
import os
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar, Union

from . import _lib
from . import _tensors as T
from .errors import BadArgumentError, WeftError, error_for, raise_for

lib = _lib.lib

# ---- results -------------------------------------------------------------


@dataclass(frozen=True)
class HelloInfo:
    """What the daemon says of itself in the hello handshake."""
    protocol: int
    weft_version: str
    backend: str            # "cpu" or "cuda"
    devices: int
    max_header_bytes: int
    max_tensor_bytes: int
    max_tensors: int


@dataclass(frozen=True)
class Mesh:
    """Degrees of the parallel mesh (their product is the device count);
    ranks are laid out row-major (dp, ring, ulysses, tp), tp innermost."""
    dp: int = 1
    ring: int = 1
    ulysses: int = 1
    tp: int = 1


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str               # "cpu:0", "cuda:1"
    memory_total: int
    memory_used: int
    jobs_served: int
    busy: bool
    rank: int
    coords: Tuple[int, int, int, int]   # dp, ring, ulysses, tp


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str
    first_rank: int
    ranks: int


@dataclass(frozen=True)
class OpCounters:
    op: str
    served: int
    failed: int
    p50_us: int
    p99_us: int
    max_us: int


@dataclass(frozen=True)
class Counters:
    """Operators' counters since the daemon started (present False when the
    daemon sent none). refused / failed map a status code to its count."""
    present: bool
    refused: Dict[int, int]
    failed: Dict[int, int]
    ops: List[OpCounters]
    reconfigurations: int
    reconfigurations_failed: int
    reconfigure_ms: int
    nodes_lost: int
    handshakes_refused: int
    handshakes_admitted: int


@dataclass(frozen=True)
class StatusInfo:
    """The daemon's status (weft.h wf_status_info_t)."""
    weft_version: str
    backend: str
    epoch: int
    uptime_ms: int
    queue_depth: int
    queue_capacity: int
    in_flight: int
    jobs_served: int
    jobs_failed: int
    requests_rejected: int
    rss_bytes: int
    mesh: Mesh
    reconfiguring: bool
    devices: List[DeviceInfo]
    role: str
    coordinator: str
    cluster_state: str
    world_epoch: int
    world_size: int
    world_id: str
    nodes: List[NodeInfo]
    counters: Counters


@dataclass(frozen=True)
class JobResult:
    """How a finished job ran: the mesh epoch, its time queued and on the
    devices (microseconds), how many devices it used."""
    epoch: int
    queue_us: int
    compute_us: int
    devices: int


@dataclass(frozen=True)
class AttentionOutput:
    """An attention job's outputs: out (B, Sq, Hq, D), lse (B, Sq, Hq)
    float32 or None, and how it ran."""
    out: Any
    lse: Any
    result: JobResult


@dataclass(frozen=True)
class ForwardOutput:
    """A forward job's output (B, S_img, patch^2 * out_channels) and how
    it ran."""
    output: Any
    result: JobResult


@dataclass(frozen=True)
class ModelInfo:
    """A resident (or loading) model as the daemon reports it."""
    name: str
    path: str
    family: str
    state: str              # "loading", "installing", "ready", "unloading"
    dtype: str
    params: int
    bytes_total: int
    bytes_loaded: int
    host_bytes: int
    rank_bytes: int
    tp: int
    sharded_input: bool
    load_ms: int
    device: str
    compute: str
    host_pinned: bool
    nodes: str = ""         # a cluster coordinator's: "NODE:FIRST-LAST,..." holding it
    # its architecture as the daemon read it (config.json, diffusers' names);
    # None while loading and from daemons before weft 0.4
    config: Optional[Dict[str, Any]] = None


def _s(b: bytes) -> str:
    return _lib.cstr(b)


def _job_result(r: _lib.wf_job_result_t) -> JobResult:
    return JobResult(int(r.epoch), int(r.queue_us), int(r.compute_us), int(r.devices))


def _model_info(m: _lib.wf_model_info_t) -> ModelInfo:
    return ModelInfo(_s(m.name), _s(m.path), _s(m.family), _s(m.state), _s(m.dtype),
                     int(m.params), int(m.bytes_total), int(m.bytes_loaded),
                     int(m.host_bytes), int(m.rank_bytes), int(m.tp),
                     bool(m.sharded_input), int(m.load_ms), _s(m.device), _s(m.compute),
                     bool(m.host_pinned), _s(m.nodes), _model_config(m.config))


_CONFIG_UINTS = ("patch_size", "in_channels", "out_channels", "num_layers",
                 "num_single_layers", "attention_head_dim", "num_attention_heads",
                 "joint_attention_dim", "pooled_projection_dim")


def _model_config(c: _lib.wf_model_config_t) -> Optional[Dict[str, Any]]:
    if not c.present:
        return None
    out: Dict[str, Any] = {k: int(getattr(c, k)) for k in _CONFIG_UINTS}
    out["guidance_embeds"] = bool(c.guidance_embeds)
    out["axes_dims_rope"] = [int(c.axes_dims_rope[i])
                             for i in range(min(c.n_axes, _lib.WF_MODEL_MAX_AXES))]
    return out


def _status_info(s: _lib.wf_status_info_t) -> StatusInfo:
    c = s.counters
    counters = Counters(
        bool(c.present),
        {int(c.refused[i].code): int(c.refused[i].count)
         for i in range(min(c.refused_count, _lib.WF_STATUS_MAX_CODES))},
        {int(c.failed[i].code): int(c.failed[i].count)
         for i in range(min(c.failed_count, _lib.WF_STATUS_MAX_CODES))},
        [OpCounters(_s(o.op), int(o.served), int(o.failed), int(o.p50_us), int(o.p99_us),
                    int(o.max_us)) for o in c.ops[:min(c.op_count, _lib.WF_STATUS_MAX_OPS)]],
        int(c.reconfigurations), int(c.reconfigurations_failed), int(c.reconfigure_ms),
        int(c.nodes_lost), int(c.handshakes_refused), int(c.handshakes_admitted))
    devices = [DeviceInfo(int(d.index), _s(d.name), int(d.memory_total), int(d.memory_used),
                          int(d.jobs_served), bool(d.busy), int(d.rank),
                          (int(d.coords[0]), int(d.coords[1]), int(d.coords[2]),
                           int(d.coords[3])))
               for d in s.devices[:min(s.device_count, _lib.WF_STATUS_MAX_DEVICES)]]
    nodes = [NodeInfo(_s(n.name), _s(n.state), int(n.first_rank), int(n.ranks))
             for n in s.nodes[:min(s.node_count, _lib.WF_STATUS_MAX_NODES)]]
    m = s.mesh
    return StatusInfo(_s(s.weft_version), _s(s.backend), int(s.epoch), int(s.uptime_ms),
                      int(s.queue_depth), int(s.queue_capacity), int(s.in_flight),
                      int(s.jobs_served), int(s.jobs_failed), int(s.requests_rejected),
                      int(s.rss_bytes), Mesh(int(m.dp), int(m.ring), int(m.ulysses), int(m.tp)),
                      bool(s.reconfiguring), devices, _s(s.role), _s(s.coordinator),
                      _s(s.cluster_state), int(s.world_epoch), int(s.world_size),
                      _s(s.world_id), nodes, counters)


# ---- options -------------------------------------------------------------

_ROTATE = {None: 0, "allgather": 1, "alltoall": 2}
#: precision= of attention and forward (weft.h wf_precision_t)
_PRECISION = {"default": 0, "fp8": 1}


def _precision(p: str) -> int:
    if not isinstance(p, str) or p not in _PRECISION:
        raise ValueError(f"precision {p!r}: 'default' or 'fp8'")
    return _PRECISION[p]
_STYLES = {"replicated": 0, "colwise": 1, "rowwise": 2, "packed_colwise": 3,
           "packed_rowwise": 4}
TpRule = Union[str, Mapping[str, Any]]


def _tri(v: Optional[bool], what: str) -> int:
    if v is None:
        return 0
    if not isinstance(v, bool):
        raise TypeError(f"{what} must be True, False or None (the daemon's setting)")
    return 1 if v else 2


def _u32(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 0xFFFFFFFF:
        raise ValueError(f"{what} must be an int in 0..2^32-1, got {v!r}")
    return v


def _attention_opts(scale: float, causal: bool, devices: int, rotate_method: Optional[str],
                    convert_to_fp32: Optional[bool], ring_anything: Optional[bool],
                    ulysses_anything: Optional[bool], load_balance: Optional[bool],
                    deadline_ms: int, precision: str = "default") -> _lib.wf_attention_opts_t:
    if rotate_method not in _ROTATE:
        raise ValueError(f"rotate_method {rotate_method!r}: 'allgather', 'alltoall' or None")
    o = _lib.wf_attention_opts_t()
    o.scale = float(scale)
    o.causal = 1 if causal else 0
    o.devices = _u32(devices, "devices")
    o.rotate_method = _ROTATE[rotate_method]
    o.convert_to_fp32 = _tri(convert_to_fp32, "convert_to_fp32")
    o.ring_anything = _tri(ring_anything, "ring_anything")
    o.ulysses_anything = _tri(ulysses_anything, "ulysses_anything")
    o.load_balance = _tri(load_balance, "load_balance")
    o.deadline_ms = _u32(deadline_ms, "deadline_ms")
    o.precision = _precision(precision)
    return o


def tp_plan_rules(plan: Mapping[str, TpRule]) -> "ctypes.Array[_lib.wf_tp_rule_t]":
    """A tp plan in its JSON form ({glob: style} or {glob: {"style": ...,
    "blocks": [...]}}, PROTOCOL.md 12.1) as weft.h rules. Only what the C
    struct cannot hold is refused here (a glob of 128+ bytes, more than
    64 rules or 8 blocks, an unknown style); the daemon judges the rest
    with its own codes."""
    if len(plan) > _lib.WF_TP_MAX_RULES:
        raise ValueError(f"tp plan: {len(plan)} rules, at most {_lib.WF_TP_MAX_RULES}")
    rules = (_lib.wf_tp_rule_t * max(1, len(plan)))()
    for i, (glob, rule) in enumerate(plan.items()):
        g = glob.encode()
        if len(g) >= _lib.WF_TP_GLOB_MAX:
            raise ValueError(f"tp plan: glob {glob[:32]!r}... is longer than "
                             f"{_lib.WF_TP_GLOB_MAX - 1} bytes")
        style: Any
        blocks: List[Any]
        if isinstance(rule, str):
            style, blocks = rule, []
        elif isinstance(rule, Mapping):
            unknown = set(rule) - {"style", "blocks"}
            if unknown:
                raise ValueError(f"tp plan rule {glob!r}: unknown keys {sorted(unknown)}")
            style, blocks = rule.get("style"), list(rule.get("blocks", []))
        else:
            raise TypeError(f"tp plan rule {glob!r}: a style name or a "
                            "{'style': ..., 'blocks': [...]} map")
        if style not in _STYLES:
            raise ValueError(f"tp plan rule {glob!r}: style {style!r} is not one of "
                             f"{', '.join(_STYLES)}")
        if len(blocks) > _lib.WF_TP_MAX_BLOCKS:
            raise ValueError(f"tp plan rule {glob!r}: {len(blocks)} blocks, at most "
                             f"{_lib.WF_TP_MAX_BLOCKS}")
        r = rules[i]
        r.glob = g
        r.style = _STYLES[style]
        r.n_blocks = len(blocks)
        for j, b in enumerate(blocks):
            r.blocks[j] = _u32(b, f"tp plan rule {glob!r} block")
    return rules


def _opt_bytes(s: Optional[Union[str, "os.PathLike[str]"]]) -> Optional[bytes]:
    return None if s is None else os.fsencode(s)


# ---- jobs ----------------------------------------------------------------


_O = TypeVar("_O", bound="_Owned")


class _Owned:
    """What Job and Client share: a libweft handle (None once closed) that
    close() releases, also at the end of a `with` block and on garbage
    collection."""

    _handle: Optional[ctypes.c_void_p]
    _closed_msg: str    # ValueError's text from _h() once closed

    def _h(self) -> ctypes.c_void_p:
        if self._handle is None:
            raise ValueError(self._closed_msg)
        return self._handle

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _O) -> _O:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Job(_Owned):
    """A job in flight: attention (Client.submit_attention) or forward
    (Client.submit_forward).

    It holds the job's inputs and outputs alive until it is closed (close(),
    a `with` block, or garbage collection): libweft reads the inputs from
    their memory while it sends and writes the outputs when the reply
    arrives, which may happen during any call on the same client.
    """

    _closed_msg = "weft.Job: the job is closed"

    def __init__(self, client: "Client", handle: ctypes.c_void_p, keep: List[Any],
                 kind: str, outputs: Tuple[Any, ...]) -> None:
        self._client = client
        self._handle: Optional[ctypes.c_void_p] = handle
        self._keep = keep
        self.kind = kind            # "attention" or "forward"
        self._outputs = outputs
        self.id = int(_lib.job_id(handle)) if _lib.job_id is not None else 0
        """The request id (the one the daemon's log names; Client.cancel_id
        takes it); 0 with a libweft that lacks wf_job_id."""

    def poll(self) -> bool:
        """True once the job is finished (then wait() returns at once)."""
        with self._client._lock:
            st = lib.wf_job_poll(self._client._h(), self._h())
            if lib.wf_job_result(self._h(), None) != 106:   # not WF_E_PENDING
                return True
            if st != 106:   # the connection failed while reading replies
                raise error_for(st, self._client._last_error())
        return False

    def wait(self, timeout_ms: Optional[int] = None) -> Any:
        """Wait for the job (None: forever) and return its outputs (an
        AttentionOutput or a ForwardOutput), or raise its error
        (ReplyTimeoutError when timeout_ms passes: the job stays in
        flight)."""
        t = -1 if timeout_ms is None else int(timeout_ms)
        with self._client._lock:
            st = lib.wf_job_wait(self._client._h(), self._h(), t)
            if st == 101:   # WF_E_TIMEOUT: the job is still pending
                raise error_for(st, self._client._last_error())
            r = _lib.wf_job_result_t()
            st2 = lib.wf_job_result(self._h(), ctypes.byref(r))
            if st != 0 or st2 != 0:
                code = st if st != 0 else st2
                msg = _lib.cstr(lib.wf_job_error(self._h()) or b"") or \
                    self._client._last_error()
                raise error_for(code, msg)
        if self.kind == "forward":
            return ForwardOutput(T.unwrap(self._outputs[0]), _job_result(r))
        return AttentionOutput(T.unwrap(self._outputs[0]), T.unwrap(self._outputs[1]),
                               _job_result(r))

    def cancel(self) -> bool:
        """Ask the daemon to cancel the job. True when it found it (the job
        then ends with CancelledError, unless it finished first); False when
        it was already answered. Keep waiting for the job to learn its end."""
        with self._client._lock:
            st = lib.wf_cancel(self._client._h(), self._h())
            if st == 9:     # WF_E_BAD_ARGUMENT: no such job (finished)
                return False
            raise_for(st, self._client._last_error())
        return True

    def close(self) -> None:
        """Forget the job (a later reply is dropped) and release its tensors;
        blocks until libweft no longer reads the inputs."""
        if self._handle is None:
            return
        c = self._client
        if c._handle is not None:
            with c._lock:
                h = ctypes.c_void_p(self._handle.value)
                lib.wf_job_destroy(c._handle, ctypes.byref(h))
        c._jobs.discard(self)
        self._handle = None
        self._keep = []


# ---- the client ----------------------------------------------------------


class Client(_Owned):
    """A connection to weftd (wf_client_connect / wf_client_connect_curve).

    endpoint: ipc://PATH or tcp://HOST:PORT; None: $WEFT_ENDPOINT, else
      libweft's default (ipc:///run/weftd/weftd.sock).
    timeout_ms: the reply timeout of every synchronous call (<= 0: 30000).
    server_key / client_key_file: CURVE keys for a tcp:// endpoint (the
      daemon's public key, a Z85 key or a file; this client's key pair
      file). Without them libweft reads WEFT_SERVER_KEY / WEFT_CLIENT_KEY.

    Connecting does not wait for the daemon; the first call does. Close
    with close() or a `with` block.
    """

    _closed_msg = "weft.Client: the connection is closed"

    def __init__(self, endpoint: Optional[str] = None, timeout_ms: int = 30000, *,
                 server_key: Optional[Union[str, "os.PathLike[str]"]] = None,
                 client_key_file: Optional[Union[str, "os.PathLike[str]"]] = None) -> None:
        if endpoint is None:
            endpoint = os.environ.get("WEFT_ENDPOINT") or None
        self.endpoint = endpoint
        self.timeout_ms = int(timeout_ms)
        self._curve = (server_key, client_key_file)
        self._lock = threading.RLock()
        self._jobs: "weakref.WeakSet[Job]" = weakref.WeakSet()
        h = ctypes.c_void_p()
        ep = endpoint.encode() if endpoint is not None else None
        if server_key is not None or client_key_file is not None:
            st = lib.wf_client_connect_curve(ep, self.timeout_ms, _opt_bytes(server_key),
                                             _opt_bytes(client_key_file), ctypes.byref(h))
        else:
            st = lib.wf_client_connect(ep, self.timeout_ms, ctypes.byref(h))
        if st != 0:
            raise error_for(st, _lib.cstr(lib.wf_client_last_error(None) or b""))
        self._handle: Optional[ctypes.c_void_p] = h

    # -- plumbing

    def _last_error(self) -> str:
        return _lib.cstr(lib.wf_client_last_error(self._handle) or b"")

    def _check(self, st: int) -> None:
        if st != 0:
            raise error_for(st, self._last_error())

    def reopen(self) -> "Client":
        """A new connection to the same endpoint with the same keys."""
        return Client(self.endpoint, self.timeout_ms, server_key=self._curve[0],
                      client_key_file=self._curve[1])

    def close(self) -> None:
        """Close the connection: jobs still open are closed first."""
        if self._handle is None:
            return
        for j in list(self._jobs):
            j.close()
        with self._lock:
            lib.wf_client_destroy(ctypes.byref(self._handle))
            self._handle = None

    # -- handshake and status

    def hello(self) -> HelloInfo:
        """The version handshake: checks the daemon speaks this library's
        protocol (VersionError otherwise) and says what it is."""
        info = _lib.wf_hello_info_t()
        with self._lock:
            self._check(lib.wf_hello(self._h(), ctypes.byref(info)))
        return HelloInfo(int(info.protocol), _s(info.weft_version), _s(info.backend),
                         int(info.devices), int(info.max_header_bytes),
                         int(info.max_tensor_bytes), int(info.max_tensors))

    def has_feature(self, name: str) -> bool:
        """Whether the daemon announced feature `name` ("reconfigure",
        "cp_options", "models", "roles", ...) in this connection's last
        hello (False before any)."""
        with self._lock:
            return bool(lib.wf_client_has_feature(self._h(), name.encode()))

    def status(self) -> StatusInfo:
        """The daemon's status: mesh, devices, queue, cluster, counters."""
        info = _lib.wf_status_info_t()
        with self._lock:
            self._check(lib.wf_status(self._h(), ctypes.byref(info)))
        return _status_info(info)

    def reconfigure(self, dp: int = 1, ring: int = 1, ulysses: int = 1, tp: int = 1) -> int:
        """Change the mesh (hot reconfiguration; the product of the degrees
        must be the daemon's device count). Waits for running jobs to
        drain; returns the new epoch."""
        m = _lib.wf_mesh_degrees_t(_u32(dp, "dp"), _u32(ring, "ring"),
                                   _u32(ulysses, "ulysses"), _u32(tp, "tp"))
        epoch = ctypes.c_uint64()
        with self._lock:
            self._check(lib.wf_reconfigure(self._h(), ctypes.byref(m), ctypes.byref(epoch)))
        return int(epoch.value)

    # -- attention

    def _attention_args(self, q: T.ArrayLike, k: T.ArrayLike, v: T.ArrayLike,
                        out: Optional[T.ArrayLike], lse: Union[bool, Any],
                        out_dtype: Optional[str]) -> Tuple[List[T.Desc], Any, Any, Any]:
        dq, dk, dv = T.as_input(q, "q"), T.as_input(k, "k"), T.as_input(v, "v")
        if out is None:
            if out_dtype is not None and out_dtype not in T.DTYPE_CODES:
                raise ValueError(f"out_dtype {out_dtype!r}: 'f32', 'f16' or 'bf16'")
            out = T.new_like(q, dq.shape, out_dtype or dq.dtype)
        do = T.as_output(out, "out")
        lse_obj: Any = None
        lse_ptr: Optional[int] = None
        if lse is True:
            lse_obj = T.new_like(q, dq.shape[:3], "f32")
        elif lse is not False and lse is not None:
            lse_obj = lse
        if lse_obj is not None:
            dl = T.as_output(lse_obj, "lse")
            if dl.dtype != "f32" or dl.shape != dq.shape[:3]:
                raise BadArgumentError(9, f"lse must be float32 of shape {dq.shape[:3]} "
                                          f"(B, Sq, Hq), got {dl.dtype} {dl.shape}")
            lse_ptr = dl.struct.data
        return [dq, dk, dv, do], out, lse_obj, lse_ptr

    def attention(self, q: T.ArrayLike, k: T.ArrayLike, v: T.ArrayLike, *,
                  out: Optional[T.ArrayLike] = None, lse: Union[bool, Any] = False,
                  out_dtype: Optional[str] = None, scale: float = 0.0,
                  causal: bool = False, devices: int = 0,
                  rotate_method: Optional[str] = None,
                  convert_to_fp32: Optional[bool] = None,
                  ring_anything: Optional[bool] = None,
                  ulysses_anything: Optional[bool] = None,
                  load_balance: Optional[bool] = None,
                  deadline_ms: int = 0, precision: str = "default") -> AttentionOutput:
        """Attention, synchronous.

        q (B, Sq, Hq, D); k, v (B, Skv, Hkv, D) with Hkv dividing Hq; each
        f32 / f16 / bf16 (numpy, CPU torch, or weft.Tensor). out: a
        caller-allocated (B, Sq, Hq, D) output, else one is made like q (in
        out_dtype, default q's dtype). lse: True for a new (B, Sq, Hq)
        float32 log-sum-exp, or an array to fill. scale 0: 1/sqrt(D).
        Context-parallel options: None / 0 take the daemon's settings.
        deadline_ms: fail with DeadlineError past it (0: none).
        precision: "fp8" quantizes q, k, v to fp8 (e4m3) per (batch, head)
        on devices with fp8 tensor cores; UnsupportedError elsewhere (the
        CPU) and from a daemon without the "fp8" feature.
        """
        opts = _attention_opts(scale, causal, devices, rotate_method, convert_to_fp32,
                               ring_anything, ulysses_anything, load_balance, deadline_ms,
                               precision)
        descs, out, lse_obj, lse_ptr = self._attention_args(q, k, v, out, lse, out_dtype)
        r = _lib.wf_job_result_t()
        with self._lock:
            st = lib.wf_attention(self._h(), descs[0].ptr(), descs[1].ptr(), descs[2].ptr(),
                                  ctypes.byref(opts), descs[3].ptr(), lse_ptr,
                                  ctypes.byref(r))
            self._check(st)
        return AttentionOutput(T.unwrap(out), T.unwrap(lse_obj), _job_result(r))

    def submit_attention(self, q: T.ArrayLike, k: T.ArrayLike, v: T.ArrayLike, *,
                         out: Optional[T.ArrayLike] = None, lse: Union[bool, Any] = False,
                         out_dtype: Optional[str] = None, scale: float = 0.0,
                         causal: bool = False, devices: int = 0,
                         rotate_method: Optional[str] = None,
                         convert_to_fp32: Optional[bool] = None,
                         ring_anything: Optional[bool] = None,
                         ulysses_anything: Optional[bool] = None,
                         load_balance: Optional[bool] = None,
                         deadline_ms: int = 0, precision: str = "default") -> Job:
        """Attention, asynchronous: sends the job and returns a Job at once
        (arguments as attention()). Several may be in flight on one
        client; a client whose jobs are many may need the daemon's
        --client-queue-jobs raised."""
        opts = _attention_opts(scale, causal, devices, rotate_method, convert_to_fp32,
                               ring_anything, ulysses_anything, load_balance, deadline_ms,
                               precision)
        descs, out, lse_obj, lse_ptr = self._attention_args(q, k, v, out, lse, out_dtype)
        h = ctypes.c_void_p()
        with self._lock:
            st = lib.wf_attention_submit(self._h(), descs[0].ptr(), descs[1].ptr(),
                                         descs[2].ptr(), ctypes.byref(opts), descs[3].ptr(),
                                         lse_ptr, ctypes.byref(h))
            self._check(st)
        job = Job(self, h, [descs, lse_obj, opts], "attention", (out, lse_obj))
        self._jobs.add(job)
        return job

    def cancel_id(self, job_id: int) -> None:
        """Cancel a job by its request id (Job.id, the daemon's log), as
        weftctl cancel does: a submit client reaches only its own
        connection's jobs; an admin client any running job with that id
        (PROTOCOL.md 3.6). BadArgumentError when there is no such job."""
        fn = _lib.need(_lib.cancel_id, "wf_cancel_id")
        with self._lock:
            self._check(fn(self._h(), ctypes.c_uint64(int(job_id))))

    # -- resident models

    def load_model(self, name: str, path: str, *,
                   tp_plan: Optional[Mapping[str, TpRule]] = None,
                   weights_already_sharded: bool = False,
                   progress: Optional[Callable[[ModelInfo], None]] = None,
                   progress_interval_s: float = 0.25) -> ModelInfo:
        """Load a model directory `path` (relative to the daemon's
        model_root) as `name`; returns once it is resident on every rank.

        tp_plan: the JSON form of a plan (None: the family's default).
        progress: called in this thread every progress_interval_s with the
        model's ModelInfo (bytes_loaded / bytes_total) while it loads, as
        read by list_models on a second connection. The load itself runs
        under this client's timeout: give the Client a long one for big
        checkpoints.
        """
        rules = tp_plan_rules(tp_plan) if tp_plan else None
        opts = _lib.wf_load_opts_t()
        if rules is not None:
            opts.plan = ctypes.cast(rules, ctypes.POINTER(_lib.wf_tp_rule_t))
            opts.n_plan = len(tp_plan or {})
        opts.weights_already_sharded = 1 if weights_already_sharded else 0
        info = _lib.wf_model_info_t()
        nb, pb = name.encode(), path.encode()

        def call() -> int:
            with self._lock:
                return int(lib.wf_load_model(self._h(), nb, pb, ctypes.byref(opts),
                                             ctypes.byref(info)))

        if progress is None:
            self._check(call())
            return _model_info(info)

        box: Dict[str, Any] = {}

        def run() -> None:
            try:
                box["st"] = call()
            except BaseException as e:     # noqa: BLE001 (handed to the caller)
                box["exc"] = e

        th = threading.Thread(target=run, name=f"weft-load-{name}", daemon=True)
        callback_error: Optional[BaseException] = None
        with self.reopen() as watcher:
            th.start()
            while th.is_alive():
                th.join(progress_interval_s)
                if not th.is_alive() or callback_error is not None:
                    continue
                try:
                    for m in watcher.list_models():
                        if m.name == name and m.state in ("loading", "installing"):
                            progress(m)
                except WeftError:
                    pass    # progress is best effort; the load's own answer decides
                except BaseException as e:   # noqa: BLE001
                    callback_error = e
        if "exc" in box:
            raise box["exc"]
        self._check(box["st"])
        mi = _model_info(info)
        if callback_error is None:
            progress(mi)
        else:
            raise callback_error
        return mi

    def unload_model(self, name: str) -> None:
        """Unload a model (after the jobs queued before it)."""
        with self._lock:
            self._check(lib.wf_unload_model(self._h(), name.encode()))

    def list_models(self) -> List[ModelInfo]:
        """Every model the daemon holds, in any state."""
        arr = (_lib.wf_model_info_t * _lib.WF_MODELS_MAX)()
        n = ctypes.c_size_t()
        with self._lock:
            self._check(lib.wf_list_models(self._h(), arr, _lib.WF_MODELS_MAX, ctypes.byref(n)))
        return [_model_info(arr[i]) for i in range(min(n.value, _lib.WF_MODELS_MAX))]

    def _forward_args(self, hidden_states: T.ArrayLike, encoder_hidden_states: T.ArrayLike,
                      pooled_projections: T.ArrayLike, timestep: T.ArrayLike,
                      img_ids: T.ArrayLike, txt_ids: T.ArrayLike,
                      guidance: Optional[T.ArrayLike], out: Optional[T.ArrayLike],
                      out_dtype: Optional[str], out_channels: Optional[int],
                      deadline_ms: int,
                      precision: str = "default") -> Tuple[List[Any], Any, Any, Any]:
        names = ("hidden_states", "encoder_hidden_states", "pooled_projections",
                 "timestep", "img_ids", "txt_ids")
        args = (hidden_states, encoder_hidden_states, pooled_projections, timestep,
                img_ids, txt_ids)
        descs = [T.as_input(a, n) for a, n in zip(args, names)]
        if guidance is not None:
            descs.append(T.as_input(guidance, "guidance"))
        hs = descs[0]
        if out is None:
            if out_dtype is not None and out_dtype not in T.DTYPE_CODES:
                raise ValueError(f"out_dtype {out_dtype!r}: 'f32', 'f16' or 'bf16'")
            if len(hs.shape) != 3:
                raise BadArgumentError(9, f"hidden_states must be (B, S_img, C), got "
                                          f"shape {hs.shape}")
            c = hs.shape[2] if out_channels is None else int(out_channels)
            out = T.new_like(hidden_states, (hs.shape[0], hs.shape[1], c),
                             out_dtype or hs.dtype)
        do = T.as_output(out, "output")
        inputs = _lib.wf_flux_inputs_t(*[d.ptr() for d in descs[:6]],
                                       descs[6].ptr() if len(descs) > 6 else None)
        fo = _lib.wf_forward_opts_t()
        fo.deadline_ms = _u32(deadline_ms, "deadline_ms")
        fo.precision = _precision(precision)
        return [descs, do, inputs, fo], out, inputs, fo

    def forward(self, model: str, hidden_states: T.ArrayLike,
                encoder_hidden_states: T.ArrayLike, pooled_projections: T.ArrayLike,
                timestep: T.ArrayLike, img_ids: T.ArrayLike, txt_ids: T.ArrayLike,
                guidance: Optional[T.ArrayLike] = None, *,
                out: Optional[T.ArrayLike] = None, out_dtype: Optional[str] = None,
                out_channels: Optional[int] = None,
                deadline_ms: int = 0, precision: str = "default") -> ForwardOutput:
        """Forward of resident model `model`, synchronous; the inputs as
        diffusers' FluxTransformer2DModel takes them (shapes in weft.h,
        wf_flux_inputs_t): hidden_states (B, S_img, in_channels),
        encoder_hidden_states (B, S_txt, joint_attention_dim),
        pooled_projections (B, pooled_projection_dim), timestep (B) (the
        model multiplies by 1000), img_ids (S_img, n_axes), txt_ids
        (S_txt, n_axes), guidance (B) only for guidance_embeds models.

        out: a caller-allocated (B, S_img, C) output; else one is made like
        hidden_states, in out_dtype (default its dtype), with C =
        out_channels (default in_channels: FLUX's patch 1 and out_channels
        = in_channels). deadline_ms: fail with DeadlineError past it (0:
        none). precision: "fp8" runs the model's attention in fp8 (as
        attention()).
        """
        keep, out, inputs, fo = self._forward_args(
            hidden_states, encoder_hidden_states, pooled_projections, timestep, img_ids,
            txt_ids, guidance, out, out_dtype, out_channels, deadline_ms, precision)
        r = _lib.wf_job_result_t()
        do = keep[1]
        with self._lock:
            if _lib.forward_ex is not None:
                st = _lib.forward_ex(self._h(), model.encode(), ctypes.byref(inputs),
                                     do.ptr(), ctypes.byref(fo), ctypes.byref(r))
            elif deadline_ms or precision != "default":
                _lib.need(None, "wf_forward_ex (forward deadline_ms / precision)")
                st = 0
            else:
                st = lib.wf_forward(self._h(), model.encode(), ctypes.byref(inputs), do.ptr(),
                                    ctypes.byref(r))
            self._check(st)
        return ForwardOutput(T.unwrap(out), _job_result(r))

    def submit_forward(self, model: str, hidden_states: T.ArrayLike,
                       encoder_hidden_states: T.ArrayLike, pooled_projections: T.ArrayLike,
                       timestep: T.ArrayLike, img_ids: T.ArrayLike, txt_ids: T.ArrayLike,
                       guidance: Optional[T.ArrayLike] = None, *,
                       out: Optional[T.ArrayLike] = None, out_dtype: Optional[str] = None,
                       out_channels: Optional[int] = None, deadline_ms: int = 0,
                       precision: str = "default") -> Job:
        """Forward, asynchronous (arguments as forward()): returns a Job at
        once; Job.wait() gives the ForwardOutput."""
        fn = _lib.need(_lib.forward_submit, "wf_forward_submit")
        keep, out, inputs, fo = self._forward_args(
            hidden_states, encoder_hidden_states, pooled_projections, timestep, img_ids,
            txt_ids, guidance, out, out_dtype, out_channels, deadline_ms, precision)
        h = ctypes.c_void_p()
        with self._lock:
            self._check(fn(self._h(), model.encode(), ctypes.byref(inputs),
                           keep[1].ptr(), ctypes.byref(fo), ctypes.byref(h)))
        job = Job(self, h, keep, "forward", (out,))
        self._jobs.add(job)
        return job


def connect(endpoint: Optional[str] = None, timeout_ms: int = 30000, *,
            server_key: Optional[Union[str, "os.PathLike[str]"]] = None,
            client_key_file: Optional[Union[str, "os.PathLike[str]"]] = None) -> Client:
    """Open a Client (see Client for the arguments)."""
    return Client(endpoint, timeout_ms, server_key=server_key,
                  client_key_file=client_key_file)


def status_name(code: int) -> str:
    """weft.h's stable name of a status code ("WF_E_LIMIT")."""
    return _lib.cstr(lib.wf_status_name(int(code)))


def status_str(code: int) -> str:
    """weft.h's one-line description of a status code."""
    return _lib.cstr(lib.wf_status_str(int(code)))

