// Package devicefilter decides which PCI devices of a node may be handed to pods: never
// the ones the node itself runs on, and none an operator's rule keeps back.
//
// Host devices are excluded by default, found under the agent's root (the tree holding
// sys/ and proc/, a host mount in a container):
//
//   - NICs the default route leaves through (proc/net/route, proc/net/ipv6_route), and
//     NICs the node's own addresses sit on (IPv6: proc/net/if_inet6; IPv4: the interface
//     the main routing table reaches the address through, longest prefix first). A bond,
//     VLAN or bridge counts through every interface below it (lower_* links, brif/).
//   - Block devices backing a mounted filesystem or swap: every mount of the host's init
//     process and of the agent itself (proc/1/mountinfo, proc/self/mountinfo) and every
//     swap device (proc/swaps), from the device number through sys/dev/block (or the
//     mount source through sys/class/block), down through device-mapper and md slaves,
//     to the PCI function above the disk.
//
// Where the scan cannot look (no route file, no mountinfo at all) it cannot prove a NIC
// or a drive is not the host's: every NIC, or every NVMe drive, is then held back, with
// a reason saying so, until an include rule names it.
//
// Rules (the agent's --device-filter, repeatable or comma-separated) then change that,
// in order, the last matching rule winning: include:FIELD=VALUE hands a device out even
// if it is a host device, exclude:FIELD=VALUE keeps it back; FIELD is address (a PCI
// address), kind (gpu, nic, nvme, accelerator) or driver (the bound kernel driver).
package devicefilter
