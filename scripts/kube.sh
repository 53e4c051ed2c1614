#!/usr/bin/env bash
# Builds the Kubernetes binaries of the release pinned in scripts/kube/go.mod into a
# cache outside the work tree and prints the directory that holds them. A binary already
# in the cache for that release is not built again.
#
#   scripts/kube.sh [bin-dir]      build what is missing, print the directory
#
# bin-dir defaults to $SEXTANT_CACHE/kube-VERSION/bin (SEXTANT_CACHE: ~/.cache/sextant).
# scripts/cluster.sh up runs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

version=$(pinned_version kube k8s.io/kubernetes "$here/kube/go.mod")
bindir=${1:-$SEXTANT_CACHE/kube-$version/bin}
mkdir -p "$bindir"

minor=${version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/client-go/pkg/version.gitVersion=$version \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
  [ -x "$bindir/$cmd" ] && continue
  log "kube: building $cmd $version (cold builds take minutes)"
  tmp="$bindir/.$cmd.tmp"
  (cd "$here/kube" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$cmd") \
    || die "kube: building $cmd failed"
  mv "$tmp" "$bindir/$cmd"
done
echo "$bindir"
