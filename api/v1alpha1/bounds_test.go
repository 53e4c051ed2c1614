package v1alpha1

import (
	"os"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestBoundsMatchTheCRD: the constants the agent trims to and the ranker checks are the
// generated CRD's own maxItems.
func TestBoundsMatchTheCRD(t *testing.T) {
	b, err := os.ReadFile("../../charts/sextant/crds/sextant.io_nodebandwidths.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	status := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"]
	networks := status.Properties["networks"]
	for _, c := range []struct {
		name  string
		items *int64
		want  int
	}{
		{"status.interfaces", status.Properties["interfaces"].MaxItems, MaxInterfaces},
		{"status.networks", networks.MaxItems, MaxNetworks},
		{"status.networks[].interfaces", networks.Items.Schema.Properties["interfaces"].MaxItems, MaxNetworkInterfaces},
	} {
		if c.items == nil || *c.items != int64(c.want) {
			t.Errorf("%s: the CRD's maxItems is %v, the constant %d", c.name, c.items, c.want)
		}
	}
}
