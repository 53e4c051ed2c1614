package webhook

import (
	"errors"
	"strings"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/sidecarcommand"
)

// ValidateAnnotations checks sextant's scheduling annotations with the parsers the ranker
// and the agent use, so the webhook refuses exactly what they could not use. The error
// names each malformed annotation and its accepted form.
func ValidateAnnotations(podAnnotations map[string]string) error {
	var errs []error
	if _, err := annotations.ParseBandwidth(podAnnotations); err != nil {
		errs = append(errs, err)
	}
	if _, err := annotations.PodNUMAPolicy(podAnnotations); err != nil {
		errs = append(errs, err)
	}
	for k, v := range podAnnotations {
		if strings.HasPrefix(k, annotations.SidecarCommandPrefix) {
			if _, err := sidecarcommand.Parse(v); err != nil {
				errs = append(errs, errors.New("annotation "+k+"="+quote(v)+": "+err.Error()+"; want "+sidecarcommand.Form))
			}
		}
	}
	return errors.Join(errs...)
}

// sextantAnnotations is the subset of annotations ValidateAnnotations looks at. The CNI
// bandwidth plugin's kubernetes.io/*-bandwidth limits are in it for pods that also ask
// sextant for bandwidth, whose limit they are; other pods' are the CNI's business.
func sextantAnnotations(podAnnotations map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range podAnnotations {
		if strings.HasPrefix(k, annotations.BandwidthPrefix) || k == annotations.NUMAPolicy || strings.HasPrefix(k, annotations.SidecarCommandPrefix) {
			out[k] = v
		}
	}
	if annotations.HasBandwidth(out) {
		for _, k := range []string{annotations.KubernetesIngressBandwidth, annotations.KubernetesEgressBandwidth} {
			if v, ok := podAnnotations[k]; ok {
				out[k] = v
			}
		}
	}
	return out
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }
