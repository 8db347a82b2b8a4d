"""weft.diffusers — diffusers transformers served by weftd.

    from diffusers import FluxPipeline, WanPipeline
    from weft.diffusers import WeftFluxTransformer, WeftWanTransformer

    # /srv/models is weftd's --model-root, seen here at the same path
    with WeftFluxTransformer.from_pretrained("/srv/models/flux/dev", subfolder="transformer",
                                             endpoint="ipc:///run/weftd/weftd.sock",
                                             model_root="/srv/models") as transformer:
        pipe = FluxPipeline.from_pretrained("/srv/models/flux/dev", transformer=transformer)
        image = pipe("a tabby cat", num_inference_steps=28).images[0]

    # or by the name and path weftd knows (path relative to its model root)
    wan = WeftWanTransformer("ipc:///run/weftd/weftd.sock", "wan-1.3b",
                             path="wan/1.3b/transformer")
    pipe = WanPipeline.from_pretrained("/srv/models/wan/1.3b", transformer=wan)

WeftFluxTransformer is a FluxTransformer2DModel and WeftWanTransformer a
WanTransformer3DModel (subclasses, so that the pipelines' type checks
pass: no "Expected types" warning), that hold no parameters: each
carries the model's config (what the pipeline reads: in_channels,
patch_size, image_dim, ...) and its forward sends the step's tensors as
one forward job to the model resident in weftd (checked against the
model's schema before it is sent) and returns what diffusers' forward
returns (a Transformer2DModelOutput, or a 1-tuple with
return_dict=False). Wan 2.2's two experts are two WeftWanTransformers,
each its own resident model, passed as `transformer` and
`transformer_2`. Everything else of the pipeline (text and image
encoders, tokenizers, scheduler, VAE, the denoising loop) stays in Python.

Batches broadcast as in diffusers' forward: every batched input (text
embeddings, pooled projections, timestep, guidance, image embeddings)
has the latents' batch B or 1 (true CFG with one negative prompt for a
list of prompts sends negative embeddings of batch 1); a batch-1 input
is repeated to B before it is sent.

dtypes: weftd computes as its backend does (f32 on the CPU) from inputs
of float32, float16 or bfloat16, which are sent as they are; inputs of
another floating dtype (float64) are sent as float32. The output comes
back in the latents' dtype (bf16 latents: bf16; float64: float64).
`.to(dtype)` (and pipe.to(dtype)) sets the dtype the transformer
reports (`.dtype`, which the Wan pipelines cast their latents to); it
moves no weights.

What weftd does not serve is refused with NotServedError, never
ignored: attention kwargs other than a LoRA `scale` of 1.0, FLUX's
controlnet residuals, LoRA adapters (load_lora_adapter, set_adapters,
fuse_lora, ...: the pipeline's load_lora_weights reaches them), IP
adapters, attention backends other than diffusers' default ("native":
weftd runs its own attention kernels), step caches other than the
first-block cache (enable_cache with another config),
diffusers' parallelism (enable_parallelism: weftd's mesh decides),
save_pretrained; for Wan, image embeddings for a model whose schema does
not list them. Model CPU offload (pipe.enable_model_cpu_offload) works:
the adapter holds no weights, so moving it is a no-op, and the other
components are offloaded as usual.

Overlapped forwards (`overlap_forwards=True`, the default): a forward
sends its job and returns at once; its result (the sample tensor) is a
tensor whose values arrive with the job's reply, and its first use
(arithmetic, .to, indexing, numpy(), printing, passing it to another
call) waits for the reply and fills it in, after which it is a plain
torch.Tensor. The pipelines' two classifier-free-guidance branches
(WanPipeline with guidance_scale > 1, FluxPipeline with true_cfg_scale
> 1: the conditional call, then the unconditional one, then their
combination) are so both in weftd at once, on two replicas of a dp = 2
mesh instead of one after the other. Nothing is read before the reply
(a pipeline without CFG reads the result right after the call, which
then waits there), and the values are the synchronous path's, bit for
bit. The errors of the job (DeadlineError, a daemon that went away and
did not come back, a refusal of the daemon) are raised at that first
use, as the same exception types the synchronous forward raises, and
again at every later use; errors found before anything is sent (the
schema's checks, NotServedError) are raised by the call itself. A
result never used is never waited for: its job's error goes unseen.
`overlap_forwards=False` waits for each job inside the call.

Batches: every forward asks weftd to split its batch over the mesh's dp
replicas (split_batch: two images per prompt, or a pipeline that batches
its guidance branches, run on two replicas at once; the output is the
unsplit forward's).

First-block cache (`cache_threshold=` t > 0, or
`enable_cache(FirstBlockCacheConfig(threshold=t))` as with diffusers'
own transformer: the same t means the same test): the forwards of one
pipeline call under one cache_context name ("cond", "uncond"; the
pipelines open them around each call) form a denoising session on weftd,
each forward tagged with its step index in that context. After the first
transformer block weftd compares that block's output residual with the
session's last computed step's (the mean absolute change over the mean
absolute value, over the whole sequence), and at or under t adds the
residual the other blocks added then instead of running them
(diffusers' apply_first_block_cache). The sessions end when the pipeline
call ends (diffusers calls _reset_stateful_cache from
maybe_free_model_hooks), on disable_cache(), or after weftd's
session_idle_ms; `last_result.cache` says "computed" or "reused". With
t = 0 (the default) no session is opened and every step is computed.

Connection: `connect_timeout_ms` (default CONNECT_TIMEOUT_MS, 5 s)
bounds the wait for a daemon that is not there (a wrong endpoint, a
stopped weftd): the constructor raises weft.ConnectError naming the
endpoint. A forward carries `forward_timeout_ms` as its job's deadline
(None: the daemon's job_timeout_ms, 15 min by default, bounds it; the
daemon answers DeadlineError); a daemon that stops fails the waiting
forward at once. After the daemon restarts, the next forward reconnects
and, when the model is no longer resident, loads it again from the path
weftd had loaded it from (reload=False: raises instead, saying what to
do); that happens once, then forwards run as before. With overlapped
forwards this recovery happens where the result is first used.

The model's configuration comes from the daemon (list_models' `config`,
under diffusers' names), so attaching by name is enough:
`WeftFluxTransformer(endpoint, "flux-dev")`. A config given here
(`config=` a mapping, e.g. FluxTransformer2DModel.load_config(dir), or
the path of a config.json or of its model directory; or `model_root=`
with `path=` when the daemon's model root is visible here) is checked
against the daemon's in the keys it sets: a difference is an error. Keys
the daemon does not report (Wan's eps) come from the config given here,
else, like keys the config lacks, from diffusers' defaults.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import (Any, Callable, Dict, Iterator, Mapping, Optional, Set, Tuple, TypeVar,
                    Union)

import torch
from diffusers import FluxTransformer2DModel, WanTransformer3DModel
from diffusers.configuration_utils import ConfigMixin
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin
from torch.utils._pytree import tree_flatten

from .client import (Client, ForwardOutput, Job, JobResult, ModelConfig, ModelInfo, ModelSchema,
                     TpRule)
from .errors import BadArgumentError, ConnectError, ConnectionClosedError

log = logging.getLogger(__name__)

_WEFT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ConfigSource = Union[Mapping[str, Any], str, "os.PathLike[str]"]
#: default bound on the wait for a connection to weftd (construction, and a
#: forward while the daemon is away)
CONNECT_TIMEOUT_MS = 5000
#: how long past a forward's deadline its reply is awaited: the daemon
#: stops a running job at its next step boundary (a block) and answers
#: DeadlineError; this bounds only a daemon that stopped answering
FORWARD_REPLY_GRACE_MS = 60_000
_T = TypeVar("_T", bound="_WeftTransformer")


class NotServedError(NotImplementedError):
    """The pipeline asked for something weftd's forward of the model does
    not do (LoRA adapters and scales, controlnet residuals, IP adapters,
    attention backends and processors, inputs the model's schema does not
    list); the message says what to do instead."""


def _defaults(cls: type) -> Dict[str, Any]:
    """The arguments of diffusers' model class `cls` and their defaults."""
    sig = inspect.signature(cls.__init__)    # type: ignore[misc]
    return {k: p.default for k, p in sig.parameters.items()
            if k != "self" and p.default is not inspect.Parameter.empty}


def _norm(v: Any, cfg: Mapping[str, Any]) -> Any:
    """A config value compared as the model uses it (lists as tuples; an
    out_channels of None is in_channels)."""
    if isinstance(v, list):
        return tuple(v)
    if v is None:
        return cfg.get("in_channels")
    return v


def _read_config(src: ConfigSource, cls: type) -> Tuple[Dict[str, Any], Set[str]]:
    """A config (a mapping, a config.json or its directory) as `cls`'s
    arguments: every key one of them, the others at their defaults, lists
    as tuples (as diffusers' constructors take them); and the keys the
    source set."""
    if isinstance(src, Mapping):
        cfg = dict(src)
    else:
        p = Path(src)
        if p.is_dir():
            p = p / "config.json"
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
        if not isinstance(cfg, dict):
            raise ValueError(f"{p}: not a JSON object")
    known = _defaults(cls)
    out = dict(known)
    given = set()
    for k, v in cfg.items():
        if k.startswith("_"):
            continue            # _class_name, _diffusers_version, ...
        if k not in known:
            raise ValueError(f"config key {k!r} is not a {cls.__name__} argument")
        out[k] = tuple(v) if isinstance(v, list) else v
        given.add(k)
    return out, given


def _wire_dtype(t: torch.Tensor) -> torch.dtype:
    """The dtype t is sent in: its own when weft takes it, else float32."""
    return t.dtype if t.dtype in _WEFT_DTYPES else torch.float32


def _host(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """t as weft sends it: a CPU tensor of a weft dtype (`dtype`, else
    _wire_dtype). One that already is passes as it is (zero-copy); others
    are moved / cast once."""
    return t.detach().to(device="cpu", dtype=dtype or _wire_dtype(t))


def _batch(batched: Mapping[str, Optional[torch.Tensor]]) -> int:
    """The batch B of a forward whose batched inputs are `batched` (name:
    tensor, the batch its first dim; None and 0-d tensors are left out):
    each has batch B or 1, as the elementwise broadcasting of diffusers'
    forward takes them. ValueError naming the sizes otherwise."""
    sizes = {n: int(t.shape[0]) for n, t in batched.items() if t is not None and t.ndim > 0}
    b = max(sizes.values(), default=1)
    if any(s not in (1, b) for s in sizes.values()):
        raise ValueError("batch sizes do not broadcast (each input's batch is the "
                         f"latents' or 1): " + ", ".join(f"{n} {s}" for n, s in sizes.items()))
    return b


def _expand(t: torch.Tensor, b: int) -> torch.Tensor:
    """t with its batch (first dim) repeated to b when it is 1 (a 0-d t is
    one value for every batch entry: (b,))."""
    if t.ndim == 0:
        return t.reshape(1).expand(b)
    return t if t.shape[0] == b else t.expand(b, *t.shape[1:])


def _check_attention_kwargs(kwargs: Optional[Mapping[str, Any]], what: str) -> None:
    """An attention-kwargs argument weftd can honour: none, empty, or only
    a LoRA `scale` of 1.0 (which changes nothing without LoRA layers, and
    weftd's models have none). Anything else is NotServedError."""
    if not kwargs:
        return
    rest = sorted(k for k in kwargs if k != "scale")
    scale = kwargs.get("scale", 1.0)
    if rest or scale != 1.0:
        raise NotServedError(
            f"weftd does not serve {what} (got keys {sorted(kwargs)}"
            + ("" if scale == 1.0 else f", scale {scale!r}") + "): LoRA scales, IP-adapter "
            "embeddings and attention-processor arguments need diffusers' own transformer")


_LORA = ("weftd serves the checkpoint it loaded, without LoRA layers: fuse the LoRA into "
         "the weights with diffusers' own transformer (load_lora_weights, fuse_lora, "
         "save_pretrained) and load that directory in weftd")
_ATTENTION = ("weftd runs its own attention kernels (context- and tensor-parallel as its "
              "mesh says); choose them with the daemon's settings, not diffusers' "
              "attention backends or processors")
# What diffusers' model mixins offer that needs the weights here, and why
# weftd refuses it: each becomes a method that raises NotServedError.
_REFUSED = {
    "load_lora_adapter": _LORA, "add_adapter": _LORA, "set_adapters": _LORA,
    "set_adapter": _LORA, "enable_adapters": _LORA, "enable_lora": _LORA,
    "fuse_lora": _LORA, "enable_lora_hotswap": _LORA, "save_lora_adapter": _LORA,
    "_load_ip_adapter_weights": "weftd does not serve IP adapters (image prompt "
                                "projections need diffusers' own transformer)",
    "set_attn_processor": _ATTENTION, "fuse_qkv_projections": _ATTENTION,
    "enable_xformers_memory_efficient_attention": _ATTENTION,
    "set_use_memory_efficient_attention_xformers": _ATTENTION,
    "enable_npu_flash_attention": _ATTENTION, "enable_xla_flash_attention": _ATTENTION,
    "enable_group_offload": "the weights are in weftd, not here: there is nothing to "
                            "offload (enable_model_cpu_offload works and offloads the "
                            "other components)",
    "enable_layerwise_casting": "the weights are in weftd, not here: weftd computes in its "
                                "backend's dtypes",
    "enable_parallelism": "weftd runs the model context- and tensor-parallel across its own "
                          "devices: set its mesh (transformer.client.reconfigure(ring=, "
                          "ulysses=, tp=)) instead",
    "compile_repeated_blocks": "the blocks run in weftd, not here: there is nothing to compile",
}


def _refusal(name: str, why: str) -> Callable[..., Any]:
    def refuse(self: "_WeftTransformer", *args: Any, **kwargs: Any) -> Any:
        raise NotServedError(f"{type(self).__name__}.{name}: {why}")
    refuse.__name__ = name
    refuse.__doc__ = f"Refused with NotServedError: {why}."
    return refuse


#: the errors after which a forward is sent again, once (_WeftTransformer._recover)
_RECOVERABLE = (ConnectionClosedError, ConnectError, BadArgumentError)


class _ForwardCall:
    """One forward job of a transformer: sent when it is made, its reply
    awaited by wait(). A daemon that went away or no longer holds the
    model is recovered from once (_WeftTransformer._recover) and the job
    sent again, whether the send or the reply failed: the synchronous and
    the overlapped forward run this same code, the first calling wait()
    at once, the second at the first use of its result (_PendingTensor).

    inputs are the call's own tensors (nothing the caller may change
    before the reply: libweft sends them without a copy, and a retry
    sends them again); out the outputs libweft writes when the reply
    arrives."""

    def __init__(self, owner: "_WeftTransformer", inputs: Mapping[str, torch.Tensor],
                 out: Mapping[str, torch.Tensor]) -> None:
        self._owner = owner
        self._inputs = inputs
        self._out = out
        self._retried = False
        self._session = owner._session_args()
        self._lock = threading.Lock()
        self._job: Optional[Job] = None
        self._client: Optional[Client] = None
        self._sent = 0.0
        self.result: Optional[ForwardOutput] = None
        self.error: Optional[BaseException] = None
        self._send()

    def _send(self) -> None:
        o = self._owner
        while True:
            try:
                self._client = o._client
                self._sent = time.monotonic()
                self._job = o._client.submit_forward_named(
                    o.model_name, self._inputs, out=self._out,
                    deadline_ms=o._forward_timeout_ms or 0, precision=o._precision,
                    split_batch=True, **self._session)
                return
            except _RECOVERABLE as e:
                if self._retried or not o._recover(e):
                    raise
                self._retried = True

    def _reply(self) -> ForwardOutput:
        """The job's reply, awaited up to its deadline plus
        FORWARD_REPLY_GRACE_MS from when it was sent, and at least
        FORWARD_REPLY_GRACE_MS from now (a result first used long after
        its reply came still reads it)."""
        job = self._job
        assert job is not None
        wait = self._owner._forward_timeout_ms
        left = None
        if wait is not None:
            spent = int((time.monotonic() - self._sent) * 1000)
            left = max(FORWARD_REPLY_GRACE_MS, wait + FORWARD_REPLY_GRACE_MS - spent)
        with job:
            return job.wait(left)

    def wait(self) -> ForwardOutput:
        """The forward's outputs (written into `out`), or its error; the
        same error again on every later call."""
        with self._lock:
            if self.result is not None:
                return self.result
            if self.error is not None:
                raise self.error
            o = self._owner
            try:
                while True:
                    try:
                        if self._client is not o._client:
                            # another forward's recovery replaced the
                            # connection (closing this job): it is up again
                            # and holds the model; send this one again
                            if self._retried:
                                raise ConnectionClosedError(
                                    108, f"the connection to {o._client.endpoint} was "
                                    "replaced while this forward was in flight")
                            self._retried = True
                            self._send()
                        r = self._reply()
                        break
                    except _RECOVERABLE as e:
                        if self._retried or not o._recover(e):
                            raise
                        self._retried = True
                        self._send()
            except BaseException as e:
                self.error = e
                self._inputs = self._out = {}
                raise
            self.result = r
            self._inputs = {}
            o.last_result = r.result
            return r


#: what a tensor's metadata is read by: known without its values, so read
#: without waiting for the job (a pipeline may look at a result's shape
#: before its other branch is sent)
_METADATA = frozenset({
    torch.Tensor.shape.__get__, torch.Tensor.dtype.__get__, torch.Tensor.device.__get__,
    torch.Tensor.ndim.__get__, torch.Tensor.layout.__get__, torch.Tensor.is_cuda.__get__,
    torch.Tensor.requires_grad.__get__, torch.Tensor.size, torch.Tensor.dim,
    torch.Tensor.numel, torch.Tensor.__len__, torch.Tensor.is_floating_point,
    torch.Tensor.element_size})


class _PendingTensor(torch.Tensor):
    """A forward's result before its reply: a tensor of the result's shape,
    dtype and device whose values arrive with the job's reply. Its first
    use (any torch function or method taking it: arithmetic, .to,
    indexing, numpy(), printing, being sent by another forward) waits for
    the job (_ForwardCall.wait), copies the output in when it is not
    written in place, and turns it into a plain torch.Tensor (its class
    becomes torch.Tensor): from then on it is one, and what the ops
    return is plain. A job that failed raises its error at that use, and
    at every later one; the values are never read before the reply.
    Metadata (shape, dtype, device, size(), ...) is read without
    waiting."""

    _weft_call: Optional[_ForwardCall]
    _weft_fill: Optional[torch.Tensor]

    @staticmethod
    def make(call: _ForwardCall, raw: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """The result of `call` as diffusers returns it: in the latents'
        (`like`'s) dtype and on their device. `raw` is the output libweft
        writes: the result itself when it already is of that dtype on the
        CPU, else copied from at resolution (the same conversion as the
        synchronous path's .to)."""
        same = raw.dtype == like.dtype and like.device.type == "cpu"
        data = raw if same else torch.empty(raw.shape, dtype=like.dtype, device=like.device)
        t = torch.Tensor._make_subclass(_PendingTensor, data, False)
        t._weft_call = call
        t._weft_fill = None if same else raw
        return t

    def _weft_resolve(self) -> None:
        call = self.__dict__.get("_weft_call")
        if call is None:
            return
        call.wait()
        # under the call's lock: another thread resolving the same tensor
        # reads it only once it is filled
        with call._lock:
            if self.__dict__.get("_weft_call") is None:
                return
            fill = self.__dict__.pop("_weft_fill", None)
            if fill is not None:
                with torch._C.DisableTorchFunctionSubclass():
                    self.copy_(fill)
            self.__class__ = torch.Tensor
            del self._weft_call

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func not in _METADATA:
            for a in tree_flatten((args, kwargs))[0]:
                if isinstance(a, _PendingTensor):
                    a._weft_resolve()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def _private(inputs: Dict[str, torch.Tensor], *given: Optional[torch.Tensor]
             ) -> Dict[str, torch.Tensor]:
    """inputs with a copy of each that shares memory with a tensor the
    caller passed (`given`): an overlapped forward's inputs are read (and
    sent again by a retry) after forward returned, when the caller may
    have changed its own tensors."""
    theirs = {g.untyped_storage().data_ptr() for g in given
              if isinstance(g, torch.Tensor) and g.device.type == "cpu"}
    return {n: t.clone() if t.untyped_storage().data_ptr() in theirs else t
            for n, t in inputs.items()}


class _WeftTransformer(ModelMixin, ConfigMixin):
    """What every transformer served by weftd shares: the connection, the
    resident model (attached or loaded, and loaded again after a daemon
    restart), its config, the attributes a pipeline reads of a model, and
    the refusals of what would need the weights here. A subclass names its
    family and diffusers class (also its second base, which it stands
    for) and writes forward.

    endpoint: the daemon (None: $WEFT_ENDPOINT, else libweft's default).
    model: the resident model's name in weftd (None: the family's name,
      "flux" or "wan").
    path: a model directory under the daemon's model_root: loaded as
      `model` unless a model of that name is already resident from that
      path (then attached). None: attach to a resident `model`.
    config: the model's config (a mapping, or a config.json / its
      directory), checked against the daemon's in the keys it sets;
      None: model_root/path's config.json when model_root is given, else
      the daemon's.
    model_root: the daemon's model root as seen from here (only to find
      config.json).
    tp_plan, weights_already_sharded, progress: as Client.load_model.
    timeout_ms: the reply timeout of the calls that are not forwards (a
      load waits as long as reading the checkpoint takes; list_models,
      reconfigure through `.client`).
    connect_timeout_ms: how long a call waits for a daemon that is not
      there (CONNECT_TIMEOUT_MS: 5 s): the constructor raises ConnectError.
    forward_timeout_ms: each forward's deadline, sent with the job (the
      daemon answers DeadlineError past it); None: the daemon's
      job_timeout_ms bounds it. The reply is awaited that long plus
      FORWARD_REPLY_GRACE_MS (a minute).
    reload: after a daemon restart, load the model again from the path
      weftd had loaded it from, with this tp_plan (the family's default
      for a model this transformer attached to) (True), or raise saying
      so (False).
    dtype: the dtype the pipeline sees as the transformer's (`.dtype`;
      `.to(dtype)` changes it). weftd computes as its backend does (f32
      on the CPU); outputs come back in the latents' dtype.
    server_key, client_key_file: CURVE keys for a tcp:// endpoint.
    precision: "fp8" runs every forward's attention in fp8 (e4m3) on a
      daemon whose devices take it (UnsupportedError otherwise); "default"
      as the inputs' dtypes.
    overlap_forwards: send each forward's job and return at once a result
      whose first use waits for the reply (True: the default, so that the
      pipelines' two guidance branches run at once on a dp > 1 mesh; a
      job's error is raised at that first use), or wait inside forward
      (False).

    After each forward's reply is taken, `last_result` holds how the job
    ran (JobResult).
    A `with` block closes the connection at its end (the model stays
    resident).
    """

    config_name = "config.json"
    _supports_gradient_checkpointing = False
    #: weftd's family of the model (ModelInfo.family)
    _family = ""
    #: the diffusers class this stands for (its arguments are the config)
    _diffusers_class: type = ModelMixin
    #: whether forward needs the model's schema (a daemon of protocol 2)
    _needs_schema = False

    def __init__(self, endpoint: Optional[str] = None, model: Optional[str] = None, *,
                 path: Optional[str] = None, config: Optional[ConfigSource] = None,
                 model_root: Optional[Union[str, "os.PathLike[str]"]] = None,
                 tp_plan: Optional[Mapping[str, TpRule]] = None,
                 weights_already_sharded: bool = False,
                 progress: Optional[Callable[[ModelInfo], None]] = None,
                 timeout_ms: int = 600_000, connect_timeout_ms: int = CONNECT_TIMEOUT_MS,
                 forward_timeout_ms: Optional[int] = None, reload: bool = True,
                 dtype: torch.dtype = torch.float32,
                 server_key: Optional[str] = None,
                 client_key_file: Optional[str] = None,
                 precision: str = "default", overlap_forwards: bool = True,
                 cache_threshold: float = 0.0) -> None:
        # ModelMixin's, not the diffusers class's (the next in the MRO):
        # that one would build the model's layers here
        ModelMixin.__init__(self)
        # no weights, but one empty parameter: accelerate's offload hooks
        # (enable_model_cpu_offload) read the device of a model's first one
        self.offload_anchor = torch.nn.Parameter(torch.empty(0), requires_grad=False)
        if precision not in ("default", "fp8"):
            raise ValueError(f"precision {precision!r}: 'default' or 'fp8'")
        self._precision = precision
        self._overlap_forwards = bool(overlap_forwards)
        self._set_cache_threshold(cache_threshold)
        #: the denoising session of each cache_context name: [id, next step]
        self._sessions: Dict[str, list] = {}
        self._cache_name: Optional[str] = None
        if not dtype.is_floating_point:
            raise ValueError(f"dtype {dtype}: a floating-point dtype")
        if forward_timeout_ms is not None and forward_timeout_ms <= 0:
            raise ValueError(f"forward_timeout_ms {forward_timeout_ms}: > 0, or None")
        if config is None and path is not None and model_root is not None:
            config = Path(model_root) / path
        local = _read_config(config, self._diffusers_class) if config is not None else None
        self.model_name = model or self._family
        self._dtype = dtype
        self._device = torch.device("cpu")
        self._forward_timeout_ms = forward_timeout_ms
        self._reload = reload
        self._load_args = (tp_plan, weights_already_sharded)
        self._client = Client(endpoint, timeout_ms, server_key=server_key,
                              client_key_file=client_key_file,
                              connect_timeout_ms=connect_timeout_ms)
        self._client.hello()
        if not self._client.has_feature("models"):
            raise RuntimeError(f"the daemon at {self._client.endpoint} serves no models "
                               "(no 'models' feature in its hello)")
        self.last_result: Optional[JobResult] = None
        self.model_info = self._attach_or_load(path, progress)
        if self._needs_schema and self.model_info.schema is None:
            raise ValueError(f"weftd at {self._client.endpoint} reports no forward schema "
                             f"for model {self.model_name!r} (a daemon before protocol "
                             "version 2)")
        self._schema: Optional[ModelSchema] = self.model_info.schema
        self.register_to_config(**self._config_of(local))

    @classmethod
    def _from_daemon(cls, theirs: ModelConfig) -> Dict[str, Any]:
        """The daemon's config entries as the diffusers class's arguments
        (a family whose entries differ in kind, e.g. a flag for a string,
        maps them here)."""
        return dict(theirs)

    def _config_of(self, local: Optional[Tuple[Dict[str, Any], Set[str]]]) -> Dict[str, Any]:
        """The daemon's config of the model over `local` (checked against
        it in the keys `local` sets) or over diffusers' defaults."""
        theirs = self.model_info.config
        if theirs is None:
            if local is None:
                raise ValueError(
                    f"weftd at {self._client.endpoint} reports no config for model "
                    f"{self.model_name!r} (a daemon before weft 0.4): pass config= (a "
                    "mapping, a config.json or its directory), or model_root= with path=")
            return local[0]
        daemon, _ = _read_config(self._from_daemon(theirs), self._diffusers_class)
        reported = {k for k in daemon if k in theirs}
        if local is not None:
            cfg, given = local
            differ = sorted(k for k in reported & given if
                            _norm(cfg[k], cfg) != _norm(daemon[k], daemon))
            if differ:
                raise ValueError(
                    f"the config given for {self.model_name!r} differs from the one weftd "
                    f"serves in {', '.join(differ)}: "
                    + "; ".join(f"{k} {cfg[k]!r} here, {daemon[k]!r} in weftd"
                                for k in differ))
            return {**cfg, **{k: daemon[k] for k in reported}}
        return daemon

    def _attach_or_load(self, path: Optional[str],
                        progress: Optional[Callable[[ModelInfo], None]] = None) -> ModelInfo:
        family = self._family
        resident = {m.name: m for m in self._client.list_models()}
        m = resident.get(self.model_name)
        if m is not None:
            if path is not None and m.path != path:
                raise ValueError(f"weftd already holds a model {self.model_name!r} from "
                                 f"{m.path!r}, not {path!r}: unload it or pick another name")
            if m.state != "ready":
                raise RuntimeError(f"model {self.model_name!r} is {m.state} in weftd")
            if m.family != family:
                raise ValueError(f"model {self.model_name!r} is of family {m.family!r}, "
                                 f"not {family}")
            return m
        if path is None:
            raise ValueError(f"weftd holds no model {self.model_name!r} (it holds "
                             f"{sorted(resident) or 'none'}): pass path= to load one")
        tp_plan, sharded = self._load_args
        m = self._client.load_model(self.model_name, path, tp_plan=tp_plan,
                                    weights_already_sharded=sharded, progress=progress)
        if m.family != family:
            raise ValueError(f"{path!r} holds a model of family {m.family!r}, not {family} "
                             f"(weftd keeps it loaded as {self.model_name!r}; Client."
                             "forward_named serves any family)")
        return m

    # -- loading like diffusers

    @classmethod
    def from_pretrained(cls: type[_T],
                        pretrained_model_name_or_path: Union[str, "os.PathLike[str]"],
                        subfolder: Optional[str] = None, *, endpoint: Optional[str] = None,
                        name: Optional[str] = None,
                        model_root: Optional[Union[str, "os.PathLike[str]"]] = None,
                        torch_dtype: Optional[torch.dtype] = None, **kwargs: Any) -> _T:
        """The model directory `pretrained_model_name_or_path` (a diffusers
        pipeline folder with subfolder="transformer", or the transformer's
        own folder), served by weftd: loaded by its path relative to the
        daemon's model root (attached when weftd already holds it under
        `name`), its config.json checked against the daemon's.

        model_root: weftd's --model-root as seen from here (None:
          $WEFT_MODEL_ROOT). A relative directory that does not exist here
          is taken under it. A directory outside it is refused: weftd loads
          only below its model root.
        name: the resident model's name (None: the path under the model
          root with "/" as "-", e.g. "flux-dev-transformer").
        torch_dtype: as diffusers' (the `dtype` the pipeline sees).
        Other keyword arguments are the constructor's (timeouts, tp_plan,
        reload, precision, ...)."""
        root_s = model_root if model_root is not None else os.environ.get("WEFT_MODEL_ROOT")
        if not root_s:
            raise ValueError(f"{cls.__name__}.from_pretrained: pass model_root= (weftd's "
                             "--model-root as seen from here) or set WEFT_MODEL_ROOT: weftd "
                             "loads a model by its path relative to it")
        root = Path(os.path.abspath(root_s))
        d = Path(pretrained_model_name_or_path)
        if subfolder:
            d = d / subfolder
        if not d.is_absolute() and not d.exists():
            d = root / d
        d = Path(os.path.abspath(d))
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"{d} has no config.json: give a diffusers model "
                                    "directory (a pipeline's folder with subfolder="
                                    "'transformer', or the transformer's own folder)")
        try:
            rel = d.relative_to(root).as_posix()
        except ValueError:
            raise ValueError(f"{d} is not under weftd's model root {root}: weftd loads only "
                             "the directories below its --model-root; move or link the model "
                             "there, or give the model_root weftd was started with") from None
        if torch_dtype is not None:
            kwargs["dtype"] = torch_dtype
        return cls(endpoint, name or rel.replace("/", "-"), path=rel, config=d, **kwargs)

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        """Refused: the weights live in weftd, not here (saving would write
        an empty checkpoint). Save the model directory weftd loaded."""
        raise NotServedError(f"{type(self).__name__} holds no weights (they are resident "
                             f"in weftd as {self.model_name!r}): save the model directory "
                             "weftd loaded instead")

    @classmethod
    def from_single_file(cls, *args: Any, **kwargs: Any) -> Any:
        """Refused: weftd loads diffusers model directories."""
        raise NotServedError(f"{cls.__name__}.from_single_file: weftd loads a diffusers model "
                             "directory (config.json and safetensors) under its model root: "
                             "convert the file with diffusers, save_pretrained it there and "
                             f"use {cls.__name__}.from_pretrained")

    # -- what the pipeline reads of a model, and moves

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return self._device

    def to(self: _T, *args: Any, **kwargs: Any) -> _T:
        """Record the dtype (what `.dtype` reports) and device (what
        `.device` reports) of torch's Module.to arguments; no weights move
        (they are in weftd). Accelerate's CPU offload moves the model with
        this: a no-op for it."""
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None:
            if not dtype.is_floating_point:
                raise TypeError(f"{type(self).__name__}.to only accepts floating point "
                                f"dtypes, got {dtype}")
            self._dtype = dtype
        if device is not None:
            self._device = torch.device(device)
        return self

    def cpu(self: _T) -> _T:
        return self.to("cpu")

    def cuda(self: _T, device: Optional[Union[int, torch.device]] = None) -> _T:
        return self.to(torch.device("cuda", device) if isinstance(device, int)
                       else device or "cuda")

    def float(self: _T) -> _T:
        return self.to(torch.float32)

    def half(self: _T) -> _T:
        return self.to(torch.float16)

    def bfloat16(self: _T) -> _T:
        return self.to(torch.bfloat16)

    def double(self: _T) -> _T:
        return self.to(torch.float64)

    @property
    def client(self) -> Client:
        """The connection to weftd (for status, reconfigure, ...); a new
        one after the transformer reconnected to a restarted daemon."""
        return self._client

    @contextlib.contextmanager
    def cache_context(self, name: str, **kwargs: Any) -> Iterator[None]:
        """Pipelines wrap each call in one (diffusers' CacheMixin: "cond",
        "uncond"): with a cache threshold, the forwards under one name form
        one denoising session on weftd (its steps counted here)."""
        before = self._cache_name
        self._cache_name = str(name)
        try:
            yield
        finally:
            self._cache_name = before

    def _set_cache_threshold(self, t: float) -> None:
        t = float(t)
        if not (t >= 0 and t < float("inf")):
            raise ValueError(f"cache_threshold {t}: a finite number >= 0")
        self._cache_threshold = t

    @property
    def is_cache_enabled(self) -> bool:
        """Whether the first-block cache is on (a threshold above 0)."""
        return self._cache_threshold > 0

    def enable_cache(self, config: Any) -> None:
        """diffusers' CacheMixin.enable_cache for its FirstBlockCacheConfig:
        weftd's first-block cache with the config's threshold (the module
        docstring); any other cache config is NotServedError."""
        if type(config).__name__ != "FirstBlockCacheConfig" or not hasattr(config, "threshold"):
            raise NotServedError(f"{type(self).__name__}.enable_cache("
                                 f"{type(config).__name__}): weftd serves the first-block "
                                 "cache only (diffusers.FirstBlockCacheConfig)")
        self._set_cache_threshold(config.threshold)

    def disable_cache(self) -> None:
        """The first-block cache off; the open sessions end."""
        self._reset_stateful_cache()
        self._cache_threshold = 0.0

    def _reset_stateful_cache(self, recurse: bool = True) -> None:
        """The end of a pipeline call (diffusers' maybe_free_model_hooks
        calls it): every denoising session of this transformer ends on
        weftd, freeing its state there."""
        sessions, self._sessions = self._sessions, {}
        for sid, _ in sessions.values():
            try:
                self._client.end_session(sid)
            except (BadArgumentError, ConnectionClosedError, ConnectError):
                pass    # idle past session_idle_ms, or the daemon went away: gone

    def _session_args(self) -> Dict[str, Any]:
        """The session arguments of the next forward: none without a cache
        threshold; else the current cache_context's session and step."""
        if self._cache_threshold <= 0:
            return {}
        name = self._cache_name or ""
        entry = self._sessions.get(name)
        if entry is None:
            entry = self._sessions[name] = [secrets.randbits(63) | 1, 0]
        step = entry[1]
        entry[1] += 1
        return {"session": entry[0], "step": step, "cache_threshold": self._cache_threshold}

    def set_attention_backend(self, backend: str) -> None:
        """diffusers' default backend ("native") is accepted and changes
        nothing; any other is NotServedError (weftd runs its own attention
        kernels)."""
        if str(backend).lower() != "native":
            raise NotServedError(f"{type(self).__name__}.set_attention_backend({backend!r}): "
                                 f"{_ATTENTION}")

    def reset_attention_backend(self) -> None:
        """Nothing to reset: weftd's attention is not diffusers'."""

    def unload(self) -> None:
        """Unload the model from weftd (other users of it lose it too)."""
        self._client.unload_model(self.model_name)

    def close(self) -> None:
        """Close the connection (the model stays resident)."""
        self._client.close()

    def __enter__(self: _T) -> _T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the forward job

    def _forward_job(self, inputs: Mapping[str, torch.Tensor],
                     out: Mapping[str, torch.Tensor]) -> ForwardOutput:
        """One forward job on the resident model, waited for: its outputs
        written into `out`. A daemon that went away (the connection
        closed, or none is up) or that no longer holds the model is
        recovered from once (_recover), and the job sent again."""
        return _ForwardCall(self, inputs, out).wait()

    def _forward(self, inputs: Dict[str, torch.Tensor], raw: torch.Tensor, out_name: str,
                 like: torch.Tensor, given: Tuple[Optional[torch.Tensor], ...],
                 return_dict: bool) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """The forward of `inputs` into `raw` (the output `out_name`) as
        diffusers returns it: waited for here, or, with overlap_forwards,
        sent and returned at once as a _PendingTensor (its inputs copied
        where they share memory with the caller's tensors `given`)."""
        if not self._overlap_forwards:
            self._forward_job(inputs, {out_name: raw})
            return self._result(raw, like, return_dict)
        call = _ForwardCall(self, _private(inputs, *given), {out_name: raw})
        sample = _PendingTensor.make(call, raw, like)
        if not return_dict:
            return (sample,)
        return Transformer2DModelOutput(sample=sample)

    def _recover(self, e: Exception) -> bool:
        """After a forward failed with `e`: when the daemon went away,
        connect again (ConnectError when it is not back within the connect
        timeout); when it no longer holds the model, load it again from
        the path it was loaded from (or raise, with reload=False). True
        when the forward should be sent again; False when `e` stands (an
        argument error about a model that is resident)."""
        lost = isinstance(e, (ConnectionClosedError, ConnectError))
        if lost:
            old = self._client
            self._client = old.reopen()
            old.close()
            try:
                self._client.hello()
            except ConnectError as ce:
                raise ConnectError(ce.code, f"{ce.message} (the daemon serving "
                                   f"{self.model_name!r} went away: restart it; this "
                                   "transformer reconnects at its next call)") from e
        m = next((x for x in self._client.list_models() if x.name == self.model_name), None)
        if m is not None:
            return lost
        path = self.model_info.path
        if not self._reload:
            raise RuntimeError(
                f"weftd at {self._client.endpoint} no longer holds model {self.model_name!r} "
                "(it restarted, or the model was unloaded): load it again (python -m weft "
                f"load {self.model_name} {path}), or construct the transformer with "
                "reload=True") from e
        log.warning("weftd at %s no longer holds model %r: loading it again from %r",
                    self._client.endpoint, self.model_name, path)
        self.model_info = self._attach_or_load(path)
        self._schema = self.model_info.schema
        return True

    def _result(self, sample: torch.Tensor, like: torch.Tensor, return_dict: bool
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """The forward's output as diffusers returns it: in the latents'
        (`like`'s) dtype, on their device."""
        sample = sample.to(device=like.device, dtype=like.dtype)
        if not return_dict:
            return (sample,)
        return Transformer2DModelOutput(sample=sample)


for _name, _why in _REFUSED.items():
    setattr(_WeftTransformer, _name, _refusal(_name, _why))


class WeftFluxTransformer(_WeftTransformer, FluxTransformer2DModel):
    """diffusers' FluxTransformer2DModel, served by weftd (the arguments
    are _WeftTransformer's)."""

    _family = "flux"
    _diffusers_class = FluxTransformer2DModel

    def forward(self, hidden_states: torch.Tensor,
                encoder_hidden_states: Optional[torch.Tensor] = None,
                pooled_projections: Optional[torch.Tensor] = None,
                timestep: Optional[torch.Tensor] = None,
                img_ids: Optional[torch.Tensor] = None,
                txt_ids: Optional[torch.Tensor] = None,
                guidance: Optional[torch.Tensor] = None,
                joint_attention_kwargs: Optional[Dict[str, Any]] = None,
                controlnet_block_samples: Any = None,
                controlnet_single_block_samples: Any = None,
                return_dict: bool = True,
                controlnet_blocks_repeat: bool = False,
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """FluxTransformer2DModel.forward's arguments and result, computed by
        weftd: one forward job on the resident model."""
        _check_attention_kwargs(joint_attention_kwargs, "joint_attention_kwargs")
        if controlnet_block_samples is not None or controlnet_single_block_samples is not None:
            raise NotServedError("weftd does not serve controlnet residuals "
                                 "(controlnet_block_samples / controlnet_single_block_samples)")
        missing = [n for n, v in (("encoder_hidden_states", encoder_hidden_states),
                                  ("pooled_projections", pooled_projections),
                                  ("timestep", timestep), ("img_ids", img_ids),
                                  ("txt_ids", txt_ids)) if v is None]
        if missing:
            raise ValueError(f"WeftFluxTransformer.forward: {', '.join(missing)} required")
        assert encoder_hidden_states is not None and pooled_projections is not None
        assert timestep is not None and img_ids is not None and txt_ids is not None
        cfg = self.config
        if guidance is not None and not cfg.guidance_embeds:
            raise ValueError("guidance given to a model without guidance_embeds")
        if guidance is None and cfg.guidance_embeds:
            raise ValueError("the model has guidance_embeds: pass guidance")
        # diffusers' deprecated 3-D ids: it takes the first batch entry
        if txt_ids.ndim == 3:
            log.warning("Passing `txt_ids` 3d torch.Tensor is deprecated.")
            txt_ids = txt_ids[0]
        if img_ids.ndim == 3:
            log.warning("Passing `img_ids` 3d torch.Tensor is deprecated.")
            img_ids = img_ids[0]

        act = _wire_dtype(hidden_states)
        b = _batch({"hidden_states": hidden_states, "encoder_hidden_states": encoder_hidden_states,
                    "pooled_projections": pooled_projections, "timestep": timestep,
                    "guidance": guidance})
        # diffusers casts timestep and guidance to hidden_states' dtype
        # before scaling them by 1000: do the same cast here
        inputs = {"hidden_states": _host(_expand(hidden_states, b), act),
                  "encoder_hidden_states": _host(_expand(encoder_hidden_states, b)),
                  "pooled_projections": _host(_expand(pooled_projections, b)),
                  "timestep": _host(_expand(timestep, b), act),
                  "img_ids": _host(img_ids), "txt_ids": _host(txt_ids)}
        if guidance is not None:
            inputs["guidance"] = _host(_expand(guidance, b), act)
        p = cfg.patch_size
        out_ch = (cfg.out_channels or cfg.in_channels) * p * p
        output = torch.empty((b, hidden_states.shape[1], out_ch), dtype=act)
        return self._forward(inputs, output, "output", hidden_states,
                             (hidden_states, encoder_hidden_states, pooled_projections,
                              timestep, img_ids, txt_ids, guidance), return_dict)


def _wan_inputs(schema: ModelSchema, patch_size: Tuple[int, ...],
                hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor,
                encoder_hidden_states_image: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """WanTransformer3DModel.forward's tensors as the named inputs of the
    model's schema, as CPU tensors of weft dtypes.

    Every batched input has batch B (the broadcast of theirs: _batch) or
    1, repeated to B.
    timestep: (B) as the pipeline passes it (a scalar or one value for
    every batch entry is expanded to B), or Wan 2.2 TI2V's (B, S), one per
    video token (S = F/p_t * H/p_h * W/p_w). A (B, S) whose rows are each
    one value is sent as `timestep` (B) (diffusers then computes the same
    modulation for every token: TI2V's text-to-video steps), any other as
    the schema's `timestep_tokens`. Always float32: the model's sinusoidal
    embedding computes in float32 from it.
    encoder_hidden_states_image: (B, S_img, image_dim) of Wan 2.1 I2V, or
    FLF2V's (2 B, 257, image_dim) (the first and last frames' tokens of each
    sample in consecutive rows), viewed as the schema's (B, 514, image_dim)
    as diffusers' image embedder views it; sent when the schema lists it,
    else NotServedError.
    """
    img = encoder_hidden_states_image
    if img is not None:
        want = schema.input("encoder_hidden_states_image")
        if want is None:
            raise NotServedError(
                "weftd's Wan forward of this model takes no encoder_hidden_states_image "
                "(image embeddings; its schema takes "
                + ", ".join(x.name for x in schema.inputs) + "): it is not an "
                "image-to-video model")
        fixed = want.shape[1] if want.rank > 1 and isinstance(want.shape[1], int) else 0
        if fixed and img.ndim == 3 and img.shape[1] != fixed:
            img = img.reshape(-1, fixed, img.shape[2])   # FLF2V: (2 B, 257, D) -> (B, 514, D)
    b = _batch({"hidden_states": hidden_states, "timestep": timestep,
                "encoder_hidden_states": encoder_hidden_states,
                "encoder_hidden_states_image": img})
    t = _expand(timestep.detach(), b)
    name = "timestep"
    if t.ndim == 2:
        if bool((t == t[:, :1]).all()):
            t = t[:, 0]
        elif schema.input("timestep_tokens") is not None:
            name = "timestep_tokens"
        else:
            raise NotServedError(
                f"this model's schema takes no per-token timestep, and a "
                f"{tuple(t.shape)} timestep whose values differ between tokens was given")
    inputs = {"hidden_states": _host(_expand(hidden_states, b)),
              name: _host(t, torch.float32),
              "encoder_hidden_states": _host(_expand(encoder_hidden_states, b))}
    if img is not None:
        inputs["encoder_hidden_states_image"] = _host(_expand(img, b))
    return inputs


class WeftWanTransformer(_WeftTransformer, WanTransformer3DModel):
    """diffusers' WanTransformer3DModel, served by weftd (the arguments are
    _WeftTransformer's). For Wan 2.2's two
    experts, make one per resident model and pass them as the pipeline's
    `transformer` and `transformer_2`.

    The inputs a forward sends are decided by the model's schema as the
    daemon reported it at construction (`model_info.schema`):
    encoder_hidden_states_image when the schema lists it, a per-token
    timestep as timestep_tokens (_wan_inputs)."""

    _family = "wan"
    _diffusers_class = WanTransformer3DModel
    _needs_schema = True

    @classmethod
    def _from_daemon(cls, theirs: ModelConfig) -> Dict[str, Any]:
        # weftd reports qk_norm as a flag (its one norm, or none), and
        # diffusers' None of the image fields as 0
        cfg = dict(theirs)
        if isinstance(cfg.get("qk_norm"), bool):
            cfg["qk_norm"] = "rms_norm_across_heads" if cfg["qk_norm"] else None
        for k in ("image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            if cfg.get(k) == 0:
                cfg[k] = None
        return cfg

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor,
                encoder_hidden_states_image: Optional[torch.Tensor] = None,
                return_dict: bool = True,
                attention_kwargs: Optional[Dict[str, Any]] = None,
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """WanTransformer3DModel.forward's arguments and result, computed by
        weftd: one forward job on the resident model. hidden_states (B,
        in_channels, F, H, W), timestep (B) (or (B, S), see _wan_inputs),
        encoder_hidden_states (B, S_txt, text_dim); the result's sample is
        (B, out_channels, F, H, W) in hidden_states' dtype."""
        _check_attention_kwargs(attention_kwargs, "attention_kwargs")
        cfg = self.config
        schema = self._schema
        assert schema is not None      # _needs_schema: checked at construction
        inputs = _wan_inputs(schema, tuple(cfg.patch_size), hidden_states, timestep,
                             encoder_hidden_states, encoder_hidden_states_image)
        hs = inputs["hidden_states"]
        b, _, f, h, w = hs.shape
        out_name = schema.outputs[0].name
        output = torch.empty((b, cfg.out_channels or cfg.in_channels, f, h, w), dtype=hs.dtype)
        return self._forward(inputs, output, out_name, hidden_states,
                             (hidden_states, timestep, encoder_hidden_states,
                              encoder_hidden_states_image), return_dict)
