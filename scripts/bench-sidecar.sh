#!/usr/bin/env bash
# bench-sidecar: how long a sidecar outlives its Job's main container. 20 Jobs at once
# on the local cluster's real kubelet and containerd, each a main container that exits 0
# and a `sleep 3600` sidecar (which ignores SIGTERM as PID 1), prepared by the webhook
# and stopped by the agent, both built from this tree and run as processes (as the e2e
# tests run them: test/e2e/sidecar_test.go, TestSidecarBench). Prints p50 and p99 of
# (main container finished -> sidecar finished), from containerd's own timestamps.
# Goal: p99 <= 1 s. Needs root.
#
#   scripts/bench-sidecar.sh    (make bench-sidecar; no arguments)
#
# Brings the cluster up if it is not (never down: others may share it); cleans up the
# namespace, webhook configurations and processes it made, also on failure.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"
cd "$(dirname "$0")/.."

[[ $(id -u) == 0 ]] || die "bench-sidecar needs root (it talks to the node's containerd)"
if ! scripts/cluster.sh status >/dev/null 2>&1; then
  log "bench-sidecar: the local cluster is not up; starting it"
  scripts/cluster.sh up
fi
KUBECONFIG=$(scripts/cluster.sh kubeconfig)
export KUBECONFIG SEXTANT_BENCH_SIDECAR=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if ! go test -tags e2e -count=1 -run '^TestSidecarBench$' -timeout 20m ./test/e2e/ -v >"$out" 2>&1; then
  cat "$out" >&2
  die "bench-sidecar: the benchmark failed"
fi
grep '^bench-sidecar:' "$out"
