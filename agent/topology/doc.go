// Package topology reads a node's NUMA, CPU, memory, PCI device and NIC topology from
// sysfs and procfs, the way the agent publishes it as NodeTopology.
//
// Everything is read under a root directory (the agent's --sysfs-root, "/" on a live
// node, the host's root mounted into the agent's container, or a copied tree), joined as
// prometheus/procfs does; symlinks are resolved inside that root, never on the host.
//
// What it reports, and the decisions behind it:
//
//   - NUMA nodes come from sys/devices/system/node/nodeN: CPUs from cpulist (or, on old
//     kernels, cpumap or the cpuN links), MemTotal from meminfo, and the distance row.
//     Only online CPUs are listed (sys/devices/system/cpu/online, else each cpuN/online;
//     a CPU without that file is online). A node without CPUs (memory tier, HBM, CXL,
//     GPU memory) is listed with "cpus": [].
//   - A machine without NUMA nodes in sysfs is one node 0 with every online CPU and
//     proc/meminfo's MemTotal, and no distances. So is a machine whose nodes list the
//     same CPU twice (a BIOS bug hwloc also works around): its NUMA split is unknowable.
//   - Distances are left out (with a warning) unless every node's row has one entry per
//     node: a row that does not line up would mislead the ranker's tie-breaking.
//   - PCI devices are every function in sys/bus/pci/devices except PCI-to-PCI bridges
//     (class 0x0604, 0x0609: root and switch ports, never given to a pod), which matches
//     hwloc's PCIDev objects. Host bridges, ISA bridges and the like stay, as "other".
//   - Kinds come from the class code: 0x03xxxx gpu, 0x02xxxx nic, 0x010802 nvme, 0x12xxxx
//     and 0x0b40xx accelerator, everything else other.
//   - A device's NUMA node is its numa_node; where that is -1 or missing, the node whose
//     CPUs hold the device's local_cpulist (or local_cpus), else its parent bridges', else
//     its root bus's cpulistaffinity, as hwloc infers it. CPUs spanning several nodes
//     give null, as does no data at all; on a one-node machine every device is on it.
//   - pcieRoot is the root port above a device, or the host bridge's sysfs name
//     ("pci0000:00") for a device on a root bus itself.
//   - NICs are sys/class/net entries except loopback (type 772): lo has no capacity,
//     locality or device to place by. A NIC's PCI address is the nearest PCI function
//     above its device link (virtio-net sits on a virtio device under one); virtual
//     interfaces (veth, bridges, VLANs) have none. speedMbps is absent when the link is
//     down or the driver does not say.
//   - A present device is Unhealthy where the kernel reports a fault on it (the reasons
//     are in Snapshot.Faults): aer_dev_fatal's TOTAL_ERR_FATAL above 0 (any kind); a
//     link trained narrower than the smaller of the device's and its upstream port's
//     max_link_width (requestable kinds); for NICs and NVMe drives also a
//     current_link_speed below the smaller max_link_speed. GPUs and accelerators lower
//     their link speed while idle by design, so their speed is not judged. Unknown
//     values (virtual functions, links that are down) are no data.
//
// Malformed content fails Read, naming the file, where going on would publish a wrong
// topology (a node's CPU list or meminfo, the online-CPU list). Elsewhere the item is
// left out or null and a warning naming the file is returned in Snapshot.Warnings; a
// missing file is simply no data. Device health over time (devices gone, drivers lost)
// is the Tracker's.
package topology
