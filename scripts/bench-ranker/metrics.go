package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// summarizeMetrics condenses the scheduler's histograms into one paragraph: attempts
// by result, total time per extension point, and the costliest plugins per call.
// Plugin times are sampled by the scheduler (about one cycle in ten), so they are
// means, not totals.
func summarizeMetrics(text string, bound int) string {
	type agg struct{ sum, count float64 }
	attempts := map[string]*agg{}
	points := map[string]*agg{}
	plugins := map[string]*agg{}
	writes := map[string]float64{} // API requests by method, GETs left out
	add := func(m map[string]*agg, key string, isSum bool, v float64) {
		a := m[key]
		if a == nil {
			a = &agg{}
			m[key] = a
		}
		if isSum {
			a.sum += v
		} else {
			a.count += v
		}
	}
	for _, line := range strings.Split(text, "\n") {
		name, labels, value, ok := parseSample(line)
		if !ok {
			continue
		}
		if name == "rest_client_requests_total" && labels["method"] != "GET" {
			writes[labels["method"]] += value
			continue
		}
		base, isSum := strings.CutSuffix(name, "_sum")
		if !isSum {
			var isCount bool
			if base, isCount = strings.CutSuffix(name, "_count"); !isCount {
				continue
			}
		}
		switch base {
		case "scheduler_scheduling_attempt_duration_seconds":
			add(attempts, labels["result"], isSum, value)
		case "scheduler_framework_extension_point_duration_seconds":
			add(points, labels["extension_point"], isSum, value)
		case "scheduler_plugin_execution_duration_seconds":
			add(plugins, labels["plugin"]+"/"+labels["extension_point"], isSum, value)
		}
	}
	var out strings.Builder
	out.WriteString("attempts:")
	for _, k := range sortedKeys(attempts, func(a *agg) float64 { return a.count }) {
		a := attempts[k]
		fmt.Fprintf(&out, " %s %.0f (mean %s)", k, a.count, meanDur(a.sum, a.count))
	}
	if bound > 0 {
		var total float64
		var parts []string
		for _, m := range sortedKeys(writes, func(v float64) float64 { return v }) {
			total += writes[m]
			parts = append(parts, fmt.Sprintf("%s %.0f", m, writes[m]))
		}
		// Events count too: the scheduler's event client shares the metrics.
		fmt.Fprintf(&out, "\n    API writes per bound pod (events included): %.2f (%s)", total/float64(bound), strings.Join(parts, ", "))
	}
	out.WriteString("\n    extension points (total):")
	for _, k := range sortedKeys(points, func(a *agg) float64 { return a.sum }) {
		if points[k].sum >= 0.05 {
			fmt.Fprintf(&out, " %s %.1fs", k, points[k].sum)
		}
	}
	out.WriteString("\n    costliest plugins (mean per call, sampled):")
	for i, k := range sortedKeys(plugins, func(a *agg) float64 { return a.sum }) {
		if i == 8 {
			break
		}
		fmt.Fprintf(&out, " %s %s", k, meanDur(plugins[k].sum, plugins[k].count))
	}
	return out.String()
}

// sextantPlugins are the plugins of the sextant profile whose Score and Filter times
// are printed per sextant run (SextantBinder only binds).
var sextantPlugins = []string{"NUMAAware", "DeviceAware", sextantPlugin}

// pluginMean is the sum and count of one plugin's scheduler_plugin_execution_duration_seconds
// at one extension point, over every status.
type pluginMean struct{ sum, count float64 }

// pluginMeans reads the sum and count of each plugin's execution time at extension
// point from the scheduler's /metrics text.
// liveHeapBytes is go_gc_heap_live_bytes in a scrape, 0 if absent.
func liveHeapBytes(text string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if name, _, v, ok := parseSample(line); ok && name == "go_gc_heap_live_bytes" {
			return int64(v)
		}
	}
	return 0
}

// undecidedPlacements is sextant_ranker_numa_undecided_placements_total{reason} in a
// scrape, 0 if absent.
func undecidedPlacements(text, reason string) float64 {
	var n float64
	for _, line := range strings.Split(text, "\n") {
		if name, labels, v, ok := parseSample(line); ok && name == "sextant_ranker_numa_undecided_placements_total" && labels["reason"] == reason {
			n += v
		}
	}
	return n
}

func pluginMeans(text, point string) map[string]pluginMean {
	out := map[string]pluginMean{}
	for _, line := range strings.Split(text, "\n") {
		name, labels, value, ok := parseSample(line)
		if !ok || labels["extension_point"] != point {
			continue
		}
		m := out[labels["plugin"]]
		switch name {
		case "scheduler_plugin_execution_duration_seconds_sum":
			m.sum += value
		case "scheduler_plugin_execution_duration_seconds_count":
			m.count += value
		default:
			continue
		}
		out[labels["plugin"]] = m
	}
	return out
}

// extensionPointMean is the sum and count of scheduler_framework_extension_point_duration_seconds
// at point, over every profile and status.
func extensionPointMean(text, point string) pluginMean {
	var m pluginMean
	for _, line := range strings.Split(text, "\n") {
		name, labels, value, ok := parseSample(line)
		if !ok || labels["extension_point"] != point {
			continue
		}
		switch name {
		case "scheduler_framework_extension_point_duration_seconds_sum":
			m.sum += value
		case "scheduler_framework_extension_point_duration_seconds_count":
			m.count += value
		}
	}
	return m
}

// formatPluginMeans prints the sextant plugins' mean time per Score and per Filter
// call, with how many calls were timed: "score mean per call: NUMAAware 3.1µs (n=5200)
// ...; filter mean per call: ...". A plugin that never ran there is "-" (DeviceAware
// scores only pods that ask for devices).
func formatPluginMeans(text string) string {
	var parts []string
	for _, point := range []string{"Score", "Filter"} {
		means := pluginMeans(text, point)
		var b strings.Builder
		// The extension point's own duration is timed in every cycle, not a sample: all
		// plugins over all the nodes of one cycle.
		if m := extensionPointMean(text, point); m.count > 0 {
			fmt.Fprintf(&b, "%s per cycle (every plugin and node) %s (n=%.0f); ", strings.ToLower(point), fmtMean(m.sum, m.count), m.count)
		}
		fmt.Fprintf(&b, "%s mean per call:", strings.ToLower(point))
		for _, pl := range sextantPlugins {
			m := means[pl]
			if m.count == 0 {
				fmt.Fprintf(&b, " %s -", pl)
				continue
			}
			fmt.Fprintf(&b, " %s %s (n=%.0f)", pl, fmtMean(m.sum, m.count), m.count)
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}

// fmtMean is sum/count seconds as a duration with three significant digits (at
// least 1ns): 3.14µs, 812ns.
func fmtMean(sum, count float64) string {
	if count == 0 {
		return "-"
	}
	d := time.Duration(sum / count * float64(time.Second))
	for r := time.Duration(1); r < time.Millisecond; r *= 10 {
		if d < 1000*r {
			return d.Round(r).String()
		}
	}
	return d.Round(time.Millisecond).String()
}

func meanDur(sum, count float64) string {
	if count == 0 {
		return "-"
	}
	return time.Duration(sum / count * float64(time.Second)).Round(100 * time.Nanosecond).String()
}

func sortedKeys[V any](m map[string]V, by func(V) float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return by(m[keys[i]]) > by(m[keys[j]]) })
	return keys
}

// parseSample parses one line of the Prometheus text format: name{labels} value.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	sp := strings.LastIndexByte(line, ' ')
	if sp < 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(line[sp+1:], 64)
	if err != nil {
		return "", nil, 0, false
	}
	head := line[:sp]
	labels = map[string]string{}
	if i := strings.IndexByte(head, '{'); i >= 0 {
		name = head[:i]
		rest := strings.TrimSuffix(head[i+1:], "}")
		for rest != "" {
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				break
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			end := strings.IndexByte(rest, '"')
			if end < 0 {
				break
			}
			labels[key] = rest[:end]
			rest = strings.TrimPrefix(rest[end+1:], ",")
		}
	} else {
		name = head
	}
	return name, labels, v, true
}
