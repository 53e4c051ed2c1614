package deviceplugin

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
)

// Mismatch is an allocation the ranker's decision does not allow: the kubelet is about
// to give a container of a pod devices its devices.sextant.io/allocated does not list.
type Mismatch struct {
	Resource corev1.ResourceName
	// IDs are the devices the kubelet allocates.
	IDs []string
	// Pods are the pods the container may belong to, oldest first; each lists other
	// devices of Resource.
	Pods []*corev1.Pod
}

func (m *Mismatch) Error() string {
	var pods []string
	for _, p := range m.Pods {
		pods = append(pods, fmt.Sprintf("%s/%s (%s)", p.Namespace, p.Name, strings.Join(listing(p, m.Resource), ",")))
	}
	return fmt.Sprintf("the kubelet allocates %s %s, but the ranker chose other devices in %s of pod %s; "+
		"refused, so that the pod fails admission instead of running on devices it was not placed for",
		m.Resource, strings.Join(m.IDs, ","), annotations.DevicesAllocated, strings.Join(pods, " or "))
}

// CheckAllocation judges the devices the kubelet allocates to one container (Allocate,
// which does not name the pod either) against the ranker's decision. The container
// belongs to a pod bound to this node, not deleted or finished, with a container that
// never started and requests exactly len(ids) of resource. admitting, when the kubelet
// answers, narrows those pods to the one it is admitting.
//
// The allocation is allowed when one of those pods carries no decision for resource (a
// pod of another scheduler, or one that asks for no device the ranker chose) or lists
// every one of ids; otherwise it is a Mismatch. judged is false when no pod of this
// node can be the one, or the kubelet admits none of them: the caller's pod list may
// be behind the kubelet's, and nothing is held against the allocation. identified is
// true when the kubelet's answer shows the pod being admitted among those judged, so
// that a Mismatch is about that pod and not a guess among the pods it may be.
func CheckAllocation(pods []*corev1.Pod, resource corev1.ResourceName, ids []string, admitting AdmittingFunc) (mismatch *Mismatch, judged, identified bool) {
	var set []*corev1.Pod
	for _, p := range pods {
		if live(p) && waitingContainerAsks(p, resource, len(ids)) {
			set = append(set, p)
		}
	}
	if len(set) == 0 {
		return nil, false, false
	}
	if admitting != nil {
		if admitted, ok := admitting(set); ok {
			if len(admitted) == 0 {
				return nil, false, false
			}
			set = admitted
			// PodResources lists every app container, so a pod kept with one of resource
			// was kept for it waiting for devices, which only the pod being admitted
			// does; a pod kept because its device containers are plain init containers
			// (not listed) may be one admitted before.
			identified = slices.ContainsFunc(set, func(p *corev1.Pod) bool { return appContainerAsks(p, resource) })
		}
	}
	slices.SortFunc(set, olderFirst)
	for _, p := range set {
		listed := listing(p, resource)
		if len(listed) == 0 || containsAll(listed, ids) {
			return nil, true, identified
		}
	}
	return &Mismatch{Resource: resource, IDs: slices.Clone(ids), Pods: set}, true, identified
}

// appContainerAsks reports whether an app container of pod (not an init container)
// asks for resource.
func appContainerAsks(pod *corev1.Pod, resource corev1.ResourceName) bool {
	return slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return ContainerRequest(c, resource) > 0 })
}

// live reports whether pod is bound, not being deleted and not finished: one the
// kubelet may still admit.
func live(pod *corev1.Pod) bool {
	return pod.Spec.NodeName != "" && pod.DeletionTimestamp == nil &&
		pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

func containsAll(set, ids []string) bool {
	for _, id := range ids {
		if !slices.Contains(set, id) {
			return false
		}
	}
	return true
}
