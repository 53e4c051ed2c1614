#!/usr/bin/env bash
# The sidecar part of `make demo`: a Job whose main container works for 5 s beside a
# `sleep 3600` sidecar (which, as PID 1, would ignore SIGTERM) runs to completion on the
# local node. The chart's webhook prepares the sidecar (native sidecar, exit-normalising
# wrapper); the chart's agent stops it over CRI as soon as the main container exits.
# Shows the prepared pod, the Job's outcome and how long the sidecar outlived its main
# container. Needs the chart deployed (make deploy).
#
#   scripts/demo-sidecar.sh     (scripts/demo.sh runs it; no arguments)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

kubeconfig=$("$here/cluster.sh" kubeconfig)
state=$(dirname "$(dirname "$kubeconfig")")
kubectl() { "$state/kube-bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }
ns=sextant-demo-sidecar

kubectl delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
kubectl create namespace "$ns" >/dev/null
kubectl apply -f - >/dev/null <<EOT
apiVersion: batch/v1
kind: Job
metadata: {name: report, namespace: $ns}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {sextant.io/local: "true"}
      containers:
      - name: main
        image: sextant.local/busybox:dev
        imagePullPolicy: Never
        command: [sh, -c, 'echo working; sleep 5; echo done']
      - name: log-shipper
        image: sextant.local/busybox:dev
        imagePullPolicy: Never
        command: [sleep, "3600"]
        env: [{name: SEXTANT_SIDECAR, value: "true"}]
EOT
echo "Job 'report': main container 'main' (5 s of work), sidecar 'log-shipper' (sleep 3600, env SEXTANT_SIDECAR=true)."
kubectl -n "$ns" wait --for=condition=complete job/report --timeout=120s >/dev/null ||
  die "demo: the Job did not complete; see kubectl -n $ns describe pods"
pod=$(kubectl -n "$ns" get pods -l batch.kubernetes.io/job-name=report -o jsonpath='{.items[0].metadata.name}')
echo "As the webhook prepared it:"
kubectl -n "$ns" get pod "$pod" -o json | jq -r '
  "  init containers: \([.spec.initContainers[] | "\(.name)\(if .restartPolicy == "Always" then " (native sidecar)" else "" end)"] | join(", "))",
  "  log-shipper runs: \([.spec.initContainers[] | select(.name == "log-shipper") | .command[]] | join(" ")) with $SEXTANT_SIDECAR_COMMAND=\(.metadata.annotations["sidecar.sextant.io/command-log-shipper"])",
  "  containers: \([.spec.containers[].name] | join(", "))"'
kubectl -n "$ns" get job report
kubectl -n "$ns" get pod "$pod" -o json | jq -r '
  ([.status.containerStatuses[] | select(.name == "main")][0].state.terminated) as $m
  | ([.status.initContainerStatuses[] | select(.name == "log-shipper")][0].state.terminated) as $s
  | "main finished \($m.finishedAt) (exit \($m.exitCode)); log-shipper finished \($s.finishedAt) (exit \($s.exitCode)); pod \(.status.phase)"'
echo "The agent's record (its timing is from containerd's timestamps, to the millisecond):"
kubectl -n "$ns" get events --field-selector reason=SidecarStopped -o custom-columns='REASON:.reason,FROM:.source.component,MESSAGE:.message' --no-headers | sed 's/^/  /'
