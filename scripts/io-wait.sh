#!/usr/bin/env bash
# What waiting for a TCP answer costs, by the way the waiter waits: blocking read, epoll,
# poll, a blocking MSG_PEEK, and a blocking recv, each a 96-byte ping-pong client against
# the same echo (`remora bench echo`), taking turns in rounds of 100 (the client pinned to
# CPU 0, the echo to CPU 1, as `bench soft --placement split`). The figures behind the soft
# RNIC's blocking receive (crates/exec/src/reactor/blocking.rs). Needs a C compiler.
#
#   scripts/io-wait.sh [RUNS] [ROUNDS]     default 3 runs of 60 rounds
set -euo pipefail

cd "$(dirname "$0")/.."
runs=${1:-3}
rounds=${2:-60}
command -v cc >/dev/null || {
    echo "$0: needs a C compiler (apt-get install gcc)" >&2
    exit 1
}
cargo build --release -q -p remora-cli
dir=$(mktemp -d "${TMPDIR:-/tmp}/remora-io-wait.XXXXXX")
echo_pid=""
trap '[ -n "$echo_pid" ] && kill "$echo_pid" 2>/dev/null; rm -rf "$dir"' EXIT
cc -O2 -o "$dir/pingpong" scripts/io-wait-pingpong.c
taskset -c 1 target/release/remora bench echo --listen 127.0.0.1:0 >"$dir/echo.log" 2>&1 &
echo_pid=$!
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's/^listening on .*://p' "$dir/echo.log")
    [ -n "$port" ] && break
    sleep 0.05
done
[ -n "$port" ] || {
    cat "$dir/echo.log" >&2
    echo "$0: the echo did not start" >&2
    exit 1
}
for run in $(seq 1 "$runs"); do
    echo "run $run of $runs:"
    taskset -c 0 "$dir/pingpong" "$port" "$rounds"
done
