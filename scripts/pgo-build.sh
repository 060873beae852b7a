#!/usr/bin/env bash
# Builds `remora` with profile-guided optimisation (PGO) into target/pgo/release/remora,
# then, where LLVM's BOLT is installed, lays that binary's code out again by a profile of
# the same training (BOLT's own instrumentation: no hardware counters needed).
#
# Why: the soft RNIC's cost per round trip is spread over a wide code path (model, runtime,
# library, executor) and is bound by instruction fetch, not by any one function
# (docs/results/soft-rnic.md). PGO lets the compiler lay the hot path out contiguously and
# move cold code away, which a plain release build cannot know to do; BOLT does the same
# across the whole linked binary (functions ordered by calls, each split into hot and cold
# parts), which the compiler, one codegen unit at a time, cannot.
#
# Training runs what users run, not the benchmark: `remora serve` in each of the twelve
# server configurations with `remora remotelog --server` against it, a pipelined WRITE
# stream (`bench soft --stream-only`), and the simulator's RemoteLog. The profile then
# steers a second build. The binary says it is a PGO build in `bench soft`'s header.
#
# Usage: scripts/pgo-build.sh            (about 5 minutes on 2 cores with a warm cargo cache, 8 from cold)
# Needs: rustup's llvm-tools component (installed here if missing, for llvm-profdata).
# Optional: llvm-bolt and merge-fdata (Debian: apt-get install bolt-19); without them the
# binary is PGO only, and the script says so. `bench soft` names the build in its header.
set -euo pipefail
cd "$(dirname "$0")/.."

host="$(rustc -vV | sed -n 's/^host: //p')"
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  echo "==> rustup component add llvm-tools (for llvm-profdata)"
  rustup component add llvm-tools
fi

# BOLT: on PATH, or the newest of Debian's versioned LLVM installs.
bolt="$(command -v llvm-bolt || ls /usr/lib/llvm-*/bin/llvm-bolt 2>/dev/null | sort -V | tail -n 1 || true)"
merge_fdata=""
[ -n "$bolt" ] && merge_fdata="$(dirname "$bolt")/merge-fdata"
if [ -n "$bolt" ] && [ ! -x "$merge_fdata" ]; then
  merge_fdata="$(command -v merge-fdata || true)"
fi
if [ -z "$bolt" ] || [ -z "$merge_fdata" ]; then
  echo "==> llvm-bolt or merge-fdata not found (apt-get install bolt-19): the build is PGO only"
  bolt=""
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

# Runs what users run with binary $1 ($2 names the profile it writes, for the log).
train() {
  local bin=$1 what=$2
  echo "==> training ($what): RemoteLog against a soft-RNIC server in every configuration"
  n=0
  for config in $("$bin" configs | sed -n 's/^| [0-9]* | `\([^`]*\)`.*/\1/p'); do
    n=$((n + 1))
    # The log goes first: the redirection below truncates it only once the background
    # shell gets to it, and until then the wait loop could read the last server's port.
    rm -f "$work/serve.log"
    "$bin" serve --listen 127.0.0.1:0 --config "$config" --pool "$pools/pool-$n" \
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
    "$bin" remotelog --server "$addr" --appends 2000 > /dev/null
    # SIGTERM: the server shuts down cleanly and writes its profile.
    kill -TERM "$server_pid"
    wait "$server_pid"
    server_pid=""
    rm -f "$pools/pool-$n"
  done

  echo "==> training ($what): a pipelined WRITE stream, and the simulator's RemoteLog"
  "$bin" bench soft --stream-only --stream 20000 --pool-dir "$pools" > /dev/null
  "$bin" remotelog --appends 500 --out "$work/remotelog" > /dev/null
}

train "$gen" "PGO"

"$profdata" merge -o "$work/remora.profdata" "$work"/raw/*.profraw

out=target/pgo/release/remora
build="PGO" link=""
# BOLT rewrites the linked binary, so the link keeps its relocations (--emit-relocs).
if [ -n "$bolt" ]; then
  build="PGO + BOLT" link=" -Clink-args=-Wl,--emit-relocs"
fi
echo "==> optimised build (target/pgo)${link:+, linked for BOLT}"
REMORA_BUILD="$build (scripts/pgo-build.sh)" RUSTFLAGS="-Cprofile-use=$work/remora.profdata$link" \
  cargo build --locked --release -p remora-cli --target-dir target/pgo
if [ -z "$bolt" ]; then
  echo "$out"
  exit 0
fi

echo "==> BOLT: instrumented binary, the same training, then the layout"
"$bolt" "$out" -instrument -o "$work/remora.bolt-inst" \
  --instrumentation-file="$work/bolt.fdata" --instrumentation-file-append-pid > "$work/bolt.log" 2>&1 ||
  { cat "$work/bolt.log" >&2; exit 1; }
train "$work/remora.bolt-inst" "BOLT"
"$merge_fdata" "$work"/bolt.fdata.* > "$work/bolt.fdata" 2> "$work/merge.log" ||
  { cat "$work/merge.log" >&2; exit 1; }
"$bolt" "$out" -o "$work/remora.bolt" -data="$work/bolt.fdata" -reorder-blocks=ext-tsp \
  -reorder-functions=hfsort+ -split-functions -split-all-cold -split-eh -dyno-stats \
  > "$work/bolt.log" 2>&1 || { cat "$work/bolt.log" >&2; exit 1; }
# Over cargo's output: it is the build's product (cargo rebuilds it on the next run, whose
# profile path differs).
mv "$work/remora.bolt" "$out"
echo "$out"
