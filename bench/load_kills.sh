#!/usr/bin/env bash
# bench/load_kills.sh — the long load run: CLIENTS client
# processes x JOBS checked attention jobs on one weftd cpu:2, KILLS clients
# SIGKILLed mid-stream and RECONFIGS live reconfigurations (the test
# program tests/e2e/test_load_kills.c, which asserts every surviving job
# answered once and correct and the daemon's RSS flat), beside the same
# clients without kills or reconfigurations as the baseline; the two
# alternate, ROUNDS times each; prints a markdown row with the medians,
# spreads and the ratio.
# Usage: bench/load_kills.sh [BUILD_DIR [CLIENTS [JOBS [KILLS [RECONFIGS [ROUNDS]]]]]]
#        (defaults build 48 1000 5 20 3; build with -DCMAKE_BUILD_TYPE=Release)
set -euo pipefail
build=${1:-build}
clients=${2:-48} jobs=${3:-1000} kills=${4:-5} reconfigs=${5:-20} rounds=${6:-3}
t="$build/tests/test_load_kills"
d="$build/daemon/weftd"
rate() { sed -n 's/.*(\([0-9.]*\) jobs\/s).*/\1/p'; }
rss() { sed -n 's/.*daemon RSS \([0-9.]*\) -> \([0-9.]*\) MiB.*/\1 \2/p'; }
slow() { sed -n 's/.*slowest job \([0-9.]*\) ms.*/\1/p'; }
base=() load=() lrss=() lslow=()
for ((r = 0; r < rounds; r++)); do
    for side in a b; do
        first=a; ((r % 2)) && first=b
        if [[ $side == "$first" ]]; then
            out=$("$t" "$d" "$clients" "$jobs" "$kills" "$reconfigs" 2>/dev/null)
            load+=("$(rate <<<"$out")"); lrss+=("$(rss <<<"$out")"); lslow+=("$(slow <<<"$out")")
        else
            out=$("$t" "$d" "$clients" "$jobs" 0 0 2>/dev/null)
            base+=("$(rate <<<"$out")")
        fi
    done
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {printf "%.0f (%.0f - %.0f)", v[int((NR+1)/2)], v[1], v[NR]}'; }
medv() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
ratio=$(awk -v a="$(medv "${load[@]}")" -v b="$(medv "${base[@]}")" 'BEGIN {printf "%.2f", a / b}')
echo "| run | jobs/s, median (min - max) of $rounds | baseline: same clients, no kills, no reconfigurations | ratio |"
echo "|---|---|---|---|"
echo "| $clients clients x $jobs jobs, $kills killed, $reconfigs reconfigurations (every surviving job checked) | $(med "${load[@]}") | $(med "${base[@]}") | ${ratio}x |"
echo
echo "Daemon RSS after warm-up -> after the run (MiB), per loaded round: ${lrss[*]/%/;} slowest job (ms): ${lslow[*]}"
