package main

import (
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// newSchedulerCommand copies kube-scheduler's command to add a step; it must take the
// same flags with the same defaults, so that upgrading kube-scheduler cannot silently
// drop or change one.
func TestSchedulerCommandFlags(t *testing.T) {
	ours, theirs := newSchedulerCommand(nil).Flags(), app.NewSchedulerCommand().Flags()
	seen := 0
	theirs.VisitAll(func(f *pflag.Flag) {
		seen++
		g := ours.Lookup(f.Name)
		switch {
		case g == nil:
			t.Errorf("flag --%s of kube-scheduler is missing", f.Name)
		case g.DefValue != f.DefValue || g.Value.Type() != f.Value.Type():
			t.Errorf("flag --%s: default %q (%s), kube-scheduler's %q (%s)", f.Name, g.DefValue, g.Value.Type(), f.DefValue, f.Value.Type())
		case g.Usage != f.Usage && f.Name != "help": // help names the command
			t.Errorf("flag --%s: usage %q, kube-scheduler's %q", f.Name, g.Usage, f.Usage)
		}
	})
	ours.VisitAll(func(f *pflag.Flag) {
		if theirs.Lookup(f.Name) == nil {
			t.Errorf("flag --%s is not kube-scheduler's", f.Name)
		}
	})
	if seen < 50 {
		t.Errorf("kube-scheduler has only %d flags: the comparison compared nothing", seen)
	}
}
