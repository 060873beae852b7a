#!/usr/bin/env bash
# Compares builds of `remora` (or one build with different `bench soft` flags) on the soft
# RNIC's latency the way a shared, noisy machine allows: each entry's `bench soft` runs in
# turn, N rounds, so a change of the machine's state falls on all of them alike; prints
# each method's p50 / raw p50 per entry as the median of the rounds with its range, as a
# Markdown table. With VALUE=added it prints p50 - raw p50 in µs instead, which the raw
# floor's changes between runs do not move as they move a ratio.
#
# Usage: scripts/alternate-bench.sh N ENTRY [ENTRY ...] [-- BENCH-SOFT-ARGS ...]
#   ENTRY: a binary, or a binary and flags of its own joined by commas
#   e.g. scripts/alternate-bench.sh 8 target/release/remora target/pgo/release/remora
#        VALUE=added scripts/alternate-bench.sh 8 target/release/remora,--scenarios,latency \
#            target/release/remora,--scenarios,all -- --stream 1000 --pool-dir /dev/shm
# Default bench arguments: --stream 1000 (the streaming part is not compared here).
set -euo pipefail

if [ "$#" -lt 2 ]; then
  sed -n '2,14p' "$0" >&2
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

case "${VALUE:-ratio}" in
  ratio) col=8 ;;
  added) col=9 ;;
  *) echo "$0: VALUE must be ratio or added, not '$VALUE'" >&2; exit 2 ;;
esac

rows="$(mktemp "${TMPDIR:-/tmp}/remora-alternate-XXXXXX")"
trap 'rm -f "$rows"' EXIT

for round in $(seq "$rounds"); do
  for i in "${!bins[@]}"; do
    IFS=, read -r -a entry <<<"${bins[$i]}"
    out="$("${entry[0]}" bench soft "${args[@]}" "${entry[@]:1}")"
    # One row per method: entry index, method, and the table's "p50 / raw p50" column (or,
    # with VALUE=added, its "p50 − raw p50 µs" column).
    printf '%s\n' "$out" | awk -F'|' -v b="$i" -v col="$col" '
      /^Raw TCP ping-pong/ { match($0, /p50 [0-9.]+/); print b, "raw-p50-us", substr($0, RSTART + 4, RLENGTH - 4) }
      /^\| [DMW][A-Z]+\+/ { gsub(/ /, "", $3); gsub(/ /, "", $col); print b, $3, $col }' >> "$rows"
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
