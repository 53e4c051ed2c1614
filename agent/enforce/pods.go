package enforce

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/bandwidthclaim"
)

// podOf returns what the plan needs of a pod, false for a pod that has finished (its
// guarantees end with it). A pod whose bandwidth annotations do not parse (the webhook
// was down) gets neither a guarantee nor a limit; err says why.
//
// A pod's addresses are the kubelet's record of them (status.podIPs), never what its
// author wrote: a pod claiming another's address would take that pod's class. So the
// addresses a CNI such as Multus records in the pod's annotations are not used.
//
// A pod that has not started notStarted.ReleaseAfter after it was bound holds no
// guarantee (Released), and one that started only after that is ordered by when it
// started: the ranker's rule (bandwidthclaim), so both admit the same pods.
func podOf(pod *corev1.Pod, cgroupOf func(*corev1.Pod) PodCgroup, notStarted bandwidthclaim.Deadlines, now time.Time) (Pod, error, bool) {
	if bandwidthclaim.Finished(pod) {
		return Pod{}, nil, false
	}
	bound, started := bandwidthclaim.Bound(pod), bandwidthclaim.Started(pod)
	stage, _ := notStarted.StageAt(bound, started, now)
	p := Pod{UID: pod.UID, Name: pod.Namespace + "/" + pod.Name, Bound: notStarted.Order(bound, started),
		Released: stage == bandwidthclaim.Released}
	req, err := annotations.ParseBandwidth(pod.Annotations)
	if err != nil {
		req = annotations.BandwidthRequest{Network: annotations.PodNetwork}
	}
	p.Request = req
	if pod.Spec.HostNetwork {
		// Its addresses are the node's: only its cgroup tells its sockets apart.
		if cgroupOf != nil && (req.HasRequired() || req.HasLimit()) {
			p.Cgroup = cgroupOf(pod)
		}
		return p, err, true
	}
	seen := map[netip.Addr]bool{}
	add := func(s string) {
		if a, perr := netip.ParseAddr(s); perr == nil && !seen[a.Unmap()] {
			seen[a.Unmap()] = true
			p.Addresses = append(p.Addresses, a.Unmap())
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	if len(pod.Status.PodIPs) == 0 {
		add(pod.Status.PodIP)
	}
	return p, err, true
}
