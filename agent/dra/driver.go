package dra

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"sextant.io/sextant/agent/deviceplugin"
	"sextant.io/sextant/api/v1alpha1"
)

// Config says what the driver serves and where it meets the kubelet and the runtime.
type Config struct {
	NodeName string
	// Kinds are the device kinds published through DRA.
	Kinds []v1alpha1.DeviceKind
	Kube  kubernetes.Interface
	// PluginDir is where the driver's socket goes (<kubelet root>/plugins/sextant.io).
	PluginDir string
	// RegistrarDir is the kubelet's plugin registration directory
	// (<kubelet root>/plugins_registry).
	RegistrarDir string
	// CDIDir is where Prepare writes claims' CDI specs: a directory the runtime reads
	// specs from (the host's /var/run/cdi as the agent sees it).
	CDIDir string
	// Locator finds a device's nodes and vendors' CDI devices.
	Locator deviceplugin.Locator
}

// Driver is the node's DRA driver. Update gives it the node's devices; Run registers it
// with the kubelet and publishes them.
type Driver struct {
	cfg     Config
	log     logr.Logger
	metrics *Metrics

	mu         sync.Mutex
	all        []v1alpha1.PCIDevice
	excluded   map[string]string
	published  map[string]v1alpha1.PCIDevice // by DRA device name, tainted ones too
	withTaints bool
	helper     *kubeletplugin.Helper // set while Run runs
	// prepared are the PCI addresses of each claim prepared on this node, read back
	// from the CDI specs when Run starts.
	prepared map[types.UID][]string
}

var _ kubeletplugin.DRAPlugin = &Driver{}

// New makes a driver; it publishes nothing before Run.
func New(cfg Config, metrics *Metrics, log logr.Logger) (*Driver, error) {
	if cfg.NodeName == "" || cfg.Kube == nil || len(cfg.Kinds) == 0 {
		return nil, errors.New("dra driver needs a node name, an API client and at least one device kind")
	}
	if cfg.CDIDir == "" || cfg.PluginDir == "" || cfg.RegistrarDir == "" {
		return nil, errors.New("dra driver needs its plugin, registrar and CDI directories")
	}
	return &Driver{cfg: cfg, log: log, metrics: metrics, withTaints: true, prepared: map[types.UID][]string{}}, nil
}

// Serves reports whether devices of kind are published through DRA.
func (d *Driver) Serves(kind v1alpha1.DeviceKind) bool { return slices.Contains(d.cfg.Kinds, kind) }

// Update takes the node's devices with their health and the devices the node keeps
// (devicefilter), and publishes the served kinds' devices if Run runs.
func (d *Driver) Update(devs []v1alpha1.PCIDevice, excluded map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.all, d.excluded = slices.Clone(devs), maps.Clone(excluded)
	d.publishLocked()
}

// publishLocked hands the current devices to the helper's slice controller, which
// writes only what changed. It does so on every topology read, even with the same
// devices: a restarting kubelet deletes the node's slices, and handing them again is
// what brings them back (TestDRADevicesAligned's kubelet restart fails without it).
func (d *Driver) publishLocked() {
	devs := Devices(d.all, d.excluded, d.cfg.Kinds, d.withTaints)
	names := make(map[string]bool, len(devs))
	for _, dev := range devs {
		names[dev.Name] = true
	}
	d.published = make(map[string]v1alpha1.PCIDevice, len(devs))
	for _, dev := range d.all {
		if n := DeviceName(dev.Kind, dev.Address); names[n] {
			d.published[n] = dev
		}
	}
	d.metrics.published.Set(float64(len(devs)))
	if d.helper == nil {
		return
	}
	pool := resourceslice.Pool{}
	for _, c := range chunk(devs) {
		pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: c})
	}
	res := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{d.cfg.NodeName: pool}}
	if err := d.helper.PublishResources(context.Background(), res); err != nil {
		d.log.Error(err, "publishing ResourceSlices")
	}
}

// Run registers the driver with the kubelet, publishes the devices and serves claims
// until ctx ends, when it stops serving. The ResourceSlices stay: the agent that
// starts next takes them over, and the kubelet removes a node's slices when the driver
// is gone for good.
func (d *Driver) Run(ctx context.Context) error {
	d.loadPrepared()
	// The kubelet makes its plugins directory, not each plugin's directory in it.
	if err := os.MkdirAll(d.cfg.PluginDir, 0o750); err != nil {
		return fmt.Errorf("making the DRA plugin directory: %w", err)
	}
	ctx = klog.NewContext(ctx, d.log)
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(d.cfg.Kube),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(d.cfg.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(d.cfg.RegistrarDir),
	)
	if err != nil {
		return fmt.Errorf("starting the DRA kubelet plugin: %w", err)
	}
	d.mu.Lock()
	d.helper = helper
	d.publishLocked()
	d.mu.Unlock()
	<-ctx.Done()
	d.mu.Lock()
	d.helper = nil
	d.mu.Unlock()
	helper.Stop()
	return nil
}

// loadPrepared reads back the claims prepared before the agent started.
func (d *Driver) loadPrepared() {
	prepared, warnings := readPrepared(d.cfg.CDIDir)
	for _, w := range warnings {
		d.log.Error(w, "reading prepared claims back")
	}
	d.mu.Lock()
	d.prepared = prepared
	d.mu.Unlock()
	d.metrics.prepared.Set(float64(len(prepared)))
}

// PrepareResourceClaims writes each claim's CDI spec: every device of the claim that
// this driver allocated on this node, with its device nodes and SEXTANT_<KIND> listing
// the addresses of its request's devices of that kind. A device that is not published
// here (gone, kept by the node, of a kind not served) or that another claim holds fails
// that claim's preparation.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		res := d.prepare(c)
		if res.Err != nil {
			d.metrics.prepares.WithLabelValues("error").Inc()
			d.log.Error(res.Err, "preparing claim", "claim", klog.KObj(c), "uid", c.UID)
		} else {
			d.metrics.prepares.WithLabelValues("ok").Inc()
		}
		out[c.UID] = res
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	type picked struct {
		result resourceapi.DeviceRequestAllocationResult
		dev    v1alpha1.PCIDevice
	}
	var devs []picked
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != d.cfg.NodeName {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is in pool %q, not this node's %q", c.Namespace, c.Name, r.Device, r.Pool, d.cfg.NodeName)}
		}
		dev, ok := d.published[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is not published on this node (gone, kept by the node, or of a kind not served through DRA)", c.Namespace, c.Name, r.Device)}
		}
		if dev.Health != v1alpha1.Healthy {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s (%s) is %s", c.Namespace, c.Name, r.Device, dev.Address, dev.Health)}
		}
		for uid, addrs := range d.prepared {
			if uid != c.UID && slices.Contains(addrs, dev.Address) {
				return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s (%s) is prepared for claim %s", c.Namespace, c.Name, r.Device, dev.Address, uid)}
			}
		}
		devs = append(devs, picked{r, dev})
	}

	// SEXTANT_<KIND> per request, as the device plugin sets it per container.
	envs := map[string]map[v1alpha1.DeviceKind][]string{}
	for _, p := range devs {
		req := p.result.Request
		if envs[req] == nil {
			envs[req] = map[v1alpha1.DeviceKind][]string{}
		}
		envs[req][p.dev.Kind] = append(envs[req][p.dev.Kind], p.dev.Address)
	}
	spec := cdiSpec{Version: cdiVersion, Kind: cdiKind}
	var result kubeletplugin.PrepareResult
	var addrs []string
	for _, p := range devs {
		same := slices.Clone(envs[p.result.Request][p.dev.Kind])
		slices.SortFunc(same, compareAddress)
		edits := d.cfg.Locator.Edits([]string{p.dev.Address}, d.all)
		cd := cdiDevice{
			Name:           cdiName(c.UID, p.result.Device),
			Annotations:    map[string]string{addressAnnoKey: p.dev.Address},
			ContainerEdits: cdiEdits{Env: []string{deviceplugin.EnvName(p.dev.Kind) + "=" + strings.Join(same, ",")}},
		}
		for _, n := range edits.Nodes {
			cd.ContainerEdits.DeviceNodes = append(cd.ContainerEdits.DeviceNodes, cdiDeviceNode{Path: n.ContainerPath, HostPath: n.HostPath, Permissions: "rw"})
		}
		spec.Devices = append(spec.Devices, cd)
		result.Devices = append(result.Devices, kubeletplugin.Device{
			Requests: []string{p.result.Request}, PoolName: p.result.Pool, DeviceName: p.result.Device,
			CDIDeviceIDs: append([]string{qualified(cd.Name)}, edits.CDI...),
		})
		addrs = append(addrs, p.dev.Address)
	}
	if err := writeSpec(d.cfg.CDIDir, c.UID, spec); err != nil {
		return kubeletplugin.PrepareResult{Err: err}
	}
	d.prepared[c.UID] = addrs
	d.metrics.prepared.Set(float64(len(d.prepared)))
	return result
}

// UnprepareResourceClaims removes the claims' CDI specs; a claim not prepared here is
// no error.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claims {
		err := removeSpec(d.cfg.CDIDir, c.UID)
		if err == nil {
			delete(d.prepared, c.UID)
		}
		out[c.UID] = err
	}
	d.metrics.prepared.Set(float64(len(d.prepared)))
	return out, nil
}

// HandleError logs errors of the background publishing. Where the API server dropped
// fields, the unhealthy devices' taints, those devices are published no more.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	d.metrics.publishErrors.Inc()
	var dropped *resourceslice.DroppedFieldsError
	if errors.As(err, &dropped) {
		d.mu.Lock()
		if d.withTaints {
			d.withTaints = false
			d.log.Error(err, "the API server drops device taints; unhealthy devices are left out of the ResourceSlices")
			d.publishLocked()
		}
		d.mu.Unlock()
		return
	}
	d.log.Error(err, msg)
}

// compareAddress orders PCI addresses by domain width, then as text.
func compareAddress(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}
