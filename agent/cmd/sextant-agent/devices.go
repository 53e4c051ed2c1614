package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"sextant.io/sextant/agent/deviceaudit"
	"sextant.io/sextant/agent/devicefilter"
	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/agent/dra"
	"sextant.io/sextant/agent/podresources"
	"sextant.io/sextant/agent/report"
	"sextant.io/sextant/api/v1alpha1"
)

// devices is the node side of the device handshake. The host-device filter runs with or
// without the plugin: the ranker never picks an excluded device. With --device-plugin, the
// kubelet device plugin hands each container exactly its pod's
// devices.sextant.io/allocated, and the audit checks what the kubelet did against it and
// says which pod holds each device.
type devices struct {
	nodeName   string
	auditEvery time.Duration
	kube       kubernetes.Interface
	pods       cache.SharedIndexInformer
	kubelet    *podresources.Client
	reg        prometheus.Registerer
	log        logr.Logger

	selector *devicefilter.Selector
	plugin   *deviceplugin.Manager // nil without --device-plugin
	dra      *dra.Driver           // nil without --dra-kinds
	// afterSettle pokes the audit a settle after an Allocate or a pod leaving.
	afterSettle *coalescer
	// audit is made by start, seeded with the holders the node published before.
	audit *deviceaudit.Auditor
	// published are the holders the node published before, set by start.
	published    map[string]v1alpha1.DeviceHolder
	lastWarnings []string
}

// newDevices makes the host-device filter, which counts nodeIPs' interfaces as the
// node's own, and with --device-plugin the device plugin.
func (a *agent) newDevices(nodeIPs []net.IP) (*devices, error) {
	o := a.o
	d := &devices{
		nodeName: o.nodeName, auditEvery: o.deviceAuditInterval,
		kube: a.kube, pods: a.pods, kubelet: a.kubelet, reg: a.reg, log: a.log.WithName("devices"),
	}
	addrs := make([]netip.Addr, 0, len(nodeIPs))
	for _, ip := range nodeIPs {
		if a, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, a.Unmap())
		}
	}
	d.selector = &devicefilter.Selector{Root: o.sysfsRoot, Rules: o.deviceFilter, NodeAddresses: func() []netip.Addr { return addrs }}
	draKinds, err := o.draDeviceKinds()
	if err != nil {
		return nil, err
	}
	if len(draKinds) > 0 {
		locator := deviceplugin.Locator{SysfsRoot: o.sysfsRoot, DevRoot: o.devRoot, HostDevDir: o.hostDevDir, CDISpecDirs: o.cdiSpecDirs, Log: d.log.WithName("dra")}
		if locator.HostDevDir == "" {
			locator.HostDevDir = o.devRoot
		}
		d.dra, err = dra.New(dra.Config{
			NodeName: o.nodeName, Kinds: draKinds, Kube: a.kube,
			PluginDir: o.draPluginDir, RegistrarDir: o.draRegistrarDir, CDIDir: o.cdiDir, Locator: locator,
		}, dra.NewMetrics(d.reg), d.log.WithName("dra"))
		if err != nil {
			return nil, err
		}
	}
	if !o.devicePlugin {
		return d, nil
	}
	// The kubelet lists a pod's devices in PodResources once it admitted the pod, long
	// before a container runs (an image pull may take minutes): a pass soon after every
	// Allocate publishes the holder of a device another scheduler's pod took before the
	// ranker can choose it again.
	// A pod that leaves the node gets the same delayed pass (see start's pod handlers).
	d.afterSettle = newCoalescer(clock.RealClock{}, allocSettle)
	freshPods := func(ctx context.Context) ([]*corev1.Pod, error) { return listNodePods(ctx, d.kube, d.nodeName) }
	d.plugin, err = deviceplugin.New(deviceplugin.Config{
		PluginDir: o.devicePluginDir, SysfsRoot: o.sysfsRoot, DevRoot: o.devRoot, HostDevDir: o.hostDevDir,
		CDISpecDirs: o.cdiSpecDirs, SkipKinds: draKinds, Pods: d.listPods, FreshPods: freshPods, KubeletPods: d.kubelet.List,
		OnAllocated: func(string) { d.afterSettle.poke() }, InUse: d.inUse,
	}, deviceplugin.NewMetrics(d.reg), d.log)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// listPods lists the node's pods from the shared informer.
func (d *devices) listPods() ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, obj := range d.pods.GetStore().List() {
		if p, ok := obj.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// inUse are the addresses of the devices some pod holds: the audit's, or before its
// first pass, what the node published before. The plugin asks only once it runs, after
// start.
func (d *devices) inUse() []string {
	var out []string
	if hs := d.audit.Holders(); hs != nil {
		for addr := range hs {
			out = append(out, addr)
		}
		return out
	}
	for addr := range d.published {
		out = append(out, addr)
	}
	return out
}

// onDevices is what the topology reporter gives the node's devices to on every read: it
// answers with the devices kept from the ranker's choice and why, and hands the rest to
// the plugin and the DRA driver. Devices of the kinds served through DRA are kept from
// the ranker's choice too: DynamicResources allocates them, and an ID the ranker wrote
// onto a pod for one would reach no device plugin.
func (d *devices) onDevices(devs []v1alpha1.PCIDevice) map[string]string {
	excluded, warnings := d.selector.Excluded(devs)
	msgs := make([]string, len(warnings))
	for i, w := range warnings {
		msgs[i] = w.Error()
	}
	// The host is scanned on every topology read; say what it could not see once.
	if !slices.Equal(msgs, d.lastWarnings) {
		for _, m := range msgs {
			d.log.Info("host device scan", "warning", m)
		}
		d.lastWarnings = msgs
	}
	if d.plugin != nil {
		d.plugin.Update(devs, excluded)
	}
	if d.dra == nil {
		return excluded
	}
	d.dra.Update(devs, excluded)
	published := maps.Clone(excluded)
	for _, dev := range devs {
		if published[dev.Address] == "" && d.dra.Serves(dev.Kind) {
			if published == nil {
				published = map[string]string{}
			}
			published[dev.Address] = servedThroughDRA
		}
	}
	return published
}

// servedThroughDRA is the NodeTopology exclusion of a device the DRA driver publishes.
const servedThroughDRA = "served through DRA (driver " + dra.DriverName + "): claims get it, the device plugin does not"

// listNodePods lists the pods bound to nodeName from the API server.
func listNodePods(ctx context.Context, kube kubernetes.Interface, nodeName string) ([]*corev1.Pod, error) {
	list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String()})
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

// start starts the device plugin, the audit, seeded with the holders published before,
// and the removal of stale capacity; setHolders is told which pod holds each device. A
// plugin that stops is fatal: without it the kubelet hands out none of the node's
// devices, while the node's heartbeats would still say the agent is alive. The DRA
// driver, with --dra-kinds, is as fatal. Without either it starts nothing.
func (d *devices) start(ctx context.Context, g *group, published map[string]v1alpha1.DeviceHolder, setHolders func(map[string]v1alpha1.DeviceHolder)) error {
	if d.dra != nil {
		// As with the device plugin: without the driver the kubelet prepares no claim
		// for the node's devices.
		g.goFatal(ctx, "DRA driver", d.dra.Run)
		if err := d.startDRAAudit(ctx, g); err != nil {
			return err
		}
	}
	if d.plugin == nil {
		return nil
	}
	d.published = published
	onHolders := func(hs map[string]deviceaudit.Holder) {
		out := make(map[string]v1alpha1.DeviceHolder, len(hs))
		for addr, h := range hs {
			out[addr] = v1alpha1.DeviceHolder{Namespace: h.Namespace, Name: h.Name, UID: h.UID}
		}
		setHolders(out)
	}
	seed := make(map[string]deviceaudit.Holder, len(published))
	for addr, h := range published {
		seed[addr] = deviceaudit.Holder{Namespace: h.Namespace, Name: h.Name, UID: h.UID}
	}
	audit := deviceaudit.New(deviceaudit.Config{NodeName: d.nodeName, Every: d.auditEvery, OnHolders: onHolders, Published: seed},
		d.kube, d.kubelet.List, d.listPods, deviceaudit.NewMetrics(d.reg), d.log)
	d.audit = audit
	afterSettle := d.afterSettle
	// A container that starts is audited at once, not at the next --device-audit-interval:
	// a short-lived pod with the wrong devices would otherwise never be seen. A pod that
	// leaves (deleted, terminal or being deleted) is audited a settle later, as the kubelet
	// may still list its devices for a moment: until a pass, the ranker sees them held
	// and may preempt other pods for devices that are free.
	if _, err := d.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && runningContainers(pod) > 0 {
				audit.Trigger()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 {
				return
			}
			if containerStarted(old, pod) {
				audit.Trigger()
			}
			if podLeaving(old, pod) {
				afterSettle.poke()
			}
		},
		// The informer holds only this node's pods; a tombstone counts as a deletion too.
		DeleteFunc: func(any) { afterSettle.poke() },
	}); err != nil {
		return fmt.Errorf("watch the node's pods for the device audit: %w", err)
	}
	g.goFatal(ctx, "device plugin", d.plugin.Run)
	g.Go(func() {
		// A pass before the pod cache is filled would find no pod running, and drop the
		// holders it is to keep.
		if cache.WaitForCacheSync(ctx.Done(), d.pods.HasSynced) {
			audit.Run(ctx)
		}
	})
	g.Go(func() { afterSettle.run(ctx, audit.Trigger) })
	g.Go(func() { removeStaleCapacity(ctx, d.kube, d.nodeName, d.kubelet, d.log) })
	return nil
}

// startDRAAudit compares, at every --device-audit-interval and when a container starts,
// what the kubelet's PodResources says each container got of the DRA driver's devices
// with its claims' allocations.
func (d *devices) startDRAAudit(ctx context.Context, g *group) error {
	trigger := make(chan struct{}, 1)
	if _, err := d.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*corev1.Pod)
			pod, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && len(pod.Spec.ResourceClaims) > 0 && containerStarted(old, pod) {
				select {
				case trigger <- struct{}{}:
				default:
				}
			}
		},
	}); err != nil {
		return fmt.Errorf("watch the node's pods for the DRA audit: %w", err)
	}
	pod := func(namespace, name string) (*corev1.Pod, bool) {
		obj, ok, err := d.pods.GetStore().GetByKey(namespace + "/" + name)
		if err != nil || !ok {
			return nil, false
		}
		p, ok := obj.(*corev1.Pod)
		return p, ok
	}
	g.Go(func() {
		d.dra.Audit(ctx, dra.AuditConfig{Every: d.auditEvery, List: d.kubelet.List, Pod: pod, Trigger: trigger})
	})
	return nil
}

// allocSettle is how long after an Allocate (or a pod leaving) the audit looks. The
// kubelet records the devices once Allocate's answer reaches it, so a pass at once could
// miss them; a second covers that with room to spare, and the containers of one pod, or a
// burst of pods, that the kubelet admits meanwhile cost one or two PodResources Lists,
// not one each.
const allocSettle = time.Second

// coalescer turns pokes into calls of fire, one at most per settle, each at least settle
// after the poke it answers.
type coalescer struct {
	clock  clock.Clock
	settle time.Duration
	pokes  chan struct{}
}

func newCoalescer(clk clock.Clock, settle time.Duration) *coalescer {
	return &coalescer{clock: clk, settle: settle, pokes: make(chan struct{}, 1)}
}

// poke asks for a call of fire; it never blocks (it is called from Allocate, which the
// kubelet waits for).
func (c *coalescer) poke() {
	select {
	case c.pokes <- struct{}{}:
	default:
	}
}

// run calls fire a settle after a poke, until ctx ends. Pokes while it waits are held as
// one, answered by a call a settle after this one: a poke just before fire may be for
// devices the kubelet has not recorded yet.
func (c *coalescer) run(ctx context.Context, fire func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.pokes:
		}
		t := c.clock.NewTimer(c.settle)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		fire()
	}
}

// removeStaleCapacity removes the sextant.io/<kind> capacity agents before the device
// plugin patched onto the Node, once the kubelet answers, leaving what a registered
// device plugin serves to the kubelet.
func removeStaleCapacity(ctx context.Context, kube kubernetes.Interface, node string, kubelet *podresources.Client, log logr.Logger) {
	for delay := time.Second; ; delay = min(2*delay, time.Minute) {
		served, err := kubelet.DeviceResources(ctx)
		if err == nil {
			var removed []string
			removed, err = report.RemoveStaleDeviceCapacity(ctx, kube, node, func(r string) bool { return served[r] })
			if err == nil {
				if len(removed) > 0 {
					log.Info("removed device capacity no device plugin serves (written by an older agent)", "resources", removed)
				}
				return
			}
		}
		log.Error(err, "could not check the Node for stale device capacity; retrying", "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// runningContainers counts the pod's containers, init containers included, that run.
func runningContainers(pod *corev1.Pod) int {
	n := 0
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			if s.State.Running != nil {
				n++
			}
		}
	}
	return n
}

// podLeaving reports whether the pod began to give up its devices between old and pod:
// it turned terminal (Succeeded or Failed) or got a deletion timestamp.
func podLeaving(old, pod *corev1.Pod) bool {
	terminal := func(p *corev1.Pod) bool {
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	}
	return terminal(pod) && !terminal(old) || pod.DeletionTimestamp != nil && old.DeletionTimestamp == nil
}

// containerStarted reports whether a container of the pod started between old and pod:
// one runs now that did not, or runs again since a restart.
func containerStarted(old, pod *corev1.Pod) bool {
	started := func(p *corev1.Pod) map[string]metav1.Time {
		out := map[string]metav1.Time{}
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for _, s := range statuses {
				if s.State.Running != nil {
					out[s.Name] = s.State.Running.StartedAt
				}
			}
		}
		return out
	}
	before := started(old)
	for name, at := range started(pod) {
		if prev, ok := before[name]; !ok || !prev.Equal(&at) {
			return true
		}
	}
	return false
}
