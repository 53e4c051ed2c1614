package bandwidth

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Capacity is what an interface can carry per direction, in bits per second.
// Zero means unknown.
type Capacity struct {
	Ingress float64
	Egress  float64
}

const capacityForm = "IF=RATE or IF=ingress:RATE,egress:RATE, RATE a quantity in bits/s such as 10G or 200M"

// ParseCapacities parses --nic-capacity values, each IF=RATE (both
// directions) or IF=ingress:RATE,egress:RATE (either part may be left out).
func ParseCapacities(values []string) (map[string]Capacity, error) {
	caps := map[string]Capacity{}
	for _, v := range values {
		name, spec, ok := strings.Cut(v, "=")
		name, spec = strings.TrimSpace(name), strings.TrimSpace(spec)
		if !ok || name == "" || spec == "" {
			return nil, fmt.Errorf("--nic-capacity %q: want %s", v, capacityForm)
		}
		if _, dup := caps[name]; dup {
			return nil, fmt.Errorf("--nic-capacity %q: interface %s is given twice", v, name)
		}
		var c Capacity
		if !strings.Contains(spec, ":") {
			r, err := parseRate(spec)
			if err != nil {
				return nil, fmt.Errorf("--nic-capacity %q: %w; want %s", v, err, capacityForm)
			}
			c = Capacity{Ingress: r, Egress: r}
		} else {
			seen := map[string]bool{}
			for _, part := range strings.Split(spec, ",") {
				dir, rate, ok := strings.Cut(strings.TrimSpace(part), ":")
				if !ok {
					return nil, fmt.Errorf("--nic-capacity %q: %q has no direction; want %s", v, part, capacityForm)
				}
				if seen[dir] {
					return nil, fmt.Errorf("--nic-capacity %q: direction %s is given twice; want %s", v, dir, capacityForm)
				}
				seen[dir] = true
				r, err := parseRate(rate)
				if err != nil {
					return nil, fmt.Errorf("--nic-capacity %q: %w; want %s", v, err, capacityForm)
				}
				switch dir {
				case "ingress":
					c.Ingress = r
				case "egress":
					c.Egress = r
				default:
					return nil, fmt.Errorf("--nic-capacity %q: unknown direction %q (want ingress or egress); want %s", v, dir, capacityForm)
				}
			}
		}
		caps[name] = c
	}
	return caps, nil
}

func parseRate(s string) (float64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("rate %q is not a quantity", s)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("rate %q is not positive", s)
	}
	r := q.AsApproximateFloat64()
	switch {
	case r < 1:
		// A lower-case m is milli: 1m is a thousandth of a bit per second.
		return 0, fmt.Errorf("rate %q is below 1 bit/s (m is milli: a megabit is M)", s)
	case r > maxCapacity:
		return 0, fmt.Errorf("rate %q is above 1P bit/s", s)
	}
	return r, nil
}

// maxCapacity bounds a NIC's capacity, as annotations.MaxRate bounds a pod's rates: far
// above any NIC made today, and far from where the bits per second a report publishes
// (an int64) overflow.
const maxCapacity = 1e15
