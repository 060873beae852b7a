#!/usr/bin/env bash
# Compares builds of `remora` on the soft RNIC's latency the way a shared, noisy machine
# allows: each binary's `bench soft` runs in turn, N rounds, so a change of the machine's
# state falls on all of them alike; prints each method's p50 / raw p50 per binary as the
# median of the rounds with its range, as a Markdown table.
#
# Usage: scripts/alternate-bench.sh N BIN [BIN ...] [-- BENCH-SOFT-ARGS ...]
#   e.g. scripts/alternate-bench.sh 8 target/release/remora target/pgo/release/remora
# Default bench arguments: --stream 1000 (the streaming part is not compared here).
set -euo pipefail

if [ "$#" -lt 2 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
rounds="$1"
shift
bins=()
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  bins+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
args=("$@")
[ "${#args[@]}" -eq 0 ] && args=(--stream 1000)

rows="$(mktemp "${TMPDIR:-/tmp}/remora-alternate-XXXXXX")"
trap 'rm -f "$rows"' EXIT

for round in $(seq "$rounds"); do
  for i in "${!bins[@]}"; do
    out="$("${bins[$i]}" bench soft "${args[@]}")"
    # One row per method: binary index, method, ratio (the table's "p50 / raw p50" column).
    printf '%s\n' "$out" | awk -F'|' -v b="$i" '
      /^Raw TCP ping-pong/ { match($0, /p50 [0-9.]+/); print b, "raw-p50-us", substr($0, RSTART + 4, RLENGTH - 4) }
      /^\| [DMW][A-Z]+\+/ { gsub(/ /, "", $3); gsub(/ /, "", $8); print b, $3, $8 }' >> "$rows"
  done
  echo "round $round of $rounds done" >&2
done

# Median and range per binary and method, methods in the bench's order.
header="| method |"
rule="|---|"
for b in "${bins[@]}"; do
  header+=" $b |"
  rule+="---|"
done
echo "$header"
echo "$rule"
awk -v n="${#bins[@]}" '
  { key = $2; if (!(key in seen)) { seen[key] = 1; order[++m] = key }
    c = ++count[$1, key]; v[$1, key, c] = $3 }
  END {
    for (k = 1; k <= m; k++) {
      key = order[k]; line = "| " (key == "raw-p50-us" ? "raw p50 (µs)" : key) " |"
      for (b = 0; b < n; b++) {
        c = count[b, key]
        for (i = 1; i <= c; i++) s[i] = v[b, key, i]
        # insertion sort: a handful of values
        for (i = 2; i <= c; i++) { x = s[i]; j = i - 1; while (j > 0 && s[j] > x) { s[j + 1] = s[j]; j-- } s[j + 1] = x }
        med = (c % 2) ? s[(c + 1) / 2] : (s[c / 2] + s[c / 2 + 1]) / 2
        line = line sprintf(" %.2f (%.2f–%.2f) |", med, s[1], s[c])
      }
      print line
    }
  }' "$rows"
