#!/usr/bin/env bash
# Builds sextant's container images as image tarballs, in Go (scripts/images/mkimage),
# without Docker or a registry, and prints their paths. `import` also loads them into
# the local cluster's containerd.
#
#   scripts/images.sh base      the sandbox (pause), busybox test and exit0 images
#   scripts/images.sh project   sextant-agent, sextant-ranker and sextant-sidecar-wrapper,
#                               from fresh static builds
#   scripts/images.sh import    both sets, imported into the running local cluster
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"

TAG=${SEXTANT_IMAGE_TAG:-dev}
out=$SEXTANT_CACHE/images
tools=$SEXTANT_CACHE/bin
mkdir -p "$out" "$tools"

mkimage() {
  [ -x "$tools/mkimage" ] && [ "$tools/mkimage" -nt "$here/images/mkimage/main.go" ] ||
    (cd "$repo" && go build -o "$tools/mkimage" ./scripts/images/mkimage) || die "images: building mkimage failed"
  "$tools/mkimage" "$@"
}

base() {
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tools/pause" ./scripts/images/pause) ||
    die "images: building pause failed"
  mkimage --ref sextant.local/pause:3.6 --out "$out/pause.tar" --file /pause="$tools/pause" --entrypoint /pause
  # What a finished sidecar on a virtual node is swapped to: a binary that exits 0.
  (cd "$repo" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tools/exit0" ./scripts/images/exit0) ||
    die "images: building exit0 failed"
  mkimage --ref "sextant.local/exit0:$TAG" --out "$out/exit0.tar" --file /exit0="$tools/exit0" --entrypoint /exit0
  [ -x /bin/busybox ] || die "images: /bin/busybox missing (apt-get install busybox-static)"
  local links=() applet
  for applet in $(/bin/busybox --list); do
    [ "$applet" = busybox ] || links+=(--link "/bin/$applet=busybox")
  done
  mkimage --ref "sextant.local/busybox:$TAG" --out "$out/busybox.tar" \
    --file /bin/busybox=/bin/busybox "${links[@]}" --entrypoint /bin/sh
  echo "$out/pause.tar $out/busybox.tar $out/exit0.tar"
}

project() {
  make -s -C "$repo" build >&2 || die "images: make build failed"
  local bin
  for bin in sextant-agent sextant-ranker; do
    mkimage --ref "sextant.local/$bin:$TAG" --out "$out/$bin.tar" \
      --file "/usr/local/bin/$bin=$repo/bin/$bin" --entrypoint "/usr/local/bin/$bin"
  done
  # The webhook's init container copies the wrapper out of this image into each pod
  # with sidecars: a tiny image of its own, not the agent's.
  mkimage --ref "sextant.local/sextant-sidecar-wrapper:$TAG" --out "$out/sextant-sidecar-wrapper.tar" \
    --file "/sextant-sidecar-wrapper=$repo/bin/sextant-sidecar-wrapper" --entrypoint /sextant-sidecar-wrapper
  echo "$out/sextant-agent.tar $out/sextant-ranker.tar $out/sextant-sidecar-wrapper.tar"
}

case "${1:-}" in
  base) base ;;
  project) project ;;
  import)
    for tarball in $(base) $(project); do "$here/cluster.sh" import "$tarball"; done
    log "images: imported into the local cluster (tag $TAG)" ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
