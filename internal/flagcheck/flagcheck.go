// Package flagcheck refuses flag values a command cannot use, before anything starts,
// with errors that name the flag, the value and the accepted form.
package flagcheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/distribution/reference"
	"k8s.io/apimachinery/pkg/labels"
)

// Image refuses what a container's image cannot be: flag names the flag.
func Image(flag, ref string) error {
	if _, err := reference.ParseNormalizedNamed(ref); err != nil {
		return fmt.Errorf("%s %q: want an image reference [registry/]repository[:tag][@sha256:digest], such as ghcr.io/org/image:v1 (%v)", flag, ref, err)
	}
	return nil
}

// Name refuses a name that is not valid (a validation.IsDNS1123Label or
// IsDNS1123Subdomain) for what it names.
func Name(flag, name, what string, valid func(string) []string) error {
	if name == "" {
		return fmt.Errorf("%s is empty: want %s", flag, what)
	}
	if errs := valid(name); len(errs) > 0 {
		return fmt.Errorf("%s %q: want %s: %s", flag, name, what, strings.Join(errs, "; "))
	}
	return nil
}

// Positive refuses a duration that is not positive; example is one that is.
func Positive(flag string, d time.Duration, example string) error {
	if d <= 0 {
		return fmt.Errorf("%s %v: want a positive duration such as %s", flag, d, example)
	}
	return nil
}

// Selector refuses what is not a label selector.
func Selector(flag, s string) error {
	if _, err := labels.Parse(s); err != nil {
		return fmt.Errorf("%s %q: want a label selector such as app=x,tier in (a,b): %v", flag, s, err)
	}
	return nil
}
