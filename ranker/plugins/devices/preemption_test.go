package devices

import (
	"context"
	"testing"

	"sextant.io/sextant/ranker/plugins/cycletest"

	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"sextant.io/sextant/api/v1alpha1"
)

// heldBy publishes h as the holder of a device, as the agent does from the kubelet's
// PodResources.
func heldBy(h v1alpha1.DeviceHolder) func(*v1alpha1.PCIDevice) {
	return func(d *v1alpha1.PCIDevice) { d.Holder = &h }
}

// TestPreemptionFreesHeldDevices follows kube-scheduler's preemption dry run on one
// node: it takes the victim off a copy of the NodeInfo and tells the PreFilter
// extensions on a copy of the cycle state, then runs Filter. The agent publishes a
// holder for the victim's GPUs too (the kubelet's record), which must not keep them
// taken once the victim is gone, nor once it is gone from the copies only.
func TestPreemptionFreesHeldDevices(t *testing.T) {
	const a, b = "0000:01:00.0", "0000:02:00.0"
	twoGPUs := map[v1alpha1.DeviceKind]int64{v1alpha1.KindGPU: 2}
	for _, tc := range []struct {
		name string
		// holder is published for both GPUs; annotated says whether the victim carries
		// devices.sextant.io/allocated for them (the ranker placed it).
		holder    v1alpha1.DeviceHolder
		annotated bool
		// remove tells DeviceAware's RemovePod of the victim; reprieve then adds it back
		// (AddPod), on a further copy of the state and NodeInfo.
		remove, reprieve bool
		want             fwk.Code
	}{
		{name: "victim removed: its devices are free", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim", UID: "victim"},
			annotated: true, remove: true, want: fwk.Success},
		{name: "victim off the NodeInfo only: its holder still counts", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim", UID: "victim"},
			annotated: true, want: fwk.Unschedulable},
		{name: "holder without UID: matched by namespace and name", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim"},
			annotated: true, remove: true, want: fwk.Success},
		{name: "holder of another pod of the same name: still taken", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim", UID: "earlier"},
			annotated: true, remove: true, want: fwk.Unschedulable},
		{name: "holder in another namespace: still taken", holder: v1alpha1.DeviceHolder{Namespace: "other", Name: "victim"},
			annotated: true, remove: true, want: fwk.Unschedulable},
		{name: "another scheduler's victim, known by its holder alone", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim", UID: "victim"},
			remove: true, want: fwk.Success},
		{name: "victim reprieved: its devices are taken again", holder: v1alpha1.DeviceHolder{Namespace: "default", Name: "victim", UID: "victim"},
			annotated: true, remove: true, reprieve: true, want: fwk.Unschedulable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ann map[string]string
			if tc.annotated {
				ann = cycletest.Allocated(v1alpha1.KindGPU, a, b)
			}
			victim := cycletest.On("n", cycletest.Pod("victim", "", twoGPUs, ann))
			topo := cycletest.WithDevice(cycletest.WithDevice(cycletest.Topology("n", 1, 4, cycletest.GPU(a, 0), cycletest.GPU(b, 0)), a, heldBy(tc.holder)), b, heldBy(tc.holder))
			ni := cycletest.NodeInfo("n", victim)
			dp := plugins(t, []*framework.NodeInfo{ni}, topo)
			ctx := context.Background()
			p := cycletest.Pod("p", "", twoGPUs, nil)
			state := cycletest.NewState()
			if _, st := dp.PreFilter(ctx, state, p, nil); !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			if st := dp.Filter(ctx, state, p, ni); st.Code() != fwk.Unschedulable {
				t.Fatalf("setup: Filter with the victim = %v, want Unschedulable", st)
			}
			ext := dp.PreFilterExtensions()
			if ext == nil {
				t.Fatal("DeviceAware has no PreFilterExtensions: preemption cannot tell it a victim is gone")
			}
			victimInfo, err := framework.NewPodInfo(victim)
			if err != nil {
				t.Fatal(err)
			}

			// As DryRunPreemption and SelectVictimsOnNode do: copies of both.
			simState, sim := state.Clone(), ni.Snapshot()
			if err := sim.RemovePod(klog.Background(), victim); err != nil {
				t.Fatal(err)
			}
			// The plain answer for this NodeInfo is cached first: the simulation must
			// not read it.
			if st := dp.Filter(ctx, state, p, sim); st.Code() != fwk.Unschedulable {
				t.Fatalf("setup: Filter of the copy without the simulation = %v, want Unschedulable", st)
			}
			if tc.remove {
				if st := ext.RemovePod(ctx, simState, p, victimInfo, sim); !st.IsSuccess() {
					t.Fatalf("RemovePod: %v", st)
				}
			}
			got := dp.Filter(ctx, simState, p, sim)
			if tc.reprieve {
				if got.Code() != fwk.Success {
					t.Fatalf("setup: Filter with the victim removed = %v, want Success", got)
				}
				backState, back := simState.Clone(), sim.Snapshot()
				back.AddPodInfo(victimInfo)
				if st := ext.AddPod(ctx, backState, p, victimInfo, back); !st.IsSuccess() {
					t.Fatalf("AddPod: %v", st)
				}
				got = dp.Filter(ctx, backState, p, back)
				// The copy the victim was added back to is the copy's own.
				if st := dp.Filter(ctx, simState, p, sim); st.Code() != fwk.Success {
					t.Errorf("AddPod on a clone of the state reached the state it was cloned from: Filter = %v, want Success", st)
				}
			}
			if got.Code() != tc.want {
				t.Errorf("Filter in the simulation = %v, want %v", got, tc.want)
			}
			// Neither the cycle's own state nor the per-node cache learned of the
			// simulation.
			if st := dp.Filter(ctx, state, p, sim); st.Code() != fwk.Unschedulable {
				t.Errorf("Filter of the copy on the cycle's own state = %v, want Unschedulable: the simulation leaked", st)
			}
			if st := dp.Filter(ctx, state, p, ni); st.Code() != fwk.Unschedulable {
				t.Errorf("Filter of the node on the cycle's own state = %v, want Unschedulable: the simulation leaked", st)
			}
		})
	}
}
