// Package requeue brings back the pods a sextant plugin rejected when a heartbeat that
// may admit them arrives.
//
// kube-scheduler does not watch NodeBandwidth or NodeTopology: the ranker's heartbeat
// store is the one watch of each kind. A plugin records in PostFilter the pods it
// rejected (Waiting.PostFilter), the store tells it of each change once its record holds
// the change, and the plugin activates the waiting pods that change may admit
// (Waiting.Activate, through kube-scheduler's PodActivator). Because the store has the
// report before any pod is activated for it, the retry always sees it
// (docs/design/0060-one-watch-per-heartbeat-kind.md).
package requeue

import (
	"context"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// ActivateFunc moves pods to kube-scheduler's active queue (fwk.PodActivator.Activate);
// a pod in a scheduling attempt is moved when the attempt ends.
type ActivateFunc func(logger klog.Logger, pods map[string]*v1.Pod)

// Waiting is the pods one plugin rejected that wait for a heartbeat.
type Waiting struct {
	plugin   string
	activate ActivateFunc
	// podStore, once WatchPods ran, is the scheduler's pod informer's store: PostFilter
	// drops a pod it no longer holds.
	podStore cache.Store

	mu   sync.Mutex
	pods map[types.UID]*v1.Pod
}

// New returns the waiting set of plugin, which activates pods through activate.
func New(plugin string, activate ActivateFunc) *Waiting {
	return &Waiting{plugin: plugin, activate: activate, pods: map[types.UID]*v1.Pod{}}
}

// Len is the number of waiting pods.
func (w *Waiting) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pods)
}

// PostFilter records pod as waiting when the plugin rejected it on one of nodes (as
// statuses say), and activates it at once when changed reports that the heartbeats
// changed since the attempt read them in a way that may admit it: such a change found
// the pod not yet waiting. It never admits or rejects anything itself: it returns
// Unschedulable with no reason, so kube-scheduler goes on to its other PostFilter
// plugins (preemption) as if this one were not there.
func (w *Waiting) PostFilter(ctx context.Context, pod *v1.Pod, statuses fwk.NodeToStatusReader, nodes []fwk.NodeInfo, changed func() bool) (*fwk.PostFilterResult, *fwk.Status) {
	if !RejectedBy(w.plugin, statuses, nodes) {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	w.mu.Lock()
	w.pods[pod.UID] = pod
	w.mu.Unlock()
	// After the add: a deletion handled from now on finds the pod here, and one handled
	// before (while the attempt ran) has left the informer's store already, which
	// is updated before its handlers are called.
	if w.podStore != nil && !inStore(w.podStore, pod) {
		w.Forget(pod.UID)
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	// After the add: a change the store makes from now on finds the pod waiting.
	if changed != nil && changed() {
		w.Activate(klog.FromContext(ctx), func(p *v1.Pod) bool { return p.UID == pod.UID })
	}
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

// RejectedBy reports whether plugin rejected the pod on at least one of nodes.
func RejectedBy(plugin string, statuses fwk.NodeToStatusReader, nodes []fwk.NodeInfo) bool {
	if statuses == nil {
		return false
	}
	for _, ni := range nodes {
		node := ni.Node()
		if node == nil {
			continue
		}
		if s := statuses.Get(node.Name); s != nil && s.IsRejected() && s.Plugin() == plugin {
			return true
		}
	}
	return false
}

// Activate activates the waiting pods for which admits is true and forgets them (if an
// attempt fails again, PostFilter records the pod again). admits runs under the set's
// lock: keep it short. It returns how many pods it activated.
func (w *Waiting) Activate(logger klog.Logger, admits func(*v1.Pod) bool) int {
	w.mu.Lock()
	if len(w.pods) == 0 {
		w.mu.Unlock()
		return 0
	}
	var batch map[string]*v1.Pod
	for uid, pod := range w.pods {
		if admits(pod) {
			if batch == nil {
				batch = map[string]*v1.Pod{}
			}
			batch[string(uid)] = pod
			delete(w.pods, uid)
		}
	}
	w.mu.Unlock()
	if len(batch) > 0 {
		logger.V(5).Info("Activating pods a heartbeat may admit", "plugin", w.plugin, "pods", len(batch))
		w.activate(logger, batch)
	}
	return len(batch)
}

// Forget drops a pod (bound, deleted).
func (w *Waiting) Forget(uid types.UID) {
	w.mu.Lock()
	delete(w.pods, uid)
	w.mu.Unlock()
}

// WatchPods registers PodHandler on the scheduler's pod informer, and has PostFilter
// check that a pod it records is still in the informer's store: a pod deleted while
// its attempt ran would otherwise wait for good, as its deletion came first.
func (w *Waiting) WatchPods(pods cache.SharedIndexInformer) error {
	w.podStore = pods.GetStore()
	_, err := pods.AddEventHandler(w.PodHandler())
	return err
}

// inStore reports whether store holds pod (the same UID under its name).
func inStore(store cache.Store, pod *v1.Pod) bool {
	obj, ok, err := store.GetByKey(cache.MetaObjectToName(pod).String())
	if err != nil || !ok {
		return false
	}
	cur, isPod := obj.(*v1.Pod)
	return isPod && cur.UID == pod.UID
}

// PodHandler forgets pods that were bound or deleted; register it on the scheduler's
// pod informer (WatchPods).
func (w *Waiting) PodHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			if pod, ok := obj.(*v1.Pod); ok && pod.Spec.NodeName != "" {
				w.Forget(pod.UID)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*v1.Pod); ok {
				w.Forget(pod.UID)
			}
		},
	}
}

// ActivateAll activates every waiting pod: the heartbeat store's listener for a plugin
// that any NodeTopology change may help (NUMAAware, DeviceAware).
func (w *Waiting) ActivateAll(string) {
	w.Activate(klog.Background(), func(*v1.Pod) bool { return true })
}

// PostFilterOnVersion is PostFilter for such a plugin: the heartbeats changed during the
// attempt when version differs from seen, the version its PreFilter read (known false:
// the attempt did not read one, so any time may have passed), or when also, if set,
// says so of the nodes.
func (w *Waiting) PostFilterOnVersion(ctx context.Context, pod *v1.Pod, statuses fwk.NodeToStatusReader,
	snapshot func() ([]fwk.NodeInfo, error), seen uint64, known bool, version func() uint64,
	also func([]fwk.NodeInfo) bool) (*fwk.PostFilterResult, *fwk.Status) {
	if snapshot == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	nodes, err := snapshot()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	return w.PostFilter(ctx, pod, statuses, nodes, func() bool {
		return !known || version() != seen || also != nil && also(nodes)
	})
}
