package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxQuotaNetworks bounds a BandwidthQuota's lists, as the CRD's MaxItems markers say.
const MaxQuotaNetworks = 32

// BandwidthQuota caps the bandwidth a namespace's pods may require, as a ResourceQuota
// caps their CPU: per network and direction, the sum of the
// bandwidth.sextant.io/*-required rates of the namespace's pods that have not finished.
// The admission webhook refuses a pod that would take the sum past spec.hard, naming
// the quota; the ranker places no pod past it (it counts the pods it placed, so it
// holds also where the webhook was down or two pods were admitted at once). An
// operator writes it; tenants may read it. Several quotas in one namespace all apply.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=bwquota,categories=sextant
// +kubebuilder:printcolumn:name="Hard",type=string,JSONPath=`.spec.hard`,priority=1
// +kubebuilder:printcolumn:name="Used",type=string,JSONPath=`.status.used`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BandwidthQuota struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BandwidthQuotaSpec `json:"spec"`
	// +optional
	Status BandwidthQuotaStatus `json:"status,omitempty"`
}

// BandwidthQuotaSpec is what the quota allows.
type BandwidthQuotaSpec struct {
	// Hard are the caps, one entry per network.
	// +listType=map
	// +listMapKey=network
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Hard []NetworkQuota `json:"hard"`
}

// NetworkQuota is a cap, or a use, of one network's required rates, per direction; an
// absent direction is not capped. Rates are written as in the annotations: a
// quantity in bits/s such as 400M or 10G.
type NetworkQuota struct {
	// Network is the node network (bandwidth.sextant.io/network), "pod" for the pod
	// network.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Network string `json:"network"`
	// Ingress is the sum of ingress-required rates, in bits/s.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$`
	Ingress string `json:"ingress,omitempty"`
	// Egress is the sum of egress-required rates, in bits/s.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$`
	Egress string `json:"egress,omitempty"`
}

// BandwidthQuotaStatus is what the namespace's pods take of the quota.
type BandwidthQuotaStatus struct {
	// Used is, per network in spec.hard, what the namespace's pods placed by the
	// ranker and not finished require, as the ranker last counted it.
	// +optional
	// +listType=map
	// +listMapKey=network
	// +kubebuilder:validation:MaxItems=32
	Used []NetworkQuota `json:"used,omitempty"`
	// UpdateTime is when the ranker last wrote Used.
	// +optional
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
}

// BandwidthQuotaList is a list of BandwidthQuotas.
//
// +kubebuilder:object:root=true
type BandwidthQuotaList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BandwidthQuota `json:"items"`
}
