#!/usr/bin/env bash
# bench-ranker: sextant-ranker against vanilla kube-scheduler, in the manner of
# kube-scheduler's scheduler_perf, on the real API server of the local cluster. For each
# size (default 500 and 5000 Node objects, no kubelets) with a NodeBandwidth and a
# NodeTopology each, schedules the same 5000 pending pods once with each scheduler and
# prints pods/s, their ratio, memory, bandwidth violations and NUMA spread. Goals at 5000 nodes:
# ratio >= 0.80, peak memory <= 1.5x vanilla's, zero bandwidth violations for sextant.
# See scripts/bench-ranker/main.go.
#
#   scripts/bench-ranker.sh [--nodes 500,5000] [--pods 5000] [--schedulers sextant,vanilla]
#                           [--shape 2numa] [--rounds 1] [--seed 1] [--timeout 10m] ...
#                           (all flags: --help; make bench-ranker passes BENCH_RANKER_ARGS)
#
# --rounds N runs each scheduler N times per size, in reverse order every other round,
# and judges the ratio goal on the median of the rounds' ratios. With several shapes,
# each round sets every shape up in turn (reversed every other round), so that the
# shapes compared in a round ran minutes, not rounds, apart.
#
# --shape picks the bench nodes' shape: 2numa (the default: 2 NUMA nodes of 16 CPUs and
# 64 GiB, 4 GPUs, one network), 8numa-8gpu (8 NUMA nodes as 2numa's in 2 sockets, one GPU
# on each; a tenth of the pods ask for 1-4 GPUs), 8numa-dra (8numa-8gpu's GPUs as DRA
# ResourceSlices of the agent's driver; the GPU pods ask through ResourceClaims, and
# vanilla kube-scheduler allocates them with its own DynamicResources) or 2numa-2net
# (2numa with pod and storage networks in every NodeBandwidth; a quarter of the pods
# that ask for bandwidth name storage). A list runs each shape at every size and prints each one's throughput and
# peak memory over the first's per scheduler; the goals for sextant-ranker are 8-NUMA
# within 10% of 2-NUMA, and two networks within 5% of one in peak memory:
#
#   make bench-ranker BENCH_RANKER_ARGS="--nodes 5000 --schedulers sextant --shape 2numa,8numa-8gpu"
#   make bench-ranker BENCH_RANKER_ARGS="--nodes 5000 --schedulers sextant --shape 2numa,2numa-2net"
#   make bench-ranker BENCH_RANKER_ARGS="--nodes 5000 --shape 8numa-dra --rounds 5"
#
# Every sextant run also prints its plugins' mean time per Score and Filter call from the
# ranker's /metrics (kube-scheduler times plugins in a 10% sample of scheduling cycles).
#
# Brings the cluster up if it is not (never down: others may share it), applies the
# CRDs, builds sextant-ranker and the harness into bin/bench/, and removes every Node,
# heartbeat and pod it made, also on failure or ^C.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# --help prints this header, then the harness's flags (the one build it needs), and
# touches nothing else: no cluster, no ranker build.
for a in "$@"; do
  case "$a" in
    -h|-help|--help)
      print_usage
      cd "$(dirname "$0")/.."
      go run ./scripts/bench-ranker --help 2>&1 | sed '/^exit status/d'
      exit 0 ;;
  esac
done
cd "$(dirname "$0")/.."

mkdir -p bin/bench
log "bench-ranker: building the harness"
go build -o bin/bench/bench-ranker ./scripts/bench-ranker

[[ $(id -u) == 0 ]] || die "bench-ranker needs root (scripts/cluster.sh up runs a kubelet)"

if ! scripts/cluster.sh status >/dev/null 2>&1; then
  log "bench-ranker: the local cluster is not up; starting it"
  scripts/cluster.sh up
fi
kubeconfig=$(scripts/cluster.sh kubeconfig)
kube_bin=$(dirname "$(dirname "$kubeconfig")")/kube-bin
kubectl() { "$kube_bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

# Pods left running (e.g. the chart the e2e suite deploys: two more rankers watching every
# Node, pod and heartbeat) take CPU from the schedulers and the API server under test.
running=$(kubectl get pods -A --field-selector=status.phase=Running --no-headers 2>/dev/null \
  | awk '{print $1 "/" $2}' || true)
if [[ -n $running ]]; then
  log "bench-ranker: WARNING: pods are running in the cluster and will skew the numbers" \
    "(make cluster-down gives a clean one):" $running
fi

kubectl apply --server-side --force-conflicts -f charts/sextant/crds/ >/dev/null
kubectl wait --for condition=Established --timeout 60s \
  crd/nodebandwidths.sextant.io crd/nodetopologies.sextant.io >/dev/null

# Vanilla-only runs need no ranker; skip its (slow) build.
need_ranker=true
prev=
for a in "$@"; do
  case "$prev" in --schedulers|-schedulers) [[ $a == *sextant* ]] || need_ranker=false ;; esac
  case "$a" in --schedulers=*|-schedulers=*) [[ ${a#*=} == *sextant* ]] || need_ranker=false ;; esac
  prev=$a
done

if $need_ranker; then
  log "bench-ranker: building sextant-ranker"
  go build -o bin/bench/sextant-ranker ./ranker/cmd/sextant-ranker \
    || die "bench-ranker: building sextant-ranker failed; run with --schedulers vanilla to measure kube-scheduler alone"
fi

exec bin/bench/bench-ranker --kubeconfig "$kubeconfig" \
  --kube-scheduler "$kube_bin/kube-scheduler" --sextant-ranker bin/bench/sextant-ranker "$@"
