#!/usr/bin/env bash
# Two hosts on one machine: a soft-RNIC server and a RemoteLog client in two network
# namespaces joined by a veth pair (10.77.0.1 <-> 10.77.0.2, addresses that exist only inside
# the namespaces this script makes). Runs RemoteLog across them, then the real crash checker
# across them: servers on one host are SIGKILLed, restarted on their pool files and recovered,
# and the client on the other host checks over the veth that every acknowledged append survived;
# then the same for the durable RPCs (rpc-serve, rpc-crashcheck); then a client host that
# vanishes without closing its connection must not keep its slot. Cleans up namespaces,
# processes and files on exit.
#
#   scripts/two-hosts.sh [path/to/remora]     (needs root for `ip netns`)
#
# Exit status 77 means namespaces cannot be made here (the test that calls this skips).
set -euo pipefail
REMORA="${1:-target/release/remora}"
[ -x "$REMORA" ] || { echo "no remora binary at $REMORA (cargo build --release -p remora-cli)"; exit 1; }
NS_S="remora-srv-$$"
NS_C="remora-cli-$$"
WORK="$(mktemp -d)"
cleanup() {
  set +e
  ip netns pids "$NS_S" 2>/dev/null | xargs -r kill -9
  ip netns pids "$NS_C" 2>/dev/null | xargs -r kill -9
  ip netns del "$NS_S" 2>/dev/null
  ip netns del "$NS_C" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
if ! ip netns add "$NS_S" 2>/dev/null; then
  echo "cannot create network namespaces here (need root and iproute2): skipping"
  exit 77
fi
ip netns add "$NS_C"
ip link add "veth-s$$" type veth peer name "veth-c$$"
ip link set "veth-s$$" netns "$NS_S"
ip link set "veth-c$$" netns "$NS_C"
ip -n "$NS_S" addr add 10.77.0.1/24 dev "veth-s$$"
ip -n "$NS_C" addr add 10.77.0.2/24 dev "veth-c$$"
for ns in "$NS_S" "$NS_C"; do ip -n "$ns" link set lo up; done
ip -n "$NS_S" link set "veth-s$$" up
ip -n "$NS_C" link set "veth-c$$" up

start_server() {
  ip netns exec "$NS_S" "$REMORA" serve --listen 10.77.0.1:7471 --pool "$WORK/pool.pm" \
    --config "$1" > "$WORK/server.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$WORK/server.log" 2>/dev/null && return 0; sleep 0.05; done
  echo "server did not start:"; cat "$WORK/server.log"; exit 1
}

echo "== RemoteLog across two namespaces"
start_server DMP+noDDIO+PM-RQWRB
ip netns exec "$NS_C" "$REMORA" remotelog --server 10.77.0.1:7471 --appends 200
kill -TERM "$SERVER"; wait "$SERVER" || true

echo "== crash loop across two namespaces: SIGKILL, restart, recover, check over the veth"
# The checker runs on the client host and starts each server on the other one. The
# selection takes the configuration's six RemoteLog targets and the slot-takeover loop.
ip netns exec "$NS_C" "$REMORA" crashcheck --real --targets correct --kills "${KILLS:-3}" --clients 2 \
  --only "DMP+noDDIO+PM-RQWRB" --server-prefix "ip netns exec $NS_S" --server-listen 10.77.0.1:0
echo "== durable-RPC crash loop across two namespaces: the same, for rpc-serve and its client"
ip netns exec "$NS_C" "$REMORA" rpc-crashcheck --targets correct --kills "${KILLS:-3}" \
  --only "WFlush-RPC/emulated/DMP+noDDIO+PM-RQWRB" --server-prefix "ip netns exec $NS_S" \
  --server-listen 10.77.0.1:0
echo "== a client host that vanishes: the server notices (TCP keepalive) and frees its slot"
# A pool with one connection slot; the client on the other host holds it, then its host is
# cut off (its end of the veth goes down: no FIN, no RST, as when a machine crashes). A
# client on the server's host must be served within a minute. No lease: the slot goes to
# the next client as soon as the server notices the vanished one (with a lease it would be
# kept for the vanished client that long).
ip netns exec "$NS_S" "$REMORA" serve --listen 10.77.0.1:7473 --pool "$WORK/one.pm" \
  --pool-bytes $((6 << 20)) --config DMP+noDDIO+PM-RQWRB --lease-secs 0 > "$WORK/one.log" 2>&1 &
ONE=$!
for _ in $(seq 1 100); do grep -q "listening on" "$WORK/one.log" 2>/dev/null && break; sleep 0.05; done
grep -q "^1 connection slots" "$WORK/one.log" || { echo "expected one slot:"; cat "$WORK/one.log"; exit 1; }
ip netns exec "$NS_C" "$REMORA" remotelog --server 10.77.0.1:7473 --appends 65000 > /dev/null 2>&1 &
HOLDER=$!
sleep 1
ip -n "$NS_C" link set "veth-c$$" down
T0=$(date +%s)
served=""
for _ in $(seq 1 30); do
  if ip netns exec "$NS_S" "$REMORA" remotelog --server 10.77.0.1:7473 --appends 5 > /dev/null 2>&1; then
    served="after $(( $(date +%s) - T0 )) s"; break
  fi
  [ $(( $(date +%s) - T0 )) -ge 60 ] && break
done
kill -9 "$HOLDER" 2>/dev/null || true
ip -n "$NS_C" link set "veth-c$$" up
kill -TERM "$ONE"; wait "$ONE" || true
[ -n "$served" ] || { echo "the vanished client's slot was never freed"; tail -3 "$WORK/one.log"; exit 1; }
echo "served $served"

echo "two-hosts: ok"
