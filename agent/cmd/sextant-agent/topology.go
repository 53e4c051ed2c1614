package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newTopologyCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "topology",
		Short: "Print the NUMA/PCI topology the agent reads from sysfs (not yet implemented: issue 4)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("topology is not implemented yet (issue 4)")
		},
	}
}
