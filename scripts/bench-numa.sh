#!/usr/bin/env bash
# bench-numa: how NUMA pinning holds up on the local cluster's real kubelet and
# containerd. 50 single-numa-node pods placed by a ranker at once, with the agent
# reading a tree that splits the machine's CPUs over two NUMA nodes (as the e2e test
# does: test/e2e/numa_test.go, TestNUMABench); then 50 more started while the agent is
# down. Prints the share pinned from the first instruction (goal 100%) and p50/p99 of the
# pin latency per path (goal for the catch-up path: p99 <= 100 ms). Needs root.
#
#   scripts/bench-numa.sh       (make bench-numa; no arguments)
#
# Brings the cluster up if it is not (never down: others may share it); the test cleans
# up its namespace, processes and the node label it sets, also on failure.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
cd "$(dirname "$0")/.."

[[ $(id -u) == 0 ]] || die "bench-numa needs root (it runs an agent that writes the node's cgroups)"
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  log "bench-numa: the local cluster is not up; starting it"
  scripts/cluster.sh up
fi
KUBECONFIG=$(scripts/cluster.sh kubeconfig)
export KUBECONFIG SEXTANT_BENCH_NUMA=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if ! go test -tags e2e -count=1 -run '^TestNUMABench$' -timeout 30m ./test/e2e/ -v >"$out" 2>&1; then
  cat "$out" >&2
  die "bench-numa: the benchmark failed"
fi
grep '^bench-numa:' "$out"
