#!/usr/bin/env bash
# Builds `remora` with profile-guided optimisation (PGO) into target/pgo/release/remora.
#
# Why: the soft RNIC's cost per round trip is spread over a wide code path (model, runtime,
# library, executor) and is bound by instruction fetch, not by any one function
# (docs/results/soft-rnic.md). PGO lets the compiler lay the hot path out contiguously and
# move cold code away, which a plain release build cannot know to do.
#
# Training runs what users run, not the benchmark: `remora serve` in each of the twelve
# server configurations with `remora remotelog --server` against it, a pipelined WRITE
# stream (`bench soft --stream-only`), and the simulator's RemoteLog. The profile then
# steers a second build. The binary says it is a PGO build in `bench soft`'s header.
#
# Usage: scripts/pgo-build.sh            (about 4 minutes on 2 cores with a warm cargo cache, 7 from cold)
# Needs: rustup's llvm-tools component (installed here if missing, for llvm-profdata).
set -euo pipefail
cd "$(dirname "$0")/.."

host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "==> rustup component add llvm-tools (for llvm-profdata)"
  rustup component add llvm-tools
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/remora-pgo-XXXXXX")"
# Pools on tmpfs, as `bench soft` keeps them (seed 000 §4.2 emulated PM with DRAM).
pools="$work"
if [ -d /dev/shm ]; then pools="$(mktemp -d /dev/shm/remora-pgo-XXXXXX)"; fi
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work" "$pools"
}
trap cleanup EXIT

echo "==> instrumented build (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$work/raw" \
  cargo build --locked --release -p remora-cli --target-dir target/pgo-gen
gen=target/pgo-gen/release/remora

echo "==> training: RemoteLog against a soft-RNIC server in every configuration"
n=0
for config in $("$gen" configs | sed -n 's/^| [0-9]* | `\([^`]*\)`.*/\1/p'); do
  n=$((n + 1))
  "$gen" serve --listen 127.0.0.1:0 --config "$config" --pool "$pools/pool-$n" \
    > "$work/serve.log" 2>&1 &
  server_pid=$!
  # The server's first line is `listening on ADDR` (port 0: the kernel picks a free one).
  addr=""
  for _ in $(seq 100); do
    addr="$(sed -n 's/^listening on //p' "$work/serve.log")"
    [ -n "$addr" ] && break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "the $config server did not start:" >&2
    cat "$work/serve.log" >&2
    exit 1
  fi
  "$gen" remotelog --server "$addr" --appends 2000 > /dev/null
  # SIGTERM: the server shuts down cleanly and writes its profile.
  kill -TERM "$server_pid"
  wait "$server_pid"
  server_pid=""
  rm -f "$pools/pool-$n"
done

echo "==> training: a pipelined WRITE stream, and the simulator's RemoteLog"
"$gen" bench soft --stream-only --stream 20000 --pool-dir "$pools" > /dev/null
"$gen" remotelog --appends 500 --out "$work/remotelog" > /dev/null

"$profdata" merge -o "$work/remora.profdata" "$work"/raw/*.profraw

echo "==> optimised build (target/pgo)"
REMORA_BUILD="PGO (scripts/pgo-build.sh)" RUSTFLAGS="-Cprofile-use=$work/remora.profdata" \
  cargo build --locked --release -p remora-cli --target-dir target/pgo
echo "target/pgo/release/remora"
