#!/usr/bin/env bash
# test_units.sh — the systemd unit passes `systemd-analyze verify` with no
# output on stderr at all (verify exits 0 on many warnings, so any stderr
# line fails the test), and every hardening line carries a comment.
# Usage: test_units.sh SOURCE_DIR WEFTD
set -euo pipefail
src=$1
weftd=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v systemd-analyze >/dev/null || { echo "systemd-analyze not found"; exit 1; }

# verify checks that ExecStart= points at an executable: aim it at the
# binary just built, keep everything else as shipped.
sed "s|^ExecStart=/usr/local/bin/weftd|ExecStart=$weftd|" \
    "$src/units/weftd.service" > "$work/weftd.service"
grep -q "^ExecStart=$weftd " "$work/weftd.service" || { echo "ExecStart not rewritten"; exit 1; }

if ! systemd-analyze verify --man=no "$work/weftd.service" 2> "$work/stderr"; then
    echo "systemd-analyze verify failed:"; cat "$work/stderr"; exit 1
fi
if [ -s "$work/stderr" ]; then
    echo "systemd-analyze verify printed warnings:"; cat "$work/stderr"; exit 1
fi

# Required properties of the unit.
for line in '^Type=notify$' '^ExecReload=/bin/kill -HUP \$MAINPID$' '^WatchdogSec=' \
            '^RuntimeDirectory=weftd$' '^NoNewPrivileges=yes$' '^ProtectSystem=strict$'; do
    grep -Eq "$line" "$src/units/weftd.service" || { echo "missing: $line"; exit 1; }
done

# Every hardening setting (the block after the "hardening" marker, up to
# [Install]) is preceded by a comment line or by a line of the same key.
awk '
/^# --- hardening/ { on = 1; next }
/^\[Install\]/    { on = 0 }
on && /^[A-Za-z]+=/ {
    key = $0; sub(/=.*/, "", key)
    if (prev !~ /^#/ && prevkey != key) { print "uncommented hardening line: " $0; bad = 1 }
}
{ prev = $0; pk = $0; if (pk ~ /^[A-Za-z]+=/) { sub(/=.*/, "", pk); prevkey = pk } else prevkey = "" }
END { exit bad }
' "$src/units/weftd.service"

# The example configuration is accepted by the daemon as it is (the listen
# endpoint is moved to a temporary path: /run/weftd may not exist here).
sock="$work/w.sock"
if ! "$weftd" --config "$src/units/weftd.conf.example" --listen "ipc://$sock" --check-config; then
    echo "weftd rejected units/weftd.conf.example"; exit 1
fi
echo "units: verify clean, hardening commented, example config accepted"
