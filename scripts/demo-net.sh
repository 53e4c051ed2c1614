#!/usr/bin/env bash
# The demo's traffic path: veth "sxdemo0" on the host, its peer in the network
# namespace "sextant-demo" with 10.251.0.2, both ends shaped to 200 Mbit/s, and an
# iperf3 server in the namespace. Traffic on it never leaves the machine.
#
#   scripts/demo-net.sh up     create it (idempotent)
#   scripts/demo-net.sh down   remove it (scripts/cluster.sh down does this too)
#
# Needs root. scripts/demo.sh brings it up.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
ns=sextant-demo
case "${1:-}" in
  up)
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip link add sxdemo0 type veth peer name sxdemo1 netns "$ns"
      ip addr add 10.251.0.1/24 dev sxdemo0
      ip -n "$ns" addr add 10.251.0.2/24 dev sxdemo1
      ip link set sxdemo0 up
      ip -n "$ns" link set lo up
      ip -n "$ns" link set sxdemo1 up
      tc qdisc add dev sxdemo0 root tbf rate 200mbit burst 256kb latency 50ms
      ip netns exec "$ns" tc qdisc add dev sxdemo1 root tbf rate 200mbit burst 256kb latency 50ms
    fi
    if ! pgrep -f "iperf3 -s -B 10.251.0.2" >/dev/null; then
      ip netns exec "$ns" iperf3 -s -B 10.251.0.2 -D
    fi ;;
  down)
    pkill -f "iperf3 -s -B 10.251.0.2" 2>/dev/null || true
    ip link delete sxdemo0 2>/dev/null || true
    ip netns delete "$ns" 2>/dev/null || true ;;
  "") usage_error "demo-net: no command (want up or down)" ;;
  *) usage_error "demo-net: unknown command '$1' (want up or down)" ;;
esac
