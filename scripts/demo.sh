#!/usr/bin/env bash
# Shows the local cluster with sextant installed. Run through `make demo`, which brings
# the cluster up and deploys first.
#
# The agent on the node meters its NICs, including the demo veth "sxdemo0", whose far
# end sits in the network namespace "sextant-demo" (made here, shaped to 200 Mbit/s
# with tbf). The demo pushes iperf3 traffic through it and shows the node's
# NodeBandwidth following. Then scripts/demo-nodes.sh adds three nodes whose NICs carry
# different real traffic, and the ranker places pods across them by what they have left.
# No traffic leaves the machine. Then scripts/demo-sidecar.sh and scripts/demo-numa.sh.
#
#   scripts/demo.sh             (make demo; no arguments; needs root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

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

section "Guarantees: the agent shapes sxdemo0 (agent.enforcement.networks: [demo], scripts/deploy.sh)"
demo_condition() {
  kubectl get nbw "$node" -o json | jq -r '.status.networks[]? | select(.name == "demo") | .conditions[]?
    | select(.type == "GuaranteesEnforced") | "\(.status) \(.reason): \(.message)"'
}
for _ in $(seq 1 30); do
  [[ $(demo_condition) == True* ]] && break
  sleep 1
done
echo "NodeBandwidth, network demo, GuaranteesEnforced: $(demo_condition)"
echo "sxdemo0's root qdisc and classes (HTB at 95% of its 200M; a class per pod with a guarantee or a limit):"
tc qdisc show dev sxdemo0 root
tc class show dev sxdemo0
echo "(A pod requiring bandwidth on the demo network gets its rate there whatever else crosses"
echo " sxdemo0: docs/enforcement.md.)"

section "Placing pods by measured bandwidth: three more nodes, each NIC with its own real traffic"
"$here/demo-nodes.sh" up
echo "Each agent meters its node's eth0 in its own network namespace; iperf3 loads them:"
echo "  sextant-demo-1 receives ~150 Mbit/s of 200, sextant-demo-2 receives ~70 and sends ~120, sextant-demo-3 receives ~20 and sends ~40."
# Until an agent has measured a whole window its report is partial (its peak has not
# seen the bursts a whole window would), and the ranker places no bandwidth pod by it.
window=$(chart_agent_window "$state" "$kubeconfig") || die "demo: no sextant-agent DaemonSet (make deploy first)"
printf 'Waiting until each of them has measured a whole window (%s): before that its report is partial\nand the ranker places no bandwidth pod there' "$window"
# secs turns a Go duration ("1m0s", "90s") into seconds.
jq_secs='def secs: [scan("([0-9.]+)(h|ms|m|s|us|µs|ns)")]
  | map((.[0] | tonumber) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}[.[1]])
  | add // 0;'
full_reports() {
  kubectl get nbw -o json | jq --arg w "$window" "$jq_secs"'
    [.items[] | select((.metadata.name | startswith("sextant-demo-")) and ((.status.window // "0s") | secs) >= ($w | secs))]
    | length'
}
deadline=$((SECONDS + $(jq -rn --arg w "$window" "$jq_secs"' $w | secs | ceil') + 90))
until [ "$(full_reports)" = 3 ]; do
  [ "$SECONDS" -lt "$deadline" ] || { echo; kubectl get nbw; die "demo: the demo nodes' NodeBandwidth did not cover a whole window ($window); their agents log to $state/logs/demo-agent-N.log"; }
  printf .; sleep 2
done
echo
# Pods a run before this one left bound on the demo nodes never end: no kubelet there
# confirms their deletion.
kubectl -n sextant-demo-pods delete pods --all --force --grace-period=0 --ignore-not-found >/dev/null 2>&1 || true
kubectl delete namespace sextant-demo-pods --ignore-not-found --wait=true >/dev/null
kubectl create namespace sextant-demo-pods >/dev/null
echo "Four pods, schedulerName: sextant, each requiring 60M and expecting 80M of ingress, best-fit,"
echo "on the three demo nodes (nodeSelector sextant.io/demo=true), one at a time:"
for i in $(seq 1 4); do
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
  nodeSelector: {sextant.io/demo: "true"}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: sextant.local/busybox:dev
    imagePullPolicy: Never
    command: [sleep, "3600"]
    resources:
      requests: {cpu: 50m, memory: 16Mi}
POD
  # Each decision sees the reservations of the ones before: wait for this one's.
  for _ in $(seq 1 30); do
    [ -n "$(kubectl -n sextant-demo-pods get pod "receiver-$i" -o jsonpath='{.spec.nodeName}')" ] && break
    [ -n "$(kubectl -n sextant-demo-pods get events --field-selector "involvedObject.name=receiver-$i,reason=FailedScheduling" -o name)" ] && break
    sleep 0.5
  done
done
kubectl get nbw
echo
echo "Each node's remaining bandwidth on the pod network, as last reported, and the pods the ranker placed there:"
pods_json=$(kubectl -n sextant-demo-pods get pods -o json)
kubectl get nbw -o json | jq -r --argjson pods "$pods_json" '
  (["NODE", "INGRESS REMAINING", "EGRESS REMAINING", "PODS"] | @tsv),
  (.items[] | .metadata.name as $n | ((.status.networks // []) | map(select(.name == "pod"))[0]) as $pod
   | [$n, ($pod.ingress.remaining // "unknown"), ($pod.egress.remaining // "unknown"),
      ([$pods.items[] | select(.spec.nodeName == $n) | .metadata.name] | join(" ") | if . == "" then "-" else . end)]
   | @tsv)' | column -t -s $'\t'
placed=$(jq -r '[.items[] | select(.spec.nodeName) | .metadata.name] | join(" ")' <<<"$pods_json")
unplaced=$(jq -r '[.items[] | select(.spec.nodeName == null or .spec.nodeName == "") | .metadata.name] | join(" ")' <<<"$pods_json")
if [ -n "$unplaced" ]; then
  echo
  echo "Pending, with the reason the ranker gave:"
  kubectl -n sextant-demo-pods get events --field-selector reason=FailedScheduling \
    -o custom-columns=POD:.involvedObject.name,MESSAGE:.message | sort -u
fi
cat <<'EOT'

sextant-demo-1 has less than the required 60M left to receive, so no pod goes there.
Best-fit sends the first pod to the node whose remaining ingress is closest to the
expected 80M (sextant-demo-2). Each bound pod reserves its 80M on its node until a report
measured while it ran covers it; pods on these nodes never run (no kubelet), so theirs
stay, and the next pods go where enough is left (sextant-demo-3). The last pod finds no
node with 60M left after those reservations and stays Pending.
EOT
[ -n "$placed" ] || die "demo: the ranker placed none of the pods (their FailedScheduling events above); its log: kubectl -n sextant-system logs deploy/sextant-ranker"
on_full=$(jq -r '[.items[] | select(.spec.nodeName == "sextant-demo-1") | .metadata.name] | join(" ")' <<<"$pods_json")
[ -z "$on_full" ] || die "demo: $on_full placed on sextant-demo-1, which has less than the required 60M left"

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
