package topology

import (
	"slices"
	"strings"
	"testing"
)

// The seeds in testdata/fuzz run with every plain `go test`; `go test -fuzz=FuzzX`
// explores from them.

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0-3,8-11", "0", "", "0-31\n\x00", "0-7:2", "3-1", "0-4294967295"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
			t.Fatalf("ParseCPUList(%q) = %v: not sorted and unique", s, cpus)
		}
		for _, c := range cpus {
			if c < 0 || c >= maxCPUs {
				t.Fatalf("ParseCPUList(%q) has CPU %d out of range", s, c)
			}
		}
		// Whatever parsed must survive a round trip through the canonical form.
		again, err := ParseCPUList(FormatCPUList(cpus))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("round trip of %q: %v, %v; want %v", s, again, err, cpus)
		}
	})
}

func FuzzParseCPUMask(f *testing.F) {
	for _, s := range []string{"ff", "00000000,000000ff", "", "0000ff00,00000000", "zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUMask(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(cpus) {
			t.Fatalf("ParseCPUMask(%q) = %v: not sorted", s, cpus)
		}
		for _, c := range cpus {
			if c < 0 || c >= maxCPUs {
				t.Fatalf("ParseCPUMask(%q) has CPU %d out of range", s, c)
			}
		}
	})
}

func FuzzParseMeminfo(f *testing.F) {
	for _, s := range []string{
		"MemTotal:       16331824 kB\nMemFree: 1 kB\n",
		"Node 0 MemTotal:       16777216 kB\n",
		"Node 0 MemFree: 1 kB\nNode 0 Mem",
		"MemTotal: 16",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		mem, err := ParseMeminfo(s)
		if err != nil {
			return
		}
		if mem < 0 || mem%1024 != 0 {
			t.Fatalf("ParseMeminfo(%q) = %d", s, mem)
		}
		if !strings.Contains(s, "MemTotal:") {
			t.Fatalf("ParseMeminfo(%q) = %d without a MemTotal line", s, mem)
		}
	})
}

func FuzzParseDistances(f *testing.F) {
	for _, s := range []string{"10 21", "10", "", "10 256"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDistances(s)
		if err != nil {
			return
		}
		if len(d) == 0 {
			t.Fatalf("parseDistances(%q) = empty without an error", s)
		}
		for _, x := range d {
			if x < 0 || x > 255 {
				t.Fatalf("parseDistances(%q) has %d", s, x)
			}
		}
	})
}
