#!/usr/bin/env bash
# run.sh VENV SCRIPT [ARGS...] — run one Python test with the tests'
# virtual environment (tests/python/make_venv.sh; $WEFT_PY_VENV overrides
# VENV). ctest runs it (tests/python.cmake), with WEFTD, WEFTCTL, WEFT_LIB,
# WEFT_INCLUDE, WEFT_SOURCE and PYTHONPATH set.
#
# Without the venv the test FAILS, naming the command that makes it. Only
# where WEFT_PY_TESTS=skip is set (a developer machine without the venv)
# does it skip (exit 77, ctest's SKIP), and never under CI=true.
set -u
venv=${WEFT_PY_VENV:-$1}
shift
if [ ! -x "$venv/bin/python" ]; then
    if [ "${WEFT_PY_TESTS:-}" = skip ] && [ "${CI:-}" != true ]; then
        echo "SKIP: no Python venv at $venv (WEFT_PY_TESTS=skip)"
        exit 77
    fi
    echo "FAIL: no Python venv at $venv: make it with tests/python/make_venv.sh" \
         "(.ci/deps runs it), or set WEFT_PY_TESTS=skip to skip the Python tests" >&2
    exit 1
fi
here=$(cd "$(dirname "$0")" && pwd)
req="$here/../../bench/requirements-python.txt"
if ! cmp -s "$req" "$venv/weft-requirements.txt"; then
    echo "warning: $venv was not made from the current bench/requirements-python.txt" \
         "(rerun tests/python/make_venv.sh)" >&2
fi
# torch on 1 thread (the daemons have the cores); no model hub, no telemetry
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export HF_HOME="${TMPDIR:-/tmp}/weft-py-hf-$$" PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
"$venv/bin/python" "$@"
rc=$?
rm -rf "$HF_HOME"
exit $rc
