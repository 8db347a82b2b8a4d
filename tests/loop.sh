#!/usr/bin/env bash
# loop.sh — run the test suite N times in a row, optionally beside K
# CPU-burning processes (`sha256sum /dev/zero`), and print one line per
# run and a summary: the check that the suite passes on a loaded machine.
# Usage: tests/loop.sh [-n RUNS] [-k HOGS] [-b BUILD_DIR] [-- CTEST_ARGS...]
#   defaults: 20 runs, 2 hogs, build; ctest runs with -j2 and CTEST_ARGS.
# Each run's output goes to BUILD_DIR/loop/run-N.log; exits non-zero when
# any run failed.
set -euo pipefail
runs=20
hogs=2
build=build
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs=$2; shift 2 ;;
        -k) hogs=$2; shift 2 ;;
        -b) build=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "loop.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
mkdir -p "$build/loop"
pids=()
stop_hogs() {
    if [ ${#pids[@]} -gt 0 ]; then
        kill "${pids[@]}" 2>/dev/null || true
        wait "${pids[@]}" 2>/dev/null || true
    fi
}
trap stop_hogs EXIT
for _ in $(seq 1 "$hogs"); do
    sha256sum /dev/zero > /dev/null &
    pids+=($!)
done
bad=0
start=$SECONDS
for i in $(seq 1 "$runs"); do
    t0=$SECONDS
    log="$build/loop/run-$i.log"
    if ctest --test-dir "$build" --output-on-failure -j2 "$@" > "$log" 2>&1; then
        res=pass
    else
        res=FAIL
        bad=$((bad + 1))
    fi
    summary=$(grep -E 'tests passed|tests failed out of' "$log" | tail -n 1)
    echo "run $i/$runs: $res in $((SECONDS - t0)) s ($summary)"
    if [ "$res" = FAIL ]; then
        grep -E '^\s*[0-9]+ - ' "$log" | sed 's/^/    /' || true
    fi
done
echo "loop: $runs runs beside $hogs CPU hog(s), $bad failed, $((SECONDS - start)) s"
[ "$bad" -eq 0 ]
