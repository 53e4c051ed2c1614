package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sys/unix"

	"sextant.io/sextant/agent/bandwidth/tc"
)

// parseAttachMode reads --attach-mode: auto, tcx or clsact.
func parseAttachMode(s string) (tc.Mode, error) {
	switch s {
	case "auto":
		return tc.ModeAuto, nil
	case string(tc.ModeTCX), string(tc.ModeClsact):
		return tc.Mode(s), nil
	}
	return "", fmt.Errorf("--attach-mode %q: want auto, %s or %s", s, tc.ModeTCX, tc.ModeClsact)
}

// checkSysfsRoot fails when --sysfs-root has no sys/ directory: a missing file under
// it is "no data", but a root without sys/ is a wrong flag, and would otherwise show
// only as a node without NICs, NUMA nodes or devices.
func checkSysfsRoot(root string) error {
	dir := filepath.Join(root, "sys")
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("--sysfs-root %q: %w (want the directory holding the node's sys/, such as / or a host mount)", root, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("--sysfs-root %q: %s is not a directory (want the directory holding the node's sys/, such as / or a host mount)", root, dir)
	}
	return nil
}

// checkNetns fails when --netns names something other than a namespace (an nsfs file,
// such as /var/run/netns/NAME or /proc/PID/ns/net): the agent would otherwise start,
// meter nothing, and log the failure at every sample.
func checkNetns(p string) error {
	if p == "" {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return fmt.Errorf("--netns %q: %w (want a network namespace path such as /var/run/netns/NAME)", p, err)
	}
	if st.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("--netns %q: not a namespace (want a network namespace path such as /var/run/netns/NAME)", p)
	}
	return nil
}

// checkInterfacePatterns fails on an --interfaces entry that is no name or shell
// pattern (eth[): it would match no NIC, and the agent would meter nothing.
func checkInterfacePatterns(patterns []string) error {
	for _, pat := range patterns {
		if _, err := path.Match(pat, ""); err != nil || pat == "" {
			return fmt.Errorf("--interfaces %q: not an interface name or shell pattern (want such as eth0 or eth*)", pat)
		}
	}
	return nil
}
