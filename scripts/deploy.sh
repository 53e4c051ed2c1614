#!/usr/bin/env bash
# Builds sextant's images, imports them into the local cluster, and installs (or
# upgrades) the chart there with helm (pinned in go.mod, run with `go tool`), as release
# sextant in namespace sextant-system, and waits until it is ready. Needs the local
# cluster running (make cluster-up).
#
#   scripts/deploy.sh           (make deploy; no arguments)
#
# Env: SEXTANT_IMAGE_TAG (default dev), SEXTANT_API_PORT (default 6443),
# SEXTANT_DEPLOY_TIMEOUT (helm's --timeout, default 5m).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

"$here/cluster.sh" status >/dev/null 2>&1 || die "deploy: the local cluster is not running (make cluster-up)"
"$here/images.sh" import
kubeconfig=$("$here/cluster.sh" kubeconfig)
state=$(dirname "$(dirname "$kubeconfig")")
node_ip=$(cat "$state/node-ip")
# helm installs the chart's CRDs only on first install; apply them so a changed CRD
# reaches a cluster that already has an older one.
"$state/kube-bin/kubectl" --kubeconfig "$kubeconfig" apply --server-side --force-conflicts \
  -f "$repo/charts/sextant/crds" >/dev/null || die "deploy: applying the CRDs failed"
# diagnose prints what keeps the release from being ready: its pods, the events of those
# not ready, and the last lines of their containers' logs.
diagnose() {
  local k=("$state/kube-bin/kubectl" --kubeconfig "$kubeconfig" -n sextant-system)
  log "deploy: the release's pods"
  "${k[@]}" get pods -o wide >&2 || true
  local pod
  for pod in $("${k[@]}" get pods -o jsonpath='{range .items[*]}{.metadata.name}{" "}{range .status.conditions[?(@.type=="Ready")]}{.status}{end}{"\n"}{end}' 2>/dev/null | awk '$2 != "True" {print $1}'); do
    log "deploy: pod $pod is not ready"
    "${k[@]}" get events --field-selector "involvedObject.name=$pod" -o custom-columns=AGE:.lastTimestamp,TYPE:.type,REASON:.reason,MESSAGE:.message >&2 || true
    "${k[@]}" logs "$pod" --all-containers --tail 30 >&2 || true
  done
}
log "deploy: installing charts/sextant as release sextant in namespace sextant-system"
(cd "$repo" && go tool helm upgrade --install sextant charts/sextant \
  --kubeconfig "$kubeconfig" --namespace sextant-system --create-namespace \
  --set image.tag="${SEXTANT_IMAGE_TAG:-dev}" --set image.pullPolicy=Never \
  --set apiServer.host="$node_ip" --set apiServer.port="${SEXTANT_API_PORT:-6443}" \
  `# Meter the node's default-route NIC and the demo veth (scripts/demo-net.sh).` \
  --set "agent.interfaces={$(ip -4 route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i+1); exit}}'),sxdemo0}" \
  --set "agent.nicCapacities={sxdemo0=200M}" \
  `# The demo veth as a network of its own: the node's eth0 has no known speed.` \
  --set-json 'agent.networks={"demo":["sxdemo0"]}' \
  `# Bandwidth enforcement on the demo veth only, its state under the cluster's.` \
  --set 'agent.enforcement.networks={demo}' --set agent.enforcement.stateDir="$state/agent-state" \
  `# Sidecars: the local containerd's socket. Pods labelled sextant.io/e2e-sidecar belong` \
  `# to the e2e tests, which run their own agent and webhook for them (test/e2e/sidecar_test.go).` \
  --set sidecar.criSocket="$state/run/containerd.sock" \
  `# The kubelet runs with --root-dir under the cluster's state (scripts/cluster.sh).` \
  --set agent.kubeletDir="$state/kubelet/root" \
  `# Accelerators through the agent's DRA driver (TestDRADevicesAligned); the other tests'` \
  `# accelerators come from their own agents' device plugins, so no extended-resource mapping.` \
  --set 'agent.devices.dra.kinds={accelerator}' --set agent.devices.dra.extendedResources=false \
  --set-string 'sidecar.podSelector=!sextant.io/e2e-sidecar' \
  --set-json 'webhook.objectSelector={"matchExpressions":[{"key":"sextant.io/e2e-sidecar","operator":"DoesNotExist"}]}' \
  `# Only the kubelet node runs pods: tests add Node objects that have no kubelet.` \
  --set-string "webhook.nodeSelector.sextant\.io/local=true" \
  `# A rebuilt image under the same tag must still roll the pods.` \
  --set-string "agent.podAnnotations.sextant\.io/image-digest=$(sha256sum "$SEXTANT_CACHE/images/sextant-agent.tar" | cut -c1-16)" \
  --set-string "ranker.podAnnotations.sextant\.io/image-digest=$(sha256sum "$SEXTANT_CACHE/images/sextant-ranker.tar" | cut -c1-16)" \
  --set-string "webhook.podAnnotations.sextant\.io/image-digest=$(sha256sum "$SEXTANT_CACHE/images/sextant-sidecars.tar" | cut -c1-16)" \
  --wait --timeout "${SEXTANT_DEPLOY_TIMEOUT:-5m}") || { diagnose; die "deploy: helm upgrade --install failed"; }
