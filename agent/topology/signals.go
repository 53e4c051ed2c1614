package topology

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"sextant.io/sextant/api/v1alpha1"
)

// faults returns what the kernel says is wrong with the present PCI function at dir (a
// resolved path): each entry makes the device Unhealthy. A file that is missing or says
// "unknown" is no data, never a fault.
func faults(r root, dir string, kind v1alpha1.DeviceKind, warn func(error)) []string {
	var out []string
	if n, ok := aerFatal(r, dir+"/aer_dev_fatal", warn); ok && n > 0 {
		// The counters only grow until the device is enumerated again: a device that
		// took a fatal error stays suspect until an operator resets it (remove and
		// rescan, or reboot), whatever the kernel's recovery made of it.
		out = append(out, fmt.Sprintf("PCIe AER: %d fatal uncorrectable errors since the device was enumerated", n))
	}
	if !linkChecked(kind) {
		return out
	}
	up := ""
	if p := path.Dir(dir); pciAddressRE.MatchString(path.Base(p)) {
		up = p // the downstream port the link runs to
	}
	cur, max, ok := linkWidths(r, dir, up, warn)
	if ok && cur < max {
		out = append(out, fmt.Sprintf("PCIe link trained at x%d of x%d", cur, max))
	}
	if linkSpeedChecked(kind) {
		cur, max, curText, maxText, ok := linkSpeeds(r, dir, up, warn)
		if ok && cur < max {
			out = append(out, fmt.Sprintf("PCIe link runs at %s of %s", curText, maxText))
		}
	}
	return out
}

// linkChecked: a degraded link matters only for devices handed to pods; a host bridge or
// USB controller running narrow would only make the summary noisy.
func linkChecked(kind v1alpha1.DeviceKind) bool {
	return kind != v1alpha1.KindOther
}

// linkSpeedChecked: GPUs and many accelerators lower their link speed on purpose while
// idle (NVIDIA and AMD drop to 2.5 GT/s), so a low speed there says nothing. NICs and
// NVMe drives keep the trained speed; less means a bad slot, riser or cable.
func linkSpeedChecked(kind v1alpha1.DeviceKind) bool {
	return kind == v1alpha1.KindNIC || kind == v1alpha1.KindNVMe
}

// aerFatal reads TOTAL_ERR_FATAL from an aer_dev_fatal file (one "NAME COUNT" line per
// error type). ok is false without the file (no AER capability, or a kernel without
// the counters) or with content that does not parse (with a warning).
func aerFatal(r root, f string, warn func(error)) (n uint64, ok bool) {
	s, err := r.readFile(f)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		return 0, false
	}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "TOTAL_ERR_FATAL" {
			v, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				break
			}
			return v, true
		}
	}
	warn(fmt.Errorf("parsing %s: no TOTAL_ERR_FATAL count; AER fatal errors not checked", r.display(f)))
	return 0, false
}

// linkWidths returns the device's current link width and the widest the link can
// train at: the smaller of the device's and its upstream port's maximum, so a x16 card
// in a x8 slot is not called degraded. ok is false where any figure is unknown; a
// current width of 0 (virtual functions, a link that is down) is unknown too.
func linkWidths(r root, dir, up string, warn func(error)) (cur, max int, ok bool) {
	cur, ok1 := readLinkWidth(r, dir+"/current_link_width", warn)
	max, ok2 := readLinkWidth(r, dir+"/max_link_width", warn)
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	if up != "" {
		if m, ok := readLinkWidth(r, up+"/max_link_width", warn); ok && m < max {
			max = m
		}
	}
	return cur, max, true
}

func readLinkWidth(r root, f string, warn func(error)) (int, bool) {
	s, err := r.readFile(f)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		warn(fmt.Errorf("parsing %s: unexpected content %q; link width not checked", r.display(f), s))
		return 0, false
	}
	return v, v > 0
}

// linkSpeeds is linkWidths for the speed, in GT/s, with the texts for messages.
func linkSpeeds(r root, dir, up string, warn func(error)) (cur, max float64, curText, maxText string, ok bool) {
	cur, curText, ok1 := readLinkSpeed(r, dir+"/current_link_speed", warn)
	max, maxText, ok2 := readLinkSpeed(r, dir+"/max_link_speed", warn)
	if !ok1 || !ok2 {
		return 0, 0, "", "", false
	}
	if up != "" {
		if m, t, ok := readLinkSpeed(r, up+"/max_link_speed", warn); ok && m < max {
			max, maxText = m, t
		}
	}
	return cur, max, curText, maxText, true
}

// readLinkSpeed parses "8.0 GT/s PCIe" (older kernels: "8 GT/s", "2.5 GT/s"). The
// kernel writes "Unknown" (or "Unknown speed") for virtual functions and links that
// are down: no data.
func readLinkSpeed(r root, f string, warn func(error)) (float64, string, bool) {
	s, err := r.readFile(f)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			warn(err)
		}
		return 0, "", false
	}
	if strings.HasPrefix(s, "Unknown") {
		return 0, "", false
	}
	fields := strings.Fields(s)
	if len(fields) >= 2 && fields[1] == "GT/s" {
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil && v > 0 {
			return v, fields[0] + " GT/s", true
		}
	}
	warn(fmt.Errorf("parsing %s: unexpected content %q; link speed not checked", r.display(f), s))
	return 0, "", false
}
