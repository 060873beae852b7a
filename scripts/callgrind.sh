#!/usr/bin/env bash
# Instructions per operation of the soft RNIC, counted by callgrind: the stable figure on a
# shared, noisy machine (docs/results/soft-rnic.md quotes these).
#
#   scripts/callgrind.sh append [CONFIG...]   per RemoteLog append, server and client
#   scripts/callgrind.sh stream               per pipelined 64-byte WRITE, server and client
#
# `append`: a `remora serve` for CONFIG (default: DMP+noDDIO+PM-RQWRB and
# DMP+DDIO+DRAM-RQWRB) and `remora remotelog --server` against it, both under callgrind,
# once with 1,000 and once with 3,000 appends per scenario; per append = (total at 3,000 -
# total at 1,000) / (6 scenarios x 2,000), so start-up and connection set-up cancel out.
# `stream`: `remora bench soft --stream-only` at 10,000 and 30,000 WRITEs per run (3 runs
# each), every process under callgrind; per WRITE = the difference / 60,000.
#
# Under valgrind everything runs tens of times slower, so the soft RNIC's 20 µs CPU slice
# would expire where it never does natively; REMORA_CPU_SLICE_US widens it to 20 ms.
# Uses target/release/remora (built here with `cargo build --release`). Env: OUT (where
# the callgrind files go; default a temporary directory, removed at the end unless KEEP=1).
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-}
[ -n "$mode" ] && shift
case "$mode" in
append | stream) ;;
*)
    echo "usage: $0 append [CONFIG...] | stream" >&2
    exit 2
    ;;
esac
command -v valgrind >/dev/null || {
    echo "$0: valgrind is not installed (apt-get install valgrind)" >&2
    exit 1
}
cargo build --release -q -p remora-cli
exe=$PWD/target/release/remora
out=${OUT:-$(mktemp -d /tmp/remora-callgrind.XXXXXX)}
mkdir -p "$out"
if [ -z "${OUT:-}" ] && [ "${KEEP:-0}" != 1 ]; then
    trap 'rm -rf "$out"' EXIT
fi
export REMORA_CPU_SLICE_US=${REMORA_CPU_SLICE_US:-20000}
cg=(valgrind --tool=callgrind --quiet)

# The total instruction count of one callgrind output file.
total() {
    awk '/^(summary|totals):/ { print $2; exit }' "$1"
}

# One `serve` + `remotelog --server` pair: prints "server client" totals.
append_pair() {
    local config=$1 appends=$2 port=$3 tag=$4
    local pool=$out/$tag.pool
    rm -f "$pool"
    "${cg[@]}" --callgrind-out-file="$out/$tag.server" \
        "$exe" serve --listen "127.0.0.1:$port" --pool "$pool" --config "$config" \
        >"$out/$tag.server.log" 2>&1 &
    local server=$!
    # The server is up once it answers a connection (valgrind's start-up takes seconds).
    local i
    for i in $(seq 1 600); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
        kill -0 "$server" 2>/dev/null || {
            echo "$0: the server for $config died:" >&2
            cat "$out/$tag.server.log" >&2
            exit 1
        }
        sleep 0.1
    done
    "${cg[@]}" --callgrind-out-file="$out/$tag.client" \
        "$exe" remotelog --server "127.0.0.1:$port" --appends "$appends" \
        >"$out/$tag.client.log" 2>&1
    kill -TERM "$server"
    wait "$server" || true
    rm -f "$pool"
    echo "$(total "$out/$tag.server") $(total "$out/$tag.client")"
}

if [ "$mode" = append ]; then
    [ $# -gt 0 ] || set -- DMP+noDDIO+PM-RQWRB DMP+DDIO+DRAM-RQWRB
    port=$((7600 + RANDOM % 300))
    printf '| configuration | server instructions per append | client instructions per append |\n|---|---|---|\n'
    for config in "$@"; do
        read -r s1 c1 < <(append_pair "$config" 1000 "$port" "$config.1000")
        read -r s3 c3 < <(append_pair "$config" 3000 "$((port + 1))" "$config.3000")
        printf '| %s | %d | %d |\n' "$config" $(((s3 - s1) / 12000)) $(((c3 - c1) / 12000))
    done
else
    # Every process of the run writes its own file; the server's names `serve` on its
    # command line, the benchmark's (the client) `bench soft`.
    for n in 10000 30000; do
        mkdir -p "$out/stream.$n"
        "${cg[@]}" --trace-children=yes --callgrind-out-file="$out/stream.$n/cg.%p" \
            "$exe" bench soft --stream-only --stream "$n" --placement free \
            >"$out/stream.$n/log" 2>&1
    done
    side() { # $1: run directory, $2: the command-line word that names the side
        local f
        for f in "$1"/cg.*; do
            if grep -q "^cmd:.* $2" "$f"; then
                total "$f"
                return
            fi
        done
        echo "$0: no callgrind file of '$2' in $1" >&2
        exit 1
    }
    s1=$(side "$out/stream.10000" serve)
    s3=$(side "$out/stream.30000" serve)
    c1=$(side "$out/stream.10000" "bench soft")
    c3=$(side "$out/stream.30000" "bench soft")
    printf '| side | instructions per 64-byte WRITE |\n|---|---|\n'
    printf '| server (remora serve, DMP+noDDIO+PM-RQWRB) | %d |\n' $(((s3 - s1) / 60000))
    printf '| client (bench soft, incl. its raw and frame streams) | %d |\n' $(((c3 - c1) / 60000))
fi
