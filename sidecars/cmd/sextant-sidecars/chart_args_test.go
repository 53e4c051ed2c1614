package main

import (
	"testing"

	"github.com/spf13/cobra"

	"sextant.io/sextant/internal/charttest"
)

// Every sextant-sidecars command the chart runs takes the args the chart renders for it,
// with the default values and with the options that add flags.
func TestChartSubcommandArgsPassValidation(t *testing.T) {
	charttest.CheckSubcommandArgs(t, "sextant-sidecars", map[string]charttest.Subcommand{
		"webhook": {Build: func() (*cobra.Command, func() error) {
			cmd, o := sidecarWebhookCommand()
			// A closure: a method value would copy the options before parsing.
			return cmd, func() error { return o.validateWebhook() }
		}, Object: "Deployment/sextant-webhook"},
		"virtual-node-controller": {Build: func() (*cobra.Command, func() error) {
			cmd, o := virtualNodeControllerCommand()
			return cmd, func() error {
				if err := o.validateController(); err != nil {
					return err
				}
				return o.validateMetrics()
			}
		}, Object: "Deployment/sextant-virtual-node-controller", Optional: true},
	})
}
