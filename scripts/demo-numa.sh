#!/usr/bin/env bash
# The NUMA part of `make demo`: pods the ranker places on NUMA nodes run on exactly those
# NUMA nodes' CPUs. This machine has one NUMA node, so for the demo an agent reads a
# sysfs tree that splits its CPUs over two (node 0: the first half and all the memory;
# node 1: the rest, without memory), publishes that as the node's NodeTopology, and pins
# pods on the real cgroups. The chart's agent steps aside meanwhile (the node is
# labelled sextant.io/agent=none) and comes back at the end. Each pod prints the CPUs it
# may run on as its first command; the table puts them beside the NUMA nodes the ranker
# chose. Needs root and the chart deployed (make deploy).
#
#   scripts/demo-numa.sh        (scripts/demo.sh runs it; no arguments)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

kubeconfig=$("$here/cluster.sh" kubeconfig)
state=$(dirname "$(dirname "$kubeconfig")")
kubectl() { "$state/kube-bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
node=$(kubectl get nodes -l sextant.io/local=true -o jsonpath='{.items[0].metadata.name}')
ns=sextant-demo-numa
tree=$state/demo-numa-sysfs
agent_pid=

cleanup() {
  [ -z "$agent_pid" ] || { kill -TERM "$agent_pid" 2>/dev/null; wait "$agent_pid" 2>/dev/null || true; }
  kubectl delete namespace "$ns" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  kubectl label node "$node" sextant.io/agent- >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The split tree, from this machine's own CPUs and memory.
read -r -a cpus < <(tr ',' ' ' </sys/devices/system/cpu/online | xargs -n1 | awk -F- '{ if (NF == 2) for (i = $1; i <= $2; i++) printf "%d ", i; else printf "%d ", $1 } END { print "" }')
[ "${#cpus[@]}" -ge 2 ] || { echo "(skipped: the NUMA demo needs at least 2 CPUs to split)"; exit 0; }
half=$(( ${#cpus[@]} / 2 ))
node0=$(IFS=,; echo "${cpus[*]:0:$half}")
node1=$(IFS=,; echo "${cpus[*]:$half}")
mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
rm -rf "$tree"
mkdir -p "$tree/sys/devices/system/cpu" "$tree/sys/devices/system/node/node0" "$tree/sys/devices/system/node/node1" "$tree/proc"
cp /sys/devices/system/cpu/online "$tree/sys/devices/system/cpu/online"
cp /proc/meminfo "$tree/proc/meminfo"
echo "$node0" >"$tree/sys/devices/system/node/node0/cpulist"
echo "$node1" >"$tree/sys/devices/system/node/node1/cpulist"
echo "Node 0 MemTotal:       $mem_kb kB" >"$tree/sys/devices/system/node/node0/meminfo"
echo "Node 1 MemTotal:       0 kB" >"$tree/sys/devices/system/node/node1/meminfo"
echo "10 20" >"$tree/sys/devices/system/node/node0/distance"
echo "20 10" >"$tree/sys/devices/system/node/node1/distance"

(cd "$repo" && go build -o bin/sextant-agent ./agent/cmd/sextant-agent) || die "demo-numa: building sextant-agent failed"
agent_kubeconfig=$(demo_agent_kubeconfig "$state" "$kubeconfig" "$node") || die "demo-numa: no agent credentials (make deploy first)"

echo "The chart's agent steps aside on $node; a demo agent reads a tree with NUMA node 0 = CPUs $node0"
echo "(with the memory) and NUMA node 1 = CPUs $node1 (no memory), and pins on the real cgroups."
kubectl label node "$node" sextant.io/agent=none --overwrite >/dev/null
for _ in $(seq 1 120); do
  [ -z "$(kubectl -n sextant-system get pods -l app.kubernetes.io/component=agent --field-selector "spec.nodeName=$node" -o name)" ] && break
  sleep 1
done
# A fresh NodeTopology: the demo agent would otherwise carry the real devices over from
# the chart agent's, as vanished (Unhealthy).
kubectl delete ntopo "$node" --ignore-not-found >/dev/null
default_if=$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i+1); exit}}')
"$repo/bin/sextant-agent" run --kubeconfig "$agent_kubeconfig" --node-name "$node" --sysfs-root "$tree" \
  --cri-endpoint "unix://$state/run/containerd.sock" \
  --pod-resources-socket "$state/kubelet/root/pod-resources/kubelet.sock" \
  --interfaces "$default_if" --sidecar-terminator=false --device-plugin=false --metrics-addr 127.0.0.1:19465 \
  --topology-interval 1s >>"$state/logs/demo-numa-agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 1 60); do
  [ "$(kubectl get ntopo "$node" -o jsonpath='{.status.summary.numaNodes}' 2>/dev/null)" = 2 ] && break
  sleep 1
done
kubectl get ntopo "$node"

kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$ns" >/dev/null
pod() { # name policy cpu memory scheduler
  local mem=""
  [ -z "$4" ] || mem=", memory: $4"
  kubectl apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: $ns
  annotations: {$2}
spec:
  schedulerName: $5
  nodeSelector: {sextant.io/local: "true"}
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: sextant.local/busybox:dev
    imagePullPolicy: Never
    command: [sh, -c, "grep -E '^(Cpus|Mems)_allowed_list' /proc/self/status; exec sleep 3600"]
    resources:
      requests: {cpu: $3$mem}
POD
}
# Sizes relative to a NUMA node: the two web pods and batch cannot share one.
web=$(( half * 1000 / 5 ))m
batch=$(( half * 1000 * 7 / 10 ))m
echo
echo "Four pods: web-1 and web-2 (single-numa-node, $web CPU and 32Mi each), then batch (single-numa-node,"
echo "$batch CPU, no memory request), placed by sextant; plain, placed by kube-scheduler without sextant."
pod web-1 "numa.sextant.io/policy: single-numa-node" "$web" 32Mi sextant
pod web-2 "numa.sextant.io/policy: single-numa-node" "$web" 32Mi sextant
for _ in $(seq 1 30); do
  [ -n "$(kubectl -n "$ns" get pod web-2 -o jsonpath='{.spec.nodeName}')" ] && break
  sleep 1
done
pod batch "numa.sextant.io/policy: single-numa-node" "$batch" "" sextant
pod plain "" 100m 32Mi default-scheduler
for _ in $(seq 1 90); do
  n=0
  for p in web-1 web-2 batch plain; do
    kubectl -n "$ns" logs "$p" 2>/dev/null | grep -q Cpus_allowed_list && n=$((n + 1))
  done
  [ "$n" = 4 ] && break
  sleep 1
done
topo=$(kubectl get ntopo "$node" -o json)
{
  printf 'POD\tNUMA NODES (ranker)\tCPUS OF THOSE NODES\tRUNS ON CPUS\tMEMORY NODES\tPINNED\n'
  for p in web-1 web-2 batch plain; do
    chosen=$(kubectl -n "$ns" get pod "$p" -o jsonpath='{.metadata.annotations.numa\.sextant\.io/nodes}')
    of=$(jq -r --arg c "$chosen" '[.status.numaNodes[] | select(.id as $i | $c | split(",") | map(tonumber) | index($i)) | .cpus[]] | map(tostring) | join(",")' <<<"$topo")
    logs=$(kubectl -n "$ns" logs "$p" 2>/dev/null)
    on=$(awk '/^Cpus_allowed_list/ {print $2; exit}' <<<"$logs")
    mems=$(awk '/^Mems_allowed_list/ {print $2; exit}' <<<"$logs")
    how=$(kubectl -n "$ns" get events --field-selector "involvedObject.name=$p,reason=NUMAPinned" -o jsonpath='{.items[0].message}' 2>/dev/null |
      sed -nE 's/.*\(([a-z-]+), ([0-9.]+[mµn]?s) after.*/\1, \2 after bound/p' || true)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$p" "${chosen:--}" "${of:--}" "${on:-?}" "${mems:-?}" "${how:-no}"
  done
} | column -t -s $'\t'
cat <<EOT

Each pod placed by sextant runs on exactly the CPUs of the NUMA node the ranker chose, from
its first instruction ("pod-cgroup": the agent narrowed the pod's cgroup before any of its
containers existed). NUMA node 1 has no memory, so pods there take memory from node 0, the
nearest node with memory. The pod sextant did not place keeps every CPU.
The chart's agent takes the node back now.
EOT
