package main

import (
	"testing"

	"github.com/spf13/cobra"

	"sextant.io/sextant/internal/charttest"
)

// Every sextant-ranker subcommand the chart runs takes the args the chart renders for it.
func TestChartSubcommandArgsPassValidation(t *testing.T) {
	charttest.CheckSubcommandArgs(t, "sextant-ranker", map[string]charttest.Subcommand{
		"check": {Build: func() (*cobra.Command, func() error) {
			cmd, o := checkCommand()
			// A closure: a method value would copy the options before parsing.
			return cmd, func() error { return o.validate() }
		}, Object: "Pod/sextant-check", Optional: true},
	})
}
