#!/usr/bin/env bash
# Shows the local cluster with sextant installed. Run through `make demo`, which brings
# the cluster up and deploys first.
#
# The agent on the node meters its NICs, including the demo veth "sxdemo0", whose far
# end sits in the network namespace "sextant-demo" (made here, shaped to 200 Mbit/s
# with tbf). The demo pushes iperf3 traffic through it and shows the node's
# NodeBandwidth following. Then scripts/demo-nodes.sh adds three nodes whose NICs carry
# different real traffic, and the ranker places pods across them by what they have left.
# No traffic leaves the machine.
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
echo "(The agent writes NodeBandwidth when remaining moved by more than 5% of capacity, at most"
echo " every 2 s, and at least every 30 s; each new write is printed.)"
last=$(show "idle   "); echo "$last"
iperf3 -c 10.251.0.2 -t 12 >/dev/null 2>&1 &
traffic=$!
for _ in $(seq 1 24); do
  sleep 0.5
  line=$(show "traffic")
  [ "$(sed 's/^[a-z]* *//' <<<"$line")" = "$(sed 's/^[a-z]* *//' <<<"$last")" ] || { echo "$line"; last=$line; }
done
wait "$traffic" || true
kubectl get nbw

section "Placing pods by measured bandwidth: three more nodes, each NIC with its own real traffic"
"$here/demo-nodes.sh" up
echo "Each agent meters its node's eth0 in its own network namespace; iperf3 loads them:"
echo "  sextant-demo-1 receives ~150 Mbit/s of 200, sextant-demo-2 receives ~60 and sends ~120, sextant-demo-3 receives ~20 and sends ~40."
printf 'Waiting for their NodeBandwidth to show the traffic'
for _ in $(seq 1 60); do
  ready=$(kubectl get nbw -o json | jq '[.items[] | select(.metadata.name | startswith("sextant-demo-"))] | length')
  [ "$ready" = 3 ] && break
  printf .; sleep 2
done
sleep 6 # a few samples of the traffic into each agent's peak
echo
kubectl delete namespace sextant-demo-pods --ignore-not-found --wait=true >/dev/null
kubectl create namespace sextant-demo-pods >/dev/null
echo "Six pods, schedulerName: sextant, each requiring 60M and expecting 80M of ingress, best-fit:"
for i in $(seq 1 6); do
  kubectl apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: receiver-$i
  namespace: sextant-demo-pods
  annotations:
    bandwidth.sextant.io/ingress-required: 60M
    bandwidth.sextant.io/ingress-expected: 80M
    bandwidth.sextant.io/strategy: best-fit
spec:
  schedulerName: sextant
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: sextant.local/busybox:dev
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 50m, memory: 16Mi}
POD
  sleep 1 # one at a time, so each decision sees the reservations of the ones before
done
for _ in $(seq 1 30); do
  [ "$(kubectl -n sextant-demo-pods get pods -o json | jq '[.items[] | select(.spec.nodeName)] | length')" = 6 ] && break
  sleep 1
done
kubectl get nbw
echo
echo "Each node's remaining bandwidth and the pods the ranker placed there:"
pods_json=$(kubectl -n sextant-demo-pods get pods -o json)
kubectl get nbw -o json | jq -r --argjson pods "$pods_json" '
  (["NODE", "INGRESS REMAINING", "EGRESS REMAINING", "PODS (NUMA nodes)"] | @tsv),
  (.items[] | .metadata.name as $n
   | [$n, (.status.total.ingress.remaining // "unknown"), (.status.total.egress.remaining // "unknown"),
      ([$pods.items[] | select(.spec.nodeName == $n)
        | "\(.metadata.name)(\(.metadata.annotations["numa.sextant.io/nodes"] // "-"))"] | join(" ") | if . == "" then "-" else . end)]
   | @tsv)' | column -t -s $'\t'
unplaced=$(jq -r '[.items[] | select(.spec.nodeName == null or .spec.nodeName == "") | .metadata.name] | join(" ")' <<<"$pods_json")
[ -z "$unplaced" ] || echo "Not placed: $unplaced"
cat <<'EOT'

sextant-demo-1 has less than the required 60M left to receive, so no pod goes there.
Best-fit sends the first pods to the node whose remaining ingress is closest to the
expected 80M (sextant-demo-2); each bound pod reserves its 80M there until a report
taken after it started covers it, so later pods move on to the nodes with more room.
Pods on the sextant-demo-* nodes are bound but not run: those nodes have no kubelet.
EOT
section "Sidecars: a Job with a sidecar runs to completion"
"$here/demo-sidecar.sh"

section "NUMA: pods run on the CPUs of the NUMA nodes the ranker chose"
"$here/demo-numa.sh"

cat <<EOT

The peak stays for the agent's window (60s) after traffic stops; remaining follows it.
The cluster keeps running: use it with
  export KUBECONFIG=$kubeconfig
and stop it with 'make cluster-down' (which also removes the demo namespaces, veths and
the extra nodes).
EOT
