#!/usr/bin/env bash
# Installs the Debian packages sextant's build, tests and local cluster need.
# Idempotent: packages already present are not touched, and apt's index is refreshed
# only when something is missing.
#
#   scripts/deps.sh             (make deps; no arguments; needs root if anything is missing)
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"
exit_on_help "$@"

packages=(
  # eBPF toolchain: bpf2go drives clang; headers from libbpf and the kernel uapi.
  clang llvm libbpf-dev linux-libc-dev bpftool
  # go test -race needs cgo, and cgo a C compiler and libc's headers; scripts/runc.sh
  # builds runc with cgo and libseccomp.
  gcc libc6-dev libseccomp-dev
  # The local cluster: etcd for the API server, containerd + runc for the kubelet,
  # CNI plugins for the pod bridge, busybox for the test image.
  etcd-server containerd runc containernetworking-plugins busybox-static
  iptables conntrack socat ethtool iproute2 kmod util-linux
  # Traffic and topology references for tests and benchmarks.
  iperf3 hwloc pciutils
  # Certificates, readiness probes and JSON in the cluster script; column for the demo.
  openssl curl jq bsdextrautils
  # The dashboards' e2e test scrapes the cluster with a real Prometheus (and promtool).
  prometheus
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: need root to install: ${missing[*]}" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Services must not be started by the package scripts: the cluster script runs its own
# containerd and etcd with their own state.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
