//go:build ignore

// The shaper's classifier: tc programs that tell which pod a packet belongs to and
// put the HTB class the agent made for that pod in skb->priority. HTB reads a
// priority naming one of its leaf classes before it runs any filter, so the
// shaping qdisc (the NIC's root at egress, the IFB's at ingress) needs no filter of
// its own. The programs never drop, redirect or change a packet's bytes, and hand
// every packet on to whatever runs after them.

#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char __license[] SEC("license") = "Dual MIT/GPL";

// A pod address: IPv6, or IPv4 mapped into IPv6 (::ffff:a.b.c.d), so that one
// map serves both families.
struct address {
	__u8 bytes[16];
};

// Pod addresses to HTB class IDs (major:minor). A pod has one class ID on every
// interface the agent shapes; an interface without that class (the pod has
// nothing reserved or capped on its network) sends the packet to its default
// class, as for any unknown priority.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, struct address);
	__type(value, __u32);
	__uint(max_entries, 16384);
} pod_addresses SEC(".maps");

// Host-network pods by the cgroup v2 ID of their pod cgroup: they share the node's
// addresses, so only their sockets tell them apart.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u64);
	__type(value, __u32);
	__uint(max_entries, 4096);
} pod_cgroups SEC(".maps");

// The class of each socket a host-network pod opened, set by sextant_sock_class.
// BPF_F_CLONE copies it to the sockets a listener accepts, which tc finds by their
// tuple on ingress.
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, __u32);
} pod_sockets SEC(".maps");

// The major number of the agent's HTB qdiscs, in the upper 16 bits.
volatile const __u32 handle_major = 0x5e470000;

// How many entries pod_cgroups holds, set by user space: host traffic skips the
// socket and cgroup lookups while no host-network pod has a class.
volatile __u32 host_network_pods = 0;

// How deep below the cgroup v2 root a pod cgroup may sit: kubepods/<qos>/pod<uid>
// is 3, a systemd layout or the kubelet's --cgroup-root adds levels.
#define MAX_CGROUP_LEVEL 8

#define VERDICT_CONTINUE TC_ACT_UNSPEC

enum direction {
	DIRECTION_INGRESS = 0,
	DIRECTION_EGRESS  = 1,
};

// load_address reads the source (egress) or destination (ingress) address of an IP
// packet into a. It works from the network header, so a VLAN tag in the frame, or a
// device without an Ethernet header, changes nothing. Returns 4 or 6, or 0 for
// anything else. One helper call for IPv4, two for IPv6: the classifier runs on every
// packet.
static __always_inline int load_address(struct __sk_buff *skb, __u32 direction, struct address *a) {
	// An IPv4 header without options, or the first 20 bytes of an IPv6 one.
	__u8 hdr[20];
	if (bpf_skb_load_bytes_relative(skb, 0, hdr, sizeof(hdr), BPF_HDR_START_NET) < 0)
		return 0;
	__builtin_memset(a, 0, sizeof(*a));
	switch (hdr[0] >> 4) {
	case 4:
		a->bytes[10] = 0xff;
		a->bytes[11] = 0xff;
		if (direction == DIRECTION_EGRESS)
			__builtin_memcpy(&a->bytes[12], &hdr[12], 4);
		else
			__builtin_memcpy(&a->bytes[12], &hdr[16], 4);
		return 4;
	case 6:
		if (bpf_skb_load_bytes_relative(skb, direction == DIRECTION_EGRESS ? 8 : 24, a->bytes, 16, BPF_HDR_START_NET) < 0)
			return 0;
		return 6;
	}
	return 0;
}

// load_tuple reads the packet's addresses, protocol and ports, for a socket lookup.
// Extension headers are not walked: a packet with one finds no socket.
static __always_inline int load_tuple(struct __sk_buff *skb, int family, struct bpf_sock_tuple *tuple, __u8 *proto) {
	__u32 ports;
	if (family == 4) {
		__u8 hdr[20];
		if (bpf_skb_load_bytes_relative(skb, 0, hdr, sizeof(hdr), BPF_HDR_START_NET) < 0)
			return -1;
		*proto = hdr[9];
		__builtin_memcpy(&tuple->ipv4.saddr, &hdr[12], 4);
		__builtin_memcpy(&tuple->ipv4.daddr, &hdr[16], 4);
		if (bpf_skb_load_bytes_relative(skb, (hdr[0] & 0x0f) * 4, &ports, sizeof(ports), BPF_HDR_START_NET) < 0)
			return -1;
		__builtin_memcpy(&tuple->ipv4.sport, &ports, sizeof(ports));
		return 0;
	}
	__u8 hdr[40];
	if (bpf_skb_load_bytes_relative(skb, 0, hdr, sizeof(hdr), BPF_HDR_START_NET) < 0)
		return -1;
	*proto = hdr[6];
	__builtin_memcpy(tuple->ipv6.saddr, &hdr[8], 16);
	__builtin_memcpy(tuple->ipv6.daddr, &hdr[24], 16);
	if (bpf_skb_load_bytes_relative(skb, 40, &ports, sizeof(ports), BPF_HDR_START_NET) < 0)
		return -1;
	__builtin_memcpy(&tuple->ipv6.sport, &ports, sizeof(ports));
	return 0;
}

// egress_socket_class: a locally sent packet carries its socket, whose cgroup is
// the sending pod's or one below it.
static __always_inline __u32 egress_socket_class(struct __sk_buff *skb) {
	if (bpf_skb_cgroup_id(skb) == 0)
		return 0; // forwarded, or no full socket
#pragma unroll
	for (int level = 1; level <= MAX_CGROUP_LEVEL; level++) {
		__u64 id = bpf_skb_ancestor_cgroup_id(skb, level);
		if (id == 0)
			break; // above the socket's own cgroup
		__u32 *class = bpf_map_lookup_elem(&pod_cgroups, &id);
		if (class)
			return *class;
	}
	return 0;
}

// ingress_socket_class: a received packet has no socket yet at tc, so the socket
// the stack will deliver it to is looked up by the packet's tuple. The agent's
// cgroup program gave every socket a host-network pod creates the pod's class (tc
// cannot read a socket's cgroup), and its accepted sockets inherit it.
static __always_inline __u32 ingress_socket_class(struct __sk_buff *skb, int family) {
	struct bpf_sock_tuple tuple = {};
	__u8 proto = 0;
	if (load_tuple(skb, family, &tuple, &proto) < 0)
		return 0;
	__u32 size = family == 4 ? sizeof(tuple.ipv4) : sizeof(tuple.ipv6);
	struct bpf_sock *sk;
	if (proto == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(skb, &tuple, size, BPF_F_CURRENT_NETNS, 0);
	else if (proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(skb, &tuple, size, BPF_F_CURRENT_NETNS, 0);
	else
		return 0;
	if (!sk)
		return 0;
	__u32 class = 0;
	__u32 *stored = bpf_sk_storage_get(&pod_sockets, sk, 0, 0);
	if (stored)
		class = *stored;
	bpf_sk_release(sk);
	return (class & 0xffff0000) == handle_major ? class : 0;
}

static __always_inline int classify(struct __sk_buff *skb, __u32 direction) {
	// Read before anything else: clang would otherwise keep skb + offsetof(priority)
	// in a register, and the verifier refuses a context access through a moved pointer.
	__u32 priority = skb->priority;
	struct address a;
	__u32 class = 0;

	int family = load_address(skb, direction, &a);
	if (family) {
		__u32 *c = bpf_map_lookup_elem(&pod_addresses, &a);
		if (c)
			class = *c;
		else if (host_network_pods)
			class = direction == DIRECTION_EGRESS ? egress_socket_class(skb) : ingress_socket_class(skb, family);
	}
	if (!class && (priority & 0xffff0000) == handle_major) {
		// A priority naming one of the agent's classes, set by someone else (a
		// socket option, or the sender's side of a veth): it must not get a pod's
		// guarantee, nor bypass the shaping (a priority of the qdisc's own handle).
		class = 0;
	} else if (!class) {
		return VERDICT_CONTINUE;
	}
	skb->priority = class;
	return VERDICT_CONTINUE;
}

SEC("tc")
int sextant_classify_ingress(struct __sk_buff *skb) {
	return classify(skb, DIRECTION_INGRESS);
}

SEC("tc")
int sextant_classify_egress(struct __sk_buff *skb) {
	return classify(skb, DIRECTION_EGRESS);
}

// sextant_sock_class runs when a process in a host-network pod's cgroup creates a
// socket (the agent attaches it to the pod cgroup): the socket gets the pod's class,
// in its storage for the ingress classifier to find, and as its priority, which its
// packets carry out to the egress qdisc. Sockets created before the agent attached
// it have neither; egress still finds them by cgroup.
SEC("cgroup/sock_create")
int sextant_sock_class(struct bpf_sock *sk) {
#pragma unroll
	for (int level = 1; level <= MAX_CGROUP_LEVEL; level++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (id == 0)
			break;
		__u32 *class = bpf_map_lookup_elem(&pod_cgroups, &id);
		if (class) {
			__u32 *stored = bpf_sk_storage_get(&pod_sockets, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
			if (stored)
				*stored = *class;
			sk->priority = *class;
			break;
		}
	}
	return 1; // allow: the program only labels sockets
}
