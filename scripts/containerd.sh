#!/usr/bin/env bash
# Builds the containerd release pinned in scripts/containerd/go.mod (containerd, its runc
# shim and ctr) into a cache outside the work tree and prints the directory that holds
# them. A binary already in the cache for that release is not built again.
#
#   scripts/containerd.sh [bin-dir]   build what is missing, print the directory
#
# bin-dir defaults to $SEXTANT_CACHE/containerd-VERSION/bin (SEXTANT_CACHE:
# ~/.cache/sextant). scripts/cluster.sh up runs it unless SEXTANT_CONTAINERD=debian.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

version=$(pinned_version containerd github.com/containerd/containerd/v2 "$here/containerd/go.mod")
bindir=${1:-$SEXTANT_CACHE/containerd-$version/bin}
mkdir -p "$bindir"

# Static builds without the snapshotters that need cgo; the cluster uses overlayfs.
tags="no_btrfs no_devmapper no_zfs no_aufs"
ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$version \
 -X github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2"

for cmd in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$bindir/$cmd" ] && continue
  log "containerd: building $cmd $version (cold builds take minutes)"
  tmp="$bindir/.$cmd.tmp"
  (cd "$here/containerd" && CGO_ENABLED=0 go build -trimpath -tags "$tags" -ldflags "$ldflags" -o "$tmp" "github.com/containerd/containerd/v2/cmd/$cmd") \
    || die "containerd: building $cmd failed"
  mv "$tmp" "$bindir/$cmd"
done
echo "$bindir"
