// Command sextant-ranker is kube-scheduler with sextant's plugins registered, serving
// the scheduler profile "sextant". It takes every kube-scheduler flag.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // JSON logging, as in kube-scheduler
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	// The sextant plugins (BandwidthAware, NUMAAware, DeviceAware) register here with
	// app.WithPlugin as they land; until then this is kube-scheduler itself.
	command := app.NewSchedulerCommand()
	os.Exit(cli.Run(command))
}
