#!/usr/bin/env bash
# bench-enforce: what bandwidth enforcement costs a node's traffic. Pushes iperf3 TCP
# traffic over a veth between two network namespaces this script creates (no traffic
# leaves them), both directions, alternating rounds with the eBPF meter alone and with
# the meter and enforcement (the classifier, the HTB root, the IFB and their classes;
# the receiving address a pod guaranteed 1M, no limit), in two settings:
#   - CPU-bound: the veth unshaped (~10 Gbit/s on 2 cores), enforcement shaping far above
#     that: what its per-packet work costs when the CPU is the bottleneck;
#   - link-bound: both ends shaped to 1 Gbit/s with tbf (a NIC and the switch port
#     before it), enforcement shaping to the same 1 Gbit/s (shaped share 1: the default
#     0.95 takes 5% by design, not by cost).
# Prints the throughput of each, their ratio (medians and per round), the CPU per packet
# of each from /proc/stat, and the classifier's own cost per packet from the kernel's BPF
# statistics; then what a pod's classes cost to add and to remove with 200 pods on the
# node (go test -bench BenchmarkPodClasses).
# Last, on the local cluster (brought up if it is not), the guarantees themselves: the
# e2e test TestEnforcementKeepsGuaranteesAndLimits's pod placed for 400 Mbit/s each way
# with three neighbours pushing through the same 1 Gbit/s uplink, alone, and a pod
# capped at 100 Mbit/s. Its figures depend on how fast the machine pushes packets, so
# they are judged here, not in the test.
# Goals: ratio >= 0.97; a pod's classes in well under a second; the reserved pod under
# contention >= 95% of its 400M, alone >= 90% of the uplink; the capped pod within 5% of
# its 100M. Needs root, iperf3, ip, tc, bpftool, jq.
#
#   scripts/bench-enforce.sh      (make bench-enforce; no arguments)
#
# Env: ROUNDS (default 5), SECONDS_PER_RUN (default 5), GUARANTEES (default 1; 0 skips
# the cluster part).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
GUARANTEES=${GUARANTEES:-1}

[[ $(id -u) == 0 ]] || die "bench-enforce needs root (network namespaces, BPF, qdiscs)"
for tool in ip tc iperf3 bpftool jq; do
  command -v "$tool" >/dev/null || die "bench-enforce needs $tool (scripts/deps.sh installs it)"
done

work=$(mktemp -d)
ns_a=sextant-benchenf-a-$$
ns_b=sextant-benchenf-b-$$
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

log "building sextant-agent and the enforcement harness"
go build -o "$work/sextant-agent" ./agent/cmd/sextant-agent
go build -o "$work/shapeharness" ./agent/enforce/internal/shapeharness

ip netns add "$ns_a"
ip netns add "$ns_b"
ip -n "$ns_a" link add va type veth peer name vb netns "$ns_b"
ip -n "$ns_a" addr add 10.233.0.1/30 dev va
ip -n "$ns_b" addr add 10.233.0.2/30 dev vb
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set va up
ip -n "$ns_b" link set vb up

# B is the node: its interface vb is metered and, in the "with" rounds, shaped; the
# server's address is the pod's.
ip netns exec "$ns_b" iperf3 -s -B 10.233.0.2 >/dev/null 2>&1 &
server_pid=$!
wait_listening "$ns_b" 5201

# run_iperf DIR prints the receiver's throughput in Mbit/s: DIR forward sends A to B
# (into vb, through the IFB), reverse B to A (out of vb, through the HTB root).
run_iperf() {
  local extra=()
  [[ $1 == reverse ]] && extra=(-R)
  ip netns exec "$ns_a" iperf3 -c 10.233.0.2 -t "$SECONDS_PER_RUN" -f m --connect-timeout 2000 "${extra[@]}" |
    awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i-1) }'
}

# busy_jiffies: the CPUs' non-idle time so far, in USER_HZ ticks.
busy_jiffies() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
vb_packets() { ip -n "$ns_b" -s -j link show vb | jq '.[0].stats64 | .rx.packets + .tx.packets'; }
hz=$(getconf CLK_TCK)


# measure DIR: runs iperf3 and sets mbps and ns_per_packet (all CPUs' busy time over
# the packets vb carried).
measure() {
  local j0 p0 j1 p1
  j0=$(busy_jiffies); p0=$(vb_packets)
  mbps=$(run_iperf "$1")
  j1=$(busy_jiffies); p1=$(vb_packets)
  ns_per_packet=$(awk -v j=$((j1 - j0)) -v p=$((p1 - p0)) -v hz="$hz" 'BEGIN { printf "%.0f", j / hz * 1e9 / p }')
}

start_meter() {
  "$work/sextant-agent" measure --netns "/var/run/netns/$ns_b" --interface vb --duration 10m --output json >/dev/null &
  meter_pid=$!
  for _ in $(seq 100); do [[ $(prog_stat 'sextant_ingress' id) != 0 ]] && return; sleep 0.1; done
  die "the meter did not attach"
}
stop() { kill -INT "$1"; wait "$1" || true; }

sysctl -qw kernel.bpf_stats_enabled=1
cls_ns=0 cls_cnt=0

# scenario NAME CAPACITY SHARE: ROUNDS rounds of both modes and both directions, then
# the summary.
scenario() {
  local name=$1 capacity=$2 share=$3
  declare -A tput cpu
  local round mode dir harness
  for round in $(seq "$ROUNDS"); do
    for mode in without with; do
      start_meter
      if [[ $mode == with ]]; then
        "$work/shapeharness" --netns "/var/run/netns/$ns_b" --interface vb --pod 10.233.0.2 \
          --capacity "$capacity" --shaped-share "$share" >"$work/harness.out" &
        harness=$!
        for _ in $(seq 100); do grep -q shaped "$work/harness.out" 2>/dev/null && break; sleep 0.1; done
        grep -q shaped "$work/harness.out" || die "the harness did not shape vb: $(cat "$work/harness.out")"
      fi
      for dir in forward reverse; do
        measure "$dir"
        tput[$mode,$dir]+="$mbps "
        cpu[$mode,$dir]+="$ns_per_packet "
        log "$name, round $round, $mode enforcement, $dir: $mbps Mbit/s, $ns_per_packet ns of CPU per packet"
      done
      if [[ $mode == with ]]; then
        # The classifier's statistics go with its programs when the harness ends.
        cls_ns=$((cls_ns + $(prog_stat 'sextant_classify_ingress|sextant_classify_egress' run_time_ns)))
        cls_cnt=$((cls_cnt + $(prog_stat 'sextant_classify_ingress|sextant_classify_egress' run_cnt)))
        stop "$harness"
      fi
      stop "$meter_pid"
    done
  done

  echo "$name: iperf3 TCP over a veth (GSO on), the meter on in every round, median of $ROUNDS x ${SECONDS_PER_RUN}s:"
  local w m cw cm i label
  for dir in forward reverse; do
    w=$(printf '%s\n' ${tput[without,$dir]} | median)
    m=$(printf '%s\n' ${tput[with,$dir]} | median)
    cw=$(printf '%s\n' ${cpu[without,$dir]} | median)
    cm=$(printf '%s\n' ${cpu[with,$dir]} | median)
    local -a ws ms paired=()
    read -ra ws <<<"${tput[without,$dir]}"
    read -ra ms <<<"${tput[with,$dir]}"
    for i in "${!ws[@]}"; do paired+=("$(awk -v w="${ws[$i]}" -v m="${ms[$i]}" 'BEGIN { printf "%.4f", m / w }')"); done
    label="into the shaped interface (IFB)"
    [[ $dir == reverse ]] && label="out of the shaped interface (HTB root)"
    echo "  $dir, $label:"
    echo "    meter alone: $w Mbit/s, $cw ns of CPU per packet"
    echo "    enforcement: $m Mbit/s, $cm ns of CPU per packet"
    awk -v w="$w" -v m="$m" -v cw="$cw" -v cm="$cm" 'BEGIN {
      printf "    ratio:       %.4f (of the medians; goal >= 0.97)\n", m / w
      printf "    CPU:         %+.0f ns per packet with enforcement (all CPUs over vb'"'"'s packets; GSO packets)\n", cm - cw }'
    echo "    per-round ratios: ${paired[*]} (median $(printf '%s\n' "${paired[@]}" | median))"
  done
}

scenario "CPU-bound" 100e9 0.95
# The link: tbf at 1 Gbit/s on both ends, as the e2e tests' uplink; enforcement replaces
# vb's for its own HTB at the same rate, and puts va's back when it stops.
for end in "$ns_a va" "$ns_b vb"; do
  read -r ns dev <<<"$end"
  tc -n "$ns" qdisc add dev "$dev" root tbf rate 1gbit burst 512kb latency 20ms
done
scenario "link-bound at 1 Gbit/s" 1e9 1
awk -v n="$cls_ns" -v c="$cls_cnt" 'BEGIN {
  if (c == 0) { print "no BPF run statistics for the classifier"; exit }
  printf "BPF stats, classifier: %.1f ns per packet (run_time_ns/run_cnt over %d runs, both settings)\n", n / c, c }'

echo "A pod's classes with 200 pods on the node (the plan, the classifier's maps, both qdiscs):"
go test -run '^$' -bench 'BenchmarkPodClasses' -benchtime 200x ./agent/enforce/ |
  awk '/^BenchmarkPodClasses/ { n = $1; sub(/^BenchmarkPodClasses\//, "", n); sub(/-[0-9]+$/, "", n); printf "  %s: %.2f ms\n", n, $3 / 1e6 }'

[[ $GUARANTEES == 1 ]] || exit 0
echo "Guarantees on the local cluster (TestEnforcementKeepsGuaranteesAndLimits, 1 Gbit/s uplink):"
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  log "bench-enforce: the local cluster is not up; starting it"
  scripts/cluster.sh up
fi
out=$(KUBECONFIG=$(scripts/cluster.sh kubeconfig) go test -tags e2e -count=1 -run '^TestEnforcementKeepsGuaranteesAndLimits$' -timeout 20m ./test/e2e/ -v 2>&1) ||
  { echo "$out" >&2; die "bench-enforce: the guarantees test failed"; }
line=$(grep '^bench-enforce-guarantees:' <<<"$out") || { echo "$out" >&2; die "bench-enforce: the test printed no figures"; }
awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
  function judge(ok) { return ok ? "PASS" : "MISS" }
  END {
    r = v["required"]; u = v["uplink"]; c = v["capped"]
    printf "  reserved pod, three neighbours pushing: egress %s, ingress %s Mbit/s with enforcement (%s, %s without); goal >= 95%% of %s: %s, %s\n",
      v["contended_egress"], v["contended_ingress"], v["unenforced_egress"], v["unenforced_ingress"], r,
      judge(v["contended_egress"] >= 0.95 * r), judge(v["contended_ingress"] >= 0.95 * r)
    printf "  reserved pod alone: egress %s, ingress %s Mbit/s; goal >= 90%% of the %s uplink: %s, %s\n",
      v["alone_egress"], v["alone_ingress"], u, judge(v["alone_egress"] >= 0.9 * u), judge(v["alone_ingress"] >= 0.9 * u)
    printf "  pod capped at %s: egress %s, ingress %s Mbit/s; goal within 5%%: %s, %s\n", c, v["capped_egress"], v["capped_ingress"],
      judge(v["capped_egress"] >= 0.95 * c && v["capped_egress"] <= 1.05 * c), judge(v["capped_ingress"] >= 0.95 * c && v["capped_ingress"] <= 1.05 * c)
  }' <<<"$line"
