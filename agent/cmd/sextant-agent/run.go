package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	logsapi "k8s.io/component-base/logs/api/v1"

	"sextant.io/sextant/agent/devicefilter"
	"sextant.io/sextant/agent/numapin"
	"sextant.io/sextant/agent/podresources"
	"sextant.io/sextant/agent/sidecar"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/delegatedauth"
	"sextant.io/sextant/internal/httpbound"
	"sextant.io/sextant/internal/liveness"
	"sextant.io/sextant/internal/selfsigned"
)

type runOptions struct {
	logging    *logsapi.LoggingConfiguration
	kubeconfig string
	// kubeQPS and kubeBurst are the API client's rate limit.
	kubeQPS     float64
	kubeBurst   int
	nodeName    string
	metricsAddr string
	// metricsLimits bound the metrics server; metricsAuthCacheTTL is how long the API
	// server's answers about a scraper's token are kept.
	metricsLimits       httpbound.Limits
	metricsAuthCacheTTL time.Duration
	sysfsRoot           string
	netns               string
	attachMode          string

	interfaces     []string
	nicCapacities  []string
	networks       []string
	sampleInterval time.Duration
	window         time.Duration

	threshold        float64
	minInterval      time.Duration
	maxInterval      time.Duration
	topologyInterval time.Duration
	topologyResync   time.Duration

	heartbeats          bool
	sidecarTerminator   bool
	criEndpoint         string
	criTimeout          time.Duration
	criLivenessDeadline time.Duration
	containerdNamespace string
	sidecarResync       time.Duration
	sidecarWorkers      int
	sidecarPodSelector  string
	sidecarSignal       string

	numaPinning        bool
	cgroupRoot         string
	kubepodsCgroup     string
	podResourcesSocket string
	numaResync         time.Duration

	devicePlugin        bool
	devicePluginDir     string
	devRoot             string
	hostDevDir          string
	cdiSpecDirs         []string
	deviceFilter        devicefilter.Rules
	deviceAuditInterval time.Duration

	draKinds        []string
	draPluginDir    string
	draRegistrarDir string
	cdiDir          string

	enforcement enforcementOptions
}

func newRunCommand() *cobra.Command { return newRunCommandFor(&runOptions{}) }

// newRunCommandFor is newRunCommand parsing its flags into o.
func newRunCommandFor(o *runOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: meter NICs, read the topology, publish NodeBandwidth and NodeTopology, pin pods to their NUMA nodes, stop finished sidecars",
		Long: `run is the agent as the DaemonSet runs it. It attaches the eBPF meter to the
selected NICs, samples it, and publishes the node's NodeBandwidth when a remaining
value moved by more than --report-threshold of capacity (at most every
--report-min-interval, at least every --report-max-interval). It reads the NUMA/PCI
topology every --topology-interval and publishes NodeTopology when it or a device's
health changed, and every --topology-resync. On SIGTERM it detaches its programs and
exits.

--metrics-addr serves HTTPS with a certificate made at start (self-signed). /metrics
answers only a bearer token that the API server authenticates (TokenReview) and whose
user may get the non-resource URL /metrics (SubjectAccessReview; the chart's ClusterRole
sextant-metrics-reader): 401 without a token, 403 without the right. The answers are
kept for --metrics-auth-cache-ttl. /healthz and /readyz answer anyone (the kubelet's
probes). The --metrics-*-timeout flags cut slow clients off, and at most
--metrics-max-inflight scrapes (and as many probes) are served at once; more get 429.

With --sidecar-terminator (the default) it also stops the sidecar containers of this
node's pods once their main containers are done (env SEXTANT_SIDECAR=true or
KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true; restartPolicy Never: when every main
container exited; OnFailure: when every one exited 0; Always: never). It learns of exits
from containerd's event service and stops through the CRI, both on --cri-endpoint, with
the pod's termination grace period, and records a SidecarStopped event on the pod.

With --numa-pinning (the default) it confines every pod of this node that carries
numa.sextant.io/nodes to the CPUs and memory of those NUMA nodes (as read under
--sysfs-root): it narrows the pod's cpuset cgroup under --cgroup-root as soon as the
kubelet creates it, so every container inherits the set; containers that started first
are narrowed where they run and the runtime is told through CRI. Pods without the
annotation are never touched. With the kubelet's static CPU manager or Static memory
manager policy (asked over --pod-resources-socket) it pins nothing. The node's
NodeTopology says which (status.numaPinning).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), *o)
		},
	}
	f := cmd.Flags()
	// The logging flags are kube-scheduler's (-v, --logging-format, …): every sextant
	// binary logs through klog.
	o.logging = logsapi.NewLoggingConfiguration()
	logsapi.AddFlags(o.logging, f)
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster configuration)")
	f.Float64Var(&o.kubeQPS, "kube-api-qps", 20, "requests per second the agent sends the API server at most, after a burst of --kube-api-burst (client-go's default of 5 makes the Events of many Jobs finishing at once wait, and the node's other writes behind them)")
	f.IntVar(&o.kubeBurst, "kube-api-burst", 100, "requests the agent may send the API server at once before --kube-api-qps applies: one Event per sidecar stopped, for a node whose Jobs finish together")
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node's Node object (default: $NODE_NAME)")
	f.StringVar(&o.metricsAddr, "metrics-addr", ":9464", "address serving /metrics (HTTPS, a bearer token allowed to get /metrics), /healthz and /readyz (HTTPS, anyone); empty disables it")
	o.metricsLimits = httpbound.Limits{
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		// A Prometheus scrape timeout, which a scrape's small answer meets with room to
		// spare (design/0071).
		WriteTimeout: 30 * time.Second,
		// As Go's and client-go's transports keep idle connections.
		IdleTimeout: 90 * time.Second,
		// Prometheus (a pair, in HA) and a person or two; each answer being built holds
		// memory until it is sent (design/0071).
		MaxInFlight: 8,
	}
	o.metricsLimits.AddFlags(f, "metrics", "the metrics server (--metrics-addr)")
	f.DurationVar(&o.metricsAuthCacheTTL, "metrics-auth-cache-ttl", 10*time.Second, "how long the API server's answer about a scraper's token and its right to get /metrics (TokenReview, SubjectAccessReview) is kept; 0 asks at every scrape")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "/", "directory holding sys/ and proc/ of the node (a host mount in a container)")
	f.StringVar(&o.netns, "netns", "", "network namespace whose NICs to meter, as a path such as /var/run/netns/NAME (default: the agent's own)")
	f.StringVar(&o.attachMode, "attach-mode", "auto", "how to attach: auto (tcx where the kernel has it, else clsact), tcx or clsact")
	f.StringSliceVar(&o.interfaces, "interfaces", nil, "NICs to meter, by name or shell pattern (eth*), comma-separated (default: the physical NICs, not SR-IOV virtual functions, plus the default-route interface)")
	f.StringArrayVar(&o.networks, "network", nil, "a network of the node, as NAME=IFACE[,IFACE...] (shell patterns allowed; NAME a DNS label such as storage), metered and published apart from the others; pods name it in bandwidth.sextant.io/network. The pod network is found without it (the interface holding the Node's InternalIP, else the default route's); pod=... overrides that. Repeatable")
	f.StringArrayVar(&o.nicCapacities, "nic-capacity", nil, "capacity of a NIC whose sysfs speed is unknown, as IF=RATE or IF=ingress:RATE,egress:RATE in bits/s from 1 to 1P (e.g. eth0=10G; M is mega, m milli); repeatable")
	f.DurationVar(&o.sampleInterval, "sample-interval", time.Second, "how often the counters are sampled")
	f.DurationVar(&o.window, "window", 60*time.Second, "how far back the peak rate looks; remaining = capacity - peak")
	f.Float64Var(&o.threshold, "report-threshold", 0.05, "write NodeBandwidth when a remaining value moved by more than this fraction of capacity")
	f.DurationVar(&o.minInterval, "report-min-interval", 2*time.Second, "never write NodeBandwidth more often than this")
	f.DurationVar(&o.maxInterval, "report-max-interval", 30*time.Second, "write NodeBandwidth at least this often, so silence means a dead agent")
	f.DurationVar(&o.topologyInterval, "topology-interval", 10*time.Second, "how often the topology and device health are read")
	f.DurationVar(&o.topologyResync, "topology-resync", 10*time.Minute, "write NodeTopology at least this often even without a change")
	f.BoolVar(&o.heartbeats, "heartbeats", true, "meter the NICs and publish NodeBandwidth and NodeTopology; false runs only the sidecar terminator and NUMA pinning")
	f.BoolVar(&o.sidecarTerminator, "sidecar-terminator", true, "stop the sidecars of this node's pods once their main containers are done")
	f.StringVar(&o.criEndpoint, "cri-endpoint", cri.DefaultEndpoint, "containerd's socket: CRI for listing, stopping and updating containers, containerd's event service for exits")
	f.DurationVar(&o.criTimeout, "cri-timeout", cri.DefaultTimeout, "deadline of each call to the runtime on --cri-endpoint, and of connecting to it (a stop gets its grace period on top)")
	f.DurationVar(&o.criLivenessDeadline, "cri-liveness-deadline", cri.DefaultLivenessDeadline, "fail /healthz (the liveness probe) once the runtime on --cri-endpoint has not answered for this long, so the kubelet restarts the agent: an agent that mounts containerd's socket file alone keeps the old, dead socket after containerd restarts; 0 disables the check")
	f.StringVar(&o.containerdNamespace, "containerd-namespace", cri.DefaultNamespace, "containerd namespace of the kubelet's containers")
	f.DurationVar(&o.sidecarResync, "sidecar-resync", 30*time.Second, "look at every pod with sidecars at least this often (a safety net: exits come as events)")
	f.IntVar(&o.sidecarWorkers, "sidecar-workers", sidecar.DefaultWorkers, "pods the sidecar terminator looks at concurrently: each look asks containerd for the pod's containers, so when many Jobs finish at once the last waits for the looks ahead of it")
	f.StringVar(&o.sidecarSignal, "sidecar-signal", sidecarSignalRuntime, "how a sidecar's stop signal is sent: "+sidecarSignalRuntime+" leaves the signal and the kill after the grace period to the runtime's CRI StopContainer; "+sidecarSignalProcess+" signals the sidecar's process straight, by its host PID (the agent needs hostPID and CAP_KILL; a process it cannot verify as the container's is stopped through the runtime), and has the runtime kill it only if it outlives its grace period; it also hears the exits of restartPolicy Never pods' main containers through pidfds, before containerd reports them: faster when many Jobs finish at once")
	f.StringVar(&o.sidecarPodSelector, "sidecar-pod-selector", "", "label selector limiting the pods whose sidecars are stopped (default: all pods on the node)")
	f.BoolVar(&o.numaPinning, "numa-pinning", true, "confine pods annotated numa.sextant.io/nodes to the CPUs and memory of those NUMA nodes")
	f.StringVar(&o.cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "where the node's cgroup hierarchies are mounted (a host mount in a container); --sysfs-root does not change it")
	f.StringVar(&o.kubepodsCgroup, "kubepods-cgroup", "", "the kubelet's kubepods cgroup relative to the cpuset hierarchy, if the kubelet runs with --cgroup-root (default: kubepods.slice or kubepods)")
	f.StringVar(&o.podResourcesSocket, "pod-resources-socket", podresources.DefaultSocket, "the kubelet's PodResources socket, asked whether the kubelet runs a static CPU or memory manager policy")
	f.BoolVar(&o.devicePlugin, "device-plugin", true, "serve the kubelet's device-plugin API for each device kind the node has (sextant.io/<kind>), handing each container exactly the devices in its pod's devices.sextant.io/allocated; needs --heartbeats")
	f.StringVar(&o.devicePluginDir, "device-plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugins directory: its registration socket is there, and the plugin's sockets go there")
	f.StringVar(&o.devRoot, "dev-root", "/dev", "the host's /dev as the agent sees it (a host mount in a container): device nodes not there are not handed out")
	f.StringVar(&o.hostDevDir, "host-dev-dir", "", "the host's /dev as the kubelet and the runtime see it, the prefix of the device paths handed to them (default: --dev-root)")
	f.StringSliceVar(&o.cdiSpecDirs, "cdi-spec-dirs", nil, "directories of CDI specs (the host's /etc/cdi and /var/run/cdi as the agent sees them): a device a spec names is also handed out as that CDI device")
	f.Var(&o.deviceFilter, "device-filter", "include:FIELD=VALUE or exclude:FIELD=VALUE, FIELD address, kind or driver; repeatable or comma-separated, the last matching rule wins, applied after the default exclusion of the node's own NICs and boot drives")
	f.DurationVar(&o.deviceAuditInterval, "device-audit-interval", 30*time.Second, "compare the kubelet's PodResources with the pods' devices.sextant.io/allocated at least this often (and when a pod starts)")
	f.StringSliceVar(&o.draKinds, "dra-kinds", nil, "device kinds (gpu, nic, nvme, accelerator) to publish as DRA ResourceSlices of driver sextant.io and prepare for ResourceClaims, instead of serving them through the device plugin; empty: no DRA driver; needs --heartbeats")
	f.StringVar(&o.draPluginDir, "dra-plugin-dir", "/var/lib/kubelet/plugins/sextant.io", "where the DRA driver's socket goes, under the kubelet's plugins directory")
	f.StringVar(&o.draRegistrarDir, "dra-registrar-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory, where the DRA driver registers")
	f.StringVar(&o.cdiDir, "cdi-dir", "/var/run/cdi", "where the DRA driver writes each prepared claim's CDI spec: a directory the container runtime reads CDI specs from (the host's /var/run/cdi as the agent sees it)")
	f.DurationVar(&o.numaResync, "numa-resync", 30*time.Second, "check every pinned pod's cgroup at least this often, and narrow it again if something widened it")
	o.enforcement.addFlags(f)
	return cmd
}

// The values of --sidecar-signal.
const (
	sidecarSignalProcess = "process"
	sidecarSignalRuntime = "runtime"
)

// actsOnPods reports whether a part of the agent watches the node's pods and records
// events on them: the sidecar terminator, NUMA pinning, the device plugin's audit, and
// bandwidth enforcement. The chart grants the agent those rights exactly when this holds
// (agent-rbac.yaml).
func (o runOptions) actsOnPods() bool {
	return o.sidecarTerminator || o.numaPinning || o.heartbeats && (o.devicePlugin || len(o.draKinds) > 0) || len(o.enforcement.networks) > 0
}

func (o runOptions) validate() error {
	switch {
	case o.nodeName == "":
		return errors.New("--node-name is required (or set $NODE_NAME, e.g. from the downward API spec.nodeName)")
	case !(o.kubeQPS > 0 && o.kubeQPS <= 1000): // NaN too
		return fmt.Errorf("--kube-api-qps %v: want requests per second from above 0 to 1000, e.g. 20", o.kubeQPS)
	case o.kubeBurst < 1 || o.kubeBurst > 10000:
		return fmt.Errorf("--kube-api-burst %d: want 1 to 10000, e.g. 100", o.kubeBurst)
	case !(o.threshold > 0 && o.threshold < 1): // NaN too
		return fmt.Errorf("--report-threshold %v: want a fraction between 0 and 1, e.g. 0.05", o.threshold)
	case o.minInterval <= 0 || o.maxInterval < o.minInterval:
		return fmt.Errorf("--report-min-interval %s / --report-max-interval %s: want 0 < min <= max", o.minInterval, o.maxInterval)
	case o.sampleInterval <= 0 || o.window < o.sampleInterval:
		return fmt.Errorf("--sample-interval %s / --window %s: want 0 < sample interval <= window", o.sampleInterval, o.window)
	case o.topologyInterval <= 0 || o.topologyResync <= 0:
		return fmt.Errorf("--topology-interval %s / --topology-resync %s: want positive durations", o.topologyInterval, o.topologyResync)
	case !o.heartbeats && !o.sidecarTerminator && !o.numaPinning:
		return errors.New("--heartbeats=false, --sidecar-terminator=false and --numa-pinning=false leave the agent nothing to do")
	case o.sidecarTerminator && o.sidecarResync <= 0:
		return fmt.Errorf("--sidecar-resync %s: want a positive duration", o.sidecarResync)
	case o.sidecarTerminator && (o.sidecarWorkers < 1 || o.sidecarWorkers > 1000):
		return fmt.Errorf("--sidecar-workers %d: want 1 to 1000, such as %d", o.sidecarWorkers, sidecar.DefaultWorkers)
	case o.sidecarTerminator && o.sidecarSignal != sidecarSignalProcess && o.sidecarSignal != sidecarSignalRuntime:
		return fmt.Errorf("--sidecar-signal %q: want %s or %s", o.sidecarSignal, sidecarSignalProcess, sidecarSignalRuntime)
	case o.sidecarTerminator && o.enforcement.stateDir == "":
		return errors.New("--state-dir is empty: the sidecar terminator keeps its stop marks there; want a directory that outlives the agent, e.g. /var/lib/sextant-agent")
	case o.numaPinning && o.numaResync <= 0:
		return fmt.Errorf("--numa-resync %s: want a positive duration", o.numaResync)
	case (o.sidecarTerminator || o.numaPinning) && o.criLivenessDeadline < 0:
		return fmt.Errorf("--cri-liveness-deadline %s: want a positive duration, e.g. 1m, or 0 to disable the check", o.criLivenessDeadline)
	case (o.sidecarTerminator || o.numaPinning) && o.criTimeout <= 0:
		return fmt.Errorf("--cri-timeout %s: want a positive duration, e.g. 10s", o.criTimeout)
	case (o.sidecarTerminator || o.numaPinning) && !isSocket(o.criEndpoint):
		return fmt.Errorf("--cri-endpoint %q: want containerd's unix socket, e.g. %s", o.criEndpoint, cri.DefaultEndpoint)
	case (o.sidecarTerminator || o.numaPinning) && o.containerdNamespace == "":
		return fmt.Errorf("--containerd-namespace is empty: want the containerd namespace of the kubelet's containers, e.g. %s", cri.DefaultNamespace)
	case (o.numaPinning || o.heartbeats && (o.devicePlugin || len(o.draKinds) > 0)) && o.podResourcesSocket == "":
		return fmt.Errorf("--pod-resources-socket is empty: want the kubelet's PodResources socket, e.g. %s", podresources.DefaultSocket)
	case o.numaPinning && o.cgroupRoot == "":
		return errors.New("--cgroup-root is empty: want the directory where cgroups are mounted, e.g. /sys/fs/cgroup")
	case o.heartbeats && (o.devicePlugin || len(o.draKinds) > 0) && o.deviceAuditInterval <= 0:
		return fmt.Errorf("--device-audit-interval %s: want a positive duration, e.g. 30s", o.deviceAuditInterval)
	case slices.Contains(strings.Split(o.kubepodsCgroup, "/"), ".."):
		// NUMA pinning writes cpusets under it: it must stay inside --cgroup-root.
		return fmt.Errorf("--kubepods-cgroup %q: want a cgroup path under the cpuset hierarchy without '..', such as kubepods.slice", o.kubepodsCgroup)
	case len(o.draKinds) > 0 && !o.heartbeats:
		return errors.New("--dra-kinds needs --heartbeats: the DRA driver publishes the devices the topology reporter reads")
	case len(o.draKinds) > 0 && (o.draPluginDir == "" || o.draRegistrarDir == "" || o.cdiDir == ""):
		return errors.New("--dra-plugin-dir, --dra-registrar-dir and --cdi-dir must not be empty with --dra-kinds")
	case o.hostDevDir != "" && !filepath.IsAbs(o.hostDevDir):
		return fmt.Errorf("--host-dev-dir %q: want an absolute path, the host's /dev as the kubelet sees it", o.hostDevDir)
	}
	if _, err := o.draDeviceKinds(); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(o.nodeName); len(errs) > 0 {
		return fmt.Errorf("--node-name %q: %s (want a Node's name, e.g. from the downward API spec.nodeName)", o.nodeName, strings.Join(errs, "; "))
	}
	if o.metricsAddr != "" {
		if err := o.metricsLimits.Validate("metrics"); err != nil {
			return err
		}
		if o.metricsAuthCacheTTL < 0 {
			return fmt.Errorf("--metrics-auth-cache-ttl %v: want 0 or a positive duration, such as 10s", o.metricsAuthCacheTTL)
		}
	}
	if _, err := parseAttachMode(o.attachMode); err != nil {
		return err
	}
	if err := checkSysfsRoot(o.sysfsRoot); err != nil {
		return err
	}
	if err := checkNetns(o.netns); err != nil {
		return err
	}
	if err := checkInterfacePatterns(o.interfaces); err != nil {
		return err
	}
	if _, err := labels.Parse(o.sidecarPodSelector); err != nil {
		return fmt.Errorf("--sidecar-pod-selector %q: %w", o.sidecarPodSelector, err)
	}
	return nil
}

// isSocket reports whether endpoint names a unix socket, the only kind cri.Dial takes.
func isSocket(endpoint string) bool {
	_, ok := cri.SocketPath(endpoint)
	return ok
}

// kubeletPolicies asks the kubelet's PodResources which of its managers set cpusets.
func kubeletPolicies(kubelet *podresources.Client) numapin.KubeletPolicies {
	return func(ctx context.Context) (numapin.KubeletPinning, error) {
		cpu, memory, err := kubelet.StaticManagers(ctx)
		return numapin.KubeletPinning{StaticCPU: cpu, StaticMemory: memory}, err
	}
}

// logRuntime says which container runtime answers on endpoint, or that none does yet:
// the runtime may come up after the agent, and the parts using it keep trying.
func logRuntime(ctx context.Context, rt *cri.Client, endpoint string, log logr.Logger) {
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	version, err := rt.Version(vctx)
	switch {
	case err == nil:
		log.Info("container runtime", "endpoint", endpoint, "runtime", version)
	case ctx.Err() == nil:
		log.Error(err, "the container runtime does not answer yet", "endpoint", endpoint)
	}
}

// metricsServer serves, over HTTPS, /metrics to callers the API server vouches for
// (metricsHandler), /healthz and /readyz to anyone, within o.metricsLimits; authClient
// asks the API server about the scrapers' tokens.
func (o runOptions) metricsServer(authClient kubernetes.Interface, reg *prometheus.Registry, loops *liveness.Checker, ready func() bool, log logr.Logger) (*http.Server, error) {
	certs, err := selfsigned.New(o.nodeName)
	if err != nil {
		return nil, fmt.Errorf("metrics server: %w", err)
	}
	h := metricsHandler(reg, loops, ready, delegatedauth.New(authClient, o.metricsAuthCacheTTL), o.metricsLimits.MaxInFlight)
	// Failed handshakes (scanners, scrapers refusing the certificate) are noise at the
	// default verbosity.
	srv := o.metricsLimits.Server(h, log.V(2))
	srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	return srv, nil
}

// metricsHandler serves /metrics to callers auth lets through, /healthz (every loop
// comes round: the liveness probe) and /readyz (the agent has done its first work: the
// readiness probe) to anyone. The caller is authenticated and authorized before any
// metric is gathered or compressed: a scraper without the right costs a cached lookup.
// Scrapes and probes each have maxInFlight slots, so that scrapes held up by slow
// readers never fail the kubelet's probes. No endpoint reads a body; a request sending
// more than a few kilobytes is refused.
func metricsHandler(reg *prometheus.Registry, loops *liveness.Checker, ready func() bool, auth *delegatedauth.Authorizer, maxInFlight int) http.Handler {
	scrapes, probes := httpbound.NewInFlight(maxInFlight), httpbound.NewInFlight(maxInFlight)
	noBody := httpbound.NewBodies(httpbound.NoBodyBytes, 0)
	mux := http.NewServeMux()
	mux.Handle("/metrics", scrapes.Limit(auth.Require("get", "/metrics",
		noBody.Limit(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})))))
	mux.Handle("/healthz", probes.Limit(noBody.Limit(loops)))
	mux.Handle("/readyz", probes.Limit(noBody.Limit(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			http.Error(w, "not ready: no NodeBandwidth written yet, the sidecar terminator has not synced, or NUMA pinning has not found the kubelet's pod cgroups", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))))
	return mux
}

// nodeInternalIPs are the Node's InternalIPs: the interface holding one carries the pod
// network. Without them (the Node unreadable for now) the default route's interface
// does; the next agent start looks again.
func nodeInternalIPs(ctx context.Context, kube kubernetes.Interface, nodeName string, log logr.Logger) []net.IP {
	ctx, cancel := context.WithTimeout(ctx, apiCallTimeout)
	defer cancel()
	node, err := kube.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		log.Error(err, "could not read the Node's InternalIP; the pod network is the default route's interface")
		return nil
	}
	var ips []net.IP
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			if ip := net.ParseIP(a.Address); ip != nil {
				ips = append(ips, ip)
			}
		}
	}
	return ips
}

// draDeviceKinds are --dra-kinds as device kinds, each once.
func (o runOptions) draDeviceKinds() ([]v1alpha1.DeviceKind, error) {
	var out []v1alpha1.DeviceKind
	for _, k := range o.draKinds {
		kind := v1alpha1.DeviceKind(strings.TrimSpace(k))
		if !slices.Contains(v1alpha1.RequestableDeviceKinds[:], kind) {
			return nil, fmt.Errorf("--dra-kinds: unknown device kind %q (want gpu, nic, nvme or accelerator)", k)
		}
		if !slices.Contains(out, kind) {
			out = append(out, kind)
		}
	}
	return out, nil
}
