package numa

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
	"sextant.io/sextant/ranker/plugins/numahint"
)

// list is the snapshot's node list as PreFilter is given it.
func list(infos []*framework.NodeInfo) []fwk.NodeInfo {
	out := make([]fwk.NodeInfo, len(infos))
	for i, ni := range infos {
		out[i] = ni
	}
	return out
}

// Whenever PreFilter skips Filter because of the floor, Filter would have passed every
// node, and PreScore never skips Score when Filter would have left the pod uneven; for
// a pod within the one-NUMA-node floor it skips Score exactly when Filter would have
// left the pod even: random clusters (some nodes without NodeTopology, NUMA nodes partly
// taken by annotated pods) and pods of both policies, up to several NUMA nodes large.
// Every node is feasible here; with a node without NodeTopology among them Score must
// run, without, not.
func TestFloorAgreesWithFilter(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	ctx := context.Background()
	var skipped, skippedUneven, skippedTogether int
	for c := range 300 {
		var infos []*framework.NodeInfo
		var topos []*v1alpha1.NodeTopology
		for n := range 1 + rng.Intn(5) {
			name := fmt.Sprint("n", n)
			numa := 1 + rng.Intn(4)
			if c%4 != 0 || rng.Intn(4) != 0 { // some nodes of a quarter of the clusters lack topology
				topos = append(topos, uniform(name, numa, 2+rng.Intn(7), int64(2+rng.Intn(15))*gi))
			}
			infos = append(infos, nodeInfo(name, pinnedPods(rng, name, rng.Intn(4), 4, 6, numa)...))
		}
		pl, _ := newPlugin(t, infos, topos...)
		nodes := list(infos)
		for range 5 {
			ann := randomPolicy(rng)
			p := pod("p", fmt.Sprintf("%dm", 100+rng.Intn(4000)), int64(1+rng.Intn(8))*gi/2, ann)
			if rng.Intn(4) == 0 { // larger than many NUMA nodes
				p = pod("p", fmt.Sprintf("%dm", 100+rng.Intn(12000)), int64(1+rng.Intn(24))*gi/2, ann)
			}
			state := newState()
			if _, st := pl.PreFilter(ctx, state, p, nodes); st.Code() != fwk.Skip {
				continue
			}
			skipped++
			s, _ := readState(state)
			f := pl.floor.cur.Load()
			one := s.req.within(f.one)
			wantUneven := false
			for _, ni := range infos {
				nf, _, ok := pl.numaFree(ni.Node(), ni)
				if !ok {
					if s.policy == annotations.PolicySingleNUMANode {
						t.Fatalf("cluster %d: PreFilter skipped Filter of a single-numa-node pod with a node without topology", c)
					}
					wantUneven = true
					continue
				}
				reason, uneven := fit(nf.free(), s.req, s.policy)
				if reason != "" {
					t.Fatalf("cluster %d: PreFilter skipped Filter, which rejects %s (%s) for %+v", c, ni.Node().Name, reason, s.req)
				}
				wantUneven = wantUneven || uneven
			}
			st := pl.PreScore(ctx, state, p, nodes)
			if st.Code() == fwk.Skip && wantUneven {
				t.Fatalf("cluster %d: PreScore skipped Score; Filter would leave the pod uneven", c)
			}
			if wantUneven {
				skippedUneven++
			}
			if !one {
				if s.policy == annotations.PolicySingleNUMANode {
					t.Fatalf("cluster %d: PreFilter skipped Filter of a single-numa-node pod above the one-NUMA-node floor", c)
				}
				skippedTogether++
				continue
			}
			if (st.Code() == fwk.Skip) == wantUneven {
				t.Fatalf("cluster %d: PreScore = %v after the skip; Filter would leave the pod uneven: %v", c, st, wantUneven)
			}
			// Without the nodes lacking topology among the feasible ones, nothing to rank.
			var withTopology []fwk.NodeInfo
			for _, ni := range nodes {
				if _, _, ok := pl.numaFree(ni.Node(), ni); ok {
					withTopology = append(withTopology, ni)
				}
			}
			state2 := newState()
			pl.PreFilter(ctx, state2, p, nodes)
			if st := pl.PreScore(ctx, state2, p, withTopology); st.Code() != fwk.Skip {
				t.Fatalf("cluster %d: PreScore = %v with only nodes that fit the pod in one NUMA node feasible, want Skip", c, st)
			}
		}
	}
	// The floor must do its work: most of these small pods fit one NUMA node everywhere,
	// and some larger ones all NUMA nodes together.
	if skipped < 300 || skippedUneven == 0 || skippedTogether == 0 {
		t.Fatalf("PreFilter skipped Filter for %d pods (%d marked uneven, %d by the together floor); want most of 1500, some of both", skipped, skippedUneven, skippedTogether)
	}
	t.Logf("PreFilter skipped Filter for %d of 1500 pods (%d uneven, %d by the together floor)", skipped, skippedUneven, skippedTogether)
}

// pinnedPods returns n pods on node, each of 1 to cpus CPUs and 1 to memGi GiB, pinned to
// one of its numa NUMA nodes drawn at random.
func pinnedPods(rng *rand.Rand, node string, n, cpus, memGi, numa int) []*v1.Pod {
	pods := make([]*v1.Pod, n)
	for i := range pods {
		p := pod(fmt.Sprint(node, "-", i), fmt.Sprint(1+rng.Intn(cpus)), int64(1+rng.Intn(memGi))*gi,
			map[string]string{annotations.NUMANodes: fmt.Sprint(rng.Intn(numa))})
		pods[i] = on(node, p)
	}
	return pods
}

// randomPolicy returns single-numa-node's annotation one time in three, else none.
func randomPolicy(rng *rand.Rand) map[string]string {
	if rng.Intn(3) == 0 {
		return map[string]string{annotations.NUMAPolicy: string(annotations.PolicySingleNUMANode)}
	}
	return nil
}

// A reservation lowers the floor to what its node keeps: the next pod of the same size
// fits no NUMA node there any more and is filtered.
func TestFloorLoweredByReserve(t *testing.T) {
	ctx := context.Background()
	infos := []*framework.NodeInfo{nodeInfo("a"), nodeInfo("b")}
	pl, _ := newPlugin(t, infos, uniform("a", 1, 4, 8*gi), uniform("b", 2, 4, 8*gi))
	nodes := list(infos)
	first := pod("first", "3", 6*gi, nil)
	first.UID = "first"
	state := newState()
	if _, st := pl.PreFilter(ctx, state, first, nodes); st.Code() != fwk.Skip {
		t.Fatalf("PreFilter of a pod that fits one NUMA node of every node = %v, want Skip", st)
	}
	if st := pl.Reserve(ctx, state, first, "a"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	infos[0].AddPod(on("a", first.DeepCopy())) // assumed, as the scheduler does
	second := pod("second", "3", 6*gi, nil)
	state = newState()
	if _, st := pl.PreFilter(ctx, state, second, nodes); !st.IsSuccess() {
		t.Fatalf("PreFilter after a reserves its only NUMA node = %v, want Success (Filter must run)", st)
	}
	if st := pl.Filter(ctx, state, second, infos[0]); st.Code() != fwk.Unschedulable {
		t.Errorf("Filter on a = %v, want Unschedulable", st)
	}
	small := pod("small", "1", 2*gi, nil)
	if _, st := pl.PreFilter(ctx, newState(), small, nodes); st.Code() != fwk.Skip {
		t.Errorf("PreFilter of a pod that still fits everywhere = %v, want Skip", st)
	}

	// A pod spread over both NUMA nodes of b takes half of it from each, as Filter counts
	// it, and leaves the floor at what b keeps: 1 CPU and 2 GiB in each.
	wide := pod("wide", "6", 12*gi, nil)
	wide.UID = "wide"
	state = newState()
	if _, st := pl.PreFilter(ctx, state, wide, nodes); !st.IsSuccess() {
		t.Fatalf("PreFilter of a pod wider than a NUMA node = %v, want Success", st)
	}
	if st := pl.Reserve(ctx, state, wide, "b"); !st.IsSuccess() {
		t.Fatalf("Reserve: %v", st)
	}
	if nodes, _ := numahint.Reserved(state, "b"); annotations.FormatNUMANodes(nodes) != "0,1" {
		t.Fatalf("wide pod got NUMA nodes %v, want 0,1", nodes)
	}
	infos[1].AddPod(on("b", wide.DeepCopy()))
	for _, tc := range []struct {
		cpu  string
		mem  int64
		want fwk.Code
	}{{"1", 2 * gi, fwk.Skip}, {"1500m", 2 * gi, fwk.Success}, {"1", 3 * gi, fwk.Success}} {
		if _, st := pl.PreFilter(ctx, newState(), pod("p", tc.cpu, tc.mem, nil), nodes); st.Code() != tc.want {
			t.Errorf("after the wide pod, PreFilter of %s CPU and %d GiB = %v, want %v", tc.cpu, tc.mem/gi, st, tc.want)
		}
	}
}

// What may take NUMA capacity behind the plugin's back voids the floor: a NodeTopology
// replaced, a pod bound and annotated without the plugin's reservation, a Reserve that
// finds no room, a node added. The floor is then computed again, but not more than once
// per floorRetry; a floor older than floorRefresh is computed again too.
func TestFloorVoided(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1000, 0)
	setup := func(t *testing.T) (*NUMAAware, *heartbeat.Store, []*framework.NodeInfo, []fwk.NodeInfo) {
		infos := []*framework.NodeInfo{nodeInfo("a"), nodeInfo("b")}
		store := heartbeat.NewFromObjects(uniform("a", 2, 4, 8*gi), uniform("b", 2, 4, 8*gi))
		pl := NewWith(store, func(node string) (fwk.NodeInfo, error) {
			for _, ni := range infos {
				if ni.Node().Name == node {
					return ni, nil
				}
			}
			return nil, fmt.Errorf("no node %s", node)
		})
		pl.now = func() time.Time { return clock }
		return pl, store, infos, list(infos)
	}
	p := pod("p", "3", 6*gi, nil)
	skips := func(pl *NUMAAware, nodes []fwk.NodeInfo) bool {
		_, st := pl.PreFilter(ctx, newState(), p, nodes)
		return st.Code() == fwk.Skip
	}
	for _, tc := range []struct {
		name string
		// change takes room behind the plugin's back, and tells the plugin as its
		// watches would.
		change func(t *testing.T, pl *NUMAAware, store *heartbeat.Store, infos []*framework.NodeInfo)
	}{
		// Each leaves node a too little for p in its NUMA nodes together, too.
		{"topology replaced", func(_ *testing.T, _ *NUMAAware, store *heartbeat.Store, _ []*framework.NodeInfo) {
			store.Put(uniform("a", 2, 1, 2*gi))
		}},
		{"pod bound and annotated elsewhere", func(_ *testing.T, pl *NUMAAware, _ *heartbeat.Store, infos []*framework.NodeInfo) {
			for _, numa := range []string{"0", "1"} {
				other := on("a", pod("other-"+numa, "3", 6*gi, map[string]string{annotations.NUMANodes: numa}))
				other.UID = types.UID(other.Name)
				infos[0].AddPod(other)
				pl.voidFloorOnPod(nil, other)
			}
		}},
		{"pod of another scheduler bound without annotation", func(_ *testing.T, pl *NUMAAware, _ *heartbeat.Store, infos []*framework.NodeInfo) {
			pending := pod("daemon", "6", 12*gi, nil)
			bound := on("a", pending.DeepCopy())
			infos[0].AddPod(bound)
			pl.voidFloorOnPod(pending, bound)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, store, infos, nodes := setup(t)
			if !skips(pl, nodes) {
				t.Fatal("before the change: PreFilter does not skip Filter of a pod that fits everywhere")
			}
			tc.change(t, pl, store, infos) // the snapshot's node list stays the same
			clock = clock.Add(2 * floorRetry)
			if skips(pl, nodes) {
				t.Fatal("after the change: PreFilter still skips Filter")
			}
		})
	}

	t.Run("pods that take nothing keep the floor", func(t *testing.T) {
		pl, _, _, nodes := setup(t)
		if !skips(pl, nodes) {
			t.Fatal("PreFilter does not skip Filter of a pod that fits everywhere")
		}
		empty := on("a", pod("besteffort", "", 0, nil))
		done := on("a", pod("done", "8", 16*gi, nil))
		done.Status.Phase = v1.PodSucceeded
		pending := pod("pending", "8", 16*gi, nil)
		for _, p := range []*v1.Pod{empty, done, pending} {
			pl.voidFloorOnPod(nil, p)
		}
		relabelled := on("a", pod("running", "1", gi, nil))
		pl.voidFloorOnPod(relabelled, relabelled.DeepCopy())
		if v := pl.floor.voids.Load(); v != 0 {
			t.Errorf("the floor was voided %d times by pods that take no NUMA capacity or took it before", v)
		}
	})

	t.Run("node added", func(t *testing.T) {
		pl, store, infos, nodes := setup(t)
		store.Put(uniform("c", 1, 2, 4*gi)) // its heartbeat before its Node
		if !skips(pl, nodes) {
			t.Fatal("before the node joins the snapshot: PreFilter does not skip Filter")
		}
		clock = clock.Add(2 * floorRetry)
		if skips(pl, list(append(infos, nodeInfo("c")))) {
			t.Error("with the node in the snapshot: PreFilter still skips Filter")
		}
	})

	t.Run("pod bound with the plugin's reservation keeps the floor", func(t *testing.T) {
		pl, _, infos, nodes := setup(t)
		if !skips(pl, nodes) {
			t.Fatal("PreFilter does not skip Filter of a pod that fits everywhere")
		}
		mine := pod("mine", "1", gi, nil)
		mine.UID = "mine"
		pl.ledger.Reserve(mine.UID, "a", reservation{nodes: []int32{0}, req: PodRequest(mine)})
		bound := on("a", mine.DeepCopy())
		bound.Annotations = map[string]string{annotations.NUMANodes: "0"}
		infos[0].AddPod(bound)
		pl.voidFloorOnPod(mine, bound)
		if v := pl.floor.voids.Load(); v != 0 {
			t.Errorf("the floor was voided %d times by the plugin's own pod", v)
		}
	})

	t.Run("Reserve without room voids, recomputation waits floorRetry", func(t *testing.T) {
		pl, _, infos, nodes := setup(t)
		if !skips(pl, nodes) {
			t.Fatal("PreFilter does not skip Filter of a pod that fits everywhere")
		}
		// Room taken by pods the plugin has not heard of yet.
		for _, numa := range []string{"0", "1"} {
			infos[1].AddPod(on("b", pod("late-"+numa, "4", 8*gi, map[string]string{annotations.NUMANodes: numa})))
		}
		state := newState()
		if _, st := pl.PreFilter(ctx, state, p, nodes); st.Code() != fwk.Skip {
			t.Fatalf("PreFilter = %v; the floor has not heard of the pods yet, want Skip", st)
		}
		if st := pl.Reserve(ctx, state, p, "b"); st.Code() != fwk.Unschedulable {
			t.Fatalf("Reserve on a full node = %v, want Unschedulable", st)
		}
		if skips(pl, nodes) {
			t.Error("PreFilter skips Filter on a voided floor")
		}
		clock = clock.Add(2 * floorRetry)
		if skips(pl, nodes) {
			t.Error("the recomputed floor still lets the pod skip Filter")
		}
	})

	t.Run("refreshed after floorRefresh", func(t *testing.T) {
		pl, _, infos, nodes := setup(t)
		before := pl.floor.cur.Load()
		skips(pl, nodes)
		first := pl.floor.cur.Load()
		if first == before {
			t.Fatal("no floor computed")
		}
		infos[0].AddPod(on("a", pod("x", "1", gi, nil))) // a new generation, nothing else
		clock = clock.Add(floorRefresh / 2)
		skips(pl, nodes)
		if pl.floor.cur.Load() != first {
			t.Error("the floor was computed again before floorRefresh without a change")
		}
		clock = clock.Add(floorRefresh)
		skips(pl, nodes)
		if pl.floor.cur.Load() == first {
			t.Error("the floor was not computed again after floorRefresh")
		}
	})
}

// Where Filter and Score pass a node on the spare floor's say-so, they answer what they
// would have answered after a look, and a node given a pod after the spare floor was
// computed is looked at: random clusters with some nodes nearly full, some without
// NodeTopology, some that do not pin, and pods of both policies that the floor is too
// low for.
func TestSpareFloorAgreesWithFilter(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	ctx := context.Background()
	var fastPods, covered, looked, refilled int
	for c := range 200 {
		var infos []*framework.NodeInfo
		var topos []*v1alpha1.NodeTopology
		// One shape of node per cluster, as a node pool has.
		numa, cpus, mem := 1+rng.Intn(4), 4+rng.Intn(13), int64(8+rng.Intn(57))*gi
		for n := range 8 + rng.Intn(33) {
			name := fmt.Sprint("n", n)
			if rng.Intn(10) != 0 {
				topo := uniform(name, numa, cpus, mem)
				if rng.Intn(8) == 0 {
					topo.Status.NUMAPinning = v1alpha1.PinningOff
				}
				topos = append(topos, topo)
			}
			n := rng.Intn(3) + rng.Intn(2)*rng.Intn(12) // a few nodes nearly full
			infos = append(infos, nodeInfo(name, pinnedPods(rng, name, n, 6, 12, numa)...))
		}
		pl, _ := newPlugin(t, infos, topos...)
		nodes := list(infos)
		for range 5 {
			ann := randomPolicy(rng)
			p := pod("p", fmt.Sprintf("%dm", 100+rng.Intn(cpus*1000)), 1+rng.Int63n(mem), ann)
			state := newState()
			if _, st := pl.PreFilter(ctx, state, p, nodes); st.Code() == fwk.Skip {
				continue
			}
			s, _ := readState(state)
			if s.fast == nil {
				continue
			}
			fastPods++
			fast := s.fast
			check := func(ni *framework.NodeInfo) {
				t.Helper()
				gotFilter := pl.Filter(ctx, state, p, ni)
				gotScore, _ := pl.Score(ctx, state, p, ni)
				s.fast = nil
				wantFilter := pl.Filter(ctx, state, p, ni)
				wantScore, _ := pl.Score(ctx, state, p, ni)
				s.fast = fast
				if gotFilter.Code() != wantFilter.Code() {
					t.Fatalf("cluster %d, node %s: Filter = %v with the spare floor, %v after a look, for %+v (policy %q)",
						c, ni.Node().Name, gotFilter, wantFilter, s.req, s.policy)
				}
				if wantFilter.IsSuccess() && fast.one && gotScore != wantScore {
					t.Fatalf("cluster %d, node %s: Score = %d with the spare floor, %d after a look", c, ni.Node().Name, gotScore, wantScore)
				}
			}
			for _, ni := range infos {
				if fast.covers(ni.GetGeneration()) {
					covered++
				} else {
					looked++
				}
				check(ni)
			}
			// A node the spare floor held for, given a pod that fills it: a new generation,
			// and Filter looks again.
			for _, ni := range infos {
				if !fast.covers(ni.GetGeneration()) || ni.Node() == nil {
					continue
				}
				filler := pod(fmt.Sprint("filler-", c), "64", 256*gi, nil)
				ni.AddPod(on(ni.Node().Name, filler))
				if fast.covers(ni.GetGeneration()) {
					t.Fatalf("cluster %d: the spare floor still holds for %s after it was given a pod", c, ni.Node().Name)
				}
				if st := pl.Filter(ctx, state, p, ni); st.IsSuccess() {
					t.Fatalf("cluster %d: Filter passed %s after a pod filled it: %v", c, ni.Node().Name, st)
				}
				refilled++
				if err := ni.RemovePod(klog.Background(), filler); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	// The spare floor must do its work: many nodes passed at once, and some looked at.
	if fastPods < 100 || covered <= looked || looked == 0 || refilled == 0 {
		t.Fatalf("%d pods on the spare floor, %d nodes passed at once, %d looked at, %d refilled; want at least 100 pods, most nodes passed at once, some looked at",
			fastPods, covered, looked, refilled)
	}
	t.Logf("%d pods on the spare floor: %d nodes passed at once, %d looked at, %d refilled", fastPods, covered, looked, refilled)
}
