package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

func printResults(w io.Writer, results []result) {
	if len(results) == 0 {
		return
	}
	// With several rounds, a row's scheduler is named with its round: sextant#2.
	multiRound := slices.ContainsFunc(results, func(r result) bool { return r.round > 0 })
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-8s %-10s %6s %6s %6s %7s %9s %8s %8s %8s %9s %14s %15s %s\n",
		"sched", "shape", "nodes", "pods", "bound", "unsched", "elapsed", "pods/s", "cpu/pod", "peak-rss", "live-heap", "bw-violations", "numa-spread", "note")
	for _, r := range results {
		spread := fmt.Sprintf("%d/%d %s", r.numaSpread, r.numaPods, map[string]string{"annotation": "ann", "simulated": "sim"}[r.numaSource])
		note := r.note
		if r.numaMissing > 0 {
			note = strings.TrimSpace(fmt.Sprintf("%s %d bound pods lack %s", note, r.numaMissing, annNUMANodes))
		}
		cpu := "-"
		if r.cpuPerPod > 0 {
			cpu = fmt.Sprintf("%.1fms", float64(r.cpuPerPod)/float64(time.Millisecond))
		}
		rss, live := "-", "-"
		if r.peakRSS > 0 {
			rss = fmt.Sprintf("%dMiB", r.peakRSS>>20)
		}
		if r.liveHeap > 0 {
			live = fmt.Sprintf("%dMiB", r.liveHeap>>20)
		}
		name := r.scheduler
		if multiRound {
			name = fmt.Sprintf("%s#%d", r.scheduler, r.round+1)
		}
		fmt.Fprintf(w, "%-8s %-10s %6d %6d %6d %7d %9s %8.1f %8s %8s %9s %14s %15s %s\n",
			name, r.shape, r.size, r.pods, r.bound, r.unscheduled, r.elapsed.Round(100*time.Millisecond),
			r.podsPerSec, cpu, rss, live, fmt.Sprintf("%d/%d", r.bwViolation, r.bwAsked), spread, note)
	}
	fmt.Fprintln(w)
	for _, r := range results {
		name := r.scheduler
		if multiRound {
			name = fmt.Sprintf("%s#%d", r.scheduler, r.round+1)
		}
		if r.breakdown != "" {
			fmt.Fprintf(w, "%s %d nodes %s: %s\n", name, r.size, r.shape, r.breakdown)
		}
		if r.pluginMeans != "" {
			fmt.Fprintf(w, "%s %d nodes %s: sextant plugins, sampled: %s\n", name, r.size, r.shape, r.pluginMeans)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "bw-violations: pods bound where their required bandwidth was no longer left / bound pods requiring bandwidth")
	fmt.Fprintln(w, "numa-spread: pods on more NUMA nodes than on an empty node / bound pods with CPU or memory (ann: ranker's annotation, sim: kubelet best-effort simulation)")
	fmt.Fprintln(w, "cpu/pod: the scheduler process's CPU time (user + system) from ready to the last binding, over the bound pods")
	fmt.Fprintln(w, "peak-rss: the scheduler process's peak resident memory (VmHWM) at the end of its run")
	fmt.Fprintln(w, "live-heap: the scheduler's live heap after the run (go_gc_heap_live_bytes after a forced garbage collection)")
	if slices.ContainsFunc(results, func(r result) bool { return r.pluginMeans != "" }) {
		fmt.Fprintln(w, "score/filter mean per call: sum/count of scheduler_plugin_execution_duration_seconds per plugin, n the calls timed; kube-scheduler")
		fmt.Fprintln(w, "    times plugins in only a sample of scheduling cycles (10%, pluginMetricsSamplePercent), so n is about a tenth of the calls")
	}
	for _, name := range shapesOf(results) {
		if sh, ok := shapes[name]; ok {
			fmt.Fprintf(w, "shape %s: %s\n", name, sh.help)
		}
	}

	// Goals at 5000 nodes, with both schedulers: the sextant/vanilla throughput ratio >=
	// 0.80 and peak memory <= 1.5x (medians over rounds), and zero bandwidth violations
	// for sextant (in every round).
	fmt.Fprintln(w)
	for _, ss := range sizesOf(results) {
		size := ss.size
		byRound := map[int]map[string]*result{}
		var rounds []int
		for i := range results {
			r := &results[i]
			if r.size != size || r.shape != ss.shape {
				continue
			}
			if byRound[r.round] == nil {
				byRound[r.round] = map[string]*result{}
				rounds = append(rounds, r.round)
			}
			byRound[r.round][r.scheduler] = r
		}
		var ratios, cpuRatios, rssRatios, liveRatios, defaultRatios, defaultCPURatios []float64
		var violations, vanillaViolations, spread, vanillaSpread int
		var notes []string
		for _, round := range rounds {
			v, s, d := byRound[round][schedVanilla], byRound[round][schedSextant], byRound[round][schedRankerDefault]
			if v == nil || v.podsPerSec <= 0 {
				continue
			}
			if d != nil {
				defaultRatios = append(defaultRatios, d.podsPerSec/v.podsPerSec)
				if v.cpuPerPod > 0 && d.cpuPerPod > 0 {
					defaultCPURatios = append(defaultCPURatios, float64(d.cpuPerPod)/float64(v.cpuPerPod))
				}
			}
			if s == nil {
				continue
			}
			ratios = append(ratios, s.podsPerSec/v.podsPerSec)
			if v.cpuPerPod > 0 && s.cpuPerPod > 0 {
				cpuRatios = append(cpuRatios, float64(s.cpuPerPod)/float64(v.cpuPerPod))
			}
			if v.peakRSS > 0 && s.peakRSS > 0 {
				rssRatios = append(rssRatios, float64(s.peakRSS)/float64(v.peakRSS))
			}
			if v.liveHeap > 0 && s.liveHeap > 0 {
				liveRatios = append(liveRatios, float64(s.liveHeap)/float64(v.liveHeap))
			}
			violations += s.bwViolation
			vanillaViolations += v.bwViolation
			spread += s.numaSpread
			vanillaSpread += v.numaSpread
			if s.note != "" {
				notes = append(notes, s.note)
			}
		}
		if len(defaultRatios) > 0 {
			line := fmt.Sprintf("%5d nodes %s: throughput ratio %s/vanilla %s", size, ss.shape, schedRankerDefault, ratioList(defaultRatios))
			if len(defaultCPURatios) > 0 {
				line += fmt.Sprintf(", CPU per bound pod %s", ratioList(defaultCPURatios))
			}
			fmt.Fprintln(w, line)
		}
		if len(ratios) == 0 {
			fmt.Fprintf(w, "%5d nodes %s: sextant and vanilla did not both run; no sextant ratio\n", size, ss.shape)
			continue
		}
		median := medianOf(ratios)
		line := fmt.Sprintf("%5d nodes %s: throughput ratio sextant/vanilla %s; sextant bandwidth violations %d, NUMA spread %d (vanilla %d, %d)",
			size, ss.shape, ratioList(ratios), violations, spread, vanillaViolations, vanillaSpread)
		if len(cpuRatios) > 0 {
			line += fmt.Sprintf("\n             CPU per bound pod sextant/vanilla %s", ratioList(cpuRatios))
		}
		if len(rssRatios) > 0 {
			line += fmt.Sprintf("\n             peak memory sextant/vanilla %s", ratioList(rssRatios))
		}
		if len(liveRatios) > 0 {
			line += fmt.Sprintf("; live heap sextant/vanilla %s", ratioList(liveRatios))
		}
		if size == 5000 {
			line += fmt.Sprintf("\n             goal ratio >= %.2f: %s; goal peak memory <= %.1fx: %s; goal zero sextant violations: %s",
				goalRatio, passMiss(median >= goalRatio), goalPeakMemory, passMiss(len(rssRatios) > 0 && medianOf(rssRatios) <= goalPeakMemory), passMiss(violations == 0))
		}
		for _, n := range notes {
			line += "\n             NOTE sextant: " + n
		}
		fmt.Fprintln(w, line)
	}
	printShapeRatios(w, results)
}

// The goals at 5000 nodes against vanilla kube-scheduler in the same run, on the median
// of the rounds.
const (
	goalRatio      = 0.80
	goalPeakMemory = 1.5
)

// printShapeRatios prints, per size and scheduler run on more than one shape, the
// throughput of each shape over the first shape's (per round, the median of several),
// with the goal for sextant: within 10% of the first shape.
func printShapeRatios(w io.Writer, results []result) {
	shapeNames := shapesOf(results)
	if len(shapeNames) < 2 {
		return
	}
	base := shapeNames[0]
	type key struct {
		shape, sched string
		size, round  int
	}
	perSec := map[key]float64{}
	rss := map[key]float64{}
	live := map[key]float64{}
	var scheds []string
	var sizes []int
	for _, r := range results {
		perSec[key{r.shape, r.scheduler, r.size, r.round}] = r.podsPerSec
		rss[key{r.shape, r.scheduler, r.size, r.round}] = float64(r.peakRSS)
		live[key{r.shape, r.scheduler, r.size, r.round}] = float64(r.liveHeap)
		if !slices.Contains(scheds, r.scheduler) {
			scheds = append(scheds, r.scheduler)
		}
		if !slices.Contains(sizes, r.size) {
			sizes = append(sizes, r.size)
		}
	}
	fmt.Fprintln(w)
	for _, size := range sizes {
		for _, sched := range scheds {
			for _, sh := range shapeNames[1:] {
				var ratios, rssRatios, liveRatios []float64
				for round := 0; ; round++ {
					b, okB := perSec[key{base, sched, size, round}]
					v, okV := perSec[key{sh, sched, size, round}]
					if !okB && !okV {
						break
					}
					if okB && okV && b > 0 {
						ratios = append(ratios, v/b)
					}
					if b, v := rss[key{base, sched, size, round}], rss[key{sh, sched, size, round}]; b > 0 && v > 0 {
						rssRatios = append(rssRatios, v/b)
					}
					if b, v := live[key{base, sched, size, round}], live[key{sh, sched, size, round}]; b > 0 && v > 0 {
						liveRatios = append(liveRatios, v/b)
					}
				}
				if len(ratios) == 0 {
					continue
				}
				line := fmt.Sprintf("%5d nodes, %s: throughput %s/%s %s", size, sched, sh, base, ratioList(ratios))
				if sched == schedSextant {
					line += fmt.Sprintf("; goal >= 0.9: %s", passMiss(medianOf(ratios) >= 0.9))
				}
				if len(rssRatios) > 0 {
					line += fmt.Sprintf("; peak memory %s/%s %s", sh, base, ratioList(rssRatios))
				}
				if len(liveRatios) > 0 {
					// The memory goal is judged on the live heap: peak RSS follows the GC
					// settings and, near the soft memory limit, the limit.
					line += fmt.Sprintf("; live heap %s/%s %s", sh, base, ratioList(liveRatios))
					if g := shapes[sh].peakMemoryGoal; g > 0 && sched == schedSextant {
						line += fmt.Sprintf("; goal <= %.2f: %s", g, passMiss(medianOf(liveRatios) <= g))
					}
				}
				fmt.Fprintln(w, line)
			}
		}
	}
}

// shapeSize is one shape at one cluster size.
type shapeSize struct {
	shape string
	size  int
}

// sizesOf returns the shapes and cluster sizes of results, in the order they ran.
func sizesOf(results []result) []shapeSize {
	var out []shapeSize
	for _, r := range results {
		if k := (shapeSize{r.shape, r.size}); !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// shapesOf returns the shapes of results, in the order they ran.
func shapesOf(results []result) []string {
	var out []string
	for _, r := range results {
		if !slices.Contains(out, r.shape) {
			out = append(out, r.shape)
		}
	}
	return out
}

// medianOf returns the median of xs (the mean of the middle two for an even count).
func medianOf(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratioList prints one ratio as is, several as "median M (r1 r2 ...)" in round order.
func ratioList(xs []float64) string {
	if len(xs) == 1 {
		return fmt.Sprintf("%.3f", xs[0])
	}
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.3f", x)
	}
	return fmt.Sprintf("median %.3f (rounds %s)", medianOf(xs), strings.Join(parts, " "))
}

func passMiss(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}
