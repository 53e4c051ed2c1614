package annotations

import (
	"slices"
	"strings"
	"testing"
)

func TestParseNUMANodes(t *testing.T) {
	cases := []struct {
		in   string
		want []int32
		err  bool
	}{
		{in: "0", want: []int32{0}},
		{in: "1,0", want: []int32{0, 1}},
		{in: " 3 , 1,3", want: []int32{1, 3}},
		{in: "1023", want: []int32{1023}},
		{in: "1024", err: true},
		{in: "", err: true},
		{in: "0,", err: true},
		{in: "-1", err: true},
		{in: "+1", err: true},
		{in: "0x1", err: true},
		{in: "00001", err: true},
		{in: "1,a", err: true},
	}
	for _, c := range cases {
		got, err := ParseNUMANodes(c.in)
		if (err != nil) != c.err {
			t.Errorf("ParseNUMANodes(%q) error = %v, want error %v", c.in, err, c.err)
			continue
		}
		if err != nil {
			if !strings.Contains(err.Error(), NUMANodes) || !strings.Contains(err.Error(), "accepted form") {
				t.Errorf("ParseNUMANodes(%q) error %q names neither the annotation nor the accepted form", c.in, err)
			}
			continue
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("ParseNUMANodes(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestParseNUMANodesAllIDs(t *testing.T) {
	parts := make([]string, 0, 2*MaxNUMANodes)
	for i := MaxNUMANodes - 1; i >= 0; i-- {
		parts = append(parts, FormatNUMANodes([]int32{int32(i)}), FormatNUMANodes([]int32{int32(i)}))
	}
	got, err := ParseNUMANodes(strings.Join(parts, ","))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != MaxNUMANodes || got[0] != 0 || got[MaxNUMANodes-1] != MaxNUMANodes-1 || !slices.IsSorted(got) {
		t.Fatalf("got %d IDs from %d to %d, want all %d in order", len(got), got[0], got[len(got)-1], MaxNUMANodes)
	}
}

func TestAppendNUMANodesReusesBuffer(t *testing.T) {
	buf := make([]int32, 0, 8)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = AppendNUMANodes(buf, "1,0,3")
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per parse into a large enough buffer, want 0", allocs)
	}
}

func TestErrorsAreShort(t *testing.T) {
	_, err := ParseNUMANodes(strings.Repeat("9", 100000))
	if err == nil || len(err.Error()) > 400 {
		t.Fatalf("error for a 100000-byte value is %d bytes long, want a short one: %v", len(err.Error()), err)
	}
}

func FuzzParseNUMANodes(f *testing.F) {
	for _, s := range []string{"0", "0,1", " 1 ,0", "1023", "1024", "", ",", "-1", "1,,2", "00", "٣"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := ParseNUMANodes(s)
		if err != nil {
			return
		}
		if len(ids) == 0 || len(ids) > MaxNUMANodes || !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
			t.Fatalf("ParseNUMANodes(%q) = %v: want 1..%d sorted distinct IDs", s, ids, MaxNUMANodes)
		}
		for _, id := range ids {
			if id < 0 || id >= MaxNUMANodes {
				t.Fatalf("ParseNUMANodes(%q) returned ID %d out of range", s, id)
			}
		}
		// What the ranker formats, the agent parses back to the same IDs.
		again, err := ParseNUMANodes(FormatNUMANodes(ids))
		if err != nil || !slices.Equal(again, ids) {
			t.Fatalf("round trip of %v: %v, %v", ids, again, err)
		}
	})
}

func FuzzParseNUMAPolicy(f *testing.F) {
	for _, s := range []string{"", "single-numa-node", "Single-NUMA-Node", "restricted"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseNUMAPolicy(s)
		if (err == nil) != (p == PolicySingleNUMANode) {
			t.Fatalf("ParseNUMAPolicy(%q) = %q, %v", s, p, err)
		}
	})
}

func TestParseNUMAPolicy(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    NUMAPolicyValue
		wantErr bool
	}{
		{value: "single-numa-node", want: PolicySingleNUMANode},
		{value: "", wantErr: true},
		{value: "Single-NUMA-Node", wantErr: true},
		{value: "best-effort", wantErr: true},
	} {
		got, err := ParseNUMAPolicy(tc.value)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseNUMAPolicy(%q) = %q, %v; want %q, error %v", tc.value, got, err, tc.want, tc.wantErr)
		}
		if err != nil && (!strings.Contains(err.Error(), NUMAPolicy) || !strings.Contains(err.Error(), "single-numa-node")) {
			t.Errorf("ParseNUMAPolicy(%q) error %q must name the annotation and the accepted form", tc.value, err)
		}
	}
	if p, err := PodNUMAPolicy(map[string]string{"other": "x"}); err != nil || p != PolicyNone {
		t.Errorf("PodNUMAPolicy without the annotation = %q, %v; want none", p, err)
	}
}
