#!/usr/bin/env bash
# The multi-node part of the demo: three extra nodes sextant-demo-1..3 whose NICs carry
# real, different traffic. Each is a Node object kept Ready by scripts/fakenodes (no
# kubelet: pods bound there are not run) and a network namespace sxnode-N holding the
# node's "eth0", a veth shaped to 200 Mbit/s whose host end is sxnodeN. A real
# sextant-agent per node meters that eth0 inside the namespace (run --netns) and
# publishes the node's NodeBandwidth. iperf3 keeps the links busy:
#   sextant-demo-1  ingress ~150 Mbit/s              (little left to receive)
#   sextant-demo-2  ingress ~70 Mbit/s, egress ~120 Mbit/s
#   sextant-demo-3  ingress ~20 Mbit/s, egress ~40 Mbit/s (light)
# No traffic leaves the machine.
#
#   scripts/demo-nodes.sh up     create it all (idempotent); needs the chart deployed
#   scripts/demo-nodes.sh down   remove it all (scripts/cluster.sh down does this too)
#
# Needs root. scripts/demo.sh brings it up.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

nodes=(1 2 3)
ingress_mbit=(150 70 20)
egress_mbit=(0 120 40)

state_dir() { dirname "$(dirname "$("$here/cluster.sh" kubeconfig)")"; }

spawn() { # name command... ; a process the cluster's `down` also stops
  local name=$1 state; shift
  state=$(state_dir)
  local pidfile=$state/pids/$name.pid
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
  setsid "$@" >>"$state/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

stop() { # name
  local f
  f=$(state_dir)/pids/$1.pid
  [ -f "$f" ] || return 0
  kill -TERM "$(cat "$f")" 2>/dev/null || true
  rm -f "$f"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "demo-nodes: needs root (network namespaces, eBPF)"
  "$here/cluster.sh" status >/dev/null 2>&1 || die "demo-nodes: the local cluster is not running (make cluster-up)"
  local kubeconfig state kubectl
  kubeconfig=$("$here/cluster.sh" kubeconfig)
  state=$(state_dir)
  kubectl="$state/kube-bin/kubectl --kubeconfig $kubeconfig"

  log "demo-nodes: building sextant-agent and fakenodes"
  (cd "$repo" && go build -o bin/sextant-agent ./agent/cmd/sextant-agent &&
    go build -o bin/fakenodes ./scripts/fakenodes) || die "demo-nodes: build failed"

  local window
  window=$(chart_agent_window "$state" "$kubeconfig") || die "demo-nodes: no sextant-agent DaemonSet (make deploy first)"
  local names=()
  for n in "${nodes[@]}"; do names+=("sextant-demo-$n"); done
  spawn demo-fakenodes "$repo/bin/fakenodes" --kubeconfig "$kubeconfig" --cpu 16 --memory 64Gi \
    --label sextant.io/demo=true "${names[@]}"
  for n in "${nodes[@]}"; do
    until $kubectl get node "sextant-demo-$n" >/dev/null 2>&1; do sleep 0.5; done
  done

  for i in "${!nodes[@]}"; do
    local n=${nodes[$i]} ns=sxnode-${nodes[$i]}
    if ! ip netns list | grep -qw "$ns"; then
      ip netns add "$ns"
      ip link add "sxnode$n" type veth peer name eth0 netns "$ns"
      ip addr add "10.252.$n.1/24" dev "sxnode$n"
      ip -n "$ns" addr add "10.252.$n.2/24" dev eth0
      ip link set "sxnode$n" up
      ip -n "$ns" link set lo up
      ip -n "$ns" link set eth0 up
      tc qdisc add dev "sxnode$n" root tbf rate 200mbit burst 256kb latency 50ms
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 200mbit burst 256kb latency 50ms
    fi
    # The agents authenticate as the chart's agent ServiceAccount, with its RBAC and a
    # token bound to their node.
    local agent_kubeconfig
    agent_kubeconfig=$(demo_agent_kubeconfig "$state" "$kubeconfig" "sextant-demo-$n") ||
      die "demo-nodes: no sextant-agent ServiceAccount (make deploy first)"
    spawn "demo-agent-$n" "$repo/bin/sextant-agent" run --kubeconfig "$agent_kubeconfig" \
      --node-name "sextant-demo-$n" --netns "/var/run/netns/$ns" --interfaces eth0 \
      --nic-capacity eth0=200M --network pod=eth0 --metrics-addr "" --window "$window" \
      `# No kubelet behind these Node objects: nothing to stop, pin or serve devices to.` \
      --sidecar-terminator=false --numa-pinning=false --device-plugin=false
    for port in 5201 5202; do
      spawn "demo-iperf3-server-$n-$port" ip netns exec "$ns" iperf3 -s -B "10.252.$n.2" -p "$port"
    done
    for port in 5201 5202; do wait_listening "$ns" "$port"; done
    # Into the namespace = the node's ingress; -R (the server sends) = its egress.
    [ "${ingress_mbit[$i]}" -gt 0 ] &&
      spawn "demo-iperf3-in-$n" iperf3 -c "10.252.$n.2" -p 5201 -b "${ingress_mbit[$i]}M" -t 86400
    [ "${egress_mbit[$i]}" -gt 0 ] &&
      spawn "demo-iperf3-out-$n" iperf3 -c "10.252.$n.2" -p 5202 -R -b "${egress_mbit[$i]}M" -t 86400
  done
  log "demo-nodes: up; agents log to $state/logs/demo-agent-N.log"
}

down() {
  local n kubeconfig
  for n in "${nodes[@]}"; do
    stop "demo-iperf3-in-$n"; stop "demo-iperf3-out-$n"
    stop "demo-iperf3-server-$n-5201"; stop "demo-iperf3-server-$n-5202"
    stop "demo-agent-$n"
  done
  stop demo-fakenodes
  if "$here/cluster.sh" status >/dev/null 2>&1; then
    kubeconfig=$("$here/cluster.sh" kubeconfig)
    "$(state_dir)/kube-bin/kubectl" --kubeconfig "$kubeconfig" delete nodes -l sextant.io/demo=true \
      --ignore-not-found --wait=false >/dev/null || true
  fi
  for n in "${nodes[@]}"; do
    ip link delete "sxnode$n" 2>/dev/null || true
    ip netns delete "sxnode-$n" 2>/dev/null || true
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  "") usage_error "demo-nodes: no command (want up or down)" ;;
  *) usage_error "demo-nodes: unknown command '$1' (want up or down)" ;;
esac
