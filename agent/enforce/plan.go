package enforce

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// Direction is a traffic direction as the node sees it.
type Direction int

const (
	// Ingress is traffic the node receives: shaped on the interface's IFB.
	Ingress Direction = iota
	// Egress is traffic the node sends: shaped on the interface's root qdisc.
	Egress
)

// Directions lists both, in index order.
var Directions = [2]Direction{Ingress, Egress}

func (d Direction) String() string {
	if d == Ingress {
		return "ingress"
	}
	return "egress"
}

// Pod is what the plan needs to know of a pod bound to the node and not finished.
type Pod struct {
	UID types.UID
	// Name is namespace/name, for events and logs.
	Name string
	// Bound orders the pods' guarantees: the ranker reserved them in that order, so
	// the node keeps them in that order when it cannot keep them all. It is when the
	// pod was bound, or when it started for a pod that started only after it was
	// Released (bandwidthclaim.Deadlines.Order).
	Bound time.Time
	// Addresses are the pod's own addresses (status.podIPs and those of its other
	// networks); none while it has not started, or for a host-network pod.
	Addresses []netip.Addr
	// Cgroup is a host-network pod's pod cgroup on cgroup v2; zero where unknown.
	Cgroup PodCgroup
	// Request is the pod's parsed bandwidth annotations; zero when they do not parse.
	Request annotations.BandwidthRequest
	// Released: the pod has not started long after it was bound, and holds no
	// guarantee until it does (package bandwidthclaim); its limit still applies.
	Released bool
}

// Started reports whether the pod's packets can be told apart on the NIC yet.
func (p Pod) Started() bool { return len(p.Addresses) > 0 || p.Cgroup.ID != 0 }

// Interface is one interface of an enforced network.
type Interface struct {
	Name string
	// Capacity is the interface's capacity per direction in bits/s; zero where unknown.
	Capacity [2]float64
}

// Network is an enforced network and the interfaces its traffic crosses.
type Network struct {
	Name       string
	Interfaces []Interface
}

// Shares are how the agent divides an interface.
type Shares struct {
	// Shaped is the fraction of an interface's capacity the agent shapes it to. Below
	// 1, the queue builds where the agent shapes rather than in the NIC's ring or, for
	// ingress, upstream of the node, where no guarantee can be kept.
	Shaped float64
	// Unreserved is the fraction of the shaped rate kept for traffic no pod reserved
	// (the node's own, pods without annotations), which guarantees cannot take.
	Unreserved float64
}

// DefaultShares are the chart's defaults.
var DefaultShares = Shares{Shaped: 0.95, Unreserved: 0.05}

// Validate says what is wrong with the shares.
func (s Shares) Validate() error {
	switch {
	case !(s.Shaped > 0 && s.Shaped <= 1):
		return fmt.Errorf("shaped share %v: want a fraction of the capacity in (0, 1], e.g. 0.95", s.Shaped)
	case !(s.Unreserved > 0 && s.Unreserved < 1):
		return fmt.Errorf("unreserved share %v: want a fraction of the shaped rate in (0, 1), e.g. 0.05", s.Unreserved)
	}
	return nil
}

// Minors hands out the class minor of each pod with a class: the same on every
// interface, and kept across restarts.
type Minors interface {
	Minor(types.UID) uint16
}

// The fixed classes of every shaping qdisc.
const (
	// RootMinor is the class every other one borrows from: the shaped rate.
	RootMinor uint16 = 1
	// DefaultMinor is the class of every packet no pod's class claims.
	DefaultMinor uint16 = 2
	// FirstPodMinor is the lowest minor handed to a pod.
	FirstPodMinor uint16 = 3
)

// minClassRate is the rate of a class that guarantees nothing (a pod with only a
// limit, or one the node cannot guarantee): HTB needs a positive rate, and with it
// the class takes what it borrows.
const minClassRate = 8000

// Class is one HTB class; rates in bits/s.
type Class struct {
	Minor      uint16
	Rate, Ceil uint64
	// Pod is the pod the class belongs to; empty for the default class.
	Pod types.UID
}

// QdiscPlan is one shaping qdisc: the interface's root (egress) or its IFB's
// (ingress).
type QdiscPlan struct {
	// Rate is the shaped rate: the root class's rate and ceiling.
	Rate    uint64
	Default Class
	// Pods are the pods' classes, by minor.
	Pods []Class
}

// InterfacePlan is what one interface gets.
type InterfacePlan struct {
	Name  string
	Qdisc [2]QdiscPlan
}

// Shortfall is a pod whose required rate the node cannot keep in a direction: the
// guarantees before it already fill the network.
type Shortfall struct {
	Pod       types.UID
	Name      string
	Direction Direction
	Required  int64
}

// NetworkPlan is one enforced network.
type NetworkPlan struct {
	Name string
	// Problem says why the network is not shaped (no interface, a capacity unknown);
	// empty when it is. ProblemReason is the GuaranteesEnforced condition's reason for it.
	Problem, ProblemReason string
	// Capacity is, per direction, what the guarantees may add up to; Guaranteed what
	// the admitted ones add up to (including pods not started yet).
	Capacity, Guaranteed [2]int64
	Interfaces           []InterfacePlan
	// Guarantees are the admitted pods' required rates per direction.
	Guarantees map[types.UID][2]int64
	Shortfalls []Shortfall
}

// Plan is what every enforced network gets.
type Plan struct {
	Networks []NetworkPlan
	// Classified are the pods with a class on some interface: their addresses and
	// cgroup go to the classifier.
	Classified map[types.UID]uint16
}

// MakePlan decides every class of every enforced network from the pods on the node.
//
// A pod's guarantee on a network, per direction, is its required rate there, kept in
// the order the pods were bound while the guarantees add up to no more than the
// network's guarantee capacity: min over its interfaces of capacity × Shaped ×
// (1 − Unreserved). That is the rule the ranker places by, so every pod it placed on a
// node that enforces fits; a pod placed past it (by another scheduler) gets no
// guarantee and is a Shortfall. A pod's limit is the ceiling of its class. Pods
// without either share the default class, which gets whatever the pods' classes do
// not guarantee and, like every class, borrows up to the shaped rate.
func MakePlan(networks []Network, pods []Pod, shares Shares, minors Minors) Plan {
	plan := Plan{Classified: map[types.UID]uint16{}}
	order := slices.Clone(pods)
	slices.SortStableFunc(order, func(a, b Pod) int {
		if c := a.Bound.Compare(b.Bound); c != 0 {
			return c
		}
		return cmp.Compare(a.UID, b.UID)
	})
	for _, n := range networks {
		plan.Networks = append(plan.Networks, planNetwork(n, order, shares, minors, plan.Classified))
	}
	return plan
}

func planNetwork(n Network, pods []Pod, shares Shares, minors Minors, classified map[types.UID]uint16) NetworkPlan {
	np := NetworkPlan{Name: n.Name, Guarantees: map[types.UID][2]int64{}}
	if len(n.Interfaces) == 0 {
		np.Problem, np.ProblemReason = "no interface carries the network yet", v1alpha1.ReasonNoInterfaces
		return np
	}
	var shaped [2]float64 // the smallest interface's shaped rate, per direction
	for i, ifc := range n.Interfaces {
		for _, d := range Directions {
			if !(ifc.Capacity[d] > 0) {
				np.Problem = fmt.Sprintf("the %s capacity of %s is unknown (set it with --nic-capacity)", d, ifc.Name)
				np.ProblemReason = v1alpha1.ReasonNoCapacity
				return np
			}
			r := ifc.Capacity[d] * shares.Shaped
			if i == 0 || r < shaped[d] {
				shaped[d] = r
			}
		}
	}
	for _, d := range Directions {
		np.Capacity[d] = int64(math.Floor(shaped[d] * (1 - shares.Unreserved)))
	}

	// Admission, in bound order.
	type podClass struct {
		pod       Pod
		guarantee [2]int64
		limit     [2]int64 // 0: none
	}
	var members []podClass
	for _, p := range pods {
		req := p.Request
		if req.Network != n.Name {
			continue
		}
		pc := podClass{pod: p}
		for _, d := range Directions {
			dir := req.Ingress
			if d == Egress {
				dir = req.Egress
			}
			if dir.HasLimit {
				pc.limit[d] = dir.Limit
			}
			if !dir.HasRequired || dir.Required == 0 || p.Released {
				continue
			}
			if np.Guaranteed[d]+dir.Required > np.Capacity[d] {
				np.Shortfalls = append(np.Shortfalls, Shortfall{Pod: p.UID, Name: p.Name, Direction: d, Required: dir.Required})
				continue
			}
			np.Guaranteed[d] += dir.Required
			pc.guarantee[d] = dir.Required
		}
		if pc.guarantee != [2]int64{} {
			np.Guarantees[p.UID] = pc.guarantee
		}
		if pc.guarantee != [2]int64{} || pc.limit != [2]int64{} {
			members = append(members, pc)
		}
	}

	// Minors in bound order, before the directions ask for them.
	for _, m := range members {
		if m.pod.Started() {
			classified[m.pod.UID] = minors.Minor(m.pod.UID)
		}
	}
	for _, ifc := range n.Interfaces {
		ip := InterfacePlan{Name: ifc.Name}
		for _, d := range Directions {
			rate := uint64(ifc.Capacity[d] * shares.Shaped)
			q := QdiscPlan{Rate: rate}
			var used uint64
			for _, m := range members {
				if !m.pod.Started() || (m.guarantee[d] == 0 && m.limit[d] == 0) {
					continue
				}
				c := Class{Minor: classified[m.pod.UID], Rate: minClassRate, Ceil: rate, Pod: m.pod.UID}
				if g := uint64(m.guarantee[d]); g > c.Rate {
					c.Rate = g
				}
				if l := m.limit[d]; l > 0 && uint64(l) < c.Ceil {
					c.Ceil = uint64(l)
				}
				c.Rate = min(c.Rate, c.Ceil)
				used += c.Rate
				q.Pods = append(q.Pods, c)
			}
			slices.SortFunc(q.Pods, func(a, b Class) int { return cmp.Compare(a.Minor, b.Minor) })
			// What the pods' classes do not guarantee; admission leaves at least the
			// unreserved share of the smallest interface.
			def := uint64(minClassRate)
			if rate > used+def {
				def = rate - used
			}
			q.Default = Class{Minor: DefaultMinor, Rate: def, Ceil: rate}
			ip.Qdisc[d] = q
		}
		np.Interfaces = append(np.Interfaces, ip)
	}
	return np
}
