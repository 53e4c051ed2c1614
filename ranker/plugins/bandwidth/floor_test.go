package bandwidth

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/annotations"
	"sextant.io/sextant/api/v1alpha1"
	"sextant.io/sextant/ranker/heartbeat"
)

// floorCluster is a plugin over random nodes whose NodeInfos, unlike the other tests',
// stay the same objects from PreFilter to Filter, as the scheduler's snapshot does.
type floorCluster struct {
	rng   *rand.Rand
	clock time.Time
	store *heartbeat.Store
	pl    *BandwidthAware
	nodes []fwk.NodeInfo
}

func newFloorCluster(t *testing.T, seed int64, nodes int, window BestFitWindow) *floorCluster {
	t.Helper()
	c := &floorCluster{rng: rand.New(rand.NewSource(seed)), clock: now, store: heartbeat.NewFromObjects()}
	args := testArgs(func(a *Args) { a.BestFitWindow = window })
	if err := args.Validate(); err != nil {
		t.Fatal(err)
	}
	c.pl = newPlugin(args, c.store, func() time.Time { return c.clock })
	for i := range nodes {
		c.addNode(fmt.Sprintf("node-%03d", i))
	}
	for range nodes / 2 {
		c.reserve()
	}
	return c
}

// addNode adds a node to the snapshot, with a random report (or none).
func (c *floorCluster) addNode(name string) {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	c.nodes = append(c.nodes, ni)
	if c.rng.Intn(20) > 0 {
		c.putReport(name)
	}
}

// putReport gives the node a new random report, received now: most full and fresh on
// the pod network, some on another network only, without a direction, partial,
// received long ago, or keeping guarantees.
func (c *floorCluster) putReport(name string) {
	rate := func() string { return fmt.Sprintf("%dM", c.rng.Intn(101)*100) }
	in, eg := rate(), rate()
	received := c.clock
	switch c.rng.Intn(20) {
	case 0:
		in = ""
	case 1:
		received = c.clock.Add(-2 * time.Minute)
	case 2, 3:
		// Turns stale within a floor's life.
		received = c.clock.Add(-time.Minute + time.Duration(c.rng.Intn(3000))*time.Millisecond)
	}
	r := report(name, in, eg, received)
	dir := func(rem string) v1alpha1.DirectionBandwidth {
		if rem == "" {
			return v1alpha1.DirectionBandwidth{}
		}
		capacity, remaining := resource.MustParse("10G"), resource.MustParse(rem)
		return v1alpha1.DirectionBandwidth{Capacity: &capacity, Remaining: &remaining}
	}
	network := annotations.PodNetwork
	if c.rng.Intn(20) == 0 {
		network = "storage"
	}
	nw := v1alpha1.NetworkBandwidth{Name: network, Interfaces: []string{"eth0"}, Bandwidth: v1alpha1.Bandwidth{Ingress: dir(in), Egress: dir(eg)}}
	if c.rng.Intn(5) == 0 {
		g := resource.MustParse(fmt.Sprintf("%dM", 500+c.rng.Intn(20)*500))
		nw.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionGuaranteesEnforced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonShaped}}
		nw.Guarantees = &v1alpha1.Guarantees{Ingress: v1alpha1.GuaranteedDirection{Capacity: &g}, Egress: v1alpha1.GuaranteedDirection{Capacity: &g}}
	}
	r.Status.Networks = []v1alpha1.NetworkBandwidth{nw}
	if c.rng.Intn(20) == 0 {
		r.Status.Window = &metav1.Duration{Duration: time.Second}
	}
	c.store.PutAt(r, received)
}

// randomPod asks for random rates, mostly on the pod network.
func (c *floorCluster) randomPod() *v1.Pod {
	rate := func() string { return fmt.Sprintf("%dM", 50*(1+c.rng.Intn(60))) }
	ann := map[string]string{}
	switch c.rng.Intn(3) {
	case 0:
		ann[annotations.IngressRequired] = rate()
	case 1:
		ann[annotations.EgressRequired] = rate()
	default:
		ann[annotations.IngressRequired], ann[annotations.EgressRequired] = rate(), rate()
	}
	if c.rng.Intn(2) == 0 {
		ann[annotations.IngressExpected] = "3G"
	}
	if c.rng.Intn(10) == 0 {
		ann[annotations.BandwidthNetwork] = "storage"
	}
	if c.rng.Intn(3) == 0 {
		ann[annotations.BandwidthStrategy] = string(annotations.MostHeadroom)
	}
	return testPod(ann)
}

// reserve places a random pod on a random node as this scheduler, or binds one there
// as another does, so that it counts against the node's guarantees.
func (c *floorCluster) reserve() {
	pod := c.randomPod()
	node := c.nodes[c.rng.Intn(len(c.nodes))].Node().Name
	if c.rng.Intn(2) == 0 {
		req, err := annotations.ParseBandwidth(pod.Annotations)
		if err != nil {
			panic(err)
		}
		c.pl.ledger.Reserve(pod, node, req)
		return
	}
	pod.Spec.NodeName = node
	pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(c.clock)}}
	c.pl.ledger.ObservePod(pod)
}

// change makes one random change a floor must not miss.
func (c *floorCluster) change() {
	switch c.rng.Intn(6) {
	case 0, 1:
		c.putReport(c.nodes[c.rng.Intn(len(c.nodes))].Node().Name)
	case 2:
		c.reserve()
	case 3:
		c.store.Delete(&v1alpha1.NodeBandwidth{ObjectMeta: metav1.ObjectMeta{Name: c.nodes[c.rng.Intn(len(c.nodes))].Node().Name}})
	case 4:
		c.addNode(fmt.Sprintf("late-%03d", len(c.nodes)))
	case 5:
		c.clock = c.clock.Add(time.Duration(c.rng.Intn(3000)) * time.Millisecond)
	}
}

// check schedules pods over the snapshot and fails t where Filter, using the floor,
// answers a node otherwise than Filter without it. It returns how many nodes the floor
// passed.
func (c *floorCluster) check(t *testing.T, pods int) (passed int) {
	t.Helper()
	ctx := context.Background()
	for range pods {
		pod := c.randomPod()
		state := framework.NewCycleState()
		if _, st := c.pl.PreFilter(ctx, state, pod, c.nodes); !st.IsSuccess() {
			continue
		}
		s, _ := readPodState(state)
		without := framework.NewCycleState()
		plain := *s
		plain.floor = nil
		without.Write(stateKey, &plain)
		for _, ni := range c.nodes {
			got, want := c.pl.Filter(ctx, state, pod, ni), c.pl.Filter(ctx, without, pod, ni)
			if got.Code() != want.Code() {
				t.Fatalf("pod %v on %s: Filter with the floor %v, without %v", pod.Annotations, ni.Node().Name, got, want)
			}
			if s.floor != nil && s.floor.passes(ni, ni.Node()) {
				passed++
			}
		}
	}
	return passed
}

// Filter passes a node on the floor only where it would pass the node by its record:
// over random nodes, reservations and guarantees, pods of every kind, and each change
// made after the floor was computed (a new, stale, partial or removed report, a
// reservation, a pod bound by another scheduler, a node added, time passing).
// Breaking any of the rules that mark a node (the store's listener, the ledger's
// hook, the generation bound) fails it.
func TestFloorAgreesWithFilter(t *testing.T) {
	for seed := range int64(20) {
		window := WindowPrefer
		if seed%4 == 3 {
			window = WindowStrict
		}
		c := newFloorCluster(t, seed, 150, window)
		passed := c.check(t, 10)
		for range 60 {
			c.change()
			passed += c.check(t, 3)
		}
		if window == WindowPrefer && passed == 0 {
			t.Fatalf("seed %d: the floor passed no node: the test checks nothing", seed)
		}
	}
}

// changingNodes are records that change one node's report while another is looked up:
// a computation of the floor reads the first node before the change and sees nothing
// of it, as a report arriving during the computation would.
type changingNodes struct {
	*heartbeat.Store
	// when the node named lookedUp is looked up, change is called, once.
	lookedUp string
	change   func()
}

func (n *changingNodes) NodeOf(node *v1.Node) *heartbeat.Node {
	if node.Name == n.lookedUp && n.change != nil {
		change := n.change
		n.change = nil
		change()
	}
	return n.Store.NodeOf(node)
}

// A change that lands while a floor is being computed, to a node the computation has
// already read, is marked in the floor the computation publishes.
func TestFloorMarksChangesDuringItsComputation(t *testing.T) {
	store := heartbeat.NewFromObjects()
	records := &changingNodes{Store: store}
	pl := newPlugin(testArgs(nil), records, func() time.Time { return now })
	var nodes []fwk.NodeInfo
	for i := range 100 {
		name := fmt.Sprintf("node-%03d", i)
		store.PutAt(report(name, "5G", "5G", now), now)
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		nodes = append(nodes, ni)
	}
	records.lookedUp = "node-099"
	records.change = func() { store.PutAt(report("node-000", "0", "0", now), now) }
	pod := testPod(map[string]string{annotations.IngressRequired: "1G"})
	state := framework.NewCycleState()
	if _, st := pl.PreFilter(context.Background(), state, pod, nodes); !st.IsSuccess() {
		t.Fatalf("PreFilter: %v", st)
	}
	if records.change != nil {
		t.Fatal("the change was not made during the computation")
	}
	s, _ := readPodState(state)
	if s.floor == nil || !s.floor.passes(nodes[1], nodes[1].Node()) {
		t.Fatalf("the floor does not pass an unchanged node: %+v", s.floor)
	}
	if st := pl.Filter(context.Background(), state, pod, nodes[0]); st.IsSuccess() {
		t.Fatal("Filter passed the node whose report dropped to 0 during the floor's computation")
	}
}
