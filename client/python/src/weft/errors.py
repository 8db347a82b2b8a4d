"""errors.py — weft's exceptions: one class per status code of weft.h,
grouped in families, each carrying the code and the daemon's (or
libweft's) message.

    WeftError                        .code (int), .name ("WF_E_BUSY"), .message
      RequestError      1..9         the request was refused as sent
        MalformedError 1, VersionError 2, LimitError 3, UnknownOpError 4,
        BadFieldError 5, BadDtypeError 6, BadShapeError 7,
        FrameMismatchError 8, BadArgumentError 9 (also a ValueError)
      DeniedError       10           the client's role may not do that
      RetryableError    20..25       the daemon cannot take it now
        QueueFullError 20, NoMemoryError 21, ShuttingDownError 22,
        BusyError 23, NotCoordinatorError 24, UnavailableError 25
      JobStoppedError   26, 27       the job was stopped on purpose
        DeadlineError 26 (also a TimeoutError), CancelledError 27
      MismatchError     28           a cluster node's copy of a model differs
      UnsupportedError  29           the devices cannot serve an option (fp8)
      DaemonFailure     40..42       the daemon or a peer failed
        InternalError 40, AbortedError 41, NodeLostError 42
      ClientError       101..108     raised by libweft itself, never on the wire
        ReplyTimeoutError 101 (also a TimeoutError), ConnectError 102 (also a
        ConnectionError), TransportError 103, ProtocolError 104, PendingError 106,
        AuthError 107, ConnectionClosedError 108 (also a ConnectionError)

`error_for(code, message)` builds the right one; `raise_for(code, msg)`
raises it unless code is 0.
"""
from __future__ import annotations

import builtins
from typing import Dict, NoReturn, Type

from . import _lib


class WeftError(Exception):
    """A weft status other than WF_OK, with its wire code and message."""

    code: int = -1

    def __init__(self, code: int, message: str = "") -> None:
        self.code = code
        self.name = _lib.cstr(_lib.lib.wf_status_name(code))
        self.message = message
        super().__init__(f"{self.name} ({code}): {message}" if message else
                         f"{self.name} ({code}): " +
                         _lib.cstr(_lib.lib.wf_status_str(code)))


class RequestError(WeftError):
    """1..9: the request was refused as sent (nothing ran)."""


class MalformedError(RequestError):
    code = 1


class VersionError(RequestError):
    code = 2


class LimitError(RequestError):
    code = 3


class UnknownOpError(RequestError):
    code = 4


class BadFieldError(RequestError):
    code = 5


class BadDtypeError(RequestError):
    code = 6


class BadShapeError(RequestError):
    code = 7


class FrameMismatchError(RequestError):
    code = 8


class BadArgumentError(RequestError, ValueError):
    code = 9


class DeniedError(WeftError):
    """10: the client's role (a `submit` key, another local user) may not
    reconfigure, load or unload."""
    code = 10


class RetryableError(WeftError):
    """20..25: the daemon cannot take the request now; retry later."""


class QueueFullError(RetryableError):
    code = 20


class NoMemoryError(RetryableError):
    code = 21


class ShuttingDownError(RetryableError):
    code = 22


class BusyError(RetryableError):
    code = 23


class NotCoordinatorError(RetryableError):
    code = 24


class UnavailableError(RetryableError):
    code = 25


class JobStoppedError(WeftError):
    """26, 27: the job was stopped on purpose (deadline, cancel)."""


class DeadlineError(JobStoppedError, builtins.TimeoutError):
    code = 26


class CancelledError(JobStoppedError):
    code = 27


class MismatchError(WeftError):
    """28: load_model on a cluster: a node's files of the model differ from
    the coordinator's (the message names the node and what differs);
    nothing was loaded on any node."""
    code = 28


class UnsupportedError(WeftError):
    """29: the daemon's devices cannot serve an option the job asks for
    (precision="fp8" on a device without fp8 tensor cores, e.g. the CPU,
    or a cluster node without them); the message names the option and the
    device. Also raised by libweft, nothing sent, when the daemon does not
    announce the feature the option needs."""
    code = 29


class DaemonFailure(WeftError):
    """40..42: a failure inside the daemon or of a peer while the job ran."""


class InternalError(DaemonFailure):
    code = 40


class AbortedError(DaemonFailure):
    code = 41


class NodeLostError(DaemonFailure):
    code = 42


class ClientError(WeftError):
    """101..108: raised by libweft itself (transport, timeouts, auth)."""


class ReplyTimeoutError(ClientError, builtins.TimeoutError):
    code = 101


class ConnectError(ClientError, builtins.ConnectionError):
    code = 102


class TransportError(ClientError):
    code = 103


class ProtocolError(ClientError):
    code = 104


class PendingError(ClientError):
    code = 106


class AuthError(ClientError):
    code = 107


class ConnectionClosedError(ClientError, builtins.ConnectionError):
    """108: the connection to the daemon closed (the daemon stopped, or the
    connection was reset) before the reply; raised at once for every
    request waiting on it, and for a new request while no new connection
    is up (nothing sent). After a daemon's shutdown it means the daemon
    never read the request: nothing of it ran."""
    code = 108


BY_CODE: Dict[int, Type[WeftError]] = {
    c.code: c for c in (
        MalformedError, VersionError, LimitError, UnknownOpError, BadFieldError,
        BadDtypeError, BadShapeError, FrameMismatchError, BadArgumentError,
        DeniedError, QueueFullError, NoMemoryError, ShuttingDownError, BusyError,
        NotCoordinatorError, UnavailableError, DeadlineError, CancelledError,
        MismatchError, UnsupportedError, InternalError, AbortedError, NodeLostError, ReplyTimeoutError, ConnectError,
        TransportError, ProtocolError, PendingError, AuthError, ConnectionClosedError)
}


def error_for(code: int, message: str = "") -> WeftError:
    """The exception for status `code` (WeftError itself for a code this
    package does not know, e.g. from a newer daemon)."""
    cls = BY_CODE.get(code, WeftError)
    return cls(code, message)


def raise_for(code: int, message: str = "") -> None:
    """Raise error_for(code, message) unless code is 0 (WF_OK)."""
    if code != 0:
        _raise(code, message)


def _raise(code: int, message: str) -> NoReturn:
    raise error_for(code, message)
