"""python -m weft (also the `weft` command) — a daemon's status and its
resident models, over the binding's Client:

    python -m weft [-e ENDPOINT] status            mesh, devices, queue, jobs
    python -m weft [-e ENDPOINT] models            each model: state, family, path, size
    python -m weft [-e ENDPOINT] load NAME PATH    load PATH (under the model root) as NAME
    python -m weft [-e ENDPOINT] unload NAME

ENDPOINT: -e, else $WEFT_ENDPOINT, else libweft's default. --json prints
the result as JSON. A daemon not there is reported within
--connect-timeout-ms (exit status 2); a refused request with the
daemon's code and message (exit status 1). weftctl does the same and more
from C; this is the Python user's, without a C toolchain.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any, List, Optional

from .client import Client, ModelInfo
from .errors import ConnectError, WeftError

CONNECT_TIMEOUT_MS = 5000


def _model_line(m: ModelInfo) -> str:
    return (f"{m.name:24s} {m.state:10s} {m.family:6s} {m.dtype:5s} "
            f"{m.params / 1e9:8.3f} B params  tp {m.tp}  {m.path}")


def _print(obj: Any, as_json: bool, text: str) -> None:
    if as_json:
        print(json.dumps(obj, default=str, indent=2))
    else:
        print(text)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m weft", description=__doc__.split("\n")[0])
    ap.add_argument("-e", "--endpoint", help="ipc://PATH or tcp://HOST:PORT")
    ap.add_argument("--connect-timeout-ms", type=int, default=CONNECT_TIMEOUT_MS,
                    help="how long to wait for the daemon to answer at all (default 5000)")
    ap.add_argument("--timeout-ms", type=int, default=600_000,
                    help="reply timeout (a load waits as long as reading the checkpoint)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("status", help="the daemon's mesh, devices, queue and jobs")
    sub.add_parser("models", help="the resident models")
    ld = sub.add_parser("load", help="load a model directory (relative to the model root)")
    ld.add_argument("name")
    ld.add_argument("path")
    ul = sub.add_parser("unload", help="unload a resident model")
    ul.add_argument("name")
    a = ap.parse_args(argv)

    try:
        with Client(a.endpoint, a.timeout_ms, connect_timeout_ms=a.connect_timeout_ms) as c:
            c.hello()
            if a.cmd == "status":
                s = c.status()
                m = s.mesh
                _print(dataclasses.asdict(s), a.json,
                       f"weftd {s.weft_version} ({s.backend}) at {c.endpoint}: "
                       f"{len(s.devices)} devices, mesh dp={m.dp} ring={m.ring} "
                       f"ulysses={m.ulysses} tp={m.tp} (epoch {s.epoch}); queue "
                       f"{s.queue_depth}/{s.queue_capacity}, {s.in_flight} in flight; "
                       f"{s.jobs_served} jobs served, {s.jobs_failed} failed; "
                       f"up {s.uptime_ms / 1000:.0f} s")
            elif a.cmd == "models":
                models = c.list_models()
                _print([dataclasses.asdict(x) for x in models], a.json,
                       "\n".join(_model_line(x) for x in models) or "no models")
            elif a.cmd == "load":
                m = c.load_model(a.name, a.path)
                _print(dataclasses.asdict(m), a.json,
                       f"loaded in {m.load_ms} ms: {_model_line(m)}")
            else:
                c.unload_model(a.name)
                _print({"unloaded": a.name}, a.json, f"unloaded {a.name}")
    except ConnectError as e:
        print(f"weft: {e}", file=sys.stderr)
        return 2
    except WeftError as e:
        print(f"weft: {a.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
