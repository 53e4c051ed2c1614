package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"sextant.io/sextant/api/v1alpha1"
)

// KubeletSocket is the name of the kubelet's registration socket in its device-plugins
// directory.
const KubeletSocket = "kubelet.sock"

// containerDev is where a container finds its device nodes: the OCI runtime's /dev
// inside the container, whatever the host's dev directory is.
const containerDev = "/dev"

// Config says where the plugin finds the kubelet, the node's devices and its pods.
type Config struct {
	// PluginDir is the kubelet's device-plugins directory as the agent sees it
	// (<kubelet root>/device-plugins): the kubelet's socket is there, and the plugin's
	// own sockets go there.
	PluginDir string
	// SysfsRoot holds sys/ and proc/ (the agent's --sysfs-root).
	SysfsRoot string
	// DevRoot is the host's dev directory as the agent sees it: device nodes that are
	// not there are not handed out.
	DevRoot string
	// HostDevDir is the host's dev directory as the kubelet and the runtime see it; the
	// paths handed to the kubelet are under it. Default: DevRoot.
	HostDevDir string
	// CDISpecDirs are read for CDI specs naming the devices (the host's /etc/cdi and
	// /var/run/cdi as the agent sees them); none: no CDI devices are returned.
	CDISpecDirs []string
	// SkipKinds are kinds served another way (the agent's DRA driver): the plugin
	// registers no endpoint for them, so the kubelet does not advertise them.
	SkipKinds []v1alpha1.DeviceKind

	// Pods lists the pods bound to this node (the shared node pod informer's store).
	Pods func() ([]*corev1.Pod, error)
	// FreshPods, if set, lists the pods bound to this node from the API server (a
	// field selector on spec.nodeName); asked when the cached pods have no candidate,
	// in case the kubelet saw a pod before the agent's watch did.
	FreshPods func(context.Context) ([]*corev1.Pod, error)
	// KubeletPods, if set, is the kubelet's PodResources List; asked to find the pod the
	// kubelet is admitting among those a preference or an allocation may be for.
	KubeletPods func(context.Context) ([]*podresourcesapi.PodResources, error)
	// LookupTimeout bounds FreshPods and KubeletPods while the kubelet waits
	// (default 2s).
	LookupTimeout time.Duration

	// Resync is how often sockets and the registration are checked even without a
	// file event (default 30s).
	Resync time.Duration
	// RegisterTimeout bounds one Register call to the kubelet (default 5s).
	RegisterTimeout time.Duration
	// OnAllocated, if set, is called with the resource after every Allocate that
	// hands devices out; it must not block.
	OnAllocated func(resource string)
	// InUse, if set, returns the devices the audit last found held by a pod. A
	// container of a pod the ranker chose no devices for is offered others first; one
	// no pending pod can be (a running container the kubelet admits again after its
	// restart) is offered them first.
	InUse func() []string
	// Limits bound each endpoint's gRPC server (a field not set: DefaultServerLimits').
	Limits ServerLimits
}

// Manager serves the kubelet's device-plugin API for every requestable kind the node
// has, one endpoint each, and keeps them registered.
type Manager struct {
	cfg     Config
	metrics *Metrics
	log     logr.Logger
	kick    chan struct{}

	mu        sync.Mutex
	endpoints map[v1alpha1.DeviceKind]*endpoint
	all       []v1alpha1.PCIDevice
	excluded  map[string]string
}

// New returns a Manager; Update gives it devices, Run serves them.
func New(cfg Config, metrics *Metrics, log logr.Logger) (*Manager, error) {
	switch {
	case cfg.PluginDir == "":
		return nil, errors.New("device plugin: no kubelet device-plugins directory")
	case cfg.SysfsRoot == "":
		return nil, errors.New("device plugin: no sysfs root")
	case cfg.DevRoot == "":
		return nil, errors.New("device plugin: no dev root")
	case cfg.Pods == nil:
		return nil, errors.New("device plugin: no pod lister")
	}
	if cfg.HostDevDir == "" {
		cfg.HostDevDir = cfg.DevRoot
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = 2 * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.RegisterTimeout <= 0 {
		cfg.RegisterTimeout = 5 * time.Second
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	return &Manager{cfg: cfg, metrics: metrics, log: log, kick: make(chan struct{}, 1),
		endpoints: map[v1alpha1.DeviceKind]*endpoint{}, excluded: map[string]string{}}, nil
}

// Socket is the path of the socket serving kind.
func (m *Manager) Socket(kind v1alpha1.DeviceKind) string {
	return filepath.Join(m.cfg.PluginDir, "sextant-"+string(kind)+".sock")
}

// EnvName is the environment variable listing a container's devices of kind.
func EnvName(kind v1alpha1.DeviceKind) string {
	return "SEXTANT_" + strings.ToUpper(string(kind))
}

// Update gives the plugin the node's devices with their health (the topology
// Tracker's list) and the devices not to hand out, with why (devicefilter). A kind
// gets an endpoint once the node has a device of it that may be handed out, and keeps
// it: a kind whose devices all go is listed empty, so the kubelet's allocatable drops
// to 0. Streams are woken only where a list changed.
func (m *Manager) Update(devs []v1alpha1.PCIDevice, excluded map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for addr, why := range excluded {
		if m.excluded[addr] != why {
			m.log.Info("device not handed to pods", "device", addr, "reason", why)
		}
	}
	for addr := range m.excluded {
		if _, ok := excluded[addr]; !ok {
			m.log.Info("device handed to pods again", "device", addr)
		}
	}
	m.all, m.excluded = slices.Clone(devs), maps.Clone(excluded)
	started := false
	for _, kind := range v1alpha1.RequestableDeviceKinds {
		if slices.Contains(m.cfg.SkipKinds, kind) {
			continue
		}
		var list []*pluginapi.Device
		healthy := 0
		for _, d := range devs {
			if d.Kind != kind || excluded[d.Address] != "" {
				continue
			}
			pd := &pluginapi.Device{ID: d.Address, Health: pluginapi.Unhealthy}
			if d.Health == v1alpha1.Healthy {
				pd.Health = pluginapi.Healthy
				healthy++
			}
			if d.NUMANode != nil {
				pd.Topology = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(*d.NUMANode)}}}
			}
			list = append(list, pd)
		}
		ep, ok := m.endpoints[kind]
		if !ok {
			if len(list) == 0 {
				continue
			}
			ep = newEndpoint(m, kind, m.Socket(kind))
			m.endpoints[kind] = ep
			started = true
		}
		ep.set(list)
		m.metrics.devices.WithLabelValues(ep.resource, pluginapi.Healthy).Set(float64(healthy))
		m.metrics.devices.WithLabelValues(ep.resource, pluginapi.Unhealthy).Set(float64(len(list) - healthy))
	}
	if started {
		m.wake()
	}
}

func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Manager) endpointList() []*endpoint {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*endpoint, 0, len(m.endpoints))
	for _, k := range v1alpha1.RequestableDeviceKinds {
		if ep, ok := m.endpoints[k]; ok {
			out = append(out, ep)
		}
	}
	return out
}

// Run serves and registers the endpoints until ctx ends, then stops them and removes
// their sockets. It registers again whenever the kubelet's socket is created anew (the
// kubelet restarted), serves again whenever an endpoint's socket is removed (the
// kubelet wipes the directory when it starts), and checks both every Resync (every
// second while there is no kubelet socket) in case an event was missed.
func (m *Manager) Run(ctx context.Context) error {
	defer func() {
		for _, ep := range m.endpointList() {
			ep.stop()
			_ = os.Remove(ep.socket)
		}
	}()
	for {
		if err := m.waitForDir(ctx); err != nil || ctx.Err() != nil {
			return err
		}
		if err := m.watch(ctx); err != nil || ctx.Err() != nil {
			return err
		}
		// The directory itself went (the kubelet's root was reset): wait for it again.
		m.forceRegister()
	}
}

// watch reconciles on every event in the device-plugins directory and every retry or
// resync, until ctx ends (nil), the directory is removed (nil), or the watch fails.
func (m *Manager) watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", m.cfg.PluginDir, err)
	}
	defer w.Close()
	if err := w.Add(m.cfg.PluginDir); err != nil {
		return fmt.Errorf("watch %s: %w", m.cfg.PluginDir, err)
	}
	kubeletSock := filepath.Join(m.cfg.PluginDir, KubeletSocket)
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		next := m.reconcile(ctx)
		retry.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
		case <-retry.C:
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("device-plugins directory watch closed")
			}
			if !errors.Is(err, fsnotify.ErrEventOverflow) {
				return fmt.Errorf("watch %s: %w", m.cfg.PluginDir, err)
			}
			m.forceRegister() // events were lost: assume the worst
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("device-plugins directory watch closed")
			}
			switch {
			case ev.Name == kubeletSock && ev.Has(fsnotify.Create):
				// The reconcile below registers with it: it is another file than the
				// one registered with. Forcing a registration here would register twice
				// when a reconcile ran between the socket's creation and this event.
				m.log.Info("kubelet socket created", "socket", kubeletSock)
			case filepath.Clean(ev.Name) == filepath.Clean(m.cfg.PluginDir) && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)):
				m.log.Info("the kubelet's device-plugins directory was removed", "dir", m.cfg.PluginDir)
				return nil
			}
		}
		// Any event (an endpoint's socket removed above all) leads to a reconcile,
		// which stats the sockets.
	}
}

func (m *Manager) waitForDir(ctx context.Context) error {
	logged := false
	for {
		fi, err := os.Stat(m.cfg.PluginDir)
		switch {
		case err == nil && fi.IsDir():
			return nil
		case err == nil:
			return fmt.Errorf("device-plugins directory %s is not a directory", m.cfg.PluginDir)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("device-plugins directory: %w", err)
		case !logged:
			m.log.Info("waiting for the kubelet's device-plugins directory", "dir", m.cfg.PluginDir)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// kubeletPoll is how often a plugin looks for a kubelet socket that is not there yet.
const kubeletPoll = time.Second

func (m *Manager) forceRegister() {
	for _, ep := range m.endpointList() {
		ep.needRegister = true
		ep.backoff, ep.nextTry = 0, time.Time{}
	}
}

// reconcile makes every endpoint served and registered, and returns how long until
// it should look again: a failed registration's retry, or the resync period.
func (m *Manager) reconcile(ctx context.Context) time.Duration {
	next := m.cfg.Resync
	kubeletSock := filepath.Join(m.cfg.PluginDir, KubeletSocket)
	for _, ep := range m.endpointList() {
		if ctx.Err() != nil {
			return next
		}
		if _, err := os.Stat(ep.socket); ep.server == nil || err != nil {
			if ep.server != nil {
				m.log.Info("plugin socket gone: serving again", "resource", ep.resource, "socket", ep.socket)
			}
			if err := ep.serve(); err != nil {
				m.log.Error(err, "serving a device resource failed", "resource", ep.resource)
				next = min(next, time.Second)
				continue
			}
			ep.needRegister = true
		}
		id, err := statID(kubeletSock)
		if err != nil {
			// No kubelet yet: its socket's creation wakes us, and a short poll covers
			// an event the watch did not deliver (seen under load in CI).
			next = min(next, kubeletPoll)
			continue
		}
		if id != ep.kubeletID {
			ep.needRegister = true
		}
		if !ep.needRegister {
			continue
		}
		if wait := time.Until(ep.nextTry); wait > 0 {
			next = min(next, wait)
			continue
		}
		if err := m.register(ctx, ep, kubeletSock); err != nil {
			m.metrics.registrations.WithLabelValues(ep.resource, "failed").Inc()
			ep.backoff = min(max(2*ep.backoff, time.Second), 30*time.Second)
			ep.nextTry = time.Now().Add(ep.backoff)
			next = min(next, ep.backoff)
			m.log.Error(err, "registering with the kubelet failed", "resource", ep.resource, "retry", ep.backoff)
			continue
		}
		m.metrics.registrations.WithLabelValues(ep.resource, "ok").Inc()
		m.log.Info("registered with the kubelet", "resource", ep.resource, "socket", ep.socket)
		ep.needRegister, ep.kubeletID, ep.backoff = false, id, 0
	}
	return next
}

func (m *Manager) register(ctx context.Context, ep *endpoint, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubelet socket %s: %w", kubeletSock, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RegisterTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     filepath.Base(ep.socket),
		ResourceName: ep.resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register %s with the kubelet: %w", ep.resource, err)
	}
	return nil
}

// fileID tells a file from the one that stood at its path before: a socket made anew
// at a reused inode still has another modification time.
type fileID struct {
	dev, ino uint64
	mtime    time.Time
}

func statID(p string) (fileID, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return fileID{}, err
	}
	id := fileID{mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id, nil
}

// prefer answers GetPreferredAllocation for one container.
func (m *Manager) prefer(ctx context.Context, ep *endpoint, req PreferenceRequest) Preference {
	pods, err := m.cfg.Pods()
	if err != nil {
		m.log.Error(err, "listing the node's pods for a preferred allocation failed", "resource", ep.resource)
	}
	if m.cfg.InUse != nil {
		req.InUse = m.cfg.InUse()
	}
	admitting, _ := m.admitting(ctx, req.Resource)
	p := Prefer(pods, req, ep.numaNodes(), admitting)
	if p.Outcome == OutcomeFallback && m.cfg.FreshPods != nil {
		// The kubelet may have the pod before the agent's watch does, and a fallback
		// is kept off the devices of pending pods the watch may not have yet either.
		if fresh, err := m.freshPods(ctx, ep); err == nil {
			p = Prefer(fresh, req, ep.numaNodes(), admitting)
		}
	}
	m.metrics.preferred.WithLabelValues(ep.resource, p.Outcome).Inc()
	attrs := []any{"resource", ep.resource, "size", req.Size, "available", len(req.Available), "devices", p.IDs, "outcome", p.Outcome}
	if p.Pod != nil {
		attrs = append(attrs, "pod", p.Pod.Namespace+"/"+p.Pod.Name)
	}
	if len(p.Candidates) > 1 {
		names := make([]string, len(p.Candidates))
		for i, c := range p.Candidates {
			names[i] = c.Namespace + "/" + c.Name
		}
		attrs = append(attrs, "candidates", names)
	}
	m.log.Info("preferred allocation", attrs...)
	return p
}

// check holds the devices the kubelet allocates to one container to the ranker's
// decision (CheckAllocation); a Mismatch is returned as the refusal.
func (m *Manager) check(ctx context.Context, ep *endpoint, ids []string) *Mismatch {
	resource := ep.kind.ResourceName()
	pods, err := m.cfg.Pods()
	if err != nil {
		m.log.Error(err, "listing the node's pods to check an allocation failed", "resource", ep.resource)
	}
	admitting, kubeletErr := m.admitting(ctx, resource)
	mismatch, judged, identified := CheckAllocation(pods, resource, ids, admitting)
	freshFailed := false
	if (mismatch != nil || !judged) && m.cfg.FreshPods != nil {
		// The kubelet may have the pod before the agent's watch does, and a refusal
		// fails a pod: both are worth the API server's word (a pod deleted and made
		// again under its name is told apart only there).
		if fresh, err := m.freshPods(ctx, ep); err != nil {
			freshFailed = true
		} else {
			mismatch, judged, identified = CheckAllocation(fresh, resource, ids, admitting)
		}
	}
	if mismatch != nil && freshFailed && !identified {
		// Lookups delay admission, never block it: a refusal the kubelet did not pin on
		// the pod it admits may be the cache's guess while the real pod is one the
		// watch has not delivered, so without the API server's word it is dropped. One
		// the kubelet pinned stands: the annotation cannot change once the pod is bound.
		mismatch = nil
	}
	if mismatch != nil {
		m.metrics.refused.WithLabelValues(ep.resource).Inc()
		names := make([]string, len(mismatch.Pods))
		for i, p := range mismatch.Pods {
			names[i] = p.Namespace + "/" + p.Name
		}
		m.log.Error(mismatch, "refused an allocation that is not the ranker's choice", "resource", ep.resource, "devices", ids, "pods", names)
		return mismatch
	}
	var reason string
	switch {
	case !judged && freshFailed:
		reason = UncheckedFreshListFailed
	case !judged:
		reason = UncheckedNoCandidate
	case !identified && kubeletErr() != nil:
		reason = UncheckedPodResourcesFailed
	case !identified && freshFailed:
		reason = UncheckedFreshListFailed
	}
	if reason != "" {
		// The audit still checks the pod once it runs; this says enforcement was
		// weaker than the ranker's decision asks for, and why.
		m.metrics.unchecked.WithLabelValues(ep.resource, reason).Inc()
		m.log.Info("allocation let through without holding it to the ranker's choice", "resource", ep.resource, "devices", ids, "reason", reason)
	}
	return nil
}

// freshPods lists the node's pods from the API server, bounded by LookupTimeout, and
// logs a failure.
func (m *Manager) freshPods(ctx context.Context, ep *endpoint) ([]*corev1.Pod, error) {
	lctx, cancel := context.WithTimeout(ctx, m.cfg.LookupTimeout)
	defer cancel()
	pods, err := m.cfg.FreshPods(lctx)
	if err != nil {
		m.log.Error(err, "listing the node's pods from the API server failed", "resource", ep.resource)
	}
	return pods, err
}

// admitting narrows candidates with the kubelet's PodResources: the pod being admitted
// is known to the kubelet (it enters the kubelet's pod manager just before admission)
// and has a container of this resource without devices yet; pods admitted before have
// devices for all of theirs, and pods the kubelet has not taken up are not listed. Nil
// when there is no PodResources client; not ok when the kubelet does not answer. The
// kubelet is asked once, at the first call, for one preference or one check; failed
// returns the kubelet's error once it was asked.
func (m *Manager) admitting(ctx context.Context, resource corev1.ResourceName) (narrow AdmittingFunc, failed func() error) {
	// One answer serves the whole call it was made for: asking again after a fresh pod
	// list would only add to what the kubelet waits.
	var (
		asked bool
		list  []*podresourcesapi.PodResources
		err   error
	)
	failed = func() error { return err }
	if m.cfg.KubeletPods == nil {
		return nil, failed
	}
	return func(cands []*corev1.Pod) ([]*corev1.Pod, bool) {
		if !asked {
			asked = true
			lctx, cancel := context.WithTimeout(ctx, m.cfg.LookupTimeout)
			list, err = m.cfg.KubeletPods(lctx)
			cancel()
			if err != nil {
				m.log.Error(err, "asking the kubelet's PodResources which pod it admits failed", "resource", resource)
			}
		}
		if err != nil {
			return nil, false
		}
		return Admitting(list, cands, resource), true
	}, failed
}

// Admitting returns the candidates the kubelet's PodResources list shows as being
// admitted: listed, with a container asking for resource that has no devices of it.
// A candidate whose only containers of resource are plain init containers (which
// PodResources does not list) cannot be judged and is kept.
func Admitting(list []*podresourcesapi.PodResources, cands []*corev1.Pod, resource corev1.ResourceName) []*corev1.Pod {
	byName := make(map[string]*podresourcesapi.PodResources, len(list))
	for _, pr := range list {
		byName[pr.GetNamespace()+"/"+pr.GetName()] = pr
	}
	var out []*corev1.Pod
	for _, pod := range cands {
		pr, ok := byName[pod.Namespace+"/"+pod.Name]
		if !ok {
			continue
		}
		containers := map[string]*podresourcesapi.ContainerResources{}
		for _, c := range pr.GetContainers() {
			containers[c.GetName()] = c
		}
		judged, waiting := false, false
		for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
			for _, c := range cs {
				cr, listed := containers[c.Name]
				if !listed || ContainerRequest(c, resource) == 0 {
					continue
				}
				judged = true
				if !slices.ContainsFunc(cr.GetDevices(), func(d *podresourcesapi.ContainerDevices) bool {
					return d.GetResourceName() == string(resource) && len(d.GetDeviceIds()) > 0
				}) {
					waiting = true
				}
			}
		}
		if waiting || !judged {
			out = append(out, pod)
		}
	}
	return out
}

// containerResponse is what one container gets for its devices of kind.
func (m *Manager) containerResponse(kind v1alpha1.DeviceKind, ids []string) *pluginapi.ContainerAllocateResponse {
	ids = slices.Clone(ids)
	slices.SortFunc(ids, comparePCIAddress)
	m.mu.Lock()
	all := slices.Clone(m.all)
	m.mu.Unlock()
	edits := m.locator().Edits(ids, all)
	resp := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{EnvName(kind): strings.Join(ids, ",")}}
	for _, n := range edits.Nodes {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{HostPath: n.HostPath, ContainerPath: n.ContainerPath, Permissions: "rw"})
	}
	for _, n := range edits.CDI {
		resp.CdiDevices = append(resp.CdiDevices, &pluginapi.CDIDevice{Name: n})
	}
	m.metrics.allocations.WithLabelValues(string(kind.ResourceName())).Inc()
	return resp
}

// locator finds device nodes and CDI devices where the plugin is configured to.
func (m *Manager) locator() Locator {
	return Locator{SysfsRoot: m.cfg.SysfsRoot, DevRoot: m.cfg.DevRoot, HostDevDir: m.cfg.HostDevDir, CDISpecDirs: m.cfg.CDISpecDirs, Log: m.log}
}
