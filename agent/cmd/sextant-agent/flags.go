package main

import (
	"fmt"
	"os"
	"path/filepath"

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
