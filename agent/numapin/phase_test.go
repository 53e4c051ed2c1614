package numapin

import "testing"

func TestPhaseNext(t *testing.T) {
	all := []phase{phaseUndecided, phaseDecided, phaseFresh, phaseFound, phaseNarrowed, phaseConfirmed}
	moves := map[phase]map[step]phase{
		phaseUndecided: {stepDecide: phaseDecided},
		phaseDecided:   {stepLookEmpty: phaseFresh, stepLookRunning: phaseFound},
		phaseFresh:     {stepNarrow: phaseNarrowed, stepConfirm: phaseConfirmed},
		phaseFound:     {stepNarrow: phaseNarrowed, stepConfirm: phaseConfirmed},
		phaseNarrowed:  {stepNarrow: phaseNarrowed, stepConfirm: phaseConfirmed},
	}
	for _, ph := range all {
		for _, s := range []step{stepDecide, stepLookEmpty, stepLookRunning, stepNarrow, stepConfirm} {
			want, ok := moves[ph][s]
			if !ok {
				want = ph // a step that does not apply leaves the phase
			}
			if got := ph.next(s); got != want {
				t.Errorf("%s, %s: %s, want %s", ph, s, got, want)
			}
			if want < ph {
				t.Errorf("%s, %s: moves back to %s", ph, s, want)
			}
		}
	}
}

func TestPathOf(t *testing.T) {
	for _, c := range []struct {
		ph       phase
		foreign  bool
		children int
		last     string
		want     string
	}{
		{phaseFresh, false, 0, "", pathPodCgroup},
		{phaseFound, false, 2, "", pathCatchUp},
		{phaseNarrowed, false, 0, pathPodCgroup, pathPodCgroup},
		// Once a narrowing had to catch up, containers may have run outside the set.
		{phaseNarrowed, false, 0, pathCatchUp, pathCatchUp},
		{phaseFound, true, 2, "", pathRepair},
		{phaseFresh, true, 0, "", pathRepair},
		{phaseConfirmed, false, 1, pathPodCgroup, pathRepair},
	} {
		if got := pathOf(c.ph, c.foreign, c.children, c.last); got != c.want {
			t.Errorf("pathOf(%s, foreign %v, %d children, last %q) = %q, want %q", c.ph, c.foreign, c.children, c.last, got, c.want)
		}
	}
}
