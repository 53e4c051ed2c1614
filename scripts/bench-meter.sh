#!/usr/bin/env bash
# bench-meter: what the eBPF NIC meter costs. Pushes iperf3 TCP traffic over a
# veth between two network namespaces this script creates (no traffic leaves
# them), alternating rounds without and with the meter attached to one end, and
# prints the throughput of each, their ratio (medians), and the programs' cost
# per packet from the kernel's BPF statistics (run_time_ns / run_cnt).
# Goals: ratio >= 0.98, <= 100 ns per packet. Needs root, iperf3, ip, bpftool, jq.
#
#   scripts/bench-meter.sh      (make bench-meter; no arguments)
#
# Env: ROUNDS (default 9), SECONDS_PER_RUN (default 5), GSO=off to push
# 1500-byte packets instead of 64 KiB GSO packets.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-9}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}

[[ $(id -u) == 0 ]] || die "bench-meter needs root (network namespaces, BPF)"
for tool in ip iperf3 bpftool jq; do
  command -v "$tool" >/dev/null || die "bench-meter needs $tool (scripts/deps.sh installs it)"
done

work=$(mktemp -d)
ns_a=sextant-bench-a-$$
ns_b=sextant-bench-b-$$
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
server_pid=
cleanup() {
  set +e
  [[ -n $server_pid ]] && { kill "$server_pid"; wait "$server_pid"; } 2>/dev/null
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
  rm -rf "$work"
}
trap cleanup EXIT

log "building sextant-agent"
go build -o "$work/sextant-agent" ./agent/cmd/sextant-agent

ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add va type veth peer name vb netns "$ns_b"
ip -n "$ns_a" addr add 10.232.0.1/30 dev va
ip -n "$ns_b" addr add 10.232.0.2/30 dev vb
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
[[ ${GSO:-on} == off ]] && { ip -n "$ns_a" link set va gso_max_segs 1; ip -n "$ns_b" link set vb gso_max_segs 1; }
ip -n "$ns_a" link set va up
ip -n "$ns_b" link set vb up

ip netns exec "$ns_b" iperf3 -s -B 10.232.0.2 >/dev/null 2>&1 &
server_pid=$!
wait_listening "$ns_b" 5201

# run_iperf prints the receiver's throughput in Mbit/s.
run_iperf() {
  ip netns exec "$ns_a" iperf3 -c 10.232.0.2 -t "$SECONDS_PER_RUN" -f m --connect-timeout 2000 |
    awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i-1) }'
}


# with_attached NAMES CMD...: starts CMD (which attaches programs whose names
# match the regex NAMES and detaches on SIGINT), runs iperf3 while they are attached, and
# adds their BPF run statistics to stat_ns[PROGNAME] and stat_cnt[PROGNAME].
declare -A stat_ns stat_cnt
with_attached() {
  local name=$1; shift
  "$@" >"$work/$name.out" &
  local pid=$!
  for _ in $(seq 100); do
    [[ $(prog_stat "$name" id) != 0 ]] && break
    sleep 0.1
  done
  [[ $(prog_stat "$name" id) != 0 ]] || die "$name did not attach"
  mbps=$(run_iperf)
  stat_ns[$name]=$(( ${stat_ns[$name]:-0} + $(prog_stat "$name" run_time_ns) ))
  stat_cnt[$name]=$(( ${stat_cnt[$name]:-0} + $(prog_stat "$name" run_cnt) ))
  kill -INT "$pid"
  wait "$pid"
}

log "building the no-op reference program's loader"
go build -o "$work/noopattach" ./agent/bandwidth/internal/noopattach

# Stats are on for every round, so "without" and "with" differ by the meter
# alone; their own cost (two clock reads per run) shows in the no-op rounds.
sysctl -qw kernel.bpf_stats_enabled=1
without=() with=() noop=()
for round in $(seq "$ROUNDS"); do
  without+=("$(run_iperf)")
  log "round $round without meter: ${without[-1]} Mbit/s"

  with_attached sextant_noop "$work/noopattach" --netns "/var/run/netns/$ns_b" --interface vb
  noop+=("$mbps")
  log "round $round no-op program: $mbps Mbit/s"

  with_attached 'sextant_ingress|sextant_egress' "$work/sextant-agent" measure --netns "/var/run/netns/$ns_b" --interface vb \
    --duration "$((SECONDS_PER_RUN + 30))s" --output json
  with+=("$mbps")
  log "round $round with meter:    $mbps Mbit/s ($(jq -c '.interfaces[0] | {ingress, egress}' "$work/sextant_ingress|sextant_egress.out"))"
done

w=$(printf '%s\n' "${without[@]}" | median)
m=$(printf '%s\n' "${with[@]}" | median)
echo "iperf3 TCP over a veth (GSO ${GSO:-on}), median of $ROUNDS x ${SECONDS_PER_RUN}s:"
echo "  without meter: $w Mbit/s"
echo "  with meter:    $m Mbit/s"
awk -v w="$w" -v m="$m" 'BEGIN { printf "  ratio:         %.4f (of the medians; goal >= 0.98)\n", m / w }'
# Each round's runs are seconds apart, so a per-round ratio cancels the machine's
# drift; the no-op program's own ratio shows how far noise alone moves it.
paired=() noise=()
for i in "${!without[@]}"; do
  paired+=("$(awk -v w="${without[$i]}" -v m="${with[$i]}" 'BEGIN { printf "%.4f", m / w }')")
  noise+=("$(awk -v w="${without[$i]}" -v n="${noop[$i]}" 'BEGIN { printf "%.4f", n / w }')")
done
echo "  per-round ratios, with / without:  ${paired[*]}"
echo "    median: $(printf '%s\n' "${paired[@]}" | median)"
echo "  per-round ratios, no-op / without: ${noise[*]}"
echo "    median: $(printf '%s\n' "${noise[@]}" | median) (a program that counts nothing: the noise)"
awk -v mn="${stat_ns[sextant_ingress|sextant_egress]}" -v mc="${stat_cnt[sextant_ingress|sextant_egress]}" \
    -v nn="${stat_ns[sextant_noop]}" -v nc="${stat_cnt[sextant_noop]}" 'BEGIN {
  if (mc == 0 || nc == 0) { print "  no BPF run statistics"; exit }
  printf "  BPF stats, meter:   %.1f ns/packet (run_time_ns/run_cnt over %d runs; goal <= 100)\n", mn / mc, mc
  printf "  BPF stats, no-op:   %.1f ns/packet (%d runs: the stats floor on this machine)\n", nn / nc, nc
  printf "  meter minus no-op:  %.1f ns/packet\n", mn / mc - nn / nc }'
# What the meter reads on a link of known capacity (a veth shaped by tbf to 200 Mbit/s),
# as a fraction of that rate: a figure of this machine, never a test's assertion.
log "the meter's reading of a link shaped to 200 Mbit/s (BenchmarkMeterReadsShapedRate)"
go test -count=1 -run '^$' -bench MeterReadsShapedRate -benchtime 1x ./agent/bandwidth/ | grep '^Benchmark'
