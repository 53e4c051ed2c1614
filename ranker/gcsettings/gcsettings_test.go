package gcsettings

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// writeTree creates files (path relative to dir → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
	}{{
		name: "v2 container cgroup with a limit",
		files: map[string]string{
			"proc/self/cgroup":                                     "0::/kubepods.slice/pod1/cri-abc\n",
			"sys/fs/cgroup/memory.max":                             "max\n",
			"sys/fs/cgroup/kubepods.slice/memory.max":              "8589934592\n",
			"sys/fs/cgroup/kubepods.slice/pod1/memory.max":         "max\n",
			"sys/fs/cgroup/kubepods.slice/pod1/cri-abc/memory.max": "536870912\n",
		},
		want: 536870912,
	}, {
		name: "v2 an ancestor's limit is smaller",
		files: map[string]string{
			"proc/self/cgroup":             "0::/a/b\n",
			"sys/fs/cgroup/a/memory.max":   "1000000\n",
			"sys/fs/cgroup/a/b/memory.max": "2000000\n",
		},
		want: 1000000,
	}, {
		name: "v2 inside a cgroup namespace: the path is not under the mount",
		files: map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "268435456\n",
		},
		want: 268435456,
	}, {
		name: "v2 without any limit",
		files: map[string]string{
			"proc/self/cgroup":                    "0::/user.slice/session-1.scope\n",
			"sys/fs/cgroup/user.slice/memory.max": "max\n",
		},
	}, {
		name: "v1 memory controller",
		files: map[string]string{
			"proc/self/cgroup":                                             "12:cpu,cpuacct:/kubepods/pod1/abc\n9:memory:/kubepods/pod1/abc\n1:name=systemd:/kubepods/pod1/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                   "9223372036854771712\n",
			"sys/fs/cgroup/memory/kubepods/pod1/abc/memory.limit_in_bytes": "402653184\n",
		},
		want: 402653184,
	}, {
		name: "v1 unlimited",
		files: map[string]string{
			"proc/self/cgroup":                           "9:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
		},
	}, {
		name:  "no membership file",
		files: map[string]string{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, tc.files)
			got, err := CgroupMemoryLimit(filepath.Join(dir, "proc/self/cgroup"), filepath.Join(dir, "sys/fs/cgroup"))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("limit = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCgroupMemoryLimitMalformed(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": "lots\n",
	})
	_, err := CgroupMemoryLimit(filepath.Join(dir, "proc/self/cgroup"), filepath.Join(dir, "sys/fs/cgroup"))
	if err == nil || !strings.Contains(err.Error(), `"lots"`) || !strings.Contains(err.Error(), "memory.max") {
		t.Fatalf("error = %v, want one naming the file and the bad value", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o       Options
		wantErr string
	}{
		{Options{GCPercent: 400, MemoryLimitRatio: 0.9}, ""},
		{Options{GCPercent: 0, MemoryLimitRatio: 0}, ""},
		{Options{GCPercent: 100, MemoryLimitRatio: 1}, ""},
		{Options{GCPercent: -5, MemoryLimitRatio: 0.9}, "--gc-percent -5"},
		{Options{GCPercent: 400, MemoryLimitRatio: 1.5}, "--memory-limit-ratio 1.5"},
		{Options{GCPercent: 400, MemoryLimitRatio: -0.1}, "--memory-limit-ratio -0.1"},
	} {
		err := tc.o.Validate()
		if tc.wantErr == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.o, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.wantErr)
		}
	}
}

// restoreGC puts the runtime's GC settings back after a test changes them.
func restoreGC(t *testing.T) {
	percent := debug.SetGCPercent(-1)
	debug.SetGCPercent(percent)
	limit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

func TestApply(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"proc/self/cgroup":         "0::/\n",
		"sys/fs/cgroup/memory.max": "1000000000\n",
	})
	opts := func() *Options {
		o := NewOptions()
		o.ProcSelfCgroup = filepath.Join(dir, "proc/self/cgroup")
		o.CgroupRoot = filepath.Join(dir, "sys/fs/cgroup")
		return o
	}
	noEnv := func(string) string { return "" }

	t.Run("flags", func(t *testing.T) {
		restoreGC(t)
		a, err := opts().Apply(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := debug.SetGCPercent(-1); got != DefaultGCPercent || a.GCPercent != DefaultGCPercent || a.GCPercentFrom != "--gc-percent" {
			t.Errorf("GC percent %d (applied %+v), want %d from the flag", got, a, DefaultGCPercent)
		}
		if got := debug.SetMemoryLimit(-1); got != 900000000 || a.MemoryLimitBytes != 900000000 || a.MemoryLimitFrom != "cgroup" || a.CgroupLimitBytes != 1000000000 {
			t.Errorf("memory limit %d (applied %+v), want 0.9 of the cgroup's 1000000000", got, a)
		}
	})
	t.Run("environment wins", func(t *testing.T) {
		restoreGC(t)
		debug.SetGCPercent(150)
		debug.SetMemoryLimit(123456789)
		env := map[string]string{"GOGC": "150", "GOMEMLIMIT": "123456789"}
		a, err := opts().Apply(func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if got := debug.SetGCPercent(-1); got != 150 || a.GCPercent != 150 || a.GCPercentFrom != "GOGC" {
			t.Errorf("GC percent %d (applied %+v), want GOGC's 150 untouched", got, a)
		}
		if got := debug.SetMemoryLimit(-1); got != 123456789 || a.MemoryLimitBytes != 123456789 || a.MemoryLimitFrom != "GOMEMLIMIT" {
			t.Errorf("memory limit %d (applied %+v), want GOMEMLIMIT's untouched", got, a)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		restoreGC(t)
		debug.SetGCPercent(100)
		before := debug.SetMemoryLimit(-1)
		o := opts()
		o.GCPercent, o.MemoryLimitRatio = 0, 0
		a, err := o.Apply(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if got := debug.SetGCPercent(-1); got != 100 || a.GCPercentFrom != "go default" {
			t.Errorf("GC percent %d (applied %+v), want Go's default left alone", got, a)
		}
		if got := debug.SetMemoryLimit(-1); got != before || a.MemoryLimitBytes != 0 {
			t.Errorf("memory limit %d (applied %+v), want it left at %d", got, a, before)
		}
	})
	t.Run("unreadable cgroup is no limit", func(t *testing.T) {
		restoreGC(t)
		before := debug.SetMemoryLimit(-1)
		bad := t.TempDir()
		writeTree(t, bad, map[string]string{"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "?\n"})
		o := opts()
		o.ProcSelfCgroup = filepath.Join(bad, "proc/self/cgroup")
		o.CgroupRoot = filepath.Join(bad, "sys/fs/cgroup")
		a, err := o.Apply(noEnv)
		if err != nil {
			t.Fatal(err)
		}
		if a.CgroupErr == nil || a.MemoryLimitBytes != 0 || debug.SetMemoryLimit(-1) != before {
			t.Errorf("applied %+v, want the cgroup error reported and no limit set", a)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		o := opts()
		o.MemoryLimitRatio = 2
		if _, err := o.Apply(noEnv); err == nil {
			t.Error("want an error for --memory-limit-ratio 2")
		}
	})
}
