#!/usr/bin/env bash
# Builds sextant's container images as image tarballs, in Go (scripts/images/mkimage),
# without Docker or a registry, and prints their paths. `import` also loads them into
# the local cluster's containerd.
#
#   scripts/images.sh base      the sandbox (pause), busybox test and exit0 images
#   scripts/images.sh project   sextant-agent, sextant-ranker, sextant-sidecars and
#                               sextant-sidecar-wrapper, from fresh static builds
#   scripts/images.sh import    both sets, imported into the running local cluster
#   scripts/images.sh oci       exit0, sextant-agent, sextant-ranker, sextant-sidecars and
#                               sextant-sidecar-wrapper
#                               as OCI image layouts under bin/images/, each an image index
#                               of $IMAGE_PLATFORMS (default linux/amd64,linux/arm64), from
#                               bin/linux_ARCH/ (`make images` builds those)
#   scripts/images.sh push REGISTRY TAG
#                               push bin/images/* to REGISTRY/NAME:TAG and the chart, as an
#                               OCI artifact, to oci://REGISTRY; PLAIN_HTTP=1 for a plain
#                               HTTP registry (localhost and 127.0.0.1 always are)
#
# Env: SEXTANT_IMAGE_TAG (default dev), SEXTANT_CACHE (tarballs in images/, tools in
# bin/; default ~/.cache/sextant), IMAGE_PLATFORMS; for oci and push also IMAGE_BIN_DIR
# (default bin/), IMAGE_LAYOUT_DIR (default bin/images/) and IMAGE_NAMES (the images).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

TAG=${SEXTANT_IMAGE_TAG:-dev}
out=$SEXTANT_CACHE/images
tools=$SEXTANT_CACHE/bin

tool() { # name args...
  local name=$1; shift
  mkdir -p "$tools"
  [ -x "$tools/$name" ] && [ "$tools/$name" -nt "$here/images/$name/main.go" ] ||
    (cd "$repo" && go build -o "$tools/$name" "./scripts/images/$name") || die "images: building $name failed"
  "$tools/$name" "$@"
}
mkimage() { tool mkimage "$@"; }

base() {
  mkdir -p "$out" "$tools"
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
  mkdir -p "$out"
  make -s -C "$repo" build >&2 || die "images: make build failed"
  local bin
  for bin in sextant-agent sextant-ranker sextant-sidecars; do
    mkimage --ref "sextant.local/$bin:$TAG" --out "$out/$bin.tar" \
      --file "/usr/local/bin/$bin=$repo/bin/$bin" --entrypoint "/usr/local/bin/$bin"
  done
  # The webhook's init container copies the wrapper out of this image into each pod
  # with sidecars: a tiny image of its own, not the agent's.
  mkimage --ref "sextant.local/sextant-sidecar-wrapper:$TAG" --out "$out/sextant-sidecar-wrapper.tar" \
    --file "/sextant-sidecar-wrapper=$repo/bin/sextant-sidecar-wrapper" --entrypoint /sextant-sidecar-wrapper
  echo "$out/sextant-agent.tar $out/sextant-ranker.tar $out/sextant-sidecars.tar $out/sextant-sidecar-wrapper.tar"
}

# oci and push: the platforms, the binaries' directory (one linux_ARCH/ per platform),
# the layouts' directory and the images (e2e tests take a few, from a directory of their own).
PLATFORMS=${IMAGE_PLATFORMS:-linux/amd64,linux/arm64}
bins=${IMAGE_BIN_DIR:-$repo/bin}
layouts=${IMAGE_LAYOUT_DIR:-$repo/bin/images}
read -r -a names <<<"${IMAGE_NAMES:-exit0 sextant-agent sextant-ranker sextant-sidecars sextant-sidecar-wrapper}"

oci() {
  local name entry
  mkdir -p "$layouts"
  for name in "${names[@]}"; do
    case $name in
      exit0 | sextant-sidecar-wrapper) entry=/$name ;;
      *) entry=/usr/local/bin/$name ;;
    esac
    mkimage --ref "sextant.local/$name:$TAG" --layout "$layouts/$name" --platforms "$PLATFORMS" \
      --file "$entry=$bins/linux_{arch}/$name" --entrypoint "$entry"
    echo "$layouts/$name"
  done
}

push() { # registry tag
  local registry=${1:-} tag=${2:-} flags=() name chart out
  [ -n "$registry" ] && [ -n "$tag" ] || die "images: push needs REGISTRY and TAG, e.g. push registry.example.com/sextant v0.1.0"
  for name in "${names[@]}"; do
    [ -f "$layouts/$name/index.json" ] || die "images: $layouts/$name is missing: run 'make images' first"
  done
  case ${registry%%/*} in localhost | localhost:* | 127.0.0.1 | 127.0.0.1:*) PLAIN_HTTP=1 ;; esac
  [ "${PLAIN_HTTP:-}" = 1 ] && flags=(--plain-http)
  tool pushimage --registry "$registry" --tag "$tag" "${flags[@]}" "${names[@]/#/$layouts/}" ||
    die "images: pushing the images to $registry failed"
  # The chart's appVersion is its images' default tag: the one just pushed.
  chartdir=$(mktemp -d)
  trap 'rm -rf "$chartdir"' EXIT
  (cd "$repo" && go tool helm package charts/sextant --app-version "$tag" -d "$chartdir" >/dev/null) ||
    die "images: helm package failed"
  chart=$(echo "$chartdir"/*.tgz)
  out=$(cd "$repo" && go tool helm push "$chart" "oci://$registry" "${flags[@]}" 2>&1) ||
    die "images: pushing the chart to oci://$registry failed: $out"
  # helm says "Pushed: REF" and "Digest: sha256:..."; print the chart as the images are.
  printf '%s@%s\n' "$(sed -n 's/^Pushed: //p' <<<"$out")" "$(sed -n 's/^Digest: //p' <<<"$out")"
}

case "${1:-}" in
  base) base ;;
  oci) oci ;;
  push) push "${2:-}" "${3:-}" ;;
  project) project ;;
  import)
    for tarball in $(base) $(project); do "$here/cluster.sh" import "$tarball"; done
    log "images: imported into the local cluster (tag $TAG)" ;;
  "") usage_error "images: no command (want base, project, import, oci or push)" ;;
  *) usage_error "images: unknown command '$1' (want base, project, import, oci or push)" ;;
esac
