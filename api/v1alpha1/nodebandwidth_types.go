package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The CRD's bounds on a NodeBandwidth's lists, as its MaxItems markers state them: the
// agent trims its report to them (an API server refuses the whole status beyond them),
// the ranker refuses a report beyond them.
const (
	MaxInterfaces        = 256
	MaxNetworks          = 32
	MaxNetworkInterfaces = 64
)

// NodeBandwidth is the measured bandwidth of one node's NICs, per direction. The agent
// on the node named like the object writes it; the ranker reads it. It is cluster-scoped
// and owned by its Node, so it goes away with the node.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nbw,categories=sextant
// +kubebuilder:printcolumn:name="Pod-Ingress-Remaining",type=string,JSONPath=`.status.networks[?(@.name=="pod")].ingress.remaining`
// +kubebuilder:printcolumn:name="Pod-Ingress-Peak",type=string,JSONPath=`.status.networks[?(@.name=="pod")].ingress.peak`
// +kubebuilder:printcolumn:name="Pod-Egress-Remaining",type=string,JSONPath=`.status.networks[?(@.name=="pod")].egress.remaining`
// +kubebuilder:printcolumn:name="Pod-Egress-Peak",type=string,JSONPath=`.status.networks[?(@.name=="pod")].egress.peak`
// +kubebuilder:printcolumn:name="Pod-Guaranteed",type=string,JSONPath=`.status.networks[?(@.name=="pod")].conditions[?(@.type=="GuaranteesEnforced")].status`,priority=1
// +kubebuilder:printcolumn:name="Sampled",type=date,JSONPath=`.status.sampleTime`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.agentVersion`,priority=1
type NodeBandwidth struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status NodeBandwidthStatus `json:"status,omitempty"`
}

// NodeBandwidthStatus is one sample of the node's NICs.
type NodeBandwidthStatus struct {
	// SampleTime is when the agent took the sample, on the agent's clock. The ranker
	// judges staleness by when a report reaches it, not by this. The pattern is
	// RFC 3339 as Go parses it: the date-time format alone lets "2026-01-02t15:04:05z"
	// through, which no client decodes.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	SampleTime *metav1.Time `json:"sampleTime,omitempty"`
	// Window is the span over which Peak is the highest rate seen: the agent's configured
	// window, or less while the agent has not yet been measuring that long (after a
	// start). A Go duration, e.g. 60s or 1m30s.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="window must be a non-negative Go duration, e.g. 60s"
	Window *metav1.Duration `json:"window,omitempty"`
	// AgentVersion is the version of the agent that wrote the sample.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AgentVersion string `json:"agentVersion,omitempty"`
	// Interfaces has one entry per measured NIC.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=256
	Interfaces []InterfaceBandwidth `json:"interfaces,omitempty"`
	// Total sums, per direction, the interfaces whose capacity is known. It is for
	// people to read: no component schedules on it, since no path has the sum of
	// separate NICs (an agent older than networks is read as one pod network of it).
	// +optional
	Total *Bandwidth `json:"total,omitempty"`
	// Networks groups the interfaces into the node's networks: "pod" (found by the
	// agent: the NIC of the node's InternalIP, else the default route's) and those the
	// operator names (storage, a Multus network's master NIC, ...). The ranker filters
	// and scores a pod on the network it names (bandwidth.sextant.io/network, default
	// pod).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Networks []NetworkBandwidth `json:"networks,omitempty"`
}

// NetworkBandwidth is one network of the node: the interfaces that carry it and what
// they carry. Capacity, rate and peak sum the interfaces; remaining is the largest
// remaining of any one interface, since one pod's traffic crosses one interface (a
// bond, which spreads flows over its links, is one interface with the bond's capacity).
type NetworkBandwidth struct {
	// Name is the network's name, a DNS label: pod, storage, ...
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// Interfaces are the interfaces metered for the network, each counted once: a
	// VLAN, macvlan or bridge resolves to the devices under it, a bond is itself and
	// its slaves are not listed beside it.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=15
	Interfaces []string `json:"interfaces"`

	Bandwidth `json:",inline"`

	// Conditions say whether the agent keeps, on this network, the bandwidth pods were
	// placed for (type GuaranteesEnforced). Absent where enforcement is not turned on
	// for the network: placements there are not guaranteed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Guarantees are, per direction, what the pods' required rates on this network may
	// add up to and what those the agent keeps add up to now; present while
	// GuaranteesEnforced is True.
	// +optional
	Guarantees *Guarantees `json:"guarantees,omitempty"`
}

// ConditionGuaranteesEnforced is the type of a network's condition that says whether the
// agent shapes the network's interfaces so that every pod gets its required rate and no
// pod exceeds its limit.
const ConditionGuaranteesEnforced = "GuaranteesEnforced"

// Reasons of the GuaranteesEnforced condition.
const (
	// ReasonShaped: every interface of the network is shaped (True).
	ReasonShaped = "Shaped"
	// ReasonShapingFailed: the agent could not set up or keep the shaping of an
	// interface; the message says which and why (False).
	ReasonShapingFailed = "ShapingFailed"
	// ReasonNoCapacity: an interface's capacity is unknown, so there is nothing to
	// guarantee against (False).
	ReasonNoCapacity = "CapacityUnknown"
	// ReasonNoInterfaces: the network has no interface to shape yet (False).
	ReasonNoInterfaces = "NoInterfaces"
)

// Guarantees are a network's guaranteed rates, per direction.
type Guarantees struct {
	Ingress GuaranteedDirection `json:"ingress"`
	Egress  GuaranteedDirection `json:"egress"`
}

// GuaranteedDirection is what the guarantees of one direction may add up to and what
// they add up to, in bits per second.
type GuaranteedDirection struct {
	// Capacity is the most the required rates of the network's pods may add up to: the
	// rate the agent shapes the network's smallest interface to, less the share it keeps
	// for traffic no pod reserved.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// Guaranteed is what the required rates the agent keeps on the network add up to.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Guaranteed *resource.Quantity `json:"guaranteed,omitempty"`
}

// InterfaceBandwidth is the sample of one NIC.
type InterfaceBandwidth struct {
	// Name is the interface name on the node, e.g. eth0.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Name string `json:"name"`

	Bandwidth `json:",inline"`
}

// Bandwidth holds both directions of a NIC, or of a sum of NICs.
type Bandwidth struct {
	// Ingress is traffic received by the node.
	Ingress DirectionBandwidth `json:"ingress"`
	// Egress is traffic sent by the node.
	Egress DirectionBandwidth `json:"egress"`
}

// DirectionBandwidth is one direction's rates in bits per second, written as Kubernetes
// quantities like kubernetes.io/egress-bandwidth (e.g. 10G, 1200M). The pattern takes
// strings without a sign, so the API server refuses a negative rate by name; the CEL
// rule checks that a string parses as a quantity (the pattern alone lets 1e.5 through)
// and that a plain integer, which a quantity's schema also allows, is not negative.
// The ranker still checks what it reads (ranker/heartbeat): a rate beyond int64 bits/s
// passes both.
//
// +kubebuilder:validation:XValidation:rule="!has(self.remaining) || has(self.capacity)",message="remaining needs a known capacity"
type DirectionBandwidth struct {
	// Capacity is the link's capacity; absent when unknown.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Capacity *resource.Quantity `json:"capacity,omitempty"`
	// Rate is the rate over the last sample interval.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Rate *resource.Quantity `json:"rate,omitempty"`
	// Peak is the highest rate seen within the window.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Peak *resource.Quantity `json:"peak,omitempty"`
	// Remaining is capacity minus peak, floored at zero; absent when capacity is unknown.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$`
	// +kubebuilder:validation:XValidation:rule="type(self) == string ? isQuantity(self) : self >= 0",message="must be a non-negative Kubernetes quantity, e.g. 10G or 1200M"
	Remaining *resource.Quantity `json:"remaining,omitempty"`
}

// NodeBandwidthList is a list of NodeBandwidth.
//
// +kubebuilder:object:root=true
type NodeBandwidthList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeBandwidth `json:"items"`
}
