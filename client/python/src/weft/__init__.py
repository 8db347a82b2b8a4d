"""weft — Python client of weftd, over libweft (ctypes).

    import numpy as np, weft
    with weft.connect("ipc:///run/weftd/weftd.sock") as c:
        print(c.hello())
        q = np.random.randn(1, 128, 4, 64).astype(np.float32)
        out = c.attention(q, q, q, causal=True).out

Every operation of include/weft.h is a method of Client: hello,
has_feature, status, reconfigure, attention / submit_attention,
forward_named / submit_forward_named (any family's inputs by name, checked
against the model's schema before sending), forward / submit_forward
(FLUX's inputs, or a dict of named ones; a Job: id, poll, wait, cancel,
close), cancel_id, load_model (with progress), unload_model, list_models
(each model's config and schema), model_schema. Tensors are numpy
arrays or CPU torch tensors (bf16: torch.bfloat16, or uint16 bits as
weft.Tensor(a, "bf16")), sent without a copy. Errors raise weft.errors.WeftError subclasses carrying
the status code and the daemon's message. weft.diffusers has FLUX and
Wan transformers served by weftd for diffusers' FluxPipeline and
WanPipeline. `python -m weft` (the `weft` command): a daemon's status and
models, load, unload.

libweft.so is found through $WEFT_LIB, a build tree or the installed
prefix (weft._lib says in which order); weft.library_path says which,
weft.library_version its version.
"""
from ._lib import path as library_path
from ._lib import version as _library_version
from ._tensors import Tensor, bf16_to_f32, f32_to_bf16
from .client import (AttentionOutput, Client, Counters, DeviceInfo, ForwardOutput,
                     HelloInfo, Job, JobResult, Mesh, ModelConfig, ModelInfo, ModelSchema,
                     NodeInfo, OpCounters, StatusInfo, TensorSchema, connect, status_name,
                     status_str, tp_plan_rules)
from .errors import (AbortedError, AuthError, BadArgumentError, BadDtypeError,
                     BadFieldError, BadShapeError, BusyError, CancelledError, ClientError,
                     ConnectError, ConnectionClosedError, DaemonFailure, DeadlineError,
                     DeniedError,
                     FrameMismatchError, InternalError, JobStoppedError, LimitError,
                     MalformedError, MismatchError, NodeLostError, NoMemoryError, NotCoordinatorError,
                     PendingError, ProtocolError, QueueFullError, ReplyTimeoutError,
                     RequestError, RetryableError, ShuttingDownError, TransportError,
                     UnavailableError, UnknownOpError, UnsupportedError, VersionError,
                     WeftError, error_for)

__version__ = "0.7.0"
#: the loaded libweft's version (wf_version; "" from a libweft without it)
library_version: str = _library_version()

__all__ = [
    "AbortedError", "AttentionOutput", "AuthError", "BadArgumentError", "BadDtypeError",
    "BadFieldError", "BadShapeError", "BusyError", "CancelledError", "Client", "ClientError",
    "ConnectError", "ConnectionClosedError", "Counters", "DaemonFailure", "DeadlineError",
    "DeniedError", "DeviceInfo",
    "ForwardOutput", "FrameMismatchError", "HelloInfo", "InternalError", "Job", "JobResult",
    "JobStoppedError", "LimitError", "MalformedError", "MismatchError", "Mesh", "ModelConfig", "ModelInfo",
    "ModelSchema", "NoMemoryError",
    "NodeInfo", "NodeLostError", "NotCoordinatorError", "OpCounters", "PendingError",
    "ProtocolError", "QueueFullError", "ReplyTimeoutError", "RequestError", "RetryableError",
    "ShuttingDownError", "StatusInfo", "Tensor", "TensorSchema", "TransportError", "UnavailableError",
    "UnknownOpError", "UnsupportedError", "VersionError", "WeftError", "bf16_to_f32", "connect", "error_for",
    "f32_to_bf16", "library_path", "library_version", "status_name", "status_str", "tp_plan_rules",
]
