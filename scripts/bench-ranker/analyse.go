package main

import (
	"sort"
	"strings"
)

// analyse counts bandwidth violations and NUMA spread over the run's bindings.
func (b *bench) analyse(res *result, bindings []binding, useAnnotation bool) {
	sort.Slice(bindings, func(i, j int) bool { return bindings[i].seq < bindings[j].seq })
	type nodeNet struct {
		node    string
		network int
	}
	left := map[nodeNet][2]int64{}
	free := map[string][][2]int64{} // per node, per NUMA node: milliCPU, memory
	res.numaSource = "simulated"
	if useAnnotation {
		res.numaSource = "annotation"
	}
	for _, bd := range bindings {
		p := b.workload[bd.pod]
		key := nodeNet{bd.node, p.network}
		rem, ok := left[key]
		if !ok {
			rem = b.remaining[bd.node][p.network]
		}
		asked, violated := false, false
		for d := range 2 {
			if p.required[d] == 0 {
				continue
			}
			asked = true
			rem[d] -= p.required[d]
			if rem[d] < 0 {
				violated = true
			}
		}
		left[key] = rem
		if asked {
			res.bwAsked++
		}
		if violated {
			res.bwViolation++
		}

		need := numaNeeded(p, b.shape)
		if need == 0 {
			continue
		}
		res.numaPods++
		var used int
		if useAnnotation {
			if !bd.hasNUMA || bd.numaNodes == "" {
				res.numaMissing++
				continue
			}
			used = len(strings.Split(bd.numaNodes, ","))
		} else {
			f, ok := free[bd.node]
			if !ok {
				f = make([][2]int64, b.shape.numaNodes)
				for i := range f {
					f[i] = [2]int64{int64(b.shape.cpusPerNUMA) * 1000, b.shape.memPerNUMA}
				}
				free[bd.node] = f
			}
			used = bestEffortPlace(f, p.milliCPU, p.memory)
		}
		if used > need {
			res.numaSpread++
		}
	}
}

// numaNeeded is how many NUMA nodes the pod's CPU, memory and GPUs need on an empty
// node of the shape: a pod with more GPUs than one NUMA node has spans as many NUMA
// nodes as hold them, and the ranker aligns its CPUs with them.
func numaNeeded(p podSpec, shape nodeShape) int {
	if p.milliCPU == 0 && p.memory == 0 {
		return 0
	}
	gpusPerNUMA := int64(len(shape.gpuAddrs) / shape.numaNodes)
	for k := 1; k <= shape.numaNodes; k++ {
		if p.milliCPU <= int64(k*shape.cpusPerNUMA)*1000 && p.memory <= int64(k)*shape.memPerNUMA &&
			(gpusPerNUMA == 0 || p.gpus <= int64(k)*gpusPerNUMA) {
			return k
		}
	}
	return shape.numaNodes
}

// bestEffortPlace places a pod's CPU and memory on the fewest NUMA nodes of free that
// hold it, best-fit among sets of that size (least CPU, then memory, left over), as the
// kubelet's topology manager would on a best-effort policy; it takes the resources out
// of free and returns how many NUMA nodes it used. When no set holds it (the scheduler
// counts the node as a whole, not per NUMA node) it spreads over all of them.
func bestEffortPlace(free [][2]int64, cpu, mem int64) int {
	n := len(free)
	bestMask, bestCPU, bestMem := 0, int64(-1), int64(-1)
	for k := 1; k <= n && bestMask == 0; k++ {
		for mask := 1; mask < 1<<n; mask++ {
			if bitsSet(mask) != k {
				continue
			}
			var c, m int64
			for i := range n {
				if mask&(1<<i) != 0 {
					c += free[i][0]
					m += free[i][1]
				}
			}
			if c < cpu || m < mem {
				continue
			}
			if bestMask == 0 || c-cpu < bestCPU || (c-cpu == bestCPU && m-mem < bestMem) {
				bestMask, bestCPU, bestMem = mask, c-cpu, m-mem
			}
		}
	}
	if bestMask == 0 {
		bestMask = 1<<n - 1
	}
	// Take from the chosen NUMA nodes, fullest first, so a spread pod leaves one of
	// them as empty as it can.
	var idx []int
	for i := range n {
		if bestMask&(1<<i) != 0 {
			idx = append(idx, i)
		}
	}
	sort.Slice(idx, func(a, c int) bool { return free[idx[a]][0] > free[idx[c]][0] })
	for _, i := range idx {
		tc, tm := min(cpu, free[i][0]), min(mem, free[i][1])
		free[i][0] -= tc
		free[i][1] -= tm
		cpu -= tc
		mem -= tm
	}
	return len(idx)
}

func bitsSet(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}
