#!/usr/bin/env bash
# Instructions per operation of the soft RNIC, counted by callgrind: the stable figure on a
# shared, noisy machine (docs/results/soft-rnic.md quotes these).
#
#   scripts/callgrind.sh append [CONFIG...]   per RemoteLog append, server and client
#   scripts/callgrind.sh method [CONFIG:METHOD...]  per append of one method, server and client
#   scripts/callgrind.sh stream               per pipelined 64-byte WRITE, server and client
#
# `append`: a `remora serve` for CONFIG (default: DMP+noDDIO+PM-RQWRB and
# DMP+DDIO+DRAM-RQWRB) and `remora remotelog --server` against it, both under callgrind,
# once with 1,000 and once with 3,000 appends per scenario; per append = (total at 3,000 -
# total at 1,000) / (6 scenarios x 2,000), so start-up and connection set-up cancel out.
# Compound scenarios are in that mean, and some take two round trips.
# `method`: the same for one scenario at a time (`remotelog --server --method`), per
# append = the difference / 2,000; by default the nine one-round-trip methods `bench soft`
# times, three per configuration.
# `stream`: `remora bench soft --stream-only` at 10,000 and 30,000 WRITEs per run (as many
# runs as the report's "(N rounds" says), every process under callgrind; per WRITE = the
# difference / (20,000 x N). The client's
# figure leaves out the benchmark's raw and model-free streams, which run in its process.
#
# Under valgrind everything runs tens of times slower, so the soft RNIC's 20 µs CPU slice
# would expire where it never does natively; REMORA_CPU_SLICE_US widens it to 20 ms.
# Under valgrind the runtime's other wall-clock constants (its clock jumps, sleeps and
# output coalescing) can still take other branches than natively; the slice is the one
# that measurably moved the counts. Uses target/release/remora (built here). Env: OUT
# (where the callgrind files go; default a temporary directory, removed at the end unless
# KEEP=1 or the run failed).
set -euo pipefail

cd "$(dirname "$0")/.."
mode=${1:-}
[ -n "$mode" ] && shift
case "$mode" in
append | method | stream) ;;
*)
    echo "usage: $0 append [CONFIG...] | method [CONFIG:METHOD...] | stream" >&2
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
# The files stay where OUT says, or with KEEP=1, or when the run failed (they hold the logs
# that say why); otherwise the temporary directory goes.
finish() {
    local status=$?
    if [ "$status" -ne 0 ] || [ -n "${OUT:-}" ] || [ "${KEEP:-0}" = 1 ]; then
        echo "callgrind files and logs: $out" >&2
    else
        rm -rf "$out"
    fi
}
trap finish EXIT
# An empty value reaches the binary, which refuses it.
export REMORA_CPU_SLICE_US=${REMORA_CPU_SLICE_US-20000}
cg=(valgrind --tool=callgrind --quiet)

die() {
    echo "$0: $*" >&2
    exit 1
}

# The total instruction count of one callgrind output file; fails unless it is a number.
total() {
    local n
    n=$(awk '/^(summary|totals):/ { print $2; exit }' "$1" 2>/dev/null || true)
    [[ $n =~ ^[0-9]+$ ]] || die "no instruction total in $1"
    echo "$n"
}

# One `serve` + `remotelog --server` pair: prints "server client" totals. The server picks
# its own port and names it on its first line, so nothing else listening can stand in for
# it; it is stopped however this ends.
append_pair() {
    local config=$1 appends=$2 tag=$3 only=()
    [ -n "${4:-}" ] && only=(--method "$4")
    local pool=$out/$tag.pool log=$out/$tag.server.log
    # A log left in OUT by an earlier run would name a port before this server's does.
    rm -f "$pool" "$log"
    "${cg[@]}" --callgrind-out-file="$out/$tag.server" \
        "$exe" serve --listen 127.0.0.1:0 --pool "$pool" --config "$config" \
        >"$log" 2>&1 &
    local server=$!
    # Expanded now: the trap runs when this subshell exits, after the locals are gone.
    trap "kill $server 2>/dev/null || true; rm -f $(printf %q "$pool")" EXIT
    local addr="" i
    for i in $(seq 1 600); do
        addr=$(sed -n 's/^listening on //p' "$log")
        [ -n "$addr" ] && break
        kill -0 "$server" 2>/dev/null || { cat "$log" >&2; die "the server for $config died"; }
        sleep 0.1
    done
    [ -n "$addr" ] || { cat "$log" >&2; die "the server for $config did not come up in 60 s"; }
    if ! "${cg[@]}" --callgrind-out-file="$out/$tag.client" \
        "$exe" remotelog --server "$addr" --appends "$appends" "${only[@]}" \
        >"$out/$tag.client.log" 2>&1; then
        cat "$out/$tag.client.log" >&2
        die "remotelog --server against $config failed"
    fi
    kill -TERM "$server"
    wait "$server" || true
    echo "$(total "$out/$tag.server") $(total "$out/$tag.client")"
}

# Server and client instructions of CONFIG's scenarios (only METHOD's, if given) at 3,000
# appends minus those at 1,000: "server client", for the caller to divide.
difference() {
    local config=$1 tag=$2 method=${3:-} r1 r3 s1 c1 s3 c3
    r1=$(append_pair "$config" 1000 "$tag.1000" "$method")
    r3=$(append_pair "$config" 3000 "$tag.3000" "$method")
    read -r s1 c1 <<<"$r1"
    read -r s3 c3 <<<"$r3"
    echo "$((s3 - s1)) $((c3 - c1))"
}

if [ "$mode" = append ]; then
    [ $# -gt 0 ] || set -- DMP+noDDIO+PM-RQWRB DMP+DDIO+DRAM-RQWRB
    printf '| configuration | server instructions per append | client instructions per append |\n|---|---|---|\n'
    for config in "$@"; do
        read -r s c <<<"$(difference "$config" "$config")"
        printf '| %s | %d | %d |\n' "$config" $((s / 12000)) $((c / 12000))
    done
elif [ "$mode" = method ]; then
    [ $# -gt 0 ] || set -- WSP+noDDIO+PM-RQWRB:{write-comp,writeimm-comp,send-comp} \
        DMP+noDDIO+PM-RQWRB:{write-flush,writeimm-flush,send-flush} \
        DMP+DDIO+DRAM-RQWRB:{write-msg,writeimm-msg,send-copy-flush}
    printf '| configuration | method | server instructions per append | client instructions per append | both |\n|---|---|---|---|---|\n'
    for pair in "$@"; do
        config=${pair%%:*} method=${pair#*:}
        [ "$config" != "$pair" ] && [ -n "$method" ] || die "expected CONFIG:METHOD, got '$pair'"
        read -r s c <<<"$(difference "$config" "$config.$method" "$method")"
        printf '| %s | %s | %d | %d | %d |\n' "$config" "$method" $((s / 2000)) \
            $((c / 2000)) $(((s + c) / 2000))
    done
else
    # Every process of the run writes its own file; the server's names `serve` on its
    # command line, the benchmark's (the client) `bench soft`.
    for n in 10000 30000; do
        rm -rf "$out/stream.$n"
        mkdir -p "$out/stream.$n"
        "${cg[@]}" --trace-children=yes --callgrind-out-file="$out/stream.$n/cg.%p" \
            "$exe" bench soft --stream-only --stream "$n" \
            >"$out/stream.$n/log" 2>&1 || { cat "$out/stream.$n/log" >&2; die "bench soft --stream-only failed"; }
        # A server killed before it wrote its profile would be counted short.
        if grep -q "did not stop" "$out/stream.$n/log"; then
            cat "$out/stream.$n/log" >&2
            die "a peer of the $n-WRITE run was killed before it wrote its profile"
        fi
    done
    side_file() { # $1: run directory, $2: the command-line word that names the side
        local files
        mapfile -t files < <(grep -l "^cmd:.* $2" "$1"/cg.* 2>/dev/null || true)
        [ "${#files[@]}" -eq 1 ] || die "expected one callgrind file of '$2' in $1, found ${#files[@]}"
        echo "${files[0]}"
    }
    side() { # $1: run directory, $2: as side_file's
        local file
        file=$(side_file "$1" "$2") || exit 1
        total "$file"
    }
    # The client's figure leaves out the raw and model-free streams the benchmark runs in
    # the same process (both functions are kept out of line for this).
    comparisons() { # $1: callgrind file of the client
        callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
            awk '/softbench::stream::(raw|frames)_stream_run \[/ { gsub(",", "", $1); n += $1 }
                 END { print n + 0 }'
    }
    client() { # $1: run directory
        local file all cmp
        file=$(side_file "$1" "bench soft") || exit 1
        all=$(total "$file")
        cmp=$(comparisons "$file")
        [ "$cmp" -gt 0 ] || die "no raw or frame stream found in $file"
        echo $((all - cmp))
    }
    # The rounds each run made, from its own report: the divisor must follow the benchmark.
    rounds() { # $1: run directory
        local n
        n=$(sed -n 's/^Streaming [0-9]* 64-byte messages (\([0-9]*\) rounds.*/\1/p' "$1/log")
        [[ $n =~ ^[0-9]+$ ]] || die "no round count in $1/log"
        echo "$n"
    }
    r1=$(rounds "$out/stream.10000")
    r3=$(rounds "$out/stream.30000")
    [ "$r1" = "$r3" ] || die "the two runs made $r1 and $r3 rounds"
    writes=$((20000 * r1))
    s1=$(side "$out/stream.10000" serve)
    s3=$(side "$out/stream.30000" serve)
    c1=$(client "$out/stream.10000")
    c3=$(client "$out/stream.30000")
    printf '| side | instructions per 64-byte WRITE |\n|---|---|\n'
    printf '| server (remora serve, DMP+noDDIO+PM-RQWRB) | %d |\n' $(((s3 - s1) / writes))
    printf '| client (bench soft, without its raw and frame streams) | %d |\n' $(((c3 - c1) / writes))
fi
