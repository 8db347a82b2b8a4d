"""weft_build.py — the PEP 517 build backend of the weft package, on the
standard library alone.

It writes nothing but the archive it is asked for, in the folder pip
names: no build/ folder, no egg-info, nothing in the source tree. It needs
no package to be installed (Python 3.11's tomllib reads pyproject.toml;
older Pythons ask for tomli through get_requires_for_build_*), so a fresh
venv builds and installs it offline, with or without build isolation.

The wheel holds src/weft (every file but caches) and the metadata of
pyproject.toml's [project] table: name, version, description, readme,
requires-python, license, dependencies, optional-dependencies, scripts.
An editable install (pip install -e) is a .pth file naming src/.
Not here: compiled code (libweft.so is built by cmake and found at import
time, see src/weft/_lib.py), sdist extras beyond pyproject, README and src.
"""
from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

HERE = Path(__file__).resolve().parent.parent       # client/python
# archives are the same bytes for the same sources: fixed timestamps
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _project() -> Dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib     # get_requires_for_build_* asked for it
    with open(HERE / "pyproject.toml", "rb") as f:
        return dict(tomllib.load(f)["project"])


def _dist(p: Dict[str, Any]) -> str:
    return f"{p['name'].replace('-', '_')}-{p['version']}"


def _metadata(p: Dict[str, Any]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    for dep in p.get("dependencies", []):
        lines.append(f"Requires-Dist: {dep}")
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        for dep in deps:
            lines.append(f'Requires-Dist: {dep}; extra == "{extra}"')
    body = ""
    readme = p.get("readme")
    if isinstance(readme, str):
        lines.append("Description-Content-Type: text/markdown")
        body = (HERE / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _entry_points(p: Dict[str, Any]) -> Optional[str]:
    scripts = p.get("scripts")
    if not scripts:
        return None
    return "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())


def _package_files() -> Iterator[Tuple[str, Path]]:
    """(name in the wheel, file) for every file of src/weft but caches."""
    src = HERE / "src"
    for path in sorted((src / "weft").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            yield path.relative_to(src).as_posix(), path


def _dist_info(p: Dict[str, Any], tag: str) -> List[Tuple[str, bytes]]:
    info = f"{_dist(p)}.dist-info"
    files = [(f"{info}/METADATA", _metadata(p).encode()),
             (f"{info}/WHEEL", ("Wheel-Version: 1.0\nGenerator: weft_build\n"
                                f"Root-Is-Purelib: true\nTag: {tag}\n").encode())]
    ep = _entry_points(p)
    if ep:
        files.append((f"{info}/entry_points.txt", ep.encode()))
    return files


def _write_wheel(directory: str, members: List[Tuple[str, bytes]], p: Dict[str, Any],
                 tag: str = "py3-none-any") -> str:
    members = members + _dist_info(p, tag)
    record_name = f"{_dist(p)}.dist-info/RECORD"
    record = io.StringIO()
    for name, data in members:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.write(f"{name},sha256={digest.decode()},{len(data)}\n")
    record.write(f"{record_name},,\n")
    members.append((record_name, record.getvalue().encode()))
    filename = f"{_dist(p)}-{tag}.whl"
    with zipfile.ZipFile(Path(directory) / filename, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            zi = zipfile.ZipInfo(name, _ZIP_TIME)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return filename


def _tomli() -> List[str]:
    return [] if sys.version_info >= (3, 11) else ["tomli>=1.1"]


# ---- PEP 517 / PEP 660 hooks ---------------------------------------------

def get_requires_for_build_wheel(config_settings: Any = None) -> List[str]:
    return _tomli()


def get_requires_for_build_sdist(config_settings: Any = None) -> List[str]:
    return _tomli()


def get_requires_for_build_editable(config_settings: Any = None) -> List[str]:
    return _tomli()


def build_wheel(wheel_directory: str, config_settings: Any = None,
                metadata_directory: Optional[str] = None) -> str:
    p = _project()
    return _write_wheel(wheel_directory, [(n, f.read_bytes()) for n, f in _package_files()], p)


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: Optional[str] = None) -> str:
    p = _project()
    pth = (str(HERE / "src") + "\n").encode()
    return _write_wheel(wheel_directory, [(f"{p['name']}.pth", pth)], p)


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    p = _project()
    base = _dist(p)
    names = ["pyproject.toml", "README.md"] + [
        f.relative_to(HERE).as_posix() for sub in ("build_backend", "examples")
        for f in sorted((HERE / sub).glob("*.py"))] + [
        f"src/{n}" for n, _ in _package_files()]
    filename = f"{base}.tar.gz"
    with tarfile.open(Path(sdist_directory) / filename, "w:gz", format=tarfile.PAX_FORMAT) as t:
        for n in names + ["PKG-INFO"]:
            data = _metadata(p).encode() if n == "PKG-INFO" else (HERE / n).read_bytes()
            ti = tarfile.TarInfo(f"{base}/{n}")
            ti.size, ti.mode, ti.mtime = len(data), 0o644, 0
            t.addfile(ti, io.BytesIO(data))
    return filename


__all__ = ["build_editable", "build_sdist", "build_wheel", "get_requires_for_build_editable",
           "get_requires_for_build_sdist", "get_requires_for_build_wheel"]
