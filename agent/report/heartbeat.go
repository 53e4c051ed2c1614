// Package report publishes the agent's heartbeat objects, NodeBandwidth and
// NodeTopology: cluster-scoped, named after the node, owned by its Node object, written
// through the status subresource, and only when something worth telling changed or the
// heartbeat interval ran out.
//
// A write starts from the object the last write returned, so a steady heartbeat is one
// status update, with no GET before it. A conflict (someone else changed the object)
// or NotFound (it was deleted, e.g. with its Node) drops that copy, and the retry reads
// the object afresh or creates it. Retries back off exponentially with jitter, so the
// agents of a whole cluster that lost the API server together do not come back in step.
package report

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"sextant.io/sextant/api/v1alpha1"
)

// writer writes the status of one node's heartbeat object of one kind.
type writer struct {
	kind     string // NodeBandwidth or NodeTopology
	resource dynamic.NamespaceableResourceInterface
	nodes    kubernetes.Interface
	nodeName string
	backoff  wait.Backoff
	metrics  *Metrics
	// last is the object as the last write (or read) returned it, nil when unknown:
	// the next write updates it without reading it first.
	last *unstructured.Unstructured
}

func newWriter(kind, plural string, dyn dynamic.Interface, kube kubernetes.Interface, nodeName string, m *Metrics) *writer {
	return &writer{
		kind:     kind,
		resource: dyn.Resource(v1alpha1.GroupVersion.WithResource(plural)),
		nodes:    kube,
		nodeName: nodeName,
		// Long enough to ride out an API server restart, short enough that the next
		// sample (which retries anyway) is not held up for long. The jitter spreads the
		// retries of many agents: each wait is up to half as long again.
		backoff: wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: 6, Cap: 5 * time.Second},
		metrics: m,
	}
}

// get returns the node's object, or nil if there is none.
func (w *writer) get(ctx context.Context) (*unstructured.Unstructured, error) {
	obj, err := w.resource.Get(ctx, w.nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", w.kind, w.nodeName, err)
	}
	return obj, nil
}

// write puts status on the node's object, creating the object (owned by the Node) if it
// does not exist. It retries with backoff on conflicts and transient API errors.
func (w *writer) write(ctx context.Context, status any) error {
	statusMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("convert %s status: %w", w.kind, err)
	}
	var lastErr error
	err = wait.ExponentialBackoffWithContext(ctx, w.backoff, func(ctx context.Context) (bool, error) {
		lastErr = w.writeOnce(ctx, statusMap)
		if lastErr == nil {
			return true, nil
		}
		if retriable(lastErr) {
			return false, nil
		}
		return false, lastErr
	})
	if err != nil {
		w.metrics.failures.WithLabelValues(w.kind).Inc()
		if lastErr != nil && !errors.Is(err, lastErr) {
			// Backoff ran out: the API's own error says more than "timed out waiting".
			err = fmt.Errorf("%w (retries exhausted)", lastErr)
		}
		return fmt.Errorf("write %s %s: %w", w.kind, w.nodeName, err)
	}
	w.metrics.writes.WithLabelValues(w.kind).Inc()
	return nil
}

func (w *writer) writeOnce(ctx context.Context, status map[string]any) error {
	obj := w.last
	if obj == nil {
		var err error
		if obj, err = w.get(ctx); err != nil {
			return err
		}
		if obj == nil {
			if obj, err = w.create(ctx); err != nil {
				return err
			}
		}
	}
	obj = obj.DeepCopy()
	obj.Object["status"] = status
	updated, err := w.resource.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "sextant-agent"})
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			// Our copy is out of date or the object is gone: read or create it again.
			w.last = nil
		}
		return err
	}
	w.last = updated
	return nil
}

func (w *writer) create(ctx context.Context) (*unstructured.Unstructured, error) {
	node, err := w.nodes.CoreV1().Nodes().Get(ctx, w.nodeName, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s to own its %s: %w", w.nodeName, w.kind, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(schema.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: w.kind})
	obj.SetName(w.nodeName)
	obj.SetLabels(map[string]string{"app.kubernetes.io/managed-by": "sextant-agent"})
	obj.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
	}})
	created, err := w.resource.Create(ctx, obj, metav1.CreateOptions{FieldManager: "sextant-agent"})
	if apierrors.IsAlreadyExists(err) {
		return w.get(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s %s: %w", w.kind, w.nodeName, err)
	}
	return created, nil
}

// retriable tells errors worth another try (a lost race, an overloaded or restarting
// API server) from those that will not go away by themselves (forbidden, invalid).
func retriable(err error) bool {
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err), apierrors.IsNotFound(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err),
		apierrors.IsServiceUnavailable(err), apierrors.IsInternalError(err), apierrors.IsUnexpectedServerError(err):
		return true
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return false
	}
	// Connection errors carry no API status: the server may be coming back.
	var status apierrors.APIStatus
	return !errors.As(err, &status)
}
