package annotations

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestParseAllocation(t *testing.T) {
	many := make([]string, MaxAllocatedDevices+1)
	for i := range many {
		many[i] = fmt.Sprintf(`"0000:%02x:%02x.%d"`, i/256, (i/8)%32, i%8)
	}
	tests := []struct {
		name, value string
		wantErr     string
		wantGPUs    int
	}{
		{name: "one GPU", value: `{"sextant.io/gpu":["0000:3b:00.0"]}`, wantGPUs: 1},
		{name: "two kinds", value: `{"sextant.io/gpu":["0000:3b:00.0","10000:af:1f.7"],"sextant.io/nvme":["0000:01:00.0"]}`, wantGPUs: 2},
		{name: "empty map", value: `{}`},
		{name: "not JSON", value: `gpu=0000:3b:00.0`, wantErr: "not a JSON map"},
		{name: "a string, not a list", value: `{"sextant.io/gpu":"0000:3b:00.0"}`, wantErr: "not a JSON map"},
		{name: "not a device resource", value: `{"sextant.io/other":["0000:3b:00.0"]}`, wantErr: `"sextant.io/other" is not a device resource`},
		{name: "foreign resource", value: `{"nvidia.com/gpu":["0000:3b:00.0"]}`, wantErr: "not a device resource"},
		{name: "upper-case hex", value: `{"sextant.io/gpu":["0000:3B:00.0"]}`, wantErr: "not a PCI address"},
		{name: "function 8", value: `{"sextant.io/gpu":["0000:3b:00.8"]}`, wantErr: "not a PCI address"},
		{name: "path, not address", value: `{"sextant.io/gpu":["../../0000:3b"]}`, wantErr: "not a PCI address"},
		{name: "listed twice across kinds", value: `{"sextant.io/gpu":["0000:3b:00.0"],"sextant.io/nic":["0000:3b:00.0"]}`, wantErr: "listed twice"},
		{name: "too many devices", value: `{"sextant.io/nic":[` + strings.Join(many, ",") + `]}`, wantErr: "more than 4096 devices"},
		{name: "too long", value: `{"sextant.io/gpu":["` + strings.Repeat(" ", MaxAllocatedBytes) + `"]}`, wantErr: "longer than 65536 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ParseAllocation(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), DevicesAllocated) {
					t.Fatalf("ParseAllocation error %v, want one naming %s and %q", err, DevicesAllocated, tc.wantErr)
				}
				if len(err.Error()) > 1024 {
					t.Errorf("error is %d bytes long; it goes into events and must stay short", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := len(a["sextant.io/gpu"]); got != tc.wantGPUs {
				t.Errorf("%d GPUs, want %d", got, tc.wantGPUs)
			}
		})
	}
}

func TestAllocationString(t *testing.T) {
	a := Allocation{"sextant.io/nic": {"0000:03:00.0"}, "sextant.io/gpu": {"0000:02:00.0", "0000:01:00.0"}}
	const want = `{"sextant.io/gpu":["0000:01:00.0","0000:02:00.0"],"sextant.io/nic":["0000:03:00.0"]}`
	if got := a.String(); got != want {
		t.Errorf("String() = %s, want %s", got, want)
	}
}

var pciAddress = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

func FuzzParseAllocation(f *testing.F) {
	for _, s := range []string{`{"sextant.io/gpu":["0000:3b:00.0"]}`, `{}`, `null`, `{"sextant.io/gpu":null}`, `[]`, `{"sextant.io/gpu":["0000:3b:00.0","0000:3b:00.0"]}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for name, ids := range a {
			if !strings.HasPrefix(string(name), "sextant.io/") {
				t.Fatalf("accepted resource %q", name)
			}
			for _, id := range ids {
				// The hand-written check agrees with the CRD's pattern.
				if !pciAddress.MatchString(id) || seen[id] {
					t.Fatalf("accepted address %q (seen before: %v)", id, seen[id])
				}
				seen[id] = true
			}
		}
		again, err := ParseAllocation(a.String())
		if err != nil || again.String() != a.String() {
			t.Fatalf("round trip of %s: %v", a, err)
		}
	})
}

func FuzzIsPCIAddress(f *testing.F) {
	for _, s := range []string{"0000:3b:00.0", "10000000:ff:1f.7", "0000:3b:00", "0000:3b:00.8", "000:3b:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := IsPCIAddress(s), pciAddress.MatchString(s); got != want {
			t.Fatalf("IsPCIAddress(%q) = %v, the CRD pattern says %v", s, got, want)
		}
	})
}
