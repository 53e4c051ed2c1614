package annotations

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The bandwidth annotations pod authors write. Rates are Kubernetes quantities in bits
// per second, like kubernetes.io/egress-bandwidth.
const (
	BandwidthPrefix   = "bandwidth.sextant.io/"
	IngressRequired   = BandwidthPrefix + "ingress-required"
	EgressRequired    = BandwidthPrefix + "egress-required"
	IngressExpected   = BandwidthPrefix + "ingress-expected"
	EgressExpected    = BandwidthPrefix + "egress-expected"
	BandwidthStrategy = BandwidthPrefix + "strategy"
	// BandwidthNetwork names the node network whose bandwidth the pod's rates are
	// about (a NodeBandwidth's status.networks); without it, the pod network.
	BandwidthNetwork = BandwidthPrefix + "network"
	// IngressLimit and EgressLimit cap the pod's rate on its network, enforced on the
	// node where the agent shapes that network.
	IngressLimit = BandwidthPrefix + "ingress-limit"
	EgressLimit  = BandwidthPrefix + "egress-limit"
)

// BandwidthGuaranteed is the ranker's decision, on the pod's Binding, whether the node it
// placed a pod that requires bandwidth on keeps that rate for it ("true": the node
// enforces the pod's network) or only measured it free ("false"). Only the ranker
// writes it.
const BandwidthGuaranteed = BandwidthPrefix + "guaranteed"

// The CNI bandwidth plugin's and Cilium's per-pod caps, which sextant reads as limits
// too: where a pod sets both one of these and sextant's limit, the lower wins.
const (
	KubernetesIngressBandwidth = "kubernetes.io/ingress-bandwidth"
	KubernetesEgressBandwidth  = "kubernetes.io/egress-bandwidth"
)

// PodNetwork is the network pod traffic crosses unless the pod names another: the NIC
// of the node's InternalIP, else the default route's.
const PodNetwork = "pod"

// NetworkForm is the accepted form of a network name, for error messages.
const NetworkForm = "a DNS label (lower-case letters, digits and '-', at most 63) naming a network of the nodes, such as pod or storage"

// bandwidthKeys lists every annotation under BandwidthPrefix the ranker understands,
// so that a typo (ingress-requried) is refused instead of silently ignored.
var bandwidthKeys = []string{
	IngressRequired, EgressRequired,
	IngressExpected, EgressExpected,
	BandwidthStrategy, BandwidthNetwork,
	IngressLimit, EgressLimit, BandwidthGuaranteed,
}

// Strategy is how Score ranks the nodes that passed Filter.
type Strategy string

const (
	// BestFit prefers the node whose remaining bandwidth is closest to the expected
	// value, leaving roomier nodes for pods that need them.
	BestFit Strategy = "best-fit"
	// MostHeadroom prefers the node with the most remaining bandwidth beyond the
	// expected value, so a pod that bursts past it has room to.
	MostHeadroom Strategy = "most-headroom"
)

// Strategies lists the accepted strategies, for messages and validation.
var Strategies = []Strategy{BestFit, MostHeadroom}

// ParseStrategy returns the strategy named s; ok is false for any other value.
func ParseStrategy(s string) (Strategy, bool) {
	for _, st := range Strategies {
		if s == string(st) {
			return st, true
		}
	}
	return "", false
}

// MaxRate bounds a rate annotation so that sums of many reservations stay far from
// int64 overflow; 1 Pbit/s is three orders of magnitude above any NIC made today.
const MaxRate = int64(1_000_000_000_000_000)

// RateForm is the accepted form of a rate annotation, for error messages.
const RateForm = "a non-negative quantity in bits/s such as 400M or 10G, at most 1P"

// LimitForm is the accepted form of a limit, which may not be zero.
const LimitForm = "a positive quantity in bits/s such as 100M or 10G, at most 1P"

// Direction is what a pod asks of one traffic direction, in bits per second.
type Direction struct {
	// Required is the hard floor Filter enforces; meaningful only if HasRequired.
	Required    int64
	HasRequired bool
	// Expected is the target Score aims for; meaningful only if HasExpected.
	Expected    int64
	HasExpected bool
	// Limit caps the pod's rate, the lower of sextant's limit and the
	// kubernetes.io/*-bandwidth annotation; meaningful only if HasLimit.
	Limit    int64
	HasLimit bool
}

// Target is the value the pod is scored and reserved by: expected, else required.
func (d Direction) Target() (int64, bool) {
	switch {
	case d.HasExpected:
		return d.Expected, true
	case d.HasRequired:
		return d.Required, true
	}
	return 0, false
}

// BandwidthRequest is the parsed bandwidth request of a pod.
type BandwidthRequest struct {
	Ingress Direction
	Egress  Direction
	// Strategy is empty when the pod leaves it to the ranker's default.
	Strategy Strategy
	// Network is the node network the rates are about; never empty (PodNetwork
	// unless the pod names another).
	Network string
	// NetworkNamed is set when the pod names Network itself
	// (bandwidth.sextant.io/network): a node without that network is filtered out,
	// whatever the rates.
	NetworkNamed bool
}

// Empty reports whether the request has no rate at all, i.e. the plugin has nothing to
// filter, score or reserve for the pod.
func (r BandwidthRequest) Empty() bool {
	_, in := r.Ingress.Target()
	_, eg := r.Egress.Target()
	return !in && !eg
}

// HasLimit reports whether the pod's rate is capped in either direction.
func (r BandwidthRequest) HasLimit() bool { return r.Ingress.HasLimit || r.Egress.HasLimit }

// HasRequired reports whether the pod asks for a floor in either direction.
func (r BandwidthRequest) HasRequired() bool { return r.Ingress.HasRequired || r.Egress.HasRequired }

// Filtered reports whether Filter has anything to check: a floor, or a network the
// pod named.
func (r BandwidthRequest) Filtered() bool { return r.HasRequired() || r.NetworkNamed }

// Error says which annotation is malformed and what it accepts. The admission
// webhook turns each one into a field error; the scheduler puts its text in the pod's
// FailedScheduling event.
type Error struct {
	Annotation string
	Value      string
	// Problem says what is wrong with Value.
	Problem string
	// Want is the accepted form.
	Want string
}

func (e *Error) Error() string {
	return fmt.Sprintf("annotation %s=%q: %s; want %s", e.Annotation, e.Value, e.Problem, e.Want)
}

// Errors is every problem found in a pod's annotations, in a stable order.
type Errors []*Error

func (es Errors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	// One line: it ends up in an event message and a log line.
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.As find each Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// HasBandwidth reports whether any annotation under BandwidthPrefix is present, i.e.
// whether the plugin has anything to do with the pod at all.
func HasBandwidth(annotations map[string]string) bool {
	for k := range annotations {
		if strings.HasPrefix(k, BandwidthPrefix) {
			return true
		}
	}
	return false
}

// ParseBandwidth parses the bandwidth annotations of a pod. A pod without any yields an
// empty BandwidthRequest and no error. The error, if any, is an Errors naming every bad
// annotation and its accepted form.
func ParseBandwidth(annotations map[string]string) (BandwidthRequest, error) {
	req := BandwidthRequest{Network: PodNetwork}
	var errs Errors

	var unknown []string
	for k := range annotations {
		if strings.HasPrefix(k, BandwidthPrefix) && !isBandwidthKey(k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		errs = append(errs, &Error{
			Annotation: truncate(k), Value: truncate(annotations[k]), Problem: "unknown annotation",
			Want: "one of " + strings.Join(bandwidthKeys, ", "),
		})
	}

	parseRate := func(key, want string, into *int64, set *bool) {
		v, ok := annotations[key]
		if !ok {
			return
		}
		n, problem := parseRateValue(v)
		if problem != "" {
			errs = append(errs, &Error{Annotation: key, Value: truncate(v), Problem: problem, Want: want})
			return
		}
		*into, *set = n, true
	}
	parseRate(IngressRequired, RateForm, &req.Ingress.Required, &req.Ingress.HasRequired)
	parseRate(IngressExpected, RateForm, &req.Ingress.Expected, &req.Ingress.HasExpected)
	parseRate(EgressRequired, RateForm, &req.Egress.Required, &req.Egress.HasRequired)
	parseRate(EgressExpected, RateForm, &req.Egress.Expected, &req.Egress.HasExpected)
	// limitKey is the annotation the direction's limit came from: the lower of the two.
	parseLimit := func(d *Direction, keys ...string) (limitKey string) {
		for _, key := range keys {
			var v int64
			var set bool
			parseRate(key, LimitForm, &v, &set)
			if set && v == 0 {
				// Zero is no traffic at all, which no one means by a cap.
				errs = append(errs, &Error{Annotation: key, Value: truncate(annotations[key]), Problem: "zero", Want: LimitForm})
				continue
			}
			if set && (!d.HasLimit || v < d.Limit) {
				d.Limit, d.HasLimit, limitKey = v, true, key
			}
		}
		return limitKey
	}
	ingressLimitKey := parseLimit(&req.Ingress, IngressLimit, KubernetesIngressBandwidth)
	egressLimitKey := parseLimit(&req.Egress, EgressLimit, KubernetesEgressBandwidth)

	checkOrder := func(d Direction, expectedKey, requiredKey, limitKey string) {
		if d.HasRequired && d.HasExpected && d.Expected < d.Required {
			errs = append(errs, &Error{
				Annotation: expectedKey, Value: annotations[expectedKey],
				Problem: fmt.Sprintf("less than %s=%s", requiredKey, annotations[requiredKey]),
				Want:    fmt.Sprintf("a quantity in bits/s at least %s", requiredKey),
			})
		}
		// A limit below what the pod is placed by would leave the ranker reserving, and
		// the node guaranteeing, a rate the pod can never reach.
		for _, r := range []struct {
			key string
			v   int64
			set bool
		}{{expectedKey, d.Expected, d.HasExpected}, {requiredKey, d.Required, d.HasRequired}} {
			if d.HasLimit && r.set && r.v > d.Limit {
				errs = append(errs, &Error{
					Annotation: r.key, Value: truncate(annotations[r.key]),
					Problem: fmt.Sprintf("more than %s=%s", limitKey, annotations[limitKey]),
					Want:    fmt.Sprintf("a quantity in bits/s at most %s", limitKey),
				})
			}
		}
	}
	checkOrder(req.Ingress, IngressExpected, IngressRequired, ingressLimitKey)
	checkOrder(req.Egress, EgressExpected, EgressRequired, egressLimitKey)

	if v, ok := annotations[BandwidthStrategy]; ok {
		st, ok := ParseStrategy(strings.TrimSpace(v))
		if !ok {
			errs = append(errs, &Error{
				Annotation: BandwidthStrategy, Value: truncate(v), Problem: "unknown strategy",
				Want: StrategyForm(),
			})
		} else {
			req.Strategy = st
		}
	}

	if v, ok := annotations[BandwidthGuaranteed]; ok && v != "true" && v != "false" {
		errs = append(errs, &Error{Annotation: BandwidthGuaranteed, Value: truncate(v), Problem: "not a boolean", Want: "true or false, as the ranker writes it"})
	}

	if v, ok := annotations[BandwidthNetwork]; ok {
		if !IsNetworkName(v) {
			errs = append(errs, &Error{Annotation: BandwidthNetwork, Value: truncate(v), Problem: "not a network name", Want: NetworkForm})
		} else {
			req.Network, req.NetworkNamed = v, true
		}
	}

	if len(errs) > 0 {
		return BandwidthRequest{}, errs
	}
	return req, nil
}

// IsNetworkName reports whether s is a DNS label (RFC 1123), the form of a network's
// name in annotations, agent flags and NodeBandwidth.
func IsNetworkName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

func StrategyForm() string {
	names := make([]string, len(Strategies))
	for i, s := range Strategies {
		names[i] = string(s)
	}
	return strings.Join(names, " or ")
}

func isBandwidthKey(key string) bool {
	for _, k := range bandwidthKeys {
		if k == key {
			return true
		}
	}
	return false
}

// maxRateLen bounds a rate value before it is parsed: "1000000000000000" is 16
// characters, and anything much longer is not a rate a person wrote.
const maxRateLen = 32

// ParseRate parses a rate written as in the annotations (RateForm) into bits/s.
func ParseRate(v string) (int64, error) {
	bits, problem := parseRateValue(v)
	if problem != "" {
		return 0, fmt.Errorf("rate %q: %s; want %s", truncate(v), problem, RateForm)
	}
	return bits, nil
}

// parseRateValue returns the rate in bits/s, or a description of what is wrong.
func parseRateValue(v string) (int64, string) {
	if len(v) > maxRateLen {
		return 0, fmt.Sprintf("longer than %d characters", maxRateLen)
	}
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil {
		return 0, "not a quantity"
	}
	if q.Sign() < 0 {
		return 0, "negative"
	}
	if q.CmpInt64(MaxRate) > 0 {
		return 0, "too large"
	}
	// Round fractions of a bit up: a floor must never be weakened by rounding.
	return q.Value(), ""
}

// FormatRate prints bits/s the way users write them (400M, 1500M, 10G).
func FormatRate(bits int64) string {
	return resource.NewQuantity(bits, resource.DecimalSI).String()
}
