package binder

import (
	"context"
	"maps"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func TestStagingNeedsThePreFilter(t *testing.T) {
	state := framework.NewCycleState()
	if Stage(state, "a", "1") {
		t.Fatal("Stage succeeded without SextantBinder's PreFilter: the caller would take for carried to the pod a decision nothing carries")
	}
	if Binds(state) || Staged(state) != nil {
		t.Fatal("something is staged without a staging area")
	}
	if Stage(nil, "a", "1") || Binds(nil) || Staged(nil) != nil {
		t.Fatal("a nil state stages")
	}
	Unstage(nil, "a") // must not panic
}

func TestStageUnstage(t *testing.T) {
	b := &SextantBinder{}
	state := framework.NewCycleState()
	if _, st := b.PreFilter(context.Background(), state, &v1.Pod{}, nil); !st.IsSkip() {
		t.Fatalf("PreFilter = %v, want Skip (the plugin filters nothing)", st)
	}
	if !Stage(state, "numa.sextant.io/nodes", "0,1") || !Stage(state, "devices.sextant.io/allocated", "{}") {
		t.Fatal("Stage failed after PreFilter")
	}
	if !Binds(state) || Staged(state)["numa.sextant.io/nodes"] != "0,1" {
		t.Errorf("Staged = %v after Stage", Staged(state))
	}
	// A clone (preemption dry runs) shares the area: Reserve may have run on either.
	if Staged(state.Clone())["numa.sextant.io/nodes"] != "0,1" {
		t.Error("a clone of the state lost the staged annotation")
	}
	Unstage(state, "numa.sextant.io/nodes")
	want := map[string]string{"devices.sextant.io/allocated": "{}"}
	got := Staged(state)
	if !maps.Equal(got, want) {
		t.Errorf("Staged = %v, want %v", got, want)
	}
	got["x"] = "y"
	if _, ok := Staged(state)["x"]; ok {
		t.Error("Staged returned the live map, not a copy")
	}
	// Each cycle starts empty.
	if _, st := b.PreFilter(context.Background(), state, &v1.Pod{}, nil); !st.IsSkip() {
		t.Fatal(st)
	}
	if Staged(state) != nil {
		t.Errorf("a new cycle's staging area holds %v", Staged(state))
	}
}
