// Package kubeclient loads the API server client configuration for sextant's binaries
// and tools with client-go's own rules, as kubectl and kube-scheduler do.
package kubeclient

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Config returns the client configuration from the kubeconfig file at path when path
// is set, else from $KUBECONFIG or ~/.kube/config, else the pod's service account
// (in-cluster).
func Config(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		if path != "" {
			return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
		}
		return nil, fmt.Errorf("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a cluster (pass --kubeconfig): %w", err)
	}
	return cfg, nil
}
