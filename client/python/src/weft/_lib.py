"""_lib.py — libweft loaded with ctypes: the structs of include/weft.h and
the prototypes of its functions. Private to the package; nothing here
speaks the protocol (libweft does: its codec, validation and zero-copy
send are the only ones).

Where libweft.so comes from, first found wins:
  1. $WEFT_LIB: the library file itself, or a folder holding it. When set,
     nothing else is tried (a wrong value is an error, not a fallback).
  2. A build tree: $WEFT_BUILD_DIR/client, and the build/client folder of
     the checkout this file lives in (when run from source). Never the
     current directory: a library planted in ./build/client of whatever
     folder a user runs Python in would run as that user.
  3. The installed prefix: `pkg-config --variable=libdir weft`, this
     Python's prefix, /usr/local/lib, /usr/lib and its multiarch folder,
     then the system loader's own search (ldconfig cache, LD_LIBRARY_PATH).

The structs mirror weft.h field for field; tests/python/test_binding.py
compiles a C program that prints their sizes and offsets and compares.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Iterator, Optional

WF_MAX_RANK = 8
WF_STATUS_MAX_DEVICES = 64
WF_STATUS_MAX_NODES = 16
WF_STATUS_MAX_CODES = 32
WF_STATUS_MAX_OPS = 4
WF_TP_GLOB_MAX = 128
WF_TP_MAX_BLOCKS = 8
WF_TP_MAX_RULES = 64
WF_MODEL_NAME_MAX = 64
WF_MODEL_PATH_LEN = 256
WF_MODEL_NODES_LEN = 256
WF_MODELS_MAX = 16

WF_DTYPE_F32 = 0
WF_DTYPE_F16 = 1
WF_DTYPE_BF16 = 2

c_int = ctypes.c_int
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_char = ctypes.c_char
c_float = ctypes.c_float


class wf_tensor_t(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", c_int), ("rank", c_int),
                ("shape", c_i64 * WF_MAX_RANK)]


class wf_hello_info_t(ctypes.Structure):
    _fields_ = [("protocol", c_u32), ("weft_version", c_char * 32),
                ("backend", c_char * 16), ("devices", c_u32),
                ("max_header_bytes", c_u64), ("max_tensor_bytes", c_u64),
                ("max_tensors", c_u32)]


class wf_device_info_t(ctypes.Structure):
    _fields_ = [("index", c_u32), ("name", c_char * 32), ("memory_total", c_u64),
                ("memory_used", c_u64), ("jobs_served", c_u64), ("busy", c_u32),
                ("rank", c_u32), ("coords", c_u32 * 4)]


class wf_mesh_degrees_t(ctypes.Structure):
    _fields_ = [("dp", c_u32), ("ring", c_u32), ("ulysses", c_u32), ("tp", c_u32)]


class wf_node_info_t(ctypes.Structure):
    _fields_ = [("name", c_char * 64), ("state", c_char * 16), ("first_rank", c_u32),
                ("ranks", c_u32)]


class wf_code_count_t(ctypes.Structure):
    _fields_ = [("code", c_u32), ("count", c_u64)]


class wf_op_counters_t(ctypes.Structure):
    _fields_ = [("op", c_char * 16), ("served", c_u64), ("failed", c_u64),
                ("p50_us", c_u64), ("p99_us", c_u64), ("max_us", c_u64)]


class wf_status_counters_t(ctypes.Structure):
    _fields_ = [("present", c_u32), ("refused_count", c_u32),
                ("refused", wf_code_count_t * WF_STATUS_MAX_CODES),
                ("failed_count", c_u32),
                ("failed", wf_code_count_t * WF_STATUS_MAX_CODES),
                ("op_count", c_u32), ("ops", wf_op_counters_t * WF_STATUS_MAX_OPS),
                ("reconfigurations", c_u64), ("reconfigurations_failed", c_u64),
                ("reconfigure_ms", c_u64), ("nodes_lost", c_u64),
                ("handshakes_refused", c_u64), ("handshakes_admitted", c_u64)]


class wf_status_info_t(ctypes.Structure):
    _fields_ = [("weft_version", c_char * 32), ("backend", c_char * 16),
                ("epoch", c_u64), ("uptime_ms", c_u64), ("queue_depth", c_u32),
                ("queue_capacity", c_u32), ("in_flight", c_u32),
                ("jobs_served", c_u64), ("jobs_failed", c_u64),
                ("requests_rejected", c_u64), ("rss_bytes", c_u64),
                ("mesh", wf_mesh_degrees_t), ("reconfiguring", c_u32),
                ("device_count", c_u32),
                ("devices", wf_device_info_t * WF_STATUS_MAX_DEVICES),
                ("role", c_char * 16), ("coordinator", c_char * 64),
                ("cluster_state", c_char * 24), ("world_epoch", c_u64),
                ("world_size", c_u32), ("world_id", c_char * 40),
                ("node_count", c_u32), ("nodes", wf_node_info_t * WF_STATUS_MAX_NODES),
                ("counters", wf_status_counters_t)]


class wf_attention_opts_t(ctypes.Structure):
    _fields_ = [("scale", c_float), ("causal", c_int), ("devices", c_u32),
                ("rotate_method", c_int), ("convert_to_fp32", c_int),
                ("ring_anything", c_int), ("ulysses_anything", c_int),
                ("load_balance", c_int), ("deadline_ms", c_u32), ("precision", c_int)]


class wf_job_result_t(ctypes.Structure):
    _fields_ = [("status", c_int), ("epoch", c_u64), ("queue_us", c_u64),
                ("compute_us", c_u64), ("devices", c_u32), ("cache", c_u32)]


class wf_tp_rule_t(ctypes.Structure):
    _fields_ = [("glob", c_char * WF_TP_GLOB_MAX), ("style", c_int),
                ("n_blocks", c_u32), ("blocks", c_u32 * WF_TP_MAX_BLOCKS)]


class wf_load_opts_t(ctypes.Structure):
    _fields_ = [("plan", ctypes.POINTER(wf_tp_rule_t)), ("n_plan", c_u32),
                ("weights_already_sharded", c_int)]


WF_MODEL_CONFIG_MAX = 32
WF_MODEL_CONFIG_KEY_MAX = 40
WF_MODEL_CONFIG_VALUES = 8
WF_CONFIG_INT = 0
WF_CONFIG_FLAG = 1
WF_CONFIG_LIST = 2
WF_SCHEMA_NAME_MAX = 32
WF_SCHEMA_MAX_INPUTS = 16
WF_SCHEMA_MAX_OUTPUTS = 4


class wf_model_config_entry_t(ctypes.Structure):
    _fields_ = [("key", c_char * WF_MODEL_CONFIG_KEY_MAX), ("kind", c_int), ("n", c_u32),
                ("v", c_i64 * WF_MODEL_CONFIG_VALUES)]


class wf_model_config_t(ctypes.Structure):
    _fields_ = [("present", c_u32), ("n", c_u32),
                ("e", wf_model_config_entry_t * WF_MODEL_CONFIG_MAX)]


class wf_schema_dim_t(ctypes.Structure):
    _fields_ = [("size", c_i64), ("sym", c_char * WF_SCHEMA_NAME_MAX)]


class wf_schema_tensor_t(ctypes.Structure):
    _fields_ = [("name", c_char * WF_SCHEMA_NAME_MAX), ("dtypes", c_u32), ("optional", c_u32),
                ("rank", c_u32), ("dim", wf_schema_dim_t * WF_MAX_RANK)]


class wf_model_schema_t(ctypes.Structure):
    _fields_ = [("n_inputs", c_u32), ("n_outputs", c_u32),
                ("inputs", wf_schema_tensor_t * WF_SCHEMA_MAX_INPUTS),
                ("outputs", wf_schema_tensor_t * WF_SCHEMA_MAX_OUTPUTS)]


class wf_model_info_t(ctypes.Structure):
    _fields_ = [("name", c_char * WF_MODEL_NAME_MAX), ("path", c_char * WF_MODEL_PATH_LEN),
                ("family", c_char * 32), ("state", c_char * 16), ("dtype", c_char * 8),
                ("params", c_u64), ("bytes_total", c_u64), ("bytes_loaded", c_u64),
                ("host_bytes", c_u64), ("rank_bytes", c_u64), ("tp", c_u32),
                ("sharded_input", c_u32), ("load_ms", c_u64), ("device", c_char * 16),
                ("compute", c_char * 8), ("host_pinned", c_u32),
                ("nodes", c_char * WF_MODEL_NODES_LEN), ("config", wf_model_config_t),
                ("schema", wf_model_schema_t)]


_TP = ctypes.POINTER(wf_tensor_t)


class wf_forward_opts_t(ctypes.Structure):
    _fields_ = [("deadline_ms", c_u32), ("precision", c_int), ("split_batch", c_u32),
                ("session", c_u64), ("step", c_u64), ("cache_threshold", ctypes.c_double)]


class wf_named_tensor_t(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("tensor", _TP)]


# Every struct the package mirrors, by its weft.h name: the ABI test
# compares sizeof / offsetof of each with a C compiler's.
STRUCTS = {cls.__name__: cls for cls in (
    wf_tensor_t, wf_hello_info_t, wf_device_info_t, wf_mesh_degrees_t,
    wf_node_info_t, wf_code_count_t, wf_op_counters_t, wf_status_counters_t,
    wf_status_info_t, wf_attention_opts_t, wf_job_result_t, wf_tp_rule_t,
    wf_load_opts_t, wf_model_config_entry_t, wf_model_config_t, wf_schema_dim_t,
    wf_schema_tensor_t, wf_model_schema_t, wf_model_info_t, wf_forward_opts_t,
    wf_named_tensor_t)}

_SONAMES = ("libweft.so.0", "libweft.so")


def _in_dir(d: Path) -> Iterator[Path]:
    for n in _SONAMES:
        yield d / n


def _candidates() -> Iterator[Path | str]:
    build = os.environ.get("WEFT_BUILD_DIR")
    if build:
        yield from _in_dir(Path(build) / "client")
    here = Path(__file__).resolve()
    if len(here.parents) > 4 and here.parents[3].name == "client" and \
            (here.parents[4] / "include" / "weft.h").is_file():
        yield from _in_dir(here.parents[4] / "build" / "client")
    if shutil.which("pkg-config"):
        try:
            libdir = subprocess.run(["pkg-config", "--variable=libdir", "weft"],
                                    capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            libdir = ""
        if libdir:
            yield from _in_dir(Path(libdir))
    multiarch = sysconfig.get_config_var("MULTIARCH") or ""
    for d in (Path(sys.prefix) / "lib", Path("/usr/local/lib"),
              Path("/usr/local/lib") / multiarch, Path("/usr/lib") / multiarch,
              Path("/usr/lib")):
        yield from _in_dir(d)
    found = ctypes.util.find_library("weft")
    if found:
        yield found
    yield "libweft.so.0"   # the system loader's search


def _find() -> tuple[ctypes.CDLL, str]:
    env = os.environ.get("WEFT_LIB")
    if env:
        p = Path(env)
        tries = list(_in_dir(p)) if p.is_dir() else [p]
        errors = []
        for t in tries:
            try:
                return ctypes.CDLL(str(t)), str(t)
            except OSError as e:
                errors.append(f"{t}: {e}")
        raise ImportError("weft: cannot load libweft from WEFT_LIB=" + env + ": " +
                          "; ".join(errors))
    tried = []
    for c in _candidates():
        if isinstance(c, Path) and not c.is_file():
            tried.append(str(c))
            continue
        try:
            return ctypes.CDLL(str(c)), str(c)
        except OSError as e:
            tried.append(f"{c} ({e})")
    raise ImportError(
        "weft: libweft.so not found. Build it (cmake --build build) and set "
        "WEFT_LIB=/path/to/build/client/libweft.so, or WEFT_BUILD_DIR to the build "
        "folder, or install it (cmake --install build). Tried: " + ", ".join(tried))


lib, path = _find()

_P = ctypes.c_void_p
_CP = ctypes.c_char_p


def _proto(name: str, restype: Any, *argtypes: Any, optional: bool = False) -> Optional[Any]:
    fn = getattr(lib, name, None)
    if fn is None:
        if optional:
            return None
        raise ImportError(f"weft: {path} has no {name}: libweft too old for this package")
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_proto("wf_status_name", _CP, c_int)
_proto("wf_status_str", _CP, c_int)
_proto("wf_dtype_size", ctypes.c_size_t, c_int)
_proto("wf_dtype_name", _CP, c_int)
_proto("wf_tensor_numel", c_i64, _TP)
_proto("wf_client_connect", c_int, _CP, c_int, ctypes.POINTER(_P))
_proto("wf_client_connect_curve", c_int, _CP, c_int, _CP, _CP, ctypes.POINTER(_P))
_proto("wf_client_destroy", None, ctypes.POINTER(_P))
_proto("wf_client_last_error", _CP, _P)
_proto("wf_hello", c_int, _P, ctypes.POINTER(wf_hello_info_t))
_proto("wf_client_has_feature", c_int, _P, _CP)
_proto("wf_status", c_int, _P, ctypes.POINTER(wf_status_info_t))
_proto("wf_reconfigure", c_int, _P, ctypes.POINTER(wf_mesh_degrees_t), ctypes.POINTER(c_u64))
_proto("wf_attention", c_int, _P, _TP, _TP, _TP, ctypes.POINTER(wf_attention_opts_t), _TP,
       _P, ctypes.POINTER(wf_job_result_t))
_proto("wf_attention_submit", c_int, _P, _TP, _TP, _TP, ctypes.POINTER(wf_attention_opts_t),
       _TP, _P, ctypes.POINTER(_P))
_proto("wf_job_poll", c_int, _P, _P)
_proto("wf_job_wait", c_int, _P, _P, c_int)
_proto("wf_job_result", c_int, _P, ctypes.POINTER(wf_job_result_t))
_proto("wf_job_error", _CP, _P)
_proto("wf_cancel", c_int, _P, _P)
_proto("wf_job_destroy", None, _P, ctypes.POINTER(_P))
_proto("wf_tp_style_name", _CP, c_int)
_proto("wf_load_model", c_int, _P, _CP, _CP, ctypes.POINTER(wf_load_opts_t),
       ctypes.POINTER(wf_model_info_t))
_proto("wf_unload_model", c_int, _P, _CP)
_proto("wf_list_models", c_int, _P, ctypes.POINTER(wf_model_info_t), ctypes.c_size_t,
       ctypes.POINTER(ctypes.c_size_t))
_NTP = ctypes.POINTER(wf_named_tensor_t)
# Every forward goes through the named form (FLUX's too: Client.forward
# builds its named tensors); wf_forward / _ex / _submit stay libweft's
# wrappers for C callers.
_proto("wf_forward_named", c_int, _P, _CP, _NTP, ctypes.c_size_t, _NTP, ctypes.c_size_t,
       ctypes.POINTER(wf_forward_opts_t), ctypes.POINTER(wf_job_result_t))
_proto("wf_forward_named_submit", c_int, _P, _CP, _NTP, ctypes.c_size_t, _NTP,
       ctypes.c_size_t, ctypes.POINTER(wf_forward_opts_t), ctypes.POINTER(_P))
# Later 0.4 additions (job ids, cancel by id): None where this libweft
# predates them; the methods that need one say so when called.
job_id = _proto("wf_job_id", c_u64, _P, optional=True)
_version = _proto("wf_version", _CP, optional=True)
cancel_id = _proto("wf_cancel_id", c_int, _P, c_u64, optional=True)
# 0.6: a connect timeout apart from the reply timeout
set_connect_timeout = _proto("wf_client_set_connect_timeout", c_int, _P, c_int, optional=True)
# 0.7: denoising sessions
end_session = _proto("wf_end_session", c_int, _P, c_u64, ctypes.POINTER(c_u64),
                     ctypes.POINTER(c_u64), optional=True)


def version() -> str:
    """libweft's version ("0.7.0"); "" from a libweft without wf_version."""
    return cstr(_version()) if _version is not None else ""


def need(fn: Optional[Any], name: str) -> Any:
    """fn, or NotImplementedError naming the missing libweft function."""
    if fn is None:
        raise NotImplementedError(f"{path} has no {name}: a libweft older than this "
                                  "package (rebuild or reinstall libweft)")
    return fn


def cstr(b: bytes) -> str:
    """A fixed char array's bytes as text (C strings from the daemon are
    ASCII / UTF-8; anything else is shown escaped, never raises)."""
    return b.decode("utf-8", "backslashreplace")
