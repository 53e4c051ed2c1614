package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"sextant.io/sextant/agent/bandwidth"
	"sextant.io/sextant/agent/bandwidth/tc"
	"sextant.io/sextant/agent/nodepods"
	"sextant.io/sextant/agent/numapin"
	"sextant.io/sextant/agent/podresources"
	"sextant.io/sextant/agent/procsignal"
	"sextant.io/sextant/agent/report"
	"sextant.io/sextant/agent/sidecar"
	"sextant.io/sextant/agent/topology"
	"sextant.io/sextant/cri"
	"sextant.io/sextant/internal/kubeclient"
	"sextant.io/sextant/internal/liveness"
	"sextant.io/sextant/internal/version"
)

// runAgent is the run command: it makes the agent from o and runs it.
func runAgent(ctx context.Context, o runOptions) error {
	a, err := newAgent(ctx, o)
	if err != nil {
		return err
	}
	defer a.close()
	return a.Run(ctx)
}

// agent is the node agent's parts, made by newAgent and started by Run.
type agent struct {
	o   runOptions
	log logr.Logger

	kube kubernetes.Interface
	dyn  dynamic.Interface
	reg  *prometheus.Registry
	// Each long-running loop shows it still comes round; /healthz fails naming the one
	// that has not for longer than three of its intervals and a minute.
	loops *liveness.Checker
	// One watch on the node's pods, shared by the parts that act on them; one
	// connection to the runtime.
	pods       cache.SharedIndexInformer
	topo       *topology.Cache
	rt         *cri.Client          // nil unless the sidecar terminator or NUMA pinning runs
	prober     *cri.Prober          // nil without rt or --cri-liveness-deadline
	kubelet    *podresources.Client // nil unless NUMA pinning or the device plugin runs
	terminator *sidecar.Terminator  // nil without --sidecar-terminator
	pinner     *numapin.Pinner      // nil without --numa-pinning
	heartbeats *heartbeats          // nil without --heartbeats

	metricsListener net.Listener // nil without --metrics-addr
	metricsServer   *http.Server

	// heartbeatsReady is set once the first NodeBandwidth write went through: the API
	// server is reachable and the agent may write what it must.
	heartbeatsReady atomic.Bool
	// closers release what newAgent opened, in reverse.
	closers []func()
}

// heartbeats are the parts that meter the NICs and publish NodeBandwidth and
// NodeTopology.
type heartbeats struct {
	bpf         *bandwidth.BPF
	meter       *bandwidth.Meter
	enforcement *enforcement // nil: no network is enforced
	bandwidth   *report.BandwidthReporter
	topology    *report.TopologyReporter
	devices     *devices
}

// newAgent makes every part of the agent from o without starting any, so that a bad
// flag or socket fails the start with nothing running. ctx bounds the one API read it
// makes (the Node's InternalIPs).
func newAgent(ctx context.Context, o runOptions) (_ *agent, err error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	capacities, err := bandwidth.ParseCapacities(o.nicCapacities)
	if err != nil {
		return nil, err
	}
	networks, err := bandwidth.ParseNetworks(o.networks)
	if err != nil {
		return nil, err
	}
	if err := o.enforcement.validate(networks, o.heartbeats); err != nil {
		return nil, err
	}
	a := &agent{o: o, loops: liveness.NewChecker(nil)}
	defer func() {
		if err != nil {
			a.close()
		}
	}()
	// Bound before any client is made, so that an address that cannot be served fails
	// the start, naming the flag.
	if o.metricsAddr != "" {
		if a.metricsListener, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr %q: %w", o.metricsAddr, err)
		}
		a.closers = append(a.closers, func() { a.metricsListener.Close() })
	}
	if err := logsapi.ValidateAndApply(o.logging, nil); err != nil {
		return nil, fmt.Errorf("logging flags: %w", err)
	}
	a.closers = append(a.closers, klog.Flush)
	a.log = klog.Background().WithValues("node", o.nodeName)

	cfg, err := kubeclient.Config(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "sextant-agent/" + version.Version
	cfg.QPS, cfg.Burst = float32(o.kubeQPS), o.kubeBurst
	if a.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if a.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	a.pods = nodepods.NewInformer(a.kube, o.nodeName)
	a.topo = topology.NewCache(o.sysfsRoot, o.topologyInterval)

	if err := a.newPodParts(); err != nil {
		return nil, err
	}
	if o.heartbeats {
		if a.heartbeats, err = a.newHeartbeats(ctx, capacities, networks); err != nil {
			return nil, err
		}
	}
	if a.metricsListener != nil {
		// The reviews of scrapers' tokens go through a client of their own, whose rate
		// limiter a flood of made-up tokens fills instead of the heartbeats'.
		authCfg := rest.CopyConfig(cfg)
		authCfg.UserAgent += " metrics-auth"
		authCfg.QPS, authCfg.Burst = 0, 0 // client-go's defaults: a flood needs no burst
		authClient, err := kubernetes.NewForConfig(authCfg)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for the metrics server's reviews: %w", err)
		}
		if a.metricsServer, err = o.metricsServer(authClient, a.reg, a.loops, a.ready, a.log.WithName("metrics")); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// newPodParts makes the connections to the runtime and the kubelet, and the parts that
// act on the node's pods through them: the sidecar terminator and NUMA pinning.
func (a *agent) newPodParts() error {
	o := a.o
	var err error
	if o.sidecarTerminator || o.numaPinning {
		if a.rt, err = cri.Dial(o.criEndpoint, o.containerdNamespace, cri.WithTimeout(o.criTimeout)); err != nil {
			return err
		}
		a.closers = append(a.closers, func() { a.rt.Close() })
		if o.criLivenessDeadline > 0 {
			// The gRPC connection finds containerd again by itself after a restart, and
			// the exit stream is opened again; what it cannot do is reach a socket file
			// its mount no longer shows. Then only a restart of the container helps.
			a.prober = cri.NewProber(a.rt, cri.ProbeInterval(o.criLivenessDeadline), a.reg, a.log.WithName("cri"))
		}
	}
	if o.sidecarTerminator {
		cfg := sidecar.Config{
			NodeName: o.nodeName, PodSelector: o.sidecarPodSelector, Resync: o.sidecarResync, Workers: o.sidecarWorkers,
			StateDir: o.enforcement.stateDir,
		}
		var exits *procsignal.Exits
		if o.sidecarSignal == sidecarSignalProcess {
			cfg.Signaller = procsignal.Signaller{}
			// The exits of main processes are heard through pidfds, which need the same
			// host PID namespace as the signals; the callback reaches the terminator made
			// below, and no exit is watched before it runs.
			if exits, err = procsignal.NewExits("", func(id string, at time.Time) { a.terminator.ProcessExited(id, at) }); err != nil {
				return err
			}
			a.closers = append(a.closers, func() { exits.Close() })
			cfg.Exits = exits
		}
		a.terminator, err = sidecar.New(cfg, a.kube, a.pods, a.rt, sidecar.NewMetrics(a.reg), a.log.WithName("sidecar"))
		if err != nil {
			return err
		}
	}
	if o.numaPinning || o.heartbeats && (o.devicePlugin || len(o.draKinds) > 0) {
		if a.kubelet, err = podresources.Dial(o.podResourcesSocket); err != nil {
			return err
		}
		a.closers = append(a.closers, func() { a.kubelet.Close() })
	}
	if o.numaPinning {
		a.pinner, err = numapin.New(numapin.Config{
			NodeName: o.nodeName, CgroupRoot: o.cgroupRoot, KubepodsCgroup: o.kubepodsCgroup, Resync: o.numaResync,
		}, a.kube, a.pods, a.rt, numapin.FromCache(a.topo), kubeletPolicies(a.kubelet), numapin.NewMetrics(a.reg), a.log.WithName("numa"))
		if err != nil {
			return err
		}
	}
	return nil
}

// newHeartbeats loads the meter's eBPF programs and makes the meter, the enforcer of
// the enforced networks, the two reporters and the device handshake.
func (a *agent) newHeartbeats(ctx context.Context, capacities map[string]bandwidth.Capacity, networks []bandwidth.NetworkSpec) (*heartbeats, error) {
	o := a.o
	mode, _ := parseAttachMode(o.attachMode) // checked by validate
	nodeIPs := nodeInternalIPs(ctx, a.kube, o.nodeName, a.log)
	bpf, err := bandwidth.LoadBPF(tc.Options{Mode: mode, NetnsPath: o.netns})
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { bpf.Close() })
	h := &heartbeats{bpf: bpf}
	h.meter = bandwidth.New(bandwidth.Config{
		SampleInterval: o.sampleInterval,
		Window:         o.window,
		Interfaces:     o.interfaces,
		Capacities:     capacities,
		Networks:       networks,
		NodeIPs:        nodeIPs,
		Logger:         a.log,
	}, bandwidth.SystemLinks{SysfsRoot: o.sysfsRoot, NetnsPath: o.netns}, bpf, bpf, nil)
	a.reg.MustRegister(bandwidth.NewCollector(h.meter))
	metrics := report.NewMetrics(a.reg)
	if h.enforcement, err = a.newEnforcement(h.meter); err != nil {
		return nil, err
	}
	if h.enforcement != nil {
		a.closers = append(a.closers, h.enforcement.close)
	}
	bwCfg := report.BandwidthConfig{
		Threshold: o.threshold, MinInterval: o.minInterval, MaxInterval: o.maxInterval,
		AgentVersion: version.Version,
	}
	if h.enforcement != nil {
		bwCfg.Enforcement = reportEnforcement(h.enforcement.enforcer)
	}
	h.bandwidth = report.NewBandwidthReporter(bwCfg, a.dyn, a.kube, o.nodeName, metrics, clock.RealClock{})
	topoCfg := report.TopologyConfig{Resync: o.topologyResync, AgentVersion: version.Version}
	if a.pinner != nil {
		topoCfg.NUMAPinning = a.pinner.State
	}
	h.topology = report.NewTopologyReporter(topoCfg, a.dyn, a.kube, o.nodeName, metrics, clock.RealClock{})
	if h.devices, err = a.newDevices(nodeIPs); err != nil {
		return nil, err
	}
	h.topology.OnDevices = h.devices.onDevices
	return h, nil
}

// close releases what newAgent opened; Run has returned, or never ran.
func (a *agent) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
	a.closers = nil
}

// ready reports whether the agent has done its first work: the first NodeBandwidth
// write went through, the sidecar terminator has its pods and its exit events, and NUMA
// pinning found the kubelet's pod cgroups.
func (a *agent) ready() bool {
	return (!a.o.heartbeats || a.heartbeatsReady.Load()) && (a.terminator == nil || a.terminator.Ready()) &&
		(a.pinner == nil || a.pinner.Ready())
}

// Run starts every part and waits until the agent is asked to stop (SIGTERM, or ctx
// ends) or a part fails, whose error it returns. It is called once.
func (a *agent) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	g := newGroup(stop)
	log := a.log
	if a.rt != nil {
		// Asked aside: a runtime that is missing or hung must not hold up the heartbeats.
		go logRuntime(ctx, a.rt, a.o.criEndpoint, log)
	}
	if a.prober != nil {
		a.loops.Add("container-runtime", a.o.criLivenessDeadline, a.prober.LastAnswered)
		g.Go(func() { a.prober.Run(ctx) })
	}
	if a.terminator != nil {
		a.loops.Add("sidecar-terminator", liveness.Bound(a.terminator.LivenessInterval()), a.terminator.LastAlive)
		g.goFatal(ctx, "sidecar terminator", a.terminator.Run)
	}
	if a.pinner != nil {
		a.loops.Add("numa-pinning", liveness.Bound(a.pinner.LivenessInterval()), a.pinner.LastAlive)
		g.goFatal(ctx, "NUMA pinning", a.pinner.Run)
	}
	if a.o.actsOnPods() {
		go a.pods.Run(ctx.Done())
	}
	if a.heartbeats != nil {
		if e := a.heartbeats.enforcement; e != nil {
			e.start(ctx, g, a.loops)
			// After every part has stopped: the enforcer must not shape again behind it.
			defer e.stop()
		} else if err := restoreEarlierShaping(a.o, log.WithName("enforcement")); err != nil {
			return g.abort(err)
		}
		if err := a.startHeartbeats(ctx, g); err != nil {
			return g.abort(err)
		}
	}
	if a.metricsServer != nil {
		go func() {
			if err := a.metricsServer.ServeTLS(a.metricsListener, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.fail(fmt.Errorf("metrics server on %s: %w", a.o.metricsAddr, err))
			}
		}()
		// The bound address, not the flag's: with port 0 the kernel picks it.
		log.Info("serving metrics", "addr", a.metricsListener.Addr().String())
		defer func() {
			shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = a.metricsServer.Shutdown(shutdown)
		}()
	}
	log.Info("sextant-agent running", "version", version.Version, "heartbeats", a.o.heartbeats, "sidecarTerminator", a.o.sidecarTerminator, "numaPinning", a.o.numaPinning)
	if err := g.wait(); err != nil {
		log.Error(err, "sextant-agent stopped on a failure")
		return err
	}
	log.Info("sextant-agent stopped")
	return nil
}

// startHeartbeats starts the meter, the device handshake and the two reporters' loops,
// once the topology reporter has read what the node published before.
func (a *agent) startHeartbeats(ctx context.Context, g *group) error {
	h, o, log := a.heartbeats, a.o, a.log
	// Start waits for the API server; it gives up only on an error that will not pass
	// by itself, or when the agent stops.
	if err := h.topology.Start(klog.NewContext(ctx, log)); err != nil {
		// Without the published list, a device that vanished while the agent was down
		// would be forgotten; carry on, it is still reported Unhealthy if it goes now.
		log.Error(err, "could not read the previous NodeTopology to seed device health")
	}
	if o.devicePlugin {
		// Until the device audit's first pass, the holders published before stand: a
		// first write without them would show the ranker held devices as free.
		h.topology.SetHolders(h.topology.PublishedHolders())
	}
	log.Info("sextant-agent metering", "attach", h.bpf.Mode(), "sysfsRoot", o.sysfsRoot)

	// The meter's own loop shows in its samples' times. A meter that cannot read its
	// counters takes no samples and counts as stuck too: a new agent loads the
	// programs again.
	a.loops.Add("bandwidth-meter", liveness.Bound(o.sampleInterval), func() time.Time { return h.meter.Snapshot().Time })
	g.Go(func() {
		if err := h.meter.Run(ctx); err != nil {
			log.Error(err, "detaching the meter")
		}
	})
	if err := h.devices.start(ctx, g, h.topology.PublishedHolders(), h.topology.SetHolders); err != nil {
		return err
	}
	topoLoop := loop{every: o.topologyInterval, beat: &liveness.Beat{}, now: time.Now, timeout: apiCallTimeout, log: log}
	a.loops.Add("topology-reporter", liveness.Bound(o.topologyInterval), topoLoop.beat.Last)
	g.Go(func() { topoLoop.publishTopology(ctx, a.topo.Fresh, h.topology.Offer, a.topo.Root()) })
	bwLoop := loop{every: o.sampleInterval, beat: &liveness.Beat{}, now: time.Now, timeout: apiCallTimeout, log: log}
	a.loops.Add("bandwidth-reporter", liveness.Bound(o.sampleInterval), bwLoop.beat.Last)
	g.Go(func() { bwLoop.publishBandwidth(ctx, h.meter.Snapshot, h.bandwidth.Offer, &a.heartbeatsReady) })
	return nil
}

// group runs the agent's parts. The first to fail stops the others, and its error is the
// agent's exit status: a DaemonSet's pod that stops on a failure must not look like one
// that was asked to stop.
type group struct {
	wg     sync.WaitGroup
	stop   func()
	failed chan error
}

// newGroup returns a group whose failures call stop, which ends the parts' context.
func newGroup(stop func()) *group {
	return &group{stop: stop, failed: make(chan error, 1)}
}

// Go runs f in the group.
func (g *group) Go(f func()) { g.wg.Go(f) }

// goFatal runs run in the group: its error, unless ctx ended first, fails the agent.
func (g *group) goFatal(ctx context.Context, what string, run func(context.Context) error) {
	g.wg.Go(func() {
		if err := run(ctx); err != nil && ctx.Err() == nil {
			g.fail(fmt.Errorf("%s: %w", what, err))
		}
	})
}

// fail stops every part; the first error given is wait's.
func (g *group) fail(err error) {
	select {
	case g.failed <- err:
	default:
	}
	g.stop()
}

// wait waits for every part to return, and returns the first failure.
func (g *group) wait() error {
	g.wg.Wait()
	select {
	case err := <-g.failed:
		return err
	default:
		return nil
	}
}

// abort stops the parts started so far, as starting the rest failed with err, and
// returns err once they have returned.
func (g *group) abort(err error) error {
	g.stop()
	g.wg.Wait()
	return err
}
