package webhook

import (
	"errors"
	"strings"

	"sextant.io/sextant/ranker/plugins/bandwidth"
	"sextant.io/sextant/ranker/plugins/numa"
)

// ValidateAnnotations checks sextant's scheduling annotations with the ranker's own
// parsers, so the webhook refuses exactly what the ranker could not use. The error
// names each malformed annotation and its accepted form.
func ValidateAnnotations(annotations map[string]string) error {
	var errs []error
	if _, err := bandwidth.ParseAnnotations(annotations); err != nil {
		errs = append(errs, err)
	}
	if v, ok := annotations[numa.PolicyAnnotation]; ok {
		if _, err := numa.ParsePolicy(v); err != nil {
			errs = append(errs, err)
		}
	}
	for k, v := range annotations {
		if strings.HasPrefix(k, AnnotationCommandPrefix) {
			if _, err := ParseCommand(v); err != nil {
				errs = append(errs, errors.New("annotation "+k+"="+quote(v)+": "+err.Error()+`; want a non-empty JSON array of strings, e.g. ["/usr/local/bin/envoy"]`))
			}
		}
	}
	return errors.Join(errs...)
}

// sextantAnnotations is the subset of annotations ValidateAnnotations looks at.
func sextantAnnotations(annotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range annotations {
		if strings.HasPrefix(k, bandwidth.AnnotationPrefix) || k == numa.PolicyAnnotation || strings.HasPrefix(k, AnnotationCommandPrefix) {
			out[k] = v
		}
	}
	return out
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
