package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"

	"sextant.io/sextant/ranker/profile"
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

// TestCheckBinder: a profile that enables NUMAAware or DeviceAware must bind with
// SextantBinder; the chart's profile does.
func TestCheckBinder(t *testing.T) {
	if err := checkBinder([]config.KubeSchedulerProfile{*chartProfile(t)}); err != nil {
		t.Errorf("the chart's profile: %v", err)
	}
	head := "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: s\n"
	for _, tc := range []struct {
		name, plugins string
		wantErr       []string
	}{
		{"the shared profile", profile.Plugins, nil},
		{"default-scheduler alone", "", nil},
		{"NUMAAware with DefaultBinder", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
`, []string{`profile "s"`, "NUMAAware", "SextantBinder", "DefaultBinder"}},
		{"both, SextantBinder beside DefaultBinder", `  plugins:
    multiPoint:
      enabled:
      - name: NUMAAware
      - name: DeviceAware
      - name: SextantBinder
`, []string{"NUMAAware and DeviceAware", "disable DefaultBinder"}},
		{"DeviceAware at reserve only, SextantBinder at bind", `  plugins:
    reserve:
      enabled:
      - name: DeviceAware
    bind:
      enabled:
      - name: SextantBinder
      disabled:
      - name: '*'
`, nil},
		{"BandwidthAware alone needs no binder of ours", `  plugins:
    multiPoint:
      enabled:
      - name: BandwidthAware
`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := loadProfile(t, tc.name, head+tc.plugins)
			err := checkBinder([]config.KubeSchedulerProfile{*p})
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
