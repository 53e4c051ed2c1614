// Package virtualnode stops finished sidecars on virtual nodes (virtual-kubelet), where
// no sextant agent and no CRI are reachable. It swaps the sidecar in place: the
// sidecar's image becomes a tiny image that exits 0, and the pod annotation that holds
// its command (put there by the webhook, handed to the container through the downward
// API) becomes that image's exit command. Changing a container's image is the one
// in-place change the API allows; the node restarts the container, whatever the pod's
// restartPolicy, and the new container exits at once with 0.
//
// It runs in sextant-sidecars' virtual-node-controller command (or webhook with
// --virtual-nodes), behind a leader election: a replica that loses its lease stops it
// and runs it again once it wins the lease back. It watches only pods the webhook
// prepared (label sidecar.sextant.io/prepared=true).
package virtualnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarrules"
)

// How a virtual node is recognised: virtual-kubelet's own label and taint.
const (
	NodeTypeLabel   = "type"
	NodeTypeVirtual = "virtual-kubelet"
	ProviderTaint   = "virtual-kubelet.io/provider"
)

// IsVirtual reports whether the node is a virtual-kubelet node.
func IsVirtual(node *corev1.Node) bool {
	if node.Labels[NodeTypeLabel] == NodeTypeVirtual {
		return true
	}
	for _, t := range node.Spec.Taints {
		if t.Key == ProviderTaint {
			return true
		}
	}
	return false
}

// Config tunes the controller.
type Config struct {
	// ExitImage is the image a stopped sidecar is swapped to; ExitCommand its command,
	// written into the sidecar's command annotation.
	ExitImage   string
	ExitCommand []string
	// PodSelector narrows the pods looked at beyond the webhook's label; empty: none.
	PodSelector string
	Workers     int
	// Metrics, when set, count the swaps.
	Metrics *Metrics
}

// Controller does the swap. Run may be called again after it returned (a replica that
// lost its lease and won it back): each run starts from fresh informers and a fresh
// queue, since neither can be started again once stopped.
type Controller struct {
	cfg      Config
	kube     kubernetes.Interface
	log      logr.Logger
	selector string
	running  atomic.Bool

	// What one run works with, made by Run.
	pods  cache.SharedIndexInformer
	nodes corelisters.NodeLister
	queue workqueue.TypedRateLimitingInterface[string]
}

// New makes a controller; Run starts it.
func New(cfg Config, kube kubernetes.Interface, log logr.Logger) (*Controller, error) {
	if cfg.ExitImage == "" {
		return nil, errors.New("virtual-node controller: no exit image")
	}
	if len(cfg.ExitCommand) == 0 {
		cfg.ExitCommand = []string{"/exit0"}
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	selector := labels.SelectorFromSet(labels.Set{annotations.SidecarPrepared: "true"}).String()
	if cfg.PodSelector != "" {
		if _, err := labels.Parse(cfg.PodSelector); err != nil {
			return nil, fmt.Errorf("pod selector %q: %w", cfg.PodSelector, err)
		}
		selector += "," + cfg.PodSelector
	}
	return &Controller{cfg: cfg, kube: kube, log: log, selector: selector}, nil
}

// setup makes the informers and the queue of one run. shutdown waits for the
// informers' goroutines, once their stop channel is closed.
func (c *Controller) setup() (start func(<-chan struct{}), shutdown func(), synced []cache.InformerSynced) {
	podFactory := informers.NewSharedInformerFactoryWithOptions(c.kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = c.selector }))
	nodeFactory := informers.NewSharedInformerFactory(c.kube, 0)
	c.pods = podFactory.Core().V1().Pods().Informer()
	c.nodes = nodeFactory.Core().V1().Nodes().Lister()
	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "virtualnode"})
	nodeInformer := nodeFactory.Core().V1().Nodes().Informer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = c.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	// A node that becomes (or is found to be) virtual: look at its pods again.
	_, _ = nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.enqueueNode(obj) }, UpdateFunc: func(_, obj any) { c.enqueueNode(obj) },
	})
	start = func(stop <-chan struct{}) { podFactory.Start(stop); nodeFactory.Start(stop) }
	shutdown = func() { podFactory.Shutdown(); nodeFactory.Shutdown() }
	return start, shutdown, []cache.InformerSynced{c.pods.HasSynced, nodeInformer.HasSynced}
}

func (c *Controller) enqueueNode(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || !IsVirtual(node) {
		return
	}
	for _, o := range c.pods.GetStore().List() {
		if pod := o.(*corev1.Pod); pod.Spec.NodeName == node.Name {
			if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
				c.queue.Add(key)
			}
		}
	}
}

// Run works until ctx ends, and returns once everything it started has stopped. It
// may be called again after it returned, never while it runs.
func (c *Controller) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("virtual-node controller: already running")
	}
	defer c.running.Store(false)
	start, shutdown, synced := c.setup()
	// The informers end with this channel; wait for them, so that a next run never
	// overlaps with this one's handlers.
	stop := make(chan struct{})
	start(stop)
	defer func() { close(stop); shutdown() }()
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("virtual-node controller: caches did not sync")
	}
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.process(ctx, key); err != nil {
		if ctx.Err() == nil {
			c.log.Error(err, "virtual-node controller: will look at the pod again", "pod", key)
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) process(ctx context.Context, key string) error {
	obj, exists, err := c.pods.GetStore().GetByKey(key)
	if err != nil || !exists {
		return nil
	}
	pod := obj.(*corev1.Pod)
	if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	node, err := c.nodes.Get(pod.Spec.NodeName)
	if err != nil || !IsVirtual(node) {
		return nil // a real node's agent does it through the CRI
	}
	roles, ok := sidecarrules.PodRoles(pod)
	if !ok {
		return nil
	}
	d := sidecarrules.Decide(pod.Spec.RestartPolicy, roles, sidecarrules.StatusStates(pod))
	if len(d.Stop) == 0 {
		return nil
	}
	swapped, err := swap(pod, d.Stop, c.cfg.ExitImage, c.cfg.ExitCommand)
	if err != nil {
		return err
	}
	if len(swapped.skipped) > 0 {
		c.log.Info("not swapping sidecars whose command the webhook did not move into an annotation: the exit image lacks it",
			"pod", key, "containers", swapped.skipped)
	}
	if len(swapped.names) == 0 {
		return nil // swapped already (the node has yet to restart them), or none can be
	}
	updated, err := c.kube.CoreV1().Pods(pod.Namespace).Update(ctx, swapped.pod, metav1.UpdateOptions{FieldManager: "sextant-sidecar"})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // the newer pod comes through the informer and is looked at again
		}
		c.cfg.Metrics.count(resultFailed, len(swapped.names))
		return fmt.Errorf("swap sidecars %s of %s: %w", strings.Join(swapped.names, ","), key, err)
	}
	c.cfg.Metrics.count(resultSwapped, len(swapped.names))
	c.log.Info("swapped sidecars to the exit image", "pod", key, "node", pod.Spec.NodeName,
		"containers", swapped.names, "image", c.cfg.ExitImage, "why", d.Why)
	c.record(ctx, updated, swapped.names, d.Why)
	return nil
}

type swapResult struct {
	pod     *corev1.Pod
	names   []string
	skipped []string // sidecars that cannot be swapped safely
}

// swap returns a copy of pod with the named sidecars swapped to the exit image and
// the command annotations of those the wrapper runs set to the exit command; names lists
// the containers it changed, none if all were swapped before.
func swap(pod *corev1.Pod, containers []string, exitImage string, exitCommand []string) (swapResult, error) {
	out := pod.DeepCopy()
	cmd, err := json.Marshal(exitCommand)
	if err != nil {
		return swapResult{}, err
	}
	var names, skipped []string
	for _, name := range containers {
		c := container(out, name)
		if c == nil || c.Image == exitImage {
			continue
		}
		key := annotations.SidecarCommand(name)
		// Only the wrapper reads the annotation: the pod's author may have set it on a
		// sidecar the webhook did not wrap, which still runs its own command.
		wrapped := sidecarrules.IsWrapped(c)
		if !wrapped && len(c.Command) > 0 {
			// A command of the pod's own (the webhook could not move it into an
			// annotation) names a binary the exit image lacks: swapped, the container
			// would fail to start rather than exit 0. Left for the node's grace period.
			skipped = append(skipped, name)
			continue
		}
		// Wrapped: the exit command goes in through the annotation. No command at all:
		// the exit image's own entrypoint runs.
		c.Image = exitImage
		if wrapped {
			if out.Annotations == nil {
				// A wrapped sidecar whose annotation was removed since: the wrapper
				// would get an empty command.
				out.Annotations = map[string]string{}
			}
			out.Annotations[key] = string(cmd)
		}
		names = append(names, name)
	}
	return swapResult{pod: out, names: names, skipped: skipped}, nil
}

func container(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	return nil
}

func (c *Controller) record(ctx context.Context, pod *corev1.Pod, names []string, why string) {
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		// Named after what it records, which happens once: a retried create is a no-op.
		ObjectMeta: metav1.ObjectMeta{Name: eventName(pod.Name, names), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace,
			Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Reason: "SidecarSwapped",
		Message: fmt.Sprintf("Swapped sidecar container(s) %s to %s on virtual node %s (%s)",
			strings.Join(names, ", "), c.cfg.ExitImage, pod.Spec.NodeName, why),
		Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "sextant-sidecar-controller"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "sextant.io/sidecar-controller", ReportingInstance: "sextant-sidecar-controller",
	}
	if _, err := c.kube.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		c.log.Error(err, "could not record an event", "pod", pod.Namespace+"/"+pod.Name)
	}
}

func eventName(pod string, containers []string) string {
	name := pod + ".sidecar-swapped." + strings.Join(containers, ".")
	if len(name) > 253 {
		name = name[:253]
	}
	return strings.TrimRight(name, ".-")
}
