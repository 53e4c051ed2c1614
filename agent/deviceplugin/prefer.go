package deviceplugin

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
)

// How a preferred allocation was found: the label of
// sextant_device_preferred_allocations_total.
const (
	// OutcomeAnnotation: exactly one pod's devices.sextant.io/allocated fits the request.
	OutcomeAnnotation = "annotation"
	// OutcomeKubelet: several fit, and the kubelet's PodResources named the one it is
	// admitting.
	OutcomeKubelet = "kubelet"
	// OutcomeTie: several fit and nothing told them apart; the oldest pod's IDs.
	OutcomeTie = "tie"
	// OutcomeFallback: no pod's annotation fits; the kubelet's own kind of choice.
	OutcomeFallback = "fallback"
)

// PreferenceRequest is what the kubelet asks for one container in
// GetPreferredAllocation. It does not say which pod the container belongs to.
type PreferenceRequest struct {
	Resource    corev1.ResourceName
	Available   []string
	MustInclude []string
	Size        int
	// InUse is not the kubelet's: the devices the agent's audit last found held by a
	// pod. A kubelet that restarted can offer some of them as available although their
	// pods still run on them.
	InUse []string
}

// Preference is the answer to a PreferenceRequest and how it was found.
type Preference struct {
	IDs     []string
	Outcome string
	// Pod is the pod whose annotation the IDs come from; nil on a fallback.
	Pod *corev1.Pod
	// Candidates are the pods whose annotation fits, in the order ties are broken.
	Candidates []*corev1.Pod
}

// Prefer decides which devices to offer for one container, from the pods bound to this
// node. The kubelet admits one pod at a time and allocates devices for its containers
// in order, so the container being asked about belongs to a pod that
//   - is bound to this node, not deleted, not finished;
//   - carries devices.sextant.io/allocated listing devices of this resource, among them
//     every ID in MustInclude (devices an init container of the same pod already has);
//   - has a container that requests exactly Size of the resource and has not started
//     (no running or terminated state, now or before);
//   - still finds Size of its listed devices in Available (plus MustInclude).
//
// When admitting is given and the kubelet answers, the candidates are narrowed to the
// pods it is admitting: one left, its devices; none left, the kubelet admits a pod that
// is no candidate (a plain pod, or one whose devices are gone), which gets the
// fallback; several, the oldest of them. Without an answer: one candidate, its devices;
// several, the oldest (creation time, then namespace/name), since the kubelet admits a
// batch of new pods oldest first. The devices of a candidate are MustInclude first, then
// its other listed devices in the annotation's order.
//
// No candidate: the first Size available devices, MustInclude first, then those on the
// NUMA nodes of MustInclude, else on one NUMA node that has them all, in address order;
// numa gives each device's NUMA node (-1 unknown). Every fallback is kept off the
// devices in use (InUse), then off those listed by pending pods (live, with a
// never-started container asking for the resource, whatever its count), where enough
// others are available: so that no device goes to two running pods, and pending pods
// still find theirs when the kubelet admits them.
func Prefer(pods []*corev1.Pod, req PreferenceRequest, numa map[string]int64, admitting AdmittingFunc) Preference {
	type fit struct {
		pod *corev1.Pod
		ids []string
	}
	var fits []fit
	for _, pod := range pods {
		if ids, ok := fitting(pod, req); ok {
			fits = append(fits, fit{pod, ids})
		}
	}
	if len(fits) == 0 {
		return Preference{IDs: fallbackAround(pods, req, numa), Outcome: OutcomeFallback}
	}
	slices.SortFunc(fits, func(a, b fit) int { return olderFirst(a.pod, b.pod) })
	cands := make([]*corev1.Pod, len(fits))
	for i, f := range fits {
		cands[i] = f.pod
	}
	outcome := OutcomeAnnotation
	if len(fits) > 1 {
		outcome = OutcomeTie
	}
	if admitting != nil {
		if admitted, ok := admitting(cands); ok {
			fits = slices.DeleteFunc(fits, func(f fit) bool { return !slices.Contains(admitted, f.pod) })
			if len(fits) == 0 {
				return Preference{IDs: fallbackAround(pods, req, numa), Outcome: OutcomeFallback, Candidates: cands}
			}
			if len(fits) == 1 && len(cands) > 1 {
				outcome = OutcomeKubelet
			}
		}
	}
	return Preference{IDs: fits[0].ids, Outcome: outcome, Pod: fits[0].pod, Candidates: cands}
}

// AdmittingFunc narrows candidate pods to those the kubelet is admitting; ok is false
// when the kubelet could not be asked, and then nothing is narrowed.
type AdmittingFunc func(cands []*corev1.Pod) (admitted []*corev1.Pod, ok bool)

// fallbackAround is the fallback kept off the devices in use, and then off those the
// ranker chose for the pods still waiting for theirs (pending), while enough others are
// available: a device in use is shared by two containers that each expect it alone,
// and whatever number of devices a pending pod asks for, one taken from its choice now
// fails it later. MustInclude is never kept off: the container's pod holds those
// devices already.
//
// A request no pending pod can have made is the kubelet admitting a running container
// again after its restart, having forgotten its devices: they are among those in use,
// so then those are offered first.
func fallbackAround(pods []*corev1.Pod, req PreferenceRequest, numa map[string]int64) []string {
	reserved := map[string]bool{}
	waiting := false
	for _, pod := range pods {
		if !pending(pod, req.Resource) {
			continue
		}
		waiting = true
		for _, id := range listing(pod, req.Resource) {
			reserved[id] = true
		}
	}
	without := func(r PreferenceRequest, drop func(string) bool) PreferenceRequest {
		r.Available = slices.DeleteFunc(slices.Clone(r.Available), func(id string) bool {
			return drop(id) && !slices.Contains(req.MustInclude, id)
		})
		return r
	}
	inUse := func(id string) bool { return slices.Contains(req.InUse, id) }
	if !waiting {
		if ids := fallback(without(req, func(id string) bool { return !inUse(id) }), numa); len(ids) == req.Size {
			return ids
		}
		return fallback(req, numa)
	}
	free := without(req, inUse)
	narrowed := without(free, func(id string) bool { return reserved[id] })
	for _, r := range []PreferenceRequest{narrowed, free} {
		if ids := fallback(r, numa); len(ids) == req.Size {
			return ids
		}
	}
	return fallback(req, numa)
}

// pending reports whether pod is live and has a container asking for resource that
// has never started: one the kubelet has yet to give devices of resource.
func pending(pod *corev1.Pod, resource corev1.ResourceName) bool {
	return live(pod) && waitingContainer(pod, resource, func(n int64) bool { return n > 0 })
}

// listing is the devices of resource the ranker chose for pod (its
// devices.sextant.io/allocated); nil when it chose none, or the annotation is missing
// or malformed.
func listing(pod *corev1.Pod, resource corev1.ResourceName) []string {
	value, ok := pod.Annotations[annotations.DevicesAllocated]
	if !ok {
		return nil
	}
	alloc, err := annotations.ParseAllocation(value)
	if err != nil {
		return nil
	}
	return alloc[resource]
}

func olderFirst(a, b *corev1.Pod) int {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// fitting returns the devices pod would get for req, if pod can be the one asking.
func fitting(pod *corev1.Pod, req PreferenceRequest) ([]string, bool) {
	if !live(pod) {
		return nil, false
	}
	listed := listing(pod, req.Resource)
	if len(listed) == 0 || !waitingContainerAsks(pod, req.Resource, req.Size) {
		return nil, false
	}
	for _, id := range req.MustInclude {
		if !slices.Contains(listed, id) {
			return nil, false
		}
	}
	ids := slices.Clone(req.MustInclude)
	for _, id := range listed {
		if len(ids) == req.Size {
			break
		}
		if slices.Contains(req.Available, id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, len(ids) == req.Size
}

// waitingContainerAsks reports whether a container of pod that has never started
// requests exactly size of resource. Containers that ran already have their devices:
// the kubelet asks only for containers it has not allocated to.
func waitingContainerAsks(pod *corev1.Pod, resource corev1.ResourceName, size int) bool {
	return waitingContainer(pod, resource, func(n int64) bool { return n == int64(size) })
}

// waitingContainer reports whether a container of pod that has never started (no
// running or terminated state, now or before) requests an amount of resource that asks
// accepts.
func waitingContainer(pod *corev1.Pod, resource corev1.ResourceName, asks func(int64) bool) bool {
	started := map[string]bool{}
	for _, sts := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, st := range sts {
			started[st.Name] = st.State.Running != nil || st.State.Terminated != nil || st.LastTerminationState.Terminated != nil
		}
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if !started[c.Name] && asks(ContainerRequest(c, resource)) {
				return true
			}
		}
	}
	return false
}

// ContainerRequest is how many of resource c asks for: its request, or its limit where
// it sets only that (the API server defaults an extended resource's request so).
func ContainerRequest(c corev1.Container, resource corev1.ResourceName) int64 {
	if q, ok := c.Resources.Requests[resource]; ok {
		return q.Value()
	}
	if q, ok := c.Resources.Limits[resource]; ok {
		return q.Value()
	}
	return 0
}

// fallback chooses like the kubelet would without a preference, but keeps a container
// on as few NUMA nodes as it can: MustInclude, then devices on its NUMA nodes, or else
// on the lowest NUMA node holding all that is needed, then the rest in address order.
func fallback(req PreferenceRequest, numa map[string]int64) []string {
	out := slices.Clone(req.MustInclude)
	var rest []string
	for _, id := range req.Available {
		if !slices.Contains(out, id) {
			rest = append(rest, id)
		}
	}
	slices.SortFunc(rest, comparePCIAddress)
	rest = slices.Compact(rest)
	need := req.Size - len(out)
	if need <= 0 {
		return out[:max(req.Size, 0)]
	}
	nodeOf := func(id string) int64 {
		if n, ok := numa[id]; ok {
			return n
		}
		return -1
	}
	preferred := map[int64]bool{}
	for _, id := range out {
		if n := nodeOf(id); n >= 0 {
			preferred[n] = true
		}
	}
	if len(preferred) == 0 {
		count := map[int64]int{}
		for _, id := range rest {
			if n := nodeOf(id); n >= 0 {
				count[n]++
			}
		}
		best := int64(-1)
		for n, c := range count {
			if c >= need && (best < 0 || n < best) {
				best = n
			}
		}
		if best >= 0 {
			preferred[best] = true
		}
	}
	take := func(want bool) {
		for _, id := range rest {
			if len(out) == req.Size {
				return
			}
			if preferred[nodeOf(id)] == want && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	take(true)
	take(false)
	return out
}

// comparePCIAddress orders addresses by domain width first, so the 32-bit domains of
// VMD sort after the 16-bit ones, as the topology lists them.
func comparePCIAddress(a, b string) int {
	return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
}
