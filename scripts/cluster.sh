#!/usr/bin/env bash
# A real single-machine Kubernetes cluster with no image registry: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, one kubelet on a private containerd, and a
# CNI bridge for pods. Everything it writes lives under one git-ignored directory
# ($SEXTANT_CLUSTER_DIR, default .cluster/ in the repository), apart from the
# Kubernetes binaries, containerd and images, which are cached under $SEXTANT_CACHE.
#
#   scripts/cluster.sh up          start it (idempotent: a running cluster is left as is)
#   scripts/cluster.sh down        stop it and remove every process, mount, network
#                                  namespace, veth and cgroup it made, and its state
#   scripts/cluster.sh status      say what runs
#   scripts/cluster.sh kubeconfig  print the path of the admin kubeconfig
#   scripts/cluster.sh import TAR  import an image tarball into the node's containerd
#   scripts/cluster.sh restart-kubelet [--forget-devices]
#                                  stop the kubelet and start it again (pods keep running);
#                                  --forget-devices removes its device-manager checkpoint
#                                  in between, so it forgets which pod has which device
#                                  (as a PodResources List racing its start can make it do)
#   scripts/cluster.sh restart-containerd
#                                  stop containerd and start it again, as a node upgrade
#                                  does: its socket file is made anew; the shims, and so
#                                  the running containers, outlive it
#
# Needs root (it runs a kubelet). Logs: $SEXTANT_CLUSTER_DIR/logs/<component>.log.
#
# Env: SEXTANT_CLUSTER_DIR, SEXTANT_CACHE (default ~/.cache/sextant),
# SEXTANT_NODE_NAME (default sextant-local), SEXTANT_API_PORT (default 6443),
# SEXTANT_ETCD_PORT (default 12379), SEXTANT_SERVICE_CIDR (default 10.96.0.0/24),
# SEXTANT_POD_CIDR (default 10.244.0.0/24), SEXTANT_CONTAINERD (2, the default: the
# containerd 2.x release pinned in scripts/containerd/go.mod, built by
# scripts/containerd.sh, with CDI, running the runc release scripts/runc.sh builds;
# debian: Debian's containerd 1.6 and runc 1.1, which have no CDI).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
exit_on_help "$@"

STATE=${SEXTANT_CLUSTER_DIR:-$repo/.cluster}
NODE_NAME=${SEXTANT_NODE_NAME:-sextant-local}
ETCD_PORT=${SEXTANT_ETCD_PORT:-12379}
API_PORT=${SEXTANT_API_PORT:-6443}
# Nothing routes the service range: no pod is given a service address to use (the
# chart points in-cluster clients at the API server directly), and an "unreachable"
# route for it makes any stray connection fail here instead of leaving the machine.
SERVICE_CIDR=${SEXTANT_SERVICE_CIDR:-10.96.0.0/24}
SERVICE_IP=10.96.0.1
POD_CIDR=${SEXTANT_POD_CIDR:-10.244.0.0/24}
BRIDGE=sextant0
SOCK=$STATE/run/containerd.sock
KUBECONFIG_ADMIN=$STATE/pki/admin.kubeconfig
SANDBOX_IMAGE=sextant.local/pause:3.6
BUSYBOX_IMAGE=sextant.local/busybox:dev

pki=$STATE/pki
logs=$STATE/logs
pids=$STATE/pids

node_ip() {
  # The address of the interface that holds the default route: the node's InternalIP.
  # The kubelet refuses loopback, and this address is on this machine.
  local dev ip=
  dev=$(ip -4 route show default 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i+1); exit}}')
  [ -n "$dev" ] && ip=$(ip -4 -o addr show dev "$dev" scope global | awk '{split($4,a,"/"); print a[1]; exit}')
  [ -n "$ip" ] || ip=$(ip -4 -o addr show scope global | awk '{split($4,a,"/"); print a[1]; exit}')
  [ -n "$ip" ] || die "cluster: no global IPv4 address on this machine for the node"
  echo "$ip"
}

port_busy() { # port
  ss -Htln "sport = :$1" 2>/dev/null | grep -q .
}

running() { # name
  local f=$pids/$1.pid
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

start() { # name command...
  local name=$1; shift
  if running "$name"; then return 0; fi
  log "cluster: starting $name (log: $logs/$name.log)"
  # setsid: the component outlives this script and is not hit by its terminal's signals.
  # Descriptors past stderr are closed: a lock the caller holds (flock around a test
  # run) must not outlive it in a component that runs for days.
  setsid "$@" >>"$logs/$name.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
  echo $! >"$pids/$name.pid"
}

wait_for() { # what timeout-seconds command...
  local what=$1 timeout=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      die "cluster: $what not ready after ${timeout}s; see $logs/"
    fi
    sleep 1
  done
}

stop_pid() { # name
  local f=$pids/$1.pid pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

cert() { # name CN O SANs usage(server|client)
  local name=$1 cn=$2 o=$3 san=$4 usage=$5 subj
  [ -s "$pki/$name.crt" ] && return 0
  subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o/CN=$cn"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ "$usage" = server ]; then echo "extendedKeyUsage=serverAuth"; else echo "extendedKeyUsage=clientAuth"; fi
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$pki/$name.ext"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$name.key" -out "$pki/$name.csr" -subj "$subj" 2>/dev/null
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -out "$pki/$name.crt" -days 3650 -extfile "$pki/$name.ext" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

kubeconfig() { # file user-cert-name
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sextant
  cluster:
    server: https://$NODE_IP:$API_PORT
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: sextant
  context: {cluster: sextant, user: $2}
current-context: sextant
EOF
}

make_pki() {
  mkdir -p "$pki"
  if [ ! -s "$pki/ca.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -out "$pki/ca.crt" \
      -days 3650 -subj "/CN=sextant-local-ca" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" \
    "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$NODE_IP,IP:$SERVICE_IP" server
  cert admin sextant-admin system:masters "" client
  cert controller-manager system:kube-controller-manager "" "" client
  cert scheduler system:kube-scheduler "" "" client
  cert kubelet "system:node:$NODE_NAME" system:nodes "" client
  cert kubelet-serving "$NODE_NAME" "" "DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1" server
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters "" client
  if [ ! -s "$pki/sa.key" ]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$pki/controller-manager.kubeconfig" controller-manager
  kubeconfig "$pki/scheduler.kubeconfig" scheduler
  kubeconfig "$pki/kubelet.kubeconfig" kubelet
}

# containerd_major is the major version of the containerd the cluster runs.
containerd_major() {
  "$STATE/containerd-bin/containerd" --version | sed -nE 's/.* v?([0-9]+)\.[0-9]+.*/\1/p'
}

# write_runtime_config writes containerd's configuration and the CNI network's. This
# host's root lacks CAP_SYS_RESOURCE, so runc cannot set the negative oom_score_adj the
# kubelet asks for sandboxes and Guaranteed pods: restrict_oom_score_adj makes
# containerd clamp it to its own (0) before runc reads it. The runtime's binary is
# $STATE/bin/runc, a link that cmd_up makes.
write_runtime_config() {
  mkdir -p "$STATE/containerd" "$STATE/run" "$STATE/cni/net.d"
  # Where containerd keeps its state and listens: the same keys in both configuration
  # versions.
  containerd_common_config() {
    cat <<EOF
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"

[grpc]
  address = "$SOCK"

[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
EOF
  }
  if [ "$(containerd_major)" -ge 2 ]; then
    # containerd 2.x: configuration version 3, CDI always on; DRA drivers write their
    # claims' specs to /var/run/cdi.
    cat >"$STATE/containerd/config.toml" <<EOF
version = 3
$(containerd_common_config)

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "$SANDBOX_IMAGE"

[plugins."io.containerd.cri.v1.runtime"]
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = "$STATE/bin/runc"
        Root = "$STATE/run/runc"
        SystemdCgroup = false
EOF
  else
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
$(containerd_common_config)

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$SANDBOX_IMAGE"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$STATE/bin/runc"
        Root = "$STATE/run/runc"
        SystemdCgroup = false
EOF
  fi
  # Pods get a default route through the bridge because, with no kube-proxy,
  # in-cluster clients (the ranker) reach the API server at the node's address.
  # No masquerading: pods never need to leave the machine.
  cat >"$STATE/cni/net.d/10-sextant.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sextant",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "loopback"}
  ]
}
EOF
}

write_kubelet_config() {
  mkdir -p "$STATE/kubelet"
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host is cgroup v1 (hybrid) without systemd as init.
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$SOCK
imageServiceEndpoint: unix://$SOCK
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
podLogsDir: $STATE/pod-logs
# No cluster DNS, and pods get no resolver: nothing in this cluster looks names up,
# and the host's resolver is off this machine.
resolvConf: ""
# Imported images cannot be pulled again: never garbage-collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
serializeImagePulls: false
# Quick status updates keep tests short.
nodeStatusUpdateFrequency: 4s
syncFrequency: 10s
fileCheckFrequency: 10s
EOF
}

# mount_runtime_state puts containerd's state directory and runc's root on tmpfs, as
# /run/containerd is on a production node. containerd's shim writes every container's
# exit status there with an fsync, in the one goroutine that handles all of a pod's
# exits, and stamps a container's exit only after the exits before it are written: on
# a disk, under a burst of finishing Jobs, a sidecar's exit waited behind its main's
# write (docs/design/0079). Where tmpfs cannot be mounted the cluster still runs, on
# the disk. A running containerd keeps the directories it has.
mount_runtime_state() {
  running containerd && return 0
  local d
  for d in "$STATE/containerd/state" "$STATE/run"; do
    mkdir -p "$d"
    mountpoint -q "$d" && continue
    mount -t tmpfs -o mode=0711,size=256m "sextant-$(basename "$d")" "$d" \
      || log "cluster: warning: no tmpfs on $d (mount failed); containerd keeps its state on the disk"
  done
}

# RUNTIME_CGROUP is the CPU cgroup containerd (with the shims it starts and the runc
# processes they run) and the kubelet run in, as a systemd node runs them in
# system.slice: there the runtime's processes share one CPU weight against the pods'.
# In the root cgroup each of them weighs half as much as all the pods together on a
# 2-CPU machine, and under a burst of finishing Jobs containerd starts two runc
# processes per exit: a sidecar being stopped waited for the CPU behind them
# (docs/design/0080).
RUNTIME_CGROUP=sextant-node-runtime

# runtime_cgroup makes that cgroup and prints its directory. Where no CPU controller can
# be used it warns and prints nothing: the components then run where this script does.
runtime_cgroup() {
  local d
  if [ -f /sys/fs/cgroup/cpu/cpu.shares ]; then # v1, or hybrid
    d=/sys/fs/cgroup/cpu/$RUNTIME_CGROUP
    { mkdir -p "$d" && echo 1024 >"$d/cpu.shares"; } 2>/dev/null && { echo "$d"; return 0; }
  elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then # v2
    d=/sys/fs/cgroup/$RUNTIME_CGROUP
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    { mkdir -p "$d" && echo 100 >"$d/cpu.weight"; } 2>/dev/null && { echo "$d"; return 0; }
  fi
  log "cluster: warning: no CPU cgroup of its own for the runtime; it runs in this script's"
}

# join_cgroup is a script for `sh -c SCRIPT CGROUP-DIR COMMAND...`: it moves its own
# process into the cgroup (none when the directory is empty), then execs the command,
# which its children inherit.
# shellcheck disable=SC2016 # expanded by that sh
join_cgroup='if [ -n "$0" ]; then echo $$ >"$0/cgroup.procs" || echo "cluster: warning: could not join cgroup $0" >&2; fi; exec "$@"'

start_containerd() {
  local bin=$STATE/containerd-bin
  # containerd finds its runc shim on its PATH.
  start containerd sh -c "$join_cgroup" "$(runtime_cgroup)" env PATH="$bin:$PATH" "$bin/containerd" --config "$STATE/containerd/config.toml"
  wait_for "containerd" 60 "$bin/ctr" --address "$SOCK" version
}

import_image() { # tarball
  "$STATE/containerd-bin/ctr" --address "$SOCK" -n k8s.io images import --no-unpack=false "$1" >/dev/null \
    || die "cluster: importing image $1 into containerd failed"
}

base_images() {
  # The sandbox and test images every pod here needs; built in Go, cached.
  local out
  out=$("$here/images.sh" base) || die "cluster: building the base images failed"
  for tarball in $out; do import_image "$tarball"; done
}

start_control_plane() {
  local kube=$1
  mkdir -p "$STATE/etcd"
  start etcd etcd --name sextant --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "sextant=http://127.0.0.1:$((ETCD_PORT + 1))" --listen-metrics-urls "" \
    --quota-backend-bytes 4294967296 --snapshot-count 10000
  wait_for "etcd" 60 curl -sf "http://127.0.0.1:$ETCD_PORT/health"

  start kube-apiserver "$kube/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$NODE_IP" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" --anonymous-auth=false \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-cluster-ip-range "$SERVICE_CIDR" --allow-privileged=true \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$pki/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    `# Webhooks and aggregated APIs are called on their endpoint addresses: there is no` \
    `# kube-proxy to route service addresses.` \
    --enable-aggregator-routing=true \
    --profiling=false --event-ttl 1h
  wait_for "kube-apiserver" 120 kubectl_ get --raw /readyz

  start kube-controller-manager "$kube/kube-controller-manager" \
    --kubeconfig "$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$pki/controller-manager.kubeconfig" \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --controllers "$CONTROLLERS" \
    --node-monitor-grace-period 20s --leader-elect=false --profiling=false \
    --bind-address 127.0.0.1 --secure-port 10257

  # The default scheduler places everything not meant for sextant-ranker (DaemonSet
  # pods, the ranker itself); sextant-ranker serves the profile "sextant" beside it.
  start kube-scheduler "$kube/kube-scheduler" \
    --kubeconfig "$pki/scheduler.kubeconfig" \
    --authentication-kubeconfig "$pki/scheduler.kubeconfig" \
    --authorization-kubeconfig "$pki/scheduler.kubeconfig" \
    --leader-elect=false --profiling=false --bind-address 127.0.0.1 --secure-port 10259
}

# Enough of kube-controller-manager for Jobs, DaemonSets, Deployments, owner-based
# garbage collection, node health, service accounts with their CA bundle, and the
# aggregated view, edit and admin roles tenants are given, and the ResourceClaims of
# pods using DRA (made from templates, released when their pods are gone).
CONTROLLERS=clusterrole-aggregation-controller,job-controller,garbage-collector-controller,node-lifecycle-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,namespace-controller,replicaset-controller,deployment-controller,daemonset-controller,endpoints-controller,endpointslice-controller,ttl-after-finished-controller,pod-garbage-collector-controller,disruption-controller,statefulset-controller,cronjob-controller,taint-eviction-controller,resourceclaim-controller

start_kubelet() {
  local kube=$1
  mkdir -p "$STATE/kubelet/root" "$STATE/pod-logs"
  start kubelet sh -c "$join_cgroup" "$(runtime_cgroup)" "$kube/kubelet" --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$pki/kubelet.kubeconfig" --root-dir "$STATE/kubelet/root" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels "sextant.io/local=true" --v 2
}

kubectl_() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

node_ready() {
  [ "$(kubectl_ get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

node_untainted() {
  ! kubectl_ get node "$NODE_NAME" -o jsonpath='{.spec.taints}' | grep -q not-ready
}

cmd_up() {
  [ "$(id -u)" -eq 0 ] || die "cluster: up needs root (it runs a kubelet and containerd)"
  "$here/deps.sh" || die "cluster: installing packages failed (scripts/deps.sh)"
  KUBE_BIN=$("$here/kube.sh") || die "cluster: building the Kubernetes binaries failed (scripts/kube.sh)"
  local ctrd_bin runc_bin
  case "${SEXTANT_CONTAINERD:-2}" in
    2)
      ctrd_bin=$("$here/containerd.sh") || die "cluster: building containerd failed (scripts/containerd.sh)"
      runc_bin=$("$here/runc.sh") || die "cluster: building runc failed (scripts/runc.sh)"
      ;;
    debian) ctrd_bin=/usr/bin runc_bin=/usr/sbin/runc ;;
    *) usage_error "cluster: SEXTANT_CONTAINERD=${SEXTANT_CONTAINERD}: want 2 (built from scripts/containerd/go.mod) or debian (Debian's containerd 1.6)" ;;
  esac
  mkdir -p "$STATE" "$logs" "$pids"
  if ! running kube-apiserver && port_busy "$API_PORT"; then
    die "cluster: port $API_PORT is taken: another cluster (another checkout's scripts/cluster.sh?) runs here; stop it first"
  fi
  NODE_IP=$(node_ip)
  echo "$NODE_IP" >"$STATE/node-ip"
  ln -sfn "$KUBE_BIN" "$STATE/kube-bin"
  # A running cluster keeps the containerd it runs; restart-containerd starts that one.
  if ! running containerd; then
    ln -sfn "$ctrd_bin" "$STATE/containerd-bin"
    mkdir -p "$STATE/bin"
    ln -sfn "$runc_bin" "$STATE/bin/runc"
  fi
  make_pki
  mount_runtime_state
  write_runtime_config
  write_kubelet_config
  ip route replace unreachable "$SERVICE_CIDR" 2>/dev/null || true
  # The bridge CNI plugin needs forwarding for pod traffic that crosses the bridge.
  sysctl -qw net.ipv4.ip_forward=1 || true

  start_containerd
  base_images
  start_control_plane "$KUBE_BIN"
  start_kubelet "$KUBE_BIN"
  wait_for "node $NODE_NAME Ready" 180 node_ready
  # node-lifecycle-controller lifts the not-ready taint it put on the new node; wait so
  # the first pods are not held back by it.
  wait_for "node $NODE_NAME untainted" 60 node_untainted
  wait_for "default service account" 60 kubectl_ -n default get serviceaccount default
  log "cluster: up; node $NODE_NAME ($NODE_IP); kubeconfig: $KUBECONFIG_ADMIN"
}

cmd_restart_kubelet() {
  local forget=false
  case "${1:-}" in
    "") ;;
    --forget-devices) forget=true ;;
    *) usage_error "cluster: restart-kubelet: unknown argument '$1' (want --forget-devices or nothing)" ;;
  esac
  [ "$(id -u)" -eq 0 ] || die "cluster: restart-kubelet needs root"
  running kubelet || die "cluster: the kubelet is not running (scripts/cluster.sh up)"
  KUBE_BIN=$STATE/kube-bin
  NODE_IP=$(cat "$STATE/node-ip")
  stop_pid kubelet
  if $forget; then
    # The kubelet keeps device plugins in this directory whatever its --root-dir.
    rm -f /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
  fi
  start_kubelet "$KUBE_BIN"
  # The node stays Ready across a short restart; the kubelet's own health says it is back.
  wait_for "kubelet healthz" 120 curl -sf http://127.0.0.1:10248/healthz
  wait_for "node $NODE_NAME Ready" 120 node_ready
  log "cluster: kubelet restarted"
}

cmd_restart_containerd() {
  [ "$(id -u)" -eq 0 ] || die "cluster: restart-containerd needs root"
  running containerd || die "cluster: containerd is not running (scripts/cluster.sh up)"
  KUBE_BIN=$STATE/kube-bin
  # SIGTERM, as systemd stops it: containerd leaves its shims running.
  stop_pid containerd
  start_containerd
  # The kubelet reconnects by itself; the node says so once its runtime is healthy.
  wait_for "node $NODE_NAME Ready" 120 node_ready
  log "cluster: containerd restarted"
}

kill_pod_processes() {
  # Containers live in the kubelet's cgroups (cgroupfs driver); kill whatever is left in
  # them, then remove the empty cgroups, deepest first.
  local cg
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$cg" ] || continue
    find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
  done
  sleep 0.5
  for cg in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
    [ -d "$cg" ] || continue
    find "$cg" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

cmd_down() {
  [ "$(id -u)" -eq 0 ] || die "cluster: down needs root"
  "$here/demo-net.sh" down
  "$here/demo-nodes.sh" down
  stop_pid kubelet
  stop_pid kube-controller-manager
  stop_pid kube-scheduler
  stop_pid kube-apiserver
  stop_pid etcd
  # Anything else the scripts or tests started against this cluster (agents, rankers).
  local f
  for f in "$pids"/*.pid; do
    [ -e "$f" ] || continue
    [ "$(basename "$f")" = containerd.pid ] && continue
    stop_pid "$(basename "$f" .pid)"
  done
  kill_pod_processes
  stop_pid containerd
  # Shims outlive containerd; ours name our socket on their command line.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $SOCK" 2>/dev/null || true
  sleep 0.5
  # Pod network namespaces: containerd mounts them under /var/run/netns as cni-*; ours
  # hold an address of the pod range. Deleting one removes its veth pair.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/{print $1}'); do
    if ip -n "$ns" -4 -o addr 2>/dev/null | grep -q " ${POD_CIDR%.*}\."; then
      ip netns delete "$ns" 2>/dev/null || true
    fi
  done
  # Everything mounted under the state directory (pod volumes, container root
  # filesystems, sandbox shm), deepest first.
  if [ -d "$STATE" ]; then
    local m
    for m in $(awk -v s="$STATE" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r); do
      umount -l "$m" 2>/dev/null || true
    done
  fi
  rmdir "/sys/fs/cgroup/cpu/$RUNTIME_CGROUP" "/sys/fs/cgroup/$RUNTIME_CGROUP" 2>/dev/null || true
  # containerd makes this directory for shim sockets; keep it only if something else uses it.
  rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  # The chart's agent shapes the demo veth (bandwidth enforcement) through an IFB of
  # its own, which outlives the agent's pod; demo-net.sh down took the veth itself.
  local ifb
  for ifb in $(ip -o link show type ifb 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep '^sxifb'); do
    ip link delete "$ifb" 2>/dev/null || true
  done
  ip link delete "$BRIDGE" 2>/dev/null || true
  ip route delete unreachable "$SERVICE_CIDR" 2>/dev/null || true
  find /var/log/containers -maxdepth 1 -type l -lname "$STATE/*" -delete 2>/dev/null || true
  rm -rf "$STATE"
  log "cluster: down"
}

cmd_status() {
  local c rc=0
  for c in containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet; do
    if running "$c"; then echo "$c: running (pid $(cat "$pids/$c.pid"))"; else echo "$c: stopped"; rc=1; fi
  done
  if [ $rc -eq 0 ]; then
    KUBE_BIN=$STATE/kube-bin
    kubectl_ get nodes -o wide
  fi
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  kubeconfig) echo "$KUBECONFIG_ADMIN" ;;
  import)
    [ -n "${2:-}" ] || usage_error "cluster: import needs an image tarball (import TAR)"
    import_image "$2" ;;
  restart-kubelet) shift; cmd_restart_kubelet "$@" ;;
  restart-containerd) cmd_restart_containerd ;;
  "") usage_error "cluster: no command (want up, down, status, kubeconfig, import, restart-kubelet or restart-containerd)" ;;
  *) usage_error "cluster: unknown command '$1' (want up, down, status, kubeconfig, import, restart-kubelet or restart-containerd)" ;;
esac
