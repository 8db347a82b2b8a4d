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
import math
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, TypeVar, Union

import numpy as np

from . import _lib
from . import _tensors as T
from .errors import (BadArgumentError, BadDtypeError, BadFieldError, WeftError,
                     error_for, raise_for)

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
    devices (microseconds), how many devices it used, and for a forward of
    a denoising session what its first-block cache did ("computed" or
    "reused"; "none" without a session)."""
    epoch: int
    queue_us: int
    compute_us: int
    devices: int
    cache: str = "none"


@dataclass(frozen=True)
class AttentionOutput:
    """An attention job's outputs: out (B, Sq, Hq, D), lse (B, Sq, Hq)
    float32 or None, and how it ran."""
    out: Any
    lse: Any
    result: JobResult


@dataclass(frozen=True)
class ForwardOutput:
    """A forward job's outputs and how it ran: `outputs` every output by
    its schema name, `output` the first of them (FLUX's only one, (B,
    S_img, patch^2 * out_channels))."""
    output: Any
    result: JobResult
    outputs: Dict[str, Any] = field(default_factory=dict)


class ModelConfig(Dict[str, Any]):
    """A model's config entries as list_models reports them, under
    diffusers' names, in the family's order: an int, a bool (a flag) or a
    list of ints each. A dict whose keys also read as attributes
    (``info.config.in_channels``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"model config has no {key!r} (it has "
                                 f"{', '.join(self) or 'nothing'})") from None


@dataclass(frozen=True)
class TensorSchema:
    """One input or output of a model's forward: its name, the dtypes it
    may have ("f32", "f16", "bf16"; an output: any of them, chosen with
    out_dtype), whether an input may be absent, and its shape: an int for
    a fixed size, a str for a named size that every tensor naming it
    shares ("B", "S_img"). `labels` names each dim (the named size, or
    for a fixed one the config field it comes from)."""
    name: str
    dtypes: Tuple[str, ...]
    optional: bool
    shape: Tuple[Union[int, str], ...]
    labels: Tuple[str, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    def dims_text(self) -> str:
        """"(B, S_img, in_channels)": the dims by their labels."""
        return "(" + ", ".join(self.labels) + ")"


@dataclass(frozen=True)
class ModelSchema:
    """What a model's forward takes and gives (list_models' schema)."""
    inputs: Tuple[TensorSchema, ...]
    outputs: Tuple[TensorSchema, ...]

    def input(self, name: str) -> Optional[TensorSchema]:
        return next((t for t in self.inputs if t.name == name), None)


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
    config: Optional[ModelConfig] = None
    # its forward's inputs and outputs; None while loading and from daemons
    # before protocol version 2
    schema: Optional[ModelSchema] = None


def _s(b: bytes) -> str:
    return _lib.cstr(b)


_CACHE_USE = {0: "none", 1: "computed", 2: "reused"}


def _job_result(r: _lib.wf_job_result_t) -> JobResult:
    return JobResult(int(r.epoch), int(r.queue_us), int(r.compute_us), int(r.devices),
                     _CACHE_USE.get(int(r.cache), "none"))


def _model_info(m: _lib.wf_model_info_t) -> ModelInfo:
    return ModelInfo(_s(m.name), _s(m.path), _s(m.family), _s(m.state), _s(m.dtype),
                     int(m.params), int(m.bytes_total), int(m.bytes_loaded),
                     int(m.host_bytes), int(m.rank_bytes), int(m.tp),
                     bool(m.sharded_input), int(m.load_ms), _s(m.device), _s(m.compute),
                     bool(m.host_pinned), _s(m.nodes), _model_config(m.config),
                     _model_schema(m))


def _model_config(c: _lib.wf_model_config_t) -> Optional[ModelConfig]:
    if not c.present:
        return None
    out = ModelConfig()
    for e in c.e[:min(c.n, _lib.WF_MODEL_CONFIG_MAX)]:
        vals = [int(v) for v in e.v[:min(e.n, _lib.WF_MODEL_CONFIG_VALUES)]]
        if e.kind == _lib.WF_CONFIG_LIST:
            out[_s(e.key)] = vals
        elif e.kind == _lib.WF_CONFIG_FLAG:
            out[_s(e.key)] = bool(vals and vals[0])
        else:
            out[_s(e.key)] = vals[0] if vals else 0
    return out


def _tensor_schema(t: _lib.wf_schema_tensor_t) -> TensorSchema:
    dims = t.dim[:min(t.rank, _lib.WF_MAX_RANK)]
    return TensorSchema(
        _s(t.name), tuple(n for n, code in T.DTYPE_CODES.items() if t.dtypes & (1 << code)),
        bool(t.optional), tuple(int(d.size) if d.size > 0 else _s(d.sym) for d in dims),
        tuple(_s(d.sym) or str(int(d.size)) for d in dims))


def _model_schema(m: _lib.wf_model_info_t) -> Optional[ModelSchema]:
    s = m.schema
    if not m.config.present or s.n_outputs == 0:
        return None
    return ModelSchema(
        tuple(_tensor_schema(t) for t in s.inputs[:min(s.n_inputs,
                                                      _lib.WF_SCHEMA_MAX_INPUTS)]),
        tuple(_tensor_schema(t) for t in s.outputs[:min(s.n_outputs,
                                                       _lib.WF_SCHEMA_MAX_OUTPUTS)]))


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
    (Client.submit_forward_named, Client.submit_forward).

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
            return _forward_output(self._outputs[0], r)
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
    connect_timeout_ms: how long a call waits for a connection to the
      daemon while none is up (a daemon not started, a wrong endpoint):
      past it the call raises ConnectError naming the endpoint, nothing
      sent; None (or <= 0): only timeout_ms bounds that wait.
    server_key / client_key_file: CURVE keys for a tcp:// endpoint (the
      daemon's public key, a Z85 key or a file; this client's key pair
      file). Without them libweft reads WEFT_SERVER_KEY / WEFT_CLIENT_KEY.

    Connecting does not wait for the daemon; the first call does. Close
    with close() or a `with` block.
    """

    _closed_msg = "weft.Client: the connection is closed"

    def __init__(self, endpoint: Optional[str] = None, timeout_ms: int = 30000, *,
                 server_key: Optional[Union[str, "os.PathLike[str]"]] = None,
                 client_key_file: Optional[Union[str, "os.PathLike[str]"]] = None,
                 connect_timeout_ms: Optional[int] = None) -> None:
        if endpoint is None:
            endpoint = os.environ.get("WEFT_ENDPOINT") or None
        self.endpoint = endpoint
        self.timeout_ms = int(timeout_ms)
        self.connect_timeout_ms = connect_timeout_ms
        self._curve = (server_key, client_key_file)
        self._lock = threading.RLock()
        self._jobs: "weakref.WeakSet[Job]" = weakref.WeakSet()
        # the models as the last list_models (or this client's load) saw
        # them, by name: forward checks its tensors against their schemas
        self._models: Dict[str, ModelInfo] = {}
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
        if connect_timeout_ms is not None and connect_timeout_ms > 0:
            fn = _lib.need(_lib.set_connect_timeout, "wf_client_set_connect_timeout")
            self._check(fn(h, int(connect_timeout_ms)))

    # -- plumbing

    def _last_error(self) -> str:
        return _lib.cstr(lib.wf_client_last_error(self._handle) or b"")

    def _check(self, st: int) -> None:
        if st != 0:
            raise error_for(st, self._last_error())

    def reopen(self) -> "Client":
        """A new connection to the same endpoint with the same keys."""
        return Client(self.endpoint, self.timeout_ms, server_key=self._curve[0],
                      client_key_file=self._curve[1],
                      connect_timeout_ms=self.connect_timeout_ms)

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

    def end_session(self, session: int) -> Tuple[int, int]:
        """End denoising session `session` of this client (forward_named's
        session=): its state on the daemon's devices is freed once its
        last forward is done. Returns (forwards, of them reused).
        BadArgumentError when it is not open (ended, or idle past the
        daemon's session_idle_ms)."""
        fn = _lib.need(_lib.end_session, "wf_end_session")
        steps, reused = ctypes.c_uint64(0), ctypes.c_uint64(0)
        with self._lock:
            self._check(fn(self._h(), ctypes.c_uint64(int(session)), ctypes.byref(steps),
                           ctypes.byref(reused)))
        return int(steps.value), int(reused.value)

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
            return self._remember(_model_info(info))

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
        mi = self._remember(_model_info(info))
        if callback_error is None:
            progress(mi)
        else:
            raise callback_error
        return mi

    def unload_model(self, name: str) -> None:
        """Unload a model (after the jobs queued before it)."""
        with self._lock:
            self._models.pop(name, None)
            self._check(lib.wf_unload_model(self._h(), name.encode()))

    def list_models(self) -> List[ModelInfo]:
        """Every model the daemon holds, in any state."""
        arr = (_lib.wf_model_info_t * _lib.WF_MODELS_MAX)()
        n = ctypes.c_size_t()
        with self._lock:
            self._check(lib.wf_list_models(self._h(), arr, _lib.WF_MODELS_MAX, ctypes.byref(n)))
            models = [_model_info(arr[i]) for i in range(min(n.value, _lib.WF_MODELS_MAX))]
            self._models = {m.name: m for m in models}
        return models

    def _remember(self, m: ModelInfo) -> ModelInfo:
        with self._lock:
            self._models[m.name] = m
        return m

    def model_schema(self, model: str) -> ModelSchema:
        """The schema of resident model `model` (what forward takes and
        gives), from this client's cache of list_models, asked again when
        the model is not in it. BadArgumentError when the daemon holds no
        such model, or none with a schema yet (loading; a daemon before
        protocol version 2)."""
        return self._schema_of(model, refresh=False)

    def _schema_of(self, model: str, refresh: bool) -> ModelSchema:
        with self._lock:
            m = None if refresh else self._models.get(model)
        if m is None or m.schema is None:
            m = next((x for x in self.list_models() if x.name == model), None)
        if m is None:
            raise BadArgumentError(9, f"model '{model}' is not loaded")
        if m.schema is None:
            raise BadArgumentError(9, f"model '{model}' is {m.state} and has no schema yet "
                                      "(or the daemon is older than protocol version 2)")
        return m.schema

    def _forward_args(self, model: str, inputs: Mapping[str, T.ArrayLike],
                      out: Optional[Mapping[str, T.ArrayLike]], out_dtype: Optional[str],
                      deadline_ms: int, precision: str, split_batch: bool = False,
                      session: int = 0, step: int = 0,
                      cache_threshold: float = 0.0) -> Tuple[List[Any], Dict[str, Any]]:
        """The named tensors of a forward, checked against the model's
        schema before anything is sent: (what the job must keep alive,
        its outputs by name in the schema's order)."""
        if not isinstance(model, str):
            raise TypeError(f"model must be a str, got {type(model).__name__}")
        if not isinstance(inputs, Mapping):
            raise TypeError("inputs must be a mapping of input name to tensor, got "
                            f"{type(inputs).__name__}")
        if out is not None and not isinstance(out, Mapping):
            raise TypeError("out must be a mapping of output name to tensor, got "
                            f"{type(out).__name__}")
        if out_dtype is not None and out_dtype not in T.DTYPE_CODES:
            raise ValueError(f"out_dtype {out_dtype!r}: 'f32', 'f16' or 'bf16'")
        fo = _lib.wf_forward_opts_t()
        fo.deadline_ms = _u32(deadline_ms, "deadline_ms")
        fo.precision = _precision(precision)
        fo.split_batch = 1 if split_batch else 0
        if session:
            if not 0 < int(session) < 2**64:
                raise ValueError(f"session {session}: 1 .. 2**64 - 1 (0: none)")
            if not 0 <= int(step) < 2**64:
                raise ValueError(f"step {step}: >= 0")
            if not (cache_threshold >= 0 and math.isfinite(cache_threshold)):
                raise ValueError(f"cache_threshold {cache_threshold}: a finite number >= 0")
            fo.session = int(session)
            fo.step = int(step)
            fo.cache_threshold = float(cache_threshold)
        elif step or cache_threshold:
            raise ValueError("step and cache_threshold need a session")
        for n in list(inputs) + list(out or {}):
            if not isinstance(n, str):
                raise TypeError(f"tensor names must be str, got {n!r}")
        descs = {n: T.as_input(x, n) for n, x in inputs.items()}
        with self._lock:
            cached = model in self._models
        schema = self._schema_of(model, refresh=False)
        try:
            plan = _plan_forward(model, schema, inputs, descs, out or {}, out_dtype)
        except (BadArgumentError, BadFieldError, BadDtypeError):
            if not cached:
                raise
            # the cached schema may be stale (the model was reloaded with
            # another config): judge again by the daemon's current one
            schema = self._schema_of(model, refresh=True)
            plan = _plan_forward(model, schema, inputs, descs, out or {}, out_dtype)
        in_list, out_list = plan
        ins = (_lib.wf_named_tensor_t * max(1, len(in_list)))()
        for i, (n, d) in enumerate(in_list):
            ins[i].name = n.encode()
            ins[i].tensor = d.ptr()
        outs = (_lib.wf_named_tensor_t * len(out_list))()
        for i, (n, _, d) in enumerate(out_list):
            outs[i].name = n.encode()
            outs[i].tensor = d.ptr()
        keep = [model.encode(), ins, len(in_list), outs, len(out_list), fo, descs, out_list]
        return keep, {n: o for n, o, _ in out_list}

    def forward_named(self, model: str, inputs: Mapping[str, T.ArrayLike], *,
                      out: Optional[Mapping[str, T.ArrayLike]] = None,
                      out_dtype: Optional[str] = None, deadline_ms: int = 0,
                      precision: str = "default", split_batch: bool = False,
                      session: int = 0, step: int = 0,
                      cache_threshold: float = 0.0) -> ForwardOutput:
        """Forward of resident model `model` of any family, synchronous.

        inputs: {name: tensor} as the model's schema names them
        (ModelInfo.schema, model_schema()); numpy arrays, CPU torch tensors
        or weft.Tensor. They are checked against the schema before
        anything is sent, with the daemon's codes and a message naming
        the tensor: every name known (BadArgumentError), every required
        input given (BadFieldError), each dtype accepted (BadDtypeError),
        each rank, each fixed size, each named size ("B", "S_img") the
        same wherever it appears (BadArgumentError). The daemon checks
        them again, and adds the model family's own rules (the model's
        config and the mesh). A check that fails against this
        client's cached schema is made again against a fresh one (the
        model may have been reloaded) before it is raised.

        out: caller-allocated outputs by name (some or all); the others are
        made like the first input given (numpy in, numpy out; torch in,
        torch out) with the shapes the schema gives, in out_dtype (default:
        a given output's dtype, else the first input's). Every output has
        the same dtype (the daemon converts to it). deadline_ms and
        precision as forward(). split_batch: the batch's samples are
        independent (classifier-free guidance's branches, several images
        per prompt): the daemon splits them over its dp replicas, which
        compute their parts at once; the output is the unsplit forward's
        (ignored where dp or B is 1, and by daemons without the feature
        "split_batch"). session (a non-zero id of this client's choosing),
        step (its index, 0, 1, ...; one not above the last starts the
        session over) and cache_threshold (>= 0): a denoising session whose
        forwards keep a first-block cache on the daemon (diffusers'
        FirstBlockCacheConfig(threshold)); end it with end_session().
        Returns a ForwardOutput whose `outputs` holds every output by name
        (its result.cache: "computed" or "reused").
        """
        keep, outs = self._forward_args(model, inputs, out, out_dtype, deadline_ms, precision,
                                         split_batch, session, step, cache_threshold)
        r = _lib.wf_job_result_t()
        with self._lock:
            self._check(lib.wf_forward_named(self._h(), keep[0], keep[1], keep[2], keep[3],
                                             keep[4], ctypes.byref(keep[5]), ctypes.byref(r)))
        return _forward_output(outs, r)

    def submit_forward_named(self, model: str, inputs: Mapping[str, T.ArrayLike], *,
                             out: Optional[Mapping[str, T.ArrayLike]] = None,
                             out_dtype: Optional[str] = None, deadline_ms: int = 0,
                             precision: str = "default", split_batch: bool = False,
                             session: int = 0, step: int = 0,
                             cache_threshold: float = 0.0) -> Job:
        """forward_named, asynchronous: checks and sends the job and returns
        a Job at once; Job.wait() gives the ForwardOutput."""
        keep, outs = self._forward_args(model, inputs, out, out_dtype, deadline_ms, precision,
                                         split_batch, session, step, cache_threshold)
        h = ctypes.c_void_p()
        with self._lock:
            self._check(lib.wf_forward_named_submit(self._h(), keep[0], keep[1], keep[2],
                                                    keep[3], keep[4], ctypes.byref(keep[5]),
                                                    ctypes.byref(h)))
        job = Job(self, h, keep, "forward", (outs,))
        self._jobs.add(job)
        return job

    def forward(self, model: str,
                hidden_states: Union[T.ArrayLike, Mapping[str, T.ArrayLike]],
                encoder_hidden_states: Optional[T.ArrayLike] = None,
                pooled_projections: Optional[T.ArrayLike] = None,
                timestep: Optional[T.ArrayLike] = None, img_ids: Optional[T.ArrayLike] = None,
                txt_ids: Optional[T.ArrayLike] = None,
                guidance: Optional[T.ArrayLike] = None, *,
                out: Optional[Union[T.ArrayLike, Mapping[str, T.ArrayLike]]] = None,
                out_dtype: Optional[str] = None, out_channels: Optional[int] = None,
                deadline_ms: int = 0, precision: str = "default",
                split_batch: bool = False) -> ForwardOutput:
        """Forward of resident model `model`, synchronous.

        forward(model, {name: tensor, ...}, out=..., out_dtype=...): any
        family's inputs by name, as forward_named().

        forward(model, hidden_states, encoder_hidden_states,
        pooled_projections, timestep, img_ids, txt_ids, guidance=None):
        a FLUX model's inputs as diffusers' FluxTransformer2DModel takes
        them (shapes in weft.h, wf_flux_inputs_t): hidden_states (B, S_img,
        in_channels), encoder_hidden_states (B, S_txt,
        joint_attention_dim), pooled_projections (B,
        pooled_projection_dim), timestep (B) (the model multiplies by
        1000), img_ids (S_img, n_axes), txt_ids (S_txt, n_axes), guidance
        (B) only for guidance_embeds models; their names for
        forward_named, which checks and sends them.

        out: a caller-allocated (B, S_img, C) output; else one is made like
        hidden_states, in out_dtype (default its dtype), with the schema's
        C = patch^2 * out_channels (out_channels=: one of that many
        channels, refused when the model's differs). deadline_ms: fail
        with DeadlineError past it (0: none). precision: "fp8" runs the
        model's attention in fp8 (as attention()).
        """
        inputs, outs = _flux_named(hidden_states, encoder_hidden_states, pooled_projections,
                                   timestep, img_ids, txt_ids, guidance, out, out_dtype,
                                   out_channels)
        return self.forward_named(model, inputs, out=outs, out_dtype=out_dtype,
                                  deadline_ms=deadline_ms, precision=precision,
                                  split_batch=split_batch)

    def submit_forward(self, model: str,
                       hidden_states: Union[T.ArrayLike, Mapping[str, T.ArrayLike]],
                       encoder_hidden_states: Optional[T.ArrayLike] = None,
                       pooled_projections: Optional[T.ArrayLike] = None,
                       timestep: Optional[T.ArrayLike] = None,
                       img_ids: Optional[T.ArrayLike] = None,
                       txt_ids: Optional[T.ArrayLike] = None,
                       guidance: Optional[T.ArrayLike] = None, *,
                       out: Optional[Union[T.ArrayLike, Mapping[str, T.ArrayLike]]] = None,
                       out_dtype: Optional[str] = None, out_channels: Optional[int] = None,
                       deadline_ms: int = 0, precision: str = "default",
                       split_batch: bool = False) -> Job:
        """Forward, asynchronous (arguments as forward(): a dict of named
        inputs, or FLUX's): returns a Job at once; Job.wait() gives the
        ForwardOutput."""
        inputs, outs = _flux_named(hidden_states, encoder_hidden_states, pooled_projections,
                                   timestep, img_ids, txt_ids, guidance, out, out_dtype,
                                   out_channels)
        return self.submit_forward_named(model, inputs, out=outs, out_dtype=out_dtype,
                                         deadline_ms=deadline_ms, precision=precision,
                                         split_batch=split_batch)


_FLUX_INPUTS = ("hidden_states", "encoder_hidden_states", "pooled_projections", "timestep",
                "img_ids", "txt_ids")


def _flux_named(hidden_states: Any, encoder_hidden_states: Any, pooled_projections: Any,
                timestep: Any, img_ids: Any, txt_ids: Any, guidance: Any, out: Any,
                out_dtype: Optional[str], out_channels: Optional[int]
                ) -> Tuple[Mapping[str, Any], Optional[Mapping[str, Any]]]:
    """forward()'s arguments as forward_named's: a mapping passes as it
    is; FLUX's positional inputs get their names, `out` the name
    "output", and out_channels a (B, S_img, out_channels) output."""
    flux = (encoder_hidden_states, pooled_projections, timestep, img_ids, txt_ids, guidance)
    if isinstance(hidden_states, Mapping):
        if any(x is not None for x in flux) or out_channels is not None:
            raise TypeError("forward(model, inputs_dict): FLUX's positional inputs and "
                            "out_channels do not go with a dict of named inputs")
        if out is not None and not isinstance(out, Mapping):
            raise TypeError("forward(model, inputs_dict, out=...): out must be a mapping "
                            "of output name to tensor")
        return hidden_states, out
    args = (hidden_states,) + flux[:5]
    missing = [n for n, a in zip(_FLUX_INPUTS, args) if a is None]
    if missing:
        raise TypeError(f"forward: {', '.join(missing)} missing (FLUX's inputs, or one "
                        "dict of named inputs)")
    inputs: Dict[str, Any] = dict(zip(_FLUX_INPUTS, args))
    if guidance is not None:
        inputs["guidance"] = guidance
    if out is None and out_channels is not None:
        if out_dtype is not None and out_dtype not in T.DTYPE_CODES:
            raise ValueError(f"out_dtype {out_dtype!r}: 'f32', 'f16' or 'bf16'")
        hs = T.as_input(hidden_states, "hidden_states")
        if len(hs.shape) == 3:
            out = T.new_like(hidden_states, (hs.shape[0], hs.shape[1], int(out_channels)),
                             out_dtype or hs.dtype)
    return inputs, (None if out is None else {"output": out})


def _forward_output(outs: Dict[str, Any], r: _lib.wf_job_result_t) -> ForwardOutput:
    named = {n: T.unwrap(o) for n, o in outs.items()}
    return ForwardOutput(next(iter(named.values())), _job_result(r), named)


def _plan_forward(model: str, schema: ModelSchema, inputs: Mapping[str, Any],
                  descs: Dict[str, T.Desc], out: Mapping[str, Any], out_dtype: Optional[str]
                  ) -> Tuple[List[Tuple[str, T.Desc]], List[Tuple[str, Any, T.Desc]]]:
    """Bind a forward's tensors to `schema` as the daemon will
    (wf_schema_bind), so that a mistake costs no round trip: the inputs in
    the schema's order, and every output (given or made here) with its
    descriptor. Otherwise the daemon's code for the same mistake, with a
    message naming the tensor: BadFieldError for a required input
    missing, BadDtypeError for a dtype, BadArgumentError for the rest."""
    def takes() -> str:
        return ", ".join(t.name + (" (optional)" if t.optional else "")
                         for t in schema.inputs)

    for n in descs:
        if schema.input(n) is None:
            raise BadArgumentError(9, f"unexpected tensor \"{n}\" (model '{model}' takes "
                                      f"{takes()})")
    sizes: Dict[str, Tuple[int, str]] = {}      # named size: (value, who gave it)

    def bind(t: TensorSchema, shape: Tuple[int, ...], what: str) -> None:
        if len(shape) != t.rank:
            raise BadArgumentError(9, f"{what}: rank must be {t.rank} {t.dims_text()}, "
                                      f"got {len(shape)} (shape {tuple(shape)})")
        for d, (want, got) in enumerate(zip(t.shape, shape)):
            if isinstance(want, int):
                if got != want:
                    raise BadArgumentError(9, f"{what}: dim {d} ({t.labels[d]}) must be "
                                              f"{want} for model '{model}', got {got}")
            elif want in sizes:
                val, who = sizes[want]
                if got != val:
                    raise BadArgumentError(9, f"{what}: dim {d} ({want}) is {got}, but "
                                              f"{who} gave {want} = {val}")
            else:
                sizes[want] = (got, what)

    in_list: List[Tuple[str, T.Desc]] = []
    for t in schema.inputs:
        d = descs.get(t.name)
        if d is None:
            if t.optional:
                continue
            raise BadFieldError(5, f"no tensor named \"{t.name}\" (model '{model}' "
                                   f"needs it; it takes {takes()})")
        if d.dtype not in t.dtypes:
            raise BadDtypeError(6, f"{t.name}: dtype {d.dtype} is not accepted (takes "
                                   f"{', '.join(t.dtypes)})")
        bind(t, d.shape, t.name)
        in_list.append((t.name, d))

    for n in out:
        if not any(o.name == n for o in schema.outputs):
            raise BadArgumentError(9, f"unexpected output \"{n}\" (model '{model}' gives "
                                      f"{', '.join(o.name for o in schema.outputs)})")
    given = {n: T.as_output(x, f"output {n}") for n, x in out.items()}
    dtypes = {d.dtype for d in given.values()}
    if len(dtypes) > 1 or (out_dtype is not None and dtypes and dtypes != {out_dtype}):
        raise BadArgumentError(9, "every output has one dtype (out_dtype"
                                  f"{' ' + out_dtype if out_dtype else ''}), got " +
                                  ", ".join(f"{n} {d.dtype}" for n, d in given.items()))
    ref = in_list[0] if in_list else None
    dtype = out_dtype or (dtypes.pop() if dtypes else ref[1].dtype if ref else "f32")
    out_list: List[Tuple[str, Any, T.Desc]] = []
    for t in schema.outputs:
        g = given.get(t.name)
        if g is not None:
            bind(t, g.shape, f"output {t.name}")
            out_list.append((t.name, out[t.name], g))
            continue
        unbound = [x for x in t.shape if isinstance(x, str) and x not in sizes]
        if unbound:
            raise BadArgumentError(9, f"output {t.name}: no input gives {', '.join(unbound)}: "
                                      "pass the output in out=")
        shape = tuple(x if isinstance(x, int) else sizes[x][0] for x in t.shape)
        obj = T.new_like(inputs[ref[0]], shape, dtype) if ref else T.new_like(
            np.empty(0, np.float32), shape, dtype)
        out_list.append((t.name, obj, T.as_output(obj, f"output {t.name}")))
    return in_list, out_list


def connect(endpoint: Optional[str] = None, timeout_ms: int = 30000, *,
            server_key: Optional[Union[str, "os.PathLike[str]"]] = None,
            client_key_file: Optional[Union[str, "os.PathLike[str]"]] = None,
            connect_timeout_ms: Optional[int] = None) -> Client:
    """Open a Client (see Client for the arguments)."""
    return Client(endpoint, timeout_ms, server_key=server_key,
                  client_key_file=client_key_file, connect_timeout_ms=connect_timeout_ms)


def status_name(code: int) -> str:
    """weft.h's stable name of a status code ("WF_E_LIMIT")."""
    return _lib.cstr(lib.wf_status_name(int(code)))


def status_str(code: int) -> str:
    """weft.h's one-line description of a status code."""
    return _lib.cstr(lib.wf_status_str(int(code)))

