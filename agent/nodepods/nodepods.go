// Package nodepods is the agent's one watch on the pods bound to its node, shared by the
// parts that act on them (the sidecar terminator, NUMA pinning), so each node costs the
// API server one pod watch whatever the agent does; and the Events the agent records
// on them.
package nodepods

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// UIDIndex indexes the informer's pods by UID: the runtime and the cgroups name pods by
// UID, not by namespace and name.
const UIDIndex = "uid"

// ContainerIndex indexes the informer's pods by the runtime IDs of their containers, as
// the kubelet reports them: the runtime's exit events name only the container.
const ContainerIndex = "container"

// NewInformer returns an informer of the pods bound to node. Register handlers and
// indexers before running it.
func NewInformer(kube kubernetes.Interface, node string) cache.SharedIndexInformer {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	inf := factory.Core().V1().Pods().Informer()
	// Managed fields are most of a pod object's size and no part's business.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok {
			pod.ManagedFields = nil
		}
		return obj, nil
	})
	_ = inf.AddIndexers(cache.Indexers{
		UIDIndex: func(obj any) ([]string, error) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return nil, nil
			}
			return []string{string(pod.UID)}, nil
		},
		ContainerIndex: func(obj any) ([]string, error) {
			pod, ok := obj.(*corev1.Pod)
			if !ok {
				return nil, nil
			}
			return containerIDs(pod), nil
		},
	})
	return inf
}

// containerIDs are the runtime's IDs of the pod's containers that the kubelet reported,
// each attempt's and the one before, without the runtime's scheme ("containerd://").
func containerIDs(pod *corev1.Pod) []string {
	var ids []string
	add := func(id string) {
		if _, bare, ok := strings.Cut(id, "://"); ok && bare != "" {
			ids = append(ids, bare)
		}
	}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses, pod.Status.EphemeralContainerStatuses} {
		for _, s := range list {
			add(s.ContainerID)
			if t := s.LastTerminationState.Terminated; t != nil {
				add(t.ContainerID)
			}
		}
	}
	return ids
}

// ByContainerID returns the pod whose container has the runtime ID id, if the kubelet
// has reported that container yet.
func ByContainerID(inf cache.SharedIndexInformer, id string) (*corev1.Pod, bool) {
	return byIndex(inf, ContainerIndex, id)
}

// ByUID returns the pod with uid from the informer's cache, if it holds one.
func ByUID(inf cache.SharedIndexInformer, uid string) (*corev1.Pod, bool) {
	return byIndex(inf, UIDIndex, uid)
}

// byIndex returns the first pod the informer's index holds under key.
func byIndex(inf cache.SharedIndexInformer, index, key string) (*corev1.Pod, bool) {
	objs, err := inf.GetIndexer().ByIndex(index, key)
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	pod, ok := objs[0].(*corev1.Pod)
	return pod, ok
}
