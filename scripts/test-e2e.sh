#!/usr/bin/env bash
# Runs the integration suite (test/e2e) against the real local cluster. Brings the
# cluster up when it is not running, and takes it down again afterwards in that case
# (set SEXTANT_KEEP_CLUSTER=1 to keep it). Imports this tree's images first. Needs root.
#
#   scripts/test-e2e.sh         (make test-e2e; no arguments)
#
# Env: E2E_TIMEOUT (go test -timeout, default 60m), SEXTANT_KEEP_CLUSTER.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

started=0
if ! "$here/cluster.sh" status >/dev/null 2>&1; then
  "$here/cluster.sh" up
  started=1
fi
cleanup() {
  if [ "$started" = 1 ] && [ -z "${SEXTANT_KEEP_CLUSTER:-}" ]; then
    "$here/cluster.sh" down || true
  fi
}
trap cleanup EXIT
# The suite deploys what it tests: make sure the images of this tree are in the cluster.
"$here/images.sh" import
cd "$repo"
KUBECONFIG=$("$here/cluster.sh" kubeconfig) go test -count=1 -tags e2e -timeout "${E2E_TIMEOUT:-60m}" -v ./test/e2e/...
