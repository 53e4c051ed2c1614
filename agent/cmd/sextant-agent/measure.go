package main

import (
	"errors"

	"github.com/spf13/cobra"
)

func newMeasureCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "measure",
		Short: "Attach the eBPF meter to NICs for a while and print what it counted (not yet implemented: issue 3)",
		RunE: func(*cobra.Command, []string) error {
			return errors.New("measure is not implemented yet (issue 3)")
		},
	}
}
