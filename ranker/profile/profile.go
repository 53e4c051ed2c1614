// Package profile holds the sextant profile's plugins as the chart's
// KubeSchedulerConfiguration enables them (charts/sextant/templates/ranker-config.yaml),
// for the configurations written outside the chart: the end-to-end tests' and make
// bench-ranker's. The chart, a template, cannot import it; TestChartProfileMatches in
// ranker/cmd/sextant-ranker fails when the two differ, so what the tests and the bench
// measure is what the chart deploys.
package profile

// SchedulerName is the profile's name, the chart's default ranker.schedulerName: pods
// set spec.schedulerName to it. sextant-ranker serves it without --config.
const SchedulerName = "sextant"

// Plugins is the plugins block of a profile entry, indented to follow a
// "- schedulerName: <name>" line of a KubeSchedulerConfiguration's profiles: the sextant
// plugins at every extension point, SextantBinder in DefaultBinder's place, and the
// sextant Filters first (they reject nodes with one lookup each, which kube-scheduler's
// own Filters then skip). BandwidthAware's score weight is the chart's default
// ranker.bandwidth.scoreWeight.
const Plugins = `  plugins:
    multiPoint:
      enabled:
      - name: BandwidthAware
        weight: 1
      - name: NUMAAware
      - name: DeviceAware
      - name: SextantBinder
      disabled:
      - name: DefaultBinder
    filter:
      enabled:
      - name: BandwidthAware
      - name: NUMAAware
      - name: DeviceAware
`
