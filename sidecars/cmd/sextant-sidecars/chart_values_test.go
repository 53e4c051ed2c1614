package main

import (
	"encoding/json"
	"slices"
	"testing"

	"sextant.io/sextant/internal/charttest"
)

// pflag reads --exit-command as CSV: elements with commas or quotes are rendered quoted,
// so the controller gets the list back as it was, and the pod policy compares with the
// list itself.
func TestChartExitCommandWithCommas(t *testing.T) {
	want := []string{"/bin/sh", "-c", `echo a,b "c" ""`}
	objs := charttest.Objects(t, charttest.Render(t, charttest.Values("webhook.exitCommand", []any{want[0], want[1], want[2]})))
	dep := objs["Deployment/sextant-virtual-node-controller"]
	if dep == nil {
		t.Fatal("no Deployment sextant-virtual-node-controller")
	}
	args := charttest.Strings(charttest.Containers(dep)[0]["args"])
	cmd, o := virtualNodeControllerCommand()
	if err := cmd.ParseFlags(args[1:]); err != nil {
		t.Fatalf("args %q: %v", args, err)
	}
	if !slices.Equal(o.exitCommand, want) {
		t.Errorf("args %q: --exit-command parses to %q, want %q", args, o.exitCommand, want)
	}
	var vap struct {
		Spec struct {
			Variables []struct{ Name, Expression string }
		}
	}
	if err := json.Unmarshal(mustMarshal(t, objs["ValidatingAdmissionPolicy/sextant-pod-annotations"]), &vap); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range vap.Spec.Variables {
		if v.Name != "exitCommand" {
			continue
		}
		found = true
		// A CEL string literal holding the list's JSON, as the controller writes it.
		var lit string
		if err := json.Unmarshal([]byte(v.Expression), &lit); err != nil {
			t.Fatalf("exitCommand expression %s: %v", v.Expression, err)
		}
		if list := string(mustMarshal(t, want)); lit != list {
			t.Errorf("the pod policy's exitCommand is %s, want %s", lit, list)
		}
	}
	if !found {
		t.Error("no variable exitCommand in the pod policy")
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
