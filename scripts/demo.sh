#!/usr/bin/env bash
# Shows the local cluster with sextant installed. Run through `make demo`, which brings
# the cluster up and deploys first.
#
# The agent on the node meters its NICs, including the demo veth "sxdemo0", whose far
# end sits in the network namespace "sextant-demo" (made here, shaped to 200 Mbit/s
# with tbf). The demo pushes iperf3 traffic through it and shows the node's
# NodeBandwidth following. No traffic leaves the machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

kubeconfig=$("$here/cluster.sh" kubeconfig)
state=$(dirname "$(dirname "$kubeconfig")")
kubectl() { "$state/kube-bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
node=$(kubectl get nodes -l sextant.io/local=true -o jsonpath='{.items[0].metadata.name}')
section() { printf '\n== %s\n' "$*"; }

section "The node (a real kubelet on containerd)"
kubectl get nodes -o wide
section "sextant's heartbeat CRDs"
kubectl get crd nodebandwidths.sextant.io nodetopologies.sextant.io
section "sextant's components"
kubectl -n sextant-system get daemonsets,deployments,pods -o wide

section "The node's topology, as the agent published it (kubectl get ntopo)"
kubectl get ntopo
kubectl get ntopo "$node" -o json | jq -r '
  .status as $s
  | "NUMA nodes:", ($s.numaNodes[] | "  \(.id): CPUs \(.cpus | map(tostring) | join(",")), \(.memoryBytes / 1073741824 * 10 | floor / 10) GiB, distances \(.distances // [] | map(tostring) | join(" "))"),
    "NICs:", ($s.nics[] | "  \(.name) pci=\(.pciAddress // "-") numa=\(.numaNode // "-") speed=\(if .speedMbps then "\(.speedMbps) Mbps" else "unknown" end)"),
    "Devices by kind:", ($s.pciDevices | group_by(.kind)[] | "  \(.[0].kind): \(length) (\(map(select(.health != "Healthy")) | length) unhealthy)")'

section "Live bandwidth: iperf3 through sxdemo0 (shaped to 200 Mbit/s) into netns sextant-demo"
"$here/demo-net.sh" up
show() {
  kubectl get nbw "$node" -o json | jq -r --arg t "$1" '
    .status as $s | ($s.interfaces[] | select(.name == "sxdemo0")) as $i
    | "\($t)  sampled \($s.sampleTime)  sxdemo0 egress: rate \($i.egress.rate) peak \($i.egress.peak) remaining \($i.egress.remaining) of \($i.egress.capacity)"'
}
for _ in $(seq 1 30); do
  kubectl get nbw "$node" -o json | jq -e '.status.interfaces[] | select(.name == "sxdemo0")' >/dev/null 2>&1 && break
  sleep 1
done
show "idle   "
ip netns exec sextant-demo true
iperf3 -c 10.251.0.2 -t 12 >/dev/null 2>&1 &
traffic=$!
for i in $(seq 1 6); do sleep 2; show "traffic"; done
wait "$traffic" || true
kubectl get nbw
cat <<EOT

The peak stays for the agent's window (60s) after traffic stops; remaining follows it.
The cluster keeps running: use it with
  export KUBECONFIG=$kubeconfig
and stop it with 'make cluster-down' (which also removes the demo namespace and veth).
EOT
