// Package bandwidthquota is the rule of a namespace's BandwidthQuotas, which the
// admission webhook and the ranker both apply: per network and direction, the
// bandwidth.sextant.io/*-required rates of the namespace's pods that have not finished
// add up to no more than each quota's hard cap.
package bandwidthquota

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// Rates are required rates per direction, in bits/s.
type Rates struct{ Ingress, Egress int64 }

// Usage is what a namespace's pods require, per network.
type Usage map[string]Rates

// Add counts a pod's required rates on network.
func (u Usage) Add(network string, r Rates) {
	cur := u[network]
	u[network] = Rates{Ingress: cur.Ingress + r.Ingress, Egress: cur.Egress + r.Egress}
}

// Claim is what a pod's annotations require: its network and required rates; ok is
// false for a pod that requires nothing or whose annotations do not parse (the webhook
// refuses those, and the ranker does not place them).
func Claim(podAnnotations map[string]string) (network string, r Rates, ok bool) {
	if !annotations.HasBandwidth(podAnnotations) {
		return "", Rates{}, false
	}
	req, err := annotations.ParseBandwidth(podAnnotations)
	if err != nil || !req.HasRequired() {
		return "", Rates{}, false
	}
	network = req.Network
	if network == "" {
		network = annotations.PodNetwork
	}
	if req.Ingress.HasRequired {
		r.Ingress = req.Ingress.Required
	}
	if req.Egress.HasRequired {
		r.Egress = req.Egress.Required
	}
	return network, r, true
}

// Counts reports whether the pod still holds its claim: it has not finished.
func Counts(pod *corev1.Pod) bool {
	return pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed
}

// Cap is one quota's hard cap on one network: 0 with Has false where a direction is not
// capped.
type Cap struct {
	Ingress, Egress       int64
	HasIngress, HasEgress bool
}

// Hard returns the quota's cap on network, ok false where it caps nothing there. A
// rate that does not parse (the CRD's pattern lets nothing through that this refuses,
// short of a value above 1P) caps at 0: the operator meant a cap, and a typo must not
// lift it.
func Hard(q *v1alpha1.BandwidthQuota, network string) (c Cap, ok bool) {
	i := slices.IndexFunc(q.Spec.Hard, func(h v1alpha1.NetworkQuota) bool { return h.Network == network })
	if i < 0 {
		return Cap{}, false
	}
	h := q.Spec.Hard[i]
	if h.Ingress != "" {
		c.Ingress, _ = annotations.ParseRate(h.Ingress)
		c.HasIngress = true
	}
	if h.Egress != "" {
		c.Egress, _ = annotations.ParseRate(h.Egress)
		c.HasEgress = true
	}
	return c, c.HasIngress || c.HasEgress
}

// ExceededError says which quota a pod would take past its cap, and by how much.
type ExceededError struct {
	Namespace, Quota, Network, Direction string
	// Used is what the namespace's other pods require, Pod what this one does.
	Used, Pod, Hard int64
}

func (e *ExceededError) Error() string {
	return fmt.Sprintf("exceeded BandwidthQuota %q in namespace %q: network %q %s-required would total %s (%s used + %s this pod), over its hard cap of %s",
		e.Quota, e.Namespace, e.Network, e.Direction,
		annotations.FormatRate(e.Used+e.Pod), annotations.FormatRate(e.Used), annotations.FormatRate(e.Pod), annotations.FormatRate(e.Hard))
}

// Check returns an *ExceededError for the first quota (by name) the pod's claim r on
// network takes past its cap beside used, what the namespace's other pods require;
// nil when all hold.
func Check(quotas []*v1alpha1.BandwidthQuota, used Usage, network string, r Rates) error {
	sorted := slices.Clone(quotas)
	slices.SortFunc(sorted, func(a, b *v1alpha1.BandwidthQuota) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	u := used[network]
	for _, q := range sorted {
		c, ok := Hard(q, network)
		if !ok {
			continue
		}
		if c.HasIngress && r.Ingress > 0 && u.Ingress+r.Ingress > c.Ingress {
			return &ExceededError{Namespace: q.Namespace, Quota: q.Name, Network: network, Direction: "ingress", Used: u.Ingress, Pod: r.Ingress, Hard: c.Ingress}
		}
		if c.HasEgress && r.Egress > 0 && u.Egress+r.Egress > c.Egress {
			return &ExceededError{Namespace: q.Namespace, Quota: q.Name, Network: network, Direction: "egress", Used: u.Egress, Pod: r.Egress, Hard: c.Egress}
		}
	}
	return nil
}

// Status is the quota's status.used for usage: one entry per network it caps.
func Status(q *v1alpha1.BandwidthQuota, usage Usage) []v1alpha1.NetworkQuota {
	var out []v1alpha1.NetworkQuota
	for _, h := range q.Spec.Hard {
		u := usage[h.Network]
		out = append(out, v1alpha1.NetworkQuota{Network: h.Network,
			Ingress: annotations.FormatRate(u.Ingress), Egress: annotations.FormatRate(u.Egress)})
	}
	return out
}
