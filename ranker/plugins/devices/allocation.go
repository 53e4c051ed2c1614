package devices

import (
	"cmp"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// Kinds are the device kinds a pod can request, indexed as in Free and Want.
var Kinds = v1alpha1.RequestableDeviceKinds

// Request is how many devices of each kind a pod asks for; kinds it does not ask for are
// absent.
type Request map[v1alpha1.DeviceKind]int64

// Total is the number of devices asked for.
func (r Request) Total() int64 {
	var n int64
	for _, c := range r {
		n += c
	}
	return n
}

// Want is a Request in the form Filter and Score read it on every node: the requested
// kinds in the order of Kinds, each by its index there, so that no node's check hashes
// a kind's name (a device pod is checked on ~500 nodes, twice).
type Want []KindCount

// Total is how many devices w counts, of every kind.
func (w Want) Total() int64 {
	var n int64
	for _, kc := range w {
		n += kc.N
	}
	return n
}

// KindCount is N devices of Kinds[Kind].
type KindCount struct {
	Kind int
	N    int64
}

// Want returns r as a Want.
func (r Request) Want() Want {
	var w Want
	for i, k := range Kinds {
		if n := r[k]; n > 0 {
			w = append(w, KindCount{Kind: i, N: n})
		}
	}
	return w
}

// PodRequest returns the devices the pod asks for, aggregated like kube-scheduler does
// (init containers by maximum, sidecars added). A container that sets only a limit for
// a device resource asks for the limit, as the API server's defaulting would make it.
func PodRequest(pod *v1.Pod) Request {
	if !asksForDevices(pod) {
		return nil
	}
	pod = pod.DeepCopy()
	fill := func(cs []v1.Container) {
		for i := range cs {
			for name, q := range cs[i].Resources.Limits {
				if !strings.HasPrefix(string(name), v1alpha1.ResourcePrefix) {
					continue
				}
				if _, ok := cs[i].Resources.Requests[name]; !ok {
					if cs[i].Resources.Requests == nil {
						cs[i].Resources.Requests = v1.ResourceList{}
					}
					cs[i].Resources.Requests[name] = q
				}
			}
		}
	}
	fill(pod.Spec.Containers)
	fill(pod.Spec.InitContainers)
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out := Request{}
	for _, k := range Kinds {
		if q, ok := reqs[k.ResourceName()]; ok && q.Value() > 0 {
			out[k] = q.Value()
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func asksForDevices(pod *v1.Pod) bool {
	for _, cs := range [][]v1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			for _, l := range []v1.ResourceList{cs[i].Resources.Requests, cs[i].Resources.Limits} {
				for name := range l {
					if strings.HasPrefix(string(name), v1alpha1.ResourcePrefix) {
						return true
					}
				}
			}
		}
	}
	return false
}

// FreeDevices returns the node's healthy devices of the device kinds that no pod on the
// node holds and the node does not keep from pods, by kind, ordered by address. A pod
// holds the devices in its devices.sextant.io/allocated annotation or, lacking one,
// those reserved(pod) returns; and the kubelet's own record, published as a device's
// holder, counts too: a pod another scheduler placed holds its devices without an
// annotation. A malformed annotation is logged and ignored: it must not stop
// scheduling.
func FreeDevices(topo *v1alpha1.NodeTopology, pods []fwk.PodInfo, reserved func(*v1.Pod) (annotations.Allocation, bool)) *Free {
	return freeDevices(topo, pods, reserved, nil)
}

// freeDevices is FreeDevices on a node as sim (nil: none) left it: a device whose
// holder is a pod sim took off counts as free, since the kubelet's record outlives the
// pod only in the simulation, and the devices of the pods sim added count as taken.
func freeDevices(topo *v1alpha1.NodeTopology, pods []fwk.PodInfo, reserved func(*v1.Pod) (annotations.Allocation, bool), sim *simulation) *Free {
	taken := map[string]bool{}
	take := func(pod *v1.Pod) {
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			return
		}
		var alloc annotations.Allocation
		if value, ok := pod.Annotations[annotations.DevicesAllocated]; ok {
			a, err := annotations.ParseAllocation(value)
			if err != nil {
				klog.V(2).InfoS("Ignoring malformed device allocation", "pod", klog.KObj(pod), "err", err)
				return
			}
			alloc = a
		} else if reserved != nil {
			alloc, _ = reserved(pod)
		}
		for _, ids := range alloc {
			for _, id := range ids {
				taken[id] = true
			}
		}
	}
	for _, pi := range pods {
		take(pi.GetPod())
	}
	if sim != nil {
		for _, pod := range sim.added {
			take(pod)
		}
	}
	var byKind [len(Kinds)][]v1alpha1.PCIDevice
	for _, d := range topo.Status.PCIDevices {
		i := slices.Index(Kinds[:], d.Kind)
		if i < 0 || d.Health != v1alpha1.Healthy || taken[d.Address] || d.Holder != nil && !sim.releases(d.Holder) || d.Excluded != "" {
			continue
		}
		byKind[i] = append(byKind[i], d)
	}
	free := &Free{}
	for i, devs := range byKind {
		if len(devs) == 0 {
			continue
		}
		slices.SortFunc(devs, func(a, b v1alpha1.PCIDevice) int { return cmp.Compare(a.Address, b.Address) })
		free.addresses[i] = make([]string, len(devs))
		free.numa[i] = make([]int32, len(devs))
		for j, d := range devs {
			free.addresses[i][j] = d.Address
			free.numa[i][j] = -1
			if d.NUMANode != nil {
				free.numa[i][j] = *d.NUMANode
			}
		}
	}
	return free
}

// Free is a node's healthy devices that no pod holds, per kind (indexed as Kinds): their
// addresses in address order and, beside them, each one's NUMA node (-1 when unknown),
// which Score reads on every node without chasing a pointer per device. It is kept per
// node between cycles, so it holds no copy of the devices themselves: every pointer in
// it is one more for each garbage collection to follow
// (docs/design/0062-lean-topology-records.md).
type Free struct {
	addresses [len(Kinds)][]string
	numa      [len(Kinds)][]int32
}

// Shortfall returns the first requested kind the free devices cannot cover.
func Shortfall(free *Free, want Want) (v1alpha1.DeviceKind, bool) {
	for _, w := range want {
		if int64(len(free.numa[w.Kind])) < w.N {
			return Kinds[w.Kind], true
		}
	}
	return "", false
}

// BestNUMANode is the NUMA node holding the most of the requested devices (each kind
// counted up to its request), the lowest ID on a tie; ok is false when no free device
// of a requested kind has a known NUMA node.
func BestNUMANode(free *Free, want Want) (int32, bool) {
	count := map[int32]int64{}
	for _, w := range want {
		per := map[int32]int64{}
		for _, n := range free.numa[w.Kind] {
			if n >= 0 {
				per[n]++
			}
		}
		for n, c := range per {
			count[n] += min(c, w.N)
		}
	}
	best, bestCount, found := int32(0), int64(-1), false
	for n, c := range count {
		if c > bestCount || (c == bestCount && n < best) {
			best, bestCount, found = n, c, true
		}
	}
	return best, found
}

// FromPreferred counts how many of the requested devices can come from the preferred
// NUMA nodes.
func FromPreferred(free *Free, want Want, preferred []int32) int64 {
	var n int64
	for _, w := range want {
		var c int64
		for _, numa := range free.numa[w.Kind] {
			if numa >= 0 && slices.Contains(preferred, numa) {
				c++
			}
		}
		n += min(c, w.N)
	}
	return n
}

// Pick chooses the exact devices for req: first those on the preferred NUMA nodes, in
// the order preferred lists them, then from as few other NUMA nodes as possible, in
// address order within a NUMA node. Devices of unknown locality come last, unless
// pinned says preferred is the NUMA set NUMAAware pins the pod to: it chose the set
// counting such devices as fitting any set, so they come right after the set's own,
// before any device known to sit outside it, which would leave the pod NUMA-remote for
// certain. ok is false when a kind has too few free devices.
func Pick(free *Free, want Want, preferred []int32, pinned bool) (annotations.Allocation, bool) {
	out := annotations.Allocation{}
	for _, w := range want {
		need, addresses, numa := int(w.N), free.addresses[w.Kind], free.numa[w.Kind]
		if len(addresses) < need {
			return nil, false
		}
		var chosen []string
		groups := map[int32][]string{}
		var unknown []string
		for j, addr := range addresses { // already in address order
			switch n := numa[j]; {
			case n >= 0 && slices.Contains(preferred, n):
				// Taken below, in the order of preferred.
			case n >= 0:
				groups[n] = append(groups[n], addr)
			default:
				unknown = append(unknown, addr)
			}
		}
		for _, n := range preferred {
			for j, addr := range addresses {
				if len(chosen) < need && numa[j] == n {
					chosen = append(chosen, addr)
				}
			}
		}
		takeUnknown := func() {
			for _, id := range unknown {
				if len(chosen) < need {
					chosen = append(chosen, id)
				}
			}
		}
		if pinned {
			takeUnknown()
		}
		order := make([]int32, 0, len(groups))
		for n := range groups {
			order = append(order, n)
		}
		slices.SortFunc(order, func(a, b int32) int {
			if c := cmp.Compare(len(groups[b]), len(groups[a])); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for len(chosen) < need && len(order) > 0 {
			// The smallest NUMA node that covers the rest alone (keeping larger free
			// groups whole for later pods), else the largest one, which needs the
			// fewest NUMA nodes in total.
			rest, at := need-len(chosen), 0
			fit := -1
			for i, n := range order {
				if len(groups[n]) >= rest && (fit < 0 || len(groups[n]) < len(groups[order[fit]])) {
					fit = i
				}
			}
			if fit >= 0 {
				at = fit
			}
			ids := groups[order[at]]
			chosen = append(chosen, ids[:min(rest, len(ids))]...)
			order = slices.Delete(order, at, at+1)
		}
		if !pinned {
			takeUnknown()
		}
		slices.Sort(chosen)
		out[Kinds[w.Kind].ResourceName()] = chosen
	}
	return out, true
}
