package devicefilter

import (
	"fmt"
	"regexp"
	"strings"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
)

// RuleForm is the accepted form of a rule, for messages.
const RuleForm = "include|exclude:address|kind|driver=VALUE, e.g. exclude:driver=nvme or include:address=0000:3b:00.0"

// Rule includes or excludes the devices whose field has a value.
type Rule struct {
	Include bool
	// Field is "address", "kind" or "driver".
	Field string
	Value string
}

// String is the rule as it is written.
func (r Rule) String() string {
	verb := "exclude"
	if r.Include {
		verb = "include"
	}
	return verb + ":" + r.Field + "=" + r.Value
}

// Matches reports whether the rule names d.
func (r Rule) Matches(d v1alpha1.PCIDevice) bool {
	switch r.Field {
	case "address":
		return d.Address == r.Value
	case "kind":
		return string(d.Kind) == r.Value
	case "driver":
		return d.Driver == r.Value
	}
	return false
}

// driverRE is what a kernel driver name can be (sysfs names under sys/bus/pci/drivers).
var driverRE = regexp.MustCompile(`^[A-Za-z0-9_.+-]{1,64}$`)

// ParseRule parses one rule; the error names the rule and the accepted form.
func ParseRule(s string) (Rule, error) {
	fail := func(problem string) (Rule, error) {
		return Rule{}, fmt.Errorf("device filter rule %q: %s; the accepted form is %s", s, problem, RuleForm)
	}
	verb, rest, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return fail("no include: or exclude:")
	}
	var r Rule
	switch verb {
	case "include":
		r.Include = true
	case "exclude":
	default:
		return fail(fmt.Sprintf("%q is neither include nor exclude", verb))
	}
	field, value, ok := strings.Cut(rest, "=")
	if !ok || value == "" {
		return fail("no FIELD=VALUE")
	}
	r.Field, r.Value = field, value
	switch field {
	case "address":
		if !annotations.IsPCIAddress(value) {
			return fail(fmt.Sprintf("%q is not a PCI address as sysfs names it (domain:bus:device.function, lower-case hex)", value))
		}
	case "kind":
		if _, ok := v1alpha1.DeviceKindOf(v1alpha1.DeviceKind(value).ResourceName()); !ok {
			return fail(fmt.Sprintf("kind %q is not one of gpu, nic, nvme, accelerator", value))
		}
	case "driver":
		if !driverRE.MatchString(value) {
			return fail(fmt.Sprintf("%q is not a kernel driver name", value))
		}
	default:
		return fail(fmt.Sprintf("field %q is not address, kind or driver", field))
	}
	return r, nil
}

// Rules are applied in order, the last matching rule winning. As a flag value
// (pflag.Value) it is repeatable, and each value may hold several rules separated by
// commas.
type Rules []Rule

// String is the rules as a flag value.
func (rs *Rules) String() string {
	parts := make([]string, len(*rs))
	for i, r := range *rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// Set appends the comma-separated rules in s.
func (rs *Rules) Set(s string) error {
	var add Rules
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		r, err := ParseRule(part)
		if err != nil {
			return err
		}
		add = append(add, r)
	}
	*rs = append(*rs, add...)
	return nil
}

// Type names the value in help texts.
func (rs *Rules) Type() string { return "rules" }

// ParseRules parses comma-separated rules.
func ParseRules(s string) (Rules, error) {
	var rs Rules
	if err := rs.Set(s); err != nil {
		return nil, err
	}
	return rs, nil
}
