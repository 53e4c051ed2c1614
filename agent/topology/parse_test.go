package topology

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int32
		wantErr string
	}{
		{in: "", want: []int32{}},
		{in: "\n", want: []int32{}},
		{in: "0", want: []int32{0}},
		{in: "0-3\n", want: []int32{0, 1, 2, 3}},
		{in: "0-3,8-11", want: []int32{0, 1, 2, 3, 8, 9, 10, 11}},
		{in: "8-9,0-1", want: []int32{0, 1, 8, 9}},
		{in: "0-31\n\x00", want: seq(0, 31)},
		{in: "1,3,5", want: []int32{1, 3, 5}},
		{in: "0-3,2-5", want: []int32{0, 1, 2, 3, 4, 5}},
		{in: "0-7:2", want: []int32{0, 2, 4, 6}},
		{in: "0-5:2147483647", want: []int32{0}},
		{in: "0-1,x", wantErr: `bad CPU number "x"`},
		{in: "3-1", wantErr: "runs backwards"},
		{in: "0,,1", wantErr: "empty element"},
		{in: "0-", wantErr: "bad CPU number"},
		{in: "-1", wantErr: "bad CPU number"},
		{in: "0-65536", wantErr: "beyond"},
		{in: "0-4294967295", wantErr: "beyond"},
		{in: "1:2", wantErr: "stride without a range"},
		{in: "0-3:0", wantErr: "bad stride"},
		{in: "0x1", wantErr: "bad CPU number"},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseCPUList(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseCPUMask(t *testing.T) {
	tests := []struct {
		in      string
		want    []int32
		wantErr bool
	}{
		{in: "", want: []int32{}},
		{in: "ff\n", want: seq(0, 7)},
		{in: "00000000,000000ff", want: seq(0, 7)},
		{in: "00000001,00000000", want: []int32{32}},
		{in: "0000ff00,00000000,00000000,00000000", want: seq(104, 111)},
		{in: "000000f0", want: seq(4, 7)},
		{in: "0", want: []int32{}},
		{in: "zz", wantErr: true},
		{in: "1,,1", wantErr: true},
		{in: "123456789", wantErr: true},
		{in: strings.Repeat("ffffffff,", 3000) + "1", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseCPUMask(tt.in)
		if tt.wantErr {
			if err == nil {
				t.Errorf("ParseCPUMask(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUMask(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestFormatCPUList(t *testing.T) {
	tests := []struct {
		in   []int32
		want string
	}{
		{nil, ""},
		{[]int32{0}, "0"},
		{[]int32{0, 1, 2, 3, 8, 9, 10, 11}, "0-3,8-11"},
		{[]int32{5, 1, 3, 3}, "1,3,5"},
		{[]int32{0, 1, 3, 4}, "0-1,3-4"},
	}
	for _, tt := range tests {
		if got := FormatCPUList(tt.in); got != tt.want {
			t.Errorf("FormatCPUList(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr error
	}{
		{name: "proc", in: "MemTotal:       16331824 kB\nMemFree:  1 kB\n", want: 16331824 * 1024},
		{name: "node", in: "Node 1 MemTotal:       16777216 kB\nNode 1 MemFree: 1 kB\n", want: 16777216 * 1024},
		{name: "not first", in: "Node 0 MemFree: 1 kB\nNode 0 MemTotal: 2 kB\n", want: 2048},
		{name: "nul padded", in: "MemTotal: 4 kB\n\x00", want: 4096},
		{name: "empty", in: "", wantErr: errNoMemTotal},
		{name: "truncated before MemTotal", in: "Node 0 MemFree: 1 kB\nNode 0 Mem", wantErr: errNoMemTotal},
		{name: "truncated value", in: "MemTotal:  16", wantErr: errMalformed},
		{name: "no unit", in: "MemTotal: 16 \n", wantErr: errMalformed},
		{name: "garbage value", in: "MemTotal: x kB\n", wantErr: errMalformed},
		{name: "negative", in: "MemTotal: -1 kB\n", wantErr: errMalformed},
		{name: "overflow", in: "MemTotal: 9223372036854775807 kB\n", wantErr: errMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMeminfo(tt.in)
			switch {
			case tt.wantErr == errMalformed:
				if err == nil || !strings.Contains(err.Error(), "malformed") {
					t.Errorf("ParseMeminfo(%q) = %d, %v; want a malformed error", tt.in, got, err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("ParseMeminfo(%q) = %d, %v; want %v", tt.in, got, err, tt.wantErr)
				}
			case err != nil || got != tt.want:
				t.Errorf("ParseMeminfo(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
		})
	}
}

var errMalformed = errors.New("malformed (test marker)")

func TestParseDistances(t *testing.T) {
	if got, err := parseDistances("10 21\n"); err != nil || !slices.Equal(got, []int32{10, 21}) {
		t.Errorf("parseDistances = %v, %v", got, err)
	}
	for _, bad := range []string{"", "10 x", "10 256", "-1"} {
		if got, err := parseDistances(bad); err == nil {
			t.Errorf("parseDistances(%q) = %v, want an error", bad, got)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		class uint32
		want  string
	}{
		{0x030000, "gpu"}, {0x030200, "gpu"}, {0x038000, "gpu"},
		{0x020000, "nic"}, {0x020700, "nic"}, {0x028000, "nic"},
		{0x010802, "nvme"}, {0x010801, "other"}, {0x010601, "other"},
		{0x120000, "accelerator"}, {0x120100, "accelerator"}, {0x0b4000, "accelerator"},
		{0x0b2000, "other"}, {0x060000, "other"}, {0x088000, "other"}, {0xffff00, "other"},
	}
	for _, tt := range tests {
		if got := Classify(tt.class); string(got) != tt.want {
			t.Errorf("Classify(%#06x) = %s, want %s", tt.class, got, tt.want)
		}
	}
}

func TestComparePCIAddress(t *testing.T) {
	addrs := []string{"10000:00:04.0", "0000:80:02.0", "0000:00:1f.3", "ffff:00:00.0", "0000:00:02.0"}
	slices.SortFunc(addrs, comparePCIAddress)
	want := []string{"0000:00:02.0", "0000:00:1f.3", "0000:80:02.0", "ffff:00:00.0", "10000:00:04.0"}
	if !slices.Equal(addrs, want) {
		t.Errorf("sorted = %v, want %v", addrs, want)
	}
}

func seq(lo, hi int32) []int32 {
	var s []int32
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}
