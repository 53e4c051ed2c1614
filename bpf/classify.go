package bpf

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Classifier holds the shaper's classifier (classify.c): its two programs, which every
// shaped interface shares, and the maps that tell them each pod's class.
type Classifier struct {
	objs ClassifyObjects
}

// NewClassifier loads the classifier for HTB qdiscs whose handle has the major number
// major (the upper 16 bits of a class ID).
func NewClassifier(major uint16) (*Classifier, error) {
	spec, err := LoadClassify()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[ClassifyVarHandleMajor].Set(uint32(major) << 16); err != nil {
		return nil, fmt.Errorf("set the handle's major number: %w", err)
	}
	c := &Classifier{}
	if err := spec.LoadAndAssign(&c.objs, nil); err != nil {
		return nil, fmt.Errorf("load the classifier: %w", err)
	}
	return c, nil
}

// Ingress is the program for tc ingress: it classifies by destination.
func (c *Classifier) Ingress() *ebpf.Program { return c.objs.SextantClassifyIngress }

// Egress is the program for tc egress: it classifies by source.
func (c *Classifier) Egress() *ebpf.Program { return c.objs.SextantClassifyEgress }

// SockCreate is the cgroup program for a host-network pod's cgroup: it gives the
// sockets the pod creates the pod's class as their priority.
func (c *Classifier) SockCreate() *ebpf.Program { return c.objs.SextantSockClass }

// addressKey is a's key in pod_addresses: IPv4 mapped into IPv6.
func addressKey(a netip.Addr) ClassifyAddress {
	return ClassifyAddress{Bytes: a.Unmap().As16()}
}

// SetAddress classifies packets from (egress) and to (ingress) a into class.
func (c *Classifier) SetAddress(a netip.Addr, class uint32) error {
	if !a.IsValid() {
		return errors.New("no address")
	}
	k := addressKey(a)
	if err := c.objs.PodAddresses.Put(&k, class); err != nil {
		return fmt.Errorf("classify %s as %#x: %w", a, class, err)
	}
	return nil
}

// DeleteAddress stops classifying a; an address not there is not an error.
func (c *Classifier) DeleteAddress(a netip.Addr) error {
	k := addressKey(a)
	if err := c.objs.PodAddresses.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("stop classifying %s: %w", a, err)
	}
	return nil
}

// Addresses returns every address the classifier knows, with its class.
func (c *Classifier) Addresses() (map[netip.Addr]uint32, error) {
	out := map[netip.Addr]uint32{}
	var (
		k     ClassifyAddress
		class uint32
	)
	it := c.objs.PodAddresses.Iterate()
	for it.Next(&k, &class) {
		out[netip.AddrFrom16(k.Bytes).Unmap()] = class
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the pod addresses: %w", err)
	}
	return out, nil
}

// SetCgroup classifies the packets of sockets in the cgroup v2 with this ID, or in
// one below it, into class: a host-network pod's.
func (c *Classifier) SetCgroup(id uint64, class uint32) error {
	if err := c.objs.PodCgroups.Put(id, class); err != nil {
		return fmt.Errorf("classify cgroup %d as %#x: %w", id, class, err)
	}
	return c.countCgroups()
}

// DeleteCgroup stops classifying the cgroup; one not there is not an error.
func (c *Classifier) DeleteCgroup(id uint64) error {
	if err := c.objs.PodCgroups.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("stop classifying cgroup %d: %w", id, err)
	}
	return c.countCgroups()
}

// Cgroups returns every cgroup ID the classifier knows, with its class.
func (c *Classifier) Cgroups() (map[uint64]uint32, error) {
	out := map[uint64]uint32{}
	var (
		id    uint64
		class uint32
	)
	it := c.objs.PodCgroups.Iterate()
	for it.Next(&id, &class) {
		out[id] = class
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the pod cgroups: %w", err)
	}
	return out, nil
}

// countCgroups tells the programs whether any cgroup is classified: without one, they
// skip the socket lookups.
func (c *Classifier) countCgroups() error {
	ids, err := c.Cgroups()
	if err != nil {
		return err
	}
	if err := c.objs.HostNetworkPods.Set(uint32(len(ids))); err != nil {
		return fmt.Errorf("count the host-network pods: %w", err)
	}
	return nil
}

// Close releases the programs and maps; filters still running the programs keep them.
func (c *Classifier) Close() error { return c.objs.Close() }
