// Package v1alpha1 holds the sextant.io/v1alpha1 API: the heartbeat objects the node
// agent publishes and the ranker reads, and the namespaces' bandwidth quotas.
//
// +kubebuilder:object:generate=true
// +groupName=sextant.io
package v1alpha1

//go:generate go tool controller-gen object paths=./...
//go:generate go tool controller-gen crd:crdVersions=v1 paths=./... output:crd:artifacts:config=../../charts/sextant/crds
