// Package binder is the SextantBinder scheduler plugin. It binds a pod as DefaultBinder
// does, except that the Binding carries the annotations the other sextant plugins staged
// for the pod in Reserve (numa.sextant.io/nodes, devices.sextant.io/allocated).
//
// The API server copies a Binding's annotations onto the pod in the same update that
// sets spec.nodeName. So the node side can never see the pod bound without them, and
// binding costs one API write per pod instead of one patch per annotation, plus the
// nominatedNodeName patch the scheduler makes before any PreBind that writes. At 5000
// nodes that difference is most of the ranker's throughput
// (docs/design/0002-decisions-ride-on-the-binding.md).
//
// The plugin is required in any profile that enables NUMAAware or DeviceAware: the
// ranker's account may not patch pods, and an admission policy refuses those annotations
// on any pod write, so the Binding is the only way a decision reaches a pod (and only
// from the ranker: docs/security.md). sextant-ranker refuses to start with such a
// profile without it, and the plugins' Reserve fails should one run anyway.
package binder

import (
	"context"
	"maps"
	"sync"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/ranker/plugins/pluginargs"
)

// Name is the plugin's name in the scheduler configuration. A profile that enables it
// disables DefaultBinder.
const Name = "SextantBinder"

// SextantBinder is the plugin.
type SextantBinder struct {
	handle fwk.Handle
}

var (
	_ fwk.PreFilterPlugin = &SextantBinder{}
	_ fwk.BindPlugin      = &SextantBinder{}
	_ fwk.SignPlugin      = &SextantBinder{}
)

// New is the plugin factory for app.WithPlugin(binder.Name, binder.New). The plugin takes
// no arguments.
func New(_ context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	if err := pluginargs.None(Name, obj); err != nil {
		return nil, err
	}
	return &SextantBinder{handle: h}, nil
}

// Name returns the plugin's name.
func (b *SextantBinder) Name() string { return Name }

// stagingKey is where the staged annotations of one scheduling cycle live.
const stagingKey fwk.StateKey = Name

// staging holds the annotations the pod's Binding will carry.
type staging struct {
	mu          sync.Mutex
	annotations map[string]string
}

// Clone shares the staging area: only Reserve, Unreserve and Bind touch it, and they run
// on the cycle's own state, never on the clones preemption and nominated pods use.
func (s *staging) Clone() fwk.StateData { return s }

// PreFilter opens the staging area for the cycle. Its presence is what tells Stage that
// a SextantBinder will bind this pod. PreFilter runs in every cycle, batched or not.
func (b *SextantBinder) PreFilter(_ context.Context, state fwk.CycleState, _ *v1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	Open(state)
	return nil, fwk.NewStatus(fwk.Skip)
}

// Open starts an empty staging area in state, as PreFilter does in each cycle; for
// callers that run the plugins outside a framework (tests, benchmarks) and bind with
// what Staged returns.
func Open(state fwk.CycleState) {
	state.Write(stagingKey, &staging{annotations: map[string]string{}})
}

// PreFilterExtensions returns nil: the plugin filters nothing.
func (b *SextantBinder) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// SignPod contributes nothing to the pod's signature (the plugin does not affect which
// nodes fit or how they score), and so keeps opportunistic batching available.
func (b *SextantBinder) SignPod(context.Context, *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// Bind posts the Binding with the staged annotations.
func (b *SextantBinder) Bind(ctx context.Context, state fwk.CycleState, p *v1.Pod, nodeName string) *fwk.Status {
	binding := &v1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Annotations: Staged(state)},
		Target:     v1.ObjectReference{Kind: "Node", Name: nodeName},
	}
	if cacher := b.handle.APICacher(); cacher != nil {
		onFinish, err := cacher.BindPod(binding)
		if err != nil {
			return fwk.AsStatus(err)
		}
		if err := cacher.WaitOnFinish(ctx, onFinish); err != nil {
			return fwk.AsStatus(err)
		}
		return nil
	}
	klog.FromContext(ctx).V(3).Info("Attempting to bind pod to node", "pod", klog.KObj(p), "node", klog.KRef("", nodeName), "annotations", binding.Annotations)
	if err := b.handle.ClientSet().CoreV1().Pods(p.Namespace).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fwk.AsStatus(err)
	}
	return nil
}

func readStaging(state fwk.CycleState) *staging {
	if state == nil {
		return nil
	}
	d, err := state.Read(stagingKey)
	if err != nil {
		return nil
	}
	s, _ := d.(*staging)
	return s
}

// Binds reports whether a SextantBinder binds this pod, i.e. whether what Stage records
// reaches the pod.
func Binds(state fwk.CycleState) bool { return readStaging(state) != nil }

// Stage records that the pod's Binding must carry the annotation key=value. It reports
// false when no SextantBinder binds this pod (see Binds).
func Stage(state fwk.CycleState, key, value string) bool {
	s := readStaging(state)
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.annotations[key] = value
	return true
}

// Unstage drops a staged annotation (Unreserve). It is idempotent.
func Unstage(state fwk.CycleState, key string) {
	if s := readStaging(state); s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.annotations, key)
	}
}

// Staged returns a copy of the staged annotations, nil when there are none.
func Staged(state fwk.CycleState) map[string]string {
	s := readStaging(state)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.annotations) == 0 {
		return nil
	}
	return maps.Clone(s.annotations)
}
