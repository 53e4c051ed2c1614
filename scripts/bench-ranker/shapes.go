package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// nodeShape is what every bench node of a run looks like: its NodeTopology and the
// Node's allocatable agree, and the NUMA spread analysis places pods on it.
type nodeShape struct {
	name        string
	numaNodes   int
	cpusPerNUMA int
	memPerNUMA  int64
	// numaPerSocket groups the NUMA nodes into sockets for the distance matrix: local
	// distLocal, same socket distSocket, another socket distRemote.
	numaPerSocket                     int
	distLocal, distSocket, distRemote int32
	// gpuAddrs are the GPUs' PCI addresses; GPU i sits on NUMA node
	// i*numaNodes/len(gpuAddrs). All are healthy, and the Node's allocatable advertises
	// as many sextant.io/gpu.
	gpuAddrs []string
	// gpuPodMax is the most GPUs a GPU pod of the workload asks for (from 1).
	gpuPodMax int64
	// networks are the networks every NodeBandwidth publishes in status.networks, one
	// interface of linkCapacity each: networks[0] is pod (eth0), networks[i] is on
	// eth<i>. Every otherNetworkEvery-th pod that asks for bandwidth names one of the
	// others in turn (bandwidth.sextant.io/network); 0: none does.
	networks          []string
	otherNetworkEvery int
	// dra publishes the GPUs as ResourceSlices of the agent's DRA driver instead of the
	// device plugin's sextant.io/gpu, and GPU pods ask for them with a ResourceClaim.
	dra bool
	// peakMemoryGoal, when set, is the most sextant-ranker's peak memory on this shape
	// may be over the first shape's of a run (1.05: within 5%).
	peakMemoryGoal float64
	help           string
}

// defaultShape is the shape every run had before there were shapes; its workload and
// file names are what they were then.
const defaultShape = "2numa"

// shapes are the node shapes --shape names.
var shapes = map[string]nodeShape{
	defaultShape: {
		name: defaultShape, numaNodes: 2, cpusPerNUMA: 16, memPerNUMA: 64 << 30,
		numaPerSocket: 1, distLocal: 10, distSocket: 10, distRemote: 21,
		gpuAddrs:  []string{"0000:3b:00.0", "0000:5e:00.0", "0000:af:00.0", "0000:d8:00.0"},
		gpuPodMax: 2,
		networks:  []string{"pod"},
		help:      "2 NUMA nodes (one per socket, distance 21) of 16 CPUs and 64 GiB: 32 CPUs, 128 GiB; 4 GPUs, 2 per NUMA node; GPU pods ask 1-2; one network (pod)",
	},
	"2numa-2net": {
		name: "2numa-2net", numaNodes: 2, cpusPerNUMA: 16, memPerNUMA: 64 << 30,
		numaPerSocket: 1, distLocal: 10, distSocket: 10, distRemote: 21,
		gpuAddrs:  []string{"0000:3b:00.0", "0000:5e:00.0", "0000:af:00.0", "0000:d8:00.0"},
		gpuPodMax: 2,
		networks:  []string{"pod", "storage"}, otherNetworkEvery: 4,
		peakMemoryGoal: 1.05,
		help: "2numa's nodes and pods, with two networks in every NodeBandwidth (pod on eth0, storage on eth1, " +
			"each its own remaining); every fourth pod that asks for bandwidth names storage",
	},
	"8numa-8gpu": {
		name: "8numa-8gpu", numaNodes: 8, cpusPerNUMA: 16, memPerNUMA: 64 << 30,
		numaPerSocket: 4, distLocal: 10, distSocket: 12, distRemote: 32,
		// A DGX A100's GPUs.
		gpuAddrs: []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
			"0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"},
		gpuPodMax: 4,
		networks:  []string{"pod"},
		help: "8 NUMA nodes (2 sockets of 4; distances 10 local, 12 same socket, 32 across), each as 2numa's (16 CPUs, 64 GiB), " +
			"so the node scales to 128 CPUs and 512 GiB and every pod needs as many NUMA nodes as on 2numa; 8 GPUs, one per NUMA node; GPU pods ask 1-4",
	},
	"8numa-dra": {
		name: "8numa-dra", numaNodes: 8, cpusPerNUMA: 16, memPerNUMA: 64 << 30,
		numaPerSocket: 4, distLocal: 10, distSocket: 12, distRemote: 32,
		gpuAddrs: []string{"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
			"0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"},
		gpuPodMax: 4,
		networks:  []string{"pod"},
		dra:       true,
		help: "8numa-8gpu's nodes with the GPUs published as DRA ResourceSlices (driver sextant.io, numaNode and pciBusID) and not " +
			"advertised as sextant.io/gpu; GPU pods (a tenth) ask for 1-4 through a ResourceClaim of DeviceClass " + draClass,
	},
}

func (s nodeShape) cpus() int { return s.numaNodes * s.cpusPerNUMA }

func (s nodeShape) memory() int64 { return int64(s.numaNodes) * s.memPerNUMA }

// distance is the NUMA distance from NUMA node i to j.
func (s nodeShape) distance(i, j int) int32 {
	switch {
	case i == j:
		return s.distLocal
	case i/s.numaPerSocket == j/s.numaPerSocket:
		return s.distSocket
	default:
		return s.distRemote
	}
}

// gpuNUMA is the NUMA node GPU i sits on.
func (s nodeShape) gpuNUMA(i int) int { return i * s.numaNodes / len(s.gpuAddrs) }

func shapeNames() []string {
	return slices.Sorted(maps.Keys(shapes))
}

func shapesHelp() string {
	var b strings.Builder
	b.WriteString("comma-separated node shapes to run, each at every size, in order (with more than one, the throughput ratio of each to the first is printed per scheduler):")
	for _, n := range shapeNames() {
		fmt.Fprintf(&b, "\n    %s: %s", n, shapes[n].help)
	}
	return b.String()
}

func parseShapes(s string) ([]nodeShape, error) {
	var out []nodeShape
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		sh, ok := shapes[f]
		if !ok {
			return nil, fmt.Errorf("--shape: unknown shape %q; want %s", f, strings.Join(shapeNames(), ", "))
		}
		if slices.ContainsFunc(out, func(o nodeShape) bool { return o.name == f }) {
			return nil, fmt.Errorf("--shape: %s named twice", f)
		}
		out = append(out, sh)
	}
	return out, nil
}
