package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// NodeTopology is the shape of one node: NUMA nodes with their CPUs, memory and
// distances, PCI devices and NICs with their NUMA locality and health. The agent on the
// node named like the object writes it on change and at a slow resync.
//
// +genclient
// +genclient:nonNamespaced
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ntopo,categories=sextant
// +kubebuilder:printcolumn:name="NUMA",type=integer,JSONPath=`.status.summary.numaNodes`
// +kubebuilder:printcolumn:name="CPUs",type=integer,JSONPath=`.status.summary.cpus`
// +kubebuilder:printcolumn:name="Devices",type=integer,JSONPath=`.status.summary.devices`
// +kubebuilder:printcolumn:name="Unhealthy",type=integer,JSONPath=`.status.summary.unhealthyDevices`
// +kubebuilder:printcolumn:name="Pinning",type=string,JSONPath=`.status.numaPinning`
// +kubebuilder:printcolumn:name="Updated",type=date,JSONPath=`.status.updateTime`
type NodeTopology struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status NodeTopologyStatus `json:"status,omitempty"`
}

// NodeTopologyStatus has the same three lists `sextant-agent topology --output json`
// prints, plus a summary for printer columns.
type NodeTopologyStatus struct {
	// UpdateTime is when the agent last read the topology.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Format=date-time
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$`
	UpdateTime *metav1.Time `json:"updateTime,omitempty"`
	// AgentVersion is the version of the agent that wrote the topology.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	AgentVersion string `json:"agentVersion,omitempty"`
	// Summary counts what the lists hold.
	// +optional
	Summary *TopologySummary `json:"summary,omitempty"`
	// NUMAPinning says whether the agent confines this node's pods to the NUMA nodes the
	// ranker chose for them (numa.sextant.io/nodes). Empty, as an agent of an earlier
	// version writes it, counts as Active.
	// +optional
	NUMAPinning NUMAPinning `json:"numaPinning,omitempty"`

	Topology `json:",inline"`
}

// Topology is a node's NUMA nodes, PCI devices and NICs. The bounds are Linux's
// (MAX_NUMNODES 1024, NR_CPUS 8192) and a generous count of PCI functions; they keep
// one node's object, and what the ranker derives from it, bounded.
type Topology struct {
	// +optional
	// +listType=map
	// +listMapKey=id
	// +nullable
	// +kubebuilder:validation:MaxItems=1024
	NUMANodes []NUMANode `json:"numaNodes"`
	// +optional
	// +listType=map
	// +listMapKey=address
	// +nullable
	// +kubebuilder:validation:MaxItems=4096
	PCIDevices []PCIDevice `json:"pciDevices"`
	// +optional
	// +listType=map
	// +listMapKey=name
	// +nullable
	// +kubebuilder:validation:MaxItems=4096
	NICs []NIC `json:"nics"`
}

// TopologySummary counts a topology's parts.
type TopologySummary struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	NUMANodes int32 `json:"numaNodes"`
	// CPUs counts online CPUs.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=8192
	CPUs int32 `json:"cpus"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	Devices int32 `json:"devices"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	UnhealthyDevices int32 `json:"unhealthyDevices"`
}

// NUMANode is one NUMA node. A node may have memory and no CPUs (a memory tier).
type NUMANode struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1023
	ID int32 `json:"id"`
	// CPUs are the IDs of the node's online CPUs. The ranker also refuses a topology
	// whose NUMA nodes list more than 8192 CPUs in all.
	// +optional
	// +nullable
	// +listType=set
	// +kubebuilder:validation:MaxItems=8192
	// +kubebuilder:validation:items:Minimum=0
	// +kubebuilder:validation:items:Maximum=8191
	CPUs []int32 `json:"cpus"`
	// MemoryBytes is the node's total memory.
	// +kubebuilder:validation:Minimum=0
	MemoryBytes int64 `json:"memoryBytes"`
	// Distances are the ACPI SLIT distances from this node to every node, in node-ID order.
	// +optional
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:Minimum=0
	// +kubebuilder:validation:items:Maximum=255
	Distances []int32 `json:"distances,omitempty"`
}

// NUMAPinning says whether a node's agent carries out the ranker's NUMA decisions.
// +kubebuilder:validation:Enum=Active;Pending;Unknown;Off;KubeletStaticCPUManager;KubeletStaticMemoryManager
type NUMAPinning string

const (
	// PinningActive: the agent pins every pod annotated numa.sextant.io/nodes.
	PinningActive NUMAPinning = "Active"
	// PinningPending: the kubelet has not said yet whether it runs the static CPU
	// manager or Static memory manager policy; the agent pins the node's pods as soon as
	// it has, unless it does.
	PinningPending NUMAPinning = "Pending"
	// PinningUnknown: as Pending, but the kubelet has not answered for longer than the
	// agent waits (30 s): its PodResources socket is down or not where the agent looks.
	// The agent pins nothing until it answers.
	PinningUnknown NUMAPinning = "Unknown"
	// PinningOff: the agent runs without NUMA pinning (--numa-pinning=false).
	PinningOff NUMAPinning = "Off"
	// PinningKubeletStaticCPUManager: the kubelet runs the static CPU manager policy and
	// sets containers' cpusets itself; the agent pins nothing.
	PinningKubeletStaticCPUManager NUMAPinning = "KubeletStaticCPUManager"
	// PinningKubeletStaticMemoryManager: the kubelet runs the Static memory manager
	// policy and sets containers' memory nodes itself; the agent pins nothing.
	PinningKubeletStaticMemoryManager NUMAPinning = "KubeletStaticMemoryManager"
)

// Pins reports whether pods annotated numa.sextant.io/nodes are, or will be, pinned on
// a node that publishes p: Active, Pending, and empty (an agent that predates the
// field, which pins by default).
func (p NUMAPinning) Pins() bool {
	return p == "" || p == PinningActive || p == PinningPending
}

// DeviceHealth says whether a device can be given to a pod.
// +kubebuilder:validation:Enum=Healthy;Unhealthy
type DeviceHealth string

const (
	// Healthy devices are present and enabled.
	Healthy DeviceHealth = "Healthy"
	// Unhealthy devices have disappeared or been disabled since the agent first saw them.
	Unhealthy DeviceHealth = "Unhealthy"
)

// DeviceKind is what a PCI device is for, from its class code.
// +kubebuilder:validation:Enum=gpu;nic;nvme;accelerator;other
type DeviceKind string

// The device kinds the agent reports; all but KindOther can be requested by a pod as
// sextant.io/<kind> (RequestableDeviceKinds).
const (
	KindGPU         DeviceKind = "gpu"
	KindNIC         DeviceKind = "nic"
	KindNVMe        DeviceKind = "nvme"
	KindAccelerator DeviceKind = "accelerator"
	KindOther       DeviceKind = "other"
)

// PCIDevice is one PCI function. Its address is its stable ID.
type PCIDevice struct {
	// Address is the PCI address, domain:bus:device.function, e.g. 0000:3b:00.0.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`
	Address string `json:"address"`
	// Class is the PCI class code, e.g. 0x020000.
	// +kubebuilder:validation:MaxLength=16
	Class string `json:"class"`
	// Vendor is the PCI vendor ID, e.g. 0x8086.
	// +kubebuilder:validation:MaxLength=16
	Vendor string `json:"vendor"`
	// Device is the PCI device ID.
	// +kubebuilder:validation:MaxLength=16
	Device string `json:"device"`
	// Driver is the bound kernel driver, if any.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Driver string     `json:"driver,omitempty"`
	Kind   DeviceKind `json:"kind"`
	// NUMANode is the device's NUMA node; null where the locality is unknown.
	// +nullable
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1023
	NUMANode *int32 `json:"numaNode"`
	// PCIeRoot is the address of the PCIe root port or host bridge above the device.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	PCIeRoot string       `json:"pcieRoot,omitempty"`
	Health   DeviceHealth `json:"health"`
	// Holder is the pod the kubelet assigned the device to, from its PodResources:
	// pods of any scheduler. The ranker never picks a held device.
	// +optional
	Holder *DeviceHolder `json:"holder,omitempty"`
	// Excluded says why the node keeps the device from pods (a NIC the node's own
	// traffic uses, a drive backing its filesystems, an operator's rule); absent when
	// pods may have it. The ranker never picks an excluded device.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Excluded string `json:"excluded,omitempty"`
}

// DeviceHolder names the pod a device is assigned to.
type DeviceHolder struct {
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// UID is absent when the agent has not seen the pod yet.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=36
	UID types.UID `json:"uid,omitempty"`
}

// NIC is one network interface.
type NIC struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	Name string `json:"name"`
	// PCIAddress is the NIC's PCI function; null for virtual interfaces (veth, bridge).
	// +nullable
	// +kubebuilder:validation:MaxLength=16
	PCIAddress *string `json:"pciAddress"`
	// NUMANode is the NIC's NUMA node; null where the locality is unknown.
	// +nullable
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1023
	NUMANode *int32 `json:"numaNode"`
	// SpeedMbps is the link speed the kernel reports; absent when unknown.
	// +optional
	// +kubebuilder:validation:Minimum=0
	SpeedMbps *int64 `json:"speedMbps,omitempty"`
}

// NodeTopologyList is a list of NodeTopology.
//
// +kubebuilder:object:root=true
type NodeTopologyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeTopology `json:"items"`
}
