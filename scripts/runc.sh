#!/usr/bin/env bash
# Builds the runc release pinned in scripts/runc/go.mod into a cache outside the work
# tree and prints the binary's path. A binary already in the cache for that release is
# not built again.
#
#   scripts/runc.sh [path]   build it if missing, print its path
#
# path defaults to $SEXTANT_CACHE/runc-VERSION/runc (SEXTANT_CACHE: ~/.cache/sextant).
# scripts/cluster.sh up runs it for containerd 2.x (SEXTANT_CONTAINERD=2, the default):
# the pin is the runc release that containerd release is tested with.
#
# runc needs cgo (its namespace setup is C that runs before Go's runtime starts) and
# libseccomp for seccomp profiles (scripts/deps.sh installs both). It is linked
# statically: each container start, stop and delete runs runc anew, and a dynamic
# binary spends part of each run in the dynamic loader.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

version=$(pinned_version runc github.com/opencontainers/runc "$here/runc/go.mod")
out=${1:-$SEXTANT_CACHE/runc-$version/runc}
if [ ! -x "$out" ]; then
  mkdir -p "$(dirname "$out")"
  log "runc: building $version (a cold build takes a minute)"
  tmp="$out.tmp"
  (cd "$here/runc" && CGO_ENABLED=1 go build -trimpath -buildmode=pie \
    -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-s -w -X main.version=${version#v} -extldflags -static-pie" \
    -o "$tmp" github.com/opencontainers/runc) \
    || die "runc: building $version failed (needs gcc and libseccomp-dev: scripts/deps.sh)"
  mv "$tmp" "$out"
fi
echo "$out"
