#!/usr/bin/env bash
# Shows the local cluster with sextant installed. Run through `make demo`, which brings
# the cluster up and deploys first.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

kubeconfig=$("$here/cluster.sh" kubeconfig)
kubectl() { "$(dirname "$(dirname "$kubeconfig")")/kube-bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

section() { printf '\n== %s\n' "$*"; }

section "The node (a real kubelet on containerd)"
kubectl get nodes -o wide
section "sextant's heartbeat CRDs"
kubectl get crd nodebandwidths.sextant.io nodetopologies.sextant.io
section "sextant's components"
kubectl -n sextant-system get all 2>/dev/null || true
cat <<EOT

The cluster keeps running: use it with
  export KUBECONFIG=$kubeconfig
and stop it with 'make cluster-down'.
EOT
