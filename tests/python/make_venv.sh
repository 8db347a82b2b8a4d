#!/usr/bin/env bash
# make_venv.sh — the Python tests' virtual environment (tests/python/*.py):
# torch, diffusers, transformers, tokenizers, numpy, ... at the versions
# pinned in bench/requirements-python.txt, from PyPI, in
# ${WEFT_PY_VENV:-$HOME/.cache/weft/venv-python}. .ci/deps runs it.
#
# Kept when it exists and was made from the same requirements file (a copy
# of it, weft-requirements.txt, sits in the venv); made anew otherwise.
# From scratch this downloads about 3.5 GB (torch's CUDA build and its
# nvidia-* wheels: PyPI has no CPU-only torch; the tests use its CPU side)
# and unpacks 5.7 GB: 217 s on the development machine (2 cores, lightly
# loaded; 360 s at load average 11; 2026-12-01). Exit status non-zero when
# it cannot make the venv: the Python tests then fail (they never skip in
# CI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
req="$here/../../bench/requirements-python.txt"
# HOME may be unset under some CI runners: the user's home from passwd then
# (tests/python.cmake finds the same place)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
venv=${WEFT_PY_VENV:-${home:?no HOME and no home directory in passwd}/.cache/weft/venv-python}
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/weft-requirements.txt"; then
    echo "make_venv.sh: $venv is up to date"
    exit 0
fi
# Debian's python3 (python3-venv brings ensurepip); any python3 >= 3.9 will do
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
if ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            python3 python3-venv
        py=/usr/bin/python3
    else
        echo "make_venv.sh: $py has no venv / ensurepip (Debian: apt-get install python3-venv)" >&2
        exit 1
    fi
fi
start=$(date +%s)
echo "make_venv.sh: making $venv from $req (torch from PyPI: ~3.5 GB to download)"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
    -r "$req"
cp "$req" "$venv/weft-requirements.txt"
echo "make_venv.sh: $venv made in $(( $(date +%s) - start )) s"
