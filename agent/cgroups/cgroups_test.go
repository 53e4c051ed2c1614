package cgroups

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	uidBurstable  = "0b8c6a8e-5b3e-4c1a-9c6e-2f1d3a4b5c6d"
	uidBestEffort = "1c9d7b9f-6c4f-4d2b-8d7f-3a2e4b5c6d7e"
)

// fixture copies testdata/<name> into a temporary directory, so tests may write to it.
func fixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestDetectHierarchy(t *testing.T) {
	for _, c := range []struct {
		tree    string
		version Version
		dir     string
		err     string
	}{
		{tree: "v1-cgroupfs", version: V1, dir: "cpuset"},
		{tree: "v2-systemd", version: V2, dir: "."},
		{tree: "none", err: "no cpuset controller"},
	} {
		root := fixture(t, c.tree)
		h, err := DetectHierarchy(root)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), root) {
				t.Errorf("%s: err %v, want one containing %q and the root", c.tree, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.tree, err)
		}
		if h.Version != c.version || h.Dir != filepath.Join(root, c.dir) {
			t.Errorf("%s: %+v, want %s at %s", c.tree, h, c.version, c.dir)
		}
	}
}

func TestDetectHierarchyV2WithoutCpuset(t *testing.T) {
	root := fixture(t, "v2-systemd")
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DetectHierarchy(root); err == nil || !strings.Contains(err.Error(), "no cpuset controller") {
		t.Errorf("err %v, want the missing controller named", err)
	}
}

func TestFindKubepodsAndPodDirs(t *testing.T) {
	for _, c := range []struct {
		tree, override string
		systemd        bool
		uid, want      string
	}{
		{tree: "v1-cgroupfs", uid: uidBurstable, want: "cpuset/kubepods/burstable/pod" + uidBurstable},
		{tree: "v1-cgroupfs", uid: uidBestEffort, want: "cpuset/kubepods/besteffort/pod" + uidBestEffort},
		{tree: "v1-cgroupfs", override: "/kubepods/", uid: uidBurstable, want: "cpuset/kubepods/burstable/pod" + uidBurstable},
		{tree: "v2-systemd", systemd: true, uid: uidBurstable, want: "kubepods.slice/kubepods-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice"},
		{tree: "v2-systemd", systemd: true, uid: uidBestEffort, want: "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1c9d7b9f_6c4f_4d2b_8d7f_3a2e4b5c6d7e.slice"},
	} {
		root := fixture(t, c.tree)
		h, err := DetectHierarchy(root)
		if err != nil {
			t.Fatal(err)
		}
		k, err := FindKubepods(h, c.override)
		if err != nil {
			t.Fatalf("%s: %v", c.tree, err)
		}
		if k.Systemd != c.systemd {
			t.Errorf("%s: systemd %v, want %v", c.tree, k.Systemd, c.systemd)
		}
		dir, ok := k.PodDir(c.uid)
		if !ok || dir != filepath.Join(root, c.want) {
			t.Errorf("%s: PodDir(%s) = %q, %v; want %s", c.tree, c.uid, dir, ok, c.want)
		}
		if got, ok := PodUID(filepath.Base(dir)); !ok || got != c.uid {
			t.Errorf("PodUID(%s) = %q, %v", filepath.Base(dir), got, ok)
		}
		if _, ok := k.PodDir("2d0e8ca0-7d50-4e3c-9e80-4b3f5c6d7e8f"); ok {
			t.Errorf("%s: a pod the kubelet never started has a cgroup", c.tree)
		}
	}
}

// TestKubeletLayouts builds the trees the kubelet (k8s.io/kubernetes pkg/kubelet/cm)
// makes: with the systemd driver every cgroup is named CgroupName.ToSystemd(), its parts
// joined with '-', so --cgroup-root=/kubelet gives kubelet.slice/kubelet-kubepods.slice/
// kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod<uid_>.slice; the
// cgroupfs driver names them by their last part only.
func TestKubeletLayouts(t *testing.T) {
	const uidGuaranteed = "3e0f8db1-8e61-4f4d-af91-5c4d6e7f8091"
	for _, c := range []struct {
		name     string
		kubepods string // relative to the hierarchy, as --kubepods-cgroup gives it
		override bool   // pass kubepods to FindKubepods rather than let it look
		qos      []string
		pods     map[string]string // uid → pod cgroup relative to kubepods
	}{
		{
			name: "systemd", kubepods: "kubepods.slice",
			qos: []string{"", "kubepods-burstable.slice", "kubepods-besteffort.slice"},
			pods: map[string]string{
				uidGuaranteed: "kubepods-pod3e0f8db1_8e61_4f4d_af91_5c4d6e7f8091.slice",
				uidBurstable:  "kubepods-burstable.slice/kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
				uidBestEffort: "kubepods-besteffort.slice/kubepods-besteffort-pod1c9d7b9f_6c4f_4d2b_8d7f_3a2e4b5c6d7e.slice",
			},
		},
		{
			name: "systemd --cgroup-root=/kubelet", kubepods: "kubelet.slice/kubelet-kubepods.slice", override: true,
			qos: []string{"", "kubelet-kubepods-burstable.slice", "kubelet-kubepods-besteffort.slice"},
			pods: map[string]string{
				uidGuaranteed: "kubelet-kubepods-pod3e0f8db1_8e61_4f4d_af91_5c4d6e7f8091.slice",
				uidBurstable:  "kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
				uidBestEffort: "kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod1c9d7b9f_6c4f_4d2b_8d7f_3a2e4b5c6d7e.slice",
			},
		},
		{
			// ToSystemd keeps ".slice" of a root so given as part of the name.
			name: "systemd --cgroup-root=/kubelet.slice", kubepods: "kubelet.slice.slice/kubelet.slice-kubepods.slice", override: true,
			qos: []string{"", "kubelet.slice-kubepods-burstable.slice", "kubelet.slice-kubepods-besteffort.slice"},
			pods: map[string]string{
				uidGuaranteed: "kubelet.slice-kubepods-pod3e0f8db1_8e61_4f4d_af91_5c4d6e7f8091.slice",
				uidBurstable:  "kubelet.slice-kubepods-burstable.slice/kubelet.slice-kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice",
				uidBestEffort: "kubelet.slice-kubepods-besteffort.slice/kubelet.slice-kubepods-besteffort-pod1c9d7b9f_6c4f_4d2b_8d7f_3a2e4b5c6d7e.slice",
			},
		},
		{
			name: "cgroupfs --cgroup-root=/kubelet", kubepods: "kubelet/kubepods", override: true,
			qos: []string{"", "burstable", "besteffort"},
			pods: map[string]string{
				uidGuaranteed: "pod" + uidGuaranteed,
				uidBurstable:  "burstable/pod" + uidBurstable,
				uidBestEffort: "besteffort/pod" + uidBestEffort,
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			kubepods := filepath.Join(root, filepath.FromSlash(c.kubepods))
			for _, rel := range c.pods {
				// A container's cgroup too: PodUID must not take it for a pod.
				if err := os.MkdirAll(filepath.Join(kubepods, filepath.FromSlash(rel), "cri-containerd-"+uidBurstable+".scope"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			override := ""
			if c.override {
				override = c.kubepods
			}
			k, err := FindKubepods(Hierarchy{Dir: root, Version: V2}, override)
			if err != nil {
				t.Fatal(err)
			}
			if k.Dir != kubepods {
				t.Fatalf("kubepods %s, want %s", k.Dir, kubepods)
			}
			var want []string
			for _, q := range c.qos {
				want = append(want, filepath.Join(kubepods, q))
			}
			if got := k.QoSDirs(); !slices.Equal(got, want) {
				t.Errorf("QoSDirs = %q, want %q", got, want)
			}
			for _, q := range k.QoSDirs() {
				if _, ok := PodUID(filepath.Base(q)); ok {
					t.Errorf("PodUID(%s) takes a QoS directory for a pod", filepath.Base(q))
				}
			}
			for uid, rel := range c.pods {
				wantDir := filepath.Join(kubepods, filepath.FromSlash(rel))
				if dir, ok := k.PodDir(uid); !ok || dir != wantDir {
					t.Errorf("PodDir(%s) = %q, %v; want %q", uid, dir, ok, wantDir)
				}
				if got, ok := PodUID(filepath.Base(wantDir)); !ok || got != uid {
					t.Errorf("PodUID(%s) = %q, %v; want %s", filepath.Base(wantDir), got, ok, uid)
				}
				if got, ok := PodUID("cri-containerd-" + uidBurstable + ".scope"); ok {
					t.Errorf("PodUID takes a container's cgroup for pod %s", got)
				}
			}
			if _, ok := k.PodDir("2d0e8ca0-7d50-4e3c-9e80-4b3f5c6d7e8f"); ok {
				t.Error("a pod the kubelet never started has a cgroup")
			}
		})
	}
}

func TestFindKubepodsMissing(t *testing.T) {
	root := fixture(t, "v1-cgroupfs")
	h, _ := DetectHierarchy(root)
	if _, err := FindKubepods(h, "kubelet.slice/kubepods.slice"); err == nil || !strings.Contains(err.Error(), "kubelet.slice/kubepods.slice") {
		t.Errorf("err %v, want the missing cgroup named", err)
	}
}

func TestPodUID(t *testing.T) {
	for name, want := range map[string]string{
		"pod" + uidBurstable: uidBurstable,
		"kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":          uidBurstable,
		"kubepods-besteffort-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":         uidBurstable,
		"kubepods-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":                    uidBurstable,
		"kubelet-kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":  uidBurstable,
		"kubelet-kubepods-besteffort-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice": uidBurstable,
		"kubelet-kubepods-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":            uidBurstable,
		"kubelet-kubepods-burstable.slice":                                          "",
		"kubelet-kubepods.slice":                                                    "",
		"pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":                             "",
		"-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice":                            "",
		"burstable":                "",
		"kubepods-burstable.slice": "",
		"pod0b8c6a8e":              "",
		"cri-containerd-" + uidBurstable + ".scope": "",
		"podxb8c6a8e-5b3e-4c1a-9c6e-2f1d3a4b5c6d":   "",
	} {
		got, ok := PodUID(name)
		if ok != (want != "") || got != want {
			t.Errorf("PodUID(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}

func TestNarrowV1ChildrenFirst(t *testing.T) {
	root := fixture(t, "v1-cgroupfs")
	h, _ := DetectHierarchy(root)
	k, _ := FindKubepods(h, "")
	pod, _ := k.PodDir(uidBurstable)
	want := Cpuset{CPUs: []int32{2, 3}, Mems: []int32{1}}
	res, err := h.Narrow(pod, want)
	if err != nil {
		t.Fatal(err)
	}
	if res.Children != 2 || !res.Wrote {
		t.Errorf("Narrow = %+v, want 2 children and writes", res)
	}
	children, _ := Children(pod)
	for _, dir := range append(children, pod) {
		if read(t, filepath.Join(dir, "cpuset.cpus")) != "2-3" || read(t, filepath.Join(dir, "cpuset.mems")) != "1" ||
			read(t, filepath.Join(dir, "cpuset.memory_migrate")) != "1" {
			t.Errorf("%s: not narrowed to %s", dir, want)
		}
	}
	// The parent of the pod is not touched.
	if got := read(t, filepath.Join(filepath.Dir(pod), "cpuset.cpus")); got != "0-3" {
		t.Errorf("the QoS cgroup was changed to %s", got)
	}
	// Again: nothing to write.
	if res, err := h.Narrow(pod, want); err != nil || res.Wrote {
		t.Errorf("second Narrow = %+v, %v; want no write", res, err)
	}
}

func TestNarrowV1NewPodHasNoChildren(t *testing.T) {
	root := fixture(t, "v1-cgroupfs")
	h, _ := DetectHierarchy(root)
	k, _ := FindKubepods(h, "")
	pod, _ := k.PodDir(uidBestEffort)
	res, err := h.Narrow(pod, Cpuset{CPUs: []int32{0}, Mems: []int32{0}})
	if err != nil || res.Children != 0 || !res.Wrote {
		t.Fatalf("Narrow = %+v, %v; want a write to a pod without children", res, err)
	}
	if read(t, filepath.Join(pod, "cpuset.cpus")) != "0" {
		t.Error("not written")
	}
}

func TestNarrowV2PodOnly(t *testing.T) {
	root := fixture(t, "v2-systemd")
	h, _ := DetectHierarchy(root)
	k, _ := FindKubepods(h, "")
	pod, _ := k.PodDir(uidBurstable)
	res, err := h.Narrow(pod, Cpuset{CPUs: []int32{1}, Mems: []int32{0}})
	if err != nil || res.Children != 1 {
		t.Fatalf("Narrow = %+v, %v", res, err)
	}
	if read(t, filepath.Join(pod, "cpuset.cpus")) != "1" || read(t, filepath.Join(pod, "cpuset.mems")) != "0" {
		t.Error("pod cgroup not narrowed")
	}
	children, _ := Children(pod)
	if got := read(t, filepath.Join(children[0], "cpuset.cpus")); got != "" {
		t.Errorf("v2 container cgroup written (%q): its effective set follows the pod's", got)
	}
}

func TestNarrowV2WithoutController(t *testing.T) {
	root := fixture(t, "v2-systemd")
	h, _ := DetectHierarchy(root)
	k, _ := FindKubepods(h, "")
	pod, _ := k.PodDir(uidBestEffort)
	_, err := h.Narrow(pod, Cpuset{CPUs: []int32{1}, Mems: []int32{0}})
	if err == nil || errors.Is(err, ErrGone) || !strings.Contains(err.Error(), "subtree_control") {
		t.Errorf("err %v, want the missing controller explained", err)
	}
}

func TestNarrowGone(t *testing.T) {
	root := fixture(t, "v1-cgroupfs")
	h, _ := DetectHierarchy(root)
	_, err := h.Narrow(filepath.Join(root, "cpuset", "kubepods", "pod"+uidBestEffort), Cpuset{CPUs: []int32{0}, Mems: []int32{0}})
	if !errors.Is(err, ErrGone) {
		t.Errorf("err %v, want ErrGone", err)
	}
}

func TestWatcherOnFixture(t *testing.T) {
	root := fixture(t, "v1-cgroupfs")
	h, _ := DetectHierarchy(root)
	k, _ := FindKubepods(h, "")
	w, err := k.Watch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const uid = "3e0f8db1-8e61-4f4d-af91-5c4d6e7f8091"
	pod := filepath.Join(k.Dir, "burstable", "pod"+uid)
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uid)
	if err := w.Follow(uid, pod); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pod, "cpuset.cpus"), []byte("0-3"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uid)
	if err := os.Mkdir(filepath.Join(pod, "container"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uid)
	w.Unfollow(pod)
	if w.Following() != 0 {
		t.Errorf("still following %d pods", w.Following())
	}
	// A QoS directory that appears later is watched too.
	if err := os.RemoveAll(filepath.Join(k.Dir, "besteffort")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(k.Dir, "besteffort"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, Rescan)
	const uid2 = "4f10ae52-9f72-4a5e-b0a2-6d5e7f809102"
	if err := os.Mkdir(filepath.Join(k.Dir, "besteffort", "pod"+uid2), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uid2)
}

// TestWatcherSystemdCgroupRoot: with --cgroup-root=/kubelet the watch finds the QoS
// directories and pod cgroups under their kubelet-kubepods-… names.
func TestWatcherSystemdCgroupRoot(t *testing.T) {
	root := t.TempDir()
	kubepods := filepath.Join(root, "kubelet.slice", "kubelet-kubepods.slice")
	if err := os.MkdirAll(filepath.Join(kubepods, "kubelet-kubepods-burstable.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	k, err := FindKubepods(Hierarchy{Dir: root, Version: V2}, "kubelet.slice/kubelet-kubepods.slice")
	if err != nil {
		t.Fatal(err)
	}
	w, err := k.Watch()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()

	if err := os.Mkdir(filepath.Join(kubepods, "kubelet-kubepods-burstable.slice",
		"kubelet-kubepods-burstable-pod0b8c6a8e_5b3e_4c1a_9c6e_2f1d3a4b5c6d.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uidBurstable)
	// The BestEffort QoS directory the kubelet makes later.
	if err := os.Mkdir(filepath.Join(kubepods, "kubelet-kubepods-besteffort.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, Rescan)
	if err := os.Mkdir(filepath.Join(kubepods, "kubelet-kubepods-besteffort.slice",
		"kubelet-kubepods-besteffort-pod1c9d7b9f_6c4f_4d2b_8d7f_3a2e4b5c6d7e.slice"), 0o755); err != nil {
		t.Fatal(err)
	}
	expectUID(t, w, uidBestEffort)
}

func expectUID(t *testing.T, w *Watcher, want string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case got := <-w.UIDs:
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("no event for %q within 5s", want)
		}
	}
}

// TestNarrowRealHierarchy narrows a scratch cgroup tree on this machine's real cpuset
// hierarchy, with a process in a child cgroup: the kernel's own rules (v1 refuses a
// parent narrower than a child) and the process's affinity are the proof.
func TestNarrowRealHierarchy(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs to narrow to one")
	}
	h, err := DetectHierarchy("/sys/fs/cgroup")
	if err != nil {
		t.Skipf("no cpuset hierarchy: %v", err)
	}
	top, err := os.MkdirTemp(h.Dir, "sextant-cgroups-test-")
	if err != nil {
		t.Skipf("cannot make a cgroup: %v", err)
	}
	pod := filepath.Join(top, "pod"+uidBurstable)
	child := filepath.Join(pod, "container")
	parentSet, err := h.Effective(h.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version == V2 {
		for _, d := range []string{h.Dir, top} {
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+cpuset"), 0)
		}
	}
	for _, d := range []string{pod, child} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if h.Version == V2 {
			_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte("+cpuset"), 0)
		}
	}
	if h.Version == V1 {
		for _, d := range []string{top, pod, child} {
			if err := writeList(filepath.Join(d, fileMems), parentSet.Mems); err != nil {
				t.Fatal(err)
			}
			if err := writeList(filepath.Join(d, fileCPUs), parentSet.CPUs); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A process in the container cgroup, running before the narrowing: the catch-up case.
	sleeper := startIn(t, child)
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_, _ = sleeper.Process.Wait()
		for _, d := range []string{child, pod, top} {
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(20 * time.Millisecond) // the killed task leaves the cgroup asynchronously
			}
		}
	})
	want := Cpuset{CPUs: parentSet.CPUs[len(parentSet.CPUs)-1:], Mems: parentSet.Mems[:1]}
	res, err := h.Narrow(pod, want)
	if err != nil {
		t.Fatalf("Narrow on %s: %v", h.Version, err)
	}
	if res.Children != 1 {
		t.Errorf("children %d, want 1", res.Children)
	}
	for _, d := range []string{pod, child} {
		eff, err := h.Effective(d)
		if err != nil {
			t.Fatal(err)
		}
		if !eff.Equal(want) {
			t.Errorf("%s: effective %s, want %s", d, eff, want)
		}
	}
	confined(t, sleeper, want.CPUs[0])

	// Another set, none of whose CPUs the pod holds: the repair of a pod cgroup someone
	// else narrowed elsewhere. On v1 the kernel refuses a child a CPU its parent lacks.
	other := Cpuset{CPUs: parentSet.CPUs[:1], Mems: parentSet.Mems[:1]}
	if _, err := h.Narrow(pod, other); err != nil {
		t.Fatalf("Narrow from %s to %s on %s: %v", want, other, h.Version, err)
	}
	for _, d := range []string{pod, child} {
		if eff, err := h.Effective(d); err != nil || !eff.Equal(other) {
			t.Errorf("%s: effective %s (%v), want %s", d, eff, err, other)
		}
	}
	confined(t, sleeper, other.CPUs[0])
}

// confined checks that the running process may run on that CPU only.
func confined(t *testing.T, p *exec.Cmd, cpu int32) {
	t.Helper()
	status := read(t, filepath.Join("/proc", strconv.Itoa(p.Process.Pid), "status"))
	if !strings.Contains(status, "Cpus_allowed_list:\t"+strconv.Itoa(int(cpu))+"\n") {
		t.Errorf("the running process is not confined to CPU %d:\n%s", cpu, grep(status, "_allowed_list"))
	}
}

// startIn starts a process and moves it into the cgroup dir.
func startIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("move the process into %s: %v", dir, err)
	}
	return cmd
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
